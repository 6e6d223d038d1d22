"""The bridge between the fallback backend and native code: `compile_program(typed) -> Compiled`.

Lowers what it can (codegen/lower.py), JIT-compiles it (codegen/llvm.py), and gives the fallback backend
(the interpreter, through runtime/backend.py) one `CompiledBody` per compiled function (`Compiled.bodies`,
by id of the `FnDecl`): it converts the DL scalars in the frame (np.float64, np.float32, int, bool) to C
values, calls the native function through ctypes and converts the result back. The fallback runs every
other function, and calls compiled ones through these bodies; compiled functions call each other
directly. A failure reported by native code becomes the interpreter's diagnostic for the same mistake.
"""

from __future__ import annotations

import ctypes
import math
import weakref
from collections.abc import Callable
from dataclasses import field
from typing import Any

import numpy as np
from dl.codegen import ir
from dl.codegen.fusion import compile_kernels, fuse, unequal_shapes, vector_target
from dl.codegen.llvm import DRAW, GEMM, INTERRUPTED, SAMPLE, Native, compile_functions
from dl.codegen.lower import Lowered, Unsupported, lower
from dl.codegen.registry import specialise
from dl.codegen.values import NUMPY_DTYPES, NeedsStatic
from dl.lang.cache import cache_directory
from dl.lang.check import Typed
from dl.lang.record import record
from dl.runtime.backend import NOT_COMPILED, CompiledBody, Step, StructTypes
from dl.runtime.calls import RETURN, Function
from dl.runtime.errors import STACK, RunError, fail, recursion_error
from dl.runtime.interrupts import on_interrupt
from dl.runtime.randomness import fill_draws, fill_samples
from dl.runtime.threads import Threads, in_parallel, large_product, openblas, pieces
from dl.runtime.values import StructValue, format_value

C_TYPES = {
    "f64": ctypes.c_double,
    "f32": ctypes.c_float,
    "i64": ctypes.c_int64,
    "i32": ctypes.c_int32,
    "bool": ctypes.c_bool,
    "unit": None,
}
TO_C = {"f64": float, "f32": float, "i64": int, "i32": int, "bool": bool}
FROM_C = {"f64": np.float64, "f32": np.float32, "i64": int, "i32": np.int32, "bool": bool, "unit": lambda _: ()}


def shown_value(native, dtype: str) -> str:
    """The value a failing site stored in `dl.value`, as `print` shows it: an f64 (f32 widened), or the
    bits of an i64 (exact, where an f64 would round indices past 2**53)."""
    kind = ctypes.c_int64 if dtype == "i64" else ctypes.c_double
    return format_value(FROM_C[dtype](kind.from_address(native.value_address).value))


@record(frozen=True)
class Replacing:
    """A body compiled whole: it replaces the fallback's."""

    step: Step

    def around(self, fallback: Step, structs: StructTypes) -> Step:
        return self.step

    def direct(self, args: list) -> object:
        frame = [None, *args]
        return frame[0] if self.step(frame) is RETURN else ()


@record
class Compiled:
    """Native bodies for the fallback backend, and what was compiled or not, and why."""

    bodies: dict[int, CompiledBody]
    lowered: Lowered
    native: Native | None
    cached: bool = True  # whether the compile cache was used (looked in, and written on a miss)

    def explanation(self, reached: set[int] | None = None) -> str:
        """One line per function (of those in `reached`, if given), at its name: compiled, or interpreted and
        why; then where the native code came from."""
        lines = []
        for key, (decl, _) in self.lowered.declarations.items():
            if reached is not None and key not in reached:
                continue
            where = f"{decl.name_span}: `{decl.name}`"
            if key in self.lowered.functions:
                lines.append(f"{where} compiled")
            elif key in self.lowered.kernels:
                reduction = self.lowered.kernels[key].reduction
                reducing = f" reducing with `{reduction}`" if reduction else ""
                lines.append(f"{where} compiled: one fused elementwise loop{reducing}")
            elif key in self.lowered.specialised:
                lines.append(f"{where} compiled when called, for the shapes of its arguments")
            else:
                lines.append(f"{where} interpreted: {self.lowered.refused[key]}")
        if self.native is not None:
            count = len(self.lowered.functions)
            functions = f"{count} function{'s' if count != 1 else ''}"
            if self.native.from_cache:
                lines.append(f"native code for {functions}: loaded from the compile cache")
            elif self.cached:
                lines.append(f"native code for {functions}: compiled by LLVM, saved to the compile cache")
            else:
                lines.append(f"native code for {functions}: compiled by LLVM (--no-cache)")
        return "\n".join(lines)

    def specialisations(self) -> str:
        """What the functions compiled per argument layout did with the layouts they were called with."""
        lines, loaded, built = [], 0, 0
        for body in self.bodies.values():
            if isinstance(body, SpecialisingBody):
                lines.extend(body.explanation())
                loaded += body.loaded
                built += body.built
        if loaded or built:
            counts = [
                f"{n} loaded from the compile cache" if cached else f"{n} compiled by LLVM"
                for cached, n in ((True, loaded), (False, built))
                if n
            ]
            saved = ", saved to the compile cache" if built and self.cached else " (--no-cache)" if built else ""
            layouts = "layout" if loaded + built == 1 else "layouts"
            lines.append(f"native code for the {layouts} compiled when called: {', '.join(counts)}{saved}")
        return "\n".join(lines)


