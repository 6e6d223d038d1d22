"""Data-parallel runs under MPI: `mpiexec -n 2 dlrun ...` (docs/distributed.md, driver/distributed.py).

Each test launches real processes with the `mpiexec` of the `mpi` extra (the mpich wheel, also in `dev`)
and is skipped, with the reason, where there is none. The semantics of the built-ins in a world of 1, and
with a stand-in for the other rank, are tested in tests/test_primitives.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy

ROOT = Path(__file__).resolve().parent.parent
TRAIN = ROOT / "examples" / "train.dl"
BIN = Path(sys.executable).parent


def tool(name: str) -> str | None:
    """`name` beside this Python (the virtual environment's), else on PATH."""
    beside = BIN / name
    return str(beside) if beside.exists() else shutil.which(name)


MPIEXEC, DLRUN = tool("mpiexec"), tool("dlrun")
needs_mpi = pytest.mark.skipif(
    MPIEXEC is None or DLRUN is None, reason="no mpiexec: install the `mpi` extra (pip install -e '.[mpi]')"
)
ENVIRONMENT = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def dlrun(directory: Path, *args: str, processes: int = 1, timeout: float = 180) -> subprocess.CompletedProcess:
    """`dlrun ARGS` in `directory`: alone, or as `processes` ranks under mpiexec."""
    launcher = [MPIEXEC, "-n", str(processes)] if processes > 1 else []
    environment = {**ENVIRONMENT, "DL_CACHE_DIR": str(directory / "cache")}
    return subprocess.run(
        [*launcher, DLRUN, *args], cwd=directory, env=environment, capture_output=True, text=True, timeout=timeout
    )


def run_metrics(directory: Path) -> Path:
    """The metrics file of the one run recorded under `directory`'s runs/ (docs/cli.md, run records)."""
    (record,) = (directory / "runs").iterdir()
    return record / "metrics.jsonl"


def metrics(directory: Path) -> dict[str, list[float]]:
    curves: dict[str, list[float]] = {}
    for line in run_metrics(directory).read_text().splitlines():
        record = json.loads(line)
        curves.setdefault(record["name"], []).append(record["value"])
    return curves


def printed_numbers(output: str) -> list[list[float]]:
    return [[float(n) for n in re.findall(r"-?\d+\.\d+(?:e-?\d+)?", line)] for line in output.splitlines()]


def assert_same_run(one: Path, two: Path, out_one: str, out_two: str) -> None:
    """The same loss curve, log and parameters within float tolerance: only the order of additions differs."""
    assert out_two.count("\n") == out_one.count("\n"), (out_one, out_two)  # one copy of the log
    for a, b in zip(printed_numbers(out_one), printed_numbers(out_two), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-4)
    curves_one, curves_two = metrics(one), metrics(two)
    assert curves_one.keys() == curves_two.keys() == {"loss", "test accuracy"}
    for name in curves_one:
        np.testing.assert_allclose(curves_two[name], curves_one[name], rtol=1e-4)
    saved_one = safetensors.numpy.load_file(one / "digits_mlp.safetensors")
    saved_two = safetensors.numpy.load_file(two / "digits_mlp.safetensors")
    assert saved_one.keys() == saved_two.keys()
    for name, value in saved_one.items():
        np.testing.assert_allclose(saved_two[name], value, rtol=1e-3, atol=1e-5, err_msg=name)


def copy_example(directory: Path) -> Path:
    directory.mkdir()
    shutil.copy(TRAIN, directory / "train.dl")
    return directory


@needs_mpi
def test_two_processes_train_as_one_and_resume_with_another_count(tmp_path: Path) -> None:
    """examples/train.dl unchanged: 2 ranks (interpreter and llvm) give 1 process's loss curve, log and
    parameters; a checkpoint saved by 1 process resumes on 2 as on 1."""
    one, two, compiled = (copy_example(tmp_path / name) for name in ("one", "two", "compiled"))
    alone = dlrun(one, "train.dl", "quick")
    assert alone.returncode == 0, alone.stderr
    together = dlrun(two, "train.dl", "quick", processes=2)
    assert together.returncode == 0, together.stderr
    assert together.stderr == ""
    assert_same_run(one, two, alone.stdout, together.stdout)

    native = dlrun(compiled, "--backend", "llvm", "--explain-backend", "train.dl", "quick", processes=2)
    assert native.returncode == 0, native.stderr
    assert_same_run(one, compiled, alone.stdout, native.stdout)
    report = native.stderr.splitlines()
    assert sum("`loss_value_and_grad`(MLP, f32[32, 64], i64[32]) compiled" in line for line in report) == 1
    assert sum("`adam_update`(" in line and line.endswith(" compiled") for line in report) == 1
    (adam,) = [line for line in report if "`adam`(" in line]
    assert (
        "interpreted: it calls `allreduce_mean`, which compiled code does not do: it talks to the other ranks" in adam
    )

    shutil.copy(one / "digits_mlp.safetensors", two / "digits_mlp.safetensors")  # both resume from 1 process's
    for directory in (one, two):
        shutil.rmtree(directory / "runs")
    resumed_alone = dlrun(one, "train.dl", "--resume")
    resumed_together = dlrun(two, "train.dl", "--resume", processes=2)
    assert resumed_alone.returncode == 0 and resumed_together.returncode == 0, resumed_together.stderr
    assert resumed_alone.stdout.startswith("resumed from digits_mlp.safetensors at step 44")
    assert_same_run(one, two, resumed_alone.stdout, resumed_together.stdout)


@needs_mpi
def test_rank_zero_alone_prints_logs_and_saves(tmp_path: Path) -> None:
    (tmp_path / "effects.dl").write_text(
        "fn main() {\n"
        '    print("rank", rank(), "of", world_size())\n'
        '    progress(1, 1, "steps")\n'
        '    log_metric("rank", float(rank()))\n'
        '    save("ranks.safetensors", float(rank()) + zeros(2))\n'
        '    print("mean rank", allreduce_mean(float(rank())))\n'
        "}\n"
    )
    result = dlrun(tmp_path, "effects.dl", processes=2)
    assert (result.returncode, result.stdout, result.stderr) == (0, "rank 0 of 2\nsteps 1/1\nmean rank 0.5\n", "")
    assert run_metrics(tmp_path).read_text() == '{"name": "rank", "step": 0, "value": 0.0}\n'  # one run record
    assert safetensors.numpy.load_file(tmp_path / "ranks.safetensors")["value"].tolist() == [0.0, 0.0]
    written = sorted(p.name for p in tmp_path.iterdir() if p.name != "cache")  # `cache`: DL_CACHE_DIR, see `dlrun`
    assert written == ["effects.dl", "ranks.safetensors", "runs"]


@needs_mpi
def test_a_check_error_is_reported_once_by_rank_zero(tmp_path: Path) -> None:
    (tmp_path / "bad.dl").write_text("fn main() {\n    let x = ones(3) @ ones(4)\n}\n")
    expected = (
        "error[E0302]: matmul inner dimensions differ: 3 vs 4\n"
        " --> bad.dl:2:13\n"
        "  |\n"
        "2 |     let x = ones(3) @ ones(4)\n"
        "  |             ^^^^^^^^^^^^^^^^^ f32[3] @ f32[4]\n"
    )
    for command in (["bad.dl"], ["check", "bad.dl"]):
        result = dlrun(tmp_path, *command, processes=2)
        assert (result.returncode, result.stdout, result.stderr) == (1, "", expected), command


@needs_mpi
def test_a_run_time_error_of_one_rank_is_reported_by_it_and_ends_the_run(tmp_path: Path) -> None:
    (tmp_path / "one_fails.dl").write_text(
        "fn main() {\n"
        "    let w = allreduce_mean(ones(4))\n"
        '    assert(rank() != 1, "rank 1 fails alone")\n'
        "    print(allreduce_mean(w))\n"
        "}\n"
    )
    result = dlrun(tmp_path, "one_fails.dl", processes=2)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.startswith("on rank 1 of 2:\nerror[E0502]: assertion failed: rank 1 fails alone\n")
    assert result.stderr.count("error[") == 1 and "dlrun:" not in result.stderr


def documented_example(code: str) -> tuple[str, str]:
    """The program of docs/errors.md's entry for `code` and the diagnostic shown for it with 2 ranks."""
    entry = (ROOT / "docs" / "errors.md").read_text().split(f"### {code}:", 1)[1].split("\n### ", 1)[0]
    program = entry.split("```dl\n", 1)[1].split("```", 1)[0]
    shown = entry.split("```text\n", 1)[1].split("```", 1)[0]
    return program, shown


@needs_mpi
@pytest.mark.parametrize("code", ["E0522", "E0523"])
def test_the_data_parallel_errors_read_as_docs_show(tmp_path: Path, code: str) -> None:
    program, shown = documented_example(code)
    (tmp_path / "example.dl").write_text(program)
    result = dlrun(tmp_path, "example.dl", processes=2)
    assert (result.returncode, result.stdout, result.stderr) == (1, "", shown)


def worker_of_rank(rank: int, program: Path) -> int | None:
    """The pid of the worker process running `program` as `rank` (driver/distributed.py), if it runs."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
            environment = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            b"dl.distributed" in command
            and str(program.name).encode() in command
            and f"PMI_RANK={rank}".encode() in environment
        ):
            return int(entry.name)
    return None


@needs_mpi
def test_a_killed_rank_ends_every_other_rank_with_its_name(tmp_path: Path) -> None:
    program = tmp_path / "forever.dl"
    program.write_text(
        "fn main() {\n"
        "    let w = zeros(1000)\n"
        "    for step in 0..100000000 {\n"
        "        w = w + allreduce_mean(ones(1000) * float(rank()))\n"
        '        if step == 3 { print("running") }\n'
        "    }\n"
        "}\n"
    )
    environment = {**ENVIRONMENT, "PYTHONUNBUFFERED": "1"}
    run = subprocess.Popen(
        [MPIEXEC, "-n", "3", DLRUN, program.name],
        cwd=tmp_path,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert run.stdout.readline() == "running\n"
        victim = worker_of_rank(1, program)
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        _, stderr = run.communicate(timeout=30)
        assert time.monotonic() - killed_at < 30
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode != 0
    assert f"dlrun: rank 1 (pid {victim} on " in stderr and ") was killed by SIGKILL" in stderr
    for survivor in (0, 2):
        assert f"dlrun: rank {survivor} of 3 stops: rank 1 (pid {victim} on " in stderr, stderr
    assert worker_of_rank(0, program) is None and worker_of_rank(2, program) is None


def test_a_launch_without_mpi4py_is_a_clear_error(tmp_path: Path, monkeypatch, capsys) -> None:
    """Without the `mpi` extra, a launcher's run fails at once with how to fix it, said by rank 0 alone."""
    import importlib.util

    from dl import cli

    (tmp_path / "hello.dl").write_text('fn main() { print("hello") }\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PMI_SIZE", "2")
    monkeypatch.delenv("DL_SUPERVISOR", raising=False)
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "mpi4py" else find_spec(name))
    for rank, expected in ((0, "pip install 'dl-lang[mpi]'"), (1, "")):
        monkeypatch.setenv("PMI_RANK", str(rank))
        assert cli.main(["hello.dl"]) == 2
        message = capsys.readouterr().err
        assert expected in message and (message == "") == (rank == 1)


def test_a_single_process_run_does_not_load_mpi(tmp_path: Path) -> None:
    (tmp_path / "hello.dl").write_text('fn main() { print("hello", world_size()) }\n')
    probe = "import sys; from dl.cli import main; main(['hello.dl']); print('mpi4py' in sys.modules)"
    environment = {key: value for key, value in ENVIRONMENT.items() if not key.startswith(("PMI_", "OMPI_", "PMIX_"))}
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=60
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "hello 1\nFalse\n", "")
