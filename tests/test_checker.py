"""The checker's API for tools, literals taking their declared dtype, and run-time checks of annotations."""

from __future__ import annotations

import dl.lang
import numpy as np
import pytest
from conftest import ROOT
from dl.lang import ast
from dl.lang.printer import print_module
from dl.lang.types import DimVar, TensorType
from dl.runtime.values import format_value
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_parser import declarations


def codes(typed: dl.lang.Typed) -> list[tuple[str, int, int]]:
    return [(d.code, d.span.line, d.span.column) for d in typed.diagnostics]


def test_check_api_returns_signatures_and_types() -> None:
    source = "fn f(x: f32[N, 3]) -> f32[3] {\n    return sum(x, axis=0)\n}\nfn main() { print(f(ones(2, 3))) }\n"
    typed = dl.lang.check(source, "api.dl")
    assert typed.diagnostics == ()
    (f, main) = typed.signatures["api.dl"]
    assert str(f) == "fn f(x: f32[N, 3]) -> f32[3]"
    assert f.params[0][1] == TensorType("f32", (DimVar("N"), 3))
    assert str(main) == "fn main() -> ()"
    module = typed.program.modules["api.dl"]
    returned = module.decls[0].body.body[0].value
    assert str(typed.type_of(returned)) == "f32[3]"


def test_check_api_reports_syntax_errors_without_raising() -> None:
    typed = dl.lang.check("fn main() {\n    let = 3\n}\n", "broken.dl")
    assert codes(typed) == [("E0102", 2, 9)]
    assert typed.program.modules["broken.dl"].decls == ()  # recovery keeps what parsed: nothing here


def test_check_api_reports_every_independent_error_in_order() -> None:
    source = (
        "fn main() {\n    let a = ones(2, 3) @ ones(2, 3)\n    let b = relu(undefined)\n    if 1.0 { print(a, b) }\n}\n"
    )
    typed = dl.lang.check(source, "many.dl")
    assert codes(typed) == [("E0302", 2, 13), ("E0201", 3, 18), ("E0304", 4, 8)]


def test_error_in_a_function_called_from_many_places_is_reported_once() -> None:
    source = (
        "fn bad(x) {\n    return x @ ones(7)\n}\nfn main() {\n    print(bad(ones(3)), bad(ones(3)), bad(ones(3)))\n}\n"
    )
    assert codes(dl.lang.check(source, "once.dl")) == [("E0302", 2, 12)]


def test_assigning_through_a_tuples_item_is_e0309_and_out_of_range_is_e0308() -> None:
    """`u[1][0] = e` rebuilds nothing (tuples are built whole); an index out of the tuple's range (or into the
    empty tuple) is E0308 alone, with no help naming an item that is not there."""
    source = "fn main() {\n    let t = ()\n    t[0][1] = 5.0\n    let u = (1.0, [1.0, 2.0])\n    u[5][0] = 1.0\n"
    source += "    u[1][0] = 1.0\n}\n"
    typed = dl.lang.check(source, "items.dl")
    assert codes(typed) == [("E0308", 3, 7), ("E0308", 5, 7), ("E0309", 6, 5)]
    assert "`u = (u[0], item)`" in typed.errors[-1].notes[0]


def test_main_parameters_are_strings() -> None:
    typed = dl.lang.check("fn main(n) {\n    print(zeros(int(n)))\n}\n", "args.dl")
    assert typed.diagnostics == ()
    assert str(typed.signatures["args.dl"][0]) == "fn main(n: str) -> ()"


@pytest.mark.parametrize(
    ("declaration", "expected"),
    [
        ("let h: f64 = 0.1", np.float64(0.1)),
        ("let h: f64[2] = [0.1, -0.2]", np.array([0.1, -0.2], dtype=np.float64)),
        ("let h: f32 = 1", np.float32(1.0)),
        ("let h: i32 = 7", np.int32(7)),
        ("let h = scale(0.1)", np.float64(0.2)),
        ("let h = Holder { value: 0.1 }.value", np.float64(0.1)),
    ],
)
def test_literals_take_the_declared_dtype_exactly(run_dl, declaration: str, expected) -> None:
    source = (
        "struct Holder { value: f64 }\n"
        "fn scale(x: f64) -> f64 { return x * 2.0 }\n"
        f"fn main() {{\n    {declaration}\n    print(h)\n}}\n"
    )
    assert run_dl(source) == (0, f"{format_value(expected)}\n", "")


def test_unproven_annotation_is_checked_at_run_time_at_the_annotation(run_dl) -> None:
    source = "fn main(n) {\n    let rows = int(n)\n    let picked: f32[2] = ones(rows)\n    print(picked)\n}\n"
    assert run_dl(source, ["2"]) == (0, "[1. 1.]\n", "")
    status, out, err = run_dl(source, ["5"])
    assert status == 1 and out == ""
    assert err.startswith("error[E0520]: `picked` does not match its annotation: expected f32[2], found f32[5]")
    assert "--> prog.dl:3:17" in err


