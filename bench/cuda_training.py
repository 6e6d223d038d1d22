"""Training steps on a GPU, DL's cuda backend beside PyTorch CUDA eager and PyTorch with the step captured once as
a CUDA graph, side by side in one run:

- `charrnn`: bench/llvm_charrnn.py's step (examples/charrnn.dl's LSTM, hidden `--hidden`, `--streams` streams of 16
  bytes, `value_and_grad` through the time loop, Adam); the goal (issue 17): no slower than PyTorch CUDA-graphed;
- `wide`: an MLP 1024-4096-4096-10 (relu) at batch 4096, cross-entropy, Adam, all cuBLAS-bound; the goal: within
  1.1x of PyTorch eager.

    python bench/cuda_training.py [--model charrnn|wide|both] [--steps 20] [--repeats 5] [--hidden 64] [--threads 1]
    python bench/cuda_training.py --cpu --quick    # the same systems on the CPU: a check of this script only

Each system trains on one batch (the same weights, the same data) `--steps` steps per timed run. DL runs a DL
function that loops over the steps (`train`), called through `call_on_device`, so that its weights and Adam state
stay in the GPU's memory between runs as PyTorch's do; only the loss crosses to the host, once per run, as
`loss.item()` does for PyTorch. The systems alternate run by run (bench/fair.py), `--repeats` rounds; min and median
ms per step. Each system's first run (building, compiling, capturing) is reported apart. Needs cupy and PyTorch
with CUDA; without them it says so and exits 0 (unless `--cpu`).
"""

from __future__ import annotations

import fair  # first: it pins the host's threads before numpy and torch load

THREADS = fair.pin_threads()

import argparse  # noqa: E402
import itertools  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import charrnn_model  # noqa: E402
import numpy as np  # noqa: E402
from dl import pipeline  # noqa: E402

OURS = ["DL cuda", "DL interp"]

# The char-RNN module with its weights and Adam state as tuples, which the host holds.
CHARRNN = (
    charrnn_model.SOURCE
    + """
fn model(p) {{
    let (embed, weight_ih, weight_hh, bias_ih, bias_hh, w, b) = p
    let cell = nn.LSTM {{ weight_ih: weight_ih, weight_hh: weight_hh, bias_ih: bias_ih, bias_hh: bias_hh }}
    return CharRNN {{ embed: embed, cell: cell, w: w, b: b }}
}}

fn leaves(m: CharRNN) {{
    return (m.embed, m.cell.weight_ih, m.cell.weight_hh, m.cell.bias_ih, m.cell.bias_hh, m.w, m.b)
}}

fn steps(p, s, x: i64[T, B], y: i64[T, B], n: i64) {{
    let (m1, v1, count) = s
    let h = zeros(B, HIDDEN)
    let (m, state, value) = train(model(p), (model(m1), model(v1), count), x, y, h, zeros(B, HIDDEN), n)
    let (m2, v2, count2) = state
    return (leaves(m), (leaves(m2), leaves(v2), count2), value)
}}
"""
)
CHARRNN_NAMES = ("embed", "weight_ih", "weight_hh", "bias_ih", "bias_hh", "w", "b")

WIDE = """
import nn
import optim

struct MLP { w1: f32[_, _], b1: f32[_], w2: f32[_, _], b2: f32[_], w3: f32[_, _], b3: f32[_] }

fn loss(m: MLP, x: f32[B, _], y: i64[B]) -> f32 {
    let h1 = nn.relu(nn.linear(x, m.w1, m.b1))
    let h2 = nn.relu(nn.linear(h1, m.w2, m.b2))
    return nn.cross_entropy(nn.linear(h2, m.w3, m.b3), y)
}

fn model(p) {
    let (w1, b1, w2, b2, w3, b3) = p
    return MLP { w1: w1, b1: b1, w2: w2, b2: b2, w3: w3, b3: b3 }
}

fn leaves(m: MLP) { return (m.w1, m.b1, m.w2, m.b2, m.w3, m.b3) }

fn steps(p, s, x: f32[B, _], y: i64[B], n: i64) {
    let m = model(p)
    let (m1, v1, count) = s
    let state = (model(m1), model(v1), count)
    let value = 0.0
    for i in 0..n {
        let (v, g) = value_and_grad(loss)(m, x, y)
        (m, state) = optim.adam(m, g, state, lr=0.001)
        value = v
    }
    let (m2, v2, count2) = state
    return (leaves(m), (leaves(m2), leaves(v2), count2), value)
}
"""
WIDE_SIZES = (1024, 4096, 4096, 10)
WIDE_BATCH = 4096


