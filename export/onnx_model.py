"""ONNX export: one checked DL function and its weights -> an ONNX model (opset 18).

`to_onnx(typed, function, weights_parameter, weights)` lowers the function of a package's source (one
module, imports flattened: driver/package.py) by evaluating it abstractly, as the interpreter would run it
but emitting graph nodes instead of computing:

- what is known at export time stays a Python value and is folded (literals, constants, sizes of the
  weights, `if` on such values, tuples, structs, functions): only tensors become graph values;
- calls of DL functions are inlined (a recursive call is refused: ONNX has no calls);
- `if` on data becomes `If`; `while`, `for i in a..b` and `for x in xs` become `Loop`, carrying the
  variables the body assigns; `break`, `continue` and a `return` in an `if` are lowered by appending the
  rest of the block to each branch;
- each primitive has one handler (`HANDLERS`, by `Prim`; export/support.py lists those refused);
- the function's dimension names become `dim_param`s of the inputs and outputs, and the weights
  parameter becomes initializers (quantized per channel to int8 by export/quantize.py if asked).

A construct that cannot be exported (print, save, randomness, data loading, recursion, an `assert` on
data...) is E0607 at its span, naming it. Types come from the checker's own rules (lang/shapes.py through
the table of primitives), so the dtypes are the interpreter's.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import field
from typing import Any

import numpy as np
import onnx
from dl.export.support import SUPPORT
from dl.lang import ast
from dl.lang.calls import BindingError, arranged, bind, bind_function
from dl.lang.check import Signature
from dl.lang.diagnostics import DiagnosticError, Span, error
from dl.lang.modules import STDLIB_DIRECTORY, in_stdlib
from dl.lang.primitives import BY_NAME, PRIMITIVES, Prim
from dl.lang.record import record
from dl.lang.shapes import Argument, ShapeError, broadcast_dims, promote_dtypes
from dl.lang.types import ANY, UNKNOWN, DimVar, DTypeType, StrType, StructType, TensorType, TupleType, Type
from dl.runtime.values import float_steps
from onnx import TensorProto, helper, numpy_helper

OPSET = 18
ELEMENT_TYPES = {
    "f32": TensorProto.FLOAT,
    "f64": TensorProto.DOUBLE,
    "i32": TensorProto.INT32,
    "i64": TensorProto.INT64,
    "bool": TensorProto.BOOL,
}
NUMPY = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64, "bool": np.bool_}
INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min


class Refused(Exception):
    """A construct ONNX cannot express, at its span: becomes E0607."""

    def __init__(self, what: str, span: Span, why: str = "") -> None:
        super().__init__(what)
        self.what, self.span, self.why = what, span, why


# ---------------------------------------------------------------------- values during lowering


@record(frozen=True)
class Tensor:
    """A graph value: its name and its type (dims where known: ints, dimension names, or unknown)."""

    name: str
    type: TensorType

    @property
    def dtype(self) -> str:
        return self.type.dtype

    @property
    def rank(self) -> int:
        return self.type.rank


@record(frozen=True)
class Number:
    """A scalar known at export time; `weak` for an unsuffixed literal (it adapts as the interpreter's do)."""

    value: Any
    dtype: str
    weak: bool = False

    @property
    def type(self) -> TensorType:
        return TensorType(self.dtype, (), self.weak, self.value if self.dtype == "i64" else None)


@record(frozen=True)
class Struct:
    type: StructType
    fields: dict[str, Any]


@record(frozen=True)
class Closure:
    """A DL function as a value: a declaration or lambda, and the variables it captured."""

    decl: ast.FnDecl | ast.Lambda
    captured: dict[str, Any] = field(default_factory=dict)


@record(frozen=True)
class Primitive:
    prim: Prim


@record(frozen=True)
class Text:
    value: str


@record(frozen=True)
class DType:
    name: str


def number(value: Any) -> Number:
    """A Python or numpy scalar as DL holds it (an int is i64, a float literal f32)."""
    if isinstance(value, (bool, np.bool_)):
        return Number(bool(value), "bool")
    if isinstance(value, int):
        return Number(value, "i64")
    if isinstance(value, float):
        return Number(value, "f32")
    names = {np.float32: "f32", np.float64: "f64", np.int32: "i32", np.int64: "i64"}
    return Number(value, names[type(value)])


def value_type(value: Any) -> Type:
    match value:
        case Tensor() | Number():
            return value.type
        case Struct():
            return value.type
        case tuple():
            return TupleType(tuple(value_type(item) for item in value))
        case DType(name=name):
            return DTypeType(name)
    return TensorType("f32")  # functions and text reach no rule that reads their type


# ---------------------------------------------------------------------- the graph


class Graph:
    """The nodes of one ONNX graph (the model's, or an `If` branch's or `Loop` body's); names are unique
    across all of them, as ONNX requires."""

    def __init__(self, names: Callable[[str], str]) -> None:
        self.names = names
        self.nodes: list[onnx.NodeProto] = []

    def op(self, op_type: str, inputs: list[str], result: TensorType, **attributes) -> Tensor:
        name = self.names(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [name], **attributes))
        return Tensor(name, result)

    def ops(self, op_type: str, inputs: list[str], results: list[TensorType], **attributes) -> list[Tensor]:
        names = [self.names(op_type.lower()) for _ in results]
        self.nodes.append(helper.make_node(op_type, inputs, names, **attributes))
        return [Tensor(name, t) for name, t in zip(names, results, strict=True)]

    def constant(self, array: np.ndarray, dtype: str) -> Tensor:
        array = np.asarray(array, dtype=NUMPY[dtype])
        name = self.names("const")
        self.nodes.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(array, name)))
        return Tensor(name, TensorType(dtype, tuple(int(n) for n in array.shape)))

    def tensor(self, value: Any, dtype: str | None = None) -> Tensor:
        """A number or tensor as a graph value, converted to `dtype` if given."""
        if isinstance(value, Number):
            return self.constant(np.asarray(value.value), dtype or value.dtype)
        if not isinstance(value, Tensor):
            raise TypeError(f"not a tensor: {value!r}")
        return value if dtype is None or value.dtype == dtype else self.cast(value, dtype)

    def cast(self, value: Tensor, dtype: str) -> Tensor:
        return self.op("Cast", [value.name], TensorType(dtype, value.type.dims), to=ELEMENT_TYPES[dtype])

    def vector(self, items: list[Any]) -> Tensor:
        """A 1-d i64 tensor of scalars, folded when they are all known."""
        if all(isinstance(item, Number) for item in items):
            return self.constant(np.array([int(item.value) for item in items], dtype=np.int64), "i64")
        parts = [self.unsqueeze(self.tensor(item, "i64"), 0).name for item in items]
        return self.op("Concat", parts, TensorType("i64", (len(items),)), axis=0)

    def unsqueeze(self, value: Tensor, axis: int) -> Tensor:
        dims = list(value.type.dims)
        dims.insert(axis if axis >= 0 else len(dims) + axis + 1, 1)
        return self.op(
            "Unsqueeze", [value.name, self.constant(np.array([axis]), "i64").name], TensorType(value.dtype, tuple(dims))
        )

    def shape_of(self, value: Tensor) -> Tensor:
        return self.op("Shape", [value.name], TensorType("i64", (value.rank,)))

    def dim(self, value: Tensor, axis: int) -> Any:
        """The size of one axis: a number when the type knows it."""
        size = value.type.dims[axis]
        if isinstance(size, int):
            return Number(size, "i64")
        index = self.constant(np.array(axis), "i64")
        return self.op("Gather", [self.shape_of(value).name, index.name], TensorType("i64"), axis=0)


# ---------------------------------------------------------------------- outcomes of a block


@record
class Returned:
    value: Any


@record
class Ended:
    """A block that ran to its end (or to `break`/`continue`): the variables, and whether its loop goes on."""

    scope: dict[str, Any]
    going: Any = True  # a Python bool, a Number or a bool Tensor


@record
class Context:
    """The function being lowered: its module's declarations, the calls being inlined (for recursion)."""

    declarations: dict[str, ast.Decl]
    constants: dict[str, Any]
    inlining: list[ast.FnDecl | ast.Lambda]


# ---------------------------------------------------------------------- the lowering


