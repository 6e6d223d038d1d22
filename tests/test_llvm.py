"""The LLVM backend (codegen/): the same programs on `--backend interp` and `--backend llvm` print the same.

Arithmetic, comparisons and sqrt are correctly rounded on both backends, so those outputs must be equal
exactly. The transcendental built-ins (exp, tanh, sin, ...) come from numpy on the interpreter and from
libm in compiled code, which may differ in the last bit: outputs using them are compared to a relative
tolerance of 1e-12 (f64) and 1e-6 (f32).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("llvmlite", reason="the LLVM backend needs llvmlite")

from dl import pipeline
from dl.cli import main as dlrun
from dl.codegen import cache, native
from dl.lang import ast
from dl.lang import einsum as einsum_spec
from dl.lang.cache import cache_directory as cache_directory_of
from dl.runtime.randomness import categorical_samples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


@pytest.fixture(autouse=True)
def cache_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test compiles into its own cache, never the user's."""
    directory = tmp_path / "cache"
    monkeypatch.setenv("DL_CACHE_DIR", str(directory))
    return directory


PROGRAMS = {
    "newton": """
fn newton(x: f64) -> f64 {
    let y = x
    let steps = 0
    while abs(y * y - x) > 1e-12f64 * x and steps < 100 { y = 0.5 * (y + x / y); steps += 1 }
    return y
}
fn main() { for i in 1..6 { print(newton(float(i, dtype=f64) * 3.7f64)) } }
""",
    "mandelbrot": """
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
    for row in 0..size {
        for column in 0..size {
            let cr = -2.0f64
            let ci = -1.25f64
            let k = 0
            while k < column { cr = cr + 2.5 / 24.0; k += 1 }
            k = 0
            while k < row { ci = ci + 2.5 / 24.0; k += 1 }
            count += escape(cr, ci, limit)
        }
    }
    return count
}
fn main() { print(total(24, 200), escape(0.3f64, 0.5f64, 1000), escape(-0.75f64, 0.1f64, 1000)) }
""",
    "fib": """
fn fib(n: i64) -> i64 { if n < 2 { return n } return fib(n - 1) + fib(n - 2) }
fn main() { print(fib(0), fib(1), fib(22)) }
""",
    "collatz": """
fn steps(n: i64) -> i64 {
    let count = 0
    while n != 1 { if n % 2 == 0 { n = n // 2 } else { n = 3 * n + 1 } count += 1 }
    return count
}
fn longest(limit: i64) -> i64 {
    let best = 0
    let at = 1
    for n in 1..limit { let s = steps(n); if s > best { best = s; at = n } }
    return at
}
fn main() { print(steps(27), longest(3000)) }
""",
    "gcd": """
fn gcd(a: i64, b: i64) -> i64 { while b != 0 { let t = b; b = a % b; a = t } return a }
fn floors(a: i64, b: i64) -> i64 { return a // b * 1000 + a % b }
fn main() { print(gcd(1071, 462), gcd(-48, 18), gcd(48, -18), floors(-7, 2), floors(7, -2), floors(-7, -2)) }
""",
    "control": """
fn mix(n: i64) -> i64 {
    let total = 0
    for i in 0..n {
        if i % 3 == 0 { continue }
        if i > 40 { break }
        let j = i
        while true { j -= 1; if j < i - 3 or j % 5 == 0 { break } total += j }
        if not (i % 2 == 0) and total > 10 { total -= 1 } else if i == 7 { total *= 2 } else { total += 1 }
    }
    return total
}
fn sign(x: f32) -> i64 { if x > 0.0 { return 1 } else if x < 0.0 { return -1 } return 0 }
fn both(a: bool, b: bool) -> bool { return a and not b or b and not a }
fn main() { print(mix(10), mix(100), sign(-2.5), sign(0.0), sign(3.0), both(true, false), both(true, true)) }
""",
    "conversions": """
fn mixed(x: f64, n: i64, b: bool) -> f64 {
    return x + float(n, dtype=f64) + float(b, dtype=f64) + float(int(x), dtype=f64)
}
fn narrow(x: f64, n: i64) -> f32 { return float(x) + float(n) + float(3) + float(2.5f64) }
fn truncate(x: f32, y: f64) -> i64 { return int(x) * 1000 + int(y) + int(2.7) + int(-2.7) + int(true) + int(7) }
fn main() {
    print(mixed(2.75f64, -3, true), mixed(-2.75f64, 4, false), narrow(0.1f64, 1152921573326323713))
    print(truncate(-3.9, 7.99f64), truncate(3.9, -7.99f64), truncate(0.0, -0.5f64), narrow(1e300f64, -5))
}
""",
    "inferred": """
fn twice(x: f64) { return x * 2.0 }
fn total(n: i64) { let t = 0; for i in 0..n { t += i * i } return t }
fn positive(x: f32) { return x > 0.0 }
fn validate(n: i64) { if n > 100 { return } let check = 1000 // n }
fn nothing() { }
fn use_all(n: i64) -> i64 {
    validate(n)
    nothing()
    if positive(float(n)) { return total(n) + int(twice(1.5f64)) }
    return 0
}
fn main() { print(twice(3.0f64), total(10), positive(-1.0), use_all(7), use_all(-2), validate(5)) }
""",
    "f32": """
fn harmonic(n: i64) -> f32 {
    let total = 0.0
    let k = 1.0
    for i in 1..n { total += 1.0 / k; k += 1.0 }
    return total
}
fn clamp(x: f32, low: f32, high: f32) -> f32 { return minimum(maximum(x, low), high) }
fn main() { print(harmonic(1000), clamp(2.5, 0.0, 1.0), clamp(-1.0, 0.0, 1.0), relu(-3.0), -relu(2.0)) }
""",
    # an i64 scalar (a Python int in the interpreter) meeting a float becomes that float through f64, as numpy
    # converts a Python int (2**60 + 2**36 + 1 rounds twice on the way to f32); an f32 meeting an f64 widens
    "promotions": """
fn scaled(n: i64) -> f32 { return n * 0.5 + 1.0 }
fn below(n: i64, x: f32) -> bool { return n < x and n < 2.5 }
fn wide(x: f32, y: f64) -> f64 { return x * y + maximum(x, y) }
fn main() {
    print(scaled(16777217), scaled(1152921573326323713), scaled(-3), below(2, 2.25), below(3, 4.0))
    print(wide(0.1, 0.1f64), wide(-2.5, 1.0f64))
}
""",
    # i32 wraps around as numpy's does; an i32 meeting an i64 computes in i64 (also wrapping), meeting a float
    # in that float; `//` and `%` round toward minus infinity, and the smallest i32 // -1 wraps to itself
    "i32": """
fn wrap(a: i32, b: i32) -> i32 { return a + b }
fn wrapmul(a: i32, b: i32) -> i32 { return a * b - 1i32 }
fn floors(a: i32, b: i32) -> i32 { return a // b * 1000i32 + a % b }
fn neg(a: i32) -> i32 { return -a }
fn mixed(a: i32, c: i64) -> i64 { return a + c * 2 - c // a }
fn widened(a: i32, c: i64) -> i64 { return c * a }
fn floats(a: i32, f: f32, g: f64) -> f64 { return float(a, dtype=f64) + a * g + float(f, dtype=f64) * a + a * 2.5 }
fn ops(a: i32, b: i32) -> i32 { return abs(a) + relu(b) + maximum(a, b) - minimum(a, 7) }
fn compare(a: i32, c: i64, f: f32) -> bool { return a < c and a > -3 and a <= f and a != 2 }
fn count(n: i32) -> i32 {
    let total: i32 = 0
    let k = 0i32
    while k < n { total += k * k; k += 1 }
    return total
}
fn whole(a: i32) -> i64 { return int(a) + 1 }
fn halfway(a: i32) -> f32 { return float(a) / 3.0 }
fn triangle(n: i32) -> i64 { let t = 0; for i in -2i32..n { t += i } return t }
fn main() {
    print(wrap(2147483647i32, 1i32), wrap(-2147483647i32 - 1i32, -1i32), wrap(5i32, -7i32))
    print(wrapmul(65536i32, 65536i32), wrapmul(46341i32, 46341i32))
    print(floors(-7i32, 2i32), floors(7i32, -2i32), floors(-7i32, -2i32), floors(7i32, 2i32))
    print(floors(-2147483647i32 - 1i32, -1i32), neg(-2147483647i32 - 1i32), neg(5i32))
    print(mixed(7i32, 4611686018427387000), mixed(-3i32, 10), widened(-2147483647i32 - 1i32, 4294967295))
    print(floats(16777217i32, 0.5, 0.25f64), floats(-3i32, 1.5, -2.0f64))
    print(ops(-2147483647i32 - 1i32, 3i32), ops(-4i32, -9i32), ops(12i32, 5i32))
    print(compare(1i32, 2, 1.5), compare(2i32, 5, 3.0), compare(-3i32, 1, 0.0))
    print(count(100i32), count(3000i32), whole(-2147483647i32 - 1i32), halfway(2147483647i32), triangle(100i32))
}
""",
}

MATH_PROGRAM = """
fn f(x: f64) -> f64 {
    let e = softplus(x * 20.0) + log1p(x * 0.4) + expm1(x) * erf(x)
    return exp(x) * 0.5 + log(x + 2.0) - tanh(x) * sin(x) + cos(x) + sigmoid(x) + sigmoid(-x) + e
}
fn g(x: f32) -> f32 {
    let trig = tan(x * 0.3) + asin(x * 0.25) - acos(x * 0.3) * atan(x)
    return exp(x) + log(abs(x) + 1.0) + tanh(x) + sqrt(abs(x)) + x ** 2.0 + softplus(x) - erf(x) + expm1(x) + trig
}
fn main() { for i in 0..7 { let x = float(i, dtype=f64) * 0.7f64 - 2.0f64; print(f(x), g(float(i) - 3.0)) } }
"""


def run_cli(tmp_path: Path, source: str, *flags: str, capsys) -> tuple[int, str, str]:
    path = tmp_path / "program.dl"
    path.write_text(source, encoding="utf-8")
    capsys.readouterr()
    status = dlrun([*flags, str(path)])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def both_backends(tmp_path: Path, source: str, capsys) -> tuple[str, str]:
    status, interpreted, err = run_cli(tmp_path, source, "--backend", "interp", capsys=capsys)
    assert status == 0, err
    status, compiled, err = run_cli(tmp_path, source, "--backend", "llvm", capsys=capsys)
    assert status == 0, err
    return interpreted, compiled


def compiled_names(source: str, tmp_path: Path) -> set[str]:
    path = tmp_path / "program.dl"
    path.write_text(source, encoding="utf-8")
    _, typed = pipeline.prepare(pipeline.load(str(path)))
    lowered = native.compile_program(typed).lowered
    return {lowered.declarations[key][0].name for key in lowered.functions}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_programs_print_the_same_on_both_backends(name: str, tmp_path: Path, capsys) -> None:
    interpreted, compiled = both_backends(tmp_path, PROGRAMS[name], capsys)
    assert compiled == interpreted
    assert compiled_names(PROGRAMS[name], tmp_path) == compiled_functions_of(name)


def compiled_functions_of(name: str) -> set[str]:
    """Every function but `main` (which prints) is compiled."""
    return set(re.findall(r"^fn (\w+)", PROGRAMS[name], re.MULTILINE)) - {"main"}


BOOL_TENSOR_LOGIC = """
fn inside(x: i64[N], lo: i64, hi: i64) -> bool[N] {
    return x >= lo and x < hi
}
fn outside(x: f64[N]) -> bool[N] {
    return x < -1.0 or x > 1.0 or not isfinite(x)
}
fn main() {
    print(inside(arange(6), 1, 4))
    print(outside([-2.0f64, 0.5f64, 3.0f64, 1.0f64 / 0.0f64]))
}
"""


def test_and_or_of_bool_tensors_are_elementwise_and_compiled(tmp_path: Path, capsys) -> None:
    interpreted, compiled = both_backends(tmp_path, BOOL_TENSOR_LOGIC, capsys)
    assert compiled == interpreted == "[False  True  True  True False False]\n[ True False  True  True]\n"
    _, _, err = run_cli(tmp_path, BOOL_TENSOR_LOGIC, "--backend", "llvm", "--explain-backend", capsys=capsys)
    assert "`inside`(i64[6], i64, i64) compiled" in err and "`outside`(f64[4]) compiled" in err


ARANGE_STEPS = """
fn steps(n: i64) -> (i64[_], i64[_], i64[_]) {
    return (arange(1, n, 3), arange(n, -n, -4), arange(2, n, 100))
}
fn main() {
    print(steps(11))
    print(steps(0))
}
"""


def test_arange_with_a_step_compiles_and_counts_as_numpy(tmp_path: Path, capsys) -> None:
    interpreted, compiled = both_backends(tmp_path, ARANGE_STEPS, capsys)
    assert compiled == interpreted
    assert compiled.splitlines()[0] == "([ 1  4  7 10], [11  7  3 -1 -5 -9], [2])"
    _, _, err = run_cli(tmp_path, ARANGE_STEPS, "--backend", "llvm", "--explain-backend", capsys=capsys)
    assert "`steps`(i64 = 11) compiled" in err


ARANGE_FLOATS = """
fn tenths() -> (f32[_], f64[_], f32[_]) {
    return (arange(0.0, 1.0, 0.1), arange(1.0, -0.5, -0.3, dtype=f64), arange(2, 7.0))
}
fn scaled(n: i64) -> f32[_] { return arange(n, dtype=f32) * 0.5 }
fn data(lo: f32) -> f32[_] { return arange(lo, 2.0, 0.5) }
fn main() {
    let (t, w, c) = tenths()
    print(len(t), t[3], t[9], w, c)
    print(scaled(3), scaled(0), data(0.25))
}
"""


def test_arange_of_floats_compiles_from_constant_bounds_as_interpreted(tmp_path: Path, capsys) -> None:
    """Float bounds known when compiled give the interpreter's values (f64 `a + i step`, rounded once); bounds
    known only at run time (the length is the size) leave the function to the interpreter, at its span."""
    interpreted, compiled = both_backends(tmp_path, ARANGE_FLOATS, capsys)
    assert compiled == interpreted
    assert (
        compiled
        == "10 0.3 0.90000004 [ 1.   0.7  0.4  0.1 -0.2] [2. 3. 4. 5. 6.]\n[0.  0.5 1. ] [] [0.25 0.75 1.25 1.75]\n"
    )
    _, _, err = run_cli(tmp_path, ARANGE_FLOATS, "--backend", "llvm", "--explain-backend", capsys=capsys)
    assert "`tenths`() compiled" in err and "`scaled`(i64 = 3) compiled" in err
    assert "`data`(f32) interpreted: an `arange` of float bounds known only at run time" in err


LAYOUTS_MET_AGAIN = """
struct P { a: f32[2], b: f32[3] }

fn scaled(x) {
    return (x * 2.0, x + 1.0, sum(x))
}

fn doubled(x) {
    return x * 2.0
}

fn head(n: i64, x: f32[_]) -> f32[_] {
    return x[0:n] * 1.0
}

fn moved(p: P, lr: f32) -> P {
    return P { a: p.a - lr, b: p.b * lr }
}

fn main() {
    let p = P { a: ones(2), b: ones(3) }
    for i in 0..3 {
        let (a, b, s) = scaled(ones(3) * float(i))
        let (c, d, t) = scaled(ones(2, 2, dtype=f64))
        a[0] = 100.0
        b[1] = -1.0
        print(a, b, s, c[1], d[0], t)
        print(head(2, ones(5)), head(3, ones(5) * 2.0), head(2, ones(4)))
        p = moved(moved(p, 0.5), 2.0)
        print(p.a, p.b, doubled((1.0, ones(2)))[1], doubled(i))
    }
}
"""


def test_layouts_met_again_and_results_written_after(tmp_path: Path, capsys) -> None:
    """A compiled function called from an interpreted loop finds the layouts it met before by a key of plain
    tuples (each call of other shapes, dtypes, structure or compiled-in integers its own), and its small results
    are views of one block: writing into one leaves the others as they were. As interpreted."""
    interpreted, compiled = both_backends(tmp_path, LAYOUTS_MET_AGAIN, capsys)
    assert compiled == interpreted
    assert "[100.   0.   0.] [ 1. -1.  1.] 0.0" in compiled and "[100.   4.   4.] [ 3. -1.  3.] 6.0" in compiled
    _, _, err = run_cli(tmp_path, LAYOUTS_MET_AGAIN, "--backend", "llvm", "--explain-backend", capsys=capsys)
    for layout in ("`scaled`(f32[3]) compiled", "`scaled`(f64[2, 2]) compiled", "`moved`(P, f32) compiled"):
        assert layout in err, err
    assert "`head`(i64 = 2, f32[5]) compiled" in err and "`head`(i64 = 3, f32[5]) compiled" in err, err


