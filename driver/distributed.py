"""Running one program as N processes: `mpiexec -n N dlrun FILE.dl` (docs/distributed.md).

An MPI launcher (`mpiexec`, `srun`) starts `dlrun` N times, each with its rank in the environment.
`launched_rank` and `launched_size` read that environment without importing MPI, so a run of one process
never loads mpi4py. In a world of more than one process:

- The process the launcher started is a *supervisor* (`supervise`): it runs the *worker*, the same command
  (`python -m dl.distributed ARGS`), in a session of its own, waits for it and exits as it did. Launchers end
  every process of a job with SIGKILL the moment one of them fails, which no process can catch; the workers
  are not theirs to kill, so a worker that outlives its supervisor can still say which rank failed.
- The worker connects to MPI (`join`, which also connects `runtime/world.py`), checks and runs the program,
  and `finish` waits at a barrier for every rank before the worker exits normally.
- A `Watchdog` thread ends the worker, within a second, when the run cannot go on: another rank reported an
  error (an empty message on the alarm communicator: the worker ends quietly), a rank on this host has
  ended without finishing (the worker names it, and tells every other rank which one, so that ranks on
  other hosts name it too), or the launcher ended this worker's supervisor (another rank has failed). So
  no rank hangs in an all-reduce waiting for a rank that is gone.
- An error (a check error, which every rank meets, or a run-time error) is reported by rank 0, or by the
  rank that met it alone: a rank other than 0 first waits up to `GRACE_SECONDS` for signs that rank 0 has
  failed too, and stays quiet if it has. A rank that reported an error tells the others (`announce`).
- Ranks that end on an error leave together (`leave`): at a barrier, then at once. A launcher kills every
  other rank the moment one exits with a failure, and prints a banner of its own for each rank it finds
  still running; ranks that leave together are gone before it looks.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from typing import Any

import numpy as np
from dl.lang.record import record
from dl.runtime.world import World

SUPERVISOR = "DL_SUPERVISOR"  # in a worker's environment: its supervisor's pid
RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")
SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE")
UNKNOWN_SIZE = 0  # a launcher (PMIx) that names the rank but not the size: MPI tells
POLL_SECONDS = 0.2
GRACE_SECONDS = 15.0  # generous: a loaded machine (CI, other jobs) can delay rank 0 by seconds
ALARM_TAG = 19
LEAVE_SECONDS = 5.0  # how long a rank that ends on an error waits for the others to end with it
HOST_BYTES = 256  # host names are at most 255 bytes (POSIX HOST_NAME_MAX)


def launched_rank() -> int:
    """This process's rank as the launcher's environment gives it; 0 without a launcher."""
    return next((int(os.environ[name]) for name in RANK_VARIABLES if name in os.environ), 0)


def launched_size() -> int:
    """How many processes the launcher started, from its environment: 1 without a launcher, `UNKNOWN_SIZE`
    if it names a rank and not a size."""
    size = next((int(os.environ[name]) for name in SIZE_VARIABLES if name in os.environ), None)
    if size is not None:
        return size
    if "PMIX_RANK" in os.environ:
        return int(os.environ.get("SLURM_NTASKS", UNKNOWN_SIZE))
    return 1


def is_worker() -> bool:
    return SUPERVISOR in os.environ


class LaunchError(Exception):
    """The launcher started a world this installation cannot join (exit status 2)."""


def supervise(argv: list[str]) -> int:
    """Run the worker for `dlrun ARGV` and exit as it does; report it if a signal killed it."""
    import importlib.util

    if importlib.util.find_spec("mpi4py") is None:
        raise LaunchError(
            f"this run was started by an MPI launcher as {launched_size() or 'several'} processes, and "
            "needs mpi4py: pip install 'dl-lang[mpi]' (or run dlrun without the launcher)"
        )
    import signal  # here: a run without a launcher never starts a process (start-up, bench/startup.py)
    import subprocess

    environment = dict(os.environ, **{SUPERVISOR: str(os.getpid())})
    command = [sys.executable, "-m", "dl.distributed", *argv]
    # close_fds=False: the launcher's PMI connection is an inherited descriptor the worker must have
    worker = subprocess.Popen(command, env=environment, close_fds=False, start_new_session=True)
    relayed: set[int] = set()

    def relay(number: int, frame: Any) -> None:
        relayed.add(number)
        worker.send_signal(number)

    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(number, relay)
    status = worker.wait()
    if status >= 0:
        return status
    if -status not in relayed:
        name = signal.Signals(-status).name
        say(f"rank {launched_rank()} (pid {worker.pid} on {hostname()}) was killed by {name}")
    return 128 - status


def hostname() -> str:
    """This machine's name, as MPI's ranks report it."""
    import socket  # here: only a run on several ranks asks

    return socket.gethostname()


def say(message: str) -> None:
    """One line on stderr, flushed at once: the process may end right after."""
    print(f"dlrun: {message}", file=sys.stderr, flush=True)


@record(frozen=True, slots=True)
class Peer:
    rank: int
    host: str
    pid: int


class Watchdog:
    """Ends this worker when the run cannot go on (see the module's docstring); a daemon thread."""

    def __init__(self, supervisor: int) -> None:
        self.supervisor = supervisor
        self.world: list[Peer] = []  # every rank, by rank
        self.alarm: Any = None  # a duplicate of the world's communicator, for failure announcements only
        self.mpi: Any = None  # the mpi4py.MPI module, once joined
        self.lock = threading.Lock()
        self.stopped = False
        self.thread = threading.Thread(target=self.run, name="dl-watchdog", daemon=True)

    def run(self) -> None:
        while True:
            time.sleep(POLL_SECONDS)
            with self.lock:
                if self.stopped:
                    return
                self.check()

    def stop(self) -> None:
        with self.lock:
            self.stopped = True

    def check(self) -> None:
        """End this worker if the run cannot go on: quietly if a rank announced an error it reported, naming the
        ranks that ended if one did (and telling the other ranks which, so that they name the same ones)."""
        announced = self.announcement()
        if announced is not None and not announced:
            leave(1)
        host = hostname()
        ended = announced or [peer.rank for peer in self.world if peer.host == host and not alive(peer.pid)]
        if ended:
            names = ", ".join(f"rank {rank} (pid {self.world[rank].pid} on {self.world[rank].host})" for rank in ended)
            say(f"rank {World.rank} of {World.size} stops: {names} ended without finishing the run")
            if announced is None:
                announce(np.array(ended, np.int64).tobytes(), skip=ended)
            end(1)
        if os.getppid() != self.supervisor:
            say(
                f"rank {World.rank} of {World.size} stops: the launcher ended it, so another rank has failed "
                "(see the launcher's message)"
            )
            end(1)

    def announcement(self, source: int | None = None) -> list[int] | None:
        """The ranks another rank announced as ended ([] for an error it reported), or None if none did."""
        if self.alarm is None:
            return None
        status = self.mpi.Status()
        wanted = self.mpi.ANY_SOURCE if source is None else source
        if not self.alarm.Iprobe(source=wanted, tag=ALARM_TAG, status=status):
            return None
        payload = bytearray(status.Get_count(self.mpi.BYTE))
        self.alarm.Recv([payload, self.mpi.BYTE], source=status.Get_source(), tag=ALARM_TAG)
        return np.frombuffer(bytes(payload), np.int64).tolist()


watchdog: Watchdog | None = None
joined = False


def alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, ended but not yet waited for, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc: trust kill()


def start_watching() -> None:
    """In a worker: end it if its supervisor ends, from the start (MPI's start-up may wait for a rank that
    has already failed its check)."""
    global watchdog
    watchdog = Watchdog(int(os.environ[SUPERVISOR]))
    watchdog.thread.start()


def join() -> None:
    """Connect this worker to the MPI world (in a single process: nothing), and watch the other ranks."""
    global joined
    if not is_worker():
        return
    from mpi4py import MPI

    communicator = MPI.COMM_WORLD
    expected = launched_size()
    if expected not in (UNKNOWN_SIZE, communicator.Get_size()):
        raise LaunchError(
            f"the launcher started {expected} processes, but MPI joined them as worlds of "
            f"{communicator.Get_size()}: does mpi4py use the MPI the launcher belongs to? (srun: --mpi=pmi2)"
        )
    World.connect(communicator, MPI.SUM, MPI.MAX, MPI.IN_PLACE)
    joined = True
    world = everyone(communicator, hostname())
    assert watchdog is not None
    with watchdog.lock:
        watchdog.world = world
        if MPI.Query_thread() == MPI.THREAD_MULTIPLE:  # the watchdog probes while the program communicates
            watchdog.mpi = MPI
            watchdog.alarm = communicator.Dup()


def everyone(communicator: Any, host: str) -> list[Peer]:
    """Every rank's host name and pid, gathered in buffers (mpi4py's lower-case calls would pickle)."""
    name = np.frombuffer(host.encode()[:HOST_BYTES].ljust(HOST_BYTES, b"\0"), np.uint8)
    names = np.empty((World.size, HOST_BYTES), np.uint8)
    communicator.Allgather(name, names)
    pids = np.empty(World.size, np.int64)
    communicator.Allgather(np.array([os.getpid()], np.int64), pids)
    return [
        Peer(rank, bytes(names[rank]).rstrip(b"\0").decode(errors="replace"), int(pids[rank]))
        for rank in range(World.size)
    ]


def finish() -> None:
    """After a successful run: wait for every rank (a rank still running may yet fail), then stop watching."""
    if joined:
        World.communicator.Barrier()
    if watchdog is not None:
        watchdog.stop()


def report(text: str) -> None:
    """Show a diagnostic (or a usage error) once: on rank 0, or on the one rank that met it."""
    if not is_worker():
        print(text, file=sys.stderr)
        return
    if watchdog is not None:
        watchdog.stop()
    if launched_rank() == 0 or not rank_zero_failed_within(GRACE_SECONDS):
        prefix = "" if launched_rank() == 0 else f"on rank {launched_rank()} of {launched_size() or World.size}:\n"
        print(prefix + text, file=sys.stderr, flush=True)
        announce()


def rank_zero_failed_within(seconds: float) -> bool:
    """Whether rank 0 (which reports what it meets) shows in time that it has failed too, or the launcher
    ends this rank, as it does when another one fails."""
    deadline = time.monotonic() + seconds
    rank_zero = watchdog.world[0] if watchdog is not None and watchdog.world else None
    while time.monotonic() < deadline:
        if watchdog is not None and watchdog.announcement(source=0) is not None:
            return True
        if (rank_zero is not None and not alive(rank_zero.pid)) or os.getppid() != int(os.environ[SUPERVISOR]):
            return True
        time.sleep(POLL_SECONDS / 2)
    return False


def announce(payload: bytes = b"", skip: list[int] = ()) -> None:
    """Tell every other rank (but those in `skip`, which have ended) that this one ends: `payload` empty for
    an error it has reported, else the ranks it saw end, as int64s."""
    if watchdog is None or watchdog.alarm is None:
        return
    others = [rank for rank in range(World.size) if rank != World.rank and rank not in skip]
    # an MPI error while ending changes nothing: the other ranks' watchdogs end them all the same
    with contextlib.suppress(watchdog.mpi.Exception):
        requests = [watchdog.alarm.Isend(payload, rank, tag=ALARM_TAG) for rank in others]
        deadline = time.monotonic() + 1.0
        while requests and time.monotonic() < deadline:  # a send to a rank that has ended may never complete
            requests = [request for request in requests if not request.Test()]
            time.sleep(0.01)


def leave(status: int) -> None:
    """End this worker after an error, at a barrier with every rank that ends on it (see the module's
    docstring); at once if the barrier is not reached in `LEAVE_SECONDS` (a rank has gone)."""
    if watchdog is not None and watchdog.alarm is not None:
        with contextlib.suppress(watchdog.mpi.Exception):
            barrier = watchdog.alarm.Ibarrier()
            deadline = time.monotonic() + LEAVE_SECONDS
            while not barrier.Test() and time.monotonic() < deadline:
                time.sleep(0.0005)
    end(status)


def end(status: int) -> None:
    """Exit at once: MPI's finalization would wait for ranks that are gone."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed or broken stream: nothing more to save
            stream.flush()
    os._exit(status)


def worker_main(argv: list[str]) -> None:
    """A worker's life: `dlrun ARGV` watched from the start; on failure, leave without MPI's finalization."""
    from dl.cli import main

    start_watching()
    status = main(argv)
    if status != 0:
        leave(status)
    finish()
    sys.exit(0)


if __name__ == "__main__":  # `python -m dl.distributed`: run as the module the rest of dl imports, not a copy
    from dl import distributed

    distributed.worker_main(sys.argv[1:])
