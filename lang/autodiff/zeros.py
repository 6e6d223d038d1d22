"""Zero adjoints, followed: a pass over the functions one round generated (`drop_zeros(round_)`).

A backward sweep starts some adjoints at zero and runs the code that would carry them back: the adjoint of a
result the caller does not use (`let (loss, state) = step(x)` reading `loss` alone gives `step_bwd` zeros for
`state`), of what a loop's last iteration makes that nothing after the loop reads, of the aux of `has_aux`.
That code costs a sweep, and it is not zero where a derivative is infinite: zeros through `sqrt` at 0 are
`0 * inf`, NaN, added into a gradient that nothing there flows into. PyTorch never computes them (an unused
output has no gradient) and JAX's zeros are symbolic; so here.

What is known to be zeros is followed forwards through the statements that hold adjoints (`AdjointVariables`):
`zeros_like(...)`, a product with zeros, a linear primitive of zeros (`linear_in` in the primitive table), an
item of a tuple of them; through `if` (zeros on both branches) and loops (zeros at every iteration, found as a
fixed point; a backward loop's first iteration, which may know more, written apart). A literal 0 keeps the
zeros of a sum or a `where` but starts none: the program's own `x * 0.0` is NaN at infinity, as in PyTorch.
The backward sweep's loops left with nothing to do are dropped (`prune_sweeps`).
A struct's adjoint is followed field by field (`Fields`), a tape of zeros as zeros (`push` and `pop` are
linear); not followed: a tape's entries item by item (a second derivative's tape of `(d_h, d_r)` with `d_r`
zeros is not known). Then:

- adding zeros into an adjoint (`d_x = d_x + c`, `d_x += c`) is dropped, and so is assigning zeros to an adjoint
  that already holds zeros;
- a value known to be zeros that the code computes (`d / (2.0 * t)`) becomes `zeros_like` of it, so that it is
  zeros wherever it is read; the `let`s of those nothing reads any more are pruned;
- a call of a generated adjoint function (`g_bwd`, `g_back`) given zeros (`d_result`, or items of it) goes to a
  copy written for those zeros (`g_bwd_zero_1`), whose own calls are followed the same way; what a call
  returns is known to be zeros where the callee returns zeros (the adjoint of a parameter nothing flows to).

Code of the forward sweep is left as it is: zeros there are the program's own values, which compute as they do
in the program (`zeros_like(x) * log(x)` is NaN at 0 there too).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from dl.lang import ast
from dl.lang.autodiff.rules import bound_arguments
from dl.lang.autodiff.simplify import pops_a_tape, prune_sweeps
from dl.lang.autodiff.trees import assign, call, let, unused_name
from dl.lang.autodiff.trim import callee_key, renamed
from dl.lang.calls import BindingError
from dl.lang.primitives import BY_NAME, PRIMITIVES

if TYPE_CHECKING:
    from dl.lang.autodiff.round import Round

Key = tuple[str, str]  # (module path, function name)


@dataclasses.dataclass(frozen=True, slots=True)
class AdjointVariables:
    """What this pass reads of a function the round wrote (`Round.note_adjoints`): the variables that hold
    adjoints, those of them whose shape no loop changes, and the tapes its backward sweep's loops pop."""

    names: frozenset[str]
    fixed: frozenset[str]
    tapes: frozenset[str]


@dataclasses.dataclass(frozen=True, slots=True)
class Fields:
    """What is known of a struct: of the fields `named`, each its own; of the others, `rest` (True after
    `zeros_like` of the struct, whose fields are then set one by one: `d_p.b = 1.0`)."""

    named: tuple[tuple[str, Zeros], ...]
    rest: Zeros = False

    def of(self, field: str) -> Zeros:
        return next((known for name, known in self.named if name == field), self.rest)

    def with_field(self, field: str, known: Zeros) -> Zeros:
        named = tuple(sorted({**dict(self.named), field: known}.items()))
        return knowing(Fields(named, self.rest))


# What is known of a value: True, zeros; False, nothing; a tuple, item by item; a struct, field by field
Zeros = bool | tuple["Zeros", ...] | Fields


def drop_zeros(round_: Round) -> None:
    """Rewrite `round_.added` so that no code runs on adjoints known to be zeros."""
    Following(round_).run()


