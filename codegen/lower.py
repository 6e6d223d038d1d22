"""Lowering checked functions to the IR (codegen/ir.py): `lower(typed) -> Lowered`.

Takes the checker's result (after `grad` has been expanded, so derivative code is ordinary functions) and
lowers every top-level function whose parameters and result are annotated scalars (f64, f32, i64, i32, bool)
and whose body uses only scalar code: arithmetic, comparisons, `and`/`or`/`not`, `let` and assignment,
`if`, `while`, `for i in a..b`, `break`, `continue`, `return`, calls of other lowered functions and the
elementwise math built-ins. Any other function is refused with the reason, and so is a function calling
a refused one; the backend runs refused functions on the interpreter. Literal and operator dtypes follow
the interpreter's rules exactly (a weak literal takes the other operand's dtype; operands of different dtypes
meet in the checker's `promote_dtypes`, converted as `SCALAR_PROMOTIONS` says; i32 arithmetic wraps around as
numpy's does); where they would not be obviously the same, the function is refused rather than compiled
differently.
"""

from __future__ import annotations

import operator
from dataclasses import field

import numpy as np
from dl.codegen import ir
from dl.lang import ast
from dl.lang.check import Typed
from dl.lang.diagnostics import Span
from dl.lang.primitives import FLOAT_MATH, PRIMITIVES, Prim
from dl.lang.record import record
from dl.lang.shapes import promote_dtypes
from dl.lang.types import UNIT, FunctionRef, PrimitiveRef, TensorType
from dl.runtime.errors import NEGATIVE_POWER

# The math built-ins scalar code computes (an `ir.MathCall` named after the primitive); those in `FLOAT_MATH`
# take floats only.
SCALAR_MATH = FLOAT_MATH | {Prim.ABS, Prim.SIGN, Prim.RELU, Prim.MAXIMUM, Prim.MINIMUM}
ARITHMETIC = {"+": "add", "-": "sub", "*": "mul", "/": "div", "//": "floordiv", "%": "mod", "**": "pow"}
COMPARISONS = frozenset({"==", "!=", "<", "<=", ">", ">="})
CHECKED_INTEGER = frozenset({"add", "sub", "mul", "floordiv", "mod"})
INTEGER_RANGES = {"i64": (-(2**63), 2**63), "i32": (-(2**31), 2**31)}

# The conversions compiled code makes where operands of different dtypes meet (`promoted_dtype`), each the
# interpreter's: numpy's casts of an i32 (exact, or rounded once to a float) and of an f32 to f64, for tensors
# and scalars alike; an i64 scalar (a Python int in the interpreter) also becomes a float, through f64 as numpy
# converts a Python int. An i64 tensor to f32 (numpy rounds once, not through f64) is not made: refused.
TENSOR_PROMOTIONS = frozenset({("i32", "i64"), ("i32", "f32"), ("i32", "f64"), ("f32", "f64")})
SCALAR_PROMOTIONS = TENSOR_PROMOTIONS | {("i64", "f32"), ("i64", "f64")}


def promoted_dtype(a: str, a_weak: bool, b: str, b_weak: bool) -> str:
    """The dtype operands of dtypes `a` and `b` meet in (`*_weak`: an unsuffixed literal): the checker's rule
    (lang/shapes.py `promote_dtypes`), which is the interpreter's."""
    return promote_dtypes(TensorType(a, weak=a_weak), TensorType(b, weak=b_weak))


def wraps_around(dtype: str) -> bool:
    """Whether scalar integer arithmetic in `dtype` wraps as numpy's (i32) rather than failing on overflow as
    the interpreter's i64 scalars do (an i64 computed from an i32 too)."""
    return dtype == "i32"


class Unsupported(Exception):
    """Why a function is not compiled (shown by `--explain-backend`), and where: the span of the code it
    does not compile, when the reason is about one place (`str` shows it after the reason)."""

    def __init__(self, reason: str, span: Span | None = None) -> None:
        super().__init__(reason)
        self.reason, self.span = reason, span

    def __str__(self) -> str:
        return self.reason if self.span is None else f"{self.reason} (at {self.span})"


