"""Simplifying generated code: `prune` drops `let`s nothing reads and propagates copies; the folds turn
`zeros_like(x) + d` and `tree_add(zeros_like(x), d)` starts (of a variable, or of a struct's field), `*1` and literal
arithmetic into what a person would write. Calls of effects
(`EFFECT_NAMES`) and of functions with effects are never dropped.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable

from dl.lang import ast
from dl.lang.autodiff.trees import call, let
from dl.lang.diagnostics import Span
from dl.lang.primitives import EFFECTS, VOLATILE

# Calls never dropped, even when nothing reads their result: the effects (`save` writes a file), and the
# calls whose value changes from call to call (`time()`: a reading kept where the program takes it).
EFFECT_NAMES = frozenset(prim.value for prim in EFFECTS | VOLATILE)


# What `fold_struct_starts` needs to know of a variable that holds a struct: the struct's name as the generated
# code writes it (at a span) and its fields, in order; None for a variable that holds no struct
StructOf = Callable[[str], tuple[Callable[[Span], ast.Expr], tuple[str, ...]] | None]


def prune(
    stmts: list[ast.Stmt], effectful: frozenset[str] = frozenset(), structs: StructOf | None = None
) -> list[ast.Stmt]:
    """Drop `let`s of values nothing reads (the forward values the backward sweep does not need), and
    copies: `let a = b` of names never assigned again makes `a` another name for `b`. Calls of the
    functions named in `effectful` (which print or assert) stay.

    Dropping a statement can only leave the names it read unread, so a worklist finds every dead
    statement in one pass over the code, however long the chains of dead values are."""
    effects = EFFECT_NAMES | effectful
    stmts = propagate_copies(stmts)
    readers: dict[str, int] = {}  # each name: how many statements read it
    droppable: dict[str, list] = {}  # each name: the `let`s and assignments of it that call nothing effectful
    reads: dict[int, set[str]] = {}  # what each droppable statement reads
    for stmt in ast.walk(tuple(stmts)):
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
    stmts = fold_zero_starts(stmts)
    return fold_struct_starts(stmts, structs) if structs is not None else stmts


def prune_sweeps(
    stmts: list[ast.Stmt], tapes: frozenset[str], effectful: frozenset[str] = frozenset()
) -> list[ast.Stmt]:
    """`prune`, and a backward sweep's loops left idle dropped: those whose work nothing reads, once zeros.py
    removed what they computed (the adjoint of a result nothing reads), which would pop their tapes for
    nothing. Only the backward sweep's loops, `while len(tape) > 0` of one of its `tapes`: a loop of the
    program's own runs as written, whatever it computes (an index out of range is still an error, a loop
    without end does not end)."""
    stmts = prune(stmts, effectful)
    idle = idle_loops(stmts, tapes, EFFECT_NAMES | effectful)
    while idle:  # (what they read may now be unread)
        stmts = prune(filter_blocks(stmts, lambda stmt, idle=idle: id(stmt) not in idle), effectful)
        idle = idle_loops(stmts, tapes, EFFECT_NAMES | effectful)
    return stmts


def idle_loops(stmts: list[ast.Stmt], tapes: frozenset[str], effects: frozenset[str]) -> set[int]:
    """The backward sweep's loops (`while len(tape) > 0`, a tape of `tapes`) whose work nothing reads: each
    variable one assigns is named nowhere outside it (neither after it, nor before it, where an enclosing
    loop's next iteration would read it), and nothing in it prints, asserts or calls what does."""
    everywhere = Counter(n.id for n in ast.walk(tuple(stmts)) if isinstance(n, ast.Name))
    idle: set[int] = set()
    for loop in ast.walk(tuple(stmts)):
        if not (isinstance(loop, ast.While) and pops_a_tape(loop.cond, tapes)):
            continue
        if any(isinstance(n, ast.ExprStmt | ast.Return) for n in ast.walk(loop.body)) or calls_any(loop, effects):
            continue
        inside = Counter(n.id for n in ast.walk(loop) if isinstance(n, ast.Name))
        if all(everywhere[name] == inside[name] for name in ast.assigned_names(loop)):
            idle.add(id(loop))
    return idle


def pops_a_tape(cond: ast.Expr, tapes: frozenset[str]) -> bool:
    """Is `cond` a backward sweep's loop condition, `len(tape) > 0` (`condition_of`) of one of its `tapes`?"""
    match cond:
        case ast.Binary(
            op=">", lhs=ast.Call(func=ast.Name(id="len"), args=(ast.Name(id=tape),)), rhs=ast.IntLiteral(value=0)
        ):
            return tape in tapes
    return False


def dropped_name(stmt) -> str | None:
    """The name whose value a `let` or an assignment computes, for `prune`; None for other statements."""
    if isinstance(stmt, ast.Let) and isinstance(stmt.pattern, ast.NamePattern):
        return stmt.pattern.name
    if isinstance(stmt, ast.Assign) and not isinstance(stmt.target, ast.TupleLiteral):
        return ast.root_name(stmt.target)
    return None


def propagate_copies(stmts: list[ast.Stmt]) -> list[ast.Stmt]:
    assigned = ast.assigned_names(tuple(stmts))
    declared: dict[str, int] = {}
    for node in ast.walk(tuple(stmts)):
        if isinstance(node, ast.NamePattern):
            declared[node.name] = declared.get(node.name, 0) + 1
    copies = {
        id(stmt): (stmt.pattern.name, stmt.value)
        for stmt in ast.walk(tuple(stmts))
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
        if isinstance(node, (ast.FloatLiteral, ast.IntLiteral)):  # a node of its own at each use: the checker
            return dataclasses.replace(node)  # gives a literal a dtype by its node (`arange(2)` and `x / 2`)
        return node

    stmts = filter_blocks(stmts, lambda stmt: id(stmt) not in copies)
    renames = {
        id(node): resolve(node) for node in ast.walk(tuple(stmts)) if isinstance(node, ast.Name) and node.id in alias
    }
    return [fold_constants(stmt) for stmt in ast.replace_nodes(tuple(stmts), renames)]


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
    for stmt in (in_blocks(stmt, fold_zero_starts) for stmt in stmts):
        if out and undoes_copy(out[-1], stmt):
            continue  # `let w = v` then `v = w`
        added = self_increment(stmt)
        start = last_mention(out, stmt.target.id) if added is not None else None
        if start is not None and zero_start(out[start]) == stmt.target.id:
            zeroed = out.pop(start)
            folded = dataclasses.replace(zeroed, value=added)
            if start != len(out):  # statements in between: the value is only ready here
                folded = let(stmt.target.id, added) if isinstance(zeroed, ast.Let) else stmt
                folded = dataclasses.replace(folded, value=added)
            if not (out and undoes_copy(out[-1], folded)):
                out.append(folded)
            continue
        if start is not None and tuple_start(out, start, stmt.target.id, added):
            started = out.pop(start)
            items = zip(started.value.items, added.items, strict=True)
            value = ast.TupleLiteral(tuple(added_items(a, b) for a, b in items), started.value.span)
            folded = dataclasses.replace(started, value=value)
            if start != len(out):  # after the statements in between (they neither read `v` nor assign its items)
                folded = (
                    let(stmt.target.id, value)
                    if isinstance(started, ast.Let)
                    else dataclasses.replace(stmt, value=value)
                )
            out.append(folded)
            continue
        out.append(stmt)
    return fold_field_starts(out)


def tuple_start(out: list[ast.Stmt], start: int, var: str, added: ast.Expr) -> bool:
    """Whether `out[start]` sets `var` to a tuple literal that the increment by the tuple literal `added` can be
    added into, item by item, where the increment is: no statement in between assigns a name it reads."""
    started = out[start]
    if not (isinstance(added, ast.TupleLiteral) and isinstance(getattr(started, "value", None), ast.TupleLiteral)):
        return False
    if isinstance(started, ast.Let):
        named = isinstance(started.pattern, ast.NamePattern) and started.pattern.name == var
        if not named or started.annotation is not None:
            return False
    elif not (isinstance(started, ast.Assign) and started.op == "=" and isinstance(started.target, ast.Name)):
        return False
    if len(started.value.items) != len(added.items):
        return False
    read = {n.id for n in ast.walk(started.value) if isinstance(n, ast.Name)}
    return not (ast.assigned_names(tuple(out[start + 1 :])) & read)


def added_items(a: ast.Expr, b: ast.Expr) -> ast.Expr:
    """`tree_add(a, b)` of two items of adjoint tuples, where zeros (`zeros_like(...)`) add nothing."""
    if is_zeros(a):
        return b
    if is_zeros(b):
        return a
    return call("tree_add", a, b)


def is_zeros(node: ast.Expr | None) -> bool:
    """Is `node` a `zeros_like(...)` call?"""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "zeros_like"


def fold_field_starts(stmts: list[ast.Stmt]) -> list[ast.Stmt]:
    """After `v = zeros_like(...)` (or `let`), each field's first `v.f += c` becomes `v.f = c`, as long as the
    statements in between only set other fields of `v`: a struct's adjoint then holds each field's gradient
    itself, not a zero array that it was added to (for a 64x2048 weight, an addition that cost more than
    the Adam step's arithmetic on it)."""
    out = list(stmts)
    for start, stmt in enumerate(stmts):
        var = zero_start(stmt)
        if var is None:
            continue
        written: set[str] = set()
        for position in range(start + 1, len(out)):
            field = field_increment(out[position], var)
            if field is None:
                if mentions(out[position], var):
                    break
                continue
            if field not in written:
                written.add(field)
                out[position] = dataclasses.replace(out[position], op="=")
    return out


def fold_struct_starts(stmts: list[ast.Stmt], structs: StructOf) -> list[ast.Stmt]:
    """`let v = zeros_like(x)` of a struct `x`, then each of its fields assigned once (`v.f = c`, as
    `fold_field_starts` leaves a struct's adjoint) before anything else reads or writes `v`, becomes one
    `let v = S { f: c, ... }` where the last field is assigned: no struct of zeros made only to be
    overwritten (at width 2048, 600 KB of zeros a training step). In nested blocks too."""
    out = [in_blocks(stmt, lambda block: fold_struct_starts(block, structs)) for stmt in stmts]
    position = 0
    while position < len(out):
        folded = struct_start(out, position, structs)
        if folded is not None:
            out = folded
        else:
            position += 1
    return out


def struct_start(out: list[ast.Stmt], start: int, structs: StructOf) -> list[ast.Stmt] | None:
    """`out` with the struct start at `start` folded (`fold_struct_starts`), or None when it is none."""
    stmt = out[start]
    if not (isinstance(stmt, ast.Let) and isinstance(stmt.pattern, ast.NamePattern) and stmt.annotation is None):
        return None
    value = stmt.value
    if not (is_zeros(value) and len(value.args) == 1 and isinstance(value.args[0], ast.Name) and not value.keywords):
        return None
    known = structs(value.args[0].id)
    if known is None:
        return None
    name_at, fields = known
    var = stmt.pattern.name
    assigned: dict[str, tuple[int, ast.Expr]] = {}
    for position in range(start + 1, len(out)):
        field = field_assignment(out[position], var)
        if field is not None and field in fields and field not in assigned:
            assigned[field] = (position, out[position].value)
            if len(assigned) == len(fields):
                break
        elif mentions(out[position], var):
            return None
    if len(assigned) != len(fields):
        return None
    last = max(position for position, _ in assigned.values())
    for position, field_value in assigned.values():  # each value still what it was when assigned
        read = {n.id for n in ast.walk(field_value) if isinstance(n, ast.Name)}
        if ast.assigned_names(tuple(out[position + 1 : last])) & read:
            return None
    literal = ast.StructLiteral(
        name_at(stmt.span), tuple(ast.FieldInit(f, assigned[f][1], stmt.span) for f in fields), stmt.span
    )
    gone = {start} | {position for position, _ in assigned.values()}
    folded = [s for i, s in enumerate(out[: last + 1]) if i not in gone]
    return [*folded, dataclasses.replace(stmt, value=literal), *out[last + 1 :]]


def field_increment(stmt: ast.Stmt, var: str) -> str | None:
    """The field `f` when `stmt` is `var.f += c` with `c` not reading `var`; None otherwise."""
    return field_update(stmt, var, "+=")


def field_assignment(stmt: ast.Stmt, var: str) -> str | None:
    """The field `f` when `stmt` is `var.f = c` with `c` not reading `var`; None otherwise."""
    return field_update(stmt, var, "=")


def field_update(stmt: ast.Stmt, var: str, op: str) -> str | None:
    if not (isinstance(stmt, ast.Assign) and stmt.op == op and isinstance(stmt.target, ast.Field)):
        return None
    target = stmt.target.target
    if not (isinstance(target, ast.Name) and target.id == var) or mentions(stmt.value, var):
        return None
    return stmt.target.name


def mentions(node, var: str) -> bool:
    return any(
        isinstance(n, (ast.Name, ast.NamePattern)) and getattr(n, "id", getattr(n, "name", None)) == var
        for n in ast.walk(node)
    )


def self_increment(stmt: ast.Stmt) -> ast.Expr | None:
    """`c` when `stmt` increments a variable by `c` (`increment`)."""
    if isinstance(stmt, ast.Assign) and isinstance(stmt.target, ast.Name):
        return increment(stmt, stmt.target.id)
    return None


def last_mention(stmts: list[ast.Stmt], var: str) -> int | None:
    """The position of the last statement that mentions `var`, if any."""
    for position in range(len(stmts) - 1, -1, -1):
        if mentions(stmts[position], var):
            return position
    return None


def in_blocks(stmt: ast.Stmt, fold: Callable[[list[ast.Stmt]], list[ast.Stmt]]) -> ast.Stmt:
    """`stmt` with `fold` applied to the statements of the blocks of an `if` or `while`; any other as it is."""
    match stmt:
        case ast.If(cond=cond, then=then, orelse=orelse):
            new_else = orelse
            if isinstance(orelse, ast.Block):
                new_else = ast.Block(tuple(fold(list(orelse.body))), orelse.span)
            return ast.If(cond, ast.Block(tuple(fold(list(then.body))), then.span), new_else, stmt.span)
        case ast.While(cond=cond, body=body):
            return ast.While(cond, ast.Block(tuple(fold(list(body.body))), body.span), stmt.span)
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
    if not is_zeros(getattr(stmt, "value", None)):
        return None
    if isinstance(stmt, ast.Let) and isinstance(stmt.pattern, ast.NamePattern):
        return stmt.pattern.name
    if isinstance(stmt, ast.Assign) and stmt.op == "=" and isinstance(stmt.target, ast.Name):
        return stmt.target.id
    return None


def increment(stmt: ast.Stmt, var: str) -> ast.Expr | None:
    """`c` when `stmt` is `var = var + c`, or `var = tree_add(var, c)` (how an adjoint that is a tuple, struct
    or tape is added to), with `c` not reading `var`; None otherwise."""
    if not (isinstance(stmt, ast.Assign) and stmt.op == "=" and isinstance(stmt.target, ast.Name)):
        return None
    value = stmt.value
    if stmt.target.id != var:
        return None
    if isinstance(value, ast.Binary) and value.op == "+":
        base, added = value.lhs, value.rhs
    elif (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id == "tree_add"
        and len(value.args) == 2
        and not value.keywords
    ):
        base, added = value.args
    else:
        return None
    if not (isinstance(base, ast.Name) and base.id == var) or mentions(added, var):
        return None
    return added


def names_read_by(stmt) -> set[str]:
    """The names a statement reads other than in an update of themselves (`d_x = d_x + c`, `d_x[i] += c`): a
    variable only its own updates read is dead, updates included. An `if` or `while` reads its condition
    (its blocks' statements are statements of their own); nodes that are not statements read nothing."""
    if isinstance(stmt, (ast.Let, ast.Assign)):
        itself = ast.root_name(stmt.target) if isinstance(stmt, ast.Assign) else None
        reads = {n.id for n in ast.walk(stmt.value) if isinstance(n, ast.Name) and n.id != itself}
        if isinstance(stmt, ast.Assign):
            reads |= {n.id for n in ast.walk(stmt.target) if isinstance(n, ast.Name) and n.id != itself}
            if isinstance(stmt.target, ast.TupleLiteral):
                reads |= ast.assigned_names(stmt)
        return reads
    if isinstance(stmt, (ast.If, ast.While)):
        return {n.id for n in ast.walk(stmt.cond) if isinstance(n, ast.Name)}
    if isinstance(stmt, (ast.Return, ast.ExprStmt)):
        return {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)}
    return set()


def calls_any(expr, functions: set[str] | frozenset[str]) -> bool:
    """Does `expr` call one of `functions` (by name, or as `module.name`)?"""
    for n in ast.walk(expr):
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
