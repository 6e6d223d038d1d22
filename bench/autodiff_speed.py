"""Cost of a DL gradient against its forward pass, beside PyTorch eager (and numpy, and JAX if installed).

    python bench/autodiff_speed.py [--repeats 7] [--quick] [--json FILE] [--profile WORKLOAD]

Four workloads, written once in DL (one module, below) and once each for PyTorch and numpy:

- mlp: a two-layer perceptron's cross-entropy loss (tanh hidden layer, log_softmax, mean over
  the batch); parameters in a struct `MLP { w1: f32[256, 512], b1, w2: f32[512, 10], b2 }`,
  x f32[256, 256], one-hot labels f32[256, 10]; gradient with respect to the struct;
- chain: `sum(tanh(x * w + 1.0) * sigmoid(x))` on f32[1000, 1000]; gradient wrt (x, w);
- rnn: `h = tanh(x_t @ wx + h @ wh)` over 32 time steps by a DL `for` loop, batch 16, input and
  hidden 64, loss `sum(h * h)` of the last h; gradient wrt (wx, wh);
- newton: Newton's iteration for sqrt(2) in a scalar `while` loop (f64; six iterations), bound by
  interpreter overhead, recorded for the record.

DL is called the way a host embeds it: the module is loaded, checked and differentiated once
(`pipeline.prepare`, which replaces `grad(...)` by generated DL functions, lang/autodiff/),
compiled once, and the wrapper functions `NAME_forward` / `NAME_grad` are called through
`invoke` with numpy arrays. A wrapper only builds the struct from its tensor arguments and calls
the function, or `grad(function, wrt=...)`, so forward and gradient pay the same call overhead.

PyTorch (CPU, eager): "forward" is the same computation under `torch.no_grad()`; "fwd+bwd" is
the forward with the wrt tensors requiring grad, then `torch.autograd.grad(loss, wrt)`. numpy
runs the forward only. JAX is measured only if `import jax` works (forward, and
`jax.grad` with the same wrt, both under `jax.jit`, skipped otherwise).

Before timing, the DL forward value is checked against numpy's and torch's, and every DL gradient
leaf against torch's (`np.allclose`, rtol 1e-3, atol 1e-4 times the leaf's largest magnitude, as
the workloads are f32); the script stops with a message if one differs.

Timing: every measurement is the best of `--repeats` timed runs (time.perf_counter, gc off), the
systems interleaved run by run so drift hits all alike, after one warm-up call each. A timed run
repeats the call enough times to last about 20 ms (once, for calls that take longer), and the
time is reported per call, in ms. Ratios: grad/forward of each system (the project's requirement
for DL: at most about 3-4x for tensor-heavy code), and DL grad / torch fwd+bwd.

`--profile WORKLOAD` prints the functions with the most own time (cProfile) in DL's gradient
of that workload, and exits.

Not a test: nothing here is collected by pytest.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import math
import os
import platform
import pstats
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from dl import pipeline
from dl.interp.run import compile_program
from dl.runtime.calls import invoke
from dl.runtime.values import StructValue

try:  # JAX is optional: measured only where it is installed
    import jax
    import jax.numpy as jnp
except ImportError:
    jax = None
    jnp = None

BATCH, IN, HIDDEN, CLASSES = 256, 256, 512, 10  # mlp
SIDE = 1000  # chain: f32[SIDE, SIDE]
STEPS, RNN_BATCH, RNN_IN, RNN_HIDDEN = 32, 16, 64, 64  # rnn
NEWTON_A = 2.0  # newton: sqrt(NEWTON_A)

SOURCE = f"""
struct MLP {{ w1: f32[{IN}, {HIDDEN}], b1: f32[{HIDDEN}], w2: f32[{HIDDEN}, {CLASSES}], b2: f32[{CLASSES}] }}

fn mlp(m: MLP, x: f32[B, {IN}], y: f32[B, {CLASSES}]) -> f32 {{
    let h = tanh(x @ m.w1 + m.b1)
    let logits = h @ m.w2 + m.b2
    return -mean(sum(y * log_softmax(logits), axis=1))
}}

fn chain(x: f32[N, M], w: f32[N, M]) -> f32 {{
    return sum(tanh(x * w + 1.0) * sigmoid(x))
}}

