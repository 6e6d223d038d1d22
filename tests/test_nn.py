"""The standard library's `nn` module (stdlib/nn.dl) against PyTorch.

Each function is called from a small DL program that imports `nn`; its values and the gradients
`grad` computes through it are compared with torch.nn.functional (or torch.nn modules) and torch
autograd on the same random inputs, in f32 and, where the function allows it, f64. Dropout and the
initialisers are random: their statistics, scaling and determinism are checked instead.
"""

from __future__ import annotations

import functools
import math
from importlib.util import find_spec
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from dl import pipeline
from dl.lang.diagnostics import DiagnosticError
from dl.lang.modules import stdlib_path
from dl.runtime.values import StructValue

# The DL wrappers the tests call, each loaded as its own program beside `import nn` (a program is
# differentiated as a whole, and a `grad` inside a function that no call checks has no types).
WRAPPERS = {
    "linear": "fn linear(x, w, b) { return nn.linear(x, w, b) }",
    "linear_grad": """
fn linear_loss(x, w, b, c) { return sum(nn.linear(x, w, b) * c) }
fn linear_grad(x, w, b, c) { return grad(linear_loss, wrt=(0, 1, 2))(x, w, b, c) }""",
    "layer_norm": "fn layer_norm(x, gamma, beta, eps) { return nn.layer_norm(x, gamma, beta, eps=eps) }",
    "layer_norm_default": "fn layer_norm_default(x, gamma, beta) { return nn.layer_norm(x, gamma, beta) }",
    "layer_norm_grad": """
fn layer_norm_loss(x, gamma, beta, eps, c) { return sum(nn.layer_norm(x, gamma, beta, eps=eps) * c) }
fn layer_norm_grad(x, gamma, beta, eps, c) { return grad(layer_norm_loss, wrt=(0, 1, 2))(x, gamma, beta, eps, c) }""",
    "cross_entropy": "fn cross_entropy(logits, labels) { return nn.cross_entropy(logits, labels) }",
    "cross_entropy_grad": """
fn cross_entropy_grad(logits, labels) { return value_and_grad(nn.cross_entropy)(logits, labels) }""",
    "mse": "fn mse(prediction, target) { return nn.mse(prediction, target) }",
    "mse_grad": "fn mse_grad(prediction, target) { return grad(nn.mse, wrt=(0, 1))(prediction, target) }",
    "nll_loss_grad": "fn nll_loss_grad(lp, labels) { return value_and_grad(nn.nll_loss)(lp, labels) }",
    "bce_with_logits_grad": """
fn bce_with_logits_grad(x, t) { return value_and_grad(nn.bce_with_logits, wrt=(0, 1))(x, t) }""",
    "huber_grad": "fn huber_grad(p, t) { return value_and_grad(nn.huber, wrt=(0, 1))(p, t) }",
    "huber_delta_grad": """
fn huber_delta_grad(p, t, d) { return value_and_grad(fn(p, t) => nn.huber(p, t, delta=d), wrt=(0, 1))(p, t) }""",
    "accuracy": "fn accuracy(logits, labels) { return nn.accuracy(logits, labels) }",
    "cross_entropy_options_grad": """
fn cross_entropy_options_grad(logits, labels) {
    return value_and_grad(fn(l) => nn.cross_entropy(l, labels, label_smoothing=0.2, ignore_index=3))(logits)
}""",
    "cross_entropy_in_place_grad": """
fn cross_entropy_in_place(logits, labels) { return nn.cross_entropy(logits, labels) }
fn cross_entropy_in_place_grad(logits, labels) { return value_and_grad(cross_entropy_in_place)(logits, labels) }""",
    "cross_entropy_summed_grad": """
fn cross_entropy_summed_grad(logits, labels) {
    return value_and_grad(fn(l) => nn.cross_entropy(l, labels, reduction="sum"))(logits)
}""",
    "cross_entropy_smoothed_sum_grad": """
fn cross_entropy_smoothed_sum_grad(logits, labels) {
    return value_and_grad(fn(l) => nn.cross_entropy(l, labels, label_smoothing=0.2, ignore_index=3, reduction="sum"))(
        logits
    )
}""",
    "summed_losses_grad": """
fn summed_losses(x, t) { return nn.mse(x, t, reduction="sum") + 2.0 * nn.bce_with_logits(x, t, reduction="sum") }
fn summed_losses_grad(x, t) { return value_and_grad(summed_losses)(x, t) }""",
    "bad_reduction": """
fn bad_reduction(x, t) { return nn.mse(x, t, reduction="none") }""",
    "cross_entropy_unsmoothed_grad": """
fn cross_entropy_unsmoothed_grad(logits, labels) {
    return value_and_grad(fn(l) => nn.cross_entropy(l, labels, label_smoothing=0.0))(logits)
}""",
    "nll_loss_ignoring_grad": """
fn nll_loss_ignoring_grad(lp, labels) { return value_and_grad(fn(v) => nn.nll_loss(v, labels, ignore_index=1))(lp) }""",
    "kl_div_grad": "fn kl_div_grad(lp, t) { return value_and_grad(nn.kl_div)(lp, t) }",
    "norms_grad": """
fn norms_loss(x, y, gamma, c) {
    let total = sum(nn.rms_norm(x, gamma) * c) + sum(nn.normalize(x) * c) + sum(nn.normalize(x, axis=0) * c)
    return total + sum(nn.cosine_similarity(x, y) * c[..., 0]) + sum(nn.norm(x) * c[..., 1])
}
fn norms_grad(x, y, gamma, c) { return value_and_grad(norms_loss, wrt=(0, 1, 2))(x, y, gamma, c) }""",
    "conv1d": "fn conv1d(x, w) { return nn.conv1d(x, w) }",
    "conv1d_strided": "fn conv1d_strided(x, w) { return nn.conv1d(x, w, stride=2, padding=1) }",
    "conv1d_grad": """
fn conv1d_loss(x, w, c) { return sum(nn.conv1d(x, w, stride=2, padding=1) * c) }
fn conv1d_grad(x, w, c) { return grad(conv1d_loss, wrt=(0, 1))(x, w, c) }""",
    "embedding": "fn embedding(table, ids) { return nn.embedding(table, ids) }",
    "embedding_grad": "fn embedding_grad(table, ids, c) { return grad(fn(t) => sum(nn.embedding(t, ids) * c))(table) }",
    "dropout": "fn dropout(x, rate, seed, training) { return nn.dropout(x, rate, seed, training) }",
    "dropout_grad": """
fn dropout_grad(x, rate, seed, c) { return grad(fn(x) => sum(nn.dropout(x, rate, seed, true) * c))(x) }""",
    "lstm_cell": """
fn lstm_cell(x, h, c, wi, wh, bi, bh) {
    return nn.lstm_cell(x, h, c, nn.LSTM { weight_ih: wi, weight_hh: wh, bias_ih: bi, bias_hh: bh })
}""",
    "lstm_grad": """
fn lstm_loss(x, h, c, p: nn.LSTM, ch, cc) {
    let (h2, c2) = nn.lstm_cell(x, h, c, p)
    return sum(h2 * ch) + sum(c2 * cc)
}
fn lstm_grad(x, h, c, wi, wh, bi, bh, ch, cc) {
    let p = nn.LSTM { weight_ih: wi, weight_hh: wh, bias_ih: bi, bias_hh: bh }
    return grad(lstm_loss, wrt=(0, 1, 2, 3))(x, h, c, p, ch, cc)
}""",
    "gru_cell": """
fn gru_cell(x, h, wi, wh, bi, bh) {
    return nn.gru_cell(x, h, nn.GRU { weight_ih: wi, weight_hh: wh, bias_ih: bi, bias_hh: bh })
}""",
    "gru_grad": """
fn gru_loss(x, h, p: nn.GRU, ch) { return sum(nn.gru_cell(x, h, p) * ch) }
fn gru_grad(x, h, wi, wh, bi, bh, ch) {
    let p = nn.GRU { weight_ih: wi, weight_hh: wh, bias_ih: bi, bias_hh: bh }
    return grad(gru_loss, wrt=(0, 1, 2))(x, h, p, ch)
}""",
    "attention": "fn attention(q, k, v) { return nn.attention(q, k, v) }",
    "attention_grad": """
fn attention_grad(q, k, v, c) {
    return grad(fn(q, k, v) => sum(nn.attention(q, k, v) * c), wrt=(0, 1, 2))(q, k, v)
}""",
    "masked_attention": "fn masked_attention(q, k, v, mask) { return nn.masked_attention(q, k, v, mask) }",
    "masked_attention_grad": """
fn masked_attention_grad(q, k, v, mask, c) {
    return grad(fn(q, k, v) => sum(nn.masked_attention(q, k, v, mask) * c), wrt=(0, 1, 2))(q, k, v)
}""",
    "xavier": "fn xavier(fan_in, fan_out, seed) { return nn.xavier(fan_in, fan_out, seed) }",
    "kaiming": "fn kaiming(fan_in, fan_out, seed) { return nn.kaiming(fan_in, fan_out, seed) }",
}
# activations: `name(x)` and `name_grad(x, c)`, the gradient of sum(name(x) * c)
for _name, _call in {
    "relu": "nn.relu(x)",
    "gelu": "nn.gelu(x)",
    "gelu_tanh": 'nn.gelu(x, approximate="tanh")',
    "tanh": "nn.tanh(x)",
    "sigmoid": "nn.sigmoid(x)",
    "softmax": "nn.softmax(x)",
    "log_softmax": "nn.log_softmax(x)",
    "softmax_0": "nn.softmax(x, axis=0)",
    "log_softmax_0": "nn.log_softmax(x, axis=0)",
    "silu": "nn.silu(x)",
    "leaky_relu": "nn.leaky_relu(x)",
    "leaky_relu_02": "nn.leaky_relu(x, negative_slope=0.2)",
    "leaky_relu_f64": "nn.leaky_relu(x, negative_slope=0.01f64)",
    "elu": "nn.elu(x)",
    "elu_2": "nn.elu(x, alpha=2.0)",
}.items():
    WRAPPERS[_name] = f"fn {_name}(x) {{ return {_call} }}"
    WRAPPERS[f"{_name}_grad"] = f"fn {_name}_grad(x, c) {{ return grad(fn(x) => sum({_call} * c))(x) }}"