FOLDED_FLOATS = """
fn grid() -> (f32[_], f64[_], f32[_]) {
    let third = arange(0.0, 1.0, 1.0 / 3.0, dtype=f64)
    return (arange(0.0, 1.0, 1.0 / 64.0), third, arange(0.0, 2.0 * 0.7, 0.1f32 * 3.0))
}
fn scaled(x: f32[3], y: f64[3]) -> (f32[3], f64[3], f32[3]) {
    let s = 0.0f32
    if 1.0f32 / 3.0f32 > 0.3f32 {
        s = 1.5f32 * 2.0f32 - 0.25
    }
    return (x * (1.0 / 3.0), y * (1.0 / 3.0 - 0.1), x * s)
}
fn main() {
    let (a, b, c) = grid()
    print(len(a), sum(a), a[63], b, c)
    let (p, q, r) = scaled(ones(3), ones(3, dtype=f64))
    print(p, q, r, q[0] - (1.0f64 / 3.0f64 - 0.1f64))
}
"""


def test_float_arithmetic_of_constants_is_computed_when_compiling(tmp_path: Path, capsys) -> None:
    """`arange(0.0, 1.0, 1.0 / 64.0)`: float constants' arithmetic is computed when compiling, in their dtype
    (an unsuffixed pair as Python numbers, still adapting), as the interpreter computes it, so the bounds are
    known and the function compiles (it was interpreted: bounds known only at run time); a branch on such a
    comparison is known too."""
    interpreted, compiled = both_backends(tmp_path, FOLDED_FLOATS, capsys)
    assert compiled == interpreted
    lines = compiled.splitlines()
    assert lines[0].startswith("64 31.5 0.984375 [0.         0.33333333 0.66666667]")
    assert lines[-1].endswith(" 0.0"), lines  # (1/3 - 0.1 folded in f64, as Python and numpy do)
    _, _, err = run_cli(tmp_path, FOLDED_FLOATS, "--backend", "llvm", "--explain-backend", capsys=capsys)
    assert "`grid`() compiled" in err and "`scaled`(f32[3], f64[3]) compiled" in err, err


DECIDED_CONDITIONS = """
fn pick(x: f32[12], size: i64, stride: i64) -> f32[_] {
    if stride == 0 or stride == size and size > 1 {
        return reshape(x, -1, size)[:, 0]
    }
    return x[0:size]
}
fn main() {
    let x = float(arange(12))
    print(pick(x, 3, 0), pick(x, 4, 4), pick(x, 2, 5), pick(x, 1, 1))
}
"""


def test_and_or_of_conditions_known_when_compiled_decide_the_branch(tmp_path: Path, capsys) -> None:
    """`and`/`or` of comparisons of integers the function is compiled for are decided when compiling: only the
    branch taken is compiled, so the two branches may return different shapes (they were refused as
    "returns of different types or shapes", the function left to the interpreter)."""
    interpreted, compiled = both_backends(tmp_path, DECIDED_CONDITIONS, capsys)
    assert compiled == interpreted == "[0. 3. 6. 9.] [0. 4. 8.] [0. 1.] [0.]\n"
    _, _, err = run_cli(tmp_path, DECIDED_CONDITIONS, "--backend", "llvm", "--explain-backend", capsys=capsys)
    assert "interpreted" not in err.replace("`main`() interpreted", ""), err
    assert "`pick`(f32[12], i64 = 3, i64 = 0) compiled" in err


