"""Reverse-mode automatic differentiation as a source transformation: typed program -> program.

`differentiate(typed)` replaces every `grad(f, wrt=...)` and `value_and_grad(f, ...)` by a DL
function it generates, and returns the new program; no backend ever sees `grad`. For a
function `f` it writes

- `f_grad` (`f_value_and_grad`, `f_grad_wrt_1`, ...): runs `f`'s body forward, then its
  adjoint backward from the seed `1.0`, and returns the gradient of the chosen arguments;
- `g_fwd(params...)` and `g_bwd(params..., kept, d_result)` once for every function `g` that
  differentiated code calls (shared by all callers): `g_fwd` runs `g`'s body and returns its
  result with the values its backward sweep reads (`kept`), `g_bwd` runs that backward sweep
  and returns the adjoints of `g`'s float parameters, so a call's derivative is a call;
- `g_back(params..., d_result)` instead for a recursive `g` (whose kept values would contain
  themselves) or one that returns from inside an `if`: it recomputes `g`'s forward, then runs
  its backward, so recursion is recursion;
- `g_quiet(params...)` for a function `g` with a `print` or `assert` (or calling one) that code run
  again in a backward sweep calls: `g` without them, so effects happen once.

How each construct becomes code (docs/autodiff.md shows the printed result):

- Straight-line code is put in A-normal form (every operation's value gets a name) and
  renamed so that no name is assigned twice; the backward sweep then reads any value it
  needs by name, in reverse order, and adds each operation's adjoint contributions using
  that operation's rule from `RULES` (one DL template per primitive and operator).
- `for`, `break`, `continue` and `return` inside loops are first lowered to `while` with
  flags; a `return` inside an `if` moves the statements after the `if` into its branches.
- An `if` saves the values of the variables it assigns before it runs; its backward
  restores them, runs the branch taken again (recomputing its intermediates), then that
  branch's backward.
- A `while` pushes the values of the variables it assigns onto a tape at the start of every
  iteration, and at its end the values the iteration's backward reads onto another (`Kept`);
  its backward pops both one iteration at a time and runs that iteration's backward. Views
  of unchanged values (`m.w`, `x[t]`) are taken again rather than kept. A loop with a loop
  inside keeps only its variables and recomputes each iteration's body in its backward.

Everything this emits (`tape`, `push`, `pop`, `unbroadcast`, ...) has a rule too, so generated
code can be differentiated again: `grad(grad(f))` is two rounds of this transform, the program
re-checked in between so that the second round has the types of the first round's code.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache

from dl.lang import ast
from dl.lang.check import Typed, check, has_float, wrt_positions, zips
from dl.lang.diagnostics import UNKNOWN_SPAN, Diagnostic, DiagnosticError, Span, error
from dl.lang.modules import Program
from dl.lang.primitives import BY_NAME, NON_DIFFERENTIABLE, SIGNATURES, TRANSFORMS, Prim, bind
from dl.lang.types import (
    ANY,
    BOOL,
    I64,
    AnyType,
    FunctionRef,
    GradientRef,
    PrimitiveRef,
    StructType,
    TapeType,
    TensorType,
    TupleType,
    Type,
)

MAX_ROUNDS = 8  # grad(grad(...)) nesting depth


def differentiate(typed: Typed, calls: tuple = ()) -> tuple[Program, Typed]:
    """Replace every `grad`/`value_and_grad` in a checked program by generated DL functions.

    Returns the new program and its check (`calls`: the host's calls the first check was given, see
    `check`). Raises `DiagnosticError` for what cannot be differentiated (a primitive without a
    derivative rule, a call of a function value the checker cannot see)."""
    # (module, function) -> its `_back` function, (module, function, "fwd" or "bwd") -> its `_fwd` and `_bwd`
    # functions ("" if it is not split): shared by all rounds
    backs: dict[tuple, str] = {}
    for _ in range(MAX_ROUNDS):
        sites = list(grad_sites(typed))
        if not sites:
            return typed.program, typed
        program = Round(typed, backs).run(sites)
        typed = check(program, calls)
        if typed.errors:
            raise DiagnosticError([internal_error(typed.errors[0])])
    raise DiagnosticError([error("E0333", f"`grad` is nested more than {MAX_ROUNDS} deep", UNKNOWN_SPAN)])


def derivative_source(typed: Typed, function: str, wrt: int | tuple[int, ...], with_value: bool) -> str:
    """The printed DL source of the functions `grad(function, wrt=...)` generates in the entry module of a
    checked (and already differentiated) program: the gradient function first, then the `_back` functions."""
    from dl.lang.printer import print_decl

    path = typed.program.entry
    module = typed.program.modules[path]
    decl = next((d for d in module.decls if isinstance(d, ast.FnDecl) and d.name == function), None)
    if decl is None:
        names = [d.name for d in module.decls if isinstance(d, ast.FnDecl)]
        from dl.lang.primitives import closest

        suggestion = closest(function, names)
        notes = (f"help: did you mean `{suggestion}`?",) if suggestion else ()
        start = Span(path, 1, 1, 1, 2)
        raise DiagnosticError([error("E0201", f"`{path}` has no function `{function}`", start, notes=notes)])
    if any(id(p) not in typed.types for p in decl.params):
        raise DiagnosticError(
            [
                error(
                    "E0333",
                    f"`{function}` is never called, so the types of its parameters are unknown",
                    decl.name_span,
                    notes=("help: annotate its parameters, or call it (or `grad` of it) somewhere",),
                )
            ]
        )
    site_call = call("grad" if not with_value else "value_and_grad", name(function))
    site = Site(site_call, path, decl, path, name(function), wrt, with_value)
    generator = Round(typed)
    program = generator.run([site])
    checked = check(program)
    if checked.errors:
        raise DiagnosticError([internal_error(checked.errors[0])])
    parts = []
    for module_path in (path, *(p for p in program.modules if p != path)):
        for decl in generator.added[module_path]:
            where = "" if module_path == path else f"# in {module_path}, beside `{generated_from(decl.name)}`\n"
            parts.append(where + print_decl(decl))
    return "\n\n".join(parts) + "\n"


def generated_from(function: str) -> str:
    """The function a `_back`, `_fwd`, `_bwd` or `_quiet` function was generated from (by its name)."""
    for suffix in ("_back", "_fwd", "_bwd", "_quiet"):
        if suffix in function:
            return function.rsplit(suffix, 1)[0]
    return function


def internal_error(diagnostic: Diagnostic) -> Diagnostic:
    return error(
        "E0333",
        f"internal error in generated derivative code, please report: {diagnostic.message}",
        diagnostic.span,
        notes=("`dlrun grad FILE --fn NAME` prints the derivative code",),
    )


# ------------------------------------------------------------------ finding `grad(...)` calls


@dataclass(frozen=True)
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


def grad_sites(typed: Typed) -> Iterator[Site]:
    """The `grad` calls of the program whose function (and what it calls) has no `grad` call left."""
    containing = functions_with_grad(typed)
    for path, module in typed.program.modules.items():
        for call, local in calls_with_scopes(module):
            ref = typed.types.get(id(call))
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
            yield Site(call, path, decl, target_path, f_node, wrt, ref.with_value, local)


def calls_with_scopes(module: ast.Module) -> Iterator[tuple[ast.Call, Scope]]:
    """Every call of the module, with what the function around it binds (for a `grad` of a local name)."""
    for decl in module.decls:
        scope = Scope.of(decl) if isinstance(decl, ast.FnDecl) else Scope.empty()
        for call in walk_calls(decl):
            yield call, scope


@dataclass(frozen=True)
class Scope:
    """The names a top-level function binds (parameters, `let`s, loop variables, local functions) and
    assigns, and the anonymous functions its `let`s bind by name."""

    bound: frozenset[str]
    assigned: frozenset[str]
    lambdas: dict  # name -> the ast.Lambda a single `let name = fn(...) => ...` binds

    @staticmethod
    def empty() -> Scope:
        return Scope(frozenset(), frozenset(), {})

    @staticmethod
    def of(decl: ast.FnDecl) -> Scope:
        bound = {p.name for p in decl.params}
        lets: dict[str, list] = {}
        for node in walk(decl.body):
            if isinstance(node, (ast.NamePattern, ast.FnDecl, ast.Param)):
                bound.add(node.name)
            if isinstance(node, ast.Let) and isinstance(node.pattern, ast.NamePattern):
                lets.setdefault(node.pattern.name, []).append(node.value)
        lambdas = {n: v[0] for n, v in lets.items() if len(v) == 1 and isinstance(v[0], ast.Lambda)}
        return Scope(frozenset(bound), frozenset(assigned_names(decl.body)), lambdas)


def walk_calls(node) -> Iterator[ast.Call]:
    for child in walk(node):
        if isinstance(child, ast.Call):
            yield child


def walk(node) -> Iterator:
    """Every AST node under `node` (itself included), depth first."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        if isinstance(current, tuple):
            stack.extend(reversed(current))
            continue
        if dataclasses.is_dataclass(current) and not isinstance(current, type):
            for f in dataclasses.fields(current):
                if f.name == "span" or f.name == "name_span":
                    continue
                value = getattr(current, f.name)
                if isinstance(value, (tuple, ast.Block)) or dataclasses.is_dataclass(value):
                    stack.append(value)


def functions_with_grad(typed: Typed) -> set[int]:
    found = set()
    for key, (decl, _) in typed.functions.items():
        for call in walk_calls(decl.body):
            if isinstance(call.func, ast.Name) and isinstance(typed.types.get(id(call)), GradientRef):
                found.add(key)
                break
    return found


def reaches_grad(typed: Typed, decl, containing: set[int]) -> bool:
    """Does `decl`, or a function it calls (transitively), still contain a `grad` call?"""
    seen: set[int] = set()
    stack = [decl]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if id(current) in containing:
            return True
        for node in walk(current.body):
            ref = typed.types.get(id(node)) if isinstance(node, (ast.Name, ast.Field, ast.Lambda)) else None
            if isinstance(ref, FunctionRef) and ref.key in typed.functions:
                stack.append(typed.functions[ref.key][0])
    return False


# ------------------------------------------------------------------ tree helpers


def replace_nodes(node, replacements: dict[int, object], drop: type | tuple = ()):
    """A copy of `node` with the nodes whose ids are keys of `replacements` swapped for the values, and
    the items of `drop`'s types left out of the tuples (statement lists) that hold them."""
    if id(node) in replacements:
        return replacements[id(node)]
    if isinstance(node, tuple):
        items = tuple(replace_nodes(item, replacements, drop) for item in node if not isinstance(item, drop))
        same = len(items) == len(node) and all(a is b for a, b in zip(items, node, strict=True))
        return node if same else items
    if not dataclasses.is_dataclass(node) or isinstance(node, type):
        return node
    changes = {}
    for f in dataclasses.fields(node):
        if f.name in ("span", "name_span"):
            continue
        value = getattr(node, f.name)
        new = replace_nodes(value, replacements, drop)
        if new is not value:
            changes[f.name] = new
    return dataclasses.replace(node, **changes) if changes else node


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


def float_literal(value: float, t: Type | None) -> ast.FloatLiteral:
    dtype = t.dtype if isinstance(t, TensorType) and t.dtype == "f64" else None
    return ast.FloatLiteral(value, dtype)


# ------------------------------------------------------------------ derivative rules
#
# A rule gives, for each differentiable operand of an operation, a DL expression for its
# adjoint contribution, written over the names `d` (the adjoint of the result), `r` (the
# result), the operands by their parameter names, and `k` (a static axis). Contributions
# already have the operand's shape.


@cache
def template(source: str) -> ast.Expr:
    from dl.lang.parse import parse

    module = parse(f"fn rule() {{ return {source} }}", "<rule>")
    return module.decls[0].body.body[0].value


def instantiate(source: str, bindings: dict[str, ast.Expr]) -> ast.Expr:
    expr = template(source)
    replacements = {
        id(node): bindings[node.id] for node in walk(expr) if isinstance(node, ast.Name) and node.id in bindings
    }
    return replace_nodes(expr, replacements)


ELEMENTWISE = {
    Prim.EXP: "d * r",
    Prim.LOG: "d / x",
    Prim.SQRT: "d / (2.0 * r)",
    Prim.TANH: "d * (1.0 - r * r)",
    Prim.SIGMOID: "d * r * (1.0 - r)",
    Prim.RELU: "where(x > 0.0, d, zeros_like(d))",
    Prim.ABS: "where(x > 0.0, d, where(x < 0.0, -d, zeros_like(d)))",
    Prim.SIN: "d * cos(x)",
    Prim.COS: "-(d * sin(x))",
}
BINARY = {
    "+": ("d", "d"),
    "-": ("d", "-d"),
    "*": ("d * b", "d * a"),
    "/": ("d / b", "-(d * r / b)"),
    "**": ("d * b * a ** (b - 1.0)", "d * r * log(a)"),
    "%": ("d", "-(d * ((a - r) / b))"),
    "maximum": (
        "where(a > b, d, where(a == b, 0.5 * d, zeros_like(d)))",
        "where(b > a, d, where(a == b, 0.5 * d, zeros_like(d)))",
    ),
    "minimum": (
        "where(a < b, d, where(a == b, 0.5 * d, zeros_like(d)))",
        "where(b < a, d, where(a == b, 0.5 * d, zeros_like(d)))",
    ),
    "where": ("where(condition, d, zeros_like(d))", "where(condition, zeros_like(d), d)"),
}
LINEAR_HELPERS = {
    # the rules of what derivative code itself is written with, for derivatives of derivatives
    Prim.UNBROADCAST: {"x": "zeros_like(x) + d"},
    Prim.RESHAPE_LIKE: {"x": "reshape_like(d, x)"},
    Prim.EXPAND_DIMS: {"x": "reshape_like(d, x)"},
    Prim.RESHAPE: {"x": "reshape_like(d, x)"},
    Prim.BROADCAST_TO: {"x": "unbroadcast(d, x)"},
    Prim.TREE_ADD: {"a": "d", "b": "d"},
    Prim.GATHER: {"x": "scatter_add(zeros_like(x), indices, d, axis=k)"},
    Prim.SCATTER_ADD: {"x": "d", "updates": "unbroadcast(gather(d, indices, axis=k), updates)"},
    Prim.SPLIT_LIKE: {"x": "concat(d, axis=k)"},
    Prim.CONCAT: {"tensors": "split_like(d, tensors, axis=k)"},
    Prim.PUSH: {"tape": "pop(d)[1]", "value": "pop(d)[0]"},
    Prim.POP: {"tape": "push(d[1], d[0])"},
}

# convolution: each of these is linear in each tensor it computes with, so the rules are each other, and
# `grad(grad(f))` goes through them. `like` gives only a shape (no gradient); max pooling's choice of position
# is constant almost everywhere, so `x` gets none from the pooling helpers, and `dy`/`v` get the adjoint gather
# or scatter. A `stride=` left out of a max pooling call is its window `size` (see `convolution_bindings`).
CONVOLUTION = {
    Prim.CONV2D: {
        "x": "conv2d_input_grad(d, w, x, stride=stride, padding=padding)",
        "w": "conv2d_weight_grad(d, x, w, stride=stride, padding=padding)",
    },
    Prim.CONV2D_INPUT_GRAD: {
        "dy": "conv2d(d, w, stride=stride, padding=padding)",
        "w": "conv2d_weight_grad(dy, d, w, stride=stride, padding=padding)",
    },
    Prim.CONV2D_WEIGHT_GRAD: {
        "dy": "conv2d(x, d, stride=stride, padding=padding)",
        "x": "conv2d_input_grad(dy, d, x, stride=stride, padding=padding)",
    },
    Prim.MAX_POOL2D: {"x": "max_pool2d_grad(d, x, size, stride=stride, padding=padding)"},
    Prim.MAX_POOL2D_GRAD: {"dy": "max_pool2d_gather(d, x, size, stride=stride, padding=padding)"},
    Prim.MAX_POOL2D_GATHER: {"v": "max_pool2d_grad(d, x, size, stride=stride, padding=padding)"},
}


