"""One round of the transform: `Round(typed).run(sites)` generates the derivative functions of a set of
`grad` sites (each site's gradient function, and the `_fwd`/`_bwd`, `_back` and `_quiet` functions of what they
call, each once) and rewrites the program with them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path

from dl.lang import ast
from dl.lang.autodiff.body import FunctionBody
from dl.lang.autodiff.rules import RULES_PATH
from dl.lang.autodiff.sites import Site, factory_help, walk_calls
from dl.lang.autodiff.trees import (
    NotDifferentiable,
    annotation_of,
    is_active,
    module_names,
    strip_defaults,
    unused_name,
)
from dl.lang.autodiff.trim import trim
from dl.lang.autodiff.zeros import AdjointVariables, drop_zeros
from dl.lang.check import Typed
from dl.lang.diagnostics import UNKNOWN_SPAN, Diagnostic, DiagnosticError, Span, error
from dl.lang.modules import Program
from dl.lang.primitives import BY_NAME, Prim
from dl.lang.types import (
    ANY,
    FunctionRef,
    PrimitiveRef,
)

RANKED = frozenset({Prim.MATMUL, Prim.EINSUM})  # `rank_sensitive` (`transpose`'s and `swapaxes`'s are not)


class Round:
    """Generates the derivative functions for a set of `grad` sites and rewrites the program."""

    def __init__(self, typed: Typed, backs: dict[tuple, str] | None = None) -> None:
        self.typed = typed
        self.existing_backs = backs if backs is not None else {}
        self.effectful_names: frozenset[str] | None = None
        self.effects_of: dict[int, bool] = {}  # id of a function -> `has_effects`
        self.ranked_of: dict[int, bool] = {}  # id of a function -> `rank_sensitive`
        self.program = typed.program
        self.added: dict[str, list[ast.FnDecl]] = {path: [] for path in self.program.modules}
        self.taken: dict[str, set[str]] = {path: module_names(m) for path, m in self.program.modules.items()}
        self.pending: list[Callable[[], list[ast.FnDecl]]] = []  # makers of the functions asked for
        self.modules_of: dict[int, str] | None = None  # id of a top-level function -> its module's path
        self.declarations: dict[str, dict[str, ast.Decl]] = {}  # `declared`, by module path
        self.current: Site | None = None  # the site being differentiated
        # (module path, name) of a function made here -> what zeros.py reads of its variables (`note_adjoints`)
        self.adjoint_variables: dict[tuple[str, str], AdjointVariables] = {}
        self.adjoint_copies: set[tuple[str, str]] = set()  # the copies zeros.py made of `_bwd` and `_back` functions

    def run(self, sites: list[Site]) -> Program:
        replacements: dict[str, dict[int, object]] = {path: {} for path in self.program.modules}
        problems: list[Diagnostic] = []
        for site in sites:
            self.current = site
            try:
                made = {path: len(added) for path, added in self.added.items()}
                replacement = self.site(site)
                while self.pending:
                    self.pending.pop()()
                written = [(site.module, replacement)]
                written += [(path, decl) for path, added in self.added.items() for decl in added[made[path] :]]
                self.check_built_ins(written, site)
                replacements[site.module][id(site.call)] = ast.with_spans(replacement, site.call.span)
            except NotDifferentiable as problem:
                found = error("E0333", str(problem), problem.span, notes=problem.notes)
                if found not in problems:  # (one function's problem, met by each `grad` of it)
                    problems.append(found)
        if problems:
            raise DiagnosticError(problems)
        drop_zeros(self)
        trim(self, replacements)
        modules = {}
        for path, module in self.program.modules.items():
            decls = ast.replace_nodes(module.decls, replacements[path])
            # what the transform made without a span is reported at the span of what it was made for: the
            # loop, `if` or function around it (`--explain-backend`, run-time errors in generated code)
            added = [ast.with_spans(decl, decl.span) for decl in self.added[path]]
            modules[path] = ast.Module(module.path, (*decls, *added))
        return Program(self.program.entry, modules, self.program.imports, self.program.sources)

    def note_adjoints(self, key: tuple[str, str], writer: FunctionBody) -> None:
        """What zeros.py reads of the function `key` that `writer` wrote: its variables that hold adjoints, and the
        tapes of its backward sweep's loops."""
        self.adjoint_variables[key] = AdjointVariables(
            frozenset(writer.adjoint_names), frozenset(writer.fixed_adjoints), frozenset(writer.sweep_tapes)
        )

    def check_built_ins(self, written: list[tuple[str, object]], site: Site) -> None:
        """The calls of built-ins that the transform writes (a derivative rule's `where`, `zeros_like`, ...) name
        them as the module they are written in sees them: a module that declares a function, struct or constant
        of that name would have them call its own (the locals of generated code are renamed, declarations
        cannot be). Such a derivative is refused rather than computed wrong."""
        for path, node in written:
            declared = self.declared(path)
            for call in walk_calls(node):
                func = call.func
                if not isinstance(func, ast.Name) or func.id not in declared or func.id not in BY_NAME:
                    continue
                if func.span != UNKNOWN_SPAN and func.span.path != RULES_PATH:
                    continue  # the program's own call, copied: it means what it meant there
                decl = declared[func.id]
                raise NotDifferentiable(
                    f"the derivative needs the built-in `{func.id}`, which {decl.span.path} declares again "
                    f"(line {decl.span.line})",
                    site.call.span,
                    (f"help: rename that `{func.id}`: the derivative `grad` writes there calls the built-in by name",),
                )

    def declared(self, path: str) -> dict[str, ast.Decl]:
        """The functions, structs and constants module `path` declares, by name: what shadows a built-in of
        that name throughout the module."""
        if path not in self.declarations:
            kinds = (ast.FnDecl, ast.StructDecl, ast.Const)
            self.declarations[path] = {d.name: d for d in self.program.modules[path].decls if isinstance(d, kinds)}
        return self.declarations[path]

    def module_of(self, decl: ast.FnDecl) -> str:
        """The path of the module that declares the top-level function `decl`."""
        if self.modules_of is None:
            self.modules_of = {id(d): path for d, path in self.typed.functions.values()}
        return self.modules_of[id(decl)]

    def fresh_global(self, path: str, base: str) -> str:
        return unused_name(base, self.taken[path])

    def reference(self, from_path: str, to_path: str, function: str, span: Span) -> ast.Expr:
        """How code in module `from_path` names function `function` of module `to_path`."""
        if from_path == to_path:
            return ast.Name(function, span)
        alias = next((a for a, target in self.program.imports.get(from_path, []) if target == to_path), None)
        if alias is None:
            # (at the `grad` call: the code it is made for may be a module the program cannot change, the stdlib's)
            where = f"{span.path}:{span.line}:{span.column}" if span != UNKNOWN_SPAN else Path(from_path).name
            raise NotDifferentiable(
                f"`grad` cannot write this derivative: the code at {where} would name `{function}`, and its "
                f"module does not import `{function}`'s ({Path(to_path).name})",
                self.current.call.span if self.current is not None else span,
                (
                    "help: a struct built there field by field (`tree_map` in `optim`) can be a tuple instead "
                    "(`(w, b)`), which needs no name; or write that step in a module that imports it",
                ),
            )
        return ast.Field(ast.Name(alias, span), function, span)

    # -------------------------------------------------------------- entry points
    def site(self, site: Site) -> ast.Expr:
        """The expression that replaces one `grad(...)` call."""
        self.known_statically(site)
        decl = site.function
        params = decl.params
        for position in site.wrt if isinstance(site.wrt, tuple) else (site.wrt,):
            if position >= len(params):
                raise NotDifferentiable(f"`wrt={position}` names no parameter of the function", site.call.span)
        # written for the argument types its calls give `f`, where they all give the same
        variant = self.typed.instance_called(None, site.call)
        writer = FunctionBody(self, site.function_module, decl, variant)
        writer.site = site.call.span
        body = writer.gradient(site.wrt, site.with_value, site.has_aux)
        suffix = "value_and_grad" if site.with_value else "grad"
        if site.wrt != 0:
            positions = site.wrt if isinstance(site.wrt, tuple) else (site.wrt,)
            suffix += "_wrt_" + "_".join(map(str, positions))
        if writer.in_place:
            return self.lifted(site, decl, body, writer, suffix)
        generated = self.fresh_global(site.function_module, f"{decl.name}_{suffix}")
        positions = site.wrt if isinstance(site.wrt, tuple) else (site.wrt,)
        result = annotation_of([params[i] for i in positions], isinstance(site.wrt, tuple))
        if site.has_aux:  # (gradient, aux), or ((loss, aux), gradient): the checker's types, unwritten here
            result = None
        if site.with_value and result is not None:
            result = ast.TupleTypeExpr((decl.result, result)) if decl.result is not None else None
        self.added[site.function_module].append(ast.FnDecl(generated, params, result, body, decl.span, decl.name_span))
        self.note_adjoints((site.function_module, generated), writer)
        return self.reference(site.module, site.function_module, generated, site.call.span)

    def lifted(self, site: Site, decl: ast.FnDecl | ast.Lambda, body: ast.Block, writer, suffix: str) -> ast.Expr:
        """The derivative of an anonymous or local function, which reads by name what it captured: written as a
        top-level function that takes those variables too, and called where `grad` is, `fn(w) =>
        main_lambda_grad(w, x)`. A backend compiles a top-level function; a lambda runs where it is made, so
        in an interpreted `main` (one that prints) its whole forward and backward would run interpreted."""
        span = site.call.span
        params = tuple(dataclasses.replace(p, name=writer.param_names[p.name]) for p in decl.params)
        captured = sorted(ast.captured_names(params, body) & ast.bound_names(writer.around))
        named = decl.name if isinstance(decl, ast.FnDecl) else f"{writer.around.name}_lambda"
        generated = self.fresh_global(site.module, f"{named}_{suffix}")
        taken = (*params, *(ast.Param(name, None, None, span) for name in captured))
        self.added[site.module].append(ast.FnDecl(generated, taken, None, body, span, span))
        self.note_adjoints((site.module, generated), writer)
        callee = self.reference(site.module, site.module, generated, span)
        # the lambda called in the function's place takes its parameters' own names (a run-time error's call stack
        # shows `fn(p)`), unless one is the name of a variable it passes on
        own = {p.name: p.name if p.name not in captured else writer.param_names[p.name] for p in decl.params}
        outer = tuple(dataclasses.replace(p, name=own[p.name]) for p in decl.params)
        arguments = tuple(ast.Name(name, span) for name in (*own.values(), *captured))
        return ast.Lambda(outer, None, ast.Call(callee, arguments, (), span), span)

    def known_statically(self, site: Site) -> None:
        """`grad(f)` is written where `f` is known: a function's name, a lambda, or a name bound once to a
        declared function, a lambda or a local `fn` whose captured names do not change. A parameter or variable
        holding some function does not say which (each call could pass another), so its derivative cannot be
        written once."""
        reference, local = site.reference, site.local
        module = reference.target if isinstance(reference, ast.Field) else None
        if isinstance(module, ast.Name) and local is not None and module.id in local.bound:
            # `grad(m.act)` of a module passed in: each call may pass another
            raise NotDifferentiable(
                f"`grad` cannot differentiate `{reference.target.id}.{reference.name}`: `{reference.target.id}` "
                "holds a module known only when the program runs",
                reference.span,
                ("help: write `grad` of the module's function by the module's name, `grad(m1.act)`",),
            )
        if not isinstance(reference, ast.Name) or local is None or reference.id not in local.bound:
            return
        top_level = self.typed.program.modules[site.function_module].decls
        declared = any(decl is site.function for decl in top_level)
        if reference.id in local.aliases and reference.id not in local.assigned and declared:
            return  # `let g = f` of a declared function: `g` always holds `f` (another would be another type)
        bound = local.lambdas.get(reference.id)
        unchanged = reference.id not in local.assigned and bound is not None
        if bound is site.function and unchanged:
            captured = ast.captured_names(bound.params, bound.body)
            changed = sorted(n for n in captured if n in local.assigned or local.bound_after(n, bound.span))
            if not changed:
                return
            raise NotDifferentiable(
                f"`grad` cannot differentiate `{reference.id}`: it captures `{changed[0]}`, which is assigned or "
                "bound again, so its derivative would read another value than the function saw",
                reference.span,
                (
                    f"help: pass `{changed[0]}` to the function as a parameter, or capture a `let` that keeps the "
                    "value it needs",
                ),
            )
        made = local.made.get(reference.id)
        why = (
            "it holds a function made when the program runs"
            if made is not None
            else "it holds a function known only when the program runs"
        )
        hint = (
            factory_help(reference.id, made, local)
            if made is not None
            else ("help: write `grad` where the function is named, and pass the derivative: `slope(grad(cube), x)`")
        )
        raise NotDifferentiable(f"`grad` cannot differentiate `{reference.id}`: {why}", reference.span, (hint,))

    def variant_key(self, decl: ast.FnDecl, variant: int | None) -> tuple:
        """What names the derivative of `decl` written for the check `variant` of its body (its parameters'
        types in it), or for every call (`()`, variant None): the same in every round, where checks are
        numbered anew."""
        return () if variant is None else tuple(self.typed.type_in_body(p, variant) for p in decl.params)

    def back_name(self, decl: ast.FnDecl, path: str, variant: int | None = None) -> str:
        """The name of `decl`'s `_back` function (for the check `variant` of its body, see `FunctionBody`),
        generating it (later) the first time it is asked for."""
        key = (path, decl.name, "back", self.variant_key(decl, variant))
        if key not in self.existing_backs:
            back_name = self.existing_backs[key] = self.fresh_global(path, f"{decl.name}_back")
            self.pending.append(lambda: self.added[path].append(self.back_function(decl, path, back_name, variant)))
        return self.existing_backs[key]

    def back_function(self, decl: ast.FnDecl, path: str, back_name: str, variant: int | None) -> ast.FnDecl:
        body = FunctionBody(self, path, decl, variant)
        block, d_result = body.pullback()
        self.note_adjoints((path, back_name), body)
        params = (*strip_defaults(decl.params), ast.Param(d_result, decl.result))
        return ast.FnDecl(back_name, params, self.adjoints_annotation(decl), block, decl.span, decl.name_span)

    def adjoints_annotation(self, decl: ast.FnDecl) -> ast.TypeExpr | None:
        active = [decl.params[i] for i in self.active_params(decl)]
        return annotation_of(active, len(active) != 1) if decl.result is not None else None

    def split_names(self, decl: ast.FnDecl, path: str, variant: int | None = None) -> tuple[str, str] | None:
        """The names of `decl`'s `_fwd` and `_bwd` functions (for the check `variant` of its body), generating
        them (later) the first time they are asked for; None for a function that is not split (recursive, or
        returning from an `if`): its callers' backward sweeps call its `_back` function, which runs its
        forward again."""
        names = self.existing_backs
        written_for = self.variant_key(decl, variant)
        key, back_key = (path, decl.name, "fwd", written_for), (path, decl.name, "bwd", written_for)
        if key not in names:
            names[key] = ""  # not split
            if not self.recursive(decl) and FunctionBody(self, path, decl).ends_in_return():
                fwd = names[key] = self.fresh_global(path, f"{decl.name}_fwd")
                bwd = names[back_key] = self.fresh_global(path, f"{decl.name}_bwd")
                made = lambda: self.added[path].extend(self.split_functions(decl, path, fwd, bwd, variant))  # noqa: E731
                self.pending.append(made)
        return (names[key], names[back_key]) if names[key] else None

    def quiet_name(self, decl: ast.FnDecl, path: str) -> str:
        """The name of `decl`'s `_quiet` copy, without its `print`s and `assert`s (calling the quiet copies
        of the functions it calls): what a backward sweep calls where it runs a forward again."""
        key = (path, decl.name, "quiet", ())
        if key not in self.existing_backs:
            quiet = self.existing_backs[key] = self.fresh_global(path, f"{decl.name}_quiet")
            self.pending.append(lambda: self.added[path].append(self.quiet_function(decl, path, quiet)))
        return self.existing_backs[key]

    def quiet_function(self, decl: ast.FnDecl, path: str, quiet: str) -> ast.FnDecl:
        callees = {id(c.func): self.quiet_callee(c.func, path) for c in walk_calls(decl.body)}
        body = ast.replace_nodes(decl.body, {k: v for k, v in callees.items() if v is not None}, drop=ast.ExprStmt)
        return dataclasses.replace(decl, name=quiet, body=body)

    def quiet_callee(self, func: ast.Expr, from_path: str) -> ast.Expr | None:
        """How module `from_path` names the quiet copy of the function `func` calls, if that has effects."""
        callee = self.typed.type_of(func)
        if not isinstance(callee, FunctionRef) or callee.key not in self.typed.functions:
            return None
        decl, path = self.typed.functions[callee.key]
        if not isinstance(decl, ast.FnDecl) or not self.has_effects(decl):
            return None
        return self.reference(from_path, path, self.quiet_name(decl, path), func.span)

    def split_functions(self, decl: ast.FnDecl, path: str, fwd: str, bwd: str, variant: int | None) -> list[ast.FnDecl]:
        """`g_fwd(params) -> (result, kept)`: `g`'s body, also returning the values its backward sweep
        reads; `g_bwd(params, kept, d_result)`: that backward sweep, returning the adjoints of the float
        parameters."""
        writer = FunctionBody(self, path, decl, variant)
        forward, backward, kept, d_result = writer.split()
        self.note_adjoints((path, bwd), writer)
        params = strip_defaults(decl.params)
        # `g_bwd` is checked with the types it is called with: the kept values have the caller's shapes,
        # which the dimension names of `g`'s annotations (`f32[B, H]`) do not bind
        back_params = (*(dataclasses.replace(p, annotation=None) for p in params), ast.Param(kept), ast.Param(d_result))
        return [
            ast.FnDecl(fwd, params, None, forward, decl.span, decl.name_span),
            ast.FnDecl(bwd, back_params, None, backward, decl.span, decl.name_span),
        ]

    def recursive(self, decl: ast.FnDecl) -> bool:
        """Does `decl` call itself, directly or through other functions?"""
        return any(target is decl for target in self.reached(decl))

    def effectful(self) -> frozenset[str]:
        """The names of the functions that print or assert (themselves or through what they call), and of
        their `_fwd` functions: calls of them are never dropped as unread."""
        if self.effectful_names is None:
            found = {
                d.name
                for module in self.program.modules.values()
                for d in module.decls
                if isinstance(d, ast.FnDecl) and self.has_effects(d)
            }
            self.effectful_names = frozenset(found)
        fwd = {
            function
            for key, function in self.existing_backs.items()
            if key[2] == "fwd" and function and key[1] in self.effectful_names
        }
        return self.effectful_names | fwd

    def has_effects(self, decl: ast.FnDecl) -> bool:
        """Does `decl`, or a function it calls, have a statement run for its effect (`print`, `assert`)?
        (Asked for every call a re-run forward makes: answered once per function.)"""
        if id(decl) not in self.effects_of:
            functions = (decl, *self.reached(decl))
            self.effects_of[id(decl)] = any(isinstance(n, ast.ExprStmt) for d in functions for n in ast.walk(d.body))
        return self.effects_of[id(decl)]

    def rank_sensitive(self, decl: ast.FnDecl) -> bool:
        """Does `decl`, or a function it calls, have an operation whose derivative is written for its operands'
        ranks (`@`, `transpose`, `einsum`, `swapaxes`)? (Asked at every split call: answered once per function.)"""
        if id(decl) not in self.ranked_of:
            nodes = (n for d in (decl, *self.reached(decl)) for n in ast.walk(d.body))
            self.ranked_of[id(decl)] = any(self.ranked(n) for n in nodes)
        return self.ranked_of[id(decl)]

    def ranked(self, node: object) -> bool:
        if isinstance(node, ast.Binary):
            return node.op == "@"
        callee = self.typed.type_of(node.func) if isinstance(node, ast.Call) else None
        return isinstance(callee, PrimitiveRef) and callee.prim in RANKED

    def reached(self, decl: ast.FnDecl) -> Iterator[ast.FnDecl]:
        """The functions `decl` calls, directly or through others, each once."""
        seen: set[int] = set()
        todo = [decl]
        while todo:
            for node in ast.walk(todo.pop().body):
                callee = self.typed.type_of(node.func) if isinstance(node, ast.Call) else None
                if isinstance(callee, FunctionRef) and callee.key in self.typed.functions:
                    target, _ = self.typed.functions[callee.key]
                    if id(target) not in seen:
                        seen.add(id(target))
                        todo.append(target)
                        yield target

    def active_params(self, decl: ast.FnDecl | ast.Lambda) -> list[int]:
        # a parameter some call gives floats is active, though the call checked last gives it integers
        return [i for i, p in enumerate(decl.params) if is_active(self.typed.type_in_every_call(p) or ANY)]
