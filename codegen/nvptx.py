"""GPU kernels from the code generator's IR: `kernels_of(...)`, then `ptx(kernels, arch) -> str`.

The LLVM backend computes tensors with loops over elementwise trees (codegen/ir.py): an `ir.Fill` writes a tree
at every index of a shape (fused elementwise and broadcasting code), an `ir.Reduce` folds one along axes (`sum`,
`mean`, `max`, and the pieces of `softmax`, `log_softmax`, `logsumexp`), and codegen/fusion.py fuses whole
elementwise functions (`tanh(x * a + b) * c + x`, or `sum` of one). Each of these that cannot fail becomes one
kernel here, and its element is computed by the CPU backend's own code (`TensorEmission.tree` of
codegen/llvm.py): only where the index comes from and where the math functions live differ.

- A kernel takes its buffers as `ptr addrspace(1)` parameters, then the scalars its tree reads; it uses the
  `ptx_kernel` calling convention and a grid-stride loop over `llvm.nvvm.read.ptx.sreg.{tid,ntid,ctaid,nctaid}.x`:
  a `Fill` computes one element per step, a `Reduce` one element of its target (folding the reduced axes in
  row-major order, as the CPU's loop folds them), a fused function one element of its output, or for a fused
  reduction one partial result per thread (`partials[thread]`, reduced by the host).
- The math functions are CUDA's libdevice (`__nv_tanhf`, ...), linked into the module with `parse_bitcode` and
  `link_in`; every function but the kernels is then made internal, so the optimiser drops the ones not called
  (and the PTX stays a few kilobytes); LLVM's NVPTX pipeline runs NVVMReflect itself.
- The target machine is `nvptx64-nvidia-cuda`, cpu `sm_80` or `sm_90`, features `+ptx80`, at O3.

`HostTwin` emits the same kernels for the CPU (thread ids as parameters, host pointers, libm) so that a test can
run a kernel's own element code, grid loop included, on this machine (`run_twin`). The PTX of a set of kernels is
cached on disk like the CPU backend's object code (codegen/cache.py), keyed by the LLVM IR, the arch and LLVM's
version (`cached_ptx`).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
from pathlib import Path

import llvmlite.binding as binding
from dl.codegen import cache as compile_cache
from dl.codegen import fusion, ir
from dl.codegen.llvm import (
    INTEGER_MINIMUM,
    LIBM_NAMES,
    TYPES,
    FunctionEmitter,
    collect,
    constant,
    llvm_version,
    storage_type,
)
from dl.lang.record import record
from llvmlite import ir as llvm_ir

TRIPLE = "nvptx64-nvidia-cuda"
FEATURES = "+ptx80"
ARCHES = ("sm_80", "sm_90")
GLOBAL = 1  # the address space of a GPU's global memory
I64 = TYPES["i64"]

# The host's math functions, as the CPU backend calls them, and libdevice's (`__nv_`) name for each.
LIBDEVICE = {
    **{f"llvm.{name}.f32": f"__nv_{name}f" for name in ("exp", "log", "sin", "cos", "pow")},
    **{f"llvm.{name}.f64": f"__nv_{name}" for name in ("exp", "log", "sin", "cos", "pow")},
    **{f"{name}f": f"__nv_{name}f" for name in LIBM_NAMES},
    **{name: f"__nv_{name}" for name in LIBM_NAMES},
}
CALLED = re.compile(r"@(\"?)([\w.]+)\1\(")


# ---------------------------------------------------------------------- what becomes a kernel


@record(frozen=True)
class LoopKernel:
    """An `ir.Fill` or `ir.Reduce` of a specialised function as a kernel: `buffers` are its pointer parameters
    (the target first), `temps` the scalars its tree reads, in order."""

    symbol: str
    instruction: ir.Fill | ir.Reduce
    buffers: tuple[ir.Buffer, ...]
    temps: tuple[ir.Temp, ...]


@record(frozen=True)
class FusedKernel:
    """A fused elementwise function (codegen/fusion.py) with fusion's parameters: `n`, then `out` (the result,
    or for a reduction one partial result per thread), then a pointer per tensor and a value per scalar."""

    symbol: str
    kernel: fusion.Kernel


Kernel = LoopKernel | FusedKernel


def loop_kernels(function: ir.Function) -> list[LoopKernel]:
    """Every `Fill` and `Reduce` of a specialised function that cannot fail, as a kernel."""
    found = []
    for block in function.blocks:
        for instruction in block.instructions:
            if isinstance(instruction, (ir.Fill, ir.Reduce)) and not ir.can_fail(instruction.tree):
                buffers: dict[str, ir.Buffer] = {instruction.target.name: instruction.target}
                operands: list = (
                    [instruction.view.offset] if isinstance(instruction, ir.Fill) and instruction.view else []
                )
                collect(instruction.tree, buffers, operands)
                temps = {o.name: o for o in operands if isinstance(o, ir.Temp)}
                symbol = kernel_name(function.symbol, repr(instruction))
                found.append(LoopKernel(symbol, instruction, tuple(buffers.values()), tuple(temps.values())))
    return found


def fused_kernel(kernel: fusion.Kernel) -> FusedKernel:
    return FusedKernel(kernel_name(kernel.symbol), kernel)


def kernel_name(symbol: str, computes: str = "") -> str:
    """A PTX-safe name for a kernel of the function `symbol` computing `computes` (`/path/f.dl::f.fused` ->
    `f_dl__f_fused_<hash>`): one name per kernel, however many specialisations a function has."""
    tail = re.sub(r"\W", "_", symbol.rpartition("/")[2])
    return f"{tail}_{hashlib.sha256((symbol + computes).encode()).hexdigest()[:12]}"


# ---------------------------------------------------------------------- emission


class KernelEmission(FunctionEmitter):
    """Emits kernels into one LLVM module with the CPU backend's element code (`tree`, `apply`, `combine`,
    `convert_value`). Where a thread's index comes from and what a pointer is are this class's and
    `HostTwin`'s."""

    address_space = GLOBAL

    def __init__(self, module: llvm_ir.Module) -> None:
        self.module = module
        self.vectors = None
        self.values: dict[str, llvm_ir.Value] = {}
        self.pointers: dict[str, llvm_ir.Value] = {}
        self.positions: dict[tuple, tuple] = {}

    def operand(self, operand: ir.Operand) -> llvm_ir.Value:
        return constant(operand) if isinstance(operand, ir.Const) else self.values[operand.name]

    # -------------------------------------------------------------- the kernel function and its threads
    def begin(self, symbol: str, kinds: list[llvm_ir.Type], names: list[str]) -> llvm_ir.IRBuilder:
        self.llvm_function = llvm_ir.Function(
            self.module, llvm_ir.FunctionType(llvm_ir.VoidType(), self.id_kinds() + kinds), symbol
        )
        self.mark_kernel(self.llvm_function)
        self.arguments = self.llvm_function.args[len(self.id_kinds()) :]
        for argument, name in zip(self.arguments, names, strict=True):
            argument.name = name
            if isinstance(argument.type, llvm_ir.PointerType):
                argument.add_attribute("noalias")
        return llvm_ir.IRBuilder(self.llvm_function.append_basic_block("entry"))

    def id_kinds(self) -> list[llvm_ir.Type]:
        return []

    def mark_kernel(self, function: llvm_ir.Function) -> None:
        function.calling_convention = "ptx_kernel"

    def pointer(self, dtype: str) -> llvm_ir.PointerType:
        return storage_type(dtype).as_pointer(self.address_space)

    def special_register(self, builder: llvm_ir.IRBuilder, name: str) -> llvm_ir.Value:
        symbol = f"llvm.nvvm.read.ptx.sreg.{name}"
        function = self.module.globals.get(symbol) or llvm_ir.Function(
            self.module, llvm_ir.FunctionType(llvm_ir.IntType(32), []), symbol
        )
        return builder.zext(builder.call(function, [], name=name.replace(".", "_")), I64)

    def thread_ids(self, builder: llvm_ir.IRBuilder) -> tuple[llvm_ir.Value, llvm_ir.Value]:
        """This thread's first index, and the grid's size (the stride of the grid-stride loop)."""
        block, threads = self.special_register(builder, "ctaid.x"), self.special_register(builder, "ntid.x")
        thread, blocks = self.special_register(builder, "tid.x"), self.special_register(builder, "nctaid.x")
        first = builder.add(builder.mul(block, threads), thread, name="first")
        return first, builder.mul(blocks, threads, name="grid")

    def grid_loop(self, builder: llvm_ir.IRBuilder, total, body, running=None):
        """`for flat in first..total by grid { body(builder, flat) }`; with `running` (a value before the loop),
        `running = body(builder, flat, running)`. Returns the builder after the loop (and the running value)."""
        first, grid = self.thread_ids(builder)
        before = builder.block
        head = self.llvm_function.append_basic_block("grid.head")
        inner = self.llvm_function.append_basic_block("grid.body")
        end = self.llvm_function.append_basic_block("grid.end")
        builder.branch(head)
        builder = llvm_ir.IRBuilder(head)
        flat = builder.phi(I64, name="flat")
        flat.add_incoming(first, before)
        if running is not None:
            carried = builder.phi(running.type, name="running")
            carried.add_incoming(running, before)
        builder.cbranch(builder.icmp_signed("<", flat, total), inner, end)
        builder = llvm_ir.IRBuilder(inner)
        if running is None:
            builder = body(builder, flat)
        else:
            builder, updated = body(builder, flat, carried)
            carried.add_incoming(updated, builder.block)
        flat.add_incoming(builder.add(flat, grid, name="flat.next"), builder.block)
        builder.branch(head)
        return llvm_ir.IRBuilder(end), (carried if running is not None else None)

    def unravel(self, builder: llvm_ir.IRBuilder, flat, shape: tuple[int, ...]) -> list:
        """The row-major index of element `flat` of `shape`."""
        index, rest = [], flat
        for size in reversed(shape):
            index.append(builder.urem(rest, I64(size)) if size != 1 else I64(0))
            rest = builder.udiv(rest, I64(size)) if size != 1 else rest
        return list(reversed(index))

    # -------------------------------------------------------------- the three kinds
    def emit(self, kernel: Kernel) -> None:
        match kernel:
            case LoopKernel(instruction=ir.Fill()):
                self.fill(kernel)
            case LoopKernel(instruction=ir.Reduce()):
                self.reduce_kernel(kernel)
            case FusedKernel():
                self.fused(kernel)

    def loop_parameters(self, kernel: LoopKernel) -> llvm_ir.IRBuilder:
        kinds = [self.pointer(b.dtype) for b in kernel.buffers] + [TYPES[t.dtype] for t in kernel.temps]
        names = [b.name for b in kernel.buffers] + [t.name for t in kernel.temps]
        builder = self.begin(kernel.symbol, kinds, names)
        self.pointers = {b.name: a for b, a in zip(kernel.buffers, self.arguments, strict=False)}
        self.values = {t.name: a for t, a in zip(kernel.temps, self.arguments[len(kernel.buffers) :], strict=True)}
        return builder

    def fill(self, kernel: LoopKernel) -> None:
        fill = kernel.instruction
        builder = self.loop_parameters(kernel)
        shape = fill.target.shape if fill.view is None else fill.shape
        pointer = self.pointers[fill.target.name]

        def element(builder, flat):
            index = self.unravel(builder, flat, shape)
            builder, value = self.tree(builder, fill.tree, index)
            if fill.view is None:
                position = flat
            else:
                position = self.position(builder, self.operand(fill.view.offset), index, fill.view.strides)
            self.store_element(builder, pointer, position, fill.target.dtype, value)
            return builder

        builder, _ = self.grid_loop(builder, I64(ir_size(shape)), element)
        builder.ret_void()

    def reduce_kernel(self, kernel: LoopKernel) -> None:
        """One thread per element of the target, folding the reduced axes in row-major order (the order in which
        the CPU backend's one pass meets them), from the reduction's identity."""
        reduce = kernel.instruction
        target, op, dtype = reduce.target, reduce.op, reduce.target.dtype
        builder = self.loop_parameters(kernel)
        pointer = self.pointers[target.name]
        kept = [d for d in range(len(reduce.shape)) if d not in reduce.axes]
        reduced = tuple(reduce.shape[d] for d in reduce.axes)

        slot = builder.alloca(TYPES[dtype], name="running")  # in the entry block: one slot, reused

        def element(builder, flat):
            outer = self.unravel(builder, flat, target.shape)
            builder.store(identity(op, dtype), slot)

            def fold(builder, inner):
                index = [None] * len(reduce.shape)
                for d, value in zip(kept, outer, strict=True):
                    index[d] = value
                for d, value in zip(reduce.axes, inner, strict=True):
                    index[d] = value
                builder, value = self.tree(builder, reduce.tree, index)
                value = self.convert_value(builder, value, ir.tree_dtype(reduce.tree), dtype)
                builder.store(self.combine(builder, op, dtype, builder.load(slot), value), slot)
                return builder

            builder = self.loops(builder, reduced, fold, "fold")
            self.store_element(builder, pointer, flat, dtype, builder.load(slot))
            return builder

        builder, _ = self.grid_loop(builder, I64(ir_size(target.shape)), element)
        builder.ret_void()

    def fused(self, fused: FusedKernel) -> None:
        kernel = fused.kernel
        dtype = kernel.dtype
        partial = "f64" if kernel.reduction in ("sum", "mean") else dtype
        kinds = [I64, self.pointer(partial if kernel.reduction else dtype)]
        kinds += [self.pointer(dtype) if tensor else TYPES[dtype] for _, tensor in kernel.params]
        builder = self.begin(fused.symbol, kinds, ["n", "out", *(name for name, _ in kernel.params)])
        n, out = self.arguments[0], self.arguments[1]
        flat_buffers = {name: ir.Buffer(name, dtype, (1,), 0) for name, tensor in kernel.params if tensor}
        given = dict(zip((name for name, _ in kernel.params), self.arguments[2:], strict=True))
        self.pointers = {name: given[name] for name in flat_buffers}
        self.values = {name: value for name, value in given.items() if name not in flat_buffers}
        tree = ir_tree(kernel.expression, flat_buffers, dtype)
        if kernel.reduction is None:

            def element(builder, flat):
                builder, value = self.tree(builder, tree, [flat])
                self.store_element(builder, out, flat, dtype, value)
                return builder

            builder, _ = self.grid_loop(builder, n, element)
            builder.ret_void()
            return
        op = {"sum": "add", "mean": "add", "max": "max", "min": "min"}[kernel.reduction]

        def fold(builder, flat, running):
            builder, value = self.tree(builder, tree, [flat])
            value = self.convert_value(builder, value, dtype, partial)
            return builder, self.combine(builder, op, partial, running, value)

        first, _ = self.thread_ids(builder)
        builder, total = self.grid_loop(builder, n, fold, identity(op, partial))
        self.store_element(builder, out, first, partial, total)
        builder.ret_void()


