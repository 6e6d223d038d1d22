"""stdlib/optim.dl against torch.optim: 20 training steps of a small MLP in DL and in PyTorch.

The DL side computes gradients with `value_and_grad` inside a DL training loop; the torch side
uses autograd and torch.optim with the same data, hyperparameters and starting parameters.
The learning-rate schedules are held to torch.optim.lr_scheduler stepped on a dummy optimizer (and
`warmup_cosine_lr` to optax's formula), step by step, on the interpreter and compiled.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from importlib.util import find_spec

import numpy as np
import pytest
import torch
from dl import pipeline
from dl.lang.diagnostics import DiagnosticError

STEPS = 20

SOURCE = """
import optim

struct MLP { w1: DT[3, 4], b1: DT[4], w2: DT[4], b2: DT }

fn loss(m: MLP, x: DT[N, 3], y: DT[N]) -> DT {
    let h = tanh(x @ m.w1 + m.b1)
    let z = h @ m.w2 + m.b2
    return mean(log(1.0 + exp(-y * z)))
}

fn model(w1, b1, w2, b2) {
    return MLP { w1: w1, b1: b1, w2: w2, b2: b2 }
}

fn unpack(m: MLP) -> (DT[3, 4], DT[4], DT[4], DT) {
    return (m.w1, m.b1, m.w2, m.b2)
}

fn train_sgd(w1, b1, w2, b2, x, y, lr) {
    let m = model(w1, b1, w2, b2)
    for step in 0..STEPS {
        let (value, g) = value_and_grad(loss)(m, x, y)
        m = optim.sgd(m, g, lr)
    }
    return unpack(m)
}

fn train_momentum(w1, b1, w2, b2, x, y, lr, beta) {
    let m = model(w1, b1, w2, b2)
    let state = optim.momentum_init(m)
    for step in 0..STEPS {
        let (value, g) = value_and_grad(loss)(m, x, y)
        (m, state) = optim.momentum(m, g, state, lr, beta=beta)
    }
    return unpack(m)
}

fn train_sgd_decayed(w1, b1, w2, b2, x, y, lr, weight_decay) {
    let m = model(w1, b1, w2, b2)
    for step in 0..STEPS {
        let (value, g) = value_and_grad(loss)(m, x, y)
        m = optim.sgd(m, g, lr, weight_decay=weight_decay)
    }
    return unpack(m)
}

fn train_nesterov(w1, b1, w2, b2, x, y, lr, beta, weight_decay) {
    let m = model(w1, b1, w2, b2)
    let state = optim.momentum_init(m)
    for step in 0..STEPS {
        let (value, g) = value_and_grad(loss)(m, x, y)
        (m, state) = optim.momentum(m, g, state, lr, beta=beta, weight_decay=weight_decay, nesterov=true)
    }
    return unpack(m)
}

fn train_adam(w1, b1, w2, b2, x, y, lr, beta1, beta2, eps) {
    let m = model(w1, b1, w2, b2)
    let state = optim.adam_init(m)
    for step in 0..STEPS {
        let (value, g) = value_and_grad(loss)(m, x, y)
        (m, state) = optim.adam(m, g, state, lr=lr, beta1=beta1, beta2=beta2, eps=eps)
    }
    return unpack(m)
}

fn train_adamw(w1, b1, w2, b2, x, y, lr, beta1, beta2, eps, decay) {
    let m = model(w1, b1, w2, b2)
    let state = optim.adamw_init(m)
    for step in 0..STEPS {
        let (value, g) = value_and_grad(loss)(m, x, y)
        (m, state) = optim.adamw(m, g, state, lr=lr, beta1=beta1, beta2=beta2, eps=eps, weight_decay=decay)
    }
    return unpack(m)
}

fn train_rmsprop(w1, b1, w2, b2, x, y, lr, alpha, eps, decay) {
    let m = model(w1, b1, w2, b2)
    let state = optim.rmsprop_init(m)
    for step in 0..STEPS {
        let (value, g) = value_and_grad(loss)(m, x, y)
        (m, state) = optim.rmsprop(m, g, state, lr=lr, alpha=alpha, eps=eps, weight_decay=decay)
    }
    return unpack(m)
}

