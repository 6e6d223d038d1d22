"""The abstract syntax tree of DL.

Every node is a small immutable value carrying the `Span` it came from. Spans
are excluded from equality, so two trees compare equal when they mean the same
program (the printer's round-trip property relies on it). Passes build new trees
instead of mutating old ones.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import field

from dl.lang.diagnostics import UNKNOWN_SPAN, Span
from dl.lang.record import record


def _span() -> Span:
    return field(default=UNKNOWN_SPAN, compare=False, repr=False)


node = record(frozen=True, slots=True)

# ------------------------------------------------------------------ types


@node
class DimLiteral:
    value: int
    span: Span = _span()


@node
class DimName:
    """A dimension variable (`B`), a const used as a dimension, or `_` (unknown)."""

    name: str
    span: Span = _span()


@node
class DimBinary:
    """A size computed from others: `C * 16`, `N + 1`, `H - 2` (`+`, `-` or `*`)."""

    op: str
    lhs: Dim
    rhs: Dim
    span: Span = _span()


Dim = DimLiteral | DimName | DimBinary


@node
class NamedType:
    """A scalar dtype (`f32`), `str`, or a struct name, optionally module-qualified."""

    name: str
    module: str | None = None
    span: Span = _span()


@node
class TensorTypeExpr:
    """`f32[B, 3]`, or a generic struct given sizes (`Linear[5, 2]`, `gpt.GPT[2, 64]`: `module` is its module)."""

    dtype: str
    dims: tuple[Dim, ...]
    span: Span = _span()
    module: str | None = None


@node
class TupleTypeExpr:
    items: tuple[TypeExpr, ...]
    span: Span = _span()


@node
class FunctionTypeExpr:
    params: tuple[TypeExpr, ...]
    result: TypeExpr
    span: Span = _span()


TypeExpr = NamedType | TensorTypeExpr | TupleTypeExpr | FunctionTypeExpr

# ------------------------------------------------------------------ expressions


@node
class Name:
    id: str
    span: Span = _span()


@node
class IntLiteral:
    value: int
    dtype: str | None = None  # from a suffix: `3i32`
    span: Span = _span()


@node
class FloatLiteral:
    value: float
    dtype: str | None = None  # from a suffix: `1.0f64`
    span: Span = _span()


@node
class BoolLiteral:
    value: bool
    span: Span = _span()


@node
class StringLiteral:
    value: str
    span: Span = _span()


@node
class FormatField:
    """`{value}` or `{value:spec}` in an f-string; `spec` is Python's format spec, "" when none."""

    value: Expr
    spec: str = ""
    span: Span = _span()  # from `{` to `}`
    spec_span: Span = _span()


@node
class FString:
    """`f"epoch {epoch}: loss {loss:.4f}"`: literal text (escapes and doubled braces already replaced)
    and fields, in order."""

    parts: tuple[str | FormatField, ...]
    span: Span = _span()


@node
class Unary:
    op: str  # "-" or "not"
    operand: Expr
    span: Span = _span()


@node
class Binary:
    op: str
    lhs: Expr
    rhs: Expr
    span: Span = _span()


@node
class Keyword:
    name: str
    value: Expr
    span: Span = _span()


@node
class Call:
    func: Expr
    args: tuple[Expr, ...]
    keywords: tuple[Keyword, ...] = ()
    span: Span = _span()


@node
class Slice:
    start: Expr | None
    stop: Expr | None
    step: Expr | None
    span: Span = _span()


@node
class Ellipsis:
    """`...` among the indices: as many full slices as the axes the other indices leave."""

    span: Span = _span()


@node
class Index:
    target: Expr
    indices: tuple[Expr | Slice | Ellipsis, ...]
    span: Span = _span()


@node
class Field:
    target: Expr
    name: str
    span: Span = _span()


@node
class TupleLiteral:
    items: tuple[Expr, ...]
    span: Span = _span()


@node
class TensorLiteral:
    items: tuple[Expr, ...]
    span: Span = _span()


@node
class FieldInit:
    name: str
    value: Expr
    span: Span = _span()


@node
class StructLiteral:
    type: Expr  # a Name, or a Field for a module-qualified struct
    fields: tuple[FieldInit, ...]
    span: Span = _span()


