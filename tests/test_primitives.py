"""Every DL primitive and operator, run through the real interpreter, against numpy (and PyTorch
where it is the natural reference), on random inputs and broadcasting/dtype/numerical edge cases.

`PRIM_TESTS` and `OPERATOR_TESTS` at the bottom name the tests covering each member of `Prim`
and each operator; a coverage test asserts they match the primitive and operator tables, so a
new primitive or operator without a test fails here.

Tests marked `xfail(strict=True, reason="BUG: ...")` document real bugs in the implementation.
"""

from __future__ import annotations

import itertools
import time
import warnings

import dl.lang
import numpy as np
import pytest
import test_data
from dl.interp.operators import BINARY, UNARY
from dl.interp.primitives import IMPLEMENTATIONS
from dl.lang.diagnostics import DiagnosticError
from dl.lang.primitives import PRIMITIVES, Prim
from dlharness import dl_error, dl_eval, dl_main, dl_run, dl_value, dtype_of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

try:
    import torch
except ImportError:  # pragma: no cover - torch is a dev dependency
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")

SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
I64 = np.dtype(np.int64)
BOOL = np.dtype(np.bool_)

shapes = hnp.array_shapes(min_dims=0, max_dims=4, min_side=1, max_side=4)
nonscalar_shapes = hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=4)
seeds = st.integers(0, 2**32 - 1)
float_dtypes = st.sampled_from([F32, F64])


def randn(rng: np.random.Generator, shape, dtype=F32, low=None, high=None) -> np.ndarray:
    if low is not None:
        return rng.uniform(low, high, size=shape).astype(dtype)
    return (rng.standard_normal(shape) * 3).astype(dtype)


def check(actual, expected, dtype=None, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """`actual` (a DL value) has `expected`'s shape, the given dtype (default: expected's) and values."""
    expected_array = np.asarray(expected)
    want = np.dtype(dtype) if dtype is not None else expected_array.dtype
    assert np.shape(actual) == expected_array.shape, f"shape {np.shape(actual)} != {expected_array.shape}"
    assert dtype_of(actual) == want, f"dtype {dtype_of(actual)} != {want}"
    if np.ndim(actual) == 0:
        assert not isinstance(actual, np.ndarray), f"0-d result must be a DL scalar, found {actual!r}"
    if want.kind in "fc":
        np.testing.assert_allclose(
            np.asarray(actual, dtype=np.float64),
            expected_array.astype(np.float64),
            rtol=rtol,
            atol=atol,
            equal_nan=True,
        )
    else:
        np.testing.assert_array_equal(np.asarray(actual), expected_array)


def runtime_error(expr: str, *args) -> DiagnosticError:
    failure = dl_error(expr, *args)
    codes = [d.code for d in failure.diagnostics]
    assert codes and all(code.startswith("E05") for code in codes), f"{expr}: codes {codes}: {failure}"
    return failure


def to_torch(x):
    return torch.from_numpy(np.array(x, copy=True))


# ======================================================================= elementwise math

UNARY_REFERENCES = {
    # prim: (numpy reference, lowest input, highest input)
    Prim.EXP: (np.exp, -10, 10),
    Prim.LOG: (np.log, 0.01, 100),
    Prim.SQRT: (np.sqrt, 0, 100),
    Prim.TANH: (np.tanh, -10, 10),
    Prim.SIGMOID: (lambda x: (1 / (1 + np.exp(-x.astype(np.float64)))).astype(x.dtype), -30, 30),
    Prim.RELU: (lambda x: np.maximum(x, 0), -10, 10),
    Prim.ABS: (np.abs, -10, 10),
    Prim.SIN: (np.sin, -10, 10),
    Prim.COS: (np.cos, -10, 10),
    Prim.TAN: (np.tan, -1.5, 1.5),
    Prim.ASIN: (np.arcsin, -1, 1),
    Prim.ACOS: (np.arccos, -1, 1),
    Prim.ATAN: (np.arctan, -30, 30),
    Prim.SOFTPLUS: (lambda x: np.logaddexp(x.astype(np.float64), 0.0).astype(x.dtype), -60, 60),
    Prim.LOG1P: (np.log1p, -0.99, 100),
    Prim.EXPM1: (np.expm1, -10, 10),
}
FLOAT_ONLY = [
    Prim.EXP,
    Prim.LOG,
    Prim.SQRT,
    Prim.TANH,
    Prim.SIGMOID,
    Prim.SIN,
    Prim.COS,
    Prim.TAN,
    Prim.ASIN,
    Prim.ACOS,
    Prim.ATAN,
    Prim.SOFTPLUS,
    Prim.LOG1P,
    Prim.EXPM1,
    Prim.ERF,
    Prim.FLOOR,
    Prim.CEIL,
    Prim.ROUND,
]


@pytest.mark.parametrize("prim", list(UNARY_REFERENCES), ids=lambda p: p.value)
@SETTINGS
@given(shape=shapes, dtype=float_dtypes, seed=seeds)
def test_unary_elementwise(prim: Prim, shape, dtype, seed) -> None:
    reference, low, high = UNARY_REFERENCES[prim]
    x = dl_value(randn(np.random.default_rng(seed), shape, dtype, low, high))
    check(dl_eval(f"{prim.value}(a)", x), reference(np.asarray(x)), dtype)


@pytest.mark.parametrize("prim", FLOAT_ONLY, ids=lambda p: p.value)
def test_float_only_unary_rejects_integers(prim: Prim) -> None:
    runtime_error(f"{prim.value}(a)", np.arange(3))
    runtime_error(f"{prim.value}(a)", 2)
    runtime_error(f"{prim.value}(a)", np.array([True]))


def test_relu_and_abs_keep_integer_dtype() -> None:
    x = np.array([-3, 0, 4])
    check(dl_eval("relu(a)", x), np.array([0, 0, 4]))
    check(dl_eval("abs(a)", x), np.array([3, 0, 4]))
    check(dl_eval("relu(a)", -5), np.int64(0), I64)
    check(dl_eval("abs(-5)"), np.int64(5), I64)


@needs_torch
@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_relu_of_wide_rows_matches_torch_at_every_width(dtype) -> None:
    """relu compares a tensor with 16 or more columns against a row of zeros (numpy's vector loop), kept per
    width: widths past the rows kept, nan, infinities and signed zeros give torch's values."""
    from dl.interp.primitives import KEPT_ROWS, ZERO_ROWS

    special = np.array([np.nan, -np.inf, np.inf, -0.0, 0.0, -1e-30, 3.5], dtype)
    for width in range(16, 16 + KEPT_ROWS + 8):
        values = np.concatenate([special, randn(np.random.default_rng(width), (width,)).astype(dtype)])
        x = np.resize(values, (3, width))
        check(dl_eval("relu(a)", x), torch.relu(to_torch(x)).numpy(), dtype)
        assert len(ZERO_ROWS) <= KEPT_ROWS


@needs_torch
@SETTINGS
@given(shape=shapes, seed=seeds)
def test_sigmoid_relu_tanh_match_torch(shape, seed) -> None:
    x = randn(np.random.default_rng(seed), shape)
    for name in ("sigmoid", "relu", "tanh"):
        expected = getattr(torch, name)(to_torch(x)).numpy()
        check(dl_eval(f"{name}(a)", dl_value(x)), expected, F32)


@needs_torch
@needs_torch
@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_softplus_log1p_expm1_erf_match_torch(dtype) -> None:
    """Against torch, including where the naive formulas lose every digit: softplus far below 0 (its value is
    exp(x)), log1p and expm1 of tiny arguments, erf in both tails."""
    x = np.concatenate([np.linspace(-30.0, 30.0, 61), [-700.0, -80.0, 80.0, 1e-30, -1e-12, 5e-8]]).astype(dtype)
    tensor = to_torch(x)
    references = {
        "softplus": torch.nn.functional.softplus(tensor, threshold=1000.0),
        "log1p": torch.log1p(torch.abs(tensor)),
        "expm1": torch.expm1(torch.clamp(tensor, max=50.0)),
        "erf": torch.erf(tensor),
    }
    inputs = {"softplus": "a", "log1p": "abs(a)", "expm1": "minimum(a, 50.0)", "erf": "a"}
    rtol = 2e-6 if dtype == F32 else 1e-14
    for name, expected in references.items():
        check(dl_eval(f"{name}({inputs[name]})", x), expected.numpy(), dtype, rtol=rtol, atol=0)
    check(dl_eval("softplus(a)", dtype.type(-100.0)), np.exp(dtype.type(-100.0)), dtype, rtol=1e-6, atol=0)


@needs_torch
@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_trigonometry_matches_torch(dtype) -> None:
    """tan, asin, acos and atan, their derivatives included, against torch: near the poles of tan, at and beyond
    the ends of asin's and acos's domain (inf gradients, nan values), and far along atan."""
    x = np.array([-1.5, -0.999, -0.5, 0.0, 0.25, 0.999, 1.0, 1.5, -1.0, 1.57, 40.0], dtype)
    tensor = to_torch(x).requires_grad_()
    from dl import pipeline

    rtol = 2e-6 if dtype == F32 else 1e-14
    for name in ("tan", "asin", "acos", "atan"):
        expected = getattr(torch, name)(tensor)
        (gradient,) = torch.autograd.grad(expected.sum(), tensor)
        check(dl_eval(f"{name}(a)", x), expected.detach().numpy(), dtype, rtol=rtol, atol=0)
        source = f"fn f(v) {{ return sum({name}(v)) }}\nfn g(v) {{ return grad(f)(v) }}\n"
        found = pipeline.call(pipeline.load(f"{name}.dl", source), "g", [x])
        check(found, gradient.numpy(), dtype, rtol=rtol * 4, atol=0)


@needs_torch
@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_step_functions_match_torch(dtype) -> None:
    """floor, ceil, round (halves to the even integer, as torch's) and sign, through infinities, nan and the
    largest floats, keeping the dtype."""
    finfo = np.finfo(dtype)
    x = np.array([-2.5, -1.5, -0.5, -0.0, 0.0, 0.5, 1.5, 2.5, 3.7, -3.7, 1e-30, np.inf, -np.inf, np.nan, finfo.max])
    x = x.astype(dtype)
    for name in ("floor", "ceil", "round", "sign"):
        expected = getattr(torch, name)(to_torch(x)).numpy()
        if name == "sign":  # nan stays nan, as numpy's and JAX's (torch's sign of nan is 0)
            expected = np.where(np.isnan(x), x, expected)
        result = dl_eval(f"{name}(a)", x)
        check(result, expected, dtype, rtol=0, atol=0)
        check(dl_eval(f"{name}(a)", x[0]), expected[0], dtype, rtol=0, atol=0)
    assert not np.signbit(dl_eval("sign(a)", np.array([-0.0, 0.0], dtype))).any()  # +0.0 for -0.0, as numpy's
    assert dl_eval("sign(a)", np.array([5, 0, -3], dtype=np.int64)).tolist() == [1, 0, -1]
    assert dl_eval("sign(-7)") == -1


@needs_torch
def test_f32_sums_over_many_rows_and_running_sums_stay_accurate() -> None:
    """numpy adds the rows of a leading axis one at a time: over 2,000,000 rows of 0.1 in f32 the mean came out
    0.0985. Such sums go in blocks of rows (within 1e-5); a running sum of f32 runs in f64, rounded once per
    element, as torch's does (it ended at 1.088e6 for 1e6)."""
    x = np.full((2_000_000, 2), 0.1, np.float32)
    check(dl_eval("mean(a, axis=0)", x), np.array([0.1, 0.1], np.float32), F32, rtol=1e-5, atol=0)
    check(dl_eval("sum(a, axis=0, keepdims=true)", x), np.full((1, 2), 2e5, np.float32), F32, rtol=1e-5, atol=0)
    check(dl_eval("sum(a, axis=(0, 1))", x.reshape(1000, 2000, 2)), np.full(2, 2e5, np.float32), F32, rtol=1e-5)
    columns = np.full((2_000_000, 3), 0.1, np.float32)  # views, middle and several axes: summed as rows too
    for source, expected in (
        ("mean(a[:, 0:2], axis=0)", np.full(2, 0.1)),
        ("sum(a[::2, :], axis=0)", np.full(3, 1e5)),
        ("mean(reshape(a, 2, 1000000, 3), axis=(0, 1))", np.full(3, 0.1)),
        ("mean(reshape(a, 2, 1000000, 3), axis=1)", np.full((2, 3), 0.1)),
        ("mean(transpose(a), axis=1)", np.full(3, 0.1)),
    ):
        check(dl_eval(source, columns), expected.astype(np.float32), F32, rtol=1e-5, atol=0)
    ragged = np.random.default_rng(3).random((1000, 3)).astype(np.float32)  # 7 blocks of 128 rows and 104 more
    check(dl_eval("sum(a, axis=0)", ragged), ragged.astype(np.float64).sum(0).astype(np.float32), F32, rtol=1e-6)
    running = np.full(10_000_000, 0.1, np.float32)
    expected = torch.cumsum(torch.from_numpy(running), 0).numpy()
    check(dl_eval("cumsum(a, 0)", running)[-3:], expected[-3:], F32, rtol=0, atol=0)


@needs_torch
@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_float_tests_match_torch(dtype) -> None:
    """isnan, isinf and isfinite through nan, both infinities, signed zeros, the largest floats and a subnormal,
    as torch's, of tensors and of scalars (a `bool`); integers, never nan, are refused when checked."""
    finfo = np.finfo(dtype)
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, finfo.max, -finfo.max, finfo.tiny / 2, 1.5], dtype)
    for name in ("isnan", "isinf", "isfinite"):
        expected = getattr(torch, name)(to_torch(x)).numpy()
        check(dl_eval(f"{name}(a)", x), expected, BOOL)
        check(dl_eval(f"{name}(a)", x.reshape(3, 3)), expected.reshape(3, 3), BOOL)
        for value, want in zip(x, expected, strict=True):
            assert dl_eval(f"{name}(a)", value) is bool(want)
        assert dl_eval(f"{name}(1e400)") is (name == "isinf")
        (checked,) = checker_errors(f"{name}(x)", "x: i64[3]")
        assert checked.code == "E0317" and "an integer is always finite" in "".join(checked.notes)
        failure = dl_error(f"{name}(a)", np.arange(3))  # when run, unchecked
        assert [d.code for d in failure.diagnostics] == ["E0513"] and "an integer is always finite" in str(failure)


@needs_torch
@SETTINGS
@given(shape=nonscalar_shapes, seed=seeds)
def test_any_and_all_match_torch(shape, seed) -> None:
    """Over every element, each axis (kept or not) and a tuple of axes, as torch's `any` and `all`."""
    x = np.random.default_rng(seed).random(shape) < 0.4
    tensor = to_torch(x)
    for name in ("any", "all"):
        reference = getattr(torch, name)
        assert dl_eval(f"{name}(a)", x) is bool(reference(tensor))
        for axis in range(len(shape)):
            check(dl_eval(f"{name}(a, axis={axis})", x), reference(tensor, dim=axis).numpy(), BOOL)
            kept = reference(tensor, dim=axis, keepdim=True).numpy()
            check(dl_eval(f"{name}(a, axis={axis - len(shape)}, keepdims=true)", x), kept, BOOL)
        if len(shape) >= 2:
            check(dl_eval(f"{name}(a, axis=(0, 1))", x), getattr(np, name)(x, axis=(0, 1)), BOOL)


def test_any_and_all_of_nothing_and_of_numbers() -> None:
    """Of no elements, `any` is false and `all` true (numpy's, torch's); numbers are refused with the comparison
    that makes bools."""
    assert dl_eval("any(a > 0.0)", np.zeros(0, np.float32)) is False
    assert dl_eval("all(a > 0.0)", np.zeros(0, np.float32)) is True
    check(dl_eval("all(a, axis=1)", np.zeros((2, 0), bool)), np.array([True, True]), BOOL)
    for source, example in (("any(x)", "any(x != 0.0)"), ("all(n)", "all(x != 0)")):
        (checked,) = checker_errors(source, "x: f32[3], n: i64[3]")
        assert checked.code == "E0317" and example in "".join(checked.notes)
    assert [d.code for d in dl_error("any(a)", np.ones(3, np.float32)).diagnostics] == ["E0513"]


@needs_torch
def test_squeeze_matches_torch() -> None:
    """One axis, a negative one, a tuple; an axis whose size is not 1 is E0307 when checked, E0513 when run."""
    x = np.random.default_rng(5).standard_normal((1, 3, 1, 2)).astype(np.float32)
    for axis, dims in (("0", 0), ("-2", -2), ("(0, 2)", (0, 2))):
        check(dl_eval(f"squeeze(a, {axis})", x), torch.from_numpy(x).squeeze(dims).numpy(), F32, rtol=0, atol=0)
    check(dl_eval("squeeze(a, 0)", np.array([7], np.int64)), np.int64(7), I64)
    assert checker_codes("squeeze(x, 1)") == ["E0307"]
    assert checker_codes("squeeze(x, 2)") == ["E0306"]
    assert checker_codes("squeeze(1.0, 0)") == ["E0306"]
    assert [d.code for d in dl_error("squeeze(a, 1)", x).diagnostics] == ["E0513"]


@needs_torch
def test_eye_matches_torch() -> None:
    for n, m in ((1, None), (3, None), (2, 4), (4, 2), (0, 3)):
        expected = (torch.eye(n) if m is None else torch.eye(n, m)).numpy()
        check(dl_eval(f"eye({n})" if m is None else f"eye({n}, {m})"), expected, F32)
    check(dl_eval("eye(a, dtype=f64)", 3), np.eye(3), F64)
    check(dl_eval("eye(2, dtype=bool)"), np.eye(2, dtype=bool), BOOL)
    check(dl_eval("eye(2, 3, dtype=i64)"), np.eye(2, 3, dtype=np.int64), I64)
    assert checker_codes("eye(-1)") == ["E0307"]
    assert checker_codes("eye(2.0)") == ["E0301"]
    assert checker_codes("eye(2, 3, x)") != []


@needs_torch
def test_linspace_matches_numpy_and_torch() -> None:
    """numpy's values exactly (computed in f64 from the ends in the result's dtype, `stop` itself last), torch's
    to the last bits of f32; the dtype is f64 if an end is, f32 otherwise, or `dtype=`'s (a literal end takes
    it: `0.7` of an f64 result is the f64 0.7)."""
    for start, stop, num in (
        (0.0, 1.0, 5),
        (-3.0, 7.5, 11),
        (2.0, 2.0, 3),
        (1.0, -1.0, 2),
        (0.5, 9.0, 1),
        (0.0, 1.0, 0),
        (-0.3, 0.9, 13),
    ):
        expected = np.linspace(float(np.float32(start)), float(np.float32(stop)), num).astype(np.float32)
        result = dl_eval(f"linspace({start}, {stop}, {num})")
        check(result, expected, F32, rtol=0, atol=0)
        check(result, torch.linspace(start, stop, num).numpy(), F32, rtol=1e-6, atol=1e-6)
    check(dl_eval("linspace(a, 1.0, 4)", np.float64(0.1)), np.linspace(0.1, 1.0, 4), F64, rtol=0, atol=0)
    from dl import pipeline

    source = "fn ends(h: f64) -> f64[3] { return linspace(h, 0.7, 3) }\n"
    source += "fn wide() -> f64[3] { return linspace(0.1, 0.7, 3, dtype=f64) }\n"
    typed = pipeline.load("ends.dl", source)
    check(pipeline.call(typed, "ends", [np.float64(0.1)]), np.linspace(0.1, 0.7, 3), F64, rtol=0, atol=0)
    check(pipeline.call(typed, "wide", []), np.linspace(0.1, 0.7, 3), F64, rtol=0, atol=0)
    # the ends' gradients in the ends' dtypes, whatever the result's: f = a^2 + ((a + b) / 2)^2 + b^2
    source = "fn f(a: f32, b: f64) -> f64 { return sum(linspace(a, b, 3) ** 2.0) }\n"
    source += "fn g(a: f32, b: f64) -> (f32, f64) { return grad(f, wrt=(0, 1))(a, b) }\n"
    da, db = pipeline.call(pipeline.load("mixed.dl", source), "g", [np.float32(1.0), np.float64(2.0)])
    assert (dtype_of(da), dtype_of(db), float(da), float(db)) == (F32, F64, 3.5, 5.5)
    check(dl_eval("linspace(0, 10, 3)"), np.array([0.0, 5.0, 10.0], np.float32), F32)
    check(dl_eval("linspace(0.0, 1.0, 3, dtype=f64)"), np.linspace(0, 1, 3), F64)
    assert checker_codes("linspace(0.0, 1.0, -2)") == ["E0307"]
    assert checker_codes("linspace(x, 1.0, 3)") == ["E0301"]
    assert checker_codes("linspace(0.0, 1.0, 3, dtype=i64)") == ["E0317"]
    assert checker_codes("linspace(0.0, 1.0, 2.5)") == ["E0301"]


