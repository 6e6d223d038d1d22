"""The interpreter's operators, and the binding of a dynamic call's arguments: what its closures call.

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
    NUMBERS,
    is_number_or_tensor,
    kind_of,
    make_matmul,
    promote,
    scalar,
)
from dl.lang.diagnostics import Span
from dl.lang.parse import COMPARE
from dl.lang.shapes import TREE_OPERATORS
from dl.runtime.calls import Function
from dl.runtime.errors import NEGATIVE_POWER, PrimitiveError, fail
from dl.runtime.values import StructValue, describe, dtype_name


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
    **COMPARE,
}


def general(symbol: str, a: Any, b: Any, weak_a: bool = False, weak_b: bool = False) -> Any:
    """`a symbol b` for any operands of an arithmetic operator or comparison: DL's checks, promotion, numpy.

    `weak_a`/`weak_b` mark an operand that is an unsuffixed literal (see `promote`)."""
    if symbol == "+" and a.__class__ is str and b.__class__ is str:  # text joins (the checker allows no other mix)
        return a + b
    if (a.__class__ in TREES or b.__class__ in TREES) and symbol in TREE_OPERATORS:
        return tree_arithmetic(symbol, a, b, weak_a, weak_b)
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
            if symbol == "**" and b > 63 and abs(a) > 1:  # out of range, and too large to compute first
                raise PrimitiveError(f"integer overflow: {shown(symbol, a, b)} is out of the i64 range")
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
    if symbol not in INTEGER_ARITHMETIC or a.__class__ not in NUMBERS or b.__class__ not in NUMBERS:
        return False  # a tensor, on the host or a device
    return (a.__class__ is np.int64 or b.__class__ is np.int64) and kind_of(a) in "iu" and kind_of(b) in "iu"


TREES = (tuple, StructValue)


def tree_arithmetic(symbol: str, a: Any, b: Any, weak_a: bool, weak_b: bool) -> Any:
    """`a symbol b` leaf by leaf, where one side is a struct or tuple: two trees of one structure, or a tree
    and a number (which meets every leaf), as the checker's `tree_arithmetic` types it."""
    tree = a if a.__class__ in TREES else b
    other = b if tree is a else a
    if other.__class__ in TREES:
        same = (tree.__class__ is tuple and other.__class__ is tuple and len(tree) == len(other)) or (
            tree.__class__ is StructValue and other.__class__ is StructValue and tree.type.alike(other.type)
        )
        if not same:
            raise PrimitiveError(f"`{symbol}` of two trees needs them of one structure, found {shown(symbol, a, b)}")
        pairs = zip(leaves_of(a), leaves_of(b), strict=True)
    elif is_number_or_tensor(other) and np.ndim(other) == 0:
        pairs = ((leaf, other) if tree is a else (other, leaf) for leaf in leaves_of(tree))
    else:
        raise PrimitiveError(f"`{symbol}` of a struct or tuple needs a number or a tree, found {shown(symbol, a, b)}")
    results = tuple(general(symbol, x, y, weak_a, weak_b) for x, y in pairs)
    return StructValue(tree.type, results) if tree.__class__ is StructValue else results


def leaves_of(tree: Any) -> tuple:
    """The items of a tuple or the field values of a struct (one level: `general` goes down the rest)."""
    return tree.values if tree.__class__ is StructValue else tree


def negate_tree(value: Any) -> Any:
    items = tuple(negate(item) for item in leaves_of(value))
    return StructValue(value.type, items) if value.__class__ is StructValue else items


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
    if symbol in ("//", "%") and np.any(b == 0):
        raise PrimitiveError(f"integer division by zero in `{symbol}`")
    if symbol == "**" and np.any(b < 0):
        raise PrimitiveError(NEGATIVE_POWER)
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


REUSABLE = frozenset({"+", "-", "*", "/"})  # the operators `reusing` may write into an operand
REUSE_SIZE = 4096  # elements; below, an allocation costs less than the checks that avoid it


def reusing(symbol: str, left: bool, right: bool) -> Callable[[Any, Any], Any]:
    """`BINARY[symbol]` that writes its result into an operand the expression around it has just made, and
    nothing else holds (`left`, `right`: which operands may be such), when that operand has the result's
    shape and dtype: `p - lr * (m / (sqrt(v) + eps))` makes one array, not four. The values are those
    `BINARY[symbol]` gives: the same numpy operation, only its output placed."""
    plain, into = BINARY[symbol], OUT_FUNCTIONS[symbol]
    floats_only = symbol == "/"

    def apply(a: Any, b: Any) -> Any:
        if left and a.__class__ is ndarray and a.size >= REUSE_SIZE and holds(a, b, floats_only):
            return into(a, b, out=a)
        if right and b.__class__ is ndarray and b.size >= REUSE_SIZE and holds(b, a, floats_only):
            return into(a, b, out=b)
        return plain(a, b)

    return apply


OUT_FUNCTIONS = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.true_divide}


def holds(target: np.ndarray, other: Any, floats_only: bool) -> bool:
    """Whether `target op other` (or `other op target`) fits in `target`: `other` is an array of `target`'s
    dtype whose shape broadcasts to `target`'s, or a scalar of that dtype; bools never, integers not for `/`."""
    dtype = target.dtype
    if dtype is BOOL or (floats_only and dtype is not F32 and dtype is not F64):
        return False
    cls = other.__class__
    if cls is ndarray:
        if other.dtype is not dtype:
            return False
        shape, into = other.shape, target.shape
        if shape == into:
            return True
        if len(shape) > len(into):
            return False
        return all(size == 1 or size == whole for size, whole in zip(reversed(shape), reversed(into), strict=False))
    return (cls is np.float32 and dtype is F32) or (cls is np.float64 and dtype is F64)


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
            elif cls is tuple and symbol in EQUALITY:  # `shape(x) == shape(y)`
                return tuples_equal(a, b, shown(symbol, a, b)) == (symbol == "==")
        return general(symbol, a, b)

    return apply


def tuples_equal(a: tuple, b: tuple, whole: str) -> bool:
    """Two tuples of scalars (numbers, bools, strings, or tuples of them) compared whole, as Python compares
    them (the checker's `tuples_compared`)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x.__class__ is tuple and y.__class__ is tuple:
            equal = tuples_equal(x, y, whole)
        elif x.__class__ is str and y.__class__ is str:
            equal = x == y
        else:
            equal = general("==", x, y) if is_number_or_tensor(x) and is_number_or_tensor(y) else None
            if equal is None or np.ndim(equal) != 0:
                raise PrimitiveError(f"`==` compares tuples of scalars or strings whole, found {whole}")
        if not equal:
            return False
    return True


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
    if cls in TREES:
        return negate_tree(value)
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
