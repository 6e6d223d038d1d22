"""How deeply a program may nest, and the room every pass gets to walk a tree that deep.

The passes after the parser (checker, autodiff, formatter, printer, interpreter
compiler, LLVM lowering, the tools' own walks) follow the syntax tree
recursively, a few Python frames per level. Rather than each of them being
rewritten as a loop, two things together keep any input from crashing them:

- `too_deep(nodes)`: the parser refuses a tree that nests more than
  `NESTING_LIMIT` levels (E0109, at the outermost node past the limit). Every
  node counts as a level: expressions, statements, blocks, types, patterns. The
  parser itself never recurses, so it can measure input of any depth.
- `with_room(action)`: runs a pass on a thread whose stack and recursion limit
  hold any tree within the limit, many times over (and deep DL recursion). The
  entry points that run passes (`dl.pipeline`, `dl.lang.check`,
  `format_source`, the interpreter, the CLI, the REPL and the language server)
  call it; a call made from inside runs directly. The threads are kept and
  reused (`Room`), so that a host calling a small DL function often pays a
  hand-over between threads per call, not a thread's start and end.
"""

from __future__ import annotations

import contextvars
import ctypes
import functools
import queue
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from dl.lang import ast
from dl.lang.diagnostics import Diagnostic, error
from dl.runtime.interrupts import interrupt_everything, resume_everything

# Deep enough for code generators (a 1000-term sum inside a function fits), shallow enough that every
# pass walks it in well under a second. Documented in docs/errors.md (E0109) and docs/language.md.
NESTING_LIMIT = 1500

# A pass spends a few Python frames per level (the interpreter a few per DL call, and DL recursion is
# allowed to go deep): room for that, on a thread whose C stack is large enough for the frames that go
# through C (generators, dataclass comparisons).
RECURSION_LIMIT = 200_000
THREAD_STACK_BYTES = 1024 * 1024 * 1024
IDLE_ROOMS_KEPT = 4  # rooms kept for later actions; more are only needed while actions run side by side

T = TypeVar("T")

# ---------------------------------------------------------------------- the limit


def too_deep(nodes: tuple) -> Diagnostic | None:
    """E0109 at the first node (in source order) that lies more than `NESTING_LIMIT` levels deep in
    `nodes` (a module's declarations, a REPL entry's items), or None. Walks with a list, not recursion."""
    waiting: list[tuple[Any, int]] = [(node, 1) for node in reversed(nodes)]
    while waiting:
        node, level = waiting.pop()
        if level > NESTING_LIMIT:
            return nesting_error(node)
        waiting.extend((child, level + 1) for child in reversed(list(ast.children(node))))
    return None


def nesting_error(node: Any) -> Diagnostic:
    return error(
        "E0109",
        f"{kind_of(node)} nested too deeply: more than {NESTING_LIMIT} levels",
        node.span,
        f"this is level {NESTING_LIMIT + 1}",
        notes=(
            f"help: DL allows {NESTING_LIMIT} levels, counting every expression, statement and block; "
            "bind parts to names with `let`, or move them into functions",
        ),
    )


def kind_of(node: Any) -> str:
    """What a node is, in the words of the language reference."""
    if isinstance(node, ast.Expr | ast.Slice | ast.Keyword | ast.FieldInit | ast.Range):
        return "expression"
    if isinstance(node, ast.Block):
        return "block"
    if isinstance(node, ast.TypeExpr | ast.DimLiteral | ast.DimName):
        return "type"
    if isinstance(node, ast.Pattern):
        return "pattern"
    return "statement"


# ---------------------------------------------------------------------- the room

_local = threading.local()  # `inside`: this thread is a room
_stack_size = threading.Lock()  # the stack size of new threads is the process's: one room sets it at a time


def in_room(function: Callable[..., T]) -> Callable[..., T]:
    """`function`, always called through `with_room` (for a pass's entry point)."""

    @functools.wraps(function)
    def called_in_room(*args: Any, **keywords: Any) -> T:
        return with_room(lambda: function(*args, **keywords))

    return called_in_room


