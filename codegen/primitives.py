"""The built-ins in specialised code (codegen/specialize.py): `call_primitive(lowering, name, args, keywords)`.

Each built-in the compiler handles is one function here, taking the abstract values of its arguments
(bound by the one signature table, lang/primitives.py) and giving the abstract value of its result: most
build elementwise trees, reductions and products emit `ir.Reduce` and `ir.MatMul`. Semantics are the
interpreter's (interp/primitives.py): the same dtypes, broadcasting and axes; where an argument is
something the compiler cannot reproduce exactly (a run-time axis, a dtype mix numpy would promote), the
built-in raises `Unsupported` and the function runs on the interpreter.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from dl.codegen import ir
from dl.codegen.ir import contiguous
from dl.codegen.lower import SCALAR_MATH, Unsupported, Value
from dl.codegen.values import (
    FLOATS,
    ZERO,
    Closure,
    DType,
    Primitive,
    SnapshotTape,
    Struct,
    TapeValue,
    Tensor,
    Text,
    ZeroTape,
    as_index,
    axis_index,
    broadcast,
    broadcast_shape,
    is_plain,
    reduction_shape,
    remap,
    view,
)
from dl.lang import einsum as einsum_spec
from dl.lang.calls import Binding, BindingError, arranged, bind
from dl.lang.diagnostics import Span
from dl.lang.primitives import FLOAT_MATH, PRIMITIVES, Prim, Support
from dl.runtime.errors import PrimitiveError, failure_message
from dl.runtime.randomness import CATEGORICAL_PEAK
from dl.runtime.values import float_steps
from dl.runtime.world import World


def bound(prim: Prim, args: list, keywords: dict, span: Span, binding: Binding | None) -> dict:
    """The arguments of built-in `prim` by parameter name, defaults filled in (the variadic tail a tuple), as
    `binding` (the checker's, or bound here for a call through a function value) says."""
    primitive = PRIMITIVES[prim]
    if binding is None:
        try:
            binding = bind(primitive.signature, len(args), list(keywords))
        except BindingError:
            raise Unsupported(f"`{prim.value}` with these arguments", span) from None
    return dict(
        zip(primitive.parameters, arranged(primitive, binding, args, keywords, lambda value: value), strict=True)
    )


def call_primitive(
    lowering, prim: Prim, args: list, keywords: dict, span: Span, discarded: bool, binding: Binding | None = None
) -> object:
    args = [lowering.read_variable(a) if isinstance(a, ir.Variable) else a for a in args]
    keywords = {k: lowering.read_variable(v) if isinstance(v, ir.Variable) else v for k, v in keywords.items()}
    handler = HANDLERS.get(prim)
    if handler is None:
        raise Unsupported(f"it calls `{prim.value}`, which compiled code does not do: {REFUSED[prim]}", span)
    return handler(lowering, bound(prim, args, keywords, span, binding), span)


def static_int(lowering, value: object, span: Span, what: str) -> int:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return lowering.static_int(value, span, what)


def static_flag(value: object, span: Span) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, Value) and isinstance(value.operand, ir.Const) and value.operand.dtype == "bool":
        return bool(value.operand.value)
    raise Unsupported("a flag known only at run time", span)


def dtype_of(value: object, span: Span) -> str:
    if isinstance(value, DType):
        return value.name
    if value == "f32":
        return "f32"
    raise Unsupported("a dtype argument compiled code does not take", span)


def tensor(value: object, span: Span, what: str = "an argument") -> Tensor:
    if not isinstance(value, Tensor):
        raise Unsupported(f"{what} is not a tensor", span)
    return value


# ------------------------------------------------------------------ elementwise


def unary(prim: Prim):
    name = prim.value

    def apply(lowering, bound: dict, span: Span) -> object:
        x = bound["x"]
        if isinstance(x, Tensor):
            if prim in FLOAT_MATH and x.dtype not in FLOATS:
                raise Unsupported(f"`{name}` of {x.dtype}", span)
            if x.dtype == "bool":
                raise Unsupported(f"`{name}` of bool", span)
            return Tensor(x.dtype, x.shape, ir.Apply(name, x.dtype, (x.tree,)))
        return scalar_math(lowering, prim, [x], span)

    return apply


# `isnan`: x != x; `isinf`: |x| == inf; `isfinite`: x - x == 0 (inf - inf and nan - nan are nan). Compiled
# without fast-math flags, LLVM keeps each as written.
FLOAT_TESTS = {Prim.ISNAN: np.isnan, Prim.ISINF: np.isinf, Prim.ISFINITE: np.isfinite}


def float_test_tree(prim: Prim, x: object, dtype: str) -> ir.Apply:
    if prim is Prim.ISNAN:
        return ir.Apply("ne", "bool", (x, x))
    if prim is Prim.ISINF:
        return ir.Apply("eq", "bool", (ir.Apply("abs", dtype, (x,)), ir.Splat(ir.Const(math.inf, dtype))))
    return ir.Apply("eq", "bool", (ir.Apply("sub", dtype, (x, x)), ir.Splat(ir.Const(0.0, dtype))))


def float_test(prim: Prim):
    def apply(lowering, bound: dict, span: Span) -> object:
        x = bound["x"]
        if isinstance(x, Tensor):
            if x.dtype not in FLOATS:
                raise Unsupported(f"`{prim.value}` of {x.dtype}", span)
            if ir.costly(x.tree):  # the test reads each element twice
                x = lowering.materialise(x)
            return Tensor("bool", x.shape, float_test_tree(prim, x.tree, x.dtype))
        value = lowering.scalar_of(x, span)
        if value.weak is not None:  # a literal: known now
            return Value(ir.Const(bool(FLOAT_TESTS[prim](np.float32(value.weak))), "bool"))
        dtype = value.operand.dtype
        if dtype not in FLOATS:
            raise Unsupported(f"`{prim.value}` of {dtype}", span)
        tested = Tensor(dtype, (), ir.Splat(value.operand))
        result = lowering.temp(prim.value, "bool")
        lowering.emit(ir.Evaluate(result, float_test_tree(prim, tested.tree, dtype)))
        return Value(result)

    return apply


def scalar_math(lowering, prim: Prim, values: list, span: Span) -> Value:
    return lowering.math_of_values(prim, [lowering.scalar_of(v, span) for v in values], span)


def binary_math(prim: Prim):
    name = prim.value

    def apply(lowering, bound: dict, span: Span) -> object:
        a, b = bound["a"], bound["b"]
        if isinstance(a, Tensor) or isinstance(b, Tensor):
            result = lowering.elementwise(name, [a, b], span)
            if result.dtype == "bool":
                raise Unsupported(f"`{name}` of bools", span)
            return result
        return scalar_math(lowering, prim, [a, b], span)

    return apply


def clip(lowering, bound: dict, span: Span) -> object:
    """`minimum(maximum(x, lo), hi)`, elementwise as the interpreter's."""
    larger = binary_math(Prim.MAXIMUM)(lowering, {"a": bound["x"], "b": bound["lo"]}, span)
    return binary_math(Prim.MINIMUM)(lowering, {"a": larger, "b": bound["hi"]}, span)


def where(lowering, bound: dict, span: Span) -> object:
    condition, a, b = bound["condition"], bound["a"], bound["b"]
    dtypes = {v.dtype for v in (a, b) if isinstance(v, Tensor)}
    dtypes |= {v.operand.dtype for v in (a, b) if isinstance(v, Value) and v.weak is None}
    if not dtypes and isinstance(a, Value) and isinstance(b, Value):  # two literals: f32 (or i64), as interpreted
        dtypes = {"f32" if isinstance(a.weak, float) or isinstance(b.weak, float) else "i64"}
    if len(dtypes) != 1:
        raise Unsupported("`where` of these operands", span)
    dtype = dtypes.pop()
    if isinstance(condition, Value) and condition.operand.dtype != "bool":
        raise Unsupported("`where` with a condition that is not bool", span)
    if isinstance(condition, Tensor) and condition.dtype != "bool":
        raise Unsupported("`where` with a condition that is not bool", span)
    if not any(isinstance(v, Tensor) for v in (condition, a, b)):  # scalars: one select
        operands = [lowering.promote(v, dtype, span) for v in (a, b)]
        tree = ir.Apply("select", dtype, (ir.Splat(condition.operand), *(ir.Splat(o) for o in operands)))
        result = lowering.temp("where", dtype)
        lowering.emit(ir.Evaluate(result, tree))
        return Value(result)
    return lowering.elementwise("select", [condition, a, b], span, dtype)


# ------------------------------------------------------------------ reductions


def axes_of(lowering, x: Tensor, axis: object, span: Span) -> tuple[int, ...]:
    """The axes `axis=` names (one, or a tuple of them), in order; all of them when it is left out."""
    if axis is None:
        return tuple(range(len(x.shape)))
    named = axis if isinstance(axis, tuple) else (axis,)
    axes = {axis_index(static_int(lowering, a, span, "an axis"), len(x.shape), span) for a in named}
    if not named or len(axes) != len(named):
        raise Unsupported("`axis=` naming no axis, or one twice", span)
    return tuple(sorted(axes))


def reduce(lowering, x: Tensor, op: str, axes: tuple[int, ...], keepdims: bool, span: Span, accumulate: str) -> Tensor:
    """`op` over `axes` into a new buffer of dtype `accumulate`; the result keeps the reduced axes as
    size 1 when `keepdims` (rank 0 when every axis goes and not `keepdims`)."""
    kept = reduction_shape(x.shape, axes, False)
    if ir.costly(x.tree):  # computed a vector at a time first (libmvec), then summed
        x = lowering.materialise(x)
    target = lowering.allocate(accumulate, kept, "reduced")
    lowering.emit(ir.Reduce(target, op, x.tree, x.shape, axes))
    result = view(target)
    if keepdims:
        shape = reduction_shape(x.shape, axes, True)
        result = Tensor(accumulate, shape, ir.Read(target, ZERO, contiguous_kept(shape)))
    return result


