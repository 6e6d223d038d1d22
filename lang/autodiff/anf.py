"""The forward sweep in A-normal form (`ForwardSweep`, part of `FunctionBody`): each statement is emitted
with every operation's value given a fresh name, calls inlined or split (`_fwd`), closures and `tree_map`
written out, and each `if` and `while` recorded (records.py) for the backward sweep (reverse.py).
"""

from __future__ import annotations

import dataclasses
import itertools
import struct
from collections.abc import Iterator
from contextlib import contextmanager

from dl.lang import ast
from dl.lang.autodiff.lowering import Lowering
from dl.lang.autodiff.records import Compound, Kept, Op, Stepped, Store, Sweep
from dl.lang.autodiff.rules import BINARY, REDUCED, template
from dl.lang.autodiff.sites import Scope, factory_help
from dl.lang.autodiff.trees import (
    NotDifferentiable,
    as_block,
    assign,
    assigned_outer,
    call,
    declared_names,
    hint_for,
    index_of,
    is_active,
    is_tensor_index,
    let,
    literal_integer,
    name,
    tuple_of,
)
from dl.lang.calls import bind_function
from dl.lang.diagnostics import UNKNOWN_SPAN, Span
from dl.lang.parse import COMPARE
from dl.lang.primitives import BY_NAME, NON_DIFFERENTIABLE, PRIMITIVES, Prim, Templates
from dl.lang.shapes import TREE_OPERATORS, arithmetic
from dl.lang.types import (
    ANY,
    AnyType,
    FunctionRef,
    PrimitiveRef,
    StructType,
    TupleType,
    Type,
    strong,
)

EXPRESSIONS = (ast.Name, ast.Unary, ast.Binary, ast.Call, ast.Index, ast.Field)
FORWARDS = 4  # `forwarded`: the most functions that pass a call on before it reaches a built-in
SMALL = 16  # `small_call`: the most statements before the `return` of a function inlined into a derivative


def decided_statements(decl: ast.FnDecl, call: ast.Call, builtin_assert: bool = True) -> list[ast.Stmt] | None:
    """`decl`'s body as `call` runs it, where every `if` in it is decided by parameters the call binds to
    literals (given, or defaults left out) that the body never assigns or binds again: each `if` replaced by
    the statements of its branch taken, up to a `return` there. `nn.cross_entropy(logits, labels)` is then the
    straight-line body of `label_smoothing == 0.0`, written in place in a derivative. An `assert` of such a
    condition that holds is left out (`builtin_assert`: the name is the built-in's). None where an `if` is not
    decided so (or a branch taken falls through after binding a name)."""
    assigned = ast.assigned_names(decl.body) | ast.bound_names(decl.body)  # `let mode = 1` hides the parameter
    literals = {}
    for position, param in enumerate(decl.params):
        given = call.args[position] if position < len(call.args) else param.default
        value = literal_value(given)
        if value is not None and param.name not in assigned:
            literals[param.name] = value
    out: list[ast.Stmt] = []

    def walk(stmts) -> bool | None:
        """Append `stmts` as run; True where they ended in a `return`, None where they cannot be written so."""
        for stmt in stmts:
            if isinstance(stmt, ast.If):
                taken = decided(stmt.cond, literals)
                if taken is None:
                    return None
                branch = stmt.then.body if taken else stmt.orelse
                if isinstance(branch, ast.If):
                    branch = (branch,)
                elif isinstance(branch, ast.Block):
                    branch = branch.body
                ended = walk(branch or ())
                if ended is None or ended:
                    return ended
                if any(isinstance(node, ast.Let) for node in ast.walk_scope(tuple(branch or ()))):
                    return None  # its names would outlive its block, and hide the function's own after it
                continue
            match stmt:  # an `assert` of those parameters that holds (`reduction == "mean" or ...`): nothing to run
                case ast.ExprStmt(expr=ast.Call(func=ast.Name(id="assert"), args=(condition, *_))) if (
                    builtin_assert and "assert" not in assigned and decided(condition, literals) is True
                ):
                    continue
            out.append(stmt)
            if isinstance(stmt, ast.Return):
                return True
        return False

    if not isinstance(decl.body, ast.Block) or not any(isinstance(s, ast.If) for s in decl.body.body):
        return None
    return out if walk(decl.body.body) else None


def literal_value(node: ast.Expr | None) -> int | float | bool | str | None:
    """The number, bool or string an unsuffixed or suffixed literal (or its negation) stands for (`mode="sum"`);
    None otherwise."""
    match node:
        case ast.StringLiteral(value=value):
            return value
        case ast.IntLiteral(value=value) | ast.FloatLiteral(value=value) | ast.BoolLiteral(value=value):
            return value
        case ast.Unary(op="-", operand=ast.IntLiteral() | ast.FloatLiteral() as operand):
            return -operand.value
    return None


def decided(cond: ast.Expr, literals: dict[str, object]) -> bool | None:
    """The value of a condition made of comparisons, `and`, `or` and `not` of literals and of the names
    `literals` binds; None where it reads anything else."""
    match cond:
        case ast.Binary(op="and" | "or" as op, lhs=lhs, rhs=rhs):
            left, right = decided(lhs, literals), decided(rhs, literals)
            if left is None or right is None:
                return None
            return (left and right) if op == "and" else (left or right)
        case ast.Unary(op="not", operand=operand):
            value = decided(operand, literals)
            return None if value is None else not value
        case ast.Binary(op=op, lhs=lhs, rhs=rhs) if op in COMPARE:
            left, right = operand_value(lhs, literals), operand_value(rhs, literals)
            if left is None or right is None:
                return None
            mixed = {type(left), type(right)} == {int, float}
            if mixed and abs(left if isinstance(left, int) else right) > 2**24:
                return None  # the run compares the integer as a float (16777217 == 16777216.0 there)
            return bool(COMPARE[op](left, right))
        case ast.BoolLiteral(value=value):
            return value
        case ast.Name(id=name) if isinstance(literals.get(name), bool):
            return literals[name]
    return None


def operand_value(node: ast.Expr, literals: dict[str, object]) -> object | None:
    """A comparison's operand known now: a literal, or a name `literals` binds. A float only where f32 and f64
    hold it alike (0.0, 0.5, 2.0): the parameter's dtype, which decides how a literal such as 0.1 rounds, is
    not known here, so such a comparison is left to run."""
    value = literals.get(node.id) if isinstance(node, ast.Name) else literal_value(node)
    if isinstance(value, float) and not exact_in_f32(value):
        return None
    return value


def exact_in_f32(value: float) -> bool:
    """Whether the f32 nearest `value` is `value` itself (as the f64 is)."""
    try:
        return struct.unpack("f", struct.pack("f", value))[0] == value
    except OverflowError:
        return False


