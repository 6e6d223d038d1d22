"""Control flow made ready for the sweeps, before A-normal form: `for` becomes `while`, `break`, `continue`
and `return` inside loops become flags (`LoopFlags`), and a `return` inside an `if` takes the statements after
the `if` into its branches (`lift_returns`), so every `return` ends its function's body. Before that, the
random draws the backward sweep runs again are given seeds (`seeded_draws`), so that it draws the same
numbers.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from dl.lang import ast
from dl.lang.autodiff.trees import (
    NotDifferentiable,
    as_stmts,
    assign,
    call,
    let,
    name,
    not_any,
    placeholder,
)
from dl.lang.check import zips
from dl.lang.diagnostics import UNKNOWN_SPAN, Span
from dl.lang.primitives import PRIMITIVES, Prim
from dl.lang.types import (
    ANY,
    I64,
    PrimitiveRef,
    StructType,
    TensorType,
    TupleType,
    Type,
    strong,
)

if TYPE_CHECKING:
    from dl.lang.autodiff.body import FunctionBody


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
                with self.body.stepping(then):
                    then_stmts, then_exits = self.guarded(list(then.body), loop)
                else_stmts, else_exits = self.guarded(list(as_stmts(orelse)), loop)
                new_else = ast.Block(tuple(else_stmts)) if orelse is not None else None
                new_then = ast.Block(tuple(then_stmts), then.span)
                marked = self.body.step_blocks.get(id(then))
                if marked is not None and marked[0] is then:
                    self.body.step_blocks[id(new_then)] = (new_then, marked[1])
                return [ast.If(cond, new_then, new_else, stmt.span)], then_exits | else_exits
            case ast.While(cond=cond, body=body):
                return self.loop(cond, list(body.body), [], loop, stmt.span)
            case ast.For() if unrolls(stmt, self.body):
                return self.unrolled(stmt, loop), set()
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
                let(self.return_value, placeholder(self.body.result_type, stmt.span, self.struct_name)),
            ]
            self.typed(self.prelude[-1].value, self.body.result_type)
        return self.returned, self.return_value

    def struct_name(self, t: StructType) -> ast.Expr:
        """How the derivative's module names struct `t` (qualified where another module declares it)."""
        return self.body.round.reference(self.body.path, t.module, t.name, UNKNOWN_SPAN)

    def typed(self, value: ast.Expr, t: Type) -> None:
        """Give a placeholder's nodes their types: `(0.0, zeros(3, dtype=f32))` for `(f32, f32[3])`."""
        self.body.node_types.give(value, t)
        if isinstance(value, ast.TupleLiteral) and isinstance(t, TupleType):
            for item, item_type in zip(value.items, t.items, strict=True):
                self.typed(item, item_type)
        elif isinstance(value, ast.StructLiteral) and isinstance(t, StructType):
            for init, (_, field_type) in zip(value.fields, t.fields, strict=True):
                self.typed(init.value, field_type)
        elif isinstance(value, ast.Call):
            self.body.node_types.give(value.func, PrimitiveRef(Prim.ZEROS))

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
            body.node_types.give(current, index_type)
            binds = [ast.Let(stmt.pattern, None, current, stmt.span)]
        else:
            items = body.fresh_user_name("items")
            before = [let(index, ast.IntLiteral(0)), let(items, stmt.iterable)]
            iterable_type = body.type_of(stmt.iterable)
            zipped = isinstance(iterable_type, TupleType) and zips(iterable_type, stmt.pattern)
            if over_items(stmt, iterable_type):
                return before, *self.tuple_iterations(stmt, iterable_type, items, index)
            binds = self.element_lets(stmt, items, index)
            leading = ast.Index(name(items), (ast.IntLiteral(0),)) if zipped else name(items)
            cond = ast.Binary("<", name(index), call("len", leading))
        step = ast.Binary("+", name(index), ast.IntLiteral(1))
        body.node_types.give(step, index_type)
        return before, cond, [*binds, assign(name(index), step), *stmt.body.body]

    def unrolled(self, stmt: ast.For, loop: LoopFlags | None) -> list[ast.Stmt]:
        """A loop over a tuple's items (`for layer in layers`) written out, one block per item: `let items =
        layers`, then for each k `let layer = items[k]` and the body, each block read with its item's types.
        Its derivative is then straight-line code, as if the user had written the layers out: no tape, no branch
        per item run again in the backward sweep, and compiled code for a body whose values change shape from
        item to item (`h = h @ layer.w`). A block is an `if true` the forward sweep writes in place
        (`FunctionBody.unrolled`): its `let`s end with it."""
        body = self.body
        items = body.fresh_user_name("items")
        out: list[ast.Stmt] = [let(items, stmt.iterable)]
        iterable = body.type_of(stmt.iterable)
        assert isinstance(iterable, TupleType)
        for _, block, step in self.item_blocks(stmt, iterable, items):
            with body.stepping(block):
                lowered = ast.Block(tuple(self.block(list(block.body), loop)), stmt.body.span)
            if step is not None:
                body.step_blocks[id(lowered)] = (lowered, step)
            written = ast.If(ast.BoolLiteral(True, stmt.span), lowered, None, stmt.span)
            body.unrolled[id(written)] = written
            out.append(written)
        return out

    def tuple_iterations(self, stmt: ast.For, iterable: TupleType, items: str, index: str):
        """The condition and body of a loop over a tuple's items, or over tuples zipped (`for (a, b) in
        (t, u)`), whose values may differ in type (the checker checks the body once for each step):
        `if position == 0 { let x = items[0]; body } else if ...`. (Where the body has no `break`, `continue`
        or `return`, the loop is `unrolled` instead.)"""
        body = self.body
        position = body.fresh_user_name("position")
        branches: ast.Stmt | None = None
        iterations = list(self.item_blocks(stmt, iterable, items))
        for k, block, _ in reversed(iterations):
            test = ast.Binary("==", name(position), ast.IntLiteral(k))
            branches = ast.If(test, block, branches, stmt.span)
        cond = ast.Binary("<", name(index), ast.IntLiteral(len(iterations)))
        steps = [let(position, name(index)), assign(name(index), ast.Binary("+", name(index), ast.IntLiteral(1)))]
        return cond, [*steps, *([branches] if branches is not None else [])]

    def item_blocks(self, stmt: ast.For, iterable: TupleType, items: str):
        """For each step of a loop over the items of the tuple named `items` (or over tuples zipped): its
        number, its block (`let x = items[k]` or `let (a, b) = (items[0][k], items[1][k])`, then the body), and
        the step the checker typed the body in, where the items differ in type (else None): the body's nodes,
        shared by the blocks, are read with the types of that step (`step_blocks`)."""
        body = self.body
        zipped = zips(iterable, stmt.pattern)

        def item(of: ast.Expr, of_type: Type, k: int) -> ast.Index:
            element = ast.Index(of, (ast.IntLiteral(k),))
            element_type = of_type.items[k] if isinstance(of_type, TupleType) else ANY
            if isinstance(of_type, TensorType) and of_type.dims:
                element_type = TensorType(of_type.dtype, of_type.dims[1:])
            body.node_types.give(element, element_type)
            return element

        def step_value(k: int) -> ast.Expr:
            if not zipped:
                return item(name(items), iterable, k)
            parts = [item(item(name(items), iterable, p), part, k) for p, part in enumerate(iterable.items)]
            value = ast.TupleLiteral(tuple(parts))
            body.node_types.give(value, TupleType(tuple(body.node_types.of(part) for part in parts)))
            return value

        count = len(iterable.items)
        if zipped:
            count = next(len(part.items) for part in iterable.items if isinstance(part, TupleType))
        loop = body.node_types.origin(stmt)
        steps = body.typed.steps_taken(loop, body.node_types.steps, body.node_types.body)

        def step_type(k: int) -> object:
            if not zipped:
                return strong(iterable.items[k])
            return tuple(strong(part.items[k]) if isinstance(part, TupleType) else part for part in iterable.items)

        # (the checker typed the body once for each type: code written for one would be wrong for the others)
        if steps is None and len({step_type(k) for k in range(count)}) > 1:
            raise NotDifferentiable(
                "`grad` cannot yet differentiate this loop over items of several types", stmt.iterable.span
            )
        for k in range(count):
            block = ast.Block((ast.Let(stmt.pattern, None, step_value(k), stmt.span), *stmt.body.body), stmt.body.span)
            step = (id(loop), steps[k]) if steps is not None else None
            if step is not None:
                body.step_blocks[id(block)] = (block, step)
            yield k, block, step

    def element_lets(self, stmt: ast.For, items: str, index: str) -> list[ast.Stmt]:
        body = self.body
        pattern = stmt.pattern
        if isinstance(pattern, ast.NamePattern):
            element = ast.Index(name(items), (name(index),))
            body.node_types.give(element, body.node_types.of(pattern) or ANY)
            return [ast.Let(pattern, None, element, stmt.span)]
        iterable_type = body.type_of(stmt.iterable)
        if isinstance(iterable_type, TupleType) and len(iterable_type.items) == len(pattern.items):
            lets = []
            for position, item in enumerate(pattern.items):
                element = ast.Index(ast.Index(name(items), (ast.IntLiteral(position),)), (name(index),))
                body.node_types.give(element, body.node_types.of(item) or ANY)
                lets.append(ast.Let(item, None, element, stmt.span))
            return lets
        raise NotDifferentiable("`grad` cannot yet differentiate this kind of `for` loop", stmt.span)


