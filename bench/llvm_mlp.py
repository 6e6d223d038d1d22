"""Matmul-dominated MLP training step: DL compiled (llvm) beside numpy doing the same matrix products, PyTorch
(eager and torch.compile), JAX jit and the DL interpreter, side by side in one run.

    python bench/llvm_mlp.py [--steps 10] [--repeats 5] [--batch 256] [--hidden 1024] [--threads 1] [--quick]

The model: 784 -> H -> H -> 10 with relu (H = `--hidden`, 1024), softmax cross-entropy, plain SGD (lr 0.01),
a batch of 256 (f32), the same weights everywhere. One step is the loss's value and gradient and the update.
DL runs `--steps` of them in one compiled `train` loop; numpy computes the same step by hand (`numpy step`),
and `numpy products` times the step's eight matrix products alone: the floor for anything calling the same
BLAS. PyTorch eager computes the loss, `torch.autograd.grad` and the update under `no_grad`; torch.compile
(Inductor) compiles the whole step written with `torch.func.grad_and_value`; JAX jits the step
(`jax.value_and_grad` and the update). Each timed run trains `--steps` steps from the initial weights.

Timing (bench/fair.py): threads pinned equal (`--threads`, default 1); the systems alternate, one run each
per round, for `--repeats` rounds; min and median ms per step, CPU time per wall time, DL's ratio to each.
Each system's first run (compilation included) is timed apart; its loss after `--steps` steps is reported.
"""

from __future__ import annotations

import fair  # first: it pins the threads before numpy, torch and jax load

THREADS = fair.pin_threads()

import argparse  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
from dl import pipeline  # noqa: E402
from dl.codegen import native  # noqa: E402
from dl.interp.run import compile_program, run_guarded  # noqa: E402
from dl.runtime.calls import invoke  # noqa: E402
from dl.runtime.values import StructValue  # noqa: E402

torch = fair.load_torch(THREADS)
jax = fair.load_jax()

ROOT = Path(__file__).resolve().parent.parent
LR = 0.01
OURS = ["DL llvm", "DL interp"]

SOURCE = """
import nn

struct MLP { w1: f32[784, _], b1: f32[_], w2: f32[_, _], b2: f32[_], w3: f32[_, 10], b3: f32[10] }

fn loss(m: MLP, x: f32[B, 784], y: i64[B]) -> f32 {
    let h = nn.relu(nn.linear(x, m.w1, m.b1))
    let g = nn.relu(nn.linear(h, m.w2, m.b2))
    return nn.cross_entropy(nn.linear(g, m.w3, m.b3), y)
}

fn train(m: MLP, x: f32[B, 784], y: i64[B], n: i64) -> (MLP, f32) {
    let value = 0.0
    for i in 0..n {
        let (v, g) = value_and_grad(loss)(m, x, y)
        m = tree_map(fn(p, d) => p - 0.01 * d, m, g)
        value = v
    }
    return (m, value)
}

fn main() { }
"""


def weights(hidden: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    sizes = [(784, hidden), (hidden, hidden), (hidden, 10)]
    out = []
    for fan_in, fan_out in sizes:
        out.append((rng.standard_normal((fan_in, fan_out)) * np.sqrt(2 / fan_in)).astype(np.float32))
        out.append(np.zeros(fan_out, np.float32))
    return out


def numpy_step(params: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
    """One SGD step by hand: forward, softmax cross-entropy, backward, update (in place)."""
    w1, b1, w2, b2, w3, b3 = params
    a1 = x @ w1 + b1
    h = np.maximum(a1, 0)
    a2 = h @ w2 + b2
    g = np.maximum(a2, 0)
    logits = g @ w3 + b3
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probabilities = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    batch = x.shape[0]
    value = -log_probabilities[np.arange(batch), y].mean()
    d_logits = np.exp(log_probabilities)
    d_logits[np.arange(batch), y] -= 1
    d_logits /= batch
    d_w3, d_b3 = g.T @ d_logits, d_logits.sum(axis=0)
    d_a2 = (d_logits @ w3.T) * (a2 > 0)
    d_w2, d_b2 = h.T @ d_a2, d_a2.sum(axis=0)
    d_a1 = (d_a2 @ w2.T) * (a1 > 0)
    d_w1, d_b1 = x.T @ d_a1, d_a1.sum(axis=0)
    for p, d in zip(params, (d_w1, d_b1, d_w2, d_b2, d_w3, d_b3), strict=True):
        p -= np.float32(LR) * d
    return float(value)


def numpy_products(params: list[np.ndarray], x: np.ndarray, extra: dict) -> None:
    """The step's matrix products only (the same shapes and layouts)."""
    w1, _, w2, _, w3, _ = params
    h, g, d3, d2, d1 = extra["h"], extra["g"], extra["d3"], extra["d2"], extra["d1"]
    x @ w1, h @ w2, g @ w3
    g.T @ d3, d3 @ w3.T, h.T @ d2, d2 @ w2.T, x.T @ d1


class DLTrain:
    def __init__(self, backend: str) -> None:
        path = str(ROOT / "bench" / "mlp_bench.dl")
        loaded = pipeline.load(path, SOURCE)
        program, typed = pipeline.prepare(loaded)
        bodies = native.compile_program(typed, cache=False).bodies if backend == "llvm" else None
        compiler = compile_program(program, typed, bodies)
        state = compiler.states[path]
        self.train, self.kind = state.cells["train"].value, state.structs["MLP"]

    def run(self, params: list[np.ndarray], x: np.ndarray, y: np.ndarray, n: int):
        model = StructValue(self.kind, tuple(p.copy() for p in params))
        return run_guarded(lambda: invoke(self.train, [model, x, y, n], self.train.span))


def torch_eager(params: list[np.ndarray], x: np.ndarray, y: np.ndarray, n: int) -> Callable[[], float]:
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)

    def train() -> float:
        tensors = [torch.tensor(p, requires_grad=True) for p in params]
        for _ in range(n):
            value = torch_loss(tensors, tx, ty)
            grads = torch.autograd.grad(value, tensors)
            with torch.no_grad():
                for p, d in zip(tensors, grads, strict=True):
                    p -= LR * d
        return float(value)

    return train


def torch_loss(params, x, y):
    w1, b1, w2, b2, w3, b3 = params
    h = torch.relu(x @ w1 + b1)
    g = torch.relu(h @ w2 + b2)
    return torch.nn.functional.cross_entropy(g @ w3 + b3, y)


def torch_compiled(params: list[np.ndarray], x: np.ndarray, y: np.ndarray, n: int) -> Callable[[], float]:
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)

    @torch.compile
    def step(tensors, x, y):
        grads, value = torch.func.grad_and_value(torch_loss)(tensors, x, y)
        return [p - LR * d for p, d in zip(tensors, grads, strict=True)], value

    def train() -> float:
        tensors = [torch.tensor(p) for p in params]
        for _ in range(n):
            tensors, value = step(tensors, tx, ty)
        return float(value)

    return train


