"""Tensor functions compiled for the shapes they are called with (codegen/specialize.py, codegen/primitives.py).

Every test runs the same function on the interpreter and on the llvm backend and compares: values within a
tight tolerance (f32 sums accumulate in f64 and products go through BLAS, so the last bits may differ),
run-time failures as the same diagnostic (code, message, span). Each also checks, from the backend's own
report, that the function really was compiled and not quietly interpreted.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from dl import pipeline
from dl.codegen import ir, native
from dl.codegen.registry import specialise
from dl.codegen.values import NUMPY_DTYPES
from dl.interp import run as interpreter
from dl.lang.diagnostics import DiagnosticError
from dl.runtime.backend import Options
from dl.runtime.values import StructValue
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))
from autodiff_cases import CASES
from test_autodiff import copy_leaf, leaves, program

ROOT = Path(__file__).resolve().parent.parent


def copied(value):
    if isinstance(value, tuple):
        return tuple(copied(v) for v in value)
    return value.copy() if isinstance(value, np.ndarray) else value


def on_both(source: str, name: str, *args, path: str = "case.dl"):
    """(interpreted result, compiled result, the backend's report of its specialisations)."""
    loaded = pipeline.load(path, source)
    _, typed = pipeline.prepare(loaded, ((name, tuple(pipeline.value_type(a) for a in args)),))
    expected = call_on(typed, name, [copied(a) for a in args])
    backend = native.compile_program(typed, cache=False)
    actual = call_on(typed, name, [copied(a) for a in args], backend.bodies)
    return expected, actual, backend.specialisations()


def call_on(typed, name: str, args: list, bodies=None):
    """Call `name` on the interpreter, running the compiled `bodies` (if any) in place of its own."""
    return interpreter.BACKEND.prepare(typed, Options(bodies=bodies or {})).call(name, args)


def verdict(report: str, name: str) -> str:
    lines = [line for line in report.splitlines() if f": `{name}`(" in line]
    assert lines, report
    return lines[0].split(") ", 1)[1]


def assert_close(actual, expected, rtol=1e-6, atol=1e-6, where="result") -> None:
    if isinstance(expected, StructValue):
        assert isinstance(actual, StructValue) and actual.type.name == expected.type.name, where
        for field, a, e in zip(expected.type.fields, actual.values, expected.values, strict=True):
            assert_close(a, e, rtol, atol, f"{where}.{field}")
        return
    if isinstance(expected, tuple):
        assert isinstance(actual, tuple) and len(actual) == len(expected), where
        for k, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_close(a, e, rtol, atol, f"{where}[{k}]")
        return
    assert type(actual) is type(expected), f"{where}: {type(actual)} vs {type(expected)}"
    if isinstance(expected, str):
        assert actual == expected, where
        return
    if isinstance(expected, np.ndarray):
        assert actual.dtype == expected.dtype and actual.shape == expected.shape, where
    if isinstance(expected, (bool, int)) and not isinstance(expected, np.generic):
        assert actual == expected, where
        return
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=where)


def check(source: str, name: str, *args, rtol=1e-6, atol=1e-6) -> None:
    expected, actual, report = on_both(source, name, *args)
    assert verdict(report, name) == "compiled", report
    assert_close(actual, expected, rtol, atol)


def lowered_for(source: str, path: str, name: str, *args):
    """`name`'s specialisation for the layout of `args`, lowered to the IR (not compiled)."""
    loaded = pipeline.load(path, source)
    program, typed = pipeline.prepare(loaded, ((name, tuple(pipeline.value_type(a) for a in args)),))
    decl = next(d for d in program.modules[path].decls if getattr(d, "name", None) == name)
    layout = tuple(native.flatten(a, [], {}) for a in args)
    return specialise(typed, decl, path, layout, native.Structs(None))


def llvm_text(lowered) -> str:
    """The LLVM module a specialisation and its callees make, before LLVM optimises it."""
    from dl.codegen.llvm import build_module

    target, vectors = native.tensor_target()
    return str(build_module([lowered.function, *lowered.callees], target, vectors))


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def f32(*shape, seed=0):
    return rng(seed).standard_normal(shape).astype(np.float32)


def f64(*shape, seed=0):
    return rng(seed).standard_normal(shape)


# ------------------------------------------------------------------ elementwise and broadcasting


@pytest.mark.parametrize(
    ("expression", "shapes"),
    [
        ("tanh(a * b + c) * 2.0 - a / (abs(b) + 1.0)", [(4, 5), (5,), (4, 1)]),
        ("maximum(a, b) - minimum(a, c) + relu(a) * sigmoid(b)", [(3, 1, 4), (2, 4), (1, 2, 1)]),
        ("where(a > b, a * 2.0, c - 1.0) + exp(-(a * a)) + sqrt(abs(c)) + log(abs(b) + 1.0)", [(6,), (6,), (6,)]),
        ("-a ** 2.0 + sin(b) * cos(c)", [(2, 3), (2, 3), (1,)]),
        ("softplus(a * 30.0) * erf(b) + log1p(abs(c)) - expm1(a * 0.5)", [(3, 17), (17,), (3, 1)]),
        ("tril(a, 1) * b + triu(c, -1) + tril(transpose(a) @ a)[0]", [(4, 5), (4, 5), (2, 4, 5)]),
        ("a @ swapaxes(b, -2, -1) + swapaxes(c, 0, 2)", [(2, 3, 4, 5), (2, 3, 4, 5), (4, 3, 2, 4)]),
        (
            "sum(a, axis=(0, 2)) + mean(b, axis=(-1, 0)) * max(c, axis=(1, 2)) - logsumexp(a, axis=(2, 0))",
            [(3, 4, 5), (4, 2), (4, 3, 2)],
        ),
        ('einsum("ijk,kl->lji", a, b) + einsum("lj,lj,i->lji", c, c, a[:, 0, 0])', [(3, 4, 5), (5, 2), (2, 4)]),
        ('einsum("ij->", a) * b + einsum("i,j->ij", c, c)', [(3, 4), (5,), (5,)]),
        ("a[..., 0:3] * b[..., 1:4] + c[1, ...][..., 0:1] + a[0, ..., 2]", [(2, 3, 5), (2, 3, 4), (3, 3, 1)]),
        (
            "min(a, axis=(0, 1), keepdims=true) + sum(b * c, axis=(1, -1), keepdims=true)",
            [(3, 4, 5), (3, 4, 5), (3, 4, 5)],
        ),
        ("sum(a * b, axis=1) + mean(c, axis=0)", [(5, 7), (5, 7), (3, 5)]),
        ("max(a, axis=0, keepdims=true) - min(b, axis=-1, keepdims=true) + c", [(4, 6), (4, 6), (4, 6)]),
        ("softmax(a, axis=1) + log_softmax(b, axis=0) * c", [(3, 8), (3, 8), (3, 8)]),
        ("transpose(a) @ b + c", [(6, 4), (6, 5), (5,)]),
        ("a @ transpose(b) * sum(c)", [(3, 7), (2, 7), (2,)]),
        ("a[1] * b + reshape(c, 2, 6)[0, 1:6]", [(3, 5), (5,), (3, 4)]),
        ("expand_dims(a, 1) * b + broadcast_to(c, 4, 3, 2)", [(4, 2), (3, 2), (2,)]),
        ("float(argmax(a, axis=1)) + float(argmin(b, axis=0, keepdims=true)) * sum(c)", [(4, 4), (6, 4), (2,)]),
        ("one_hot(argmax(a, axis=1), 5) * b + float(argmax(c))", [(4, 5), (4, 5), (3, 2)]),
        ("logsumexp(a, axis=1) + logsumexp(b) + logsumexp(c, axis=0, keepdims=true)", [(4, 6), (2, 3), (3, 4)]),
        ("concat((a, b), axis=0) @ transpose(c) + concat((c, c), axis=1)[0:1]", [(2, 3), (4, 3), (6, 3)]),
        ("stack((a, b, c), axis=1) * 2.0 + stack((a, b), axis=0)[1][0]", [(4, 3), (4, 3), (4, 3)]),
        ("a[::2, 1:] * b[::-1] + [a[0, 0:3], b, c[2]]", [(5, 4), (3,), (3, 3)]),
        ("a @ b + a @ c", [(2, 3, 4), (4, 5), (2, 4, 5)]),
        ("a[[2, 0, 2]] * sum(b[[1, 1, 0]], axis=0) + c", [(3, 4), (2, 4), (1, 4)]),
    ],
)
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_elementwise_reductions_and_products_agree(expression: str, shapes: list, dtype: str) -> None:
    maker = f32 if dtype == "f32" else f64
    source = f"fn f(a, b, c) {{ return {expression} }}"
    args = [maker(*shape, seed=k) for k, shape in enumerate(shapes)]
    check(source, "f", *args, rtol=1e-5 if dtype == "f32" else 1e-12, atol=1e-6 if dtype == "f32" else 1e-12)


def test_products_of_every_rank_and_layout() -> None:
    source = """
fn f(m: f64[4, 3], n: f64[3, 5], v: f64[3], w: f64[4]) -> (f64[4, 5], f64[5], f64[4], f64, f64[5, 4], f64[3, 3]) {
    return (m @ n, v @ n, m @ v, v @ v, transpose(m @ n), transpose(m) @ m)
}
"""
    check(source, "f", f64(4, 3), f64(3, 5, seed=1), f64(3, seed=2), f64(4, seed=3), rtol=1e-12, atol=1e-12)


def test_integer_and_bool_tensors() -> None:
    source = """
fn f(a: i64[5], b: i64[5], x: f32[5]) -> (i64[5], bool[5], i64, f32, f32[5], i64) {
    let big = a > b
    return (a * 3 - b, big, sum(big), mean(a), where(big, x, 0.0) + float(a), max(a - b))
}
"""
    check(source, "f", np.array([1, 5, -2, 7, 0]), np.array([2, 3, -2, 9, -1]), f32(5))


# ------------------------------------------------------------------ control flow, structs, tuples


def test_a_tensor_loop_with_a_data_dependent_condition() -> None:
    source = """
fn f(h: f32[4, 8], w: f32[8, 8], steps: i64) -> (f32[4, 8], i64) {
    let taken = 0
    for t in 0..steps {
        h = tanh(h @ w + 0.1)
        if sum(h) > 0.0 {
            h = h * 0.5
        } else {
            h = -h
        }
        taken += 1
        if mean(abs(h)) < 0.01 { break }
    }
    return (h, taken)
}
"""
    check(source, "f", f32(4, 8), f32(8, 8, seed=1) * 0.5, 7)


def test_early_returns_from_loops_and_inlined_functions() -> None:
    source = """
fn first_big(x: f64[6], limit: f64) -> f64 {
    for i in 0..6 {
        if x[i] > limit { return x[i] }
    }
    return -1.0f64
}
fn f(x: f64[6]) -> (f64, f64, f64[6]) {
    let y = x
    y = y * 2.0
    return (first_big(x, 0.5f64), first_big(x, 100.0f64), y)
}
"""
    check(source, "f", np.array([0.1, -2.0, 0.7, 3.0, 0.2, 0.9]))


def test_structs_tuples_closures_and_tree_map() -> None:
    source = """
struct Layer { w: f32[3, 2], b: f32[2] }
fn scale(p: Layer, s: f32) -> Layer {
    let shrink = fn(leaf) => leaf * s
    return tree_map(shrink, p)
}
fn f(p: Layer, q: Layer, x: f32[5, 3]) -> (Layer, f32[5, 2], (Layer, f32)) {
    let moved = tree_map(fn(a, b) => a - 0.1 * b, p, q)
    let total = zeros_like(p)
    total.w += moved.w
    total.b = total.b + 1.0
    return (scale(moved, 2.0), x @ p.w + p.b, (total, sum(q.w)))
}
"""
    loaded = pipeline.load("s.dl", source)
    _, typed = pipeline.prepare(loaded)
    layer = interpreter.compile_program(loaded, typed).states["s.dl"].structs["Layer"]
    p = StructValue(layer, (f32(3, 2), f32(2, seed=1)))
    q = StructValue(layer, (f32(3, 2, seed=2), f32(2, seed=3)))
    expected, actual, report = on_both(source, "f", p, q, f32(5, 3, seed=4), path="s.dl")
    assert verdict(report, "f") == "compiled", report
    assert_close(actual[1:], expected[1:])
    assert [a.shape for a in actual[0].values] == [(3, 2), (2,)]
    np.testing.assert_allclose(actual[0].values[0], expected[0].values[0], rtol=1e-6)


