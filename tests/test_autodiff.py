"""`grad` and `value_and_grad` against PyTorch and against finite differences, on the cases of autodiff_cases.

For each case the test appends wrappers to the case's source. A wrapper takes the leaves of the case's
arguments (tensors, scalars, integers) as parameters, rebuilds tuples and structs in DL, and calls `f`, or
`grad(f, wrt=...)`, or `value_and_grad(f, wrt=...)`, or `grad(grad(f))`:

    fn dl_call(a0, a1_w, a1_b) { return f(a0, Linear { w: a1_w, b: a1_b }) }
    fn dl_grad(a0, a1_w, a1_b) { return grad(f, wrt=(0, 1))(a0, Linear { w: a1_w, b: a1_b }) }

so a struct argument never has to be built in Python, and finite differences perturb one leaf at a time.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from autodiff_cases import CASES, Case, Struct
from dl import pipeline
from dl.lang.diagnostics import DiagnosticError
from dl.runtime.values import StructValue

CASES_BY_NAME = {case.name: case for case in CASES}
VALUE_AND_GRAD_CASES = [case for case in CASES if case.value_and_grad]
SECOND_ORDER_CASES = [case for case in CASES if case.second_order]

FORWARD_TOLERANCE = {"rtol": 1e-9, "atol": 1e-11}
TORCH_TOLERANCE = {"rtol": 1e-7, "atol": 1e-9}
FD_EPS = 1e-6
FD_TOLERANCE = {"rtol": 1e-5, "atol": 1e-7}
FD2_TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}


def case_ids(cases: list[Case]) -> list[str]:
    return [case.name for case in cases]


# ---------------------------------------------------------------------------------------------------------
# Building the wrappers


def argument_expression(value: Any, name: str, params: list[str]) -> str:
    """The DL expression that rebuilds `value` from leaf parameters named after `name`; appends them."""
    if isinstance(value, Struct):
        fields = ", ".join(
            f"{field}: {argument_expression(item, f'{name}_{field}', params)}" for field, item in value.fields.items()
        )
        return f"{value.name} {{ {fields} }}"
    if isinstance(value, tuple):
        items = [argument_expression(item, f"{name}_{position}", params) for position, item in enumerate(value)]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    params.append(name)
    return name


def leaves(value: Any) -> list[Any]:
    """The leaf values of an argument, in the order of `argument_expression`'s parameters."""
    if isinstance(value, Struct):
        return [leaf for item in value.fields.values() for leaf in leaves(item)]
    if isinstance(value, tuple):
        return [leaf for item in value for leaf in leaves(item)]
    return [value]


def rebuild(value: Any, flat: list[Any]) -> Any:
    """`value` with its leaves replaced, in order, by the items popped from the front of `flat`."""
    if isinstance(value, Struct):
        return Struct(value.name, {field: rebuild(item, flat) for field, item in value.fields.items()})
    if isinstance(value, tuple):
        return tuple(rebuild(item, flat) for item in value)
    return flat.pop(0)


def wrt_positions(case: Case) -> tuple[int, ...]:
    return case.wrt if isinstance(case.wrt, tuple) else (case.wrt,)


def wrt_keyword(wrt: int | tuple[int, ...]) -> str:
    if isinstance(wrt, tuple):
        return f", wrt=({', '.join(str(position) for position in wrt)})"
    return "" if wrt == 0 else f", wrt={wrt}"


def transform_call(case: Case, transform: str, expressions: list[str]) -> str:
    """`transform(f, wrt=...)(args)` for a direct case; for a "lambda" case the function differentiated is
    an anonymous function of the wrt arguments that captures the others."""
    if case.via == "direct":
        return f"{transform}(f{wrt_keyword(case.wrt)})({', '.join(expressions)})"
    assert case.via == "lambda", case.via
    positions = wrt_positions(case)
    lambda_params = [f"p{position}" for position in positions]
    inner = [f"p{position}" if position in positions else expr for position, expr in enumerate(expressions)]
    wrt = tuple(range(len(positions))) if isinstance(case.wrt, tuple) else 0
    function = f"fn({', '.join(lambda_params)}) => f({', '.join(inner)})"
    outer = [expressions[position] for position in positions]
    return f"{transform}({function}{wrt_keyword(wrt)})({', '.join(outer)})"


def wrapper_source(case: Case, kind: str) -> str:
    params: list[str] = []
    expressions = [argument_expression(value, f"a{position}", params) for position, value in enumerate(case.args)]
    header = f"fn dl_{kind}({', '.join(params)})"
    if kind == "call":
        body = f"f({', '.join(expressions)})"
    elif kind == "grad":
        body = transform_call(case, "grad", expressions)
    elif kind == "value_and_grad":
        body = transform_call(case, "value_and_grad", expressions)
    elif kind == "d1":
        body = f"grad(f)({', '.join(expressions)})"
    elif kind == "d2":
        body = f"grad(grad(f))({', '.join(expressions)})"
    else:
        raise ValueError(kind)
    return f"{header} {{\n    return {body}\n}}\n"


@functools.cache
def program(name: str, kinds: tuple[str, ...]) -> Any:
    case = CASES_BY_NAME[name]
    source = case.source + "\n" + "\n".join(wrapper_source(case, kind) for kind in kinds)
    return pipeline.load(f"{name}.dl", source)


def call(case: Case, kind: str, args: tuple | None = None) -> Any:
    """Call the wrapper `dl_<kind>` of `case` (with the case's arguments unless `args` is given)."""
    kinds = ("call",) if kind == "call" else ("call", kind)
    loaded = program(case.name, kinds)
    flat = [leaf for value in (case.args if args is None else args) for leaf in leaves(value)]
    return pipeline.call(loaded, f"dl_{kind}", [copy_leaf(leaf) for leaf in flat])


def copy_leaf(leaf: Any) -> Any:
    return leaf.copy() if isinstance(leaf, np.ndarray) else leaf


# ---------------------------------------------------------------------------------------------------------
# Flattening results for comparison


