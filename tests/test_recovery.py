"""Parser recovery: a file with syntax errors still gives its good declarations and every error."""

from __future__ import annotations

import dl.lang
from dl.lang.parse import parse, parse_recovering
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_parser import TOKENS


def where(diagnostics: list) -> list[tuple[str, int, int]]:
    return [(d.code, d.span.line, d.span.column) for d in diagnostics]


def names(module) -> list[str]:
    return [getattr(decl, "name", None) or decl.module for decl in module.decls]


TWO_BROKEN_FUNCTIONS = """\
import nn

fn a(x: f32) -> f32 {
    return x +
}

fn good(x: f32) -> f32 {
    return x
}

fn b(x: f32 -> f32 {
    return x
}

struct P {
    x: f32
}
"""


def test_two_broken_functions_among_good_declarations() -> None:
    module, diagnostics = parse_recovering(TWO_BROKEN_FUNCTIONS, "t.dl")
    assert names(module) == ["nn", "good", "P"]
    assert where(diagnostics) == [("E0102", 5, 1), ("E0102", 11, 13)]
    assert all(d.span.path == "t.dl" for d in diagnostics)


def test_recovered_declarations_keep_their_spans() -> None:
    module, _ = parse_recovering(TWO_BROKEN_FUNCTIONS, "t.dl")
    good, struct = module.decls[1], module.decls[2]
    assert (good.span.line, good.span.column, good.span.end_line) == (7, 1, 9)
    assert (struct.name_span.line, struct.name_span.column) == (15, 8)
    alone = parse("\n" * 6 + "".join(TWO_BROKEN_FUNCTIONS.splitlines(keepends=True)[6:9]), "t.dl")
    assert alone.decls[0] == good


def test_an_unclosed_brace_in_the_middle() -> None:
    source = """\
fn a() {
    let y = 1
}
fn b(x: f32) -> f32 {
    if x > 0.0 {
        return x
}
fn c() {
    print(1)
}
"""
    module, diagnostics = parse_recovering(source, "t.dl")
    assert names(module) == ["a", "c"]
    # the `if`'s `}` is missing: the `}` on line 7 closes the `if`, left of it, so `b`'s `{` is left open
    assert where(diagnostics) == [("E0103", 5, 16)]


def test_garbage_at_the_top() -> None:
    source = "}}} $ garbage\nfn c() {\n}\nfn d() { let x = \n}\nfn e() {}\nfn f( {"
    module, diagnostics = parse_recovering(source, "t.dl")
    assert names(module) == ["c", "e"]
    assert where(diagnostics) == [("E0101", 1, 5), ("E0102", 5, 1), ("E0102", 7, 7)]


def test_a_file_that_parses_gives_what_parse_gives() -> None:
    source = "fn f() {\n    print(1)\n}\n"
    assert parse_recovering(source, "t.dl") == (parse(source, "t.dl"), [])
    assert parse_recovering("", "t.dl") == (parse("", "t.dl"), [])


def test_check_reports_syntax_errors_and_the_good_functions_errors() -> None:
    source = """\
fn helper(x: f32) -> f32 {
    let x =
}

fn main() {
    let a = [1.0, 2.0, 3.0]
    let b = [1.0, 2.0]
    print(a + b)
    print(helper(1.0))
    print(nowhere)
}

fn broken( {
"""
    typed = dl.lang.check(source, "t.dl")
    # `helper` did not parse, so its use is not reported as unknown; `nowhere` is.
    assert where(typed.diagnostics) == [("E0102", 3, 1), ("E0303", 8, 11), ("E0201", 10, 11), ("E0102", 13, 12)]
    assert "nowhere" in typed.diagnostics[2].message


def test_check_of_a_file_that_parses_is_unchanged() -> None:
    typed = dl.lang.check("fn main() {\n    print(nowhere)\n}\n", "t.dl")
    assert where(typed.diagnostics) == [("E0201", 2, 11)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200))
def test_recovery_never_raises_on_random_bytes(data: bytes) -> None:
    text = data.decode("utf-8", errors="replace")
    _, diagnostics = parse_recovering(text, "t.dl")
    assert all(d.code.startswith("E01") for d in diagnostics)
    dl.lang.check(text, "t.dl")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(TOKENS), st.sampled_from([" ", "\n"])), max_size=40))
def test_recovery_never_raises_on_token_soup(tokens: list[tuple[str, str]]) -> None:
    text = "".join(token + separator for token, separator in tokens)
    parse_recovering(text, "t.dl")
    dl.lang.check(text, "t.dl")