fn rnn(
    wx: f32[{RNN_IN}, {RNN_HIDDEN}], wh: f32[{RNN_HIDDEN}, {RNN_HIDDEN}], xs: f32[T, {RNN_BATCH}, {RNN_IN}]
) -> f32 {{
    let h = zeros({RNN_BATCH}, {RNN_HIDDEN})
    for x in xs {{
        h = tanh(x @ wx + h @ wh)
    }}
    return sum(h * h)
}}

fn newton(a: f64) -> f64 {{
    let y = a
    while abs(y * y - a) > 1e-12 {{
        y = 0.5 * (y + a / y)
    }}
    return y
}}

fn mlp_forward(w1, b1, w2, b2, x, y) {{
    return mlp(MLP {{ w1: w1, b1: b1, w2: w2, b2: b2 }}, x, y)
}}

fn mlp_grad(w1, b1, w2, b2, x, y) {{
    return grad(mlp)(MLP {{ w1: w1, b1: b1, w2: w2, b2: b2 }}, x, y)
}}

fn chain_forward(x, w) {{
    return chain(x, w)
}}

fn chain_grad(x, w) {{
    return grad(chain, wrt=(0, 1))(x, w)
}}

fn rnn_forward(wx, wh, xs) {{
    return rnn(wx, wh, xs)
}}

fn rnn_grad(wx, wh, xs) {{
    return grad(rnn, wrt=(0, 1))(wx, wh, xs)
}}

fn newton_forward(a) {{
    return newton(a)
}}

