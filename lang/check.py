"""The static checker: a loaded `Program` -> `Typed` (every expression's type) + diagnostics.

Runs before anything executes. It resolves names, binds calls, and computes a
type with a symbolic shape for every expression (lang/types.py), using the
shape rules of lang/shapes.py. A function whose parameters are all annotated is
checked once, generically: its dimension names (`B`, `N`) are fixed inside it
and bound per call from outside. A function with unannotated parameters is
checked per call with the argument types (each distinct set once). A variable
keeps the type it was declared with; rebinding must fit it (`_` in an
annotation marks a dimension that may change, checked at run time).

Errors are collected (each mistake once, at its source) and returned; the
checker keeps going after an error by giving the bad expression the type
`ANY`, which fits everywhere and so causes no second report.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import field, replace
from types import MappingProxyType
from typing import TypeVar

from dl.lang import ast, habits
from dl.lang.calls import Binding, BindingError, bind, bind_function, binding_diagnostic, takes_one_tuple
from dl.lang.diagnostics import Diagnostic, DiagnosticError, Label, Span, closest, error, warning
from dl.lang.literals import out_of_range
from dl.lang.modules import Program, in_stdlib, stdlib_path
from dl.lang.primitives import BY_NAME, PRIMITIVES, TRANSFORMS, Prim, Primitive
from dl.lang.printer import print_expr
from dl.lang.record import record
from dl.lang.shapes import (
    TUPLES_ADDED,
    Argument,
    ShapeError,
    arithmetic,
    broadcast_dims,
    check_format,
    comparison,
    logical,
    matmul_type,
    picks_in_place,
    promote_dtypes,
    same_dim,
    widens_f32,
)
from dl.lang.types import (
    ANY,
    BOOL,
    DTYPES,
    FLOATS,
    I64,
    INTEGERS,
    STR,
    UNIT,
    UNKNOWN,
    AnyType,
    Dim,
    DimExpr,
    DimSource,
    DimVar,
    DTypeType,
    FunctionRef,
    FunctionType,
    GradientRef,
    ModuleType,
    PrimitiveRef,
    StrType,
    StructType,
    TapeType,
    TensorType,
    TransformRef,
    TupleType,
    Type,
    Unknown,
    dim_arithmetic,
    dim_names_of,
    dimension_at,
    dimension_sources,
    evaluate_dim,
    exact_quotient,
    has_dim_expression,
    same_struct,
    strong,
    substitute_dims,
)

# A call checked for several bodies in one check of the body it is in (a loop over a tuple), in place of the
# one it checked: in `Checker.calls_made` and `Typed.instances_called`
SEVERAL = -1
MAX_INSTANCES = 16  # per function: beyond this, unannotated parameters are checked as unknown


@record(frozen=True)
class Signature:
    """A checked function: parameter names and types, and the result type."""

    name: str
    params: tuple[tuple[str, Type], ...]
    result: Type

    def __str__(self) -> str:
        shown = ", ".join(f"{name}: {t}" for name, t in self.params)
        return f"fn {self.name}({shown}) -> {self.result}"

    def text_in(self, path: str, program: Program) -> str:
        """As `str`, with each struct of a module that `path` imports named as `path`'s code names it
        (`layers.Linear[3, 2]`, where `str` says `Linear[3, 2]`): how `dlrun check --types` and the language
        server show a module's signatures."""
        aliases = {module: alias for alias, module in program.imports.get(path, [])}

        def named(t: Type) -> Type:
            if isinstance(t, StructType) and t.module != path and t.module in aliases:
                return replace(t, name=f"{aliases[t.module]}.{t.name}")
            if isinstance(t, TupleType):
                return TupleType(tuple(named(item) for item in t.items))
            if isinstance(t, FunctionType):
                return FunctionType(tuple(named(param) for param in t.params), named(t.result))
            return t

        shown = ", ".join(f"{name}: {named(t)}" for name, t in self.params)
        return f"fn {self.name}({shown}) -> {named(self.result)}"


@record(frozen=True, slots=True)
class RuntimeCheck:
    """An annotation the checker could not prove (a `_` or data-dependent size met it): the backend checks
    the value against `type` when it runs, and a failure points at the annotation's `span`."""

    type: Type
    span: Span


@record(frozen=True, slots=True)
class CallCheck:
    """A function some call could not be proven to fit: every call checks its annotated parameters
    (`None` where unannotated) and its result at run time, binding dimension names consistently."""

    params: tuple[RuntimeCheck | None, ...]
    result: RuntimeCheck | None


@record
class Tables:
    """What the checker learns as it goes; `Typed` is these, frozen, when it is done."""

    types: dict[int, Type] = field(default_factory=dict)
    signatures: dict[str, list[Signature]] = field(default_factory=dict)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    runtime_checks: dict[int, RuntimeCheck] = field(default_factory=dict)
    checked_calls: dict[int, CallCheck] = field(default_factory=dict)
    coercions: dict[int, str] = field(default_factory=dict)
    bindings: dict[int, Binding] = field(default_factory=dict)
    functions: dict[int, tuple[ast.FnDecl | ast.Lambda, str]] = field(default_factory=dict)
    dimension_reads: dict[int, dict[str, DimSource]] = field(default_factory=dict)
    varied: dict[int, Type] = field(default_factory=dict)
    call_types: dict[int, tuple[Type, ...]] = field(default_factory=dict)
    body_types: dict[int, dict[int, Type]] = field(default_factory=dict)
    instances_called: dict[int, dict[int, int]] = field(default_factory=dict)
    environments: dict[int, Mapping[str, Type]] = field(default_factory=dict)
    step_types: dict[tuple, dict[int, dict[int, Type]]] = field(default_factory=dict)
    steps_of: dict[tuple, dict[int, tuple[int, ...]]] = field(default_factory=dict)
    contested: dict[int, dict[int, str]] = field(default_factory=dict)
    step_coercions: dict[tuple, dict[int, dict[int, str]]] = field(default_factory=dict)
    step_literals: set[int] = field(default_factory=set)
    step_instances: dict[int, dict[tuple, int]] = field(default_factory=dict)
    contested_by_dtypes: dict[int, dict[tuple[str, ...], str]] = field(default_factory=dict)
    transpose_axes: dict[int, set[tuple]] = field(default_factory=dict)

    def frozen(self, program: Program) -> Typed:
        return Typed(
            program,
            MappingProxyType(self.types),
            MappingProxyType({path: tuple(found) for path, found in self.signatures.items()}),
            tuple(self.diagnostics),
            MappingProxyType(self.runtime_checks),
            MappingProxyType(self.checked_calls),
            MappingProxyType(self.coercions),
            MappingProxyType(self.bindings),
            MappingProxyType(self.functions),
            MappingProxyType(self.dimension_reads),
            MappingProxyType(self.varied),
            MappingProxyType(self.call_types),
            MappingProxyType(self.body_types),
            MappingProxyType(self.instances_called),
            MappingProxyType(self.environments),
            MappingProxyType(self.step_types),
            MappingProxyType(self.steps_of),
            frozenset(node for by_body in self.step_types.values() for made in by_body.values() for node in made),
            MappingProxyType(self.contested),
            MappingProxyType(self.step_coercions),
            frozenset(self.step_literals),
            MappingProxyType(self.step_instances),
            MappingProxyType(self.contested_by_dtypes),
            frozenset(call for call, seen in self.transpose_axes.items() if len(seen) > 1),
        )


NOTHING: Mapping = MappingProxyType({})  # an empty table


@record(frozen=True)
class Typed:
    """What the checker knows, immutable: expression types by node (`type_of`), function signatures,
    diagnostics, how each call binds, and the annotations left to check at run time (keyed by the id of
    the `Let`, or of the `FnDecl` whose parameters and result are checked on every call). Every later pass
    reads types through `type_of`; one that builds new nodes keeps their types in a `NodeTypes`."""

    program: Program
    types: Mapping[int, Type] = field(default_factory=lambda: NOTHING)
    signatures: Mapping[str, tuple[Signature, ...]] = field(default_factory=lambda: NOTHING)  # by module path, in order
    diagnostics: tuple[Diagnostic, ...] = ()
    runtime_checks: Mapping[int, RuntimeCheck] = field(default_factory=lambda: NOTHING)
    checked_calls: Mapping[int, CallCheck] = field(default_factory=lambda: NOTHING)  # by id of the FnDecl
    coercions: Mapping[int, str] = field(
        default_factory=lambda: NOTHING
    )  # id of a number literal -> the dtype it takes
    # id of a call of a primitive or of a declared function -> how its arguments bind (lang/calls.py)
    bindings: Mapping[int, Binding] = field(default_factory=lambda: NOTHING)
    # id of a FnDecl or Lambda -> (it, the path of its module): what a FunctionRef's `key` names
    functions: Mapping[int, tuple[ast.FnDecl | ast.Lambda, str]] = field(default_factory=lambda: NOTHING)
    # id of a FnDecl -> the dimension names of its signature its body reads as values, with where each is
    # found in its parameters (lang/dimensions.py binds them at the start of the body)
    dimension_reads: Mapping[int, Mapping[str, DimSource]] = field(default_factory=lambda: NOTHING)
    # id of a node of a function checked for calls of several types, typed otherwise by each -> a type that
    # holds for all of them (a dimension they disagree on named for its size in each; `Any` where ranks or
    # dtypes differ). `types`
    # has the last call's type: a pass that writes one piece of code for every call reads this one.
    varied: Mapping[int, Type] = field(default_factory=lambda: NOTHING)
    # the same nodes -> their types, each once, in the order of the calls that gave them (what a hover shows)
    call_types: Mapping[int, tuple[Type, ...]] = field(default_factory=lambda: NOTHING)
    # the same nodes -> their type in each check of their function's body (checks are numbered, one per
    # distinct argument types): what code written for one call reads (`type_in_body`)
    body_types: Mapping[int, Mapping[int, Type]] = field(default_factory=lambda: NOTHING)
    # id of a call of a function with unannotated parameters (or of a `grad` of one, for all the calls of the
    # gradient) -> for each check of the body the call is in, the check of the callee's body it made
    instances_called: Mapping[int, Mapping[int, int]] = field(default_factory=lambda: NOTHING)
    # key of a Lambda or local function (its id: the last closure made; or a `FunctionRef.closure`: that closure)
    # -> the types of the names in scope where it was made: what its body may capture, for a tool that makes it
    # again elsewhere (the REPL)
    environments: Mapping[int, Mapping[str, Type]] = field(default_factory=lambda: NOTHING)
    # a `for` over a tuple whose items differ in type has its body checked once for each distinct type, its
    # steps (`Checker.for_statement`), which may type a node differently (`item + 1`: f64 for one item, i64
    # for the next). The nodes' types in each step: keyed by the steps they were checked in, outermost first
    # (id of the For, the step's number), then by check of the function's body; and for each such For, keyed
    # by the steps it is in and its id, then by check, the number of the step each of the tuple's items takes
    step_types: Mapping[tuple, Mapping[int, Mapping[int, Type]]] = field(default_factory=lambda: NOTHING)
    steps_of: Mapping[tuple, Mapping[int, tuple[int, ...]]] = field(default_factory=lambda: NOTHING)
    stepped: frozenset[int] = frozenset()  # the ids of the nodes `step_types` types
    # the number literals that take a dtype from context in some checks of their function and another (or
    # their own) in others, f64 for a call with f64 arguments and f32 for one with f32 (`settle_coercions`): by
    # id, the dtype each check of the body (numbered) gave it from context, where one did
    contested: Mapping[int, Mapping[int, str]] = field(default_factory=lambda: NOTHING)
    # the number literals in the body of a loop over items of several types (`step_types`), by id; and by the
    # steps they were checked in, then by check of the body, the dtypes those of them that took one from
    # their context took in those steps (`1` in `item + 1`: f64 for an f64 item, none for an i64)
    step_coercions: Mapping[tuple, Mapping[int, Mapping[int, str]]] = field(default_factory=lambda: NOTHING)
    step_literals: frozenset[int] = frozenset()
    # id of a call in the body of a loop over items of several types -> for each (check of the body, steps it
    # was checked in), the check of the callee's body it made (`instances_called` has none: they differ)
    step_instances: Mapping[int, Mapping[tuple, int]] = field(default_factory=lambda: NOTHING)
    # `contested` by the dtypes of the arguments of the checks (`dtype_leaves`): what a backend that runs one
    # body for every call (the interpreter) or compiles per call (LLVM) reads with the arguments it has
    contested_by_dtypes: Mapping[int, Mapping[tuple[str, ...], str]] = field(default_factory=lambda: NOTHING)
    # ids of the `transpose` calls whose axes (from a parameter: `transpose(x, perm)`) differ between the checks of
    # their function: code written once for every call (a derivative) cannot know them
    varied_axes: frozenset[int] = frozenset()

    def with_diagnostics(self, diagnostics) -> Typed:
        return replace(self, diagnostics=tuple(diagnostics))

    def type_of(self, node: ast.Expr) -> Type | None:
        return self.types.get(id(node))

    def declared_params(self, decl: ast.FnDecl | ast.Lambda) -> list[Type | None]:
        """Each parameter's type as its annotation declares it (`x: f32[B, 4]`, whose names each call binds), where
        the run checks its calls (`checked_calls`); else the checker's type of it. (Where the function is checked
        per call, the checker's type is one call's.)"""
        call_check = self.checked_calls.get(id(decl))
        if call_check is not None:
            return [check.type if check is not None else None for check in call_check.params]
        return [self.type_of(param) for param in decl.params]

    def type_in_every_call(self, node: object) -> Type | None:
        """Its type, or for a node of a function checked for calls of several types that typed it
        differently, one that holds for each (`varied`): what code written once for all the calls reads."""
        found = self.varied.get(id(node))
        return found if found is not None else self.types.get(id(node))

    def coercion(self, literal: ast.Expr, body: int | None, steps: tuple[tuple[int, int], ...] = ()) -> str | None:
        """The dtype a number literal takes from its context (`coercions`), or where checks of its function gave
        it different ones (`contested`), the one check `body` gave it; in the steps `steps` of loops over items
        of several types, the one it took in those (`step_coercions`)."""
        if steps and id(literal) in self.step_literals:
            by_body = self.step_coercions.get(steps, NOTHING)
            if body is not None and body in by_body:
                return by_body[body].get(id(literal))
            return agreed(made.get(id(literal)) for made in by_body.values())
        found = self.coercions.get(id(literal))
        if found is None and body is not None:
            found = self.contested.get(id(literal), NOTHING).get(body)
        return found

    def coercion_for(self, literal: ast.Expr, dtypes: tuple[str, ...]) -> str | None:
        """The dtype a number literal takes from its context; for one that checks of its function gave different
        ones (`contested`: `let s = 0.01` in a function called with f64 and with f32 data), the one the checks
        of the function for arguments of these leaf dtypes gave it (`dtype_leaves`), where they agreed."""
        found = self.coercions.get(id(literal))
        if found is None:
            found = self.contested_by_dtypes.get(id(literal), NOTHING).get(dtypes)
        return found

    def type_in_body(self, node: object, body: int | None) -> Type | None:
        """Its type in check number `body` of its function's body (one call's types), where that check gave it
        one; else `type_in_every_call`."""
        found = self.body_types.get(id(node), NOTHING).get(body) if body is not None else None
        return found if found is not None else self.type_in_every_call(node)

    def type_in_steps(self, node: object, steps: tuple[tuple[int, int], ...], body: int | None) -> Type | None:
        """Its type in the steps `steps` of the loops over tuples around it (`step_types`), where they typed it:
        in check `body` of its function's body, or where that is None, one that holds for each check."""
        for depth in range(len(steps), 0, -1):
            by_body = self.step_types.get(steps[:depth], NOTHING)
            if body is not None and body in by_body:
                found = by_body[body].get(id(node))
            else:
                types = [(number, made[id(node)]) for number, made in by_body.items() if id(node) in made]
                found = None if not types else types[0][1] if len({t for _, t in types}) == 1 else common_type(types)
            if found is not None:
                return found
        return None

    def steps_taken(self, loop: object, steps: tuple[tuple[int, int], ...], body: int | None) -> tuple[int, ...] | None:
        """For a `for` over a tuple whose items differ in type, in the steps `steps` of the loops around it and check
        `body` of its function (None: every check), the number of the step each item takes (`steps_of`); None where
        its items are of one type, or where checks differ."""
        by_body = self.steps_of.get((*steps, id(loop)), NOTHING)
        return by_body[body] if body in by_body else agreed(by_body.values())

    def instance_called(self, body: int | None, call: ast.Call, steps: tuple = ()) -> int | None:
        """The check of a callee's body that `call` (or the calls of the gradient a `grad(f)` call makes) made
        in check `body` of the body it is in, or in every check of it (`body` None) where they all made the
        same one; in the steps `steps` of loops over items of several types, the one it made there. None where
        they made several, or checked the callee with unknown types."""
        stepped = self.step_instances.get(id(call), NOTHING)
        if steps and stepped:
            return agreed(made for (check, at), made in stepped.items() if at == steps and body in (None, check))
        made = self.instances_called.get(id(call), NOTHING)
        one = agreed(made.values() if body is None else [made.get(body)])
        return one if one != SEVERAL else None

    def instance_alike(self, call: ast.Call, args: list[Type], params: tuple[ast.Param, ...]) -> int | None:
        """A check of the callee's body that some check of `call` made for parameters of the types of `args`, up to
        the names of sizes' checks (`size_structure`): its derivative serves this call. None if none."""
        made = self.instances_called.get(id(call), NOTHING)
        wanted = [size_structure(strong(t) if isinstance(t, TensorType) else t) for t in args]
        for check in sorted(set(made.values()) - {SEVERAL}):
            typed = [self.type_in_body(param, check) for param in params]
            if all(size_structure(t) == w for t, w in zip(typed, wanted, strict=False)):
                return check
        return None

    def called_several(self, call: ast.Call) -> bool:
        """Whether one check of the body `call` is in checked it for arguments of several types (it is in a
        loop over a tuple)."""
        return SEVERAL in self.instances_called.get(id(call), NOTHING).values()

    def reached(self, entry: str = "main") -> set[int]:
        """The functions (keys of `functions`) that running the entry module's `entry` may call: it, the
        functions and lambdas its body names, theirs, and so on, and those the modules' constants call."""
        module = self.program.modules[self.program.entry]
        roots = [d for d in module.decls if isinstance(d, ast.FnDecl) and d.name == entry]
        roots += [d.value for m in self.program.modules.values() for d in m.decls if isinstance(d, ast.Const)]
        reached = {id(d) for d in roots if id(d) in self.functions}
        pending = list(roots)
        while pending:
            for node in ast.walk(pending.pop()):
                ref = self.type_of(node)
                if isinstance(ref, FunctionRef) and ref.key in self.functions and ref.key not in reached:
                    reached.add(ref.key)
                    pending.append(self.functions[ref.key][0])
        return reached

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.is_error]


@record
class ModuleInfo:
    path: str
    functions: dict[str, ast.FnDecl] = field(default_factory=dict)
    structs: dict[str, StructType] = field(default_factory=dict)
    struct_decls: dict[str, ast.StructDecl] = field(default_factory=dict)
    consts: dict[str, Type] = field(default_factory=dict)
    const_decls: dict[str, ast.Const] = field(default_factory=dict)
    imports: dict[str, str] = field(default_factory=dict)
    # the const a free dimension name of a struct field may be a misspelling of, by name: asked once per name,
    # as each question compares the name with every const of the module
    const_suggestions: dict[str, str | None] = field(default_factory=dict)


@record
class FunctionInfo:
    """A declaration or lambda that calls check: where it lives and what it captured."""

    decl: ast.FnDecl | ast.Lambda
    module: ModuleInfo
    name: str
    environment: dict[str, Type] | None = None  # captured names, for local functions and lambdas
    dims: Mapping[str, DimValue] = field(default_factory=dict)  # the enclosing function's, for those

    @property
    def generic(self) -> bool:
        return all(p.annotation is not None for p in self.decl.params)


class Scope:
    def __init__(self, parent: Scope | None = None) -> None:
        self.parent = parent
        self.names: dict[str, Type] = {}

    def lookup(self, name: str) -> Type | None:
        scope: Scope | None = self
        while scope is not None:
            if name in scope.names:
                return scope.names[name]
            scope = scope.parent
        return None

    def refine(self, name: str, t: Type) -> None:
        """Give a variable a more precise type where it was declared (a `tape()` after its first push)."""
        scope: Scope | None = self
        while scope is not None and name not in scope.names:
            scope = scope.parent
        if scope is not None:
            scope.names[name] = t

    def visible(self) -> dict[str, Type]:
        chain = []
        scope: Scope | None = self
        while scope is not None:
            chain.append(scope.names)
            scope = scope.parent
        merged: dict[str, Type] = {}
        for names in reversed(chain):
            merged.update(names)
        return merged


@record
class StructSizes:
    """The sizes a struct being declared is generic over: those it declares, or (not `declared`) the names its
    fields use, gathered as they are met."""

    struct: str
    names: list[str]
    declared: bool
    undeclared: set[str] = field(default_factory=set)  # names reported as not declared (once each)


@record(frozen=True, slots=True)
class DimValue:
    """A dimension name of a function's signature as a value in its body: an `i64` that the checker knows is
    that size; at run time it is read from the parameter `source` names (the function `owner`'s)."""

    type: TensorType
    owner: int
    source: DimSource


@record
class Context:
    """The function being checked."""

    module: ModuleInfo
    name: str
    expected_result: Type | None
    rebound: frozenset[str]
    returns: list[tuple[Type, Span]] = field(default_factory=list)
    loops: int = 0
    decl: ast.FnDecl | ast.Lambda | None = None
    dim_names: frozenset[str] | None = None  # the dimension names in scope; None: not tracked (nested functions)
    # the `let`s of unsuffixed literals: the dtype each name takes from its uses (a `Conflict` where they
    # disagree); None while the uses are being found (`LiteralBindings`), the names then kept weak
    literal_dtypes: Mapping[str, str | Conflict] | None = field(default_factory=dict)
    dims: Mapping[str, DimValue] = field(default_factory=dict)  # the dimension names usable as values


@record(frozen=True, slots=True)
class Conflict:
    """Uses of a literal's binding that ask for different dtypes: (dtype, where) of the first of each."""

    uses: tuple[tuple[str, Span], ...]