def convolution_bindings(values: dict[str, ast.Expr], d: ast.Expr, r: ast.Expr) -> dict[str, ast.Expr]:
    bindings = {"d": d, "r": r, **values}
    if bindings.get("stride") is None:
        bindings["stride"] = values["size"]
    return bindings


# The primitives with a derivative rule here; every other one is in NON_DIFFERENTIABLE (a test checks that the
# two sets are disjoint and cover `Prim`).
DIFFERENTIABLE = (
    frozenset(ELEMENTWISE)
    | frozenset(LINEAR_HELPERS)
    | frozenset(CONVOLUTION)
    | {
        Prim.MAXIMUM,
        Prim.MINIMUM,
        Prim.WHERE,
        Prim.MATMUL,
        Prim.SUM,
        Prim.MEAN,
        Prim.MAX,
        Prim.MIN,
        Prim.LOGSUMEXP,
        Prim.SOFTMAX,
        Prim.LOG_SOFTMAX,
        Prim.TRANSPOSE,
        Prim.STACK,
        Prim.FLOAT,
        Prim.TREE_MAP,  # written out leaf by leaf (`expand_tree_map`): the calls of its function are differentiated
        Prim.TREE_DOT,  # written out as a sum of `sum(a * b)` (`expand_tree_dot`)
    }
)


class NotDifferentiable(Exception):
    def __init__(self, message: str, span: Span, notes: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.span = span
        self.notes = notes


# ------------------------------------------------------------------ one round of the transform


class Round:
    """Generates the derivative functions for a set of `grad` sites and rewrites the program."""

    def __init__(self, typed: Typed, backs: dict[tuple, str] | None = None) -> None:
        self.typed = typed
        self.existing_backs = backs if backs is not None else {}
        self.effectful_names: frozenset[str] | None = None
        self.effects_of: dict[int, bool] = {}  # id of a function -> `has_effects`
        self.program = typed.program
        self.added: dict[str, list[ast.FnDecl]] = {path: [] for path in self.program.modules}
        self.taken: dict[str, set[str]] = {path: module_names(m) for path, m in self.program.modules.items()}
        self.pending: list[Callable[[], list[ast.FnDecl]]] = []  # makers of the functions asked for

    def run(self, sites: list[Site]) -> Program:
        replacements: dict[str, dict[int, object]] = {path: {} for path in self.program.modules}
        problems: list[Diagnostic] = []
        for site in sites:
            try:
                replacements[site.module][id(site.call)] = self.site(site)
                while self.pending:
                    self.pending.pop()()
            except NotDifferentiable as problem:
                problems.append(error("E0333", str(problem), problem.span, notes=problem.notes))
        if problems:
            raise DiagnosticError(problems)
        modules = {}
        for path, module in self.program.modules.items():
            decls = replace_nodes(module.decls, replacements[path])
            modules[path] = ast.Module(module.path, (*decls, *self.added[path]))
        return Program(self.program.entry, modules, self.program.imports, self.program.sources)

    def fresh_global(self, path: str, base: str) -> str:
        return unused_name(base, self.taken[path])

    def reference(self, from_path: str, to_path: str, function: str, span: Span) -> ast.Expr:
        """How code in module `from_path` names function `function` of module `to_path`."""
        if from_path == to_path:
            return ast.Name(function, span)
        alias = next((a for a, target in self.program.imports.get(from_path, []) if target == to_path), None)
        if alias is None:
            raise NotDifferentiable(f"`grad` needs `{function}`'s module imported here", span)
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
        body = FunctionBody(self, site.function_module, decl).gradient(site.wrt, site.with_value)
        if isinstance(decl, ast.Lambda):
            return ast.Lambda(decl.params, None, body, site.call.span)
        suffix = "value_and_grad" if site.with_value else "grad"
        if site.wrt != 0:
            positions = site.wrt if isinstance(site.wrt, tuple) else (site.wrt,)
            suffix += "_wrt_" + "_".join(map(str, positions))
        generated = self.fresh_global(site.function_module, f"{decl.name}_{suffix}")
        positions = site.wrt if isinstance(site.wrt, tuple) else (site.wrt,)
        result = annotation_of([params[i] for i in positions], isinstance(site.wrt, tuple))
        if site.with_value and result is not None:
            result = ast.TupleTypeExpr((decl.result, result)) if decl.result is not None else None
        self.added[site.function_module].append(ast.FnDecl(generated, params, result, body, decl.span, decl.name_span))
        return self.reference(site.module, site.function_module, generated, site.call.span)

    def known_statically(self, site: Site) -> None:
        """`grad(f)` is written where `f` is known: a function's name, a lambda, or a name bound once to a
        lambda whose captured names do not change. A parameter or variable holding some function does not
        say which (each call could pass another), so its derivative cannot be written once."""
        reference, local = site.reference, site.local
        if not isinstance(reference, ast.Name) or local is None or reference.id not in local.bound:
            return
        bound = local.lambdas.get(reference.id)
        unchanged = reference.id not in local.assigned and bound is not None
        if bound is site.function and unchanged and not free_names(bound.body) & local.assigned:
            return
        raise NotDifferentiable(
            f"`grad` cannot differentiate `{reference.id}`: it holds a function known only when the program runs",
            reference.span,
            ("help: write `grad` where the function is named, and pass the derivative: `slope(grad(cube), x)`",),
        )

    def back_name(self, decl: ast.FnDecl, path: str) -> str:
        """The name of `decl`'s `_back` function, generating it (later) the first time it is asked for."""
        key = (path, decl.name)
        if key not in self.existing_backs:
            back_name = self.existing_backs[key] = self.fresh_global(path, f"{decl.name}_back")
            self.pending.append(lambda: self.added[path].append(self.back_function(decl, path, back_name)))
        return self.existing_backs[key]

    def back_function(self, decl: ast.FnDecl, path: str, back_name: str) -> ast.FnDecl:
        body = FunctionBody(self, path, decl)
        block, d_result = body.pullback()
        params = (*strip_defaults(decl.params), ast.Param(d_result, decl.result))
        return ast.FnDecl(back_name, params, self.adjoints_annotation(decl), block, decl.span, decl.name_span)

    def adjoints_annotation(self, decl: ast.FnDecl) -> ast.TypeExpr | None:
        active = [decl.params[i] for i in self.active_params(decl)]
        return annotation_of(active, len(active) != 1) if decl.result is not None else None

    def split_names(self, decl: ast.FnDecl, path: str) -> tuple[str, str] | None:
        """The names of `decl`'s `_fwd` and `_bwd` functions, generating them (later) the first time they
        are asked for; None for a function that is not split (recursive, or returning from an `if`): its
        callers' backward sweeps call its `_back` function, which runs its forward again."""
        names = self.existing_backs
        key = (path, decl.name, "fwd")
        if key not in names:
            names[key] = ""  # not split
            if not self.recursive(decl) and FunctionBody(self, path, decl).ends_in_return():
                fwd = names[key] = self.fresh_global(path, f"{decl.name}_fwd")
                bwd = names[(path, decl.name, "bwd")] = self.fresh_global(path, f"{decl.name}_bwd")
                self.pending.append(lambda: self.added[path].extend(self.split_functions(decl, path, fwd, bwd)))
        return (names[key], names[(path, decl.name, "bwd")]) if names[key] else None

    def quiet_name(self, decl: ast.FnDecl, path: str) -> str:
        """The name of `decl`'s `_quiet` copy, without its `print`s and `assert`s (calling the quiet copies
        of the functions it calls): what a backward sweep calls where it runs a forward again."""
        key = (path, decl.name, "quiet")
        if key not in self.existing_backs:
            quiet = self.existing_backs[key] = self.fresh_global(path, f"{decl.name}_quiet")
            self.pending.append(lambda: self.added[path].append(self.quiet_function(decl, path, quiet)))
        return self.existing_backs[key]

    def quiet_function(self, decl: ast.FnDecl, path: str, quiet: str) -> ast.FnDecl:
        callees = {id(c.func): self.quiet_callee(c.func, path) for c in walk_calls(decl.body)}
        body = replace_nodes(decl.body, {k: v for k, v in callees.items() if v is not None}, drop=ast.ExprStmt)
        return dataclasses.replace(decl, name=quiet, body=body)

    def quiet_callee(self, func: ast.Expr, from_path: str) -> ast.Expr | None:
        """How module `from_path` names the quiet copy of the function `func` calls, if that has effects."""
        callee = self.typed.types.get(id(func))
        if not isinstance(callee, FunctionRef) or callee.key not in self.typed.functions:
            return None
        decl, path = self.typed.functions[callee.key]
        if not isinstance(decl, ast.FnDecl) or not self.has_effects(decl):
            return None
        return self.reference(from_path, path, self.quiet_name(decl, path), func.span)

    def split_functions(self, decl: ast.FnDecl, path: str, fwd: str, bwd: str) -> list[ast.FnDecl]:
        """`g_fwd(params) -> (result, kept)`: `g`'s body, also returning the values its backward sweep
        reads; `g_bwd(params, kept, d_result)`: that backward sweep, returning the adjoints of the float
        parameters."""
        forward, backward, kept, d_result = FunctionBody(self, path, decl).split()
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
            if len(key) == 3 and key[2] == "fwd" and function and key[1] in self.effectful_names
        }
        return self.effectful_names | fwd

    def has_effects(self, decl: ast.FnDecl) -> bool:
        """Does `decl`, or a function it calls, have a statement run for its effect (`print`, `assert`)?
        (Asked for every call a re-run forward makes: answered once per function.)"""
        if id(decl) not in self.effects_of:
            functions = (decl, *self.reached(decl))
            self.effects_of[id(decl)] = any(isinstance(n, ast.ExprStmt) for d in functions for n in walk(d.body))
        return self.effects_of[id(decl)]

    def reached(self, decl: ast.FnDecl) -> Iterator[ast.FnDecl]:
        """The functions `decl` calls, directly or through others, each once."""
        seen: set[int] = set()
        todo = [decl]
        while todo:
            for node in walk(todo.pop().body):
                callee = self.typed.types.get(id(node.func)) if isinstance(node, ast.Call) else None
                if isinstance(callee, FunctionRef) and callee.key in self.typed.functions:
                    target, _ = self.typed.functions[callee.key]
                    if id(target) not in seen:
                        seen.add(id(target))
                        todo.append(target)
                        yield target

    def active_params(self, decl: ast.FnDecl | ast.Lambda) -> list[int]:
        return [i for i, p in enumerate(decl.params) if is_active(self.typed.types.get(id(p), ANY))]


def annotation_of(params: list[ast.Param], as_tuple: bool) -> ast.TypeExpr | None:
    """The type of the gradients of these parameters, when all of them are annotated."""
    if any(p.annotation is None for p in params):
        return None
    if as_tuple:
        return ast.TupleTypeExpr(tuple(p.annotation for p in params))
    return params[0].annotation


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


def module_names(module: ast.Module) -> set[str]:
    names = set(BY_NAME) | set(TRANSFORMS)
    for decl in module.decls:
        if isinstance(decl, (ast.FnDecl, ast.StructDecl, ast.Const)):
            names.add(decl.name)
        elif isinstance(decl, ast.Import):
            names.add(decl.alias or decl.module)
    return names


# ------------------------------------------------------------------ records of the forward sweep


@dataclass
class Part:
    """An adjoint contribution to one region (`indices`) or field of a variable, added in place."""

    indices: tuple | None
    field: str | None
    value: ast.Expr


@dataclass
class Op:
    """`let result = rhs`, where rhs is one operation on atoms: what the backward sweep differentiates."""

    result: str
    rhs: ast.Expr
    original: ast.Expr | None  # the user's expression it came from (for types and spans)
    split: tuple[ast.Expr, str] | None = None  # a split call: its `_bwd` function, the name of `_fwd`'s pair


@dataclass
class Store:
    """`let new = old; new[indices] = value` (or `new.field = value`): a functional update."""

    new: str
    old: str
    target: ast.Expr  # `new[indices]` or `new.field`
    value: ast.Expr


@dataclass
class Kept:
    """What a `while`'s iterations keep for its backward sweep (instead of computing it again): the
    records of the body's forward sweep, the names the body left its variables in, the names it
    defines or assigns, and the tape of their values (`tape`), pushed at the end of each iteration by
    the statement `push` (its value, `tape` itself until the backward sweep knows what it reads)."""

    records: list[Record]
    env: dict[str, str]
    written: set[str]
    tape: str
    push: ast.Assign
    lets: list[ast.Let]  # the body's `let name = value`s, in order
    assigned: set[str]  # the names the body assigns (`x = ...`, `x[i] = ...`)

    def split(self, reads: set[str], exits: dict[str, str], is_view) -> tuple[list[str], list[str], list[ast.Let]]:
        """Of the names the backward sweep `reads`: those the iteration keeps on the tape; those that are
        the values the loop's variables had after it (`exits`: name -> variable), still in the variables
        when its backward starts; and the `let`s of views that make the others again (`kept_or_made`)."""
        afters = {v for v in reads & self.written if v in exits and v not in self.assigned}
        needed, written = reads & self.written - afters, self.written - afters
        values, views = kept_or_made(self.lets, needed, written, self.assigned, is_view)
        return values, sorted(afters), views


@dataclass
class Compound:
    """An `if` or `while` that assigns variables declared outside it."""

    stmt: ast.If | ast.While
    env: dict[str, str]  # user name -> generated name, when it started
    carried: list[str]  # the generated names it assigns (in place)
    saved: str  # the name holding their values before (an `if`) or the tape of them (a `while`)
    kept: Kept | None = None  # a `while` whose iterations keep what their backward reads


Record = Op | Store | Compound


@dataclass
class Sweep:
    """What one block's emission produces: its statements and what its backward needs."""

    stmts: list[ast.Stmt] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)


# ------------------------------------------------------------------ one function's derivative


