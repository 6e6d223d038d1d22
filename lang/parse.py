"""Parsing: source text -> `Module` (or `ReplInput`), every node with its span.

`parse(source, path)` runs the lexer (lang/lexer.py), the layout pass
(lang/layout.py) and an LALR(1) parser over grammar/dl.lark, and builds the AST
during parsing: each grammar rule, as it is reduced, calls the `Builder` method
of the same name with that rule's children (shaped as Lark shapes them for a
`Transformer`: `_rule`s inlined, `?rule`s with one child passed through, `None`
for an absent `[optional]`). No parse tree is built.

Lark reads the grammar and computes its LALR(1) table (lang/lalr.py), which is
kept in DL's cache directory between runs (lang/tables.py) and read once per
process, on the first parse. The table is driven by the short loop in
`ParseTable.run` rather than by `Lark.parse`, whose per-token and per-rule
wrappers cost more than the rest of parsing together (bench/README.md).

Mistakes never escape as Python exceptions: they become `DiagnosticError`s
whose messages say, in words, what could come next and what was found. Nothing
here recurses, so input of any depth parses; a tree that nests deeper than the
passes after the parser are guaranteed to walk is refused (lang/nesting.py).
"""

from __future__ import annotations

import operator
import re
import threading
from collections.abc import Callable
from dataclasses import replace
from operator import itemgetter
from typing import NamedTuple, TypeVar

from dl.lang import ast, tables
from dl.lang.cache import cache_directory
from dl.lang.diagnostics import UNKNOWN_SPAN, Diagnostic, DiagnosticError, Label, Span, error
from dl.lang.layout import CLOSERS, OPENERS, layout, never_closed, token_span
from dl.lang.lexer import FStringError, Scanner, Token, fstring_pieces
from dl.lang.literals import integer_value
from dl.lang.nesting import too_deep
from dl.lang.tables import Rule, Tables

ASSIGNABLE = (ast.Name, ast.Field, ast.Index)
T = TypeVar("T")
STRING_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "0": "\0"}


def span_between(path: str, first: Token | object, last: Token | object) -> Span:
    """The span from the start of `first` to the end of `last`, each a token or a node."""
    if type(first) is tuple:
        line, column = first[2], first[3]
    else:
        line, column = first.span.line, first.span.column
    if type(last) is tuple:
        return Span(path, line, column, last[2], last[3] + len(last[1]))
    end = last.span
    return Span(path, line, column, end.end_line, end.end_column)


def struct_sizes(children: list) -> tuple[ast.DimName, ...]:
    """The size names of a struct declaration's `[IN, OUT]` (a list among its children), if any."""
    return next((tuple(c) for c in children if type(c) is list), ())


def nodes(children: list) -> list:
    """The children that are nodes: not tokens, not absent optionals."""
    return [c for c in children if c is not None and type(c) is not tuple]


