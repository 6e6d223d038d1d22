"""numpy implementations of DL's primitives, one per member of `Prim`, and DL's dtype promotion.

Each implementation takes its arguments positionally in the order `Signature`
documents (lang/primitives.py). The dispatcher (interp/compile.py) checks once
per call, before the implementation runs, that every parameter its record lists
in `tensors` holds a number or a tensor (`tensor_argument_problem`); the
implementations check the other parameters (axes, dimensions, dtypes, seeds)
as they read them. A mistake that can only be seen at run time raises
`PrimitiveError` with a message in DL's terms; the dispatcher adds the
primitive's name, the span and the DL call stack, and turns any other numpy
failure into the same kind of diagnostic.

The implementations are on the interpreter's hot path: each first tries the
common case (an array of the expected dtype) with one direct numpy call, and
only then falls back to the general, checking path.
"""

from __future__ import annotations

import functools
import io
import math
import re
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
from dl.interp import checkpoints
from dl.lang import einsum as einsum_spec
from dl.lang.files import open_regular, read_text, shipped
from dl.lang.primitives import PRIMITIVES, Prim, Support
from dl.runtime.errors import AssertionFailure, PrimitiveError
from dl.runtime.metrics import log_value, progress_line
from dl.runtime.randomness import CATEGORICAL_PEAK, RandomSource, categorical_samples
from dl.runtime.threads import Threads, large_product, threaded
from dl.runtime.values import (
    DEVICE_ARRAYS,
    DTYPE_NAMES,
    DTYPES,
    StructValue,
    Tape,
    describe,
    float_steps,
    format_value,
)
from dl.runtime.world import World, average, on_rank_zero, shard
from numpy.lib.stride_tricks import sliding_window_view

ndarray = np.ndarray
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
I32 = np.dtype(np.int32)
I64 = np.dtype(np.int64)
BOOL = np.dtype(np.bool_)
# The classes of DL's scalar values (i64 and bool are Python `int` and `bool`; a Python
# `float` is an unsuffixed literal on its way into an operation).
NUMBERS = frozenset({int, float, bool, np.float32, np.float64, np.int32, np.int64, np.bool_})
I64_LIMIT = 2.0**63  # floats in [-2**63, 2**63) convert to i64


# ---------------------------------------------------------------------- values


def is_number_or_tensor(value: Any) -> bool:
    return value.__class__ is ndarray or value.__class__ in NUMBERS or value.__class__ in DEVICE_ARRAYS


def array_module(*values: Any) -> Any:
    """The array module computing on `values`: a device's (cupy, runtime/arrays.py) where one of them is its
    array, else numpy. The implementations call numpy's functions, which hand a device array to its own module
    (numpy's `__array_function__` protocol); they ask for the module where they make a new array."""
    for value in values:
        arrays = DEVICE_ARRAYS.get(value.__class__)
        if arrays is not None:
            return arrays.xp
    return np