class FunctionBody:
    """Builds the body of a derivative of one function: the forward sweep, then the backward sweep."""

    def __init__(self, round_: Round, path: str, decl: ast.FnDecl | ast.Lambda) -> None:
        self.round = round_
        self.typed = round_.typed
        self.path = path
        self.decl = decl
        self.types: dict[str, Type] = {}  # generated name -> type
        self.extra_types: dict[int, Type] = {}  # types of nodes the lowering made
        # module-level names are reserved (the code refers to them by name); locals are renamed anyway
        self.used: set[str] = set(round_.taken[path]) | {p.name for p in decl.params}
        # the user's names, which the names lowering adds (flags, loop counters) must not meet
        self.user_names = {n.id for n in walk(decl.body) if isinstance(n, ast.Name)} | set(self.used)
        self.user_names |= {n.name for n in walk(decl.body) if isinstance(n, ast.NamePattern)}
        self.local_functions = {id(n) for n in walk(decl.body) if isinstance(n, ast.FnDecl)}
        self.adjoints: dict[str, str] = {}
        self.result_type: Type = ANY
        self.pending: list[ast.Stmt] = []  # statements a rule needs before its contributions
        self.just_made = ""  # the name the latest operation's result was given
        # local functions and anonymous functions bound by `let`: (declaration, the names it captured)
        # they are bound in `env` under "fn NAME" (not an identifier) to an index into this table
        self.closures: list[tuple[ast.FnDecl | ast.Lambda, dict[str, str]]] = []
        self.inlining: list[int] = []  # the top-level functions being inlined, innermost last
        self.filled: dict[int, ast.Stmt] = {}  # the pushes of kept values (`Kept.push`), once known
        self.values: dict[str, ast.Expr] = {}  # generated name -> the operation whose value it holds
        self.effects = True  # False where a forward runs again: calls go to the functions' quiet copies
        self.all_assigned: set[str] | None = None
        # the Ops of the record list being differentiated -> their stretch in it, and the current Op's stretch
        self.stretch: tuple[dict[str, int], int] = ({}, -1)

    # -------------------------------------------------------------- names and types
    def fresh(self, base: str) -> str:
        return unused_name(base, self.used)

    def fresh_user_name(self, base: str) -> str:
        """A variable name for code the lowering adds, unlike any of the user's."""
        return unused_name(base, self.user_names)

    def adjoint(self, var: str) -> str:
        if var not in self.adjoints:
            self.adjoints[var] = self.fresh(f"d_{var}")
        return self.adjoints[var]

    def type_of(self, node) -> Type:
        if id(node) in self.extra_types:
            return self.extra_types[id(node)]
        found = self.typed.types.get(id(node))
        if found is not None:
            return found
        match node:
            case ast.BoolLiteral() | ast.Unary(op="not"):
                return BOOL
            case ast.IntLiteral():
                return I64
            case ast.Binary(op=op) if op in ("==", "!=", "<", "<=", ">", ">=", "and", "or"):
                return BOOL
        return ANY

    def transposed(self, atom: ast.Expr) -> ast.Name | None:
        """`w` when `atom` names `transpose(w)` of a matrix `w` with a gradient, made in the stretch of
        straight-line code the current operation is in (so `w` and its adjoint are the same there)."""
        if not isinstance(atom, ast.Name):
            return None
        stretches, now = self.stretch
        if stretches.get(atom.id) != now:  # made elsewhere: `w`'s adjoint here need not be the one it had there
            return None
        match self.values.get(atom.id):
            case ast.Call(func=func, args=(ast.Name() as w,), keywords=()) if self.active(w) and self.rank(w) == 2:
                callee = self.type_of(func)
                return w if isinstance(callee, PrimitiveRef) and callee.name == "transpose" else None
        return None

    def is_view(self, expr: ast.Expr) -> bool:
        """A constant, a name, a field, an element or slice at names and constants, a transpose, shape
        or length of one, sizes computed from those: what a backward sweep takes again rather than keeps
        (no arithmetic on tensors; and the compiled backend needs sizes it can see)."""
        match expr:
            case ast.Name() | ast.IntLiteral() | ast.FloatLiteral() | ast.BoolLiteral():
                return True
            case ast.Unary(op="-", operand=ast.IntLiteral() | ast.FloatLiteral()):
                return True
            case ast.Field(target=target):
                return self.is_view(target)
            case ast.Index(target=target, indices=indices):
                simple = (ast.Name, ast.IntLiteral, ast.Slice)
                return self.is_view(target) and all(isinstance(i, simple) for i in indices)
            case ast.Call(func=func, args=(x,), keywords=()):
                callee = self.type_of(func)
                return isinstance(callee, PrimitiveRef) and callee.name in VIEWS and self.is_view(x)
            case ast.Binary(op="+" | "-" | "*", lhs=a, rhs=b):  # integer arithmetic on sizes (`2 * n`)
                t = self.type_of(expr)
                integer = isinstance(t, TensorType) and t.rank == 0 and t.dtype in ("i32", "i64")
                return integer and self.is_view(a) and self.is_view(b)
        return False

    def active(self, atom: ast.Expr) -> bool:
        return isinstance(atom, ast.Name) and atom.id in self.types and is_active(self.types[atom.id])

    # -------------------------------------------------------------- the two kinds of function
    def gradient(self, wrt: int | tuple[int, ...], with_value: bool) -> ast.Block:
        """`grad(f)`'s body: forward, seed 1, backward; returns the gradient (and the value)."""
        env = self.parameters()
        body = self.lower(self.decl)
        out: list[ast.Stmt] = []
        value = self.fresh("value") if with_value else None
        if value is not None:
            out.append(let(value, float_literal(0.0, self.result_type)))
        have: set[str] = set()
        out += self.sweep_to_return(body, env, have, self.seed, value, effects=True)
        positions = wrt if isinstance(wrt, tuple) else (wrt,)
        gradients = [self.final_adjoint(self.decl.params[i].name, have) for i in positions]
        result = ast.TupleLiteral(tuple(gradients)) if isinstance(wrt, tuple) else gradients[0]
        if value is not None:
            result = ast.TupleLiteral((name(value), result))
        out.append(ast.Return(result))
        return ast.Block(tuple(prune(self.with_kept_values(out), self.round.effectful())))

    def seed(self, result: ast.Name) -> ast.Expr:
        """The adjoint the backward sweep starts from: 1, in the result's dtype."""
        t = self.types.get(result.id)
        if isinstance(t, TensorType) and not t.weak and t.rank == 0:
            return float_literal(1.0, t)
        return ast.Binary("+", call("zeros_like", result), ast.FloatLiteral(1.0))

    def pullback(self) -> tuple[ast.Block, str]:
        """`g_back`'s body: forward, then backward from the parameter `d_result`; returns the adjoints of
        the float parameters (a tuple when there are several)."""
        env = self.parameters()
        d_result = self.fresh("d_result")
        body = self.lower(self.decl)
        have: set[str] = set()
        out = self.sweep_to_return(body, env, have, lambda result: name(d_result), None, effects=False)
        positions = self.round.active_params(self.decl)
        gradients = [self.final_adjoint(self.decl.params[i].name, have) for i in positions]
        out.append(ast.Return(tuple_of(gradients) if gradients else ast.TupleLiteral(())))
        return ast.Block(tuple(prune(self.with_kept_values(out), self.round.effectful()))), d_result

    def with_kept_values(self, stmts: list[ast.Stmt]) -> list[ast.Stmt]:
        """The loops' pushes of the values their backward sweeps read (`restore`); a loop whose backward
        reads none, or never runs, keeps nothing (`kept = kept`, which `prune` drops with the tape)."""
        return list(replace_nodes(tuple(stmts), self.filled)) if self.filled else stmts

    def ends_in_return(self) -> bool:
        """Does the body, lowered, end in one `return` (not in an `if` whose branches return)?"""
        return isinstance(self.lower(self.decl)[-1], ast.Return)

    def split(self) -> tuple[ast.Block, ast.Block, str, str]:
        """The bodies of `g_fwd` and `g_bwd` (`Round.split_functions`), with the names of `g_bwd`'s
        parameters for the kept values and the result's adjoint."""
        env = self.parameters()
        d_result = self.fresh("d_result")
        kept = self.fresh("kept")
        *prefix, last = self.lower(self.decl)
        sweep = Sweep()
        for stmt in prefix:
            self.forward(stmt, env, sweep, nested=False, effects=True)
        result = self.atom(last.value, env, sweep, "result") if last.value is not None else ast.TupleLiteral(())
        have: set[str] = set()
        back: list[ast.Stmt] = []
        if self.active(result):
            self.accumulate(result.id, name(d_result), back, have)
        back += self.backward(sweep.records, have)
        gradients = [self.final_adjoint(self.decl.params[i].name, have) for i in self.round.active_params(self.decl)]
        back.append(ast.Return(tuple_of(gradients) if gradients else ast.TupleLiteral(())))
        back = prune(self.with_kept_values(back), self.round.effectful())
        params = {p.name for p in self.decl.params}
        forward = self.with_kept_values(sweep.stmts)
        lets = [s for s in forward if isinstance(s, ast.Let) and isinstance(s.pattern, ast.NamePattern)]
        assigned = assigned_names(tuple(forward))
        written = {n.name for s in forward if isinstance(s, ast.Let) for n in pattern_names(s.pattern)}
        written |= assigned & params
        values, views = kept_or_made(lets, free_names(tuple(back)) & written, written, assigned, self.is_view)
        kept_values = tuple_of(list(map(name, values))) if values else ast.TupleLiteral(())
        forward.append(ast.Return(ast.TupleLiteral((result, kept_values))))
        taken: list[ast.Stmt] = []
        for position, value in enumerate(values):
            item = name(kept) if len(values) == 1 else index_of(name(kept), position)
            taken.append(assign(name(value), item) if value in params else let(value, item))
        forward = prune(forward, self.round.effectful())
        return ast.Block(tuple(forward)), ast.Block(tuple(taken + views + back)), kept, d_result

    def parameters(self) -> dict[str, str]:
        env = {}
        for param in self.decl.params:
            self.types[param.name] = self.typed.types.get(id(param), ANY)
            env[param.name] = param.name
        return env

    def final_adjoint(self, var: str, have: set[str]) -> ast.Expr:
        return name(self.adjoint(var)) if var in have else call("zeros_like", name(var))

    # -------------------------------------------------------------- lowering control flow
    def lower(self, decl: ast.FnDecl | ast.Lambda) -> list[ast.Stmt]:
        """The body with `for` made `while`, `break`/`continue`/`return` in loops made flags, and every
        `return` at the end of a branch (the statements after an `if` that returns moved into it)."""
        if isinstance(decl.body, ast.Block):
            stmts = list(decl.body.body)
        else:
            stmts = [ast.Return(decl.body, decl.body.span)]
        self.result_type = self.return_type(stmts)
        lowering = Lowering(self)
        stmts = lowering.block(stmts, None)
        prefix = lowering.prelude
        return lift_returns(prefix + stmts)

    def return_type(self, stmts: list[ast.Stmt]) -> Type:
        for node in walk(tuple(stmts)):
            if isinstance(node, ast.Return) and node.value is not None:
                found = self.typed.types.get(id(node.value))
                if found is not None and not isinstance(found, AnyType):
                    return found
        return ANY

    # -------------------------------------------------------------- sweeps
    def sweep_to_return(self, stmts, env, have, seed, value, effects) -> list[ast.Stmt]:
        """Forward and backward of a block that ends in `return` (or in an `if` whose branches do)."""
        outer, self.effects = self.effects, effects
        out = self.sweep_to_return_with(stmts, env, have, seed, value, effects)
        self.effects = outer
        return out

    def sweep_to_return_with(self, stmts, env, have, seed, value, effects) -> list[ast.Stmt]:
        sweep = Sweep()
        *prefix, last = stmts
        for stmt in prefix:
            self.forward(stmt, env, sweep, nested=False, effects=effects)
        out = sweep.stmts
        if isinstance(last, ast.Return):
            result = self.atom(last.value, env, sweep, "result") if last.value is not None else None
            out = sweep.stmts
            if value is not None and result is not None:
                out.append(assign(name(value), result))
            if result is not None and self.active(result):
                self.accumulate(result.id, seed(result), out, have)
        else:
            assert isinstance(last, ast.If)
            out.extend(self.predeclare(last, env, have))
            then = self.sweep_to_return(list(last.then.body), dict(env), set(have), seed, value, effects)
            orelse = self.sweep_to_return(list(as_stmts(last.orelse)), dict(env), set(have), seed, value, effects)
            cond = self.rename(self.quiet(last.cond), env)
            out.append(ast.If(cond, ast.Block(tuple(then)), ast.Block(tuple(orelse)), last.span))
        out.extend(self.backward(sweep.records, have))
        return out

    def forward(self, stmt: ast.Stmt, env: dict[str, str], sweep: Sweep, nested: bool, effects: bool) -> None:
        outer, self.effects = self.effects, effects
        self.statement(stmt, env, sweep, nested, effects)
        self.effects = outer

    def statement(self, stmt: ast.Stmt, env: dict[str, str], sweep: Sweep, nested: bool, effects: bool) -> None:
        self.just_made = ""
        match stmt:
            case ast.Let(pattern=ast.NamePattern(name=local), value=ast.Lambda() as value):
                self.bind_closure(local, value, self.captured(value, env, sweep), env)
            case ast.Let(pattern=ast.NamePattern(name=local), value=ast.Call() as value) if isinstance(
                self.type_of(value), FunctionRef
            ):
                decl, captured = self.made_closure(value, env, sweep)
                self.bind_closure(local, decl, captured, env)
            case ast.Let(pattern=pattern, annotation=annotation, value=value):
                hint = pattern.name if isinstance(pattern, ast.NamePattern) else "items"
                atom = self.bound_literal(self.atom(value, env, sweep, hint))
                self.bind(pattern, atom, env, sweep, annotation, self.type_of(value))
            case ast.Assign(target=target, op=op, value=value):
                if op != "=":
                    value = ast.Binary(op[0], target, value, stmt.span)
                    self.extra_types[id(value)] = ANY
                self.assign(target, value, env, sweep)
            case ast.ExprStmt(expr=expr):
                if effects:
                    sweep.stmts.append(ast.ExprStmt(self.rename(expr, env), stmt.span))
            case ast.If() | ast.While():
                self.compound(stmt, env, sweep, effects)
            case ast.FnDecl(name=local):
                self.bind_closure(local, stmt, self.captured(stmt, env, sweep), env)
            case _:
                raise NotDifferentiable(
                    f"`grad` cannot differentiate this statement here: {type(stmt).__name__}", stmt.span
                )

    def bind(self, pattern: ast.Pattern, atom: ast.Expr, env, sweep: Sweep, annotation, value_type: Type) -> None:
        if isinstance(pattern, ast.NamePattern):
            env[pattern.name] = self.name_value(pattern.name, atom, sweep, annotation, value_type)
            env.pop(f"fn {pattern.name}", None)
            return
        items = value_type.items if isinstance(value_type, TupleType) else [ANY] * len(pattern.items)
        for position, (item, item_type) in enumerate(zip(pattern.items, items, strict=True)):
            part = ast.Index(atom, (ast.IntLiteral(position),))
            self.extra_types[id(part)] = item_type
            hint = item.name if isinstance(item, ast.NamePattern) else "items"
            self.bind(item, self.atom_of_operation(part, part, sweep, hint), env, sweep, None, item_type)

    def name_value(self, user: str, atom: ast.Expr, sweep: Sweep, annotation, value_type: Type) -> str:
        """A generated name holding `atom` for the user's variable `user`."""
        if isinstance(atom, ast.Name) and atom.id == self.just_made and annotation is None:
            return atom.id  # the operation's result is named for the variable already: no copy
        var = self.fresh(user)
        atom = self.settled_literal(atom)
        sweep.stmts.append(ast.Let(ast.NamePattern(var), annotation, atom))
        self.types[var] = (
            value_type if not isinstance(value_type, AnyType) else self.types.get(getattr(atom, "id", ""), ANY)
        )
        if isinstance(atom, ast.Name) and atom.id in self.types:
            sweep.records.append(Op(var, atom, None))
        return var

    def settled_literal(self, atom: ast.Expr) -> ast.Expr:
        """A number literal with the dtype the checker gave it from context written out, so that a variable
        it starts keeps its dtype when the code around it changes."""
        dtype = self.typed.coercions.get(id(atom))
        if isinstance(atom, (ast.FloatLiteral, ast.IntLiteral)) and atom.dtype is None and dtype == "f64":
            return ast.FloatLiteral(float(atom.value), "f64", atom.span)
        if isinstance(atom, ast.IntLiteral) and atom.dtype is None and dtype == "f32":
            return ast.FloatLiteral(float(atom.value), None, atom.span)
        return atom

    def bound_literal(self, atom: ast.Expr) -> ast.Expr:
        """A float literal a `let` binds, of the dtype the variable has: the one context gave it, else f32
        (`let c = 0.1` is an f32, which must not adapt to an f64 where `c` is used). Integers stay as
        written (loop counters; an i64 only differs from an adapting literal beside an i32 tensor)."""
        settled = self.settled_literal(atom)
        if isinstance(settled, ast.FloatLiteral) and settled.dtype is None:
            return ast.FloatLiteral(settled.value, "f32", settled.span)
        return settled

    def settled_literals(self, expr: ast.Expr) -> ast.Expr:
        """`expr` with each number literal's dtype from context written out (`settled_literal`)."""
        literals = (ast.IntLiteral, ast.FloatLiteral)
        replacements = {id(n): self.settled_literal(n) for n in walk(expr) if isinstance(n, literals)}
        replacements = {k: v for k, v in replacements.items() if not isinstance(v, literals) or v.dtype}
        return replace_nodes(expr, replacements) if replacements else expr

    def assign(self, target: ast.Expr, value: ast.Expr, env, sweep: Sweep) -> None:
        match target:
            case ast.Name(id=user):
                atom = self.atom(value, env, sweep, user)
                env[user] = self.name_value(user, atom, sweep, None, self.types.get(env[user], ANY))
            case ast.TupleLiteral(items=items):
                atom = self.atom(value, env, sweep, "items")
                value_type = self.type_of(value)
                types = value_type.items if isinstance(value_type, TupleType) else [ANY] * len(items)
                for position, (item, item_type) in enumerate(zip(items, types, strict=True)):
                    part = ast.Index(atom, (ast.IntLiteral(position),))
                    self.extra_types[id(part)] = item_type
                    self.assign(item, part, env, sweep)
            case ast.Index(target=base) | ast.Field(target=base):
                atom = self.atom(value, env, sweep, "t")
                old = self.atom(base, env, sweep, root_name(base))
                if not isinstance(old, ast.Name):
                    raise NotDifferentiable("`grad` cannot differentiate an update of this value", target.span)
                new = self.fresh(root_name(base))
                self.types[new] = self.types.get(old.id, ANY)
                if isinstance(target, ast.Index):
                    place = ast.Index(name(new), tuple(self.rename(i, env) for i in target.indices), target.span)
                else:
                    place = ast.Field(name(new), target.name, target.span)
                sweep.stmts += [let(new, old), assign(place, atom, target.span)]
                sweep.records.append(Store(new, old.id, place, atom))
                if isinstance(base, ast.Name):
                    env[base.id] = new
                else:
                    self.assign(base, name(new), env, sweep)
            case _:
                raise NotDifferentiable("`grad` cannot differentiate this assignment", target.span)

    # -------------------------------------------------------------- expressions in A-normal form
    def atom(self, expr: ast.Expr, env, sweep: Sweep, hint: str) -> ast.Expr:
        """Emit what computes `expr` and return a name or literal holding its value."""
        match expr:
            case ast.Name(id=user) if user in env:
                return ast.Name(env[user], expr.span)
            case ast.Name() | ast.IntLiteral() | ast.FloatLiteral() | ast.BoolLiteral() | ast.StringLiteral():
                return expr
            case ast.Field(target=ast.Name(id=module)) if module not in env and module in self.module_aliases():
                return expr
            case ast.Lambda():
                return self.rename(expr, env)
            case ast.Call(func=ast.Name(id=local)) if f"fn {local}" in env:
                decl, captured = self.closures[int(env[f"fn {local}"])]
                return self.inline(decl, captured, expr, env, sweep, hint)
            case ast.Call(func=ast.Name(id="tree_map")) if isinstance(self.type_of(expr.func), PrimitiveRef):
                return self.atom(self.expand_tree_map(expr, env, sweep), env, sweep, hint)
            case ast.Call(func=ast.Name(id="tree_dot")) if isinstance(self.type_of(expr.func), PrimitiveRef):
                return self.atom(self.expand_tree_dot(expr, env, sweep), env, sweep, hint)
            case ast.Call() if self.takes_functions(expr):
                decl, _ = self.typed.functions[self.type_of(expr.func).key]
                return self.inline(decl, {}, expr, env, sweep, hint)
        if not is_active(self.type_of(expr)):
            settled = self.settled_literals(self.quiet(expr))
            return self.atom_of_operation(self.rename(settled, env), expr, sweep, hint, record=False)
        rhs = self.operation(expr, env, sweep)
        split = self.split_call(rhs, expr)
        if split is not None:
            return self.split_atom(rhs, expr, split, sweep, hint)
        return self.atom_of_operation(rhs, expr, sweep, hint)

    def split_call(self, rhs: ast.Expr, original: ast.Expr) -> tuple[ast.Expr, ast.Expr] | None:
        """For a call of a function with float arguments that is split (`Round.split_names`): how this
        module names its `_fwd` and `_bwd` functions."""
        if not isinstance(rhs, ast.Call) or not any(self.active(arg) for arg in rhs.args):
            return None
        callee = self.type_of(original.func)
        if not isinstance(callee, FunctionRef) or callee.key not in self.typed.functions:
            return None
        decl, path = self.typed.functions[callee.key]
        if not self.effects and self.round.has_effects(decl):
            return None  # run again by a backward sweep: `g_quiet`, and `g_back` for its backward
        names = self.round.split_names(decl, path)
        if names is None:
            return None
        span = original.span
        return tuple(self.round.reference(self.path, path, function, span) for function in names)

    def split_atom(self, rhs: ast.Call, original, split, sweep: Sweep, hint: str) -> ast.Name:
        """`let pair = g_fwd(args); let result = pair[0]`: the call's backward is `g_bwd(args, pair[1], d)`."""
        pair = self.fresh(f"{hint}_fwd")
        # a literal argument with the dtype it took from `g`'s annotation written out: `g_bwd`'s parameters
        # are not annotated
        rhs = dataclasses.replace(rhs, args=tuple(self.settled_literal(arg) for arg in rhs.args))
        sweep.stmts.append(let(pair, ast.Call(split[0], rhs.args, (), original.span), original.span))
        result = self.atom_of_operation(index_of(name(pair), 0), original, sweep, hint, record=False)
        sweep.records.append(Op(result.id, rhs, original, (split[1], pair)))
        return result

    def expand_tree_map(self, expr: ast.Call, env, sweep: Sweep) -> ast.Expr:
        """`tree_map(f, a, b)` written out leaf by leaf (its structure is in the types): `S { w: f(a.w, b.w),
        ... }`, so that its derivative is that of the calls of `f`."""
        if expr.keywords or len(expr.args) < 2:
            raise NotDifferentiable("`grad` needs `tree_map(f, trees...)` with positional arguments", expr.span)
        function, *trees = expr.args
        if isinstance(function, ast.Lambda):
            local = self.fresh_user_name("mapped")
            self.bind_closure(local, function, env, env)
            callee: ast.Expr = ast.Name(local, function.span)
        else:
            callee = function
        self.extra_types[id(callee)] = self.type_of(function)
        atoms = [self.atom(tree, env, sweep, "tree") for tree in trees]
        types = [
            self.types.get(a.id, self.type_of(t)) if isinstance(a, ast.Name) else self.type_of(t)
            for a, t in zip(atoms, trees, strict=True)
        ]
        return self.spread(callee, atoms, types, self.type_of(expr), expr.span)

    def expand_tree_dot(self, expr: ast.Call, env, sweep: Sweep) -> ast.Expr:
        """`tree_dot(a, b)` written out: `sum(a.w * b.w) + sum(a.b * b.b) + ...`."""
        if expr.keywords or len(expr.args) != 2:
            raise NotDifferentiable("`grad` needs `tree_dot(a, b)` with positional arguments", expr.span)
        atoms = [self.atom(tree, env, sweep, "tree") for tree in expr.args]
        types = [
            self.types.get(a.id, self.type_of(t)) if isinstance(a, ast.Name) else self.type_of(t)
            for a, t in zip(atoms, expr.args, strict=True)
        ]
        terms: list[ast.Expr] = []

        def walk(parts: list[ast.Expr], part_types: list[Type]) -> None:
            first = part_types[0]
            if isinstance(first, TupleType):
                for i in range(len(first.items)):
                    picked = [ast.Index(p, (ast.IntLiteral(i),), expr.span) for p in parts]
                    for node, t in zip(picked, part_types, strict=True):
                        self.extra_types[id(node)] = t.items[i]
                    walk(picked, [t.items[i] for t in part_types])
            elif isinstance(first, StructType):
                for field_name, _ in first.fields:
                    picked = [ast.Field(p, field_name, expr.span) for p in parts]
                    for node, t in zip(picked, part_types, strict=True):
                        self.extra_types[id(node)] = t.field_type(field_name)
                    walk(picked, [t.field_type(field_name) for t in part_types])
            else:
                product = ast.Binary("*", parts[0], parts[1], expr.span)
                self.extra_types[id(product)] = first if part_types[1] == first else ANY
                total = call("sum", product)
                self.extra_types[id(total.func)] = PrimitiveRef("sum")
                self.extra_types[id(total)] = self.type_of(expr)
                terms.append(total)

        walk(atoms, types)
        result = terms[0]
        for term in terms[1:]:
            result = ast.Binary("+", result, term, expr.span)
            self.extra_types[id(result)] = self.type_of(expr)
        return result

    def spread(self, callee, parts: list[ast.Expr], types: list[Type], result: Type, span: Span) -> ast.Expr:
        first = types[0]
        if isinstance(first, TupleType):
            items = []
            for i in range(len(first.items)):
                picked = [ast.Index(p, (ast.IntLiteral(i),), span) for p in parts]
                for node, t in zip(picked, types, strict=True):
                    self.extra_types[id(node)] = t.items[i]
                item_result = result.items[i] if isinstance(result, TupleType) else ANY
                items.append(self.spread(callee, picked, [t.items[i] for t in types], item_result, span))
            node = ast.TupleLiteral(tuple(items), span)
        elif isinstance(first, StructType):
            fields = []
            for field_name, field_type in first.fields:
                picked = [ast.Field(p, field_name, span) for p in parts]
                for node, t in zip(picked, types, strict=True):
                    self.extra_types[id(node)] = t.field_type(field_name)
                value = self.spread(callee, picked, [t.field_type(field_name) for t in types], field_type, span)
                fields.append(ast.FieldInit(field_name, value, span))
            struct = self.round.reference(self.path, first.module, first.name, span)
            node = ast.StructLiteral(struct, tuple(fields), span)
        else:
            node = ast.Call(callee, tuple(parts), (), span)
        self.extra_types[id(node)] = result
        return node

    def captured(self, decl: ast.Lambda | ast.FnDecl, env: dict[str, str], sweep: Sweep) -> dict[str, str]:
        """What a closure made here sees: the variables' values now. One the function assigns later is
        copied first (the closure keeps the value it captured, not the variable)."""
        assigned = self.assigned_anywhere()
        seen = dict(env)
        for user in free_names(decl.body) & assigned:
            if user in env and env[user] in self.types:
                value = ast.Name(env[user], decl.span)
                self.extra_types[id(value)] = self.types[env[user]]
                seen[user] = self.atom_of_operation(value, value, sweep, f"{user}_captured").id
        return seen

    def assigned_anywhere(self) -> set[str]:
        """The names assigned in this function or in any function (a closure may be made in an inlined one)."""
        if self.all_assigned is None:
            bodies = [self.decl.body, *(decl.body for decl, _ in self.typed.functions.values())]
            self.all_assigned = set().union(*(assigned_names(body) for body in bodies))
        return self.all_assigned

    def bind_closure(self, local: str, decl, captured: dict[str, str], env: dict[str, str]) -> None:
        self.closures.append((decl, dict(captured)))
        env[f"fn {local}"] = str(len(self.closures) - 1)

    def takes_functions(self, expr: ast.Call) -> bool:
        """A call of a top-level function that is given a function (a closure) as an argument."""
        callee = self.type_of(expr.func)
        if not isinstance(callee, FunctionRef) or callee.key not in self.typed.functions:
            return False
        return any(isinstance(self.type_of(arg), FunctionRef) for arg in expr.args)

    def inline(self, decl, captured: dict[str, str], expr: ast.Call, env, sweep: Sweep, hint: str) -> ast.Expr:
        """A call of a closure (a local function, an anonymous function bound by `let`, or a function given
        a closure as an argument): its body is emitted in place, seeing the values it captured."""
        if id(decl) in self.inlining:
            raise NotDifferentiable("`grad` cannot differentiate a recursive function that takes a closure", expr.span)
        inner = dict(captured)
        if expr.keywords or len(expr.args) != len(decl.params):
            raise NotDifferentiable("`grad` needs this call to pass every argument by position", expr.span)
        for param, arg in zip(decl.params, expr.args, strict=True):
            if self.bind_function_argument(param.name, arg, env, inner):
                continue
            atom = self.atom(arg, env, sweep, param.name)
            if not isinstance(atom, ast.Name):
                atom = self.atom_of_operation(self.settled_literal(atom), arg, sweep, param.name, record=False)
            inner[param.name] = atom.id
            inner.pop(f"fn {param.name}", None)
        self.inlining.append(id(decl))
        try:
            return self.inline_body(decl, inner, sweep, hint, expr.span)
        finally:
            self.inlining.pop()

    def made_closure(self, expr: ast.Call, env, sweep: Sweep) -> tuple[ast.Lambda, dict[str, str]]:
        """The closure a call of a top-level function returns (`let double = scale_by(w)`), with what it
        captured: the function's body is emitted in place up to its `return fn(...) => ...`."""
        callee = self.type_of(expr.func)
        decl, _ = self.typed.functions[callee.key] if isinstance(callee, FunctionRef) else (None, None)
        body = decl.body.body if decl is not None and isinstance(decl.body, ast.Block) else ()
        if not body or not isinstance(body[-1], ast.Return) or not isinstance(body[-1].value, ast.Lambda):
            raise NotDifferentiable("`grad` can only use a closure made by `return fn(...) => ...`", expr.span)
        inner: dict[str, str] = {}
        for param, arg in zip(decl.params, expr.args, strict=True):
            if not self.bind_function_argument(param.name, arg, env, inner):
                atom = self.atom(arg, env, sweep, param.name)
                if not isinstance(atom, ast.Name):
                    atom = self.atom_of_operation(self.settled_literal(atom), arg, sweep, param.name, record=False)
                inner[param.name] = atom.id
        for stmt in body[:-1]:
            self.forward(stmt, inner, sweep, nested=False, effects=self.effects)
        return body[-1].value, inner

    def bind_function_argument(self, param: str, arg: ast.Expr, env, inner) -> bool:
        """Bind a closure given as an argument to the parameter's name; False if `arg` is not one."""
        if isinstance(arg, ast.Lambda):
            self.bind_closure(param, arg, env, inner)
            return True
        if isinstance(arg, ast.Name) and f"fn {arg.id}" in env:
            inner[f"fn {param}"] = env[f"fn {arg.id}"]
            return True
        return False

    def inline_body(self, decl, inner, sweep: Sweep, hint: str, span: Span) -> ast.Expr:
        if not isinstance(decl.body, ast.Block):
            return self.atom(decl.body, inner, sweep, hint)
        *body, last = decl.body.body
        if not isinstance(last, ast.Return) or last.value is None or any(contains_return(s) for s in body):
            raise NotDifferentiable(
                "`grad` cannot yet differentiate this call: a function given a closure, or a local function, "
                "must have one `return`, at its end",
                span,
                ("help: compute the result in a variable and return it once, after any `if` or loop",),
            )
        for stmt in body:
            self.forward(stmt, inner, sweep, nested=False, effects=self.effects)
        return self.atom(last.value, inner, sweep, hint)

    def quiet(self, expr: ast.Expr, always: bool = False) -> ast.Expr:
        """`expr`, calling the quiet copies of functions with effects where the forward is run again (or
        `always`: a backward sweep's own test of a condition)."""
        if self.effects and not always:
            return expr
        callees = {id(node): self.round.quiet_callee(node, self.path) for node in walk(expr)}
        replacements = {k: v for k, v in callees.items() if v is not None}
        return replace_nodes(expr, replacements) if replacements else expr

    def module_aliases(self) -> set[str]:
        return {alias for alias, _ in self.round.program.imports.get(self.path, [])}

    def atom_of_operation(
        self, rhs: ast.Expr, original: ast.Expr, sweep: Sweep, hint: str, record: bool = True
    ) -> ast.Name:
        var = self.fresh(hint)
        self.just_made = var
        sweep.stmts.append(ast.Let(ast.NamePattern(var), None, rhs, original.span))
        self.types[var] = self.type_of(original)
        self.values[var] = rhs
        if record:
            sweep.records.append(Op(var, rhs, original))
        return ast.Name(var, original.span)

    def operation(self, expr: ast.Expr, env, sweep: Sweep) -> ast.Expr:
        """`expr` with its operands made atoms (one operation left)."""
        operand = lambda e: self.atom(e, env, sweep, hint_for(e))  # noqa: E731
        match expr:
            case ast.Unary(op="-", operand=x):
                return ast.Unary("-", self.settled_literal(operand(x)), expr.span)
            case ast.Binary(op=op, lhs=a, rhs=b) if op in BINARY or op == "@":
                lhs, rhs = operand(a), operand(b)
                literals = (ast.IntLiteral, ast.FloatLiteral)
                if isinstance(lhs, literals) and isinstance(rhs, literals):  # `0.5 * 3`: nothing else gives a dtype
                    lhs, rhs = self.settled_literal(lhs), self.settled_literal(rhs)
                return ast.Binary(op, lhs, rhs, expr.span)
            case ast.Call():
                return self.call_operation(expr, env, sweep)
            case ast.Index(target=target, indices=indices):
                return ast.Index(operand(target), tuple(self.rename(i, env) for i in indices), expr.span)
            case ast.Field(target=target, name=field_name):
                return ast.Field(operand(target), field_name, expr.span)
            case ast.TupleLiteral(items=items):
                return ast.TupleLiteral(tuple(operand(i) for i in items), expr.span)
            case ast.TensorLiteral(items=items):  # (a literal item's dtype may come from an annotation)
                return ast.TensorLiteral(tuple(self.settled_literal(operand(i)) for i in items), expr.span)
            case ast.StructLiteral(type=struct, fields=fields):
                return ast.StructLiteral(
                    struct, tuple(ast.FieldInit(f.name, operand(f.value), f.span) for f in fields), expr.span
                )
        return self.rename(expr, env)  # not differentiable: comparisons, `//`, `not`

    def call_operation(self, expr: ast.Call, env, sweep: Sweep) -> ast.Expr:
        callee = self.type_of(expr.func)
        if isinstance(callee, PrimitiveRef):
            prim = BY_NAME[callee.name]
            if prim in NON_DIFFERENTIABLE:
                return self.rename(expr, env)
            args = tuple(self.atom(a, env, sweep, "t") for a in expr.args)
            keywords = tuple(ast.Keyword(k.name, self.rename(k.value, env), k.span) for k in expr.keywords)
            return ast.Call(self.rename(expr.func, env), args, keywords, expr.span)
        if isinstance(callee, FunctionRef):
            decl, decl_path = self.typed.functions[callee.key]
            if not isinstance(decl, ast.FnDecl) or id(decl) in self.local_functions:
                raise NotDifferentiable(
                    "`grad` cannot yet differentiate through a call of an anonymous or local function",
                    expr.span,
                    ("help: declare the function at the top level of a module",),
                )
            args = self.user_arguments(decl, decl_path, expr)
            func = self.rename(self.quiet(expr.func), env)
            # (a default sees the callee's module, none of the caller's variables)
            atoms = tuple(self.atom(a, {} if default else env, sweep, "t") for a, default in args)
            return ast.Call(func, atoms, (), expr.span)
        raise NotDifferentiable(
            f"`grad` cannot differentiate a call of {callee}",
            expr.span,
            ("help: call a function declared with `fn` by its name",),
        )

    def user_arguments(self, decl: ast.FnDecl, path: str, expr: ast.Call) -> list[tuple[ast.Expr, bool]]:
        """The call's arguments in parameter order, defaults (of `decl`, in module `path`) filled in; each
        with whether it is a default."""
        by_name = {k.name: k.value for k in expr.keywords}
        args = []
        for position, param in enumerate(decl.params):
            if position < len(expr.args):
                args.append((expr.args[position], False))
            elif param.name in by_name:
                args.append((by_name[param.name], False))
            else:
                args.append((self.default_here(param.default, path), True))
        return args

    def default_here(self, default: ast.Expr, path: str) -> ast.Expr:
        """A default of a function in module `path` as this module writes it: the names of `path`'s
        consts and functions it uses qualified by this module's alias of `path` (`helpers.SCALE`)."""
        if path == self.path:
            return default
        kinds = (ast.FnDecl, ast.Const, ast.StructDecl)
        top = {d.name for d in self.round.program.modules[path].decls if isinstance(d, kinds)}
        modules = dict(self.round.program.imports.get(path, []))  # the callee module's aliases
        replacements: dict[int, ast.Expr] = {}
        for n in walk(default):
            if isinstance(n, ast.Name) and n.id in top:
                replacements[id(n)] = self.round.reference(self.path, path, n.id, n.span)
            elif isinstance(n, ast.Name) and n.id in modules:  # `other.BASE`: this module's alias of `other`
                here = [a for a, target in self.round.program.imports.get(self.path, []) if target == modules[n.id]]
                if not here:
                    raise NotDifferentiable(f"`grad` needs `{modules[n.id]}` imported here (a default uses it)", n.span)
                replacements[id(n)] = ast.Name(here[0], n.span)
        if not replacements:
            return default
        qualified = replace_nodes(default, replacements)
        self.carry_types(default, qualified)
        return qualified

    def carry_types(self, old, new) -> None:
        """Give the nodes of `new`, a copy of `old` with some nodes replaced, the types of `old`'s."""
        if old is new:
            return
        found = self.extra_types.get(id(old), self.typed.types.get(id(old)))
        if found is not None:
            self.extra_types[id(new)] = found
        if isinstance(old, tuple) and isinstance(new, tuple) and len(old) == len(new):
            for a, b in zip(old, new, strict=True):
                self.carry_types(a, b)
        elif type(old) is type(new) and dataclasses.is_dataclass(old):
            for f in dataclasses.fields(old):
                self.carry_types(getattr(old, f.name), getattr(new, f.name))

    def rename(self, expr, env):
        """`expr` with the user's local names replaced by their current generated names."""
        replacements = {}
        for node in walk(expr):
            if isinstance(node, ast.Name) and node.id in env and env[node.id] != node.id:
                replacements[id(node)] = ast.Name(env[node.id], node.span)
        return replace_nodes(expr, replacements) if replacements else expr

    # -------------------------------------------------------------- if and while
    def compound(self, stmt: ast.If | ast.While, env, sweep: Sweep, effects: bool) -> None:
        carried = [env[user] for user in assigned_outer(stmt, env)]
        saved = ""
        kept = None
        if isinstance(stmt, ast.If):
            if carried:
                saved = self.fresh(f"{carried[0]}_saved" if len(carried) == 1 else "saved")
                sweep.stmts.append(let(saved, tuple_of([name(c) for c in carried])))
            then = self.nested_forward(stmt.then, env, effects)
            orelse = self.nested_forward(as_block(stmt.orelse), env, effects) if stmt.orelse is not None else None
            sweep.stmts.append(ast.If(self.rename(self.quiet(stmt.cond), env), then, orelse, stmt.span))
        else:
            inner, body_sweep, updates = self.nested_sweep(stmt.body, env, effects)
            stmts = body_sweep.stmts
            if carried:
                saved = self.fresh(f"{carried[0]}_tape" if len(carried) == 1 else "loop_tape")
                state = tuple_of([name(c) for c in carried])
                sweep.stmts.append(let(saved, call("tape", state)))
                stmts = [assign(name(saved), call("push", name(saved), state)), *stmts]
                if not any(isinstance(node, ast.While) for node in walk(tuple(stmts))):
                    kept = self.keep_values(body_sweep, inner, sweep)
                    stmts.append(kept.push)
            body = ast.Block(tuple(stmts + updates), stmt.body.span)
            sweep.stmts.append(ast.While(self.rename(self.quiet(stmt.cond), env), body, stmt.span))
        if carried:
            sweep.records.append(Compound(stmt, dict(env), carried, saved, kept))

    def keep_values(self, body: Sweep, inner: dict[str, str], sweep: Sweep) -> Kept:
        """A tape for the values a loop's iterations keep for its backward sweep, made before the loop."""
        tape = self.fresh("kept")
        sweep.stmts.append(let(tape, call("tape")))
        lets = [s for s in body.stmts if isinstance(s, ast.Let) and isinstance(s.pattern, ast.NamePattern)]
        written = {n.name for s in body.stmts if isinstance(s, ast.Let) for n in pattern_names(s.pattern)}
        assigned = assigned_names(tuple(body.stmts))
        push = assign(name(tape), name(tape))  # `push(tape, values)` once the backward sweep says which
        return Kept(body.records, inner, written | assigned, tape, push, lets, assigned)

    def nested_forward(self, block: ast.Block, env, effects: bool) -> ast.Block:
        """A branch or loop body as the forward sweep runs it: assigned outer variables updated in place."""
        _, sweep, updates = self.nested_sweep(block, env, effects)
        return ast.Block(tuple(sweep.stmts + updates), block.span)

    def nested_sweep(self, block: ast.Block, env, effects: bool) -> tuple[dict[str, str], Sweep, list[ast.Stmt]]:
        """A block's forward sweep, the names it leaves the variables in, and the assignments that copy the
        outer variables it assigned back into their outer names."""
        inner = dict(env)
        sweep = Sweep()
        self.forward_block(block, inner, sweep, effects)
        updates = [
            assign(name(outer), name(inner[user]))
            for user, outer in env.items()
            if inner[user] != outer and user in assigned_names(block)
        ]
        return inner, sweep, updates

    def forward_block(self, block: ast.Block, env, sweep: Sweep, effects: bool) -> None:
        """A nested block's statements forward. A `let` in it that shadows an outer variable hides it only
        to the end of the block: `env` then names the outer variable's value again (as it was at the
        `let`: the block may have assigned it before)."""
        shadowed: dict[str, str] = {}
        for stmt in block.body:
            for user in declared_names(stmt):
                for key in (user, f"fn {user}"):
                    if key in env and key not in shadowed:
                        shadowed[key] = env[key]
            self.forward(stmt, env, sweep, nested=True, effects=effects)
        env.update(shadowed)

    def predeclare(self, stmt, env, have: set[str]) -> list[ast.Stmt]:
        """Zero adjoints, declared before `stmt`'s backward, for the outer variables it reads or assigns."""
        out = []
        for var in sorted(self.outer_variables(stmt, env, set())):
            if var not in have and is_active(self.types.get(var)):
                out.append(let(self.adjoint(var), call("zeros_like", name(var))))
                have.add(var)
        return out

    def outer_variables(self, node, env: dict[str, str], seen: set[int]) -> set[str]:
        """The generated names of the variables `node` reads or assigns, also through the closures it calls."""
        found = set()
        for user in free_names(node):
            if user in env:
                found.add(env[user])
            closure = env.get(f"fn {user}")
            if closure is not None and int(closure) not in seen:
                seen.add(int(closure))
                decl, captured = self.closures[int(closure)]
                found |= self.outer_variables(decl.body, captured, seen)
        return found

    def backward_compound(self, record: Compound, have: set[str]) -> list[ast.Stmt]:
        if not any(c in have for c in record.carried):
            return []
        out = self.predeclare(record.stmt, record.env, have)
        state = tuple_of([name(c) for c in record.carried])
        # the variables hold the values they had after the statement (for a loop, after the iteration about to be
        # undone): kept, the recomputation need not compute them again
        after = {c: self.fresh(f"{c}_after") for c in record.carried}
        keep = [let(after[c], name(c)) for c in record.carried]
        if isinstance(record.stmt, ast.If):
            out += [*keep, assign(state, name(record.saved))]
            then = self.recompute(record.stmt.then, record, have, after)
            orelse = record.stmt.orelse
            new_else = self.recompute(as_block(orelse), record, have, after) if orelse is not None else None
            out.append(ast.If(self.rename(self.quiet(record.stmt.cond, always=True), record.env), then, new_else))
            return out
        pop = assign(ast.TupleLiteral((state, name(record.saved))), call("pop", name(record.saved)))
        if record.kept is not None:
            before, after_pop = self.restore(record, have)
            out.append(ast.While(condition_of(record.saved), ast.Block((*before, pop, *after_pop))))
            return out
        body = self.recompute(record.stmt.body, record, have, after)
        out.append(ast.While(condition_of(record.saved), ast.Block((*keep, pop, *body.body))))
        return out

    def restore(self, record: Compound, have: set[str]) -> tuple[list[ast.Stmt], list[ast.Stmt]]:
        """One iteration of a loop's backward sweep from the values the iteration kept, in two parts: what
        runs before its variables are popped (taking the values they hold after the iteration), and
        after (taking the kept values off the tape, then the iteration's backward)."""
        kept = record.kept
        inner_have = set(have)
        out: list[ast.Stmt] = []
        exits: dict[str, str] = {}
        for user, outer in record.env.items():
            exit_var = kept.env.get(user, outer)
            if exit_var != outer and outer in record.carried:
                exits[exit_var] = outer
                if outer in have:
                    out.append(let(self.adjoint(exit_var), name(self.adjoint(outer))))
                    out.append(assign(name(self.adjoint(outer)), call("zeros_like", name(outer))))
                    inner_have.add(exit_var)
        out.extend(self.backward(kept.records, inner_have))
        values, afters, views = kept.split(free_names(tuple(out)), exits, self.is_view)
        before = [let(value, name(exits[value])) for value in afters]
        taken: list[ast.Stmt] = []
        if values:
            pushed = tuple_of(list(map(name, values)))
            self.filled[id(kept.push)] = assign(name(kept.tape), call("push", name(kept.tape), pushed))
            entry = self.fresh(f"{kept.tape}_entry")
            taken = [let(entry, call("pop", name(kept.tape))), assign(name(kept.tape), index_of(name(entry), 1))]
            top = index_of(name(entry), 0)
            outer = set(record.env.values())
            for position, value in enumerate(values):
                item = top if len(values) == 1 else index_of(top, position)
                taken.append(assign(name(value), item) if value in outer else let(value, item))
        return before, taken + views + out

    def recompute(self, block: ast.Block, record: Compound, have: set[str], after: dict[str, str]) -> ast.Block:
        """A branch or one iteration in the backward sweep: its forward again (from the restored
        variables), then its backward, leaving the adjoints of the variables it started from. The final
        values of the variables it assigns are `after`'s, not computed again."""
        inner_env = dict(record.env)
        sweep = Sweep()
        self.forward_block(block, inner_env, sweep, effects=False)
        inner_have = set(have)
        # (not a name assigned after its `let`, by a loop or `if` inside: its `let` is not its final value)
        changed = assigned_names(tuple(sweep.stmts))
        finals = {
            inner_env[u]: after[o]
            for u, o in record.env.items()
            if o in after and inner_env.get(u, o) != o and inner_env[u] not in changed
        }
        out = [
            dataclasses.replace(stmt, value=name(finals[stmt.pattern.name]))
            if isinstance(stmt, ast.Let) and isinstance(stmt.pattern, ast.NamePattern) and stmt.pattern.name in finals
            else stmt
            for stmt in sweep.stmts
        ]
        for user, outer in record.env.items():
            exit_var = inner_env.get(user, outer)
            if exit_var != outer and outer in record.carried and outer in have:
                out.append(let(self.adjoint(exit_var), name(self.adjoint(outer))))
                out.append(assign(name(self.adjoint(outer)), call("zeros_like", name(outer))))
                inner_have.add(exit_var)
        out.extend(self.backward(sweep.records, inner_have))
        return ast.Block(tuple(out))

    # -------------------------------------------------------------- the backward sweep
    def backward(self, records: list[Record], have: set[str]) -> list[ast.Stmt]:
        out: list[ast.Stmt] = []
        # the stretch of this record list each Op is in: an `if` or loop between two Ops may change the
        # variables they read, so an adjoint added at one is not the other's (see `transposed`)
        stretches, stretch = {}, 0
        for record in records:
            if isinstance(record, Op):
                stretches[record.result] = stretch
            stretch += isinstance(record, Compound)
        for record in reversed(records):
            match record:
                case Op(result=result) if result in have:
                    self.stretch = (stretches, stretches[result])
                    contributions = self.contributions(record)
                    out += self.pending
                    self.pending = []
                    for operand, contribution in contributions:
                        self.accumulate(operand, contribution, out, have)
                case Store(new=new, old=old, target=target, value=value) if new in have:
                    d_new = name(self.adjoint(new))
                    region = replace_nodes(target, {id(target.target): d_new})
                    if self.active(value):
                        part = region if isinstance(target, ast.Field) else self.fit(region, value, target)
                        self.accumulate(value.id, part, out, have)
                    out.append(assign(region, call("zeros_like", region)))
                    self.accumulate(old, d_new, out, have)
                case Compound():
                    out.extend(self.backward_compound(record, have))
        return out

    def fit(self, contribution: ast.Expr, operand: ast.Expr, like: ast.Expr | None = None) -> ast.Expr:
        """`contribution` summed down to `operand`'s shape where broadcasting made it larger, and rounded
        to its float dtype where the operation widened it (`unbroadcast` does both)."""
        operand_type = self.types.get(operand.id) if isinstance(operand, ast.Name) else None
        result_type = self.type_of(like) if like is not None else None
        same = isinstance(operand_type, TensorType) and isinstance(result_type, TensorType)
        widened = same and operand_type.dtype != result_type.dtype and not operand_type.weak
        if same and operand_type.dims == result_type.dims and not widened:
            return contribution
        return call("unbroadcast", contribution, operand)

    def accumulate(self, var: str, contribution, out: list[ast.Stmt], have: set[str]) -> None:
        if not is_active(self.types.get(var)):
            return
        d_var = self.adjoint(var)
        if isinstance(contribution, Part):
            if var not in have:
                out.append(let(d_var, call("zeros_like", name(var))))
                have.add(var)
            out.append(self.add_to_part(var, contribution))
            return
        if var not in have:
            out.append(let(d_var, contribution))
            have.add(var)
            return
        if isinstance(self.types.get(var), TensorType):
            out.append(assign(name(d_var), ast.Binary("+", name(d_var), contribution)))
        else:
            out.append(assign(name(d_var), call("tree_add", name(d_var), contribution)))

    def add_to_part(self, var: str, part: Part) -> ast.Stmt:
        d_var = name(self.adjoint(var))
        var_type = self.types.get(var)
        if part.field is None and isinstance(var_type, TupleType) and len(part.indices) == 1:
            # a tuple's item cannot be assigned: the tuple is built again, with the one item added to
            (k,) = part.indices
            position = k.value % len(var_type.items) if isinstance(k, ast.IntLiteral) else None
            if position is None:
                raise NotDifferentiable("`grad` needs a tuple's index to be a literal integer", part.value.span)
            items = [index_of(d_var, i) for i in range(len(var_type.items))]
            items[position] = call("tree_add", items[position], part.value)
            return assign(d_var, ast.TupleLiteral(tuple(items)))
        if part.field is None:
            return ast.Assign(ast.Index(d_var, part.indices), "+=", part.value)
        place = ast.Field(d_var, part.field)
        struct = self.types.get(var)
        field_type = struct.field_type(part.field) if isinstance(struct, StructType) else None
        if isinstance(field_type, TensorType):
            return ast.Assign(place, "+=", part.value)
        return assign(place, call("tree_add", place, part.value))

    def contributions(self, record: Op) -> list[tuple[str, ast.Expr]]:
        """(operand, adjoint contribution) for each active operand of the operation `record`."""
        rhs, d, r = record.rhs, name(self.adjoint(record.result)), name(record.result)
        span = record.original.span if record.original is not None else UNKNOWN_SPAN
        found: list[tuple[ast.Expr, ast.Expr]] = []
        match rhs:
            case ast.Name():
                found.append((rhs, d))
            case ast.Unary(op="-", operand=x):
                found.append((x, ast.Unary("-", d)))
            case ast.Binary(op="@", lhs=a, rhs=b):
                found += self.matmul(a, b, d, span)
            case ast.Binary(op=op, lhs=a, rhs=b) if op in BINARY:
                rule_a, rule_b = BINARY[op]
                bindings = {"d": d, "r": r, "a": a, "b": b}
                if self.active(a):
                    found.append((a, self.fit(instantiate(rule_a, bindings), a, record.original)))
                if self.active(b):
                    found.append((b, self.fit(instantiate(rule_b, bindings), b, record.original)))
            case ast.Call() if isinstance(self.type_of(record.original.func), FunctionRef):
                found += self.call_contributions(record, rhs, d, span)
            case ast.Call() if BY_NAME[self.type_of_callee(rhs)] in NON_DIFFERENTIABLE:
                pass
            case ast.Call():
                found += self.primitive_contributions(record, rhs, d, r, span)
            case ast.Index(target=target, indices=indices) if self.active(target):  # not `module.W[1]`
                found.append((target, self.index_adjoint(target, indices, d, span)))
            case ast.Field(target=target, name=field_name) if self.active(target):
                found.append((target, Part(None, field_name, d)))
            case ast.TupleLiteral(items=items):
                for position, item in enumerate(items):
                    found.append((item, ast.Index(d, (ast.IntLiteral(position),))))
            case ast.TensorLiteral(items=items):
                for position, item in enumerate(items):
                    found.append((item, self.fit(ast.Index(d, (ast.IntLiteral(position),)), item)))
            case ast.StructLiteral(fields=fields):
                for f in fields:
                    found.append((f.value, ast.Field(d, f.name)))
        return [(atom.id, c) for atom, c in found if self.active(atom)]

    def call_contributions(self, record: Op, rhs: ast.Call, d: ast.Expr, span: Span) -> list:
        """A call's adjoints come from the callee's `_back` function, called with the same arguments."""
        decl, path = self.typed.functions[self.type_of(record.original.func).key]
        active = self.round.active_params(decl)
        if not active:
            return []
        if record.split is not None:
            back, pair = record.split
            pulled = ast.Call(back, (*rhs.args, index_of(name(pair), 1), d), (), span)
        else:
            back = self.round.reference(self.path, path, self.round.back_name(decl, path), span)
            pulled = ast.Call(back, (*rhs.args, d), (), span)
        if len(active) == 1:
            return [(rhs.args[active[0]], pulled)]
        holder = self.fresh(f"d_{record.result}_args")
        self.pending.append(let(holder, pulled, span))
        return [(rhs.args[i], ast.Index(name(holder), (ast.IntLiteral(n),))) for n, i in enumerate(active)]

    def index_adjoint(self, target: ast.Name, indices, d: ast.Expr, span: Span) -> ast.Expr:
        target_type = self.types.get(target.id)
        if isinstance(target_type, TupleType):
            index = indices[0]
            negative = isinstance(index, ast.Unary) and isinstance(index.operand, ast.IntLiteral)
            position = -index.operand.value if negative else index.value
            position %= len(target_type.items)
            items = [
                d if i == position else call("zeros_like", ast.Index(target, (ast.IntLiteral(i),)))
                for i in range(len(target_type.items))
            ]
            return ast.TupleLiteral(tuple(items))
        if isinstance(target_type, TapeType):
            raise NotDifferentiable("`grad` cannot differentiate indexing a tape", span)
        if any(not isinstance(i, ast.Slice) and is_tensor_index(self.index_type(i)) for i in indices):
            if len(indices) == 1:
                return call("scatter_add", call("zeros_like", target), indices[0], d)
            raise NotDifferentiable(
                "`grad` cannot differentiate indexing with several index tensors",
                span,
                ("help: flatten the tensor and `gather` with one index tensor",),
            )
        return Part(indices, None, d)

    def index_type(self, index: ast.Expr) -> Type:
        if isinstance(index, ast.Name) and index.id in self.types:
            return self.types[index.id]
        return self.type_of(index)

    def primitive_contributions(self, record: Op, rhs: ast.Call, d, r, span) -> list[tuple[ast.Expr, ast.Expr]]:
        prim = BY_NAME[self.type_of_callee(rhs)]
        if prim not in DIFFERENTIABLE:
            raise NotDifferentiable(f"`{prim.value}` has no derivative rule", span)
        signature = SIGNATURES[prim]
        binding = bind(signature, len(rhs.args), [k.name for k in rhs.keywords])
        values: dict[str, ast.Expr] = {}
        names = [*signature.positional, *(n for n, _ in signature.optional)]
        for param, source in zip(names, binding.fixed, strict=True):
            if isinstance(source, int):
                values[param] = rhs.args[source]
            elif isinstance(source, str):
                values[param] = next(k.value for k in rhs.keywords if k.name == source)
        variadic = [rhs.args[i] for i in binding.variadic]
        for (param, default), source in zip(signature.keywords, binding.keywords, strict=True):
            values[param] = next(k.value for k in rhs.keywords if k.name == source) if source else literal(default)
        x = values.get("x")
        if prim in ELEMENTWISE:
            return [(x, instantiate(ELEMENTWISE[prim], {"d": d, "r": r, "x": x}))]
        if prim in (Prim.MAXIMUM, Prim.MINIMUM, Prim.WHERE):
            bindings = {"d": d, "r": r, "a": values["a"], "b": values["b"], "condition": values.get("condition")}
            rule_a, rule_b = BINARY[prim.value]
            return [
                (values["a"], self.fit(instantiate(rule_a, bindings), values["a"], record.original)),
                (values["b"], self.fit(instantiate(rule_b, bindings), values["b"], record.original)),
            ]
        if prim == Prim.MATMUL:
            return self.matmul(values["a"], values["b"], d, span)
        if prim in (Prim.SUM, Prim.MEAN, Prim.MAX, Prim.MIN, Prim.LOGSUMEXP):
            return [(x, self.reduction_adjoint(prim, x, values["axis"], values["keepdims"], d, r, span))]
        if prim in (Prim.SOFTMAX, Prim.LOG_SOFTMAX):
            axis = values["axis"]
            if prim == Prim.SOFTMAX:
                rule = ast.Binary(
                    "*",
                    r,
                    ast.Binary("-", d, call("sum", ast.Binary("*", d, r), axis=axis, keepdims=ast.BoolLiteral(True))),
                )
            else:
                rule = ast.Binary(
                    "-", d, ast.Binary("*", call("exp", r), call("sum", d, axis=axis, keepdims=ast.BoolLiteral(True)))
                )
            return [(x, rule)]
        if prim == Prim.TRANSPOSE:
            if not variadic:
                return [(x, call("transpose", d))]
            perm = [a.value for a in variadic]
            inverse = [perm.index(i) for i in range(len(perm))]
            return [(x, call("transpose", d, *[ast.IntLiteral(i) for i in inverse]))]
        if prim == Prim.STACK:
            tensors = values["tensors"]
            count = (
                len(self.types[tensors.id].items)
                if isinstance(self.types.get(getattr(tensors, "id", "")), TupleType)
                else 0
            )
            axis = values["axis"].value if isinstance(values["axis"], ast.IntLiteral) else 0
            if axis < 0:
                axis += self.rank(r) if self.rank(r) is not None else 0
            parts = [ast.Index(d, (*(ast.Slice(None, None, None),) * axis, ast.IntLiteral(i))) for i in range(count)]
            return [(tensors, ast.TupleLiteral(tuple(parts)))]
        if prim == Prim.FLOAT:
            x_type = self.types.get(getattr(x, "id", ""))
            dtype = x_type.dtype if isinstance(x_type, TensorType) else "f32"
            return [(x, call("float", d, dtype=name(dtype)))]
        if prim in LINEAR_HELPERS:
            bindings = {"d": d, "r": r, **values, "k": values.get("axis", ast.IntLiteral(0))}
            if prim == Prim.EXPAND_DIMS:
                bindings["k"] = values["axis"]
            return [(values[param], instantiate(rule, bindings)) for param, rule in LINEAR_HELPERS[prim].items()]
        if prim in CONVOLUTION:
            bindings = convolution_bindings(values, d, r)
            return [(values[param], instantiate(rule, bindings)) for param, rule in CONVOLUTION[prim].items()]
        raise NotDifferentiable(f"`{prim.value}` has no derivative rule", span)

    def type_of_callee(self, rhs: ast.Call) -> str:
        if isinstance(rhs.func, ast.Name):
            return rhs.func.id
        return rhs.func.name  # type: ignore[union-attr]

    def rank(self, atom: ast.Expr) -> int | None:
        t = self.types.get(getattr(atom, "id", ""))
        return t.rank if isinstance(t, TensorType) else None

    def reduction_adjoint(self, prim: Prim, x, axis, keepdims, d, r, span) -> ast.Expr:
        rank = self.rank(x)
        kept = isinstance(keepdims, ast.BoolLiteral) and keepdims.value
        if isinstance(axis, ast.Unary) and isinstance(axis.operand, ast.IntLiteral):
            axis = ast.IntLiteral(-axis.operand.value)
        whole = axis is None or (isinstance(axis, ast.Name) and axis.id == "none")
        if rank is None and not (whole or kept):
            raise NotDifferentiable(f"`grad` needs the rank of the argument of `{prim.value}`", span)
        known = rank is not None
        rank = rank if rank is not None else 1
        if not whole and not isinstance(axis, ast.IntLiteral):
            raise NotDifferentiable(f"`grad` needs `{prim.value}`'s `axis=` as a literal integer", span)
        k = None if whole else axis.value % max(rank, 1) if known else axis.value

        def expand(value: ast.Expr) -> ast.Expr:
            return value if whole or kept or rank == 0 else call("expand_dims", value, ast.IntLiteral(k))

        spread = ast.Binary("+", call("zeros_like", x), expand(d))
        if prim == Prim.SUM:
            return spread
        if prim == Prim.MEAN:
            count = (
                call("float", call("len", call("reshape", x, ast.Unary("-", ast.IntLiteral(1)))))
                if whole
                else call("float", ast.Index(call("shape", x), (ast.IntLiteral(k),)))
            )
            return ast.Binary("/", spread, count)
        if prim == Prim.LOGSUMEXP:
            return ast.Binary("*", expand(d), call("exp", ast.Binary("-", x, expand(r))))
        # max and min: ties share the gradient evenly
        hit = ast.Binary("==", x, expand(r))
        ones = call("where", hit, ast.FloatLiteral(1.0), ast.FloatLiteral(0.0))
        counted = (
            call("sum", ones) if whole else call("sum", ones, axis=ast.IntLiteral(k), keepdims=ast.BoolLiteral(True))
        )
        return call("where", hit, ast.Binary("/", expand(d), counted), call("zeros_like", x))

    def matmul(self, a: ast.Expr, b: ast.Expr, d: ast.Expr, span: Span) -> list[tuple[ast.Expr, ast.Expr]]:
        """The adjoints of `a @ b`'s operands; the narrower operand of an f32 @ f64 gets its own dtype back."""
        kinds = {self.float_dtype(a), self.float_dtype(b)}
        pairs = self.matmul_adjoints(a, b, d, span)
        if kinds != {"f32", "f64"}:
            return pairs
        return [
            (x, c if self.float_dtype(x) != "f32" or is_call(c, "unbroadcast") else call("unbroadcast", c, x))
            for x, c in pairs
        ]

    def float_dtype(self, atom: ast.Expr) -> str | None:
        t = self.types.get(atom.id) if isinstance(atom, ast.Name) else None
        return t.dtype if isinstance(t, TensorType) and not t.weak and t.dtype in ("f32", "f64") else None

    def matmul_adjoints(self, a: ast.Expr, b: ast.Expr, d: ast.Expr, span: Span) -> list[tuple[ast.Expr, ast.Expr]]:
        ra, rb = self.rank(a), self.rank(b)
        if ra is None or rb is None:
            raise NotDifferentiable("`grad` needs the ranks of `@`'s operands", span)

        def swap(x: ast.Expr, rank: int) -> ast.Expr:
            if rank == 2:
                return call("transpose", x)
            axes = [*range(rank - 2), rank - 1, rank - 2]
            return call("transpose", x, *[ast.IntLiteral(i) for i in axes])

        at = lambda x, y: ast.Binary("@", x, y)  # noqa: E731
        if ra == 1 and rb == 1:
            return [(a, ast.Binary("*", d, b)), (b, ast.Binary("*", d, a))]
        if ra == 1 and rb == 2:
            return [(a, at(b, d)), (b, ast.Binary("*", call("expand_dims", a, ast.IntLiteral(1)), d))]
        if ra == 2 and rb == 1:
            return [(a, ast.Binary("*", call("expand_dims", d, ast.IntLiteral(1)), b)), (b, at(d, a))]
        if ra == 2 and rb == 2:
            # an operand that is `transpose(w)` gives `w` its adjoint as one product in `w`'s layout:
            # `transpose(transpose(a) @ d)` is `transpose(d) @ a` (a weight's gradient, accumulated in place)
            wa, wb = self.transposed(a), self.transposed(b)
            da = (wa, at(b, swap(d, 2))) if wa is not None else (a, at(d, swap(b, 2)))
            db = (wb, at(swap(d, 2), a)) if wb is not None else (b, at(swap(a, 2), d))
            return [da, db]
        if ra >= 2 and rb >= 2:
            da, db = at(d, swap(b, rb)), at(swap(a, ra), d)
            if ra != rb or ra > 2:
                da, db = call("unbroadcast", da, a), call("unbroadcast", db, b)
            return [(a, da), (b, db)]
        raise NotDifferentiable(f"`grad` has no rule for `@` of rank {ra} and rank {rb} tensors", span)


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