def wide_problem(seed: int = 0) -> tuple[dict, np.ndarray, np.ndarray]:
    """torch.nn.Linear's initialisation (uniform in +-1/sqrt(fan_in)), weights stored [in, out]; random data."""
    rng = np.random.default_rng(seed)
    w = {}
    for layer, (fan_in, fan_out) in enumerate(itertools.pairwise(WIDE_SIZES), start=1):
        bound = 1 / np.sqrt(fan_in)
        w[f"w{layer}"] = rng.uniform(-bound, bound, (fan_in, fan_out)).astype(np.float32)
        w[f"b{layer}"] = rng.uniform(-bound, bound, fan_out).astype(np.float32)
    x = rng.standard_normal((WIDE_BATCH, WIDE_SIZES[0])).astype(np.float32)
    y = rng.integers(0, WIDE_SIZES[-1], WIDE_BATCH).astype(np.int64)
    return w, x, y


def dl_trainer(source: str, path: str, leaves: tuple, x, y, n: int, backend: str) -> Callable[[], float]:
    """`n` steps per call of the module's `steps`, training on from where the last call left off."""
    state = (tuple(np.zeros_like(leaf) for leaf in leaves), tuple(np.zeros_like(leaf) for leaf in leaves), 0)
    types = tuple(pipeline.value_type(value) for value in (leaves, state, x, y, n))
    _, typed = pipeline.prepare(pipeline.load(path, source), (("steps", types),))
    prepared = pipeline.on_backend(backend, typed, cache=False)
    call = getattr(prepared, "call_on_device", prepared.call)
    held = {"params": leaves, "state": state}

    def train() -> float:
        held["params"], held["state"], loss = call("steps", [held["params"], held["state"], x, y, n])
        return float(loss)

    return train


def torch_trainer(torch, w: dict, loss_of: Callable, x, y, n: int, device: str, graphed: bool) -> Callable[[], float]:
    """`n` steps per call; `graphed`: one step captured as a CUDA graph (Adam `capturable`) and replayed."""
    params = {name: torch.tensor(value, device=device, requires_grad=True) for name, value in w.items()}
    optimiser = torch.optim.Adam(params.values(), lr=LR_OF[loss_of], capturable=graphed)
    tx, ty = torch.as_tensor(x, device=device), torch.as_tensor(y, device=device)

    def step():
        optimiser.zero_grad(set_to_none=False)
        loss = loss_of(torch, params, tx, ty)
        loss.backward()
        optimiser.step()
        return loss

    if not graphed:

        def train() -> float:
            for _ in range(n):
                loss = step()
            return loss.item()

        return train
    for tensor in params.values():  # gradients exist before capture, so that the graph writes into them
        tensor.grad = torch.zeros_like(tensor)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    saved = {name: tensor.detach().clone() for name, tensor in params.items()}
    with torch.cuda.stream(side):
        for _ in range(3):  # warm-up before capture, as torch asks; then the weights and the state are put back
            step()
    torch.cuda.current_stream().wait_stream(side)
    with torch.no_grad():
        for name, tensor in params.items():
            tensor.copy_(saved[name])
    for value in optimiser.state.values():
        for tensor in value.values():
            tensor.zero_()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    # The graph holds raw addresses of the weights, the optimizer's state and the data: `replayed` keeps them
    # alive (freed, the caching allocator hands their memory to the next tensor, and the replay reads garbage).
    alive = (params, optimiser, tx, ty)

    def replayed() -> float:
        assert alive
        for _ in range(n):
            graph.replay()
        return captured.item()

    return replayed


