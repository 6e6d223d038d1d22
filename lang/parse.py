"""Parsing: source text -> `Module` (or `ReplInput`), every node with its span.

`parse(source, path)` runs Lark's LALR parser over grammar/dl.lark with the
layout pass (lang/layout.py) between lexer and parser, and builds the AST
directly during parsing with `Builder`. Lark's errors never escape: they become
`DiagnosticError`s whose messages say what was expected in words.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from importlib import resources

from dl.lang import ast
from dl.lang.diagnostics import Diagnostic, DiagnosticError, Span, error
from dl.lang.layout import layout, token_span
from dl.lang.lexer import LAYOUT_ONLY, Scanner
from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedInput, UnexpectedToken, VisitError
from lark.lexer import Lexer

ASSIGNABLE = (ast.Name, ast.Field, ast.Index)
STRING_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "0": "\0"}


class Builder(Transformer):
    """Builds AST nodes from Lark's children; called by the parser as it reduces."""

    def __init__(self) -> None:
        super().__init__()
        self.path = "<input>"
        # Operands written with prefix operators, by id, so that `operator_expr`
        # can regroup `-x ** 2` as `-(x ** 2)`; a parenthesized one is a new node.
        self.prefixed_parts: dict[int, tuple[tuple[Token, ...], ast.Expr]] = {}

    # -------------------------------------------------------------- helpers
    def span(self, item: Token | object) -> Span:
        if isinstance(item, Token):
            return token_span(self.path, item)
        return item.span

    def span_of(self, children: list) -> Span:
        present = [c for c in children if c is not None]
        return self.span(present[0]).to(self.span(present[-1]))

    @staticmethod
    def nodes(children: list) -> list:
        return [c for c in children if c is not None and not isinstance(c, Token)]

    @staticmethod
    def has(children: list, kind: str) -> bool:
        return any(isinstance(c, Token) and c.type == kind for c in children)

    # -------------------------------------------------------------- top level
    def start(self, children: list) -> tuple:
        return tuple(self.nodes(children))

    repl_input = start

    def import_decl(self, children: list) -> ast.Import:
        names = [c for c in children if isinstance(c, Token) and c.type == "NAME"]
        alias = str(names[1]) if len(names) > 1 else None
        return ast.Import(str(names[0]), alias, self.span_of(children))

    def const_decl(self, children: list) -> ast.Const:
        name, annotation, value = children[1], children[3], children[-1]
        return ast.Const(str(name), annotation, value, self.span_of(children))

    def struct_decl(self, children: list) -> ast.StructDecl:
        name = children[1]
        return ast.StructDecl(str(name), tuple(self.nodes(children)), self.span_of(children), self.span(name))

    def empty_struct_decl(self, children: list) -> ast.StructDecl:
        return ast.StructDecl(str(children[1]), (), self.span_of(children), self.span(children[1]))

    def field_decl(self, children: list) -> ast.FieldDecl:
        return ast.FieldDecl(str(children[0]), children[2], self.span_of(children))

    def fn_decl(self, children: list) -> ast.FnDecl:
        name = children[1]
        params, result = self._signature(children)
        body = children[-1]
        return ast.FnDecl(str(name), params, result, body, self.span_of(children), self.span(name))

    def _signature(self, children: list) -> tuple[tuple[ast.Param, ...], ast.TypeExpr | None]:
        params = tuple(c for c in children if isinstance(c, ast.Param))
        result = None
        for position, child in enumerate(children):
            if isinstance(child, Token) and child.type == "ARROW":
                result = children[position + 1]
        return params, result

    def param(self, children: list) -> ast.Param:
        name, annotation, default = children[0], children[2], children[4]
        return ast.Param(str(name), annotation, default, self.span_of(children))

    # -------------------------------------------------------------- statements
    def block(self, children: list) -> ast.Block:
        return ast.Block(tuple(self.nodes(children)), self.span_of(children))

    def let_stmt(self, children: list) -> ast.Let:
        return ast.Let(children[1], children[3], children[-1], self.span_of(children))

    def name_pattern(self, children: list) -> ast.NamePattern:
        return ast.NamePattern(str(children[0]), self.span(children[0]))

    def tuple_pattern(self, children: list) -> ast.TuplePattern:
        return ast.TuplePattern(tuple(self.nodes(children)), self.span_of(children))

    def assign_stmt(self, children: list) -> ast.Assign:
        target, op, value = children
        check_assignable(target, str(op))
        return ast.Assign(target, str(op), value, self.span_of(children))

    def expr_stmt(self, children: list) -> ast.ExprStmt:
        return ast.ExprStmt(children[0], self.span(children[0]))

    def if_stmt(self, children: list) -> ast.If:
        return ast.If(children[1], children[2], children[4], self.span_of(children))

    def while_stmt(self, children: list) -> ast.While:
        return ast.While(children[1], children[2], self.span_of(children))

    def for_stmt(self, children: list) -> ast.For:
        return ast.For(children[1], children[3], children[4], self.span_of(children))

    def range(self, children: list) -> ast.Range:
        return ast.Range(children[0], children[2], self.span_of(children))

    def return_stmt(self, children: list) -> ast.Return:
        return ast.Return(children[1], self.span_of(children))

    def break_stmt(self, children: list) -> ast.Break:
        return ast.Break(self.span(children[0]))

    def continue_stmt(self, children: list) -> ast.Continue:
        return ast.Continue(self.span(children[0]))

    # -------------------------------------------------------------- types
    def named_type(self, children: list) -> ast.NamedType:
        return ast.NamedType(str(children[0]), None, self.span(children[0]))

    def qualified_type(self, children: list) -> ast.NamedType:
        return ast.NamedType(str(children[2]), str(children[0]), self.span_of(children))

    def tensor_type(self, children: list) -> ast.TensorTypeExpr:
        return ast.TensorTypeExpr(str(children[0]), tuple(self.nodes(children)), self.span_of(children))

    def dim(self, children: list) -> ast.Dim:
        token = children[0]
        if token.type == "INT":
            return ast.DimLiteral(int(token), self.span(token))
        return ast.DimName(str(token), self.span(token))

    def tuple_type(self, children: list) -> ast.TypeExpr:
        items = tuple(self.nodes(children))
        if len(items) == 1 and not self.has(children, "COMMA"):
            return items[0]
        return ast.TupleTypeExpr(items, self.span_of(children))

    def function_type(self, children: list) -> ast.FunctionTypeExpr:
        types = self.nodes(children)
        return ast.FunctionTypeExpr(tuple(types[:-1]), types[-1], self.span_of(children))

    # -------------------------------------------------------------- expressions
    def lambda_expr(self, children: list) -> ast.Lambda:
        params, result = self._signature(children)
        return ast.Lambda(params, result, children[-1], self.span_of(children))

    def operator_expr(self, children: list) -> ast.Expr:
        operands = children[0::2]
        items = [self.prefixed_parts.pop(id(o), ((), o)) for o in operands]
        return group_operators(items, [c for c in children[1::2]], self.path)

    def prefixed(self, children: list) -> ast.Unary:
        prefixes, operand = tuple(children[:-1]), children[-1]
        result = apply_prefixes(prefixes, operand, self.path)
        self.prefixed_parts[id(result)] = (prefixes, operand)
        return result

    def call(self, children: list) -> ast.Call:
        arguments = self.nodes(children[1:])
        positional = tuple(a for a in arguments if not isinstance(a, ast.Keyword))
        keywords = tuple(a for a in arguments if isinstance(a, ast.Keyword))
        return ast.Call(children[0], positional, keywords, self.span_of(children))

    def argument(self, children: list) -> ast.Expr:
        return children[0]

    def keyword_argument(self, children: list) -> ast.Keyword:
        return ast.Keyword(str(children[0]), children[2], self.span_of(children))

    def index(self, children: list) -> ast.Index:
        return ast.Index(children[0], tuple(self.nodes(children[1:])), self.span_of(children))

    def slice(self, children: list) -> ast.Slice:
        parts: list = [None, None, None]
        slot = 0
        for child in children:
            if isinstance(child, Token) and child.type == "COLON":
                slot += 1
            elif child is not None:
                parts[slot] = child
        return ast.Slice(parts[0], parts[1], parts[2], self.span_of(children))

    def field(self, children: list) -> ast.Field:
        return ast.Field(children[0], str(children[2]), self.span_of(children))

    def struct_literal(self, children: list) -> ast.StructLiteral:
        return ast.StructLiteral(children[0], tuple(self.nodes(children[1:])), self.span_of(children))

    def field_init(self, children: list) -> ast.FieldInit:
        return ast.FieldInit(str(children[0]), children[2], self.span_of(children))

    def name(self, children: list) -> ast.Name:
        return ast.Name(str(children[0]), self.span(children[0]))

    def int_literal(self, children: list) -> ast.IntLiteral:
        text = str(children[0])
        digits, suffix = (text[:-3], text[-3:]) if text.endswith(("i32", "i64")) else (text, None)
        return ast.IntLiteral(int(digits), suffix, self.span(children[0]))

    def float_literal(self, children: list) -> ast.FloatLiteral:
        text = str(children[0])
        digits, suffix = (text[:-3], text[-3:]) if text.endswith(("f32", "f64")) else (text, None)
        return ast.FloatLiteral(float(digits), suffix, self.span(children[0]))

    def string_literal(self, children: list) -> ast.StringLiteral:
        return ast.StringLiteral(unescape(str(children[0])[1:-1]), self.span(children[0]))

    def bool_literal(self, children: list) -> ast.BoolLiteral:
        return ast.BoolLiteral(children[0].type == "TRUE", self.span(children[0]))

    def paren(self, children: list) -> ast.Expr:
        return replace(children[1], span=self.span_of(children))

    def tuple_literal(self, children: list) -> ast.TupleLiteral:
        return ast.TupleLiteral(tuple(self.nodes(children)), self.span_of(children))

    def tensor_literal(self, children: list) -> ast.TensorLiteral:
        return ast.TensorLiteral(tuple(self.nodes(children)), self.span_of(children))


