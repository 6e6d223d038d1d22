"""The autodiff test corpus: DL functions `f` with inputs and the same computation in PyTorch.

Each `Case` holds DL source that defines `fn f(...)` (and whatever helpers and structs it needs), the
arguments to call it with (float64 numpy arrays, `np.float64` scalars, Python ints, integer arrays,
tuples of these and `Struct`s), which arguments to differentiate (`wrt`, as in `grad(f, wrt=...)`) and a
PyTorch function doing the same computation in float64, with the same data-dependent control flow written
in Python. `tests/test_autodiff.py` runs them.

The inputs come from fixed seeds and are chosen away from the kinks of relu/abs/max/where and from the
boundaries of data-dependent branches and loop trip counts, so central finite differences are valid.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Struct:
    """A DL struct argument: the struct's name and its fields in declaration order."""

    name: str
    fields: dict[str, Any]


@dataclass(frozen=True)
class Case:
    name: str
    category: str
    source: str
    args: tuple
    torch_fn: Callable[..., torch.Tensor]
    wrt: int | tuple[int, ...] = 0
    # "direct": grad(f, wrt=...)(args); "lambda": grad of an anonymous function capturing the other arguments
    via: str = "direct"
    value_and_grad: bool = False
    second_order: bool = False
    notes: str = field(default="", compare=False)


CASES: list[Case] = []


def case(name: str, category: str, source: str, args: tuple, torch_fn: Callable, **options: Any) -> None:
    CASES.append(Case(name, category, source, args, torch_fn, **options))


# ---------------------------------------------------------------------------------------------------------
# Inputs


