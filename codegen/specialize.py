"""Tensor functions compiled for the shapes they are called with: `specialise(typed, decl, path, args)`.

A function that takes or returns tensors, structs or tuples is compiled the first time it is called with
a given *layout* of arguments (the structure of its structs and tuples, and every tensor's dtype and
shape; scalars stay run-time values), as JAX's `jit` specialises on shapes. With every shape a constant,
the lowering is an abstract interpretation of the function's body: each expression gives an abstract value
(a scalar IR operand, a `Tensor` of known dtype and shape, a `Struct`, a `Tuple`, a closure), calls of DL
functions (user code, stdlib/nn.dl, the functions `grad` generates) are inlined, and tensor code becomes
the tensor instructions of codegen/ir.py:

- elementwise operations, broadcasting, `transpose`, `expand_dims`, `reshape` of contiguous data and
  indexing by integers build *trees* (`ir.Read` views with constant strides, `ir.Apply` nodes) and compute
  nothing; a tree is written to a buffer (`ir.Fill`: one loop nest, no intermediate tensors) only where
  it must be: a `let` used more than once, a reduction's or a product's operand, a result;
- reductions (`sum`, `mean`, `max`, `min` over axes, and `softmax`, `log_softmax`, `logsumexp` built from
  them) read their operand's tree directly (`ir.Reduce`); matrix products call numpy's OpenBLAS `gemm`
  (`ir.MatMul`), transposed operands passed as such; `gather` and `scatter_add` are `ir.Take` trees and
  `ir.ScatterAdd` loops with their indices checked.

Scalar control flow is the scalar lowering's (codegen/lower.py: blocks, branches, loops); a tensor variable
assigned inside an `if` or a loop gets a fixed buffer (a *home*) that its assignments write. Buffers are
carved at compile time out of one workspace the host allocates once per specialisation; results are
written into tensors the host allocates. Anything outside this (a function value parameter, printing,
random numbers, an integer a shape depends on that is only known at run time, a mixed-dtype operation)
raises `Unsupported`, and the function runs on the interpreter, as every other refused function does.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field

import numpy as np
from dl.codegen import ir
from dl.codegen.ir import contiguous
from dl.codegen.lower import (
    ARITHMETIC,
    COMPARE_NAMES,
    TENSOR_PROMOTIONS,
    FunctionLowering,
    Unsupported,
    Value,
    promoted_dtype,
)
from dl.lang import ast
from dl.lang.check import Typed
from dl.lang.diagnostics import Span
from dl.lang.primitives import BY_NAME
from dl.lang.types import UNIT, DimVar, FunctionRef, PrimitiveRef, TensorType, TupleType

DTYPE_NAMES = {"f32", "f64", "i64", "i32", "bool"}
FLOATS = ("f32", "f64")
ITEM_BYTES = {"f32": 4, "f64": 8, "i64": 8, "i32": 4, "bool": 1}


def physical_memory() -> int:
    """The machine's memory in bytes (numpy's limit on an array's size where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return int(np.iinfo(np.intp).max)


MEMORY_BYTES = physical_memory()
INLINE_DEPTH = 48
MAX_SPECIALISATIONS = 32  # of the functions one compiled call needs (itself and what it calls for real)


# ------------------------------------------------------------------ abstract values


@dataclass(frozen=True)
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
        if self.size * ITEM_BYTES.get(self.dtype, 8) > MEMORY_BYTES:
            raise Unsupported(f"a tensor of {self.size} elements, more than the machine's memory")

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclass
class Struct:
    """A struct value: the interpreter's `StructType` when known (`kind`), else its declaration's (path,
    name); field values in declaration order."""

    kind: object
    name: str
    fields: tuple[str, ...]
    values: list

    def field(self, name: str, span: Span) -> object:
        if name not in self.fields:
            raise Unsupported(f"`{self.name}` has no field `{name}` (at {span})")
        return self.values[self.fields.index(name)]


@dataclass(frozen=True)
class Closure:
    """A DL function value: a top-level declaration, or a lambda or local `fn` with the values it captured."""

    decl: ast.FnDecl | ast.Lambda
    path: str
    captured: dict = field(default_factory=dict)


class NeedsStatic(Unsupported):
    """An integer parameter used where a constant is needed (`zeros(n)`): the function is compiled again
    with that parameter's value part of the layout, as jit's static arguments."""

    def __init__(self, position: int, message: str) -> None:
        super().__init__(message)
        self.position = position


@dataclass(eq=False)
class TapeValue:
    """A tape (`tape`, `push`, `pop`): storage that grows as the loop it records runs. `template` is the
    structure of an entry (its leaves numbered), `leaves` each leaf's (byte offset, dtype, shape; () for a
    scalar). Derivative code uses a tape linearly: `push` and `pop` change the storage in place and give a
    new value; using the one before (`live` false) is refused, as it would see the change."""

    tape: ir.Tape
    template: object
    leaves: tuple
    live: bool = True


@dataclass(frozen=True)
class ValueIndex:
    """An index already evaluated (so that indexing evaluates it once)."""

    value: object


@dataclass(frozen=True)
class Primitive:
    name: str


@dataclass(frozen=True)
class Text:
    value: str


@dataclass(frozen=True)
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
            raise Unsupported(f"shapes {list(a)} and {list(b)} do not broadcast (at {span})")
        shape.append(n if m == 1 else m)
    return tuple(shape)


def broadcast(tensor: Tensor, shape: tuple[int, ...], span: Span) -> Tensor:
    if tensor.shape == shape:
        return tensor
    extra = len(shape) - len(tensor.shape)
    if extra < 0:
        raise Unsupported(f"cannot broadcast {list(tensor.shape)} to {list(shape)} (at {span})")
    mapping = []
    for d, n in enumerate(shape):
        k = d - extra
        if k < 0 or (tensor.shape[k] == 1 and n != 1):
            mapping.append(None)
        elif tensor.shape[k] == n:
            mapping.append(k)
        else:
            raise Unsupported(f"cannot broadcast {list(tensor.shape)} to {list(shape)} (at {span})")
    return Tensor(tensor.dtype, shape, remap(tensor.tree, tuple(mapping)))


def axis_index(axis: int, rank: int, span: Span) -> int:
    if not -max(rank, 1) <= axis < max(rank, 1):
        raise Unsupported(f"axis {axis} is out of range for rank {rank} (at {span})")
    return axis % max(rank, 1)


# ------------------------------------------------------------------ a compiled layout


@dataclass
class Specialised:
    """A function lowered for one layout: the IR, the number of argument slots, the result layout (a tree
    of ("tensor", slot, dtype, shape), ("scalar", slot, dtype), ("tuple", items), ("struct", kind, items)
    and ("unit",)), and the workspace's size in bytes."""

    function: ir.Function
    argument_slots: int
    result: tuple
    workspace: int
    slots: int
    callees: tuple[ir.Function, ...] = ()  # the specialisations it calls for real, compiled with it


def specialise(typed: Typed, decl: ast.FnDecl, path: str, layout: tuple, structs) -> Specialised:
    """`decl` lowered for the argument `layout`, with every specialisation its recursive calls need."""
    registry = Registry(typed, structs)
    return registry.finished(registry.lower(decl, path, layout, decl.span))


@dataclass
class Entry:
    """One specialisation of a `Registry`: its symbol, its lowering, and the result once lowered."""

    symbol: str
    lowering: Specialiser
    done: Specialised | None = None

    def signature(self, span: Span) -> tuple[tuple, int]:
        """(the result layout, the number of slots) a caller needs; known while the function is still being
        lowered (a recursive call) once its first `return` has been."""
        if self.done is not None:
            return self.done.result, self.done.slots
        lowering = self.lowering
        if lowering.result_layout is None:
            lowering.result_layout = lowering.predicted_result(span, self)
        return lowering.result_layout, lowering.slot_count


class ResultUnknown(Unsupported):
    """A recursive call of `entry` reached before any `return` of it, its result not declared: the registry
    learns the result by lowering it once more without following the paths through such calls."""

    def __init__(self, entry: Entry, message: str) -> None:
        super().__init__(message)
        self.entry = entry


class Registry:
    """The specialisations one compiled call needs, keyed by (function, argument layout): the function
    called from the interpreter, then each one a recursive (or too deeply nested) call calls for real
    (`ir.CallSpecialised`) instead of inlining it. They are compiled into one module; each then allocates
    its own workspace per call, as recursive calls are active at once."""

    def __init__(self, typed: Typed, structs) -> None:
        self.typed, self.structs = typed, structs
        self.entries: dict[tuple, Entry] = {}
        self.made = 0
        self.calls = False  # whether any function calls another (or itself) for real

    def lower(self, decl: ast.FnDecl, path: str, layout: tuple, span: Span) -> Entry:
        key = (id(decl), layout)
        if key in self.entries:
            return self.entries[key]
        if len(self.entries) >= MAX_SPECIALISATIONS:
            raise Unsupported(
                f"its recursion needs more than {MAX_SPECIALISATIONS} specialisations (argument layouts), "
                f"the last of `{decl.name}` (at {span})"
            )
        symbol = f"{path}::{decl.name}.specialised" + (f".{self.made}" if self.made else "")
        self.made += 1
        entry = Entry(symbol, Specialiser(self.typed, decl, path, list(layout), self.structs, self))
        self.entries[key] = entry
        try:
            try:
                entry.done = entry.lowering.specialise(symbol)
            except ResultUnknown as unknown:
                if unknown.entry is not entry:
                    raise
                self.forget_after(key)
                entry.done = self.lowered_with_result(entry, decl, path, layout, symbol)
        except BaseException:  # it, and whatever was lowered for it (which may call it), are gone
            self.forget_after(key)
            del self.entries[key]
            raise
        return entry

    def lowered_with_result(self, entry: Entry, decl: ast.FnDecl, path: str, layout: tuple, symbol: str):
        """Lower a function whose recursive call comes before any `return` (`_back` functions): first a probe
        that does not follow the paths through that call finds what the others return, then the function,
        its result laid out so before it starts (a `return` of anything else refuses it)."""
        probe = Specialiser(self.typed, decl, path, list(layout), self.structs, self)
        probe.probing = entry
        entry.lowering = probe
        key = (id(decl), layout)
        try:
            probe.specialise(symbol)
        finally:
            self.forget_after(key)
        if probe.result_layout is None:
            raise Unsupported(f"`{decl.name}` never returns but through its recursive call")
        entry.lowering = Specialiser(self.typed, decl, path, list(layout), self.structs, self)
        entry.lowering.expected_result = probe.result_layout
        return entry.lowering.specialise(symbol)

    def forget_after(self, key: tuple) -> None:
        """Drop the specialisations lowered after `key`'s (for it: they may call it)."""
        keys = list(self.entries)
        for later in keys[keys.index(key) + 1 :]:
            del self.entries[later]

    def finished(self, root: Entry) -> Specialised:
        done = root.done
        if not self.calls:
            return done
        functions = []
        for entry in self.entries.values():
            function = entry.done.function
            site = ir.Site("E0513", "out of memory for the tensors of a recursive call", entry.lowering.decl.span)
            sites = (*function.sites, site)
            own = (entry.done.workspace, len(sites) - 1)
            functions.append(dataclasses.replace(function, sites=sites, own_workspace=own))
        return Specialised(functions[0], done.argument_slots, done.result, 0, done.slots, tuple(functions[1:]))


# ------------------------------------------------------------------ the lowering


@dataclass
class Returning:
    """Where the `return`s of an inlined function go: the label after the call, and the homes of the
    returned value (made at the first `return` inside control flow)."""

    end: str
    home: object = None