@record
class Lowered:
    """The lowered functions by id of their `FnDecl`, and the refused ones with the reason."""

    functions: dict[int, ir.Function] = field(default_factory=dict)
    refused: dict[int, str] = field(default_factory=dict)
    declarations: dict[int, tuple[ast.FnDecl, str]] = field(default_factory=dict)  # id -> (decl, module path)
    kernels: dict[int, object] = field(default_factory=dict)  # fused elementwise functions (codegen/fusion.py)
    specialised: set[int] = field(default_factory=set)  # compiled per argument layout (codegen/specialize.py)


def lower(typed: Typed) -> Lowered:
    """Lower every compilable top-level function of the program; refuse the rest, with reasons."""
    lowered = Lowered()
    callees: dict[int, set[int]] = {}
    for path, module in typed.program.modules.items():
        for decl in module.decls:
            if isinstance(decl, ast.FnDecl):
                lowered.declarations[id(decl)] = (decl, path)
                try:
                    function, calls = FunctionLowering(typed, decl, path).run()
                except Unsupported as reason:
                    lowered.refused[id(decl)] = str(reason)
                    continue
                lowered.functions[id(decl)] = function
                callees[id(decl)] = calls
    refuse_callers_of_refused(lowered, callees)
    return lowered


def refuse_callers_of_refused(lowered: Lowered, callees: dict[int, set[int]]) -> None:
    """Compiled code calls compiled code only: drop functions calling a refused one, until none does."""
    changed = True
    while changed:
        changed = False
        for key in list(lowered.functions):
            missing = [callee for callee in callees[key] if callee not in lowered.functions]
            if missing:
                name = lowered.declarations[missing[0]][0].name if missing[0] in lowered.declarations else "?"
                lowered.refused[key] = f"calls `{name}`, which is not compiled"
                del lowered.functions[key]
                changed = True


def symbol(path: str, name: str) -> str:
    return f"{path}::{name}"


def scalar_dtype(t: object, what: str) -> str:
    if isinstance(t, TensorType) and not t.dims and t.dtype in ir.SCALAR_DTYPES:
        return t.dtype
    raise Unsupported(f"{what} has type {t}, not a scalar f64, f32, i64, i32 or bool")


@record
class Value:
    """A lowered expression: its operand, and for an unsuffixed literal the number it adapts from."""

    operand: ir.Operand
    weak: int | float | None = None


