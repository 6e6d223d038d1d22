"""Time per epoch of training an MLP on the shipped digits: DL (interpreter and LLVM) beside PyTorch (eager and
torch.compile) and JAX (a jitted step, and a whole epoch as one jitted `lax.scan`).

    python bench/train_mlp.py [--hidden 128] [--batch 64] [--epochs 30] [--threads 1] [--quick]
                              [--json FILE] [--profile {interp,llvm}]

The model is examples/train.dl's: a 64-H-10 perceptron (`relu` hidden layer, H = `--hidden`, 128 in
train.dl), cross-entropy loss, Adam with lr 0.003, batches of `--batch` (64), trained on `digits()` split
80/20 by `data.split(digits(), 0.8, 0)` (1,437 training and 360 test images); the last partial batch of
an epoch is dropped.

Every system trains the same model on the same data: the same initial weights (`nn.kaiming` for the
weights, zeros for the biases, made by DL and copied into the others, transposed for `torch.nn.Linear`),
and the batches in the same order: epoch `e` shuffles the training set with
`default_rng(e).permutation(1437)`, which is what DL's `batches(..., shuffle=true, seed=e)` draws, and the
peers index their arrays with that permutation. So their losses and test accuracies agree up to float32
rounding (the report shows them).

- DL is called the way a host embeds it: the module below is loaded, checked and differentiated once
  (`pipeline.prepare`) and prepared on a backend once (`pipeline.on_backend`: `llvm` compiles what it can);
  its function `epoch(params, state, x, y, seed)` runs one whole epoch (the `for` loop over `batches`,
  `value_and_grad`, `optim.adam`) and is called once per epoch. The parameters and Adam's state cross the
  boundary as tuples of numpy arrays.
- PyTorch eager is the idiomatic loop: `nn.Sequential` of two `Linear` layers, `torch.optim.Adam`, and per
  step `zero_grad`, `cross_entropy`, `backward`, `step`, `loss.item()`. torch.compile (Inductor) is the
  same loop with the loss (the model's forward, and so through AOTAutograd its backward) and the
  optimizer's step compiled, as PyTorch's tutorials do it.
- JAX: the same step written with `jax.value_and_grad` and Adam by hand (torch's formulas, as DL's
  `optim.adam`); "JAX jit" calls one jitted step per batch from Python; "JAX scan" jits a whole epoch, the
  shuffle and the steps as one `lax.scan`.

Timing (bench/fair.py): threads pinned equal (`--threads`, default 1). Every system first trains one
untimed epoch (seed 0), which is where it compiles; that first epoch is reported apart, build and
compilation included. Then `--epochs` epochs, the systems alternating epoch by epoch, each epoch timed
alone; min and median ms per epoch, the CPU time per wall time, and DL's ratio to each peer.

`--profile interp|llvm` trains DL alone on that backend under cProfile and prints the functions with the
most own time.

Not a test: nothing here is collected by pytest.
"""

from __future__ import annotations

import fair  # first: it pins the threads before numpy, torch and jax load

THREADS = fair.pin_threads()

import argparse  # noqa: E402
import cProfile  # noqa: E402
import io  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import pstats  # noqa: E402
from abc import ABC, abstractmethod  # noqa: E402
from functools import partial  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
from dl import pipeline  # noqa: E402
from dl.interp.run import run_guarded  # noqa: E402

torch = fair.load_torch(THREADS)
jax = fair.load_jax()

INPUTS, CLASSES = 64, 10
LR = 0.003

