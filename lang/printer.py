"""Printing: any AST -> canonical `.dl` source that parses back to an equal AST.

`print_module`, `print_stmt` and `print_expr` lay code out one statement per
line with four-space indents and add parentheses only where precedence needs
them (the binding powers are the parser's own, from lang/parse.py). The
round-trip property `parse(print_module(m)) == m` is tested with hypothesis.
"""

from __future__ import annotations

import math
from contextvars import ContextVar

from dl.lang import ast
from dl.lang.diagnostics import Span
from dl.lang.parse import COMPARISONS, INFIX_POWER, PREFIX_POWER

# The formatter (lang/format.py) keeps number literals as they were written: span -> source text.
LITERAL_TEXT: ContextVar[dict[Span, str] | None] = ContextVar("literal_text", default=None)
ATOM = 100
INDENT = "    "
ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\0": "\\0"}


def print_module(module: ast.Module) -> str:
    parts = [print_decl(decl) for decl in module.decls]
    return "\n\n".join(parts) + ("\n" if parts else "")


def print_decl(decl: ast.Decl | ast.Stmt, depth: int = 0) -> str:
    match decl:
        case ast.Import(module=module, alias=alias):
            return f"import {module}" + (f" as {alias}" if alias else "")
        case ast.Const(name=name, annotation=annotation, value=value):
            typed = f": {print_type(annotation)}" if annotation else ""
            return f"const {name}{typed} = {print_expr(value)}"
        case ast.StructDecl(fields=fields):
            if not fields:
                return f"struct {struct_header(decl)} {{}}"
            lines = [f"{INDENT * (depth + 1)}{f.name}: {print_type(f.type)}" for f in fields]
            return f"struct {struct_header(decl)} {{\n" + "\n".join(lines) + f"\n{INDENT * depth}}}"
        case ast.FnDecl():
            return print_function(decl, depth)
    return print_stmt(decl, depth)


def print_function(decl: ast.FnDecl, depth: int) -> str:
    result = f" -> {print_type(decl.result)}" if decl.result else ""
    return f"fn {decl.name}({print_params(decl.params)}){result} {print_block(decl.body, depth)}"


def print_params(params: tuple[ast.Param, ...]) -> str:
    return ", ".join(print_param(p) for p in params)


def print_param(param: ast.Param) -> str:
    text = param.name
    if param.annotation is not None:
        text += f": {print_type(param.annotation)}"
    if param.default is not None:  # as PEP 8 has it: `beta=0.9`, but `scale: f32 = 2.0`
        text += f" = {print_expr(param.default)}" if param.annotation is not None else f"={print_expr(param.default)}"
    return text


def print_block(block: ast.Block, depth: int) -> str:
    if not block.body:
        return "{}"
    lines = [INDENT * (depth + 1) + print_stmt(stmt, depth + 1) for stmt in block.body]
    return "{\n" + "\n".join(lines) + "\n" + INDENT * depth + "}"


def print_stmt(stmt: ast.Stmt, depth: int = 0) -> str:
    match stmt:
        case ast.Let(pattern=pattern, annotation=annotation, value=value):
            typed = f": {print_type(annotation)}" if annotation else ""
            return f"let {print_pattern(pattern)}{typed} = {print_expr(value)}"
        case ast.Assign(target=target, op=op, value=value):
            return f"{print_expr(target)} {op} {print_expr(value)}"
        case ast.ExprStmt(expr=expr):
            return print_expr(expr)
        case ast.If():
            return print_if(stmt, depth)
        case ast.While(cond=cond, body=body):
            return f"while {print_expr(cond)} {print_block(body, depth)}"
        case ast.For(pattern=pattern, iterable=iterable, body=body):
            if isinstance(iterable, ast.Range):
                over = f"{print_expr(iterable.start)}..{print_expr(iterable.stop)}"
            else:
                over = print_expr(iterable)
            return f"for {print_pattern(pattern)} in {over} {print_block(body, depth)}"
        case ast.Return(value=value):
            return "return" if value is None else f"return {print_expr(value)}"
        case ast.Break():
            return "break"
        case ast.Continue():
            return "continue"
        case ast.FnDecl():
            return print_function(stmt, depth)
    raise TypeError(f"not a statement: {stmt!r}")


