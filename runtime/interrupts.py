"""Ctrl-C reaching code that Python cannot interrupt: each backend that runs such code (compiled loops
poll a flag) registers a handler here, and whoever catches the interrupt calls `interrupt_everything`,
then `resume_everything` once the interrupted program has stopped."""

from __future__ import annotations

from collections.abc import Callable

HANDLERS: list[Callable[[], None]] = []
RESUMERS: list[Callable[[], None]] = []


def on_interrupt(handler: Callable[[], None], resume: Callable[[], None] | None = None) -> None:
    """Call `handler` at every Ctrl-C from now on, and `resume` once the program it stopped has ended (to
    undo what `handler` did where no running code saw it). Both must be cheap and must not raise."""
    if handler not in HANDLERS:
        HANDLERS.append(handler)
    if resume is not None and resume not in RESUMERS:
        RESUMERS.append(resume)


def interrupt_everything() -> None:
    for handler in list(HANDLERS):
        handler()


def resume_everything() -> None:
    for resume in list(RESUMERS):
        resume()
