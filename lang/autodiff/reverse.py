"""The backward (reverse) sweep (`BackwardSweep`, part of `FunctionBody`): the forward sweep's records in
reverse order, each operation's contributions from its rule (rules.py: a primitive's record, or the rules
computed here, `COMPUTED`), each `if` and `while` restored and run again backwards.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from dl.lang import ast
from dl.lang import einsum as einsum_spec
from dl.lang.autodiff.records import Compound, Op, Part, Record, Stepped, Store, Sweep
from dl.lang.autodiff.rules import BINARY, POWER_BY_LITERAL, REDUCED, bound_arguments, instantiate
from dl.lang.autodiff.trees import (
    NotDifferentiable,
    as_block,
    assign,
    call,
    condition_of,
    index_of,
    is_active,
    is_call,
    is_tensor_index,
    let,
    literal_integer,
    name,
    tuple_of,
    zero_adjoint,
)
from dl.lang.diagnostics import UNKNOWN_SPAN, Span
from dl.lang.primitives import BY_NAME, NON_DIFFERENTIABLE, PRIMITIVES, Computed, Prim, Primitive, Templates
from dl.lang.shapes import picks_in_place
from dl.lang.types import (
    INTEGERS,
    FunctionRef,
    PrimitiveRef,
    StructType,
    TapeType,
    TensorType,
    TupleType,
    Type,
    Unknown,
)


class BackwardSweep:
    """The backward sweep of a derivative (mixed into `FunctionBody`): the records of the forward sweep in
    reverse, each operation's adjoint contributions added to its operands' adjoints."""

    def predeclare(self, stmt, env, have: set[str]) -> list[ast.Stmt]:
        """Zero adjoints, declared before `stmt`'s backward, for the outer variables it reads or assigns."""
        out = []
        for var in sorted(self.outer_variables(stmt, env, set())):
            if var not in have and is_active(self.types.get(var)):
                out.append(let(self.adjoint(var), zero_adjoint(name(var), self.types.get(var))))
                have.add(var)
        return out

    def outer_variables(self, node, env: dict[str, str], seen: set[int]) -> set[str]:
        """The generated names of the variables `node` reads or assigns, also through the closures it calls."""
        found = set()
        for user in ast.free_names(node):
            if user in env:
                found.add(env[user])
            closure = env.get(f"fn {user}")
            if closure is not None and int(closure) not in seen:
                seen.add(int(closure))
                decl, captured = self.closures[int(closure)]
                found |= self.outer_variables(decl.body, captured, seen)
        return found

    def backward_compound(self, record: Compound, have: set[str]) -> list[ast.Stmt]:
        """The backward sweep of an `if` or a loop, at its span (what it generates without one takes it, see
        `Round.run`)."""
        if not any(c in have for c in record.carried):
            return self.undone(record)
        with self.reading(record.body):  # its branches' forward is run again: with the types it was written with
            return self.backward_compound_here(record, have)

    def undone(self, record: Compound) -> list[ast.Stmt]:
        """The variables of an `if` or loop with nothing to differentiate (a counter, a flag) put back as they were
        before it: the sweep goes on to what ran before, which must read them so (`if i >= 2` ahead of
        `if not stop_loop { i += 1 }`). `read_undos` drops those nothing reads, in a whole sweep or a loop's
        iteration; in a branch or an iteration computed again they stay."""
        state = tuple_of([name(c) for c in record.carried])
        if isinstance(record.stmt, ast.If):
            undo: ast.Stmt = assign(state, name(record.saved))
        else:
            self.sweep_tapes.add(record.saved)  # each iteration's start popped, down to the first: the state before
            pop = assign(ast.TupleLiteral((state, name(record.saved))), call("pop", name(record.saved)))
            undo = ast.While(condition_of(record.saved), ast.Block((pop,)), record.stmt.span)
        self.undos[id(undo)] = undo
        return [undo]

    def read_undos(self, out: list[ast.Stmt]) -> list[ast.Stmt]:
        """`out`, a whole backward sweep or one iteration of a loop's (after which its variables are taken off the
        tape again), without the undos whose variables nothing after them reads."""
        kept: list[ast.Stmt] = []
        for position, stmt in enumerate(out):
            if self.undos.get(id(stmt)) is stmt:
                undone = ast.assigned_names((stmt,)) - self.sweep_tapes
                if not undone & ast.free_names(tuple(out[position + 1 :])):
                    continue
            kept.append(stmt)
        return kept

    def backward_compound_here(self, record: Compound, have: set[str]) -> list[ast.Stmt]:
        span = record.stmt.span
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
            out.append(ast.If(self.rename(self.quiet(record.stmt.cond, always=True), record.env), then, new_else, span))
            return out
        pop = assign(ast.TupleLiteral((state, name(record.saved))), call("pop", name(record.saved)))
        self.sweep_tapes.add(record.saved)
        if record.kept is not None:
            before, after_pop = self.restore(record, have)
            out.append(ast.While(condition_of(record.saved), ast.Block((*before, pop, *after_pop)), span))
            return out
        body = self.recompute(record.stmt.body, record, have, after)
        out.append(ast.While(condition_of(record.saved), ast.Block((*keep, pop, *body.body)), span))
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
                    out.append(assign(name(self.adjoint(outer)), zero_adjoint(name(outer), self.types.get(outer))))
                    inner_have.add(exit_var)
        out.extend(self.read_undos(self.backward(kept.records, inner_have)))
        values, afters, views = kept.split(ast.free_names(tuple(out)), exits, self.is_view)
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
        with self.stepping(block):
            return self.recompute_here(block, record, have, after)

    def recompute_here(self, block: ast.Block, record: Compound, have: set[str], after: dict[str, str]) -> ast.Block:
        inner_env = dict(record.env)
        sweep = Sweep()
        self.forward_block(block, inner_env, sweep, effects=False)
        inner_have = set(have)
        # (not a name assigned after its `let`, by a loop or `if` inside: its `let` is not its final value)
        changed = ast.assigned_names(tuple(sweep.stmts))
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
                out.append(assign(name(self.adjoint(outer)), zero_adjoint(name(outer), self.types.get(outer))))
                inner_have.add(exit_var)
        out.extend(self.backward(sweep.records, inner_have))
        return ast.Block(tuple(out))

    def backward(self, records: list[Record], have: set[str]) -> list[ast.Stmt]:
        out: list[ast.Stmt] = []
        # the stretch of this record list each Op is in: an `if` or loop between two Ops may change the
        # variables they read, so an adjoint added at one is not the other's (see `transposed`)
        stretches, stretch = {}, 0
        for record in records:
            if isinstance(record, Op):
                stretches[record.result] = stretch
            stretch += isinstance(record, (Compound, Stepped))  # (an item's block may hold an `if` or loop)
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
                    region = ast.replace_nodes(target, {id(target.target): d_new})
                    if self.active(value):
                        part = (
                            region if isinstance(target, ast.Field) else self.fit(region, value, self.type_of(target))
                        )
                        self.accumulate(value.id, part, out, have)
                    out.append(assign(region, call("zeros_like", region)))
                    self.accumulate(old, d_new, out, have)
                case Compound():
                    out.extend(self.backward_compound(record, have))
                case Stepped(steps=steps, records=inner):
                    outer, self.node_types.steps = self.node_types.steps, steps
                    out.extend(self.backward(inner, have))
                    self.node_types.steps = outer
        return out

    def fit(self, contribution: ast.Expr, operand: ast.Expr, result_type: Type | None = None) -> ast.Expr:
        """`contribution` summed down to `operand`'s shape where broadcasting made it larger (than `result_type`,
        the operation's), and rounded to its float dtype where the operation widened it (`unbroadcast` does
        both)."""
        operand_type = self.types.get(operand.id) if isinstance(operand, ast.Name) else None
        same = isinstance(operand_type, TensorType) and isinstance(result_type, TensorType)
        widened = same and operand_type.dtype != result_type.dtype and not operand_type.weak
        known = same and not any(isinstance(d, Unknown) for d in operand_type.dims)  # `_` may be any size
        if known and operand_type.dims == result_type.dims and not widened:
            return contribution
        return call("unbroadcast", contribution, operand)

    def accumulate(self, var: str, contribution, out: list[ast.Stmt], have: set[str]) -> None:
        if not is_active(self.types.get(var)):
            return
        d_var = self.adjoint(var)
        if isinstance(contribution, Part):
            if var not in have:
                out.append(let(d_var, zero_adjoint(name(var), self.types.get(var))))
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
            return ast.Assign(ast.Index(d_var, part.indices, part.span), "+=", part.value, part.span)
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
                literal = b.value if isinstance(b, (ast.FloatLiteral, ast.IntLiteral)) else None
                if op == "**" and literal is not None:  # `x ** 2.0`: the rule for that exponent
                    rule_a = POWER_BY_LITERAL if literal != 0 else None
                if self.active(a) and rule_a is not None:
                    found.append((a, self.fit(instantiate(rule_a, bindings), a, self.types.get(record.result))))
                if self.active(b):
                    found.append((b, self.fit(instantiate(rule_b, bindings), b, self.types.get(record.result))))
            case ast.Call() if isinstance(self.type_of(record.original.func), FunctionRef):
                found += self.call_contributions(record, rhs, d, span)
            case ast.Call() if self.callee_primitive(record, rhs) in NON_DIFFERENTIABLE:
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
            back = self.round.reference(self.path, path, self.round.back_name(decl, path, record.variant), span)
            pulled = ast.Call(back, (*rhs.args, d), (), span)
        if len(active) == 1:
            return [(rhs.args[active[0]], pulled)]
        holder = self.fresh_adjoint(f"d_{record.result}_args")
        self.pending.append(let(holder, pulled, span))
        return [(rhs.args[i], ast.Index(name(holder), (ast.IntLiteral(n),))) for n, i in enumerate(active)]

    def index_adjoint(self, target: ast.Name, indices, d: ast.Expr, span: Span) -> ast.Expr:
        target_type = self.types.get(target.id)
        if isinstance(target_type, TupleType):
            return self.tuple_item_adjoint(target, target_type.items, indices[0], d)
        if isinstance(target_type, TapeType):
            raise NotDifferentiable("`grad` cannot differentiate indexing a tape", span)
        spread = spread_ellipsis(indices, target_type)  # (positions counted as in the target's axes)
        tensors = [k for k, i in enumerate(spread) if is_index(i) and is_tensor_index(self.index_type(i))]
        if tensors:
            in_place = picks_in_place([is_index(i) for i in indices])
            return self.picked_adjoint(target, target_type, spread, tensors, in_place, d, span)
        return Part(indices, None, d, span)

    def picked_adjoint(self, target: ast.Expr, target_type: Type, indices, tensors, in_place: bool, d, span: Span):
        """The adjoint of indexing by integer tensors, as numpy indexes: `d` added into zeros of the target's
        shape at the elements read, an element read several times getting the sum (`scatter_add`).

        - One index tensor among full slices (`z[:, y]`) reads as `gather(z, y, axis=1)`.
        - Index tensors (or integers) on the leading axes, full slices after them (`z[arange(B), y]`: each
          row's label), read the rows of the target with those axes flattened into one, at the flat position
          `(i % S0) * S1 + (j % S1)` of each element (`%` puts a negative index in range, as numpy does).
        - Any other mix is brought to the second: slices that are not whole are taken first, as a view whose
          adjoint is placed in its region (`Part`); then the picked axes are moved to the front with
          `transpose` (and so are the picked dimensions of `d`, where numpy keeps them in place), and the
          adjoint is moved back."""
        count = next((k for k, i in enumerate(indices) if not is_index(i)), len(indices))
        if len(tensors) == 1 and all(is_whole(i) for k, i in enumerate(indices) if k != tensors[0]):
            axis = ast.IntLiteral(tensors[0])
            return call("scatter_add", call("zeros_like", target), indices[tensors[0]], d, axis=axis)
        if not isinstance(target_type, TensorType):
            raise NotDifferentiable("`grad` cannot differentiate this indexing by integer tensors", span)
        if count >= 2 and all(is_whole(i) for i in indices[count:]):
            sizes = [ast.Index(call("shape", target), (ast.IntLiteral(k),)) for k in range(target_type.rank)]
            flat: ast.Expr = ast.Binary("%", indices[0], sizes[0])
            for k in range(1, count):
                flat = ast.Binary("+", ast.Binary("*", flat, sizes[k]), ast.Binary("%", indices[k], sizes[k]))
            leading: ast.Expr = sizes[0]  # written out, not -1: which reshape cannot tell when an axis is empty
            for size in sizes[1:count]:
                leading = ast.Binary("*", leading, size)
            rows = call("reshape", call("zeros_like", target), leading, *sizes[count:])
            return call("reshape_like", call("scatter_add", rows, flat, d), target)
        rank = target_type.rank
        full = (*indices, *(WHOLE,) * (rank - len(indices)))
        if not all(is_index(i) or is_whole(i) for i in full):  # `x[j, 1:]`: the slice's view, then its picks
            region = tuple(WHOLE if is_index(i) else i for i in full)
            picks = tuple(i if is_index(i) else WHOLE for i in full)
            inner = self.picked_adjoint(ast.Index(target, region), target_type, picks, tensors, in_place, d, span)
            return Part(region, None, inner, span)
        picked = [k for k, i in enumerate(full) if is_index(i)]
        others = [k for k in range(rank) if k not in picked]
        order = picked + others
        moved = call("transpose", target, *(ast.IntLiteral(k) for k in order))
        moved_type = TensorType(target_type.dtype, tuple(target_type.dims[k] for k in order))
        width = max(self.index_type(full[k]).rank for k in tensors)  # the picked dimensions of the result
        if in_place and picked[0] > 0:
            start = picked[0]  # numpy kept the picked dimensions in place: `x[:, i, j]` is [S0, B]
            dims = [*range(start, start + width), *range(start), *range(start + width, width + len(others))]
            d = call("transpose", d, *(ast.IntLiteral(k) for k in dims))
        leading = (*(full[k] for k in picked), *(WHOLE,) * len(others))
        at = [position for position, k in enumerate(picked) if k in tensors]
        adjoint = self.picked_adjoint(moved, moved_type, leading, at, True, d, span)
        return call("transpose", adjoint, *(ast.IntLiteral(order.index(k)) for k in range(rank)))

    @staticmethod
    def tuple_item_adjoint(target: ast.Name, items: tuple, index: ast.Expr, d: ast.Expr) -> ast.Expr:
        """The adjoint of tuple `target` (of the types `items`) from `d`, that of `target[index]`: `d` at the item,
        zeros elsewhere (an item without tensors, a string or a function, stands for itself: nothing reads its
        adjoint).

        A literal index gives that tuple. Any other index (a const, a parameter given a literal at each call)
        may name another item in each instance the checker makes of the function, so the adjoint is the tuple
        of every candidate indexed the same way, `(cand_0, cand_1, ...)[index]`, which the checker and the
        backends resolve per instance as they resolve `target[index]`."""

        size = len(items)

        def candidate(position: int) -> ast.Expr:
            zeros = [zero_adjoint(ast.Index(target, (ast.IntLiteral(i),)), items[i]) for i in range(size)]
            return ast.TupleLiteral(tuple(d if i == position else zero for i, zero in enumerate(zeros)))

        match index:
            case ast.IntLiteral(value=value):
                return candidate(value % size)
            case ast.Unary(op="-", operand=ast.IntLiteral(value=value)):
                return candidate(-value % size)
        return ast.Index(ast.TupleLiteral(tuple(candidate(position) for position in range(size))), (index,))

    def index_type(self, index: ast.Expr) -> Type:
        if isinstance(index, ast.Name) and index.id in self.types:
            return self.types[index.id]
        return self.type_of(index)

    def primitive_contributions(self, record: Op, rhs: ast.Call, d, r, span) -> list[tuple[ast.Expr, ast.Expr]]:
        """The contributions of a primitive's derivative, from its record: its templates instantiated, or the
        rule this transform computes for it."""
        primitive = PRIMITIVES[self.callee_primitive(record, rhs)]
        binding = self.typed.bindings.get(id(record.original)) if record.original is not None else None
        values, variadic = bound_arguments(primitive, rhs, binding)
        match primitive.derivative:
            case Templates(adjoints=adjoints, fitted=fitted):
                bindings = self.template_bindings(primitive, values, d, r)
                forms = self.reduction_forms(primitive, values, d, span) if primitive.prim in REDUCED else None
                found = []
                for param, source in adjoints:
                    contribution = instantiate(source, bindings, forms)
                    if fitted:
                        contribution = self.fit(contribution, values[param], self.types.get(record.result))
                    found.append((values[param], contribution))
                return found
            case Computed() if primitive.prim in COMPUTED:
                return COMPUTED[primitive.prim](self, values, variadic, d, r, span)
        raise NotDifferentiable(f"`{primitive.name}` has no derivative rule", span)

    def template_bindings(self, primitive: Primitive, values: dict[str, ast.Expr], d, r) -> dict[str, ast.Expr]:
        """What a template's names stand for: `d`, `r`, the arguments, and the static values `k` (the axis) and
        each parameter's dtype and the result's (`x_dtype`, `r_dtype`). A max pooling call without `stride=`
        strides by its window `size`."""
        # (a parameter named `k`, the diagonal of `tril`, is itself)
        bindings = {"d": d, "r": r, "k": values.get("axis") or ast.IntLiteral(0), **values}
        for parameter, value in (*values.items(), ("r", r)):  # `x_dtype`, `start_dtype`, `r_dtype`: f32 if unknown
            found = self.types.get(getattr(value, "id", ""))
            bindings[f"{parameter}_dtype"] = name(found.dtype if isinstance(found, TensorType) else "f32")
        if "size" in values and bindings.get("stride") is None:
            bindings["stride"] = values["size"]
        return bindings

    def callee_primitive(self, record: Op, rhs: ast.Call) -> Prim:
        """The built-in a call calls: the one the checker found (`h(x)` where a parameter `h` is given `exp`),
        else the one its name names (a call the derivative code wrote)."""
        found = self.type_of(record.original.func) if isinstance(record.original, ast.Call) else None
        if isinstance(found, PrimitiveRef):
            return found.prim
        return BY_NAME[rhs.func.id if isinstance(rhs.func, ast.Name) else rhs.func.name]  # type: ignore[union-attr]

    def static_integer(self, atom: ast.Expr) -> int | None:
        """An integer literal's value, or that of a name bound once to one (`let axis = -1`, the parameter of a
        call written in place given its default); None for anything else."""
        if isinstance(atom, ast.Name) and atom.id in self.values:
            return literal_integer(self.values[atom.id])
        return literal_integer(atom)

    def rank(self, atom: ast.Expr) -> int | None:
        t = self.types.get(getattr(atom, "id", ""))
        if t is None:  # a name the function captured (`x` of `fn(w) => x @ w`): the checker's type of it
            t = self.type_of(atom)
        return t.rank if isinstance(t, TensorType) else None

    def reduction_forms(self, primitive: Primitive, values: dict[str, ast.Expr], d, span) -> dict[str, Callable]:
        """The static forms of a reduction's templates for this call's `axis=` and `keepdims=`: `expand(v)` puts
        a reduced value back in `x`'s rank, `total(v)` sums over the reduced elements keeping their axes, and
        `count(x)` is how many elements each result reduces."""
        x, axis, keepdims = values["x"], values["axis"], values["keepdims"]
        rank = self.rank(x)
        kept = isinstance(keepdims, ast.BoolLiteral) and keepdims.value
        whole = axis is None or (isinstance(axis, ast.Name) and axis.id == "none")
        known = rank is not None
        rank = rank if rank is not None else 1
        named = axis.items if isinstance(axis, ast.TupleLiteral) else (axis,)
        given = [] if whole else [self.static_integer(a) for a in named]
        x_type = self.types.get(getattr(x, "id", ""))
        wide = {"dtype": ast.Name("f64")} if isinstance(x_type, TensorType) and x_type.dtype == "f64" else {}
        if (
            given == [None]
            and isinstance(axis, ast.Name)
            and is_integer_scalar(self.types.get(axis.id) or self.type_of(axis))
        ):
            return self.named_axis_forms(x, axis, kept, wide)
        if None in given:
            raise NotDifferentiable(
                f"`grad` needs `{primitive.name}`'s `axis=` as a literal integer or a tuple of them", span
            )
        axes = sorted(k % max(rank, 1) if known else k for k in given)
        # without the rank (a function called with arguments of several), axes counted from the front, or
        # one axis from the back, put back the same in any rank; several counted from the back do not
        if not known and not kept and any(k < 0 for k in axes) and len(axes) > 1:
            raise self.rank_unknown(f"`grad` needs the rank of the argument of `{primitive.name}`", span)

        def expand(value: ast.Expr) -> ast.Expr:
            if whole or kept or rank == 0:
                return value
            for k in axes:  # in increasing order, each a position in the finished rank
                value = call("expand_dims", value, ast.IntLiteral(k))
            return value

        def total(value: ast.Expr) -> ast.Expr:
            if whole:
                return call("sum", value)
            return call("sum", value, axis=axes_literal(axes), keepdims=ast.BoolLiteral(True))

        def count(value: ast.Expr) -> ast.Expr:
            """The count in `x`'s float dtype (f32 for f32 and integers): exact past 2**24 elements in f64."""
            if whole:
                return call("float", call("len", call("reshape", value, ast.Unary("-", ast.IntLiteral(1)))), **wide)
            sizes = [ast.Index(call("shape", value), (ast.IntLiteral(k),)) for k in axes]
            product = sizes[0]
            for size in sizes[1:]:
                product = ast.Binary("*", product, size)
            return call("float", product, **wide)

        return {"expand": expand, "total": total, "count": count}

    def named_axis_forms(self, x: ast.Expr, axis: ast.Name, kept: bool, wide: dict) -> dict[str, Callable]:
        """`reduction_forms` for one axis a variable holds (a parameter, `fn norm(x, axis=-1)`), whose value the
        checker knew at each call but which this code serves for all: numpy's `expand_dims` at a negative axis
        puts it back where the reduction took it, and its size is the leading one once moved to the front."""
        return {
            "expand": lambda value: value if kept else call("expand_dims", value, axis),
            "total": lambda value: call("sum", value, axis=axis, keepdims=ast.BoolLiteral(True)),
            "count": lambda value: call("float", call("len", call("swapaxes", value, axis, ast.IntLiteral(0))), **wide),
        }

    def transpose_adjoint(self, values, variadic, d, r, span) -> list[tuple[ast.Expr, ast.Expr]]:
        if not variadic:
            return [(values["x"], call("transpose", d))]
        perm = self.static_axes(variadic, span)
        inverse = [perm.index(i) for i in range(len(perm))]
        return [(values["x"], call("transpose", d, *[ast.IntLiteral(i) for i in inverse]))]

    def static_axes(self, variadic: list[ast.Expr], span: Span) -> list[int]:
        """The axes a `transpose` names, each known to the checker: literals, or names of integers or of a tuple of
        them (`transpose(x, perm)`), the values their types hold; negative axes counted from the end."""
        axes: list = []
        for node in variadic:
            found = literal_integer(node)
            if found is not None:
                axes.append(found)
                continue
            given = self.types.get(node.id) if isinstance(node, ast.Name) else None
            given = given if given is not None else self.type_of(node)  # (a name the function captured)
            items = given.items if isinstance(given, TupleType) else (given,)
            axes.extend(item.value if isinstance(item, TensorType) else None for item in items)
        if not all(isinstance(axis, int) for axis in axes):  # (a function no call reached: `dlrun grad`)
            raise NotDifferentiable(
                "`grad` needs the axes of this `transpose` known: they come from a value no call of its function gave",
                span,
                ("help: call the function (or `grad` of it) with its arguments somewhere, or write the axes",),
            )
        return [axis % len(axes) for axis in axes]

    def stack_adjoint(self, values, variadic, d, r, span) -> list[tuple[ast.Expr, ast.Expr]]:
        tensors = values["tensors"]
        items = self.types.get(getattr(tensors, "id", ""))
        count = len(items.items) if isinstance(items, TupleType) else 0
        axis = literal_integer(values["axis"])  # `-1` is a negation of a literal
        if axis is None:
            raise NotDifferentiable("`grad` needs `stack`'s `axis=` as a literal integer", span)
        if axis < 0:
            rank = self.rank(r)
            if rank is None:
                raise self.rank_unknown("`grad` needs the rank of `stack`'s result for a negative `axis=`", span)
            axis += rank
        parts = [ast.Index(d, (*(ast.Slice(None, None, None),) * axis, ast.IntLiteral(i))) for i in range(count)]
        return [(tensors, ast.TupleLiteral(tuple(parts)))]

    def einsum_adjoint(self, values, variadic, d, r, span) -> list[tuple[ast.Expr, ast.Expr]]:
        """Each operand's adjoint: the einsum of the result's adjoint and the other operands onto the operand's
        letters (lang/einsum.py `adjoint_spec`), with ones of its shape where it alone has a letter."""
        spec_node = values["spec"]
        if not isinstance(spec_node, ast.StringLiteral):
            raise NotDifferentiable("`grad` needs `einsum`'s spec as a string literal", span)
        spec = einsum_spec.parse(spec_node.value)
        found = []
        for position, operand in enumerate(variadic):
            if not self.active(operand):
                continue
            adjoint, needs_ones = einsum_spec.adjoint_spec(spec, position)
            others = [other for k, other in enumerate(variadic) if k != position]
            ones = [ast.Binary("+", call("zeros_like", operand), ast.FloatLiteral(1.0))] if needs_ones else []
            found.append((operand, call("einsum", ast.StringLiteral(str(adjoint)), d, *others, *ones)))
        return found

    def matmul_call(self, values, variadic, d, r, span) -> list[tuple[ast.Expr, ast.Expr]]:
        return self.matmul(values["a"], values["b"], d, span)

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

    def rank_unknown(self, message: str, span: Span) -> NotDifferentiable:
        """A rank the derivative needs is not known; where that is because the function is called with
        arguments of other ranks (its derivative is written once, for all its calls), say so."""
        if not any(id(node) in self.typed.varied for node in ast.walk(self.decl.body)):
            return NotDifferentiable(message, span)
        name = getattr(self.decl, "name", None)
        if self.site is not None:  # the gradient itself, called with arguments of several ranks
            shown = f"`grad({name})`" if name else "this gradient"
            return NotDifferentiable(
                f"{message}: {shown} is called with arguments of different ranks or dtypes, and is written once "
                "for all its calls",
                span,
                (
                    f"help: write {shown} once for each rank and dtype it is called with: each is written for "
                    "its own calls",
                    f"the gradient is made at {self.site.path}:{self.site.line}:{self.site.column}",
                ),
            )
        shown = f"`{name}`" if name else "the anonymous function"
        return NotDifferentiable(
            f"{message}: {shown} is called with arguments of different ranks or dtypes, and its derivative is "
            "written once for all its calls",
            span,
            (f"help: call a copy of {shown} for each rank",),
        )

    def float_dtype(self, atom: ast.Expr) -> str | None:
        t = self.types.get(atom.id) if isinstance(atom, ast.Name) else None
        return t.dtype if isinstance(t, TensorType) and not t.weak and t.dtype in ("f32", "f64") else None

    def matmul_adjoints(self, a: ast.Expr, b: ast.Expr, d: ast.Expr, span: Span) -> list[tuple[ast.Expr, ast.Expr]]:
        ra, rb = self.rank(a), self.rank(b)
        if ra is None or rb is None:
            raise self.rank_unknown("`grad` needs the ranks of `@`'s operands", span)

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
                return w if isinstance(callee, PrimitiveRef) and callee.prim == Prim.TRANSPOSE else None
        return None


