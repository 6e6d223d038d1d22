"""Layout: the pass between Lark's lexer and its LALR parser that gives newlines meaning.

Takes the raw token stream (with NEWLINE and SEMICOLON tokens) and yields the
stream the grammar expects:

- a newline or `;` that ends a statement becomes one SEP token; runs collapse;
- newlines inside `( )` and `[ ]` vanish, and so do those after a token that
  cannot end a statement (an operator, `,`, `=`, `{`, ...) and those before `}`,
  `else`, `{` or the end of the file, so `} else {` may break across lines;
- a `{` right after a name and followed by `name :` opens a struct literal and
  becomes STRUCT_LBRACE, which keeps `if x { ... }` free of ambiguity.

At the end of the stream an unclosed bracket is reported with the bracket's
own span, which says more than the parser's "unexpected end of file".
"""

from __future__ import annotations

from collections.abc import Iterator

from dl.lang.diagnostics import DiagnosticError, Span, error
from lark import Token

CONTINUES_AFTER = frozenset(
    {
        "LBRACE",
        "STRUCT_LBRACE",
        "LPAR",
        "LSQB",
        "COMMA",
        "COLON",
        "DOT",
        "DOTDOT",
        "ARROW",
        "FATARROW",
        "AUGASSIGN",
        "COMPARE",
        "ASSIGN",
        "POW",
        "PLUS",
        "MINUS",
        "STAR",
        "DSLASH",
        "SLASH",
        "PERCENT",
        "AT",
        "AND",
        "OR",
        "NOT",
        "ELSE",
        "IN",
        "AS",
        "SEP",
    }
)
ENDS_BEFORE = frozenset({"RBRACE", "ELSE", "LBRACE"})
OPENERS = {"LPAR": "RPAR", "LSQB": "RSQB", "LBRACE": "RBRACE"}
CLOSERS = {closer: opener for opener, closer in OPENERS.items()}
SEPARATORS = frozenset({"NEWLINE", "SEMICOLON"})
# After a block's `}`, a statement may follow on the same line: `if c { a } print(b)`.
STATEMENT_STARTS = frozenset({"NAME", "LET", "IF", "WHILE", "FOR", "RETURN", "BREAK", "CONTINUE", "FN"})


def token_span(path: str, token: Token) -> Span:
    return Span(path, token.line, token.column, token.end_line, token.end_column)


def layout(tokens: list[Token], path: str) -> Iterator[Token]:
    open_brackets: list[Token] = []
    previous = "SEP"
    pending: Token | None = None  # a SEP waiting to see the next token
    count = len(tokens)
    for position, token in enumerate(tokens):
        kind = token.type
        if kind in SEPARATORS:
            inside_group = open_brackets and open_brackets[-1].type in ("LPAR", "LSQB")
            if pending is None and previous not in CONTINUES_AFTER and not (kind == "NEWLINE" and inside_group):
                pending = Token.new_borrow_pos("SEP", token.value, token)
            continue
        if pending is not None:
            if kind not in ENDS_BEFORE:
                yield pending
            pending = None
        if kind in OPENERS:
            if kind == "LBRACE" and previous == "NAME" and _opens_struct_literal(tokens, position + 1, count):
                token = Token.new_borrow_pos("STRUCT_LBRACE", token.value, token)
            open_brackets.append(token)
        elif kind in CLOSERS:
            closed = _close(open_brackets, CLOSERS[kind])
            if closed == "LBRACE" and position + 1 < count and tokens[position + 1].type in STATEMENT_STARTS:
                pending = Token.new_borrow_pos("SEP", ";", tokens[position + 1])
        previous = token.type
        yield token
    if open_brackets:
        opener = open_brackets[-1]
        closer = {"LPAR": ")", "LSQB": "]"}.get(opener.type, "}")
        raise DiagnosticError(
            error(
                "E0103",
                f"this `{opener.value}` is never closed",
                token_span(path, opener),
                f"expected a matching `{closer}` before the end of the file",
            )
        )


def _opens_struct_literal(tokens: list[Token], start: int, count: int) -> bool:
    kinds = []
    for position in range(start, count):
        kind = tokens[position].type
        if kind not in SEPARATORS:
            kinds.append(kind)
            if len(kinds) == 2:
                break
    return kinds == ["NAME", "COLON"]


def _close(open_brackets: list[Token], opener_kind: str) -> str | None:
    """Pop to the matching opener; returns its kind."""
    for depth in range(len(open_brackets) - 1, -1, -1):
        kind = open_brackets[depth].type
        if kind == opener_kind or (opener_kind == "LBRACE" and kind == "STRUCT_LBRACE"):
            del open_brackets[depth:]
            return kind
    return None
