"""The LLVM backend's compile cache: compiling a program's scalar functions against loading them back.

    python bench/llvm_cache.py [--repeats 7]

The program has 7 compiled functions (loops, recursion, integer and float arithmetic, math built-ins).
Each repeat uses a fresh cache directory and times `native.compile_program` (lowering included) three
ways: a cache miss (lower, build LLVM IR, optimise at O3, emit object code, store it, link it), a hit
(lower, check the entry's hash, link the stored object code) and `--no-cache`. Best and median of
`repeats`. Not a test: nothing here is collected by pytest.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from dl import pipeline
from dl.codegen import native

SOURCE = """
fn escape(cr: f64, ci: f64, limit: i64) -> i64 {
    let zr = 0.0f64
    let zi = 0.0f64
    let n = 0
    while n < limit and zr * zr + zi * zi <= 4.0 {
        let t = zr * zr - zi * zi + cr
        zi = 2.0 * zr * zi + ci
        zr = t
        n += 1
    }
    return n
}
fn fib(n: i64) -> i64 { if n < 2 { return n } return fib(n - 1) + fib(n - 2) }
fn gcd(a: i64, b: i64) -> i64 { while b != 0 { let t = b; b = a % b; a = t } return a }
fn steps(n: i64) -> i64 {
    let c = 0
    while n != 1 { if n % 2 == 0 { n = n // 2 } else { n = 3 * n + 1 } c += 1 }
    return c
}
fn newton(x: f64) -> f64 {
    let y = x
    let s = 0
    while abs(y * y - x) > 1e-12f64 * x and s < 100 { y = 0.5 * (y + x / y); s += 1 }
    return y
}
fn f(x: f64) -> f64 { return exp(x) * 0.5 + log(x + 2.0) - tanh(x) * sin(x) + cos(x) + sigmoid(x) }
fn h(n: i64) -> f32 { let t = 0.0; let k = 1.0; for i in 1..n { t += 1.0 / k; k += 1.0 } return t }
fn main() { print(escape(0.3f64, 0.5f64, 100), fib(20), gcd(1071, 462), steps(27), newton(2.0f64), f(0.5f64), h(100)) }
"""


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--repeats", type=int, default=7)
    repeats = options.parse_args().repeats
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "program.dl"
        path.write_text(SOURCE, encoding="utf-8")
        _, typed = pipeline.prepare(pipeline.load(str(path)))
        times: dict[str, list[float]] = {"miss": [], "hit": [], "no cache": []}
        for repeat in range(repeats):
            os.environ["DL_CACHE_DIR"] = str(Path(scratch) / f"cache{repeat}")
            for name, cache, from_cache in (("miss", True, False), ("hit", True, True), ("no cache", False, False)):
                start = time.perf_counter()
                backend = native.compile_program(typed, cache)
                times[name].append(time.perf_counter() - start)
                assert backend.native.from_cache is from_cache
        print(f"{len(backend.lowered.functions)} compiled functions, best and median of {repeats}:")
        for name, values in times.items():
            print(f"  {name:9} {min(values) * 1e3:6.1f} ms  {statistics.median(values) * 1e3:6.1f} ms")


if __name__ == "__main__":
    main()
