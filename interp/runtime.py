"""What compiled DL code calls at run time: functions, the call stack, operators.

The compiler (interp/compile.py) turns the AST into Python closures; those
closures call into this module. Everything here is on the hot path, so it is
written for speed: no lookups by string, no allocation that can be avoided.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
from dl.interp.primitives import PrimitiveError, matmul, scalar
from dl.interp.values import describe
from dl.lang.diagnostics import Diagnostic, Span, error

BREAK = object()
CONTINUE = object()
RETURN = object()

# The DL call stack: (function name, span of the call) for each active call.
STACK: list[tuple[str, Span]] = []


class RunError(Exception):
    """A run-time failure of the user's program, as a diagnostic with the DL call stack."""

    def __init__(self, diagnostic: Diagnostic) -> None:
        super().__init__(diagnostic.message)
        self.diagnostic = diagnostic


def fail(code: str, message: str, span: Span, label: str = "") -> RunError:
    """A `RunError` at `span`, noting the DL call stack as it is now."""
    notes = ()
    if STACK:
        # Each active function, and where it is now: the call it made, or `span`.
        places = [call for _, call in STACK[1:]] + [span]
        frames = "\n".join(f"  in `{name}` at {place}" for (name, _), place in zip(STACK, places, strict=True))
        notes = (f"call stack (most recent call last):\n{frames}",)
    return RunError(error(code, message, span, label, notes=notes))


class Function:
    """A DL function value: compiled body, frame size, captured values."""

    __slots__ = ("body", "captured", "defaults", "name", "params", "self_slot", "size", "span")

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
    ) -> None:
        self.name = name
        self.params = params
        self.defaults = defaults  # per parameter: a closure computing the default, or None
        self.body = body
        self.size = size
        self.span = span
        self.captured = captured  # (slot, value) pairs copied into every frame
        self.self_slot = self_slot

    def __call__(self, *args: Any) -> Any:
        return invoke(self, list(args), self.span)


def invoke(function: Function, args: list, call_span: Span) -> Any:
    """Run `function` with exactly its positional arguments; slot 0 holds the result."""
    frame = [None, *args]
    frame.extend([None] * (function.size - len(frame)))
    for slot, value in function.captured:
        frame[slot] = value
    if function.self_slot is not None:
        frame[function.self_slot] = function
    STACK.append((function.name, call_span))
    try:
        signal = function.body(frame)
    finally:
        STACK.pop()
    return frame[0] if signal is RETURN else ()


def complete_arguments(function: Function, args: list, keywords: dict, span: Span) -> list:
    """Bind a dynamic call's keywords and defaults to `function`'s parameters."""
    params = function.params
    if len(args) > len(params):
        raise fail(
            "E0503",
            f"`{function.name}` takes {len(params)} argument{'s' if len(params) != 1 else ''}, found {len(args)}",
            span,
        )
    bound = list(args)
    for position in range(len(args), len(params)):
        name = params[position]
        if name in keywords:
            bound.append(keywords.pop(name))
        elif function.defaults[position] is not None:
            bound.append(function.defaults[position]([]))
        else:
            raise fail("E0503", f"missing argument `{name}` in call to `{function.name}`", span)
    if keywords:
        raise fail("E0503", f"`{function.name}` has no parameter `{next(iter(keywords))}`", span)
    return bound


# ---------------------------------------------------------------------- operators

INTEGER_KINDS = frozenset("iub")
NUMERIC = (np.ndarray, np.generic, int, float)
SCALARS = frozenset({int, float, bool, np.float32, np.float64, np.int32, np.int64, np.bool_})


def kind_of(value: Any) -> str:
    dtype = getattr(value, "dtype", None)
    if dtype is not None:
        return dtype.kind
    if isinstance(value, bool):
        return "b"
    if isinstance(value, int):
        return "i"
    if isinstance(value, float):
        return "f"
    return ""


def promote(a: Any, b: Any) -> tuple[Any, Any]:
    """An integer meeting a float takes the float's dtype (DL's rule; numpy would widen to f64)."""
    dtype_a = getattr(a, "dtype", None)
    dtype_b = getattr(b, "dtype", None)
    if dtype_a is None or dtype_b is None or dtype_a == dtype_b:
        return a, b
    if dtype_a.kind == "f" and dtype_b.kind in INTEGER_KINDS:
        return a, np.asarray(b).astype(dtype_a)
    if dtype_b.kind == "f" and dtype_a.kind in INTEGER_KINDS:
        return np.asarray(a).astype(dtype_b), b
    return a, b