@pytest.mark.parametrize(
    ("rebinding", "target", "column"),
    [
        ("x = ones(rows)", "x", 9),
        ("(x, y) = (zeros(2), ones(rows))", "y", 25),  # at the item that gave it
        ("(y, x) = (zeros(2), ones(rows))", "x", 25),
    ],
)
def test_a_rebinding_the_checker_cannot_prove_is_checked_at_run_time(
    run_dl, rebinding: str, target: str, column: int
) -> None:
    """A variable keeps its type: a value of a size known only when it runs (`ones(rows)`) is checked as it
    is bound, and the mistake is reported there, not where a later operation trips on the size."""
    source = (
        "fn main(n) {\n    let rows = int(n)\n    let x = zeros(2)\n    let y = zeros(2)\n"
        f"    {rebinding}\n    print(x + y)\n}}\n"
    )
    assert run_dl(source, ["2"]) == (0, "[1. 1.]\n", "")
    status, out, err = run_dl(source, ["5"])
    assert status == 1 and out == ""
    assert err.splitlines()[0] == (
        f"error[E0520]: `{target}` cannot be rebound to a value of another type: "
        "expected f32[2], found f32[5] (axis 0 has 5, not 2)"
    ), err
    assert f"--> prog.dl:5:{column}" in err
    assert (
        "help: a variable keeps the type it was declared with; if its size changes, declare the changing "
        f"dimension as `_`: `let {target}: f32[_] = ...`"
    ) in err


def test_an_update_that_broadcasts_its_variable_is_checked_at_run_time(run_dl) -> None:
    source = "fn main(n) {\n    let total = zeros(1)\n    total += ones(int(n))\n    print(total)\n}\n"
    assert run_dl(source, ["1"]) == (0, "[1.]\n", "")
    status, _, err = run_dl(source, ["3"])
    assert status == 1
    assert err.startswith(
        "error[E0520]: `total` cannot be rebound to a value of another type: expected f32[1], found f32[3]"
    ), err
    assert "--> prog.dl:3:14" in err


@pytest.mark.parametrize("backend", [(), ("--backend", "llvm")], ids=["interp", "llvm"])
def test_size_names_in_a_check_are_those_the_call_binds(run_dl, backend: tuple[str, ...]) -> None:
    """`N` is 3 in this call: a value of 1 element does not fit `f32[N]`, by a rebinding or an annotation."""
    source = (
        "fn keep(x: f32[_], n: i64) -> f32[_] {\n    return x[0:n]\n}\n"
        "fn g(x: f32[N], n: i64) -> f32 {\n    let y = x\n    y = keep(x, n)\n    let z: f32[N] = keep(x, n)\n"
        "    return sum(y + z)\n}\n"
        "fn main(n) {\n    print(g([1.0, 2.0, 3.0], int(n)))\n}\n"
    )
    assert run_dl(source, ["3"], backend) == (0, "12.0\n", "")
    status, out, err = run_dl(source, ["1"], backend)
    assert status == 1 and out == ""
    assert err.startswith(
        "error[E0520]: `y` cannot be rebound to a value of another type: expected f32[N] with `N` = 3, found f32[1]"
    ), err


def test_a_struct_of_sizes_the_data_decides_is_checked_field_by_field(run_dl) -> None:
    """`Lin[3, 2]` given a `Lin[_, 2]`: its fields are checked when it runs, by a rebinding and by a call."""
    source = (
        "struct Lin { w: f32[I, O], b: f32[O] }\n"
        "fn needs3(l: Lin[3, 2]) -> f32 {\n    return sum(l.w) + sum(l.b)\n}\n"
        "fn main(n) {\n    let rows = int(n)\n    print(needs3(Lin { w: ones(rows, 2), b: ones(2) }))\n"
        "    let m = Lin { w: ones(3, 2), b: zeros(2) }\n    m = Lin { w: ones(rows, 2), b: zeros(2) }\n"
        "    print(sum(m.w))\n}\n"
    )
    assert run_dl(source, ["3"]) == (0, "8.0\n6.0\n", "")
    status, _, err = run_dl(source, ["2"])
    assert status == 1
    assert err.startswith(
        "error[E0520]: argument `l` does not match its annotation: field `w`: expected f32[3, 2], found f32[2, 2]"
    ), err
    status, _, err = run_dl(source.replace("    print(needs3(Lin { w: ones(rows, 2), b: ones(2) }))\n", ""), ["2"])
    assert err.startswith("error[E0520]: `m` cannot be rebound to a value of another type: field `w`:"), err