@needs_torch
@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_var_and_std_match_torch(dtype) -> None:
    """Over every element, one axis, a tuple of axes, kept or not, with corrections 0, 1 and 2.5; a count at most
    the correction divides by zero as torch's does (inf, or nan for a constant)."""
    x = np.random.default_rng(5).standard_normal((3, 4, 5)).astype(dtype) * 3 + 1
    tensor = to_torch(x)
    rtol = 1e-6 if dtype == F32 else 1e-13
    for name in ("var", "std"):
        for axis, dim in ((None, None), (1, 1), (-1, -1), ((0, 2), (0, 2))):
            for keepdims in (False, True):
                for correction in (0, 1, 2.5):
                    expected = getattr(torch, name)(tensor, dim=dim, keepdim=keepdims, correction=correction)
                    keywords = f"axis={axis}, keepdims={str(keepdims).lower()}, correction={correction}"
                    shown = keywords.replace("axis=None, ", "")
                    result = dl_eval(f"{name}(a, {shown})", x)
                    check(result, expected.numpy(), dtype, rtol=rtol, atol=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's "degrees of freedom is <= 0"
        for values, correction in (([1.0, 2.0], 2), ([1.0, 1.0], 3), ([4.0], 1)):
            expected = torch.var(
                torch.tensor(values, dtype=getattr(torch, np.dtype(dtype).name)), correction=correction
            )
            check(dl_eval(f"var(a, correction={correction})", np.array(values, dtype)), expected.numpy(), dtype)
    assert dl_eval("std(a)", dtype.type(3.0)) == 0


@needs_torch
def test_flip_and_cumsum_match_torch() -> None:
    """Every axis and a tuple of them for flip; cumsum along each axis in each dtype, keeping i32 (numpy would
    widen it) and counting bools as i64."""
    x = np.random.default_rng(6).standard_normal((3, 4, 5)).astype(np.float32)
    for axis in (0, 1, 2, -1, (0, 2), (2, 0, 1)):
        dims = axis if isinstance(axis, tuple) else (axis,)
        check(dl_eval(f"flip(a, {axis})", x), torch.flip(to_torch(x), dims).numpy(), F32, rtol=0, atol=0)
    for dtype in (np.float32, np.float64, np.int64, np.int32):
        values = (x * 10).astype(dtype)
        for axis in (0, 1, -1):
            result = dl_eval(f"cumsum(a, axis={axis})", values)
            expected = torch.cumsum(torch.from_numpy(values.astype(np.float64)), axis).numpy().astype(dtype)
            assert result.dtype == dtype
            single = dtype == np.float32  # a running f32 sum rounds at each step: 1e-6 of the sums' size
            np.testing.assert_allclose(result, expected, rtol=1e-6 if single else 1e-13, atol=1e-5 if single else 0)
    counted = dl_eval("cumsum(a, 0)", np.array([True, False, True, True]))
    assert counted.dtype == np.int64 and counted.tolist() == [1, 1, 2, 3]


@needs_torch
def test_pad_matches_torch() -> None:
    """Widths before and after, negative ones removing (torch's constant `pad`), along one axis, the last by
    default, or a tuple of them; a `value=` in each dtype, a literal taking the tensor's dtype."""
    import torch.nn.functional as functional

    x = np.random.default_rng(8).standard_normal((2, 3, 4)).astype(np.float32)
    for dtype in (np.float32, np.float64, np.int64, np.int32):
        values = (x * 10).astype(dtype)
        for before, after in ((1, 2), (0, 3), (-1, 2), (2, -2), (-1, -1), (0, 0)):
            for axis in (0, 1, 2, -1, (0, 2), (1, 2, 0)):
                dims = sorted({a % 3 for a in (axis if isinstance(axis, tuple) else (axis,))}, reverse=True)
                widths = [w for a in range(2, -1, -1) for w in ((before, after) if a in dims else (0, 0))]
                expected = functional.pad(torch.from_numpy(values), widths, value=7).numpy()
                check(dl_eval(f"pad(a, {before}, {after}, axis={axis}, value=7)", values), expected, dtype, 0, 0)
        last = functional.pad(torch.from_numpy(values), (2, 1)).numpy()
        check(dl_eval("pad(a, 2, 1)", values), last, dtype, 0, 0)
    flags = dl_eval("pad(a, 1, 1, value=true)", np.array([False, False]))
    assert flags.dtype == BOOL and flags.tolist() == [True, False, False, True]
    assert dl_eval("shape(pad(a, 3, -4))", x) == (2, 3, 3)
    assert dl_eval("pad(a, b, 0)", np.array([1.0, 2.0], np.float32), 2).tolist() == [0, 0, 1, 2]  # widths at run time
    assert "removes 5 elements from axis 0" in str(dl_error("pad(a, -3, -2)", np.zeros(4, np.float32)))
    assert checker_codes("pad(x, -2, -2, axis=0)") == ["E0307"]
    assert checker_codes("pad(x, (1, 1))") == ["E0206"]
    assert checker_codes("pad(x, 1.0, 1)") == ["E0301"]
    assert checker_codes("pad(x, 1, 1, value=[1.0])") == ["E0302"]
    assert checker_codes("pad(x, 1, 1, value=v)", "x: f32[2, 3], v: f64") == ["E0317"]
    assert checker_codes("pad(x, 1, 1, axis=2)") == ["E0306"]
    assert checker_codes("pad([1, 2], 1, 1, value=2.5)") == ["E0317"]  # a float literal would be cut to an integer
    assert checker_codes("pad([1.0, 2.0], 1, 1)", "x: f64") == []  # a literal padded stays a literal
    assert dl_eval("pad([1.0, 2.0], 1, 1) * a", np.float64(1.0)).dtype == F64
    # value's gradient is the adjoint of the places it fills, exactly (no sum of all less the rest, which
    # loses a small fill's adjoint beside large ones)
    source = """
fn main() {
    print(grad(fn(v) => sum(pad([1.0, 2.0], 0, 1, value=v) * [100000000.0, 100000000.0, 1.0]))(0.5))
}
"""
    assert dl_main(source) == "1.0\n"


@needs_torch
def test_clip_matches_torch_clamp() -> None:
    """Bounds that broadcast (a scalar, a row, a column), in each dtype; literals take the tensor's dtype; a lower
    bound above the upper gives the upper, as numpy's and torch's; nan stays nan."""
    rng = np.random.default_rng(7)
    for dtype in (np.float32, np.float64, np.int64, np.int32):
        x = (rng.standard_normal((3, 4)) * 5).astype(dtype)
        for lo, hi in (((-1.0), 2.0), (rng.standard_normal(4) - 1, rng.standard_normal((3, 1)) + 1)):
            lo, hi = np.asarray(lo).astype(dtype), np.asarray(hi).astype(dtype)
            expected = torch.clamp(torch.from_numpy(x), torch.from_numpy(lo), torch.from_numpy(hi)).numpy()
            result = dl_eval("clip(a, b, c)", x, lo, hi)
            assert result.dtype == dtype
            np.testing.assert_array_equal(result, expected)
    literal = dl_eval("clip(a, 0.5, 1.5)", np.array([0.0, 1.0, 2.0, np.nan]))
    assert literal.dtype == np.float64 and np.array_equal(literal, [0.5, 1.0, 1.5, np.nan], equal_nan=True)
    assert dl_eval("clip(a, 0.5, 1.5)", np.float64(0.1)) == 0.5 and dtype_of(dl_eval("clip(a, 0.5, 1.5)", 0.1)) == F32
    assert dl_eval("clip(a, 2.0, 1.0)", np.array([0.0, 3.0], np.float32)).tolist() == [1.0, 1.0]
    assert dl_eval("clip(a, 0, 3)", np.array([-2, 5])).tolist() == [0, 3]


@needs_torch
def test_sort_argsort_and_take_along_axis_match_torch() -> None:
    """Stable sorts both ways along each axis (ties, nan last ascending and first descending), in each dtype; a
    gather of one index per element, negative indices counting from the end; indices out of range are E0513."""
    rng = np.random.default_rng(8)
    x = rng.integers(-3, 4, (3, 5)).astype(np.float32)  # many ties
    x[1, 2] = np.nan
    tensor = torch.from_numpy(x)
    for axis in (0, 1, -1):
        for descending in (False, True):
            keywords = f"axis={axis}, descending={str(descending).lower()}"
            expected = torch.sort(tensor, dim=axis, descending=descending, stable=True)
            np.testing.assert_array_equal(dl_eval(f"argsort(a, {keywords})", x), expected.indices.numpy())
            np.testing.assert_array_equal(dl_eval(f"sort(a, {keywords})", x), expected.values.numpy())
    for dtype in (np.int64, np.int32, np.float64):
        values = x[[0, 2]].astype(dtype)
        assert dl_eval("sort(a)", values).dtype == dtype
        assert dl_eval("argsort(a)", values).tolist() == np.argsort(values, axis=-1, kind="stable").tolist()
    indices = rng.integers(-5, 5, (3, 2))
    expected = torch.gather(tensor, 1, torch.from_numpy(indices % 5)).numpy()
    np.testing.assert_array_equal(dl_eval("take_along_axis(a, b, 1)", x, indices), expected)
    failure = runtime_error("take_along_axis(a, b, 0)", x, np.array([[3, 0, 0, 0, 0]]))
    assert "index 3 is out of range for an axis of size 3" in failure.diagnostics[0].message


@needs_torch
@pytest.mark.parametrize("dtype", [F32, F64, I64, np.dtype(np.int32)], ids=str)
def test_topk_matches_torch(dtype) -> None:
    """The k largest (or smallest) along each axis of tensors of rank 1 to 3, k from 0 to the axis's size, as
    torch's `topk(sorted=True)`: values in `x`'s dtype, i64 positions, shapes `x`'s with the axis of size k."""
    rng = np.random.default_rng(11)
    for shape in ((6,), (3, 5), (2, 4, 3)):
        x = rng.permutation(np.prod(shape)).reshape(shape).astype(dtype) - 7  # distinct: torch's order is defined
        tensor = torch.from_numpy(x)
        for axis in range(-len(shape), len(shape)):
            size = shape[axis]
            for k in sorted({0, 1, size // 2, size}):
                for largest in (True, False):
                    expected = torch.topk(tensor, k, dim=axis, largest=largest, sorted=True)
                    values, indices = dl_eval(f"topk(a, {k}, axis={axis}, largest={str(largest).lower()})", x)
                    check(values, expected.values.numpy(), dtype, rtol=0, atol=0)
                    check(indices, expected.indices.numpy(), I64)
        values, indices = dl_eval("topk(a, 2)", x)  # axis=-1 and largest=true by default
        expected = torch.topk(tensor, 2)
        check(values, expected.values.numpy(), dtype, rtol=0, atol=0)
        check(indices, expected.indices.numpy(), I64)


@needs_torch
def test_topk_ties_nan_and_errors() -> None:
    """Ties come lower position first, as a stable sort's first k (torch leaves their order unspecified, so the
    reference is torch's stable sort); nan counts as the largest, as torch's `topk`. A `k` outside 0 to the size, an
    axis out of range, bools and scalars are refused: when checked (E0307, E0306, E0317) and when run (E0513)."""
    x = np.array([[2.0, 1.0, 2.0, 3.0, 1.0], [0.0, 0.0, 0.0, 0.0, 0.0], [1.0, np.nan, 4.0, 1.0, 3.0]], np.float32)
    tensor = torch.from_numpy(x)
    for largest in (True, False):
        stable = torch.sort(tensor, dim=1, descending=largest, stable=True)
        for k in (1, 3, 5):
            values, indices = dl_eval(f"topk(a, {k}, largest={str(largest).lower()})", x)
            np.testing.assert_array_equal(values, stable.values[:, :k].numpy())
            np.testing.assert_array_equal(indices, stable.indices[:, :k].numpy())
    values, indices = dl_eval("topk(a, 2)", x[2])
    expected = torch.topk(tensor[2], 2)
    np.testing.assert_array_equal(values, expected.values.numpy())
    np.testing.assert_array_equal(indices, expected.indices.numpy())
    assert checker_codes("topk(x, 3)") == []
    assert checker_codes("topk(x, 2, axis=0)") == []
    assert checker_codes("topk(x, 4)") == ["E0307"]
    assert checker_codes("topk(x, 3, axis=0)") == ["E0307"]
    assert checker_codes("topk(x, -1)") == ["E0307"]
    assert checker_codes("topk(x, 2.0)") == ["E0301"]
    assert checker_codes("topk(x, 1, axis=2)") == ["E0306"]
    assert checker_codes("topk(x, 1, largest=1)") == ["E0301"]
    assert checker_codes("topk(x > 0.0, 1)") == ["E0317"]
    assert checker_codes("topk(1.0, 1)") == ["E0306"]
    (checked,) = checker_errors("topk(x, 4)")
    assert "`topk` takes `k` from 0 to 3 (the size of axis 1 of f32[2, 3]), found 4" in checked.message
    for expr, args, message in (
        ("topk(a, b)", (x, 6), "`topk` takes `k` from 0 to 5 (the size of axis 1 of f32[3, 5]), found 6"),
        ("topk(a, b, axis=0)", (x, 4), "`topk` takes `k` from 0 to 3 (the size of axis 0 of f32[3, 5]), found 4"),
        ("topk(a, b)", (x, -1), "found -1"),
        ("topk(a, 1, axis=2)", (x,), "axis 2 is out of range"),
        ("topk(a, 1)", (x > 0,), "a bool is not a number"),
        ("topk(a, 1)", (np.float32(1.0),), "needs a tensor with an axis"),
    ):
        failure = runtime_error(expr, *args)
        assert [d.code for d in failure.diagnostics] == ["E0513"] and message in str(failure), str(failure)


def test_add_along_axis_adds_repeated_indices() -> None:
    result = dl_eval("add_along_axis(a, b, c, 1)", np.zeros((2, 3)), np.array([[0, 0], [2, -1]]), np.ones((2, 2)))
    assert result.tolist() == [[2.0, 0.0, 0.0], [0.0, 0.0, 2.0]]


def test_var_of_an_empty_axis_is_an_error() -> None:
    with pytest.raises(DiagnosticError, match="`var` of an empty tensor"):
        dl_eval("var(a, axis=0)", np.zeros((0, 3), np.float32))
    assert dl_eval("std(a, axis=1)", np.zeros((0, 3), np.float32)).shape == (0,)


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_sigmoid_extreme_inputs(dtype) -> None:
    x = np.array([-1e30, -1e4, -1000, -100, -88.8, -20, 0, 20, 88.8, 100, 1000, 1e4, 1e30], dtype=dtype)
    result = dl_eval("sigmoid(a)", x)
    assert np.all(np.isfinite(result))
    check(result, torch.sigmoid(to_torch(x)).numpy(), dtype, rtol=1e-6, atol=1e-30)
    for value in (-1000.0, 1000.0):
        scalar = dl_eval("sigmoid(a)", dtype.type(value))
        check(scalar, torch.sigmoid(torch.tensor(value, dtype=getattr(torch, dtype.name))).numpy(), dtype)


@SETTINGS
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=4), seed=seeds)
def test_maximum_minimum_broadcast(shapes, seed) -> None:
    rng = np.random.default_rng(seed)
    a, b = (dl_value(randn(rng, s)) for s in shapes.input_shapes)
    check(dl_eval("maximum(a, b)", a, b), np.maximum(a, b), F32)
    check(dl_eval("minimum(a, b)", a, b), np.minimum(a, b), F32)
    check(dl_eval("maximum(b, a)", a, b), np.maximum(a, b), F32)


def test_maximum_minimum_with_literals_keep_dtype() -> None:
    x = np.array([-1.5, 0.25, 3.0], dtype=np.float32)
    check(dl_eval("maximum(a, 0)", x), np.maximum(x, 0), F32)
    check(dl_eval("minimum(0, a)", x), np.minimum(x, 0), F32)
    check(dl_eval("maximum(a, 0.5)", x), np.maximum(x, np.float32(0.5)), F32)
    check(dl_eval("minimum(a, 1)", np.arange(-2, 3)), np.minimum(np.arange(-2, 3), 1), I64)
    x64 = x.astype(np.float64)
    check(dl_eval("maximum(a, 0)", x64), np.maximum(x64, 0), F64)
    check(dl_eval("maximum(a, b)", np.float32(2), np.float32(3)), np.float32(3), F32)


@pytest.mark.parametrize(
    "expr",
    [
        "maximum(a, b)",
        "minimum(b, a)",
        "where(a > 0.0, a, b)",
    ],
)
def test_mixed_int_float_elementwise_prims_give_f32(expr: str) -> None:
    x = np.array([-1.5, 0.5, 3.0], dtype=np.float32)
    i = np.array([0, 1, 2])
    expected = {
        "maximum(a, b)": np.maximum(x, i),
        "minimum(b, a)": np.minimum(i, x),
        "where(a > 0.0, a, b)": np.where(x > 0, x, i),
    }[expr]
    check(dl_eval(expr, x, i), expected.astype(np.float32), F32)


@SETTINGS
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=3, max_side=4), seed=seeds)
def test_where_broadcast(shapes, seed) -> None:
    rng = np.random.default_rng(seed)
    cond = dl_value(rng.random(shapes.input_shapes[0]) < 0.5)
    a, b = (dl_value(randn(rng, s)) for s in shapes.input_shapes[1:])
    check(dl_eval("where(a, b, c)", cond, a, b), np.where(cond, a, b), F32)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize(
    "shapes", [((64, 128), (64, 128), (64, 128)), ((64, 128), (128,), ()), ((4096,), (3, 4096), (1,))]
)
def test_where_of_large_tensors_picks_the_very_bits_numpy_does(dtype, shapes) -> None:
    """Large masks take a branchless bit select (interp/primitives.py, `choose`): NaNs, infinities and
    signed zeros come through bit for bit, with numpy's dtype and broadcast shape."""
    rng = np.random.default_rng(len(shapes[1]))
    condition = rng.random(shapes[0]) < 0.5
    a = (rng.standard_normal(shapes[1]) * 100).astype(dtype)
    b = (rng.standard_normal(shapes[2]) * 100).astype(dtype)
    if a.dtype.kind == "f":
        a.flat[:4] = [np.nan, -0.0, np.inf, -np.inf]
    found = dl_eval("where(a, b, c)", condition, a, b)
    expected = np.where(condition, a, b)
    assert (found.dtype, found.shape, found.tobytes()) == (expected.dtype, expected.shape, expected.tobytes())


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("expr", ["where(a, b, 0)", "where(a, 0, b)", "where(a, b, -0.0)", "where(a, b[0], 0)"])
def test_where_between_a_large_tensor_and_zero_picks_numpys_bits(dtype, expr: str) -> None:
    """A derivative's `where(x > 0.0, d, 0.0)` multiplies the bits by the condition (`choose`'s zero case), with
    numpy's values bit for bit (a -0.0 is not a zero of no bits: it takes the general select), its dtype
    and broadcast shape, and the arguments untouched."""
    if dtype is np.int32 and "0.0" in expr:
        expr = expr.replace("-0.0", "-0")
    rng = np.random.default_rng(3)
    condition = rng.random((64, 128)) < 0.5
    b = (rng.standard_normal((64, 128)) * 100).astype(dtype)
    if b.dtype.kind == "f":
        b.flat[:4] = [np.nan, -0.0, np.inf, -np.inf]
    kept = b.copy()
    found = dl_eval(expr, condition, b)
    zero = dtype(-0.0) if "-0" in expr else dtype(0)
    picked = b[0] if "b[0]" in expr else b
    expected = np.where(condition, 0, picked).astype(dtype) if "a, 0," in expr else np.where(condition, picked, zero)
    assert (found.dtype, found.shape, found.tobytes()) == (expected.dtype, expected.shape, expected.tobytes())
    assert b.tobytes() == kept.tobytes()


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("a - c * (b / (sqrt(b * b) + 0.5))", lambda a, b, c: a - c * (b / (np.sqrt(b * b) + np.float32(0.5)))),
        ("(a * 2.0 + c) - exp(a) * c", lambda a, b, c: (a * np.float32(2) + c) - np.exp(a) * c),
        ("-(a + c) / (a * a + 1.0)", lambda a, b, c: -(a + c) / (a * a + np.float32(1))),
        ("(c * 2.0) + a", lambda a, b, c: (c * np.float32(2)) + a),  # the new array is too small to hold it
        ("(a + b) - (a + b)", lambda a, b, c: (a + b) - (a + b)),
    ],
)
def test_arithmetic_into_arrays_it_just_made_gives_numpys_values(expr: str, expected) -> None:
    """Large intermediate results are written over (interp/operators.py, `reusing`); the values are
    numpy's bit for bit, and the arguments are untouched."""
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((2, 64, 128)).astype(np.float32)
    c = rng.standard_normal(128).astype(np.float32)
    kept = (a.copy(), b.copy(), c.copy())
    found = dl_eval(expr, a, b, c)
    assert found.tobytes() == expected(a, b, c).tobytes()
    assert all(np.array_equal(x, y) for x, y in zip((a, b, c), kept, strict=True))


def test_a_function_that_returns_its_argument_is_not_written_over() -> None:
    source = (
        "fn same(x: f32[64, 128]) -> f32[64, 128] { return x }\n"
        "fn main() {\n"
        "    let a = ones(64, 128)\n"
        "    let b = same(a) + a\n"
        "    let c = -(-a) * (a + a)\n"
        "    print(sum(a), sum(b), sum(c))\n"
        "}\n"
    )
    assert dl_main(source) == "8192.0 16384.0 16384.0\n"


def test_where_literals_and_errors() -> None:
    cond = np.array([True, False, True])
    check(dl_eval("where(a, 1.0, 2.0)", cond), np.array([1, 2, 1], np.float32), F32)
    check(dl_eval("where(a, 1, 2)", cond), np.array([1, 2, 1]), I64)
    x = np.array([-1.0, 2.0, -3.0], np.float32)
    check(dl_eval("where(a < 0.0, 0.0, a)", x), np.array([0, 2, 0], np.float32), F32)
    check(dl_eval("where(true, a, b)", np.float32(1), np.float32(2)), np.float32(1), F32)
    runtime_error("where(a, 1.0, 2.0)", np.array([1, 0]))


@pytest.mark.parametrize(
    "expr",
    [
        "where(a, b, c)",
        "maximum(b, c)",
        "minimum(b, c)",
    ],
)
def test_elementwise_prims_with_unbroadcastable_shapes(expr: str) -> None:
    runtime_error(expr, np.array([True, False, True]), np.ones(2, np.float32), np.ones(3, np.float32))


# ======================================================================= reductions

REDUCTION_REFERENCES = {
    Prim.SUM: np.sum,
    Prim.MEAN: np.mean,
    Prim.MAX: np.max,
    Prim.MIN: np.min,
    Prim.ARGMAX: np.argmax,
    Prim.ARGMIN: np.argmin,
}


def numpy_logsumexp(x: np.ndarray, axis=None, keepdims=False) -> np.ndarray:
    wide = x.astype(np.float64)
    peak = np.max(wide, axis=axis, keepdims=True)
    total = np.log(np.sum(np.exp(wide - peak), axis=axis, keepdims=True)) + peak
    if not keepdims:
        total = np.squeeze(total, axis=axis)
    return total.astype(x.dtype)


@pytest.mark.parametrize("prim", [*REDUCTION_REFERENCES, Prim.LOGSUMEXP], ids=lambda p: p.value)
@SETTINGS
@given(shape=nonscalar_shapes, dtype=float_dtypes, seed=seeds)
def test_reduction_every_axis(prim: Prim, shape, dtype, seed) -> None:
    x = randn(np.random.default_rng(seed), shape, dtype)
    rank = x.ndim
    integer_result = prim in (Prim.ARGMAX, Prim.ARGMIN)
    want = I64 if integer_result else dtype
    reference = REDUCTION_REFERENCES.get(prim, numpy_logsumexp)
    # default: over every element, to a scalar
    check(dl_eval(f"{prim.value}(a)", x), reference(x), want)
    for axis in range(-rank, rank):
        for keepdims in (False, True):
            expected = reference(x, axis=axis, keepdims=keepdims)
            check(dl_eval(f"{prim.value}(a, axis=b, keepdims=c)", x, axis, keepdims), expected, want)
    check(dl_eval(f"{prim.value}(a, keepdims=true)", x), reference(x, axis=None, keepdims=True), want)