fn newton_grad(a) {{
    return grad(newton)(a)
}}
"""


# ------------------------------------------------------------------------------------------ workloads


def mlp_inputs(rng: np.random.Generator) -> tuple:
    labels = rng.integers(0, CLASSES, BATCH)
    return (
        (rng.standard_normal((IN, HIDDEN)) / math.sqrt(IN)).astype(np.float32),
        np.zeros(HIDDEN, np.float32),
        (rng.standard_normal((HIDDEN, CLASSES)) / math.sqrt(HIDDEN)).astype(np.float32),
        np.zeros(CLASSES, np.float32),
        rng.standard_normal((BATCH, IN)).astype(np.float32),
        np.eye(CLASSES, dtype=np.float32)[labels],
    )


def mlp_numpy(w1, b1, w2, b2, x, y):
    h = np.tanh(x @ w1 + b1)
    logits = h @ w2 + b2
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return -np.mean(np.sum(y * log_probs, axis=1))


def mlp_torch(w1, b1, w2, b2, x, y):
    h = torch.tanh(x @ w1 + b1)
    logits = h @ w2 + b2
    return -torch.mean(torch.sum(y * torch.log_softmax(logits, dim=1), dim=1))


def mlp_jax(w1, b1, w2, b2, x, y):
    h = jnp.tanh(x @ w1 + b1)
    logits = h @ w2 + b2
    return -jnp.mean(jnp.sum(y * jax.nn.log_softmax(logits, axis=1), axis=1))


def chain_inputs(rng: np.random.Generator) -> tuple:
    return tuple(rng.standard_normal((SIDE, SIDE)).astype(np.float32) for _ in range(2))


def chain_numpy(x, w):
    return np.sum(np.tanh(x * w + np.float32(1.0)) * (np.float32(1.0) / (np.float32(1.0) + np.exp(-x))))


def chain_torch(x, w):
    return torch.sum(torch.tanh(x * w + 1.0) * torch.sigmoid(x))


def chain_jax(x, w):
    return jnp.sum(jnp.tanh(x * w + 1.0) * jax.nn.sigmoid(x))


def rnn_inputs(rng: np.random.Generator) -> tuple:
    return (
        (rng.standard_normal((RNN_IN, RNN_HIDDEN)) / math.sqrt(RNN_IN)).astype(np.float32),
        (rng.standard_normal((RNN_HIDDEN, RNN_HIDDEN)) / math.sqrt(RNN_HIDDEN)).astype(np.float32),
        rng.standard_normal((STEPS, RNN_BATCH, RNN_IN)).astype(np.float32),
    )


def rnn_numpy(wx, wh, xs):
    h = np.zeros((RNN_BATCH, RNN_HIDDEN), np.float32)
    for x in xs:
        h = np.tanh(x @ wx + h @ wh)
    return np.sum(h * h)


def rnn_torch(wx, wh, xs):
    h = torch.zeros(RNN_BATCH, RNN_HIDDEN)
    for x in xs:
        h = torch.tanh(x @ wx + h @ wh)
    return torch.sum(h * h)


def rnn_jax(wx, wh, xs):
    h = jnp.zeros((RNN_BATCH, RNN_HIDDEN), jnp.float32)
    for x in xs:  # unrolled under jit, as a Python loop
        h = jnp.tanh(x @ wx + h @ wh)
    return jnp.sum(h * h)


def newton_inputs(rng: np.random.Generator) -> tuple:
    return (np.float64(NEWTON_A),)


def newton_numpy(a):
    y = a
    while abs(y * y - a) > 1e-12:
        y = 0.5 * (y + a / y)
    return y


newton_torch = newton_numpy  # the same Python loop on 0-d f64 tensors (`abs(...) > ...` reads the value)


@dataclass(frozen=True)
class Workload:
    name: str
    shape: str  # shown in the table
    inputs: Callable[[np.random.Generator], tuple]  # the leaf arguments of NAME_forward / NAME_grad
    wrt: tuple[int, ...]  # leaf positions differentiated (the struct's four leaves for mlp)
    numpy: Callable | None
    torch: Callable
    jax: Callable | None  # None: not written for JAX (data-dependent while loop)


WORKLOADS = (
    Workload(
        "mlp", "x f32[256,256], w1 [256,512], w2 [512,10]", mlp_inputs, (0, 1, 2, 3), mlp_numpy, mlp_torch, mlp_jax
    ),
    Workload("chain", "f32[1000,1000]", chain_inputs, (0, 1), chain_numpy, chain_torch, chain_jax),
    Workload("rnn", "T=32, batch 16, hidden 64", rnn_inputs, (0, 1), rnn_numpy, rnn_torch, rnn_jax),
    Workload("newton", "f64 scalar, 6 iterations", newton_inputs, (0,), newton_numpy, newton_torch, None),
)


# ------------------------------------------------------------------------------------------ DL


def dl_functions(workloads: tuple[Workload, ...], arguments: dict[str, tuple]) -> dict[str, tuple[Any, Any]]:
    """Load, check, differentiate and compile the module once; NAME -> (NAME_forward, NAME_grad)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_autodiff_speed.dl")
    program = pipeline.load(path, SOURCE)
    calls = []
    for workload in workloads:
        types = tuple(pipeline.value_type(value) for value in arguments[workload.name])
        calls += [(f"{workload.name}_forward", types), (f"{workload.name}_grad", types)]
    program, typed = pipeline.prepare(program, tuple(calls))
    cells = compile_program(program, typed).states[program.entry].cells
    return {w.name: (cells[f"{w.name}_forward"].value, cells[f"{w.name}_grad"].value) for w in workloads}


def dl_caller(function: Any, args: tuple) -> Callable[[], Any]:
    arguments = list(args)
    span = function.span
    return lambda: invoke(function, arguments, span)


def gradient_leaves(value: Any) -> list[np.ndarray]:
    """A DL gradient (a struct, a tuple or one tensor) as a flat list of arrays, in field order."""
    if isinstance(value, StructValue):
        return [leaf for item in value.values for leaf in gradient_leaves(item)]
    if isinstance(value, tuple):
        return [leaf for item in value for leaf in gradient_leaves(item)]
    return [np.asarray(value)]


# ------------------------------------------------------------------------------------------ torch, JAX


def torch_callers(workload: Workload, args: tuple) -> tuple[Callable, Callable]:
    def tensor(value: Any, requires_grad: bool) -> torch.Tensor:
        return torch.tensor(np.asarray(value)).requires_grad_(requires_grad)

    plain = [tensor(value, False) for value in args]
    tracked = [tensor(value, position in workload.wrt) for position, value in enumerate(args)]
    wrt = [tracked[position] for position in workload.wrt]
    function = workload.torch

    def forward():
        with torch.no_grad():
            return function(*plain)

    def forward_backward():
        return torch.autograd.grad(function(*tracked), wrt)

    return forward, forward_backward


