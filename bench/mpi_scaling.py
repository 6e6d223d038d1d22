"""Data-parallel training on MPI: time per step on 1 and 2 processes, the all-reduce's share of a step, and a
projection to 8-64 ranks from a ring all-reduce cost model fitted to measured all-reduce times.

    python bench/mpi_scaling.py [--repeats 5] [--epochs 3] [--hidden 128] [--json FILE]

Needs the `mpi` extra (`mpiexec` beside this Python). The model and data are examples/train.dl's: a
64-128-10 perceptron on the shipped digits, cross-entropy, Adam (lr 0.003), global batches of 64 rows (22
steps an epoch); its gradient is 9,610 f32 numbers, 38,440 bytes. `--hidden H` widens the hidden layer
(a gradient of 4 (74 H + 10) bytes), for a step whose arithmetic, not the interpreter, dominates.

What runs (each rank pins its BLAS and OpenMP to one thread, `OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1`, so
N ranks use N cores):

1. Steps. One process (`python`, no launcher: a world of 1, as `dlrun train.dl` runs) and two
   (`mpiexec -n 2`, each rank taking 32 rows of every batch) train `--epochs` epochs each, the launches
   alternated 1, 2, 1, 2, ... `--repeats` times. Each epoch is timed between two barriers on rank 0 and
   divided by its 22 steps; min and median over all epochs. In the 2-process launch, every epoch is run
   twice, alternated: with `optim.adam` (which all-reduces the gradient) and with `optim.adam_update` (the
   same step without it), so their difference is what the all-reduce costs inside a step, waiting for the
   other rank included.
2. The all-reduce alone. In the same launch, `allreduce_mean` of a tree shaped like the gradient (the
   interpreter's implementation: the dtype check, packing, one small all-reduce of the shapes' checksum and
   one of the data), 500 calls, each started after a barrier; min and median.
3. Message sizes. `mpiexec -n 2`: MPI `Allreduce` in place (SUM) of f32 buffers of 4 B to 16 MiB, the
   median of many calls per size. `T2(m) = a + b m` is fitted by least squares on relative error (each
   point weighted by 1 / its time, so that the small messages, which fix the latency, count as much as
   the large ones), over the messages up to 1 MiB, the range of the gradients projected. A ring
   all-reduce of m bytes over N ranks takes 2(N - 1) steps of m / N bytes each:
   `T(N, m) = 2 (N - 1) alpha + 2 (N - 1) / N * m * beta`; for N = 2 that is `2 alpha + m beta`, so
   alpha = a / 2 and beta = b.
4. Compute per rank. One process, no all-reduce: the time of a step (`adam_update`) on batches of
   64, 32, 16, 8, 4, 2 and 1 rows, which is what each of N = 1 ... 64 ranks computes for a global batch of
   64.

The projection for N ranks is the measured compute of a step on 64 / N rows plus `allreduce_mean`'s two
all-reduces from the model: `T(N, 48 bytes) + T(N, gradient bytes)`. Its assumptions are listed in
bench/README.md.

Not a test: nothing here is collected by pytest.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve()
STEPS_PER_EPOCH = 22  # 1437 training rows // 64
GLOBAL_BATCH = 64
RANKS = (8, 16, 32, 64)
MESSAGE_FLOATS = (1, 16, 256, 4096, 65536, 1 << 18, 1 << 20, 1 << 22)
FIT_UP_TO_BYTES = 1 << 20  # the range of the gradients projected (38 KB to 600 KB); larger messages are shown
ASSUMED_NETWORK = (25e-6, 1 / 1.25e9)  # alpha (s) and beta (s/byte) of a 10 Gb/s Ethernet, assumed, not measured

SOURCE = """
import nn
import optim
import data

struct MLP { w1: f32[64, HIDDEN], b1: f32[HIDDEN], w2: f32[HIDDEN, 10], b2: f32[10] }

fn forward(m: MLP, x: f32[B, 64]) -> f32[B, 10] {
    let h = nn.relu(nn.linear(x, m.w1, m.b1))
    return nn.linear(h, m.w2, m.b2)
}

fn loss(m: MLP, x: f32[B, 64], y: i64[B]) -> f32 {
    return nn.cross_entropy(forward(m, x), y)
}

fn model(p) {
    let (w1, b1, w2, b2) = p
    return MLP { w1: w1, b1: b1, w2: w2, b2: b2 }
}

