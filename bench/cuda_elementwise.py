"""One fused elementwise kernel on a GPU: `tanh(x * a + b) * c + x` over 2^28 f32 (issue 17's first goal).

Systems, alternated within each round (A, B, C, ... A, B, C ...), each timed with CUDA events around one call
after a warm-up, min and median over the rounds:

- `DL fused`: the function as codegen/fusion.py fuses it, lowered to PTX by codegen/nvptx.py and launched by the
  cuda backend's body (codegen/cuda.py `fused_body`, host overhead included);
- `device copy`: `out[...] = x`, the bandwidth limit of reading x and writing out;
- `cupy op by op`: the expression in cupy, five kernels and four temporaries;
- `PyTorch eager`, and `PyTorch CUDA graph` (the eager ops captured once, replayed).

The goals: DL fused at 70% or more of the device copy's bandwidth, and 3x or more faster than PyTorch eager.
Needs an NVIDIA GPU with cupy and PyTorch (CUDA); without them it says so and exits 0.

Run: python bench/cuda_elementwise.py [--log2 28] [--rounds 20] [--threads 1]

The host's threads are pinned equal for every system (bench/fair.py, `--threads`, default 1): the kernels run
on the GPU, and each system's host side launches them from the same CPUs.
"""

from __future__ import annotations

import fair  # first: it pins the host's threads before numpy and torch load

THREADS = fair.pin_threads()

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--log2", type=int, default=28, help="elements: 2**LOG2 (default 28: 1 GiB per array)")
    parser.add_argument("--rounds", type=int, default=20)
    fair.threads_option(parser)
    options = parser.parse_args()
    gpu = fair.load_gpu("cuda_elementwise")
    if gpu is None:
        return 0
    cupy, torch = gpu
    systems = build(options.log2, cupy, torch)
    times = {name: [] for name in systems}
    for _ in range(options.rounds):
        for name, run in systems.items():
            times[name].append(timed(run, cupy))
    report(times, 2**options.log2, cupy)
    return 0


def build(log2: int, cupy, torch) -> dict:
    import numpy as np
    from dl import pipeline
    from dl.codegen import cuda, native, nvptx

    n = 2**log2
    source = "fn f(x: f32[n], a: f32, b: f32, c: f32) -> f32[n] { return tanh(x * a + b) * c + x }\nfn main() { }\n"
    _, typed = pipeline.prepare(pipeline.load("bench.dl", source))
    [kernel] = native.lowered_program(typed).kernels.values()
    fused = nvptx.fused_kernel(kernel)
    arrays = cuda.cupy_arrays()
    body = cuda.fused_body(kernel, fused.symbol, cuda.CupyKernels([fused], cache=True), arrays)
    x = cupy.random.default_rng(0).standard_normal(n, dtype=cupy.float32)
    a, b, c = np.float32(1.5), np.float32(0.25), np.float32(0.7)
    out = cupy.empty_like(x)
    tx = torch.as_tensor(x, device="cuda")
    static = torch.empty_like(tx)
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        static.copy_(torch.tanh(tx * 1.5 + 0.25) * 0.7 + tx)  # warm-up before capture, on the side stream
    torch.cuda.current_stream().wait_stream(stream)
    with torch.cuda.graph(graph):
        static.copy_(torch.tanh(tx * 1.5 + 0.25) * 0.7 + tx)
    expected = torch.tanh(tx * 1.5 + 0.25) * 0.7 + tx
    frame = [None, x, a, b, c]
    body(frame)
    difference = float(cupy.max(cupy.abs(frame[0] - cupy.asarray(expected))))
    print(f"DL fused vs PyTorch: largest difference {difference:.3g}")

    def dl_fused():
        body([None, x, a, b, c])

    def copy():
        out[...] = x

    def cupy_ops():
        cupy.tanh(x * a + b) * c + x

    def torch_eager():
        torch.tanh(tx * 1.5 + 0.25) * 0.7 + tx

    return {
        "DL fused": dl_fused,
        "device copy": copy,
        "cupy op by op": cupy_ops,
        "PyTorch eager": torch_eager,
        "PyTorch CUDA graph": graph.replay,
    }


def timed(run, cupy) -> float:
    """Milliseconds of one call, measured with CUDA events on the current stream, after one warm-up call."""
    run()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    cupy.cuda.runtime.deviceSynchronize()
    start.record()
    run()
    end.record()
    end.synchronize()
    return cupy.cuda.get_elapsed_time(start, end)


def report(times: dict, n: int, cupy) -> None:
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"{name}, {n} f32 elements ({n * 4 / 2**30:.2f} GiB per array), {len(next(iter(times.values())))} rounds")
    print("| system | min ms | median ms | GB/s (read x, write out) | vs PyTorch eager |")
    print("|---|---|---|---|---|")
    eager = min(times["PyTorch eager"])
    for system, values in times.items():
        best = min(values)
        print(
            f"| {system} | {best:.3f} | {statistics.median(values):.3f} | {2 * n * 4 / best / 1e6:.0f} "
            f"| {eager / best:.2f}x |"
        )
    share = min(times["device copy"]) / min(times["DL fused"])
    print(f"DL fused: {share:.0%} of the device copy's bandwidth; {eager / min(times['DL fused']):.2f}x PyTorch eager")


if __name__ == "__main__":
    sys.exit(main())