class Specialiser(FunctionLowering):
    def __init__(
        self, typed: Typed, decl: ast.FnDecl, path: str, arguments: list, structs, registry: Registry | None = None
    ) -> None:
        super().__init__(typed, decl, path)
        self.registry = registry if registry is not None else Registry(typed, structs)
        self.active = [id(decl)]  # the functions being lowered here (it, and those inlined into it)
        self.root_path = path
        self.inline_chain: list[tuple[str, Span]] = []  # the inlined calls being lowered: (function, call)
        self.probing: Entry | None = None  # the registry's entry whose result this lowering finds out
        self.expected_result: tuple | None = None  # its result layout, found by a probe
        self.arguments = arguments
        self.structs = structs  # (path, name) -> the interpreter's StructType
        self.buffer_list: list[ir.Buffer] = []
        self.workspace = 0
        self.slot_count = 1
        self.homes: set[str] = set()
        self.result_layout: tuple | None = None
        self.returning: Returning | None = None
        self.exit_label = "exit"
        self.depth = 0
        self.uses: dict[str, int] = {}
        self.assigned: set[str] = set()
        self.constants: dict[tuple[str, str], object] = {}
        self.tapes: list[ir.Tape] = []
        self.frames: list[list[dict]] = []  # the scopes of the callers of the function being inlined
        self.owners: dict[str, tuple[dict, str]] = {}  # home buffer -> (the scope, the variable's name)
        # the i64 parameters' values and what is computed from them: temp name -> the parameters' positions
        self.parameter_temps: dict[str, frozenset[int]] = {}
        self.parameter_variables: dict[str, frozenset[int]] = {}  # variables `let` bound to such a value

    # -------------------------------------------------------------- entry
    def specialise(self, symbol: str | None = None) -> Specialised:
        decl = self.decl  # annotations checked at run time are checked by the interpreter around this body
        params = {}
        for position, (param, argument) in enumerate(zip(decl.params, self.arguments, strict=True)):
            params[param.name] = self.argument(argument, param.name)
            if argument == ("scalar", "i64"):
                self.parameter_temps[params[param.name].operand.name] = frozenset({position})
        argument_slots = self.slot_count
        if self.expected_result is not None:
            self.result_layout = self.taken(self.expected_result)
        self.scopes = [params]
        self.uses, self.assigned = usage(decl.body)
        self.returning = None
        self.block(decl.body)
        if self.label is not None:
            self.write_result(None, decl.span)
            self.finish(ir.Jump(self.exit_label))
        self.start(self.exit_label)
        self.finish(ir.Return(None))
        recursion = ir.Site("E0506", f"recursion too deep in `{decl.name}`", decl.name_span)
        if self.probing is not None:  # a path left at a recursive call may jump to a block never made
            self.blocks = with_every_target(self.blocks)
        blocks = accumulate_in_place(forwarded(computed_once(without_dead_stores(self.blocks))))
        blocks, buffers, workspace = packed(blocks, self.buffer_list)
        result = rebuilt(self.result_layout, {b.name: b for b in buffers})
        function = ir.Function(
            symbol or f"{self.path}::{decl.name}.specialised",
            decl.name,
            (),
            "unit",
            tuple(self.variables),
            blocks,
            tuple(self.sites),
            recursion,
            buffers,
            True,
            tuple(self.tapes),
        )
        return Specialised(function, argument_slots, result, workspace, self.slot_count)

    def predicted_result(self, span: Span, entry: Entry) -> tuple:
        """The result layout from the checked signature, its dimensions bound by the arguments' shapes, for a
        recursive call reached before any `return`: its slots are taken now, and the `return`s fill them."""
        decl = self.decl
        found = [s for s in self.typed.signatures.get(self.root_path, []) if s.name == decl.name]
        unknown = f"what `{decl.name}` returns is not known at its recursive call (at {span})"
        if len(found) != 1:
            raise ResultUnknown(entry, unknown)
        bindings: dict = {}
        for (_, declared), layout in zip(found[0].params, self.arguments, strict=True):
            bind_dimensions(declared, layout, bindings)
        try:
            return self.result_slots(found[0].result, bindings, unknown)
        except Unsupported:
            raise ResultUnknown(entry, unknown) from None

    def taken(self, layout: tuple) -> tuple:
        """A result layout found by a probe, its slots (and result buffers) taken in this lowering."""
        kind = layout[0]
        if kind == "scalar":
            return ("scalar", self.new_slot(), layout[2])
        if kind == "tensor":
            _, _, dtype, shape, _ = layout
            buffer = ir.Buffer(f"result#{len(self.buffer_list)}", dtype, shape, self.new_slot())
            self.buffer_list.append(buffer)
            return ("tensor", buffer.slot, dtype, shape, buffer)
        if kind == "tuple":
            return ("tuple", tuple(self.taken(item) for item in layout[1]))
        if kind == "struct":
            return ("struct", layout[1], tuple(self.taken(item) for item in layout[2]))
        return layout

    def result_slots(self, declared: object, bindings: dict, unknown: str) -> tuple:
        if declared == UNIT:
            return ("unit",)
        if isinstance(declared, TupleType):
            return ("tuple", tuple(self.result_slots(item, bindings, unknown) for item in declared.items))
        if not isinstance(declared, TensorType) or declared.dtype not in DTYPE_NAMES:
            raise Unsupported(unknown)
        if not declared.dims:
            return ("scalar", self.new_slot(), declared.dtype)
        shape = tuple(bindings.get(d, d) for d in declared.dims)
        if not all(isinstance(n, int) for n in shape):
            raise Unsupported(unknown)
        buffer = ir.Buffer(f"result#{len(self.buffer_list)}", declared.dtype, shape, self.new_slot())
        self.buffer_list.append(buffer)
        return ("tensor", buffer.slot, declared.dtype, shape, buffer)

    def argument(self, layout: tuple, name: str) -> object:
        kind = layout[0]
        if kind == "tensor":
            _, dtype, shape = layout
            if dtype is None:
                raise Unsupported(f"`{name}` is a tensor of a dtype the compiler does not handle")
            # every buffer's name ends in its unique number: an argument `t` never meets a temporary `t`
            buffer = ir.Buffer(f"{name}#{len(self.buffer_list)}", dtype, shape, self.slot_count)
            self.slot_count += 1
            self.buffer_list.append(buffer)
            return view(buffer)
        if kind == "scalar":
            if layout[1] is None:
                raise Unsupported(f"`{name}` is a scalar of a dtype the compiler does not handle")
            result = self.temp(name, layout[1])
            self.emit(ir.LoadSlot(result, self.slot_count))
            self.slot_count += 1
            return Value(result)
        if kind == "tuple":
            return tuple(self.argument(item, f"{name}.{k}") for k, item in enumerate(layout[1]))
        if kind == "struct":
            struct_type = self.structs.kind(layout[1])
            values = [self.argument(item, f"{name}.{f}") for f, item in zip(struct_type.fields, layout[2], strict=True)]
            return Struct(struct_type, struct_type.name, struct_type.fields, values)
        if kind == "text":
            return Text(layout[1])
        if kind == "static":  # an integer compiled in (see NeedsStatic)
            return Value(ir.Const(layout[1], "i64"))
        if kind == "function":  # a DL function passed as an argument: its declaration, inlined where called
            function = self.structs.kind(layout[1])
            found = function_declaration(self.typed, function.span)
            if found is None:
                raise Unsupported(f"`{name}` is a function compiled code does not know")
            return Closure(*found)
        raise Unsupported(f"`{name}` is a {layout[1]} value, which compiled code does not take")

    # -------------------------------------------------------------- buffers
    def allocate(self, dtype: str, shape: tuple[int, ...], hint: str = "t") -> ir.Buffer:
        self.workspace = (self.workspace + 63) // 64 * 64
        buffer = ir.Buffer(f"{hint}#{len(self.buffer_list)}", dtype, shape, 0, self.workspace)
        self.workspace += max(math.prod(shape), 1) * ir.ITEM_BYTES[dtype]
        self.buffer_list.append(buffer)
        return buffer

    def materialise(self, tensor: Tensor, hint: str = "t") -> Tensor:
        if isinstance(tensor.tree, ir.Read):
            return tensor
        buffer = self.allocate(tensor.dtype, tensor.shape, hint)
        self.emit(ir.Fill(buffer, tensor.tree))
        return view(buffer)

    def plain(self, tensor: Tensor) -> Tensor:
        """The tensor in a buffer of its own layout (for `reshape` and the host)."""
        if is_plain(tensor):
            return tensor
        buffer = self.allocate(tensor.dtype, tensor.shape)
        self.emit(ir.Fill(buffer, tensor.tree))
        return view(buffer)

    def bind(self, value: object, uses: int, detach: bool = False) -> object:
        """A value given a name: a computed tree used more than once is written to a buffer; views and
        single uses stay trees (a home they read is protected when it is overwritten: `protect`). With
        `detach`, anything reading a home, views included, is copied out of it now."""
        if isinstance(value, ir.Variable):  # a scalar part of another variable's home: its value now
            return self.read_variable(value)
        if isinstance(value, Tensor):
            if detach and reads(value.tree, self.homes):
                return self.copy(value)
            if uses > 1 and not isinstance(value.tree, ir.Read):
                return self.materialise(value)
        if isinstance(value, tuple):
            return tuple(self.bind(item, uses, detach) for item in value)
        if isinstance(value, Struct):
            values = [self.bind(v, uses, detach) for v in value.values]
            return Struct(value.kind, value.name, value.fields, values)
        return value

    # -------------------------------------------------------------- homes (variables assigned in control flow)
    def home(self, value: object, name: str) -> object:
        """A copy of `value` in storage that assignments can overwrite."""
        if isinstance(value, Tensor):
            buffer = self.allocate(value.dtype, value.shape, f"home.{name}")
            self.emit(ir.Fill(buffer, value.tree))
            self.homes.add(buffer.name)
            return view(buffer)
        if isinstance(value, Value):
            variable = self.new_variable(name, value.operand.dtype)
            self.emit(ir.Store(variable, value.operand))
            return variable
        if isinstance(value, (ir.Variable, Text, Closure, Primitive, DType, TapeValue)):
            return value
        if isinstance(value, tuple):
            return tuple(self.home(item, name) for item in value)
        if isinstance(value, Struct):
            return Struct(
                value.kind,
                value.name,
                value.fields,
                [self.home(v, f"{name}.{f}") for v, f in zip(value.values, value.fields, strict=True)],
            )
        raise Unsupported(f"`{name}` holds a value compiled code cannot assign in a loop or `if`")

    def new_variable(self, name: str, dtype: str) -> ir.Variable:
        taken = {v.name for v in self.variables}
        unique, count = name, 1
        while unique in taken:
            unique, count = f"{name}.{count}", count + 1
        variable = ir.Variable(unique, dtype)
        self.variables.append(variable)
        return variable

    def is_home(self, value: object) -> bool:
        if isinstance(value, (ir.Variable, TapeValue)):
            return True
        if isinstance(value, Tensor):  # the home itself, not a view of it
            tree = value.tree
            return (
                isinstance(tree, ir.Read)
                and tree.buffer.name in self.homes
                and value.shape == tree.buffer.shape
                and tree == ir.Read(tree.buffer, ZERO, contiguous(tree.buffer.shape))
            )
        if isinstance(value, tuple):
            return bool(value) and all(self.is_home(v) for v in value)
        if isinstance(value, Struct):
            return all(self.is_home(v) for v in value.values)
        return False

    def owns(self, scope: dict, name: str, value: object) -> bool:
        """Whether `value` is the home of variable `name` of `scope` (another name may hold a view of a
        home without owning it: `let y = x` takes x's value, not its storage)."""
        if not self.is_home(value):
            return False
        for buffer in home_buffers(value):
            owner = self.owners.get(buffer)
            if owner is None or owner[0] is not scope or owner[1] != name:
                return False
        return True

    def make_homes(self, stmt: ast.Stmt) -> None:
        """Before an `if` or a loop: every variable it assigns gets a home."""
        for name in sorted(assigned_names(stmt)):
            for scope in reversed(self.scopes):
                if name in scope:
                    value = scope[name]
                    if not self.owns(scope, name, value) and not isinstance(value, (Text, Closure, Primitive, DType)):
                        scope[name] = self.home(value, name)
                        for buffer in home_buffers(scope[name]):
                            self.owners[buffer] = (scope, name)
                    else:  # already a home: what reads it now must not see the writes to come
                        self.protect(home_buffers(value), (scope, name))
                    break

    def protect(self, buffers: set[str], owner: tuple | None) -> None:
        """Before `buffers` (homes) are overwritten: every value bound to a name (in any frame, captured
        by a closure too) that reads them, other than the owner's own, gets a copy of what it reads now."""
        if not buffers:
            return
        for scopes in [*self.frames, self.scopes]:
            for scope in scopes:
                for name, value in list(scope.items()):
                    if owner is not None and scope is owner[0] and name == owner[1]:
                        continue
                    if value_reads(value, buffers):
                        scope[name] = self.detached(value, buffers)

    def detached(self, value: object, buffers: set[str]) -> object:
        if isinstance(value, Tensor):
            return self.copy(value) if reads(value.tree, buffers) else value
        if isinstance(value, tuple):
            return tuple(self.detached(v, buffers) for v in value)
        if isinstance(value, Struct):
            return Struct(value.kind, value.name, value.fields, [self.detached(v, buffers) for v in value.values])
        if isinstance(value, Closure):
            captured = {k: self.detached(v, buffers) for k, v in value.captured.items()}
            return Closure(value.decl, value.path, captured)
        return value

    def store_home(self, home: object, value: object, span: Span, owner: tuple | None = None) -> None:
        """Write `value` into `home` (same structure, dtypes and shapes); `owner` is the (scope, name) of
        the variable whose home it is."""
        if isinstance(home, ir.Variable):
            value = self.scalar_of(value, span)
            self.emit(ir.Store(home, self.convert(value, home.dtype, "the assigned value")))
        elif isinstance(home, Tensor):
            if not isinstance(value, Tensor) or value.shape != home.shape or value.dtype != home.dtype:
                value = self.tensor_like(value, home, span)
            target = home.tree.buffer
            tree = value.tree
            if not reads_only_in_place(tree, target):
                tree = self.materialise(value).tree
            self.protect({target.name}, owner)
            if tree != home.tree:
                self.emit(ir.Fill(target, tree))
        elif isinstance(home, tuple) and isinstance(value, tuple) and len(home) == len(value):
            for h, v in zip(home, value, strict=True):
                self.store_home(h, v, span, owner)
        elif isinstance(home, Struct) and isinstance(value, Struct) and home.fields == value.fields:
            for h, v in zip(home.values, value.values, strict=True):
                self.store_home(h, v, span, owner)
        elif isinstance(home, TapeValue) and isinstance(value, TapeValue) and value.tape == home.tape:
            value.live, home.live = False, True  # the variable holds the tape as it now is
        elif home != value:
            raise Unsupported(f"an assignment changes the structure of a variable (at {span})")

    def tensor_like(self, value: object, home: Tensor, span: Span) -> Tensor:
        if isinstance(value, Value):
            operand = self.convert(value, home.dtype, "the assigned value") if value.weak is not None else value.operand
            value = Tensor(operand.dtype, (), ir.Splat(operand))
        if not isinstance(value, Tensor) or value.dtype != home.dtype:
            raise Unsupported(f"an assignment changes a tensor's dtype (at {span})")
        if value.shape != home.shape:
            raise Unsupported(
                f"an assignment changes a tensor's shape from {list(home.shape)} to {list(value.shape)} (at {span})"
            )
        return value

    # -------------------------------------------------------------- statements
    def statement(self, stmt: ast.Stmt) -> None:
        if self.probing is None:
            return self.lowered_statement(stmt)
        try:
            return self.lowered_statement(stmt)
        except ResultUnknown as unknown:  # probing: a path through the recursive call is not followed
            if unknown.entry is not self.probing or self.depth:  # (a statement of the function itself)
                raise
            self.finish(ir.Return(None))
            return None

    def lowered_statement(self, stmt: ast.Stmt) -> None:
        if self.label is None:
            return  # unreachable code after a return, break or continue
        match stmt:
            case ast.Let(pattern=pattern, value=value):
                if id(stmt) in self.typed.runtime_checks:
                    raise Unsupported(f"a `let` is checked at run time (at {stmt.span})")
                self.let(pattern, self.evaluate(value), stmt.span)
            case ast.Assign(target=target, op=op, value=value):
                self.assignment(target, op, value, stmt.span)
            case ast.ExprStmt(expr=expr):
                self.evaluate(expr, discarded=True)
            case ast.If():
                self.if_statement(stmt)
            case ast.While():
                self.make_homes(stmt)
                self.while_statement(stmt)
            case ast.For(pattern=ast.NamePattern(name=name), iterable=ast.Range() as bounds, body=body):
                self.make_homes(stmt)
                self.for_range(name, bounds, body)
            case ast.For(pattern=ast.NamePattern(name=name), iterable=iterable, body=body):
                self.for_each(name, iterable, body, stmt)
            case ast.Return(value=value):
                returned = self.evaluate(value) if value is not None else None
                self.write_result(returned, stmt.span)
            case ast.Break():
                self.finish(ir.Jump(self.loops[-1][1]))
            case ast.Continue():
                self.finish(ir.Jump(self.loops[-1][0]))
            case ast.FnDecl(name=name):
                self.scopes[-1][name] = self.closure(stmt)
            case _:
                raise Unsupported(f"a statement the compiler does not handle yet (at {stmt.span})")

    def if_statement(self, stmt: ast.If) -> None:
        """An `if` whose condition is known when compiling (a string compared, a constant) is only its
        branch taken; any other is the scalar lowering's two blocks, after homes for what they assign."""
        condition = self.scalar_of(self.evaluate(stmt.cond), stmt.span)
        if condition.operand.dtype != "bool":
            raise Unsupported(f"a condition is {condition.operand.dtype}, not bool (at {stmt.cond.span})")
        if isinstance(condition.operand, ir.Const):
            chosen = stmt.then if condition.operand.value else stmt.orelse
            if isinstance(chosen, ast.If):
                self.if_statement(chosen)
            elif chosen is not None:
                self.block(chosen)
            return
        self.make_homes(stmt)
        self.if_branches(condition.operand, stmt)

    def for_each(self, name: str, iterable: ast.Expr, body: ast.Block, stmt: ast.For) -> None:
        """`for x in xs` over a tensor's first axis: the tensor as it is when the loop starts (a copy if
        the loop may change it), `x` each row in turn (a scalar for a vector)."""
        sequence = self.evaluate(iterable)
        if not isinstance(sequence, Tensor) or not sequence.shape:
            raise Unsupported(f"`for` over something other than a tensor (at {stmt.span})")
        self.make_homes(stmt)
        # written once before the loop; copied if it is storage the loop may overwrite
        sequence = self.copy(sequence) if reads(sequence.tree, self.homes) else self.materialise(sequence)
        counter = self.new_variable(f"{name}.counter", "i64")
        self.emit(ir.Store(counter, ZERO))

        def bind(position: ir.Temp) -> None:
            row = self.view_of(sequence, (ValueIndex(Value(position)),), stmt.span)
            if row.shape:
                self.scopes[-1][name] = row
                return
            element = self.temp(name, row.dtype)
            self.emit(ir.Evaluate(element, row.tree))
            self.let(ast.NamePattern(name), Value(element), stmt.span)

        self.counted_loop(name, counter, lambda: ir.Const(sequence.shape[0], "i64"), body, bind)

    def let(self, pattern: ast.Pattern, value: object, span: Span) -> None:
        match pattern:
            case ast.NamePattern(name=name):
                if isinstance(value, Value) and (name in self.assigned or not isinstance(value.operand, ir.Const)):
                    variable = self.new_variable(name, value.operand.dtype)
                    self.emit(ir.Store(variable, value.operand))
                    positions = self.parameter_temps.get(getattr(value.operand, "name", ""))
                    if positions and name not in self.assigned:  # `let t = n // 2`: still computed from `n`
                        self.parameter_variables[variable.name] = positions
                    self.scopes[-1][name] = variable  # this name's own variable
                    return
                self.scopes[-1][name] = self.bind(settled(value), self.uses.get(name, 0))
            case ast.TuplePattern(items=items):
                if not isinstance(value, tuple) or len(value) != len(items):
                    raise Unsupported(f"a tuple pattern of {len(items)} does not match the value (at {span})")
                for item, part in zip(items, value, strict=True):
                    self.let(item, part, span)

    def assignment(self, target: ast.Expr, op: str, value_expr: ast.Expr, span: Span) -> None:
        value = self.evaluate(value_expr)
        if op != "=":
            value = self.binary_values(op[:-1], self.evaluate(target), value, span)
        self.assign_to(target, value, span)

    def assign_to(self, target: ast.Expr, value: object, span: Span) -> None:
        match target:
            case ast.Name(id=name):
                scope = self.scope_of(name, span)
                current = scope[name]
                if self.owns(scope, name, current):
                    if isinstance(current, (tuple, Struct)) and crossed(current, value):
                        value = self.bind(value, 1, detach=True)  # every part read before any is written
                    self.store_home(current, value, span, (scope, name))
                else:
                    scope[name] = self.bind(value, self.uses.get(name, 0))
            case ast.Field(target=inner, name=name):
                record = self.evaluate(inner)
                if not isinstance(record, Struct):
                    raise Unsupported(f"assigning a field of a value that is not a struct (at {span})")
                position = record.fields.index(name) if name in record.fields else None
                if position is None:
                    raise Unsupported(f"`{record.name}` has no field `{name}` (at {span})")
                root = target_names(inner)
                owner = (self.scope_of(root[0], span), root[0]) if root else None
                if owner is not None and self.owns(*owner, record.values[position]):
                    self.store_home(record.values[position], value, span, owner)
                else:
                    values = list(record.values)
                    values[position] = self.bind(value, 2)
                    self.assign_to(inner, Struct(record.kind, record.name, record.fields, values), span)
            case ast.TupleLiteral(items=items):
                if not isinstance(value, tuple) or len(value) != len(items):
                    raise Unsupported(f"a tuple assignment does not match the value (at {span})")
                value = self.bind(value, 1, detach=True)  # read every part before writing any: `(a, b) = (b, a)`
                for item, part in zip(items, value, strict=True):
                    self.assign_to(item, part, span)
            case ast.Index(target=ast.Name(id=name) as base, indices=indices) as element:  # fails where interpreted
                self.assign_element(name, base, indices, value, element.span)
            case _:
                raise Unsupported(f"an assignment to this target (at {span})")

    def assign_element(self, name: str, base: ast.Name, indices: tuple, value: object, span: Span) -> None:
        """`x[i, a:b] = v` (and `+=`): the selected elements of `x`'s storage are overwritten; `x` is first
        given storage of its own unless it is a home (a value is never changed where another name sees it)."""
        scope = self.scope_of(name, span)
        current = scope[name]
        if not isinstance(current, Tensor):
            raise Unsupported(f"assigning an element of a value that is not a tensor (at {span})")
        if not self.owns(scope, name, current):  # storage of its own, which later assignments write
            current = self.copy(current)
            scope[name] = current
            self.homes.add(current.tree.buffer.name)
            self.owners[current.tree.buffer.name] = (scope, name)
        else:
            self.protect({current.tree.buffer.name}, (scope, name))
        region = self.view_of(current, indices, span)
        if isinstance(value, ir.Variable):
            value = self.read_variable(value)
        if isinstance(value, Value):
            value = Tensor(current.dtype, (), ir.Splat(self.promote(value, current.dtype, span)))
        if not isinstance(value, Tensor) or value.dtype != current.dtype:
            raise Unsupported(f"an element assignment of another dtype (at {span})")
        tree = broadcast(value, region.shape, span).tree
        target = current.tree.buffer
        if reads(tree, {target.name}) and not same_view_only(tree, region.tree):
            tree = self.materialise(Tensor(value.dtype, region.shape, tree)).tree
        self.emit(ir.Fill(target, tree, region.tree, region.shape))

    def scope_of(self, name: str, span: Span) -> dict:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope
        raise Unsupported(f"it assigns `{name}`, which is not a local variable (at {span})")

    def write_result(self, value: object, span: Span) -> None:
        """A `return`: into the caller's homes for an inlined function, into the host's results for the
        specialised function itself."""
        if self.returning is not None:
            returning = self.returning
            if returning.home is None and value is not None:
                returning.home = self.home(value, "returned")
            if value is not None:
                self.store_home(returning.home, value, span)
            self.finish(ir.Jump(returning.end))
            return
        layout = self.result_of(value, span, self.result_layout)
        if self.result_layout is None:
            self.result_layout = layout
        self.finish(ir.Jump(self.exit_label))

    def result_of(self, value: object, span: Span, known: tuple | None) -> tuple:
        """Store a returned value where the host finds it; `known` is the layout of an earlier `return`."""
        if value is None:
            if known not in (None, ("unit",)):
                self.undecided(f"returns of different kinds (at {span})")
            return ("unit",)
        if isinstance(value, ir.Variable):
            value = self.read_variable(value)
        if isinstance(value, Value):
            operand = value.operand
            slot = known[1] if known is not None and known[0] == "scalar" else self.new_slot()
            if known is not None and known != ("scalar", slot, operand.dtype):
                self.undecided(f"returns of different types (at {span})")
            self.emit(ir.StoreSlot(slot, operand))
            return ("scalar", slot, operand.dtype)
        if isinstance(value, Tensor):
            if known is not None:
                if known[0] != "tensor" or known[2:4] != (value.dtype, value.shape):
                    self.undecided(f"returns of different types or shapes (at {span})")
                buffer = known[4]
            else:
                buffer = ir.Buffer(f"result#{len(self.buffer_list)}", value.dtype, value.shape, self.new_slot())
                self.buffer_list.append(buffer)
            self.emit(ir.Fill(buffer, value.tree))
            return ("tensor", buffer.slot, value.dtype, value.shape, buffer)
        if isinstance(value, tuple):
            if known is not None and (known[0] != "tuple" or len(known[1]) != len(value)):
                self.undecided(f"returns of different types (at {span})")
            parts = known[1] if known is not None else (None,) * len(value)
            return ("tuple", tuple(self.result_of(v, span, k) for v, k in zip(value, parts, strict=True)))
        if isinstance(value, Text):  # known when compiled: the host hands the string back
            if known is not None and known != ("text", value.value):
                self.undecided(f"returns of different strings (at {span})")
            return ("text", value.value)
        if isinstance(value, Struct):
            kind = value.kind
            if known is not None and (known[0] != "struct" or known[1] is not kind):
                self.undecided(f"returns of different types (at {span})")
            parts = known[2] if known is not None else (None,) * len(value.values)
            return ("struct", kind, tuple(self.result_of(v, span, k) for v, k in zip(value.values, parts, strict=True)))
        raise Unsupported(f"it returns a value compiled code cannot hand back (at {span})")

    def new_slot(self) -> int:
        self.slot_count += 1
        return self.slot_count - 1

    # -------------------------------------------------------------- expressions
    def expression(self, expr: ast.Expr) -> Value:
        """A scalar (for the scalar lowering's conditions, bounds and operators)."""
        return self.scalar_of(self.evaluate(expr), expr.span)

    def scalar_of(self, value: object, span: Span) -> Value:
        if isinstance(value, ir.Variable):
            return self.read_variable(value)
        if isinstance(value, Value):
            return value
        raise Unsupported(f"a scalar is expected here, found a {type(value).__name__.lower()} (at {span})")

    def read_variable(self, variable: ir.Variable) -> Value:
        result = self.temp(variable.name, variable.dtype)
        self.emit(ir.Load(result, variable))
        if variable.name in self.parameter_variables:
            self.parameter_temps[result.name] = self.parameter_variables[variable.name]
        return Value(result)

    def evaluate(self, expr: ast.Expr, discarded: bool = False) -> object:
        match expr:
            case ast.IntLiteral() | ast.FloatLiteral():
                return self.literal(expr)
            case ast.BoolLiteral(value=value):
                return Value(ir.Const(value, "bool"))
            case ast.StringLiteral(value=value):
                return Text(value)
            case ast.Name(id=name):
                return self.name(name, expr)
            case ast.Unary(op="-", operand=operand):
                value = self.evaluate(operand)
                if isinstance(value, Tensor):
                    return Tensor(value.dtype, value.shape, ir.Apply("neg", value.dtype, (value.tree,)))
                return self.negate(self.scalar_of(value, expr.span), expr.span)
            case ast.Unary(op="not", operand=operand):
                value = self.evaluate(operand)
                if isinstance(value, Tensor) and value.dtype == "bool":
                    return Tensor("bool", value.shape, ir.Apply("not", "bool", (value.tree,)))
                return self.logical_not(self.scalar_of(value, expr.span), expr.span)
            case ast.Binary(op="and" | "or"):
                return self.short_circuit(expr)
            case ast.Binary(op=op, lhs=lhs, rhs=rhs):
                return self.binary_values(op, self.evaluate(lhs), self.evaluate(rhs), expr.span)
            case ast.Call():
                return self.call_expression(expr, discarded)
            case ast.Field(target=target, name=name):
                return self.field(expr, target, name)
            case ast.Index(target=target, indices=indices):
                return self.index(self.evaluate(target), indices, expr.span)
            case ast.TupleLiteral(items=items):
                return tuple(self.evaluate(item) for item in items)
            case ast.StructLiteral():
                return self.struct_literal(expr)
            case ast.Lambda():
                return self.closure(expr)
            case ast.TensorLiteral():
                return self.tensor_literal(expr)
        raise Unsupported(f"{type(expr).__name__.lower()} expressions (at {expr.span})")

    def name(self, name: str, expr: ast.Name) -> object:
        for scope in reversed(self.scopes):
            if name in scope:
                value = scope[name]
                return self.read_variable(value) if isinstance(value, ir.Variable) else value
        if name in DTYPE_NAMES:
            return DType(name)
        return self.global_value(expr)

    def global_value(self, expr: ast.Expr) -> object:
        """A module-level name: a function, a built-in or a constant."""
        kind = self.typed.types.get(id(expr))
        if isinstance(kind, PrimitiveRef):
            return Primitive(kind.name)
        if isinstance(kind, FunctionRef):
            target = self.typed.functions.get(kind.key)
            if target is not None and isinstance(target[0], ast.FnDecl):
                return Closure(target[0], target[1])
        if isinstance(expr, ast.Name) and kind is None:  # a node the checker recorded no type for
            for decl in self.typed.program.modules[self.path].decls:
                if isinstance(decl, ast.FnDecl) and decl.name == expr.id:
                    return Closure(decl, self.path)
            if expr.id in BY_NAME and not any(
                isinstance(d, ast.Const) and d.name == expr.id for d in self.typed.program.modules[self.path].decls
            ):
                return Primitive(expr.id)
        if isinstance(expr, ast.Name):
            return self.constant(self.path, expr.id, expr.span)
        if isinstance(expr, ast.Field) and isinstance(expr.target, ast.Name):
            module = self.module_path(expr.target.id)
            if module is not None:
                return self.constant(module, expr.name, expr.span)
        raise Unsupported(f"a name compiled code does not know (at {expr.span})")

    def module_path(self, alias: str) -> str | None:
        for name, target in self.typed.program.imports.get(self.path, []):
            if name == alias:
                return target
        return None

    def constant(self, path: str, name: str, span: Span) -> object:
        """A module constant: its expression evaluated in its module (other constants, literals,
        operators); only a number, bool or string known now is taken."""
        key = (path, name)
        if key not in self.constants:
            decl = next(
                (d for d in self.typed.program.modules[path].decls if isinstance(d, ast.Const) and d.name == name),
                None,
            )
            if decl is None:
                raise Unsupported(f"`{name}` is not a local variable or a constant (at {span})")
            saved = (self.scopes, self.path)
            self.scopes, self.path = [{}], path
            try:
                value = self.evaluate(decl.value)
            finally:
                self.scopes, self.path = saved
            if not (isinstance(value, Text) or (isinstance(value, Value) and isinstance(value.operand, ir.Const))):
                raise Unsupported(f"constant `{name}` is not a number, bool or string known before running (at {span})")
            self.constants[key] = settled(value)
        return self.constants[key]

    def field(self, expr: ast.Field, target: ast.Expr, name: str) -> object:
        local = isinstance(target, ast.Name) and any(target.id in scope for scope in self.scopes)
        if isinstance(target, ast.Name) and not local and self.module_path(target.id) is not None:
            return self.global_value(expr)
        record = self.evaluate(target)
        if not isinstance(record, Struct):
            raise Unsupported(f"`.{name}` of a value that is not a struct (at {expr.span})")
        value = record.field(name, expr.span)
        return self.read_variable(value) if isinstance(value, ir.Variable) else value

    def struct_literal(self, expr: ast.StructLiteral) -> Struct:
        if isinstance(expr.type, ast.Name):
            path, name = self.path, expr.type.id
        elif isinstance(expr.type, ast.Field) and isinstance(expr.type.target, ast.Name):
            path, name = self.module_path(expr.type.target.id), expr.type.name
        else:
            raise Unsupported(f"a struct literal of this type (at {expr.span})")
        decl = next(
            (
                d
                for d in (self.typed.program.modules[path].decls if path in self.typed.program.modules else ())
                if isinstance(d, ast.StructDecl) and d.name == name
            ),
            None,
        )
        if decl is None:
            raise Unsupported(f"struct `{name}` not found (at {expr.span})")
        fields = tuple(f.name for f in decl.fields)
        given = {init.name: self.evaluate(init.value) for init in expr.fields}
        if set(given) != set(fields):
            raise Unsupported(f"a struct literal without every field (at {expr.span})")
        kind = self.structs.declared(path, name)
        return Struct(kind, name, fields, [self.bind(given[f], 2) for f in fields])

    def closure(self, decl: ast.Lambda | ast.FnDecl) -> Closure:
        """A lambda or local function: it captures the current values of the names it uses."""
        captured = {}
        for name in sorted(free_names(decl)):
            for scope in reversed(self.scopes):
                if name in scope:
                    value = scope[name]
                    if isinstance(value, ir.Variable):
                        value = self.read_variable(value)
                    elif self.is_home(value) and not isinstance(value, ir.Variable):
                        value = self.copy(value)
                    captured[name] = value
                    break
        return Closure(decl, self.path, captured)

    def copy(self, value: object) -> object:
        if isinstance(value, Tensor):
            buffer = self.allocate(value.dtype, value.shape)
            self.emit(ir.Fill(buffer, value.tree))
            return view(buffer)
        if isinstance(value, ir.Variable):
            return self.read_variable(value)
        if isinstance(value, tuple):
            return tuple(self.copy(v) for v in value)
        if isinstance(value, Struct):
            return Struct(value.kind, value.name, value.fields, [self.copy(v) for v in value.values])
        return value

    def tensor_literal(self, expr: ast.TensorLiteral) -> Tensor:
        """`[a, b, c]` of scalars (a literal's dtype rules: unsuffixed floats f32, integers i64)."""
        values = [self.evaluate(item) for item in expr.items]
        if values and all(isinstance(v, Tensor) for v in values):  # rows: stacked
            from dl.codegen.primitives import joined

            return joined(self, values, 0, True, expr.span)
        if not values or not all(isinstance(v, (Value, ir.Variable)) for v in values):
            raise Unsupported(f"a tensor literal of this (at {expr.span})")
        values = [self.scalar_of(v, expr.span) for v in values]
        strong = {v.operand.dtype for v in values if v.weak is None}
        if len(strong) > 1:
            raise Unsupported(f"a tensor literal mixing dtypes (at {expr.span})")
        dtype = strong.pop() if strong else ("f32" if any(isinstance(v.weak, float) for v in values) else "i64")
        if dtype == "i64" and any(isinstance(v.weak, float) for v in values):
            raise Unsupported(f"a tensor literal mixing integers and floats (at {expr.span})")
        buffer = self.allocate(dtype, (len(values),))
        # one loop writing each element: element k is `select(i == k, value_k, ...)`
        tree: object = ir.Splat(self.convert(values[-1], dtype, "an element"))
        for k in range(len(values) - 2, -1, -1):
            condition = ir.Apply("eq", "bool", (ir.Index(0), ir.Splat(ir.Const(k, "i64"))))
            tree = ir.Apply("select", dtype, (condition, ir.Splat(self.convert(values[k], dtype, "an element")), tree))
        self.emit(ir.Fill(buffer, tree))
        return view(buffer)

    # -------------------------------------------------------------- operators
    def binary_values(self, op: str, left: object, right: object, span: Span) -> object:
        if isinstance(left, ir.Variable):
            left = self.read_variable(left)
        if isinstance(right, ir.Variable):
            right = self.read_variable(right)
        if op == "@":
            return self.matmul(left, right, span)
        if isinstance(left, Text) and isinstance(right, Text) and op in ("==", "!="):
            return Value(ir.Const((left.value == right.value) == (op == "=="), "bool"))
        if isinstance(left, Value) and isinstance(right, Value):
            return self.binary(op, left, right, span)
        if isinstance(left, (Struct, tuple)) or isinstance(right, (Struct, tuple)):
            raise Unsupported(f"`{op}` of structs or tuples (at {span})")
        return self.elementwise(op, [left, right], span)

    def binary(self, op: str, left: Value, right: Value, span: Span) -> Value:
        folded = integers_folded(op, left, right)
        if folded is not None:
            return folded
        result = super().binary(op, left, right, span)
        positions = frozenset().union(
            *(self.parameter_temps.get(v.operand.name, ()) for v in (left, right) if isinstance(v.operand, ir.Temp))
        )
        if positions and result.operand.dtype == "i64":  # computed from integer parameters (`n // 2`)
            self.parameter_temps[result.operand.name] = positions
        return result

    def elementwise(self, op: str, values: list, span: Span, dtype: str | None = None) -> Tensor:
        """An elementwise operation of tensors and scalars: broadcast shapes, one dtype (the operands meet as
        `lower.promoted_dtype` says: weak literals and i64 scalars adapt to a float tensor, as numpy's Python
        scalars do, an i32 widens); `dtype` where only literals meet (`where(c, 1.0, 0.0)`)."""
        tensors = [v for v in values if isinstance(v, Tensor)]
        if not tensors:
            raise Unsupported(f"`{op}` without a tensor (at {span})")
        operands = values[1:] if op == "select" else values
        common = self.common_dtype_of(op, operands, dtype, span)
        converted = sorted({v.dtype for v in operands if isinstance(v, Tensor) and v.dtype != common})
        if any((source, common) not in TENSOR_PROMOTIONS for source in converted):
            raise Unsupported(f"`{op}` of {' and '.join([*converted, common])} tensors (at {span})")
        shape: tuple[int, ...] = ()
        for t in tensors:
            shape = broadcast_shape(shape, t.shape, span)
        trees = []
        for k, v in enumerate(values):
            if isinstance(v, Tensor):
                tree = broadcast(v, shape, span).tree
                if v.dtype != common and not (op == "select" and k == 0):
                    tree = ir.Apply("convert", common, (tree,))
                trees.append(tree)
            elif isinstance(v, Value):
                wanted = "bool" if op == "select" and k == 0 else common
                trees.append(ir.Splat(self.promote(v, wanted, span)))
            else:
                raise Unsupported(f"`{op}` of a {type(v).__name__.lower()} (at {span})")
        if op in COMPARE_NAMES:
            return Tensor("bool", shape, ir.Apply(COMPARE_NAMES[op], "bool", tuple(trees)))
        name = ARITHMETIC.get(op, op)
        if name in ("div", "pow") and common not in FLOATS:
            raise Unsupported(f"`{op}` on {common} tensors (at {span})")
        if name in ("floordiv", "mod") and common in ir.INTEGER_DTYPES:
            self.nonzero_divisor(trees[1], shape, op, span)
        if name in ("add", "sub", "mul", "div", "pow", "neg") and common == "bool":
            raise Unsupported(f"`{op}` on bool tensors (at {span})")
        if name == "add":  # `zeros_like(x) + v` (derivative code's zeroed adjoints): `v` itself
            for zero, other in ((0, 1), (1, 0)):
                kept = values[other]
                same = isinstance(kept, Tensor) and (kept.shape, kept.dtype) == (shape, common)
                if same and adds_nothing(trees[zero], common):
                    return kept
        return Tensor(common, shape, ir.Apply(name, common, tuple(trees)))

    def nonzero_divisor(self, divisor: object, shape: tuple[int, ...], op: str, span: Span) -> None:
        """Integer `//` and `%` fail on a zero divisor anywhere (E0510, as interpreted), before computing."""
        from dl.codegen.primitives import reduce

        if not math.prod(shape):
            return
        nonzero = ir.Apply("convert", "i64", (ir.Apply("ne", "bool", (divisor, ir.Splat(ZERO))),))
        every = reduce(self, Tensor("i64", shape, nonzero), "min", tuple(range(len(shape))), False, span, "i64")
        smallest = self.temp("divisor.nonzero", "i64")
        self.emit(ir.Evaluate(smallest, every.tree))
        fine = self.temp("divisor.fine", "bool")
        self.emit(ir.Compare(fine, "==", smallest, ir.Const(1, "i64")))
        self.emit(ir.Check(fine, self.site("E0510", f"integer division by zero in `{op}`", span)))

    def common_dtype_of(self, op: str, operands: list, dtype: str | None, span: Span) -> str:
        """The dtype the operands of an elementwise operation meet in (`lower.promoted_dtype`, folded)."""
        kinds = [(v.dtype, False) for v in operands if isinstance(v, Tensor)]
        kinds += [(v.operand.dtype, v.weak is not None) for v in operands if isinstance(v, Value)]
        if all(weak for _, weak in kinds):
            if dtype is None:
                raise Unsupported(f"`{op}` mixes literals only (at {span})")
            return dtype
        common, weak = kinds[0]
        for other, other_weak in kinds[1:]:
            if "bool" in (common, other) and common != other and (weak or other_weak):
                raise Unsupported(f"`{op}` of a number literal and a bool (at {span})")
            common, weak = promoted_dtype(common, weak, other, other_weak), weak and other_weak
        return common

    # -------------------------------------------------------------- indexing
    def index(self, value: object, indices: tuple, span: Span) -> object:
        if isinstance(value, tuple):
            if len(indices) != 1:
                raise Unsupported(f"a tuple indexed by several indices (at {span})")
            position = self.static_int(self.evaluate(indices[0]), span)
            if not -len(value) <= position < len(value):
                raise Unsupported(f"tuple index {position} out of range (at {span})")
            item = value[position]
            return self.read_variable(item) if isinstance(item, ir.Variable) else item
        if not isinstance(value, Tensor):
            raise Unsupported(f"indexing a {type(value).__name__.lower()} (at {span})")
        if len(indices) == 1 and not isinstance(indices[0], ast.Slice):
            chosen = self.evaluate(indices[0])
            chosen = as_index(self, chosen)
            if isinstance(chosen, Tensor):  # x[[2, 0, 2]]: rows picked by a tensor of indices
                if chosen.dtype != "i64":
                    raise Unsupported(f"indexing by a {chosen.dtype} tensor (at {span})")
                from dl.codegen.primitives import gathered

                return gathered(self, value, chosen, 0, span, index_error=True)
            indices = (ValueIndex(chosen),)
        result = self.view_of(value, indices, span)
        if not result.shape:
            scalar = self.temp("element", result.dtype)
            self.emit(ir.Evaluate(scalar, result.tree))
            return Value(scalar)
        return result

    def view_of(self, value: Tensor, indices: tuple, span: Span) -> Tensor:
        """The elements `value[indices]` select (integers and slices without steps), as a view."""
        if len(indices) > len(value.shape):
            raise Unsupported(f"too many indices (at {span})")
        tensor = value if isinstance(value.tree, ir.Read) else self.materialise(value)
        read = tensor.tree
        offset: ir.Operand = read.offset
        shape, strides = [], []
        for axis, index in enumerate(indices):
            n, stride = tensor.shape[axis], read.strides[axis]
            if isinstance(index, ast.Slice):
                bounds = [
                    None if part is None else self.static_int(self.evaluate(part), span)
                    for part in (index.start, index.stop, index.step)
                ]
                if bounds[2] == 0:
                    raise Unsupported(f"a slice step of 0 (at {span})")
                picked = range(n)[slice(*bounds)]
                offset = self.add_offset(offset, ir.Const((picked.start if picked else 0) * stride, "i64"))
                shape.append(len(picked))
                strides.append(stride * picked.step)
                continue
            position = self.scalar_of(index.value if isinstance(index, ValueIndex) else self.evaluate(index), span)
            position = as_index(self, position)
            if position.operand.dtype != "i64":
                raise Unsupported(f"an index that is not an i64 (at {span})")
            offset = self.add_offset(offset, self.scaled(self.checked_index(position.operand, n, axis, span), stride))
        shape.extend(tensor.shape[len(indices) :])
        strides.extend(read.strides[len(indices) :])
        return Tensor(tensor.dtype, tuple(shape), ir.Read(read.buffer, offset, tuple(strides)))

    def checked_index(self, index: ir.Operand, size: int, axis: int, span: Span) -> ir.Operand:
        """An index in 0..size (negative ones count from the end), or E0501 as the interpreter reports it."""
        if isinstance(index, ir.Const):
            if not -size <= index.value < size:
                raise Unsupported(f"index {index.value} out of range (at {span})")
            return ir.Const(index.value % size, "i64")
        negative, wrapped = self.temp("negative", "bool"), self.temp("wrapped", "i64")
        self.emit(ir.Compare(negative, "<", index, ZERO))
        variable = self.new_variable("index", "i64")
        self.emit(ir.Store(variable, index))
        then, end = self.fresh_label("index.wrap"), self.fresh_label("index.wrapped")
        self.finish(ir.Branch(negative, then, end))
        self.start(then)
        moved = self.temp("moved", "i64")
        self.emit(ir.BinaryOp(moved, "add", index, ir.Const(size, "i64")))
        self.emit(ir.Store(variable, moved))
        self.finish(ir.Jump(end))
        self.start(end)
        self.emit(ir.Load(wrapped, variable))
        low, high = self.temp("low", "bool"), self.temp("high", "bool")
        self.emit(ir.Compare(low, ">=", wrapped, ZERO))
        self.emit(ir.Compare(high, "<", wrapped, ir.Const(size, "i64")))
        message = f"index {{value}} is out of bounds for axis {axis} with size {size}"
        site = self.site("E0501", message, span, "i64")
        self.emit(ir.Check(low, site, index))
        self.emit(ir.Check(high, site, index))
        return wrapped

    def add_offset(self, offset: ir.Operand, more: ir.Operand) -> ir.Operand:
        if isinstance(offset, ir.Const) and isinstance(more, ir.Const):
            return ir.Const(offset.value + more.value, "i64")
        result = self.temp("offset", "i64")
        self.emit(ir.BinaryOp(result, "add", offset, more))
        return result

    def scaled(self, index: ir.Operand, stride: int) -> ir.Operand:
        if isinstance(index, ir.Const):
            return ir.Const(index.value * stride, "i64")
        if stride == 1:
            return index
        result = self.temp("scaled", "i64")
        self.emit(ir.BinaryOp(result, "mul", index, ir.Const(stride, "i64")))
        return result

    def static_int(self, value: object, span: Span, what: str = "an integer") -> int:
        if isinstance(value, Value) and isinstance(value.operand, ir.Const) and value.operand.dtype == "i64":
            return int(value.operand.value)
        message = f"{what} known only at run time where compiled code needs a constant (at {span})"
        if isinstance(value, Value) and isinstance(value.operand, ir.Temp):
            positions = self.parameter_temps.get(value.operand.name)
            if positions:
                raise NeedsStatic(min(positions), message)
        raise Unsupported(message)

    def undecided(self, message: str) -> None:
        """Returns of different types or shapes: compiled per value of an integer parameter (the first one
        still known only at run time), its branches may be decided; else refused."""
        positions = frozenset().union(*self.parameter_temps.values())
        if positions:
            raise NeedsStatic(min(positions), message)
        raise Unsupported(message)

    # -------------------------------------------------------------- calls
    def call_expression(self, expr: ast.Call, discarded: bool) -> object:
        callee = self.evaluate(expr.func) if not isinstance(expr.func, ast.Name) else self.callee(expr.func)
        args = [self.evaluate(arg) for arg in expr.args]
        keywords = {k.name: self.evaluate(k.value) for k in expr.keywords}
        if isinstance(callee, Primitive):
            from dl.codegen.primitives import call_primitive

            return call_primitive(self, callee.name, args, keywords, expr.span, discarded)
        if isinstance(callee, Closure):
            return self.inline(callee, args, keywords, expr.span)
        raise Unsupported(f"a call of something compiled code cannot call (at {expr.span})")

    def callee(self, name: ast.Name) -> object:
        for scope in reversed(self.scopes):
            if name.id in scope:
                return scope[name.id]
        return self.global_value(name)

    def site(self, code: str, message: str, span: Span, shows: str | None = None) -> int:
        """A site, with the inlined calls it lies in (for the call stack of its diagnostic)."""
        self.sites.append(ir.Site(code, message, span, shows, None, tuple(self.inline_chain)))
        return len(self.sites) - 1

    def inline(self, closure: Closure, args: list, keywords: dict, span: Span, called_at: Span | None = None) -> object:
        """The callee's body, lowered here with its parameters bound to the arguments; a recursive call (or
        one nested too deeply to inline) calls a specialisation of the callee for real instead. `called_at`
        is the span the interpreter's call stack shows for the call, if not `span` (a primitive's call of a
        function value: the function's own)."""
        decl = closure.decl
        separate = isinstance(decl, ast.FnDecl) and not closure.captured
        if separate and (id(decl) in self.active or self.depth >= INLINE_DEPTH):
            return self.call_separately(closure, self.argument_values(closure, args, keywords, span), span)
        if self.depth >= INLINE_DEPTH:
            raise Unsupported(f"calls nest deeper than {INLINE_DEPTH} (at {span})")
        names = [p.name for p in decl.params]
        values = self.argument_values(closure, args, keywords, span)
        saved = (self.scopes, self.loops, self.returning, self.path, self.uses, self.assigned)
        self.path = closure.path
        self.uses, self.assigned = usage(decl.body)
        # (the caller's variables are safe: storage belongs to its own variable, see `owns`)
        bound = {name: self.bind(value, self.uses.get(name, 0)) for name, value in zip(names, values, strict=True)}
        self.scopes = [dict(closure.captured), bound]
        self.loops = []
        self.depth += 1
        self.frames.append(saved[0])
        self.active.append(id(decl))
        shown = decl.name if isinstance(decl, ast.FnDecl) else f"fn({', '.join(names)})"
        self.inline_chain.append((shown, called_at or span))
        check = self.typed.checked_calls.get(id(decl))
        try:
            if check is not None:
                bindings: dict[str, int] = {}
                for param_check, name in zip(check.params, names, strict=True):
                    if param_check is not None:
                        annotation_fits(bound[name], param_check.type, bindings, span)
                result = self.inlined_body(decl)
                if check.result is not None:
                    annotation_fits(result, check.result.type, bindings, span)
                return result
            return self.inlined_body(decl)
        finally:
            self.depth -= 1
            self.frames.pop()
            self.active.pop()
            self.inline_chain.pop()
            self.scopes, self.loops, self.returning, self.path, self.uses, self.assigned = saved

    def argument_values(self, closure: Closure, args: list, keywords: dict, span: Span) -> list:
        """The value of each parameter at a call: an argument, a keyword, or the default (evaluated in the
        callee's module; a value at run time, so a literal default keeps its dtype)."""
        decl = closure.decl
        names = [p.name for p in decl.params]
        if len(args) > len(names) or any(k not in names for k in keywords):
            raise Unsupported(f"a call that does not bind (at {span})")
        values = []
        for k, param in enumerate(decl.params):
            if k < len(args) or param.name in keywords:
                value = args[k] if k < len(args) else keywords[param.name]
                value = settled(value)  # an f32 or i64, as the interpreter binds it (and the checker types it)
            elif param.default is not None:
                saved = (self.scopes, self.path)
                self.scopes, self.path = [dict(closure.captured)], closure.path
                try:
                    value = self.evaluate(param.default)
                finally:
                    self.scopes, self.path = saved
                if isinstance(value, Value) and value.weak is not None:
                    value = Value(value.operand)
            else:
                raise Unsupported(f"a call leaving `{param.name}` unbound (at {span})")
            values.append(self.read_variable(value) if isinstance(value, ir.Variable) else value)
        return values

    # -------------------------------------------------------------- calls of separate specialisations
    def call_separately(self, closure: Closure, values: list, span: Span) -> object:
        """A real call (`ir.CallSpecialised`) of the callee's specialisation for the arguments' layout. An
        integer the callee needs as a constant is compiled into its layout, if known here."""
        decl = closure.decl
        check = self.typed.checked_calls.get(id(decl))
        bindings: dict[str, int] = {}
        if check is not None:
            for param_check, value in zip(check.params, values, strict=True):
                if param_check is not None:
                    annotation_fits(value, param_check.type, bindings, span)
        values = [self.declared_dtype(param, value) for param, value in zip(decl.params, values, strict=True)]
        statics: set[int] = set()
        while True:
            layout, leaves = [], []
            for position, value in enumerate(values):
                if position in statics:
                    layout.append(("static", self.static_int(value, span)))
                else:
                    layout.append(self.passed(value, leaves, span))
            try:
                entry = self.registry.lower(decl, closure.path, tuple(layout), span)
                break
            except NeedsStatic as need:
                if need.position in statics:
                    raise Unsupported(str(need)) from None
                statics.add(need.position)
        result_layout, slots = entry.signature(span)
        results: list = []
        result = self.received(result_layout, results, decl.name)
        inlined = tuple(self.inline_chain)
        self.sites.append(ir.Site("E0506", f"recursion too deep in `{decl.name}`", span, None, decl.name, inlined))
        arguments = tuple(enumerate(leaves, start=1))
        self.emit(ir.CallSpecialised(entry.symbol, arguments, tuple(results), slots, len(self.sites) - 1))
        self.registry.calls = True
        if check is not None and check.result is not None:
            annotation_fits(result, check.result.type, bindings, span)
        return result

    def declared_dtype(self, param: ast.Param, value: object) -> object:
        """An unsuffixed literal given to a parameter annotated with its scalar dtype is of that dtype (the
        interpreter passes it so); to another, it keeps adapting, which a real call cannot do."""
        declared = self.typed.types.get(id(param))
        if not (isinstance(value, Value) and value.weak is not None and param.annotation is not None):
            return value
        if isinstance(declared, TensorType) and not declared.dims and declared.dtype == value.operand.dtype:
            return Value(value.operand)
        return value

    def passed(self, value: object, leaves: list, span: Span) -> tuple:
        """The layout of an argument of a real call; its tensors (contiguous) and scalars go to `leaves`."""
        if isinstance(value, ir.Variable):
            value = self.read_variable(value)
        if isinstance(value, Tensor):
            leaves.append(self.plain(value).tree)
            return ("tensor", value.dtype, value.shape)
        if isinstance(value, Value):
            operand = value.operand
            if value.weak is not None:  # an unsuffixed literal: an int is an i64 (as `flatten` sees it)
                if isinstance(value.weak, float):
                    raise Unsupported(f"an unsuffixed float literal passed to a recursive call (at {span})")
                operand = ir.Const(int(value.weak), "i64")
            leaves.append(operand)
            return ("scalar", operand.dtype)
        if isinstance(value, tuple):
            return ("tuple", tuple(self.passed(item, leaves, span) for item in value))
        if isinstance(value, Struct):
            self.structs.seen[id(value.kind)] = value.kind
            items = tuple(self.passed(item, leaves, span) for item in value.values)
            return ("struct", id(value.kind), items, value.name)
        if isinstance(value, Text):
            return ("text", value.value)
        raise Unsupported(f"a recursive call passing a value compiled code cannot pass (at {span})")

    def received(self, layout: tuple, results: list, name: str) -> object:
        """The value a real call returns, from the callee's result layout: tensors in buffers of this
        function's workspace and scalars in temporaries, each (slot, where) appended to `results`."""
        kind = layout[0]
        if kind == "tensor":
            _, slot, dtype, shape, _ = layout
            buffer = self.allocate(dtype, shape, f"call.{name}")
            results.append((slot, buffer))
            return view(buffer)
        if kind == "scalar":
            temp = self.temp(f"call.{name}", layout[2])
            results.append((layout[1], temp))
            return Value(temp)
        if kind == "tuple":
            return tuple(self.received(item, results, name) for item in layout[1])
        if kind == "struct":
            struct_type = layout[1]
            values = [self.received(item, results, name) for item in layout[2]]
            return Struct(struct_type, struct_type.name, struct_type.fields, values)
        if kind == "text":
            return Text(layout[1])
        return ()

    def inlined_body(self, decl: ast.FnDecl | ast.Lambda) -> object:
        if isinstance(decl.body, ast.Block):
            body = decl.body.body
            if body and isinstance(body[-1], ast.Return) and not any(contains_return(s) for s in body[:-1]):
                self.returning = None
                for stmt in body[:-1]:
                    self.statement(stmt)
                last = body[-1]
                return settled(self.evaluate(last.value)) if last.value is not None else ()
            end = self.fresh_label("inlined.end")
            self.returning = Returning(end)
            self.block(decl.body)
            if self.label is not None:
                self.finish(ir.Jump(end))
            self.start(end)
            home = self.returning.home
            if home is None:
                return ()
            return self.read_home(home)
        return settled(self.evaluate(decl.body))

    def read_home(self, home: object) -> object:
        if isinstance(home, ir.Variable):
            return self.read_variable(home)
        if isinstance(home, tuple):
            return tuple(self.read_home(h) for h in home)
        if isinstance(home, Struct):
            return Struct(home.kind, home.name, home.fields, [self.read_home(h) for h in home.values])
        return home

    def matmul(self, left: object, right: object, span: Span) -> object:
        from dl.codegen.primitives import matmul

        return matmul(self, left, right, span)


