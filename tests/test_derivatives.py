"""The printed derivative source of a handful of functions (`dlrun grad`), against golden files.

Each `tests/derivatives/NAME.dl` starts with `#! dlrun grad --fn F [--wrt ...]`; the source that
command prints is `NAME.grad` (rewrite with `--update-goldens` and read the diff). The printed
source must also be a working program: appended to the original file, with `main`'s `grad(F,
...)` replaced by the printed function's name, it must print exactly what the original prints.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import ROOT, check_golden

CASES = sorted((ROOT / "tests" / "derivatives").glob("*.dl"))


def command(path: Path) -> list[str]:
    first = path.read_text().splitlines()[0]
    assert first.startswith("#! dlrun grad "), f"{path.name} must start with `#! dlrun grad --fn F ...`"
    return shlex.split(first[len("#! dlrun ") :])


def generated_name(argv: list[str]) -> tuple[str, str]:
    """The function `grad(F, wrt=...)` generates, and (a regular expression of) how `main` writes that call.
    With `--bind f=a,g=b`, F's function parameters come first, and `main` writes `grad(F, wrt=N)(a, b, `:
    the generated function takes the other arguments."""
    function = argv[argv.index("--fn") + 1]
    if "--bind" in argv:
        functions = [pair.split("=")[1] for pair in argv[argv.index("--bind") + 1].split(",")]
        name = f"{function}_with_{'_'.join(f.replace('.', '_') for f in functions)}_grad"
        return name + "(", re.escape(f"grad({function}, wrt=") + r"\d+" + re.escape(f")({', '.join(functions)}, ")
    transform = "value_and_grad" if "--value" in argv else "grad"
    aux = ", has_aux=true" if "--has-aux" in argv else ""
    wrt = argv[argv.index("--wrt") + 1] if "--wrt" in argv else "0"
    positions = wrt.split(",")
    if positions == ["0"]:
        return f"{function}_{transform}", re.escape(f"{transform}({function}{aux})")
    written = positions[0] if len(positions) == 1 else f"({', '.join(positions)})"
    name = f"{function}_{transform}_wrt_{'_'.join(positions)}"
    return name, re.escape(f"{transform}({function}, wrt={written}{aux})")


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_printed_derivative(path: Path, dlrun, update_goldens: bool) -> None:
    argv = command(path)
    status, out, err = dlrun(*argv[:1], str(path.relative_to(ROOT)), *argv[1:])
    assert (status, err) == (0, "")
    check_golden(path.with_suffix(".grad"), out, update_goldens)


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_printed_derivative_runs_and_agrees(path: Path, dlrun, tmp_path: Path) -> None:
    argv = command(path)
    status, printed, err = dlrun(*argv[:1], str(path.relative_to(ROOT)), *argv[1:])
    assert status == 0, err
    status, expected, err = dlrun(str(path.relative_to(ROOT)))
    assert status == 0, err
    name, call = generated_name(argv)
    source = path.read_text()
    assert re.search(call, source), f"`main` of {path.name} should call {call}"
    rewritten = tmp_path / path.name
    rewritten.write_text(re.sub(call, name, source) + "\n" + printed)
    status, out, err = dlrun(str(rewritten))
    assert (status, err) == (0, "")
    assert out == expected


REFUSED = sorted((ROOT / "tests" / "derivatives" / "refused").glob("*.dl"))


@pytest.mark.parametrize("path", REFUSED, ids=lambda p: p.stem)
def test_a_request_grad_would_refuse_is_its_diagnostic(path: Path, dlrun, update_goldens: bool) -> None:
    """`dlrun grad` on a function `grad` cannot differentiate (not a float scalar, an integer or missing
    argument) gives the checker's E0330/E0331/E0334 at the function's name, never an internal error."""
    argv = command(path)
    status, out, err = dlrun(*argv[:1], str(path.relative_to(ROOT)), *argv[1:])
    assert (status, out) == (1, "")
    assert "internal error" not in err
    check_golden(path.with_suffix(".err"), err, update_goldens)


def test_the_shipped_newton_example_is_refused_with_e0330(dlrun) -> None:
    """`newton_sqrt` returns (f64, i64): the E0330 a program's `grad(newton_sqrt)` gets, at its declaration."""
    status, out, err = dlrun("grad", "examples/newton.dl", "--fn", "newton_sqrt")
    assert (status, out) == (1, "")
    lines = err.splitlines()
    assert lines[0] == "error[E0330]: `grad` needs a function that returns a float scalar, but it returns (f64, i64)"
    assert lines[1] == "  --> examples/newton.dl:10:4"
    assert lines[4] == "   |    ^^^^^^^^^^^ returns (f64, i64)"