def is_integer(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def kind_of(value: Any) -> str:
    """numpy's dtype kind of a number or tensor ("f", "i", "b"); "" for anything else."""
    dtype = getattr(value, "dtype", None)
    if dtype is not None:
        return dtype.kind
    if value is True or value is False:
        return "b"
    if value.__class__ is int:
        return "i"
    if value.__class__ is float:
        return "f"
    return ""


def as_array(value: Any) -> np.ndarray:
    """A tensor view of a scalar or tensor; Python floats are f32 in DL."""
    if value.__class__ is ndarray or value.__class__ in DEVICE_ARRAYS:
        return value
    if value.__class__ is float:
        return np.asarray(value, dtype=np.float32)
    return np.asarray(value)


def scalar(value: Any) -> Any:
    """Turn a 0-d result into DL's scalar representation (i64 and bool as Python values)."""
    if value.__class__ is ndarray:
        if value.ndim:
            return value
        value = value[()]
    if value.__class__ is np.int64:
        return int(value)
    if value.__class__ is np.bool_:
        return bool(value)
    if value.__class__ in DEVICE_ARRAYS and not value.ndim:  # a scalar computed on a device crosses to the host
        return scalar(DEVICE_ARRAYS[value.__class__].download(value))
    return value


def dtype_of(value: Any) -> np.dtype:
    if isinstance(value, np.dtype) and value in (F32, F64, I32, I64, BOOL):
        return value
    if isinstance(value, str) and value in DTYPES:
        return DTYPES[value]
    shown = f'"{value}"' if isinstance(value, str) else describe(value)
    raise PrimitiveError(f"`dtype=` takes a type name such as `f64`, found {shown}")


def axis_of(x: np.ndarray, axis: Any) -> int | None:
    if axis is None:
        return None
    if not is_integer(axis):
        raise PrimitiveError(f"`axis=` takes an integer, found {describe(axis)}")
    rank = x.ndim
    if not -max(rank, 1) <= axis < max(rank, 1):  # a scalar has the one axis 0 (or -1), as in the checker
        raise PrimitiveError(f"axis {axis} is out of range for a tensor of rank {rank}")
    return int(axis)


def axes_of(x: np.ndarray, axis: Any, name: str) -> int | tuple[int, ...] | None:
    """`axis=` of a reduction: one axis, or a non-empty tuple of distinct ones (numpy takes either)."""
    if axis.__class__ is not tuple:
        return axis_of(x, axis)
    if not axis:
        raise PrimitiveError(f"`{name}` takes `axis=` as an integer or a non-empty tuple of them")
    axes = tuple(axis_of(x, item) % max(x.ndim, 1) for item in axis)
    if len(set(axes)) != len(axes):
        raise PrimitiveError(f"`{name}`: an axis is named twice in `axis=` {describe(axis)}")
    return axes


def flag_of(value: Any, name: str) -> bool:
    if value is True or value is False or value.__class__ is np.bool_:
        return bool(value)
    raise PrimitiveError(f"`{name}=` takes `true` or `false`, found {describe(value)}")


# The most elements a tensor may have: numpy's limit on its size in bytes, for the widest dtype (8 bytes).
MAX_ELEMENTS = np.iinfo(np.intp).max // 8


def dims_of(dims: tuple) -> tuple[int, ...]:
    for dim in dims:
        if not is_integer(dim) or dim < 0:
            raise PrimitiveError(f"a dimension must be a non-negative integer, found {shown_value(dim)}")
    shape = tuple(int(d) for d in dims)
    count = math.prod(shape)
    if count > MAX_ELEMENTS:
        raise PrimitiveError(f"a tensor of shape {list(shape)} is too big ({count} elements)")
    return shape


def shown_value(value: Any) -> str:
    """A value as a message shows it: numbers by value, anything else by its type."""
    if is_number_or_tensor(value) and np.ndim(value) == 0:
        return format_value(value)
    return describe(value)


def no_bools(name: str, *operands: Any) -> None:
    if any(kind_of(operand) == "b" for operand in operands):
        shown = ", ".join(describe(operand) for operand in operands)
        raise PrimitiveError(
            f"`{name}` needs numbers, found {shown}; a bool is not a number (convert it with `float(b)`)"
        )


# ---------------------------------------------------------------------- promotion


def promote(a: Any, b: Any, weak_a: bool = False, weak_b: bool = False) -> tuple[Any, Any]:
    """Two numeric operands made ready for one numpy call under DL's promotion rules.

    `weak_a`/`weak_b` mark an unsuffixed literal written as the operand: an integer
    literal adapts to the other side's dtype (numpy's rule for Python ints), a float
    literal adapts to a float and is `f32` next to an integer. Any other value is
    strong: an `i64` held as a Python `int` stays `i64` next to an `i32`, and an
    integer meeting a float takes the float's dtype (numpy would widen to `f64`).
    """
    dtype_a = getattr(a, "dtype", None)
    dtype_b = getattr(b, "dtype", None)
    if a.__class__ is float and (not weak_a or dtype_b is None or dtype_b.kind != "f"):
        a = np.float32(a)
        dtype_a = F32
    if b.__class__ is float and (not weak_b or dtype_a is None or dtype_a.kind != "f"):
        b = np.float32(b)
        dtype_b = F32
    if a.__class__ is int and not weak_a and dtype_b == I32:
        return np.int64(a), b
    if b.__class__ is int and not weak_b and dtype_a == I32:
        return a, np.int64(b)
    if dtype_a is None or dtype_b is None or dtype_a == dtype_b:
        return a, b
    if dtype_a.kind == "f" and dtype_b.kind in "iub":
        return a, cast(b, dtype_a)
    if dtype_b.kind == "f" and dtype_a.kind in "iub":
        return cast(a, dtype_b), b
    return a, b


def cast(value: Any, dtype: np.dtype) -> Any:
    return dtype.type(value) if value.__class__ in NUMBERS else value.astype(dtype)


def broadcast_problem(name: str, *operands: Any) -> PrimitiveError:
    shown = ", ".join(describe(operand) for operand in operands)
    return PrimitiveError(f"`{name}`: shapes do not broadcast: {shown}")


# ---------------------------------------------------------------------- elementwise


def floating(x: Any, name: str) -> Any:
    if x.__class__ is float:  # an unsuffixed literal no context gave a dtype: f32, as the checker types it
        return np.float32(x)
    if kind_of(x) != "f":
        raise PrimitiveError(f"`{name}` needs a float tensor, found {describe(x)}; convert with `float(x)`")
    return x


def unary(function, name: str):
    def apply(x: Any) -> Any:
        if x.__class__ is ndarray:
            dtype = x.dtype
            if dtype is F32 or dtype is F64:
                return function(x)
        return function(floating(x, name))

    return apply


def float_test(test, name: str):
    """`isnan`, `isinf`, `isfinite`: a bool per element of a float tensor."""

    def apply(x: Any) -> Any:
        if kind_of(x) != "f" and x.__class__ is not float:
            raise PrimitiveError(f"`{name}` needs a float tensor, found {describe(x)}: an integer is always finite")
        return scalar(test(x))

    return apply


def sigmoid(x: Any) -> Any:
    x = floating(x, "sigmoid")
    # exp(-|x|) never overflows: 1 / (1 + e) for x >= 0, e / (1 + e) below, both accurate to the last bits
    # (and about 20 times faster than exp(-logaddexp(0, -x)))
    e = np.exp(-np.abs(x))
    inverse = 1 / (1 + e)
    result = np.where(x >= 0, inverse, e * inverse)
    if x.__class__ is ndarray or x.__class__ in DEVICE_ARRAYS:
        return result.astype(x.dtype, copy=False)
    kind = type(x) if isinstance(x, np.floating) else np.float32
    return kind(result)


def softplus(x: Any) -> Any:
    """`log(1 + exp(x))` as `max(x, 0) + log1p(exp(-|x|))`: exp never overflows, and a large negative `x`
    keeps its tiny result instead of rounding `1 + exp(x)` to 1."""
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


# numpy has no erf; Python's `math.erf` is the C library's (the one compiled code calls), one element at a time
ERF_ELEMENTS = np.frompyfunc(math.erf, 1, 1)


def erf(x: Any) -> Any:
    device = DEVICE_ARRAYS.get(x.__class__)
    if device is not None and device.erf is not None:
        return device.erf(x)
    if device is not None:  # a module without erf: on the host, as for numpy
        return device.upload(erf(device.download(x)))
    values = np.asarray(ERF_ELEMENTS(x), dtype=np.float64)
    return values.astype(x.dtype) if x.__class__ is ndarray else x.dtype.type(values)


ZEROS = {dtype: np.zeros((), dtype) for dtype in (F32, F64, I32, I64)}
# numpy's `maximum` runs its vector loop only where both operands advance: against a 0-d zero it compares
# one element at a time (0.05 ms for 64x2048 f32), against a row of zeros broadcast along the other axes
# in vector steps (0.025 ms). The rows, one per dtype and length, are kept (up to `KEPT_ROWS` of them).
ZERO_ROWS: dict[tuple[np.dtype, int], np.ndarray] = {}
ROW_SIZES = range(16, 1 << 16)  # last axes long enough to gain, and rows short enough to keep
KEPT_ROWS = 64


def relu(x: Any) -> Any:
    if x.__class__ is ndarray:
        zero = ZEROS.get(x.dtype)
        if zero is not None:
            if x.ndim > 1 and x.shape[-1] in ROW_SIZES:
                key = (x.dtype, x.shape[-1])
                zero = ZERO_ROWS.get(key)
                if zero is None:
                    if len(ZERO_ROWS) >= KEPT_ROWS:  # a program of many widths: start the rows again
                        ZERO_ROWS.clear()
                    zero = ZERO_ROWS[key] = np.zeros(x.shape[-1], x.dtype)
            return np.maximum(x, zero)
    no_bools("relu", x)
    return scalar(np.maximum(x, 0))


def absolute(x: Any) -> Any:
    if x.__class__ is ndarray and x.dtype is not BOOL:
        return np.absolute(x)
    no_bools("abs", x)
    if x.__class__ is int and x == -I64_LIMIT:  # an i64 scalar: its overflow is an error, as for `-x`
        raise PrimitiveError(f"integer overflow: the absolute value of {x} is out of the i64 range")
    return scalar(np.absolute(x))


def sign(x: Any) -> Any:
    if x.__class__ is ndarray and x.dtype is not BOOL:
        return np.sign(x)
    no_bools("sign", x)
    if x.__class__ is float:  # an unsuffixed literal no context gave a dtype: f32, as the checker types it
        x = np.float32(x)
    return scalar(np.sign(x))


def combining(function, name: str):
    """`maximum`/`minimum`: operands promote as they do for an operator; literals adapt (see `promote`)."""

    def make(weak_a: bool = False, weak_b: bool = False):
        def apply(a: Any, b: Any) -> Any:
            if a.__class__ is ndarray and b.__class__ is ndarray and a.dtype is b.dtype and a.dtype is not BOOL:
                try:
                    return function(a, b)
                except ValueError:
                    raise broadcast_problem(name, a, b) from None
            no_bools(name, a, b)
            a, b = promote(a, b, weak_a, weak_b)
            try:
                return scalar(function(a, b))
            except ValueError:
                raise broadcast_problem(name, a, b) from None

        return apply

    return make


def make_where(weak_a: bool = False, weak_b: bool = False):
    def where(condition: Any, a: Any, b: Any) -> Any:
        if kind_of(condition) != "b":
            raise PrimitiveError(f"`where` needs a bool condition, found {describe(condition)}")
        if (kind_of(a) == "b") != (kind_of(b) == "b"):
            raise PrimitiveError(
                f"`where` cannot choose between {describe(a)} and {describe(b)}; a bool is not a number"
            )
        a, b = promote(a, b, weak_a, weak_b)
        if condition.__class__ is bool:  # a scalar comparison's; a device module's `where` takes arrays alone
            condition = np.bool_(condition)
        try:
            return scalar(choose(condition, a, b))
        except ValueError:
            raise broadcast_problem("where", condition, a, b) from None

    return where


BIT_PATTERNS = {4: np.uint32, 8: np.uint64}  # an unsigned integer as wide as each number's bits
BRANCHLESS_SIZE = 4096  # below this many elements, numpy's `where` costs less than a bit select's passes


def on_host(value: Any) -> bool:
    """Whether `value` is a numpy array or a scalar (not an array of a device's array module)."""
    return value.__class__ is ndarray or isinstance(value, (np.generic, int, float))


def weak_scalar(value: int | float, dtype: np.dtype, otherwise: np.ndarray) -> np.ndarray:
    """The Python number `value` as a 0-d array of `dtype` where it converts exactly (numpy's `where` gives
    that dtype then), else `otherwise`."""
    if dtype.kind not in "fiu" or (dtype.kind != "f" and value.__class__ is float):
        return otherwise
    with np.errstate(all="ignore"):
        converted = np.asarray(value, dtype=dtype) if np.can_cast(np.min_scalar_type(value), dtype) else otherwise
    return converted if converted is not otherwise and converted == value else otherwise


def choose(condition: Any, a: Any, b: Any) -> Any:
    """`np.where(condition, a, b)`. numpy's `where` branches on every element, so a mask without a pattern
    (relu's derivative, `where(x > 0.0, d, 0.0)`) mispredicts half of them: 0.47 ms at 64x2048 f32. Between
    numbers of one dtype, a select on their bits, `b ^ ((a ^ b) * condition)` with the condition's 0 or 1,
    picks the same values (NaNs and signed zeros included) without a branch: 0.03 ms."""
    if condition.__class__ is not ndarray or condition.size < BRANCHLESS_SIZE or not (on_host(a) and on_host(b)):
        return np.where(condition, a, b)  # numpy's own, or a device array module's through numpy's protocols
    if a.__class__ is ndarray and plus_zero(b, a.dtype):  # a derivative's `where(x > 0.0, d, 0.0)`, in one pass
        return np.multiply(a.view(BIT_PATTERNS[a.dtype.itemsize]), condition).view(a.dtype)
    a_array, b_array = np.asarray(a), np.asarray(b)
    if b.__class__ in (float, int) and a_array.ndim:  # a weak literal takes the array's dtype, as numpy's rule
        b_array = weak_scalar(b, a_array.dtype, b_array)
    elif a.__class__ in (float, int) and b_array.ndim:
        a_array = weak_scalar(a, b_array.dtype, a_array)
    dtype = a_array.dtype
    if dtype != b_array.dtype or dtype.kind not in "fiu" or dtype.itemsize not in BIT_PATTERNS:
        return np.where(condition, a, b)
    bits = BIT_PATTERNS[dtype.itemsize]
    a_bits, b_bits = a_array.view(bits), b_array.view(bits)
    if not b_array.ndim and not b_bits:  # a zero of no bits set: a's bits where the condition holds
        return np.multiply(a_bits, condition).view(dtype)
    if not a_array.ndim and not a_bits:  # and b's where it does not
        return np.multiply(b_bits, np.logical_not(condition)).view(dtype)
    chosen = np.bitwise_xor(a_bits, b_bits)
    if chosen.shape != np.broadcast_shapes(chosen.shape, condition.shape):
        chosen = np.multiply(chosen, condition)
    else:
        np.multiply(chosen, condition, out=chosen)
    np.bitwise_xor(chosen, b_bits, out=chosen)
    return chosen.view(dtype)


def plus_zero(value: Any, dtype: np.dtype) -> bool:
    """Whether `value` is a literal +0 that takes `dtype` (no bit set in it): an integer zero beside any
    number tensor, a float +0.0 beside a float one (a -0.0 has its sign bit set)."""
    if dtype.kind not in "fiu" or dtype.itemsize not in BIT_PATTERNS:
        return False
    if value.__class__ is float:
        return dtype.kind == "f" and value == 0.0 and math.copysign(1.0, value) > 0.0
    return value.__class__ is int and value == 0


# ---------------------------------------------------------------------- reductions


def reduction(function, name: str, nonempty: bool = False, several: bool = True):
    """`several`: `axis=` may be a tuple of axes (not for `argmax` and `argmin`, as in numpy)."""

    def apply(x: Any, axis: Any, keepdims: Any) -> Any:
        x = as_array(x)
        if axis.__class__ is tuple and not several:
            raise PrimitiveError(f"`{name}` takes one axis, found the tuple {describe(axis)}")
        position = axes_of(x, axis, name)
        keep = flag_of(keepdims, "keepdims")
        if nonempty and x.size == 0 and reduces_nothing(x.shape, position):
            raise PrimitiveError(f"`{name}` of an empty tensor {describe(x)}")
        return scalar(function(x, axis=position, keepdims=keep))

    return apply


def truth(function, name: str):
    """`any` and `all` of a bool tensor: over no elements, false and true."""
    general = reduction(function, name)

    def apply(x: Any, axis: Any, keepdims: Any) -> Any:
        if kind_of(x) != "b":
            raise PrimitiveError(f"`{name}` needs a bool tensor, found {describe(x)}")
        return general(x, axis, keepdims)

    return apply


def reduces_nothing(shape: tuple[int, ...], axes: int | tuple[int, ...] | None) -> bool:
    """Whether a reduction over `axes` (None: all) meets an axis of length 0, where `max` or `mean` has no
    value; over other axes of a tensor with no elements, the result is as empty as numpy's."""
    if axes is None:
        return not math.prod(shape)
    return any(shape[axis] == 0 for axis in (axes if axes.__class__ is tuple else (axes,)))


def whole_reduction(whole, general, integers: bool):
    """A reduction over all elements with the default keywords (`sum(x)`): for a non-empty float
    array (or integer array, where `integers`), `whole(x, None)` (a ufunc's reduce) is
    `general(x, None, False)`, only faster."""

    def apply(x: Any) -> Any:
        if x.__class__ is ndarray and x.size:
            dtype = x.dtype
            if dtype is F32 or dtype is F64:
                return whole(x, None)
            if integers and (dtype is I64 or dtype is I32):
                return scalar(whole(x, None))
        return general(x, None, False)

    return apply


def summed_dtype(x: np.ndarray) -> np.dtype | None:
    """A sum keeps its dtype (numpy widens i32 to i64); bools are counted as i64."""
    return np.dtype(np.int32) if x.dtype == np.int32 else None


# On numpy arrays the reductions call their ufunc's `reduce`, as `np.sum`, `np.max` and `np.min` do after a
# few microseconds of Python that a training step's small reductions would pay each time. A device's
# arrays (cupy) take numpy's functions, which dispatch to the device's own.


# numpy sums pairwise only along the axis its inner loop runs over (the last of a C-ordered array); over the
# other axes it adds one slice at a time, and an f32 sum over many rows drifts (the mean of 2,000,000 rows of
# 0.1 came out 0.0985). Such a sum is taken over rows (its axes moved first, copied where they are not
# already), in blocks of this many rows, the blocks' sums in blocks again.
ROW_BLOCK = 128


def added(x: Any, axis: int | tuple[int, ...] | None, keepdims: bool, dtype: np.dtype | None = None) -> Any:
    """The sum along `axis`, in `dtype` (None: numpy's choice for `x`'s)."""
    if x.__class__ is ndarray:
        if x.dtype is F32 and dtype is None and x.ndim > 1 and x.size > ROW_BLOCK and axis is not None:
            drifting = drifting_axes(x, axis)
            if drifting is not None:  # the axes first, in one block of memory: rows of what is kept
                rows = np.ascontiguousarray(np.moveaxis(x, drifting, tuple(range(len(drifting)))))
                kept = rows.shape[len(drifting) :]
                summed = rows_summed(rows.reshape(-1, math.prod(kept))).reshape(kept)
                if keepdims:
                    summed = summed.reshape(tuple(1 if k in drifting else n for k, n in enumerate(x.shape)))
                return summed
        return np.add.reduce(x, axis=axis, dtype=dtype, keepdims=keepdims)
    return np.sum(x, axis=axis, keepdims=keepdims, dtype=dtype)


def drifting_axes(x: np.ndarray, axis: int | tuple[int, ...]) -> tuple[int, ...] | None:
    """The axes of an f32 sum (ascending) over more than `ROW_BLOCK` elements that numpy would add one slice at a
    time: any but the last of a C-ordered array. None where numpy's own sum is pairwise, or adds few."""
    if axis.__class__ is int:  # (a batch's bias gradient, each training step: decided in a few tests)
        position = axis % x.ndim
        if x.shape[position] <= ROW_BLOCK or (position == x.ndim - 1 and x.flags.c_contiguous):
            return None
        return (position,)
    axes = tuple(sorted(a % x.ndim for a in axis))
    if math.prod(x.shape[a] for a in axes) <= ROW_BLOCK:
        return None
    trailing = axes == tuple(range(x.ndim - len(axes), x.ndim))
    return None if trailing and x.flags.c_contiguous else axes


def rows_summed(rows: np.ndarray) -> np.ndarray:
    """The sum of the rows of a matrix, in blocks of `ROW_BLOCK` rows (each summed one row at a time, as numpy
    does), then the blocks' sums the same way: the error grows with the log of the count, not the count."""
    while rows.shape[0] > ROW_BLOCK:
        whole = rows.shape[0] - rows.shape[0] % ROW_BLOCK
        blocks = np.add.reduce(rows[:whole].reshape(whole // ROW_BLOCK, ROW_BLOCK, rows.shape[1]), axis=1)
        if whole < rows.shape[0]:
            blocks = np.concatenate([blocks, np.add.reduce(rows[whole:], axis=0, keepdims=True)])
        rows = blocks
    return np.add.reduce(rows, axis=0)


def total(x: Any, axis: int | tuple[int, ...] | None, keepdims: bool) -> Any:
    return added(x, axis, keepdims, summed_dtype(x))


def largest_of(x: Any, axis: int | tuple[int, ...] | None, keepdims: bool) -> Any:
    if x.__class__ is ndarray:
        return np.maximum.reduce(x, axis=axis, keepdims=keepdims)
    return np.max(x, axis=axis, keepdims=keepdims)


def smallest_of(x: Any, axis: int | tuple[int, ...] | None, keepdims: bool) -> Any:
    if x.__class__ is ndarray:
        return np.minimum.reduce(x, axis=axis, keepdims=keepdims)
    return np.min(x, axis=axis, keepdims=keepdims)


def mean(x: Any, axis: int | tuple[int, ...] | None, keepdims: bool) -> Any:
    if x.dtype.kind != "f":  # the mean of integers is a fraction: f32, DL's default float
        return np.mean(x, axis=axis, keepdims=keepdims, dtype=np.float64).astype(np.float32)
    if x.__class__ is not ndarray:
        return np.mean(x, axis=axis, keepdims=keepdims)
    # `np.mean`'s arithmetic without its Python: the sum in the array's dtype, divided by the count as an intp
    # (so in f64, rounded back to the array's dtype)
    summed = added(x, axis, keepdims)
    axes = range(x.ndim) if axis is None else (axis,) if axis.__class__ is int else axis
    count = np.intp(math.prod(x.shape[a] for a in axes))
    if summed.__class__ is ndarray:
        return np.true_divide(summed, count, out=summed, casting="unsafe")
    return summed.dtype.type(summed / count)


def variance(root: bool):
    """`var` (`std` where `root`): numpy's `var` with `ddof=correction` (the squared deviations from the mean,
    summed, over the count less the correction), computed in f64 as compiled code and torch's CPU kernels
    accumulate, and rounded to `x`'s dtype. A count at most the correction divides by zero,
    as torch's does: inf, or nan where every deviation is zero."""
    name = "std" if root else "var"

    def apply(x: Any, axis: Any, keepdims: Any, correction: Any) -> Any:
        x = floating(as_array(x), name)
        position = axes_of(x, axis, name)
        keep = flag_of(keepdims, "keepdims")
        if reduces_nothing(x.shape, position):
            raise PrimitiveError(f"`{name}` of an empty tensor {describe(x)}")
        if correction.__class__ is bool or not isinstance(correction, (int, float, np.number)):
            raise PrimitiveError(f"`{name}`'s `correction=` takes a number, found {describe(correction)}")
        axes = range(x.ndim) if position is None else (position,) if position.__class__ is int else position
        count = math.prod(x.shape[a] for a in axes)
        wide = x.astype(np.float64) if x.dtype == F32 else x
        deviation = wide - np.sum(wide, axis=position, keepdims=True) / np.float64(count)
        squares = np.sum(deviation * deviation, axis=position, keepdims=keep)
        with np.errstate(divide="ignore", invalid="ignore"):
            result = squares / max(np.float64(count) - np.float64(correction), np.float64(0))  # in f64, as compiled
        if root:
            result = np.sqrt(result)
        return scalar(result.astype(x.dtype, copy=False))

    return apply


def logsumexp(x: Any, axis: Any, keepdims: Any) -> Any:
    x = as_array(floating(x, "logsumexp"))
    position = axes_of(x, axis, "logsumexp")
    keep = flag_of(keepdims, "keepdims")
    # `initial` makes the peak of a zero-length axis -inf, so the result is -inf as in torch.
    peak = largest(x, position)
    peak = np.where(np.isfinite(peak), peak, 0).astype(x.dtype)
    total = np.log(np.sum(np.exp(x - peak), axis=position, keepdims=True)) + peak
    return scalar(total if keep else np.squeeze(total, axis=position))


def largest(x: Any, axis: int | tuple[int, ...] | None) -> Any:
    """The largest element along `axis`, kept as an axis of 1; -inf where the axis has no elements (as torch's
    logsumexp of nothing). numpy's `max(initial=-inf)` says this in one call; cupy's `max` has no `initial`."""
    if x.size:
        return largest_of(x, axis, True)
    axes = range(x.ndim) if axis is None else (axis,) if axis.__class__ is int else axis
    kept = tuple(1 if i in axes or i - x.ndim in axes else n for i, n in enumerate(x.shape))
    return array_module(x).full(kept, -np.inf, dtype=x.dtype)


def softmax(x: Any, axis: Any) -> Any:
    x = as_array(floating(x, "softmax"))
    position = axis_of(x, axis)
    shifted = np.exp(x - largest(x, position))
    return scalar(shifted / added(shifted, position, True))


def log_softmax(x: Any, axis: Any) -> Any:
    x = as_array(floating(x, "log_softmax"))
    position = axis_of(x, axis)
    shifted = x - largest(x, position)
    return scalar(shifted - np.log(added(np.exp(shifted), position, True)))


# ---------------------------------------------------------------------- structure


def make_matmul(weak_a: bool = False, weak_b: bool = False):
    def matmul(a: Any, b: Any) -> Any:
        if a.__class__ is ndarray and b.__class__ is ndarray and a.dtype is b.dtype and a.dtype is not BOOL:
            try:
                if Threads.count > 1 and threaded(a.size * (b.shape[-1] if b.ndim > 1 else 1)):
                    result = large_product(np.matmul, a, b)
                else:
                    result = np.matmul(a, b)
            except ValueError:
                raise PrimitiveError(matmul_problem(a, b) or f"matmul of {describe(a)} @ {describe(b)}") from None
            return result if result.__class__ is ndarray else scalar(result)
        no_bools("matmul", a, b)
        problem = matmul_problem(a, b)
        if problem is not None:
            raise PrimitiveError(problem)
        a, b = promote(a, b, weak_a, weak_b)
        return scalar(array_module(a, b).matmul(a, b))

    return matmul


def matmul_problem(a: Any, b: Any) -> str | None:
    """Why `a @ b` has no value, or None when the shapes fit."""
    shape_a, shape_b = np.shape(a), np.shape(b)
    shown = f"{describe(a)} @ {describe(b)}"
    if not shape_a or not shape_b:
        return f"matmul needs tensors of rank 1 or more, found {shown}; multiply by a scalar with `*`"
    inner_a = shape_a[-1]
    inner_b = shape_b[-2] if len(shape_b) > 1 else shape_b[0]
    if inner_a != inner_b:
        return f"matmul inner dimensions differ: {inner_a} vs {inner_b} ({shown})"
    try:
        np.broadcast_shapes(shape_a[:-2], shape_b[:-2])
    except ValueError:
        return f"matmul batch dimensions do not broadcast: {shown}"
    return None


def einsum(spec: Any, operands: tuple) -> Any:
    """numpy's `einsum` of operands of one dtype, after the checks the checker makes where it knows the
    shapes: one letter per axis, one size per letter (numpy would broadcast a size of 1)."""
    if spec.__class__ is not str:
        raise PrimitiveError(f"`einsum` takes its spec as a string, found {describe(spec)}")
    try:
        parsed = einsum_spec.parse(spec)
    except einsum_spec.SpecError as problem:
        raise PrimitiveError(str(problem)) from None
    if len(parsed.inputs) != len(operands):
        raise PrimitiveError(f'einsum spec "{spec}" names {len(parsed.inputs)} operands, found {len(operands)}')
    if not all(is_number_or_tensor(x) for x in operands):
        raise PrimitiveError(f"`einsum` takes numbers and tensors, found {describe(operands)}")
    xp = array_module(*operands)  # a scalar operand beside device tensors is moved to their device
    arrays = [xp.asarray(as_array(x)) for x in operands]
    if len({a.dtype for a in arrays}) > 1 or arrays[0].dtype == BOOL:
        raise PrimitiveError(f"`einsum` needs numbers of one dtype, found {describe(operands)}")
    sizes: dict[str, int] = {}
    for position, (letters, array) in enumerate(zip(parsed.inputs, arrays, strict=True)):
        if len(letters) != array.ndim:
            raise PrimitiveError(f"einsum operand {position + 1} is {describe(array)}, but the spec names {letters}")
        for letter, size in zip(letters, array.shape, strict=True):
            if sizes.setdefault(letter, size) != size:
                raise PrimitiveError(f"einsum `{letter}` is {sizes[letter]} in one operand and {size} in another")
    return scalar(np.einsum(str(parsed), *arrays, optimize=len(arrays) > 2))


def integers_of(values: tuple, what: str) -> tuple[int, ...]:
    for value in values:
        if not is_integer(value):
            raise PrimitiveError(f"{what} are integers, found {describe(value)}")
    return tuple(int(v) for v in values)


def flip(x: Any, axis: Any) -> Any:
    """A view of `x` with the axes `axis` names reversed (a slice with step -1, which every array module takes)."""
    x = along_axes(x, "flip")
    position = axes_of(x, axis, "flip")
    flipped = {a % x.ndim for a in ((position,) if position.__class__ is int else position)}
    return x[tuple(slice(None, None, -1) if a in flipped else slice(None) for a in range(x.ndim))]


def along_axes(x: Any, name: str) -> Any:
    x = as_array(x)
    if not x.ndim:
        raise PrimitiveError(f"`{name}` needs a tensor with an axis, found {describe(x)}")
    return x


def pad(x: Any, before: Any, after: Any, axis: Any, value: Any) -> Any:
    """`x` in a tensor of `value` grown by `before` ahead and `after` behind along each axis named; a negative
    width removes elements (torch's `pad`)."""
    x = along_axes(x, "pad")
    position = axes_of(x, axis, "pad")
    named = {a % x.ndim for a in ((position,) if position.__class__ is int else position)}
    before, after = integers_of((before, after), "`pad` widths")
    shape, source, target = list(x.shape), [slice(None)] * x.ndim, [slice(None)] * x.ndim
    for a in named:
        removed = max(-before, 0) + max(-after, 0)
        if removed > x.shape[a]:
            raise PrimitiveError(f"`pad` removes {removed} elements from axis {a} of {describe(x)}")
        shape[a] = x.shape[a] + before + after
        source[a] = slice(max(-before, 0), x.shape[a] - max(-after, 0))
        target[a] = slice(max(before, 0), shape[a] - max(after, 0))
    padded = array_module(x).full(shape, value.item() if hasattr(value, "item") else value, dtype=x.dtype)
    padded[tuple(target)] = x[tuple(source)]
    return padded


def cumsum(x: Any, axis: Any) -> Any:
    """The running sum along one axis, keeping the dtype (numpy would widen i32); of bools, an i64 count. An f32
    sum runs in f64, each result rounded once, as torch's does (10,000,000 running sums of 0.1 in f32 end at
    1.088e6)."""
    x = along_axes(x, "cumsum")
    if axis.__class__ is tuple:
        raise PrimitiveError(f"`cumsum` takes one axis, found the tuple {describe(axis)}")
    position = axes_of(x, axis, "cumsum")
    if x.dtype == F32:
        return np.cumsum(x, axis=position, dtype=np.float64).astype(np.float32)
    return np.cumsum(x, axis=position, dtype=np.int64 if x.dtype == BOOL else x.dtype)


def transpose(x: Any, axes: tuple) -> Any:
    x = as_array(x)
    axes = integers_of(axes, "transpose axes")
    if axes and sorted(axes) != list(range(x.ndim)):
        raise PrimitiveError(f"transpose axes {axes} are not a permutation of the {x.ndim} axes of {describe(x)}")
    return scalar(np.transpose(x, axes or None))


def swapaxes(x: Any, axis1: Any, axis2: Any) -> Any:
    x = as_array(x)
    for axis in (axis1, axis2):
        if not is_integer(axis) or not -x.ndim <= axis < x.ndim:
            raise PrimitiveError(f"`swapaxes` axis {shown_value(axis)} is out of range for {describe(x)}")
    return scalar(np.swapaxes(x, int(axis1), int(axis2)))


def reshape(x: Any, dims: tuple) -> Any:
    x = as_array(x)
    known, free = 1, 0
    for dim in dims:
        if not is_integer(dim) or dim < -1:
            raise PrimitiveError(f"reshape dimensions are integers (one may be -1), found {shown_value(dim)}")
        if dim == -1:
            free += 1
        else:
            known *= int(dim)
    if free > 1:
        raise PrimitiveError("reshape allows only one -1 dimension")
    if (free and (known == 0 or x.size % known)) or (not free and known != x.size):
        shown = ", ".join(str(int(d)) for d in dims)
        raise PrimitiveError(f"reshape cannot turn {describe(x)} ({x.size} elements) into [{shown}]")
    return scalar(x.reshape(tuple([int(d) for d in dims])))


def tensors_of(value: Any, name: str) -> list[np.ndarray]:
    if value.__class__ is not tuple or not value:
        raise PrimitiveError(
            f"`{name}` takes a non-empty tuple of tensors, such as `{name}((a, b), axis=0)`, found {describe(value)}"
        )
    if not all(is_number_or_tensor(v) for v in value):
        raise PrimitiveError(f"`{name}` takes a tuple of tensors, found {describe(value)}")
    arrays = [as_array(v) for v in value]
    if len({a.dtype for a in arrays}) > 1:
        raise PrimitiveError(f"`{name}` needs tensors of one dtype, found {describe(value)}")
    return arrays


def concat(tensors: Any, axis: Any) -> Any:
    arrays = tensors_of(tensors, "concat")
    if any(a.ndim == 0 for a in arrays):
        raise PrimitiveError(
            f"concat needs tensors of rank 1 or more, found {describe(tensors)}; use `stack` to join scalars"
        )
    position = axis_of(arrays[0], axis)
    ranks = {a.ndim for a in arrays}
    shapes = {a.shape[:position] + a.shape[position:][1:] for a in arrays}
    if len(ranks) > 1 or len(shapes) > 1:
        raise PrimitiveError(f"concat needs equal shapes except along axis {position}, found {describe(tensors)}")
    return np.concatenate(arrays, axis=position)


def stack(tensors: Any, axis: Any) -> Any:
    arrays = tensors_of(tensors, "stack")
    if len({a.shape for a in arrays}) > 1:
        raise PrimitiveError(f"stack needs tensors of one shape, found {describe(tensors)}")
    if not is_integer(axis):
        raise PrimitiveError(f"`axis=` takes an integer, found {describe(axis)}")
    rank = arrays[0].ndim + 1
    if not -rank <= axis < rank:
        raise PrimitiveError(f"axis {axis} is out of range for the stacked rank {rank}")
    return np.stack(arrays, axis=int(axis))


def broadcast_to(x: Any, dims: tuple) -> Any:
    x = as_array(x)
    shape = dims_of(dims)
    try:
        return scalar(np.broadcast_to(x, shape))
    except ValueError:
        raise PrimitiveError(f"cannot broadcast {describe(x)} to [{', '.join(map(str, shape))}]") from None


def integer_indices(indices: Any, name: str) -> np.ndarray:
    indices = as_array(indices)
    if indices.dtype.kind not in "iu":
        raise PrimitiveError(f"`{name}` needs integer indices, found {describe(indices)}")
    return indices


def gather(x: Any, indices: Any, axis: Any) -> Any:
    if np.ndim(x) == 0:
        raise PrimitiveError(f"`gather` needs a tensor of rank 1 or more, found {describe(x)}")
    x = as_array(x)
    indices = integer_indices(indices, "gather")
    position = axis_of(x, axis)
    size = x.shape[position]
    if x.__class__ is ndarray and indices.__class__ is ndarray:
        try:  # numpy checks the indices itself (`mode="raise"`), taking -size..-1 from the end as DL does
            return scalar(np.take(x, indices, axis=position))
        except IndexError:
            pass
    if indices.size and (indices.min() < -size or indices.max() >= size):
        bad = int(indices.max()) if indices.max() >= size else int(indices.min())
        raise PrimitiveError(f"gather index {bad} is out of range for axis {position} with size {size}")
    return scalar(np.take(x, array_module(x).asarray(indices), axis=position))  # indices where x is


def one_hot(labels: Any, classes: Any) -> Any:
    labels = integer_indices(labels, "one_hot")
    count = dims_of((classes,))[0]
    if labels.size and (labels.min() < 0 or labels.max() >= count):
        raise PrimitiveError(
            f"one_hot label {int(labels.max() if labels.max() >= count else labels.min())} "
            f"is out of range for {count} classes"
        )
    return (labels[..., None] == array_module(labels).arange(count)).astype(np.float32)


def triangle(keep, name: str):
    """`tril` (`keep` is `np.tril`) or `triu` of the last two axes of `x`, above or below diagonal `k`."""

    def apply(x: Any, k: Any) -> Any:
        if np.ndim(x) < 2:  # numpy would make a matrix of a vector
            raise PrimitiveError(f"`{name}` needs a tensor of rank 2 or more, found {describe(x)}")
        if not is_integer(k):
            raise PrimitiveError(f"`{name}` takes the diagonal `k` as an integer, found {describe(k)}")
        return keep(x, int(k))

    return apply


# ---------------------------------------------------------------------- creation


def filled(fill):
    def apply(dims: tuple, dtype: Any) -> Any:
        return scalar(np.full(dims_of(dims), fill, dtype=dtype_of(dtype)))

    return apply


def full(dims: tuple, value: Any, dtype: Any) -> Any:
    if value is None:
        raise PrimitiveError("`full` needs `value=`, as in `full(3, 4, value=0.5)`")
    if value.__class__ not in NUMBERS:
        raise PrimitiveError(f"`full` takes a number as `value`, found {describe(value)}")
    return scalar(np.full(dims_of(dims), value, dtype=dtype_of(dtype)))


def arange(bounds: tuple, dtype: Any) -> Any:
    """numpy's `arange`: of integers, `i64` (or `dtype=`'s); with a float bound, `float_steps`' count of values
    `a + i step`, computed in f64 and rounded once to f32 (f64 if a bound is, or `dtype=`'s)."""
    floats = [b for b in bounds if kind_of(b) == "f"]
    for bound in bounds:
        if kind_of(bound) not in "if" or np.ndim(bound):
            raise PrimitiveError(f"`arange` takes numbers as bounds, found {describe(bound)}")
    if dtype is not None and dtype_of(dtype).kind not in ("f" if floats else "fi"):
        made = "floats, not" if floats else "numbers, not"
        raise PrimitiveError(f"`arange` makes {made} {DTYPE_NAMES[dtype_of(dtype)]}")
    if not floats:
        if len(bounds) == 3 and int(bounds[2]) == 0:
            raise PrimitiveError("`arange`'s step is 0")
        counted = np.arange(*(int(b) for b in bounds), dtype=np.int64)
        return counted if dtype is None else counted.astype(dtype_of(dtype))
    wide = any(b.__class__ is not float and b.dtype == F64 for b in floats)
    try:
        start, step, count = float_steps([float(b) for b in bounds], wide)
    except ValueError as problem:
        raise PrimitiveError(str(problem)) from None
    kind = (F64 if wide else F32) if dtype is None else dtype_of(dtype)
    return (np.arange(count, dtype=np.float64) * step + start).astype(kind)


def eye(n: Any, m: Any, dtype: Any) -> Any:
    rows, columns = dims_of((n, n if m is None else m))
    return np.eye(rows, columns, dtype=dtype_of(dtype))


def linspace(start: Any, stop: Any, num: Any, dtype: Any) -> Any:
    """numpy's `linspace` (both ends included; `stop` exactly), in the two ends' float dtype (f64 if either is
    f64, else f32) or `dtype=`'s."""
    for end, what in ((start, "start"), (stop, "stop")):
        if kind_of(end) not in "if" or np.ndim(end):
            raise PrimitiveError(f"`linspace`'s `{what}` takes a number, found {describe(end)}")
    (count,) = dims_of((num,))
    if dtype is None:
        wide = any(kind_of(end) == "f" and end.__class__ is not float and end.dtype == F64 for end in (start, stop))
        kind = F64 if wide else F32
    else:
        kind = dtype_of(dtype)
    return np.linspace(float(start), float(stop), count, dtype=np.float64).astype(kind)


def random(draw: str, name: str):
    def apply(dims: tuple, seed: Any, dtype: Any) -> Any:
        if seed is not None and (not is_integer(seed) or seed < 0):
            raise PrimitiveError(f"`seed=` takes a non-negative integer, found {shown_value(seed)}")
        generator = RandomSource.generator() if seed is None else np.random.default_rng(int(seed))
        kind = dtype_of(dtype)
        if kind.kind != "f":
            raise PrimitiveError(f"`{name}` makes float tensors; `dtype=` must be f32 or f64")
        values = getattr(generator, draw)(dims_of(dims))
        return scalar(values.astype(kind))

    return apply


def categorical(logits: Any, seed: Any) -> Any:
    """One sample per distribution of `logits` (along the last axis): by the inverse of the cumulative
    probabilities at one uniform draw per distribution, from the run's stream or a seeded generator as `rand`
    draws. A category of probability 0 (a logit of -inf) is never drawn."""
    if seed is not None and (not is_integer(seed) or seed < 0):
        raise PrimitiveError(f"`seed=` takes a non-negative integer, found {shown_value(seed)}")
    logits = as_array(floating(logits, "categorical")).astype(np.float64)
    if logits.ndim == 0 or logits.shape[-1] == 0:
        raise PrimitiveError(f"`categorical` needs logits of at least one category, found {describe(logits)}")
    generator = RandomSource.generator() if seed is None else np.random.default_rng(int(seed))
    samples = categorical_samples(logits, generator)  # runtime/randomness.py: compiled code samples there too
    if samples is None:
        raise PrimitiveError(CATEGORICAL_PEAK)
    return scalar(samples)


def dropout(x: Any, p: Any, seed: Any, training: Any) -> Any:
    """Inverted dropout, as torch's: each element of `x` is kept where a uniform draw (`rand(n, seed=seed)`
    over the flattened `x`) is at least `p`, then scaled by `1 / (1 - p)`; `p = 1` drops everything. The
    mask depends on the seed and the size only, so the same call on the adjoint is the adjoint."""
    x = floating(x, "dropout")
    if kind_of(p) not in ("f", "i") or np.ndim(p) != 0 or not 0 <= p <= 1:
        raise PrimitiveError(f"`dropout` takes a probability `p` in [0, 1], found {shown_value(p)}")
    if seed is None:
        raise PrimitiveError("`dropout` needs `seed=`: its gradient draws the same mask again from the seed")
    if not is_integer(seed) or seed < 0:
        raise PrimitiveError(f"`seed=` takes a non-negative integer, found {shown_value(seed)}")
    if not flag_of(training, "training"):
        return x
    kind = as_array(x).dtype.type
    if p == 1:
        return scalar(np.zeros_like(as_array(x)))
    draws = np.random.default_rng(int(seed)).random(np.size(x)).astype(np.float32).reshape(np.shape(x))
    draws = array_module(x).asarray(draws)  # drawn on the host, as interpreted, then moved to x's device
    kept = np.where(draws >= np.float32(p), x, kind(0))
    return scalar(kept / (kind(1) - kind(p)))


# ---------------------------------------------------------------------- inspection and conversion


def shape(x: Any) -> tuple:
    return tuple(int(n) for n in np.shape(x))


def length(x: Any) -> int:
    if x.__class__ is tuple:
        return len(x)
    if x.__class__ is Tape:
        return x.size
    if not is_number_or_tensor(x) or np.ndim(x) == 0:
        raise PrimitiveError(f"`len` needs a tensor of rank 1 or more or a tuple, found {describe(x)}")
    return int(np.shape(x)[0])


def convertible(x: Any, name: str) -> None:
    if not is_number_or_tensor(x) and x.__class__ is not str:
        raise PrimitiveError(f"`{name}` takes a number, a tensor or a string, found {describe(x)}")


def to_float(x: Any, dtype: Any) -> Any:
    convertible(x, "float")
    kind = dtype_of(dtype)
    if kind.kind != "f":
        raise PrimitiveError("`float` converts to f32 or f64; use `int(x)` for integers")
    if x.__class__ is str:
        try:
            return kind.type(float(x))
        except ValueError:
            raise PrimitiveError(f'`float` cannot read "{x}" as a number') from None
    return kind.type(x) if x.__class__ in NUMBERS else scalar(x.astype(kind))


def to_text(x: Any) -> str:
    """`str(x)`: the text `print` shows for `x`."""
    return format_value(x)


def to_int(x: Any) -> Any:
    convertible(x, "int")
    if x.__class__ is str:
        try:
            value = int(x)
        except ValueError:
            raise PrimitiveError(f'`int` cannot read "{x}" as an integer') from None
        if not -I64_LIMIT <= value < I64_LIMIT:
            raise PrimitiveError(f'`int` of "{x}": out of the i64 range')
        return value
    if x.__class__ is ndarray or x.__class__ in DEVICE_ARRAYS:
        if x.dtype.kind != "f":
            return x.astype(np.int64)
        if not np.all(np.isfinite(x)):
            raise PrimitiveError("`int` of a tensor holding inf or nan")
        if x.size and not (x.min() >= -I64_LIMIT and x.max() < I64_LIMIT):
            raise PrimitiveError(f"`int` of a tensor with values out of the i64 range ({describe(x)})")
        return np.trunc(x).astype(np.int64)
    if kind_of(x) == "f":
        if not np.isfinite(x):
            raise PrimitiveError(f"`int` of {format_value(x)}")
        if not -I64_LIMIT <= x < I64_LIMIT:
            raise PrimitiveError(f"`int` of {format_value(x)}: out of the i64 range")
    return int(x)


# ---------------------------------------------------------------------- effects


def check(condition: Any, message: Any) -> tuple:
    if condition is not True and condition is not False and condition.__class__ is not np.bool_:
        raise PrimitiveError(f"`assert` needs a bool condition, found {describe(condition)}")
    if not condition:
        raise AssertionFailure(
            f"assertion failed: {format_value(message)}" if message != "assertion failed" else "assertion failed"
        )
    return ()


class Output:
    """Where `print` writes; the REPL and tests point it elsewhere."""

    write = None

    @classmethod
    def emit(cls, text: str) -> None:
        if cls.write is None:
            print(text, flush=False)
        else:
            cls.write(text + "\n")


def show_progress(done: Any, total: Any, label: Any) -> tuple:
    line = progress_line(done, total, label)
    if line is not None:
        Output.emit(line)
    return ()


def clock() -> np.float64:
    """`time()`: `perf_counter`, Python's monotonic clock of the highest resolution, in seconds."""
    return np.float64(time.perf_counter())


def print_values(values: tuple) -> tuple:
    Output.emit(" ".join(format_value(v) for v in values))
    return ()


# ---------------------------------------------------------------------- what derivative code is written with


def zeros_like(x: Any) -> Any:
    """Zeros in the shape of any value a gradient can have: a tensor, tuple, struct or tape of them."""
    if x.__class__ is ndarray or x.__class__ in DEVICE_ARRAYS:
        return np.zeros_like(x)
    if x.__class__ is tuple:
        return tuple(zeros_like(item) for item in x)
    if x.__class__ is StructValue:
        return StructValue(x.type, tuple(zeros_like(item) for item in x.values))
    if x.__class__ is Tape:
        return Tape.zeros(x)
    if x.__class__ in NUMBERS:
        return scalar(np.zeros_like(as_array(x)))
    raise PrimitiveError(f"`zeros_like` needs a tensor, tuple, struct or tape, found {describe(x)}")


def is_bool_leaf(x: Any) -> bool:
    tensor = x.__class__ is np.ndarray or x.__class__ in DEVICE_ARRAYS
    return x.__class__ in (bool, np.bool_) or (tensor and x.dtype == np.bool_)


def make_tree_add(weak_a: bool = False, weak_b: bool = False):
    """`tree_add(a, b)`: `a + b` leaf by leaf for two values of one structure (how gradients that meet are
    added); leaves promote as `+` does, and literals adapt."""
    add_leaves = combining(np.add, "tree_add")(weak_a, weak_b)

    def tree_add(a: Any, b: Any) -> Any:
        if a.__class__ is tuple and b.__class__ is tuple and len(a) == len(b):
            return tuple(tree_add(x, y) for x, y in zip(a, b, strict=True))
        if a.__class__ is StructValue and b.__class__ is StructValue and a.type.alike(b.type):
            return StructValue(a.type, tuple(tree_add(x, y) for x, y in zip(a.values, b.values, strict=True)))
        if a.__class__ is Tape and b.__class__ is Tape and a.size == b.size:
            return added_tapes(a, b, tree_add)
        if is_bool_leaf(a) and is_bool_leaf(b):  # a flag kept beside values: `or`, as numpy adds bools
            tensors = {a.__class__, b.__class__} & {np.ndarray, *DEVICE_ARRAYS}
            return np.logical_or(a, b) if tensors else bool(a or b)
        if is_number_or_tensor(a) and is_number_or_tensor(b):
            return add_leaves(a, b)
        if without_floats(a) and without_floats(b):  # a function beside the floats: its own adjoint, never
            return a  # read (autodiff/trees.py `zero_adjoint`)
        raise PrimitiveError(f"`tree_add` adds values of one structure, found {describe(a)} and {describe(b)}")

    return tree_add


def without_floats(x: Any) -> bool:
    """A function (a closure, a built-in, a module's function): a leaf with no adjoint."""
    return callable(x) and not is_number_or_tensor(x) and x.__class__ is not Tape


def unbroadcast(x: Any, like: Any) -> Any:
    """Sum `x` down to the shape of `like`: the reverse of broadcasting `like` up to `x`."""
    x, target = as_array(x), np.shape(like)
    extra = x.ndim - len(target)
    if extra < 0 or any(n not in (1, m) for n, m in zip(target, x.shape[extra:], strict=True)):
        raise PrimitiveError(f"cannot sum {describe(x)} down to the shape of {describe(like)}")
    axes = tuple(range(extra)) + tuple(extra + i for i, n in enumerate(target) if n == 1 and x.shape[extra + i] != 1)
    summed = added(x, axes, True, x.dtype) if axes else x
    kind = getattr(like, "dtype", None)
    if kind is not None and x.dtype.kind == "f" and kind.kind == "f" and kind != x.dtype:  # the variable's dtype
        summed = summed.astype(kind)
    return scalar(summed.reshape(target))


def reshape_like(x: Any, like: Any) -> Any:
    return scalar(np.reshape(as_array(x), np.shape(like)))


def squeeze(x: Any, axis: Any) -> Any:
    x = as_array(x)
    axes = axes_of(x, axis, "squeeze")
    for position in axes if axes.__class__ is tuple else (axes,):
        if x.shape[position] != 1:
            raise PrimitiveError(f"`squeeze` removes axes of size 1; axis {position} of {describe(x)} is not")
    return scalar(np.squeeze(x, axis=axes))


def expand_dims(x: Any, axis: Any) -> Any:
    x = as_array(x)
    if not is_integer(axis):
        raise PrimitiveError(f"`expand_dims` takes an integer axis, found {describe(axis)}")
    if not -x.ndim - 1 <= axis <= x.ndim:
        raise PrimitiveError(f"axis {axis} is out of range for `expand_dims` of a rank-{x.ndim} tensor")
    return np.expand_dims(x, int(axis))


def scatter_add(x: Any, indices: Any, updates: Any, axis: Any) -> Any:
    """`x` with `updates` added at `indices` along `axis` (repeated indices add up): the reverse of `gather`."""
    result = as_array(x).copy()
    if result.ndim == 0:
        raise PrimitiveError(f"`scatter_add` needs a tensor of rank 1 or more, found {describe(x)}")
    position = axis_of(result, axis) % result.ndim
    indices = integer_indices(indices, "scatter_add")
    xp, device = array_module(result), DEVICE_ARRAYS.get(result.__class__)
    place = (slice(None),) * position + (xp.asarray(indices),)
    add_at = np.add.at if device is None else device.scatter_add
    add_at(result, place, xp.asarray(updates).astype(result.dtype, copy=False))
    return result


def along_positions(x: Any, indices: Any, axis: Any, name: str) -> tuple[int, Any]:
    """The axis `axis` names and `indices` checked against `x` for `take_along_axis`/`add_along_axis`: of its
    rank, its sizes off the axis, each within the axis (negative ones counting from its end, as numpy's)."""
    if x.ndim == 0:
        raise PrimitiveError(f"`{name}` needs a tensor of rank 1 or more, found {describe(x)}")
    position = axis_of(x, axis) % x.ndim
    indices = integer_indices(indices, name)
    xp = array_module(x)
    indices = xp.asarray(indices)
    others = [(n, m) for k, (n, m) in enumerate(zip(indices.shape, x.shape, strict=False)) if k != position]
    if indices.ndim != x.ndim or any(n != m for n, m in others):
        raise PrimitiveError(f"`{name}`: indices {describe(indices)} do not fit {describe(x)} off axis {position}")
    size = x.shape[position]
    if indices.size and (int(indices.min()) < -size or int(indices.max()) >= size):
        wrong = int(indices.max()) if int(indices.max()) >= size else int(indices.min())
        raise PrimitiveError(f"`{name}`: index {wrong} is out of range for an axis of size {size}")
    return position, indices


def take_along_axis(x: Any, indices: Any, axis: Any) -> Any:
    x = as_array(x)
    position, indices = along_positions(x, indices, axis, "take_along_axis")
    return scalar(np.take_along_axis(x, indices, axis=position))


def add_along_axis(x: Any, indices: Any, updates: Any, axis: Any) -> Any:
    """`x` with each of `updates` added at its index along `axis` (repeated indices add up)."""
    result = as_array(x).copy()
    position, indices = along_positions(result, indices, axis, "add_along_axis")
    xp, device = array_module(result), DEVICE_ARRAYS.get(result.__class__)
    grid = [xp.arange(n).reshape([n if k == d else 1 for k in range(result.ndim)]) for d, n in enumerate(indices.shape)]
    grid[position] = indices % result.shape[position] if result.shape[position] else indices
    add_at = np.add.at if device is None else device.scatter_add
    updates = xp.broadcast_to(xp.asarray(updates).astype(result.dtype, copy=False), indices.shape)
    add_at(result, tuple(xp.broadcast_to(g, indices.shape) for g in grid), updates)
    return result


def argsort(x: Any, axis: Any, descending: Any) -> Any:
    """A stable sort's positions: ties keep their order, also descending (the order of the reversed tensor's
    stable ascending sort, reversed); nan sorts last ascending and first descending, as numpy's and torch's."""
    x = along_axes(x, "argsort")
    position = axis_of(x, axis) % x.ndim
    kind = "stable" if x.__class__ is ndarray else None  # cupy's sort is stable, and takes no other `kind`
    if not flag_of(descending, "descending"):
        return np.argsort(x, axis=position, kind=kind).astype(np.int64, copy=False)
    reversed_order = np.argsort(flip(x, position), axis=position, kind=kind)
    return (x.shape[position] - 1 - flip(reversed_order, position)).astype(np.int64, copy=False)


def sort(x: Any, axis: Any, descending: Any) -> Any:
    x = along_axes(x, "sort")
    position = axis_of(x, axis) % x.ndim
    return np.take_along_axis(x, argsort(x, position, descending), axis=position)


def topk(x: Any, k: Any, axis: Any, largest: Any) -> tuple:
    """`(values, indices)`: the `k` largest elements along `axis`, descending (the smallest, ascending, unless
    `largest`), and their i64 positions: the first `k` of a stable sort's, so ties keep their order (torch leaves
    theirs unspecified); nan counts as the largest, as in torch."""
    x = along_axes(x, "topk")
    no_bools("topk", x)
    position = axis_of(x, axis) % x.ndim
    size = x.shape[position]
    if not is_integer(k) or not 0 <= k <= size:
        where = f"(the size of axis {position} of {describe(x)})"
        raise PrimitiveError(f"`topk` takes `k` from 0 to {size} {where}, found {shown_value(k)}")
    order = argsort(x, position, flag_of(largest, "largest"))
    indices = order[(slice(None),) * position + (slice(0, int(k)),)]
    return np.take_along_axis(x, indices, axis=position), indices


def split_like(x: Any, like: Any, axis: Any) -> tuple:
    """`x` cut along `axis` into pieces as long as the tensors of `like`: the reverse of `concat`."""
    x = as_array(x)
    position = axis_of(x, axis) % max(x.ndim, 1)
    pieces = tensors_of(like, "split_like")
    for piece in pieces:
        others = [(n, m) for i, (n, m) in enumerate(zip(piece.shape, x.shape, strict=False)) if i != position]
        if piece.ndim != x.ndim or any(n != m for n, m in others):
            raise PrimitiveError(f"a piece {describe(piece)} does not fit {describe(x)} along axis {position}")
    sizes = [piece.shape[position] for piece in pieces]
    if sum(sizes) != x.shape[position]:
        raise PrimitiveError(f"pieces of {sum(sizes)} along axis {position} do not make {describe(x)}")
    return tuple(np.split(x, np.cumsum(sizes)[:-1].tolist(), axis=position))


def tree_map(f: Any, trees: tuple) -> Any:
    """`f` applied to the leaves at each place of trees of one structure (tuples and structs of tensors)."""
    first = trees[0]
    if first.__class__ is tuple:
        if any(t.__class__ is not tuple or len(t) != len(first) for t in trees):
            raise PrimitiveError(f"`tree_map` needs trees of one structure, found {', '.join(map(describe, trees))}")
        return tuple(tree_map(f, items) for items in zip(*trees, strict=True))
    if first.__class__ is StructValue:
        if any(t.__class__ is not StructValue or not first.type.alike(t.type) for t in trees):
            raise PrimitiveError(f"`tree_map` needs trees of one structure, found {', '.join(map(describe, trees))}")
        return StructValue(
            first.type, tuple(tree_map(f, items) for items in zip(*(t.values for t in trees), strict=True))
        )
    if not callable(f):
        raise PrimitiveError(f"`tree_map` needs a function, found {describe(f)}")
    return f(*trees)


def tree_dot(a: Any, b: Any) -> Any:
    """The sum over all leaves of `sum(a * b)`: `sqrt(tree_dot(g, g))` is a gradient's global norm."""
    pairs: list[tuple[np.ndarray, np.ndarray]] = []
    paired_leaves(a, b, (a, b), pairs)
    products = [np.vdot(p, q) if p.shape == q.shape else np.sum(p * q) for p, q in pairs]
    dtype = F64 if any(p.dtype == F64 or q.dtype == F64 for p, q in pairs) else F32
    return dtype.type(scalar(sum(products, dtype.type(0))))


def paired_leaves(x: Any, y: Any, trees: tuple, pairs: list) -> None:
    """Append the leaves at each place of `x` and `y` (parts of `tree_dot`'s `trees`) to `pairs` (a module
    function: a closure that calls itself would be a reference cycle, freed only by the cycle collector)."""
    if x.__class__ is tuple and y.__class__ is tuple and len(x) == len(y):
        for p, q in zip(x, y, strict=True):
            paired_leaves(p, q, trees, pairs)
    elif x.__class__ is StructValue and y.__class__ is StructValue and x.type.alike(y.type):
        for p, q in zip(x.values, y.values, strict=True):
            paired_leaves(p, q, trees, pairs)
    elif is_number_or_tensor(x) and is_number_or_tensor(y):
        pairs.append((as_array(x), as_array(y)))
    else:
        a, b = trees
        raise PrimitiveError(f"`tree_dot` needs two trees of one structure, found {describe(a)} and {describe(b)}")


def push(tape: Any, value: Any) -> Tape:
    if tape.__class__ is not Tape:
        raise PrimitiveError(f"`push` needs a tape, found {describe(tape)}")
    return Tape(value, tape, tape.size + 1)


def pop(tape: Any) -> tuple:
    if tape.__class__ is not Tape:
        raise PrimitiveError(f"`pop` needs a tape, found {describe(tape)}")
    if not tape.size:
        raise PrimitiveError("`pop` from an empty tape")
    if tape.zeros_of is not None:  # a tape of zeros: its top made now, from the top of the tape it is like
        top, rest = pop(tape.zeros_of)
        return (zeros_like(top), Tape.zeros(rest))
    return (tape.top, tape.rest)


def added_tapes(a: Tape, b: Tape, tree_add) -> Tape:
    """`tree_add` of two tapes of one size: entry by entry, where a tape of zeros adds nothing (in O(1))."""
    if a.zeros_of is not None:
        return b
    if b.zeros_of is not None:
        return a
    tops = []
    while a.size and a.zeros_of is None and b.zeros_of is None:
        tops.append(tree_add(a.top, b.top))
        a, b = a.rest, b.rest
    tape = b if a.zeros_of is not None else a  # the rest of one is zeros (or both are empty)
    for top in reversed(tops):
        tape = Tape(top, tape, tape.size + 1)
    return tape


# ---------------------------------------------------------------------- data

DIGITS_SCALE = np.float32(16)  # the digits' pixels count 0..16 "on" pixels; `digits()` scales them to [0, 1]


@functools.cache
def digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """The digits dataset shipped in the package (stdlib/data/digits.npz), read once per process."""
    with np.load(shipped("dl.stdlib", "data/digits.npz"), allow_pickle=False) as archive:
        images, labels = archive["images"], archive["labels"]
    return (images / DIGITS_SCALE).astype(np.float32), labels.astype(np.int64)


def digits() -> tuple:
    images, labels = digits_arrays()
    return images.copy(), labels.copy()


def generator_for(seed: Any) -> np.random.Generator:
    """A fresh generator for `seed=s`; the run's default generator without a seed (as `randn` and `rand`)."""
    if seed is None:
        return RandomSource.generator()
    if not is_integer(seed) or seed < 0:
        raise PrimitiveError(f"`seed=` takes a non-negative integer, found {shown_value(seed)}")
    return np.random.default_rng(int(seed))


def permutation(n: Any, seed: Any) -> np.ndarray:
    (count,) = dims_of((n,))
    return generator_for(seed).permutation(count)


def batches(data: Any, size: Any, shuffle: Any, seed: Any) -> Any:
    """Each tensor of `data` (or `data` itself) cut into batches of `size` rows along a new leading axis, after
    one shared shuffle of the rows if asked; the last partial batch is dropped."""
    tensors = list(data) if data.__class__ is tuple else [data]
    if not tensors or not all(is_number_or_tensor(t) and np.ndim(t) >= 1 for t in tensors):
        raise PrimitiveError(
            f"`batches` takes a tensor or a tuple of tensors of rank 1 or more, found {describe(data)}"
        )
    rows = {np.shape(t)[0] for t in tensors}
    if len(rows) > 1:
        raise PrimitiveError(f"`batches` needs tensors with one leading size, found {describe(data)}")
    (count,) = dims_of((size,))
    if count == 0:
        raise PrimitiveError("`batches` needs a batch size of 1 or more, found 0")
    total = rows.pop()
    order = generator_for(seed).permutation(total) if flag_of(shuffle, "shuffle") else slice(None)
    kept = total // count * count
    cut = tuple(np.reshape(t[order][:kept], (total // count, count, *np.shape(t)[1:])) for t in tensors)
    if World.size > 1:  # this rank's slice of every batch: the batches and their order are the world's
        rows_here = shard(count)
        cut = tuple(np.ascontiguousarray(t[:, rows_here]) for t in cut)
    return cut if data.__class__ is tuple else cut[0]


def path_of(path: Any, name: str) -> str:
    if path.__class__ is not str:
        raise PrimitiveError(f"`{name}` takes the path as a string, found {describe(path)}")
    if not path:
        raise PrimitiveError(f'`{name}` takes a file\'s path, found the empty string ""')
    return path


def unreadable(path: str, failure: OSError) -> PrimitiveError:
    reason = {FileNotFoundError: "no such file", IsADirectoryError: "it is a directory"}.get(type(failure))
    return PrimitiveError(f'cannot read "{path}": {reason or failure.strerror or "it cannot be opened"}')


def load_csv(path: Any, skip_header: Any, delimiter: Any) -> np.ndarray:
    """A numeric CSV file as an f32 matrix: one row per line (blank lines skipped), one column per value,
    the values between `delimiter`s (`","`; `"\\t"` for a TSV file)."""
    import csv  # imported here, as npz and gzip are: a run that reads no such file does without them

    path = path_of(path, "load_csv")
    skip = flag_of(skip_header, "skip_header")
    if delimiter.__class__ is not str or len(delimiter) != 1 or delimiter in '"\r\n':
        shown = f'"{delimiter}"' if delimiter.__class__ is str else describe(delimiter)
        raise PrimitiveError(f'`load_csv` takes `delimiter=` as one character (`","`, `"\\t"`), found {shown}')
    try:
        text = read_text(path).removeprefix("\ufeff")  # the byte order mark spreadsheets write first
        rows, lines, texts = csv_rows(csv.reader(io.StringIO(text, newline=""), delimiter=delimiter), path, skip)
    except OSError as failure:
        raise unreadable(path, failure) from None
    except UnicodeDecodeError:
        raise PrimitiveError(f'cannot read "{path}": it is not UTF-8 text') from None
    except csv.Error as failure:
        raise PrimitiveError(f'"{path}" is not valid CSV: {failure}') from None
    if not rows:
        raise PrimitiveError(f'"{path}" holds no rows of numbers')
    values = np.array(rows)
    with np.errstate(over="ignore"):
        single = values.astype(np.float32)
    beyond = np.argwhere(np.isfinite(values) & ~np.isfinite(single))
    if beyond.size:  # f32 holds up to 3.4e38: a larger value would be read as inf
        row, column = beyond[0]
        raise PrimitiveError(
            f'"{path}" line {lines[row]}, column {column + 1}: {values[row, column]:g} is beyond the range of f32; '
            "scale the column down before loading"
        )
    whole = (values == np.trunc(values)) & (np.abs(values) > 2**24) & np.isfinite(values)
    for row, column in np.argwhere(whole & (single.astype(np.float64) != values)):
        written = texts[row][column].strip()
        if INTEGER_TEXT.fullmatch(written):  # an id or a count past 2**24: f32 would read a neighbour
            raise PrimitiveError(
                f'"{path}" line {lines[row]}, column {column + 1}: {int(written)} is an integer f32 cannot hold '
                f"exactly (it would be {single[row, column]:.0f}); `load_csv` reads f32: write such a column to an "
                ".npz archive and read it with `load_npz(path, name, dtype=i64)`"
            )
    return single


MISSING = frozenset({"", "NA", "N/A", "NULL", "NONE", "-", "?"})  # how spreadsheets and R write a missing value
INTEGER_TEXT = re.compile(r"[+-]?\d+")  # a field written as an integer (`1.5e30` is a float, rounded as such)


def csv_rows(reader, path: str, skip_header: bool) -> tuple[list[list[float]], list[int], list[list[str]]]:
    """The rows of numbers, the line each is on, and each row's fields as written."""
    rows: list[list[float]] = []
    lines: list[int] = []
    fields: list[list[str]] = []
    first_line = 0
    header_skipped = skip_header
    for row in reader:
        if skip_header:
            skip_header = False
            continue
        if not any(cell.strip() for cell in row):
            continue
        line = reader.line_num
        if rows and len(row) != len(rows[0]):
            count = f"{len(row)} value{'s' * (len(row) != 1)}"
            comment = "; a CSV file has no comments" if row[0].lstrip().startswith("#") else ""
            raise PrimitiveError(f'"{path}" line {line} has {count}, but line {first_line} has {len(rows[0])}{comment}')
        try:
            rows.append([float(cell) for cell in row])
            lines.append(line)
            fields.append(row)
        except ValueError:
            texts = [cell for cell in row if not is_number_text(cell)]
            message = f'"{path}" line {line}: cannot read "{texts[0].strip()}" as a number'
            separator = next((c for c in "\t;|" if c in texts[0].strip()), None)
            if len(row) == 1 and separator is not None:  # a TSV file, or a European spreadsheet's `;`
                shown = "\\t" if separator == "\t" else separator
                message += f'; its values look separated by `{shown}`: `load_csv(path, delimiter="{shown}")`'
                raise PrimitiveError(message) from None
            if texts[0].strip().upper() in MISSING and len(texts) < len(row):  # `1,,3`, `1,NA,3` (not a header)
                column = row.index(texts[0]) + 1
                raise PrimitiveError(
                    f"{message}: column {column} has no value there; fill the missing values before loading, or "
                    "write them as `nan` (which `load_csv` reads)"
                ) from None
            if not rows and not header_skipped and len(texts) == len(row):  # all text: most likely column names
                message += f"; if line {line} is a header, skip it with `load_csv(path, skip_header=true)`"
            elif len(texts) < len(row):  # numbers beside text: a column of names or categories
                column = row.index(texts[0]) + 1
                message += (
                    f"; `load_csv` reads numbers only: write column {column}'s text as numbers "
                    "(a category as its index: 0, 1, 2, ...) before loading"
                )
            raise PrimitiveError(message) from None
        huge = next((cell for cell, value in zip(row, rows[-1], strict=True) if math.isinf(value)), None)
        if huge is not None and "inf" not in huge.lower():  # `1e400`: beyond any float, where `inf` is meant
            raise PrimitiveError(f'"{path}" line {line}: "{huge.strip()}" is beyond the range of numbers')
        first_line = first_line or line
    return rows, lines, fields


def is_number_text(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def load_npz(path: Any, name: Any, dtype: Any, rank: Any) -> Any:
    """The array `name` of the numpy archive at `path` (never unpickled), checked to have rank `rank` and
    converted to `dtype` without losing values."""
    path = path_of(path, "load_npz")
    if name.__class__ is not str:
        raise PrimitiveError(f"`load_npz` takes the array's name as a string, found {describe(name)}")
    kind = dtype_of(dtype)
    array = npz_array(path, name)
    if not is_integer(rank) or array.ndim != rank:
        shape = ", ".join(map(str, array.shape))
        raise PrimitiveError(
            f'array "{name}" in "{path}" has rank {array.ndim} (shape [{shape}]), not {shown_value(rank)}; '
            f"write `rank={array.ndim}`"
        )
    return scalar(converted(array, kind, f'array "{name}" in "{path}"'))


def npz_array(path: str, name: str) -> np.ndarray:
    """The array `name` of the archive at `path`, read by interp/npz.py (which never unpickles)."""
    from dl.interp import npz  # imported here, with zipfile: a run that reads no archive does without them

    try:
        with open_regular(path) as file:
            return npz.read_array(file, name, path)
    except OSError as failure:
        raise unreadable(path, failure) from None
    except npz.NpzError as problem:
        raise PrimitiveError(str(problem)) from None


def inexact_integers(array: np.ndarray, kind: np.dtype) -> np.ndarray:
    """The integers of `array` that the float dtype `kind` does not hold exactly (beyond 2**24 for f32, 2**53
    for f64, only some are), in order."""
    exact = 2 ** (np.finfo(kind).nmant + 1)
    wide = array.reshape(-1)
    large = wide[(wide > exact) | (wide < -exact)] if array.dtype.kind == "i" else wide[wide > exact]
    if not large.size:
        return large
    back = large.astype(kind)
    inside = np.abs(back) < 2.0**63
    same = np.zeros(large.shape, bool)
    if large.dtype.kind == "u":
        fits = inside & (large <= np.iinfo(np.int64).max)
        same[fits] = back[fits].astype(np.int64) == large[fits].astype(np.int64)
    else:
        same[inside] = back[inside].astype(np.int64) == large[inside]
    return large[~same]


def converted(array: np.ndarray, kind: np.dtype, what: str) -> np.ndarray:
    """`array` as `kind`, refusing what would change values: fractions or out-of-range values into integers,
    numbers into bools, and anything that is not a number."""
    found, wanted = DTYPE_NAMES.get(array.dtype, array.dtype.name), DTYPE_NAMES[kind]
    if array.dtype.kind not in "biuf" or (kind.kind == "b" and array.dtype.kind != "b"):
        raise PrimitiveError(f"{what} holds {found} values, which cannot be read as {wanted}")
    if kind.kind == "f" and array.dtype.kind == "f" and array.size:  # f64 into f32: past 3.4e38 it is inf
        with np.errstate(over="ignore"):
            beyond = np.isfinite(array) & ~np.isfinite(array.astype(kind))
        if beyond.any():
            found = array[beyond][0]
            raise PrimitiveError(f"{what} holds {found:g}, beyond the range of {wanted}; load it with `dtype=f64`")
    if kind.kind == "f" and array.dtype.kind in "iu" and array.size:  # past 2**24 (f32) not every integer is one
        changed = inexact_integers(array, kind)
        if changed.size:
            value = changed[0]
            number = int(value)
            better = "f64" if wanted == "f32" and abs(number) <= 2**53 else "i64" if number < 2**63 else None
            fix = f"load it with `dtype={better}`" if better else "no dtype of DL holds it"
            raise PrimitiveError(
                f"{what} holds {value}, which {wanted} cannot hold exactly (it would be {int(kind.type(value))}); {fix}"
            )
    if kind.kind == "i" and array.size:
        if array.dtype.kind == "f" and not np.all(np.isfinite(array) & (array == np.trunc(array))):
            raise PrimitiveError(f"{what} holds {found} values that are not whole numbers; load it with `dtype=f32`")
        limits = np.iinfo(kind)
        if array.min() < limits.min or array.max() > limits.max:
            raise PrimitiveError(f"{what} holds values out of the range of {wanted}")
    return array.astype(kind)


@functools.cache
@functools.cache
def corpus_bytes() -> bytes:
    """The text behind `text_corpus` (stdlib/data/corpus.txt.gz: Python 3.11's help topics, a frozen copy, so that
    every machine and every Python reads the same bytes), read once per process."""
    import gzip

    return gzip.decompress(shipped("dl.stdlib", "data/corpus.txt.gz").read_bytes())


def text_corpus(length: Any) -> np.ndarray:
    (count,) = dims_of((length,))
    text = corpus_bytes()
    if count > len(text):
        raise PrimitiveError(f"the corpus has {len(text)} bytes, fewer than the {count} asked for")
    return np.frombuffer(text, dtype=np.uint8, count=count).astype(np.int64)


def chars(codes: Any) -> str:
    """Byte values as text, decoded as UTF-8; bytes that are not valid UTF-8 show as the replacement character."""
    codes = integer_indices(codes, "chars")
    if codes.ndim > 1:
        raise PrimitiveError(f"`chars` takes a scalar or a rank-1 tensor of codes, found {describe(codes)}")
    if codes.size and (codes.min() < 0 or codes.max() > 255):
        bad = int(codes.min()) if codes.min() < 0 else int(codes.max())
        raise PrimitiveError(f"`chars` takes byte values 0..255, found {bad}")
    return codes.reshape(-1).astype(np.uint8).tobytes().decode("utf-8", errors="replace")


# ---------------------------------------------------------------------- convolution
# Images are NCHW. Nothing here loops over pixels: `sliding_window_view` gives every window of an image as a
# view, and one matmul does a convolution's arithmetic (im2col: the windows become the columns of a matrix).
# Where it is faster, a loop runs over the offsets within a window (9 for a 3 by 3 kernel), each step one
# numpy operation on all pixels at once.


def window_option(value: Any, name: str, what: str, least: int) -> int:
    if not is_integer(value) or value < least:
        raise PrimitiveError(f"`{name}` needs {what} of at least {least}, found {shown_value(value)}")
    return int(value)


def image(value: Any, name: str, parameter: str) -> np.ndarray:
    """A rank-4 float tensor argument."""
    x = as_array(floating(value, name))
    if x.ndim != 4:
        raise PrimitiveError(f"`{name}` needs `{parameter}` of rank 4, found {describe(value)}")
    return x


def image_shape(value: Any, name: str, parameter: str) -> tuple[int, int, int, int]:
    """The shape of a rank-4 `like` argument (only its shape is used)."""
    shape = np.shape(value)
    if len(shape) != 4:
        raise PrimitiveError(f"`{name}` needs `{parameter}` of rank 4, found {describe(value)}")
    return shape


def one_dtype(name: str, a: np.ndarray, b: np.ndarray) -> None:
    if a.dtype != b.dtype:
        raise PrimitiveError(f"`{name}` needs tensors of one dtype, found {describe(a)} and {describe(b)}")


def window_grid(name: str, shape: tuple, kernel: tuple, stride: int, padding: int) -> tuple[int, int]:
    """How many windows fit along H and W: PyTorch's (size + 2 padding - kernel) // stride + 1."""
    sizes = [size + 2 * padding - k for size, k in zip(shape[2:], kernel, strict=True)]
    if min(sizes) < 0:
        shown = "x".join(map(str, shape))
        raise PrimitiveError(
            f"`{name}`: a {kernel[0]} by {kernel[1]} window does not fit in a {shown} image with padding {padding}"
        )
    return sizes[0] // stride + 1, sizes[1] // stride + 1


def same_channels(name: str, image_dims: tuple, kernel_dims: tuple) -> None:
    if image_dims[1] != kernel_dims[1]:
        raise PrimitiveError(
            f"`{name}` channels differ: the image has {image_dims[1]}, the kernel takes {kernel_dims[1]}"
        )


def fits_grid(name: str, dy: np.ndarray, expected: tuple) -> None:
    if dy.shape != expected:
        raise PrimitiveError(
            f"`{name}` needs `dy` of the forward result's shape {list(expected)}, found {describe(dy)}"
        )


def padded(x: np.ndarray, padding: int, fill: float) -> np.ndarray:
    if not padding:
        return x
    n, c, h, w = x.shape
    result = array_module(x).full((n, c, h + 2 * padding, w + 2 * padding), fill, dtype=x.dtype)
    result[:, :, padding : padding + h, padding : padding + w] = x
    return result


def patches(x: np.ndarray, kernel: tuple, stride: int) -> np.ndarray:
    """im2col: the windows of (padded) images [N, C, H, W], `stride` apart, as [N, C * KH * KW, H' * W']."""
    n, channels = x.shape[:2]
    device = DEVICE_ARRAYS.get(x.__class__)
    windows = sliding_window_view if device is None else device.windows
    view = windows(x, kernel, axis=(2, 3))[:, :, ::stride, ::stride]  # [N, C, H', W', KH, KW]
    return view.transpose(0, 1, 4, 5, 2, 3).reshape(n, channels * kernel[0] * kernel[1], -1)


def correlate(x: np.ndarray, w: np.ndarray, stride: int) -> np.ndarray:
    """The cross-correlation of padded images [N, C, H, W] with kernels [O, C, KH, KW]: [N, O, H', W']."""
    outputs, _, kh, kw = w.shape
    rows, columns = (x.shape[2] - kh) // stride + 1, (x.shape[3] - kw) // stride + 1
    product = np.matmul(w.reshape(outputs, -1), patches(x, (kh, kw), stride))
    return product.reshape(x.shape[0], outputs, rows, columns)


def conv2d(x: Any, w: Any, stride: Any, padding: Any) -> np.ndarray:
    x, w = image(x, "conv2d", "x"), image(w, "conv2d", "w")
    stride = window_option(stride, "conv2d", "`stride=`", 1)
    padding = window_option(padding, "conv2d", "`padding=`", 0)
    one_dtype("conv2d", x, w)
    same_channels("conv2d", x.shape, w.shape)
    window_grid("conv2d", x.shape, w.shape[2:], stride, padding)
    return correlate(padded(x, padding, 0), w, stride)


def conv2d_input_grad(dy: Any, w: Any, like: Any, stride: Any, padding: Any) -> np.ndarray:
    """The gradient of `conv2d(x, w)` for `x` (shaped like `like`), given the result's gradient `dy`: a
    transposed convolution. One matmul gives, for every output position and kernel offset, what the input
    position under that offset receives; the offsets' shares are then added into place (col2im)."""
    name = "conv2d_input_grad"
    dy, w = image(dy, name, "dy"), image(w, name, "w")
    n, channels, h, width = image_shape(like, name, "like")
    stride = window_option(stride, name, "`stride=`", 1)
    padding = window_option(padding, name, "`padding=`", 0)
    one_dtype(name, dy, w)
    same_channels(name, (n, channels), w.shape)
    outputs, _, kh, kw = w.shape
    rows, columns = window_grid(name, (n, channels, h, width), (kh, kw), stride, padding)
    fits_grid(name, dy, (n, outputs, rows, columns))
    shares = np.matmul(w.reshape(outputs, -1).T, dy.reshape(n, outputs, rows * columns))
    shares = shares.reshape(n, channels, kh, kw, rows, columns)
    result = array_module(dy).zeros((n, channels, h + 2 * padding, width + 2 * padding), dy.dtype)
    for down, across in np.ndindex(kh, kw):  # kernel offsets, not pixels
        result[:, :, spaced(down, rows, stride), spaced(across, columns, stride)] += shares[:, :, down, across]
    return result[:, :, padding : padding + h, padding : padding + width]


def spaced(start: int, count: int, stride: int) -> slice:
    """The `count` positions `start`, `start + stride`, ...: where one kernel offset lands in every window."""
    return slice(start, start + (count - 1) * stride + 1, stride)


def conv2d_weight_grad(dy: Any, x: Any, like: Any, stride: Any, padding: Any) -> np.ndarray:
    """The gradient of `conv2d(x, w)` for `w` (shaped like `like`): each window of `x` weighted by `dy` there."""
    name = "conv2d_weight_grad"
    dy, x = image(dy, name, "dy"), image(x, name, "x")
    outputs, channels, kh, kw = image_shape(like, name, "like")
    stride = window_option(stride, name, "`stride=`", 1)
    padding = window_option(padding, name, "`padding=`", 0)
    one_dtype(name, dy, x)
    same_channels(name, x.shape, (outputs, channels))
    rows, columns = window_grid(name, x.shape, (kh, kw), stride, padding)
    fits_grid(name, dy, (x.shape[0], outputs, rows, columns))
    columns_of_x = patches(padded(x, padding, 0), (kh, kw), stride)
    product = np.matmul(dy.reshape(*dy.shape[:2], -1), columns_of_x.transpose(0, 2, 1))  # [N, O, C * KH * KW]
    return product.sum(axis=0).reshape(outputs, channels, kh, kw)


def pool_options(size: Any, stride: Any, padding: Any, name: str) -> tuple[int, int, int]:
    size = window_option(size, name, "a window `size`", 1)
    stride = size if stride is None else window_option(stride, name, "`stride=`", 1)
    padding = window_option(padding, name, "`padding=`", 0)
    if 2 * padding > size:
        raise PrimitiveError(f"`{name}` padding {padding} is more than half the window size {size}")
    return size, stride, padding


def max_pool2d(x: Any, size: Any, stride: Any, padding: Any) -> np.ndarray:
    x = image(x, "max_pool2d", "x")
    size, stride, padding = pool_options(size, stride, padding, "max_pool2d")
    rows, columns = window_grid("max_pool2d", x.shape, (size, size), stride, padding)
    source = padded(x, padding, -np.inf)
    result = source[:, :, spaced(0, rows, stride), spaced(0, columns, stride)].copy()
    maximum = array_module(x).maximum  # called with `out=`, which a device module's own function takes
    for down, across in np.ndindex(size, size):  # window offsets, not pixels
        maximum(result, source[:, :, spaced(down, rows, stride), spaced(across, columns, stride)], out=result)
    return result


def maxima(name: str, x: np.ndarray, size: int, stride: int, padding: int) -> np.ndarray:
    """Where each window of `max_pool2d` finds its maximum: [N, C, H', W'] offsets `down * size + across` within
    the windows. Of tied elements the first (in row-major order within the window) is chosen, as PyTorch does."""
    rows, columns = window_grid(name, x.shape, (size, size), stride, padding)
    source = padded(x, padding, -np.inf)
    best = source[:, :, spaced(0, rows, stride), spaced(0, columns, stride)].copy()
    offsets = array_module(x).zeros(best.shape, np.int64)
    for down, across in np.ndindex(size, size):  # window offsets, not pixels
        candidate = source[:, :, spaced(down, rows, stride), spaced(across, columns, stride)]
        offsets = np.where(candidate > best, down * size + across, offsets)  # strictly: a tie keeps the first
        array_module(x).maximum(best, candidate, out=best)
    return offsets


def max_pool2d_grad(dy: Any, x: Any, size: Any, stride: Any, padding: Any) -> np.ndarray:
    """The gradient of `max_pool2d(x, size)` for `x`: each element of `dy` goes to its window's maximum (the
    first, of ties); where windows overlap, what reaches one position adds up."""
    name = "max_pool2d_grad"
    dy, x = image(dy, name, "dy"), image(x, name, "x")
    size, stride, padding = pool_options(size, stride, padding, name)
    one_dtype(name, dy, x)
    offsets = maxima(name, x, size, stride, padding)
    fits_grid(name, dy, offsets.shape)
    n, channels, h, w = x.shape
    rows, columns = offsets.shape[2:]
    result = array_module(dy).zeros((n, channels, h + 2 * padding, w + 2 * padding), dy.dtype)
    zero = dy.dtype.type(0)
    for down, across in np.ndindex(size, size):
        place = (slice(None), slice(None), spaced(down, rows, stride), spaced(across, columns, stride))
        result[place] += np.where(offsets == down * size + across, dy, zero)
    return result[:, :, padding : padding + h, padding : padding + w]


def max_pool2d_gather(v: Any, x: Any, size: Any, stride: Any, padding: Any) -> np.ndarray:
    """The elements of `v` at the positions where `max_pool2d(x, size)` finds each window's maximum: the adjoint
    of `max_pool2d_grad` (`max_pool2d_gather(x, x, size)` is `max_pool2d(x, size)`)."""
    name = "max_pool2d_gather"
    v, x = image(v, name, "v"), image(x, name, "x")
    size, stride, padding = pool_options(size, stride, padding, name)
    one_dtype(name, v, x)
    if v.shape != x.shape:
        raise PrimitiveError(f"`{name}` needs `v` of the shape of `x`, found {describe(v)} and {describe(x)}")
    offsets = maxima(name, x, size, stride, padding)
    rows, columns = offsets.shape[2:]
    source = padded(v, padding, 0)
    result = array_module(v).zeros(offsets.shape, v.dtype)
    for down, across in np.ndindex(size, size):
        chosen = offsets == down * size + across
        result = np.where(chosen, source[:, :, spaced(down, rows, stride), spaced(across, columns, stride)], result)
    return result


# ---------------------------------------------------------------------- data parallelism (runtime/world.py)


def rank() -> int:
    return World.rank


def world_size() -> int:
    return World.size


def allreduce_mean(tree: Any) -> Any:
    """`tree` (a float tensor, or a tuple or struct of them) averaged leaf by leaf over every rank of the world;
    in a world of 1, `tree` itself."""
    leaves: list[np.ndarray] = []
    float_leaves(tree, tree, leaves)
    if World.size == 1:
        return tree
    return with_leaves(tree, iter(average(leaves)))


# (module functions, not closures of `allreduce_mean`: a closure that calls itself is a reference cycle, which
# kept every step's gradient arrays alive until the garbage collector ran)
def float_leaves(x: Any, tree: Any, leaves: list) -> None:
    """Append the float tensors of `x` (a part of `tree`) to `leaves`, in order."""
    if x.__class__ is tuple:
        for item in x:
            float_leaves(item, tree, leaves)
    elif x.__class__ is StructValue:
        for item in x.values:
            float_leaves(item, tree, leaves)
    elif is_number_or_tensor(x) and as_array(x).dtype in (F32, F64):
        leaves.append(as_array(x))
    else:
        raise PrimitiveError(
            f"`allreduce_mean` takes a float tensor, or a tuple or struct of them, found {describe(x)}"
            + ("" if x is tree else f" in {describe(tree)}")
        )


def with_leaves(x: Any, leaves: Iterator) -> Any:
    """`x` with its leaves taken from `leaves`, in order."""
    if x.__class__ is tuple:
        return tuple(with_leaves(item, leaves) for item in x)
    if x.__class__ is StructValue:
        return StructValue(x.type, tuple(with_leaves(item, leaves) for item in x.values))
    return scalar(next(leaves)) if x.__class__ is not ndarray else next(leaves)


# ---------------------------------------------------------------------- the table

maximum = combining(np.maximum, "maximum")
minimum = combining(np.minimum, "minimum")
LARGER, SMALLER = maximum(), minimum()


def clip(x: Any, lo: Any, hi: Any) -> Any:
    """numpy's `clip`: `minimum(maximum(x, lo), hi)`, the operands promoting as an operator's (a literal bound has
    the result's dtype already: the checker gives it)."""
    return SMALLER(LARGER(x, lo), hi)


# Primitives whose operands promote together as an operator's do (`operands` in their records).
# `LITERAL_ADAPTING[p](weak_a, weak_b)` is p's implementation when some of those operands are literals.
LITERAL_ADAPTING = {
    Prim.MAXIMUM: maximum,
    Prim.MINIMUM: minimum,
    Prim.WHERE: make_where,
    Prim.MATMUL: make_matmul,
    Prim.TREE_ADD: make_tree_add,
}

# The interpreter's implementation of every primitive, by `Prim` (a test checks that none is missing).
IMPLEMENTATIONS = {
    Prim.EXP: unary(np.exp, "exp"),
    Prim.LOG: unary(np.log, "log"),
    Prim.SQRT: unary(np.sqrt, "sqrt"),
    Prim.TANH: unary(np.tanh, "tanh"),
    Prim.SIGMOID: sigmoid,
    Prim.RELU: relu,
    Prim.ABS: absolute,
    Prim.SIN: unary(np.sin, "sin"),
    Prim.COS: unary(np.cos, "cos"),
    Prim.TAN: unary(np.tan, "tan"),
    Prim.ASIN: unary(np.arcsin, "asin"),
    Prim.ACOS: unary(np.arccos, "acos"),
    Prim.ATAN: unary(np.arctan, "atan"),
    Prim.SOFTPLUS: unary(softplus, "softplus"),
    Prim.LOG1P: unary(np.log1p, "log1p"),
    Prim.EXPM1: unary(np.expm1, "expm1"),
    Prim.ERF: unary(erf, "erf"),
    Prim.FLOOR: unary(np.floor, "floor"),
    Prim.CEIL: unary(np.ceil, "ceil"),
    Prim.ROUND: unary(np.rint, "round"),  # halves to even, as numpy's and torch's `round`
    Prim.SIGN: sign,
    Prim.ISNAN: float_test(np.isnan, "isnan"),
    Prim.ISINF: float_test(np.isinf, "isinf"),
    Prim.ISFINITE: float_test(np.isfinite, "isfinite"),
    Prim.MAXIMUM: maximum(),
    Prim.MINIMUM: minimum(),
    Prim.CLIP: clip,
    Prim.WHERE: make_where(),
    Prim.SUM: reduction(total, "sum"),
    Prim.MEAN: reduction(mean, "mean", nonempty=True),
    Prim.MAX: reduction(largest_of, "max", nonempty=True),
    Prim.MIN: reduction(smallest_of, "min", nonempty=True),
    Prim.ARGMAX: reduction(np.argmax, "argmax", nonempty=True, several=False),
    Prim.ARGMIN: reduction(np.argmin, "argmin", nonempty=True, several=False),
    Prim.ANY: truth(np.any, "any"),
    Prim.ALL: truth(np.all, "all"),
    Prim.LOGSUMEXP: logsumexp,
    Prim.VAR: variance(root=False),
    Prim.STD: variance(root=True),
    Prim.SOFTMAX: softmax,
    Prim.LOG_SOFTMAX: log_softmax,
    Prim.MATMUL: make_matmul(),
    Prim.EINSUM: einsum,
    Prim.TRANSPOSE: transpose,
    Prim.FLIP: flip,
    Prim.PAD: pad,
    Prim.CUMSUM: cumsum,
    Prim.TAKE_ALONG_AXIS: take_along_axis,
    Prim.ARGSORT: argsort,
    Prim.SORT: sort,
    Prim.TOPK: topk,
    Prim.SWAPAXES: swapaxes,
    Prim.RESHAPE: reshape,
    Prim.CONCAT: concat,
    Prim.STACK: stack,
    Prim.BROADCAST_TO: broadcast_to,
    Prim.GATHER: gather,
    Prim.ONE_HOT: one_hot,
    Prim.TRIL: triangle(np.tril, "tril"),
    Prim.TRIU: triangle(np.triu, "triu"),
    Prim.ZEROS: filled(0),
    Prim.ONES: filled(1),
    Prim.FULL: full,
    Prim.ARANGE: arange,
    Prim.EYE: eye,
    Prim.LINSPACE: linspace,
    Prim.RANDN: random("standard_normal", "randn"),
    Prim.RAND: random("random", "rand"),
    Prim.CATEGORICAL: categorical,
    Prim.DROPOUT: dropout,
    Prim.SHAPE: shape,
    Prim.LEN: length,
    Prim.FLOAT: to_float,
    Prim.INT: to_int,
    Prim.STR: to_text,
    Prim.ASSERT: check,
    Prim.PRINT: on_rank_zero(print_values),
    Prim.TIME: clock,
    Prim.ZEROS_LIKE: zeros_like,
    Prim.STOP_GRADIENT: lambda x: x,
    Prim.UNBROADCAST: unbroadcast,
    Prim.RESHAPE_LIKE: reshape_like,
    Prim.EXPAND_DIMS: expand_dims,
    Prim.SQUEEZE: squeeze,
    Prim.SCATTER_ADD: scatter_add,
    Prim.ADD_ALONG_AXIS: add_along_axis,
    Prim.SPLIT_LIKE: split_like,
    Prim.TREE_ADD: make_tree_add(),
    Prim.TAPE: lambda like=None: Tape(),
    Prim.PUSH: push,
    Prim.POP: pop,
    Prim.TREE_MAP: tree_map,
    Prim.TREE_DOT: tree_dot,
    # data
    Prim.DIGITS: digits,
    Prim.PERMUTATION: permutation,
    Prim.BATCHES: batches,
    Prim.LOAD_CSV: load_csv,
    Prim.LOAD_NPZ: load_npz,
    Prim.TEXT_CORPUS: text_corpus,
    Prim.CHARS: chars,
    # metrics and progress
    Prim.LOG_METRIC: on_rank_zero(log_value),
    Prim.PROGRESS: on_rank_zero(show_progress),
    # checkpoints
    Prim.SAVE: on_rank_zero(checkpoints.save),
    Prim.LOAD: checkpoints.load,
    # convolution
    Prim.CONV2D: conv2d,
    Prim.MAX_POOL2D: max_pool2d,
    Prim.CONV2D_INPUT_GRAD: conv2d_input_grad,
    Prim.CONV2D_WEIGHT_GRAD: conv2d_weight_grad,
    Prim.MAX_POOL2D_GRAD: max_pool2d_grad,
    Prim.MAX_POOL2D_GATHER: max_pool2d_gather,
    # data parallelism
    Prim.RANK: rank,
    Prim.WORLD_SIZE: world_size,
    Prim.ALLREDUCE_MEAN: allreduce_mean,
}

# Faster implementations of calls whose arguments after the first are these constants: `sum(x)`,
# `max(x)` and `min(x)` (axis and keepdims left at their defaults) reduce with the ufunc directly.
SPECIALISED: dict[Prim, tuple[tuple, Any]] = {
    prim: ((None, False), whole_reduction(whole, IMPLEMENTATIONS[prim], integers=prim is not Prim.SUM))
    for prim, whole in ((Prim.SUM, np.add.reduce), (Prim.MAX, np.maximum.reduce), (Prim.MIN, np.minimum.reduce))
}

# What the interpreter refuses to run, with why: nothing.
REFUSED: dict[Prim, str] = {}
SUPPORT = Support("interp", frozenset(IMPLEMENTATIONS), REFUSED)


def tensor_positions(prim: Prim) -> tuple[int, ...]:
    """The argument positions of `prim` that must hold a number or a tensor (`tensors` in its record): the
    dispatcher rejects anything else (a string, tuple, struct or function) before the implementation runs."""
    primitive = PRIMITIVES[prim]
    return primitive.positions(primitive.tensors)


def adapting_offset(prim: Prim) -> int:
    """The position of the first of `prim`'s two literal-adapting operands among its implementation's arguments."""
    primitive = PRIMITIVES[prim]
    return primitive.positions(primitive.operands)[0]


def tensor_argument_problem(prim: Prim, position: int, value: Any) -> PrimitiveError:
    name = PRIMITIVES[prim].parameters[position]
    return PrimitiveError(f"`{prim.value}` takes a number or a tensor as `{name}`, found {describe(value)}")


def check_tensor_arguments(prim: Prim, values: list) -> None:
    for position in tensor_positions(prim):
        if not is_number_or_tensor(values[position]):
            raise tensor_argument_problem(prim, position, values[position])
