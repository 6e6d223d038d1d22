"""char-RNN training step, DL compiled (llvm) vs PyTorch eager vs DL interpreted, side by side in one run.

The model and step are examples/charrnn.dl's: bytes through a 256x16 embedding into an LSTM cell (hidden
64, PyTorch's parameter layout), a 64 -> 256 output layer, cross-entropy over a chunk of 16 steps of 16
parallel streams, unrolled by a DL `for` loop; one step is the loss's value and gradient
(`value_and_grad`, reverse mode through the time loop, its states kept on a tape) and an Adam update.
PyTorch does the same with nn.functional ops and an LSTMCell-style Python loop, autograd and
torch.optim.Adam, from the same weights. One thread each (torch.set_num_threads(1); DL's OpenBLAS runs on
one thread by default). Reports ms per step and the ratios; the losses of both after the timed steps.

Run: .venv/bin/python bench/llvm_charrnn.py [--steps N] [--repeats R] [--hidden H]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # DL's default, before numpy loads OpenBLAS

import argparse
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from dl import pipeline
from dl.codegen import native
from dl.interp.run import compile_program, run_guarded
from dl.runtime.calls import invoke
from dl.runtime.values import StructValue
from llvm_fusion import best  # bench/: the same timing as the fusion benchmark

ROOT = Path(__file__).resolve().parent.parent

SOURCE = """
import nn
import optim

const HIDDEN = {hidden}

struct CharRNN {{ embed: f32[256, 16], cell: nn.LSTM, w: f32[HIDDEN, 256], b: f32[256] }}

fn chunk_loss(m: CharRNN, x: i64[T, B], y: i64[T, B], h: f32[B, HIDDEN], c: f32[B, HIDDEN]) -> f32 {{
    let total = 0.0
    for t in 0..len(x) {{
        (h, c) = nn.lstm_cell(nn.embedding(m.embed, x[t]), h, c, m.cell)
        total += nn.cross_entropy(nn.linear(h, m.w, m.b), y[t])
    }}
    return total / float(len(x))
}}

fn step(m: CharRNN, state, x: i64[T, B], y: i64[T, B], h: f32[B, HIDDEN], c: f32[B, HIDDEN]) {{
    let (value, g) = value_and_grad(chunk_loss)(m, x, y, h, c)
    (m, state) = optim.adam(m, g, state, lr=0.01)
    return (m, state, value)
}}

fn train(m: CharRNN, state, x: i64[T, B], y: i64[T, B], h: f32[B, HIDDEN], c: f32[B, HIDDEN], n: i64) {{
    let value = 0.0
    for i in 0..n {{
        (m, state, value) = step(m, state, x, y, h, c)
    }}
    return (m, state, value)
}}

fn main() {{ }}
"""


def weights(hidden: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    bound = 1 / np.sqrt(hidden)
    uniform = lambda *shape: rng.uniform(-bound, bound, shape).astype(np.float32)  # noqa: E731
    return {
        "embed": rng.standard_normal((256, 16)).astype(np.float32),
        "weight_ih": uniform(4 * hidden, 16),
        "weight_hh": uniform(4 * hidden, hidden),
        "bias_ih": uniform(4 * hidden),
        "bias_hh": uniform(4 * hidden),
        "w": uniform(hidden, 256),
        "b": np.zeros(256, np.float32),
    }


def data(streams: int) -> tuple[np.ndarray, np.ndarray]:
    """16 steps of `streams` parallel streams of the README's bytes (time along the first axis)."""
    size = streams * 16
    text = ((ROOT / "README.md").read_bytes() * 8)[: size + 1]
    codes = np.frombuffer(text, dtype=np.uint8).astype(np.int64)
    x = codes[:size].reshape(streams, 16).T.copy()
    y = codes[1 : size + 1].reshape(streams, 16).T.copy()
    return x, y