@node
class Param:
    name: str
    annotation: TypeExpr | None = None
    default: Expr | None = None
    span: Span = _span()


@node
class Lambda:
    params: tuple[Param, ...]
    result: TypeExpr | None
    body: Expr | Block
    span: Span = _span()


Expr = (
    Name
    | IntLiteral
    | FloatLiteral
    | BoolLiteral
    | StringLiteral
    | FString
    | Unary
    | Binary
    | Call
    | Index
    | Field
    | TupleLiteral
    | TensorLiteral
    | StructLiteral
    | Lambda
)

# ------------------------------------------------------------------ statements


@node
class NamePattern:
    name: str
    span: Span = _span()


@node
class TuplePattern:
    items: tuple[Pattern, ...]
    span: Span = _span()


Pattern = NamePattern | TuplePattern


@node
class Block:
    body: tuple[Stmt, ...]
    span: Span = _span()


@node
class Let:
    pattern: Pattern
    annotation: TypeExpr | None
    value: Expr
    span: Span = _span()


@node
class Assign:
    """`target = value` or `target op= value`; targets are names, fields, indexings or tuples."""

    target: Expr
    op: str  # "=", "+=", "-=", "*=", "/="
    value: Expr
    span: Span = _span()


@node
class ExprStmt:
    expr: Expr
    span: Span = _span()


@node
class If:
    cond: Expr
    then: Block
    orelse: Block | If | None
    span: Span = _span()


@node
class While:
    cond: Expr
    body: Block
    span: Span = _span()


@node
class Range:
    start: Expr
    stop: Expr
    span: Span = _span()


@node
class For:
    pattern: Pattern
    iterable: Expr | Range
    body: Block
    span: Span = _span()


@node
class Return:
    value: Expr | None
    span: Span = _span()


@node
class Break:
    span: Span = _span()


@node
class Continue:
    span: Span = _span()


@node
class FnDecl:
    name: str
    params: tuple[Param, ...]
    result: TypeExpr | None
    body: Block
    span: Span = _span()
    name_span: Span = _span()


Stmt = Let | Assign | ExprStmt | If | While | For | Return | Break | Continue | FnDecl

# ------------------------------------------------------------------ declarations


@node
class Import:
    module: str
    alias: str | None
    span: Span = _span()


@node
class Const:
    name: str
    annotation: TypeExpr | None
    value: Expr
    span: Span = _span()


@node
class FieldDecl:
    name: str
    type: TypeExpr
    span: Span = _span()


@node
class StructDecl:
    name: str
    fields: tuple[FieldDecl, ...]
    span: Span = _span()
    name_span: Span = _span()
    sizes: tuple[DimName, ...] = ()  # the sizes it is generic over: `struct Linear[IN, OUT]`


Decl = Import | Const | StructDecl | FnDecl


@node
class Module:
    path: str
    decls: tuple[Decl, ...]


@node
class ReplInput:
    """What one REPL entry holds: declarations and statements in order."""

    items: tuple[Decl | Stmt, ...]


# ------------------------------------------------------------------ walking a tree
#
# The one traversal of the tree that every pass uses: a node's children are the nodes in its fields
# (tuples opened), spans left out. `walk` goes everywhere; `walk_scope` stays out of the bodies and
# defaults of nested functions, whose names are their own.

SPAN_FIELDS = frozenset({"span", "name_span"})
FUNCTIONS = (Lambda, FnDecl)


def children(node: object) -> Iterator[object]:
    """The nodes directly inside `node`, in field order (the items of a tuple for a tuple)."""
    if isinstance(node, tuple):
        yield from (item for item in node if hasattr(item, "__dataclass_fields__") or isinstance(item, tuple))
        return
    for name in getattr(node, "__dataclass_fields__", ()):
        if name in SPAN_FIELDS:
            continue
        value = getattr(node, name)
        if isinstance(value, tuple):
            yield from (item for item in value if hasattr(item, "__dataclass_fields__") or isinstance(item, tuple))
        elif hasattr(value, "__dataclass_fields__"):
            yield value


def walk(node: object) -> Iterator[object]:
    """Every node under `node` (itself included), depth first, in source order; iterative, so a tree of any
    depth is walked."""
    stack = [node]
    while stack:
        current = stack.pop()
        if not isinstance(current, tuple):
            yield current
        stack.extend(reversed(list(children(current))))