@record
class LiteralBindings:
    """The names a function body binds to unsuffixed literals (`let s = 0.0`), with the literal's own dtype,
    and the float dtypes their uses ask for, found by checking the body with those names kept weak (as JAX
    keeps a Python number weak). A binding rebound to floats (`s += x`) takes their dtype (rebound to two, it
    is a mistake: a variable has one type); a float literal's binding that is not takes the float dtype of
    what it meets (`lr * g`), if that is one; an integer literal's binding otherwise stays `i64`."""

    kinds: dict[str, str]
    stored: dict[str, dict[str, Span]] = field(default_factory=dict)
    met: dict[str, dict[str, Span]] = field(default_factory=dict)
    # names bound to weak values computed from such bindings (`let step = lr / (1.0 - beta1 ** t)`), with what
    # computes them: what they meet, those bindings meet
    derived: dict[str, ast.Expr] = field(default_factory=dict)

    def ask(self, name: str, dtype: str, span: Span, stored: bool) -> None:
        kind = self.kinds.get(name)
        if kind is None or dtype not in FLOATS or (kind in INTEGERS and not stored):
            return
        (self.stored if stored else self.met).setdefault(name, {}).setdefault(dtype, span)

    def meets(self, node: ast.Expr, dtype: str) -> None:
        """A weak value computed by `node` takes `dtype` from what it meets: so do the bindings it reads."""
        match node:
            case ast.Name(id=name):
                self.ask(name, dtype, node.span, stored=False)
                if name in self.derived:
                    self.meets(self.derived[name], dtype)
            case ast.Unary(operand=operand):
                self.meets(operand, dtype)
            case ast.Binary(lhs=lhs, rhs=rhs):
                self.meets(lhs, dtype)
                self.meets(rhs, dtype)
            case ast.TensorLiteral(items=items):
                for item in items:
                    self.meets(item, dtype)

    def hiding(self, names: set[str]) -> LiteralBindings:
        """These bindings as a closure that binds `names` itself sees them: the uses of the others it captured
        still ask (the dtypes found are shared)."""
        kinds = {k: v for k, v in self.kinds.items() if k not in names}
        derived = {k: v for k, v in self.derived.items() if k not in names}
        return LiteralBindings(kinds, self.stored, self.met, derived)

    def decided(self) -> dict[str, str | Conflict]:
        found: dict[str, str | Conflict] = {name: next(iter(met)) for name, met in self.met.items() if len(met) == 1}
        for name, stored in self.stored.items():
            found[name] = next(iter(stored)) if len(stored) == 1 else Conflict(tuple(stored.items()))
        return found


@record(frozen=True, slots=True)
class Mark:
    """Where the checker's memo tables stood before a trial check, to forget what it learnt (`rollback`)."""

    instances: int
    signatures: int
    instance_counts: dict[int, int]
    passes: int
    literals: int
    early_consts: set[tuple[str, str]]


def check(
    program: Program, calls: tuple[tuple[str, tuple[Type, ...]], ...] = (), known: Mapping[int, Signature] | None = None
) -> Typed:
    """Check every module of `program`. Never raises for a user mistake: see `Typed.diagnostics`.

    `calls` names functions of the entry module that the host will call, with their argument types, so
    that functions with unannotated parameters are checked for them as if a DL call made them. `known`
    gives, by id of the `FnDecl`, the signatures of functions with annotated parameters whose bodies were
    checked before and need not be again (lang/incremental.py): their bodies are not checked, and their
    nodes get no types in the result."""
    return Checker(program, known or {}).run(calls)


def check_or_raise(program: Program) -> Typed:
    typed = check(program)
    if typed.errors:
        raise DiagnosticError(typed.diagnostics)
    return typed


class NodeTypes:
    """The types of the nodes a later pass works with: the checker's, and those of the nodes the pass builds,
    which it gives them (`give`) or carries over from the nodes they replace (`carry`). The one way a pass
    that writes new nodes keeps their types; `Typed` itself never changes."""

    def __init__(self, typed: Typed) -> None:
        self.typed = typed
        self.given: dict[int, Type] = {}
        self.body: int | None = None  # the check of a body whose types the pass reads (None: every check's)
        self.steps: tuple[tuple[int, int], ...] = ()  # the steps of loops over tuples it reads (`Typed.step_types`)
        # new nodes made from nodes that steps type differently (and from a loop over a tuple, `For`s), by id:
        # (the new node, the checker's node it stands for), whose type depends on the step it is read in
        self.origins: dict[int, tuple[object, object]] = {}

    def of(self, node: object) -> Type | None:
        """Its type; for a node of a function checked for calls of several types that typed it differently,
        its type in the check `body` (code written for one call: an inlined one), else one that holds for each
        (`Typed.varied`): what is written from it must be right for every call. In the body of a loop over a
        tuple whose items differ in type, its type in the step `steps` names."""
        found = self.given.get(id(node))
        if found is not None:
            return found
        node = self.origin(node)
        if self.steps:
            found = self.typed.type_in_steps(node, self.steps, self.body)
        return found if found is not None else self.typed.type_in_body(node, self.body)

    def give(self, node: object, t: Type) -> None:
        self.given[id(node)] = t

    def origin(self, node: object) -> object:
        """The checker's node that `node`, made by a pass, stands for (`derive`); else `node`."""
        made = self.origins.get(id(node))
        return made[1] if made is not None and made[0] is node else node

    def derive(self, old: object, new: object) -> None:
        """`new` stands for `old`: it takes `old`'s types as it is read, step by step."""
        self.origins[id(new)] = (new, self.origin(old))

    def carry(self, old: object, new: object) -> None:
        """Give the nodes of `new`, a copy of `old` with some nodes replaced, the types of `old`'s."""
        if old is new:
            return
        if id(self.origin(old)) in self.typed.stepped and id(old) not in self.given:
            self.derive(old, new)
        else:
            found = self.of(old)
            if found is not None:
                self.give(new, found)
        if isinstance(old, tuple) and isinstance(new, tuple) and len(old) == len(new):
            for a, b in zip(old, new, strict=True):
                self.carry(a, b)
        elif type(old) is type(new) and hasattr(old, "__dataclass_fields__"):
            for name in old.__dataclass_fields__:
                self.carry(getattr(old, name), getattr(new, name))