def flatten(value: Any, path: str = "") -> list[tuple[str, Any]]:
    """(path, leaf) pairs of a DL result or of an expected value: structs by field name, tuples by position.
    A struct's path records its type name, so a struct of another type does not compare equal."""
    if isinstance(value, StructValue):
        return [
            pair
            for field, item in zip(value.type.fields, value.values, strict=True)
            for pair in flatten(item, f"{path}<{value.type.name}>.{field}")
        ]
    if isinstance(value, Struct):
        return [pair for field, item in value.fields.items() for pair in flatten(item, f"{path}<{value.name}>.{field}")]
    if isinstance(value, tuple):
        return [pair for position, item in enumerate(value) for pair in flatten(item, f"{path}[{position}]")]
    return [(path, value)]


def assert_same_structure_and_close(actual: Any, expected: Any, tolerance: dict, what: str) -> None:
    actual_flat = flatten(actual)
    expected_flat = flatten(expected)
    assert [path for path, _ in actual_flat] == [path for path, _ in expected_flat], (
        f"{what}: structure differs: {actual!r}"
    )
    for (path, got), (_, want) in zip(actual_flat, expected_flat, strict=True):
        got_array = np.asarray(got)
        want_array = np.asarray(want, dtype=np.float64)
        assert got_array.shape == want_array.shape, f"{what}{path}: shape {got_array.shape} != {want_array.shape}"
        assert got_array.dtype == np.float64, f"{what}{path}: dtype {got_array.dtype}, expected float64"
        np.testing.assert_allclose(got_array, want_array, err_msg=f"{what}{path}", **tolerance)


# ---------------------------------------------------------------------------------------------------------
# PyTorch


def to_torch(value: Any, requires_grad: bool, collected: list[torch.Tensor]) -> Any:
    """The case argument as PyTorch values; float leaves that need a gradient are appended to `collected`."""
    if isinstance(value, Struct):
        return SimpleNamespace(**{k: to_torch(item, requires_grad, collected) for k, item in value.fields.items()})
    if isinstance(value, tuple):
        return tuple(to_torch(item, requires_grad, collected) for item in value)
    if isinstance(value, int | np.integer):
        return int(value)
    array = np.asarray(value)
    if array.dtype.kind in "iu":
        return torch.tensor(array, dtype=torch.int64)
    tensor = torch.tensor(array, dtype=torch.float64, requires_grad=requires_grad)
    if requires_grad:
        collected.append(tensor)
    return tensor


def torch_value_and_grad(case: Case) -> tuple[float, Any]:
    """The value of the PyTorch function and its gradient, shaped as DL's `grad(f, wrt=case.wrt)` result."""
    positions = wrt_positions(case)
    per_argument: dict[int, list[torch.Tensor]] = {}
    converted = []
    for position, value in enumerate(case.args):
        collected: list[torch.Tensor] = []
        converted.append(to_torch(value, position in positions, collected))
        per_argument[position] = collected
    output = case.torch_fn(*converted)
    assert output.dim() == 0, f"{case.name}: the PyTorch function must return a scalar"
    inputs = [tensor for position in positions for tensor in per_argument[position]]
    raw = torch.autograd.grad(output, inputs, allow_unused=True)
    grads = [
        np.zeros(tuple(tensor.shape)) if g is None else g.detach().numpy()
        for tensor, g in zip(inputs, raw, strict=True)
    ]
    shaped = [rebuild(case.args[position], grads) for position in positions]
    gradient = tuple(shaped) if isinstance(case.wrt, tuple) else shaped[0]
    return output.item(), gradient


def torch_value(case: Case) -> float:
    with torch.no_grad():
        converted = [to_torch(value, False, []) for value in case.args]
        return case.torch_fn(*converted).item()


def torch_derivatives(case: Case) -> tuple[float, float]:
    """First and second derivative of a scalar -> scalar case by PyTorch double backward."""
    (x0,) = case.args
    x = torch.tensor(float(x0), dtype=torch.float64, requires_grad=True)
    y = case.torch_fn(x)
    (first,) = torch.autograd.grad(y, x, create_graph=True)
    (second,) = torch.autograd.grad(first, x)
    return first.item(), second.item()


# ---------------------------------------------------------------------------------------------------------
# Finite differences


def perturbed(args: tuple, leaf_index: int, element: tuple, delta: float) -> tuple:
    """The arguments with one element of one float leaf (counted over all arguments) moved by `delta`."""
    flat = [copy_leaf(leaf) for value in args for leaf in leaves(value)]
    leaf = flat[leaf_index]
    if isinstance(leaf, np.ndarray):
        leaf[element] += delta
    else:
        flat[leaf_index] = np.float64(leaf + delta)
    return tuple(rebuild(value, flat) for value in args)


@functools.cache
def finite_difference_gradient_of(name: str) -> Any:
    """`finite_difference_gradient` of a case's `f`, computed once per case."""
    return finite_difference_gradient(CASES_BY_NAME[name])


def finite_difference_gradient(case: Case, kind: str = "call") -> Any:
    """Central differences of the DL wrapper `dl_<kind>` (scalar-valued) for every element of every wrt
    argument, shaped like `grad(f, wrt=case.wrt)`."""
    positions = wrt_positions(case)
    offsets = np.cumsum([0] + [len(leaves(value)) for value in case.args])
    shaped = []
    for position in positions:
        estimates = []
        for local, leaf in enumerate(leaves(case.args[position])):
            leaf_index = int(offsets[position]) + local
            estimate = np.zeros(np.shape(leaf))
            for element in np.ndindex(np.shape(leaf)):
                plus = call(case, kind, perturbed(case.args, leaf_index, element, FD_EPS))
                minus = call(case, kind, perturbed(case.args, leaf_index, element, -FD_EPS))
                estimate[element] = (float(plus) - float(minus)) / (2 * FD_EPS)
            estimates.append(estimate if np.ndim(leaf) else np.float64(estimate))
        shaped.append(rebuild(case.args[position], estimates))
    return tuple(shaped) if isinstance(case.wrt, tuple) else shaped[0]


# ---------------------------------------------------------------------------------------------------------
# Tests


@pytest.mark.parametrize("case", CASES, ids=case_ids(CASES))
def test_forward(case: Case) -> None:
    value = call(case, "call")
    assert np.ndim(value) == 0, f"f returned {value!r}, not a scalar"
    assert np.asarray(value).dtype == np.float64
    np.testing.assert_allclose(float(value), torch_value(case), **FORWARD_TOLERANCE)


