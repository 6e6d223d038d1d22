"""The interpreter as a backend (runtime/backend.py): `BACKEND.prepare(typed, options)`, then `run` or `call`.

Running compiles every module (interp/compile.py), evaluates module constants,
and calls `main` with the command-line arguments as strings.
A failure of the user's program raises `DiagnosticError` carrying the run-time
diagnostic, with the DL call stack in its notes.
"""

from __future__ import annotations

import ctypes
import queue
import sys
import threading
from difflib import SequenceMatcher
from typing import Any

import numpy as np
from dl.interp.compile import Compiler
from dl.interp.operators import complete_arguments
from dl.interp.primitives import SUPPORT, RandomSource
from dl.lang import ast
from dl.lang.check import Typed
from dl.lang.diagnostics import UNKNOWN_SPAN, Diagnostic, DiagnosticError, Span, closest, error
from dl.lang.modules import Program
from dl.runtime.arrays import NUMPY, ArrayModule, to_device, to_host
from dl.runtime.backend import NOT_COMPILED, CompiledBody, Options
from dl.runtime.calls import Function, invoke
from dl.runtime.errors import STACK, DeepRecursion, RunError, UsageError, recursion_error
from dl.runtime.interrupts import interrupt_everything
from dl.runtime.metrics import Metrics, Progress

# Deep DL recursion nests a few Python frames per call: give it room, on a
# thread whose C stack is large enough for that depth.
RECURSION_LIMIT = 200_000
THREAD_STACK_BYTES = 1024 * 1024 * 1024


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
            raise UsageError(
                f"`main` takes {expected} argument{'s' * (most != 1)}, {len(args)} given on the command line"
            )
        return self.to_host(
            run_guarded(
                lambda: invoke(function, complete_arguments(function, list(args), {}, function.span), function.span)
            )
        )

    def call(self, name: str, args: list) -> Any:
        """Call the entry module's function `name` with run-time values (numpy arrays, Python numbers, tuples; on a
        device array module copied to the device, and the result back). The program is compiled (its constants
        evaluated) at the first call only: a constant is a value, the same at every call, and compiling again
        would cost the host more than a small function's call. A function compiled by another backend for these
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
                return self.to_host(result)
        function = cell.value
        return self.to_host(run_guarded(lambda: invoke(function, list(args), function.span)))

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


def run_guarded(action) -> Any:
    """Run `action` with deep recursion allowed; user failures become `DiagnosticError`. It runs on the DL
    worker thread (`Worker`), started once with a C stack large enough for deep recursion; Ctrl-C on the
    calling thread stops it there too."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            with np.errstate(all="ignore"):
                outcome["value"] = action()
        except RunError as failure:
            outcome["error"] = DiagnosticError(failure.diagnostic)
        except DeepRecursion as failure:  # the stack as it was at the innermost call
            outcome["error"] = DiagnosticError(recursion_error(failure.args[0], UNKNOWN_SPAN))
        except RecursionError:  # outside any DL call
            outcome["error"] = DiagnosticError(recursion_error(STACK.copy(), UNKNOWN_SPAN))
        except BaseException as failure:  # carried to the caller's thread, re-raised there
            outcome["exception"] = failure
        finally:
            STACK.clear()

    previous_limit = sys.getrecursionlimit()
    sys.setrecursionlimit(RECURSION_LIMIT)
    try:
        if WORKER.is_current():  # a guarded action inside another: already on the worker
            target()
        else:
            WORKER.run(target)
    finally:
        sys.setrecursionlimit(previous_limit)
    if "exception" in outcome:
        raise outcome["exception"]
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


class Worker:
    """The thread DL code runs on: started at the first guarded action, with a large C stack, and reused by
    every later one, so that a host calling a small function often (`dl.load_package`) pays a hand-over
    between threads per call, not a thread's start and end. After Ctrl-C the interrupted worker is left to
    end and the next action starts a new one, so an interrupt never reaches an action it was not meant for."""

    def __init__(self) -> None:
        self.requests: queue.SimpleQueue | None = None  # the current worker's
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()

    @staticmethod
    def is_current() -> bool:
        return getattr(ON_WORKER, "active", False)

    def run(self, target) -> None:
        """Run `target` on the worker and wait for it; Ctrl-C meanwhile interrupts it (and is raised here)."""
        done = threading.Event()
        thread, requests = self.started()
        requests.put((target, done))
        try:
            while not done.wait(0.1):
                pass
        except KeyboardInterrupt:  # Ctrl-C reaches the main thread only: stop the program too
            self.interrupt(thread, requests, done)
            raise

    def started(self) -> tuple[threading.Thread, queue.SimpleQueue]:
        with self.lock:
            if self.thread is None or not self.thread.is_alive():
                self.requests = queue.SimpleQueue()
                previous_stack = threading.stack_size()
                threading.stack_size(THREAD_STACK_BYTES)
                try:
                    self.thread = threading.Thread(target=serve, args=(self.requests,), name="dl-main", daemon=True)
                    self.thread.start()
                finally:
                    threading.stack_size(previous_stack)
            return self.thread, self.requests

    def interrupt(self, thread: threading.Thread, requests: queue.SimpleQueue, done: threading.Event) -> None:
        """Raise `KeyboardInterrupt` in the worker, and wait until the interrupted action has ended.

        The exception is raised asynchronously (`PyThreadState_SetAsyncExc`): the worker sees it at its next
        Python bytecode, so a loop stops at once and a long numpy call stops when it returns. Without this the
        program would keep running in the background after Ctrl-C, which matters where the process goes on
        (the REPL). The worker is retired: it ends once idle, and the next action starts another."""
        with self.lock:
            if self.thread is thread:
                self.thread = self.requests = None
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(KeyboardInterrupt))
        interrupt_everything()  # compiled loops poll a flag
        while not done.wait(0.1) and thread.is_alive():
            pass
        requests.put(None)


ON_WORKER = threading.local()
RUNNING = [0]  # how many actions are running on workers now (an interrupted one may still be ending)
COUNTING = threading.Lock()


def running() -> bool:
    """Whether DL code is running on a worker now."""
    return RUNNING[0] > 0


def serve(requests: queue.SimpleQueue) -> None:
    """A worker's loop: run each action it is given until it is given None (or an interrupt ends it)."""
    ON_WORKER.active = True
    while True:
        request = requests.get()
        if request is None:
            return
        target, done = request
        with COUNTING:
            RUNNING[0] += 1
        try:
            target()
        finally:
            with COUNTING:
                RUNNING[0] -= 1
            done.set()


WORKER = Worker()
