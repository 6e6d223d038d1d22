"""`conv2d` and `max_pool2d` end to end: `grad` through them (first and second derivatives) against PyTorch's
autograd, the checker's diagnostics for their misuse, run-time errors, and their speed.

The primitives themselves (forward results and the gradient helpers against PyTorch) are tested in
tests/test_primitives.py (`test_conv2d_family_matches_torch`, `test_max_pool2d_family_matches_torch`).
"""

from __future__ import annotations

import dl.lang
import numpy as np
import pytest
from dl import pipeline
from dl.lang.diagnostics import DiagnosticError
from dlharness import dl_error

torch = pytest.importorskip("torch")

GRADIENTS = """
fn conv_loss(x: f32[N, C, H, W], w: f32[O, C, 3, 3], c: f32[N, O, _, _]) -> f32 {
    return sum(conv2d(x, w, stride=2, padding=1) * c)
}

fn conv_grads(x: f32[N, C, H, W], w: f32[O, C, 3, 3], c: f32[N, O, _, _]) -> (f32[N, C, H, W], f32[O, C, 3, 3]) {
    return grad(conv_loss, wrt=(0, 1))(x, w, c)
}

fn pool_loss(x: f32[N, C, H, W], c: f32[N, C, _, _]) -> f32 {
    return sum(max_pool2d(x, 3, stride=2, padding=1) * c)
}

fn pool_grad(x: f32[N, C, H, W], c: f32[N, C, _, _]) -> f32[N, C, H, W] {
    return grad(pool_loss)(x, c)
}

fn slope(x: f32[N, C, H, W], w: f32[O, C, 3, 3], c: f32[N, O, _, _], v: f32[N, C, H, W], u: f32[O, C, 3, 3]) -> f32 {
    let (gx, gw) = conv_grads(x * x, w, c)
    return sum(gx * v) + sum(gw * u * gw)
}

fn second(x: f32[N, C, H, W], w: f32[O, C, 3, 3], c: f32[N, O, _, _], v: f32[N, C, H, W], u: f32[O, C, 3, 3]) {
    return grad(slope, wrt=(0, 1, 2))(x, w, c, v, u)
}

fn net(x: f32[N, 1, 8, 8], w: f32[4, 1, 3, 3], c: f32[N, 4, 4, 4]) -> f32 {
    return sum(tanh(max_pool2d(conv2d(x, w, padding=1), 2)) * c)
}

fn net_slope(x: f32[N, 1, 8, 8], w: f32[4, 1, 3, 3], c: f32[N, 4, 4, 4], u: f32[4, 1, 3, 3]) -> f32 {
    return sum(grad(net, wrt=1)(x, w, c) * u)
}

fn net_second(x: f32[N, 1, 8, 8], w: f32[4, 1, 3, 3], c: f32[N, 4, 4, 4], u: f32[4, 1, 3, 3]) {
    return grad(net_slope, wrt=(1, 2))(x, w, c, u)
}
"""


@pytest.fixture(scope="module")
def program():
    return pipeline.load("gradients.dl", GRADIENTS)


def tensors(rng: np.random.Generator, *shapes, dtype=np.float32) -> list[np.ndarray]:
    return [rng.standard_normal(shape).astype(dtype) for shape in shapes]


def leaves(*arrays: np.ndarray):
    return [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays]


def close(actual, expected, tolerance: float = 2e-4) -> None:
    np.testing.assert_allclose(
        np.asarray(actual, np.float64), expected.detach().numpy(), rtol=tolerance, atol=tolerance
    )


def test_conv2d_gradients_match_torch(program) -> None:
    rng = np.random.default_rng(0)
    x, w = tensors(rng, (2, 3, 7, 6), (4, 3, 3, 3))
    (c,) = tensors(rng, (2, 4, 4, 3))
    gx, gw = pipeline.call(program, "conv_grads", [x, w, c])
    tx, tw = leaves(x, w)
    (torch.nn.functional.conv2d(tx, tw, stride=2, padding=1) * torch.tensor(c, dtype=torch.float64)).sum().backward()
    assert gx.dtype == np.float32 and gw.dtype == np.float32
    close(gx, tx.grad)
    close(gw, tw.grad)


def test_max_pool2d_gradient_matches_torch_with_ties_to_the_first(program) -> None:
    rng = np.random.default_rng(1)
    (x,) = tensors(rng, (2, 3, 7, 6))
    x = np.round(x)  # many ties: the gradient goes to the first maximum of each window, as in PyTorch
    (c,) = tensors(rng, (2, 3, 4, 3))
    (tx,) = leaves(x)
    (torch.nn.functional.max_pool2d(tx, 3, stride=2, padding=1) * torch.tensor(c, dtype=torch.float64)).sum().backward()
    close(pipeline.call(program, "pool_grad", [x, c]), tx.grad, 1e-6)


def test_second_derivatives_of_conv2d_match_torch_double_backward(program) -> None:
    rng = np.random.default_rng(2)
    x, w, c, v, u = tensors(rng, (2, 2, 6, 5), (3, 2, 3, 3), (2, 3, 3, 3), (2, 2, 6, 5), (3, 2, 3, 3))
    dx, dw, dc = pipeline.call(program, "second", [x, w, c, v, u])
    tx, tw, tc = leaves(x, w, c)
    squared = tx * tx
    loss = (torch.nn.functional.conv2d(squared, tw, stride=2, padding=1) * tc).sum()
    gx, gw = torch.autograd.grad(loss, (squared, tw), create_graph=True)
    slope = (gx * torch.tensor(v, dtype=torch.float64)).sum() + (gw * torch.tensor(u, dtype=torch.float64) * gw).sum()
    expected = torch.autograd.grad(slope, (tx, tw, tc))
    for actual, wanted in zip((dx, dw, dc), expected, strict=True):
        close(actual, wanted, 1e-3)


