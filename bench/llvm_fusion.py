"""Fused elementwise loop: `tanh(x * a + b) * c + x` over 10 million f32, DL llvm (one fused loop) beside numpy
op by op, PyTorch eager, torch.compile (Inductor) and JAX jit; then the fused reduction `sum(tanh(x * a + b))`
beside the same.

    python bench/llvm_fusion.py [--repeats 7] [--size 10000000] [--threads 1] [--quick]

Timing (bench/fair.py): threads pinned equal (`--threads`, default 1); the systems alternate, one call each
per round, for `--repeats` rounds; min and median ms per call, CPU time per wall time, DL's ratio to each.
Each compiled system's first call (compilation included) is timed apart: DL's is compiling the module
(both functions, no compile cache). Every result is compared with numpy's (largest absolute difference).
"""

from __future__ import annotations

import fair  # first: it pins the threads before numpy, torch and jax load

THREADS = fair.pin_threads()

import argparse  # noqa: E402
import tempfile  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
from dl import pipeline  # noqa: E402
from dl.codegen import native  # noqa: E402
from dl.runtime import threads  # noqa: E402

threads.use(THREADS)  # as `dlrun --threads N`: a fused loop over 10M elements runs on THREADS threads

torch = fair.load_torch(THREADS)
jax = fair.load_jax()

SOURCE = """
fn f(x: f32[n], a: f32, b: f32, c: f32) -> f32[n] { return tanh(x * a + b) * c + x }
fn total(x: f32[n], a: f32, b: f32) -> f32 { return sum(tanh(x * a + b)) }
fn main() { }
"""
A, B, C = 1.5, 0.25, 0.7
OURS = ["DL llvm"]


def elementwise(tanh: Callable) -> Callable:
    return lambda x, a, b, c: tanh(x * a + b) * c + x


def reduction(tanh: Callable, total: Callable) -> Callable:
    return lambda x, a, b: total(tanh(x * a + b))


@dataclass(frozen=True)
class Calls:
    """One system's two calls; calling it makes both (the first time: where they compile)."""

    fused: Callable[[], Any]
    reduced: Callable[[], Any]

    def __call__(self) -> tuple[Any, Any]:
        return self.fused(), self.reduced()


def dl_kernels() -> dict[str, Any]:
    """The module compiled (no cache): each function's compiled body (runtime/backend.py's `CompiledBody`)."""
    path = Path(tempfile.mkdtemp()) / "fused.dl"
    path.write_text(SOURCE, encoding="utf-8")
    _, typed = pipeline.prepare(pipeline.load(str(path)))
    backend = native.compile_program(typed, cache=False)
    return {kernel.name: backend.bodies[key] for key, kernel in backend.lowered.kernels.items()}


def dl_calls(x: np.ndarray, kernels: dict) -> Calls:
    """DL's two kernels, called as a host calls compiled code: `direct`, on this thread."""
    a, b, c = np.float32(A), np.float32(B), np.float32(C)
    fused, reduced = kernels["f"].direct, kernels["total"].direct
    return Calls(lambda: fused([x, a, b, c]), lambda: reduced([x, a, b]))


def builders(x: np.ndarray) -> dict[str, Callable[[], Calls]]:
    """Each installed system by name, as a function that builds its calls."""
    a, b, c = np.float32(A), np.float32(B), np.float32(C)
    systems: dict[str, Callable[[], Calls]] = {
        "DL llvm": lambda: dl_calls(x, dl_kernels()),
        "numpy": lambda: Calls(lambda: elementwise(np.tanh)(x, a, b, c), lambda: reduction(np.tanh, np.sum)(x, a, b)),
    }
    if torch is not None:
        tx = torch.from_numpy(x)
        for name, wrap in (("torch eager", lambda f: f), ("torch.compile", torch.compile)):
            systems[name] = lambda wrap=wrap: torch_calls(tx, wrap)
    if jax is not None:
        jx = jax.numpy.asarray(x)
        systems["JAX jit"] = lambda: jax_calls(jx)
    return systems


def torch_calls(tx: Any, wrap: Callable) -> Calls:
    fused = wrap(elementwise(torch.tanh))
    reduced = wrap(reduction(torch.tanh, torch.sum))
    return Calls(lambda: fused(tx, A, B, C), lambda: reduced(tx, A, B))


def jax_calls(jx: Any) -> Calls:
    fused = jax.jit(elementwise(jax.numpy.tanh))
    reduced = jax.jit(reduction(jax.numpy.tanh, jax.numpy.sum))
    return Calls(lambda: fused(jx, A, B, C).block_until_ready(), lambda: reduced(jx, A, B).block_until_ready())


def difference(result: Any, expected: np.ndarray) -> float:
    return float(np.max(np.abs(np.asarray(result, dtype=np.float64) - expected)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    fair.threads_option(parser)
    parser.add_argument("--repeats", type=int, default=7, help="rounds of the alternation")
    parser.add_argument("--size", type=int, default=10_000_000, help="elements of x (f32)")
    parser.add_argument("--quick", action="store_true", help="3 rounds on 1M elements (a smoke run)")
    options = parser.parse_args()
    if options.quick:
        options.repeats, options.size = 3, 1_000_000
    x = np.random.default_rng(0).standard_normal(options.size).astype(np.float32)
    compile_times: dict[str, float] = {}
    systems = {}
    for name, build in builders(x).items():
        calls = fair.first_call(name, build, compile_times, may_fail=name == "torch.compile")
        if calls is not None:
            systems[name] = calls
    fused = fair.alternate({name: calls.fused for name, calls in systems.items()}, options.repeats)
    reduced = fair.alternate({name: calls.reduced for name, calls in systems.items()}, options.repeats)

    expected = np.tanh(x * np.float32(A) + np.float32(B)) * np.float32(C) + x
    expected_total = float(np.sum(np.tanh(x * np.float32(A) + np.float32(B)), dtype=np.float64))
    print(fair.header("fused elementwise loop", THREADS, torch, jax))
    print(f"\n`tanh(x * a + b) * c + x` over {options.size:,} f32, {options.repeats} rounds alternated, ms per call:\n")
    print(fair.table(fused))
    print()
    print("\n".join(fair.ratio_lines(fused, OURS)))
    print("largest absolute difference from numpy's result: ", end="")
    print(", ".join(f"{name} {difference(calls.fused(), expected):.2e}" for name, calls in systems.items()))
    print(f"\n`sum(tanh(x * a + b))` over {options.size:,} f32, ms per call:\n")
    print(fair.table(reduced))
    print()
    print("\n".join(fair.ratio_lines(reduced, OURS)))
    print("absolute difference from the f64 sum: ", end="")
    print(", ".join(f"{name} {abs(float(calls.reduced()) - expected_total):.2e}" for name, calls in systems.items()))
    print("\nFirst calls of both functions, untimed above (DL: compiling the module):\n")
    print(fair.compile_table(compile_times))
    notes = fair.footer({**fused, **{f"{name} (sum)": s for name, s in reduced.items()}}, THREADS)
    if notes:
        print("\n" + notes)


if __name__ == "__main__":
    main()
