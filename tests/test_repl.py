"""The REPL (driver/repl.py): entries, state, commands, the prompt_toolkit application driven through a
pipe, stdin that is not a terminal, and `dlrun repl` in a pseudo-terminal. Also the Pygments lexer."""

from __future__ import annotations

import _thread
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from dl import repl
from dl.highlight import DLLexer
from dl.lang import nesting
from dl.repl import Outcome, Session
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput
from pygments.token import Comment, Keyword, Name, Number

DLRUN = Path(sys.executable).parent / "dlrun"


@pytest.fixture
def session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Session:
    monkeypatch.chdir(tmp_path)
    return Session(tmp_path)


def run(session: Session, capsys: pytest.CaptureFixture, *entries: str) -> tuple[str, str]:
    capsys.readouterr()
    for entry in entries:
        session.handle(entry)
    captured = capsys.readouterr()
    return captured.out, captured.err


def drive(session: Session, keys: str, interrupt_after_s: float | None = None) -> None:
    """Run the real prompt_toolkit application on `keys` (a pipe input, a dummy output) until it returns.

    With `interrupt_after_s`, a watcher raises KeyboardInterrupt in this thread (as Ctrl-C in a terminal
    does) once a program has been running that long in a room (lang/nesting.py)."""
    stop = threading.Event()

    def watch() -> None:
        started = None
        while not stop.is_set():
            running = nesting.running()
            started = (started or time.monotonic()) if running else None
            if started is not None and time.monotonic() - started > interrupt_after_s:
                _thread.interrupt_main()
                started = None
            time.sleep(0.02)

    if interrupt_after_s is not None:
        threading.Thread(target=watch, daemon=True).start()
    try:
        with create_pipe_input() as pipe:
            pipe.send_text(keys)
            assert repl.interactive(session, input=pipe, output=DummyOutput()) == 0
    finally:
        stop.set()


# ---------------------------------------------------------------------- entries


def test_expressions_print_value_and_static_type(session: Session, capsys: pytest.CaptureFixture) -> None:
    out, err = run(session, capsys, "let x = ones(3, 4)", "x * 2.0", "sum(x)", "let n = 2\nn + 1", "print(1 + 2)")
    assert err == ""
    assert out == "[[2. 2. 2. 2.]\n [2. 2. 2. 2.]\n [2. 2. 2. 2.]]\n: f32[3, 4]\n12.0 : f32\n3 : i64\n3\n"


def test_state_persists_and_values_are_numpy_exact(session: Session, capsys: pytest.CaptureFixture) -> None:
    out, err = run(
        session,
        capsys,
        "let w = randn(3, 2, seed=1)",
        "let x = ones(4, 3)",
        "let y = x @ w",
        "y = y + 1.0",
        "fn square(a: f32) -> f32 { return a * a }",
        "square(3.0)",
        "grad(square)(3.0)",
    )
    assert err == ""
    expected = np.ones((4, 3), np.float32) @ np.random.default_rng(1).standard_normal((3, 2)).astype(np.float32) + 1
    np.testing.assert_allclose(session.values["y"], expected, rtol=1e-6)
    assert str(session.variables["y"]) == "f32[4, 2]"
    assert out == "9.0 : f32\n6.0 : f32\n"


def test_structs_lambdas_imports_and_constants(session: Session, capsys: pytest.CaptureFixture) -> None:
    out, err = run(
        session,
        capsys,
        "struct Point { x: f32, y: f32 }",
        "let p = Point { x: 1.0, y: 2.0 }",
        "p",
        "let double = fn(v) => v * 2.0",
        "double(p.y)",
        "import nn",
        "const W = randn(2)",
        "W",
        "W",
    )
    assert err == ""
    lines = out.splitlines()
    assert lines[:2] == ["Point { x: 1.0, y: 2.0 } : Point", "4.0 : f32"]
    assert lines[2] == lines[3]  # a constant is evaluated once, not at every entry
    assert lines[2].endswith(": f32[2]")


