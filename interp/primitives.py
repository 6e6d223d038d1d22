"""numpy implementations of DL's primitives, one per member of `Prim`.

Each function takes its arguments positionally in the order `Signature`
documents (lang/primitives.py). A mistake that can only be seen at run time
raises `PrimitiveError` with a message in DL's terms; the interpreter adds the
span and the DL call stack.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from dl.interp.values import DTYPES, describe, format_value
from dl.lang.primitives import Prim


class PrimitiveError(Exception):
    """A run-time failure inside a primitive, in the user's terms."""


class AssertionFailure(PrimitiveError):
    pass


def dtype_of(value: Any) -> np.dtype:
    if isinstance(value, np.dtype):
        return value
    if isinstance(value, str):
        return DTYPES[value]
    raise PrimitiveError(f"`dtype=` takes a type name such as `f64`, found {describe(value)}")


def as_array(value: Any) -> np.ndarray:
    """A tensor view of a scalar or tensor; Python floats are f32 in DL."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, float) and not isinstance(value, np.floating):
        return np.asarray(value, dtype=np.float32)
    return np.asarray(value)


def scalar(value: Any) -> Any:
    """Turn a 0-d result into DL's scalar representation (i64 and bool as Python values)."""
    if isinstance(value, np.ndarray):
        if value.ndim:
            return value
        value = value[()]
    if isinstance(value, np.int64):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def axis_of(x: np.ndarray, axis: Any) -> int | None:
    if axis is None:
        return None
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise PrimitiveError(f"`axis=` takes an integer, found {describe(axis)}")
    rank = np.ndim(x)
    if not -rank <= axis < max(rank, 1):
        raise PrimitiveError(f"axis {axis} is out of range for a tensor of rank {rank}")
    return int(axis)


def dims_of(dims: tuple) -> tuple[int, ...]:
    for dim in dims:
        if not isinstance(dim, (int, np.integer)) or isinstance(dim, bool) or dim < 0:
            raise PrimitiveError(f"a dimension must be a non-negative integer, found {format_value(dim)}")
    return tuple(int(d) for d in dims)


def floating(x: Any, name: str) -> Any:
    if isinstance(x, (bool, int, np.integer, np.bool_)) or (isinstance(x, np.ndarray) and x.dtype.kind in "iub"):
        raise PrimitiveError(f"`{name}` needs a float tensor, found {describe(x)}; convert with `float(x)`")
    return x


def unary(function, name: str):
    def apply(x: Any) -> Any:
        return function(floating(x, name))

    return apply


def sigmoid(x: Any) -> Any:
    x = floating(x, "sigmoid")
    # Stable for large |x| in both directions.
    return np.exp(-np.logaddexp(0, -x)).astype(as_array(x).dtype) if np.ndim(x) else _scalar_sigmoid(x)


def _scalar_sigmoid(x: Any) -> Any:
    kind = type(x) if isinstance(x, np.floating) else np.float32
    return kind(np.exp(-np.logaddexp(0, -x)))


def relu(x: Any) -> Any:
    return np.maximum(x, 0)


def reduce(function, name: str):
    def apply(x: Any, axis: Any, keepdims: Any) -> Any:
        x = as_array(x)
        return scalar(function(x, axis=axis_of(x, axis), keepdims=bool(keepdims)))

    return apply


def reduce_nonempty(function, name: str):
    def apply(x: Any, axis: Any, keepdims: Any) -> Any:
        x = as_array(x)
        position = axis_of(x, axis)
        if x.size == 0:
            raise PrimitiveError(f"`{name}` of an empty tensor {describe(x)}")
        return scalar(function(x, axis=position, keepdims=bool(keepdims)))

    return apply


def logsumexp(x: Any, axis: Any, keepdims: Any) -> Any:
    x = as_array(floating(x, "logsumexp"))
    position = axis_of(x, axis)
    peak = np.max(x, axis=position, keepdims=True)
    peak = np.where(np.isfinite(peak), peak, 0).astype(x.dtype)
    total = np.log(np.sum(np.exp(x - peak), axis=position, keepdims=True)) + peak
    return scalar(total if keepdims else np.squeeze(total, axis=position))


def softmax(x: Any, axis: Any) -> Any:
    x = as_array(floating(x, "softmax"))
    position = axis_of(x, axis)
    shifted = np.exp(x - np.max(x, axis=position, keepdims=True))
    return scalar(shifted / np.sum(shifted, axis=position, keepdims=True))


def log_softmax(x: Any, axis: Any) -> Any:
    x = as_array(floating(x, "log_softmax"))
    position = axis_of(x, axis)
    shifted = x - np.max(x, axis=position, keepdims=True)
    return scalar(shifted - np.log(np.sum(np.exp(shifted), axis=position, keepdims=True)))


