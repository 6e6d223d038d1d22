"""char-RNN training step: DL compiled (llvm) beside PyTorch (eager and torch.compile), JAX jit and the DL
interpreter, side by side in one run.

    python bench/llvm_charrnn.py [--steps 20] [--repeats 5] [--streams 16] [--hidden 64] [--threads 1] [--quick]

The model and step are examples/charrnn.dl's: bytes through a 256x16 embedding into an LSTM cell (hidden
64, PyTorch's parameter layout), a 64 -> 256 output layer, cross-entropy over a chunk of 16 steps of
`--streams` parallel streams, unrolled by a DL `for` loop; one step is the loss's value and gradient
(`value_and_grad`, reverse mode through the time loop, its states kept on a tape) and an Adam update (lr
0.01). PyTorch eager does the same with nn.functional ops and an LSTMCell-style Python loop, autograd and
torch.optim.Adam; torch.compile (Inductor) compiles that chunk's loss (and so its backward) and the
optimizer's step; JAX jits the step (`lax.scan` over time, `jax.value_and_grad`, Adam by hand with torch's
formulas). All start from the same weights.

Timing (bench/fair.py): threads pinned equal (`--threads`, default 1); the systems alternate, one run of
`--steps` steps each per round, for `--repeats` rounds; min and median ms per step, CPU time per wall time,
DL's ratio to each. Each system's first run (compilation included) is timed apart, from the initial weights;
the loss after it is reported for each.
"""

from __future__ import annotations

import fair  # first: it pins the threads before numpy, torch and jax load

THREADS = fair.pin_threads()

import argparse  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
from charrnn_model import LR, ROOT, SOURCE, data, torch_chunk_loss, weights  # noqa: E402
from dl import pipeline  # noqa: E402
from dl.codegen import native  # noqa: E402
from dl.interp.run import compile_program, run_guarded  # noqa: E402
from dl.runtime.calls import invoke  # noqa: E402
from dl.runtime.values import StructValue  # noqa: E402

torch = fair.load_torch(THREADS)
jax = fair.load_jax()

OURS = ["DL llvm", "DL interp"]


class DLStep:
    """The DL `train` function on one backend, called with the model as DL values."""

    def __init__(self, hidden: int, backend: str) -> None:
        path = str(ROOT / "bench" / "charrnn_bench.dl")
        loaded = pipeline.load(path, SOURCE.format(hidden=hidden))
        program, typed = pipeline.prepare(loaded)
        bodies = native.compile_program(typed, cache=False).bodies if backend == "llvm" else None
        self.backend = bodies
        compiler = compile_program(program, typed, bodies)
        state = compiler.states[path]
        self.train = state.cells["train"].value
        self.structs = state.structs, state.modules["nn"].structs

    def model(self, w: dict) -> StructValue:
        own, nn = self.structs
        cell = StructValue(nn["LSTM"], (w["weight_ih"], w["weight_hh"], w["bias_ih"], w["bias_hh"]))
        return StructValue(own["CharRNN"], (w["embed"], cell, w["w"], w["b"]))

    def run(self, model, state, x, y, n: int):
        h = np.zeros((x.shape[1], model.values[2].shape[0]), np.float32)
        c = np.zeros_like(h)
        return run_guarded(lambda: invoke(self.train, [model, state, x, y, h, c, n], self.train.span))


def zeros_like(value):
    if isinstance(value, StructValue):
        return StructValue(value.type, tuple(zeros_like(item) for item in value.values))
    return np.zeros_like(value)


def adam_state(model: StructValue) -> tuple:
    return (zeros_like(model), zeros_like(model), 0)


def torch_trainer(w: dict, x: np.ndarray, y: np.ndarray, n: int, compiled: bool) -> Callable[[], float]:
    """`n` steps per call, training on (no fresh start: torch.compile's compiled step belongs to its optimizer)."""
    params = {name: torch.tensor(value, requires_grad=True) for name, value in w.items()}
    optimiser = torch.optim.Adam(params.values(), lr=LR)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)

    def chunk_loss(x, y):
        return torch_chunk_loss(torch, params, x, y)

    loss_of, step = chunk_loss, optimiser.step
    if compiled:
        loss_of, step = torch.compile(chunk_loss), torch.compile(optimiser.step)

    def train() -> float:
        for _ in range(n):
            optimiser.zero_grad()
            loss = loss_of(tx, ty)
            loss.backward()
            step()
        return loss.item()

    return train