class FunctionLowering:
    """Lowers one function; `run` returns it and the ids of the functions it calls."""

    def __init__(self, typed: Typed, decl: ast.FnDecl, path: str) -> None:
        self.typed = typed
        self.decl = decl
        self.path = path
        self.blocks: list[ir.Block] = []
        self.label = "entry"
        self.instructions: list[ir.Instruction] = []
        self.used_labels: dict[str, int] = {}
        self.given_names: set[str] = set()  # every label and temporary (`%name`) given out
        self.scopes: list[dict[str, ir.Variable]] = [{}]
        self.variables: list[ir.Variable] = []
        self.loops: list[tuple[str, str]] = []  # (continue target, break target)
        self.sites: list[ir.Site] = []
        self.calls: set[int] = set()
        self.result = ""

    # -------------------------------------------------------------- function
    def run(self) -> tuple[ir.Function, set[int]]:
        decl = self.decl
        params = []
        for param in decl.params:
            if param.annotation is None:
                raise Unsupported(f"parameter `{param.name}` is not annotated")
            if param.default is not None:
                raise Unsupported(f"parameter `{param.name}` has a default")
            params.append(self.declare(param.name, scalar_dtype(self.typed.type_of(param), f"`{param.name}`")))
        signature = self.signature()
        self.result = "unit" if signature == UNIT else scalar_dtype(signature, "its result")
        if id(decl) in self.typed.checked_calls:
            raise Unsupported("its annotations are checked at run time")
        self.block(decl.body)
        if self.label is not None:
            self.finish(ir.Return(None if self.result == "unit" else ir.Const(zero(self.result), self.result)))
        recursion = ir.Site("E0506", f"recursion too deep in `{decl.name}`", decl.name_span)
        function = ir.Function(
            symbol(self.path, decl.name),
            decl.name,
            tuple(params),
            self.result,
            tuple(self.variables),
            tuple(self.blocks),
            tuple(self.sites),
            recursion,
        )
        return function, self.calls

    def signature(self) -> object:
        """The checked result type (the annotation's, or the one the checker inferred from the body)."""
        results = {s.result for s in self.typed.signatures.get(self.path, []) if s.name == self.decl.name}
        if len(results) != 1:
            raise Unsupported("it has no checked signature" if not results else "it has several checked signatures")
        return results.pop()

    # -------------------------------------------------------------- blocks and names
    def fresh_label(self, hint: str) -> str:
        """`hint`, or `hint.1`, `hint.2`, ...: never a name given before, even one whose hint ends in a
        number (a variable `c.1` of a function inlined twice read after `c` was read twice)."""
        count = self.used_labels.get(hint, 0)
        name = hint if count == 0 else f"{hint}.{count}"
        while name in self.given_names:
            count += 1
            name = f"{hint}.{count}"
        self.used_labels[hint] = count + 1
        self.given_names.add(name)
        return name

    def finish(self, terminator: ir.Terminator) -> None:
        """End the current block (code after a `return`, `break` or `continue` is unreachable: dropped)."""
        if self.label is not None:
            self.blocks.append(ir.Block(self.label, tuple(self.instructions), terminator))
        self.label = None
        self.instructions = []

    def start(self, label: str) -> None:
        self.label = label
        self.instructions = []

    def emit(self, instruction: ir.Instruction) -> None:
        if self.label is not None:
            self.instructions.append(instruction)

    def temp(self, hint: str, dtype: str) -> ir.Temp:
        """A new temporary named after what it holds, made unique within the function."""
        return ir.Temp(self.fresh_label(f"%{hint}")[1:], dtype)

    def declare(self, name: str, dtype: str) -> ir.Variable:
        taken = {v.name for v in self.variables}
        unique = name
        count = 1
        while unique in taken:
            unique = f"{name}.{count}"
            count += 1
        variable = ir.Variable(unique, dtype)
        self.variables.append(variable)
        self.scopes[-1][name] = variable
        return variable

    def lookup(self, name: str, span: Span) -> ir.Variable:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        raise Unsupported(f"it uses `{name}`, which is not a local scalar", span)

    def site(self, code: str, message: str, span: Span, shows: str | None = None) -> int:
        self.sites.append(ir.Site(code, message, span, shows))
        return len(self.sites) - 1

    # -------------------------------------------------------------- statements
    def block(self, block: ast.Block) -> None:
        self.scopes.append({})
        for stmt in block.body:
            self.statement(stmt)
        self.scopes.pop()

    def statement(self, stmt: ast.Stmt) -> None:
        match stmt:
            case ast.Let(pattern=ast.NamePattern(name=name), value=value):
                if id(stmt) in self.typed.runtime_checks:
                    raise Unsupported(f"`let {name}` is checked at run time")
                lowered = self.expression(value)
                self.emit(ir.Store(self.declare(name, lowered.operand.dtype), lowered.operand))
            case ast.Assign(target=ast.Name(id=name), op=op, value=value):
                if id(stmt) in self.typed.runtime_checks:
                    raise Unsupported(f"`{name} = ...` is checked at run time")
                self.assign(self.lookup(name, stmt.span), op, value, stmt.span)
            case ast.ExprStmt(expr=ast.Call() as call):
                self.call(call, discarded=True)
            case ast.If():
                self.if_statement(stmt)
            case ast.While():
                self.while_statement(stmt)
            case ast.For(pattern=ast.NamePattern(name=name), iterable=ast.Range() as bounds, body=body):
                self.for_range(name, bounds, body)
            case ast.Return(value=None) if self.result == "unit":
                self.finish(ir.Return(None))
            case ast.Return() if self.result == "unit":
                raise Unsupported("it returns a value from a function without a result", stmt.span)
            case ast.Return(value=value):
                returned = self.expression(value)
                if self.decl.result is None and returned.weak is not None:
                    raise Unsupported("it returns an unsuffixed literal with no result annotation", stmt.span)
                self.finish(ir.Return(self.convert(returned, self.result, "the returned value")))
            case ast.Break():
                self.finish(ir.Jump(self.loops[-1][1]))
            case ast.Continue():
                self.finish(ir.Jump(self.loops[-1][0]))
            case _:
                raise Unsupported("it has a statement the compiler does not handle yet", stmt.span)

    def assign(self, variable: ir.Variable, op: str, value: ast.Expr, span: Span) -> None:
        if op == "=":
            operand = self.convert(self.expression(value), variable.dtype, f"the value assigned to `{variable.name}`")
        else:
            current = self.temp(variable.name, variable.dtype)
            self.emit(ir.Load(current, variable))
            result = self.binary(op[:-1], Value(current), self.expression(value), span)
            operand = self.convert(result, variable.dtype, f"`{variable.name} {op} ...`")
        self.emit(ir.Store(variable, operand))

    def condition(self, expr: ast.Expr, then: str, otherwise: str) -> None:
        value = self.expression(expr)
        if value.operand.dtype != "bool":
            raise Unsupported(f"a condition is {value.operand.dtype}, not bool", expr.span)
        self.finish(ir.Branch(value.operand, then, otherwise))

    def if_statement(self, stmt: ast.If) -> None:
        value = self.expression(stmt.cond)
        if value.operand.dtype != "bool":
            raise Unsupported(f"a condition is {value.operand.dtype}, not bool", stmt.cond.span)
        self.if_branches(value.operand, stmt)

    def if_branches(self, condition: ir.Operand, stmt: ast.If) -> None:
        """The blocks of an `if` on `condition`; an `else if` is an `if_statement` of its own."""
        then, otherwise, end = self.fresh_label("if.then"), self.fresh_label("if.else"), self.fresh_label("if.end")
        self.finish(ir.Branch(condition, then, otherwise if stmt.orelse is not None else end))
        self.start(then)
        self.block(stmt.then)
        self.finish(ir.Jump(end))
        if stmt.orelse is not None:
            self.start(otherwise)
            if isinstance(stmt.orelse, ast.If):
                self.if_statement(stmt.orelse)
            else:
                self.block(stmt.orelse)
            self.finish(ir.Jump(end))
        self.start(end)

    def while_statement(self, stmt: ast.While) -> None:
        test, body, end = self.fresh_label("while.cond"), self.fresh_label("while.body"), self.fresh_label("while.end")
        self.finish(ir.Jump(test))
        self.start(test)
        self.condition(stmt.cond, body, end)
        self.start(body)
        self.loops.append((test, end))
        self.block(stmt.body)
        self.loops.pop()
        self.finish(ir.Jump(test))
        self.start(end)

    def for_range(self, name: str, bounds: ast.Range, body: ast.Block) -> None:
        """`for i in a..b`: the bounds are evaluated once; assigning to `i` does not change the iteration."""
        low = self.promote(self.expression(bounds.start), "i64", bounds.span)  # an i32 bound widens
        high = self.promote(self.expression(bounds.stop), "i64", bounds.span)
        counter = self.declare(f"{name}.counter", "i64")
        stop = self.declare(f"{name}.stop", "i64")
        self.emit(ir.Store(counter, low))
        self.emit(ir.Store(stop, high))

        def limit() -> ir.Operand:
            bound = self.temp("stop", "i64")
            self.emit(ir.Load(bound, stop))
            return bound

        self.counted_loop(
            name, counter, limit, body, lambda value: self.emit(ir.Store(self.declare(name, "i64"), value))
        )

    def counted_loop(self, name: str, counter: ir.Variable, limit, body: ast.Block, bind) -> None:
        """`while counter < limit() { bind(counter); body; counter += 1 }`, `bind` in the body's scope,
        `break` and `continue` going to the end and to the increment (which cannot overflow: it stays
        below the limit)."""
        test, step = self.fresh_label("for.cond"), self.fresh_label("for.step")
        inner, end = self.fresh_label("for.body"), self.fresh_label("for.end")
        self.finish(ir.Jump(test))
        self.start(test)
        current = self.temp(name, "i64")
        self.emit(ir.Load(current, counter))
        bound, going = limit(), self.temp("in.range", "bool")
        self.emit(ir.Compare(going, "<", current, bound))
        self.finish(ir.Branch(going, inner, end))
        self.start(inner)
        self.scopes.append({})
        value = self.temp(name, "i64")
        self.emit(ir.Load(value, counter))
        bind(value)
        self.loops.append((step, end))
        self.block(body)
        self.loops.pop()
        self.scopes.pop()
        self.finish(ir.Jump(step))
        self.start(step)
        before, after = self.temp(name, "i64"), self.temp("next", "i64")
        self.emit(ir.Load(before, counter))
        self.emit(ir.BinaryOp(after, "add", before, ir.Const(1, "i64")))
        self.emit(ir.Store(counter, after))
        self.finish(ir.Jump(test))
        self.start(end)

    # -------------------------------------------------------------- expressions
    def expression(self, expr: ast.Expr) -> Value:
        match expr:
            case ast.IntLiteral() | ast.FloatLiteral():
                return self.literal(expr)
            case ast.BoolLiteral(value=value):
                return Value(ir.Const(value, "bool"))
            case ast.Name(id=name):
                variable = self.lookup(name, expr.span)
                result = self.temp(name, variable.dtype)
                self.emit(ir.Load(result, variable))
                return Value(result)
            case ast.Unary(op="-", operand=operand):
                return self.negate(self.expression(operand), expr.span)
            case ast.Unary(op="not", operand=operand):
                return self.logical_not(self.expression(operand), expr.span)
            case ast.Binary(op="and" | "or"):
                return self.short_circuit(expr)
            case ast.Binary(op=op, lhs=lhs, rhs=rhs):
                return self.binary(op, self.expression(lhs), self.expression(rhs), expr.span)
            case ast.Call():
                return self.call(expr)
            case ast.FString():
                raise Unsupported("it formats an f-string, which the interpreter does", expr.span)
        raise Unsupported(f"it uses {type(expr).__name__.lower()} expressions", expr.span)

    def literal_coercion(self, expr: ast.IntLiteral | ast.FloatLiteral) -> str | None:
        """The dtype a literal takes from its context (`Typed.coercions`)."""
        return self.typed.coercions.get(id(expr))

    def literal(self, expr: ast.IntLiteral | ast.FloatLiteral) -> Value:
        coerced = self.literal_coercion(expr)
        default = "i64" if isinstance(expr, ast.IntLiteral) else "f32"
        dtype = expr.dtype or coerced or default
        if dtype not in ir.SCALAR_DTYPES:
            raise Unsupported(f"a literal of dtype {dtype}", expr.span)
        if dtype in INTEGER_RANGES and not fits(expr.value, dtype):
            raise Unsupported(f"integer literal {expr.value} is out of range", expr.span)
        weak = None if expr.dtype or coerced else expr.value
        return Value(ir.Const(cast_constant(expr.value, dtype), dtype), weak)

    def negate(self, value: Value, span: Span) -> Value:
        if isinstance(value.operand, ir.Const) and value.operand.dtype != "bool":
            if value.operand.dtype == "i64" and value.operand.value == -(2**63):
                raise Unsupported("negating the smallest i64", span)
            weak = -value.weak if value.weak is not None else None
            return Value(ir.Const(-value.operand.value, value.operand.dtype), weak)
        dtype = value.operand.dtype
        if dtype == "bool":
            raise Unsupported("negating a bool", span)
        result = self.temp("neg", dtype)
        site = None  # i32 wraps, as numpy's
        if dtype == "i64":
            site = self.site("E0510", f"integer overflow: -({-(2**63)}) is out of the i64 range", span)
        self.emit(ir.UnaryOp(result, "neg", value.operand, site))
        return Value(result)

    def logical_not(self, value: Value, span: Span) -> Value:
        if value.operand.dtype != "bool":
            raise Unsupported(f"`not` of {value.operand.dtype}", span)
        result = self.temp("not", "bool")
        self.emit(ir.UnaryOp(result, "not", value.operand))
        return Value(result)

    def overflow_site(self, symbol: str, span: Span) -> int:
        return self.site("E0510", f"integer overflow: i64 {symbol} i64 is out of the i64 range", span)

    def short_circuit(self, expr: ast.Binary) -> Value:
        """`a and b`, `a or b` on bools: `b` is evaluated only when `a` does not decide. An `a` known when compiling
        leaves no branch: the answer, or `b` itself (so that `if padding == 0 and stride == size` with sizes
        known is decided, and only its branch taken is compiled)."""
        name = expr.op
        left = self.expression(expr.lhs)
        if left.operand.dtype != "bool":
            raise Unsupported(f"`{name}` of {left.operand.dtype}", expr.span)
        if isinstance(left.operand, ir.Const):
            if bool(left.operand.value) == (name == "or"):
                return Value(ir.Const(bool(left.operand.value), "bool"))
            right = self.expression(expr.rhs)
            if right.operand.dtype != "bool":
                raise Unsupported(f"`{name}` of {right.operand.dtype}", expr.span)
            return right
        result = self.declare(f"{name}.result", "bool")
        self.emit(ir.Store(result, left.operand))
        right_label, end = self.fresh_label(f"{name}.rhs"), self.fresh_label(f"{name}.end")
        if name == "and":
            self.finish(ir.Branch(left.operand, right_label, end))
        else:
            self.finish(ir.Branch(left.operand, end, right_label))
        self.start(right_label)
        right = self.expression(expr.rhs)
        if right.operand.dtype != "bool":
            raise Unsupported(f"`{name}` of {right.operand.dtype}", expr.span)
        self.emit(ir.Store(result, right.operand))
        self.finish(ir.Jump(end))
        self.start(end)
        value = self.temp(name, "bool")
        self.emit(ir.Load(value, result))
        return Value(value)

    def common_dtype(self, left: Value, right: Value, span: Span) -> str:
        """The dtype both operands take (`promoted_dtype`): a weak literal adapts to the other side."""
        a, b = left.operand.dtype, right.operand.dtype
        if left.weak is not None and right.weak is not None:
            if a != b:  # the interpreter computes two literals as Python numbers
                raise Unsupported("an operation mixes an integer and a float literal", span)
            return a
        if left.weak is not None:
            return adapted(left.weak, b, span)
        if right.weak is not None:
            return adapted(right.weak, a, span)
        return promoted_dtype(a, False, b, False)

    def promote(self, value: Value, dtype: str, span: Span) -> ir.Operand:
        """An operand as the `dtype` it meets the other in: a literal adapts, a strong value is converted
        as the interpreter converts it (`SCALAR_PROMOTIONS`), or the function is refused."""
        operand = value.operand
        if operand.dtype == dtype or value.weak is not None:
            return self.convert(value, dtype, "an operand")
        if (operand.dtype, dtype) not in SCALAR_PROMOTIONS:
            raise Unsupported(f"an operation mixes {operand.dtype} and {dtype}", span)
        result = self.temp(dtype, dtype)
        self.emit(ir.Convert(result, operand))
        return result

    def binary(self, op: str, left: Value, right: Value, span: Span) -> Value:
        if left.weak is not None and right.weak is not None and op in FOLDED:
            return fold(op, left.weak, right.weak, span)
        dtype = self.common_dtype(left, right, span)
        lhs, rhs = self.promote(left, dtype, span), self.promote(right, dtype, span)
        wraps = wraps_around(dtype)
        if op in COMPARISONS:
            result = self.temp(COMPARE_NAMES[op], "bool")
            self.emit(ir.Compare(result, op, lhs, rhs))
            return Value(result)
        name = ARITHMETIC.get(op)
        if name is None or dtype == "bool":
            raise Unsupported(f"`{op}` on {dtype}", span)
        integer = dtype in ir.INTEGER_DTYPES
        if integer and name == "div":
            raise Unsupported(f"`{op}` on integers", span)
        if integer and name == "pow":
            return self.integer_power(lhs, rhs, dtype, wraps, span)
        if not integer and name in ("floordiv", "mod"):
            raise Unsupported(f"`{op}` on floats", span)
        site = None
        if integer and name in ("floordiv", "mod"):
            site = self.site("E0510", f"integer division by zero in `{op}`", span)
            if not wraps:
                self.overflow_site(op, span)  # the next site: i64 minimum // -1
        elif integer and name in CHECKED_INTEGER and not wraps:
            site = self.overflow_site(op, span)
        result = self.temp(name, dtype)
        self.emit(ir.BinaryOp(result, name, lhs, rhs, site, wraps and integer))
        return Value(result)

    def integer_power(self, base: ir.Operand, exponent: ir.Operand, dtype: str, wraps: bool, span: Span) -> Value:
        """`a ** e` of integers as the interpreter computes them: a negative `e` fails (E0510), then i64
        scalars fail when the result is out of range, and i32 ones wrap around."""
        not_negative = self.temp("exponent.not.negative", "bool")
        self.emit(ir.Compare(not_negative, ">=", exponent, ir.Const(0, dtype)))
        self.emit(ir.Check(not_negative, self.site("E0510", NEGATIVE_POWER, span)))
        result = self.temp("pow", dtype)
        self.emit(ir.BinaryOp(result, "pow", base, exponent, None if wraps else self.overflow_site("**", span), wraps))
        return Value(result)

    def convert(self, value: Value, dtype: str, what: str) -> ir.Operand:
        """`value` as `dtype`: only a weak literal changes dtype (as the interpreter's literals do)."""
        operand = value.operand
        if operand.dtype == dtype:
            return operand
        if value.weak is not None and isinstance(operand, ir.Const) and dtype != "bool":
            if dtype in ir.INTEGER_DTYPES and isinstance(value.weak, float):
                raise Unsupported(f"{what}: a float literal where an {dtype} is expected")
            if dtype in ir.INTEGER_DTYPES and not fits(value.weak, dtype):
                raise Unsupported(f"{what}: the literal {value.weak} is out of the {dtype} range")
            return ir.Const(cast_constant(value.weak, dtype), dtype)
        raise Unsupported(f"{what} is {operand.dtype} where {dtype} is expected")

    # -------------------------------------------------------------- calls
    def call(self, expr: ast.Call, discarded: bool = False) -> Value | None:
        """A call; `discarded` when its value is not used (an expression statement), as a unit result must be."""
        callee = self.typed.type_of(expr.func)
        if isinstance(callee, PrimitiveRef) and callee.prim in (Prim.FLOAT, Prim.INT):
            return self.conversion(callee.name, expr)
        if expr.keywords:
            raise Unsupported("a call with keyword arguments", expr.span)
        if isinstance(callee, PrimitiveRef) and callee.prim in SCALAR_MATH:
            return self.math(callee.prim, expr)
        if isinstance(callee, FunctionRef) and isinstance(expr.func, ast.Name):
            target = self.typed.functions.get(callee.key)
            if target is not None and isinstance(target[0], ast.FnDecl):
                return self.function_call(target[0], target[1], expr, discarded)
        shown = callee.name if isinstance(callee, (PrimitiveRef, FunctionRef)) else "a function value"
        raise Unsupported(f"it calls `{shown}`", expr.span)

    def function_call(self, decl: ast.FnDecl, path: str, expr: ast.Call, discarded: bool) -> Value | None:
        if len(expr.args) != len(decl.params):
            raise Unsupported(f"a call of `{decl.name}` leaves parameters to their defaults", expr.span)
        args = []
        for param, arg in zip(decl.params, expr.args, strict=True):
            dtype = scalar_dtype(self.typed.type_of(param), f"`{decl.name}`'s parameter `{param.name}`")
            args.append(self.convert(self.expression(arg), dtype, f"argument `{param.name}` of `{decl.name}`"))
        returned = self.typed.type_of(expr)
        self.calls.add(id(decl))
        if returned == UNIT and not discarded:
            raise Unsupported(f"it uses the result of `{decl.name}`, which returns nothing", expr.span)
        self.sites.append(ir.Site("E0506", f"recursion too deep in `{decl.name}`", expr.span, frame=decl.name))
        site = len(self.sites) - 1
        if returned == UNIT:
            self.emit(ir.Call(None, symbol(path, decl.name), tuple(args), site))
            return None
        result = self.temp(f"call.{decl.name}", scalar_dtype(returned, f"the result of `{decl.name}`"))
        self.emit(ir.Call(result, symbol(path, decl.name), tuple(args), site))
        return Value(result)

    def conversion(self, name: str, expr: ast.Call) -> Value:
        """`float(x, dtype=...)` and `int(x)` of a scalar; the result's dtype is the checker's."""
        if len(expr.args) != 1 or any(k.name != "dtype" for k in expr.keywords):
            raise Unsupported(f"`{name}` with these arguments", expr.span)
        dtype = scalar_dtype(self.typed.type_of(expr), f"the result of `{name}`")
        value = self.expression(expr.args[0])
        source = value.operand.dtype
        if dtype == "bool" or (name == "float") != (dtype in ("f64", "f32")):
            raise Unsupported(f"`{name}` to {dtype}", expr.span)
        if value.weak is not None:  # a literal: converted now, as the interpreter converts the Python number
            if dtype == "i64" and not -(2**63) <= value.weak < 2**63:
                raise Unsupported("`int` of a literal out of the i64 range", expr.span)
            return Value(ir.Const(cast_constant(value.weak, dtype), dtype))
        if source == dtype:
            return Value(value.operand)
        site = None
        if dtype == "i64" and source in ("f64", "f32"):
            site = self.site("E0513", "`int` of {value}", expr.span, source)
            self.site("E0513", "`int` of {value}: out of the i64 range", expr.span, source)
        result = self.temp(name, dtype)
        self.emit(ir.Convert(result, value.operand, site))
        return Value(result)

    def math(self, prim: Prim, expr: ast.Call) -> Value:
        arity = len(PRIMITIVES[prim].signature.positional)
        if len(expr.args) != arity:
            raise Unsupported(f"`{prim.value}` with {len(expr.args)} arguments", expr.span)
        return self.math_of_values(prim, [self.expression(arg) for arg in expr.args], expr.span)

    def math_of_values(self, prim: Prim, values: list[Value], span: Span) -> Value:
        """A math built-in of one or two scalars: a weak literal alone keeps its dtype (i64 or f32), beside
        another operand the two meet as an operator's operands do."""
        if len(values) == 1:  # a literal alone: `abs(3)` is i64, `exp(1.0)` f32, as interpreted
            dtype = values[0].operand.dtype
        else:
            dtype = self.common_dtype(values[0], values[1], span)
        allowed = ("f64", "f32") if prim in FLOAT_MATH else ("f64", "f32", "i64", "i32")
        if dtype not in allowed:
            raise Unsupported(f"`{prim.value}` of {dtype}", span)
        args = tuple(self.promote(value, dtype, span) for value in values)
        name = prim.value
        if prim is Prim.ABS and dtype == "i64":  # max(x, -x), failing where -x overflows, as interpreted
            message = f"abs: integer overflow: the absolute value of {-(2**63)} is out of the i64 range"
            negated = self.temp("neg", dtype)
            self.emit(ir.UnaryOp(negated, "neg", args[0], self.site("E0513", message, span)))
            name, args = "maximum", (args[0], negated)
        result = self.temp(name, dtype)
        self.emit(ir.MathCall(result, name, args))
        return Value(result)


