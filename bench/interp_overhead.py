"""Interpreter overhead per primitive call on small tensors, beside numpy and PyTorch eager.

    python bench/interp_overhead.py [--repeats 7] [--iters 20000] [--threads 1] [--quick] [--json FILE]

For every op, one DL function runs the op `n` times in a `while` loop:

    fn bench(x, y, w, b, n) {
        let i = 0
        let acc = x
        while i < n {
            acc = exp(x)
            i += 1
        }
        return acc
    }

and an identical DL function without the `acc = ...` line measures the loop itself.
numpy and torch run the same op in the same Python `while` loop (the op's expression is
inlined into the loop's source, so no extra Python call is added). Every time is the best
of several repeats (time.perf_counter, gc off), divided by `n`:

- raw: the whole loop per iteration;
- net: raw minus the empty loop of the same system (the cost of the op and its `acc =`).

Threads are pinned equal (bench/fair.py: `--threads`, default 1, for OpenBLAS and torch).
Ratios are DL / numpy and DL / torch on the net numbers (and on the raw numbers in the
second table). The project's goal is DL / torch <= 1.0. The `chain` row is three
primitive calls (`*`, `+`, `tanh`) and is reported per chain.

Not a test: nothing here is collected by pytest.
"""

from __future__ import annotations

import fair  # first: it pins the threads before numpy and torch load

THREADS = fair.pin_threads()

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from dl.interp.compile import Compiler  # noqa: E402
from dl.pipeline import load  # noqa: E402

torch.set_num_threads(THREADS)


@dataclass(frozen=True)
class Op:
    name: str
    shape: str  # shown in the table
    dl: str  # DL expression over x, y, w, b
    numpy: str  # Python expression over x, y, w, b with `np`
    torch: str  # Python expression over x, y, w, b with `torch`
    inputs: tuple[tuple[int, ...], ...]  # shapes of x, y, w, b


VEC = (4,)
MAT = (8, 8)
OPS = (
    Op("add", "f32[4]", "x + y", "x + y", "x + y", (VEC,) * 4),
    Op("mul", "f32[4]", "x * y", "x * y", "x * y", (VEC,) * 4),
    Op("exp", "f32[4]", "exp(x)", "np.exp(x)", "torch.exp(x)", (VEC,) * 4),
    Op("tanh", "f32[4]", "tanh(x)", "np.tanh(x)", "torch.tanh(x)", (VEC,) * 4),
    Op("relu", "f32[4]", "relu(x)", "np.maximum(x, 0)", "torch.relu(x)", (VEC,) * 4),
    Op("maximum", "f32[4]", "maximum(x, y)", "np.maximum(x, y)", "torch.maximum(x, y)", (VEC,) * 4),
    Op("matmul", "f32[8,8]", "x @ y", "x @ y", "x @ y", (MAT,) * 4),
    Op("sum", "f32[8,8]", "sum(x)", "np.sum(x)", "torch.sum(x)", (MAT,) * 4),
    Op("chain tanh(x*w+b)", "f32[4]", "tanh(x * w + b)", "np.tanh(x * w + b)", "torch.tanh(x * w + b)", (VEC,) * 4),
)

DL_LOOP = """
fn {name}(x, y, w, b, n) {{
    let i = 0
    let acc = x
    while i < n {{
{body}        i += 1
    }}
    return acc
}}
"""

PY_LOOP = """
def loop(x, y, w, b, n):
    i = 0
    acc = x
    while i < n:
{body}        i += 1
    return acc
"""


def dl_functions(ops: tuple[Op, ...]) -> tuple[dict, object]:
    """Compile one DL module holding a loop per op, plus the empty loop."""
    source = DL_LOOP.format(name="empty", body="")
    for index, op in enumerate(ops):
        source += DL_LOOP.format(name=f"op{index}", body=f"        acc = {op.dl}\n")
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_interp_overhead.dl")
    program = load(path, source)
    compiler = Compiler(program)
    compiler.compile_program()
    cells = compiler.states[program.entry].cells
    return {index: cells[f"op{index}"].value for index in range(len(ops))}, cells["empty"].value


def python_loop(expression: str | None, namespace: dict):
    body = f"        acc = {expression}\n" if expression else ""
    scope = dict(namespace)
    exec(PY_LOOP.format(body=body), scope)  # the op's expression inlined, as a user would write it
    return scope["loop"]