def over_items(loop: ast.For, iterable: Type) -> bool:
    """Whether `loop` steps through a tuple's items (`for layer in layers`), or through tuples zipped (`for (a, b)
    in (t, u)` with a tuple among them), rather than through a tensor's rows."""
    if not isinstance(iterable, TupleType):
        return False
    zipped = zips(iterable, loop.pattern)
    return not zipped or any(isinstance(item, TupleType) for item in iterable.items)


def unrolls(loop: ast.Stmt, body: FunctionBody) -> bool:
    """Whether the lowering writes `loop` out, a block per item (`Lowering.unrolled`): a `for` over a tuple's
    items with no `break`, `continue` or `return` in it (those keep the loop, their flags tested per step), and
    no rebinding the run checks (`h = h @ w` where `h` was not declared to change size: the loop's `h = ...`
    fails when run, as the function does without `grad`; written out, each value would be a `let` of its own)."""
    if not isinstance(loop, ast.For) or isinstance(loop.iterable, ast.Range):
        return False
    if not over_items(loop, body.type_of(loop.iterable)):
        return False
    checks = body.typed.runtime_checks
    for node in ast.walk_scope(loop.body):
        if isinstance(node, (ast.Break, ast.Continue, ast.Return)):
            return False
        if isinstance(node, ast.Assign) and (id(node) in checks or id(body.node_types.origin(node)) in checks):
            return False
    return True


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