def test_printed_derivatives_spell_infinities_as_literals_that_read_back(dlrun, tmp_path: Path) -> None:
    """`1e400` folds to inf: the derivative printed `inff32` and `-inf`, names that do not exist."""
    program = tmp_path / "bounded.dl"
    program.write_text(
        "fn loss(w: f32[3]) -> f32 {\n    let big = 1e400\n"
        "    return sum(minimum(w * w, big) + maximum(w, -1e400))\n}\n"
    )
    status, out, err = dlrun("grad", str(program), "--fn", "loss")
    assert (status, err) == (0, "")
    assert "let big = 1.0e999f32" in out and "-1.0e999" in out
    program.write_text(program.read_text() + out + "fn main() { print(loss_grad([1.0, -2.0, 3.0])) }\n")
    assert dlrun(str(program)) == (0, "[ 3. -3.  7.]\n", "")  # 2w + 1


# ---------------------------------------------------------------------- functions that take functions

BOUND = "tests/derivatives/newton_bound_functions.dl"


def test_the_derivative_of_a_function_that_takes_functions_needs_them_named(dlrun) -> None:
    status, out, err = dlrun("grad", "examples/newton.dl", "--fn", "newton")
    assert (status, out) == (1, "")
    assert err == (
        "error[E0333]: the derivative of `newton` depends on the functions passed as `f` and `df`\n"
        "  --> examples/newton.dl:24:4\n"
        "   |\n"
        "24 | fn newton(f, df, x0, tol, max_steps=50) {\n"
        "   |    ^^^^^^ `f` and `df` take functions\n"
        "   = help: choose them: `dlrun grad FILE --fn newton --bind f=NAME,df=NAME` prints the derivative with "
        "those functions\n"
        "   = note: in a program, `grad(newton, wrt=...)(...)` differentiates each call with the functions it "
        "passes\n"
    )


def test_bind_wrt_counts_the_parameters_of_the_function_as_written(dlrun) -> None:
    bind = ("grad", BOUND, "--fn", "newton", "--bind", "f=cubic,df=cubic_slope")
    golden = (ROOT / BOUND).with_suffix(".grad").read_text()
    assert dlrun(*bind, "--wrt", "2") == (0, golden, "")  # x0, the first parameter after the functions
    status, out, err = dlrun(*bind, "--wrt", "3")
    assert (status, err) == (0, "")
    assert "fn newton_with_cubic_cubic_slope_grad_wrt_1(x0, tol, max_steps=50) {" in out


@pytest.mark.parametrize(
    ("bind", "message"),
    [
        ("f=cubic", "`--bind`: give every function parameter a function: also `df` (it takes f, df)"),
        ("f=nosuch,df=cubic", f"`--bind`: `{BOUND}` has no function `nosuch`"),
        (
            "x0=cubic,f=cubic,df=cubic",
            "`--bind`: `newton` has no parameter `x0` that takes a function (it takes f, df)",
        ),
        ("f=nn.relu,df=cubic", f"`--bind`: `{BOUND}` imports no module `nn`"),
        ("f=cubic,f=cubic", "`--bind` gives `f` twice"),
        ("f", "`--bind` takes PARAMETER=FUNCTION pairs such as f=sq,df=nn.relu, not 'f'"),
        ("f=cubic,df=cubic --wrt 1", "`--wrt 1` is `df`, the function `--bind` gives; choose among x0, tol, max_steps"),
        ("f=cubic,df=cubic --fn cubic", "`--bind`: `cubic` takes no functions as arguments"),
    ],
)
def test_bindings_that_do_not_fit_are_usage_errors(dlrun, bind: str, message: str) -> None:
    pairs, *rest = bind.split(" ")
    argv = ["grad", BOUND, "--fn", "newton", "--bind", pairs, *rest]
    assert dlrun(*argv) == (2, "", f"dlrun: error: {message}\n")


