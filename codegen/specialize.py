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
  (`ir.MatMul`), transposed operands passed as such; `gather` and `scatter_add` (and `take_along_axis`,
  `add_along_axis`) are `ir.Take` trees and `ir.ScatterAdd` loops with their indices checked; `argsort` is
  `ir.Sort` (a stable merge sort of each row), and `sort` a `Take` at its positions.

Scalar control flow is the scalar lowering's (codegen/lower.py: blocks, branches, loops); a tensor variable
assigned inside an `if` or a loop gets a fixed buffer (a *home*) that its assignments write. Buffers are
carved at compile time out of one workspace the host allocates once per specialisation; results are
written into tensors the host allocates. Anything outside this (a function value parameter, printing,
random numbers, an integer a shape depends on that is only known at run time, a mixed-dtype operation)
raises `Unsupported`, and the function runs on the interpreter, as every other refused function does.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
from dl.codegen import ir
from dl.codegen.ir import contiguous, rebuilt
from dl.codegen.lower import (
    ARITHMETIC,
    COMPARE_NAMES,
    TENSOR_PROMOTIONS,
    FunctionLowering,
    Unsupported,
    Value,
    promoted_dtype,
)
from dl.codegen.optimise import accumulate_in_place, computed_once, forwarded, with_every_target, without_dead_stores
from dl.codegen.primitives import TAPE_OF_TAPES, call_primitive, gathered, joined, map_leaves, matmul, read_tape, reduce
from dl.codegen.values import (
    NUMPY_DTYPES,
    ZERO,
    Closure,
    DType,
    NeedsStatic,
    Primitive,
    ResultUnknown,
    SnapshotTape,
    Specialised,
    Struct,
    TapeLoop,
    TapeValue,
    Tensor,
    Text,
    ValueIndex,
    ZeroTape,
    adds_nothing,
    as_index,
    broadcast,
    broadcast_shape,
    crossed,
    home_buffers,
    is_plain,
    reads,
    reads_only_in_place,
    remap,
    same_view_only,
    settled,
    value_reads,
    view,
)
from dl.codegen.workspace import packed
from dl.lang import ast
from dl.lang.calls import Binding, BindingError, bind_function
from dl.lang.check import Typed, dim_names
from dl.lang.diagnostics import Span
from dl.lang.parse import COMPARE
from dl.lang.primitives import BY_NAME
from dl.lang.record import record
from dl.lang.shapes import TREE_OPERATORS, picks_in_place
from dl.lang.types import UNIT, DimVar, FunctionRef, PrimitiveRef, TensorType, TupleType
from dl.runtime.conform import conforms
from dl.runtime.errors import NEGATIVE_POWER

if TYPE_CHECKING:
    from dl.codegen.registry import Entry

DTYPE_NAMES = {"f32", "f64", "i64", "i32", "bool"}
FLOATS = ("f32", "f64")
INLINE_DEPTH = 48


# ------------------------------------------------------------------ the lowering


@record
class Returning:
    """Where the `return`s of an inlined function go: the label after the call, and the homes of the
    returned value (made at the first `return` inside control flow)."""

    end: str
    home: object = None


def value_dtypes(values: list) -> tuple[str, ...]:
    """The dtypes of the tensors and scalars among lowered values, tuples' items and structs' fields in order,
    `?` for anything else: `lang.check.dtype_leaves` of the types of the check they match."""
    leaves: list[str] = []

    def add(value: object) -> None:
        if isinstance(value, tuple):
            for item in value:
                add(item)
        elif isinstance(value, Struct):
            for item in value.values:
                add(item)
        elif isinstance(value, Tensor):
            leaves.append(value.dtype)
        elif isinstance(value, Value):
            leaves.append(value.operand.dtype)
        else:
            leaves.append("?")

    for value in values:
        add(value)
    return tuple(leaves)