# ------------------------------------------------------------------ what a body uses and assigns


INTEGER_FOLDS = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "//": lambda a, b: a // b,
    "%": lambda a, b: a % b,
}
INTEGER_COMPARISONS = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def integers_folded(op: str, left: Value, right: Value) -> Value | None:
    """`op` of two i64 constants (a shape, a length, an integer compiled in) computed now, so that shapes
    derived from them (`x[0:n // 2]`) stay constants and a branch on them is known; None where it must run
    (not both constants, or a failure the run reports: division by zero, overflow)."""
    operands = (left.operand, right.operand)
    if not all(isinstance(o, ir.Const) and o.dtype == "i64" for o in operands):
        return None
    weak = left.weak is not None and right.weak is not None  # two Python ints in the interpreter (`len(x)`)
    if weak and not all(type(w) is int for w in (left.weak, right.weak)):
        return None
    a, b = (int(o.value) for o in operands)
    if op in INTEGER_COMPARISONS:
        return Value(ir.Const(INTEGER_COMPARISONS[op](a, b), "bool"))
    if op not in INTEGER_FOLDS or (op in ("//", "%") and b == 0):
        return None
    result = INTEGER_FOLDS[op](a, b)
    if not -(2**63) <= result < 2**63:
        return None
    return Value(ir.Const(result, "i64"), result if weak else None)