class HostTwin(KernelEmission):
    """The same kernels for the CPU: the block and thread ids are the first four parameters (block, blocks,
    thread, threads), pointers are the host's and the math functions libm's, so `run_twin` can run a kernel's
    element code and grid loop here."""

    address_space = 0

    def id_kinds(self) -> list[llvm_ir.Type]:
        return [llvm_ir.IntType(32)] * 4

    def mark_kernel(self, function: llvm_ir.Function) -> None:
        pass

    def special_register(self, builder: llvm_ir.IRBuilder, name: str) -> llvm_ir.Value:
        position = ("ctaid.x", "nctaid.x", "tid.x", "ntid.x").index(name)
        return builder.zext(self.llvm_function.args[position], I64)


def identity(op: str, dtype: str) -> llvm_ir.Constant:
    kind = TYPES[dtype]
    if op == "add":
        return kind(0.0) if dtype in ("f32", "f64") else kind(0)
    if dtype in ("f32", "f64"):
        return kind(float("-inf") if op == "max" else float("inf"))
    minimum = INTEGER_MINIMUM[dtype]
    return kind(minimum if op == "max" else -minimum - 1)


def ir_size(shape: tuple[int, ...]) -> int:
    size = 1
    for n in shape:
        size *= n
    return size


def ir_tree(tree: fusion.Tree, buffers: dict[str, ir.Buffer], dtype: str) -> object:
    """A fused function's tree (codegen/fusion.py) as an elementwise tree of the IR over its flat index: a tensor
    parameter reads its buffer at the index, a scalar parameter or a literal is splatted."""
    match tree:
        case fusion.Param(name=name) if name in buffers:
            return ir.Read(buffers[name], ir.Const(0, "i64"), (1,))
        case fusion.Param(name=name):
            return ir.Splat(ir.Temp(name, dtype))
        case fusion.Constant(value=value):
            return ir.Splat(ir.Const(value, dtype))
        case fusion.Negated(operand=operand):
            return ir.Apply("neg", dtype, (ir_tree(operand, buffers, dtype),))
        case fusion.Arithmetic(op=op, lhs=lhs, rhs=rhs):
            return ir.Apply(op, dtype, (ir_tree(lhs, buffers, dtype), ir_tree(rhs, buffers, dtype)))
        case fusion.Math(name=name, args=args):
            return ir.Apply(name, dtype, tuple(ir_tree(a, buffers, dtype) for a in args))
    raise AssertionError(tree)