# Binding powers: (left, right) for infix operators; prefix operators bind their
# operand at their own power. Higher binds tighter.
INFIX_POWER = {
    "or": (1, 2),
    "and": (2, 3),
    "==": (4, 5),
    "!=": (4, 5),
    "<": (4, 5),
    "<=": (4, 5),
    ">": (4, 5),
    ">=": (4, 5),
    "+": (5, 6),
    "-": (5, 6),
    "*": (6, 7),
    "/": (6, 7),
    "//": (6, 7),
    "%": (6, 7),
    "@": (7, 8),
    "**": (10, 9),
}
PREFIX_POWER = {"not": 3, "-": 9}
COMPARISONS = frozenset({"==", "!=", "<", "<=", ">", ">="})


def apply_prefixes(prefixes: tuple[Token, ...], operand: ast.Expr, path: str) -> ast.Expr:
    for prefix in reversed(prefixes):
        operand = ast.Unary(str(prefix), operand, token_span(path, prefix).to(operand.span))
    return operand


def group_operators(items: list, operators: list[Token], path: str) -> ast.Expr:
    """Precedence climbing over `operand (operator operand)*`; operands may carry prefixes."""
    position = 0

    def climb(min_power: int, prefixes: tuple[Token, ...] = ()) -> ast.Expr:
        nonlocal position
        if prefixes:
            first, rest = prefixes[0], prefixes[1:]
            operand = climb(PREFIX_POWER[str(first)], rest)
            lhs = ast.Unary(str(first), operand, token_span(path, first).to(operand.span))
        else:
            lhs = items[position][1]
        compared = False
        while position < len(operators):
            op = str(operators[position])
            left, right = INFIX_POWER[op]
            if left < min_power:
                break
            if op in COMPARISONS:
                if compared:
                    raise DiagnosticError(
                        error(
                            "E0105",
                            "comparisons cannot be chained",
                            lhs.span.to(items[position + 1][1].span),
                            f"`{operators[position - 1]}` followed by `{op}`",
                            notes=("help: compare twice and join with `and`: `a < b and b < c`",),
                        )
                    )
                compared = True
            else:
                compared = False
            position += 1
            rhs = climb(right, items[position][0])
            lhs = ast.Binary(op, lhs, rhs, lhs.span.to(rhs.span))
        return lhs

    return climb(0, items[0][0])


