"""Lexing: source text -> tokens, from the terminals declared in grammar/dl.lark.

One compiled regular expression built from the grammar's own terminal
definitions scans the text; names that spell a keyword become that keyword's
token. A token is a plain tuple `(kind, text, line, column)`: kind is the
grammar's terminal name, line and column are 1-based, and a token never spans
lines, so it ends at `column + len(text)`. Tuples rather than objects because
the lexer makes one per word of the program and parsing speed matters (see
bench/parse_speed.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from dl.lang.diagnostics import Diagnostic, DiagnosticError, Span, error
from lark.lexer import PatternStr, TerminalDef

Token = tuple[str, str, int, int]  # (kind, text, line, column)

LAYOUT_ONLY = ("NEWLINE", "SEMICOLON")
# Scanner-only groups: all fixed strings, any one character that no terminal
# matches (reported), and the end of the text (so that trailing blanks and
# comments are skipped).
FIXED = "_FIXED"
UNKNOWN = "_UNKNOWN"
END = "_END"


class Scanner:
    """A compiled scanner for one set of terminals.

    The regular expression tries names first, then the fixed strings (punctuation
    and operators, in one group), then the remaining terminals in Lark's order of
    priority and width. Names and fixed strings are the most frequent tokens, and
    trying them first changes nothing else: no fixed string starts with a letter,
    a digit, `_` or `"`, and nothing but a name starts with a letter or `_`
    (tests/test_parser.py checks the tokens against Lark's own lexer).
    """

    def __init__(self, terminals: list[TerminalDef], ignore: list[str]) -> None:
        name_pattern = re.compile(next(t for t in terminals if t.name == "NAME").pattern.to_regexp())
        self.keywords = {
            t.pattern.value: t.name
            for t in terminals
            if isinstance(t.pattern, PatternStr) and name_pattern.fullmatch(t.pattern.value)
        }
        ordered = sorted(
            (t for t in terminals if t.name not in ignore and t.pattern.value not in self.keywords),
            key=lambda t: (-t.priority, -t.pattern.max_width, -len(t.pattern.value), t.name),
        )
        self.fixed = [t for t in ordered if is_fixed(t)]
        others = [t for t in ordered if not is_fixed(t) and t.name != "NAME"]
        # The kind of each fixed string seen, found from `self.fixed` in order on first sight.
        self.fixed_kinds: dict[str, str] = {}
        skipped = "|".join(t.pattern.to_regexp() for t in terminals if t.name in ignore)
        groups = [
            f"(?P<NAME>{name_pattern.pattern})",
            f"(?P<{FIXED}>{'|'.join(t.pattern.to_regexp() for t in self.fixed)})",
            *(f"(?P<{t.name}>{t.pattern.to_regexp()})" for t in others),
            f"(?P<{UNKNOWN}>.)",
            f"(?P<{END}>\\Z)",
        ]
        # Blanks and comments before a token are skipped in the same match.
        self.regex = re.compile(f"(?>(?:{skipped})*)(?:{'|'.join(groups)})")

    def scan(self, text: str, path: str) -> list[Token]:
        tokens: list[Token] = []
        append = tokens.append
        keywords, fixed_kinds = self.keywords, self.fixed_kinds
        line, line_start = 1, 0
        for found in self.regex.finditer(text):
            kind = found.lastgroup
            start, stop = found.span(kind)
            value = text[start:stop]
            if kind == "NAME":
                kind = keywords.get(value, "NAME")
            elif kind == FIXED:
                kind = fixed_kinds.get(value) or self.fixed_kind(value)
                if kind == "NEWLINE":
                    append((kind, value, line, start - line_start + 1))
                    line += 1
                    line_start = stop
                    continue
            elif kind == END:
                break
            elif kind == UNKNOWN:
                raise DiagnosticError(unexpected_character(text, start, line, start - line_start + 1, path))
            append((kind, value, line, start - line_start + 1))
        return tokens

    def fixed_kind(self, value: str) -> str:
        kind = next(t.name for t in self.fixed if re.fullmatch(t.pattern.to_regexp(), value))
        self.fixed_kinds[value] = kind
        return kind


def is_fixed(terminal: TerminalDef) -> bool:
    """A terminal that matches a few fixed strings (`(`, `**`, `==` or `!=`, ...), not an open-ended pattern."""
    return isinstance(terminal.pattern, PatternStr) or terminal.pattern.max_width <= 3


def unexpected_character(text: str, position: int, line: int, column: int, path: str) -> Diagnostic:
    char = text[position]
    span = Span(path, line, column, line, column + 1)
    if char == '"':
        end_of_line = text.find("\n", position)
        end_of_line = len(text) if end_of_line < 0 else end_of_line
        span = Span(path, line, column, line, column + end_of_line - position)
        return error("E0106", "unterminated string literal", span, 'this string has no closing `"` on its line')
    return error("E0101", f"unexpected character `{char}`", span, "not part of any DL token")


def code_characters(text: str) -> Iterator[tuple[int, str]]:
    """The characters of `text` (with their indices) outside string literals and comments, except that the
    `#` opening a comment is yielded, so callers see where it starts. An unterminated string (text being
    typed) hides the rest."""
    quoted = escaped = commented = False
    for index, char in enumerate(text):
        if commented:
            commented = char != "\n"
        elif quoted:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                quoted = False
        elif char == '"':
            quoted = True
        else:
            commented = char == "#"
            yield index, char