def matmul(a: Any, b: Any) -> Any:
    a, b = as_array(a), as_array(b)
    if a.ndim == 0 or b.ndim == 0:
        raise PrimitiveError(f"`@` needs tensors of rank 1 or more, found {describe(a)} @ {describe(b)}")
    inner_a = a.shape[-1]
    inner_b = b.shape[-2] if b.ndim > 1 else b.shape[0]
    if inner_a != inner_b:
        raise PrimitiveError(f"matmul inner dimensions differ: {inner_a} vs {inner_b} ({describe(a)} @ {describe(b)})")
    return scalar(np.matmul(a, b))


def transpose(x: Any, axes: tuple) -> Any:
    x = as_array(x)
    if axes and sorted(int(a) for a in axes) != list(range(x.ndim)):
        raise PrimitiveError(
            f"transpose axes {tuple(int(a) for a in axes)} are not a permutation of the {x.ndim} axes of {describe(x)}"
        )
    return np.transpose(x, axes or None)


def reshape(x: Any, dims: tuple) -> Any:
    x = as_array(x)
    for dim in dims:
        if not isinstance(dim, (int, np.integer)) or isinstance(dim, bool) or dim < -1:
            raise PrimitiveError(f"reshape dimensions are integers (one may be -1), found {format_value(dim)}")
    if sum(1 for d in dims if d == -1) > 1:
        raise PrimitiveError("reshape allows only one -1 dimension")
    known = int(np.prod([d for d in dims if d != -1]))
    if (-1 in dims and (known == 0 or x.size % known)) or (-1 not in dims and known != x.size):
        shown = ", ".join(str(int(d)) for d in dims)
        raise PrimitiveError(f"cannot reshape {describe(x)} ({x.size} elements) to [{shown}]")
    return scalar(np.reshape(x, tuple(int(d) for d in dims)))


def tensors_of(value: Any, name: str) -> list[np.ndarray]:
    if not isinstance(value, tuple) or not value:
        raise PrimitiveError(f"`{name}` takes a non-empty tuple of tensors, such as `{name}((a, b), axis=0)`")
    arrays = [as_array(v) for v in value]
    dtypes = {a.dtype for a in arrays}
    if len(dtypes) > 1:
        raise PrimitiveError(f"`{name}` needs tensors of one dtype, found {describe(value)}")
    return arrays


def concat(tensors: Any, axis: Any) -> Any:
    arrays = tensors_of(tensors, "concat")
    position = axis_of(arrays[0], axis)
    shapes = {a.shape[:position] + a.shape[position + 1 :] if position != -1 else a.shape[:-1] for a in arrays}
    if len({a.ndim for a in arrays}) > 1 or len(shapes) > 1:
        raise PrimitiveError(f"concat needs equal shapes except along axis {position}, found {describe(tensors)}")
    return np.concatenate(arrays, axis=position)


def stack(tensors: Any, axis: Any) -> Any:
    arrays = tensors_of(tensors, "stack")
    if len({a.shape for a in arrays}) > 1:
        raise PrimitiveError(f"stack needs tensors of one shape, found {describe(tensors)}")
    rank = arrays[0].ndim + 1
    if not -rank <= int(axis) < rank:
        raise PrimitiveError(f"axis {axis} is out of range for the stacked rank {rank}")
    return np.stack(arrays, axis=int(axis))


def broadcast_to(x: Any, dims: tuple) -> Any:
    x = as_array(x)
    shape = dims_of(dims)
    try:
        return np.broadcast_to(x, shape)
    except ValueError:
        raise PrimitiveError(f"cannot broadcast {describe(x)} to [{', '.join(map(str, shape))}]") from None


def integer_indices(indices: Any, name: str) -> np.ndarray:
    indices = as_array(indices)
    if indices.dtype.kind not in "iu":
        raise PrimitiveError(f"`{name}` needs integer indices, found {describe(indices)}")
    return indices


def gather(x: Any, indices: Any, axis: Any) -> Any:
    x = as_array(x)
    indices = integer_indices(indices, "gather")
    position = axis_of(x, axis)
    size = x.shape[position]
    if indices.size and (indices.min() < -size or indices.max() >= size):
        bad = int(indices.max()) if indices.max() >= size else int(indices.min())
        raise PrimitiveError(f"gather index {bad} is out of range for axis {position} with size {size}")
    return scalar(np.take(x, indices, axis=position))


def one_hot(labels: Any, classes: Any) -> Any:
    labels = integer_indices(labels, "one_hot")
    count = dims_of((classes,))[0]
    if labels.size and (labels.min() < 0 or labels.max() >= count):
        raise PrimitiveError(
            f"one_hot label {int(labels.max() if labels.max() >= count else labels.min())} "
            f"is out of range for {count} classes"
        )
    return (labels[..., None] == np.arange(count)).astype(np.float32)


def filled(fill):
    def apply(dims: tuple, dtype: Any) -> Any:
        return scalar(np.full(dims_of(dims), fill, dtype=dtype_of(dtype)))

    return apply


def full(dims: tuple, value: Any, dtype: Any) -> Any:
    if value is None:
        raise PrimitiveError("`full` needs `value=`, as in `full(3, 4, value=0.5)`")
    return scalar(np.full(dims_of(dims), value, dtype=dtype_of(dtype)))


