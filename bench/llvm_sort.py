"""Compiled sorts: `argsort` along the last axis of f32 rows, DL llvm (`ir.Sort`, a stable merge sort of each row)
beside the DL interpreter (numpy's stable argsort), numpy's stable argsort itself and PyTorch's stable sort.

    python bench/llvm_sort.py [--repeats 9] [--threads 1]

Each case is a function `f(x) -> i64[...]` compiled for its shape (no compile cache); the rows are random normal
f32 (few ties). Timing (bench/fair.py): threads pinned equal; the systems alternate, one timed run each per round
(several calls for a short one), for `--repeats` rounds; min and median ms per call. Every system's positions
are checked equal to numpy's.
"""

from __future__ import annotations

import fair  # first: it pins the threads before numpy and torch load

THREADS = fair.pin_threads()

import argparse  # noqa: E402
from collections.abc import Callable  # noqa: E402

import numpy as np  # noqa: E402
from dl import pipeline  # noqa: E402
from dl.codegen import native  # noqa: E402
from dl.interp import run as interpreter  # noqa: E402
from dl.runtime.backend import Options  # noqa: E402

torch = fair.load_torch(THREADS)

# (rows, row length, descending): a batch of class scores, a long row, and a batch of short rows
CASES = [(64, 1_000, False), (64, 1_000, True), (1, 1 << 20, False), (16_384, 64, False)]
OURS = ["DL llvm"]


def dl_calls(x: np.ndarray, descending: bool) -> dict[str, Callable[[], np.ndarray]]:
    """`argsort` compiled for `x`'s shape, and interpreted, each called as the interpreter calls a function."""
    flag = "true" if descending else "false"
    source = f"fn f(x: f32[R, N]) -> i64[R, N] {{ return argsort(x, descending={flag}) }}"
    _, typed = pipeline.prepare(pipeline.load("sort.dl", source), (("f", (pipeline.value_type(x),)),))
    compiled = interpreter.BACKEND.prepare(typed, Options(bodies=native.compile_program(typed, cache=False).bodies))
    interpreted = interpreter.BACKEND.prepare(typed, Options(bodies={}))
    return {"DL llvm": lambda: compiled.call("f", [x]), "DL interp": lambda: interpreted.call("f", [x])}


def peers(x: np.ndarray, descending: bool) -> dict[str, Callable[[], np.ndarray]]:
    """numpy's stable argsort (descending as the interpreter makes it: the reversed rows' stable order, reversed)
    and torch's stable sort."""
    last = x.shape[-1] - 1

    def numpy_order() -> np.ndarray:
        if not descending:
            return np.argsort(x, axis=-1, kind="stable")
        return last - np.argsort(x[:, ::-1], axis=-1, kind="stable")[:, ::-1]

    systems = {"numpy": numpy_order}
    if torch is not None:
        tensor = torch.from_numpy(x)
        systems["PyTorch"] = lambda: torch.sort(tensor, dim=-1, descending=descending, stable=True).indices
    return systems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=9)
    fair.threads_option(parser)
    options = parser.parse_args()
    print(fair.header("argsort of f32 rows, compiled and not", THREADS, torch))
    for rows, length, descending in CASES:
        x = np.random.default_rng(0).standard_normal((rows, length)).astype(np.float32)
        systems = {**dl_calls(x, descending), **peers(x, descending)}
        expected = systems["numpy"]()
        for name, call in systems.items():
            assert np.array_equal(np.asarray(call()), expected), name  # (the first call compiles DL's)
        calls = {name: fair.calls_for(call, 0.05) for name, call in systems.items()}
        samples = fair.alternate(systems, options.repeats, calls)
        print(f"\n## [{rows}, {length}], descending={str(descending).lower()}\n")
        print(fair.table(samples))
        print("\n".join(fair.ratio_lines(samples, OURS)))
    footer = fair.footer({}, THREADS)
    if footer:
        print("\n" + footer)


if __name__ == "__main__":
    main()
