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
from typing import NamedTuple

from dl.lang.diagnostics import Diagnostic, DiagnosticError, Span, error

Token = tuple[str, str, int, int]  # (kind, text, line, column)


class Terminal(NamedTuple):
    """A terminal of the grammar, as Lark reads it from grammar/dl.lark (lang/lalr.py)."""

    name: str
    value: str  # the string (`fn`) or the regular expression (`\d+`) as written
    is_string: bool  # a fixed string rather than a regular expression
    regexp: str  # what matches it, as a regular expression
    priority: int
    max_width: int  # the length of its longest match


LAYOUT_ONLY = ("NEWLINE", "SEMICOLON")
STARTS_LIKE_A_NAME = 3  # the priority grammar/dl.lark gives a terminal that starts with a letter (FSTRING)
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
    a digit, `_` or `"`, and nothing but a name starts with a letter or `_`, except
    an f-string (`f"..."`): the grammar gives it a priority above every other
    terminal's, and terminals of such a priority are tried before names, as Lark
    tries them (tests/test_parser.py checks the tokens against Lark's own lexer).
    """

    def __init__(self, terminals: list[Terminal], ignore: list[str]) -> None:
        name_pattern = re.compile(next(t for t in terminals if t.name == "NAME").regexp)
        self.keywords = {t.value: t.name for t in terminals if t.is_string and name_pattern.fullmatch(t.value)}
        ordered = sorted(
            (t for t in terminals if t.name not in ignore and t.value not in self.keywords),
            key=lambda t: (-t.priority, -t.max_width, -len(t.value), t.name),
        )
        self.fixed = [t for t in ordered if is_fixed(t)]
        others = [t for t in ordered if not is_fixed(t) and t.name != "NAME"]
        before_names = [t for t in others if t.priority >= STARTS_LIKE_A_NAME]
        # The kind of each fixed string seen, found from `self.fixed` in order on first sight.
        self.fixed_kinds: dict[str, str] = {}
        skipped = "|".join(t.regexp for t in terminals if t.name in ignore)
        groups = [
            *(f"(?P<{t.name}>{t.regexp})" for t in before_names),
            f"(?P<NAME>{name_pattern.pattern})",
            f"(?P<{FIXED}>{'|'.join(t.regexp for t in self.fixed)})",
            *(f"(?P<{t.name}>{t.regexp})" for t in others if t not in before_names),
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
        # a byte order mark at the start (an editor's document holds it; read_source drops a file's) is a blank
        for found in self.regex.finditer(text, 1 if text.startswith("\ufeff") else 0):
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

    def spread(self, tokens: list[Token]) -> list[Token]:
        """`tokens` with each f-string split for highlighting (`fstring_tokens`)."""
        spread: list[Token] = []
        for token in tokens:
            spread += self.fstring_tokens(token) if token[0] == "FSTRING" else [token]
        return spread

    def fstring_tokens(self, token: Token) -> list[Token]:
        """An f-string token split for highlighting: its text, braces and specs as STRING tokens, each field's
        expression as the tokens it is, where they are. A malformed f-string stays one STRING token."""
        _, text, line, column = token
        try:
            fields = [(start, stop) for kind, start, stop in fstring_pieces(text) if kind == "field"]
        except FStringError:
            return [("STRING", text, line, column)]
        split: list[Token] = []
        position = 0
        for start, stop in fields:
            split.append(("STRING", text[position:start], line, column + position))
            try:
                inner = self.scan(text[start:stop], "<f-string>")
            except DiagnosticError:
                inner = [("STRING", text[start:stop], 1, 1)]
            split += [(kind, value, line, column + start + at - 1) for kind, value, _, at in inner]
            position = stop
        split.append(("STRING", text[position:], line, column + position))
        return [piece for piece in split if piece[1]]

    def fixed_kind(self, value: str) -> str:
        # A fixed string is compared, not matched: only the few regular expressions are compiled.
        kind = next(t.name for t in self.fixed if (t.value == value if t.is_string else re.fullmatch(t.regexp, value)))
        self.fixed_kinds[value] = kind
        return kind


def is_fixed(terminal: Terminal) -> bool:
    """A terminal that matches a few fixed strings (`(`, `**`, `==` or `!=`, ...), not an open-ended pattern."""
    return terminal.is_string or terminal.max_width <= 3


def unexpected_character(text: str, position: int, line: int, column: int, path: str) -> Diagnostic:
    char = text[position]
    span = Span(path, line, column, line, column + 1)
    if char == '"':
        end_of_line = text.find("\n", position)
        end_of_line = len(text) if end_of_line < 0 else end_of_line
        span = Span(path, line, column, line, column + end_of_line - position)
        return error("E0106", "unterminated string literal", span, 'this string has no closing `"` on its line')
    from dl.lang.habits import CHARACTERS  # (only a mistake needs it)

    notes = (CHARACTERS[char],) if char in CHARACTERS else ()
    if not notes and not char.isascii() and f"_{char}".isidentifier():  # a letter Python would take in a name
        notes = ("help: names are ASCII: letters `A`-`Z`, `a`-`z`, digits and `_`",)
    if not char.isprintable() or char.isspace():
        char = f"U+{ord(char):04X}"  # (an invisible one, named)
    return error("E0101", f"unexpected character `{char}`", span, "not part of any DL token", notes=notes)


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


# ---------------------------------------------------------------------- f-strings


class FStringError(Exception):
    """A malformed f-string: E0108 at `start`..`stop`, offsets into the token's text."""

    def __init__(self, message: str, start: int, stop: int, label: str, help_text: str) -> None:
        super().__init__(message)
        self.start, self.stop, self.label, self.help = start, stop, label, help_text


OPENING_BRACKETS, CLOSING_BRACKETS = "([{", ")]}"


def fstring_pieces(text: str) -> list[tuple[str, int, int]]:
    """The pieces of an f-string token's `text` (`f"..."`), as (kind, start, stop) offsets into it, in
    order: "text" (literal: escapes and doubled braces still as written), "field" (the expression between
    `{` and `}` or a top-level `:`) and "spec" (after that `:`). The quotes, the braces and the `:` belong
    to no piece. Raises `FStringError`."""
    pieces: list[tuple[str, int, int]] = []
    end = len(text) - 1  # the closing quote
    position = literal = 2
    while position < end:
        char = text[position]
        if char == "\\" or (char in "{}" and text[position + 1] == char):
            position += 2  # an escape, `{{` or `}}`: literal text
        elif char == "}":
            raise FStringError(
                "single `}` in an f-string", position, position + 1, "no field ends here", "write `}}` for a `}`"
            )
        elif char == "{":
            if literal < position:
                pieces.append(("text", literal, position))
            position = literal = field_pieces(text, position, end, pieces)
        else:
            position += 1
    if literal < end:
        pieces.append(("text", literal, end))
    return pieces


def field_pieces(text: str, opening: int, end: int, pieces: list[tuple[str, int, int]]) -> int:
    """Append the field that starts with the `{` at `opening` (and its spec); returns where the text after
    its `}` starts."""
    depth, position = 0, opening + 1
    while position < end:
        char = text[position]
        if char in OPENING_BRACKETS:
            depth += 1
        elif char in CLOSING_BRACKETS and depth:
            depth -= 1
        elif char == "}" or (char == ":" and depth == 0):
            break
        elif char == "!" and depth == 0 and text[position + 1] != "=":
            raise FStringError(
                f"`{text[position : position + 2]}` conversions are not part of DL's f-strings",
                position,
                position + 2,
                "a conversion",
                "format with a spec after `:` (`{x:>8}`), or convert with `str(x)`",
            )
        position += 1
    if position >= end:
        raise unclosed_field(opening)
    if not text[opening + 1 : position].strip():
        raise FStringError(
            "empty field in an f-string",
            opening,
            position + 1,
            "no expression",
            "put an expression between the braces, or write `{{}}` for the braces themselves",
        )
    pieces.append(("field", opening + 1, position))
    if text[position] == "}":
        return position + 1
    closing = text.find("}", position, end)
    if closing < 0:
        raise unclosed_field(opening)
    nested = text.find("{", position, closing)
    if nested >= 0:
        raise FStringError(
            "a field inside a format spec is not supported",
            nested,
            nested + 1,
            "a field in the spec",
            "write the spec out in full: `{x:>8.4f}`",
        )
    pieces.append(("spec", position + 1, closing))
    return closing + 1


def unclosed_field(opening: int) -> FStringError:
    return FStringError(
        "unclosed `{` in an f-string", opening, opening + 1, "this field has no `}`", "write `{{` for a `{`"
    )