def join(a: Zeros, b: Zeros) -> Zeros:
    """What is known after one of two paths, each knowing `a` and `b`."""
    if a is True and b is True:
        return True
    if isinstance(a, Fields) or isinstance(b, Fields):
        a, b = as_fields(a), as_fields(b)
        if a is None or b is None:
            return False
        names = sorted({name for name, _ in a.named} | {name for name, _ in b.named})
        return knowing(Fields(tuple((n, join(a.of(n), b.of(n))) for n in names), join(a.rest, b.rest)))
    if isinstance(a, tuple) or isinstance(b, tuple):
        size = len(a) if isinstance(a, tuple) else len(b)
        a_items = a if isinstance(a, tuple) else (a,) * size
        b_items = b if isinstance(b, tuple) else (b,) * size
        if len(a_items) == len(b_items):
            return tuple(join(x, y) for x, y in zip(a_items, b_items, strict=True))
    return False


def as_fields(known: Zeros) -> Fields | None:
    if isinstance(known, Fields):
        return known
    return Fields((), known) if isinstance(known, bool) else None


def knowing(fields: Fields) -> Zeros:
    """`fields`, or the plainer True or False where that says the same."""
    if all(known is fields.rest for _, known in fields.named) and isinstance(fields.rest, bool):
        return fields.rest
    return fields if any_zeros(fields) else False


def any_zeros(known: Zeros) -> bool:
    if isinstance(known, Fields):
        return any_zeros(known.rest) or any(any_zeros(item) for _, item in known.named)
    return known is True or (isinstance(known, tuple) and any(any_zeros(item) for item in known))


def known_items(items: tuple[Zeros, ...]) -> Zeros:
    """What is known of a tuple of `items`: nothing, where nothing is known of any."""
    return items if any(any_zeros(item) for item in items) else False


def all_zeros(known: Zeros) -> bool:
    if isinstance(known, Fields):
        return all_zeros(known.rest) and all(all_zeros(item) for _, item in known.named)
    return known is True or (isinstance(known, tuple) and all(all_zeros(item) for item in known))


def join_states(a: dict[str, Zeros], b: dict[str, Zeros]) -> dict[str, Zeros]:
    return {var: join(known, b[var]) for var, known in a.items() if var in b}


@dataclasses.dataclass(frozen=True, slots=True)
class Value:
    """An expression rewritten, what is known of it, and whether it is `exact`: zeros when it runs wherever it is
    known to be zeros. A variable is (what is known to be zeros of it was made exact before it was bound), and
    so is `zeros_like(...)`, a literal 0, or a linear function of those; a product with zeros is known to be
    zeros but computes what it computes (NaN for `0 * inf`)."""

    expr: ast.Expr
    known: Zeros = False
    exact: bool = True
    # a literal 0 (`where(c, d, 0.0)`): it keeps the zeros of an operation linear in it and others, but is not
    # known to be zeros itself: the program's own `x * 0.0` computes as PyTorch's does (NaN for `inf * 0.0`)
    literal_zero: bool = False