def jax_callers(workload: Workload, args: tuple) -> tuple[Callable, Callable] | None:
    if jax is None or workload.jax is None:
        return None
    arrays = [jnp.asarray(value) for value in args]
    forward = jax.jit(workload.jax)
    gradient = jax.jit(jax.grad(workload.jax, argnums=workload.wrt))
    return (
        lambda: forward(*arrays).block_until_ready(),
        lambda: jax.block_until_ready(gradient(*arrays)),
    )


# ------------------------------------------------------------------------------------------ checks, timing


def check(workload: Workload, dl_forward: Callable, dl_grad: Callable, args: tuple, torch_fb: Callable) -> None:
    """Stop with a message if DL's forward value or gradient differs from numpy's and torch's."""
    value = float(dl_forward())
    expected = float(workload.numpy(*args)) if workload.numpy else value
    torch_value = float(workload.torch(*[torch.tensor(np.asarray(a)) for a in args]))
    for name, other in (("numpy", expected), ("torch", torch_value)):
        if not np.isclose(value, other, rtol=1e-4, atol=1e-6):
            sys.exit(f"{workload.name}: DL forward {value!r} differs from {name}'s {other!r}")
    got = gradient_leaves(dl_grad())
    want = [tensor.numpy() for tensor in torch_fb()]
    if len(got) != len(want):
        sys.exit(f"{workload.name}: DL gradient has {len(got)} leaves, torch's {len(want)}")
    for index, (mine, theirs) in enumerate(zip(got, want, strict=True)):
        scale = float(np.max(np.abs(theirs))) if theirs.size else 0.0
        if mine.shape != theirs.shape or not np.allclose(mine, theirs, rtol=1e-3, atol=1e-4 * scale):
            worst = float(np.max(np.abs(mine - theirs))) if mine.shape == theirs.shape else math.nan
            sys.exit(
                f"{workload.name}: DL gradient leaf {index} differs from torch's "
                f"(shapes {mine.shape} / {theirs.shape}, largest difference {worst:.3g}, scale {scale:.3g})"
            )


def calls_per_run(function: Callable, target: float) -> int:
    """How many calls make a timed run of about `target` seconds (at least one), from the fastest of 3 calls."""
    once = min(timed_run(function, 1) for _ in range(3))
    return max(1, math.ceil(target / max(once, 1e-9)))


def timed_run(function: Callable, calls: int) -> float:
    """Seconds per call over one run of `calls` calls."""
    start = time.perf_counter()
    for _ in range(calls):
        function()
    return (time.perf_counter() - start) / calls


def measure(workloads: tuple[Workload, ...], repeats: int, target: float) -> list[dict]:
    rng = np.random.default_rng(0)
    arguments = {w.name: w.inputs(rng) for w in workloads}
    dl = dl_functions(workloads, arguments)
    results = []
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for workload in workloads:
            args = arguments[workload.name]
            dl_forward, dl_grad = (dl_caller(function, args) for function in dl[workload.name])
            torch_forward, torch_fb = torch_callers(workload, args)
            check(workload, dl_forward, dl_grad, args, torch_fb)
            functions = {
                "dl_forward": dl_forward,
                "dl_grad": dl_grad,
                "torch_forward": torch_forward,
                "torch_fwd_bwd": torch_fb,
            }
            if workload.numpy is not None:
                functions["numpy_forward"] = lambda f=workload.numpy, a=args: f(*a)
            jaxed = jax_callers(workload, args)
            if jaxed is not None:
                functions["jax_forward"], functions["jax_grad"] = jaxed
            for function in functions.values():  # warm up (and compile, for JAX)
                function()
            calls = {key: calls_per_run(function, target) for key, function in functions.items()}
            times = dict.fromkeys(functions, math.inf)
            for _ in range(repeats):
                for key, function in functions.items():
                    # An untimed run first: the thread pool of the system timed before (numpy's BLAS, torch's
                    # OpenMP) stops spinning, and this system's threads are awake.
                    timed_run(function, calls[key])
                    times[key] = min(times[key], timed_run(function, calls[key]))
            row: dict[str, Any] = {"workload": workload.name, "shape": workload.shape}
            row.update({key: seconds * 1e3 for key, seconds in times.items()})  # ms per call
            row["calls"] = calls
            results.append(row)
            if sys.stderr.isatty():
                print(f"  measured {workload.name}", file=sys.stderr, flush=True)
    finally:
        if gc_was_enabled:
            gc.enable()
    return results