class Specialiser(FunctionLowering):
    def __init__(self, typed: Typed, decl: ast.FnDecl, path: str, arguments: list, structs, registry) -> None:
        super().__init__(typed, decl, path)
        self.registry = registry  # codegen/registry.py: the specialisations this one's real calls call
        self.active = [id(decl)]  # the functions being lowered here (it, and those inlined into it)
        # each of those functions' declaration and its parameters' values on entry, innermost last: what a
        # run-time check in its body binds size names (`N` of `x: f32[N]`) from
        self.entries: list[tuple[ast.FnDecl | ast.Lambda, dict]] = []
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
        self.tape_loops: list[TapeLoop] = []  # the loops being lowered, innermost last
        self.frames: list[list[dict]] = []  # the scopes of the callers of the function being inlined
        self.owners: dict[str, tuple[dict, str]] = {}  # home buffer -> (the scope, the variable's name)
        # home buffer -> the statements that write it, in order: (the `if` or loop, by id, whose homes made or
        # took it, or None for an element assignment; the `if`s and loops around that statement); and the `if`s
        # and loops being lowered now, innermost last
        self.home_users: dict[str, list[tuple[int | None, tuple[int, ...]]]] = {}
        self.compounds: list[int] = []
        # the i64 parameters' values and what is computed from them: temp name -> the parameters' positions
        self.parameter_temps: dict[str, frozenset[int]] = {}
        self.parameter_variables: dict[str, frozenset[int]] = {}  # variables `let` bound to such a value

    # -------------------------------------------------------------- entry
    def specialise(self, symbol: str | None = None) -> Specialised:
        decl = self.decl  # annotations checked at run time are checked by the interpreter around this body
        params = {}
        for position, (param, argument) in enumerate(zip(decl.params, self.arguments, strict=True)):
            params[param.name] = self.argument(argument, param.name)
            if argument == ir.ScalarArgument("i64"):
                self.parameter_temps[params[param.name].operand.name] = frozenset({position})
        argument_slots = self.slot_count
        if self.expected_result is not None:
            self.result_layout = self.taken(self.expected_result)
        self.scopes = [params]
        self.entries = [(decl, dict(params))]
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
        unknown = Unsupported(f"what `{decl.name}` returns is not known at its recursive call", span)
        if len(found) != 1:
            raise ResultUnknown(entry, unknown.reason, span)
        bindings: dict = {}
        for (_, declared), layout in zip(found[0].params, self.arguments, strict=True):
            bind_dimensions(declared, layout, bindings)
        try:
            return self.result_slots(found[0].result, bindings, unknown)
        except Unsupported:
            raise ResultUnknown(entry, unknown.reason, span) from None

    def taken(self, layout: ir.Layout) -> ir.Layout:
        """A result layout found by a probe, its slots (and result buffers) taken in this lowering."""
        match layout:
            case ir.ScalarResult(dtype=dtype):
                return ir.ScalarResult(self.new_slot(), dtype)
            case ir.TensorResult(dtype=dtype, shape=shape):
                return self.result_buffer(dtype, shape)
            case ir.TupleLayout(items=items):
                return ir.TupleLayout(tuple(self.taken(item) for item in items))
            case ir.StructLayout(kind=kind, items=items, name=name):
                return ir.StructLayout(kind, tuple(self.taken(item) for item in items), name)
        return layout

    def result_buffer(self, dtype: str, shape: tuple[int, ...]) -> ir.TensorResult:
        """A buffer the host allocates for a returned tensor, in a slot of its own."""
        buffer = ir.Buffer(f"result#{len(self.buffer_list)}", dtype, shape, self.new_slot())
        self.buffer_list.append(buffer)
        return ir.TensorResult(buffer.slot, dtype, shape, buffer)

    def result_slots(self, declared: object, bindings: dict, unknown: Unsupported) -> ir.Layout:
        if declared == UNIT:
            return ir.UnitResult()
        if isinstance(declared, TupleType):
            return ir.TupleLayout(tuple(self.result_slots(item, bindings, unknown) for item in declared.items))
        if not isinstance(declared, TensorType) or declared.dtype not in DTYPE_NAMES:
            raise unknown
        if not declared.dims:
            return ir.ScalarResult(self.new_slot(), declared.dtype)
        shape = tuple(bindings.get(d, d) for d in declared.dims)
        if not all(isinstance(n, int) for n in shape):
            raise unknown
        return self.result_buffer(declared.dtype, shape)

    def argument(self, layout: ir.Layout, name: str) -> object:
        match layout:
            case ir.TensorArgument(dtype=None) | ir.ScalarArgument(dtype=None):
                kind = "tensor" if isinstance(layout, ir.TensorArgument) else "scalar"
                raise Unsupported(f"`{name}` is a {kind} of a dtype the compiler does not handle")
            case ir.TensorArgument(dtype=dtype, shape=shape):
                # every buffer's name ends in its unique number: an argument `t` never meets a temporary `t`
                buffer = ir.Buffer(f"{name}#{len(self.buffer_list)}", dtype, shape, self.slot_count)
                self.slot_count += 1
                self.buffer_list.append(buffer)
                return view(buffer)
            case ir.ScalarArgument(dtype=dtype):
                result = self.temp(name, dtype)
                self.emit(ir.LoadSlot(result, self.slot_count))
                self.slot_count += 1
                return Value(result)
            case ir.TupleLayout(items=items):
                return tuple(self.argument(item, f"{name}.{k}") for k, item in enumerate(items))
            case ir.StructLayout(kind=key, items=items):
                struct_type = self.structs.kind(key)
                values = [self.argument(item, f"{name}.{f}") for f, item in zip(struct_type.fields, items, strict=True)]
                return Struct(struct_type, struct_type.name, struct_type.fields, values)
            case ir.TextLayout(text=text):
                return Text(text)
            case ir.StaticArgument(value=value):  # an integer compiled in (see NeedsStatic)
                return Value(ir.Const(value, "i64"))
            case ir.FunctionArgument(key=key):  # a DL function passed as an argument: inlined where called
                function = self.structs.kind(key)
                found = function_declaration(self.typed, function.span, function.name)
                if found is None:
                    raise Unsupported(f"`{name}` is a function compiled code does not know")
                return Closure(*found)
            case ir.OtherArgument(class_name=class_name):
                raise Unsupported(f"`{name}` is a {class_name} value, which compiled code does not take")
        raise Unsupported(f"`{name}` is a value compiled code does not take")

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
        if isinstance(value, TapeValue):
            return value
        if isinstance(value, ZeroTape):  # a tape of zeros that the loop or `if` pushes onto: real storage now
            return self.zero_tape(value, name)
        if isinstance(value, (ir.Variable, Text, Closure, Primitive, DType)):
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

    def held(self, value: object) -> object:
        """`value` as a new name or a tuple holds it: a tape is another name for the same value, so that a
        later assignment to the variable it came from does not change it (and it does not see that)."""
        if isinstance(value, TapeValue):
            return read_tape(self, value).alias(len(self.tape_loops))
        return value

    def zero_tape(self, zeros: ZeroTape, name: str) -> TapeValue:
        if zeros.count is None:
            raise Unsupported(f"`{name}` holds zeros of a tape that compiled code did not keep (a tape of tapes)")
        if zeros.template is None:  # `zeros_like(tape())` before anything was pushed: no layout yet
            raise Unsupported(f"`{name}` holds zeros of a tape whose entries are not known yet", zeros.span)
        variables = [self.new_variable(f"{name}.tape.{part}", "i64") for part in ("address", "count", "capacity")]
        tape = ir.Tape(*variables, zeros.size)
        site = self.site("E0513", "out of memory for a tape", zeros.span)
        self.emit(ir.TapeZeros(tape, zeros.count, site))
        self.tapes.append(tape)
        return TapeValue(tape, zeros.template, zeros.leaves)

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
        for name in sorted(ast.assigned_names(stmt)):
            for scope in reversed(self.scopes):
                if name in scope:
                    value = scope[name]
                    if not self.owns(scope, name, value) and not isinstance(value, (Text, Closure, Primitive, DType)):
                        scope[name] = self.home(value, name)
                        for buffer in home_buffers(scope[name]):
                            self.owners[buffer] = (scope, name)
                    else:  # already a home: what reads it now must not see the writes to come
                        self.protect(home_buffers(value), (scope, name))
                    for buffer in home_buffers(scope[name]):  # (`stmt` itself is the last of `compounds`)
                        self.home_users.setdefault(buffer, []).append((id(stmt), tuple(self.compounds[:-1])))
                    if isinstance(scope[name], TapeValue) and isinstance(stmt, (ast.While, ast.For)):
                        if scope[name] is not value:  # storage made for it here (zeros), bound before the loop
                            scope[name].depth = len(self.tape_loops) - 1
                        self.tape_loops[-1].homes[scope[name].tape.address.name] = scope[name]
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
            read_tape(self, value)
            home.state, home.dead = value.state, False  # the variable holds the tape as it now is
        elif isinstance(home, TapeValue) and isinstance(value, SnapshotTape):
            # a loop's state restored (derivative code differentiated again): compiled code kept nothing of
            # the tape it held, so the variable can hold it only if nothing reads it in the loops around (a
            # later iteration would read the snapshot), and nothing reads it after
            if any(home.tape.address.name in loop.reads for loop in self.tape_loops):
                raise Unsupported(f"{TAPE_OF_TAPES}, read in the loop that restores it", span)
            home.dead = True
        elif home != value:
            raise Unsupported("an assignment changes the structure of a variable", span)

    def tensor_like(self, value: object, home: Tensor, span: Span) -> Tensor:
        if isinstance(value, Value):
            operand = self.convert(value, home.dtype, "the assigned value") if value.weak is not None else value.operand
            value = Tensor(operand.dtype, (), ir.Splat(operand))
        if not isinstance(value, Tensor) or value.dtype != home.dtype:
            raise Unsupported("an assignment changes a tensor's dtype", span)
        if value.shape != home.shape:
            raise ShapeChanged(
                f"an assignment changes a tensor's shape from {list(home.shape)} to {list(value.shape)}", span
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
        if not isinstance(stmt, (ast.While, ast.For, ast.If)):
            return self.lowered_simply(stmt)
        self.compounds.append(id(stmt))
        loop = not isinstance(stmt, ast.If)
        if loop:
            self.tape_loops.append(TapeLoop())
        try:
            return self.lowered_simply(stmt)
        finally:
            self.compounds.pop()
            if loop:
                inner = self.tape_loops.pop()
                if self.tape_loops:  # read in the loop around it too
                    self.tape_loops[-1].reads |= inner.reads

    def lowered_simply(self, stmt: ast.Stmt) -> None:
        match stmt:
            case ast.Let(pattern=pattern, value=value):
                evaluated = self.evaluate(value)
                self.kept_type(stmt, evaluated)
                self.let(pattern, evaluated, stmt.span)
            case ast.Assign(target=target, op=op, value=value):
                self.assignment(target, op, value, stmt)
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
                self.for_each([name], iterable, body, stmt)
            case ast.For(pattern=ast.TuplePattern(items=items), iterable=iterable, body=body) if all(
                isinstance(item, ast.NamePattern) for item in items
            ):
                self.for_each([item.name for item in items], iterable, body, stmt)
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
                raise Unsupported("a statement the compiler does not handle yet", stmt.span)

    def if_statement(self, stmt: ast.If) -> None:
        """An `if` whose condition is known when compiling (a string compared, a constant) is only its
        branch taken; any other is the scalar lowering's two blocks, after homes for what they assign."""
        condition = self.scalar_of(self.evaluate(stmt.cond), stmt.span)
        if condition.operand.dtype != "bool":
            raise Unsupported(f"a condition is {condition.operand.dtype}, not bool", stmt.cond.span)
        if isinstance(condition.operand, ir.Const):
            chosen = stmt.then if condition.operand.value else stmt.orelse
            if isinstance(chosen, ast.If):
                self.if_statement(chosen)
            elif chosen is not None:
                self.block(chosen)
            return
        self.make_homes(stmt)
        self.if_branches(condition.operand, stmt)

    def for_each(self, names: list[str], iterable: ast.Expr, body: ast.Block, stmt: ast.For) -> None:
        """`for x in xs` over a tensor's first axis, and `for (x, y) in (xs, ys)` over tensors of one leading size
        walked in step (`batches`' result): the tensors as they are when the loop starts (a copy if the loop may
        change them), each name a row of its tensor in turn (a scalar for a vector)."""
        value = self.evaluate(iterable)
        items = tuple_items(value, stmt.pattern)
        if items is not None:
            return self.for_items(items, stmt)
        if isinstance(stmt.pattern, ast.NamePattern):
            if not isinstance(value, Tensor) or not value.shape:
                raise Unsupported("`for` over something other than a tensor", stmt.span)
            sequences = (value,)
        else:
            fits = isinstance(value, tuple) and len(value) == len(names)
            if not fits or not all(isinstance(t, Tensor) and t.shape for t in value):
                raise Unsupported(
                    "`for` of a tuple pattern over something other than tensors walked in step", stmt.span
                )
            if len({t.shape[0] for t in value}) != 1:
                raise Unsupported("`for` over tensors of different lengths", stmt.span)  # the interpreter's error
            sequences = value
        self.make_homes(stmt)
        # written once before the loop; copied if it is storage the loop may overwrite
        sequences = tuple(self.copy(t) if reads(t.tree, self.homes) else self.materialise(t) for t in sequences)
        counter = self.new_variable(f"{names[0]}.counter", "i64")
        self.emit(ir.Store(counter, ZERO))

        def bind(position: ir.Temp) -> None:
            for name, sequence in zip(names, sequences, strict=True):
                row = self.view_of(sequence, (ValueIndex(Value(position)),), stmt.span)
                if row.shape:
                    self.scopes[-1][name] = row
                    continue
                element = self.temp(name, row.dtype)
                self.emit(ir.Evaluate(element, row.tree))
                self.let(ast.NamePattern(name), Value(element), stmt.span)

        self.counted_loop(names[0], counter, lambda: ir.Const(sequences[0].shape[0], "i64"), body, bind)

    def for_items(self, items: list[object], stmt: ast.For) -> None:
        """`for layer in layers` over a tuple's items (or tuples zipped): written out, the body once for each
        item in a scope of its own, as if the user had written the items out. A variable the body assigns may
        then take another shape from item to item (`h = h @ layer.w`), as it may in straight-line code."""
        exits = (ast.Break, ast.Continue)
        if any(isinstance(node, exits) and self.exits_loop(node, stmt) for node in ast.walk_scope(stmt.body)):
            raise Unsupported("`break` or `continue` in a `for` over a tuple's items", stmt.span)
        # the items as they are when the loop starts: a later item may read storage an earlier one's body writes
        items = [self.detached(item, set(self.homes)) for item in items]
        for item in items:
            self.scopes.append({})
            self.let(stmt.pattern, item, stmt.span)
            self.block(stmt.body)
            self.scopes.pop()

    @staticmethod
    def exits_loop(node: ast.Break | ast.Continue, loop: ast.For) -> bool:
        """Whether `node`, inside `loop`'s body, breaks or continues `loop` itself (not a loop nested in it)."""
        inner = [n for n in ast.walk_scope(loop.body) if isinstance(n, (ast.While, ast.For))]
        return not any(any(m is node for m in ast.walk_scope(n.body)) for n in inner)

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
                self.scopes[-1][name] = self.bind(settled(self.held(value)), self.uses.get(name, 0))
            case ast.TuplePattern(items=items):
                if not isinstance(value, tuple) or len(value) != len(items):
                    raise Unsupported(f"a tuple pattern of {len(items)} does not match the value", span)
                for item, part in zip(items, value, strict=True):
                    self.let(item, part, span)

    def assignment(self, target: ast.Expr, op: str, value_expr: ast.Expr, stmt: ast.Assign) -> None:
        value = self.evaluate(value_expr)
        if op != "=":
            value = self.binary_values(op[:-1], self.evaluate(target), value, stmt.span)
        self.kept_type(stmt, value)
        try:
            self.assign_to(target, value, stmt.span)
        except ShapeChanged as problem:
            if not grown(target, value_expr):
                raise
            raise ShapeChanged(f"{problem.reason}; {GROWN}", problem.span) from None

    def kept_type(self, stmt: ast.Let | ast.Assign, value: object) -> None:
        """A `let`'s annotation or a rebinding's type that the checker left to the run, checked on the shapes
        known now."""
        check = self.typed.runtime_checks.get(id(stmt))
        if check is None:
            return
        bindings: dict[str, int] = {}
        if dim_names(check.type) and self.entries:  # `f32[N]`: `N` as the function's parameters bind it
            decl, values = self.entries[-1]
            for param, declared in zip(decl.params, self.typed.declared_params(decl), strict=True):
                if declared is not None and dim_names(declared) and param.name in values:
                    conforms(stand_in(values[param.name]), declared, bindings)
        annotation_fits(value, check.type, bindings, stmt.span)

    def assign_to(self, target: ast.Expr, value: object, span: Span) -> None:
        match target:
            case ast.Name(id=name):
                scope = self.scope_of(name, span)
                current = scope[name]
                if self.owns(scope, name, current) and self.outgrown(current, value):
                    del self.owners[current.tree.buffer.name]  # (nothing writes it again: the name lets it go)
                    scope[name] = self.bind(value, self.uses.get(name, 0))
                elif self.owns(scope, name, current):
                    if isinstance(current, (tuple, Struct)) and crossed(current, value):
                        value = self.bind(value, 1, detach=True)  # every part read before any is written
                    self.store_home(current, value, span, (scope, name))
                else:
                    scope[name] = self.bind(value, self.uses.get(name, 0))
            case ast.Field(target=inner, name=name):
                record = self.evaluate(inner)
                if not isinstance(record, Struct):
                    raise Unsupported("assigning a field of a value that is not a struct", span)
                position = record.fields.index(name) if name in record.fields else None
                if position is None:
                    raise Unsupported(f"`{record.name}` has no field `{name}`", span)
                root = ast.target_names(inner)
                owner = (self.scope_of(root[0], span), root[0]) if root else None
                if owner is not None and self.owns(*owner, record.values[position]):
                    self.store_home(record.values[position], value, span, owner)
                else:
                    values = list(record.values)
                    values[position] = self.bind(value, 2)
                    self.assign_to(inner, Struct(record.kind, record.name, record.fields, values), span)
            case ast.TupleLiteral(items=items):
                if not isinstance(value, tuple) or len(value) != len(items):
                    raise Unsupported("a tuple assignment does not match the value", span)
                value = self.bind(value, 1, detach=True)  # read every part before writing any: `(a, b) = (b, a)`
                for item, part in zip(items, value, strict=True):
                    self.assign_to(item, part, span)
            case ast.Index(target=ast.Name(id=name) as base, indices=indices) as element:  # fails where interpreted
                self.assign_element(name, base, indices, value, element.span)
            case _:
                raise Unsupported("an assignment to this target", span)

    def outgrown(self, home: object, value: object) -> bool:
        """Whether a variable's home tensor, made for an `if` or loop that has ended (`x = relu(x)` in an `if`, in
        the block of one item of a loop over layers), is assigned a tensor of another shape or dtype (the next
        layer's `h = h @ w`), in straight-line code after that statement (within the `if`s and loops it was in,
        no other): the variable then takes the value, as a rebinding there does, rather than the home being
        written. Inside the statement it was made for, or in a later `if` or loop (whose paths meet, or whose
        iterations carry the variable), its shape stays fixed."""
        if not isinstance(home, Tensor) or not isinstance(value, Tensor):
            return False
        if (home.shape, home.dtype) == (value.shape, value.dtype):
            return False
        users = self.home_users.get(home.tree.buffer.name)
        now = tuple(self.compounds)
        # every statement that wrote it has ended, and each was here or nested in where we are now
        return bool(users) and all(user not in now and around[: len(now)] == now for user, around in users)

    def assign_element(self, name: str, base: ast.Name, indices: tuple, value: object, span: Span) -> None:
        """`x[i, a:b] = v` (and `+=`): the selected elements of `x`'s storage are overwritten; `x` is first
        given storage of its own unless it is a home (a value is never changed where another name sees it)."""
        scope = self.scope_of(name, span)
        current = scope[name]
        if not isinstance(current, Tensor):
            raise Unsupported("assigning an element of a value that is not a tensor", span)
        if not self.owns(scope, name, current):  # storage of its own, which later assignments write
            current = self.copy(current)
            scope[name] = current
            self.homes.add(current.tree.buffer.name)
            self.owners[current.tree.buffer.name] = (scope, name)
            self.home_users[current.tree.buffer.name] = [(None, tuple(self.compounds))]
        else:
            self.protect({current.tree.buffer.name}, (scope, name))
        region = self.view_of(current, indices, span)
        if isinstance(value, ir.Variable):
            value = self.read_variable(value)
        if isinstance(value, Value):
            value = Tensor(current.dtype, (), ir.Splat(self.promote(value, current.dtype, span)))
        if not isinstance(value, Tensor) or value.dtype != current.dtype:
            raise Unsupported("an element assignment of another dtype", span)
        tree = broadcast(value, region.shape, span).tree
        target = current.tree.buffer
        if reads(tree, {target.name}) and not same_view_only(tree, region.tree):
            tree = self.materialise(Tensor(value.dtype, region.shape, tree)).tree
        self.emit(ir.Fill(target, tree, region.tree, region.shape))

    def scope_of(self, name: str, span: Span) -> dict:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope
        raise Unsupported(f"it assigns `{name}`, which is not a local variable", span)

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

    def result_of(self, value: object, span: Span, known: ir.Layout | None) -> ir.Layout:
        """Store a returned value where the host finds it; `known` is the layout of an earlier `return`."""
        if value is None:
            if known not in (None, ir.UnitResult()):
                self.undecided("returns of different kinds", span)
            return ir.UnitResult()
        if isinstance(value, ir.Variable):
            value = self.read_variable(value)
        if isinstance(value, Value):
            operand = value.operand
            slot = known.slot if isinstance(known, ir.ScalarResult) else self.new_slot()
            if known is not None and known != ir.ScalarResult(slot, operand.dtype):
                self.undecided("returns of different types", span)
            self.emit(ir.StoreSlot(slot, operand))
            return ir.ScalarResult(slot, operand.dtype)
        if isinstance(value, Tensor):
            if known is None:
                result = self.result_buffer(value.dtype, value.shape)
            elif isinstance(known, ir.TensorResult) and (known.dtype, known.shape) == (value.dtype, value.shape):
                result = known
            else:
                self.undecided("returns of different types or shapes", span)
            self.emit(ir.Fill(result.buffer, value.tree))
            return result
        if isinstance(value, tuple):
            if known is not None and (not isinstance(known, ir.TupleLayout) or len(known.items) != len(value)):
                self.undecided("returns of different types", span)
            parts = known.items if known is not None else (None,) * len(value)
            return ir.TupleLayout(tuple(self.result_of(v, span, k) for v, k in zip(value, parts, strict=True)))
        if isinstance(value, Text):  # known when compiled: the host hands the string back
            if known is not None and known != ir.TextLayout(value.value):
                self.undecided("returns of different strings", span)
            return ir.TextLayout(value.value)
        if isinstance(value, Struct):
            kind = value.kind
            if known is not None and (not isinstance(known, ir.StructLayout) or known.kind is not kind):
                self.undecided("returns of different types", span)
            parts = known.items if known is not None else (None,) * len(value.values)
            items = tuple(self.result_of(v, span, k) for v, k in zip(value.values, parts, strict=True))
            return ir.StructLayout(kind, items, value.name)
        raise Unsupported("it returns a value compiled code cannot hand back", span)

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
        raise Unsupported(f"a scalar is expected here, found a {type(value).__name__.lower()}", span)

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
            case ast.FString():
                raise Unsupported("an f-string, which the interpreter formats", expr.span)
            case ast.Name(id=name):
                return self.name(name, expr)
            case ast.Unary(op="-", operand=operand):
                return self.negated(self.evaluate(operand), expr.span)
            case ast.Unary(op="not", operand=operand):
                value = self.evaluate(operand)
                if isinstance(value, Tensor) and value.dtype == "bool":
                    return Tensor("bool", value.shape, ir.Apply("not", "bool", (value.tree,)))
                return self.logical_not(self.scalar_of(value, expr.span), expr.span)
            case ast.Binary(op="and" | "or" as op, lhs=lhs, rhs=rhs) if self.elementwise_logic(expr):
                return self.elementwise(op, [self.evaluate(lhs), self.evaluate(rhs)], expr.span)
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
                return tuple(self.held(self.evaluate(item)) for item in items)
            case ast.StructLiteral():
                return self.struct_literal(expr)
            case ast.Lambda():
                return self.closure(expr)
            case ast.TensorLiteral():
                return self.tensor_literal(expr)
        raise Unsupported(f"{type(expr).__name__.lower()} expressions", expr.span)

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
        kind = self.typed.type_of(expr)
        if isinstance(kind, PrimitiveRef):
            return Primitive(kind.prim)
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
                return Primitive(BY_NAME[expr.id])
        if isinstance(expr, ast.Name):
            return self.constant(self.path, expr.id, expr.span)
        if isinstance(expr, ast.Field) and isinstance(expr.target, ast.Name):
            module = self.module_path(expr.target.id)
            if module is not None:
                return self.constant(module, expr.name, expr.span)
        raise Unsupported("a name compiled code does not know", expr.span)

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
                raise Unsupported(f"`{name}` is not a local variable or a constant", span)
            saved = (self.scopes, self.path)
            self.scopes, self.path = [{}], path
            try:
                value = self.evaluate(decl.value)
            finally:
                self.scopes, self.path = saved
            if not (isinstance(value, Text) or (isinstance(value, Value) and isinstance(value.operand, ir.Const))):
                raise Unsupported(f"constant `{name}` is not a number, bool or string known before running", span)
            self.constants[key] = settled(value)
        return self.constants[key]

    def field(self, expr: ast.Field, target: ast.Expr, name: str) -> object:
        local = isinstance(target, ast.Name) and any(target.id in scope for scope in self.scopes)
        if isinstance(target, ast.Name) and not local and self.module_path(target.id) is not None:
            return self.global_value(expr)
        record = self.evaluate(target)
        if not isinstance(record, Struct):
            raise Unsupported(f"`.{name}` of a value that is not a struct", expr.span)
        value = record.field(name, expr.span)
        return self.read_variable(value) if isinstance(value, ir.Variable) else value

    def struct_literal(self, expr: ast.StructLiteral) -> Struct:
        if isinstance(expr.type, ast.Name):
            path, name = self.path, expr.type.id
        elif isinstance(expr.type, ast.Field) and isinstance(expr.type.target, ast.Name):
            path, name = self.module_path(expr.type.target.id), expr.type.name
        else:
            raise Unsupported("a struct literal of this type", expr.span)
        decl = next(
            (
                d
                for d in (self.typed.program.modules[path].decls if path in self.typed.program.modules else ())
                if isinstance(d, ast.StructDecl) and d.name == name
            ),
            None,
        )
        if decl is None:
            raise Unsupported(f"struct `{name}` not found", expr.span)
        fields = tuple(f.name for f in decl.fields)
        given = {init.name: self.evaluate(init.value) for init in expr.fields}
        if set(given) != set(fields):
            raise Unsupported("a struct literal without every field", expr.span)
        kind = self.structs.declared(path, name)
        return Struct(kind, name, fields, [self.bind(given[f], 2) for f in fields])

    def closure(self, decl: ast.Lambda | ast.FnDecl) -> Closure:
        """A lambda or local function: it captures the current values of the names it uses."""
        captured = {}
        for name in sorted(ast.free_names(decl)):
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
            return joined(self, values, 0, True, expr.span)
        if not values or not all(isinstance(v, (Value, ir.Variable)) for v in values):
            raise Unsupported("a tensor literal of this", expr.span)
        values = [self.scalar_of(v, expr.span) for v in values]
        strong = {v.operand.dtype for v in values if v.weak is None}
        if len(strong) > 1:
            raise Unsupported("a tensor literal mixing dtypes", expr.span)
        dtype = strong.pop() if strong else ("f32" if any(isinstance(v.weak, float) for v in values) else "i64")
        if dtype == "i64" and any(isinstance(v.weak, float) for v in values):
            raise Unsupported("a tensor literal mixing integers and floats", expr.span)
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
        if isinstance(left, Text) and isinstance(right, Text) and op == "+":  # both known when compiled
            return Text(left.value + right.value)
        if isinstance(left, Value) and isinstance(right, Value):
            return self.binary(op, left, right, span)
        if op in ("==", "!=") and isinstance(left, tuple) and isinstance(right, tuple):
            equal = self.tuples_equal(left, right, span)
            return equal if op == "==" else self.logical_not(equal, span)
        if isinstance(left, (Struct, tuple)) or isinstance(right, (Struct, tuple)):
            return self.tree_binary(op, left, right, span)
        return self.elementwise(op, [left, right], span)

    def tuples_equal(self, left: tuple, right: tuple, span: Span) -> Value:
        """`shape(x) == shape(y)`: two tuples of scalars compared whole (the checker's `tuples_compared`). Sizes
        known when compiled fold to a constant; the rest are compared when run, and the answers joined."""
        if len(left) != len(right):
            return Value(ir.Const(False, "bool"))
        answers = []
        for a, b in zip(left, right, strict=True):
            if isinstance(a, tuple) and isinstance(b, tuple):
                answer = self.tuples_equal(a, b, span)
            else:
                answer = self.scalar_of(self.binary_values("==", a, b, span), span)
            if isinstance(answer.operand, ir.Const):
                if not answer.operand.value:
                    return Value(ir.Const(False, "bool"))
                continue
            answers.append(answer.operand)
        if not answers:
            return Value(ir.Const(True, "bool"))
        tree = ir.Splat(answers[0])
        for answer in answers[1:]:
            tree = ir.Apply("and", "bool", (tree, ir.Splat(answer)))
        result = self.temp("equal", "bool")
        self.emit(ir.Evaluate(result, tree))
        return Value(result)

    def literal_coercion(self, expr: ast.IntLiteral | ast.FloatLiteral) -> str | None:
        """The dtype a literal takes from its context; one that calls of different dtypes give different ones
        (`let s = 0.01` in a function called with f64 and with f32 data) takes the one of the function being
        lowered, by the dtypes of its arguments."""
        if id(expr) not in self.typed.contested_by_dtypes or not self.entries:
            return super().literal_coercion(expr)
        decl, values = self.entries[-1]
        return self.typed.coercion_for(expr, value_dtypes([values.get(p.name) for p in decl.params]))

    def elementwise_logic(self, expr: ast.Binary) -> bool:
        """`a and b` of bool tensors: elementwise, both sides evaluated (as the interpreter does), where the
        checker typed it a tensor in every call."""
        checked = self.typed.type_of(expr)
        return isinstance(checked, TensorType) and bool(checked.dims)

    def negated(self, value: object, span: Span) -> object:
        """`-value` of a scalar or tensor, or of each leaf of a struct or tuple."""
        if isinstance(value, (Struct, tuple)):
            return map_leaves(lambda leaf: self.negated(leaf, span), (value,), span)
        if isinstance(value, ir.Variable):
            value = self.read_variable(value)
        if isinstance(value, Tensor):
            return Tensor(value.dtype, value.shape, ir.Apply("neg", value.dtype, (value.tree,)))
        return self.negate(self.scalar_of(value, span), span)

    def tree_binary(self, op: str, left: object, right: object, span: Span) -> object:
        """`op` leaf by leaf (`+ - * / **` of structs and tuples, as the checker's `tree_arithmetic`): two trees
        of one structure, or a tree and a scalar, which meets every leaf."""
        if op not in TREE_OPERATORS:
            raise Unsupported(f"`{op}` of structs or tuples", span)
        if isinstance(left, (Struct, tuple)) and isinstance(right, (Struct, tuple)):
            return map_leaves(lambda a, b: self.binary_values(op, a, b, span), (left, right), span)
        if isinstance(left, (Struct, tuple)):
            return map_leaves(lambda a: self.binary_values(op, a, right, span), (left,), span)
        return map_leaves(lambda b: self.binary_values(op, left, b, span), (right,), span)

    def binary(self, op: str, left: Value, right: Value, span: Span) -> Value:
        folded = integers_folded(op, left, right)
        if folded is None:
            folded = floats_folded(op, left, right)
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
            raise Unsupported(f"`{op}` without a tensor", span)
        operands = values[1:] if op == "select" else values
        common = self.common_dtype_of(op, operands, dtype, span)
        converted = sorted({v.dtype for v in operands if isinstance(v, Tensor) and v.dtype != common})
        if any((source, common) not in TENSOR_PROMOTIONS for source in converted):
            integers = common in ("f32", "f64") and any(source in ("i32", "i64") for source in converted)
            fix = f" (write `float(...)` of the integer tensor: compiled code converts it to {common} then)"
            raise Unsupported(f"`{op}` of {' and '.join([*converted, common])} tensors{fix if integers else ''}", span)
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
                raise Unsupported(f"`{op}` of a {type(v).__name__.lower()}", span)
        if op in COMPARE_NAMES:
            return Tensor("bool", shape, ir.Apply(COMPARE_NAMES[op], "bool", tuple(trees)))
        name = ARITHMETIC.get(op, op)
        if name == "div" and common not in FLOATS:
            raise Unsupported(f"`{op}` on {common} tensors", span)
        if name == "pow" and common in ir.INTEGER_DTYPES:  # every exponent given, as numpy checks `b` itself
            self.all_at_least_zero(values[1], span)
        if name in ("floordiv", "mod") and common in ir.INTEGER_DTYPES:
            self.nonzero_divisor(trees[1], shape, op, span)
        if name in ("add", "sub", "mul", "div", "pow", "neg") and common == "bool":
            raise Unsupported(f"`{op}` on bool tensors", span)
        if name == "add":  # `zeros_like(x) + v` (derivative code's zeroed adjoints): `v` itself
            for zero, other in ((0, 1), (1, 0)):
                kept = values[other]
                same = isinstance(kept, Tensor) and (kept.shape, kept.dtype) == (shape, common)
                if same and adds_nothing(trees[zero], common):
                    return kept
        return Tensor(common, shape, ir.Apply(name, common, tuple(trees)))

    def nonzero_divisor(self, divisor: object, shape: tuple[int, ...], op: str, span: Span) -> None:
        """Integer `//` and `%` fail on a zero divisor anywhere (E0510, as interpreted), before computing."""
        self.check_every(
            ir.Apply("ne", "bool", (divisor, ir.Splat(ZERO))), shape, f"integer division by zero in `{op}`", span
        )

    def all_at_least_zero(self, exponent: object, span: Span) -> None:
        """Integer `**` fails on a negative exponent anywhere (E0510, as interpreted), before computing: each
        element of the exponent as given, even where the result has none (a scalar exponent of an empty base)."""
        if isinstance(exponent, Value):
            fine = self.temp("exponent.not.negative", "bool")
            self.emit(ir.Compare(fine, ">=", exponent.operand, ir.Const(0, exponent.operand.dtype)))
            self.emit(ir.Check(fine, self.site("E0510", NEGATIVE_POWER, span)))
            return
        zero = ir.Splat(ir.Const(0, exponent.dtype))
        self.check_every(ir.Apply("ge", "bool", (exponent.tree, zero)), exponent.shape, NEGATIVE_POWER, span)

    def check_every(self, condition: object, shape: tuple[int, ...], message: str, span: Span) -> None:
        """Fail at an E0510 site with `message` unless the bool tree `condition` holds at every element."""
        if not math.prod(shape):
            return
        holds = ir.Apply("convert", "i64", (condition,))
        every = reduce(self, Tensor("i64", shape, holds), "min", tuple(range(len(shape))), False, span, "i64")
        smallest = self.temp("every.holds", "i64")
        self.emit(ir.Evaluate(smallest, every.tree))
        fine = self.temp("every.fine", "bool")
        self.emit(ir.Compare(fine, "==", smallest, ir.Const(1, "i64")))
        self.emit(ir.Check(fine, self.site("E0510", message, span)))

    def common_dtype_of(self, op: str, operands: list, dtype: str | None, span: Span) -> str:
        """The dtype the operands of an elementwise operation meet in (`lower.promoted_dtype`, folded)."""
        kinds = [(v.dtype, False) for v in operands if isinstance(v, Tensor)]
        kinds += [(v.operand.dtype, v.weak is not None) for v in operands if isinstance(v, Value)]
        if all(weak for _, weak in kinds):
            if dtype is None:
                raise Unsupported(f"`{op}` mixes literals only", span)
            return dtype
        common, weak = kinds[0]
        for other, other_weak in kinds[1:]:
            if "bool" in (common, other) and common != other and (weak or other_weak):
                raise Unsupported(f"`{op}` of a number literal and a bool", span)
            common, weak = promoted_dtype(common, weak, other, other_weak), weak and other_weak
        return common

    # -------------------------------------------------------------- indexing
    def index(self, value: object, indices: tuple, span: Span) -> object:
        if isinstance(value, tuple):
            if len(indices) != 1:
                raise Unsupported("a tuple indexed by several indices", span)
            position = self.static_int(self.evaluate(indices[0]), span)
            if not -len(value) <= position < len(value):
                raise Unsupported(f"tuple index {position} out of range", span)
            item = value[position]
            return self.read_variable(item) if isinstance(item, ir.Variable) else item
        if not isinstance(value, Tensor):
            raise Unsupported(f"indexing a {type(value).__name__.lower()}", span)
        in_place = picks_in_place([not isinstance(index, (ast.Slice, ast.Ellipsis)) for index in indices])
        indices = spread_ellipsis(indices, len(value.shape), span)
        # each index evaluated once, in order; slices stay as written (their bounds are static)
        evaluated = tuple(
            index if isinstance(index, ast.Slice) else as_index(self, self.evaluate(index)) for index in indices
        )
        if any(isinstance(index, Tensor) for index in evaluated):
            if len(evaluated) == 1:  # x[[2, 0, 2]]: rows picked by a tensor of indices
                if evaluated[0].dtype != "i64":
                    raise Unsupported(f"indexing by a {evaluated[0].dtype} tensor", span)
                return gathered(self, value, evaluated[0], 0, span, index_error=True)
            return self.picked(value, evaluated, in_place, span)
        indices = tuple(index if isinstance(index, ast.Slice) else ValueIndex(index) for index in evaluated)
        result = self.view_of(value, indices, span)
        if not result.shape:
            scalar = self.temp("element", result.dtype)
            self.emit(ir.Evaluate(scalar, result.tree))
            return Value(scalar)
        return result

    def picked(self, value: Tensor, indices: tuple, in_place: bool, span: Span) -> Tensor:
        """numpy's indexing by integer tensors among integers and slices (`z[arange(B), y]`, `x[:, ids, 0]`).
        numpy checks the integers, then each index tensor in axis order, every element: so does this, each
        tensor by a `Take` of its own (the first index out of range fails with the interpreter's E0501). The
        index tensors broadcast together; their dimensions stand where the picked axes are if those are side
        by side, else first. The result is one `Take` tree whose index is the sum of each wrapped index
        times its axis's stride."""
        tensor = value if isinstance(value.tree, ir.Read) else self.materialise(value)
        read = tensor.tree
        if len(indices) > len(tensor.shape):
            raise Unsupported("too many indices", span)
        if not tensor.size:
            raise Unsupported("indexing an empty tensor by a tensor", span)
        offset: ir.Operand = read.offset
        for axis, index in enumerate(indices):  # the integers first, as numpy checks them
            if isinstance(index, Value):
                position = self.scalar_of(index, span)
                if position.operand.dtype != "i64":
                    raise Unsupported("an index that is not an i64", span)
                checked = self.checked_index(position.operand, tensor.shape[axis], axis, span)
                offset = self.add_offset(offset, self.scaled(checked, read.strides[axis]))
        tensors = [(axis, index) for axis, index in enumerate(indices) if isinstance(index, Tensor)]
        for axis, index in tensors:
            if index.dtype != "i64":
                raise Unsupported(f"indexing by a {index.dtype} tensor", span)
            if index.size:  # every element checked, used or not: a `Take` of one element, stride 0
                size = tensor.shape[axis]
                site = self.site(
                    "E0501", f"index {{value}} is out of bounds for axis {axis} with size {size}", span, "i64"
                )
                check = ir.Take(read.buffer, read.offset, (0,) * len(index.shape), index.tree, 0, size, site)
                self.materialise(Tensor(tensor.dtype, index.shape, check), "index.checked")
        picked_shape: tuple[int, ...] = ()
        for _, index in tensors:
            picked_shape = broadcast_shape(picked_shape, index.shape, span)
        picked_at = [axis for axis, index in enumerate(indices) if not isinstance(index, ast.Slice)]
        sliced = [(axis, index) for axis, index in enumerate(indices) if isinstance(index, ast.Slice)]
        sliced += [(axis, ast.Slice(None, None, None)) for axis in range(len(indices), len(tensor.shape))]
        before = [(axis, index) for axis, index in sliced if in_place and axis < picked_at[0]]
        after = [(axis, index) for axis, index in sliced if not (in_place and axis < picked_at[0])]
        shape: list[int] = []
        strides: list[int] = []
        for axis, index in before:
            offset = self.sliced_axis(tensor, axis, index, offset, shape, strides, span)
        first_picked = len(shape)
        shape.extend(picked_shape)
        strides.extend([0] * len(picked_shape))
        for axis, index in after:
            offset = self.sliced_axis(tensor, axis, index, offset, shape, strides, span)
        mapping = tuple(
            d - first_picked if first_picked <= d < first_picked + len(picked_shape) else None
            for d in range(len(shape))
        )
        total = None
        for axis, index in tensors:
            spread = remap(broadcast(index, picked_shape, span).tree, mapping)
            size = ir.Splat(ir.Const(tensor.shape[axis], "i64"))
            negative = ir.Apply("lt", "bool", (spread, ir.Splat(ZERO)))
            wrapped = ir.Apply("select", "i64", (negative, ir.Apply("add", "i64", (spread, size)), spread))
            term = ir.Apply("mul", "i64", (wrapped, ir.Splat(ir.Const(read.strides[axis], "i64"))))
            total = term if total is None else ir.Apply("add", "i64", (total, term))
        tree = ir.Take(read.buffer, offset, tuple(strides), total, 1, tensor.size, None)
        return Tensor(tensor.dtype, tuple(shape), tree)

    def sliced_axis(self, tensor: Tensor, axis: int, index: ast.Slice, offset, shape: list, strides: list, span):
        """The offset with a slice's start on `axis` added; its length and stride appended."""
        n, stride = tensor.shape[axis], tensor.tree.strides[axis]
        bounds = [
            None if part is None else self.static_int(self.evaluate(part), span)
            for part in (index.start, index.stop, index.step)
        ]
        if bounds[2] == 0:
            raise Unsupported("a slice step of 0", span)
        chosen = range(n)[slice(*bounds)]
        shape.append(len(chosen))
        strides.append(stride * chosen.step)
        return self.add_offset(offset, ir.Const((chosen.start if chosen else 0) * stride, "i64"))

    def view_of(self, value: Tensor, indices: tuple, span: Span) -> Tensor:
        """The elements `value[indices]` select (integers and slices without steps), as a view."""
        indices = spread_ellipsis(indices, len(value.shape), span)
        if len(indices) > len(value.shape):
            raise Unsupported("too many indices", span)
        tensor = value if isinstance(value.tree, ir.Read) else self.materialise(value)
        read = tensor.tree
        offset: ir.Operand = read.offset
        shape, strides = [], []
        for axis, index in enumerate(indices):
            n, stride = tensor.shape[axis], read.strides[axis]
            if isinstance(index, ast.Slice):
                offset = self.sliced_axis(tensor, axis, index, offset, shape, strides, span)
                continue
            position = self.scalar_of(index.value if isinstance(index, ValueIndex) else self.evaluate(index), span)
            position = as_index(self, position)
            if position.operand.dtype != "i64":
                raise Unsupported("an index that is not an i64", span)
            offset = self.add_offset(offset, self.scaled(self.checked_index(position.operand, n, axis, span), stride))
        shape.extend(tensor.shape[len(indices) :])
        strides.extend(read.strides[len(indices) :])
        return Tensor(tensor.dtype, tuple(shape), ir.Read(read.buffer, offset, tuple(strides)))

    def checked_index(self, index: ir.Operand, size: int, axis: int, span: Span) -> ir.Operand:
        """An index in 0..size (negative ones count from the end), or E0501 as the interpreter reports it."""
        if isinstance(index, ir.Const):
            if not -size <= index.value < size:
                raise Unsupported(f"index {index.value} out of range", span)
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
        message = f"{what} known only at run time where compiled code needs a constant"
        if isinstance(value, Value) and isinstance(value.operand, ir.Temp):
            positions = self.parameter_temps.get(value.operand.name)
            if positions:
                raise NeedsStatic(min(positions), message, span)
        raise Unsupported(message, span)

    def undecided(self, message: str, span: Span) -> None:
        """Returns of different types or shapes: compiled per value of an integer parameter (the first one
        still known only at run time), its branches may be decided; else refused."""
        positions = frozenset().union(*self.parameter_temps.values())
        if positions:
            raise NeedsStatic(min(positions), message, span)
        raise Unsupported(message, span)

    # -------------------------------------------------------------- calls
    def call_expression(self, expr: ast.Call, discarded: bool) -> object:
        callee = self.evaluate(expr.func) if not isinstance(expr.func, ast.Name) else self.callee(expr.func)
        args = [self.evaluate(arg) for arg in expr.args]
        keywords = {k.name: self.evaluate(k.value) for k in expr.keywords}
        if isinstance(callee, Primitive):
            binding = self.typed.bindings.get(id(expr))
            return call_primitive(self, callee.prim, args, keywords, expr.span, discarded, binding)
        if isinstance(callee, Closure):
            return self.inline(callee, args, keywords, expr.span, binding=self.typed.bindings.get(id(expr)))
        raise Unsupported("a call of something compiled code cannot call", expr.span)

    def callee(self, name: ast.Name) -> object:
        for scope in reversed(self.scopes):
            if name.id in scope:
                return scope[name.id]
        return self.global_value(name)

    def site(self, code: str, message: str, span: Span, shows: str | None = None) -> int:
        """A site, with the inlined calls it lies in (for the call stack of its diagnostic)."""
        self.sites.append(ir.Site(code, message, span, shows, None, tuple(self.inline_chain)))
        return len(self.sites) - 1

    def inline(
        self,
        closure: Closure,
        args: list,
        keywords: dict,
        span: Span,
        called_at: Span | None = None,
        binding: Binding | None = None,
    ) -> object:
        """The callee's body, lowered here with its parameters bound to the arguments; a recursive call (or
        one nested too deeply to inline) calls a specialisation of the callee for real instead. `called_at`
        is the span the interpreter's call stack shows for the call, if not `span` (a primitive's call of a
        function value: the function's own)."""
        decl = closure.decl
        separate = isinstance(decl, ast.FnDecl) and not closure.captured
        if separate and (id(decl) in self.active or self.depth >= INLINE_DEPTH):
            return self.call_separately(closure, self.argument_values(closure, args, keywords, span, binding), span)
        if self.depth >= INLINE_DEPTH:
            raise Unsupported(f"calls nest deeper than {INLINE_DEPTH}", span)
        names = [p.name for p in decl.params]
        values = self.argument_values(closure, args, keywords, span, binding)
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
        self.entries.append((decl, bound))
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
        except Unsupported as problem:  # said of the function it is in, where that is not the one explained
            if not problem.reason.startswith("in `"):
                problem.reason = f"in `{shown}`, which it calls: {problem.reason}"
            raise
        finally:
            self.depth -= 1
            self.frames.pop()
            self.active.pop()
            self.entries.pop()
            self.inline_chain.pop()
            self.scopes, self.loops, self.returning, self.path, self.uses, self.assigned = saved

    def argument_values(
        self, closure: Closure, args: list, keywords: dict, span: Span, binding: Binding | None = None
    ) -> list:
        """The value of each parameter at a call, as `binding` (the checker's, or bound here for a call through a
        function value) says: an argument, a keyword, or the default (evaluated in the callee's module; a value
        at run time, so a literal default keeps its dtype)."""
        decl = closure.decl
        if binding is None:
            try:
                binding = bind_function("a function", decl.params, len(args), list(keywords), decl.span)
            except BindingError:
                raise Unsupported("a call that does not bind", span) from None
        values = []
        for param, source in zip(decl.params, binding.fixed, strict=True):
            if source is not None:
                value = args[source] if isinstance(source, int) else keywords[source]
                value = settled(value)  # an f32 or i64, as the interpreter binds it (and the checker types it)
            else:
                saved = (self.scopes, self.path)
                self.scopes, self.path = [dict(closure.captured)], closure.path
                try:
                    value = self.evaluate(param.default)
                finally:
                    self.scopes, self.path = saved
                if isinstance(value, Value) and value.weak is not None:
                    value = Value(value.operand)
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
                    layout.append(ir.StaticArgument(self.static_int(value, span)))
                else:
                    layout.append(self.passed(value, leaves, span))
            try:
                entry = self.registry.lower(decl, closure.path, tuple(layout), span)
                break
            except NeedsStatic as need:
                if need.position in statics:
                    raise Unsupported(need.reason, need.span) from None
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
        declared = self.typed.type_of(param)
        if not (isinstance(value, Value) and value.weak is not None and param.annotation is not None):
            return value
        if isinstance(declared, TensorType) and not declared.dims and declared.dtype == value.operand.dtype:
            return Value(value.operand)
        return value

    def passed(self, value: object, leaves: list, span: Span) -> ir.Layout:
        """The layout of an argument of a real call; its tensors (contiguous) and scalars go to `leaves`."""
        if isinstance(value, ir.Variable):
            value = self.read_variable(value)
        if isinstance(value, Tensor):
            leaves.append(self.plain(value).tree)
            return ir.TensorArgument(value.dtype, value.shape)
        if isinstance(value, Value):
            operand = value.operand
            if value.weak is not None:  # an unsuffixed literal: an int is an i64 (as `flatten` sees it)
                if isinstance(value.weak, float):
                    raise Unsupported("an unsuffixed float literal passed to a recursive call", span)
                operand = ir.Const(int(value.weak), "i64")
            leaves.append(operand)
            return ir.ScalarArgument(operand.dtype)
        if isinstance(value, tuple):
            return ir.TupleLayout(tuple(self.passed(item, leaves, span) for item in value))
        if isinstance(value, Struct):
            self.structs.seen[id(value.kind)] = value.kind
            items = tuple(self.passed(item, leaves, span) for item in value.values)
            return ir.StructLayout(id(value.kind), items, value.name)
        if isinstance(value, Text):
            return ir.TextLayout(value.value)
        raise Unsupported("a recursive call passing a value compiled code cannot pass", span)

    def received(self, layout: ir.Layout, results: list, name: str) -> object:
        """The value a real call returns, from the callee's result layout: tensors in buffers of this
        function's workspace and scalars in temporaries, each (slot, where) appended to `results`."""
        match layout:
            case ir.TensorResult(slot=slot, dtype=dtype, shape=shape):
                buffer = self.allocate(dtype, shape, f"call.{name}")
                results.append((slot, buffer))
                return view(buffer)
            case ir.ScalarResult(slot=slot, dtype=dtype):
                temp = self.temp(f"call.{name}", dtype)
                results.append((slot, temp))
                return Value(temp)
            case ir.TupleLayout(items=items):
                return tuple(self.received(item, results, name) for item in items)
            case ir.StructLayout(kind=struct_type, items=items):
                values = [self.received(item, results, name) for item in items]
                return Struct(struct_type, struct_type.name, struct_type.fields, values)
            case ir.TextLayout(text=text):
                return Text(text)
        return ()

    def inlined_body(self, decl: ast.FnDecl | ast.Lambda) -> object:
        if isinstance(decl.body, ast.Block):
            body = decl.body.body
            if body and isinstance(body[-1], ast.Return) and not any(returns_here(s) for s in body[:-1]):
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

        return matmul(self, left, right, span)


# ------------------------------------------------------------------ what a body uses and assigns


INTEGER_FOLDS = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "//": lambda a, b: a // b,
    "%": lambda a, b: a % b,
}


