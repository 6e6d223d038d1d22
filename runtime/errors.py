"""Run-time failures, shared by every backend: how a failure of the user's program is carried and worded.

`PrimitiveError` is a failure inside a primitive, in the user's terms; `failure_message` words it once,
naming the primitive. `RunError` carries a run-time diagnostic out of a backend with the DL call stack
(`STACK`, kept by whichever backend is running calls) in its notes; `fail` makes one at a span.
"""

from __future__ import annotations

from dl.lang.diagnostics import Diagnostic, Label, Span, error
from dl.lang.modules import in_stdlib
from dl.lang.primitives import Prim


class PrimitiveError(Exception):
    """A run-time failure inside a primitive, in the user's terms."""


class AssertionFailure(PrimitiveError):
    pass


NEGATIVE_POWER = "an integer raised to a negative integer power; convert with `float(x)` first"  # E0510

# The DL call stack: (function name, span of the call) for each active call.
STACK: list[tuple[str, Span]] = []


class RunError(Exception):
    """A run-time failure of the user's program, as a diagnostic with the DL call stack."""

    def __init__(self, diagnostic: Diagnostic) -> None:
        super().__init__(diagnostic.message)
        self.diagnostic = diagnostic


class DeepRecursion(Exception):
    """Python's recursion limit was hit; `args[0]` is a copy of the DL call stack at that moment.

    Raised by `invoke` in place of `RecursionError`, before the stack unwinds, so the
    diagnostic can point at the innermost call. It carries no Python-level state
    beyond the copy, because it is created with almost no stack left."""


def fail(code: str, message: str, span: Span, label: str = "", helps: tuple[str, ...] = ()) -> RunError:
    """A `RunError` at `span` with these `helps`, noting the DL call stack as it is now. A failure inside the
    standard library (an assertion of `nn.cross_entropy`, a primitive it calls) is shown at the user's call that
    reached it, the line in the library a secondary label, as the checker shows its mistakes there."""
    notes = helps
    secondary: tuple[Label, ...] = ()
    if STACK:
        # Each active function, and where it is now: the call it made, or `span`.
        places = [call for _, call in STACK[1:]] + [span]
        frames = "\n".join(f"  in `{name}` at {place}" for (name, _), place in zip(STACK, places, strict=True))
        notes = (*helps, f"call stack (most recent call last):\n{frames}")
        if in_stdlib(span.path):
            # the user's innermost call on the way (of the library's function, or of a derivative that has the
            # library's code in it: `grad(loss)` of a loss calling `nn.cross_entropy`)
            outside = [k for k, place in enumerate(places) if not in_stdlib(place.path)]
            if outside and outside[-1] + 1 < len(STACK):
                secondary = (Label(span, label or "fails here"),)
                label = "the standard library's code fails in this call"
                span = places[outside[-1]]
    return RunError(error(code, message, span, label, notes=notes, secondary=secondary))


def recursion_error(stack: list[tuple[str, Span]], fallback: Span) -> Diagnostic:
    """E0506 at the innermost call of a recursion that went too deep."""
    name, span = stack[-1] if stack else ("main", fallback)
    return error(
        "E0506",
        f"recursion too deep in `{name}`",
        span,
        notes=("help: check that the recursion reaches its base case",),
    )


def failure_message(prim: Prim, problem: Exception) -> str:
    """The message of a failed call of `prim`, naming the primitive once."""
    text = str(problem) or type(problem).__name__
    if isinstance(problem, MemoryError):
        text = "not enough memory for the result"
    name = prim.value
    if text.startswith((f"`{name}`", f"{name} ", f"{name}:")):
        return text
    return f"{name}: {text}"


class UsageError(Exception):
    """The command line does not fit the program (exit status 2)."""