fn train_rmsprop_centered(w1, b1, w2, b2, x, y, lr, alpha, momentum) {
    let m = model(w1, b1, w2, b2)
    let state = optim.rmsprop_init(m)
    for step in 0..STEPS {
        let (value, g) = value_and_grad(loss)(m, x, y)
        (m, state) = optim.rmsprop(m, g, state, lr=lr, alpha=alpha, momentum=momentum, centered=true)
    }
    return unpack(m)
}

fn train_adagrad(w1, b1, w2, b2, x, y, lr, lr_decay, decay, eps, initial) {
    let m = model(w1, b1, w2, b2)
    let state = optim.adagrad_init(m, initial_accumulator_value=initial)
    for step in 0..STEPS {
        let (value, g) = value_and_grad(loss)(m, x, y)
        (m, state) = optim.adagrad(m, g, state, lr=lr, lr_decay=lr_decay, weight_decay=decay, eps=eps)
    }
    return unpack(m)
}

fn train_clipped(w1, b1, w2, b2, x, y, lr, max_norm) {
    let m = model(w1, b1, w2, b2)
    for step in 0..STEPS {
        let (value, g) = value_and_grad(loss)(m, x, y)
        m = optim.sgd(m, optim.clip_by_global_norm(g, max_norm), lr)
    }
    return unpack(m)
}

fn train_sgd_cosine(w1, b1, w2, b2, x, y, lr, min_lr) {
    let m = model(w1, b1, w2, b2)
    for step in 0..STEPS {
        let (value, g) = value_and_grad(loss)(m, x, y)
        m = optim.sgd(m, g, optim.cosine_lr(step, STEPS, lr, min_lr=min_lr))
    }
    return unpack(m)
}

fn train_adam_step_lr(w1, b1, w2, b2, x, y, lr, gamma, beta1, beta2, eps) {
    let m = model(w1, b1, w2, b2)
    let state = optim.adam_init(m)
    for step in 0..STEPS {
        let (value, g) = value_and_grad(loss)(m, x, y)
        let rate = optim.step_lr(step, 6, lr, gamma=gamma)
        (m, state) = optim.adam(m, g, state, lr=rate, beta1=beta1, beta2=beta2, eps=eps)
    }
    return unpack(m)
}