def bind_dimensions(declared: object, layout: tuple, bindings: dict) -> None:
    """Bind the dimension names of a parameter's checked type to the sizes of its argument's layout."""
    if isinstance(declared, TensorType) and layout[0] == "tensor" and len(declared.dims) == len(layout[2]):
        for dimension, size in zip(declared.dims, layout[2], strict=True):
            if isinstance(dimension, DimVar):
                bindings[dimension] = size
    elif isinstance(declared, TupleType) and layout[0] == "tuple" and len(declared.items) == len(layout[1]):
        for item, part in zip(declared.items, layout[1], strict=True):
            bind_dimensions(item, part, bindings)


def usage(body: ast.Block) -> tuple[dict[str, int], set[str]]:
    """How often each name is read (a read inside a loop counts twice) and the names assigned."""
    uses: dict[str, int] = {}
    assigned: set[str] = set()

    def visit(node: object, weight: int) -> None:
        if isinstance(node, ast.Name):
            uses[node.id] = uses.get(node.id, 0) + weight
            return
        if isinstance(node, ast.Assign):
            root = node.target
            while isinstance(root, (ast.Field, ast.Index)):
                root = root.target
            for name in target_names(node.target):
                assigned.add(name)
        if isinstance(node, (ast.While, ast.For)):
            weight = 2
        if isinstance(node, (ast.Lambda, ast.FnDecl)) and node is not body:
            weight = 2
        for child in children(node):
            visit(child, weight)

    visit(body, 1)
    return uses, assigned


