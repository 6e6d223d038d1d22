"""Lexing: source text -> Lark tokens, from the terminals declared in grammar/dl.lark.

One compiled regular expression built from the grammar's own terminal
definitions scans the text; names that spell a keyword become that keyword's
token. Lark's generic lexer tries each terminal in turn and was the largest
cost of parsing, so DL scans with one `re` pass instead (see bench/).
"""

from __future__ import annotations

import re

from dl.lang.diagnostics import DiagnosticError, Span, error
from lark import Token
from lark.lexer import PatternStr, TerminalDef

LAYOUT_ONLY = ("NEWLINE", "SEMICOLON")


class Scanner:
    """A compiled scanner for one set of terminals."""

    def __init__(self, terminals: list[TerminalDef], ignore: list[str]) -> None:
        name_pattern = re.compile(next(t for t in terminals if t.name == "NAME").pattern.to_regexp())
        self.keywords = {
            t.pattern.value: t.name
            for t in terminals
            if isinstance(t.pattern, PatternStr) and name_pattern.fullmatch(t.pattern.value)
        }
        ordered = sorted(
            (t for t in terminals if t.pattern.value not in self.keywords or not isinstance(t.pattern, PatternStr)),
            key=lambda t: (-t.priority, -t.pattern.max_width, -len(t.pattern.value), t.name),
        )
        skipped = "|".join(t.pattern.to_regexp() for t in terminals if t.name in ignore)
        tokens = "|".join(f"(?P<{t.name}>{t.pattern.to_regexp()})" for t in ordered if t.name not in ignore)
        # Blanks and comments before a token are skipped in the same match.
        self.regex = re.compile(f"(?>(?:{skipped})*)(?:{tokens})")
        self.trailing = re.compile(f"(?:{skipped})*")

    def scan(self, text: str, path: str) -> list[Token]:
        tokens: list[Token] = []
        append = tokens.append
        keywords = self.keywords
        match = self.regex.match
        position, line, line_start, end = 0, 1, 0, len(text)
        while position < end:
            found = match(text, position)
            if found is None:
                position = self.trailing.match(text, position).end()
                if position == end:
                    break
                raise DiagnosticError(unexpected_character(text, position, line, line_start, path))
            kind = found.lastgroup
            start, stop = found.span(kind)
            value = text[start:stop]
            if kind == "NAME":
                kind = keywords.get(value, "NAME")
            column = start - line_start + 1
            append(Token(kind, value, start, line, column, line, column + stop - start, stop))
            if kind == "NEWLINE":
                line += 1
                line_start = stop
            position = stop
        return tokens


def unexpected_character(text: str, position: int, line: int, line_start: int, path: str):
    column = position - line_start + 1
    char = text[position]
    span = Span(path, line, column, line, column + 1)
    if char == '"':
        end_of_line = text.find("\n", position)
        end_of_line = len(text) if end_of_line < 0 else end_of_line
        span = Span(path, line, column, line, column + end_of_line - position)
        return error("E0106", "unterminated string literal", span, 'this string has no closing `"` on its line')
    return error("E0101", f"unexpected character `{char}`", span, "not part of any DL token")