class Builder:
    """Builds AST nodes from a rule's children; one method per grammar rule (or alias)."""

    def __init__(self) -> None:
        self.path = "<input>"

    def span(self, token: Token) -> Span:
        return token_span(self.path, token)

    # -------------------------------------------------------------- top level
    def start(self, children: list) -> tuple:
        return tuple(nodes(children))

    repl_input = start

    def import_decl(self, children: list) -> ast.Import:
        _, name, _, alias = children
        last = alias or name
        return ast.Import(name[1], alias and alias[1], span_between(self.path, children[0], last))

    def const_decl(self, children: list) -> ast.Const:
        _, name, _, annotation, _, value = children
        return ast.Const(name[1], annotation, value, span_between(self.path, children[0], value))

    def struct_decl(self, children: list) -> ast.StructDecl:
        name = children[1]
        span = span_between(self.path, children[0], children[-1])
        fields = tuple(node for node in nodes(children) if isinstance(node, ast.FieldDecl))
        return ast.StructDecl(name[1], fields, span, self.span(name), struct_sizes(children))

    def empty_struct_decl(self, children: list) -> ast.StructDecl:
        name = children[1]
        span = span_between(self.path, children[0], children[-1])
        return ast.StructDecl(name[1], (), span, self.span(name), struct_sizes(children))

    def struct_sizes(self, children: list) -> list[ast.DimName]:
        names = [token for token in children if type(token) is tuple and token[0] == "NAME"]
        return [ast.DimName(name[1], self.span(name)) for name in names]

    def field_decl(self, children: list) -> ast.FieldDecl:
        name, _, type_expr = children
        return ast.FieldDecl(name[1], type_expr, span_between(self.path, name, type_expr))

    def fn_decl(self, children: list) -> ast.FnDecl:
        name, body = children[1], children[-1]
        params, result = signature(children)
        span = span_between(self.path, children[0], body)
        return ast.FnDecl(name[1], params, result, body, span, self.span(name))

    def param(self, children: list) -> ast.Param:
        name, _, annotation, _, default = children
        last = default or annotation or name
        return ast.Param(name[1], annotation, default, span_between(self.path, name, last))

    # -------------------------------------------------------------- statements
    def block(self, children: list) -> ast.Block:
        return ast.Block(tuple(nodes(children)), span_between(self.path, children[0], children[-1]))

    def let_stmt(self, children: list) -> ast.Let:
        _, pattern, _, annotation, _, value = children
        return ast.Let(pattern, annotation, value, span_between(self.path, children[0], value))

    def name_pattern(self, children: list) -> ast.NamePattern:
        _, name, line, column = children[0]
        return ast.NamePattern(name, Span(self.path, line, column, line, column + len(name)))

    def tuple_pattern(self, children: list) -> ast.TuplePattern:
        return ast.TuplePattern(tuple(nodes(children)), span_between(self.path, children[0], children[-1]))

    def assign_stmt(self, children: list) -> ast.Assign:
        target, op, value = children
        check_assignable(target, op[1])
        return ast.Assign(target, op[1], value, span_between(self.path, target, value))

    def expr_stmt(self, children: list) -> ast.ExprStmt:
        expr = children[0]
        return ast.ExprStmt(expr, expr.span)

    def if_stmt(self, children: list) -> ast.If:
        _, cond, then, _, orelse = children
        return ast.If(cond, then, orelse, span_between(self.path, children[0], orelse or then))

    def while_stmt(self, children: list) -> ast.While:
        _, cond, body = children
        return ast.While(cond, body, span_between(self.path, children[0], body))

    def for_stmt(self, children: list) -> ast.For:
        _, pattern, _, iterable, body = children
        return ast.For(pattern, iterable, body, span_between(self.path, children[0], body))

    def range(self, children: list) -> ast.Range:
        start, _, stop = children
        return ast.Range(start, stop, span_between(self.path, start, stop))

    def return_stmt(self, children: list) -> ast.Return:
        keyword, value = children
        return ast.Return(value, span_between(self.path, keyword, value or keyword))

    def break_stmt(self, children: list) -> ast.Break:
        return ast.Break(self.span(children[0]))

    def continue_stmt(self, children: list) -> ast.Continue:
        return ast.Continue(self.span(children[0]))

    # -------------------------------------------------------------- types
    def named_type(self, children: list) -> ast.NamedType:
        _, name, line, column = children[0]
        return ast.NamedType(name, None, Span(self.path, line, column, line, column + len(name)))

    def qualified_type(self, children: list) -> ast.NamedType:
        module, _, name = children
        return ast.NamedType(name[1], module[1], span_between(self.path, module, name))

    def tensor_type(self, children: list) -> ast.TensorTypeExpr:
        dims = tuple(nodes(children))
        return ast.TensorTypeExpr(children[0][1], dims, span_between(self.path, children[0], children[-1]))

    def qualified_tensor_type(self, children: list) -> ast.TensorTypeExpr:
        module, _, name = children[:3]
        dims = tuple(nodes(children[3:]))
        return ast.TensorTypeExpr(name[1], dims, span_between(self.path, module, children[-1]), module[1])

    def dim_leaf(self, children: list) -> ast.Dim:
        kind, text, line, column = children[0]
        span = Span(self.path, line, column, line, column + len(text))
        if kind == "NAME":
            return ast.DimName(text, span)
        digits = text[:-3] if text.endswith(("i32", "i64")) else text
        return ast.DimLiteral(checked(integer_value(digits, "i64", span)), span)

    def dim_binary(self, children: list) -> ast.DimBinary:
        lhs, (_, op, _, _), rhs = children
        return ast.DimBinary(op, lhs, rhs, lhs.span.to(rhs.span))

    def dim_group(self, children: list) -> ast.Dim:
        return children[1]

    def tuple_type(self, children: list) -> ast.TypeExpr:
        items = tuple(nodes(children))
        if len(items) == 1 and not any(type(c) is tuple and c[0] == "COMMA" for c in children):
            return items[0]
        return ast.TupleTypeExpr(items, span_between(self.path, children[0], children[-1]))

    def function_type(self, children: list) -> ast.FunctionTypeExpr:
        types = nodes(children)
        return ast.FunctionTypeExpr(tuple(types[:-1]), types[-1], span_between(self.path, children[0], children[-1]))

    # -------------------------------------------------------------- expressions
    def lambda_expr(self, children: list) -> ast.Lambda:
        params, result = signature(children)
        body = children[-1]
        return ast.Lambda(params, result, body, span_between(self.path, children[0], body))

    def operator_expr(self, children: list) -> ast.Expr:
        return group_operators(children, self.path)

    def call(self, children: list) -> ast.Call:
        func = children[0]
        positional, keywords = [], []
        for argument in children[2:-1]:
            if type(argument) is ast.Keyword:
                keywords.append(argument)
            elif argument is not None and type(argument) is not tuple:
                positional.append(argument)
        return ast.Call(func, tuple(positional), tuple(keywords), span_between(self.path, func, children[-1]))

    def keyword_argument(self, children: list) -> ast.Keyword:
        name, _, value = children
        return ast.Keyword(name[1], value, span_between(self.path, name, value))

    def index(self, children: list) -> ast.Index:
        target = children[0]
        indices = tuple(nodes(children[1:]))
        return ast.Index(target, indices, span_between(self.path, target, children[-1]))

    def slice(self, children: list) -> ast.Slice:
        parts: list = [None, None, None]
        slot = 0
        for child in children:
            if type(child) is tuple:
                slot += 1
            elif child is not None:
                parts[slot] = child
        present = [c for c in children if c is not None]
        return ast.Slice(parts[0], parts[1], parts[2], span_between(self.path, present[0], present[-1]))

    def ellipsis(self, children: list) -> ast.Ellipsis:
        (token,) = children
        return ast.Ellipsis(span_between(self.path, token, token))

    def field(self, children: list) -> ast.Field:
        target, _, name = children
        return ast.Field(target, name[1], span_between(self.path, target, name))

    def struct_literal(self, children: list) -> ast.StructLiteral:
        type_expr = children[0]
        fields = tuple(nodes(children[1:]))
        return ast.StructLiteral(type_expr, fields, span_between(self.path, type_expr, children[-1]))

    def field_init(self, children: list) -> ast.FieldInit:
        name, _, value = children
        return ast.FieldInit(name[1], value, span_between(self.path, name, value))

    def name(self, children: list) -> ast.Name:
        _, name, line, column = children[0]
        return ast.Name(name, Span(self.path, line, column, line, column + len(name)))

    def int_literal(self, children: list) -> ast.IntLiteral:
        _, text, line, column = children[0]
        span = Span(self.path, line, column, line, column + len(text))
        dtype = text[-3:] if text.endswith(("i32", "i64")) else None
        digits = text[:-3] if dtype else text
        return ast.IntLiteral(checked(integer_value(digits, dtype, span)), dtype, span)

    def float_literal(self, children: list) -> ast.FloatLiteral:
        _, text, line, column = children[0]
        span = Span(self.path, line, column, line, column + len(text))
        dtype = text[-3:] if text.endswith(("f32", "f64")) else None
        number = text[:-3] if dtype else text
        return ast.FloatLiteral(float(number), dtype, span)  # beyond its dtype, it is infinity

    def string_literal(self, children: list) -> ast.StringLiteral:
        token = children[0]
        return ast.StringLiteral(unescape(token, self.path), self.span(token))

    def fstring(self, children: list) -> ast.FString:
        return fstring(children[0], self.path)

    def embedded_expr(self, children: list) -> ast.Expr:
        return children[0]

    def bool_literal(self, children: list) -> ast.BoolLiteral:
        token = children[0]
        return ast.BoolLiteral(token[0] == "TRUE", self.span(token))

    def paren(self, children: list) -> ast.Expr:
        return replace(children[1], span=span_between(self.path, children[0], children[-1]))

    def tuple_literal(self, children: list) -> ast.TupleLiteral:
        return ast.TupleLiteral(tuple(nodes(children)), span_between(self.path, children[0], children[-1]))

    def tensor_literal(self, children: list) -> ast.TensorLiteral:
        return ast.TensorLiteral(tuple(nodes(children)), span_between(self.path, children[0], children[-1]))


