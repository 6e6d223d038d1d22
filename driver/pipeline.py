"""The pipeline in one place: load (parse + imports) -> run on a backend.

The CLI, the REPL and the language server call these functions; none of them
re-implements a step.
"""

from __future__ import annotations

from typing import Any

from dl.interp import run as interpreter
from dl.lang.modules import Program, load_program


def load(path: str, source: str | None = None) -> Program:
    """Parse `path` and its imports. Raises `DiagnosticError`."""
    return load_program(path, source)


def check(program: Program) -> None:
    """Check a loaded program without running it. Raises `DiagnosticError`."""
    interpreter.compile_program(program)


def run(program: Program, args: list[str], backend: str = "interp") -> Any:
    """Run `main(args...)` of a loaded program on `backend`."""
    if backend != "interp":
        raise ValueError(f"unknown backend {backend!r}")
    return interpreter.run(program, args)
