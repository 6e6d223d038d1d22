"""Parser properties: printing round-trips, and no input makes the parser raise anything but a diagnostic."""

from __future__ import annotations

import keyword as python_keywords
from pathlib import Path

import pytest
from conftest import ROOT
from dl.lang import ast
from dl.lang.diagnostics import DiagnosticError
from dl.lang.parse import parse, parse_repl
from dl.lang.printer import print_expr, print_module
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

KEYWORDS = {
    "fn",
    "let",
    "if",
    "else",
    "while",
    "for",
    "in",
    "return",
    "break",
    "continue",
    "struct",
    "import",
    "as",
    "const",
    "and",
    "or",
    "not",
    "true",
    "false",
}
assert not python_keywords.iskeyword("dl")

names = st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True).filter(lambda n: n not in KEYWORDS and n != "_")
type_names = st.sampled_from(["f32", "f64", "i64", "bool", "Model", "Point"])
dims = st.one_of(st.builds(ast.DimLiteral, st.integers(0, 512)), st.builds(ast.DimName, st.sampled_from("BNH_")))


def types() -> st.SearchStrategy:
    leaf = st.one_of(
        st.builds(ast.NamedType, type_names),
        st.builds(ast.NamedType, st.just("Linear"), st.just("nn")),
        st.builds(ast.TensorTypeExpr, st.sampled_from(["f32", "i64"]), st.lists(dims, max_size=3).map(tuple)),
    )
    return st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.builds(ast.TupleTypeExpr, st.lists(inner, min_size=0, max_size=3).map(tuple)),
            st.builds(ast.FunctionTypeExpr, st.lists(inner, max_size=2).map(tuple), inner),
        ),
        max_leaves=4,
    )


floats = st.floats(min_value=0, max_value=1e300, allow_nan=False, allow_infinity=False)
literals = st.one_of(
    st.builds(ast.IntLiteral, st.integers(0, 10**12), st.sampled_from([None, None, "i32"])),
    st.builds(ast.FloatLiteral, floats, st.sampled_from([None, None, "f64"])),
    st.builds(ast.BoolLiteral, st.booleans()),
    st.builds(ast.StringLiteral, st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=8)),
)
OPERATORS = ["or", "and", "==", "!=", "<", "<=", ">", ">=", "+", "-", "*", "/", "//", "%", "@", "**"]


def expressions() -> st.SearchStrategy:
    leaf = st.one_of(st.builds(ast.Name, names), literals)

    def extend(inner: st.SearchStrategy) -> st.SearchStrategy:
        subscripts = st.one_of(inner, st.builds(ast.Slice, st.none() | inner, st.none() | inner, st.none() | inner))
        return st.one_of(
            st.builds(ast.Binary, st.sampled_from(OPERATORS), inner, inner),
            st.builds(ast.Unary, st.sampled_from(["-", "not"]), inner),
            st.builds(
                ast.Call,
                inner,
                st.lists(inner, max_size=3).map(tuple),
                st.lists(st.builds(ast.Keyword, names, inner), max_size=2).map(tuple),
            ),
            st.builds(ast.Index, inner, st.lists(subscripts, min_size=1, max_size=3).map(tuple)),
            st.builds(ast.Field, inner, names),
            st.builds(ast.TupleLiteral, st.lists(inner, max_size=3).map(tuple)),
            st.builds(ast.TensorLiteral, st.lists(inner, max_size=3).map(tuple)),
            st.builds(
                ast.StructLiteral,
                st.builds(ast.Name, names),
                st.lists(st.builds(ast.FieldInit, names, inner), min_size=1, max_size=3).map(tuple),
            ),
            st.builds(
                ast.Lambda,
                st.lists(st.builds(ast.Param, names, st.none() | types()), max_size=2).map(tuple),
                st.none() | types(),
                inner,
            ),
        )

    return st.recursive(leaf, extend, max_leaves=12)


patterns = st.recursive(
    st.builds(ast.NamePattern, names),
    lambda inner: st.builds(ast.TuplePattern, st.lists(inner, min_size=1, max_size=3).map(tuple)),
    max_leaves=4,
)


def assignable() -> st.SearchStrategy:
    base = st.builds(ast.Name, names)
    return st.recursive(
        base,
        lambda inner: st.one_of(
            st.builds(ast.Field, inner, names),
            st.builds(ast.Index, inner, st.lists(expressions(), min_size=1, max_size=2).map(tuple)),
        ),
        max_leaves=3,
    )