class Lowering:
    def __init__(self, module: ast.Module) -> None:
        self.path = module.path
        self.declarations = {d.name: d for d in module.decls if not isinstance(d, ast.Import)}
        self.constants: dict[str, Any] = {}
        self.inlining: list[ast.FnDecl | ast.Lambda] = []
        counter = itertools.count()
        self.names = lambda hint: f"{hint}_{next(counter)}"
        self.root = Graph(self.names)  # the model's graph: module constants are computed there

    # ------------------------------------------------------------ names and declarations

    def lookup(self, name: str, scope: dict[str, Any], span: Span) -> Any:
        if name in scope:
            return scope[name]
        decl = self.declarations.get(name)
        match decl:
            case ast.FnDecl():
                return Closure(decl)
            case ast.Const():
                return self.constant(decl)
            case None if name in BY_NAME:
                return Primitive(BY_NAME[name])
            case None if name in ELEMENT_TYPES:
                return DType(name)
        raise AssertionError(f"unresolved name `{name}` at {span}")

    def constant(self, decl: ast.Const) -> Any:
        if decl.name not in self.constants:
            graph = self.root
            self.constants[decl.name] = self.expression(decl.value, {}, graph)
        return self.constants[decl.name]

    # ------------------------------------------------------------ functions

    def call_function(
        self, closure: Closure, args: list[Any], keywords: dict[str, Any], span: Span, graph: Graph
    ) -> Any:
        decl = closure.decl
        if any(active is decl for active in self.inlining):
            name = getattr(decl, "name", "a lambda")
            raise Refused(f"recursion (`{name}` calls itself)", span, "ONNX has no calls: each is inlined")
        name = getattr(decl, "name", "fn")
        try:
            binding = bind_function(name, decl.params, len(args), list(keywords), span)
        except BindingError as problem:
            raise AssertionError(f"a checked call does not bind: {problem}") from None
        scope = dict(closure.captured)
        for param, source in zip(decl.params, binding.fixed, strict=True):
            if isinstance(source, int):
                scope[param.name] = args[source]
            elif isinstance(source, str):
                scope[param.name] = keywords[source]
            else:
                scope[param.name] = self.expression(param.default, {}, graph)
        self.inlining.append(decl)
        try:
            if isinstance(decl.body, ast.Block):
                outcome = self.block(list(decl.body.body), scope, graph, in_loop=False)
                return outcome.value if isinstance(outcome, Returned) else ()
            return self.expression(decl.body, scope, graph)
        except Refused as refusal:  # inside the standard library: shown at the call the user wrote
            if in_stdlib(refusal.span.path) and not in_stdlib(span.path):
                where = f"the standard library's {refusal.span.path[len(STDLIB_DIRECTORY) + 1 :]}:{refusal.span.line}"
                inside = f"reached through `{name.replace('__', '.')}` ({where})"
                raise Refused(refusal.what, span, f"{refusal.why}; {inside}" if refusal.why else inside) from None
            raise
        finally:
            self.inlining.pop()

    # ------------------------------------------------------------ statements

    def block(self, statements: list[ast.Stmt], scope: dict[str, Any], graph: Graph, in_loop: bool) -> Returned | Ended:
        """Run `statements` in `scope` (a copy: the caller keeps its own), up to a `return`, `break` or
        `continue`; an `if` that may leave the block takes the rest of the block into both its branches."""
        scope = dict(scope)
        for position, statement in enumerate(statements):
            rest = statements[position + 1 :]
            match statement:
                case ast.Return(value=value):
                    return Returned(() if value is None else self.expression(value, scope, graph))
                case ast.Break():
                    return Ended(scope, False)
                case ast.Continue():
                    return Ended(scope, True)
                case ast.If() if leaves(statement):
                    return self.if_statement(statement, scope, graph, in_loop, rest)
                case _:
                    self.statement(statement, scope, graph)
        return Ended(scope, True)

    def statement(self, statement: ast.Stmt, scope: dict[str, Any], graph: Graph) -> None:
        match statement:
            case ast.Let(pattern=pattern, value=value):
                self.bind_pattern(pattern, self.expression(value, scope, graph), scope)
            case ast.Assign():
                self.assign(statement, scope, graph)
            case ast.ExprStmt(expr=expr):
                self.expression(expr, scope, graph)
            case ast.If():
                outcome = self.if_statement(statement, scope, graph, False, [])
                scope.update({name: outcome.scope[name] for name in scope})
            case ast.While():
                self.while_loop(statement, scope, graph)
            case ast.For():
                self.for_loop(statement, scope, graph)
            case ast.FnDecl(name=name):
                scope[name] = Closure(statement, dict(scope))
            case _:
                raise AssertionError(f"unexpected statement {statement!r}")

    def bind_pattern(self, pattern: ast.Pattern, value: Any, scope: dict[str, Any]) -> None:
        if isinstance(pattern, ast.NamePattern):
            scope[pattern.name] = value
            return
        for item, part in zip(pattern.items, value, strict=True):
            self.bind_pattern(item, part, scope)

    def assign(self, statement: ast.Assign, scope: dict[str, Any], graph: Graph) -> None:
        value = self.expression(statement.value, scope, graph)
        if statement.op != "=":
            current = self.expression(statement.target, scope, graph)
            value = self.binary(statement.op[0], current, value, statement.span, graph)
        self.store(statement.target, value, scope, graph)

    def store(self, target: ast.Expr, value: Any, scope: dict[str, Any], graph: Graph) -> None:
        match target:
            case ast.Name(id=name):
                scope[name] = value
            case ast.TupleLiteral(items=items):
                for item, part in zip(items, value, strict=True):
                    self.store(item, part, scope, graph)
            case ast.Field(target=inner, name=name):
                record = self.expression(inner, scope, graph)
                self.store(inner, Struct(record.type, {**record.fields, name: value}), scope, graph)
            case ast.Index(target=inner, indices=indices):
                self.store(
                    inner,
                    self.store_element(target, self.expression(inner, scope, graph), indices, value, scope, graph),
                    scope,
                    graph,
                )

    def store_element(self, target: ast.Index, whole: Any, indices, value: Any, scope, graph: Graph) -> Any:
        """`x[i, j] = v` as `ScatterND`: integer indices on the leading axes only."""
        if isinstance(whole, tuple):
            raise Refused("an assignment to a tuple's item", target.span)
        if any(isinstance(index, ast.Slice) for index in indices):
            raise Refused("an assignment to a slice", target.span, "assign whole rows with integer indices")
        positions = [self.expression(index, scope, graph) for index in indices]
        if any(isinstance(p, Tensor) and p.rank for p in positions):
            raise Refused("an assignment at a tensor of indices", target.span)
        whole = graph.tensor(whole)
        place = graph.unsqueeze(graph.vector(positions), 0)
        rest = graph.op(
            "Slice",
            [
                graph.shape_of(whole).name,
                graph.constant(np.array([len(indices)]), "i64").name,
                graph.constant(np.array([INT64_MAX]), "i64").name,
            ],
            TensorType("i64", (UNKNOWN,)),
        )
        update = graph.op(
            "Expand",
            [graph.tensor(value, whole.dtype).name, rest.name],
            TensorType(whole.dtype, whole.type.dims[len(indices) :]),
        )
        update = graph.unsqueeze(update, 0)
        return graph.op("ScatterND", [whole.name, place.name, update.name], whole.type)

    # ------------------------------------------------------------ if

    def if_statement(self, statement: ast.If, scope, graph: Graph, in_loop: bool, rest: list) -> Returned | Ended:
        condition = self.expression(statement.cond, scope, graph)
        otherwise = [] if statement.orelse is None else as_statements(statement.orelse)
        then = [*statement.then.body, *rest]
        otherwise = [*otherwise, *rest]
        if isinstance(condition, Number):
            return self.block(then if condition.value else otherwise, scope, graph, in_loop)
        outcomes = []
        branches = []
        for statements in (then, otherwise):
            branch = Graph(self.names)
            outcomes.append(self.block(statements, scope, branch, in_loop))
            branches.append(branch)
        return self.merge(condition, branches, outcomes, scope, graph, [*then, *otherwise])

    def merge(self, condition: Tensor, branches: list[Graph], outcomes: list, scope, graph: Graph, statements: list):
        """One `If` node whose outputs are what the two outcomes hold: a return value, or the variables of
        `scope` (and whether a loop goes on)."""
        kinds = {type(outcome) for outcome in outcomes}
        if kinds == {Returned}:
            values = [outcome.value for outcome in outcomes]
            (result,) = self.if_node(condition, branches, [[v] for v in values], graph)
            return Returned(result)
        if Returned in kinds:
            raise Refused("a `return` inside a loop", first_return(statements), "return after the loop instead")
        changed = [name for name in scope if any(outcome.scope[name] is not scope[name] for outcome in outcomes)]
        going = [outcome.going for outcome in outcomes]
        dynamic_going = not all(g is True for g in going)
        per_branch = [
            [*(outcome.scope[name] for name in changed), *([as_bool(outcome.going)] if dynamic_going else [])]
            for outcome in outcomes
        ]
        results = self.if_node(condition, branches, per_branch, graph)
        merged = dict(scope)
        merged.update(zip(changed, results, strict=False))
        return Ended(merged, results[-1] if dynamic_going else True)

    def if_node(self, condition: Tensor, branches: list[Graph], values: list[list[Any]], graph: Graph) -> list[Any]:
        """`If(condition)` returning `values[0]` from the first branch and `values[1]` from the second: trees of
        one structure, whose leaves become the node's outputs."""
        structure = values[0]
        leaves_per_branch = [flatten_leaves(v) for v in values]
        outputs_types = []
        subgraphs = []
        for branch, leaves_of_branch in zip(branches, leaves_per_branch, strict=True):
            outputs = []
            for position, leaf in enumerate(leaves_of_branch):
                other = leaves_per_branch[1 - len(subgraphs)][position]
                dtype = joined_dtype(leaf, other)
                value = branch.op("Identity", [branch.tensor(leaf, dtype).name], leaf_type(leaf, dtype))
                outputs.append(value)
            subgraphs.append(self.subgraph(branch, [], outputs))
            outputs_types.append([o.type for o in outputs])
        types = [join_types(a, b) for a, b in zip(*outputs_types, strict=True)]
        results = (
            graph.ops("If", [condition.name], types, then_branch=subgraphs[0], else_branch=subgraphs[1])
            if types
            else []
        )
        return rebuild(structure, iter(results))

    def subgraph(self, graph: Graph, inputs: list[Tensor], outputs: list[Tensor]) -> onnx.GraphProto:
        return helper.make_graph(
            graph.nodes,
            self.names("graph"),
            [value_info(value.name, value.type, known=False) for value in inputs],
            [value_info(value.name, value.type, known=False) for value in outputs],
        )

    # ------------------------------------------------------------ loops

    def while_loop(self, statement: ast.While, scope, graph: Graph) -> None:
        condition = self.expression(statement.cond, scope, graph)
        if isinstance(condition, Number) and not condition.value:
            return
        self.loop(statement, scope, graph, trip_count=None, first=condition, element=None)

    def for_loop(self, statement: ast.For, scope, graph: Graph) -> None:
        iterable = statement.iterable
        if isinstance(iterable, ast.Range):
            start = self.expression(iterable.start, scope, graph)
            stop = self.expression(iterable.stop, scope, graph)
            count = self.binary("-", stop, start, statement.span, graph)
            count = graph.op(
                "Max", [graph.tensor(count, "i64").name, graph.constant(np.array(0), "i64").name], TensorType("i64")
            )

            def element(index: Tensor, body: Graph) -> Any:
                return self.binary("+", start, index, statement.span, body)

            self.loop(statement, scope, graph, trip_count=count, first=Number(True, "bool"), element=element)
            return
        items = self.expression(iterable, scope, graph)
        if isinstance(items, tuple) and not zipped(statement.pattern, items):
            for item in items:  # a tuple's items: unrolled, each its own type
                inner = dict(scope)
                self.bind_pattern(statement.pattern, item, inner)
                outcome = self.block(list(statement.body.body), inner, graph, in_loop=True)
                if isinstance(outcome, Returned) or outcome.going is not True:
                    raise Refused("`break`, `continue` or `return` in a loop over a tuple", statement.span)
                scope.update({name: outcome.scope[name] for name in scope})
            return
        sequences = list(items) if isinstance(items, tuple) else [items]
        count = graph.dim(graph.tensor(sequences[0]), 0)

        def element(index: Tensor, body: Graph) -> Any:
            rows = [self.gather(sequence, index, 0, body) for sequence in sequences]
            return tuple(rows) if isinstance(items, tuple) else rows[0]

        self.loop(
            statement, scope, graph, trip_count=graph.tensor(count, "i64"), first=Number(True, "bool"), element=element
        )

    def loop(self, statement, scope, graph: Graph, trip_count, first, element) -> None:
        """A `Loop` carrying the variables of `scope` the body assigns; `element(index)` is the loop variable's
        value (a `for`), and a `while` computes its condition again at the end of each iteration."""
        assigned = [name for name in scope if name in ast.assigned_names(statement.body)]
        initial = [scope[name] for name in assigned]
        carried_leaves = [graph.tensor(leaf) for leaf in flatten_leaves(initial)]
        body = Graph(self.names)
        index = Tensor(self.names("iteration"), TensorType("i64"))
        going_in = Tensor(self.names("going"), TensorType("bool"))
        inputs = [Tensor(self.names(f"{leaf.name}_in"), unknown_dims(leaf.type)) for leaf in carried_leaves]
        inner = dict(scope)
        inner.update(zip(assigned, rebuild(initial, iter(inputs)), strict=True))
        if element is not None:
            self.bind_pattern(statement.pattern, element(index, body), inner)
        outcome = self.block(list(statement.body.body), inner, body, in_loop=True)
        if isinstance(outcome, Returned):
            raise Refused(
                "a `return` inside a loop", first_return(statement.body.body), "return after the loop instead"
            )
        going = outcome.going
        if isinstance(statement, ast.While):
            again = self.expression(statement.cond, outcome.scope, body)
            going = again if going is True else self.logical("and", going, again, body)
        going_out = body.op("Identity", [body.tensor(as_bool(going), "bool").name], TensorType("bool"))
        finals = [
            body.op("Identity", [body.tensor(leaf, start.dtype).name], start.type)
            for leaf, start in zip(
                flatten_leaves([outcome.scope[name] for name in assigned]), carried_leaves, strict=True
            )
        ]
        proto = self.subgraph(body, [index, going_in, *inputs], [going_out, *finals])
        count = "" if trip_count is None else trip_count.name
        results = graph.ops(
            "Loop",
            [count, graph.tensor(first, "bool").name, *(leaf.name for leaf in carried_leaves)],
            [unknown_dims(leaf.type) for leaf in carried_leaves],
            body=proto,
        )
        scope.update(zip(assigned, rebuild(initial, iter(results)), strict=True))

    # ------------------------------------------------------------ expressions

    def expression(self, expr: ast.Expr, scope: dict[str, Any], graph: Graph) -> Any:
        match expr:
            case ast.IntLiteral(value=value, dtype=dtype):
                return Number(value, dtype or "i64", dtype is None)
            case ast.FloatLiteral(value=value, dtype=dtype):
                return Number(value, dtype or "f32", dtype is None)
            case ast.BoolLiteral(value=value):
                return Number(value, "bool")
            case ast.StringLiteral(value=value):
                return Text(value)
            case ast.FString():
                return Text("")
            case ast.Name(id=name):
                return self.lookup(name, scope, expr.span)
            case ast.Unary(op=op, operand=operand):
                return self.unary(op, self.expression(operand, scope, graph), expr.span, graph)
            case ast.Binary(op=op, lhs=lhs, rhs=rhs) if op in ("and", "or"):
                left = self.expression(lhs, scope, graph)
                if isinstance(left, Number) and left.value == (op == "or"):
                    return left  # short-circuit, as the interpreter
                return self.logical(op, left, self.expression(rhs, scope, graph), graph)
            case ast.Binary(op=op, lhs=lhs, rhs=rhs):
                left, right = self.expression(lhs, scope, graph), self.expression(rhs, scope, graph)
                return self.binary(op, left, right, expr.span, graph)
            case ast.Call():
                return self.call(expr, scope, graph)
            case ast.Index(target=target, indices=indices):
                return self.index(expr, self.expression(target, scope, graph), indices, scope, graph)
            case ast.Field(target=target, name=name):
                return self.expression(target, scope, graph).fields[name]
            case ast.TupleLiteral(items=items):
                return tuple(self.expression(item, scope, graph) for item in items)
            case ast.TensorLiteral(items=items):
                return self.tensor_literal([self.expression(item, scope, graph) for item in items], graph)
            case ast.StructLiteral(type=ast.Name(id=name), fields=fields):
                decl = self.declarations[name]
                values = {f.name: self.expression(f.value, scope, graph) for f in fields}
                struct = StructType(
                    name, self.typed.program.entry, tuple((f.name, value_type(values[f.name])) for f in decl.fields)
                )
                return Struct(struct, {f.name: values[f.name] for f in decl.fields})
            case ast.Lambda():
                return Closure(expr, dict(scope))
        raise Refused(f"`{type(expr).__name__}`", expr.span)

    def tensor_literal(self, items: list[Any], graph: Graph) -> Any:
        if all(isinstance(item, Number) for item in items):
            dtype = items[0].type
            for item in items[1:]:
                dtype = TensorType(promote_dtypes(dtype, item.type), (), dtype.weak and item.weak)
            name = "f32" if dtype.weak and dtype.dtype == "f32" else dtype.dtype
            return graph.constant(np.array([item.value for item in items]), name)
        dtype = items[0].type
        for item in items[1:]:
            dtype = TensorType(promote_dtypes(dtype, item.type), (), dtype.weak and item.weak)
        rows = [graph.unsqueeze(graph.tensor(item, dtype.dtype), 0) for item in items]
        inner = rows[0].type.dims[1:]
        return graph.op("Concat", [row.name for row in rows], TensorType(dtype.dtype, (len(items), *inner)), axis=0)

    def unary(self, op: str, operand: Any, span: Span, graph: Graph) -> Any:
        if isinstance(operand, Number):
            value = (not operand.value) if op == "not" else -operand.value
            return Number(
                NUMPY[operand.dtype](value) if not operand.weak and operand.dtype != "i64" else value,
                operand.dtype,
                operand.weak,
            )
        return graph.op("Not" if op == "not" else "Neg", [operand.name], operand.type)

    def logical(self, op: str, left: Any, right: Any, graph: Graph) -> Any:
        if isinstance(left, Number) and isinstance(right, Number):
            return Number(bool(left.value and right.value) if op == "and" else bool(left.value or right.value), "bool")
        if isinstance(right, Number):
            left, right = right, left
        if isinstance(left, Number):  # a known operand decides, or leaves the other
            decides = (op == "and" and not left.value) or (op == "or" and left.value)
            return left if decides else right
        dims = broadcast_dims(left.type.dims, right.type.dims) or (UNKNOWN,) * max(left.rank, right.rank)
        return graph.op("And" if op == "and" else "Or", [left.name, right.name], TensorType("bool", dims))

    def binary(self, op: str, left: Any, right: Any, span: Span, graph: Graph) -> Any:
        if isinstance(left, Text) or isinstance(right, Text):
            if op in ("==", "!=") and isinstance(left, Text) and isinstance(right, Text):
                return Number((left.value == right.value) == (op == "=="), "bool")
            raise Refused("text", span, "ONNX tensors hold numbers")
        if op == "@":
            return self.primitive(Prim.MATMUL, [left, right], span, graph)
        dtype = promote_dtypes(left.type, right.type)
        if isinstance(left, Number) and isinstance(right, Number):
            return fold(op, left, right, dtype)
        return arithmetic(op, graph.tensor(left, dtype), graph.tensor(right, dtype), graph)

    # ------------------------------------------------------------ calls

    def call(self, expr: ast.Call, scope, graph: Graph) -> Any:
        function = self.expression(expr.func, scope, graph)
        args = [self.expression(arg, scope, graph) for arg in expr.args]
        keywords = {k.name: self.expression(k.value, scope, graph) for k in expr.keywords}
        return self.apply(function, args, keywords, expr.span, graph)

    def apply(self, function: Any, args: list[Any], keywords: dict[str, Any], span: Span, graph: Graph) -> Any:
        if isinstance(function, Closure):
            return self.call_function(function, args, keywords, span, graph)
        record = PRIMITIVES[function.prim]
        try:
            binding = bind(record.signature, len(args), list(keywords))
        except BindingError as problem:
            raise AssertionError(f"a checked call does not bind: {problem}") from None
        values = arranged(record, binding, args, keywords, default_value)
        given = arranged(record, binding, args, keywords, lambda _: NOT_GIVEN)
        return self.primitive(function.prim, values, span, graph, given)

    def primitive(self, prim: Prim, values: list[Any], span: Span, graph: Graph, given: list[Any] | None = None) -> Any:
        training = values[-1] if prim is Prim.DROPOUT else None
        if isinstance(training, Number) and not training.value:  # the inference path: dropout is `x` itself
            return values[0]
        if prim not in HANDLERS:
            raise Refused(f"`{prim.value}`", span, SUPPORT.refused[prim])
        return HANDLERS[prim](Call(self, graph, values, given if given is not None else values, prim, span))

    # ------------------------------------------------------------ indexing

    def index(self, expr: ast.Index, target: Any, indices, scope, graph: Graph) -> Any:
        if isinstance(target, tuple):
            position = self.expression(indices[0], scope, graph)
            if not isinstance(position, Number):
                raise Refused("a tuple indexed by a value computed from data", expr.span)
            return target[position.value]
        value = graph.tensor(target)
        positions = {k: self.expression(i, scope, graph) for k, i in enumerate(indices) if not isinstance(i, ast.Slice)}
        tensors = [k for k, position in positions.items() if isinstance(position, Tensor) and position.rank]
        if len(tensors) > 1:
            raise Refused("indexing by more than one tensor of indices", expr.span)
        picks = list(positions)
        if tensors and picks != list(range(picks[0], picks[-1] + 1)):
            # numpy puts the picked axes first there (`x[0, :, j]`), which a Gather per axis does not
            raise Refused("indexing by integers and a tensor of indices parted by a slice", expr.span)
        axis = 0
        for k, index in enumerate(indices):
            if isinstance(index, ast.Slice):
                value = self.slice(value, axis, index, scope, graph)
                axis += 1
                continue
            position = positions[k]
            value = self.gather(value, position, axis, graph)
            axis += position.rank if isinstance(position, Tensor) else 0
        return value

    def gather(self, value: Any, position: Any, axis: int, graph: Graph) -> Tensor:
        value = graph.tensor(value)
        index = graph.tensor(position, "i64")
        dims = (*value.type.dims[:axis], *index.type.dims, *value.type.dims[axis + 1 :])
        return graph.op("Gather", [value.name, index.name], TensorType(value.dtype, dims), axis=axis)

    def slice(self, value: Tensor, axis: int, part: ast.Slice, scope, graph: Graph) -> Tensor:
        step = Number(1, "i64") if part.step is None else self.expression(part.step, scope, graph)
        backwards = isinstance(step, Number) and step.value < 0
        start = self.bound(part.start, INT64_MAX if backwards else 0, scope, graph)
        stop = self.bound(part.stop, INT64_MIN if backwards else INT64_MAX, scope, graph)
        dims = list(value.type.dims)
        dims[axis] = static_slice(dims[axis], start, stop, step)
        inputs = [
            graph.vector([start]),
            graph.vector([stop]),
            graph.constant(np.array([axis]), "i64"),
            graph.vector([step]),
        ]
        return graph.op("Slice", [value.name, *(v.name for v in inputs)], TensorType(value.dtype, tuple(dims)))

    def bound(self, expr: ast.Expr | None, default: int, scope, graph: Graph) -> Any:
        return Number(default, "i64") if expr is None else self.expression(expr, scope, graph)