# The primitives that look at a value without computing: their results are taken again, not kept.
VIEWS = {"transpose", "shape", "len"}


def kept_or_made(
    lets: list[ast.Let], needed: set[str], written: set[str], assigned: set[str], is_view: Callable[[ast.Expr], bool]
) -> tuple[list[str], list[ast.Let]]:
    """Which of the `needed` values of a forward sweep (a loop's iteration, a split function's body) its
    backward sweep takes from what the forward kept, and the `let`s (of `lets`, in order) that make the
    others again from those and from names the forward did not change: constants and views (`m.w`,
    `x[t]`, `items[0]`), cheaper to take again than to keep. `written`: the names the forward defined
    or assigned; `assigned`: those of them assigned after their definition."""
    views: list[ast.Let] = []
    for stmt in reversed(lets):
        local = stmt.pattern.name
        if local not in needed or local in assigned:
            continue
        operands = free_names(stmt.value)
        if is_view(stmt.value) and not operands & assigned:
            views.insert(0, dataclasses.replace(stmt, annotation=None))  # a type written with `g`'s dims
            needed = (needed - {local}) | (operands & written)
    return sorted(needed), views


def index_of(expr: ast.Expr, position: int) -> ast.Index:
    return ast.Index(expr, (ast.IntLiteral(position),))


