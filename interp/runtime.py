"""What compiled DL code calls at run time: functions, the call stack, operators.

The compiler (interp/compile.py) turns the AST into Python closures; those
closures call into this module. Everything here is on the hot path, so it is
written for speed: each operator first tries the common cases (two Python
ints, two numpy floats of one class, two arrays of one dtype) with one direct
call, and only then takes the general path that checks operands and applies
DL's promotion (`promote` in interp/primitives.py).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np
from dl.interp.primitives import (
    BOOL,
    F32,
    F64,
    I32,
    I64,
    I64_LIMIT,
    PrimitiveError,
    is_number_or_tensor,
    kind_of,
    make_matmul,
    promote,
    scalar,
)
from dl.interp.values import describe, dtype_name
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


class DeepRecursion(Exception):
    """Python's recursion limit was hit; `args[0]` is a copy of the DL call stack at that moment.

    Raised by `invoke` in place of `RecursionError`, before the stack unwinds, so the
    diagnostic can point at the innermost call. It carries no Python-level state
    beyond the copy, because it is created with almost no stack left."""


def fail(code: str, message: str, span: Span, label: str = "") -> RunError:
    """A `RunError` at `span`, noting the DL call stack as it is now."""
    notes = ()
    if STACK:
        # Each active function, and where it is now: the call it made, or `span`.
        places = [call for _, call in STACK[1:]] + [span]
        frames = "\n".join(f"  in `{name}` at {place}" for (name, _), place in zip(STACK, places, strict=True))
        notes = (f"call stack (most recent call last):\n{frames}",)
    return RunError(error(code, message, span, label, notes=notes))


def recursion_error(stack: list[tuple[str, Span]], fallback: Span) -> Diagnostic:
    """E0506 at the innermost call of a recursion that went too deep."""
    name, span = stack[-1] if stack else ("main", fallback)
    return error(
        "E0506",
        f"recursion too deep in `{name}`",
        span,
        notes=("help: check that the recursion reaches its base case",),
    )


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
    frame = [None, *args]
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

ndarray = np.ndarray
EQUALITY = frozenset({"==", "!="})
ORDERING = frozenset({"<", "<=", ">", ">="})
COMPARISONS = EQUALITY | ORDERING
INTEGER_ARITHMETIC = frozenset({"+", "-", "*", "//", "%", "**"})
FUNCTIONS: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "//": operator.floordiv,
    "%": operator.mod,
    "**": operator.pow,
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def general(symbol: str, a: Any, b: Any, weak_a: bool = False, weak_b: bool = False) -> Any:
    """`a symbol b` for any operands of an arithmetic operator or comparison: DL's checks, promotion, numpy.

    `weak_a`/`weak_b` mark an operand that is an unsuffixed literal (see `promote`)."""
    if not is_number_or_tensor(a) or not is_number_or_tensor(b):
        raise PrimitiveError(f"cannot apply `{symbol}` to {describe(a)} and {describe(b)}")
    kind_a, kind_b = kind_of(a), kind_of(b)
    if symbol in ORDERING:
        if (kind_a == "b") != (kind_b == "b"):
            raise PrimitiveError(f"cannot compare {shown(symbol, a, b)}: a bool is not a number")
    elif symbol not in EQUALITY and "b" in (kind_a, kind_b):
        raise PrimitiveError(f"`{symbol}` needs numbers, found {shown(symbol, a, b)}; a bool is not a number")
    if kind_a in "iu" and kind_b in "iu":
        integer_checks(symbol, a, b, shown(symbol, a, b))
    try:
        a, b = promote(a, b, weak_a, weak_b)
        if wide_integer_scalars(symbol, a, b):
            a, b = int(a), int(b)  # exact: the range check below reports what numpy's int64 would wrap
        result = scalar(FUNCTIONS[symbol](a, b))
    except OverflowError:
        raise out_of_range(symbol, a, b) from None
    except (ValueError, TypeError):
        raise broadcast_error(symbol, a, b) from None
    if result.__class__ is int and not -I64_LIMIT <= result < I64_LIMIT:
        raise PrimitiveError(f"integer overflow: {shown(symbol, a, b)} is out of the i64 range")
    return result


def wide_integer_scalars(symbol: str, a: Any, b: Any) -> bool:
    """Whether `a symbol b` is arithmetic on integer scalars promoted to i64 (an i32 met an i64): i64 scalars
    report overflow, tensors and i32 wrap (docs/types.md)."""
    if symbol not in INTEGER_ARITHMETIC or a.__class__ is ndarray or b.__class__ is ndarray:
        return False
    return (a.__class__ is np.int64 or b.__class__ is np.int64) and kind_of(a) in "iu" and kind_of(b) in "iu"


def shown(symbol: str, a: Any, b: Any) -> str:
    """`f32[2, 3] + i64`: the operation in a message (only built when there is a message to give)."""
    return f"{describe(a)} {symbol} {describe(b)}"


def same_float(a: Any, b: Any) -> bool:
    """A float tensor and a scalar of its dtype, either way round: numpy's result is DL's, directly."""
    if a.__class__ is ndarray:
        return (b.__class__ is np.float32 and a.dtype is F32) or (b.__class__ is np.float64 and a.dtype is F64)
    if b.__class__ is ndarray:
        return (a.__class__ is np.float32 and b.dtype is F32) or (a.__class__ is np.float64 and b.dtype is F64)
    return False


def integer_checks(symbol: str, a: Any, b: Any, shown: str) -> None:
    if symbol == "/":
        raise PrimitiveError(
            f"`/` divides floats, found {shown}; use `//` for integer division or convert with `float(x)`"
        )
    if symbol in ("//", "%") and np.any(np.asarray(b) == 0):
        raise PrimitiveError(f"integer division by zero in `{symbol}`")
    if symbol == "**" and np.any(np.asarray(b) < 0):
        raise PrimitiveError("an integer raised to a negative integer power; convert with `float(x)` first")
    if symbol == "**" and a.__class__ is int and b.__class__ is int and b > 63 and abs(a) > 1:
        raise PrimitiveError(f"integer overflow: {shown} is out of the i64 range")


def out_of_range(symbol: str, a: Any, b: Any) -> PrimitiveError:
    number, other = (a, b) if a.__class__ is int else (b, a)
    return PrimitiveError(f"`{symbol}`: {number} is out of range for {dtype_name(other)}")


def broadcast_error(symbol: str, a: Any, b: Any) -> PrimitiveError:
    try:
        np.broadcast_shapes(np.shape(a), np.shape(b))
    except ValueError:
        return PrimitiveError(f"shapes do not broadcast: {describe(a)} {symbol} {describe(b)}")
    return PrimitiveError(f"cannot apply `{symbol}` to {describe(a)} and {describe(b)}")


def arithmetic(symbol: str):
    """`+ - *`: any numbers but bools."""
    function = FUNCTIONS[symbol]

    def apply(a: Any, b: Any) -> Any:
        cls = a.__class__
        if cls is b.__class__:
            if cls is ndarray:
                dtype = a.dtype
                if dtype is b.dtype and dtype is not BOOL:
                    try:
                        return function(a, b)
                    except ValueError:
                        raise broadcast_error(symbol, a, b) from None
            elif cls is int:
                result = function(a, b)
                if -I64_LIMIT <= result < I64_LIMIT:
                    return result  # else the general path reports the overflow, as compiled code does
            elif cls is np.float32 or cls is np.float64:
                return function(a, b)
        elif same_float(a, b):
            return function(a, b)
        return general(symbol, a, b)

    return apply


def dividing(symbol: str, integers_fit: Callable[[int], bool] | None):
    """`/ // % **`: floats take the direct path; two integers fit it only when `integers_fit(b)`."""
    function = FUNCTIONS[symbol]

    def apply(a: Any, b: Any) -> Any:
        cls = a.__class__
        if cls is b.__class__:
            if cls is ndarray:
                dtype = a.dtype
                if dtype is b.dtype and (dtype is F32 or dtype is F64):
                    try:
                        return function(a, b)
                    except ValueError:
                        raise broadcast_error(symbol, a, b) from None
            elif cls is np.float32 or cls is np.float64:
                return function(a, b)
            elif cls is int and integers_fit and integers_fit(b):
                result = function(a, b)
                if -I64_LIMIT <= result < I64_LIMIT:
                    return result  # else (the smallest i64 // -1) the general path reports the overflow
        elif same_float(a, b):
            return function(a, b)
        return general(symbol, a, b)

    return apply


def comparison(symbol: str):
    function = FUNCTIONS[symbol]

    def apply(a: Any, b: Any) -> Any:
        cls = a.__class__
        if cls is b.__class__:
            if cls is int:
                return function(a, b)
            if cls is ndarray:
                if a.dtype is b.dtype:
                    try:
                        return function(a, b)
                    except ValueError:
                        raise broadcast_error(symbol, a, b) from None
            elif cls is np.float32 or cls is np.float64 or (cls is str and symbol in ("==", "!=")):
                return bool(function(a, b))
        return general(symbol, a, b)

    return apply


def logical(function, symbol: str):
    def apply(a: Any, b: Any) -> Any:
        if kind_of(a) != "b" or kind_of(b) != "b":
            raise PrimitiveError(f"`{symbol}` needs bool operands, found {describe(a)} {symbol} {describe(b)}")
        try:
            return scalar(function(a, b))
        except ValueError:
            raise broadcast_error(symbol, a, b) from None

    return apply


BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "+": arithmetic("+"),
    "-": arithmetic("-"),
    "*": arithmetic("*"),
    "/": dividing("/", None),
    "//": dividing("//", lambda b: b != 0),
    "%": dividing("%", lambda b: b != 0),
    "**": dividing("**", None),
    "@": make_matmul(),
    "==": comparison("=="),
    "!=": comparison("!="),
    "<": comparison("<"),
    "<=": comparison("<="),
    ">": comparison(">"),
    ">=": comparison(">="),
    "and": logical(np.logical_and, "and"),
    "or": logical(np.logical_or, "or"),
}


def integers_fit_literal(symbol: str, literal: Any, literal_on_right: bool) -> bool:
    """Whether `integer symbol literal` needs none of DL's integer checks (so numpy may run it directly)."""
    if literal.__class__ is not int:
        return False
    if symbol in ("+", "-", "*") or symbol in EQUALITY or symbol in ORDERING:
        return True
    if not literal_on_right:
        return False
    return symbol in ("//", "%") and literal != 0


