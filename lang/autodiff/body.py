"""The derivative of one function: `FunctionBody(round, path, decl)` builds the body of its gradient function
(`gradient`), of its `_back` function (`pullback`) or of its `_fwd` and `_bwd` pair (`split`): the body lowered
(lowering.py), the forward sweep (anf.py), the seed, the backward sweep (reverse.py), then simplified
(simplify.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dl.lang import ast
from dl.lang.autodiff.anf import ForwardSweep
from dl.lang.autodiff.lowering import Lowering, lift_returns, seeded_draws
from dl.lang.autodiff.records import Sweep, kept_or_made
from dl.lang.autodiff.reverse import BackwardSweep
from dl.lang.autodiff.simplify import prune
from dl.lang.autodiff.trees import (
    NotDifferentiable,
    as_stmts,
    assign,
    call,
    fixed_shape,
    float_literal,
    index_of,
    is_active,
    let,
    name,
    tuple_of,
    unused_name,
    zero_adjoint,
)
from dl.lang.check import NodeTypes
from dl.lang.diagnostics import UNKNOWN_SPAN, Span
from dl.lang.primitives import Prim
from dl.lang.types import (
    ANY,
    BOOL,
    I64,
    AnyType,
    FunctionRef,
    PrimitiveRef,
    StructType,
    TensorType,
    TupleType,
    Type,
)

if TYPE_CHECKING:
    from dl.lang.autodiff.round import Round

# The primitives that look at a value without computing: their results are taken again, not kept.
VIEWS = frozenset({Prim.TRANSPOSE, Prim.SHAPE, Prim.LEN})


class FunctionBody(ForwardSweep, BackwardSweep):
    """Builds the body of a derivative of one function: the forward sweep, then the backward sweep."""

    def __init__(self, round_: Round, path: str, decl: ast.FnDecl | ast.Lambda, variant: int | None = None) -> None:
        self.round = round_
        self.typed = round_.typed
        self.path = path
        self.decl = decl
        self.types: dict[str, Type] = {}  # generated name -> type
        self.node_types = NodeTypes(self.typed)  # the checker's types, and those of the nodes made here
        # a derivative written for one check of the body (`Round.variant_key`): its types are read (`reading`)
        self.node_types.body = variant
        self.site: Span | None = None  # for a gradient function: the `grad(f)` call it is written for
        # module-level names are reserved (the code refers to them by name); locals are renamed anyway. The
        # derivative of an anonymous or local function is written in place, inside the function around it,
        # and reads by name what it (or a local function it calls) captured: every name of that function is
        # reserved too, so that no generated `let a = 10.0` (an inlined call's argument) hides a captured
        # `a`, and its own parameters take fresh names (`param_names`), so that they hide none either
        self.used: set[str] = set(round_.taken[path]) | {p.name for p in decl.params}
        decls = round_.program.modules[path].decls
        top_level = any(d is decl for d in decls)  # (the common case, found without walking any tree)
        around = decl if top_level else next((d for d in decls if any(n is decl for n in ast.walk(d))), decl)
        self.around = around  # the top-level function it is written in (`Round.lifted`)
        self.in_place = around is not decl
        if self.in_place:
            self.used |= ast.names_used(around)
        self.param_names = {p.name: self.fresh(p.name) if self.in_place else p.name for p in decl.params}
        # the user's names, which the names lowering adds (flags, loop counters) must not meet
        self.user_names = ast.names_used(decl.body) | set(self.used)
        self.local_functions = {id(n) for n in ast.walk(decl.body) if isinstance(n, ast.FnDecl)}
        self.adjoints: dict[str, str] = {}
        self.adjoint_names: set[str] = set()  # the variables that hold adjoints (`zeros.py` follows their zeros)
        self.fixed_adjoints: set[str] = set()  # those of them whose shape no iteration of a loop changes
        self.sweep_tapes: set[str] = set()  # the tapes the backward sweep's loops pop (`while len(tape) > 0`)
        # a size declared `_` (`let h: f32[_] = x`) may change from iteration to iteration: the types this pass
        # reads are the values' (`x`'s `f32[3]`), so in such a function no adjoint is taken to keep its shape
        self.sizes_vary = any(isinstance(n, ast.DimName) and n.name == "_" for n in ast.walk(decl))
        self.result_type: Type = ANY
        self.pending: list[ast.Stmt] = []  # statements a rule needs before its contributions
        self.just_made = ""  # the name the latest operation's result was given
        # local functions and anonymous functions bound by `let`: (declaration, the names it captured)
        # they are bound in `env` under "fn NAME" (not an identifier) to an index into this table
        self.closures: list[tuple[ast.FnDecl | ast.Lambda, dict[str, str]]] = []
        self.function_args: list[FunctionRef | PrimitiveRef] = []  # what `ref NAME` entries of an env name
        self.inlining: list[int] = []  # the top-level functions being inlined, innermost last
        self.filled: dict[int, ast.Stmt] = {}  # the pushes of kept values (`Kept.push`), once known
        # the statements that put back the variables of an `if` or loop (`undone`), by id: held here, so that no
        # statement made later takes the id of one freed
        self.undos: dict[int, ast.Stmt] = {}
        # the branches the lowering writes for the steps of a loop over a tuple whose items differ in type, by id:
        # (the branch, its step); their nodes are read with the step's types (`ForwardSweep.stepping`)
        self.step_blocks: dict[int, tuple[ast.Block, tuple[int, int]]] = {}
        # the blocks the lowering writes for the items of a loop over a tuple (`Lowering.unrolled`), each an
        # `if true` by id, which the forward sweep writes in place
        self.unrolled: dict[int, ast.If] = {}
        self.values: dict[str, ast.Expr] = {}  # generated name -> the operation whose value it holds
        self.effects = True  # False where a forward runs again: calls go to the functions' quiet copies
        self.all_assigned: set[str] | None = None
        # what the function around binds in its own scope (name, where; None for a parameter), and assigns
        self.bound_around: list[tuple[str, Span | None]] | None = None
        self.assigned_around: set[str] = set()
        # the Ops of the record list being differentiated -> their stretch in it, and the current Op's stretch
        self.stretch: tuple[dict[str, int], int] = ({}, -1)

    def fresh(self, base: str) -> str:
        return unused_name(base, self.used)

    def fresh_user_name(self, base: str) -> str:
        """A variable name for code the lowering adds, unlike any of the user's."""
        return unused_name(base, self.user_names)

    def adjoint(self, var: str) -> str:
        if var not in self.adjoints:
            self.adjoints[var] = self.fresh_adjoint(f"d_{var}")
            if not self.sizes_vary and fixed_shape(self.types.get(var)):
                self.fixed_adjoints.add(self.adjoints[var])
        return self.adjoints[var]

    def fresh_adjoint(self, base: str) -> str:
        """A fresh name for a variable that holds an adjoint."""
        made = self.fresh(base)
        self.adjoint_names.add(made)
        return made

    def type_of(self, node) -> Type:
        found = self.node_types.of(node)
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
                return isinstance(callee, PrimitiveRef) and callee.prim in VIEWS and self.is_view(x)
            case ast.Binary(op="+" | "-" | "*", lhs=a, rhs=b):  # integer arithmetic on sizes (`2 * n`)
                t = self.type_of(expr)
                integer = isinstance(t, TensorType) and t.rank == 0 and t.dtype in ("i32", "i64")
                return integer and self.is_view(a) and self.is_view(b)
        return False

    def active(self, atom: ast.Expr) -> bool:
        return isinstance(atom, ast.Name) and atom.id in self.types and is_active(self.types[atom.id])

    def gradient(self, wrt: int | tuple[int, ...], with_value: bool, has_aux: bool = False) -> ast.Block:
        """`grad(f)`'s body: forward, seed 1, backward; returns the gradient (and the value). With `has_aux`,
        `f` returns `(loss, aux)`: the seed is 1 for the loss and nothing for aux, and the result is
        `(gradient, aux)`, or `((loss, aux), gradient)` with the value, as JAX's."""
        env = self.parameters()
        body = self.lower(self.decl)
        out: list[ast.Stmt] = []
        value = self.fresh("value") if with_value or has_aux else None
        if has_aux and not isinstance(body[-1], ast.Return):
            known = self.site is not None and self.site.path != UNKNOWN_SPAN.path  # (`dlrun grad` has no call)
            raise NotDifferentiable(
                "`has_aux=true` needs the function to return `(loss, aux)` once, at its end",
                self.site if known else getattr(self.decl, "name_span", self.decl.span),
                ("help: compute the loss and aux in variables and return them once, after any `if` or loop",),
            )
        if value is not None and not has_aux:
            out.append(let(value, float_literal(0.0, self.result_type)))
        have: set[str] = set()
        seed = self.aux_seed if has_aux else self.seed
        out += self.sweep_to_return(body, env, have, seed, value, effects=True, has_aux=has_aux)
        positions = wrt if isinstance(wrt, tuple) else (wrt,)
        gradients = [self.final_adjoint(self.param_names[self.decl.params[i].name], have) for i in positions]
        result = ast.TupleLiteral(tuple(gradients)) if isinstance(wrt, tuple) else gradients[0]
        if has_aux and not with_value:
            result = ast.TupleLiteral((result, ast.Index(name(value), (ast.IntLiteral(1),))))
        elif value is not None:
            result = ast.TupleLiteral((name(value), result))
        out.append(ast.Return(result))
        return ast.Block(tuple(prune(self.with_kept_values(out), self.round.effectful(), self.struct_of)))

    def loss_of(self, result: ast.Name) -> ast.Name | None:
        """The name holding the loss of a `(loss, aux)` result made by a tuple literal here, else None."""
        made = self.values.get(result.id)
        if isinstance(made, ast.TupleLiteral) and len(made.items) == 2 and isinstance(made.items[0], ast.Name):
            return made.items[0]
        return None

    def aux_seed(self, result: ast.Name) -> ast.Expr:
        """The adjoint of `(loss, aux)`: 1 for the loss, zeros for aux (which the gradient does not follow)."""
        t = self.types.get(result.id)
        items = t.items if isinstance(t, TupleType) and len(t.items) == 2 else (None, None)
        one = float_literal(1.0, items[0]) if isinstance(items[0], TensorType) else ast.FloatLiteral(1.0)
        return ast.TupleLiteral((one, zero_adjoint(ast.Index(result, (ast.IntLiteral(1),)), items[1])))

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
        d_result = self.fresh_adjoint("d_result")
        body = self.lower(self.decl)
        have: set[str] = set()
        out = self.sweep_to_return(body, env, have, lambda result: name(d_result), None, effects=False)
        positions = self.round.active_params(self.decl)
        gradients = [self.final_adjoint(self.param_names[self.decl.params[i].name], have) for i in positions]
        out.append(ast.Return(tuple_of(gradients) if gradients else ast.TupleLiteral(())))
        return ast.Block(tuple(prune(self.with_kept_values(out), self.round.effectful(), self.struct_of))), d_result

    def with_kept_values(self, stmts: list[ast.Stmt]) -> list[ast.Stmt]:
        """The loops' pushes of the values their backward sweeps read (`restore`); a loop whose backward
        reads none, or never runs, keeps nothing (`kept = kept`, which `prune` drops with the tape)."""
        return list(ast.replace_nodes(tuple(stmts), self.filled)) if self.filled else stmts

    def struct_of(self, var: str):
        """How generated code names the struct `var` holds, and its fields (`simplify.fold_struct_starts`)."""
        t = self.types.get(var)
        if not isinstance(t, StructType):
            return None
        return (lambda span: self.round.reference(self.path, t.module, t.name, span)), tuple(n for n, _ in t.fields)

    def ends_in_return(self) -> bool:
        """Does the body, lowered, end in one `return` (not in an `if` whose branches return)?"""
        return isinstance(self.lower(self.decl)[-1], ast.Return)

    def split(self) -> tuple[ast.Block, ast.Block, str, str]:
        """The bodies of `g_fwd` and `g_bwd` (`Round.split_functions`), with the names of `g_bwd`'s
        parameters for the kept values and the result's adjoint."""
        env = self.parameters()
        d_result = self.fresh_adjoint("d_result")
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
        back += self.read_undos(self.backward(sweep.records, have))
        gradients = [self.final_adjoint(self.decl.params[i].name, have) for i in self.round.active_params(self.decl)]
        back.append(ast.Return(tuple_of(gradients) if gradients else ast.TupleLiteral(())))
        back = prune(self.with_kept_values(back), self.round.effectful(), self.struct_of)
        params = {p.name for p in self.decl.params}
        forward = self.with_kept_values(sweep.stmts)
        lets = [s for s in forward if isinstance(s, ast.Let) and isinstance(s.pattern, ast.NamePattern)]
        assigned = ast.assigned_names(tuple(forward))
        written = {n.name for s in forward if isinstance(s, ast.Let) for n in ast.pattern_names(s.pattern)}
        written |= assigned & params
        values, views = kept_or_made(lets, ast.free_names(tuple(back)) & written, written, assigned, self.is_view)
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
            named = self.param_names[param.name]
            self.types[named] = self.node_types.of(param) or ANY
            env[param.name] = named
        return env

    def final_adjoint(self, var: str, have: set[str]) -> ast.Expr:
        return name(self.adjoint(var)) if var in have else zero_adjoint(name(var), self.types.get(var))

    def lower(self, decl: ast.FnDecl | ast.Lambda) -> list[ast.Stmt]:
        """The body with `for` made `while`, `break`/`continue`/`return` in loops made flags, and every
        `return` at the end of a branch (the statements after an `if` that returns moved into it)."""
        if isinstance(decl.body, ast.Block):
            stmts = list(decl.body.body)
        else:
            stmts = [ast.Return(decl.body, decl.body.span)]
        self.result_type = self.return_type(stmts)
        stmts = seeded_draws(self, stmts)
        lowering = Lowering(self)
        stmts = lowering.block(stmts, None)
        prefix = lowering.prelude
        return lift_returns(prefix + stmts, self)

    def return_type(self, stmts: list[ast.Stmt]) -> Type:
        for node in ast.walk(tuple(stmts)):
            if isinstance(node, ast.Return) and node.value is not None:
                found = self.node_types.of(node.value)
                if found is not None and not isinstance(found, AnyType):
                    return found
        return ANY

    def sweep_to_return(self, stmts, env, have, seed, value, effects, has_aux: bool = False) -> list[ast.Stmt]:
        """Forward and backward of a block that ends in `return` (or in an `if` whose branches do); the result
        is assigned to `value`. With `has_aux`, it is bound to `value` (there is no zero of any aux to start it
        from), and of a `(loss, aux)` tuple literal the loss alone is seeded."""
        outer, self.effects = self.effects, effects
        out = self.sweep_to_return_with(stmts, env, have, seed, value, effects, has_aux)
        self.effects = outer
        return out

    def sweep_to_return_with(self, stmts, env, have, seed, value, effects, has_aux: bool = False) -> list[ast.Stmt]:
        sweep = Sweep()
        *prefix, last = stmts
        for stmt in prefix:
            self.forward(stmt, env, sweep, nested=False, effects=effects)
        out = sweep.stmts
        if isinstance(last, ast.Return):
            result = self.atom(last.value, env, sweep, "result") if last.value is not None else None
            out = sweep.stmts
            if value is not None and result is not None:
                out.append(let(value, result) if has_aux else assign(name(value), result))
            if result is not None and self.active(result):
                loss = self.loss_of(result) if has_aux else None
                if loss is not None:  # `return (loss, aux)`: the loss alone is seeded; aux's code has no adjoint
                    self.accumulate(loss.id, self.seed(loss), out, have)
                else:
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