@pytest.mark.parametrize("case", CASES, ids=case_ids(CASES))
def test_case_is_differentiable_at_its_inputs(case: Case) -> None:
    """Checks the corpus itself (passes without `grad`): PyTorch's gradient agrees with central finite
    differences of DL's `f`, so the inputs are away from kinks and branch boundaries."""
    _, expected = torch_value_and_grad(case)
    assert_same_structure_and_close(finite_difference_gradient_of(case.name), expected, FD_TOLERANCE, case.name)


@pytest.mark.parametrize("case", CASES, ids=case_ids(CASES))
def test_gradient_matches_torch(case: Case) -> None:
    _, expected = torch_value_and_grad(case)
    assert_same_structure_and_close(call(case, "grad"), expected, TORCH_TOLERANCE, f"{case.name}: grad")


@pytest.mark.parametrize("case", CASES, ids=case_ids(CASES))
def test_gradient_matches_finite_differences(case: Case) -> None:
    gradient = call(case, "grad")
    expected = finite_difference_gradient_of(case.name)
    assert_same_structure_and_close(gradient, expected, FD_TOLERANCE, f"{case.name}: grad")


@pytest.mark.parametrize("case", VALUE_AND_GRAD_CASES, ids=case_ids(VALUE_AND_GRAD_CASES))
def test_value_and_grad(case: Case) -> None:
    result = call(case, "value_and_grad")
    assert isinstance(result, tuple) and len(result) == 2, f"value_and_grad gave {result!r}"
    value, gradient = result
    expected_value, expected_gradient = torch_value_and_grad(case)
    assert np.ndim(value) == 0
    np.testing.assert_allclose(float(value), expected_value, **FORWARD_TOLERANCE)
    np.testing.assert_allclose(float(value), float(call(case, "call")), rtol=1e-12, atol=0)
    assert_same_structure_and_close(gradient, expected_gradient, TORCH_TOLERANCE, f"{case.name}: value_and_grad")


@pytest.mark.parametrize("case", SECOND_ORDER_CASES, ids=case_ids(SECOND_ORDER_CASES))
def test_second_derivative(case: Case) -> None:
    first, second = torch_derivatives(case)
    dl_first = call(case, "d1")
    dl_second = call(case, "d2")
    assert np.ndim(dl_first) == 0 and np.ndim(dl_second) == 0
    np.testing.assert_allclose(float(dl_first), first, **TORCH_TOLERANCE)
    np.testing.assert_allclose(float(dl_second), second, **TORCH_TOLERANCE)
    (x,) = case.args
    plus = call(case, "d1", (np.float64(x + FD_EPS),))
    minus = call(case, "d1", (np.float64(x - FD_EPS),))
    np.testing.assert_allclose(float(dl_second), (float(plus) - float(minus)) / (2 * FD_EPS), **FD2_TOLERANCE)


@pytest.mark.parametrize("case", SECOND_ORDER_CASES, ids=case_ids(SECOND_ORDER_CASES))
def test_second_order_case_is_valid(case: Case) -> None:
    """Checks the corpus itself: PyTorch's second derivative agrees with finite differences of its first."""
    _, second = torch_derivatives(case)
    (x,) = case.args
    shifted = [
        torch_derivatives(Case(case.name, case.category, case.source, (np.float64(x + delta),), case.torch_fn))[0]
        for delta in (FD_EPS, -FD_EPS)
    ]
    np.testing.assert_allclose(second, (shifted[0] - shifted[1]) / (2 * FD_EPS), **FD2_TOLERANCE)


def test_corpus_size() -> None:
    assert len(CASES) >= 60
    assert len(SECOND_ORDER_CASES) >= 8
    assert len(CASES_BY_NAME) == len(CASES), "case names must be unique"


# ---------------------------------------------------------------------- the rules themselves


def test_every_primitive_has_a_derivative_rule_or_is_not_differentiable() -> None:
    """Each record's derivative is templates that parse, over names the transform binds; a rule the transform
    computes (each with a reason, and an implementation there); or none, with a reason."""
    from dl.lang import ast
    from dl.lang.autodiff.reverse import COMPUTED
    from dl.lang.autodiff.rules import EXPANDED, REDUCED, template
    from dl.lang.primitives import PRIMITIVES, Computed, NoDerivative, Prim, Templates

    assert set(PRIMITIVES) == set(Prim)
    forms = {"expand", "total", "count"}
    for prim, record in PRIMITIVES.items():
        match record.derivative:
            case Templates(adjoints=adjoints):
                bound = {"d", "r", "k", "r_dtype", *record.parameters, *(f"{p}_dtype" for p in record.parameters)}
                for param, source in adjoints:
                    assert param in record.parameters, (prim, param)
                    expr = template(source)
                    called = {n.func.id for n in ast.walk(expr) if isinstance(n, ast.Call)}
                    names = ast.free_names(expr) - called
                    assert names <= bound, (prim, names - bound)
                    assert called & forms == set() or prim in REDUCED, (prim, called)
            case Computed(reason=reason):
                assert reason and (prim in COMPUTED) != (prim in EXPANDED), prim
            case NoDerivative(reason=reason):
                assert reason, prim
    computed = {p for p, r in PRIMITIVES.items() if isinstance(r.derivative, Computed)}
    assert set(COMPUTED) | EXPANDED == computed


