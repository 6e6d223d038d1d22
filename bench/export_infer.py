"""Inference of the digits MLP (examples/train.dl's `forward`) exported, at batch 1 and 256: onnxruntime on
the f32 and the int8 ONNX models, the DL package on the interpreter and on LLVM (`dl.load_package`), and
PyTorch eager, the same weights everywhere.

Method: the systems alternate inside one run (A, B, C, ... then again), each round timing `--calls` calls
of one system and keeping the time per call; min and median over `--rounds` rounds, in µs. Threads are
pinned equal: onnxruntime's intra-op pool and PyTorch's to `--threads`, OpenBLAS (numpy, so the
interpreter and DL's LLVM products) to the same, set before numpy loads. Run once per thread count:

    python bench/export_infer.py --threads 1
    python bench/export_infer.py --threads 2

`--profile` prints where a batch-1 call of the package on LLVM spends its time (cProfile, top 15).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=200, help="calls per round at batch 1 (a tenth at batch 256)")
    parser.add_argument("--profile", action="store_true")
    return parser.parse_args()


OPTIONS = arguments()
os.environ["OPENBLAS_NUM_THREADS"] = str(OPTIONS.threads)  # before numpy is imported
os.environ["OMP_NUM_THREADS"] = str(OPTIONS.threads)

import dl  # noqa: E402
import numpy as np  # noqa: E402
import onnxruntime  # noqa: E402
import safetensors.numpy  # noqa: E402
import torch  # noqa: E402
from dl import package, pipeline  # noqa: E402
from dl.export import onnx_model  # noqa: E402


def weights() -> dict[str, np.ndarray]:
    """examples/train.dl's MLP (64 -> 128 -> 10), random: the timings do not depend on the values."""
    generator = np.random.default_rng(0)
    shapes = {"w1": (64, 128), "b1": (128,), "w2": (128, 10), "b2": (10,)}
    return {name: (generator.standard_normal(shape) * 0.1).astype(np.float32) for name, shape in shapes.items()}


def export(directory: Path, tensors: dict[str, np.ndarray]) -> None:
    checkpoint = directory / "mlp.safetensors"
    checkpoint.write_bytes(safetensors.numpy.save(tensors))
    built = package.build_package(pipeline.load(str(ROOT / "examples" / "train.dl")), "forward", str(checkpoint))
    package.export_package(built, directory / "mlp.dlpkg")
    signature = package.signature_of(built.typed, built.function)
    for name, quantize in (("mlp.onnx", None), ("mlp.int8.onnx", "int8")):
        model = onnx_model.export_onnx(built.module, signature, "m", built.weights.tensors, quantize)
        (directory / name).write_bytes(model)


def onnx_runner(path: Path):
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = OPTIONS.threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return lambda x: session.run(None, {"x": x})[0]


def torch_runner(tensors: dict[str, np.ndarray]):
    torch.set_num_threads(OPTIONS.threads)
    w1, b1, w2, b2 = (torch.from_numpy(tensors[name]) for name in ("w1", "b1", "w2", "b2"))

    def run(x: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            h = torch.relu(torch.from_numpy(x) @ w1 + b1)
            return (h @ w2 + b2).numpy()

    return run


def per_call(run, x: np.ndarray, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        run(x)
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    tensors = weights()
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        export(directory, tensors)
        systems = {
            "onnxruntime f32": onnx_runner(directory / "mlp.onnx"),
            "onnxruntime int8": onnx_runner(directory / "mlp.int8.onnx"),
            "DL interpreter": dl.load_package(directory / "mlp.dlpkg"),
            "DL llvm (package)": dl.load_package(directory / "mlp.dlpkg", "llvm"),
            "PyTorch eager": torch_runner(tensors),
        }
        generator = np.random.default_rng(1)
        for batch in (1, 256):
            x = generator.standard_normal((batch, 64)).astype(np.float32)
            reference = systems["PyTorch eager"](x)
            for name, run in systems.items():  # warm up (compiles on LLVM) and check agreement
                tolerance = 5e-2 if "int8" in name else 1e-4
                assert np.allclose(run(x), reference, rtol=tolerance, atol=tolerance), name
            if OPTIONS.profile and batch == 1:
                profile(systems["DL llvm (package)"], x)
            calls = OPTIONS.calls if batch == 1 else max(OPTIONS.calls // 10, 5)
            found: dict[str, list[float]] = {name: [] for name in systems}
            for _ in range(OPTIONS.rounds):
                for name, run in systems.items():
                    found[name].append(per_call(run, x, calls))
            report(batch, found)


def report(batch: int, found: dict[str, list[float]]) -> None:
    print(f"\nbatch {batch}, {OPTIONS.threads} thread(s), µs per call over {OPTIONS.rounds} rounds")
    print("| system | min | median |\n|---|---:|---:|")
    for name, times in found.items():
        print(f"| {name} | {min(times):.1f} | {float(np.median(times)):.1f} |")


def profile(run, x: np.ndarray) -> None:
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(2000):
        run(x)
    profiler.disable()
    pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
