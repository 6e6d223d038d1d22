"""The pipeline in one place: load (parse + imports) -> check -> run on a backend.

The CLI, the REPL and the language server call these functions; none of them
re-implements a step. Each step runs with room for any tree the parser accepts
(`dl.lang.nesting.in_room`: a thread with a large stack and recursion limit).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from dl import lang
from dl.interp import run as interpreter
from dl.lang import autodiff
from dl.lang.autodiff import differentiate
from dl.lang.check import Typed
from dl.lang.check import check as check_program
from dl.lang.diagnostics import DiagnosticError, SourceMap
from dl.lang.modules import Program, load_program, read_source
from dl.lang.nesting import in_room
from dl.lang.types import ANY, TensorType, TupleType, Type


def load(path: str, source: str | None = None, sources: SourceMap | None = None) -> Program:
    """Parse `path` and its imports. Raises `DiagnosticError`."""
    return load_program(path, source, sources)


@in_room
def check(program: Program) -> Typed:
    """Check types and shapes of a loaded program. Raises `DiagnosticError` (with warnings too) on an error;
    otherwise returns the typed program, whose `diagnostics` then hold only warnings."""
    typed = check_program(program)
    if typed.errors:
        raise DiagnosticError(typed.diagnostics)
    return typed


@in_room
def prepare(program: Program, calls: tuple = ()) -> tuple[Program, Typed]:
    """Check, then replace every `grad` by generated derivative functions (lang/autodiff.py): what a
    backend runs. `calls` are the host's calls of entry-module functions, as (name, argument types).
    Raises `DiagnosticError`."""
    typed = check_program(program, calls)
    if typed.errors:
        raise DiagnosticError(typed.diagnostics)
    derived, derived_typed = differentiate(typed, calls)
    derived_typed.diagnostics = typed.diagnostics  # warnings are about the user's code
    return derived, derived_typed


def check_file(path: str, sources: SourceMap) -> Typed:
    """Check a file as tools do (`dl.lang.check`): syntax errors are recovered from per declaration, so
    the result holds every diagnostic. Raises `DiagnosticError` only when the file cannot be read."""
    typed = lang.check(read_source(Path(path)), path)
    sources.texts.update(typed.program.sources.texts)
    return typed


@in_room
def run(
    program: Program,
    args: list[str],
    backend: str = "interp",
    typed: Typed | None = None,
    explain: Callable[[str], None] | None = None,
    cache: bool = True,
) -> Any:
    """Run `main(args...)` of a program on `backend`; it is checked first unless `typed` is given.

    `llvm` compiles every function it can to native code (codegen/) and interprets the rest; `explain`
    is then given a report of which functions were compiled and why the others were not. `cache`: the
    llvm backend reuses native code from the on-disk compile cache (codegen/cache.py), and stores it there."""
    if backend not in ("interp", "llvm"):
        raise ValueError(f"unknown backend {backend!r}")
    if typed is None:
        program, typed = prepare(program)
    if backend == "interp":
        return interpreter.run(program, args, typed)
    from dl.codegen import native  # imported here: llvmlite is only needed by this backend

    compiled = native.compile_program(typed, cache)
    if explain is not None:
        explain(compiled.explanation())
    try:
        return interpreter.run(program, args, typed, compiled.bodies)
    finally:
        if explain is not None and compiled.specialisations():
            explain(compiled.specialisations())


@in_room
def call(program: Program, name: str, args: list, typed: Typed | None = None) -> Any:
    """Call function `name` of the program's entry module with Python values (numpy arrays, numbers,
    tuples) on the interpreter; the program is checked first unless `typed` is given."""
    if typed is None:
        program, typed = prepare(program, ((name, tuple(value_type(a) for a in args)),))
    return interpreter.call(program, name, args, typed)


def value_type(value: Any) -> Type:
    """The static type of a Python value handed to a DL function (numpy arrays and numbers, tuples)."""
    import numpy as np

    if isinstance(value, tuple):
        return TupleType(tuple(value_type(v) for v in value))
    if isinstance(value, (np.ndarray, np.generic)):
        names = {"float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64", "bool": "bool"}
        dtype = names.get(str(value.dtype))
        if dtype is not None:
            return TensorType(dtype, tuple(int(n) for n in np.shape(value)))
    if isinstance(value, bool):
        return TensorType("bool")
    if isinstance(value, int):
        return TensorType("i64")
    if isinstance(value, float):
        return TensorType("f32")
    return ANY


@in_room
def derivative_source(program: Program, function: str, wrt: int | tuple[int, ...], with_value: bool) -> str:
    """The DL source of the functions `grad(function, wrt=...)` (or `value_and_grad`) generates for the
    entry module's `function`. Raises `DiagnosticError`."""
    return autodiff.derivative_source(check(program), function, wrt, with_value)