def compile_program(typed: Typed, cache: bool = True) -> Compiled:
    """Compile every function the lowering accepts; the others stay with the interpreter. With `cache`,
    object code is looked up in (and stored to) the compile cache (codegen/cache.py)."""
    lowered = lowered_program(typed)
    bodies = kernel_bodies(lowered)
    for key, (decl, path) in lowered.declarations.items():
        if key not in lowered.functions and key not in bodies:
            lowered.specialised.add(key)
            bodies[key] = SpecialisingBody(typed, decl, path, cache)
    if not lowered.functions:
        return Compiled(bodies, lowered, None, cache)
    directory = cache_directory() if cache else None
    native = compile_functions(list(lowered.functions.values()), cache=directory)
    LIVE.add(native)
    bodies.update({key: Replacing(native_body(function, native)) for key, function in lowered.functions.items()})
    return Compiled(bodies, lowered, native, cache)


def lowered_program(typed: Typed) -> Lowered:
    """The scalar functions lowered (codegen/lower.py); then each refused function taking tensors that is
    one elementwise expression fused into a kernel (codegen/fusion.py), the others keeping fusion's reason."""
    lowered = lower(typed)
    for key, (decl, path) in lowered.declarations.items():
        if key not in lowered.refused or not any(getattr(typed.type_of(p), "dims", ()) for p in decl.params):
            continue
        try:
            lowered.kernels[key] = fuse(typed, decl, path)
            del lowered.refused[key]
        except Unsupported as why:
            lowered.refused[key] = str(why)
    return lowered


def kernel_bodies(lowered: Lowered) -> dict[int, CompiledBody]:
    """Bodies calling the fused elementwise loops (codegen/fusion.py); not cached: they compile in ms."""
    if not lowered.kernels:
        return {}

    try:
        compiled = compile_kernels(list(lowered.kernels.values()))
    except RuntimeError as problem:  # llvmlite's report of an LLVM failure: the functions stay interpreted
        for key in list(lowered.kernels):
            lowered.refused[key] = f"fusion: LLVM could not compile the loop ({str(problem).splitlines()[0]})"
            del lowered.kernels[key]
        return {}
    return {key: Replacing(kernel_body(kernel, compiled)) for key, kernel in lowered.kernels.items()}


def kernel_body(kernel, compiled) -> Callable[[list], Any]:
    """The tensor ABI: every tensor made C-contiguous and passed by data pointer, the element count `n`
    first and the output (allocated here with numpy) second, scalars by value; all tensors of one shape.
    A reduction kernel's output is its one scalar; on an empty tensor `sum` is 0 without a call, and
    `mean`, `max`, `min` fail as the interpreter's do."""
    scalar = C_TYPES[kernel.dtype]
    numpy_dtype = np.float32 if kernel.dtype == "f32" else np.float64
    kinds = [ctypes.c_void_p if tensor else scalar for _, tensor in kernel.params]
    call = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p, *kinds)(compiled.addresses[kernel.symbol])
    count = len(kinds)

    item = np.dtype(numpy_dtype).itemsize
    tensors = [tensor for _, tensor in kernel.params]

    def piece(start: int, stop: int, out: int, args: list) -> Callable[[], None]:
        """The loop over elements start..stop of every tensor, writing at `out`."""
        moved = [a + start * item if tensor else a for a, tensor in zip(args, tensors, strict=True)]
        return lambda: call(stop - start, out, *moved)

    def body(frame: list) -> object:
        shape, args, keep = None, [], []
        for (name, tensor), value in zip(kernel.params, frame[1 : count + 1], strict=True):
            if not tensor:
                args.append(float(value))
                continue
            array = np.ascontiguousarray(value, dtype=numpy_dtype)
            if shape is None:
                shape = array.shape
            elif array.shape != shape:
                raise unequal_shapes(kernel, name, array.shape, shape)
            keep.append(array)
            args.append(address_of(array))
        size = int(np.prod(shape))
        ranges = pieces(size)  # one, or one per thread for a large tensor (runtime/threads.py)
        if kernel.reduction is None:
            out = np.empty(shape, dtype=numpy_dtype)
            base = data_address(out)
            in_parallel([piece(start, stop, base + start * item, args) for start, stop in ranges])
            frame[0] = out
            return RETURN
        if size == 0 and kernel.reduction != "sum":
            shown = f"{kernel.dtype}[{', '.join(map(str, shape))}]"
            raise fail("E0513", f"`{kernel.reduction}` of an empty tensor {shown}", kernel.reduction_span)
        partial = np.zeros(len(ranges), dtype=numpy_dtype)
        if size:
            base = data_address(partial)
            in_parallel([piece(start, stop, base + k * item, args) for k, (start, stop) in enumerate(ranges)])
        frame[0] = combined(kernel.reduction, partial, [stop - start for start, stop in ranges], numpy_dtype)
        return RETURN

    body.native = (call, compiled)  # keep the thunk and the engine alive
    return body