def profile(workload: Workload, top: int = 20) -> None:
    rng = np.random.default_rng(0)
    arguments = {w.name: w.inputs(rng) for w in WORKLOADS}
    dl = dl_functions(WORKLOADS, arguments)
    dl_grad = dl_caller(dl[workload.name][1], arguments[workload.name])
    dl_grad()
    calls = calls_per_run(dl_grad, 0.5)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        dl_grad()
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    print(f"# cProfile of DL grad, {workload.name}, {calls} calls (own time)")
    print(out.getvalue())


# ------------------------------------------------------------------------------------------ report


def ms(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.3f}" if value < 1 else f"{value:.2f}" if value < 10 else f"{value:.1f}"


def ratio(numerator: float | None, denominator: float | None) -> str:
    return "–" if numerator is None or denominator is None else f"{numerator / denominator:.2f}"


def table(results: list[dict]) -> str:
    lines = [
        "| workload | DL fwd ms | DL grad ms | DL grad/fwd | torch fwd ms | torch fwd+bwd ms | torch ratio "
        "| numpy fwd ms | DL grad / torch fwd+bwd |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in results:
        lines.append(
            f"| {row['workload']} | {ms(row['dl_forward'])} | {ms(row['dl_grad'])} "
            f"| {ratio(row['dl_grad'], row['dl_forward'])} | {ms(row['torch_forward'])} "
            f"| {ms(row['torch_fwd_bwd'])} | {ratio(row['torch_fwd_bwd'], row['torch_forward'])} "
            f"| {ms(row.get('numpy_forward'))} | {ratio(row['dl_grad'], row['torch_fwd_bwd'])} |"
        )
    return "\n".join(lines)


def jax_table(results: list[dict]) -> str:
    lines = ["| workload | JAX fwd ms | JAX grad ms | JAX ratio |", "|---|---:|---:|---:|"]
    for row in results:
        if "jax_forward" in row:
            lines.append(
                f"| {row['workload']} | {ms(row['jax_forward'])} | {ms(row['jax_grad'])} "
                f"| {ratio(row['jax_grad'], row['jax_forward'])} |"
            )
    return "\n".join(lines)


def machine() -> str:
    jax_version = f"jax {jax.__version__}" if jax is not None else "no jax"
    return (
        f"{platform.machine()}, nproc={os.cpu_count()}, Python {platform.python_version()}, "
        f"numpy {np.__version__}, torch {torch.__version__} (threads={torch.get_num_threads()}), {jax_version}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="timed runs per measurement; the best is kept")
    parser.add_argument("--quick", action="store_true", help="fewer repeats and shorter runs (a smoke run)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument(
        "--profile",
        metavar="WORKLOAD",
        choices=[w.name for w in WORKLOADS],
        help="cProfile DL's gradient of one workload",
    )
    args = parser.parse_args()
    if args.profile:
        profile(next(w for w in WORKLOADS if w.name == args.profile))
        return
    target = 0.02
    if args.quick:
        args.repeats, target = 2, 0.002
    results = measure(WORKLOADS, args.repeats, target)
    print(f"# gradient cost — {machine()}")
    print(f"# best of {args.repeats}; ms per call (a timed run repeats a call to last about {target * 1e3:.0f} ms)\n")
    for workload in WORKLOADS:
        print(f"- {workload.name}: {workload.shape}")
    print()
    print(table(results))
    if jax is None:
        print("\nJAX: skipped (`import jax` fails)")
    else:
        print("\nJAX (jit):\n")
        print(jax_table(results))
    print()
    for row in results:
        grad_ratio = row["dl_grad"] / row["dl_forward"]
        verdict = "met" if grad_ratio <= 4.0 else "NOT met"
        print(f"{row['workload']}: DL grad/forward {grad_ratio:.2f} -> goal <= ~3-4x {verdict}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"machine": machine(), "repeats": args.repeats, "results": results}, handle, indent=2)


if __name__ == "__main__":
    main()
