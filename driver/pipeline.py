"""The pipeline in one place: load (parse + imports) -> check -> run on a backend.

(Between the check and the backend: dimension names read as values get their `let`s, lang/dimensions.py,
and `grad` is expanded, lang/autodiff/.)

The CLI, the REPL and the language server call these functions; none of them
re-implements a step. Each step runs with room for any tree the parser accepts
(`dl.lang.nesting.in_room`: a thread with a large stack and recursion limit).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from dl import lang
from dl.lang import ast, autodiff, binding
from dl.lang.autodiff import differentiate
from dl.lang.check import Typed
from dl.lang.check import check as check_program
from dl.lang.diagnostics import DiagnosticError, SourceMap
from dl.lang.dimensions import declare_dimensions
from dl.lang.modules import Program, load_program, read_source
from dl.lang.nesting import in_room
from dl.lang.types import ANY, TensorType, TupleType, Type, strong
from dl.runtime import memory
from dl.runtime.backend import Backend, Options, Prepared
from dl.runtime.errors import UsageError


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
    """Check, then replace every `grad` by generated derivative functions (lang/autodiff/): what a
    backend runs. `calls` are the host's calls of entry-module functions, as (name, argument types).
    Raises `DiagnosticError`."""
    return checked_and_prepared(program, calls)[1:]


@in_room
def checked_and_prepared(program: Program, calls: tuple = ()) -> tuple[Typed, Program, Typed]:
    """`prepare`, and first the check of the program as written: its types say `grad(f)` where the
    prepared program's name the functions generated for it (which a later program, the REPL's next
    entry, does not have)."""
    typed = check_program(program, calls)
    if typed.errors:
        raise DiagnosticError(typed.diagnostics)
    derived, derived_typed = differentiate(declare_dimensions(typed, calls), calls)
    derived_typed = derived_typed.with_diagnostics(typed.diagnostics)  # warnings are about the user's code
    return typed, derived, derived_typed


def check_file(path: str, sources: SourceMap) -> Typed:
    """Check a file as tools do (`dl.lang.check`): syntax errors are recovered from per declaration, so
    the result holds every diagnostic. Raises `DiagnosticError` only when the file cannot be read."""
    typed = lang.check(read_source(Path(path)), path)
    sources.texts.update(typed.program.sources.texts)
    return typed


# The backends by name, each a module with a `BACKEND` (runtime/backend.py); imported when first asked for, so
# that a program run on the interpreter never loads llvmlite.
BACKENDS = {"interp": "dl.interp.run", "llvm": "dl.codegen.backend", "cuda": "dl.codegen.cuda"}


def backend(name: str) -> Backend:
    """The backend called `name`. Raises `ValueError` for a name not in `BACKENDS`."""
    known_backend(name)
    return importlib.import_module(BACKENDS[name]).BACKEND


def known_backend(name: str) -> None:
    """Raises `ValueError`, naming the backends there are, unless `name` is one of them (checked by callers from
    Python, such as `dl.load_package`, before their work: a CLI's choices are argparse's)."""
    if name not in BACKENDS:
        names = ", ".join(f"{known!r}" for known in BACKENDS)
        raise ValueError(f"unknown backend {name!r}: the backends are {names}")


def on_backend(name: str, typed: Typed, cache: bool = True) -> Prepared:
    """The checked program prepared on backend `name`; a compiling backend falls back on the interpreter.
    The process's heap is set to keep freed arrays' memory from here on (runtime/memory.py)."""
    memory.keep_freed_memory()
    fallback = backend("interp") if name != "interp" else None
    return backend(name).prepare(typed, Options(cache=cache, fallback=fallback))


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
    if typed is None:
        program, typed = prepare(program)
    prepared = on_backend(backend, typed, cache)
    if explain is not None and prepared.plan():
        explain(prepared.plan())
    try:
        return prepared.run(args)
    finally:
        if explain is not None and prepared.outcome():
            explain(prepared.outcome())


@in_room
def call(program: Program, name: str, args: list, typed: Typed | None = None, backend: str = "interp") -> Any:
    """Call function `name` of the program's entry module with Python values (numpy arrays, numbers,
    tuples) on `backend`; the program is checked first unless `typed` is given."""
    if typed is None:
        program, typed = prepare(program, ((name, tuple(value_type(a) for a in args)),))
    return on_backend(backend, typed).call(name, args)


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
def derivative_source(
    program: Program,
    function: str,
    wrt: int | tuple[int, ...] | None,
    with_value: bool,
    bindings: dict[str, str] | None = None,
    has_aux: bool = False,
) -> str:
    """The DL source of the functions `grad(function, wrt=..., has_aux=...)` (or `value_and_grad`) generates for the
    entry module's `function` (`wrt` None: the first argument). A function that takes functions is
    differentiated with the ones `bindings` names for its parameters (`{"f": "sq", "df": "nn.relu"}`), and
    `wrt` None is then its first other parameter. Raises `DiagnosticError`, and `UsageError` for bindings
    that do not fit."""
    typed = check(program)
    decl = entry_function(program, function)
    takes = binding.function_parameters(typed, decl) if decl is not None else []
    if not takes:
        if bindings:
            raise UsageError(f"`--bind`: `{function}` takes no functions as arguments")
        return autodiff.derivative_source(typed, function, 0 if wrt is None else wrt, with_value, has_aux)
    if not bindings:
        raise DiagnosticError(binding.depends_on_functions(decl, takes))
    check_bindings(function, takes, bindings)
    specialised = binding.bind_functions(decl, {name: function_named(program, f) for name, f in bindings.items()})
    positions = bound_positions(decl, bindings, wrt)
    specialised_typed = check_beside(program, specialised, typed, [p for p in decl.params if p.name not in bindings])
    choice = ", ".join(f"{name} = {value}" for name, value in bindings.items())
    header = f"# the derivative of `{function}` with {choice}, as `{specialised.name}`\n"
    return header + autodiff.derivative_source(specialised_typed, specialised.name, positions, with_value, has_aux)


def entry_function(program: Program, name: str) -> ast.FnDecl | None:
    module = program.modules[program.entry]
    return next((d for d in module.decls if isinstance(d, ast.FnDecl) and d.name == name), None)


def check_bindings(function: str, takes: list[str], bindings: dict[str, str]) -> None:
    """Every parameter that takes a function gets one, and only those. Raises `UsageError`."""
    stray = [name for name in bindings if name not in takes]
    unbound = [name for name in takes if name not in bindings]
    if stray:
        problem = f"`{function}` has no parameter `{stray[0]}` that takes a function"
    elif unbound:
        problem = f"give every function parameter a function: also {', '.join(f'`{n}`' for n in unbound)}"
    else:
        return
    raise UsageError(f"`--bind`: {problem} (it takes {', '.join(takes)})")


def function_named(program: Program, text: str) -> ast.Expr:
    """`sq` (a function of the entry module) or `nn.relu` (of a module it imports), as an expression.
    Raises `UsageError` for anything else."""
    module_alias, _, name = text.rpartition(".")
    aliases = dict(program.imports.get(program.entry, []))
    if module_alias and module_alias not in aliases:
        raise UsageError(f"`--bind`: `{program.entry}` imports no module `{module_alias}`")
    module = program.modules[aliases[module_alias] if module_alias else program.entry]
    if not any(isinstance(d, ast.FnDecl) and d.name == name for d in module.decls):
        where = f"module `{module_alias}`" if module_alias else f"`{program.entry}`"
        raise UsageError(f"`--bind`: {where} has no function `{name}`")
    return ast.Field(ast.Name(module_alias), name) if module_alias else ast.Name(name)


def bound_positions(decl: ast.FnDecl, bindings: dict, wrt: int | tuple[int, ...] | None) -> int | tuple[int, ...]:
    """`wrt`, positions among all of `decl`'s parameters, as positions among those left unbound."""
    rest = [p.name for p in decl.params if p.name not in bindings]
    if wrt is None:
        return 0
    given = (wrt,) if isinstance(wrt, int) else wrt
    for position in given:
        if not 0 <= position < len(decl.params):
            raise UsageError(f"`--wrt {position}`: `{decl.name}` has {len(decl.params)} parameters")
        name = decl.params[position].name
        if name in bindings:
            raise UsageError(
                f"`--wrt {position}` is `{name}`, the function `--bind` gives; choose among {', '.join(rest)}"
            )
    moved = tuple(rest.index(decl.params[position].name) for position in given)
    return moved[0] if isinstance(wrt, int) else moved


def check_beside(program: Program, specialised: ast.FnDecl, typed: Typed, params: list[ast.Param]) -> Typed:
    """Check `program` with `specialised` added to its entry module, called with the types the program's
    own calls gave the parameters it keeps (`params`, of the function it was made from), where known."""
    entry = program.modules[program.entry]
    modules = {**program.modules, program.entry: replace(entry, decls=(*entry.decls, specialised))}
    known = all(typed.type_of(p) is not None for p in params)
    calls = ((specialised.name, tuple(strong(typed.type_of(p)) for p in params)),) if known else ()
    checked = check_program(replace(program, modules=modules), calls)
    if checked.errors:
        raise DiagnosticError(checked.diagnostics)
    return checked
