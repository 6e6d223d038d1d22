"""The pipeline in one place: load (parse + imports) -> check -> run on a backend.

The CLI, the REPL and the language server call these functions; none of them
re-implements a step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dl import lang
from dl.interp import run as interpreter
from dl.lang.check import Typed
from dl.lang.check import check as check_program
from dl.lang.diagnostics import DiagnosticError, SourceMap
from dl.lang.modules import Program, load_program, read_source


def load(path: str, source: str | None = None, sources: SourceMap | None = None) -> Program:
    """Parse `path` and its imports. Raises `DiagnosticError`."""
    return load_program(path, source, sources)


def check(program: Program) -> Typed:
    """Check types and shapes of a loaded program. Raises `DiagnosticError` (with warnings too) on an error;
    otherwise returns the typed program, whose `diagnostics` then hold only warnings."""
    typed = check_program(program)
    if typed.errors:
        raise DiagnosticError(typed.diagnostics)
    return typed


def check_file(path: str, sources: SourceMap) -> Typed:
    """Check a file as tools do (`dl.lang.check`): syntax errors are recovered from per declaration, so
    the result holds every diagnostic. Raises `DiagnosticError` only when the file cannot be read."""
    typed = lang.check(read_source(Path(path)), path)
    sources.texts.update(typed.program.sources.texts)
    return typed


def run(program: Program, args: list[str], backend: str = "interp", typed: Typed | None = None) -> Any:
    """Run `main(args...)` of a program on `backend`; it is checked first unless `typed` is given."""
    if backend != "interp":
        raise ValueError(f"unknown backend {backend!r}")
    if typed is None:
        typed = check(program)
    return interpreter.run(program, args, typed)
