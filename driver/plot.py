"""`dlrun plot [RUN...] [-o curve.png]`: draw the curves programs logged with `log_metric(name, value)`.

Each RUN is a run's record (a directory `runs/NAME/` holding `run.json` and `metrics.jsonl`, made by
runtime/metrics.py), a directory of such records (all of them, oldest first), or a metrics file (JSON
lines `{"name": ..., "step": ..., "value": ...}`, as `--metrics FILE` writes them). With none, the
runs directory: `$DL_RUNS`, else `runs`. One panel per metric name, in the order the names first
appear; in each, one line per run, values against steps, with a legend naming the runs when there are
several. The image is written atomically, with the permissions a new file gets. matplotlib is an
optional extra (`pip install "dl-lang[plot]"`); without it the command says so.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from dl.lang.files import read_text, replacing
from dl.lang.record import record

RECORD = "run.json"
METRICS = "metrics.jsonl"


class PlotError(Exception):
    """A problem with the metrics file or the output (a message for the user)."""


@record
class Run:
    """One line per metric: a run's name and its series, name -> (steps, values)."""

    name: str
    series: dict[str, tuple[list[float], list[float]]]


def runs_directory() -> Path:
    return Path(os.environ.get("DL_RUNS") or "runs")


def find_runs(paths: list[Path]) -> list[Run]:
    """The runs `paths` name (see the module's docstring), in order."""
    runs: list[Run] = []
    for path in paths:
        if path.is_dir() and (path / METRICS).is_file():
            runs.append(read_run(path))
        elif path.is_dir():
            records = sorted((d for d in path.iterdir() if (d / METRICS).is_file()), key=started)
            if not records:
                raise PlotError(f"no runs in `{path}` (each run that calls log_metric() makes one)")
            runs += [read_run(record) for record in records]
        elif path.exists():
            runs.append(Run(path.stem, read_metrics(path)))
        else:
            raise PlotError(f"no metrics file or run directory `{path}`")
    return runs


def started(record: Path) -> tuple[str, str]:
    """When a run started (from its `run.json`), then its name: the order runs are drawn in."""
    try:
        return (str(json.loads(read_text(record / RECORD))["started"]), record.name)
    except (OSError, ValueError, KeyError, TypeError):
        return ("", record.name)


def read_run(record: Path) -> Run:
    return Run(record.name, read_metrics(record / METRICS))


def read_metrics(path: Path) -> dict[str, tuple[list[float], list[float]]]:
    """The series in a metrics file: name -> (steps, values), in order of first appearance."""
    try:
        lines = read_text(path).splitlines()
    except FileNotFoundError:
        raise PlotError(f"no metrics file `{path}`") from None
    except OSError as problem:
        raise PlotError(f"cannot read `{path}`: {problem.strerror}") from None
    except UnicodeDecodeError:
        raise PlotError(f"cannot read `{path}`: it is not UTF-8 text") from None
    series: dict[str, tuple[list[float], list[float]]] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            name, value = str(record["name"]), float(record["value"])
            step = float(record.get("step", len(series.get(name, ([], []))[0])))
        except (ValueError, KeyError, TypeError):
            raise PlotError(f"{path}:{number}: not a metrics line: {line[:80]!r}") from None
        steps, values = series.setdefault(name, ([], []))
        steps.append(step)
        values.append(value)
    if not series:
        raise PlotError(f"`{path}` holds no metrics")
    return series


def default_output(paths: list[Path]) -> Path:
    """Beside what is drawn: `X.png` for a metrics file X.jsonl, `DIR/metrics.png` for a directory, and
    `metrics.png` here for several."""
    if len(paths) != 1:
        return Path("metrics.png")
    return paths[0] / "metrics.png" if paths[0].is_dir() else paths[0].with_suffix(".png")


def plot(runs: list[Run], output: Path) -> None:
    """Draw one panel per metric, one line per run, into `output`."""
    figure = curves(runs)  # first: it reports a missing matplotlib
    from matplotlib import pyplot

    try:
        save(figure, output)
    finally:
        pyplot.close(figure)


def curves(runs: list[Run]):
    """The matplotlib figure of `runs`: one panel per metric, one line per run."""
    try:
        import matplotlib
    except ImportError:
        raise PlotError('`dlrun plot` needs matplotlib: pip install "dl-lang[plot]"') from None
    matplotlib.use("Agg")
    from matplotlib import pyplot

    names = list(dict.fromkeys(name for run in runs for name in run.series))
    columns = min(len(names), 3)
    rows = math.ceil(len(names) / columns)
    figure, axes = pyplot.subplots(rows, columns, figsize=(4.5 * columns, 3.2 * rows), squeeze=False)
    for axis, name in zip(axes.flat, names, strict=False):
        draw_panel(axis, name, runs)
    for axis in list(axes.flat)[len(names) :]:
        axis.set_visible(False)
    figure.tight_layout()
    return figure


def draw_panel(axis, name: str, runs: list[Run]) -> None:
    for index, run in enumerate(runs):
        if name not in run.series:
            continue
        steps, values = run.series[name]
        marker = "o" if len(steps) < 30 else None
        axis.plot(steps, values, linewidth=1.5, marker=marker, markersize=3, color=f"C{index % 10}", label=run.name)
    axis.set_title(name)
    axis.set_xlabel("step")
    axis.grid(alpha=0.3)
    if len(runs) > 1:
        axis.legend(fontsize="small")


def save(figure, output: Path) -> None:
    suffix = output.suffix or ".png"
    try:
        with replacing(output) as temporary:
            figure.savefig(temporary, format=suffix.lstrip("."), dpi=110)
    except OSError as problem:  # (its words: "it is a named pipe, not a regular file")
        raise PlotError(f"cannot write `{output}`: {problem.strerror or problem}") from None
    except ValueError as problem:  # a format matplotlib does not know
        raise PlotError(f"cannot write `{output}`: {problem}") from None
