"""The abstract values of specialised code (codegen/specialize.py, codegen/primitives.py), and what a
specialisation gives.

With every shape a constant, each expression of a function compiled for one argument layout gives an
abstract value: a scalar IR operand (`lower.Value`), a `Tensor` (dtype, constant shape, elementwise tree of
codegen/ir.py), a `Struct`, a tuple, a `Closure`, a `TapeValue`, a `Text`, a `DType` or a `Primitive`.
The helpers here read and build those trees (views, broadcasting, remapped axes) without emitting code.
"""

from __future__ import annotations

import math
import os
from dataclasses import field

import numpy as np
from dl.codegen import ir
from dl.codegen.ir import contiguous
from dl.codegen.lower import Unsupported, Value
from dl.lang import ast
from dl.lang.diagnostics import Span
from dl.lang.primitives import Prim
from dl.lang.record import record

FLOATS = ("f32", "f64")
NUMPY_DTYPES = {"f32": np.float32, "f64": np.float64, "i64": np.int64, "i32": np.int32, "bool": np.bool_}


def physical_memory() -> int:
    """The machine's memory in bytes (numpy's limit on an array's size where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return int(np.iinfo(np.intp).max)


MEMORY_BYTES = physical_memory()


@record(frozen=True)
class Tensor:
    """A tensor of rank 1 or more: its dtype, constant shape and elementwise tree (codegen/ir.py)."""

    dtype: str
    shape: tuple[int, ...]
    tree: object

    def __post_init__(self) -> None:
        # The interpreter cannot make such a tensor (E0513), where fused code might run for hours without
        # ever allocating it: refuse the layout, so that it runs there and fails alike.
        if any(n < 0 for n in self.shape):
            raise Unsupported(f"a tensor of negative size {list(self.shape)}")
        if self.size * ir.ITEM_BYTES.get(self.dtype, 8) > MEMORY_BYTES:
            raise Unsupported(f"a tensor of {self.size} elements, more than the machine's memory")

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@record
class Struct:
    """A struct value: the interpreter's `StructType` when known (`kind`), else its declaration's (path,
    name); field values in declaration order."""

    kind: object
    name: str
    fields: tuple[str, ...]
    values: list

    def field(self, name: str, span: Span) -> object:
        if name not in self.fields:
            raise Unsupported(f"`{self.name}` has no field `{name}`", span)
        return self.values[self.fields.index(name)]


@record(frozen=True)
class Closure:
    """A DL function value: a top-level declaration, or a lambda or local `fn` with the values it captured."""

    decl: ast.FnDecl | ast.Lambda
    path: str
    captured: dict = field(default_factory=dict)


class NeedsStatic(Unsupported):
    """An integer parameter used where a constant is needed (`zeros(n)`): the function is compiled again
    with that parameter's value part of the layout, as jit's static arguments."""

    def __init__(self, position: int, message: str, span: Span | None = None) -> None:
        super().__init__(message, span)
        self.position = position


@record(eq=False)
class TapeValue:
    """A tape (`tape`, `push`, `pop`): storage that grows as the loop it records runs. `template` is the
    structure of an entry (its leaves numbered), `leaves` each leaf's (byte offset, dtype, shape; () for a
    scalar). Derivative code uses a tape linearly: `push` and `pop` change the storage in place and give a
    new value. `state` is shared by the names that hold this value (`let d2 = d` binds a copy sharing
    it): once a `push` or `pop` has changed the storage, another `push`, `len` or `zeros_like` of the value
    is refused, as it would see the change, and another `pop` gives what the first one gave."""

    tape: ir.Tape
    template: object
    leaves: tuple
    state: dict = field(default_factory=lambda: {"changed": False, "popped": None})
    dead: bool = False  # its variable holds a `SnapshotTape` now: compiled code has nothing of it
    depth: int = 0  # how many loops were being lowered when this value was made or bound (`in_loops`)

    def alias(self, depth: int) -> TapeValue:
        """The same value under another name, bound `depth` loops deep."""
        return TapeValue(self.tape, self.template, self.leaves, self.state, self.dead, depth)


@record(eq=False)
class TapeLoop:
    """What the lowering of one loop knows of tapes, by storage (`ir.Tape`'s address variable): those its
    body read (a tape restored from another's entry may not be one, `store_home`), and the homes of the
    tape variables it assigns (codegen/primitives.py `in_loops`)."""

    reads: set = field(default_factory=set)
    homes: dict = field(default_factory=dict)


@record(eq=False)
class SnapshotTape:
    """A tape as it was when derivative code, differentiated again, saved it in another tape's entry (a loop's
    state that holds a tape). Compiled code keeps nothing of it: the backward sweep restores it but reads
    it only through `zeros_like` (a `ZeroTape` without a count); anything else refuses it, and the function
    runs on the interpreter."""


@record(eq=False)
class ZeroTape:
    """`zeros_like` of a tape: zeros in the layout of `template`/`leaves` (None: unknown, a snapshot's), as
    many entries as `count` (an operand, or None). Added to a tape (`tree_add`) it is that tape; a variable
    that holds one across a loop makes it real storage (`ir.TapeZeros`), which needs both."""

    template: object
    leaves: tuple
    count: object
    size: int = 0  # bytes an entry takes (`ir.Tape.size`)
    span: object = None  # where `zeros_like` was called


@record(frozen=True)
class ValueIndex:
    """An index already evaluated (so that indexing evaluates it once)."""

    value: object


@record(frozen=True)
class Primitive:
    """A built-in as a value."""

    prim: Prim


@record(frozen=True)
class Text:
    value: str


@record(frozen=True)
class DType:
    name: str


ZERO = ir.Const(0, "i64")


def view(buffer: ir.Buffer) -> Tensor:
    return Tensor(buffer.dtype, buffer.shape, ir.Read(buffer, ZERO, contiguous(buffer.shape)))


def is_plain(tensor: Tensor) -> bool:
    """Whether the tensor is a buffer (or a contiguous piece of one) as it is laid out."""
    tree = tensor.tree
    return isinstance(tree, ir.Read) and all(
        stride == want or n == 1
        for stride, want, n in zip(tree.strides, contiguous(tensor.shape), tensor.shape, strict=True)
    )


def remap(tree: object, mapping: tuple[int | None, ...]) -> object:
    """`tree` seen through new dimensions: new dimension `d` walks old dimension `mapping[d]`, or none
    (broadcast). Old dimensions missing from `mapping` must have size 1 (their index is 0)."""
    match tree:
        case ir.Read(buffer=buffer, offset=offset, strides=strides):
            return ir.Read(buffer, offset, tuple(0 if m is None else strides[m] for m in mapping))
        case ir.Take():
            strides = tuple(0 if m is None else tree.strides[m] for m in mapping)
            return ir.Take(
                tree.buffer, tree.offset, strides, remap(tree.index, mapping), tree.stride, tree.size, tree.site
            )
        case ir.Index(axis=axis):
            return ir.Index(mapping.index(axis)) if axis in mapping else ir.Splat(ZERO)
        case ir.Splat():
            return tree
        case ir.Apply(op=op, dtype=dtype, args=args):
            return ir.Apply(op, dtype, tuple(remap(a, mapping) for a in args))
    raise AssertionError(tree)


def reads(tree: object, buffers: set[str]) -> bool:
    match tree:
        case ir.Read(buffer=buffer):
            return buffer.name in buffers
        case ir.Take(buffer=buffer, index=index):
            return buffer.name in buffers or reads(index, buffers)
        case ir.Apply(args=args):
            return any(reads(a, buffers) for a in args)
    return False


def value_reads(value: object, buffers: set[str]) -> bool:
    """Whether an abstract value reads any of `buffers` (a closure: through what it captured)."""
    if isinstance(value, Tensor):
        return reads(value.tree, buffers)
    if isinstance(value, tuple):
        return any(value_reads(v, buffers) for v in value)
    if isinstance(value, Struct):
        return any(value_reads(v, buffers) for v in value.values)
    if isinstance(value, Closure):
        return any(value_reads(v, buffers) for v in value.captured.values())
    return False


def parts(value: object) -> list:
    """The leaves of a tuple or struct, in order."""
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in parts(v)]
    if isinstance(value, Struct):
        return [leaf for v in value.values for leaf in parts(v)]
    return [value]


def crossed(home: object, value: object) -> bool:
    """Whether assigning `value` to the tuple or struct `home` part by part would overwrite what a later
    part reads (`(a, b) = (b, a)`), unlike `s = tree_add(s, d)`, whose parts read their own storage."""
    homes, values = parts(home), parts(value)
    if len(homes) != len(values):
        return True
    storage = [home_buffers(h) for h in homes]
    for j, v in enumerate(values):
        others = set().union(*(b for i, b in enumerate(storage) if i != j))
        if value_reads(v, others):
            return True
    return False


def settled(value: object) -> object:
    """`value` with its unsuffixed literals made values of their default dtype (f32, i64), as the
    interpreter (and the checker's types) make a literal bound by `let`, a constant or a result."""
    if isinstance(value, Value) and value.weak is not None:
        return Value(value.operand)
    if isinstance(value, tuple):
        return tuple(settled(item) for item in value)
    return value


def is_zero(tree: object) -> bool:
    return isinstance(tree, ir.Splat) and isinstance(tree.value, ir.Const) and tree.value.value == 0


def adds_nothing(tree: object, dtype: str) -> bool:
    """Is `tree + v` taken as `v` for `v` of `dtype`? A zero is (`zeros_like(x) + v`, derivative code's
    zeroed adjoints). For floats this drops a sign: 0.0 + -0.0 is 0.0, so a zero's sign may differ from
    the interpreter's, as docs/internals.md says (XLA simplifies `x + 0` alike)."""
    return is_zero(tree) and tree.value.dtype == dtype


def home_buffers(value: object) -> set[str]:
    if isinstance(value, Tensor) and isinstance(value.tree, ir.Read):
        return {value.tree.buffer.name}
    if isinstance(value, tuple):
        return {name for v in value for name in home_buffers(v)}
    if isinstance(value, Struct):
        return {name for v in value.values for name in home_buffers(v)}
    return set()


def same_view_only(tree: object, region: ir.Read) -> bool:
    """Whether every read of `region`'s buffer in `tree` is of `region` itself (the element written)."""
    match tree:
        case ir.Read(buffer=read) if read.name == region.buffer.name:
            return tree == region
        case ir.Take(buffer=read, index=index):
            return read.name != region.buffer.name and same_view_only(index, region)
        case ir.Apply(args=args):
            return all(same_view_only(a, region) for a in args)
    return True


def reads_only_in_place(tree: object, buffer: ir.Buffer) -> bool:
    """Whether every read of `buffer` in `tree` is of the element being written (so `buffer` can be
    overwritten by the tree's loop as it goes)."""
    match tree:
        case ir.Read(buffer=read, offset=offset, strides=strides) if read.name == buffer.name:
            return offset == ZERO and all(
                s == c or n == 1 for s, c, n in zip(strides, contiguous(buffer.shape), buffer.shape, strict=True)
            )
        case ir.Take(buffer=read, index=index):
            return read.name != buffer.name and reads_only_in_place(index, buffer)
        case ir.Apply(args=args):
            return all(reads_only_in_place(a, buffer) for a in args)
    return True


def broadcast_shape(a: tuple[int, ...], b: tuple[int, ...], span: Span) -> tuple[int, ...]:
    rank = max(len(a), len(b))
    a, b = (1,) * (rank - len(a)) + a, (1,) * (rank - len(b)) + b
    shape = []
    for m, n in zip(a, b, strict=True):
        if m != n and 1 not in (m, n):
            raise Unsupported(f"shapes {list(a)} and {list(b)} do not broadcast", span)
        shape.append(n if m == 1 else m)
    return tuple(shape)


def broadcast(tensor: Tensor, shape: tuple[int, ...], span: Span) -> Tensor:
    if tensor.shape == shape:
        return tensor
    extra = len(shape) - len(tensor.shape)
    if extra < 0:
        raise Unsupported(f"cannot broadcast {list(tensor.shape)} to {list(shape)}", span)
    mapping = []
    for d, n in enumerate(shape):
        k = d - extra
        if k < 0 or (tensor.shape[k] == 1 and n != 1):
            mapping.append(None)
        elif tensor.shape[k] == n:
            mapping.append(k)
        else:
            raise Unsupported(f"cannot broadcast {list(tensor.shape)} to {list(shape)}", span)
    return Tensor(tensor.dtype, shape, remap(tensor.tree, tuple(mapping)))


def axis_index(axis: int, rank: int, span: Span) -> int:
    if not -max(rank, 1) <= axis < max(rank, 1):
        raise Unsupported(f"axis {axis} is out of range for rank {rank}", span)
    return axis % max(rank, 1)


def reduction_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if d in axes else n for d, n in enumerate(shape))
    return tuple(n for d, n in enumerate(shape) if d not in axes)


# ------------------------------------------------------------------ what a lowering for one layout gives


@record
class Specialised:
    """A function lowered for one layout: the IR, the number of argument slots, the result layout (a tree
    of codegen/ir.py's result records), and the workspace's size in bytes."""

    function: ir.Function
    argument_slots: int
    result: tuple
    workspace: int
    slots: int
    callees: tuple[ir.Function, ...] = ()  # the specialisations it calls for real, compiled with it


class ResultUnknown(Unsupported):
    """A recursive call of `entry` reached before any `return` of it, its result not declared: the registry
    learns the result by lowering it once more without following the paths through such calls."""

    def __init__(self, entry: object, message: str, span: Span | None = None) -> None:
        super().__init__(message, span)
        self.entry = entry


def as_index(lowering, value: object) -> object:
    """An i32 index (a scalar or a tensor of them) as the i64 that indexing and `gather` compute with; any
    other value as it is. numpy indexes with either, and the values are the same."""
    if isinstance(value, Tensor) and value.dtype == "i32":
        return Tensor("i64", value.shape, ir.Apply("convert", "i64", (value.tree,)))
    if isinstance(value, Value) and value.weak is None and value.operand.dtype == "i32":
        return Value(lowering.promote(value, "i64", None))
    return value