def test_bind_takes_a_function_of_an_imported_module(dlrun, tmp_path: Path) -> None:
    program = tmp_path / "twice.dl"
    program.write_text(
        "import nn\n"
        "fn twice(f, x: f32) -> f32 { return f(f(x)) }\n"
        "fn main() { print(grad(twice, wrt=1)(nn.tanh, 0.5)) }\n"
    )
    status, printed, err = dlrun("grad", str(program), "--fn", "twice", "--bind", "f=nn.tanh")
    assert (status, err) == (0, "")
    assert printed.splitlines()[:3] == [
        "# the derivative of `twice` with f = nn.tanh, as `twice_with_nn_tanh`",
        "fn twice_with_nn_tanh_grad(x: f32) -> f32 {",
        "    let t = tanh(x)",  # nn.tanh passes its argument on to the built-in: its rule is written in place
    ]
    status, out, err = dlrun(str(program))  # the program's own call, with the function it passes
    assert (status, err) == (0, "")
    inner = np.tanh(np.float32(0.5))
    assert float(out) == pytest.approx(float((1 - np.tanh(inner) ** 2) * (1 - inner**2)), rel=1e-6)


def test_bind_refuses_a_function_that_binds_the_name_again(dlrun, tmp_path: Path) -> None:
    program = tmp_path / "shadow.dl"
    program.write_text(
        "fn square(x) { return x * x }\n"
        "fn shadow(f, x: f32) -> f32 {\n"
        "    let g = fn(f) => f * 2.0\n"
        "    return f(g(x))\n"
        "}\n"
        "fn main() { print(shadow(square, 0.5)) }\n"
    )
    status, out, err = dlrun("grad", str(program), "--fn", "shadow", "--bind", "f=square")
    assert (status, out) == (1, "")
    assert err.splitlines()[:2] == [
        "error[E0333]: `shadow` binds `f` again, so `--bind f=...` cannot replace it",
        f" --> {program}:3:16",
    ]


# ---------------------------------------------------------------------- simplifying generated code


def folded_body(body: str, fold=None) -> str:
    """`body`, the statements of a function, after `fold` (by default `fold_zero_starts`, which `prune` ends
    with), printed."""
    from dl.lang.autodiff.simplify import fold_zero_starts
    from dl.lang.parse import parse
    from dl.lang.printer import print_stmt

    (decl,) = parse(f"fn f(m, a, b) {{\n{body}\n}}\n", "fold.dl").decls
    return "\n".join(print_stmt(stmt) for stmt in (fold or fold_zero_starts)(list(decl.body.body)))


def test_a_struct_adjoint_field_starts_as_its_first_contribution() -> None:
    body = "let d_m = zeros_like(m)\nd_m.w += a\nlet t = a * b\nd_m.b += t\nd_m.w += b\nreturn d_m"
    assert folded_body(body) == "let d_m = zeros_like(m)\nd_m.w = a\nlet t = a * b\nd_m.b = t\nd_m.w += b\nreturn d_m"


def test_field_starts_stop_where_the_adjoint_is_read() -> None:
    """Once a statement reads `d_m` (here `t`), a field's zeros may be seen: its `+=` stays."""
    body = "let d_m = zeros_like(m)\nd_m.w += a\nlet t = sum(d_m.b)\nd_m.b += t\nreturn d_m"
    assert folded_body(body) == "let d_m = zeros_like(m)\nd_m.w = a\nlet t = sum(d_m.b)\nd_m.b += t\nreturn d_m"


def test_a_field_contribution_that_reads_the_adjoint_keeps_its_addition() -> None:
    body = "let d_m = zeros_like(m)\nd_m.w += d_m.b * a\nd_m.b += a\nreturn d_m"
    assert folded_body(body) == "let d_m = zeros_like(m)\nd_m.w += d_m.b * a\nd_m.b += a\nreturn d_m"


def struct_folded_body(body: str) -> str:
    """`body` after `fold_struct_starts`, with `m` a struct `S { w, b }`."""
    from dl.lang import ast
    from dl.lang.autodiff.simplify import fold_struct_starts

    structs = {"m": ((lambda span: ast.Name("S", span)), ("w", "b"))}
    return folded_body(body, lambda stmts: fold_struct_starts(stmts, structs.get))