def jax_chunk_loss(p, x, y, h, c):
    jnp, nn = jax.numpy, jax.nn

    def time_step(carry, inputs):
        h, c = carry
        x_t, y_t = inputs
        gates = p["embed"][x_t] @ p["weight_ih"].T + p["bias_ih"] + h @ p["weight_hh"].T + p["bias_hh"]
        i, f, g, o = jnp.split(gates, 4, axis=1)
        c = nn.sigmoid(f) * c + nn.sigmoid(i) * jnp.tanh(g)
        h = nn.sigmoid(o) * jnp.tanh(c)
        log_probabilities = nn.log_softmax(h @ p["w"] + p["b"])
        return (h, c), -jnp.mean(jnp.take_along_axis(log_probabilities, y_t[:, None], axis=1))

    _, losses = jax.lax.scan(time_step, (h, c), (x, y))
    return jnp.mean(losses)


def jax_trainer(w: dict, x: np.ndarray, y: np.ndarray, n: int) -> Callable[[], float]:
    """`n` steps per call from the initial weights, each one jitted step."""

    @jax.jit
    def step(params, state, x, y):
        h = jax.numpy.zeros((x.shape[1], params["w"].shape[0]), jax.numpy.float32)
        value, grads = jax.value_and_grad(jax_chunk_loss)(params, x, y, h, h)
        params, state = fair.jax_adam(params, grads, state, LR)
        return params, state, value

    start = {name: jax.numpy.asarray(value) for name, value in w.items()}
    jx, jy = jax.numpy.asarray(x), jax.numpy.asarray(y)

    def train() -> float:
        params, state = start, fair.jax_adam_state(start)
        for _ in range(n):
            params, state, value = step(params, state, jx, jy)
        return float(value)

    return train


def builders(w: dict, x: np.ndarray, y: np.ndarray, options: argparse.Namespace) -> dict[str, Callable]:
    """Each installed system by name, as a function that builds its run of `--steps` steps (returning the loss)."""
    n = options.steps

    def dl(backend: str) -> Callable[[], float]:
        step = DLStep(options.hidden, backend)
        model = step.model(w)
        return lambda: float(step.run(model, adam_state(model), x, y, n)[2])

    systems: dict[str, Callable] = {"DL llvm": lambda: dl("llvm"), "DL interp": lambda: dl("interp")}
    if torch is not None:
        systems["torch eager"] = lambda: torch_trainer(w, x, y, n, compiled=False)
        systems["torch.compile"] = lambda: torch_trainer(w, x, y, n, compiled=True)
    if jax is not None:
        systems["JAX jit"] = lambda: jax_trainer(w, x, y, n)
    return systems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    fair.threads_option(parser)
    parser.add_argument("--steps", type=int, default=20, help="training steps per timed run")
    parser.add_argument("--repeats", type=int, default=5, help="rounds of the alternation")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--streams", type=int, default=16, help="the batch: parallel streams of text")
    parser.add_argument("--quick", action="store_true", help="2 rounds of 3 steps (a smoke run)")
    options = parser.parse_args()
    if options.quick:
        options.steps, options.repeats = 3, 2
    w = weights(options.hidden)
    x, y = data(options.streams)

    compile_times: dict[str, float] = {}
    losses: dict[str, Any] = {}
    systems = {}
    for name, build in builders(w, x, y, options).items():
        run = fair.first_call(name, build, compile_times, losses, may_fail=name == "torch.compile")
        if run is not None:
            systems[name] = run
    samples = fair.alternate(systems, options.repeats)

    shape = f"hidden {options.hidden}, {options.streams} streams x 16 steps, Adam"
    print(fair.header(f"char-RNN training step ({shape})", THREADS, torch, jax))
    print(f"\n{options.steps} steps per run, {options.repeats} rounds alternated; ms per step:\n")
    print(fair.table(samples, scale=1e3 / options.steps))
    print()
    print("\n".join(fair.ratio_lines(samples, OURS)))
    print(f"\nloss after the first {options.steps} steps: " + ", ".join(f"{k} {v:.6f}" for k, v in losses.items()))
    print("\nFirst run, untimed above (building, compiling, warming up):\n")
    print(fair.compile_table(compile_times))
    notes = fair.footer(samples, THREADS)
    if notes:
        print("\n" + notes)


if __name__ == "__main__":
    main()