def test_a_gradient_bound_to_a_name_is_called_in_later_entries(session: Session, capsys: pytest.CaptureFixture) -> None:
    out, err = run(session, capsys, "fn f(x: f32) -> f32 { return x * x }", "let d = grad(f)", "d(5.0)", ":type d")
    assert err == ""
    assert out == "10.0 : f32\nd : grad(fn f)\n"
    out, err = run(session, capsys, "grad(d)(1.0)", "grad(grad(f))(1.0)")
    assert err.startswith("error[E0333]: `grad` cannot differentiate a gradient that a variable holds from outside")
    assert out == "2.0 : f32\n"


def test_grad_of_a_variable_holding_a_function_or_a_lambda_that_captures_nothing(
    session: Session, capsys: pytest.CaptureFixture
) -> None:
    """As `jax.grad(f)` of a name in a notebook. A variable keeps the function it was given after `f` is declared
    again; a lambda that captures a variable is refused, as its derivative would read the variable's value now
    where the lambda kept the one it saw."""
    out, err = run(
        session,
        capsys,
        "fn f(x: f32) -> f32 { return x * x }",
        "let g = f",
        "grad(g)(3.0)",
        "let h = fn(x) => x * x * x",
        "value_and_grad(h)(2.0)",
        "fn f(x: f32) -> f32 { return 10.0 * x }",
        "grad(g)(3.0)",
    )
    assert (out, err) == ("6.0 : f32\n(8.0, 12.0) : (f32, f32)\n6.0 : f32\n", "")
    # where the entry binds the name again (a `let`, a parameter), it is not the session's variable there
    for entry in (
        "let g = h; grad(g)(2.0)",
        "if true { let g = h; print(grad(g)(2.0)) }",
        "(fn(g) => grad(g)(2.0))(h)",
    ):
        out, err = run(session, capsys, "fn h(x: f32) -> f32 { return x * x * x }", "let g = f", entry)
        assert out == "" and err.startswith("error[E0333]: `grad` cannot differentiate `g`"), (entry, out, err)
    out, err = run(session, capsys, "let m = f", "let f = h", "1 + 1", "m(2.0)", "f(2.0)")  # `f` is a variable now
    assert (out, err) == ("2 : i64\n20.0 : f32\n8.0 : f32\n", "")  # (every entry was E0305: `m = f` was written)
    out, err = run(session, capsys, "let d = grad(fn(x) => x * x * x)", "d(2.0)")  # (an internal error)
    assert (out, err) == ("12.0 : f32\n", "")
    out, err = run(session, capsys, "let c = 2.0", "let k = fn(x) => c * x", "c = 5.0", "k(1.0)", "grad(k)(1.0)")
    assert out == "2.0 : f32\n"
    assert err.startswith("error[E0333]: `grad` cannot differentiate `k`: it holds a function known only when")


def test_a_closure_made_by_a_function_in_one_entry_is_called_in_later_ones(
    session: Session, capsys: pytest.CaptureFixture
) -> None:
    """A lambda made inside another call captured names that exist only there (`a` of `mk(3.0)`): later entries
    still check and call it, and every other entry still runs (each was E0201 `a` before). What it captured are
    the values and types it saw, not those of a session variable of the same name now."""
    out, err = run(
        session,
        capsys,
        "let mk = fn(a) => fn(x) => a * x * x",
        "let k3 = mk(3.0)",
        "k3(2.0)",
        "let y = 1.0",
        "y + k3(1.0)",
        "struct P { w: f32[2], b: f32 }",
        "let model = (fn(q) => fn(x) => sum(q.w * x) + q.b)(P { w: [1.0, 2.0], b: 0.5 })",
        "model([3.0, 4.0])",
        "let rows = (fn(n) => fn(x) => reshape(x, n, -1))(2)",
        "rows(arange(6))",
        "let pick = (fn(t) => fn(b) => where(b, t[0], t[1]))(([1.0, 2.0], 0.0))",
        "pick([true, false])",
        "let c = 2.0",
        "let f = fn(x) => c * x",
        "let c = [1.0, 2.0]",
        "f(3.0) + model([1.0, 1.0])",
    )
    assert err == ""
    assert out.splitlines() == [
        "12.0 : f32",
        "4.0 : f32",
        "11.5 : f32",
        "[[0 1 2]",
        " [3 4 5]]",
        ": i64[2, 3]",
        "[1. 0.] : f32[2]",
        "9.5 : f32",
    ]


