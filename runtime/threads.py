"""How many threads a matrix product uses: `dlrun --threads N` (docs/cli.md).

numpy's OpenBLAS starts with one thread: `dl/__init__.py` sets OPENBLAS_NUM_THREADS=1 before numpy loads,
because most of a training step's products are small and waking threads for them costs more than they
save. A product of at least `LARGE` multiply-adds runs on `Threads.count` threads instead, as PyTorch
decides by its grain size: the interpreter raises OpenBLAS's count around that one product
(`large_product`), and compiled code around a call of a function that multiplies matrices, where
OpenBLAS's own threshold keeps small products on one thread.

A fused elementwise loop (codegen/fusion.py) over at least `SPLIT` elements runs on `Threads.count` threads
too: its range cut into that many pieces, each a call of the native loop, which releases the GIL
(`in_parallel`); smaller ones run whole on the caller's thread.

`dlrun` takes `--threads N`, else `default_count()`: the cores this process may use, but one when the
machine is already busy (a one-minute load average of at least the core count). OpenBLAS's threads then
wait for cores: a 256x256 product measured 40x slower on 2 threads than on 1 on a loaded 2-core machine.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from typing import Any

MOST = 1024  # `--threads` above this is a usage error: more than any machine's cores, so a typo
LARGE = 1 << 24  # multiply-adds: a 256x256x256 product
SPLIT = 1 << 18  # elements of a fused loop (about 0.3 ms of work on one core) worth splitting across threads


class Threads:
    """The thread count for large products, and OpenBLAS's setter once found (None: not found)."""

    count = 1
    setter: Callable[[int], None] | None = None


def openblas() -> ctypes.CDLL | None:
    """numpy's own OpenBLAS (scipy-openblas64, shipped in numpy's wheel), or None."""
    import numpy as np

    directory = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    names = sorted(os.listdir(directory)) if os.path.isdir(directory) else []
    for name in (name for name in names if name.startswith("libscipy_openblas")):
        try:
            return ctypes.CDLL(os.path.join(directory, name))
        except OSError:
            continue
    return None


def use(count: int) -> None:
    """Run large products on `count` threads from now on (1: every product on one thread)."""
    if count > 1 and Threads.setter is None:
        library = openblas()
        setter = getattr(library, "scipy_openblas_set_num_threads64_", None) if library is not None else None
        if setter is None:
            return  # another BLAS: numpy's own threading stands
        setter.argtypes = [ctypes.c_int]
        Threads.setter = setter
    Threads.count = max(1, count)


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def default_count() -> int:
    """The cores this process may use, or 1 when the machine is busy (see the module's docstring)."""
    cores = available_cores()
    try:
        busy = os.getloadavg()[0] >= cores
    except OSError:
        busy = False
    return 1 if busy else cores


def large_product(function: Callable[..., Any], *args: Any) -> Any:
    """`function(*args)` (a matrix product, or compiled code that makes some) on `Threads.count` threads."""
    setter = Threads.setter
    setter(Threads.count)
    try:
        return function(*args)
    finally:
        setter(1)


def threaded(work: int) -> bool:
    """Whether a product of `work` multiply-adds runs on several threads."""
    return Threads.count > 1 and Threads.setter is not None and work >= LARGE


class Workers:
    """The threads that run the pieces of a split loop beside the caller's, made when first needed."""

    pool = None  # a concurrent.futures.ThreadPoolExecutor
    size = 0


def in_parallel(calls: list[Callable[[], Any]]) -> None:
    """Run `calls` at once: the first on this thread, the others on worker threads (native code that releases
    the GIL, as a ctypes call does); returns when all have."""
    if len(calls) == 1:
        calls[0]()
        return
    if Workers.size < len(calls) - 1:
        from concurrent.futures import ThreadPoolExecutor

        Workers.pool = ThreadPoolExecutor(max_workers=len(calls) - 1, thread_name_prefix="dl-split")
        Workers.size = len(calls) - 1
    pending = [Workers.pool.submit(call) for call in calls[1:]]
    calls[0]()
    for piece in pending:
        piece.result()


def pieces(count: int, align: int = 64) -> list[tuple[int, int]]:
    """`count` elements cut into `Threads.count` ranges (start, stop) of about equal size, each start a
    multiple of `align` (whole vectors and cache lines); one range when `count` is under `SPLIT`."""
    parts = Threads.count if count >= SPLIT else 1
    step = -(-count // parts // align) * align or count
    return [(start, min(start + step, count)) for start in range(0, count, step)] if count else [(0, 0)]