def test_explain_backend_says_where_the_code_compiled_when_called_came_from(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    monkeypatch.setenv("DL_CACHE_DIR", str(tmp_path / "cache"))
    runs = [run_cli(tmp_path, ARANGE_STEPS, "--backend", "llvm", "--explain-backend", capsys=capsys) for _ in "ab"]
    runs.append(run_cli(tmp_path, ARANGE_STEPS, "--backend", "llvm", "--explain-backend", "--no-cache", capsys=capsys))
    assert [err.splitlines()[-1] for _, _, err in runs] == [
        "native code for the layouts compiled when called: 2 compiled by LLVM, saved to the compile cache",
        "native code for the layouts compiled when called: 2 loaded from the compile cache",
        "native code for the layouts compiled when called: 2 compiled by LLVM (--no-cache)",
    ]


def numbers(text: str) -> list[float]:
    return [float(word) for word in text.split()]


def test_math_builtins_agree_within_tolerance(tmp_path: Path, capsys) -> None:
    interpreted, compiled = both_backends(tmp_path, MATH_PROGRAM, capsys)
    assert compiled_names(MATH_PROGRAM, tmp_path) == {"f", "g"}
    assert numbers(compiled) == pytest.approx(numbers(interpreted), rel=1e-6)
    f_interpreted, f_compiled = numbers(interpreted)[::2], numbers(compiled)[::2]
    assert f_compiled == pytest.approx(f_interpreted, rel=1e-12)


STEPS_PROGRAM = """
fn steps(x: f32[N]) -> f32[N] { return floor(x) + 10.0 * ceil(x) + 100.0 * round(x) + 1000.0 * sign(x) }
fn steps64(x: f64[N]) -> f64[N] { return floor(x) + 10.0 * ceil(x) + 100.0 * round(x) + 1000.0 * sign(x) }
fn signs(x: i64[N]) -> i64[N] { return sign(x) * 3 }
fn signs32(x: i32[N]) -> i32[N] { return sign(x) }
fn one(x: f64) -> f64 { return round(x) + sign(x) * 10.0 + floor(x) * ceil(x) * 100.0 }
fn whole(x: i64) -> i64 { return sign(x) }
fn reciprocal_sign(x: f32[N]) -> f32[N] { return 1.0 / sign(x) }  # sign(-0.0) is +0.0, as numpy's: 1 / it is inf
fn reciprocal_sign64(x: f64) -> f64 { return 1.0 / sign(x) }
fn main() {
    print(reciprocal_sign([-0.0, 0.0, -2.0]), reciprocal_sign64(-0.0f64))
    let x = (arange(44) - 22.0) / 4.0  # every quarter from -5.5: halves round to even
    print(steps(x), steps64(float(x, dtype=f64)))
    print(steps([0.0 / 0.0, 1.0 / 0.0, -1.0 / 0.0]))
    print(signs(arange(41) - 20), signs32([2i32, 0i32, -5i32, 7i32, -1i32, 3i32, 0i32, 9i32, -9i32]))
    for i in 0..9 { print(one(float(i, dtype=f64) * 0.5f64 - 2.0f64), whole(i - 4)) }
}
"""


def test_step_functions_compile_and_agree_exactly(tmp_path: Path, capsys) -> None:
    """floor, ceil, round (halves to even) and sign: vector loops of both float dtypes and integers, scalars."""
    interpreted, compiled = both_backends(tmp_path, STEPS_PROGRAM, capsys)
    assert compiled == interpreted
    assert compiled.startswith("[inf inf -1.] inf\n")
    status, _, explained = run_cli(tmp_path, STEPS_PROGRAM, "--backend", "llvm", "--explain-backend", capsys=capsys)
    assert status == 0 and "interpreted" not in explained.replace("`main`() interpreted", "")
    for name in ("steps", "steps64"):
        assert f"`{name}` compiled: one fused elementwise loop" in explained
    for name in ("signs", "signs32"):
        assert f"`{name}`(" in explained and "compiled" in explained
    # -5.5: floor -6, ceil -5, round -6 (to even), sign -1; -4.5 rounds to -4
    assert "[-1656. -1556. -1555. -1545. -1445. -1445." in " ".join(interpreted.split())


VARIANCE_PROGRAM = """
fn stats(x: f32[A, B]) -> (f32, f32[B], f32[A, 1], f32) {
    return (var(x), std(x, axis=0, correction=1), var(x, axis=1, keepdims=true), std(x, axis=(0, 1)))
}
fn stats64(x: f64[A, B]) -> (f64, f64[A]) { return (var(x, correction=1), std(x, axis=-1, correction=0.5)) }
fn loss(x: f32[A, B]) -> f32 { return sum(var(x, axis=1)) + 2.0 * sum(std(x, axis=0, correction=1)) }
fn degenerate(x: f32[N]) -> f32 { return var(x, correction=2) }
fn main() {
    let y = reshape(float(arange(12)), 3, 4) * 0.37 + 0.1
    let z = y * y
    print(stats64(float(z, dtype=f64) / 3.0))
    print(stats(z))
    print(degenerate([1.0, 2.0]), degenerate([1.0, 1.0]), degenerate([1.0, 2.0, 4.0]), loss(z))
    print("derivative:", grad(loss)(z))
}
"""


def test_var_and_std_compile_and_agree_exactly(tmp_path: Path, capsys) -> None:
    """Both compute in f64 and round to the tensor's dtype: the same f32 digits (f64 sums, added in another order,
    may differ in the last digit; so may the derivative's own f32 arithmetic)."""
    interpreted, compiled = both_backends(tmp_path, VARIANCE_PROGRAM, capsys)

    def parts(text: str) -> tuple[list[float], str, list[float]]:
        in_f64, rest = text.split("\n", 1)
        in_f32, derivative = rest.split("derivative:")
        values = [float(n) for n in re.findall(r"[-\d.e+]*\d", in_f64 + derivative)]
        return values[:4], in_f32, values[4:]

    f64_compiled, f32_compiled, derivative_compiled = parts(compiled)
    f64_interpreted, f32_interpreted, derivative_interpreted = parts(interpreted)
    assert f32_compiled == f32_interpreted
    assert "inf nan 4.6666665" in f32_compiled  # 14/3, correctly rounded to f32
    assert f64_compiled == pytest.approx(f64_interpreted, rel=1e-14)
    assert len(derivative_compiled) == 12
    assert derivative_compiled == pytest.approx(derivative_interpreted, rel=1e-6)
    status, _, explained = run_cli(tmp_path, VARIANCE_PROGRAM, "--backend", "llvm", "--explain-backend", capsys=capsys)
    assert status == 0
    for name in ("stats", "stats64", "loss", "degenerate", "loss_grad"):
        assert f"`{name}`(" in explained and f"`{name}`(f" in explained
    assert explained.count(" interpreted") == 1  # main, which prints


def test_gradient_code_is_compiled_and_agrees(tmp_path: Path, capsys) -> None:
    source = """
fn loss(x: f64) -> f64 { let y = x * x * 3.0 - x; if y > 1.0 { y = y * tanh(x) } return y + exp(-x) }
fn main() { for i in 0..5 { let x = float(i, dtype=f64) * 0.6f64 - 1.0f64; print(loss(x), grad(loss)(x)) } }
"""
    interpreted, compiled = both_backends(tmp_path, source, capsys)
    assert numbers(compiled) == pytest.approx(numbers(interpreted), rel=1e-12)
    assert {"loss", "loss_grad"} <= compiled_names(source, tmp_path)


def test_a_gradient_passed_as_a_function_is_compiled_as_the_gradient_not_the_function(tmp_path: Path, capsys) -> None:
    # `f_grad_wrt_1` has `f`'s span (it is written from it): compiled code found `f` by the span alone
    source = """
fn f(a: f64[3], w: f64[3, 3]) -> f64 { let c = a @ w; return sum(tanh(c) * c) }
fn apply(d, x, w) { return d(x, w) }
fn main() {
    let w = reshape(sin(float(arange(9), dtype=f64) * 0.7 + 0.3), 3, 3)
    let v = sin(float(arange(3), dtype=f64) * 0.7 + 0.5)
    print(apply(grad(f, wrt=1), v, w), apply(grad(f), v, w), apply(f, v, w))
}
"""
    interpreted, compiled = both_backends(tmp_path, source, capsys)
    found = [numbers(re.sub(r"[\[\]]", " ", text)) for text in (interpreted, compiled)]
    assert len(found[0]) == 9 + 3 + 1
    assert found[1] == pytest.approx(found[0], rel=1e-12)


EINSUMS = """
fn filled(n: i64, offset: f32) -> f32[_] { return sin(float(arange(n)) * 0.7 + offset) }
fn pool(rows: f32[I, H], x: f32[N, C, H, W], columns: f32[J, W]) -> f32[N, C, I, J] {
    return einsum("ih,nchw,jw->ncij", rows, x, columns)
}
fn shared(a: f32[A, B], b: f32[B, C], d: f32[B, C, D]) -> f32[A, D] { return einsum("ab,bc,bcd->ad", a, b, d) }
fn chain(a: f32[A, B], b: f32[B, C], c: f32[B, D], e: f32[E]) -> f32[A, D, E] {
    return einsum("ab,bc,bd,e->ade", a, b, c, e)
}
fn scaled(a: f32[A, B], b: f32[B, C], d: f32[C, D], s: f32) -> f32[A, D] { return einsum("ab,bc,cd,->ad", a, b, d, s) }
fn counts(a: i64[A, B], b: i64[B, C], d: i64[C, D]) -> i64[A, D] { return einsum("ab,bc,cd->ad", a, b, d) }
fn pool_loss(rows: f32[I, H], x: f32[N, C, H, W], columns: f32[J, W], weights: f32[N, C, I, J]) -> f32 {
    return sum(einsum("ih,nchw,jw->ncij", rows, x, columns) * weights)
}
fn chain_loss(a: f32[A, B], b: f32[B, C], c: f32[B, D], e: f32[E]) -> f32 {
    let y = einsum("ab,bc,bd,e->ade", a, b, c, e)
    return sum(y * y)
}
fn main() {
    let rows = reshape(filled(12, 0.1), 2, 6)
    let x = reshape(filled(216, 0.2), 2, 3, 6, 6)
    let columns = reshape(filled(12, 0.3), 2, 6)
    let weights = reshape(filled(24, 0.4), 2, 3, 2, 2)
    let a = reshape(filled(12, 0.5), 3, 4)
    let b = reshape(filled(20, 0.6), 4, 5)
    let c = reshape(filled(24, 0.7), 4, 6)
    let d = reshape(filled(120, 0.8), 4, 5, 6)
    let e = filled(2, 0.9)
    print(pool(rows, x, columns))
    print(shared(a, b, d))
    print(chain(a, b, c, e))
    print(scaled(a, b, d[0], 2.5))
    print(counts(reshape(arange(12), 3, 4), reshape(arange(20), 4, 5), reshape(arange(30), 5, 6)))
    print(grad(pool_loss, wrt=(0, 1, 2))(rows, x, columns, weights))
    print(grad(chain_loss, wrt=(0, 1, 2, 3))(a, b, c, e))
}
"""


def einsums_in_numpy() -> list[np.ndarray]:
    """What EINSUMS prints, from numpy's einsum in f64 of the same f32 inputs; the gradients by hand (each
    operand's is the einsum of the result's adjoint and the other operands)."""

    def filled(n: int, offset: float) -> np.ndarray:
        return np.sin(np.arange(n, dtype=np.float32) * np.float32(0.7) + np.float32(offset)).astype(np.float64)

    rows, x, columns = (
        filled(12, 0.1).reshape(2, 6),
        filled(216, 0.2).reshape(2, 3, 6, 6),
        filled(12, 0.3).reshape(2, 6),
    )
    weights = filled(24, 0.4).reshape(2, 3, 2, 2)
    a, b, c = filled(12, 0.5).reshape(3, 4), filled(20, 0.6).reshape(4, 5), filled(24, 0.7).reshape(4, 6)
    d, e = filled(120, 0.8).reshape(4, 5, 6), filled(2, 0.9)
    y = np.einsum("ab,bc,bd,e->ade", a, b, c, e)
    return [
        np.einsum("ih,nchw,jw->ncij", rows, x, columns),
        np.einsum("ab,bc,bcd->ad", a, b, d),
        y,
        np.einsum("ab,bc,cd,->ad", a, b, d[0], 2.5),
        np.einsum(
            "ab,bc,cd->ad", *(np.arange(n).reshape(shape) for n, shape in ((12, (3, 4)), (20, (4, 5)), (30, (5, 6))))
        ),
        np.einsum("ncij,nchw,jw->ih", weights, x, columns),
        np.einsum("ncij,ih,jw->nchw", weights, rows, columns),
        np.einsum("ncij,ih,nchw->jw", weights, rows, x),
        np.einsum("ade,bc,bd,e->ab", 2 * y, b, c, e),
        np.einsum("ade,ab,bd,e->b", 2 * y, a, c, e)[:, None].repeat(5, axis=1),  # the same along `c`
        np.einsum("ade,ab,bc,e->bd", 2 * y, a, b, e),
        np.einsum("ade,ab,bc,bd->e", 2 * y, a, b, c),
    ]


def test_einsums_of_three_and_four_operands_are_compiled_pairwise_and_agree(tmp_path: Path, capsys) -> None:
    """Three and four operands contracted two at a time (`b` summed over three operands, `e` an outer product,
    `a` and `e` kept from one operand each, a scalar operand, i64 operands), and their gradients (einsums of
    as many operands): the interpreter's values and numpy's, to f32's precision (each intermediate is
    rounded to f32); the i64 products exactly."""
    interpreted, compiled = both_backends(tmp_path, EINSUMS, capsys)
    found = [numbers(re.sub(r"[\[\](),]", " ", text)) for text in (interpreted, compiled)]
    expected = np.concatenate([value.ravel() for value in einsums_in_numpy()])
    assert len(found[0]) == len(found[1]) == expected.size == 24 + 18 + 36 + 18 + 18 + 12 + 216 + 12 + 12 + 20 + 24 + 2
    scale = np.abs(expected).max()
    assert found[1] == pytest.approx(found[0], rel=1e-5, abs=1e-6 * scale)
    np.testing.assert_allclose(found[1], expected, rtol=1e-5, atol=1e-6 * scale)
    status, _, explained = run_cli(tmp_path, EINSUMS, "--backend", "llvm", "--explain-backend", capsys=capsys)
    assert status == 0 and explained.count(" interpreted") == 1, explained  # main, which prints
    counts = slice(24 + 18 + 36 + 18, 24 + 18 + 36 + 18 + 18)
    assert found[1][counts] == found[0][counts] == expected[counts].tolist()  # i64: exactly
    for name in ("pool", "shared", "chain", "scaled", "counts", "pool_loss_grad", "chain_loss_grad"):
        assert re.search(rf"`{name}\w*`\((f32|i64)\[[^`]*\) compiled", explained), (name, explained)


@pytest.mark.parametrize(
    ("text", "sizes", "steps"),
    [
        ("ih,nchw,jw->ncij", "i2h6n2c3w6j2", ["ih,nchw->nciw", "jw,nciw->ncij"]),
        ("ih,nchw,jw->ncij", "i32h64n8c16w64j32", ["ih,nchw->nciw", "jw,nciw->ncij"]),
        ("ncij,nchw,jw->ih", "i32h64n8c16w64j32", ["nchw,jw->hncj", "ncij,hncj->ih"]),
        ("ab,bc,bcd->ad", "a3b4c5d6", ["bc,bcd->db", "ab,db->ad"]),  # not ab,bc: the smaller nest sums nothing
        ("ab,bc,bd,e->ade", "a3b4c5d6e2", ["ab,bc->ab", "bd,ab->ad", "e,ad->ade"]),
        ("ab,bc,cd,de->ae", "a3b4c5d6e7", ["cd,de->ec", "bc,ec->eb", "ab,eb->ae"]),
        ("ij,jk->ik", "i3j4k5", ["ij,jk->ik"]),  # two operands: one loop nest, as always
        ("i,i,i->i", "i5", ["i,i,i->i"]),  # pairs make no fewer iterations
        ("i,j,k->ijk", "i5j3k2", ["i,j,k->ijk"]),
        ("ab,bc,cd,->ad", "a3b4c5d6", ["bc,cd->db", "ab,db->ad", ",ad->ad"]),  # a scalar: an outer product, last
    ],
)
def test_einsum_contraction_path_is_numpys_greedy_one(text: str, sizes: str, steps: list[str]) -> None:
    """Compiled code's order of pairwise contractions (lang/einsum.py) is numpy's `einsum_path(optimize="greedy")`
    (its positions: each step's operands leave the list, their result is appended), into the letters still
    needed; one step where pairs do not pay."""
    letters = {letter: int(size) for letter, size in re.findall(r"([a-z])(\d+)", sizes)}
    path = einsum_spec.contraction_path(einsum_spec.parse(text), letters)
    assert [str(spec) for _, spec in path] == steps
    operands = [np.ones([letters[letter] for letter in own]) for own in einsum_spec.parse(text).inputs]
    assert [positions for positions, _ in path] == np.einsum_path(text, *operands, optimize="greedy")[0][1:]


def test_explain_backend_names_the_functions_main_reaches_at_their_names(tmp_path: Path, capsys) -> None:
    source = """import nn
struct Pair { a: f32, b: f32 }
fn square(x: f32) -> f32 { return x * x }
fn norm(v: f32[3]) -> f32 { return sum(v * v) }
fn swap(p: Pair) -> Pair { return Pair { a: p.b, b: p.a } }
fn unused(p: Pair) -> Pair { return swap(swap(p)) }
fn twice(x: f32) -> f32 { return square(x) + norm(ones(3)) }
fn main() { print(square(3.0), norm(ones(3)), swap(Pair { a: 1.0, b: 2.0 }).a, twice(1.0)) }
"""
    status, out, err = run_cli(tmp_path, source, "--backend", "llvm", "--explain-backend", capsys=capsys)
    assert status == 0, err
    assert out == "9.0 3.0 2.0 4.0\n"
    path = tmp_path / "program.dl"
    # neither `unused` nor the functions of the imported `nn` are named: `main` never calls them
    assert err.splitlines() == [
        f"{path}:3:4: `square` compiled",
        f"{path}:4:4: `norm` compiled: one fused elementwise loop reducing with `sum`",
        f"{path}:5:4: `swap` compiled when called, for the shapes of its arguments",
        f"{path}:7:4: `twice` compiled when called, for the shapes of its arguments",
        f"{path}:8:4: `main` compiled when called, for the shapes of its arguments",
        "native code for 1 function: compiled by LLVM, saved to the compile cache",
        # after the run: each function compiled when called, with the layouts it was called with
        f"{path}:5:4: `swap`(Pair) compiled",
        f"{path}:7:4: `twice`(f32) compiled",
        f"{path}:8:4: `main`() interpreted: it calls `print`, which compiled code does not do: printing is host work, "
        f"and compiled code does not call back into Python (at {path}:8:13)",
        "native code for the layouts compiled when called: 2 compiled by LLVM, saved to the compile cache",
    ]


def test_explain_backend_sums_up_the_layouts_beyond_the_limit_in_one_line(tmp_path: Path, capsys) -> None:
    # a slice bound compiles `k` in: each value is a layout; past the limit, one line counts the calls
    source = """fn head(x: f32[N], k: i64) -> f32 { return sum(x[0:k]) }
fn main() {
    let x = arange(100) * 1.0
    let t = 0.0
    for k in 1..20 { t = t + head(x, k) }
    print(t)
}
"""
    status, out, err = run_cli(tmp_path, source, "--backend", "llvm", "--explain-backend", capsys=capsys)
    assert status == 0, err
    assert out == f"{float(sum(sum(range(k)) for k in range(1, 20)))}\n"
    path = tmp_path / "program.dl"
    lines = [line for line in err.splitlines() if "`head`(" in line or "`head` interpreted" in line]
    assert lines == [
        *(f"{path}:1:4: `head`(f32[100], i64 = {k}) compiled" for k in range(1, 9)),
        f"{path}:1:4: `head` interpreted in 11 calls with other argument layouts: more than 8 layouts "
        "(`k` compiled in as a constant, each value a layout of its own)",
    ]


def test_reached_functions_follow_calls_lambdas_and_constants(tmp_path: Path) -> None:
    from dl import pipeline

    source = """const SCALE = scale_of(2.0)
fn scale_of(x: f32) -> f32 { return x }
fn apply(f, x: f32) -> f32 { return f(x) }
fn helper(x: f32) -> f32 { return x * SCALE }
fn never(x: f32) -> f32 { return helper(x) }
fn main() { print(apply(fn(y) => helper(y), 1.0)) }
"""
    (tmp_path / "program.dl").write_text(source)
    _, typed = pipeline.prepare(pipeline.load(str(tmp_path / "program.dl")))
    declarations = [typed.functions[key][0] for key in typed.reached()]
    names = {decl.name if isinstance(decl, ast.FnDecl) else "lambda" for decl in declarations}
    assert names == {"scale_of", "apply", "helper", "main", "lambda"}


NEGATIVE_POWER = "an integer raised to a negative integer power; convert with `float(x)` first"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("divide(7, 0)", "integer division by zero in `//`"),
        ("remainder(7, 0)", "integer division by zero in `%`"),
        ("divide(-9223372036854775807 - 1, -1)", "integer overflow"),
        ("grow(3)", "integer overflow"),
        ("deep(0)", "recursion too deep in `deep`"),
        ("whole(1.0f64 / 0.0f64)", "`int` of inf"),
        ("whole(-1.0f64 / 0.0f64)", "`int` of -inf"),
        ("whole(0.0f64 / 0.0f64)", "`int` of nan"),
        ("whole(1e30f64)", "`int` of 1e+30: out of the i64 range"),
        ("whole32(-3e38)", "`int` of -3e+38: out of the i64 range"),
        ("whole32(1.0 / 0.0)", "`int` of inf"),
        ("quietly(0)", "integer division by zero in `//`"),
        ("divide32(7i32, 0i32)", "integer division by zero in `//`"),
        ("remainder32(-7i32, 0i32)", "integer division by zero in `%`"),
        ("divide_wide(7i32, 0)", "integer division by zero in `//`"),
        ("remainder_wide(-7, 0i32)", "integer division by zero in `%`"),
        ("widen(-2147483647i32 - 1i32, 4294967297)", "integer overflow: i64 * i64 is out of the i64 range"),
        ("negate(-9223372036854775807 - 1)", "integer overflow: -(-9223372036854775808) is out of the i64 range"),
        (
            "magnitude(-9223372036854775807 - 1)",
            "abs: integer overflow: the absolute value of -9223372036854775808 is out of the i64 range",
        ),
        ("noise(-3)", "randn: `seed=` takes a non-negative integer, found -3"),
        ("drop(2, 1.5)", "`dropout` takes a probability `p` in [0, 1], found 1.5"),
        ("drop(2, -0.25)", "`dropout` takes a probability `p` in [0, 1], found -0.25"),
        ("drop(-1, 0.5)", "dropout: `seed=` takes a non-negative integer, found -1"),
        ("wholes([1.0, 1.0 / 0.0, 2.0])", "`int` of a tensor holding inf or nan"),
        ("wholes([1.0, 0.0 / 0.0, 2.0])", "`int` of a tensor holding inf or nan"),
        ("wholes([1.0, -1e19, 2.0])", "`int` of a tensor with values out of the i64 range (f32[3])"),
        ("power(2, -1)", NEGATIVE_POWER),
        ("power(10, 19)", "integer overflow: i64 ** i64 is out of the i64 range"),
        ("power(-2, 64)", "integer overflow: i64 ** i64 is out of the i64 range"),
        ("powers([2, 3, 4], [1, -1, 2])", NEGATIVE_POWER),
        ("nothing_raised(-1)", NEGATIVE_POWER),  # the exponent is checked, though the result has no elements
        ("mixed(2i32, 1000000000000)", "integer overflow: i64 ** i64 is out of the i64 range"),  # not computed
    ],
)
def test_run_time_failures_are_diagnostics(call: str, message: str, tmp_path: Path, capsys) -> None:
    source = f"""
fn divide(a: i64, b: i64) -> i64 {{ return a // b }}
fn remainder(a: i64, b: i64) -> i64 {{ return a % b }}
fn grow(x: i64) -> i64 {{ while true {{ x = x * x }} return x }}
fn deep(n: i64) -> i64 {{ return deep(n + 1) + 1 }}
fn whole(x: f64) -> i64 {{ return int(x) }}
fn whole32(x: f32) -> i64 {{ return int(x) }}
fn quietly(n: i64) {{ let q = 10 // n }}
fn divide32(a: i32, b: i32) -> i32 {{ return a // b }}
fn remainder32(a: i32, b: i32) -> i32 {{ return a % b }}
fn divide_wide(a: i32, b: i64) -> i64 {{ return a // b }}
fn remainder_wide(a: i64, b: i32) -> i64 {{ return a % b }}
fn widen(a: i32, c: i64) -> i64 {{ return c * a }}
fn negate(a: i64) -> i64 {{ return -a }}
fn magnitude(a: i64) -> i64 {{ return abs(a) }}
fn noise(s: i64) -> f32[3] {{ return randn(3, seed=s) }}
fn drop(s: i64, p: f32) -> f32[3] {{ return dropout(ones(3), p, seed=s, training=true) }}
fn wholes(x: f32[3]) -> i64[3] {{ return int(x) }}
fn power(a: i64, e: i64) -> i64 {{ return a ** e }}
fn powers(a: i64[3], e: i64[3]) -> i64[3] {{ return a ** e + 1 }}
fn nothing_raised(e: i64) -> i64[0] {{ return arange(4)[2:2] ** e }}
fn mixed(a: i32, e: i64) -> i64 {{ return a ** e }}
fn main() {{ print({call}) }}
"""
    status, _, err = run_cli(tmp_path, source, "--backend", "llvm", capsys=capsys)
    assert status == 1
    codes = {"recursion": "E0506", "`int`": "E0513", "abs:": "E0513", "randn:": "E0513", "dropout:": "E0513"}
    codes["`dropout`"] = "E0513"
    code = codes.get(message.split(" ")[0], "E0510")
    assert f"error[{code}]: {message}" in err
    assert "Traceback" not in err
    status, _, interpreted = run_cli(tmp_path, source, "--backend", "interp", capsys=capsys)
    assert status == 1
    assert err.splitlines()[:2] == interpreted.splitlines()[:2]  # the same message at the same span
    if "recursion" in message:  # the call too deep, and the same help, without a call stack
        assert err == interpreted


def test_integer_powers_compile_to_the_interpreters_values(tmp_path: Path, capsys) -> None:
    # i64 scalars exact (up to the edges of the range), tensors and i32 wrapping around as numpy's do
    bases = [-7, -3, -2, -1, 0, 1, 2, 3, 10]
    exponents = [0, 1, 2, 5, 13, 39, 62, 63, 64, 200]
    exact = [(a, e) for a in bases for e in exponents if -(2**63) <= a**e < 2**63]
    source = f"""
fn power(a: i64, e: i64) -> i64 {{ return a ** e }}
fn power32(a: i32, e: i32) -> i32 {{ return a ** e }}
fn powers(a: i64[N], e: i64[N]) -> i64[N] {{ return a ** e }}
fn squares(a: i64[N]) -> i64[N] {{ return a ** 2 + 3 ** (a + 5) }}
fn main() {{
    {"; ".join(f"print(power({a}, {e}))" for a, e in exact)}
    print(power32(3i32, 25i32), power32(-7i32, 40i32))
    print(powers({[a for a in bases for _ in exponents]}, {exponents * len(bases)}))
    print(squares(arange(45) - 5))
}}
"""
    status, out, err = run_cli(tmp_path, source, "--backend", "llvm", "--explain-backend", capsys=capsys)
    assert status == 0, err
    assert "interpreted: `**`" not in err and "`powers`(i64[90], i64[90]) compiled" in err
    lines = out.splitlines()
    assert [int(line) for line in lines[: len(exact)]] == [a**e for a, e in exact]
    wrapped32 = np.array([3, -7], np.int32) ** np.array([25, 40], np.int32)
    assert lines[len(exact)].split() == [str(v) for v in wrapped32]
    rest = " ".join(lines[len(exact) + 1 :]).replace("[", " [ ").replace("]", " ] ").split("]")
    numbers = [[int(v) for v in part.replace("[", "").split()] for part in rest if part.strip()]
    base = np.repeat(np.array(bases, np.int64), len(exponents))
    assert numbers[0] == list(base ** np.tile(np.array(exponents, np.int64), len(bases)))
    a = np.arange(45, dtype=np.int64) - 5
    assert numbers[1] == list(a**2 + np.int64(3) ** (a + 5))
    status, interpreted, _ = run_cli(tmp_path, source, "--backend", "interp", capsys=capsys)
    assert interpreted == out


