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
"""

from __future__ import annotations

import dataclasses

from dl.lang import ast
from dl.lang.check import Typed, check
from dl.lang.diagnostics import Span
from dl.lang.types import DimSource


def declare_dimensions(typed: Typed, calls: tuple = ()) -> Typed:
    """`typed` itself when no function reads a dimension name; else the check of the program with the
    `let`s written (`calls`: the host's calls the first check was given, see `check`)."""
    if not typed.dimension_reads:
        return typed
    replacements: dict[int, ast.FnDecl] = {}
    for key, reads in typed.dimension_reads.items():
        decl = typed.functions[key][0]
        if isinstance(decl, ast.FnDecl):
            replacements[key] = with_dimensions(decl, reads)
    program = typed.program
    modules = {path: ast.replace_nodes(module, replacements) for path, module in program.modules.items()}
    return check(dataclasses.replace(program, modules=modules), calls)


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