SOURCE = """
import nn
import optim
import data

struct MLP {{ w1: f32[{inputs}, {hidden}], b1: f32[{hidden}], w2: f32[{hidden}, {classes}], b2: f32[{classes}] }}

fn forward(m: MLP, x: f32[B, {inputs}]) -> f32[B, {classes}] {{
    let h = nn.relu(nn.linear(x, m.w1, m.b1))
    return nn.linear(h, m.w2, m.b2)
}}

fn loss(m: MLP, x: f32[B, {inputs}], y: i64[B]) -> f32 {{
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
        w1: nn.kaiming({inputs}, {hidden}, 1), b1: zeros({hidden}),
        w2: nn.kaiming({hidden}, {classes}, 2), b2: zeros({classes}),
    }}
    let p = leaves(m)
    return (data.split(digits(), 0.8, 0), p, (zeros_like(p), zeros_like(p), 0))
}}

# One epoch: every full batch of the shuffled training set, one Adam step each.
fn epoch(p, s, train_x: f32[N, {inputs}], train_y: i64[N], seed: i64) {{
    let m = model(p)
    let (m1, v1, steps) = s
    let state = (model(m1), model(v1), steps)
    let total = 0.0
    let count = 0
    for (x, y) in batches((train_x, train_y), {batch}, shuffle=true, seed=seed) {{
        let (value, g) = value_and_grad(loss)(m, x, y)
        (m, state) = optim.adam(m, g, state, lr={lr})
        total += value
        count += 1
    }}
    let (m2, v2, steps2) = state
    return (leaves(m), (leaves(m2), leaves(v2), steps2), total / float(count))
}}

fn evaluate(p, x: f32[N, {inputs}], y: i64[N]) -> f32 {{
    return nn.accuracy(forward(model(p), x), y)
}}
"""

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_train_mlp.dl")


class Problem:
    """The data, the initial parameters and Adam state (made by DL's `setup`), the width and the batch."""

    def __init__(self, hidden: int, batch: int) -> None:
        self.hidden, self.batch = hidden, batch
        self.source = SOURCE.format(inputs=INPUTS, hidden=hidden, classes=CLASSES, batch=batch, lr=LR)
        _, typed = pipeline.prepare(pipeline.load(PATH, self.source), (("setup", ()),))
        (train, test), self.params, self.state = pipeline.on_backend("interp", typed).call("setup", [])
        self.train = tuple(np.asarray(t) for t in train)
        self.test = tuple(np.asarray(t) for t in test)
        self.steps = len(self.train[0]) // batch

    def order(self, seed: int) -> np.ndarray:
        """Epoch `seed`'s shuffle: what DL's `batches(..., shuffle=true, seed=seed)` draws."""
        return np.random.default_rng(seed).permutation(len(self.train[0]))


class Trainer(ABC):
    """A system training the model: each call trains the next epoch (seeds 0, 1, 2, ...) and keeps its loss."""

    def __init__(self) -> None:
        self.seed, self.loss = 0, math.nan

    def __call__(self) -> None:
        self.loss = self.epoch(self.seed)
        self.seed += 1

    @abstractmethod
    def epoch(self, seed: int) -> float:
        """Train one epoch, shuffled by `seed`; the mean loss over its steps."""

    @abstractmethod
    def accuracy(self) -> float:
        """Accuracy on the test set."""


# ------------------------------------------------------------------------------------------ DL


class DLTrainer(Trainer):
    """The module's `epoch` and `evaluate` prepared on one backend."""

    def __init__(self, problem: Problem, backend: str) -> None:
        super().__init__()
        self.problem, self.params, self.state = problem, problem.params, problem.state
        types = (
            pipeline.value_type(problem.params),
            pipeline.value_type(problem.state),
            *(pipeline.value_type(t) for t in problem.train),
            pipeline.value_type(0),
        )
        test_types = (pipeline.value_type(problem.params), *(pipeline.value_type(t) for t in problem.test))
        calls = (("epoch", types), ("evaluate", test_types))
        _, typed = pipeline.prepare(pipeline.load(PATH, problem.source), calls)
        self.prepared = pipeline.on_backend(backend, typed, cache=False)

    def epoch(self, seed: int) -> float:
        self.params, self.state, loss = self.prepared.call(
            "epoch", [self.params, self.state, *self.problem.train, seed]
        )
        return float(loss)

    def accuracy(self) -> float:
        return float(self.prepared.call("evaluate", [self.params, *self.problem.test]))


# ------------------------------------------------------------------------------------------ PyTorch


