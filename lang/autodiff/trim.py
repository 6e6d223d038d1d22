"""Trimming the adjoints nobody reads: a pass over the functions one round generated (`trim(round_)`).

A function's `_bwd` (or `_back`) returns the adjoint of every float parameter, because one copy serves every
caller; but a caller often reads only some of them. `nn.linear(x, w, b)` applied to data `x` has its
`linear_bwd` compute `d_x = d_result @ transpose(w)`, a matrix product as large as the one for `d_w`, which
the caller then drops. Where a caller binds such a call's tuple (`let d_args = g_bwd(...)`) and reads only
some of its items (`d_args[1]`, `d_args[2]`), the call goes instead to a copy of `g_bwd` that returns `()` in
the other places, pruned of what only those adjoints needed (`g_bwd_for_1_2`). A copy's own calls are trimmed
the same way, until nothing changes; an adjoint function no call names any more is dropped.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from dl.lang import ast
from dl.lang.autodiff.simplify import prune

if TYPE_CHECKING:
    from dl.lang.autodiff.round import Round

Key = tuple[str, str]  # (module path, function name)


def trim(round_: Round, sites: dict[str, dict[int, object]]) -> None:
    """Rewrite `round_.added`, and the expressions that replace the `grad` sites (`sites`: module -> id of the
    site -> its replacement, a gradient written as a lambda among them), so that each call of a generated
    adjoint function computes only the adjoints its caller reads."""
    Trimming(round_, sites).run()


class Trimming:
    def __init__(self, round_: Round, sites: dict[str, dict[int, object]]) -> None:
        self.round = round_
        self.sites = sites
        self.functions: dict[Key, ast.FnDecl] = {
            (path, decl.name): decl for path, decls in round_.added.items() for decl in decls
        }
        # the adjoint functions this round made: `_bwd` and `_back`, whose result is the tuple of adjoints
        self.adjoints: set[Key] = {
            (key[0], function)
            for key, function in round_.existing_backs.items()
            if function and key[2] in ("back", "bwd") and (key[0], function) in self.functions
        } | (round_.adjoint_copies & self.functions.keys())
        self.copies: dict[tuple[Key, tuple[int, ...]], str] = {}  # (adjoint function, items read) -> its copy

    def run(self) -> None:
        for path, replacing in self.sites.items():  # a gradient written as a lambda, in place of its site
            for site, expr in replacing.items():
                if isinstance(expr, ast.Lambda):
                    replacements, _ = self.trimmed_calls(path, expr)
                    replacing[site] = dataclasses.replace(expr, body=ast.replace_nodes(expr.body, replacements))
        todo = list(self.functions)
        while todo:
            key = todo.pop()
            decl = self.functions[key]
            replacements, made = self.trimmed_calls(key[0], decl)
            if replacements:
                self.functions[key] = dataclasses.replace(decl, body=ast.replace_nodes(decl.body, replacements))
            todo.extend(made)
        self.drop_unnamed()
        for path in self.round.added:
            self.round.added[path] = [decl for (where, _), decl in self.functions.items() if where == path]

    def trimmed_calls(self, path: str, decl: ast.FnDecl | ast.Lambda) -> tuple[dict[int, ast.Expr], list[Key]]:
        """The callee of each call in `decl` that can go to a trimmed copy, and the copies made for them."""
        replacements: dict[int, ast.Expr] = {}
        made: list[Key] = []
        reads = items_read(decl.body)
        for node in ast.walk(decl.body):
            if not (isinstance(node, ast.Let) and isinstance(node.pattern, ast.NamePattern)):
                continue
            if not isinstance(node.value, ast.Call) or node.pattern.name not in reads:
                continue
            callee = callee_key(self.round.program, path, node.value.func)
            read = reads[node.pattern.name]
            if callee is None or callee not in self.adjoints or read is None:
                continue
            count = returned_count(self.functions[callee])
            wanted = tuple(sorted(read))
            if count is None or not wanted or len(wanted) == count or max(wanted) >= count:
                continue
            copy = self.copy(callee, wanted, made)
            replacements[id(node.value.func)] = renamed(node.value.func, copy)
        return replacements, made

    def copy(self, callee: Key, wanted: tuple[int, ...], made: list[Key]) -> str:
        """The name of `callee`'s copy returning only the adjoints at `wanted`, made the first time it is asked."""
        if (callee, wanted) not in self.copies:
            path, function = callee
            name = self.round.fresh_global(path, f"{function}_for_{'_'.join(map(str, wanted))}")
            self.copies[(callee, wanted)] = name
            original = self.functions[callee]
            *stmts, last = original.body.body
            items = tuple(
                item if position in wanted else ast.TupleLiteral(()) for position, item in enumerate(last.value.items)
            )
            body = prune([*stmts, dataclasses.replace(last, value=ast.TupleLiteral(items))], self.round.effectful())
            body = ast.Block(tuple(body))
            # a `_back`'s annotation, with `()` where the copy returns nothing: a recursive copy's calls of itself
            # have their type (a later round differentiates them, `grad(grad(f))`)
            result = original.result
            if isinstance(result, ast.TupleTypeExpr) and len(result.items) == len(items):
                kept = [t if position in wanted else ast.TupleTypeExpr(()) for position, t in enumerate(result.items)]
                result = dataclasses.replace(result, items=tuple(kept))
            else:
                result = None
            self.functions[(path, name)] = dataclasses.replace(original, name=name, result=result, body=body)
            self.adjoints.add((path, name))
            made.append((path, name))
        return self.copies[(callee, wanted)]

    def drop_unnamed(self) -> None:
        """Drop the adjoint functions of this round that no code names any more (their callers all call copies)."""
        named: set[str] = set()
        decls = [decl for module in self.round.program.modules.values() for decl in module.decls]
        sites = [expr for replacing in self.sites.values() for expr in replacing.values()]
        for node in ast.walk((*decls, *sites, *self.functions.values())):
            if isinstance(node, ast.Name):
                named.add(node.id)
            elif isinstance(node, ast.Field):
                named.add(node.name)
        dropped = {key for key in self.adjoints if key[1] not in named}
        for key in dropped:
            del self.functions[key]
        # a later round (`grad` of `grad`) makes them again if it needs them: forget their names, and a `_fwd`
        # beside a dropped `_bwd` (the pair goes together)
        backs = self.round.existing_backs
        for key in [key for key, function in backs.items() if function and (key[0], function) in dropped]:
            backs.pop(key)
            if key[2] == "bwd":
                backs.pop((key[0], key[1], "fwd", key[3]), None)


