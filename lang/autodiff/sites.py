"""Finding the `grad(f, ...)` calls of a checked program that are ready to differentiate: those whose
function, and what it calls, contain no `grad` call left (`grad(grad(f))` is done inside out).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import field

from dl.lang import ast
from dl.lang.check import Typed, wrt_positions
from dl.lang.diagnostics import Span
from dl.lang.primitives import TRANSFORMS
from dl.lang.printer import print_expr
from dl.lang.record import record
from dl.lang.types import (
    FunctionRef,
    GradientRef,
)


@record(frozen=True)
class Site:
    """One `grad(f, ...)` call whose `f` is ready to differentiate (it contains no `grad` itself)."""

    call: ast.Call
    module: str
    function: ast.FnDecl | ast.Lambda
    function_module: str
    reference: ast.Expr  # how the call site names `f` (a Name, `module.f`, or the lambda itself)
    wrt: int | tuple[int, ...]
    with_value: bool
    local: Scope | None = None  # what the function around the call binds
    has_aux: bool = False  # `f` returns (loss, aux): the loss is differentiated, aux returned beside


def grad_sites(typed: Typed, within: frozenset[tuple[str, str]] | None = None) -> Iterator[Site]:
    """The `grad` calls of the program whose function (and what it calls) has no `grad` call left; with
    `within`, only those in the functions it names ((module, name))."""
    containing = functions_with_grad(typed)
    for path, module in typed.program.modules.items():
        for call, local in calls_with_scopes(module, path, within):
            ref = typed.type_of(call)
            if not isinstance(ref, GradientRef) or not isinstance(call.func, ast.Name):
                continue
            if call.func.id not in TRANSFORMS:
                continue
            if not isinstance(ref.function, FunctionRef):
                continue  # grad(grad(f)): the inner one first
            target = typed.functions.get(ref.function.key)
            if target is None:
                continue
            decl, target_path = target
            if reaches_grad(typed, decl, containing):
                continue
            f_node = call.args[0] if call.args else next(k.value for k in call.keywords if k.name == "f")
            wrt = wrt_positions(next((k.value for k in call.keywords if k.name == "wrt"), None))
            yield Site(call, path, decl, target_path, f_node, wrt, ref.with_value, local, ref.has_aux)


def unwritten(typed: Typed, within: frozenset[tuple[str, str]] | None = None) -> Iterator[ast.Call]:
    """The `grad` calls that no round will write: of a gradient that is no `grad` call of the program (a
    parameter holding one, as the REPL's variables are)."""
    for _, module in typed.program.modules.items():
        for call, _ in calls_with_scopes(module, module.path, within):
            ref = typed.type_of(call)
            if isinstance(ref, GradientRef) and isinstance(call.func, ast.Name) and call.func.id in TRANSFORMS:
                yield call


def calls_with_scopes(module: ast.Module, path: str, within: frozenset | None) -> Iterator[tuple[ast.Call, Scope]]:
    """Every call of the module (in the functions `within` names, if given), with what the function around it
    binds (for a `grad` of a local name)."""
    for decl in module.decls:
        if within is not None and (path, getattr(decl, "name", None)) not in within:
            continue
        scope = Scope.of(decl) if isinstance(decl, ast.FnDecl) else Scope.empty()
        for call in walk_calls(decl):
            yield call, scope


@record(frozen=True)
class Scope:
    """The names a top-level function binds (parameters, `let`s, loop variables, local functions), where
    each binding is, and those it assigns, and the anonymous functions its `let`s bind by name."""

    bound: frozenset[str]
    assigned: frozenset[str]
    # name -> the ast.Lambda a single `let name = fn(...) => ...` binds, or the local `fn name` declared once
    lambdas: dict
    bound_at: dict = field(default_factory=dict)  # name -> the (line, column) of each binding of it
    aliases: frozenset[str] = frozenset()  # names a single `let` binds to a declared function by name (`let g = f`)
    made: dict = field(default_factory=dict)  # name -> the call a single `let` binds it to (`let sq = make(3.0)`)

    @staticmethod
    def empty() -> Scope:
        return Scope(frozenset(), frozenset(), {})

    @staticmethod
    def of(decl: ast.FnDecl) -> Scope:
        bound = {p.name for p in decl.params}
        bound_at: dict[str, list[tuple[int, int]]] = {}
        lets: dict[str, list] = {}
        for node in ast.walk(decl.body):
            if isinstance(node, (ast.NamePattern, ast.FnDecl, ast.Param)):
                bound.add(node.name)
                bound_at.setdefault(node.name, []).append((node.span.line, node.span.column))
            if isinstance(node, ast.Let) and isinstance(node.pattern, ast.NamePattern):
                lets.setdefault(node.pattern.name, []).append(node.value)
            if isinstance(node, ast.FnDecl):
                lets.setdefault(node.name, []).append(node)
        lambdas = {n: v[0] for n, v in lets.items() if len(v) == 1 and isinstance(v[0], (ast.Lambda, ast.FnDecl))}
        aliases = {  # bound once in the whole function (no parameter of an inner function takes the name)
            n
            for n, v in lets.items()
            if len(v) == 1
            and len(bound_at.get(n, ())) == 1
            and (
                (isinstance(v[0], ast.Name) and v[0].id not in bound)
                or (isinstance(v[0], ast.Field) and isinstance(v[0].target, ast.Name) and v[0].target.id not in bound)
            )
        }
        made = {n: v[0] for n, v in lets.items() if len(v) == 1 and isinstance(v[0], ast.Call)}
        assigned = frozenset(ast.assigned_names(decl.body))
        return Scope(frozenset(bound), assigned, lambdas, bound_at, frozenset(aliases), made)

    def bound_after(self, name: str, span: Span) -> bool:
        """Whether a `let` (a loop, a local `fn`) binds `name` again after `span`: a function made at `span`
        captured the earlier binding, which that one hides."""
        return any(at > (span.line, span.column) for at in self.bound_at.get(name, ()))


def factory_help(name: str, call: ast.Call, scope: Scope) -> str:
    """How to differentiate the function a call made (`let sq = make(3.0)` where `grad` is written): make it
    inside the function differentiated, where its derivative is written with what it captured; the local
    values the call reads become that function's parameters after `t` (`fn f(t, k)`)."""
    made, factory = print_expr(call), print_expr(call.func)
    passed = sorted(ast.free_names(tuple(call.args)) & scope.bound)
    params = ", ".join(["t", *passed])
    return (
        f"help: `{name}` is the function `{made}` returns; differentiate a function that makes it and calls it, "
        f"`fn f({params}) {{ let {name} = {made}; return {name}(t) }}` with `grad(f)`, `{factory}` declared with "
        "`fn` at the top level"
    )


def walk_calls(node) -> Iterator[ast.Call]:
    for child in ast.walk(node):
        if isinstance(child, ast.Call):
            yield child


def functions_with_grad(typed: Typed) -> set[int]:
    """The ids of the functions whose body has a `grad` call (a lambda's, whichever closures of it there are)."""
    found = set()
    for decl, _ in typed.functions.values():
        for call in walk_calls(decl.body):
            if isinstance(call.func, ast.Name) and isinstance(typed.type_of(call), GradientRef):
                found.add(id(decl))
                break
    return found


def reaches_grad(typed: Typed, decl, containing: set[int]) -> bool:
    """Does `decl`, or a function it calls (transitively), still contain a `grad` call?"""
    return any(key in containing for key in reached(typed, decl))


def reached(typed: Typed, decl) -> dict[int, str]:
    """The functions `decl` and those it calls (transitively) name or call, each by its id (a lambda once, whichever
    closures of it there are), with its module (`decl` itself with module "")."""
    found: dict[int, str] = {}
    stack = [(decl, "")]
    while stack:
        current, path = stack.pop()
        if id(current) in found:
            continue
        found[id(current)] = path
        for node in ast.walk(current.body):
            ref = typed.type_of(node) if isinstance(node, (ast.Name, ast.Field, ast.Lambda)) else None
            if isinstance(ref, FunctionRef) and ref.key in typed.functions:
                stack.append(typed.functions[ref.key])
    return found