@pytest.mark.parametrize("prim", [Prim.SUM, Prim.MEAN, Prim.MAX, Prim.MIN, Prim.LOGSUMEXP], ids=lambda p: p.value)
@SETTINGS
@given(
    shape=hnp.array_shapes(min_dims=2, max_dims=4, min_side=1, max_side=4),
    dtype=float_dtypes,
    seed=seeds,
    data=st.data(),
)
def test_reduction_over_several_axes(prim: Prim, shape, dtype, seed, data) -> None:
    """`axis=(i, j, ...)`, in any order and spelled negative or not, reduces those axes as numpy does."""
    x = randn(np.random.default_rng(seed), shape, dtype)
    rank = x.ndim
    axes = data.draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank, unique=True))
    spelled = tuple(axis - rank if data.draw(st.booleans()) else axis for axis in axes)
    reference = REDUCTION_REFERENCES.get(prim, numpy_logsumexp)
    written = "(" + ", ".join(map(str, spelled)) + ("," if len(spelled) == 1 else "") + ")"
    for keepdims in ("false", "true"):
        expected = reference(x, axis=tuple(axes), keepdims=keepdims == "true")
        check(dl_eval(f"{prim.value}(a, axis={written}, keepdims={keepdims})", x), expected, dtype)
        check(dl_eval(f"{prim.value}(a, axis=b, keepdims={keepdims})", x, spelled), expected, dtype)


def test_several_axes_mistakes_at_run_time() -> None:
    x = np.ones((2, 3, 4), np.float32)
    runtime_error("sum(a, axis=b)", x, (1, -2))
    runtime_error("mean(a, axis=b)", x, ())
    runtime_error("max(a, axis=b)", x, (0, 3))
    runtime_error("argmax(a, axis=b)", x, (0, 1))
    runtime_error("argmin(a, axis=b)", x, (0,))


def test_reduction_literal_negative_axis() -> None:
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    check(dl_eval("sum(a, axis=-1)", x), x.sum(axis=-1), F32)
    check(dl_eval("mean(a, axis=-2, keepdims=true)", x), x.mean(axis=-2, keepdims=True), F32)
    check(dl_eval("argmax(a, axis=-3)", x), x.argmax(axis=-3), I64)


def test_reductions_integer_and_bool_inputs() -> None:
    i = np.array([[3, -1, 7], [2, 9, 0]])
    check(dl_eval("sum(a)", i), np.int64(i.sum()), I64)
    check(dl_eval("sum(a, axis=0)", i), i.sum(axis=0), I64)
    check(dl_eval("max(a, axis=1)", i), i.max(axis=1), I64)
    check(dl_eval("min(a)", i), np.int64(-1), I64)
    check(dl_eval("argmax(a)", i), np.int64(4), I64)
    check(dl_eval("argmin(a, axis=1)", i), np.array([1, 2]), I64)
    assert isinstance(dl_eval("argmax(a)", i), int)
    check(dl_eval("sum(a > 2)", i), np.int64(3), I64)


def test_argmax_argmin_ties_pick_first() -> None:
    x = np.array([[1.0, 5.0, 5.0], [2.0, 2.0, 0.0]], np.float32)
    check(dl_eval("argmax(a, axis=1)", x), np.array([1, 0]), I64)
    check(dl_eval("argmin(a, axis=1)", x), np.array([0, 2]), I64)


def test_reductions_of_scalars() -> None:
    check(dl_eval("sum(a)", np.float32(2.5)), np.float32(2.5), F32)
    check(dl_eval("max(a)", np.float32(2.5)), np.float32(2.5), F32)
    check(dl_eval("argmax(a)", np.float32(2.5)), np.int64(0), I64)
    check(dl_eval("logsumexp(a)", np.float32(2.5)), np.float32(2.5), F32)


def test_reductions_of_empty_tensors() -> None:
    empty = np.zeros((0, 3), np.float32)
    check(dl_eval("sum(a)", empty), np.float32(0), F32)
    check(dl_eval("sum(a, axis=0)", empty), np.zeros(3, np.float32), F32)
    check(dl_eval("sum(a, axis=1)", empty), np.zeros(0, np.float32), F32)
    for name in ("mean", "max", "min", "argmax", "argmin"):
        runtime_error(f"{name}(a)", empty)
        runtime_error(f"{name}(a, axis=0)", empty)


@needs_torch
@pytest.mark.parametrize(
    "expr",
    [
        "logsumexp(a, axis=0)",
        "softmax(a, axis=0)",
        "log_softmax(a, axis=0)",
        "softmax(a, axis=1)",
        "logsumexp(a, axis=1)",
    ],
)
def test_normalizers_over_empty_axis_match_torch_or_diagnose(expr: str) -> None:
    """Over a zero-length axis the result must match torch, or be a DL diagnostic, never a Python exception."""
    empty = np.zeros((0, 3), np.float32)
    try:
        result = dl_eval(expr, empty)
    except DiagnosticError as failure:
        assert all(d.code.startswith("E05") for d in failure.diagnostics)
        return
    name, axis = expr.split("(")[0], int(expr[-2])
    function = {"logsumexp": torch.logsumexp, "softmax": torch.softmax, "log_softmax": torch.log_softmax}[name]
    check(result, function(to_torch(empty), axis).numpy(), F32)


@needs_torch
@SETTINGS
@given(shape=nonscalar_shapes, seed=seeds)
def test_logsumexp_matches_torch(shape, seed) -> None:
    x = randn(np.random.default_rng(seed), shape)
    check(dl_eval("logsumexp(a)", x), torch.logsumexp(to_torch(x).flatten(), 0).numpy(), F32)
    for axis in range(-x.ndim, x.ndim):
        expected = torch.logsumexp(to_torch(x), axis, keepdim=True).numpy()
        check(dl_eval("logsumexp(a, axis=b, keepdims=true)", x, axis), expected, F32)


# ======================================================================= softmax family


@needs_torch
@SETTINGS
@given(shape=nonscalar_shapes, dtype=float_dtypes, seed=seeds)
def test_softmax_log_softmax_match_torch(shape, dtype, seed) -> None:
    x = randn(np.random.default_rng(seed), shape, dtype)
    t = to_torch(x)
    check(dl_eval("softmax(a)", x), torch.softmax(t, -1).numpy(), dtype)
    check(dl_eval("log_softmax(a)", x), torch.log_softmax(t, -1).numpy(), dtype, atol=1e-5)
    for axis in range(-x.ndim, x.ndim):
        check(dl_eval("softmax(a, axis=b)", x, axis), torch.softmax(t, axis).numpy(), dtype)
        check(dl_eval("log_softmax(a, axis=b)", x, axis), torch.log_softmax(t, axis).numpy(), dtype, atol=1e-5)


EXTREME = np.array(
    [
        [1000.0, -1000.0, 0.0],
        [-1000.0, -1000.0, -1000.0],
        [1000.0, 1000.0, 999.0],
        [88.8, 89.0, -88.8],
        [1e30, -1e30, 3.0],
    ],
    dtype=np.float32,
)


@needs_torch
@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_normalizers_extreme_inputs_finite_and_match_torch(dtype, axis) -> None:
    x = EXTREME.astype(dtype)
    t = to_torch(x)
    for name, function, atol in (("softmax", torch.softmax, 1e-6), ("log_softmax", torch.log_softmax, 1e-3)):
        result = dl_eval(f"{name}(a, axis=b)", x, axis)
        assert np.all(np.isfinite(result)), f"{name}: {result}"
        check(result, function(t, axis).numpy(), dtype, atol=atol)
    result = dl_eval("logsumexp(a, axis=b)", x, axis)
    assert np.all(np.isfinite(result))
    check(result, torch.logsumexp(t, axis).numpy(), dtype)
    whole = dl_eval("logsumexp(a)", x)
    check(whole, torch.logsumexp(t.flatten(), 0).numpy(), dtype)
    check(dl_eval("softmax(a)", x[0]), torch.softmax(t[0], 0).numpy(), dtype)


@needs_torch
def test_logsumexp_infinities_match_torch() -> None:
    x = np.array([[-np.inf, 0.0], [-np.inf, -np.inf], [np.inf, 1.0]], np.float32)
    check(dl_eval("logsumexp(a, axis=1)", x), torch.logsumexp(to_torch(x), 1).numpy(), F32)
    check(dl_eval("softmax(a, axis=1)", x[:1]), torch.softmax(to_torch(x[:1]), 1).numpy(), F32)


def test_softmax_rejects_integers_and_bad_axes() -> None:
    runtime_error("softmax(a)", np.arange(3))
    runtime_error("log_softmax(a)", np.arange(3))
    runtime_error("logsumexp(a)", np.arange(3))
    runtime_error("softmax(a, axis=2)", np.ones((2, 2), np.float32))


@needs_torch
def test_softmax_of_a_scalar_is_one_as_in_torch() -> None:
    """A scalar is one class: its axis 0 (or -1) is itself, as torch.softmax(tensor(2.0), dim=-1) == 1."""
    x = torch.tensor(2.0)
    check(dl_eval("softmax(a)", np.float32(2.0)), torch.softmax(x, dim=-1).numpy())
    check(dl_eval("log_softmax(a, axis=0)", np.float32(2.0)), torch.log_softmax(x, dim=0).numpy())


# ======================================================================= matmul

MATMUL_SHAPES = [
    ((3, 4), (4, 5)),
    ((2, 3, 4), (4, 5)),  # batched @ matrix
    ((5, 2, 3, 4), (4, 1)),
    ((2, 3, 4), (2, 4, 5)),
    ((2, 1, 3, 4), (5, 4, 2)),  # batch broadcasting
    ((1, 3, 4), (6, 4, 2)),
    ((3, 4), (4,)),  # matvec
    ((4,), (4, 5)),  # vecmat
    ((4,), (4,)),  # dot -> scalar
    ((4,), (2, 4, 3)),
    ((2, 3, 4), (4,)),
    ((1, 1), (1, 1)),
    ((0, 4), (4, 3)),  # empty rows
    ((3, 0), (0, 2)),  # empty inner dimension
]


@needs_torch
@pytest.mark.parametrize("shape_a,shape_b", MATMUL_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_matmul_shapes_match_numpy_and_torch(shape_a, shape_b, dtype) -> None:
    rng = np.random.default_rng(hash((shape_a, shape_b)) % 2**32)
    a, b = randn(rng, shape_a, dtype), randn(rng, shape_b, dtype)
    expected = np.matmul(a, b)
    rtol = 1e-5 if dtype == F32 else 1e-12
    for expr in ("a @ b", "matmul(a, b)"):
        result = dl_eval(expr, a, b)
        check(result, expected, dtype, rtol=rtol, atol=1e-5)
        check(result, torch.matmul(to_torch(a), to_torch(b)).numpy(), dtype, rtol=rtol, atol=1e-5)


EINSUM_CASES = [
    # spec, operand shapes
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bhtd,bhsd->bhts", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("ij->ji", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("ijk->kj", [(2, 3, 4)]),
    ("i,j->ij", [(3,), (4,)]),
    ("i,i->", [(5,), (5,)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    (",ij->ij", [(), (2, 3)]),
    ("ij,ik->", [(3, 2), (3, 4)]),
    ("abc, cd -> dba", [(2, 3, 4), (4, 2)]),
]


@needs_torch
@pytest.mark.parametrize("spec,shapes", EINSUM_CASES, ids=[spec for spec, _ in EINSUM_CASES])
@pytest.mark.parametrize("dtype", [F32, F64, I64], ids=str)
def test_einsum_matches_numpy_and_torch(spec, shapes, dtype) -> None:
    rng = np.random.default_rng(len(spec))
    operands = [dl_value(randn(rng, shape).astype(dtype)) for shape in shapes]
    names = ", ".join("abcdefgh"[: len(operands)])
    result = dl_eval(f'einsum("{spec}", {names})', *operands)
    expected = torch.einsum(spec.replace(" ", ""), *[to_torch(x) for x in operands]).numpy()
    check(result, np.einsum(spec.replace(" ", ""), *operands), dtype, rtol=1e-5 if dtype == F32 else 1e-12)
    check(result, expected, dtype, rtol=1e-5 if dtype == F32 else 1e-12)


def test_einsum_mistakes_at_run_time() -> None:
    a, b = np.ones((2, 3), np.float32), np.ones((4, 5), np.float32)
    runtime_error('einsum("ij,jk->ik", a, b)', a, b)  # j is 3 and 4
    runtime_error('einsum("ij,jk->ik", a, b)', a, np.ones((1, 5), np.float32))  # numpy would broadcast the 1
    runtime_error('einsum("ijk->i", a)', a)
    runtime_error('einsum("ij,jk->ik", a)', a)
    runtime_error('einsum("ii->i", a)', np.ones((2, 2), np.float32))
    runtime_error('einsum("...i->i", a)', a)
    runtime_error('einsum("ij", a)', a)
    runtime_error('einsum("ij,ij->ij", a, b)', a, a.astype(np.float64))
    runtime_error('einsum("ij->k", a)', a)


def test_matmul_integer_and_mixed_dtypes() -> None:
    i = np.arange(6).reshape(2, 3)
    j = np.arange(3)
    check(dl_eval("a @ b", i, j), i @ j, I64)
    x = np.ones((3, 2), np.float32)
    check(dl_eval("a @ b", i, x), i.astype(np.float32) @ x, F32)
    check(dl_eval("b @ a", i, x), x @ i.astype(np.float32), F32)


def test_matmul_primitive_mixed_dtypes_give_f32() -> None:
    i = np.arange(6).reshape(2, 3)
    x = np.ones((3, 2), np.float32)
    check(dl_eval("matmul(a, b)", i, x), i.astype(np.float32) @ x, F32)


@pytest.mark.parametrize(
    "shape_a,shape_b",
    [
        ((3, 4), (5, 6)),
        ((4,), (3,)),
        ((2, 3, 4), (5, 6)),
        ((3,), (2, 4, 3)),
        ((2, 3, 4), (3, 4, 5)),
        ((2, 3, 4), (2, 3, 4, 5)),
    ],
    ids=str,
)
def test_matmul_shape_mismatch_is_a_diagnostic(shape_a, shape_b) -> None:
    a, b = np.ones(shape_a, np.float32), np.ones(shape_b, np.float32)
    runtime_error("a @ b", a, b)
    runtime_error("matmul(a, b)", a, b)


def test_matmul_rejects_scalars() -> None:
    runtime_error("a @ b", np.float32(2), np.ones(3, np.float32))
    runtime_error("matmul(a, b)", np.ones(3, np.float32), np.float32(2))


# ======================================================================= structure


@SETTINGS
@given(shape=shapes, seed=seeds, data=st.data())
def test_transpose(shape, seed, data) -> None:
    x = randn(np.random.default_rng(seed), shape)
    if x.ndim:
        check(dl_eval("transpose(a)", x), x.T, F32)
        permutation = data.draw(st.permutations(range(x.ndim)))
        args = ", ".join(str(p) for p in permutation)
        check(dl_eval(f"transpose(a, {args})", x), np.transpose(x, permutation), F32)


@needs_torch
@SETTINGS
@given(shape=nonscalar_shapes, seed=seeds, data=st.data())
def test_swapaxes_matches_torch_transpose(shape, seed, data) -> None:
    x = randn(np.random.default_rng(seed), shape)
    axes = st.integers(-x.ndim, x.ndim - 1)
    first, second = data.draw(axes), data.draw(axes)
    check(dl_eval(f"swapaxes(a, {first}, {second})", x), torch.transpose(to_torch(x), first, second).numpy(), F32)


def test_swapaxes_errors() -> None:
    x = np.ones((2, 3), np.float32)
    runtime_error("swapaxes(a, 0, 2)", x)
    runtime_error("swapaxes(a, -3, 0)", x)
    runtime_error("swapaxes(a, 0, 1.0)", x)
    runtime_error("swapaxes(a, 0, 0)", np.float32(1.0))


@pytest.mark.parametrize("expr", ["transpose(a)", "broadcast_to(a)"])
def test_structure_of_scalar_stays_scalar(expr: str) -> None:
    check(dl_eval(expr, np.float32(2.5)), np.float32(2.5), F32)
    assert dl_run(f"let t = {expr.replace('(a)', '(true)')}\nif t {{ return 1 }}\nreturn 2") == 1


def test_transpose_errors() -> None:
    x = np.ones((2, 3), np.float32)
    runtime_error("transpose(a, 0, 0)", x)
    runtime_error("transpose(a, 0)", x)
    runtime_error("transpose(a, 0, 1, 2)", x)
    runtime_error("transpose(a, 2, 0)", x)


@SETTINGS
@given(shape=nonscalar_shapes, seed=seeds, data=st.data())
def test_reshape(shape, seed, data) -> None:
    x = randn(np.random.default_rng(seed), shape)
    target = data.draw(st.permutations(list(shape)))
    check(dl_eval("reshape(a, " + ", ".join(map(str, target)) + ")", x), x.reshape(target), F32)
    hole = data.draw(st.integers(0, len(target) - 1))
    with_hole = [-1 if k == hole else d for k, d in enumerate(target)]
    check(dl_eval("reshape(a, " + ", ".join(map(str, with_hole)) + ")", x), x.reshape(target), F32)
    check(dl_eval("reshape(a, -1)", x), x.reshape(-1), F32)
    check(dl_eval("reshape(a, 1, -1, 1)", x), x.reshape(1, -1, 1), F32)


def test_reshape_edges() -> None:
    check(dl_eval("reshape(a, 1, 1)", np.float32(3)), np.full((1, 1), 3, np.float32), F32)
    check(dl_eval("reshape(a, 0, 5)", np.zeros((5, 0), np.float32)), np.zeros((0, 5), np.float32), F32)
    check(dl_eval("reshape(a, 2, -1)", np.arange(6)), np.arange(6).reshape(2, 3), I64)
    check(dl_eval("reshape(a, b, c)", np.arange(6), 3, 2), np.arange(6).reshape(3, 2), I64)
    with_scalar = dl_eval("reshape(a, 1)", np.float32(4))
    check(with_scalar, np.array([4], np.float32), F32)


@pytest.mark.parametrize("dims", ["2, 2", "7", "4, -1", "-1, -1", "0, -1", "-2, 3", "2.0, 3", "2, 3, 2"])
def test_reshape_errors(dims: str) -> None:
    runtime_error(f"reshape(a, {dims})", np.ones((2, 3), np.float32))


@SETTINGS
@given(shape=nonscalar_shapes, seed=seeds, data=st.data())
def test_concat(shape, seed, data) -> None:
    rng = np.random.default_rng(seed)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    sizes = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=3))
    parts = []
    for size in sizes:
        part_shape = list(shape)
        part_shape[axis] = size
        parts.append(randn(rng, tuple(part_shape)))
    names = ", ".join("abc"[: len(parts)])
    tuple_text = f"({names},)" if len(parts) == 1 else f"({names})"
    expected = np.concatenate(parts, axis=axis)
    check(dl_eval(f"concat({tuple_text}, axis={axis})", *parts), expected, F32)
    if axis == 0:
        check(dl_eval(f"concat({tuple_text})", *parts), expected, F32)


def test_concat_integers_and_errors() -> None:
    check(dl_eval("concat((a, b))", np.arange(2), np.arange(3)), np.concatenate([np.arange(2), np.arange(3)]), I64)
    a, b = np.ones((2, 3), np.float32), np.ones((2, 4), np.float32)
    runtime_error("concat((a, b), axis=0)", a, b)
    runtime_error("concat((a, b), axis=2)", a, b)
    runtime_error("concat((a, b))", a, np.ones(3, np.float32))
    runtime_error("concat(a)", a)
    runtime_error("concat((a, b), axis=1.5)", a, b)


def test_concat_of_scalars_is_a_diagnostic() -> None:
    runtime_error("concat((1.0, 2.0), axis=0)")


@SETTINGS
@given(shape=shapes, seed=seeds, data=st.data())
def test_stack(shape, seed, data) -> None:
    rng = np.random.default_rng(seed)
    count = data.draw(st.integers(1, 3))
    parts = [randn(rng, shape) for _ in range(count)]
    axis = data.draw(st.integers(-len(shape) - 1, len(shape)))
    names = ", ".join("abc"[:count])
    tuple_text = f"({names},)" if count == 1 else f"({names})"
    args = [dl_value(p) for p in parts]
    check(dl_eval(f"stack({tuple_text}, axis={axis})", *args), np.stack(parts, axis=axis), F32)
    check(dl_eval(f"stack({tuple_text})", *args), np.stack(parts), F32)


def test_stack_errors() -> None:
    a = np.ones((2, 3), np.float32)
    runtime_error("stack((a, b))", a, np.ones(3, np.float32))
    runtime_error("stack((a, b), axis=3)", a, a)
    runtime_error("stack((a, b), axis=-4)", a, a)
    runtime_error("stack(a)", a)


def test_stack_rejects_float_axis() -> None:
    a = np.ones((2, 3), np.float32)
    runtime_error("stack((a, b), axis=1.5)", a, a)


@SETTINGS
@given(shape=shapes, seed=seeds, data=st.data())
def test_broadcast_to(shape, seed, data) -> None:
    x = dl_value(randn(np.random.default_rng(seed), shape))
    target = [data.draw(st.integers(0, 3)) if d == 1 else d for d in shape]
    target = data.draw(st.lists(st.integers(1, 3), max_size=2)) + target
    expected = np.broadcast_to(np.asarray(x), target)
    if target:
        check(dl_eval("broadcast_to(a, " + ", ".join(map(str, target)) + ")", x), expected, F32)


def test_broadcast_to_value_semantics_and_errors() -> None:
    x = np.array([1.0, 2.0, 3.0], np.float32)
    updated = dl_run("let y = broadcast_to(a, 2, 3)\ny[0, 1] = 9.0\nreturn (a, y)", x)
    np.testing.assert_array_equal(updated[0], [1, 2, 3])
    np.testing.assert_array_equal(updated[1], [[1, 9, 3], [1, 2, 3]])
    check(dl_eval("broadcast_to(a, 2, 3)", np.float32(7)), np.full((2, 3), 7, np.float32), F32)
    runtime_error("broadcast_to(a, 2, 2)", x)
    runtime_error("broadcast_to(a, 3, 1)", np.ones((3, 2), np.float32))
    runtime_error("broadcast_to(a, -1)", x)


@SETTINGS
@given(
    shape=nonscalar_shapes,
    index_shape=hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=3),
    seed=seeds,
    data=st.data(),
)
def test_gather_matches_take(shape, index_shape, seed, data) -> None:
    rng = np.random.default_rng(seed)
    x = randn(rng, shape)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    size = shape[axis]
    indices = dl_value(rng.integers(-size, size, size=index_shape))
    check(dl_eval("gather(a, b, axis=c)", x, indices, axis), np.take(x, indices, axis=axis), F32)
    if axis == 0:
        check(dl_eval("gather(a, b)", x, indices), np.take(x, indices, axis=0), F32)


