"""Ctrl-C reaching code that Python cannot interrupt: each backend that runs such code (compiled loops
poll a flag) registers a handler here, and whoever catches the interrupt calls `interrupt_everything`."""

from __future__ import annotations

from collections.abc import Callable

HANDLERS: list[Callable[[], None]] = []


def on_interrupt(handler: Callable[[], None]) -> None:
    """Call `handler` at every Ctrl-C from now on (it must be cheap and must not raise)."""
    if handler not in HANDLERS:
        HANDLERS.append(handler)


def interrupt_everything() -> None:
    for handler in list(HANDLERS):
        handler()