def module_of(kernels: list[Kernel], emission: type[KernelEmission], triple: str = TRIPLE) -> llvm_ir.Module:
    module = llvm_ir.Module(name="dl.kernels")
    module.triple = triple
    for kernel in kernels:
        emission(module).emit(kernel)
    return module


# ---------------------------------------------------------------------- PTX


def target_machine(arch: str) -> binding.TargetMachine:
    binding.initialize_all_targets()
    binding.initialize_all_asmprinters()
    return binding.Target.from_triple(TRIPLE).create_target_machine(cpu=arch, features=FEATURES, opt=3)


def libdevice_path() -> Path:
    """CUDA's libdevice bitcode: under `$CUDA_HOME`, `$CUDA_PATH` or /usr/local/cuda. Raises `FileNotFoundError`."""
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    for root in filter(None, roots):
        found = sorted(Path(root, "nvvm", "libdevice").glob("libdevice*.bc"))
        if found:
            return found[-1]
    raise FileNotFoundError(
        "CUDA's libdevice (nvvm/libdevice/libdevice.10.bc) is not under $CUDA_HOME or /usr/local/cuda"
    )


def device_ir(kernels: list[Kernel]) -> str:
    """The kernels' LLVM IR for the GPU, before libdevice is linked: the host's math functions renamed to
    libdevice's."""
    text = str(module_of(kernels, KernelEmission))
    return CALLED.sub(lambda m: f"@{LIBDEVICE.get(m.group(2), m.group(2))}(" if m.group(2) in LIBDEVICE else m[0], text)