# What derivative code is written with has rules too (grad(grad(f)) differentiates it): each body is a
# scalar function of x: f64[6], checked against central finite differences.
HELPER_BODIES = {
    "unbroadcast": "return sum(unbroadcast(reshape(x, 3, 2), zeros(2, dtype=f64)) * [1.5f64, -2.0f64])",
    "reshape_like": "let m = reshape_like(x, zeros(2, 3))\n    return sum(m * m * m)",
    "expand_dims": "return sum(sin(expand_dims(x, 0) * expand_dims(x, 1)))",
    "scatter_add": "return sum(scatter_add(x, [0, 0, 5], x[1:4] * x[1:4]) ** 2)",
    "split_like": "let (a, b) = split_like(x, (zeros(2), zeros(4)))\n    return sum(a) * sum(b * b)",
    "tree_add": "let (p, q) = tree_add((x, x * 2.0), (x * x, exp(x)))\n    return sum(p * q)",
    "tape": "let t = push(push(tape(x), x * 2.0), sin(x))\n"
    "    let (top, rest) = pop(t)\n"
    "    let (below, rest_2) = pop(rest)\n"
    "    return sum(top * below)",
    "zeros_like": "return sum(zeros_like(x) + x * x)",
    "float": "return sum(float(x * x, dtype=f64) * x)",
    "concat_gather": "return sum(gather(concat((x, x * x), axis=0), [0, 7, 7, 11]) ** 2)",
}


@pytest.mark.parametrize("body", HELPER_BODIES.values(), ids=HELPER_BODIES.keys())
def test_rules_of_what_derivative_code_is_written_with(body: str) -> None:
    source = f"fn f(x) {{\n    {body}\n}}\n\nfn g(x) {{\n    return grad(f)(x)\n}}\n"
    program = pipeline.load("helpers.dl", source)
    x = np.random.default_rng(7).uniform(0.5, 1.5, 6)
    gradient = pipeline.call(program, "g", [x.copy()])
    eps = 1e-6
    expected = np.zeros(6)
    for i in range(6):
        up, down = x.copy(), x.copy()
        up[i] += eps
        down[i] -= eps
        expected[i] = (pipeline.call(program, "f", [up]) - pipeline.call(program, "f", [down])) / (2 * eps)
    np.testing.assert_allclose(gradient, expected, rtol=1e-6, atol=1e-8)


def test_gradient_across_modules_with_default_arguments(tmp_path) -> None:
    """A default naming its own module's const, filled in by a caller in another module."""
    (tmp_path / "layers.dl").write_text(
        "struct Dense { w: f64[3, 2], b: f64[2] }\n\n"
        "fn dense(layer: Dense, x: f64[B, 3]) -> f64[B, 2] {\n    return tanh(x @ layer.w + layer.b)\n}\n\n"
        "const SCALE = 2.0\n\n"
        "fn mse(pred, target, scale = SCALE * 1.0) {\n"
        "    let err = pred - target\n    return scale * mean(err * err)\n}\n"
    )
    main = tmp_path / "main.dl"
    main.write_text(
        "import layers as L\n\n"
        "fn loss(w, b, x, y) {\n    return L.mse(L.dense(L.Dense { w: w, b: b }, x), y)\n}\n\n"
        "fn g(w, b, x, y) {\n    let d = grad(loss, wrt=(0, 1))(w, b, x, y)\n"
        "    return (d, grad(L.mse)(x, x * 2.0))\n}\n"
    )
    rng = np.random.default_rng(3)
    w, b, x, y = (
        rng.standard_normal((3, 2)),
        rng.standard_normal(2),
        rng.standard_normal((4, 3)),
        rng.standard_normal((4, 2)),
    )
    (dw, db), dpred = pipeline.call(pipeline.load(str(main)), "g", [w, b, x, y])
    tw, tb, tx, ty = (torch.tensor(v, requires_grad=True) for v in (w, b, x, y))
    err = torch.tanh(tx @ tw + tb) - ty
    expected_w, expected_b = torch.autograd.grad(2.0 * (err * err).mean(), (tw, tb))
    np.testing.assert_allclose(dw, expected_w.numpy(), rtol=1e-10)
    np.testing.assert_allclose(db, expected_b.numpy(), rtol=1e-10)
    np.testing.assert_allclose(dpred, 2.0 * 2.0 * (x - 2.0 * x) / x.size, rtol=1e-10)