def checked(value: T | Diagnostic) -> T:
    """A literal's value; raises its diagnostic when it has one instead."""
    if isinstance(value, Diagnostic):
        raise DiagnosticError(value)
    return value


def signature(children: list) -> tuple[tuple[ast.Param, ...], ast.TypeExpr | None]:
    """The parameters and result type of a `fn` declaration or lambda."""
    params = tuple(c for c in children if type(c) is ast.Param)
    result = None
    for position, child in enumerate(children):
        if type(child) is tuple and child[0] == "ARROW":
            result = children[position + 1]
    return params, result


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
# what each comparison computes of two numbers known before running (a branch decided when compiling, or in a
# derivative written in place)
COMPARE = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def group_operators(sequence: list, path: str) -> ast.Expr:
    """Group `prefix* operand (operator prefix* operand)*` (tokens and nodes) by binding power.

    Shunting-yard rather than recursive precedence climbing, so that a long chain
    (`- - - x`, `a ** b ** c ...`) cannot exhaust Python's stack."""
    if len(sequence) == 3 and type(sequence[0]) is not tuple:  # `a + b`, the most common case
        lhs, op, rhs = sequence
        return ast.Binary(op[1], lhs, rhs, span_between(path, lhs, rhs))
    operands: list[ast.Expr] = []
    waiting: list[tuple[int, Token, bool]] = []  # operators: (right binding power, token, is prefix)
    expect_operand = True
    for position, child in enumerate(sequence):
        if type(child) is not tuple:
            operands.append(child)
            expect_operand = False
        elif expect_operand:
            waiting.append((PREFIX_POWER[child[1]], child, True))
        else:
            left, right = INFIX_POWER[child[1]]
            compared = None
            while waiting and waiting[-1][0] > left:
                _, token, prefix = waiting.pop()
                apply_operator(token, prefix, operands, path)
                compared = token[1] if not prefix and token[1] in COMPARISONS else compared
            if compared and child[1] in COMPARISONS:
                following = next(c for c in sequence[position + 1 :] if type(c) is not tuple)
                raise DiagnosticError(chained_comparison(operands[-1], compared, child[1], following))
            waiting.append((right, child, False))
            expect_operand = True
    while waiting:
        _, token, prefix = waiting.pop()
        apply_operator(token, prefix, operands, path)
    return operands[0]


def apply_operator(token: Token, prefix: bool, operands: list[ast.Expr], path: str) -> None:
    """Replace the operand(s) on top of `operands` by the operator applied to them."""
    operand = operands.pop()
    if prefix:
        operands.append(ast.Unary(token[1], operand, span_between(path, token, operand)))
    else:
        lhs = operands.pop()
        operands.append(ast.Binary(token[1], lhs, operand, span_between(path, lhs, operand)))