def test_arithmetic_on_structs_and_tuples_leaf_by_leaf() -> None:
    """`m - lr * g`, `-g`, `t * 2.0 + t` on structs and tuples are compiled leaf by leaf, as interpreted."""
    source = """
struct Layer { w: f32[3, 2], b: f32[2] }
fn f(p: Layer, q: Layer, lr: f32, t: (f32[2], f32)) -> (Layer, Layer, (f32[2], f32)) {
    let moved = p - lr * q
    moved -= q / 4.0
    return (moved, -q + p * p, t * 2.0 + t ** 2.0)
}
"""
    loaded = pipeline.load("s.dl", source)
    _, typed = pipeline.prepare(loaded)
    layer = interpreter.compile_program(loaded, typed).states["s.dl"].structs["Layer"]
    p = StructValue(layer, (f32(3, 2), f32(2, seed=1)))
    q = StructValue(layer, (f32(3, 2, seed=2), f32(2, seed=3)))
    expected, actual, report = on_both(
        source, "f", p, q, np.float32(0.1), (f32(2, seed=4), np.float32(3.0)), path="s.dl"
    )
    assert verdict(report, "f") == "compiled", report
    assert_close(actual, expected)
    np.testing.assert_allclose(expected[0].values[1], p.values[1] - 0.1 * q.values[1] - q.values[1] / 4, rtol=1e-6)


def test_element_assignment_and_swaps_read_before_writing() -> None:
    source = """
fn f(x: f64[3, 4], k: i64, a: f64[4], b: f64[4]) -> (f64[3, 4], f64[3, 4], f64[4], f64[4]) {
    let y = x
    y[k] = a
    y[:, 1:3] += 1.0
    y[-1, 0] = 7.0f64
    let z = y
    for i in 0..2 {
        (a, b) = (b, a + b)
        z[i, i] = sum(a)
    }
    return (x, y, a, b)
}
"""
    check(source, "f", f64(3, 4), 1, f64(4, seed=1), f64(4, seed=2), rtol=1e-12, atol=1e-12)


def test_gather_and_scatter_add() -> None:
    source = """
fn f(table: f32[6, 3], ids: i64[4], d: f32[4, 3]) -> (f32[4, 3], f32[6, 3], f32[2, 4]) {
    let rows = gather(table, ids, axis=0)[1:3]
    return (gather(table, ids), scatter_add(zeros_like(table), ids, d, axis=0), rows[:, 0:3] @ ones(3, 4))
}
"""
    check(source, "f", f32(6, 3), np.array([5, 0, -1, 2]), f32(4, 3, seed=1))


# indexing by integer tensors as numpy does: picks side by side keep their place, parted ones go first
PICKS = [
    ("x[arange(3), i]", "f32[3, 5]"),
    ("x[i, :, j]", "f32[3, 4]"),
    ("x[:, j, 1]", "f32[3, 3]"),
    ("x[1, i, j]", "f32[3]"),
    ("x[..., j]", "f32[3, 4, 3]"),
    ("x[1:, i]", "f32[2, 3, 5]"),
    ("x[:, ::-1][i, :, 1:4]", "f32[3, 4, 3]"),
    ("x[m, i]", "f32[2, 3, 5]"),
    ("x[reshape(i, 3, 1), j]", "f32[3, 3, 5]"),
    ("x[i, 2, j]", "f32[3]"),
    ("(x * 2.0)[i, 0] + 1.0", "f32[3, 5]"),
    ("x[:, i, ..., j]", "f32[3, 3]"),  # a `...` of no axis still parts the picks: their dimension first
]


@pytest.mark.parametrize(("pick", "result"), PICKS)
def test_indexing_by_integer_tensors_is_compiled_as_numpy_indexes(pick: str, result: str) -> None:
    source = f"fn f(x: f32[3, 4, 5], i: i64[3], j: i64[3], m: i64[2, 1]) -> {result} {{\n    return {pick}\n}}"
    x = f32(3, 4, 5)
    i, j, m = np.array([2, 0, -1]), np.array([1, -4, 3]), np.array([[0], [-2]])
    check(source, "f", x, i, j, m)


def test_the_negative_log_likelihood_as_pytorch_users_write_it_is_compiled_with_its_gradient() -> None:
    source = """
fn nll(z: f32[4, 3], y: i64[4]) -> f32 {
    return -mean(log_softmax(z)[arange(4), y])
}
fn f(z: f32[4, 3], y: i64[4]) -> (f32, f32[4, 3]) {
    return value_and_grad(nll)(z, y)
}
"""
    check(source, "f", f32(4, 3), np.array([0, 2, 1, -1]), rtol=1e-5)


# ------------------------------------------------------------------ picks along an axis and sorts


def exactly(source: str, name: str, *args) -> tuple:
    """The compiled result, which must be the interpreter's to the bit (positions, values, signs of zero, nans)."""
    expected, actual, report = on_both(source, name, *args)
    assert verdict(report, name) == "compiled", report
    for a, e in zip(actual, expected, strict=True):
        assert a.dtype == e.dtype and a.shape == e.shape and a.tobytes() == e.tobytes(), (a, e)
    return actual


# (x, indices, axis): repeated and negative indices, every axis, more or fewer indices than the axis has
ALONG = [
    (f32(3, 5), np.array([[0, 4, -1], [2, 2, 2], [-5, 1, 0]]), 1),
    (f64(4, 3), np.array([[3, 0, -1], [3, 3, 1]]), 0),
    (np.arange(24).reshape(2, 3, 4), np.array([[[2], [0], [-3]], [[1], [1], [0]]]), -1),
    (np.arange(24, dtype=np.int32).reshape(2, 3, 4), np.array([[[2, 0, 1, 1]], [[-1, -3, 0, 0]]], np.int32), 1),
    (f32(6), np.array([5, 5, 0, -6, 1, 1, 1]), 0),
    (f32(2, 3), np.zeros((2, 0), np.int64), 1),
]


@pytest.mark.parametrize(("x", "indices", "axis"), ALONG)
def test_take_along_axis_and_add_along_axis_agree_exactly(x, indices, axis) -> None:
    """Both as numpy's `take_along_axis` and `add.at` (repeated indices add up, in order)."""
    updates = (rng(3).standard_normal(indices.shape) * 10).astype(x.dtype)
    types = [pipeline.value_type(v) for v in (x, indices, updates)]
    source = (
        f"fn f(x: {types[0]}, i: {types[1]}, u: {types[2]}) -> ({types[2]}, {types[0]}) {{\n"
        f"    return (take_along_axis(x, i, {axis}), add_along_axis(x, i, u, {axis}))\n}}\n"
    )
    picked, added = exactly(source, "f", x, indices, updates)
    np.testing.assert_array_equal(picked, np.take_along_axis(x, indices, axis))
    expected = x.copy()
    grid = np.indices(indices.shape)
    grid[axis] = indices % x.shape[axis]
    np.add.at(expected, tuple(grid), updates)
    np.testing.assert_array_equal(added, expected)


def stable_order(row: np.ndarray, descending: bool) -> list[int]:
    """The positions a stable sort puts `row` in: Python's `sorted`, which keeps ties in their order either way;
    nan counted the largest (last ascending, first descending), -0.0 equal to 0.0."""
    key = [(1, 0.0) if value != value else (0, value) for value in row.tolist()]
    return sorted(range(len(row)), key=key.__getitem__, reverse=descending)