@pytest.mark.parametrize(
    "x",
    [[1e7, 1e7], [1000.0, 1000.0, -1000.0], [-20000.0, -20000.5, -20003.0], [[3e7, 3e7, 0.0], [1.0, 2.0, 3.0]]],
)
def test_logsumexp_gradient_is_softmax_in_f32(x) -> None:
    """In f32, `logsumexp([1e7, 1e7])` rounds to `1e7 + 1`, not `1e7 + log 2`: `exp(x - r)` alone would be
    `[0.368, 0.368]`; the gradient is the softmax, summing to 1, as JAX's."""
    data = np.array(x, dtype=np.float32)
    source = "fn f(x) { return sum(logsumexp(x, axis=-1)) }\nfn g(x) { return grad(f)(x) }\n"
    got = pipeline.call(pipeline.load("<lse>.dl", source), "g", [data])
    shifted = np.exp(data.astype(np.float64) - data.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(got, shifted / shifted.sum(axis=-1, keepdims=True), rtol=1e-6, atol=1e-7)
    assert got.dtype == np.float32


RECOMPUTED_DRAWS = """
fn branch(w: f32[3], flag: bool) -> f32 {
    let s = 0.0
    if flag {
        let e = randn(3)
        s = sum(w * e) + sum(w * randn(3)) * 0.5
    }
    return s
}

fn nested(w: f32[3]) -> f32 {
    let s = 0.0
    for i in 0..2 {
        for j in 0..3 {
            s = s + sum(w * rand(3))
        }
    }
    return s
}

fn both(w: f32[3]) -> (f32, f32[3], f32, f32[3], f32[3]) {
    let (a, da) = value_and_grad(branch)(w, true)
    let (b, db) = value_and_grad(nested)(w)
    return (a, da, b, db, grad(branch)(w, true))
}
"""


@pytest.mark.parametrize("backend", ["interp", "llvm"])
def test_random_draws_run_again_draw_the_same_numbers(backend: str) -> None:
    """The backward sweep runs a branch again, and a loop with a loop inside: an unseeded draw there is given a
    seed, so the gradient is of the noise the value saw. With `w` all ones each function is linear in `w` with
    the noise as coefficients, so the value is the sum of the gradient's elements."""
    program = pipeline.load("<draws>.dl", RECOMPUTED_DRAWS)
    a, da, b, db, again = pipeline.call(program, "both", [np.ones(3, dtype=np.float32)], backend=backend)
    np.testing.assert_allclose(float(a), float(np.sum(da)), rtol=1e-5)
    np.testing.assert_allclose(float(b), float(np.sum(db)), rtol=1e-5)
    assert np.all(db > 0) and np.all(db < 6)  # six uniform draws per element
    assert not np.array_equal(again, da), "each call draws from the run's stream: other noise"


ITEMS_WITH_DRAWS = """
fn f(x: f32[3]) -> f32 {
    let h = x
    let i = 0
    while i < 2 {
        for s in (2.0, 0.5) {
            h = tanh(h * s) + randn(3) * 0.1
        }
        i += 1
    }
    return sum(h * h)
}

fn main(mode: str) {
    let x = [0.5, 0.25, 1.0]
    if mode == "value" { print(f(x)) }
    if mode == "value_and_grad" { print(value_and_grad(f)(x)[0]) }
}
"""


def test_draws_in_a_loop_over_a_tuple_are_the_runs_own(run_dl) -> None:
    """A loop over a tuple's items is written out, and a `while` around it keeps its values on a tape: neither
    runs again in the backward sweep, so their draws come from the run's stream, and `value_and_grad`'s value
    is the function's own under the same seed (the draws were given seeds, other numbers: found in review)."""
    values = [run_dl(ITEMS_WITH_DRAWS, [mode], ("--seed", "7")) for mode in ("value", "value_and_grad")]
    assert [status for status, _, _ in values] == [0, 0], values
    assert values[0][1] == values[1][1], values


OWN_ASSERT = """
fn assert(c: bool, m: str) {
    print(m)
}

fn scaled(x: f32[N], mode = "sum") -> f32 {
    assert(mode == "sum", "the module's own assert ran")
    if mode == "sum" {
        return sum(x * x)
    }
    return mean(x * x)
}

fn main() {
    print(grad(fn(x) => scaled(x, "sum"))([1.0, 2.0]))
}
"""


def test_a_modules_own_assert_is_called_in_a_derivative(run_dl) -> None:
    """A derivative that writes a call in place leaves out a built-in `assert` its literal arguments decide, but
    not a call of the module's own function named `assert` (it was left out: found in review)."""
    status, out, err = run_dl(OWN_ASSERT)
    assert status == 0, err
    assert out == "the module's own assert ran\n[2. 4.]\n"


ZEROS_OF_THE_PROGRAM = """
fn scaled(x: f32[3]) -> f32 {
    return sum(sqrt(x)) * 0.0
}

fn parts(x: f32[3]) -> (f32, f32) {
    let s = 0.0
    for i in 0..2 {
        s = s + sum(sqrt(x))
    }
    return (s, sum(x * x))
}

fn weighted(x: f32[3]) -> f32 {
    let (r, t) = parts(x)
    return r * 0.0 + t
}

fn last_update_unread(x: f32[3]) -> f32 {
    let h = x
    let acc = 0.0
    for i in 0..3 {
        acc = acc + sum(h)
        h = sqrt(h)
    }
    return acc
}

fn all(x: f32[3]) -> (f32[3], f32[3], f32[3]) {
    return (grad(scaled)(x), grad(weighted)(x), grad(last_update_unread)(x))
}
"""


@pytest.mark.parametrize("backend", ["interp", "llvm"])
def test_zeros_of_the_program_against_pytorch(backend: str) -> None:
    """Where the program multiplies by 0.0 its own values, PyTorch's NaN (0 * inf of `sqrt` at 0) stays; where
    a loop's last `sqrt` makes what nothing reads, it has no gradient (PyTorch's inf from the earlier ones)."""
    x = np.array([0.0, 1.0, 2.0], dtype=np.float32)
    got = pipeline.call(pipeline.load("<zeros>.dl", ZEROS_OF_THE_PROGRAM), "all", [x], backend=backend)

    def last_update_unread(t):
        h, acc = t, 0.0
        for _ in range(3):
            acc, h = acc + h.sum(), torch.sqrt(h)
        return acc

    for made, function in zip(
        got,
        (
            lambda t: torch.sqrt(t).sum() * 0.0,
            lambda t: 2 * torch.sqrt(t).sum() * 0.0 + (t * t).sum(),
            last_update_unread,
        ),
        strict=True,
    ):
        t = torch.tensor(x, requires_grad=True)
        function(t).backward()
        np.testing.assert_allclose(made, t.grad.numpy(), rtol=1e-6, equal_nan=True)


def test_gradient_of_a_loss_that_takes_a_gradient_through_an_unused_result() -> None:
    """grad of a loss that calls grad of a function whose other result nothing reads: the first derivative's
    tapes of adjoints are zeros for that result (a tape of zeros pops zeros: `push` and `pop` are linear), so
    the second gives no NaN through `sqrt` at 0, as PyTorch."""
    source = (
        "fn parts(x: f32[3]) -> (f32, f32) {\n    let s = 0.0\n    for i in 0..2 { s = s + sum(sqrt(x)) }\n"
        "    return (s, sum(x * x))\n}\n"
        "fn loss(w: f32[3], x: f32[3]) -> f32 {\n    let g = grad(fn(v) => parts(v * w)[1])(x)\n"
        "    return sum(g * g)\n}\n"
        "fn g(w: f32[3], x: f32[3]) -> f32[3] { return grad(loss)(w, x) }\n"
    )
    w, x = np.array([1.0, 0.5, 2.0], dtype=np.float32), np.array([0.0, 1.0, 2.0], dtype=np.float32)
    got = pipeline.call(pipeline.load("<second>.dl", source), "g", [w, x])
    tw = torch.tensor(w, requires_grad=True)
    tx = torch.tensor(x, requires_grad=True)
    v = tx * 1.0
    (gv,) = torch.autograd.grad(((v * tw) * (v * tw)).sum(), v, create_graph=True)
    (gv * gv).sum().backward()
    np.testing.assert_allclose(got, tw.grad.numpy(), rtol=1e-6)


@pytest.mark.parametrize(
    "loop",
    [
        "let i = 0\n    while i < 5 {\n        acc = acc + x[i]\n        i += 1\n    }",
        "let s: f32[_] = x\n    while len(s) > 0 {\n        acc = acc + s[5]\n        s = s[1:]\n    }",
    ],
    ids=["counted", "popping"],
)
def test_a_loop_of_the_program_runs_whose_values_nothing_reads(loop: str) -> None:
    """The backward sweep's idle loops are dropped; the program's own loops run as written (one written as the
    backward sweep's are, `while len(s) > 0`, too), and an index out of range in one is still the error it is
    without `grad`."""
    source = (
        f"fn f(x: f32[3]) -> f32 {{\n    let acc = 0.0\n    {loop}\n    return sum(x * x)\n}}\n"
        "fn g(x: f32[3]) -> f32[3] { return grad(f)(x) }\n"
    )
    with pytest.raises(DiagnosticError) as raised:
        pipeline.call(pipeline.load("<loop>.dl", source), "g", [np.ones(3, dtype=np.float32)])
    assert raised.value.diagnostics[0].code == "E0501"


def test_a_loop_variable_whose_size_changes_gets_its_gradient_in_its_own_shape() -> None:
    """A variable declared `f32[_]` that a loop grows: its adjoint is zeros of a new shape at each iteration of
    the backward sweep, which zeros.py must not take for the zeros it already holds."""
    source = (
        "fn grown(x, n: i64) {\n    let h: f32[_] = x\n    let acc = 0.0\n"
        "    for i in 0..n {\n        acc = acc + sum(h * h)\n        h = concat((h, h, h))\n    }\n"
        "    return acc\n}\n"
        "fn g(x: f32[1], n: i64) -> f32[1] { return grad(grown)(x, n) }\n"
    )
    program = pipeline.load("<grown>.dl", source)
    for n, expected in ((1, 4.0), (2, 16.0), (3, 2.0 * 2.0 * 13.0)):
        got = pipeline.call(program, "g", [np.array([2.0], dtype=np.float32), n])
        np.testing.assert_allclose(got, [expected], rtol=1e-6)


def test_hessian_vector_product_by_reverse_over_reverse() -> None:
    source = (
        "fn f(x) {\n    let y = x\n    let i = 0\n"
        "    while i < 3 {\n        y = tanh(y * x + 0.5)\n        i += 1\n    }\n"
        "    return sum(y * y) + sum(x * x * x) + sum(x) * x[0]\n}\n\n"
        "fn hvp(x, v) {\n    return grad(fn(z) => sum(grad(f)(z) * v))(x)\n}\n"
    )
    rng = np.random.default_rng(11)
    x, v = rng.uniform(-0.5, 0.5, 4), rng.standard_normal(4)
    product = pipeline.call(pipeline.load("hvp.dl", source), "hvp", [x, v])

    def f(t):
        y = t
        for _ in range(3):
            y = torch.tanh(y * t + 0.5)
        return (y * y).sum() + (t**3).sum() + t.sum() * t[0]

    hessian = torch.autograd.functional.hessian(f, torch.tensor(x)).numpy()
    np.testing.assert_allclose(product, hessian @ v, rtol=1e-9, atol=1e-12)


def test_effects_of_a_called_function_run_once_per_call(capsys) -> None:
    """A branch's backward runs it again: a call in it must not print (or assert) twice; a call whose
    result nothing reads must still print."""
    case = CASES_BY_NAME["printing_function_called_in_branch"]
    capsys.readouterr()
    call(case, "call")
    assert capsys.readouterr().out.splitlines().count("g called") == 2
    call(case, "grad")
    assert capsys.readouterr().out.splitlines().count("g called") == 2


def test_an_f32_parameter_of_a_function_with_an_f64_result_gets_an_f32_gradient() -> None:
    """An f32 operand of an f64 operation gets its adjoint rounded to f32 (`unbroadcast`), as PyTorch's
    gradients take their tensor's dtype: in a loop, a struct, a tuple and a recursive function."""
    source = (
        "struct S { a: f32[2], b: f64 }\n\n"
        "fn h(x: f32[3]) -> f64 {\n    return sum(x * x + 0.0f64)\n}\n\n"
        "fn looped(x: f32) {\n    let s = 0.0f64\n    for i in 0..3 {\n        s = s + x\n    }\n    return s\n}\n\n"
        "fn fields(s: S) {\n    return sum(s.a + 0.0f64) * s.b\n}\n\n"
        "fn pair(t) {\n    let (a, b) = t\n    return sum(a * b)\n}\n\n"
        "fn deep(x: f32[2], n: i64) {\n    if n == 0 {\n        return sum(x + 0.0f64)\n    }\n"
        "    return deep(x * 2.0, n - 1) * 1.5f64\n}\n\n"
        "fn g(x: f32[3]) {\n    let a: f32[2] = [0.5, 0.25]\n    let s = S { a: a, b: 3.0f64 }\n"
        "    return (grad(h)(x), grad(looped)(0.5), grad(fields)(s), grad(pair)((a, 3.0f64)), "
        "grad(deep)(a, 2))\n}\n"
    )
    x = np.array([0.5, -1.25, 3.0], dtype=np.float32)
    d_h, d_looped, d_fields, d_pair, d_deep = pipeline.call(pipeline.load("widen.dl", source), "g", [x])
    assert d_h.dtype == np.float32
    np.testing.assert_array_equal(d_h, 2 * x)
    assert d_looped == 3.0 and np.asarray(d_looped).dtype == np.float32
    assert d_fields.values[0].dtype == np.float32 and list(d_fields.values[0]) == [3.0, 3.0]
    assert d_fields.values[1] == 0.75
    assert d_pair[0].dtype == np.float32 and list(d_pair[0]) == [3.0, 3.0] and d_pair[1] == 0.75
    assert d_deep.dtype == np.float32 and list(d_deep) == [9.0, 9.0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_float_literal_bound_by_let_has_its_uses_dtype_in_derivative_code(dtype) -> None:
    """`let c = 0.1` takes the dtype of the values it meets (the f64 or the f32 nearest 0.1): the derivative
    code, checked again, computes with the same `c` as the function."""
    source = "fn f(x) {\n    let c = 0.1\n    return sum(x * x * c)\n}\n\n"
    source += "fn g(x) {\n    return value_and_grad(f)(x)\n}\n"
    x = np.array([1.0, 3.0], dtype=dtype)
    value, gradient = pipeline.call(pipeline.load("let_literal.dl", source), "g", [x])
    c = dtype(0.1)
    assert value.dtype == dtype and value == np.sum(x * x * c)
    assert gradient.dtype == dtype
    np.testing.assert_array_equal(gradient, 2 * x * c)


def test_an_element_of_another_module_s_const_in_differentiated_code(tmp_path) -> None:
    (tmp_path / "lib.dl").write_text("const W = [0.5f64, 1.5]\n\nfn f(x, k = W[1]) {\n    return sin(x * k)\n}\n")
    main = tmp_path / "main.dl"
    main.write_text(
        "import lib\n\nfn loss(x) {\n    return lib.f(x) + x * lib.W[0]\n}\n\n"
        "fn g(x: f64) -> f64 {\n    return grad(loss)(x)\n}\n"
    )
    gradient = pipeline.call(pipeline.load(str(main)), "g", [np.float64(0.3)])
    np.testing.assert_allclose(gradient, 1.5 * np.cos(0.45) + 0.5, rtol=1e-12)


def test_a_function_given_a_closure_is_inlined_with_its_module_s_names(tmp_path) -> None:
    """A function of another module that takes a closure is written out in the caller's derivative: its
    module's consts, functions and imports are named there through the caller's imports (`lib.SCALE`,
    `lib.count`, `lib`'s `shapes` as the caller's `S`). It failed as an internal error, `SCALE` unknown."""
    (tmp_path / "shapes.dl").write_text("fn twice(x) {\n    return x * 2.0\n}\n")
    (tmp_path / "lib.dl").write_text(
        "import shapes\n\nconst SCALE = 3.0\n\nfn count(x) {\n    return 2\n}\n\n"
        "fn apply(f, x) {\n    let y = shapes.twice(x) * SCALE\n    return f(y) * float(count(x))\n}\n"
    )
    main = tmp_path / "main.dl"
    main.write_text(
        "import lib\nimport shapes as S\n\nfn loss(x) {\n    return lib.apply(fn(z) => z * z, x)\n}\n\n"
        "fn g(x: f64) -> f64 {\n    return grad(loss)(x)\n}\n"
    )
    x = np.float64(0.7)
    tx = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
    (expected,) = torch.autograd.grad((tx * 2.0 * 3.0) ** 2 * 2.0, (tx,))
    np.testing.assert_allclose(pipeline.call(pipeline.load(str(main)), "g", [x]), expected.item(), rtol=1e-12)


@pytest.mark.parametrize("shapes", [((2, 3), (3, 2)), ((3,), (3, 2)), ((2, 3), (3,)), ((3,), (3,))], ids=str)
def test_a_product_of_f32_and_f64_gives_each_operand_its_own_dtype(shapes) -> None:
    (sa, sb) = shapes
    dims = lambda s: ", ".join(map(str, s))  # noqa: E731
    source = f"fn f(a: f32[{dims(sa)}], b: f64[{dims(sb)}]) {{\n    return sum(tanh(a @ b))\n}}\n\n"
    source += f"fn g(a: f32[{dims(sa)}], b: f64[{dims(sb)}]) {{\n    return grad(f, wrt=(0, 1))(a, b)\n}}\n"
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb)
    da, db = pipeline.call(pipeline.load("mixed.dl", source), "g", [a, b])
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    torch.tanh(ta.double() @ tb).sum().backward()
    assert da.dtype == np.float32 and db.dtype == np.float64
    np.testing.assert_allclose(da, ta.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(db, tb.grad.numpy(), rtol=1e-12)


SECOND_THROUGH_A_LONG_LOOP = """
fn f(x: f64[3], n: i64) -> f64 {
    let h = x
    let i = 0
    while i < n {
        h = sin(h) * 0.9 + x * 0.1
        i += 1
    }
    return sum(h * h)
}

fn df(x: f64[3], n: i64) -> f64 { return sum(grad(f)(x, n) * [1.0f64, 2.0, 3.0]) }

fn hvp(x: f64[3], n: i64) -> f64[3] { return grad(df)(x, n) }
"""


def test_a_second_derivative_through_a_long_loop_takes_linear_work(monkeypatch) -> None:
    """A Hessian-vector product through a 300-step loop, against PyTorch's double backward. Its backward
    sweep restarts a tape's adjoint at zeros in every iteration; a tape of zeros is one cell made in O(1), so
    the run makes O(n) tape cells, where building each whole made about n²/2 (45,000 here)."""
    from dl.runtime.values import Tape

    made = [0]
    plain = Tape.__init__

    def counted(self, *args) -> None:
        made[0] += 1
        plain(self, *args)

    monkeypatch.setattr(Tape, "__init__", counted)
    x, n = np.array([0.3, -0.7, 1.1]), 300
    hvp = pipeline.call(pipeline.load("long.dl", SECOND_THROUGH_A_LONG_LOOP), "hvp", [x, n])
    np.testing.assert_allclose(hvp, torch_loop_hvp(x, n), rtol=1e-10, atol=1e-12)
    assert 0 < made[0] <= 20 * n, made[0]


def torch_loop_hvp(x: np.ndarray, n: int) -> np.ndarray:
    """SECOND_THROUGH_A_LONG_LOOP's `hvp(x, n)` by PyTorch's double backward."""
    tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    h = tx
    for _ in range(n):
        h = torch.sin(h) * 0.9 + tx * 0.1
    (first,) = torch.autograd.grad((h * h).sum(), tx, create_graph=True)
    (second,) = torch.autograd.grad((first * torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)).sum(), tx)
    return second.numpy()


THIRD_THROUGH_A_LOOP = """
fn f(x: f64[3], n: i64) -> f64 {
    let h = x
    let i = 0
    while i < n {
        h = sin(h * x)
        i += 1
    }
    return sum(h * h)
}

fn df(x: f64[3], n: i64) -> f64 { return sum(grad(f)(x, n) * [1.0f64, 2.0, 3.0]) }

fn d2(x: f64[3], n: i64) -> f64 { return sum(grad(df)(x, n) * [1.0f64, -1.0, 0.5]) }

fn d3(x: f64[3], n: i64) -> f64[3] { return grad(d2)(x, n) }
"""


def test_a_third_derivative_through_a_loop_agrees_with_pytorch() -> None:
    """Three rounds of `grad` through a `while`: the second round's kept tapes start as `tape()` (a tape of `_`
    until pushed onto) and the third adds their adjoints to typed ones; the checker took the two for
    different types (an internal error, found by review)."""
    x, n = np.array([0.3, -0.7, 1.1]), 4
    third = pipeline.call(pipeline.load("third.dl", THIRD_THROUGH_A_LOOP), "d3", [x, n])
    tx = torch.tensor(x, requires_grad=True)

    def f(x):
        h = x
        for _ in range(n):
            h = torch.sin(h * x)
        return (h * h).sum()

    (first,) = torch.autograd.grad(f(tx), tx, create_graph=True)
    df = (first * torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)).sum()
    (second,) = torch.autograd.grad(df, tx, create_graph=True)
    d2 = (second * torch.tensor([1.0, -1.0, 0.5], dtype=torch.float64)).sum()
    (expected,) = torch.autograd.grad(d2, tx)
    np.testing.assert_allclose(third, expected.numpy(), rtol=1e-9, atol=1e-12)


