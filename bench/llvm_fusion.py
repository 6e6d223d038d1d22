"""Fused elementwise loop: `tanh(x * a + b) * c + x` over 10 million f32, DL llvm vs numpy op by op vs DL
interpreter, measured side by side in one run; then the fused reduction `sum(tanh(x * a + b))` against
numpy. Run: .venv/bin/python bench/llvm_fusion.py"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
from dl import pipeline
from dl.codegen import native

SOURCE = """
fn f(x: f32[n], a: f32, b: f32, c: f32) -> f32[n] { return tanh(x * a + b) * c + x }
fn total(x: f32[n], a: f32, b: f32) -> f32 { return sum(tanh(x * a + b)) }
fn main() { }
"""
N = 10_000_000


def best(run, repeats: int = 7) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    path = Path(tempfile.mkdtemp()) / "fused.dl"
    path.write_text(SOURCE, encoding="utf-8")
    _, typed = pipeline.prepare(pipeline.load(str(path)))
    backend = native.compile_program(typed, cache=False)
    keys = {kernel.name: key for key, kernel in backend.lowered.kernels.items()}
    body = backend.bodies[keys["f"]]
    x = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    a, b, c = np.float32(1.5), np.float32(0.25), np.float32(0.7)
    frame = [None, x, a, b, c]
    fused = best(lambda: body(frame))
    ops = best(lambda: np.tanh(x * a + b) * c + x)
    expected = np.tanh(x * a + b) * c + x
    error = np.max(np.abs(frame[0] - expected))
    print(f"DL llvm fused : {fused * 1e3:8.2f} ms")
    print(f"numpy op by op: {ops * 1e3:8.2f} ms")
    print(f"ratio numpy / fused: {ops / fused:.2f}x   max absolute difference {error:.2e}")
    reduce = backend.bodies[keys["total"]]
    frame = [None, x, a, b]
    fused = best(lambda: reduce(frame))
    ops = best(lambda: np.sum(np.tanh(x * a + b)))
    difference = abs(float(frame[0]) - float(np.sum(np.tanh(x * a + b))))
    print(f"sum(tanh(x * a + b)): DL llvm fused {fused * 1e3:.2f} ms, numpy {ops * 1e3:.2f} ms, ", end="")
    print(f"ratio {ops / fused:.2f}x, absolute difference {difference:.2e}")


if __name__ == "__main__":
    main()
