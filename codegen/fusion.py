"""Fused elementwise tensor functions: `fuse(typed, decl, path) -> Kernel`, `compile_kernels(kernels)`.

A top-level function whose parameters are f32 or f64 tensors (all of one declared shape and one dtype)
and scalars of that dtype, and whose body is `let`s then `return <expression>` built only from `+ - * /
**`, unary minus and the elementwise math built-ins, becomes ONE native loop over the flat contiguous
buffers: `void kernel(i64 n, T* out, T* tensor..., T scalar...)`, writing `out[i]` from the inputs' `i`th
elements with no intermediate tensors. The loop is emitted vectorised (AVX-512: 16 f32 or 8 f64 lanes;
AVX2: 8 or 4) with the math built-ins calling glibc's vector math library (libmvec), then a scalar loop
for the remainder;
LLVM's loop vectorizer cannot vectorise calls of libm (llvmlite exposes no vector library), so the
vector loop is written out here. Without AVX2 or libmvec the loop is scalar (LLVM still vectorises the
arithmetic). The bridge (codegen/native.py) checks at run time that the tensors have one shape.

A function returning `sum`, `mean`, `max` or `min` of such an expression over the whole tensor (no `axis`)
becomes one loop too: it accumulates the reduction (a vector accumulator in the vector loop, reduced
across its lanes and carried into the scalar remainder) and stores the one result to `out[0]`, never
materialising the expression. Sums (and means) accumulate in f64, f32 ones rounded to f32 at the end: a
lane-by-lane sum adds in another order than numpy's pairwise summation, and f64 keeps the f32 result
within a relative 1e-6 of numpy's (f64 sums use the lanes only: within 1e-12 at the sizes tested).
"""

from __future__ import annotations

import ctypes.util

import llvmlite.binding as binding
from dl.codegen.llvm import LIBMVEC as VECTOR_MATH
from dl.codegen.llvm import ROUNDING, SCALAR_ONLY_MATH
from dl.codegen.llvm import VECTOR_LANES as LANES
from dl.codegen.lower import SCALAR_MATH, Unsupported
from dl.lang import ast
from dl.lang.check import Typed
from dl.lang.diagnostics import Span
from dl.lang.primitives import PRIMITIVES, Prim
from dl.lang.record import record
from dl.lang.types import FunctionRef, PrimitiveRef, TensorType, strong
from dl.runtime.errors import RunError, fail
from llvmlite import ir as llvm_ir

OPERATORS = {"+": "add", "-": "sub", "*": "mul", "/": "div", "**": "pow"}
TYPES = {"f32": llvm_ir.FloatType(), "f64": llvm_ir.DoubleType()}
WHOLE_REDUCTIONS = frozenset({Prim.SUM, Prim.MEAN, Prim.MAX, Prim.MIN})  # over the whole tensor, returned


@record(frozen=True, slots=True)
class Param:
    name: str


@record(frozen=True, slots=True)
class Constant:
    value: float


@record(frozen=True, slots=True)
class Negated:
    operand: Tree


@record(frozen=True, slots=True)
class Arithmetic:
    op: str  # add sub mul div pow
    lhs: Tree
    rhs: Tree


@record(frozen=True, slots=True)
class Math:
    name: str  # the primitive's: exp, tanh, maximum, ...
    args: tuple[Tree, ...]


Tree = Param | Constant | Negated | Arithmetic | Math


@record(frozen=True)
class Kernel:
    """A fused function: `params` as (name, is_tensor) in order, one `dtype`, the `expression` tree, the
    span a shape mismatch is reported at; for a reduction kernel, its `reduction` ("sum", "mean",
    "max" or "min") and the span of its call (where an empty tensor's `mean`, `max`, `min` is reported)."""

    symbol: str
    name: str
    params: tuple[tuple[str, bool], ...]
    dtype: str
    expression: Tree
    span: Span
    reduction: str | None = None
    reduction_span: Span | None = None