def combined(reduction: str, partial: np.ndarray, counts: list[int], dtype) -> object:
    """One reduction's result from those of its pieces (one piece: its own): sums added and means weighted
    by their pieces' sizes in f64, then rounded to `dtype`; maxima and minima as numpy takes them (a nan
    wins)."""
    if len(partial) == 1:
        return partial[0]
    if reduction == "max":
        return np.max(partial)
    if reduction == "min":
        return np.min(partial)
    wide = partial.astype(np.float64)
    if reduction == "mean":
        return dtype(np.dot(wide, counts) / sum(counts))
    return dtype(np.sum(wide))


LIVE: weakref.WeakSet = weakref.WeakSet()  # compiled modules, whose `dl.interrupt` Ctrl-C sets


def interrupt_compiled_code() -> None:
    """Ctrl-C: every compiled loop stops at its next iteration (called through runtime/interrupts.py)."""
    for native in list(LIVE):
        ctypes.c_int64.from_address(native.interrupt_address).value = 1


def resume_compiled_code() -> None:
    """After Ctrl-C stopped the program: clear every module's flag, also of those no loop of which saw it
    (their next call would stop at once otherwise)."""
    for native in list(LIVE):
        ctypes.c_int64.from_address(native.interrupt_address).value = 0


on_interrupt(interrupt_compiled_code, resume_compiled_code)


def stopped(native: Native) -> None:
    """Raise KeyboardInterrupt if compiled code stopped because of Ctrl-C (its flag is cleared)."""
    error = ctypes.c_int64.from_address(native.error_address)
    if error.value == INTERRUPTED:
        error.value = 0
        ctypes.c_int64.from_address(native.depth_address).value = 0
        ctypes.c_int64.from_address(native.interrupt_address).value = 0
        raise KeyboardInterrupt


def native_body(function: ir.Function, native: Native) -> Callable[[list], Any]:
    """An interpreter body (`body(frame)`, arguments in frame slots 1..n) calling the native function."""
    prototype = ctypes.CFUNCTYPE(C_TYPES[function.result], *(C_TYPES[p.dtype] for p in function.params))
    call = prototype(native.addresses[function.symbol])
    converters = tuple(TO_C[p.dtype] for p in function.params)
    result = FROM_C[function.result]
    count = len(converters)
    error = ctypes.c_int64.from_address(native.error_address)
    depth = ctypes.c_int64.from_address(native.depth_address)

    def body(frame: list) -> object:
        value = call(*[convert(argument) for convert, argument in zip(converters, frame[1 : count + 1], strict=True)])
        if error.value:
            stopped(native)
            site = native.sites[error.value - 1]
            error.value = 0
            depth.value = 0
            if site.frame is not None:  # a call nested too deep: as the interpreter reports it
                raise RunError(recursion_error([(site.frame, site.span)], site.span))
            message = site.message
            if site.shows is not None:
                message = message.replace("{value}", shown_value(native, site.shows))
            raise fail(site.code, message, site.span)
        frame[0] = result(value)
        return RETURN

    body.native = call  # kept alive with the body: ctypes frees the thunk with its last reference
    return body


# ------------------------------------------------------------------ specialised tensor functions

MAX_LAYOUTS = 8  # a function called with more argument layouts than this stays interpreted after them