fn keeps_type(w1, b1, w2, b2, lr) {
    let m = model(w1, b1, w2, b2)
    let updated: MLP = optim.sgd(m, m, lr)
    let (moved, state) = optim.adam(m, m, optim.adam_init(m), lr=lr)
    let same: MLP = moved
    return updated.b2 + same.b2
}
""".replace("STEPS", str(STEPS))


def source_for(dtype: str) -> str:
    return SOURCE.replace("DT", dtype)


def start(dtype: type) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    params = [rng.normal(size=(3, 4)), rng.normal(size=4), rng.normal(size=4), np.array(0.1)]
    x = rng.normal(size=(16, 3))
    y = np.where(rng.normal(size=16) > 0, 1.0, -1.0)
    return [p.astype(dtype) for p in params], x.astype(dtype), y.astype(dtype)


def torch_train(params, x, y, make_optimizer, max_norm=None, make_scheduler=None) -> list[np.ndarray]:
    tensors = [torch.tensor(p, requires_grad=True) for p in params]
    optimizer = make_optimizer(tensors)
    scheduler = make_scheduler(optimizer) if make_scheduler is not None else None
    data, labels = torch.tensor(x), torch.tensor(y)
    for _ in range(STEPS):
        optimizer.zero_grad()
        w1, b1, w2, b2 = tensors
        hidden = torch.tanh(data @ w1 + b1)
        logits = hidden @ w2 + b2
        torch.mean(torch.log(1.0 + torch.exp(-labels * logits))).backward()
        if max_norm is not None:
            torch.nn.utils.clip_grad_norm_(tensors, max_norm)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
    return [t.detach().numpy() for t in tensors]


def dl_train(dtype: type, name: str, hyper: list[float]) -> list[np.ndarray]:
    params, x, y = start(dtype)
    program = pipeline.load("optim_test.dl", source_for(np.dtype(dtype).name.replace("float", "f")))
    scalars = [dtype(h) for h in hyper]
    return [np.asarray(p) for p in pipeline.call(program, name, [*params, x, y, *scalars])]


CASES = {
    "sgd": ([0.3], lambda ps: torch.optim.SGD(ps, lr=0.3)),
    "momentum": ([0.1, 0.8], lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.8)),
    "sgd_decayed": ([0.3, 0.05], lambda ps: torch.optim.SGD(ps, lr=0.3, weight_decay=0.05)),
    "nesterov": (
        [0.1, 0.8, 0.01],
        lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.8, nesterov=True, weight_decay=0.01),
    ),
    "adam": ([0.05, 0.85, 0.99, 1e-6], lambda ps: torch.optim.Adam(ps, lr=0.05, betas=(0.85, 0.99), eps=1e-6)),
    "adamw": (
        [0.05, 0.9, 0.995, 1e-7, 0.1],
        lambda ps: torch.optim.AdamW(ps, lr=0.05, betas=(0.9, 0.995), eps=1e-7, weight_decay=0.1),
    ),
    "rmsprop": (
        [0.01, 0.9, 1e-6, 0.02],
        lambda ps: torch.optim.RMSprop(ps, lr=0.01, alpha=0.9, eps=1e-6, weight_decay=0.02),
    ),
    "rmsprop_centered": (
        [0.005, 0.95, 0.7],
        lambda ps: torch.optim.RMSprop(ps, lr=0.005, alpha=0.95, momentum=0.7, centered=True),
    ),
    "adagrad": (
        [0.1, 0.05, 0.01, 1e-8, 0.1],
        lambda ps: torch.optim.Adagrad(
            ps, lr=0.1, lr_decay=0.05, weight_decay=0.01, eps=1e-8, initial_accumulator_value=0.1
        ),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_optimizer_matches_torch_in_f64(name: str) -> None:
    hyper, make_optimizer = CASES[name]
    params, x, y = start(np.float64)
    expected = torch_train(params, x, y, make_optimizer)
    found = dl_train(np.float64, f"train_{name}", hyper)
    for got, want, start_value in zip(found, expected, params, strict=True):
        assert got.dtype == np.float64
        assert not np.allclose(want, start_value)  # the parameters did move
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", sorted(CASES))
def test_optimizer_matches_torch_in_f32(name: str) -> None:
    hyper, make_optimizer = CASES[name]
    params, x, y = start(np.float32)
    expected = torch_train(params, x, y, make_optimizer)
    found = dl_train(np.float32, f"train_{name}", hyper)
    for got, want in zip(found, expected, strict=True):
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("max_norm", [0.05, 100.0])
def test_clipped_training_matches_clip_grad_norm(max_norm: float) -> None:
    params, x, y = start(np.float64)
    expected = torch_train(params, x, y, lambda ps: torch.optim.SGD(ps, lr=0.5), max_norm=max_norm)
    found = dl_train(np.float64, "train_clipped", [0.5, max_norm])
    for got, want in zip(found, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


CLIP_SOURCE = """
import optim

fn clip(a, b, max_norm) {
    return optim.clip_by_global_norm((a, b), max_norm)
}

fn norm(a, b) {
    return optim.global_norm((a, b))
}
"""


@pytest.mark.parametrize("max_norm", [0.5, 3.0, 1000.0])
def test_clip_by_global_norm_matches_torch(max_norm: float) -> None:
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(3, 5)), rng.normal(size=7)
    program = pipeline.load("clip_test.dl", CLIP_SOURCE)
    clipped = pipeline.call(program, "clip", [a, b, np.float64(max_norm)])
    tensors = [torch.zeros(3, 5, dtype=torch.float64), torch.zeros(7, dtype=torch.float64)]
    tensors[0].grad, tensors[1].grad = torch.tensor(a), torch.tensor(b)
    total = torch.nn.utils.clip_grad_norm_(tensors, max_norm)
    np.testing.assert_allclose(pipeline.call(program, "norm", [a, b]), total.item(), rtol=1e-12)
    for got, tensor in zip(clipped, tensors, strict=True):
        np.testing.assert_allclose(got, tensor.grad.numpy(), rtol=1e-12)


def test_a_parameter_struct_keeps_its_type() -> None:
    params, _, _ = start(np.float64)
    program = pipeline.load("optim_test.dl", source_for("f64"))
    result = pipeline.call(program, "keeps_type", [*params, np.float64(0.1)])
    assert np.asarray(result).dtype == np.float64


def diagnostic_codes(source: str) -> list[str]:
    with pytest.raises(DiagnosticError) as raised:
        pipeline.prepare(pipeline.load("bad.dl", source))
    return [d.code for d in raised.value.diagnostics if d.is_error]


def test_integer_leaves_in_a_struct_are_e0317() -> None:
    """The optimizer averages the gradients over the ranks first (`allreduce_mean`), which takes floats only."""
    source = """