class TorchTrainer(Trainer):
    """The idiomatic eager loop; `compiled`: its loss and optimizer step under torch.compile (Inductor)."""

    def __init__(self, problem: Problem, compiled: bool) -> None:
        super().__init__()
        self.problem = problem
        self.model = torch.nn.Sequential(
            torch.nn.Linear(INPUTS, problem.hidden), torch.nn.ReLU(), torch.nn.Linear(problem.hidden, CLASSES)
        )
        w1, b1, w2, b2 = (torch.from_numpy(np.asarray(p)) for p in problem.params)
        with torch.no_grad():  # DL stores a weight [in, out], torch [out, in]
            for layer, weight, bias in ((self.model[0], w1, b1), (self.model[2], w2, b2)):
                layer.weight.copy_(weight.T)
                layer.bias.copy_(bias)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=LR)
        self.loss_of = self.objective
        self.step = self.optimizer.step
        if compiled:
            self.loss_of = torch.compile(self.objective)
            self.step = torch.compile(self.optimizer.step)
        self.train = tuple(torch.from_numpy(t) for t in problem.train)
        self.test = tuple(torch.from_numpy(t) for t in problem.test)

    def objective(self, x, y):
        return torch.nn.functional.cross_entropy(self.model(x), y)

    def epoch(self, seed: int) -> float:
        order = torch.from_numpy(self.problem.order(seed))
        x, y = (t[order] for t in self.train)
        batch, total = self.problem.batch, 0.0
        for start in range(0, self.problem.steps * batch, batch):
            self.optimizer.zero_grad()
            loss = self.loss_of(x[start : start + batch], y[start : start + batch])
            loss.backward()
            self.step()
            total += loss.item()
        return total / self.problem.steps

    def accuracy(self) -> float:
        x, y = self.test
        with torch.no_grad():
            return float((self.model(x).argmax(dim=1) == y).float().mean())


# ------------------------------------------------------------------------------------------ JAX


def jax_forward(params, x):
    w1, b1, w2, b2 = params
    return jax.numpy.maximum(x @ w1 + b1, 0.0) @ w2 + b2


def jax_loss(params, x, y):
    logits = jax_forward(params, x)
    return -jax.numpy.mean(jax.numpy.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))


def jax_step(params, state, x, y):
    """One step: the loss's value and gradient, then Adam."""
    value, grads = jax.value_and_grad(jax_loss)(params, x, y)
    params, state = fair.jax_adam(params, grads, state, LR)
    return params, state, value


def jax_shuffle(x, y, order, steps: int, batch: int):
    """The epoch's full batches, in `order`: [steps, batch, ...]."""
    used = order[: steps * batch]
    return x[used].reshape(steps, batch, -1), y[used].reshape(steps, batch)


class JaxTrainer(Trainer):
    """`scan`: a whole epoch (shuffle and steps, one `lax.scan`) as one jitted call; otherwise one jitted
    call per step from Python (the shuffle jitted apart)."""

    def __init__(self, problem: Problem, scan: bool) -> None:
        super().__init__()
        self.problem, self.scan = problem, scan
        jnp = jax.numpy
        self.params = tuple(jnp.asarray(p) for p in problem.params)
        self.state = fair.jax_adam_state(self.params)
        self.train = tuple(jnp.asarray(t) for t in problem.train)
        self.test = tuple(jnp.asarray(t) for t in problem.test)
        shuffle = partial(jax_shuffle, steps=problem.steps, batch=problem.batch)
        self.shuffle = jax.jit(shuffle)
        self.jit_step = jax.jit(self.accumulating_step)
        self.jit_epoch = jax.jit(lambda params, state, x, y, order: self.scanned(params, state, *shuffle(x, y, order)))

    @staticmethod
    def accumulating_step(params, state, total, xs, ys, index):
        params, state, value = jax_step(params, state, xs[index], ys[index])
        return params, state, total + value

    @staticmethod
    def scanned(params, state, xs, ys):
        def body(carry, batch):
            params, state, value = jax_step(*carry, *batch)
            return (params, state), value

        (params, state), values = jax.lax.scan(body, (params, state), (xs, ys))
        return params, state, jax.numpy.mean(values)

    def epoch(self, seed: int) -> float:
        order = self.problem.order(seed)
        if self.scan:
            self.params, self.state, loss = self.jit_epoch(self.params, self.state, *self.train, order)
            return float(loss)
        xs, ys = self.shuffle(*self.train, order)
        total = jax.numpy.zeros((), jax.numpy.float32)
        for index in range(self.problem.steps):
            self.params, self.state, total = self.jit_step(self.params, self.state, total, xs, ys, index)
        return float(total) / self.problem.steps

    def accuracy(self) -> float:
        x, y = self.test
        return float(jax.numpy.mean(jax.numpy.argmax(jax_forward(self.params, x), axis=1) == y))


