"""The interpreter as a backend (runtime/backend.py): `BACKEND.prepare(typed, options)`, then `run` or `call`.

Running compiles every module (interp/compile.py), evaluates module constants,
and calls `main` with the command-line arguments as strings.
A failure of the user's program raises `DiagnosticError` carrying the run-time
diagnostic, with the DL call stack in its notes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from dl.interp.compile import Compiler
from dl.interp.operators import complete_arguments
from dl.interp.primitives import SUPPORT
from dl.lang import ast
from dl.lang.check import Typed
from dl.lang.diagnostics import UNKNOWN_SPAN, Diagnostic, DiagnosticError, Span, closest, error
from dl.lang.modules import Program
from dl.lang.nesting import with_room
from dl.runtime.arrays import NUMPY, ArrayModule, to_device, to_host
from dl.runtime.backend import NOT_COMPILED, CompiledBody, Options
from dl.runtime.calls import Function, invoke
from dl.runtime.errors import STACK, DeepRecursion, RunError, UsageError, recursion_error
from dl.runtime.metrics import Metrics, Progress
from dl.runtime.randomness import RandomSource


def compile_program(
    program: Program,
    typed: Typed | None = None,
    bodies: dict[int, CompiledBody] | None = None,
    constants: dict | None = None,
    arrays: ArrayModule = NUMPY,
) -> Compiler:
    """Compile every module; `typed` (the checker's result) adds literal dtypes and run-time annotation checks;
    `bodies`, `constants` and `arrays` are the backend options of those names (runtime/backend.py)."""
    compiler = Compiler(program, typed, bodies, constants, arrays)
    compiler.compile_program()
    return compiler


class Interpreted:
    """A program prepared on the interpreter: each `run` or `call` compiles it to closures (module constants
    evaluated then, with fresh random streams) and calls into it."""

    def __init__(self, typed: Typed, options: Options) -> None:
        self.typed, self.options = typed, options
        self.for_calls: Compiler | None = None  # compiled once for `call`: a host calling a function repeatedly
        self.directs: dict[str, Any] = {}  # by function name: its compiled body's `direct`, or None

    def compiled(self) -> Compiler:
        if self.options.fresh_random:
            RandomSource.reset()
        # Module constants run while compiling: give them the same room and guards as `main`.
        return run_guarded(
            lambda: compile_program(
                self.typed.program, self.typed, self.options.bodies, self.options.constants, self.options.arrays
            )
        )

    def run(self, args: list[str]) -> Any:
        """Run `main(args...)`; returns what `main` returns."""
        program = self.typed.program
        Metrics.reset()
        Progress.reset()
        compiler = self.compiled()
        main = compiler.states[program.entry].cells.get("main")
        if main is None or not isinstance(main.value, Function):
            raise DiagnosticError(missing_main(program))
        function = main.value
        most = len(function.params)
        fewest = most - sum(default is not None for default in function.defaults)
        if not fewest <= len(args) <= most:
            expected = f"{most}" if fewest == most else f"{fewest} to {most}"
            # `dlrun train.dl --backend llvm`: what follows the file is `main`'s
            first = next((k for k, arg in enumerate(args) if arg.startswith("--")), None)
            options = " ".join(args[first:]) if first is not None else ""
            hint = f" (dlrun's options go before the file: `dlrun {options} FILE.dl`)" if options else ""
            raise UsageError(
                f"`main` takes {expected} argument{'s' * (most != 1)}, {len(args)} given on the command line{hint}"
            )
        return self.to_host(
            run_guarded(
                lambda: invoke(function, complete_arguments(function, list(args), {}, function.span), function.span)
            )
        )

    def call(self, name: str, args: list, to_host: bool = True) -> Any:
        """Call the entry module's function `name` with run-time values (numpy arrays, Python numbers, tuples; on a
        device array module copied to the device, and the result back unless `to_host` is false: then its tensors
        stay in the device's memory, and passing them to the next call moves nothing). The program is compiled (its
        constants evaluated) at the first call only: a constant is a value, the same at every call, and compiling
        again would cost the host more than a small function's call. A function compiled by another backend for these
        arguments runs on the caller's thread (`direct`)."""
        program = self.typed.program
        if self.for_calls is None:
            self.for_calls = self.compiled()
        elif self.options.fresh_random:
            RandomSource.reset()
        cell = self.for_calls.states[program.entry].cells.get(name)
        if cell is None or not isinstance(cell.value, Function):
            raise UsageError(f"`{program.entry}` has no function `{name}`")
        if not self.options.arrays.on_host:
            args = [to_device(arg, self.options.arrays) for arg in args]
        direct = self.direct_call(name)
        if direct is not None:
            try:
                result = direct(list(args))
            except RunError as failure:
                raise DiagnosticError(failure.diagnostic) from None
            if result is not NOT_COMPILED:
                return self.to_host(result) if to_host else result
        function = cell.value
        result = run_guarded(lambda: invoke(function, list(args), function.span))
        return self.to_host(result) if to_host else result

    def caller(self, name: str) -> Callable[[list], Any]:
        """`lambda args: self.call(name, args)` for a host that calls `name` again and again (a model package):
        where a compiled body runs `name` on the caller's thread, it is looked up once, not at every call."""
        direct = self.direct_call(name) if self.options.arrays.on_host else None
        if direct is None:
            return lambda args: self.call(name, args)

        def call(args: list) -> Any:
            if self.for_calls is None:  # the first call compiles the program and checks `name`
                return self.call(name, args)
            try:
                result = direct(args)
            except RunError as failure:
                raise DiagnosticError(failure.diagnostic) from None
            return self.call(name, args) if result is NOT_COMPILED else result

        return call

    def to_host(self, result: Any) -> Any:
        """A result as the host takes it: on a device array module, its tensors copied to the host."""
        return result if self.options.arrays.on_host else to_host(result)

    def direct_call(self, name: str):
        """The compiled body's `direct` of the entry module's function `name`, if it has one and nothing is
        checked around it at run time (an annotation the checker could not prove is checked by our body)."""
        if name not in self.directs:
            self.directs[name] = self.compiled_direct(name)
        return self.directs[name]

    def compiled_direct(self, name: str):
        decl = next(
            (d for d in self.typed.program.modules[self.typed.program.entry].decls if getattr(d, "name", None) == name),
            None,
        )
        compiled = self.options.bodies.get(id(decl)) if isinstance(decl, ast.FnDecl) else None
        if compiled is None or id(decl) in self.typed.checked_calls:
            return None
        return compiled.direct

    def plan(self) -> str:
        return ""

    def outcome(self) -> str:
        return ""


class Interpreter:
    """The tree-walking interpreter as a backend: it runs every primitive (its `SUPPORT`)."""

    name = "interp"
    support = SUPPORT

    def prepare(self, typed: Typed, options: Options | None = None) -> Interpreted:
        return Interpreted(typed, options or Options())


BACKEND = Interpreter()


def missing_main(program: Program) -> Diagnostic:
    """E0405 at the function most likely meant to be `main` (a near spelling), else the first declaration."""
    decls = program.modules[program.entry].decls
    functions = {decl.name: decl for decl in decls if isinstance(decl, ast.FnDecl)}
    meant = closest("main", functions)
    from difflib import SequenceMatcher  # imported here, as diagnostics.closest imports difflib

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