import optim
struct P { w: i64[2], b: f32[2] }
fn main() {
    let p = P { w: [1, 2], b: [1.0, 2.0] }
    print(optim.sgd(p, p, 0.1))
}
"""
    assert diagnostic_codes(source) == ["E0317"]


@pytest.mark.parametrize(
    "call",
    [
        "optim.momentum(p, p, optim.momentum_init(p), 0.1)",
        "optim.adam(p, p, optim.adam_init(p))",
        "optim.adamw(p, p, optim.adamw_init(p))",
        "optim.clip_by_global_norm(p, 1.0)",
    ],
)
def test_integer_leaves_are_a_checker_error(call: str) -> None:
    source = f"""
import optim
struct P {{ w: i64[2], b: f32[2] }}
fn main() {{
    let p = P {{ w: [1, 2], b: [1.0, 2.0] }}
    print({call})
}}
"""
    codes = diagnostic_codes(source)
    assert codes and set(codes) <= {"E0301", "E0305", "E0317"}
    assert codes[0] in ("E0301", "E0317")


# ------------------------------------------------------------------------------ learning-rate schedules

SCHEDULED_CASES = {
    "sgd_cosine": (
        [0.5, 0.05],
        lambda ps: torch.optim.SGD(ps, lr=0.5),
        lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=STEPS, eta_min=0.05),
    ),
    "adam_step_lr": (
        [0.05, 0.5, 0.85, 0.99, 1e-6],
        lambda ps: torch.optim.Adam(ps, lr=0.05, betas=(0.85, 0.99), eps=1e-6),
        lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=6, gamma=0.5),
    ),
}


@pytest.mark.parametrize("name", sorted(SCHEDULED_CASES))
def test_a_schedule_in_the_training_loop_matches_a_torch_scheduler(name: str) -> None:
    """The schedule's value at `step` is the rate torch's scheduler gives the step after `step` calls."""
    hyper, make_optimizer, make_scheduler = SCHEDULED_CASES[name]
    params, x, y = start(np.float64)
    expected = torch_train(params, x, y, make_optimizer, make_scheduler=make_scheduler)
    found = dl_train(np.float64, f"train_{name}", hyper)
    for got, want in zip(found, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


# Each schedule is called at every step of `steps` from a DL loop; `n` and `m` are its step counts, `a`
# and `b` its other rates. The default rates are f32 (as the docs say), so those calls run in f32 only.
SCHEDULE_SOURCE = """
import optim