def test_a_struct_adjoint_whose_every_field_is_assigned_is_one_literal() -> None:
    """No struct of zeros is made only to be overwritten: it becomes a literal where its last field is set,
    also in a loop's body; not when something reads it first, a field is missing, or a value changes."""
    body = "let d_m = zeros_like(m)\nd_m.b = a\nlet t = a * b\nd_m.w = t\nreturn d_m"
    assert struct_folded_body(body) == "let t = a * b\nlet d_m = S { w: t, b: a }\nreturn d_m"
    looped = "while a > 0.0 {\n" + body.replace("return d_m", "a = sum(d_m.w)") + "\n}\nreturn a"
    assert "S { w: t, b: a }" in struct_folded_body(looped)
    read = "let d_m = zeros_like(m)\nd_m.b = a\nlet t = sum(d_m.b)\nd_m.w = t\nreturn d_m"
    missing = "let d_m = zeros_like(m)\nd_m.b = a\nreturn d_m"
    changed = "let d_m = zeros_like(m)\nd_m.b = a\na = a * b\nd_m.w = b\nreturn d_m"
    other = "let d_m = zeros_like(a)\nd_m.b = a\nd_m.w = b\nreturn d_m"
    for kept in (read, missing, changed, other):
        assert struct_folded_body(kept) == kept


def test_a_tree_add_start_is_its_first_contribution() -> None:
    """`tree_add` is how a tuple's, struct's or tape's adjoint is added to: zeros then a `tree_add` is the
    addend, as zeros then `+` is, when nothing in between reads the variable."""
    body = "let d_t = zeros_like(m)\nlet c = a * b\nd_t = tree_add(d_t, push(a, c))\nreturn d_t"
    assert folded_body(body) == "let c = a * b\nlet d_t = push(a, c)\nreturn d_t"


def test_a_tree_add_that_reads_the_variable_keeps_its_zeros() -> None:
    body = "let d_t = zeros_like(m)\nd_t = tree_add(d_t, pop(d_t)[1])\nreturn d_t"
    assert folded_body(body) == body
    read = "let d_t = zeros_like(m)\nlet s = len(d_t)\nd_t = tree_add(d_t, a)\nreturn d_t"
    assert folded_body(read) == read


def test_the_derivative_of_a_derivative_whose_function_holds_a_lambda(dlrun, tmp_path: Path) -> None:
    """`dlrun grad --fn df` differentiates the `grad` inside `df` first; an anonymous function in what `df`
    reaches is part of its function, not a function whose `grad`s are looked for (it was an internal error)."""
    program = tmp_path / "lambda.dl"
    program.write_text(
        "fn f(x: f64[3]) -> f64 { let k = fn(z) => z * 2.0; return sum(sin(k(x)) * x) }\n"
        "fn df(x: f64[3]) -> f64 { return sum(grad(f)(x) * x) }\n"
        "fn main() { print(grad(df)([0.1f64, 0.2, 0.3])) }\n"
    )
    status, printed, err = dlrun("grad", str(program), "--fn", "df")
    assert (status, err) == (0, "")
    assert [line for line in printed.splitlines() if line.startswith("fn ")] == [
        "fn df_grad(x: f64[3]) -> f64[3] {",
        "fn f_grad_fwd(x: f64[3]) {",
        "fn f_grad_bwd(x, kept, d_result) {",
    ]
    status, expected, err = dlrun(str(program))
    assert status == 0, err
    pasted = tmp_path / "pasted.dl"
    pasted.write_text(program.read_text().replace("grad(df)(", "df_grad(") + "\n" + printed)
    status, out, err = dlrun(str(pasted))
    assert (status, err, out) == (0, "", expected)


def test_a_tuple_adjoint_added_to_is_one_tuple() -> None:
    """A tuple's adjoint built as a literal and then added to by a literal is one literal, item by item, where
    zeros add nothing: the backward sweep of a `pop` no longer makes zeros for the entry and the rest."""
    body = "let d_p = (zeros_like(m), a)\nlet c = a * b\nd_p = tree_add(d_p, (c, zeros_like(b)))\nreturn d_p"
    assert folded_body(body) == "let c = a * b\nlet d_p = (c, a)\nreturn d_p"
    both = "let d_p = (a, b)\nd_p = tree_add(d_p, (b, a))\nreturn d_p"
    assert folded_body(both) == "let d_p = (tree_add(a, b), tree_add(b, a))\nreturn d_p"