def fuse(typed: Typed, decl: ast.FnDecl, path: str) -> Kernel:
    """The kernel of an elementwise function, or `Unsupported` saying why it is not one."""
    dtype, shape, params = None, None, []
    for param in decl.params:
        t = typed.type_of(param)
        if param.default is not None or param.annotation is None or not isinstance(t, TensorType):
            raise Unsupported(f"parameter `{param.name}` is not an annotated tensor or scalar without default")
        if t.dtype not in LANES["d"]:
            raise Unsupported(f"fusion: `{param.name}` is {t}, not an f32 or f64 tensor or scalar")
        if dtype not in (None, t.dtype):
            raise Unsupported(f"fusion: parameters mix {dtype} and {t.dtype}")
        dtype = t.dtype
        if t.dims:
            if shape not in (None, t.dims):
                raise Unsupported("fusion: tensor parameters of different shapes (broadcasting is not fused)")
            shape = t.dims
        params.append((param.name, bool(t.dims)))
    if shape is None:
        raise Unsupported("no parameter is a tensor or scalar it compiles")
    if id(decl) in typed.checked_calls:
        raise Unsupported("fusion: its annotations are checked at run time")
    names = {name: Param(name) for name, _ in params}
    body = decl.body.body
    for stmt in body[:-1]:
        match stmt:
            case ast.Let(pattern=ast.NamePattern(name=name), value=value) if id(stmt) not in typed.runtime_checks:
                bound = typed.type_of(value)  # `let c = 0.1` is an f32, even in an f64 kernel
                if isinstance(bound, TensorType) and strong(bound).dtype != dtype:
                    raise Unsupported(f"fusion: `{name}` is {strong(bound)}", stmt.span)
                names[name] = expression(typed, value, names, dtype)
            case _:
                raise Unsupported("fusion: a statement other than `let`", stmt.span)
    reduction, reduced = None, None
    match body[-1] if body else None:
        case ast.Return(value=ast.Call(func=ast.Name(), args=[argument], keywords=[]) as call) if (
            reduced := whole_reduction(typed, call, shape)
        ):
            reduction, reduced = reduced, call.span
            tree = expression(typed, argument, names, dtype)
        case ast.Return(value=value) if value is not None:
            tree = expression(typed, value, names, dtype)
        case _:
            raise Unsupported("fusion: the body does not end in `return <expression>`")
    results = {s.result for s in typed.signatures.get(path, []) if s.name == decl.name}
    result = next(iter(results)) if len(results) == 1 else None
    dims = () if reduction else shape
    if not (isinstance(result, TensorType) and result.dtype == dtype and result.dims == dims):
        wanted = "scalar" if reduction else "tensor of the parameters' shape"
        raise Unsupported(f"fusion: the result is not a {dtype} {wanted}")
    symbol = f"{path}::{decl.name}.fused"
    return Kernel(symbol, decl.name, tuple(params), dtype, tree, decl.name_span, reduction, reduced)


def whole_reduction(typed: Typed, call: ast.Call, shape: tuple) -> str | None:
    """`sum`, `mean`, `max` or `min` when `call` reduces a tensor of the parameters' shape to a scalar."""
    callee = typed.type_of(call.func)
    argument = typed.type_of(call.args[0])
    reduces = isinstance(callee, PrimitiveRef) and callee.prim in WHOLE_REDUCTIONS
    if reduces and isinstance(argument, TensorType) and argument.dims == shape:
        return callee.name
    return None


def expression(typed: Typed, expr: ast.Expr, names: dict[str, Param], dtype: str) -> Tree:
    """The tree of an elementwise expression whose every value has `dtype` (literals adapt to it)."""
    match expr:
        case ast.IntLiteral() | ast.FloatLiteral():
            if expr.dtype not in (None, dtype) or typed.coercions.get(id(expr)) not in (None, dtype):
                raise Unsupported("fusion: a literal of another dtype", expr.span)
            return Constant(float(expr.value))
        case ast.Name(id=name) if name in names:
            return names[name]
        case ast.Unary(op="-", operand=operand):
            return Negated(expression(typed, operand, names, dtype))
        case ast.Binary(op=op, lhs=lhs, rhs=rhs) if op in OPERATORS:
            result = typed.type_of(expr)
            if isinstance(result, TensorType) and result.dtype != dtype:
                raise Unsupported(f"fusion: `{op}` gives {result}", expr.span)
            return Arithmetic(OPERATORS[op], expression(typed, lhs, names, dtype), expression(typed, rhs, names, dtype))
        case ast.Call(func=ast.Name()):
            callee = typed.type_of(expr.func)
            if isinstance(callee, PrimitiveRef) and callee.name in SCALAR_ONLY_MATH:
                raise Unsupported(f"fusion: `{callee.name}` has no vector form", expr.span)
            if isinstance(callee, PrimitiveRef) and callee.prim in SCALAR_MATH:
                arity = len(PRIMITIVES[callee.prim].signature.positional)
                if len(expr.args) == arity and not expr.keywords:
                    return Math(callee.name, tuple(expression(typed, a, names, dtype) for a in expr.args))
            shown = callee.name if isinstance(callee, (PrimitiveRef, FunctionRef)) else "a function value"
            raise Unsupported(f"fusion: it calls `{shown}`, which is not elementwise", expr.span)
    raise Unsupported(f"fusion: {type(expr).__name__.lower()} expressions are not fused", expr.span)