def condition_of(tape: str) -> ast.Expr:
    """`len(tape) > 0`: a loop's backward runs while its tape has iterations on it."""
    return ast.Binary(">", call("len", name(tape)), ast.IntLiteral(0))


def root_name(expr: ast.Expr) -> str:
    while isinstance(expr, (ast.Index, ast.Field)):
        expr = expr.target
    return expr.id if isinstance(expr, ast.Name) else "value"


def as_block(orelse: ast.Block | ast.If) -> ast.Block:
    return orelse if isinstance(orelse, ast.Block) else ast.Block((orelse,), orelse.span)


def as_stmts(orelse) -> tuple[ast.Stmt, ...]:
    return as_block(orelse).body if orelse is not None else ()


# ------------------------------------------------------------------ lowering control flow


class Lowering:
    """`for` -> `while`; `break`, `continue` and `return` inside loops -> flags and guarded statements."""

    def __init__(self, body: FunctionBody) -> None:
        self.body = body
        self.prelude: list[ast.Stmt] = []
        self.returned: str | None = None
        self.return_value: str | None = None

    def block(self, stmts: list[ast.Stmt], loop: LoopFlags | None) -> list[ast.Stmt]:
        return self.guarded(stmts, loop)[0]

    def guarded(self, stmts: list[ast.Stmt], loop: LoopFlags | None) -> tuple[list[ast.Stmt], set[str]]:
        out: list[ast.Stmt] = []
        for position, stmt in enumerate(stmts):
            lowered, exits = self.stmt(stmt, loop)
            out += lowered
            if exits:
                rest, rest_exits = self.guarded(stmts[position + 1 :], loop)
                if rest:
                    out.append(ast.If(not_any(sorted(exits)), ast.Block(tuple(rest)), None))
                return out, exits | rest_exits
        return out, set()

    def stmt(self, stmt: ast.Stmt, loop: LoopFlags | None) -> tuple[list[ast.Stmt], set[str]]:
        match stmt:
            case ast.Break() if loop is not None:
                return [assign(name(loop.stop()), ast.BoolLiteral(True))], {loop.stop()}
            case ast.Continue() if loop is not None:
                return [assign(name(loop.skip()), ast.BoolLiteral(True))], {loop.skip()}
            case ast.Return(value=value) if loop is not None:
                flag, holder = self.return_flags(stmt)
                stores = [assign(name(holder), value, stmt.span)] if value is not None else []
                return [*stores, assign(name(flag), ast.BoolLiteral(True))], {flag}
            case ast.If(cond=cond, then=then, orelse=orelse):
                then_stmts, then_exits = self.guarded(list(then.body), loop)
                else_stmts, else_exits = self.guarded(list(as_stmts(orelse)), loop)
                new_else = ast.Block(tuple(else_stmts)) if orelse is not None else None
                return [
                    ast.If(cond, ast.Block(tuple(then_stmts), then.span), new_else, stmt.span)
                ], then_exits | else_exits
            case ast.While(cond=cond, body=body):
                return self.loop(cond, list(body.body), [], loop, stmt.span)
            case ast.For():
                before, cond, body = self.for_to_while(stmt)
                return self.loop(cond, body, before, loop, stmt.span)
        return [stmt], set()

    def loop(self, cond, body, before, outer: LoopFlags | None, span: Span) -> tuple[list[ast.Stmt], set[str]]:
        flags = LoopFlags(self.body)
        inner, exits = self.guarded(body, flags)
        if flags.skip_flag is not None:
            inner = [let(flags.skip_flag, ast.BoolLiteral(False)), *inner]
        stmts = list(before)
        if flags.stop_flag is not None:
            stmts.append(let(flags.stop_flag, ast.BoolLiteral(False)))
            cond = ast.Binary("and", ast.Unary("not", name(flags.stop_flag)), cond)
        escaping = exits & {self.returned}
        if escaping:
            cond = ast.Binary("and", ast.Unary("not", name(self.returned)), cond)
        stmts.append(ast.While(cond, ast.Block(tuple(inner)), span))
        if escaping and outer is None:
            stmts.append(ast.If(name(self.returned), ast.Block((ast.Return(name(self.return_value)),)), None))
            return stmts, set()
        return stmts, escaping

    def return_flags(self, stmt: ast.Return) -> tuple[str, str]:
        if self.returned is None:
            self.returned = self.body.fresh_user_name("returned")
            self.return_value = self.body.fresh_user_name("return_value")
            self.prelude += [
                let(self.returned, ast.BoolLiteral(False)),
                let(self.return_value, placeholder(self.body.result_type, stmt.span)),
            ]
            self.body.extra_types[id(self.prelude[-1].value)] = self.body.result_type
        return self.returned, self.return_value

    def for_to_while(self, stmt: ast.For) -> tuple[list[ast.Stmt], ast.Expr, list[ast.Stmt]]:
        body = self.body
        index = body.fresh_user_name("index")
        index_type = I64
        if isinstance(stmt.iterable, ast.Range):
            stop = body.fresh_user_name("stop")
            index_type = body.type_of(stmt.iterable.start)
            before = [let(index, stmt.iterable.start), let(stop, stmt.iterable.stop)]
            cond = ast.Binary("<", name(index), name(stop))
            current = name(index)
            body.extra_types[id(current)] = index_type
            binds = [ast.Let(stmt.pattern, None, current, stmt.span)]
        else:
            items = body.fresh_user_name("items")
            before = [let(index, ast.IntLiteral(0)), let(items, stmt.iterable)]
            iterable_type = body.type_of(stmt.iterable)
            zipped = isinstance(iterable_type, TupleType) and zips(iterable_type, stmt.pattern)
            if isinstance(iterable_type, TupleType) and not zipped:
                return before, *self.tuple_iterations(stmt, iterable_type, items, index)
            if zipped and any(isinstance(item, TupleType) for item in iterable_type.items):
                return before, *self.tuple_iterations(stmt, iterable_type, items, index, zipped=True)
            binds = self.element_lets(stmt, items, index)
            leading = ast.Index(name(items), (ast.IntLiteral(0),)) if zipped else name(items)
            cond = ast.Binary("<", name(index), call("len", leading))
        step = ast.Binary("+", name(index), ast.IntLiteral(1))
        body.extra_types[id(step)] = index_type
        return before, cond, [*binds, assign(name(index), step), *stmt.body.body]

    def tuple_iterations(self, stmt: ast.For, iterable: TupleType, items: str, index: str, zipped: bool = False):
        """The condition and body of a loop over a tuple's items, or over tuples zipped (`for (a, b) in
        (t, u)`), whose values may differ in type (the checker checks the body once for each step):
        `if position == 0 { let x = items[0]; body } else if ...`."""
        body = self.body

        def item(of: ast.Expr, of_type: Type, k: int) -> ast.Index:
            element = ast.Index(of, (ast.IntLiteral(k),))
            element_type = of_type.items[k] if isinstance(of_type, TupleType) else ANY
            if isinstance(of_type, TensorType) and of_type.dims:
                element_type = TensorType(of_type.dtype, of_type.dims[1:])
            body.extra_types[id(element)] = element_type
            return element

        def step_value(k: int) -> ast.Expr:
            if not zipped:
                return item(name(items), iterable, k)
            parts = [item(item(name(items), iterable, p), part, k) for p, part in enumerate(iterable.items)]
            value = ast.TupleLiteral(tuple(parts))
            body.extra_types[id(value)] = TupleType(tuple(body.extra_types[id(part)] for part in parts))
            return value

        count = len(iterable.items)
        if zipped:
            count = next(len(part.items) for part in iterable.items if isinstance(part, TupleType))
        position = body.fresh_user_name("position")
        branches: ast.Stmt | None = None
        for k in reversed(range(count)):
            block = ast.Block((ast.Let(stmt.pattern, None, step_value(k), stmt.span), *stmt.body.body), stmt.body.span)
            test = ast.Binary("==", name(position), ast.IntLiteral(k))
            branches = ast.If(test, block, branches, stmt.span)
        cond = ast.Binary("<", name(index), ast.IntLiteral(count))
        steps = [let(position, name(index)), assign(name(index), ast.Binary("+", name(index), ast.IntLiteral(1)))]
        return cond, [*steps, *([branches] if branches is not None else [])]

    def element_lets(self, stmt: ast.For, items: str, index: str) -> list[ast.Stmt]:
        body = self.body
        pattern = stmt.pattern
        if isinstance(pattern, ast.NamePattern):
            element = ast.Index(name(items), (name(index),))
            body.extra_types[id(element)] = body.typed.types.get(id(pattern), ANY)
            return [ast.Let(pattern, None, element, stmt.span)]
        iterable_type = body.type_of(stmt.iterable)
        if isinstance(iterable_type, TupleType) and len(iterable_type.items) == len(pattern.items):
            lets = []
            for position, item in enumerate(pattern.items):
                element = ast.Index(ast.Index(name(items), (ast.IntLiteral(position),)), (name(index),))
                body.extra_types[id(element)] = body.typed.types.get(id(item), ANY)
                lets.append(ast.Let(item, None, element, stmt.span))
            return lets
        raise NotDifferentiable("`grad` cannot yet differentiate this kind of `for` loop", stmt.span)