def with_room(action: Callable[[], T]) -> T:
    """`action()`, run where deep trees and deep DL recursion fit: on a thread with a large stack, while the
    recursion limit is raised. Its result is returned and its exceptions re-raised here. Ctrl-C (which only
    the main thread receives), or another signal's exception (dlrun's SIGTERM), stops the action too, then is
    re-raised. Called from inside a room, runs
    directly."""
    if getattr(_local, "inside", False):
        return action()
    outcome: dict[str, Any] = {}
    context = contextvars.copy_context()  # a thread runs in a context of its own

    def target() -> None:
        try:
            outcome["value"] = context.run(action)
        except BaseException as failure:  # carried to the caller's thread, re-raised there
            outcome["exception"] = failure

    room = ROOMS.take()
    done = threading.Event()
    room.requests.put((target, done))
    try:
        while not done.wait(0.1):
            pass
    except BaseException:  # only a signal's handler raises here
        room.interrupt(done)
        raise
    ROOMS.give_back(room)
    if "exception" in outcome:
        raise outcome["exception"]
    return outcome["value"]


class Room:
    """A thread with a large C stack that runs the actions it is given, one at a time, until it is given
    None. An interrupted room is retired (never given back), so an interrupt meant for one action never
    reaches another."""

    def __init__(self) -> None:
        self.requests: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self.serve, name="dl-room", daemon=True)
        with _stack_size:
            previous_stack = threading.stack_size(THREAD_STACK_BYTES)
            try:
                self.thread.start()
            finally:
                threading.stack_size(previous_stack)

    def serve(self) -> None:
        _local.inside = True
        try:
            while (request := self.requests.get()) is not None:
                target, done = request
                RUNNING.started()
                try:
                    target()
                finally:
                    RUNNING.ended()
                    done.set()
        except KeyboardInterrupt:  # an interrupt that came after its action ended: the room is retired anyway
            return

    def interrupt(self, done: threading.Event) -> None:
        """Raise `KeyboardInterrupt` in the room, wait until its action has ended, and retire the room.

        The exception is raised asynchronously (`PyThreadState_SetAsyncExc`): the room sees it at its next
        Python bytecode, so a loop stops at once and a long numpy call stops when it returns. Without this the
        action would keep running in the background after Ctrl-C, which matters where the process goes on
        (the REPL)."""
        raised = ctypes.py_object(KeyboardInterrupt)
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.thread.ident), raised)
        interrupt_everything()  # compiled loops poll a flag
        while not done.wait(0.1) and self.thread.is_alive():
            pass
        resume_everything()  # flags no running code saw would stop the next action at once
        self.requests.put(None)


class Rooms:
    """The idle rooms: an action takes one (or starts one when none is idle, as when the language server
    analyses a document while answering a request) and gives it back when it ends."""

    def __init__(self) -> None:
        self.idle: list[Room] = []
        self.lock = threading.Lock()

    def take(self) -> Room:
        with self.lock:
            while self.idle:
                room = self.idle.pop()
                if room.thread.is_alive():
                    return room
        return Room()

    def give_back(self, room: Room) -> None:
        with self.lock:
            if len(self.idle) < IDLE_ROOMS_KEPT:
                self.idle.append(room)
                return
        room.requests.put(None)


class Running:
    """How many actions run in rooms now (an interrupted one may still be ending); the recursion limit is
    raised while any does, and put back when the last one ends."""

    def __init__(self) -> None:
        self.count = 0
        self.previous_limit = sys.getrecursionlimit()
        self.lock = threading.Lock()

    def started(self) -> None:
        with self.lock:
            if self.count == 0:
                self.previous_limit = sys.getrecursionlimit()
                sys.setrecursionlimit(max(RECURSION_LIMIT, self.previous_limit))
            self.count += 1

    def ended(self) -> None:
        with self.lock:
            self.count -= 1
            if self.count == 0:
                sys.setrecursionlimit(self.previous_limit)


ROOMS = Rooms()
RUNNING = Running()


def running() -> bool:
    """Whether an action runs in a room now."""
    return RUNNING.count > 0