fn rates(steps, lr, a, b, n: i64, m: i64) {
    let found = zeros_like(steps) * lr
    for i in 0..len(steps) {
        let step = steps[i]
        found[i] = CALL
    }
    return found
}
"""

LR_SCHEDULER = torch.optim.lr_scheduler


@dataclass(frozen=True)
class Schedule:
    call: str  # the DL call, of `step`, `n`, `lr`, `a` and `b`
    n: int
    scheduler: Callable  # torch's, made from (optimizer, n, a, b)
    a: float = 0.0
    b: float = 0.0
    holds_after_n: bool = False  # the rate after step n is step n's, where torch's moves on
    f32_only: bool = False  # leaves a rate to its default, which is f32


SCHEDULES = {
    "cosine": Schedule(
        "optim.cosine_lr(step, n, lr, min_lr=a)",
        40,
        lambda o, n, a, b: LR_SCHEDULER.CosineAnnealingLR(o, T_max=n, eta_min=a),
        a=0.002,
        holds_after_n=True,
    ),
    "cosine_to_zero": Schedule(
        "optim.cosine_lr(step, n, lr)",
        25,
        lambda o, n, a, b: LR_SCHEDULER.CosineAnnealingLR(o, T_max=n),
        holds_after_n=True,
    ),
    "step": Schedule(
        "optim.step_lr(step, n, lr, gamma=a)", 7, lambda o, n, a, b: LR_SCHEDULER.StepLR(o, step_size=n, gamma=a), a=0.5
    ),
    "step_default": Schedule(
        "optim.step_lr(step, n, lr)", 5, lambda o, n, a, b: LR_SCHEDULER.StepLR(o, step_size=n), f32_only=True
    ),
    "exponential": Schedule(
        "optim.exponential_lr(step, lr, a)", 10, lambda o, n, a, b: LR_SCHEDULER.ExponentialLR(o, gamma=a), a=0.9
    ),
    "linear": Schedule(
        "optim.linear_lr(step, n, lr, start_factor=a, end_factor=b)",
        12,
        lambda o, n, a, b: LR_SCHEDULER.LinearLR(o, start_factor=a, end_factor=b, total_iters=n),
        a=0.8,
        b=0.1,
    ),
    "linear_default": Schedule(
        "optim.linear_lr(step, n, lr)", 9, lambda o, n, a, b: LR_SCHEDULER.LinearLR(o, total_iters=n), f32_only=True
    ),
}
BACKENDS = [
    "interp",
    pytest.param("llvm", marks=pytest.mark.skipif(find_spec("llvmlite") is None, reason="needs llvmlite")),
]
SCHEDULE_TOLERANCE = {np.float32: 1e-6, np.float64: 1e-12}
LR = 0.1


def schedule_steps(n: int) -> np.ndarray:
    """0, 1, the middle, the steps around `n` (where a schedule ends or first steps) and some past it."""
    return np.array(sorted({0, 1, 2, n // 2, n - 1, n, n + 1, 2 * n - 1, 2 * n, 3 * n + 1, 10 * n}), dtype=np.int64)


def dl_rates(call: str, steps: np.ndarray, dtype: type, a: float, b: float, n: int, m: int, backend: str) -> np.ndarray:
    program = pipeline.load("schedule_test.dl", SCHEDULE_SOURCE.replace("CALL", call))
    arguments = [steps, dtype(LR), dtype(a), dtype(b), n, m]
    return np.asarray(pipeline.call(program, "rates", arguments, backend=backend))


def torch_rates(make_scheduler, steps: np.ndarray, lr: float) -> np.ndarray:
    """The learning rate torch's scheduler holds after `step` calls of `scheduler.step()`, for each step."""
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)
    scheduler = make_scheduler(optimizer)
    held = []
    for _ in range(int(steps.max()) + 1):
        held.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return np.array(held)[steps]


def assert_rates(got: np.ndarray, want: np.ndarray, dtype: type) -> None:
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_allclose(got, want, rtol=SCHEDULE_TOLERANCE[dtype], atol=1e-12 * LR)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", SCHEDULES)
def test_schedule_matches_torchs_scheduler(name: str, dtype: type, backend: str) -> None:
    """The reference gets the rates DL got (f32 values for an f32 run, widened exactly), so that the
    tolerance measures the schedule's rounding, not its inputs'."""
    schedule = SCHEDULES[name]
    if dtype is np.float64 and schedule.f32_only:
        pytest.skip("the defaults are f32 rates: an f64 schedule is given its rates")
    steps = schedule_steps(schedule.n)
    lr, a, b = (float(dtype(value)) for value in (LR, schedule.a, schedule.b))
    expected = torch_rates(
        lambda o: schedule.scheduler(o, schedule.n, a, b),
        np.minimum(steps, schedule.n) if schedule.holds_after_n else steps,
        lr,
    )
    found = dl_rates(schedule.call, steps, dtype, schedule.a, schedule.b, schedule.n, 0, backend)
    assert_rates(found, expected, dtype)


def test_torchs_cosine_annealing_climbs_back_where_cosine_lr_stays() -> None:
    """Past T_max torch's recursion follows the cosine back up (period 2 T_max); cosine_lr holds min_lr."""
    steps = np.array([30, 35, 40, 60], dtype=np.int64)
    climbing = torch_rates(lambda o: LR_SCHEDULER.CosineAnnealingLR(o, T_max=20, eta_min=0.01), steps, LR)
    np.testing.assert_allclose(climbing, [0.055, 0.0868198, LR, 0.01], rtol=1e-6)
    found = dl_rates("optim.cosine_lr(step, n, lr, min_lr=a)", steps, np.float64, 0.01, 0.0, 20, 0, "interp")
    np.testing.assert_array_equal(found, 0.01)


def optax_warmup_cosine(step: int, warmup: int, total: int, peak: float, end: float) -> float:
    """optax.warmup_cosine_decay_schedule(init_value=0, peak_value=peak, warmup_steps=warmup, decay_steps=total,
    end_value=end) at `step`, from optax's definitions: linear_schedule(0, peak, warmup) before step `warmup`,
    then cosine_decay_schedule(peak, total - warmup, alpha=end / peak) at step - warmup, whose count is clipped
    to its decay steps."""
    if step < warmup:
        return peak * min(step, warmup) / warmup
    count = min(step - warmup, total - warmup)
    alpha = end / peak
    return peak * ((1 - alpha) * 0.5 * (1 + math.cos(math.pi * count / (total - warmup))) + alpha)