SOURCE = " module"  # the key of `env` naming the module whose code is read, where not this one (no identifier)


def in_order(decl: ast.FnDecl, call: ast.Call) -> bool:
    """Whether `call`'s arguments come in `decl`'s parameter order (keywords after the positional ones, in
    order): written in parameter order, they are evaluated as the call evaluates them."""
    positions = {p.name: i for i, p in enumerate(decl.params)}
    order = [*range(len(call.args)), *(positions.get(k.name, -1) for k in call.keywords)]
    return all(a < b for a, b in itertools.pairwise(order)) and -1 not in order


class ForwardSweep:
    """The forward sweep of a derivative (mixed into `FunctionBody`): the body in A-normal form, every
    operation's value named and no name assigned twice, recording what the backward sweep reads."""

    @contextmanager
    def reading(self, body: int | None) -> Iterator[None]:
        """Read a function's body with the types of one check of it (`body`, its number; None: those that hold
        for every check): a call written in place is written for the argument types that call gives, as the
        checker checked it (`instance_of`)."""
        outer = self.node_types.body
        self.node_types.body = body
        try:
            yield
        finally:
            self.node_types.body = outer

    @contextmanager
    def stepping(self, block: ast.Block) -> Iterator[None]:
        """Read `block` with the types of its step, where it is the branch the lowering wrote for a step of a
        loop over a tuple whose items differ in type (`Lowering.tuple_iterations`): the checker typed the
        loop's body once for each, and its nodes are shared by the branches."""
        marked = self.step_blocks.get(id(block))
        outer = self.node_types.steps
        if marked is not None and marked[0] is block and outer[-1:] != (marked[1],):
            self.node_types.steps = (*outer, marked[1])
        try:
            yield
        finally:
            self.node_types.steps = outer

    def instance_of(self, call: ast.Call) -> int | None:
        """The check of the callee's body that `call`, in the body being read, made (`Typed.instance_called`)."""
        return self.typed.instance_called(self.node_types.body, call, self.node_types.steps)

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
                    self.node_types.give(value, self.type_of(target))  # a rebinding keeps the variable's type
                self.assign(target, value, env, sweep)
            case ast.ExprStmt(expr=expr):
                if effects:
                    sweep.stmts.append(ast.ExprStmt(self.rename(expr, env), stmt.span))
            case ast.If(then=then) if self.unrolled.get(id(stmt)) is stmt:  # an item of a loop over a tuple
                item = Sweep(sweep.stmts)  # (its statements go straight into the sweep's)
                outer = set(env)
                self.forward_block(then, env, item, effects)
                for key in set(env) - outer:  # the block's own names (`let`, local `fn`) end with it
                    del env[key]
                with self.stepping(then):
                    steps = self.node_types.steps
                sweep.records.append(Stepped(steps, item.records))
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
            env.pop(f"ref {pattern.name}", None)
            return
        items = value_type.items if isinstance(value_type, TupleType) else [ANY] * len(pattern.items)
        for position, (item, item_type) in enumerate(zip(pattern.items, items, strict=True)):
            part = ast.Index(atom, (ast.IntLiteral(position),))
            self.node_types.give(part, item_type)
            hint = item.name if isinstance(item, ast.NamePattern) else "items"
            self.bind(item, self.atom_of_operation(part, part, sweep, hint), env, sweep, None, item_type)

    def name_value(self, user: str, atom: ast.Expr, sweep: Sweep, annotation, value_type: Type) -> str:
        """A generated name holding `atom` for the user's variable `user`."""
        if isinstance(atom, ast.Name) and atom.id == self.just_made and annotation is None:
            return atom.id  # the operation's result is named for the variable already: no copy
        var = self.fresh(user)
        atom = self.settled_literal(atom)
        static = self.values.get(atom.id) if isinstance(atom, ast.Name) else atom
        if static is not None and literal_integer(static) is not None and user not in self.assigned_anywhere():
            self.values[var] = static  # a static integer (an inlined call's `axis=-1`): `static_integer` reads it
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
        dtype = self.typed.coercion(atom, self.node_types.body, self.node_types.steps)
        if isinstance(atom, (ast.FloatLiteral, ast.IntLiteral)) and atom.dtype is None and dtype == "f64":
            return ast.FloatLiteral(float(atom.value), "f64", atom.span)
        if isinstance(atom, ast.IntLiteral) and atom.dtype is None and dtype == "f32":
            return ast.FloatLiteral(float(atom.value), None, atom.span)
        return atom

    def bound_literal(self, atom: ast.Expr) -> ast.Expr:
        """A float literal a `let` binds, of the dtype the variable has: the one context gave it, else f32
        (`let c = 0.1` is an f32, which must not adapt to an f64 where `c` is used). Integers stay as
        written (loop counters; an i64 only differs from an adapting literal beside an i32 tensor). One that
        context gave f64 in some calls of the function and not in others, in a derivative written for all of
        them, stays as written, to take its dtype in each call again."""
        settled = self.settled_literal(atom)
        if id(atom) in self.typed.contested and self.node_types.body is None:
            return settled
        if isinstance(settled, ast.FloatLiteral) and settled.dtype is None:
            return ast.FloatLiteral(settled.value, "f32", settled.span)
        return settled

    def settled_literals(self, expr: ast.Expr) -> ast.Expr:
        """`expr` with each number literal's dtype from context written out (`settled_literal`)."""
        literals = (ast.IntLiteral, ast.FloatLiteral)
        replacements = {id(n): self.settled_literal(n) for n in ast.walk(expr) if isinstance(n, literals)}
        replacements = {k: v for k, v in replacements.items() if not isinstance(v, literals) or v.dtype}
        return ast.replace_nodes(expr, replacements) if replacements else expr

    def assign(self, target: ast.Expr, value: ast.Expr, env, sweep: Sweep, made: bool = False) -> None:
        """The assignment `target = value`; `made`: `value` is a generated name already, not the user's code
        (a generated name may also be a user's variable's, which renaming would read)."""
        match target:
            case ast.Name(id=user):
                atom = value if made else self.atom(value, env, sweep, user)
                env[user] = self.name_value(user, atom, sweep, None, self.types.get(env[user], ANY))
            case ast.TupleLiteral(items=items):
                atom = value if made else self.atom(value, env, sweep, "items")
                value_type = self.type_of(value)
                types = value_type.items if isinstance(value_type, TupleType) else [ANY] * len(items)
                for position, (item, item_type) in enumerate(zip(items, types, strict=True)):
                    part = ast.Index(atom, (ast.IntLiteral(position),))
                    self.node_types.give(part, item_type)
                    hint = item.id if isinstance(item, ast.Name) else "items"
                    piece = self.atom_of_operation(part, part, sweep, hint)
                    self.node_types.give(piece, item_type)
                    self.assign(item, piece, env, sweep, made=True)
            case ast.Index(target=base) | ast.Field(target=base):
                atom = value if made else self.atom(value, env, sweep, "t")
                old = self.atom(base, env, sweep, (ast.root_name(base) or "value"))
                if not isinstance(old, ast.Name):
                    raise NotDifferentiable("`grad` cannot differentiate an update of this value", target.span)
                new = self.fresh(ast.root_name(base) or "value")
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
                    self.assign(base, name(new), env, sweep, made=True)
            case _:
                raise NotDifferentiable("`grad` cannot differentiate this assignment", target.span)

    def atom(self, expr: ast.Expr, env, sweep: Sweep, hint: str) -> ast.Expr:
        """Emit what computes `expr` and return a name or literal holding its value."""
        match expr:
            case ast.Name(id=user) if user in env:
                return ast.Name(env[user], expr.span)
            case ast.Name():
                return self.rename(expr, env)  # a module-level name of an inlined function's module, qualified
            case ast.IntLiteral() | ast.FloatLiteral() | ast.BoolLiteral() | ast.StringLiteral():
                return expr
            case ast.Field(target=ast.Name(id=module)) if module not in env and module in self.module_aliases(env):
                return self.rename(expr, env)
            case ast.Lambda():
                return self.rename(expr, env)
            case ast.Call(func=ast.Name(id=local)) if f"fn {local}" in env:
                decl, captured = self.closures[int(env[f"fn {local}"])]
                return self.inline(decl, captured, expr, env, sweep, hint)
            case ast.Call(func=ast.Lambda() as function):  # applied where made: `grad(fn(y) => ...)(x)`, written
                return self.inline(function, self.captured(function, env, sweep), expr, env, sweep, hint)
            case ast.Call(func=ast.Name(id=local)) if f"ref {local}" in env and (
                (call := self.retargeted(expr, env)) is not None
            ):
                return self.atom(call, env, sweep, hint)
            case ast.Call(func=ast.Name(id="tree_map")) if isinstance(self.type_of(expr.func), PrimitiveRef):
                return self.atom(self.expand_tree_map(expr, env, sweep), env, sweep, hint)
            case ast.Call(func=ast.Name(id="tree_dot")) if isinstance(self.type_of(expr.func), PrimitiveRef):
                return self.atom(self.expand_tree_dot(expr, env, sweep), env, sweep, hint)
            case ast.Binary() | ast.Unary(op="-") if self.on_trees(expr):
                return self.atom(self.expand_tree_arithmetic(expr, env, sweep), env, sweep, hint)
            case ast.Call() if (primitive := self.forwarded(expr)) is not None:
                return self.atom(primitive, env, sweep, hint)
            case ast.Call(func=ast.Name(id=local)) if local not in env and (
                (function := self.lambda_around(expr)) is not None
            ):  # `model(w)` of `let model = fn(w) => x @ w`, made in the function around: its body in place
                return self.inline(function, {}, expr, env, sweep, hint)
            case ast.Call() if self.takes_functions(expr) or self.small_call(expr):
                decl, _ = self.typed.functions[self.type_of(expr.func).key]
                return self.inline(decl, {}, expr, env, sweep, hint)
        if not is_active(self.type_of(expr)):
            settled = self.settled_literals(self.quiet(expr))
            return self.atom_of_operation(self.rename(settled, env), expr, sweep, hint, record=False)
        rhs = self.operation(expr, env, sweep)
        variant = self.variant(rhs, expr)
        split = self.split_call(rhs, expr, variant)
        if split is not None:
            return self.split_atom(rhs, expr, split, sweep, hint)
        return self.atom_of_operation(rhs, expr, sweep, hint, variant=variant)

    def split_call(self, rhs: ast.Expr, original: ast.Expr, variant: int | None) -> tuple[ast.Expr, ast.Expr] | None:
        """For a call of a function with float arguments that is split (`Round.split_names`): how this
        module names its `_fwd` and `_bwd` functions (those written for the check `variant` of its body)."""
        if not isinstance(rhs, ast.Call) or not any(self.active(arg) for arg in rhs.args):
            return None
        callee = self.type_of(original.func)
        if not isinstance(callee, FunctionRef) or callee.key not in self.typed.functions:
            return None
        decl, path = self.typed.functions[callee.key]
        if not self.effects and self.round.has_effects(decl):
            return None  # run again by a backward sweep: `g_quiet`, and `g_back` for its backward
        names = self.round.split_names(decl, path, variant)
        if names is None:
            return None
        span = original.span
        return tuple(self.round.reference(self.path, path, function, span) for function in names)

    def variant(self, rhs: ast.Expr, original: ast.Expr) -> int | None:
        """For a call of a declared function that is not written in place, which check of its body its
        derivative (`_fwd` and `_bwd`, or `_back`) is written for: where its calls give a parameter types of
        other ranks (or dtypes), this call's own (`instance_of`); else None, one for every call. Where this
        call made several (the function being written is itself written for calls of several types), one
        for every call, unless the body has an operation whose derivative depends on ranks (`@`, `einsum`):
        that is refused rather than computed wrong."""
        callee = self.type_of(original.func) if isinstance(rhs, ast.Call) and isinstance(original, ast.Call) else None
        if not isinstance(callee, FunctionRef) or callee.key not in self.typed.functions:
            return None
        decl, _ = self.typed.functions[callee.key]
        varied = any(isinstance(self.typed.varied.get(id(p)), AnyType) for p in decl.params)
        if not isinstance(decl, ast.FnDecl) or not varied:
            return None
        instance = self.instance_of(original)
        if instance is None and self.round.rank_sensitive(decl):  # checks of one rank, with different sizes
            args = [self.type_of(arg) for arg in original.args]
            if len(args) == len(decl.params) and not original.keywords:
                instance = self.typed.instance_alike(original, args, decl.params)
        if instance is None and self.round.rank_sensitive(decl) and self.typed.called_several(original):
            raise NotDifferentiable(
                f"`grad` cannot yet differentiate this call of `{decl.name}`: it gives `{decl.name}` arguments of "
                f"several ranks (in a loop over a tuple), and the derivative of `{decl.name}`, written once for "
                "them, depends on the rank",
                original.span,
                (f"help: call `{decl.name}` for one rank here: a loop over a tuple of one rank, or a call each",),
            )
        if instance is None and self.round.rank_sensitive(decl):
            outer = getattr(self.decl, "name", "the function")
            fix = (  # the gradient itself (`Round.site`), or a split function written once
                f"write `grad({outer})` once for each rank it is called with: each is written for its own"
                if self.site is not None
                else f"call a copy of `{outer}` for each rank"
            )
            raise NotDifferentiable(
                f"`grad` cannot yet differentiate this call of `{decl.name}`: the derivative of `{outer}` is written "
                f"once for calls that give `{decl.name}` arguments of several ranks, and `{decl.name}`'s derivative "
                "depends on them",
                original.span,
                (f"help: {fix}",),
            )
        return instance

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
        self.node_types.give(callee, self.type_of(function))
        atoms = [self.atom(tree, env, sweep, "tree") for tree in trees]
        types = [
            self.types.get(a.id, self.type_of(t)) if isinstance(a, ast.Name) else self.type_of(t)
            for a, t in zip(atoms, trees, strict=True)
        ]
        return self.spread(callee, atoms, types, self.type_of(expr), expr.span)

    def on_trees(self, expr: ast.Binary | ast.Unary) -> bool:
        """Is `expr` an operator applied to a struct or tuple (`m - lr * g`, `-g`)?"""
        if isinstance(expr, ast.Binary) and expr.op not in TREE_OPERATORS:
            return False
        operands = (expr.lhs, expr.rhs) if isinstance(expr, ast.Binary) else (expr.operand,)
        return any(isinstance(self.type_of(o), (StructType, TupleType)) for o in operands)

    def expand_tree_arithmetic(self, expr: ast.Binary | ast.Unary, env, sweep: Sweep) -> ast.Expr:
        """`m - c * g` written out leaf by leaf: `M { w: m.w - t.w, b: m.b - t.b }` with `t` the tree `c * g`
        (itself written out), so that the derivative is that of the leaves' operations and a scalar operand
        (`c`) gets the sum of its contributions at every leaf."""
        operands = (expr.lhs, expr.rhs) if isinstance(expr, ast.Binary) else (expr.operand,)
        atoms = [self.atom(operand, env, sweep, "tree") for operand in operands]
        types = [
            self.types.get(a.id, self.type_of(o)) if isinstance(a, ast.Name) else self.type_of(o)
            for a, o in zip(atoms, operands, strict=True)
        ]
        return self.leaf_operations(expr, atoms, types)

    def leaf_operations(self, expr: ast.Binary | ast.Unary, parts: list[ast.Expr], types: list[Type]) -> ast.Expr:
        span = expr.span
        tree = next((t for t in types if isinstance(t, (StructType, TupleType))), None)
        if tree is None:
            if isinstance(expr, ast.Unary):
                node = ast.Unary("-", parts[0], span)
                self.node_types.give(node, types[0])
            else:
                node = ast.Binary(expr.op, parts[0], parts[1], span)
                self.node_types.give(node, strong(arithmetic(types[0], types[1], expr.op)))
            return node
        if isinstance(tree, TupleType):
            places = [(ast.IntLiteral(i), None) for i in range(len(tree.items))]
        else:
            places = [(None, field_name) for field_name, _ in tree.fields]
        built = []
        for position, field_name in places:
            picked, picked_types = [], []
            for part, t in zip(parts, types, strict=True):
                if not isinstance(t, (StructType, TupleType)):  # a number meets every leaf
                    picked.append(part)
                    picked_types.append(t)
                    continue
                item = ast.Field(part, field_name, span) if field_name else ast.Index(part, (position,), span)
                item_type = t.field_type(field_name) if field_name else t.items[position.value]
                self.node_types.give(item, item_type)
                picked.append(item)
                picked_types.append(item_type)
            built.append((field_name, self.leaf_operations(expr, picked, picked_types)))
        if isinstance(tree, TupleType):
            node = ast.TupleLiteral(tuple(value for _, value in built), span)
            self.node_types.give(node, TupleType(tuple(self.type_of(value) for _, value in built)))
            return node
        struct = self.round.reference(self.path, tree.module, tree.name, span)
        node = ast.StructLiteral(struct, tuple(ast.FieldInit(n, value, span) for n, value in built), span)
        self.node_types.give(node, tree)
        return node

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

        def leaf_products(parts: list[ast.Expr], part_types: list[Type]) -> None:
            first = part_types[0]
            if isinstance(first, TupleType):
                for i in range(len(first.items)):
                    picked = [ast.Index(p, (ast.IntLiteral(i),), expr.span) for p in parts]
                    for node, t in zip(picked, part_types, strict=True):
                        self.node_types.give(node, t.items[i])
                    leaf_products(picked, [t.items[i] for t in part_types])
            elif isinstance(first, StructType):
                for field_name, _ in first.fields:
                    picked = [ast.Field(p, field_name, expr.span) for p in parts]
                    for node, t in zip(picked, part_types, strict=True):
                        self.node_types.give(node, t.field_type(field_name))
                    leaf_products(picked, [t.field_type(field_name) for t in part_types])
            else:
                product = ast.Binary("*", parts[0], parts[1], expr.span)
                self.node_types.give(product, first if part_types[1] == first else ANY)
                total = call("sum", product)
                self.node_types.give(total.func, PrimitiveRef(Prim.SUM))
                self.node_types.give(total, self.type_of(expr))
                terms.append(total)

        leaf_products(atoms, types)
        result = terms[0]
        for term in terms[1:]:
            result = ast.Binary("+", result, term, expr.span)
            self.node_types.give(result, self.type_of(expr))
        return result

    def spread(self, callee, parts: list[ast.Expr], types: list[Type], result: Type, span: Span) -> ast.Expr:
        first = types[0]
        if isinstance(first, TupleType):
            items = []
            for i in range(len(first.items)):
                picked = [ast.Index(p, (ast.IntLiteral(i),), span) for p in parts]
                for node, t in zip(picked, types, strict=True):
                    self.node_types.give(node, t.items[i])
                item_result = result.items[i] if isinstance(result, TupleType) else ANY
                items.append(self.spread(callee, picked, [t.items[i] for t in types], item_result, span))
            node = ast.TupleLiteral(tuple(items), span)
        elif isinstance(first, StructType):
            fields = []
            for field_name, field_type in first.fields:
                picked = [ast.Field(p, field_name, span) for p in parts]
                for node, t in zip(picked, types, strict=True):
                    self.node_types.give(node, t.field_type(field_name))
                value = self.spread(callee, picked, [t.field_type(field_name) for t in types], field_type, span)
                fields.append(ast.FieldInit(field_name, value, span))
            struct = self.round.reference(self.path, first.module, first.name, span)
            node = ast.StructLiteral(struct, tuple(fields), span)
        else:
            node = ast.Call(callee, tuple(parts), (), span)
        self.node_types.give(node, result)
        return node

    def captured(self, decl: ast.Lambda | ast.FnDecl, env: dict[str, str], sweep: Sweep) -> dict[str, str]:
        """What a closure made here sees: the variables' values now. One the function assigns later is
        copied first (the closure keeps the value it captured, not the variable)."""
        assigned = self.assigned_anywhere()
        seen = dict(env)
        for user in ast.free_names(decl.body) & assigned:
            if user in env and env[user] in self.types:
                value = ast.Name(env[user], decl.span)
                self.node_types.give(value, self.types[env[user]])
                seen[user] = self.atom_of_operation(value, value, sweep, f"{user}_captured").id
        return seen

    def assigned_anywhere(self) -> set[str]:
        """The names assigned in this function or in any function (a closure may be made in an inlined one)."""
        if self.all_assigned is None:
            bodies = [self.decl.body, *(decl.body for decl, _ in self.typed.functions.values())]
            self.all_assigned = set().union(*(ast.assigned_names(body) for body in bodies))
        return self.all_assigned

    def bind_closure(self, local: str, decl, captured: dict[str, str], env: dict[str, str]) -> None:
        self.closures.append((decl, dict(captured)))
        env[f"fn {local}"] = str(len(self.closures) - 1)

    def takes_functions(self, expr: ast.Call) -> bool:
        """A call of a top-level function that is given a function (a closure, a declared function or a
        built-in) as an argument: written in place, where the function its parameter calls is this call's."""
        callee = self.type_of(expr.func)
        if not isinstance(callee, FunctionRef) or callee.key not in self.typed.functions:
            return False
        return any(isinstance(self.type_of(arg), (FunctionRef, PrimitiveRef)) for arg in expr.args)

    def forwarded(self, expr: ast.Call) -> ast.Call | None:
        """A call of a function that only passes its parameters on to a built-in (`nn.relu(x)`, which returns
        `builtin.relu_of(x)`, which returns `relu(x)`), as the call of that built-in, when this module sees it
        by its name and the names its derivative rule writes: differentiated by the rule in place, with no
        `_fwd` and `_bwd` calls. None for any other call."""
        call, bound = expr, None
        for _ in range(FORWARDS):
            callee = self.type_of(call.func)
            if isinstance(callee, PrimitiveRef):
                break
            if not isinstance(callee, FunctionRef) or callee.key not in self.typed.functions:
                return None
            decl, path = self.typed.functions[callee.key]
            body = decl.body.body if isinstance(decl, ast.FnDecl) else ()
            if len(body) != 1 or not isinstance(body[0], ast.Return) or not isinstance(body[0].value, ast.Call):
                return None
            inner = body[0].value
            passed = [*inner.args, *(k.value for k in inner.keywords)]
            if [getattr(a, "id", None) for a in passed] != [p.name for p in decl.params]:
                return None  # each parameter once, in order: the arguments are evaluated as the call would
            if not in_order(decl, call):
                return None
            given = [a for a, _ in self.user_arguments(decl, path, call)]
            values = dict(zip((p.name for p in decl.params), given, strict=True))
            if bound is not None:  # an argument of an outer forwarder's call: what the caller passed
                values = {k: bound.get(v.id, v) if isinstance(v, ast.Name) else v for k, v in values.items()}
            call, bound = inner, values
        else:
            return None
        if bound is None or not self.rule_written_here(callee):
            return None
        args = tuple(bound[a.id] for a in call.args)
        keywords = tuple(ast.Keyword(k.name, bound[k.value.id], k.span) for k in call.keywords)
        primitive = ast.Call(ast.Name(callee.name, expr.func.span), args, keywords, expr.span)
        self.node_types.give(primitive.func, callee)
        self.node_types.give(primitive, self.type_of(expr))
        return primitive

    def rule_written_here(self, callee: PrimitiveRef) -> bool:
        """Whether this module sees the built-in `callee` and those its derivative templates call by their
        names (no declaration of its own takes them)."""
        rule = PRIMITIVES[callee.prim].derivative
        if not isinstance(rule, Templates) or callee.prim in REDUCED:
            return False
        here = self.round.declared(self.path)
        called = {callee.name}
        for _, source in rule.adjoints:
            called |= {
                c.func.id
                for c in ast.walk(template(source))
                if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
            }
        return not called & here.keys()

    def small_call(self, expr: ast.Call) -> bool:
        """A call of a short straight-line function (lets, asserts, one `return` at the end) whose body this
        module can write: inlined, its derivative is a few statements in place, not a `_fwd` call that packs
        the values its `_bwd` call unpacks (the interpreter spends much of a small model's step on those)."""
        callee = self.type_of(expr.func)
        if expr.keywords or not isinstance(callee, FunctionRef) or callee.key not in self.typed.functions:
            return False
        decl, path = self.typed.functions[callee.key]
        if not isinstance(decl, ast.FnDecl) or id(decl) in self.local_functions or id(decl) in self.inlining:
            return False
        *body, last = decided_statements(decl, expr, self.builtin_assert(decl)) or decl.body.body or (None,)
        missing = decl.params[len(expr.args) :]
        if any(p.default is None for p in missing) or len(body) >= SMALL or not isinstance(last, ast.Return):
            return False
        if last.value is None or not all(isinstance(s, (ast.Let, ast.ExprStmt)) for s in body):
            return False
        if any(isinstance(n, (*ast.FUNCTIONS, ast.Return)) for s in body for n in ast.walk(s)):
            return False
        if (not self.effects and self.round.has_effects(decl)) or self.round.recursive(decl):
            return False
        with self.reading(self.instance_of(expr)):
            if not all(self.settled_type(node) for node in ast.walk(decl.body) if isinstance(node, EXPRESSIONS)):
                return False  # types that differ between the calls it stands for: split, checked at each call
        return self.writable_here(decl, path, tuple(p.default for p in missing))

    def settled_type(self, node: ast.Expr) -> bool:
        """Whether the checker gave `node` one type (not `Any`, as for a join of the calls of its function); a
        name may have none (a module's alias), an operation must."""
        found = self.type_of(node)
        if found is None:
            return isinstance(node, ast.Name)
        return not isinstance(found, AnyType)

    def writable_here(self, decl: ast.FnDecl, path: str, defaults: tuple[ast.Expr, ...] = ()) -> bool:
        """Whether the body of `decl`, of module `path`, can be written in this function of this module and mean
        what it means there: the names it takes from `path` and its imports are reachable through this
        module's imports, under names this function's parameters do not take; no local of it is also one of
        those names; no dimension of its annotations is read as a value (`float(N)`: the caller's `N` is
        another); no struct literal or annotation (which would name `path`'s types). In another module, the
        caller's module declares no built-in's name: the rules of the body's operations call built-ins."""
        top, here = self.round.declared(path), self.round.declared(self.path)
        aliases = dict(self.round.program.imports.get(path, []))
        imports = self.round.program.imports.get(self.path, [])
        params = {p.name for p in self.decl.params}  # kept by name in generated code, unlike other locals
        local = {p.name for p in decl.params} | {n.name for n in ast.walk(decl.body) if isinstance(n, ast.NamePattern)}
        annotations = tuple(p.annotation for p in decl.params if p.annotation is not None)
        dims = {n.name for n in ast.walk(annotations) if isinstance(n, ast.DimName)}
        if local & (set(top) | set(aliases)) or (path != self.path and any(name in BY_NAME for name in here)):
            return False
        for node in ast.walk((decl.body, defaults)):  # the defaults the call leaves to `decl` too
            if isinstance(node, ast.StructLiteral) or (isinstance(node, ast.Let) and node.annotation is not None):
                return False
            if not isinstance(node, ast.Name) or node.id in local:
                continue
            if node.id in dims:
                return False
            if path == self.path:
                if node.id in top and node.id in params:
                    return False
                continue
            if node.id in top and not self.reachable(path, imports, params):
                return False
            if node.id in aliases and not self.reachable(aliases[node.id], imports, params):
                return False
            if node.id not in top and node.id not in aliases and node.id in here:
                return False  # a built-in (or the checker's name) that this module's own declaration shadows
        return True

    @staticmethod
    def reachable(target: str, imports: list[tuple[str, str]], params: set[str]) -> bool:
        """Whether this module imports module `target` under an alias the function's parameters leave free."""
        return any(path == target and alias not in params for alias, path in imports)

    def inline(self, decl, captured: dict[str, str], expr: ast.Call, env, sweep: Sweep, hint: str) -> ast.Expr:
        """A call of a closure (a local function, an anonymous function bound by `let`, or a function given
        a closure as an argument): its body is emitted in place, seeing the values it captured."""
        if id(decl) in self.inlining:
            raise NotDifferentiable("`grad` cannot differentiate a recursive function that takes a closure", expr.span)
        instance = self.instance_of(expr)  # its body is read with this call's types
        inner = dict(captured)
        if isinstance(decl, ast.FnDecl) and id(decl) not in self.local_functions:
            inner[SOURCE] = self.round.module_of(decl)  # its names are its module's, wherever it is inlined
        missing = decl.params[len(expr.args) :]
        defaulted = SOURCE in inner and all(p.default is not None for p in missing)  # a top-level function's
        if expr.keywords or len(expr.args) > len(decl.params) or (missing and not defaulted):
            raise NotDifferentiable("`grad` needs this call to pass every argument by position", expr.span)
        for position, param in enumerate(decl.params):
            if position >= len(expr.args):  # a default sees its own module, none of the caller's variables
                arg = self.default_here(param.default, inner[SOURCE])
                atom = self.atom(arg, {}, sweep, param.name)
                if not isinstance(atom, ast.Name):
                    atom = self.atom_of_operation(self.settled_literal(atom), arg, sweep, param.name, record=False)
                inner[param.name] = atom.id
                continue
            arg = expr.args[position]
            if self.bind_function_argument(param.name, arg, env, inner):
                continue
            atom = self.atom(arg, env, sweep, param.name)
            if not isinstance(atom, ast.Name):
                atom = self.atom_of_operation(self.settled_literal(atom), arg, sweep, param.name, record=False)
            if atom.id not in self.types and self.type_of(arg) is not None:
                self.types[atom.id] = self.type_of(arg)  # a captured variable: its type at this call
            inner[param.name] = atom.id
            inner.pop(f"fn {param.name}", None)
            self.bind_function_ref(param.name, arg, inner)
        self.inlining.append(id(decl))
        try:
            with self.reading(instance):
                return self.inline_body(decl, inner, sweep, hint, expr.span, expr)
        finally:
            self.inlining.pop()

    def lambda_around(self, expr: ast.Call) -> ast.Lambda | None:
        """The anonymous function that a variable of the function around holds (`let model = fn(w) => x @ w`
        in `main`, called by the lambda differentiated there), where a call of it can be written in place,
        reading by name what it captured (as the derivative reads what the lambda itself captured, passed at
        the `grad` call): the function and the `grad` call are both in the function around's own scope (a
        function nested there could hide the names), and there each name the function captures, and its
        variable, is bound at most once, before the function is made, and never assigned. None otherwise."""
        callee = self.type_of(expr.func)
        if not self.in_place or not isinstance(callee, FunctionRef) or callee.key not in self.typed.functions:
            return None
        decl, _ = self.typed.functions[callee.key]
        if not isinstance(decl, ast.Lambda) or not self.made_around(decl) or not self.called_around():
            return None
        return None if self.changed_captures(expr, decl) else decl

    def made_around(self, decl: ast.Lambda) -> bool:
        """Whether `decl` is made in the function around itself, not inside a function nested in it."""
        return any(node is decl for node in ast.walk_scope(self.around.body))

    def called_around(self) -> bool:
        """Whether the `grad` this derivative is written for is called in the function around itself."""
        own = ast.walk_scope(self.around.body)
        return self.site is not None and any(isinstance(n, ast.Call) and n.span == self.site for n in own)

    def changed_captures(self, expr: ast.Call, decl: ast.Lambda) -> list[str]:
        """The names among the variable `expr` calls and those `decl` captures that the function around, in its
        own scope, assigns, binds more than once, or binds after `decl` is made (`decl` saw another value, the
        module's const of that name, say)."""
        if self.bound_around is None:
            kinds = (ast.NamePattern, ast.FnDecl)
            scope = [(n.name, n.span) for n in ast.walk_scope(self.around.body) if isinstance(n, kinds)]
            self.bound_around = [*((p.name, None) for p in self.around.params), *scope]
            self.assigned_around = ast.assigned_names(self.around)
        made = (decl.span.line, decl.span.column)
        names = {expr.func.id, *ast.captured_names(decl.params, decl.body)}  # type: ignore[attr-defined]
        changed = set(names & self.assigned_around)
        for captured in names:
            spans = [span for bound, span in self.bound_around if bound == captured]
            if len(spans) > 1 or (spans and spans[0] is not None and (spans[0].line, spans[0].column) > made):
                changed.add(captured)
        return sorted(changed)

    def closure_not_differentiable(self, expr: ast.Call, decl) -> NotDifferentiable:
        """Why a call of an anonymous or local function cannot be differentiated, with what to do instead."""
        made_here = isinstance(decl, ast.Lambda) and self.in_place and self.made_around(decl) and self.called_around()
        changed = self.changed_captures(expr, decl) if made_here else []
        if changed and isinstance(expr.func, ast.Name):
            return NotDifferentiable(
                f"`grad` cannot differentiate this call of `{expr.func.id}`: `{changed[0]}` is assigned or bound "
                "again, so its derivative could read another value than the function saw",
                expr.span,
                (
                    f"help: pass `{changed[0]}` to the function as a parameter, or capture a `let` that keeps the "
                    "value it needs",
                ),
            )
        called = expr.func.id if isinstance(expr.func, ast.Name) else None
        scope = Scope.of(self.around) if self.around is not None and called is not None else None
        made = scope.made.get(called) if scope is not None else None
        if made is not None:  # `let sq = make(3.0)` in the function around, called in the lambda differentiated
            return NotDifferentiable(
                f"`grad` cannot differentiate through this call of `{called}`, a function made when the program runs",
                expr.span,
                (factory_help(called, made, scope),),
            )
        return NotDifferentiable(
            "`grad` cannot yet differentiate through a call of this anonymous or local function",
            expr.span,
            (
                "help: declare it with `fn` at the top level of a module, taking what it computes with as "
                "parameters; or make it with `let` in a top-level function and write `grad` there, outside any "
                "function nested in it",
            ),
        )

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
        with self.reading(self.instance_of(expr)):
            for stmt in body[:-1]:
                self.forward(stmt, inner, sweep, nested=False, effects=self.effects)
        return body[-1].value, inner

    def bind_function_ref(self, param: str, arg: ast.Expr, inner) -> None:
        """A parameter given a declared function or a built-in (`ap(exp, m)`): the function this call gives
        it. The checker typed the body's `h(x)` for one call of `ap` (`ap(sq, m)` too, say); this one's
        calls `exp` (`retargeted`)."""
        function = self.type_of(arg)
        if isinstance(function, (FunctionRef, PrimitiveRef)):
            self.function_args.append(function)
            inner[f"ref {param}"] = str(len(self.function_args) - 1)

    def retargeted(self, expr: ast.Call, env) -> ast.Call | None:
        """`h(x)` where `h` is a parameter given a function: a copy whose callee has the type of the
        function this call of the enclosing function gives (None where it is the one the checker saw)."""
        given = env.get(f"ref {expr.func.id}")  # type: ignore[union-attr]
        function = self.function_args[int(given)] if given is not None else None
        if function is None or function == self.type_of(expr.func):
            return None
        func = ast.Name(expr.func.id, expr.func.span)  # type: ignore[union-attr]
        call = dataclasses.replace(expr, func=func)
        self.node_types.carry(expr, call)
        self.node_types.give(func, function)
        return call

    def bind_function_argument(self, param: str, arg: ast.Expr, env, inner) -> bool:
        """Bind a closure given as an argument to the parameter's name; False if `arg` is not one."""
        if isinstance(arg, ast.Lambda):
            self.bind_closure(param, arg, env, inner)
            return True
        if isinstance(arg, ast.Name) and f"fn {arg.id}" in env:
            inner[f"fn {param}"] = env[f"fn {arg.id}"]
            return True
        return False

    def builtin_assert(self, decl: ast.FnDecl) -> bool:
        """Whether `assert` in `decl`'s body is the built-in, not a function of its module of that name."""
        try:
            path = self.round.module_of(decl)
        except KeyError:  # a local function: its module is this one
            path = self.path
        return "assert" not in self.round.declared(path)

    def inline_body(self, decl, inner, sweep: Sweep, hint: str, span: Span, call: ast.Call) -> ast.Expr:
        if not isinstance(decl.body, ast.Block):
            return self.atom(decl.body, inner, sweep, hint)
        decided = decided_statements(decl, call, self.builtin_assert(decl)) if isinstance(decl, ast.FnDecl) else None
        *body, last = decided or decl.body.body
        returns = (node for node in ast.walk_scope(tuple(body)) if isinstance(node, ast.Return))
        if not isinstance(last, ast.Return) or last.value is None or next(returns, None) is not None:
            raise NotDifferentiable(
                "`grad` cannot yet differentiate this call: a function given a closure, or a local function, "
                "must have one `return`, at its end",
                span,
                ("help: compute the result in a variable and return it once, after any `if` or loop",),
            )
        # its `for` loops made `while`, `break` and `continue` flags, as in the function differentiated, with
        # names none of its own
        self.user_names |= ast.free_names(decl.body) | {
            p.name for p in ast.walk(decl.body) if isinstance(p, ast.NamePattern)
        }
        for stmt in Lowering(self).block(body, None):
            self.forward(stmt, inner, sweep, nested=False, effects=self.effects)
        return self.atom(last.value, inner, sweep, hint)

    def quiet(self, expr: ast.Expr, always: bool = False) -> ast.Expr:
        """`expr`, calling the quiet copies of functions with effects where the forward is run again (or
        `always`: a backward sweep's own test of a condition)."""
        if self.effects and not always:
            return expr
        callees = {id(node): self.round.quiet_callee(node, self.path) for node in ast.walk(expr)}
        replacements = {k: v for k, v in callees.items() if v is not None}
        return ast.replace_nodes(expr, replacements) if replacements else expr

    def module_aliases(self, env: dict[str, str] | None = None) -> set[str]:
        """The import aliases of the module whose code is being read (`env`'s, for an inlined function)."""
        source = env.get(SOURCE, self.path) if env is not None else self.path
        return {alias for alias, _ in self.round.program.imports.get(source, [])}

    def atom_of_operation(
        self, rhs: ast.Expr, original: ast.Expr, sweep: Sweep, hint: str, record: bool = True, variant=None
    ) -> ast.Name:
        var = self.fresh(hint)
        self.just_made = var
        sweep.stmts.append(ast.Let(ast.NamePattern(var), None, rhs, original.span))
        self.types[var] = self.type_of(original)
        self.values[var] = rhs
        if record:
            sweep.records.append(Op(var, rhs, original, variant=variant))
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
                return ast.Index(operand(target), tuple(self.index_operand(i, env, sweep) for i in indices), expr.span)
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

    def index_operand(self, index: ast.Expr | ast.Slice | ast.Ellipsis, env, sweep: Sweep):
        """An index as derivative code reads it: an index tensor computed once, into a name (the adjoint reads it
        again: `x[permutation(3)]` must add where it read), anything else as written."""
        if isinstance(index, (ast.Slice, ast.Ellipsis, ast.Name)) or not is_tensor_index(self.type_of(index)):
            return self.rename(index, env)
        return self.atom(index, env, sweep, "index")

    def call_operation(self, expr: ast.Call, env, sweep: Sweep) -> ast.Expr:
        callee = self.type_of(expr.func)
        if isinstance(callee, PrimitiveRef):
            if callee.prim in NON_DIFFERENTIABLE:
                return self.rename(expr, env)
            args = tuple(self.atom(a, env, sweep, "t") for a in expr.args)
            # an argument given by keyword is an operand like the others (computed once, given its gradient)
            # where it is a positional parameter or one with a gradient (pad's `value=`); the other keywords
            # (`axis=`, `keepdims=`) are static and stay as written
            primitive = PRIMITIVES[callee.prim]
            if id(expr) in self.typed.varied_axes:
                raise NotDifferentiable(
                    "`grad` cannot differentiate this `transpose`: calls of its function give it different axes",
                    expr.span,
                    (
                        "help: the derivative is written once for every call: give each permutation its own function, "
                        "or write the axes in the call",
                    ),
                )
            rule, signature = primitive.derivative, primitive.signature
            operands = {name for name, _ in rule.adjoints} if isinstance(rule, Templates) else set()
            operands |= {*signature.positional, *(name for name, _ in signature.optional)}
            keywords = tuple(
                ast.Keyword(
                    k.name,
                    self.atom(k.value, env, sweep, "t") if k.name in operands else self.rename(k.value, env),
                    k.span,
                )
                for k in expr.keywords
            )
            func = expr.func
            if isinstance(func, ast.Name) and func.id in env:  # `h(x)` in a function given `exp` for `h`
                func = ast.Name(callee.name, func.span)
            return ast.Call(func, args, keywords, expr.span)  # a built-in's name: no module qualifies it
        if isinstance(callee, FunctionRef):
            decl, decl_path = self.typed.functions[callee.key]
            if not isinstance(decl, ast.FnDecl) or id(decl) in self.local_functions:
                raise self.closure_not_differentiable(expr, decl)
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
        """The call's arguments in parameter order, as the checker bound them, defaults (of `decl`, in module
        `path`) filled in; each with whether it is a default."""
        binding = self.typed.bindings.get(id(expr)) or bind_function(
            decl.name, decl.params, len(expr.args), [k.name for k in expr.keywords], decl.span
        )
        by_name = {k.name: k.value for k in expr.keywords}
        args = []
        for param, source in zip(decl.params, binding.fixed, strict=True):
            if source is None:
                args.append((self.default_here(param.default, path), True))
            else:
                args.append((expr.args[source] if isinstance(source, int) else by_name[source], False))
        return args

    def default_here(self, default: ast.Expr, path: str) -> ast.Expr:
        """A default of a function in module `path` as this module writes it (see `rename`)."""
        return self.rename(default, {SOURCE: path})

    def rename(self, expr, env):
        """`expr` with the user's local names replaced by their current generated names; read in another
        module (an inlined function's, `env[SOURCE]`), that module's consts and functions qualified by this
        module's alias of it (`helpers.SCALE`), and its aliases by this module's (`other.BASE`)."""
        source = env.get(SOURCE, self.path)
        if source != self.path:
            top = self.round.declared(source)
            modules = dict(self.round.program.imports.get(source, []))  # the source module's aliases
        else:
            top, modules = set(), {}
        replacements: dict[int, ast.Expr] = {}
        for node in ast.walk(expr):
            if not isinstance(node, ast.Name):
                continue
            if node.id in env:
                if env[node.id] != node.id:
                    replacements[id(node)] = ast.Name(env[node.id], node.span)
            elif node.id in top:
                replacements[id(node)] = self.shadowless(self.round.reference(self.path, source, node.id, node.span))
            elif node.id in modules:
                here = [a for a, target in self.round.program.imports.get(self.path, []) if target == modules[node.id]]
                if not here:
                    raise NotDifferentiable(f"`grad` needs `{modules[node.id]}` imported here", node.span)
                replacements[id(node)] = self.shadowless(ast.Name(here[0], node.span))
        if not replacements:
            return expr
        renamed = ast.replace_nodes(expr, replacements)
        if source != self.path:
            self.node_types.carry(expr, renamed)
        return renamed

    def shadowless(self, reference: ast.Expr) -> ast.Expr:
        """`reference` (`alias.name` or `alias`), unless a parameter of this function takes the alias's name."""
        alias = reference.target if isinstance(reference, ast.Field) else reference
        if isinstance(alias, ast.Name) and alias.id in {p.name for p in self.decl.params}:
            message = f"`grad` needs the module `{alias.id}` here, where a parameter takes its name"
            raise NotDifferentiable(message, alias.span)
        return reference

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
                # at the loop's span: what cannot keep this state (compiled code, a tape of tapes) says where
                sweep.stmts.append(let(saved, dataclasses.replace(call("tape", state), span=stmt.span)))
                stmts = [assign(name(saved), call("push", name(saved), state)), *stmts]
                if not any(isinstance(node, ast.While) for node in ast.walk(tuple(stmts))):
                    kept = self.keep_values(body_sweep, inner, sweep)
                    stmts.append(kept.push)
            body = ast.Block(tuple(stmts + updates), stmt.body.span)
            sweep.stmts.append(ast.While(self.rename(self.quiet(stmt.cond), env), body, stmt.span))
        if carried:
            sweep.records.append(Compound(stmt, dict(env), carried, saved, kept, self.node_types.body))

    def keep_values(self, body: Sweep, inner: dict[str, str], sweep: Sweep) -> Kept:
        """A tape for the values a loop's iterations keep for its backward sweep, made before the loop."""
        tape = self.fresh("kept")
        sweep.stmts.append(let(tape, call("tape")))
        lets = [s for s in body.stmts if isinstance(s, ast.Let) and isinstance(s.pattern, ast.NamePattern)]
        written = {n.name for s in body.stmts if isinstance(s, ast.Let) for n in ast.pattern_names(s.pattern)}
        assigned = ast.assigned_names(tuple(body.stmts))
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
        assigned = ast.assigned_names(block)
        updates = [
            assign(name(outer), name(inner[user]), last_assignment(block, user))
            for user, outer in env.items()
            if inner[user] != outer and user in assigned
        ]
        return inner, sweep, updates

    def forward_block(self, block: ast.Block, env, sweep: Sweep, effects: bool) -> None:
        """A nested block's statements forward. A `let` in it that shadows an outer variable hides it only
        to the end of the block: `env` then names the outer variable's value again (as it was at the
        `let`: the block may have assigned it before)."""
        shadowed: dict[str, str] = {}
        with self.stepping(block):
            for stmt in block.body:
                for user in declared_names(stmt):
                    for key in (user, f"fn {user}"):
                        if key in env and key not in shadowed:
                            shadowed[key] = env[key]
                self.forward(stmt, env, sweep, nested=True, effects=effects)
        env.update(shadowed)


def last_assignment(block: ast.Block, user: str) -> Span:
    """Where `block` last assigns the variable `user` (outside nested functions): the span of the copy of its
    new value into the variable, which a run-time error there (a value of another shape) points at."""
    found = UNKNOWN_SPAN
    for node in ast.walk_scope(block):
        if isinstance(node, ast.Assign) and user in ast.target_names(node.target):
            found = node.span
    return found