def test_index_tensors_that_do_not_broadcast_at_run_time_say_so(run_dl) -> None:
    source = "fn main(n) {\n    print(zeros(5, 5)[arange(int(n)), arange(4)])\n}\n"
    status, _, err = run_dl(source, ["3"])
    assert status == 1
    assert err.startswith(
        "error[E0501]: index tensors do not broadcast together: shapes [3] and [4] (numpy pairs their elements)"
    ), err


def test_a_result_named_by_sizes_is_checked_with_the_sizes_a_call_gives(run_dl) -> None:
    """`f` has an unannotated parameter, so it is checked for each call: its declared result `f32[B, 3]` is
    the call's `f32[4, 3]`, with `B` bound by `x`."""
    source = (
        "fn f(x: f32[B, 3], act) -> f32[B, 3] {\n    return act(x)\n}\n"
        "fn main() {\n    print(shape(f(ones(4, 3), relu)), shape(f(ones(2, 3), tanh)))\n}\n"
    )
    assert run_dl(source) == (0, "(4, 3) (2, 3)\n", "")


def test_a_rebinding_of_a_known_size_is_not_checked_again(run_dl) -> None:
    source = "fn main() {\n    let x = zeros(2)\n    x = x + ones(2)\n    x = ones(1)[0] * x\n    print(x)\n}\n"
    assert not dl.lang.check(source, "prog.dl").runtime_checks
    assert run_dl(source) == (0, "[1. 1.]\n", "")


def test_dimension_variables_are_bound_consistently_at_run_time(run_dl) -> None:
    source = (
        "fn pair(a: f32[N], b: f32[N]) -> f32[N] {\n    return a + b\n}\n"
        "fn main(n, m) {\n    print(pair(ones(int(n)), ones(int(m))))\n}\n"
    )
    assert run_dl(source, ["2", "2"]) == (0, "[2. 2.]\n", "")
    status, _, err = run_dl(source, ["2", "3"])
    assert status == 1
    assert err.startswith(
        "error[E0520]: argument `b` does not match its annotation: expected f32[N] with `N` = 2, found f32[3]"
    )
    assert "--> prog.dl:1:23" in err
    assert "in `pair` at prog.dl:1:23" in err


def test_unproven_result_annotation_is_checked_at_run_time(run_dl) -> None:
    source = "fn grow(n) -> f32[3] {\n    return ones(n)\n}\nfn main(n) {\n    print(grow(int(n)))\n}\n"
    assert run_dl(source, ["3"]) == (0, "[1. 1. 1.]\n", "")
    status, _, err = run_dl(source, ["4"])
    assert status == 1
    assert err.startswith("error[E0520]: the result does not match its annotation: expected f32[3], found f32[4]")
    assert "--> prog.dl:1:15" in err


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(declarations(), max_size=5))
def test_checker_never_raises_on_any_program(decls: list) -> None:
    """The REPL and the language server check whatever is typed: any program that parses gets diagnostics,
    never an exception."""
    source = print_module(ast.Module("fuzz.dl", tuple(decls)))
    typed = dl.lang.check(source, "fuzz.dl")
    assert all(d.span.path == "fuzz.dl" for d in typed.diagnostics), source


def test_calls_with_different_static_sizes_are_checked_separately() -> None:
    source = (
        "fn make(rows, columns) {\n    return zeros(rows, columns)\n}\n\n"
        "fn main() {\n    let a: f32[64, 128] = make(64, 128)\n"
        "    let b: f32[128, 10] = make(128, 10)\n    print(a, b)\n}\n"
    )
    typed = dl.lang.check(source, "sizes.dl")
    assert typed.errors == []


def test_an_imported_function_has_a_signature_for_each_importers_call() -> None:
    """Signatures are collected once every module is checked: a function of an imported module with
    unannotated parameters has one for each set of argument types a call in the importer checked it for."""
    main = ROOT / "tests" / "modules" / "main.dl"
    typed = dl.lang.check(main.read_text(), str(main))
    mathx = str(main.parent / "mathx.dl")
    assert [str(s) for s in typed.signatures[mathx]] == [
        "fn square(x: f32) -> f32",  # for `cube(2.0)`'s own call
        "fn square(x: i64) -> i64",
        "fn cube(x: f32) -> f32",
    ]