class ShapeChanged(Unsupported):
    """A variable with storage of one shape (assigned in a loop or `if`) given a value of another."""


GROWN = (
    "a tensor grown by `concat` in a loop has another shape each step: write each step into one made before "
    "the loop (`let outs = zeros(T, B, H)`, then `outs[t] = h`), as compiled code can"
)


def grown(target: ast.Expr, value: ast.Expr) -> bool:
    """`outs = concat((outs, x))`: a variable joined with more of itself (PyTorch's `outs.append(h)`, then
    `torch.stack(outs)`)."""
    if not isinstance(target, ast.Name) or not isinstance(value, ast.Call):
        return False
    callee = value.func.id if isinstance(value.func, ast.Name) else None
    read = any(isinstance(node, ast.Name) and node.id == target.id for node in ast.walk(value.args))
    return callee in ("concat", "stack") and read


def tuple_items(value: object, pattern: ast.Pattern) -> list[object] | None:
    """The values a `for` over a tuple's items binds its pattern to in turn, as the checker reads the loop
    (`check.zips`): the items of `layers` in `for layer in layers`, or for `for (a, b) in (t, u)` over tuples
    walked in step, `(t[k], u[k])`. None where the loop walks tensors' rows instead (or a tensor with tuples)."""
    if not isinstance(value, tuple):
        return None
    walked = (
        isinstance(pattern, ast.TuplePattern)
        and len(pattern.items) == len(value)
        and all(isinstance(part, tuple) or (isinstance(part, Tensor) and part.shape) for part in value)
    )
    if not walked:
        return list(value)
    if not all(isinstance(part, tuple) for part in value) or len({len(part) for part in value}) != 1:
        return None
    return [tuple(part[k] for part in value) for k in range(len(value[0]))]


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
    if op in COMPARE:
        return Value(ir.Const(COMPARE[op](a, b), "bool"))
    if op not in INTEGER_FOLDS or (op in ("//", "%") and b == 0):
        return None
    result = INTEGER_FOLDS[op](a, b)
    if not -(2**63) <= result < 2**63:
        return None
    return Value(ir.Const(result, "i64"), result if weak else None)