class Checker:
    def __init__(self, program: Program, known: Mapping[int, Signature]) -> None:
        self.program = program
        self.known = known
        self.tables = Tables()
        self.modules: dict[str, ModuleInfo] = {}
        self.functions: dict[int, FunctionInfo] = {}
        self.generic_signatures: dict[int, Signature | None] = {}
        self.instances: dict[tuple, Type] = {}
        self.instances_by_function: dict[int, list[tuple]] = {}  # the keys of `instances`, by function
        self.instance_counts: dict[int, int] = {}
        self.in_progress: set[tuple] = set()
        self.reported: set[tuple[str, Span]] = set()
        # Checking silently: a body re-checked for types only (an instantiation whose mistakes were reported
        # where it was first checked) reports nothing.
        self.silent = False
        # Literal dtypes from context: in which checks (of a function body, a const) each literal was seen and
        # coerced, so one used differently by two instantiations is left alone.
        self.check_pass = 0
        # calls being checked, innermost last: the callee's name, the call, the argument types, and each
        # parameter with the node it gets, given or its default (a W0301 in the stdlib names the float literals)
        self.call_sites: list[tuple[str, Span, tuple[Type, ...], tuple[tuple[str, ast.Expr], ...]]] = []
        self.early_consts: set[tuple[str, str]] = set()  # consts reported as used before their definition
        # the latest call of a name or field: should its callee be unknown, or a tensor's method, the help shows
        # DL's spelling of it (lang/habits.py)
        self.calling: ast.Call | None = None
        self.field_of: ast.Field | None = None  # the latest field checked: its target, if unknown, may be a module
        self.pass_count = 0
        self.pass_bodies: dict[int, tuple] = {}  # the body each pass of `checked_body` checked
        self.vague_passes: set[int] = set()  # checks of a function with an unknown argument
        self.literal_passes: dict[int, set[int]] = {}
        self.coerced_passes: dict[int, dict[str, set[int]]] = {}
        # Literals' bindings (`let s = 0.0`): the body being checked to find their dtypes, if any; the dtypes
        # found, by function, argument types and captured names; and, while such a trial check runs, the
        # instances it made and literals it saw, forgotten after it (`rollback`).
        self.literals: LiteralBindings | None = None
        self.literal_dtypes: dict[tuple, dict[str, str | Conflict]] = {}
        self.literal_lets_of: dict[int, dict[str, str]] = {}
        self.dimension_sources_of: dict[int, dict[str, DimSource]] = {}
        self.trials = 0
        self.recursed: set[tuple] = set()
        # The body being checked, for the argument types of one call (`checked_body`), numbered in the order
        # first seen; the first such check that gave each node a definite type, with that type; and for a node
        # that checks of other bodies typed too, each one's type (`varied_types`)
        self.body_now: tuple | None = None
        self.body_numbers: dict[tuple | None, int] = {}
        self.first_typed: dict[int, tuple[int, Type]] = {}
        self.typed_by_body: dict[int, dict[int, Type]] = {}
        # the steps of loops over tuples being checked, outermost first (see `Typed.step_types`): (id of the
        # For, number of the step); and the types of the nodes checked in them, by steps and body (not numbered)
        self.stepping: list[tuple[int, int]] = []
        self.step_types: dict[tuple, dict[tuple | None, dict[int, Type]]] = {}
        self.steps_of: dict[tuple, dict[tuple | None, tuple[int, ...]]] = {}
        self.step_coercions: dict[tuple, dict[tuple | None, dict[int, str]]] = {}
        self.step_calls: dict[tuple, tuple | None] = {}  # (body, steps, id of a call) -> the callee's body
        # id of an unsuffixed float given to, or left as the default of, a parameter without annotation -> (it,
        # the function, the parameter, the spans of the calls by the dtype each decided): `settle_weak_arguments`
        self.weak_decisions: dict[int, tuple[ast.Expr, str, ast.Param, dict[str, list[Span]]]] = {}
        # the type each rebinding keeps in each body, and whether its value was proven to fit (`keep_type`)
        self.kept_types: dict[int, dict[int, tuple[Type, bool, Span]]] = {}
        # (the body being checked, id of a call in it) -> the body of the callee that the call checks
        self.calls_made: dict[tuple, tuple | int] = {}
        # (the body being checked, id of a `grad(f)` call, id of a call of its gradient in it) -> the body of
        # `f` it checks; and the body the latest `instantiate` checked, or found checked
        self.gradient_calls: dict[tuple, tuple] = {}
        self.last_instance: tuple | None = None
        self.instance_log: list[tuple] = []
        self.signature_log: list[int] = []
        self.literal_log: list[int] = []

    # -------------------------------------------------------------- driver
    def run(self, calls: tuple[tuple[str, tuple[Type, ...]], ...] = ()) -> Typed:
        order = self.program.in_dependency_order()
        for path in order:
            self.declare_module(path)
        for path in order:
            self.check_module(path)
        for path in reversed(order):  # the entry's first: its calls check imported functions for their types
            self.check_uncalled(path)
        self.check_command_line()
        for path in order:
            self.collect_signatures(path)
        entry = self.modules.get(self.program.entry)
        for function_name, arg_types in calls:
            decl = entry.functions.get(function_name) if entry is not None else None
            if decl is not None and len(decl.params) == len(arg_types):
                self.apply_function(FunctionRef(function_name, id(decl)), list(arg_types), decl.name_span)
        self.settle_coercions()
        self.settle_weak_arguments()
        for diagnostic in out_of_range(list(self.program.modules.values()), self.tables.coercions):
            self.report(diagnostic)
        self.tables.functions = {key: (info.decl, info.module.path) for key, info in self.functions.items()}
        self.tables.environments = {
            key: MappingProxyType(info.environment) for key, info in self.functions.items() if info.environment
        }
        self.tables.diagnostics.sort(
            key=lambda d: (d.span.path != self.program.entry, d.span.path, d.span.line, d.span.column)
        )
        self.varied_types()
        self.rebinding_checks()
        return self.tables.frozen(self.program)

    def report(self, diagnostic: Diagnostic) -> None:
        if self.silent:
            return
        if self.call_sites and depends_on_types(diagnostic.code):  # in a function checked for one call's types
            moved = self.in_call(diagnostic)
            if moved.span != diagnostic.span and in_stdlib(diagnostic.span.path):  # one per stdlib call
                once = ("call", moved.span, diagnostic.severity)  # (a warning there hides no error)
                if once in self.reported:
                    return
                self.reported.add(once)
            diagnostic = moved
        key = (diagnostic.code, diagnostic.span)
        if key in self.reported:
            return
        self.reported.add(key)
        self.tables.diagnostics.append(diagnostic)

    def in_call(self, diagnostic: Diagnostic) -> Diagnostic:
        """A mistake found while checking a function for the argument types of a call. In the module of the
        call, it is shown where it is, with a note naming the call; in another module (the stdlib, an import),
        whose code the caller did not write, it is reported at the call that reached it from outside, pointing
        into the callee (a secondary label there, and a note with its file:line:col)."""
        outside = next(
            (
                site
                for site in reversed(self.call_sites)
                if site[1].path != diagnostic.span.path and not in_stdlib(site[1].path)
            ),
            None,
        )
        if outside is None:
            name, call, args, _ = self.call_sites[-1]
            note = f"`{name}` is checked with the argument types of the call at {call}: ({shown_types(args)})"
            return replace(diagnostic, notes=(*diagnostic.notes, note))
        name, call, args, arguments = outside
        if diagnostic.code == "W0301":  # f64 data meets f32 in the library: an f32 value the call gives it
            # (its unsuffixed floats, given or defaults, take the dtype they meet: they are not the cause)
            given = [
                f"`{param}={print_expr(node)}`"
                for (param, node), t in zip(arguments, args, strict=False)
                if isinstance(t, TensorType) and t.dtype == "f32" and not t.weak and node is not None
            ]
            fix = (
                f"help: `{name}` is given f32 values, {', '.join(given)}: give them in f64 "
                "(`float(x, dtype=f64)`, or a literal `0.1f64`)"
                if given
                else f"help: give `{name}` f64 values where it computes with f64 data"
            )
            diagnostic = replace(diagnostic, notes=(fix,))
        inside = Label(diagnostic.span, diagnostic.label or diagnostic.message)
        innermost = self.call_sites[-1][0]
        where = f"in `{innermost}` at {diagnostic.span}" if innermost != name else f"at {diagnostic.span}"
        note = f"`{name}` is checked with the argument types of this call, and goes wrong {where}"
        return replace(
            diagnostic,
            span=call,
            label=f"`{name}` is given ({shown_types(args)})",
            secondary=(inside, *diagnostic.secondary),
            notes=(note, *diagnostic.notes),
        )

    def declare_module(self, path: str) -> None:
        info = ModuleInfo(path)
        self.modules[path] = info
        info.imports = dict(self.program.imports.get(path, []))
        module = self.program.modules[path]
        for decl in module.decls:
            match decl:
                case ast.FnDecl(name=name):
                    self.declare_unique(info, name, decl.name_span)
                    info.functions[name] = decl
                    self.functions[id(decl)] = FunctionInfo(decl, info, name)
                case ast.Const(name=name):
                    info.const_decls[name] = decl
                case ast.StructDecl(name=name):
                    self.declare_unique(info, name, decl.name_span)
                    info.struct_decls[name] = decl
                    info.structs[name] = StructType(name, path, ())
        self.resolve_structs(info, [decl for decl in module.decls if isinstance(decl, ast.StructDecl)])

    def resolve_structs(self, info: ModuleInfo, decls: list[ast.StructDecl]) -> None:
        """Each struct's fields, the structs of this module they name resolved first: declarations come in
        any order. A struct that contains itself keeps the placeholder where it names itself (E0212)."""
        by_name = {decl.name: decl for decl in decls}
        started: set[int] = set()

        def resolve(decl: ast.StructDecl) -> None:
            if id(decl) in started:
                return
            started.add(id(decl))
            for node in ast.walk(tuple(each.type for each in decl.fields)):
                if isinstance(node, ast.NamedType) and node.module is None and node.name in by_name:
                    resolve(by_name[node.name])
                elif isinstance(node, ast.TensorTypeExpr) and node.module is None and node.dtype in by_name:
                    resolve(by_name[node.dtype])
            self.resolve_struct(info, decl)

        for decl in decls:
            resolve(decl)

    def declare_unique(self, info: ModuleInfo, name: str, span: Span) -> None:
        if name in info.functions or name in info.struct_decls:
            self.report(error("E0211", f"`{name}` is declared twice in this module", span))

    def resolve_struct(self, info: ModuleInfo, decl: ast.StructDecl) -> None:
        """A struct's fields; it is generic over the sizes it declares (`struct Linear[IN, OUT]`), or else over
        the names its fields use that are not consts, in the order they first appear (one size each per value)."""
        sizes = StructSizes(decl.name, [size.name for size in decl.sizes], declared=bool(decl.sizes))
        for position, size in enumerate(decl.sizes):
            if size.name in sizes.names[:position]:
                self.report(error("E0211", f"size `{size.name}` is declared twice", size.span))
        fields = []
        seen = set()
        for field_decl in decl.fields:
            if field_decl.name in seen:
                self.report(error("E0211", f"field `{field_decl.name}` is declared twice", field_decl.span))
            seen.add(field_decl.name)
            fields.append((field_decl.name, self.resolve_type(field_decl.type, info, struct_field=sizes)))
        params = tuple(dict.fromkeys(sizes.names))
        template = tuple(fields)
        struct = StructType(decl.name, info.path, template, tuple(DimVar(p) for p in params), params, template)
        info.structs[decl.name] = struct

    def check_module(self, path: str) -> None:
        info = self.modules[path]
        module = self.program.modules[path]
        for decl in module.decls:
            if isinstance(decl, ast.Const):
                self.check_const(info, decl)
        for decl in module.decls:
            struct = info.structs.get(decl.name) if isinstance(decl, ast.StructDecl) else None
            if struct is not None and contains_struct(struct, info.structs):
                self.report(error("E0212", f"struct `{decl.name}` contains itself", decl.name_span))
        functions = [decl for decl in module.decls if isinstance(decl, ast.FnDecl)]
        for decl in functions:
            if self.functions[id(decl)].generic:
                self.generic_signature(self.functions[id(decl)])

    def check_uncalled(self, path: str) -> None:
        """Check each function with unannotated parameters that no call has checked, once with unknown
        parameters, so that its own mistakes are still found (the entry's `main` takes strings)."""
        for decl in self.program.modules[path].decls:
            function = self.functions.get(id(decl)) if isinstance(decl, ast.FnDecl) else None
            if function is None or function.generic or id(decl) in self.instances_by_function:
                continue
            command_line = decl.name == "main" and path == self.program.entry
            params = tuple(
                STR if command_line and p.annotation is None else self.annotation_or_any(p, function.module)
                for p in decl.params
            )
            self.instantiate(function, params)

    def check_command_line(self) -> None:
        """The entry's `main` is given the command-line arguments, as strings: a parameter annotated with
        another type, or with a default of another type, would hold a string where the program expects that
        (`fn main(epochs: i64)`, `fn main(lr = 0.1)`); each is reported where it is written."""
        entry = self.modules.get(self.program.entry)
        decl = entry.functions.get("main") if entry is not None else None
        if decl is None:
            return
        for param in decl.params:
            declared = self.annotation_or_any(param, entry)
            if param.annotation is not None and not isinstance(declared, AnyType) and declared != STR:
                self.report(command_line_error(param, f"annotated {declared}", param.annotation.span, declared))
            if param.default is None:
                continue
            context = Context(entry, decl.name, None, frozenset())
            given = self.expression(param.default, Scope(), context)
            if not isinstance(given, AnyType) and given != STR:
                self.report(command_line_error(param, f"given a default of type {given}", param.default.span, given))

    def collect_signatures(self, path: str) -> None:
        """The module's signatures, once every function has been checked: a function with annotated
        parameters has one; one without has one for each set of argument types it was checked with."""
        signatures = self.tables.signatures.setdefault(path, [])
        for decl in self.program.modules[path].decls:
            function = self.functions.get(id(decl)) if isinstance(decl, ast.FnDecl) else None
            if function is None:
                continue
            if function.generic:
                signature = self.generic_signature(function)
                signatures.extend([signature] if signature is not None else [])
            else:
                signatures.extend(self.instance_signatures(decl))

    def instance_signatures(self, decl: ast.FnDecl) -> list[Signature]:
        """A signature for each set of argument types a call checked `decl` for; an unsuffixed float argument
        with the dtype its uses gave it (`check_body`), which may make it one of the others."""
        found: list[Signature] = []
        for key, args, captured, values, weakness in self.instances_by_function.get(id(decl), []):
            decided = self.literal_dtypes.get((key, args, weakness, captured), NOTHING)
            params = tuple(
                (p.name, TensorType(dtype) if weak and isinstance(dtype := decided.get(p.name, "f32"), str) else t)
                for p, t, weak in zip(decl.params, args, weakness, strict=True)
            )
            signature = Signature(decl.name, params, self.instances[(key, args, captured, values, weakness)])
            if signature not in found:
                found.append(signature)
        return found

    def annotation_or_any(self, param: ast.Param, info: ModuleInfo) -> Type:
        return self.resolve_type(param.annotation, info) if param.annotation is not None else ANY

    def check_const(self, info: ModuleInfo, decl: ast.Const) -> None:
        if decl.name in info.consts:  # already checked, because a struct field used it as a dimension
            return
        context = Context(info, decl.name, None, frozenset())
        value = self.expression(decl.value, Scope(), context)
        if decl.annotation is not None:
            declared = self.resolve_type(decl.annotation, info)
            self.expect_fits(declared, value, decl.value.span, f"`{decl.name}` is declared {declared}", node=decl.value)
            value = (
                declared
                if not isinstance(value, TensorType)
                else TensorType(getattr(declared, "dtype", value.dtype), value.dims, False, value.value)
            )
        info.consts[decl.name] = strong_keep_value(value)

    # -------------------------------------------------------------- types in annotations
    def resolve_type(self, node: ast.TypeExpr, info: ModuleInfo, struct_field: bool = False) -> Type:
        match node:
            case ast.NamedType(name=name, module=None):
                if name in DTYPES:
                    return TensorType(name)
                if name == "str":
                    return STR
                if name in info.structs:
                    return any_sizes(info.structs[name])
                return self.unknown_type(name, node.span, info.structs)
            case ast.NamedType(name=name, module=module):
                struct = self.module_struct(module, name, node.span, info)
                return any_sizes(struct) if struct is not None else ANY
            case ast.TensorTypeExpr(dtype=name, module=module) if module is not None:  # `gpt.GPT[2, 64]`
                struct = self.module_struct(module, name, node.span, info)
                return self.sized_struct(struct, node, info, struct_field) if struct is not None else ANY
            case ast.TensorTypeExpr(dtype=dtype, dims=dims) if dtype in info.structs:
                return self.sized_struct(info.structs[dtype], node, info, struct_field)
            case ast.TensorTypeExpr(dtype=dtype, dims=dims):
                if dtype not in DTYPES:
                    self.report(
                        error(
                            "E0318",
                            f"unknown element type `{dtype}`",
                            node.span,
                            notes=("help: tensor element types are f32, f64, i32, i64 and bool",),
                        )
                    )
                    return ANY
                return TensorType(dtype, tuple(self.resolve_dim(d, info, struct_field) for d in dims))
            case ast.TupleTypeExpr(items=items):
                return TupleType(tuple(self.resolve_type(item, info, struct_field) for item in items))
            case ast.FunctionTypeExpr(params=params, result=result):
                return FunctionType(tuple(self.resolve_type(p, info) for p in params), self.resolve_type(result, info))
        raise AssertionError(node)

    def module_struct(self, module: str, name: str, span: Span, info: ModuleInfo) -> StructType | None:
        """Struct `name` of the module imported as `module` (`layers.Linear`); None, reported (E0318), where
        there is no such module or struct."""
        target = info.imports.get(module)
        if target is None:
            self.report(error("E0318", f"unknown module `{module}` in a type", span))
            return None
        structs = self.modules[target].structs
        if name in structs:
            return structs[name]
        self.unknown_type(f"{module}.{name}", span, [f"{module}.{struct}" for struct in structs])
        return None

    def sized_struct(self, struct: StructType, node: ast.TensorTypeExpr, info: ModuleInfo, struct_field) -> Type:
        """`Linear[5, 2]`: a generic struct of these sizes."""
        sizes = tuple(self.resolve_dim(d, info, struct_field) for d in node.dims)
        if len(sizes) != len(struct.params):
            expected = f"{len(struct.params)} size{'s' * (len(struct.params) != 1)}" if struct.params else "no sizes"
            declared = f"`{struct.name}[{', '.join(struct.params)}]`" if struct.params else f"`{struct.name}`"
            self.report(
                error(
                    "E0318",
                    f"struct `{struct.name}` takes {expected}, found {len(sizes)}",
                    node.span,
                    notes=(f"`{struct.name}` is declared as {declared}",),
                )
            )
            return ANY
        return struct.with_sizes(sizes)

    def unknown_type(self, name: str, span: Span, candidates) -> Type:
        suggestion = closest(name, [*DTYPES, "str", *candidates])
        notes = (f"help: did you mean `{suggestion}`?",) if suggestion else ()
        notes = (habits.TYPES[name],) if name in habits.TYPES else notes
        self.report(error("E0318", f"unknown type `{name}`", span, notes=notes))
        return ANY

    def resolve_dim(self, dim: ast.Dim, info: ModuleInfo, struct_field: bool) -> Dim:
        if isinstance(dim, ast.DimLiteral):
            return dim.value
        if isinstance(dim, ast.DimBinary):
            lhs = self.resolve_dim(dim.lhs, info, struct_field)
            return dim_arithmetic(dim.op, lhs, self.resolve_dim(dim.rhs, info, struct_field))
        if dim.name == "_":
            return UNKNOWN
        if struct_field and dim.name in info.const_decls:  # fields are resolved before the consts' own turn
            self.check_const(info, info.const_decls[dim.name])
        const = info.consts.get(dim.name)
        if const is not None:
            if isinstance(const, TensorType) and isinstance(const.value, int):
                return const.value
            self.report(
                error("E0318", f"const `{dim.name}` is not a known integer, so it cannot be a dimension", dim.span)
            )
            return UNKNOWN
        if isinstance(struct_field, StructSizes):
            return self.struct_size(dim, info, struct_field)
        return DimVar(dim.name)

    def struct_size(self, dim: ast.DimName, info: ModuleInfo, sizes: StructSizes) -> Dim:
        """A name in a struct field's type: one of the sizes the struct declares, or, where it declares none, a
        size it is generic over (unless it looks like a misspelt const)."""
        if dim.name in sizes.names:
            return DimVar(dim.name)
        if sizes.declared and dim.name in sizes.undeclared:
            return UNKNOWN
        if sizes.declared:
            sizes.undeclared.add(dim.name)
            self.report(
                error(
                    "E0318",
                    f"unknown dimension `{dim.name}` in a field of `{sizes.struct}`",
                    dim.span,
                    notes=(
                        f"help: declare it among the sizes `{sizes.struct}` is generic over: "
                        f"`struct {sizes.struct}[{', '.join([*sizes.names, dim.name])}]`",
                    ),
                )
            )
            return UNKNOWN
        if dim.name not in info.const_suggestions:
            info.const_suggestions[dim.name] = closest(dim.name, info.const_decls)
        suggestion = info.const_suggestions[dim.name]
        if suggestion is not None:
            self.report(
                error(
                    "E0318",
                    f"unknown dimension `{dim.name}` in a struct field",
                    dim.span,
                    notes=(f"help: did you mean the const `{suggestion}`?",),
                )
            )
            return UNKNOWN
        sizes.names.append(dim.name)
        return DimVar(dim.name)

    # -------------------------------------------------------------- functions
    def generic_signature(self, function: FunctionInfo) -> Signature | None:
        key = id(function.decl)
        if key in self.generic_signatures:
            return self.generic_signatures[key]
        if key in self.known:
            self.generic_signatures[key] = self.known[key]
            return self.known[key]
        self.generic_signatures[key] = None  # a recursive call meanwhile sees no signature yet
        if self.trials:  # its body's literals are forgotten after a trial check: so is the signature
            self.signature_log.append(key)
        decl = function.decl
        params = tuple((p.name, self.resolve_type(p.annotation, function.module)) for p in decl.params)
        declared = self.resolve_type(decl.result, function.module) if decl.result is not None else None
        if declared is not None:
            self.generic_signatures[key] = Signature(function.name, params, declared)
        # checked once for all calls: its mistakes are its own, reported even from inside a silent check
        silent, call_sites, self.silent, self.call_sites = self.silent, self.call_sites, False, []
        try:
            result = self.check_body(function, [t for _, t in params], declared)
        finally:
            self.silent, self.call_sites = silent, call_sites
        signature = Signature(function.name, params, declared or result)
        self.generic_signatures[key] = signature
        return signature

    def instantiate(self, function: FunctionInfo, args: tuple[Type, ...]) -> Type:
        """Check a function with unannotated parameters for these argument types (once per distinct types)."""
        key = id(function.decl)
        count = self.instance_counts.get(key, 0)
        if count >= MAX_INSTANCES:
            args = tuple(ANY for _ in args)
        # a lambda is checked again when the names it captured have other types (another call of its maker)
        captured = captured_key(function)
        # static integer values (`kaiming(64, 128)`) decide result shapes, though types compare without them
        values = tuple(static_value_of(a) for a in args)
        instance = (key, args, captured, values, tuple(map(weak_float, args)))
        checked = body_key(function.decl, list(args), captured)
        if instance in self.instances:
            self.last_instance = checked
            return self.instances[instance]
        if instance in self.in_progress:
            self.recursed.add(instance)
            self.last_instance = checked
            return ANY  # recursion: the result is what the non-recursive returns give
        self.in_progress.add(instance)
        self.instance_counts[key] = count + 1
        declared = (
            self.resolve_type(function.decl.result, function.module) if function.decl.result is not None else None
        )
        if declared is not None and dim_names(declared):  # `-> f32[B, 3]` with `x: f32[B, 3]` given f32[4, 3]
            bindings: dict[str, tuple[Dim, Span]] = {}
            for param, arg in zip(function.decl.params, args, strict=False):
                if param.annotation is not None:
                    unify(self.resolve_type(param.annotation, function.module), arg, bindings, param.span)
            declared = substitute(declared, {name: dim for name, (dim, _) in bindings.items()})
        try:
            result = self.check_body(function, list(args), declared)
            if declared is None and result is not ANY and instance in self.recursed:
                self.remember_instance(instance, result)
                result = self.check_body(function, list(args), declared, report=False)
        finally:
            self.in_progress.discard(instance)
        self.remember_instance(instance, declared or result)
        self.last_instance = checked
        return declared or result

    def function_of(self, ref: FunctionRef) -> FunctionInfo | None:
        """The function a call of `ref` checks: its closure's (what it captured), else its declaration's; None for a
        closure this program never makes."""
        return self.functions.get(ref.key if ref.closure is None else ref.closure)

    def remember_instance(self, instance: tuple, result: Type) -> None:
        if instance not in self.instances:
            self.instances_by_function.setdefault(instance[0], []).append(instance)
            if self.trials:
                self.instance_log.append(instance)
        self.instances[instance] = result

    def check_body(
        self, function: FunctionInfo, params: list[Type], declared: Type | None, report: bool = True
    ) -> Type:
        """Check a body for these parameter types; first, if it binds names to unsuffixed literals, find the
        dtypes their uses ask for (checked once per function and argument types)."""
        weak = {p.name: "f32" for p, t in zip(function.decl.params, params, strict=False) if weak_float(t)}
        kinds = {**self.literal_lets(function.decl), **weak}
        if not kinds:
            return self.checked_body(function, params, declared, report, {})
        key = self.literal_key(function, params)
        if key not in self.literal_dtypes:
            self.literal_dtypes[key] = self.literal_uses(function, params, declared, kinds)
        decided = self.literal_dtypes[key]
        # a parameter given an unsuffixed float takes the dtype its uses ask for, as `let p = 0.9` does
        params = [
            TensorType(found if isinstance(found := decided.get(p.name), str) else "f32") if p.name in weak else t
            for p, t in zip(function.decl.params, params, strict=False)
        ]
        return self.checked_body(function, params, declared, report, decided)

    def literal_key(self, function: FunctionInfo, params: list[Type]) -> tuple:
        """What the dtypes of a body's literal bindings depend on (`literal_dtypes`)."""
        return (id(function.decl), tuple(params), tuple(map(weak_float, params)), captured_key(function))

    def weak_arguments_decided(
        self, function: FunctionInfo, params: list[Type], nodes: list[ast.Expr], span: Span
    ) -> None:
        """The unsuffixed floats a call gives parameters without annotations (`leaky_relu(x, 0.01)`, or a default
        left out) take the dtype the callee's uses asked for (`check_body`): f64 beside f64 data, as a literal
        written there would. A name that holds one, in a trial check, asks for it in turn. A default is one node
        for every call: what each decided is kept, and settled once all are known (`settle_weak_arguments`)."""
        decided = self.literal_dtypes.get(self.literal_key(function, params), NOTHING)
        for param, value, node in zip(function.decl.params, params, nodes, strict=False):
            if not weak_float(value):
                continue
            found = decided.get(param.name)
            dtype = found if isinstance(found, str) else "f32"
            if not self.trials and self.check_pass not in self.vague_passes:  # (a check of unknown types: none)
                entry = self.weak_decisions.setdefault(id(node), (node, function.name, param, {}))
                entry[3].setdefault(dtype, []).append(span)
            if node is not param.default:
                self.coerce(TensorType(dtype), value, node)
            elif self.literals is not None:
                self.literals.meets(node, dtype)

    def settle_weak_arguments(self) -> None:
        """A default left out takes the dtype its calls decided where they all decided one; where some calls
        decided f64 and others f32, it stays f32 (one value serves them all), and each f64 call is warned (W0301),
        as is a literal given in a function checked for f64 and f32 calls that its f64 checks round to f32."""
        for node, name, param, by_dtype in self.weak_decisions.values():
            mixed = len(by_dtype) > 1 and "f64" in by_dtype
            leaves = literal_leaves(node)
            if node is param.default:
                if set(by_dtype) == {"f64"}:
                    self.tables.coercions.update((id(leaf), "f64") for leaf in leaves)
                for span in by_dtype.get("f64", []) if mixed else []:
                    message = (
                        f"`{name}`'s default `{param.name}={print_expr(node)}` is an f32 in this call: other calls "
                        f"of `{name}` take it as an f32, and a default is one value"
                    )
                    help = f"help: give it in f64 here: `{param.name}={print_expr(in_f64(node))}`"
                    self.report(warning("W0301", message, span, notes=(help,)))
            elif "f64" in by_dtype and not all(id(leaf) in self.tables.coercions for leaf in leaves):
                message = (
                    f"`{print_expr(node)}` is an f32 here: `{name}` takes it as an f64 for some checks of this "
                    "function and as an f32 for others, and a literal is one value"
                )
                self.report(warning("W0301", message, node.span, notes=(f"help: write `{print_expr(in_f64(node))}`",)))

    def literal_lets(self, decl: ast.FnDecl | ast.Lambda) -> dict[str, str]:
        """The names `decl`'s body binds with an unannotated `let` to an unsuffixed literal, with its dtype
        (an integer literal's only where it is rebound: nothing else changes its dtype)."""
        found = self.literal_lets_of.get(id(decl))
        if found is None:
            rebound = ast.assigned_names(decl.body)
            found = {
                node.pattern.name: kind
                for node in ast.walk_scope(decl.body)
                if isinstance(node, ast.Let) and node.annotation is None and isinstance(node.pattern, ast.NamePattern)
                for kind in [literal_kind(node.value)]
                if kind == "f32" or (kind == "i64" and node.pattern.name in rebound)
            }
            self.literal_lets_of[id(decl)] = found
        return found

    def literal_uses(
        self, function: FunctionInfo, params: list[Type], declared: Type | None, kinds: dict[str, str]
    ) -> dict[str, str | Conflict]:
        """A trial check of the body, silent, with the literals' bindings kept weak: what dtypes their uses ask
        for. What the trial taught the checker (instances of the functions it calls, literals it saw) is
        forgotten, since the body's types change once the bindings have their dtypes."""
        found = LiteralBindings(dict(kinds))
        mark = self.mark()
        outer = self.literals
        self.literals = found
        self.trials += 1
        try:
            self.checked_body(function, params, declared, False, None)
        finally:
            self.trials -= 1
            self.literals = outer
            self.rollback(mark)
        return found.decided()

    def mark(self) -> Mark:
        return Mark(
            len(self.instance_log),
            len(self.signature_log),
            dict(self.instance_counts),
            self.pass_count,
            len(self.literal_log),
            set(self.early_consts),
        )

    def rollback(self, mark: Mark) -> None:
        for instance in self.instance_log[mark.instances :]:
            self.instances.pop(instance, None)
            listed = self.instances_by_function.get(instance[0], [])
            if instance in listed:
                listed.remove(instance)
            if not listed:
                self.instances_by_function.pop(instance[0], None)
        del self.instance_log[mark.instances :]
        for key in self.signature_log[mark.signatures :]:
            self.generic_signatures.pop(key, None)
        del self.signature_log[mark.signatures :]
        self.instance_counts = mark.instance_counts
        for key in self.literal_log[mark.literals :]:
            seen = self.literal_passes.get(key, set())
            seen -= {p for p in seen if p > mark.passes}
            for passes in self.coerced_passes.get(key, {}).values():
                passes -= {p for p in passes if p > mark.passes}
        del self.literal_log[mark.literals :]
        self.early_consts = mark.early_consts

    def checked_body(
        self,
        function: FunctionInfo,
        params: list[Type],
        declared: Type | None,
        report: bool,
        literal_dtypes: Mapping[str, str | Conflict] | None,
    ) -> Type:
        decl = function.decl
        outer_pass = self.check_pass
        self.pass_count += 1
        self.check_pass = self.pass_count
        outer_body, outer_steps = self.body_now, self.stepping
        captured = captured_key(function)
        self.body_now = body_key(decl, params, captured)
        self.pass_bodies[self.check_pass] = self.body_now
        self.stepping = []  # a loop's steps type the body they are in, not the functions it calls
        if any(isinstance(param, AnyType) for param in params):
            self.vague_passes.add(self.check_pass)
        self.check_unique_params(decl)
        scope = Scope()
        if function.environment:
            scope.names.update(function.environment)
        scope = Scope(scope)
        for param, param_type in zip(decl.params, params, strict=True):
            scope.names[param.name] = param_type
            self.record_type(param, param_type)
        context = Context(
            function.module,
            function.name,
            declared,
            frozenset(ast.assigned_names(decl.body)),
            decl=decl,
            dim_names=None if function.environment is not None else self.signature_dims(decl, function.module),
            literal_dtypes=literal_dtypes,
            dims=function.dims if function.environment is not None else self.dimension_values(decl, function, params),
        )
        silent = self.silent
        self.silent = silent or not report
        literals = self.literals
        if literal_dtypes is not None:  # a body checked for its types: its own literals are not being watched
            self.literals = None
            if literals is not None and function.environment is not None:  # the names a closure captured are
                self.literals = literals.hiding(ast.bound_names(decl))
        try:
            if isinstance(decl.body, ast.Block):
                self.block(decl.body, scope, context)
                self.check_falls_off_end(decl, context, declared)
                return self.result_type(context, declared, decl)
            value = self.expression(decl.body, scope, context)
            if declared is not None:
                self.expect_fits(declared, value, decl.body.span, "the declared result", node=decl.body)
                return declared
            return strong(value)
        finally:
            self.silent = silent
            self.literals = literals
            self.check_pass = outer_pass
            self.body_now, self.stepping = outer_body, outer_steps

    def check_unique_params(self, decl: ast.FnDecl | ast.Lambda) -> None:
        seen: set[str] = set()
        for param in decl.params:
            if param.name in seen:
                self.report(error("E0211", f"parameter `{param.name}` is declared twice", param.span))
            seen.add(param.name)

    def signature_dims(self, decl: ast.FnDecl | ast.Lambda, info: ModuleInfo) -> frozenset[str]:
        names: set[str] = set()
        annotations = [p.annotation for p in decl.params if p.annotation is not None]
        result = getattr(decl, "result", None)
        for annotation in [*annotations, *([result] if result is not None else [])]:
            names |= dim_names(self.resolve_type(annotation, info))
        return frozenset(names)

    def dimension_values(
        self, decl: ast.FnDecl | ast.Lambda, function: FunctionInfo, params: list[Type]
    ) -> dict[str, DimValue]:
        """The dimension names of a declared function's parameter types, as values: each the size this check
        gives it (the name itself in a generic check, a number in a check for one call's types)."""
        sources = self.dimension_sources_of.get(id(decl))
        if sources is None:
            declared = [
                self.resolve_type(p.annotation, function.module) if p.annotation is not None else ANY
                for p in decl.params
            ]
            sources = dimension_sources(declared)
            self.dimension_sources_of[id(decl)] = sources
        values = {}
        for name, source in sources.items():
            size = dimension_at(params[source.param], source)
            value = TensorType("i64", (), False, None if isinstance(size, Unknown) else size)
            values[name] = DimValue(value, id(decl), source)
        return values

    def check_falls_off_end(self, decl: ast.FnDecl | ast.Lambda, context: Context, declared: Type | None) -> None:
        """A function that returns a value must return one on every path (the end gives `()`)."""
        # (an annotation whose type is unknown, reported where it is, says nothing about the end)
        gives_value = declared is not None and declared != UNIT and not isinstance(declared, AnyType)
        if not gives_value:
            gives_value = any(t != UNIT for t, _ in context.returns)
        if not gives_value or always_returns(decl.body):
            return
        what = f"{declared}" if declared is not None else "a value"
        self.report(
            error(
                "E0322",
                f"`{context.name}` returns {what}, but can reach the end of its body without `return`",
                decl.name_span if isinstance(decl, ast.FnDecl) else decl.span,
                notes=("help: add a `return` after the last statement, or an `else` branch that returns",),
            )
        )

    def result_type(self, context: Context, declared: Type | None, decl) -> Type:
        if declared is not None:
            return declared
        found = [(t, span) for t, span in context.returns if not isinstance(t, AnyType)]
        if not found:
            return ANY if context.returns else UNIT
        # a literal returned beside typed values takes their dtype (`return 1.0` in an f64 function)
        found.sort(key=lambda item: isinstance(item[0], TensorType) and item[0].weak)
        first, first_span = found[0]
        joined = strong(first)
        for other, span in found[1:]:
            if not fits(first, other) and not fits(other, first):
                self.report(
                    error(
                        "E0315",
                        f"`{context.name}` returns {other} here but {first} at line {first_span.line}",
                        span,
                        str(other),
                        notes=("help: annotate the result type to say which is meant",),
                    )
                )
                return ANY
            joined = join_types(joined, strong(other))
        if len(found) < len(context.returns):  # a recursive call's result, not known yet: any size
            joined = join_types(joined, forget_dims(joined))
        return joined

    # -------------------------------------------------------------- statements
    def block(self, block: ast.Block, scope: Scope, context: Context) -> None:
        for stmt in block.body:
            self.statement(stmt, scope, context)

    def statement(self, stmt: ast.Stmt, scope: Scope, context: Context) -> None:
        match stmt:
            case ast.Let():
                self.let(stmt, scope, context)
            case ast.Assign():
                self.assign(stmt, scope, context)
            case ast.ExprStmt(expr=expr):
                value = self.expression(expr, scope, context)
                callee = self.tables.types.get(id(expr.func)) if isinstance(expr, ast.Call) else None
                if isinstance(callee, FunctionRef):
                    self.check_used(expr, value, scope)
                elif (callee is None or isinstance(callee, PrimitiveRef)) and definite(value) and value != UNIT:
                    self.dropped(stmt, value, context)
            case ast.If():
                self.if_statement(stmt, scope, context)
            case ast.While(cond=cond, body=body):
                self.condition(cond, scope, context, "while")
                context.loops += 1
                self.block(body, Scope(scope), context)
                context.loops -= 1
            case ast.For():
                self.for_statement(stmt, scope, context)
            case ast.Return(value=value):
                self.return_statement(value, stmt.span, scope, context)
            case ast.Break() | ast.Continue():
                if not context.loops:
                    word = "break" if isinstance(stmt, ast.Break) else "continue"
                    self.report(error("E0321", f"`{word}` outside of a loop", stmt.span))
            case ast.FnDecl(name=name):
                info = FunctionInfo(stmt, context.module, name, dims=context.dims)
                self.functions[id(stmt)] = info
                reference = FunctionRef(name, id(stmt))
                scope.names[name] = reference
                info.environment = scope.visible()

    def let(self, stmt: ast.Let, scope: Scope, context: Context) -> None:
        value = self.expression(stmt.value, scope, context)
        literal = isinstance(value, TensorType) and value.weak and literal_kind(stmt.value) is not None
        if literal and stmt.annotation is None and isinstance(stmt.pattern, ast.NamePattern):
            if context.literal_dtypes is None:  # a trial check: the binding stays weak, to see what it meets
                name = stmt.pattern.name
                kept = TensorType(value.dtype, value.dims, True) if name in context.rebound else value
                scope.names[name] = kept
                self.record_type(stmt.pattern, strong(kept))
                return
            value = self.literal_binding(stmt, value, context.literal_dtypes.get(stmt.pattern.name))
        elif (
            self.literals is not None
            and weak_float(value)
            and stmt.annotation is None
            and isinstance(stmt.pattern, ast.NamePattern)
            and stmt.pattern.name not in context.rebound
        ):
            self.literals.derived[stmt.pattern.name] = stmt.value  # a trial check: weak, as what computes it
            scope.names[stmt.pattern.name] = value
            self.record_type(stmt.pattern, strong(value))
            return
        if stmt.annotation is not None:
            declared = self.resolve_type(stmt.annotation, context.module)
            unbound = sorted(dim_names(declared) - context.dim_names) if context.dim_names is not None else []
            if unbound:
                where = f"`{context.name}`" if context.decl is not None else "this declaration"
                self.report(
                    error(
                        "E0318",
                        f"unknown dimension `{unbound[0]}`: it is not a dimension of {where}'s parameters",
                        stmt.annotation.span,
                        notes=(
                            "help: dimension names are bound by a function's parameter types; "
                            "write a number, a const, or `_` for a size known only at run time",
                        ),
                    )
                )
                declared = ANY
            written, (declared, unknown) = declared, sizes_of_this_check(declared, context)
            shown = f"{written} ({declared} in this call)" if declared != written else f"{declared}"
            what = (
                f"`{stmt.pattern.name}` is declared {shown}"
                if isinstance(stmt.pattern, ast.NamePattern)
                else f"the pattern is declared {shown}"
            )
            fitting = self.expect_fits(
                declared, value, stmt.value.span, what, annotation=stmt.annotation.span, node=stmt.value
            )
            if fitting and (unknown or not proven(declared, value)):  # (the names, which the run binds per call)
                self.tables.runtime_checks[id(stmt)] = RuntimeCheck(written, stmt.annotation.span)
                if declared != written and context.decl is not None:  # the run reads the names from the annotations
                    self.check_calls(context.decl, context.module)
            value = declared  # what the user meant, also after a mismatch (reported once, here)
        self.bind_pattern(stmt.pattern, value, scope, context)

    def literal_binding(self, stmt: ast.Let, value: TensorType, dtype: str | Conflict | None) -> Type:
        """The type of `let name = 0.0`: the dtype its uses ask for, the literal converted to it."""
        if dtype is None:
            return value
        if isinstance(dtype, Conflict):
            self.report(literal_conflict(stmt, dtype))
            return ANY
        self.coerce(TensorType(dtype), value, stmt.value)
        return TensorType(dtype, value.dims, False, value.value if dtype == value.dtype else None)

    def bind_pattern(self, pattern: ast.Pattern, value: Type, scope: Scope, context: Context) -> None:
        if isinstance(pattern, ast.NamePattern):
            kept = strong_keep_value(value)
            if pattern.name in context.rebound:
                kept = without_values(kept)
            scope.names[pattern.name] = kept
            self.record_type(pattern, kept)
            return
        items = self.destructure(value, len(pattern.items), pattern.span)
        for item, item_type in zip(pattern.items, items, strict=True):
            self.bind_pattern(item, item_type, scope, context)

    def destructure(self, value: Type, count: int, span: Span) -> tuple[Type, ...]:
        if isinstance(value, AnyType):
            return (ANY,) * count
        if not isinstance(value, TupleType):
            self.report(error("E0312", f"cannot destructure {value} into {count} names", span, str(value)))
            return (ANY,) * count
        if len(value.items) != count:
            self.report(
                error("E0312", f"cannot destructure a tuple of {len(value.items)} into {count} names", span, str(value))
            )
            return (ANY,) * count
        return value.items

    def assign(self, stmt: ast.Assign, scope: Scope, context: Context) -> None:
        """A rebinding keeps the target's type: a value whose sizes the checker cannot tell (`_`, data) is
        checked against that type when it runs (a `RuntimeCheck` at the value), as an annotation is."""
        if isinstance(stmt.target, ast.TupleLiteral):
            value = self.expression(stmt.value, scope, context)
            items = self.destructure(value, len(stmt.target.items), stmt.target.span)
            kept = [
                self.store(target, item, stmt.value.span, scope, context)
                for target, item in zip(stmt.target.items, items, strict=True)
            ]
            if any(kept):
                self.keep_type(stmt, TupleType(tuple(ANY if each is None else each for each in kept)), value)
            return
        value = self.expression(stmt.value, scope, context)
        if stmt.op != "=" and not (isinstance(stmt.target, ast.Name) and scope.lookup(stmt.target.id) is None):
            current = self.expression(stmt.target, scope, context)
            if UNIT in (current, value):  # `total += double(x)` of a function with no `return`
                self.no_value_in(
                    stmt.op[:-1], stmt.value if value == UNIT else stmt.target, f"{current} {stmt.op} {value}"
                )
                return
            operand = value
            value = self.binary_type(stmt.op[0], current, value, stmt.span)
            self.coerce_operands(value, ((stmt.value, operand),))  # `s += 0.1 * 0.3` with `s: f64`, as `s = s + ...`
        kept = self.store(stmt.target, value, stmt.value.span, scope, context, stmt.value if stmt.op == "=" else None)
        if kept is not None:
            self.keep_type(stmt, kept, value)

    def keep_type(self, stmt: ast.Assign, kept: Type, value: Type) -> None:
        """Note the type a rebinding keeps in this check of its body, and whether the value is proven to fit
        it (`rebinding_checks` decides, once every body is checked, whether the run checks it)."""
        if self.trials or self.check_pass in self.vague_passes:
            return
        body = self.body_numbers.setdefault(self.body_now, len(self.body_numbers))
        self.kept_types.setdefault(id(stmt), {})[body] = (kept, proven(kept, value), stmt.value.span)

    def rebinding_checks(self) -> None:
        """A `RuntimeCheck` for each rebinding that some check of its body could not prove, where every check
        of that body found the same type kept: code written once for all calls checks one type (a function
        called with f32 and with f64 keeps another dtype in each, and is left unchecked)."""
        for stmt, by_body in self.kept_types.items():
            found = list(by_body.values())
            if any(kept != found[0][0] for kept, _, _ in found) or all(fits for _, fits, _ in found):
                continue
            kept, _, span = found[0]
            self.tables.runtime_checks[stmt] = RuntimeCheck(kept, span)

    def store(
        self, target: ast.Expr, value: Type, span: Span, scope: Scope, context: Context, node: ast.Expr | None = None
    ) -> Type | None:
        """Check rebinding `target` to `value`; a weak literal `node` (`acc = 3`) takes the target's dtype.
        The target's type where only the run can tell whether the value fits it, else None."""
        if isinstance(target, ast.Name) and scope.lookup(target.id) is None:
            self.store_undeclared(target, value, scope, context)
            return None
        current = self.expression(target, scope, context)
        if self.literal_rebound(target, current, value, span, node):
            return None
        if self.through_tuple_item(target):
            return None
        if isinstance(target, ast.Index):
            self.store_element(target, current, value, span)
            if node is not None:  # `z[0] = 0.03` into an f64 tensor stores the f64 0.03
                self.coerce(current, value, node)
            return None
        unknown_tape = isinstance(current, TapeType) and isinstance(current.item, AnyType)
        if isinstance(target, ast.Name) and unknown_tape and isinstance(value, TapeType):
            scope.refine(target.id, value)  # `tape()` holds what its first push gave it
        if not fits(current, value):
            self.report(
                error(
                    "E0305",
                    f"`{print_expr(target)}` has type {current}; it cannot be rebound to {value}",
                    span,
                    str(value),
                    notes=(rebinding_help(target, current, value, declared_again=True),),
                )
            )
            if isinstance(target, ast.Name) and isinstance(current, TensorType) and isinstance(value, TensorType):
                scope.refine(target.id, value)  # what follows sees the tensor it was given, not the old shape's errors
            return None
        if not self.function_fits(current, value, span):  # a function given to a variable of a function type
            return None
        if node is not None:
            self.coerce(current, value, node)
        return None if proven(current, value) else current

    def literal_rebound(
        self, target: ast.Expr, current: Type, value: Type, span: Span, node: ast.Expr | None = None
    ) -> bool:
        """In the trial check of a body (`LiteralBindings`), rebinding a literal's name (still weak) asks for
        the value's dtype: True then, as the real check of the rebinding comes once the name has its dtype. A
        value computed from the name itself (`total = sin(total)`) is of the name's dtype, whatever it is: it
        asks for none (its f32 is only the weak name's, taken alone)."""
        literals = self.literals
        if literals is None or not isinstance(target, ast.Name) or target.id not in literals.kinds:
            return False
        if not (isinstance(current, TensorType) and current.weak):
            return False
        own = (
            literals.kinds[target.id] == "f32"
            and node is not None
            and getattr(value, "dtype", None) == "f32"
            and {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and self.is_value(n)} == {target.id}
        )
        if isinstance(value, TensorType) and not value.weak and not own:
            literals.ask(target.id, value.dtype, span, stored=True)
        return True

    def is_value(self, name: ast.Name) -> bool:
        """Does `name`, checked, hold a tensor (not a function or a module)?"""
        return isinstance(self.tables.types.get(id(name)), TensorType)

    def through_tuple_item(self, target: ast.Expr) -> bool:
        """`m[1].b[0] = e` where `m` is a tuple: E0309 at the tuple's item, as for `t[1] = e` (tuples are built
        whole), with the rebinding that does it. True when reported."""
        link = target
        while isinstance(link, (ast.Index, ast.Field)):
            base = link.target
            tuple_type = self.tables.types.get(id(base))
            if isinstance(link, ast.Index) and link is not target and isinstance(tuple_type, TupleType):
                shown, rest = print_expr(base), print_expr(target)[len(print_expr(link)) :]
                index, count = link.indices[0], len(tuple_type.items)
                position = index.value if isinstance(index, ast.IntLiteral) else None
                if position is not None and not -count <= position < count:
                    return False  # out of range: E0308 says so
                position = position % count if position is not None else None
                items = ["item" if k == position else f"{shown}[{k}]" for k in range(len(tuple_type.items))]
                rebuilt = f"({', '.join(items)})" if position is not None and len(items) <= 4 else "(..., item, ...)"
                notes = (
                    f"help: change a copy of the item, then rebind the tuple: `let item = {print_expr(link)}`, "
                    f"`item{rest} = ...`, `{shown} = {rebuilt}`",
                )
                message = f"cannot assign into an item of a tuple {tuple_type}: tuples are built whole"
                self.report(error("E0309", message, link.span, notes=notes))
                return True
            link = base
        return False

    def store_element(self, target: ast.Index, region: Type, value: Type, span: Span) -> None:
        """`x[i] = v`: `v` must broadcast into the indexed region and fit its dtype without losing values."""
        base = self.tables.types.get(id(target.target))
        if isinstance(base, TupleType):
            self.report(
                error(
                    "E0309",
                    f"cannot assign to an item of a tuple {base}",
                    target.span,
                    notes=("help: tuples are built whole; rebind the tuple, e.g. `t = (a, b)`",),
                )
            )
            return
        if not isinstance(region, TensorType) or isinstance(value, AnyType):
            return
        if not isinstance(value, TensorType):
            self.report(error("E0301", f"cannot store {value} into a tensor", span, str(value)))
        elif value.dims and not self.broadcasts_into(value, region):
            self.report(error("E0303", f"cannot store {value} into {region}", span, f"{value} into {region}"))
        elif not element_fits(region.dtype, value):
            kind = f"{article(region.dtype)} {region.dtype}"
            self.report(error("E0301", f"cannot store {value} into {kind} tensor", span, str(value)))

    def store_undeclared(self, target: ast.Name, value: Type, scope: Scope, context: Context) -> None:
        info = context.module
        kinds = (("a function", info.functions), ("a const", info.consts), ("a module", info.imports))
        kind = next((what for what, names in kinds if target.id in names), None)
        if kind is not None:
            self.report(
                error(
                    "E0203",
                    f"cannot assign to `{target.id}`: it is {kind}, not a local variable",
                    target.span,
                    notes=(f"help: bind a local with `let {target.id} = ...`",),
                )
            )
            return
        candidates = {*scope.visible()}
        suggestion = closest(target.id, candidates)
        notes = (f"help: did you mean `{suggestion}`?",) if suggestion else ()
        self.report(
            error(
                "E0201",
                f"unknown name `{target.id}`",
                target.span,
                "not declared",
                notes=(*notes, f"help: declare it first with `let {target.id} = ...`"),
            )
        )
        scope.names[target.id] = strong_keep_value(value)  # so later uses are not reported again

    @staticmethod
    def broadcasts_into(value: TensorType, region: TensorType) -> bool:
        if value.rank > region.rank:
            return False
        return all(v == 1 or same_dim(v, r) for v, r in zip(reversed(value.dims), reversed(region.dims), strict=False))

    def if_statement(self, stmt: ast.If, scope: Scope, context: Context) -> None:
        self.condition(stmt.cond, scope, context, "if")
        self.block(stmt.then, Scope(scope), context)
        if isinstance(stmt.orelse, ast.If):
            self.if_statement(stmt.orelse, scope, context)
        elif isinstance(stmt.orelse, ast.Block):
            self.block(stmt.orelse, Scope(scope), context)

    def condition(self, expr: ast.Expr, scope: Scope, context: Context, what: str) -> None:
        value = self.expression(expr, scope, context)
        if isinstance(value, AnyType) or value == BOOL:
            return
        hint: tuple[str, ...] = ()
        if isinstance(value, TensorType) and value.dtype == "bool":
            hint = (
                "help: reduce it first: `max(c)` is true where any element is (numpy's `any`), `min(c)` where all are",
            )
        elif isinstance(value, TensorType) and not value.dims:  # `while n`: Python's truthiness
            zero = "0.0" if value.dtype in FLOATS else "0"
            hint = (f"help: DL has no truthiness: compare, `{what} {print_expr(expr)} != {zero}`",)
        elif isinstance(value, StrType):
            hint = ('help: DL has no truthiness: compare, `!= ""`',)
        self.report(
            error(
                "E0304",
                f"the condition of `{what}` must be a bool scalar, found {value}",
                expr.span,
                str(value),
                notes=hint,
            )
        )

    def for_statement(self, stmt: ast.For, scope: Scope, context: Context) -> None:
        inner = Scope(scope)
        if isinstance(stmt.iterable, ast.Range):
            for bound in (stmt.iterable.start, stmt.iterable.stop):
                bound_type = self.expression(bound, scope, context)
                if not isinstance(bound_type, AnyType) and not (
                    isinstance(bound_type, TensorType) and not bound_type.dims and bound_type.dtype in INTEGERS
                ):
                    text = ("help: a command-line argument is a string: convert it with `int(...)`",)
                    self.report(
                        error(
                            "E0301",
                            f"a range needs integer bounds, found {bound_type}",
                            bound.span,
                            str(bound_type),
                            notes=text if isinstance(bound_type, StrType) else (),
                        )
                    )
            steps: list[Type] = [I64]
        else:
            steps = self.element_types(stmt.iterable, stmt.pattern, scope, context)
        elements = list(dict.fromkeys(steps))
        if len(elements) > 1:
            made = tuple(elements.index(step) for step in steps)
            self.steps_of.setdefault((*self.stepping, id(stmt)), {})[self.body_now] = made
        context.loops += 1
        for number, element in enumerate(elements):  # items of several types: the body is checked for each type
            inner = Scope(scope)
            if len(elements) > 1:
                self.stepping.append((id(stmt), number))
            try:
                self.bind_pattern(stmt.pattern, element, inner, context)
                self.block(stmt.body, inner, context)
            finally:
                if len(elements) > 1:
                    self.stepping.pop()
        context.loops -= 1

    def element_types(self, iterable: ast.Expr, pattern: ast.Pattern, scope: Scope, context: Context) -> list[Type]:
        """The types the loop variable takes: one, or for a tuple, each item's (as if unrolled)."""
        value = self.expression(iterable, scope, context)
        self.runs_no_step(value, iterable)
        if isinstance(value, TupleType) and not zips(value, pattern):
            return [strong(item) for item in value.items] or [ANY]
        if isinstance(value, TupleType) and any(isinstance(item, TupleType) for item in value.items):
            return self.zipped_tuple_types(value, iterable)
        return [self.element_type(value, iterable)]

    def runs_no_step(self, value: Type, iterable: ast.Expr) -> None:
        """W0304 for a `for` over tensors whose leading size is known to be 0: its body never runs (a batch
        size larger than the data, whose one partial batch `batches` drops, and a training loop trains
        nothing)."""
        items = value.items if isinstance(value, TupleType) else (value,)
        tensors = [item for item in items if isinstance(item, TensorType) and item.dims]
        if not tensors or not any(t.dims[0] == 0 for t in tensors):
            return
        made = iterable.func.id if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) else None
        notes = (
            ("help: `batches` drops the last partial batch: a batch size larger than the data makes none",)
            if made == "batches"
            else ()
        )
        self.report(
            warning(
                "W0304",
                f"this loop runs no step: it walks {value}, whose leading size is 0",
                iterable.span,
                notes=notes,
            )
        )

    def zipped_tuple_types(self, value: TupleType, iterable: ast.Expr) -> list[Type]:
        """`for (a, b) in ((1, 2), (3, 4))`, or a tuple zipped with a tensor: the type of each step (a tuple's
        items may differ in type)."""
        steps = {len(item.items) for item in value.items if isinstance(item, TupleType)}
        tensors = [item for item in value.items if isinstance(item, TensorType)]
        steps |= {t.dims[0] for t in tensors if isinstance(t.dims[0], int)}
        if len(steps) > 1:
            self.report(error("E0309", f"`for` zips iterables of different lengths: {value}", iterable.span))
            return [ANY]
        (count,) = steps

        def step(k: int, item: Type) -> Type:  # what one zipped iterable gives at step `k`
            if isinstance(item, TupleType):
                return strong(item.items[k])
            return TensorType(item.dtype, item.dims[1:]) if isinstance(item, TensorType) else ANY

        return [TupleType(tuple(step(k, item) for item in value.items)) for k in range(count)] or [ANY]

    def element_type(self, value: Type, iterable: ast.Expr) -> Type:
        if isinstance(value, AnyType):
            return ANY
        if isinstance(value, TensorType):
            if not value.dims:
                self.report(error("E0309", f"cannot iterate over a scalar {value}", iterable.span, str(value)))
                return ANY
            return TensorType(value.dtype, value.dims[1:])
        if isinstance(value, TupleType):  # zipped, see `zips`
            lengths = [item.dims[0] for item in value.items if isinstance(item, TensorType)]
            if any(not same_dim(lengths[0], n) for n in lengths):
                self.report(
                    error("E0309", f"`for` zips tensors of different lengths: {value}", iterable.span, str(value))
                )
            return TupleType(
                tuple(TensorType(i.dtype, i.dims[1:]) if isinstance(i, TensorType) else ANY for i in value.items)
            )
        self.report(error("E0309", f"cannot iterate over {value}", iterable.span, str(value)))
        return ANY

    def return_statement(self, value: ast.Expr | None, span: Span, scope: Scope, context: Context) -> None:
        result = UNIT if value is None else self.expression(value, scope, context)
        where = value.span if value is not None else span
        if context.expected_result is not None:
            fitting = self.expect_fits(
                context.expected_result,
                result,
                where,
                f"`{context.name}` is declared to return {context.expected_result}",
                node=value,
            )
            if fitting and not proven(context.expected_result, result) and context.decl is not None:
                self.check_calls(context.decl, context.module)
        context.returns.append((result, where))

    # -------------------------------------------------------------- fitting types
    def expect_fits(
        self,
        declared: Type,
        value: Type,
        span: Span,
        what: str,
        annotation: Span | None = None,
        node: ast.Expr | None = None,
    ) -> bool:
        """Report E0301 unless `value` fits `declared`; a literal of `node` that fits takes the declared dtype."""
        if fits(declared, value):
            if node is not None:
                self.coerce(declared, value, node)
            return self.function_fits(declared, value, span)
        secondary = (Label(annotation, "declared here"),) if annotation is not None else ()
        label, notes = f"this is {value}", ()
        if isinstance(declared, TupleType) and isinstance(value, TupleType) and len(declared.items) == len(value.items):
            # a long tuple: which item differs
            k = next(k for k, (a, b) in enumerate(zip(declared.items, value.items, strict=True)) if not fits(a, b))
            if isinstance(node, ast.TupleLiteral) and len(node.items) == len(value.items):
                span, label = node.items[k].span, f"this is {value.items[k]}"
            notes = (f"note: item {k} (counting from 0) is {value.items[k]}, where {declared.items[k]} is declared",)
        notes = string_help(declared, value, print_expr(node) if node is not None else "...") or notes
        self.report(error("E0301", f"{what}, but the value is {value}", span, label, secondary=secondary, notes=notes))
        return False

    def function_fits(self, declared: Type, value: Type, span: Span) -> bool:
        """A function passed where a function type is declared: applied to the declared parameter types,
        it must accept them and give the declared result (a mistake inside a lambda is reported there)."""
        if not isinstance(declared, FunctionType) or not isinstance(value, (FunctionRef, PrimitiveRef)):
            return True
        result = self.apply_function(value, list(declared.params), span)
        if result is None or fits(declared.result, result):
            return True
        self.report(
            error(
                "E0301",
                f"`{value.name}` does not fit {declared}: it returns {result}",
                span,
                f"expected {declared}",
            )
        )
        return False

    def apply_function(self, value: FunctionRef | PrimitiveRef, args: list[Type], span: Span) -> Type | None:
        """The result of calling a function value with arguments of these types; None if it cannot be called so."""
        if isinstance(value, GradientRef):
            return self.gradient_type(value, args, span)
        if isinstance(value, PrimitiveRef):
            primitive = PRIMITIVES[value.prim]
            try:
                binding = bind(primitive.signature, len(args), [])
            except BindingError as problem:
                self.report(
                    error("E0301", f"`{value.name}` cannot be called with {len(args)} arguments: {problem}", span)
                )
                return None
            arguments = [
                Argument(args[i]) if i is not None else Argument(ANY, None, given=False) for i in binding.fixed
            ]
            arguments.extend(Argument(args[i]) for i in binding.variadic)
            arguments.extend(Argument(ANY, None, given=False) for _ in binding.keywords)
            try:
                return primitive.rule(arguments)
            except ShapeError as problem:
                self.report(
                    error(problem.code, f"`{value.name}` cannot take {', '.join(map(str, args))}: {problem}", span)
                )
                return None
        function = self.function_of(value)
        if function is None:  # a closure this program never makes (a REPL variable's, whose maker it cannot write)
            return ANY
        params = function.decl.params
        if len(args) < len(params) and all(p.default is not None for p in params[len(args) :]):
            default_context = Context(function.module, function.name, None, frozenset())
            args = [*args, *(self.expression(p.default, Scope(), default_context) for p in params[len(args) :])]
        if len(params) != len(args):
            self.report(error("E0301", f"`{value.name}` takes {len(params)} arguments, not {len(args)}", span))
            return None
        if function.generic:
            signature = self.generic_signature(function)
            if signature is None:
                return ANY
            bindings: dict[str, tuple[Dim, Span]] = {}
            for _ in range(2):  # twice: sizes such as `N + 1` once the names they are made of are bound
                for (_, param), arg in zip(signature.params, args, strict=True):
                    problem = unify(param, arg, bindings, span)
                    if problem is not None:
                        self.report(error("E0301", f"`{value.name}` cannot take {arg}: {problem}", span))
                        return None
            return substitute(signature.result, {k: v for k, (v, _) in bindings.items()})
        return self.instantiate(function, tuple(args))

    def check_calls(self, decl: ast.FnDecl | ast.Lambda, info: ModuleInfo) -> None:
        if id(decl) in self.tables.checked_calls:
            return
        params = tuple(
            RuntimeCheck(self.resolve_type(p.annotation, info), p.annotation.span) if p.annotation else None
            for p in decl.params
        )
        result = getattr(decl, "result", None)
        checked = RuntimeCheck(self.resolve_type(result, info), result.span) if result is not None else None
        self.tables.checked_calls[id(decl)] = CallCheck(params, checked)

    def coerce(self, declared: Type, value: Type, node: ast.Expr) -> None:
        """A weak literal (`1.0`, `[1, 2]`) stored where a dtype is declared becomes that dtype; so does a
        literal's binding, in the trial check that finds its dtype (`LiteralBindings`)."""
        if not (isinstance(declared, TensorType) and isinstance(value, TensorType) and value.weak):
            return
        if self.literals is not None:
            self.literals.meets(node, declared.dtype)
        if value.dtype != declared.dtype:
            self.mark_literals(node, declared.dtype)

    def settle_coercions(self) -> None:
        """A literal takes a dtype from its context only where every check of it agreed (a function checked
        once per argument types may meet f32 in one call and f64 in another: it keeps its own dtype then).
        A check with an unknown argument (a function no call reached) counts only for a literal no other
        check saw."""
        for key, by_dtype in self.coerced_passes.items():
            seen = self.literal_passes.get(key, set())
            if seen - self.vague_passes:
                seen = seen - self.vague_passes
            coerced = {dtype: passes & seen for dtype, passes in by_dtype.items() if passes & seen}
            if len(coerced) == 1 and next(iter(coerced.values())) == seen:
                self.tables.coercions[key] = next(iter(coerced))
            elif coerced:
                by_body = self.tables.contested.setdefault(key, {})
                by_dtypes: dict[tuple[str, ...], str | None] = {}
                for dtype, passes in coerced.items():
                    for body in {self.pass_bodies.get(p) for p in passes}:
                        if body in self.body_numbers:
                            by_body[self.body_numbers[body]] = dtype
                        if body is not None:  # (checks of arguments of one dtype that disagree: neither)
                            leaves = dtype_leaves(body[1])
                            by_dtypes[leaves] = dtype if by_dtypes.get(leaves, dtype) == dtype else None
                agreed_dtypes = {leaves: dtype for leaves, dtype in by_dtypes.items() if dtype is not None}
                if agreed_dtypes:
                    self.tables.contested_by_dtypes[key] = agreed_dtypes

    def coerce_operands(self, result: Type, operands) -> None:
        """Literals meeting a typed value take its dtype (`x * 0.1` with `x: f64` multiplies by the f64 0.1)."""
        if not isinstance(result, TensorType) or result.weak or result.dtype == "bool":
            return
        for node, operand in operands:
            self.coerce(result, operand, node)

    def mark_literals(self, node: ast.Expr, dtype: str) -> None:
        match node:
            case ast.IntLiteral(dtype=None) | ast.FloatLiteral(dtype=None):
                self.coerced_passes.setdefault(id(node), {}).setdefault(dtype, set()).add(self.check_pass)
                self.log_literal(node)
                if self.stepping and not self.trials:
                    steps = self.step_coercions.setdefault(tuple(self.stepping), {})
                    steps.setdefault(self.body_now, {})[id(node)] = dtype
            case ast.TensorLiteral(items=items):
                for item in items:
                    self.mark_literals(item, dtype)
            case ast.Unary(operand=operand):
                self.mark_literals(operand, dtype)
            case ast.Binary(lhs=lhs, rhs=rhs):
                self.mark_literals(lhs, dtype)
                self.mark_literals(rhs, dtype)

    def log_literal(self, node: ast.Expr) -> None:
        if self.stepping:
            self.tables.step_literals.add(id(node))
        if self.trials:  # what a trial check sees of a literal is forgotten after it
            self.literal_log.append(id(node))

    # -------------------------------------------------------------- expressions
    def expression(self, expr: ast.Expr, scope: Scope, context: Context) -> Type:
        result = self.expression_type(expr, scope, context)
        self.record_type(expr, result)
        return result

    def record_type(self, node, t: Type) -> None:
        """Remember a node's type; a type found while checking another instantiation replaces it, but
        `_` (a recursive call not yet known) never replaces a known type. A node two instantiations type
        differently is kept by check (`varied_types`; a trial check's types are replaced by the real one's, and
        do not count)."""
        if not isinstance(t, AnyType) or id(node) not in self.tables.types:
            self.tables.types[id(node)] = t
        for depth in range(1, len(self.stepping) + 1):
            made = self.step_types.setdefault(tuple(self.stepping[:depth]), {}).setdefault(self.body_now, {})
            if not isinstance(t, AnyType) or id(node) not in made:
                made[id(node)] = t
        if not self.trials and self.check_pass not in self.vague_passes and definite(t):
            body = self.body_numbers.setdefault(self.body_now, len(self.body_numbers))
            first = self.first_typed.setdefault(id(node), (body, t))
            if first[0] != body:
                self.typed_by_body.setdefault(id(node), {first[0]: first[1]})[body] = t

    def varied_types(self) -> None:
        """For each node that checks of its function for calls of other types typed differently, its types
        (`call_types`) and a type that holds for each call (`varied`): `Any` where their ranks or dtypes
        differ, else their dimensions, with one that differs between calls named for its size in each (two
        nodes with the same sizes in every call get the same name, and so one shape: `x + b` where both are
        [B, 128] in one call and [B, 10] in another)."""
        for node, by_body in self.typed_by_body.items():
            types = list(by_body.items())
            if any(t != types[0][1] for _, t in types):
                self.tables.varied[node] = common_type(types)
                self.tables.call_types[node] = tuple(dict.fromkeys(t for _, t in types))
                self.tables.body_types[node] = by_body
        numbers = self.body_numbers
        for found, into in (
            (self.step_types, self.tables.step_types),
            (self.steps_of, self.tables.steps_of),
            (self.step_coercions, self.tables.step_coercions),
        ):
            for steps, by_body in found.items():
                numbered = {numbers[body]: made for body, made in by_body.items() if body in numbers}
                if numbered:
                    into[steps] = numbered
        for (caller, steps, call), callee in self.step_calls.items():
            if caller in numbers and callee in numbers:
                self.tables.step_instances.setdefault(call, {})[(numbers[caller], steps)] = numbers[callee]
        made = self.tables.instances_called
        for (caller, call), callee in self.calls_made.items():
            if caller in numbers and (callee in numbers or callee == SEVERAL):
                made.setdefault(call, {})[numbers[caller]] = numbers.get(callee, SEVERAL)
        gradients: dict[tuple, set[int | None]] = {}  # a gradient is written once for all its calls
        for (caller, site, _), callee in self.gradient_calls.items():
            gradients.setdefault((caller, site), set()).add(numbers.get(callee))
        for (caller, site), callees in gradients.items():
            if caller in numbers and len(callees) == 1 and None not in callees:
                made.setdefault(site, {})[numbers[caller]] = callees.pop()

    def expression_type(self, expr: ast.Expr, scope: Scope, context: Context) -> Type:
        match expr:
            case ast.IntLiteral(value=value, dtype=dtype):
                self.literal_passes.setdefault(id(expr), set()).add(self.check_pass)
                self.log_literal(expr)
                return TensorType(dtype or "i64", (), dtype is None, value)
            case ast.FloatLiteral(dtype=dtype):
                self.literal_passes.setdefault(id(expr), set()).add(self.check_pass)
                self.log_literal(expr)
                return TensorType(dtype or "f32", (), dtype is None)
            case ast.BoolLiteral():
                return BOOL
            case ast.StringLiteral():
                return STR
            case ast.FString(parts=parts):
                for part in parts:
                    if isinstance(part, ast.FormatField):
                        self.format_field(part, scope, context)
                return STR
            case ast.Name():
                return self.name(expr, scope, context)
            case ast.Binary(op=op, lhs=lhs, rhs=rhs):
                left = self.expression(lhs, scope, context)
                right = self.expression(rhs, scope, context)
                if op in ARITHMETIC_OPERATORS and UNIT in (left, right):
                    empty = lhs if left == UNIT else rhs
                    other = right if left == UNIT else left
                    written = written_empty(empty, context.decl)
                    self.no_value_in(op, empty, f"{left} {op} {right}", other if written else None)
                    return ANY
                if op == "+" and joins_text_and_value(left, right):
                    self.text_and_value(expr, left, right)
                    return ANY
                power = _literal(rhs)  # an integer literal, `-1` too
                if (
                    op == "**"
                    and isinstance(power, int)
                    and power < 0
                    and isinstance(left, TensorType)
                    and left.dtype in INTEGERS
                ):
                    notes = (f"help: convert first: `float({print_expr(lhs)}) ** {print_expr(rhs)}`",)
                    message = f"an integer raised to a negative power has no integer value: {left} ** {right}"
                    self.report(error("E0311", message, expr.span, f"{left} ** {right}", notes=notes))
                    return ANY
                if op == "@" and (hint := self.transposed_batch(lhs, rhs)):
                    try:
                        matmul_type(left, right)
                    except ShapeError as problem:
                        notes = (*problem.notes, hint)
                        self.report(error(problem.code, str(problem), expr.span, problem.label, notes=notes))
                        return ANY
                result = self.binary_type(op, left, right, expr.span)
                self.coerce_operands(result, ((lhs, left), (rhs, right)))
                return result
            case ast.Unary(op=op, operand=operand):
                value = self.expression(operand, scope, context)
                if op == "-" and value == UNIT:  # `-f(x)` of a function with no `return`
                    self.no_value_in("-", operand, "-()")
                    return ANY
                return self.unary_type(op, value, expr.span)
            case ast.Call():
                return self.call(expr, scope, context)
            case ast.Index():
                return self.index(expr, scope, context)
            case ast.Field():
                return self.field(expr, scope, context)
            case ast.TupleLiteral(items=items):
                return TupleType(tuple(strong_keep_value(self.expression(item, scope, context)) for item in items))
            case ast.TensorLiteral():
                return self.tensor_literal(expr, scope, context)
            case ast.StructLiteral():
                return self.struct_literal(expr, scope, context)
            case ast.Lambda():
                name = f"fn({', '.join(p.name for p in expr.params)})"
                environment = scope.visible()
                info = FunctionInfo(expr, context.module, name, environment, context.dims)
                self.functions[id(expr)] = info  # the last closure made, for what reads the lambda's node
                closure = closure_key(expr, environment)
                if closure is not None:
                    self.functions[closure] = info
                return FunctionRef(name, id(expr), closure)
        raise AssertionError(expr)

    def format_field(self, field: ast.FormatField, scope: Scope, context: Context) -> None:
        """An f-string's `{value:spec}`: the value is checked as any expression, and the spec must fit it
        (E0324, at the spec)."""
        value = self.expression(field.value, scope, context)
        try:
            check_format(value, field.spec)
        except ShapeError as problem:
            where = field.spec_span if field.spec else field.value.span
            self.report(error(problem.code, str(problem), where, problem.label, notes=problem.notes))

    def name(self, expr: ast.Name, scope: Scope, context: Context) -> Type:
        local = scope.lookup(expr.id)
        if local is not None:
            return local
        info = context.module
        if expr.id in info.functions:
            return FunctionRef(expr.id, id(info.functions[expr.id]))
        if expr.id in info.consts:
            return info.consts[expr.id]
        if expr.id in info.const_decls:
            if (info.path, expr.id) in self.early_consts:
                return ANY
            self.early_consts.add((info.path, expr.id))
            self.report(
                error(
                    "E0512",
                    f"`{expr.id}` is used before it is defined",
                    expr.span,
                    notes=(f"`{expr.id}` is defined at {info.const_decls[expr.id].span}; move it above this use",),
                )
            )
            return ANY
        if expr.id in info.imports:
            return ModuleType(info.imports[expr.id])
        dim = context.dims.get(expr.id)
        if dim is not None:
            self.tables.dimension_reads.setdefault(dim.owner, {})[expr.id] = dim.source
            return dim.type
        if expr.id in BY_NAME:
            return PrimitiveRef(BY_NAME[expr.id])
        if expr.id in TRANSFORMS:
            return TransformRef(expr.id)
        if expr.id in DTYPES:
            return DTypeType(expr.id)
        if expr.id in info.structs:
            self.report(
                error(
                    "E0202",
                    f"struct `{expr.id}` is a type, not a value",
                    expr.span,
                    notes=(f"help: build one with `{expr.id} {{ field: value, ... }}`",),
                )
            )
            return ANY
        candidates = {*scope.visible(), *info.functions, *info.consts, *info.imports, *BY_NAME, *TRANSFORMS}
        suggestion = closest(expr.id, candidates)
        notes = (f"help: did you mean `{suggestion}`?",) if suggestion else ()
        if expr.id in habits.NAMES:
            notes = (habits.NAMES[expr.id],)
        call = self.calling
        if call is not None and call.func is expr:
            notes = habits.call_help(call) or notes
        elif (field := self.field_of) is not None and field.target is expr:
            called = call if call is not None and call.func is field else None
            notes = habits.module_help(expr.id, field, called) or notes
        if context.dim_names is not None and expr.id in context.dim_names:
            notes = (
                f"`{expr.id}` is a dimension of `{context.name}`'s signature that no parameter's type has as a size "
                "of its own, so it has no value here",
            )
        self.report(error("E0201", f"unknown name `{expr.id}`", expr.span, "not found in this scope", notes=notes))
        return ANY

    def transposed_batch(self, *operands: ast.Expr) -> str | None:
        """PyTorch's `k.transpose(-2, -1)` written `transpose(k)` for a batch of matrices: DL's `transpose`
        reverses every axis, as numpy's does. The help for a product of one, if it fails."""
        for operand in operands:
            if isinstance(operand, ast.Call) and isinstance(operand.func, ast.Name) and operand.func.id == "transpose":
                inner = self.tables.types.get(id(operand.args[0])) if len(operand.args) == 1 else None
                if isinstance(inner, TensorType) and inner.rank >= 3 and self.swapped_fits(operands, operand, inner):
                    shown = print_expr(operand.args[0])
                    return (
                        f"help: `transpose` reverses every axis of the rank-{inner.rank} `{shown}`; to swap its last "
                        f"two, as PyTorch's `.transpose(-2, -1)`, write `swapaxes({shown}, -2, -1)`"
                    )
        return None

    def swapped_fits(self, operands: tuple, transposed: ast.Call, inner: TensorType) -> bool:
        """Whether the product would check with the last two axes of `transpose`'s argument swapped instead."""
        swapped = TensorType(inner.dtype, (*inner.dims[:-2], inner.dims[-1], inner.dims[-2]), inner.weak)
        types = [swapped if side is transposed else self.tables.types.get(id(side)) for side in operands]
        if not all(isinstance(t, TensorType) for t in types):
            return False
        try:
            matmul_type(types[0], types[1])
        except ShapeError:
            return False
        return True

    def text_and_value(self, expr: ast.Binary, left: Type, right: Type) -> None:
        """E0311 for `"loss: " + loss`, whose help writes the fixes with the program's own names."""
        text_first = isinstance(left, StrType)
        text, value = (expr.lhs, expr.rhs) if text_first else (expr.rhs, expr.lhs)
        shown = print_expr(value)
        joined = f"{print_expr(text)} + str({shown})" if text_first else f"str({shown}) + {print_expr(text)}"
        fixes = [f"`{joined}`"]
        if isinstance(text, ast.StringLiteral) and not any(c in text.value + shown for c in '{}"\\'):
            fixes.append(f'`f"{text.value}{{{shown}}}"`' if text_first else f'`f"{{{shown}}}{text.value}"`')
        self.report(
            error(
                "E0311",
                f"`+` joins two strings, found {left} + {right}",
                expr.span,
                f"{left} + {right}",
                notes=(f"help: make `{shown}` a string: {' or '.join(fixes)}",),
            )
        )

    def no_value_in(self, op: str, empty: ast.Expr, shown: str, other: Type | None = None) -> None:
        """E0311 for `()` in arithmetic, which would give `()` again: most often the call of a function whose
        last line is an expression with no `return` before it (as in Rust, not as in Python); or an empty tuple
        the user wrote, to join tuples to (`acc = acc + (x,)`, Python's way of collecting values)."""
        if isinstance(other, TupleType) and other != UNIT and op == "+":  # (`empty` is a `()` the user wrote)
            message = f"`+` of two tuples needs them of one length, found {shown}"
            self.report(error("E0311", message, empty.span, "()", notes=TUPLES_ADDED))
            return
        notes = [NO_VALUE]
        callee = self.tables.types.get(id(empty.func)) if isinstance(empty, ast.Call) else None
        if isinstance(callee, FunctionRef) and callee.key in self.functions:
            decl = self.functions[callee.key].decl
            last = decl.body.body[-1] if isinstance(decl.body, ast.Block) and decl.body.body else None
            if isinstance(last, ast.ExprStmt) and self.tables.types.get(id(last.expr), UNIT) != UNIT:
                notes.append(f"help: `{callee.name}` has no `return`: write `return {print_expr(last.expr)}`")
            else:
                notes.append(f"help: `{callee.name}` returns nothing; give it a `return` of a value")
        message = f"`{op}` needs a value, found {shown}"
        self.report(error("E0311", message, empty.span, "()", notes=tuple(notes)))

    def binary_type(self, op: str, left: Type, right: Type, span: Span) -> Type:
        try:
            if op in ("and", "or"):
                return logical(left, right, op)
            if op in ("==", "!=", "<", "<=", ">", ">="):
                result = comparison(left, right, op)
            elif op == "@":
                result = matmul_type(left, right)
            else:
                result = arithmetic(left, right, op)
        except ShapeError as problem:
            self.report(error(problem.code, str(problem), span, problem.label, notes=problem.notes))
            return ANY
        tensors = isinstance(left, TensorType) and isinstance(right, TensorType)
        if tensors and widens_f32(left, right) and (left.rank or right.rank):
            # (two scalars widened cost nothing: `float(steps) / (time() - start)`; where an f64 scalar meets
            # f32 tensors later, that operation is warned)
            self.report(
                warning(
                    "W0301",
                    f"f32 is widened to f64 in `{op}`: {left} {op} {right}",
                    span,
                    notes=("help: convert explicitly with `float(x, dtype=f64)` if that is meant",),
                )
            )
        return with_folded_value(result, op, left, right)

    def dropped(self, stmt: ast.ExprStmt, value: Type, context: Context) -> None:
        """W0303 for a statement that computes a value and drops it (`x * 2.0` as a function's last line, where
        Rust or Julia would return it; `w - lr * g` where `w = w - lr * g` was meant)."""
        shown = print_expr(stmt.expr)
        body = context.decl.body if context.decl is not None else None
        last = isinstance(body, ast.Block) and bool(body.body) and body.body[-1] is stmt and context.name != "main"
        if isinstance(stmt.expr, ast.Binary) and stmt.expr.op == "==" and isinstance(stmt.expr.lhs, ast.Name):
            fix = f"`==` compares; to assign, write `{stmt.expr.lhs.id} = {print_expr(stmt.expr.rhs)}`"
        elif last:
            fix = f"return it: `return {shown}` (a function's last line is not its value)"
        elif isinstance(stmt.expr, ast.Unary) and stmt.expr.op == "-":
            fix = (
                "a line that starts with `-` is a statement of its own: to go on with the line above, end that "
                "line with the `-`"
            )
        elif (
            isinstance(stmt.expr, ast.Binary)
            and stmt.expr.op in ARITHMETIC_OPERATORS
            and isinstance(stmt.expr.lhs, ast.Name)
        ):
            fix = f"assign it: `{stmt.expr.lhs.id} = {shown}`"
        else:
            fix = f"bind it: `let y = {shown}`"
        self.report(
            warning("W0303", f"the value of `{shown}`, {value}, is not used", stmt.span, notes=(f"help: {fix}",))
        )

    def check_used(self, call: ast.Call, value: Type, scope: Scope) -> None:
        """W0302 for a call of a function whose value a statement drops (`optim.adam(m, g, state)`): DL's
        values do not change in place, so what the call made is lost (PyTorch's optimizers update in place)."""
        if isinstance(value, AnyType) or value == UNIT or not definite(value):
            return
        callee = print_expr(call.func)
        # the variables passed whose new values it returns: `(m, state) = optim.adam(m, g, state)`
        passed = [(a.id, scope.lookup(a.id)) for a in call.args if isinstance(a, ast.Name)]
        items = value.items if isinstance(value, TupleType) else (value,)
        updated: list[str] = []
        for item in items:
            found = next((name for name, t in passed if t == item and name not in updated), None)
            if found is None:
                break
            updated.append(found)
        if len(updated) == len(items):
            target = updated[0] if len(items) == 1 and not isinstance(value, TupleType) else f"({', '.join(updated)})"
            fix = f"assign it back: `{target} = {callee}(...)`"
        elif isinstance(value, TupleType):
            names = ", ".join(f"part{k + 1}" for k in range(len(value.items)))
            fix = f"bind its parts: `let ({names}) = {callee}(...)`"
        else:
            fix = f"bind it: `let result = {callee}(...)`"
        self.report(
            warning(
                "W0302",
                f"the value of `{callee}(...)`, {value}, is not used",
                call.span,
                notes=(
                    f"help: {fix}",
                    "DL's values do not change in place: a function returns what it makes, and a call leaves its "
                    "arguments as they were (`let _ = ...` drops a value on purpose)",
                ),
            )
        )

    def unary_type(self, op: str, operand: Type, span: Span) -> Type:
        if isinstance(operand, AnyType):
            return ANY
        if operand == UNIT:
            self.report(error("E0311", f"cannot apply `{op}` to ()", span, "()", notes=(NO_VALUE,)))
            return ANY
        if op == "-" and isinstance(operand, (StructType, TupleType)):  # `-g`: each leaf negated
            return self.binary_type("*", operand, TensorType("i64", (), True), span)
        if not isinstance(operand, TensorType):
            self.report(error("E0311", f"cannot apply `{op}` to {operand}", span, str(operand)))
            return ANY
        if op == "not" and operand.dtype != "bool":
            self.report(error("E0311", f"`not` needs a bool, found {operand}", span, str(operand)))
            return ANY
        if op == "-" and operand.dtype == "bool":
            self.report(error("E0311", f"cannot negate {operand}; use `not`", span, str(operand)))
            return ANY
        if op == "-" and isinstance(operand.value, int):
            return TensorType(operand.dtype, operand.dims, operand.weak, -operand.value)
        return TensorType(operand.dtype, operand.dims, operand.weak)

    # -------------------------------------------------------------- calls
    def call(self, expr: ast.Call, scope: Scope, context: Context) -> Type:
        if isinstance(expr.func, (ast.Name, ast.Field)):
            self.calling = expr
        callee = self.expression(expr.func, scope, context)
        args = [self.expression(arg, scope, context) for arg in expr.args]
        keywords = {k.name: self.expression(k.value, scope, context) for k in expr.keywords}
        return self.call_type(callee, expr, args, keywords, context)

    def call_type(
        self, callee: Type, expr: ast.Call, args: list[Type], keywords: dict[str, Type], context: Context
    ) -> Type:
        match callee:
            case AnyType():
                return ANY
            case PrimitiveRef(prim=prim):
                return self.primitive_call(PRIMITIVES[prim], expr, args, keywords)
            case FunctionRef():
                function = self.function_of(callee)
                return ANY if function is None else self.user_call(function, expr, args, keywords)
            case TransformRef(name=name):
                return self.transform_call(name, expr, args, keywords)
            case GradientRef(function=function, site=site):
                bound = self.gradient_arguments(callee, expr, args, keywords)
                if bound is None:
                    return ANY
                args, nodes = bound
                self.last_instance = None
                result = self.gradient_type(callee, args, expr.span) or ANY
                called = self.function_of(function) if isinstance(function, FunctionRef) else None
                if called is not None and nodes is not None:  # its unsuffixed floats take the dtypes decided
                    self.weak_arguments_decided(called, args, nodes, expr.span)
                if isinstance(function, FunctionRef) and not self.trials:
                    self.gradient_calls[(self.body_now, site, id(expr))] = self.last_instance
                return result
            case FunctionType(params=params, result=result):
                if keywords or len(args) != len(params):
                    self.report(
                        error(
                            "E0204",
                            f"a function of type {callee} takes {len(params)} positional "
                            f"argument{'s' * (len(params) != 1)}",
                            expr.span,
                        )
                    )
                    return result
                for position, (param, arg) in enumerate(zip(params, args, strict=True)):
                    self.expect_fits(
                        param,
                        arg,
                        expr.args[position].span,
                        f"argument {position + 1} is {param}",
                        node=expr.args[position],
                    )
                return result
        notes = habits.dtype_call_help(callee.dtype, expr) if isinstance(callee, DTypeType) else ()
        if isinstance(expr.func, ast.Name) and (expr.func.id in BY_NAME or expr.func.id in TRANSFORMS):
            notes = (  # `let sum = 0.0` then `sum(x)`
                f"help: the variable `{expr.func.id}` hides the built-in `{expr.func.id}`: give the variable another "
                "name (`total`)",
            )
        message = f"{callee} is not a function and cannot be called"
        self.report(error("E0314", message, expr.func.span, str(callee), notes=notes))
        return ANY

    # -------------------------------------------------------------- grad and value_and_grad
    def transform_call(self, name: str, expr: ast.Call, args: list[Type], keywords: dict[str, Type]) -> Type:
        """`grad(f, wrt=...)`: a `GradientRef`, typed when it is called (it has the arguments' types then)."""
        try:
            bind(TRANSFORMS[name], len(args), list(keywords))
        except BindingError as problem:
            self.report(binding_diagnostic(problem, expr, name))
            return ANY
        function = args[0] if args else keywords.get("f", ANY)
        if isinstance(function, AnyType):
            return ANY
        if not isinstance(function, (FunctionRef, GradientRef)):
            node = expr.args[0] if expr.args else expr
            self.report(
                error(
                    "E0332",
                    f"`{name}` differentiates a function written in DL, found {function}",
                    node.span,
                    str(function),
                    notes=("help: pass a function declared with `fn`, or an anonymous function `fn(x) => ...`",),
                )
            )
            return ANY
        wrt_node = next((k.value for k in expr.keywords if k.name == "wrt"), None)
        wrt = wrt_positions(wrt_node)
        if wrt is None:
            self.report(
                error(
                    "E0334",
                    "`wrt=` takes a literal argument position or a tuple of them, such as `wrt=1` or `wrt=(0, 2)`",
                    wrt_node.span,
                )
            )
            return ANY
        aux_node = next((k.value for k in expr.keywords if k.name == "has_aux"), None)
        if aux_node is not None and not isinstance(aux_node, ast.BoolLiteral):
            self.report(error("E0334", "`has_aux=` takes `true` or `false`, written as it is", aux_node.span))
            return ANY
        has_aux = aux_node is not None and aux_node.value
        return GradientRef(function, wrt, name == "value_and_grad", expr.span, id(expr), has_aux)

    def gradient_arguments(
        self, ref: GradientRef, expr: ast.Call, args: list[Type], keywords: dict[str, Type]
    ) -> tuple[list[Type], list[ast.Expr] | None] | None:
        """The argument types of `grad(f)(...)` in `f`'s parameters' order, as a call of a declared `f` binds them:
        by position, by name (the gradient function takes `f`'s parameters) or their defaults, so that `wrt=`
        counts `f`'s parameters however the call gives them, with their nodes (None for a function value). None,
        reported, where they do not bind."""
        function = self.function_of(ref.function) if isinstance(ref.function, FunctionRef) else None
        if function is None or not isinstance(function.decl, ast.FnDecl):
            if keywords:
                self.report(error("E0206", f"`{ref}` takes no keyword arguments", expr.keywords[0].span))
                return None
            return args, None
        found = self.bound_arguments(function, expr, args, keywords)
        return (found[1], found[2]) if found is not None else None

    def bound_arguments(
        self, function: FunctionInfo, expr: ast.Call, args: list[Type], keywords: dict[str, Type]
    ) -> tuple[Binding, list[Type], list[ast.Expr]] | None:
        """How a call of `function` binds, and its arguments' types and nodes in the parameters' order: given by
        position, by name, or the parameter's default. None, reported, where the call does not bind."""
        decl = function.decl
        try:
            binding = bind_function(function.name, decl.params, len(args), [k.name for k in expr.keywords], decl.span)
        except BindingError as problem:
            self.report(binding_diagnostic(problem, expr))
            return None
        given = {k.name: k.value for k in expr.keywords}
        bound: list[Type] = []
        nodes: list[ast.Expr] = []
        for param, source in zip(decl.params, binding.fixed, strict=True):
            if isinstance(source, int):
                bound.append(args[source])
                nodes.append(expr.args[source])
            elif isinstance(source, str):
                bound.append(keywords[source])
                nodes.append(given[source])
            else:
                default_context = Context(function.module, function.name, None, frozenset())
                bound.append(self.expression(param.default, Scope(), default_context))
                nodes.append(param.default)
        return binding, bound, nodes

    def gradient_of(self, ref: GradientRef, position: int, arg: Type, decided: Mapping = NOTHING) -> Type:
        """The type of the gradient for argument `position`: the argument's, in the dtype of a float parameter
        that declares one (an unsuffixed `0.5` given to `lam: f64` is an f64 there, and so is its gradient), or
        for an unsuffixed float given to a parameter without one, the dtype its uses decided (`decided`)."""
        if not isinstance(arg, TensorType):
            return arg
        function = self.function_of(ref.function) if isinstance(ref.function, FunctionRef) else None
        decl = function.decl if function is not None else None
        if weak_float(arg) and decl is not None and isinstance(decided.get(decl.params[position].name), str):
            return TensorType(decided[decl.params[position].name])
        arg = strong(arg)
        if not isinstance(decl, ast.FnDecl) or decl.params[position].annotation is None:
            return arg
        declared = self.resolve_type(decl.params[position].annotation, function.module)
        if isinstance(declared, TensorType) and declared.dtype in FLOATS and arg.dtype in FLOATS:
            return TensorType(declared.dtype, arg.dims)
        return arg

    def gradient_type(self, ref: GradientRef, args: list[Type], span: Span) -> Type | None:
        """The type of `grad(f)(args...)`: `f` must return a float scalar; the gradient of each chosen
        argument has that argument's type."""
        positions = ref.wrt if isinstance(ref.wrt, tuple) else (ref.wrt,)
        for position in positions:
            if not 0 <= position < len(args):
                self.report(error("E0334", f"`wrt={position}` names no argument: the call gives {len(args)}", ref.span))
                return None
        result = self.apply_function(ref.function, list(args), span)
        if result is None or isinstance(result, AnyType):
            return None if result is None else ANY
        name = "value_and_grad" if ref.with_value else "grad"
        aux = None
        if ref.has_aux:  # `f` returns (loss, aux): the loss is differentiated, aux comes back beside it
            problem = aux_problem(name, result, ref.span)
            if problem is not None:
                self.report(problem)
                return None
            result, aux = result.items  # type: ignore[union-attr]
        problem = gradient_problem(name, result, args, positions, ref.span)
        if problem is not None:
            self.report(problem)
            return None
        called = self.function_of(ref.function) if isinstance(ref.function, FunctionRef) else None
        decided = self.literal_dtypes.get(self.literal_key(called, args), NOTHING) if called is not None else NOTHING
        gradients = [self.gradient_of(ref, p, args[p], decided) for p in positions]
        gradient = TupleType(tuple(gradients)) if isinstance(ref.wrt, tuple) else gradients[0]
        if aux is not None:
            aux = strong(aux) if isinstance(aux, TensorType) else aux
            return (
                TupleType((TupleType((strong(result), aux)), gradient))
                if ref.with_value
                else TupleType((gradient, aux))
            )
        return TupleType((strong(result), gradient)) if ref.with_value else gradient

    def primitive_call(self, primitive: Primitive, expr: ast.Call, args: list[Type], keywords: dict[str, Type]) -> Type:
        signature, name = primitive.signature, primitive.name
        try:
            binding = bind(signature, len(args), list(keywords))
        except BindingError as problem:
            self.report(binding_diagnostic(problem, expr, name, habits.binding_help(name, expr)))
            return ANY
        self.tables.bindings[id(expr)] = binding
        nodes = {k.name: k.value for k in expr.keywords}
        arguments: list[Argument] = []
        fixed = [*((name, None) for name in signature.positional), *signature.optional]
        for source, _ in zip(binding.fixed, fixed, strict=True):
            arguments.append(self.argument(source, args, keywords, expr, nodes))
        try:
            splat = self.splatted(primitive, expr, binding, args)
            if isinstance(splat, AnyType):
                return ANY
            if splat is None:
                arguments.extend(self.argument(index, args, keywords, expr, nodes) for index in binding.variadic)
            else:
                arguments.extend(splat)
            arguments.extend(self.argument(source, args, keywords, expr, nodes) for source in binding.keywords)
            for position in primitive.positions(primitive.functions):
                applier = self.applier(arguments[position].type, expr.span)
                arguments[position] = replace(arguments[position], apply=applier)
            result = primitive.rule(arguments)
        except ShapeError as problem:
            self.report(
                error(
                    problem.code,
                    str(problem) if name in str(problem) else f"`{name}`: {problem}",
                    problem.at or expr.span,
                    problem.label,
                    notes=problem.notes,
                )
            )
            return ANY
        operands = primitive.positions(primitive.operands or ())
        values = [(expr.args[i], args[i]) for i in operands if i < len(expr.args)]
        values += [(nodes[k], keywords[k]) for k in primitive.fills if k in nodes]
        fixed_names = (*signature.positional, *(optional for optional, _ in signature.optional))
        values += [
            (expr.args[source], args[source])  # a filling parameter given by position (`clip(x, 0.0, 1.0)`)
            for parameter, source in zip(fixed_names, binding.fixed, strict=True)
            if parameter in primitive.fills and isinstance(source, int)
        ]
        if signature.variadic and signature.variadic[0] in primitive.fills:  # `arange(0.0, 1.0, 0.1)`'s bounds
            floats = [i for i in binding.variadic if isinstance(args[i], TensorType) and args[i].dtype in FLOATS]
            values += [(expr.args[index], args[index]) for index in floats]  # integers count as integers
        self.coerce_operands(result, values)
        if primitive.prim is Prim.TRANSPOSE:
            axes = [a.value for a in arguments[1:]]
            self.identity_transpose(expr, axes, result)
            if not self.trials:
                self.tables.transpose_axes.setdefault(id(expr), set()).add(tuple(axes))
        return result

    def splatted(
        self, primitive: Primitive, expr: ast.Call, binding: Binding, args: list[Type]
    ) -> list[Argument] | AnyType | None:
        """The dimensions (or axes) of a call given as one tuple, as torch and numpy take them (`zeros(shape(x))`,
        `reshape(y, (B, -1))`, `transpose(x, (1, 0, 2))`), one argument each for the rule; `ANY` where the one
        argument's type is not known (a tuple or an integer: the result's rank is not known either); None for a
        call that passes them one by one. Backends take the tuple as it comes (`calls.takes_one_tuple`)."""
        if not takes_one_tuple(primitive, binding):
            return None
        (position,) = binding.variadic
        given, node = args[position], expr.args[position]
        if isinstance(given, AnyType):  # (not known in this check: a function no call reached)
            return ANY
        if isinstance(node, ast.TensorLiteral) and all(
            isinstance(literal_operand(i), ast.IntLiteral) for i in node.items
        ):
            sizes = ", ".join(print_expr(item) for item in node.items)  # torch's `zeros([2, 3])`: a list
            what = "dimensions" if primitive.signature.variadic[0] == "dims" else "axes"
            message = f"`{primitive.name}` takes {what} as integers, found {given}: `[{sizes}]` is a tensor"
            notes = (f"help: give them as a tuple, `({sizes}{',' if len(node.items) == 1 else ''})`, or one by one",)
            raise ShapeError("E0301", message, str(given), notes, node.span)
        if not (isinstance(given, TupleType) and all(isinstance(t, (TensorType, AnyType)) for t in given.items)):
            return None  # (an integer; or what the rule refuses, with its help)
        if not given.items and primitive.signature.variadic[0] == "axes":
            message = f"`{primitive.name}` of an empty tuple of axes: give one axis for each of the tensor's"
            raise ShapeError(
                "E0319", message, str(given), (f"help: `{primitive.name}(x)` reverses the axes",), node.span
            )
        if isinstance(node, ast.TupleLiteral):
            items = [(item, t) for item, t in zip(node.items, given.items, strict=True)]
            return [Argument(t, static_value(item, t), span=item.span) for item, t in items]
        return [Argument(t, static_value(node, t), span=node.span) for t in given.items]

    def identity_transpose(self, expr: ast.Call, axes: list, result: Type) -> None:
        """W0305 for `transpose(x, 0, 1)` of a matrix (or any axes in their own order): a permutation that
        leaves `x` as it is, which PyTorch's `transpose(x, 0, 1)`, a swap of two axes, does not. Only for axes
        written as literals there: a helper's `transpose(x, perm)` some call gives the identity is not the habit."""
        if not isinstance(result, TensorType) or len(axes) < 2 or axes != list(range(result.rank)):
            return
        written = [
            item for arg in expr.args[1:] for item in (arg.items if isinstance(arg, ast.TupleLiteral) else (arg,))
        ]
        if not all(isinstance(item, ast.IntLiteral) for item in written):
            return
        first, second = axes[0], axes[1]
        self.report(
            warning(
                "W0305",
                f"this `transpose` leaves its argument as it is: axes {tuple(axes)} are a permutation in their "
                "own order",
                expr.span,
                notes=(
                    "help: DL's `transpose` takes the new order of all the axes, as numpy's does; torch's "
                    f"`transpose(x, {first}, {second})` swaps two: write `swapaxes(x, {first}, {second})`, or "
                    "`transpose(x)` to reverse them",
                ),
            )
        )

    def applier(self, function: Type, span: Span):
        """How a rule applies a function argument to argument types (for `tree_map`)."""
        if isinstance(function, (FunctionRef, PrimitiveRef, GradientRef)):
            return lambda types: self.apply_function(function, list(types), span)
        if isinstance(function, FunctionType):
            return lambda types: function.result
        return None

    def argument(
        self,
        source: int | str | None,
        args: list[Type],
        keywords: dict[str, Type],
        expr: ast.Call,
        nodes: dict[str, ast.Expr],
    ) -> Argument:
        if source is None:
            return Argument(ANY, None, given=False)
        value_type = args[source] if isinstance(source, int) else keywords[source]
        node = expr.args[source] if isinstance(source, int) else nodes[source]
        span = node.span if isinstance(source, int) else next(k.span for k in expr.keywords if k.name == source)
        text = node.value if isinstance(node, ast.StringLiteral) else None
        return Argument(value_type, static_value(node, value_type), span=span, text=text)

    def user_call(self, function: FunctionInfo, expr: ast.Call, args: list[Type], keywords: dict[str, Type]) -> Type:
        decl = function.decl
        found = self.bound_arguments(function, expr, args, keywords)
        if found is None:
            return ANY
        binding, bound, nodes = found
        if isinstance(decl, ast.FnDecl):
            self.tables.bindings[id(expr)] = binding
        params = decl.params
        if function.generic:
            return self.generic_call(function, bound, nodes)
        annotated = [
            (index, (param.name, self.resolve_type(param.annotation, function.module)))
            for index, param in enumerate(params)
            if param.annotation is not None
        ]
        bindings = self.unify_arguments(
            function, [p for _, p in annotated], [bound[i] for i, _ in annotated], [nodes[i] for i, _ in annotated]
        )
        if bindings is None:
            return ANY
        params_types = [arg if weak_float(arg) else strong_keep_value(arg) for arg in bound]
        for index, (_, declared) in annotated:
            params_types[index] = substitute(declared, bindings) if isinstance(declared, TensorType) else declared
        given = tuple((param.name, node) for param, node in zip(params, nodes, strict=True))
        self.call_sites.append((function.name, expr.span, tuple(params_types), given))
        try:
            result = self.instantiate(function, tuple(params_types))
        finally:
            self.call_sites.pop()
        self.weak_arguments_decided(function, params_types, nodes, expr.span)
        if not self.trials:  # one call checked for several instances (in a loop over a tuple): none of them
            made = (self.body_now, id(expr))
            earlier = self.calls_made.get(made, self.last_instance)
            self.calls_made[made] = self.last_instance if earlier == self.last_instance else SEVERAL
            if self.stepping:  # ... but one in each step (`Typed.step_instances`)
                self.step_calls[(self.body_now, tuple(self.stepping), id(expr))] = self.last_instance
        return result

    def generic_call(self, function: FunctionInfo, args: list[Type], nodes: list[ast.Expr]) -> Type:
        signature = self.generic_signature(function)
        if signature is None:  # a recursive call while the signature is being checked, result not annotated
            return ANY
        bindings = self.unify_arguments(function, list(signature.params), args, nodes)
        return ANY if bindings is None else substitute(signature.result, bindings)

    def unify_arguments(
        self, function: FunctionInfo, params: list[tuple[str, Type]], args: list[Type], nodes: list[ast.Expr]
    ) -> dict[str, Dim] | None:
        """Match arguments against annotated parameters, binding dimension names; None after an error."""
        bindings: dict[str, tuple[Dim, Span]] = {}
        for (name, param), arg, node in zip(params, args, nodes, strict=True):
            span = node.span
            if not self.function_fits(param, arg, span):
                return None
            if not proven(param, arg):
                self.check_calls(function.decl, function.module)
            problem = unify(param, arg, bindings, span)
            if problem is not None:
                self.report(argument_mismatch(function.name, name, param, arg, span, problem, bindings))
                return None
            self.coerce(param, arg, node)
        # sizes such as `N + 1` again, now that every argument has bound the names they are made of
        for (name, param), arg, node in zip(params, args, nodes, strict=True):
            if not has_dim_expression(param):
                continue
            problem = unify(param, arg, bindings, node.span)
            if problem is not None:
                self.report(argument_mismatch(function.name, name, param, arg, node.span, problem, bindings))
                return None
            if dim_names(param) - set(bindings):
                self.check_calls(function.decl, function.module)
        return {k: v for k, (v, _) in bindings.items()}

    # -------------------------------------------------------------- indexing and fields
    def index(self, expr: ast.Index, scope: Scope, context: Context) -> Type:
        target = self.expression(expr.target, scope, context)
        parts = []
        known: dict[int, int] = {}  # slice bounds' values known before running, a const's (`x[0:T]`) too
        for item in expr.indices:
            if isinstance(item, ast.Slice):
                for bound in (item.start, item.stop, item.step):
                    if bound is not None:
                        value = static_value(bound, self.index_value(bound, scope, context))
                        if isinstance(value, int) and not isinstance(value, bool):
                            known[id(bound)] = value
                parts.append(item)
            elif isinstance(item, ast.Ellipsis):
                parts.append(item)
            else:
                parts.append((item, self.index_value(item, scope, context)))
        if isinstance(target, AnyType):
            return ANY
        if isinstance(target, TupleType):
            return self.tuple_index(target, expr, parts)
        if not isinstance(target, TensorType):
            self.report(error("E0309", f"cannot index {target}", expr.span, str(target)))
            return ANY
        in_place = picks_in_place([isinstance(part, tuple) for part in parts])
        parts = self.ellipsis_spread(parts, target, expr)
        if parts is None:
            return ANY
        if len(parts) > target.rank:
            if any(isinstance(index, ast.Name) and index.id == "None" for index in expr.indices):
                return ANY  # `x[:, None]`: the unknown `None` is reported, with NumPy's new axis in its help
            self.report(
                error(
                    "E0309",
                    f"too many indices: {len(parts)} for {target} of rank {target.rank}",
                    expr.span,
                    str(target),
                )
            )
            return ANY
        picks = [axis for axis, part in enumerate(parts) if not isinstance(part, ast.Slice)]
        if any(isinstance(parts[axis][1], AnyType) for axis in picks):
            return ANY  # an index of no known type (its error reported): a scalar or a tensor of indices
        if any(isinstance(parts[axis][1], TensorType) and parts[axis][1].dims for axis in picks):
            return self.picked(target, parts, picks, in_place, expr, known)
        dims: list[Dim] = []
        for axis, part in enumerate(parts):
            size = target.dims[axis]
            if isinstance(part, ast.Slice):
                dims.append(slice_size(part, size, known))
                continue
            self.index_in_range(target, axis, *part)
        dims.extend(target.dims[len(parts) :])
        return TensorType(target.dtype, tuple(dims))

    def index_in_range(self, target: TensorType, axis: int, node: ast.Expr, index_type: Type) -> None:
        """E0308 for an integer index the checker knows, out of range for an axis whose size it knows."""
        literal, size = static_value(node, index_type), target.dims[axis]
        if isinstance(literal, int) and isinstance(size, int) and not -size <= literal < size:
            self.report(
                error(
                    "E0308",
                    f"index {literal} is out of range for axis {axis} with size {size}",
                    node.span,
                    f"{target} has {size} entries along axis {axis}",
                )
            )

    def picked(
        self, target: TensorType, parts: list, picks: list[int], in_place: bool, expr: ast.Index, known: dict[int, int]
    ) -> Type:
        """The type of indexing by integer tensors, as numpy indexes: the index tensors and any integers among
        them broadcast together to one shape, which takes their axes' place when they are next to each other
        (`z[:, y]`, `z[arange(B), y]`) and comes first when slices part them (`x[0, :, y]`: numpy's rule)."""
        shapes = [parts[axis][1] for axis in picks]
        if any(isinstance(t, AnyType) for t in shapes):
            return ANY
        for axis in picks:
            self.index_in_range(target, axis, *parts[axis])
        picked: tuple[Dim, ...] | None = ()
        for index_type in shapes:
            picked = broadcast_dims(picked, index_type.dims) if picked is not None else None
        if picked is None:
            shown = " and ".join(str(t) for t in shapes)
            self.report(
                error(
                    "E0303",
                    f"index tensors do not broadcast together: {shown}",
                    expr.span,
                    shown,
                    notes=("numpy pairs index tensors element by element, broadcast to one shape",),
                )
            )
            return ANY
        sliced = {
            axis: slice_size(part, target.dims[axis], known) for axis, part in enumerate(parts) if axis not in picks
        }
        rest = target.dims[len(parts) :]
        if in_place:  # side by side: in their place (`picks_in_place`)
            before = [sliced[axis] for axis in range(picks[0])]
            after = [sliced[axis] for axis in range(picks[-1] + 1, len(parts))]
            return TensorType(target.dtype, (*before, *picked, *after, *rest))
        return TensorType(target.dtype, (*picked, *sliced.values(), *rest))

    def ellipsis_spread(self, parts: list, target: TensorType, expr: ast.Index) -> list | None:
        """The parts of an index with its `...` replaced by as many full slices as the axes the other parts
        leave (none, when they index every axis); None after an error (two `...`, too many indices)."""
        ellipses = [part for part in parts if isinstance(part, ast.Ellipsis)]
        if len(ellipses) > 1:
            self.report(error("E0309", "an index takes at most one `...`", ellipses[1].span, str(target)))
            return None
        if not ellipses:
            return parts
        at = parts.index(ellipses[0])
        spread = target.rank - (len(parts) - 1)
        if spread < 0:
            shown = f"too many indices: {len(parts) - 1} and `...` for {target} of rank {target.rank}"
            self.report(error("E0309", shown, expr.span, str(target)))
            return None
        return [*parts[:at], *(ast.Slice(None, None, None),) * spread, *parts[at + 1 :]]

    def index_value(self, node: ast.Expr, scope: Scope, context: Context) -> Type:
        value = self.expression(node, scope, context)
        if isinstance(value, AnyType):
            return value
        if not isinstance(value, TensorType) or value.dtype not in INTEGERS:
            mask = isinstance(value, TensorType) and value.dtype == "bool" and bool(value.dims)
            message = f"an index must be an integer, found {value}"
            self.report(
                error(
                    "E0320", message, node.span, str(value), notes=(habits.MASK_INDEX, habits.MASK_ROWS) if mask else ()
                )
            )
            return ANY
        return value

    def tuple_index(self, target: TupleType, expr: ast.Index, parts: list) -> Type:
        if len(parts) != 1 or isinstance(parts[0], (ast.Slice, ast.Ellipsis)):
            self.report(error("E0309", "a tuple takes one integer index", expr.span, str(target)))
            return ANY
        node, index_type = parts[0]
        if isinstance(index_type, AnyType):  # a parameter of a function checked before any call gives it a value
            return ANY
        position = static_value(node, index_type)
        if not isinstance(position, int):
            self.report(
                error(
                    "E0309",
                    "a tuple index must be a literal integer or const",
                    node.span,
                    notes=("help: destructure instead: `let (a, b) = t`",),
                )
            )
            return ANY
        if not -len(target.items) <= position < len(target.items):
            self.report(error("E0308", f"index {position} is out of range for {target}", node.span))
            return ANY
        return target.items[position]

    def field(self, expr: ast.Field, scope: Scope, context: Context) -> Type:
        calling = self.calling  # (checking the target may check other calls)
        self.field_of = expr
        target = self.expression(expr.target, scope, context)
        match target:
            case AnyType():
                return ANY
            case ModuleType(path=path):
                return self.module_member(self.modules[path], expr)
            case StructType():
                found = target.field_type(expr.name)
                if found is not None:
                    return found
                suggestion = closest(expr.name, [n for n, _ in target.fields])
                notes = (f"help: did you mean `{suggestion}`?",) if suggestion else ()
                self.report(
                    error("E0313", f"struct `{target.name}` has no field `{expr.name}`", expr.span, notes=notes)
                )
                return ANY
        self.report(
            error(
                "E0313",
                f"{target} has no fields; `.{expr.name}` needs a struct",
                expr.span,
                str(target),
                notes=habits.method_help(expr, calling),
            )
        )
        return ANY

    def module_member(self, info: ModuleInfo, expr: ast.Field) -> Type:
        if expr.name in info.functions:
            return FunctionRef(expr.name, id(info.functions[expr.name]))
        if expr.name in info.consts:
            return info.consts[expr.name]
        if expr.name in info.structs:
            self.report(error("E0202", f"struct `{expr.name}` is a type, not a value", expr.span))
            return ANY
        module_name = expr.target.id if isinstance(expr.target, ast.Name) else "module"
        suggestion = closest(expr.name, [*info.functions, *info.consts])
        notes = (f"help: did you mean `{module_name}.{suggestion}`?",) if suggestion else ()
        stem = os.path.splitext(os.path.basename(info.path))[0]
        standard = stdlib_path(stem)
        if (stem, expr.name) in habits.MEMBERS and str(standard) == info.path:  # the standard library's
            notes = (habits.MEMBERS[(stem, expr.name)],)
        elif standard is not None and str(standard) != info.path and stem != "builtin":
            notes = (
                *notes,
                f"`{module_name}` is `{info.path}`, a file beside this one, which takes the place of the standard "
                f"library's `{stem}`: rename it to import the standard library's",
            )
        self.report(error("E0207", f"module `{module_name}` has no member `{expr.name}`", expr.span, notes=notes))
        return ANY

    # -------------------------------------------------------------- literals
    def tensor_literal(self, expr: ast.TensorLiteral, scope: Scope, context: Context) -> Type:
        items = [self.expression(item, scope, context) for item in expr.items]
        if not items:
            return TensorType("f32", (0,))
        if any(isinstance(item, AnyType) for item in items):
            return ANY
        bad = next((i for i, item in enumerate(items) if not isinstance(item, TensorType)), None)
        if bad is not None:
            self.report(
                error(
                    "E0301", f"tensor literals hold numbers, found {items[bad]}", expr.items[bad].span, str(items[bad])
                )
            )
            return ANY
        if len({item.dtype == "bool" for item in items}) > 1:  # `[true, 1]`: a bool is not a number
            position = next(i for i, item in enumerate(items) if (item.dtype == "bool") != (items[0].dtype == "bool"))
            self.report(
                error(
                    "E0301",
                    f"a tensor literal holds bools or numbers, not both: {items[0]} and {items[position]}",
                    expr.items[position].span,
                    str(items[position]),
                )
            )
            return ANY
        first = items[0]
        dtype = first
        for position, item in enumerate(items[1:], start=1):
            if item.rank != first.rank or not all(same_dim(a, b) for a, b in zip(item.dims, first.dims, strict=True)):
                self.report(
                    error(
                        "E0323",
                        f"the rows of a tensor literal must have one shape: {first} and {item}",
                        expr.items[position].span,
                        str(item),
                    )
                )
                return ANY
            dtype = TensorType(promote_dtypes(dtype, item), (), dtype.weak and item.weak)
        result = TensorType(dtype.dtype, (len(items), *first.dims), dtype.weak)
        self.coerce_operands(result, zip(expr.items, items, strict=True))  # `[2, x]` with `x: i32` is i32
        return result

    def struct_literal(self, expr: ast.StructLiteral, scope: Scope, context: Context) -> Type:
        struct = self.struct_of(expr.type, context)
        given = {}
        known: list[tuple[ast.FieldInit, Type]] = []
        for field_init in expr.fields:
            value = self.expression(field_init.value, scope, context)
            if field_init.name in given:
                self.report(error("E0208", f"field `{field_init.name}` is given twice", field_init.span))
            given[field_init.name] = value
            if struct is None:
                continue
            if struct.field_type(field_init.name) is None:
                suggestion = closest(field_init.name, [n for n, _ in struct.fields])
                notes = (f"help: did you mean `{suggestion}`?",) if suggestion else ()
                self.report(
                    error(
                        "E0208",
                        f"struct `{struct.name}` has no field `{field_init.name}`",
                        field_init.span,
                        notes=notes,
                    )
                )
                continue
            known.append((field_init, value))
        if struct is None:
            return ANY
        struct, fitting = self.struct_sizes(struct, known)
        for field_init, value in fitting:
            declared = struct.field_type(field_init.name)
            self.expect_fits(
                declared,
                value,
                field_init.value.span,
                f"field `{field_init.name}` is {declared}",
                node=field_init.value,
            )
        missing = [name for name, _ in struct.fields if name not in given]
        misspelt = any(struct.field_type(name) is None for name in given)
        if missing and not misspelt:  # a misspelt field is reported once, as unknown
            self.report(
                error(
                    "E0209",
                    f"missing field{'s' * (len(missing) > 1)} "
                    f"{', '.join(f'`{m}`' for m in missing)} in `{struct.name}` literal",
                    expr.span,
                )
            )
        return struct

    def struct_sizes(
        self, struct: StructType, fields: list[tuple[ast.FieldInit, Type]]
    ) -> tuple[StructType, list[tuple[ast.FieldInit, Type]]]:
        """A generic struct's sizes, from the values of its fields (`Linear { w: ones(5, 2), ... }` is
        `Linear[5, 2]`; a size no field gives is unknown), and the fields whose values agree with them (one
        that does not is reported here, E0301: a size is one size in one value)."""
        if not struct.params:
            return struct, fields
        bindings: dict[str, tuple[Dim, Span]] = {}
        fitting = []
        for field_init, value in fields:
            declared = struct.field_type(field_init.name)
            if not fits(any_dims(declared), value):  # the dtype or rank: reported as for any struct, below
                fitting.append((field_init, value))
                continue
            problem = unify(declared, value, bindings, field_init.value.span, "field")
            if problem is None:
                fitting.append((field_init, value))
                continue
            notes = tuple(
                f"`{name}` is {size} from the field at {where.line}:{where.column}"
                for name, (size, where) in bindings.items()
                if f"`{name}`" in problem
            )
            self.report(
                error(
                    "E0301",
                    f"field `{field_init.name}` of `{struct.name}` is {declared}, found {value}",
                    field_init.value.span,
                    problem,
                    notes=(
                        *notes,
                        f"help: `{struct.name}` is generic over {shown_names(struct.params)}: "
                        "each is one size in one value",
                    ),
                )
            )
        return struct.with_sizes(tuple(bindings.get(p, (UNKNOWN, None))[0] for p in struct.params)), fitting

    def struct_of(self, type_expr: ast.Expr, context: Context) -> StructType | None:
        info, name = context.module, None
        if isinstance(type_expr, ast.Name):
            name = type_expr.id
        elif isinstance(type_expr, ast.Field) and isinstance(type_expr.target, ast.Name):
            target = context.module.imports.get(type_expr.target.id)
            info = self.modules[target] if target else None
            name = type_expr.name
        if info is not None and name in info.structs:
            return info.structs[name]
        suggestion = closest(name, info.structs) if info is not None and name else None
        notes = (f"help: did you mean `{suggestion}`?",) if suggestion else ()
        self.report(error("E0210", f"unknown struct `{name or 'this expression'}`", type_expr.span, notes=notes))
        return None