DTYPES = [np.float32, np.float64]
TOLERANCE = {np.float32: {"rtol": 1e-5, "atol": 1e-6}, np.float64: {"rtol": 1e-10, "atol": 1e-12}}


@functools.cache
def program(name: str) -> Any:
    return pipeline.load(f"<nn-test-{name}>.dl", "import nn\n" + WRAPPERS[name] + "\n")


def call(name: str, *args: Any) -> Any:
    return pipeline.call(program(name), name, list(args))


def normal(seed: int, *shape: int, dtype: type = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def tensors(*arrays: np.ndarray) -> list[torch.Tensor]:
    """Leaf tensors for torch to differentiate, in f64: the reference is computed in f64 for f32
    inputs too, so that the tolerance measures our rounding, not torch's."""
    return [torch.tensor(array.astype(np.float64), requires_grad=True) for array in arrays]


def close(actual: Any, expected: torch.Tensor | np.ndarray, dtype: type) -> None:
    if isinstance(expected, torch.Tensor):
        expected = expected.detach().numpy()
    actual = np.asarray(actual)
    assert actual.dtype == np.dtype(dtype)
    np.testing.assert_allclose(actual, expected, **TOLERANCE[dtype])


def value_and_gradient_match(name: str, args: tuple, expected: torch.Tensor, leaf: torch.Tensor, dtype: type) -> None:
    """The `value_and_grad` wrapper `name`, called with `args`, gives torch's `expected` and its gradient for
    `leaf`."""
    expected.backward()
    value, gradient = call(name, *args)
    close(value, expected, dtype)
    close(gradient, leaf.grad, dtype)


# ------------------------------------------------------------------------------------------- activations

ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "softmax": lambda x: F.softmax(x, dim=-1),
    "log_softmax": lambda x: F.log_softmax(x, dim=-1),
    "softmax_0": lambda x: F.softmax(x, dim=0),
    "log_softmax_0": lambda x: F.log_softmax(x, dim=0),
    "silu": F.silu,
    "leaky_relu": F.leaky_relu,
    "leaky_relu_02": lambda x: F.leaky_relu(x, negative_slope=0.2),
    "leaky_relu_f64": F.leaky_relu,
    "elu": F.elu,
    "elu_2": lambda x: F.elu(x, alpha=2.0),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activation_and_its_gradient(name: str, dtype: type) -> None:
    if name.startswith("leaky_relu") and (dtype is np.float64) != name.endswith("_f64"):
        pytest.skip(
            "a slope written without a suffix is an f32 scalar (docs/stdlib.md, Dtypes): f64 data passes 0.01f64"
        )
    x = 3.0 * normal(1, 4, 5, dtype=dtype)
    x[0, :3] = [1e-3, -2e-4, 8.0]  # small inputs test relative accuracy, a large one saturation
    c = normal(2, 4, 5, dtype=dtype)
    (tx,) = tensors(x)
    expected = ACTIVATIONS[name](tx)
    (expected * torch.tensor(c)).sum().backward()
    close(call(name, x), expected, dtype)
    close(call(f"{name}_grad", x, c), tx.grad, dtype)


def test_relu_gradient_at_zero_is_zero_as_in_torch() -> None:
    x = np.array([-1.0, 0.0, 2.0], dtype=np.float32)
    np.testing.assert_array_equal(call("relu_grad", x, np.ones(3, dtype=np.float32)), [0.0, 0.0, 1.0])


@pytest.mark.parametrize("name", ["leaky_relu", "elu_2"])
def test_kinked_activations_at_zero_and_far_out_as_in_torch(name: str) -> None:
    """At 0 the derivative is torch's (the negative side's); at 1000 elu's exponential of the unused side does
    not overflow into a NaN gradient; at -20 its gradient keeps its digits (`expm1`'s is `exp(x)`)."""
    x = np.array([-1000.0, -20.0, -17.0, -1.0, 0.0, 2.0, 1000.0], dtype=np.float32)
    (tx,) = tensors(x)
    ACTIVATIONS[name](tx).sum().backward()
    got = call(f"{name}_grad", x, np.ones(7, dtype=np.float32))
    np.testing.assert_allclose(got, tx.grad.numpy(), rtol=1e-6)
    assert np.all(np.isfinite(got))


# ------------------------------------------------------------------------------------------- layers


# leading (batch) axes of the inputs: none, one as in [B, I], two as in [B, T, I]
LEADING = [(), (3,), (2, 3)]
LEADING_IDS = ["unbatched", "batch", "batch-and-time"]


@pytest.mark.parametrize("leading", LEADING, ids=LEADING_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_linear(dtype: type, leading: tuple[int, ...]) -> None:
    x, w, b = normal(1, *leading, 4, dtype=dtype), normal(2, 4, 5, dtype=dtype), normal(3, 5, dtype=dtype)
    c = normal(4, *leading, 5, dtype=dtype)
    tx, tw, tb = tensors(x, w, b)
    expected = F.linear(tx, tw.T, tb)  # torch stores the weight [out, in]
    (expected * torch.tensor(c)).sum().backward()
    close(call("linear", x, w, b), expected, dtype)
    for actual, wanted in zip(call("linear_grad", x, w, b, c), (tx.grad, tw.grad, tb.grad), strict=True):
        close(actual, wanted, dtype)


@pytest.mark.parametrize("leading", LEADING, ids=LEADING_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_layer_norm(dtype: type, leading: tuple[int, ...]) -> None:
    x = 2.0 * normal(1, *leading, 6, dtype=dtype) + 1.0
    gamma, beta, c = normal(2, 6, dtype=dtype), normal(3, 6, dtype=dtype), normal(4, *leading, 6, dtype=dtype)
    eps = dtype(1e-5)
    tx, tg, tb = tensors(x, gamma, beta)
    expected = F.layer_norm(tx, (6,), tg, tb, eps=1e-5)
    (expected * torch.tensor(c)).sum().backward()
    close(call("layer_norm", x, gamma, beta, eps), expected, dtype)
    for actual, wanted in zip(
        call("layer_norm_grad", x, gamma, beta, eps, c), (tx.grad, tg.grad, tb.grad), strict=True
    ):
        close(actual, wanted, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_conv1d_matches_torch(dtype: type) -> None:
    """torch's F.conv1d over [N, C, L] with [O, C, K] kernels, plain and with stride and padding, and the
    gradients of both operands."""
    x, w = normal(1, 2, 3, 9, dtype=dtype), normal(2, 4, 3, 3, dtype=dtype)
    tx, tw = tensors(x, w)
    close(call("conv1d", x, w), F.conv1d(tx, tw), dtype)
    expected = F.conv1d(tx, tw, stride=2, padding=1)
    close(call("conv1d_strided", x, w), expected, dtype)
    c = normal(3, *expected.shape, dtype=dtype)
    (expected * torch.tensor(c)).sum().backward()
    for actual, wanted in zip(call("conv1d_grad", x, w, c), (tx.grad, tw.grad), strict=True):
        close(actual, wanted, dtype)


def test_layer_norm_default_eps_is_torchs() -> None:
    x = normal(1, 4, 3) * 1e-3  # small variance, so eps matters
    gamma, beta = np.ones(3, dtype=np.float32), np.zeros(3, dtype=np.float32)
    expected = F.layer_norm(torch.tensor(x, dtype=torch.float64), (3,), eps=1e-5)
    close(call("layer_norm_default", x, gamma, beta), expected, np.float32)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_embedding_gathers_rows_and_adds_gradients_of_repeated_ids(dtype: type) -> None:
    table = normal(1, 7, 3, dtype=dtype)
    ids = np.array([[0, 6, 2], [2, 2, 5]], dtype=np.int64)
    c = normal(2, 2, 3, 3, dtype=dtype)
    (tt,) = tensors(table)
    expected = F.embedding(torch.tensor(ids), tt)
    (expected * torch.tensor(c)).sum().backward()
    close(call("embedding", table, ids), expected, dtype)
    close(call("embedding_grad", table, ids, c), tt.grad, dtype)


# ------------------------------------------------------------------------------------------- recurrent cells


def torch_cell(module: torch.nn.Module, weights: list[np.ndarray]) -> list[torch.Tensor]:
    with torch.no_grad():
        for parameter, value in zip(
            (module.weight_ih, module.weight_hh, module.bias_ih, module.bias_hh), weights, strict=True
        ):
            parameter.copy_(torch.tensor(value))
    return [module.weight_ih, module.weight_hh, module.bias_ih, module.bias_hh]


def cell_weights(gates: int, inputs: int, hidden: int) -> list[np.ndarray]:
    shapes = [(gates * hidden, inputs), (gates * hidden, hidden), (gates * hidden,), (gates * hidden,)]
    return [0.5 * normal(10 + position, *shape) for position, shape in enumerate(shapes)]


def test_lstm_cell_matches_torch_lstm_cell() -> None:
    batch, inputs, hidden = 3, 4, 5
    weights = cell_weights(4, inputs, hidden)
    x, h, c = normal(1, batch, inputs), normal(2, batch, hidden), normal(3, batch, hidden)
    ch, cc = normal(4, batch, hidden), normal(5, batch, hidden)
    cell = torch.nn.LSTMCell(inputs, hidden).double()
    parameters = torch_cell(cell, weights)
    tx, th, tc = tensors(x, h, c)
    h_next, c_next = cell(tx, (th, tc))
    ((h_next * torch.tensor(ch)).sum() + (c_next * torch.tensor(cc)).sum()).backward()

    actual_h, actual_c = call("lstm_cell", x, h, c, *weights)
    close(actual_h, h_next, np.float32)
    close(actual_c, c_next, np.float32)
    dx, dh, dc, dparams = call("lstm_grad", x, h, c, *weights, ch, cc)
    for actual, wanted in zip((dx, dh, dc), (tx.grad, th.grad, tc.grad), strict=True):
        close(actual, wanted, np.float32)
    assert isinstance(dparams, StructValue)
    for actual, parameter in zip(dparams.values, parameters, strict=True):
        close(actual, parameter.grad, np.float32)


def test_gru_cell_matches_torch_gru_cell() -> None:
    batch, inputs, hidden = 3, 4, 5
    weights = cell_weights(3, inputs, hidden)
    x, h, ch = normal(1, batch, inputs), normal(2, batch, hidden), normal(3, batch, hidden)
    cell = torch.nn.GRUCell(inputs, hidden).double()
    parameters = torch_cell(cell, weights)
    tx, th = tensors(x, h)
    h_next = cell(tx, th)
    (h_next * torch.tensor(ch)).sum().backward()

    close(call("gru_cell", x, h, *weights), h_next, np.float32)
    dx, dh, dparams = call("gru_grad", x, h, *weights, ch)
    close(dx, tx.grad, np.float32)
    close(dh, th.grad, np.float32)
    assert isinstance(dparams, StructValue)
    for actual, parameter in zip(dparams.values, parameters, strict=True):
        close(actual, parameter.grad, np.float32)


# ------------------------------------------------------------------------------------------- attention


# leading axes of attention's inputs: none, a batch, and a batch of several heads, [N, H, L, D]
HEADS = [(), (2,), (2, 3)]
HEADS_IDS = ["unbatched", "batch", "batch-and-heads"]


@pytest.mark.parametrize("leading", HEADS, ids=HEADS_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_attention(dtype: type, leading: tuple[int, ...]) -> None:
    q, k = normal(1, *leading, 3, 4, dtype=dtype), normal(2, *leading, 5, 4, dtype=dtype)
    v, c = normal(3, *leading, 5, 6, dtype=dtype), normal(4, *leading, 3, 6, dtype=dtype)
    tq, tk, tv = tensors(q, k, v)
    expected = F.scaled_dot_product_attention(tq, tk, tv)
    (expected * torch.tensor(c)).sum().backward()
    close(call("attention", q, k, v), expected, dtype)
    for actual, wanted in zip(call("attention_grad", q, k, v, c), (tq.grad, tk.grad, tv.grad), strict=True):
        close(actual, wanted, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_attention_broadcasts_leading_axes(dtype: type) -> None:
    """Keys and values shared by every head ([N, 1, S, D] against queries [N, H, L, D]), as torch's matmul
    broadcasts them; their gradients are summed over the heads."""
    q, k = normal(1, 2, 3, 4, 5, dtype=dtype), normal(2, 2, 1, 6, 5, dtype=dtype)
    v, c = normal(3, 2, 1, 6, 7, dtype=dtype), normal(4, 2, 3, 4, 7, dtype=dtype)
    tq, tk, tv = tensors(q, k, v)
    expected = torch.softmax(tq @ tk.transpose(-2, -1) / math.sqrt(5), dim=-1) @ tv
    (expected * torch.tensor(c)).sum().backward()
    close(call("attention", q, k, v), expected, dtype)
    for actual, wanted in zip(call("attention_grad", q, k, v, c), (tq.grad, tk.grad, tv.grad), strict=True):
        close(actual, wanted, dtype)


@pytest.mark.parametrize(
    ("leading", "mask_shape"),
    [((2,), (2, 4, 4)), ((2,), (4, 4)), ((2, 3), (2, 3, 4, 4)), ((2, 3), (2, 1, 4, 4)), ((2, 3), (4, 4))],
    ids=["per-batch", "broadcast", "per-head", "per-batch-over-heads", "causal-over-batch-and-heads"],
)
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_masked_attention(dtype: type, leading: tuple[int, ...], mask_shape: tuple[int, ...]) -> None:
    q, k = normal(1, *leading, 4, 3, dtype=dtype), normal(2, *leading, 4, 3, dtype=dtype)
    v, c = normal(3, *leading, 4, 5, dtype=dtype), normal(4, *leading, 4, 5, dtype=dtype)
    mask = np.random.default_rng(5).random(mask_shape) < 0.5
    mask[..., 0] = True  # every query sees at least one key
    tq, tk, tv = tensors(q, k, v)
    expected = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=torch.tensor(mask))
    (expected * torch.tensor(c)).sum().backward()
    close(call("masked_attention", q, k, v, mask), expected, dtype)
    gradients = call("masked_attention_grad", q, k, v, mask, c)
    for actual, wanted in zip(gradients, (tq.grad, tk.grad, tv.grad), strict=True):
        close(actual, wanted, dtype)


def test_causal_mask_hides_later_keys() -> None:
    q, k = normal(1, 1, 3, 2), normal(2, 1, 3, 2)
    v = np.eye(3, dtype=np.float32)[None]  # the output row is the attention weights
    weights = call("masked_attention", q, k, v, np.tril(np.ones((3, 3), dtype=bool)))
    assert weights[0, 0, 0] == pytest.approx(1.0)
    assert np.all(np.triu(weights[0], 1) == 0.0)


# ------------------------------------------------------------------------------------------- losses and metrics


@pytest.mark.parametrize("leading", [(6,), (2, 3), (2, 2, 3)], ids=["batch", "batch-and-time", "three-axes"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_cross_entropy(dtype: type, leading: tuple[int, ...]) -> None:
    logits = 4.0 * normal(1, *leading, 5, dtype=dtype)
    logits.reshape(-1, 5)[0, 1] = 80.0  # stable for large logits
    labels = np.random.default_rng(2).integers(0, 5, leading)
    (tl,) = tensors(logits)
    # torch takes the classes on axis 1 of batched logits; flattened to [N, K] they are on the last
    expected = F.cross_entropy(tl.reshape(-1, 5), torch.tensor(labels).reshape(-1))
    expected.backward()
    close(call("cross_entropy", logits, labels), expected, dtype)
    value, gradient = call("cross_entropy_grad", logits, labels)
    close(value, expected, dtype)
    close(gradient, tl.grad, dtype)


@pytest.mark.parametrize("leading", [(6,), (2, 3)], ids=["batch", "batch-and-time"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_cross_entropy_label_smoothing_and_ignore_index(dtype: type, leading: tuple[int, ...]) -> None:
    logits = 3.0 * normal(3, *leading, 5, dtype=dtype)
    labels = np.random.default_rng(4).integers(0, 5, leading)
    labels.reshape(-1)[[0, 2]] = 3  # ignored: out of the mean as well as the sum
    labels.reshape(-1)[1] = -100  # not ignored here: out of range
    with pytest.raises(DiagnosticError, match="a label is outside"):
        call("cross_entropy_options_grad", logits, labels)
    labels.reshape(-1)[1] = 4
    (tl,) = tensors(logits)
    expected = F.cross_entropy(tl.reshape(-1, 5), torch.tensor(labels).reshape(-1), label_smoothing=0.2, ignore_index=3)
    value_and_gradient_match("cross_entropy_options_grad", (logits, labels), expected, tl, dtype)
    labels.reshape(-1)[[0, 2]] = -100  # torch's default ignore_index
    (tl,) = tensors(logits)
    expected = F.cross_entropy(tl.reshape(-1, 5), torch.tensor(labels).reshape(-1))
    value_and_gradient_match("cross_entropy_grad", (logits, labels), expected, tl, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_losses_summed_as_torch_reduction_sum(dtype: type) -> None:
    """`reduction="sum"` of cross_entropy (smoothed and ignoring a label too), mse and bce_with_logits, value and
    gradient against torch's `reduction="sum"`; any other reduction is refused when run."""
    logits = 3.0 * normal(7, 6, 5, dtype=dtype)
    labels = np.random.default_rng(8).integers(0, 5, 6)
    (tl,) = tensors(logits)
    expected = F.cross_entropy(tl, torch.tensor(labels), reduction="sum")
    value_and_gradient_match("cross_entropy_summed_grad", (logits, labels), expected, tl, dtype)
    labels[[0, 2]] = 3
    (tl,) = tensors(logits)
    expected = F.cross_entropy(tl, torch.tensor(labels), label_smoothing=0.2, ignore_index=3, reduction="sum")
    value_and_gradient_match("cross_entropy_smoothed_sum_grad", (logits, labels), expected, tl, dtype)
    x, t = normal(9, 4, 3, dtype=dtype), np.random.default_rng(10).uniform(0, 1, (4, 3)).astype(dtype)
    tx, tt = tensors(x, t)
    bce = F.binary_cross_entropy_with_logits(tx, tt, reduction="sum")
    expected = F.mse_loss(tx, tt, reduction="sum") + 2.0 * bce
    value_and_gradient_match("summed_losses_grad", (x, t), expected, tx, dtype)
    with pytest.raises(DiagnosticError, match='reduction is "mean" or "sum"'):
        call("bad_reduction", x, t)


@pytest.mark.parametrize("name", ["cross_entropy_grad", "cross_entropy_in_place_grad", "cross_entropy_unsmoothed_grad"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_cross_entropy_of_masked_classes_is_finite_as_torch(dtype: type, name: str) -> None:
    """Logits of -inf (classes masked out, as a language model's vocabulary may be) that no label picks: torch's
    loss and gradient are finite, as DL's, called in place in a derivative, split, or with smoothing 0 given.
    Smoothing's mean over the classes, multiplied by 0, made nan of them (0 * -inf)."""
    logits = normal(5, 4, 6, dtype=dtype)
    logits[:, 4:] = -np.inf
    labels = np.array([0, 3, 1, 2])
    (tl,) = tensors(logits)
    expected = F.cross_entropy(tl, torch.tensor(labels))
    assert np.isfinite(expected.item())
    value_and_gradient_match(name, (logits, labels), expected, tl, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_nll_loss_ignore_index_and_kl_div_match_torch(dtype: type) -> None:
    log_probs = torch.log_softmax(torch.tensor(normal(5, 4, 3, dtype=np.float64)), -1).numpy().astype(dtype)
    labels = np.array([1, 0, 2, 1])
    (tl,) = tensors(log_probs)
    expected = F.nll_loss(tl, torch.tensor(labels), ignore_index=1)
    value_and_gradient_match("nll_loss_ignoring_grad", (log_probs, labels), expected, tl, dtype)
    target = np.abs(normal(6, 4, 3, dtype=dtype))
    target[1, 2] = 0.0  # 0 log 0 = 0, and no NaN in the gradient
    target /= target.sum(-1, keepdims=True)
    tl, tt = tensors(log_probs, target)
    expected = F.kl_div(tl, tt, reduction="batchmean")
    value_and_gradient_match("kl_div_grad", (log_probs, target), expected, tl, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_rms_norm_normalize_cosine_similarity_and_norm_match_torch(dtype: type) -> None:
    """Values and gradients, a row of zeros among the rows: torch's norms have gradient 0 there, not NaN."""
    x, y, gamma, c = (
        normal(7, 4, 3, dtype=dtype),
        normal(8, 4, 3, dtype=dtype),
        normal(9, 3, dtype=dtype),
        normal(10, 4, 3, dtype=dtype),
    )
    x[2] = 0.0
    y[1] = 0.0
    tx, ty, tg = tensors(x, y, gamma)
    tc = torch.tensor(c.astype(np.float64))
    expected = (
        (F.rms_norm(tx, (3,), tg, eps=1e-6) * tc).sum()
        + (F.normalize(tx, dim=-1) * tc).sum()
        + (F.normalize(tx, dim=0) * tc).sum()
        + (F.cosine_similarity(tx, ty, dim=-1) * tc[..., 0]).sum()
        + (torch.linalg.vector_norm(tx, dim=-1) * tc[..., 1]).sum()
    )
    expected.backward()
    value, gradients = call("norms_grad", x, y, gamma, c)
    close(value, expected, dtype)
    for actual, wanted in zip(gradients, (tx.grad, ty.grad, tg.grad), strict=True):
        assert np.all(np.isfinite(actual))
        close(actual, wanted, dtype)


@pytest.mark.parametrize("labels", [[1, 3], [-1, 0]], ids=["too-large", "negative"])
def test_cross_entropy_rejects_a_label_out_of_range(labels: list[int]) -> None:
    with pytest.raises(DiagnosticError) as failure:
        call("cross_entropy", normal(1, 2, 3), np.array(labels, dtype=np.int64))
    assert [diagnostic.code for diagnostic in failure.value.diagnostics] == ["E0502"]


def test_cross_entropy_rejects_labels_of_another_size() -> None:
    with pytest.raises(DiagnosticError) as failure:
        call("cross_entropy", normal(1, 2, 3, 5), np.zeros((3,), dtype=np.int64))
    [diagnostic] = failure.value.diagnostics
    assert diagnostic.code == "E0335" and "labels must have the shape of the logits" in diagnostic.message


def test_cross_entropy_rejects_labels_of_a_size_the_data_decides_when_it_runs(run_dl) -> None:
    source = (
        "import nn\nfn main(n) {\n    let labels = zeros(int(n), dtype=i64)\n"
        "    print(nn.cross_entropy(zeros(3, 4), labels))\n}\n"
    )
    assert run_dl(source, ["3"]) == (0, "1.3862944\n", "")
    status, _, err = run_dl(source, ["2"])
    assert status == 1
    assert err.startswith(
        "error[E0502]: assertion failed: cross_entropy: "
        "labels must have the shape of the logits without their last axis"
    ), err


@pytest.mark.parametrize("backend", ["interp", "llvm"])
def test_a_failure_inside_the_stdlib_is_shown_at_the_users_call(run_dl, backend: str) -> None:
    """At the user's innermost call of the library, the library's line a secondary label, the stack in a note."""
    source = (
        "import nn\n"
        "fn loss(logits: f32[B, 3], labels: i64[B]) -> f32 { return nn.cross_entropy(logits, labels) }\n"
        "fn main() { print(loss(zeros(2, 3), [0, 5])) }\n"
    )
    status, out, err = run_dl(source, [], ("--backend", backend))
    assert (status, out) == (1, "")
    lines = err.splitlines()
    assert lines[0] == "error[E0502]: assertion failed: cross_entropy: a label is outside 0..classes"
    assert lines[1].endswith("prog.dl:2:60"), lines[1]
    assert lines[4].endswith("^" * 32 + " the standard library's code fails in this call"), lines[4]
    library = stdlib_path("nn").read_text().splitlines()
    start = next(n for n, line in enumerate(library) if line.startswith("fn cross_entropy("))
    message = next(n for n in range(start, len(library)) if "a label is outside" in library[n])
    check = max(n for n in range(start, message) if library[n].startswith("    assert(")) + 1
    assert lines[5].endswith(f"stdlib/nn.dl:{check}:5") and lines[5].lstrip().startswith(":::"), lines[5]
    assert "in `loss` at " in err and "in `cross_entropy` at " in err  # the call stack, innermost last


@pytest.mark.parametrize("loss", ["cross_entropy", "accuracy"])
@pytest.mark.parametrize("shape", [(4, 1), (1, 4)], ids=["column", "row"])
def test_labels_of_the_right_count_but_another_shape_are_refused(loss: str, shape: tuple[int, int]) -> None:
    """[B, 1] labels (a column, as a data loader may give them) hold B labels, but broadcast the rows' [B] to
    [B, B]: torch refuses them, and so does the checker, where it knows the shapes."""
    with pytest.raises(DiagnosticError) as failure:
        call(loss, normal(1, 4, 3), np.zeros(shape, dtype=np.int64))
    [diagnostic] = failure.value.diagnostics
    assert diagnostic.code == "E0335"
    assert f"{loss}: labels must have the shape of the logits without their last axis" in diagnostic.message


@pytest.mark.parametrize(
    "arguments",
    ["zeros(4, 10), one_hot([1, 2, 3, 4], 10)", "[1, 2, 3, 4], zeros(4, 10)"],
    ids=["one-hot labels", "arguments swapped"],
)
def test_a_wrong_call_of_a_loss_is_one_error_at_the_call(arguments: str) -> None:
    """One mistake in a call of the standard library is one diagnostic at the call written: not its follow-ons
    inside (a gather of float indices, a log_softmax of integers), nor any shown at the library's own lines."""
    import dl.lang

    source = f"import nn\nfn main() {{\n    print(nn.cross_entropy({arguments}))\n}}\n"
    typed = dl.lang.check(source, "loss.dl")
    [diagnostic] = typed.errors
    assert (diagnostic.code, diagnostic.span.path, diagnostic.span.line) == ("E0335", "loss.dl", 3)
    assert diagnostic.message == (
        "this assertion fails: cross_entropy: labels must have the shape of the logits without their last axis "
        "(class indices, not one-hot)"
    )


def test_cross_entropy_labels_of_another_shape_are_a_checker_error() -> None:
    source = """import nn
fn loss(logits: f32[B, T, K], labels: i64[T, B]) -> f32 { return nn.cross_entropy(logits, labels) }
"""
    with pytest.raises(DiagnosticError) as failure:
        pipeline.check(pipeline.load("<nn-test-swapped-labels>.dl", source))
    [diagnostic] = failure.value.diagnostics
    assert diagnostic.code == "E0303" and "i64[B, T] + i64[T, B]" in diagnostic.message


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_mse(dtype: type) -> None:
    prediction, target = normal(1, 4, 3, dtype=dtype), normal(2, 4, 3, dtype=dtype)
    tp, tt = tensors(prediction, target)
    expected = F.mse_loss(tp, tt)
    expected.backward()
    close(call("mse", prediction, target), expected, dtype)
    for actual, wanted in zip(call("mse_grad", prediction, target), (tp.grad, tt.grad), strict=True):
        close(actual, wanted, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_nll_loss_bce_with_logits_and_huber_match_torch(dtype: type) -> None:
    """Values and gradients; the logits reach 40, where sigmoid rounds to 1 and a loss from it would be inf."""
    logits = normal(1, 4, 5, dtype=dtype) * dtype(10.0)
    targets = (np.random.default_rng(2).random((4, 5)) > 0.5).astype(dtype)
    labels = np.array([4, 0, 2, 2], dtype=np.int64)
    log_probs = torch.log_softmax(torch.tensor(logits.astype(np.float64)), -1).numpy().astype(dtype)
    (tl,) = tensors(log_probs)
    expected = F.nll_loss(tl, torch.tensor(labels))
    expected.backward()
    value, gradient = call("nll_loss_grad", log_probs, labels)
    close(value, expected, dtype)
    close(gradient, tl.grad, dtype)
    tx, tt = tensors(logits, targets)
    expected = F.binary_cross_entropy_with_logits(tx, tt)
    expected.backward()
    value, gradients = call("bce_with_logits_grad", logits, targets)
    close(value, expected, dtype)
    for actual, wanted in zip(gradients, (tx.grad, tt.grad), strict=True):
        close(actual, wanted, dtype)
    for name, delta, extra in (("huber_grad", 1.0, ()), ("huber_delta_grad", 7.5, (dtype(7.5),))):
        tp, tt = tensors(logits, targets * dtype(3.0))
        expected = F.huber_loss(tp, tt, delta=delta)
        expected.backward()
        value, gradients = call(name, logits, targets * dtype(3.0), *extra)
        close(value, expected, dtype)
        for actual, wanted in zip(gradients, (tp.grad, tt.grad), strict=True):
            close(actual, wanted, dtype)


@pytest.mark.parametrize("target_shape", [(3,), (1, 3), ()], ids=["row", "row-of-one", "scalar"])
def test_mse_of_a_target_that_broadcasts_to_the_prediction(target_shape: tuple[int, ...]) -> None:
    """A target that broadcasts to the prediction's shape is taken as torch takes it expanded; the target's
    gradient is summed over the axes it was broadcast along."""
    prediction, target = normal(1, 4, 3, dtype=np.float64), normal(2, *target_shape, dtype=np.float64)
    tp, tt = tensors(prediction, target)
    expected = F.mse_loss(tp, tt.expand_as(tp))
    expected.backward()
    close(call("mse", prediction, target), expected, np.float64)
    for actual, wanted in zip(call("mse_grad", prediction, target), (tp.grad, tt.grad), strict=True):
        close(actual, wanted, np.float64)


def test_mse_refuses_a_target_that_would_broadcast_the_prediction() -> None:
    """An [N, 1] prediction and an [N] target, which torch warns of and broadcasts to [N, N]: refused before
    running where the checker knows N (E0335, at the call), and when run where it does not (E0502)."""
    message = "mse: the target does not have the prediction's shape, and would broadcast it to a larger one"
    known = "import nn\nfn loss(p: f32[3, 1], t: f32[3]) -> f32 { return nn.mse(p, t) }\n"
    with pytest.raises(DiagnosticError) as failure:
        pipeline.check(pipeline.load("<nn-test-mse-known>.dl", known))
    [diagnostic] = failure.value.diagnostics
    assert (diagnostic.code, diagnostic.message) == ("E0335", f"this assertion fails: {message}")
    assert (diagnostic.span.path, diagnostic.span.line, diagnostic.span.column) == ("<nn-test-mse-known>.dl", 2, 50)
    named = "import nn\nfn loss(p: f32[B, 1], t: f32[B]) -> f32 { return nn.mse(p, t) }\n"
    with pytest.raises(DiagnosticError) as failure:
        pipeline.call(pipeline.load("<nn-test-mse-named>.dl", named), "loss", [normal(1, 4, 1), normal(2, 4)])
    [diagnostic] = failure.value.diagnostics
    assert (diagnostic.code, diagnostic.message) == ("E0502", f"assertion failed: {message}")
    assert "in `loss` at <nn-test-mse-named>.dl:2:50" in diagnostic.notes[0]


@pytest.mark.parametrize("leading", [(8,), (2, 4)], ids=["batch", "batch-and-time"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_accuracy(dtype: type, leading: tuple[int, ...]) -> None:
    logits = normal(1, *leading, 4, dtype=dtype)
    labels = np.argmax(logits, axis=-1)
    wrong = labels.reshape(-1)  # a view: three of eight labels made wrong
    wrong[[1, 4, 6]] = (wrong[[1, 4, 6]] + 1) % 4
    accuracy = call("accuracy", logits, labels)
    assert np.asarray(accuracy).dtype == np.float32
    assert float(accuracy) == 5 / 8


# ------------------------------------------------------------------------------------------- dropout


def test_dropout_keeps_one_minus_rate_and_scales_them() -> None:
    x = normal(1, 200, 300) + 5.0  # no element is zero before dropout
    out = call("dropout", x, np.float32(0.3), 7, True)
    kept = out != 0.0
    assert kept.mean() == pytest.approx(0.7, abs=0.005)  # 60000 draws: the standard error is 0.0019
    np.testing.assert_allclose(out[kept], x[kept] / np.float32(0.7), rtol=1e-6)


def test_dropout_is_deterministic_for_a_seed() -> None:
    x = normal(1, 20, 30)
    first = call("dropout", x, np.float32(0.5), 3, True)
    np.testing.assert_array_equal(first, call("dropout", x, np.float32(0.5), 3, True))
    assert np.any(first != call("dropout", x, np.float32(0.5), 4, True))


def test_dropout_works_on_any_rank() -> None:
    x = normal(1, 4, 5, 6) + 5.0
    out = call("dropout", x, np.float32(0.5), 2, True)
    assert out.shape == x.shape
    assert 0 < np.count_nonzero(out) < x.size


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_dropout_is_the_identity_without_training(dtype: type) -> None:
    x = normal(1, 5, 6, dtype=dtype)
    np.testing.assert_array_equal(call("dropout", x, dtype(0.5), 3, False), x)


def test_dropout_rates_zero_and_one() -> None:
    x = normal(1, 5, 6)
    np.testing.assert_array_equal(call("dropout", x, np.float32(0.0), 3, True), x)
    np.testing.assert_array_equal(call("dropout", x, np.float32(1.0), 3, True), np.zeros_like(x))


def test_dropout_gradient_is_the_scaled_mask() -> None:
    x, c = normal(1, 6, 7) + 5.0, normal(2, 6, 7)
    out = call("dropout", x, np.float32(0.25), 9, True)
    gradient = call("dropout_grad", x, np.float32(0.25), 9, c)
    np.testing.assert_allclose(gradient, np.where(out != 0.0, c / np.float32(0.75), 0.0), rtol=1e-6)


# ------------------------------------------------------------------------------------------- initialisers


def test_xavier_is_glorot_uniform() -> None:
    fan_in, fan_out = 300, 500
    w = call("xavier", fan_in, fan_out, 1)
    bound = math.sqrt(6.0 / (fan_in + fan_out))
    assert w.shape == (fan_in, fan_out)
    assert w.dtype == np.float32
    assert np.all(np.abs(w) <= bound)
    assert w.min() < -0.99 * bound and w.max() > 0.99 * bound
    assert abs(w.mean()) < 0.01 * bound  # 150000 draws: the standard error of the mean is 0.0015 bound
    assert w.std() == pytest.approx(bound / math.sqrt(3.0), rel=0.01)
    np.testing.assert_array_equal(w, call("xavier", fan_in, fan_out, 1))
    assert np.any(w != call("xavier", fan_in, fan_out, 2))


def test_kaiming_is_he_normal() -> None:
    fan_in, fan_out = 400, 300
    w = call("kaiming", fan_in, fan_out, 1)
    std = math.sqrt(2.0 / fan_in)
    assert w.shape == (fan_in, fan_out)
    assert w.dtype == np.float32
    assert abs(w.mean()) < 0.01 * std  # 120000 draws: the standard error of the mean is 0.003 std
    assert w.std() == pytest.approx(std, rel=0.01)
    assert np.mean(np.abs(w) < std) == pytest.approx(0.6827, abs=0.01)  # normal, not uniform
    np.testing.assert_array_equal(w, call("kaiming", fan_in, fan_out, 1))


# ------------------------------------------------------------------------------------------- channels and pooling
# Functions over NCHW data (channels on axis 1), each with a wrapper `name(params)` and `name_grad(params, c)`,
# the gradient of sum(name(...) * c) with respect to the float tensors among the parameters, run on both
# backends. Sizes and strides are literals in the wrappers, so the checker knows them and the llvm backend
# compiles the functions (it needs the number of windows as a constant).

CHANNEL_FUNCTIONS = {
    # name: (parameters, call, the parameters differentiated)
    "batch_norm_eval": ("x, m, v, g, b", "nn.batch_norm_eval(x, (m, v), g, b)", "x, g, b"),
    "group_norm": ("x, g, b", "nn.group_norm(x, 2, g, b)", "x, g, b"),
    "instance_norm": ("x, g, b", "nn.instance_norm(x, g, b, eps=1e-3)", "x, g, b"),
    "avg_pool2d": ("x", "nn.avg_pool2d(x, 2)", "x"),
    "avg_pool2d_strided": ("x", "nn.avg_pool2d(x, 3, stride=2, padding=1)", "x"),
    "adaptive_avg_pool2d": ("x", "nn.adaptive_avg_pool2d(x, 3)", "x"),
    "adaptive_avg_pool2d_1": ("x", "nn.adaptive_avg_pool2d(x, 1)", "x"),
    "global_avg_pool2d": ("x", "nn.global_avg_pool2d(x)", "x"),
    "avg_pool1d": ("x", "nn.avg_pool1d(x, 3)", "x"),
    "avg_pool1d_strided": ("x", "nn.avg_pool1d(x, 4, stride=2, padding=2)", "x"),
    "max_pool1d": ("x", "nn.max_pool1d(x, 2)", "x"),
    "max_pool1d_strided": ("x", "nn.max_pool1d(x, 3, stride=2, padding=1)", "x"),
}
for _name, (_params, _call, _wrt) in CHANNEL_FUNCTIONS.items():
    _positions = ", ".join(str(n) for n in range(len(_wrt.split(", "))))
    WRAPPERS[_name] = f"fn {_name}({_params}) {{ return {_call} }}"
    WRAPPERS[f"{_name}_grad"] = (
        f"fn {_name}_grad({_params}, c) {{ return grad(fn({_wrt}) => sum({_call} * c), wrt=({_positions},))({_wrt}) }}"
    )
WRAPPERS["batch_norm_train"] = "fn batch_norm_train(x, m, v, g, b) { return nn.batch_norm_train(x, (m, v), g, b) }"
WRAPPERS["batch_norm_train_momentum"] = """
fn batch_norm_train_momentum(x, m, v, g, b) { return nn.batch_norm_train(x, (m, v), g, b, momentum=0.3, eps=1e-3) }"""
WRAPPERS["batch_norm_train_grad"] = """
fn batch_norm_train_loss(x, g, b, m, v, c) {
    let (y, stats) = nn.batch_norm_train(x, (m, v), g, b)
    return sum(y * c)
}
fn batch_norm_train_grad(x, m, v, g, b, c) { return grad(batch_norm_train_loss, wrt=(0, 1, 2))(x, g, b, m, v, c) }"""
WRAPPERS["batch_norm_stats"] = "fn batch_norm_stats() { return nn.batch_norm_stats(4) }"

BACKENDS = [
    "interp",
    pytest.param("llvm", marks=pytest.mark.skipif(find_spec("llvmlite") is None, reason="needs llvmlite")),
]
# the inputs of the channel functions: [N, C], [N, C, L] and [N, C, H, W]
CHANNEL_SHAPES = [(6, 4), (3, 4, 5), (2, 4, 3, 5)]
CHANNEL_SHAPE_IDS = ["features", "sequences", "images"]


def call_on(backend: str, name: str, *args: Any) -> Any:
    """The wrapper `name` called on `backend`; on llvm, it and every function of nn.dl it calls must have been
    compiled, none left to the interpreter."""
    _, typed = pipeline.prepare(program(name), ((name, tuple(pipeline.value_type(a) for a in args)),))
    prepared = pipeline.on_backend(backend, typed, cache=False)
    result = prepared.call(name, list(args))
    interpreted = [line for line in prepared.outcome().splitlines() if "interpreted" in line]
    assert not interpreted, "\n".join(interpreted)
    return result


def compare(backend: str, name: str, args: tuple, reference, leaves: list[torch.Tensor], dtype: type) -> None:
    """The wrapper `name` gives `reference(*leaves)`, and `name_grad` the gradients of sum(reference * c)."""
    expected = reference(*leaves)
    c = normal(99, *expected.shape, dtype=dtype)
    (expected * torch.tensor(c.astype(np.float64))).sum().backward()
    close(call_on(backend, name, *args), expected, dtype)
    gradients = call_on(backend, f"{name}_grad", *args, c)
    gradients = gradients if isinstance(gradients, tuple) else (gradients,)
    for actual, leaf in zip(gradients, leaves, strict=True):
        close(actual, leaf.grad, dtype)


def channel_parameters(shape: tuple[int, ...], dtype: type) -> tuple[np.ndarray, ...]:
    """x with channels of different means and scales, positive running variances, gamma and beta."""
    channels = shape[1]
    scale = np.arange(1, channels + 1).reshape(channels, *([1] * (len(shape) - 2)))
    x = (normal(1, *shape, dtype=dtype) * scale + scale).astype(dtype)
    running_mean, running_var = normal(2, channels, dtype=dtype), np.abs(normal(3, channels, dtype=dtype)) + dtype(0.5)
    return x, running_mean, running_var, normal(4, channels, dtype=dtype), normal(5, channels, dtype=dtype)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", CHANNEL_SHAPES, ids=CHANNEL_SHAPE_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_batch_norm_in_training_matches_torch(dtype: type, shape: tuple[int, ...], backend: str) -> None:
    """The output and its gradients, and the running statistics torch's F.batch_norm leaves in its buffers: moved
    `momentum` of the way to the batch's mean and unbiased variance."""
    x, running_mean, running_var, gamma, beta = channel_parameters(shape, dtype)
    for name, momentum, eps in (("batch_norm_train", 0.1, 1e-5), ("batch_norm_train_momentum", 0.3, 1e-3)):
        tx, tg, tb = tensors(x, gamma, beta)
        buffers = [torch.tensor(s.astype(np.float64)) for s in (running_mean, running_var)]
        expected = F.batch_norm(tx, *buffers, tg, tb, training=True, momentum=momentum, eps=eps)
        y, (new_mean, new_var) = call_on(backend, name, x, running_mean, running_var, gamma, beta)
        close(y, expected, dtype)
        close(new_mean, buffers[0], dtype)
        close(new_var, buffers[1], dtype)
    c = normal(6, *shape, dtype=dtype)
    tx, tg, tb = tensors(x, gamma, beta)
    expected = F.batch_norm(tx, None, None, tg, tb, training=True)
    (expected * torch.tensor(c.astype(np.float64))).sum().backward()
    gradients = call_on(backend, "batch_norm_train_grad", x, running_mean, running_var, gamma, beta, c)
    for actual, leaf in zip(gradients, (tx, tg, tb), strict=True):
        close(actual, leaf.grad, dtype)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", CHANNEL_SHAPES, ids=CHANNEL_SHAPE_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_batch_norm_in_evaluation_and_group_norm_match_torch(dtype: type, shape: tuple[int, ...], backend: str) -> None:
    x, running_mean, running_var, gamma, beta = channel_parameters(shape, dtype)
    statistics = [torch.tensor(s.astype(np.float64)) for s in (running_mean, running_var)]
    compare(
        backend,
        "batch_norm_eval",
        (x, running_mean, running_var, gamma, beta),
        lambda x, g, b: F.batch_norm(x, *statistics, g, b, training=False),
        tensors(x, gamma, beta),
        dtype,
    )
    reference = lambda x, g, b: F.group_norm(x, 2, g, b)  # noqa: E731
    compare(backend, "group_norm", (x, gamma, beta), reference, tensors(x, gamma, beta), dtype)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", CHANNEL_SHAPES[1:], ids=CHANNEL_SHAPE_IDS[1:])
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_instance_norm_matches_torch(dtype: type, shape: tuple[int, ...], backend: str) -> None:
    x, _, _, gamma, beta = channel_parameters(shape, dtype)
    reference = lambda x, g, b: F.instance_norm(x, weight=g, bias=b, eps=1e-3)  # noqa: E731
    compare(backend, "instance_norm", (x, gamma, beta), reference, tensors(x, gamma, beta), dtype)


def test_batch_norm_stats_start_as_torchs_buffers() -> None:
    module = torch.nn.BatchNorm2d(4)
    running_mean, running_var = call("batch_norm_stats")
    np.testing.assert_array_equal(running_mean, module.running_mean.numpy())
    np.testing.assert_array_equal(running_var, module.running_var.numpy())


def test_batch_norm_refuses_to_train_on_one_value_per_channel() -> None:
    """torch's F.batch_norm raises for it: the unbiased variance of one value divides by zero."""
    x, running_mean, running_var, gamma, beta = channel_parameters((1, 4), np.float32)
    with pytest.raises(DiagnosticError, match="more than one value"):
        call("batch_norm_train", x, running_mean, running_var, gamma, beta)


POOLS = {
    "avg_pool2d": lambda x: F.avg_pool2d(x, 2),
    "avg_pool2d_strided": lambda x: F.avg_pool2d(x, 3, stride=2, padding=1),
    "adaptive_avg_pool2d": lambda x: F.adaptive_avg_pool2d(x, 3),
    "adaptive_avg_pool2d_1": lambda x: F.adaptive_avg_pool2d(x, 1),
    "global_avg_pool2d": lambda x: F.adaptive_avg_pool2d(x, 1),
    "avg_pool1d": lambda x: F.avg_pool1d(x, 3),
    "avg_pool1d_strided": lambda x: F.avg_pool1d(x, 4, stride=2, padding=2),
    "max_pool1d": lambda x: F.max_pool1d(x, 2),
    "max_pool1d_strided": lambda x: F.max_pool1d(x, 3, stride=2, padding=1),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", POOLS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_pooling_matches_torch(dtype: type, name: str, backend: str) -> None:
    """Odd sizes, which the windows do not divide: torch's floor mode drops the rest (7 by 5 images, sequences of
    11)."""
    x = normal(1, 2, 3, 11, dtype=dtype) if "1d" in name else normal(1, 2, 3, 7, 5, dtype=dtype)
    compare(backend, name, (x,), POOLS[name], tensors(x), dtype)


WRAPPERS["bce_probs_grad"] = """
fn bce_probs_grad(p, t) { return value_and_grad(nn.binary_cross_entropy, wrt=(0, 1))(p, t) }"""
WRAPPERS["bce_probs_sum_grad"] = """
fn bce_probs_sum_grad(p, t) { return value_and_grad(fn(p) => nn.binary_cross_entropy(p, t, reduction="sum"))(p) }"""


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_binary_cross_entropy_of_probabilities_matches_torch(dtype: type, backend: str) -> None:
    """Value and gradients (of the probabilities and the soft targets), mean and sum, against torch's
    F.binary_cross_entropy; at probabilities of exactly 0 and 1 the logs are clamped at -100, as torch's,
    and the gradient has no NaN."""
    probs = (1.0 / (1.0 + np.exp(-normal(1, 4, 5, dtype=np.float64) * 3.0))).astype(dtype)
    targets = np.random.default_rng(2).random((4, 5)).astype(dtype)
    tp, tt = tensors(probs, targets)
    expected = F.binary_cross_entropy(tp, tt)
    expected.backward()
    value, gradients = call_on(backend, "bce_probs_grad", probs, targets)
    close(value, expected, dtype)
    for actual, wanted in zip(gradients, (tp.grad, tt.grad), strict=True):
        close(actual, wanted, dtype)
    (tp,) = tensors(probs)
    expected = F.binary_cross_entropy(tp, tt.detach(), reduction="sum")
    expected.backward()
    value, gradient = call_on(backend, "bce_probs_sum_grad", probs, targets)
    close(value, expected, dtype)
    close(gradient, tp.grad, dtype)
    edges, hard = np.array([0.0, 1.0, 0.0, 1.0], dtype=dtype), np.array([1.0, 0.0, 0.0, 1.0], dtype=dtype)
    value, (gradient, _) = call_on(backend, "bce_probs_grad", edges, hard)
    close(value, F.binary_cross_entropy(*tensors(edges, hard)), dtype)  # (100 + 100 + 0 + 0) / 4
    assert np.isfinite(gradient).all()


def test_binary_cross_entropy_refuses_what_is_not_a_probability() -> None:
    with pytest.raises(DiagnosticError) as failure:
        call("bce_probs_grad", np.array([0.5, 1.5], dtype=np.float32), np.array([1.0, 0.0], dtype=np.float32))
    (diagnostic,) = failure.value.diagnostics
    assert diagnostic.code == "E0502"
    assert diagnostic.message.endswith("the probabilities are not all in [0, 1] (for logits, use bce_with_logits)")


WRAPPERS["lstm_sequence_grad"] = """
fn lstm_sequence_loss(xs, h0, c0, layers, co, ch, cc) {
    let (out, (hn, cn)) = nn.lstm(xs, (h0, c0), layers)
    return sum(out * co) + sum(hn * ch) + sum(cn * cc)
}
fn lstm_sequence_grad(xs, h0, c0, a, b, c, d, e, f, g, h, co, ch, cc) {
    let layers = (
        nn.LSTM { weight_ih: a, weight_hh: b, bias_ih: c, bias_hh: d },
        nn.LSTM { weight_ih: e, weight_hh: f, bias_ih: g, bias_hh: h },
    )
    return (
        nn.lstm(xs, (h0, c0), layers),
        grad(lstm_sequence_loss, wrt=(0, 1, 2, 3))(xs, h0, c0, layers, co, ch, cc),
    )
}"""
WRAPPERS["gru_sequence_grad"] = """
fn gru_sequence_loss(xs, h0, layers, co, ch) {
    let (out, hn) = nn.gru(xs, h0, layers)
    return sum(out * co) + sum(hn * ch)
}
fn gru_sequence_grad(xs, h0, a, b, c, d, e, f, g, h, co, ch) {
    let layers = (
        nn.GRU { weight_ih: a, weight_hh: b, bias_ih: c, bias_hh: d },
        nn.GRU { weight_ih: e, weight_hh: f, bias_ih: g, bias_hh: h },
    )
    return (nn.gru(xs, h0, layers), grad(gru_sequence_loss, wrt=(0, 1, 2))(xs, h0, layers, co, ch))
}"""


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_two_layer_recurrent_sequences_match_torch(kind: str) -> None:
    """nn.lstm and nn.gru over a sequence of 5 steps with 2 layers, against torch.nn.LSTM and torch.nn.GRU with
    num_layers=2: every step's output, the last states, and the gradients of the inputs, the initial states and
    every layer's weights."""
    steps, batch, inputs, hidden = 5, 3, 4, 6
    gates = 4 if kind == "lstm" else 3
    weights = cell_weights(gates, inputs, hidden) + [w * 0.8 for w in cell_weights(gates, hidden, hidden)]
    module = (torch.nn.LSTM if kind == "lstm" else torch.nn.GRU)(inputs, hidden, num_layers=2).double()
    names = [f"{kind}_{layer}" for layer in ("ih_l0", "hh_l0", "ih_l0", "hh_l0", "ih_l1", "hh_l1", "ih_l1", "hh_l1")]
    names = [("weight_" if k % 4 < 2 else "bias_") + name.split("_", 1)[1] for k, name in enumerate(names)]
    with torch.no_grad():
        for name, value in zip(names, weights, strict=True):
            getattr(module, name).copy_(torch.tensor(value.astype(np.float64)))
    xs, h0, c0 = normal(1, steps, batch, inputs), normal(2, 2, batch, hidden), normal(3, 2, batch, hidden)
    co, ch, cc = normal(4, steps, batch, hidden), normal(5, 2, batch, hidden), normal(6, 2, batch, hidden)
    tx, th, tc = tensors(xs, h0, c0)
    if kind == "lstm":
        out, (hn, cn) = module(tx, (th, tc))
        loss = (out * torch.tensor(co)).sum() + (hn * torch.tensor(ch)).sum() + (cn * torch.tensor(cc)).sum()
        (value, gradients) = call("lstm_sequence_grad", xs, h0, c0, *weights, co, ch, cc)
        actual_out, (actual_hn, actual_cn) = value
        close(actual_cn, cn, np.float32)
        leaves = (tx, th, tc)
    else:
        out, hn = module(tx, th)
        loss = (out * torch.tensor(co)).sum() + (hn * torch.tensor(ch)).sum()
        (value, gradients) = call("gru_sequence_grad", xs, h0, *weights, co, ch)
        actual_out, actual_hn = value
        leaves = (tx, th)
    loss.backward()
    close(actual_out, out, np.float32)
    close(actual_hn, hn, np.float32)
    *data_gradients, layer_gradients = gradients
    for actual, leaf in zip(data_gradients, leaves, strict=True):
        close(actual, leaf.grad, np.float32)
    found = [value for layer in layer_gradients for value in layer.values]
    for actual, name in zip(found, names, strict=True):
        close(actual, getattr(module, name).grad, np.float32)


def test_a_recurrent_sequence_needs_one_state_row_per_layer() -> None:
    """torch refuses an initial state of another number of layers; so does nn.gru (an extra row would come back
    untouched)."""
    weights = cell_weights(3, 4, 6) + cell_weights(3, 6, 6)
    xs, h0 = normal(1, 5, 3, 4), normal(2, 3, 3, 6)  # three rows for two layers
    co, ch = normal(4, 5, 3, 6), normal(5, 3, 3, 6)
    with pytest.raises(DiagnosticError) as failure:
        call("gru_sequence_grad", xs, h0, *weights, co, ch)
    (diagnostic,) = failure.value.diagnostics
    assert (diagnostic.code, diagnostic.message) == (
        "E0502",
        "assertion failed: gru: the initial state has one row per layer",
    )
