"""Training examples/train.dl's digits MLP on a GPU: time per epoch (22 Adam steps of batch 64), four systems.

- `DL cuda`: bench/train_mlp.py's DL module (`epoch(params, state, x, y, seed)`: batches, `value_and_grad`,
  `optim.adam`) prepared on the cuda backend and called once per epoch (its arguments cross to the GPU, its result
  back: once per epoch);
- `cupy op by op`: the same step written by hand against cupy (forward, softmax cross-entropy, backward, Adam);
- `PyTorch eager`: the idiomatic loop (`zero_grad`, `cross_entropy`, `backward`, `step`) on CUDA;
- `PyTorch CUDA graph`: one step captured once (`torch.cuda.graph`, Adam with `capturable=True`), replayed per
  batch after copying the batch into the captured inputs.

All start from the same weights and see the batches in the same order (`default_rng(epoch).permutation`, as DL's
`batches(..., seed=epoch)`). The systems alternate epoch by epoch; each epoch is timed alone (wall clock, the GPU
synchronised at both ends), min and median over `--epochs`. The goal (issue 17): DL's epoch no slower than PyTorch's
CUDA-graphed step times the steps. Needs an NVIDIA GPU with cupy and PyTorch (CUDA); without them it says so and
exits 0.

The host's threads are pinned equal for every system (bench/fair.py through train_mlp, `--threads`, default 1).

Run: python bench/cuda_mlp.py [--epochs 10] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/: train_mlp's module and CPU reference

STEPS, BATCH, LR = 22, 64, 0.003


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="the host's threads, pinned equal (bench/fair.py)")
    options = parser.parse_args()
    import fair
    import train_mlp  # before cupy and torch: it pins the host's threads (fair.pin_threads) as numpy loads

    gpu = fair.load_gpu("cuda_mlp")
    if gpu is None:
        return 0
    cupy, torch = gpu
    systems = build(train_mlp, cupy, torch)
    losses = {}
    times = {name: [] for name in systems}
    for epoch in range(options.epochs + 1):  # epoch 0 warms every system up, untimed
        for name, run in systems.items():
            cupy.cuda.runtime.deviceSynchronize()
            start = time.perf_counter()
            losses[name] = run(epoch)
            cupy.cuda.runtime.deviceSynchronize()
            if epoch:
                times[name].append(time.perf_counter() - start)
    device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"{device}, digits MLP 64-128-10, Adam, batch {BATCH}: {STEPS} steps per epoch, {options.epochs} epochs")
    print("| system | min ms/epoch | median ms/epoch | ms/step | last epoch's loss |")
    print("|---|---|---|---|---|")
    for name, values in times.items():
        best, median = min(values) * 1e3, statistics.median(values) * 1e3
        print(f"| {name} | {best:.2f} | {median:.2f} | {best / STEPS:.3f} | {losses[name]:.4f} |")
    return 0


def build(train_mlp, cupy, torch) -> dict:
    import numpy as np

    problem = train_mlp.Problem(hidden=128, batch=BATCH)  # on the CPU: the split, the initial weights
    on_gpu = train_mlp.DLTrainer(problem, "cuda")
    params, (train_x, train_y) = problem.params, problem.train
    return {
        "DL cuda": on_gpu.epoch,
        "cupy op by op": cupy_trainer(cupy, np, params, train_x, train_y),
        "PyTorch eager": torch_trainer(torch, np, params, train_x, train_y, graphed=False),
        "PyTorch CUDA graph": torch_trainer(torch, np, params, train_x, train_y, graphed=True),
    }


def batches_of(np, count: int, epoch: int):
    order = np.random.default_rng(epoch).permutation(count)
    return [order[i * BATCH : (i + 1) * BATCH] for i in range(count // BATCH)]


def cupy_trainer(cupy, np, params, train_x, train_y):
    """The step by hand: relu MLP, softmax cross-entropy (mean), its gradient, Adam (torch's defaults)."""
    w = [cupy.asarray(p) for p in params]
    m = [cupy.zeros_like(p) for p in w]
    v = [cupy.zeros_like(p) for p in w]
    x_all, y_all = cupy.asarray(train_x), cupy.asarray(train_y)
    step = [0]

    def run(epoch: int) -> float:
        total = cupy.zeros((), cupy.float32)
        for rows in batches_of(np, len(train_x), epoch):
            index = cupy.asarray(rows)
            x, y = x_all[index], y_all[index]
            w1, b1, w2, b2 = w
            h = cupy.maximum(x @ w1 + b1, 0)
            logits = h @ w2 + b2
            shifted = logits - logits.max(axis=1, keepdims=True)
            log_p = shifted - cupy.log(cupy.exp(shifted).sum(axis=1, keepdims=True))
            total += -log_p[cupy.arange(BATCH), y].mean()
            d_logits = cupy.exp(log_p)
            d_logits[cupy.arange(BATCH), y] -= 1
            d_logits /= BATCH
            d_h = (d_logits @ w2.T) * (h > 0)
            grads = [x.T @ d_h, d_h.sum(axis=0), h.T @ d_logits, d_logits.sum(axis=0)]
            step[0] += 1
            for p, g, first, second in zip(w, grads, m, v, strict=True):
                first *= 0.9
                first += 0.1 * g
                second *= 0.999
                second += 0.001 * g * g
                corrected = first / (1 - 0.9 ** step[0])
                p -= LR * corrected / (cupy.sqrt(second / (1 - 0.999 ** step[0])) + 1e-8)
        return float(total) / STEPS

    return run


def torch_trainer(torch, np, params, train_x, train_y, graphed: bool):
    w1, b1, w2, b2 = (torch.tensor(np.asarray(p), device="cuda") for p in params)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).cuda()
    with torch.no_grad():  # DL stores a weight [in, out], torch [out, in]
        model[0].weight.copy_(w1.T)
        model[0].bias.copy_(b1)
        model[2].weight.copy_(w2.T)
        model[2].bias.copy_(b2)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR, capturable=graphed)
    x_all, y_all = torch.tensor(train_x, device="cuda"), torch.tensor(train_y, device="cuda")
    static_x, static_y = x_all[:BATCH].clone(), y_all[:BATCH].clone()

    def step(x, y):
        optimizer.zero_grad(set_to_none=False)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    replay = None
    if graphed:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        saved = [p.detach().clone() for p in model.parameters()]
        with torch.cuda.stream(side):
            for _ in range(3):  # warm-up before capture, as torch asks, then the weights are put back
                step(static_x, static_y)
        torch.cuda.current_stream().wait_stream(side)
        with torch.no_grad():
            for p, original in zip(model.parameters(), saved, strict=True):
                p.copy_(original)
        for value in optimizer.state.values():
            for tensor in value.values():
                tensor.zero_()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_loss = step(static_x, static_y)
        replay = (graph, static_loss)

    def run(epoch: int) -> float:
        total = torch.zeros((), device="cuda")
        for rows in batches_of(np, len(train_x), epoch):
            index = torch.as_tensor(rows, device="cuda")
            if replay is None:
                total += step(x_all[index], y_all[index]).detach()
            else:
                static_x.copy_(x_all[index])
                static_y.copy_(y_all[index])
                replay[0].replay()
                total += replay[1].detach()
        return float(total) / STEPS

    return run


if __name__ == "__main__":
    sys.exit(main())
