"""Integer literals of every size, in every context, are one consistent diagnostic or one consistent value.

Generated over sizes from 1 digit to 100,000 (around the edges of i32, i64, f32, f64 and Python's 4,300-digit
limit on reading integers) and over the contexts that give a literal its dtype (bare: i64; `i32` suffix; an
f32 or an f64 operand). `dlrun check`, the language server's analysis, the interpreter and `--backend llvm`
agree: a literal its dtype holds gives the value Python computes; one it does not is E0515 "integer literal
N is out of range for DTYPE" at the literal. Float literals too large for their dtype are infinity on both
backends, as in IEEE arithmetic (the standard library writes minus infinity as `-1e400`)."""

from __future__ import annotations

import numpy as np
import pytest
from dl import lang

F32_MAX = float(np.finfo(np.float32).max)
F64_MAX = float(np.finfo(np.float64).max)
# The literals, as digits (Python itself refuses to turn integers of more than 4,300 digits into text).
LITERALS = [
    "0",
    str(2**31 - 1),
    str(2**31),
    str(2**63 - 1),
    str(2**63),
    "1" + "0" * 20,
    "1" + "0" * 38,
    "1" + "0" * 39,
    "1" + "0" * 308,
    "1" + "0" * 309,
    "1" + "0" * 4299,
    "1" + "0" * 4300,
    "1" + "0" * 100_000,
]
# Each context: the function's body, with {} where the literal goes; the dtype the literal takes there.
CONTEXTS = {
    "i64": ("    print({})", "i64"),
    "i32": ("    print({}i32)", "i32"),
    "f32": ("    let x = 2.0\n    print(x * {})", "f32"),
    "f64": ("    let x = 2.0f64\n    print(x * {})", "f64"),
}
LIMITS = {"i64": 2**63 - 1, "i32": 2**31 - 1, "f32": F32_MAX, "f64": F64_MAX}


def program(digits: str) -> tuple[str, list[tuple[int, int, str]]]:
    """A program with one function per context using the literal `digits`; and the E0515 diagnostics it must
    give, as (line, column, message) (the parser's, for a literal of more digits than any dtype holds)."""
    source, expected, parse_time = "", [], []
    for name, (body, dtype) in CONTEXTS.items():
        function = f"fn in_{name}() {{\n{body.format(digits)}\n}}\n\n"
        at = source.count("\n") + function[: function.index(digits)].count("\n") + 1
        column = function.split("\n")[at - source.count("\n") - 1].index(digits) + 1
        source += function
        if len(digits) > 309:  # no dtype holds it: the parser says so, before any context is known
            parse_time.append((at, column, message(digits, "i32" if dtype == "i32" else "i64")))
        elif int(digits) > LIMITS[dtype]:
            expected.append((at, column, message(digits, dtype)))
    source += "fn main() {\n" + "".join(f"    in_{name}()\n" for name in CONTEXTS) + "}\n"
    return source, parse_time or expected


def message(digits: str, dtype: str) -> str:
    shown = digits if len(digits) <= 40 else f"{digits[:12]}...{digits[-12:]} ({len(digits)} digits)"
    return f"integer literal {shown} is out of range for {dtype}"


def reported(err: str) -> list[tuple[int, int, str]]:
    """The (line, column, message) of each diagnostic in rendered stderr."""
    found = []
    lines = err.splitlines()
    for position, line in enumerate(lines):
        if line.startswith("error["):
            code, text = line[len("error[") :].split("]: ", 1)
            assert code == "E0515", line
            place = lines[position + 1].rsplit(":", 2)
            found.append((int(place[1]), int(place[2]), text))
    return found


@pytest.mark.parametrize("digits", LITERALS, ids=lambda d: f"{len(d)} digits, {d[:4]}")
def test_every_size_of_integer_literal_in_every_context(digits: str, tmp_path, dlrun) -> None:
    source, expected = program(digits)
    path = tmp_path / "literal.dl"
    path.write_text(source)
    every = sorted(expected)
    status, out, err = dlrun("check", str(path))
    assert (status, reported(err)) == ((1, every) if every else (0, []))
    analysed = lang.check(source, str(path))
    assert sorted((d.span.line, d.span.column, d.message) for d in analysed.errors) == every
    runs = [dlrun(str(path)), dlrun("--backend", "llvm", "--no-cache", str(path))]
    if every:
        first_only = len(digits) > 309  # the parser stops at the first declaration it cannot read
        for status, out, err in runs:
            assert (status, out) == (1, "") and reported(err) == (every[:1] if first_only else every)
        return
    interpreted, compiled = runs
    assert interpreted[0] == 0 and interpreted == compiled
    printed = interpreted[1].splitlines()
    value = int(digits)
    assert [int(printed[0]), int(printed[1])] == [value, value]
    assert np.float32(printed[2]) == np.float32(2.0) * np.float32(value)  # printed as the shortest f32 text
    assert float(printed[3]) == 2.0 * float(value)


@pytest.mark.parametrize("text", ["3.4e38", "3.5e38", "1e39", "1e308", "1e309", "-1e400", "1" + "0" * 5000 + ".0"])
@pytest.mark.parametrize("suffix", ["", "f32", "f64"])
def test_float_literals_too_large_for_their_dtype_are_infinity_on_both_backends(
    text: str, suffix: str, tmp_path, dlrun
) -> None:
    path = tmp_path / "float.dl"
    path.write_text(f"fn main() {{\n    print({text}{suffix})\n}}\n")
    limit = F64_MAX if suffix == "f64" else F32_MAX
    value = float(text)
    expected = ("-inf" if value < 0 else "inf") if abs(value) > limit else None
    assert dlrun("check", str(path)) == (0, "ok\n", "")
    interpreted = dlrun(str(path))
    assert interpreted[0] == 0 and interpreted == dlrun("--backend", "llvm", "--no-cache", str(path))
    if expected is not None:
        assert interpreted[1] == expected + "\n"
    else:
        dtype = np.float64 if suffix == "f64" else np.float32
        assert dtype(interpreted[1]) == dtype(value)  # printed as the shortest text of its dtype