def contiguous_kept(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(0 if n == 1 else s for n, s in zip(shape, contiguous(shape), strict=True))


def finish(lowering, result: Tensor, dtype: str, scale: float | None = None) -> object:
    """A reduction's result in `dtype` (divided by `scale` for a mean); rank 0 becomes a scalar."""
    tree = result.tree
    source = result.dtype
    if scale is not None:
        tree = ir.Apply("div", source, (tree, ir.Splat(ir.Const(float(scale), source))))
    if dtype != source:
        tree = ir.Apply("convert", dtype, (tree,))
    if not result.shape:
        scalar = lowering.temp("reduced", dtype)
        lowering.emit(ir.Evaluate(scalar, tree))
        return Value(scalar)
    return Tensor(dtype, result.shape, tree)


def summed(kind: str):
    def apply(lowering, bound: dict, span: Span) -> object:
        x = as_tensor(lowering, bound["x"], span, bound.get("keepdims", False))
        axes = axes_of(lowering, x, bound["axis"], span)
        keepdims = static_flag(bound["keepdims"], span)
        count = math.prod(x.shape[a] for a in axes)
        if kind == "sum":
            accumulate = "f64" if x.dtype in FLOATS else "i64"
            dtype = x.dtype if x.dtype != "bool" else "i64"
            tree = x if x.dtype != "bool" else Tensor("i64", x.shape, ir.Apply("convert", "i64", (x.tree,)))
            return finish(lowering, reduce(lowering, tree, "add", axes, keepdims, span, accumulate), dtype)
        if count == 0:
            raise Unsupported("`mean` of an empty axis", span)
        dtype = x.dtype if x.dtype in FLOATS else "f32"
        tree = x if x.dtype in FLOATS else Tensor("f64", x.shape, ir.Apply("convert", "f64", (x.tree,)))
        return finish(lowering, reduce(lowering, tree, "add", axes, keepdims, span, "f64"), dtype, count)

    return apply


def extreme(op: str):
    def apply(lowering, bound: dict, span: Span) -> object:
        x = as_tensor(lowering, bound["x"], span, bound.get("keepdims", False))
        if x.dtype == "bool":
            raise Unsupported(f"`{op}` of bools", span)
        axes = axes_of(lowering, x, bound["axis"], span)
        if x.size == 0:
            raise Unsupported(f"`{op}` of an empty tensor", span)
        keepdims = static_flag(bound["keepdims"], span)
        return finish(lowering, reduce(lowering, x, op, axes, keepdims, span, x.dtype), x.dtype)

    return apply


def truth(kind: str):
    """`any` (`kind`) and `all`: the count of true (for `all`, false) elements over the axes, tested against 0;
    over no elements, false and true."""

    def apply(lowering, bound: dict, span: Span) -> object:
        x = bound["x"]
        if isinstance(x, Value) and x.operand.dtype == "bool" and bound["axis"] is None:
            return x  # of one bool: itself
        if not isinstance(x, Tensor) or x.dtype != "bool":
            raise Unsupported(f"`{kind}` of this value", span)
        axes = axes_of(lowering, x, bound["axis"], span)
        keepdims = static_flag(bound["keepdims"], span)
        counted = x.tree if kind == "any" else ir.Apply("not", "bool", (x.tree,))
        ones = Tensor("i64", x.shape, ir.Apply("convert", "i64", (counted,)))
        total = reduce(lowering, ones, "add", axes, keepdims, span, "i64")
        test = ir.Apply("gt" if kind == "any" else "eq", "bool", (total.tree, ir.Splat(ir.Const(0, "i64"))))
        return finish(lowering, Tensor("bool", total.shape, test), "bool")

    return apply


def as_tensor(lowering, value: object, span: Span, keepdims: object = False) -> Tensor:
    if isinstance(value, Tensor):
        return value
    whole = keepdims is False or (isinstance(keepdims, Value) and keepdims.operand == ir.Const(False, "bool"))
    if isinstance(value, Value) and value.weak is None and value.operand.dtype in FLOATS and whole:
        return Tensor(value.operand.dtype, (1,), ir.Splat(value.operand))  # a scalar: its one element
    raise Unsupported("a reduction of this scalar", span)


def shifted_exponentials(lowering, x: Tensor, axis: object, span: Span):
    """`x - max(x, axis, keepdims)` and the sum of its exponentials over the axis (kept as size 1)."""
    if x.dtype not in FLOATS:
        raise Unsupported(f"a softmax of {x.dtype}", span)
    axes = axes_of(lowering, x, axis, span)
    peak = broadcast(reduce(lowering, x, "max", axes, True, span, x.dtype), x.shape, span)
    shifted = Tensor(x.dtype, x.shape, ir.Apply("sub", x.dtype, (x.tree, peak.tree)))
    exponentials = Tensor(x.dtype, x.shape, ir.Apply("exp", x.dtype, (shifted.tree,)))
    total = reduce(lowering, exponentials, "add", axes, True, span, "f64")
    total = Tensor(x.dtype, total.shape, ir.Apply("convert", x.dtype, (total.tree,)))
    return shifted, broadcast(total, x.shape, span), axes


def log_softmax(lowering, bound: dict, span: Span) -> object:
    x = as_tensor(lowering, bound["x"], span, bound.get("keepdims", False))
    shifted, total, _ = shifted_exponentials(lowering, x, bound["axis"], span)
    return Tensor(x.dtype, x.shape, ir.Apply("sub", x.dtype, (shifted.tree, ir.Apply("log", x.dtype, (total.tree,)))))


def softmax(lowering, bound: dict, span: Span) -> object:
    x = as_tensor(lowering, bound["x"], span, bound.get("keepdims", False))
    shifted, total, _ = shifted_exponentials(lowering, x, bound["axis"], span)
    exponentials = ir.Apply("exp", x.dtype, (shifted.tree,))
    return Tensor(x.dtype, x.shape, ir.Apply("div", x.dtype, (exponentials, total.tree)))


def arg_extreme(op: str):
    """`argmax`/`argmin`: the extreme over the axes, then the first index holding it (a nan, if any: numpy's
    `argmax` of a slice with a nan is the nan's index), as the smallest index with a hit."""

    def apply(lowering, bound: dict, span: Span) -> object:
        x = as_tensor(lowering, bound["x"], span, bound.get("keepdims", False))
        if x.dtype == "bool":
            raise Unsupported(f"`arg{op}` of bools", span)
        if x.size == 0:
            raise Unsupported(f"`arg{op}` of an empty tensor", span)
        if isinstance(bound["axis"], tuple):
            raise Unsupported(f"`arg{op}` of several axes", span)
        axes = axes_of(lowering, x, bound["axis"], span)
        keepdims = static_flag(bound["keepdims"], span)
        x = x if isinstance(x.tree, ir.Read) else lowering.materialise(x)
        extreme_value = broadcast(reduce(lowering, x, op, axes, True, span, x.dtype), x.shape, span)
        hit: object = ir.Apply("eq", "bool", (x.tree, extreme_value.tree))
        if x.dtype in FLOATS:  # a nan is the extreme (max and min propagate it): it is the one to find
            nan = ir.Apply("ne", "bool", (x.tree, x.tree))
            hit = ir.Apply("or", "bool", (hit, nan))
        strides = contiguous(tuple(x.shape[a] for a in axes))
        position: object = ir.Splat(ir.Const(0, "i64"))
        for axis, stride in zip(axes, strides, strict=True):
            term = ir.Apply("mul", "i64", (ir.Index(axis), ir.Splat(ir.Const(stride, "i64"))))
            position = ir.Apply("add", "i64", (position, term))
        beyond = ir.Splat(ir.Const(x.size, "i64"))
        chosen = Tensor("i64", x.shape, ir.Apply("select", "i64", (hit, position, beyond)))
        return finish(lowering, reduce(lowering, chosen, "min", axes, keepdims, span, "i64"), "i64")

    return apply


def float_reduction(lowering, bound: dict, span: Span, name: str) -> tuple[Tensor, tuple[int, ...], bool]:
    """A reduction of floats' tensor, its axes and `keepdims` (another dtype is left to the interpreter)."""
    x = as_tensor(lowering, bound["x"], span, bound.get("keepdims", False))
    if x.dtype not in FLOATS:
        raise Unsupported(f"`{name}` of {x.dtype}", span)
    return x, axes_of(lowering, x, bound["axis"], span), static_flag(bound["keepdims"], span)


def logsumexp(lowering, bound: dict, span: Span) -> object:
    """log(sum(exp(x - peak))) + peak over the axes, the peak a max made 0 where it is not finite."""
    x, axes, keepdims = float_reduction(lowering, bound, span, "logsumexp")
    peak = reduce(lowering, x, "max", axes, True, span, x.dtype)
    magnitude = ir.Apply("abs", x.dtype, (peak.tree,))
    finite = ir.Apply("lt", "bool", (magnitude, ir.Splat(ir.Const(float("inf"), x.dtype))))
    peak = Tensor(
        x.dtype, peak.shape, ir.Apply("select", x.dtype, (finite, peak.tree, ir.Splat(ir.Const(0.0, x.dtype))))
    )
    peak = lowering.materialise(peak)
    spread = broadcast(peak, x.shape, span)
    exponentials = Tensor(
        x.dtype, x.shape, ir.Apply("exp", x.dtype, (ir.Apply("sub", x.dtype, (x.tree, spread.tree)),))
    )
    total = reduce(lowering, exponentials, "add", axes, True, span, "f64")
    total = ir.Apply("convert", x.dtype, (total.tree,))
    result = Tensor(x.dtype, peak.shape, ir.Apply("add", x.dtype, (ir.Apply("log", x.dtype, (total,)), peak.tree)))
    if keepdims:
        return result
    shape = reduction_shape(x.shape, axes, False)
    result = lowering.materialise(result)
    if not shape:
        scalar = lowering.temp("logsumexp", x.dtype)
        lowering.emit(ir.Evaluate(scalar, ir.Read(result.tree.buffer, ZERO, ())))
        return Value(scalar)
    return Tensor(x.dtype, shape, ir.Read(result.tree.buffer, ZERO, contiguous(shape)))


def variance(root: bool):
    """`var` (`std` where `root`) as the interpreter computes it, in f64: the mean over the axes, then the sum of
    the squared deviations from it divided by the count less `correction` (at most zero: a division by zero)."""
    name = "std" if root else "var"

    def apply(lowering, bound: dict, span: Span) -> object:
        x, axes, keepdims = float_reduction(lowering, bound, span, name)
        correction = bound["correction"]
        if isinstance(correction, Value) and isinstance(correction.operand, ir.Const):  # an f32 one as f32 holds it
            constant = correction.operand
            correction = float(np.float32(constant.value)) if constant.dtype == "f32" else constant.value
        if isinstance(correction, bool) or not isinstance(correction, (int, float)):
            raise Unsupported(f"`{name}` with a `correction=` known only when it runs", span)
        count = math.prod(x.shape[a] for a in axes)
        if count == 0:
            raise Unsupported(f"`{name}` of an empty axis", span)
        wide = x if x.dtype == "f64" else Tensor("f64", x.shape, ir.Apply("convert", "f64", (x.tree,)))
        total = reduce(lowering, wide, "add", axes, True, span, "f64")
        mean = lowering.materialise(Tensor("f64", total.shape, scaled(total.tree, 1.0 / count)))
        deviation = ir.Apply("sub", "f64", (wide.tree, broadcast(mean, x.shape, span).tree))
        squares = Tensor("f64", x.shape, ir.Apply("mul", "f64", (deviation, deviation)))
        spread = reduce(lowering, squares, "add", axes, keepdims, span, "f64")
        divisor = max(count - correction, 0)
        tree = ir.Apply("div", "f64", (spread.tree, ir.Splat(ir.Const(float(divisor), "f64"))))
        if root:
            tree = ir.Apply("sqrt", "f64", (tree,))
        return finish(lowering, Tensor("f64", spread.shape, tree), x.dtype)

    return apply


def scaled(tree: object, factor: float) -> object:
    return ir.Apply("mul", "f64", (tree, ir.Splat(ir.Const(factor, "f64"))))


def one_hot(lowering, bound: dict, span: Span) -> object:
    labels = bound["labels"]
    classes = static_int(lowering, bound["classes"], span, "the number of classes")
    if isinstance(labels, Value):
        labels = Tensor(labels.operand.dtype, (), ir.Splat(labels.operand))
    labels = as_index(lowering, tensor(labels, span))
    if labels.dtype != "i64":
        raise Unsupported(f"`one_hot` of {labels.dtype} labels", span)
    if labels.shape and labels.size:
        labels = labels if isinstance(labels.tree, ir.Read) else lowering.materialise(labels)
        every = tuple(range(len(labels.shape)))
        for op, test in (("max", "lt"), ("min", "ge")):
            extreme_label = lowering.temp(f"label.{op}", "i64")
            lowering.emit(ir.Evaluate(extreme_label, reduce(lowering, labels, op, every, False, span, "i64").tree))
            bound_value = classes if op == "max" else 0
            inside = lowering.temp("label.inside", "bool")
            lowering.emit(
                ir.Compare(inside, "<" if test == "lt" else ">=", extreme_label, ir.Const(bound_value, "i64"))
            )
            problem = PrimitiveError(f"one_hot label {{value}} is out of range for {classes} classes")
            site = lowering.site("E0513", failure_message(Prim.ONE_HOT, problem), span, "i64")
            lowering.emit(ir.Check(inside, site, extreme_label))

    rank = len(labels.shape)
    spread = remap(labels.tree, (*tuple(range(rank)), None))
    hit = ir.Apply("eq", "bool", (spread, ir.Index(rank)))
    return Tensor("f32", (*labels.shape, classes), ir.Apply("convert", "f32", (hit,)))


def triangle(test: str):
    """`tril` (`test` "le": kept where column - row <= k) or `triu` ("ge"): a select on the positions along the
    last two axes, zero elsewhere; `k` may be known only at run time."""

    def apply(lowering, bound: dict, span: Span) -> object:
        x, k = tensor(bound["x"], span), bound["k"]
        if len(x.shape) < 2:
            raise Unsupported(f"`tril` or `triu` of a rank-{len(x.shape)} tensor", span)
        if isinstance(k, int):
            diagonal: ir.Operand = ir.Const(k, "i64")
        else:
            diagonal = lowering.promote(lowering.scalar_of(k, span), "i64", span)
        rank = len(x.shape)
        offset = ir.Apply("sub", "i64", (ir.Index(rank - 1), ir.Index(rank - 2)))
        kept = ir.Apply(test, "bool", (offset, ir.Splat(diagonal)))
        zero = ir.Splat(ir.Const(False if x.dtype == "bool" else 0.0 if x.dtype in FLOATS else 0, x.dtype))
        return Tensor(x.dtype, x.shape, ir.Apply("select", x.dtype, (kept, x.tree, zero)))

    return apply


def joined(lowering, pieces: list[Tensor], axis: int, stacked: bool, span: Span) -> Tensor:
    """`concat` (along an existing axis) or `stack` (along a new one) of tensors of one dtype: each piece
    is written into its place of one buffer."""
    dtypes = {piece.dtype for piece in pieces}
    if len(dtypes) != 1:
        raise Unsupported(f"joining tensors of dtypes {sorted(dtypes)}", span)
    first = pieces[0].shape
    if stacked:
        if any(piece.shape != first for piece in pieces):
            raise Unsupported("`stack` of tensors of different shapes", span)
        shape = (*first[:axis], len(pieces), *first[axis:])
    else:
        rest = {piece.shape[:axis] + piece.shape[axis + 1 :] for piece in pieces}
        if len(rest) != 1 or any(len(piece.shape) != len(first) for piece in pieces):
            raise Unsupported("`concat` of tensors of different shapes", span)
        shape = (*first[:axis], sum(piece.shape[axis] for piece in pieces), *first[axis + 1 :])
    out = lowering.allocate(dtypes.pop(), shape, "joined")
    strides = contiguous(shape)
    start = 0
    for piece in pieces:
        if stacked:
            view_strides = strides[:axis] + strides[axis + 1 :]
            offset, start = start * strides[axis], start + 1
        else:
            view_strides = strides
            offset, start = start * strides[axis], start + piece.shape[axis]
        region = ir.Read(out, ir.Const(offset, "i64"), view_strides)
        lowering.emit(ir.Fill(out, piece.tree, region, piece.shape))
    return view(out)


def join(stacked: bool):
    def apply(lowering, bound: dict, span: Span) -> object:
        pieces = bound["tensors"]
        if not isinstance(pieces, tuple) or not pieces:
            raise Unsupported("joining something that is not a tuple of tensors", span)
        pieces = [lowering.read_variable(p) if isinstance(p, ir.Variable) else p for p in pieces]
        if stacked and all(isinstance(p, Value) for p in pieces):
            pieces = [Tensor(p.operand.dtype, (1,), ir.Splat(p.operand)) for p in pieces]
            return reshaped(lowering, joined(lowering, pieces, 0, False, span), (len(pieces),), span)
        if not all(isinstance(p, Tensor) for p in pieces):
            raise Unsupported("joining values that are not all tensors", span)
        rank = len(pieces[0].shape) + (1 if stacked else 0)
        axis = axis_index(static_int(lowering, bound["axis"], span, "an axis"), rank, span)
        return joined(lowering, pieces, axis, stacked, span)

    return apply


def split_like(lowering, bound: dict, span: Span) -> object:
    """Views of `x`'s consecutive pieces along the axis, as long as the tensors of `like` (concat's reverse)."""
    x = tensor(bound["x"], span)
    like = bound["like"]
    if not isinstance(like, tuple) or not all(isinstance(piece, Tensor) for piece in like):
        raise Unsupported("`split_like` of this", span)
    axis = axis_index(static_int(lowering, bound["axis"], span, "an axis"), len(x.shape), span)
    sizes = [piece.shape[axis] for piece in like]
    if sum(sizes) != x.shape[axis] or any(len(piece.shape) != len(x.shape) for piece in like):
        raise Unsupported("`split_like` pieces that do not fit", span)
    x = x if isinstance(x.tree, ir.Read) else lowering.materialise(x)
    read, pieces, start = x.tree, [], 0
    for size in sizes:
        offset = lowering.add_offset(read.offset, ir.Const(start * read.strides[axis], "i64"))
        shape = (*x.shape[:axis], size, *x.shape[axis + 1 :])
        pieces.append(Tensor(x.dtype, shape, ir.Read(read.buffer, offset, read.strides)))
        start += size
    return tuple(pieces)


# ------------------------------------------------------------------ products


def matmul_call(lowering, bound: dict, span: Span) -> object:
    """`matmul(a, b)`, as `a @ b`."""
    return matmul(lowering, bound["a"], bound["b"], span)


def matmul(lowering, a: object, b: object, span: Span) -> object:
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise Unsupported("`@` of a scalar", span)
    if a.dtype != b.dtype or a.dtype not in FLOATS:
        raise Unsupported(f"`@` of {a.dtype} and {b.dtype}", span)
    if len(a.shape) > 2 or len(b.shape) > 2:
        return batched_matmul(lowering, a, b, span)
    k = a.shape[-1]
    if b.shape[0] != k:
        raise Unsupported(f"`@` of shapes {list(a.shape)} and {list(b.shape)}", span)
    if len(a.shape) == 1 and len(b.shape) == 1:
        product = Tensor(a.dtype, a.shape, ir.Apply("mul", a.dtype, (a.tree, b.tree)))
        return finish(lowering, reduce(lowering, product, "add", (0,), False, span, "f64"), a.dtype)
    m = a.shape[0] if len(a.shape) == 2 else 1
    n = b.shape[1] if len(b.shape) == 2 else 1
    shape = (*a.shape[:-1], *b.shape[1:])
    if m == 0 or n == 0 or k == 0:
        return Tensor(a.dtype, shape, ir.Splat(ir.Const(0.0, a.dtype)))
    left = blas_operand(lowering, a, True)
    right = blas_operand(lowering, b, False)
    out = lowering.allocate(a.dtype, (m, n), "product")
    lowering.emit(ir.MatMul(out, left, right, m, n, k))
    return Tensor(a.dtype, shape, ir.Read(out, ZERO, contiguous(shape)))


def einsum(lowering, bound: dict, span: Span) -> object:
    """`einsum(spec, operands...)` in the steps of lang/einsum.py's `contraction_path`: one or two operands as
    one loop nest over every letter of the spec (`contraction`); three or more two at a time, in the order
    numpy's `einsum(optimize=True)` takes, each step's sums in a buffer of their own that the next step reads
    rounded to the operands' dtype (a step summing no letter stays a product, computed in the next step's
    loop nest). No gemm: a product of two matrices is faster as `@`."""
    spec_value = bound["spec"]
    text = spec_value.value if isinstance(spec_value, Text) else spec_value
    try:
        spec = einsum_spec.parse(text) if isinstance(text, str) else None
    except einsum_spec.SpecError:
        spec = None
    operands = [as_operand(operand, span) for operand in bound["operands"]]
    dtypes = {operand.dtype for operand in operands}
    if spec is None or len(spec.inputs) != len(operands) or len(dtypes) != 1 or "bool" in dtypes:
        raise Unsupported("an `einsum` the interpreter reports", span)
    dtype = dtypes.pop()
    sizes: dict[str, int] = {}
    for letters, operand in zip(spec.inputs, operands, strict=True):
        if len(letters) != len(operand.shape):
            raise Unsupported("an `einsum` the interpreter reports", span)
        for letter, size in zip(letters, operand.shape, strict=True):
            if sizes.setdefault(letter, size) != size:
                raise Unsupported("an `einsum` the interpreter reports", span)
    left = operands
    for positions, step in einsum_spec.contraction_path(spec, sizes):
        taken = [left[position] for position in positions]
        left = [operand for position, operand in enumerate(left) if position not in positions]
        left.append(contraction(lowering, step, taken, span))
    return finish(lowering, left[0], dtype)


def contraction(lowering, spec: einsum_spec.Spec, operands: list[Tensor], span: Span) -> Tensor:
    """One loop nest over every letter of `spec` (the result's first, then the summed ones): the operands
    (of one dtype), each seen through its letters, multiplied elementwise, then summed over the letters the
    result drops (in f64 for floats, as `sum`) into a buffer, read rounded to the operands' dtype."""
    dtype = operands[0].dtype
    letters = spec.output + spec.summed
    sizes: dict[str, int] = {}
    product = None
    for own, operand in zip(spec.inputs, operands, strict=True):
        sizes.update(zip(own, operand.shape, strict=True))
        seen = remap(operand.tree, tuple(own.index(letter) if letter in own else None for letter in letters))
        product = seen if product is None else ir.Apply("mul", dtype, (product, seen))
    whole = Tensor(dtype, tuple(sizes[letter] for letter in letters), product)
    if not spec.summed:
        return whole
    accumulate = "f64" if dtype in FLOATS else "i64"
    summed = tuple(range(len(spec.output), len(letters)))
    total = reduce(lowering, whole, "add", summed, False, span, accumulate)
    return total if accumulate == dtype else Tensor(dtype, total.shape, ir.Apply("convert", dtype, (total.tree,)))


def as_operand(value: object, span: Span) -> Tensor:
    """A tensor, or a scalar (not an unsuffixed literal, whose dtype the other operands would decide) as a
    rank-0 tensor."""
    if isinstance(value, Tensor):
        return value
    if isinstance(value, Value) and value.weak is None:
        return Tensor(value.operand.dtype, (), ir.Splat(value.operand))
    raise Unsupported("an `einsum` of this operand", span)


MAX_BATCH = 256  # products in one batched `@` (each is one gemm call)


def batched_matmul(lowering, a: Tensor, b: Tensor, span: Span) -> Tensor:
    """`@` with batch dimensions (broadcast, as numpy's matmul): one gemm per matrix of the batch."""
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise Unsupported("a batched `@` with a vector", span)

    batch = broadcast_shape(a.shape[:-2], b.shape[:-2], span)
    (m, k), (k2, n) = a.shape[-2:], b.shape[-2:]
    count = math.prod(batch)
    if k != k2 or count > MAX_BATCH or 0 in (m, n, k, count):
        raise Unsupported(f"a batched `@` of shapes {list(a.shape)} and {list(b.shape)}", span)
    a = broadcast(a, (*batch, m, k), span)
    b = broadcast(b, (*batch, k, n), span)
    a = a if isinstance(a.tree, ir.Read) else lowering.materialise(a)
    b = b if isinstance(b.tree, ir.Read) else lowering.materialise(b)
    out = lowering.allocate(a.dtype, (*batch, m, n), "product")
    for flat in range(count):
        index = np.unravel_index(flat, batch) if batch else ()
        views = []
        for x in (a, b):
            read = x.tree
            offset = sum(int(i) * stride for i, stride in zip(index, read.strides[:-2], strict=True))
            moved = lowering.add_offset(read.offset, ir.Const(offset, "i64"))
            views.append(Tensor(x.dtype, x.shape[-2:], ir.Read(read.buffer, moved, read.strides[-2:])))
        left, right = blas_operand(lowering, views[0], True), blas_operand(lowering, views[1], False)
        piece = ir.Buffer(out.name, out.dtype, out.shape, out.slot, out.offset)
        target = lowering.allocate(a.dtype, (m, n), "product")
        lowering.emit(ir.MatMul(target, left, right, m, n, k))
        region = ir.Read(piece, ir.Const(flat * m * n, "i64"), (n, 1))
        lowering.emit(ir.Fill(out, view(target).tree, region, (m, n)))
    return view(out)


def blas_operand(lowering, x: Tensor, left: bool) -> ir.Read:
    """`x` as a 2-d view BLAS reads: rows or columns contiguous (a vector becomes a row or a column)."""
    if len(x.shape) == 1:
        x = x if is_plain(x) else lowering.plain(x)
        read = x.tree
        strides = (0, 1) if left else (1, 0)
        return ir.Read(read.buffer, read.offset, strides)
    if not isinstance(x.tree, ir.Read):
        x = lowering.materialise(x)
    rows, columns = x.tree.strides
    if (columns == 1 and rows >= x.shape[1]) or (rows == 1 and columns >= x.shape[0]):
        return x.tree
    return lowering.plain(
        lowering.materialise(x) if not isinstance(x.tree, ir.Read) else Tensor(x.dtype, x.shape, x.tree)
    ).tree


# ------------------------------------------------------------------ structure


def transpose(lowering, bound: dict, span: Span) -> object:
    x = tensor(bound["x"], span)
    rank = len(x.shape)
    axes = tuple(static_int(lowering, a, span, "an axis") for a in bound["axes"]) or tuple(reversed(range(rank)))
    if sorted(a % max(rank, 1) for a in axes) != list(range(rank)):
        raise Unsupported(f"`transpose` axes {axes}", span)
    axes = tuple(a % rank for a in axes)

    return Tensor(x.dtype, tuple(x.shape[a] for a in axes), remap(x.tree, axes))


def flip(lowering, bound: dict, span: Span) -> object:
    """A view reading the flipped axes backwards (negative strides from their last element), as a slice with step
    -1 does; a tree that is not a view is computed into a buffer first."""
    x = tensor(bound["x"], span)
    if not x.shape:
        raise Unsupported("`flip` of a scalar", span)
    axes = axes_of(lowering, x, bound["axis"], span)
    if not x.size:
        return x
    x = lowering.materialise(x, "flipped")
    read = x.tree
    offset, strides = read.offset, list(read.strides)
    for axis in axes:
        offset = lowering.add_offset(offset, ir.Const((x.shape[axis] - 1) * strides[axis], "i64"))
        strides[axis] = -strides[axis]
    return Tensor(x.dtype, x.shape, ir.Read(read.buffer, offset, tuple(strides)))


def pad(lowering, bound: dict, span: Span) -> object:
    """A buffer of the padded shape filled with `value`, and `x` (less what negative widths remove) written into
    its place there."""
    x = tensor(bound["x"], span)
    if not x.shape or x.dtype == "bool":
        raise Unsupported(f"`pad` of {'a scalar' if not x.shape else 'bools'}", span)
    axes = axes_of(lowering, x, bound["axis"], span)
    before, after = (static_int(lowering, bound[name], span, "a width") for name in ("before", "after"))
    value = bound["value"]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = Value(ir.Const(value, "i64" if isinstance(value, int) else "f32"), value)
    if not isinstance(value, Value):
        raise Unsupported("`pad` with this `value=`", span)
    shape, inner, skipped, placed = list(x.shape), list(x.shape), [0] * len(x.shape), [0] * len(x.shape)
    for axis in axes:
        removed = max(-before, 0) + max(-after, 0)
        if removed > x.shape[axis]:
            raise Unsupported(f"`pad` removing {removed} elements of an axis of {x.shape[axis]}", span)
        shape[axis] = x.shape[axis] + before + after
        inner[axis], skipped[axis], placed[axis] = x.shape[axis] - removed, max(-before, 0), max(before, 0)
    out = lowering.allocate(x.dtype, tuple(shape), "padded")
    lowering.emit(ir.Fill(out, ir.Splat(lowering.promote(value, x.dtype, span))))
    if math.prod(inner):
        x = lowering.materialise(x, "padding")
        read, strides = x.tree, contiguous(tuple(shape))
        offset = ir.Const(sum(k * stride for k, stride in zip(skipped, read.strides, strict=True)), "i64")
        source = ir.Read(read.buffer, lowering.add_offset(read.offset, offset), read.strides)
        region = ir.Read(
            out, ir.Const(sum(k * stride for k, stride in zip(placed, strides, strict=True)), "i64"), strides
        )
        lowering.emit(ir.Fill(out, source, region, tuple(inner)))
    return view(out)


def cumsum(lowering, bound: dict, span: Span) -> object:
    """The running sum along one axis (`ir.Scan`), in `x`'s dtype; of bools, an i64 count. An f32 sum runs in
    an f64 buffer, each result rounded once, as the interpreter's (and torch's)."""
    x = tensor(bound["x"], span)
    if not x.shape or isinstance(bound["axis"], tuple):
        raise Unsupported("`cumsum` of a scalar, or along a tuple of axes", span)
    axis = axis_index(static_int(lowering, bound["axis"], span, "an axis"), len(x.shape), span)
    if ir.can_fail(x.tree):  # its index checks run before the sums, where the interpreter would fail
        x = lowering.materialise(x)
    accumulate = {"bool": "i64", "f32": "f64"}.get(x.dtype, x.dtype)
    target = lowering.allocate(accumulate, x.shape, "running")
    lowering.emit(ir.Scan(target, x.tree, axis))
    if x.dtype == "f32":
        return Tensor("f32", x.shape, ir.Apply("convert", "f32", (view(target).tree,)))
    return view(target)


def swapaxes(lowering, bound: dict, span: Span) -> object:
    """Two axes exchanged: a view, as `transpose` is, so a product with it reads the other layout in place."""
    x = tensor(bound["x"], span)
    rank = len(x.shape)
    first, second = (static_int(lowering, bound[name], span, "an axis") for name in ("axis1", "axis2"))
    if not (-rank <= first < rank and -rank <= second < rank):
        raise Unsupported(f"`swapaxes` axes {first} and {second} of a rank-{rank} tensor", span)
    axes = list(range(rank))
    axes[first], axes[second] = axes[second], axes[first]
    return Tensor(x.dtype, tuple(x.shape[a] for a in axes), remap(x.tree, tuple(axes)))


def reshaped(lowering, x: Tensor, shape: tuple[int, ...], span: Span) -> object:
    if math.prod(shape) != x.size:
        raise Unsupported(f"`reshape` of {list(x.shape)} to {list(shape)}", span)
    if not shape:  # its one element, read where it is stored (`reshape(x, ())` of an `f32[1]`)
        scalar = lowering.temp("element", x.dtype)
        if x.shape:
            stored = lowering.plain(x).tree
            tree = ir.Read(stored.buffer, stored.offset, contiguous(()))
        else:
            tree = x.tree
        lowering.emit(ir.Evaluate(scalar, tree))
        return Value(scalar)
    x = lowering.plain(x)
    return Tensor(x.dtype, shape, ir.Read(x.tree.buffer, x.tree.offset, contiguous(shape)))


def reshape(lowering, bound: dict, span: Span) -> object:
    x = tensor(bound["x"], span)
    dims = [static_int(lowering, d, span, "a dimension") for d in bound["dims"]]
    if len(dims) == 1 and isinstance(bound["dims"][0], tuple):
        raise Unsupported("`reshape` with a tuple of dimensions", span)
    if dims.count(-1) == 1:
        known = math.prod(d for d in dims if d != -1)
        if known == 0 or x.size % known:
            raise Unsupported(f"`reshape` of {list(x.shape)} to {dims}", span)
        dims[dims.index(-1)] = x.size // known
    return reshaped(lowering, x, tuple(dims), span)


def shape_of(value: object) -> tuple[int, ...]:
    if isinstance(value, Tensor):
        return value.shape
    if isinstance(value, Value):
        return ()
    raise Unsupported("a shape of a value that is not a tensor")


def reshape_like(lowering, bound: dict, span: Span) -> object:
    x = bound["x"]
    if isinstance(x, Value):
        if shape_of(bound["like"]):
            raise Unsupported("`reshape_like` of a scalar", span)
        return x
    return reshaped(lowering, tensor(x, span), shape_of(bound["like"]), span)


def squeeze(lowering, bound: dict, span: Span) -> object:
    """A view without the axes of size 1 `axis` names."""
    x = tensor(bound["x"], span)
    axes = axes_of(lowering, x, bound["axis"], span)
    if any(x.shape[a] != 1 for a in axes):
        raise Unsupported("`squeeze` of an axis whose size is not 1", span)  # the interpreter says which
    kept = tuple(a for a in range(len(x.shape)) if a not in axes)
    return Tensor(x.dtype, tuple(x.shape[a] for a in kept), remap(x.tree, kept))


def expand_dims(lowering, bound: dict, span: Span) -> object:
    x = bound["x"]
    if isinstance(x, Value):
        operand = x.operand
        return Tensor(operand.dtype, (1,), ir.Splat(operand))
    x = tensor(x, span)
    rank = len(x.shape)
    axis = static_int(lowering, bound["axis"], span, "an axis")
    if not -rank - 1 <= axis <= rank:
        raise Unsupported(f"`expand_dims` axis {axis}", span)
    axis %= rank + 1

    mapping = (*range(axis), None, *range(axis, rank))
    return Tensor(x.dtype, (*x.shape[:axis], 1, *x.shape[axis:]), remap(x.tree, mapping))


def broadcast_to(lowering, bound: dict, span: Span) -> object:
    x = bound["x"]
    dims = tuple(static_int(lowering, d, span, "a dimension") for d in bound["dims"])
    if isinstance(x, Value):
        return Tensor(x.operand.dtype, dims, ir.Splat(x.operand)) if dims else x
    return broadcast(tensor(x, span), dims, span)


def unbroadcast(lowering, bound: dict, span: Span) -> object:
    """`x` summed down to `like`'s shape, then rounded to `like`'s float dtype (an adjoint's variable's)."""
    x, like = bound["x"], bound["like"]
    result = summed_down(lowering, x, shape_of(like), span)
    want = like.dtype if isinstance(like, Tensor) else like.operand.dtype if isinstance(like, Value) else None
    have = result.dtype if isinstance(result, Tensor) else result.operand.dtype
    if want in FLOATS and have in FLOATS and want != have:
        return to_float(lowering, {"x": result, "dtype": DType(want)}, span)
    return result


def summed_down(lowering, x: object, target: tuple[int, ...], span: Span) -> object:
    if isinstance(x, Value):
        return x
    x = tensor(x, span)
    extra = len(x.shape) - len(target)
    if extra < 0 or any(n not in (1, m) for n, m in zip(target, x.shape[extra:], strict=True)):
        raise Unsupported(f"`unbroadcast` of {list(x.shape)} to {list(target)}", span)
    axes = tuple(range(extra)) + tuple(extra + i for i, n in enumerate(target) if n == 1 and x.shape[extra + i] != 1)
    if not axes:
        return x
    accumulate = "f64" if x.dtype in FLOATS else "i64"
    result = finish(lowering, reduce(lowering, x, "add", axes, False, span, accumulate), x.dtype)
    if isinstance(result, Value):
        if target:
            return Tensor(x.dtype, target, ir.Splat(result.operand))
        return result
    return reshaped(lowering, result, target, span) if result.shape != target else result


def gather(lowering, bound: dict, span: Span) -> object:
    x = tensor(bound["x"], span)
    given = static_int(lowering, bound["axis"], span, "an axis")
    return gathered(lowering, x, bound["indices"], axis_index(given, len(x.shape), span), span, given=given)


def gathered(
    lowering, x: Tensor, indices: object, axis: int, span: Span, index_error: bool = False, given: int | None = None
) -> object:
    """`gather(x, indices, axis)` (`given`: the axis as written, which its message shows); with
    `index_error`, for `x[indices]`, failing as indexing does (E0501)."""
    x = x if isinstance(x.tree, ir.Read) else lowering.materialise(x)
    read = x.tree
    size = x.shape[axis]
    if index_error:
        site = lowering.site("E0501", f"index {{value}} is out of bounds for axis {axis} with size {size}", span, "i64")
    else:
        shown_axis = axis if given is None else given
        problem = PrimitiveError(f"gather index {{value}} is out of range for axis {shown_axis} with size {size}")
        site = lowering.site("E0513", failure_message(Prim.GATHER, problem), span, "i64")
    indices = as_index(lowering, indices)
    if isinstance(indices, Value):
        if indices.operand.dtype != "i64":
            raise Unsupported(f"`gather` with a {indices.operand.dtype} index", span)
        index_tree, index_shape = ir.Splat(indices.operand), ()
    else:
        indices = tensor(indices, span)
        if indices.dtype != "i64":
            raise Unsupported(f"`gather` with {indices.dtype} indices", span)
        index_tree, index_shape = indices.tree, indices.shape

    shape = (*x.shape[:axis], *index_shape, *x.shape[axis + 1 :])
    k = len(index_shape)
    mapping = tuple([None] * axis + list(range(k)) + [None] * (len(x.shape) - axis - 1))
    if index_shape:
        index_tree = remap(index_tree, mapping)
    strides = tuple(read.strides[:axis]) + (0,) * k + tuple(read.strides[axis + 1 :])
    if not index_error and index_shape and math.prod(index_shape):
        # checked here, used or not, and the gather itself is then an ordinary tree (fused, or dropped if unused)
        in_range(lowering, indices, size, site, span)
        tree = ir.Take(read.buffer, read.offset, strides, index_tree, read.strides[axis], size, None)
        return Tensor(x.dtype, shape, tree)
    tree = ir.Take(read.buffer, read.offset, strides, index_tree, read.strides[axis], size, site)
    if not shape:
        scalar = lowering.temp("element", x.dtype)
        lowering.emit(ir.Evaluate(scalar, tree))
        return Value(scalar)
    # written now: its indices are checked here, as the interpreter checks them, used or not
    return lowering.materialise(Tensor(x.dtype, shape, tree), "gathered")


def in_range(lowering, indices: Tensor, size: int, site: int, span: Span) -> Tensor:
    """`indices` (i64, not empty) checked as the interpreter checks those of `gather` and `take_along_axis`: all at
    once, failing at `site` with the largest if it is `size` or more, else with the smallest if it is below
    `-size`. Returns them as a buffer's view, which the checks read."""
    indices = indices if isinstance(indices.tree, ir.Read) else lowering.materialise(indices)
    every = tuple(range(len(indices.shape)))
    for op, test, limit in (("max", "<", size), ("min", ">=", -size)):
        extreme_index = lowering.temp(f"index.{op}", "i64")
        lowering.emit(ir.Evaluate(extreme_index, reduce(lowering, indices, op, every, False, span, "i64").tree))
        inside = lowering.temp("index.inside", "bool")
        lowering.emit(ir.Compare(inside, test, extreme_index, ir.Const(limit, "i64")))
        lowering.emit(ir.Check(inside, site, extreme_index))
    return indices


def scatter_add(lowering, bound: dict, span: Span) -> object:
    x = tensor(bound["x"], span)
    indices, updates = bound["indices"], bound["updates"]
    axis = axis_index(static_int(lowering, bound["axis"], span, "an axis"), len(x.shape), span)
    if not isinstance(indices, Tensor) or indices.dtype != "i64":
        raise Unsupported("`scatter_add` with these indices", span)
    shape = (*x.shape[:axis], *indices.shape, *x.shape[axis + 1 :])
    if isinstance(updates, Value):
        updates = Tensor(x.dtype, (), ir.Splat(lowering.promote(updates, x.dtype, span)))
    if updates.dtype != x.dtype:
        raise Unsupported(f"`scatter_add` of {updates.dtype} into {x.dtype}", span)
    updates = broadcast(updates, shape, span)
    target = lowering.allocate(x.dtype, x.shape, "scattered")
    lowering.emit(ir.Fill(target, x.tree))

    k = len(indices.shape)
    mapping = tuple([None] * axis + list(range(axis, axis + k)) + [None] * (len(x.shape) - axis - 1))
    index_tree = remap(indices.tree, tuple(m - axis if m is not None else None for m in mapping))
    strides = contiguous(x.shape)
    position = tuple(strides[:axis]) + (0,) * k + tuple(strides[axis + 1 :])
    size = x.shape[axis]
    message = failure_message(
        Prim.SCATTER_ADD, PrimitiveError(f"index {{value}} is out of bounds for axis {axis} with size {size}")
    )
    site = lowering.site("E0513", message, span, "i64")
    lowering.emit(ir.ScatterAdd(target, position, index_tree, strides[axis], size, updates.tree, shape, site))
    return view(target)


def along_indices(lowering, x: Tensor, indices: object, axis: int, prim: Prim, span: Span) -> Tensor:
    """The `indices` of `take_along_axis` or `add_along_axis` along `axis` of `x`: i64 (an i32 one widened), of
    `x`'s rank and its sizes off the axis (others are the interpreter's to report), checked now, as the
    interpreter checks them, used or not."""
    indices = as_index(lowering, indices)
    if not isinstance(indices, Tensor) or indices.dtype != "i64":
        raise Unsupported(f"`{prim.value}` with these indices", span)
    others = [(n, m) for d, (n, m) in enumerate(zip(indices.shape, x.shape, strict=False)) if d != axis]
    if len(indices.shape) != len(x.shape) or any(n != m for n, m in others):
        raise Unsupported(f"`{prim.value}` of indices {list(indices.shape)} that do not fit {list(x.shape)}", span)
    if not indices.size:
        return indices
    size = x.shape[axis]
    problem = PrimitiveError(f"`{prim.value}`: index {{value}} is out of range for an axis of size {size}")
    return in_range(lowering, indices, size, lowering.site("E0513", failure_message(prim, problem), span, "i64"), span)


def taken_along(lowering, x: Tensor, index: object, axis: int, shape: tuple[int, ...]) -> Tensor:
    """`x` read at one index per element along `axis`: `index` is a tree of i64 over `shape` (`x`'s off the axis),
    every index checked before (in -size..size)."""
    x = x if isinstance(x.tree, ir.Read) else lowering.materialise(x)
    read = x.tree
    strides = tuple(0 if d == axis else stride for d, stride in enumerate(read.strides))
    tree = ir.Take(read.buffer, read.offset, strides, index, read.strides[axis], x.shape[axis], None)
    return Tensor(x.dtype, shape, tree)


def take_along_axis(lowering, bound: dict, span: Span) -> object:
    x = tensor(bound["x"], span)
    axis = axis_index(static_int(lowering, bound["axis"], span, "an axis"), len(x.shape), span)
    indices = along_indices(lowering, x, bound["indices"], axis, Prim.TAKE_ALONG_AXIS, span)
    return taken_along(lowering, x, indices.tree, axis, indices.shape)


def add_along_axis(lowering, bound: dict, span: Span) -> object:
    """A copy of `x`, then each of `updates` added at its index (`ir.ScatterAdd`, in the interpreter's order:
    repeated indices add up as numpy's `add.at` adds them), the updates in `x`'s dtype."""
    x, updates = tensor(bound["x"], span), bound["updates"]
    if x.dtype == "bool":
        raise Unsupported("`add_along_axis` of bools", span)
    axis = axis_index(static_int(lowering, bound["axis"], span, "an axis"), len(x.shape), span)
    indices = along_indices(lowering, x, bound["indices"], axis, Prim.ADD_ALONG_AXIS, span)
    if not isinstance(updates, Tensor) or (updates.dtype != x.dtype and {updates.dtype, x.dtype} != set(FLOATS)):
        raise Unsupported(f"`add_along_axis` of these updates into {x.dtype}", span)
    if updates.dtype != x.dtype:
        updates = Tensor(x.dtype, updates.shape, ir.Apply("convert", x.dtype, (updates.tree,)))
    updates = broadcast(updates, indices.shape, span)
    target = lowering.allocate(x.dtype, x.shape, "added")
    lowering.emit(ir.Fill(target, x.tree))
    if indices.size:
        strides = contiguous(x.shape)
        position = tuple(0 if d == axis else stride for d, stride in enumerate(strides))
        size = x.shape[axis]
        scatter = ir.ScatterAdd(target, position, indices.tree, strides[axis], size, updates.tree, indices.shape, None)
        lowering.emit(scatter)
    return view(target)


def sorting(values: bool):
    """`argsort` (the positions, `ir.Sort`) and `sort` (`values`: `x` read at those positions, as the interpreter
    takes them), along one axis known when compiling, `descending` a constant."""
    name = "sort" if values else "argsort"

    def apply(lowering, bound: dict, span: Span) -> object:
        x = tensor(bound["x"], span)
        if not x.shape:
            raise Unsupported(f"`{name}` of a scalar", span)
        axis = axis_index(static_int(lowering, bound["axis"], span, "an axis"), len(x.shape), span)
        descending = static_flag(bound["descending"], span)
        if not x.size:
            return x if values else Tensor("i64", x.shape, ir.Splat(ZERO))
        if ir.can_fail(x.tree) or (values and not isinstance(x.tree, ir.Read)):  # (`sort` reads it again)
            x = lowering.materialise(x, "sorted")
        target = lowering.allocate("i64", x.shape, "order")
        keys = lowering.allocate(x.dtype, (2, x.shape[axis]), "order.keys")
        positions = lowering.allocate("i64", (2, x.shape[axis]), "order.positions")
        lowering.emit(ir.Sort(target, x.tree, axis, descending, keys, positions))
        if not values:
            return view(target)
        return taken_along(lowering, x, view(target).tree, axis, x.shape)

    return apply


def topk(lowering, bound: dict, span: Span) -> object:
    """`(values, indices)`: the first `k` of the stable order `ir.Sort` makes along one axis known when compiling
    (descending where `largest`), viewed in place, and `x` read at them, as the interpreter takes them; `k` a
    constant from 0 to the axis's size (another is the interpreter's to report)."""
    x = tensor(bound["x"], span)
    if not x.shape or x.dtype == "bool":
        raise Unsupported("`topk` of a scalar or of bools", span)
    axis = axis_index(static_int(lowering, bound["axis"], span, "an axis"), len(x.shape), span)
    k = static_int(lowering, bound["k"], span, "`k`")
    if not 0 <= k <= x.shape[axis]:
        raise Unsupported(f"`topk` of {k} elements along an axis of size {x.shape[axis]}", span)
    largest = static_flag(bound["largest"], span)
    shape = (*x.shape[:axis], k, *x.shape[axis + 1 :])
    if not k or not x.size:
        zero = ir.Const(0.0 if x.dtype in FLOATS else 0, x.dtype)
        return Tensor(x.dtype, shape, ir.Splat(zero)), Tensor("i64", shape, ir.Splat(ZERO))
    if ir.can_fail(x.tree) or not isinstance(x.tree, ir.Read):  # (the values read it again)
        x = lowering.materialise(x, "sorted")
    target = lowering.allocate("i64", x.shape, "order")
    keys = lowering.allocate(x.dtype, (2, x.shape[axis]), "order.keys")
    positions = lowering.allocate("i64", (2, x.shape[axis]), "order.positions")
    lowering.emit(ir.Sort(target, x.tree, axis, largest, keys, positions))
    indices = Tensor("i64", shape, ir.Read(target, ZERO, contiguous(x.shape)))  # the first k along the axis
    return taken_along(lowering, x, indices.tree, axis, shape), indices


# ------------------------------------------------------------------ convolution and pooling
# The interpreter's algorithms (interp/primitives.py), on views: a padded copy of the images, im2col as
# one strided view of it written out, products through gemm, col2im as one accumulating loop per kernel
# offset into strided views of the result. Shapes that do not fit are left to the interpreter to report.


def image_of(value: object, span: Span) -> Tensor:
    if not isinstance(value, Tensor) or len(value.shape) != 4 or value.dtype not in FLOATS:
        raise Unsupported("a convolution of something other than a rank-4 float tensor", span)
    return value


def window_options(lowering, bound: dict, span: Span, pool: bool) -> tuple[int, int, int]:
    padding = static_int(lowering, bound["padding"], span, "`padding=`")
    if pool:
        size = static_int(lowering, bound["size"], span, "a window size")
        stride = size if bound["stride"] is None else static_int(lowering, bound["stride"], span, "`stride=`")
        if size < 1 or stride < 1 or padding < 0 or 2 * padding > size:
            raise Unsupported("pooling options the interpreter refuses", span)
        return size, stride, padding
    stride = static_int(lowering, bound["stride"], span, "`stride=`")
    if stride < 1 or padding < 0:
        raise Unsupported("convolution options the interpreter refuses", span)
    return 0, stride, padding


def grid(shape: tuple, kernel: tuple, stride: int, padding: int, span: Span) -> tuple[int, int]:
    sizes = [n + 2 * padding - k for n, k in zip(shape[2:], kernel, strict=True)]
    if min(sizes) < 0:
        raise Unsupported("a window that does not fit the image", span)
    return sizes[0] // stride + 1, sizes[1] // stride + 1


def padded_copy(lowering, x: Tensor, padding: int, fill: float) -> Tensor:
    """`x` [N, C, H, W] inside a border of `padding` elements of `fill`, in a buffer of its own."""
    if not padding:
        return x if isinstance(x.tree, ir.Read) else lowering.materialise(x)
    n, c, h, w = x.shape
    shape = (n, c, h + 2 * padding, w + 2 * padding)
    out = lowering.allocate(x.dtype, shape, "padded")
    lowering.emit(ir.Fill(out, ir.Splat(ir.Const(fill, x.dtype))))
    strides = contiguous(shape)
    interior = ir.Read(out, ir.Const(padding * (strides[2] + strides[3]), "i64"), strides)
    lowering.emit(ir.Fill(out, x.tree, interior, x.shape))
    return view(out)


def windows(source: Tensor, kernel: tuple, stride: int, rows: int, columns: int) -> ir.Read:
    """The [N, C, H', W', KH, KW] view of the windows of a padded image buffer."""
    read = source.tree
    sn, sc, sh, sw = read.strides
    return ir.Read(read.buffer, read.offset, (sn, sc, stride * sh, stride * sw, sh, sw))


def spaced_view(target: ir.Buffer, down: int, across: int, stride: int, rows: int, columns: int) -> ir.Read:
    """result[:, :, down::stride][:rows, :, across::stride][:columns]: a kernel offset's places."""
    sn, sc, sh, sw = contiguous(target.shape)
    return ir.Read(target, ir.Const(down * sh + across * sw, "i64"), (sn, sc, stride * sh, stride * sw))


def columns_of(lowering, x: Tensor, kernel: tuple, stride: int, padding: int, span: Span) -> tuple:
    """im2col, all images in one matrix: [C * KH * KW, N * H' * W'] (written out), and the grid."""
    rows, columns = grid(x.shape, kernel, stride, padding, span)
    source = padded_copy(lowering, x, padding, 0.0)
    n, c = x.shape[:2]
    view6 = windows(source, kernel, stride, rows, columns)
    sn, sc, srow, scol, sh, sw = view6.strides
    ordered = ir.Read(view6.buffer, view6.offset, (sc, sh, sw, sn, srow, scol))  # [C, KH, KW, N, H', W']
    out = lowering.allocate(x.dtype, (c, kernel[0], kernel[1], n, rows, columns), "columns")
    lowering.emit(ir.Fill(out, ordered))
    flat = (c * kernel[0] * kernel[1], n * rows * columns)
    return Tensor(x.dtype, flat, ir.Read(out, ZERO, contiguous(flat))), rows, columns


def by_channel(lowering, dy: Tensor) -> Tensor:
    """[N, O, H', W'] as [O, N * H' * W'] (written out: the layout of one product over all images)."""
    n, o, rows, columns = dy.shape

    moved = Tensor(dy.dtype, (o, n, rows, columns), remap(dy.tree, (1, 0, 2, 3)))
    return reshaped(lowering, lowering.plain(moved), (o, n * rows * columns), None)


def conv2d(lowering, bound: dict, span: Span) -> object:
    x, w = image_of(bound["x"], span), image_of(bound["w"], span)
    _, stride, padding = window_options(lowering, bound, span, False)
    if x.dtype != w.dtype or x.shape[1] != w.shape[1]:
        raise Unsupported("`conv2d` of mismatched tensors", span)
    outputs, channels, kh, kw = w.shape
    cols, rows, columns = columns_of(lowering, x, (kh, kw), stride, padding, span)
    kernels = reshaped(lowering, w, (outputs, channels * kh * kw), span)
    product = lowering.plain(matmul(lowering, kernels, cols, span))  # [O, N * H' * W']
    n, area = x.shape[0], rows * columns
    return Tensor(
        x.dtype,
        (n, outputs, rows, columns),
        ir.Read(product.tree.buffer, product.tree.offset, (area, n * area, columns, 1)),
    )


def gradient_arguments(lowering, bound: dict, span: Span, name: str, other: str) -> tuple:
    """A convolution gradient helper's `dy`, its other image (`w` or `x`), the shape of `like` (of the
    other's channels), the stride and the padding; what the interpreter would refuse is not compiled."""
    dy, second = image_of(bound["dy"], span), image_of(bound[other], span)
    like = shape_of(bound["like"])
    _, stride, padding = window_options(lowering, bound, span, False)
    if len(like) != 4 or dy.dtype != second.dtype or like[1] != second.shape[1]:
        raise Unsupported(f"`{name}` of mismatched tensors", span)
    return dy, second, like, stride, padding


def conv2d_input_grad(lowering, bound: dict, span: Span) -> object:
    dy, w, like, stride, padding = gradient_arguments(lowering, bound, span, "conv2d_input_grad", "w")
    n, channels, h, width = like
    outputs, _, kh, kw = w.shape
    rows, columns = grid(like, (kh, kw), stride, padding, span)
    if dy.shape != (n, outputs, rows, columns):
        raise Unsupported("`conv2d_input_grad` of a gradient of another shape", span)
    kernels = reshaped(lowering, w, (outputs, channels * kh * kw), span)
    shares = lowering.plain(matmul(lowering, transposed(kernels), by_channel(lowering, dy), span))
    result = lowering.allocate(dy.dtype, (n, channels, h + 2 * padding, width + 2 * padding), "col2im")
    lowering.emit(ir.Fill(result, ir.Splat(ir.Const(0.0, dy.dtype))))
    share = shares.tree
    per = contiguous((channels, kh, kw, n, rows, columns))  # the layout of `shares`
    for down in range(kh):
        for across in range(kw):
            region = spaced_view(result, down, across, stride, rows, columns)
            offset = ir.Const(down * per[1] + across * per[2], "i64")
            part = ir.Read(share.buffer, lowering.add_offset(share.offset, offset), (per[3], per[0], per[4], per[5]))
            tree = ir.Apply("add", dy.dtype, (region, part))
            lowering.emit(ir.Fill(result, tree, region, (n, channels, rows, columns)))
    strides = contiguous(result.shape)
    inner = ir.Const(padding * (strides[2] + strides[3]), "i64")
    return Tensor(dy.dtype, (n, channels, h, width), ir.Read(result, inner, strides))


def transposed(x: Tensor) -> Tensor:

    return Tensor(x.dtype, tuple(reversed(x.shape)), remap(x.tree, (1, 0)))


def conv2d_weight_grad(lowering, bound: dict, span: Span) -> object:
    dy, x, like, stride, padding = gradient_arguments(lowering, bound, span, "conv2d_weight_grad", "x")
    outputs, _, kh, kw = like
    cols, rows, columns = columns_of(lowering, x, (kh, kw), stride, padding, span)
    if dy.shape != (x.shape[0], outputs, rows, columns):
        raise Unsupported("`conv2d_weight_grad` of a gradient of another shape", span)
    product = matmul(lowering, by_channel(lowering, dy), transposed(cols), span)  # [O, C * KH * KW]
    return reshaped(lowering, product, like, span)


def pool_windows(lowering, x: Tensor, bound: dict, span: Span) -> tuple:
    size, stride, padding = window_options(lowering, bound, span, True)
    rows, columns = grid(x.shape, (size, size), stride, padding, span)
    source = padded_copy(lowering, x, padding, float("-inf"))
    n, c = x.shape[:2]
    return (
        Tensor(x.dtype, (n, c, rows, columns, size, size), windows(source, (size, size), stride, rows, columns)),
        size,
        stride,
        padding,
    )


def max_pool2d(lowering, bound: dict, span: Span) -> object:
    x = image_of(bound["x"], span)
    framed, *_ = pool_windows(lowering, x, bound, span)
    return finish(lowering, reduce(lowering, framed, "max", (4, 5), False, span, x.dtype), x.dtype)


def maxima(lowering, x: Tensor, bound: dict, span: Span) -> tuple:
    """Where each window finds its maximum (`down * size + across`, the first of ties, as interpreted:
    a candidate replaces the best only when strictly greater)."""
    framed, size, stride, padding = pool_windows(lowering, x, bound, span)
    read = framed.tree
    n, c, rows, columns = framed.shape[:4]
    base = ir.Read(read.buffer, read.offset, read.strides[:4])
    best: object = base
    offsets: object = ir.Splat(ir.Const(0, "i64"))
    for down in range(size):
        for across in range(size):
            if down == across == 0:
                continue
            shift = down * read.strides[4] + across * read.strides[5]
            candidate = ir.Read(read.buffer, lowering.add_offset(read.offset, ir.Const(shift, "i64")), read.strides[:4])
            greater = ir.Apply("gt", "bool", (candidate, best))
            offsets = ir.Apply("select", "i64", (greater, ir.Splat(ir.Const(down * size + across, "i64")), offsets))
            best = lowering.materialise(
                Tensor(x.dtype, (n, c, rows, columns), ir.Apply("maximum", x.dtype, (best, candidate)))
            ).tree
            offsets = lowering.materialise(Tensor("i64", (n, c, rows, columns), offsets)).tree
    return offsets, size, stride, padding, rows, columns


def max_pool2d_grad(lowering, bound: dict, span: Span) -> object:
    dy, x = image_of(bound["dy"], span), image_of(bound["x"], span)
    if dy.dtype != x.dtype:
        raise Unsupported("`max_pool2d_grad` of two dtypes", span)
    offsets, size, stride, padding, rows, columns = maxima(lowering, x, bound, span)
    n, c, h, w = x.shape
    if dy.shape != (n, c, rows, columns):
        raise Unsupported("`max_pool2d_grad` of a gradient of another shape", span)
    result = lowering.allocate(dy.dtype, (n, c, h + 2 * padding, w + 2 * padding), "unpooled")
    lowering.emit(ir.Fill(result, ir.Splat(ir.Const(0.0, dy.dtype))))
    zero = ir.Splat(ir.Const(0.0, dy.dtype))
    for down in range(size):
        for across in range(size):
            region = spaced_view(result, down, across, stride, rows, columns)
            chosen = ir.Apply("eq", "bool", (offsets, ir.Splat(ir.Const(down * size + across, "i64"))))
            share = ir.Apply("select", dy.dtype, (chosen, dy.tree, zero))
            lowering.emit(ir.Fill(result, ir.Apply("add", dy.dtype, (region, share)), region, (n, c, rows, columns)))
    strides = contiguous(result.shape)
    return Tensor(
        dy.dtype, (n, c, h, w), ir.Read(result, ir.Const(padding * (strides[2] + strides[3]), "i64"), strides)
    )


def max_pool2d_gather(lowering, bound: dict, span: Span) -> object:
    v, x = image_of(bound["v"], span), image_of(bound["x"], span)
    if v.dtype != x.dtype or v.shape != x.shape:
        raise Unsupported("`max_pool2d_gather` of mismatched tensors", span)
    offsets, size, stride, padding, rows, columns = maxima(lowering, x, bound, span)
    source = padded_copy(lowering, v, padding, 0.0).tree
    sn, sc, sh, sw = source.strides
    result: object = ir.Splat(ir.Const(0.0, v.dtype))
    for down in range(size):
        for across in range(size):
            place = lowering.add_offset(source.offset, ir.Const(down * sh + across * sw, "i64"))
            picked = ir.Read(source.buffer, place, (sn, sc, stride * sh, stride * sw))
            chosen = ir.Apply("eq", "bool", (offsets, ir.Splat(ir.Const(down * size + across, "i64"))))
            result = ir.Apply("select", v.dtype, (chosen, picked, result))
    return Tensor(v.dtype, (x.shape[0], x.shape[1], rows, columns), result)


# ------------------------------------------------------------------ creation and inspection


def filled(value: float):
    def apply(lowering, bound: dict, span: Span) -> object:
        dtype = dtype_of(bound["dtype"], span)
        dims = tuple(static_int(lowering, d, span, "a dimension") for d in bound["dims"])
        constant = ir.Const(
            False
            if dtype == "bool" and not value
            else (True if dtype == "bool" else (int(value) if dtype in ir.INTEGER_DTYPES else float(value))),
            dtype,
        )
        if not dims:
            return Value(constant)
        return Tensor(dtype, dims, ir.Splat(constant))

    return apply


def full(lowering, bound: dict, span: Span) -> object:
    dtype = dtype_of(bound["dtype"], span)
    dims = tuple(static_int(lowering, d, span, "a dimension") for d in bound["dims"])
    value = bound["value"]
    if not isinstance(value, Value) or dtype == "bool":
        raise Unsupported("`full` of this value", span)
    operand = lowering.promote(value, dtype, span)
    return Tensor(dtype, dims, ir.Splat(operand)) if dims else Value(operand)


def drawn(kind: int, prim: Prim):
    """`rand` (kind 0) and `randn` (kind 1): the host draws into a buffer, the numbers the interpreter draws
    (ir.Draw; runtime/randomness.py), from `default_rng(seed)` or the run's generator."""

    def apply(lowering, bound: dict, span: Span) -> object:
        dtype = dtype_of(bound["dtype"], span)
        if dtype not in FLOATS:
            raise Unsupported(f"`{prim.value}` of {dtype}", span)  # the interpreter's error
        dims = tuple(static_int(lowering, d, span, "a dimension") for d in bound["dims"])
        if any(n < 0 for n in dims):
            raise Unsupported(f"`{prim.value}` of a negative size", span)
        seed = checked_seed(lowering, prim, bound["seed"], span)
        buffer = lowering.allocate(dtype, dims or (1,), prim.value)
        lowering.emit(ir.Draw(buffer, kind, seed))
        return host_filled(lowering, buffer, dims, prim.value)

    return apply


def host_filled(lowering, buffer: ir.Buffer, dims: tuple[int, ...], hint: str) -> object:
    """What the host wrote into `buffer` (ir.Draw, ir.Sample): a tensor of `dims`, or with no dims (the
    buffer holds one element) a scalar named after `hint`."""
    if dims:
        return Tensor(buffer.dtype, dims, ir.Read(buffer, ZERO, contiguous(dims)))
    result = lowering.temp(hint, buffer.dtype)
    lowering.emit(ir.Evaluate(result, ir.Read(buffer, ZERO, ())))
    return Value(result)


def permutation(lowering, bound: dict, span: Span) -> object:
    """`permutation(n)`: the host shuffles 0..n-1 into a buffer as the interpreter does (ir.Draw, kind 2)."""
    count = static_int(lowering, bound["n"], span, "the length of a permutation")
    if count < 0:
        raise Unsupported("`permutation` of a negative length", span)  # the interpreter's error
    seed = checked_seed(lowering, Prim.PERMUTATION, bound["seed"], span)
    buffer = lowering.allocate("i64", (count,), "permutation")
    lowering.emit(ir.Draw(buffer, 2, seed))
    return Tensor("i64", (count,), ir.Read(buffer, ZERO, (1,)))


def batches(lowering, bound: dict, span: Span) -> object:
    """`batches(data, size, shuffle=, seed=)` as interpreted: each tensor `[N, rest...]` as `[N // size, size,
    rest...]`, the last `N % size` rows dropped; shuffled first (one permutation drawn by the host, ir.Draw,
    shared by the tensors) if `shuffle`. A data-parallel run's shard of each batch stays interpreted."""
    data, shuffle = bound["data"], bound["shuffle"]
    tensors = list(data) if isinstance(data, tuple) else [data]
    if not tensors or not all(isinstance(t, Tensor) and t.shape for t in tensors) or World.size > 1:
        raise Unsupported("`batches` of this value", span)
    total = tensors[0].shape[0]
    count = static_int(lowering, bound["size"], span, "a batch size")
    flag = lowering.scalar_of(shuffle, span) if not isinstance(shuffle, bool) else Value(ir.Const(shuffle, "bool"))
    if any(t.shape[0] != total for t in tensors) or count < 1 or not isinstance(flag.operand, ir.Const):
        raise Unsupported("`batches` of these sizes, or shuffled as the program runs decides", span)
    groups = total // count
    if flag.operand.value:
        seed = checked_seed(lowering, Prim.BATCHES, bound["seed"], span)
        order = lowering.allocate("i64", (total,), "order")
        lowering.emit(ir.Draw(order, 2, seed))
        rows = Tensor("i64", (groups, count), ir.Read(order, ZERO, (count, 1)))
        cut = tuple(gathered(lowering, t, rows, 0, span) for t in tensors)
    else:
        cut = tuple(in_groups(lowering, t, groups, count) for t in tensors)
    return cut if isinstance(data, tuple) else cut[0]


def in_groups(lowering, t: Tensor, groups: int, count: int) -> Tensor:
    """The first `groups * count` rows of `t` as `[groups, count, rest...]`: a view of its buffer."""
    t = t if is_plain(t) else lowering.plain(t)
    read = t.tree
    strides = contiguous(t.shape)
    return Tensor(
        t.dtype, (groups, count, *t.shape[1:]), ir.Read(read.buffer, read.offset, (count * strides[0], *strides))
    )


def checked_seed(lowering, prim: Prim, seed: object, span: Span) -> ir.Operand | None:
    """A `seed=` argument as an i64 operand (None without one), failing where the interpreter does on a negative
    one: at run time, with its message."""
    if seed is None:
        return None
    value = lowering.scalar_of(seed, span)
    operand = value.operand
    if operand.dtype != "i64":
        raise Unsupported(f"`{prim.value}` with a seed of {operand.dtype}", span)
    if isinstance(operand, ir.Const):
        if operand.value < 0:
            raise Unsupported(f"`{prim.value}` with a negative seed", span)  # the interpreter's error
        return operand
    fine = lowering.temp("seed.fine", "bool")
    lowering.emit(ir.Compare(fine, ">=", operand, ir.Const(0, "i64")))
    problem = PrimitiveError("`seed=` takes a non-negative integer, found {value}")
    lowering.emit(ir.Check(fine, lowering.site("E0513", failure_message(prim, problem), span, "i64"), operand))
    return operand


def categorical(lowering, bound: dict, span: Span) -> object:
    """One sample per distribution along the last axis, by the host (ir.Sample; runtime/randomness.py
    `fill_samples`): the interpreter's own sampler on the logits as f64, from `default_rng(seed)` or the run's
    generator, so the samples are the interpreter's. A row without a finite largest value fails at run time
    with the interpreter's message."""
    logits, seed = bound["logits"], bound["seed"]
    seed_operand = checked_seed(lowering, Prim.CATEGORICAL, seed, span)
    if not isinstance(logits, Tensor) or logits.dtype not in FLOATS or not logits.shape or not logits.shape[-1]:
        raise Unsupported("`categorical` of this value", span)  # a scalar, integers, no category: its error
    rows = logits.shape[:-1]
    wide = lowering.materialise(Tensor("f64", logits.shape, ir.Apply("convert", "f64", (logits.tree,))))
    target = lowering.allocate("i64", rows or (1,), "categorical")
    site = lowering.site("E0513", failure_message(Prim.CATEGORICAL, PrimitiveError(CATEGORICAL_PEAK)), span)
    count = math.prod(rows)
    lowering.emit(ir.Sample(target, wide.tree, count, logits.shape[-1], seed_operand, site))
    return host_filled(lowering, target, rows, "categorical")


def dropout(lowering, bound: dict, span: Span) -> object:
    """Inverted dropout as interpreted: the mask is `rand(n, seed=seed)` over the flattened `x` (drawn on the
    host, f32) at least `p`; the kept elements scaled by `1 / (1 - p)` in `x`'s dtype; `p = 1` gives zeros; with
    `training` false, `x` itself. `p` and the seed are checked first, at run time, with the interpreter's
    messages."""
    x, p, seed, training = bound["x"], bound["p"], bound["seed"], bound["training"]
    if not isinstance(x, Tensor) or x.dtype not in FLOATS or seed is None:
        raise Unsupported("`dropout` of this value", span)  # a scalar, an integer tensor, no seed: interpreted
    dtype = x.dtype
    rate = lowering.scalar_of(p, span)
    flag = lowering.scalar_of(training, span)
    if rate.operand.dtype not in FLOATS or flag.operand.dtype != "bool":
        raise Unsupported("`dropout` with this probability or flag", span)
    p_operand = rate.operand
    for test, limit in ((">=", 0.0), ("<=", 1.0)):
        inside = lowering.temp("rate.inside", "bool")
        lowering.emit(ir.Compare(inside, test, p_operand, ir.Const(limit, p_operand.dtype)))
        problem = PrimitiveError("`dropout` takes a probability `p` in [0, 1], found {value}")
        site = lowering.site("E0513", failure_message(Prim.DROPOUT, problem), span, p_operand.dtype)
        lowering.emit(ir.Check(inside, site, p_operand))
    seed_operand = checked_seed(lowering, Prim.DROPOUT, seed, span)
    if isinstance(flag.operand, ir.Const) and not flag.operand.value:
        return x
    draws = lowering.allocate("f32", x.shape, "dropout")
    lowering.emit(ir.Draw(draws, 0, seed_operand))
    rate_tree = ir.Splat(p_operand)
    kept = ir.Apply("ge", "bool", (ir.Read(draws, ZERO, contiguous(x.shape)), ir.Apply("convert", "f32", (rate_tree,))))
    zero_tree = ir.Splat(ir.Const(0.0, dtype))
    chosen = ir.Apply("select", dtype, (kept, x.tree, zero_tree))
    scale = ir.Apply("sub", dtype, (ir.Splat(ir.Const(1.0, dtype)), ir.Apply("convert", dtype, (rate_tree,))))
    dropped = ir.Apply("div", dtype, (chosen, scale))
    every = ir.Apply("eq", "bool", (rate_tree, ir.Splat(ir.Const(1.0, p_operand.dtype))))
    result = ir.Apply("select", dtype, (every, zero_tree, dropped))
    if not isinstance(flag.operand, ir.Const):
        result = ir.Apply("select", dtype, (ir.Splat(flag.operand), result, x.tree))
    return Tensor(dtype, x.shape, result)


def zeros_of(lowering, value: object, span: Span) -> object:
    """`zeros_like(value)`: zeros of its leaves; of a tape, a tape of zeros (`ZeroTape`) in its layout, as
    many entries as it has now (read before it changes), or of none known for a tape compiled code did not
    keep (`SnapshotTape`)."""
    if isinstance(value, ir.Variable):  # a scalar in a variable's home
        value = lowering.read_variable(value)
    if isinstance(value, Tensor):
        return Tensor(value.dtype, value.shape, ir.Splat(zero(value.dtype)))
    if isinstance(value, Value):
        return Value(zero(value.operand.dtype))
    if isinstance(value, tuple):
        return tuple(zeros_of(lowering, v, span) for v in value)
    if isinstance(value, Struct):
        return Struct(value.kind, value.name, value.fields, [zeros_of(lowering, v, span) for v in value.values])
    if isinstance(value, TapeValue):
        tape = used_tape(lowering, value, span)
        count = lowering.read_variable(tape.tape.count).operand
        return ZeroTape(tape.template, tape.leaves, count, tape.tape.size, span)
    if isinstance(value, SnapshotTape):
        return ZeroTape(None, (), None, 0, span)
    if isinstance(value, ZeroTape):
        return value
    raise Unsupported("`zeros_like` of this value", span)


def zeros_like(lowering, bound: dict, span: Span) -> object:
    return zeros_of(lowering, bound["x"], span)


def zero(dtype: str) -> ir.Const:
    return ir.Const({"bool": False, "i64": 0, "i32": 0}.get(dtype, 0.0), dtype)


def arange(lowering, bound: dict, span: Span) -> object:
    """Of integers, `start + i step` in i64, converted to `dtype=`'s; with a float bound, `start + i step` in f64
    rounded once to the result's dtype, as the interpreter computes it. The bounds must be known when compiled
    (the count is the tensor's size)."""
    given = [
        lowering.scalar_of(b, span) if not isinstance(b, int) else Value(ir.Const(b, "i64")) for b in bound["bounds"]
    ]
    if not any(value.operand.dtype in ("f32", "f64") for value in given):
        bounds = [static_int(lowering, value, span, "an `arange` bound") for value in given]
        start, stop, step = (0, bounds[0], 1) if len(bounds) == 1 else (*bounds, 1)[:3]
        if step == 0:
            raise Unsupported("`arange` with a step of 0, which stops the program", span)
        tree: object = ir.Index(0)
        if step != 1:
            tree = ir.Apply("mul", "i64", (tree, ir.Splat(ir.Const(step, "i64"))))
        if start:
            tree = ir.Apply("add", "i64", (tree, ir.Splat(ir.Const(start, "i64"))))
        dtype = "i64" if bound["dtype"] is None else dtype_of(bound["dtype"], span)
        if dtype != "i64":
            tree = ir.Apply("convert", dtype, (tree,))
        return Tensor(dtype, (len(range(start, stop, step)),), tree)
    if not all(isinstance(value.operand, ir.Const) for value in given):
        raise Unsupported("an `arange` of float bounds known only at run time (its length is its size)", span)
    numbers = [  # each bound as the number of its dtype (a literal has the result's: f32's 0.1 is 0.100000001)
        float(np.float32(value.operand.value)) if value.operand.dtype == "f32" else float(value.operand.value)
        for value in given
    ]
    try:
        start, step, count = float_steps(numbers, any(v.operand.dtype == "f64" for v in given))
    except ValueError as problem:
        raise Unsupported(f"{problem}, which stops the program", span) from None
    if bound["dtype"] is not None:
        dtype = dtype_of(bound["dtype"], span)
    else:
        dtype = "f64" if any(v.weak is None and v.operand.dtype == "f64" for v in given) else "f32"
    position = ir.Apply("convert", "f64", (ir.Index(0),))
    tree = ir.Apply(
        "add",
        "f64",
        (ir.Apply("mul", "f64", (position, ir.Splat(ir.Const(step, "f64")))), ir.Splat(ir.Const(start, "f64"))),
    )
    if dtype != "f64":
        tree = ir.Apply("convert", dtype, (tree,))
    return Tensor(dtype, (count,), tree)


def eye(lowering, bound: dict, span: Span) -> object:
    dtype = dtype_of(bound["dtype"], span)
    rows = static_int(lowering, bound["n"], span, "a dimension")
    columns = rows if bound["m"] is None else static_int(lowering, bound["m"], span, "a dimension")
    diagonal = ir.Apply("eq", "bool", (ir.Index(0), ir.Index(1)))
    if dtype == "bool":
        return Tensor(dtype, (rows, columns), diagonal)
    return Tensor(dtype, (rows, columns), ir.Apply("convert", dtype, (diagonal,)))


def linspace(lowering, bound: dict, span: Span) -> object:
    """numpy's formula, in f64 as the interpreter computes it: `i * step + start` with `step` the difference of
    the ends over `num - 1`, and `stop` itself last; converted to the result's dtype."""
    count = static_int(lowering, bound["num"], span, "the number of points")
    ends = [lowering.scalar_of(bound[name], span) for name in ("start", "stop")]
    if bound["dtype"] is not None:
        dtype = dtype_of(bound["dtype"], span)
    else:
        dtype = "f64" if any(end.weak is None and end.operand.dtype == "f64" for end in ends) else "f32"
    start, stop = (Value(lowering.promote(end, "f64", span)) for end in ends)
    delta = lowering.binary("-", stop, start, span)
    step = lowering.binary("/", delta, Value(ir.Const(float(count - 1), "f64")), span) if count > 1 else delta
    position = ir.Apply("convert", "f64", (ir.Index(0),))
    tree: object = ir.Apply(
        "add", "f64", (ir.Apply("mul", "f64", (position, ir.Splat(step.operand))), ir.Splat(start.operand))
    )
    if count > 1:
        last = ir.Apply("eq", "bool", (ir.Index(0), ir.Splat(ir.Const(count - 1, "i64"))))
        tree = ir.Apply("select", "f64", (last, ir.Splat(stop.operand), tree))
    if dtype != "f64":
        tree = ir.Apply("convert", dtype, (tree,))
    return Tensor(dtype, (count,), tree)


def shape(lowering, bound: dict, span: Span) -> object:
    return tuple(Value(ir.Const(n, "i64"), n) for n in shape_of(bound["x"]))


def length(lowering, bound: dict, span: Span) -> object:
    x = bound["x"]
    if isinstance(x, TapeValue):
        return lowering.read_variable(used_tape(lowering, x, span).tape.count)
    if isinstance(x, tuple):
        return Value(ir.Const(len(x), "i64"), len(x))
    if isinstance(x, Tensor):
        return Value(ir.Const(x.shape[0], "i64"), x.shape[0])
    raise Unsupported("`len` of this value", span)


def to_float(lowering, bound: dict, span: Span) -> object:
    x, dtype = bound["x"], dtype_of(bound["dtype"], span)
    if dtype not in FLOATS:
        raise Unsupported(f"`float` to {dtype}", span)
    if isinstance(x, Tensor):
        return Tensor(dtype, x.shape, ir.Apply("convert", dtype, (x.tree,)) if x.dtype != dtype else x.tree)
    value = lowering.scalar_of(x, span)
    if value.weak is not None:
        return Value(ir.Const(float(value.weak), dtype))
    if value.operand.dtype == dtype:
        return value
    if value.operand.dtype == "bool":
        raise Unsupported("`float` of a bool", span)
    result = lowering.temp("float", dtype)
    lowering.emit(ir.Convert(result, value.operand))
    return Value(result)


def to_int(lowering, bound: dict, span: Span) -> object:
    """`int` of a scalar (truncated; inf, nan and values out of the i64 range fail as interpreted) or
    of an integer or bool tensor."""
    x = bound["x"]
    if isinstance(x, Tensor):
        if x.dtype in FLOATS:
            return float_tensor_to_int(lowering, x, span)
        return Tensor("i64", x.shape, ir.Apply("convert", "i64", (x.tree,)) if x.dtype != "i64" else x.tree)
    value = lowering.scalar_of(x, span)
    if value.weak is not None:
        if isinstance(value.weak, float) and not -(2.0**63) <= value.weak < 2.0**63:
            raise Unsupported("`int` of a literal out of the i64 range", span)
        return Value(ir.Const(int(value.weak), "i64"))
    source = value.operand.dtype
    if source == "i64":
        return value
    site = None
    if source in FLOATS:
        site = lowering.site("E0513", "`int` of {value}", span, source)
        lowering.site("E0513", "`int` of {value}: out of the i64 range", span, source)
    result = lowering.temp("int", "i64")
    lowering.emit(ir.Convert(result, value.operand, site))
    return Value(result)


def float_tensor_to_int(lowering, x: Tensor, span: Span) -> Tensor:
    """`int` of a float tensor, checked as interpreted, the whole tensor at once: every element finite, then all
    of them within the i64 range; then each truncated toward zero."""
    if x.size:
        x = x if isinstance(x.tree, ir.Read) else lowering.materialise(x)
        every = tuple(range(len(x.shape)))
        # x - x is exactly 0 for a finite x, nan for inf and nan
        zero_difference = ir.Apply("eq", "bool", (ir.Apply("sub", x.dtype, (x.tree, x.tree)), ir.Splat(zero(x.dtype))))
        finite = Tensor("i64", x.shape, ir.Apply("convert", "i64", (zero_difference,)))
        all_finite = lowering.temp("int.finite", "i64")
        lowering.emit(ir.Evaluate(all_finite, reduce(lowering, finite, "min", every, False, span, "i64").tree))
        fine = lowering.temp("int.fine", "bool")
        lowering.emit(ir.Compare(fine, "==", all_finite, ir.Const(1, "i64")))
        problem = PrimitiveError("`int` of a tensor holding inf or nan")
        lowering.emit(ir.Check(fine, lowering.site("E0513", failure_message(Prim.INT, problem), span)))
        shown = f"{x.dtype}[{', '.join(map(str, x.shape))}]"
        problem = PrimitiveError(f"`int` of a tensor with values out of the i64 range ({shown})")
        site = lowering.site("E0513", failure_message(Prim.INT, problem), span)
        for op, test, limit in (("min", ">=", -(2.0**63)), ("max", "<", 2.0**63)):  # both exact in f32 and f64
            extreme = lowering.temp(f"int.{op}", x.dtype)
            lowering.emit(ir.Evaluate(extreme, reduce(lowering, x, op, every, False, span, x.dtype).tree))
            inside = lowering.temp("int.inside", "bool")
            lowering.emit(ir.Compare(inside, test, extreme, ir.Const(limit, x.dtype)))
            lowering.emit(ir.Check(inside, site))
    return Tensor("i64", x.shape, ir.Apply("convert", "i64", (x.tree,)))


def check(lowering, bound: dict, span: Span) -> object:
    condition, message = bound["condition"], bound["message"]
    condition = lowering.scalar_of(condition, span)
    if condition.operand.dtype != "bool":
        raise Unsupported(f"`assert` of {condition.operand.dtype}", span)
    text = message.value if isinstance(message, Text) else message
    if not isinstance(text, str):
        raise Unsupported("`assert` with a message that is not a string", span)
    shown = f"assertion failed: {text}" if text != "assertion failed" else "assertion failed"
    site = lowering.site("E0502", shown.replace("{", "{{").replace("}", "}}"), span)
    lowering.emit(ir.Check(condition.operand, site))
    return ()


# ------------------------------------------------------------------ trees of tensors


def tree_map(lowering, bound: dict, span: Span) -> object:
    f, trees = bound["f"], bound["trees"]
    if not isinstance(f, Closure):
        if isinstance(f, Primitive):
            return map_leaves(
                lambda *leaves: call_primitive(lowering, f.prim, list(leaves), {}, span, False), trees, span
            )
        raise Unsupported("`tree_map` of this function", span)
    return map_leaves(lambda *leaves: lowering.inline(f, list(leaves), {}, span, f.decl.span), trees, span)


def map_leaves(function, trees: tuple, span: Span) -> object:
    first = trees[0]
    if isinstance(first, tuple):
        if any(not isinstance(t, tuple) or len(t) != len(first) for t in trees):
            raise Unsupported("`tree_map` of trees of different structure", span)
        return tuple(map_leaves(function, items, span) for items in zip(*trees, strict=True))
    if isinstance(first, Struct):
        if any(not isinstance(t, Struct) or t.fields != first.fields or t.name != first.name for t in trees):
            raise Unsupported("`tree_map` of trees of different structure", span)
        return Struct(
            first.kind,
            first.name,
            first.fields,
            [map_leaves(function, items, span) for items in zip(*(t.values for t in trees), strict=True)],
        )
    return function(*trees)


# ------------------------------------------------------------------ tapes (derivative code of loops)


def new_tape(lowering, bound: dict, span: Span) -> object:
    """`tape(like)`: entries laid out like `like`; `tape()`: like the first value pushed (`push`)."""
    name = f"tape.{len(lowering.tapes)}"
    variables = [lowering.new_variable(f"{name}.{part}", "i64") for part in ("address", "count", "capacity")]
    lowering.emit(ir.Store(variables[1], ir.Const(0, "i64")))  # empty (its storage is reused in a loop)
    tape = TapeValue(ir.Tape(*variables, 0), None, (), depth=len(lowering.tape_loops))
    if bound["like"] is not None:
        laid_out(lowering, tape, bound["like"], span)
    return tape


def laid_out(lowering, tape: TapeValue, like: object, span: Span) -> None:
    """Fix the layout of `tape`'s entries to that of the value `like`: its structure (leaves numbered) and
    each leaf's byte offset, dtype and shape."""
    leaves: list = []
    offset = 0

    def numbered(value: object) -> object:
        nonlocal offset
        if isinstance(value, ir.Variable):
            value = lowering.read_variable(value)
        if isinstance(value, tuple):
            return tuple(numbered(v) for v in value)
        if isinstance(value, Struct):
            return Struct(value.kind, value.name, value.fields, [numbered(v) for v in value.values])
        if isinstance(value, Tensor):
            dtype, shape = value.dtype, value.shape
        elif isinstance(value, Value):
            dtype, shape = value.operand.dtype, ()
        elif isinstance(value, (TapeValue, SnapshotTape, ZeroTape)):
            return SNAPSHOT  # nothing kept (`SnapshotTape`)
        else:
            raise Unsupported("a tape of this value", span)
        offset = (offset + 15) // 16 * 16
        leaves.append((offset, dtype, shape))
        offset += max(math.prod(shape), 1) * ir.ITEM_BYTES[dtype]
        return ("leaf", len(leaves) - 1)

    tape.template = numbered(like)
    tape.leaves = tuple(leaves)
    tape.tape = dataclasses.replace(tape.tape, size=max((offset + 15) // 16 * 16, 16))
    lowering.tapes.append(tape.tape)


# A tape saved in another tape's entry: what a pop gives back in its place (compiled code keeps nothing of it)
SNAPSHOT = SnapshotTape()
TAPE_OF_TAPES = "a loop's tape holding tapes (a derivative through a loop, differentiated again)"


def used_tape(lowering, value: TapeValue, span: Span) -> TapeValue:
    """`value`, as its storage holds it: refused if a `push` or `pop` has changed the storage since, or if
    its variable holds a tape compiled code did not keep. Its storage counts as read (`read_tape`)."""
    if value.dead:
        raise Unsupported(f"{TAPE_OF_TAPES}, read after it is restored", span)
    if value.state["changed"]:
        raise Unsupported("a tape used again after a `push` or `pop`", span)
    in_loops(lowering, value, span, changes=False)
    return read_tape(lowering, value)


def in_loops(lowering, value: TapeValue, span: Span, changes: bool) -> None:
    """Refuse what a loop body, lowered once, would get wrong on its later iterations: a tape made before a
    loop and pushed or popped in it without the loop assigning it (each iteration would change it again),
    or read there through another name than the variable the loop assigns (which sees the changes)."""
    for loop in lowering.tape_loops[value.depth :]:
        home = loop.homes.get(value.tape.address.name)
        if home is None and changes:
            raise Unsupported(
                "a tape made before a loop is pushed or popped in it, but the loop does not assign it", span
            )
        if home is not None and home is not value:
            raise Unsupported("a tape is read in a loop through another name than the variable the loop assigns", span)


def read_tape(lowering, value: TapeValue) -> TapeValue:
    """`value`, its storage counted as read in the loop being lowered (`TapeLoop.reads`)."""
    if lowering.tape_loops:
        lowering.tape_loops[-1].reads.add(value.tape.address.name)
    return value


def live_tape(lowering, value: object, span: Span) -> TapeValue:
    if isinstance(value, (SnapshotTape, ZeroTape)):
        raise Unsupported(f"{TAPE_OF_TAPES}: `push` or `pop` of a tape it saved", span)
    if not isinstance(value, TapeValue):
        raise Unsupported("`push` or `pop` of something that is not a tape", span)
    if not value.state["changed"]:
        in_loops(lowering, value, span, changes=True)
    return used_tape(lowering, value, span)


def push(lowering, bound: dict, span: Span) -> object:
    tape = live_tape(lowering, bound["tape"], span)
    if tape.template is None:
        laid_out(lowering, tape, bound["value"], span)
    written: list = []

    def walk(template: object, value: object) -> None:
        if isinstance(value, ir.Variable):
            value = lowering.read_variable(value)
        if template is SNAPSHOT:
            if not isinstance(value, (TapeValue, SnapshotTape, ZeroTape)):
                raise Unsupported("a `push` of a value unlike the tape's entries", span)
            return
        if isinstance(template, tuple) and template and template[0] == "leaf" and len(template) == 2:
            offset, dtype, shape = tape.leaves[template[1]]
            if shape:
                if not isinstance(value, Tensor) or value.dtype != dtype or value.shape != shape:
                    raise Unsupported("a `push` of a value unlike the tape's entries", span)
                written.append((offset, value.tree, shape))
            else:
                if not isinstance(value, Value):
                    raise Unsupported("a `push` of a value unlike the tape's entries", span)
                written.append((offset, lowering.convert(value, dtype, "a pushed value"), ()))
            return
        if isinstance(template, tuple) and isinstance(value, tuple) and len(template) == len(value):
            for t, v in zip(template, value, strict=True):
                walk(t, v)
            return
        if isinstance(template, Struct) and isinstance(value, Struct) and template.fields == value.fields:
            for t, v in zip(template.values, value.values, strict=True):
                walk(t, v)
            return
        raise Unsupported("a `push` of a value unlike the tape's entries", span)

    walk(tape.template, bound["value"])
    site = lowering.site("E0513", "out of memory for a tape", span)
    lowering.emit(ir.TapePush(tape.tape, tuple(written), site))
    tape.state["changed"] = True
    return TapeValue(tape.tape, tape.template, tape.leaves, depth=len(lowering.tape_loops))


def pop(lowering, bound: dict, span: Span) -> object:
    given = bound["tape"]
    popped = given.state["popped"] if isinstance(given, TapeValue) and not given.dead else None
    if popped is not None and popped[0] == lowering.label:
        return popped[1]  # the same value popped again in the same block: what the first pop gave
    tape = live_tape(lowering, given, span)
    if tape.template is None:
        raise Unsupported("a `pop` from a tape nothing was pushed on", span)
    targets: list = []
    values: list = []
    for offset, dtype, shape in tape.leaves:
        if shape:
            buffer = lowering.allocate(dtype, shape, "popped")
            targets.append((offset, buffer))
            values.append(view(buffer))
        else:
            temp = lowering.temp("popped", dtype)
            targets.append((offset, temp))
            values.append(Value(temp))
    message = failure_message(Prim.POP, PrimitiveError("`pop` from an empty tape"))
    site = lowering.site("E0513", message, span)
    lowering.emit(ir.TapePop(tape.tape, tuple(targets), site))

    def rebuilt(template: object) -> object:
        if template is SNAPSHOT:
            return SnapshotTape()
        if isinstance(template, tuple) and template and template[0] == "leaf" and len(template) == 2:
            return values[template[1]]
        if isinstance(template, tuple):
            return tuple(rebuilt(t) for t in template)
        return Struct(template.kind, template.name, template.fields, [rebuilt(t) for t in template.values])

    tape.state["changed"] = True
    result = (rebuilt(tape.template), TapeValue(tape.tape, tape.template, tape.leaves, depth=len(lowering.tape_loops)))
    tape.state["popped"] = (lowering.label, result)  # a later block may not have run this pop
    return result


def same_length(lowering, tape: TapeValue | ZeroTape, zeros: ZeroTape, span: Span) -> TapeValue | ZeroTape:
    """`tape`, failing at run time as the interpreter does unless `zeros` has as many entries (when both
    counts are known: a snapshot's zeros have none, and derivative code only adds them to their like)."""
    count = used_tape(lowering, tape, span).tape.count if isinstance(tape, TapeValue) else None
    if count is not None and zeros.count is not None:
        equal = lowering.temp("tape.lengths", "bool")
        lowering.emit(ir.Compare(equal, "==", lowering.read_variable(count).operand, zeros.count))
        problem = PrimitiveError("`tree_add` adds values of one structure, found tapes of different lengths")
        lowering.emit(ir.Check(equal, lowering.site("E0513", failure_message(Prim.TREE_ADD, problem), span)))
    return tape


def tree_dot(lowering, bound: dict, span: Span) -> object:
    """The sum over the leaves of `sum(a * b)`, in f64 if any leaf is, else f32 (as interpreted)."""
    pairs: list = []
    map_leaves(lambda a, b: pairs.append((a, b)), (bound["a"], bound["b"]), span)
    tensors = []
    for a, b in pairs:
        a, b = (lowering.read_variable(v) if isinstance(v, ir.Variable) else v for v in (a, b))
        product = lowering.binary_values("*", a, b, span)
        if isinstance(product, Value):
            product = Tensor(product.operand.dtype, (1,), ir.Splat(product.operand))
        if product.dtype not in FLOATS:
            raise Unsupported(f"`tree_dot` of {product.dtype} leaves", span)
        tensors.append(product)
    dtype = "f64" if any(t.dtype == "f64" for t in tensors) else "f32"
    total: ir.Operand = ir.Const(0.0, dtype)
    for product in tensors:
        axes = tuple(range(len(product.shape)))
        part = finish(lowering, reduce(lowering, product, "add", axes, False, span, "f64"), product.dtype)
        value = lowering.promote(part, dtype, span) if part.operand.dtype != dtype else part.operand
        added = lowering.temp("tree.dot", dtype)
        lowering.emit(ir.BinaryOp(added, "add", total, value))
        total = added
    return Value(total)


def tree_add(lowering, bound: dict, span: Span) -> object:
    return map_leaves(lambda a, b: added(lowering, a, b, span), (bound["a"], bound["b"]), span)


def added(lowering, a: object, b: object, span: Span) -> object:
    """Two leaves added; a tape of zeros (`ZeroTape`) adds nothing to a tape of its length, as interpreted."""
    if isinstance(b, ZeroTape) and isinstance(a, (TapeValue, ZeroTape)):
        return same_length(lowering, a, b, span)
    if isinstance(a, ZeroTape) and isinstance(b, TapeValue):
        return same_length(lowering, b, a, span)
    if isinstance(a, (TapeValue, SnapshotTape, ZeroTape)) or isinstance(b, (TapeValue, SnapshotTape, ZeroTape)):
        raise Unsupported("`tree_add` of two tapes", span)
    return lowering.binary_values("+", a, b, span)


def alone(prim: Prim):
    """`rank()`, `world_size()` and `allreduce_mean(tree)` in a world of one process (runtime/world.py): 0, 1
    and `tree` itself. In a larger world they are MPI calls on the host, which compiled code does not make:
    the function calling one runs on the interpreter there (the world is known when a function is
    specialised, so a program compiled alone is never run by several ranks)."""

    def apply(lowering, bound: dict, span: Span) -> object:
        if World.size > 1:
            raise Unsupported(f"it calls `{prim.value}`, which compiled code does not do: {IN_A_WORLD}", span)
        if prim == Prim.ALLREDUCE_MEAN:
            return bound["tree"]
        return Value(ir.Const(World.rank if prim == Prim.RANK else World.size, "i64"))

    return apply


IN_A_WORLD = "it talks to the other ranks over MPI on the host, and compiled code does not call back into Python"

# The specialiser's lowering of every primitive it compiles, by `Prim`; `REFUSED` says why it does not compile
# the others (their functions run on the interpreter). A test checks that the two cover `Prim`.
HANDLERS = {
    **{prim: unary(prim) for prim in SCALAR_MATH if len(PRIMITIVES[prim].signature.positional) == 1},
    **{prim: float_test(prim) for prim in FLOAT_TESTS},
    Prim.MAXIMUM: binary_math(Prim.MAXIMUM),
    Prim.MINIMUM: binary_math(Prim.MINIMUM),
    Prim.WHERE: where,
    Prim.CLIP: clip,
    Prim.SUM: summed("sum"),
    Prim.MEAN: summed("mean"),
    Prim.MAX: extreme("max"),
    Prim.MIN: extreme("min"),
    Prim.SOFTMAX: softmax,
    Prim.LOG_SOFTMAX: log_softmax,
    Prim.MATMUL: matmul_call,
    Prim.EINSUM: einsum,
    Prim.TRANSPOSE: transpose,
    Prim.SWAPAXES: swapaxes,
    Prim.FLIP: flip,
    Prim.PAD: pad,
    Prim.CUMSUM: cumsum,
    Prim.RESHAPE: reshape,
    Prim.RESHAPE_LIKE: reshape_like,
    Prim.EXPAND_DIMS: expand_dims,
    Prim.SQUEEZE: squeeze,
    Prim.BROADCAST_TO: broadcast_to,
    Prim.UNBROADCAST: unbroadcast,
    Prim.GATHER: gather,
    Prim.SCATTER_ADD: scatter_add,
    Prim.TAKE_ALONG_AXIS: take_along_axis,
    Prim.ADD_ALONG_AXIS: add_along_axis,
    Prim.ARGSORT: sorting(values=False),
    Prim.SORT: sorting(values=True),
    Prim.TOPK: topk,
    Prim.ZEROS: filled(0),
    Prim.ONES: filled(1),
    Prim.FULL: full,
    Prim.ZEROS_LIKE: zeros_like,
    Prim.STOP_GRADIENT: lambda lowering, bound, span: bound["x"],
    Prim.ARANGE: arange,
    Prim.EYE: eye,
    Prim.LINSPACE: linspace,
    Prim.RAND: drawn(0, Prim.RAND),
    Prim.RANDN: drawn(1, Prim.RANDN),
    Prim.DROPOUT: dropout,
    Prim.CATEGORICAL: categorical,
    Prim.PERMUTATION: permutation,
    Prim.BATCHES: batches,
    Prim.SHAPE: shape,
    Prim.LEN: length,
    Prim.FLOAT: to_float,
    Prim.INT: to_int,
    Prim.ASSERT: check,
    Prim.TREE_MAP: tree_map,
    Prim.TREE_ADD: tree_add,
    Prim.TREE_DOT: tree_dot,
    Prim.ARGMAX: arg_extreme("max"),
    Prim.ARGMIN: arg_extreme("min"),
    Prim.ANY: truth("any"),
    Prim.ALL: truth("all"),
    Prim.LOGSUMEXP: logsumexp,
    Prim.VAR: variance(root=False),
    Prim.STD: variance(root=True),
    Prim.ONE_HOT: one_hot,
    Prim.TRIL: triangle("le"),
    Prim.TRIU: triangle("ge"),
    Prim.CONCAT: join(False),
    Prim.SPLIT_LIKE: split_like,
    Prim.STACK: join(True),
    Prim.CONV2D: conv2d,
    Prim.CONV2D_INPUT_GRAD: conv2d_input_grad,
    Prim.CONV2D_WEIGHT_GRAD: conv2d_weight_grad,
    Prim.MAX_POOL2D: max_pool2d,
    Prim.MAX_POOL2D_GRAD: max_pool2d_grad,
    Prim.MAX_POOL2D_GATHER: max_pool2d_gather,
    Prim.TAPE: new_tape,
    Prim.PUSH: push,
    Prim.POP: pop,
    Prim.RANK: alone(Prim.RANK),
    Prim.WORLD_SIZE: alone(Prim.WORLD_SIZE),
    Prim.ALLREDUCE_MEAN: alone(Prim.ALLREDUCE_MEAN),
}

HOST = "host work, and compiled code does not call back into Python"
REFUSED: dict[Prim, str] = {
    Prim.PRINT: f"printing is {HOST}",
    Prim.TIME: f"reading the clock is {HOST} (and each call must read it anew, where the program does)",
    Prim.DIGITS: f"loading the shipped dataset is {HOST}",
    Prim.LOAD_CSV: f"reading a file is {HOST}",
    Prim.LOAD_NPZ: f"reading a file is {HOST}",
    Prim.TEXT_CORPUS: f"reading the shipped corpus is {HOST}",
    Prim.CHARS: f"making a string is {HOST}",
    Prim.STR: f"making a string is {HOST}",
    Prim.LOG_METRIC: f"writing the metrics file is {HOST}",
    Prim.PROGRESS: f"drawing a progress bar is {HOST}",
    Prim.SAVE: f"writing a checkpoint is {HOST}",
    Prim.LOAD: f"reading a checkpoint is {HOST}",
}
SUPPORT = Support("llvm", frozenset(HANDLERS), REFUSED)