def unescape(body: str) -> str:
    out = []
    chars = iter(body)
    for char in chars:
        out.append(STRING_ESCAPES.get(next(chars, ""), "") if char == "\\" else char)
    return "".join(out)


def check_assignable(target: ast.Expr, op: str) -> None:
    """Only names, fields, indexings and (for `=`) tuples of those can be assigned."""
    if isinstance(target, ast.TupleLiteral) and op == "=":
        for item in target.items:
            check_assignable(item, op)
        return
    base = target
    while isinstance(base, (ast.Field, ast.Index)):
        base = base.target
    if isinstance(target, ASSIGNABLE) and isinstance(base, ast.Name):
        return
    raise DiagnosticError(
        error(
            "E0104",
            f"cannot assign to this expression with `{op}`",
            target.span,
            "not a name, field or indexed name",
            notes=("help: to bind a new name, use `let name = ...`",),
        )
    )


# ---------------------------------------------------------------------- the parser


class DLLexer(Lexer):
    """Lark's lexer slot: the one-regex scanner (lang/lexer.py)."""

    path = "<input>"

    def __init__(self, lexer_conf) -> None:
        self.scanner = Scanner(list(lexer_conf.terminals), list(lexer_conf.ignore))

    def lex(self, text: str) -> list[Token]:
        return self.scanner.scan(text, DLLexer.path)