def chained_comparison(lhs: ast.Expr, first: str, second: str, rhs: ast.Expr) -> Diagnostic:
    return error(
        "E0105",
        "comparisons cannot be chained",
        lhs.span.to(rhs.span),
        f"`{first}` followed by `{second}`",
        notes=("help: compare twice and join with `and`: `a < b and b < c`",),
    )


def unescape(token: Token, path: str) -> str:
    """The value of a string literal token: quotes removed, escapes replaced."""
    _, text, line, column = token
    body = text[1:-1]
    if "\\" not in body:
        return body
    out = []
    position = 0
    while position < len(body):
        char = body[position]
        if char == "\\":
            escape = body[position + 1]
            if escape not in STRING_ESCAPES:
                raise DiagnosticError(
                    unknown_escape(escape, Span(path, line, column + 1 + position, line, column + 3 + position))
                )
            out.append(STRING_ESCAPES[escape])
            position += 2
        else:
            out.append(char)
            position += 1
    return "".join(out)


def fstring(token: Token, path: str) -> ast.FString:
    """An f-string token as an `FString`: its literal text unescaped (`{{` and `}}` as braces), and each
    field's expression parsed where it stands in the line, so that its spans are exact."""
    _, text, line, column = token
    try:
        pieces = fstring_pieces(text)
    except FStringError as problem:
        span = Span(path, line, column + problem.start, line, column + problem.stop)
        raise DiagnosticError(
            error("E0108", str(problem), span, problem.label, notes=(f"help: {problem.help}",))
        ) from None
    parts: list[str | ast.FormatField] = []
    for index, (kind, start, stop) in enumerate(pieces):
        if kind == "text":
            piece = (token[0], '"' + text[start:stop] + '"', line, column + start - 1)
            parts.append(unescape(piece, path).replace("{{", "{").replace("}}", "}"))
        elif kind == "field":
            value = _run(text[start:stop], path, "embedded_expr", line, column + start)
            spec = pieces[index + 1] if index + 1 < len(pieces) and pieces[index + 1][0] == "spec" else None
            closing = spec[2] if spec else stop  # the offset of the field's `}`
            parts.append(
                ast.FormatField(
                    value,
                    text[spec[1] : spec[2]] if spec else "",
                    Span(path, line, column + start - 1, line, column + closing + 1),
                    Span(path, line, column + spec[1], line, column + spec[2]) if spec else UNKNOWN_SPAN,
                )
            )
    return ast.FString(tuple(parts), token_span(path, token))


def unknown_escape(escape: str, span: Span) -> Diagnostic:
    supported = ", ".join(f"`\\{e}`" for e in STRING_ESCAPES)
    return error(
        "E0107",
        f"unknown escape `\\{escape}` in string",
        span,
        "not a DL escape",
        notes=(f"the escapes are {supported}; write `\\\\` for a backslash",),
    )


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


# ---------------------------------------------------------------------- the parse table

Build = Callable[[list], object]


class UnexpectedToken(Exception):
    """Raised by `ParseTable.run`: the grammar allows no `token` where it is; `parse` reports it."""

    def __init__(self, token: Token) -> None:
        super().__init__(token[0])
        self.token = token


class ParseTable:
    """Lark's LALR(1) table for grammar/dl.lark (lang/tables.py), in the form `run` reads fastest.

    `states[s]` maps a terminal to an action (a state to shift to, or `~r` to
    reduce by `reductions[r]`) and a nonterminal to the state to go to after
    reducing to it. A reduction is `(size, nonterminal, build)`, where `build`
    makes the value from the rule's children, or is None for a rule of one
    child whose value is that child.
    """

    def __init__(self, grammar: Tables, builder: Builder) -> None:
        self.states = grammar.states
        self.start_states = grammar.start_states
        self.end_states = frozenset(grammar.end_states)
        self.terminals = sorted({symbol for actions in self.states for symbol in actions if symbol.isupper()})
        pass_through = pass_through_rules(grammar.rules)
        self.reductions = [reduction(rule, builder, pass_through) for rule in grammar.rules]
        self.scanner = Scanner(list(grammar.terminals), list(grammar.ignore))

    def run(self, tokens: list[Token], start: str) -> object:
        """Parse `tokens` (ending with a `$END` token) from the rule `start`; returns its value."""
        states, reductions, end_states = self.states, self.reductions, self.end_states
        stack = [self.start_states[start]]
        values: list = []
        state = stack[0]
        for token in tokens:
            kind = token[0]
            while True:
                action = states[state].get(kind)
                if action is None:
                    raise UnexpectedToken(token)
                if action >= 0:
                    stack.append(action)
                    values.append(token)
                    state = action
                    break
                size, origin, build = reductions[~action]
                if build is None:
                    state = states[stack[-2]][origin]
                    stack[-1] = state
                    continue
                if size:
                    children = values[-size:]
                    del values[-size:]
                    del stack[-size:]
                else:
                    children = []
                values.append(build(children))
                state = states[stack[-1]][origin]
                if state in end_states:  # `start` reduced, which only `$END` lets happen
                    return values[-1]
                stack.append(state)
        raise AssertionError("the token list did not end with `$END`")

    def accepts(self, stack: list[int], kind: str) -> bool:
        """Whether a token of `kind` could come next, after the tokens that built `stack`."""
        stack = list(stack)
        while True:
            action = self.states[stack[-1]].get(kind)
            if action is None:
                return False
            if action >= 0:
                return True
            size, origin, _ = self.reductions[~action]
            if size:
                del stack[-size:]
            state = self.states[stack[-1]][origin]
            if state in self.end_states:
                return True
            stack.append(state)

    def stack_after(self, tokens: list[Token], start: str) -> list[int]:
        """The state stack after shifting all of `tokens` (which must parse), without building values."""
        stack = [self.start_states[start]]
        for token in tokens:
            while True:
                action = self.states[stack[-1]][token[0]]
                if action >= 0:
                    stack.append(action)
                    break
                size, origin, _ = self.reductions[~action]
                del stack[len(stack) - size :]
                stack.append(self.states[stack[-1]][origin])
        return stack


