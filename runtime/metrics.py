"""`log_metric(name, value)` and `progress(done, total)`: what a training loop reports while it runs.

Every run that logs a metric gets a record of its own: a directory `runs/NAME/` (in the current
directory, unless `dlrun --runs DIR` or the `DL_RUNS` environment variable names another), NAME being
the program's name and the time it started (`train-20250312-141502`). It holds `run.json` (the name,
the program, its arguments, the backend, when it started, the DL version) and `metrics.jsonl`, one
JSON line `{"name": ..., "step": ..., "value": ...}` per `log_metric` call; `dlrun plot` draws one
line per run. The directory is made at the first `log_metric`, so a run that logs nothing leaves
nothing behind. `dlrun --metrics FILE` (or `DL_METRICS`) appends to that one file instead, with no
record. A step not given is the number of values logged under that name so far. Each line is written
and flushed at once, so a run that is stopped keeps everything it logged.

`progress` shows a tqdm progress bar per label when stdout is a terminal, and plain
`label done/total` lines otherwise (logs, pipes, tests), where it prints at most about
twenty lines per bar so that a long loop does not flood its log.
"""

from __future__ import annotations

import json
import math
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from dl.lang.files import append_text, write_atomically

RUNS = Path("runs")
RECORD = "run.json"
METRICS = "metrics.jsonl"


class Metrics:
    """Where `log_metric` writes: set once per run by the driver (`Metrics.start`); `reset` forgets the
    run's record and steps (a new run of the same program)."""

    path: Path | None = None  # `--metrics FILE`: append there, no record
    runs: Path | None = None  # `--runs DIR`
    program: str | None = None
    arguments: ClassVar[list[str]] = []
    backend: str = "interp"
    directory: Path | None = None  # this run's record, once its first metric is logged
    steps: ClassVar[dict[str, int]] = {}

    @classmethod
    def start(
        cls,
        program: str,
        arguments: list[str],
        backend: str = "interp",
        path: Path | None = None,
        runs: Path | None = None,
    ) -> None:
        cls.program, cls.arguments, cls.backend, cls.path, cls.runs = program, list(arguments), backend, path, runs
        cls.reset()

    @classmethod
    def reset(cls) -> None:
        cls.directory = None
        cls.steps = {}

    @classmethod
    def target(cls) -> Path:
        """The file the next metric goes to; the run's record is made on the first call."""
        explicit = cls.path or os.environ.get("DL_METRICS")
        if explicit:
            return Path(explicit)
        if cls.directory is None:
            cls.directory = new_record(cls.runs or Path(os.environ.get("DL_RUNS") or RUNS))
        return cls.directory / METRICS


def new_record(runs: Path) -> Path:
    """A fresh directory under `runs` named after the program and the time, holding its `run.json`."""
    started = datetime.now().astimezone()
    stem = Path(Metrics.program).stem if Metrics.program else "run"
    try:
        directory = fresh_directory(runs, f"{stem}-{started:%Y%m%d-%H%M%S}")
        record = {
            "name": directory.name,
            "program": Metrics.program,
            "arguments": Metrics.arguments,
            "backend": Metrics.backend,
            "started": started.isoformat(timespec="seconds"),
            "dl": dl_version(),
        }
        write_atomically(directory / RECORD, json.dumps(record, indent=2) + "\n")
    except OSError as problem:
        why = "it is not a directory" if runs.exists() and not runs.is_dir() else problem.strerror
        raise MetricsError(f"cannot make the run record in `{runs}`: {why}") from None
    return directory


def fresh_directory(runs: Path, name: str) -> Path:
    """`runs/name`, or `runs/name-2`, ... when a run that started in the same second has it: made now."""
    runs.mkdir(parents=True, exist_ok=True)
    attempt = 1
    while True:
        directory = runs / (name if attempt == 1 else f"{name}-{attempt}")
        try:
            directory.mkdir()
            return directory
        except FileExistsError:
            attempt += 1


def dl_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dl-lang")
    except PackageNotFoundError:
        return "unknown"


class MetricsError(Exception):
    """The metrics file cannot be written (a run-time diagnostic)."""


def log_value(name: Any, value: Any, step: Any) -> tuple:
    if not isinstance(name, str):
        raise MetricsError(f"`log_metric` takes the metric's name as a string, found {type(name).__name__}")
    number = np.asarray(value)
    if number.size != 1 or number.dtype.kind not in "biuf":
        raise MetricsError(f"`log_metric` takes a number, found a tensor of shape {list(number.shape)}")
    if step is not None and int(step) < -1:  # -1, the default, asks for the next step
        raise MetricsError(f"`log_metric`'s step is 0 or more, found {int(step)}")
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