def ptx(kernels: list[Kernel], arch: str) -> str:
    """The PTX of `kernels` for `arch` (`sm_80`, `sm_90`). Raises `FileNotFoundError` without libdevice where a
    kernel calls a math function, and `RuntimeError` for LLVM's failures."""
    text = device_ir(kernels)
    module = binding.parse_assembly(text)
    if "@__nv_" in text:
        module.link_in(binding.parse_bitcode(libdevice_path().read_bytes()))
    symbols = {k.symbol for k in kernels}
    for function in module.functions:
        if function.name not in symbols and not function.is_declaration:
            function.linkage = "internal"
    machine = target_machine(arch)
    module.triple, module.data_layout = TRIPLE, str(machine.target_data)
    module.verify()
    options = binding.create_pipeline_tuning_options(speed_level=3)
    builder = binding.create_pass_builder(machine, options)
    builder.getModulePassManager().run(module, builder)
    return machine.emit_assembly(module)


def cached_ptx(kernels: list[Kernel], arch: str, directory: Path | None) -> str:
    """`ptx(kernels, arch)`, looked up in (and stored to) the compile cache under `directory/cuda` when given,
    by a key of the kernels' LLVM IR, the arch and features, LLVM's version and the code generator's source."""
    if directory is None:
        return ptx(kernels, arch)
    key = ptx_key(device_ir(kernels), arch)
    stored = compile_cache.load(directory, key, "cuda")
    if stored is not None:
        return stored.decode()
    text = ptx(kernels, arch)
    compile_cache.store(directory, key, text.encode(), "cuda")
    return text