class DLStep:
    """The DL `train` function on one backend, called with the model as DL values."""

    def __init__(self, hidden: int, backend: str) -> None:
        path = str(ROOT / "bench" / "charrnn_bench.dl")
        loaded = pipeline.load(path, SOURCE.format(hidden=hidden))
        program, typed = pipeline.prepare(loaded)
        bodies = native.compile_program(typed, cache=False).bodies if backend == "llvm" else None
        self.backend = bodies
        compiler = compile_program(program, typed, bodies)
        state = compiler.states[path]
        self.train = state.cells["train"].value
        self.structs = state.structs, state.modules["nn"].structs

    def model(self, w: dict) -> StructValue:
        own, nn = self.structs
        cell = StructValue(nn["LSTM"], (w["weight_ih"], w["weight_hh"], w["bias_ih"], w["bias_hh"]))
        return StructValue(own["CharRNN"], (w["embed"], cell, w["w"], w["b"]))

    def run(self, model, state, x, y, n: int):
        h = np.zeros((x.shape[1], model.values[2].shape[0]), np.float32)
        c = np.zeros_like(h)
        return run_guarded(lambda: invoke(self.train, [model, state, x, y, h, c, n], self.train.span))


def zeros_like(value):
    if isinstance(value, StructValue):
        return StructValue(value.type, tuple(zeros_like(item) for item in value.values))
    return np.zeros_like(value)


def adam_state(model: StructValue) -> tuple:
    return (zeros_like(model), zeros_like(model), 0)


def torch_step_function(w: dict):
    params = {name: torch.tensor(value, requires_grad=True) for name, value in w.items()}
    optimiser = torch.optim.Adam(params.values(), lr=0.01)

    def step(x: torch.Tensor, y: torch.Tensor) -> float:
        optimiser.zero_grad()
        h = torch.zeros(x.shape[1], params["w"].shape[0])
        c = torch.zeros_like(h)
        total = 0.0
        for t in range(x.shape[0]):
            inputs = F.embedding(x[t], params["embed"])
            gates = inputs @ params["weight_ih"].T + params["bias_ih"] + h @ params["weight_hh"].T + params["bias_hh"]
            i, f, g, o = gates.chunk(4, dim=1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            total = total + F.cross_entropy(h @ params["w"] + params["b"], y[t])
        loss = total / x.shape[0]
        loss.backward()
        optimiser.step()
        return loss.item()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--streams", type=int, default=16, help="the batch: parallel streams of text")
    options = parser.parse_args()
    torch.set_num_threads(1)
    w = weights(options.hidden)
    x, y = data(options.streams)
    n = options.steps

    results = {}
    for backend in ("llvm", "interp"):
        dl = DLStep(options.hidden, backend)
        model = dl.model(w)
        dl.run(model, adam_state(model), x, y, 1)  # compiles (llvm), warms up
        seconds = best(lambda dl=dl, model=model: dl.run(model, adam_state(model), x, y, n), options.repeats)
        loss = float(dl.run(model, adam_state(model), x, y, n)[2])
        results[backend] = (seconds / n, loss)

    step = torch_step_function(w)
    tx, ty = torch.tensor(x), torch.tensor(y)
    for _ in range(3):
        step(tx, ty)

    def torch_run() -> None:
        for _ in range(n):
            step(tx, ty)

    torch_seconds = best(torch_run, options.repeats) / n
    torch_step = torch_step_function(w)
    for _ in range(n):
        torch_loss = torch_step(tx, ty)

    compiled, interpreted = results["llvm"][0], results["interp"][0]
    shape = f"hidden {options.hidden}, {options.streams} streams x 16 steps, Adam"
    print(f"char-RNN step ({shape}), ms per step, best of {options.repeats}:")
    print(f"  DL llvm       {compiled * 1e3:8.3f}   loss after {n} steps {results['llvm'][1]:.6f}")
    print(f"  PyTorch eager {torch_seconds * 1e3:8.3f}   loss after {n} steps {torch_loss:.6f}")
    print(f"  DL interp     {interpreted * 1e3:8.3f}   loss after {n} steps {results['interp'][1]:.6f}")
    print(f"  PyTorch / DL llvm: {torch_seconds / compiled:.2f}x   DL interp / DL llvm: {interpreted / compiled:.2f}x")


if __name__ == "__main__":
    main()