@needs_torch
@SETTINGS
@given(shape=nonscalar_shapes, seed=seeds, data=st.data())
def test_gather_matches_torch_index_select(shape, seed, data) -> None:
    rng = np.random.default_rng(seed)
    x = randn(rng, shape)
    axis = data.draw(st.integers(0, len(shape) - 1))
    indices = rng.integers(0, shape[axis], size=data.draw(st.integers(0, 5)))
    expected = torch.index_select(to_torch(x), axis, to_torch(indices)).numpy()
    check(dl_eval("gather(a, b, axis=c)", x, indices, axis), expected, F32)


def test_gather_dtypes_and_errors() -> None:
    table = np.arange(12).reshape(3, 4)
    check(dl_eval("gather(a, 2)", table), table[2], I64)
    check(dl_eval("gather(a, -1, axis=1)", table), table[:, -1], I64)
    check(dl_eval("gather(gather(a, 1), 3)", table), np.int64(7), I64)
    runtime_error("gather(a, 3)", table)
    runtime_error("gather(a, -4)", table)
    runtime_error("gather(a, b, axis=1)", table, np.array([[0, 4]]))
    runtime_error("gather(a, b)", table, np.array([0.0, 1.0], np.float32))
    runtime_error("gather(a, b)", table, np.array([True]))
    runtime_error("gather(a, 0, axis=2)", table)


def test_gather_on_scalar_is_a_diagnostic() -> None:
    runtime_error("gather(3.0, 0)")


@needs_torch
@SETTINGS
@given(
    label_shape=hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=4), classes=st.integers(1, 6), seed=seeds
)
def test_one_hot_matches_torch(label_shape, classes, seed) -> None:
    labels = dl_value(np.random.default_rng(seed).integers(0, classes, size=label_shape))
    expected = torch.nn.functional.one_hot(torch.as_tensor(np.asarray(labels)), classes).float().numpy()
    check(dl_eval("one_hot(a, b)", labels, classes), expected, F32)
    check(dl_eval(f"one_hot(a, {classes})", labels), expected, F32)


def test_one_hot_errors() -> None:
    runtime_error("one_hot(a, 3)", np.array([0, 3]))
    runtime_error("one_hot(a, 3)", np.array([-1]))
    runtime_error("one_hot(a, -1)", np.array([0]))
    runtime_error("one_hot(a, 3)", np.array([0.0], np.float32))


@needs_torch
@SETTINGS
@given(
    shape=hnp.array_shapes(min_dims=2, max_dims=4, min_side=1, max_side=5),
    k=st.integers(-6, 6),
    dtype=st.sampled_from([F32, F64, I64, BOOL]),
    seed=seeds,
)
def test_tril_triu_match_torch(shape, k, dtype, seed) -> None:
    x = randn(np.random.default_rng(seed), shape).astype(dtype)
    check(dl_eval("tril(a, b)", x, k), torch.tril(to_torch(x), k).numpy(), dtype)
    check(dl_eval("triu(a, k=b)", x, k), torch.triu(to_torch(x), k).numpy(), dtype)
    check(dl_eval("tril(a)", x), torch.tril(to_torch(x)).numpy(), dtype)


def test_tril_triu_errors() -> None:
    runtime_error("tril(a)", np.arange(3.0))  # numpy would make a matrix of the vector
    runtime_error("triu(a)", 2.0)
    runtime_error("tril(a, 1.0)", np.eye(2))


# ======================================================================= creation

DIMS = st.lists(st.integers(0, 4), min_size=0, max_size=3)
CREATION_DTYPES = {"f32": F32, "f64": F64, "i64": I64, "i32": np.dtype(np.int32), "bool": BOOL}


@SETTINGS
@given(dims=DIMS)
def test_zeros_ones_full(dims) -> None:
    args = ", ".join(map(str, dims))
    sep = ", " if dims else ""
    check(dl_eval(f"zeros({args})"), np.zeros(dims, np.float32), F32)
    check(dl_eval(f"ones({args})"), np.ones(dims, np.float32), F32)
    check(dl_eval(f"full({args}{sep}value=0.5)"), np.full(dims, 0.5, np.float32), F32)
    check(dl_eval(f"full({args}{sep}value=3)"), np.full(dims, 3, np.float32), F32)
    # a float would be cut to an integer (1e30 did not fit at all): refused before running
    assert checker_codes(f"full({args}{sep}value=1.5, dtype=i64)") == ["E0317"]
    assert checker_codes(f"full({args}{sep}value=x, dtype=i32)", "x: f64") == ["E0317"]
    for name, dtype in CREATION_DTYPES.items():
        check(dl_eval(f"zeros({args}{sep}dtype={name})"), np.zeros(dims, dtype), dtype)
        check(dl_eval(f"ones({args}{sep}dtype={name})"), np.ones(dims, dtype), dtype)
    check(dl_eval(f"full({args}{sep}value=-2.25, dtype=f64)"), np.full(dims, -2.25), F64)
    check(dl_eval(f"full({args}{sep}value=7, dtype=i64)"), np.full(dims, 7), I64)


def test_creation_dims_from_values_and_errors() -> None:
    check(dl_eval("zeros(a, b)", 2, 3), np.zeros((2, 3), np.float32), F32)
    check(dl_eval("ones(len(a))", np.ones(4)), np.ones(4, np.float32), F32)
    for expr in ("zeros(-1)", "zeros(2.0)", "ones(2, dtype=3)", "full(2)", "ones(true)"):
        runtime_error(expr)


def test_arange() -> None:
    for n in (0, 1, 5):
        check(dl_eval(f"arange({n})"), np.arange(n), I64)
    check(dl_eval("arange(2, 7)"), np.arange(2, 7), I64)
    check(dl_eval("arange(-3, 2)"), np.arange(-3, 2), I64)
    check(dl_eval("arange(5, 2)"), np.arange(5, 2), I64)
    check(dl_eval("arange(a)", 4), np.arange(4), I64)
    check(dl_eval("arange(5, dtype=f32)"), np.arange(5), F32, rtol=0, atol=0)
    check(dl_eval("arange(1, 10, 3, dtype=f64)"), np.arange(1, 10, 3), F64, rtol=0, atol=0)
    runtime_error("arange(true)")
    runtime_error("arange(1, 5, 0)")


def test_arange_of_floats_counts_as_torch_and_numpy() -> None:
    """A float bound counts in floats: `ceil((b - a) / step)` values `a + i step`, f32 unless a bound is f64."""
    torch = pytest.importorskip("torch")
    check(dl_eval("arange(2.5)"), torch.arange(2.5).numpy(), F32, rtol=0, atol=0)
    check(dl_eval("arange(1, 2.5)"), torch.arange(1, 2.5).numpy(), F32, rtol=0, atol=0)
    check(dl_eval("arange(0.0, 1.0, 0.25)"), torch.arange(0.0, 1.0, 0.25).numpy(), F32, rtol=0, atol=0)
    check(dl_eval("arange(1.0, -0.5, -0.5)"), torch.arange(1.0, -0.5, -0.5).numpy(), F32, rtol=0, atol=0)
    check(dl_eval("arange(1.0, 1.0)"), np.zeros(0, np.float32), F32)
    check(dl_eval("arange(1.0, 0.0)"), np.zeros(0, np.float32), F32)
    for bounds in [(0.0, 1.0, 0.1), (-1.3, 2.9, 0.7), (5.0, -3.2, -1.1), (0.0, 0.3, 0.1)]:
        expected = np.arange(*bounds)  # numpy's `a + i step`; torch's differs from it in the last bit at times
        found = dl_eval("arange(a, b, c)", *map(np.float64, bounds))
        check(found, expected, F64, rtol=0, atol=0)
        np.testing.assert_allclose(found, torch.arange(*bounds, dtype=torch.float64).numpy(), rtol=1e-15, atol=1e-15)
        check(dl_eval("arange(a, b, c, dtype=f32)", *map(np.float64, bounds)), expected.astype(np.float32), F32)
    # a step of 0, to infinity, nan, more f32 steps than an f32 holds (its count was an internal error)
    for bounds in ["0.0, 1.0, 0.0", "0.0, 1e400", "0.0 * 1e400", "-3e38, 3e38, 1e37"]:
        runtime_error(f"arange({bounds})")


def test_arange_counts_its_steps_in_its_bounds_dtype_as_numpy() -> None:
    """`ceil((b - a) / step)` in the bounds' dtype, as numpy's `arange` of such scalars: the f32 0.3 and 0.1
    make three steps (in f64, 3.0000000745: four, the last the stop itself once rounded). Integer bounds count
    as integers whatever `dtype=` says (16777217 steps of 1 are 16777217, though f32 cannot hold 16777217)."""
    for a, b, step in itertools.product([0.0, 0.1, -1.3, 5.0], [0.3, 1.2, 2.9, -3.2], [0.1, 0.2, -0.3, 0.7, -1.1]):
        for kind, dtype in ((np.float32, F32), (np.float64, F64)):
            expected = np.arange(kind(a), kind(b), kind(step))  # numpy adds an f32 step rounded again: 3e-6 off
            found = dl_eval("arange(a, b, c)", kind(a), kind(b), kind(step))
            check(found, expected, dtype, rtol=1e-5, atol=1e-5)
    assert len(dl_eval("arange(0.0, 0.3, 0.1)")) == len(dl_eval("arange(0.0, 1.2, 0.1)")) - 9 == 3
    check(dl_eval("arange(16777215, 16777219, dtype=f32)"), np.arange(16777215, 16777219).astype(np.float32), F32)


@pytest.mark.parametrize("name", ["randn", "rand"])
@SETTINGS
@given(dims=DIMS, seed=st.integers(0, 2**31 - 1))
def test_random_seeded_reproducible(name, dims, seed) -> None:
    args = ", ".join([*map(str, dims), f"seed={seed}"])
    first, second = dl_eval(f"{name}({args})"), dl_eval(f"{name}({args})")
    check(first, np.asarray(second), F32, rtol=0, atol=0)
    wide = dl_eval(f"{name}({args}, dtype=f64)")
    assert dtype_of(wide) == F64 and np.shape(wide) == tuple(dims)
    if name == "rand":
        assert np.all((np.asarray(first) >= 0) & (np.asarray(first) < 1))


@pytest.mark.parametrize("name", ["randn", "rand"])
def test_random_seeds_differ_and_statistics(name) -> None:
    a = dl_eval(f"{name}(10000, seed=1)")
    b = dl_eval(f"{name}(10000, seed=2)")
    assert not np.array_equal(a, b)
    check(a, np.asarray(dl_eval(f"{name}(100, 100, seed=1)")).reshape(-1), F32, rtol=0, atol=0)
    mean, std = float(np.mean(a)), float(np.std(a))
    if name == "randn":
        assert abs(mean) < 0.05 and abs(std - 1) < 0.05
    else:
        assert abs(mean - 0.5) < 0.02 and abs(std - (1 / 12) ** 0.5) < 0.02
        assert a.min() >= 0 and a.max() < 1
    assert dtype_of(dl_eval(f"{name}(seed=3)")) == F32 and np.ndim(dl_eval(f"{name}(seed=3)")) == 0


def test_random_unseeded_draws_differ_within_a_run_and_repeat_across_runs() -> None:
    source = "fn main() {\n    print(randn(3))\n    print(randn(3))\n    print(rand(2, dtype=f64))\n}\n"
    first = dl_main(source)
    assert first == dl_main(source)
    lines = first.splitlines()
    assert lines[0] != lines[1]


def test_random_errors() -> None:
    runtime_error("randn(2, dtype=i64)")
    runtime_error("rand(2, dtype=bool)")
    runtime_error("randn(-2, seed=1)")


@needs_torch
@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_categorical_draws_each_category_as_often_as_its_probability(dtype) -> None:
    """20000 draws per row: each category's frequency is within 4.5 standard deviations of its softmax
    probability (seeded, so the test is fixed); a category of logit -inf is never drawn."""
    logits = np.array([[0.0, 1.0, 2.0, -np.inf], [3.0, -1.0, 0.5, 0.0], [-np.inf, 5.0, -np.inf, 5.0]], dtype)
    rows = 20000
    many = np.broadcast_to(logits, (rows, *logits.shape)).copy()
    samples = dl_eval("categorical(a, seed=7)", many)
    assert samples.shape == (rows, 3) and samples.dtype == I64
    probabilities = torch.softmax(torch.tensor(logits, dtype=torch.float64), -1).numpy()
    for row in range(3):
        counts = np.bincount(samples[:, row], minlength=4) / rows
        spread = np.sqrt(probabilities[row] * (1 - probabilities[row]) / rows)
        assert np.all(np.abs(counts - probabilities[row]) <= 4.5 * spread + 1e-12), (row, counts)
        assert np.all(counts[probabilities[row] == 0] == 0)


def test_categorical_seeds_streams_and_shapes() -> None:
    logits = np.random.default_rng(0).standard_normal((4, 3, 6)).astype(np.float32)
    first = dl_eval("categorical(a, seed=2)", logits)
    assert first.shape == (4, 3) and first.dtype == I64 and first.min() >= 0 and first.max() < 6
    np.testing.assert_array_equal(dl_eval("categorical(a, seed=2)", logits), first)
    assert dl_eval("categorical(a, seed=1)", np.array([0.0, -np.inf, 0.0])) in (0, 2)
    assert isinstance(dl_eval("categorical(a, seed=1)", np.array([0.0, 1.0])), int)
    draws = dl_run("let x = categorical(a)\n    let y = categorical(a)\n    return (x, y)", np.zeros((50, 8)))
    assert not np.array_equal(*draws), "successive unseeded draws continue one stream"


def test_categorical_mistakes_at_run_time() -> None:
    runtime_error("categorical(a)", np.array([1, 2]))
    runtime_error("categorical(a)", np.float32(1.0))
    runtime_error("categorical(a)", np.array([[0.0, 1.0], [-np.inf, -np.inf]]))
    runtime_error("categorical(a)", np.array([np.nan, 1.0]))
    runtime_error("categorical(a, seed=-1)", np.array([0.0, 1.0]))


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_dropout_is_torch_s_inverted_dropout_with_rand_s_mask(dtype) -> None:
    """The mask is `rand(n, seed=s) >= p` over the flattened `x` (so a seed always drops the same elements); the
    kept elements are scaled by 1 / (1 - p), in `x`'s dtype, as torch.nn.functional.dropout does."""
    x = randn(np.random.default_rng(5), (30, 40, 5), dtype) + dtype.type(20)
    p = 0.3
    out = dl_eval("dropout(a, b, seed=11)", x, p)
    draws = dl_eval("rand(a, seed=11)", x.size).reshape(x.shape)
    kept = draws >= np.float32(p)
    check(out, np.where(kept, x, 0) / (dtype.type(1) - dtype.type(p)), dtype, rtol=1e-6 if dtype == F32 else 1e-15)
    assert np.mean(kept) == pytest.approx(1 - p, abs=0.01)
    check(dl_eval("dropout(a, 0.5, seed=1, training=false)", x), x, dtype)
    check(dl_eval("dropout(a, 1.0, seed=1)", x), np.zeros_like(x), dtype)
    check(dl_eval("dropout(a, 0, seed=1)", x), x, dtype)
    check(dl_eval("dropout(a, 0.5, seed=3)", dtype.type(4)), dl_eval("dropout(a, 0.5, seed=3)", dtype.type(4)), dtype)


@pytest.mark.parametrize("backend", ["interp", "llvm"])
def test_a_literal_dropout_rate_takes_the_data_s_dtype(backend: str) -> None:
    """`dropout(x, 0.3)` of f64 data scales by the f64 1 / (1 - 0.3), as torch does: the literal was an f32
    0.3, and the kept elements 1.4285714528998554 (found by a first-hour probe)."""
    source = "fn f(x: f64[1000]) -> f64[1000] {\n    return dropout(x, 0.3, seed=5)\n}\n"
    from dl import pipeline

    out = pipeline.call(pipeline.load("rate.dl", source), "f", [np.ones(1000)], backend=backend)
    kept = out[out != 0]
    assert 600 < kept.size < 800
    assert np.all(kept == 1 / (1 - 0.3))


def test_dropout_mistakes_at_run_time() -> None:
    x = np.ones((2, 3), np.float32)
    runtime_error("dropout(a, 1.5, seed=0)", x)
    runtime_error("dropout(a, -0.1, seed=0)", x)
    runtime_error("dropout(a, 0.5, seed=-2)", x)
    runtime_error("dropout(a, 0.5, seed=0)", np.ones(3, np.int64))
    runtime_error("dropout(a, 0.5, seed=0, training=1)", x)


@pytest.mark.parametrize("name", ["randn", "rand"])
def test_random_negative_seed_is_a_diagnostic(name) -> None:
    runtime_error(f"{name}(2, seed=-1)")


@pytest.mark.parametrize("name", ["randn", "rand"])
def test_random_dtype_error_names_the_primitive(name) -> None:
    message = str(runtime_error(f"{name}(2, dtype=i64)"))
    assert "standard_normal" not in message and "`random`" not in message


# ======================================================================= inspection and conversion


@SETTINGS
@given(shape=shapes)
def test_shape_and_len(shape) -> None:
    x = dl_value(np.zeros(shape, np.float32))
    result = dl_eval("shape(a)", x)
    assert result == shape and isinstance(result, tuple) and all(type(n) is int for n in result)
    if shape:
        length = dl_eval("len(a)", x)
        assert length == shape[0] and type(length) is int
    else:
        runtime_error("len(a)", x)


def test_shape_len_edges() -> None:
    assert dl_eval("shape(a)", np.zeros((0, 3))) == (0, 3)
    assert dl_eval("len(a)", np.zeros((0, 3))) == 0
    assert dl_eval("shape(3)") == ()
    assert dl_eval("len((1, 2.0, true))") == 3
    runtime_error("len(3)")


def test_float_conversion() -> None:
    i = np.array([-2, 0, 7])
    check(dl_eval("float(a)", i), i.astype(np.float32), F32)
    check(dl_eval("float(a, dtype=f64)", i), i.astype(np.float64), F64)
    check(dl_eval("float(a)", np.array([True, False])), np.array([1, 0], np.float32), F32)
    check(dl_eval("float(a)", np.array([1.5], np.float64)), np.array([1.5], np.float32), F32)
    check(dl_eval("float(3)"), np.float32(3), F32)
    check(dl_eval("float(3, dtype=f64)"), np.float64(3), F64)
    check(dl_eval("float(a)", np.float64(0.1)), np.float32(0.1), F32)
    check(dl_eval("float(true)"), np.float32(1), F32)
    runtime_error("float(a, dtype=i64)", 1)
    runtime_error("float(a, dtype=3)", 1)


def test_int_conversion_truncates() -> None:
    x = np.array([-2.7, -0.5, 0.0, 0.5, 2.7, 1e9], np.float32)
    check(dl_eval("int(a)", x), np.trunc(x).astype(np.int64), I64)
    result = dl_eval("int(a)", np.float32(-2.7))
    assert result == -2 and type(result) is int
    assert dl_eval("int(2.9)") == 2
    check(dl_eval("int(a)", np.array([True, False])), np.array([1, 0]), I64)
    check(dl_eval("int(a)", np.array([3, -4], np.int32)), np.array([3, -4]), I64)
    assert dl_eval("int(true)") == 1
    for bad in (np.float32("nan"), np.float32("inf"), np.array([1.0, np.inf], np.float32)):
        runtime_error("int(a)", bad)


@pytest.mark.parametrize("value", [np.float32(1e30), np.array([1e30], np.float32)], ids=["scalar", "tensor"])
def test_int_out_of_range_is_a_diagnostic(value) -> None:
    runtime_error("int(a)", value)


# ======================================================================= effects


def test_time_reads_a_monotonic_clock_at_every_call() -> None:
    """`time()` is f64 seconds, never decreasing, read anew by each call (never computed once for a call site):
    a call site in a loop gives as many readings as the loop runs, and work between two readings shows."""
    before = time.perf_counter()
    readings = dl_run(
        "let out = zeros(200, dtype=f64)\n"
        "    for i in 0..200 {\n"
        "        let w = sum(ones(2000) * float(i))\n"
        "        out[i] = time()\n"
        "    }\n"
        "    return out"
    )
    after = time.perf_counter()
    assert readings.dtype == F64 and np.all(np.diff(readings) >= 0)
    assert before <= readings[0] and readings[-1] <= after
    assert len(np.unique(readings)) > 100, "a call site is read anew every time it runs"
    assert dtype_of(dl_eval("time()")) == F64


def test_time_is_kept_in_derivative_code() -> None:
    """A reading nothing uses is still taken where the program takes it: autodiff's pruning keeps it, like an
    effect (tests/test_llvm.py checks that compiled code leaves it to the interpreter)."""
    from dl import pipeline
    from dl.lang.printer import print_module

    source = "fn f(x) {\n    let start = time()\n    let y = sum(x * x)\n    let unused = time()\n    return y\n}\n"
    source += "fn g(x) { return grad(f)(x) }\n"
    program, _ = pipeline.prepare(pipeline.load("clock.dl", source))
    printed = print_module(program.modules["clock.dl"])
    body = printed[printed.index("fn f_grad") :]
    assert body.count("time()") == 2, body
    np.testing.assert_allclose(pipeline.call(pipeline.load("clock.dl", source), "g", [np.array([1.0, 2.0])]), [2, 4])


def test_assert() -> None:
    assert dl_eval("assert(true)") == ()
    assert dl_eval('assert(a > 0, "positive")', 3) == ()
    failure = runtime_error('assert(false, "boom")')
    assert failure.diagnostics[0].code == "E0502" and "boom" in str(failure)
    assert runtime_error("assert(a < 0)", 3).diagnostics[0].code == "E0502"
    runtime_error("assert(1)")
    runtime_error("assert(a)", np.array([True]))


def test_print_formats() -> None:
    source = (
        "fn main() {\n"
        '    print(1, 2.5, 0.1 + 0.2, true, false, "text", (1, 2.0), -3)\n'
        "    print()\n"
        "    print([[1.0, 2.0], [3.0, 4.0]])\n"
        "    print(arange(3), float(2), 1.0f64 / 3.0f64)\n"
        "}\n"
    )
    assert dl_main(source) == (
        "1 2.5 0.3 true false text (1, 2.0) -3\n\n[[1. 2.]\n [3. 4.]]\n[0 1 2] 2.0 0.3333333333333333\n"
    )
    assert dl_eval("print(a)", np.float32(1)) == ()