FLOAT_FOLDS = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide}


def floats_folded(op: str, left: Value, right: Value) -> Value | None:
    """`op` of two float constants (a literal the context gave a dtype: `arange(0.0, 1.0, 1.0 / 64.0)`'s step)
    computed now, in their dtype, as numpy computes them when interpreted (IEEE: the same bits), so that an
    `arange` of such bounds and a branch on them are known when compiling. An unsuffixed literal meeting a
    constant takes its dtype; two of them are the scalar lowering's `fold`.
    None where either is not a constant."""
    if not all(isinstance(v.operand, ir.Const) for v in (left, right)):
        return None
    strong = {v.operand.dtype for v in (left, right) if v.weak is None}
    if len(strong) != 1 or not strong <= {"f32", "f64"}:
        return None  # (two weak literals: `lower.fold`)
    (dtype,) = strong
    kind = NUMPY_DTYPES[dtype]
    a, b = (kind(v.operand.value if v.weak is None else v.weak) for v in (left, right))
    if op in COMPARE:
        return Value(ir.Const(bool(COMPARE[op](a, b)), "bool"))
    if op not in FLOAT_FOLDS:
        return None
    with np.errstate(all="ignore"):  # (`1.0 / 0.0` is inf, as the interpreter's numpy gives)
        result = FLOAT_FOLDS[op](a, b)
    return Value(ir.Const(float(result), dtype))


