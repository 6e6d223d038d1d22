"""Strings: f-strings against Python's own `format`, `str(x)` against `print`, `+` on strings, plain strings
keeping their braces; f-strings through autodiff, the LLVM backend (which leaves them to the
interpreter), the formatter, hover and highlighting. Diagnostics are goldens in tests/errors (fstring_*)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dl import lang, lsp
from dl.lang.diagnostics import DiagnosticError
from dl.lang.format import format_source
from dlharness import dl_eval, dl_main
from hypothesis import given, settings
from hypothesis import strategies as st

# Python's format spec: [[fill]align][sign][z][#][0][width][grouping][.precision][type]
NUMBER_SPECS = ["", ">8", "<8", "^9", "*^9", "+", " ", "08", ",", "_", "12,", ".0", ".3", "+10.2"]
FLOAT_TYPES = ["", "f", "e", "E", "g", "G", "%"]
INTEGER_TYPES = ["", "d", "x", "X", "o", "b", "n", "e", "f", "%"]
TEXT_SPECS = ["", ">8", "<8", "^9", "-^9", ".3", ">10.2", "s"]


def shown(value: float | int | str, spec: str) -> str:
    """What `f"{a:spec}"` gives in DL for `a` bound to `value`."""
    return dl_eval(f'f"{{a:{spec}}}"', value)


def check_formats_as(value: object, spec: str, python_value: object) -> None:
    """DL's `f"{a:spec}"` of `value` is Python's `format(python_value, spec)`, or, where Python refuses the
    spec, a run-time diagnostic quoting Python's reason; and the checker, given `a`'s type, agrees."""
    try:
        expected = format(python_value, spec)
    except ValueError as refused:
        with pytest.raises(DiagnosticError) as failure:
            shown(value, spec)
        (diagnostic,) = failure.value.diagnostics
        assert diagnostic.code == "E0513" and str(refused) in diagnostic.message
        assert checker_codes(value, spec) == ["E0324"]
        return
    assert shown(value, spec) == expected
    assert checker_codes(value, spec) == []


def checker_codes(value: object, spec: str) -> list[str]:
    dtype = {np.float64: "f64", np.float32: "f32", np.int32: "i32", int: "i64", bool: "bool", str: "str"}[type(value)]
    source = f'fn f(a: {dtype}) -> str {{\n    return f"{{a:{spec}}}"\n}}\n'
    return [d.code for d in lang.check(source, "spec.dl").errors]


@settings(max_examples=150, deadline=None)
@given(
    value=st.floats(allow_nan=True, allow_infinity=True, width=64),
    layout=st.sampled_from(NUMBER_SPECS),
    kind=st.sampled_from(FLOAT_TYPES),
)
def test_f64_fields_format_as_python_does(value: float, layout: str, kind: str) -> None:
    check_formats_as(np.float64(value), layout + kind, value)


@settings(max_examples=100, deadline=None)
@given(
    value=st.floats(width=32, allow_nan=False, allow_infinity=True),
    layout=st.sampled_from(NUMBER_SPECS),
    kind=st.sampled_from(FLOAT_TYPES),
)
def test_f32_fields_format_the_f32_value(value: float, layout: str, kind: str) -> None:
    spec = layout + kind
    if spec:
        check_formats_as(np.float32(value), spec, float(np.float32(value)))
    else:  # no spec: as `print` shows an f32, its shortest digits
        assert shown(np.float32(value), spec) == str(np.float32(value))


@settings(max_examples=100, deadline=None)
@given(
    value=st.integers(-(2**63), 2**63 - 1),
    layout=st.sampled_from([s for s in NUMBER_SPECS if "." not in s]),
    kind=st.sampled_from(INTEGER_TYPES),
)
def test_integer_fields_format_as_python_does(value: int, layout: str, kind: str) -> None:
    check_formats_as(value, layout + kind, value)
    check_formats_as(np.int32(value % 2**31), layout + kind, value % 2**31)


@pytest.mark.parametrize("spec", TEXT_SPECS)
@pytest.mark.parametrize("value", ["", "run", "naïve text"])
def test_string_fields_format_as_python_does(value: str, spec: str) -> None:
    check_formats_as(value, spec, value)


@pytest.mark.parametrize("spec", ["", ">7", "<6", "^8", ".1"])
def test_a_bool_is_formatted_as_its_text(spec: str) -> None:
    check_formats_as(True, spec, "true")
    check_formats_as(False, spec, "false")
    check_formats_as(True, ".2f", "true")  # not as the number 1


def test_a_field_without_a_spec_shows_what_print_shows() -> None:
    values = ["1", "0.1 + 0.2", "1.0f64 / 3.0f64", "true", "s", "v", "p", "(1, 2.0)", "arange(3)", "-0.0", "1e20"]
    source = f"""struct Point {{ x: f32, y: i64 }}
