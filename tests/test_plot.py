"""`dlrun plot`: metrics files (JSON lines, as `log` writes them) drawn as PNG curves."""

from __future__ import annotations

import json
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
