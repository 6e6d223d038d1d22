"""Small builders and tests of the trees derivative code is made of (names, calls, lets, literals, indexing),
and `NotDifferentiable`, how the transform says what it cannot differentiate.
"""

from __future__ import annotations

from collections.abc import Callable

from dl.lang import ast
from dl.lang.check import has_float
from dl.lang.diagnostics import UNKNOWN_SPAN, Span
from dl.lang.primitives import BY_NAME, TRANSFORMS
from dl.lang.types import (
    FunctionRef,
    PrimitiveRef,
    StrType,
    StructType,
    TapeType,
    TensorType,
    TupleType,
    Type,
    Unknown,
)


def name(identifier: str) -> ast.Name:
    return ast.Name(identifier)


def call(function: str, *args: ast.Expr, **keywords: ast.Expr) -> ast.Call:
    return ast.Call(name(function), tuple(args), tuple(ast.Keyword(k, v) for k, v in keywords.items()))


def let(target: str, value: ast.Expr, span: Span = UNKNOWN_SPAN) -> ast.Let:
    return ast.Let(ast.NamePattern(target), None, value, span)


def assign(target: ast.Expr, value: ast.Expr, span: Span = UNKNOWN_SPAN) -> ast.Assign:
    return ast.Assign(target, "=", value, span)


def tuple_of(items: list[ast.Expr]) -> ast.Expr:
    return items[0] if len(items) == 1 else ast.TupleLiteral(tuple(items))


def not_any(flags: list[str]) -> ast.Expr:
    condition: ast.Expr = name(flags[0])
    for flag in flags[1:]:
        condition = ast.Binary("or", condition, name(flag))
    return ast.Unary("not", condition)


def is_active(t: Type | None) -> bool:
    """Does a value of this type carry a gradient?"""
    if isinstance(t, TapeType):
        return is_active(t.item)
    return t is not None and has_float(t)


def fixed_shape(t: Type | None) -> bool:
    """Does every value of type `t` have one shape (no `_` size, which a loop's iterations may change)?"""
    match t:
        case TensorType(dims=dims):
            return not any(isinstance(d, Unknown) for d in dims)
        case TupleType(items=items):
            return all(fixed_shape(item) for item in items)
        case StructType(fields=fields):
            return all(fixed_shape(field) for _, field in fields)
    return False


def float_literal(value: float, t: Type | None) -> ast.FloatLiteral:
    dtype = t.dtype if isinstance(t, TensorType) and t.dtype == "f64" else None
    return ast.FloatLiteral(value, dtype)


