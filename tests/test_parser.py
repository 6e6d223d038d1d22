"""Parser properties: printing round-trips, and no input makes the parser raise anything but a diagnostic."""

from __future__ import annotations

import keyword as python_keywords
from functools import cache
from pathlib import Path

import pytest
from conftest import ROOT
from dl.lang import ast, habits
from dl.lang.diagnostics import DiagnosticError
from dl.lang.lalr import LayoutTerminals
from dl.lang.parse import parse, parse_repl, parse_table
from dl.lang.printer import print_expr, print_module
from dl.lang.tables import grammar_text
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lark import Lark

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


def joined_text(parts: list) -> tuple:
    """f-string parts as the parser makes them: adjacent text joined, no empty text."""
    joined: list = []
    for part in parts:
        if isinstance(part, str) and joined and isinstance(joined[-1], str):
            joined[-1] += part
        elif part != "":
            joined.append(part)
    return tuple(joined)


# An f-string's fields hold expressions without strings (a `"` would end the f-string).
field_values = st.recursive(
    st.one_of(
        st.builds(ast.Name, names),
        st.builds(ast.IntLiteral, st.integers(0, 10**6)),
        st.builds(ast.FloatLiteral, floats),
        st.builds(ast.BoolLiteral, st.booleans()),
    ),
    lambda inner: st.one_of(
        st.builds(ast.Binary, st.sampled_from(OPERATORS), inner, inner),
        st.builds(ast.Call, inner, st.lists(inner, max_size=2).map(tuple)),
        st.builds(ast.Index, inner, st.lists(inner, min_size=1, max_size=2).map(tuple)),
    ),
    max_leaves=4,
)
fstrings = st.builds(
    ast.FString,
    st.lists(
        st.one_of(
            st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=6),
            st.builds(
                ast.FormatField, field_values, st.sampled_from(["", ".4f", ">8", ",", ".2e", "05d", "^10.3", "+.1%"])
            ),
        ),
        max_size=4,
    ).map(joined_text),
)
literals = st.one_of(literals, fstrings)


def expressions() -> st.SearchStrategy:
    leaf = st.one_of(st.builds(ast.Name, names), literals)

    def extend(inner: st.SearchStrategy) -> st.SearchStrategy:
        subscripts = st.one_of(
            inner,
            st.builds(ast.Slice, st.none() | inner, st.none() | inner, st.none() | inner),
            st.builds(ast.Ellipsis),
        )
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
    "...",
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


def test_ellipsis_is_an_index_of_its_own() -> None:
    """`...` among the indices is an `ast.Ellipsis` (its span the three dots); `..` stays a range."""
    module = parse("fn main() {\n    let v = x[..., 0:2, i]\n    for k in 0..3 { }\n}\n", "t.dl")
    index = module.decls[0].body.body[0].value
    ellipsis, middle, last = index.indices
    assert isinstance(ellipsis, ast.Ellipsis) and isinstance(middle, ast.Slice) and isinstance(last, ast.Name)
    assert (ellipsis.span.line, ellipsis.span.column, ellipsis.span.end_column) == (2, 15, 18)
    assert isinstance(module.decls[0].body.body[1], ast.For)


def test_spans_point_at_the_source() -> None:
    module = parse("fn main() {\n    let h = relu(x @ w + b)\n}\n", "t.dl")
    let = module.decls[0].body.body[0]
    call = let.value
    assert (let.span.line, let.span.column, let.span.end_column) == (2, 5, 28)
    assert (call.span.line, call.span.column, call.span.end_column) == (2, 13, 28)
    product = call.args[0].lhs
    assert (product.span.column, product.span.end_column) == (18, 23)