def test_closures_of_one_lambda_that_captured_different_types_keep_their_own_types(
    session: Session, capsys: pytest.CaptureFixture
) -> None:
    """Two closures of `fn(x) => a * x` (made with a scalar, then a vector) are two functions, as they are in a
    file: each call is checked with what its closure captured, a size known by value included. A closure that
    captured what the entry cannot make again (a function value, a struct declared again since) is called with
    its result's type unknown (`_`), and every other entry goes on."""
    out, err = run(
        session,
        capsys,
        "let mk = fn(a) => fn(x) => a * x",
        "let k = mk(3.0)",
        "let kt = mk([1.0, 2.0, 3.0])",
        "k(5.0)",
        "let z = k(5.0)",
        "z + [1.0, 2.0]",
        "let grow = fn(n) => fn(x) => zeros(n) + x",
        "let three = grow(3)",
        "let four = grow(4)",
        "three(1.0)",
        "let twice = (fn(f) => fn(x) => f(x) * 2.0)(fn(y) => y + 1.0)",
        "twice(1.0)",
        "struct P { a: f32 }",
        "let scaled = (fn(q) => fn(x) => q.a * x)(P { a: 2.0 })",
        "struct P { a: f32, b: f32 }",
        "scaled(3.0)",
        "kt(1.0)",
    )
    assert err == ""
    assert out.splitlines() == [
        "15.0 : f32",
        "[16. 17.] : f32[2]",
        "[1. 1. 1.] : f32[3]",
        "4.0 : _",
        "6.0 : _",
        "[1. 2. 3.] : f32[3]",
    ]


def test_closures_over_session_variables_and_rebound_closures(session: Session, capsys: pytest.CaptureFixture) -> None:
    """A lambda calling a session variable that holds a lambda is made again where that variable is (it was a
    KeyError traceback, found by review); a variable may be given another closure of one lambda; an integer
    captured with no value known statically keeps its type."""
    out, err = run(
        session,
        capsys,
        "let sq = fn(x) => x * x",
        "let twice = fn(x) => sq(x) * 2.0",
        "tree_map(twice, (1.0, 2.0))",
        "twice(2.0)",
        "let mk = fn(a) => fn(x) => a * x",
        "let k = mk(2)",
        "k = mk(3)",
        "k(3)",
        "let n = int(sum(ones(3)))",
        "let times = (fn(m) => fn(x) => x * m)(n)",
        "times(2)",
    )
    assert err == ""
    assert out.splitlines() == ["(2.0, 8.0) : (f32, f32)", "8.0 : f32", "9 : i64", "6 : i64"]


def test_a_lambda_with_grad_in_it_is_called_in_a_later_entry(session: Session, capsys: pytest.CaptureFixture) -> None:
    """A lambda whose body takes `grad`, made in one entry and called in others (the entry that made it was an
    error: `grad` was written only for calls the check saw); a Hessian-vector product as a helper."""
    out, err = run(
        session,
        capsys,
        "fn sq(x: f32) -> f32 { return x * x }",
        "let slope = fn(x) => grad(sq)(x)",
        "slope(3.0)",
        "let hvp = fn(x, v) => sum(grad(fn(z) => sum(z * z * z))(x) * v)",
        "hvp([1.0, 2.0], [1.0, 1.0])",
        "slope(4.0) + hvp([1.0], [2.0])",
    )
    assert (out, err) == ("6.0 : f32\n15.0 : f32\n14.0 : f32\n", "")


def test_a_name_keeps_the_function_it_was_given_when_the_function_is_declared_again(
    session: Session, capsys: pytest.CaptureFixture
) -> None:
    """As a Python name keeps the function object: `g`, `t[0]` and `d` go on with the first `f`; `f` is the
    new one; a function no name holds any more is gone from the session."""
    out, err = run(
        session,
        capsys,
        "fn f(x: f32) -> f32 { return x * 2.0 }",
        "let g = f",
        "let t = (f, 1)",
        "let d = grad(f)",
        "fn f(x: f32) -> f32 { return x * x * 3.0 }",
        "g(1.0)",
        "t[0](2.0)",
        "d(5.0)",
        "f(1.0)",
        ":type g",
        "let g = f",
        "let t = (f, 2)",
        "let d = grad(f)",
        "g(1.0)",
    )
    assert err == ""
    assert out.splitlines() == [
        "2.0 : f32",
        "4.0 : f32",
        "2.0 : f32",
        "3.0 : f32",
        "g : fn f(x: f32) -> f32 (earlier 5)",
        "3.0 : f32",
    ]
    assert not [d for d in session.declarations if "earlier" in getattr(d, "name", "")]