# ------------------------------------------------------------------ code generation


def vector_target() -> tuple[binding.TargetMachine, str | None]:
    """The host at full optimisation with all its features; and which of libmvec's vector functions can be
    called (`e`: AVX-512, `d`: AVX2, None: none; the library is loaded for the JIT to find)."""
    binding.initialize_native_target()
    binding.initialize_native_asmprinter()
    features = binding.get_host_cpu_features()
    target = binding.Target.from_default_triple().create_target_machine(
        cpu=binding.get_host_cpu_name(), features=features.flatten(), opt=3, jit=True
    )
    library = ctypes.util.find_library("mvec")
    if not features.get("avx2") or library is None:
        return target, None
    try:
        binding.load_library_permanently(library)
    except RuntimeError:
        return target, None
    return target, "e" if features.get("avx512f") else "d"


@record
class CompiledKernels:
    engine: binding.ExecutionEngine
    addresses: dict[str, int]
    ir_after: str


def compile_kernels(kernels: list[Kernel]) -> CompiledKernels:
    target, vectors = vector_target()
    module = llvm_ir.Module(name="dl.fused")
    module.triple = target.triple
    module.data_layout = str(target.target_data)
    for kernel in kernels:
        KernelEmitter(module, kernel, vectors).emit()
    parsed = binding.parse_assembly(str(module))
    parsed.verify()
    options = binding.create_pipeline_tuning_options(speed_level=3)
    options.loop_vectorization = True
    options.slp_vectorization = True
    builder = binding.create_pass_builder(target, options)
    builder.getModulePassManager().run(parsed, builder)
    engine = binding.create_mcjit_compiler(parsed, target)
    engine.finalize_object()
    addresses = {k.symbol: engine.get_function_address(k.symbol) for k in kernels}
    return CompiledKernels(engine, addresses, str(parsed))