DRAWS = """
fn noise(x: f32[4, 3], s: i64) -> f32[4, 3] { return x + 0.1 * randn(4, 3, seed=s) + rand(4, 3) }
fn wide(s: i64) -> f64[2, 5] { return randn(2, 5, seed=s, dtype=f64) * rand(2, 5, dtype=f64) }
fn one(s: i64) -> f32 { return rand(seed=s) + randn() }
fn empty(s: i64) -> f32[0, 3] { return randn(0, 3, seed=s) + rand(0, 3) }
fn drop(x: f32[4, 3], s: i64, p: f32, t: bool) -> f32[4, 3] { return dropout(x * 2.0, p, seed=s, training=t) }
fn drop64(x: f64[6], s: i64) -> f64[6] { return dropout(x, 0.3, seed=s, training=true) }
fn main() {
    let x = ones(4, 3)
    print(noise(x, 3))
    print(rand(2))
    print(noise(x, 4))
    print(wide(7))
    print(one(2), one(2))
    print(shape(empty(1)), rand())
    print(drop(x, 5, 0.5, true))
    print(drop(x, 5, 0.5, false))
    print(drop(x, 5, 1.0, true))
    print(drop(x, 5, 0.0, true))
    print(drop64(float(arange(6), dtype=f64), 9))
}
"""


def test_random_draws_and_dropout_are_compiled_and_draw_the_interpreters_numbers(tmp_path: Path, capsys) -> None:
    """`rand`, `randn` and `dropout` run compiled (the host draws for them: runtime/randomness.py) and give the
    interpreter's numbers exactly: seeded and from the run's generator, which interpreted code (`main`) and
    compiled code draw from in turn; f32 and f64; a scalar and an empty draw; dropout training or not, with
    p = 1 and p = 0."""
    interpreted, compiled = both_backends(tmp_path, DRAWS, capsys)
    assert compiled == interpreted
    status, _, explained = run_cli(tmp_path, DRAWS, "--backend", "llvm", "--explain-backend", capsys=capsys)
    assert status == 0
    made = {line.split("`")[1] for line in explained.splitlines() if line.endswith(") compiled")}
    assert made >= {"noise", "wide", "one", "empty", "drop", "drop64"}, explained
    values = [float(v) for v in re.findall(r"-?\d+\.\d+(?:e[-+]?\d+)?", compiled)]
    assert len(values) > 40 and len(set(values)) > 35  # draws, not zeros


SAMPLES = """
fn pick(logits: f32[5, 7], s: i64) -> i64[5] { return categorical(logits, seed=s) }
fn stream(logits: f64[3, 4]) -> i64[3] { return categorical(logits * 2.0) }
fn one(logits: f32[6], t: f32) -> i64 { return categorical(logits / t, seed=11) }
fn many(logits: f32[2, 3, 300], s: i64) -> i64[2, 3] { return categorical(logits, seed=s) }
fn none(logits: f32[0, 4]) -> i64[0] { return categorical(logits) }
fn masked(s: i64) -> i64[64] {
    let logits = where(arange(64 * 5) % 5 == 2, 0.0, -1.0 / 0.0)
    return categorical(reshape(logits, 64, 5), seed=s)
}
fn edge(x: f64[1, 3]) -> i64[1] { return categorical(x, seed=83) }
fn wide(x: f32[64, 1024], s: i64) -> i64[64] { return categorical(x, seed=s) }
fn main() {
    let x = reshape(float(arange(35)) * 0.1 - 1.5, 5, 7)
    print(pick(x, 1), pick(x, 2), pick(x * 30.0, 3))
    let boundary: f64[1, 3] = [[-1.4669297460589656, -1.542529631181335, -0.04056875054436116]]
    print(edge(boundary))
    print(wide(randn(64, 1024, seed=8) * 3.0, 9))
    print(stream(reshape(float(arange(12), dtype=f64) * 0.25, 3, 4)), categorical(zeros(2, 3)))
    print(stream(reshape(float(arange(12), dtype=f64) * 0.25, 3, 4)))
    print(one(float(arange(6)), 0.8), one(float(arange(6)), 0.1), shape(none(zeros(0, 4))))
    print(many(randn(2, 3, 300, seed=4), 5))
    print(sum(masked(6)) == 64 * 2)
}
"""


def test_categorical_is_compiled_and_draws_the_interpreters_samples(tmp_path: Path, capsys) -> None:
    """`categorical` runs compiled (the host samples with the interpreter's own sampler, ir.Sample): seeded and
    from the run's generator interleaved with interpreted draws, f32 and f64, one distribution and several, 300
    and 1,024 categories, no rows at all, categories of logit -inf never drawn, and a draw a rounding away from
    a boundary between two categories (where computing the probabilities any other way picks the neighbour)."""
    interpreted, compiled = both_backends(tmp_path, SAMPLES, capsys)
    assert compiled == interpreted
    assert compiled.splitlines()[-1] == "true"
    status, _, explained = run_cli(tmp_path, SAMPLES, "--backend", "llvm", "--explain-backend", capsys=capsys)
    made = {line.split("`")[1] for line in explained.splitlines() if line.endswith(") compiled")}
    assert status == 0 and made >= {"pick", "stream", "one", "many", "none", "masked", "edge", "wide"}, explained
    # the interpreter's sample at the boundary: numpy's exp rounds by CPU (category 1 on the machines this was
    # found on, 2 on an AMD EPYC), and the compiled code draws whichever the host's own sampler draws
    boundary = np.array([[-1.4669297460589656, -1.542529631181335, -0.04056875054436116]])
    assert compiled.splitlines()[1] == str(categorical_samples(boundary, np.random.default_rng(83)))


@pytest.mark.parametrize(
    "logits",
    ["[[0.0, 1.0], [0.0 / 0.0, 1.0]]", "[[0.0, 1.0], [-1.0 / 0.0, -1.0 / 0.0]]", "[[1.0 / 0.0, 0.0]]"],
    ids=["nan", "all -inf", "inf"],
)
def test_categorical_of_a_row_without_a_finite_peak_fails_as_interpreted(logits: str, tmp_path: Path, capsys) -> None:
    source = (
        f"fn pick(x: f32[N, 2]) -> i64[N] {{ return categorical(x, seed=1) }}\nfn main() {{ print(pick({logits})) }}\n"
    )
    status, _, err = run_cli(tmp_path, source, "--backend", "llvm", capsys=capsys)
    status_i, _, interpreted = run_cli(tmp_path, source, "--backend", "interp", capsys=capsys)
    assert (status, status_i) == (1, 1)
    assert "finite largest value" in err and err.splitlines()[:2] == interpreted.splitlines()[:2]


EPOCHS = """
fn epoch(x: f32[N, 3], y: i64[N], seed: i64) -> (f32, i64) {
    let total = 0.0
    let count = 0
    for (a, b) in batches((x, y), 4, shuffle=true, seed=seed) {
        total += sum(a) * float(sum(b))
        count += 1
    }
    return (total, count)
}
fn plain(x: f32[N, 3]) -> f32 {
    let total = 0.0
    for a in batches(x, 3) { total = total * 0.5 + sum(a[0]) }
    return total
}
fn stream(x: f32[N, 3], y: i64[N]) -> f32 {
    let total = 0.0
    for (a, b) in batches((x, y), 5, shuffle=true) { total = total * 0.5 + sum(a) + float(b[0]) }
    return total
}
fn shuffled(s: i64) -> i64[10] { return permutation(10, seed=s) + permutation(10) * 0 }
fn order() -> i64[7] { return permutation(7) }
fn main() {
    let x = reshape(float(arange(42)), 14, 3)
    let y = arange(14) * 10
    print(epoch(x, y, 1), epoch(x, y, 2))
    print(plain(x))
    print(stream(x, y), permutation(4), stream(x, y))
    print(shuffled(3), order(), shape(batches(x, 20)))
}
"""


def test_batches_and_permutation_are_compiled_with_the_interpreters_order(tmp_path: Path, capsys) -> None:
    """A training epoch's loop, `for (x, y) in batches((xs, ys), size, shuffle=true, seed=s)`, compiles whole:
    the host draws the permutation (seeded, or from the run's generator interleaved with interpreted draws),
    the rows are gathered and walked in step; without a shuffle the batches are a view; the same numbers."""
    interpreted, compiled = both_backends(tmp_path, EPOCHS, capsys)
    assert compiled == interpreted
    assert compiled.splitlines()[0] == "(212700.0, 3) (236820.0, 3)"
    status, _, explained = run_cli(tmp_path, EPOCHS, "--backend", "llvm", "--explain-backend", capsys=capsys)
    made = {line.split("`")[1] for line in explained.splitlines() if line.endswith(") compiled")}
    assert status == 0 and made >= {"epoch", "plain", "stream", "shuffled", "order"}, explained


SECOND_THROUGH_A_LOOP = """
fn f(x: f32, n: i64) -> f32 {
    let h = x
    let i = 0
    while i < n {
        h = tanh(h * 1.5 + 0.1)
        i += 1
    }
    return h * h
}
fn df(x: f32, n: i64) -> f32 { return grad(f)(x, n) }
fn main() { print(grad(f)(0.3, 4), grad(df)(0.3, 4)) }
"""


def test_a_second_derivative_through_a_loop_is_compiled(tmp_path: Path, capsys) -> None:
    """Differentiating a first derivative through a `while` again saves its tapes in the entries of other
    tapes (a loop's state that holds a tape), restores them in its backward sweep and reads them only through
    `zeros_like`: compiled code keeps nothing of those tapes, makes their zeros real storage where a loop
    pushes onto them, and gives a second `pop` of one value the first one's entry. Both backends agree."""
    interpreted, compiled = both_backends(tmp_path, SECOND_THROUGH_A_LOOP, capsys)
    assert numbers(compiled) == pytest.approx(numbers(interpreted), rel=1e-5)  # tanh: a few ulp apart in f32
    status, _, explained = run_cli(
        tmp_path, SECOND_THROUGH_A_LOOP, "--backend", "llvm", "--explain-backend", capsys=capsys
    )
    path = tmp_path / "program.dl"
    assert status == 0
    assert re.search(rf"^{re.escape(str(path))}:2:4: `f_grad\w*`\(f32, i64\) compiled$", explained, re.MULTILINE)
    assert f"{path}:11:4: `df_grad`(f32, i64) compiled" in explained, explained


NESTED_SECOND = """
fn inner(x: f64[4]) -> f64 {
    let h = x
    for i in 0..3 {
        for j in 0..2 {
            h = sin(h) * 0.9 + x * 0.1
        }
    }
    return sum(h * h)
}
fn outer(x: f64[4], v: f64[4]) -> f64 {
    return sum(grad(inner)(x) * v)
}
fn main() {
    print(grad(outer)(float(arange(4), dtype=f64) * 0.3, ones(4, dtype=f64)))
}
"""


def test_what_stays_interpreted_of_a_derivative_is_explained_at_the_users_code(tmp_path: Path, capsys) -> None:
    """A second derivative through nested loops stays interpreted; `--explain-backend` says why at the loop
    the refused code was generated for (the code `grad` makes takes the span of what it was made for), never
    at an unknown place. Both backends agree."""
    interpreted, compiled = both_backends(tmp_path, NESTED_SECOND, capsys)
    assert compiled == interpreted
    status, _, explained = run_cli(tmp_path, NESTED_SECOND, "--backend", "llvm", "--explain-backend", capsys=capsys)
    path = tmp_path / "program.dl"
    assert status == 0 and "interpreted" in explained
    places = re.findall(r"\(at ([^)]*)\)", explained)
    assert places and all(place.startswith(f"{path}:") for place in places), explained
    assert f"read after it is restored (at {path}:4:5)" in explained, explained  # the outer `for`


