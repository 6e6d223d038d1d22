"""DL's front end: parsing, diagnostics, the AST, the checker and autodiff.

`dl.lang.check(source, path)` is the entry point for tools that need types
while the user types (the REPL, the language server): it parses, loads
imports relative to `path` and checks, and never raises for a user mistake.
"""

from __future__ import annotations

from dl.lang import check as _check_module
from dl.lang.diagnostics import DiagnosticError, SourceMap
from dl.lang.modules import Program, load_program

Typed = _check_module.Typed


def check(source: str, path: str = "<input>") -> Typed:
    """Parse, load imports and check `source` (the text of `path`): the typed program and every diagnostic.

    When the source does not parse, or an import cannot be loaded, the result has no modules
    and its `diagnostics` say why."""
    sources = SourceMap()
    try:
        program = load_program(path, source, sources)
    except DiagnosticError as failure:
        typed = Typed(Program(entry=path, sources=sources))
        typed.diagnostics.extend(failure.diagnostics)
        return typed
    return _check_module.check(program)


__all__ = ["Typed", "check"]
