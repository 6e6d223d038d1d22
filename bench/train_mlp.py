"""Time per epoch of training an MLP on the shipped digits: DL on the interpreter beside PyTorch eager (CPU).

    python bench/train_mlp.py [--repeats 3] [--epochs 20] [--threads N] [--quick] [--json FILE] [--profile]

The model is examples/train.dl's: a 64-128-10 perceptron (`relu` hidden layer), cross-entropy
loss, Adam with lr 0.003, batches of 64, trained on `digits()` split 80/20 by
`data.split(digits(), 0.8, 0)` (1,437 training and 360 test images): 22 steps per epoch, the
last partial batch (29 images) dropped.

Both systems start from the same weights (`nn.kaiming` for the weights, zeros for the biases,
made by DL and copied into the `torch.nn.Linear` layers, transposed) and see the batches in the
same order: epoch `e` shuffles the training set with `default_rng(e).permutation(1437)`, which
is what DL's `batches(..., shuffle=true, seed=e)` draws, and torch indexes its tensors with that
permutation. So the two train the same model on the same data, and their losses and test
accuracies agree up to float32 rounding.

DL is called the way a host embeds it: the module below is loaded, checked and differentiated
once (`pipeline.prepare`, which replaces `value_and_grad(loss)` by generated DL functions) and
compiled once; its function `epoch(params, state, x, y, seed)` runs one whole epoch (the `for`
loop over `batches`, `value_and_grad`, `optim.adam`) in DL and is called through `invoke` once
per epoch. The parameters and Adam's state cross the boundary as tuples of numpy arrays (the
host has no struct values); `epoch` builds the `MLP` struct from them and takes it apart again,
once per epoch.

PyTorch (CPU, eager) is the idiomatic loop: a `torch.nn.Module` of two `Linear` layers,
`torch.optim.Adam(lr=0.003)`, and per step `zero_grad`, `cross_entropy`, `backward`, `step`;
the epoch's mean loss is accumulated with `loss.item()` (DL adds the loss up too).

Timing: one run trains both systems for `--epochs` epochs, interleaved epoch by epoch (DL's epoch
`e`, then torch's epoch `e`), each epoch timed alone (`time.perf_counter`, gc off), after one
untimed warm-up epoch each on a throw-away copy of the model. `--repeats` runs start from the same
weights again; the time per epoch reported is the best over all runs and epochs (and the median
beside it). The ratio is DL's best over torch's best. The final training loss and test accuracy of
each system come from the last run.

Threads: by default DL's numpy uses one OpenBLAS thread, as under `dlrun` (the `dl` package
sets `OPENBLAS_NUM_THREADS=1` before numpy loads, unless the user set it), and torch uses as
many threads as it chooses (one per core). `--threads N` runs the script again with
`OPENBLAS_NUM_THREADS=N` and `OMP_NUM_THREADS=N` set (they are read when numpy and torch load)
and calls `torch.set_num_threads(N)`: on this model's small matrices a second thread buys
little, and on a machine shared with other jobs, threads that spin-wait make epochs erratic.

`--profile` trains DL alone under cProfile and prints the functions with the most own time.

Not a test: nothing here is collected by pytest.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import platform
import pstats
import statistics
import sys
import time
from typing import Any

import numpy as np
import torch
from dl import pipeline
from dl.interp.run import compile_program
from dl.runtime.calls import invoke

INPUTS, HIDDEN, CLASSES = 64, 128, 10
BATCH = 64
LR = 0.003
EPOCHS = 20

SOURCE = f"""
import nn
import optim
import data

struct MLP {{ w1: f32[{INPUTS}, {HIDDEN}], b1: f32[{HIDDEN}], w2: f32[{HIDDEN}, {CLASSES}], b2: f32[{CLASSES}] }}

fn forward(m: MLP, x: f32[B, {INPUTS}]) -> f32[B, {CLASSES}] {{
    let h = nn.relu(nn.linear(x, m.w1, m.b1))
    return nn.linear(h, m.w2, m.b2)
}}

fn loss(m: MLP, x: f32[B, {INPUTS}], y: i64[B]) -> f32 {{
    return nn.cross_entropy(forward(m, x), y)
}}

fn model(p) {{
    let (w1, b1, w2, b2) = p
    return MLP {{ w1: w1, b1: b1, w2: w2, b2: b2 }}
}}

fn leaves(m: MLP) {{
    return (m.w1, m.b1, m.w2, m.b2)
}}

# The split, and the initial parameters and Adam state as tuples (what the host can hold).
fn setup() {{
    let m = MLP {{
        w1: nn.kaiming({INPUTS}, {HIDDEN}, 1), b1: zeros({HIDDEN}),
        w2: nn.kaiming({HIDDEN}, {CLASSES}, 2), b2: zeros({CLASSES}),
    }}
    let p = leaves(m)
    return (data.split(digits(), 0.8, 0), p, (zeros_like(p), zeros_like(p), 0))
}}