# ---------------------------------------------------------------------- helpers


def wrt_positions(node: ast.Expr | None) -> int | tuple[int, ...] | None:
    """The argument positions a `wrt=` names: a literal integer or a tuple of them (0 when absent)."""
    if node is None:
        return 0
    if isinstance(node, ast.IntLiteral):
        return node.value
    if isinstance(node, ast.TupleLiteral) and node.items and all(isinstance(i, ast.IntLiteral) for i in node.items):
        positions = tuple(i.value for i in node.items)
        return positions if len(set(positions)) == len(positions) else None
    return None


def gradient_problem(
    name: str, result: Type, args: list[Type], positions: tuple[int, ...], span: Span, aux_option: str = ""
) -> Diagnostic | None:
    """Why `name` (`grad` or `value_and_grad`) cannot differentiate a function returning `result` called with
    `args` with respect to `positions`: E0330 unless it returns a float scalar, E0331 for a position without
    floats. None when it can. `aux_option`: how to ask for `has_aux` where it is not `grad`'s keyword (the CLI's
    `--has-aux`)."""
    if not (isinstance(result, TensorType) and result.rank == 0 and strong(result).dtype in FLOATS):
        fix = "reduce the result to a scalar first, for example with `sum(...)` or `mean(...)`"
        if result == UNIT:
            fix = "end the function with `return` of its loss: a last line with no `return` gives nothing"
        elif isinstance(result, TensorType) and result.rank == 0:
            fix = f"{'a bool' if result.dtype == 'bool' else 'an integer'} has no gradient"
            if not any(has_float(a) for a in args):
                fix += ", and the call gives the function no floats: pass floats (`3.0`, not `3`)"
        elif isinstance(result, TupleType) and len(result.items) == 2 and isinstance(result.items[0], TensorType):
            option = aux_option or f"`{name}(f, has_aux=true)`"
            fix = f"for `(loss, aux)`, say so: {option} differentiates the loss and returns aux too"
        return error(
            "E0330",
            f"`{name}` needs a function that returns a float scalar, but it returns {result}",
            span,
            f"returns {result}",
            notes=(f"help: {fix}",),
        )
    for position in positions:
        arg = strong(args[position]) if isinstance(args[position], TensorType) else args[position]
        if not has_float(arg):
            floats = [i for i, a in enumerate(args) if has_float(a)]
            shown = str(floats[0]) if len(floats) == 1 else f"({', '.join(map(str, floats))})"
            return error(
                "E0331",
                f"`{name}` cannot differentiate with respect to argument {position}, of type {arg}: "
                "only floats have gradients",
                span,
                notes=(f"help: the arguments with floats are at `wrt={shown}`",) if floats else (),
            )
    return None