def blas_symbols() -> str | None:
    """Make numpy's OpenBLAS `gemm` functions known to the JIT linker; None when they are, else why not."""
    global BLAS_PROBLEM
    if BLAS_PROBLEM is not False:
        return BLAS_PROBLEM
    import llvmlite.binding as binding

    library = openblas()
    if library is not None:
        try:
            for symbol in GEMM.values():
                binding.add_symbol(symbol, ctypes.cast(getattr(library, symbol), ctypes.c_void_p).value)
        except AttributeError:
            pass
        else:
            BLAS_PROBLEM = None
            return None
    BLAS_PROBLEM = "numpy's OpenBLAS (scipy-openblas64) was not found for matrix products"
    return BLAS_PROBLEM


BLAS_PROBLEM: str | bool | None = False

# `fill_draws` as a C function, kept alive for the process: compiled code draws through it (codegen/llvm.py)
DRAWS_FUNCTION = ctypes.CFUNCTYPE(
    None, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64
)(fill_draws)
SAMPLES_FUNCTION = ctypes.CFUNCTYPE(
    ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p
)(fill_samples)
DRAWS_KNOWN: list[bool] = []


def draw_symbol() -> None:
    """Make `fill_draws` and `fill_samples` known to the JIT linker under the names compiled code calls them
    by, once."""
    if not DRAWS_KNOWN:
        import sys

        import llvmlite.binding as binding

        binding.add_symbol(DRAW, ctypes.cast(DRAWS_FUNCTION, ctypes.c_void_p).value)
        binding.add_symbol(SAMPLE, ctypes.cast(SAMPLES_FUNCTION, ctypes.c_void_p).value)
        sys.unraisablehook = quiet_interrupted_draws(sys.unraisablehook)
        DRAWS_KNOWN.append(True)


def quiet_interrupted_draws(hook: Callable) -> Callable:
    """`hook`, except for a Ctrl-C that landed in `fill_draws` or `fill_samples` as compiled code called it:
    ctypes cannot pass an exception out of a callback and reports it as unraisable; the interrupt itself
    reaches the user where the waiting thread raises it (lang/nesting.py), and the compiled loops stop at their
    flag."""

    def quiet(unraisable) -> None:
        if unraisable.exc_type is KeyboardInterrupt and unraisable.object in (fill_draws, fill_samples):
            return
        hook(unraisable)

    return quiet


def tensor_target():
    """The host with all its features, and libmvec's vector width (codegen/fusion.py); a new target machine
    each time: an execution engine owns (and disposes of) the one it is made with."""

    return vector_target()


class Structs:
    """The fallback backend's struct types, for struct values built in compiled code."""

    def __init__(self, lookup: StructTypes | None) -> None:
        self.lookup = lookup
        self.seen: dict[int, object] = {}

    def kind(self, key: int) -> object:
        return self.seen[key]

    def declared(self, path: str, name: str) -> object:
        found = self.lookup(path, name) if self.lookup is not None else None
        if found is None:
            raise Unsupported(f"struct `{name}` is not known to the backend running the program")
        return found


@record
class Specialisation:
    """One compiled layout: the native entry point, its slot array (arguments, results, workspace) and the
    cells scalars pass through."""

    call: Callable
    native: Native
    slots: object
    cells: dict[int, np.ndarray]
    result: tuple
    workspace: np.ndarray
    places: list  # per argument leaf, in order: (slot, whether a tensor)
    outputs: list  # per result tensor: (slot, shape, numpy dtype)
    address: int  # of the slot array
    error: object  # dl.error of the module, as a ctypes int64
    blas: bool  # whether it multiplies matrices through OpenBLAS (runtime/threads.py)
    placed: list = field(default_factory=list)  # per argument leaf: the array whose address its slot holds
    # the small result tensors (`packed_outputs`), views of one block made per call: (its size in bytes, and
    # per tensor (slot, shape, numpy dtype, offset)); `outputs` are then the others
    packed: tuple = (0, ())


