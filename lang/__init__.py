"""DL's front end: parsing, diagnostics, the AST, the checker and autodiff.

`dl.lang.check(source, path)` is the entry point for tools that need types
while the user types (the REPL, the language server): it parses, loads
imports relative to `path` and checks, and never raises for a user mistake.
It runs with room for any tree the parser accepts (lang/nesting.py).
"""

from __future__ import annotations

import gc
import re
from collections.abc import Iterator
from contextlib import contextmanager

from dl.lang import check as _check_module
from dl.lang.diagnostics import Diagnostic, DiagnosticError, SourceMap, Span, error
from dl.lang.modules import Program, load_program
from dl.lang.nesting import in_room
from dl.lang.parse import Recovered
from dl.lang.types import GradientRef

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
    with collecting_rarely():
        sources = SourceMap()
        recovered: list[Recovered] = []
        try:
            program = load_program(path, source, sources, recovered)
        except DiagnosticError as failure:
            return unloaded(path, sources, recovered[0].diagnostics if recovered else [], failure)
        return settle(_check_module.check(program), recovered[0].diagnostics, recovered[0].broken_names)


def unloaded(path: str, sources: SourceMap, syntax: list[Diagnostic], failure: DiagnosticError) -> Typed:
    """The result for a file whose imports could not be loaded: no modules, and why."""
    return Typed(Program(entry=path, sources=sources), diagnostics=(*syntax, *failure.diagnostics))


def settle(typed: Typed, syntax: list[Diagnostic], broken: frozenset[str]) -> Typed:
    """The checked program with what `check` adds: `grad`'s problems when everything else checks, else the
    syntax errors merged in by position, without the unknown names that only broken declarations declare."""
    if not syntax and not typed.errors and uses_grad(typed):
        return typed.with_diagnostics([*typed.diagnostics, *differentiation_problems(typed)])
    if not syntax:
        return typed
    checked = [d for d in typed.diagnostics if not names_a_broken_declaration(d, broken)]
    return typed.with_diagnostics(sorted([*syntax, *checked], key=position))


@contextmanager
def collecting_rarely() -> Iterator[None]:
    """Python's cycle collector runs less often meanwhile. Parsing and checking a large file make millions of
    objects (tree nodes, spans, types) that form no cycles; at the default thresholds the collector's passes
    over them took as long as the parsing and checking themselves (bench/README.md)."""
    before = gc.get_threshold()
    gc.set_threshold(50_000, 20, 20)
    try:
        yield
    finally:
        gc.set_threshold(*before)


def differentiation_problems(typed: Typed) -> list[Diagnostic]:
    """What `grad` cannot differentiate in a program that checks (E0333): found by running the transform."""
    from dl.lang.autodiff import differentiate
    from dl.lang.dimensions import declare_dimensions

    try:
        differentiate(declare_dimensions(typed))
    except DiagnosticError as failure:
        return list(failure.diagnostics)
    except Exception as bug:  # a bug in the transform must not take the tools down with it
        where = Span(typed.program.entry, 1, 1, 1, 1)
        return [error("E0333", f"internal error in `grad`, please report: {type(bug).__name__}: {bug}", where)]
    return []


def uses_grad(typed: Typed) -> bool:
    """Whether the program calls `grad` or `value_and_grad` (else there is nothing to differentiate, and the
    transform need not walk the program to find that out)."""
    return any(isinstance(t, GradientRef) for t in typed.types.values())


UNKNOWN = re.compile(r"unknown (?:name|struct) `([^`]*)`")


def names_a_broken_declaration(diagnostic: Diagnostic, broken: frozenset[str]) -> bool:
    """Whether `diagnostic` says a name is unknown that a declaration which did not parse declares."""
    found = UNKNOWN.match(diagnostic.message) if diagnostic.code in {"E0201", "E0210"} else None
    return found is not None and found.group(1) in broken


def position(diagnostic: Diagnostic) -> tuple[str, int, int]:
    span = diagnostic.span
    return span.path, span.line, span.column


__all__ = ["Typed", "check"]