def contains_return(stmt) -> bool:
    match stmt:
        case ast.Return():
            return True
        case ast.If(then=then, orelse=orelse):
            return any(contains_return(s) for s in then.body) or any(contains_return(s) for s in as_stmts(orelse))
    return False


def lift_returns(stmts: list[ast.Stmt], body: FunctionBody) -> list[ast.Stmt]:
    """Make every `return` the last statement of the body or of a branch of a final `if`. A `let` in a branch
    that hides a variable the statements after the `if` read is renamed first (`y` -> `y_2`): those statements
    move into the branch, where they read the outer variable."""
    for position, stmt in enumerate(stmts):
        if isinstance(stmt, ast.Return):
            return stmts[: position + 1]
        if isinstance(stmt, ast.If) and contains_return(stmt):
            rest = stmts[position + 1 :]
            read_after = ast.free_names(tuple(rest))
            branches = [unhidden(list(stmt.then.body), read_after, body)]
            branches.append(unhidden(list(as_stmts(stmt.orelse)), read_after, body))
            then = lift_returns([*branches[0], *rest], body)
            orelse = lift_returns([*branches[1], *rest], body)
            return [*stmts[:position], ast.If(stmt.cond, ast.Block(tuple(then)), ast.Block(tuple(orelse)), stmt.span)]
    return [*stmts, ast.Return(None)]