def arange(bounds: tuple) -> Any:
    for bound in bounds:
        if not isinstance(bound, (int, np.integer)) or isinstance(bound, bool):
            raise PrimitiveError(f"`arange` takes integers, found {describe(bound)}")
    return np.arange(*(int(b) for b in bounds), dtype=np.int64)


class RandomSource:
    """Where unseeded `randn`/`rand` draw from: one generator per run, seeded 0, so runs repeat."""

    generator = np.random.default_rng(0)

    @classmethod
    def reset(cls, seed: int = 0) -> None:
        cls.generator = np.random.default_rng(seed)


def random(draw: str):
    def apply(dims: tuple, seed: Any, dtype: Any) -> Any:
        generator = RandomSource.generator if seed is None else np.random.default_rng(int(seed))
        kind = dtype_of(dtype)
        if kind.kind != "f":
            raise PrimitiveError(f"`{draw}` makes float tensors; `dtype=` must be f32 or f64")
        values = getattr(generator, draw)(dims_of(dims))
        return scalar(values.astype(kind))

    return apply


def shape(x: Any) -> tuple:
    return tuple(int(n) for n in np.shape(x))


def length(x: Any) -> int:
    if isinstance(x, tuple):
        return len(x)
    if np.ndim(x) == 0:
        raise PrimitiveError(f"`len` needs a tensor of rank 1 or more, found {describe(x)}")
    return int(np.shape(x)[0])


def to_float(x: Any, dtype: Any) -> Any:
    kind = dtype_of(dtype)
    if kind.kind != "f":
        raise PrimitiveError("`float` converts to f32 or f64; use `int(x)` for integers")
    return scalar(as_array(x).astype(kind)) if isinstance(x, np.ndarray) else kind.type(x)


def to_int(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        if x.dtype.kind == "f" and not np.all(np.isfinite(x)):
            raise PrimitiveError("`int` of a tensor holding inf or nan")
        return np.trunc(x).astype(np.int64) if x.dtype.kind == "f" else x.astype(np.int64)
    if isinstance(x, (float, np.floating)) and not np.isfinite(x):
        raise PrimitiveError(f"`int` of {format_value(x)}")
    return int(x)


def check(condition: Any, message: Any) -> tuple:
    if not isinstance(condition, (bool, np.bool_)):
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


def print_values(values: tuple) -> tuple:
    Output.emit(" ".join(format_value(v) for v in values))
    return ()


def elementwise_pair(function, name: str):
    def apply(a: Any, b: Any) -> Any:
        return scalar(function(a, b))

    return apply


def where(condition: Any, a: Any, b: Any) -> Any:
    condition = as_array(condition)
    if condition.dtype != np.bool_:
        raise PrimitiveError(f"`where` needs a bool condition, found {describe(condition)}")
    return scalar(np.where(condition, a, b))


IMPLEMENTATIONS = {
    Prim.EXP: unary(np.exp, "exp"),
    Prim.LOG: unary(np.log, "log"),
    Prim.SQRT: unary(np.sqrt, "sqrt"),
    Prim.TANH: unary(np.tanh, "tanh"),
    Prim.SIGMOID: sigmoid,
    Prim.RELU: relu,
    Prim.ABS: np.abs,
    Prim.SIN: unary(np.sin, "sin"),
    Prim.COS: unary(np.cos, "cos"),
    Prim.MAXIMUM: elementwise_pair(np.maximum, "maximum"),
    Prim.MINIMUM: elementwise_pair(np.minimum, "minimum"),
    Prim.WHERE: where,
    Prim.SUM: reduce(np.sum, "sum"),
    Prim.MEAN: reduce_nonempty(np.mean, "mean"),
    Prim.MAX: reduce_nonempty(np.max, "max"),
    Prim.MIN: reduce_nonempty(np.min, "min"),
    Prim.ARGMAX: reduce_nonempty(np.argmax, "argmax"),
    Prim.ARGMIN: reduce_nonempty(np.argmin, "argmin"),
    Prim.LOGSUMEXP: logsumexp,
    Prim.SOFTMAX: softmax,
    Prim.LOG_SOFTMAX: log_softmax,
    Prim.MATMUL: matmul,
    Prim.TRANSPOSE: transpose,
    Prim.RESHAPE: reshape,
    Prim.CONCAT: concat,
    Prim.STACK: stack,
    Prim.BROADCAST_TO: broadcast_to,
    Prim.GATHER: gather,
    Prim.ONE_HOT: one_hot,
    Prim.ZEROS: filled(0),
    Prim.ONES: filled(1),
    Prim.FULL: full,
    Prim.ARANGE: arange,
    Prim.RANDN: random("standard_normal"),
    Prim.RAND: random("random"),
    Prim.SHAPE: shape,
    Prim.LEN: length,
    Prim.FLOAT: to_float,
    Prim.INT: to_int,
    Prim.ASSERT: check,
    Prim.PRINT: print_values,
}
