"""DL's front end: parsing, diagnostics, the AST, the checker and autodiff.

`dl.lang.check(source, path)` is the entry point for tools that need types
while the user types (the REPL, the language server): it parses, loads
imports relative to `path` and checks, and never raises for a user mistake.
It runs with room for any tree the parser accepts (lang/nesting.py).
"""

from __future__ import annotations

import re

from dl.lang import check as _check_module
from dl.lang.diagnostics import Diagnostic, DiagnosticError, SourceMap, Span, error
from dl.lang.modules import Program, load_program
from dl.lang.nesting import in_room
from dl.lang.parse import Recovered

Typed = _check_module.Typed


@in_room
def check(source: str, path: str = "<input>") -> Typed:
    """Parse, load imports and check `source` (the text of `path`): the typed program and every diagnostic.

    The entry file is parsed with recovery (`dl.lang.parse.recover`): a file being edited
    gets its syntax errors, one per declaration that does not parse, and the checker's
    diagnostics for the declarations that do, all sorted by position. A use of a name that
    only a broken declaration declares is not reported as unknown (E0201, or E0210 for a
    struct): those diagnostics are dropped, as the name will exist once the declaration is
    fixed. When an import cannot be loaded, the result has no modules and its `diagnostics`
    say why (after the syntax errors, if any)."""
    sources = SourceMap()
    recovered: list[Recovered] = []
    try:
        program = load_program(path, source, sources, recovered)
    except DiagnosticError as failure:
        typed = Typed(Program(entry=path, sources=sources))
        typed.diagnostics.extend(recovered[0].diagnostics if recovered else ())
        typed.diagnostics.extend(failure.diagnostics)
        return typed
    typed = _check_module.check(program)
    syntax, broken = recovered[0].diagnostics, recovered[0].broken_names
    if not syntax and not typed.errors:
        typed.diagnostics.extend(differentiation_problems(typed))
    if not syntax:
        return typed
    checked = [d for d in typed.diagnostics if not names_a_broken_declaration(d, broken)]
    typed.diagnostics[:] = sorted([*syntax, *checked], key=position)
    return typed


def differentiation_problems(typed: Typed) -> list[Diagnostic]:
    """What `grad` cannot differentiate in a program that checks (E0333): found by running the transform."""
    from dl.lang.autodiff import differentiate

    try:
        differentiate(typed)
    except DiagnosticError as failure:
        return list(failure.diagnostics)
    except Exception as bug:  # a bug in the transform must not take the tools down with it
        where = Span(typed.program.entry, 1, 1, 1, 1)
        return [error("E0333", f"internal error in `grad`, please report: {type(bug).__name__}: {bug}", where)]
    return []


UNKNOWN = re.compile(r"unknown (?:name|struct) `([^`]*)`")


def names_a_broken_declaration(diagnostic: Diagnostic, broken: frozenset[str]) -> bool:
    """Whether `diagnostic` says a name is unknown that a declaration which did not parse declares."""
    found = UNKNOWN.match(diagnostic.message) if diagnostic.code in {"E0201", "E0210"} else None
    return found is not None and found.group(1) in broken


def position(diagnostic: Diagnostic) -> tuple[str, int, int]:
    span = diagnostic.span
    return span.path, span.line, span.column


__all__ = ["Typed", "check"]