class KernelEmitter:
    def __init__(self, module: llvm_ir.Module, kernel: Kernel, vectors: str | None) -> None:
        self.module, self.kernel, self.vectors = module, kernel, vectors
        self.scalar = TYPES[kernel.dtype]
        pointer = self.scalar.as_pointer()
        args = [llvm_ir.IntType(64), pointer] + [pointer if tensor else self.scalar for _, tensor in kernel.params]
        self.function = llvm_ir.Function(module, llvm_ir.FunctionType(llvm_ir.VoidType(), args), kernel.symbol)
        self.function.args[0].name, self.function.args[1].name = "n", "out"
        for argument, (name, _) in zip(self.function.args[2:], kernel.params, strict=True):
            argument.name = name
            if isinstance(argument.type, llvm_ir.PointerType):
                argument.add_attribute("noalias")
        self.function.args[1].add_attribute("noalias")

    def emit(self) -> None:
        i64 = llvm_ir.IntType(64)
        entry = llvm_ir.IRBuilder(self.function.append_basic_block("entry"))
        lanes = LANES[self.vectors][self.kernel.dtype] if self.vectors else 1
        n = self.function.args[0]
        whole = entry.mul(entry.udiv(n, i64(lanes), name="vectors"), i64(lanes), name="vectorised")
        if self.kernel.reduction is None:
            after_vectors, _ = self.loop(entry, i64(0), whole, lanes, "vector")
            after, _ = self.loop(after_vectors, whole, n, 1, "rest")
            after.ret_void()
            return
        # a reduction: a running value per lane, reduced across lanes, carried on by the remainder loop
        element = llvm_ir.DoubleType() if self.kernel.reduction in ("sum", "mean") else self.scalar
        start = self.identity(element, llvm_ir.VectorType(element, lanes) if lanes > 1 else element)
        after_vectors, running = self.loop(entry, i64(0), whole, lanes, "vector", start)
        if lanes > 1:
            running = self.across_lanes(after_vectors, running, lanes)
        after, total = self.loop(after_vectors, whole, n, 1, "rest", running)
        if self.kernel.reduction == "mean":
            total = after.fdiv(total, after.uitofp(n, element), name="mean")
        if element != self.scalar:
            total = after.fptrunc(total, self.scalar, name="rounded")
        after.store(total, self.function.args[1])
        after.ret_void()

    def identity(self, element, kind) -> llvm_ir.Constant:
        """The reduction's starting value: 0.0 for sums (as numpy's, so the sum of `[-0.0]` is 0.0 there
        too), -inf for max, inf for min (the bridge never calls `max` or `min` on an empty tensor)."""
        value = {"sum": 0.0, "mean": 0.0, "max": float("-inf"), "min": float("inf")}[self.kernel.reduction]
        if isinstance(kind, llvm_ir.VectorType):
            return llvm_ir.Constant(kind, [element(value)] * kind.count)
        return kind(value)

    def combine(self, builder: llvm_ir.IRBuilder, running, value) -> llvm_ir.Value:
        """The running value with `value` reduced into it (f32 values widened to an f64 sum)."""
        if self.kernel.reduction in ("max", "min"):  # llvm.maximum/minimum propagate nan like numpy
            name = "maximum" if self.kernel.reduction == "max" else "minimum"
            return builder.call(self.intrinsic(name, value.type), [running, value])
        if value.type != running.type:
            value = builder.fpext(value, running.type)
        return builder.fadd(running, value)

    def across_lanes(self, builder: llvm_ir.IRBuilder, vector, lanes: int) -> llvm_ir.Value:
        """The lanes of `vector` reduced pairwise into one value."""
        values = [builder.extract_element(vector, llvm_ir.IntType(32)(lane)) for lane in range(lanes)]
        while len(values) > 1:
            values = [self.combine(builder, values[k], values[k + 1]) for k in range(0, len(values), 2)]
        return values[0]

    def loop(
        self, builder: llvm_ir.IRBuilder, start, stop, lanes: int, name: str, running=None
    ) -> tuple[llvm_ir.IRBuilder, llvm_ir.Value | None]:
        """`for i in start..stop by lanes { out[i..i+lanes] = expression }`, or with `running` (a
        reduction's value before the loop) `running = combine(running, expression)`; returns the builder
        after the loop and the running value there."""
        i64 = llvm_ir.IntType(64)
        test = self.function.append_basic_block(f"{name}.cond")
        body = self.function.append_basic_block(f"{name}.body")
        end = self.function.append_basic_block(f"{name}.end")
        before = builder.block
        builder.branch(test)
        builder = llvm_ir.IRBuilder(test)
        index = builder.phi(i64, name=f"{name}.i")
        index.add_incoming(start, before)
        if running is not None:
            accumulator = builder.phi(running.type, name=f"{name}.running")
            accumulator.add_incoming(running, before)
        builder.cbranch(builder.icmp_unsigned("<", index, stop, name=f"{name}.going"), body, end)
        builder = llvm_ir.IRBuilder(body)
        kind = self.scalar if lanes == 1 else llvm_ir.VectorType(self.scalar, lanes)
        inputs = {}
        for argument, (param, tensor) in zip(self.function.args[2:], self.kernel.params, strict=True):
            if tensor:
                address = builder.bitcast(builder.gep(argument, [index]), kind.as_pointer())
                inputs[param] = builder.load(address, name=f"{param}.at", align=self.scalar_size())
            else:
                inputs[param] = argument if lanes == 1 else self.splat(builder, argument, kind)
        value = self.value(builder, self.kernel.expression, inputs, kind, lanes)
        if running is None:
            address = builder.bitcast(builder.gep(self.function.args[1], [index]), kind.as_pointer())
            builder.store(value, address, align=self.scalar_size())
        else:
            accumulator.add_incoming(self.combine(builder, accumulator, value), builder.block)
        following = builder.add(index, i64(lanes), name=f"{name}.next")
        index.add_incoming(following, builder.block)
        builder.branch(test)
        return llvm_ir.IRBuilder(end), (accumulator if running is not None else None)

    def scalar_size(self) -> int:
        return 4 if self.kernel.dtype == "f32" else 8

    def splat(self, builder, value, kind):
        vector = llvm_ir.Constant(kind, llvm_ir.Undefined)
        for lane in range(kind.count):
            vector = builder.insert_element(vector, value, llvm_ir.IntType(32)(lane))
        return vector

    def constant(self, value: float, kind) -> llvm_ir.Constant:
        if isinstance(kind, llvm_ir.VectorType):
            return llvm_ir.Constant(kind, [self.scalar(value)] * kind.count)
        return kind(value)

    def value(self, builder: llvm_ir.IRBuilder, tree: Tree, inputs, kind, lanes: int) -> llvm_ir.Value:
        match tree:
            case Param(name=name):
                return inputs[name]
            case Constant(value=number):
                return self.constant(number, kind)
            case Negated(operand=operand):
                return builder.fneg(self.value(builder, operand, inputs, kind, lanes))
            case Math(name=name, args=args):
                values = [self.value(builder, a, inputs, kind, lanes) for a in args]
                return self.math(builder, name, values, kind, lanes)
            case Arithmetic(op=op, lhs=lhs, rhs=rhs):
                a = self.value(builder, lhs, inputs, kind, lanes)
                b = self.value(builder, rhs, inputs, kind, lanes)
                if op == "pow":
                    return self.call(builder, "pow", [a, b], kind, lanes)
                return {"add": builder.fadd, "sub": builder.fsub, "mul": builder.fmul, "div": builder.fdiv}[op](a, b)
        raise AssertionError(tree)

    def intrinsic(self, name: str, kind) -> llvm_ir.Function:
        """`llvm.NAME.f32` or `llvm.NAME.v8f32`, taking and returning `kind` (two for maximum, minimum, pow)."""
        element = "f32" if self.kernel.dtype == "f32" else "f64"
        suffix = f"v{kind.count}{element}" if isinstance(kind, llvm_ir.VectorType) else element
        symbol = f"llvm.{name}.{suffix}"
        existing = self.module.globals.get(symbol)
        if existing is not None:
            return existing
        arity = 2 if name in ("maximum", "minimum", "pow") else 1
        return llvm_ir.Function(self.module, llvm_ir.FunctionType(kind, [kind] * arity), symbol)

    def call(self, builder, name: str, args, kind, lanes: int) -> llvm_ir.Value:
        """A libm function: `tanhf` on scalars, libmvec's `_ZGVeN16v_tanhf` (or `_ZGVdN8v_tanhf`) on vectors."""
        suffix = "f" if self.kernel.dtype == "f32" else ""
        if lanes == 1:
            if name in ("exp", "log", "sin", "cos", "pow"):
                return builder.call(self.intrinsic(name, kind), args)
            symbol = f"{name}{suffix}"
        else:
            symbol = f"_ZGV{self.vectors}N{lanes}{'v' * len(args)}_{name}{suffix}"
        function = self.module.globals.get(symbol)
        if function is None:
            function = llvm_ir.Function(self.module, llvm_ir.FunctionType(kind, [kind] * len(args)), symbol)
        return builder.call(function, args)

    def math(self, builder, name: str, args, kind, lanes: int) -> llvm_ir.Value:
        if name in VECTOR_MATH:
            return self.call(builder, name, args, kind, lanes)
        if name in ("sqrt", "abs"):
            return builder.call(self.intrinsic("sqrt" if name == "sqrt" else "fabs", kind), args)
        if name in ROUNDING:  # llvm.floor, llvm.ceil, llvm.roundeven
            return builder.call(self.intrinsic(ROUNDING[name].removeprefix("llvm."), kind), args)
        if name == "sign":  # 1 above zero, -1 below, x + 0.0 otherwise: +0.0 for either zero, nan for nan
            x, zero = args[0], self.constant(0.0, kind)
            below = builder.select(builder.fcmp_ordered("<", x, zero), self.constant(-1.0, kind), builder.fadd(x, zero))
            return builder.select(builder.fcmp_ordered(">", x, zero), self.constant(1.0, kind), below)
        if name in ("maximum", "minimum", "relu"):  # llvm.maximum/minimum propagate nan like numpy
            if name == "relu":
                name, args = "maximum", [args[0], self.constant(0.0, kind)]
            return builder.call(self.intrinsic(name, kind), args)
        if name != "sigmoid":
            raise AssertionError(f"fusion: no kernel form of `{name}`")
        # sigmoid, the interpreter's formula: e = exp(-|x|); 1 / (1 + e) for x >= 0, e / (1 + e) below
        x = args[0]
        e = self.call(builder, "exp", [builder.fneg(builder.call(self.intrinsic("fabs", kind), [x]))], kind, lanes)
        inverse = builder.fdiv(self.constant(1.0, kind), builder.fadd(self.constant(1.0, kind), e))
        positive = builder.fcmp_ordered(">=", x, self.constant(0.0, kind))
        return builder.select(positive, inverse, builder.fmul(e, inverse))


def unequal_shapes(kernel: Kernel, name: str, found: tuple, expected: tuple) -> RunError:
    """E0513 for a fused function's tensor argument `name` whose shape differs from the tensors' before it: a
    fused elementwise function does not broadcast (its CPU and GPU launchers check alike)."""
    shown = "x".join(map(str, found)) or "scalar"
    return fail(
        "E0513",
        f"`{kernel.name}`: tensor `{name}` has shape [{shown}], not the [{'x'.join(map(str, expected))}] "
        "of the tensor before it (a fused elementwise function does not broadcast)",
        kernel.span,
    )