class LoopFlags:
    """The `break` and `continue` flags of one loop, made when first needed."""

    def __init__(self, body: FunctionBody) -> None:
        self.body = body
        self.stop_flag: str | None = None
        self.skip_flag: str | None = None

    def stop(self) -> str:
        if self.stop_flag is None:
            self.stop_flag = self.body.fresh_user_name("stop_loop")
        return self.stop_flag

    def skip(self) -> str:
        if self.skip_flag is None:
            self.skip_flag = self.body.fresh_user_name("skip_rest")
        return self.skip_flag


def placeholder(t: Type, span: Span) -> ast.Expr:
    """A value of type `t` to declare a variable with before its real value exists."""
    if isinstance(t, TensorType) and not t.dims:
        if t.dtype in ("f32", "f64"):
            return float_literal(0.0, t)
        return ast.BoolLiteral(False) if t.dtype == "bool" else ast.IntLiteral(0)
    if isinstance(t, TensorType) and all(isinstance(d, int) for d in t.dims):
        return call("zeros", *[ast.IntLiteral(d) for d in t.dims], dtype=name(t.dtype))
    if isinstance(t, TupleType):
        return ast.TupleLiteral(tuple(placeholder(item, span) for item in t.items))
    raise NotDifferentiable(
        f"`grad` cannot yet differentiate a `return` inside a loop of a function returning {t}",
        span,
        ("help: store the result in a variable, `break`, and return it after the loop",),
    )


