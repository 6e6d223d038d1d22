"""Diagnostics: the one type every pass reports user mistakes with, and its renderer.

A `Diagnostic` has a severity, a code (listed in docs/errors.md), a message, a
primary span with an optional label, labelled secondary spans and notes.
Passes collect diagnostics and keep going where they can; `DiagnosticError`
carries them out of a pass. Only front ends (CLI, REPL, LSP) decide how to show
them; `render` produces the brief's text format.
"""

from __future__ import annotations

from dataclasses import field
from enum import Enum
from typing import NamedTuple

from dl.lang.record import record


class Span(NamedTuple):
    """A region of source: 1-based lines and columns, end column exclusive.

    A named tuple rather than a dataclass: the parser makes one per node, and tuples are
    several times cheaper to build."""

    path: str
    line: int
    column: int
    end_line: int
    end_column: int

    def to(self, other: Span) -> Span:
        """The span from the start of `self` to the end of `other`."""
        return Span(self.path, self.line, self.column, other.end_line, other.end_column)

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.column}"


UNKNOWN_SPAN = Span("<unknown>", 1, 1, 1, 1)


class Severity(Enum):
    ERROR = "error"
    WARNING = "warning"


@record(frozen=True, slots=True)
class Label:
    span: Span
    text: str


@record(frozen=True, slots=True)
class Diagnostic:
    code: str
    message: str
    span: Span
    label: str = ""
    severity: Severity = Severity.ERROR
    secondary: tuple[Label, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def is_error(self) -> bool:
        return self.severity is Severity.ERROR


def error(
    code: str,
    message: str,
    span: Span,
    label: str = "",
    *,
    notes: tuple[str, ...] = (),
    secondary: tuple[Label, ...] = (),
) -> Diagnostic:
    return Diagnostic(code, message, span, label, Severity.ERROR, secondary, notes)


def warning(code: str, message: str, span: Span, label: str = "", *, notes: tuple[str, ...] = ()) -> Diagnostic:
    return Diagnostic(code, message, span, label, Severity.WARNING, (), notes)


class DiagnosticError(Exception):
    """Carries one or more diagnostics out of a pass. Caught from Python (`dl.load_package`), its `code` is
    the first diagnostic's and its text is `CODE: message`, so that a traceback or a log line says which."""

    def __init__(self, diagnostics: list[Diagnostic] | Diagnostic):
        if isinstance(diagnostics, Diagnostic):
            diagnostics = [diagnostics]
        self.diagnostics = list(diagnostics)
        super().__init__(self.diagnostics[0].message if self.diagnostics else "diagnostics")

    @property
    def code(self) -> str | None:
        """The first diagnostic's code (`E0604`), or None when there is none."""
        return self.diagnostics[0].code if self.diagnostics else None

    def __str__(self) -> str:
        if not self.diagnostics:
            return "diagnostics"
        first = self.diagnostics[0]
        more = len(self.diagnostics) - 1
        return f"{first.code}: {first.message}" + (f" (and {more} more diagnostic{'s' * (more > 1)})" if more else "")


@record
class SourceMap:
    """Source text by path, so the renderer can show the offending lines."""

    texts: dict[str, str] = field(default_factory=dict)

    def add(self, path: str, text: str) -> None:
        self.texts[path] = text

    def line(self, path: str, number: int) -> str | None:
        text = self.texts.get(path)
        if text is None:
            return None
        lines = text.splitlines()
        if 1 <= number <= len(lines):
            return lines[number - 1]
        return "" if number == len(lines) + 1 else None


def display_column(line: str, column: int) -> int:
    """The 1-based column where character `column` of `line` appears once tabs are expanded."""
    return len(line[: column - 1].expandtabs(TAB_WIDTH)) + 1


TAB_WIDTH = 4
# A source line longer than this (generated code, a minified table, a pasted tensor) is shown as a window of
# this many characters, `CONTEXT` of them before the label, cut off with `...`.
LONG_LINE = 160
CONTEXT = 60


def window(expanded: str, start: int) -> tuple[str, int]:
    """The part of a tab-expanded source line to show around display column `start`, and how far the columns
    shown are moved left (a column `c` of the line is shown at `c - moved`)."""
    if len(expanded) <= LONG_LINE:
        return expanded, 0
    cut = max(0, min(start - 1 - CONTEXT, len(expanded) - LONG_LINE))
    head = "..." if cut else ""
    tail = "..." if cut + LONG_LINE < len(expanded) else ""
    return head + expanded[cut : cut + LONG_LINE] + tail, cut - len(head)


def render(diagnostic: Diagnostic, sources: SourceMap) -> str:
    """Render one diagnostic in the brief's format (no trailing newline)."""
    span = diagnostic.span
    lines = [f"{diagnostic.severity.value}[{diagnostic.code}]: {diagnostic.message}"]
    shown = [Label(span, diagnostic.label), *diagnostic.secondary]
    width = max(len(str(label.span.line)) for label in shown)
    pad = " " * width
    lines.append(f"{pad}--> {span}")
    previous: Span | None = None
    moved, shown_width = 0, 0
    for index, label in enumerate(shown):
        source_line = sources.line(label.span.path, label.span.line)
        if source_line is None:
            if index > 0:
                lines.append(f"{pad}  = note: {label.text} (at {label.span})")
            continue
        if index > 0 and label.span.path != span.path:
            lines.append(f"{pad}::: {label.span}")
        marker = "^" if index == 0 else "-"
        same_line = previous is not None and (previous.path, previous.line) == (label.span.path, label.span.line)
        start = display_column(source_line, label.span.column)
        if not same_line:  # a second label on a shown line only adds its marker line
            text, moved = window(source_line.expandtabs(TAB_WIDTH), start)
            shown_width = len(text)
            lines.append(f"{pad} |")
            lines.append(f"{str(label.span.line).rjust(width)} | {text}")
        end_column = label.span.end_column if label.span.end_line == label.span.line else len(source_line) + 1
        end = display_column(source_line, end_column)
        start, end = max(1, start - moved), min(max(1, end - moved), shown_width + 1)
        caret = " " * (start - 1) + marker * max(1, end - start)
        lines.append(f"{pad} | {caret}{' ' + label.text if label.text else ''}".rstrip())
        previous = label.span
    for note in diagnostic.notes:
        note_lines = labelled(note).splitlines() or [""]
        lines.append(f"{pad} = {note_lines[0]}")
        lines.extend(f"{pad}   {rest}" for rest in note_lines[1:])
    return "\n".join(lines)


def labelled(note: str) -> str:
    """A note as shown: `help: ...` and `note: ...` as written, any other text as a `note:`."""
    return note if note.startswith(("help:", "note:")) else f"note: {note}"


def render_all(diagnostics: list[Diagnostic], sources: SourceMap) -> str:
    return "\n\n".join(render(d, sources) for d in diagnostics)


def closest(name: str, candidates) -> str | None:
    """The candidate most like `name`, if any is close enough to suggest: a near spelling, the same
    letters swapped (`rl` for `lr`), or the name other frameworks use for it (`dim` for `axis`)."""
    candidates = list(candidates)
    alias = ALIASES.get(name)
    if alias in candidates:
        return alias
    swapped = [c for c in candidates if len(c) == len(name) and sorted(c) == sorted(name) and c != name]
    if swapped:
        return swapped[0]
    import difflib  # imported here: only a misspelled name needs it

    matches = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return matches[0] if matches else None


# What PyTorch and numpy users type, and DL's name for it.
ALIASES = {
    "dim": "axis",
    "dims": "axis",
    "keepdim": "keepdims",
    "axes": "axis",
    "generator": "seed",
    "random_state": "seed",
    "ddof": "correction",  # numpy's var and std
    "unbiased": "correction",  # torch's older var and std
}