def target_names(target: ast.Expr) -> list[str]:
    while isinstance(target, (ast.Field, ast.Index)):
        target = target.target
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.TupleLiteral):
        return [name for item in target.items for name in target_names(item)]
    return []


def assigned_names(stmt: ast.Stmt) -> set[str]:
    names: set[str] = set()

    def visit(node: object) -> None:
        if isinstance(node, ast.Assign):
            names.update(target_names(node.target))
        if isinstance(node, (ast.Lambda, ast.FnDecl)):
            return
        for child in children(node):
            visit(child)

    visit(stmt)
    return names


def contains_return(node: object) -> bool:
    if isinstance(node, ast.Return):
        return True
    if isinstance(node, (ast.Lambda, ast.FnDecl)):
        return False
    return any(contains_return(child) for child in children(node))


def free_names(decl: ast.Lambda | ast.FnDecl) -> set[str]:
    names: set[str] = set()

    def visit(node: object) -> None:
        if isinstance(node, ast.Name):
            names.add(node.id)
        for child in children(node):
            visit(child)

    visit(decl.body)
    for param in decl.params:
        if param.default is not None:
            visit(param.default)
    return names


def children(node: object) -> list:
    """The AST nodes directly inside `node` (in fields, tuples of them, and keyword and field inits)."""
    found = []
    for name in getattr(node, "__dataclass_fields__", ()):
        if name in ("span", "name_span", "annotation", "result"):
            continue
        value = getattr(node, name)
        if isinstance(value, tuple):
            found.extend(v for v in value if hasattr(v, "__dataclass_fields__"))
        elif hasattr(value, "__dataclass_fields__"):
            found.append(value)
    return found