def integer_function(symbol: str, literal: int | float) -> Callable[[int, Any], Any] | None:
    """Python's operator for `i symbol literal` with `i` an i64 (a Python int), when it is DL's rule too."""
    return FUNCTIONS[symbol] if integers_fit_literal(symbol, literal, True) else None


def with_literal(symbol: str, literal: int | float, literal_on_right: bool) -> Callable[[Any], Any]:
    """`x symbol literal` (or `literal symbol x`) where the literal is unsuffixed and adapts to `x`.

    An integer literal takes `x`'s dtype (`x * 2` keeps an `i32` `x` in `i32`), a float
    literal takes a float `x`'s dtype; see `promote` for the rest."""
    if symbol == "@":
        matmul = make_matmul(not literal_on_right, literal_on_right)
        return (lambda x: matmul(x, literal)) if literal_on_right else (lambda x: matmul(literal, x))
    function = FUNCTIONS[symbol]
    compares = symbol in EQUALITY or symbol in ORDERING
    integers = integers_fit_literal(symbol, literal, literal_on_right)
    # The direct path, where numpy's handling of the Python literal is DL's rule: a float
    # array or scalar, or (when `integers`) an integer one.

    if literal_on_right:

        def apply_right(x: Any) -> Any:
            cls = x.__class__
            if cls is ndarray:
                dtype = x.dtype
                if dtype is F32 or dtype is F64 or (integers and (dtype is I64 or dtype is I32)):
                    try:
                        return function(x, literal)
                    except OverflowError:
                        pass
            elif cls is np.float32 or cls is np.float64:
                result = function(x, literal)
                return bool(result) if compares else result
            elif cls is int and integers:
                result = function(x, literal)
                if compares or -I64_LIMIT <= result < I64_LIMIT:
                    return result  # else the general path reports the overflow
            return general(symbol, x, literal, False, True)

        return apply_right

    def apply_left(x: Any) -> Any:
        cls = x.__class__
        if cls is ndarray:
            dtype = x.dtype
            if dtype is F32 or dtype is F64 or (integers and (dtype is I64 or dtype is I32)):
                try:
                    return function(literal, x)
                except OverflowError:
                    pass
        elif cls is np.float32 or cls is np.float64:
            result = function(literal, x)
            return bool(result) if compares else result
        elif cls is int and integers:
            result = function(literal, x)
            if compares or -I64_LIMIT <= result < I64_LIMIT:
                return result  # else the general path reports the overflow
        return general(symbol, literal, x, True, False)

    return apply_left


def negate(value: Any) -> Any:
    cls = value.__class__
    if cls is int and value == -I64_LIMIT:
        raise PrimitiveError(f"integer overflow: -({value}) is out of the i64 range")
    if cls is int or cls is np.float32 or cls is np.float64 or (cls is ndarray and value.dtype is not BOOL):
        return -value
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
