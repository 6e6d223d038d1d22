"""DL function values and the calling convention every backend's bodies follow.

A function's body is a step `body(frame) -> signal`: the frame holds the arguments in slots 1..n and the
body leaves its result in slot 0, returning `RETURN` (anything else: the function returned nothing). A
backend that compiles a function supplies a body of this shape; `invoke` runs one, keeping the DL call
stack (`STACK`) for diagnostics.
"""

from __future__ import annotations

from typing import Any

from dl.lang.diagnostics import Span
from dl.runtime.errors import STACK, DeepRecursion

BREAK = object()
CONTINUE = object()
RETURN = object()


class Function:
    """A DL function value: compiled body, frame size, captured values."""

    __slots__ = ("body", "captured", "defaults", "display", "name", "params", "self_slot", "size", "span")

    def __init__(
        self,
        name: str,
        params: tuple[str, ...],
        defaults: tuple,
        body,
        size: int,
        span: Span,
        captured: tuple = (),
        self_slot: int | None = None,
        display: str | None = None,
    ) -> None:
        self.name = name  # in messages and the call stack: `f`, or `fn(x)` for an anonymous function
        self.params = params
        self.defaults = defaults  # per parameter: a closure computing the default, or None
        self.body = body
        self.size = size
        self.span = span
        self.captured = captured  # (slot, value) pairs copied into every frame
        self.self_slot = self_slot
        self.display = display or f"<fn {name}>"  # how `print` shows it

    def __call__(self, *args: Any) -> Any:
        return invoke(self, list(args), self.span)


def invoke(function: Function, args: list, call_span: Span) -> Any:
    """Run `function` with exactly its positional arguments; slot 0 holds the result."""
    return enter(function, [None, *args], call_span)


def enter(function: Function, frame: list, call_span: Span) -> Any:
    """`invoke`, given the frame's start: None (for the result) and the arguments. The list becomes the frame,
    so that an argument the body lets go of is not still held by the caller's list of them."""
    frame.extend([None] * (function.size - len(frame)))
    for slot, value in function.captured:
        frame[slot] = value
    if function.self_slot is not None:
        frame[function.self_slot] = function
    STACK.append((function.name, call_span))
    try:
        signal = function.body(frame)
    except RecursionError:
        raise DeepRecursion(STACK.copy()) from None
    finally:
        STACK.pop()
    return frame[0] if signal is RETURN else ()