def ptx_key(text: str, arch: str) -> str:
    digest = hashlib.sha256()
    for part in (
        compile_cache.compiler_fingerprint(),
        Path(__file__).read_text(),
        llvm_version(),
        arch,
        FEATURES,
        text,
    ):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()


# ---------------------------------------------------------------------- the host twin


@record
class Twin:
    engine: binding.ExecutionEngine
    addresses: dict[str, int]


def host_twin(kernels: list[Kernel]) -> Twin:
    """The kernels compiled for this CPU (`HostTwin`), to run with `run_twin`."""
    binding.initialize_native_target()
    binding.initialize_native_asmprinter()
    machine = binding.Target.from_default_triple().create_target_machine(opt=2, jit=True)
    module = binding.parse_assembly(str(module_of(kernels, HostTwin, machine.triple)))
    module.verify()
    engine = binding.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    return Twin(engine, {k.symbol: engine.get_function_address(k.symbol) for k in kernels})


def run_twin(twin: Twin, symbol: str, arguments: list, blocks: int, threads: int) -> None:
    """Run a kernel's twin for every (block, thread) of a grid of `blocks` x `threads`, one after another:
    `arguments` are ctypes values (pointers as `c_void_p`, scalars as `c_int64`, `c_float`, `c_double`)."""
    kinds = [ctypes.c_int32] * 4 + [type(a) for a in arguments]
    function = ctypes.CFUNCTYPE(None, *kinds)(twin.addresses[symbol])
    for block in range(blocks):
        for thread in range(threads):
            function(block, blocks, thread, threads, *arguments)