def aux_problem(name: str, result: Type, span: Span) -> Diagnostic | None:
    """Why `name(f, has_aux=true)` cannot differentiate a function returning `result`: E0330 unless it returns
    `(loss, aux)` with a float scalar loss. None when it can."""
    if not (isinstance(result, TupleType) and len(result.items) == 2):
        message = f"`{name}` with `has_aux=true` needs a function that returns `(loss, aux)`, but it returns {result}"
        many = isinstance(result, TupleType) and len(result.items) > 2
        notes = ("help: return the loss and one aux, which may be a tuple: `(loss, (a, b))`",) if many else ()
        return error("E0330", message, span, f"returns {result}", notes=notes)
    loss = result.items[0]
    if not (isinstance(loss, TensorType) and loss.rank == 0 and strong(loss).dtype in FLOATS):
        wanted = "the loss, the first of the pair, to be a float scalar"
        message = f"`{name}` with `has_aux=true` needs {wanted}, but it is {loss}"
        notes = ("help: reduce the loss to a scalar first, for example with `sum(...)` or `mean(...)`",)
        return error("E0330", message, span, f"the loss is {loss}", notes=notes)
    return None


def literal_kind(node: ast.Expr) -> str | None:
    """The dtype of an expression made only of unsuffixed number literals (`0.0`, `-1`, `[1.0, 2.0]`,
    `0.1 * 0.3`): `f32` if any is a float, else `i64`; None for anything else (and for `/` of two integers,
    which is a mistake)."""
    match node:
        case ast.FloatLiteral(dtype=None):
            return "f32"
        case ast.IntLiteral(dtype=None):
            return "i64"
        case ast.Unary(op="-", operand=operand):
            return literal_kind(operand)
        case ast.Binary(op=op, lhs=lhs, rhs=rhs) if op in LITERAL_ARITHMETIC:
            kinds = {literal_kind(lhs), literal_kind(rhs)}
            if None in kinds or (op == "/" and kinds == {"i64"}):
                return None
            return "f32" if "f32" in kinds else "i64"
        case ast.TensorLiteral(items=items) if items:
            kinds = [literal_kind(item) for item in items]
            if None in kinds:
                return None
            return "f32" if "f32" in kinds else "i64"
    return None


