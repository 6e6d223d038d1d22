"""The printed derivative source of a handful of functions (`dlrun grad`), against golden files.

Each `tests/derivatives/NAME.dl` starts with `#! dlrun grad --fn F [--wrt ...]`; the source that
command prints is `NAME.grad` (rewrite with `--update-goldens` and read the diff). The printed
source must also be a working program: appended to the original file, with `main`'s `grad(F,
...)` replaced by the printed function's name, it must print exactly what the original prints.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from conftest import ROOT, check_golden

CASES = sorted((ROOT / "tests" / "derivatives").glob("*.dl"))


def command(path: Path) -> list[str]:
    first = path.read_text().splitlines()[0]
    assert first.startswith("#! dlrun grad "), f"{path.name} must start with `#! dlrun grad --fn F ...`"
    return shlex.split(first[len("#! dlrun ") :])


def generated_name(argv: list[str]) -> tuple[str, str]:
    """The function `grad(F, wrt=...)` generates, and how `main` writes that call."""
    function = argv[argv.index("--fn") + 1]
    wrt = argv[argv.index("--wrt") + 1] if "--wrt" in argv else "0"
    positions = wrt.split(",")
    if positions == ["0"]:
        return f"{function}_grad", f"grad({function})"
    written = positions[0] if len(positions) == 1 else f"({', '.join(positions)})"
    return f"{function}_grad_wrt_{'_'.join(positions)}", f"grad({function}, wrt={written})"


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_printed_derivative(path: Path, dlrun, update_goldens: bool) -> None:
    argv = command(path)
    status, out, err = dlrun(*argv[:1], str(path.relative_to(ROOT)), *argv[1:])
    assert (status, err) == (0, "")
    check_golden(path.with_suffix(".grad"), out, update_goldens)


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_printed_derivative_runs_and_agrees(path: Path, dlrun, tmp_path: Path) -> None:
    argv = command(path)
    status, printed, err = dlrun(*argv[:1], str(path.relative_to(ROOT)), *argv[1:])
    assert status == 0, err
    status, expected, err = dlrun(str(path.relative_to(ROOT)))
    assert status == 0, err
    name, call = generated_name(argv)
    source = path.read_text()
    assert call in source, f"`main` of {path.name} should call {call}"
    rewritten = tmp_path / path.name
    rewritten.write_text(re.sub(re.escape(call), name, source) + "\n" + printed)
    status, out, err = dlrun(str(rewritten))
    assert (status, err) == (0, "")
    assert out == expected


REFUSED = sorted((ROOT / "tests" / "derivatives" / "refused").glob("*.dl"))


@pytest.mark.parametrize("path", REFUSED, ids=lambda p: p.stem)
def test_a_request_grad_would_refuse_is_its_diagnostic(path: Path, dlrun, update_goldens: bool) -> None:
    """`dlrun grad` on a function `grad` cannot differentiate (not a float scalar, an integer or missing
    argument) gives the checker's E0330/E0331/E0334 at the function's name, never an internal error."""
    argv = command(path)
    status, out, err = dlrun(*argv[:1], str(path.relative_to(ROOT)), *argv[1:])
    assert (status, out) == (1, "")
    assert "internal error" not in err
    check_golden(path.with_suffix(".err"), err, update_goldens)


def test_the_shipped_newton_example_is_refused_with_e0330(dlrun) -> None:
    """`newton_sqrt` returns (f64, i64): the E0330 a program's `grad(newton_sqrt)` gets, at its declaration."""
    status, out, err = dlrun("grad", "examples/newton.dl", "--fn", "newton_sqrt")
    assert (status, out) == (1, "")
    lines = err.splitlines()
    assert lines[0] == "error[E0330]: `grad` needs a function that returns a float scalar, but it returns (f64, i64)"
    assert lines[1] == "  --> examples/newton.dl:10:4"
    assert lines[4] == "   |    ^^^^^^^^^^^ returns (f64, i64)"
