"""Dimension names as values: `Typed` -> `Typed` of a program whose functions bind the ones they read.

In `fn xent(logits: f32[B, C], labels: i64[B])` the body may read `C` as an `i64` (`one_hot(labels, C)`); the
checker knows it is the size `C` and records which names each function reads (`Typed.dimension_reads`). A
backend runs ordinary code, so before any runs (driver/pipeline.py, and autodiff for the tools) this pass
writes, at the start of each such body, a `let` of each name from its parameters' shapes:

    let C = shape(logits)[1]
    let B = len(logits)

and checks the program again. At the start of the body no parameter has been rebound or shadowed yet, so
the value is the size the call bound; a local of the same name declared later in the body shadows it, as
it shadows any name.

The same pass writes out the dimensions (or axes) a call gives a primitive as one tuple (`Typed.splats`):
`zeros(shape(x))` becomes `zeros(shape(x)[0], shape(x)[1])` and `reshape(y, (B, -1))` becomes
`reshape(y, B, -1)`, so that every backend sees them one by one, as the primitive takes them. (The checker
accepts a tuple only where reading it again costs nothing: a tuple literal, a name, `shape(...)` of one.)
"""

from __future__ import annotations

import dataclasses

from dl.lang import ast
from dl.lang.check import Typed, check
from dl.lang.diagnostics import Span
from dl.lang.types import DimSource


def declare_dimensions(typed: Typed, calls: tuple = ()) -> Typed:
    """`typed` itself when no function reads a dimension name and no call gives its dimensions as a tuple; else
    the check of the program with the `let`s and the dimensions written (`calls`: the host's calls the first
    check was given, see `check`)."""
    if not typed.dimension_reads and not typed.splats:
        return typed
    program = typed.program
    splatted = splatted_calls(typed)
    replacements: dict[int, object] = dict(splatted)
    for key, reads in typed.dimension_reads.items():
        decl = typed.functions[key][0]
        if isinstance(decl, ast.FnDecl):
            replacements[key] = with_dimensions(ast.replace_nodes(decl, splatted), reads)
    modules = {path: ast.replace_nodes(module, replacements) for path, module in program.modules.items()}
    return check(dataclasses.replace(program, modules=modules), calls)


def splats_written(typed: Typed, calls: tuple = ()) -> Typed:
    """`typed` with only the calls' tuples of dimensions written out, checked again (for `dlrun grad`, which
    prints derivatives without the `let`s of dimension names)."""
    if not typed.splats:
        return typed
    splatted = splatted_calls(typed)
    modules = {path: ast.replace_nodes(module, splatted) for path, module in typed.program.modules.items()}
    return check(dataclasses.replace(typed.program, modules=modules), calls)


def splatted_calls(typed: Typed) -> dict[int, ast.Call]:
    """By id, each call of `Typed.splats` with its tuple written out an item at a time (inner calls first, so
    that a call inside another's arguments is written out there too)."""
    found = [
        node
        for module in typed.program.modules.values()
        for node in ast.walk(module)
        if isinstance(node, ast.Call) and id(node) in typed.splats
    ]
    written: dict[int, ast.Call] = {}
    for call in reversed(found):  # (`walk` yields a node before what is inside it)
        (position,) = typed.bindings[id(call)].variadic
        given = ast.replace_nodes(call.args[position], written)
        span = given.span
        if isinstance(given, ast.TupleLiteral):
            items = given.items
        else:
            items = tuple(
                ast.Index(given, (ast.IntLiteral(k, None, span),), span) for k in range(typed.splats[id(call)])
            )
        args = tuple(ast.replace_nodes(a, written) for a in call.args)
        written[id(call)] = dataclasses.replace(call, args=(*args[:position], *items, *args[position + 1 :]))
    return written


def with_dimensions(decl: ast.FnDecl, reads: dict[str, DimSource]) -> ast.FnDecl:
    span = decl.name_span
    lets = tuple(
        ast.Let(ast.NamePattern(name, span), None, size_of(decl, source, span), span)
        for name, source in sorted(reads.items())
    )
    return dataclasses.replace(decl, body=dataclasses.replace(decl.body, body=(*lets, *decl.body.body)))


def size_of(decl: ast.FnDecl, source: DimSource, span: Span) -> ast.Expr:
    """`len(x)` for the first axis of a parameter, else `shape(x.w)[1]`: the size `source` names; for an axis
    of size `K * 4 + 1`, `(shape(x)[2] - 1) // 4`."""
    value: ast.Expr = ast.Name(decl.params[source.param].name, span)
    for step in source.steps:
        if isinstance(step, int):
            value = ast.Index(value, (ast.IntLiteral(step, None, span),), span)
        else:
            value = ast.Field(value, step, span)
    if source.axis == 0:
        size: ast.Expr = ast.Call(ast.Name("len", span), (value,), (), span)
    else:
        shape = ast.Call(ast.Name("shape", span), (value,), (), span)
        size = ast.Index(shape, (ast.IntLiteral(source.axis, None, span),), span)
    if source.offset:
        size = ast.Binary("-", size, ast.IntLiteral(source.offset, None, span), span)
    if source.scale != 1:
        size = ast.Binary("//", size, ast.IntLiteral(source.scale, None, span), span)
    return size