def unhidden(branch: list[ast.Stmt], read_after: set[str], body: FunctionBody) -> list[ast.Stmt]:
    """`branch` with each variable its `let`s declare that `read_after` names renamed, from its `let` on."""
    for position, stmt in enumerate(branch):
        if not isinstance(stmt, ast.Let):
            continue
        for hidden in (p.name for p in ast.pattern_names(stmt.pattern) if p.name in read_after):
            fresh = body.fresh_user_name(hidden)
            found: list[object] = [p for p in ast.pattern_names(stmt.pattern) if p.name == hidden]
            binding_uses(branch[position + 1 :], hidden, found)
            replacements = {
                id(node): ast.NamePattern(fresh, node.span)
                if isinstance(node, ast.NamePattern)
                else ast.Name(fresh, node.span)
                for node in found
            }
            renamed = list(ast.replace_nodes(tuple(branch[position:]), replacements))
            for before, after in zip(branch[position:], renamed, strict=True):
                body.node_types.carry(before, after)
            branch = [*branch[:position], *renamed]
            stmt = branch[position]
    return branch


def binding_uses(stmts, variable: str, found: list[object]) -> bool:
    """Add to `found` the names in `stmts` (a block's, after a `let` of `variable`) that read or assign that
    `let`'s variable, up to a declaration that hides it; True where one does (the block's rest is not its)."""
    for stmt in stmts:
        match stmt:
            case ast.Let(pattern=pattern, value=value):
                expression_uses(value, variable, found)
                if any(p.name == variable for p in ast.pattern_names(pattern)):
                    return True
            case ast.FnDecl(name=declared) if declared == variable:
                return True
            case ast.FnDecl(params=params, body=inner):
                function_uses(params, inner, variable, found)
            case ast.If(cond=cond, then=then, orelse=orelse):
                expression_uses(cond, variable, found)
                binding_uses(then.body, variable, found)
                binding_uses(as_stmts(orelse), variable, found)
            case ast.While(cond=cond, body=inner):
                expression_uses(cond, variable, found)
                binding_uses(inner.body, variable, found)
            case ast.For(pattern=pattern, iterable=iterable, body=inner):
                expression_uses(iterable, variable, found)
                if all(p.name != variable for p in ast.pattern_names(pattern)):
                    binding_uses(inner.body, variable, found)
            case _:
                expression_uses(stmt, variable, found)
    return False


def function_uses(params, inner, variable: str, found: list[object]) -> None:
    """The uses a nested function (or lambda) makes of `variable`, which it captures unless a parameter hides it."""
    if any(p.name == variable for p in params):
        return
    if isinstance(inner, ast.Block):
        binding_uses(inner.body, variable, found)
    else:
        expression_uses(inner, variable, found)


def expression_uses(node: object, variable: str, found: list[object]) -> None:
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, ast.Name) and current.id == variable:
            found.append(current)
        elif isinstance(current, ast.Lambda):
            function_uses(current.params, current.body, variable, found)
        else:
            stack.extend(ast.children(current))


