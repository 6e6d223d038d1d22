"""Random well-typed DL programs, and mutations of them, for differential testing of the toolchain.

`generate(seed)` writes a program with the seeded generator below: struct declarations, helper
functions (annotated, unannotated or recursive), an entry function `f` and a scalar `loss` with its
gradient function `g` (`grad` or `value_and_grad`). Bodies are `let`s, rebinding (`=`, `+=`, `x[i] = e`,
`s.field = e`), `if`/`else`, `for` over a range, counted `while` loops, tuples and structs; expressions
are drawn *goal-directed*: asked for a dtype and shape, each production picks operands that give
exactly that type by the rules of docs/types.md (broadcasting, weak literals, promotion between
f32/f64 and i32/i64, reductions with `axis=`/`keepdims=`, matmul, transpose, reshape, indexing and
slicing, concat/stack, one_hot, conversions, comparisons and `where`). The host calls `f` and `g` with
random arguments (`Program.calls`).

Run-time failures are drawn on purpose, rarely: an index or a divisor taken from an argument, `int` of
a float that may be nan, a label `one_hot` may refuse. `mutate(source, rng)` then breaks a program as
a user would: a token deleted or duplicated, operands swapped, a shape, index or name changed.

tests/differential.py runs what this writes; tests/test_fuzz.py and scripts/fuzz_backends.py drive it.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from math import prod

import numpy as np

FLOATS = ("f32", "f64")
INTEGERS = ("i32", "i64")
NUMBERS = (*FLOATS, *INTEGERS)
Shape = tuple[int, ...]


@dataclass(frozen=True)
class Ty:
    """A tensor type: a dtype and a concrete shape (`()` for a scalar)."""

    dtype: str
    shape: Shape = ()

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]" if self.shape else self.dtype


@dataclass(frozen=True)
class Program:
    """A generated program: its source, and the host's calls of it, `(function, arguments)`."""

    seed: int
    source: str
    calls: tuple[tuple[str, tuple], ...]
    differentiated: tuple[str, int | tuple[int, ...]] | None  # (function, wrt) of its `grad`, for `dlrun grad`


@dataclass
class Variable:
    name: str
    ty: Ty
    assignable: bool  # a local (`let`) the body may rebind; parameters and loop counters are not rebound


@dataclass
class Scope:
    variables: list[Variable] = field(default_factory=list)
    tuples: list[tuple[str, tuple[Ty, ...]]] = field(default_factory=list)
    structs: list[tuple[str, str]] = field(default_factory=list)  # (variable, struct name)
    loop_indices: list[tuple[str, int]] = field(default_factory=list)  # (name, exclusive bound)

    def child(self) -> Scope:
        return Scope(list(self.variables), list(self.tuples), list(self.structs), list(self.loop_indices))


def generate(seed: int) -> Program:
    """The program of one seed: the same seed always gives the same program."""
    return Generator(random.Random(seed)).program(seed)