def warmup_schedule_steps(warmup: int, total: int) -> np.ndarray:
    """0, 1, the steps around the end of the warm-up and of the schedule, the middles and some past the end."""
    around = {warmup - 1, warmup, warmup + 1, total - 1, total, total + 1}
    return np.array(sorted({0, 1, warmup // 2, (warmup + total) // 2, 3 * total} | around - {-1}), dtype=np.int64)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize(("warmup", "total", "end"), [(10, 50, 0.001), (0, 30, 0.0), (4, 5, 0.01)])
def test_warmup_cosine_lr_is_optaxs_schedule(warmup: int, total: int, end: float, dtype: type, backend: str) -> None:
    """0 at step 0 (unless there is no warm-up), lr * step / warmup during the warm-up, lr at step `warmup`,
    then torch's cosine annealing over total - warmup steps, and `end` from step `total` on."""
    steps = warmup_schedule_steps(warmup, total)
    peak, end = float(dtype(LR)), float(dtype(end))
    call = "optim.warmup_cosine_lr(step, m, n, lr, min_lr=a)" if end else "optim.warmup_cosine_lr(step, m, n, lr)"
    found = dl_rates(call, steps, dtype, end, 0.0, total, warmup, backend)
    assert_rates(found, [optax_warmup_cosine(int(s), warmup, total, peak, end) for s in steps], dtype)
    decaying = np.minimum(steps[steps >= warmup] - warmup, total - warmup)
    torch_cosine = lambda o: LR_SCHEDULER.CosineAnnealingLR(o, T_max=total - warmup, eta_min=end)  # noqa: E731
    assert_rates(found[steps >= warmup], torch_rates(torch_cosine, decaying, peak), dtype)
    assert found[steps == warmup] == dtype(LR) and found[0] == (0.0 if warmup else dtype(LR))


def test_an_f64_rate_gives_f64_and_a_literal_f32() -> None:
    source = """
import optim
fn rates() {
    return (optim.cosine_lr(3, 10, 0.1), optim.cosine_lr(3, 10, 0.1f64, min_lr=0.0f64), optim.step_lr(3, 2, 1))
}
"""
    literal, wide, integer = pipeline.call(pipeline.load("schedule_dtypes.dl", source), "rates", [])
    assert (np.asarray(literal).dtype, np.asarray(wide).dtype, np.asarray(integer).dtype) == (
        np.float32,
        np.float64,
        np.float32,
    )
    np.testing.assert_allclose(wide, 0.1 * (1 + math.cos(math.pi * 0.3)) / 2, rtol=1e-15)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("optim.cosine_lr(step, 0, lr)", "cosine_lr: total must be positive"),
        ("optim.cosine_lr(step - 1, 10, lr)", "cosine_lr: step must not be negative"),
        ("optim.warmup_cosine_lr(step, 10, 10, lr)", "warmup_cosine_lr: warmup must be less than total"),
        ("optim.warmup_cosine_lr(step, -1, 10, lr)", "warmup_cosine_lr: warmup must not be negative"),
        ("optim.warmup_cosine_lr(step - 1, 2, 10, lr)", "warmup_cosine_lr: step must not be negative"),
        ("optim.step_lr(step, 0, lr)", "step_lr: step_size must be positive"),
        ("optim.step_lr(step - 1, 3, lr)", "step_lr: step must not be negative"),
        ("optim.exponential_lr(step - 1, lr, 0.9)", "exponential_lr: step must not be negative"),
        ("optim.linear_lr(step, -2, lr)", "linear_lr: total must be positive"),
        ("optim.linear_lr(step - 1, 5, lr)", "linear_lr: step must not be negative"),
    ],
)
def test_a_schedule_refuses_a_negative_step_or_an_empty_schedule(call: str, message: str, backend: str) -> None:
    with pytest.raises(DiagnosticError) as failure:
        dl_rates(call, np.array([0], dtype=np.int64), np.float32, 0.0, 0.0, 0, 0, backend)
    [diagnostic] = failure.value.diagnostics
    assert diagnostic.code == "E0502" and message in diagnostic.message