class DLLayout:
    """Lark's post-lexer slot: the layout pass (lang/layout.py)."""

    always_accept = LAYOUT_ONLY

    def process(self, stream):
        return layout(list(stream), DLLexer.path)


_GRAMMAR = resources.files("dl.grammar").joinpath("dl.lark").read_text()
_builder = Builder()
_lock = threading.Lock()
_parser = Lark(
    _GRAMMAR,
    parser="lalr",
    lexer=DLLexer,
    start=["start", "repl_input"],
    postlex=DLLayout(),
    transformer=_builder,
    maybe_placeholders=True,
)


def parse(source: str, path: str = "<input>") -> ast.Module:
    """Parse a `.dl` file. Raises `DiagnosticError` for a syntax error."""
    return ast.Module(path, _run(source, path, "start"))


def parse_repl(source: str, path: str = "<repl>") -> ast.ReplInput:
    """Parse one REPL entry: declarations and statements mixed."""
    return ast.ReplInput(_run(source, path, "repl_input"))


def _run(source: str, path: str, start: str) -> tuple:
    with _lock:
        DLLexer.path = path
        _builder.path = path
        _builder.prefixed_parts.clear()
        try:
            return _parser.parse(source, start=start)
        except VisitError as wrapped:
            raise wrapped.orig_exc from None
        except UnexpectedInput as problem:
            raise DiagnosticError(syntax_diagnostic(problem, source, path)) from None


# ---------------------------------------------------------------------- syntax errors

