"""From the IR (codegen/ir.py) to native code with llvmlite: `compile_functions(functions, target) -> Native`.

Every LLVM value and block is named after what it holds. The module is optimised with LLVM's O3 pipeline
(loop vectorization on; O2 for specialised functions, and a short one, `tidy`, where no loop is left to
vectorise), compiled to object code for `target` (the host's machine by default; the target machine is a
parameter so that NVPTX can come later) and linked into an execution engine; the object code
is what the compile cache (codegen/cache.py) stores. Compiled code never raises: a failing operation stores the
number of its `Site` (plus one) in the global `dl.error` and returns at once, and so does every caller
that sees it set; `dl.depth` counts nested calls, so runaway recursion fails the same way instead of
overflowing the stack. Bools cross function boundaries as i8 (the C ABI of `_Bool`), i1 inside.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import llvmlite.binding as binding
from dl.codegen import cache as compile_cache
from dl.codegen import ir
from dl.codegen.forked import can_fork, in_children
from dl.lang.record import record
from dl.runtime.randomness import DTYPE_NUMBERS
from dl.runtime.threads import Threads
from llvmlite import ir as llvm_ir

MAX_DEPTH = 100_000
TRACE_CAPACITY = MAX_DEPTH + 1  # one entry per nested call a failure unwinds through
INTERRUPTED = -1  # `dl.error` of a function stopped by Ctrl-C (the host raises KeyboardInterrupt)

TYPES = {
    "f64": llvm_ir.DoubleType(),
    "f32": llvm_ir.FloatType(),
    "i64": llvm_ir.IntType(64),
    "i32": llvm_ir.IntType(32),
    "bool": llvm_ir.IntType(1),
}
INTEGER_MINIMUM = {"i64": -(2**63), "i32": -(2**31)}
BYTE = llvm_ir.IntType(8)
INTRINSICS = {"exp": "llvm.exp", "log": "llvm.log", "sqrt": "llvm.sqrt", "sin": "llvm.sin", "cos": "llvm.cos"}
LIBM_NAMES = ("tanh", "log1p", "expm1", "erf", "tan", "asin", "acos", "atan")  # called in libm, by these names
LIBM = {(name, dtype): name + ("f" if dtype == "f32" else "") for name in LIBM_NAMES for dtype in ("f64", "f32")}


@record(eq=False)  # compared by identity: the host keeps weak references to them
class Native:
    """The JIT-compiled module: function addresses by symbol, the global site table, the status globals.
    `from_cache` says whether the object code was loaded from the compile cache (codegen/cache.py)."""

    engine: binding.ExecutionEngine
    addresses: dict[str, int]
    sites: list[ir.Site]
    error_address: int
    depth_address: int
    value_address: int
    interrupt_address: int
    from_cache: bool = False
    trace_address: int = 0  # `dl.trace`: the call sites a failure unwound through (modules with real calls)
    trace_count_address: int = 0


def host_target() -> binding.TargetMachine:
    """The machine this process runs on, at full optimisation."""
    binding.initialize_native_target()
    binding.initialize_native_asmprinter()
    return binding.Target.from_default_triple().create_target_machine(opt=3, jit=True)


def compile_functions(
    functions: list[ir.Function],
    target: binding.TargetMachine | None = None,
    cache: Path | None = None,
    vectors: str | None = None,
    speed: int = 3,
) -> Native:
    """Build one LLVM module holding `functions`, optimise it and JIT-compile it for `target`. With a
    `cache` directory, object code stored there for the same functions and target is loaded instead, and
    code compiled now is stored there."""
    target = target or host_target()
    sites = site_table(functions)
    salt = f"{target_description(target)} {vectors} O{speed}"
    key = None
    if cache is not None:
        key = compile_cache.cache_key(functions, salt, llvm_version())
        stored = compile_cache.load(cache, key)
        entry = entry_parts(stored) if stored is not None else None
        if entry is not None and all(symbol in LOADED_LOOPS for symbol in entry.imported):
            native = load_objects(entry.objects, functions, sites, target, from_cache=True)
            if native is not None:
                return share_loops(native, entry.defined)
    loops = ModuleLoops(salt, LOADED_LOOPS)
    module = build_module(functions, target, vectors, loops)
    pieces = Threads.count if can_fork() else 1
    objects = compile_parts(module_parts(module, target, pieces, frozenset(loops.tidy)), speed)
    if key is not None:
        compile_cache.store(cache, key, packed([manifest(loops), *objects]))
    native = load_objects(objects, functions, sites, target, from_cache=False)
    if native is None:
        raise RuntimeError("LLVM produced object code without the compiled functions")
    return share_loops(native, loops.defined)


# The outlined loop nests loaded in this process, by symbol (`loop_symbol`), and the engines that hold them:
# a module compiled later calls a loop already loaded instead of compiling it again (examples/gpt.dl's
# training step calls 178 loops of the forward pass that its `evaluate`, compiled first, holds). The engines
# are kept for the life of the process: later code calls into them, and
# LLVM's symbol table (the process's, `binding.add_symbol`) holds their addresses.
LOADED_LOOPS: dict[str, int] = {}
LOOP_PREFIX = "dl.loop."
LOOP_ENGINES: list[binding.ExecutionEngine] = []


class ModuleLoops:
    """The outlined loop nests of one module being built, shared by its functions' emitters: the LLVM
    function of each (by its symbol, `loop_symbol`), the symbols the module defines and
    those it calls in modules loaded before (`loaded`, symbol -> address; empty: it defines them all)."""

    def __init__(self, salt: str = "", loaded: dict[str, int] | None = None) -> None:
        self.functions: dict[str, llvm_ir.Function] = {}  # by symbol
        self.defined: list[str] = []
        self.imported: list[str] = []
        self.salt = salt  # what else shapes a loop's code (the target, libmvec's letter, the optimisation level)
        self.tidy: set[str] = set()  # the module's functions that need only `tidy`'s short pipeline
        self.loaded = {} if loaded is None else loaded


def loop_symbol(key: object, salt: str) -> str:
    """The symbol of an outlined loop nest: a digest of its IR (buffers renamed) and of `salt`, so that one
    symbol is one machine code in the process and in the compile cache."""
    return LOOP_PREFIX + hashlib.sha256(f"{key!r}\0{salt}".encode()).hexdigest()[:24]


def share_loops(native: Native, defined: list[str]) -> Native:
    """Make the loop nests `native` defines callable from modules compiled after it (`LOADED_LOOPS`)."""
    added = False
    for symbol in defined:
        if symbol not in LOADED_LOOPS:
            address = native.engine.get_function_address(symbol)
            if address:
                binding.add_symbol(symbol, address)
                LOADED_LOOPS[symbol] = address
                added = True
    if added:
        LOOP_ENGINES.append(native.engine)
    return native


@record(frozen=True)
class Entry:
    """A compile cache entry: the loop nests its code defines and those it calls in other modules, which
    must be loaded before it is, and its object files."""

    defined: tuple[str, ...]
    imported: tuple[str, ...]
    objects: list[bytes]


def manifest(loops: ModuleLoops) -> bytes:
    return f"dl loops\n{' '.join(loops.defined)}\n{' '.join(loops.imported)}\n".encode()


def entry_parts(data: bytes) -> Entry | None:
    """The parts of a cache entry (`packed([manifest, *objects])`), or None when it is not one."""
    parts = unpacked(data)
    if parts is None or len(parts) < 2:
        return None
    lines = parts[0].decode("ascii", errors="replace").split("\n")
    if len(lines) != 4 or lines[0] != "dl loops":
        return None
    return Entry(tuple(lines[1].split()), tuple(lines[2].split()), parts[1:])


# How LLVM treats a function: `FULL`, its O2 or O3 pipeline (`optimise`); `TIDY`, a short one (`tidy`) for code with
# no loop for LLVM to vectorise: a function that only calls loop nests, a loop nest the emitter vectorised
# itself; `UNOPTIMISED`, none, for a target machine at `opt=0` (functions marked `optnone`)
FULL, TIDY, UNOPTIMISED = "full", "tidy", "unoptimised"


@record(frozen=True, eq=False)
class Part:
    """A part of a module compiled on its own (`module_parts`): the functions it defines (the others of the
    module it declares), whether it defines the status globals (else it declares them), the machine to compile
    it for and how to optimise it. Its text is printed where it is compiled (`text`), so that a forked child
    prints its own part."""

    module: llvm_ir.Module
    defined: list[llvm_ir.Function] | None  # None: the whole module as it is
    globals_defined: bool
    machine: binding.TargetMachine
    pipeline: str

    def text(self) -> str:
        return str(self.module) if self.defined is None else printed(self.module, self.defined, self.globals_defined)


def module_parts(
    module: llvm_ir.Module, target: binding.TargetMachine, pieces: int = 1, tidy: frozenset[str] = frozenset()
) -> list[list[Part]]:
    """The parts of `module` to compile on their own, in up to `pieces` groups of about equal work
    (`balanced`) that `compile_parts` compiles at the same time, each group one part per pipeline its
    functions need. The functions named in `tidy` need only `tidy`'s short pipeline; those marked `optnone`
    (a large training step that only calls its loops) are compiled for a target machine that does not
    optimise either (FastISel and the fast register allocator generate a 6,900-line step in a quarter of
    the time); the others get LLVM's O2 or O3 pipeline (`optimise`). The parts call each other's functions and share the
    status globals, which the first part defines."""
    functions = [f for f in module.functions if f.blocks]
    pipelines = {f: UNOPTIMISED if "optnone" in f.attributes else TIDY if f.name in tidy else FULL for f in functions}
    groups = balanced(functions, pipelines, pieces)
    if len(groups) == 1 and all(pipeline == FULL for pipeline in pipelines.values()):
        return [[Part(module, None, True, target, FULL)]]
    plain = None
    made: list[list[Part]] = []
    for group in groups:
        parts = []
        for pipeline in (FULL, TIDY, UNOPTIMISED):
            defined = [f for f in group if pipelines[f] == pipeline]
            if not defined:
                continue
            machine = target
            if pipeline == UNOPTIMISED:
                plain = plain or binding.Target.from_triple(target.triple).create_target_machine(
                    cpu=binding.get_host_cpu_name(), features=binding.get_host_cpu_features().flatten(), opt=0, jit=True
                )
                machine = plain
            parts.append(Part(module, defined, not made and not parts, machine, pipeline))
        made.append(parts)
    return made


# LLVM's work on a function (passes and code generation), in units of about 0.045 ms on the machine of
# bench/README.md: a fixed part and a part per instruction, by pipeline and by whether it is an outlined loop
# nest, fitted to train.dl's functions (the loop vectorizer makes a loop's cost grow with its size; after
# `tidy`, code generation is most of the work, about 2 ms a function)
WORK = {
    (FULL, True): (8, 4.0),
    (FULL, False): (40, 1.0),
    (TIDY, True): (22, 0.7),
    (TIDY, False): (13, 0.6),
    (UNOPTIMISED, False): (20, 0.4),
}
PIECE_WORK = 350  # the least work worth a group of its own (about 15 ms): a smaller module gained little or nothing
CHILD_START = 50  # what a group costs more in a forked child: the fork, and the pages it and this process then copy


def balanced(
    functions: list[llvm_ir.Function], pipelines: dict[llvm_ir.Function, str], pieces: int
) -> list[list[llvm_ir.Function]]:
    """`functions` in at most `pieces` groups of about equal work (the largest first, each to the lightest
    group), each of about `PIECE_WORK` or more, each in the module's order; one group when they make no more."""
    work = {}
    for f in functions:
        fixed, each = WORK[pipelines[f], pipelines[f] != UNOPTIMISED and f.name.startswith(LOOP_PREFIX)]
        work[f] = fixed + each * sum(len(block.instructions) for block in f.blocks)
    pieces = max(1, min(pieces, int(sum(work.values()) // PIECE_WORK)))
    if pieces == 1:
        return [functions]
    groups: list[list[llvm_ir.Function]] = [[] for _ in range(pieces)]
    loads = [0.0] + [float(CHILD_START)] * (pieces - 1)  # the first group is compiled in this process
    for function in sorted(functions, key=lambda f: -work[f]):
        lightest = loads.index(min(loads))
        groups[lightest].append(function)
        loads[lightest] += work[function]
    order = {f: position for position, f in enumerate(functions)}
    return [sorted(group, key=order.__getitem__) for group in groups if group]


def printed(module: llvm_ir.Module, defined: list[llvm_ir.Function], globals_defined: bool) -> str:
    """The module's text with bodies for the `defined` functions only (the others declared), and its global
    variables defined (with their initial values) or declared `external`."""
    bodies = {f: f.blocks for f in module.functions}
    variables = [g for g in module.global_values if isinstance(g, llvm_ir.GlobalVariable)]
    initializers = {g: g.initializer for g in variables}
    kept = set(defined)
    try:
        for function in module.functions:
            if function not in kept:
                function.blocks = []
        if not globals_defined:
            for variable in variables:
                variable.initializer = None  # `external global`: defined in another part
        forget_text(variables)
        return str(module)
    finally:
        for function in module.functions:
            function.blocks = bodies[function]
        for variable in variables:
            variable.initializer = initializers[variable]
        forget_text(variables)


def forget_text(variables: list[llvm_ir.GlobalVariable]) -> None:
    """Drop the text llvmlite keeps of each variable once printed (`_StrCaching`), so that the next print
    shows its definition or declaration as it is now: kept, every part defined the status globals."""
    for variable in variables:
        variable.__dict__.pop("_StrCaching__cached_str", None)


def compile_parts(groups: list[list[Part]], speed: int) -> list[bytes]:
    """The object code of each part (`module_parts`), the groups at the same time in forked processes, on as
    many cores as the process runs large products on (`--threads`; codegen/forked.py), else one by one."""

    def job(parts: list[Part]):
        def compiled() -> bytes:
            objects = []
            for part in parts:
                parsed = binding.parse_assembly(part.text())
                parsed.verify()
                if part.pipeline == FULL:
                    optimise(parsed, part.machine, speed)
                elif part.pipeline == TIDY:
                    tidy(parsed, part.machine)
                objects.append(part.machine.emit_object(parsed))
            return packed(objects)

        return compiled

    # llvmlite's lock around every call into LLVM: held while forking, so that no child inherits it held
    lock = getattr(getattr(binding.ffi, "lib", None), "_lock", None)
    jobs = [job(parts) for parts in groups]
    return [code for data in in_children(jobs, Threads.count, holding=lock) for code in unpacked(data)]


def packed(objects: list[bytes]) -> bytes:
    """Object files as one cache entry: each one's length (8 bytes, little-endian), then its bytes."""
    return b"".join(len(code).to_bytes(8, "little") + code for code in objects)


def unpacked(data: bytes) -> list[bytes] | None:
    """The object files of a `packed` entry, or None when it is not one."""
    objects, at = [], 0
    while at < len(data):
        size = int.from_bytes(data[at : at + 8], "little")
        if at + 8 + size > len(data):
            return None
        objects.append(data[at + 8 : at + 8 + size])
        at += 8 + size
    return objects or None


def load_objects(objects: list[bytes], functions, sites, target, from_cache: bool) -> Native | None:
    """Link object code into a new execution engine; None when it lacks a function or a status global."""
    engine = binding.create_mcjit_compiler(binding.parse_assembly(""), target)
    for code in objects:
        engine.add_object_file(binding.ObjectFileRef.from_data(code))
    engine.finalize_object()
    addresses = {f.symbol: engine.get_function_address(f.symbol) for f in functions}
    status = [engine.get_global_value_address(name) for name in ("dl.error", "dl.depth", "dl.value", "dl.interrupt")]
    if not all(addresses.values()) or not all(status):
        return None
    native = Native(engine, addresses, sites, *status, from_cache)
    if any(f.own_workspace is not None for f in functions):
        native.trace_address = engine.get_global_value_address("dl.trace")
        native.trace_count_address = engine.get_global_value_address("dl.trace.count")
        if not native.trace_address or not native.trace_count_address:
            return None
    return native


def llvm_version() -> str:
    return ".".join(str(part) for part in binding.llvm_version_info)


def target_description(target: binding.TargetMachine) -> str:
    """The target's triple and the host CPU it will run on (the code is loaded into this process)."""
    return f"{target.triple} {binding.get_host_cpu_name()} {binding.get_host_cpu_features().flatten()}"


def site_table(functions: list[ir.Function]) -> list[ir.Site]:
    """Every function's sites then its recursion site, in module order: `dl.error` - 1 indexes it."""
    sites: list[ir.Site] = []
    for function in functions:
        sites.extend(function.sites)
        sites.append(function.recursion)
    return sites


def optimise(module: binding.ModuleRef, target: binding.TargetMachine, speed: int = 3) -> None:
    options = binding.create_pipeline_tuning_options(speed_level=speed)
    # the loop vectorizer leaves the loops that step a vector at a time already (vector_fill, flat_fill, whose
    # leftover elements LLVM knows are fewer than a vector) and vectorises the gathers and max-reductions the
    # emitter leaves scalar: without it the char-RNN step ran 45% slower (and train.dl compiled 23 ms faster)
    options.loop_vectorization = True
    options.slp_vectorization = True
    # loops already step a vector at a time (vector_fill); unrolling them more made their code larger and
    # LLVM's work a quarter longer on examples/gpt.dl, for no faster code measured
    options.loop_unrolling = False
    builder = binding.create_pass_builder(target, options)
    builder.getModulePassManager().run(module, builder)


def tidy(module: binding.ModuleRef, target: binding.TargetMachine) -> None:
    """The short pipeline for functions with no loop left for LLVM to vectorise (`module_parts`): variables to
    registers, instructions combined, the control flow simplified. On train.dl's functions it took a tenth of
    O2's time, for code of the same length (the vector loops the emitter wrote come out alike)."""
    manager = binding.create_new_module_pass_manager()
    manager.add_sroa_pass()
    manager.add_instruction_combine_pass()
    manager.add_simplify_cfg_pass()
    manager.add_post_order_function_attributes_pass()
    manager.run(module, binding.create_pass_builder(target, binding.create_pipeline_tuning_options(speed_level=2)))


def build_module(
    functions: list[ir.Function],
    target: binding.TargetMachine,
    vectors: str | None = None,
    loops: ModuleLoops | None = None,
) -> llvm_ir.Module:
    """The functions as one LLVM module; `vectors` is libmvec's instruction set letter (`e`, `d`) when
    tensor loops may call its vector functions (codegen/fusion.py `vector_target`). `loops` collects its
    outlined loop nests (none loaded before: it defines them all)."""
    module = llvm_ir.Module(name="dl")
    module.triple = target.triple
    module.data_layout = str(target.target_data)
    error = llvm_ir.GlobalVariable(module, TYPES["i64"], "dl.error")
    error.initializer = llvm_ir.Constant(TYPES["i64"], 0)
    depth = llvm_ir.GlobalVariable(module, TYPES["i64"], "dl.depth")
    depth.initializer = llvm_ir.Constant(TYPES["i64"], 0)
    value = llvm_ir.GlobalVariable(module, TYPES["f64"], "dl.value")
    value.initializer = llvm_ir.Constant(TYPES["f64"], 0.0)
    stop = llvm_ir.GlobalVariable(module, TYPES["i64"], "dl.interrupt")  # set by the host on Ctrl-C
    stop.initializer = llvm_ir.Constant(TYPES["i64"], 0)
    if any(f.own_workspace is not None for f in functions):  # real calls: where a failure unwound through
        trace = llvm_ir.GlobalVariable(module, llvm_ir.ArrayType(TYPES["i64"], TRACE_CAPACITY), "dl.trace")
        trace.initializer = llvm_ir.Constant(trace.value_type, None)
        count = llvm_ir.GlobalVariable(module, TYPES["i64"], "dl.trace.count")
        count.initializer = llvm_ir.Constant(TYPES["i64"], 0)
    declared = {f.symbol: llvm_ir.Function(module, signature(f), f.symbol) for f in functions}
    loops = ModuleLoops() if loops is None else loops  # shared by the module's functions
    site_base = 0
    for function in functions:
        emitter = FunctionEmitter(module, declared, function, error, depth, site_base, loops)
        emitter.vectors = vectors
        emitter.emit()
        site_base += len(function.sites) + 1
    return module


def only_calls_loops(function: ir.Function, block_order: dict[str, int]) -> bool:
    """Whether `function` does its work in outlined loop nests and products: no loop of its own (`has_loop`)
    and at most `INLINE_ELEMENTS` elements a call in
    loops it runs inline (those that can fail)."""
    if has_loop(function, block_order):
        return False
    inline = 0
    for block in function.blocks:
        for instruction in block.instructions:
            if isinstance(instruction, ir.ScatterAdd):
                inline += math.prod(instruction.shape)
            elif isinstance(instruction, (ir.Fill, ir.Reduce)) and ir.can_fail(instruction.tree):
                inline += math.prod(instruction.shape or getattr(instruction.target, "shape", ()))
    return inline <= INLINE_ELEMENTS


def has_loop(function: ir.Function, block_order: dict[str, int]) -> bool:
    """Whether `function` jumps back to a block not after the jump's, by the emitter's `block_order`."""
    return any(
        isinstance(block.terminator, ir.Jump) and block_order[block.terminator.target] <= position
        for position, block in enumerate(function.blocks)
    )


def straight(function: ir.Function, block_order: dict[str, int], emitted: llvm_ir.Function) -> bool:
    """Whether `function` is tensor code that LLVM's O2 would find nothing in: a specialised function with no
    loop (no jump back, no loop run inline, whose counter is a phi) and no call of another compiled function
    (recursion gains from O2's inlining and tail calls: `fib(30)` ran 30% slower after `tidy`)."""
    if not function.specialised or has_loop(function, block_order):
        return False
    if any(isinstance(i, (ir.Call, ir.CallSpecialised)) for block in function.blocks for i in block.instructions):
        return False
    return not any(isinstance(i, llvm_ir.PhiInstr) for block in emitted.blocks for i in block.instructions)


def boundary_type(dtype: str) -> llvm_ir.Type:
    """How a value crosses a function boundary: bools as bytes, `unit` results as void."""
    if dtype == "unit":
        return llvm_ir.VoidType()
    return BYTE if dtype == "bool" else TYPES[dtype]


def signature(function: ir.Function) -> llvm_ir.FunctionType:
    if function.specialised:
        return llvm_ir.FunctionType(llvm_ir.VoidType(), [BYTE.as_pointer().as_pointer()])
    return llvm_ir.FunctionType(boundary_type(function.result), [boundary_type(p.dtype) for p in function.params])


def constant(operand: ir.Const) -> llvm_ir.Constant:
    value = operand.value
    integer = operand.dtype in ir.INTEGER_DTYPES or operand.dtype == "bool"
    return llvm_ir.Constant(TYPES[operand.dtype], int(value) if integer else float(value))


# ------------------------------------------------------------------ tensors (specialised functions)

GEMM = {"f32": "scipy_cblas_sgemm64_", "f64": "scipy_cblas_dgemm64_"}  # numpy's OpenBLAS, 64-bit integers
# A specialised function of more LLVM instructions than this (a whole training step: thousands of calls of
# its loop nests and products, little arithmetic of its own) is compiled without optimisation: LLVM's time on
# it grows faster than its size (register allocation, instruction selection over blocks of thousands of
# instructions), and optimising the calls between loops gains nothing measurable. Not one that loops itself,
# or that runs loops inline (gathers and scatters that check their indices) over more than INLINE_ELEMENTS
# elements a call: unoptimised, those would run several times slower (`only_calls_loops`).
LARGE_FUNCTION = 4000
INLINE_ELEMENTS = 1 << 16
DRAW = "dl_fill_draws"  # runtime/randomness.py `fill_draws`, made a C function by codegen/native.py
SAMPLE = "dl_fill_samples"  # runtime/randomness.py `fill_samples`, likewise
ROW_MAJOR, NO_TRANSPOSE, TRANSPOSE = 101, 111, 112


def storage_type(dtype: str) -> llvm_ir.Type:
    """How an element is stored in a buffer: bools as bytes, as numpy stores them."""
    return BYTE if dtype == "bool" else TYPES[dtype]


# libmvec's vector functions by instruction set (`_ZGVdN8v_tanhf` for AVX2, `_ZGVeN16v_tanhf` for AVX-512):
# the letter in the name, and the lanes of one vector per dtype.
VECTOR_LANES = {"d": {"f32": 8, "f64": 4}, "e": {"f32": 16, "f64": 8}}
MVEC_ISA = {("f32", 4): "b", ("f32", 8): "d", ("f32", 16): "e", ("f64", 2): "b", ("f64", 4): "d", ("f64", 8): "e"}
LIBMVEC = frozenset({"exp", "log", "sin", "cos", "tanh"})
UNARY_MATH = frozenset(
    {"exp", "log", "sin", "cos", "tanh", "sqrt", "abs", "sigmoid", "relu", "floor", "ceil", "round", "sign"}
)
# the step functions' intrinsics (numpy's and torch's `round` takes halves to the even integer)
ROUNDING = {"floor": "llvm.floor", "ceil": "llvm.ceil", "round": "llvm.roundeven"}
# built-ins computed one element at a time, calling libm (libmvec need not have them): no vector loop; the libm
# functions libmvec lacks, and softplus, which calls log1p
SCALAR_ONLY_MATH = frozenset(LIBM_NAMES) - LIBMVEC | {"softplus"}


def integer_power(builder: llvm_ir.IRBuilder, base, exponent, name: str) -> tuple:
    """`base ** exponent` of integers for exponent >= 0, by squaring, as a loop in the function being
    built: (the builder after it, the result wrapped around, whether it overflowed). The base is squared
    only while bits of the exponent are left, so every product is a factor of the result: one overflows
    exactly when the exact result is out of range (|base| >= 2; 0, 1 and -1 never overflow)."""
    kind, flag = base.type, TYPES["bool"]
    function, entry = builder.block.parent, builder.block
    loop = function.append_basic_block(f"{name}.loop")
    square = function.append_basic_block(f"{name}.square")
    done = function.append_basic_block(f"{name}.done")
    builder.branch(loop)
    builder = llvm_ir.IRBuilder(loop)
    result, power = builder.phi(kind, f"{name}.result"), builder.phi(kind, f"{name}.power")
    bits, overflowed = builder.phi(kind, f"{name}.bits"), builder.phi(flag, f"{name}.overflowed")
    odd = builder.trunc(builder.and_(bits, kind(1)), flag, name=f"{name}.odd")
    product = builder.smul_with_overflow(result, power, name=f"{name}.product")
    result_after = builder.select(odd, builder.extract_value(product, 0), result, name=f"{name}.result.after")
    lost = builder.and_(odd, builder.extract_value(product, 1), name=f"{name}.product.overflows")
    overflowed_after = builder.or_(overflowed, lost, name=f"{name}.overflowed.after")
    bits_left = builder.lshr(bits, kind(1), name=f"{name}.bits.left")
    builder.cbranch(builder.icmp_signed("==", bits_left, kind(0)), done, square)
    builder = llvm_ir.IRBuilder(square)
    squared = builder.smul_with_overflow(power, power, name=f"{name}.squared")
    power_next = builder.extract_value(squared, 0, name=f"{name}.power.next")
    overflowed_next = builder.or_(overflowed_after, builder.extract_value(squared, 1), name=f"{name}.overflowed.next")
    builder.branch(loop)
    for phi, first, again in (
        (result, kind(1), result_after),
        (power, base, power_next),
        (bits, exponent, bits_left),
        (overflowed, flag(0), overflowed_next),
    ):
        phi.add_incoming(first, entry)
        phi.add_incoming(again, square)
    return llvm_ir.IRBuilder(done), result_after, overflowed_after


def vectorisable(tree: object, last: int, floats: set[str]) -> bool:
    """Whether a tree can be computed a vector at a time along dimension `last` (collecting the float
    dtypes it computes in `floats`): reads contiguous or constant along it, no gathers."""
    match tree:
        case ir.Read(buffer=buffer, strides=strides):
            if buffer.dtype in ("f32", "f64"):
                floats.add(buffer.dtype)
            return strides[last] in (0, 1)
        case ir.Splat(value=value):
            if value.dtype in ("f32", "f64"):
                floats.add(value.dtype)
            return True
        case ir.Index():
            return True
        case ir.Apply(op=op, dtype=dtype, args=args):
            if op in ("floordiv", "mod") or op in SCALAR_ONLY_MATH:  # one element at a time
                return False
            if op == "pow" and dtype in ir.INTEGER_DTYPES:  # a loop per element (`integer_power`)
                return False
            if dtype in ("f32", "f64"):
                floats.add(dtype)
            return all(vectorisable(a, last, floats) for a in args)
    return False


def flat(instruction) -> ir.Fill | None:
    """A fill of a whole buffer whose every read is of the element it writes (no broadcast, transpose,
    index or gather: the buffers are read in the target's own row-major order) as the same fill over the
    elements in order, a buffer of one dimension; None for any other instruction."""
    if not isinstance(instruction, ir.Fill) or instruction.view is not None or not instruction.target.shape:
        return None
    strides = ir.contiguous(instruction.target.shape)

    def flattened(tree: object) -> object | None:
        match tree:
            case ir.Read(buffer=buffer, offset=ir.Const(value=0), strides=read) if read == strides:
                return ir.Read(buffer, tree.offset, (1,))
            case ir.Splat():
                return tree
            case ir.Apply(args=args):
                flat_args = [flattened(arg) for arg in args]
                if any(arg is None for arg in flat_args):
                    return None
                return ir.Apply(tree.op, tree.dtype, tuple(flat_args))
        return None

    tree = flattened(instruction.tree)
    if tree is None:
        return None
    target = instruction.target
    return ir.Fill(ir.Buffer(target.name, target.dtype, (target.size,), target.slot, target.offset), tree)


def collect(tree: object, buffers: dict, operands: list) -> None:
    """The buffers a tree reads and the operands it uses."""
    match tree:
        case ir.Read(buffer=buffer, offset=offset):
            buffers.setdefault(buffer.name, buffer)
            operands.append(offset)
        case ir.Splat(value=value):
            operands.append(value)
        case ir.Take(buffer=buffer, offset=offset, index=index):
            buffers.setdefault(buffer.name, buffer)
            operands.append(offset)
            collect(index, buffers, operands)
        case ir.Apply(args=args):
            for arg in args:
                collect(arg, buffers, operands)


class TensorEmission:
    """The tensor instructions of a specialised function, as loop nests (mixed into `FunctionEmitter`)."""

    def buffer_pointers(self, builder: llvm_ir.IRBuilder, buffers) -> dict[str, llvm_ir.Value]:
        """Each buffer's typed pointer, made in the prologue: one load per slot, and one pointer per place
        and type, however many buffers the workspace packs there (a training step has thousands)."""
        bases: dict[int, llvm_ir.Value] = {}
        made: dict[tuple[int, int, str], llvm_ir.Value] = {}
        pointers = {}
        for buffer in buffers:
            place = (buffer.slot, buffer.offset, buffer.dtype)
            if place not in made:
                if buffer.slot not in bases:
                    slot = builder.gep(self.slot_array, [TYPES["i64"](buffer.slot)])
                    bases[buffer.slot] = builder.load(slot, name=f"slot.{buffer.slot}.base")
                base = bases[buffer.slot]
                if buffer.offset:
                    base = builder.gep(base, [TYPES["i64"](buffer.offset)], inbounds=True)
                made[place] = builder.bitcast(base, storage_type(buffer.dtype).as_pointer(), name=buffer.name)
            pointers[buffer.name] = made[place]
        return pointers

    def slot_pointer(self, builder: llvm_ir.IRBuilder, slot: int, dtype: str) -> llvm_ir.Value:
        base = builder.load(builder.gep(self.slot_array, [TYPES["i64"](slot)]), name=f"slot.{slot}")
        return builder.bitcast(base, storage_type(dtype).as_pointer())

    def tensor_instruction(self, builder: llvm_ir.IRBuilder, instruction) -> llvm_ir.IRBuilder:
        if isinstance(instruction, (ir.Fill, ir.Reduce)) and not ir.can_fail(instruction.tree):
            return self.outlined(builder, instruction)
        if isinstance(instruction, ir.Sort):  # optimised on its own, whatever the function calling it gets
            return self.outlined(builder, instruction)
        return self.loop_instruction(builder, instruction)

    def outlined(self, builder: llvm_ir.IRBuilder, instruction) -> llvm_ir.IRBuilder:
        """A loop nest as a function of its own whose buffers are `noalias` parameters: LLVM then knows
        the buffer written is not one read (they all lie in one workspace), and vectorises. A fill whose
        every read is of the element it writes (`flat`) becomes one loop over the elements, of a length
        the function takes as an argument: Adam's update of every parameter, whatever its shape, is then
        one function for LLVM to optimise, not one per shape."""
        flattened = flat(instruction)
        length = None
        if flattened is not None:
            instruction, length = flattened, flattened.target.shape[0]
        buffers: dict[str, ir.Buffer] = {instruction.target.name: instruction.target}
        if isinstance(instruction, ir.Sort):
            buffers.update({scratch.name: scratch for scratch in (instruction.keys, instruction.positions)})
        temps: dict[str, ir.Temp] = {}
        operands = [instruction.view.offset] if isinstance(instruction, ir.Fill) and instruction.view else []
        collect(instruction.tree, buffers, operands)
        for operand in operands:
            if isinstance(operand, ir.Temp):
                temps[operand.name] = operand
        arguments = [self.pointers[b] for b in buffers] + [self.values[t] for t in temps]
        if length is not None:
            arguments.append(TYPES["i64"](length))
        # the same loop over other buffers (a layer's twin, another leaf of the same shape, or for a flat
        # fill of any length) calls one function
        key = ir.rebuilt(
            instruction,
            {
                name: ir.Buffer(f"b{i}", b.dtype, () if length is not None else b.shape, 0)
                for i, (name, b) in enumerate(buffers.items())
            },
            {name: ir.Temp(f"t{i}", t.dtype) for i, (name, t) in enumerate(temps.items())},
        )
        loops = self.outlines
        # found by its symbol, not by the key: keys holding a NaN constant are never equal, their text is
        name = loop_symbol(("flat" if length is not None else "nest", key), loops.salt)
        known = loops.functions.get(name)
        if known is not None:
            builder.call(known, arguments)
            return builder
        kinds = [storage_type(b.dtype).as_pointer() for b in buffers.values()] + [
            TYPES[t.dtype] for t in temps.values()
        ]
        if length is not None:
            kinds.append(TYPES["i64"])
        function = llvm_ir.Function(self.module, llvm_ir.FunctionType(llvm_ir.VoidType(), kinds), name)
        loops.functions[name] = function
        if name in loops.loaded:  # compiled by a module loaded before: called there
            loops.imported.append(name)
            builder.call(function, arguments)
            return builder
        loops.defined.append(name)
        # kept out of the caller: inlining thousands of loop nests into a training step made LLVM's work
        # a fifth longer (examples/gpt.dl), and a call per loop nest costs nothing measurable
        function.attributes.add("noinline")
        for argument, buffer_name in zip(function.args, buffers, strict=False):
            argument.add_attribute("noalias")
            argument.name = buffer_name
        saved = (self.llvm_function, self.pointers, self.values)
        self.llvm_function = function
        self.pointers = dict(zip(buffers, function.args, strict=False))
        self.values = {name: arg for name, arg in zip(temps, function.args[len(buffers) :], strict=False)}
        try:
            entry = llvm_ir.IRBuilder(function.append_basic_block("entry"))
            if length is None:
                inner = self.loop_instruction(entry, instruction)
                vectorised = isinstance(instruction, ir.Fill) and self.vector_lanes(instruction) is not None
            else:
                function.args[-1].name = "length"
                inner = self.flat_fill(entry, instruction, function.args[-1])
                vectorised = self.tree_lanes(instruction) is not None
            inner.ret_void()
            if vectorised:  # nothing left for LLVM's loop vectorizer
                loops.tidy.add(name)
        finally:
            self.llvm_function, self.pointers, self.values = saved
        builder.call(function, arguments)
        return builder

    def flat_fill(self, builder: llvm_ir.IRBuilder, fill: ir.Fill, length: llvm_ir.Value) -> llvm_ir.IRBuilder:
        """A `flat` fill over `length` elements (a run-time value): vector steps while whole vectors fit, then
        the elements left over one at a time."""
        pointer, dtype = self.pointers[fill.target.name], fill.target.dtype
        start = TYPES["i64"](0)
        lanes = self.tree_lanes(fill)
        if lanes is not None:

            def vector_step(builder, i):
                builder, value = self.vector_tree(builder, fill.tree, [i], lanes)
                self.store_vector(builder, pointer, i, dtype, value)
                return builder

            start = builder.and_(length, TYPES["i64"](-lanes), name="whole")
            builder = self.counted(builder, 0, start, lanes, vector_step, "flat.vector")
            # the elements left over, counted from 0 to `length & (lanes - 1)`: LLVM then knows there are
            # fewer than `lanes` of them and leaves the loop as it is, rather than vectorising it again
            rest = builder.and_(length, TYPES["i64"](lanes - 1), name="rest")
        else:
            rest = length

        def scalar_step(builder, j):
            i = builder.add(start, j) if lanes is not None else j
            builder, value = self.tree(builder, fill.tree, [i])
            self.store_element(builder, pointer, i, dtype, value)
            return builder

        return self.counted(builder, 0, rest, 1, scalar_step, "flat.rest")

    def loop_instruction(self, builder: llvm_ir.IRBuilder, instruction) -> llvm_ir.IRBuilder:
        match instruction:
            case ir.Fill(target=target, tree=tree, view=region, shape=shape):
                pointer = self.pointers[target.name]
                lanes = self.vector_lanes(instruction)
                if lanes is not None:
                    return self.vector_fill(builder, instruction, lanes)

                def store(builder, index):
                    builder, value = self.tree(builder, tree, index)
                    if region is None:
                        position = self.linear(builder, index, target.shape)
                    else:
                        position = self.position(builder, self.operand(region.offset), index, region.strides)
                    self.store_element(builder, pointer, position, target.dtype, value)
                    return builder

                return self.loops(builder, target.shape if region is None else shape, store, "fill")
            case ir.Evaluate(result=result, tree=tree):
                builder, value = self.tree(builder, tree, [])
                value.name = result.name
                self.values[result.name] = value
                return builder
            case ir.Check(condition=condition, site=site, shows=shows):
                if shows is not None:
                    shown = self.operand(shows)
                    wide = builder.bitcast(shown, TYPES["f64"]) if shows.dtype == "i64" else shown  # its bits: exact
                    if shows.dtype == "f32":
                        wide = builder.fpext(shown, TYPES["f64"])
                    builder.store(wide, self.module.get_global("dl.value"))
                failed = builder.not_(self.operand(condition), name="check.failed")
                return self.fail_unless(builder, failed, site, "assert")
            case ir.Reduce():
                return self.reduce(builder, instruction)
            case ir.Scan():
                return self.scan(builder, instruction)
            case ir.Sort():
                return self.sort(builder, instruction)
            case ir.MatMul():
                return self.matmul(builder, instruction)
            case ir.Draw():
                return self.draw(builder, instruction)
            case ir.Sample():
                return self.sample(builder, instruction)
            case ir.ScatterAdd():
                return self.scatter_add(builder, instruction)
            case ir.TapePush():
                return self.tape_push(builder, instruction)
            case ir.TapePop():
                return self.tape_pop(builder, instruction)
            case ir.TapeZeros():
                return self.tape_zeros(builder, instruction)
        raise AssertionError(instruction)

    # -------------------------------------------------------------- tapes
    def c_function(self, name: str, result, arguments) -> llvm_ir.Function:
        existing = self.module.globals.get(name)
        if existing is not None:
            return existing
        return llvm_ir.Function(self.module, llvm_ir.FunctionType(result, arguments), name)

    def free_tapes(self, builder: llvm_ir.IRBuilder) -> None:
        byte_pointer = BYTE.as_pointer()
        free = self.c_function("free", llvm_ir.VoidType(), [byte_pointer])
        for tape in self.function.tapes:
            address = builder.load(self.slots[tape.address.name])
            builder.call(free, [builder.inttoptr(address, byte_pointer)])
            builder.store(TYPES["i64"](0), self.slots[tape.address.name])

    def entry_address(self, builder, tape: ir.Tape, count) -> llvm_ir.Value:
        i64 = TYPES["i64"]
        address = builder.load(self.slots[tape.address.name], name="tape.address")
        return builder.add(address, builder.mul(count, i64(tape.size)), name="entry")

    def leaf_pointer(self, builder, entry, offset: int, dtype: str) -> llvm_ir.Value:
        address = builder.add(entry, TYPES["i64"](offset))
        return builder.inttoptr(address, storage_type(dtype).as_pointer())

    def tape_push(self, builder: llvm_ir.IRBuilder, instruction: ir.TapePush) -> llvm_ir.IRBuilder:
        i64, tape = TYPES["i64"], instruction.tape
        byte_pointer = BYTE.as_pointer()
        count = builder.load(self.slots[tape.count.name], name="tape.count")
        capacity = builder.load(self.slots[tape.capacity.name], name="tape.capacity")
        full = builder.icmp_signed(">=", count, capacity, name="tape.full")
        growing = self.llvm_function.append_basic_block("tape.grow")
        going_on = self.llvm_function.append_basic_block("tape.room")
        builder.cbranch(full, growing, going_on)
        grow = llvm_ir.IRBuilder(growing)
        doubled = grow.select(
            grow.icmp_signed("<", capacity, i64(16)), i64(16), grow.mul(capacity, i64(2)), name="tape.doubled"
        )
        realloc = self.c_function("realloc", byte_pointer, [byte_pointer, i64])
        old = grow.inttoptr(grow.load(self.slots[tape.address.name]), byte_pointer)
        moved = grow.call(realloc, [old, grow.mul(doubled, i64(tape.size))], name="tape.moved")
        grow = self.fail_unless(grow, grow.icmp_unsigned("==", moved, byte_pointer(None)), instruction.site, "tape")
        grow.store(grow.ptrtoint(moved, i64), self.slots[tape.address.name])
        grow.store(doubled, self.slots[tape.capacity.name])
        grow.branch(going_on)
        builder = llvm_ir.IRBuilder(going_on)
        entry = self.entry_address(builder, tape, count)
        for offset, value, shape in instruction.leaves:
            if isinstance(value, (ir.Temp, ir.Const)):
                self.store_element(
                    builder,
                    self.leaf_pointer(builder, entry, offset, value.dtype),
                    i64(0),
                    value.dtype,
                    self.operand(value),
                )
                continue
            dtype = ir.tree_dtype(value)
            pointer = self.leaf_pointer(builder, entry, offset, dtype)

            def store(builder, index, value=value, pointer=pointer, dtype=dtype, shape=shape):
                builder, element = self.tree(builder, value, index)
                self.store_element(builder, pointer, self.linear(builder, index, shape), dtype, element)
                return builder

            builder = self.loops(builder, shape, store, "push")
        builder.store(builder.add(count, i64(1)), self.slots[tape.count.name])
        return builder

    def tape_zeros(self, builder: llvm_ir.IRBuilder, instruction: ir.TapeZeros) -> llvm_ir.IRBuilder:
        i64, tape = TYPES["i64"], instruction.tape
        byte_pointer = BYTE.as_pointer()
        count = self.operand(instruction.count)
        capacity = builder.select(builder.icmp_signed("<", count, i64(16)), i64(16), count, name="tape.capacity")
        realloc = self.c_function("realloc", byte_pointer, [byte_pointer, i64])
        old = builder.inttoptr(builder.load(self.slots[tape.address.name]), byte_pointer)
        moved = builder.call(realloc, [old, builder.mul(capacity, i64(tape.size))], name="tape.zeros")
        failed = builder.icmp_unsigned("==", moved, byte_pointer(None))
        builder = self.fail_unless(builder, failed, instruction.site, "tape")
        memset = self.module.declare_intrinsic("llvm.memset", [byte_pointer, i64])
        builder.call(memset, [moved, BYTE(0), builder.mul(count, i64(tape.size)), TYPES["bool"](0)])
        builder.store(builder.ptrtoint(moved, i64), self.slots[tape.address.name])
        builder.store(count, self.slots[tape.count.name])
        builder.store(capacity, self.slots[tape.capacity.name])
        return builder

    def tape_pop(self, builder: llvm_ir.IRBuilder, instruction: ir.TapePop) -> llvm_ir.IRBuilder:
        i64, tape = TYPES["i64"], instruction.tape
        count = builder.load(self.slots[tape.count.name], name="tape.count")
        builder = self.fail_unless(builder, builder.icmp_signed("<=", count, i64(0)), instruction.site, "pop")
        last = builder.sub(count, i64(1), name="tape.last")
        builder.store(last, self.slots[tape.count.name])
        entry = self.entry_address(builder, tape, last)
        for offset, target in instruction.leaves:
            if isinstance(target, ir.Temp):
                pointer = self.leaf_pointer(builder, entry, offset, target.dtype)
                self.values[target.name] = self.load_element(builder, pointer, i64(0), target.dtype)
                continue
            source = builder.inttoptr(builder.add(entry, i64(offset)), BYTE.as_pointer())
            destination = builder.bitcast(self.pointers[target.name], BYTE.as_pointer())
            size = target.size * ir.ITEM_BYTES[target.dtype]
            memcpy = self.module.declare_intrinsic("llvm.memcpy", [BYTE.as_pointer(), BYTE.as_pointer(), i64])
            builder.call(memcpy, [destination, source, i64(size), TYPES["bool"](0)])
        return builder

    # -------------------------------------------------------------- loops and elements
    def loops(self, builder: llvm_ir.IRBuilder, shape: tuple[int, ...], body, name: str, index=()):
        """A loop nest over `shape` (row-major: the last dimension innermost) calling `body(builder, index)`."""
        if len(index) == len(shape):
            return body(builder, list(index))
        depth = len(index)

        def inner(builder, counter):
            return self.loops(builder, shape, body, name, (*index, counter))

        return self.counted(builder, 0, shape[depth], 1, inner, f"{name}.{depth}")

    def counted(self, builder: llvm_ir.IRBuilder, start, stop, step: int, body, name: str):
        """`for i in start..stop by step { body(builder, i) }` (bounds constant, or values computed before)."""
        i64 = TYPES["i64"]
        start = start if isinstance(start, llvm_ir.Value) else i64(start)
        stop = stop if isinstance(stop, llvm_ir.Value) else i64(stop)
        before = builder.block
        head = self.llvm_function.append_basic_block(f"{name}.head")
        inner = self.llvm_function.append_basic_block(f"{name}.body")
        end = self.llvm_function.append_basic_block(f"{name}.end")
        builder.branch(head)
        builder = llvm_ir.IRBuilder(head)
        counter = builder.phi(i64, name=f"{name}.i")
        counter.add_incoming(start, before)
        builder.cbranch(builder.icmp_signed("<", counter, stop), inner, end)
        builder = body(llvm_ir.IRBuilder(inner), counter)
        following = builder.add(counter, i64(step), name=f"{name}.next")
        counter.add_incoming(following, builder.block)
        builder.branch(head)
        return llvm_ir.IRBuilder(end)

    # -------------------------------------------------------------- vector loops
    def vector_lanes(self, fill: ir.Fill) -> int | None:
        """How many elements one step of the innermost loop computes (libmvec's vector width for the tree's
        widest float), or None to keep the loop scalar (no AVX2 and libmvec, a gathering tree, a strided
        innermost read, too short an innermost dimension)."""
        shape = fill.shape if fill.view is not None else fill.target.shape
        if not shape or (fill.view is not None and fill.view.strides[-1] != 1):
            return None
        lanes = self.tree_lanes(fill)
        return lanes if lanes is not None and shape[-1] >= lanes else None

    def tree_lanes(self, fill: ir.Fill) -> int | None:
        """`vector_lanes` whatever the length of the innermost dimension."""
        flavour = getattr(self, "vectors", None)
        shape = fill.shape if fill.view is not None else fill.target.shape
        if flavour is None or not shape or ir.can_fail(fill.tree):
            return None
        floats: set[str] = {fill.target.dtype} & {"f32", "f64"}
        if not vectorisable(fill.tree, len(shape) - 1, floats):
            return None
        return min((VECTOR_LANES[flavour][d] for d in floats), default=VECTOR_LANES[flavour]["f64"])

    def vector_fill(self, builder: llvm_ir.IRBuilder, fill: ir.Fill, lanes: int) -> llvm_ir.IRBuilder:
        """The innermost dimension in steps of `lanes` (vector loads, libmvec math, one vector store), the
        elements left over one at a time."""
        target, region = fill.target, fill.view
        shape = fill.shape if region is not None else target.shape
        pointer = self.pointers[target.name]
        n = shape[-1]
        whole = n - n % lanes

        def position(builder, index):
            if region is None:
                return self.linear(builder, index, target.shape)
            return self.position(builder, self.operand(region.offset), index, region.strides)

        def row(builder, outer):
            def vector_step(builder, i):
                builder, value = self.vector_tree(builder, fill.tree, [*outer, i], lanes)
                self.store_vector(builder, pointer, position(builder, [*outer, i]), target.dtype, value)
                return builder

            def scalar_step(builder, i):
                builder, value = self.tree(builder, fill.tree, [*outer, i])
                self.store_element(builder, pointer, position(builder, [*outer, i]), target.dtype, value)
                return builder

            builder = self.counted(builder, 0, whole, lanes, vector_step, "fill.vector")
            if whole == n:  # no elements left over: no remainder loop for LLVM to read and delete
                return builder
            return self.counted(builder, whole, n, 1, scalar_step, "fill.rest")

        return self.loops(builder, shape[:-1], row, "fill")

    def vector_tree(self, builder: llvm_ir.IRBuilder, tree, index: list, lanes: int):
        """`lanes` consecutive elements of the tree along the last dimension, from `index` on."""
        i64 = TYPES["i64"]
        last = len(index) - 1
        match tree:
            case ir.Read(buffer=buffer, offset=offset, strides=strides):
                position = self.position(builder, self.operand(offset), index, strides)
                at = builder.gep(self.pointers[buffer.name], [position])
                if strides[last] == 0:
                    return builder, self.splat(builder, self.load_element(builder, at, i64(0), buffer.dtype), lanes)
                kind = llvm_ir.VectorType(storage_type(buffer.dtype), lanes)
                value = builder.load(builder.bitcast(at, kind.as_pointer()), align=ir.ITEM_BYTES[buffer.dtype])
                if buffer.dtype == "bool":
                    value = builder.trunc(value, llvm_ir.VectorType(TYPES["bool"], lanes))
                return builder, value
            case ir.Index(axis=axis):
                if axis != last:
                    return builder, self.splat(builder, index[axis], lanes)
                steps = llvm_ir.Constant(llvm_ir.VectorType(i64, lanes), [i64(k) for k in range(lanes)])
                return builder, builder.add(self.splat(builder, index[axis], lanes), steps)
            case ir.Splat(value=value):
                return builder, self.splat(builder, self.operand(value), lanes)
            case ir.Apply(op=op, dtype=dtype, args=args):
                values = []
                for arg in args:
                    builder, value = self.vector_tree(builder, arg, index, lanes)
                    values.append(value)
                return builder, self.apply(builder, op, dtype, [ir.tree_dtype(a) for a in args], values, lanes)
        raise AssertionError(tree)

    def splat(self, builder: llvm_ir.IRBuilder, value, lanes: int) -> llvm_ir.Value:
        kind = llvm_ir.VectorType(value.type, lanes)
        single = builder.insert_element(llvm_ir.Constant(kind, llvm_ir.Undefined), value, llvm_ir.IntType(32)(0))
        mask = llvm_ir.Constant(llvm_ir.VectorType(llvm_ir.IntType(32), lanes), [0] * lanes)
        return builder.shuffle_vector(single, llvm_ir.Constant(kind, llvm_ir.Undefined), mask)

    def constant_of(self, dtype: str, value, lanes: int) -> llvm_ir.Constant:
        single = TYPES[dtype](value)
        return single if lanes == 1 else llvm_ir.Constant(llvm_ir.VectorType(TYPES[dtype], lanes), [single] * lanes)

    def vector_math(self, builder: llvm_ir.IRBuilder, name: str, dtype: str, args: list, lanes: int):
        """The elementwise built-ins on vectors: libmvec's `_ZGV<isa>N<lanes>v_<name>` for the
        transcendental ones, LLVM's vector intrinsics for the rest."""
        kind = llvm_ir.VectorType(TYPES[dtype], lanes)
        if name in LIBMVEC:
            suffix = "f" if dtype == "f32" else ""
            symbol = f"_ZGV{MVEC_ISA[dtype, lanes]}N{lanes}v_{name}{suffix}"
            return builder.call(self.libm(symbol, kind), args)
        if name == "sigmoid":
            x = args[0]
            magnitude = self.vector_math(builder, "abs", dtype, [x], lanes)
            e = self.vector_math(builder, "exp", dtype, [builder.fneg(magnitude)], lanes)
            one = self.constant_of(dtype, 1.0, lanes)
            inverse = builder.fdiv(one, builder.fadd(one, e))
            positive = builder.fcmp_ordered(">=", x, self.constant_of(dtype, 0.0, lanes))
            return builder.select(positive, inverse, builder.fmul(e, inverse))
        if name in ROUNDING or name == "sign":
            return self.step(builder, name, dtype, args[0], lanes)
        integer = dtype in ir.INTEGER_DTYPES
        suffix = f"v{lanes}{dtype}"
        if name in ("sqrt", "pow"):
            return builder.call(self.libm(f"llvm.{name}.{suffix}", kind, arity=len(args)), args)
        if name == "abs":
            if integer:
                absolute = self.c_function(f"llvm.abs.{suffix}", kind, [kind, TYPES["bool"]])
                return builder.call(absolute, [args[0], TYPES["bool"](0)])
            return builder.call(self.libm(f"llvm.fabs.{suffix}", kind), args)
        if name == "relu":
            args = [args[0], self.constant_of(dtype, 0 if integer else 0.0, lanes)]
            name = "maximum"
        if integer:
            keep = builder.icmp_signed(">" if name == "maximum" else "<", args[0], args[1])
            return builder.select(keep, args[0], args[1])
        return builder.call(self.libm(f"llvm.{name}.{suffix}", kind, arity=2), args)

    def linear(self, builder, index: list, shape: tuple[int, ...]) -> llvm_ir.Value:
        return self.position(builder, TYPES["i64"](0), index, ir.contiguous(shape))

    def position(self, builder, offset: llvm_ir.Value, index: list, strides: tuple[int, ...]) -> llvm_ir.Value:
        """`offset + sum(index[d] * strides[d])`, made once per block: the reads of a tree over same-shaped
        buffers share it (LLVM merges such copies anyway; made once, they are less IR to build and read)."""
        made = ("constant", offset.constant) if isinstance(offset, llvm_ir.Constant) else ("value", id(offset))
        key = (id(builder.block), made, *map(id, index), strides)
        known = self.positions.get(key)
        if known is not None:
            return known[0]
        i64 = TYPES["i64"]
        value = offset
        for i, stride in zip(index, strides, strict=True):
            if stride:
                term = i if stride == 1 else builder.mul(i, i64(stride))
                zero = isinstance(value, llvm_ir.Constant) and value.constant == 0
                value = term if zero else builder.add(value, term)
        self.positions[key] = (value, builder.block, offset, tuple(index))  # kept alive: their ids stay theirs
        return value

    def load_element(self, builder, pointer, position, dtype: str) -> llvm_ir.Value:
        value = builder.load(builder.gep(pointer, [position]))
        return builder.trunc(value, TYPES["bool"]) if dtype == "bool" else value

    def store_element(self, builder, pointer, position, dtype: str, value) -> None:
        if dtype == "bool":
            value = builder.zext(value, BYTE)
        builder.store(value, builder.gep(pointer, [position]))

    def store_vector(self, builder, pointer, position, dtype: str, value) -> None:
        """`value`, a vector, stored from element `position` on (bools as bytes)."""
        if dtype == "bool":
            value = builder.zext(value, llvm_ir.VectorType(BYTE, value.type.count))
        at = builder.bitcast(builder.gep(pointer, [position]), value.type.as_pointer())
        builder.store(value, at, align=ir.ITEM_BYTES[dtype])

    def taken(self, builder, index_value, size: int, site: int | None, name: str):
        """An index of a `gather` or `scatter_add`: negative ones count from the end; out of range fails (with
        `site` None, the indices were checked before: all of them in -size..size, only wrapped)."""
        i64 = TYPES["i64"]
        negative = builder.icmp_signed("<", index_value, i64(0))
        wrapped = builder.select(negative, builder.add(index_value, i64(size)), index_value)
        if site is None:
            return builder, wrapped
        outside = builder.or_(builder.icmp_signed("<", wrapped, i64(0)), builder.icmp_signed(">=", wrapped, i64(size)))
        builder.store(builder.bitcast(index_value, TYPES["f64"]), self.module.get_global("dl.value"))
        return self.fail_unless(builder, outside, site, name), wrapped

    # -------------------------------------------------------------- trees
    def tree(self, builder: llvm_ir.IRBuilder, tree, index: list):
        """The value of an elementwise tree at `index`; returns the builder after it (a `Take` may fail)."""
        match tree:
            case ir.Read(buffer=buffer, offset=offset, strides=strides):
                position = self.position(builder, self.operand(offset), index, strides)
                return builder, self.load_element(builder, self.pointers[buffer.name], position, buffer.dtype)
            case ir.Index(axis=axis):
                return builder, index[axis]
            case ir.Splat(value=value):
                return builder, self.operand(value)
            case ir.Take():
                builder, chosen = self.tree(builder, tree.index, index)
                builder, wrapped = self.taken(builder, chosen, tree.size, tree.site, "gather")
                position = self.position(builder, self.operand(tree.offset), index, tree.strides)
                position = builder.add(position, builder.mul(wrapped, TYPES["i64"](tree.stride)))
                return builder, self.load_element(builder, self.pointers[tree.buffer.name], position, tree.buffer.dtype)
            case ir.Apply(op=op, dtype=dtype, args=args):
                values = []
                for arg in args:
                    builder, value = self.tree(builder, arg, index)
                    values.append(value)
                if op == "pow" and dtype in ir.INTEGER_DTYPES:  # wraps around, as numpy's integer power does
                    builder, value, _ = integer_power(builder, *values, "power")
                    return builder, value
                return builder, self.apply(builder, op, dtype, [ir.tree_dtype(a) for a in args], values)
        raise AssertionError(tree)

    def apply(self, builder, op: str, dtype: str, dtypes: list[str], values: list, lanes: int = 1) -> llvm_ir.Value:
        floating = dtype in ("f32", "f64")
        if op in ("floordiv", "mod"):
            return self.floor_divmod(builder, op, dtype, *values)
        if op in ("add", "sub", "mul", "div"):
            if floating:
                return {"add": builder.fadd, "sub": builder.fsub, "mul": builder.fmul, "div": builder.fdiv}[op](*values)
            return {"add": builder.add, "sub": builder.sub, "mul": builder.mul}[op](*values)
        if lanes > 1 and (op in UNARY_MATH or op in ("pow", "maximum", "minimum")):
            return self.vector_math(builder, op, dtype, values, lanes)
        if op == "pow":
            return builder.call(self.module.declare_intrinsic("llvm.pow", [TYPES[dtype]]), values)
        if op == "neg":
            return builder.fneg(values[0]) if floating else builder.sub(self.constant_of(dtype, 0, lanes), values[0])
        if op in COMPARE_OPS:
            symbol, operand = COMPARE_OPS[op], dtypes[0]
            if operand in ("f32", "f64"):
                if symbol == "!=":
                    return builder.fcmp_unordered(symbol, *values)
                return builder.fcmp_ordered(symbol, *values)
            if operand == "bool":
                return builder.icmp_unsigned(symbol, *values)
            return builder.icmp_signed(symbol, *values)
        if op == "not":
            return builder.xor(values[0], self.constant_of("bool", 1, lanes))
        if op == "and":
            return builder.and_(*values)
        if op == "or":
            return builder.or_(*values)
        if op == "select":
            return builder.select(*values)
        if op == "convert":
            return self.convert_value(builder, values[0], dtypes[0], dtype, lanes)
        return self.math_of(builder, op, dtype, values, op)

    def floor_divmod(self, builder, op: str, dtype: str, a, b) -> llvm_ir.Value:
        """numpy's `//` and `%` of one element (the divisor of integers was checked nonzero before): the
        quotient rounded toward minus infinity, the remainder with the divisor's sign. Floats follow numpy's
        divmod (fmod, then corrections; a zero divisor gives inf or nan)."""
        kind = TYPES[dtype]
        if dtype in ir.INTEGER_DTYPES:
            minus_one = builder.icmp_signed("==", b, kind(-1))
            divisor = builder.select(minus_one, kind(1), b)  # the minimum // -1 wraps, as numpy's does
            quotient = builder.sdiv(a, divisor)
            quotient = builder.select(minus_one, builder.sub(kind(0), a), quotient)
            remainder = builder.select(minus_one, kind(0), builder.srem(a, divisor))
            signs = builder.icmp_signed("<", builder.xor(remainder, b), kind(0))
            adjust = builder.and_(builder.icmp_signed("!=", remainder, kind(0)), signs)
            if op == "mod":
                return builder.select(adjust, builder.add(remainder, b), remainder)
            return builder.sub(quotient, builder.zext(adjust, kind))
        zero = kind(0.0)
        mod = builder.frem(a, b)
        by_zero = builder.fcmp_ordered("==", b, zero)
        copysign = self.libm(f"llvm.copysign.{dtype}", kind, arity=2)
        # mod: moved into the divisor's sign when it differs; an exact zero takes the divisor's sign
        differ = builder.xor(builder.fcmp_ordered("<", b, zero), builder.fcmp_ordered("<", mod, zero))
        nonzero = builder.fcmp_unordered("!=", mod, zero)
        moved = builder.and_(nonzero, differ)
        fixed_mod = builder.select(moved, builder.fadd(mod, b), mod)
        fixed_mod = builder.select(nonzero, fixed_mod, builder.call(copysign, [zero, b]))
        if op == "mod":
            return builder.select(by_zero, mod, fixed_mod)
        div = builder.fdiv(builder.fsub(a, mod), b)
        div = builder.select(moved, builder.fsub(div, kind(1.0)), div)
        floor = builder.call(self.module.declare_intrinsic("llvm.floor", [kind]), [div])
        floor = builder.select(
            builder.fcmp_ordered(">", builder.fsub(div, floor), kind(0.5)), builder.fadd(floor, kind(1.0)), floor
        )
        zero_div = builder.fcmp_ordered("==", div, zero)
        floor = builder.select(zero_div, builder.call(copysign, [zero, builder.fdiv(a, b)]), floor)
        return builder.select(by_zero, builder.fdiv(a, b), floor)

    def convert_value(self, builder, value, source: str, target: str, lanes: int = 1) -> llvm_ir.Value:
        """numpy's `astype` between the dtypes (a float to an integer truncates, an i64 to i32 wraps; no check,
        as numpy's); an i64 to a float goes through f64, as numpy converts a Python int."""
        kind = TYPES[target] if lanes == 1 else llvm_ir.VectorType(TYPES[target], lanes)
        if source == target:
            return value
        if target == "bool":
            if source in ("f32", "f64"):
                return builder.fcmp_unordered("!=", value, self.constant_of(source, 0.0, lanes))
            return builder.icmp_signed("!=", value, self.constant_of(source, 0, lanes))
        if target in ir.INTEGER_DTYPES:
            if source == "bool":
                return builder.zext(value, kind)
            if source in ir.INTEGER_DTYPES:
                return builder.sext(value, kind) if target == "i64" else builder.trunc(value, kind)
            return builder.fptosi(value, kind)
        if source == "bool" or source == "i32":
            return builder.uitofp(value, kind) if source == "bool" else builder.sitofp(value, kind)
        if source == "i64":
            wide_kind = TYPES["f64"] if lanes == 1 else llvm_ir.VectorType(TYPES["f64"], lanes)
            wide = builder.sitofp(value, wide_kind)
            return wide if target == "f64" else builder.fptrunc(wide, kind)
        return builder.fpext(value, kind) if target == "f64" else builder.fptrunc(value, kind)

    # -------------------------------------------------------------- reductions, products, scatters
    def reduce(self, builder: llvm_ir.IRBuilder, instruction: ir.Reduce) -> llvm_ir.IRBuilder:
        """The target starts at the identity; one pass over the tree's shape in row-major order folds
        each element into the target element it reduces to (cache-friendly for any axes)."""
        target, op, shape, axes = instruction.target, instruction.op, instruction.shape, instruction.axes
        pointer, dtype = self.pointers[target.name], target.dtype
        kind = TYPES[dtype]
        if op == "add":
            identity = kind(0.0) if dtype in ("f32", "f64") else kind(0)
        elif dtype in ("f32", "f64"):
            identity = kind(float("-inf") if op == "max" else float("inf"))
        else:
            minimum = INTEGER_MINIMUM[dtype]
            identity = kind(minimum if op == "max" else -minimum - 1)

        def initialise(builder, index):
            self.store_element(builder, pointer, self.linear(builder, index, target.shape), dtype, identity)
            return builder

        builder = self.loops(builder, target.shape, initialise, "reduce.start")
        kept = [d for d in range(len(shape)) if d not in axes]

        def fold(builder, index):
            builder, value = self.tree(builder, instruction.tree, index)
            value = self.convert_value(builder, value, ir.tree_dtype(instruction.tree), dtype)
            position = self.linear(builder, [index[d] for d in kept], target.shape)
            running = self.load_element(builder, pointer, position, dtype)
            self.store_element(builder, pointer, position, dtype, self.combine(builder, op, dtype, running, value))
            return builder

        return self.loops(builder, shape, fold, "reduce")

    def scan(self, builder: llvm_ir.IRBuilder, instruction: ir.Scan) -> llvm_ir.IRBuilder:
        """One pass in row-major order: each element is its tree's value plus the target's element before it
        along the axis (already written), or the value alone at the axis's first index."""
        target, axis = instruction.target, instruction.axis
        pointer, dtype, i64 = self.pointers[target.name], target.dtype, TYPES["i64"]
        stride = ir.contiguous(target.shape)[axis]

        def step(builder, index):
            builder, value = self.tree(builder, instruction.tree, index)
            value = self.convert_value(builder, value, ir.tree_dtype(instruction.tree), dtype)
            position = self.linear(builder, index, target.shape)
            first = builder.icmp_signed("==", index[axis], i64(0), name="scan.first")
            before = builder.select(first, position, builder.sub(position, i64(stride)))  # (a first reads itself)
            running = self.combine(builder, "add", dtype, self.load_element(builder, pointer, before, dtype), value)
            self.store_element(builder, pointer, position, dtype, builder.select(first, value, running))
            return builder

        return self.loops(builder, target.shape, step, "scan")

    def sort(self, builder: llvm_ir.IRBuilder, instruction: ir.Sort) -> llvm_ir.IRBuilder:
        """Each row along the axis merge sorted bottom-up: its elements and their positions written into the first
        halves of the scratch rows, then runs of 1, 2, 4, ... merged pairwise from one half into the other (the
        passes are known when compiling, and so are the halves they read and write), then the positions of the
        half written last copied into the target's row."""
        target, axis, i64 = instruction.target, instruction.axis, TYPES["i64"]
        n, dtype = target.shape[axis], instruction.keys.dtype
        keys, positions = self.pointers[instruction.keys.name], self.pointers[instruction.positions.name]
        rows = tuple(1 if d == axis else size for d, size in enumerate(target.shape))

        def row(builder, index):
            def start(builder, k):
                builder, key = self.tree(builder, instruction.tree, [*index[:axis], k, *index[axis + 1 :]])
                self.store_element(builder, keys, k, dtype, key)
                self.store_element(builder, positions, k, "i64", k)
                return builder

            builder = self.counted(builder, 0, n, 1, start, "sort.start")
            half, width = 0, 1
            while width < n:
                builder = self.merge_runs(builder, instruction, half, width)
                half, width = 1 - half, 2 * width

            def copy(builder, k):
                position = self.linear(builder, [*index[:axis], k, *index[axis + 1 :]], target.shape)
                sorted_position = self.load_element(builder, positions, builder.add(k, i64(half * n)), "i64")
                self.store_element(builder, self.pointers[target.name], position, "i64", sorted_position)
                return builder

            return self.counted(builder, 0, n, 1, copy, "sort.copy")

        return self.loops(builder, rows, row, "sort")

    def merge_runs(self, builder: llvm_ir.IRBuilder, instruction: ir.Sort, half: int, width: int):
        """One pass of `sort`: each pair of neighbouring runs of `width` elements in scratch half `half` merged into
        the other half from both ends at once (two independent chains of loads and compares for the processor to
        overlap): the front takes the first of the two candidates, the right one only when it strictly precedes,
        the back the last, the left one only when the right strictly precedes it, so ties keep their order and
        the sort is stable. The merged order being unique, the front's one step more (the middle element of an
        odd count) writes, for an even count, what the back wrote there."""
        i64, n = TYPES["i64"], instruction.target.shape[instruction.axis]

        def smaller(builder, a, b):
            return builder.select(builder.icmp_signed("<", a, b), a, b)

        def pair(builder, low):
            middle = smaller(builder, builder.add(low, i64(width)), i64(n))
            high = smaller(builder, builder.add(low, i64(2 * width)), i64(n))
            runs = (low, middle, high)
            steps = builder.lshr(builder.sub(high, low), i64(1), name="sort.steps")
            last_left = builder.sub(middle, i64(1))
            before = builder.block
            head = self.llvm_function.append_basic_block("sort.merge.head")
            body = self.llvm_function.append_basic_block("sort.merge.body")
            end = self.llvm_function.append_basic_block("sort.merge.end")
            builder.branch(head)
            builder = llvm_ir.IRBuilder(head)
            k = builder.phi(i64, name="sort.k")
            front = builder.phi(i64, name="sort.front")  # the left run's first element not taken from the front
            back = builder.phi(i64, name="sort.back")  # its last one not taken from the back
            for phi, start in ((k, i64(0)), (front, low), (back, last_left)):
                phi.add_incoming(start, before)
            builder.cbranch(builder.icmp_signed("<", k, steps), body, end)
            builder = llvm_ir.IRBuilder(body)
            front_next = self.merge_step(builder, instruction, half, runs, k, front, True)
            back_next = self.merge_step(builder, instruction, half, runs, k, back, False)
            k.add_incoming(builder.add(k, i64(1), name="sort.k.next"), builder.block)
            front.add_incoming(front_next, builder.block)
            back.add_incoming(back_next, builder.block)
            builder.branch(head)
            builder = llvm_ir.IRBuilder(end)
            self.merge_step(builder, instruction, half, runs, k, front, True)
            return builder

        return self.counted(builder, 0, n, 2 * width, pair, f"sort.pass.{width}")

    def merge_step(self, builder, instruction: ir.Sort, half: int, runs: tuple, k, left, from_front: bool):
        """The `k`th element written from the front (or the back) of a merge of the runs `low..middle` and
        `middle..high` of scratch half `half`, the left run's cursor at `left`; returns its next value."""
        i64, n = TYPES["i64"], instruction.target.shape[instruction.axis]
        keys, positions = self.pointers[instruction.keys.name], self.pointers[instruction.positions.name]
        dtype, (low, middle, high) = instruction.keys.dtype, runs
        source, destination = i64(half * n), i64((1 - half) * n)
        side = "front" if from_front else "back"
        if from_front:  # k taken: left - low of the left run, the rest of the right
            right = builder.sub(builder.add(middle, k), builder.sub(left, low), name=f"sort.{side}.right")
            left_in = builder.icmp_signed("<", left, middle)
            right_in = builder.icmp_signed("<", right, high)
            at = builder.add(destination, builder.add(low, k), name=f"sort.{side}.at")
        else:  # k taken: middle - 1 - left of the left run, the rest of the right
            taken_right = builder.sub(k, builder.sub(builder.sub(middle, i64(1)), left))
            right = builder.sub(builder.sub(high, i64(1)), taken_right, name=f"sort.{side}.right")
            left_in = builder.icmp_signed(">=", left, low)
            right_in = builder.icmp_signed(">=", right, middle)
            at = builder.add(destination, builder.sub(builder.sub(high, i64(1)), k), name=f"sort.{side}.at")
        # a run used up is read at `low` instead (in bounds; not chosen)
        at_left = builder.add(source, builder.select(left_in, left, low))
        at_right = builder.add(source, builder.select(right_in, right, low))
        left_key, right_key = (self.load_element(builder, keys, place, dtype) for place in (at_left, at_right))
        right_first = self.precedes(builder, right_key, left_key, dtype, instruction.descending)
        if from_front:  # the right one goes first only when it strictly precedes
            take_left = builder.not_(builder.and_(right_in, builder.or_(builder.not_(left_in), right_first)))
        else:  # the left one goes last only when the right strictly precedes it
            take_left = builder.and_(left_in, builder.or_(builder.not_(right_in), right_first))
        take_left.name = f"sort.{side}.take.left"
        chosen = builder.select(take_left, at_left, at_right)
        for scratch, kind in ((keys, dtype), (positions, "i64")):
            self.store_element(builder, scratch, at, kind, self.load_element(builder, scratch, chosen, kind))
        step = builder.zext(take_left, i64)
        return builder.add(left, step) if from_front else builder.sub(left, step)

    def precedes(self, builder, a, b, dtype: str, descending: bool) -> llvm_ir.Value:
        """Whether key `a` goes strictly before key `b`: smaller (larger, `descending`); a nan after every
        number ascending, before every number descending, nans and equal numbers (0.0 and -0.0) tied."""
        if dtype not in ("f32", "f64"):
            compare = builder.icmp_unsigned if dtype == "bool" else builder.icmp_signed
            return compare(">" if descending else "<", a, b)
        ordered = builder.fcmp_ordered(">" if descending else "<", a, b)
        a_nan, b_nan = builder.fcmp_unordered("uno", a, a), builder.fcmp_unordered("uno", b, b)
        nan_first = builder.and_(a_nan, builder.not_(b_nan)) if descending else builder.and_(builder.not_(a_nan), b_nan)
        return builder.or_(ordered, nan_first, name="sort.precedes")

    def combine(self, builder, op: str, dtype: str, running, value) -> llvm_ir.Value:
        kind = TYPES[dtype]
        if op == "add":
            return builder.fadd(running, value) if dtype in ("f32", "f64") else builder.add(running, value)
        if dtype in ("f32", "f64"):  # llvm.maximum/minimum propagate nan like numpy's max/min
            name = f"llvm.{'maximum' if op == 'max' else 'minimum'}.{'f64' if dtype == 'f64' else 'f32'}"
            return builder.call(self.libm(name, kind, arity=2), [running, value])
        keep = builder.icmp_signed(">" if op == "max" else "<", running, value)
        return builder.select(keep, running, value)

    def gemm(self, dtype: str) -> llvm_ir.Function:
        symbol = GEMM[dtype]
        existing = self.module.globals.get(symbol)
        if existing is not None:
            return existing
        i32, i64, kind = llvm_ir.IntType(32), TYPES["i64"], TYPES[dtype]
        pointer = kind.as_pointer()
        arguments = [i32, i32, i32, i64, i64, i64, kind, pointer, i64, pointer, i64, kind, pointer, i64]
        return llvm_ir.Function(self.module, llvm_ir.FunctionType(llvm_ir.VoidType(), arguments), symbol)

    def matmul(self, builder: llvm_ir.IRBuilder, instruction: ir.MatMul) -> llvm_ir.IRBuilder:
        i32, i64 = llvm_ir.IntType(32), TYPES["i64"]
        out, m, n, k = instruction.out, instruction.m, instruction.n, instruction.k
        kind = TYPES[out.dtype]
        operands = []
        for view, rows, columns in ((instruction.a, m, k), (instruction.b, k, n)):
            pointer = builder.gep(self.pointers[view.buffer.name], [self.operand(view.offset)])
            row_stride, column_stride = view.strides
            if column_stride == 1:
                operands.append((i32(NO_TRANSPOSE), pointer, i64(max(row_stride, columns, 1))))
            else:  # stored transposed: rows are the stride-1 direction
                operands.append((i32(TRANSPOSE), pointer, i64(max(column_stride, rows, 1))))
        (trans_a, a, lda), (trans_b, b, ldb) = operands
        beta = kind(1.0 if instruction.accumulate else 0.0)
        arguments = [i32(ROW_MAJOR), trans_a, trans_b, i64(m), i64(n), i64(k), kind(1.0), a, lda, b, ldb, beta]
        builder.call(self.gemm(out.dtype), [*arguments, self.pointers[out.name], i64(max(n, 1))])
        return builder

    def draw(self, builder: llvm_ir.IRBuilder, instruction: ir.Draw) -> llvm_ir.IRBuilder:
        """`fill_draws(kind, seeded, seed, target, count, dtype)` on the host (runtime/randomness.py), through
        the C function codegen/native.py makes of it."""
        i64 = TYPES["i64"]
        target = instruction.target
        arguments = [i64, i64, i64, BYTE.as_pointer(), i64, i64]
        function = self.c_function(DRAW, llvm_ir.VoidType(), arguments)
        address = builder.bitcast(self.pointers[target.name], BYTE.as_pointer())
        values = [
            i64(instruction.kind),
            *self.seed_arguments(instruction.seed),
            address,
            i64(target.size),
            i64(DTYPE_NUMBERS[target.dtype]),
        ]
        builder.call(function, values)
        return builder

    def seed_arguments(self, seed: ir.Operand | None) -> list[llvm_ir.Value]:
        """A host draw's `seeded, seed`: 0, 0 for the run's generator, else 1 and the seed."""
        i64 = TYPES["i64"]
        return [i64(0), i64(0)] if seed is None else [i64(1), self.operand(seed)]

    def sample(self, builder: llvm_ir.IRBuilder, instruction: ir.Sample) -> llvm_ir.IRBuilder:
        """`fill_samples(seeded, seed, logits, rows, categories, target)` on the host (runtime/randomness.py),
        failing at the instruction's site where it answers 1."""
        i64, byte_pointer = TYPES["i64"], BYTE.as_pointer()
        arguments = [i64, i64, byte_pointer, i64, i64, byte_pointer]
        function = self.c_function(SAMPLE, i64, arguments)
        values = [
            *self.seed_arguments(instruction.seed),
            builder.bitcast(self.pointers[instruction.logits.buffer.name], byte_pointer),
            i64(instruction.rows),
            i64(instruction.categories),
            builder.bitcast(self.pointers[instruction.target.name], byte_pointer),
        ]
        status = builder.call(function, values)
        failed = builder.icmp_signed("!=", status, i64(0), name="sample.failed")
        return self.fail_unless(builder, failed, instruction.site, "categorical")

    def scatter_add(self, builder: llvm_ir.IRBuilder, instruction: ir.ScatterAdd) -> llvm_ir.IRBuilder:
        target = instruction.target
        pointer = self.pointers[target.name]

        def add(builder, index):
            builder, chosen = self.tree(builder, instruction.index, index)
            builder, wrapped = self.taken(builder, chosen, instruction.size, instruction.site, "scatter")
            position = self.position(builder, TYPES["i64"](0), index, instruction.strides)
            position = builder.add(position, builder.mul(wrapped, TYPES["i64"](instruction.stride)))
            builder, update = self.tree(builder, instruction.updates, index)
            running = self.load_element(builder, pointer, position, target.dtype)
            total = self.apply(builder, "add", target.dtype, [target.dtype, target.dtype], [running, update])
            self.store_element(builder, pointer, position, target.dtype, total)
            return builder

        return self.loops(builder, instruction.shape, add, "scatter")


COMPARE_OPS = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


class FunctionEmitter(TensorEmission):
    """Emits one IR function into the module; sites are numbered from `site_base` in the global table.
    `loops`, shared by the module's emitters, holds the outlined loop nests made so far."""

    def __init__(
        self, module, declared, function: ir.Function, error, depth, site_base: int, loops: ModuleLoops
    ) -> None:
        self.module = module
        self.outlines = loops
        self.positions: dict[tuple, tuple] = {}  # index arithmetic made, by block (`position`)
        self.declared = declared
        self.function = function
        self.error = error
        self.depth = depth
        self.site_base = site_base
        self.llvm_function = declared[function.symbol]
        self.values: dict[str, llvm_ir.Value] = {}
        self.slots: dict[str, llvm_ir.AllocaInstr] = {}

    def emit(self) -> None:
        function = self.function
        prologue = self.prologue = self.llvm_function.append_basic_block("prologue")
        self.blocks = {b.label: self.llvm_function.append_basic_block(b.label) for b in function.blocks}
        self.block_order = {b.label: position for position, b in enumerate(function.blocks)}
        self.error_exit = self.llvm_function.append_basic_block("error.exit")
        builder = llvm_ir.IRBuilder(prologue)
        for variable in function.variables:
            self.slots[variable.name] = builder.alloca(TYPES[variable.dtype], name=variable.name)
        if function.specialised:
            self.slot_array = self.llvm_function.args[0]
            self.slot_array.name = "slots"
            if function.own_workspace is not None:
                self.allocate_workspace(builder, function.own_workspace[0])
            self.pointers = self.buffer_pointers(builder, function.buffers)
        for tape in function.tapes:
            for variable in (tape.address, tape.count, tape.capacity):
                builder.store(TYPES["i64"](0), self.slots[variable.name])
        for param, argument in zip(
            function.params, () if function.specialised else self.llvm_function.args, strict=True
        ):
            argument.name = param.name
            value = builder.trunc(argument, TYPES["bool"]) if param.dtype == "bool" else argument
            builder.store(value, self.slots[param.name])
        first = self.blocks[function.blocks[0].label]
        if function.own_workspace is not None:
            first = self.workspace_check(first)
        self.enter(builder, first)
        for block in function.blocks:
            self.current_label = block.label
            builder = llvm_ir.IRBuilder(self.blocks[block.label])
            for instruction in block.instructions:
                builder = self.instruction(builder, instruction)
            self.terminator(builder, block.terminator)
        builder = llvm_ir.IRBuilder(self.error_exit)
        self.leave(builder)
        self.free_tapes(builder)
        self.free_workspace(builder)
        if function.result == "unit":
            builder.ret_void()
        else:
            builder.ret(llvm_ir.Constant(boundary_type(function.result), 0))
        size = sum(len(b.instructions) for b in self.llvm_function.blocks) if function.specialised else 0
        if size > LARGE_FUNCTION and only_calls_loops(function, self.block_order):
            self.llvm_function.attributes.add("noinline")
            self.llvm_function.attributes.add("optnone")
        elif straight(function, self.block_order, self.llvm_function):
            self.outlines.tidy.add(function.symbol)

    # -------------------------------------------------------------- calls nesting and failure
    def enter(self, builder: llvm_ir.IRBuilder, first: llvm_ir.Block) -> None:
        """Count this call; past `MAX_DEPTH` nested calls, fail at the recursion site."""
        depth = builder.add(builder.load(self.depth, name="depth"), TYPES["i64"](1), name="depth.inside")
        builder.store(depth, self.depth)
        too_deep = builder.icmp_signed(">", depth, TYPES["i64"](MAX_DEPTH), name="too.deep")
        failing = self.llvm_function.append_basic_block("fail.recursion")
        builder.cbranch(too_deep, failing, first)
        failure = llvm_ir.IRBuilder(failing)
        failure.store(TYPES["i64"](self.site_base + len(self.function.sites) + 1), self.error)
        failure.branch(self.error_exit)

    def leave(self, builder: llvm_ir.IRBuilder) -> None:
        depth = builder.sub(builder.load(self.depth, name="depth"), TYPES["i64"](1), name="depth.outside")
        builder.store(depth, self.depth)

    def fail_unless(self, builder: llvm_ir.IRBuilder, failed: llvm_ir.Value, site: int, name: str):
        """Branch to a block reporting `site` when `failed`; returns a builder for the code after."""
        failing = self.llvm_function.append_basic_block(f"fail.{name}")
        going_on = self.llvm_function.append_basic_block(f"{name}.ok")
        builder.cbranch(failed, failing, going_on)
        failure = llvm_ir.IRBuilder(failing)
        failure.store(TYPES["i64"](self.site_base + site + 1), self.error)
        failure.branch(self.error_exit)
        return llvm_ir.IRBuilder(going_on)

    # -------------------------------------------------------------- instructions
    def operand(self, operand: ir.Operand) -> llvm_ir.Value:
        return constant(operand) if isinstance(operand, ir.Const) else self.values[operand.name]

    def instruction(self, builder: llvm_ir.IRBuilder, instruction: ir.Instruction) -> llvm_ir.IRBuilder:
        match instruction:
            case ir.Load(result=result, variable=variable):
                self.values[result.name] = builder.load(self.slots[variable.name], name=result.name)
            case ir.Store(variable=variable, value=value):
                builder.store(self.operand(value), self.slots[variable.name])
            case ir.Compare():
                self.values[instruction.result.name] = self.compare(builder, instruction)
            case ir.UnaryOp(result=result, op="not", operand=operand):
                self.values[result.name] = builder.xor(self.operand(operand), TYPES["bool"](1), name=result.name)
            case ir.UnaryOp(result=result, op="neg", operand=operand, site=site):
                zero = TYPES[result.dtype](0)
                if site is None and result.dtype in ir.INTEGER_DTYPES:  # wraps, as numpy's i32
                    self.values[result.name] = builder.sub(zero, self.operand(operand), name=result.name)
                    return builder
                if site is None:
                    self.values[result.name] = builder.fneg(self.operand(operand), name=result.name)
                    return builder
                return self.checked(builder, "ssub_with_overflow", result, zero, self.operand(operand), site)
            case ir.BinaryOp():
                return self.binary(builder, instruction)
            case ir.Convert():
                return self.convert(builder, instruction)
            case ir.MathCall():
                self.values[instruction.result.name] = self.math(builder, instruction)
            case ir.Call(result=result, function=symbol, args=args, site=site):
                if site is not None:
                    too_deep = builder.icmp_signed(">=", builder.load(self.depth), TYPES["i64"](MAX_DEPTH))
                    builder = self.fail_unless(builder, too_deep, site, f"call.{symbol.rpartition('::')[2]}.depth")
                return self.call(builder, result, symbol, args)
            case ir.CallSpecialised():
                return self.call_specialised(builder, instruction)
            case ir.LoadSlot(result=result, slot=slot):
                value = builder.load(self.slot_pointer(builder, slot, result.dtype), name=result.name)
                self.values[result.name] = builder.trunc(value, TYPES["bool"]) if result.dtype == "bool" else value
            case ir.StoreSlot(slot=slot, value=value):
                stored = self.operand(value)
                if value.dtype == "bool":
                    stored = builder.zext(stored, BYTE)
                builder.store(stored, self.slot_pointer(builder, slot, value.dtype))
            case _:
                return self.tensor_instruction(builder, instruction)
        return builder

    def compare(self, builder: llvm_ir.IRBuilder, instruction: ir.Compare) -> llvm_ir.Value:
        lhs, rhs, name, op = (
            self.operand(instruction.lhs),
            self.operand(instruction.rhs),
            instruction.result.name,
            instruction.op,
        )
        dtype = instruction.lhs.dtype
        if dtype in ("f64", "f32"):
            if op == "!=":  # true when either is nan, as in numpy
                return builder.fcmp_unordered(op, lhs, rhs, name=name)
            return builder.fcmp_ordered(op, lhs, rhs, name=name)
        if dtype == "bool":
            return builder.icmp_unsigned(op, lhs, rhs, name=name)
        return builder.icmp_signed(op, lhs, rhs, name=name)

    def checked(self, builder, method: str, result: ir.Temp, lhs, rhs, site: int) -> llvm_ir.IRBuilder:
        pair = getattr(builder, method)(lhs, rhs, name=f"{result.name}.checked")
        value = builder.extract_value(pair, 0, name=result.name)
        overflow = builder.extract_value(pair, 1, name=f"{result.name}.overflows")
        self.values[result.name] = value
        return self.fail_unless(builder, overflow, site, f"{result.name}.overflow")

    def binary(self, builder: llvm_ir.IRBuilder, instruction: ir.BinaryOp) -> llvm_ir.IRBuilder:
        result, op, site = instruction.result, instruction.op, instruction.site
        lhs, rhs = self.operand(instruction.lhs), self.operand(instruction.rhs)
        if result.dtype not in ir.INTEGER_DTYPES:
            if op == "pow":
                power = self.module.declare_intrinsic("llvm.pow", [TYPES[result.dtype]])
                self.values[result.name] = builder.call(power, [lhs, rhs], name=result.name)
            else:
                method = {"add": builder.fadd, "sub": builder.fsub, "mul": builder.fmul, "div": builder.fdiv}[op]
                self.values[result.name] = method(lhs, rhs, name=result.name)
            return builder
        if op in ("floordiv", "mod"):
            return self.floor_division(builder, instruction, lhs, rhs)
        if op == "pow":  # the exponent is known not to be negative (`lower.integer_power`)
            builder, self.values[result.name], overflow = integer_power(builder, lhs, rhs, result.name)
            if site is None:
                return builder
            return self.fail_unless(builder, overflow, site, f"{result.name}.overflow")
        if site is None:  # wraps (i32), or cannot overflow (a loop counter below its bound, an index times a stride)
            method = {"add": builder.add, "sub": builder.sub, "mul": builder.mul}[op]
            self.values[result.name] = method(lhs, rhs, name=result.name)
            return builder
        method = {"add": "sadd_with_overflow", "sub": "ssub_with_overflow", "mul": "smul_with_overflow"}[op]
        return self.checked(builder, method, result, lhs, rhs, site)

    def floor_division(self, builder, instruction: ir.BinaryOp, lhs, rhs) -> llvm_ir.IRBuilder:
        """Python's `//` and `%` (rounding toward minus infinity); division by zero fails at the site, and
        `minimum // -1` (out of range) at the next one, or wraps to the minimum when the instruction `wraps`
        (numpy's)."""
        result, op, site = instruction.result, instruction.op, instruction.site
        kind, name = TYPES[result.dtype], result.name
        builder = self.fail_unless(
            builder, builder.icmp_signed("==", rhs, kind(0), name="by.zero"), site, f"{name}.zero"
        )
        minus_one = builder.icmp_signed("==", rhs, kind(-1), name="by.minus.one")
        if op == "floordiv" and not instruction.wraps:
            smallest = builder.icmp_signed("==", lhs, kind(INTEGER_MINIMUM[result.dtype]), name="is.smallest")
            overflows = builder.and_(minus_one, smallest, name="quotient.overflows")
            builder = self.fail_unless(builder, overflows, site + 1, f"{name}.overflow")
        # x // -1 is -x (wrapping, where it may), x % -1 is 0: sdiv and srem by -1 can be undefined
        divisor = builder.select(minus_one, kind(1), rhs, name="divisor")
        remainder = builder.srem(lhs, divisor, name="remainder")
        signs_differ = builder.icmp_signed(
            "<", builder.xor(remainder, divisor, name="signs"), kind(0), name="signs.differ"
        )
        inexact = builder.icmp_signed("!=", remainder, kind(0), name="inexact")
        adjust = builder.and_(inexact, signs_differ, name="rounds.down")
        if op == "mod":
            moved = builder.add(remainder, divisor, name="remainder.moved")
            self.values[name] = builder.select(adjust, moved, remainder, name=name)
            return builder
        negated = builder.sub(kind(0), lhs, name="negated")
        quotient = builder.select(minus_one, negated, builder.sdiv(lhs, divisor, name="quotient"), name="quotient")
        self.values[name] = builder.sub(quotient, builder.zext(adjust, kind, name="adjustment"), name=name)
        return builder

    def convert(self, builder: llvm_ir.IRBuilder, instruction: ir.Convert) -> llvm_ir.IRBuilder:
        """`float`/`int` as the interpreter computes them on scalars (see `ir.Convert`)."""
        result, site = instruction.result, instruction.site
        source, target, name = instruction.operand.dtype, TYPES[result.dtype], result.name
        value = self.operand(instruction.operand)
        if source == "i32" and result.dtype == "i64":
            self.values[name] = builder.sext(value, target, name=name)
            return builder
        if source == "i32":  # numpy's cast of an i32: rounded once
            self.values[name] = builder.sitofp(value, target, name=name)
            return builder
        if result.dtype == "i64":
            if source == "bool":
                self.values[name] = builder.zext(value, target, name=name)
                return builder
            kind = TYPES[source]
            self.show_value(builder, value, source)
            finite = builder.fcmp_ordered("<", builder.call(self.fabs(kind), [value]), kind(float("inf")))
            builder = self.fail_unless(builder, builder.not_(finite, name="not.finite"), site, f"{name}.finite")
            low = builder.fcmp_ordered(">=", value, kind(-(2.0**63)), name="above.minimum")
            high = builder.fcmp_ordered("<", value, kind(2.0**63), name="below.limit")
            inside = builder.and_(low, high, name="in.range")
            builder = self.fail_unless(builder, builder.not_(inside, name="out.of.range"), site + 1, f"{name}.range")
            self.values[name] = builder.fptosi(value, target, name=name)
            return builder
        if source == "bool":
            self.values[name] = builder.uitofp(value, target, name=name)
        elif source == "i64":  # through f64, as numpy converts a Python int: f32 rounds the f64 again
            wide = builder.sitofp(value, TYPES["f64"], name=f"{name}.f64")
            self.values[name] = wide if result.dtype == "f64" else builder.fptrunc(wide, target, name=name)
        elif result.dtype == "f64":
            self.values[name] = builder.fpext(value, target, name=name)
        else:
            self.values[name] = builder.fptrunc(value, target, name=name)
        return builder

    def show_value(self, builder: llvm_ir.IRBuilder, value: llvm_ir.Value, dtype: str) -> None:
        """Store the value a failure will show in `dl.value` (as f64)."""
        wide = value if dtype == "f64" else builder.fpext(value, TYPES["f64"], name="shown")
        builder.store(wide, self.module.get_global("dl.value"))

    def fabs(self, kind: llvm_ir.Type) -> llvm_ir.Function:
        return self.module.declare_intrinsic("llvm.fabs", [kind])

    def math(self, builder: llvm_ir.IRBuilder, instruction: ir.MathCall) -> llvm_ir.Value:
        args = [self.operand(a) for a in instruction.args]
        return self.math_of(builder, instruction.name, instruction.result.dtype, args, instruction.result.name)

    def math_of(self, builder: llvm_ir.IRBuilder, name: str, dtype: str, args: list, result: str) -> llvm_ir.Value:
        """The elementwise built-in `name` of `args` (LLVM values of `dtype`)."""
        kind = TYPES[dtype]
        if name in INTRINSICS:
            return builder.call(self.module.declare_intrinsic(INTRINSICS[name], [kind]), args, name=result)
        if (name, dtype) in LIBM:
            return builder.call(self.libm(LIBM[name, dtype], kind), args, name=result)
        if name == "sigmoid":
            return self.sigmoid(builder, args[0], kind, result)
        if name == "softplus":
            return self.softplus(builder, args[0], kind, dtype, result)
        if name in ROUNDING or name == "sign":
            return self.step(builder, name, dtype, args[0], 1, result)
        integer = dtype in ir.INTEGER_DTYPES
        if name == "relu":
            args.append(kind(0) if integer else kind(0.0))
            name = "maximum"
        if name == "abs":
            if integer:  # llvm.abs takes a second operand: whether the minimum is poison (no: it stays)
                absolute = self.c_function(f"llvm.abs.{dtype}", kind, [kind, TYPES["bool"]])
                return builder.call(absolute, [args[0], TYPES["bool"](0)], name=result)
            return builder.call(self.module.declare_intrinsic("llvm.fabs", [kind]), args, name=result)
        if integer:
            op = ">" if name == "maximum" else "<"
            keep = builder.icmp_signed(op, args[0], args[1], name=f"{result}.first")
            return builder.select(keep, args[0], args[1], name=result)
        # llvm.maximum/minimum propagate nan like numpy's maximum/minimum
        intrinsic = self.libm(f"llvm.{name}.{'f64' if dtype == 'f64' else 'f32'}", kind, arity=2)
        return builder.call(intrinsic, args, name=result)

    def libm(self, name: str, kind: llvm_ir.Type, arity: int = 1) -> llvm_ir.Function:
        """A C function (or intrinsic llvmlite does not know) taking and returning `kind`, declared once."""
        existing = self.module.globals.get(name)
        if existing is not None:
            return existing
        return llvm_ir.Function(self.module, llvm_ir.FunctionType(kind, [kind] * arity), name)

    def step(self, builder: llvm_ir.IRBuilder, name: str, dtype: str, x, lanes: int, result: str = "") -> llvm_ir.Value:
        """`floor`, `ceil`, `round` (LLVM's intrinsics) or `sign` (1 above zero, -1 below, else 0.0 for a zero of
        either sign and nan for nan, as numpy's) of one element or a vector of `lanes`."""
        kind = TYPES[dtype] if lanes == 1 else llvm_ir.VectorType(TYPES[dtype], lanes)
        if name in ROUNDING:
            suffix = dtype if lanes == 1 else f"v{lanes}{dtype}"
            return builder.call(self.libm(f"{ROUNDING[name]}.{suffix}", kind), [x], name=result)
        zero, one, minus_one = (
            self.constant_of(dtype, v, lanes) for v in ((0, 1, -1) if dtype in ir.INTEGER_DTYPES else (0.0, 1.0, -1.0))
        )
        if dtype in ir.INTEGER_DTYPES:
            above, below, otherwise = builder.icmp_signed(">", x, zero), builder.icmp_signed("<", x, zero), zero
        else:  # x + 0.0: +0.0 for either zero (numpy's sign of -0.0 is 0.0), nan for nan
            above, below = builder.fcmp_ordered(">", x, zero), builder.fcmp_ordered("<", x, zero)
            otherwise = builder.fadd(x, zero)
        return builder.select(above, one, builder.select(below, minus_one, otherwise), name=result)

    def sigmoid(self, builder: llvm_ir.IRBuilder, x, kind, name: str) -> llvm_ir.Value:
        """The interpreter's formula: e = exp(-|x|); 1 / (1 + e) for x >= 0, e / (1 + e) below."""
        magnitude = builder.call(self.module.declare_intrinsic("llvm.fabs", [kind]), [x], name="magnitude")
        exponent = builder.call(
            self.module.declare_intrinsic("llvm.exp", [kind]),
            [builder.fneg(magnitude, name="minus.magnitude")],
            name="e",
        )
        inverse = builder.fdiv(kind(1.0), builder.fadd(kind(1.0), exponent, name="one.plus.e"), name="inverse")
        below = builder.fmul(exponent, inverse, name="e.times.inverse")
        positive = builder.fcmp_ordered(">=", x, kind(0.0), name="nonnegative")
        return builder.select(positive, inverse, below, name=name)

    def softplus(self, builder: llvm_ir.IRBuilder, x, kind, dtype: str, name: str) -> llvm_ir.Value:
        """The interpreter's formula: max(x, 0) + log1p(exp(-|x|))."""
        magnitude = builder.call(self.module.declare_intrinsic("llvm.fabs", [kind]), [x], name="magnitude")
        exponent = builder.call(
            self.module.declare_intrinsic("llvm.exp", [kind]),
            [builder.fneg(magnitude, name="minus.magnitude")],
            name="e",
        )
        tail = builder.call(self.libm(LIBM["log1p", dtype], kind), [exponent], name="log1p.e")
        positive = builder.call(self.libm(f"llvm.maximum.{dtype}", kind, arity=2), [x, kind(0.0)], name="positive")
        return builder.fadd(positive, tail, name=name)

    def call(self, builder: llvm_ir.IRBuilder, result: ir.Temp, symbol: str, args) -> llvm_ir.IRBuilder:
        values = []
        for arg in args:
            value = self.operand(arg)
            values.append(builder.zext(value, BYTE, name=f"{arg.dtype}.byte") if arg.dtype == "bool" else value)
        name = result.name if result is not None else f"call.{symbol.rpartition('::')[2]}"
        returned = builder.call(self.declared[symbol], values, name=name if result is not None else "")
        if result is not None and result.dtype == "bool":
            returned = builder.trunc(returned, TYPES["bool"], name=f"{result.name}.bool")
        if result is not None:
            self.values[result.name] = returned
        status = builder.load(self.error, name="error")
        failed = builder.icmp_signed("!=", status, TYPES["i64"](0), name="callee.failed")
        going_on = self.llvm_function.append_basic_block(f"{name}.ok")
        builder.cbranch(failed, self.error_exit, going_on)
        return llvm_ir.IRBuilder(going_on)

    # -------------------------------------------------------------- real calls of specialised functions
    def allocate_workspace(self, builder: llvm_ir.IRBuilder, size: int) -> None:
        """This call's own workspace (64-byte aligned, from `aligned_alloc`), in slot 0 for the buffers."""
        byte_pointer = BYTE.as_pointer()
        if size == 0:
            self.workspace = llvm_ir.Constant(byte_pointer, None)
        else:
            allocate = self.c_function("aligned_alloc", byte_pointer, [TYPES["i64"], TYPES["i64"]])
            self.workspace = builder.call(allocate, [TYPES["i64"](64), TYPES["i64"]((size + 63) // 64 * 64)])
            self.workspace.name = "workspace"
        builder.store(self.workspace, builder.gep(self.slot_array, [TYPES["i64"](0)]))

    def workspace_check(self, first: llvm_ir.Block) -> llvm_ir.Block:
        """A block failing when the workspace could not be allocated, else going on to `first`."""
        block = self.llvm_function.append_basic_block("workspace.check")
        if self.function.own_workspace[0] == 0:
            llvm_ir.IRBuilder(block).branch(first)
            return block
        builder = llvm_ir.IRBuilder(block)
        missing = builder.icmp_unsigned("==", self.workspace, llvm_ir.Constant(BYTE.as_pointer(), None))
        going_on = self.fail_unless(builder, missing, self.function.own_workspace[1], "workspace")
        going_on.branch(first)
        return block

    def free_workspace(self, builder: llvm_ir.IRBuilder) -> None:
        if self.function.own_workspace is not None and self.function.own_workspace[0]:
            builder.call(self.c_function("free", llvm_ir.VoidType(), [BYTE.as_pointer()]), [self.workspace])

    def call_specialised(self, builder: llvm_ir.IRBuilder, instruction: ir.CallSpecialised) -> llvm_ir.IRBuilder:
        """Fill a slot array for the callee (cells for scalars, in the prologue: a call in a loop reuses
        them), call it, and on its failure note this call in `dl.trace` and fail too."""
        i64, byte_pointer = TYPES["i64"], BYTE.as_pointer()
        callee = instruction.function.rpartition("::")[2].partition(".")[0]
        builder = self.stop_if_interrupted(builder)
        too_deep = builder.icmp_signed(">=", builder.load(self.depth, name="depth"), i64(MAX_DEPTH), name="too.deep")
        builder = self.fail_unless(builder, too_deep, instruction.site, f"call.{callee}.depth")
        entry = llvm_ir.IRBuilder(self.prologue)
        entry.position_at_start(self.prologue)
        array = entry.alloca(byte_pointer, size=i64(instruction.slots), name=f"slots.{callee}")
        cells = []
        for slot, leaf in instruction.arguments:
            if isinstance(leaf, ir.Read):
                pointer = builder.gep(self.pointers[leaf.buffer.name], [self.operand(leaf.offset)])
            else:
                pointer = entry.alloca(storage_type(leaf.dtype), name="argument")
                value = self.operand(leaf)
                builder.store(builder.zext(value, BYTE) if leaf.dtype == "bool" else value, pointer)
            builder.store(builder.bitcast(pointer, byte_pointer), builder.gep(array, [i64(slot)]))
        for slot, leaf in instruction.results:
            if isinstance(leaf, ir.Buffer):
                pointer = self.pointers[leaf.name]
            else:
                pointer = entry.alloca(storage_type(leaf.dtype), name=f"cell.{leaf.name}")
                cells.append((leaf, pointer))
            builder.store(builder.bitcast(pointer, byte_pointer), builder.gep(array, [i64(slot)]))
        builder.call(self.declared[instruction.function], [array])
        failed = builder.icmp_signed("!=", builder.load(self.error, name="error"), i64(0), name="callee.failed")
        failing = self.llvm_function.append_basic_block(f"call.{callee}.failed")
        going_on = self.llvm_function.append_basic_block(f"call.{callee}.ok")
        builder.cbranch(failed, failing, going_on)
        self.note_in_trace(llvm_ir.IRBuilder(failing), instruction.site)
        builder = llvm_ir.IRBuilder(going_on)
        for leaf, cell in cells:
            value = builder.load(cell, name=leaf.name)
            self.values[leaf.name] = builder.trunc(value, TYPES["bool"]) if leaf.dtype == "bool" else value
        return builder

    def note_in_trace(self, builder: llvm_ir.IRBuilder, site: int) -> None:
        """`dl.trace[count++] = site`, then out through the error exit: the host rebuilds the call stack."""
        i64 = TYPES["i64"]
        counter = self.module.get_global("dl.trace.count")
        count = builder.load(counter, name="trace.count")
        full = builder.icmp_signed(">=", count, i64(TRACE_CAPACITY - 1))
        position = builder.select(full, i64(TRACE_CAPACITY - 1), count, name="trace.position")
        place = builder.gep(self.module.get_global("dl.trace"), [i64(0), position], inbounds=True)
        builder.store(i64(self.site_base + site), place)
        builder.store(builder.add(position, i64(1)), counter)
        builder.branch(self.error_exit)

    def stop_if_interrupted(self, builder: llvm_ir.IRBuilder) -> llvm_ir.IRBuilder:
        """Fail with `INTERRUPTED` if the host was interrupted (Ctrl-C), else go on."""
        # Atomic, so that LLVM does not hoist the read out of a loop that writes no memory (it would never
        # see the host's write, from another thread); monotonic: no ordering is needed, only a fresh read.
        stopped = builder.load_atomic(self.module.get_global("dl.interrupt"), "monotonic", 8, name="interrupted")
        going_on = self.llvm_function.append_basic_block("not.interrupted")
        failing = self.llvm_function.append_basic_block("fail.interrupted")
        builder.cbranch(builder.icmp_signed("!=", stopped, TYPES["i64"](0)), failing, going_on)
        failure = llvm_ir.IRBuilder(failing)
        failure.store(TYPES["i64"](INTERRUPTED), self.error)
        failure.branch(self.error_exit)
        return llvm_ir.IRBuilder(going_on)

    def jumps_back(self, target: str, builder: llvm_ir.IRBuilder) -> bool:
        """Whether a jump goes to an IR block not after the one being emitted (a loop's back edge)."""
        return self.block_order[target] <= self.block_order[self.current_label]

    def terminator(self, builder: llvm_ir.IRBuilder, terminator: ir.Terminator) -> None:
        match terminator:
            case ir.Jump(target=target) if self.jumps_back(target, builder):
                # a loop's next iteration: stop here if the host was interrupted (Ctrl-C)
                self.stop_if_interrupted(builder).branch(self.blocks[target])
            case ir.Jump(target=target):
                builder.branch(self.blocks[target])
            case ir.Branch(condition=condition, then=then, otherwise=otherwise):
                builder.cbranch(self.operand(condition), self.blocks[then], self.blocks[otherwise])
            case ir.Return(value=None):
                self.leave(builder)
                self.free_tapes(builder)
                self.free_workspace(builder)
                builder.ret_void()
            case ir.Return(value=value):
                self.leave(builder)
                returned = self.operand(value)
                if value.dtype == "bool":
                    returned = builder.zext(returned, BYTE, name="result.byte")
                builder.ret(returned)
