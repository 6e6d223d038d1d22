"""Running a program on the interpreter: compile to closures, then call `main`.

`run(program, args)` compiles every module (interp/compile.py), evaluates
module constants, and calls `main` with the command-line arguments as strings.
A failure of the user's program raises `DiagnosticError` carrying the run-time
diagnostic, with the DL call stack in its notes.
"""

from __future__ import annotations

from collections.abc import Callable
from difflib import SequenceMatcher
from typing import Any

import numpy as np
from dl.interp.compile import Compiler
from dl.interp.metrics import Metrics, Progress
from dl.interp.primitives import RandomSource
from dl.interp.runtime import STACK, DeepRecursion, Function, RunError, complete_arguments, invoke, recursion_error
from dl.lang import ast
from dl.lang.check import Typed
from dl.lang.diagnostics import UNKNOWN_SPAN, Diagnostic, DiagnosticError, Span, error
from dl.lang.modules import Program
from dl.lang.nesting import with_room
from dl.lang.primitives import closest


def compile_program(program: Program, typed: Typed | None = None, native: dict | None = None) -> Compiler:
    """Compile every module; `typed` (the checker's result) adds literal dtypes and run-time annotation checks;
    `native` maps ids of function declarations to bodies compiled to native code, used in place of ours."""
    compiler = Compiler(program, typed, native)
    compiler.compile_program()
    return compiler


def run(program: Program, args: list[str], typed: Typed | None = None, native: dict | None = None) -> Any:
    """Compile and run `main(args...)`; returns what `main` returns. `native`: see `compile_program`."""
    RandomSource.reset()
    Metrics.reset(Metrics.path)
    Progress.reset()
    # Module constants run while compiling: give them the same room and guards as `main`.
    compiler = run_guarded(lambda: compile_program(program, typed, native))
    state = compiler.states[program.entry]
    main = state.cells.get("main")
    if main is None or not isinstance(main.value, Function):
        raise DiagnosticError(missing_main(program))
    function = main.value
    most = len(function.params)
    fewest = most - sum(default is not None for default in function.defaults)
    if not fewest <= len(args) <= most:
        expected = f"{most}" if fewest == most else f"{fewest} to {most}"
        raise UsageError(f"`main` takes {expected} argument{'s' * (most != 1)}, {len(args)} given on the command line")
    return run_guarded(
        lambda: invoke(function, complete_arguments(function, list(args), {}, function.span), function.span)
    )


def call(program: Program, name: str, args: list, typed: Typed | None = None, native: dict | None = None) -> Any:
    """Compile the program and call its entry module's function `name` with Python values (numpy arrays,
    Python numbers, tuples) as arguments; returns its result. For tests and embedding."""
    RandomSource.reset()
    compiler = run_guarded(lambda: compile_program(program, typed, native))
    cell = compiler.states[program.entry].cells.get(name)
    if cell is None or not isinstance(cell.value, Function):
        raise UsageError(f"`{program.entry}` has no function `{name}`")
    function = cell.value
    return run_guarded(lambda: invoke(function, list(args), function.span))


def missing_main(program: Program) -> Diagnostic:
    """E0405 at the function most likely meant to be `main` (a near spelling), else the first declaration."""
    decls = program.modules[program.entry].decls
    functions = {decl.name: decl for decl in decls if isinstance(decl, ast.FnDecl)}
    meant = closest("main", functions)
    if meant is not None and SequenceMatcher(None, "main", meant).ratio() >= 0.75:  # `mian`, `mainn`; not `train`
        return error(
            "E0405",
            f"`{program.entry}` has no `main` function",
            functions[meant].name_span,
            notes=(f"help: did you mean `main`? `dlrun` calls `main`, not `{meant}`",),
        )
    where = decls[0].span if decls else Span(program.entry, 1, 1, 1, 1)
    return error(
        "E0405",
        f"`{program.entry}` has no `main` function",
        Span(where.path, where.line, where.column, where.line, where.column + 1),
        notes=("help: add `fn main() { ... }`; `dlrun` calls it",),
    )


class UsageError(Exception):
    """The command line does not fit the program (exit status 2)."""


def run_guarded(action: Callable[[], Any]) -> Any:
    """Run `action` with deep recursion allowed (`dl.lang.nesting.with_room`: a thread with a large stack,
    where Ctrl-C stops it too); user failures become `DiagnosticError`."""

    def translated() -> Any:
        try:
            with np.errstate(all="ignore"):
                return action()
        except RunError as failure:
            raise DiagnosticError(failure.diagnostic) from None
        except DeepRecursion as failure:  # the stack as it was at the innermost call
            raise DiagnosticError(recursion_error(failure.args[0], UNKNOWN_SPAN)) from None
        except RecursionError:  # outside any DL call
            raise DiagnosticError(recursion_error(STACK.copy(), UNKNOWN_SPAN)) from None
        finally:
            STACK.clear()

    return with_room(translated)