EXPRESSION_STARTS = frozenset({"NAME", "INT", "FLOAT", "STRING", "TRUE", "FALSE", "LPAR", "LSQB", "MINUS", "NOT", "FN"})
OPERATORS = frozenset({"PLUS", "MINUS", "STAR", "SLASH", "DSLASH", "PERCENT", "AT", "POW", "COMPARE", "AND", "OR"})
SHOWN = {
    "LPAR": "(",
    "RPAR": ")",
    "LSQB": "[",
    "RSQB": "]",
    "LBRACE": "{",
    "RBRACE": "}",
    "STRUCT_LBRACE": "{",
    "COMMA": ",",
    "COLON": ":",
    "DOT": ".",
    "DOTDOT": "..",
    "ARROW": "->",
    "FATARROW": "=>",
    "ASSIGN": "=",
    "AUGASSIGN": "+=",
    "COMPARE": "==",
    "POW": "**",
    "PLUS": "+",
    "MINUS": "-",
    "STAR": "*",
    "SLASH": "/",
    "DSLASH": "//",
    "PERCENT": "%",
    "AT": "@",
}


def describe_expected(expected: set[str]) -> str:
    words = []
    if expected & EXPRESSION_STARTS and "NAME" in expected and "INT" in expected:
        words.append("an expression")
        expected = expected - EXPRESSION_STARTS
    elif "NAME" in expected:
        words.append("a name")
        expected = expected - {"NAME"}
    if len(expected & OPERATORS) > 2:
        words.append("an operator")
        expected = expected - OPERATORS
    if "SEP" in expected:
        words.append("a new line")
    for kind in sorted(expected):
        if kind in SHOWN:
            words.append(f"`{SHOWN[kind]}`")
        elif kind not in {"SEP", "$END"} and kind.isupper() and kind.isalpha():
            words.append(f"`{kind.lower()}`")
    words = words[:6]
    if not words:
        return "something else"
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def describe_found(token: Token) -> str:
    if token.type == "$END":
        return "the end of the file"
    if token.type == "SEP":
        return "`;`" if token.value == ";" else "the end of the line"
    if token.type == "NAME":
        return f"name `{token.value}`"
    if token.type in {"INT", "FLOAT", "STRING"}:
        return f"literal `{token.value}`"
    return f"`{token.value}`"


def syntax_diagnostic(problem: UnexpectedInput, source: str, path: str) -> Diagnostic:
    token = problem.token if isinstance(problem, UnexpectedToken) else None
    expected = set(getattr(problem, "expected", ()) or ())
    if token is None or token.type == "$END" or token.line is None:
        span = end_of_file_span(source, path)
        found = "the end of the file"
    else:
        span = token_span(path, token)
        if token.type == "SEP" and token.value != ";":
            span = Span(path, token.line, token.column, token.line, token.column + 1)
        found = describe_found(token)
    previous = previous_token_text(source, span)
    after = f" after `{previous}`" if previous else ""
    message = f"expected {describe_expected(expected)}{after}, found {found}"
    return error("E0102", message, span, f"unexpected {found.removeprefix('the ')}")


def end_of_file_span(source: str, path: str) -> Span:
    lines = source.splitlines() or [""]
    line = len(lines)
    column = len(lines[-1]) + 1
    return Span(path, line, column, line, column + 1)


def previous_token_text(source: str, span: Span) -> str:
    """The last non-blank, non-comment word before `span`, for "after `=`" in messages."""
    lines = source.splitlines()
    row, column = span.line - 1, span.column - 1
    while row >= 0:
        text = lines[row][:column] if row < len(lines) else ""
        text = text.split("#", 1)[0].rstrip() if '"' not in text else text.rstrip()
        if text:
            return last_word(text)
        row -= 1
        column = None
    return ""


def last_word(text: str) -> str:
    end = len(text)
    if text[-1].isalnum() or text[-1] == "_":
        start = end
        while start > 0 and (text[start - 1].isalnum() or text[start - 1] in "_."):
            start -= 1
        return text[start:end]
    for operator in ("**", "//", "->", "=>", "==", "!=", "<=", ">=", "+=", "-=", "*=", "/=", ".."):
        if text.endswith(operator):
            return operator
    return text[-1]