SPANNED = """
fn f(x: f64[3], n: i64) -> f64 {
    let h = x
    let i = 0
    while i < n {
        if sum(h) > 0.0 {
            h = sin(h) * 0.5 + x
        } else {
            h = h * h
        }
        i += 1
    }
    return sum(h * h)
}
fn g(x: f64[3], v: f64[3]) -> f64 {
    return sum(grad(f)(x, 3) * v)
}
fn main() {
    let x = ones(3, dtype=f64)
    print(grad(g)(x, x), grad(fn(y: f64[3]) => sum(y * y))(x))
}
"""


def test_every_node_grad_generates_has_the_span_of_what_it_was_made_for() -> None:
    """The code `grad` generates (derivatives of derivatives, through a loop and an `if`, of a lambda) has no
    node without a span: each takes the span of the loop, `if` or function it was made for, so that a
    diagnostic or `--explain-backend` about it points at the user's code."""
    from dl.lang import ast
    from dl.lang.diagnostics import UNKNOWN_SPAN

    program = pipeline.load("spanned.dl", SPANNED)
    derived, _ = pipeline.prepare(program)
    decls = derived.modules[derived.entry].decls
    generated = [decl for decl in decls if isinstance(decl, ast.FnDecl) and decl.name not in {"f", "g", "main"}]
    assert len(generated) >= 4  # f's and g's derivatives, and what they call
    nodes = [node for decl in decls for node in ast.walk(decl) if hasattr(node, "span")]
    assert [node for node in nodes if node.span == UNKNOWN_SPAN] == []
    loop = next(node for node in ast.walk(decls[0]) if isinstance(node, ast.While))
    swept = [node for decl in generated for node in ast.walk(decl) if isinstance(node, ast.While)]
    assert swept and all(node.span == loop.span for node in swept)  # the forward and backward sweeps' loops