def reduction_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if d in axes else n for d, n in enumerate(shape))
    return tuple(n for d, n in enumerate(shape) if d not in axes)


def annotation_fits(value: object, expected: object, bindings: dict[str, int], span: Span) -> None:
    """Check an annotation the checker left to run time, on the shapes known now (the interpreter's own
    check, given values of the right dtypes and shapes); a mismatch leaves the call to the interpreter,
    which reports it."""
    from dl.interp.conform import conforms

    problem = conforms(stand_in(value), expected, bindings)
    if problem is not None:
        raise Unsupported(f"a call does not match its annotation: {problem} (at {span})")


def stand_in(value: object) -> object:
    """A value of the same dtype and shape as an abstract one (no memory: a broadcast zero)."""
    if isinstance(value, Tensor):
        return np.broadcast_to(np.zeros((), dtype=NUMPY_DTYPES[value.dtype]), value.shape)
    if isinstance(value, Value):
        dtype = value.operand.dtype
        return {"i64": 0, "bool": False}.get(dtype) if dtype in ("i64", "bool") else NUMPY_DTYPES[dtype](0)
    if isinstance(value, tuple):
        return tuple(stand_in(v) for v in value)
    return "a struct or function"


def as_index(lowering: FunctionLowering, value: object) -> object:
    """An i32 index (a scalar or a tensor of them) as the i64 that indexing and `gather` compute with; any
    other value as it is. numpy indexes with either, and the values are the same."""
    if isinstance(value, Tensor) and value.dtype == "i32":
        return Tensor("i64", value.shape, ir.Apply("convert", "i64", (value.tree,)))
    if isinstance(value, Value) and value.weak is None and value.operand.dtype == "i32":
        return Value(lowering.promote(value, "i64", None))
    return value