def literal_leaves(node: ast.Expr) -> list[ast.Expr]:
    """The unsuffixed number literals an expression of them is made of (`-(0.1 * 0.3)`: 0.1 and 0.3)."""
    return [n for n in ast.walk(node) if isinstance(n, (ast.FloatLiteral, ast.IntLiteral)) and n.dtype is None]


def in_f64(node: ast.Expr) -> ast.Expr:
    """`node` with its unsuffixed float literals suffixed `f64` (what a help writes: `-(0.1f64 * 0.3f64)`)."""
    floats = [leaf for leaf in literal_leaves(node) if isinstance(leaf, ast.FloatLiteral)]
    return ast.replace_nodes(node, {id(leaf): replace(leaf, dtype="f64") for leaf in floats})


LITERAL_ARITHMETIC = frozenset({"+", "-", "*", "/", "//", "%", "**"})


def literal_conflict(stmt: ast.Let, conflict: Conflict) -> Diagnostic:
    """E0326: a name bound to an unsuffixed literal and rebound to values of different dtypes."""
    name = stmt.pattern.name
    uses = sorted(conflict.uses, key=lambda use: (use[1].line, use[1].column))
    shown = " and ".join(dtype for dtype, _ in uses)
    first = uses[0][0]
    literal = print_expr(stmt.value)
    suffixed = (
        f"`{literal}{first}`" if isinstance(stmt.value, ast.FloatLiteral) else f"`let {name}: {first} = {literal}`"
    )
    return error(
        "E0326",
        f"`{name}` is rebound to values of different dtypes: {shown}",
        stmt.value.span,
        "an unsuffixed literal takes the dtype of the values its name is rebound to",
        secondary=tuple(Label(span, dtype) for dtype, span in uses),
        notes=(
            f"help: say which dtype `{name}` has, e.g. {suffixed}; the values of the other then widen or "
            "convert with `float(x, dtype=...)`",
        ),
    )