def sort_keys(dtype: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Few distinct values (many ties), and for floats nan, -0.0 and the infinities among them."""
    draw = rng(seed)
    if dtype == "bool":
        return draw.integers(0, 2, shape).astype(bool)
    values = draw.integers(-3, 4, shape).astype(NUMPY_DTYPES[dtype])
    if dtype in ("f32", "f64"):
        for fill, share in ((np.nan, 0.15), (-0.0, 0.1), (np.inf, 0.05), (-np.inf, 0.05)):
            values[draw.random(shape) < share] = fill
    return values


def check_sorts(x: np.ndarray, axis: int, descending: bool) -> None:
    """`argsort` and `sort` compiled give the interpreter's results exactly, and the stable order (`stable_order`)."""
    kind, positions = pipeline.value_type(x), f"i64[{', '.join(map(str, x.shape))}]"
    flag = "true" if descending else "false"
    source = (
        f"fn f(x: {kind}) -> ({positions}, {kind}) {{\n"
        f"    return (argsort(x, axis={axis}, descending={flag}), sort(x, axis={axis}, descending={flag}))\n}}\n"
    )
    order, values = exactly(source, "f", x)
    moved = np.moveaxis(x, axis, -1)
    rows = moved.reshape(math.prod(moved.shape[:-1]), moved.shape[-1])
    found = np.moveaxis(order, axis, -1).reshape(rows.shape)
    for row, positions in zip(rows, found, strict=True):
        assert positions.tolist() == stable_order(row, descending)
    assert values.tobytes() == np.take_along_axis(x, order, axis).tobytes()


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dtype", ["f32", "f64", "i64", "i32", "bool"])
@pytest.mark.parametrize(("shape", "axis"), [((1,), 0), ((13,), -1), ((4, 9), 1), ((33, 3), 0), ((2, 17, 3), -2)])
def test_sorts_agree_exactly(shape: tuple, axis: int, dtype: str, descending: bool) -> None:
    check_sorts(sort_keys(dtype, shape, seed=len(shape) + axis), axis, descending)


@st.composite
def sorted_arrays(draw) -> tuple:
    shape = tuple(draw(st.lists(st.integers(0, 5), min_size=1, max_size=3)))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    along = axis % len(shape)
    shape = (*shape[:along], draw(st.integers(0, 70)), *shape[along + 1 :])
    dtype = draw(st.sampled_from(["f32", "f64", "i64", "i32", "bool"]))
    return sort_keys(dtype, shape, draw(st.integers(0, 1000))), axis, draw(st.booleans())


@settings(max_examples=25, deadline=None)
@given(case=sorted_arrays())
def test_sorts_of_any_shape_are_stable_and_the_interpreters(case: tuple) -> None:
    check_sorts(*case)


def test_sorts_of_a_larger_row_and_of_a_computed_tensor_are_compiled() -> None:
    """Rows of 1,025: eleven merge passes, the last merging 1,024 elements with one; the keys read from a tree."""
    x = sort_keys("f32", (3, 1_025), seed=5)
    source = "fn f(x: f32[3, 1025]) -> (i64[3, 1025], f32[3, 1025]) {\n    return (argsort(x * 2.0), sort(x + x))\n}\n"
    order, values = exactly(source, "f", x)
    assert [row.tolist() for row in order] == [stable_order(row, False) for row in x * 2.0]
    np.testing.assert_array_equal(values, np.take_along_axis(x + x, order, 1))


def test_gradients_through_sorts_and_picks_along_an_axis_are_compiled() -> None:
    """`take_along_axis` twice (its adjoints added into one gradient) and `sort` both ways, against torch."""
    torch = pytest.importorskip("torch")
    source = """
fn loss(x: f32[3, 5], i: i64[3, 2]) -> f32 {
    let top = sort(x, descending=true)[:, 0:2]
    return sum(take_along_axis(log_softmax(x), i, 1)) + sum(take_along_axis(x * x, i, -1)) + sum(top * top) + sum(
        sort(x, axis=0)[0]
    )
}
fn f(x: f32[3, 5], i: i64[3, 2]) -> (f32, f32[3, 5]) { return value_and_grad(loss)(x, i) }
"""
    x, indices = f32(3, 5, seed=7), np.array([[0, 4], [2, 2], [-1, 1]])
    expected, (value, gradient), report = on_both(source, "f", x, indices)
    assert verdict(report, "f") == "compiled", report
    assert_close((value, gradient), expected, rtol=1e-5)
    t = torch.tensor(x, requires_grad=True)
    i = torch.tensor(indices % 5)
    top = torch.sort(t, descending=True, stable=True).values[:, 0:2]
    total = (
        torch.gather(torch.log_softmax(t, 1), 1, i).sum()
        + torch.gather(t * t, 1, i).sum()
        + (top * top).sum()
        + torch.sort(t, dim=0, stable=True).values[0].sum()
    )
    total.backward()
    assert value == pytest.approx(total.item(), rel=1e-5)
    np.testing.assert_allclose(gradient, t.grad.numpy(), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ run-time failures are the interpreter's


def failures(source: str, name: str, *args) -> tuple[DiagnosticError, DiagnosticError, str]:
    loaded = pipeline.load("fail.dl", source)
    _, typed = pipeline.prepare(loaded, ((name, tuple(pipeline.value_type(a) for a in args)),))
    backend = native.compile_program(typed, cache=False)
    outcomes = []
    for bodies in (None, backend.bodies):
        with pytest.raises(DiagnosticError) as caught:
            call_on(typed, name, [copied(a) for a in args], bodies)
        outcomes.append(caught.value)
    return outcomes[0], outcomes[1], backend.specialisations()


def shown(failure: DiagnosticError) -> tuple:
    diagnostic = failure.diagnostics[0]
    return (diagnostic.code, diagnostic.message, diagnostic.span.line, diagnostic.span.column)


@pytest.mark.parametrize(
    ("body", "args"),
    [
        ("return x[i] * 2.0", (f32(4), 4)),
        ("return x[i] * 2.0", (f32(4), -5)),
        ('assert(sum(x) > 100.0, "too small")\n    return x', (f32(4), 0)),
        ("return gather(x, arange(3) + i)", (f32(4), 2)),
        ("return x[arange(3) + i]", (f32(4), 2)),
        ("return one_hot(arange(3) + i, 4)[0] + x", (f32(4), 2)),
        ("return one_hot(arange(3) - i, 4)[0] + x", (f32(4), 1)),
        ("return gather(x, [5 - i, -9 + i, 1])", (f32(4), 0)),
        ("return gather(x, [1 - i, -9 + i, 1])", (f32(4), 0)),
        ("return gather(reshape(x, 2, 2), [1, 2 + i], axis=-1)[0]", (f32(4), 0)),
        ("return reshape(x, 2, 2)[[0, 1], [1, 2 + i]]", (f32(4), 0)),
        ("return reshape(x, 2, 2)[[i, 1], [1, 5 - i]]", (f32(4), 4)),
        ("return reshape(x, 2, 2)[[0, 1], [1, 5 - i]]", (f32(4), 2)),
        ("return reshape(x, 1, 2, 2)[[0], 0, [1, 2 + i]]", (f32(4), 0)),
        ("return reshape(x, 1, 2, 2)[[i], :, [1, i]][0]", (f32(4), 3)),
        ("return reshape(x, 2, 2)[:, [0, i]][0]", (f32(4), -3)),
        ("return take_along_axis(reshape(x, 2, 2), [[0, i], [1, 0]], 1)[0]", (f32(4), 2)),
        ("return take_along_axis(reshape(x, 2, 2), [[0, i], [1, 5]], 1)[0]", (f32(4), -3)),
        ("let unused = take_along_axis(x, [i, 0], 0)\n    return x", (f32(4), -5)),
        ("return add_along_axis(x, [i, 0, i], [1.0, 2.0, 3.0], 0)", (f32(4), 4)),
        ("return add_along_axis(reshape(x, 2, 2), [[i], [0]], [[1.0], [2.0]], -1)[1]", (f32(4), -3)),
    ],
)
def test_run_time_failures_are_the_interpreters_diagnostics(body: str, args: tuple) -> None:
    result = "f32" if "x[i]" in body else "f32[_]"
    source = f"fn f(x: f32[4], i: i64) -> {result} {{\n    {body}\n}}"
    interpreted, compiled, report = failures(source, "f", *args)
    assert verdict(report, "f") == "compiled", report
    assert shown(compiled) == shown(interpreted)
    assert compiled.diagnostics[0].notes == interpreted.diagnostics[0].notes  # the call stack too


KEPT_TYPES = """
fn f(x: f32[4], n: i64) -> f32[3] {
    let head: f32[3] = x[0:n]
    let total = zeros(3)
    total = total + head * 2.0
    total = x[1:n + 1]
    (head, total) = (total, x[0:n])
    return head + total
}
"""


def test_annotations_and_rebindings_left_to_the_run_are_checked_when_compiling() -> None:
    """`x[0:n]` has a size the checker cannot know; the shapes a specialisation sees settle its checks."""
    expected, actual, report = on_both(KEPT_TYPES, "f", f32(4), 3)
    assert verdict(report, "f") == "compiled", report
    assert_close(actual, expected)
    interpreted, compiled, report = failures(KEPT_TYPES, "f", f32(4), 2)
    assert verdict(report, "f").startswith("interpreted: a value does not match its declared type"), report
    assert (
        shown(compiled)
        == shown(interpreted)
        == (
            "E0520",
            "`head` does not match its annotation: expected f32[3], found f32[2] (axis 0 has 2, not 3)",
            3,
            15,
        )
    )


def test_a_check_against_size_names_binds_them_from_the_call_when_compiling() -> None:
    source = "fn g(x: f32[N], n: i64) -> f32 {\n    let y = x\n    y = x[0:n] * 2.0\n    return sum(y)\n}\n"
    expected, actual, report = on_both(source, "g", f32(3), 3)
    assert verdict(report, "g") == "compiled", report
    assert_close(actual, expected)
    interpreted, compiled, report = failures(source, "g", f32(3), 2)
    assert verdict(report, "g").startswith("interpreted: a value does not match its declared type"), report
    assert shown(compiled) == shown(interpreted)
    assert shown(interpreted)[:2] == (
        "E0520",
        "`y` cannot be rebound to a value of another type: expected f32[N] with `N` = 3, found f32[2] (axis 0 has 2)",
    )


def test_what_cannot_be_compiled_runs_interpreted_and_says_why() -> None:
    source = "fn f(x: f32[3]) -> f32[3] {\n    print(x)\n    return x + randn(3, seed=1)\n}"
    expected, actual, report = on_both(source, "f", f32(3))
    assert re.match(r"interpreted: it calls `print`", verdict(report, "f"))
    np.testing.assert_array_equal(actual, expected)


# ------------------------------------------------------------------ recursion: real calls of specialisations

TREE_SUM = """
fn tree_sum(x: f64[N], depth: i64) -> f64 {
    if depth == 0 {
        return sum(x)
    }
    return tree_sum(x * 0.5, depth - 1) + tree_sum(x, depth - 1)
}
"""

POWER = """
fn power(x: f32[N], n: i64) -> f32[N] {
    if n == 0 {
        return x * 0.0 + 1.0
    }
    if n % 2 == 0 {
        let h = power(x, n // 2)
        return h * h
    }
    return x * power(x, n - 1)
}
"""

MUTUAL = """
fn down(v: f64[N], n: i64) -> f64[N] {
    if n == 0 {
        return v
    }
    return up(sin(v), n - 1)
}

fn up(v: f64[N], n: i64) -> f64[N] {
    return down(v * 1.5 + 0.1, n)
}
"""

FIB_IN_A_LOOP = """
fn fib(x: f64[N], n: i64) -> f64[N] {
    if n < 2 {
        return x
    }
    return fib(x, n - 1) + fib(x * 0.5, n - 2)
}

fn many(x: f64[N], k: i64) -> f64 {
    let total = 0.0f64
    for i in 0..k {
        total += sum(fib(x, i) * x)
    }
    return total
}
"""

HALVING = """
fn halving(x: f64[N]) -> f64 {
    let n = len(x)
    if n == 1 {
        return x[0]
    }
    return halving(x[0:n // 2]) * 2.0 + halving(x[n // 2:n])
}
"""

RESULT_AFTER_THE_CALL = """
fn scaled(x: f64[A, B], n: i64) -> (f64[A, B], f64) {
    if n > 0 {
        let (y, s) = scaled(x * 2.0, n - 1)
        return (y + 1.0, s + sum(y))
    }
    return (x, 0.0f64)
}
"""


LITERAL_ARGUMENT = """
fn scaled(x: f32[N], s: f32, n: i64) -> f32[N] {
    if n == 0 {
        return x * s
    }
    return scaled(x, 2.5, n - 1) + scaled(x * s, s, n - 1)
}
"""


@pytest.mark.parametrize(
    ("source", "name", "args"),
    [
        (TREE_SUM, "tree_sum", (f64(5), 4)),
        (LITERAL_ARGUMENT, "scaled", (f32(3), np.float32(1.5), 3)),
        (POWER, "power", (f32(6), 7)),
        (POWER, "power", (f32(3), 0)),
        (MUTUAL, "down", (f64(4), 5)),
        (MUTUAL, "up", (f64(3), 2)),
        (FIB_IN_A_LOOP, "many", (f64(3), 8)),
        (HALVING, "halving", (f64(8),)),
        (HALVING, "halving", (f64(7),)),
        (RESULT_AFTER_THE_CALL, "scaled", (f64(2, 2), 3)),
    ],
)
def test_recursive_tensor_functions_are_compiled(source: str, name: str, args: tuple) -> None:
    check(source, name, *args, rtol=1e-12 if args[0].dtype == np.float64 else 1e-6)


UNANNOTATED = """
fn walk(v, n) {
    let total = zeros_like(v)
    if n > 0 {
        total = walk(tanh(v), n - 1) * 0.5
    }
    return total + v
}
"""

DTYPE_PER_DEPTH = """
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
"""


def test_an_unannotated_recursion_returning_after_its_call_is_probed_for_its_result() -> None:
    check(UNANNOTATED, "walk", f64(2, 3), 5, rtol=1e-12)


def test_a_recursion_whose_result_dtype_depends_on_an_integer_is_compiled_per_value() -> None:
    """`pw(x, 0)` returns the literal (f32 here), deeper calls `x`'s f64: compiled for the value of `n`, each
    depth's `if` is decided and each depth is a specialisation of its own."""
    expected, actual, report = on_both(DTYPE_PER_DEPTH, "pw", np.float64(1.3), 5)
    assert verdict(report, "pw") == "compiled" and "`pw`(f64, i64 = 5) compiled" in report, report
    assert_close(actual, expected, rtol=1e-12)


def test_grad_of_a_function_calling_a_recursive_tensor_function_is_compiled() -> None:
    source = (
        POWER.replace("f32", "f64")
        + MUTUAL
        + """
fn loss(x: f64[N], w: f64[N]) -> f64 {
    return sum(power(x * w, 5) + down(x, 3) * w) + tree_sum(x, 2)
}

fn g(x: f64[N], w: f64[N]) -> (f64[N], f64[N]) {
    return grad(loss, wrt=(0, 1))(x, w)
}
"""
        + TREE_SUM
    )
    x, w = f64(4) * 0.5, f64(4, seed=1) * 0.5
    check(source, "g", x, w, rtol=1e-12, atol=1e-12)
    # the interpreter's gradient (the reference compared to) against central differences
    loaded = pipeline.load("case.dl", source)
    types = (pipeline.value_type(x), pipeline.value_type(w))
    _, typed = pipeline.prepare(loaded, (("g", types), ("loss", types)))
    gradient = call_on(typed, "g", [x, w])[0]

    def loss(a: np.ndarray) -> float:
        return float(call_on(typed, "loss", [a, w]))

    step = 1e-6
    numeric = [(loss(x + step * e) - loss(x - step * e)) / (2 * step) for e in np.eye(4)]
    np.testing.assert_allclose(gradient, numeric, rtol=1e-6, atol=1e-8)


def test_a_function_inlined_twice_names_each_temporary_once() -> None:
    """Its variable `c` becomes `c` and `c.1`; reading `c` twice must not name a temporary `c.1` again
    (an IR temporary is the result of exactly one instruction)."""
    source = """
fn helper(v: f64[3], k: i64) -> f64[3] {
    let c = 0
    while c < k {
        v = v * 2.0
        c += 1
    }
    return v
}

fn f(x: f64[3], k: i64) -> f64[3] {
    return helper(x, k) + helper(x * 0.5, k)
}
"""
    check(source, "f", f64(3), 3)
    loaded = pipeline.load("case.dl", source)
    _, typed = pipeline.prepare(loaded)
    decl = next(d for d in typed.program.modules["case.dl"].decls if getattr(d, "name", "") == "f")
    lowered = specialise(
        typed, decl, "case.dl", (ir.TensorArgument("f64", (3,)), ir.ScalarArgument("i64")), native.Structs(None)
    )
    made = [i.result.name for b in lowered.function.blocks for i in b.instructions if hasattr(i, "result")]
    assert "c.1" in made and len(made) == len(set(made)), made


def test_recursion_with_a_shape_per_depth_calls_one_specialisation_per_shape() -> None:
    loaded = pipeline.load("case.dl", HALVING)
    _, typed = pipeline.prepare(loaded, (("halving", (pipeline.value_type(f64(8)),)),))
    backend = native.compile_program(typed, cache=False)
    body = next(b for b in backend.bodies.values() if isinstance(b, native.SpecialisingBody))
    body.structs = native.Structs(None)
    lowered = specialise(typed, body.decl, "case.dl", (ir.TensorArgument("f64", (8,)),), body.structs)
    assert [f.symbol.rpartition("::")[2] for f in (lowered.function, *lowered.callees)] == [
        "halving.specialised",
        "halving.specialised.1",
        "halving.specialised.2",
        "halving.specialised.3",
    ]
    assert all(f.own_workspace is not None for f in (lowered.function, *lowered.callees))
    calls = [i for b in lowered.function.blocks for i in b.instructions if isinstance(i, ir.CallSpecialised)]
    assert [c.function.rpartition("::")[2] for c in calls] == ["halving.specialised.1"] * 2


def test_a_failure_deep_in_a_recursion_is_the_interpreters_diagnostic_with_its_call_stack() -> None:
    source = """
fn boom(x: f64[N], n: i64, k: i64) -> f64 {
    if n == 0 {
        return x[k]
    }
    return boom(x * 2.0, n - 1, k) + 1.0
}
"""
    interpreted, compiled, report = failures(source, "boom", f64(3), 3, 5)
    assert verdict(report, "boom") == "compiled", report
    assert shown(compiled) == shown(interpreted) == ("E0501", "index 5 is out of bounds for axis 0 with size 3", 4, 16)
    assert compiled.diagnostics[0].notes == interpreted.diagnostics[0].notes
    assert compiled.diagnostics[0].notes[0].count("in `boom` at fail.dl:6:12") == 3


def test_a_failure_in_a_recursion_inlined_into_its_caller_lists_every_frame() -> None:
    """`start` inlines the first call of `check_all` and of `swirl` (structs in and out); their recursive
    calls are real calls. The interpreter's call stack has a frame for the inlined call too."""
    source = """
struct Pair { a: f64[3], b: f64[3] }

fn swirl(p: Pair, n: i64) -> Pair {
    if n == 0 {
        return p
    }
    let q = swirl(Pair { a: p.b * 0.5, b: p.a + 1.0 }, n - 1)
    return Pair { a: q.a + q.b, b: q.b }
}

fn check_all(x: f64[3], n: i64) {
    assert(sum(x) < 100.0, "too big")
    if n > 0 {
        check_all(x * 2.0, n - 1)
    }
}

fn start(x: f64[3], n: i64) -> f64[3] {
    let p = swirl(Pair { a: x, b: x * 2.0 }, n)
    check_all(x, n)
    return p.a
}
"""
    check(source, "start", np.arange(3.0), 4, rtol=1e-12)
    interpreted, compiled, report = failures(source, "start", np.arange(3.0), 6)
    assert verdict(report, "start") == "compiled", report
    assert shown(compiled) == shown(interpreted) == ("E0502", "assertion failed: too big", 13, 5)
    assert compiled.diagnostics[0].notes == interpreted.diagnostics[0].notes
    assert "in `start` at fail.dl:21:5\n  in `check_all` at fail.dl:15:9" in compiled.diagnostics[0].notes[0]


def test_runaway_tensor_recursion_is_recursion_too_deep_at_the_interpreters_span() -> None:
    source = """
fn forever(x: f64[N], n: i64) -> f64 {
    return forever(x + 1.0, n + 1) * 2.0
}
"""
    interpreted, compiled, report = failures(source, "forever", f64(3), 0)
    assert verdict(report, "forever") == "compiled", report
    assert shown(compiled) == shown(interpreted) == ("E0506", "recursion too deep in `forever`", 3, 12)
    assert compiled.diagnostics[0].notes == interpreted.diagnostics[0].notes
    # the compiled code is usable again after the failure
    expected, actual, _ = on_both(TREE_SUM, "tree_sum", f64(4), 3)
    assert actual == pytest.approx(expected, rel=1e-12)


def test_ctrl_c_stops_a_long_compiled_recursion() -> None:
    """2**40 calls: each real call reads the interrupt flag Ctrl-C sets, as each compiled loop does."""
    import threading

    loaded = pipeline.load("case.dl", TREE_SUM)
    args = [f64(3), 40]
    _, typed = pipeline.prepare(loaded, (("tree_sum", tuple(pipeline.value_type(a) for a in args)),))
    backend = native.compile_program(typed, cache=False)
    done = threading.Event()

    def press_ctrl_c() -> None:
        while not done.wait(0.2):  # until the call is over (the compiled module exists once it started)
            native.interrupt_compiled_code()

    presser = threading.Thread(target=press_ctrl_c, daemon=True)
    presser.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            call_on(typed, "tree_sum", args, backend.bodies)
    finally:
        done.set()
        presser.join()
    assert verdict(backend.specialisations(), "tree_sum") == "compiled"
    assert call_on(typed, "tree_sum", [args[0], 3], backend.bodies) == pytest.approx(
        call_on(typed, "tree_sum", [args[0], 3]), rel=1e-12
    )


def test_a_recursion_needing_too_many_specialisations_stays_interpreted_and_says_why() -> None:
    source = """
fn shrink(x: f64[N], k: i64) -> f64 {
    if k == 0 {
        return sum(x)
    }
    return shrink(x[1:len(x)], k - 1) + x[0]
}
"""
    expected, actual, report = on_both(source, "shrink", f64(40), 39)
    assert "more than 32 specialisations" in verdict(report, "shrink"), report
    assert actual == expected


# ------------------------------------------------------------------ the autodiff corpus and the examples


def case_program(case):
    kind = "value_and_grad" if case.value_and_grad else "grad"
    flat = [leaf for value in case.args for leaf in leaves(value)]
    loaded = program(case.name, ("call", kind))
    program_, typed = pipeline.prepare(loaded, ((f"dl_{kind}", tuple(pipeline.value_type(a) for a in flat)),))
    return program_, typed, f"dl_{kind}", flat


def test_gradients_of_the_autodiff_corpus_agree_when_compiled() -> None:
    """Every derivative of tests/autodiff_cases.py, compiled and interpreted: the same values (f64), and
    most of them compiled (the rest say why: tapes of loops, recursion, batched products...)."""
    compiled = 0
    interpreted = {}
    for case in CASES:
        _, typed, name, flat = case_program(case)
        expected = call_on(typed, name, [copy_leaf(leaf) for leaf in flat])
        backend = native.compile_program(typed, cache=False)
        actual = call_on(typed, name, [copy_leaf(leaf) for leaf in flat], backend.bodies)
        outcome = verdict(backend.specialisations(), name)
        assert "compiler bug" not in outcome, (case.name, outcome)
        if outcome == "compiled":
            compiled += 1
        else:
            interpreted[case.name] = outcome
        assert_close(actual, expected, rtol=1e-10, atol=1e-12, where=case.name)
    # recursion, indexing by integer tensors (the `pick_` cases) and sorts included; `print` is host work, and
    # so are the random draws of `dropout` (its mask comes from the interpreter's generator)
    # and a loop over tuples that hold functions, whose adjoints (the functions) compiled code does not add
    host = [
        "dropout_through_the_mask",
        "printing_function_called_in_branch",
        "for_over_items_given_to_generic_functions",
    ]
    assert sorted(interpreted) == sorted(host), interpreted
    assert compiled == len(CASES) - len(host) >= 109


LAYER_LOOP = """
import nn

struct Linear { w: f32[I, O], b: f32[O] }

fn forward(layers: (Linear, Linear, Linear), x: f32[B, 4]) -> f32[B, 3] {
    let h: f32[B, _] = x
    for layer in layers {
        h = nn.relu(h @ layer.w + layer.b)
    }
    return h
}

fn loss(layers: (Linear, Linear, Linear), x: f32[B, 4], y: i64[B]) -> f32 {
    return nn.cross_entropy(forward(layers, x), y)
}

fn step(w1: f32[4, 8], w2: f32[8, 5], w3: f32[5, 3], x: f32[6, 4], y: i64[6]) {
    let layers = (Linear { w: w1, b: zeros(8) }, Linear { w: w2, b: zeros(5) }, Linear { w: w3, b: zeros(3) })
    let (l, g) = value_and_grad(loss)(layers, x, y)
    return (l, forward(layers, x), g[0].w, g[1].b, g[2].w)
}
"""


def test_a_loop_over_a_tuple_of_layers_is_compiled() -> None:
    """PyTorch's `for layer in self.layers`: the loop is written out, each item's block compiled where its
    values' shapes are known (`h` changes shape from layer to layer), in the forward function and in the
    derivative, which is straight-line code. (Both ran on the interpreter: the derivative's tape, and an
    assignment that changes a tensor's shape.)"""
    args = (f32(4, 8), f32(8, 5, seed=1), f32(5, 3, seed=2), f32(6, 4, seed=3), np.array([0, 2, 1, 1, 0, 2]))
    expected, actual, report = on_both(LAYER_LOOP, "step", *args)
    assert verdict(report, "step") == "compiled", report
    assert "compiler bug" not in report
    assert_close(actual, expected, rtol=1e-5)
    assert np.abs(expected[2]).sum() > 0 and np.abs(expected[4]).sum() > 0  # (relu left some gradient)


ITEMS_READ_BEFORE = """
fn f(x: f64[3], n: i64) -> f64[3] {
    let h = x * 1.0f64
    let i = 0
    while i < n {
        for s in (2.0f64, h, 0.5f64) {
            h = h * s
        }
        if sum(x) > 0.0f64 {
            for (a, b) in ((h, x), (1.0f64, h)) {
                h = h * a + b
            }
        }
        i += 1
    }
    return h
}
"""


def test_the_items_of_a_loop_over_a_tuple_are_read_when_it_starts() -> None:
    """`for s in (2.0, h, 0.5) { h = h * s }` inside a loop or an `if`, where `h` has a home its assignments
    write: the items are the values they had when the loop started (compiled, the second item read `h` as the
    first item's block had left it: found in review)."""
    expected, actual, report = on_both(ITEMS_READ_BEFORE, "f", np.array([1.0, 2.0, 3.0]), 2)
    assert verdict(report, "f") == "compiled", report
    np.testing.assert_array_equal(actual, expected)


LAYERS_WITH_AN_IF = """
struct Linear { w: f32[I, O], b: f32[O] }

fn forward(layers: (Linear, Linear, Linear), x: f32[B, 4], last: i64) -> f32[B, _] {
    let h: f32[B, _] = x
    let i = 0
    for layer in layers {
        h = h @ layer.w + layer.b
        if i < last {
            h = relu(h)
        }
        i += 1
    }
    if sum(h) > 0.0 {
        h = h * 2.0
    }
    h = h @ ones(3, 2)
    return h
}

fn run(w1: f32[4, 8], w2: f32[8, 5], w3: f32[5, 3], x: f32[6, 4], last: i64) -> f32[6, 2] {
    let layers = (Linear { w: w1, b: zeros(8) }, Linear { w: w2, b: ones(5) }, Linear { w: w3, b: zeros(3) })
    return forward(layers, x, last)
}
"""


def test_a_variable_assigned_in_an_if_takes_another_shape_after_it() -> None:
    """PyTorch's `for i, layer in enumerate(self.layers): h = layer(h); if i < last: h = relu(h)`: the `if`
    gives `h` storage of its shape, and the next layer's `h = h @ layer.w` (another shape) rebinds `h` once the
    `if` is over, as the interpreter does (compiled, it was an assignment that changes a tensor's shape)."""
    args = (f32(4, 8), f32(8, 5, seed=1), f32(5, 3, seed=2), f32(6, 4, seed=3), 2)
    expected, actual, report = on_both(LAYERS_WITH_AN_IF, "run", *args)
    assert verdict(report, "run") == "compiled", report
    assert_close(actual, expected, rtol=1e-5)


NESTED_IFS_IN_A_LAYER = """
struct Lin { w: f32[I, O] }

fn forward(x: f32[2, 4], act: bool, shift: bool, w1: f32[4, 3], w2: f32[3, 5]) -> f32 {
    let layers = (Lin { w: w1 }, Lin { w: w2 })
    let h: f32[2, _] = x
    for layer in layers {
        h = h @ layer.w
        if act {
            if shift { h = h - 0.5 }
            h = relu(h)
        }
    }
    return sum(h)
}
"""


def test_storage_written_by_nested_ifs_is_let_go_after_them() -> None:
    """An `if` inside an `if` in a layer's block: once both have ended, the next layer's `h = h @ layer.w`
    rebinds `h` (it stayed interpreted: found in review)."""
    args = (f32(2, 4), True, True, f32(4, 3, seed=1), f32(3, 5, seed=2))
    expected, actual, report = on_both(NESTED_IFS_IN_A_LAYER, "forward", *args)
    assert verdict(report, "forward") == "compiled", report
    assert_close(actual, expected, rtol=1e-5)


LATER_BRANCHES = """
fn branches(x: f32[3], c: bool, d: bool) -> f32 {
    let h: f32[_] = x
    if c { h = h * 2.0 }
    if d { h = concat((h, h), axis=0) }
    return sum(h) * 100.0 + float(len(h))
}

fn grown(x: f32[3], m: i64) -> f32 {
    let h: f32[_] = x * 1.0
    h[0] = 5.0
    for j in 0..m { h = concat((h, x), axis=0) }
    return sum(h) * 100.0 + float(len(h))
}
"""


@pytest.mark.parametrize(("name", "args"), [("branches", (True, False)), ("branches", (False, True)), ("grown", (0,))])
def test_a_variable_takes_another_shape_only_in_straight_line_code(name: str, args: tuple) -> None:
    """Storage made for an `if` (or by an element assignment) is let go for a value of another shape only in the
    straight-line code after it: in a later `if`, whose paths meet, or loop, whose iterations carry the variable,
    the function stays interpreted (compiled, a branch not taken gave its value, and a loop that never ran read
    memory never written: found in review)."""
    expected, actual, report = on_both(LATER_BRANCHES, name, f32(3), *args)
    assert verdict(report, name).startswith("interpreted: an assignment changes a tensor's shape"), report
    assert actual == expected


def test_a_tensor_grown_by_concat_in_a_loop_says_how_to_compile_it() -> None:
    """PyTorch's `outs.append(h)` then `torch.stack(outs)`, written `outs = concat((outs, ...))` in a loop:
    interpreted (the shape changes each step), with the way to write it that compiles."""
    source = """
fn run(x: f32[T, B, F], w: f32[F, F]) -> f32[_, B, F] {
    let h = zeros(B, F)
    let outs: f32[_, B, F] = zeros(0, B, F)
    for xt in x {
        h = tanh(xt + h @ w)
        outs = concat((outs, expand_dims(h, 0)))
    }
    return outs
}
"""
    expected, actual, report = on_both(source, "run", f32(3, 2, 4), f32(4, 4, seed=1))
    assert verdict(report, "run").startswith(
        "interpreted: an assignment changes a tensor's shape from [0, 2, 4] to [1, 2, 4]; a tensor grown by "
        "`concat` in a loop has another shape each step: write each step into one made before the loop"
    ), report
    assert_close(actual, expected)


def test_the_mlp_training_step_is_compiled(tmp_path: Path) -> None:
    source = (ROOT / "examples" / "train.dl").read_text()
    loaded = pipeline.load(str(ROOT / "examples" / "train.dl"), source)
    program_, typed = pipeline.prepare(loaded)
    reports: list[str] = []
    import os

    before = os.getcwd()
    os.chdir(tmp_path)
    try:
        pipeline.run(program_, ["quick"], "llvm", typed, reports.append, cache=False)
    finally:
        os.chdir(before)
    report = "\n".join(reports)
    assert verdict(report, "loss_value_and_grad") == "compiled", report
    # `adam` averages the gradients over the ranks (`allreduce_mean`): in a world of 1 that is the gradients
    # themselves, so it is compiled whole, its update inlined (tests/test_distributed.py: 2 ranks)
    assert verdict(report, "adam") == "compiled", report
    assert "compiler bug" not in report


# ------------------------------------------------------------------ random tensor programs

SHAPES = {"a": (2, 3), "b": (3,), "c": (2, 1), "s": ()}


def broadcast_of(*shapes: tuple) -> tuple:
    return tuple(np.broadcast_shapes(*shapes))


@st.composite
def tensor_functions(draw) -> str:
    """A random well-typed f64 function of tensors of broadcasting shapes ([2, 3], [3], [2, 1]) and a
    scalar: elementwise arithmetic and math, reductions over axes, a `while` and an `if` on
    data-dependent conditions, assignments to a tensor inside them; no operation that can make a nan."""

    def expression(depth: int) -> tuple[str, tuple]:
        if depth == 0 or draw(st.integers(0, 3)) == 0:
            leaf = draw(st.sampled_from(["a", "b", "c", "s", "acc", "0.5f64", "2.0f64"]))
            if leaf == "acc" and not inside:
                leaf = "a"
            return leaf, SHAPES.get(leaf, (2, 3) if leaf == "acc" else ())
        kind = draw(st.sampled_from(["op", "op", "op", "math", "where", "reduce", "max"]))
        if kind == "op":
            (lhs, p), (rhs, q) = expression(depth - 1), expression(depth - 1)
            op = draw(st.sampled_from(["+", "-", "*", "/"]))
            if op == "/":
                return f"({lhs} / (1.0 + {rhs} * {rhs}))", broadcast_of(p, q)
            return f"({lhs} {op} {rhs})", broadcast_of(p, q)
        if kind == "math":
            inner, shape = expression(depth - 1)
            function = draw(
                st.sampled_from(
                    [
                        "tanh({})",
                        "exp(-({0}) * ({0}))",
                        "sigmoid({})",
                        "relu({})",
                        "sqrt(1.0 + ({0}) * ({0}))",
                        "log(1.0 + ({0}) * ({0}))",
                        "abs({})",
                        "sin({})",
                    ]
                )
            )
            return function.format(inner), shape
        if kind == "where":
            (x, p), (y, q) = expression(depth - 1), expression(depth - 1)
            return f"where({x} > {y}, {x}, {y} * 0.5)", broadcast_of(p, q)
        if kind == "max":
            (x, p), (y, q) = expression(depth - 1), expression(depth - 1)
            return f"maximum({x}, {y})", broadcast_of(p, q)
        inner, shape = expression(depth - 1)
        if len(shape) == 2:
            choice = draw(
                st.sampled_from(
                    ["sum({}, axis=0)", "mean({}, axis=1, keepdims=true)", "max({})", "softmax({}, axis=1)"]
                )
            )
            reduced = {"sum": shape[1:], "mean": (2, 1), "max": (), "softmax": shape}[choice.split("(")[0]]
            return choice.format(inner), reduced
        return f"sum({inner})", ()

    def row(depth: int) -> str:
        text, shape = expression(depth)
        return text if shape in ((3,), ()) else "b"

    def full(depth: int) -> str:
        text, shape = expression(depth)
        return text if shape == (2, 3) else f"({text} + zeros(2, 3, dtype=f64))"

    inside = False
    first = full(2)
    inside = True
    lines = [
        f"let acc = {first}",
        "let trips = 0",
        f"while trips < {draw(st.integers(0, 4))} and sum(abs(acc)) < 1e6 {{",
        f"    acc = {full(3)}",
        f"    if mean(acc) > {draw(st.sampled_from(['0.0', '0.5', '-0.5']))} {{",
        f"        acc = acc * 0.5 - {full(1)}",
        "    } else {",
        f"        acc[0] = {row(1)} + zeros(3, dtype=f64)",
        "    }",
        "    trips += 1",
        "}",
        f"return acc + {full(2)}",
    ]
    body = "\n    ".join(lines)
    return f"fn f(a: f64[2, 3], b: f64[3], c: f64[2, 1], s: f64) -> f64[2, 3] {{\n    {body}\n}}\n"


@settings(max_examples=30, deadline=None)
@given(source=tensor_functions(), seed=st.integers(0, 3))
def test_random_tensor_functions_agree(source: str, seed: int) -> None:
    args = (f64(2, 3, seed=seed), f64(3, seed=seed + 1), f64(2, 1, seed=seed + 2), np.float64(0.3 * seed - 0.4))
    expected, actual, report = on_both(source, "f", *args)
    assert verdict(report, "f") == "compiled", (source, report)
    assert_close(actual, expected, rtol=1e-9, atol=1e-12, where=source)


# ------------------------------------------------------------------ aliasing and effects (found in review)

A3 = np.arange(3, dtype=np.float32)
ALIASING = {
    "a callee assigning its parameter leaves the caller's loop variable alone": (
        "fn g(x: f32[3]) -> f32[3] {\n    x = x * 2.0\n    x[0] = 100.0\n    return x\n}\n"
        "fn f(a: f32[3], n: i64) -> f32[3] {\n    let h = a\n    for i in 0..n { h = h + 1.0 }\n"
        "    let z = g(h)\n    return z + h\n}\n",
        (A3, 2),
    ),
    "a slice of a loop variable passed to a callee that assigns it": (
        "fn g(x: f32[2, 3]) -> f32[2, 3] {\n    x = x * 2.0\n    return x\n}\n"
        "fn f(a: f32[4, 3], n: i64) -> f32[4, 3] {\n    let h = a\n    for i in 0..n { h = h + 1.0 }\n"
        "    let z = g(h[1:3])\n    return h + sum(z)\n}\n",
        (np.arange(12, dtype=np.float32).reshape(4, 3), 1),
    ),
    "a tuple variable swapped in a loop": (
        "fn f(a: f32[3], b: f32[3], n: i64) -> (f32[3], f32[3]) {\n    let t = (a, b)\n"
        "    for i in 0..n { t = (t[1], t[0] + t[1]) }\n    return t\n}\n",
        (A3, A3 + 10, 3),
    ),
    "h = h + h @ w does not accumulate into its own operand": (
        # (at this size OpenBLAS writes its output before it has read all of an aliased input)
        "fn f(h0: f32[700, 700], w: f32[700, 700], n: i64) -> f32[700, 700] {\n    let h = h0\n"
        "    for i in 0..n { h = h + h @ w\n        h = h + w @ h }\n    return h\n}\n",
        (f32(700, 700) * 0.03, f32(700, 700, seed=1) * 0.03, 1),
    ),
    "a loop variable rebuilt from a reversed view of itself": (
        "fn f(a: f32[3, 3], n: i64) -> f32[3, 3] {\n    let s = a\n"
        "    for i in 0..n {\n        s = s[::-1] + s\n        s = transpose(s) * 2.0 + 1.0\n    }\n    return s\n}\n",
        (np.arange(9, dtype=np.float32).reshape(3, 3), 2),
    ),
    "views of a variable keep the value it had when they were taken": (
        "struct P { v: f32[3], w: f32[3] }\n"
        "fn f(a: f32[2, 3], n: i64) -> f32[3] {\n    let h = a\n"
        "    let total = zeros(3)\n"
        "    for i in 0..n {\n        let first = h[0]\n        let whole = h\n"
        "        let p = P { v: h[1], w: first }\n"
        "        let scaled = fn(k) => first * k\n        h = h * 2.0 + 1.0\n        h[1] = h[0] + 5.0\n"
        "        for j in 0..2 {\n            let before = h[1]\n            h = h - 0.5\n"
        "            total = total + before + first + p.v + p.w + whole[0] + scaled(3.0)\n        }\n    }\n"
        "    return total + h[0] + h[1]\n}\n",
        (np.arange(6, dtype=np.float32).reshape(2, 3), 3),
    ),
    "a name bound to a loop variable is assigned without changing it": (
        "fn f(a: f32[3], n: i64) -> f32[3] {\n    let h = a\n    let out = zeros(3)\n"
        "    for i in 0..n {\n        let y = h\n        y = y + 1.0\n        y[0] = 7.0\n"
        "        out = out + y\n        h = h * 2.0\n    }\n    return out + h\n}\n",
        (A3, 3),
    ),
    "a value computed twice is computed once, unless what it reads changed between": (
        "fn f(x: f32[4, 4], n: i64) -> f32[4, 4] {\n    let h = x\n    let out = zeros(4, 4)\n"
        "    for i in 0..n {\n        let a = sigmoid(h)\n        out = out + a * a\n        h = h + 1.0\n"
        "        let b = sigmoid(h)\n        out = out + b * b\n        let c = sigmoid(h)\n"
        "        out = out + c * c + b\n    }\n    return out\n}\n",
        (f32(4, 4), 3),
    ),
    "parameters named like the compiler's temporaries": (
        "fn g(x: f32[4, 4], product: f32[4, 4]) -> f32[4, 4] {\n    return (x @ product) @ product + product\n}\n"
        "fn f(t: f32[4, 4], n: i64) -> f32[4, 4] {\n    let u = tanh(t) * 2.0\n    let a = t * 2.0\n"
        "    for i in 0..n { a = a + t }\n    return g(u @ u + t, a) + sum(u * u)\n}\n",
        (f32(4, 4) * 0.3, 2),
    ),
    "strings among the arguments take no slot": (
        "fn f(x: f32[3], s: str, y: f32[3], t: (str, f32)) -> f32[3] {\n    return x + y * 10.0 * t[1]\n}\n",
        (A3, "hi", A3 + 1, ("there", np.float32(2.0))),
    ),
}


@pytest.mark.parametrize("name", sorted(ALIASING))
def test_aliasing_and_arguments(name: str) -> None:
    source, args = ALIASING[name]
    check(source, "f", *args, rtol=1e-5, atol=1e-5)


def test_an_unused_gather_still_checks_its_indices() -> None:
    source = (
        "fn f(x: f32[3], i: i64[2]) -> f32[3] {\n    let y = x[i]\n    let z = gather(x, i)\n    return x * 2.0\n}\n"
    )
    interpreted, compiled, report = failures(source, "f", A3, np.array([0, 5]))
    assert verdict(report, "f") == "compiled", report
    assert shown(compiled) == shown(interpreted)


def test_integer_math_built_ins() -> None:
    source = (
        "fn f(x: i64[20], k: i64) -> (i64[20], i64) {\n"
        "    return (abs(x) + maximum(x, 3) - minimum(x, 1) + relu(x), abs(k) + max(abs(x)))\n}\n"
    )
    check(source, "f", np.arange(20) - 10, -7)


def test_the_char_rnn_gradient_agrees() -> None:
    """value_and_grad of examples/charrnn.dl's chunk loss (an LSTM unrolled by a DL loop, its states on a
    tape), compiled, against the interpreter: the same to f32 rounding."""
    source = (ROOT / "examples" / "charrnn.dl").read_text() + (
        "\nfn probe(x: i64[16, 4], y: i64[16, 4]) -> (f32, CharRNN) {\n"
        "    let m = init()\n    return value_and_grad(chunk_loss)(m, x, y, zeros(4, HIDDEN), zeros(4, HIDDEN))\n}\n"
    )
    codes = np.frombuffer((ROOT / "README.md").read_bytes()[:65], dtype=np.uint8).astype(np.int64)
    x, y = codes[:64].reshape(16, 4), codes[1:65].reshape(16, 4)
    expected, actual, report = on_both(source, "probe", x, y, path=str(ROOT / "examples" / "charrnn.dl"))
    # (the generated function is `chunk_loss_value_and_grad_2`: main has a value_and_grad of its own; `init`
    # draws with `randn`, compiled too, so `probe` compiles whole, the gradient inlined in it)
    pattern = r"`(probe|chunk_loss_value_and_grad\w*)`\((CharRNN|i64).*\) compiled$"
    assert re.search(pattern, report, re.MULTILINE), report
    assert abs(actual[0] - expected[0]) <= 1e-5 * abs(expected[0])
    for got, want in zip(leaves_of(actual[1]), leaves_of(expected[1]), strict=True):
        scale = float(np.max(np.abs(want))) or 1.0
        assert float(np.max(np.abs(got - want))) <= 1e-5 * scale


def leaves_of(value) -> list:
    if isinstance(value, StructValue):
        return [leaf for item in value.values for leaf in leaves_of(item)]
    return [value]


@pytest.mark.parametrize(
    ("window", "image", "kernel"),
    [
        ("conv2d(x, w, stride=1, padding=1)", (2, 3, 6, 5), (4, 3, 3, 3)),
        ("conv2d(x, w, stride=2, padding=0)", (1, 2, 7, 7), (3, 2, 3, 2)),
        ("max_pool2d(x, 2) * sum(w)", (2, 3, 6, 6), (1,)),
        ("max_pool2d(x, 3, stride=2, padding=1) * sum(w)", (1, 2, 7, 5), (1,)),
    ],
)
def test_convolution_and_pooling_and_their_gradients(window: str, image: tuple, kernel: tuple) -> None:
    """conv2d and max_pool2d (im2col and gemm, windows as strided views), their values and the gradient
    helpers grad writes with (conv2d_input_grad, conv2d_weight_grad, max_pool2d_grad), compiled."""
    source = (
        f"fn f(x, w) {{ return sum({window} * {window}) }}\n"
        f"fn value(x, w) {{ return {window} }}\n"
        "fn derivative(x, w) { return grad(f, wrt=(0, 1))(x, w) }\n"
    )
    x, w = f32(*image), f32(*kernel, seed=1)
    check(source, "value", x, w, rtol=1e-5, atol=1e-5)
    check(source, "derivative", x, w, rtol=1e-4, atol=1e-4)


def test_max_pool2d_gather() -> None:
    source = (
        "fn f(x, v) {\n    let wide = max_pool2d_gather(x, x, 3, stride=1, padding=1)\n"
        "    return max_pool2d_gather(v, x, 2) + wide[:, :, 0:3, 0:3]\n}\n"
    )
    check(source, "f", f32(2, 3, 6, 6), f32(2, 3, 6, 6, seed=1))


def test_arguments_that_are_not_contiguous_are_passed_as_copies() -> None:
    source = "fn f(a: f32[3, 4], b: f32[4], n: i64) -> f32[3, 4] {\n    return a * b + float(n)\n}\n"
    wide = f32(4, 6)
    check(source, "f", wide.T[1:4], wide[0, ::-1][:4].copy()[::-1][::1], 2)
    check(source, "f", np.asfortranarray(f32(3, 4)), f32(8)[::2], 3)


def test_buffers_not_in_use_at_once_share_the_workspace() -> None:
    """Temporaries of one iteration are made anew by each: they share memory with one another's
    successors; the loop variable's storage lives through the loop. The result is unchanged."""
    source = (
        "fn f(x: f32[64, 64], n: i64) -> f32[64, 64] {\n    let h = x\n    for i in 0..n {\n"
        "        let a = tanh(h @ x)\n        let b = sigmoid(a @ x) * a\n        let c = exp(-(b @ x) * (b @ x))\n"
        "        h = h + c @ x * 0.01\n    }\n    return h\n}\n"
    )
    check(source, "f", f32(64, 64) * 0.1, 3, rtol=1e-5, atol=1e-6)
    lowered = lowered_for(source, "pack.dl", "f", f32(64, 64), 3)
    total = sum(b.size * 4 for b in lowered.function.buffers if b.slot == 0)
    assert lowered.workspace < total * 0.75, (lowered.workspace, total)


def test_the_same_loop_over_other_buffers_is_one_function() -> None:
    """Two layers of one shape (a model's twin blocks, or Adam's update of leaves of one shape) make the same
    loop nest over other buffers: the module holds it once, called for each, kept out of its callers."""
    source = (
        "fn f(x: f32[32, 48], y: f32[32, 48], w: f32[48, 16]) -> f32[32, 16] {\n"
        "    let a = tanh(x * 2.0 + 1.0)\n    let b = tanh(y * 2.0 + 1.0)\n    let c = tanh(x * 3.0)\n"
        "    return a @ w + b @ w + c @ w\n}\n"
    )
    check(source, "f", f32(32, 48), f32(32, 48, seed=1), f32(48, 16, seed=2), rtol=1e-5, atol=1e-5)
    text = llvm_text(lowered_for(source, "twins.dl", "f", f32(32, 48), f32(32, 48, seed=1), f32(48, 16, seed=2)))
    loops = re.findall(r'define void (@"dl\.loop\.[0-9a-f]+")\(.*\) noinline', text)
    calls = {loop: text.count(f"call void {loop}(") for loop in loops}
    assert sorted(calls.values())[-2:] == [1, 2], calls  # tanh(_ * 2.0 + 1.0) twice, tanh(x * 3.0) once


def test_a_flat_loop_is_one_function_for_every_length() -> None:
    """An elementwise fill that reads each buffer at the element it writes is a loop over the elements, of a
    length the function takes: the update of a [37, 5] weight, a [37] bias and a [3] bias is one function,
    called with 185, 37 and 3, and each length's leftover elements (not a multiple of a vector) are right."""
    source = (
        "fn f(w: f32[37, 5], b: f32[37], c: f32[3],\n"
        "     g: f32[37, 5], h: f32[37], k: f32[3]) -> (f32[37, 5], f32[37], f32[3]) {\n"
        "    return (w - 0.5 * sqrt(g * g + 1.0), b - 0.5 * sqrt(h * h + 1.0), c - 0.5 * sqrt(k * k + 1.0))\n}\n"
    )
    args = (f32(37, 5), f32(37, seed=1), f32(3, seed=2), f32(37, 5, seed=3), f32(37, seed=4), f32(3, seed=5))
    check(source, "f", *args, rtol=1e-6, atol=1e-6)
    text = llvm_text(lowered_for(source, "flat.dl", "f", *args))
    flat = re.findall(r'define void (@"dl\.loop\.[0-9a-f]+")\(.*i64 %"length"\) noinline', text)
    assert len(flat) == 1, text
    lengths = sorted(int(n) for n in re.findall(rf"call void {re.escape(flat[0])}\(.*, i64 (\d+)\)", text))
    assert lengths == [3, 37, 185]


LARGE_FUNCTION_CASES = {
    "loop": (
        "fn f(h: f32[4, 8], w: f32[8, 8], steps: i64) -> (f32[4, 8], i64) {\n    let taken = 0\n"
        "    for t in 0..steps {\n        h = tanh(h @ w + 0.1)\n"
        "        if sum(h) > 0.0 { h = h * 0.5 } else { h = -h }\n"
        "        taken += 1\n        if mean(abs(h)) < 0.01 { break }\n    }\n    return (h, taken)\n}\n",
        (f32(4, 8), f32(8, 8, seed=1) * 0.5, 7),
        False,  # it loops itself: unoptimised, its loop would run slower
    ),
    "gather": (
        "fn f(x: f32[5, 3], i: i64[4]) -> (f32[4, 3], f32[5, 3]) {\n"
        "    let rows = gather(x, i, axis=0)\n    return (rows * 2.0, scatter_add(zeros_like(x), i, rows))\n}\n",
        (f32(5, 3), np.array([4, 0, -1, 2])),
        True,
    ),
    "grad": (
        "fn loss(w: f32[3, 3], x: f32[2, 3]) -> f32 {\n    return sum(tanh(x @ w) * tanh(x @ w))\n}\n"
        "fn f(w: f32[3, 3], x: f32[2, 3]) -> f32[3, 3] {\n    return grad(loss)(w, x)\n}\n",
        (f32(3, 3), f32(2, 3, seed=1)),
        True,
    ),
}


@pytest.mark.parametrize("case", LARGE_FUNCTION_CASES)
def test_a_function_compiled_without_optimisation_computes_the_same(case: str, monkeypatch) -> None:
    """A specialised function past `LARGE_FUNCTION` instructions (a whole training step) is compiled `optnone`
    unless it loops itself: forced here on small ones (branches, gathers, scatters, gradients) it still agrees."""
    from dl.codegen import llvm

    monkeypatch.setattr(llvm, "LARGE_FUNCTION", 0)
    source, args, unoptimised = LARGE_FUNCTION_CASES[case]
    check(source, "f", *args, rtol=1e-5, atol=1e-6)
    text = llvm_text(lowered_for(source, "large.dl", "f", *args))
    head = re.search(r'define void @"large.dl::f.specialised"\(i8\*\* %"slots"\)(.*)', text)
    assert head is not None and ({"noinline", "optnone"} <= set(head.group(1).split())) == unoptimised


def test_an_unoptimised_function_is_a_second_object_and_both_come_back_from_the_cache(tmp_path, monkeypatch) -> None:
    """The `optnone` functions are compiled apart, by a target machine that does not optimise (FastISel), into an
    object of their own beside the rest; the cache keeps every object in one entry and gives them all back."""
    from dl.codegen import cache as compile_cache
    from dl.codegen import llvm

    monkeypatch.setattr(llvm, "LARGE_FUNCTION", 0)
    made = []
    making = llvm.module_parts
    monkeypatch.setattr(llvm, "module_parts", lambda *args: made.append(making(*args)) or made[-1])
    source, args, _ = LARGE_FUNCTION_CASES["gather"]
    lowered = lowered_for(source, "large.dl", "f", *args)
    functions = [lowered.function, *lowered.callees]
    target, vectors = native.tensor_target()
    first = llvm.compile_functions(functions, target, tmp_path, vectors, speed=2)
    [parts] = [[part for group in groups for part in group] for groups in made]
    [unoptimised] = [part for part in parts if part.pipeline == llvm.UNOPTIMISED]
    assert unoptimised.machine is not target  # the rest (its loops, unless an earlier test loaded them): apart
    assert [f.name for f in unoptimised.defined] == [lowered.function.symbol]
    (entry,) = (tmp_path / "llvm").glob("*.o")
    stored = llvm.entry_parts(compile_cache.read_entry(entry, compile_cache.MAGIC))
    assert stored is not None and len(stored.objects) == len(parts)
    target, vectors = native.tensor_target()
    again = llvm.compile_functions(functions, target, tmp_path, vectors, speed=2)
    assert (first.from_cache, again.from_cache) == (False, True)
    assert set(again.addresses) == set(first.addresses) and all(again.addresses.values())


def test_a_cut_short_object_list_is_not_one() -> None:
    from dl.codegen import llvm

    objects = [b"first object", b"second"]
    assert llvm.unpacked(llvm.packed(objects)) == objects
    assert llvm.unpacked(llvm.packed(objects)[:-1]) is None  # the last object cut short
    assert llvm.unpacked(b"") is None


def test_negative_zero_is_not_zero_to_the_compiler() -> None:
    """`x * 0.0` and `x * -0.0` are different loops (their reciprocals are +inf and -inf): neither the optimiser
    (`computed_once`) nor the module's one-function-per-loop may take one for the other."""
    source = (
        "fn f(x: f32[4, 8]) -> (f32[4, 8], f32[4, 8], f32[4, 8], f32[4, 8]) {\n"
        "    let p = abs(x) * 0.0\n    let q = abs(x) * -0.0\n"
        "    return (1.0 / (abs(x) * 0.0), 1.0 / (abs(x) * -0.0), 1.0 / p, 1.0 / q)\n}\n"
    )
    expected, actual, report = on_both(source, "f", f32(4, 8))
    assert verdict(report, "f") == "compiled", report
    for want, got in zip(expected, actual, strict=True):
        np.testing.assert_array_equal(got, want)
    assert np.all(actual[1] == -np.inf) and np.all(actual[3] == -np.inf)


def test_weight_gradients_accumulate_in_their_products() -> None:
    """The gradient of a cell called in a loop: each step's weight gradients (`transpose(d) @ x` of
    the `_bwd` function's zeroed struct, added to the total by `tree_add`) are products that add into
    the total (gemm with beta = 1), every field of them, with no loop adding a product."""
    from dl.codegen import ir
    from dl.codegen.native import Structs, flatten

    source = (
        "struct Cell { w_ih: f32[12, 4], w_hh: f32[12, 3] }\n"
        "fn cell(x: f32[B, 4], h: f32[B, 3], p: Cell) -> f32[B, 3] {\n"
        "    let gates = x @ transpose(p.w_ih) + h @ transpose(p.w_hh)\n"
        "    return tanh(gates[:, 0:3]) * sigmoid(gates[:, 3:6]) + gates[:, 6:9] * gates[:, 9:12]\n}\n"
        "fn loss(p: Cell, xs: f32[T, B, 4], h0: f32[B, 3]) -> f32 {\n    let h = h0\n"
        "    for t in 0..len(xs) {\n        h = cell(xs[t], h, p)\n    }\n    return sum(h * h)\n}\n"
        "fn g(p: Cell, xs: f32[T, B, 4], h0: f32[B, 3]) -> Cell { return grad(loss)(p, xs, h0) }\n"
    )
    loaded = pipeline.load("cell.dl", source)
    program_, typed = pipeline.prepare(loaded)
    state = interpreter.compile_program(program_, typed, None).states["cell.dl"]
    p = StructValue(state.structs["Cell"], (f32(12, 4) * 0.5, f32(12, 3) * 0.5))
    check(source, "g", p, f32(5, 2, 4), f32(2, 3))
    decl = next(d for d in program_.modules["cell.dl"].decls if getattr(d, "name", "") == "g")
    structs = Structs(lambda path, name: state.structs.get(name))  # the step's gradient is a `Cell { ... }`
    layout = [flatten(value, [], structs.seen) for value in (p, f32(5, 2, 4), f32(2, 3))]
    lowered = specialise(typed, decl, "cell.dl", tuple(layout), structs)
    products = [i for b in lowered.function.blocks for i in b.instructions if isinstance(i, ir.MatMul)]
    into_total = [i for i in products if i.accumulate]
    assert {i.out.shape for i in into_total} == {(12, 4), (12, 3)}, products


@settings(max_examples=20, deadline=None)
@given(source=tensor_functions(), seed=st.integers(0, 3))
def test_gradients_of_random_tensor_functions_agree(source: str, seed: int) -> None:
    """grad of the random functions above (their loops' states on tapes), compiled and interpreted."""
    source += (
        "fn loss(a: f64[2, 3], b: f64[3], c: f64[2, 1], s: f64) -> f64 { return sum(f(a, b, c, s) * a) }\n"
        "fn g(a: f64[2, 3], b: f64[3], c: f64[2, 1], s: f64) { return grad(loss, wrt=(0, 1, 2))(a, b, c, s) }\n"
    )
    args = (f64(2, 3, seed=seed), f64(3, seed=seed + 1), f64(2, 1, seed=seed + 2), np.float64(0.3 * seed - 0.4))
    expected, actual, report = on_both(source, "g", *args)
    assert verdict(report, "g") == "compiled", (source, report)
    assert_close(actual, expected, rtol=1e-8, atol=1e-10, where=source)


def test_tree_dot_and_gradient_clipping() -> None:
    source = (
        "import optim\nstruct P { w: f32[3, 4], b: f32[4] }\n"
        "fn f(w: f32[3, 4], b: f32[4], g: f32[3, 4], h: f32[4]) {\n"
        "    let p = P { w: w, b: b }\n    let d = P { w: g, b: h }\n"
        # clip_by_global_norm itself averages over the ranks first (interpreted); the clipping is this
        "    let clipped = optim.scale_to_norm(d, 0.5, optim.global_norm(d)).w\n"
        "    return (optim.global_norm(d), tree_dot(p, d), clipped, tree_dot((w, 2.0), (g, 3.0)))\n}\n"
    )
    check(source, "f", f32(3, 4), f32(4, seed=1), f32(3, 4, seed=2), f32(4, seed=3))


def test_floor_division_and_remainder_of_tensors_match_numpy_exactly() -> None:
    """`//` and `%` on tensors: numpy's floor division and remainder, signs of zeros, inf and nan
    included; an integer zero divisor fails as interpreted."""
    values = np.array([-7.5, -3.0, -2.0, -0.5, -0.0, 0.0, 0.5, 1.0, 2.0, 3.25, 7.5, 1e-8, -1e8, np.inf])
    x, y = np.meshgrid(values, values)
    a, b = np.meshgrid(np.arange(-9, 10), np.array([-7, -3, -2, -1, 1, 2, 5]))
    source = "fn f(x: f64[n, m], y: f64[n, m], a: i64[k, j], b: i64[k, j]) { return (x // y, x % y, a // b, a % b) }\n"
    with np.errstate(all="ignore"):
        expected, actual, report = on_both(source, "f", x.copy(), y.copy(), a.copy(), b.copy())
    assert verdict(report, "f") == "compiled", report
    for got, want in zip(actual, expected, strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    interpreted, compiled, _ = failures(source, "f", x, y, a, np.where(b == 5, 0, b))
    assert shown(compiled) == shown(interpreted)


def test_an_integer_a_shape_depends_on_is_compiled_in() -> None:
    """`zeros(n)`, `arange(n)`, `x[0:n]` with `n` a parameter: the function is compiled for each value of
    `n` it is called with (as jit's static arguments), and says so."""
    source = (
        "fn f(n: i64, x: f32[8], k: i64) -> f32[_] {\n"
        "    return zeros(n) + float(arange(n)) * x[0:n] + float(k)\n}\n"
        "fn main() {\n    print(f(3, ones(8), 1), f(5, ones(8), 2), f(3, ones(8), 7))\n}\n"
    )
    expected, actual, report = on_both(source, "f", 3, f32(8), 1)
    assert verdict(report, "f") == "compiled", report
    assert "`f`(i64 = 3, f32[8], i64) compiled" in report
    assert_close(actual, expected)


HELPERS = """
fn early(v: f64[3, 3], n: i64) -> f64[3, 3] {
    let w = v
    for i in 0..n {
        w[0] = w[1] * 0.5 + w[0]
        if sum(w) > 3.0 { return w }
        w = tanh(w) + v * 0.1
    }
    return w
}
fn rotate(p: f64[3, 3], q: f64[3, 3]) -> (f64[3, 3], f64[3, 3]) {
    let s = (p, q)
    s = (s[1] * 0.5, s[0] + tanh(s[1]))
    return s
}
"""


@st.composite
def imperative_functions(draw) -> str:
    """Random statement sequences over three f64[3, 3] variables that alias one another: `let` of a
    variable or an expression, assignments, element and slice assignments, `if`/`else`, `for` with
    `break`/`continue`, calls of functions with early returns and tuple variables, gathers, products."""
    counter = [0]

    def expression(names: list[str], depth: int = 2) -> str:
        if depth == 0 or draw(st.integers(0, 9)) < 3:
            return draw(st.sampled_from([*names, "a"]))
        inner = expression(names, depth - 1)
        kind = draw(st.integers(0, 6))
        if kind == 0:
            return f"tanh({inner} + {expression(names, depth - 1)})"
        if kind == 1:
            return f"({inner} * 0.5 - {expression(names, depth - 1)} * 0.25)"
        if kind == 2:
            return f"exp(-({inner}) * ({inner}))"
        if kind == 3:
            return f"gather({inner}, idx, axis=0)"
        if kind == 4:
            return draw(st.sampled_from([f"({inner} @ m)", f"early({inner}, n)", f"rotate({inner}, a)[1]"]))
        if kind == 5:
            return f"(sum({inner}, axis=0, keepdims=true) * 0.1 + {expression(names, depth - 1)})"
        return f"where({inner} > 0.0, {inner}, {expression(names, depth - 1)})"

    def block(names: list[str], depth: int, in_loop: bool) -> list[str]:
        lines: list[str] = []
        local = list(names)
        for _ in range(draw(st.integers(1, 4))):
            kind = draw(st.integers(0, 9))
            target = draw(st.sampled_from(local))
            if kind == 0:
                counter[0] += 1
                name = f"v{counter[0]}"
                value = draw(st.sampled_from(local)) if draw(st.booleans()) else expression(local)
                lines.append(f"let {name} = {value}")
                local.append(name)
            elif kind in (1, 2):
                lines.append(f"{target} = {expression(local)}")
            elif kind == 3:
                row, other = draw(st.integers(0, 2)), draw(st.integers(0, 2))
                lines.append(f"{target}[{row}] = {expression(local)}[{other}] * 0.5")
            elif kind == 4:
                lines.append(f"{target}[:, {draw(st.integers(0, 1))}:{draw(st.integers(2, 3))}] += 0.5")
            elif kind == 5 and depth < 2:
                condition = f"sum({draw(st.sampled_from(local))}) > {draw(st.sampled_from(['0.0', '1.0', '-1.0']))}"
                lines += [f"if {condition} {{", *("    " + line for line in block(local, depth + 1, in_loop))]
                lines += ["} else {", *("    " + line for line in block(local, depth + 1, in_loop)), "}"]
            elif kind == 6 and depth < 2:
                counter[0] += 1
                lines += [
                    f"for i{counter[0]} in 0..n {{",
                    *("    " + line for line in block(local, depth + 1, True)),
                    "}",
                ]
            elif kind == 7 and in_loop:
                jump = draw(st.sampled_from(["break", "continue"]))
                lines.append(f"if sum({draw(st.sampled_from(local))}) > 2.0 {{ {jump} }}")
            else:
                shared = expression(local)
                lines.append(f"{target} = {shared} + {shared}")
        return lines

    body = ["let h = a * 1.0", "let y = h", "let z = tanh(a)", *block(["h", "y", "z"], 0, False)]
    body.append("return h + y * 2.0 + z * 3.0")
    statements = "\n    ".join(body)
    return HELPERS + f"fn f(a: f64[3, 3], m: f64[3, 3], idx: i64[3], n: i64) -> f64[3, 3] {{\n    {statements}\n}}\n"


@settings(max_examples=40, deadline=None)
@given(source=imperative_functions())
def test_random_imperative_functions_with_aliases_agree(source: str) -> None:
    a, m = f64(3, 3), f64(3, 3, seed=1) * 0.5
    expected, actual, report = on_both(source, "f", a, m, np.array([2, -1, 0]), 3)
    assert verdict(report, "f") == "compiled", (source, report)
    assert_close(actual, expected, rtol=1e-9, atol=1e-9, where=source)


def interrupted_run(program: Path) -> tuple[list[str], int, str]:
    """`dlrun --backend llvm PROGRAM` in a process of its own, sent Ctrl-C (SIGINT) half a second after it has
    printed its second line, "started": its first two lines, its exit status and its stderr."""
    import os
    import signal
    import subprocess
    import time

    dlrun = Path(sys.executable).parent / "dlrun"
    environment = {**os.environ, "PYTHONUNBUFFERED": "1"}
    child = subprocess.Popen(
        [str(dlrun), "--backend", "llvm", "--no-cache", str(program)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
    )
    try:
        lines = [child.stdout.readline(), child.stdout.readline()]
        if lines[1] == "started\n":
            time.sleep(0.5)
            child.send_signal(signal.SIGINT)
        else:  # it did not get to its long loop: the test fails on `lines`, at once
            child.kill()
        _, err = child.communicate(timeout=30)
    finally:
        child.kill()
    return lines, child.returncode, err


def test_ctrl_c_stops_a_compiled_loop(tmp_path: Path) -> None:
    """Ctrl-C reaches compiled loops (they poll a flag at each iteration): the run stops at once, as on
    the interpreter, instead of the loop running on to its end (or the process crashing at exit)."""
    program = tmp_path / "long.dl"
    program.write_text(
        "fn spin(x: f32[64, 64], n: i64) -> f32[64, 64] {\n    let h = x\n"
        "    for i in 0..n { h = tanh(h @ x) }\n    return h\n}\n"
        'fn main() {\n    print(sum(spin(ones(64, 64) * 0.01, 1)))\n    print("started")\n'
        "    print(sum(spin(ones(64, 64) * 0.01, 100000000)))\n}\n"
    )
    lines, status, err = interrupted_run(program)
    assert lines[1] == "started\n", lines
    assert status == 130, err
    assert "interrupted" in err and "Traceback" not in err


def test_ctrl_c_while_the_host_draws_for_compiled_code_stops_quietly(tmp_path: Path) -> None:
    """A compiled loop that draws at every step (`permutation`: the host fills a buffer through a C callback,
    which Ctrl-C often lands in): the run stops with "interrupted" and status 130, and ctypes' report of an
    exception it could not pass out of the callback is not shown."""
    program = tmp_path / "draws.dl"
    program.write_text(
        "fn spin(n: i64) -> i64 {\n    let t = 0\n    for i in 0..n { t = t + sum(permutation(3, seed=i)) }\n"
        '    return t\n}\nfn main() {\n    print(spin(1))\n    print("started")\n    print(spin(100000000))\n}\n'
    )
    lines, status, err = interrupted_run(program)
    assert lines == ["3\n", "started\n"], lines
    assert status == 130, err
    assert err == "dlrun: interrupted\n", err


def test_a_ctrl_c_that_lands_in_a_draw_callback_is_not_reported_as_unraisable() -> None:
    """In a process that calls compiled code in a room (the REPL, a host program), Ctrl-C is raised in the room
    thread at its next Python bytecode, which may be inside `fill_draws` while compiled code called it: ctypes
    cannot pass it out and hands it to `sys.unraisablehook`. That one report is dropped; any other goes on."""
    from types import SimpleNamespace

    from dl.codegen import native
    from dl.runtime.randomness import fill_draws, fill_samples

    reported = []
    quiet = native.quiet_interrupted_draws(reported.append)
    quiet(SimpleNamespace(exc_type=KeyboardInterrupt, object=fill_draws))
    quiet(SimpleNamespace(exc_type=KeyboardInterrupt, object=fill_samples))  # categorical's callback
    other = SimpleNamespace(exc_type=ValueError, object=fill_draws)
    elsewhere = SimpleNamespace(exc_type=KeyboardInterrupt, object=print)
    quiet(other)
    quiet(elsewhere)
    assert reported == [other, elsewhere]


def test_for_over_a_tensor_strings_known_when_compiling_and_int() -> None:
    source = (
        "fn f(xs: f32[5], rows: f32[3, 4], target: f32, mode: str, k: f64) -> (i64, f32[4], f32, str, i64) {\n"
        "    let found = -1\n    let i = 0\n"
        "    for x in xs {\n        if x > target {\n            found = i\n            break\n        }\n"
        "        xs = xs * 2.0\n        i += 1\n    }\n"
        "    let total = zeros(4)\n    for row in rows { total = total + row * row }\n"
        '    let scale = 1.0\n    if mode == "double" { scale = 2.0 } else if mode != "keep" { scale = 0.5 }\n'
        '    return (found, total, sum(xs) * scale, "done", int(k) + int(3.9) + int(true))\n}\n'
    )
    args = (np.array([0.5, -1.0, 2.0, 3.0, 0.0], np.float32), f32(3, 4), np.float32(1.5))
    for mode in ("double", "keep", "other"):
        check(source, "f", *args, mode, np.float64(-2.7))
    interpreted, compiled, _ = failures(source, "f", *args, "keep", np.float64("inf"))
    assert shown(compiled) == shown(interpreted)


def test_functions_as_arguments_are_compiled_in() -> None:
    source = (
        "fn square(v) { return v * v }\n"
        "fn map3(f, x: f32[3]) -> f32[3] {\n    return f(x) + f(x * 2.0)\n}\n"
        "fn main() {\n    print(map3(square, [1.0, 2.0, 3.0]), map3(fn(v) => v + 1.0, [1.0, 2.0, 3.0]))\n}\n"
    )
    loaded = pipeline.load("fns.dl", source)
    program_, typed = pipeline.prepare(loaded)
    compiler = interpreter.compile_program(program_, typed)
    square = compiler.states["fns.dl"].cells["square"].value
    expected, actual, report = on_both(source, "map3", square, f32(3), path="fns.dl")
    assert verdict(report, "map3") == "compiled", report
    assert_close(actual, expected)


def test_a_zero_forwarded_into_a_sum_is_dropped_only_at_its_own_dtype() -> None:
    from dl.codegen import ir
    from dl.codegen.optimise import replace

    buffer = ir.Buffer("x", "f64", (3,), 0, 0)
    x = ir.Read(buffer, ir.Const(0, "i64"), (1,))
    slot = ir.Read(ir.Buffer("slot", "f64", (3,), 0, 64), ir.Const(0, "i64"), (1,))
    total = ir.Apply("add", "f64", (slot, x))
    assert replace(total, slot, ir.Splat(ir.Const(0.0, "f64"))) == x
    mixed = replace(total, slot, ir.Splat(ir.Const(0, "i64")))
    assert isinstance(mixed, ir.Apply) and mixed.op == "add"
    assert replace(total, slot, ir.Splat(ir.Const(1.0, "f64"))).args[0] == ir.Splat(ir.Const(1.0, "f64"))


def test_a_function_inlined_twice_keeps_its_names_apart() -> None:
    """Two inlined copies of a loop with an `if`: the second copy's names (`s.1`, `if.then.1`) must not
    meet a name made from a hint that already ends in `.1`."""
    source = (
        "fn normalize(v) {\n    let s = v\n    let i = 0\n    while i < 3 {\n"
        "        if sum(s) > 1.0 {\n            s = s / 2.0\n        } else {\n            s = s * 1.5\n        }\n"
        "        i += 1\n    }\n    return s / sqrt(sum(s * s))\n}\n"
        "fn f(a, b) {\n    return sum(normalize(a) * normalize(b))\n}\n"
        "fn g(a: f64[3], b: f64[3]) -> (f64[3], f64[3]) {\n    return grad(f, wrt=(0, 1))(a, b)\n}\n"
    )
    check(source, "g", np.array([3.0, 1.0, -0.5]), np.array([0.7, 0.2, 0.1]), rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------ i32 tensors

I32_EDGES = np.array([2**31 - 1, -(2**31), -7, 7, -1, 0, 1, 46341, -65536, 2**30], dtype=np.int32)


def test_i32_arithmetic_wraps_and_promotes_as_numpy() -> None:
    """i32 tensors wrap around as numpy's; meeting an i64 scalar or tensor they widen to i64 (still
    wrapping), meeting a float (a literal, a scalar, a tensor) they become that float."""
    source = """
fn f(x: i32[10], y: i32[10], n: i64, w: i64[10], s: i32, v: f32[10], g: f64) -> (
    i32[10], i32[10], i32[10], i64[10], i64[10], f32[10], f64[10], f32[10], i32[10], bool[10]
) {
    return (x * y + x - 3, -x + s, x * 2 - y // 3, x * n, x + w, x * 2.5 + v, x * g, float(x) * 0.5, x % s, x < y)
}
"""
    y = np.roll(I32_EDGES, 3)
    args = (I32_EDGES, y, 4294967297, np.arange(10) * 2**61, np.int32(-3), f32(10), np.float64(0.25))
    check(source, "f", *args, rtol=0, atol=0)


def test_i32_reductions_built_ins_and_conversions() -> None:
    source = """
fn f(x: i32[2, 5], k: i32) -> (i32, i32[5], i32, i32[2], f32, i64, i64[5], i32[2, 5], i32[2, 5], i64[2, 5], f64[2, 5]) {
    return (
        sum(x), sum(x, axis=0), max(x), min(x, axis=1), mean(x), argmax(x), argmin(x, axis=0),
        abs(x) + relu(x), maximum(x, k) - minimum(x, 2), int(x), float(x, dtype=f64)
    )
}
"""
    check(source, "f", I32_EDGES.reshape(2, 5), np.int32(-7), rtol=0, atol=0)


def test_i32_created_indexed_and_chosen() -> None:
    source = """
fn f(x: f32[4], i: i32, j: i32[3], c: bool[3], n: i32) -> (f32, f32[3], f32[3, 4], i32[3], i32[2, 2], i32[3], f32[3]) {
    let made = zeros(3, dtype=i32) + n
    return (x[i], x[j], one_hot(abs(j), 4), made, full(2, 2, value=7, dtype=i32), where(c, j, 0), gather(x, j))
}
"""
    args = (f32(4), np.int32(-1), np.array([3, 0, -2], dtype=np.int32), np.array([True, False, True]), np.int32(5))
    check(source, "f", *args, rtol=0, atol=0)


def test_i32_floor_division_and_remainder_match_numpy_exactly() -> None:
    """`//` and `%` of i32 tensors round toward minus infinity, the smallest i32 // -1 wraps to itself, and a
    zero divisor anywhere fails as interpreted."""
    a, b = np.meshgrid(I32_EDGES, np.array([-7, -3, -2, -1, 1, 2, 5, 2**31 - 1], dtype=np.int32))
    source = "fn f(a: i32[k, j], b: i32[k, j]) { return (a // b, a % b, a // 3, -8 % b) }\n"
    with np.errstate(all="ignore"):
        expected, actual, report = on_both(source, "f", a.copy(), b.copy())
    assert verdict(report, "f") == "compiled", report
    for got, want in zip(actual, expected, strict=True):
        assert got.dtype == want.dtype == np.int32
        np.testing.assert_array_equal(got, want)
    interpreted, compiled, _ = failures(source, "f", a, np.where(b == 5, 0, b).astype(np.int32))
    assert shown(compiled) == shown(interpreted)
    assert shown(compiled)[:2] == ("E0510", "integer division by zero in `//`")


@pytest.mark.parametrize(
    ("body", "args"),
    [
        ("return x[i] * 2.0", (f32(4), np.int32(4))),
        ("return x[i] * 2.0", (f32(4), np.int32(-5))),
        ("return gather(x, [2i32, i])", (f32(4), np.int32(7))),
        ("return x[[i, 0i32]]", (f32(4), np.int32(-9))),
    ],
)
def test_i32_indices_out_of_range_fail_as_interpreted(body: str, args: tuple) -> None:
    result = "f32" if "x[i]" in body else "f32[_]"
    source = f"fn f(x: f32[4], i: i32) -> {result} {{\n    {body}\n}}"
    interpreted, compiled, report = failures(source, "f", *args)
    assert verdict(report, "f") == "compiled", report
    assert shown(compiled) == shown(interpreted)
    assert shown(compiled)[0] in ("E0501", "E0513")


def test_i32_matrix_products_stay_interpreted() -> None:
    source = "fn f(a: i32[2, 3], b: i32[3, 2]) -> i32[2, 2] { return a @ b }"
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    expected, actual, report = on_both(source, "f", a, a.T.copy())
    assert verdict(report, "f").startswith("interpreted: "), report
    np.testing.assert_array_equal(actual, expected)


def test_an_unsuffixed_float_bound_to_a_name_or_parameter_is_an_f32() -> None:
    """`let t = -0.1` and a literal passed to an unannotated parameter are f32 values in the interpreter
    (the checker types them so), not literals that keep adapting to an f64 they meet; an integer does."""
    source = (
        "fn h(x, k) {\n    return sin(x * k)\n}\n"
        "fn f(x: f64[2]) -> f64[2] {\n    let t = -0.1\n    let n = 3\n"
        "    return h(x, t) + h(x, -0.1) + x * n\n}\n"
    )
    check(source, "f", np.array([0.3, -1.7]), rtol=1e-14, atol=0.0)


def test_literals_bound_by_let_const_or_return_take_their_default_dtype() -> None:
    """Bound to a name (`let`, a tuple pattern, a module const) or returned, an unsuffixed literal is an
    f32 or an i64 value, as interpreted: `0.1` does not adapt to the f64 it meets later, and `2` makes
    an i32 tensor's product an i64 (no wrapping)."""
    source = (
        "const C = 0.1\nconst TWO = 2\n"
        "fn tenth() {\n    return 0.1\n}\n"
        "fn f(x: f64[2], y: i32[2]) -> (f64[2], f64[2], f64[2], i64[2], i64[2]) {\n"
        "    let c = 0.1\n    let (p, q) = (0.1, 0.2)\n    let two = 2\n"
        "    return (x * c + x * C, x * p + q, x * tenth(), y * two, y * TWO)\n}\n"
    )
    check(source, "f", np.array([1.3, -2.0]), np.array([2000000000, 3], np.int32), rtol=1e-15, atol=0.0)


def test_mutual_recursion_before_any_return_through_an_inlined_if() -> None:
    """Shaped like the `_back` functions `grad` writes: the recursive call comes before any `return`,
    reached through an inlined callee's `if`; the probe that learns the result leaves that path."""
    source = (
        "fn ev(x, n: i64) {\n    let d_x = zeros_like(x)\n    if n <= 0 {\n        d_x = d_x + 1.0\n"
        "    } else {\n        let d_t = od(x[1:], n - 1)\n        d_x[1:] += d_t\n    }\n    return d_x\n}\n"
        "fn od(x, n: i64) {\n    let d_x = zeros_like(x)\n    if n <= 0 {\n        d_x = d_x + 2.0\n"
        "    } else {\n        d_x = d_x + ev(x, n - 1)\n    }\n    return d_x\n}\n"
    )
    check(source, "ev", np.array([0.3, -0.7, 0.1]), 3, rtol=0.0, atol=0.0)


def test_integer_literal_arguments_and_fused_lets_take_their_default_dtype() -> None:
    """`scale(x, 2)` binds an i64 (an i32 product does not wrap); a fused f64 kernel's `let c = 0.1` is the
    f32 0.1 (such a function is specialised instead of fused); `unbroadcast(x, 1.0)` rounds to f32."""
    source = (
        "fn scale(x, k) {\n    return x * k\n}\n"
        "fn f(y: i32[2], d: f64[3]) -> (i64[2], f64, f32) {\n"
        "    let c = 0.1\n    return (scale(y, 2), sum(d * c), unbroadcast(d[0], 1.0))\n}\n"
    )
    check(source, "f", np.array([2000000000, 3], np.int32), np.array([1.0, 2.0, 3.0]), rtol=1e-15, atol=0.0)
    fused = "fn a(d: f64[3]) -> f64 {\n    let c = 0.1\n    return sum(d * c)\n}\n"
    check(fused, "a", np.array([1.0, 2.0, 3.0]), rtol=1e-15, atol=0.0)


def test_a_nan_constant_keeps_its_sign_in_the_text_that_names_code() -> None:
    """`ir.show` keys the compile cache and a loop's symbol is a digest of its text: a NaN's sign, which
    `copysign` reads, is part of it (`repr(-nan)` is `nan` in Python)."""
    from dl.codegen import llvm

    negative, positive = ir.Const(-math.nan, "f64"), ir.Const(math.nan, "f64")
    assert repr(negative) == "Const(value=-nan, dtype='f64')" and repr(positive) == "Const(value=nan, dtype='f64')"
    assert llvm.loop_symbol(ir.Splat(negative), "") != llvm.loop_symbol(ir.Splat(positive), "")
    assert repr(ir.Const(-0.0, "f32")) == "Const(value=-0.0, dtype='f32')"
