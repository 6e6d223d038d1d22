"""Binding a function's function-valued parameters to named functions: `FnDecl` -> `FnDecl`.

The derivative of `newton(f, df, x0, tol)` depends on which functions are passed as `f` and `df`, so
`dlrun grad --fn newton` prints it for a choice of them (`--bind f=sq,df=dsq`). `bind_functions` writes
that choice as a function of its own, `newton_with_sq_dsq(x0, tol)`, whose body names `sq` and `dsq`
where `newton`'s names `f` and `df`; autodiff then differentiates it as any other function. A body that
binds one of those names again (`let f = ...`, a lambda's parameter `f`) is refused rather than
rewritten, since replacing every `f` would then change what it means.
"""

from __future__ import annotations

import dataclasses

from dl.lang import ast
from dl.lang.ast import assigned_names, replace_nodes, walk
from dl.lang.check import Typed
from dl.lang.diagnostics import Diagnostic, DiagnosticError, error
from dl.lang.types import FunctionRef, FunctionType


def function_parameters(typed: Typed, decl: ast.FnDecl) -> list[str]:
    """The parameters of `decl` that take functions: annotated `fn(...) -> ...`, or given one by a call."""
    return [
        p.name
        for p in decl.params
        if isinstance(p.annotation, ast.FunctionTypeExpr) or isinstance(typed.type_of(p), (FunctionRef, FunctionType))
    ]


def depends_on_functions(decl: ast.FnDecl, names: list[str]) -> Diagnostic:
    """E0333 for `dlrun grad --fn` of a function that takes functions and was not told which."""
    shown = " and ".join(f"`{name}`" for name in names)
    example = ",".join(f"{name}=NAME" for name in names)
    return error(
        "E0333",
        f"the derivative of `{decl.name}` depends on the functions passed as {shown}",
        decl.name_span,
        f"{shown} {'takes a function' if len(names) == 1 else 'take functions'}",
        notes=(
            f"help: choose them: `dlrun grad FILE --fn {decl.name} --bind {example}` prints the derivative "
            "with those functions",
            f"in a program, `grad({decl.name}, wrt=...)(...)` differentiates each call with the functions it passes",
        ),
    )


def bind_functions(decl: ast.FnDecl, bound: dict[str, ast.Expr]) -> ast.FnDecl:
    """`decl` without the parameters in `bound`, its body naming the given functions in their place, named
    after them (`newton_with_sq_dsq`). Raises `DiagnosticError` where the body binds such a name again."""
    for node in walk(decl.body):
        rebinds = isinstance(node, (ast.NamePattern, ast.Param, ast.FnDecl)) and node.name in bound
        if rebinds:
            raise DiagnosticError(rebound(decl, node.name, node.span))
    assigned = assigned_names(decl.body) & set(bound)
    if assigned:
        raise DiagnosticError(rebound(decl, sorted(assigned)[0], decl.name_span))
    uses = {id(n): dataclasses.replace(bound[n.id], span=n.span) for n in walk(decl.body) if is_use(n, bound)}
    suffix = "_".join(print_name(bound[p.name]) for p in decl.params if p.name in bound)
    return dataclasses.replace(
        decl,
        name=f"{decl.name}_with_{suffix}",
        params=tuple(p for p in decl.params if p.name not in bound),
        body=replace_nodes(decl.body, uses),
    )


def is_use(node: object, bound: dict[str, ast.Expr]) -> bool:
    return isinstance(node, ast.Name) and node.id in bound


def print_name(function: ast.Expr) -> str:
    """`sq`, or `nn_relu` for `nn.relu`: a function's name as part of another's."""
    match function:
        case ast.Field(target=target, name=name):
            return f"{print_name(target)}_{name}"
        case ast.Name(id=name):
            return name
    raise TypeError(f"not a function name: {function!r}")


def rebound(decl: ast.FnDecl, name: str, span) -> Diagnostic:
    return error(
        "E0333",
        f"`{decl.name}` binds `{name}` again, so `--bind {name}=...` cannot replace it",
        span,
        f"another `{name}`",
        notes=(f"help: rename this `{name}` in `{decl.name}`",),
    )