def test_a_tuple_start_whose_items_change_before_the_addition_stays() -> None:
    body = "let d_p = (zeros_like(m), a)\na = a * b\nd_p = tree_add(d_p, (b, zeros_like(b)))\nreturn d_p"
    assert folded_body(body) == body
    shorter = "let d_p = (a, b)\nd_p = tree_add(d_p, (a, b, m))\nreturn d_p"
    assert folded_body(shorter) == shorter


NN_MODEL = """import nn

struct MLP { w1: f32[4, 8], b1: f32[8], w2: f32[8, 3], b2: f32[3] }

fn forward(m: MLP, x: f32[B, 4]) -> f32[B, 3] {
    let h = nn.relu(nn.linear(x, m.w1, m.b1))
    return nn.linear(h, m.w2, m.b2)
}

fn loss(m: MLP, x: f32[B, 4], y: i64[B]) -> f32 {
    return nn.cross_entropy(forward(m, x), y)
}
"""


def test_short_functions_are_written_in_place_where_their_module_s_names_reach(dlrun, tmp_path) -> None:
    """`forward`, `nn.linear` and `nn.cross_entropy` are short straight-line functions: their bodies are in
    `loss_grad`. `nn.relu` and `nn.log_softmax` pass their arguments on (through `builtin`) to the built-ins
    `relu` and `log_softmax`, whose rules are written in place: the derivative is one function. In a module
    with its own `where`, which relu's rule calls, `nn`'s functions are split into `_fwd` and `_bwd` functions,
    written in `nn`, where `where` is the built-in."""
    path = tmp_path / "model.dl"
    path.write_text(NN_MODEL)
    status, out, err = dlrun("grad", str(path), "--fn", "loss")
    assert (status, err) == (0, "")
    assert "let t = x @ w\n    let t_2 = t + b\n    let h = relu(t_2)\n" in out  # nn.linear's body, relu
    assert 'assert(min(picked) >= 0 and max(picked) < classes, "cross_entropy: a label is outside 0..classes")' in out
    assert "log_softmax(logits, axis=-1)" in out and "where(t_2 > 0.0, d_h, 0.0)" in out
    assert "_fwd" not in out and out.count("fn ") == 1
    path.write_text(NN_MODEL + "\nfn where(c, a, b) {\n    return a\n}\n")
    status, out, err = dlrun("grad", str(path), "--fn", "loss")
    assert (status, err) == (0, "") and "nn.relu_fwd(" in out and "nn.relu_bwd(" in out
    assert "nn.linear_fwd(" in out  # the rules of what nn's bodies compute might call `where`: all split


def test_a_short_function_whose_built_ins_the_caller_shadows_is_split(dlrun, tmp_path) -> None:
    """`nn.cross_entropy` calls `mean`; written in a module with its own `mean`, it would call that one: it is
    called through derivative functions of its own module instead, and the gradient is torch's."""
    path = tmp_path / "model.dl"
    path.write_text(
        "import nn\n\nfn mean(x) {\n    return sum(x) * 0.0\n}\n\n"
        "fn loss(z: f32[2, 3], y: i64[2]) -> f32 {\n    return nn.cross_entropy(z, y)\n}\n\n"
        "fn main() {\n    print(grad(loss)([[1.0, 2.0, 0.5], [0.3, -1.0, 2.0]], [1, 2]))\n}\n"
    )
    status, out, err = dlrun("grad", str(path), "--fn", "loss")
    split = ("nn.cross_entropy_fwd(z, y, ", "nn.cross_entropy_back_for_0(z, y, ")  # (its defaults follow)
    assert (status, err) == (0, "") and any(call in out for call in split)
    z = torch.tensor([[1.0, 2.0, 0.5], [0.3, -1.0, 2.0]], requires_grad=True)
    torch.nn.functional.cross_entropy(z, torch.tensor([1, 2])).backward()
    status, out, err = dlrun(str(path))
    assert status == 0
    found = np.array([[float(v) for v in row.strip(" []").split()] for row in out.strip().splitlines()])
    np.testing.assert_allclose(found, z.grad.numpy(), rtol=1e-5)