@pytest.mark.parametrize(
    ("source", "code", "message", "line", "column"),
    [
        ("fn main() { let x = }", "E0102", "expected an expression after `=`, found `}`", 1, 21),
        ("fn main() { let x = 1 ", "E0103", "this `{` is never closed", 1, 11),
        ("fn main() { f(1, 2 }", "E0102", "expected `)` or `,` after `2`, found `}`", 1, 20),
        ("fn main() { a < b < c }", "E0105", "comparisons cannot be chained", 1, 13),
        ("fn main() { 3 = x }", "E0104", "cannot assign to this expression with `=`", 1, 13),
        ('fn main() { print("abc) }', "E0106", "unterminated string literal", 1, 19),
        ("fn main() { x = 1 $ 2 }", "E0101", "unexpected character `$`", 1, 19),
        # Inside brackets newlines vanish, so what could come next is `,` or the closer, never a new line.
        ("fn main() { let x = (1 +) }", "E0102", "expected an expression after `+`, found `)`", 1, 25),
        ("fn main() { foo(a b) }", "E0102", "expected `)` or `,` after `a`, found name `b`", 1, 19),
        ("fn main() {\n    foo(a,\n        b c)\n}", "E0102", "expected `)` or `,` after `b`, found name `c`", 3, 11),
        ("fn main() { x[1 2] }", "E0102", "expected `]` or `,` after `1`, found literal `2`", 1, 17),
        ("fn main() { x[1:2 3] }", "E0102", "expected `]` or `,` after `2`, found literal `3`", 1, 19),
        ("fn main() { let x = ... }", "E0102", "expected an expression after `=`, found `...`", 1, 21),
        ("fn main() { let t = (a, b c) }", "E0102", "expected `)` or `,` after `b`, found name `c`", 1, 27),
        ("fn main() { let x = [1,\n 2\n 3] }", "E0102", "expected `]` or `,` after `2`, found literal `3`", 3, 2),
        ("fn main() { let x = [1, 2\n}", "E0102", "expected `]` or `,` after `2`, found `}`", 2, 1),
        ("fn main() { f(1,, 2) }", "E0102", "expected an expression or `)` after `,`, found `,`", 1, 17),
        ("fn main() { f(x=) }", "E0102", "expected an expression after `=`, found `)`", 1, 17),
        ("fn main() { if (x > 1 { } }", "E0102", "expected `)` or `,` after `1`, found `{`", 1, 23),
        ("fn main() { f(fn() { } y) }", "E0102", "expected `)` or `,` after `}`, found name `y`", 1, 24),
        ("fn f(x: f32[3 4]) {}", "E0102", "expected `]` or `,` after `3`, found literal `4`", 1, 15),
        ("fn main() { let x = [1, 2", "E0103", "this `[` is never closed", 1, 21),
        # Outside brackets.
        ("fn main() { x y }", "E0102", "expected a new line or `}` after `x`, found name `y`", 1, 15),
        ("fn main() { let x: = 1 }", "E0102", "expected a type after `:`, found `=`", 1, 20),
        ("fn main() { for i 0..3 {} }", "E0102", "expected `in` after `i`, found literal `0`", 1, 19),
        ("struct S { a f32 }", "E0102", "expected `:` after `a`, found name `f32`", 1, 14),
        (
            "fn main() { if x { } else print(0) }",
            "E0102",
            "expected `if` or `{` after `else`, found name `print`",
            1,
            27,
        ),
        (
            "const N = 4\nlet x = 1",
            "E0102",
            "expected `const`, `fn`, `import` or `struct` after `4`, found `let`",
            2,
            1,
        ),
        ("import", "E0102", "expected a name after `import`, found the end of the file", 1, 7),
        # An earlier syntax error is reported before a bracket left open at the end.
        ("fn main() { let x = = 1", "E0102", "expected an expression after `=`, found `=`", 1, 21),
    ],
)
def test_syntax_errors_say_what_was_expected(source: str, code: str, message: str, line: int, column: int) -> None:
    with pytest.raises(DiagnosticError) as failure:
        parse(source)
    diagnostic = failure.value.diagnostics[0]
    assert (diagnostic.code, diagnostic.message) == (code, message)
    assert (diagnostic.span.line, diagnostic.span.column) == (line, column)


def test_a_wrong_closing_bracket_points_at_the_open_one() -> None:
    with pytest.raises(DiagnosticError) as failure:
        parse("fn main() {\n    let x = [1, 2\n}\n")
    (label,) = failure.value.diagnostics[0].secondary
    assert label.text == "this `[` is not closed"
    assert (label.span.line, label.span.column, label.span.end_column) == (2, 13, 14)


def test_string_escapes() -> None:
    (stmt,) = parse_repl(r'print("a\tb\nc\\d\"e\0")').items
    assert stmt.expr.args[0].value == 'a\tb\nc\\d"e\0'