class SeededDraws:
    """`seeded_draws`: the draws the backward sweep runs again, each given `seed=`: those in an `if`'s branches,
    and in a loop that the sweep runs again rather than keeps (one with a loop inside, a `break`, `continue` or
    `return`, which become `if`s, or a `for` over a tuple's items, an `if` per item). A loop that keeps its
    values (the common one) draws from the run's stream, at no cost."""

    def __init__(self, body: FunctionBody) -> None:
        self.body = body
        self.base = ""  # the names of the seed drawn ahead and of the count of draws, once a draw needs them
        self.count = ""

    def block(self, stmts, again: bool) -> list[ast.Stmt]:
        """`stmts`, their draws seeded where they run `again` in the backward sweep."""
        out: list[ast.Stmt] = []
        for stmt in stmts:
            match stmt:
                case ast.If(then=then, orelse=orelse):
                    new_else = orelse
                    if isinstance(orelse, ast.Block):
                        new_else = ast.Block(tuple(self.block(orelse.body, True)), orelse.span)
                    elif isinstance(orelse, ast.If):
                        (new_else,) = self.block([orelse], True)
                    new_then = ast.Block(tuple(self.block(then.body, True)), then.span)
                    out.append(dataclasses.replace(stmt, then=new_then, orelse=new_else))
                case ast.While(body=inner) | ast.For(body=inner):
                    new_body = ast.Block(tuple(self.block(inner.body, again or self.runs_again(stmt))), inner.span)
                    out.append(dataclasses.replace(stmt, body=new_body))
                    self.body.node_types.derive(stmt, out[-1])  # (a `for` over a tuple: its steps are found by it)
                case _ if again:
                    out += self.seeded(stmt)
                case _:
                    out.append(stmt)
        return out

    def runs_again(self, loop: ast.While | ast.For) -> bool:
        """Does the backward sweep run this loop's iterations again (rather than keep their values on tapes)?"""
        if unrolls(loop, self.body):  # (written out: each item's block runs once, as straight-line code)
            return False
        inner = (ast.While, ast.For, ast.Break, ast.Continue, ast.Return)  # (an `if`'s branches: seeded as such)
        if any(isinstance(n, inner) and not unrolls(n, self.body) for n in ast.walk_scope(loop.body)):
            return True
        return isinstance(loop, ast.For) and isinstance(self.body.type_of(loop.iterable), TupleType)

    def seeded(self, stmt: ast.Stmt) -> list[ast.Stmt]:
        """`stmt` with its unseeded draws given seeds, after the count of draws goes up by their number."""
        draws = [n for n in ast.walk_scope(stmt) if isinstance(n, ast.Call) and self.unseeded(n)]
        if not draws:
            return [stmt]
        if not self.base:
            self.base = self.body.fresh_user_name("draw_seed")
            self.count = self.body.fresh_user_name("draws")
        replacements = {}
        for k, draw in enumerate(draws):  # the count before the statement, plus k
            seed = self.integer(ast.Binary("-", name(self.count), ast.IntLiteral(len(draws) - k)))
            seed = self.integer(ast.Binary("+", name(self.base), seed))
            seeded = dataclasses.replace(draw, keywords=(*draw.keywords, ast.Keyword("seed", seed, draw.span)))
            self.body.node_types.carry(draw, seeded)
            replacements[id(draw)] = seeded
        new = ast.replace_nodes(stmt, replacements)
        self.body.node_types.carry(stmt, new)
        counted = self.integer(ast.Binary("+", name(self.count), ast.IntLiteral(len(draws))))
        return [assign(name(self.count), counted, stmt.span), new]

    def unseeded(self, node: ast.Call) -> bool:
        callee = self.body.type_of(node.func)
        if not (isinstance(callee, PrimitiveRef) and PRIMITIVES[callee.prim].random):
            return False
        seed = next((k.value for k in node.keywords if k.name == "seed"), None)
        return seed is None or (isinstance(seed, ast.Name) and seed.id == "none")

    def integer(self, node: ast.Expr) -> ast.Expr:
        self.body.node_types.give(node, I64)
        return node

    def prelude(self) -> list[ast.Stmt]:
        """The seed, one draw from the run's stream (so each run of the function draws other numbers), and the
        count of draws made."""
        draw = call("rand", dtype=name("f64"))
        scaled = ast.Binary("*", draw, ast.FloatLiteral(4294967296.0))
        for node in (draw, scaled):
            self.body.node_types.give(node, TensorType("f64"))
        self.body.node_types.give(draw.func, PrimitiveRef(Prim.RAND))
        seed = self.integer(call("int", scaled))
        self.body.node_types.give(seed.func, PrimitiveRef(Prim.INT))
        return [let(self.base, seed), let(self.count, self.integer(ast.IntLiteral(0)))]


def seeded_draws(body: FunctionBody, stmts: list[ast.Stmt]) -> list[ast.Stmt]:
    """The random draws without `seed=` that the backward sweep runs again (`SeededDraws`), given one:
    `draw_seed + k` for the `k`-th draw the function makes there, `draw_seed` drawn once from the run's stream
    ahead of them. The backward sweep runs a branch again (and an iteration of a loop with a loop inside), the
    variables it assigns restored, the count of draws among them: the same seeds draw the same numbers, where
    the run's stream would give others, a gradient for noise the value never saw."""
    seeding = SeededDraws(body)
    out = seeding.block(stmts, again=False)
    return [*seeding.prelude(), *out] if seeding.base else stmts