# One epoch: every full batch of the shuffled training set, one Adam step each.
fn epoch(p, s, train_x: f32[N, {INPUTS}], train_y: i64[N], seed: i64) {{
    let m = model(p)
    let (m1, v1, steps) = s
    let state = (model(m1), model(v1), steps)
    let total = 0.0
    let count = 0
    for (x, y) in batches((train_x, train_y), {BATCH}, shuffle=true, seed=seed) {{
        let (value, g) = value_and_grad(loss)(m, x, y)
        (m, state) = optim.adam(m, g, state, lr={LR})
        total += value
        count += 1
    }}
    let (m2, v2, steps2) = state
    return (leaves(m), (leaves(m2), leaves(v2), steps2), total / float(count))
}}

fn evaluate(p, x: f32[N, {INPUTS}], y: i64[N]) -> f32 {{
    return nn.accuracy(forward(model(p), x), y)
}}
"""


# ------------------------------------------------------------------------------------------ DL


class DL:
    """The compiled module: `setup()` once, then `epoch(...)` per epoch and `evaluate(...)`."""

    def __init__(self) -> None:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_train_mlp.dl")
        program = pipeline.load(path, SOURCE)
        program, typed = pipeline.prepare(program, (("setup", ()),))
        setup = compile_program(program, typed).states[program.entry].cells["setup"].value
        (train, test), self.params, self.state = invoke(setup, [], setup.span)
        self.train = tuple(np.asarray(t) for t in train)
        self.test = tuple(np.asarray(t) for t in test)
        types = (
            pipeline.value_type(self.params),
            pipeline.value_type(self.state),
            *(pipeline.value_type(t) for t in self.train),
            pipeline.value_type(0),
        )
        test_types = (pipeline.value_type(self.params), *(pipeline.value_type(t) for t in self.test))
        program = pipeline.load(path, SOURCE)
        program, typed = pipeline.prepare(program, (("epoch", types), ("evaluate", test_types)))
        cells = compile_program(program, typed).states[program.entry].cells
        self.epoch_function = cells["epoch"].value
        self.evaluate_function = cells["evaluate"].value

    def epoch(self, params: tuple, state: tuple, seed: int) -> tuple[tuple, tuple, float]:
        function = self.epoch_function
        return invoke(function, [params, state, *self.train, seed], function.span)

    def accuracy(self, params: tuple) -> float:
        function = self.evaluate_function
        return float(invoke(function, [params, *self.test], function.span))


# ------------------------------------------------------------------------------------------ torch


class TorchMLP(torch.nn.Module):
    def __init__(self, params: tuple) -> None:
        super().__init__()
        self.hidden = torch.nn.Linear(INPUTS, HIDDEN)
        self.out = torch.nn.Linear(HIDDEN, CLASSES)
        w1, b1, w2, b2 = (torch.tensor(np.asarray(p)) for p in params)
        with torch.no_grad():  # DL stores a weight [in, out], torch [out, in]
            self.hidden.weight.copy_(w1.T)
            self.hidden.bias.copy_(b1)
            self.out.weight.copy_(w2.T)
            self.out.bias.copy_(b2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(x)))


class Torch:
    def __init__(self, dl: DL) -> None:
        self.train = tuple(torch.from_numpy(t) for t in dl.train)
        self.test = tuple(torch.from_numpy(t) for t in dl.test)

    def model(self, params: tuple) -> tuple[TorchMLP, torch.optim.Optimizer]:
        model = TorchMLP(params)
        return model, torch.optim.Adam(model.parameters(), lr=LR)

    def epoch(self, model: TorchMLP, optimizer: torch.optim.Optimizer, seed: int) -> float:
        x, y = self.train
        count = len(x)
        order = torch.from_numpy(np.random.default_rng(seed).permutation(count))  # DL's `batches` order
        x, y = x[order], y[order]
        total = 0.0
        steps = 0
        for start in range(0, count - BATCH + 1, BATCH):  # the last partial batch is dropped
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x[start : start + BATCH]), y[start : start + BATCH])
            loss.backward()
            optimizer.step()
            total += loss.item()
            steps += 1
        return total / steps

    def accuracy(self, model: TorchMLP) -> float:
        x, y = self.test
        with torch.no_grad():
            return float((model(x).argmax(dim=1) == y).float().mean())


# ------------------------------------------------------------------------------------------ timing


def measure(repeats: int, epochs: int) -> dict[str, Any]:
    dl = DL()
    tor = Torch(dl)
    # Warm-up: one untimed epoch each, on a copy of the model that is then thrown away.
    dl.epoch(dl.params, dl.state, 0)
    model, optimizer = tor.model(dl.params)
    tor.epoch(model, optimizer, 0)
    times: dict[str, list[float]] = {"dl": [], "torch": []}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeats):
            params, state = dl.params, dl.state
            model, optimizer = tor.model(dl.params)
            for seed in range(epochs):
                start = time.perf_counter()
                params, state, dl_loss = dl.epoch(params, state, seed)
                times["dl"].append(time.perf_counter() - start)
                start = time.perf_counter()
                torch_loss = tor.epoch(model, optimizer, seed)
                times["torch"].append(time.perf_counter() - start)
            if sys.stderr.isatty():
                print(f"  run done: DL loss {float(dl_loss):.4f}, torch {torch_loss:.4f}", file=sys.stderr, flush=True)
    finally:
        if gc_was_enabled:
            gc.enable()
    return {
        "dl_best_ms": min(times["dl"]) * 1e3,
        "dl_median_ms": statistics.median(times["dl"]) * 1e3,
        "torch_best_ms": min(times["torch"]) * 1e3,
        "torch_median_ms": statistics.median(times["torch"]) * 1e3,
        "dl_loss": float(dl_loss),
        "torch_loss": torch_loss,
        "dl_accuracy": dl.accuracy(params),
        "torch_accuracy": tor.accuracy(model),
        "epochs_timed": len(times["dl"]),
        "steps_per_epoch": len(dl.train[0]) // BATCH,
    }


def profile(epochs: int, top: int = 25) -> None:
    dl = DL()
    dl.epoch(dl.params, dl.state, 0)
    params, state = dl.params, dl.state
    profiler = cProfile.Profile()
    profiler.enable()
    for seed in range(epochs):
        params, state, _ = dl.epoch(params, state, seed)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    print(f"# cProfile of DL training, {epochs} epochs (own time)")
    print(out.getvalue())


# ------------------------------------------------------------------------------------------ report


def machine() -> str:
    blas = os.environ.get("OPENBLAS_NUM_THREADS", "default")
    return (
        f"{platform.machine()}, nproc={os.cpu_count()}, Python {platform.python_version()}, "
        f"numpy {np.__version__} (OpenBLAS threads: {blas}), torch {torch.__version__} "
        f"(threads={torch.get_num_threads()})"
    )


def table(result: dict[str, Any]) -> str:
    ratio = result["dl_best_ms"] / result["torch_best_ms"]
    median_ratio = result["dl_median_ms"] / result["torch_median_ms"]
    return "\n".join(
        [
            "| system | best ms/epoch | median ms/epoch | final train loss | test accuracy |",
            "|---|---:|---:|---:|---:|",
            f"| DL (interpreter) | {result['dl_best_ms']:.1f} | {result['dl_median_ms']:.1f} "
            f"| {result['dl_loss']:.4f} | {result['dl_accuracy']:.4f} |",
            f"| PyTorch eager (CPU) | {result['torch_best_ms']:.1f} | {result['torch_median_ms']:.1f} "
            f"| {result['torch_loss']:.4f} | {result['torch_accuracy']:.4f} |",
            f"| DL / torch | {ratio:.2f} | {median_ratio:.2f} | | |",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="training runs; the best epoch time is kept")
    parser.add_argument("--epochs", type=int, default=EPOCHS, help="epochs per training run")
    parser.add_argument("--threads", type=int, help="numpy's and torch's threads (default: their own choice)")
    parser.add_argument("--quick", action="store_true", help="one run of 3 epochs (a smoke run)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--profile", action="store_true", help="cProfile DL's training and exit")
    args = parser.parse_args()
    if args.threads is None and os.environ.get("OPENBLAS_NUM_THREADS") != "1":
        # as `dlrun` runs: dl sets one OpenBLAS thread before numpy loads (torch keeps its own threads)
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "OPENBLAS_NUM_THREADS": "1"})
    if args.threads is not None:
        count = str(args.threads)
        if os.environ.get("OPENBLAS_NUM_THREADS") != count or os.environ.get("OMP_NUM_THREADS") != count:
            # numpy and torch read these when they load: run again with them set
            environment = {**os.environ, "OPENBLAS_NUM_THREADS": count, "OMP_NUM_THREADS": count}
            os.execve(sys.executable, [sys.executable, *sys.argv], environment)
        torch.set_num_threads(args.threads)
    if args.quick:
        args.repeats, args.epochs = 1, 3
    if args.profile:
        profile(args.epochs)
        return
    result = measure(args.repeats, args.epochs)
    print(f"# MLP training on digits — {machine()}")
    print(
        f"# 64-{HIDDEN}-10 relu, Adam lr {LR}, batch {BATCH} ({result['steps_per_epoch']} steps per epoch), "
        f"{args.epochs} epochs x {args.repeats} runs, interleaved; ms per epoch\n"
    )
    print(table(result))
    ratio = result["dl_best_ms"] / result["torch_best_ms"]
    verdict = "met" if ratio <= 1.0 else "within the 1.5x limit" if ratio <= 1.5 else "NOT met"
    print(f"\nDL/torch {ratio:.2f} -> goal <= 1.0 (at most 1.5): {verdict}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            settings = {"machine": machine(), "repeats": args.repeats, "epochs": args.epochs}
            json.dump({**settings, **result}, handle, indent=2)


if __name__ == "__main__":
    main()