# ---------------------------------------------------------------------- tree shaping


def pass_through_rules(rules: tuple[Rule, ...]) -> frozenset[str]:
    """Inlined `_rule`s whose every alternative is one child: their value is that child, not spliced."""
    by_name: dict[str, list[Rule]] = {}
    for rule in rules:
        by_name.setdefault(rule.origin, []).append(rule)
    return frozenset(
        name
        for name, alternatives in by_name.items()
        if name.startswith("_")
        and all(len(r.expansion) == 1 and not r.empty_indices for r in alternatives)
        and not any(not r.expansion[0].is_term and r.expansion[0].name.startswith("_") for r in alternatives)
    )


def reduction(rule: Rule, builder: Builder, pass_through: frozenset[str]) -> tuple[int, str, Build | None]:
    """How `ParseTable.run` reduces by `rule`: Lark's tree shaping, then the builder method."""
    size, origin = len(rule.expansion), rule.origin
    plan = shaping_plan(rule, pass_through)
    if origin in pass_through or (rule.expand1 and not rule.alias and plan == [(0, False)] and size == 1):
        return size, origin, None
    if origin.startswith("_"):  # inlined into its parent: the value is the list of shaped children
        return size, origin, shaped(plan, size, None)
    method = getattr(builder, rule.alias or origin, None)
    if method is None:
        raise AssertionError(f"internal error: no builder for grammar rule `{rule.alias or origin}`")
    if rule.expand1 and not rule.alias:
        method = single_child_or(method)
    return size, origin, shaped(plan, size, method)


def single_child_or(build: Build) -> Build:
    """What a `?rule` does: one (shaped) child is passed through; more are built into a node."""

    def build_unless_single(children: list) -> object:
        return children[0] if len(children) == 1 else build(children)

    return build_unless_single


def shaping_plan(rule: Rule, pass_through: frozenset[str]) -> list[tuple[int, bool] | None]:
    """The shaped children of `rule`: (position, splice it) for each kept child, None for an absent optional."""
    plan: list[tuple[int, bool] | None] = []
    positions = iter(range(len(rule.expansion)))
    for absent in rule.empty_indices or [False] * len(rule.expansion):
        if absent:
            plan.append(None)
            continue
        position = next(positions)
        symbol = rule.expansion[position]
        if symbol.filter_out and not rule.keep_all_tokens:
            continue
        inlined = not symbol.is_term and symbol.name.startswith("_") and symbol.name not in pass_through
        plan.append((position, inlined))
    return plan


def shaped(plan: list[tuple[int, bool] | None], size: int, make: Build | None) -> Build:
    """`make` (a builder method) of the children shaped by `plan`, or the shaped list itself when `make` is None.

    The common shapes get functions of their own: a rule's children unchanged, a list
    rule extending itself (`items: items "," item`) and absent optionals filled with
    None by one `itemgetter`."""
    if plan == [(position, False) for position in range(size)]:
        return make or list
    if size > 1 and plan == [(0, True)] + [(position, False) for position in range(1, size)]:

        def extend_first(children: list) -> object:
            head = children[0]
            head.extend(children[1:])
            return head if make is None else make(head)

        return extend_first
    if len(plan) > 1 and not any(step and step[1] for step in plan):
        pick = itemgetter(*(-1 if step is None else step[0] for step in plan))

        def fill(children: list) -> object:
            children.append(None)  # what -1 picks: an absent optional
            return list(pick(children)) if make is None else make(pick(children))

        return fill

    def shape(children: list) -> object:
        out: list = []
        for step in plan:
            if step is None:
                out.append(None)
            elif step[1]:
                out.extend(children[step[0]])
            else:
                out.append(children[step[0]])
        return out if make is None else make(out)

    return shape


# ---------------------------------------------------------------------- entry points

_builder = Builder()
_lock = threading.RLock()  # re-entered: an f-string's fields are parsed while the string is built
_table: ParseTable | None = None


def parse_table() -> ParseTable:
    """The parse table, read on first use (from the cache, or computed by Lark: lang/tables.py)."""
    global _table
    with _lock:
        if _table is None:
            _table = ParseTable(tables.load(cache_directory()), _builder)
        return _table


def parse(source: str, path: str = "<input>") -> ast.Module:
    """Parse a `.dl` file. Raises `DiagnosticError` for a syntax error."""
    return ast.Module(path, _run(source, path, "start"))


