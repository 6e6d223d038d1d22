"""Fair timing for the benches that put DL beside other systems (PyTorch, JAX, numpy).

What makes a comparison fair here:

- **Threads pinned equal.** `pin_threads()` reads `--threads N` (default 1) from the command line and,
  before numpy, torch or jax load, sets `OPENBLAS_NUM_THREADS`, `OMP_NUM_THREADS` and `MKL_NUM_THREADS`
  to N and XLA's flags (one thread: `--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1`),
  and restricts the process to N CPUs (`os.sched_setaffinity`, where the OS has it). `load_torch()` then
  calls `torch.set_num_threads(N)`. A bench must import this module and call `pin_threads()` before it
  imports numpy, dl, torch or jax: the libraries read these once, when they load.

  The CPU restriction is what holds JAX to N threads: with jax 0.10.2 the XLA flags alone still ran a
  2048x2048 matmul on two threads at once (sampled from /proc: two runnable threads 94% of the time),
  while XLA sizes its thread pools by the CPUs the process may use, so on one CPU it runs one worker.
- **Checked, not assumed.** Every timed call also records the process's CPU time (all its threads), and
  `thread_warnings()` names any system whose CPU time exceeds its wall time by more than its N threads
  allow: a library that ignored the pinning (where no CPU restriction enforces it).
- **Systems alternate in one run** (`alternate()`: A, B, C, then A, B, C again), so a change in the
  machine's load hits all of them alike; **min and median** are reported, and the ratios of ours against
  each peer (`ratio_lines()`).
- **Compile time apart.** A compiled system's first call (tracing and compiling included) is timed on its
  own (`first_call()`) and reported separately from its steady time.
- **Optional peers.** `load_torch()` and `load_jax()` give None where the package is not installed, and
  `Skips` collects why a column is missing (not installed, or a compile that failed) for the report.

Not a test: nothing here is collected by pytest.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
PINNED: list[int] = []  # the thread count, once `pin_threads` has run


def threads_option(parser: argparse.ArgumentParser) -> None:
    """Document `--threads` in a bench's own parser (`pin_threads` has applied it already)."""
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="threads for every system, pinned equal (default 1); run again with 2 to report 2 vs 2 apart",
    )


def xla_flags(threads: int) -> str:
    """XLA's CPU flags for `threads` intra-op threads: for one, no multi-threaded Eigen; for more, none (XLA
    sizes its pools by the CPUs the process may use, which `pin_threads` restricts to `threads`)."""
    return "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" if threads == 1 else ""