class NotDifferentiable(Exception):
    def __init__(self, message: str, span: Span, notes: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.span = span
        self.notes = notes


def is_call(expr: ast.Expr, function: str) -> bool:
    return isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == function


def hint_for(expr: ast.Expr) -> str:
    """What to call the value of an operand: `m_w1` for `m.w1`, `t` for the rest."""
    parts = []
    while isinstance(expr, ast.Field):
        parts.append(expr.name)
        expr = expr.target
    if not parts or not isinstance(expr, ast.Name):
        return "t"
    return "_".join([expr.id, *reversed(parts)])


def literal(value) -> ast.Expr | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return ast.BoolLiteral(value)
    if isinstance(value, int):
        return ast.IntLiteral(value) if value >= 0 else ast.Unary("-", ast.IntLiteral(-value))
    if isinstance(value, str):
        return ast.Name(value)
    return ast.FloatLiteral(value)


def is_tensor_index(t: Type) -> bool:
    return isinstance(t, TensorType) and t.rank > 0


def index_of(expr: ast.Expr, position: int) -> ast.Index:
    return ast.Index(expr, (ast.IntLiteral(position),))


def condition_of(tape: str) -> ast.Expr:
    """`len(tape) > 0`: a loop's backward runs while its tape has iterations on it."""
    return ast.Binary(">", call("len", name(tape)), ast.IntLiteral(0))


def as_block(orelse: ast.Block | ast.If) -> ast.Block:
    return orelse if isinstance(orelse, ast.Block) else ast.Block((orelse,), orelse.span)


def as_stmts(orelse) -> tuple[ast.Stmt, ...]:
    return as_block(orelse).body if orelse is not None else ()


def placeholder(t: Type, span: Span, struct: Callable[[StructType], ast.Expr] | None = None) -> ast.Expr:
    """A value of type `t` to declare a variable with before its real value exists; `struct` names a struct type
    where the value is written."""
    if isinstance(t, TensorType) and not t.dims:
        if t.dtype in ("f32", "f64"):
            return float_literal(0.0, t)
        return ast.BoolLiteral(False) if t.dtype == "bool" else ast.IntLiteral(0)
    if isinstance(t, TensorType) and all(isinstance(d, int) for d in t.dims):
        return call("zeros", *[ast.IntLiteral(d) for d in t.dims], dtype=name(t.dtype))
    if isinstance(t, TupleType):
        return ast.TupleLiteral(tuple(placeholder(item, span, struct) for item in t.items))
    if isinstance(t, StructType) and struct is not None:
        fields = tuple(ast.FieldInit(n, placeholder(f, span, struct), span) for n, f in t.fields)
        return ast.StructLiteral(struct(t), fields, span)
    raise NotDifferentiable(
        f"`grad` cannot yet differentiate a `return` inside a loop of a function returning {t}",
        span,
        ("help: store the result in a variable, `break`, and return it after the loop",),
    )


def declared_names(stmt: ast.Stmt) -> list[str]:
    """The names a statement declares in its block: a `let`'s, a local function's."""
    if isinstance(stmt, ast.Let):
        return [p.name for p in ast.pattern_names(stmt.pattern)]
    if isinstance(stmt, ast.FnDecl):
        return [stmt.name]
    return []


def assigned_outer(stmt, env: dict[str, str]) -> list[str]:
    return sorted(ast.assigned_names(stmt) & set(env))


def unused_name(base: str, taken: set[str]) -> str:
    """`base`, or `base_2`, `base_3`, ...: the first not in `taken`, which it joins."""
    chosen, count = base, 1
    while chosen in taken:
        count += 1
        chosen = f"{base}_{count}"
    taken.add(chosen)
    return chosen


def strip_defaults(params: tuple[ast.Param, ...]) -> tuple[ast.Param, ...]:
    return tuple(ast.Param(p.name, p.annotation, None, p.span) for p in params)


def annotation_of(params: list[ast.Param], as_tuple: bool) -> ast.TypeExpr | None:
    """The type of the gradients of these parameters, when all of them are annotated."""
    if any(p.annotation is None for p in params):
        return None
    if as_tuple:
        return ast.TupleTypeExpr(tuple(p.annotation for p in params))
    return params[0].annotation


def module_names(module: ast.Module) -> set[str]:
    names = set(BY_NAME) | set(TRANSFORMS)
    for decl in module.decls:
        if isinstance(decl, (ast.FnDecl, ast.StructDecl, ast.Const)):
            names.add(decl.name)
        elif isinstance(decl, ast.Import):
            names.add(decl.alias or decl.module)
    return names


def zero_adjoint(value: ast.Expr, t: Type | None) -> ast.Expr:
    """Zeros shaped like `value` (of type `t`): a tensor's `zeros_like`, a tuple's item by item, a struct's leaf
    by leaf; a value with no floats (a string, a function) stands for itself."""
    if isinstance(t, TupleType) and any(holds_text_or_function(item) for item in t.items):
        return ast.TupleLiteral(
            tuple(zero_adjoint(ast.Index(value, (ast.IntLiteral(k),)), item) for k, item in enumerate(t.items))
        )
    if isinstance(t, (StrType, FunctionRef, PrimitiveRef)):
        return value  # no floats, so no adjoint is ever read: the value itself has the type
    return call("zeros_like", value)  # (one call for a whole tuple: what simplify folds away)


def holds_text_or_function(t: Type | None) -> bool:
    """A string or a function, or a tuple with one inside: what `zeros_like` cannot take whole."""
    if isinstance(t, TupleType):
        return any(holds_text_or_function(item) for item in t.items)
    return isinstance(t, (StrType, FunctionRef, PrimitiveRef))


def literal_integer(node: ast.Expr) -> int | None:
    """The value of an integer literal, possibly negated; None for anything else."""
    if isinstance(node, ast.Unary) and node.op == "-" and isinstance(node.operand, ast.IntLiteral):
        return -node.operand.value
    return node.value if isinstance(node, ast.IntLiteral) else None