# ---------------------------------------------------------------------- helpers of the lowering


def leaves(statement: ast.If) -> bool:
    """Whether an `if` may leave its block: a `return`, or a `break`/`continue` of the enclosing loop."""
    for node in ast.walk_scope(statement):
        if isinstance(node, ast.Return):
            return True
    return any(isinstance(node, (ast.Break, ast.Continue)) for node in outside_loops(statement))


def outside_loops(node: object):
    stack = [node]
    while stack:
        current = stack.pop()
        if not isinstance(current, tuple):
            yield current
            if isinstance(current, (ast.While, ast.For, *ast.FUNCTIONS)):
                continue
        stack.extend(ast.children(current))


def first_return(statements: list[ast.Stmt]) -> Span:
    return next(node.span for node in ast.walk_scope(tuple(statements)) if isinstance(node, ast.Return))


def as_statements(orelse: ast.Block | ast.If) -> list[ast.Stmt]:
    return list(orelse.body) if isinstance(orelse, ast.Block) else [orelse]


def as_bool(going: Any) -> Any:
    return Number(going, "bool") if isinstance(going, bool) else going


def zipped(pattern: ast.Pattern, items: tuple) -> bool:
    """`for (x, y) in (xs, ys)` walks tensors together (the checker's `zips`)."""
    return (
        isinstance(pattern, ast.TuplePattern)
        and len(pattern.items) == len(items)
        and all(isinstance(item, Tensor) and item.rank for item in items)
    )