def test_second_derivative_through_conv2d_and_max_pool2d_matches_torch(program) -> None:
    rng = np.random.default_rng(3)
    x, w, c, u = tensors(rng, (2, 1, 8, 8), (4, 1, 3, 3), (2, 4, 4, 4), (4, 1, 3, 3))
    dw, dc = pipeline.call(program, "net_second", [x, w, c, u])
    tx, tw, tc = leaves(x, w, c)
    loss = (torch.tanh(torch.nn.functional.max_pool2d(torch.nn.functional.conv2d(tx, tw, padding=1), 2)) * tc).sum()
    (gw,) = torch.autograd.grad(loss, (tw,), create_graph=True)
    expected = torch.autograd.grad((gw * torch.tensor(u, dtype=torch.float64)).sum(), (tw, tc))
    close(dw, expected[0], 1e-3)
    close(dc, expected[1], 1e-3)


# ---------------------------------------------------------------------- diagnostics


def errors(body: str) -> list[tuple[str, str]]:
    source = f"fn f(x: f32[2, 3, 8, 8], w: f32[4, 3, 3, 3], v: f32[8, 8], n: i64) {{\n    return {body}\n}}\n"
    return [(e.code, e.message) for e in dl.lang.check(source, "t.dl").errors]


@pytest.mark.parametrize(
    ("body", "code", "words"),
    [
        ("conv2d(v, w)", "E0302", "`conv2d` needs a rank-4 tensor [N, C, H, W], found f32[8, 8]"),
        ("conv2d(x, v)", "E0302", "rank-4 tensor [O, C, KH, KW]"),
        ("conv2d(x, ones(4, 2, 3, 3))", "E0302", "channels differ: the image has 3, the kernel takes 2"),
        ("conv2d(x, w, stride=n)", "E0307", "`conv2d` needs `stride=` as a literal integer or const"),
        ("conv2d(x, w, stride=0)", "E0307", "`stride=` of at least 1, found 0"),
        ("conv2d(x, w, padding=-1)", "E0307", "`padding=` of at least 0"),
        ("conv2d(x, w, stride=1.5)", "E0301", "takes `stride=` as an integer, found f32"),
        ("conv2d(x, ones(4, 3, 11, 3))", "E0307", "a 11 by 3 window does not fit in f32[2, 3, 8, 8] with padding 0"),
        ("conv2d(x, ones(4, 3, 3, 3, dtype=f64))", "E0317", "needs tensors of one dtype"),
        ("conv2d(int(x), int(w))", "E0317", "needs a float tensor"),
        ("max_pool2d(v, 2)", "E0302", "`max_pool2d` needs a rank-4 tensor"),
        ("max_pool2d(x, n)", "E0307", "needs the window `size` as a literal integer or const"),
        ("max_pool2d(x, 2, padding=2)", "E0307", "padding 2 is more than half the window size 2"),
        ("max_pool2d(x, 9)", "E0307", "a 9 by 9 window does not fit"),
        ("conv2d_input_grad(ones(2, 4, 5, 5), w, x)", "E0302", "`dy` of the forward result's shape [2, 4, 6, 6]"),
        ("max_pool2d_gather(v, x, 2)", "E0302", "rank-4"),
    ],
)
def test_checker_reports_misuse(body: str, code: str, words: str) -> None:
    found = errors(body)
    assert len(found) == 1 and found[0][0] == code and words in found[0][1], found


def test_checker_gives_static_shapes_where_it_knows_them() -> None:
    source = """
fn f(x: f32[B, 3, 28, 28], w: f32[8, 3, 5, 5], y: f32[B, 3, H, 28]) {
    let a: f32[B, 8, 14, 14] = conv2d(x, w, stride=2, padding=2)
    let b: f32[B, 3, 10, 10] = max_pool2d(x, 3, padding=1)
    let c: f32[B, 3, 14, 14] = max_pool2d(x, 2)
    let d: f32[B, 8, _, 24] = conv2d(y, w)
    let e: f32[B, 3, 28, 28] = conv2d_input_grad(a, w, x, stride=2, padding=2)
    let g: f32[8, 3, 5, 5] = conv2d_weight_grad(a, x, w, stride=2, padding=2)
    let h: f32[B, 3, 28, 28] = max_pool2d_grad(c, x, 2)
    let k: f32[B, 3, 14, 14] = max_pool2d_gather(x, x, 2)
    return (a, b, c, d, e, g, h, k)
}
"""
    assert dl.lang.check(source, "t.dl").errors == []


def test_run_time_errors_are_e0513() -> None:
    body = "conv2d(reshape(a, 1, 1, n, n), ones(1, 1, 3, 3))"
    source = f"fn main() {{\n}}\nfn f(a: f32[_], n: i64) {{\n    return {body}\n}}\n"
    program = pipeline.load("t.dl", source)
    with pytest.raises(DiagnosticError) as raised:
        pipeline.call(program, "f", [np.ones(4, np.float32), 2])
    (diagnostic,) = raised.value.diagnostics
    assert diagnostic.code == "E0513"
    assert "a 3 by 3 window does not fit in a 1x1x2x2 image with padding 0" in diagnostic.message
    failure = dl_error("max_pool2d(reshape(a, 1, 1, -1, 1), 2)", np.ones(2, np.float32))
    assert [d.code for d in failure.diagnostics] == ["E0513"]


# ---------------------------------------------------------------------- speed
