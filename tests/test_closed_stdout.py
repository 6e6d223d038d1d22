"""A closed stdout (`dlrun prog.dl | head -1`) ends dlrun quietly, as `cat` does: exit status 141 (what a
shell reports for `cat` killed by SIGPIPE there), nothing on stderr, no traceback. Every writer of stdout is
covered: `print` and `progress` in a program on both backends, `check`, `check --types`, `fmt --print`,
`grad`, `plot` and the REPL; in-process with a stdout that refuses every write, and for real through a pipe
whose reader goes away."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from dl.cli import STDOUT_CLOSED, main

PROGRAM = """\
fn f(x: f32) -> f32 {
    return x * x
}

fn main() {
    for i in 0..100000 {
        progress(i + 1, 100000, "loop")
        print(i)
    }
}
"""


class ClosedPipe(io.TextIOBase):
    """A stdout whose reader has gone: every write fails as a closed pipe does."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    def isatty(self) -> bool:
        return False


@pytest.fixture
def program(tmp_path: Path) -> Path:
    path = tmp_path / "loop.dl"
    path.write_text(PROGRAM)
    (tmp_path / "metrics.jsonl").write_text('{"name": "loss", "step": 0, "value": 1.0}\n')
    return path


def commands(program: Path) -> dict[str, list[str]]:
    folder = program.parent
    return {
        "run": [str(program)],
        "run llvm": ["--backend", "llvm", str(program)],
        "check": ["check", str(program)],
        "check --types": ["check", "--types", str(program)],
        "fmt --print": ["fmt", "--print", str(program)],
        "grad": ["grad", str(program), "--fn", "f"],
        "plot": ["plot", str(folder / "metrics.jsonl"), "-o", str(folder / "curve.png")],
    }


@pytest.mark.parametrize("name", list(commands(Path("x.dl"))))
def test_every_command_stops_quietly_when_stdout_is_closed(
    name: str, program: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    if name == "plot":
        pytest.importorskip("matplotlib")
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    status = main(commands(program)[name])
    assert status == STDOUT_CLOSED
    assert capsys.readouterr().err == ""


def test_the_repl_stops_quietly_when_stdout_is_closed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("let x = 1\nx + 1\nprint(x)\n"))
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main(["repl"]) == STDOUT_CLOSED
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("backend", ["interp", "llvm"])
def test_a_reader_that_goes_away_ends_the_program_quietly(backend: str, program: Path) -> None:
    """The real thing: `dlrun loop.dl | head -1`, with the program far from done when the reader leaves."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT / "tests")}
    command = [sys.executable, "-m", "dl", "--backend", backend, str(program)]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment) as child:
        assert child.stdout.readline() == b"loop 1/100000\n"
        child.stdout.close()
        status = child.wait(timeout=120)
        err = child.stderr.read().decode()
    assert (status, err) == (STDOUT_CLOSED, "")