def walk_scope(node: object) -> Iterator[object]:
    """`walk`, not entering nested functions (a nested `fn` or lambda is itself yielded, not its insides)."""
    stack = [node]
    while stack:
        current = stack.pop()
        if not isinstance(current, tuple):
            yield current
            if isinstance(current, FUNCTIONS) and current is not node:
                continue
        stack.extend(reversed(list(children(current))))


def pattern_names(pattern: Pattern) -> Iterator[NamePattern]:
    """The names a `let` or `for` pattern binds, in order."""
    if isinstance(pattern, NamePattern):
        yield pattern
    else:
        for item in pattern.items:
            yield from pattern_names(item)


def root_name(target: Expr) -> str | None:
    """The variable an assignment target changes: `x` of `x`, `x[i]`, `x.w[0]`."""
    while isinstance(target, (Field, Index)):
        target = target.target
    return target.id if isinstance(target, Name) else None


def target_names(target: Expr) -> list[str]:
    """The variables an assignment's target changes (`(a, b) = ...` changes both)."""
    if isinstance(target, TupleLiteral):
        return [name for item in target.items for name in target_names(item)]
    name = root_name(target)
    return [name] if name is not None else []


def assigned_names(node: object) -> set[str]:
    """The variables assigned (`x = ...`, `x[i] += ...`, `(a, b) = ...`) in `node`, outside nested functions
    (whose variables are their own: a closure captures by value)."""
    return {name for n in walk_scope(node) if isinstance(n, Assign) for name in target_names(n.target)}


def free_names(node: object) -> set[str]:
    """Every name read anywhere in `node`, nested functions included."""
    return {n.id for n in walk(node) if isinstance(n, Name)}


def captured_names(params: tuple, body: object) -> set[str]:
    """The names a function (its `params` and `body`) reads that it does not bind itself: what it captured."""
    return free_names(body) - {p.name for p in params} - bound_names(body)


def bound_names(node: object) -> set[str]:
    """Every name a `let`, a loop, a parameter or a local `fn` binds anywhere in `node`."""
    return {n.name for n in walk(node) if isinstance(n, (NamePattern, Param, FnDecl))}


def names_used(node: object) -> set[str]:
    """Every name read or bound by a pattern anywhere in `node`, nested functions included."""
    return {n.id if isinstance(n, Name) else n.name for n in walk(node) if isinstance(n, (Name, NamePattern))}


def with_spans(node: object, around: Span) -> object:
    """A copy of `node` in which every node a pass made without a span (autodiff's) takes the span of the
    nearest node around it that has one, `around` for `node` itself; `node` when all have one."""
    if isinstance(node, tuple):
        items = tuple(with_spans(item, around) for item in node)
        return node if all(a is b for a, b in zip(items, node, strict=True)) else items
    fields = getattr(node, "__dataclass_fields__", None)
    if fields is None or isinstance(node, Span):
        return node
    changes = {}
    if "span" in fields:
        if node.span == UNKNOWN_SPAN:
            changes["span"] = around
        else:
            around = node.span
    for field_name in fields:
        if field_name not in SPAN_FIELDS:
            value = getattr(node, field_name)
            new = with_spans(value, around)
            if new is not value:
                changes[field_name] = new
    return dataclasses.replace(node, **changes) if changes else node


def replace_nodes(node: object, replacements: dict[int, object], drop: type | tuple = ()) -> object:
    """A copy of `node` with the nodes whose ids are keys of `replacements` swapped for the values, and
    the items of `drop`'s types left out of the tuples (statement lists) that hold them."""
    if id(node) in replacements:
        return replacements[id(node)]
    if isinstance(node, tuple):
        items = tuple(replace_nodes(item, replacements, drop) for item in node if not isinstance(item, drop))
        same = len(items) == len(node) and all(a is b for a, b in zip(items, node, strict=True))
        return node if same else items
    if not hasattr(node, "__dataclass_fields__"):
        return node
    changes = {}
    for field_name in node.__dataclass_fields__:
        if field_name in SPAN_FIELDS:
            continue
        value = getattr(node, field_name)
        new = replace_nodes(value, replacements, drop)
        if new is not value:
            changes[field_name] = new
    return dataclasses.replace(node, **changes) if changes else node
