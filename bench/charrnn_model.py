"""The char-RNN of bench/llvm_charrnn.py and bench/cuda_training.py: examples/charrnn.dl's model and training
step as a DL module, its initial weights, its data, and PyTorch's loss of a chunk (on any device).

Imported after bench/fair.py's `pin_threads` (it imports numpy): the benches that use it pin every system to the
same threads (`--threads`, default 1)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
LR = 0.01

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


def torch_chunk_loss(torch, params: dict, x, y):
    """The mean cross-entropy of a chunk, the LSTM cell written out as DL's `nn.lstm_cell`, on `x`'s device."""
    F = torch.nn.functional
    h = torch.zeros(x.shape[1], params["w"].shape[0], device=x.device)
    c = torch.zeros_like(h)
    total = 0.0
    for t in range(x.shape[0]):
        inputs = F.embedding(x[t], params["embed"])
        gates = inputs @ params["weight_ih"].T + params["bias_ih"] + h @ params["weight_hh"].T + params["bias_hh"]
        i, f, g, o = gates.chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        total = total + F.cross_entropy(h @ params["w"] + params["b"], y[t])
    return total / x.shape[0]