def statements() -> st.SearchStrategy:
    simple = st.one_of(
        st.builds(ast.Let, patterns, st.none() | types(), expressions()),
        st.builds(ast.Assign, assignable(), st.sampled_from(["=", "+=", "-=", "*=", "/="]), expressions()),
        st.builds(ast.ExprStmt, expressions()),
        st.builds(ast.Return, st.none() | expressions()),
        st.builds(ast.Break),
        st.builds(ast.Continue),
    )

    def extend(inner: st.SearchStrategy) -> st.SearchStrategy:
        blocks = st.builds(ast.Block, st.lists(inner, max_size=3).map(tuple))
        return st.one_of(
            st.builds(ast.If, expressions(), blocks, st.none() | blocks),
            st.builds(ast.While, expressions(), blocks),
            st.builds(
                ast.For, patterns, st.one_of(expressions(), st.builds(ast.Range, expressions(), expressions())), blocks
            ),
        )

    return st.recursive(simple, extend, max_leaves=6)


def declarations() -> st.SearchStrategy:
    params = st.lists(st.builds(ast.Param, names, st.none() | types(), st.none() | expressions()), max_size=3)
    return st.one_of(
        st.builds(ast.Import, names, st.none() | names),
        st.builds(ast.Const, names, st.none() | types(), expressions()),
        st.builds(ast.StructDecl, names, st.lists(st.builds(ast.FieldDecl, names, types()), max_size=3).map(tuple)),
        st.builds(
            ast.FnDecl,
            names,
            params.map(tuple),
            st.none() | types(),
            st.builds(ast.Block, st.lists(statements(), max_size=4).map(tuple)),
        ),
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(declarations(), max_size=4))
def test_printed_modules_parse_back_to_the_same_tree(decls: list) -> None:
    module = ast.Module("<input>", tuple(decls))
    text = print_module(module)
    assert parse(text).decls == module.decls, text


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expressions())
def test_printed_expressions_parse_back_to_the_same_tree(expr) -> None:
    text = print_expr(expr)
    parsed = parse_repl(text).items
    assert len(parsed) == 1 and isinstance(parsed[0], ast.ExprStmt), text
    assert parsed[0].expr == expr, text


CORPUS = sorted(ROOT.glob("examples/*.dl")) + sorted(ROOT.glob("tests/programs/*.dl"))


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_printing_real_programs_is_idempotent(path: Path) -> None:
    module = parse(path.read_text(), str(path))
    once = print_module(module)
    assert parse(once).decls == module.decls
    assert print_module(parse(once)) == once


TOKENS = [
    "fn",
    "let",
    "if",
    "else",
    "while",
    "for",
    "in",
    "return",
    "struct",
    "import",
    "as",
    "const",
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    ",",
    ":",
    ";",
    "\n",
    "=",
    "+=",
    "->",
    "=>",
    "..",
    ".",
    "+",
    "-",
    "*",
    "**",
    "@",
    "<",
    "==",
    "and",
    "not",
    "x",
    "y",
    "f32",
    "1",
    "2.5",
    '"s"',
    "#c\n",
    "true",
    "_",
]


@settings(max_examples=1000, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_only_raise_diagnostics(data: bytes) -> None:
    text = data.decode("utf-8", errors="replace")
    try:
        parse(text)
    except DiagnosticError as failure:
        assert failure.diagnostics and all(d.code.startswith("E01") for d in failure.diagnostics)


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=40))
def test_token_soup_only_raises_diagnostics(tokens: list[str]) -> None:
    text = " ".join(tokens)
    for entry in (parse, parse_repl):
        try:
            entry(text)
        except DiagnosticError as failure:
            assert failure.diagnostics[0].span.line >= 1


def test_spans_point_at_the_source() -> None:
    module = parse("fn main() {\n    let h = relu(x @ w + b)\n}\n", "t.dl")
    let = module.decls[0].body.body[0]
    call = let.value
    assert (let.span.line, let.span.column, let.span.end_column) == (2, 5, 28)
    assert (call.span.line, call.span.column, call.span.end_column) == (2, 13, 28)
    product = call.args[0].lhs
    assert (product.span.column, product.span.end_column) == (18, 23)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("fn main() { let x = }", "expected an expression after `=`, found `}`"),
        ("fn main() { let x = 1 ", "this `{` is never closed"),
        ("fn main() { f(1, 2 }", "expected `,` or `)` after `2`, found `}`"),
        ("fn main() { a < b < c }", "comparisons cannot be chained"),
        ("fn main() { 3 = x }", "cannot assign to this expression with `=`"),
        ('fn main() { print("abc) }', "unterminated string literal"),
        ("fn main() { x = 1 $ 2 }", "unexpected character `$`"),
    ],
)
def test_syntax_errors_say_what_was_expected(source: str, message: str) -> None:
    with pytest.raises(DiagnosticError) as failure:
        parse(source)
    assert failure.value.diagnostics[0].message == message