def test_grad_of_a_function_of_a_module_passed_as_an_argument_is_refused(tmp_path, dlrun) -> None:
    """`grad(m.act)` where `m` is a parameter holding a module: each call may pass another module, so one
    derivative cannot serve them (it computed m1's derivative with m2's for every call)."""
    (tmp_path / "m1.dl").write_text("fn act(x: f32) -> f32 { return x * x }\n")
    (tmp_path / "m2.dl").write_text("fn act(x: f32) -> f32 { return x * x * x }\n")
    main = tmp_path / "main.dl"
    main.write_text(
        "import m1\nimport m2\nfn use(m) -> f32 {\n    return grad(m.act)(2.0)\n}\n"
        "fn main() {\n    print(use(m1), use(m2), grad(m1.act)(2.0), grad(m2.act)(2.0))\n}\n"
    )
    status, out, err = dlrun(str(main))
    assert (status, out) == (1, "")
    assert err.startswith(
        "error[E0333]: `grad` cannot differentiate `m.act`: `m` holds a module known only when the program runs"
    )
    main.write_text("import m1\nimport m2\nfn main() {\n    print(grad(m1.act)(2.0), grad(m2.act)(2.0))\n}\n")
    assert dlrun(str(main)) == (0, "4.0 12.0\n", "")