fn leaves(m: MLP) {
    return (m.w1, m.b1, m.w2, m.b2)
}

fn setup() {
    let m = MLP {
        w1: nn.kaiming(64, HIDDEN, 1), b1: zeros(HIDDEN), w2: nn.kaiming(HIDDEN, 10, 2), b2: zeros(10)
    }
    let p = leaves(m)
    return (data.split(digits(), 0.8, 0), p, (zeros_like(p), zeros_like(p), 0))
}

# Up to `limit` steps on batches of `size` rows (this rank's share of them); `average`: optim.adam, which
# all-reduces the gradient, else optim.adam_update, the same step without it.
fn train(p, s, train_x: f32[N, 64], train_y: i64[N], seed: i64, size: i64, limit: i64, average: bool) {
    let m = model(p)
    let (m1, v1, steps) = s
    let state = (model(m1), model(v1), steps)
    let count = 0
    for (x, y) in batches((train_x, train_y), size, shuffle=true, seed=seed) {
        if count == limit {
            break
        }
        let (value, g) = value_and_grad(loss)(m, x, y)
        if average {
            (m, state) = optim.adam(m, g, state, lr=0.003)
        } else {
            (m, state) = optim.adam_update(m, g, state, lr=0.003)
        }
        count += 1
    }
    let (m2, v2, steps2) = state
    return (leaves(m), (leaves(m2), leaves(v2), steps2))
}
"""


# ------------------------------------------------------------------------------------------ inside a rank


class Trainer:
    """The compiled module, its data and parameters; `epoch` runs `train` once."""

    def __init__(self, hidden: int) -> None:
        from dl import pipeline
        from dl.interp.run import compile_program
        from dl.runtime.calls import invoke

        self.invoke = invoke
        path = str(HERE.with_name("_mpi_scaling.dl"))
        source = SOURCE.replace("HIDDEN", str(hidden))
        program, typed = pipeline.prepare(pipeline.load(path, source), (("setup", ()),))
        setup = compile_program(program, typed).states[program.entry].cells["setup"].value
        (train, _), self.params, self.state = invoke(setup, [], setup.span)
        self.data = tuple(np.asarray(t) for t in train)
        types = (
            pipeline.value_type(self.params),
            pipeline.value_type(self.state),
            *(pipeline.value_type(t) for t in self.data),
            *(pipeline.value_type(0) for _ in range(3)),
            pipeline.value_type(True),
        )
        program, typed = pipeline.prepare(pipeline.load(path, source), (("train", types),))
        self.function = compile_program(program, typed).states[program.entry].cells["train"].value

    def run(self, seed: int, size: int, limit: int, average: bool) -> None:
        arguments = [self.params, self.state, *self.data, seed, size, limit, average]
        self.params, self.state = self.invoke(self.function, arguments, self.function.span)


def connect() -> Any:
    """Join the MPI world as `dlrun` does (runtime/world.py); None in a world of 1."""
    if "PMI_SIZE" not in os.environ or os.environ["PMI_SIZE"] == "1":
        return None
    from dl.runtime.world import World
    from mpi4py import MPI

    World.connect(MPI.COMM_WORLD, MPI.SUM, MPI.MAX, MPI.IN_PLACE)
    return MPI.COMM_WORLD


def timed(action, communicator: Any) -> float:
    """Seconds `action` takes on every rank: between two barriers, as rank 0 sees it."""
    if communicator is not None:
        communicator.Barrier()
    start = time.perf_counter()
    action()
    if communicator is not None:
        communicator.Barrier()
    return time.perf_counter() - start


def gradient_bytes(hidden: int) -> int:
    return 4 * (64 * hidden + hidden + hidden * 10 + 10)


def steps_job(epochs: int, hidden: int) -> dict:
    """Per-step times of whole epochs; with 2 ranks also without the all-reduce, and the all-reduce alone."""
    communicator = connect()
    trainer = Trainer(hidden)
    trainer.run(0, GLOBAL_BATCH, 2, True)  # warm-up: the first calls compile nothing, but fill caches
    result: dict[str, list[float]] = {"step": [], "step_without_allreduce": [], "allreduce": []}
    gc.disable()
    for epoch in range(epochs):
        result["step"].append(
            timed(lambda e=epoch: trainer.run(e, GLOBAL_BATCH, STEPS_PER_EPOCH, True), communicator) / STEPS_PER_EPOCH
        )
        if communicator is not None:
            without = timed(lambda e=epoch: trainer.run(e, GLOBAL_BATCH, STEPS_PER_EPOCH, False), communicator)
            result["step_without_allreduce"].append(without / STEPS_PER_EPOCH)
    if communicator is not None:
        result["allreduce"] = allreduce_alone(trainer.params, communicator)
    gc.enable()
    return result


def allreduce_alone(tree: tuple, communicator: Any, calls: int = 500) -> list[float]:
    """Seconds per `allreduce_mean` of a tree shaped like the gradient, each call started after a barrier."""
    from dl.interp.primitives import IMPLEMENTATIONS
    from dl.lang.primitives import Prim

    allreduce_mean = IMPLEMENTATIONS[Prim.ALLREDUCE_MEAN]
    gradient = tuple(np.ones_like(np.asarray(leaf)) for leaf in tree)
    samples = []
    for _ in range(calls):
        communicator.Barrier()
        start = time.perf_counter()
        allreduce_mean(gradient)
        samples.append(time.perf_counter() - start)
    return samples


def messages_job(epochs: int, hidden: int) -> dict:
    """The median time of an in-place f32 Allreduce (SUM) per message size, in bytes."""
    communicator = connect()
    from mpi4py import MPI

    times = {}
    for floats in MESSAGE_FLOATS:
        buffer = np.ones(floats, np.float32)
        calls = max(10, min(2000, int(2e7 // (floats * 4 + 4000))))
        samples = []
        for _ in range(calls):
            communicator.Barrier()
            start = time.perf_counter()
            communicator.Allreduce(MPI.IN_PLACE, buffer, op=MPI.SUM)
            samples.append(time.perf_counter() - start)
        slower = np.array([statistics.median(samples)])  # the slower rank's median: a buffer, not pickled
        communicator.Allreduce(MPI.IN_PLACE, slower, op=MPI.MAX)
        times[floats * 4] = float(slower[0])
    return {"allreduce_seconds_by_bytes": times}


def compute_job(epochs: int, hidden: int) -> dict:
    """One process, no all-reduce: seconds per step on batches of 64, 32, ..., 1 rows."""
    trainer = Trainer(hidden)
    by_rows: dict[int, list[float]] = {}
    gc.disable()
    for rows in (64, 32, 16, 8, 4, 2, 1):
        trainer.run(0, rows, 2, False)
        by_rows[rows] = [
            timed(lambda e=e, r=rows: trainer.run(e, r, STEPS_PER_EPOCH, False), None) / STEPS_PER_EPOCH
            for e in range(epochs)
        ]
    gc.enable()
    return {"step_seconds_by_rows": by_rows}


JOBS = {"steps": steps_job, "messages": messages_job, "compute": compute_job}


# ------------------------------------------------------------------------------------------ the coordinator


def launch(job: str, processes: int, epochs: int, hidden: int) -> dict:
    """Run `job` in a fresh world of `processes` ranks; rank 0's JSON result."""
    environment = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, str(HERE), "--job", job, "--epochs", str(epochs), "--hidden", str(hidden)]
    if processes > 1:
        command = [str(Path(sys.executable).parent / "mpiexec"), "-n", str(processes), *command]
    output = subprocess.run(command, env=environment, capture_output=True, text=True, check=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def ring_seconds(ranks: int, message_bytes: float, alpha: float, beta: float) -> float:
    return 2 * (ranks - 1) * alpha + 2 * (ranks - 1) / ranks * message_bytes * beta


def fit(times_by_bytes: dict[int, float]) -> tuple[float, float]:
    """a and b of T2(m) = a + b m, least squares on relative error, over messages up to `FIT_UP_TO_BYTES`."""
    sizes = np.array(sorted(m for m in times_by_bytes if m <= FIT_UP_TO_BYTES), float)
    times = np.array([times_by_bytes[int(m)] for m in sizes])
    design = np.stack([np.ones_like(sizes), sizes], axis=1) / times[:, None]
    (a, b), *_ = np.linalg.lstsq(design, np.ones_like(times), rcond=None)
    return float(a), float(b)


def summary(samples: list[float]) -> str:
    return f"{min(samples) * 1e3:7.3f} ms (median {statistics.median(samples) * 1e3:7.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="launches of each world size, alternated")
    parser.add_argument("--epochs", type=int, default=3, help="timed epochs per launch")
    parser.add_argument("--hidden", type=int, default=128, help="hidden units (examples/train.dl: 128)")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--job", choices=sorted(JOBS), help=argparse.SUPPRESS)  # inside a rank
    options = parser.parse_args()
    if options.job:
        result = JOBS[options.job](options.epochs, options.hidden)
        if os.environ.get("PMI_RANK", "0") == "0":
            print(json.dumps(result))
        return
    steps: dict[int, list[dict]] = {1: [], 2: []}
    for _ in range(options.repeats):
        for processes in (1, 2):
            steps[processes].append(launch("steps", processes, options.epochs, options.hidden))
    messages = launch("messages", 2, options.epochs, options.hidden)["allreduce_seconds_by_bytes"]
    messages = {int(size): seconds for size, seconds in messages.items()}
    compute = launch("compute", 1, options.epochs, options.hidden)["step_seconds_by_rows"]
    compute = {int(rows): samples for rows, samples in compute.items()}
    report(steps, messages, compute, gradient_bytes(options.hidden), options.json)


def report(
    steps: dict, messages: dict[int, float], compute: dict[int, list[float]], gradient: int, json_path: str | None
) -> None:
    one = [t for run in steps[1] for t in run["step"]]
    two = [t for run in steps[2] for t in run["step"]]
    without = [t for run in steps[2] for t in run["step_without_allreduce"]]
    alone = [t for run in steps[2] for t in run["allreduce"]]
    machine = platform.processor() or platform.machine()
    print(f"machine: {machine}, nproc {os.cpu_count()}, Python {platform.python_version()}")
    print("\ntime per training step (global batch 64), min over all epochs (median):")
    print(f"  1 process                         {summary(one)}")
    print(f"  2 processes (32 rows each)        {summary(two)}")
    print(f"  2 processes, no all-reduce        {summary(without)}")
    print(f"  allreduce_mean of the gradient    {summary(alone)}  ({gradient:,} bytes)")
    medians = statistics.median(one) / statistics.median(two)
    print(f"  speed-up of 2 over 1: {min(one) / min(two):.2f} (medians {medians:.2f})")
    share = (statistics.median(two) - statistics.median(without)) / statistics.median(two)
    print(
        f"  all-reduce share of a 2-process step: {share:.0%} (step with it minus without, medians);"
        f" {statistics.median(alone) / statistics.median(two):.0%} (the all-reduce alone over the step)"
    )
    a, b = fit(messages)
    alpha, beta = a / 2, b
    print(
        f"\nMPI Allreduce (f32, in place), 2 ranks, median per call; T2(m) = a + b m fitted to {FIT_UP_TO_BYTES:,} B:"
    )
    for size, seconds in sorted(messages.items()):
        print(f"  {size:>10,} B  {seconds * 1e6:10.2f} us   fit {(a + b * size) * 1e6:10.2f} us")
    print(f"  alpha = {alpha * 1e6:.2f} us, beta = {beta * 1e9:.4f} ns/byte ({1 / beta / 1e9:.2f} GB/s)")
    print("\nprojection, global batch 64: compute of a step on 64/N rows (measured, 1 process) + allreduce_mean")
    print(f"  (ring model: a 48-byte check and the {gradient:,}-byte gradient); speed-up over the projection's N = 1")
    print("     N   rows   compute    all-reduce (fit)   step    speed-up   all-reduce (10 GbE, assumed)")
    projection = []
    for ranks in (1, 2, *RANKS):
        rows = GLOBAL_BATCH // ranks
        work = statistics.median(compute[rows])
        fitted = ring_seconds(ranks, 48, alpha, beta) + ring_seconds(ranks, gradient, alpha, beta)
        network = ring_seconds(ranks, 48, *ASSUMED_NETWORK) + ring_seconds(ranks, gradient, *ASSUMED_NETWORK)
        step = work + fitted
        speedup = (projection[0]["compute"] if projection else step) / step
        projection.append({"ranks": ranks, "rows": rows, "compute": work, "allreduce": fitted, "network": network})
        print(
            f"  {ranks:4d} {rows:6d} {work * 1e3:8.3f} ms {fitted * 1e3:10.3f} ms {step * 1e3:12.3f} ms"
            f" {speedup:8.2f} {network * 1e3:14.3f} ms"
        )
    if json_path:
        results = {
            "steps": steps,
            "messages": messages,
            "compute": compute,
            "alpha": alpha,
            "beta": beta,
            "projection": projection,
        }
        Path(json_path).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
