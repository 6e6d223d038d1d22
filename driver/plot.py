"""`dlrun plot METRICS.jsonl -o curve.png`: draw the curves a program logged with `log_metric(name, value)`.

Each line of the metrics file is one JSON object `{"name": ..., "step": ..., "value": ...}`
(what `log_metric` appends). One panel per name, values against steps, in the order the names
first appear. matplotlib is an optional extra (`pip install "dl-lang[plot]"`); without
it the command says so and exits with status 2.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

from dl.lang.files import read_text, write_atomically


class PlotError(Exception):
    """A problem with the metrics file or the output (a message for the user)."""


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


def plot(metrics: Path, output: Path) -> int:
    """Draw one panel per metric into `output` (written atomically); returns the exit status."""
    try:
        import matplotlib
    except ImportError:
        raise PlotError('`dlrun plot` needs matplotlib: pip install "dl-lang[plot]"') from None
    matplotlib.use("Agg")
    from matplotlib import pyplot

    series = read_metrics(metrics)
    columns = min(len(series), 3)
    rows = math.ceil(len(series) / columns)
    figure, axes = pyplot.subplots(rows, columns, figsize=(4.5 * columns, 3.2 * rows), squeeze=False)
    for axis, (name, (steps, values)) in zip(axes.flat, series.items(), strict=False):
        axis.plot(steps, values, linewidth=1.5, marker="o" if len(steps) < 30 else None, markersize=3)
        axis.set_title(name)
        axis.set_xlabel("step")
        axis.grid(alpha=0.3)
    for axis in list(axes.flat)[len(series) :]:
        axis.set_visible(False)
    figure.tight_layout()
    image = io.BytesIO()
    try:
        figure.savefig(image, format=(output.suffix or ".png").lstrip("."), dpi=110)
        write_atomically(output, image.getvalue())
    except OSError as problem:
        raise PlotError(f"cannot write `{output}`: {problem.strerror or problem}") from None
    except ValueError as problem:  # a format matplotlib does not know
        raise PlotError(f"cannot write `{output}`: {problem}") from None
    finally:
        pyplot.close(figure)
    return 0