def contains_return(stmt) -> bool:
    match stmt:
        case ast.Return():
            return True
        case ast.If(then=then, orelse=orelse):
            return any(contains_return(s) for s in then.body) or any(contains_return(s) for s in as_stmts(orelse))
    return False


def lift_returns(stmts: list[ast.Stmt]) -> list[ast.Stmt]:
    """Make every `return` the last statement of the body or of a branch of a final `if`."""
    for position, stmt in enumerate(stmts):
        if isinstance(stmt, ast.Return):
            return stmts[: position + 1]
        if isinstance(stmt, ast.If) and contains_return(stmt):
            rest = stmts[position + 1 :]
            read_after = free_names(tuple(rest))
            for branch in (stmt.then.body, as_stmts(stmt.orelse)):
                for shadow in (s for s in branch if isinstance(s, ast.Let)):
                    for p in pattern_names(shadow.pattern):
                        if p.name in read_after:
                            raise NotDifferentiable(
                                f"`grad` cannot yet differentiate a `let {p.name}` in a branch of an `if` that "
                                f"returns, when the code after the `if` reads the outer `{p.name}`",
                                p.span,
                                (f"help: give the branch's variable another name than `{p.name}`",),
                            )
            then = lift_returns([*stmt.then.body, *rest])
            orelse = lift_returns([*as_stmts(stmt.orelse), *rest])
            return [*stmts[:position], ast.If(stmt.cond, ast.Block(tuple(then)), ast.Block(tuple(orelse)), stmt.span)]
    return [*stmts, ast.Return(None)]