FOLDED = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}


def fold(op: str, a: int | float, b: int | float, span: Span) -> Value:
    """Two unsuffixed literals that nothing gave a dtype, computed as the interpreter computes them: two
    integers as Python numbers, still weak (`/` of them is the checker's error); with a float, in f32, each
    read as an f32 (`0.1 * 0.3` is the f32 product of the f32s nearest 0.1 and 0.3, as `let t = 0.1` then
    `t * 0.3` is), which gives an f32. (A context that decides their dtype gave each literal it, and they
    are folded in it: specialize.floats_folded.)"""
    if isinstance(a, int) and isinstance(b, int) and op != "/":
        value = FOLDED[op](a, b)
        if not -(2**63) <= value < 2**63:
            raise Unsupported("a constant out of the i64 range", span)
        return Value(ir.Const(value, "i64"), value)
    with np.errstate(all="ignore"):  # (`1.0 / 0.0` is inf, as the interpreter's numpy gives)
        value = float(FOLDED[op](np.float32(a), np.float32(b)))
    return Value(ir.Const(value, "f32"))


COMPARE_NAMES = {"==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}


def adapted(weak: int | float, other: str, span: Span) -> str:
    """The dtype an unsuffixed literal and an operand of dtype `other` meet in (`promoted_dtype`)."""
    if other == "bool":
        raise Unsupported("a number literal meets a bool", span)
    return promoted_dtype("f32" if isinstance(weak, float) else "i64", True, other, False)


def fits(value: int | float, dtype: str) -> bool:
    low, high = INTEGER_RANGES[dtype]
    return low <= value < high


def cast_constant(value: int | float | bool, dtype: str) -> int | float | bool:
    if dtype == "bool":
        return bool(value)
    if dtype in ir.INTEGER_DTYPES:
        return int(value)
    return float(value)


def zero(dtype: str) -> int | float | bool:
    return cast_constant(0, dtype)
