"""Jobs run at the same time in forked child processes: `in_children(jobs, workers) -> results`.

The LLVM backend compiles the parts of a large module this way (codegen/llvm.py `compile_parts`).
llvmlite serialises every call into LLVM behind one process-wide lock, so threads would compile one
part after another; a child made by `fork` shares nothing with its parent but the memory it had, costs a
few milliseconds, and gives its result back as bytes through a pipe.

A child does its job and nothing else: it writes the bytes and ends with `os._exit`, so no buffered
output, `atexit` handler or finaliser of the parent runs twice. Whatever goes wrong in a child (an
exception, a crash, a signal, a hang past `deadline`) only costs time: its job is run again in this
process, which gives the same bytes or raises as it would have. Nothing is forked where that is not safe:
off Linux (`fork` then is absent or unsafe with the system's libraries), or once MPI or CUDA is in use in
the process (their state does not survive a `fork`); nor where it would not pay, in a process holding
more than `FORK_LIMIT` of memory.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable

UNFORKABLE = ("mpi4py", "cupy")  # modules whose state a forked child must not inherit
# the resident memory past which a fork costs more than it saves: copying the page tables of 2 GiB takes
# about 10 ms (a process of 80 MB forks, and its child exits, in 2 ms), a module's parts save 10 to 40 ms
FORK_LIMIT = 2 << 30


def can_fork() -> bool:
    return (
        sys.platform.startswith("linux")
        and not any(name in sys.modules for name in UNFORKABLE)
        and resident_bytes() < FORK_LIMIT
    )


def resident_bytes() -> int:
    """This process's resident memory (from /proc), or 0 when it cannot be read."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def in_children(
    jobs: list[Callable[[], bytes]],
    workers: int,
    grace: float = 10.0,
    patience: float = 20.0,
    holding: contextlib.AbstractContextManager | None = None,
) -> list[bytes]:
    """Each job's bytes, in order. The first job runs in this process; with `workers` > 1 and `can_fork()`,
    up to `workers - 1` of the others run at the same time in child processes, the rest here after it. A
    child's share of work is about this process's, so a child not done within `grace` seconds plus
    `patience` times what this process took is taken to hang: it is ended and its job run here.

    `holding` is a re-entrant lock the jobs take (llvmlite's, around every call into LLVM): each fork
    happens while this thread holds it, so that no child starts with it held by a thread it does not have."""
    if workers <= 1 or len(jobs) <= 1 or not can_fork():
        return [job() for job in jobs]
    reap()
    children: list[tuple[int, Child | None]] = []
    results: dict[int, bytes] = {}
    try:
        for index, job in enumerate(jobs[1:workers], 1):
            with holding if holding is not None else contextlib.nullcontext():
                children.append((index, fork(job)))
        started = time.perf_counter()
        results[0] = jobs[0]()
        for index in range(workers, len(jobs)):
            results[index] = jobs[index]()
        own = time.perf_counter() - started
        for index, child in children:
            data = collect(child, deadline=grace + patience * own)
            results[index] = data if data is not None else jobs[index]()
    finally:
        for _, child in children:
            end(child)
        reap()
    return [results[index] for index in range(len(jobs))]


class Child:
    """A forked child: its pid, the read end of its pipe, what it wrote so far and whether it has ended."""

    def __init__(self, pid: int, pipe: int) -> None:
        self.pid = pid
        self.pipe = pipe
        self.chunks: list[bytes] = []
        self.ended = False


def fork(job: Callable[[], bytes]) -> Child | None:
    """A child process running `job`, or None when it could not be started."""
    try:
        read_end, write_end = os.pipe()
    except OSError:
        return None
    try:
        with warnings.catch_warnings():  # Python 3.12 warns of `fork` in a process with threads
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
    except BaseException as failure:  # no child; an interrupt goes on once the pipe is closed
        os.close(read_end)
        os.close(write_end)
        if isinstance(failure, OSError):
            return None
        raise
    if pid == 0:  # the child: never returns
        status = 1
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C ends it at once; the parent runs no job twice
            os.close(read_end)
            result = job()
            data = memoryview(len(result).to_bytes(8, "little") + result)
            while data:
                data = data[os.write(write_end, data) :]
            os.close(write_end)  # the parent reads to the end now, not once this process's memory is unmapped
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    return Child(pid, read_end)


def collect(child: Child | None, deadline: float) -> bytes | None:
    """What `child` wrote, once it has written it all within `deadline` seconds; else None (it is then ended)."""
    if child is None:
        return None
    stop = time.monotonic() + deadline
    while True:
        left = stop - time.monotonic()
        if left <= 0 or not select.select([child.pipe], [], [], left)[0]:
            return None
        chunk = os.read(child.pipe, 1 << 20)
        if not chunk:
            break
        child.chunks.append(chunk)
    data = b"".join(child.chunks)
    if len(data) < 8 or int.from_bytes(data[:8], "little") != len(data) - 8:
        return None  # it failed, or died while writing
    child.ended = True
    with REAPING:
        EXITING.add(child.pid)
    return data[8:]


# Children that wrote their result and are exiting, reaped without waiting by `reap` (at the next call; at most
# `workers - 1` are left, as zombies, after the last one)
EXITING: set[int] = set()
REAPING = threading.Lock()  # compiles may run on several threads (the language server's rooms)


def reap() -> None:
    with REAPING:
        for pid in list(EXITING):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # reaped already (SIGCHLD ignored)
                done = pid
            if done:
                EXITING.discard(pid)


def end(child: Child | None) -> None:
    """Close `child`'s pipe and reap it, killing it first if it is still running."""
    if child is None:
        return
    with contextlib.suppress(OSError):
        os.close(child.pipe)
    if not child.ended:
        child.ended = True
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):  # reaped already (SIGCHLD ignored)
            os.waitpid(child.pid, 0)