@pytest.mark.parametrize(
    ("source", "line", "column", "help"),
    [
        ("def area(w, h):\n    return w * h\n", 1, 1, "help: DL declares a function with `fn name(params) { ... }`"),
        (
            "fn f(x: f32) -> f32 {\n    if x > 0.0 {\n        return 1.0\n"
            "    } elif x < 0.0 {\n        return 2.0\n    }\n    return 0.0\n}\n",
            4,
            12,
            "help: DL writes `elif` as `else if`",
        ),
        (
            "fn f(x: f32) -> f32 {\n    if x > 0.0:\n        return x\n    return 0.0\n}\n",
            2,
            15,
            "help: DL puts a block in braces, not after `:`: `if x > 0 { ... }`",
        ),
        (
            "fn main() {\n    let double = lambda x: x * 2.0\n}\n",
            2,
            25,
            "help: DL writes an anonymous function `fn(x) => x * 2.0`",
        ),
        (
            "class Linear:\n    pass\n",
            1,
            1,
            "help: DL declares data with `struct Name { field: type }`, and functions apart with `fn`",
        ),
        (
            "from nn import linear\n",
            1,
            1,
            "help: DL imports a module with `import name`, and names what it declares `name.item`",
        ),
        ('fn main() {\n    let s = "a"\n    print(s is "a")\n}\n', 3, 13, "help: DL compares with `==` and `!=`"),
        ("fn main() {\n    let n = 0\n    n++\n}\n", 3, 7, "help: DL has no `++`: write `n += 1`"),
        (
            "fn main() {\n    for i, x in enumerate(xs) {\n        print(i)\n    }\n}\n",
            2,
            10,
            "help: DL takes a loop's values apart in parentheses: `for (i, x) in ...`",
        ),
        ("fn main() {\n    let ys = [x * 2.0 for x in xs]\n}\n", 2, 23, habits.COMPREHENSION),
        ("fn main() {\n    let n = sum(x for x in xs)\n}\n", 2, 19, habits.COMPREHENSION),
        ('fn main() {\n    let config = {"lr": 0.1, "epochs": 3}\n}\n', 2, 18, habits.DICTIONARY),
        (
            "fn main() {\n    var total = 0.0\n}\n",
            2,
            9,
            "help: DL declares a variable with `let total = ...`, and any variable can be assigned again",
        ),
        (
            "fn main() {\n    let mut total = 0.0\n}\n",
            2,
            13,
            "help: DL declares a variable with `let total = ...`, and any variable can be assigned again",
        ),
        ('fn main() {\n    print "loss"\n}\n', 2, 11, 'help: `print` is a function: `print("loss")`'),
        ("fn main() {\n    let n = 7\n    n %= 2\n}\n", 3, 8, "help: DL has no `%=`: write `n = n % ...`"),
        (
            "fn main() {\n    let r = 0..3\n}\n",
            2,
            14,
            "help: `a..b` is a range of a `for` loop only (`for i in a..b`); `arange(a, b)` is a tensor of them",
        ),
    ],
)
def test_python_s_grammar_gets_dl_s_spelling_in_the_help(source: str, line: int, column: int, help: str) -> None:
    with pytest.raises(DiagnosticError) as failure:
        parse(source, "t.dl")
    diagnostic = failure.value.diagnostics[0]
    assert diagnostic.code == "E0102"
    assert (diagnostic.span.line, diagnostic.span.column) == (line, column)
    assert diagnostic.notes == (help,)


@pytest.mark.parametrize(
    ("operator", "column", "help"),
    [
        ("true && false", 18, "help: DL writes `&&` as `and`"),
        ("true || false", 18, "help: DL writes `||` as `or`"),
        ("!true", 13, "help: DL writes `!x` as `not x` (and `!=` compares)"),
        ("2 ^ 3", 15, "help: DL raises to a power with `**`"),
    ],
)
def test_c_s_operators_get_dl_s_spelling_in_the_help(operator: str, column: int, help: str) -> None:
    with pytest.raises(DiagnosticError) as failure:
        parse(f"fn main() {{\n    let a = {operator}\n}}\n", "t.dl")
    diagnostic = failure.value.diagnostics[0]
    assert diagnostic.code == "E0101"
    assert (diagnostic.span.line, diagnostic.span.column) == (2, column)
    assert diagnostic.notes == (help,)


def test_an_invisible_character_is_named() -> None:
    with pytest.raises(DiagnosticError) as failure:
        parse("fn main() {\n    let a = 1 \u200b+ 2\n}\n", "t.dl")
    assert failure.value.diagnostics[0].message == "unexpected character `U+200B`"


@pytest.mark.parametrize(("source", "escape", "column"), [(r'print("a\q")', "q", 9), (r'print("\n\x41")', "x", 10)])
def test_unknown_escapes_are_reported_at_the_escape(source: str, escape: str, column: int) -> None:
    with pytest.raises(DiagnosticError) as failure:
        parse_repl(source, "t.dl")
    diagnostic = failure.value.diagnostics[0]
    assert (diagnostic.code, diagnostic.message) == ("E0107", f"unknown escape `\\{escape}` in string")
    assert (diagnostic.span.line, diagnostic.span.column, diagnostic.span.end_column) == (1, column, column + 2)
    assert "`\\n`" in diagnostic.notes[0]


SCANNED = [*TOKENS, "**=", "->", "!=", ">=", "//", "%", "1e5", "3i32", "2.0f64", "ab_1", "  ", "#"]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(SCANNED), max_size=30), st.sampled_from([" ", ""]))
def test_the_scanner_agrees_with_larks_lexer(tokens: list[str], separator: str) -> None:
    """Lark's own lexer, built from the same grammar, as the reference (words may run together)."""
    text = separator.join(tokens)
    ours = [(kind, value) for kind, value, _, _ in parse_table().scanner.scan(text, "<input>")]
    assert ours == [(token.type, token.value) for token in larks_lexer().lex(text)]


@cache
def larks_lexer() -> Lark:
    return Lark(grammar_text(), parser="lalr", lexer="basic", postlex=LayoutTerminals(), start=["start", "repl_input"])