class SpecialisingBody:
    """The body of a function compiled per argument layout (codegen/specialize.py), falling back to the
    backend's own body for layouts it cannot compile. `around(fallback, structs)` gives the body."""

    def __init__(self, typed: Typed, decl, path: str, cache: bool) -> None:
        self.typed, self.decl, self.path, self.cache = typed, decl, path, cache
        self.loaded = self.built = 0  # layouts whose native code the compile cache had, and LLVM compiled
        self.compiled: dict[tuple, Specialisation | None] = {}
        self.reasons: dict[tuple, str] = {}
        self.structs: Structs | None = None
        self.static: set[int] = set()  # positions of integer parameters compiled in (shapes depend on them)
        self.quick: dict[tuple, Specialisation | None] = {}  # `quick_key` -> what `compiled` holds for it
        self.beyond = 0  # calls with a layout not compiled because MAX_LAYOUTS were

    def around(self, fallback: Step, structs: StructTypes) -> Step:
        self.structs = Structs(structs)
        count = len(self.decl.params)

        def body(frame: list) -> object:
            leaves: list = []
            key = self.quick_key(frame[1 : count + 1], leaves)
            entry = self.quick.get(key, False) if key is not None else False
            if entry is not False:  # a layout met before: no layout records made and hashed
                if entry is None:
                    return fallback(frame)
                frame[0] = self.run(entry, leaves)
                return RETURN
            leaves = []
            layout = self.layout(frame[1 : count + 1], leaves)
            entry = self.compiled.get(layout, False)
            if entry is False:
                if len(self.compiled) >= MAX_LAYOUTS:  # not kept: layouts beyond the limit are counted
                    self.beyond += 1
                    return fallback(frame)
                entry = self.specialise(layout)
                if entry is RETRY:  # an integer parameter is now part of the layout: compile for its value
                    return body(frame)
                self.compiled[layout] = entry
            if key is not None:
                self.quick[key] = entry
            if entry is None:
                return fallback(frame)
            frame[0] = self.run(entry, leaves)
            return RETURN

        return body

    def layout(self, arguments: list, leaves: list) -> tuple:
        """The arguments' layout; their tensors and scalars appended to `leaves` in slot order."""
        seen, static = self.structs.seen, self.static
        if static:
            return tuple(
                [
                    ir.StaticArgument(value) if k in static and value.__class__ is int else flatten(value, leaves, seen)
                    for k, value in enumerate(arguments)
                ]
            )
        return tuple([flatten(value, leaves, seen) for value in arguments])

    def quick_key(self, arguments: list, leaves: list) -> tuple | None:
        """A key for the arguments' layout made of plain tuples, dtypes and classes (`quick_key`), which the
        layouts met before are found by: cheaper to make and to hash than the layout itself, for an interpreted
        loop calling compiled code (a training step's tensors, each step). Their leaves appended to `leaves`."""
        static = self.static
        key = []
        for k, value in enumerate(arguments):
            if static and k in static and value.__class__ is int:
                key.append((STATIC, value))
                continue
            found = quick_key(value, leaves)
            if found is None:
                return None
            key.append(found)
        return tuple(key)

    def direct(self, args: list) -> object:
        """The call run natively if its layout is compiled already (see `CompiledBody.direct`)."""
        if self.structs is None:  # not installed in a backend yet
            return NOT_COMPILED
        leaves: list = []
        key = self.quick_key(args, leaves)
        entry = self.quick.get(key) if key is not None else None
        if entry is not None:
            return self.run(entry, leaves)
        leaves = []
        entry = self.compiled.get(self.layout(args, leaves))
        return NOT_COMPILED if entry is None else self.run(entry, leaves)

    def specialise(self, layout: tuple) -> Specialisation | None:

        try:
            lowered = specialise(self.typed, self.decl, self.path, layout, self.structs)
            functions = [lowered.function, *lowered.callees]
            uses_blas = any(isinstance(i, ir.MatMul) for f in functions for b in f.blocks for i in b.instructions)
            problem = blas_symbols() if uses_blas else None
            if problem is not None:
                raise Unsupported(problem)
            if any(isinstance(i, (ir.Draw, ir.Sample)) for f in functions for b in f.blocks for i in b.instructions):
                draw_symbol()
            target, vectors = tensor_target()
            directory = cache_directory() if self.cache else None
            # O2: O3 takes seconds on the large loop-nest functions inlining makes, for no faster code
            native = compile_functions(functions, target, directory, vectors, speed=2)
            LIVE.add(native)
            if native.from_cache:
                self.loaded += 1
            else:
                self.built += 1
        except NeedsStatic as need:
            if need.position not in self.static:
                self.static.add(need.position)
                return RETRY
            self.reasons[layout] = str(need)
            return None
        except Unsupported as reason:
            self.reasons[layout] = str(reason)
            return None
        except RuntimeError as problem:  # llvmlite's report of an LLVM failure
            self.reasons[layout] = f"LLVM could not compile it ({str(problem).splitlines()[0]})"
            return None
        except Exception as bug:  # a bug of the compiler: the program still runs, on the interpreter
            self.reasons[layout] = f"compiler bug: {type(bug).__name__}: {bug}"
            return None
        self.reasons[layout] = "compiled"
        slots = (ctypes.c_void_p * lowered.slots)()
        workspace = np.empty(lowered.workspace + 64, dtype=np.uint8)
        address = workspace.ctypes.data
        slots[0] = address + (-address % 64)
        cells: dict[int, np.ndarray] = {}
        places: list = []  # per argument leaf, in slot order (they take slots 1, 2, ...)
        arguments = [
            leaf
            for item in layout
            for leaf in ir.layout_leaves(item)
            if isinstance(leaf, (ir.TensorArgument, ir.ScalarArgument))
        ]
        for slot, leaf in enumerate(arguments, start=1):
            places.append((slot, isinstance(leaf, ir.TensorArgument)))
            if isinstance(leaf, ir.ScalarArgument):
                cells[slot] = np.zeros(1, dtype=NUMPY_DTYPES[leaf.dtype])
        outputs: list = []
        for leaf in ir.layout_leaves(lowered.result):
            if isinstance(leaf, ir.TensorResult):
                outputs.append((leaf.slot, leaf.shape, NUMPY_DTYPES[leaf.dtype]))
            elif isinstance(leaf, ir.ScalarResult):
                cells[leaf.slot] = np.zeros(1, dtype=NUMPY_DTYPES[leaf.dtype])
        for slot, cell in cells.items():
            slots[slot] = cell.ctypes.data
        call = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(native.addresses[lowered.function.symbol])
        error = ctypes.c_int64.from_address(native.error_address)
        packed, outputs = packed_outputs(outputs)
        return Specialisation(
            call,
            native,
            slots,
            cells,
            lowered.result,
            workspace,
            places,
            outputs,
            ctypes.addressof(slots),
            error,
            uses_blas,
            packed=packed,
        )

    def run(self, entry: Specialisation, leaves: list) -> object:
        """Call the native code with the arguments' leaves (in slot order, as `flatten` lists them)."""
        slots, cells, placed = entry.slots, entry.cells, entry.placed
        if len(placed) != len(leaves):
            placed[:] = [None] * len(leaves)
        copies = []  # made contiguous: kept alive until the call returns
        for index, ((slot, tensor), value) in enumerate(zip(entry.places, leaves, strict=True)):
            if tensor:
                if value is placed[index]:
                    continue  # the same array as at the last call (a model's weights): its address is in the slot
                if not value.flags.c_contiguous:
                    copies.append(np.ascontiguousarray(value))
                    slots[slot] = data_address(copies[-1])
                    placed[index] = None  # the copy is gone after the call
                    continue
                slots[slot] = address_of(value)
                placed[index] = value  # kept, so that its address stays its own
            else:
                cells[slot][0] = value
        outputs: dict[int, np.ndarray] = {}
        size, packed = entry.packed
        if packed:  # one allocation and one address for the small ones
            block = np.empty(size, dtype=np.uint8)
            base = data_address(block)
            for slot, shape, dtype, offset in packed:
                array = outputs[slot] = np.ndarray(shape, dtype, block, offset)
                slots[slot] = address = base + offset
                ADDRESSES[id(array)] = (weakref.ref(array), address)  # (passed back next call, as a step's state)
            if len(ADDRESSES) >= 4096:
                ADDRESSES.clear()
        for slot, shape, dtype in entry.outputs:
            array = np.empty(shape, dtype=dtype)
            outputs[slot] = array
            slots[slot] = data_address(array)
        if entry.blas and Threads.count > 1 and Threads.setter is not None:
            large_product(entry.call, entry.address)
        else:
            entry.call(entry.address)
        if entry.error.value:
            self.failed(entry)
        return build_result(entry.result, cells, outputs)

    def failed(self, entry: Specialisation) -> None:
        native = entry.native
        frames = unwound_calls(native)
        stopped(native)
        site = native.sites[entry.error.value - 1]
        entry.error.value = 0
        ctypes.c_int64.from_address(native.depth_address).value = 0
        if site.frame is not None:  # a real call nested too deep: as the interpreter reports it
            raise RunError(recursion_error([(site.frame, site.span)], site.span))
        message = site.message
        if site.shows is not None:
            message = message.replace("{value}", shown_value(native, site.shows))
        frames += site.inlined
        STACK.extend(frames)  # the calls active when it failed, inlined or not, for the call-stack note
        try:
            raise fail(site.code, message, site.span)
        finally:
            del STACK[len(STACK) - len(frames) :]

    def explanation(self) -> list[str]:
        lines = []
        for layout, reason in self.reasons.items():
            shown = ", ".join(describe_layout(item) for item in layout)
            verdict = "compiled" if reason == "compiled" else f"interpreted: {reason}"
            lines.append(f"{self.decl.name_span}: `{self.decl.name}`({shown}) {verdict}")
        if self.beyond:
            calls = "a call" if self.beyond == 1 else f"{self.beyond} calls"
            why = f"more than {MAX_LAYOUTS} layouts"
            compiled_in = [f"`{self.decl.params[k].name}`" for k in sorted(self.static)]
            if compiled_in:
                why += f" ({', '.join(compiled_in)} compiled in as a constant, each value a layout of its own)"
            lines.append(
                f"{self.decl.name_span}: `{self.decl.name}` interpreted in {calls} with other argument layouts: {why}"
            )
        return lines