class Following:
    """The functions of one round, each followed from what its callers give it (`followed`)."""

    def __init__(self, round_: Round) -> None:
        self.round = round_
        self.functions: dict[Key, ast.FnDecl] = {
            (path, decl.name): decl for path, decls in round_.added.items() for decl in decls
        }
        self.originals = dict(self.functions)  # as generated: what copies are made from
        self.done: dict[tuple[Key, tuple[Zeros, ...]], tuple[str, Zeros]] = {}  # -> (its name, what it returns)
        self.copies: set[Key] = set()

    def run(self) -> None:
        for key, decl in self.originals.items():
            if key in self.round.adjoint_variables and self.round.adjoint_variables[key].names:
                self.followed(key, (False,) * len(decl.params))
        self.drop_unnamed()
        for path in self.round.added:
            self.round.added[path] = [decl for (where, _), decl in self.functions.items() if where == path]
        self.round.adjoint_copies |= self.copies

    def followed(self, key: Key, given: tuple[Zeros, ...]) -> tuple[str, Zeros]:
        """The name of the function `key` written for its parameters known as `given` (itself where nothing is
        known of them), and what is known of its result."""
        if (key, given) in self.done:
            return self.done[(key, given)]
        path, function = key
        name = function
        if any(known is not False for known in given):
            zeros = "_".join(part for known in given for part in zero_places(known))
            name = self.round.fresh_global(path, f"{function}_zero_{zeros}" if zeros else f"{function}_zero")
            self.round.adjoint_variables[(path, name)] = self.round.adjoint_variables[key]
            self.copies.add((path, name))
        self.done[(key, given)] = (name, False)  # (a recursive call meets it unknown)
        original = self.originals[key]
        body = Body(self, path, key)
        state = {p.name: known for p, known in zip(original.params, given, strict=True) if p.name in body.adjoints}
        stmts = body.block(original.body.body, state)
        stmts = prune_sweeps(stmts, body.tapes, self.round.effectful())
        self.functions[(path, name)] = dataclasses.replace(original, name=name, body=ast.Block(tuple(stmts)))
        returned = body.returned if body.returned is not None else False
        self.done[(key, given)] = (name, returned)
        return name, returned

    def adjoint_call(self, path: str, func: ast.Expr) -> Key | None:
        """The generated function a call's callee names, if it takes adjoints."""
        key = callee_key(self.round.program, path, func)
        known = self.round.adjoint_variables.get(key)
        return key if key in self.originals and known is not None and known.names else None

    def drop_unnamed(self) -> None:
        """Drop the copies no function names: made for what a loop's variables were thought to hold before its
        fixed point was found, or named only by such copies. (The functions no code names any more, every
        call having gone to a copy, are `trim`'s to drop.)"""
        decls = [decl for module in self.round.program.modules.values() for decl in module.decls]
        while True:
            named = {
                node.id if isinstance(node, ast.Name) else node.name
                for node in ast.walk((*decls, *self.functions.values()))
                if isinstance(node, ast.Name | ast.Field)
            }
            unnamed = {key for key in self.copies if key[1] not in named}
            if not unnamed:
                return
            for key in unnamed:
                del self.functions[key]
            self.copies -= unnamed


def zero_places(known: Zeros, prefix: str = "") -> list[str]:
    """Where `known` says zeros, as item positions (`0`, `1_2` for item 2 of item 1): a copy's name."""
    if known is True:
        return [prefix or "all"]
    if isinstance(known, tuple):
        return [p for k, item in enumerate(known) for p in zero_places(item, f"{prefix}_{k}" if prefix else str(k))]
    if isinstance(known, Fields) and known.rest is True:  # zeros but the fields set: `_zero_but_b`
        others = "_".join(n for n, item in known.named if not all_zeros(item))
        return [f"{prefix}_but_{others}" if prefix else f"but_{others}"]
    if isinstance(known, Fields):
        return [p for n, item in known.named for p in zero_places(item, f"{prefix}_{n}" if prefix else n)]
    return []