def flatten_leaves(value: Any) -> list[Any]:
    match value:
        case tuple() | list():
            return [leaf for item in value for leaf in flatten_leaves(item)]
        case Struct(fields=fields):
            return [leaf for item in fields.values() for leaf in flatten_leaves(item)]
        case Tensor() | Number():
            return [value]
    raise Refused("a function or text carried by a loop or an `if` on data", Span("", 0, 0, 0, 0))


def rebuild(structure: Any, replacements) -> Any:
    match structure:
        case tuple():
            return tuple(rebuild(item, replacements) for item in structure)
        case list():
            return [rebuild(item, replacements) for item in structure]
        case Struct(type=struct_type, fields=fields):
            return Struct(struct_type, {name: rebuild(item, replacements) for name, item in fields.items()})
    return next(replacements)


def joined_dtype(a: Any, b: Any) -> str:
    """The dtype two branches' values of one variable share (a literal adapts, as the interpreter's)."""
    if isinstance(a, Number) and a.weak:
        return b.dtype if not isinstance(b, Number) or not b.weak else a.dtype
    return a.dtype


def leaf_type(leaf: Any, dtype: str) -> TensorType:
    return TensorType(dtype, leaf.type.dims if isinstance(leaf, Tensor) else ())


def join_types(a: TensorType, b: TensorType) -> TensorType:
    dims = tuple(x if x == y else UNKNOWN for x, y in zip(a.dims, b.dims, strict=True))
    return TensorType(a.dtype, dims)


def unknown_dims(t: TensorType) -> TensorType:
    return TensorType(t.dtype, (UNKNOWN,) * t.rank)


def static_slice(size: Any, start: Any, stop: Any, step: Any) -> Any:
    if all(isinstance(v, Number) for v in (start, stop, step)) and isinstance(size, int):
        return len(range(size)[slice(start.value, stop.value, step.value)])
    return UNKNOWN


def default_value(value: Any) -> Any:
    """A primitive's default argument as a lowering value."""
    if value is None:
        return None
    if value == "f32":
        return DType("f32")
    return number(value)


def fold(op: str, left: Number, right: Number, dtype: str) -> Number:
    """An operation on two known numbers, with the interpreter's result."""
    from dl.interp.operators import general  # the interpreter's own arithmetic, for known values

    a = left.value if left.weak or left.dtype in ("i64", "bool") else NUMPY[left.dtype](left.value)
    b = right.value if right.weak or right.dtype in ("i64", "bool") else NUMPY[right.dtype](right.value)
    result = general(op, a, b, left.weak, right.weak)
    found = number(result)
    weak = left.weak and right.weak
    return Number(found.value, found.dtype if not weak else ("f32" if isinstance(result, float) else found.dtype), weak)


ARITHMETIC = {"+": "Add", "-": "Sub", "*": "Mul", "/": "Div", "**": "Pow"}
COMPARISONS = {"==": "Equal", "<": "Less", ">": "Greater", "<=": "LessOrEqual", ">=": "GreaterOrEqual"}