def test_str_shows_what_print_shows() -> None:
    values = ["1", "-3i32", "2.5", "0.1 + 0.2", "1.0f64 / 3.0f64", "true", '"text"', "(1, (2.0, false))"]
    values += ["[[1.0, 2.0], [3.0, 4.0]]", "arange(3)", "[true, false]", "sqrt", "f64"]
    printed = dl_main("fn main() {\n" + "".join(f"    print({v})\n" for v in values) + "}\n")
    converted = dl_main("fn main() {\n" + "".join(f'    print(str({v}) + "")\n' for v in values) + "}\n")
    assert converted == printed
    assert dl_eval("str(a)", np.float32(0.1)) == "0.1" and dl_eval("str(a)", np.float64(0.1)) == "0.1"
    assert dl_eval("str(a)", np.float32(1e20)) == "1e+20" and dl_eval("str(a)", -(2**63)) == str(-(2**63))
    assert checker_codes("str(x)", "x: f32[2, 3]") == [] and checker_codes("str(x, x)") == ["E0206"]
    typed = dl.lang.check("fn f(x: f32) -> str {\n    return str(x) + str((x, 1))\n}\n", "<str-check>.dl")
    assert typed.errors == [] and str(typed.signatures["<str-check>.dl"][0]) == "fn f(x: f32) -> str"


# ======================================================================= what derivative code is written with

_checks = itertools.count()


def checker_errors(expr: str, params: str = "x: f32[2, 3]") -> list:
    """The checker's errors for `fn f(<params>) { return <expr> }` (static shapes: no run)."""
    return dl.lang.check(f"fn f({params}) {{\n    return {expr}\n}}\n", f"<dl-check-{next(_checks)}>.dl").errors


def checker_codes(expr: str, params: str = "x: f32[2, 3]") -> list[str]:
    return [d.code for d in checker_errors(expr, params)]


ALL_DTYPES = st.sampled_from([F32, F64, I64, np.dtype(np.int32), BOOL])


@SETTINGS
@given(shape=shapes, dtype=ALL_DTYPES, seed=seeds)
def test_zeros_like(shape, dtype, seed) -> None:
    x = dl_value(randn(np.random.default_rng(seed), shape).astype(dtype))
    check(dl_eval("zeros_like(a)", x), np.zeros(shape, dtype), dtype)
    zeros = dl_eval("zeros_like((a, (b, 2.5)))", x, 3)
    check(zeros[0], np.zeros(shape, dtype), dtype)
    assert zeros[1][0] == 0 and type(zeros[1][0]) is int
    check(zeros[1][1], np.float32(0), F32)


@needs_torch
def test_stop_gradient_is_the_value_with_no_gradient() -> None:
    """The value itself, of a tensor or a tree, and no gradient through it, as PyTorch's `detach`: a
    straight-through estimator (rounding forward, the identity's gradient back) and a frozen target."""
    source = (
        "struct Net { w: f32[3], b: f32 }\n"
        "fn straight_through(x: f32[3]) -> f32 { return sum((x + stop_gradient(round(x) - x)) ** 2) }\n"
        "fn target(net: Net, x: f32[3]) -> f32 {\n"
        "    let frozen = stop_gradient(net)\n"
        "    return (sum(net.w * x) + net.b - (sum(frozen.w * x) + frozen.b) * 0.5) ** 2\n"
        "}\n"
        "fn main() {\n"
        "    let x = [0.3, 1.7, -2.4]\n"
        "    let net = Net { w: [0.5, -1.0, 2.0], b: 0.25 }\n"
        "    print(stop_gradient(x), stop_gradient((x, 2)), stop_gradient(net).b, stop_gradient(1.5))\n"
        "    print(grad(straight_through)(x))\n"
        "    let g = grad(target)(net, x)\n"
        "    print(g.w, g.b)\n"
        "}\n"
    )
    lines = dl_main(source).splitlines()
    assert lines[0] == "[ 0.3  1.7 -2.4] ([ 0.3  1.7 -2.4], 2) 0.25 1.5"
    x = torch.tensor([0.3, 1.7, -2.4], requires_grad=True)
    (torch.sum((x + (torch.round(x) - x).detach()) ** 2)).backward()
    np.testing.assert_allclose(np.array(lines[1].strip("[]").split(), dtype=np.float32), x.grad.numpy(), rtol=1e-6)
    w = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
    b = torch.tensor(0.25, requires_grad=True)
    xs = torch.tensor([0.3, 1.7, -2.4])
    ((w * xs).sum() + b - ((w.detach() * xs).sum() + b.detach()) * 0.5).pow(2).backward()
    got_w, got_b = lines[2].rsplit(" ", 1)
    np.testing.assert_allclose(np.array(got_w.strip("[]").split(), dtype=np.float32), w.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(float(got_b), b.grad.item(), rtol=1e-6)
    assert checker_codes('stop_gradient("text")') == ["E0311"]


def test_zeros_like_of_structs_and_tapes_and_errors() -> None:
    source = (
        "struct L { w: f32[2, 3], b: f64[3] }\n"
        "fn main() {\n"
        "    let l = L { w: ones(2, 3), b: [1.0f64, 2.0, 3.0] }\n"
        "    let z = zeros_like(l)\n"
        "    print(z.w, z.b, l.b)\n"
        "    let t = zeros_like(push(push(tape(1.0), 4.0), 5.0))\n"
        "    let (top, rest) = pop(t)\n"
        "    print(len(t), top, pop(rest)[0])\n"
        "}\n"
    )
    assert dl_main(source) == "[[0. 0. 0.]\n [0. 0. 0.]] [0. 0. 0.] [1. 2. 3.]\n2 0.0 0.0\n"
    assert runtime_error('zeros_like("s")').diagnostics[0].code == "E0513"
    assert checker_codes('zeros_like("s")') == ["E0311"]


def test_a_tape_of_zeros_is_made_as_it_is_popped_and_adds_nothing() -> None:
    """`zeros_like(tape)` is one cell naming its tape (runtime/values.py `Tape.zeros`): popping it gives zeros
    in the structure of the entries below, pushing on it and adding it to a tape of its size behave as they
    would for the whole tape of zeros."""
    source = (
        "fn main() {\n"
        "    let t = push(push(tape((1.0, [1.0, 2.0])), (1.0, [1.0, 2.0])), (2.0, [3.0, 4.0]))\n"
        "    t = push(t, (5.0, [6.0, 7.0]))\n"
        "    let z = zeros_like(t)\n"
        "    let (top, rest) = pop(z)\n"
        "    print(len(z), len(rest), top[0], top[1], pop(pop(rest)[1])[0][1])\n"
        "    let p = push(rest, (10.0, [20.0, 30.0]))\n"
        "    let sum = tree_add(t, p)\n"
        "    let (a, below) = pop(sum)\n"
        "    print(len(sum), a[0], a[1], pop(below)[0][1], pop(pop(below)[1])[0][0])\n"
        "    let same = tree_add(zeros_like(t), t)\n"
        "    print(pop(same)[0][1], pop(tree_add(t, zeros_like(z)))[0][0], len(zeros_like(tape(1.0))))\n"
        "}\n"
    )
    assert dl_main(source) == ("3 2 0.0 [0. 0.] [0. 0.]\n3 15.0 [26. 37.] [3. 4.] 1.0\n[6. 7.] 5.0 0\n")
    # an entry without zeros fails where it is made, at the `pop` (docs/language.md)
    assert dl_eval('len(zeros_like(push(tape(), "a")))') == 1
    failure = runtime_error('pop(zeros_like(push(tape(), "a")))')
    assert "`zeros_like` needs a tensor, tuple, struct or tape, found str" in str(failure)


def numpy_unbroadcast(x: np.ndarray, shape: tuple) -> np.ndarray:
    """Sum `x` over its leading axes and over the axes where `shape` has a 1, to `shape`."""
    total = np.sum(x, axis=tuple(range(x.ndim - len(shape))), dtype=x.dtype)
    ones = tuple(k for k, n in enumerate(shape) if n == 1)
    return np.sum(total, axis=ones, keepdims=True, dtype=x.dtype).reshape(shape)


@SETTINGS
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=4), seed=seeds)
def test_unbroadcast_sums_down_to_the_shape(shapes, seed) -> None:
    rng = np.random.default_rng(seed)
    like_shape = shapes.input_shapes[0]
    x = dl_value(randn(rng, shapes.result_shape, F64))
    like = dl_value(np.zeros(like_shape, np.float64))
    result = dl_eval("unbroadcast(a, b)", x, like)
    check(result, numpy_unbroadcast(np.asarray(x), like_shape), F64, rtol=1e-12, atol=1e-12)
    # an adjoint takes its variable's float dtype: summed in x's, then rounded to like's
    rounded = dl_eval("unbroadcast(a, b)", x, dl_value(np.zeros(like_shape, np.float32)))
    check(rounded, numpy_unbroadcast(np.asarray(x), like_shape).astype(np.float32), F32, rtol=1e-6, atol=1e-7)
    # the adjoint of broadcasting: <unbroadcast(x), y> == <x, broadcast(y)>
    y = randn(rng, like_shape, F64)
    left = np.sum(np.asarray(result) * y)
    np.testing.assert_allclose(left, np.sum(np.asarray(x) * np.broadcast_to(y, shapes.result_shape)), rtol=1e-10)


def test_unbroadcast_examples_and_errors() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    check(dl_eval("unbroadcast(a, b)", x, np.ones(3, np.float32)), x.sum(axis=0), F32)
    # an f64 `like` (an adjoint's variable) makes the sum f64; an integer `x` keeps its dtype
    check(dl_eval("unbroadcast(a, b)", x, np.ones((2, 1))), x.sum(axis=1, keepdims=True), F64)
    check(dl_eval("unbroadcast(a, 1.0)", x), np.float32(15), F32)
    check(dl_eval("unbroadcast(a, b)", x, x), x, F32)
    check(dl_eval("unbroadcast(a, b)", np.arange(6).reshape(2, 3), np.ones(3)), np.array([3, 5, 7]), I64)
    runtime_error("unbroadcast(a, b)", np.ones(3, np.float32), x)
    runtime_error("unbroadcast(a, b)", x, np.ones(2, np.float32))
    runtime_error("unbroadcast(a, b)", x, np.ones(4, np.float32))
    assert checker_codes("unbroadcast(x, zeros(2))") == ["E0303"]
    assert checker_codes("unbroadcast(x, zeros(3, 2))") == ["E0303"]
    assert checker_codes("unbroadcast(x, zeros(1, 2, 3))") == ["E0303"]
    assert checker_codes("unbroadcast(x, zeros(2, 1))") == []


@pytest.mark.parametrize("x_shape,like_shape", [((2, 3), (3, 2)), ((1, 6), (2, 3)), ((2, 1), (2, 3))], ids=str)
def test_unbroadcast_to_an_incompatible_shape_is_a_diagnostic(x_shape, like_shape) -> None:
    failure = runtime_error("unbroadcast(a, b)", np.ones(x_shape, np.float32), np.ones(like_shape, np.float32))
    assert "reshape" not in str(failure)


def test_unbroadcast_keeps_i32() -> None:
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    check(dl_eval("unbroadcast(a, b)", x, np.ones(3)), x.sum(axis=0, dtype=np.int32), np.dtype(np.int32))


@SETTINGS
@given(shape=nonscalar_shapes, seed=seeds, data=st.data())
def test_reshape_like(shape, seed, data) -> None:
    x = randn(np.random.default_rng(seed), shape, F64)
    target = tuple(data.draw(st.permutations(list(shape))))
    check(dl_eval("reshape_like(a, b)", x, np.zeros(target, np.float32)), x.reshape(target), F64)
    check(dl_eval("reshape_like(a, b)", x, np.zeros((1, *target, 1), np.bool_)), x.reshape(1, *target, 1), F64)


def test_reshape_like_scalars_and_errors() -> None:
    check(dl_eval("reshape_like(a, 2.0)", np.array([[3]], np.float32)), np.float32(3), F32)
    check(dl_eval("reshape_like(a, b)", np.float32(3), np.ones((1, 1))), np.full((1, 1), 3, np.float32), F32)
    runtime_error("reshape_like(a, b)", np.ones((2, 3)), np.ones(5))
    assert checker_codes("reshape_like(x, zeros(5))") == ["E0307"]
    assert checker_codes("reshape_like(x, zeros(3, 1, 2))") == []


@SETTINGS
@given(shape=shapes, seed=seeds)
def test_expand_dims_every_axis(shape, seed) -> None:
    x = dl_value(randn(np.random.default_rng(seed), shape))
    rank = len(shape)
    for axis in range(-rank - 1, rank + 1):
        expected = np.expand_dims(np.asarray(x), axis)
        check(dl_eval(f"expand_dims(a, {axis})", x), expected, F32)
        check(dl_eval("expand_dims(a, b)", x, axis), expected, F32)


def test_expand_dims_errors() -> None:
    x = np.ones((2, 3), np.float32)
    for axis in (3, -4, 1.0, True):
        assert runtime_error("expand_dims(a, b)", x, axis).diagnostics[0].code == "E0513"
    assert checker_codes("expand_dims(x, 3)") == ["E0306"]
    assert checker_codes("expand_dims(x, -4)") == ["E0306"]
    assert checker_codes("expand_dims(x, 2)") == checker_codes("expand_dims(x, -3)") == []


def test_expand_dims_out_of_range_messages() -> None:
    assert "axis 3 " in str(runtime_error("expand_dims(a, 3)", np.ones((2, 3), np.float32)))
    typed = dl.lang.check("fn f(x: f32[2, 3]) {\n    return expand_dims(x, 3)\n}\n", "<dl-check-expand>.dl")
    assert "rank-2" in typed.errors[0].message


def numpy_scatter_add(x, indices, updates, axis):
    result = np.array(x, copy=True)
    np.add.at(result, (slice(None),) * (axis % result.ndim) + (indices,), updates)
    return result


@SETTINGS
@given(
    shape=nonscalar_shapes,
    index_shape=hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=4),
    seed=seeds,
    data=st.data(),
)
def test_scatter_add_matches_add_at(shape, index_shape, seed, data) -> None:
    rng = np.random.default_rng(seed)
    x = randn(rng, shape, F64)
    axis = data.draw(st.integers(0, len(shape) - 1))
    size = shape[axis]
    indices = dl_value(rng.integers(-size, size, size=index_shape))  # negative and repeated indices
    updates = dl_value(randn(rng, shape[:axis] + tuple(index_shape) + shape[axis + 1 :], F64))
    expected = numpy_scatter_add(x, indices, updates, axis)
    check(dl_eval("scatter_add(a, b, c, axis=d)", x, indices, updates, axis), expected, F64, rtol=1e-12)
    if axis == 0:
        check(dl_eval("scatter_add(a, b, c)", x, indices, updates), expected, F64, rtol=1e-12)
    # the adjoint of gather: <gather(y, i), u> == <y, scatter_add(zeros_like(y), i, u)>
    scattered = dl_eval("scatter_add(zeros_like(a), b, c, axis=d)", x, indices, updates, axis)
    np.testing.assert_allclose(
        np.sum(np.take(x, indices, axis=axis) * updates), np.sum(x * np.asarray(scattered)), rtol=1e-10, atol=1e-10
    )


def test_scatter_add_accumulates_and_keeps_x() -> None:
    x = np.zeros(4, np.float32)
    result = dl_run("let y = scatter_add(a, b, c)\nreturn (a, y)", x, np.array([0, 1, 1, -1]), np.ones(4, np.float32))
    check(result[0], np.zeros(4, np.float32), F32)
    check(result[1], np.array([1, 2, 0, 1], np.float32), F32)
    check(dl_eval("scatter_add(a, 2, 1.0, axis=1)", np.zeros((2, 3))), np.array([[0, 0, 1], [0, 0, 1.0]]), F64)
    table = np.arange(6).reshape(3, 2)
    check(
        dl_eval("scatter_add(a, b, c)", table, np.array([2, 2]), np.ones((2, 2), np.int64)),
        table + np.array([[0, 0], [0, 0], [2, 2]]),
        I64,
    )


@needs_torch
def test_scatter_add_matches_torch_index_add() -> None:
    rng = np.random.default_rng(5)
    x, updates = randn(rng, (4, 5)), randn(rng, (4, 6))
    indices = rng.integers(0, 5, size=6)
    expected = to_torch(x).index_add(1, to_torch(indices), to_torch(updates)).numpy()
    check(dl_eval("scatter_add(a, b, c, axis=1)", x, indices, updates), expected, F32)


def test_scatter_add_errors() -> None:
    x = np.zeros(4, np.float32)
    runtime_error("scatter_add(a, b, c)", x, np.array([0, 4]), np.ones(2, np.float32))
    runtime_error("scatter_add(a, b, c)", x, np.array([0.0, 1.0], np.float32), np.ones(2, np.float32))
    runtime_error("scatter_add(a, b, c)", x, np.array([0, 1]), np.ones(3, np.float32))
    runtime_error("scatter_add(a, 0, 1.0, axis=1)", x)
    runtime_error("scatter_add(1.0, 0, 1.0)")
    params = "x: f32[2, 3], i: i64[4]"
    assert checker_codes("scatter_add(zeros(5), i, ones(3))", params) == ["E0303"]
    assert checker_codes("scatter_add(zeros(5), 1.5, ones(4))", params) == ["E0320"]
    assert checker_codes("scatter_add(1.0, i, ones(4))", params) == ["E0309"]
    assert checker_codes("scatter_add(x, i, ones(2, 4), axis=1)", params) == []


def test_scatter_add_negative_axis() -> None:
    x = np.zeros((3, 3), np.float32)
    expected = numpy_scatter_add(x, np.int64(2), np.float32(1), 1)
    check(dl_eval("scatter_add(a, 2, 1.0, axis=-1)", x), expected, F32)


def test_scatter_add_checker_rejects_wider_updates() -> None:
    assert checker_codes("scatter_add(zeros(3), [0, 1], ones(2, 2))") == ["E0303"]


@SETTINGS
@given(shape=nonscalar_shapes, seed=seeds, data=st.data())
def test_split_like_matches_split(shape, seed, data) -> None:
    rng = np.random.default_rng(seed)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    sizes = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=3))
    position = axis % len(shape)
    pieces = [np.zeros((*shape[:position], n, *shape[position + 1 :]), np.float32) for n in sizes]
    x_shape = list(shape)
    x_shape[axis] = sum(sizes)
    x = randn(rng, tuple(x_shape), F64)
    expected = np.split(x, np.cumsum(sizes)[:-1], axis=axis)
    result = dl_eval("split_like(a, b, axis=c)", x, tuple(pieces), axis)
    assert isinstance(result, tuple) and len(result) == len(sizes)
    for got, want in zip(result, expected, strict=True):
        check(got, want, F64)
    check(dl_eval("concat(split_like(a, b, axis=c), axis=c)", x, tuple(pieces), axis), x, F64)


def test_split_like_examples_and_errors() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    first, second = dl_eval("split_like(a, (zeros(2, 1), zeros(2, 2)), axis=1)", x)
    check(first, x[:, :1], F32)
    check(second, x[:, 1:], F32)
    (whole,) = dl_eval("split_like(a, (zeros(2, 3),))", x)
    check(whole, x, F32)
    runtime_error("split_like(a, (zeros(2, 1), zeros(2, 1)), axis=1)", x)
    runtime_error("split_like(a, b)", x, np.zeros((2, 3)))
    runtime_error("split_like(a, (zeros(1, 3),), axis=2)", x)
    assert checker_codes("split_like(x, (zeros(2), zeros(2)))") == ["E0316"]
    assert checker_codes("split_like(x, (zeros(1, 3),), axis=2)") == ["E0306"]


def test_split_like_checker_rejects_pieces_that_do_not_add_up() -> None:
    assert checker_codes("split_like(x, (zeros(2, 1), zeros(2, 1)), axis=1)") != []
    assert checker_codes("split_like(x, (zeros(1, 3), zeros(2, 3)))") != []


def test_split_like_pieces_must_match_the_other_dims() -> None:
    x = np.ones((2, 3), np.float32)
    runtime_error("split_like(a, (zeros(1, 5), zeros(1, 5)))", x)
    runtime_error("split_like(a, (zeros(1), zeros(1)))", x)
    assert checker_codes("split_like(x, (zeros(1, 5), zeros(1, 5)))") != []


@SETTINGS
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=4), seed=seeds)
def test_tree_add_adds_leaf_by_leaf(shapes, seed) -> None:
    rng = np.random.default_rng(seed)
    a, b = (dl_value(randn(rng, s)) for s in shapes.input_shapes)
    c, d = dl_value(randn(rng, (2, 3), F64)), dl_value(randn(rng, (2, 3), F64))
    check(dl_eval("tree_add(a, b)", a, b), np.add(a, b), F32)
    first, (second, third) = dl_eval("tree_add((a, (c, 2)), (b, (d, 3)))", a, b, c, d)
    check(first, np.add(a, b), F32)
    check(second, np.add(c, d), F64)
    assert third == 5 and type(third) is int


def test_tree_add_structs_tapes_and_errors() -> None:
    source = (
        "struct L { w: f32[2], b: f64 }\n"
        "fn main() {\n"
        "    let l = L { w: [1.0, 2.0], b: 0.5f64 }\n"
        "    let s = tree_add(l, L { w: [10.0, 20.0], b: 2.0f64 })\n"
        "    print(s.w, s.b)\n"
        "    let t = tree_add(push(push(tape(1.0), 1.0), 2.0), push(push(tape(1.0), 10.0), 20.0))\n"
        "    let (top, rest) = pop(t)\n"
        "    print(len(t), top, pop(rest)[0])\n"
        "}\n"
    )
    assert dl_main(source) == "[11. 22.] 2.5\n2 22.0 11.0\n"
    runtime_error("tree_add((a, 1), (a,))", np.ones(2, np.float32))
    runtime_error("tree_add(a, b)", np.ones(2, np.float32), np.ones(3, np.float32))
    runtime_error('tree_add("s", "t")')
    assert checker_codes("tree_add((x, 1), (x,))") == ["E0301"]
    assert checker_codes("tree_add(x, zeros(3, 2))") == ["E0303"]
    assert checker_codes('tree_add(x, "s")') == ["E0311"]


