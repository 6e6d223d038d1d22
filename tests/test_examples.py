"""The examples: each runs (in a temporary directory, as they write checkpoints and metrics) and
prints exactly its golden `.out`; the training examples also learn, save and resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT, check_golden

EXAMPLES = ROOT / "examples"
QUICK = {"train.dl": ["quick"]}  # examples whose golden output is of a shortened run


@pytest.fixture
def run_in(tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch):
    """Run `dlrun EXAMPLE ARGS...` in-process, the current directory a fresh temporary one."""
    from dl.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DL_METRICS", raising=False)

    def run(name: str, *args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        status = main([str(EXAMPLES / name), *args])
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return run


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.dl")), ids=lambda p: p.name)
def test_example_output(path: Path, run_in, update_goldens: bool) -> None:
    status, out, err = run_in(path.name, *QUICK.get(path.name, []))
    assert (status, err) == (0, "")
    check_golden(path.with_suffix(".out"), out, update_goldens)


def test_train_learns_saves_and_resumes(run_in, tmp_path: Path) -> None:
    status, out, err = run_in("train.dl")
    assert (status, err) == (0, "")
    accuracies = [float(line.split()[-1]) for line in out.splitlines() if line.startswith("epoch")]
    assert len(accuracies) == 20 and accuracies[-1] >= 0.97, out
    assert (tmp_path / "digits_mlp.safetensors").is_file()
    logged = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["name"] for r in logged[:2]] == ["loss", "test accuracy"] and len(logged) == 40
    status, resumed, err = run_in("train.dl", "--resume")
    assert (status, err) == (0, "")
    first = resumed.splitlines()[0]
    assert first.startswith("resumed from digits_mlp.safetensors at step 440 test accuracy ")
    assert float(first.split()[-1]) == accuracies[-1]  # the saved model, exactly


def test_train_is_reproducible(run_in) -> None:
    assert run_in("train.dl", "quick") == run_in("train.dl", "quick")