# Index tensors pair their elements as numpy's do: the index as DL writes it, and the same for numpy.
PICKS = [
    ("x[[0, 1], [1, 1]]", lambda x: x[[0, 1], [1, 1]]),
    ("x[:, [2, 0, 1]]", lambda x: x[:, [2, 0, 1]]),
    ("x[[[0], [1]], [0, 2, 1]]", lambda x: x[[[0], [1]], [0, 2, 1]]),
    ("x[1, [0, 2]]", lambda x: x[1, [0, 2]]),
    ("x[[1, 0], 2]", lambda x: x[[1, 0], 2]),
    ("x[0, :, [1, 2, 3]]", lambda x: x[0, :, [1, 2, 3]]),
    ("x[[0, 1], :, [[1], [2]]]", lambda x: x[[0, 1], :, [[1], [2]]]),
    ("x[:, [0, 2], [1, 3]]", lambda x: x[:, [0, 2], [1, 3]]),
    ("x[..., [1, 0]]", lambda x: x[..., [1, 0]]),
    ("x[[1], 1:3, 2]", lambda x: x[[1], 1:3, 2]),
    ("x[:, [1, 0], ..., [1, 2]]", lambda x: x[:, [1, 0], ..., [1, 2]]),  # a `...` of no axis still parts them
    ("x[[0, 1], ..., 0]", lambda x: x[[0, 1], ..., 0]),
]


@pytest.mark.parametrize(("index", "numpy_index"), PICKS, ids=[index for index, _ in PICKS])
def test_index_tensors_give_numpys_shape(index: str, numpy_index) -> None:
    """The checker's type of indexing by integer tensors is the shape numpy gives, which the run has."""
    source = f"fn f(x: f32[2, 3, 4]) {{\n    return {index}\n}}\nfn main() {{ print(shape(f(ones(2, 3, 4)))) }}\n"
    typed = dl.lang.check(source, "picks.dl")
    assert typed.diagnostics == ()
    expected = numpy_index(np.zeros((2, 3, 4))).shape
    assert str(typed.signatures["picks.dl"][0]) == f"fn f(x: f32[2, 3, 4]) -> f32[{', '.join(map(str, expected))}]"


def test_index_tensors_that_do_not_broadcast_are_E0303() -> None:
    typed = dl.lang.check("fn f(x: f32[4, 4]) {\n    return x[[0, 1], [0, 1, 2]]\n}\n", "picks.dl")
    assert [(d.code, d.message) for d in typed.diagnostics] == [
        ("E0303", "index tensors do not broadcast together: i64[2] and i64[3]")
    ]
    assert codes(typed) == [("E0303", 2, 12)]


def test_an_integer_out_of_range_beside_an_index_tensor_is_E0308() -> None:
    typed = dl.lang.check("fn f(x: f32[3, 4], j: i64[2]) {\n    return x[5, j]\n}\n", "picks.dl")
    assert [d.message for d in typed.diagnostics] == ["index 5 is out of range for axis 0 with size 3"]
    assert codes(typed) == [("E0308", 2, 14)]


def test_a_generic_struct_of_another_module_takes_sizes(tmp_path, dlrun) -> None:
    """`layers.Linear[3, 2]` as `Linear[3, 2]` is in its own module: checked, run, differentiated, exported
    (flattened to the struct's new name) and laid out by `fmt` as written; wrong sizes and unknown names are
    E0318 at the type."""
    (tmp_path / "layers.dl").write_text(
        "struct Linear[I, O] { w: f32[I, O], b: f32[O] }\n\nfn linear(p, x) { return x @ p.w + p.b }\n"
    )
    main = tmp_path / "main.dl"
    program = (
        "import layers\n\n"
        "fn apply(p: layers.Linear[3, 2], x: f32[B, 3]) -> f32[B, 2] {\n    return layers.linear(p, x)\n}\n\n"
        "fn main() {\n"
        "    let p = layers.Linear { w: ones(3, 2), b: zeros(2) }\n"
        "    print(apply(p, ones(1, 3)))\n"
        "    print(grad(fn(q) => sum(apply(q, ones(4, 3))))(p).w[0])\n"
        '    save("p.safetensors", p)\n'
        "}\n"
    )
    main.write_text(program)
    assert dlrun(str(main)) == (0, "[[3. 3.]]\n[4. 4.]\n", "")
    assert dlrun("fmt", "--print", str(main)) == (0, program, "")
    package = str(tmp_path / "m.dlpkg")
    assert dlrun("export", str(main), "--fn", "apply", "--weights", "p.safetensors", "-o", package)[0] == 0
    main.write_text(
        "import layers\n\nfn f(p: layers.Linear[3]) {}\n\nfn g(p: layers.Nope[3]) {}\n\nfn h(p: layers.Linaer) {}\n"
    )
    status, _, err = dlrun("check", str(main))
    assert status == 1
    assert [line for line in err.splitlines() if line.startswith(("error", " -->"))] == [
        "error[E0318]: struct `Linear` takes 2 sizes, found 1",
        f" --> {main}:3:9",
        "error[E0318]: unknown type `layers.Nope`",
        f" --> {main}:5:9",
        "error[E0318]: unknown type `layers.Linaer`",
        f" --> {main}:7:9",
    ]
    assert "help: did you mean `layers.Linear`?" in err