def print_if(stmt: ast.If, depth: int) -> str:
    text = f"if {print_expr(stmt.cond)} {print_block(stmt.then, depth)}"
    if isinstance(stmt.orelse, ast.If):
        return f"{text} else {print_if(stmt.orelse, depth)}"
    if isinstance(stmt.orelse, ast.Block):
        return f"{text} else {print_block(stmt.orelse, depth)}"
    return text


def print_pattern(pattern: ast.Pattern) -> str:
    if isinstance(pattern, ast.NamePattern):
        return pattern.name
    inner = ", ".join(print_pattern(item) for item in pattern.items)
    return f"({inner},)" if len(pattern.items) == 1 else f"({inner})"


def struct_header(decl: ast.StructDecl) -> str:
    """`Linear`, or `Linear[IN, OUT]` for a struct generic over sizes."""
    return f"{decl.name}[{', '.join(size.name for size in decl.sizes)}]" if decl.sizes else decl.name


DIM_PRECEDENCE = {"+": 1, "-": 1, "*": 2}


def print_dim(dim: ast.Dim, context: int = 0) -> str:
    """A dimension as written: `16`, `N`, `C * 16`, `(N + 1) * 2` (parentheses only where they are needed)."""
    match dim:
        case ast.DimLiteral(value=value):
            return str(value)
        case ast.DimName(name=name):
            return name
        case ast.DimBinary(op=op, lhs=lhs, rhs=rhs):
            precedence = DIM_PRECEDENCE[op]
            shown = f"{print_dim(lhs, precedence)} {op} {print_dim(rhs, precedence + 1)}"
            return f"({shown})" if precedence < context else shown
    raise AssertionError(dim)


def print_type(node: ast.TypeExpr) -> str:
    match node:
        case ast.NamedType(name=name, module=module):
            return f"{module}.{name}" if module else name
        case ast.TensorTypeExpr(dtype=dtype, dims=dims, module=module):
            return f"{module + '.' if module else ''}{dtype}[{', '.join(print_dim(d) for d in dims)}]"
        case ast.TupleTypeExpr(items=items):
            inner = ", ".join(print_type(item) for item in items)
            return f"({inner},)" if len(items) == 1 else f"({inner})"
        case ast.FunctionTypeExpr(params=params, result=result):
            return f"fn({', '.join(print_type(p) for p in params)}) -> {print_type(result)}"
    raise TypeError(f"not a type: {node!r}")


# ---------------------------------------------------------------------- expressions


def precedence(expr: ast.Expr) -> int:
    match expr:
        case ast.Binary(op=op):
            return INFIX_POWER[op][0]
        case ast.Unary(op=op):
            return PREFIX_POWER[op]
        case ast.Lambda():
            return 0
    return ATOM


