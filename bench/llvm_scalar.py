"""A scalar `while` loop compiled by the LLVM backend, beside the interpreter and the same program in C.

    python bench/llvm_scalar.py [--size 200] [--limit 256] [--repeats 3] [--points 20000] [--steps 200]

The program counts Mandelbrot escape iterations over a `size` x `size` grid of points (at most `limit`
iterations each), all in scalar f64 code: one DL function `total(size, limit)` with nested `for` loops
calling `escape(cr, ci, limit)`, a `while` loop. The three systems compute the same count:

- DL on `--backend llvm` (the function compiled with LLVM at O3, called once from the interpreter);
- DL on the interpreter (on a smaller grid, then scaled per point: it is several hundred times slower);
- the same two functions in C, written to a temporary directory and compiled with `gcc -O2`.

Times are the best of `repeats` runs (compile time excluded for both compilers), per grid point.

Then the gradient: `grad` of a scalar `while` loop (`y = y - 0.1 sin(y) x`, `steps` times), whose
derivative code records the iterates on a tape and walks it back, summed over `points` starting points
by a compiled DL loop; against the same reverse mode written by hand in C (gcc -O2), and the interpreter.
Not a test: nothing here is collected by pytest.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from pathlib import Path

from dl import pipeline
from dl.codegen import native
from dl.interp import run as interpreter

DL_SOURCE = """
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

fn total(size: i64, limit: i64) -> i64 {
    let count = 0
    let step = 3.0f64 / 200.0f64
    let ci = -1.5f64
    for row in 0..size {
        let cr = -2.0f64
        for column in 0..size {
            count += escape(cr, ci, limit)
            cr = cr + step
        }
        ci = ci + step
    }
    return count
}
"""

C_SOURCE = """
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long escape(double cr, double ci, long limit) {
    double zr = 0.0, zi = 0.0;
    long n = 0;
    while (n < limit && zr * zr + zi * zi <= 4.0) {
        double t = zr * zr - zi * zi + cr;
        zi = 2.0 * zr * zi + ci;
        zr = t;
        n += 1;
    }
    return n;
}

__attribute__((noipa)) long total(long size, long limit) {
    long count = 0;
    double step = 3.0 / 200.0, ci = -1.5;
    for (long row = 0; row < size; row++) {
        double cr = -2.0;
        for (long column = 0; column < size; column++) { count += escape(cr, ci, limit); cr = cr + step; }
        ci = ci + step;
    }
    return count;
}

"""


GRADIENT_SOURCE = """
fn orbit(x: f64, steps: i64) -> f64 {
    let y = x
    let i = 0
    while i < steps {
        y = y - 0.1f64 * sin(y) * x
        i += 1
    }
    return y
}

fn total_grad(n: i64, steps: i64) -> f64 {
    let s = 0.0f64
    for k in 0..n {
        s += grad(orbit)(float(k, dtype=f64) * 0.001f64, steps)
    }
    return s
}
"""

# The same derivative by hand, as a C programmer writes reverse mode: the forward loop records each
# iterate on a tape (an array grown as needed), the backward loop walks it back.
C_GRADIENT_SOURCE = """
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double *tape = 0;
static long capacity = 0;

static double orbit_grad(double x, long steps) {
    double y = x;
    long count = 0;
    for (long i = 0; i < steps; i++) {
        if (count == capacity) {
            capacity = capacity ? 2 * capacity : 16;
            tape = realloc(tape, capacity * sizeof(double));
        }
        tape[count++] = y;
        y = y - 0.1 * sin(y) * x;
    }
    double d_y = 1.0, d_x = 0.0;
    while (count > 0) {
        double yi = tape[--count];
        d_x += -d_y * 0.1 * sin(yi);
        d_y = d_y - d_y * x * 0.1 * cos(yi);
    }
    return d_x + d_y;
}

__attribute__((noipa)) double total_grad(long n, long steps) {
    double s = 0.0;
    for (long k = 0; k < n; k++) s += orbit_grad((double)k * 0.001, steps);
    return s;
}