def arithmetic(op: str, left: Tensor, right: Tensor, graph: Graph) -> Tensor:
    dims = broadcast_dims(left.type.dims, right.type.dims) or (UNKNOWN,) * max(left.rank, right.rank)
    result = TensorType(left.dtype, dims)
    if op in ARITHMETIC:
        return graph.op(ARITHMETIC[op], [left.name, right.name], result)
    if op in COMPARISONS:
        return graph.op(COMPARISONS[op], [left.name, right.name], TensorType("bool", dims))
    if op == "!=":
        equal = graph.op("Equal", [left.name, right.name], TensorType("bool", dims))
        return graph.op("Not", [equal.name], equal.type)
    if op == "%" and left.dtype in ("i32", "i64"):
        return graph.op("Mod", [left.name, right.name], result, fmod=0)  # the sign of the divisor, as Python's
    quotient = graph.op("Div", [left.name, right.name], result)
    if left.dtype in ("i32", "i64"):  # Div truncates integers: floor is truncation less one where the signs differ
        remainder = graph.op("Mod", [left.name, right.name], result, fmod=0)
        exact = graph.op("Sub", [left.name, remainder.name], result)
        quotient = graph.op("Div", [exact.name, right.name], result)
    else:
        quotient = graph.op("Floor", [quotient.name], result)
    if op == "//":
        return quotient
    product = graph.op("Mul", [quotient.name, right.name], result)
    return graph.op("Sub", [left.name, product.name], result)


NOT_GIVEN = object()  # a parameter left to its default, as the checker's rules see it


def result_type(prim: Prim, given: list[Any], span: Span) -> Any:
    """The checker's rule for the call (lang/shapes.py): the result's dtype and dims from the arguments'."""
    record = PRIMITIVES[prim]
    signature = record.signature
    variadic_at = len(signature.positional) + len(signature.optional) if signature.variadic else -1
    arguments: list[Argument] = []
    for position, value in enumerate(given):
        if position == variadic_at:
            arguments.extend(argument(item) for item in value)
        else:
            arguments.append(argument(value))
    try:
        return record.rule(arguments)
    except ShapeError as problem:
        raise AssertionError(f"the rule of `{prim.value}` refused a checked call at {span}: {problem}") from None


def argument(value: Any) -> Argument:
    if value is NOT_GIVEN:
        return Argument(ANY, None, given=False)
    if isinstance(value, Text):
        return Argument(StrType(), text=value.value)
    static = value.value if isinstance(value, Number) and value.dtype in ("i64", "i32", "bool") else None
    return Argument(value_type(value), None if static is None else int(static))


# ---------------------------------------------------------------------- the primitives


@record
class Call:
    """One primitive call being lowered: its arguments in parameter order (defaults filled in), and the
    result type the checker's rule gives (`given`: the arguments with defaults left out, as the rule takes
    them)."""

    lowering: Lowering
    graph: Graph
    values: list[Any]
    given: list[Any]
    prim: Prim
    span: Span

    @functools.cached_property
    def result(self) -> Any:
        return result_type(self.prim, self.given, self.span)

    def tensor(self, position: int, dtype: str | None = None) -> Tensor:
        return self.graph.tensor(self.values[position], dtype)

    def static(self, position: int) -> Any:
        value = self.values[position]
        return value if value is None or isinstance(value, tuple) else value.value

    def op(self, op_type: str, inputs: list[Tensor], **attributes) -> Tensor:
        return self.graph.op(op_type, [i.name for i in inputs], self.result, **attributes)

    def axes(self, axis: int | tuple | None) -> list[Tensor]:
        """A reduction's `axes` input: none for every axis, else one axis or a tuple of them."""
        if axis is None:
            return []
        axes = [int(item.value) for item in axis] if isinstance(axis, tuple) else [axis]
        return [self.graph.constant(np.array(axes), "i64")]


def unary(op_type: str) -> Callable[[Call], Tensor]:
    def lower(call: Call) -> Tensor:
        return call.op(op_type, [call.tensor(0, call.result.dtype)])

    return lower


def float_test(prim: Prim) -> Callable[[Call], Tensor]:
    """`isnan` and `isinf` are ONNX's IsNaN and IsInf; `isfinite` is neither."""

    def lower(call: Call) -> Tensor:
        x = call.tensor(0)
        if prim is Prim.ISNAN:
            return call.op("IsNaN", [x])
        if prim is Prim.ISINF:
            return call.op("IsInf", [x])
        graph, result = call.graph, call.result
        nan, infinite = graph.op("IsNaN", [x.name], result), graph.op("IsInf", [x.name], result)
        return call.op("Not", [graph.op("Or", [nan.name, infinite.name], result)])

    return lower


def truth(kind: str) -> Callable[[Call], Tensor]:
    """`any` (`kind`) and `all`: the count of true (for `all`, false) elements over the axes, compared with 0."""

    def lower(call: Call) -> Tensor:
        graph, x = call.graph, call.tensor(0, "bool")
        counted = x if kind == "any" else graph.op("Not", [x.name], x.type)
        ones = graph.cast(counted, "i64")
        count_type = TensorType("i64", call.result.dims)
        keepdims = int(bool(call.static(2)))
        axes = [a.name for a in call.axes(call.static(1))]
        count = graph.op("ReduceSum", [ones.name, *axes], count_type, keepdims=keepdims)
        zero = graph.constant(np.array(0), "i64")
        return call.op("Greater" if kind == "any" else "Equal", [count, zero])

    return lower


def clip(call: Call) -> Tensor:
    """`Min(Max(x, lo), hi)`: ONNX's `Clip` takes scalar bounds only, and these broadcast."""
    dtype = call.result.dtype
    larger = call.graph.op("Max", [call.tensor(0, dtype).name, call.tensor(1, dtype).name], call.result)
    return call.op("Min", [larger, call.tensor(2, dtype)])


def pairwise(op_type: str) -> Callable[[Call], Tensor]:
    def lower(call: Call) -> Tensor:
        return call.op(op_type, [call.tensor(0, call.result.dtype), call.tensor(1, call.result.dtype)])

    return lower


def log1p(call: Call) -> Tensor:
    """`log(1 + x)` without losing small `x` (ONNX has no Log1p): `log(u) * x / (u - 1)` for `u = 1 + x`
    rounded, which cancels the rounding of `u`; `x` itself where `u` rounds to 1."""
    graph, x = call.graph, call.tensor(0, call.result.dtype)
    one = graph.constant(np.array(1), x.dtype)
    u = graph.op("Add", [x.name, one.name], x.type)
    below = graph.op("Sub", [u.name, one.name], x.type)
    scaled = graph.op(
        "Div", [graph.op("Mul", [graph.op("Log", [u.name], x.type).name, x.name], x.type).name, below.name], x.type
    )
    exact = graph.op("Equal", [u.name, one.name], TensorType("bool", x.type.dims))
    return call.op("Where", [exact, x, scaled])


def expm1(call: Call) -> Tensor:
    """`exp(x) - 1` without losing small `x` (ONNX has no Expm1): `(u - 1) * x / log(u)` for `u = exp(x)`
    rounded; `x` where `u` rounds to 1, and `u - 1` where it is far from 1 (`log(u)` would be inf or 0)."""
    graph, x = call.graph, call.tensor(0, call.result.dtype)
    flags = TensorType("bool", x.type.dims)
    one = graph.constant(np.array(1), x.dtype)
    u = graph.op("Exp", [x.name], x.type)
    below = graph.op("Sub", [u.name, one.name], x.type)
    scaled = graph.op(
        "Div", [graph.op("Mul", [below.name, x.name], x.type).name, graph.op("Log", [u.name], x.type).name], x.type
    )
    far = graph.op(
        "Greater", [graph.op("Abs", [x.name], x.type).name, graph.constant(np.array(0.5), x.dtype).name], flags
    )
    outer = graph.op("Where", [far.name, below.name, scaled.name], x.type)
    exact = graph.op("Equal", [u.name, one.name], flags)
    return call.op("Where", [exact, x, outer])


def triangle(upper: bool) -> Callable[[Call], Tensor]:
    """`tril` or `triu`: ONNX's Trilu, with the diagonal `k` as its input."""

    def lower(call: Call) -> Tensor:
        return call.op("Trilu", [call.tensor(0), call.graph.tensor(call.values[1], "i64")], upper=int(upper))

    return lower


def einsum(call: Call) -> Tensor:
    spec = call.values[0]
    if not isinstance(spec, Text):
        raise Refused("an `einsum` whose spec is computed", call.span, "ONNX's Einsum takes its spec when exported")
    dtype = call.result.dtype
    return call.op("Einsum", [call.graph.tensor(item, dtype) for item in call.values[1]], equation=spec.value)


def where(call: Call) -> Tensor:
    dtype = call.result.dtype
    return call.op("Where", [call.tensor(0, "bool"), call.tensor(1, dtype), call.tensor(2, dtype)])


def reduction(op_type: str) -> Callable[[Call], Tensor]:
    def lower(call: Call) -> Tensor:
        x = call.tensor(0, call.result.dtype)
        return call.op(op_type, [x, *call.axes(call.static(1))], keepdims=int(bool(call.static(2))))

    return lower


