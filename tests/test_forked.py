"""Jobs run in forked children (codegen/forked.py): results in order, and a child that fails, dies or
hangs costs only time, its job run again in the parent."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
from dl.codegen import forked

pytestmark = pytest.mark.skipif(not forked.can_fork(), reason="forks only on Linux, without MPI or CUDA loaded")

PARENT = os.getpid()


def where(tag: bytes, size: int = 0):
    """A job whose bytes say which process ran it, padded to `size` bytes (beyond a pipe's buffer)."""
    return lambda: tag + b":" + str(os.getpid()).encode() + b"." * size


def ran_in(result: bytes) -> int:
    return int(result.split(b":")[1].rstrip(b"."))


def test_each_job_gives_its_bytes_in_order_and_the_others_run_in_children() -> None:
    jobs = [where(b"a"), where(b"b", size=3 << 20), where(b"c"), where(b"d")]
    results = forked.in_children(jobs, workers=3)
    assert [result.split(b":")[0] for result in results] == [b"a", b"b", b"c", b"d"]
    assert len(results[1]) > 3 << 20
    assert ran_in(results[0]) == PARENT and ran_in(results[3]) == PARENT  # beyond the workers: here, after
    children = {ran_in(results[1]), ran_in(results[2])}
    assert PARENT not in children and len(children) == 2
    assert forked.in_children([lambda: b""], workers=2) == [b""]
    assert forked.in_children([lambda: b"", lambda: b""], workers=2) == [b"", b""]


def test_one_worker_or_a_process_that_must_not_fork_runs_every_job_here(monkeypatch) -> None:
    jobs = [where(b"a"), where(b"b")]
    assert {ran_in(result) for result in forked.in_children(jobs, workers=1)} == {PARENT}
    monkeypatch.setattr(forked, "FORK_LIMIT", 10 << 20)  # a process this large: no fork pays
    assert forked.resident_bytes() > 10 << 20 and not forked.can_fork()
    assert {ran_in(result) for result in forked.in_children(jobs, workers=2)} == {PARENT}
    monkeypatch.undo()
    monkeypatch.setitem(sys.modules, "mpi4py", sys)
    assert not forked.can_fork()
    assert {ran_in(result) for result in forked.in_children(jobs, workers=2)} == {PARENT}


def children() -> set[int]:
    """This process's child processes, running or not yet reaped (from /proc)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        if int(fields[1]) == PARENT:
            found.add(int(stat.parent.name))
    return found


def only_in_a_child(action):
    """A job that does `action` first in a child; its bytes say which process finished it."""

    def job() -> bytes:
        if os.getpid() != PARENT:
            action()
        return str(os.getpid()).encode()

    return job


def failing() -> None:
    raise RuntimeError("a child's failure")


def dying() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def hanging() -> None:
    time.sleep(60)


@pytest.mark.parametrize("action", [failing, dying, hanging], ids=["raises", "killed", "hangs"])
def test_a_child_that_fails_dies_or_hangs_has_its_job_run_here(action) -> None:
    before = children()
    results = forked.in_children([where(b"a"), only_in_a_child(action)], workers=2, grace=1.0, patience=0.0)
    assert int(results[1]) == PARENT and ran_in(results[0]) == PARENT  # a hanging child is ended after the grace
    assert children() <= before  # none of its own left running or unreaped


def test_a_job_that_fails_here_fails_the_call_and_ends_the_children() -> None:
    before = children()
    with pytest.raises(RuntimeError, match="a child's failure"):
        forked.in_children([failing, only_in_a_child(hanging)], workers=2)
    assert children() <= before


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_fork_waits_for_the_lock_its_jobs_take_so_no_child_inherits_it_held() -> None:
    """llvmlite takes one lock around every call into LLVM: a child forked while another thread held it
    would wait on it forever. `holding` makes the fork wait for it instead; the child then runs its job."""
    import threading

    lock = threading.RLock()
    taken, release = threading.Event(), threading.Event()

    def busy() -> None:
        with lock:
            taken.set()
            release.wait(10)

    def locked_job() -> bytes:
        with lock:
            return str(os.getpid()).encode()

    holder = threading.Thread(target=busy)
    holder.start()
    taken.wait(10)
    threading.Timer(0.3, release.set).start()
    results = forked.in_children([lambda: b"here", locked_job], workers=2, grace=30.0, holding=lock)
    holder.join()
    assert int(results[1]) != PARENT  # a child ran it (a child stuck on the lock would leave it to this process)


def test_children_are_made_ended_and_reaped_safely_from_several_threads() -> None:
    """Compiles may run on several threads at once (the language server's rooms)."""
    import threading

    failures: list[BaseException] = []

    def compile_often() -> None:
        try:
            for _ in range(30):
                assert forked.in_children([lambda: b"a", lambda: b"b" * 1000, lambda: b"c"], workers=3) == [
                    b"a",
                    b"b" * 1000,
                    b"c",
                ]
        except BaseException as failure:  # reported by the test's thread
            failures.append(failure)

    threads = [threading.Thread(target=compile_often) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_an_ignored_sigchld_or_an_interrupted_fork_leaves_nothing_behind(monkeypatch) -> None:
    """With SIGCHLD ignored the system reaps children itself; an interrupt between two forks ends the
    child already made and closes every pipe."""
    before, descriptors = children(), open_descriptors()
    previous = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        results = forked.in_children([where(b"a"), only_in_a_child(failing)], workers=2, grace=1.0, patience=0.0)
        assert int(results[1]) == PARENT
    finally:
        signal.signal(signal.SIGCHLD, previous)
    forking, made = os.fork, []

    def interrupted_fork() -> int:
        if made:
            raise KeyboardInterrupt
        made.append(True)
        return forking()

    monkeypatch.setattr(os, "fork", interrupted_fork)
    with pytest.raises(KeyboardInterrupt):
        forked.in_children([where(b"a"), where(b"b", size=1 << 20), where(b"c")], workers=3)
    monkeypatch.undo()
    assert children() <= before and open_descriptors() == descriptors