def axes_literal(axes: list[int]) -> ast.Expr:
    """`axis=` for these axes: one integer, or a tuple of them."""
    literals = tuple(ast.IntLiteral(k) for k in axes)
    return literals[0] if len(literals) == 1 else ast.TupleLiteral(literals)


# The derivatives this transform computes in code (`Computed` in their records); `tree_map` and `tree_dot` are
# written out before differentiation (`expand_tree_map`, `expand_tree_dot`), so they never reach a rule.
COMPUTED = {
    Prim.MATMUL: BackwardSweep.matmul_call,
    Prim.EINSUM: BackwardSweep.einsum_adjoint,
    Prim.TRANSPOSE: BackwardSweep.transpose_adjoint,
    Prim.STACK: BackwardSweep.stack_adjoint,
}


def spread_ellipsis(indices: tuple, target_type: Type) -> tuple:
    """`indices` with their `...` written as the full slices it stands for (`x[..., j]` of a rank-3 `x` is
    `x[:, :, j]`), where the target's rank is known. (Where numpy counts a `...` as parting picked axes, the
    picks the adjoint takes are leading ones, whose place is first either way.)"""
    at = next((k for k, i in enumerate(indices) if isinstance(i, ast.Ellipsis)), None)
    if at is None or not isinstance(target_type, TensorType):
        return indices
    whole = (ast.Slice(None, None, None),) * (target_type.rank - (len(indices) - 1))
    return (*indices[:at], *whole, *indices[at + 1 :])


def is_index(index: ast.Expr | ast.Slice | ast.Ellipsis) -> bool:
    """An index that picks (an integer or an integer tensor), not a slice or `...`."""
    return not isinstance(index, (ast.Slice, ast.Ellipsis))


WHOLE = ast.Slice(None, None, None)


def is_whole(index: ast.Expr | ast.Slice | ast.Ellipsis) -> bool:
    """`:`, the whole axis."""
    return isinstance(index, ast.Slice) and index.start is None and index.stop is None and index.step is None


def is_integer_scalar(t: Type | None) -> bool:
    return isinstance(t, TensorType) and not t.dims and t.dtype in INTEGERS