def test_a_compiled_hessian_vector_product_through_a_loop_agrees_with_pytorch(tmp_path: Path, capsys) -> None:
    """The Hessian-vector product of bench/autodiff_speed.py's `hvp`, compiled (0, 1 and 37 steps: no entry
    on the tapes, one, many), against the interpreter and PyTorch's double backward."""
    from test_autodiff import SECOND_THROUGH_A_LONG_LOOP, torch_loop_hvp

    source = SECOND_THROUGH_A_LONG_LOOP + "\nfn main() { print(hvp([0.3f64, -0.7, 1.1], 37)) }\n"
    status, _, explained = run_cli(tmp_path, source, "--backend", "llvm", "--explain-backend", capsys=capsys)
    assert status == 0 and re.search(r"`hvp`\(f64\[3\], i64\) compiled$", explained, re.MULTILINE), explained
    x = np.array([0.3, -0.7, 1.1])
    program = pipeline.load(str(tmp_path / "program.dl"))
    for n in (0, 1, 37):
        compiled = pipeline.call(program, "hvp", [x, n], backend="llvm")
        interpreted = pipeline.call(program, "hvp", [x, n])
        np.testing.assert_allclose(compiled, interpreted, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(compiled, torch_loop_hvp(x, n), rtol=1e-10, atol=1e-12)


TAPE_EDGES = """
fn popped_twice(n: i64) -> f32[2] {
    let t = push(tape(zeros(2)), [3.0, 4.0])
    let s = zeros(2)
    let i = 0
    while i < n {
        let (a, r) = pop(t)
        s = s + a
        i += 1
    }
    let (b, r2) = pop(t)
    return b + s
}
fn zeros_of_empty(n: i64) -> f32 {
    let t = tape()
    let z = zeros_like(t)
    let i = 0
    while i < n { z = push(z, [1.0, 2.0, 3.0, 4.0] * float(i)); i += 1 }
    let s = 0.0
    while len(z) > 0 { let (a, r) = pop(z); z = r; s = s + sum(a) }
    return s
}
fn zeros_pushed(n: i64) -> f32 {
    let t = push(push(tape(0.0), 1.0), 2.0)
    let z = zeros_like(t)
    let i = 0
    while i < n { z = push(z, float(i) + 0.5); i += 1 }
    let s = 0.0
    while len(z) > 0 { let (a, r) = pop(z); z = r; s = s * 2.0 + a }
    return s
}
fn zeros_then_push(n: i64) -> f32 {
    let t = push(push(tape(0.0), 1.0), 2.0)
    let z = zeros_like(t)
    t = push(t, 5.0)
    let i = 0
    while i < n { z = push(z, float(i) + 0.5); i += 1 }
    return float(len(z)) + float(len(t)) * 100.0
}
fn zeros_in_if(c: bool) -> i64 {
    let t = push(push(tape(0.0), 1.0), 2.0)
    let z = zeros_like(t)
    if c { z = push(z, 3.0) }
    return len(z)
}
fn zeros_added(n: i64) -> f32 {
    let t = push(push(tape(0.0), 1.0), 2.0)
    let u = tree_add(t, zeros_like(t))
    let v = tree_add(zeros_like(t), t)
    let (a, r) = pop(u)
    return a
}
fn restored_in_if(x: f32[4], n: i64, m: i64) -> f32 {
    let t = tape(x)
    let s = tape((x, t))
    let i = 0
    while i < n {
        s = push(s, (x, t))
        t = push(t, x * float(i))
        i += 1
    }
    let total = 0.0
    let k = 0
    while k < m {
        total = total * 10.0 + float(len(t))
        if len(s) > 0 {
            let p = pop(s)
            t = p[0][1]
            s = p[1]
        }
        k += 1
    }
    return total
}
fn restored_alias(x: f32[4], n: i64) -> f32 {
    let t = tape(x)
    let s = tape((x, t))
    let i = 0
    while i < n {
        s = push(s, (x, t))
        t = push(t, x * float(i))
        i += 1
    }
    let total = 0.0
    while len(s) > 0 {
        let u = t
        let p = pop(s)
        t = p[0][1]
        s = p[1]
        total = total * 10.0 + float(len(u))
    }
    return total
}
fn restored_assigned(x: f32[4], n: i64) -> f32 {
    let t = tape(x)
    let s = tape((x, t))
    let i = 0
    while i < n {
        s = push(s, (x, t))
        t = push(t, x * float(i))
        i += 1
    }
    let u = t
    while len(s) > 0 {
        u = t
        let p = pop(s)
        t = p[0][1]
        s = p[1]
    }
    return float(len(u))
}
fn popped_in_loop(n: i64) -> f64 {
    let t = push(push(tape(0.0f64), 1.0f64), 2.0f64)
    let s = 0.0f64
    let i = 0
    while i < n {
        let p = pop(t)
        s = s + p[0]
        i += 1
    }
    return s
}
fn pushed_in_loop(n: i64) -> i64 {
    let t = push(tape(0.0f64), 1.0f64)
    let s = 0
    let i = 0
    while i < n {
        let u = push(t, 2.0f64)
        s = s + len(u)
        i += 1
    }
    return s
}
fn named_before_loop(n: i64) -> i64 {
    let t = push(tape(0.0f64), 1.0f64)
    let u = t
    let s = 0
    let i = 0
    while i < n {
        s = s + len(u)
        t = push(t, 2.0f64)
        i += 1
    }
    return s
}
fn held_in_tuple(n: i64) -> i64 {
    let t = push(tape(0.0f64), 1.0f64)
    let p = (t, 5)
    let i = 0
    while i < n { t = push(t, 2.0f64); i += 1 }
    return len(p[0]) * 100 + len(t)
}
fn restored_then_read(x: f32[4], n: i64) -> f32 {
    let t = tape(x)
    let s = tape((x, t))
    let i = 0
    while i < n {
        s = push(s, (x, t))
        t = push(t, x * float(i))
        i += 1
    }
    let total = 0.0
    while len(s) > 0 {
        let p = pop(s)
        t = p[0][1]
        s = p[1]
        total = total + float(len(t))
    }
    return total
}
fn read_then_restored(x: f32[4], n: i64) -> f32 {
    let t = tape(x)
    let s = tape((x, t))
    let i = 0
    while i < n {
        s = push(s, (x, t))
        t = push(t, x * float(i))
        i += 1
    }
    let total = 0.0
    while len(s) > 0 {
        total = total + float(len(t))
        let p = pop(s)
        t = p[0][1]
        s = p[1]
    }
    return total
}
fn main() {
    print(restored_then_read(ones(4), 5), read_then_restored(ones(4), 5))
    print(popped_in_loop(2), pushed_in_loop(3), named_before_loop(3), held_in_tuple(3))
    print(popped_twice(0), popped_twice(1))
    print(zeros_of_empty(3), zeros_pushed(3), zeros_then_push(2), zeros_in_if(true), zeros_in_if(false), zeros_added(1))
    print(restored_in_if(ones(4), 5, 4), restored_alias(ones(4), 4), restored_assigned(ones(4), 4))
}
"""


def test_hand_written_tapes_compile_or_fall_back_but_never_differ(tmp_path: Path, capsys) -> None:
    """A tape restored from another tape's entry and read after (`restored_then_read`), or read in the loop
    before it is restored there (`read_then_restored`, whose next iteration would read the restored one):
    compiled code keeps nothing of it, so each runs on the interpreter, which says why. Then cases a review
    found (each gave other numbers compiled, or a heap error): a tape made before a loop and
    popped or pushed in it without the loop assigning it, read there by a name taken before the loop, or held
    by a tuple; a value popped in a loop and again after it (the first pop may not have run), zeros of a
    `tape()` nothing was pushed onto,
    zeros pushed onto in loops and `if`s, and a restored tape read in an `if` inside the loop, or through
    another name. Each compiles or runs on the interpreter, and prints what the interpreter prints."""
    interpreted, compiled = both_backends(tmp_path, TAPE_EDGES, capsys)
    assert (
        compiled
        == interpreted
        == ("10.0 15.0\n4.0 6 3 104\n[3. 4.] [6. 8.]\n30.0 54.0 304.0 3 2 2.0\n5432.0 4321.0 1.0\n")
    )
    status, _, explained = run_cli(tmp_path, TAPE_EDGES, "--backend", "llvm", "--explain-backend", capsys=capsys)
    made = {line.split("`")[1] for line in explained.splitlines() if line.endswith(") compiled")}
    assert status == 0 and made >= {"zeros_pushed", "zeros_then_push", "zeros_in_if", "zeros_added"}, explained
    assert "read in the loop that restores it" in explained and "entries are not known yet" in explained
    reason = "a loop's tape holding tapes (a derivative through a loop, differentiated again)"
    assert f"`restored_then_read`(f32[4], i64) interpreted: {reason}, read after it is restored" in explained
    assert f"`read_then_restored`(f32[4], i64) interpreted: {reason}, read in the loop that restores it" in explained


def test_a_tape_and_zeros_of_another_length_fail_as_interpreted(tmp_path: Path, capsys) -> None:
    source = (
        "fn f() -> i64 {\n    let t = push(push(tape(0.0), 1.0), 2.0)\n    let u = push(tape(0.0), 4.0)\n"
        "    return len(tree_add(u, zeros_like(t)))\n}\nfn main() { print(f()) }\n"
    )
    for backend in ("interp", "llvm"):
        status, out, err = run_cli(tmp_path, source, "--backend", backend, capsys=capsys)
        assert (status, out) == (1, ""), err
        assert err.startswith("error[E0513]: `tree_add` adds values of one structure, found tape")
        assert f"{tmp_path / 'program.dl'}:4:16" in err


WHOLES = """
fn f(x: f32[6]) -> i64[6] { return int(x * 2.0) }
fn g(x: f64[2, 2]) -> i64[2, 2] { return int(x) }
fn starts(n: i64, s: i64) -> i64[8] { return int(rand(8, seed=s) * float(n)) }
fn main() {
    print(f([1.5, -1.5, 2.7, -0.2, 3e9, 0.0]))
    print(g(float([[1, -2], [3, 4]], dtype=f64) * 1.75f64))
    print(starts(1000, 3))
}
"""


def test_int_of_a_float_tensor_is_compiled_and_truncates_as_numpy(tmp_path: Path, capsys) -> None:
    """`int(rand(B, seed=s) * float(n))`, examples/gpt.dl's windows: compiled, truncated toward zero."""
    interpreted, compiled = both_backends(tmp_path, WHOLES, capsys)
    assert compiled == interpreted
    assert compiled.split()[:7] == ["[", "3", "-3", "5", "0", "6000000000", "0]"]
    status, _, explained = run_cli(tmp_path, WHOLES, "--backend", "llvm", "--explain-backend", capsys=capsys)
    made = {line.split("`")[1] for line in explained.splitlines() if line.endswith(") compiled")}
    assert status == 0 and made >= {"f", "g", "starts"}, explained


OPERATORS = ["+", "-", "*"]


@st.composite
def scalar_functions(draw) -> str:
    """A random well-typed f64 function: arithmetic, `if` and a bounded `while` on data-dependent
    conditions, over two parameters; `main` calls it on a few arguments."""

    def expression(depth: int) -> str:
        if depth == 0 or draw(st.booleans()):
            return draw(st.sampled_from(["a", "b", "acc", "1.5", "0.25", "2.0"]))
        operator = draw(st.sampled_from([*OPERATORS, "/"]))
        rhs = expression(depth - 1) if operator != "/" else "(abs(" + expression(depth - 1) + " - a) + 1.0)"
        return f"({expression(depth - 1)} {operator} {rhs})"

    comparison = draw(st.sampled_from(["<", ">", "<=", ">="]))
    lines = [
        "let acc = 0.0f64",
        "let trips = 0",
        f"while trips < {draw(st.integers(0, 6))} and abs(acc) < 1e6 {{",
        f"    acc = {expression(3)}",
        f"    if {expression(2)} {comparison} {expression(2)} {{ acc = acc - {expression(1)} }}",
        f"    else {{ b = {expression(2)} }}",
        "    trips += 1",
        "}",
        f"return acc + {expression(2)}",
    ]
    body = "\n    ".join(lines)
    args = draw(st.lists(st.tuples(st.integers(-5, 5), st.integers(-5, 5)), min_size=1, max_size=3))
    calls = ", ".join(f"f({x}.0f64 / 3.0f64, {y}.0f64 / 7.0f64)" for x, y in args)
    return f"fn f(a: f64, b: f64) -> f64 {{\n    {body}\n}}\nfn main() {{ print({calls}) }}\n"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(source=scalar_functions())
def test_random_scalar_functions_agree(source: str, tmp_path: Path, capsys) -> None:
    interpreted, compiled = both_backends(tmp_path, source, capsys)
    assert compiled == interpreted
    assert compiled_names(source, tmp_path) == {"f"}


@st.composite
def i32_functions(draw) -> str:
    """A random well-typed i32 function (arithmetic wrapping around, `//` and `%` by a nonzero divisor,
    `abs`/`maximum`/`minimum`, an i64 parameter mixed in), with `if` and a bounded `while`; `main` calls it
    on arguments drawn from the whole i32 range."""

    def expression(depth: int) -> str:
        if depth == 0 or draw(st.booleans()):
            return draw(st.sampled_from(["a", "b", "acc", "3", "-7", "2147483647i32", "(-2147483647i32 - 1i32)"]))
        form = draw(st.sampled_from(["+", "-", "*", "//", "%", "abs", "maximum", "minimum"]))
        left, right = expression(depth - 1), expression(depth - 1)
        if form not in ("+", "-", "*"):  # a built-in of unsuffixed literals alone would be i64: `+ 0i32`
            left, right = (f"({e} + 0i32)" if e[0] in "(-0123456789" else e for e in (left, right))
        if form in ("//", "%"):
            return f"({left} {form} (abs({right}) + 1i32))"  # abs of the smallest i32 is itself: never -1
        if form == "abs":
            return f"abs({left})"
        if form in ("maximum", "minimum"):
            return f"{form}({left}, {right})"
        return f"({left} {form} {right})"

    comparison = draw(st.sampled_from(["<", ">", "<=", ">=", "==", "!="]))
    lines = [
        "let acc = 1i32",
        "let trips = 0",
        f"while trips < {draw(st.integers(0, 6))} {{",
        f"    acc = {expression(3)}",
        f"    if {expression(2)} {comparison} c {{ acc = acc - {expression(1)} }}",
        f"    else {{ b = {expression(2)} }}",
        "    trips += 1",
        "}",
        f"return {expression(2)} - c * 3 + c // (abs(acc) + 1i32)",
    ]
    body = "\n    ".join(lines)
    whole = st.integers(-(2**31) + 1, 2**31 - 1)  # (the literal 2147483648i32 is out of range)
    args = draw(st.lists(st.tuples(whole, whole, st.integers(-1000, 1000)), min_size=1, max_size=3))
    calls = ", ".join(f"f({x}i32, {y}i32, {z})" for x, y, z in args)
    return f"fn f(a: i32, b: i32, c: i64) -> i64 {{\n    {body}\n}}\nfn main() {{ print({calls}) }}\n"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(source=i32_functions())
def test_random_i32_functions_agree(source: str, tmp_path: Path, capsys) -> None:
    interpreted, compiled = both_backends(tmp_path, source, capsys)
    assert compiled == interpreted
    assert compiled_names(source, tmp_path) == {"f"}


WEAK_LITERAL_INTO_I32 = """
fn f(a: i32, b: i32, c: i64) -> i64 {
    let acc = 1i32
    let trips = 0
    while trips < 1 {
        acc = 3
        if a > c { acc = acc - (-2147483647i32 - 1i32) } else { b = ((a + a) + a) }
        trips += 1
    }
    return acc - c * 3 + c // (abs(acc) + 1i32)
}
fn main() { print(f(0i32, 0i32, -1)) }
"""


def test_a_literal_assigned_to_an_i32_variable_is_i32_on_both_backends(tmp_path: Path, capsys) -> None:
    """`acc = 3` keeps `acc` an i32 (the checker's type), so `3 - (-2**31)` wraps to -2147483645 on both."""
    interpreted, compiled = both_backends(tmp_path, WEAK_LITERAL_INTO_I32, capsys)
    acc = (3 + 2**31 + 2**31) % 2**32 - 2**31  # 3 - (-2**31), wrapped to i32
    assert acc == -2147483645
    assert interpreted == compiled == f"{acc + 3 + (-1) // (abs(acc) + 1)}\n"


I64_TENSORS = """
fn scaled(x: i64[N], k: i64) -> i64[N] { return x * k + 1 }
fn total(x: i64[N]) -> i64 { return sum(x) }
fn main() {
    let big = [9223372036854775807, -9223372036854775807 - 1, 3]
    print(scaled(big, 2), total(big), total([9223372036854775807, 1]))
}
"""


def test_i64_tensors_wrap_around_as_numpys_on_both_backends(tmp_path: Path, capsys) -> None:
    """Tensors wrap (numpy's and PyTorch's rule); i64 scalars report overflow (test_run_time_failures_...)."""
    interpreted, compiled = both_backends(tmp_path, I64_TENSORS, capsys)
    big = np.array([2**63 - 1, -(2**63), 3])
    with np.errstate(over="ignore"):
        expected = f"{big * 2 + 1} {big.sum()} {np.array([2**63 - 1, 1]).sum()}\n"
    assert interpreted == compiled == expected
    assert "[-1  1  7] 2 -9223372036854775808" in expected


@pytest.mark.parametrize(
    ("function", "call", "message"),
    [
        ("fn make(n: i64) -> f32 { return sum(zeros(n)) }", "make(-3)", "zeros: a dimension must be a non-negative"),
        ("fn make(n: i64) -> f32[_] { return zeros(n) + 1.0 }", "make(-3)", "zeros: a dimension must be"),
        ("fn make(n: i64) -> f32 { return sum(zeros(n, n)) }", "make(-5)", "zeros: a dimension must be"),
        ("fn make(k: i64) -> f32 { let n = k - 10; return sum(zeros(n, n)) }", "make(5)", "zeros: a dimension"),
        ("fn make(n: i64) -> f32 { return sum(ones(n, 3) * 2.0) }", "make(-1)", "ones: a dimension must be"),
        ("fn make(n: i64) -> f32 { return max(full(2, n, value=1.5)) }", "make(-2)", "full: a dimension must be"),
        ("fn make(n: i64) -> f32 { return sum(zeros(n, n)) }", "make(4000000000)", "zeros: a tensor of shape"),
        ("fn make(n: i64) -> f32 { return sum(zeros(n, n, n) + 1.0) }", "make(30000)", "zeros: not enough memory"),
    ],
)
def test_impossible_shapes_fail_alike_on_both_backends(
    function: str, call: str, message: str, tmp_path: Path, capsys
) -> None:
    """A negative size, or a tensor bigger than memory, is the interpreter's E0513 in compiled code too (the
    layout is refused when compiling, so it runs on the interpreter), never a traceback, a hang or a result."""
    source = f"{function}\nfn main() {{ print({call}) }}\n"
    status, _, interpreted = run_cli(tmp_path, source, "--backend", "interp", capsys=capsys)
    assert status == 1
    assert interpreted.startswith(f"error[E0513]: {message}")
    status, out, compiled = run_cli(tmp_path, source, "--backend", "llvm", capsys=capsys)
    assert (status, out, compiled) == (1, "", interpreted)


CACHED = """
fn fib(n: i64) -> i64 { if n < 2 { return n } return fib(n - 1) + fib(n - 2) }
fn gcd(a: i64, b: i64) -> i64 { while b != 0 { let t = b; b = a % b; a = t } return a }
fn newton(x: f64) -> f64 { let y = x; for i in 0..50 { y = 0.5 * (y + x / y) } return y }
fn main() { print(fib(20), gcd(1071, 462), newton(2.0f64)) }
"""


def cache_entries(directory: Path) -> list[Path]:
    """The compile cache's files (the cache directory also holds the parse table, lang/tables.py)."""
    entries = directory / "llvm"
    return sorted(entries.rglob("*")) if entries.exists() else []


def native_origin(err: str) -> str:
    return next(line for line in err.splitlines() if line.startswith("native code for"))


def test_second_run_loads_the_native_code_from_the_cache(tmp_path: Path, cache_directory: Path, capsys) -> None:
    status, first, err = run_cli(tmp_path, CACHED, "--backend", "llvm", "--explain-backend", capsys=capsys)
    assert status == 0, err
    assert native_origin(err) == "native code for 3 functions: compiled by LLVM, saved to the compile cache"
    [entry] = [path for path in cache_entries(cache_directory) if path.is_file()]
    assert entry.parent == cache_directory / "llvm" and entry.suffix == ".o"
    status, second, err = run_cli(tmp_path, CACHED, "--backend", "llvm", "--explain-backend", capsys=capsys)
    assert status == 0, err
    assert native_origin(err) == "native code for 3 functions: loaded from the compile cache"
    assert second == first == "6765 21 1.414213562373095\n"
    assert [path for path in cache_entries(cache_directory) if path.is_file()] == [entry]


IN_PARTS = """
import nn
struct MLP { w1: f32[8, 16], b1: f32[16], w2: f32[16, 3], b2: f32[3] }
fn loss(m: MLP, x: f32[B, 8], y: i64[B]) -> f32 {
    let h = nn.relu(x @ m.w1 + m.b1)
    return nn.cross_entropy(h @ m.w2 + m.b2, y)
}
fn main() {
    let m = MLP {
        w1: sin(float(reshape(arange(128), 8, 16)) * 0.37),
        b1: cos(float(arange(16))) * 0.1,
        w2: sin(float(reshape(arange(48), 16, 3)) * 0.91),
        b2: zeros(3),
    }
    let x = cos(float(reshape(arange(80), 10, 8)) * 0.53)
    let y = arange(10) % 3
    let (value, g) = value_and_grad(loss)(m, x, y)
    print(f"{value:.9f} {sum(g.w1):.9f} {sum(g.b1 * g.b1):.9f} {max(g.w2):.9f} {g.b2[1]:.9f}")
}
"""


def test_a_large_module_compiles_in_parts_at_once_and_runs_as_one(
    tmp_path: Path, cache_directory: Path, capsys, monkeypatch
) -> None:
    """On two threads the gradient's module is compiled as two groups of parts, one in a forked child
    (codegen/forked.py), each part for the pipeline its functions need: O3 for the loops LLVM vectorises,
    `tidy` for those the emitter vectorised. The code runs as the module compiled whole does, and comes back
    from the cache."""
    from dl.codegen import llvm

    made, calls = [], []
    making, running = llvm.module_parts, llvm.in_children
    monkeypatch.setattr(llvm, "module_parts", lambda *args: made.append(making(*args)) or made[-1])
    monkeypatch.setattr(
        llvm, "in_children", lambda jobs, workers, **how: calls.append(workers) or running(jobs, workers, **how)
    )
    status, split, err = run_cli(tmp_path, IN_PARTS, "--backend", "llvm", "--threads", "2", capsys=capsys)
    assert status == 0, err
    [groups] = [groups for groups in made if len(groups) > 1]
    assert len(groups) == 2 and 2 in calls
    parts = [part for group in groups for part in group]
    assert {part.pipeline for part in parts} == {llvm.FULL, llvm.TIDY}
    texts = [part.text() for part in parts]
    assert '@"dl.error" = global i64 0' in texts[0]
    assert all('@"dl.error" = external global i64' in text for text in texts[1:])
    bodies = [dict(re.findall(r'^define [^@]*@"?([^"(]+).*?\n(.*?)\n}$', text, re.M | re.S)) for text in texts]
    defined = [name for found in bodies for name in found]
    assert len(defined) == len(set(defined))  # each function in one part only
    loops = {part.pipeline: 0 for part in parts}
    for part, found in zip(parts, bodies, strict=True):
        for name, body in found.items():
            if name.startswith("dl.loop."):  # vectorised by the emitter: nothing for LLVM's loop vectorizer
                assert (".vector.head" in body) == (part.pipeline == llvm.TIDY), name
                loops[part.pipeline] += 1
    assert loops[llvm.FULL] and loops[llvm.TIDY]
    status, whole, err = run_cli(tmp_path, IN_PARTS, "--backend", "llvm", "--threads", "1", "--no-cache", capsys=capsys)
    assert status == 0, err
    assert split == whole
    made.clear()
    status, again, err = run_cli(tmp_path, IN_PARTS, "--backend", "llvm", capsys=capsys)
    assert status == 0, err
    assert again == split and made == []  # nothing compiled: the parts' objects came from the cache
    _, interpreted, _ = run_cli(tmp_path, IN_PARTS, "--backend", "interp", capsys=capsys)
    np.testing.assert_allclose(numbers(split), numbers(interpreted), rtol=1e-5)


def test_recursion_and_scalar_code_keep_llvms_full_pipeline(tmp_path: Path, monkeypatch, capsys) -> None:
    """Only tensor code with nothing left for O2 to do gets `tidy`'s short pipeline: a recursive function
    gains from O2's inlining and tail calls (`fib(30)` ran 30% slower after `tidy`)."""
    from dl.codegen import llvm

    made = []
    making = llvm.module_parts
    monkeypatch.setattr(llvm, "module_parts", lambda *args: made.append(making(*args)) or made[-1])
    source = "fn fib(n: i64) -> i64 { if n < 2 { return n } return fib(n - 1) + fib(n - 2) }\n"
    source += "fn main() { print(fib(20)) }\n"
    status, out, err = run_cli(tmp_path, source, "--backend", "llvm", "--no-cache", capsys=capsys)
    assert (status, out) == (0, "6765\n"), err
    parts = [part for groups in made for group in groups for part in group]
    assert parts and all(part.pipeline == llvm.FULL for part in parts)


RECURSIVE = """
fn tree_sum(x: f64[N], depth: i64) -> f64 {
    if depth == 0 {
        return sum(x)
    }
    return tree_sum(x * 0.5, depth - 1) + tree_sum(x, depth - 1)
}

fn boom(x: f64[N], n: i64, k: i64) -> f64 {
    if n == 0 {
        return x[k]
    }
    return boom(x * 2.0, n - 1, k) + 1.0
}

fn main() {
    let x = ones(4, dtype=f64)
    print(tree_sum(x, 5))
    print(boom(x, 2, 7))
}
"""


def test_compiled_recursion_runs_from_the_cache_as_on_the_interpreter(
    tmp_path: Path, cache_directory: Path, capsys
) -> None:
    """Recursive tensor functions (one module of specialisations calling each other) stored and loaded
    again; a failure two calls deep shows the interpreter's call stack."""
    interpreted = run_cli(tmp_path, RECURSIVE, capsys=capsys)
    assert interpreted[0] == 1 and "in `boom` at" in interpreted[2]
    for _ in range(2):
        status, out, err = run_cli(tmp_path, RECURSIVE, "--backend", "llvm", capsys=capsys)
        assert (status, out, err) == interpreted
    explained = run_cli(tmp_path, RECURSIVE, "--backend", "llvm", "--explain-backend", capsys=capsys)[2]
    assert "`tree_sum`(f64[4], i64) compiled" in explained and "`boom`(f64[4], i64, i64) compiled" in explained
    assert len([path for path in cache_entries(cache_directory) if path.is_file()]) == 2


def test_a_changed_program_misses_the_cache(tmp_path: Path, cache_directory: Path, capsys) -> None:
    run_cli(tmp_path, CACHED, "--backend", "llvm", capsys=capsys)
    changed = CACHED.replace("fib(n - 2)", "fib(n - 2) + 1")
    status, out, err = run_cli(tmp_path, changed, "--backend", "llvm", "--explain-backend", capsys=capsys)
    assert status == 0, err
    assert out == "17710 21 1.414213562373095\n"
    assert native_origin(err).endswith("compiled by LLVM, saved to the compile cache")
    assert len([path for path in cache_entries(cache_directory) if path.is_file()]) == 2


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "garbage"])
def test_a_damaged_cache_entry_is_rebuilt(damage: str, tmp_path: Path, cache_directory: Path, capsys) -> None:
    run_cli(tmp_path, CACHED, "--backend", "llvm", capsys=capsys)
    [entry] = [path for path in cache_entries(cache_directory) if path.is_file()]
    data = entry.read_bytes()
    damaged = {
        "truncate": data[: len(data) // 2],
        "flip": data[:-100] + bytes([data[-100] ^ 0xFF]) + data[-99:],
        "empty": b"",
        "garbage": cache.MAGIC + b"0" * 64 + b"\n" + b"\x7fELF not really an object",
    }[damage]
    entry.write_bytes(damaged)
    status, out, err = run_cli(tmp_path, CACHED, "--backend", "llvm", "--explain-backend", capsys=capsys)
    assert status == 0, err
    assert out == "6765 21 1.414213562373095\n"
    assert native_origin(err).endswith("compiled by LLVM, saved to the compile cache")
    assert entry.read_bytes() == data  # rebuilt: the same object code again
    status, _, err = run_cli(tmp_path, CACHED, "--backend", "llvm", "--explain-backend", capsys=capsys)
    assert native_origin(err).endswith("loaded from the compile cache")


def test_no_cache_neither_reads_nor_writes(tmp_path: Path, cache_directory: Path, capsys) -> None:
    for _ in range(2):
        status, out, err = run_cli(
            tmp_path, CACHED, "--backend", "llvm", "--no-cache", "--explain-backend", capsys=capsys
        )
        assert status == 0, err
        assert out == "6765 21 1.414213562373095\n"
        assert native_origin(err) == "native code for 3 functions: compiled by LLVM (--no-cache)"
    assert not (cache_directory / "llvm").exists()
    status, _, err = run_cli(tmp_path, CACHED, "--no-cache", "run", "--backend", "llvm", capsys=capsys)
    assert status == 0, err
    assert not (cache_directory / "llvm").exists()


def test_cache_directory_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DL_CACHE_DIR", str(tmp_path / "explicit"))
    assert cache_directory_of() == tmp_path / "explicit"
    monkeypatch.delenv("DL_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_directory_of() == tmp_path / "xdg" / "dl"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_directory_of() == tmp_path / "home" / ".cache" / "dl"


def test_unit_results_and_literals_are_refused_where_the_backends_could_differ(tmp_path: Path) -> None:
    source = """
fn weak() { return 1.5 }
fn unit_value(n: i64) -> i64 { let u = nothing(n); return n }
fn nothing(n: i64) { }
fn main() { print(weak(), unit_value(3)) }
"""
    path = tmp_path / "program.dl"
    path.write_text(source, encoding="utf-8")
    _, typed = pipeline.prepare(pipeline.load(str(path)))
    backend = native.compile_program(typed, cache=False)
    refused = {backend.lowered.declarations[key][0].name: why for key, why in backend.lowered.refused.items()}
    assert refused["weak"].startswith("it returns an unsuffixed literal with no result annotation")
    assert refused["unit_value"].startswith("it uses the result of `nothing`, which returns nothing")
    assert "`nothing` compiled" in backend.explanation()


FLOAT_TESTS_PROGRAM = """
fn checks(x: f32[3]) -> (bool[3], bool[3], bool[3], bool, bool) {
    let y = log(x)
    return (isnan(y), isinf(y), isfinite(y), any(isnan(y)), all(isfinite(x)))
}
fn scalars(a: f64) -> (bool, bool, bool, bool) {
    return (isnan(a), isinf(a / 0.0), isfinite(a) and any(a > -5.0), isnan(exp(a) - exp(a)) or all(a > 1.5))
}
fn along(x: f64[2, 3]) -> (bool[3], bool[2, 1], bool, bool[0]) {
    let empty = any(zeros(2, 0) > 0.0, axis=0)
    return (any(x > 1.0, axis=0), all(x > 0.0, axis=1, keepdims=true), all(x > -1.0, axis=(0, 1)), empty)
}
fn made(a: f32, b: f64) -> (f32[3, 3], f64[2, 4], f32[5], f64[4], f32[1], bool[2, 3], i64[3, 2]) {
    let spaced = (linspace(a, 1.0, 5), linspace(0.0, b, 4), linspace(a, 3.0, 1))
    return (eye(3), eye(2, 4, dtype=f64), spaced[0], spaced[1], spaced[2], eye(2, 3, dtype=bool), eye(3, 2, dtype=i64))
}
fn main() {
    print(checks([1.0, 0.0, -1.0]), checks([2.0, 3.0, 0.5]))
    print(scalars(2.0), scalars(-3.0), scalars(0.0 / 0.0), scalars(1e400))
    print(along([[0.5, 2.0, -0.5], [1.5, 0.25, 3.0]]))
    print(made(0.1, 7.0), made(-2.5, 1e-3))
}
"""


def test_a_compiled_f32_running_sum_runs_in_f64(dlrun, tmp_path: Path) -> None:
    """10,000,000 running sums of 0.1 end at 1e6 compiled, as interpreted and in torch (in f32: 1.088e6)."""
    path = tmp_path / "running.dl"
    path.write_text("fn last(x: f32[n]) -> f32 { return cumsum(x, 0)[n - 1] }\n")
    path.write_text(path.read_text() + "fn main() { print(last(full(10000000, value=0.1))) }\n")
    status, compiled, explained = dlrun("--backend", "llvm", "--explain-backend", str(path))
    assert status == 0 and "`last`(f32[10000000]) compiled" in explained
    assert compiled == dlrun(str(path))[1] == "1e+06\n"


def test_float_tests_truth_reductions_eye_and_linspace_compile(dlrun, tmp_path: Path) -> None:
    """isnan/isinf/isfinite of tensors and scalars, any/all over axes (and over none), eye of each dtype and
    linspace (numpy's values, `stop` exactly) compile and print what the interpreter prints."""
    path = tmp_path / "made.dl"
    path.write_text(FLOAT_TESTS_PROGRAM)
    status, compiled, explained = dlrun("--backend", "llvm", "--explain-backend", str(path))
    assert status == 0
    for name in ("checks", "scalars", "along", "made"):
        assert re.search(rf"`{name}`\(.*\) compiled", explained), explained
    assert compiled == dlrun(str(path))[1]


ROOT = Path(__file__).resolve().parent.parent
CORPUS = sorted((ROOT / "tests" / "programs").glob("*.dl")) + sorted((ROOT / "examples").glob("*.dl"))
# the examples whose golden is of their quick run (NAME.quick.out, tests/test_examples.py): run them so
QUICK = {golden.name.split(".")[0] + ".dl": ["quick"] for golden in (ROOT / "examples").glob("*.quick.out")}


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_corpus_runs_the_same_on_both_backends(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """Differential: every test program and example (in its quick mode) prints the same and exits the
    same on both backends. Refused functions run interpreted, so this checks what is compiled."""
    monkeypatch.delenv("DL_METRICS", raising=False)
    results = []
    for backend in ("interp", "llvm"):
        workdir = tmp_path / backend  # examples write checkpoints and metrics
        workdir.mkdir()
        monkeypatch.chdir(workdir)
        capsys.readouterr()
        status = dlrun(["--backend", backend, str(path), *QUICK.get(path.name, [])])
        captured = capsys.readouterr()
        results.append((status, captured.out))
    (status, compiled), (expected_status, interpreted) = results[1], results[0]
    assert status == expected_status
    assert_same_output(compiled, interpreted, path.name)


# Sampled text depends on the last bits of the probabilities it is drawn from: not compared. Each example
# that samples starts its text on a line beginning so; from that line on, the output is not compared.
SAMPLED = {"charrnn.dl": 'The "assert"', "gpt.dl": "sample:"}
TOKEN = re.compile(r"-?\d+(?:\.\d*)?(?:e[-+]?\d+)?|\S")


def assert_same_output(compiled: str, interpreted: str, name: str) -> None:
    """The same lines, words and punctuation; numbers within the documented tolerance: a relative 1e-5
    (compiled f32 sums accumulate in f64, and products go through BLAS), loosened to 1e-2 for the
    training examples, whose optimisers amplify those last bits over their steps (their gradients
    agree to f32 rounding: tests/test_specialise.py)."""
    rtol = 1e-2 if name in QUICK else 1e-5
    assert_lines_close(sampled_cut(compiled, name), sampled_cut(interpreted, name), rtol, compiled)


def assert_lines_close(lines: list[str], expected_lines: list[str], rtol: float, shown: str) -> None:
    """As many lines, with the same words and punctuation; each number within `rtol` of the expected one (and
    1e-6 absolute). `shown`: what a failure shows for a different count of lines."""
    assert len(lines) == len(expected_lines), shown
    for line, expected in zip(lines, expected_lines, strict=True):
        tokens, wanted = TOKEN.findall(line), TOKEN.findall(expected)
        assert len(tokens) == len(wanted), (line, expected)
        for token, want in zip(tokens, wanted, strict=True):
            if re.fullmatch(r"-?\d.*", want) and re.fullmatch(r"-?\d.*", token):
                assert float(token) == pytest.approx(float(want), rel=rtol, abs=1e-6), (line, expected)
            else:
                assert token == want, (line, expected)


def sampled_cut(output: str, name: str) -> list[str]:
    """The lines of `output` before its sampled text, which must be there; all of them if it samples none."""
    lines = output.splitlines()
    start = SAMPLED.get(name)
    if start is None:
        return lines
    starts = [number for number, line in enumerate(lines) if line.startswith(start)]
    assert starts, f"{name} printed no line starting {start!r}: {output}"
    return lines[: starts[0]]


FUSED = """
fn f(x: f32[n], a: f32, b: f32, c: f32) -> f32[n] { return tanh(x * a + b) * c + x }
fn g(x: f64[2, 3], y: f64[2, 3]) -> f64[2, 3] {
    let s = x * y
    return sigmoid(s) + exp(-abs(x)) / 2.0 + maximum(x, y) ** 2.0 + sqrt(abs(y)) - relu(log(abs(x) + 1.0))
}
fn h(x: f32[n]) -> f32 { return sum(x, axis=0) }
fn main() {
    let x = float(arange(21)) * 0.3 - 3.0
    print(f(x, 1.5, 0.25, 0.7))
    let u = reshape(float(arange(6), dtype=f64), 2, 3) * 0.7f64 - 2.0f64
    print(g(u, u * 0.5f64 + 0.1f64), h(x))
}
"""


def test_fused_elementwise_functions_agree_and_are_explained(tmp_path: Path, capsys) -> None:
    """tanh, exp, log come from libmvec (vector loop) or libm (remainder) against numpy: f32 results may
    differ by a few ulp (compared to a relative 1e-6), f64 by a relative 1e-12."""
    interpreted, compiled = both_backends(tmp_path, FUSED, capsys)
    clean = lambda text: text.replace("[", " ").replace("]", " ")  # noqa: E731
    # (h sums 21 numbers to almost nothing: the compiled f64 sum is nearer 0 than numpy's f32 one)
    assert numbers(clean(compiled)) == pytest.approx(numbers(clean(interpreted)), rel=1e-6, abs=1e-5)
    status, _, err = run_cli(tmp_path, FUSED, "--backend", "llvm", "--explain-backend", capsys=capsys)
    assert status == 0, err
    path = tmp_path / "program.dl"
    assert f"{path}:2:4: `f` compiled: one fused elementwise loop" in err
    assert f"{path}:3:4: `g` compiled: one fused elementwise loop" in err
    assert f"{path}:7:4: `h` compiled when called, for the shapes of its arguments" in err  # not fused: an axis
    assert f"{path}:7:4: `h`(f32[21]) compiled" in err


def test_libm_only_math_is_compiled_one_element_at_a_time(tmp_path: Path, capsys) -> None:
    """`softplus`, `log1p`, `expm1` and `erf` have no vector form (libmvec need not have them): a function using
    one is not fused but specialised, its loops scalar, and agrees with the interpreter."""
    source = """
fn act(x: f32[n]) -> f32[n] { return softplus(x) * erf(x) + log1p(x * x) - expm1(-abs(x)) }
fn main() { print(act(float(arange(40)) * 0.25 - 5.0)) }
"""
    interpreted, compiled = both_backends(tmp_path, source, capsys)
    clean = lambda text: text.replace("[", " ").replace("]", " ")  # noqa: E731
    assert numbers(clean(compiled)) == pytest.approx(numbers(clean(interpreted)), rel=1e-6, abs=1e-7)
    status, _, err = run_cli(tmp_path, source, "--backend", "llvm", "--explain-backend", capsys=capsys)
    assert status == 0, err
    assert "`act`(f32[40]) compiled" in err and "fused elementwise loop" not in err


def test_a_function_reading_the_clock_is_interpreted(tmp_path: Path, capsys) -> None:
    """`time()` is host work read anew at every call: the function calling it runs on the interpreter (the
    one it calls is still compiled), and its readings still show the work between them."""
    source = """
fn work(n: i64) -> f64 { let total = 0.0f64; for i in 0..n { total += float(i, dtype=f64) } return total }
fn timed(n: i64) -> f64 { let start = time(); let s = work(n); return (time() - start) + s * 0.0f64 }
fn main() { print(timed(200000) >= 0.0f64, work(10)) }
"""
    status, out, err = run_cli(tmp_path, source, "--backend", "llvm", "--explain-backend", capsys=capsys)
    assert status == 0, err
    assert out == "true 45.0\n"
    assert "`timed`(i64) interpreted: it calls `time`, which compiled code does not do: reading the clock" in err
    assert "`work` compiled" in err


def test_fused_kernel_is_vectorised(tmp_path: Path) -> None:
    from dl.codegen.fusion import compile_kernels

    path = tmp_path / "program.dl"
    path.write_text(FUSED, encoding="utf-8")
    _, typed = pipeline.prepare(pipeline.load(str(path)))
    kernels = list(native.lowered_program(typed).kernels.values())
    assert len(kernels) == 2
    assert re.search(r"<\d+ x (float|double)>", compile_kernels(kernels).ir_after)


def test_fused_shape_mismatch_is_a_diagnostic(tmp_path: Path, capsys) -> None:
    source = """
fn add(x: f32[n], y: f32[n]) -> f32[n] { return x + y }
fn pick(k: i64) -> f32[n] { return ones(k) }
fn main() { print(add(pick(3), pick(4))) }
"""
    status, _, err = run_cli(tmp_path, source, "--backend", "llvm", capsys=capsys)
    assert status == 1
    assert "error[E0520]" in err and "Traceback" not in err  # the annotation check, before the call
    (tmp_path / "program.dl").write_text(source.replace("pick(3), pick(4)", "ones(3), ones(3)"), encoding="utf-8")
    _, typed = pipeline.prepare(pipeline.load(str(tmp_path / "program.dl")))
    [kernel] = native.lowered_program(typed).kernels.values()
    from dl.codegen.fusion import compile_kernels
    from dl.runtime.errors import RunError

    body = native.kernel_body(kernel, compile_kernels([kernel]))
    frame = [None, np.ones(3, np.float32), np.ones(3, np.float32)]
    body(frame)
    assert frame[0].tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(RunError, match="tensor `y` has shape"):  # the bridge's own check
        body([None, np.ones(3, np.float32), np.ones(4, np.float32)])


def test_a_loop_llvm_cannot_compile_stays_interpreted(monkeypatch, dlrun, tmp_path) -> None:
    def failing(kernels):
        raise RuntimeError("LLVM ERROR: simulated failure\ndetails")

    monkeypatch.setattr(native, "compile_kernels", failing)
    program = tmp_path / "fused.dl"
    program.write_text(
        "fn f(x: f32[3], y: f32[3]) -> f32[3] {\n    return tanh(x * y) + x\n}\n\n"
        "fn main() {\n    print(f([1.0, 2.0, 3.0], [0.5, 0.5, 0.5]))\n}\n"
    )
    status, out, err = dlrun("--backend", "llvm", "--explain-backend", str(program))
    assert status == 0 and out == dlrun(str(program))[1]
    assert "`f` compiled when called, for the shapes of its arguments" in err  # not fused: LLVM failed
    _, typed = pipeline.prepare(pipeline.load(str(program)))
    backend = native.compile_program(typed, cache=False)
    [why] = [
        reason for key, reason in backend.lowered.refused.items() if backend.lowered.declarations[key][0].name == "f"
    ]
    assert why == "fusion: LLVM could not compile the loop (LLVM ERROR: simulated failure)"


REDUCING = """
fn total(x: f32[n], a: f32, b: f32) -> f32 { return sum(tanh(x * a + b)) }
fn average(x: f32[n, k], y: f32[n, k]) -> f32 {
    let d = x - y
    return mean(d * d)
}
fn peak(x: f32[n]) -> f32 { return max(sin(x) * 3.0 + x) }
fn low(x: f32[n]) -> f32 { return min(exp(-x * x) - 0.5) }
fn total64(x: f64[n]) -> f64 { return sum(exp(-x * x) * x + sqrt(abs(x))) }
fn average64(x: f64[n], c: f64) -> f64 { return mean(sigmoid(x) * c) }
fn peak64(x: f64[2, n]) -> f64 { return max(cos(x) - x * 0.01f64) }
fn low64(x: f64[2, n]) -> f64 { return min(tanh(x) + x * x) }
fn main() {
    let x = float(arange(100003)) * 0.0001 - 5.0
    let w = float(arange(100003), dtype=f64) * 0.0001f64 - 5.0f64
    let m = reshape(float(arange(4006)) * 0.01, 2, 2003)
    let m64 = reshape(float(arange(4006), dtype=f64) * 0.01f64 - 20.0f64, 2, 2003)
    print(total(x, 1.5, 0.25))
    print(average(m, m * 0.5 + 0.25))
    print(peak(x))
    print(low(x))
    print(total64(w))
    print(average64(w, 0.7f64))
    print(peak64(m64))
    print(low64(m64))
    print(total(float(arange(7)), 1.0, 0.0), total64(float(arange(3), dtype=f64)))
    print(total(zeros(0), 1.0, 0.0), total64(zeros(0, dtype=f64)), peak(-zeros(20)), low(-zeros(3)))
}
"""


def declared_at(path: Path, source: str, name: str) -> str:
    """Where `--explain-backend` places function `name` of `source`: `path:line:4`, its name after `fn `."""
    line = next(number for number, text in enumerate(source.splitlines(), 1) if text.startswith(f"fn {name}("))
    return f"{path}:{line}:4"


def test_fused_reductions_agree_with_the_interpreter(tmp_path: Path, capsys) -> None:
    """Sums accumulate per lane (f32 ones in f64) where numpy sums pairwise: f32 results agree to a
    relative 1e-6, f64 ones to 1e-12; `max` and `min` exactly. Arrays of 100003 elements exercise the
    vector loop and the remainder; an empty tensor sums to 0."""
    interpreted, compiled = both_backends(tmp_path, REDUCING, capsys)
    expected, actual = interpreted.splitlines(), compiled.splitlines()
    assert len(actual) == len(expected) == 10
    for line in (0, 1, 8):
        assert numbers(actual[line]) == pytest.approx(numbers(expected[line]), rel=1e-6)
    for line in (4, 5):
        assert numbers(actual[line]) == pytest.approx(numbers(expected[line]), rel=1e-12)
    for line in (2, 3, 6, 7, 9):
        assert actual[line] == expected[line]
    assert actual[9] == "0.0 0.0 -0.0 0.5"
    status, _, err = run_cli(tmp_path, REDUCING, "--backend", "llvm", "--explain-backend", capsys=capsys)
    assert status == 0, err
    path = tmp_path / "program.dl"
    for name, reduction in [("total", "sum"), ("average", "mean"), ("peak", "max"), ("low", "min")]:
        for suffix in ("", "64"):
            where = declared_at(path, REDUCING, name + suffix)
            assert f"{where}: `{name}{suffix}` compiled: one fused elementwise loop reducing with `{reduction}`" in err


def test_fused_reduction_accumulates_in_vectors(tmp_path: Path) -> None:
    from dl.codegen.fusion import compile_kernels

    path = tmp_path / "program.dl"
    path.write_text(REDUCING, encoding="utf-8")
    _, typed = pipeline.prepare(pipeline.load(str(path)))
    kernels = list(native.lowered_program(typed).kernels.values())
    assert {kernel.reduction for kernel in kernels} == {"sum", "mean", "max", "min"}
    text = compile_kernels(kernels).ir_after
    assert re.search(r"phi <\d+ x double>", text)  # the f32 sum's running value, one f64 per lane
    assert not re.search(r"store <\d+ x", text)  # the expression is never materialised


@pytest.mark.parametrize("reduction", ["mean", "max", "min"])
def test_fused_reduction_of_an_empty_tensor_fails_as_interpreted(reduction: str, tmp_path: Path, capsys) -> None:
    source = f"fn f(x: f32[n, k]) -> f32 {{ return {reduction}(x * 2.0) }}\nfn main() {{ print(f(zeros(0, 3))) }}\n"
    results = [run_cli(tmp_path, source, "--backend", backend, capsys=capsys) for backend in ("interp", "llvm")]
    assert results[0] == results[1]
    status, _, err = results[1]
    assert status == 1 and f"error[E0513]: `{reduction}` of an empty tensor f32[0, 3]" in err
    assert "Traceback" not in err
    _, typed = pipeline.prepare(pipeline.load(str(tmp_path / "program.dl")))
    assert [kernel.reduction for kernel in native.lowered_program(typed).kernels.values()] == [reduction]


def test_reductions_along_an_axis_are_compiled_when_called(tmp_path: Path, capsys) -> None:
    source = """
fn rows(x: f32[2, n]) -> f32[n] { return sum(x * 2.0, axis=0) }
fn inner(x: f32[n]) -> f32[n] { return x - max(x) }
fn main() { print(rows(ones(2, 3)), inner(ones(3))) }
"""
    status, out, err = run_cli(tmp_path, source, "--backend", "llvm", "--explain-backend", capsys=capsys)
    assert status == 0 and out == "[4. 4. 4.] [0. 0. 0.]\n", err
    path = tmp_path / "program.dl"
    assert f"{path}:2:4: `rows`(f32[2, 3]) compiled" in err
    assert f"{path}:3:4: `inner`(f32[3]) compiled" in err


SORTS = """
fn orders(x: f32[B, N]) -> (i64[B, N], f32[B, N], i64[B, N]) {
    return (argsort(x), sort(x, axis=0, descending=true), argsort(x * -1.0, descending=true))
}
fn counts(i: i64[B, K]) -> i64[B, 4] { return add_along_axis(zeros(len(i), 4, dtype=i64), i, zeros_like(i) + 1, 1) }
fn loss(logits: f32[B, N], actions: i64[B, 1]) -> f32 {
    return -sum(take_along_axis(log_softmax(logits), actions, 1)) + sum(sort(logits, descending=true)[:, 0:2])
}
fn main() {
    let logits = reshape(float(arange(12) * 5 % 7), 3, 4) * 0.5
    let actions = [[1], [0], [-1]]
    print(orders(logits), counts([[1, 1, 3], [0, 0, 0], [2, -1, 2]]))
    print("loss:", loss(logits, actions), grad(loss)(logits, actions))
}
"""


def test_sorts_and_picks_along_an_axis_are_compiled_with_their_gradients(tmp_path: Path, capsys) -> None:
    """`argsort`, `sort`, `take_along_axis` and `add_along_axis` compiled, and so is the derivative code of a
    loss picking one log-probability per row and summing each row's top two (`add_along_axis` at the picked
    and the sorted positions): the same positions and values as interpreted (log_softmax through libm)."""
    interpreted, compiled = both_backends(tmp_path, SORTS, capsys)
    assert_lines_close(compiled.splitlines(), interpreted.splitlines(), 1e-6, compiled)
    assert compiled.split("loss:")[0] == interpreted.split("loss:")[0]  # the orders and counts, exactly
    status, _, explained = run_cli(tmp_path, SORTS, "--backend", "llvm", "--explain-backend", capsys=capsys)
    path = tmp_path / "program.dl"
    assert status == 0 and explained.count(" interpreted") == 1, explained  # main, which prints
    for line, name, layout in (
        (2, "orders", "f32[3, 4]"),
        (5, "counts", "i64[3, 3]"),
        (6, "loss", "f32[3, 4], i64[3, 1]"),
    ):
        assert f"{path}:{line}:4: `{name}`({layout}) compiled" in explained, explained
    assert "`loss_grad`(f32[3, 4], i64[3, 1]) compiled" in explained, explained


TOPK = """
fn tops(x: f32[B, N]) -> (f32[B, 2], i64[B, 2], f32[1, N], i64[1, N], f32[B, 0], i64[B, 0], f32[B, N], i64[B, N]) {
    let (values, indices) = topk(x, 2)
    let (low, rows) = topk(x, 1, axis=0, largest=false)
    let (none, nowhere) = topk(x, 0)
    let (every, order) = topk(x * -1.0, len(x[0]), axis=-1, largest=false)
    return (values, indices, low, rows, none, nowhere, every, order)
}
fn counted(n: i64[B, N, M]) -> (i64[B, 2, M], i64[B, 2, M]) { return topk(n, 2, axis=1) }
fn wide(x: f64[N]) -> (f64[3], i64[3]) { return topk(x, 3, largest=false) }
fn loss(logits: f32[B, N]) -> f32 {
    let (best, at) = topk(logits, 2)
    return sum(best * best) - sum(take_along_axis(logits, at, 1))
}
fn main() {
    let logits = reshape(float(arange(12) * 5 % 7), 3, 4) * 0.5
    print(tops(logits))
    print(counted(reshape(arange(24) * 7 % 5, 2, 3, 4)), wide([3.0f64, -1.0f64, 2.0f64, -1.0f64, 0.5f64]))
    print("loss:", loss(logits), grad(loss)(logits))
}
"""


def test_topk_is_compiled_with_its_gradient(tmp_path: Path, capsys) -> None:
    """`topk` compiled (the first k of `ir.Sort`'s order, and `x` read there): along either axis, both ways, k
    of 0 and of the whole axis, of f32, f64 and i64 with ties (lower position first), and the derivative code of
    a loss of its values: the same values and positions as interpreted."""
    interpreted, compiled = both_backends(tmp_path, TOPK, capsys)
    assert compiled == interpreted
    status, _, explained = run_cli(tmp_path, TOPK, "--backend", "llvm", "--explain-backend", capsys=capsys)
    path = tmp_path / "program.dl"
    assert status == 0 and explained.count(" interpreted") == 1, explained  # main, which prints
    for line, name, layout in ((2, "tops", "f32[3, 4]"), (9, "counted", "i64[2, 3, 4]"), (10, "wide", "f64[5]")):
        assert f"{path}:{line}:4: `{name}`({layout}) compiled" in explained, explained
    assert "`loss_grad`(f32[3, 4]) compiled" in explained, explained


def test_the_cache_forgets_its_least_recently_used_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    monkeypatch.setattr(cache, "MAX_ENTRIES", 10)
    for number in range(10):
        cache.store(tmp_path, f"{number:064x}", b"object code %d" % number)
        stamp = 1_000_000 + number  # stored one second apart, oldest first
        os.utime(cache.entry_path(tmp_path, f"{number:064x}"), (stamp, stamp))
    assert cache.load(tmp_path, f"{0:064x}") == b"object code 0"  # used now: the most recent
    cache.store(tmp_path, f"{10:064x}", b"object code 10")  # the 11th entry: trimmed to 9
    kept = sorted(path.stem for path in (tmp_path / "llvm").glob("*.o"))
    assert len(kept) == 9
    assert f"{0:064x}" in kept and f"{10:064x}" in kept  # the one just used and the newest stay
    assert f"{1:064x}" not in kept and f"{2:064x}" not in kept  # the least recently used went
    monkeypatch.setattr(cache, "MAX_BYTES", 20)
    cache.store(tmp_path, f"{11:064x}", b"object code 11")
    assert sum(path.stat().st_size for path in (tmp_path / "llvm").glob("*.o")) <= 20


STOPPED = """
fn count(n: i64) -> i64 { let k = 0; while k < n { k += 1 } return k }
fn churn(n: i64) -> f64 { let x = 0.5f64; for i in 0..n { x = 3.9f64 * x * (1.0f64 - x) } return x }
fn spin() -> i64 { let t = 0; while true { t = t + sum(permutation(2, seed=1)) } return t }
"""


def test_ctrl_c_in_interpreted_code_does_not_stop_the_next_compiled_call(tmp_path: Path) -> None:
    """Ctrl-C sets the stop flag of every compiled module; one whose loops never ran kept it, so its next
    call stopped at once with "interrupted" (the REPL after Ctrl-C). Found by scripts/fuzz_backends.py."""
    import _thread
    import threading

    path = tmp_path / "stopped.dl"
    path.write_text(STOPPED, encoding="utf-8")
    _, typed = pipeline.prepare(pipeline.load(str(path)))
    compiled = pipeline.on_backend("llvm", typed, cache=False)
    timer = threading.Timer(0.3, _thread.interrupt_main)
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        compiled.call("spin", [])  # compiled too now: `permutation` draws through the host (fill_draws)
    try:
        counted = compiled.call("count", [5])
    except KeyboardInterrupt:
        pytest.fail("the compiled call stopped at once: the earlier Ctrl-C's flag was still set")
    assert counted == 5


def test_after_ctrl_c_the_program_has_stopped_when_the_run_returns(tmp_path: Path) -> None:
    """Ctrl-C stops the program before `run_guarded` returns. It waited with `Thread.join`, which in Python
    3.11 returns at once once a Ctrl-C has interrupted an earlier `join`: compiled code then ran on in the
    background, and crashed the process as it exited (llvmlite unloading under it)."""
    import _thread
    import threading
    import time

    from dl.interp import run as interpreter
    from dl.runtime.calls import invoke

    path = tmp_path / "stopped.dl"
    path.write_text(STOPPED, encoding="utf-8")
    program, typed = pipeline.prepare(pipeline.load(str(path)))
    compiled = native.compile_program(typed, False)
    churn = interpreter.compile_program(program, typed, compiled.bodies).states[str(path)].cells["churn"].value
    ended: list[float] = []

    def action() -> None:
        try:
            invoke(churn, [10**15], churn.span)  # a compiled loop of days
        finally:
            ended.append(time.monotonic())

    threading.Timer(0.3, _thread.interrupt_main).start()
    with pytest.raises(KeyboardInterrupt):
        interpreter.run_guarded(action)
    assert ended, "run_guarded returned while the program still ran"


SPLIT_SOURCE = """
fn f(x: f32[n], y: f32[n], a: f32) -> f32[n] { return tanh(x * a + y) * y + x }
fn total(x: f32[n], y: f32[n]) -> f32 { return sum(tanh(x) * y) }
fn average(x: f64[n], y: f64[n]) -> f64 { return mean(exp(-abs(x)) * y) }
fn peak(x: f32[n], y: f32[n]) -> f32 { return max(x * y) }
fn least(x: f32[n], y: f32[n]) -> f32 { return min(x - y) }
fn main() { }
"""


def test_a_large_fused_loop_is_split_across_threads(monkeypatch) -> None:
    """With several threads (`--threads`), a fused loop over at least `SPLIT` elements runs as one call per
    thread over its own range: elementwise results are the whole loop's, bit for bit; a reduction combines
    its pieces' (sums and means in f64: within a relative 1e-6 in f32, 1e-12 in f64; maxima and minima exact,
    a nan winning as numpy's does)."""
    from dl.interp import run as interpreter
    from dl.runtime import threads
    from dl.runtime.backend import Options

    _, typed = pipeline.prepare(pipeline.load("split.dl", SPLIT_SOURCE))
    bodies = native.compile_program(typed, cache=False).bodies
    program = interpreter.BACKEND.prepare(typed, Options(bodies=bodies))
    rng = np.random.default_rng(0)
    n = 10_007  # not a multiple of the pieces' alignment
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    calls = {
        "f": (x, y, np.float32(1.5)),
        "total": (x, y),
        "average": (x.astype(np.float64), y.astype(np.float64)),
        "peak": (x, y),
        "least": (x, y),
    }
    whole = {name: program.call(name, list(args)) for name, args in calls.items()}
    split: list[int] = []
    running = threads.in_parallel
    monkeypatch.setattr(threads, "SPLIT", 1000)
    monkeypatch.setattr(threads.Threads, "count", 3)
    monkeypatch.setattr(native, "in_parallel", lambda pieces: split.append(len(pieces)) or running(pieces))
    for name, args in calls.items():
        result = program.call(name, list(args))
        if name == "f":
            np.testing.assert_array_equal(result, whole[name])
        elif name in ("peak", "least"):
            assert result == whole[name]
        else:
            assert result == pytest.approx(whole[name], rel=1e-12 if name == "average" else 1e-6)
    assert split == [3] * len(calls)
    x[4321] = np.nan  # in the second piece
    assert np.isnan(program.call("peak", [x, y])) and np.isnan(program.call("least", [x, y]))
    monkeypatch.setattr(threads.Threads, "count", 1)
    assert program.call("f", [x, y, np.float32(1.5)]).shape == (n,) and split[-1] == 1  # one thread: one piece


SHARED_LOOP = """
fn first(x: f32[40, 24], w: f32[24, 8]) -> f32[40, 8] { return tanh(x * 2.0 + 1.0) @ w }
fn second(x: f32[40, 24], w: f32[24, 8]) -> f32[40, 8] { return tanh(x * 2.0 + 1.0) @ (w * 0.5) }
fn main() {
    let x = float(reshape(arange(960), 40, 24)) * 0.01 - 4.0
    let w = float(reshape(arange(192), 24, 8)) * 0.02 - 1.5
    print(sum(first(x, w)), sum(second(x, w)))
}
"""


def manifests(directory: Path) -> dict[Path, object]:
    from dl.codegen import llvm

    return {entry: llvm.entry_parts(cache.read_entry(entry, cache.MAGIC)) for entry in directory.glob("llvm/*.o")}


def test_a_loop_compiled_by_one_module_is_called_by_the_next(tmp_path: Path, capsys, monkeypatch) -> None:
    """`first` and `second` are compiled apart (each when `main` calls it) and run the same loop nest: the
    second module calls the first one's instead of compiling it again, and its cache entry says so. A warm run
    loads both entries; an entry whose loops are not loaded (a program that calls only `second`) is compiled
    again, whole, rather than loaded."""
    from dl.codegen import llvm

    monkeypatch.setenv("DL_CACHE_DIR", str(tmp_path / "cache"))
    # (the engines stay in `LOOP_ENGINES`: LLVM's symbol table, which is the process's, points into them)
    monkeypatch.setattr(llvm, "LOADED_LOOPS", {})
    interpreted, compiled = both_backends(tmp_path, SHARED_LOOP, capsys)
    assert numbers(compiled) == pytest.approx(numbers(interpreted), rel=1e-5)
    entries = manifests(tmp_path / "cache")
    importing = [e for e in entries.values() if e.imported]
    assert len(entries) == 2 and len(importing) == 1, entries
    (defining,) = [e for e in entries.values() if not e.imported]
    assert set(importing[0].imported) <= set(defining.defined)
    assert not set(importing[0].defined) & set(defining.defined)

    written = {entry: entry.stat().st_ino for entry in entries}  # an entry written again is a new file
    monkeypatch.setattr(llvm, "LOADED_LOOPS", {})  # a new process: nothing loaded yet
    status, warm, err = run_cli(tmp_path, SHARED_LOOP, "--backend", "llvm", capsys=capsys)
    assert (status, warm) == (0, compiled), err
    assert {entry: entry.stat().st_ino for entry in entries} == written  # both loaded, none compiled

    monkeypatch.setattr(llvm, "LOADED_LOOPS", {})
    alone = SHARED_LOOP.replace("print(sum(first(x, w)), sum(second(x, w)))", "print(sum(second(x, w)))")
    status, out, err = run_cli(tmp_path, alone, "--backend", "llvm", capsys=capsys)
    assert (status, numbers(out)) == (0, numbers(compiled)[1:]), err
    again = manifests(tmp_path / "cache")
    assert len(again) == 2 and not any(e.imported for e in again.values())  # `second` compiled whole


def test_one_loop_with_a_nan_constant_twice_in_a_module_is_one_function(tmp_path: Path, capsys) -> None:
    """A loop is found by its symbol (a digest of its text): two copies of a loop holding a NaN constant, whose
    keys are never equal (NaN is not equal to itself), are one function, not a clash of names."""
    source = """
fn h(x: f32[8, 16], y: f32[8, 16], w: f32[16, 4]) -> f32[8, 4] {
    return tanh(x * (1e400 - 1e400) + 1.0) @ w + tanh(y * (1e400 - 1e400) + 1.0) @ w
}
fn main() {
    let x = float(reshape(arange(128), 8, 16)) * 0.01
    let w = float(reshape(arange(64), 16, 4)) * 0.02
    print(sum(h(x, x * 2.0, w)))
}
"""
    interpreted, compiled = both_backends(tmp_path, source, capsys)
    assert compiled == interpreted == "nan\n"
    status, _, explained = run_cli(tmp_path, source, "--backend", "llvm", "--explain-backend", capsys=capsys)
    assert status == 0 and re.search(r"`h`\(f32\[8, 16\], f32\[8, 16\], f32\[16, 4\]\) compiled$", explained, re.M), (
        explained
    )


TUPLE_STATE_SECOND = """
struct Cell { h: f64, g: f64 }
fn f(x: f64, n: i64) -> f64 {
    let s = (x, 0.5f64)
    let c = Cell { h: x, g: 1.0f64 }
    let i = 0
    while i < n {
        s = (sin(s[0]) * s[1] + x, s[1] * 0.9)
        c = Cell { h: tanh(c.h * c.g) + x * 0.5, g: c.g * 0.8 }
        i += 1
    }
    return s[0] * s[0] + c.h
}
fn df(x: f64, n: i64) -> f64 { return grad(f)(x, n) }
fn main() { print(grad(df)(0.3f64, 5), grad(df)(-1.1f64, 0), grad(df)(0.7f64, 1)) }
"""


def test_a_second_derivative_through_a_loop_with_tuple_and_struct_state_is_compiled(tmp_path: Path, capsys) -> None:
    """`zeros_like` of the saved state reaches the tapes inside tuples (and scalars in their variables'
    homes): the function compiles and agrees with the interpreter, with 5, 0 and 1 steps."""
    interpreted, compiled = both_backends(tmp_path, TUPLE_STATE_SECOND, capsys)
    assert numbers(compiled) == pytest.approx(numbers(interpreted), rel=1e-12)
    status, _, explained = run_cli(
        tmp_path, TUPLE_STATE_SECOND, "--backend", "llvm", "--explain-backend", capsys=capsys
    )
    assert status == 0 and "`df_grad`(f64, i64) compiled" in explained, explained


LAMBDA_STEP = """
struct Model { w: f32[3, 2], b: f32[2] }
fn loss(m: Model, x: f32[N, 3], y: f32[N, 2]) -> f32 {
    let d = tanh(x @ m.w + m.b) - y
    return mean(d * d)
}
fn main() {
    let x = reshape(float(arange(12)) * 0.1, 4, 3)
    let y = ones(4, 2) * 0.5
    let m = Model { w: ones(3, 2) * 0.1, b: zeros(2) }
    let rate = 0.5
    fn step(p: Model) -> f32 { return loss(p, x, y) }
    for epoch in 0..3 {
        let g = grad(fn(p: Model) => loss(p, x, y) * rate)(m)
        let (value, h) = value_and_grad(step)(m)
        m = m - 0.1 * g - 0.1 * h
        print(epoch, value)
    }
}
"""


def test_the_gradient_of_a_lambda_or_a_local_fn_is_compiled_where_its_function_is_interpreted(
    tmp_path: Path, capsys
) -> None:
    """`main` prints, so it runs interpreted; the derivatives of the lambda and of the local `fn` that close
    over the data are top-level functions of what they captured, and those are compiled."""
    interpreted, compiled = both_backends(tmp_path, LAMBDA_STEP, capsys)
    assert [line.split()[0] for line in compiled.splitlines()] == ["0", "1", "2"]
    for left, right in zip(interpreted.split(), compiled.split(), strict=True):
        assert float(left) == pytest.approx(float(right), rel=1e-5)
    status, _, explained = run_cli(tmp_path, LAMBDA_STEP, "--backend", "llvm", "--explain-backend", capsys=capsys)
    made = {line.split("`")[1] for line in explained.splitlines() if line.endswith(") compiled")}
    assert status == 0 and made >= {"main_lambda_grad", "step_value_and_grad"}, explained


DIMENSIONS_AS_ONE_TUPLE = """
fn shaped(x: f32[2, 3]) -> f32[3, 2] {
    let back = reshape(transpose(x, (1, 0)) * 2.0, shape(transpose(x)))
    return back + zeros(shape(back)) + ones((3, 2))
}
fn single(x: f32[1]) -> f32 { return reshape(x, ()) * 2.0 }
fn main() { print(shaped([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), single([1.5])) }
"""


def test_dimensions_given_as_one_tuple_compile(tmp_path: Path, capsys) -> None:
    """`reshape(y, shape(x))`, `transpose(x, (1, 0))`, `ones((3, 2))` and `reshape(x, ())` (its one element) compile,
    and print what the interpreter prints."""
    interpreted, compiled = both_backends(tmp_path, DIMENSIONS_AS_ONE_TUPLE, capsys)
    assert compiled == interpreted
    status, _, explained = run_cli(
        tmp_path, DIMENSIONS_AS_ONE_TUPLE, "--backend", "llvm", "--explain-backend", capsys=capsys
    )
    assert status == 0
    assert "`shaped`(f32[2, 3]) compiled" in explained and "`single`(f32[1]) compiled" in explained, explained