GENERIC_LOSS = """
fn f(w) {
    let total = 0.0
    for item in w {
        total += item * item * w[0]
    }
    for item in (w[1], 2) {
        total += (item + 1) * w[0]
    }
    return total
}

fn g64(w: f64[2]) -> f64[2] {
    return grad(f)(w)
}

fn g32(w: f32[2]) -> f32[2] {
    return grad(f)(w)
}

fn h(w) {
    let total = 0.0
    total += sum(w * w) * w[0]
    return total
}

fn d(w) {
    return grad(h)(w)
}

fn main() {
    print(d([0.7f64, -0.3]), d([0.7, -0.3]), g32([0.7, -0.3]), g64([0.7f64, -0.3]))
}
"""


def test_grad_of_a_generic_function_called_with_f64_and_f32() -> None:
    """A function without annotations, differentiated for f64 and for f32 arguments: `let total = 0.0` is an
    f64 in one call and an f32 in the other. Each derivative wrote the f32, which the f64 call could not
    rebind (an internal error); one written for both calls (in `d`) leaves the literal to adapt."""
    program = pipeline.load("generic.dl", GENERIC_LOSS)
    for dtype, tolerance in ((torch.float64, 1e-12), (torch.float32, 1e-6)):
        w = torch.tensor([0.7, -0.3], dtype=dtype, requires_grad=True)
        f = (w * w * w[0]).sum() + (w[1] + 1) * w[0] + 3 * w[0]
        h = (w * w).sum() * w[0]
        for function, loss in (("g64" if dtype == torch.float64 else "g32", f), ("d", h)):
            (expected,) = torch.autograd.grad(loss, w)
            result = pipeline.call(program, function, [w.detach().numpy().copy()])
            assert result.dtype == expected.numpy().dtype, function
            np.testing.assert_allclose(result, expected.numpy(), rtol=tolerance, err_msg=function)