def pin_threads(argv: list[str] | None = None) -> int:
    """Set every library's thread count from `--threads` (default 1), and keep the process on that many CPUs,
    before the libraries load; returns the count."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--threads", type=int, default=1)
    threads = parser.parse_known_args(sys.argv[1:] if argv is None else argv)[0].threads
    if PINNED:  # a second bench module imported by the first: the same pinning holds
        return PINNED[0]
    if threads < 1:
        sys.exit("--threads must be at least 1")
    loaded = [name for name in ("numpy", "torch", "jax") if sys.modules.get(name) is not None]
    if loaded:  # too late: the thread pools exist already
        raise RuntimeError(f"pin_threads() runs before {', '.join(loaded)} is imported")
    if hasattr(os, "sched_setaffinity"):
        allowed = sorted(os.sched_getaffinity(0))
        if threads > len(allowed):
            sys.exit(f"--threads {threads}: this process may run on {len(allowed)} CPU(s)")
        os.sched_setaffinity(0, allowed[:threads])
    PINNED.append(threads)
    for name in THREAD_VARIABLES:
        os.environ[name] = str(threads)
    os.environ["XLA_FLAGS"] = " ".join(filter(None, (os.environ.get("XLA_FLAGS", ""), xla_flags(threads))))
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    return threads


# ------------------------------------------------------------------------------------------ optional peers


@dataclass
class Skips:
    """Why a system is missing from the report: not installed, or it failed to compile here."""

    reasons: dict[str, str] = field(default_factory=dict)

    def add(self, system: str, reason: str) -> None:
        self.reasons[system] = reason

    def lines(self) -> list[str]:
        return [f"skipped {system}: {reason}" for system, reason in self.reasons.items()]


SKIPS = Skips()


def load_torch(threads: int) -> ModuleType | None:
    """torch with `threads` intra-op threads and one inter-op thread, or None (noted in SKIPS) if not installed."""
    try:
        import torch
    except ImportError as error:
        SKIPS.add("PyTorch", f"not installed ({error}); `pip install -e .[bench]`")
        return None
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    return torch


def load_gpu(bench: str) -> tuple[ModuleType, ModuleType] | None:
    """cupy and torch, on an NVIDIA GPU both can use; None, after printing `BENCH: skipped, ...` with why, where
    there is none (a GPU bench then exits 0)."""
    try:
        import cupy
        import torch

        if not torch.cuda.is_available() or cupy.cuda.runtime.getDeviceCount() == 0:
            raise ImportError("no CUDA device")
    except Exception as problem:  # no cupy, no torch, no GPU: the bench cannot run here
        print(f"{bench}: skipped, no GPU to run on ({problem})")
        return None
    return cupy, torch


def load_jax() -> ModuleType | None:
    """jax on the CPU, or None (noted in SKIPS) if not installed."""
    try:
        import jax
    except ImportError as error:
        SKIPS.add("JAX", f"not installed ({error}); `pip install -e .[bench]`")
        return None
    return jax


def jax_adam(params: Any, grads: Any, state: tuple, lr: float) -> tuple[Any, tuple]:
    """One Adam step in JAX with torch.optim.Adam's formulas (DL's `optim.adam`; betas 0.9 and 0.999, eps
    1e-8), over any tree of arrays; `state` is (m, v, steps), zeros at first. For the JAX peers."""
    import jax

    beta1, beta2, eps = 0.9, 0.999, 1e-8
    m, v, steps = state
    steps = steps + 1
    m = jax.tree.map(lambda m_leaf, g: m_leaf + (1 - beta1) * (g - m_leaf), m, grads)
    v = jax.tree.map(lambda v_leaf, g: beta2 * v_leaf + (1 - beta2) * g * g, v, grads)
    step_size = lr / (1 - beta1**steps)
    correction = jax.numpy.sqrt(1 - beta2**steps)

    def update(p, m_leaf, v_leaf):
        return p - step_size * (m_leaf / (jax.numpy.sqrt(v_leaf) / correction + eps))

    return jax.tree.map(update, params, m, v), (m, v, steps)


def jax_adam_state(params: Any) -> tuple:
    """Adam's initial state for `jax_adam`: zero moments and step 0."""
    import jax

    zeros = jax.tree.map(jax.numpy.zeros_like, params)
    return (zeros, zeros, jax.numpy.zeros((), jax.numpy.int32))


# ------------------------------------------------------------------------------------------ timing


@dataclass
class Samples:
    """One system's timed calls: wall and CPU seconds per call."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    @property
    def min(self) -> float:
        return min(self.wall)

    @property
    def median(self) -> float:
        return statistics.median(self.wall)

    @property
    def cpu_per_wall(self) -> float:
        """Cores kept busy on average while timed (at most the pinned threads, if the pinning holds)."""
        return sum(self.cpu) / sum(self.wall)


def timed(function: Callable[[], Any], calls: int = 1) -> tuple[float, float, Any]:
    """Wall and CPU seconds per call over `calls` calls of `function`, and its last result."""
    result = None
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        result = function()
    return (time.perf_counter() - wall) / calls, (time.process_time() - cpu) / calls, result


@contextmanager
def no_gc() -> Iterator[None]:
    """The cycle collector off while timing (it would charge its passes to whichever system ran then)."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def alternate(
    systems: dict[str, Callable[[], Any]],
    rounds: int,
    calls: dict[str, int] | None = None,
    warm: bool = False,
) -> dict[str, Samples]:
    """Time every system once per round, in turn, for `rounds` rounds. `calls[name]` calls make one timed
    run of that system (the time is per call); `warm` runs it once untimed just before, so that the thread
    pool of the system timed before it (OpenBLAS, OpenMP) has stopped spinning and its own is awake."""
    samples = {name: Samples() for name in systems}
    with no_gc():
        for _ in range(rounds):
            for name, function in systems.items():
                count = (calls or {}).get(name, 1)
                if warm:
                    function()
                wall, cpu, _ = timed(function, count)
                samples[name].wall.append(wall)
                samples[name].cpu.append(cpu)
    return samples


def calls_for(function: Callable[[], Any], target: float) -> int:
    """How many calls make a timed run of about `target` seconds (at least one), from the fastest of 3 calls."""
    once = min(timed(function)[0] for _ in range(3))
    return max(1, round(target / max(once, 1e-9)))