def callee_key(program, path: str, func: ast.Expr) -> Key | None:
    """The (module, function) a call's callee names: `g` in this module, or `alias.g` in an imported one."""
    if isinstance(func, ast.Name):
        return (path, func.id)
    if isinstance(func, ast.Field) and isinstance(func.target, ast.Name):
        imports = program.imports.get(path, [])
        target = next((to for alias, to in imports if alias == func.target.id), None)
        return (target, func.name) if target is not None else None
    return None


def items_read(body: ast.Block | ast.Expr) -> dict[str, set[int] | None]:
    """For each name in `body`: the items `name[k]` (an integer literal `k`) read of it, or None where the name is
    also read otherwise (whole)."""
    indexed: dict[str, set[int]] = {}
    indexing: set[int] = set()  # ids of the names read as `name[k]`
    for node in ast.walk(body):
        if (
            isinstance(node, ast.Index)
            and isinstance(node.target, ast.Name)
            and len(node.indices) == 1
            and isinstance(node.indices[0], ast.IntLiteral)
        ):
            indexed.setdefault(node.target.id, set()).add(node.indices[0].value)
            indexing.add(id(node.target))
    found: dict[str, set[int] | None] = dict(indexed)
    for node in ast.walk(body):
        if isinstance(node, ast.Name) and id(node) not in indexing:
            found[node.id] = None
    return found


def returned_count(decl: ast.FnDecl) -> int | None:
    """How many adjoints `decl` returns, if its body ends in `return (a, b, ...)`; else None (not trimmed)."""
    body = decl.body.body if isinstance(decl.body, ast.Block) else ()
    if not body or not isinstance(body[-1], ast.Return) or not isinstance(body[-1].value, ast.TupleLiteral):
        return None
    return len(body[-1].value.items)


def renamed(func: ast.Expr, name: str) -> ast.Expr:
    """The callee `func` (`g` or `alias.g`) naming `name` instead."""
    if isinstance(func, ast.Name):
        return dataclasses.replace(func, id=name)
    return dataclasses.replace(func, name=name)