NUMPY_DTYPES = {"f32": np.float32, "f64": np.float64, "i64": np.int64, "i32": np.int32, "bool": np.bool_}


# ------------------------------------------------------------------ dead stores and accumulating in place

WRITES = (ir.Fill, ir.Reduce, ir.MatMul, ir.ScatterAdd)


def forwarded(blocks: list[ir.Block]) -> list[ir.Block]:
    """A buffer written once by a `Fill` and read once, whole and as laid out, by a later loop of the same
    block over the same shape is not written at all: its tree is computed inside that loop (the lowering
    writes a value bound to a name used twice, or a field of a struct, before it knows how it is used).
    Nothing between may write what the tree reads."""
    writes = write_counts(blocks)
    counts: dict[str, int] = {}
    for block in blocks:
        for instruction in block.instructions:
            count_reads(instruction, counts)
    result = []
    for block in blocks:
        instructions = list(block.instructions)
        for position, producer in enumerate(instructions):
            if not (isinstance(producer, ir.Fill) and producer.view is None and producer.target.slot == 0):
                continue
            if ir.can_fail(producer.tree):  # its index check stays where the interpreter would fail
                continue
            target = producer.target
            if writes.get(target.name) != 1 or counts.get(target.name) != 1:
                continue
            read_by: dict[str, int] = {}
            count_reads(producer.tree, read_by)
            for later in range(position + 1, len(instructions)):
                consumer = instructions[later]
                if consumer is None:
                    continue
                found: dict[str, int] = {}
                count_reads(consumer, found)
                if target.name in found:
                    consumer_writes = written_buffer(consumer)
                    if consumer_writes is not None and consumer_writes.name in read_by:
                        break  # it overwrites what the tree reads as it goes
                    replaced = substituted(consumer, target, producer.tree)
                    if replaced is not None:
                        instructions[later] = replaced
                        instructions[position] = None
                    break
                written = written_buffer(consumer)
                if overwritten(consumer) or (written is not None and written.name in read_by):
                    break
        result.append(ir.Block(block.label, tuple(i for i in instructions if i is not None), block.terminator))
    return result


def computed_once(blocks: list[ir.Block]) -> list[ir.Block]:
    """A loop computing the same tree as an earlier one of its block (nothing between writing what they
    read, each buffer written once) is dropped, and its buffer's readers read the earlier one (inlined
    functions recompute what their callers computed: derivative code's `sigmoid_back(x, d)` recomputes
    `sigmoid(x)`)."""
    writes = write_counts(blocks)
    renamed: dict[str, ir.Buffer] = {}
    result = []
    for block in blocks:
        seen: dict[object, tuple[ir.Buffer, set[str]]] = {}
        kept = []
        for instruction in block.instructions:
            instruction = rebuilt(instruction, renamed) if renamed else instruction
            written = written_buffer(instruction)
            popped = overwritten(instruction)
            if written is not None or popped:  # what it writes is no longer what an earlier tree computed
                names = ({written.name} if written is not None else set()) | popped
                seen = {
                    tree: (target, reads_)
                    for tree, (target, reads_) in seen.items()
                    if not (reads_ | {target.name}) & names
                }
            simple = (
                isinstance(instruction, ir.Fill)
                and instruction.view is None
                and instruction.target.slot == 0
                and writes.get(instruction.target.name) == 1
                and not ir.can_fail(instruction.tree)
            )
            if simple:
                earlier = seen.get(instruction.tree)
                if earlier is not None and earlier[0].shape == instruction.target.shape:
                    renamed[instruction.target.name] = earlier[0]
                    continue
                read_by: dict[str, int] = {}
                count_reads(instruction.tree, read_by)
                seen[instruction.tree] = (instruction.target, set(read_by))
            kept.append(instruction)
        result.append(ir.Block(block.label, tuple(kept), block.terminator))
    if not renamed:
        return result
    return [ir.Block(b.label, tuple(rebuilt(i, renamed) for i in b.instructions), b.terminator) for b in result]


def substituted(consumer: object, target: ir.Buffer, tree: object) -> object | None:
    """`consumer` with its one read of `target` (whole, as laid out, over the consumer's own loop shape)
    replaced by `tree`; None if the read is not like that."""
    whole = ir.Read(target, ZERO, contiguous(target.shape))
    if isinstance(consumer, ir.Fill):
        shape = consumer.shape if consumer.view is not None else consumer.target.shape
        if shape != target.shape or not contains(consumer.tree, whole):
            return None
        return ir.Fill(consumer.target, replace(consumer.tree, whole, tree), consumer.view, consumer.shape)
    if isinstance(consumer, ir.Reduce):
        if consumer.shape != target.shape or not contains(consumer.tree, whole) or ir.costly(tree):
            return None
        return ir.Reduce(
            consumer.target, consumer.op, replace(consumer.tree, whole, tree), consumer.shape, consumer.axes
        )
    return None


def contains(tree: object, node: object) -> bool:
    if tree == node:
        return True
    if isinstance(tree, ir.Apply):
        return any(contains(a, node) for a in tree.args)
    if isinstance(tree, ir.Take):
        return contains(tree.index, node)
    return False


def replace(tree: object, node: object, by: object) -> object:
    if tree == node:
        return by
    if isinstance(tree, ir.Apply):
        args = tuple(replace(a, node, by) for a in tree.args)
        if tree.op == "add" and len(args) == 2:  # zeros forwarded into a sum
            for zero, other in ((0, 1), (1, 0)):
                if adds_nothing(args[zero], tree.dtype) and ir.tree_dtype(args[other]) == tree.dtype:
                    return args[other]
        return ir.Apply(tree.op, tree.dtype, args)
    if isinstance(tree, ir.Take):
        return ir.Take(
            tree.buffer, tree.offset, tree.strides, replace(tree.index, node, by), tree.stride, tree.size, tree.site
        )
    return tree


def with_every_target(blocks: list[ir.Block]) -> list[ir.Block]:
    """`blocks`, plus a block that returns for each label jumped to but not made (a probe's abandoned
    paths: only what the other paths return is learnt from it)."""
    made = {block.label for block in blocks}
    targets = []
    for block in blocks:
        match block.terminator:
            case ir.Jump(target=target):
                targets.append(target)
            case ir.Branch(then=then, otherwise=otherwise):
                targets += [then, otherwise]
    missing = list(dict.fromkeys(t for t in targets if t not in made))
    return [*blocks, *(ir.Block(label, (), ir.Return(None)) for label in missing)]


def without_dead_stores(blocks: list[ir.Block]) -> list[ir.Block]:
    """Drop every loop or product writing a workspace buffer nothing reads (inlining computes whole values
    of which a caller may use only the shape: derivative code's `zeros_like(lstm_cell(...)[0])`), until
    none is left."""
    while True:
        counts: dict[str, int] = {}
        for block in blocks:
            for instruction in block.instructions:
                count_reads(instruction, counts)
        dead = False
        kept_blocks = []
        for block in blocks:
            kept = []
            for instruction in block.instructions:
                written = written_buffer(instruction)
                unread = written is not None and written.slot == 0 and counts.get(written.name, 0) == 0
                if unread and not checks(instruction):
                    dead = True
                    continue
                kept.append(instruction)
            kept_blocks.append(ir.Block(block.label, tuple(kept), block.terminator))
        blocks = kept_blocks
        if not dead:
            return blocks