def first_call(
    name: str,
    build: Callable[[], Callable[[], Any]],
    compile_times: dict[str, float],
    results: dict[str, Any] | None = None,
    may_fail: bool = False,
) -> Callable[[], Any] | None:
    """`build()` a system and make its first call (where a compiled system traces and compiles), timing both
    into `compile_times[name]` and keeping the call's result in `results[name]`; returns the built system.
    `may_fail`: a peer whose compiler may not work on this machine (torch.compile's Inductor needs a C++
    toolchain): its failure is reported in SKIPS and None returned, instead of stopping the bench."""
    start = time.perf_counter()
    try:
        function = build()
        result = function()
    except Exception as error:
        if not may_fail:
            raise
        message = str(error).strip().splitlines()
        SKIPS.add(name, f"failed: {type(error).__name__}: {message[0] if message else ''}"[:300])
        return None
    compile_times[name] = time.perf_counter() - start
    if results is not None:
        results[name] = result
    return function


# ------------------------------------------------------------------------------------------ report


def number(value: float) -> str:
    """Three significant figures, without an exponent."""
    return f"{value:.3f}" if value < 1 else f"{value:.2f}" if value < 10 else f"{value:.1f}"


def ratio(value: float) -> str:
    """A ratio with two decimals, or two significant figures below 0.1 (0.0034x, not 0.00x)."""
    return f"{value:.2f}x" if value >= 0.1 else f"{value:.2g}x"


def table(samples: dict[str, Samples], unit: str = "ms", scale: float = 1e3) -> str:
    """Markdown: min and median per system, in `unit` (seconds times `scale`), and CPU/wall."""
    lines = [f"| system | min {unit} | median {unit} | CPU/wall |", "|---|---:|---:|---:|"]
    for name, sample in samples.items():
        lines.append(
            f"| {name} | {number(sample.min * scale)} | {number(sample.median * scale)} | {sample.cpu_per_wall:.2f} |"
        )
    return "\n".join(lines)


def ratio_lines(samples: dict[str, Samples], ours: list[str]) -> list[str]:
    """`ours / peer` for each of our systems against every other system, on the min and on the median."""
    lines = []
    for mine in (name for name in ours if name in samples):
        for peer in (name for name in samples if name not in ours):
            low = samples[mine].min / samples[peer].min
            middle = samples[mine].median / samples[peer].median
            lines.append(f"{mine} / {peer}: {ratio(low)} (min), {ratio(middle)} (median)")
    return lines


def compile_table(compile_times: dict[str, float]) -> str:
    """Markdown: each compiled system's first call, compilation included, in seconds."""
    lines = ["| system | first call (compile included) s |", "|---|---:|"]
    lines += [f"| {name} | {seconds:.2f} |" for name, seconds in compile_times.items()]
    return "\n".join(lines)


def thread_warnings(samples: dict[str, Samples], threads: int) -> list[str]:
    """Systems that kept more cores busy than their pinned threads (10% slack for the Python thread's
    bookkeeping): their library did not honour the pinning, and the comparison is not 1 vs 1."""
    return [
        f"WARNING: {name} used {sample.cpu_per_wall:.2f} cores on average with {threads} thread(s) pinned"
        for name, sample in samples.items()
        if sample.cpu_per_wall > threads * 1.1
    ]


def header(title: str, threads: int, torch: ModuleType | None = None, jax: ModuleType | None = None) -> str:
    """The report's first line: what ran, on what, with how many threads."""
    import platform

    import numpy

    parts = [
        f"{platform.machine()}, nproc={os.cpu_count()}, Python {platform.python_version()}",
        f"numpy {numpy.__version__}",
    ]
    if torch is not None:
        parts.append(f"torch {torch.__version__} (threads={torch.get_num_threads()})")
    if jax is not None:
        parts.append(f"jax {jax.__version__}")
    if hasattr(os, "sched_getaffinity"):
        parts.insert(1, f"on CPU(s) {sorted(os.sched_getaffinity(0))}")
    return f"# {title} — {threads} thread(s) per system; {', '.join(parts)}"


def footer(samples: dict[str, Samples], threads: int) -> str:
    """Skipped systems and thread warnings, one per line ("" if none)."""
    return "\n".join(SKIPS.lines() + thread_warnings(samples, threads))


def summary(samples: dict[str, Samples], scale: float = 1e3) -> dict[str, dict[str, float]]:
    """Min, median (seconds times `scale`) and CPU/wall per system, for a bench's JSON output."""
    return {
        name: {"min": sample.min * scale, "median": sample.median * scale, "cpu_per_wall": sample.cpu_per_wall}
        for name, sample in samples.items()
    }


def write_json(path: str, data: dict[str, Any]) -> None:
    """`data` as JSON at `path`, written atomically, with the skipped systems added."""
    import json
    from pathlib import Path

    from dl import atomic

    atomic.write_text(Path(path), json.dumps({**data, "skipped": SKIPS.reasons}, indent=2) + "\n")