def pattern_names(pattern: ast.Pattern) -> Iterator[ast.NamePattern]:
    if isinstance(pattern, ast.NamePattern):
        yield pattern
    else:
        for item in pattern.items:
            yield from pattern_names(item)


def assigned_names(node) -> set[str]:
    """The root names assigned (`x = ...`, `x[i] = ...`, `(a, b) = ...`) anywhere in `node`."""
    found = set()
    for stmt in walk(node):
        if isinstance(stmt, ast.Assign):
            targets = [stmt.target]
            while targets:
                target = targets.pop()
                if isinstance(target, ast.TupleLiteral):
                    targets.extend(target.items)
                else:
                    found.add(root_name(target))
    return found


def declared_names(stmt: ast.Stmt) -> list[str]:
    """The names a statement declares in its block: a `let`'s, a local function's."""
    if isinstance(stmt, ast.Let):
        return [p.name for p in pattern_names(stmt.pattern)]
    if isinstance(stmt, ast.FnDecl):
        return [stmt.name]
    return []


def assigned_outer(stmt, env: dict[str, str]) -> list[str]:
    return sorted(assigned_names(stmt) & set(env))


def free_names(stmt) -> set[str]:
    return {node.id for node in walk(stmt) if isinstance(node, ast.Name)}


# Calls never dropped, even when nothing reads their result: lang/primitives.py EFFECTS (`save` writes a file).
EFFECTS = {"print", "assert", "save"}


def prune(stmts: list[ast.Stmt], effectful: frozenset[str] = frozenset()) -> list[ast.Stmt]:
    """Drop `let`s of values nothing reads (the forward values the backward sweep does not need), and
    copies: `let a = b` of names never assigned again makes `a` another name for `b`. Calls of the
    functions named in `effectful` (which print or assert) stay.

    Dropping a statement can only leave the names it read unread, so a worklist finds every dead
    statement in one pass over the code, however long the chains of dead values are."""
    effects = EFFECTS | effectful
    stmts = propagate_copies(stmts)
    readers: dict[str, int] = {}  # each name: how many statements read it
    droppable: dict[str, list] = {}  # each name: the `let`s and assignments of it that call nothing effectful
    reads: dict[int, set[str]] = {}  # what each droppable statement reads
    for stmt in walk(tuple(stmts)):
        names = names_read_by(stmt)
        for name in names:
            readers[name] = readers.get(name, 0) + 1
        target = dropped_name(stmt)
        if target is not None and not calls_any(stmt.value, effects):
            droppable.setdefault(target, []).append(stmt)
            reads[id(stmt)] = names
    dropped: set[int] = set()
    unread = [name for name in droppable if not readers.get(name)]
    while unread:
        for stmt in droppable.pop(unread.pop(), ()):
            dropped.add(id(stmt))
            for name in reads[id(stmt)]:
                readers[name] -= 1
                if not readers[name] and name in droppable:
                    unread.append(name)
    if dropped:
        stmts = filter_blocks(stmts, lambda stmt: id(stmt) not in dropped)
    return fold_zero_starts(stmts)


def dropped_name(stmt) -> str | None:
    """The name whose value a `let` or an assignment computes, for `prune`; None for other statements."""
    if isinstance(stmt, ast.Let) and isinstance(stmt.pattern, ast.NamePattern):
        return stmt.pattern.name
    if isinstance(stmt, ast.Assign) and not isinstance(stmt.target, ast.TupleLiteral):
        return root_name(stmt.target)
    return None


def propagate_copies(stmts: list[ast.Stmt]) -> list[ast.Stmt]:
    assigned = assigned_names(tuple(stmts))
    declared: dict[str, int] = {}
    for node in walk(tuple(stmts)):
        if isinstance(node, ast.NamePattern):
            declared[node.name] = declared.get(node.name, 0) + 1
    copies = {
        id(stmt): (stmt.pattern.name, stmt.value)
        for stmt in walk(tuple(stmts))
        if isinstance(stmt, ast.Let)
        and stmt.annotation is None
        and isinstance(stmt.pattern, ast.NamePattern)
        and declared.get(stmt.pattern.name) == 1
        and stmt.pattern.name not in assigned
        and (
            (isinstance(stmt.value, ast.Name) and declared.get(stmt.value.id, 0) <= 1 and stmt.value.id not in assigned)
            or (isinstance(stmt.value, (ast.FloatLiteral, ast.IntLiteral)) and stmt.value.dtype is None)
        )
    }
    if not copies:
        return stmts
    alias = dict(copies.values())

    def resolve(node: ast.Expr) -> ast.Expr:
        while isinstance(node, ast.Name) and node.id in alias:
            node = alias[node.id]
        return node

    stmts = filter_blocks(stmts, lambda stmt: id(stmt) not in copies)
    renames = {
        id(node): resolve(node) for node in walk(tuple(stmts)) if isinstance(node, ast.Name) and node.id in alias
    }
    return [fold_constants(stmt) for stmt in replace_nodes(tuple(stmts), renames)]


def fold_constants(node):
    """`e * 1.0`, `1.0 * e` and `e / 1.0` become `e` (an unsuffixed 1 takes `e`'s dtype, so nothing changes)."""
    if isinstance(node, tuple):
        return tuple(fold_constants(item) for item in node)
    if not dataclasses.is_dataclass(node) or isinstance(node, type):
        return node
    changes = {}
    for f in dataclasses.fields(node):
        if f.name in ("span", "name_span"):
            continue
        value = getattr(node, f.name)
        new = fold_constants(value)
        if new is not value:
            changes[f.name] = new
    if changes:
        node = dataclasses.replace(node, **changes)
    if isinstance(node, ast.Binary) and node.op in ("*", "/") and is_weak_one(node.rhs):
        return node.lhs
    if isinstance(node, ast.Binary) and node.op == "*" and is_weak_one(node.lhs):
        return node.rhs
    return node


def is_weak_one(node: ast.Expr) -> bool:
    return isinstance(node, (ast.FloatLiteral, ast.IntLiteral)) and node.dtype is None and node.value == 1


def fold_zero_starts(stmts: list[ast.Stmt]) -> list[ast.Stmt]:
    """`v = zeros_like(...)` (or `let`) followed, as the next statement of the block that mentions `v`, by
    `v = v + c` becomes `v = c` there: the backward sweep's zeroed adjoints, written the way a person would."""
    out: list[ast.Stmt] = []
    for stmt in map(fold_nested, stmts):
        if out and undoes_copy(out[-1], stmt):
            continue  # `let w = v` then `v = w`
        start = last_mention(out, stmt.target.id) if is_self_increment(stmt) else None
        if start is not None and zero_start(out[start]) == stmt.target.id:
            zeroed = out.pop(start)
            folded = dataclasses.replace(zeroed, value=stmt.value.rhs)
            if start != len(out):  # statements in between: the value is only ready here
                folded = let(stmt.target.id, stmt.value.rhs) if isinstance(zeroed, ast.Let) else stmt
                folded = dataclasses.replace(folded, value=stmt.value.rhs)
            if not (out and undoes_copy(out[-1], folded)):
                out.append(folded)
            continue
        out.append(stmt)
    return out


def is_self_increment(stmt: ast.Stmt) -> bool:
    return isinstance(stmt, ast.Assign) and isinstance(stmt.target, ast.Name) and is_increment(stmt, stmt.target.id)


def last_mention(stmts: list[ast.Stmt], var: str) -> int | None:
    """The position of the last statement that mentions `var`, if any."""
    for position in range(len(stmts) - 1, -1, -1):
        if any(
            isinstance(n, (ast.Name, ast.NamePattern)) and getattr(n, "id", getattr(n, "name", None)) == var
            for n in walk(stmts[position])
        ):
            return position
    return None


def fold_nested(stmt: ast.Stmt) -> ast.Stmt:
    match stmt:
        case ast.If(cond=cond, then=then, orelse=orelse):
            new_else = orelse
            if isinstance(orelse, ast.Block):
                new_else = ast.Block(tuple(fold_zero_starts(list(orelse.body))), orelse.span)
            return ast.If(cond, ast.Block(tuple(fold_zero_starts(list(then.body))), then.span), new_else, stmt.span)
        case ast.While(cond=cond, body=body):
            return ast.While(cond, ast.Block(tuple(fold_zero_starts(list(body.body))), body.span), stmt.span)
    return stmt


def undoes_copy(previous: ast.Stmt, stmt: ast.Stmt) -> bool:
    return (
        isinstance(previous, ast.Let)
        and isinstance(previous.pattern, ast.NamePattern)
        and isinstance(previous.value, ast.Name)
        and isinstance(stmt, ast.Assign)
        and stmt.op == "="
        and isinstance(stmt.target, ast.Name)
        and stmt.target.id == previous.value.id
        and isinstance(stmt.value, ast.Name)
        and stmt.value.id == previous.pattern.name
    )


def zero_start(stmt: ast.Stmt) -> str | None:
    """The variable `stmt` sets to zeros (`let v = zeros_like(...)` or `v = zeros_like(...)`), if it does."""
    value = getattr(stmt, "value", None)
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "zeros_like"):
        return None
    if isinstance(stmt, ast.Let) and isinstance(stmt.pattern, ast.NamePattern):
        return stmt.pattern.name
    if isinstance(stmt, ast.Assign) and stmt.op == "=" and isinstance(stmt.target, ast.Name):
        return stmt.target.id
    return None


def is_increment(stmt: ast.Stmt, var: str) -> bool:
    """Is `stmt` `var = var + c`, with `c` not reading `var`?"""
    if not (isinstance(stmt, ast.Assign) and stmt.op == "=" and isinstance(stmt.target, ast.Name)):
        return False
    value = stmt.value
    return (
        stmt.target.id == var
        and isinstance(value, ast.Binary)
        and value.op == "+"
        and isinstance(value.lhs, ast.Name)
        and value.lhs.id == var
        and all(not (isinstance(n, ast.Name) and n.id == var) for n in walk(value.rhs))
    )


def names_read_by(stmt) -> set[str]:
    """The names a statement reads other than in an update of themselves (`d_x = d_x + c`, `d_x[i] += c`): a
    variable only its own updates read is dead, updates included. An `if` or `while` reads its condition
    (its blocks' statements are statements of their own); nodes that are not statements read nothing."""
    if isinstance(stmt, (ast.Let, ast.Assign)):
        itself = root_name(stmt.target) if isinstance(stmt, ast.Assign) else None
        reads = {n.id for n in walk(stmt.value) if isinstance(n, ast.Name) and n.id != itself}
        if isinstance(stmt, ast.Assign):
            reads |= {n.id for n in walk(stmt.target) if isinstance(n, ast.Name) and n.id != itself}
            if isinstance(stmt.target, ast.TupleLiteral):
                reads |= assigned_names(stmt)
        return reads
    if isinstance(stmt, (ast.If, ast.While)):
        return {n.id for n in walk(stmt.cond) if isinstance(n, ast.Name)}
    if isinstance(stmt, (ast.Return, ast.ExprStmt)):
        return {n.id for n in walk(stmt) if isinstance(n, ast.Name)}
    return set()


def calls_any(expr, functions: set[str] | frozenset[str]) -> bool:
    """Does `expr` call one of `functions` (by name, or as `module.name`)?"""
    for n in walk(expr):
        if isinstance(n, ast.Call):
            if isinstance(n.func, ast.Name) and n.func.id in functions:
                return True
            if isinstance(n.func, ast.Field) and n.func.name in functions:
                return True
    return False


def filter_blocks(stmts: list[ast.Stmt], keep) -> list[ast.Stmt]:
    out = []
    for stmt in stmts:
        if not keep(stmt):
            continue
        match stmt:
            case ast.If(cond=cond, then=then, orelse=orelse):
                new_else = orelse
                if isinstance(orelse, ast.Block):
                    new_else = ast.Block(tuple(filter_blocks(list(orelse.body), keep)), orelse.span)
                elif isinstance(orelse, ast.If):
                    new_else = filter_blocks([orelse], keep)[0]
                stmt = ast.If(
                    cond, ast.Block(tuple(filter_blocks(list(then.body), keep)), then.span), new_else, stmt.span
                )
            case ast.While(cond=cond, body=body):
                stmt = ast.While(cond, ast.Block(tuple(filter_blocks(list(body.body), keep)), body.span), stmt.span)
        out.append(stmt)
    return out
