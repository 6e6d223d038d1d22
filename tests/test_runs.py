"""Run records (runtime/metrics.py): each run that logs a metric gets a directory of its own under the
runs directory, with `run.json` and `metrics.jsonl`; `--metrics FILE` still appends to one file."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT

LOGGING = """fn main(rate) {
    for step in 0..3 {
        log_metric("loss", float(rate) / float(step + 1))
    }
    log_metric("accuracy", 0.5, step=7)
}
"""


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dlrun):
    """`dlrun` run in a temporary directory holding `logging.dl`, with no metrics settings in the environment."""
    (tmp_path / "logging.dl").write_text(LOGGING)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DL_METRICS", raising=False)
    monkeypatch.delenv("DL_RUNS", raising=False)

    def run(*argv: str) -> tuple[int, str, str]:
        os.chdir(tmp_path)  # the `dlrun` fixture starts at the repository root
        return dlrun(*argv)

    return run


def records(runs: Path) -> list[Path]:
    return sorted(d for d in runs.iterdir() if d.is_dir())


def test_each_run_gets_a_record_of_its_own(in_tmp, tmp_path: Path) -> None:
    assert in_tmp("logging.dl", "1.0") == (0, "", "")
    assert in_tmp("--backend", "interp", "logging.dl", "2.0") == (0, "", "")
    first, second = records(tmp_path / "runs")
    for record, rate in ((first, 1.0), (second, 2.0)):
        assert re.fullmatch(r"logging-\d{8}-\d{6}(-\d+)?", record.name)
        described = json.loads((record / "run.json").read_text())
        assert described["name"] == record.name
        assert (described["program"], described["arguments"], described["backend"]) == (
            "logging.dl",
            [str(rate)],
            "interp",
        )
        assert described["dl"] == "0.1.0"
        assert abs((datetime.now().astimezone() - datetime.fromisoformat(described["started"])).total_seconds()) < 600
        lines = [json.loads(line) for line in (record / "metrics.jsonl").read_text().splitlines()]
        assert lines == [
            {"name": "loss", "step": 0, "value": rate},
            {"name": "loss", "step": 1, "value": rate / 2},
            {"name": "loss", "step": 2, "value": float(str(np.float32(rate) / np.float32(3)))},  # f32, shortest
            {"name": "accuracy", "step": 7, "value": 0.5},
        ]


def test_runs_that_start_in_the_same_second_get_names_of_their_own(tmp_path: Path) -> None:
    from dl.runtime.metrics import fresh_directory

    names = [fresh_directory(tmp_path / "runs", "train-20250101-120000").name for _ in range(3)]
    assert names == ["train-20250101-120000", "train-20250101-120000-2", "train-20250101-120000-3"]


def test_a_run_that_logs_nothing_leaves_nothing(in_tmp, tmp_path: Path) -> None:
    (tmp_path / "quiet.dl").write_text('fn main() {\n    print("no metrics")\n}\n')
    assert in_tmp("quiet.dl") == (0, "no metrics\n", "")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logging.dl", "quiet.dl"]


def test_the_runs_directory_is_chosen_by_option_then_environment(in_tmp, tmp_path, monkeypatch) -> None:
    assert in_tmp("--runs", "experiments", "logging.dl", "1.0")[0] == 0
    monkeypatch.setenv("DL_RUNS", str(tmp_path / "from_env"))
    assert in_tmp("logging.dl", "1.0")[0] == 0
    assert in_tmp("run", "--runs", "chosen", "logging.dl", "1.0")[0] == 0
    for directory in ("experiments", "from_env", "chosen"):
        assert len(records(tmp_path / directory)) == 1, directory
    assert not (tmp_path / "runs").exists()


def test_metrics_file_appends_across_runs_with_no_record(in_tmp, tmp_path: Path) -> None:
    assert in_tmp("--metrics", "all.jsonl", "logging.dl", "1.0")[0] == 0
    assert in_tmp("--metrics", "all.jsonl", "logging.dl", "2.0")[0] == 0
    assert len((tmp_path / "all.jsonl").read_text().splitlines()) == 8
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_records_get_the_permissions_the_umask_allows(in_tmp, tmp_path: Path, umask: int) -> None:
    previous = os.umask(umask)
    try:
        assert in_tmp("logging.dl", "1.0")[0] == 0
    finally:
        os.umask(previous)
    (record,) = records(tmp_path / "runs")
    for name in ("run.json", "metrics.jsonl"):
        assert stat.S_IMODE((record / name).stat().st_mode) == 0o666 & ~umask, name
    assert sorted(p.name for p in record.iterdir()) == ["metrics.jsonl", "run.json"]  # no temporary left


def test_a_runs_directory_that_cannot_be_made_is_a_diagnostic(in_tmp, tmp_path: Path) -> None:
    (tmp_path / "runs").write_text("a file, not a directory\n")
    status, out, err = in_tmp("logging.dl", "1.0")
    assert (status, out) == (1, "")
    assert err.startswith("error[E0513]: log_metric: cannot make the run record in `runs`: ")
    assert " --> logging.dl:3:9" in err


def test_what_the_examples_write_is_ignored_by_git() -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout, or no `git` command: nothing to ignore files for")
    written = [
        "examples/runs/train-20250101-120000/run.json",
        "examples/runs/train-20250101-120000/metrics.jsonl",
        "examples/runs/metrics.png",
        "examples/digits_mlp.safetensors",
        "examples/metrics.jsonl",
        "examples/curve.png",
        "runs/cnn-20250101-120000/run.json",
        "metrics.png",
    ]
    checked = subprocess.run(["git", "check-ignore", *written], cwd=ROOT, capture_output=True, text=True)
    assert checked.stdout.splitlines() == written
    kept = subprocess.run(["git", "check-ignore", "docs/images/editor.png", "examples/train.dl"], cwd=ROOT)
    assert kept.returncode == 1  # neither is ignored
