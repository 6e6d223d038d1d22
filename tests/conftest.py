"""Shared test set-up: golden files and running `dlrun` in-process."""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as `dl` itself sets it, before numpy is imported

from pathlib import Path

import pytest

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


def check_golden(path: Path, actual: str, update: bool) -> None:
    if update or not path.exists():
        path.write_text(actual)
        if not update:
            pytest.fail(f"golden file {path.name} was missing and has been written; review it")
        return
    assert actual == path.read_text(), f"output differs from {path.name} (rerun with --update-goldens to accept)"
