"""stdlib/optim.dl against torch.optim: 20 training steps of a small MLP in DL and in PyTorch.

The DL side computes gradients with `value_and_grad` inside a DL training loop; the torch side
uses autograd and torch.optim with the same data, hyperparameters and starting parameters.
"""

from __future__ import annotations

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

fn train_clipped(w1, b1, w2, b2, x, y, lr, max_norm) {
    let m = model(w1, b1, w2, b2)
    for step in 0..STEPS {
        let (value, g) = value_and_grad(loss)(m, x, y)
        m = optim.sgd(m, optim.clip_by_global_norm(g, max_norm), lr)
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


def torch_train(params, x, y, make_optimizer, max_norm=None) -> list[np.ndarray]:
    tensors = [torch.tensor(p, requires_grad=True) for p in params]
    optimizer = make_optimizer(tensors)
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
