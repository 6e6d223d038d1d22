"""`log_metric(name, value)` and `progress(done, total)`: what a training loop reports while it runs.

`log_metric` appends one JSON line `{"name": ..., "step": ..., "value": ...}` to the metrics file
(`metrics.jsonl` in the current directory unless `dlrun --metrics FILE` or the
`DL_METRICS` environment variable names another; `dlrun plot` draws it). A step not
given is the number of values logged under that name so far. Each line is written and
flushed at once, so a run that is stopped keeps everything it logged.

`progress` shows a tqdm progress bar per label when stdout is a terminal, and plain
`label done/total` lines otherwise (logs, pipes, tests), where it prints at most about
twenty lines per bar so that a long loop does not flood its log.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from dl.lang.files import append_text


class Metrics:
    """Where `log_metric` appends: set once per run by the driver (`dlrun --metrics FILE`)."""

    path: Path | None = None
    steps: ClassVar[dict[str, int]] = {}

    @classmethod
    def target(cls) -> Path:
        return cls.path or Path(os.environ.get("DL_METRICS", "metrics.jsonl"))

    @classmethod
    def reset(cls, path: Path | None = None) -> None:
        cls.path = path
        cls.steps = {}


class MetricsError(Exception):
    """The metrics file cannot be written (a run-time diagnostic)."""


def log_value(name: Any, value: Any, step: Any) -> tuple:
    if not isinstance(name, str):
        raise MetricsError(f"`log_metric` takes the metric's name as a string, found {type(name).__name__}")
    number = np.asarray(value)
    if number.size != 1 or number.dtype.kind not in "biuf":
        raise MetricsError(f"`log_metric` takes a number, found a tensor of shape {list(number.shape)}")
    if step is None or int(step) < 0:
        step = Metrics.steps.get(name, 0)
    Metrics.steps[name] = int(step) + 1
    scalar = float(str(number.astype(np.float32)[()])) if number.dtype == np.float32 else number.item()
    record = {"name": name, "step": int(step), "value": scalar if math.isfinite(scalar) else str(scalar)}
    path = Metrics.target()
    try:
        append_text(path, json.dumps(record) + "\n")  # a regular file only: a named pipe would wait for a reader
    except OSError as problem:
        raise MetricsError(f"cannot append to the metrics file `{path}`: {problem.strerror}") from None
    return ()


class Progress:
    """The open progress bars, by label."""

    bars: ClassVar[dict[str, Any]] = {}
    shown: ClassVar[dict[str, int]] = {}
    terminal: bool | None = None  # None: ask stdout

    @classmethod
    def reset(cls) -> None:
        for bar in cls.bars.values():
            bar.close()
        cls.bars = {}
        cls.shown = {}


def progress_line(done: Any, total: Any, label: Any) -> str | None:
    """Advance the bar `label`; on a terminal it draws itself, otherwise this returns the line to print."""
    done, total, label = int(done), int(total), str(label)
    if total <= 0:
        raise MetricsError(f"`progress` needs a positive total, found {total}")
    terminal = Progress.terminal if Progress.terminal is not None else sys.stdout.isatty()
    if terminal:
        bar = Progress.bars.get(label)
        if bar is None:
            from tqdm import tqdm

            bar = Progress.bars[label] = tqdm(total=total, desc=label, leave=True)
        bar.update(max(done - bar.n, 0))
        if done >= total:
            bar.close()
            del Progress.bars[label]
        return None
    every = -(-total // 20)  # at most about twenty lines per bar
    if (done >= total or done % every == 0 or done == 1) and Progress.shown.get(label) != done:
        Progress.shown[label] = done
        return f"{label} {done}/{total}"
    return None