def test_trees_of_one_struct_declared_by_two_compiles_add_and_others_do_not() -> None:
    """A struct value a host hands in (made by another compile of the program) and one the program builds
    are of one struct when name and fields agree: `tree_add`, `tree_map` and `tree_dot` take them."""
    from dl.runtime.errors import PrimitiveError
    from dl.runtime.values import StructType, StructValue

    add, tree_dot = IMPLEMENTATIONS[Prim.TREE_ADD], IMPLEMENTATIONS[Prim.TREE_DOT]
    mine, theirs = StructType("L", ("w", "b")), StructType("L", ("w", "b"))
    a = StructValue(mine, (np.ones(2, np.float32), np.float32(1.0)))
    b = StructValue(theirs, (np.full(2, 2.0, np.float32), np.float32(3.0)))
    total = add(a, b)
    assert total.type is mine and total.values[0].tolist() == [3.0, 3.0] and total.values[1] == 4.0
    assert tree_dot(a, b) == np.float32(7.0)
    other = StructValue(StructType("L", ("b", "w")), (np.float32(3.0), np.full(2, 2.0, np.float32)))
    with pytest.raises(PrimitiveError, match="of one structure"):
        add(a, other)
    with pytest.raises(PrimitiveError, match="of one structure"):
        tree_dot(a, other)


def test_tree_add_promotes_like_plus() -> None:
    x, i = np.ones(2, np.float32), np.arange(2)
    check(dl_eval("tree_add(a, b)", x, i), dl_eval("a + b", x, i), F32)
    check(dl_eval("tree_add(a, 2.5)", i), dl_eval("a + 2.5", i), F32)


def test_tree_map_over_structs_and_tuples() -> None:
    source = (
        "struct L { w: f32[2], b: f64 }\n"
        "fn halve(v) {\n    return v * 0.5\n}\n"
        "fn main() {\n"
        "    let l = L { w: [1.0, 2.0], b: 4.0f64 }\n"
        "    let g = L { w: [10.0, 20.0], b: 2.0f64 }\n"
        "    let step = tree_map(fn(p, d) => p - 0.1 * d, l, g)\n"
        "    print(step.w, step.b)\n"
        "    print(tree_map(halve, (l.w, (l.b, [2.0, 4.0]))))\n"
        "    print(tree_map(zeros_like, l), tree_map(exp, [0.0, 1.0]))\n"
        "}\n"
    )
    assert dl_main(source) == "[0. 0.] 3.8\n([0.5 1. ], (2.0, [1. 2.]))\nL { w: [0. 0.], b: 0.0 } [1.       2.718282]\n"


def test_tree_map_misuse_is_a_diagnostic() -> None:
    assert checker_codes("tree_map(fn(v) => sum(v), (x, x))") == []
    assert checker_codes("tree_map(fn(a, b) => a + b, (x, x), (x,))") == ["E0301"]
    assert checker_codes('tree_map(fn(a) => a, "s")') == ["E0311"]
    source = "struct L { w: f32[2] }\nfn f(l: L) -> L {\n    return tree_map(fn(v) => sum(v), l)\n}\n"
    assert [d.code for d in dl.lang.check(source, "<tree_map>.dl").errors] == ["E0301"]
    runtime_error("tree_map(fn(u, v) => u, (a,), (a, a))", np.ones(2, np.float32))


def test_tree_dot_sums_the_products_of_all_leaves() -> None:
    source = (
        "struct L { w: f32[2, 2], b: f64 }\n"
        "fn main() {\n"
        "    let l = L { w: [[1.0, 2.0], [3.0, 4.0]], b: 2.0f64 }\n"
        "    print(tree_dot(l, l), sqrt(tree_dot((l.w, [3.0, 4.0]), (l.w, [3.0, 4.0]))))\n"
        "}\n"
    )
    assert dl_main(source) == "34.0 7.4161983\n"
    x = np.arange(6, dtype=np.float64).reshape(2, 3)
    check(dl_eval("tree_dot((a, b), (b, a))", x, x + 1.0), np.float64(2 * np.sum(x * (x + 1.0))), F64)
    assert checker_codes("tree_dot((x, x), (x,))") == ["E0301"]
    assert checker_codes("tree_dot(arange(3), arange(3))") == ["E0301"]
    runtime_error("tree_dot((a, a), (a,))", np.ones(2, np.float32))


def test_log_metric_appends_json_lines(tmp_path, monkeypatch) -> None:
    import json

    from dl.runtime.metrics import Metrics

    target = tmp_path / "run.jsonl"
    monkeypatch.setattr(Metrics, "path", target)
    source = (
        "fn main() {\n"
        '    for step in 0..3 {\n        log_metric("loss", 1.0 / float(step + 1))\n    }\n'
        '    log_metric("accuracy", 0.5f64, step=10)\n'
        '    log_metric("accuracy", 0.75)\n'
        '    log_metric("count", 7)\n'
        "}\n"
    )
    assert dl_main(source) == ""
    records = [json.loads(line) for line in target.read_text().splitlines()]
    assert records == [
        {"name": "loss", "step": 0, "value": 1.0},
        {"name": "loss", "step": 1, "value": 0.5},
        {"name": "loss", "step": 2, "value": 0.33333334},
        {"name": "accuracy", "step": 10, "value": 0.5},
        {"name": "accuracy", "step": 11, "value": 0.75},  # the step after the last one logged
        {"name": "count", "step": 0, "value": 7},
    ]
    assert checker_codes("log_metric(3, 1.0)") == ["E0301"]
    assert checker_codes('log_metric("loss", x)') == ["E0301"]
    assert checker_codes('log_metric("loss", 1.0, step=0.5)') == ["E0301"]
    failure = runtime_error('log_metric("loss", a, step=-5)', np.float32(1.0))
    assert "step is 0 or more, found -5" in failure.diagnostics[0].message
    monkeypatch.setattr(Metrics, "path", tmp_path / "missing" / "run.jsonl")
    runtime_error('log_metric("loss", a)', np.float32(1.0))


def test_progress_prints_plain_lines_when_not_a_terminal(monkeypatch) -> None:
    from dl.runtime.metrics import Progress

    monkeypatch.setattr(Progress, "terminal", False)
    source = 'fn main() {\n    for i in 0..50 {\n        progress(i + 1, 50, "epoch")\n    }\n}\n'
    lines = dl_main(source).splitlines()
    assert lines[0] == "epoch 1/50" and lines[-1] == "epoch 50/50"
    assert len(lines) <= 22 and all(line.startswith("epoch ") for line in lines)
    monkeypatch.setattr(Progress, "terminal", True)  # a tqdm bar on stderr instead; nothing on stdout
    assert dl_main(source) == ""
    assert checker_codes("progress(1.5, 10)") == ["E0301"]
    assert checker_codes("progress(1, 10, 3)") == ["E0301"]
    runtime_error("progress(1, 0)")


def test_tape_push_pop_is_last_in_first_out() -> None:
    body = (
        "let t = tape(a[0])\n"
        "for k in 0..len(a) {\n    t = push(t, a[k])\n}\n"
        "let n = len(t)\n"
        "let out = zeros_like(a)\n"
        "let k = 0\n"
        "while len(t) > 0 {\n    let (v, rest) = pop(t)\n    out[k] = v\n    t = rest\n    k += 1\n}\n"
        "return (out, n, len(t))"
    )
    x = randn(np.random.default_rng(3), (5, 2))
    out, size, left = dl_run(body, x)
    check(out, x[::-1], F32)
    assert (size, left) == (5, 0) and type(size) is int


def test_tapes_are_values() -> None:
    body = (
        "let t0 = tape(1.0)\n"
        "let t1 = push(t0, 1.0)\n"
        "let t2 = push(t1, 2.0)\n"
        "let t3 = push(t1, 3.0)\n"
        "return (pop(t2)[0], pop(t3)[0], pop(pop(t3)[1])[0], len(t0), len(t1), len(t2), len(t3))"
    )
    assert dl_run(body) == (2.0, 3.0, 1.0, 0, 1, 2, 2)
    value, _ = dl_eval("pop(push(tape(a), (a, 1)))", np.ones(2, np.float32))
    check(value[0], np.ones(2, np.float32), F32)
    assert value[1] == 1 and dl_eval("len(pop(push(tape(1.0), 2.0))[1])") == 0
    assert dl_main("fn main() {\n    print(push(push(tape(1), 1), 2))\n}\n") == "<tape of 2>\n"


def test_pop_of_an_empty_tape_is_a_diagnostic() -> None:
    (diagnostic,) = runtime_error("pop(tape(a))", np.ones(2, np.float32)).diagnostics
    assert (diagnostic.code, diagnostic.message) == ("E0513", "`pop` from an empty tape")
    runtime_error("pop(pop(push(tape(1.0), 1.0))[1])")


def test_tape_misuse_is_a_diagnostic() -> None:
    x = np.ones((2, 3), np.float32)
    assert runtime_error("push(a, a)", x).diagnostics[0].message == "`push` needs a tape, found f32[2, 3]"
    assert runtime_error("pop(a)", x).diagnostics[0].message == "`pop` needs a tape, found f32[2, 3]"
    runtime_error("pop((1, 2))")
    assert checker_codes("push(x, x)") == ["E0311"]
    assert checker_codes("pop(x)") == ["E0311"]
    assert checker_codes("pop((x, x))") == ["E0311"]
    assert checker_codes("pop(push(tape(x), x))[0] + x") == []
    assert checker_codes("len(push(tape(x), x)) + 1") == []


def test_push_of_a_value_of_another_type_is_a_checker_error() -> None:
    assert checker_codes("push(tape(x), (1, 2))") != []
    assert checker_codes("push(tape(x), zeros(3))") != []


# ======================================================================= operators

ARITHMETIC = {
    "+": np.add,
    "-": np.subtract,
    "*": np.multiply,
    "/": np.divide,
    "//": np.floor_divide,
    "%": np.mod,
    "**": np.power,
}
COMPARISON = {
    "==": np.equal,
    "!=": np.not_equal,
    "<": np.less,
    "<=": np.less_equal,
    ">": np.greater,
    ">=": np.greater_equal,
}


def operands(rng, shapes, op: str, dtype=F32):
    a = randn(rng, shapes[0], dtype)
    if op == "**":
        a = np.abs(a) + dtype.type(0.5)
    b = randn(rng, shapes[1], dtype)
    if op in ("//", "%", "/"):
        b = np.where(np.abs(b) < 0.5, dtype.type(1.5), b).astype(dtype)
    if op == "**":
        b = b / dtype.type(3)
    if op in COMPARISON:  # make equal elements likely
        a, b = np.round(a).astype(dtype), np.round(b).astype(dtype)
    return dl_value(a), dl_value(b)


@pytest.mark.parametrize("op", [*ARITHMETIC, *COMPARISON])
@SETTINGS
@given(
    shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, max_side=4),
    dtype=float_dtypes,
    seed=seeds,
)
def test_binary_operators_broadcast(op, shapes, dtype, seed) -> None:
    a, b = operands(np.random.default_rng(seed), shapes.input_shapes, op, dtype)
    reference = ARITHMETIC.get(op) or COMPARISON[op]
    expected = reference(a, b)
    check(dl_eval(f"a {op} b", a, b), expected, BOOL if op in COMPARISON else dtype, rtol=2e-5)


BROADCAST_CASES = [
    ((3, 1), (4,)),
    ((4,), (3, 1)),
    ((1,), (2, 3)),
    ((2, 1, 3), (4, 1)),
    ((1, 1), (1,)),
    ((), (2, 3)),
    ((2, 3), ()),
    ((0, 3), (3,)),
    ((2, 0), (1,)),
    ((0,), ()),
    ((1, 0), (3, 1)),
]


@pytest.mark.parametrize("shape_a,shape_b", BROADCAST_CASES, ids=str)
@pytest.mark.parametrize("op", ["+", "-", "*", "/", "<", "=="])
def test_broadcast_edge_shapes(shape_a, shape_b, op) -> None:
    rng = np.random.default_rng(7)
    a, b = operands(rng, (shape_a, shape_b), op)
    expected = (ARITHMETIC.get(op) or COMPARISON[op])(a, b)
    check(dl_eval(f"a {op} b", a, b), expected, BOOL if op in COMPARISON else F32)


@pytest.mark.parametrize("op", ["+", "-", "*", "/", "//", "%", "==", "<"])
def test_shapes_that_do_not_broadcast(op) -> None:
    runtime_error(f"a {op} b", np.ones((2, 3), np.float32), np.ones((3, 2), np.float32))
    runtime_error(f"a {op} b", np.ones(3, np.float32), np.ones(4, np.float32))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the numpy reference of a negative f64 ** 0.5
@pytest.mark.parametrize("op", ["+", "-", "*", "/", "**", "//", "%", "<", "=="])
def test_dtype_rules(op) -> None:
    x = np.array([[1.5, -2.0, 3.25]], np.float32)
    i = np.array([[2], [3]])
    f64 = x.astype(np.float64)
    want = BOOL if op in COMPARISON else None
    # An i64 tensor meeting an f32 tensor gives f32 (DL's rule), in both orders.
    check(dl_eval(f"a {op} b", x, i), (ARITHMETIC.get(op) or COMPARISON.get(op))(x, i.astype(np.float32)), want or F32)
    check(dl_eval(f"b {op} a", x, i), (ARITHMETIC.get(op) or COMPARISON.get(op))(i.astype(np.float32), x), want or F32)
    # An integer literal with an f32 tensor stays f32; with f64 stays f64.
    check(dl_eval(f"a {op} 2", x), (ARITHMETIC.get(op) or COMPARISON.get(op))(x, np.float32(2)), want or F32)
    check(dl_eval(f"2 {op} a", x), (ARITHMETIC.get(op) or COMPARISON.get(op))(np.float32(2), x), want or F32)
    check(dl_eval(f"a {op} 2", f64), (ARITHMETIC.get(op) or COMPARISON.get(op))(f64, 2.0), want or F64)
    # A float literal with an f64 tensor takes the tensor's dtype.
    check(dl_eval(f"a {op} 0.5", f64), (ARITHMETIC.get(op) or COMPARISON.get(op))(f64, 0.5), want or F64)
    # An i64 scalar meeting an f32 tensor gives f32.
    check(dl_eval(f"a {op} b", x, 3), (ARITHMETIC.get(op) or COMPARISON.get(op))(x, np.float32(3)), want or F32)
    # An f32 scalar meeting an i64 tensor gives f32.
    check(
        dl_eval(f"b {op} a", np.float32(2.5), i + 1),
        (ARITHMETIC.get(op) or COMPARISON.get(op))((i + 1).astype(np.float32), np.float32(2.5)),
        want or F32,
    )


@pytest.mark.parametrize("op", ["+", "-", "*", "/", "**", "//", "%"])
def test_float_literal_with_integer_tensor_gives_f32(op) -> None:
    i = np.array([1, 2, 3])
    reference = ARITHMETIC[op]
    check(dl_eval(f"a {op} 0.5", i), reference(i.astype(np.float32), np.float32(0.5)), F32)
    check(dl_eval(f"0.5 {op} a", i), reference(np.float32(0.5), i.astype(np.float32)), F32)


def test_scalar_dtype_rules() -> None:
    check(dl_eval("a * 2", np.float32(1.5)), np.float32(3), F32)
    check(dl_eval("2 * a", np.float32(1.5)), np.float32(3), F32)
    check(dl_eval("1 + 0.5"), np.float32(1.5), F32)
    check(dl_eval("a + b", 1, np.float32(0.5)), np.float32(1.5), F32)
    check(dl_eval("a + b", np.float32(1), np.float64(0.5)), np.float64(1.5), F64)
    check(dl_eval("1.0f64 + 1"), np.float64(2), F64)
    check(dl_eval("a + b", 2, 3), np.int64(5), I64)
    assert type(dl_eval("a + b", 2, 3)) is int
    check(
        dl_eval("a + b", np.arange(3, dtype=np.int32), np.ones(3, np.float32)), np.arange(1, 4, dtype=np.float32), F32
    )
    check(dl_eval("a + b", np.arange(3), np.arange(3)), np.arange(0, 6, 2), I64)
    check(dl_eval("a < b", 2, 3), np.bool_(True), BOOL)
    assert dl_eval("a == b", 2, 2) is True or dl_eval("a == b", 2, 2).__class__ is np.bool_


