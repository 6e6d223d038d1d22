"""Shared test set-up: golden files and running `dlrun` in-process."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as `dl` itself sets it, before numpy is imported
# Tests, and the processes they start, keep the parse table (lang/tables.py) and compiled code in a cache
# directory of their own, removed at the end, never in the user's.
TEST_CACHE = tempfile.TemporaryDirectory(prefix="dl-test-cache-")
os.environ["DL_CACHE_DIR"] = TEST_CACHE.name

ROOT = Path(__file__).resolve().parent.parent


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-goldens", action="store_true", help="rewrite golden .out/.err files")


@pytest.fixture
def update_goldens(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-goldens") or os.environ.get("DL_UPDATE_GOLDENS"))


@pytest.fixture
def dlrun(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch):
    """Run the real CLI in-process from the repository root; returns (status, stdout, stderr)."""
    from dl.cli import main

    monkeypatch.chdir(ROOT)

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        status = main(list(argv))
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return run


@pytest.fixture
def run_dl(dlrun, tmp_path, monkeypatch):
    """Write `source` as prog.dl in a fresh directory and run it with `dlrun`: (status, stdout, stderr)."""

    def run(source: str, args: list[str] | None = None, options: tuple[str, ...] = ()) -> tuple[int, str, str]:
        (tmp_path / "prog.dl").write_text(source)
        monkeypatch.chdir(tmp_path)
        return dlrun(*options, "prog.dl", *(args or []))

    return run


def check_golden(path: Path, actual: str, update: bool, rtol: float = 0.0) -> None:
    """`actual` is the golden file's text; with `rtol`, its numbers may differ by that much relatively
    (a training run's printed f32 losses end in digits that depend on the CPU's BLAS kernels). The standard
    library's directory, which differs from checkout to checkout, is written `<stdlib>`."""
    from dl.lang.modules import STDLIB_DIRECTORY  # (here: dl is imported after the environment is set)

    actual = actual.replace(STDLIB_DIRECTORY, "<stdlib>")
    if update or not path.exists():
        path.write_text(actual)
        if not update:
            pytest.fail(f"golden file {path.name} was missing and has been written; review it")
        return
    expected = path.read_text()
    message = f"output differs from {path.name} (rerun with --update-goldens to accept)"
    if rtol and actual != expected:
        assert same_but_numbers(actual, expected, rtol), message + f"\n{actual}"
        return
    assert actual == expected, message


NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def same_but_numbers(actual: str, expected: str, rtol: float) -> bool:
    """The same text, its numbers within `rtol` of each other (relative to the larger). Runs of white space
    count as one, and none beside a bracket: numpy pads an array's columns to its widest number, so a last digit
    that moves can move the padding and the line breaks."""
    if skeleton(actual) != skeleton(expected):
        return False
    pairs = zip(NUMBER.findall(actual), NUMBER.findall(expected), strict=True)
    return all(abs(float(a) - float(e)) <= rtol * max(abs(float(a)), abs(float(e))) for a, e in pairs)


def skeleton(text: str) -> str:
    """`text` with its numbers as `#`, white space as one blank, and none inside brackets' edges."""
    spaced = re.sub(r"\s+", " ", NUMBER.sub("#", text))
    return re.sub(r"([\[(]) | ([\])])", r"\1\2", spaced).strip()