def shown_names(names: tuple[str, ...]) -> str:
    """`I`, or `I` and `O`, or `A`, `B` and `C`."""
    quoted = [f"`{name}`" for name in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} and {quoted[-1]}"


def shown_types(types: tuple[Type, ...]) -> str:
    return ", ".join(str(t) for t in types)


def has_float(t: Type) -> bool:
    """Does a value of this type hold floats (what a gradient can be taken of)?"""
    match t:
        case TensorType(dtype=dtype):
            return dtype in FLOATS
        case TupleType(items=items):
            return any(has_float(item) for item in items)
        case StructType(fields=fields):
            return any(has_float(field_type) for _, field_type in fields)
        case AnyType():
            return True
    return False


def command_line_error(param: ast.Param, what: str, span: Span, wanted: Type) -> Diagnostic:
    """E0301 for a parameter of `main` that is not a string: the command line gives it one."""
    conversion = {"i64": "int", "i32": "int", "f32": "float", "f64": "float"}
    dtype = wanted.dtype if isinstance(wanted, TensorType) and not wanted.dims else None
    convert = f"`{conversion[dtype]}({param.name})`" if dtype in conversion else "a conversion"
    return error(
        "E0301",
        f"`main`'s parameter `{param.name}` is {what}, but the command line gives `main` strings",
        span,
        str(wanted),
        notes=(
            f"help: take `{param.name}` as a `str` (a default in quotes), and convert it with {convert} where it "
            "is used",
        ),
    )


def body_key(decl: ast.FnDecl | ast.Lambda, params: list[Type], captured: tuple) -> tuple:
    """What tells one check of a body from another (`Checker.body_now`): its parameters' types, with the
    static integer values they carry (`kaiming(64, 128)` and `kaiming(32, 16)` make other shapes, though
    their types compare equal), and what it captured."""
    values = tuple(static_value_of(p) for p in params)
    return (id(decl), tuple(params), values, captured)


# (id of a lambda, the types of the names it captured) -> the key of that closure's FunctionRef, for as long as the
# process runs (the REPL's entries meet a lambda again and must give it the key its values' types name)
CLOSURE_KEYS: dict[tuple[int, tuple], int] = {}


def closure_key(node: ast.Lambda, environment: Mapping[str, Type]) -> int | None:
    """The key of a closure made from `node` where `environment` is in scope: None where it captures nothing,
    else one key per distinct types (and static values) of what it captures. Two closures of one lambda that
    captured different types (`mk(3.0)` and `mk([1.0, 2.0])` of `fn(a) => fn(x) => a * x`) have one type, so one
    variable may hold either, but each call is checked with what its own closure captured."""
    captured = tuple(
        (name, environment[name], static_value_of(environment[name]))
        for name in sorted(ast.captured_names(node.params, node.body))
        if name in environment
    )
    if not captured:
        return None
    return CLOSURE_KEYS.setdefault((id(node), captured), -1 - len(CLOSURE_KEYS))


def static_value_of(t: Type) -> Dim | int | tuple | None:
    """What a type compares without but a check depends on: an integer's statically known value (it decides
    sizes: `zeros(n)`), the values of a tuple's items (`randn(sizes)` of `(3, 2)` and of `(2, 3)`, `transpose(x,
    perm)`), or which closure of a lambda a function value is (`apply(k, x)` and `apply(kt, x)` of two closures of
    one lambda are checked each with its own)."""
    if isinstance(t, TensorType):
        return t.value
    if isinstance(t, TupleType):
        values = tuple(static_value_of(item) for item in t.items)
        return values if any(value is not None for value in values) else None
    return t.closure if isinstance(t, FunctionRef) else None


def captured_key(function: FunctionInfo) -> tuple:
    """The names a lambda or local function captured, with their types, in one order: part of what tells
    one check of its body from another (a lambda is checked again when its maker's call gives them others)."""
    if not function.environment:
        return ()
    return tuple(
        (name, t, static_value_of(t), weak_float(t))
        for name, t in sorted(function.environment.items(), key=lambda i: i[0])
    )


T = TypeVar("T")


def agreed(values: Iterable[T]) -> T | None:
    """The one value among `values` (what every check agreed on); None where there are none, or several."""
    found = set(values)
    return found.pop() if len(found) == 1 else None


def dtype_leaves(types: Iterable[Type]) -> tuple[str, ...]:
    """The dtypes of the tensors among `types` (a check's parameter types), tuples' items and structs' fields in
    order, `?` for anything else: what a backend matches the values of a call's arguments against
    (`runtime.values.dtype_leaves`)."""
    leaves: list[str] = []

    def add(t: Type) -> None:
        match t:
            case TensorType(dtype=dtype):
                leaves.append(dtype)
            case TupleType(items=items):
                for item in items:
                    add(item)
            case StructType(fields=fields):
                for _, field_type in fields:
                    add(field_type)
            case _:
                leaves.append("?")

    for t in types:
        add(t)
    return tuple(leaves)


def weak_float(t: Type) -> bool:
    """An unsuffixed float scalar not yet given a dtype (`0.9`, or a parameter given one)."""
    return isinstance(t, TensorType) and t.weak and not t.dims and t.dtype == "f32"


def definite(t: Type) -> bool:
    """A tensor type, or a tuple or struct of them: no `Any` in it."""
    match t:
        case TensorType():
            return True
        case TupleType(items=items):
            return all(definite(item) for item in items)
        case StructType(fields=fields):
            return all(definite(field_type) for _, field_type in fields)
    return False