def parse_repl(source: str, path: str = "<repl>") -> ast.ReplInput:
    """Parse one REPL entry: declarations and statements mixed."""
    return ast.ReplInput(_run(source, path, "repl_input"))


def _run(source: str, path: str, start: str, first_line: int = 1, first_column: int = 1) -> object:
    """Parse `source` from the rule `start`. `source` may be a piece of a file starting at `first_line` and
    `first_column` there (a declaration, an f-string field): its tokens and diagnostics get the file's
    lines and columns."""
    table = parse_table()
    lines, columns = first_line - 1, first_column - 1
    try:
        scanned = table.scanner.scan(source, path)
    except DiagnosticError as failure:
        if not (lines or columns):
            raise
        raise DiagnosticError([shifted(d, lines, columns) for d in failure.diagnostics]) from None
    end = end_token(source)
    if lines or columns:  # give tokens the lines (and, on the piece's first line, columns) they have in the file
        scanned = [moved(token, lines, columns) for token in scanned]
        end = moved(end, lines, columns)
    problem = python_float(scanned, path)
    if problem is not None:
        raise DiagnosticError(problem)
    tokens, unclosed, misplaced = layout(scanned)
    with _lock:
        _builder.path = path
        try:
            parsed = table.run([*tokens, end], start)
        except UnexpectedToken as problem:
            if unclosed is not None and problem.token[0] == "$END":
                raise DiagnosticError(never_closed(unclosed, path, misplaced)) from None
            raise DiagnosticError(syntax_diagnostic(table, tokens, problem.token, start, path)) from None
    deep = too_deep(parsed) if start != "embedded_expr" else None  # a field is measured in the tree around it
    if deep is not None:
        raise DiagnosticError(deep)
    return parsed


def python_float(tokens: list[Token], path: str) -> Diagnostic | None:
    """Python's `1.` and `.5`, which DL reads as an integer and a field (`1.print(x)` across a line break):
    E0102 with DL's spelling."""
    for k, token in enumerate(tokens):
        if token[0] != "DOT":
            continue
        before = tokens[k - 1] if k else None
        after = tokens[k + 1] if k + 1 < len(tokens) else None
        touches_before = before is not None and before[2] == token[2] and before[3] + len(before[1]) == token[3]
        touches_after = after is not None and after[2] == token[2] and after[3] == token[3] + 1
        if touches_before and before[0] == "INT" and not (touches_after and after[0] == "NAME"):
            written, fixed, where = f"{before[1]}.", f"{before[1]}.0", before
        elif touches_after and after[0] == "INT" and (before is None or before[0] not in VALUE_ENDS):
            written, fixed, where = f".{after[1]}", f"0.{after[1]}", token
        else:
            continue
        span = Span(path, where[2], where[3], where[2], where[3] + len(written))
        return error(
            "E0102",
            f"`{written}` is not a number in DL",
            span,
            f"write `{fixed}`",
            notes=(f"help: a float has digits on both sides of its point: `{fixed}`",),
        )
    return None


VALUE_ENDS = frozenset({"NAME", "INT", "FLOAT", "RPAR", "RSQB", "STRING", "FSTRING"})  # `x.5` is not `0.5`


def moved(token: Token, lines: int, columns: int) -> Token:
    """A token of a piece of a file, where it is in the file: `lines` down, and `columns` right on the
    piece's first line."""
    kind, text, line, column = token
    return (kind, text, line + lines, column + columns if line == 1 else column)


def shifted(diagnostic: Diagnostic, lines: int, columns: int = 0) -> Diagnostic:
    """`diagnostic` moved down by `lines` lines, and right by `columns` on the first line (found in a
    piece of a file, reported in the file)."""

    def move(span: Span) -> Span:
        end_column = span.end_column + columns if span.end_line == 1 else span.end_column
        start_column = span.column + columns if span.line == 1 else span.column
        return Span(span.path, span.line + lines, start_column, span.end_line + lines, end_column)

    labels = tuple(replace(label, span=move(label.span)) for label in diagnostic.secondary)
    return replace(diagnostic, span=move(diagnostic.span), secondary=labels)


def end_token(source: str) -> Token:
    lines = source.splitlines() or [""]
    return ("$END", "", len(lines), len(lines[-1]) + 1)


# ---------------------------------------------------------------------- syntax errors

CLOSING = {**OPENERS, "STRUCT_LBRACE": "RBRACE"}  # each opening bracket's closing one
# What an operand can start with (an expression also with `fn`: a lambda).
OPERAND_STARTS = frozenset(
    {"NAME", "INT", "FLOAT", "STRING", "FSTRING", "TRUE", "FALSE", "LPAR", "LSQB", "MINUS", "NOT"}
)
TYPE_STARTS = frozenset({"NAME", "LPAR", "FN"})
OPERATORS = frozenset({"PLUS", "MINUS", "STAR", "SLASH", "DSLASH", "PERCENT", "AT", "POW", "COMPARE", "AND", "OR"})
# Tokens that would continue what was just written (`a` + `b`, `a`(...), `a`.b, `a` = ...,
# `x`: f32): almost always possible after a name or a value, so they are named
# only when nothing that ends it (a closing bracket, `,`, a new line, ...) could come.
CONTINUATIONS = OPERATORS | {"LPAR", "LSQB", "DOT", "STRUCT_LBRACE", "ASSIGN", "AUGASSIGN", "COLON", "DOTDOT"}
# How a token kind is named in a message, in the order messages list them.
SHOWN = {
    "SEP": "a new line",
    "RPAR": "`)`",
    "RSQB": "`]`",
    "RBRACE": "`}`",
    "COMMA": "`,`",
    "LBRACE": "`{`",
    "STRUCT_LBRACE": "`{`",
    "COLON": "`:`",
    "ASSIGN": "`=`",
    "AUGASSIGN": "`+=`",
    "ARROW": "`->`",
    "FATARROW": "`=>`",
    "DOTDOT": "`..`",
    "ELLIPSIS": "`...`",
    "DOT": "`.`",
    "LPAR": "`(`",
    "LSQB": "`[`",
    "INT": "an integer",
    "FLOAT": "a number",
    "STRING": "a string",
    "FSTRING": "an f-string",
}


