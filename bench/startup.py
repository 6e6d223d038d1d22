"""Start-up time: `dlrun hello.dl` as a process, beside bare Python and Python importing numpy.

    python bench/startup.py [--runs 10] [--llvm-runs 3] [--json FILE]
    python bench/startup.py --runs 0 --llvm-runs 2 --llvm-program examples/gpt.dl --llvm-args ""

Three commands run alternately, `runs` times each, each as a new process: `dlrun hello.dl` (a
`fn main() { print("hello") }`), `python -c pass` and `python -c "import numpy"` (numpy is the floor
under any run of the interpreter). Then `dlrun hello.dl` with an empty cache directory (a first run
ever: the parse table is built and stored), and a `--backend llvm` run of examples/train.dl `quick`
with the compile cache emptied before each run (cold) and kept (warm), alternated `llvm_runs` times;
`--llvm-program` and `--llvm-args` time another program's cold and warm runs so (`--runs 0` leaves out
the hello.dl rows).

Each figure is the wall time of the process (`time.perf_counter` around it) and the CPU time it used
(user + system, from `os.wait4`): on a shared, loaded machine the wall time moves with the load and the
CPU time much less. Min and median are reported. Every process gets the same environment: one BLAS and
OpenMP thread, and byte-code caching on (as an installed package has its `.pyc` files), with one
unmeasured run of each command first to write them. Not a test: nothing here is collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HELLO = 'fn main() {\n    print("hello")\n}\n'


def environment(cache: Path) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", DL_CACHE_DIR=str(cache))
    return env


def timed(command: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Run `command` to its end: (wall seconds, CPU seconds). Raises if it fails."""
    start = time.perf_counter()
    process = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    error = process.stderr.read().decode()
    process.stderr.close()
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({process.returncode}):\n{error}")
    return wall, usage.ru_utime + usage.ru_stime


def summary(samples: list[tuple[float, float]]) -> dict[str, float]:
    walls, cpus = [s[0] for s in samples], [s[1] for s in samples]
    return {
        "wall_min": min(walls),
        "wall_median": statistics.median(walls),
        "cpu_min": min(cpus),
        "cpu_median": statistics.median(cpus),
        "runs": len(samples),
    }


def alternate(commands: dict[str, tuple[list[str], dict[str, str], Path]], runs: int, before=None) -> dict:
    """Each command `runs` times, in turn; `before(name)` runs before each timed run when given."""
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, (command, env, cwd) in commands.items():
            if before is not None:
                before(name)
            samples[name].append(timed(command, env, cwd))
    return {name: summary(found) for name, found in samples.items()}


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--runs", type=int, default=10)
    options.add_argument("--llvm-runs", type=int, default=3, help="cold and warm llvm runs of train.dl (0: none)")
    options.add_argument("--llvm-program", default="examples/train.dl", help="the program of the llvm runs")
    options.add_argument("--llvm-args", default="quick", help="its arguments, separated by spaces")
    options.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    arguments = options.parse_args()
    dlrun = str(Path(sys.executable).with_name("dlrun"))
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        (work / "hello.dl").write_text(HELLO)
        cache, empty = work / "cache", work / "empty-cache"
        env = environment(cache)
        commands = {
            "dlrun hello.dl": ([dlrun, "hello.dl"], env, work),
            "python -c pass": ([sys.executable, "-c", "pass"], env, work),
            "python -c 'import numpy'": ([sys.executable, "-c", "import numpy"], env, work),
        }
        for command, command_env, cwd in commands.values():  # byte code and the parse table written
            timed(command, command_env, cwd)
        figures = {}
        if arguments.runs:
            figures = alternate(commands, arguments.runs)
            first = {"dlrun hello.dl, empty cache": ([dlrun, "hello.dl"], environment(empty), work)}
            figures |= alternate(first, arguments.runs, before=lambda _: shutil.rmtree(empty, ignore_errors=True))
        if arguments.llvm_runs:
            program = (ROOT / arguments.llvm_program).resolve()
            figures |= llvm_runs(dlrun, env, cache, work, arguments.llvm_runs, program, arguments.llvm_args.split())
    report(figures)
    if arguments.json:
        Path(arguments.json).write_text(json.dumps(figures, indent=2) + "\n")


def llvm_runs(dlrun: str, env: dict[str, str], cache: Path, work: Path, runs: int, program: Path, args: list) -> dict:
    """`dlrun --backend llvm PROGRAM ARGS...`, its compile cache emptied before each cold run."""
    command = [dlrun, "--backend", "llvm", "--metrics", str(work / "metrics.jsonl"), str(program), *args]
    name = " ".join([f"llvm {program.name}", *args])
    cold, warm = f"{name}, cold", f"{name}, warm"
    commands = {cold: (command, env, work), warm: (command, env, work)}
    timed(command, env, work)  # fills the compile cache

    def before(name: str) -> None:
        if name == cold:
            shutil.rmtree(cache / "llvm", ignore_errors=True)

    figures = alternate(commands, runs, before)
    figures["llvm cold - warm"] = {
        key: figures[cold][key] - figures[warm][key] for key in ("wall_min", "wall_median", "cpu_min", "cpu_median")
    } | {"runs": runs}
    return figures


def report(figures: dict) -> None:
    print(f"{'command':<34} {'wall min':>9} {'median':>9} {'CPU min':>9} {'median':>9}  runs")
    for name, row in figures.items():
        print(
            f"{name:<34} {row['wall_min']:9.3f} {row['wall_median']:9.3f} "
            f"{row['cpu_min']:9.3f} {row['cpu_median']:9.3f}  {row['runs']}"
        )
    print(f"(seconds; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs at the end)")


if __name__ == "__main__":
    main()