def unwound_calls(native: Native) -> list[tuple[str, object]]:
    """The real calls between specialised functions a failure unwound through (`dl.trace`, innermost
    first), outermost first as (function, span of the call), each after the inlined calls it lies in: the
    interpreter's call stack entries."""
    if not native.trace_count_address:
        return []
    counter = ctypes.c_int64.from_address(native.trace_count_address)
    sites = (ctypes.c_int64 * counter.value).from_address(native.trace_address)
    counter.value = 0
    frames: list = []
    for k in reversed(list(sites)):
        frames += native.sites[k].inlined
        frames.append((native.sites[k].frame, native.sites[k].span))
    return frames


RETRY = object()  # `specialise` learned that an integer parameter must be compiled in: lay out again
NAMES = {
    np.dtype(np.float32): "f32",
    np.dtype(np.float64): "f64",
    np.dtype(np.int64): "i64",
    np.dtype(np.int32): "i32",
    np.dtype(np.bool_): "bool",
}


ADDRESSES: dict[int, tuple[weakref.ref, int]] = {}  # by id of an array: (it, its data's address)


SMALL_RESULT = 4096  # bytes: result tensors up to this size share a block, of at most PACKED bytes
PACKED = 65536


def packed_outputs(outputs: list) -> tuple[tuple, list]:
    """The result tensors (slot, shape, numpy dtype) split into those made as views of one block per call (their
    offsets in it, 64-byte aligned; the block's size) and the others, each an array of its own. A call returning a
    model's small tensors (biases, an optimizer's state, a loss) then allocates once and asks one address (the
    cost of an interpreted loop calling compiled code, per tensor), while a large result keeps no other alive."""
    packed, alone, offset = [], [], 0
    for slot, shape, dtype in outputs:
        size = math.prod(shape) * np.dtype(dtype).itemsize
        if size <= SMALL_RESULT and offset + size <= PACKED:
            packed.append((slot, shape, dtype, offset))
            offset += -(-size // 64) * 64
        else:
            alone.append((slot, shape, dtype))
    if len(packed) < 2:  # (one alone is as cheap)
        return (0, ()), outputs
    return (max(offset, 1), tuple(packed)), alone


def address_of(array: np.ndarray) -> int:
    """The address of an array's data. Arrays passed again and again (a model's weights) are looked up, by
    identity, while they live; the others are asked (`data_address`)."""
    found = ADDRESSES.get(id(array))
    if found is not None and found[0]() is array:
        return found[1]
    address = data_address(array)
    if len(ADDRESSES) >= 4096:
        ADDRESSES.clear()
    ADDRESSES[id(array)] = (weakref.ref(array), address)
    return address


def data_address(array: np.ndarray) -> int:
    """The address of a C-contiguous array's data: through a ctypes view of its buffer, a third of what
    numpy's `array.ctypes.data` costs; that for the arrays a writable buffer cannot be had from (read-only,
    empty)."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(array))
    except (TypeError, ValueError):
        return array.ctypes.data


def flatten(value, leaves: list, kinds: dict) -> ir.Layout:
    """The layout of an argument (codegen/ir.py); its tensors and scalars are appended to `leaves` in slot
    order and the struct types and functions it meets remembered in `kinds`. Scalars are run-time values:
    only their dtype is part of the layout."""
    cls = value.__class__
    if cls is np.ndarray:
        leaves.append(value)
        if value.ndim:
            return ir.TensorArgument(NAMES.get(value.dtype), value.shape)
        return ir.ScalarArgument(NAMES.get(value.dtype))
    scalar = SCALAR_CLASSES.get(cls)
    if scalar is not None:
        leaves.append(value)
        return scalar
    if cls is tuple:
        return ir.TupleLayout(tuple([flatten(item, leaves, kinds) for item in value]))
    if cls is str:
        return ir.TextLayout(value)
    if cls is Function and not value.captured:  # a function without captured values: compiled in
        kinds[id(value)] = value
        return ir.FunctionArgument(id(value), value.name)
    if cls is StructValue:
        return flatten_struct(value, leaves, kinds)
    return ir.OtherArgument(cls.__name__)


STATIC, TUPLE, TEXT, STRUCT = object(), object(), object(), object()  # (marks no dtype or class equals)


def quick_key(value, leaves: list) -> object:
    """`value`'s layout as a key of plain tuples, dtypes and classes (`CompiledBody.quick_key`), its leaves
    appended to `leaves` as `flatten` appends them; None for a value only `flatten` lays out (a function)."""
    cls = value.__class__
    if cls is np.ndarray:
        leaves.append(value)
        return (value.dtype, value.shape)
    if cls in SCALAR_CLASSES:
        leaves.append(value)
        return cls
    if cls is tuple:
        key = [TUPLE]
        for item in value:
            found = quick_key(item, leaves)
            if found is None:
                return None
            key.append(found)
        return tuple(key)
    if cls is StructValue:
        if value.flattened is None:  # its leaves and key, made once (its layout when `flatten` needs it)
            inner_leaves: list = []
            keys = [quick_key(item, inner_leaves) for item in value.values]
            key = None if None in keys else (STRUCT, id(value.type), *keys)
            value.flattened = (None, inner_leaves, None, key)
        _, inner_leaves, _, key = value.flattened
        if key is not None:
            leaves.extend(inner_leaves)
        return key
    if cls is str:
        return (TEXT, value)
    return None


def flatten_struct(value: StructValue, leaves: list, kinds: dict) -> ir.StructLayout:
    """A struct's layout, made once per struct value and kept on it: a struct value is immutable and so are
    its arrays' shapes and dtypes, and a model's weights are passed unchanged call after call (12 µs a call
    for the digits MLP's four tensors)."""
    if value.flattened is None or value.flattened[0] is None:
        inner_leaves: list = []
        inner_kinds: dict = {id(value.type): value.type}
        items = tuple([flatten(item, inner_leaves, inner_kinds) for item in value.values])
        key = quick_key(value, [])
        layout = ir.StructLayout(id(value.type), items, value.type.name)
        value.flattened = (layout, inner_leaves, inner_kinds, key)
    layout, inner_leaves, inner_kinds, _ = value.flattened
    leaves.extend(inner_leaves)
    kinds.update(inner_kinds)
    return layout


# The layouts of DL's scalars by their run-time class (i64 and bool are Python ints and bools).
SCALAR_CLASSES = {
    np.float32: ir.ScalarArgument("f32"),
    np.float64: ir.ScalarArgument("f64"),
    int: ir.ScalarArgument("i64"),
    np.int32: ir.ScalarArgument("i32"),
    bool: ir.ScalarArgument("bool"),
    np.bool_: ir.ScalarArgument("bool"),
}


def build_result(layout: ir.Layout, cells: dict, outputs: dict) -> object:
    """The run-time value a specialisation returned, from its result slots."""
    match layout:
        case ir.TensorResult(slot=slot):
            return outputs[slot]
        case ir.ScalarResult(slot=slot, dtype=dtype):
            value = cells[slot][0]
            return int(value) if dtype == "i64" else bool(value) if dtype == "bool" else value
        case ir.TupleLayout(items=items):
            return tuple(build_result(item, cells, outputs) for item in items)
        case ir.StructLayout(kind=kind, items=items):
            return StructValue(kind, tuple(build_result(item, cells, outputs) for item in items))
        case ir.TextLayout(text=text):
            return text
    return ()


def describe_layout(layout: ir.Layout) -> str:
    match layout:
        case ir.TensorArgument(dtype=dtype, shape=shape):
            return f"{dtype}[{', '.join(map(str, shape))}]"
        case ir.ScalarArgument(dtype=dtype):
            return str(dtype)
        case ir.TupleLayout(items=items):
            return f"({', '.join(describe_layout(item) for item in items)})"
        case ir.StructLayout(name=name):
            return name
        case ir.TextLayout():
            return "str"
        case ir.StaticArgument(value=value):
            return f"i64 = {value}"
        case ir.FunctionArgument(name=name):
            return f"fn {name}"
        case ir.OtherArgument(class_name=class_name):
            return class_name
    return str(layout)