"""


def timing_main(result_type: str, function: str, shown: str) -> str:
    """A C `main` calling `function(argv[1], argv[2])` `argv[3]` times and printing its result (with
    printf's `shown`) and the best time in seconds."""
    return f"""
int main(int argc, char **argv) {{
    volatile long first = atol(argv[1]);  /* read afresh per repeat: the call cannot be hoisted */
    long second = atol(argv[2]), repeats = atol(argv[3]);
    double best = 1e30;
    {result_type} result = 0;
    for (long r = 0; r < repeats; r++) {{
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        result = {function}(first, second);
        clock_gettime(CLOCK_MONOTONIC, &b);
        double seconds = (b.tv_sec - a.tv_sec) + 1e-9 * (b.tv_nsec - a.tv_nsec);
        if (seconds < best) best = seconds;
    }}
    printf("{shown} %.9f\\n", result, best);
    return 0;
}}
"""


def best_of(repeats: int, action) -> tuple[object, float]:
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = action()
        best = min(best, time.perf_counter() - start)
    return result, best


def dl_program(directory: Path, name: str = "mandelbrot", source: str = DL_SOURCE):
    path = directory / f"{name}.dl"
    path.write_text(source, encoding="utf-8")
    return pipeline.prepare(pipeline.load(str(path)))


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--size", type=int, default=200)
    options.add_argument("--limit", type=int, default=256)
    options.add_argument("--repeats", type=int, default=3)
    options.add_argument("--points", type=int, default=20000, help="gradients taken (the gradient benchmark)")
    options.add_argument("--steps", type=int, default=200, help="iterations of the differentiated loop")
    arguments = options.parse_args()
    size, limit, repeats = arguments.size, arguments.limit, arguments.repeats
    with tempfile.TemporaryDirectory() as folder:
        directory = Path(folder)
        program, typed = dl_program(directory)
        backend = native.compile_program(typed)
        compiled_count, compiled_time = best_of(
            repeats, lambda: interpreter.call(program, "total", [size, limit], typed, backend.bodies)
        )
        small = max(size // 8, 1)
        interpreted_count, interpreted_time = best_of(
            1, lambda: interpreter.call(program, "total", [small, limit], typed)
        )
        check_count = interpreter.call(program, "total", [small, limit], typed, backend.bodies)
        assert check_count == interpreted_count, (check_count, interpreted_count)
        (directory / "mandelbrot.c").write_text(C_SOURCE + timing_main("long", "total", "%ld"), encoding="utf-8")
        subprocess.run(["gcc", "-O2", "-o", str(directory / "mandelbrot"), str(directory / "mandelbrot.c")], check=True)
        output = subprocess.run(
            [str(directory / "mandelbrot"), str(size), str(limit), str(repeats)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()
        c_count, c_time = int(output[0]), float(output[1])
    assert c_count == compiled_count, (c_count, compiled_count)
    points = size * size
    rows = [
        ("C, gcc -O2", c_time / points),
        ("DL, --backend llvm", compiled_time / points),
        ("DL, interpreter", interpreted_time / (small * small)),
    ]
    print(f"Mandelbrot escape counts, {size}x{size} points, at most {limit} iterations (count {c_count})")
    print(f"{'system':<22}{'ns/point':>12}{'vs C':>10}")
    for name, seconds in rows:
        print(f"{name:<22}{seconds * 1e9:>12.1f}{seconds / rows[0][1]:>10.2f}")
    gradient(arguments.points, arguments.steps, repeats)


def gradient(points: int, steps: int, repeats: int) -> None:
    """`grad` of a scalar `while` loop (its iterates on a tape), compiled, against the same reverse mode
    written by hand in C: the sum of d orbit / dx over `points` starting points."""
    with tempfile.TemporaryDirectory() as folder:
        directory = Path(folder)
        program, typed = dl_program(directory, "orbit", GRADIENT_SOURCE)
        backend = native.compile_program(typed)
        interpreter.call(program, "total_grad", [1, steps], typed, backend.bodies)  # compiles it
        compiled, compiled_time = best_of(
            repeats, lambda: interpreter.call(program, "total_grad", [points, steps], typed, backend.bodies)
        )
        small = max(points // 50, 1)
        interpreted, interpreted_time = best_of(
            1, lambda: interpreter.call(program, "total_grad", [small, steps], typed)
        )
        check = interpreter.call(program, "total_grad", [small, steps], typed, backend.bodies)
        assert abs(check - interpreted) <= 1e-9 * abs(interpreted), (check, interpreted)
        source = C_GRADIENT_SOURCE + timing_main("double", "total_grad", "%.17g")
        (directory / "orbit.c").write_text(source, encoding="utf-8")
        binary = str(directory / "orbit")
        subprocess.run(["gcc", "-O2", "-o", binary, str(directory / "orbit.c"), "-lm"], check=True)
        output = subprocess.run(
            [binary, str(points), str(steps), str(repeats)], check=True, capture_output=True, text=True
        ).stdout.split()
        c_value, c_time = float(output[0]), float(output[1])
    assert abs(c_value - compiled) <= 1e-9 * abs(c_value), (c_value, compiled)
    rows = [
        ("C, gcc -O2 (by hand)", c_time / points),
        ("DL, --backend llvm", compiled_time / points),
        ("DL, interpreter", interpreted_time / small),
    ]
    print(f"\ngrad of a {steps}-step while loop (its iterates on a tape), {points} points (sum {c_value:.12g})")
    print(f"{'system':<22}{'us/gradient':>12}{'vs C':>10}")
    for name, seconds in rows:
        print(f"{name:<22}{seconds * 1e6:>12.2f}{seconds / rows[0][1]:>10.2f}")


if __name__ == "__main__":
    main()
