"""Derivative rules as DL templates: a primitive's (from its record, lang/primitives.py) and the operators'
(`BINARY`), instantiated over the names of one operation (`instantiate`), the static forms of a reduction's
templates expanded first (`expanded_forms`). `bound_arguments` names a call's arguments by parameter.

A rule gives, for each differentiable operand of an operation, a DL expression for its adjoint contribution,
written over the names `d` (the adjoint of the result), `r` (the result), the operands by their parameter
names, and the static values the reverse sweep binds. Contributions already have the operand's shape.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import cache

from dl.lang import ast
from dl.lang.autodiff.trees import literal
from dl.lang.calls import Binding, arranged, bind
from dl.lang.primitives import Prim, Primitive

RULES_PATH = "<rule>"  # the path of the templates' spans: what the rules write is told from the program's by it


@cache
def template(source: str) -> ast.Expr:
    from dl.lang.parse import parse

    module = parse(f"fn rule() {{ return {source} }}", RULES_PATH)
    return module.decls[0].body.body[0].value


def instantiate(source: str, bindings: dict[str, ast.Expr], forms: dict[str, Callable] | None = None) -> ast.Expr:
    """The template `source` with its names bound; `forms` expands the calls of static forms (`expand(v)` in a
    reduction's rule) first, each given its argument's template."""
    expr = template(source)
    if forms:
        expr = expanded_forms(expr, forms)
    replacements = {
        id(node): bindings[node.id] for node in ast.walk(expr) if isinstance(node, ast.Name) and node.id in bindings
    }
    return ast.replace_nodes(expr, replacements)


def expanded_forms(node, forms: dict[str, Callable]):
    """`node` with every call `name(v)` of a form in `forms` replaced by `forms[name](v)`, innermost first."""
    if isinstance(node, tuple):
        return tuple(expanded_forms(item, forms) for item in node)
    if not dataclasses.is_dataclass(node) or isinstance(node, type):
        return node
    changes = {
        f.name: expanded_forms(getattr(node, f.name), forms)
        for f in dataclasses.fields(node)
        if f.name not in ("span", "name_span")
    }
    node = dataclasses.replace(node, **changes)
    match node:
        case ast.Call(func=ast.Name(id=form), args=(argument,), keywords=()) if form in forms:
            return forms[form](argument)
    return node


# The rules of the operators (the primitives' are in their records, lang/primitives.py), over the
# operands `a` and `b`: the contribution to each.
BINARY = {
    "+": ("d", "d"),
    "-": ("d", "-d"),
    "*": ("d * b", "d * a"),
    "/": ("d / b", "-(d * r / b)"),
    # the exponent's: none where the base is 0 (`0 ** b` is constant in `b > 0`), as PyTorch and JAX
    # (`a + zeros_like(r)`: an integer base, `2 ** b`, in the result's float dtype for `log`)
    # the base's: none where the exponent is 0 (`a ** 0` is 1), not `0 * 0 ** -1`, as PyTorch's; a literal
    # exponent takes `POWER_BY_LITERAL` (the literal 0: none at all)
    "**": ("where(b == 0, 0.0, d * b * a ** (b - 1.0))", "where(a == 0.0, 0.0, d * r * log(a + zeros_like(r)))"),
    "%": ("d", "-(d * ((a - r) / b))"),
}


POWER_BY_LITERAL = "d * b * a ** (b - 1.0)"


# The reductions whose templates use the static forms `expand`, `total` and `count` (`reduction_forms`).
REDUCED = frozenset({Prim.SUM, Prim.MEAN, Prim.MAX, Prim.MIN, Prim.LOGSUMEXP, Prim.VAR, Prim.STD})


EXPANDED = frozenset({Prim.TREE_MAP, Prim.TREE_DOT})


def bound_arguments(
    primitive: Primitive, rhs: ast.Call, binding: Binding | None
) -> tuple[dict[str, ast.Expr], list[ast.Expr]]:
    """A call's arguments by parameter name (a keyword left out: its default, as a literal), and its variadic
    tail, as `binding` (the checker's, of the call `rhs` was made from) says, or bound now for code the
    transform wrote itself."""
    signature = primitive.signature
    if binding is None:
        binding = bind(signature, len(rhs.args), [k.name for k in rhs.keywords])
    given = {k.name: k.value for k in rhs.keywords}
    values = dict(zip(primitive.parameters, arranged(primitive, binding, rhs.args, given, literal), strict=True))
    variadic = list(values.pop(signature.variadic[0])) if signature.variadic is not None else []
    return values, variadic