def test_a_function_a_name_holds_calls_the_functions_declared_now(
    session: Session, capsys: pytest.CaptureFixture
) -> None:
    """As Python looks a global up when the function runs: `g` and `t[0]` hold `f`, whose `h` is declared again."""
    out, err = run(
        session,
        capsys,
        "fn h(x: f32) -> f32 { return x + 1.0 }",
        "fn f(x: f32) -> f32 { return h(x) * 2.0 }",
        "let g = f",
        "let t = (f, 1)",
        "g(1.0)",
        "fn h(x: f32) -> f32 { return x + 100.0 }",
        "g(1.0)",
        "t[0](1.0)",
    )
    assert err == ""
    assert out.splitlines() == ["4.0 : f32", "202.0 : f32", "202.0 : f32"]


def test_a_value_keeps_its_struct_when_the_struct_is_declared_again(
    session: Session, capsys: pytest.CaptureFixture
) -> None:
    """`p` was made before `P` had `y`: passing it where the new `P` is expected is a type error before
    running, not a missing field when it runs."""
    out, err = run(
        session,
        capsys,
        "struct P { x: f32 }",
        "let p = P { x: 1.0 }",
        "let pair = (p, 2)",
        "struct P { x: f32, y: f32 }",
        "fn g(a: P) -> f32 { return a.y }",
        "g(p)",
        "p.x + pair[0].x",
        "let p = P { x: 1.0, y: 2.0 }",
        "let pair = 0",
        "g(p)",
    )
    assert "error[E0301]: argument `a` of `g` expects P, found P (earlier 4)" in err
    assert out.splitlines() == ["2.0 : f32", "2.0 : f32"]
    assert not [d for d in session.declarations if "earlier" in getattr(d, "name", "")]


def test_an_error_shows_a_caret_under_the_entry_and_the_session_goes_on(
    session: Session, capsys: pytest.CaptureFixture
) -> None:
    out, err = run(session, capsys, "let x = ones(2, 3)", "x @ x", "x[5, 0]", "totl + 1", "sum(x)")
    assert out == "6.0 : f32\n"
    assert "error[E0302]: matmul inner dimensions differ: 3 vs 2\n --> <repl-2>:1:1" in err
    assert "1 | x @ x\n  | ^^^^^ f32[2, 3] @ f32[2, 3]" in err
    assert "error[E0308]" in err and "error[E0201]: unknown name `totl`" in err


def test_a_failed_entry_leaves_the_state_as_it_was(session: Session, capsys: pytest.CaptureFixture) -> None:
    out, err = run(session, capsys, "let n = 1", 'n = n + 1\nlet bad = [1.0, 2.0][int("7")]', "n")
    assert "error[E0501]" in err
    assert out == "1 : i64\n"


def test_a_missing_module_is_looked_for_in_the_current_directory(
    session: Session, capsys: pytest.CaptureFixture
) -> None:
    """An entry is no file: the label says where the REPL looked (not "beside this file")."""
    _, err = run(session, capsys, "import nope")
    assert err.splitlines()[-1] == (
        "  | ^^^^^^^^^^^ looked for `nope.dl` in the current directory and in the standard library"
    )


def test_return_at_top_level_is_a_diagnostic(session: Session, capsys: pytest.CaptureFixture) -> None:
    _, err = run(session, capsys, "return 3")
    assert err.startswith("error[E0102]: `return` outside a function")


@pytest.mark.parametrize(
    ("text", "complete"),
    [
        ("1 + 2", True),
        ("fn f(x) {", False),
        ("let y = (1,", False),
        ("1 +", False),
        ("sum(ones(2),\n    axis=0", False),
        ("1 +* 2", True),  # wrong, not unfinished: running it shows the error
        (":type 1 +", True),
        ("", True),
    ],
)
def test_completeness(session: Session, text: str, complete: bool) -> None:
    assert session.is_complete(text) is complete