def normal(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def uniform(seed: int, low: float, high: float, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(low, high, shape)


def away(seed: int, *shape: int, margin: float = 0.2) -> np.ndarray:
    """Normal samples pushed at least `margin` away from zero (for relu, abs, where and sign tests)."""
    sample = normal(seed, *shape)
    return np.sign(sample) * (margin + np.abs(sample))


def s(value: float) -> np.float64:
    return np.float64(value)


def labels(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def setitem(tensor: torch.Tensor, index: Any, value: Any) -> torch.Tensor:
    """`tensor[index] = value` as DL does it: a new value, leaving the old one (and autograd) alone."""
    tensor = tensor.clone()
    tensor[index] = value
    return tensor


T = torch.tensor


# ---------------------------------------------------------------------------------------------------------
# Straight-line elementwise math

case(
    "softplus_exp_log",
    "elementwise",
    """
fn f(x) {
    return sum(log(1.0 + exp(x)))
}
""",
    (normal(1, 5),),
    lambda x: torch.log(1.0 + torch.exp(x)).sum(),
)

case(
    "softplus_log1p_expm1_erf",
    "elementwise",
    """
fn f(x) {
    let s = softplus(3.0 * x) + log1p(x * x) * expm1(0.5 * x)
    return sum(s * erf(x) + erf(2.0 * x))
}
""",
    (normal(61, 2, 4),),
    lambda x: (
        (F.softplus(3.0 * x) + torch.log1p(x * x) * torch.expm1(0.5 * x)) * torch.erf(x) + torch.erf(2.0 * x)
    ).sum(),
)

case(
    "softplus_erf_scalar",
    "elementwise",
    """
fn f(x) {
    return softplus(2.0 * x) * erf(x) + expm1(x) * log1p(x * x)
}
""",
    (s(0.7),),
    lambda x: F.softplus(2.0 * x) * torch.erf(x) + torch.expm1(x) * torch.log1p(x * x),
    second_order=True,
)

case(
    "step_functions",
    "elementwise",
    """
fn f(x, w) {
    let q = floor(3.0 * x) + ceil(x * w) + round(2.0 * w)
    return sum(q * x * w + sign(x) * w * w + round(x) * sign(w - x))
}
""",
    (normal(62, 3, 4), away(63, 3, 4)),
    lambda x, w: (
        (torch.floor(3.0 * x) + torch.ceil(x * w) + torch.round(2.0 * w)) * x * w
        + torch.sign(x) * w * w
        + torch.round(x) * torch.sign(w - x)
    ).sum(),
)

case(
    "step_functions_scalar",
    "elementwise",
    """
fn f(x) {
    return floor(3.0 * x) * x * x + sign(x) * x * x * x + ceil(x) * round(2.0 * x)
}
""",
    (s(0.7),),
    lambda x: torch.floor(3.0 * x) * x * x + torch.sign(x) * x**3 + torch.ceil(x) * torch.round(2.0 * x),
    second_order=True,
)

case(
    "var_std",
    "reduction",
    """
fn f(x, w) {
    let y = x * w
    let rows = var(y, axis=1) + std(y, axis=1, correction=1)
    let columns = std(y, axis=0, keepdims=true) * var(x, axis=0, keepdims=true, correction=1)
    return sum(rows * rows) + sum(columns) + var(y) * std(x, axis=(0, 1))
}
""",
    (normal(64, 3, 4), normal(65, 3, 4)),
    lambda x, w: (
        ((torch.var(x * w, dim=1, correction=0) + torch.std(x * w, dim=1, correction=1)) ** 2).sum()
        + (torch.std(x * w, dim=0, keepdim=True, correction=0) * torch.var(x, dim=0, keepdim=True, correction=1)).sum()
        + torch.var(x * w, correction=0) * torch.std(x, dim=(0, 1), correction=0)
    ),
)

case(
    "var_std_scalar",
    "reduction",
    """
fn f(x) {
    let v = [1.0, -2.0, 0.5, 3.0] * x + [0.0, 1.0, x * x, -1.0]
    return var(v) * 2.0 + std(v, correction=1)
}
""",
    (s(0.7),),
    lambda x: (
        torch.var(torch.stack([x, -2.0 * x + 1.0, 0.5 * x + x * x, 3.0 * x - 1.0]), correction=0) * 2.0
        + torch.std(torch.stack([x, -2.0 * x + 1.0, 0.5 * x + x * x, 3.0 * x - 1.0]), correction=1)
    ),
    second_order=True,
)

case(
    "flip_cumsum",
    "structure",
    """
fn f(x, w) {
    let running = cumsum(x * w, 1) + flip(cumsum(flip(x, 0), axis=0), 0)
    return sum(running * running * flip(w, (0, 1))) + sum(cumsum(tanh(x), axis=-1))
}
""",
    (normal(66, 3, 4), normal(67, 3, 4)),
    lambda x, w: (
        (
            (torch.cumsum(x * w, 1) + torch.flip(torch.cumsum(torch.flip(x, (0,)), 0), (0,))) ** 2
            * torch.flip(w, (0, 1))
        ).sum()
        + torch.cumsum(torch.tanh(x), -1).sum()
    ),
)

case(
    "pad",
    "structure",
    """
fn f(x, w, v) {
    let framed = pad(x * w, 1, 2, axis=(0, 1), value=v)
    let cropped = pad(tanh(x), -1, 1, axis=0)
    return sum(framed * framed * [1.0, -2.0, 0.5, 3.0, 1.5, -1.0, 2.0]) + sum(cropped * w)
}
""",
    (normal(68, 3, 4), normal(69, 3, 4), s(0.3)),
    lambda x, w, v: (
        (torch.nn.functional.pad(x * w - v, (1, 2, 1, 2)) + v)
        .pow(2)
        .mul(torch.tensor([1.0, -2.0, 0.5, 3.0, 1.5, -1.0, 2.0], dtype=x.dtype))
        .sum()
        + (torch.nn.functional.pad(torch.tanh(x), (0, 0, -1, 1)) * w).sum()
    ),
)

case(
    "keyword_operands",
    "structure",
    """
fn f(x, w) {
    let y = matmul(x, b=w * 2.0)
    let z = stack(tensors=(y, tanh(y)), axis=0)
    return sum(flip(x=z * z, axis=1)) + sum(pad(x, 1, 0, value=sum(w) * 0.5))
}
""",
    (normal(70, 3, 4), normal(71, 4, 2)),
    lambda x, w: (torch.stack((x @ (w * 2.0), torch.tanh(x @ (w * 2.0)))) ** 2).sum() + x.sum() + 3 * (w.sum() * 0.5),
)

case(
    "pad_scalar",
    "structure",
    """
fn f(x) {
    let v = pad([x, x * x], 2, -1, value=x * x * 3.0)
    return sum(v * [1.0, 2.0, 0.5])
}
""",
    (s(0.7),),
    lambda x: (torch.stack([3.0 * x * x, 3.0 * x * x, x]) * torch.tensor([1.0, 2.0, 0.5], dtype=x.dtype)).sum(),
    second_order=True,
)

case(
    "flip_cumsum_scalar",
    "structure",
    """
fn f(x) {
    let v = cumsum([1.0, x, x * x, 2.0], 0)
    return sum(v * flip(v, 0) * [1.0, -1.0, 0.5, 3.0])
}
""",
    (s(0.7),),
    lambda x: (
        torch.cumsum(torch.stack([torch.ones_like(x), x, x * x, 2.0 * torch.ones_like(x)]), 0)
        * torch.flip(torch.cumsum(torch.stack([torch.ones_like(x), x, x * x, 2.0 * torch.ones_like(x)]), 0), (0,))
        * torch.tensor([1.0, -1.0, 0.5, 3.0], dtype=x.dtype)
    ).sum(),
    second_order=True,
)

case(
    "clip_bounds",
    "elementwise",
    """
fn f(x, lo, hi) {
    let ratio = exp(x)
    return sum(minimum(ratio * hi, clip(ratio, 0.8, 1.2) * hi) + clip(x, lo, hi) * x)
}
""",
    (normal(68, 3, 4), normal(69, 4) * 0.3 - 0.5, normal(70, 3, 4) * 0.3 + 0.5),
    lambda x, lo, hi: (
        torch.minimum(torch.exp(x) * hi, torch.clamp(torch.exp(x), 0.8, 1.2) * hi) + torch.clamp(x, lo, hi) * x
    ).sum(),
    wrt=(0, 1, 2),
)

case(
    "sort_take_along_axis",
    "structure",
    """
fn f(x, w) {
    let order = argsort(x * w, axis=0)
    let picked = take_along_axis(x, order, 0)
    return sum(sort(x * w, descending=true) * w) + sum(picked * picked * w) + sum(sort(tanh(x), axis=0)[0])
}
""",
    (normal(71, 3, 4), normal(72, 3, 4)),
    lambda x, w: (
        (torch.sort(x * w, dim=-1, descending=True, stable=True).values * w).sum()
        + (torch.gather(x, 0, torch.argsort(x * w, dim=0, stable=True)) ** 2 * w).sum()
        + torch.sort(torch.tanh(x), dim=0, stable=True).values[0].sum()
    ),
)

# topk's values are x read at its indices: the gradient goes back to those positions; the indices carry none
case(
    "topk",
    "structure",
    """
fn f(x, w) {
    let (top, at) = topk(x * w, 2)
    let (low, _) = topk(tanh(x), 1, axis=0, largest=false)
    return sum(top * top * w[:, 0:2]) + sum(low) + sum(take_along_axis(x, at, 1) * 0.5)
}
""",
    (normal(314, 3, 4), normal(315, 3, 4)),
    lambda x, w: (
        (torch.topk(x * w, 2).values ** 2 * w[:, 0:2]).sum()
        + torch.topk(torch.tanh(x), 1, dim=0, largest=False).values.sum()
        + (torch.gather(x, 1, torch.topk(x * w, 2).indices) * 0.5).sum()
    ),
    wrt=(0, 1),
)

case(
    "tril_triu",
    "structure",
    """
fn f(x, w) {
    let masked = tril(x @ w, -1) + triu(x * x, k=1) * 0.5
    return sum(masked * masked) + sum(tril(exp(x)))
}
""",
    (normal(62, 2, 4, 4), normal(63, 4, 4)),
    lambda x, w: ((torch.tril(x @ w, -1) + torch.triu(x * x, 1) * 0.5) ** 2).sum() + torch.tril(torch.exp(x)).sum(),
    wrt=(0, 1),
)

case(
    "dimensions_as_one_tuple",
    "structure",
    """
fn f(x, w) {
    let y = x @ w
    let h = reshape(y, (len(x), -1))
    let back = reshape(h * h, shape(y))
    return sum(transpose(back, (2, 0, 1)) * transpose(broadcast_to(w[0], shape(back)), (2, 0, 1)))
}
""",
    (normal(66, 2, 3, 4), normal(67, 4, 5)),
    lambda x, w: (
        (((x @ w).reshape(x.shape[0], -1)) ** 2).reshape((x @ w).shape).permute(2, 0, 1)
        * torch.broadcast_to(w[0], (2, 3, 5)).permute(2, 0, 1)
    ).sum(),
    wrt=(0, 1),
)

case(
    "swapaxes_batched_scores",
    "structure",
    """
fn f(q, k) {
    let scores = q @ swapaxes(k, -2, -1)
    return sum(scores * scores) + sum(swapaxes(q, 0, 2) * swapaxes(k, 2, 0))
}
""",
    (normal(64, 2, 3, 4, 4), normal(65, 2, 3, 4, 4)),
    lambda q, k: ((q @ k.transpose(-2, -1)) ** 2).sum() + (q.transpose(0, 2) * k.transpose(2, 0)).sum(),
    wrt=(0, 1),
)

case(
    "einsum_attention_and_sums",
    "structure",
    """
fn f(q, k, w) {
    let scores = einsum("bqd,bkd->bqk", q, k)
    let mixed = einsum("bqk,bkd,de->bqe", softmax(scores), k, w)
    return sum(mixed * mixed) + einsum("bqd->", q * q) + sum(einsum("de,b->bd", w, q[:, 0, 0]))
}
""",
    (normal(65, 2, 3, 4), normal(66, 2, 5, 4), normal(67, 4, 2)),
    lambda q, k, w: (
        (torch.einsum("bqk,bkd,de->bqe", torch.softmax(torch.einsum("bqd,bkd->bqk", q, k), -1), k, w) ** 2).sum()
        + (q * q).sum()
        + torch.einsum("de,b->bd", w, q[:, 0, 0]).sum()
    ),
    wrt=(0, 1, 2),
)


def dropout_mask(seed: int, p: float, shape: tuple[int, ...]) -> torch.Tensor:
    """DL's dropout mask: `rand(n, seed=seed) >= p` over the flattened tensor."""
    draws = np.random.default_rng(seed).random(int(np.prod(shape))).astype(np.float32).reshape(shape)
    return torch.tensor(draws >= np.float32(p))


case(
    "dropout_through_the_mask",
    "elementwise",
    """
fn f(x, w) {
    let h = dropout(tanh(x @ w), 0.4f64, seed=5)
    let off = dropout(h, 0.4f64, seed=6, training=false)
    return sum(dropout(h * off, 0.25f64, seed=9) * x[:, 0:2])
}
""",
    (normal(68, 4, 3), normal(69, 3, 2)),
    lambda x, w: (
        torch.where(
            dropout_mask(9, 0.25, (4, 2)),
            (torch.where(dropout_mask(5, 0.4, (4, 2)), torch.tanh(x @ w), 0.0) / 0.6) ** 2,
            0.0,
        )
        / 0.75
        * x[:, 0:2]
    ).sum(),
    wrt=(0, 1),
)

case(
    "ellipsis_indexing_and_assignment",
    "indexing",
    """
fn f(x) {
    let y = x[..., 0] * x[..., 2]
    let z = x
    z[..., 1] = y * 3.0
    return sum(y * y) + sum(z * x) + sum(x[1, ...]) + sum(x[0, ..., 1:3])
}
""",
    (normal(70, 2, 2, 3),),
    lambda x: (
        ((x[..., 0] * x[..., 2]) ** 2).sum()
        + (setitem(x, (..., 1), x[..., 0] * x[..., 2] * 3.0) * x).sum()
        + x[1, ...].sum()
        + x[0, ..., 1:3].sum()
    ),
)

case(
    "arithmetic_on_a_parameter_struct",
    "structs",
    """
struct M { w: f64[2, 2], b: f64[2] }

fn loss(m: M, x: f64[2]) -> f64 {
    return sum(tanh(x @ m.w + m.b))
}

fn f(m: M, g: M, c: f64) -> f64 {
    let moved = m - c * g
    moved -= 0.5 * g
    let n = -moved / 2.0
    return loss(moved, [1.0, 2.0]) + sum(n.w * n.w) + sum((m * g).b) + sum(((m.b, c) ** 2.0)[0])
}
""",
    (
        Struct("M", {"w": normal(71, 2, 2), "b": normal(72, 2)}),
        Struct("M", {"w": normal(73, 2, 2), "b": normal(74, 2)}),
        s(0.3),
    ),
    lambda m, g, c: (
        torch.tanh(
            torch.tensor([1.0, 2.0], dtype=torch.float64) @ (m.w - c * g.w - 0.5 * g.w) + (m.b - c * g.b - 0.5 * g.b)
        ).sum()
        + ((-(m.w - c * g.w - 0.5 * g.w) / 2.0) ** 2).sum()
        + (m.b * g.b).sum()
        + (m.b**2).sum()
    ),
    wrt=(0, 1, 2),
)

case(
    "sqrt_division",
    "elementwise",
    """
fn f(x) {
    return sum(sqrt(x) / (1.0 + x * x))
}
""",
    (uniform(2, 0.5, 2.0, 2, 3),),
    lambda x: (torch.sqrt(x) / (1.0 + x * x)).sum(),
)

case(
    "tanh_times_sigmoid",
    "elementwise",
    """
fn f(x) {
    let t = tanh(x)
    let g = sigmoid(2.0 * x)
    return sum(t * g - 0.5 * t)
}
""",
    (normal(3, 6),),
    lambda x: (torch.tanh(x) * torch.sigmoid(2.0 * x) - 0.5 * torch.tanh(x)).sum(),
)

case(
    "relu_and_abs",
    "elementwise",
    """
fn f(x) {
    return sum(relu(x) * abs(x + 0.1) + abs(x) * 0.5)
}
""",
    (away(4, 2, 3, margin=0.3),),
    lambda x: (torch.relu(x) * torch.abs(x + 0.1) + torch.abs(x) * 0.5).sum(),
    notes="inputs at least 0.3 from 0 and so 0.2 from -0.1",
)

case(
    "sin_cos",
    "elementwise",
    """
fn f(x) {
    return sum(sin(x) * cos(2.0 * x) + cos(x) ** 2)
}
""",
    (normal(5, 4),),
    lambda x: (torch.sin(x) * torch.cos(2.0 * x) + torch.cos(x) ** 2).sum(),
)

case(
    "integer_and_float_powers",
    "elementwise",
    """
fn f(x) {
    return sum(x ** 3 - 2.0 * x ** 2 + x ** 0.5 + -x ** 2)
}
""",
    (uniform(6, 0.5, 2.0, 4),),
    lambda x: (x**3 - 2.0 * x**2 + x**0.5 + -(x**2)).sum(),
)

case(
    "tensor_power_tensor",
    "elementwise",
    """
fn f(x, y) {
    return sum(x ** y)
}
""",
    (uniform(7, 0.5, 2.0, 3), normal(8, 3)),
    lambda x, y: (x**y).sum(),
    wrt=(0, 1),
)

case(
    "division_both_operands",
    "elementwise",
    """
fn f(x, y) {
    return sum(x / y - y / (x * x + 1.0))
}
""",
    (normal(9, 2, 2), uniform(10, 0.5, 1.5, 2, 2)),
    lambda x, y: (x / y - y / (x * x + 1.0)).sum(),
    wrt=(0, 1),
)

case(
    "scalar_arguments",
    "elementwise",
    """
fn f(a, b) {
    return a * b + sin(a) / b - exp(-a * b)
}
""",
    (s(0.7), s(1.3)),
    lambda a, b: a * b + torch.sin(a) / b - torch.exp(-a * b),
    wrt=(0, 1),
    value_and_grad=True,
)

case(
    "second_argument_only",
    "elementwise",
    """
fn f(x, w) {
    return sum(tanh(x * w) * x)
}
""",
    (normal(11, 4), normal(12, 4)),
    lambda x, w: (torch.tanh(x * w) * x).sum(),
    wrt=1,
)

# ---------------------------------------------------------------------------------------------------------
# Broadcasting

case(
    "broadcast_row_vector",
    "broadcasting",
    """
fn f(x, b) {
    return sum(tanh(x + b))
}
""",
    (normal(13, 3, 4), normal(14, 4)),
    lambda x, b: torch.tanh(x + b).sum(),
    wrt=(0, 1),
)

case(
    "broadcast_scalar_times_tensor",
    "broadcasting",
    """
fn f(a, x) {
    let y = a * x + a
    return sum(y * y)
}
""",
    (s(0.8), normal(15, 3, 4)),
    lambda a, x: ((a * x + a) ** 2).sum(),
    wrt=(0, 1),
)

case(
    "broadcast_column_and_row",
    "broadcasting",
    """
fn f(c, r, x) {
    return sum(exp(c + r) * x) + sum(c * x)
}
""",
    (normal(16, 3, 1), normal(17, 1, 4), normal(18, 3, 4)),
    lambda c, r, x: (torch.exp(c + r) * x).sum() + (c * x).sum(),
    wrt=(0, 1, 2),
)

# ---------------------------------------------------------------------------------------------------------
# Matmul

case(
    "matmul_2d",
    "matmul",
    """
fn f(a, b) {
    let c = a @ b
    return sum(c * c)
}
""",
    (normal(19, 2, 3), normal(20, 3, 4)),
    lambda a, b: ((a @ b) ** 2).sum(),
    wrt=(0, 1),
)

case(
    "matmul_chain",
    "matmul",
    """
fn f(x, w1, w2, w3) {
    return sum(tanh(tanh(x @ w1) @ w2) @ w3)
}
""",
    (normal(21, 2, 3), normal(22, 3, 4), normal(23, 4, 3), normal(24, 3, 2)),
    lambda x, w1, w2, w3: (torch.tanh(torch.tanh(x @ w1) @ w2) @ w3).sum(),
    wrt=(1, 2, 3),
)

case(
    "matmul_matrix_vector",
    "matmul",
    """
fn f(a, v) {
    return sum(sin(a @ v))
}
""",
    (normal(25, 3, 4), normal(26, 4)),
    lambda a, v: torch.sin(a @ v).sum(),
    wrt=(0, 1),
)

case(
    "matmul_vector_matrix",
    "matmul",
    """
fn f(v, a) {
    let u = v @ a
    return sum(u * u)
}
""",
    (normal(27, 3), normal(28, 3, 4)),
    lambda v, a: ((v @ a) ** 2).sum(),
    wrt=(0, 1),
)

case(
    "matmul_dot_product",
    "matmul",
    """
fn f(u, v) {
    return (u @ v) * (u @ u)
}
""",
    (normal(29, 4), normal(30, 4)),
    lambda u, v: (u @ v) * (u @ u),
    wrt=(0, 1),
)

case(
    "matmul_batched_3d",
    "matmul",
    """
fn f(a, b) {
    return sum(tanh(a @ b))
}
""",
    (normal(31, 2, 2, 3), normal(32, 2, 3, 2)),
    lambda a, b: torch.tanh(a @ b).sum(),
    wrt=(0, 1),
)

case(
    "matmul_batched_times_matrix",
    "matmul",
    """
fn f(a, w) {
    let y = a @ w
    return sum(y * y)
}
""",
    (normal(33, 2, 2, 3), normal(34, 3, 2)),
    lambda a, w: ((a @ w) ** 2).sum(),
    wrt=(0, 1),
)

case(
    "attention_batched",
    "matmul",
    """
fn f(q, k, v) {
    let scores = q @ transpose(k, 0, 2, 1) * 0.5
    return sum(softmax(scores, axis=-1) @ v)
}
""",
    (normal(35, 2, 3, 2), normal(36, 2, 3, 2), normal(37, 2, 3, 2)),
    lambda q, k, v: (torch.softmax(q @ k.permute(0, 2, 1) * 0.5, dim=-1) @ v).sum(),
    wrt=(0, 1, 2),
)

# ---------------------------------------------------------------------------------------------------------
# Reductions

case(
    "sum_over_axis",
    "reductions",
    """
fn f(x) {
    let rows = sum(x, axis=1)
    let cols = sum(x, axis=0)
    return sum(rows * rows) + sum(sin(cols)) + sum(x, axis=-1)[0]
}
""",
    (normal(38, 3, 4),),
    lambda x: (x.sum(1) ** 2).sum() + torch.sin(x.sum(0)).sum() + x.sum(-1)[0],
)

case(
    "sum_keepdims_normalise",
    "reductions",
    """
fn f(x, w) {
    let p = x / sum(x, axis=0, keepdims=true)
    return sum(p * w)
}
""",
    (uniform(39, 0.5, 2.0, 3, 4), normal(40, 3, 4)),
    lambda x, w: (x / x.sum(0, keepdim=True) * w).sum(),
    wrt=(0, 1),
)

case(
    "mean_all_and_axis",
    "reductions",
    """
fn f(x, w) {
    return mean(x * x) + sum(mean(x, axis=0) * w) + mean(mean(x, axis=1, keepdims=true) ** 2)
}
""",
    (normal(41, 3, 4), normal(42, 4)),
    lambda x, w: (x * x).mean() + (x.mean(0) * w).sum() + (x.mean(1, keepdim=True) ** 2).mean(),
    wrt=(0, 1),
)

case(
    "max_all_and_axis",
    "reductions",
    """
fn f(x) {
    return max(x) + sum(max(x, axis=1) * [1.0, 2.0, 3.0]) + sum(max(x, axis=0, keepdims=true) ** 2)
}
""",
    (normal(43, 3, 4),),
    lambda x: (
        x.max() + (x.max(1).values * T([1.0, 2.0, 3.0], dtype=torch.float64)).sum() + (x.max(0).values ** 2).sum()
    ),
)

case(
    "min_all_and_keepdims",
    "reductions",
    """
fn f(x) {
    let shifted = x - min(x, axis=1, keepdims=true)
    return sum(exp(-shifted)) + min(x) * 3.0 + sum(min(x, axis=0))
}
""",
    (normal(44, 3, 4),),
    lambda x: torch.exp(-(x - x.min(1, keepdim=True).values)).sum() + x.min() * 3.0 + x.min(0).values.sum(),
)

case(
    "logsumexp_all_axis_keepdims",
    "reductions",
    """
fn f(x) {
    let a = logsumexp(x)
    let b = logsumexp(x, axis=1)
    let c = logsumexp(x, axis=0, keepdims=true)
    return a + sum(b * b) + sum(x - c)
}
""",
    (normal(45, 3, 4),),
    lambda x: (
        torch.logsumexp(x.reshape(-1), 0)
        + (torch.logsumexp(x, 1) ** 2).sum()
        + (x - torch.logsumexp(x, 0, keepdim=True)).sum()
    ),
)

case(
    "reductions_over_several_axes",
    "reductions",
    """
fn f(x) {
    let pooled = mean(x, axis=(0, 2))
    let peaks = max(x, axis=(2, -3), keepdims=true)
    let spread = logsumexp(x, axis=(1, 2))
    return sum(pooled * pooled) + sum(peaks * x) + sum(spread) + sum(sum(x * x, axis=(0, 1)) * [1.0, -1.0, 2.0, 0.5])
}
""",
    (normal(64, 2, 3, 4),),
    lambda x: (
        (x.mean((0, 2)) ** 2).sum()
        + (torch.amax(x, (2, 0), keepdim=True) * x).sum()
        + torch.logsumexp(x, (1, 2)).sum()
        + ((x * x).sum((0, 1)) * torch.tensor([1.0, -1.0, 2.0, 0.5], dtype=torch.float64)).sum()
    ),
)

case(
    "layer_norm",
    "reductions",
    """
fn f(x, g, b) {
    let m = mean(x, axis=1, keepdims=true)
    let v = mean((x - m) ** 2, axis=1, keepdims=true)
    let y = (x - m) / sqrt(v + 1e-5) * g + b
    return sum(y * [[1.0, -2.0, 0.5, 3.0]])
}
""",
    (normal(46, 3, 4), normal(47, 4), normal(48, 4)),
    lambda x, g, b: (
        (
            (x - x.mean(1, keepdim=True))
            / torch.sqrt(((x - x.mean(1, keepdim=True)) ** 2).mean(1, keepdim=True) + 1e-5)
            * g
            + b
        )
        .mul(T([[1.0, -2.0, 0.5, 3.0]], dtype=torch.float64))
        .sum()
    ),
    wrt=(0, 1, 2),
)

# ---------------------------------------------------------------------------------------------------------
# Softmax, log_softmax, cross-entropy

case(
    "softmax_last_axis",
    "softmax",
    """
fn f(x, t) {
    return sum(softmax(x) * t)
}
""",
    (normal(49, 2, 4), normal(50, 2, 4)),
    lambda x, t: (torch.softmax(x, -1) * t).sum(),
    wrt=(0, 1),
)

case(
    "softmax_axis0_with_temperature",
    "softmax",
    """
fn f(x, temperature) {
    let p = softmax(x / temperature, axis=0)
    return sum(p * p * [[1.0], [2.0], [3.0]])
}
""",
    (normal(51, 3, 2), s(1.7)),
    lambda x, t: (torch.softmax(x / t, 0) ** 2 * T([[1.0], [2.0], [3.0]], dtype=torch.float64)).sum(),
    wrt=(0, 1),
)

case(
    "log_softmax",
    "softmax",
    """
fn f(x) {
    let lp = log_softmax(x, axis=1)
    return sum(lp * [0.25, 0.5, -0.375]) + sum(log_softmax(x, axis=0)[0])
}
""",
    (normal(52, 2, 3),),
    lambda x: (
        (torch.log_softmax(x, 1) * T([0.25, 0.5, -0.375], dtype=torch.float64)).sum() + torch.log_softmax(x, 0)[0].sum()
    ),
)

case(
    "cross_entropy_one_hot",
    "softmax",
    """
fn f(x, w, b, labels) {
    let logits = x @ w + b
    let targets = float(one_hot(labels, 3), dtype=f64)
    return -mean(sum(targets * log_softmax(logits, axis=1), axis=1))
}
""",
    (normal(53, 4, 2), normal(54, 2, 3), normal(55, 3), labels(0, 2, 1, 2)),
    lambda x, w, b, y: -(F.one_hot(y, 3).double() * torch.log_softmax(x @ w + b, 1)).sum(1).mean(),
    wrt=(1, 2),
    value_and_grad=True,
)

case(
    "cross_entropy_gather",
    "softmax",
    """
fn f(x, w, labels) {
    let lp = log_softmax(x @ w, axis=1)
    let n = len(labels)
    let picked = gather(reshape(lp, -1), arange(n) * 3 + labels)
    return -mean(picked)
}
""",
    (normal(56, 4, 2), normal(57, 2, 3), labels(1, 0, 2, 1)),
    lambda x, w, y: -torch.log_softmax(x @ w, 1).reshape(-1)[torch.arange(4) * 3 + y].mean(),
    wrt=(0, 1),
)

# ---------------------------------------------------------------------------------------------------------
# maximum, minimum, where

case(
    "maximum_minimum",
    "select",
    """
fn f(x, y) {
    return sum(maximum(x, y) * minimum(x, 0.5) + minimum(x, y) ** 2)
}
""",
    (normal(58, 2, 3), normal(59, 2, 3)),
    lambda x, y: (torch.maximum(x, y) * torch.clamp(x, max=0.5) + torch.minimum(x, y) ** 2).sum(),
    wrt=(0, 1),
    notes="elements of x and y are apart, and x is away from 0.5 (checked by the finite-difference test)",
)

case(
    "clip_with_maximum_of_minimum",
    "select",
    """
fn f(x) {
    return sum(maximum(minimum(x, 1.0), -1.0) * x)
}
""",
    (np.array([-1.7, -0.6, 0.3, 0.8, 1.4, 2.2]),),
    lambda x: (torch.clamp(x, -1.0, 1.0) * x).sum(),
)

case(
    "where_on_sign",
    "select",
    """
fn f(x, y) {
    return sum(where(x > 0.0, x * y, -3.0 * x) + where(y < x, sin(y), 0.0))
}
""",
    (away(60, 2, 3), away(61, 2, 3)),
    lambda x, y: (torch.where(x > 0.0, x * y, -3.0 * x) + torch.where(y < x, torch.sin(y), torch.zeros_like(y))).sum(),
    wrt=(0, 1),
)

# ---------------------------------------------------------------------------------------------------------
# Shapes: transpose, reshape, concat, stack, broadcast_to, gather

case(
    "transpose_2d",
    "shapes",
    """
fn f(a, b) {
    return sum(transpose(a) @ b * transpose(b) @ a)
}
""",
    (normal(62, 3, 2), normal(63, 3, 2)),
    lambda a, b: ((a.T @ b) * (b.T @ a)).sum(),
    wrt=(0, 1),
)

case(
    "transpose_permutation",
    "shapes",
    """
fn f(x, w) {
    let y = transpose(x, 1, 0, 2)
    return sum(sin(y) * w) + sum(transpose(x) * x)
}
""",
    (normal(64, 2, 3, 2), normal(65, 3, 2, 2)),
    lambda x, w: (torch.sin(x.permute(1, 0, 2)) * w).sum() + (x.permute(2, 1, 0) * x).sum(),
    wrt=(0, 1),
)

case(
    "reshape",
    "shapes",
    """
fn f(x, w) {
    let y = reshape(x, 3, -1) @ w
    return sum(tanh(reshape(y, 6)))
}
""",
    (normal(66, 2, 6), normal(67, 4, 2)),
    lambda x, w: torch.tanh((x.reshape(3, -1) @ w).reshape(6)).sum(),
    wrt=(0, 1),
)

case(
    "concat_axis0_and_axis1",
    "shapes",
    """
fn f(x, y, w) {
    let side = concat((x, y), axis=1)
    let down = concat((x, y * 2.0))
    return sum(side @ w) + sum(down * down)
}
""",
    (normal(68, 2, 2), normal(69, 2, 2), normal(70, 4, 3)),
    lambda x, y, w: (torch.cat((x, y), 1) @ w).sum() + (torch.cat((x, y * 2.0), 0) ** 2).sum(),
    wrt=(0, 1, 2),
)

case(
    "stack",
    "shapes",
    """
fn f(x, y, w) {
    let a = stack((x, y * 2.0, x * y))
    let b = stack((x, y), axis=1)
    return sum(a * w) + sum(sin(b))
}
""",
    (normal(71, 3), normal(72, 3), normal(73, 3, 3)),
    lambda x, y, w: (torch.stack((x, y * 2.0, x * y)) * w).sum() + torch.sin(torch.stack((x, y), 1)).sum(),
    wrt=(0, 1, 2),
)

case(
    "broadcast_to",
    "shapes",
    """
fn f(b, x) {
    return sum(broadcast_to(b, 3, 4) * x) + sum(broadcast_to(b * b, 2, 3, 4))
}
""",
    (normal(74, 4), normal(75, 3, 4)),
    lambda b, x: (torch.broadcast_to(b, (3, 4)) * x).sum() + torch.broadcast_to(b * b, (2, 3, 4)).sum(),
    wrt=(0, 1),
)

case(
    "gather_rows_repeated",
    "shapes",
    """
fn f(x, idx) {
    let rows = gather(x, idx)
    return sum(rows * rows * [1.0, 2.0, 3.0])
}
""",
    (normal(76, 4, 3), labels(2, 0, 2, -1, 2)),
    lambda x, idx: (x[idx] ** 2 * T([1.0, 2.0, 3.0], dtype=torch.float64)).sum(),
    notes="row 2 is gathered three times: its gradient accumulates; -1 counts from the end",
)

case(
    "gather_axis1_2d_indices",
    "shapes",
    """
fn f(x) {
    let picked = gather(x, [[0, 3], [3, 1]], axis=1)
    return sum(exp(picked))
}
""",
    (normal(77, 2, 4),),
    lambda x: torch.exp(x[:, T([[0, 3], [3, 1]])]).sum(),
)

# Indexing by integer tensors, as numpy and torch index: the adjoint adds into zeros at the elements read

case(
    "pick_each_rows_label",
    "shapes",
    """
fn f(z, y) {
    return -mean(log_softmax(z)[arange(len(y)), y])
}
""",
    (normal(78, 4, 3), labels(0, 2, 1, -1)),
    lambda z, y: -F.log_softmax(z, dim=-1)[torch.arange(4), y].mean(),
    value_and_grad=True,
    notes="the negative log-likelihood as PyTorch users write it; -1 is the last class",
)

case(
    "pick_columns_among_full_slices",
    "shapes",
    """
fn f(x, idx) {
    let picked = x[:, idx]
    return sum(picked * picked * [1.0, -2.0, 3.0, 0.5])
}
""",
    (normal(79, 3, 5), labels(4, 0, 4, -2)),
    lambda x, idx: (x[:, idx] ** 2 * T([1.0, -2.0, 3.0, 0.5], dtype=torch.float64)).sum(),
    notes="column 4 is read twice (once as -1 would): its gradient accumulates",
)

case(
    "pick_leading_axes_of_rank_3",
    "shapes",
    """
fn f(x, i, j) {
    let picked = x[i, j]
    return sum(tanh(picked) * [0.5, -1.5])
}
""",
    (normal(80, 3, 4, 2), labels(0, 2, 2, -1, 1), labels(3, 0, 0, 1, -4)),
    lambda x, i, j: (torch.tanh(x[i, j]) * T([0.5, -1.5], dtype=torch.float64)).sum(),
)

case(
    "pick_with_broadcast_indices",
    "shapes",
    """
fn f(x, rows) {
    let picked = x[rows, [[1, 0, 1]], :]
    return sum(exp(picked[..., 0]) + picked[..., 1])
}
""",
    (normal(81, 3, 2, 2), np.array([[2], [0]])),
    lambda x, rows: (
        torch.exp(x[rows, T([[1, 0, 1]]).long(), :][..., 0]) + x[rows, T([[1, 0, 1]]).long(), :][..., 1]
    ).sum(),
    notes="indices of shapes [2, 1] and [1, 3] broadcast to [2, 3], then the last axis follows",
)

case(
    "pick_an_integer_and_a_tensor",
    "shapes",
    """
fn f(x, j) {
    return sum(x[1, j] ** 2.0)
}
""",
    (normal(82, 3, 4), labels(3, 1, 3)),
    lambda x, j: (x[1, j] ** 2).sum(),
)

case(
    "pick_after_an_ellipsis",
    "shapes",
    """
fn f(x, j) {
    return sum(x[..., j] * x[j, ...][0, 0])
}
""",
    (normal(83, 3, 2, 3), labels(2, 0, -1)),
    lambda x, j: (x[..., j] * x[j, ...][0, 0]).sum(),
    notes="`...` stands for full slices: x[:, :, j] and x[j, :, :]",
)

case(
    "pick_beside_a_partial_slice",
    "shapes",
    """
fn f(x, j) {
    return sum(tanh(x[j, 1:]) * x[j, :3])
}
""",
    (normal(84, 3, 4), labels(2, 0, 2, -1)),
    lambda x, j: (torch.tanh(x[j, 1:]) * x[j, :3]).sum(),
    notes="the slice's view first, its adjoint placed in its region; the picks of it as on leading axes",
)

case(
    "pick_parted_by_a_slice",
    "shapes",
    """
fn f(x, i, j) {
    return sum(x[i, :, j] ** 2.0) + sum(exp(x[:, i, 1::2]))
}
""",
    (normal(85, 3, 4, 5), labels(2, 0, -1), labels(1, -4, 3)),
    lambda x, i, j: (x[i, :, j] ** 2).sum() + torch.exp(x[:, i, 1::2]).sum(),
    notes="parted picks put their dimension first; picks after a slice keep it in place: both moved to the front",
)

case(
    "pick_two_axes_after_a_slice",
    "shapes",
    """
fn f(x, i, j) {
    return sum(sin(x[:, i, j]) * x[:, i, j])
}
""",
    (normal(86, 2, 3, 4), labels(2, 0, -1, 1), labels(1, -4, 3, 3)),
    lambda x, i, j: (torch.sin(x[:, i, j]) * x[:, i, j]).sum(),
    notes="[2, B]: the adjoint's picked dimension is moved to the front, then the target's axes moved back",
)

# ---------------------------------------------------------------------------------------------------------
# Indexing, slicing and indexed rebinding

case(
    "index_row_and_element",
    "indexing",
    """
fn f(x) {
    return sum(x[1] * x[2]) + x[0, 2] * x[-1, -1] + sum(x[-2])
}
""",
    (normal(78, 3, 3),),
    lambda x: (x[1] * x[2]).sum() + x[0, 2] * x[-1, -1] + x[-2].sum(),
)

case(
    "index_column",
    "indexing",
    """
fn f(x, w) {
    return sum(tanh(x[:, 0] * w) + x[:, -1])
}
""",
    (normal(79, 3, 4), normal(80, 3)),
    lambda x, w: (torch.tanh(x[:, 0] * w) + x[:, -1]).sum(),
    wrt=(0, 1),
)

case(
    "slices_with_steps",
    "indexing",
    """
fn f(x) {
    let a = x[1:3]
    let b = x[:, ::2]
    let c = x[2:, 1:]
    return sum(a * a) + sum(exp(b)) + sum(c) * x[0, 0]
}
""",
    (normal(81, 4, 4),),
    lambda x: (x[1:3] ** 2).sum() + torch.exp(x[:, ::2]).sum() + x[2:, 1:].sum() * x[0, 0],
)

case(
    "integer_array_index",
    "indexing",
    """
fn f(x) {
    let rows = x[[2, 0, 2]]
    return sum(rows * [[1.0], [2.0], [3.0]]) + sum(x[[1, 1]] ** 2)
}
""",
    (normal(82, 3, 2),),
    lambda x: (x[T([2, 0, 2])] * T([[1.0], [2.0], [3.0]], dtype=torch.float64)).sum() + (x[T([1, 1])] ** 2).sum(),
)

case(
    "indexed_rebinding_overwrites",
    "indexing",
    """
fn f(x) {
    let y = x * 1.0
    y[1] = y[0] * 2.0
    y[:, 2] = sin(y[:, 0])
    y[2, 1] = 5.0
    return sum(y * y * x)
}
""",
    (normal(83, 3, 3),),
    lambda x: _overwrites(x),
    notes="the overwritten elements of y stop depending on x there",
)


def _overwrites(x: torch.Tensor) -> torch.Tensor:
    y = x * 1.0
    y = setitem(y, 1, y[0] * 2.0)
    y = setitem(y, (slice(None), 2), torch.sin(y[:, 0]))
    y = setitem(y, (2, 1), 5.0)
    return (y * y * x).sum()


case(
    "indexed_rebinding_augmented",
    "indexing",
    """
fn f(x, v) {
    let m = x * 1.0
    m[1, 0] += v * 3.0
    m[0] *= v
    m[:, 1] -= m[:, 0]
    return sum(m * m)
}
""",
    (normal(84, 2, 2), s(1.3)),
    lambda x, v: _augmented(x, v),
    wrt=(0, 1),
)


def _augmented(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    m = x * 1.0
    m = setitem(m, (1, 0), m[1, 0] + v * 3.0)
    m = setitem(m, 0, m[0] * v)
    m = setitem(m, (slice(None), 1), m[:, 1] - m[:, 0])
    return (m * m).sum()


case(
    "indexed_rebinding_recurrence",
    "indexing",
    """
fn f(x, a) {
    let y = x * 0.0
    y[0] = x[0]
    for i in 1..5 {
        y[i] = y[i - 1] * a + x[i]
    }
    return sum(y * y)
}
""",
    (normal(85, 5), s(0.6)),
    lambda x, a: _recurrence(x, a),
    wrt=(0, 1),
)


def _recurrence(x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    y = x * 0.0
    y = setitem(y, 0, x[0])
    for i in range(1, 5):
        y = setitem(y, i, y[i - 1] * a + x[i])
    return (y * y).sum()


case(
    "fill_zeros_rows_in_loop",
    "indexing",
    """
fn f(x, w) {
    let out = zeros(3, 2, dtype=f64)
    for i in 0..3 {
        out[i] = x[i] * w * float(i + 1, dtype=f64)
    }
    return sum(tanh(out))
}
""",
    (normal(86, 3, 2), normal(87, 2)),
    lambda x, w: torch.tanh(torch.stack([x[i] * w * float(i + 1) for i in range(3)])).sum(),
    wrt=(0, 1),
)

# ---------------------------------------------------------------------------------------------------------
# Tuples

case(
    "tuple_from_helper",
    "tuples",
    """
fn stats(x) {
    return (mean(x), sum(x * x))
}

fn f(x, y) {
    let (m, q) = stats(x * y)
    let t = stats(y)
    return m * q + t[0] - t[-1] * 0.5
}
""",
    (normal(88, 4), normal(89, 4)),
    lambda x, y: (x * y).mean() * ((x * y) ** 2).sum() + y.mean() - (y * y).sum() * 0.5,
    wrt=(0, 1),
)

case(
    "tuple_argument",
    "tuples",
    """
fn f(pair, w) {
    let (a, b) = pair
    return sum(tanh(a @ w) * b)
}
""",
    ((normal(90, 2, 3), normal(91, 2, 2)), normal(92, 3, 2)),
    lambda pair, w: (torch.tanh(pair[0] @ w) * pair[1]).sum(),
    value_and_grad=True,
    notes="gradient of a tuple argument is a tuple",
)

case(
    "nested_tuple_argument_and_weight",
    "tuples",
    """
fn f(t, w) {
    let ((a, b), c) = t
    return sum(a * w) * c + sum(exp(b)) * t[1]
}
""",
    (((normal(93, 3), normal(94, 2)), s(0.4)), normal(95, 3)),
    lambda t, w: (t[0][0] * w).sum() * t[1] + torch.exp(t[0][1]).sum() * t[1],
    wrt=(0, 1),
)

case(
    "tuple_indexed_by_a_known_name",
    "tuples",
    """
const LAST = 2

fn item(a, b, c, i) {
    let t = (a * 2.0, b * b, c)
    return sum(t[i]) * sum(t[LAST])
}

fn f(a, b, c) {
    return item(a, b, c, 1) * item(a, b, c, 0) + item(a, b, c, -1) + item(a, b, c, 2)
}
""",
    (s(0.7), normal(201, 3), normal(202, 2, 2)),
    lambda a, b, c: (b * b).sum() * c.sum() * (a * 2.0) * c.sum() + c.sum() * c.sum() + c.sum() * c.sum(),
    wrt=(0, 1, 2),
    value_and_grad=True,
    notes="a tuple indexed by a parameter each call gives a literal (another item in each instance of `item`) "
    "and by a const",
)

case(
    "augmented_assignment_keeps_the_rank",
    "tuples",
    """
fn f(w: f64[3], x: f64[3, 2]) {
    let v = w * 2.0
    v -= v * 0.25
    let m = x
    m *= 0.5
    return v @ v + sum(v @ m)
}
""",
    (normal(203, 3), normal(204, 3, 2)),
    lambda w, x: (w * 1.5) @ (w * 1.5) + ((w * 1.5) @ (x * 0.5)).sum(),
    wrt=(0, 1),
    notes="found by scripts/fuzz_backends.py: `v -= e` made a value of unknown type, so `v @ v` had no rank",
)

case(
    "tuple_assignment_beside_names_like_generated_ones",
    "tuples",
    """
fn f(x: f64) -> f64 {
    let p = (x, 2.0 * x)
    p = (3.0 * x, sin(x))
    let p_2 = (x * x, 1.0f64)
    let a = 0.0f64
    let b = 0.0f64
    (a, b) = p
    ((a, b), p) = ((a * b, b), p_2)
    return a * b + p[0]
}
""",
    (s(0.5),),
    lambda x: 3.0 * x * torch.sin(x) * torch.sin(x) + x * x,
    second_order=True,
    notes="`(a, b) = p` read `p`'s generated name (`p_2`, the rebound `p`) as a user's name, and so took the "
    "user's `p_2`: the gradient was 2.0 for 3.75. Found by the control-flow fuzzer as an internal error in a "
    "second derivative, where the first derivative's names are the user's",
)

case(
    "reductions_along_an_axis_a_parameter_holds",
    "reductions",
    """
fn pooled(x, axis) {
    return mean(x * x, axis=axis) + sum(sin(x), axis=axis)
}

fn norm(x, axis=-1) {
    return sqrt(sum(x * x, axis=axis))
}

fn f(x: f64[2, 3]) -> f64 {
    return sum(pooled(x, 0) * [1.0f64, 2.0, 3.0]) + sum(pooled(x, -1)) + sum(norm(x)) + norm(x, axis=0)[1]
}
""",
    (normal(305, 2, 3),),
    lambda x: reductions_by_parameter(x),
    value_and_grad=True,
    notes="`axis=` given by a parameter: known at each call, not written in the derivative, which serves "
    "calls with other axes (refused before: `grad` needed a literal)",
)


def reductions_by_parameter(x):
    def pooled(x, axis):
        return (x * x).mean(axis) + torch.sin(x).sum(axis)

    weights = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    norms = torch.sqrt((x * x).sum(-1)).sum() + torch.sqrt((x * x).sum(0))[1]
    return (pooled(x, 0) * weights).sum() + pooled(x, -1).sum() + norms


case(
    "tuple_swap_in_loop",
    "tuples",
    """
fn f(x, y) {
    let a = x
    let b = y
    for i in 0..3 {
        (a, b) = (b, a * 2.0 + sin(b))
    }
    return sum(a * b)
}
""",
    (normal(96, 3), normal(97, 3)),
    lambda x, y: _swap(x, y),
    wrt=(0, 1),
)


def _swap(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    a, b = x, y
    for _ in range(3):
        a, b = b, a * 2.0 + torch.sin(b)
    return (a * b).sum()


# ---------------------------------------------------------------------------------------------------------
# if on data

IF_SOURCE = """
fn f(x, w) {
    let s = sum(x * w)
    if s > 0.0 {
        return sum(exp(x) * w) + s
    } else {
        return sum(x * x) * s
    }
}
"""


def _if_torch(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    total = (x * w).sum()
    if total.item() > 0.0:
        return (torch.exp(x) * w).sum() + total
    return (x * x).sum() * total


case("if_then_branch", "if", IF_SOURCE, (np.array([0.5, 1.2, -0.3]), np.array([1.0, 0.8, 0.4])), _if_torch, wrt=(0, 1))
case("if_else_branch", "if", IF_SOURCE, (np.array([-0.5, 1.2, -0.3]), np.array([2.0, 0.3, 1.0])), _if_torch, wrt=(0, 1))

case(
    "if_else_if_rebinding",
    "if",
    """
fn f(x) {
    let y = x
    let m = max(x)
    if m > 2.0 {
        y = y / m
    } else if m > 0.5 {
        y = y * m + 1.0
    } else {
        y = -y
    }
    if sum(y) < 0.0 {
        y = y * 3.0
    }
    return sum(y * y * y)
}
""",
    (np.array([0.3, 1.1, -0.4, 0.9]),),
    lambda x: _elif(x),
)


def _elif(x: torch.Tensor) -> torch.Tensor:
    y = x
    m = x.max()
    if m.item() > 2.0:
        y = y / m
    elif m.item() > 0.5:
        y = y * m + 1.0
    else:
        y = -y
    if y.sum().item() < 0.0:
        y = y * 3.0
    return (y * y * y).sum()


# ---------------------------------------------------------------------------------------------------------
# while loops with data-dependent trip counts

case(
    "while_newton_sqrt",
    "while",
    """
fn f(a) {
    let y = a
    while abs(y * y - a) > 1e-10 {
        y = 0.5 * (y + a / y)
    }
    return y * (1.0 + a)
}
""",
    (s(2.7),),
    lambda a: _newton_sqrt(a) * (1.0 + a),
    value_and_grad=True,
)


case(
    "loop_in_a_callee_typed_by_size_names",
    "while",
    """
fn scaled(x: f64[N], w: f64[N]) -> f64[N] {
    let acc = x
    for i in 0..3 {
        acc = tanh(acc * w)
    }
    return acc
}
fn f(x: f64[4], w: f64[4]) -> f64 {
    return sum(scaled(x, w) * x)
}
""",
    (normal(201, 4), normal(202, 4)),
    lambda x, w: (_scaled_thrice(x, w) * x).sum(),
    wrt=(0, 1),
)


def _scaled_thrice(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    acc = x
    for _ in range(3):
        acc = torch.tanh(acc * w)
    return acc


def _newton_sqrt(a: torch.Tensor) -> torch.Tensor:
    y = a
    while torch.abs(y * y - a).item() > 1e-10:
        y = 0.5 * (y + a / y)
    return y


case(
    "while_newton_cube_root_tensor",
    "while",
    """
fn f(a, w) {
    let y = a
    let steps = 0
    while max(abs(y * y * y - a)) > 1e-9 {
        y = (2.0 * y + a / (y * y)) / 3.0
        steps += 1
    }
    return sum(y * w)
}
""",
    (uniform(98, 1.0, 6.0, 3), normal(99, 3)),
    lambda a, w: (_newton_cbrt(a) * w).sum(),
    wrt=(0, 1),
)


def _newton_cbrt(a: torch.Tensor) -> torch.Tensor:
    y = a
    while torch.abs(y * y * y - a).max().item() > 1e-9:
        y = (2.0 * y + a / (y * y)) / 3.0
    return y


case(
    "while_halve_until_small",
    "while",
    """
fn f(v, w) {
    while sqrt(sum(v * v)) > 0.1 {
        v = v * 0.5 + 0.01 * sin(v)
    }
    return sum(v * w) + sum(v * v)
}
""",
    (normal(100, 4), normal(101, 4)),
    lambda v, w: _halve(v, w),
    wrt=(0, 1),
)


def _halve(v: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    while torch.sqrt((v * v).sum()).item() > 0.1:
        v = v * 0.5 + 0.01 * torch.sin(v)
    return (v * w).sum() + (v * v).sum()


case(
    "while_true_with_break",
    "while",
    """
fn f(x, r) {
    let y = x
    let n = 0
    while true {
        y = y * r + sin(y)
        n += 1
        if y > 20.0 or n >= 50 {
            break
        }
    }
    return y / float(n, dtype=f64)
}
""",
    (s(0.9), s(1.4)),
    lambda x, r: _while_break(x, r),
    wrt=(0, 1),
)


def _while_break(x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    y = x
    n = 0
    while True:
        y = y * r + torch.sin(y)
        n += 1
        if y.item() > 20.0 or n >= 50:
            break
    return y / float(n)


case(
    "while_counter_and_accumulator",
    "while",
    """
fn f(x) {
    let total = 0.0f64
    let i = 0
    while total < 3.0 {
        total = total + sigmoid(x[i % 3]) * (1.0 + x[(i + 1) % 3] ** 2)
        i += 1
    }
    return total * x[0]
}
""",
    (np.array([0.3, -0.8, 0.5]),),
    lambda x: _while_counter(x),
)


def _while_counter(x: torch.Tensor) -> torch.Tensor:
    total = torch.zeros((), dtype=torch.float64)
    i = 0
    while total.item() < 3.0:
        total = total + torch.sigmoid(x[i % 3]) * (1.0 + x[(i + 1) % 3] ** 2)
        i += 1
    return total * x[0]


# ---------------------------------------------------------------------------------------------------------
# for loops, nested loops, break, continue, early return

case(
    "rnn_for_loop_with_integer_argument",
    "for",
    """
fn f(x, n, w, h0) {
    let h = h0
    for i in 0..n {
        h = tanh(h @ w + x[i])
    }
    return sum(h * h)
}
""",
    (normal(102, 4, 3), 3, normal(103, 3, 3) * 0.7, normal(104, 3)),
    lambda x, n, w, h0: _rnn(x, n, w, h0),
    wrt=(0, 2, 3),
    value_and_grad=True,
    notes="n is an integer argument that wrt skips; row 3 of x is not used (zero gradient)",
)


def _rnn(x: torch.Tensor, n: int, w: torch.Tensor, h0: torch.Tensor) -> torch.Tensor:
    h = h0
    for i in range(n):
        h = torch.tanh(h @ w + x[i])
    return (h * h).sum()


case(
    "for_over_rows",
    "for",
    """
fn f(x, w) {
    let s = 0.0f64
    for row in x {
        s = s + sum(exp(row) * w)
    }
    return s * s
}
""",
    (normal(105, 3, 2), normal(106, 2)),
    lambda x, w: sum((torch.exp(row) * w).sum() for row in x) ** 2,
    wrt=(0, 1),
)

case(
    "for_zip",
    "for",
    """
fn f(x, y, w) {
    let loss = 0.0f64
    for (row, target) in (x, y) {
        let err = sum(row * w) - target
        loss = loss + err * err
    }
    return loss
}
""",
    (normal(107, 4, 3), normal(108, 4), normal(109, 3)),
    lambda x, y, w: sum(((x[i] * w).sum() - y[i]) ** 2 for i in range(4)),
    wrt=(0, 1, 2),
)

case(
    "nested_for_loops",
    "for",
    """
fn f(x, y) {
    let s = 0.0f64
    for i in 0..3 {
        let m = i + 1
        for j in 0..m {
            s = s + x[i] * y[j] * sin(x[j])
        }
    }
    return s
}
""",
    (normal(110, 3), normal(111, 3)),
    lambda x, y: sum(x[i] * y[j] * torch.sin(x[j]) for i in range(3) for j in range(i + 1)),
    wrt=(0, 1),
)

case(
    "for_with_break_on_data",
    "for",
    """
fn f(x) {
    let s = 0.0f64
    for i in 0..6 {
        s = s + x[i] * x[i]
        if s > 1.5 {
            break
        }
    }
    return s * x[0]
}
""",
    (np.array([0.7, -0.5, 0.9, 0.4, -1.1, 0.6]),),
    lambda x: _for_break(x),
    notes="s passes 1.5 at i = 2 (0.49 + 0.25 + 0.81); the later elements get zero gradient",
)


def _for_break(x: torch.Tensor) -> torch.Tensor:
    total = torch.zeros((), dtype=torch.float64)
    for i in range(6):
        total = total + x[i] * x[i]
        if total.item() > 1.5:
            break
    return total * x[0]


case(
    "for_with_continue",
    "for",
    """
fn f(x, w) {
    let s = 0.0f64
    for i in 0..5 {
        if x[i] < 0.0 {
            continue
        }
        s = s + exp(x[i]) * w[i]
    }
    return s
}
""",
    (away(112, 5), normal(113, 5)),
    lambda x, w: sum(torch.exp(x[i]) * w[i] for i in range(5) if x[i].item() >= 0.0),
    wrt=(0, 1),
)

case(
    "early_return_in_loop",
    "for",
    """
fn f(x, w) {
    let s = 0.0f64
    for i in 0..4 {
        s = s + tanh(x[i] * w)
        if s > 1.0 {
            return s * w
        }
    }
    return s
}
""",
    (np.array([0.8, 0.6, 0.9, 0.2]), s(1.5)),
    lambda x, w: _early_return(x, w),
    wrt=(0, 1),
)


def _early_return(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    total = torch.zeros((), dtype=torch.float64)
    for i in range(4):
        total = total + torch.tanh(x[i] * w)
        if total.item() > 1.0:
            return total * w
    return total


# ---------------------------------------------------------------------------------------------------------
# Calls and recursion

case(
    "cell_called_in_loop",
    "calls",
    """
fn cell(x, h, c, w_ih, w_hh) {
    let n = shape(h)[1]
    let gates = x @ transpose(w_ih) + h @ transpose(w_hh)
    let c2 = sigmoid(gates[:, 0:n]) * c + sigmoid(gates[:, n:2 * n]) * tanh(gates[:, 2 * n:3 * n])
    return (tanh(c2) * sigmoid(gates[:, 3 * n:4 * n]), c2)
}

fn f(w_ih, w_hh, xs) {
    let h = zeros(2, 3, dtype=f64)
    let c = zeros(2, 3, dtype=f64)
    let total = 0.0f64
    for t in 0..len(xs) {
        (h, c) = cell(xs[t], h, c, w_ih, w_hh)
        total += sum(h * h) + sum(transpose(h) @ tanh(h))
    }
    return total
}
""",
    (normal(150, 12, 2), normal(151, 12, 3), normal(152, 4, 2, 2)),
    lambda w_ih, w_hh, xs: cell_loop(w_ih, w_hh, xs),
    wrt=(0, 1, 2),
    notes="a function called in a loop (split into _fwd/_bwd, its kept values on the loop's tape); "
    "products with transposed operands",
)

case(
    "loop_in_loop_with_calls",
    "calls",
    """
fn clipped(x) {
    if max(x) > 1.0 {
        return x * 0.5
    }
    return sin(x)
}

fn inner(h, w) {
    let k = 0
    while k < 2 {
        h = tanh(h @ w) + clipped(h)
        k += 1
    }
    return h
}

fn f(w, h0) {
    let h = h0
    let i = 0
    while i < 3 {
        h = inner(h, w) * 0.9
        let j = 0
        while j < 2 {
            h = h + clipped(h) * 0.1
            j += 1
        }
        i += 1
    }
    return sum(h)
}
""",
    (normal(153, 3, 3) * 0.5, normal(154, 2, 3) * 0.5),
    lambda w, h0: nested_loops(w, h0),
    wrt=(0, 1),
    notes="a loop with a loop inside (recomputed, not kept), a function returning from an `if` (its _back)",
)

case(
    "helper_functions",
    "calls",
    """
fn layer(x, w, b) {
    return tanh(x @ w + b)
}

fn affine(x, scale = 2.0, shift = 0.0) {
    return x * scale + shift
}

fn f(x, w1, b1, w2) {
    let h = layer(x, w1, b1)
    let o = layer(h, w2, affine(b1[0:2], shift=0.5))
    return sum(affine(o, 3.0))
}
""",
    (normal(114, 2, 3), normal(115, 3, 3), normal(116, 3), normal(117, 3, 2)),
    lambda x, w1, b1, w2: (3.0 * torch.tanh(torch.tanh(x @ w1 + b1) @ w2 + (b1[0:2] * 2.0 + 0.5))).sum(),
    wrt=(0, 1, 2, 3),
)

case(
    "helper_of_several_shapes",
    "calls",
    """
fn mix(a, b) {
    let c = a * b
    return c + b
}

fn gate(a, b, flag: bool) {
    let c = a * b
    if flag {
        c = c * 2.0f64
    }
    return c + b
}

fn f(x, s, m) {
    let u = mix(x, s)
    let v = mix(x, x)
    let w = mix(s, s)
    let p = gate(m, x, true)
    let q = gate(s, m, false)
    return sum(u * v) + w + sum(p * m) + sum(q * q)
}
""",
    (normal(118, 3), np.float64(0.7), normal(119, 3, 3)),
    lambda x, s, m: helper_of_several_shapes(x, s, m),
    wrt=(0, 1, 2),
    notes="one helper called with a vector and a scalar, two vectors, two scalars: its derivative, written in "
    "place or split into `_fwd` and `_bwd`, sums each broadcast back to its operand's shape in every call",
)


case(
    "recursive_helper_of_several_shapes",
    "calls",
    """
fn power(a, b, n: i64) {
    if n == 0 {
        return a * 0.0f64 + b
    }
    return power(a, b, n - 1) * a + b
}

fn f(x, s) {
    return sum(power(x, s, 2)) + power(s, s, 2) + sum(power(x, x, 1))
}
""",
    (normal(120, 3), np.float64(0.7)),
    lambda x, s: recursive_power(x, s, 2).sum() + recursive_power(s, s, 2) + recursive_power(x, x, 1).sum(),
    wrt=(0, 1),
    notes="a recursive helper (differentiated by `power_back`) called with a vector and a scalar, and others",
)


case(
    "helper_given_integers_in_another_call",
    "calls",
    """
fn mix(a, b) {
    let c = a * b
    return c + b
}

fn f(x, s) {
    let u = sum(mix(x, s)) + sum(mix(s, x))
    let n = mix(3, 2)
    return u * float(n, dtype=f64)
}
""",
    (normal(121, 3), np.float64(0.7)),
    lambda x, s: 8.0 * ((x * s + s).sum() + (s * x + x).sum()),
    wrt=(0, 1),
    notes="which parameters of `mix` carry gradients is what every call gives them, not the last call checked",
)

case(
    "helper_reductions_of_several_ranks",
    "calls",
    """
fn r0(a) {
    return sum(a * a, axis=0)
}

fn r1(a) {
    return mean(a * a, axis=-1)
}

fn tr(a) {
    return transpose(a) * 2.0
}

fn sw(a) {
    return swapaxes(a, -2, -1) * 2.0
}

fn f(x, m, t) {
    let a = r0(x) + sum(r0(m) * x) + sum(r1(m)) + r1(x)
    return a + sum(tr(m) * tr(m)) + sum(tr(x) * x) + sum(sw(m) * sw(m)) + sum(sw(t) * sw(t))
}
""",
    (normal(122, 3), normal(123, 2, 3), normal(124, 2, 2, 3)),
    lambda x, m, t: (
        (x * x).sum(0)
        + ((m * m).sum(0) * x).sum()
        + (m * m).mean(-1).sum()
        + (x * x).mean(-1)
        + (4.0 * m * m).sum()
        + (2.0 * x * x).sum()
        + (4.0 * m * m).sum()
        + (4.0 * t * t).sum()
    ),
    wrt=(0, 1, 2),
    notes="reductions over `axis=0` or one axis from the back, `transpose` and `swapaxes` in helpers called "
    "with tensors of several ranks: their derivatives are the same in every rank",
)

case(
    "stack_along_the_last_axis",
    "shapes",
    """
fn f(u) {
    let t = stack((u, u * 2.0), axis=-1)
    return sum(t * t * t)
}
""",
    (normal(125, 2, 3),),
    lambda u: (torch.stack((u, u * 2.0), -1) ** 3).sum(),
)

case(
    "functions_given_as_arguments",
    "closures",
    """
fn sq(z) {
    return z * z
}

fn ap(h, x) {
    return h(x) * x
}

fn ap2(h, x, flag: bool) {
    let y = h(x)
    if flag {
        y = y * 2.0
    }
    return y * x
}

fn f(m) {
    let a = sum(ap(exp, m)) + sum(ap(sq, m)) + sum(ap(relu, m))
    return a + sum(ap2(tanh, m, true)) + sum(ap2(sq, m, false))
}
""",
    (normal(126, 2, 3),),
    lambda m: (
        (torch.exp(m) * m).sum()
        + (m * m * m).sum()
        + (torch.relu(m) * m).sum()
        + (torch.tanh(m) * 2.0 * m).sum()
        + (m * m * m).sum()
    ),
    notes="one function given a built-in in one call and a declared function in another: each call's "
    "derivative is that of the function it is given",
)


case(
    "helper_at_two_ranks_written_in_place",
    "calls",
    """
fn dot(a, b) {
    return a @ b
}

fn lin(x, w, b) {
    return x @ w + b
}

fn mlp(x, w, b, v, c) {
    return lin(tanh(lin(x, w, b)), v, c)
}

fn f(e, m, w, b, v, c) {
    let u = dot(e, m)
    let p = dot(m, m)
    let h = lin(m, w, b)
    let k = lin(e, w, b)
    let one = mlp(e, w, b, v, c)
    let all = mlp(m, w, b, v, c)
    return sum(u * u) + sum(p * m) + sum(h * h) + sum(k) + sum(one * one) + sum(all * all)
}
""",
    (normal(127, 3), normal(128, 3, 3), normal(129, 3, 4), normal(130, 4), normal(131, 4, 2), normal(132, 2)),
    lambda e, m, w, b, v, c: (
        ((e @ m) ** 2).sum()
        + ((m @ m) * m).sum()
        + ((m @ w + b) ** 2).sum()
        + (e @ w + b).sum()
        + ((torch.tanh(e @ w + b) @ v + c) ** 2).sum()
        + ((torch.tanh(m @ w + b) @ v + c) ** 2).sum()
    ),
    wrt=(0, 1, 2, 3, 4, 5),
    notes="helpers (`nn.linear`'s `x @ w + b`) called with one example and with a batch, directly and through "
    "another helper: each call is written in place with the types it gives, so `@`'s derivative is right for both",
)


case(
    "helper_with_a_loop_at_two_ranks",
    "closures",
    """
fn repeat(h, x, w, n: i64) {
    let y = x * 0.5
    let i = 0
    while i < n {
        let z = y @ w
        if i == 0 {
            z = z * 0.5
        }
        y = h(z)
        i += 1
    }
    return y
}

fn f(e, m, w) {
    return sum(repeat(tanh, e, w, 2)) + sum(repeat(sin, m, w, 3) * m)
}
""",
    (normal(133, 3), normal(134, 2, 3), normal(135, 3, 3) * 0.5),
    lambda e, m, w: repeated(torch.tanh, e, w, 2).sum() + (repeated(torch.sin, m, w, 3) * m).sum(),
    wrt=(0, 1, 2),
    notes="a function given a built-in, with a loop and an `if`, written in place for a vector and for a matrix: "
    "each copy reads the types of its own call (`y`'s rank, for `@`), and its backward runs the branch again "
    "with them",
)


case(
    "split_helpers_at_two_ranks",
    "calls",
    """
fn layer(x, w, b, train: bool) {
    let h = tanh(x @ w + b)
    if train {
        h = h * 0.5
    }
    return h
}

fn deep(x, w, n: i64) {
    if n == 0 {
        return x
    }
    return deep(tanh(x @ w), w, n - 1)
}

fn f(e, m, w, b) {
    let a = sum(layer(e, w, b, true)) + sum(layer(m, w, b, false) * layer(m, w, b, true))
    return a + sum(deep(e, w, 2)) + sum(deep(m, w, 3) * m)
}
""",
    (normal(136, 3), normal(137, 2, 3), normal(138, 3, 3) * 0.5, normal(139, 3)),
    lambda e, m, w, b: (
        (torch.tanh(e @ w + b) * 0.5).sum()
        + (torch.tanh(m @ w + b) * torch.tanh(m @ w + b) * 0.5).sum()
        + deepened(e, w, 2).sum()
        + (deepened(m, w, 3) * m).sum()
    ),
    wrt=(0, 1, 2, 3),
    notes="a function with an `if` (split into `_fwd` and `_bwd`) and a recursive one (`_back`), each called with "
    "a vector and a matrix: each call's split or `_back` functions are written for its own argument types",
)


def deepened(x, w, n):
    return x if n == 0 else deepened(torch.tanh(x @ w), w, n - 1)


def repeated(h, x, w, n):
    x = x * 0.5
    for i in range(n):
        z = x @ w
        x = h(z * 0.5 if i == 0 else z)
    return x


def recursive_power(a, b, n):
    return a * 0.0 + b if n == 0 else recursive_power(a, b, n - 1) * a + b


def helper_of_several_shapes(x, s, m):
    def mix(a, b):
        return a * b + b

    def gate(a, b, flag):
        c = a * b
        return (c * 2.0 if flag else c) + b

    p, q = gate(m, x, True), gate(s, m, False)
    return (mix(x, s) * mix(x, x)).sum() + mix(s, s) + (p * m).sum() + (q * q).sum()


case(
    "recursive_power",
    "recursion",
    """
fn pw(x, n) {
    if n == 0 {
        return 1.0
    }
    if n % 2 == 0 {
        let h = pw(x, n // 2)
        return h * h
    }
    return x * pw(x, n - 1)
}

fn f(x, n) {
    return pw(x, n) + pw(x, 2)
}
""",
    (s(1.3), 5),
    lambda x, n: x**n + x**2,
)

case(
    "recursion_depth_from_data",
    "recursion",
    """
fn shrink(x) {
    if x < 1.0 {
        return sin(x)
    }
    return x + shrink(x / 2.0) * x
}

fn f(x) {
    return shrink(x)
}
""",
    (s(5.3),),
    lambda x: _shrink(x),
)


def _shrink(x: torch.Tensor) -> torch.Tensor:
    if x.item() < 1.0:
        return torch.sin(x)
    return x + _shrink(x / 2.0) * x


case(
    "mutual_recursion_on_tensor",
    "recursion",
    """
fn down(v, n) {
    if n == 0 {
        return v
    }
    return up(sin(v), n - 1)
}

fn up(v, n) {
    return down(v * 1.5 + 0.1, n)
}

fn f(v, w) {
    return sum(down(v * w, 4))
}
""",
    (normal(118, 3), normal(119, 3)),
    lambda v, w: _down(v * w, 4).sum(),
    wrt=(0, 1),
)


def _down(v: torch.Tensor, n: int) -> torch.Tensor:
    if n == 0:
        return v
    return _down(torch.sin(v) * 1.5 + 0.1, n - 1)


# ---------------------------------------------------------------------------------------------------------
# Structs

MLP_SOURCE = """
struct MLP { w1: f64[3, 4], b1: f64[4], w2: f64[4, 2], b2: f64[2] }

fn forward(p: MLP, x) {
    return tanh(x @ p.w1 + p.b1) @ p.w2 + p.b2
}

fn f(p, x, y) {
    let d = forward(p, x) - y
    return mean(d * d)
}
"""


def _mlp_torch(p: Any, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    d = torch.tanh(x @ p.w1 + p.b1) @ p.w2 + p.b2 - y
    return (d * d).mean()


def _mlp_params(seed: int) -> Struct:
    return Struct(
        "MLP",
        {"w1": normal(seed, 3, 4), "b1": normal(seed + 1, 4), "w2": normal(seed + 2, 4, 2), "b2": normal(seed + 3, 2)},
    )


case(
    "mlp_struct",
    "structs",
    MLP_SOURCE,
    (_mlp_params(120), normal(124, 5, 3), normal(125, 5, 2)),
    _mlp_torch,
    value_and_grad=True,
    notes="gradient is an MLP struct",
)

case(
    "mlp_struct_and_inputs",
    "structs",
    MLP_SOURCE,
    (_mlp_params(126), normal(130, 2, 3), normal(131, 2, 2)),
    _mlp_torch,
    wrt=(0, 1),
)

case(
    "nested_structs_with_scalar_field",
    "structs",
    """
struct Linear { w: f64[2, 3], b: f64[3] }
struct Head { w: f64[3], scale: f64 }
struct Net { first: Linear, head: Head }

fn f(net, x) {
    let h = sigmoid(x @ net.first.w + net.first.b)
    return sum(h @ net.head.w) * net.head.scale
}
""",
    (
        Struct(
            "Net",
            {
                "first": Struct("Linear", {"w": normal(132, 2, 3), "b": normal(133, 3)}),
                "head": Struct("Head", {"w": normal(134, 3), "scale": s(0.7)}),
            },
        ),
        normal(135, 4, 2),
    ),
    lambda net, x: (torch.sigmoid(x @ net.first.w + net.first.b) @ net.head.w).sum() * net.head.scale,
)

case(
    "struct_field_rebinding",
    "structs",
    """
struct Linear { w: f64[2, 3], b: f64[3] }

fn f(p, x) {
    p.w = p.w * 2.0
    p.b[1] = p.b[0] * p.b[2]
    return sum(tanh(x @ p.w + p.b))
}
""",
    (Struct("Linear", {"w": normal(136, 2, 3), "b": normal(137, 3)}), normal(138, 3, 2)),
    lambda p, x: torch.tanh(x @ (p.w * 2.0) + torch.stack((p.b[0], p.b[0] * p.b[2], p.b[2]))).sum(),
    wrt=(0, 1),
    notes="p.b[1] is overwritten: its gradient is zero",
)

case(
    "struct_and_tuple_arguments",
    "structs",
    """
struct Linear { w: f64[2, 3], b: f64[3] }

fn f(p, pair) {
    let (x, t) = pair
    let y = x @ p.w + p.b
    return sum((y - t) ** 2)
}
""",
    (Struct("Linear", {"w": normal(139, 2, 3), "b": normal(140, 3)}), (normal(141, 2, 2), normal(142, 2, 3))),
    lambda p, pair: ((pair[0] @ p.w + p.b - pair[1]) ** 2).sum(),
    wrt=(0, 1),
)

# ---------------------------------------------------------------------------------------------------------
# Closures

case(
    "lambda_capturing_tensor",
    "closures",
    """
fn f(x, scale) {
    let act = fn(z) => tanh(z * scale)
    return sum(act(x) * act(x + 1.0))
}
""",
    (normal(143, 4), normal(144, 4)),
    lambda x, sc: (torch.tanh(x * sc) * torch.tanh((x + 1.0) * sc)).sum(),
    wrt=(0, 1),
)

case(
    "closure_called_in_a_loop",
    "closures",
    """
fn f(w, xs, ys) {
    let predict = fn(x) => sum(x * w)
    let total = 0.0f64
    for (x, y) in (xs, ys) {
        let err = predict(x) - y
        total += err * err
    }
    return total
}
""",
    (normal(171, 3), normal(172, 4, 3), normal(173, 4)),
    lambda w, xs, ys: (((xs * w).sum(dim=1) - ys) ** 2).sum(),
    wrt=(0, 1),
)

case(
    "tree_map_in_the_loss",
    "closures",
    """
struct P { w: f64[3], b: f64 }

fn f(w, b, v) {
    let p = P { w: w, b: b }
    let q = tree_map(fn(a) => a * a, p)
    let r = tree_map(fn(a, c) => a * c, (w, b), (v, 2.0f64))
    return sum(q.w) + q.b + sum(r[0]) * r[1]
}
""",
    (normal(181, 3), np.float64(0.7), normal(182, 3)),
    lambda w, b, v: (w * w).sum() + b * b + (w * v).sum() * (b * 2.0),
    wrt=(0, 1, 2),
)

case(
    "function_argument_and_returned_closure",
    "closures",
    """
fn apply_twice(g, x) {
    return g(g(x))
}

fn scale_by(c) {
    return fn(z) => z * c
}

fn f(x, w) {
    let y = apply_twice(fn(z) => sin(z) * w, x)
    let double = scale_by(w)
    return sum(double(y) ** 2)
}
""",
    (normal(145, 3), normal(146, 3)),
    lambda x, w: ((torch.sin(torch.sin(x) * w) * w * w) ** 2).sum(),
    wrt=(0, 1),
)

case(
    "local_fn_capturing_weight",
    "closures",
    """
fn f(x, w) {
    fn layer(h) {
        return tanh(h @ w)
    }
    return sum(layer(layer(x)))
}
""",
    (normal(147, 2, 3), normal(148, 3, 3)),
    lambda x, w: torch.tanh(torch.tanh(x @ w) @ w).sum(),
    wrt=(0, 1),
)

case(
    "grad_of_lambda_mse",
    "closures",
    """
fn loss(w, x, y) {
    let d = x @ w - y
    return mean(d * d)
}

fn f(w, x, y) {
    return loss(w, x, y)
}
""",
    (normal(149, 3), normal(150, 5, 3), normal(151, 5)),
    lambda w, x, y: ((x @ w - y) ** 2).mean(),
    via="lambda",
    value_and_grad=True,
    notes="grad(fn(p0) => f(p0, x, y))(w): the anonymous function captures the data",
)

case(
    "grad_of_lambda_capturing_a_name_a_callee_binds",
    "closures",
    """
fn h(a1, w) {
    return sum(a1 * w)
}

fn f(w, x, y) {
    return h(x, w) * h(y * 2.0, w)
}
""",
    (normal(161, 3), normal(162, 3), normal(163, 3)),
    lambda w, x, y: (x * w).sum() * (y * 2.0 * w).sum(),
    via="lambda",
    notes="the wrapper's captured `a1` is also the name of h's parameter, bound to `y * 2.0` by the second call",
)

case(
    "for_break_continue_in_a_function_given_a_closure",
    "closures",
    """
fn apply_until(g, x, limit) {
    let y = x
    for i in 0..6 {
        y = g(y)
        if sum(y * y) > limit { break }
        if i == 1 { continue }
        y = y + 0.1
    }
    return y
}

fn f(x, w) {
    return sum(apply_until(fn(u) => tanh(u * w) * 2.0, x, 4.5) * w)
}
""",
    (normal(164, 3) * 0.3, normal(165, 3)),
    lambda x, w: (_apply_until(lambda u: torch.tanh(u * w) * 2.0, x, 4.5) * w).sum(),
    wrt=(0, 1),
    notes="apply_until is written in place (it is given a closure): its `for`, `break` and `continue` too",
)


def _apply_until(g: Callable, x: torch.Tensor, limit: float) -> torch.Tensor:
    y = x
    for i in range(6):
        y = g(y)
        if (y * y).sum().item() > limit:
            break
        if i == 1:
            continue
        y = y + 0.1
    return y


case(
    "grad_of_lambda_struct",
    "closures",
    MLP_SOURCE,
    (_mlp_params(152), normal(156, 3, 3), normal(157, 3, 2)),
    _mlp_torch,
    via="lambda",
)

case(
    "grad_of_lambda_two_of_three",
    "closures",
    """
fn f(a, x, b) {
    return sum(exp(a * x) * b) + sum(b * b * a)
}
""",
    (normal(158, 3), normal(159, 3), normal(160, 3)),
    lambda a, x, b: (torch.exp(a * x) * b).sum() + (b * b * a).sum(),
    wrt=(0, 2),
    via="lambda",
)

# ---------------------------------------------------------------------------------------------------------
# Integer arguments that are not differentiated

case(
    "integer_index_argument",
    "integers",
    """
fn f(x, k, w) {
    let row = x[k]
    return sum(row * w) * float(k + 1, dtype=f64) + sum(x[:, k] ** 2)
}
""",
    (normal(161, 3, 3), 1, normal(162, 3)),
    lambda x, k, w: (x[k] * w).sum() * float(k + 1) + (x[:, k] ** 2).sum(),
    wrt=(0, 2),
)

case(
    "argmax_is_constant",
    "integers",
    """
fn f(x) {
    let i = argmax(x)
    return x[i] * sum(x) + float(i, dtype=f64)
}
""",
    (normal(163, 5),),
    lambda x: x[int(x.argmax())] * x.sum() + float(x.argmax()),
    notes="argmax gives an integer: no gradient flows through it",
)

# ---------------------------------------------------------------------------------------------------------
# Zeros never computed: a result nothing reads, a loop's variable nothing after it reads. Their adjoints are
# zeros, and carried back through `sqrt` at 0 they would be 0 * inf, NaN; PyTorch gives these no gradient
# (the inputs hold exact zeros under `sqrt`, which finite differences step over: nothing the value reads)

ZEROS_UNDER_SQRT = np.array([0.0, 1.0, 2.25, 0.0])

case(
    "power_with_a_learned_exponent_over_zeros",
    "zeros",
    """
fn f(p, x) {
    return mean(relu(x) ** p) ** (1.0 / p)
}
""",
    (s(3.0), np.array([-1.0, 0.5, 2.0, 0.0])),
    lambda p, x: torch.mean(torch.relu(x) ** p) ** (1.0 / p),
    notes="generalised-mean pooling: the exponent's gradient is none where the base is 0 (`0 ** p` is "
    "constant in p), as PyTorch's, where `d * r * log(a)` would be 0 * -inf",
)

case(
    "integer_base_with_a_learned_exponent",
    "zeros",
    """
fn f(b) {
    return sum([0, 1, 2] ** b) + 2 ** b
}
""",
    (s(1.7),),
    lambda b: (torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64) ** b).sum() + 2.0**b,
    notes="the exponent's gradient takes `log` of the integer base in the result's float dtype; none at the base 0",
)

case(
    "unused_result_of_a_called_loop",
    "zeros",
    """
fn parts(x, y) {
    let s = 0.0f64
    for i in 0..2 {
        s = s + sum(sqrt(y)) * x[i]
    }
    return (s, sum(x * x))
}

fn f(x, y) {
    let (unused, kept) = parts(x, y)
    return kept * 2.0
}
""",
    (normal(181, 4), ZEROS_UNDER_SQRT),
    lambda x, y: 2.0 * (x * x).sum(),
    wrt=(0, 1),
    notes="`parts` has a loop, so it is split into `parts_fwd` and `parts_bwd`: the call's backward goes to "
    "the copy of `parts_bwd` written for zeros as the adjoint of `unused`",
)

case(
    "unused_field_of_a_struct_result",
    "zeros",
    """
struct Parts { roots: f64, total: f64 }

fn parts(x, y) {
    let s = 0.0f64
    for i in 0..2 {
        s = s + sum(sqrt(y)) * x[i]
    }
    return Parts { roots: s, total: sum(x * x) }
}

fn f(x, y) {
    return parts(x, y).total * 3.0
}
""",
    (normal(186, 4), ZEROS_UNDER_SQRT),
    lambda x, y: 3.0 * (x * x).sum(),
    wrt=(0, 1),
    notes="the adjoint of the struct is zeros but for `total`: field by field, as a tuple's item by item",
)

case(
    "loop_variable_nothing_reads",
    "zeros",
    """
fn f(x, y) {
    let s = sqrt(y)
    let total = 0.0f64
    for i in 0..3 {
        total = total + sum(x * x) * float(i + 1, dtype=f64)
        s = s * 2.0
    }
    return total
}
""",
    (normal(182, 4), ZEROS_UNDER_SQRT),
    lambda x, y: 6.0 * (x * x).sum(),
    wrt=(0, 1),
)

case(
    "zero_adjoint_returned_by_a_call",
    "zeros",
    """
fn pair(u, x) {
    let a = 0.0f64
    let b = 0.0f64
    for i in 0..2 {
        a = a + sum(u)
        b = b + sum(x * x)
    }
    return (a, b)
}

fn f(x, y) {
    let (a, b) = pair(sqrt(y), x)
    return b
}
""",
    (normal(183, 4), ZEROS_UNDER_SQRT),
    lambda x, y: 2.0 * (x * x).sum(),
    wrt=(0, 1),
    notes="the copy of `pair_bwd` for zeros as `a`'s adjoint returns zeros as `u`'s: the caller adds nothing "
    "through `sqrt`",
)

case(
    "unused_result_of_a_function_that_returns_in_an_if",
    "zeros",
    """
fn parts(x, y) {
    if sum(x) > -100.0 {
        return (sum(sqrt(y)), sum(x * x))
    }
    return (0.0f64, sum(x))
}

fn f(x, y) {
    let (unused, kept) = parts(x, y)
    return kept
}
""",
    (normal(184, 4), ZEROS_UNDER_SQRT),
    lambda x, y: (x * x).sum(),
    wrt=(0, 1),
    notes="a function returning from an `if` is not split: its callers call its `_back`, and so its copy",
)

# ---------------------------------------------------------------------------------------------------------
# Scalar -> scalar functions: also checked with grad(grad(f)) against PyTorch double backward

SECOND = {"second_order": True}

case(
    "d2_polynomial",
    "second order",
    """
fn f(x) {
    return x ** 4 - 2.0 * x ** 3 + x * 0.5
}
""",
    (s(1.3),),
    lambda x: x**4 - 2.0 * x**3 + x * 0.5,
    **SECOND,
)

case(
    "d2_exp_of_sin",
    "second order",
    """
fn f(x) {
    return exp(sin(x)) * cos(x)
}
""",
    (s(0.7),),
    lambda x: torch.exp(torch.sin(x)) * torch.cos(x),
    **SECOND,
)

case(
    "d2_tanh_sigmoid_log",
    "second order",
    """
fn f(x) {
    return tanh(x) * x + sigmoid(x) * log(1.0 + x * x)
}
""",
    (s(-0.8),),
    lambda x: torch.tanh(x) * x + torch.sigmoid(x) * torch.log(1.0 + x * x),
    **SECOND,
)

case(
    "d2_quotient_sqrt",
    "second order",
    """
fn f(x) {
    return sqrt(x) / (1.0 + x * x)
}
""",
    (s(1.6),),
    lambda x: torch.sqrt(x) / (1.0 + x * x),
    **SECOND,
)

D2_IF_SOURCE = """
fn f(x) {
    if x > 0.0 {
        return x ** 3 * exp(-x)
    } else {
        return sin(x) * x
    }
}
"""


def _d2_if(x: torch.Tensor) -> torch.Tensor:
    if x.item() > 0.0:
        return x**3 * torch.exp(-x)
    return torch.sin(x) * x


case("d2_if_positive", "second order", D2_IF_SOURCE, (s(1.1),), _d2_if, **SECOND)
case("d2_if_negative", "second order", D2_IF_SOURCE, (s(-0.9),), _d2_if, **SECOND)

case(
    "d2_while_newton_sqrt",
    "second order",
    """
fn f(a) {
    let y = a
    while abs(y * y - a) > 1e-10 {
        y = 0.5 * (y + a / y)
    }
    return y
}
""",
    (s(2.7),),
    _newton_sqrt,
    **SECOND,
)

case(
    "d2_while_growth",
    "second order",
    """
fn f(x) {
    let y = x
    while y < 10.0 {
        y = y * 1.5 + sin(y) * x
    }
    return y * y
}
""",
    (s(0.8),),
    lambda x: _growth(x),
    **SECOND,
)


def _growth(x: torch.Tensor) -> torch.Tensor:
    y = x
    while y.item() < 10.0:
        y = y * 1.5 + torch.sin(y) * x
    return y * y


case(
    "d2_for_loop",
    "second order",
    """
fn f(x) {
    let y = x
    for i in 0..4 {
        y = sin(y) + x * 0.5
    }
    return y * x
}
""",
    (s(0.6),),
    lambda x: _d2_for(x),
    **SECOND,
)


def _d2_for(x: torch.Tensor) -> torch.Tensor:
    y = x
    for _ in range(4):
        y = torch.sin(y) + x * 0.5
    return y * x


case(
    "d2_recursive_power",
    "second order",
    """
fn pw(x, n) {
    if n == 0 {
        return 1.0
    }
    return x * pw(x, n - 1)
}

fn f(x) {
    return pw(x, 5) - pw(x, 2)
}
""",
    (s(1.2),),
    lambda x: x**5 - x**2,
    **SECOND,
)

case(
    "d2_helper_and_closure",
    "second order",
    """
fn bump(x) {
    return 1.0 / (1.0 + x * x)
}

fn f(x) {
    let g = fn(z) => bump(z) * x
    return g(x * 2.0) + exp(-x) * x
}
""",
    (s(0.45),),
    lambda x: x / (1.0 + (2.0 * x) ** 2) + torch.exp(-x) * x,
    **SECOND,
)


def cell_loop(w_ih, w_hh, xs):
    h = torch.zeros(2, 3, dtype=torch.float64)
    c = torch.zeros(2, 3, dtype=torch.float64)
    total = torch.tensor(0.0, dtype=torch.float64)
    for t in range(xs.shape[0]):
        gates = xs[t] @ w_ih.T + h @ w_hh.T
        i, f, g, o = gates.chunk(4, dim=1)
        c = torch.sigmoid(i) * c + torch.sigmoid(f) * torch.tanh(g)
        h = torch.tanh(c) * torch.sigmoid(o)
        total = total + (h * h).sum() + (h.T @ torch.tanh(h)).sum()
    return total


def nested_loops(w, h0):
    def clipped(x):
        return x * 0.5 if x.max().item() > 1.0 else torch.sin(x)

    h = h0
    for _ in range(3):
        for _ in range(2):
            h = torch.tanh(h @ w) + clipped(h)
        h = h * 0.9
        for _ in range(2):
            h = h + clipped(h) * 0.1
    return h.sum()


case(
    "transpose_made_outside_loop",
    "matmul",
    """
fn f(w, x) {
    let t = transpose(w)
    let h = x
    for i in 0..2 {
        h = h @ t
    }
    if sum(x) > 0.0 {
        h = h @ t
    }
    return sum(tanh(h))
}
""",
    (normal(160, 3, 3), normal(161, 2, 3)),
    lambda w, x: transposes_around_control_flow(w, x),
    notes="`transpose(w)` made before a loop and an `if` that multiply by it: the product's adjoint "
    "goes to the transpose's (declared before them), not straight to `w`'s",
)


def transposes_around_control_flow(w, x):
    h = x
    for _ in range(2):
        h = h @ w.T
    if x.sum().item() > 0.0:
        h = h @ w.T
    return torch.tanh(h).sum()


case(
    "split_call_with_literal_arguments",
    "calls",
    """
fn scaled(x, b: f64, c: f64 = 3) {
    return tanh(x * b) * c / b
}

fn f(x) {
    let t = 0.0f64
    for i in 0..2 {
        t += sum(scaled(x, 0.1)) + sum(scaled(x, 2, c = 0.7))
    }
    return t
}
""",
    (normal(162, 3),),
    lambda x: literal_arguments(x),
    notes="literals given to annotated parameters of a function called in a loop keep the parameter's "
    "dtype in the `_fwd` and `_bwd` calls (`0.1` is the f64 0.1, not the f32 one)",
)


def literal_arguments(x):
    def scaled(x, b, c=3.0):
        return torch.tanh(x * b) * c / b

    total = torch.tensor(0.0, dtype=torch.float64)
    for _ in range(2):
        total = total + scaled(x, 0.1).sum() + scaled(x, 2.0, 0.7).sum()
    return total


case(
    "printing_function_called_in_branch",
    "calls",
    """
fn g(x) {
    print("g called")
    assert(abs(x) < 10.0, "x is small")
    return sin(x) * 2.0
}

fn f(x) {
    let unread = g(x * 0.5)
    let y = x
    if x > 0.0 {
        y = g(x) * x
    }
    return y * y
}
""",
    (s(0.5),),
    lambda x: (torch.sin(x) * 2.0 * x) ** 2,
    notes="a function with effects called in a branch the backward sweep runs again (its print runs once "
    "there), and once for a result nothing reads (its print is not dropped): tests/test_autodiff.py counts",
)

case(
    "for_over_tuples",
    "for",
    """
fn f(x) {
    let h = x
    let n = 0
    for w in (x, x * 2.0, x) {
        n += 1
        if n == 3 {
            break
        }
        h = tanh(h * w + 0.5)
    }
    let t = 0.0f64
    for (a, k) in ((h, x), (2.0f64, 3.0f64)) {
        t += sum(a * a) * k
    }
    for (row, scale) in ([[1.0f64, 2.0], [3.0, 4.0]], (x, h)) {
        t += sum(row * scale)
    }
    return t
}
""",
    (normal(163, 2),),
    lambda x: tuple_loops(x),
    notes="`for` over a tuple's items and over tuples zipped (with each other or with a tensor): one "
    "branch per step, the tuple's items may differ in type",
)


def tuple_loops(x):
    h = torch.tanh(x * x + 0.5)
    h = torch.tanh(h * (x * 2.0) + 0.5)
    total = (h * h).sum() * 2.0 + (x * x).sum() * 3.0
    rows = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64)
    return total + (rows[0] * x).sum() + (rows[1] * h).sum()


case(
    "for_over_items_of_several_dtypes",
    "for",
    """
fn f(w: f64[3]) -> f64 {
    let total = 0.0f64
    for item in (w[1], 2, w) {
        total += sum(item + 1) * w[0]
    }
    for (a, b) in ((w[2], 2), (3, w[1])) {
        total += (a + 1) * b
    }
    for a in (w[0], 3) {
        for b in (2, w[1], a) {
            total += (a + 1) * (b * 2 + 1) * w[2]
        }
        if total > 100.0 {
            break
        }
    }
    return total
}
""",
    (normal(171, 3),),
    lambda w: items_of_several_dtypes(w),
    value_and_grad=True,
    notes="the checker types the body once for each item's type (`item + 1`: f64, then i64), and the "
    "lowering's branches share its nodes: each branch is read with its step's types, nested loops too. "
    "Before, every branch took the last item's types, and the float items got no gradient",
)


def items_of_several_dtypes(w):
    total = (w[1] + 1) * w[0] + 3 * w[0] + (w + 1).sum() * w[0]
    total = total + (w[2] + 1) * 3 + 3 * w[1]
    for a in (w[0], 3):
        for b in (2, w[1], a):
            total = total + (a + 1) * (b * 2 + 1) * w[2]
        if total > 100.0:
            break
    return total


case(
    "for_over_functions",
    "for",
    """
fn f(w: f64[3]) -> f64 {
    let y = w
    for act in (sin, tanh, exp, relu) {
        y = act(y) * 1.5
    }
    return sum(y)
}
""",
    (normal(172, 3),),
    lambda w: (torch.relu(torch.exp(torch.tanh(torch.sin(w) * 1.5) * 1.5) * 1.5) * 1.5).sum(),
    value_and_grad=True,
    notes="a loop over a tuple of functions calls each in its own step: the value of the derivative "
    "applied the last function in every step",
)

case(
    "for_over_layers_of_several_shapes",
    "for",
    """
struct L { w: f64[I, O], b: f64[O] }

fn f(w1: f64[3, 4], b1: f64[4], w2: f64[4, 2], b2: f64[2], x: f64[5, 3]) -> f64 {
    let z = 2.0f64
    let h: f64[5, _] = x
    for layer in (L { w: w1, b: b1 }, L { w: w2, b: b2 }) {
        let z = h @ layer.w + layer.b
        h = tanh(z)
    }
    let total = 0.0f64
    for (a, c) in ((h, h[0]), (3.0f64, 0.5f64)) {
        total += sum(a * c)
    }
    return total * z
}
""",
    (normal(401, 3, 4), normal(402, 4), normal(403, 4, 2), normal(404, 2), normal(405, 5, 3)),
    lambda w1, b1, w2, b2, x: (lambda h: ((h * 3.0).sum() + (h[0] * 0.5).sum()) * 2.0)(
        torch.tanh(torch.tanh(x @ w1 + b1) @ w2 + b2)
    ),
    wrt=(0, 1, 2, 3, 4),
    value_and_grad=True,
    notes="a loop over a tuple of layers (PyTorch's `for layer in self.layers`) is written out, a block per "
    "item: `h` takes another shape from item to item, a `let` in the body hides the outer `z` only there, "
    "and the derivative is straight-line code (it was a tape and a branch per item run again); tuples "
    "walked in step (`for (a, c) in (t, u)`) are written out too",
)

case(
    "for_over_items_around_an_if_after_a_transpose",
    "for",
    """
const C = 3.0f64

fn k(v: f64[2, 2]) -> f64[2, 2] { return v * 100.0f64 }

fn f(w: f64[2, 2], x: f64[2, 2]) -> f64 {
    let v = w
    let vt = transpose(v)
    for s in (1.5f64, 2.0f64) {
        if sum(x) > 0.0f64 {
            v = v * s
        }
        let C = s
        fn k(u) { return u * C }
        v = k(v) + v
    }
    return sum(x @ vt) + sum(v * v) * C + sum(k(x))
}
""",
    (normal(411, 2, 2), np.abs(normal(412, 2, 2))),
    lambda w, x: (x @ w.T).sum() + ((w * 1.5 * 2.5 * 2.0 * 3.0) ** 2).sum() * 3.0 + (x * 100.0).sum(),
    wrt=(0, 1),
    value_and_grad=True,
    notes="found in review: the adjoint of `x @ vt` went to `w` through `transpose` after the `if` in an item's "
    "block had changed `v` (the block was taken for straight-line code), and a `let` or local `fn` of the "
    "body hid the module's `C` and `k` after the loop",
)

case(
    "for_over_items_given_to_generic_functions",
    "for",
    """
struct P { a: f64, b: f64 }
struct R { a: i64, b: f64 }

fn product(p) {
    return p[0] * p[1]
}

fn scaled(p) {
    return p.a * p.b
}

fn summed(a, b) {
    let s = 0.0f64
    for q in (a, b) {
        s += q
    }
    return s
}

fn f(x: f64) -> f64 {
    let total = 0.0f64
    for s in ((x, x), (2, x)) {
        total += product(s)
    }
    for s in (P { a: x, b: x }, R { a: 3, b: x }) {
        total += scaled(s)
    }
    for it in (x, 2) {
        total += summed(it, x)
    }
    let y = x
    for (act, c) in ((sin, exp), (x, x)) {
        y = act(y * c)
    }
    for p in ((sin, x), (cos, x)) {
        total += p[1] * x
    }
    return total + y
}
""",
    (s(0.5),),
    lambda x: (x * x + 2 * x) + (x * x + 3 * x) + (3 * x + 2) + 2 * x * x + torch.exp(torch.sin(x * x) * x),
    value_and_grad=True,
    second_order=True,
    notes="a call in the body of a loop over items of several types checks its callee once per step: each "
    "step's call is written for its own check (it was an internal error), and a function item's adjoint is "
    "the function itself. Found by the tuple-loop fuzzer",
)

case(
    "for_over_tensors_of_two_ranks_given_to_a_split_function",
    "for",
    """
fn h(x, w, flag: bool) {
    let y = x @ w
    if flag {
        y = y * 2.0f64
    }
    return sum(y)
}

fn f(w: f64[2, 2], v: f64[2], m: f64[1, 2]) -> f64 {
    let total = 0.0f64
    for x in (v, m) {
        total += h(x, w, false) + h(x * 0.5, w, true)
    }
    return total
}
""",
    (normal(311, 2, 2), normal(312, 2), normal(313, 1, 2)),
    lambda w, v, m: (v @ w).sum() + (v @ w).sum() + (m @ w).sum() + (m @ w).sum(),
    wrt=(0, 1, 2),
    notes="`h` is split (its `if`) and checked at two ranks, one per step: each step's call is written for "
    "its own check (it was refused, E0333, and before that a wrong gradient for `w`)",
)

case(
    "for_over_items_of_several_dtypes_second_order",
    "for",
    """
fn f(x: f64) -> f64 {
    let t = 0.0f64
    for item in (x, 2, cos(x)) {
        t += (item * item + 1) * sin(x)
    }
    for act in (tanh, exp) {
        t = act(t) * 0.5
    }
    return t
}
""",
    (s(0.4),),
    lambda x: torch.exp(torch.tanh(((x * x + 1) + 5 + (torch.cos(x) ** 2 + 1)) * torch.sin(x)) * 0.5) * 0.5,
    second_order=True,
)


case(
    "let_hiding_a_variable_in_a_returning_branch",
    "for",
    """
fn f(x: f64) -> f64 {
    let k = x * 2.0
    let t = x
    if x > 0.0 {
        let k = 5.0f64 + x
        t = t * k
        let scale = fn(v) => v * k
        if t > 100.0 {
            return t
        }
        t = scale(t)
        let k = t
        t = t + k
    } else {
        return x
    }
    return t * k
}
""",
    (s(0.7),),
    lambda x: hidden_in_branch(x),
    second_order=True,
    notes="the statements after the `if` move into its branches (so that each `return` ends one): the branch's "
    "own `k` is renamed first, or they would read it for the outer `k`. It was refused (E0333)",
)


def hidden_in_branch(x):
    k = x * 2.0
    inner = 5.0 + x
    t = x * inner
    t = t * inner
    t = t + t
    return t * k


case(
    "return_inside_a_loop_of_a_struct_function",
    "for",
    """
struct S { a: f64, v: f64[2] }

fn g(s: S) -> S {
    for i in 0..3 {
        if s.a > 2.0 {
            return s
        }
        s.a = s.a * 2.0
        s.v = s.v * s.a
    }
    return s
}

fn f(w: f64) -> f64 {
    let r = g(S { a: w, v: [w, 1.0f64] })
    return r.a + sum(r.v)
}
""",
    (s(0.7),),
    lambda w: struct_return_in_loop(w),
    second_order=True,
    notes="a `return` in a loop keeps the value in a variable declared before the loop: a struct's is built "
    "field by field (it was refused, E0333)",
)


def struct_return_in_loop(w):
    a, v = w, torch.stack([w, torch.ones((), dtype=torch.float64)])
    for _ in range(3):
        if a > 2.0:
            break
        a = a * 2.0
        v = v * a
    return a + v.sum()


case(
    "let_shadowing_in_blocks",
    "for",
    """
fn f(x) {
    let h = x * 2.0
    for i in 0..2 {
        h = h * x
        let h = h + 1.0
        h = h * 3.0
        if sum(h) > -1000.0 {
            let x = h * 0.5
            h = h + x
        }
    }
    let total = sum(h)
    if total > -1000.0 {
        let total = total * 2.0
        h = h * total
    }
    return sum(h) + total
}
""",
    (uniform(164, -0.9, 0.9, 2),),
    lambda x: shadowed_lets(x),
    notes="a `let` in a loop body or branch that shadows an outer variable hides it to the end of its "
    "block only; the outer variable assigned before the `let` keeps that value",
)


def shadowed_lets(x):
    h = x * 2.0
    for _ in range(2):
        h = h * x
    total = h.sum()
    return (h * (total * 2.0)).sum() + total


case(
    "annotated_tensor_literal",
    "shapes",
    """
fn f(x) {
    let ys: f64[2] = [1.0, 2.5]
    let w: f64[2, 2] = [[0.5, -1], [2, 0.25]]
    return sum(tanh(x @ w) * ys)
}
""",
    (normal(165, 2),),
    lambda x: (
        torch.tanh(x @ torch.tensor([[0.5, -1.0], [2.0, 0.25]], dtype=torch.float64))
        * torch.tensor([1.0, 2.5], dtype=torch.float64)
    ).sum(),
    notes="tensor literals whose items take their dtype from the `let`'s annotation",
)

case(
    "closure_captures_before_loop_assigns",
    "closures",
    """
fn f(x) {
    let fs = 0.0f64
    let k = x[0] * 2.0
    let add = fn(z) => z * k
    fn twice(z) {
        return add(z) * k
    }
    for i in 0..2 {
        fs += sum(add(x)) + sum(twice(x))
        k = k + x[1]
    }
    return fs + k
}
""",
    (normal(166, 2),),
    lambda x: captured_values(x),
    notes="closures keep the value a variable had when they were made; the loop assigning it later "
    "changes neither their result nor where their adjoint goes",
)


def captured_values(x):
    k = x[0] * 2.0
    captured = k
    total = torch.tensor(0.0, dtype=torch.float64)
    for _ in range(2):
        total = total + (x * captured).sum() + (x * captured * captured).sum()
        k = k + x[1]
    return total + k


case(
    "closure_made_in_inlined_function",
    "closures",
    """
fn apply(g, x) {
    let k = x * 2.0
    let c = fn(z) => z * k
    if x > 0.0 {
        k = k * 100.0
    }
    return g(c(x))
}

fn f(x) {
    return apply(fn(y) => y * y, x)
}
""",
    (s(0.7),),
    lambda x: (x * (x * 2.0)) ** 2,
    notes="a closure made in a function `grad` inlines (it takes a function) keeps the value it captured "
    "though that function assigns the variable later",
)

case(
    "default_beside_a_local_of_its_name",
    "calls",
    """
const SCALE = 1.5f64

fn g(x, k: f64 = SCALE) {
    return sin(x * k)
}

fn f(x) {
    let SCALE = 100.0
    let t = 0.0f64
    for i in 0..2 {
        t += g(x) + SCALE * 0.0 + g(x, -0.1) + g(x, 0.5 * 3)
    }
    return t
}
""",
    (s(0.3),),
    lambda x: 2.0 * (torch.sin(x * 1.5) * 2.0 + torch.sin(x * -0.1)),
    notes="a default is the callee's (the module's `SCALE`, not the caller's local); literal arguments in "
    "an operation (`-0.1`, `0.5 * 3`) keep the dtype the parameter gives them",
)

case(
    "return_of_a_tuple_inside_a_loop",
    "calls",
    """
fn g(x: f64[3]) -> (f64, f64[3]) {
    let a = 0.0f64
    let u = x
    for i in 0..3 {
        if a > 50.0 {
            return (a, u)
        }
        a = a + sum(x * x)
        u = u * x
    }
    return (a, u)
}

fn f(x) {
    let (a, u) = g(x)
    return a + sum(u) * 0.5
}
""",
    (np.array([3.0, 3.0, 3.0]) + 0.1 * normal(185, 3),),
    lambda x: returned_in_a_loop(x),
    notes="the early return's value waits in a variable made before the loop: a tuple of a scalar and a vector, "
    "made of `zeros` given its type",
)

# A counter, flag or index that an `if` or loop updates after a branch has read it (found by a PyTorch user's
# first hour): the backward sweep must put it back before replaying the branch. It took the value the
# iteration ended with, and gave 3 for 2, 14 for 9, 64 for 8.
case(
    "counter_updated_after_a_break_test",
    "while",
    """
fn f(w) {
    let total = 0.0f64
    let i = 0
    while i < 5 {
        if i >= 2 {
            total += w * float(i, dtype=f64)
        }
        if total > 100.0f64 {
            break
        }
        i += 1
    }
    return total
}
""",
    (s(1.5),),
    lambda w: w * (2.0 + 3.0 + 4.0),
)

case(
    "counter_updated_after_a_return_test",
    "while",
    """
fn f(w, xs) {
    let total = 0.0f64
    let n = 0
    for x in xs {
        if n >= 2 {
            total += w * x
        }
        if total > 100.0f64 {
            return total * 2.0
        }
        n += 1
    }
    return total
}
""",
    (s(0.5), normal(83, 6)),
    lambda w, xs: (w * xs[2:]).sum(),
)

case(
    "flag_toggled_after_it_is_read",
    "while",
    """
fn f(w) {
    let total = 0.0f64
    let on = false
    let i = 0
    while i < 5 {
        i += 1
        if on {
            total += w * w
        }
        if total > 100.0f64 {
            break
        }
        on = not on
    }
    return total
}
""",
    (s(1.5),),
    lambda w: 2.0 * w * w,
)

case(
    "integer_doubled_by_a_loop_after_an_if",
    "for",
    """
fn f(w) {
    let total = 0.0f64
    let k = 1
    if w > 0.0 {
        total = w * float(k, dtype=f64)
    }
    for j in 0..3 {
        k = k * 2
    }
    let m = 0
    while m < 2 {
        if m == 1 {
            total = total * float(k, dtype=f64)
        }
        while k < 20 {
            k += 5
        }
        m += 1
    }
    return total
}
""",
    (s(1.5),),
    lambda w: w * 23.0,
    notes="the `if` reads k = 1 (before the `for`), the `while`'s `if` reads k = 23 (after the inner `while`): "
    "the sweep undoes the loops that change k, and not only the `if`s",
)

case(
    "power_of_a_zero_exponent_at_a_zero_base",
    "elementwise",
    """
fn f(a, b) {
    return sum(a ** b) + sum(a ** 0.0)
}
""",
    (np.array([0.0, 1.5, 2.0, 0.0]), np.array([0.0, 2.0, 0.0, 3.0])),
    lambda a, b: (a**b).sum() + (a**0.0).sum(),
    notes="the base gets none where the exponent is 0 (`a ** 0` is 1), as torch's: not 0 * 0 ** -1, nan",
)

case(
    "d2_of_a_first_power_at_zero",
    "second order",
    """
fn f(x) {
    return x ** 1.0 * 3.0 + x ** 2
}
""",
    (s(0.0),),
    lambda x: x**1.0 * 3.0 + x**2,
    second_order=True,
    notes="the second derivative of x ** 1.0 is that of its first, 1.0 * x ** 0.0, whose rule is none: 0 at x = 0 "
    "(it was 0.0 * 0 ** -1, nan, so grad(grad(grad(x ** 2.0))) was nan at 0)",
)

case(
    "linspace_of_two_learned_ends",
    "elementwise",
    """
fn f(a, b, x) {
    return sum(exp(linspace(a, b, 6)) * x)
}
""",
    (s(0.3), s(-1.2), normal(81, 6)),
    lambda a, b, x: (torch.exp(a + (b - a) * torch.arange(6, dtype=torch.float64) / 5) * x).sum(),
    notes="linspace is linear in its two ends: each gets the adjoint summed against its weights, 1 - i / 5 and i / 5",
)

case(
    "inverse_trigonometry",
    "elementwise",
    """
fn f(x) {
    return sum(tan(x) * atan(x * 2.0) + asin(x * 0.5) * acos(x * 0.4))
}
""",
    (uniform(82, -1.2, 1.2, 5),),
    lambda x: (torch.tan(x) * torch.atan(x * 2.0) + torch.asin(x * 0.5) * torch.acos(x * 0.4)).sum(),
)

case(
    "masked_by_isfinite",
    "select",
    """
fn f(x) {
    let y = log(x)
    let safe = where(isfinite(y), y, 0.0)
    return sum(where(isfinite(y), safe * safe, 0.0)) + mean(where(isnan(y), 1.0, x))
}
""",
    (np.array([0.5, -1.0, 2.0, -3.0, 1.5]),),
    lambda x: masked_squares(x),
    notes="isfinite and isnan select, with no gradient through the tests; the nan of log(x) at x < 0 is replaced "
    "before it is squared (the double where), so none reaches x: nan * 0 would be nan, in torch as here",
)

case(
    "d2_recursion_whose_base_returns_an_argument",
    "second order",
    """
fn power_times(a: f64, x: f64, n: i64) -> f64 {
    if n == 0 {
        return x
    }
    return a * power_times(a, x, n - 1)
}

fn f(a) {
    return power_times(a, 2.0f64, 3)
}
""",
    (s(1.5),),
    lambda a: a**3 * 2.0,
    second_order=True,
    notes="grad(grad(f)) of a recursive function: the copy of its `_back` trimmed to `a`'s adjoint, `(f64, ())`, "
    "calls itself, and keeps that type for the second round",
)

case(
    "d2_loop_with_continue",
    "second order",
    """
fn f(x) {
    let t = 0.0f64
    for j in 0..3 {
        if t > 0.5 {
            continue
        }
        t += sin(x) * x
    }
    return t * x
}
""",
    (s(0.7),),
    lambda x: loop_with_continue(x),
    second_order=True,
    notes="grad(grad(f)) of a loop with `continue`: the inner gradient keeps the flag beside its values",
)

case(
    "grad_of_a_lambda_applied_where_made",
    "second order",
    """
fn f(w, x) {
    let g = grad(fn(v) => sum(tanh(v * w) * x))(w)
    return sum(g * g)
}
""",
    (normal(71, 5), normal(72, 5)),
    lambda w, x: inner_gradient_squared(w, x),
    notes="the inner grad of a lambda is written as a call of its lifted derivative, then differentiated in place",
)


case(
    "integer_literal_argument_used_as_count_and_divisor",
    "calls",
    """
fn scaled(x, n: i64) {
    let count = len(arange(n))
    return x / n * float(count)
}

fn f(x) {
    return sum(scaled(x, 2) * x)
}
""",
    (normal(73, 4),),
    lambda x: (x / 2 * 2 * x).sum(),
    notes="the literal 2 written in place at both uses of n: `arange(2)` an integer, `x / 2` of x's dtype",
)


def masked_squares(x):
    y = torch.log(x)
    safe = torch.where(torch.isfinite(y), y, 0.0)
    return torch.where(torch.isfinite(y), safe * safe, 0.0).sum() + torch.where(torch.isnan(y), 1.0, x).mean()


def inner_gradient_squared(w, x):
    with torch.enable_grad():
        v = w * 1.0  # the lambda's parameter, at w: its gradient is taken with w still live
        if not v.requires_grad:  # (the value alone is asked for)
            v = v.detach().requires_grad_()
        (g,) = torch.autograd.grad((torch.tanh(v * w) * x).sum(), v, create_graph=True)
        return (g * g).sum()


def loop_with_continue(x):
    t = torch.tensor(0.0, dtype=torch.float64)
    for _ in range(3):
        if t.item() > 0.5:
            continue
        t = t + torch.sin(x) * x
    return t * x


def returned_in_a_loop(x):
    a, u = torch.tensor(0.0, dtype=torch.float64), x
    for _ in range(3):
        if a.item() > 50.0:
            return a + u.sum() * 0.5
        a, u = a + (x * x).sum(), u * x
    return a + u.sum() * 0.5


case(
    "call_with_a_branch_decided_by_its_literals",
    "calls",
    """
fn act(x, leak=0.0, square=false) {
    if leak == 0.0 and not square {
        return relu(x)
    } else if square {
        return x * x
    }
    return maximum(x, x * leak)
}

fn f(x) {
    return sum(act(x) * act(x, 0.25) + act(x, 0.0, true))
}
""",
    (normal(62, 6),),
    lambda x: (torch.relu(x) * torch.maximum(x, x * 0.25) + x * x).sum(),
)

case(
    "call_with_a_decided_branch_that_hides_a_name",
    "calls",
    """
fn twice(x, flag=true) {
    let y = x * 2.0
    if flag {
        let y = x * 3.0
        assert(max(abs(y)) >= 0.0, "finite")
    }
    return y
}

fn f(x) {
    return sum(twice(x) * x)
}
""",
    (normal(63, 5),),
    lambda x: (x * 2.0 * x).sum(),
)

case(
    "call_whose_branch_reads_a_parameter_bound_again",
    "calls",
    """
fn cube_or_square(x, mode=0) {
    let mode = 1
    if mode == 1 {
        return sum(x * x * x)
    }
    return sum(x * x)
}

fn f(x) {
    return cube_or_square(x)
}
""",
    (normal(64, 4),),
    lambda x: (x * x * x).sum(),
)

case(
    "call_whose_branch_compares_a_float_f32_rounds",
    "calls",
    """
fn cube_or_square(x, p=16777217.0) {
    if p == 16777216.0 {
        return sum(x * x * x)
    }
    return sum(x * x)
}

fn f(x) {
    return cube_or_square(x)
}
""",
    (normal(65, 4),),
    lambda x: (x * x * x).sum(),  # the f32 16777217.0 is 16777216.0
)

case(
    "call_whose_branch_compares_an_integer_as_a_float",
    "calls",
    """
fn cube_or_square(x, n=16777217) {
    if n == 16777216.0 {
        return sum(x * x * x)
    }
    return sum(x * x)
}

fn f(x) {
    return cube_or_square(x)
}
""",
    (normal(66, 4),),
    lambda x: (x * x * x).sum(),  # the run compares 16777217 as an f32: 16777216.0
)