def print_expr(expr: ast.Expr) -> str:
    match expr:
        case ast.Name(id=name):
            return name
        case ast.IntLiteral(value=value, dtype=dtype):
            return spelled(expr) or f"{value}{dtype or ''}"
        case ast.FloatLiteral(value=value, dtype=dtype):
            if value != value:  # nan, folded from `0.0 / 0.0` (no literal spells it)
                return f"(0.0{dtype or ''} / 0.0{dtype or ''})"
            return spelled(expr) or f"{float_text(value)}{dtype or ''}"
        case ast.BoolLiteral(value=value):
            return "true" if value else "false"
        case ast.StringLiteral(value=value):
            return '"' + "".join(ESCAPES.get(c, c) for c in value) + '"'
        case ast.FString(parts=parts):
            return 'f"' + "".join(print_fstring_part(part) for part in parts) + '"'
        case ast.Binary():
            return print_binary(expr)
        case ast.Unary(op=op, operand=operand):
            inner = wrap(operand, PREFIX_POWER[op], strict=isinstance(operand, ast.Unary) and op == "-")
            return f"not {inner}" if op == "not" else f"-{inner}"
        case ast.Call(func=func, args=args, keywords=keywords):
            shown = [print_expr(a) for a in args] + [f"{k.name}={print_expr(k.value)}" for k in keywords]
            return f"{wrap(func, ATOM)}({', '.join(shown)})"
        case ast.Index(target=target, indices=indices):
            return f"{wrap(target, ATOM)}[{', '.join(print_subscript(i) for i in indices)}]"
        case ast.Field(target=target, name=name):
            return f"{wrap(target, ATOM)}.{name}"
        case ast.TupleLiteral(items=items):
            inner = ", ".join(print_expr(item) for item in items)
            return f"({inner},)" if len(items) == 1 else f"({inner})"
        case ast.TensorLiteral(items=items):
            return "[" + ", ".join(print_expr(item) for item in items) + "]"
        case ast.StructLiteral(type=type_expr, fields=fields):
            shown = ", ".join(f"{f.name}: {print_expr(f.value)}" for f in fields)
            return f"{wrap(type_expr, ATOM)} {{ {shown} }}"
        case ast.Lambda(params=params, result=result, body=body):
            typed = f" -> {print_type(result)}" if result else ""
            if isinstance(body, ast.Block):
                return f"fn({print_params(params)}){typed} {print_block(body, 0)}"
            return f"fn({print_params(params)}){typed} => {print_expr(body)}"
    raise TypeError(f"not an expression: {expr!r}")


def print_fstring_part(part: str | ast.FormatField) -> str:
    """Literal text with its escapes and its braces doubled, or a field `{value:spec}`."""
    if isinstance(part, str):
        return "".join(ESCAPES.get(c, c) for c in part).replace("{", "{{").replace("}", "}}")
    spec = f":{part.spec}" if part.spec else ""
    return f"{{{print_expr(part.value)}{spec}}}"


def print_binary(expr: ast.Binary) -> str:
    left_power = INFIX_POWER[expr.op][0]
    right_assoc = expr.op == "**"
    comparison = expr.op in COMPARISONS
    lhs = wrap(expr.lhs, left_power, strict=right_assoc or comparison)
    if right_assoc and isinstance(expr.rhs, ast.Unary) and expr.rhs.op == "-":
        rhs = print_expr(expr.rhs)  # `2 ** -3` parses as `2 ** (-3)`
    else:
        rhs = wrap(expr.rhs, left_power, strict=not right_assoc)
    return f"{lhs} {expr.op} {rhs}"


def wrap(expr: ast.Expr, power: int, strict: bool = False) -> str:
    """Print `expr`, parenthesized if it binds looser than `power` (or as loose, when `strict`)."""
    level = precedence(expr)
    text = print_expr(expr)
    if level < power or (strict and level == power):
        return f"({text})"
    return text


def print_subscript(item: ast.Expr | ast.Slice | ast.Ellipsis) -> str:
    if isinstance(item, ast.Ellipsis):
        return "..."
    if not isinstance(item, ast.Slice):
        return print_expr(item)
    start = print_expr(item.start) if item.start else ""
    stop = print_expr(item.stop) if item.stop else ""
    text = f"{start}:{stop}"
    if item.step is not None:
        text += f":{print_expr(item.step)}"
    return text


def spelled(literal: ast.IntLiteral | ast.FloatLiteral) -> str | None:
    spellings = LITERAL_TEXT.get()
    return spellings.get(literal.span) if spellings else None


def float_text(value: float) -> str:
    """`value` as a float literal reads it back: `1e400` and what folds to infinity are `1.0e999`."""
    if value in (math.inf, -math.inf):
        return "1.0e999" if value > 0 else "-1.0e999"
    text = repr(float(value))
    if "e" in text and "." not in text.split("e")[0]:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}.0e{exponent}"
    return text