def common_type(types: list[tuple[int, Type]]) -> Type:
    """One type for a node's types in several checks (numbered): see `Checker.varied_types`."""
    first = types[0][1]
    match first:
        case TensorType(dtype=dtype, dims=dims):
            if any(not isinstance(t, TensorType) or t.dtype != dtype or t.rank != len(dims) for _, t in types):
                return ANY
            return TensorType(dtype, common_dims([(number, t.dims) for number, t in types]))
        case TupleType(items=items):
            if any(not isinstance(t, TupleType) or len(t.items) != len(items) for _, t in types):
                return ANY
            return TupleType(
                tuple(common_type([(n, t.items[i]) for n, t in types]) for i in range(len(items)))  # type: ignore[union-attr]
            )
        case StructType(name=name, module=module):
            if any(not isinstance(t, StructType) or (t.name, t.module) != (name, module) for _, t in types):
                return ANY
            return first.with_sizes(common_dims([(n, t.sizes) for n, t in types]))  # type: ignore[union-attr]
    return ANY


def common_dims(dims: list[tuple[int, tuple[Dim, ...]]]) -> tuple[Dim, ...]:
    """Each axis's dimension where every check agrees on it, else one named for its size in each check."""
    common: list[Dim] = []
    for axis, dim in enumerate(dims[0][1]):
        sizes = [(number, found[axis]) for number, found in dims]
        if all(size == dim for _, size in sizes):
            common.append(dim)
        else:
            common.append(DimVar("|".join(f"{number}:{size}" for number, size in sizes), VARIED_DIM))
    return tuple(common)


VARIED_DIM = -1  # the `instance` of a dimension `common_dims` names


def any_dims(t: Type) -> Type:
    """`t` with every size unknown: its dtype and rank alone."""
    if isinstance(t, TensorType):
        return TensorType(t.dtype, tuple(UNKNOWN for _ in t.dims))
    if isinstance(t, TupleType):
        return TupleType(tuple(any_dims(item) for item in t.items))
    return any_sizes(t) if isinstance(t, StructType) else t


def any_sizes(struct: StructType) -> StructType:
    """A struct named without sizes (`Linear`): of any sizes, each unknown."""
    return struct.with_sizes((UNKNOWN,) * len(struct.params)) if struct.params else struct


def strong_keep_value(t: Type) -> Type:
    if isinstance(t, TensorType) and t.weak:
        return TensorType(t.dtype, t.dims, False, t.value)
    return t


def literal_operand(node: ast.Expr) -> ast.Expr:
    """The literal of a negated literal (`-1`), else the node itself."""
    return node.operand if isinstance(node, ast.Unary) and node.op == "-" else node


def static_value(node: ast.Expr, value_type: Type) -> Dim | None:
    """An integer argument's value when it is known before running: a literal, a const, `len(x)`, ..."""
    if isinstance(value_type, TensorType) and value_type.value is not None and not value_type.dims:
        return value_type.value
    if isinstance(node, ast.BoolLiteral):
        return node.value
    if isinstance(node, ast.Unary) and node.op == "-" and isinstance(node.operand, ast.IntLiteral):
        return -node.operand.value
    return None


def slice_size(part: ast.Slice, size: Dim, known: Mapping[int, int] = MappingProxyType({})) -> Dim:
    """The size of `part` of an axis of `size`: known where the bounds are literals or values `known` holds (by
    the id of their nodes), and the size is known (or the slice is whole)."""
    start = known.get(id(part.start), _literal(part.start))
    stop = known.get(id(part.stop), _literal(part.stop))
    step = known.get(id(part.step), _literal(part.step)) if part.step is not None else 1
    if any(v is _UNSET for v in (start, stop, step)) or not isinstance(step, int) or step == 0:
        return UNKNOWN
    if part.start is None and part.stop is None and step == 1:
        return size
    if not isinstance(size, int):
        return UNKNOWN
    return len(range(size)[slice(start, stop, step)])


_UNSET = object()


def _literal(node: ast.Expr | None):
    if node is None:
        return None
    if isinstance(node, ast.IntLiteral):
        return node.value
    if isinstance(node, ast.Unary) and node.op == "-" and isinstance(node.operand, ast.IntLiteral):
        return -node.operand.value
    return _UNSET


def fits(declared: Type, value: Type) -> bool:
    """Can a value of type `value` be stored where `declared` is expected (dims compared, `_` fits all)?"""
    if isinstance(declared, AnyType) or isinstance(value, AnyType):
        return True
    if isinstance(declared, TensorType) and isinstance(value, TensorType):
        dtype_fits = declared.dtype == value.dtype or (
            value.weak and (declared.dtype in FLOATS or value.dtype in INTEGERS) and declared.dtype != "bool"
        )
        return (
            dtype_fits
            and declared.rank == value.rank
            and all(same_dim(a, b) for a, b in zip(declared.dims, value.dims, strict=True))
        )
    if isinstance(declared, TupleType) and isinstance(value, TupleType):
        return len(declared.items) == len(value.items) and all(
            fits(a, b) for a, b in zip(declared.items, value.items, strict=True)
        )
    if isinstance(declared, FunctionType) and isinstance(value, (FunctionRef, PrimitiveRef, FunctionType)):
        return True
    if isinstance(declared, TapeType) and isinstance(value, TapeType):
        return fits(declared.item, value.item)
    if isinstance(declared, StructType) and isinstance(value, StructType):
        return same_struct(declared, value)
    return declared == value


def size_structure(t: Type | None) -> object:
    """What a derivative depends on in a type: each tensor's dtype, rank and sizes (a size of 1 where another is
    not means a broadcast, whose derivative sums), a size name standing for itself whatever check gave it. A
    size not known stands for nothing: no other type matches it."""
    if isinstance(t, TensorType):
        dims = tuple(
            d if isinstance(d, int) else ("size", d.name) if isinstance(d, DimVar) else object() for d in t.dims
        )
        return (t.dtype, dims)
    if isinstance(t, TupleType):
        return tuple(size_structure(item) for item in t.items)
    if isinstance(t, StructType):
        return (t.name, tuple(size_structure(field_type) for _, field_type in t.fields))
    return t


def joins_text_and_value(left: Type, right: Type) -> bool:
    """`"loss: " + loss`: a string and a value that is not one (a tree or a number)."""
    kinds = [isinstance(t, StrType) for t in (left, right)]
    return kinds[0] != kinds[1] and not any(isinstance(t, AnyType) for t in (left, right))


ARITHMETIC_OPERATORS = frozenset({"+", "-", "*", "/", "//", "%", "**", "@"})
NO_VALUE = "`()` is no value: it is what a function that returns nothing gives"


def depends_on_types(code: str) -> bool:
    """A mistake that depends on the types a function is checked with (not a misspelt name, a `break`
    outside a loop or a missing `return`)."""
    codes = ("E0204", "E0205", "E0206", "W0301")
    return (code.startswith("E03") and code not in ("E0321", "E0322")) or code in codes


INTEGER_FOLDS = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "//": lambda a, b: a // b if b else None,
    "%": lambda a, b: a % b if b else None,
}


def without_values(t: Type) -> Type:
    """`t` without the values the checker knows of its scalars: the type of a name assigned again, whose
    value when read may be another."""
    if isinstance(t, TensorType) and t.value is not None:
        return TensorType(t.dtype, t.dims, t.weak)
    if isinstance(t, TupleType):
        return TupleType(tuple(without_values(item) for item in t.items))
    return t


# The values an integer scalar of each dtype holds: a folded value outside them is not known (an i32 wraps,
# an i64 stops the run with E0510).
INTEGER_RANGES = {"i32": (-(2**31), 2**31), "i64": (-(2**63), 2**63)}


def with_folded_value(result: Type, op: str, left: Type, right: Type) -> Type:
    """Integer arithmetic on known values (`IN * 2` of consts) keeps a known value, usable as a dimension;
    `+ - *` of sizes known by name (`C * 16` of a dimension `C`) too, symbolically."""
    fold = INTEGER_FOLDS.get(op)
    if fold is None or not isinstance(result, TensorType) or result.dims or result.dtype not in INTEGERS:
        return result
    a, b = getattr(left, "value", None), getattr(right, "value", None)
    if a.__class__ is int and b.__class__ is int:
        folded = fold(a, b)  # None: a division by zero, which the run reports
        low, high = INTEGER_RANGES.get(result.dtype, (-math.inf, math.inf))
        known = folded is not None and low <= folded < high
        return TensorType(result.dtype, (), result.weak, folded if known else None)
    sizes = (int, DimVar, DimExpr)
    if op in ("+", "-", "*") and a.__class__ in sizes and b.__class__ in sizes:
        return TensorType(result.dtype, (), result.weak, dim_arithmetic(op, a, b))
    if op == "//" and a.__class__ in sizes and b.__class__ is int:
        return TensorType(result.dtype, (), result.weak, exact_quotient(a, b))
    return result


def dim_names(t: Type) -> set[str]:
    if isinstance(t, TensorType):
        return set().union(*(dim_names_of(d) for d in t.dims))
    if isinstance(t, StructType):
        return set().union(*(dim_names_of(d) for d in t.sizes))
    if isinstance(t, TupleType):
        return set().union(*(dim_names(item) for item in t.items))
    return set()


def zips(value: TupleType, pattern: ast.Pattern) -> bool:
    """`for (x, y) in (xs, ys)`: walking tensors or tuples of one length together, not the tuple's items."""
    return (
        isinstance(pattern, ast.TuplePattern)
        and len(pattern.items) == len(value.items)
        and all(
            isinstance(item, (TensorType, AnyType, TupleType)) and getattr(item, "dims", (1,)) for item in value.items
        )
    )


def join_types(a: Type, b: Type) -> Type:
    """One type for two values that fit each other: a dimension they disagree on becomes unknown."""
    if isinstance(a, TensorType) and isinstance(b, TensorType) and a.rank == b.rank:
        dims = tuple(x if x == y else UNKNOWN for x, y in zip(a.dims, b.dims, strict=True))
        return TensorType(a.dtype, dims)
    if isinstance(a, TupleType) and isinstance(b, TupleType) and len(a.items) == len(b.items):
        return TupleType(tuple(join_types(x, y) for x, y in zip(a.items, b.items, strict=True)))
    if isinstance(a, StructType) and isinstance(b, StructType) and a.params and same_struct(a, b):
        return a.with_sizes(tuple(x if x == y else UNKNOWN for x, y in zip(a.sizes, b.sizes, strict=True)))
    return a


def forget_dims(t: Type) -> Type:
    if isinstance(t, TensorType):
        return TensorType(t.dtype, tuple(UNKNOWN for _ in t.dims))
    if isinstance(t, TupleType):
        return TupleType(tuple(forget_dims(item) for item in t.items))
    return t


def proven(declared: Type, value: Type) -> bool:
    """Does `value` certainly fit `declared`? False where only a run-time check can tell: the value's
    type or one of its dimensions is unknown while the annotation asks for something definite."""
    if isinstance(declared, AnyType):
        return True
    if isinstance(value, AnyType):
        return False
    if isinstance(declared, TensorType) and isinstance(value, TensorType):
        return (value.weak and not value.dims) or sizes_proven(declared.dims, value.dims)
    if isinstance(declared, TupleType) and isinstance(value, TupleType):
        return all(proven(a, b) for a, b in zip(declared.items, value.items, strict=False))
    if isinstance(declared, StructType) and isinstance(value, StructType):  # `Linear[3, 2]` given `Linear[_, 2]`
        return sizes_proven(declared.sizes, value.sizes)
    return True


def sizes_proven(asked: tuple[Dim, ...], known: tuple[Dim, ...]) -> bool:
    """Each size asked for is `_`, or one the value's type knows."""
    return all(isinstance(a, Unknown) or not isinstance(k, Unknown) for a, k in zip(asked, known, strict=False))


def unify(
    param: Type, arg: Type, bindings: dict[str, tuple[Dim, Span]], span: Span, earlier: str = "argument"
) -> str | None:
    """Match an argument against a generic parameter, binding its dimension names; a label on mismatch
    (`earlier`: what bound a name before, "argument" or "field")."""
    if isinstance(param, AnyType) or isinstance(arg, AnyType):
        return None
    if isinstance(param, TensorType) and isinstance(arg, TensorType):
        if not fits(TensorType(param.dtype, tuple(UNKNOWN for _ in param.dims)), arg):
            return f"expected {param}, found {arg}"
        return unify_dims(param.dims, arg.dims, bindings, span, earlier, f"expected {param}, found {arg}")
    if isinstance(param, StructType) and isinstance(arg, StructType) and param.params:
        if (param.name, param.module) != (arg.name, arg.module):
            return f"expected {param}, found {arg}"
        return unify_dims(param.sizes, arg.sizes, bindings, span, earlier, f"expected {param}, found {arg}")
    if isinstance(param, TupleType) and isinstance(arg, TupleType) and len(param.items) == len(arg.items):
        for p, a in zip(param.items, arg.items, strict=True):
            problem = unify(p, a, bindings, span, earlier)
            if problem is not None:
                return problem
        return None
    return None if fits(param, arg) else f"expected {param}, found {arg}"


def unify_dims(
    expected_dims: tuple[Dim, ...],
    actual_dims: tuple[Dim, ...],
    bindings: dict[str, tuple[Dim, Span]],
    span: Span,
    earlier: str,
    mismatch: str,
) -> str | None:
    """Bind or compare each size; a label on mismatch (`mismatch` where two sizes simply differ)."""
    for expected, actual in zip(expected_dims, actual_dims, strict=True):
        if isinstance(expected, DimVar):
            bound = bindings.get(expected.name)
            if bound is None:
                bindings[expected.name] = (actual, span)
            elif not same_dim(bound[0], actual):
                return f"`{expected.name}` is {bound[0]} from an earlier {earlier}, but {actual} here"
        elif isinstance(expected, DimExpr):
            problem = unify_expression(expected, actual, bindings, span, earlier)
            if problem is not None:
                return problem
        elif not same_dim(expected, actual):
            return mismatch
    return None


def unify_expression(
    expected: DimExpr, actual: Dim, bindings: dict[str, tuple[Dim, Span]], span: Span, earlier: str = "argument"
) -> str | None:
    """An axis of size `N + 1` (an expression of dimension names) meets a size: with its names bound, the sizes
    must agree; with one name left that it is linear in, the size binds it (`N + 1` of 5 makes `N` 4)."""
    sizes = {name: bound for name, (bound, _) in bindings.items()}
    unbound = sorted(expected.names() - set(sizes))
    if not unbound:
        value = evaluate_dim(expected, sizes)
        if same_dim(value, actual):
            return None
        names = ", ".join(f"`{name}` = {sizes[name]}" for name in sorted(expected.names()))
        return f"`{expected}` is {value} with {names} from the {earlier}s, but {actual} here"
    if len(unbound) > 1 or isinstance(actual, Unknown):
        return None  # left to the check at run time
    solved = solve_dim(expected, unbound[0], sizes, actual)
    if isinstance(solved, int) and solved < 0:
        return f"`{expected}` cannot be {actual}: `{unbound[0]}` would be {solved}"
    if solved is not None:
        bindings[unbound[0]] = (solved, span)
    return None


def solve_dim(expected: DimExpr, name: str, sizes: dict[str, Dim], actual: Dim) -> Dim | None:
    """The size of `name` that makes `expected` equal `actual`, where `expected` is `a * name + rest` with a
    number `a` (None where it is not, or the size is not a whole one)."""
    rest = evaluate_dim(expected, {**sizes, name: 0})
    coefficient = dim_arithmetic("-", evaluate_dim(expected, {**sizes, name: 1}), rest)
    remainder = dim_arithmetic("-", actual, rest)
    if not isinstance(coefficient, int) or coefficient == 0 or name in dim_names_of(rest):
        return None
    if evaluate_dim(expected, {**sizes, name: 2}) != dim_arithmetic("+", rest, dim_arithmetic("*", coefficient, 2)):
        return None  # not linear in `name`
    if coefficient == 1:
        return remainder
    if isinstance(remainder, int) and remainder % coefficient == 0:
        return remainder // coefficient
    return None


def argument_mismatch(
    function: str,
    name: str,
    param: Type,
    arg: Type,
    span: Span,
    problem: str,
    bindings: dict[str, tuple[Dim, Span]],
) -> Diagnostic:
    notes = tuple(
        f"`{dim}` is {bound} from the argument at {where.line}:{where.column}"
        for dim, (bound, where) in bindings.items()
        if f"`{dim}`" in problem and where != span
    )
    notes = string_help(param, arg, "...") or notes
    return error("E0301", f"argument `{name}` of `{function}` expects {param}, found {arg}", span, problem, notes=notes)


def string_help(declared: Type, value: Type, shown: str) -> tuple[str, ...]:
    """A string where a number is expected: most often `main`'s argument (`fn main(lr = "0.1")`), which the
    command line gives as text."""
    if not (isinstance(value, StrType) and isinstance(declared, TensorType) and not declared.dims):
        return ()
    conversion = {"f32": f"float({shown})", "f64": f"float({shown}, dtype=f64)", "i64": f"int({shown})"}
    if declared.dtype not in conversion:
        return ()
    return (f"help: convert the string with `{conversion[declared.dtype]}` (a command-line argument is a string)",)


def written_empty(expr: ast.Expr, decl: ast.FnDecl | ast.Lambda | None) -> bool:
    """Whether `expr` is an empty tuple the user wrote (`()`), or a variable that the function binds or assigns
    one to (`let acc = ()`), rather than the nothing a call without a `return` of a value gives."""
    if isinstance(expr, ast.TupleLiteral):
        return not expr.items
    if not isinstance(expr, ast.Name) or decl is None:
        return False
    for node in ast.walk_scope(decl.body):
        bound = (
            node.pattern.name
            if isinstance(node, ast.Let) and isinstance(node.pattern, ast.NamePattern)
            else node.target.id
            if isinstance(node, ast.Assign) and isinstance(node.target, ast.Name)
            else None
        )
        if bound == expr.id and isinstance(node.value, ast.TupleLiteral) and not node.value.items:
            return True
    return False


def sizes_of_this_check(declared: Type, context: Context) -> tuple[Type, bool]:
    """A `let` annotation's dimension names (`let h: f32[B, _] = x`) as the parameters' types bind them in this
    check of the body: the names themselves where the function is checked once for its annotations, the sizes of
    one call's arguments where it is checked per call (a parameter left unannotated), as its result type is; and
    whether a size of the call is unknown (`_` here: the run checks it). A nested function's own names (its
    parameters' types) are not the function around's: they stay."""
    names = dim_names(declared)
    if not names or context.dim_names is None or not names <= context.dims.keys():
        return declared, False
    sizes = {name: context.dims[name].type.value for name in names}
    unknown = any(size is None for size in sizes.values())
    return substitute_dims(declared, {name: UNKNOWN if size is None else size for name, size in sizes.items()}), unknown


def substitute(t: Type, bindings: dict[str, Dim]) -> Type:
    return substitute_dims(t, bindings)


def contains_struct(struct: StructType, structs: dict[str, StructType]) -> bool:
    """Does a value of `struct` hold another `struct` inside (through fields and tuples, at any depth)?
    `structs` has the module's structs as resolved (a field may still name an earlier, empty placeholder)."""
    return any(reaches(t, struct, structs, frozenset()) for _, t in struct.fields)


def reaches(t: Type, target: StructType, structs: dict[str, StructType], seen: frozenset[str]) -> bool:
    if isinstance(t, TupleType):
        return any(reaches(item, target, structs, seen) for item in t.items)
    if not isinstance(t, StructType):
        return False
    if (t.name, t.module) == (target.name, target.module):
        return True
    if t.name in seen or t.module != target.module:
        return False
    resolved = structs.get(t.name, t)
    return any(reaches(field_type, target, structs, seen | {t.name}) for _, field_type in resolved.fields)


def element_fits(dtype: str, value: TensorType) -> bool:
    """Can `value` be stored into elements of `dtype` without losing anything: the same dtype, an integer
    into floats, or a literal that takes the dtype (`ints[0] = 1.5` would drop the .5, so it does not fit)."""
    if value.dtype == dtype:
        return True
    if "bool" in (dtype, value.dtype):
        return False
    if dtype in FLOATS:
        return value.dtype in INTEGERS or value.weak
    return value.weak and value.dtype in INTEGERS


def article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def rebinding_help(target: ast.Expr, current: Type, value: Type, declared_again: bool = False) -> str:
    """What to write instead of a rebinding to a value that does not fit; `declared_again`: the checker's help,
    which also offers `let name = ...` (a shape that changes once, as PyTorch code rebinds `h = conv(h)`)."""
    same_kind = (
        isinstance(current, TensorType)
        and isinstance(value, TensorType)
        and current.dtype == strong(value).dtype
        and current.rank == value.rank
    )
    if same_kind and isinstance(target, ast.Name):
        dims = ", ".join("_" if a != b else str(a) for a, b in zip(current.dims, value.dims, strict=True))
        underscored = f"`let {target.id}: {current.dtype}[{dims}] = ...`"
        if not declared_again:
            return (
                "help: a variable keeps the type it was declared with; if its size changes, declare the "
                f"changing dimension as `_`: {underscored}"
            )
        return (
            f"help: a variable keeps the type it was declared with: to name a value of another shape, declare it "
            f"again, `let {target.id} = ...` (a new variable; the old one is hidden from there on); for a size that "
            f"changes in a loop, declare the changing dimension as `_`: {underscored}"
        )
    if isinstance(target, ast.Name) and isinstance(value, TupleType) and value.items and value.items[0] == current:
        # `m = optim.adam(m, g, state)`: the update returns the new value with others
        names = ", ".join([target.id, *(f"part{k + 2}" for k in range(len(value.items) - 1))])
        return f"help: the value is a tuple whose first item is a new `{target.id}`: assign each, `({names}) = ...`"
    numbers = isinstance(current, TensorType) and isinstance(value, TensorType)
    if numbers and isinstance(target, ast.Name) and current.dtype in INTEGERS and strong(value).dtype in FLOATS:
        return f"help: a variable keeps its dtype: start `{target.id}` as a float (`0.0`, not `0`)"
    if isinstance(target, ast.Name):
        return "help: a variable keeps the type it was declared with; bind the new value to a new name with `let`"
    return "help: a field or element keeps the type it was declared with"


def always_returns(body: ast.Block) -> bool:
    """Does every path through `body` end in `return`? (Loops may run zero times, so they never count.)"""
    for stmt in body.body:
        match stmt:
            case ast.Return():
                return True
            case ast.If(then=then, orelse=orelse) if orelse is not None:
                if always_returns(then) and always_returns(as_block(orelse)):
                    return True
            case ast.While(cond=ast.BoolLiteral(value=True), body=loop) if not breaks(loop):
                return True  # leaves only by `return`
    return False


def as_block(orelse: ast.Block | ast.If) -> ast.Block:
    """`else if` as the block `else { if ... }`."""
    return orelse if isinstance(orelse, ast.Block) else ast.Block((orelse,))


def breaks(body: ast.Block) -> bool:
    """Does a `break` leave this loop body (not counting loops nested in it)?"""
    for stmt in body.body:
        match stmt:
            case ast.Break():
                return True
            case ast.If(then=then, orelse=orelse):
                if breaks(then) or (orelse is not None and breaks(as_block(orelse))):
                    return True
    return False


__all__ = ["Checker", "Signature", "Typed", "Unknown", "check", "check_or_raise"]