def describe_expected(expected: set[str], keywords: frozenset[str]) -> str:
    """What could have come next (token kinds), in words: "an expression or `)`", "a new line or `}`"."""
    words = []
    if expected >= OPERAND_STARTS:
        words.append("an expression")
        expected = expected - OPERAND_STARTS - {"FN"}
    elif expected >= TYPE_STARTS and "INT" not in expected:
        words.append("a type")
        expected = expected - TYPE_STARTS
    elif "NAME" in expected:
        words.append("a name")
        expected = expected - {"NAME"}
    if expected & OPERATORS and expected - CONTINUATIONS - {"$END"}:
        expected = expected - CONTINUATIONS  # after a complete value: say what could end it
    words += [f"`{kind.lower()}`" for kind in sorted(expected) if kind in keywords]
    words += [SHOWN[kind] for kind in SHOWN if kind in expected]
    if expected & OPERATORS:
        words.append("an operator")
    words = list(dict.fromkeys(words))[:6]
    if not words:
        return "something else"
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def describe_found(token: Token) -> str:
    kind, text = token[0], token[1]
    if kind == "$END":
        return "the end of the file"
    if kind == "SEP":
        return "`;`" if text == ";" else "the end of the line"
    if kind == "NAME":
        return f"name `{text}`"
    if kind in {"INT", "FLOAT", "STRING", "FSTRING"}:
        return f"literal `{text}`"
    return f"`{text}`"


# binary operators that cannot start an expression: one at the start of a line continues the line before
CONTINUING = frozenset({"+", "*", "/", "//", "%", "**", "@", "and", "or", "==", "!=", "<", "<=", ">", ">="})


def syntax_diagnostic(table: ParseTable, tokens: list[Token], token: Token, start: str, path: str) -> Diagnostic:
    """E0102 for a token the grammar does not allow where it is.

    What was expected is worked out afresh from the parser's state right after the
    previous token: the state where the error showed may differ, as LALR tables
    reduce on lookaheads merged from other contexts (`a new line` inside `( )`)."""
    position = next((i for i, t in enumerate(tokens) if t is token), len(tokens))
    if token[0] == "SEP" and not token[1] and position + 1 < len(tokens):
        token = tokens[position + 1]  # a separator the layout pass supplied after `}`: show what follows
    stack = table.stack_after(tokens[:position], start)
    expected = {kind for kind in table.terminals if table.accepts(stack, kind)}
    found = describe_found(token)
    if token[0] == "$END" and start == "embedded_expr":
        found = "the end of the field"
    previous = next((t[1] for t in reversed(tokens[:position]) if t[0] != "SEP" or t[1] == ";"), None)
    after = f" after `{previous}`" if previous else ""
    keywords = frozenset(table.scanner.keywords.values())
    message = f"expected {describe_expected(expected, keywords)}{after}, found {found}"
    _, text, line, column = token
    span = Span(path, line, column, line, column + max(1, len(text)))
    from dl.lang.habits import syntax_help  # (only a mistake needs it)

    notes = syntax_help(
        tokens[max(0, position - 3) : position],
        token,
        expected,
        tokens[position + 1 : position + 3],
        statement_opening(tokens, position),
    )
    earlier = next((t for t in reversed(tokens[:position]) if t[0] != "SEP"), None)
    if not notes and token[1] in CONTINUING and earlier is not None and earlier[2] < line:  # `+ b` on a new line
        notes = (
            f"help: a line ends the statement before it: to go on from the line before, end that line with "
            f"`{token[1]}`, or put the whole expression in parentheses",
        )
    if start == "embedded_expr" and token[1] == "=" and position + 1 == len(tokens):
        shown = source_text(tokens[:position])  # Python's `f"{loss=}"`
        notes = (
            f"help: DL's f-strings have no `=` field: write the name before the field, `{shown}={{{shown}}}` (a "
            f"format spec stays inside the braces: `{{{shown}:.3f}}`)",
        )

    return error(
        "E0102",
        message,
        span,
        f"unexpected {found.removeprefix('the ')}",
        secondary=unclosed_label(tokens[:position], token, expected, path),
        notes=notes,
    )


def source_text(tokens: list[Token]) -> str:
    """The text of tokens on one line, spaced as written (`m.w`, `x[0] + 1`)."""
    text, column = "", tokens[0][3] if tokens else 0
    for _, value, _, start in tokens:
        text += " " * max(0, start - column) + value
        column = start + len(value)
    return text