fn main() {{
    let v = [[1.0, 2.5], [3.0, 4.0]]
    let p = Point {{ x: 0.1, y: 2 }}
    let s = "text"
    print({", ".join(values)})
    print(f"{" ".join("{" + value + "}" for value in values)}")
}}
"""
    lines = dl_main(source).splitlines()
    half = len(lines) // 2
    assert lines[:half] == lines[half:]
    assert lines[0].startswith("1 0.3 0.3333333333333333 true text [[1.  2.5]")


def test_a_spec_on_a_tensor_formats_each_element_in_prints_layout() -> None:
    values = np.array([[1.5, -2.25, 3.0], [10.125, 0.001, 1e6]], dtype=np.float32)
    expected = np.array2string(values, separator=" ", formatter={"all": lambda v: format(float(v), ".2f")})
    assert expected == "[[1.50 -2.25 3.00]\n [10.12 0.00 1000000.00]]"
    assert dl_eval('f"{a:.2f}"', values) == expected
    assert dl_eval('f"{a:>5}"', np.array([1, -20, 300])) == "[    1   -20   300]"
    assert dl_eval('f"{a:^7}"', np.array([True, False])) == "[ true    false ]"  # " true  " and " false "
    assert dl_eval('f"{a}"', values) == str(values)  # no spec: as print shows it


def test_literal_text_escapes_and_braces() -> None:
    assert dl_eval('f"{{a}} = {a}\\t\\"q\\" \\\\ {{{a}}}"', 3) == '{a} = 3\t"q" \\ {3}'
    assert dl_eval('f""') == ""
    assert dl_eval('f"no fields"') == "no fields"
    assert dl_eval('"{a} stays {literally} {{"', 3) == "{a} stays {literally} {{"  # a plain string keeps braces


def test_fields_hold_any_expression() -> None:
    source = """struct P { w: f32[2] }
fn scale(x, k) { return x * k }
fn main() {
    let m = P { w: [1.0, 2.0] }
    let xs = [10, 20, 30]
    print(f"{scale(m.w, 2.0)[1]:.1f}|{xs[1:3]}|{sum(xs) // 7:03d}|{(fn(v) => v + 1)(4)}|{P { w: m.w }.w[0]}")
}
"""
    assert dl_main(source) == "4.0|[20 30]|008|5|1.0\n"


def test_str_and_plus_join_text() -> None:
    source = """fn main() {
    let epoch = 3
    let name = "ckpt_" + str(epoch) + ".safetensors"
    name += "!"
    print(name, str(0.1 + 0.2) + str(true) + str([1, 2]), "a" + "" == "a")
    let path = f"ckpt_{epoch:03d}.safetensors"
    print(path, path == "ckpt_003.safetensors")
}
"""
    assert dl_main(source) == "ckpt_3.safetensors! 0.3true[1 2] true\nckpt_003.safetensors true\n"


def test_fields_are_checked_like_any_expression() -> None:
    typed = lang.check(
        'fn main() {\n    let x = ones(3)\n    print(f"a {x @ ones(4)} {nosuch:.2f} {x:d}")\n}\n', "e.dl"
    )
    found = [(d.code, d.span.line, d.span.column, d.span.end_column) for d in typed.errors]
    assert found == [("E0302", 3, 16, 27), ("E0201", 3, 30, 36), ("E0324", 3, 45, 46)]


def test_the_formatter_lays_out_fields_and_keeps_the_rest() -> None:
    messy = 'fn main() {\n    let x=1.5\n    print(f"a {x*2.0:>8.3f} {{b}} \\"q\\" {  x  } {1e-3}")\n}\n'
    tidy = 'fn main() {\n    let x = 1.5\n    print(f"a {x * 2.0:>8.3f} {{b}} \\"q\\" {x} {1e-3}")\n}\n'
    assert format_source(messy) == tidy
    assert format_source(tidy) == tidy


def test_grad_through_code_that_formats_strings() -> None:
    source = """fn loss(w: f32, x: f32) -> f32 {
    let y = tanh(w * x)
    let label = f"y={y:.3f}"
    if y > 0.0 {
        print(f"{label} w={w}")
    }
    return y * y
}

