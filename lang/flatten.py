"""Flattening: one function of a `Program` and everything it uses -> one `Module` with no imports.

`flatten(program, function)` keeps the declarations `function` reaches (the functions it calls, the
structs and constants it names, in any module, the standard library's included) and writes them as one
module: a declaration of an imported module is renamed after its module (`nn.linear` becomes
`nn__linear`, `builtin.relu_of` becomes `builtin__relu_of`), and every reference to it follows, so
that the module reads and checks on its own. Declarations of the entry module keep their names, except
one that shares a primitive's name (it would shadow the primitive where an imported module calls it),
which is renamed after the entry module too. The result's `names` says what each declaration of the
entry module is called now.

Which declaration a name means follows DL's scoping: inside a function, a variable of that function
(parameter, `let`, loop variable, lambda parameter) shadows its module's declarations, which shadow
the primitives; `alias.member` names a declaration of an imported module.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dl.lang import ast
from dl.lang.modules import Program
from dl.lang.primitives import BY_NAME, TRANSFORMS
from dl.lang.record import record

Reference = tuple[str, str]  # (module path, declaration name)


@record(frozen=True)
class Flattened:
    module: ast.Module
    names: dict[str, str]  # entry-module declaration -> its name in `module` (for those kept)


def flatten(program: Program, function: str, path: str) -> Flattened:
    """`function` of the entry module and what it uses, as one module at `path`. Raises `KeyError` when the
    entry module has no such function."""
    flattener = Flattener(program)
    root = (program.entry, function)
    if not isinstance(flattener.declarations[program.entry].get(function), ast.FnDecl):
        raise KeyError(function)
    kept: list[ast.Decl] = []
    pending, seen = [root], {root}
    while pending:
        reference = pending.pop()
        decl, uses = flattener.rewrite(reference)
        kept.append(decl)
        for use in uses:
            if use not in seen:
                seen.add(use)
                pending.append(use)
    order = {id(decl): position for position, decl in enumerate(flattener.in_source_order())}
    kept.sort(key=lambda decl: order[id(flattener.originals[id(decl)])])
    names = {name: flattener.new_name((path, name)) for path, name in seen if path == program.entry}
    return Flattened(ast.Module(path, tuple(kept)), names)


class Flattener:
    def __init__(self, program: Program) -> None:
        self.program = program
        self.declarations: dict[str, dict[str, ast.Decl]] = {
            path: {decl.name: decl for decl in module.decls if not isinstance(decl, ast.Import)}
            for path, module in program.modules.items()
        }
        self.imports = {path: dict(found) for path, found in program.imports.items()}
        self.prefixes = module_prefixes(program)
        self.originals: dict[int, ast.Decl] = {}  # id of a rewritten declaration -> the one it came from

    def in_source_order(self) -> list[ast.Decl]:
        return [decl for path in self.program.in_dependency_order() for decl in self.declarations[path].values()]

    def new_name(self, reference: Reference) -> str:
        path, name = reference
        if path == self.program.entry and name not in BY_NAME and name not in TRANSFORMS:
            return name
        return f"{self.prefixes[path]}__{name}"

    def rewrite(self, reference: Reference) -> tuple[ast.Decl, set[Reference]]:
        """The declaration renamed, its references rewritten, and the declarations it uses."""
        path, name = reference
        decl = self.declarations[path][name]
        scope = Scope(self, path, local_names(decl) if isinstance(decl, ast.FnDecl) else frozenset())
        rewritten = dataclasses.replace(scope.rewrite(decl), name=self.new_name(reference))
        self.originals[id(rewritten)] = decl
        return rewritten, scope.uses


class Scope:
    """Rewrites the references of one declaration of module `path`, recording what they name in `uses`."""

    def __init__(self, flattener: Flattener, path: str, local: frozenset[str]) -> None:
        self.flattener, self.path, self.local = flattener, path, local
        self.uses: set[Reference] = set()

    def rewrite(self, node: object) -> object:
        replacements: dict[int, object] = {}
        for found in ast.walk(node):
            new = self.replacement(found)
            if new is not None:
                replacements[id(found)] = new
        return ast.replace_nodes(node, replacements)

    def replacement(self, node: object) -> object | None:
        match node:
            case ast.Field(target=ast.Name(id=alias), name=member) if self.imported(alias):
                return ast.Name(self.use(self.flattener.imports[self.path][alias], member), node.span)
            case ast.Name(id=name) if name not in self.local and self.declared(name):
                return ast.Name(self.use(self.path, name), node.span)
            case ast.NamedType(name=name, module=alias) if alias is not None:
                return ast.NamedType(self.use(self.flattener.imports[self.path][alias], name), None, node.span)
            case ast.NamedType(name=name) if self.declared(name):
                return ast.NamedType(self.use(self.path, name), None, node.span)
            case ast.TensorTypeExpr(dtype=name, module=alias) if alias is not None:  # `gpt.GPT[2, 64]`
                dims = tuple(self.rewrite(dim) for dim in node.dims)
                return ast.TensorTypeExpr(self.use(self.flattener.imports[self.path][alias], name), dims, node.span)
            case ast.TensorTypeExpr(dtype=name) if self.declared(name):  # a generic struct: `Linear[5, 2]`
                dims = tuple(self.rewrite(dim) for dim in node.dims)
                return ast.TensorTypeExpr(self.use(self.path, name), dims, node.span)
            case ast.DimName(name=name) if self.declared(name):
                return ast.DimName(self.use(self.path, name), node.span)
        return None

    def imported(self, alias: str) -> bool:
        return alias not in self.local and alias in self.flattener.imports.get(self.path, {})

    def declared(self, name: str) -> bool:
        return name in self.flattener.declarations[self.path]

    def use(self, path: str, name: str) -> str:
        self.uses.add((path, name))
        return self.flattener.new_name((path, name))


def local_names(decl: ast.FnDecl) -> frozenset[str]:
    """Every variable of a function, its nested functions' included: a name bound anywhere in it."""
    names: set[str] = set()
    for node in ast.walk(decl.body):
        match node:
            case ast.Param(name=name) | ast.NamePattern(name=name) | ast.FnDecl(name=name):
                names.add(name)
            case ast.Assign(target=target):
                names.update(ast.target_names(target))
    names.update(param.name for param in decl.params)
    return frozenset(names)


def module_prefixes(program: Program) -> dict[str, str]:
    """A prefix per module: its file's stem, numbered where two modules share one."""
    prefixes: dict[str, str] = {}
    for path in program.in_dependency_order():
        stem = Path(path).stem.replace("-", "_").replace(".", "_")
        prefix, number = stem, 2
        while prefix in prefixes.values():
            prefix, number = f"{stem}{number}", number + 1
        prefixes[path] = prefix
    return prefixes
