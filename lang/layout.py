"""Layout: the pass between the lexer and the LALR parser that gives newlines meaning.

Takes the raw token list (with NEWLINE and SEMICOLON tokens) and returns the
tokens the grammar expects:

- a newline or `;` that ends a statement becomes one SEP token; runs collapse;
- newlines inside `( )` and `[ ]` vanish, and so do those after a token that
  cannot end a statement (an operator, `,`, `=`, `{`, ...) and those before `}`,
  `else`, `{` or the end of the file, so `} else {` may break across lines;
- a `{` right after a name and followed by `name :` opens a struct literal and
  becomes STRUCT_LBRACE, which keeps `if x { ... }` free of ambiguity; so does
  the `{` of `struct Name {`, so that a field that lacks its `:` is reported as
  such.

It also returns the bracket still open at the end, if any: the parser reports
it with the bracket's own span (`never_closed`) when it reaches the end of the
file without an earlier error, which says more than "unexpected end of file".
"""

from __future__ import annotations

from typing import NamedTuple

from dl.lang.diagnostics import Diagnostic, Label, Span, error
from dl.lang.lexer import Token

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
    _, text, line, column = token
    return Span(path, line, column, line, column + len(text))


class LaidOut(NamedTuple):
    tokens: list[Token]
    unclosed: Token | None  # the innermost bracket still open at the end, if any
    # the first `{` whose `}` starts a line left of the line the `{` is on: (the `{`, the `}`); where a `{`
    # is left open at the end, this block is likely the one that lacks its own `}`
    misplaced: tuple[Token, Token] | None = None


def layout(tokens: list[Token]) -> LaidOut:
    laid_out: list[Token] = []
    append = laid_out.append
    open_brackets: list[Token] = []
    previous = "SEP"
    pending: Token | None = None  # a SEP waiting to see the next token
    count = len(tokens)
    indents: dict[int, int] = {}  # each line's first column with a token
    for kind, _, line, column in tokens:
        if kind not in SEPARATORS:
            indents.setdefault(line, column)
    misplaced: tuple[Token, Token] | None = None
    for position, token in enumerate(tokens):
        kind = token[0]
        if kind in SEPARATORS:
            inside_group = open_brackets and open_brackets[-1][0] in ("LPAR", "LSQB")
            if pending is None and previous not in CONTINUES_AFTER and not (kind == "NEWLINE" and inside_group):
                pending = ("SEP", *token[1:])
            continue
        if pending is not None:
            if kind not in ENDS_BEFORE:
                append(pending)
            pending = None
        if kind in OPENERS:
            named = previous == "NAME" and _opens_struct(laid_out, tokens, position + 1, count)
            if kind == "LBRACE" and (named or (previous == "RSQB" and _after_struct_sizes(laid_out))):
                token = ("STRUCT_LBRACE", *token[1:])
            open_brackets.append(token)
        elif kind in CLOSERS:
            opener = _close(open_brackets, CLOSERS[kind])
            closed = opener[0] if opener is not None else None
            if closed == "LBRACE" and position + 1 < count and tokens[position + 1][0] in STATEMENT_STARTS:
                pending = ("SEP", "", *tokens[position + 1][2:])  # no text: not in the source
            if misplaced is None and closed in ("LBRACE", "STRUCT_LBRACE") and _left_of(token, opener, indents):
                misplaced = (opener, token)
        previous = kind
        append(token)
    return LaidOut(laid_out, open_brackets[-1] if open_brackets else None, misplaced)


def _left_of(closer: Token, opener: Token, indents: dict[int, int]) -> bool:
    """Whether `closer` starts its line, left of the first token of the line `opener` is on."""
    line, column = closer[2], closer[3]
    return line != opener[2] and indents.get(line) == column and column < indents[opener[2]]


def never_closed(opener: Token, path: str, misplaced: tuple[Token, Token] | None = None) -> Diagnostic:
    """The diagnostic for a bracket still open at the end of the file. For a block's `{`, where an inner
    block's `}` starts its line left of that block (`misplaced`), that inner block is the one reported: its
    `}` is missing, and the one that closed it was written for the block left open."""
    closer = {"LPAR": ")", "LSQB": "]"}.get(opener[0], "}")
    if closer == "}" and misplaced is not None:
        inner, taken = misplaced
        # the lines are labels (spans), not text, so that a piece of a file re-parsed elsewhere moves them too
        return error(
            "E0103",
            "this `{` is never closed",
            token_span(path, inner),
            "expected a matching `}`",
            secondary=(
                Label(token_span(path, taken), "this `}` closes the block, though it stands left of its first line"),
                Label(token_span(path, opener), "so this `{` is left open at the end of the file"),
            ),
        )
    return error(
        "E0103",
        f"this `{opener[1]}` is never closed",
        token_span(path, opener),
        f"expected a matching `{closer}` before the end of the file",
    )


def _opens_struct(laid_out: list[Token], tokens: list[Token], start: int, count: int) -> bool:
    """Whether the `{` after a name opens a struct: `struct Name {`, or `Name { field: ...`."""
    if len(laid_out) > 1 and laid_out[-2][0] == "STRUCT":
        return True
    kinds = []
    for position in range(start, count):
        kind = tokens[position][0]
        if kind not in SEPARATORS:
            kinds.append(kind)
            if len(kinds) == 2:
                break
    return kinds == ["NAME", "COLON"]


def _after_struct_sizes(laid_out: list[Token]) -> bool:
    """Whether the tokens laid out end in `struct Name[...]`, the sizes a generic struct declares."""
    position = len(laid_out) - 1
    while position >= 0 and laid_out[position][0] != "LSQB":
        position -= 1
    return position >= 2 and laid_out[position - 1][0] == "NAME" and laid_out[position - 2][0] == "STRUCT"


def _close(open_brackets: list[Token], opener_kind: str) -> Token | None:
    """Pop to the matching opener; returns it."""
    for depth in range(len(open_brackets) - 1, -1, -1):
        opener = open_brackets[depth]
        if opener[0] == opener_kind or (opener_kind == "LBRACE" and opener[0] == "STRUCT_LBRACE"):
            del open_brackets[depth:]
            return opener
    return None
