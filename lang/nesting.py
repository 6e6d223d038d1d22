"""How deeply a program may nest, and the room every pass gets to walk a tree that deep.

The passes after the parser (checker, autodiff, formatter, printer, interpreter
compiler, LLVM lowering, the tools' own walks) follow the syntax tree
recursively, a few Python frames per level. Rather than each of them being
rewritten as a loop, two things together keep any input from crashing them:

- `too_deep(nodes)`: the parser refuses a tree that nests more than
  `NESTING_LIMIT` levels (E0108, at the outermost node past the limit). Every
  node counts as a level: expressions, statements, blocks, types, patterns. The
  parser itself never recurses, so it can measure input of any depth.
- `with_room(action)`: runs a pass on a thread whose stack and recursion limit
  hold any tree within the limit, many times over. The entry points that run
  passes (`dl.pipeline`, `dl.lang.check`, `format_source`, the interpreter, the
  CLI, the REPL and the language server) call it; a call made from inside runs
  directly.
"""

from __future__ import annotations

import contextvars
import ctypes
import dataclasses
import functools
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from dl.lang import ast
from dl.lang.diagnostics import Diagnostic, error

# Deep enough for code generators (a 1000-term sum inside a function fits), shallow enough that every
# pass walks it in well under a second. Documented in docs/errors.md (E0108) and docs/language.md.
NESTING_LIMIT = 1500

# A pass spends a few Python frames per level (the interpreter a few per DL call, and DL recursion is
# allowed to go deep): room for that, on a thread whose C stack is large enough for the frames that go
# through C (generators, dataclass comparisons).
RECURSION_LIMIT = 200_000
THREAD_STACK_BYTES = 1024 * 1024 * 1024

T = TypeVar("T")

# ---------------------------------------------------------------------- the limit

SPAN_FIELDS = frozenset({"span", "name_span"})
NODE_TYPES = frozenset(
    value for value in vars(ast).values() if isinstance(value, type) and dataclasses.is_dataclass(value)
)
_child_fields: dict[type, tuple[str, ...]] = {}


def child_fields(kind: type) -> tuple[str, ...]:
    """The fields of a node class that may hold nodes (all but spans; the rest are skipped by type)."""
    found = _child_fields.get(kind)
    if found is None:
        found = tuple(f.name for f in dataclasses.fields(kind) if f.name not in SPAN_FIELDS)
        _child_fields[kind] = found
    return found


def children(node: Any) -> list:
    """The nodes directly under `node`, in source order."""
    found = []
    for name in child_fields(type(node)):
        value = getattr(node, name)
        if type(value) in NODE_TYPES:
            found.append(value)
        elif type(value) is tuple:
            found.extend(item for item in value if type(item) in NODE_TYPES)
    return found


def too_deep(nodes: tuple) -> Diagnostic | None:
    """E0108 at the first node (in source order) that lies more than `NESTING_LIMIT` levels deep in
    `nodes` (a module's declarations, a REPL entry's items), or None. Walks with a list, not recursion."""
    waiting: list[tuple[Any, int]] = [(node, 1) for node in reversed(nodes)]
    while waiting:
        node, level = waiting.pop()
        if level > NESTING_LIMIT:
            return nesting_error(node)
        waiting.extend((child, level + 1) for child in reversed(children(node)))
    return None


def nesting_error(node: Any) -> Diagnostic:
    return error(
        "E0108",
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

_local = threading.local()
_lock = threading.Lock()
_rooms = 0  # how many `with_room` threads run now: the recursion limit stays raised while any does
_previous_limit = sys.getrecursionlimit()
_interrupt_hooks: list[Callable[[], None]] = []


def when_interrupted(hook: Callable[[], None]) -> None:
    """Call `hook` whenever Ctrl-C stops an action running in a room (compiled code polls a flag of its own)."""
    _interrupt_hooks.append(hook)


def in_room(function: Callable[..., T]) -> Callable[..., T]:
    """`function`, always called through `with_room` (for a pass's entry point)."""

    @functools.wraps(function)
    def called_in_room(*args: Any, **keywords: Any) -> T:
        return with_room(lambda: function(*args, **keywords))

    return called_in_room


def with_room(action: Callable[[], T]) -> T:
    """`action()`, run where deep trees and deep DL recursion fit: on a thread with a large stack and a high
    recursion limit. Its result is returned and its exceptions re-raised here. Ctrl-C (which only the main
    thread receives) stops the action too, then is re-raised. Called from inside a room, runs directly."""
    if getattr(_local, "inside", False):
        return action()
    outcome: dict[str, Any] = {}
    context = contextvars.copy_context()  # a new thread starts with an empty one

    def target() -> None:
        _local.inside = True
        try:
            outcome["value"] = context.run(action)
        except BaseException as failure:  # carried to the caller's thread, re-raised there
            outcome["exception"] = failure

    worker = start(target)
    try:
        while worker.is_alive():
            worker.join(0.1)
    except KeyboardInterrupt:
        interrupt(worker)
        raise
    finally:
        leave()
    if "exception" in outcome:
        raise outcome["exception"]
    return outcome["value"]


def start(target: Callable[[], None]) -> threading.Thread:
    """A started thread with room, the recursion limit raised while it runs."""
    global _rooms, _previous_limit
    with _lock:
        if _rooms == 0:
            _previous_limit = sys.getrecursionlimit()
            sys.setrecursionlimit(max(RECURSION_LIMIT, _previous_limit))
        _rooms += 1
        previous_stack = threading.stack_size()
        threading.stack_size(THREAD_STACK_BYTES)
        try:
            worker = threading.Thread(target=target, name="dl-room", daemon=True)
            worker.start()
        except BaseException:
            _rooms -= 1
            raise
        finally:
            threading.stack_size(previous_stack)
    return worker


def leave() -> None:
    global _rooms
    with _lock:
        _rooms -= 1
        if _rooms == 0:
            sys.setrecursionlimit(_previous_limit)


def interrupt(worker: threading.Thread) -> None:
    """Raise `KeyboardInterrupt` in the thread running the action, and wait until it has stopped.

    The exception is raised asynchronously (`PyThreadState_SetAsyncExc`): the worker sees it at its next
    Python bytecode, so a loop stops at once and a long numpy call stops when it returns. Without this the
    action would keep running in the background after Ctrl-C, which matters where the process goes on
    (the REPL)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(worker.ident), ctypes.py_object(KeyboardInterrupt))
    for hook in _interrupt_hooks:
        hook()
    worker.join()
