"""Golden tests: every program under tests/programs prints its `.out` (its numbers to a few units in an f32's
last place); every broken program under tests/errors reports exactly its `.err` and exits with status 1.
(examples/ has its own tests, tests/test_examples.py: they write files, so they run in a temporary directory.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ROOT, check_golden

# the last digit or two of an f32 sine or power depends on the SIMD kernels numpy picks for the CPU (AVX-512 or
# AVX2): numbers may differ by a few units in an f32's last place, the rest of the text not at all
F32_DIGITS = 2e-6
PROGRAMS = sorted((ROOT / "tests" / "programs").glob("*.dl"))
BROKEN = sorted((ROOT / "tests" / "errors").glob("*.dl"))


def relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", PROGRAMS, ids=relative)
def test_program_output(path: Path, dlrun, update_goldens: bool) -> None:
    golden = path.with_suffix(".out")
    status, out, err = dlrun(relative(path))
    assert err == "", err
    assert status == 0
    check_golden(golden, out, update_goldens, rtol=F32_DIGITS)


@pytest.mark.parametrize("path", BROKEN, ids=relative)
def test_program_diagnostics(path: Path, dlrun, update_goldens: bool) -> None:
    status, _, err = dlrun(relative(path))
    assert status == 1, err
    check_golden(path.with_suffix(".err"), err, update_goldens)