def bind_dimensions(declared: object, layout: ir.Layout, bindings: dict) -> None:
    """Bind the dimension names of a parameter's checked type to the sizes of its argument's layout."""
    tensor = isinstance(declared, TensorType) and isinstance(layout, ir.TensorArgument)
    if tensor and len(declared.dims) == len(layout.shape):
        for dimension, size in zip(declared.dims, layout.shape, strict=True):
            if isinstance(dimension, DimVar):
                bindings[dimension] = size
    elif (
        isinstance(declared, TupleType)
        and isinstance(layout, ir.TupleLayout)
        and len(declared.items) == len(layout.items)
    ):
        for item, part in zip(declared.items, layout.items, strict=True):
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
            for name in ast.target_names(node.target):
                assigned.add(name)
        if isinstance(node, (ast.While, ast.For)):
            weight = 2
        if isinstance(node, (ast.Lambda, ast.FnDecl)) and node is not body:
            weight = 2
        for child in ast.children(node):
            visit(child, weight)

    visit(body, 1)
    return uses, assigned


def annotation_fits(value: object, expected: object, bindings: dict[str, int], span: Span) -> None:
    """Check an annotation the checker left to run time, on the shapes known now (the interpreter's own
    check, given values of the right dtypes and shapes); a mismatch leaves the function to the interpreter,
    which reports it."""

    problem = conforms(stand_in(value), expected, bindings)
    if problem is not None:
        raise Unsupported(f"a value does not match its declared type: {problem}", span)