def wide_loss(torch, params: dict, x, y):
    F = torch.nn.functional
    h = F.relu(x @ params["w1"] + params["b1"])
    h = F.relu(h @ params["w2"] + params["b2"])
    return F.cross_entropy(h @ params["w3"] + params["b3"], y)


def charrnn_loss(torch, params: dict, x, y):
    return charrnn_model.torch_chunk_loss(torch, params, x, y)


LR_OF = {wide_loss: 0.001, charrnn_loss: charrnn_model.LR}


def builders(model: str, options: argparse.Namespace, torch) -> tuple[str, dict[str, Callable]]:
    """The title of the workload and each system by name, as a function that builds its run."""
    n, folder = options.steps, Path(__file__).resolve().parent
    if model == "charrnn":
        w = charrnn_model.weights(options.hidden)
        x, y = charrnn_model.data(options.streams)
        source, path, loss_of = CHARRNN.format(hidden=options.hidden), str(folder / "_cuda_charrnn.dl"), charrnn_loss
        leaves = tuple(w[name] for name in CHARRNN_NAMES)
        title = f"char-RNN step (hidden {options.hidden}, {options.streams} streams x 16 steps, Adam)"
    else:
        w, x, y = wide_problem()
        source, path, loss_of = WIDE, str(folder / "_cuda_wide.dl"), wide_loss
        leaves = tuple(w.values())
        title = f"MLP {'-'.join(map(str, WIDE_SIZES))}, batch {WIDE_BATCH}, Adam"
    device = "cpu" if options.cpu else "cuda"
    ours = "DL interp" if options.cpu else "DL cuda"
    systems = {ours: lambda: dl_trainer(source, path, leaves, x, y, n, "interp" if options.cpu else "cuda")}
    systems[f"PyTorch {device} eager"] = lambda: torch_trainer(torch, w, loss_of, x, y, n, device, graphed=False)
    if not options.cpu:
        systems["PyTorch CUDA graph"] = lambda: torch_trainer(torch, w, loss_of, x, y, n, device, graphed=True)
    return title, systems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    fair.threads_option(parser)
    parser.add_argument("--model", choices=("charrnn", "wide", "both"), default="both")
    parser.add_argument("--steps", type=int, default=20, help="training steps per timed run")
    parser.add_argument("--repeats", type=int, default=5, help="rounds of the alternation")
    parser.add_argument("--hidden", type=int, default=64, help="the char-RNN's hidden width")
    parser.add_argument("--streams", type=int, default=16, help="the char-RNN's batch: parallel streams of text")
    parser.add_argument("--cpu", action="store_true", help="DL's interpreter and PyTorch on the CPU (a check)")
    parser.add_argument("--quick", action="store_true", help="2 rounds of 2 steps, the char-RNN only")
    options = parser.parse_args()
    if options.quick:
        options.steps, options.repeats = 2, 2
    torch = fair.load_torch(THREADS)
    if not options.cpu:
        gpu = fair.load_gpu("cuda_training")
        if gpu is None:
            return 0
        cupy, torch = gpu
        print(f"{torch.cuda.get_device_name()}, cupy {cupy.__version__}, torch {torch.__version__}")
    models = ("charrnn", "wide") if options.model == "both" else (options.model,)
    for model in models:
        if options.quick and model == "wide" and options.cpu:
            continue  # 4096-wide steps take seconds each on a CPU
        title, systems = builders(model, options, torch)
        first: dict[str, float] = {}
        losses: dict[str, Any] = {}
        runs = {name: fair.first_call(name, build, first, losses) for name, build in systems.items()}
        samples = fair.alternate(runs, options.repeats)
        print(f"\n## {title}\n\n{options.steps} steps per run, {options.repeats} rounds alternated; ms per step:\n")
        print(fair.table(samples, scale=1e3 / options.steps))
        print()
        print("\n".join(fair.ratio_lines(samples, OURS)))
        print(f"\nloss after the first {options.steps} steps: " + ", ".join(f"{k} {v:.6f}" for k, v in losses.items()))
        print("\nFirst run, untimed above (building, compiling, capturing):\n")
        print(fair.compile_table(first))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