def statement_opening(tokens: list[Token], position: int) -> str:
    """The first token of the statement the token at `position` is in (after the last separator or brace
    before it); "" when it opens one."""
    start = position
    while start > 0 and tokens[start - 1][0] not in ("SEP", "NEWLINE", "LBRACE", "RBRACE"):
        start -= 1
    return tokens[start][1] if start < position else ""


def unclosed_label(before: list[Token], found: Token, expected: set[str], path: str) -> tuple[Label, ...]:
    """Point at the bracket left open when a wrong bracket comes where its closer could, or a token on a
    later line does (`print(f(x)` then `print(y)`: the statement went on past its line)."""
    next_line = bool(before) and found[2] > before[-1][2]
    if found[0] not in {"RPAR", "RSQB", "RBRACE", "LBRACE", "STRUCT_LBRACE"} and not next_line:
        return ()
    open_brackets: list[Token] = []
    for token in before:
        if token[0] in CLOSING:
            open_brackets.append(token)
        elif token[0] in CLOSERS:  # pop to the bracket it closes, as the layout pass does
            while open_brackets and CLOSING[open_brackets.pop()[0]] != token[0]:
                pass
    if not open_brackets or CLOSING[open_brackets[-1][0]] not in expected:
        return ()
    opener = open_brackets[-1]
    if opener[0] == "LBRACE" and found[0] in ("LBRACE", "STRUCT_LBRACE"):  # a block's `{`: a `{` is wrong itself
        return ()
    if opener[0] not in ("LPAR", "LSQB") and found[0] not in {"RPAR", "RSQB", "RBRACE", "LBRACE", "STRUCT_LBRACE"}:
        return ()  # a statement's first token on a new line: only a `(` or `[` left open carries it on
    return (Label(token_span(path, opener), f"this `{opener[1]}` is not closed"),)


# ---------------------------------------------------------------------- recovery

# A top-level declaration starts a line: one of these keywords at column 1.
DECLARATION_START = re.compile(r"(?:fn|struct|const|import)(?![A-Za-z0-9_])")
# the name a broken declaration meant (`let lr = 0.01` at the top level is meant as a `const`)
DECLARED_NAME = re.compile(r"(?:fn|struct|const|let|var)\s+([A-Za-z_][A-Za-z0-9_]*)")


class Recovered(NamedTuple):
    module: ast.Module
    diagnostics: list[Diagnostic]  # the syntax errors, one per declaration that did not parse
    broken_names: frozenset[str]  # the names those declarations would have declared, where readable


def parse_recovering(source: str, path: str = "<input>") -> tuple[ast.Module, list[Diagnostic]]:
    """Parse a `.dl` file that may have syntax errors: the declarations that parse, and every syntax error.

    Never raises for a mistake in `source`. See `recover` for how parsing resumes after an error."""
    recovered = recover(source, path)
    return recovered.module, recovered.diagnostics


def recover(source: str, path: str = "<input>") -> Recovered:
    """`parse_recovering`, also naming the declarations that did not parse (see `Recovered`).

    A file that parses gives what `parse` gives. Otherwise the file is cut into
    pieces (see `pieces`), each starting at a line that starts a declaration, and
    each piece is parsed on its own, at its own lines, so every span is a span of
    `source`: a piece that does not parse gives its first syntax error and no
    declarations. The language server parses a document the same way, piece by
    piece (lang/incremental.py)."""
    try:
        return Recovered(parse(source, path), [], frozenset())
    except DiagnosticError:
        pass
    decls: list[ast.Decl] = []
    diagnostics: list[Diagnostic] = []
    broken: set[str] = set()
    for first, text in pieces(source):
        found, problem = parse_piece(text, path, first)
        decls.extend(found)
        if problem is not None:
            diagnostics.append(problem)
            name = DECLARED_NAME.match(text)
            if name:
                broken.add(name.group(1))
    return Recovered(ast.Module(path, tuple(decls)), diagnostics, frozenset(broken))


def pieces(source: str) -> list[tuple[int, str]]:
    """`source` cut where declarations start, as (0-based first line, text): a piece runs from a line that
    starts with `fn`, `struct`, `const` or `import` at column 1 to the next such line (the first piece also
    holds whatever comes before). Lines end at `\\n`, as the lexer counts them."""
    lines = source.split("\n")
    starts = [0, *(number for number in range(1, len(lines)) if DECLARATION_START.match(lines[number]))]
    stops = [*starts[1:], len(lines)]
    return [
        (first, "\n".join(lines[first:stop]) + ("\n" if stop < len(lines) else ""))
        for first, stop in zip(starts, stops, strict=True)
    ]


def parse_piece(text: str, path: str, first: int) -> tuple[tuple[ast.Decl, ...], Diagnostic | None]:
    """The declarations of one piece of the file `path` that starts at its 0-based line `first`, or none
    and the piece's first syntax error. Never raises for a mistake in `text`."""
    try:
        return _run(text, path, "start", first + 1), None
    except DiagnosticError as failure:
        return (), failure.diagnostics[0]
    except RecursionError:  # a pathologically deep input; never a Python exception
        return (), error("E0102", "this declaration nests too deeply to parse", Span(path, first + 1, 1, first + 1, 2))