def jax_loss(params, x, y):
    w1, b1, w2, b2, w3, b3 = params
    relu = jax.nn.relu
    logits = relu(relu(x @ w1 + b1) @ w2 + b2) @ w3 + b3
    return -jax.numpy.mean(jax.numpy.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))


def jax_jit(params: list[np.ndarray], x: np.ndarray, y: np.ndarray, n: int) -> Callable[[], float]:
    @jax.jit
    def step(params, x, y):
        value, grads = jax.value_and_grad(jax_loss)(params, x, y)
        return [p - LR * d for p, d in zip(params, grads, strict=True)], value

    start = [jax.numpy.asarray(p) for p in params]
    jx, jy = jax.numpy.asarray(x), jax.numpy.asarray(y)

    def train() -> float:
        tensors = start
        for _ in range(n):
            tensors, value = step(tensors, jx, jy)
        return float(value)

    return train


def builders(params: list[np.ndarray], x: np.ndarray, y: np.ndarray, n: int) -> dict[str, Callable[[], Callable]]:
    """Each installed system by name, as a function that builds its run of `n` steps (returning the loss)."""

    def dl(backend: str) -> Callable[[], float]:
        train = DLTrain(backend)
        return lambda: float(train.run(params, x, y, n)[1])

    def numpy_run() -> float:
        copies = [p.copy() for p in params]
        for _ in range(n):
            value = numpy_step(copies, x, y)
        return value

    hidden, batch = params[2].shape[0], x.shape[0]
    extra = {
        name: np.ones((batch, 10 if name == "d3" else hidden), np.float32) for name in ("h", "g", "d3", "d2", "d1")
    }

    def products_run() -> None:
        for _ in range(n):
            numpy_products(params, x, extra)

    systems: dict[str, Callable[[], Callable]] = {
        "DL llvm": lambda: dl("llvm"),
        "DL interp": lambda: dl("interp"),
        "numpy step": lambda: numpy_run,
        "numpy products": lambda: products_run,
    }
    if torch is not None:
        systems["torch eager"] = lambda: torch_eager(params, x, y, n)
        systems["torch.compile"] = lambda: torch_compiled(params, x, y, n)
    if jax is not None:
        systems["JAX jit"] = lambda: jax_jit(params, x, y, n)
    return systems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    fair.threads_option(parser)
    parser.add_argument("--steps", type=int, default=10, help="training steps per timed run")
    parser.add_argument("--repeats", type=int, default=5, help="rounds of the alternation")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--quick", action="store_true", help="2 rounds of 2 steps at hidden 256 (a smoke run)")
    options = parser.parse_args()
    if options.quick:
        options.steps, options.repeats, options.hidden = 2, 2, 256
    rng = np.random.default_rng(1)
    x = rng.standard_normal((options.batch, 784)).astype(np.float32)
    y = rng.integers(0, 10, options.batch)
    params = weights(options.hidden)
    n = options.steps

    compile_times: dict[str, float] = {}
    losses: dict[str, Any] = {}
    systems = {}
    for name, build in builders(params, x, y, n).items():
        run = fair.first_call(name, build, compile_times, losses, may_fail=name == "torch.compile")
        if run is not None:
            systems[name] = run
    samples = fair.alternate(systems, options.repeats)

    shape = f"784 -> {options.hidden} -> {options.hidden} -> 10, batch {options.batch}, SGD"
    print(fair.header(f"MLP training step ({shape})", THREADS, torch, jax))
    print(f"\n{n} steps per run, {options.repeats} rounds alternated; ms per step:\n")
    print(fair.table(samples, scale=1e3 / n))
    print()
    print("\n".join(fair.ratio_lines(samples, OURS)))
    print(
        f"\nloss after {n} steps: "
        + ", ".join(f"{name} {loss:.6f}" for name, loss in losses.items() if loss is not None)
    )
    print("\nFirst run, untimed above (building, compiling, warming up):\n")
    print(fair.compile_table(compile_times))
    notes = fair.footer(samples, THREADS)
    if notes:
        print("\n" + notes)


if __name__ == "__main__":
    main()
