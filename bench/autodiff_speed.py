"""Cost of a DL gradient against its forward pass, beside numpy, PyTorch (eager and torch.compile) and JAX jit.

    python bench/autodiff_speed.py [--repeats 7] [--threads 1] [--quick] [--json FILE] [--profile WORKLOAD]

Five workloads, written once in DL (one module, below) and once each for PyTorch, JAX and numpy:

- mlp: a two-layer perceptron's cross-entropy loss (tanh hidden layer, log_softmax, mean over
  the batch); parameters in a struct `MLP { w1: f32[256, 512], b1, w2: f32[512, 10], b2 }`,
  x f32[256, 256], one-hot labels f32[256, 10]; gradient with respect to the struct;
- chain: `sum(tanh(x * w + 1.0) * sigmoid(x))` on f32[1000, 1000]; gradient wrt (x, w);
- rnn: `h = tanh(x_t @ wx + h @ wh)` over 32 time steps by a DL `for` loop, batch 16, input and
  hidden 64, loss `sum(h * h)` of the last h; gradient wrt (wx, wh);
- newton: Newton's iteration for sqrt(2) in a scalar `while` loop (f64; six iterations), bound by
  interpreter overhead, recorded for the record (not written for torch.compile or JAX: its loop
  depends on the values).
- hvp: a second derivative through a loop: the "forward" is `sum(grad(loop)(x) * v)`, a directional
  first derivative of `h = sin(h) * 0.9 + x * 0.1` iterated 300 times on f32[64] (loss `sum(h * h)`),
  and the gradient of that is a Hessian-vector product; PyTorch's double backward
  (`create_graph=True`) and JAX's `grad` of a `grad` through `lax.fori_loop` (not written for
  torch.compile, which breaks its graph at `torch.autograd.grad`; no numpy).

DL is called the way a host embeds it: the module is loaded, checked and differentiated once
(`pipeline.prepare`, which replaces `grad(...)` by generated DL functions, lang/autodiff/),
compiled once for the interpreter and once with the LLVM backend's bodies, and the wrapper
functions `NAME_forward` / `NAME_grad` are called through `invoke` with numpy arrays. A wrapper
only builds the struct from its tensor arguments and calls the function, or `grad(function,
wrt=...)`, so forward and gradient pay the same call overhead.

PyTorch: "forward" is the computation under `torch.no_grad()`; "grad" is the forward with the wrt
tensors requiring grad, then `torch.autograd.grad(loss, wrt)`; torch.compile (Inductor) compiles
the function, so AOTAutograd compiles its backward too. JAX: the function and `jax.grad` with the
same wrt, each under `jax.jit`. numpy runs the forward only.

Before timing, every system's forward value is checked against numpy's, and every gradient leaf
against PyTorch eager's (JAX's where torch is not installed) with `np.allclose`, rtol 1e-3, atol
1e-4 times the leaf's largest magnitude (the workloads are f32); the script stops if one differs.

Timing (bench/fair.py): threads pinned equal (`--threads`, default 1). Per workload, the systems'
forward and gradient calls alternate, round by round, for `--repeats` rounds, each timed run
after an untimed one of the same call (otherwise the spinning thread pool of the system timed just
before slowed the next by up to 2x at 2 threads). A timed run repeats the call to last about 20 ms
(once, for calls that take longer). Min and median ms per call, CPU time per wall time, grad/forward
per system (the project's requirement for DL: at most about 3-4x for tensor-heavy code), and DL's
gradient against each peer's. Each compiled system's first calls (tracing, compiling) are reported apart.

`--profile WORKLOAD` prints the functions with the most own time (cProfile) in DL's gradient
of that workload on the interpreter, and exits.

Not a test: nothing here is collected by pytest.
"""

from __future__ import annotations

import fair  # first: it pins the threads before numpy, torch and jax load

THREADS = fair.pin_threads()

import argparse  # noqa: E402
import cProfile  # noqa: E402
import io  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import pstats  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
from dl import pipeline  # noqa: E402
from dl.codegen import native  # noqa: E402
from dl.interp.run import compile_program  # noqa: E402
from dl.runtime.calls import invoke  # noqa: E402
from dl.runtime.values import StructValue  # noqa: E402

torch = fair.load_torch(THREADS)
jax = fair.load_jax()
jnp = jax.numpy if jax is not None else None

BATCH, IN, HIDDEN, CLASSES = 256, 256, 512, 10  # mlp
SIDE = 1000  # chain: f32[SIDE, SIDE]
STEPS, RNN_BATCH, RNN_IN, RNN_HIDDEN = 32, 16, 64, 64  # rnn
NEWTON_A = 2.0  # newton: sqrt(NEWTON_A)
HVP_SIDE, HVP_STEPS = 64, 300  # hvp

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

