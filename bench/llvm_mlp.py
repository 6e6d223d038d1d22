"""Matmul-dominated MLP training step: DL compiled (llvm) vs numpy doing the same matrix products, side by
side in one run (and PyTorch eager and the DL interpreter for reference).

The model: 784 -> 1024 -> 1024 -> 10 with relu, softmax cross-entropy, plain SGD, a batch of 256 (f32).
One step is the loss's value and gradient (`value_and_grad`, so the forward pass and the backward pass's
matrix products) and the update; DL runs `steps` of them in one compiled `train` loop. The reference is
numpy computing the same step by hand (`numpy step`), and the six matrix products of that step alone
(`numpy products`): the floor any implementation calling the same BLAS has. One thread everywhere.

Run: .venv/bin/python bench/llvm_mlp.py [--steps N] [--repeats R] [--batch B] [--hidden H]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # DL's default, before numpy loads OpenBLAS

import argparse
from pathlib import Path

import numpy as np
import torch
from dl import pipeline
from dl.codegen import native
from dl.interp.run import compile_program, run_guarded
from dl.runtime.calls import invoke
from dl.runtime.values import StructValue
from llvm_fusion import best  # bench/: the same timing as the fusion benchmark

ROOT = Path(__file__).resolve().parent.parent

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
        p -= np.float32(0.01) * d
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=1024)
    options = parser.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((options.batch, 784)).astype(np.float32)
    y = rng.integers(0, 10, options.batch)
    params = weights(options.hidden)
    n = options.steps

    times, losses = {}, {}
    for backend in ("llvm", "interp"):
        dl = DLTrain(backend)
        dl.run(params, x, y, 1)  # compiles, warms up
        times[backend] = best(lambda dl=dl: dl.run(params, x, y, n), options.repeats) / n
        losses[backend] = float(dl.run(params, x, y, n)[1])

    def numpy_run() -> None:
        copies = [p.copy() for p in params]
        for _ in range(n):
            numpy_step(copies, x, y)

    times["numpy"] = best(numpy_run, options.repeats) / n
    copies = [p.copy() for p in params]
    for _ in range(n):
        losses["numpy"] = numpy_step(copies, x, y)
    hidden = options.hidden
    extra = {
        "h": np.ones((options.batch, hidden), np.float32),
        "g": np.ones((options.batch, hidden), np.float32),
        "d3": np.ones((options.batch, 10), np.float32),
        "d2": np.ones((options.batch, hidden), np.float32),
        "d1": np.ones((options.batch, hidden), np.float32),
    }
    times["products"] = best(lambda: [numpy_products(params, x, extra) for _ in range(n)], options.repeats) / n

    tensors = [torch.tensor(p, requires_grad=True) for p in params]
    tx, ty = torch.tensor(x), torch.tensor(y)

    def torch_run() -> None:
        for _ in range(n):
            w1, b1, w2, b2, w3, b3 = tensors
            h = torch.relu(tx @ w1 + b1)
            g = torch.relu(h @ w2 + b2)
            value = torch.nn.functional.cross_entropy(g @ w3 + b3, ty)
            grads = torch.autograd.grad(value, tensors)
            with torch.no_grad():
                for p, d in zip(tensors, grads, strict=True):
                    p -= 0.01 * d

    times["torch"] = best(torch_run, options.repeats) / n

    shape = f"784 -> {hidden} -> {hidden} -> 10, batch {options.batch}, SGD"
    print(f"MLP training step ({shape}), ms per step, best of {options.repeats}:")
    print(f"  DL llvm          {times['llvm'] * 1e3:8.3f}   loss after {n} steps {losses['llvm']:.6f}")
    print(f"  numpy step       {times['numpy'] * 1e3:8.3f}   loss after {n} steps {losses['numpy']:.6f}")
    print(f"  numpy products   {times['products'] * 1e3:8.3f}   (the step's 8 matrix products alone)")
    print(f"  PyTorch eager    {times['torch'] * 1e3:8.3f}")
    print(f"  DL interp        {times['interp'] * 1e3:8.3f}   loss after {n} steps {losses['interp']:.6f}")
    print(
        f"  DL llvm / numpy products: {times['llvm'] / times['products']:.3f}   "
        f"DL llvm / numpy step: {times['llvm'] / times['numpy']:.3f}   "
        f"DL llvm / PyTorch: {times['llvm'] / times['torch']:.3f}"
    )


if __name__ == "__main__":
    main()