def checks(instruction: object) -> bool:
    """Whether an instruction can fail (a gather's or a scatter's index check): it is never dropped."""
    if isinstance(instruction, ir.ScatterAdd):
        return True
    return isinstance(instruction, (ir.Fill, ir.Reduce)) and ir.can_fail(instruction.tree)


def write_counts(blocks: list[ir.Block]) -> dict[str, int]:
    """How many instructions write each buffer (a tape's `pop` and a call count as two: their buffers
    are not written once)."""
    writes: dict[str, int] = {}
    for block in blocks:
        for instruction in block.instructions:
            written = written_buffer(instruction)
            if written is not None:
                writes[written.name] = writes.get(written.name, 0) + 1
            for name in overwritten(instruction):
                writes[name] = writes.get(name, 0) + 2
    return writes


def overwritten(instruction: object) -> set[str]:
    """The buffers a tape's `pop` or a real call writes (not loops: the passes leave them alone)."""
    if isinstance(instruction, ir.TapePop):
        return {leaf.name for _, leaf in instruction.leaves if isinstance(leaf, ir.Buffer)}
    if isinstance(instruction, ir.CallSpecialised):
        return {leaf.name for _, leaf in instruction.results if isinstance(leaf, ir.Buffer)}
    return set()


def written_buffer(instruction: object) -> ir.Buffer | None:
    if isinstance(instruction, ir.MatMul):
        return instruction.out
    if isinstance(instruction, WRITES):
        return instruction.target
    return None


def accumulate_in_place(blocks: list[ir.Block]) -> tuple[ir.Block, ...]:
    """`h = h + p` where `p` is a product or a scatter into zeros made for it alone (derivative code adds
    each step's weight gradient `transpose(x) @ d`, each embedding gradient `scatter_add(zeros_like(t), ...)`,
    to the running total): the product accumulates into `h` (gemm with beta = 1), the scatter scatters into
    `h`, and neither `p` nor the addition's loop exists."""
    counts: dict[str, int] = {}
    for block in blocks:
        for instruction in block.instructions:
            count_reads(instruction, counts)
    result = []
    for block in blocks:
        instructions = list(block.instructions)
        for position, instruction in enumerate(instructions):
            total = accumulation(instruction)
            if total is None:
                continue
            home, part = total
            if counts.get(part.name, 0) != 1:
                continue
            producer = producing(instructions, position, part, home)
            if producer is None:
                continue
            start, made = producer
            if isinstance(made, ir.MatMul):
                instructions[start] = ir.MatMul(home, made.a, made.b, made.m, made.n, made.k, True)
            else:
                instructions[start - 1] = None  # the zeros it scattered into
                instructions[start] = ir.ScatterAdd(home, *astuple_tail(made))
            instructions[position] = None
        result.append(ir.Block(block.label, tuple(i for i in instructions if i is not None), block.terminator))
    return tuple(result)


def astuple_tail(scatter: ir.ScatterAdd) -> tuple:
    return (scatter.strides, scatter.index, scatter.stride, scatter.size, scatter.updates, scatter.shape, scatter.site)


def accumulation(instruction: object) -> tuple[ir.Buffer, ir.Buffer] | None:
    """(h, p) for `Fill(h, h + p)` with both read whole, as laid out."""
    if not isinstance(instruction, ir.Fill) or instruction.view is not None:
        return None
    tree, home = instruction.tree, instruction.target
    if not (isinstance(tree, ir.Apply) and tree.op == "add" and len(tree.args) == 2):
        return None
    whole = contiguous(home.shape)
    reads_ = [a for a in tree.args if isinstance(a, ir.Read) and a.offset == ZERO and a.strides == whole]
    if len(reads_) != 2:
        return None
    first, second = (r.buffer for r in reads_)
    if first == home and second != home and second.shape == home.shape and second.dtype == home.dtype:
        return home, second
    if second == home and first != home and first.shape == home.shape and first.dtype == home.dtype:
        return home, first
    return None


def producing(instructions: list, position: int, part: ir.Buffer, home: ir.Buffer):
    """Where `part` was made, by a product or by a scatter into zeros, with nothing between that and
    `position` touching `home` or the product's operands; else None."""
    for start in range(position - 1, -1, -1):
        instruction = instructions[start]
        if instruction is None:  # an addition already done by its product or scatter (which is still here)
            continue
        if isinstance(instruction, ir.MatMul) and instruction.out == part and not instruction.accumulate:
            between = instructions[start + 1 : position]
            operands = {instruction.a.buffer.name, instruction.b.buffer.name}
            if home.name not in operands and not any(touches(i, {home.name}) for i in between):
                return start, instruction
            return None
        if isinstance(instruction, ir.ScatterAdd) and instruction.target == part and start > 0:
            zeros = instructions[start - 1]
            cleared = isinstance(zeros, ir.Fill) and zeros.target == part and zeros.view is None
            if cleared and isinstance(zeros.tree, ir.Splat) and zeros.tree.value.value == 0:
                between = instructions[start + 1 : position]
                if not any(touches(i, {home.name}) for i in between) and not touches(instruction, {home.name}):
                    return start, instruction
            return None
        if touches(instruction, {part.name, home.name}):
            return None
    return None


def touches(instruction: object, names: set[str]) -> bool:
    """Whether an instruction reads or writes a buffer of `names` (tapes and control flow count)."""
    found: dict[str, int] = {}
    count_reads(instruction, found)
    if names & set(found):
        return True
    target = getattr(instruction, "target", None) or getattr(instruction, "out", None)
    if isinstance(target, ir.Buffer) and target.name in names:
        return True
    return bool(overwritten(instruction) & names)


def count_reads(node: object, counts: dict[str, int]) -> None:
    """How often each buffer is read by the trees and operands of an instruction (walks every field)."""
    if isinstance(node, (ir.Read, ir.Take)):
        counts[node.buffer.name] = counts.get(node.buffer.name, 0) + 1
    if isinstance(node, ir.MatMul):
        for view in (node.a, node.b):
            counts[view.buffer.name] = counts.get(view.buffer.name, 0) + 1
        return
    if isinstance(node, tuple):
        for item in node:
            count_reads(item, counts)
        return
    for name in getattr(node, "__dataclass_fields__", ()):
        if name in ("target", "out", "buffer"):
            continue
        count_reads(getattr(node, name), counts)


# ------------------------------------------------------------------ packing the workspace


def packed(blocks: tuple[ir.Block, ...], buffers: list[ir.Buffer]) -> tuple:
    """The workspace laid out again so that buffers never in use at once share memory: (blocks, buffers,
    workspace size). A buffer is in use from the first instruction naming it to the last, in the
    blocks' order; one named inside a loop (a block a later block jumps back to, through the one that
    jumps) is in use for the whole loop, every iteration. Buffers of unused (dropped) values take none."""
    order = {block.label: position for position, block in enumerate(blocks)}
    spans: dict[str, list[int]] = {}
    fresh: set[str] = set()  # buffers whose first instruction writes them whole without reading them
    position = 0
    block_span: dict[str, tuple[int, int]] = {}
    for block in blocks:
        first = position
        for instruction in block.instructions:
            for name in named_buffers(instruction):
                if name not in spans and defines(instruction, name):
                    fresh.add(name)
                span = spans.setdefault(name, [position, position])
                span[1] = position
            position += 1
        block_span[block.label] = (first, position)
        position += 1
    loops = []
    for block in blocks:
        for target in targets(block.terminator):
            if order[target] <= order[block.label]:
                loops.append((block_span[target][0], block_span[block.label][1]))
    changed = True
    while changed:
        changed = False
        for name, span in spans.items():
            for start, end in loops:
                inside = start <= span[0] and span[1] <= end
                if inside and name in fresh:
                    continue  # made anew by each iteration before any use: nothing flows around the loop
                if span[0] <= end and span[1] >= start and (span[0] > start or span[1] < end):
                    span[0], span[1] = min(span[0], start), max(span[1], end)
                    changed = True
    workspace = [b for b in buffers if b.slot == 0 and b.name in spans]
    workspace.sort(key=lambda b: (spans[b.name][0], -b.size))
    active: list[tuple[int, int, int]] = []  # (end, offset, bytes)
    offsets: dict[str, int] = {}
    size = 0
    for buffer in workspace:
        start, end = spans[buffer.name]
        active = [a for a in active if a[0] >= start]
        need = max(buffer.size, 1) * ir.ITEM_BYTES[buffer.dtype]
        offset = 0
        for _, taken, length in sorted(active, key=lambda a: a[1]):
            if offset + need <= taken:
                break
            offset = max(offset, (taken + length + 63) // 64 * 64)
        offsets[buffer.name] = offset
        active.append((end, offset, need))
        size = max(size, offset + need)
    moved = {}
    for buffer in buffers:
        if buffer.slot != 0:
            moved[buffer.name] = buffer
        elif buffer.name in offsets:
            moved[buffer.name] = ir.Buffer(buffer.name, buffer.dtype, buffer.shape, 0, offsets[buffer.name])
    new_blocks = tuple(
        ir.Block(block.label, tuple(rebuilt(i, moved) for i in block.instructions), block.terminator)
        for block in blocks
    )
    return new_blocks, tuple(moved.values()), size


def defines(instruction: object, name: str) -> bool:
    """Whether `instruction` writes all of buffer `name` and reads none of it."""
    reads_it: dict[str, int] = {}
    if isinstance(instruction, (ir.Fill, ir.Reduce)):
        count_reads(instruction.tree, reads_it)
        whole = not isinstance(instruction, ir.Fill) or instruction.view is None
        return instruction.target.name == name and whole and name not in reads_it
    if isinstance(instruction, ir.MatMul):
        operands = {instruction.a.buffer.name, instruction.b.buffer.name}
        return instruction.out.name == name and not instruction.accumulate and name not in operands
    if isinstance(instruction, (ir.TapePop, ir.CallSpecialised)):  # a call writes its results' buffers whole
        leaves = instruction.leaves if isinstance(instruction, ir.TapePop) else instruction.results
        return any(isinstance(leaf, ir.Buffer) and leaf.name == name for _, leaf in leaves)
    return False


def targets(terminator: object) -> tuple[str, ...]:
    if isinstance(terminator, ir.Jump):
        return (terminator.target,)
    if isinstance(terminator, ir.Branch):
        return (terminator.then, terminator.otherwise)
    return ()


def named_buffers(node: object) -> set[str]:
    """Every buffer an instruction reads or writes."""
    found: set[str] = set()

    def visit(item: object) -> None:
        if isinstance(item, ir.Buffer):
            found.add(item.name)
        elif isinstance(item, tuple):
            for part in item:
                visit(part)
        elif hasattr(item, "__dataclass_fields__"):
            for name in item.__dataclass_fields__:
                visit(getattr(item, name))

    visit(node)
    return found


def rebuilt(node: object, moved: dict[str, ir.Buffer]) -> object:
    """`node` with every buffer replaced by its moved version (nodes are immutable: rebuilt)."""
    if isinstance(node, ir.Buffer):
        return moved.get(node.name, node)
    if isinstance(node, tuple):
        return tuple(rebuilt(item, moved) for item in node)
    if hasattr(node, "__dataclass_fields__") and type(node).__module__ == ir.__name__:
        values = [rebuilt(getattr(node, name), moved) for name in node.__dataclass_fields__]
        return type(node)(*values)
    return node


def function_declaration(typed: Typed, span: Span) -> tuple | None:
    """The function declaration or lambda (and its module) written at `span`."""

    def written_at(node: object) -> object | None:
        if isinstance(node, (ast.FnDecl, ast.Lambda)) and node.span == span:
            return node
        for child in children(node):
            found = written_at(child)
            if found is not None:
                return found
        return None

    for path, module in typed.program.modules.items():
        for decl in module.decls:
            found = written_at(decl)
            if found is not None:
                return found, path
    return None