def variance(root: bool) -> Callable[[Call], Tensor]:
    """`var` (`std` where `root`): the squared deviations from the mean summed over the axes, divided by their
    count less the correction (at least 0: a division by zero gives inf or nan, as the interpreter's)."""

    def lower(call: Call) -> Tensor:
        graph, given, result = call.graph, call.tensor(0, call.result.dtype), call.result
        axes, keepdims = [a.name for a in call.axes(call.static(1))], int(bool(call.static(2)))
        x = given if given.dtype == "f64" else graph.cast(given, "f64")  # in f64, as the interpreter computes
        result = TensorType("f64", result.dims)
        mean = graph.op("ReduceMean", [x.name, *axes], TensorType(x.dtype, (UNKNOWN,) * x.rank), keepdims=1)
        deviation = graph.op("Sub", [x.name, mean.name], x.type)
        squares = graph.op("Mul", [deviation.name, deviation.name], x.type)
        total = graph.op("ReduceSum", [squares.name, *axes], result, keepdims=keepdims)
        one = numpy_helper.from_array(np.array([1], dtype=NUMPY[x.dtype]))
        ones = graph.op("ConstantOfShape", [graph.shape_of(x).name], x.type, value=one)
        count = graph.op("ReduceSum", [ones.name, *axes], result, keepdims=keepdims)
        fewer = graph.op("Sub", [count.name, call.tensor(3, x.dtype).name], result)
        divisor = graph.op("Max", [fewer.name, graph.constant(np.array(0), x.dtype).name], result)
        spread = graph.op("Div", [total.name, divisor.name], result)
        spread = graph.op("Sqrt", [spread.name], result) if root else spread
        return spread if given.dtype == "f64" else graph.cast(spread, given.dtype)

    return lower


def arg_reduction(op_type: str) -> Callable[[Call], Tensor]:
    def lower(call: Call) -> Tensor:
        x, axis, keepdims = call.tensor(0), call.static(1), bool(call.static(2))
        if axis is not None:
            return call.op(op_type, [x], axis=axis, keepdims=int(keepdims))
        flat = call.graph.op(
            "Reshape", [x.name, call.graph.constant(np.array([-1]), "i64").name], TensorType(x.dtype, (UNKNOWN,))
        )
        position = call.graph.op(op_type, [flat.name], TensorType("i64"), axis=0, keepdims=0)
        shape = (
            call.graph.constant(np.ones(x.rank, dtype=np.int64), "i64")
            if keepdims
            else call.graph.constant(np.zeros(0, np.int64), "i64")
        )
        return call.op("Reshape", [position, shape])

    return lower


def logsumexp(call: Call) -> Tensor:
    graph, x = call.graph, call.tensor(0, call.result.dtype)
    axis, keepdims = call.static(1), bool(call.static(2))
    wide = TensorType(x.dtype, (UNKNOWN,) * x.rank)
    largest = graph.op("ReduceMax", [x.name, *(a.name for a in call.axes(axis))], wide, keepdims=1)
    finite = graph.op(
        "Where",
        [
            graph.op("IsInf", [largest.name], TensorType("bool", wide.dims)).name,
            graph.constant(np.array(0), x.dtype).name,
            largest.name,
        ],
        wide,
    )
    shifted = graph.op("Exp", [graph.op("Sub", [x.name, finite.name], x.type).name], x.type)
    total = graph.op("ReduceSum", [shifted.name, *(a.name for a in call.axes(axis))], wide, keepdims=1)
    logged = graph.op("Add", [graph.op("Log", [total.name], wide).name, finite.name], wide)
    if keepdims:
        return graph.op("Identity", [logged.name], call.result)
    return call.op(
        "Reshape",
        [
            logged,
            graph.shape_of(
                graph.op("ReduceSum", [x.name, *(a.name for a in call.axes(axis))], call.result, keepdims=0)
            ),
        ],
    )


def softmax(op_type: str) -> Callable[[Call], Tensor]:
    def lower(call: Call) -> Tensor:
        return call.op(op_type, [call.tensor(0)], axis=call.static(1))

    return lower


def matmul(call: Call) -> Tensor:
    dtype = call.result.dtype
    return call.op("MatMul", [call.tensor(0, dtype), call.tensor(1, dtype)])


def transpose(call: Call) -> Tensor:
    x = call.tensor(0)
    axes = [int(a.value) for a in call.values[1]] or list(reversed(range(x.rank)))
    return call.op("Transpose", [x], perm=[a % x.rank if x.rank else a for a in axes])


def swapaxes(call: Call) -> Tensor:
    x = call.tensor(0)
    perm = list(range(x.rank))
    first, second = (int(call.static(position)) % x.rank for position in (1, 2))
    perm[first], perm[second] = perm[second], perm[first]
    return call.op("Transpose", [x], perm=perm)


def flip(call: Call) -> Tensor:
    """A `Slice` stepping -1 along each flipped axis, from its last element to past its first."""
    x, axis = call.tensor(0), call.static(1)
    named = [int(item.value) for item in axis] if isinstance(axis, tuple) else [int(axis)]
    axes = np.array(sorted({item % x.rank for item in named}))
    constant = call.graph.constant
    starts, ends = constant(np.full(len(axes), -1), "i64"), constant(np.full(len(axes), np.iinfo(np.int64).min), "i64")
    return call.op("Slice", [x, starts, ends, constant(axes, "i64"), constant(np.full(len(axes), -1), "i64")])


def pad(call: Call) -> Tensor:
    """`Pad` in constant mode on the axes named, each by the widths before and after (negative ones remove)."""
    x = call.tensor(0)
    axis = call.static(3)
    named = [int(item.value) for item in axis] if isinstance(axis, tuple) else [int(axis)]
    axes = sorted({item % x.rank for item in named})
    graph, one = call.graph, call.graph.constant(np.array([1]), "i64")
    width = TensorType("i64", (1,))
    before, after = (graph.op("Reshape", [call.tensor(k, "i64").name, one.name], width) for k in (1, 2))
    pads = graph.op(
        "Concat", [before.name] * len(axes) + [after.name] * len(axes), TensorType("i64", (2 * len(axes),)), axis=0
    )
    value = call.tensor(4, x.dtype)
    return call.op("Pad", [x, pads, value, graph.constant(np.array(axes), "i64")], mode="constant")


def take_along_axis(call: Call) -> Tensor:
    """`GatherElements`, torch's `gather` (negative indices count from the end, as DL's)."""
    x = call.tensor(0)
    return call.op("GatherElements", [x, call.tensor(1, "i64")], axis=int(call.static(2)) % x.rank)


def sorting(values: bool) -> Callable[[Call], Tensor]:
    """`sort` and `argsort` as a `TopK` of the whole axis: ONNX's puts the lower index first among equal values,
    in either direction, as DL's stable sort does."""

    def lower(call: Call) -> Tensor:
        graph, x = call.graph, call.tensor(0)
        axis = int(call.static(1)) % x.rank
        size = graph.unsqueeze(graph.tensor(graph.dim(x, axis), "i64"), 0)
        if not isinstance(call.values[2], Number):
            why = "TopK takes its direction as an attribute"
            raise Refused("`descending=` known only when it runs", call.span, why)
        descending = bool(call.values[2].value)
        found, positions = graph.ops(
            "TopK", [x.name, size.name], [x.type, TensorType("i64", x.type.dims)], axis=axis, largest=int(descending)
        )
        return found if values else positions

    return lower


def topk(call: Call) -> tuple[Tensor, Tensor]:
    """`TopK` with `k` as its 1-element input (known or computed) and `largest` as its attribute: ONNX's, sorted,
    puts the lower index first among equal values, as DL's does. A `k` beyond the axis's size fails in the runtime."""
    graph, x = call.graph, call.tensor(0)
    axis = int(call.static(2)) % x.rank
    if not isinstance(call.values[3], Number):
        raise Refused("`largest=` known only when it runs", call.span, "TopK takes its direction as an attribute")
    k = graph.unsqueeze(graph.tensor(call.values[1], "i64"), 0)
    values, indices = call.result.items
    found, positions = graph.ops("TopK", [x.name, k.name], [values, indices], axis=axis, largest=int(call.static(3)))
    return found, positions


def cumsum(call: Call) -> Tensor:
    """CumSum; of f32, in f64 and cast back, as the interpreter sums (one rounding per element)."""
    graph, dtype = call.graph, call.result.dtype
    x = call.tensor(0, "f64" if dtype == "f32" else dtype)
    axis = graph.constant(np.array(int(call.static(1)) % x.rank), "i64")
    if dtype != "f32":
        return call.op("CumSum", [x, axis])
    return graph.cast(graph.op("CumSum", [x.name, axis.name], TensorType("f64", call.result.dims)), "f32")


def reshape(call: Call) -> Tensor:
    return call.op("Reshape", [call.tensor(0), call.graph.vector(list(call.values[1]))])


def concat(call: Call) -> Tensor:
    dtype = call.result.dtype
    return call.op("Concat", [call.graph.tensor(item, dtype) for item in call.values[0]], axis=call.static(1))


def stack(call: Call) -> Tensor:
    dtype, axis = call.result.dtype, call.static(1)
    axis = axis if axis >= 0 else axis + call.result.rank
    items = [call.graph.unsqueeze(call.graph.tensor(item, dtype), axis) for item in call.values[0]]
    return call.op("Concat", items, axis=axis)


def broadcast_to(call: Call) -> Tensor:
    return call.op("Expand", [call.tensor(0), call.graph.vector(list(call.values[1]))])


def gather(call: Call) -> Tensor:
    return call.op("Gather", [call.tensor(0), call.tensor(1, "i64")], axis=call.static(2))


def one_hot(call: Call) -> Tensor:
    depth = call.graph.vector([call.values[1]])
    values = call.graph.constant(np.array([0.0, 1.0]), call.result.dtype)
    return call.op("OneHot", [call.tensor(0, "i64"), depth, values], axis=-1)