class Body:
    """Follows the zeros through one function's statements, rewriting them (`block`)."""

    def __init__(self, following: Following, path: str, key: Key) -> None:
        self.following = following
        self.path = path
        variables = following.round.adjoint_variables[key]
        self.adjoints = variables.names
        self.tapes = variables.tapes  # (the backward sweep's loops pop these)
        self.names = ast.names_used(following.originals[key])  # (those a name made here must not meet)
        # those whose shape no loop changes: zeros assigned over zeros of one shape change nothing
        self.fixed = variables.fixed
        self.shadowed = set(following.round.declared(path))  # names that are not the built-ins there
        self.returned: Zeros | None = None

    def block(self, stmts, state: dict[str, Zeros]) -> list[ast.Stmt]:
        out: list[ast.Stmt] = []
        for stmt in stmts:
            out.extend(self.statement(stmt, state))
        return out

    def statement(self, stmt: ast.Stmt, state: dict[str, Zeros]) -> list[ast.Stmt]:
        match stmt:
            case ast.Let(pattern=pattern, value=value) if self.holds_adjoints(pattern):
                found = self.value(value, state)
                self.bind(pattern, found.known, state)
                return [dataclasses.replace(stmt, value=exactly(found))]
            case ast.Assign(target=target, op=op, value=value) if ast.root_name(target) in self.adjoints:
                return self.assignment(stmt, target, op, value, state)
            case ast.If(then=then, orelse=orelse):
                then_state = dict(state)
                new_then = ast.Block(tuple(self.block(then.body, then_state)), then.span)
                else_state = dict(state)
                new_else = orelse
                if isinstance(orelse, ast.Block):
                    new_else = ast.Block(tuple(self.block(orelse.body, else_state)), orelse.span)
                elif isinstance(orelse, ast.If):
                    (new_else,) = self.statement(orelse, else_state)
                state.clear()
                state.update(join_states(then_state, else_state))
                return [dataclasses.replace(stmt, then=new_then, orelse=new_else)]
            case ast.While(cond=cond, body=body) if pops_a_tape(cond, self.tapes):
                return self.backward_loop(stmt, body, state)
            case ast.While(body=body) | ast.For(body=body):
                entry = self.fixed_point(body, state)
                state.clear()
                state.update(entry)
                new_body = ast.Block(tuple(self.block(body.body, dict(entry))), body.span)
                return [dataclasses.replace(stmt, body=new_body)]
            case ast.Return(value=value) if value is not None:
                found = self.value(value, state)
                self.returned = found.known if self.returned is None else join(self.returned, found.known)
                return [dataclasses.replace(stmt, value=exactly(found))]
            case ast.Assign(target=target):  # the forward's variables (a tuple of them popped off a tape)
                for var in ast.walk(target):
                    if isinstance(var, ast.Name) and var.id in self.adjoints:
                        state[var.id] = False
        return [stmt]

    def backward_loop(self, stmt: ast.While, body: ast.Block, state: dict[str, Zeros]) -> list[ast.Stmt]:
        """A backward sweep's loop, its first iteration written apart where it knows more zeros than the rest:
        the last iteration of the forward loop, whose new values nothing read (`h = sqrt(h)` there, `h` not
        read after the loop), has zeros for their adjoints, which later iterations do not."""
        first_state = dict(state)
        first = ast.Block(tuple(self.block(body.body, first_state)), body.span)
        entry = self.fixed_point(body, join_states(state, first_state))  # (the loop may not run at all)
        state.clear()
        state.update(entry)
        rest = ast.Block(tuple(self.block(body.body, dict(entry))), body.span)
        if first == rest:
            return [dataclasses.replace(stmt, body=rest)]
        # the first iteration as a loop run at most once, not an `if`: a second derivative differentiates this
        # code, and a loop's pops it keeps on tapes, where an `if`'s it would run again (which compiled code,
        # whose tapes are popped in place, does not do)
        once = unused_name("first_iteration", self.names)
        span = stmt.span
        flag = ast.Name(once, span)
        first_only = ast.While(
            ast.Binary("and", flag, stmt.cond, span),
            ast.Block((*first.body, assign(flag, ast.BoolLiteral(False), span)), body.span),
            span,
        )
        return [let(once, ast.BoolLiteral(True), span), first_only, dataclasses.replace(stmt, body=rest)]

    def fixed_point(self, body: ast.Block, state: dict[str, Zeros]) -> dict[str, Zeros]:
        """What is known at the top of every iteration of a loop entered with `state`: what holds at its entry
        and after each iteration that starts from it."""
        entry = dict(state)
        while True:
            after = dict(entry)
            self.quietly(body.body, after)
            joined = join_states(entry, after)
            if joined == entry:
                return entry
            entry = joined

    def quietly(self, stmts, state: dict[str, Zeros]) -> None:
        """Follow `stmts` for what they leave known, keeping nothing of what they return."""
        returned = self.returned
        self.block(stmts, state)
        self.returned = returned

    def assignment(self, stmt: ast.Assign, target, op: str, value, state) -> list[ast.Stmt]:
        var = ast.root_name(target)
        before = state.get(var, False) if isinstance(target, ast.Name) else False
        found = self.value(value, state)
        if op == "=" and isinstance(value, ast.Binary) and value.op in ("+", "-"):
            added = None
            if same_place(value.lhs, target):
                added = value.rhs
            elif value.op == "+" and same_place(value.rhs, target):
                added = value.lhs
            if added is not None and self.value(added, state).known is True:
                return []  # `d_x = d_x + zeros`
        if op in ("+=", "-=") and found.known is True:
            return []  # `d_x += zeros`
        if op == "=" and before is True and found.known is True and var in self.fixed:
            return []  # zeros assigned over zeros of the same shape
        if isinstance(target, ast.Name):
            if op == "=":
                state[var] = found.known
            elif op in ("+=", "-="):
                state[var] = join(before, found.known)
            elif op == "*=":
                state[var] = before is True or product_zeros(found)
            else:
                state[var] = before
        elif isinstance(target, ast.Field) and isinstance(target.target, ast.Name):  # `d_p.b = ...`
            fields = as_fields(state.get(var, False))
            set_to = found.known if op == "=" else False  # (zeros added were dropped above)
            state[var] = fields.with_field(target.name, set_to) if fields is not None else False
        elif state.get(var, False) is not True or found.known is not True:
            state[var] = False  # a deeper field or an element of it set to something else
        return [dataclasses.replace(stmt, value=exactly(found))]

    def holds_adjoints(self, pattern: ast.Pattern) -> bool:
        return any(n.name in self.adjoints for n in ast.pattern_names(pattern))

    def bind(self, pattern: ast.Pattern, known: Zeros, state: dict[str, Zeros]) -> None:
        match pattern:
            case ast.NamePattern(name=var):
                if var in self.adjoints:
                    state[var] = known
            case ast.TuplePattern(items=items):
                for k, item in enumerate(items):
                    part = known[k] if isinstance(known, tuple) and k < len(known) else known is True
                    self.bind(item, part, state)

    # ------------------------------------------------------------------ expressions
    def value(self, expr: ast.Expr, state: dict[str, Zeros]) -> Value:
        """`expr` rewritten, and what is known of it: inside, what is known to be zeros but computed (a product
        with zeros) and read by something that is not zeros becomes `zeros_like` of it."""
        match expr:
            case ast.Name(id=var):
                return Value(expr, state.get(var, False))
            case ast.IntLiteral(value=0) | ast.FloatLiteral(value=0.0):
                return Value(expr, False, True, literal_zero=True)
            case ast.Unary(op="-", operand=operand):
                inner = self.value(operand, state)
                return Value(dataclasses.replace(expr, operand=inner.expr), inner.known is True, inner.exact)
            case ast.Binary(op="*" | "/" | "@", lhs=lhs, rhs=rhs):
                a, b = self.value(lhs, state), self.value(rhs, state)
                zeros = product_zeros(a) or (expr.op != "/" and product_zeros(b))
                return self.made(dataclasses.replace(expr, lhs=a.expr, rhs=b.expr), zeros, exact_zeros(a, b), (a, b))
            case ast.Binary(op="+" | "-", lhs=lhs, rhs=rhs):
                a, b = self.value(lhs, state), self.value(rhs, state)
                zeros = jointly_zeros((a, b))
                return self.made(dataclasses.replace(expr, lhs=a.expr, rhs=b.expr), zeros, a.exact and b.exact, (a, b))
            case ast.Index(target=target, indices=indices):
                inner = self.value(target, state)
                new = dataclasses.replace(expr, target=inner.expr)
                if isinstance(inner.known, tuple) and len(indices) == 1 and isinstance(indices[0], ast.IntLiteral):
                    position = indices[0].value
                    if -len(inner.known) <= position < len(inner.known):
                        return Value(new, inner.known[position], inner.exact)
                return Value(new, inner.known is True, inner.exact)
            case ast.Field(target=target, name=field):
                inner = self.value(target, state)
                known = inner.known.of(field) if isinstance(inner.known, Fields) else inner.known is True
                return Value(dataclasses.replace(expr, target=inner.expr), known, inner.exact)
            case ast.StructLiteral(fields=fields):
                values = [self.value(f.value, state) for f in fields]
                pairs = list(zip(fields, values, strict=True))
                new_fields = tuple(dataclasses.replace(f, value=exactly(v)) for f, v in pairs)
                named = tuple(sorted((f.name, v.known) for f, v in pairs))
                return Value(dataclasses.replace(expr, fields=new_fields), knowing(Fields(named)))
            case ast.TupleLiteral(items=items):
                values = [self.value(item, state) for item in items]
                new = dataclasses.replace(expr, items=tuple(exactly(v) for v in values))
                return Value(new, known_items(tuple(v.known for v in values)))
            case ast.Call(func=func):
                return self.call_value(expr, func, state)
        return Value(expr)

    def made(self, expr: ast.Expr, zeros: bool, exact: bool, parts: tuple[Value, ...]) -> Value:
        """An operation on `parts`: known to be zeros, or not (its operands' zeros made exactly zeros)."""
        if zeros:
            return Value(expr, True, exact)
        for part in parts:
            if part.known is True and not part.exact:
                expr = ast.replace_nodes(expr, {id(part.expr): zeros_of(part.expr)})
        return Value(expr)

    def call_value(self, expr: ast.Call, func: ast.Expr, state) -> Value:
        if isinstance(func, ast.Name) and func.id == "zeros_like" and func.id not in self.shadowed:
            return Value(expr, True, True)
        callee = self.following.adjoint_call(self.path, func)
        if callee is not None:
            decl = self.following.originals[callee]
            if expr.keywords or len(expr.args) != len(decl.params):
                return Value(expr)
            values = [self.value(arg, state) for arg in expr.args]
            adjoints = self.following.round.adjoint_variables[callee].names
            given = tuple(v.known if p.name in adjoints else False for p, v in zip(decl.params, values, strict=True))
            name, returned = self.following.followed(callee, given)
            new_func = renamed(func, name) if name != callee[1] else func
            args = tuple(exactly(v) for v in values)
            return Value(dataclasses.replace(expr, func=new_func, args=args), returned)
        prim = BY_NAME.get(func.id) if isinstance(func, ast.Name) and func.id not in self.shadowed else None
        primitive = PRIMITIVES.get(prim) if prim is not None else None
        if primitive is None or not primitive.linear_in:
            return Value(expr)
        try:
            named, variadic = bound_arguments(primitive, expr, None)
        except BindingError:  # (not a call of the built-in's signature: nothing is known of it)
            return Value(expr)
        linear = [named.get(p) for p in sorted(primitive.linear_in)]
        if primitive.signature.variadic is not None and primitive.signature.variadic[0] in primitive.linear_in:
            linear += variadic
        linear = [arg for arg in linear if isinstance(arg, ast.Expr)]
        if not linear:
            return Value(expr)
        parts = [self.value(arg, state) for arg in linear]
        rewritten = ast.replace_nodes(expr, {id(arg): part.expr for arg, part in zip(linear, parts, strict=True)})
        if primitive.product:
            zeros, exact = any(product_zeros(p) for p in parts), exact_zeros(*parts)
        else:
            zeros, exact = jointly_zeros(parts), all(p.exact for p in parts)
        return self.made(rewritten, zeros, exact, tuple(parts))