def operand_error(symbol: str, a: Any, b: Any) -> PrimitiveError:
    return PrimitiveError(f"cannot apply `{symbol}` to {describe(a)} and {describe(b)}")


def arithmetic(function, symbol: str):
    def apply(a: Any, b: Any) -> Any:
        if a.__class__ is not b.__class__ or a.__class__ not in SCALARS:
            if not isinstance(a, NUMERIC) or not isinstance(b, NUMERIC):
                raise operand_error(symbol, a, b)
            a, b = promote(a, b)
        try:
            return scalar(function(a, b))
        except (ValueError, TypeError):
            raise broadcast_error(symbol, a, b) from None

    return apply


def broadcast_error(symbol: str, a: Any, b: Any) -> PrimitiveError:
    shape_a, shape_b = np.shape(a), np.shape(b)
    try:
        np.broadcast_shapes(shape_a, shape_b)
    except ValueError:
        return PrimitiveError(f"shapes do not broadcast: {describe(a)} {symbol} {describe(b)}")
    return operand_error(symbol, a, b)


def true_divide(a: Any, b: Any) -> Any:
    if kind_of(a) in INTEGER_KINDS and kind_of(b) in INTEGER_KINDS:
        raise PrimitiveError(
            f"`/` divides floats, found {describe(a)} / {describe(b)}; use `//` for integer "
            "division or convert with `float(x)`"
        )
    return _divide(a, b)


def integer_safe(function, symbol: str):
    checked = arithmetic(function, symbol)

    def apply(a: Any, b: Any) -> Any:
        if kind_of(a) in INTEGER_KINDS and kind_of(b) in INTEGER_KINDS and np.any(np.asarray(b) == 0):
            raise PrimitiveError(f"integer division by zero in `{symbol}`")
        return checked(a, b)

    return apply


def power(a: Any, b: Any) -> Any:
    if kind_of(a) in INTEGER_KINDS and kind_of(b) in INTEGER_KINDS and np.any(np.asarray(b) < 0):
        raise PrimitiveError("an integer raised to a negative integer power; convert with `float(x)` first")
    return _power(a, b)


def matmul_operator(a: Any, b: Any) -> Any:
    a, b = promote(a, b)
    return matmul(a, b)


def logical(function, symbol: str):
    def apply(a: Any, b: Any) -> Any:
        if kind_of(a) != "b" or kind_of(b) != "b":
            raise PrimitiveError(f"`{symbol}` needs bool operands, found {describe(a)} {symbol} {describe(b)}")
        return scalar(function(a, b))

    return apply


_divide = arithmetic(operator.truediv, "/")
_power = arithmetic(operator.pow, "**")

BINARY = {
    "+": arithmetic(operator.add, "+"),
    "-": arithmetic(operator.sub, "-"),
    "*": arithmetic(operator.mul, "*"),
    "/": true_divide,
    "//": integer_safe(operator.floordiv, "//"),
    "%": integer_safe(operator.mod, "%"),
    "**": power,
    "@": matmul_operator,
    "==": arithmetic(operator.eq, "=="),
    "!=": arithmetic(operator.ne, "!="),
    "<": arithmetic(operator.lt, "<"),
    "<=": arithmetic(operator.le, "<="),
    ">": arithmetic(operator.gt, ">"),
    ">=": arithmetic(operator.ge, ">="),
    "and": logical(np.logical_and, "and"),
    "or": logical(np.logical_or, "or"),
}


def negate(value: Any) -> Any:
    if kind_of(value) in ("b", ""):
        raise PrimitiveError(f"cannot negate {describe(value)}")
    return -value


def logical_not(value: Any) -> Any:
    if value is True or value is False:
        return not value
    if kind_of(value) != "b":
        raise PrimitiveError(f"`not` needs a bool, found {describe(value)}")
    return scalar(np.logical_not(value))


UNARY = {"-": negate, "not": logical_not}


def is_bool_scalar(value: Any) -> bool:
    return value is True or value is False or value.__class__ is np.bool_