def creation(fill: float | None) -> Callable[[Call], Tensor]:
    """`zeros`, `ones` (`fill`), and `full` (its `value=` argument)."""

    def lower(call: Call) -> Tensor:
        dtype = call.result.dtype
        shape = call.graph.vector(list(call.values[0]))
        if fill is not None:
            filled = numpy_helper.from_array(np.array([fill], dtype=NUMPY[dtype]))
            return call.op("ConstantOfShape", [shape], value=filled)
        return call.op("Expand", [call.tensor(1, dtype), shape])

    return lower


def arange(call: Call) -> Tensor:
    """Of integers, `Range` (cast to `dtype=`'s); counting down by a known step, the negation of the count up
    from `-start` by `-step`: onnxruntime rewrites a `Gather` of a `Range` as a `Slice`, which reads a stop of -1
    (`arange(n - 1, -1, -1)`, a reversal) as "from the end", and gathered nothing. With a float bound, the
    interpreter's `start + i step` in f64 (a constant when the bounds are known)."""
    graph, result = call.graph, call.result
    bounds = list(call.values[0])
    if any(bound.dtype in ("f32", "f64") for bound in bounds):
        return float_arange(call, bounds, result)
    counted = TensorType("i64", result.dims)
    start, stop = (Number(0, "i64"), bounds[0]) if len(bounds) == 1 else bounds[:2]
    step = bounds[2] if len(bounds) == 3 else Number(1, "i64")
    if isinstance(step, Number) and step.value < 0:
        ends = [negated(graph, end) for end in (start, stop)]
        up = graph.op("Range", [*(e.name for e in ends), graph.tensor(Number(-step.value, "i64")).name], counted)
        made = graph.op("Neg", [up.name], counted)
    else:
        made = graph.op("Range", [graph.tensor(b, "i64").name for b in (start, stop, step)], counted)
    return made if result.dtype == "i64" else graph.cast(made, result.dtype)


def float_arange(call: Call, bounds: list, result: TensorType) -> Tensor:
    """`arange` with a float bound, known when exported: the interpreter's values (`start + i step` in f64 from
    each bound in its own dtype, rounded to the result's; `float_steps`' count of them) as a constant. Bounds known
    only when the model runs are refused: ONNX's `Range` counts and adds in its own way."""
    if not all(isinstance(bound, Number) for bound in bounds):
        raise Refused(
            "a float `arange` whose bounds are known only when it runs",
            call.span,
            "ONNX's Range counts in its own arithmetic; write `float(arange(n)) * step + start` with a count `n`",
        )
    numbers = [float(NUMPY[b.dtype](b.value)) if b.dtype in ("f32", "f64") else float(b.value) for b in bounds]
    try:
        start, step, count = float_steps(numbers, any(b.dtype == "f64" for b in bounds))
    except ValueError as problem:
        raise Refused(f"an `arange` that stops the program ({problem})", call.span, "it fails when run") from None
    return call.graph.constant(np.arange(count, dtype=np.float64) * step + start, result.dtype)


def negated(graph: Graph, value: Any) -> Tensor:
    """`-value` of an i64 scalar, folded when it is known."""
    if isinstance(value, Number):
        return graph.tensor(Number(-int(value.value), "i64"))
    scalar = graph.tensor(value, "i64")
    return graph.op("Neg", [scalar.name], scalar.type)


def eye(call: Call) -> Tensor:
    """EyeLike of a matrix of zeros of the size asked for (f32, then cast: ONNX's EyeLike makes no bools)."""
    graph, result = call.graph, call.result
    rows = call.values[0]
    columns = rows if call.values[1] is None else call.values[1]
    zero = numpy_helper.from_array(np.array([0.0], dtype=np.float32))
    zeros = graph.op(
        "ConstantOfShape", [graph.vector([rows, columns]).name], TensorType("f32", result.dims), value=zero
    )
    diagonal = graph.op("EyeLike", [zeros.name], zeros.type)
    return diagonal if result.dtype == "f32" else graph.cast(diagonal, result.dtype)


def linspace(call: Call) -> Tensor:
    """numpy's formula in f64, as the interpreter computes it: `i * step + start`, and `stop` itself last (a
    constant when the ends are known when exported)."""
    graph, result = call.graph, call.result
    if not isinstance(call.values[2], Number):
        raise Refused("a `linspace` whose number of points is computed", call.span, "export needs it known")
    count = int(call.values[2].value)
    start, stop = call.values[0], call.values[1]
    if isinstance(start, Number) and isinstance(
        stop, Number
    ):  # each end as its dtype holds it (a literal: the result's)
        first, last = (float(NUMPY[end.dtype](end.value)) for end in (start, stop))
        return graph.constant(np.linspace(first, last, count, dtype=np.float64), result.dtype)
    wide = TensorType("f64", result.dims)
    first, last = call.tensor(0, "f64"), call.tensor(1, "f64")
    positions = graph.constant(np.arange(count, dtype=np.float64), "f64")
    delta = graph.op("Sub", [last.name, first.name], first.type)
    step = delta
    if count > 1:
        step = graph.op("Div", [delta.name, graph.constant(np.array(float(count - 1)), "f64").name], first.type)
    scaled = graph.op("Mul", [positions.name, step.name], wide)
    points = graph.op("Add", [scaled.name, first.name], wide)
    if count > 1:
        is_last = graph.constant(np.arange(count) == count - 1, "bool")
        points = graph.op("Where", [is_last.name, last.name, points.name], wide)
    return points if result.dtype == "f64" else graph.cast(points, result.dtype)


def shape(call: Call) -> tuple:
    x = call.tensor(0)
    return tuple(call.graph.dim(x, axis) for axis in range(x.rank))


def length(call: Call) -> Any:
    value = call.values[0]
    if isinstance(value, tuple):
        return Number(len(value), "i64")
    return call.graph.dim(call.graph.tensor(value), 0)


def to_float(call: Call) -> Any:
    dtype, value = call.result.dtype, call.values[0]
    if isinstance(value, Text):
        raise Refused("`float` of text", call.span, "ONNX tensors hold numbers")
    if isinstance(value, Number):
        return Number(NUMPY[dtype](float(value.value)), dtype)
    return call.graph.tensor(value, dtype)


def to_int(call: Call) -> Any:
    value = call.values[0]
    if isinstance(value, Text):
        raise Refused("`int` of text", call.span, "ONNX tensors hold numbers")
    if isinstance(value, Number):
        return Number(int(value.value), "i64")  # truncates toward zero, as the interpreter's
    return call.graph.tensor(value, "i64")


def assertion(call: Call) -> tuple:
    condition = call.values[0]
    if isinstance(condition, Number):
        if not condition.value:
            message = call.values[1].value if isinstance(call.values[1], Text) else "assertion failed"
            raise Refused(f"an `assert` that fails ({message})", call.span)
        return ()
    raise Refused("an `assert` on data", call.span, "an ONNX model cannot stop with an error: check the inputs before")


def zeros_like(call: Call) -> Any:
    def zero(value: Any) -> Any:
        if isinstance(value, Number):
            return Number(
                NUMPY[value.dtype](0) if value.dtype not in ("i64", "bool") else type(value.value)(0), value.dtype
            )
        tensor = call.graph.tensor(value)
        filled = numpy_helper.from_array(np.array([0], dtype=NUMPY[tensor.dtype]))
        return call.graph.op("ConstantOfShape", [call.graph.shape_of(tensor).name], tensor.type, value=filled)

    return rebuild(call.values[0], iter([zero(leaf) for leaf in flatten_leaves(call.values[0])]))


def reshape_like(call: Call) -> Tensor:
    return call.op("Reshape", [call.tensor(0), call.graph.shape_of(call.tensor(1))])


def squeeze(call: Call) -> Tensor:
    return call.op("Squeeze", [call.tensor(0), *call.axes(call.static(1))])


def expand_dims(call: Call) -> Tensor:
    return call.graph.unsqueeze(call.tensor(0), call.static(1))


def tree_add(call: Call) -> Any:
    pairs = zip(flatten_leaves(call.values[0]), flatten_leaves(call.values[1]), strict=True)
    sums = [call.lowering.binary("+", a, b, call.span, call.graph) for a, b in pairs]
    return rebuild(call.values[0], iter(sums))


def tree_map(call: Call) -> Any:
    function, trees = call.values[0], call.values[1]
    columns = zip(*(flatten_leaves(tree) for tree in trees), strict=True)
    results = [call.lowering.apply(function, list(leaves_), {}, call.span, call.graph) for leaves_ in columns]
    return rebuild(trees[0], iter(results))


def tree_dot(call: Call) -> Any:
    total: Any = None
    for a, b in zip(flatten_leaves(call.values[0]), flatten_leaves(call.values[1]), strict=True):
        product = call.lowering.binary("*", a, b, call.span, call.graph)
        part = call.lowering.primitive(Prim.SUM, [product, None, Number(False, "bool")], call.span, call.graph)
        total = part if total is None else call.lowering.binary("+", total, part, call.span, call.graph)
    return total


def conv2d(call: Call) -> Tensor:
    dtype, stride, padding = call.result.dtype, call.static(2), call.static(3)
    return call.op("Conv", [call.tensor(0, dtype), call.tensor(1, dtype)], strides=[stride] * 2, pads=[padding] * 4)