def stand_in(value: object) -> object:
    """A value of the same dtype and shape as an abstract one (no memory: a broadcast zero)."""
    if isinstance(value, Tensor):
        return np.broadcast_to(np.zeros((), dtype=NUMPY_DTYPES[value.dtype]), value.shape)
    if isinstance(value, Value):
        dtype = value.operand.dtype
        return {"i64": 0, "bool": False}.get(dtype) if dtype in ("i64", "bool") else NUMPY_DTYPES[dtype](0)
    if isinstance(value, tuple):
        return tuple(stand_in(v) for v in value)
    if isinstance(value, Struct):  # its fields, as conform reads a struct value's
        return StandIn(tuple(stand_in(v) for v in value.values))
    return "a function"


@record(frozen=True)
class StandIn:
    """A struct's stand-in for `conforms`: the stand-ins of its fields' values."""

    values: tuple


def function_declaration(typed: Typed, span: Span, name: str) -> tuple | None:
    """The function declaration of that name, or the lambda, (and its module) written at `span`. (The functions
    `grad` writes have the span of the function they are the derivative of: `f_grad` is not `f`.)"""

    def written_at(node: object) -> object | None:
        if isinstance(node, ast.Lambda) and node.span == span:
            return node
        if isinstance(node, ast.FnDecl) and node.span == span and node.name == name:
            return node
        for child in ast.children(node):
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


def returns_here(node: object) -> bool:
    """Does the statement `node` hold a `return` of its own function (a nested function's are its own)?"""
    return not isinstance(node, ast.FUNCTIONS) and any(isinstance(n, ast.Return) for n in ast.walk_scope(node))


def spread_ellipsis(indices: tuple, rank: int, span: Span) -> tuple:
    """`indices` with a `...` replaced by as many full slices as the axes the other indices leave."""
    ellipses = [at for at, index in enumerate(indices) if isinstance(index, ast.Ellipsis)]
    if not ellipses:
        return indices
    spread = rank - (len(indices) - 1)
    if len(ellipses) > 1 or spread < 0:
        raise Unsupported("an index the interpreter reports", span)
    at = ellipses[0]
    return (*indices[:at], *(ast.Slice(None, None, None),) * spread, *indices[at + 1 :])