def product_zeros(factor: Value) -> bool:
    """Does `factor` make a product zeros? An adjoint known to be zeros does."""
    return factor.known is True


def jointly_zeros(parts) -> bool:
    """Is an operation linear in all of `parts` together zeros? Where each is known to be zeros, or a literal 0,
    and one at least is known (literals alone are the program's own arithmetic)."""
    known = [all_zeros(p.known) for p in parts]
    return any(known) and all(k or p.literal_zero for k, p in zip(known, parts, strict=True))


def exact_zeros(*factors: Value) -> bool:
    """Is a product of `factors` zeros when it runs? Where every factor is (else a zero times an infinity is NaN)."""
    return all((f.known is True or f.literal_zero) and f.exact for f in factors)


def exactly(found: Value) -> ast.Expr:
    """The expression, made to be zeros when it runs where it is known to be."""
    return zeros_of(found.expr) if found.known is True and not found.exact else found.expr


def zeros_of(expr: ast.Expr) -> ast.Expr:
    return call("zeros_like", expr)


def same_place(a: ast.Expr, b: ast.Expr) -> bool:
    """Do `a` and `b` name the same variable, or the same field of it?"""
    match a, b:
        case ast.Name(id=x), ast.Name(id=y):
            return x == y
        case ast.Field(target=x, name=f), ast.Field(target=y, name=g):
            return f == g and same_place(x, y)
    return False