# ---------------------------------------------------------------------- commands


def test_commands(session: Session, capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    (tmp_path / "model.dl").write_text(
        "fn loss(w: f32, x: f32) -> f32 {\n    let y = tanh(w * x)\n    return y * y\n}\nconst SCALE = 3.0\n"
    )
    out, err = run(session, capsys, ":load model.dl", "loss(0.5, 2.0) * SCALE", ":grad loss", ":type ones(2) * SCALE")
    assert err == ""
    value = np.tanh(np.float32(1.0)) ** 2 * 3
    lines = out.splitlines()
    assert lines[0] == "loaded model.dl: fn loss, const SCALE"
    assert float(lines[1].split(" : ")[0]) == pytest.approx(value, rel=1e-6)
    assert lines[2] == "fn loss_grad(w: f32, x: f32) -> f32 {"
    assert lines[-1] == "ones(2) * SCALE : f32[2]"
    out, err = run(session, capsys, ":reset", "SCALE", ":help", ":nope", ":type", ":grad loss x")
    assert out.startswith("session reset\n")
    assert ":type EXPR" in out
    assert "unknown name `SCALE`" in err and "unknown command `:nope`" in err
    assert "needs an argument" in err and "not 'x'" in err
    assert session.handle(":quit") is Outcome.QUIT


def test_type_of_a_function_is_its_signature(session: Session, capsys: pytest.CaptureFixture) -> None:
    out, err = run(
        session,
        capsys,
        "fn predict(x: f32[B, 4], k: i64) -> f32[B] { return sum(x, axis=1) }",
        "let h = predict",
        ":type predict",
        ":type h",
        ":type fn(x) => x",
    )
    assert err == ""
    assert out.splitlines() == [
        "predict : fn predict(x: f32[B, 4], k: i64) -> f32[B]",
        "h : fn predict(x: f32[B, 4], k: i64) -> f32[B]",
        "fn(x) => x : fn(x)",
    ]


def test_load_finds_the_imports_beside_the_file(
    session: Session, capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "helper.dl").write_text("fn answer() -> i64 { return 42 }\n")
    (tmp_path / "project" / "model.dl").write_text("import helper\nfn run() -> i64 { return helper.answer() }\n")
    out, err = run(session, capsys, ":load project/model.dl", "run()", "helper.answer() + 1")
    assert err == ""
    assert out.splitlines() == ["loaded project/model.dl: import helper, fn run", "42 : i64", "43 : i64"]


def test_f_strings_and_str_in_the_repl(session: Session, capsys: pytest.CaptureFixture) -> None:
    out, err = run(
        session, capsys, "let epoch = 3", 'f"epoch {epoch:>3}: {0.5:.1%}"', 'str(epoch) + "!"', 'f"{nosuch}"'
    )
    assert out == "epoch   3: 50.0% : str\n3! : str\n"
    assert err.startswith("error[E0201]: unknown name `nosuch`") and '1 | f"{nosuch}"' in err


def test_grad_of_a_name_the_session_does_not_declare(session: Session, capsys: pytest.CaptureFixture) -> None:
    out, err = run(session, capsys, ":grad nosuch", "fn square(x: f32) -> f32 { return x * x }", ":grad squar")
    assert out == ""
    assert err == (
        "no function `nosuch` in this session; declare it with `fn`, or `:load` a file\n"
        "no function `squar` in this session; did you mean `square`?\n"
    )
    assert session.handle(":grad nosuch") is Outcome.FAILED


# ---------------------------------------------------------------------- the prompt_toolkit application


def test_application_multi_line_entry_and_state(session: Session, capsys: pytest.CaptureFixture) -> None:
    drive(session, "let x = ones(2, 3)\rsum(x,\raxis=0\r)\rx[0, 0] +\r1.0\r:quit\r")
    captured = capsys.readouterr()
    assert captured.out == "[2. 2. 2.] : f32[3]\n2.0 : f32\n"
    assert captured.err == ""


def test_application_an_if_waits_for_an_else_line_and_an_empty_line_runs_it(
    session: Session, capsys: pytest.CaptureFixture
) -> None:
    """As Python's REPL ends a block: after an `if`'s `}`, a line may begin with `else`; an empty one runs it."""
    drive(session, "let n = 0\rif n > 0 {\rn = 1\r}\relse {\rn = 2\r}\r\rn\rif true { n = 3 }\r\rn\r:quit\r")
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("2 : i64\n3 : i64\n", "")


def test_application_error_then_recovery_and_ctrl_d(session: Session, capsys: pytest.CaptureFixture) -> None:
    drive(session, "let a = 2\ra @ a\ra * 21\r\x04")
    captured = capsys.readouterr()
    assert "error[E0" in captured.err and "a @ a" in captured.err
    assert captured.out == "42 : i64\n"


def test_application_ctrl_c_cancels_the_entry_being_typed(session: Session, capsys: pytest.CaptureFixture) -> None:
    drive(session, "print(\x03print(7)\r\x04")
    assert capsys.readouterr().out == "7\n"


def test_application_ctrl_c_interrupts_a_long_loop(session: Session, capsys: pytest.CaptureFixture) -> None:
    keys = "let i = 0\rwhile true {\ri = i + 1\r}\ri\r\x04"
    started = time.monotonic()
    drive(session, keys, interrupt_after_s=0.3)
    assert time.monotonic() - started < 20
    captured = capsys.readouterr()
    assert "interrupted" in captured.err
    assert captured.out == "0 : i64\n"  # the interrupted entry changed nothing
    assert not nesting.running()  # the loop stopped, too


def test_completion_lists_names_with_their_types(session: Session, capsys: pytest.CaptureFixture) -> None:
    run(
        session,
        capsys,
        "import nn",
        "struct Point { x: f32, y: f32 }",
        "let point = Point { x: 1.0, y: 2.0 }",
        "let pixels = ones(2, 3)",
        "fn scale(v: f32[N]) -> f32[N] { return v * 2.0 }",
    )
    completer = repl.make_prompt(session, input=None, output=DummyOutput()).completer

    def complete(text: str) -> dict[str, str]:
        found = completer.get_completions(Document(text), CompleteEvent(completion_requested=True))
        return {c.text: c.display_meta_text for c in found}

    found = complete("p")
    assert (found["pixels"], found["point"], found["print"]) == ("f32[2, 3]", "Point", "built-in")
    assert all(name.startswith("p") for name in found)
    assert complete("point.") == {"x": "f32", "y": "f32"}
    assert complete("let s = sc")["scale"] == "fn scale(v: f32[N]) -> f32[N]"
    assert complete("whi") == {"while": "keyword"}
    assert "linear" in complete("nn.")


# ---------------------------------------------------------------------- stdin that is not a terminal


def dlrun_repl(stdin: str, tmp_path: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data")}
    command = [str(DLRUN), *(argv or ("repl",))]
    return subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)


def test_dlrun_alone_is_the_repl(tmp_path: Path) -> None:
    done = dlrun_repl("let s = 2\ns * 3\n", tmp_path, "--backend", "interp")
    assert done.returncode == 2  # an option without a file is still a usage error
    done = subprocess.run([str(DLRUN)], input="let s = 2\ns * 3\n", capture_output=True, text=True, timeout=60)
    assert (done.stdout, done.stderr, done.returncode) == ("6 : i64\n", "", 0)


def test_piped_stdin(tmp_path: Path) -> None:
    done = dlrun_repl("print(1 + 2)\n", tmp_path)
    assert (done.stdout, done.stderr, done.returncode) == ("3\n", "", 0)
    done = dlrun_repl("let x = ones(2, 2)\nsum(x,\n    axis=1)\nx @ ones(3)\nx[0]\n", tmp_path)
    assert done.stdout == "[2. 2.] : f32[2]\n[1. 1.] : f32[2]\n"
    assert "error[E0302]" in done.stderr
    assert done.returncode == 1


def test_piped_stdin_may_start_with_a_byte_order_mark(tmp_path: Path) -> None:
    done = dlrun_repl("\ufeff1 + 2\n", tmp_path)
    assert (done.stdout, done.stderr, done.returncode) == ("3 : i64\n", "", 0)


@pytest.mark.parametrize("encoding", ["utf-8:surrogateescape", "utf-8:strict"])
def test_piped_stdin_that_is_not_utf8_is_said_to_be_so(tmp_path: Path, encoding: str) -> None:
    """As a file that is not UTF-8 is (E0404), whichever way Python would decode stdin (a C locale escapes the
    bytes as U+DCFF, a UTF-8 one stops); the lines after it still run."""
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data"), "PYTHONIOENCODING": encoding}
    done = subprocess.run(
        [str(DLRUN), "repl"], input=b"\xff\xfe\n1 + 1\r\n", capture_output=True, timeout=60, cwd=tmp_path, env=env
    )
    assert (done.stdout, done.stderr, done.returncode) == (
        b"2 : i64\n",
        b"error[E0404]: cannot read standard input: it is not UTF-8 text (byte 0xff at line 1, column 1)\n"
        b" --> <stdin>:1:1\n",
        1,
    )


def test_piped_stdin_takes_an_else_on_the_line_after_the_if(tmp_path: Path) -> None:
    lines = (
        "let n = 0\nif true {\n    n = 1\n}\nelse {\n    n = 2\n}\nn\nif n > 5 { n = 9 }\n\nn\nif n == 1 { n = 4 }\nn\n"
    )
    done = dlrun_repl(lines, tmp_path)
    assert (done.stdout, done.stderr, done.returncode) == ("1 : i64\n1 : i64\n4 : i64\n", "", 0)


def test_docs_transcript_matches(tmp_path: Path) -> None:
    """docs/repl.md's `text` transcripts of `echo ... | dlrun repl` are what the REPL prints."""
    page = (Path(__file__).parent.parent / "docs" / "repl.md").read_text()
    commands = re.findall(r"^\$ printf '(.*)' \| dlrun repl\n((?:(?!\$ |```).*\n)*)", page, re.MULTILINE)
    assert commands
    for text, expected in commands:
        done = dlrun_repl(text.encode().decode("unicode_escape"), tmp_path)
        assert done.stdout + done.stderr == expected


# ---------------------------------------------------------------------- a real terminal


def test_dlrun_repl_in_a_pseudo_terminal(tmp_path: Path) -> None:
    pexpect = pytest.importorskip("pexpect")
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data"), "TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1"}
    # The screen is drawn with escape sequences between the characters: match the text pieces.
    child = pexpect.spawn(str(DLRUN), ["repl"], cwd=str(tmp_path), env=env, encoding="utf-8", timeout=30)
    try:
        child.expect("dl>")
        child.send("let x = ones(2, 3)\r")
        child.expect("dl>")
        child.send("sum(x,\r")
        child.expect(r"\.\.\.")  # the continuation prompt
        child.send("axis=0)\r")
        child.expect(re.escape("[2. 2. 2.] : f32[3]"))
        child.send("while true { }\r")
        time.sleep(0.3)
        child.sendintr()
        child.expect("interrupted")
        child.send("x @ x\r")
        child.expect(re.escape("^^^^^ f32[2, 3] @ f32[2, 3]"))
        child.send("\x04")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    history = (tmp_path / "data" / "dl" / "repl_history").read_text()
    assert "let x = ones(2, 3)" in history


# ---------------------------------------------------------------------- highlighting


def test_pygments_lexer_classifies_dl_tokens() -> None:
    source = "fn f(x: f32) -> f32 {  # twice\n    return sum(x) * 2.0 $\n}\n"
    tokens = list(DLLexer().get_tokens_unprocessed(source))
    assert "".join(text for _, _, text in tokens) == source
    kinds = {text: kind for _, kind, text in tokens}
    assert kinds["fn"] in Keyword and kinds["return"] in Keyword
    assert kinds["f32"] is Keyword.Type and kinds["sum"] is Name.Builtin and kinds["f"] is Name
    assert kinds["# twice"] in Comment and kinds["2.0"] in Number


def test_pygmentize_finds_the_plugin(tmp_path: Path) -> None:
    from pygments.lexers import get_lexer_by_name, get_lexer_for_filename

    assert isinstance(get_lexer_by_name("dl"), DLLexer)
    assert isinstance(get_lexer_for_filename("model.dl"), DLLexer)