@SETTINGS
@given(a=st.integers(-50, 50), b=st.integers(-7, 7).filter(bool))
def test_integer_floor_division_and_modulo(a, b) -> None:
    assert dl_eval("a // b", a, b) == a // b
    assert dl_eval("a % b", a, b) == a % b
    x = np.arange(-6, 7)
    check(dl_eval("a // b", x, b), x // b, I64)
    check(dl_eval("a % b", x, b), x % b, I64)


def test_integer_operator_errors() -> None:
    runtime_error("a / b", 1, 2)
    runtime_error("a / b", np.arange(3), np.arange(1, 4))
    runtime_error("a // b", 1, 0)
    runtime_error("a % b", np.arange(3), np.array([1, 0, 1]))
    runtime_error("a ** b", 2, -1)
    check(dl_eval("a ** b", 2, 10), np.int64(1024), I64)
    check(dl_eval("a ** 2", np.arange(4)), np.arange(4) ** 2, I64)
    check(dl_eval("a // b", np.float32(1), np.float32(0)), np.float32(np.inf), F32)


def test_arithmetic_on_tuples_leaf_by_leaf() -> None:
    """`+ - * / **` of two tuples of one length, or of a tuple and a number, apply leaf by leaf (nested too) with
    each leaf's own dtype rules; `-t` negates each leaf. (Structs: tests/programs/arithmetic_on_structs.dl.)"""
    t = (np.float32(1.5), np.array([1.0, 2.0], np.float64), (np.arange(3.0, dtype=np.float32) + 1, np.float32(2)))
    for symbol in ("+", "-", "*", "/", "**"):
        result = dl_eval(f"a {symbol} b", t, t)
        for leaf, x in zip((result[0], result[1], result[2][1]), (t[0], t[1], t[2][1]), strict=True):
            expected = {"+": x + x, "-": x - x, "*": x * x, "/": x / x, "**": x**x}[symbol]
            check(leaf, expected, np.asarray(x).dtype)
    scaled = dl_eval("0.5 * a", t)
    check(scaled[0], np.float32(0.75), F32)
    check(scaled[1], np.array([0.5, 1.0]), F64)
    counts = (np.arange(3), 4)
    check(dl_eval("0.5 * a", counts)[0], np.arange(3) * 0.5, F32)  # an integer leaf meets a float literal as `*` does
    check(dl_eval("a * 2", counts)[0], np.arange(3) * 2, I64)
    negated = dl_eval("-a", (t, counts))
    check(negated[0][1], -t[1], F64)
    check(negated[1][0], -np.arange(3), I64)
    assert negated[1][1] == -4
    runtime_error("a + b", t, t[:2])
    runtime_error("a * b", t, np.ones(2))
    runtime_error("a // b", t, t)
    runtime_error("a < b", t, t)


def test_unary_operators() -> None:
    x = np.array([[1.5, -2.0]], np.float32)
    check(dl_eval("-a", x), -x, F32)
    check(dl_eval("-a", np.arange(3)), -np.arange(3), I64)
    check(dl_eval("-a", np.float64(2)), np.float64(-2), F64)
    check(dl_eval("-a", 4), np.int64(-4), I64)
    check(dl_eval("--a", x), x, F32)
    check(dl_eval("-a ** 2", np.float32(3)), np.float32(-9), F32)
    check(dl_eval("not a", np.array([True, False])), np.array([False, True]), BOOL)
    assert dl_eval("not a", True) is False
    runtime_error("-a", True)
    runtime_error("-a", np.array([True]))
    runtime_error("-a", "text")
    runtime_error("not a", 1)
    runtime_error("not a", np.arange(2))


def test_logical_operators() -> None:
    p, q = np.array([True, True, False, False]), np.array([True, False, True, False])
    check(dl_eval("a and b", p, q), p & q, BOOL)
    check(dl_eval("a or b", p, q), p | q, BOOL)
    check(dl_eval("a and b", p, True), p, BOOL)
    check(dl_eval("(a > 0) or (a < -1)", np.array([1, -2, -1])), np.array([True, True, False]), BOOL)
    assert dl_eval("a and b", True, False) is False
    assert dl_eval("a or b", False, True) is True
    assert dl_eval("false and a", 1) is False  # short-circuit: the right operand is not evaluated
    runtime_error("a and b", 1, True)
    runtime_error("a or b", False, 1)
    runtime_error("a and b", np.arange(2), q[:2])


# ======================================================================= misuse is a diagnostic

MISUSE = [
    ("reshape(a, 5)", (np.ones((2, 3), np.float32),)),
    ("a @ b", (np.ones((2, 3), np.float32), np.ones((2, 3), np.float32))),
    ("matmul(a, b)", (np.ones((2, 3), np.float32), np.ones(2, np.float32))),
    ("gather(a, 5)", (np.ones(3, np.float32),)),
    ("gather(a, b, axis=1)", (np.ones((2, 3), np.float32), np.array([3]))),
    ("concat((a, b), axis=0)", (np.ones((2, 3), np.float32), np.ones((2, 2), np.float32))),
    ("stack((a, b))", (np.ones(2, np.float32), np.ones(3, np.float32))),
    ("one_hot(a, 2)", (np.array([2]),)),
    ("a + b", (np.ones(2, np.float32), np.ones(3, np.float32))),
    ("a + b", ("text", 1)),
    ("sum(a, axis=3)", (np.ones((2, 3), np.float32),)),
    ("mean(a)", (np.zeros(0, np.float32),)),
    ("zeros(-3)", ()),
    ("log(a)", (np.arange(3),)),
    ("transpose(a, 1, 1)", (np.ones((2, 3), np.float32),)),
    ("broadcast_to(a, 4)", (np.ones(3, np.float32),)),
    ("int(a)", (np.float32("inf"),)),
    ("len(a)", (np.float32(1),)),
    ('assert(a, "no")', (False,)),
    ("abs(a)", ("text",)),
    ("sum(a)", ("text",)),
    ("relu(a)", ("text",)),
    ("maximum(a, 1.0)", ("text",)),
]


@pytest.mark.parametrize("expr,args", MISUSE, ids=lambda v: v if isinstance(v, str) else "")
def test_runtime_misuse_is_a_diagnostic(expr, args) -> None:
    failure = runtime_error(expr, *args)
    diagnostic = failure.diagnostics[0]
    assert diagnostic.span.path.startswith("<dl-test-") and diagnostic.span.line == 2
    assert diagnostic.notes and "call stack" in diagnostic.notes[0]


# ======================================================================= promotion, shared by operators and primitives

I32 = np.dtype(np.int32)


def test_integer_literals_adapt_and_i64_values_widen() -> None:
    small = np.array([1, 2], np.int32)
    check(dl_eval("a * 2", small), small * 2, I32)
    check(dl_eval("a * -1", small), -small, I32)
    check(dl_eval("a * b", small, 2), small.astype(np.int64) * 2, I64)
    check(dl_eval("a * b", np.int32(2_000_000_000), 2), np.int64(4_000_000_000), I64)
    check(dl_eval("maximum(a, 1)", small), np.maximum(small, 1), I32)
    check(dl_eval("maximum(a, b)", small, 1), np.maximum(small, 1).astype(np.int64), I64)
    check(dl_eval("where(a > 1, a, 0)", small), np.where(small > 1, small, 0).astype(np.int32), I32)
    check(dl_eval("a * 0.5", small), small.astype(np.float32) * np.float32(0.5), F32)
    check(dl_eval("a / 3.0", np.int32(1)), np.float32(1) / np.float32(3), F32)
    check(dl_eval("maximum(a, 0.5)", np.arange(3)), np.maximum(np.arange(3), 0.5).astype(np.float32), F32)
    check(dl_eval("matmul(a, b)", small, np.ones(2, np.float32)), np.float32(3), F32)
    check(dl_eval("a < 1.5", np.arange(3)), np.arange(3) < 1.5, BOOL)
    check(dl_eval("where(a, 1.0, 2.0)", np.array([True, False])), np.array([1, 2], np.float32), F32)


@pytest.mark.parametrize(
    "expr,args",
    [
        ("true + 1", ()),
        ("a * 2.0", (np.array([True]),)),
        ("a - b", (True, False)),
        ("a < 1", (True,)),
        ("maximum(a, 1)", (True,)),
        ("relu(a)", (np.array([True]),)),
        ("abs(a)", (True,)),
        ("a @ b", (np.array([True]), np.array([True]))),
        ("where(a, b, 1)", (True, True)),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_bool_is_not_a_number(expr: str, args: tuple) -> None:
    assert "bool" in str(runtime_error(expr, *args))


def test_bools_compare_and_count() -> None:
    p = np.array([True, False])
    check(dl_eval("a == b", p, np.array([True, True])), p, BOOL)
    check(dl_eval("sum(a)", p), np.int64(1), I64)
    check(dl_eval("where(a, true, false)", p), p, BOOL)


# ======================================================================= run-time failures are diagnostics

FAILURES = [
    ("a.x", ((1, 2),), "E0511", "(i64, i64) has no field `x`"),
    ('int("abc")', (), "E0513", '`int` cannot read "abc" as an integer'),
    ('float("x1")', (), "E0513", '`float` cannot read "x1" as a number'),
    ('zeros(2, dtype="x")', (), "E0513", 'zeros: `dtype=` takes a type name such as `f64`, found "x"'),
    ("randn(2, seed=-1)", (), "E0513", "randn: `seed=` takes a non-negative integer, found -1"),
    ("randn(2, dtype=i64)", (), "E0513", "`randn` makes float tensors; `dtype=` must be f32 or f64"),
    (
        "where(a, b, c)",
        (np.array([True, False, True]), np.ones(2, np.float32), np.ones(3, np.float32)),
        "E0513",
        "`where`: shapes do not broadcast: bool[3], f32[2], f32[3]",
    ),
    (
        "maximum(a, b)",
        (np.ones(2, np.float32), np.ones(3, np.float32)),
        "E0513",
        "`maximum`: shapes do not broadcast: f32[2], f32[3]",
    ),
    (
        "matmul(a, b)",
        (np.ones((2, 3, 4), np.float32), np.ones((3, 4, 5), np.float32)),
        "E0513",
        "matmul batch dimensions do not broadcast: f32[2, 3, 4] @ f32[3, 4, 5]",
    ),
    (
        "matmul(a, b)",
        (np.ones((3, 4), np.float32), np.ones((5, 6), np.float32)),
        "E0513",
        "matmul inner dimensions differ: 4 vs 5 (f32[3, 4] @ f32[5, 6])",
    ),
    (
        "a @ b",
        (np.ones((3, 4), np.float32), np.ones((5, 6), np.float32)),
        "E0513",
        "matmul inner dimensions differ: 4 vs 5 (f32[3, 4] @ f32[5, 6])",
    ),
    (
        "concat((1.0, 2.0))",
        (),
        "E0513",
        "concat needs tensors of rank 1 or more, found (f32, f32); use `stack` to join scalars",
    ),
    ("gather(3.0, 0)", (), "E0513", "`gather` needs a tensor of rank 1 or more, found f32"),
    ("abs(a)", ("text",), "E0513", "`abs` takes a number or a tensor as `x`, found str"),
    ("sum(a)", ((1, 2),), "E0513", "`sum` takes a number or a tensor as `x`, found (i64, i64)"),
    ("maximum(a, 1.0)", ("text",), "E0513", "`maximum` takes a number or a tensor as `a`, found str"),
    ('exp("e")', (), "E0513", "`exp` takes a number or a tensor as `x`, found str"),
    ("stack((a, a), axis=1.5)", (np.ones(2, np.float32),), "E0513", "stack: `axis=` takes an integer, found f32"),
    ("int(a)", (np.float32(1e30),), "E0513", "`int` of 1e+30: out of the i64 range"),
    ("assert(1)", (), "E0513", "`assert` needs a bool condition, found i64"),
    ("[[1, 2], [3]]", (), "E0514", "the rows of a tensor literal must have one shape, found i64[2], i64[1]"),
    ("a * 3000000000", (np.arange(2, dtype=np.int32),), "E0510", "`*`: 3000000000 is out of range for i32"),
    ("true + 1", (), "E0510", "`+` needs numbers, found bool + i64; a bool is not a number"),
]


@pytest.mark.parametrize("expr,args,code,message", FAILURES, ids=[f"{row[0]}-{row[2]}" for row in FAILURES])
def test_runtime_failure_messages(expr: str, args: tuple, code: str, message: str) -> None:
    """Each failure is one diagnostic, at the expression (line 2, column 8 of the test function), naming
    the primitive once and no numpy function, with the DL call stack."""
    (diagnostic,) = runtime_error(expr, *args).diagnostics
    assert (diagnostic.code, diagnostic.message) == (code, message)
    assert (diagnostic.span.line, diagnostic.span.column) == (2, 8)
    assert diagnostic.notes and "call stack" in diagnostic.notes[0]


def test_integer_literal_out_of_range_is_reported_before_running() -> None:
    (diagnostic,) = dl_error("3000000000i32").diagnostics
    assert diagnostic.code == "E0515" and diagnostic.message == "integer literal 3000000000 is out of range for i32"
    assert (diagnostic.span.line, diagnostic.span.column) == (2, 8)
    (diagnostic,) = dl_error("a + 9223372036854775808", 1).diagnostics
    assert diagnostic.code == "E0515" and (diagnostic.span.line, diagnostic.span.column) == (2, 12)


def test_deep_recursion_is_reported_at_the_recursing_call() -> None:
    (diagnostic,) = dl_error("f(a + 1)", 1).diagnostics  # the test function `f` calls itself forever
    assert (diagnostic.code, diagnostic.message) == ("E0506", "recursion too deep in `f`")
    assert (diagnostic.span.line, diagnostic.span.column) == (2, 8)


# ======================================================================= data (their checks live in tests/test_data.py)


def test_digits_dataset() -> None:
    test_data.check_digits()


def test_permutation_is_a_seeded_permutation() -> None:
    test_data.check_permutation()
    test_data.check_permutation_default_generator()


def test_batches_shapes_shuffle_and_errors() -> None:
    test_data.check_batches_shapes_and_remainder()
    test_data.check_batches_shuffle()
    test_data.check_batches_errors()


def test_load_csv_round_trip_and_errors(tmp_path) -> None:
    test_data.check_load_csv(tmp_path)
    test_data.check_load_csv_errors(tmp_path)


def test_load_npz_round_trip_and_errors(tmp_path) -> None:
    test_data.check_load_npz(tmp_path)
    test_data.check_load_npz_errors(tmp_path)


def test_text_corpus_and_chars() -> None:
    test_data.check_text_corpus()
    test_data.check_chars()


# ======================================================================= checkpoints (more: tests/test_checkpoints.py)


def test_save_load_round_trip(tmp_path) -> None:
    import safetensors.numpy

    path = str(tmp_path / "c.safetensors")
    value = (np.arange(6, dtype=np.float32).reshape(2, 3) / 7, (np.array([1e-300, -0.0]), 5, True), np.int32(-3))
    like = (np.zeros((2, 3), np.float32), (np.zeros(2), 0, False), np.int32(0))
    loaded = dl_run("save(a, b)\nreturn load(a, c)", path, value, like)
    stored = safetensors.numpy.load_file(path)
    names = ["0", "1.0", "1.1", "1.2", "2"]  # tuples by position, nested with dots
    assert sorted(stored) == names
    for name, original, back in zip(names, tree_leaves(value), tree_leaves(loaded), strict=True):
        check(back, original, dtype=dtype_of(original), rtol=0, atol=0)
        assert np.asarray(original, dtype_of(original)).tobytes() == stored[name].tobytes()


def test_save_load_errors(tmp_path) -> None:
    path = str(tmp_path / "c.safetensors")
    missing = dl_error("load(a, b)", path, np.zeros(3, np.float32)).diagnostics[0]
    expected = f"load: cannot read checkpoint `{path}`: no such file or directory"
    assert (missing.code, missing.message) == ("E0521", expected)
    dl_run("return save(a, b)", path, np.zeros(3, np.float32))
    wrong = dl_error("load(a, b)", path, np.zeros(4, np.float32)).diagnostics[0]
    expected = f"load: tensor `value` of checkpoint `{path}`: expected f32[4] (as in `like`), found f32[3]"
    assert (wrong.code, wrong.message) == ("E0521", expected)
    assert dl_error("save(a, b)", path, "text").diagnostics[0].code == "E0521"
    assert checker_codes('save("c.safetensors", "text")') == ["E0311"]
    assert checker_codes('load("c.safetensors", x)') == []


def tree_leaves(value) -> list:
    return [leaf for item in value for leaf in tree_leaves(item)] if isinstance(value, tuple) else [value]


# ======================================================================= convolution


CONV_CASES = [  # N, C, H, W, O, KH, KW, stride, padding
    (2, 3, 7, 6, 4, 3, 2, 1, 0),
    (2, 3, 7, 6, 4, 3, 3, 2, 1),
    (1, 2, 9, 9, 3, 4, 2, 3, 2),
    (3, 1, 5, 5, 2, 5, 5, 1, 0),
    (2, 2, 8, 7, 3, 1, 1, 2, 0),
]


@needs_torch
@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("case", CONV_CASES)
def test_conv2d_family_matches_torch(case, dtype) -> None:
    """conv2d and its gradient helpers (for x and for w) against torch's conv2d and autograd."""
    n, c, h, w, o, kh, kw, stride, padding = case
    rng = np.random.default_rng(sum(case))
    x, weights = randn(rng, (n, c, h, w), dtype), randn(rng, (o, c, kh, kw), dtype)
    tx, tw = to_torch(x).requires_grad_(), to_torch(weights).requires_grad_()
    expected = torch.nn.functional.conv2d(tx, tw, stride=stride, padding=padding)
    tolerance = {"rtol": 1e-4, "atol": 1e-3} if dtype == F32 else {}
    keywords = f"stride={stride}, padding={padding}"
    check(dl_eval(f"conv2d(a, b, {keywords})", x, weights), expected.detach().numpy(), **tolerance)
    dy = randn(rng, tuple(expected.shape), dtype)
    grad_x, grad_w = torch.autograd.grad(expected, (tx, tw), to_torch(dy))
    check(dl_eval(f"conv2d_input_grad(a, b, c, {keywords})", dy, weights, x), grad_x.numpy(), **tolerance)
    check(dl_eval(f"conv2d_weight_grad(a, b, c, {keywords})", dy, x, weights), grad_w.numpy(), **tolerance)


POOL_CASES = [(2, "", 0), (3, ", stride=2", 1), (3, ", stride=1", 1), (5, "", 2), (2, ", stride=1", 0)]


@needs_torch
@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize(("size", "stride", "padding"), POOL_CASES)
def test_max_pool2d_family_matches_torch(size, stride, padding, dtype) -> None:
    """max_pool2d, its gradient (ties: the first maximum of a window, as in torch) and the gather that is the
    gradient's adjoint: <max_pool2d_grad(dy, x), v> == <dy, max_pool2d_gather(v, x)>."""
    rng = np.random.default_rng(size * 10 + padding)
    x = np.round(randn(rng, (2, 3, 7, 6), dtype))  # rounded: many ties
    torch_stride = int(stride.split("=")[1]) if stride else None
    tx = to_torch(x).requires_grad_()
    expected = torch.nn.functional.max_pool2d(tx, size, stride=torch_stride, padding=padding)
    keywords = f"{stride}, padding={padding}"
    check(dl_eval(f"max_pool2d(a, {size}{keywords})", x), expected.detach().numpy())
    dy = randn(rng, tuple(expected.shape), dtype)
    (grad_x,) = torch.autograd.grad(expected, (tx,), to_torch(dy))
    gradient = dl_eval(f"max_pool2d_grad(a, b, {size}{keywords})", dy, x)
    check(gradient, grad_x.numpy(), rtol=1e-6)
    v = randn(rng, x.shape, dtype)
    gathered = dl_eval(f"max_pool2d_gather(a, b, {size}{keywords})", v, x)
    np.testing.assert_allclose(np.sum(gradient * v, dtype=F64), np.sum(dy * gathered, dtype=F64), rtol=1e-5)
    check(dl_eval(f"max_pool2d_gather(a, a, {size}{keywords})", x), expected.detach().numpy())


def test_convolution_run_time_mistakes_are_diagnostics() -> None:
    images = np.ones((1, 2, 4, 4), np.float32)
    assert "channels differ" in str(runtime_error("conv2d(reshape(a, 1, -1, 4, 4), ones(1, 3, 3, 3))", images))
    assert "does not fit" in str(runtime_error("max_pool2d(reshape(a, 1, 1, -1, 1), 5)", images))
    runtime_error("conv2d_input_grad(reshape(a, 1, 1, -1, 4), ones(1, 2, 3, 3), zeros(1, 2, 4, 4))", images)


# ======================================================================= data parallelism (MPI: test_distributed.py)


def test_rank_and_world_size_in_a_world_of_one() -> None:
    assert dl_main("fn main() { print(rank(), world_size(), rank() + world_size()) }\n") == "0 1 1\n"
    assert dtype_of(dl_eval("rank()")) == I64 and dtype_of(dl_eval("world_size()")) == I64
    assert checker_codes("rank(1)") == ["E0206"]


def test_allreduce_mean_in_a_world_of_one() -> None:
    """In a world of 1 the mean over the ranks is the tree itself: same values, dtypes, shapes and structure."""
    source = (
        "struct L { w: f32[2, 2], b: f64 }\n"
        "fn main() {\n"
        "    let l = L { w: [[1.0, 2.0], [3.0, 4.0]], b: 2.5f64 }\n"
        "    print(allreduce_mean(l), allreduce_mean((l.w[0], 1.5, (0.25f64,))))\n"
        "}\n"
    )
    assert dl_main(source) == "L { w: [[1. 2.]\n [3. 4.]], b: 2.5 } ([1. 2.], 1.5, (0.25,))\n"
    x = np.arange(6, dtype=np.float64).reshape(2, 3)
    check(dl_eval("allreduce_mean(a)", x), x, F64)
    assert checker_codes("allreduce_mean((x, arange(3)))") == ["E0317"]
    assert checker_codes("allreduce_mean(1)") == ["E0317"]
    assert checker_codes('allreduce_mean("loss")') == ["E0311"]
    assert checker_codes("allreduce_mean(x, x)") == ["E0206"]


class OtherRank:
    """A stand-in for an MPI communicator: this process is `rank` of 2, and the other rank passes `leaves`
    to every all-reduce (its fingerprint to the first one, its values, one dtype at a time, to the next)."""

    def __init__(self, rank: int, leaves: list[np.ndarray]) -> None:
        self.rank, self.leaves = rank, leaves

    def Get_rank(self) -> int:
        return self.rank

    def Get_size(self) -> int:
        return 2

    def Allreduce(self, in_place, buffer: np.ndarray, op: str) -> None:
        from dl.runtime.world import fingerprint

        if op == "max":
            theirs = fingerprint(self.leaves)
            np.maximum(buffer, np.concatenate([theirs, -theirs]), out=buffer)
        else:
            buffer += np.concatenate([leaf.ravel() for leaf in self.leaves if leaf.dtype == buffer.dtype])


@pytest.fixture
def world_of_two(monkeypatch):
    """Connect the interpreter to a world of 2 whose other rank is an `OtherRank`; returns the connector."""
    from dl.runtime.world import World

    def connect(rank: int, leaves: list[np.ndarray] = ()) -> None:
        World.connect(OtherRank(rank, list(leaves)), "sum", "max", None)

    yield connect
    World.disconnect()


def test_allreduce_mean_derivative_is_allreduce_mean(world_of_two) -> None:
    """The gradient of the sum of every rank's loss reaches each rank's tree as the mean of every rank's
    gradient; in a world of 1 that is the gradient itself (checked against finite differences)."""
    source = (
        "fn loss(x: f64[3], c: f64[3]) -> f64 {\n    return sum(allreduce_mean(x) * c) + sum(x * x)\n}\n"
        "fn g(x: f64[3], c: f64[3]) -> f64[3] {\n    return grad(loss)(x, c)\n}\n"
    )
    program = dl.pipeline.load("<allreduce-grad>.dl", source)
    x, c = np.array([0.5, -1.0, 2.0]), np.array([1.0, 3.0, -2.0])

    def loss(x: np.ndarray) -> float:
        return float(np.sum(x * c) + np.sum(x * x))

    step = 1e-6
    numeric = np.array([(loss(x + step * e) - loss(x - step * e)) / (2 * step) for e in np.eye(3)])
    check(dl.pipeline.call(program, "g", [x, c]), numeric, F64, rtol=1e-6)
    theirs = np.array([4.0, 0.0, 1.0])  # the other rank's tree, and its gradient in the backward sweep
    world_of_two(0, [theirs])
    check(dl.pipeline.call(program, "g", [x, c]), (c + theirs) / 2 + 2 * x, F64)


def test_allreduce_mean_packs_each_dtype_into_one_buffer(world_of_two) -> None:
    mine = (np.arange(6, dtype=np.float32).reshape(2, 3), np.float64(1.0), np.array([2.0, 4.0], np.float32))
    theirs = [np.ones((2, 3), np.float32), np.array(3.0), np.array([0.0, -4.0], np.float32)]
    world_of_two(1, theirs)
    averaged = dl_eval("allreduce_mean(a)", mine)
    for got, a, b in zip(averaged, mine, theirs, strict=True):
        check(got, (np.asarray(a) + b) / 2, np.asarray(a).dtype)
    assert isinstance(averaged[1], np.float64)  # a scalar stays a scalar
    assert dl_eval("rank() * 10 + world_size()") == 12


def test_allreduce_mean_of_different_trees_is_e0522(world_of_two) -> None:
    world_of_two(0, [np.ones(3, np.float32)])
    failure = runtime_error("allreduce_mean((a, a))", np.ones(3, np.float32))
    (diagnostic,) = failure.diagnostics
    assert diagnostic.code == "E0522"
    assert diagnostic.message == (
        "`allreduce_mean`: the ranks passed trees of different dtypes or shapes (1 to 2 tensors, 3 to 6 numbers); "
        "rank 0 passed f32[3], f32[3]"
    )


def test_batches_take_this_ranks_rows_of_every_batch(world_of_two) -> None:
    """Each rank takes its slice of every global batch, so the global batches and their order are the same in a
    world of any size."""
    x, y = np.arange(20, dtype=np.float32).reshape(10, 2), np.arange(10)
    whole_x, whole_y = dl_eval("batches((a, b), 4, shuffle=true, seed=3)", x, y)
    for rank in (0, 1):
        world_of_two(rank)
        part_x, part_y = dl_eval("batches((a, b), 4, shuffle=true, seed=3)", x, y)
        np.testing.assert_array_equal(part_x, whole_x[:, 2 * rank : 2 * rank + 2])
        np.testing.assert_array_equal(part_y, whole_y[:, 2 * rank : 2 * rank + 2])
    failure = runtime_error("batches(a, 3)", x)
    assert [(d.code, d.message) for d in failure.diagnostics] == [
        (
            "E0523",
            "`batches`: a batch of 3 rows does not split evenly among 2 ranks; "
            "use a batch size that is a multiple of world_size()",
        )
    ]


def test_effects_happen_on_rank_zero_alone(world_of_two, tmp_path, monkeypatch) -> None:
    """`print`, `progress`, `log_metric` and `save` act on rank 0 only: one log, one metrics file, one checkpoint."""
    from dl.runtime.metrics import Metrics

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(Metrics, "path", None)
    monkeypatch.setenv("DL_METRICS", str(tmp_path / "metrics.jsonl"))
    source = (
        "fn main() {\n"
        '    print("rank", rank())\n'
        '    progress(1, 1, "steps")\n'
        '    log_metric("loss", 0.5)\n'
        '    save("model.safetensors", ones(2))\n'
        "}\n"
    )
    world_of_two(1)
    assert dl_main(source) == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    world_of_two(0)
    assert dl_main(source) == "rank 0\nsteps 1/1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl", "model.safetensors"]


# ======================================================================= coverage

# ---------------------------------------------------------------------------------------------------------
# What the table says is linear (`linear_in`, `product`): autodiff relies on it to skip adjoints known to be zeros

POOLED = "float(reshape(arange(16), 1, 1, 4, 4))"  # (the images max pooling chooses in: no ties)

# each primitive with `linear_in`: a call whose parameters a, b (of these shapes) are what it is linear in
LINEAR_CALLS: dict[Prim, tuple[str, tuple[tuple[int, ...], ...]]] = {
    Prim.WHERE: ("where([true, false, true], a, b)", ((3,), (3,))),
    Prim.SUM: ("sum(a, axis=0)", ((2, 3),)),
    Prim.MEAN: ("mean(a)", ((2, 3),)),
    Prim.MATMUL: ("matmul(a, b)", ((2, 3), (3, 4))),
    Prim.EINSUM: ('einsum("ij,jk->ik", a, b)', ((2, 3), (3, 4))),
    Prim.TRANSPOSE: ("transpose(a)", ((2, 3),)),
    Prim.SWAPAXES: ("swapaxes(a, 0, 1)", ((2, 3),)),
    Prim.RESHAPE: ("reshape(a, 3, 2)", ((2, 3),)),
    Prim.CONCAT: ("concat((a, b), axis=0)", ((2, 3), (1, 3))),
    Prim.STACK: ("stack((a, b))", ((3,), (3,))),
    Prim.BROADCAST_TO: ("broadcast_to(a, 2, 3)", ((3,),)),
    Prim.GATHER: ("gather(a, [2, 0, 0], axis=1)", ((2, 3),)),
    Prim.TRIL: ("tril(a)", ((3, 3),)),
    Prim.TRIU: ("triu(a, 1)", ((3, 3),)),
    Prim.FLIP: ("flip(a, axis=0)", ((2, 3),)),
    Prim.CUMSUM: ("cumsum(a, axis=1)", ((2, 3),)),
    Prim.TAKE_ALONG_AXIS: ("take_along_axis(a, [[0, 2], [1, 1]], 1)", ((2, 3),)),
    Prim.PAD: ("pad(a, 1, 2, value=b)", ((3,), ())),
    Prim.DROPOUT: ("dropout(a, 0.5, seed=3)", ((8,),)),
    Prim.FLOAT: ("float(a, dtype=f64)", ((3,),)),
    Prim.UNBROADCAST: ("unbroadcast(a, [1.0, 2.0, 3.0])", ((2, 3),)),
    Prim.RESHAPE_LIKE: ("reshape_like(a, [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])", ((6,),)),
    Prim.EXPAND_DIMS: ("expand_dims(a, 0)", ((3,),)),
    Prim.SCATTER_ADD: ("scatter_add(a, [0, 0, 2], b, axis=0)", ((3,), (3,))),
    Prim.ADD_ALONG_AXIS: ("add_along_axis(a, [[0, 0], [2, 1]], b, 1)", ((2, 3), (2, 2))),
    Prim.SPLIT_LIKE: ("split_like(a, (zeros(2), zeros(1)))", ((3,),)),
    Prim.TREE_ADD: ("tree_add(a, b)", ((3,), (3,))),
    Prim.SQUEEZE: ("squeeze(a, (0, 2))", ((1, 3, 1),)),
    Prim.LINSPACE: ("linspace(a, b, 4)", ((), ())),
    # a tape of zeros (what `zeros_like` of a tape is) pops zeros: a second derivative's tapes of adjoints
    Prim.PUSH: ("pop(push(push(zeros_like(tape(a)), a), b))[0]", ((3,), (3,))),
    Prim.POP: ("pop(pop(push(push(tape(a), a), b))[1])[0]", ((3,), (3,))),
    Prim.TREE_DOT: ("tree_dot(a, b)", ((3,), (3,))),
    Prim.CONV2D: ("conv2d(a, b)", ((1, 1, 4, 4), (2, 1, 3, 3))),
    Prim.CONV2D_INPUT_GRAD: ("conv2d_input_grad(a, b, zeros(1, 1, 4, 4))", ((1, 2, 2, 2), (2, 1, 3, 3))),
    Prim.CONV2D_WEIGHT_GRAD: ("conv2d_weight_grad(a, b, zeros(2, 1, 3, 3))", ((1, 2, 2, 2), (1, 1, 4, 4))),
    Prim.MAX_POOL2D_GRAD: (f"max_pool2d_grad(a, {POOLED}, 2)", ((1, 1, 2, 2),)),
    Prim.MAX_POOL2D_GATHER: (f"max_pool2d_gather(a, {POOLED}, 2)", ((1, 1, 4, 4),)),
}


def leaves_of(value) -> list[np.ndarray]:
    return [leaf for item in value for leaf in leaves_of(item)] if isinstance(value, tuple) else [np.asarray(value)]


@pytest.mark.parametrize("prim", sorted(LINEAR_CALLS, key=lambda p: p.value), ids=lambda p: p.value)
def test_linear_primitives_make_zeros_of_zeros(prim: Prim) -> None:
    """Zeros in every parameter the result is linear in (for a product, in any one of them) make zeros; values
    there make something else (the call reads them)."""
    expr, shapes = LINEAR_CALLS[prim]
    rng = np.random.default_rng(7)
    values = [np.float32(rng.uniform(1, 2)) if not s else rng.uniform(1, 2, s).astype(np.float32) for s in shapes]
    zeros = [np.zeros_like(v) for v in values]
    assert any(np.any(leaf != 0) for leaf in leaves_of(dl_eval(expr, *values))), f"{expr} ignores its arguments"
    zeroed = [[zeros[k] if k == i else v for k, v in enumerate(values)] for i in range(len(values))]
    for args in zeroed if PRIMITIVES[prim].product else [zeros]:
        for leaf in leaves_of(dl_eval(expr, *args)):
            np.testing.assert_array_equal(leaf, np.zeros_like(leaf), err_msg=expr)


def test_every_linear_primitive_is_checked() -> None:
    linear = {prim for prim, record in PRIMITIVES.items() if record.linear_in}
    assert set(LINEAR_CALLS) == linear, f"unchecked: {linear - set(LINEAR_CALLS)}; stale: {set(LINEAR_CALLS) - linear}"
    for prim in linear:
        assert PRIMITIVES[prim].linear_in <= set(PRIMITIVES[prim].parameters), prim


PRIM_TESTS: dict[Prim, tuple[str, ...]] = {
    Prim.EXP: ("test_unary_elementwise", "test_float_only_unary_rejects_integers"),
    Prim.LOG: ("test_unary_elementwise", "test_float_only_unary_rejects_integers"),
    Prim.SQRT: ("test_unary_elementwise", "test_float_only_unary_rejects_integers"),
    Prim.TANH: ("test_unary_elementwise", "test_sigmoid_relu_tanh_match_torch"),
    Prim.SIGMOID: ("test_unary_elementwise", "test_sigmoid_relu_tanh_match_torch", "test_sigmoid_extreme_inputs"),
    Prim.RELU: ("test_unary_elementwise", "test_sigmoid_relu_tanh_match_torch", "test_relu_and_abs_keep_integer_dtype"),
    Prim.ABS: ("test_unary_elementwise", "test_relu_and_abs_keep_integer_dtype"),
    Prim.SIN: ("test_unary_elementwise", "test_float_only_unary_rejects_integers"),
    Prim.COS: ("test_unary_elementwise", "test_float_only_unary_rejects_integers"),
    **{
        prim: (
            "test_unary_elementwise",
            "test_float_only_unary_rejects_integers",
            "test_softplus_log1p_expm1_erf_match_torch",
        )
        for prim in (Prim.SOFTPLUS, Prim.LOG1P, Prim.EXPM1)
    },
    Prim.ERF: ("test_float_only_unary_rejects_integers", "test_softplus_log1p_expm1_erf_match_torch"),
    Prim.TAN: ("test_unary_elementwise", "test_float_only_unary_rejects_integers", "test_trigonometry_matches_torch"),
    Prim.ASIN: ("test_unary_elementwise", "test_float_only_unary_rejects_integers", "test_trigonometry_matches_torch"),
    Prim.ACOS: ("test_unary_elementwise", "test_float_only_unary_rejects_integers", "test_trigonometry_matches_torch"),
    Prim.ATAN: ("test_unary_elementwise", "test_float_only_unary_rejects_integers", "test_trigonometry_matches_torch"),
    **{
        prim: ("test_float_only_unary_rejects_integers", "test_step_functions_match_torch")
        for prim in (Prim.FLOOR, Prim.CEIL, Prim.ROUND)
    },
    Prim.SIGN: ("test_step_functions_match_torch",),
    Prim.ISNAN: ("test_float_tests_match_torch",),
    Prim.ISINF: ("test_float_tests_match_torch",),
    Prim.ISFINITE: ("test_float_tests_match_torch",),
    Prim.VAR: ("test_var_and_std_match_torch", "test_var_of_an_empty_axis_is_an_error"),
    Prim.STD: ("test_var_and_std_match_torch", "test_var_of_an_empty_axis_is_an_error"),
    Prim.CLIP: ("test_clip_matches_torch_clamp",),
    Prim.TAKE_ALONG_AXIS: ("test_sort_argsort_and_take_along_axis_match_torch",),
    Prim.ARGSORT: ("test_sort_argsort_and_take_along_axis_match_torch",),
    Prim.SORT: ("test_sort_argsort_and_take_along_axis_match_torch",),
    Prim.TOPK: ("test_topk_matches_torch", "test_topk_ties_nan_and_errors"),
    Prim.ADD_ALONG_AXIS: ("test_add_along_axis_adds_repeated_indices",),
    Prim.FLIP: ("test_flip_and_cumsum_match_torch",),
    Prim.PAD: ("test_pad_matches_torch",),
    Prim.CUMSUM: ("test_flip_and_cumsum_match_torch", "test_f32_sums_over_many_rows_and_running_sums_stay_accurate"),
    Prim.MAXIMUM: ("test_maximum_minimum_broadcast", "test_maximum_minimum_with_literals_keep_dtype"),
    Prim.MINIMUM: ("test_maximum_minimum_broadcast", "test_maximum_minimum_with_literals_keep_dtype"),
    Prim.WHERE: (
        "test_where_broadcast",
        "test_where_literals_and_errors",
        "test_elementwise_prims_with_unbroadcastable_shapes",
    ),
    Prim.SUM: (
        "test_reduction_every_axis",
        "test_reduction_over_several_axes",
        "test_several_axes_mistakes_at_run_time",
        "test_reductions_integer_and_bool_inputs",
        "test_reductions_of_empty_tensors",
    ),
    Prim.MEAN: ("test_reduction_every_axis", "test_reduction_over_several_axes", "test_reductions_of_empty_tensors"),
    Prim.MAX: (
        "test_reduction_every_axis",
        "test_reduction_over_several_axes",
        "test_reductions_integer_and_bool_inputs",
    ),
    Prim.MIN: (
        "test_reduction_every_axis",
        "test_reduction_over_several_axes",
        "test_reductions_integer_and_bool_inputs",
    ),
    Prim.ARGMAX: (
        "test_reduction_every_axis",
        "test_argmax_argmin_ties_pick_first",
        "test_several_axes_mistakes_at_run_time",
    ),
    Prim.ARGMIN: (
        "test_reduction_every_axis",
        "test_argmax_argmin_ties_pick_first",
        "test_several_axes_mistakes_at_run_time",
    ),
    Prim.ANY: ("test_any_and_all_match_torch", "test_any_and_all_of_nothing_and_of_numbers"),
    Prim.ALL: ("test_any_and_all_match_torch", "test_any_and_all_of_nothing_and_of_numbers"),
    Prim.LOGSUMEXP: (
        "test_reduction_every_axis",
        "test_reduction_over_several_axes",
        "test_logsumexp_matches_torch",
        "test_normalizers_extreme_inputs_finite_and_match_torch",
        "test_logsumexp_infinities_match_torch",
    ),
    Prim.SOFTMAX: ("test_softmax_log_softmax_match_torch", "test_normalizers_extreme_inputs_finite_and_match_torch"),
    Prim.LOG_SOFTMAX: (
        "test_softmax_log_softmax_match_torch",
        "test_normalizers_extreme_inputs_finite_and_match_torch",
    ),
    Prim.MATMUL: ("test_matmul_shapes_match_numpy_and_torch", "test_matmul_shape_mismatch_is_a_diagnostic"),
    Prim.EINSUM: ("test_einsum_matches_numpy_and_torch", "test_einsum_mistakes_at_run_time"),
    Prim.TRANSPOSE: ("test_transpose", "test_transpose_errors"),
    Prim.SWAPAXES: ("test_swapaxes_matches_torch_transpose", "test_swapaxes_errors"),
    Prim.RESHAPE: ("test_reshape", "test_reshape_edges", "test_reshape_errors"),
    Prim.CONCAT: ("test_concat", "test_concat_integers_and_errors"),
    Prim.STACK: ("test_stack", "test_stack_errors"),
    Prim.BROADCAST_TO: ("test_broadcast_to", "test_broadcast_to_value_semantics_and_errors"),
    Prim.GATHER: (
        "test_gather_matches_take",
        "test_gather_matches_torch_index_select",
        "test_gather_dtypes_and_errors",
        "test_gather_on_scalar_is_a_diagnostic",
    ),
    Prim.ONE_HOT: ("test_one_hot_matches_torch", "test_one_hot_errors"),
    Prim.TRIL: ("test_tril_triu_match_torch", "test_tril_triu_errors"),
    Prim.TRIU: ("test_tril_triu_match_torch", "test_tril_triu_errors"),
    Prim.ZEROS: ("test_zeros_ones_full", "test_creation_dims_from_values_and_errors"),
    Prim.ONES: ("test_zeros_ones_full", "test_creation_dims_from_values_and_errors"),
    Prim.FULL: ("test_zeros_ones_full", "test_creation_dims_from_values_and_errors"),
    Prim.ARANGE: ("test_arange",),
    Prim.EYE: ("test_eye_matches_torch",),
    Prim.SQUEEZE: ("test_squeeze_matches_torch", "test_linear_primitives_make_zeros_of_zeros"),
    Prim.LINSPACE: ("test_linspace_matches_numpy_and_torch",),
    Prim.RANDN: ("test_random_seeded_reproducible", "test_random_seeds_differ_and_statistics", "test_random_errors"),
    Prim.RAND: ("test_random_seeded_reproducible", "test_random_seeds_differ_and_statistics", "test_random_errors"),
    Prim.CATEGORICAL: (
        "test_categorical_draws_each_category_as_often_as_its_probability",
        "test_categorical_seeds_streams_and_shapes",
        "test_categorical_mistakes_at_run_time",
    ),
    Prim.DROPOUT: ("test_dropout_is_torch_s_inverted_dropout_with_rand_s_mask", "test_dropout_mistakes_at_run_time"),
    Prim.SHAPE: ("test_shape_and_len", "test_shape_len_edges"),
    Prim.LEN: ("test_shape_and_len", "test_shape_len_edges"),
    Prim.FLOAT: ("test_float_conversion",),
    Prim.INT: ("test_int_conversion_truncates",),
    Prim.ASSERT: ("test_assert",),
    Prim.PRINT: (
        "test_effects_happen_on_rank_zero_alone",
        "test_print_formats",
    ),
    Prim.STR: ("test_str_shows_what_print_shows",),
    Prim.TIME: (
        "test_time_reads_a_monotonic_clock_at_every_call",
        "test_time_is_kept_in_derivative_code",
    ),
    Prim.ZEROS_LIKE: ("test_zeros_like", "test_zeros_like_of_structs_and_tapes_and_errors"),
    Prim.STOP_GRADIENT: ("test_stop_gradient_is_the_value_with_no_gradient",),
    Prim.UNBROADCAST: (
        "test_unbroadcast_sums_down_to_the_shape",
        "test_unbroadcast_examples_and_errors",
        "test_unbroadcast_to_an_incompatible_shape_is_a_diagnostic",
        "test_unbroadcast_keeps_i32",
    ),
    Prim.RESHAPE_LIKE: ("test_reshape_like", "test_reshape_like_scalars_and_errors"),
    Prim.EXPAND_DIMS: (
        "test_expand_dims_every_axis",
        "test_expand_dims_errors",
        "test_expand_dims_out_of_range_messages",
    ),
    Prim.SCATTER_ADD: (
        "test_scatter_add_matches_add_at",
        "test_scatter_add_accumulates_and_keeps_x",
        "test_scatter_add_matches_torch_index_add",
        "test_scatter_add_errors",
        "test_scatter_add_negative_axis",
        "test_scatter_add_checker_rejects_wider_updates",
    ),
    Prim.SPLIT_LIKE: (
        "test_split_like_matches_split",
        "test_split_like_examples_and_errors",
        "test_split_like_checker_rejects_pieces_that_do_not_add_up",
        "test_split_like_pieces_must_match_the_other_dims",
    ),
    Prim.TREE_ADD: (
        "test_tree_add_adds_leaf_by_leaf",
        "test_tree_add_structs_tapes_and_errors",
        "test_tree_add_promotes_like_plus",
    ),
    **{
        prim: ("test_conv2d_family_matches_torch", "test_convolution_run_time_mistakes_are_diagnostics")
        for prim in (Prim.CONV2D, Prim.CONV2D_INPUT_GRAD, Prim.CONV2D_WEIGHT_GRAD)
    },
    **{
        prim: ("test_max_pool2d_family_matches_torch", "test_convolution_run_time_mistakes_are_diagnostics")
        for prim in (Prim.MAX_POOL2D, Prim.MAX_POOL2D_GRAD, Prim.MAX_POOL2D_GATHER)
    },
    Prim.TREE_MAP: ("test_tree_map_over_structs_and_tuples", "test_tree_map_misuse_is_a_diagnostic"),
    Prim.TREE_DOT: ("test_tree_dot_sums_the_products_of_all_leaves",),
    Prim.LOG_METRIC: ("test_log_metric_appends_json_lines", "test_effects_happen_on_rank_zero_alone"),
    Prim.PROGRESS: ("test_progress_prints_plain_lines_when_not_a_terminal", "test_effects_happen_on_rank_zero_alone"),
    Prim.TAPE: (
        "test_tape_push_pop_is_last_in_first_out",
        "test_tapes_are_values",
        "test_zeros_like_of_structs_and_tapes_and_errors",
    ),
    Prim.PUSH: (
        "test_tape_push_pop_is_last_in_first_out",
        "test_tapes_are_values",
        "test_tape_misuse_is_a_diagnostic",
        "test_push_of_a_value_of_another_type_is_a_checker_error",
    ),
    Prim.POP: (
        "test_tape_push_pop_is_last_in_first_out",
        "test_pop_of_an_empty_tape_is_a_diagnostic",
        "test_tape_misuse_is_a_diagnostic",
    ),
    # data
    Prim.DIGITS: ("test_digits_dataset",),
    Prim.PERMUTATION: ("test_permutation_is_a_seeded_permutation",),
    Prim.BATCHES: ("test_batches_shapes_shuffle_and_errors", "test_batches_take_this_ranks_rows_of_every_batch"),
    Prim.LOAD_CSV: ("test_load_csv_round_trip_and_errors",),
    Prim.LOAD_NPZ: ("test_load_npz_round_trip_and_errors",),
    Prim.TEXT_CORPUS: ("test_text_corpus_and_chars",),
    Prim.CHARS: ("test_text_corpus_and_chars",),
    # checkpoints
    Prim.SAVE: ("test_save_load_round_trip", "test_save_load_errors", "test_effects_happen_on_rank_zero_alone"),
    Prim.LOAD: ("test_save_load_round_trip", "test_save_load_errors"),
    # data parallelism (more, with MPI: tests/test_distributed.py)
    Prim.RANK: ("test_rank_and_world_size_in_a_world_of_one", "test_batches_take_this_ranks_rows_of_every_batch"),
    Prim.WORLD_SIZE: ("test_rank_and_world_size_in_a_world_of_one",),
    Prim.ALLREDUCE_MEAN: (
        "test_allreduce_mean_in_a_world_of_one",
        "test_allreduce_mean_derivative_is_allreduce_mean",
        "test_allreduce_mean_packs_each_dtype_into_one_buffer",
        "test_allreduce_mean_of_different_trees_is_e0522",
    ),
}

OPERATOR_TESTS: dict[str, tuple[str, ...]] = {
    **{
        op: (
            "test_binary_operators_broadcast",
            "test_broadcast_edge_shapes",
            "test_dtype_rules",
            "test_arithmetic_on_tuples_leaf_by_leaf",
        )
        for op in ("+", "-", "*", "/")
    },
    **{
        op: ("test_binary_operators_broadcast", "test_dtype_rules", "test_integer_floor_division_and_modulo")
        for op in ("//", "%")
    },
    "**": (
        "test_binary_operators_broadcast",
        "test_dtype_rules",
        "test_integer_operator_errors",
        "test_arithmetic_on_tuples_leaf_by_leaf",
    ),
    "@": ("test_matmul_shapes_match_numpy_and_torch", "test_matmul_integer_and_mixed_dtypes"),
    **{op: ("test_binary_operators_broadcast", "test_dtype_rules") for op in COMPARISON},
    "and": ("test_logical_operators",),
    "or": ("test_logical_operators",),
}
UNARY_OPERATOR_TESTS: dict[str, tuple[str, ...]] = {
    "-": ("test_unary_operators", "test_arithmetic_on_tuples_leaf_by_leaf"),
    "not": ("test_unary_operators",),
}


def test_every_primitive_has_signature_implementation_and_tests() -> None:
    everything = set(Prim)
    assert set(PRIMITIVES) == everything, f"missing records: {everything - set(PRIMITIVES)}"
    assert set(IMPLEMENTATIONS) == everything, f"missing implementations: {everything - set(IMPLEMENTATIONS)}"
    assert set(PRIM_TESTS) == everything, (
        f"primitives without tests: {everything - set(PRIM_TESTS)}; stale entries: {set(PRIM_TESTS) - everything}"
    )
    for name in {n for names in PRIM_TESTS.values() for n in names}:
        assert callable(globals().get(name)) and name.startswith("test_"), f"no test named {name}"


def test_every_operator_has_tests() -> None:
    assert set(OPERATOR_TESTS) == set(BINARY), f"binary operators: {set(BINARY) ^ set(OPERATOR_TESTS)}"
    assert set(UNARY_OPERATOR_TESTS) == set(UNARY), f"unary operators: {set(UNARY) ^ set(UNARY_OPERATOR_TESTS)}"
    for names in [*OPERATOR_TESTS.values(), *UNARY_OPERATOR_TESTS.values()]:
        for name in names:
            assert callable(globals().get(name)) and name.startswith("test_"), f"no test named {name}"


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(-12, 12), st.integers(-12, 12), st.integers(-5, 5).filter(bool))
def test_arange_with_a_step_is_numpy_s(start: int, stop: int, step: int) -> None:
    check(dl_eval(f"arange({start}, {stop}, {step})"), np.arange(start, stop, step), I64)
    check(dl_eval("arange(a, b, c)", start, stop, step), np.arange(start, stop, step), I64)


def test_arange_with_a_step_of_zero_is_refused() -> None:
    typed = dl.lang.check("fn main() {\n    print(arange(0, 3, 0))\n}\n", "step.dl")
    found = [(d.code, d.message, d.span.line, d.span.column) for d in typed.diagnostics]
    assert found == [("E0307", "`arange`'s step is 0", 2, 24)]
    assert "`arange`'s step is 0" in str(runtime_error("arange(0, 3, a)", 0))


def test_arange_to_a_negative_stop_is_empty_to_the_checker_too() -> None:
    source = "fn main() {\n    let a: i64[0] = arange(0, -3, 1)\n    print(a, arange(0, -3) + arange(0, 0))\n}\n"
    assert dl.lang.check(source, "empty.dl").diagnostics == ()