fn main() {
    print(grad(loss)(0.5, 2.0), grad(grad(loss))(0.5, 2.0))
}
"""
    lines = dl_main(source).splitlines()
    assert lines[:2] == ["y=0.762 w=0.5", "y=0.762 w=0.5"]  # printed once per forward run, not by backward sweeps
    first, second = (float(v) for v in lines[-1].split())
    y = math.tanh(1.0)
    assert first == pytest.approx(2 * y * (1 - y * y) * 2.0, rel=1e-5)
    assert second == pytest.approx(8 * (1 - y * y) * (1 - 3 * y * y), rel=1e-4)


def test_the_llvm_backend_leaves_f_strings_to_the_interpreter(tmp_path, capsys) -> None:
    from dl.cli import main

    program = tmp_path / "logs.dl"
    program.write_text(
        'fn step(x: f32[3]) -> f32 {\n    let note = f"{x:.1f}"\n    return sum(x * 2.0)\n}\n'
        'fn main() {\n    let total = step(ones(3))\n    print(f"total {total:.2f}", str(total) + "!")\n}\n'
    )
    outputs = []
    for backend in ("interp", "llvm"):
        assert main(["--backend", backend, "--explain-backend", str(program)]) == 0
        outputs.append(capsys.readouterr())
    assert outputs[0].out == outputs[1].out == "total 6.00 6.0!\n"
    assert (
        f"{program}:1:4: `step`(f32[3]) interpreted: an f-string, which the interpreter formats (at {program}:2:16)"
        in (outputs[1].err)
    )


SOURCE = 'fn main() {\n    let loss = 0.5\n    let epoch = 3\n    print(f"epoch {epoch}: loss {loss * 2.0:.4f}")\n}\n'


def test_hover_inside_a_field() -> None:
    typed = lang.check(SOURCE, "h.dl")
    assert lsp.hover_text(typed, "h.dl", SOURCE, 4, 21)[0] == "epoch: i64"
    assert lsp.hover_text(typed, "h.dl", SOURCE, 4, 35)[0] == "loss: f32"
    assert lsp.hover_text(typed, "h.dl", SOURCE, 4, 38)[0] == "f32"  # `loss * 2.0`
    assert lsp.hover_text(typed, "h.dl", SOURCE, 4, 14)[0] == "str"  # the literal text: the whole f-string


def test_semantic_tokens_and_pygments_see_code_in_fields() -> None:
    from dl.highlight import DLLexer
    from pygments.token import Name, Number, String

    tokens = lsp.semantic_tokens(SOURCE, lang.check(SOURCE, "h.dl"), "h.dl")
    line = [(column, length, kind) for number, column, length, kind, _ in tokens if number == 4]
    assert line == [
        (5, 5, "function"),
        (11, 9, "string"),  # f"epoch {
        (20, 5, "variable"),
        (25, 9, "string"),  # }: loss {
        (34, 4, "variable"),
        (39, 1, "operator"),
        (41, 3, "number"),
        (44, 6, "string"),  # :.4f}"
    ]
    highlighted = [(kind, text) for _, kind, text in DLLexer().get_tokens_unprocessed(SOURCE.splitlines()[3])]
    assert (String, 'f"epoch {') in highlighted and (Name, "epoch") in highlighted
    assert (Number.Float, "2.0") in highlighted and (String, ':.4f}"') in highlighted