def max_pool2d(call: Call) -> Tensor:
    size = call.static(1)
    stride = size if call.values[2] is None else call.static(2)
    padding = call.static(3)
    return call.op("MaxPool", [call.tensor(0)], kernel_shape=[size] * 2, strides=[stride] * 2, pads=[padding] * 4)


HANDLERS: dict[Prim, Callable[[Call], Any]] = {
    Prim.EXP: unary("Exp"),
    Prim.LOG: unary("Log"),
    Prim.SQRT: unary("Sqrt"),
    Prim.TANH: unary("Tanh"),
    Prim.SIGMOID: unary("Sigmoid"),
    Prim.RELU: unary("Relu"),
    Prim.ABS: unary("Abs"),
    Prim.SIN: unary("Sin"),
    Prim.COS: unary("Cos"),
    Prim.TAN: unary("Tan"),
    Prim.ASIN: unary("Asin"),
    Prim.ACOS: unary("Acos"),
    Prim.ATAN: unary("Atan"),
    Prim.SOFTPLUS: unary("Softplus"),
    Prim.ERF: unary("Erf"),
    Prim.FLOOR: unary("Floor"),
    Prim.CEIL: unary("Ceil"),
    Prim.ROUND: unary("Round"),  # halves to even, as numpy's
    Prim.SIGN: unary("Sign"),
    Prim.LOG1P: log1p,
    Prim.EXPM1: expm1,
    Prim.TRIL: triangle(upper=False),
    Prim.TRIU: triangle(upper=True),
    Prim.EINSUM: einsum,
    Prim.ISNAN: float_test(Prim.ISNAN),
    Prim.ISINF: float_test(Prim.ISINF),
    Prim.ISFINITE: float_test(Prim.ISFINITE),
    Prim.ANY: truth("any"),
    Prim.ALL: truth("all"),
    Prim.MAXIMUM: pairwise("Max"),
    Prim.MINIMUM: pairwise("Min"),
    Prim.CLIP: clip,
    Prim.WHERE: where,
    Prim.SUM: reduction("ReduceSum"),
    Prim.MEAN: reduction("ReduceMean"),
    Prim.MAX: reduction("ReduceMax"),
    Prim.MIN: reduction("ReduceMin"),
    Prim.ARGMAX: arg_reduction("ArgMax"),
    Prim.ARGMIN: arg_reduction("ArgMin"),
    Prim.LOGSUMEXP: logsumexp,
    Prim.VAR: variance(root=False),
    Prim.STD: variance(root=True),
    Prim.SOFTMAX: softmax("Softmax"),
    Prim.LOG_SOFTMAX: softmax("LogSoftmax"),
    Prim.MATMUL: matmul,
    Prim.TRANSPOSE: transpose,
    Prim.SWAPAXES: swapaxes,
    Prim.FLIP: flip,
    Prim.PAD: pad,
    Prim.CUMSUM: cumsum,
    Prim.TAKE_ALONG_AXIS: take_along_axis,
    Prim.ARGSORT: sorting(values=False),
    Prim.SORT: sorting(values=True),
    Prim.TOPK: topk,
    Prim.RESHAPE: reshape,
    Prim.CONCAT: concat,
    Prim.STACK: stack,
    Prim.BROADCAST_TO: broadcast_to,
    Prim.GATHER: gather,
    Prim.ONE_HOT: one_hot,
    Prim.ZEROS: creation(0.0),
    Prim.ONES: creation(1.0),
    Prim.FULL: creation(None),
    Prim.ARANGE: arange,
    Prim.EYE: eye,
    Prim.LINSPACE: linspace,
    Prim.SHAPE: shape,
    Prim.LEN: length,
    Prim.FLOAT: to_float,
    Prim.INT: to_int,
    Prim.ASSERT: assertion,
    Prim.ZEROS_LIKE: zeros_like,
    Prim.STOP_GRADIENT: lambda call: call.values[0],
    Prim.RESHAPE_LIKE: reshape_like,
    Prim.EXPAND_DIMS: expand_dims,
    Prim.SQUEEZE: squeeze,
    Prim.TREE_ADD: tree_add,
    Prim.TREE_MAP: tree_map,
    Prim.TREE_DOT: tree_dot,
    Prim.CONV2D: conv2d,
    Prim.MAX_POOL2D: max_pool2d,
}


# ---------------------------------------------------------------------- the model


def value_info(name: str, t: TensorType, known: bool = True) -> onnx.ValueInfoProto:
    """A graph input's or output's type: dimension names as `dim_param`, sizes as `dim_value`."""
    dims = []
    for dim in t.dims:
        if isinstance(dim, int) and known:
            dims.append(dim)
        elif isinstance(dim, DimVar) and known:
            dims.append(dim.name)
        else:
            dims.append(None)
    return helper.make_tensor_value_info(name, ELEMENT_TYPES[t.dtype], dims)


def to_onnx(
    module: ast.Module, signature: Signature, weights_parameter: str, weights: dict[str, np.ndarray]
) -> onnx.ModelProto:
    """The ONNX model of the function `signature` names, of `module` (a package's source, one module with
    no imports, its nodes at their places in the user's files), with the weights as initializers. Raises
    `DiagnosticError` (E0607) for what ONNX cannot express."""
    lowering = Lowering(module)
    graph = lowering.root
    function = signature.name
    decl = lowering.declarations[function]
    scope: dict[str, Any] = {}
    inputs = []
    # a weight named as an input (`m.x` beside the input `x`) is an initializer of its own name: `m.x`
    input_names = {name for name, _ in signature.params if name != weights_parameter}
    renamed = {leaf: f"{weights_parameter}.{leaf}" for leaf in weights if leaf in input_names}
    for name, t in signature.params:
        if name == weights_parameter:
            scope[name] = weights_value(t, "", renamed)
        else:
            scope[name] = Tensor(name, t)
            inputs.append(value_info(name, t))
    try:
        outcome = lowering.block(list(decl.body.body), scope, graph, in_loop=False)
    except Refused as refusal:
        raise DiagnosticError(refused(refusal)) from None
    outputs, output_infos = model_outputs(outcome.value, signature, graph)
    used = read_names(graph.nodes)
    initializers = [
        numpy_helper.from_array(np.ascontiguousarray(array), renamed.get(name, name))
        for name, array in weights.items()
        if renamed.get(name, name) in used
    ]
    model_graph = helper.make_graph(graph.nodes, function, inputs, output_infos, initializers)
    del outputs
    model = helper.make_model(model_graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="dl")
    model.ir_version = 8
    return model


def read_names(nodes: list[onnx.NodeProto]) -> set[str]:
    """Every value the nodes read, in their subgraphs too: the weights a model keeps as initializers."""
    names: set[str] = set()
    for node in nodes:
        names.update(node.input)
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                names |= read_names(list(attribute.g.node))
    return names


def weights_value(t: Type, prefix: str, renamed: dict[str, str]) -> Any:
    """The weights parameter as a tree whose leaves are the initializers, named as the package names them (or as
    `renamed` says, where that name is an input's)."""
    match t:
        case StructType(fields=fields):
            return Struct(
                t,
                {name: weights_value(item, f"{prefix}.{name}" if prefix else name, renamed) for name, item in fields},
            )
        case TupleType(items=items):
            return tuple(
                weights_value(item, f"{prefix}.{p}" if prefix else str(p), renamed) for p, item in enumerate(items)
            )
    return Tensor(renamed.get(prefix, prefix), t)


def model_outputs(value: Any, signature: Signature, graph: Graph) -> tuple[list[Tensor], list[onnx.ValueInfoProto]]:
    """The graph's outputs: `output`, or `output.0`, `output.1.0` ... for (nested) tuples, as `dlrun predict`
    names them."""
    named = output_names(signature.result)
    names, types = [name for name, _ in named], [t for _, t in named]
    outputs, infos = [], []
    for name, leaf, t in zip(names, flatten_leaves(value), types, strict=True):
        tensor = graph.tensor(leaf, t.dtype)
        graph.nodes.append(helper.make_node("Identity", [tensor.name], [name]))
        outputs.append(Tensor(name, t))
        infos.append(value_info(name, t))
    return outputs, infos


def output_names(t: Type, name: str = "output") -> list[tuple[str, TensorType]]:
    """The result's tensors with the names `dlrun predict` gives them (package.output_arrays)."""
    if isinstance(t, TupleType):
        return [leaf for p, item in enumerate(t.items) for leaf in output_names(item, f"{name}.{p}")]
    return [(name, t)]


def refused(refusal: Refused) -> Any:
    notes = (f"note: {refusal.why}",) if refusal.why else ()
    return error("E0607", f"{refusal.what} cannot be exported to ONNX", refusal.span, notes=notes)


def export_onnx(
    module: ast.Module,
    signature: Signature,
    weights_parameter: str,
    weights: dict[str, np.ndarray],
    quantize: str | None = None,
) -> bytes:
    """The ONNX model of `function`, serialized, its weights quantized to int8 if `quantize` is "int8". The
    model is checked (`onnx.checker`, full) first. Raises `DiagnosticError` (E0607)."""
    model = to_onnx(module, signature, weights_parameter, weights)
    if quantize == "int8":
        from dl.export.quantize import quantize_int8

        model = quantize_int8(model)
    onnx.checker.check_model(model, full_check=True)
    return model.SerializeToString()