fn hvp_loop(x: f32[{HVP_SIDE}]) -> f32 {{
    let h = x
    let i = 0
    while i < {HVP_STEPS} {{
        h = sin(h) * 0.9 + x * 0.1
        i += 1
    }}
    return sum(h * h)
}}

fn hvp_directional(x: f32[{HVP_SIDE}], v: f32[{HVP_SIDE}]) -> f32 {{
    return sum(grad(hvp_loop)(x) * v)
}}

fn hvp_forward(x, v) {{
    return hvp_directional(x, v)
}}

fn hvp_grad(x, v) {{
    return grad(hvp_directional)(x, v)
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


def hvp_inputs(rng: np.random.Generator) -> tuple:
    return tuple(rng.uniform(-1.0, 1.0, HVP_SIDE).astype(np.float32) for _ in range(2))


def hvp_torch(x, v):
    """`sum(grad(loop)(x) * v)`; its graph is kept (`create_graph`) when `x` is differentiated again."""
    with torch.enable_grad():
        start = x if x.requires_grad else x.detach().requires_grad_()
        h = start
        for _ in range(HVP_STEPS):
            h = torch.sin(h) * 0.9 + start * 0.1
        (first,) = torch.autograd.grad((h * h).sum(), start, create_graph=x.requires_grad)
    return (first * v).sum()


def hvp_jax(x, v):
    def loop(x):
        h = jax.lax.fori_loop(0, HVP_STEPS, lambda _, h: jnp.sin(h) * 0.9 + x * 0.1, x)
        return jnp.sum(h * h)

    return jnp.sum(jax.grad(loop)(x) * v)


@dataclass(frozen=True)
class Workload:
    name: str
    shape: str  # shown in the table
    inputs: Callable[[np.random.Generator], tuple]  # the leaf arguments of NAME_forward / NAME_grad
    wrt: tuple[int, ...]  # leaf positions differentiated (the struct's four leaves for mlp)
    numpy: Callable | None
    torch: Callable
    jax: Callable | None  # None: not written for JAX (data-dependent while loop)
    compiles: bool = True  # written for torch.compile (newton's loop, on tensor values, is not)


WORKLOADS = (
    Workload(
        "mlp", "x f32[256,256], w1 [256,512], w2 [512,10]", mlp_inputs, (0, 1, 2, 3), mlp_numpy, mlp_torch, mlp_jax
    ),
    Workload("chain", "f32[1000,1000]", chain_inputs, (0, 1), chain_numpy, chain_torch, chain_jax),
    Workload("rnn", "T=32, batch 16, hidden 64", rnn_inputs, (0, 1), rnn_numpy, rnn_torch, rnn_jax),
    Workload("newton", "f64 scalar, 6 iterations", newton_inputs, (0,), newton_numpy, newton_torch, None, False),
    Workload("hvp", f"f32[{HVP_SIDE}], {HVP_STEPS} steps", hvp_inputs, (0,), None, hvp_torch, hvp_jax, False),
)


# ------------------------------------------------------------------------------------------ DL

OURS = ["DL interp", "DL llvm"]


def dl_functions(
    workloads: tuple[Workload, ...], arguments: dict[str, tuple], backend: str
) -> dict[str, tuple[Any, Any]]:
    """Load, check, differentiate and compile the module once for `backend` (llvm: no compile cache);
    NAME -> (NAME_forward, NAME_grad)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_autodiff_speed.dl")
    program = pipeline.load(path, SOURCE)
    calls = []
    for workload in workloads:
        types = tuple(pipeline.value_type(value) for value in arguments[workload.name])
        calls += [(f"{workload.name}_forward", types), (f"{workload.name}_grad", types)]
    program, typed = pipeline.prepare(program, tuple(calls))
    bodies = native.compile_program(typed, cache=False).bodies if backend == "llvm" else None
    cells = compile_program(program, typed, bodies).states[program.entry].cells
    return {w.name: (cells[f"{w.name}_forward"].value, cells[f"{w.name}_grad"].value) for w in workloads}


def dl_caller(function: Any, args: tuple) -> Callable[[], Any]:
    arguments = list(args)
    span = function.span
    return lambda: invoke(function, arguments, span)


def leaves(value: Any) -> list[np.ndarray]:
    """A gradient (a DL struct, a tuple or list, one tensor of any system) as a flat list of arrays, in order."""
    if isinstance(value, StructValue):
        return [leaf for item in value.values for leaf in leaves(item)]
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in leaves(item)]
    if hasattr(value, "detach"):  # a torch tensor
        return [value.detach().numpy()]
    return [np.asarray(value)]


# ------------------------------------------------------------------------------------------ torch, JAX


def torch_callers(workload: Workload, args: tuple, wrap: Callable = lambda f: f) -> tuple[Callable, Callable]:
    """(forward, forward and backward) of the workload's torch function, `wrap`ped (torch.compile)."""

    def tensor(value: Any, requires_grad: bool) -> torch.Tensor:
        return torch.tensor(np.asarray(value)).requires_grad_(requires_grad)

    plain = [tensor(value, False) for value in args]
    tracked = [tensor(value, position in workload.wrt) for position, value in enumerate(args)]
    wrt = [tracked[position] for position in workload.wrt]
    function = wrap(workload.torch)

    def forward():
        with torch.no_grad():
            return function(*plain)

    def forward_backward():
        return torch.autograd.grad(function(*tracked), wrt)

    return forward, forward_backward


def jax_callers(workload: Workload, args: tuple) -> tuple[Callable, Callable]:
    arrays = [jnp.asarray(value) for value in args]
    forward = jax.jit(workload.jax)
    gradient = jax.jit(jax.grad(workload.jax, argnums=workload.wrt))
    return (
        lambda: forward(*arrays).block_until_ready(),
        lambda: jax.block_until_ready(gradient(*arrays)),
    )


# ------------------------------------------------------------------------------------------ systems, checks


@dataclass(frozen=True)
class System:
    """One system's calls for one workload: the forward, and the gradient (None: numpy has none)."""

    forward: Callable[[], Any]
    gradient: Callable[[], Any] | None

    def __call__(self) -> tuple[Any, Any]:
        return self.forward(), self.gradient() if self.gradient else None


def builders(workload: Workload, args: tuple, dl: dict[str, dict]) -> dict[str, Callable[[], System]]:
    """Each installed system that has this workload, as a function that builds its calls."""
    systems = {
        name: (lambda functions=functions: System(*(dl_caller(f, args) for f in functions[workload.name])))
        for name, functions in dl.items()
    }
    if workload.numpy is not None:
        systems["numpy"] = lambda: System(lambda: workload.numpy(*args), None)
    if torch is not None:
        systems["torch eager"] = lambda: System(*torch_callers(workload, args))
        if workload.compiles:
            systems["torch.compile"] = lambda: System(*torch_callers(workload, args, torch.compile))
    if jax is not None and workload.jax is not None:
        systems["JAX jit"] = lambda: System(*jax_callers(workload, args))
    return systems


def check(workload: Workload, results: dict[str, tuple[Any, Any]]) -> None:
    """Stop with a message if a system's forward value differs from numpy's (the first system's, without
    numpy), or its gradient from torch eager's (JAX's, without torch)."""
    reference_name = "numpy" if "numpy" in results else next(iter(results))
    expected = float(results[reference_name][0])
    gradient_name = next((name for name in ("torch eager", "JAX jit") if name in results), None)
    if gradient_name is None:
        print(f"{workload.name}: gradients not checked (neither torch nor JAX is installed)", file=sys.stderr)
    for name, (value, gradient) in results.items():
        if not np.isclose(float(value), expected, rtol=1e-4, atol=1e-6):
            sys.exit(f"{workload.name}: {name}'s forward {float(value)!r} differs from {reference_name}'s {expected!r}")
        if gradient is None or gradient_name is None:
            continue
        got, want = leaves(gradient), leaves(results[gradient_name][1])
        if len(got) != len(want):
            sys.exit(f"{workload.name}: {name}'s gradient has {len(got)} leaves, {gradient_name}'s {len(want)}")
        for index, (mine, theirs) in enumerate(zip(got, want, strict=True)):
            scale = float(np.max(np.abs(theirs))) if theirs.size else 0.0
            if mine.shape != theirs.shape or not np.allclose(mine, theirs, rtol=1e-3, atol=1e-4 * scale):
                worst = float(np.max(np.abs(mine - theirs))) if mine.shape == theirs.shape else math.nan
                sys.exit(
                    f"{workload.name}: {name}'s gradient leaf {index} differs from {gradient_name}'s "
                    f"(shapes {mine.shape} / {theirs.shape}, largest difference {worst:.3g}, scale {scale:.3g})"
                )


# ------------------------------------------------------------------------------------------ timing


def measure(workloads: tuple[Workload, ...], repeats: int, target: float) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    arguments = {w.name: w.inputs(rng) for w in workloads}
    module_times, dl = {}, {}
    for name, backend in (("DL interp", "interp"), ("DL llvm", "llvm")):
        start = time.perf_counter()
        dl[name] = dl_functions(workloads, arguments, backend)
        module_times[name] = time.perf_counter() - start
    rows = []
    for workload in workloads:
        args = arguments[workload.name]
        compile_times: dict[str, float] = {}
        results: dict[str, Any] = {}
        systems = {}
        for name, build in builders(workload, args, dl).items():
            built = fair.first_call(name, build, compile_times, results, may_fail=name == "torch.compile")
            if built is not None:
                systems[name] = built
        check(workload, results)
        calls = {}
        for name, system in systems.items():
            calls[f"{name} fwd"] = system.forward
            if system.gradient is not None:
                calls[f"{name} grad"] = system.gradient
        counts = {key: fair.calls_for(function, target) for key, function in calls.items()}
        samples = fair.alternate(calls, repeats, counts, warm=True)
        rows.append({"workload": workload, "systems": list(systems), "samples": samples, "compile": compile_times})
        if sys.stderr.isatty():
            print(f"  measured {workload.name}", file=sys.stderr, flush=True)
    return {"rows": rows, "module_times": module_times}


def profile(workload: Workload, top: int = 20) -> None:
    rng = np.random.default_rng(0)
    arguments = {w.name: w.inputs(rng) for w in WORKLOADS}
    dl = dl_functions(WORKLOADS, arguments, "interp")
    dl_grad = dl_caller(dl[workload.name][1], arguments[workload.name])
    dl_grad()
    calls = fair.calls_for(dl_grad, 0.5)
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


def table(row: dict) -> str:
    """Markdown for one workload: per system, forward and gradient min and median ms, grad/fwd, CPU/wall."""
    samples = row["samples"]
    lines = [
        "| system | fwd min ms | fwd median ms | grad min ms | grad median ms | grad/fwd (min) | CPU/wall (grad) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name in row["systems"]:
        forward, gradient = samples[f"{name} fwd"], samples.get(f"{name} grad")
        cells = [fair.number(forward.min * 1e3), fair.number(forward.median * 1e3)]
        if gradient is None:
            cells += ["–", "–", "–", f"{forward.cpu_per_wall:.2f} (fwd)"]
        else:
            cells += [
                fair.number(gradient.min * 1e3),
                fair.number(gradient.median * 1e3),
                f"{gradient.min / forward.min:.2f}",
                f"{gradient.cpu_per_wall:.2f}",
            ]
        lines.append(f"| {name} | {' | '.join(cells)} |")
    return "\n".join(lines)


def gradient_ratios(row: dict) -> list[str]:
    """DL's gradient against each peer's gradient (fwd+bwd)."""
    gradients = {name[: -len(" grad")]: s for name, s in row["samples"].items() if name.endswith(" grad")}
    return fair.ratio_lines(gradients, OURS)


def report(result: dict, repeats: int, target: float) -> None:
    print(fair.header("gradient cost", THREADS, torch, jax))
    print(
        f"# {repeats} rounds alternated; ms per call (a timed run repeats a call to last about {target * 1e3:.0f} ms)"
    )
    for row in result["rows"]:
        workload = row["workload"]
        print(f"\n## {workload.name}: {workload.shape}\n")
        print(table(row))
        print()
        print("\n".join(gradient_ratios(row)))
        forward, gradient = row["samples"].get("DL interp fwd"), row["samples"].get("DL interp grad")
        grad_ratio = gradient.min / forward.min
        verdict = "met" if grad_ratio <= 4.0 else "NOT met"
        print(f"DL interp grad/forward {grad_ratio:.2f} -> goal <= ~3-4x {verdict}")
        firsts = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in row["compile"].items())
        print(f"first calls (forward and gradient, compiling included): {firsts}")
    modules = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in result["module_times"].items())
    print(f"\nDL module prepared (checked, differentiated, compiled) once for all workloads: {modules}")
    samples = {f"{row['workload'].name}: {name}": s for row in result["rows"] for name, s in row["samples"].items()}
    notes = fair.footer(samples, THREADS)
    if notes:
        print("\n" + notes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    fair.threads_option(parser)
    parser.add_argument("--repeats", type=int, default=7, help="rounds of the alternation")
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
    result = measure(WORKLOADS, args.repeats, target)
    report(result, args.repeats, target)
    if args.json:
        rows = {
            row["workload"].name: {"ms_per_call": fair.summary(row["samples"]), "first_calls_s": row["compile"]}
            for row in result["rows"]
        }
        fair.write_json(
            args.json,
            {"threads": THREADS, "repeats": args.repeats, "workloads": rows, "module_s": result["module_times"]},
        )


if __name__ == "__main__":
    main()