# ------------------------------------------------------------------------------------------ measuring


OURS = ["DL interp", "DL llvm"]


def builders(problem: Problem) -> dict[str, Any]:
    """Every installed system by name, as a function that builds its trainer."""
    systems: dict[str, Any] = {
        "DL interp": lambda: DLTrainer(problem, "interp"),
        "DL llvm": lambda: DLTrainer(problem, "llvm"),
    }
    if torch is not None:
        systems["torch eager"] = lambda: TorchTrainer(problem, compiled=False)
        systems["torch.compile"] = lambda: TorchTrainer(problem, compiled=True)
    if jax is not None:
        systems["JAX jit"] = lambda: JaxTrainer(problem, scan=False)
        systems["JAX scan"] = lambda: JaxTrainer(problem, scan=True)
    return systems


def measure(problem: Problem, epochs: int) -> dict[str, Any]:
    compile_times: dict[str, float] = {}
    trainers = {}
    for name, build in builders(problem).items():
        trainer = fair.first_call(name, build, compile_times, may_fail=name == "torch.compile")  # epoch 0: compiles
        if trainer is not None:
            trainers[name] = trainer
    samples = fair.alternate(trainers, epochs)
    outcomes = {name: (trainer.loss, trainer.accuracy()) for name, trainer in trainers.items()}
    return {"samples": samples, "compile_times": compile_times, "outcomes": outcomes}


def outcome_table(outcomes: dict[str, tuple[float, float]]) -> str:
    lines = ["| system | final train loss | test accuracy |", "|---|---:|---:|"]
    lines += [f"| {name} | {loss:.4f} | {accuracy:.4f} |" for name, (loss, accuracy) in outcomes.items()]
    return "\n".join(lines)


def profile(problem: Problem, backend: str, epochs: int, top: int = 25) -> None:
    trainer = DLTrainer(problem, backend)
    trainer()  # compiles

    def train() -> None:
        for _ in range(epochs):
            trainer()

    profiler = cProfile.Profile()
    # on DL's worker thread, where its calls run (cProfile sees one thread); the calls inside run there directly
    run_guarded(lambda: profiler.runcall(train))
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    print(f"# cProfile of DL training on {backend}, {epochs} epochs (own time)")
    print(out.getvalue())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    fair.threads_option(parser)
    parser.add_argument("--hidden", type=int, default=128, help="the hidden layer's width (train.dl: 128)")
    parser.add_argument("--batch", type=int, default=64, help="rows per batch (train.dl: 64)")
    parser.add_argument("--epochs", type=int, default=30, help="timed epochs, after one untimed epoch")
    parser.add_argument("--quick", action="store_true", help="3 timed epochs (a smoke run)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--profile", choices=["interp", "llvm"], help="cProfile DL's training on a backend and exit")
    args = parser.parse_args()
    if args.quick:
        args.epochs = 3
    problem = Problem(args.hidden, args.batch)
    if args.profile:
        profile(problem, args.profile, args.epochs)
        return
    result = measure(problem, args.epochs)
    samples = result["samples"]
    print(fair.header("MLP training on digits", THREADS, torch, jax))
    print(
        f"# 64-{args.hidden}-10 relu, Adam lr {LR}, batch {args.batch} ({problem.steps} steps per epoch), "
        f"{args.epochs} epochs alternated; ms per epoch\n"
    )
    print(fair.table(samples))
    print()
    print("\n".join(fair.ratio_lines(samples, OURS)))
    print("\nFirst epoch, untimed above (building, compiling, warming up):\n")
    print(fair.compile_table(result["compile_times"]))
    print(f"\nAfter {args.epochs + 1} epochs:\n")
    print(outcome_table(result["outcomes"]))
    notes = fair.footer(samples, THREADS)
    if notes:
        print("\n" + notes)
    if args.json:
        outcomes = {name: {"loss": loss, "accuracy": accuracy} for name, (loss, accuracy) in result["outcomes"].items()}
        settings = {"threads": THREADS, "hidden": args.hidden, "batch": args.batch, "epochs": args.epochs}
        fair.write_json(
            args.json,
            {
                **settings,
                "ms_per_epoch": fair.summary(samples),
                "first_epoch_s": result["compile_times"],
                "outcomes": outcomes,
            },
        )


if __name__ == "__main__":
    main()
