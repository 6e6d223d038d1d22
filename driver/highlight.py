"""Syntax highlighting of DL source with Pygments, from the language's own lexer.

`DLLexer` classifies the tokens that lang/lexer.py scans with the terminals of
grammar/dl.lark, so it never disagrees with the parser about what a token is.
It is registered as the Pygments plugin `dl` (pyproject.toml,
`[project.entry-points."pygments.lexers"]`), so `pygmentize -l dl file.dl`
works, and the REPL highlights its input with it (through prompt_toolkit's
`PygmentsLexer`). An f-string's text is a string and its fields' expressions
are highlighted as the code they are. Text the lexer rejects (a stray character, an unterminated
string) is shown as an error to the end of its line; the rest still highlights.
"""

from __future__ import annotations

from collections.abc import Iterator

from dl.lang.diagnostics import DiagnosticError
from dl.lang.parse import parse_table
from dl.lang.primitives import BY_NAME
from pygments.lexer import Lexer
from pygments.token import (
    Comment,
    Error,
    Keyword,
    Name,
    Number,
    Operator,
    Punctuation,
    String,
    Text,
    Whitespace,
    _TokenType,
)

DTYPE_NAMES = frozenset({"f32", "f64", "i32", "i64", "bool", "str"})
CONSTANT_KEYWORDS = frozenset({"TRUE", "FALSE"})
DECLARATION_KEYWORDS = frozenset({"FN", "STRUCT", "CONST", "IMPORT", "LET", "AS"})
WORD_OPERATORS = frozenset({"AND", "OR", "NOT", "IN"})
OPERATORS = frozenset(
    {"PLUS", "MINUS", "STAR", "SLASH", "DSLASH", "PERCENT", "AT", "POW", "COMPARE", "ASSIGN", "AUGASSIGN"}
    | {"ARROW", "FATARROW", "DOTDOT"}
)
LITERALS = {"INT": Number.Integer, "FLOAT": Number.Float, "STRING": String}


def token_class(kind: str, text: str, keywords: frozenset[str]) -> _TokenType:
    """The Pygments token type of one DL token of grammar terminal `kind`."""
    if kind in LITERALS:
        return LITERALS[kind]
    if kind == "NAME":
        if text in DTYPE_NAMES:
            return Keyword.Type
        return Name.Builtin if text in BY_NAME else Name
    if kind in CONSTANT_KEYWORDS:
        return Keyword.Constant
    if kind in WORD_OPERATORS:
        return Operator.Word
    if kind in DECLARATION_KEYWORDS:
        return Keyword.Declaration
    if kind in keywords:
        return Keyword
    return Operator if kind in OPERATORS else Punctuation


def gap_tokens(gap: str, start: int) -> Iterator[tuple[int, _TokenType, str]]:
    """What lies between two tokens of a line: blanks, then perhaps a comment to the end of the line."""
    hash_at = gap.find("#")
    code = gap if hash_at < 0 else gap[:hash_at]
    if code:
        yield start, Whitespace, code
    if hash_at >= 0:
        yield start + hash_at, Comment.Single, gap[hash_at:]


def scanned_line(line: str) -> tuple[list[tuple[str, str, int, int]], int]:
    """The lexer's tokens of one line, and where the text it rejects starts (the line's length if none)."""
    scanner = parse_table().scanner
    try:
        return scanner.spread(scanner.scan(line, "<highlight>")), len(line)
    except DiagnosticError as problem:
        bad = problem.diagnostics[0].span.column - 1 if problem.diagnostics else 0
        try:
            return scanner.spread(scanner.scan(line[:bad], "<highlight>")), bad
        except DiagnosticError:  # cannot happen: the text before the first bad character scans
            return [], 0


class DLLexer(Lexer):
    """Pygments lexer for DL, built on DL's own scanner (lang/lexer.py)."""

    name = "DL"
    aliases = ["dl"]  # noqa: RUF012 (Pygments reads these class attributes)
    filenames = ["*.dl"]  # noqa: RUF012
    mimetypes = ["text/x-dl"]  # noqa: RUF012
    url = "https://github.com/dl-lang/dl"

    def get_tokens_unprocessed(self, text: str) -> Iterator[tuple[int, _TokenType, str]]:
        keywords = frozenset(parse_table().scanner.keywords.values())
        offset = 0
        for line in text.splitlines(keepends=True):
            body = line.rstrip("\r\n")
            yield from self.line_tokens(body, offset, keywords)
            if len(line) > len(body):
                yield offset + len(body), Text.Whitespace, line[len(body) :]
            offset += len(line)

    def line_tokens(self, line: str, offset: int, keywords: frozenset[str]) -> Iterator[tuple[int, _TokenType, str]]:
        tokens, rejected = scanned_line(line)
        position = 0
        for kind, value, _, column in tokens:
            if kind == "NEWLINE":
                continue
            start = column - 1
            yield from gap_tokens(line[position:start], offset + position)
            yield offset + start, token_class(kind, value, keywords), value
            position = start + len(value)
        yield from gap_tokens(line[position:rejected], offset + position)
        if rejected < len(line):
            yield offset + rejected, Error, line[rejected:]