class Generator:
    """Draws one program; `rng` decides everything."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.declarations: list[str] = []
        self.struct_fields: dict[str, tuple[tuple[str, Ty], ...]] = {}
        self.helpers: list[tuple[str, tuple[Ty, ...], Ty, bool]] = []  # (name, params, result, differentiable)
        self.recursive: dict[Ty, str] = {}
        self.names = 0
        self.params: list[tuple[str, Ty]] = []
        self.scope = Scope()
        self.differentiable = False  # inside `loss`: float leaves only where a gradient should flow
        self.in_helper = False  # a helper's new parameters become `let`s of literals, not the host's arguments
        self.max_rank = 3  # 0 while drawing a function of scalars only (compiled by the scalar lowering)

    # -------------------------------------------------------------- drawing
    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def pick(self, options):
        options = list(options)
        return options[self.rng.randrange(len(options))]

    def fresh(self, prefix: str) -> str:
        self.names += 1
        return f"{prefix}{self.names}"

    def shape(self, low: int = 0, high: int = 3) -> Shape:
        rank = self.rng.randint(min(low, self.max_rank), min(high, self.max_rank))
        return tuple(self.rng.randint(1, 4) for _ in range(rank))

    def ty(self, dtypes=NUMBERS, low: int = 0, high: int = 3) -> Ty:
        return Ty(self.pick(dtypes), self.shape(low, high))

    # -------------------------------------------------------------- the program
    def program(self, seed: int) -> Program:
        for _ in range(self.rng.randint(0, 2)):
            self.struct_declaration()
        self.max_rank = 0 if self.chance(0.3) else 3
        entry = self.function("f", [self.ty() for _ in range(self.rng.randint(1, 3))], self.result_types())
        entry_params = list(self.params)
        dtype = self.pick(FLOATS)
        self.differentiable = True
        self.max_rank = 0 if self.chance(0.3) else 3
        loss_params = [self.ty((dtype,), 0, 2) for _ in range(self.rng.randint(1, 3))]
        loss = self.function("loss", loss_params, (Ty(dtype),))
        self.differentiable = False
        self.max_rank = 3
        loss_leaves = list(self.params)
        wrt = self.wrt(len(loss_params))
        transform = "value_and_grad" if self.chance(0.25) else "grad"
        names = ", ".join(name for name, _ in loss_leaves)
        keyword = "" if wrt == 0 else f", wrt={wrt}"
        call = f"{transform}(loss{keyword})({names})"
        if isinstance(wrt, int) and self.chance(0.25):  # the others captured by an anonymous function
            others = [name if k != wrt else "v" for k, (name, _) in enumerate(loss_leaves)]
            call = f"{transform}(fn(v) => loss({', '.join(others)}))({loss_leaves[wrt][0]})"
        gradient = f"fn g({self.parameters(loss_leaves)}) {{\n    return {call}\n}}\n"
        source = "\n".join([*self.declarations, entry, loss, gradient])
        rng = np.random.default_rng(seed)
        calls = (
            ("f", tuple(argument(rng, ty) for _, ty in entry_params)),
            ("g", tuple(argument(rng, ty) for _, ty in loss_leaves)),
        )
        return Program(seed, source, calls, ("loss", wrt))

    def wrt(self, count: int) -> int | tuple[int, ...]:
        positions = sorted(self.rng.sample(range(count), self.rng.randint(1, count)))
        return positions[0] if len(positions) == 1 and self.chance(0.7) else tuple(positions)

    def result_types(self) -> tuple[Ty, ...]:
        return tuple(self.ty(("f32", "f64", "i32", "i64", "bool")) for _ in range(self.rng.randint(1, 2)))

    @staticmethod
    def parameters(params: list[tuple[str, Ty]]) -> str:
        return ", ".join(f"{name}: {ty}" for name, ty in params)

    def function(self, name: str, param_types: list[Ty], results: tuple[Ty, ...]) -> str:
        """`fn name(p...) -> results { statements; return ... }`, its parameters drawn from `param_types`
        (more are added when an expression asks for a value of a type no parameter has)."""
        self.params = [(self.fresh("p"), ty) for ty in param_types]
        self.scope = Scope([Variable(p, ty, False) for p, ty in self.params])
        body = self.statements(self.rng.randint(1, 5), depth=2)
        returned = [self.expr(ty, 3) for ty in results]
        shown = [str(ty) for ty in results]
        if self.struct_fields and not self.differentiable and self.max_rank and self.chance(0.2):
            struct = self.pick(self.struct_fields)
            fields = ", ".join(f"{f}: {self.expr(ty, 2)}" for f, ty in self.struct_fields[struct])
            returned.append(f"{struct} {{ {fields} }}")
            shown.append(struct)
        value = returned[0] if len(returned) == 1 else f"({', '.join(returned)})"
        result = shown[0] if len(shown) == 1 else f"({', '.join(shown)})"
        arrow = f" -> {result}" if self.chance(0.7) else ""
        lines = "".join(f"    {line}\n" for statement in body for line in statement.splitlines())
        return f"fn {name}({self.parameters(self.params)}){arrow} {{\n{lines}    return {value}\n}}\n"

    def struct_declaration(self) -> None:
        name = f"S{len(self.struct_fields)}"
        fields = tuple((f"x{k}", self.ty(("f32", "f64", "i64"), 0, 2)) for k in range(self.rng.randint(1, 3)))
        self.struct_fields[name] = fields
        shown = ", ".join(f"{f}: {ty}" for f, ty in fields)
        self.declarations.append(f"struct {name} {{ {shown} }}\n")

    # -------------------------------------------------------------- statements
    def statements(self, count: int, depth: int) -> list[str]:
        return [self.statement(depth) for _ in range(count)]

    def statement(self, depth: int) -> str:
        kinds = ["let", "let", "rebind", "update"]
        if self.max_rank:
            kinds += ["tuple", "element", "struct"] if self.struct_fields else ["tuple", "element"]
        if depth > 0:
            kinds += ["if", "for", "while"]
        return getattr(self, f"statement_{self.pick(kinds)}")(depth)

    def declare(self, name: str, ty: Ty) -> None:
        self.scope.variables.append(Variable(name, ty, True))

    def statement_let(self, depth: int) -> str:
        ty = self.ty()
        value = self.expr(ty, 3)
        name = self.fresh("v")
        self.declare(name, ty)
        return f"let {name}: {ty} = {value}" if self.chance(0.3) else f"let {name} = {value}"

    def assignable(self, numeric: bool = False, rank: int = 0) -> Variable | None:
        found = [
            v
            for v in self.scope.variables
            if v.assignable and len(v.ty.shape) >= rank and (not numeric or v.ty.dtype != "bool")
        ]
        return self.pick(found) if found else None

    def target(self, numeric: bool = False, rank: int = 0) -> tuple[list[str], Variable]:
        """A local to assign: one in scope, or a new one declared first (its `let` returned)."""
        variable = self.assignable(numeric, rank)
        if variable is not None:
            return [], variable
        dtypes = NUMBERS if numeric else (*NUMBERS, "bool")
        ty = Ty(self.pick(dtypes), self.shape(rank, max(rank, 2)))
        name = self.fresh("v")
        line = f"let {name} = {self.expr(ty, 2)}"
        self.declare(name, ty)
        return [line], self.scope.variables[-1]

    def statement_rebind(self, depth: int) -> str:
        lines, variable = self.target()
        return "\n".join([*lines, f"{variable.name} = {self.expr(variable.ty, 3)}"])

    def statement_update(self, depth: int) -> str:
        lines, variable = self.target(numeric=True)
        operators = ["+=", "-=", "*="] + (["/="] if variable.ty.dtype in FLOATS else [])
        return "\n".join([*lines, f"{variable.name} {self.pick(operators)} {self.expr(variable.ty, 2)}"])

    def statement_element(self, depth: int) -> str:
        lines, variable = self.target(rank=1)
        size = variable.ty.shape[0]
        index = self.index_in(size)
        item = Ty(variable.ty.dtype, variable.ty.shape[1:])
        return "\n".join([*lines, f"{variable.name}[{index}] = {self.expr(item, 2)}"])

    def statement_tuple(self, depth: int) -> str:
        types = tuple(self.ty() for _ in range(self.rng.randint(2, 3)))
        values = ", ".join(self.expr(ty, 2) for ty in types)
        if self.chance(0.5):
            names = [self.fresh("v") for _ in types]
            for name, ty in zip(names, types, strict=True):
                self.declare(name, ty)
            return f"let ({', '.join(names)}) = ({values})"
        name = self.fresh("t")
        self.scope.tuples.append((name, types))
        return f"let {name} = ({values})"

    def statement_struct(self, depth: int) -> str:
        struct = self.pick(self.struct_fields)
        fields = self.struct_fields[struct]
        values = ", ".join(f"{f}: {self.expr(ty, 2)}" for f, ty in fields)
        name = self.fresh("s")
        line = f"let {name} = {struct} {{ {values} }}"
        if self.chance(0.4):
            f, ty = self.pick(fields)
            line += f"\n{name}.{f} = {self.expr(ty, 2)}"
        self.scope.structs.append((name, struct))
        return line

    def block(self, depth: int, lines: list[str] | None = None, loop: bool = False) -> str:
        """A block's statements, in a child scope (what it declares is not seen after it); a loop's body
        may `break` or `continue` on a condition."""
        outer = self.scope
        self.scope = outer.child()
        leaving = f"if {self.expr(Ty('bool'), 1)} {{ {self.pick(['break', 'continue'])} }}" if loop else None
        body = [*(lines or []), *self.statements(self.rng.randint(1, 2), depth - 1)]
        if leaving is not None and self.chance(0.25):  # where it sees only what the block had on entry
            body.insert(len(lines or []), leaving)
        self.scope = outer
        text = "\n".join(body)
        return "{\n" + "".join(f"    {line}\n" for line in text.splitlines()) + "}"

    def statement_if(self, depth: int) -> str:
        condition = self.expr(Ty("bool"), 2)
        text = f"if {condition} {self.block(depth)}"
        if self.chance(0.6):
            text += f" else {self.block(depth)}"
        return text

    def statement_for(self, depth: int) -> str:
        """`for j in 0..n` (`j` may index tensors of at least `n` rows), or `for row in x` over a tensor."""
        bound = self.rng.randint(0, 4)
        index = self.fresh("j")
        iterable = f"0..{bound}"
        outer = self.scope
        self.scope = outer.child()
        if self.max_rank and self.chance(0.2):
            row = self.ty(NUMBERS, 0, 2)
            iterable = self.expr(Ty(row.dtype, (max(bound, 1), *row.shape)), 2)
            self.scope.variables.append(Variable(index, row, False))
        else:
            self.scope.variables.append(Variable(index, Ty("i64"), False))
            self.scope.loop_indices.append((index, bound))
        body = self.block(depth, loop=True)
        self.scope = outer
        return f"for {index} in {iterable} {body}"

    def statement_while(self, depth: int) -> str:
        counter = self.fresh("k")
        bound = self.rng.randint(0, 4)
        body = self.block(depth, [f"{counter} += 1"], loop=True)
        return f"let {counter} = 0\nwhile {counter} < {bound} {body}"

    # -------------------------------------------------------------- expressions
    def expr(self, ty: Ty, depth: int) -> str:
        """An expression of exactly type `ty` (never a weak literal)."""
        if depth <= 0 or self.chance(0.25):
            return self.leaf(ty)
        productions = [
            name for name, applies in PRODUCTIONS if applies(self, ty) and (self.max_rank or name in SCALAR_PRODUCTIONS)
        ]
        return getattr(self, f"make_{self.pick(productions)}")(ty, depth - 1)

    def leaf(self, ty: Ty) -> str:
        found = [v.name for v in self.scope.variables if v.ty == ty]
        found += [f"{t}[{k}]" for t, types in self.scope.tuples for k, item in enumerate(types) if item == ty]
        found += [
            f"{s}.{f}" for s, struct in self.scope.structs for f, item in self.struct_fields[struct] if item == ty
        ]
        if found and self.chance(0.7):
            return self.pick(found)
        if self.differentiable and ty.dtype in FLOATS and self.chance(0.7):
            return self.parameter(ty)
        kinds = ["parameter", "creation"] + (["literal"] if prod(ty.shape) <= 6 else [])
        kind = self.pick(kinds)
        if kind == "parameter":
            return self.parameter(ty)
        if kind == "literal":
            return self.literal(ty)
        return self.creation(ty)

    def parameter(self, ty: Ty) -> str:
        same = [name for name, t in self.params if t == ty]
        if same and self.chance(0.6):
            return self.pick(same)
        name = self.fresh("p")
        self.params.append((name, ty))
        self.scope.variables.append(Variable(name, ty, False))
        return name

    def element(self, dtype: str) -> str:
        if dtype == "bool":
            return self.pick(["true", "false"])
        if dtype in INTEGERS:
            if self.chance(0.03):  # near the ends of the range: i32 wraps, an i64 scalar overflows (E0510)
                return self.pick(["2147483647", "-2147483647"] if dtype == "i32" else ["9223372036854775807"])
            return str(self.rng.randint(-4, 5))
        return self.pick(["0.5", "-1.25", "2.0", "0.1", "-3.5", "1e-3"])

    def literal(self, ty: Ty) -> str:
        if not ty.shape:
            text = self.element(ty.dtype)
            return text if ty.dtype == "bool" else f"{text}{ty.dtype}" if "e" not in text else f"1.0e-3{ty.dtype}"
        items = [self.element(ty.dtype) for _ in range(prod(ty.shape))]
        if ty.dtype != "bool":  # one suffixed element: the literal has the dtype, it is not weak
            position = self.rng.randrange(len(items))
            items[position] = ("1.5" if "e" in items[position] else items[position]) + ty.dtype
        return nest(items, ty.shape)

    def creation(self, ty: Ty) -> str:
        dims = ", ".join(map(str, ty.shape))
        if ty.dtype == "bool":
            return f"zeros({dims}, dtype=bool)" if ty.shape else "false"
        keyword = "" if ty.dtype == "f32" else f", dtype={ty.dtype}"
        if not ty.shape:
            return self.literal(ty)
        if ty.dtype == "i64" and len(ty.shape) == 1 and self.chance(0.4):
            return f"arange({ty.shape[0]})"
        if ty.dtype in FLOATS and self.chance(0.03):
            return f"randn({dims}, seed={self.rng.randint(0, 9)}{keyword})"
        kind = self.pick(["zeros", "ones", "full"])
        value = f", value={self.element(ty.dtype)}" if kind == "full" else ""
        return f"{kind}({dims}{value}{keyword})"

    def index_in(self, size: int) -> str:
        """An index into an axis of `size`: a literal in range (maybe negative), a loop index bounded by it,
        or, rarely, an argument (the host's integers are -3..3: it may be out of range when it runs)."""
        loops = [name for name, bound in self.scope.loop_indices if bound <= size]
        if loops and self.chance(0.4):
            return self.pick(loops)
        if not self.differentiable and not self.in_helper and self.chance(0.05):
            return self.parameter(Ty("i64"))
        return str(self.rng.randint(-size, size - 1))

    # -------------------------------------------------------------- productions
    def operand_shape(self, shape: Shape) -> Shape:
        """A shape that broadcasts to `shape` (leading axes dropped, some axes 1)."""
        kept = shape[self.rng.randint(0, len(shape)) :] if shape else ()
        return tuple(1 if self.chance(0.25) else n for n in kept)

    def operands(self, ty: Ty) -> tuple[Ty, Ty]:
        """Two operand types whose arithmetic gives `ty`: one of `ty`'s shape, the other broadcasting."""
        full, other = ty.shape, self.operand_shape(ty.shape)
        dtypes = (ty.dtype, ty.dtype)
        if ty.dtype == "i64" and self.chance(0.15):
            dtypes = ("i32", "i64")
        elif ty.dtype == "f64" and self.chance(0.1):
            dtypes = ("f32", "f64")
        elif ty.dtype in FLOATS and not self.differentiable and self.chance(0.1):
            dtypes = (self.pick(INTEGERS), ty.dtype) if other == () else (ty.dtype, ty.dtype)
        first, second = Ty(dtypes[0], other), Ty(dtypes[1], full)
        return (first, second) if self.chance(0.5) else (second, first)

    def make_arithmetic(self, ty: Ty, depth: int) -> str:
        operator = self.pick(["+", "-", "*"])
        if self.chance(0.25):  # a weak literal adapts to the other operand
            literal = self.element(ty.dtype) if ty.dtype in FLOATS else str(self.rng.randint(-3, 4))
            operand = self.expr(ty, depth)
            return f"({operand} {operator} {literal})" if self.chance(0.5) else f"({literal} {operator} {operand})"
        a, b = self.operands(ty)
        return f"({self.expr(a, depth)} {operator} {self.expr(b, depth)})"

    def make_divide(self, ty: Ty, depth: int) -> str:
        a, b = self.operands(Ty(ty.dtype, ty.shape))
        if a.dtype != b.dtype:
            a, b = Ty(ty.dtype, a.shape), Ty(ty.dtype, b.shape)
        if ty.dtype in FLOATS:
            return f"({self.expr(a, depth)} / (abs({self.expr(b, depth)}) + 0.5))"
        divisor = self.expr(b, depth)
        if self.differentiable or self.chance(0.9):
            divisor = f"(abs({divisor}) + 1)"
        return f"({self.expr(a, depth)} {self.pick(['//', '%'])} {divisor})"

    def make_negate(self, ty: Ty, depth: int) -> str:
        return f"-{self.expr(ty, depth)}"

    def make_math(self, ty: Ty, depth: int) -> str:
        operand = self.expr(ty, depth)
        if ty.dtype in INTEGERS:
            return f"{self.pick(['abs', 'relu'])}({operand})"
        form = self.pick(["exp", "tanh", "sigmoid", "sin", "cos", "abs", "relu", "sqrt", "log", "power"])
        if form == "exp":
            return f"exp(tanh({operand}))"
        if form == "sqrt":
            return f"sqrt(abs({operand}) + 0.25)"
        if form == "log":
            return f"log(abs({operand}) + 1.0)"
        if form == "power":
            return f"({operand} ** {self.pick(['2', '3', '2.0', '0.5'])})".replace(
                f"({operand} ** 0.5)", f"(abs({operand}) ** 0.5)"
            )
        return f"{form}({operand})"

    def make_extreme(self, ty: Ty, depth: int) -> str:
        a, b = Ty(ty.dtype, ty.shape), Ty(ty.dtype, self.operand_shape(ty.shape))
        a, b = (a, b) if self.chance(0.5) else (b, a)
        return f"{self.pick(['maximum', 'minimum'])}({self.expr(a, depth)}, {self.expr(b, depth)})"

    def make_where(self, ty: Ty, depth: int) -> str:
        condition = self.expr(Ty("bool", self.operand_shape(ty.shape)), depth)
        a, b = Ty(ty.dtype, ty.shape), Ty(ty.dtype, self.operand_shape(ty.shape))
        return f"where({condition}, {self.expr(a, depth)}, {self.expr(b, depth)})"

    def make_compare(self, ty: Ty, depth: int) -> str:
        dtype = self.pick(NUMBERS)
        a, b = Ty(dtype, ty.shape), Ty(dtype, self.operand_shape(ty.shape))
        operator = self.pick(["<", "<=", ">", ">=", "==", "!="])
        return f"({self.expr(a, depth)} {operator} {self.expr(b, depth)})"

    def make_logic(self, ty: Ty, depth: int) -> str:
        if self.chance(0.3):
            return f"(not {self.expr(ty, depth)})"
        a, b = Ty("bool", ty.shape), Ty("bool", self.operand_shape(ty.shape))
        return f"({self.expr(a, depth)} {self.pick(['and', 'or'])} {self.expr(b, depth)})"

    def make_reduce(self, ty: Ty, depth: int) -> str:
        dtype = ty.dtype
        name = self.pick(["sum", "max", "min"] + (["mean", "logsumexp"] if dtype in FLOATS else []))
        if not ty.shape and self.chance(0.5):
            return f"{name}({self.expr(Ty(dtype, self.shape(1, 3)), depth)})"
        axis = self.rng.randint(0, len(ty.shape))
        if axis < len(ty.shape) and ty.shape[axis] == 1 and self.chance(0.5):
            operand = Ty(dtype, (*ty.shape[:axis], self.rng.randint(1, 4), *ty.shape[axis + 1 :]))
            return f"{name}({self.expr(operand, depth)}, axis={axis}, keepdims=true)"
        operand = Ty(dtype, (*ty.shape[:axis], self.rng.randint(1, 4), *ty.shape[axis:]))
        return f"{name}({self.expr(operand, depth)}, axis={axis})"

    def make_count(self, ty: Ty, depth: int) -> str:
        """`sum` of a bool tensor counts its `true`s (i64); `argmax`/`argmin` of a tensor (i64)."""
        counts = self.chance(0.5) or self.differentiable
        name = "sum" if counts else self.pick(["argmax", "argmin"])
        dtype = "bool" if counts else self.pick(NUMBERS)
        if not ty.shape:
            return f"{name}({self.expr(Ty(dtype, self.shape(1, 2)), depth)})"
        axis = self.rng.randint(0, len(ty.shape))
        operand = Ty(dtype, (*ty.shape[:axis], self.rng.randint(1, 4), *ty.shape[axis:]))
        return f"{name}({self.expr(operand, depth)}, axis={axis})"

    def make_matmul(self, ty: Ty, depth: int) -> str:
        inner = self.rng.randint(1, 4)
        shapes = {
            0: [((inner,), (inner,))],
            1: [((inner,), (inner, ty.shape[0])), ((ty.shape[0], inner), (inner,))] if ty.shape else [],
            2: [((ty.shape[0], inner), (inner, ty.shape[-1]))] if len(ty.shape) == 2 else [],
            3: [((*ty.shape[:2], inner), (inner, ty.shape[-1]))] if len(ty.shape) == 3 else [],
        }[len(ty.shape)]
        a, b = self.pick(shapes)
        left, right = self.expr(Ty(ty.dtype, a), depth), self.expr(Ty(ty.dtype, b), depth)
        return f"({left} @ {right})" if self.chance(0.7) else f"matmul({left}, {right})"

    def make_transpose(self, ty: Ty, depth: int) -> str:
        if len(ty.shape) == 2 or self.chance(0.3):
            return f"transpose({self.expr(Ty(ty.dtype, ty.shape[::-1]), depth)})"
        order = list(range(len(ty.shape)))
        self.rng.shuffle(order)
        source = [0] * len(order)
        for position, axis in enumerate(order):
            source[axis] = ty.shape[position]
        return f"transpose({self.expr(Ty(ty.dtype, tuple(source)), depth)}, {', '.join(map(str, order))})"

    def make_reshape(self, ty: Ty, depth: int) -> str:
        size = prod(ty.shape)
        source = self.pick([(size,), (1, size), ty.shape[::-1]])
        dims = list(map(str, ty.shape))
        if self.chance(0.3):
            dims[self.rng.randrange(len(dims))] = "-1"
        return f"reshape({self.expr(Ty(ty.dtype, source), depth)}, {', '.join(dims)})"

    def make_index(self, ty: Ty, depth: int) -> str:
        form = self.pick(["item", "slice", "column"] if ty.shape else ["item"])
        if form == "item":
            size = self.rng.randint(1, 4)
            return f"{self.expr(Ty(ty.dtype, (size, *ty.shape)), depth)}[{self.index_in(size)}]"
        if form == "slice":
            size = ty.shape[0] + self.rng.randint(0, 2)
            start = self.rng.randint(0, size - ty.shape[0])
            operand = self.expr(Ty(ty.dtype, (size, *ty.shape[1:])), depth)
            return f"{operand}[{start}:{start + ty.shape[0]}]"
        size = self.rng.randint(1, 4)
        operand = self.expr(Ty(ty.dtype, (ty.shape[0], size, *ty.shape[1:])), depth)
        return f"{operand}[:, {self.index_in(size)}]"

    def make_convert(self, ty: Ty, depth: int) -> str:
        if ty.dtype == "i64":
            source = self.pick(["f32", "f64", "bool", "i32"])
            return f"int({self.expr(Ty(source, ty.shape), depth)})"
        source = self.pick(["i64", "i32", "bool", "f64" if ty.dtype == "f32" else "f32"])
        keyword = ", dtype=f64" if ty.dtype == "f64" else ""
        return f"float({self.expr(Ty(source, ty.shape), depth)}{keyword})"

    def make_softmax(self, ty: Ty, depth: int) -> str:
        axis = f", axis={self.rng.randrange(len(ty.shape))}" if self.chance(0.4) else ""
        return f"{self.pick(['softmax', 'log_softmax'])}({self.expr(ty, depth)}{axis})"

    def make_join(self, ty: Ty, depth: int) -> str:
        axis = self.rng.randrange(len(ty.shape))
        if ty.shape[axis] <= 3 and self.chance(0.5):
            item = Ty(ty.dtype, ty.shape[:axis] + ty.shape[axis + 1 :])
            parts = ", ".join(self.expr(item, depth) for _ in range(ty.shape[axis]))
            return f"stack(({parts},), axis={axis})" if ty.shape[axis] == 1 else f"stack(({parts}), axis={axis})"
        if ty.shape[axis] < 2:
            return self.expr(ty, depth)
        first = self.rng.randint(1, ty.shape[axis] - 1)
        sizes = (first, ty.shape[axis] - first)
        parts = [self.expr(Ty(ty.dtype, (*ty.shape[:axis], n, *ty.shape[axis + 1 :])), depth) for n in sizes]
        return f"concat(({parts[0]}, {parts[1]}), axis={axis})"

    def make_one_hot(self, ty: Ty, depth: int) -> str:
        labels = self.expr(Ty("i64", ty.shape[:1]), depth)
        classes = ty.shape[1]
        if self.chance(0.9):
            labels = f"({labels} % {classes})"
        return f"one_hot({labels}, {classes})"

    def make_call(self, ty: Ty, depth: int) -> str:
        known = [
            (name, params)
            for name, params, result, differentiable in self.helpers
            if result == ty and (differentiable or not self.differentiable)
        ]
        if known and self.chance(0.5):
            name, params = self.pick(known)
        else:
            name, params = self.helper(ty)
        return f"{name}({', '.join(self.expr(p, depth) for p in params)})"

    def helper(self, result: Ty) -> tuple[str, tuple[Ty, ...]]:
        """A new helper function returning `result`, with its own parameters and body."""
        saved = (self.params, self.scope, self.in_helper)
        self.in_helper = True
        name = self.fresh("h")
        params = tuple(self.ty(NUMBERS if not self.differentiable else FLOATS) for _ in range(self.rng.randint(1, 2)))
        self.params = [(f"a{k}", ty) for k, ty in enumerate(params)]
        self.scope = Scope([Variable(p, ty, False) for p, ty in self.params])
        body = self.statements(self.rng.randint(0, 2), depth=1)
        value = self.expr(result, 2)
        extra = self.params[len(params) :]  # a helper takes no new parameters: those become `let`s of literals
        self.params = self.params[: len(params)]
        lets = [f"let {p} = {self.creation(ty) if ty.shape else self.literal(ty)}" for p, ty in extra]
        annotated = self.chance(0.6)
        shown = ", ".join(f"{p}: {ty}" if annotated else p for p, ty in self.params)
        arrow = f" -> {result}" if annotated else ""
        lines = "".join(f"    {line}\n" for statement in [*lets, *body] for line in statement.splitlines())
        self.declarations.append(f"fn {name}({shown}){arrow} {{\n{lines}    return {value}\n}}\n")
        self.params, self.scope, self.in_helper = saved
        self.helpers.append((name, params, result, self.differentiable))
        return name, params

    def make_lambda(self, ty: Ty, depth: int) -> str:
        """An anonymous function called where it is made; its body may use (capture) what is in scope."""
        argument = self.ty(FLOATS if self.differentiable else NUMBERS)
        name = self.fresh("a")
        outer = self.scope
        self.scope = outer.child()
        self.scope.variables.append(Variable(name, argument, False))
        body = self.expr(ty, depth)
        self.scope = outer
        shown = f"{name}: {argument}" if self.chance(0.5) else name
        return f"(fn({shown}) => {body})({self.expr(argument, depth)})"

    def make_recursion(self, ty: Ty, depth: int) -> str:
        """A call of a recursive helper `r(x, n)` that applies a step to `x` `n` times."""
        name = self.recursive.get(ty)
        if name is None:
            name = self.fresh("r")
            step = self.pick(
                ["tanh(x) * 0.5 + x * 0.25", "x * 0.5 - 0.25", "sin(x) + x * 0.1", "maximum(x, 0.5) * 0.9"]
            )
            if ty.dtype == "f64":
                step = step.replace("0.5", "0.5f64")
            body = f"    if n <= 0 {{ return x }}\n    return {name}({step}, n - 1)\n"
            self.declarations.append(f"fn {name}(x: {ty}, n: i64) -> {ty} {{\n{body}}}\n")
            self.recursive[ty] = name
        count = str(self.rng.randint(0, 3))
        if not self.in_helper and self.chance(0.3):  # known only when it runs: real recursive calls
            count = f"({self.parameter(Ty('i64'))} % 4)"
        return f"{name}({self.expr(ty, depth)}, {count})"


# What keeps to scalars (a function of scalars only is drawn with these).
SCALAR_PRODUCTIONS = {"arithmetic", "divide", "negate", "math", "extreme", "compare", "logic", "convert", "call"}
SCALAR_PRODUCTIONS |= {"recursion", "lambda"}


def rank_at_least(n: int):
    return lambda g, ty: len(ty.shape) >= n


PRODUCTIONS = [
    ("arithmetic", lambda g, ty: ty.dtype in NUMBERS),
    ("divide", lambda g, ty: ty.dtype in NUMBERS),
    ("negate", lambda g, ty: ty.dtype in NUMBERS),
    ("math", lambda g, ty: ty.dtype in NUMBERS),
    ("extreme", lambda g, ty: ty.dtype in NUMBERS),
    ("where", lambda g, ty: ty.dtype in NUMBERS),
    ("compare", lambda g, ty: ty.dtype == "bool"),
    ("logic", lambda g, ty: ty.dtype == "bool"),
    ("reduce", lambda g, ty: ty.dtype in NUMBERS and len(ty.shape) <= 2),
    ("count", lambda g, ty: ty.dtype == "i64" and len(ty.shape) <= 2),
    ("matmul", lambda g, ty: ty.dtype in FLOATS),
    ("transpose", lambda g, ty: len(ty.shape) >= 2),
    ("reshape", rank_at_least(1)),
    ("index", lambda g, ty: len(ty.shape) <= 2),
    ("convert", lambda g, ty: ty.dtype in ("f32", "f64", "i64") and not g.differentiable),
    ("softmax", lambda g, ty: ty.dtype in FLOATS and len(ty.shape) >= 1),
    ("join", rank_at_least(1)),
    ("one_hot", lambda g, ty: ty.dtype == "f32" and len(ty.shape) == 2 and not g.differentiable),
    ("call", lambda g, ty: True),
    ("recursion", lambda g, ty: ty.dtype in FLOATS),
    ("lambda", lambda g, ty: not g.differentiable),  # (`grad` does not go through a call of one yet)
]


def nest(items: list[str], shape: Shape) -> str:
    if not shape:
        return items[0]
    step = len(items) // shape[0]
    return "[" + ", ".join(nest(items[k * step : (k + 1) * step], shape[1:]) for k in range(shape[0])) + "]"


def argument(rng: np.random.Generator, ty: Ty):
    """A random value of type `ty` in the interpreter's representation (i64 and bool scalars are Python's)."""
    if ty.dtype in FLOATS:
        values = rng.standard_normal(ty.shape).astype(np.float32 if ty.dtype == "f32" else np.float64)
        if rng.random() < 0.05:  # nan, infinities and a negative zero, here and there
            special = rng.random(ty.shape) < 0.3
            values = np.where(special, rng.choice([np.nan, np.inf, -np.inf, -0.0, 1e30], ty.shape), values)
            values = values.astype(np.float32 if ty.dtype == "f32" else np.float64)
    elif ty.dtype in INTEGERS:
        extreme = np.iinfo(np.int32 if ty.dtype == "i32" else np.int64).max
        high = extreme if rng.random() < 0.05 else 4
        values = rng.integers(-high, high, ty.shape).astype(np.int32 if ty.dtype == "i32" else np.int64)
    else:
        values = rng.random(ty.shape) < 0.5
    if ty.shape:
        return values
    if ty.dtype == "i64":
        return int(values)
    if ty.dtype == "bool":
        return bool(values)
    return values[()]


# ---------------------------------------------------------------------- mutations

TOKEN = re.compile(
    r"[A-Za-z_][A-Za-z0-9_]*|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?:[fi](?:32|64))?|\.\.|->|[-+*/%=<>!]=|//|\*\*|\S"
)
OPERAND = r"([A-Za-z_][A-Za-z0-9_]*|\d+(?:\.\d+)?(?:[fi](?:32|64))?)"
BINARY = re.compile(rf"{OPERAND} ([-+*/@<>]|//|==|<=|>=) {OPERAND}")
DTYPE_NAMES = ("f32", "f64", "i32", "i64", "bool")
MUTATIONS = ("delete", "duplicate", "swap", "shape", "index", "name", "dtype")


def mutate(source: str, rng: random.Random) -> tuple[str, str]:
    """`source` broken as a user might break it: (what was done, the new source). The new source may still
    be a valid program (a swapped `+`); it is checked like any other."""
    kind = MUTATIONS[rng.randrange(len(MUTATIONS))]
    mutated = globals()[f"mutate_{kind}"](source, rng)
    return (kind, mutated) if mutated is not None and mutated != source else ("delete", mutate_delete(source, rng))


def tokens(source: str) -> list[re.Match]:
    return list(TOKEN.finditer(source))


def mutate_delete(source: str, rng: random.Random) -> str:
    token = rng.choice(tokens(source))
    return source[: token.start()] + source[token.end() :]


def mutate_duplicate(source: str, rng: random.Random) -> str:
    token = rng.choice(tokens(source))
    return source[: token.end()] + " " + token.group() + source[token.end() :]


def mutate_swap(source: str, rng: random.Random) -> str | None:
    found = list(BINARY.finditer(source))
    if not found:
        return None
    match = rng.choice(found)
    swapped = f"{match.group(3)} {match.group(2)} {match.group(1)}"
    return source[: match.start()] + swapped + source[match.end() :]


def replace_one(source: str, pattern: str, rng: random.Random, replacement) -> str | None:
    found = list(re.finditer(pattern, source))
    if not found:
        return None
    match = rng.choice(found)
    return source[: match.start(1)] + replacement(match.group(1)) + source[match.end(1) :]


SIZES = re.compile(r"\b(?:f32|f64|i32|i64|bool)\[([\d, ]+)\]|\b(?:zeros|ones|full|randn|arange)\(([\d, ]+)")


def mutate_shape(source: str, rng: random.Random) -> str | None:
    """A size in a type or a creation call changed: `f32[2, 3]` -> `f32[2, 4]`, `zeros(3)` -> `zeros(-1)`."""
    found = [(m.start(g), m.group(g)) for m in SIZES.finditer(source) for g in (1, 2) if m.group(g)]
    if not found:
        return None
    start, sizes = rng.choice(found)
    numbers = list(re.finditer(r"\d+", sizes))
    number = rng.choice(numbers)
    size = int(number.group())
    changed = str(rng.choice([0, 1, size + 1, size * 2, -1, 7]))
    return source[: start + number.start()] + changed + source[start + number.end() :]


def mutate_index(source: str, rng: random.Random) -> str | None:
    """An index out of range: `x[1]` -> `x[9]`, `x[-2]` -> `x[-7]`."""
    return replace_one(source, r"\[(-?\d+)\]", rng, lambda index: str(rng.choice([5, 9, -7, 100])))


def mutate_name(source: str, rng: random.Random) -> str | None:
    names = sorted(set(re.findall(r"\b([a-z][a-z0-9]*)\b", source)) - KEYWORDS)
    if len(names) < 2:
        return None
    return replace_one(source, r"\b([a-z][a-z0-9]*\d)\b", rng, lambda name: rng.choice(names))


def mutate_dtype(source: str, rng: random.Random) -> str | None:
    return replace_one(source, r"\b(f32|f64|i32|i64|bool)\b", rng, lambda dtype: rng.choice(DTYPE_NAMES))


KEYWORDS = frozenset(
    {"fn", "let", "if", "else", "while", "for", "in", "return", "break", "continue", "struct", "import", "as"}
    | {"const", "and", "or", "not", "true", "false"}
)


# ---------------------------------------------------------------------- programs that may fail when they run

# Each: (parameters, the expression that may fail, how to draw the host's arguments). The arguments are
# drawn so that about half the calls fail.
FAILURES = {
    "index": (
        "x: f32[4], i: i64",
        "x[i] * 2.0",
        lambda r: (r.standard_normal(4).astype(np.float32), int(r.integers(-6, 6))),
    ),
    "element": ("x: f64[3], i: i64", "set_at(x, i)", lambda r: (r.standard_normal(3), int(r.integers(-5, 5)))),
    "divide": ("a: i64, b: i64", "a // b + a % (b + 1)", lambda r: (int(r.integers(-9, 9)), int(r.integers(-1, 2)))),
    "divide32": ("a: i32, b: i32", "a // b", lambda r: (np.int32(r.integers(-9, 9)), np.int32(r.integers(-1, 2)))),
    "overflow": (
        "a: i64, b: i64",
        "a * b - a",
        lambda r: (int(r.choice([3, 2**62, -(2**63)])), int(r.integers(-3, 4))),
    ),
    "negate": ("a: i64", "-a + abs(a)", lambda r: (int(r.choice([5, -(2**63), 2**63 - 1])),)),
    "wrap32": (
        "a: i32, b: i32",
        "a * b + a",
        lambda r: (np.int32(r.choice([7, 2**31 - 1])), np.int32(r.integers(-3, 4))),
    ),
    "power": ("a: i64, b: i64", "a ** b", lambda r: (int(r.integers(-3, 4)), int(r.integers(-2, 70)))),
    "convert": ("x: f64", "int(x * 3.0)", lambda r: (np.float64(r.choice([2.5, np.nan, np.inf, 1e300, -7.25])),)),
    "convert32": ("x: f32", "int(x)", lambda r: (np.float32(r.choice([2.5, np.nan, -np.inf, 3e38])),)),
    "zeros": ("n: i64", "sum(zeros(n) + 1.0)", lambda r: (int(r.choice([3, 0, -2, 5000000000000])),)),
    "one_hot": ("y: i64[3]", "sum(one_hot(y, 3))", lambda r: (r.integers(-1, 4, 3),)),
    "gather": (
        "x: f32[3], i: i64[2]",
        "sum(gather(x, i, axis=0))",
        lambda r: (np.ones(3, np.float32), r.integers(-4, 4, 2)),
    ),
    # f64: an f32 sum near zero differs by more than f64's tolerance (numpy sums in f32, compiled code in f64)
    "assert": ("x: f64[3]", "checked(x)", lambda r: (r.standard_normal(3),)),
    "reshape": (
        "x: f32[6], n: i64",
        "sum(reshape(x, n, -1) * 2.0)",
        lambda r: (np.ones(6, np.float32), int(r.integers(1, 5))),
    ),
}
FAILURE_HELPERS = """fn set_at(x: f64[3], i: i64) -> f64 {
    let y = x
    y[i] = 7.0f64
    return sum(y)
}

fn checked(x: f64[3]) -> f64 {
    assert(sum(x) < 1.0, "the sum must stay below 1")
    return sum(x)
}
"""


def failing(seed: int) -> Program:
    """A small program that may fail when it runs, in one of `FAILURES`' ways, called directly, from a loop
    or through a helper (compiled as a scalar function, a fused or a specialised one, or interpreted)."""
    rng = random.Random(seed)
    kind = sorted(FAILURES)[seed % len(FAILURES)]  # consecutive seeds: every way
    params, expression, draw = FAILURES[kind]
    names = [p.split(":")[0] for p in params.split(", ")]
    context = rng.choice(["direct", "loop", "helper"])
    inner = ""
    if context == "helper":
        inner = f"fn inner({params}) {{\n    return {expression}\n}}\n"
        expression = f"inner({', '.join(names)})"
    value = f"float({expression}, dtype=f64)"
    body = f"    return {value}\n"
    if context == "loop":
        body = (
            f"    let total = 0.0f64\n    for k in 0..2 {{\n        total = total + {value}\n    }}\n    return total\n"
        )
    source = f"{FAILURE_HELPERS}\n{inner}\nfn f({params}) -> f64 {{\n{body}}}\n"
    values = np.random.default_rng(seed)
    calls = tuple(("f", tuple(draw(values))) for _ in range(3))
    return Program(seed, source, calls, None)
