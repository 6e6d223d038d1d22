"""`dlrun plot`: run records and metrics files (JSON lines, as `log_metric` writes them) drawn as PNG curves,
one panel per metric and one line per run."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

pytest.importorskip("matplotlib", reason="`dlrun plot` needs the `plot` extra (matplotlib)")

PNG = b"\x89PNG\r\n\x1a\n"


def write_metrics(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_plot_draws_one_panel_per_metric(dlrun, tmp_path: Path) -> None:
    from dl.plot import read_metrics

    metrics = write_metrics(
        tmp_path / "run.jsonl",
        [{"name": "loss", "step": s, "value": 2.0 / (s + 1)} for s in range(5)]
        + [{"name": "accuracy", "step": 4, "value": 0.9}],
    )
    assert read_metrics(metrics) == {"loss": ([0, 1, 2, 3, 4], [2.0, 1.0, 2 / 3, 0.5, 0.4]), "accuracy": ([4], [0.9])}
    status, out, err = dlrun("plot", str(metrics), "-o", str(tmp_path / "curve.png"))
    assert (status, err) == (0, "")
    assert out == f"wrote {tmp_path / 'curve.png'}\n"
    assert (tmp_path / "curve.png").read_bytes().startswith(PNG)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary file left


def test_plot_defaults_to_the_metrics_name(dlrun, tmp_path: Path) -> None:
    metrics = write_metrics(tmp_path / "run.jsonl", [{"name": "loss", "step": 0, "value": 1.0}])
    assert dlrun("plot", str(metrics))[0] == 0
    assert (tmp_path / "run.png").read_bytes().startswith(PNG)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no metrics file"),
        ("", "holds no metrics"),
        ('{"name": "loss"}\n', "run.jsonl:1: not a metrics line"),
        ('{"name": "loss", "step": 0, "value": 1.0}\nnot json\n', "run.jsonl:2: not a metrics line"),
    ],
)
def test_plot_reports_bad_metrics(dlrun, tmp_path: Path, content: str | None, message: str) -> None:
    metrics = tmp_path / "run.jsonl"
    if content is not None:
        metrics.write_text(content)
    status, out, err = dlrun("plot", str(metrics))
    assert (status, out) == (1, "")
    assert err.startswith("dlrun plot: error: ") and message in err
    assert not (tmp_path / "run.png").exists()


def write_run(runs: Path, name: str, started: str, losses: list[float]) -> Path:
    record = runs / name
    record.mkdir(parents=True)
    (record / "run.json").write_text(json.dumps({"name": name, "started": started}))
    write_metrics(record / "metrics.jsonl", [{"name": "loss", "step": s, "value": v} for s, v in enumerate(losses)])
    return record


def test_plot_draws_one_line_per_run_with_a_legend_oldest_first(tmp_path: Path) -> None:
    from dl.plot import curves, find_runs
    from matplotlib import pyplot

    runs = tmp_path / "runs"
    write_run(runs, "train-b", "2025-01-02T10:00:00+00:00", [2.0, 1.0, 0.5])
    write_run(runs, "charrnn-a", "2025-01-01T10:00:00+00:00", [5.0, 3.0])
    accuracy = write_run(runs, "train-c", "2025-01-03T10:00:00+00:00", [1.5])
    write_metrics(
        accuracy / "metrics.jsonl", [{"name": "loss", "step": 0, "value": 1.5}, {"name": "accuracy", "value": 0.9}]
    )
    figure = curves(find_runs([runs]))
    try:
        loss, correct = [axis for axis in figure.axes if axis.get_visible()]
        assert (loss.get_title(), correct.get_title()) == ("loss", "accuracy")
        drawn = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in loss.get_lines()}
        assert drawn == {
            "charrnn-a": ([0, 1], [5.0, 3.0]),
            "train-b": ([0, 1, 2], [2.0, 1.0, 0.5]),
            "train-c": ([0], [1.5]),
        }
        assert [text.get_text() for text in loss.get_legend().get_texts()] == ["charrnn-a", "train-b", "train-c"]
        assert [line.get_label() for line in correct.get_lines()] == ["train-c"]
        colours = {line.get_label(): line.get_color() for axis in (loss, correct) for line in axis.get_lines()}
        assert colours["train-c"] == loss.get_lines()[2].get_color()  # a run keeps its colour in every panel
    finally:
        pyplot.close(figure)


def test_plot_without_arguments_draws_the_runs_directory(dlrun, tmp_path: Path, monkeypatch) -> None:
    write_run(tmp_path / "runs", "a", "2025-01-01T10:00:00+00:00", [1.0, 0.5])
    write_run(tmp_path / "runs", "b", "2025-01-02T10:00:00+00:00", [2.0, 0.1])
    monkeypatch.delenv("DL_RUNS", raising=False)
    previous = os.umask(0o022)
    try:
        status, out, err = dlrun_here(dlrun, tmp_path, "plot")
    finally:
        os.umask(previous)
    assert (status, out, err) == (0, "wrote runs/metrics.png\n", "")
    image = tmp_path / "runs" / "metrics.png"
    assert image.read_bytes().startswith(PNG)
    assert stat.S_IMODE(image.stat().st_mode) == 0o644  # what the umask allows, not mkstemp's 0600
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["a", "b", "metrics.png"]


def test_plot_draws_the_runs_it_is_given(dlrun, tmp_path: Path) -> None:
    from dl.plot import find_runs

    first = write_run(tmp_path / "runs", "a", "2025-01-01T10:00:00+00:00", [1.0])
    write_run(tmp_path / "runs", "b", "2025-01-02T10:00:00+00:00", [2.0])
    third = write_run(tmp_path / "runs", "c", "2025-01-03T10:00:00+00:00", [3.0])
    legacy = write_metrics(tmp_path / "old.jsonl", [{"name": "loss", "step": 0, "value": 4.0}])
    assert [run.name for run in find_runs([third, first, legacy])] == ["c", "a", "old"]
    status, out, err = dlrun_here(dlrun, tmp_path, "plot", "runs/a", "runs/c")
    assert (status, out, err) == (0, "wrote metrics.png\n", "")
    assert (tmp_path / "metrics.png").read_bytes().startswith(PNG)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ((), "no runs yet: `runs` is made by the first run that calls log_metric()"),
        (("empty",), "no runs in `empty` (each run that calls log_metric() makes one)"),
        (("nowhere",), "no metrics file or run directory `nowhere`"),
    ],
)
def test_plot_says_what_is_missing(dlrun, tmp_path: Path, monkeypatch, argv: tuple[str, ...], message: str) -> None:
    (tmp_path / "empty").mkdir()
    monkeypatch.delenv("DL_RUNS", raising=False)
    assert dlrun_here(dlrun, tmp_path, "plot", *argv) == (1, "", f"dlrun plot: error: {message}\n")


def dlrun_here(dlrun, directory: Path, *argv: str) -> tuple[int, str, str]:
    """`dlrun` in `directory` (the fixture starts at the repository root)."""
    os.chdir(directory)
    return dlrun(*argv)