def best_time(function, args: tuple, repeats: int) -> float:
    """Best wall time of `function(*args)` over `repeats` runs, in seconds."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        function(*args)
        best = min(best, time.perf_counter() - start)
    return best


def inputs(op: Op) -> tuple[tuple, tuple]:
    rng = np.random.default_rng(0)
    arrays = tuple(rng.standard_normal(shape).astype(np.float32) for shape in op.inputs)
    tensors = tuple(torch.from_numpy(a.copy()) for a in arrays)
    return arrays, tensors


def measure(ops: tuple[Op, ...], iters: int, repeats: int) -> tuple[list[dict], dict]:
    dl_ops, dl_empty = dl_functions(ops)
    np_empty = python_loop(None, {})
    results = []
    loops = {"dl": float("inf"), "python": float("inf")}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for index, op in enumerate(ops):
            arrays, tensors = inputs(op)
            np_loop = python_loop(op.numpy, {"np": np})
            torch_loop = python_loop(op.torch, {"torch": torch})
            # Sanity: the three systems compute the same thing.
            expected = np_loop(*arrays, 3)
            got_dl = np.asarray(dl_ops[index](*arrays, 3))
            got_torch = torch_loop(*tensors, 3).numpy()
            assert np.allclose(got_dl, expected, rtol=1e-5, atol=1e-5), (op.name, got_dl, expected)
            assert np.allclose(got_torch, expected, rtol=1e-5, atol=1e-5), (op.name, got_torch, expected)
            # Warm up, then interleave the systems repeat by repeat so drift hits all of them alike.
            for function, args in ((dl_ops[index], arrays), (np_loop, arrays), (torch_loop, tensors)):
                function(*args, iters // 10)
            times = {k: float("inf") for k in ("dl", "dl_empty", "numpy", "torch", "py_empty")}
            for _ in range(repeats):
                times["dl"] = min(times["dl"], best_time(dl_ops[index], (*arrays, iters), 1))
                times["dl_empty"] = min(times["dl_empty"], best_time(dl_empty, (*arrays, iters), 1))
                times["numpy"] = min(times["numpy"], best_time(np_loop, (*arrays, iters), 1))
                times["torch"] = min(times["torch"], best_time(torch_loop, (*tensors, iters), 1))
                times["py_empty"] = min(times["py_empty"], best_time(np_empty, (*arrays, iters), 1))
            per = {k: v / iters * 1e6 for k, v in times.items()}  # µs per iteration
            loops["dl"] = min(loops["dl"], per["dl_empty"])
            loops["python"] = min(loops["python"], per["py_empty"])
            results.append(
                {
                    "op": op.name,
                    "shape": op.shape,
                    "dl_raw": per["dl"],
                    "numpy_raw": per["numpy"],
                    "torch_raw": per["torch"],
                    "dl_empty": per["dl_empty"],
                    "py_empty": per["py_empty"],
                }
            )
            if sys.stderr.isatty():
                print(f"  measured {op.name}", file=sys.stderr, flush=True)
    finally:
        if gc_was_enabled:
            gc.enable()
    # Subtract the best empty loop seen over the whole run (the least noisy estimate).
    for row in results:
        row["dl_net"] = row["dl_raw"] - loops["dl"]
        row["numpy_net"] = row["numpy_raw"] - loops["python"]
        row["torch_net"] = row["torch_raw"] - loops["python"]
    return results, loops


def table(results: list[dict], kind: str) -> str:
    header = "| op | shape | DL µs/op | numpy µs/op | torch µs/op | DL/numpy | DL/torch |"
    lines = [header, "|---|---|---:|---:|---:|---:|---:|"]
    for row in results:
        dl, npy, tch = row[f"dl_{kind}"], row[f"numpy_{kind}"], row[f"torch_{kind}"]
        lines.append(
            f"| {row['op']} | {row['shape']} | {dl:.3f} | {npy:.3f} | {tch:.3f} | {dl / npy:.2f} | {dl / tch:.2f} |"
        )
    return "\n".join(lines)


def machine() -> str:
    return (
        f"{platform.machine()}, nproc={os.cpu_count()}, Python {platform.python_version()}, "
        f"numpy {np.__version__}, torch {torch.__version__} (threads={torch.get_num_threads()})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    fair.threads_option(parser)
    parser.add_argument("--iters", type=int, default=20000, help="loop iterations per timed run")
    parser.add_argument("--repeats", type=int, default=7, help="timed runs per measurement; the best is kept")
    parser.add_argument("--quick", action="store_true", help="fewer iterations and repeats (a smoke run)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args()
    if args.quick:
        args.iters, args.repeats = 2000, 3
    results, loops = measure(OPS, args.iters, args.repeats)
    print(f"# interpreter overhead — {machine()}")
    print(f"# {args.iters} iterations, best of {args.repeats}; µs per iteration")
    print(f"# empty loop per iteration: DL {loops['dl']:.3f} µs, Python {loops['python']:.3f} µs")
    print("\n## loop-subtracted (op cost only)\n")
    print(table(results, "net"))
    print("\n## raw (loop included)\n")
    print(table(results, "raw"))
    worst = max(results, key=lambda r: r["dl_net"] / r["torch_net"])
    ratio = worst["dl_net"] / worst["torch_net"]
    print(
        f"\ngoal DL/torch <= 1.0 (net): worst is {worst['op']} at {ratio:.2f} -> {'met' if ratio <= 1.0 else 'NOT met'}"
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(
                {
                    "machine": machine(),
                    "iters": args.iters,
                    "repeats": args.repeats,
                    "empty_loop_us": loops,
                    "results": results,
                },
                handle,
                indent=2,
            )


if __name__ == "__main__":
    main()
