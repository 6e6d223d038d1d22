"""The bridge between the interpreter and native code: `compile_program(typed) -> Backend`.

Lowers what it can (codegen/lower.py), JIT-compiles it (codegen/llvm.py), and gives the interpreter one
body per compiled function (`Backend.bodies`, by id of the `FnDecl`): it converts the DL scalars in the
frame (np.float64, np.float32, int, bool) to C values, calls the native function through ctypes and
converts the result back. The interpreter runs every other function, and calls compiled ones through
these bodies; compiled functions call each other directly. A failure reported by native code becomes the
interpreter's diagnostic for the same mistake.
"""

from __future__ import annotations

import ctypes
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from dl.codegen import ir
from dl.codegen.cache import cache_directory
from dl.codegen.llvm import INTERRUPTED, Native, compile_functions
from dl.codegen.lower import Lowered, lower
from dl.codegen.specialize import NUMPY_DTYPES
from dl.interp.runtime import RETURN, STACK, Function, RunError, fail, recursion_error
from dl.interp.values import format_value
from dl.lang.check import Typed
from dl.lang.nesting import when_interrupted

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


@dataclass
class Backend:
    """Native bodies for the interpreter, and what was compiled or not, and why."""

    bodies: dict[int, Callable[[list], Any]]
    lowered: Lowered
    native: Native | None
    cached: bool = True  # whether the compile cache was used (looked in, and written on a miss)

    def explanation(self) -> str:
        """One line per function: compiled, or interpreted and why; then where the native code came from."""
        lines = []
        for key, (decl, path) in self.lowered.declarations.items():
            if key in self.lowered.functions:
                lines.append(f"{path}: `{decl.name}` compiled")
            elif key in self.lowered.kernels:
                reduction = self.lowered.kernels[key].reduction
                reducing = f" reducing with `{reduction}`" if reduction else ""
                lines.append(f"{path}: `{decl.name}` compiled: one fused elementwise loop{reducing}")
            elif key in self.lowered.specialised:
                lines.append(f"{path}: `{decl.name}` compiled when called, for the shapes of its arguments")
            else:
                lines.append(f"{path}: `{decl.name}` interpreted: {self.lowered.refused[key]}")
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
        lines = []
        for body in self.bodies.values():
            if isinstance(body, SpecialisingBody):
                lines.extend(body.explanation())
        return "\n".join(lines)


def compile_program(typed: Typed, cache: bool = True) -> Backend:
    """Compile every function the lowering accepts; the others stay with the interpreter. With `cache`,
    object code is looked up in (and stored to) the compile cache (codegen/cache.py)."""
    lowered = lower(typed)
    bodies = kernel_bodies(lowered)
    for key, (decl, path) in lowered.declarations.items():
        if key not in lowered.functions and key not in bodies:
            lowered.specialised.add(key)
            bodies[key] = SpecialisingBody(typed, decl, path, cache)
    if not lowered.functions:
        return Backend(bodies, lowered, None, cache)
    directory = cache_directory() if cache else None
    native = compile_functions(list(lowered.functions.values()), cache=directory)
    LIVE.add(native)
    bodies.update({key: native_body(function, native) for key, function in lowered.functions.items()})
    return Backend(bodies, lowered, native, cache)


def kernel_bodies(lowered: Lowered) -> dict[int, Callable[[list], Any]]:
    """Bodies calling the fused elementwise loops (codegen/fusion.py); not cached: they compile in ms."""
    if not lowered.kernels:
        return {}
    from dl.codegen.fusion import compile_kernels

    try:
        compiled = compile_kernels(list(lowered.kernels.values()))
    except RuntimeError as problem:  # llvmlite's report of an LLVM failure: the functions stay interpreted
        for key in list(lowered.kernels):
            lowered.refused[key] = f"fusion: LLVM could not compile the loop ({str(problem).splitlines()[0]})"
            del lowered.kernels[key]
        return {}
    return {key: kernel_body(kernel, compiled) for key, kernel in lowered.kernels.items()}


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
                shown = "x".join(map(str, array.shape)) or "scalar"
                raise fail(
                    "E0513",
                    f"`{kernel.name}`: tensor `{name}` has shape [{shown}], not the [{'x'.join(map(str, shape))}] "
                    "of the tensor before it (a fused elementwise function does not broadcast)",
                    kernel.span,
                )
            keep.append(array)
            args.append(array.ctypes.data)
        if kernel.reduction is None:
            out = np.empty(shape, dtype=numpy_dtype)
            call(out.size, out.ctypes.data, *args)
            frame[0] = out
            return RETURN
        size = int(np.prod(shape))
        if size == 0 and kernel.reduction != "sum":
            shown = f"{kernel.dtype}[{', '.join(map(str, shape))}]"
            raise fail("E0513", f"`{kernel.reduction}` of an empty tensor {shown}", kernel.reduction_span)
        out = np.zeros((), dtype=numpy_dtype)
        if size:
            call(size, out.ctypes.data, *args)
        frame[0] = out[()]
        return RETURN

    body.native = (call, compiled)  # keep the thunk and the engine alive
    return body


LIVE: weakref.WeakSet = weakref.WeakSet()  # compiled modules, whose `dl.interrupt` Ctrl-C sets


def interrupt_compiled_code() -> None:
    """Ctrl-C: every compiled loop stops at its next iteration (`dl.lang.nesting.with_room` calls this)."""
    for native in list(LIVE):
        ctypes.c_int64.from_address(native.interrupt_address).value = 1


when_interrupted(interrupt_compiled_code)


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
    shown = ctypes.c_double.from_address(native.value_address)

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
                message = message.replace("{value}", format_value(FROM_C[site.shows](shown.value)))
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
    import glob
    import os

    import llvmlite.binding as binding
    from dl.codegen.llvm import GEMM

    directory = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    for path in sorted(glob.glob(os.path.join(directory, "libscipy_openblas*"))):
        try:
            library = ctypes.CDLL(path)
            for symbol in GEMM.values():
                binding.add_symbol(symbol, ctypes.cast(getattr(library, symbol), ctypes.c_void_p).value)
        except (OSError, AttributeError):
            continue
        BLAS_PROBLEM = None
        return None
    BLAS_PROBLEM = "numpy's OpenBLAS (scipy-openblas64) was not found for matrix products"
    return BLAS_PROBLEM


BLAS_PROBLEM: str | bool | None = False


def tensor_target():
    """The host with all its features, and libmvec's vector width (codegen/fusion.py); a new target machine
    each time: an execution engine owns (and disposes of) the one it is made with."""
    from dl.codegen.fusion import vector_target

    return vector_target()


class Structs:
    """The interpreter's struct types, for struct values built in compiled code."""

    def __init__(self, states) -> None:
        self.states = states
        self.seen: dict[int, object] = {}

    def kind(self, key: int) -> object:
        return self.seen[key]

    def declared(self, path: str, name: str) -> object:
        state = self.states.get(path) if self.states is not None else None
        if state is None or name not in state.structs:
            from dl.codegen.lower import Unsupported

            raise Unsupported(f"struct `{name}` is not known to the interpreter")
        return state.structs[name]


@dataclass
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


class SpecialisingBody:
    """The body of a function compiled per argument layout (codegen/specialize.py), falling back to the
    interpreter's body for layouts it cannot compile. `around(interpreted, states)` gives the body."""

    def __init__(self, typed: Typed, decl, path: str, cache: bool) -> None:
        self.typed, self.decl, self.path, self.cache = typed, decl, path, cache
        self.compiled: dict[tuple, Specialisation | None] = {}
        self.reasons: dict[tuple, str] = {}
        self.structs: Structs | None = None
        self.static: set[int] = set()  # positions of integer parameters compiled in (shapes depend on them)

    def around(self, interpreted: Callable, states) -> Callable:
        self.structs = Structs(states)
        count = len(self.decl.params)

        seen = self.structs.seen
        static = self.static

        def body(frame: list) -> object:
            leaves: list = []
            arguments = frame[1 : count + 1]
            if static:
                layout = tuple(
                    [
                        ("static", value) if k in static and value.__class__ is int else flatten(value, leaves, seen)
                        for k, value in enumerate(arguments)
                    ]
                )
            else:
                layout = tuple([flatten(value, leaves, seen) for value in arguments])
            entry = self.compiled.get(layout, False)
            if entry is False:
                entry = self.specialise(layout) if len(self.compiled) < MAX_LAYOUTS else None
                if entry is RETRY:  # an integer parameter is now part of the layout: compile for its value
                    return body(frame)
                if len(self.compiled) >= MAX_LAYOUTS and layout not in self.reasons:
                    self.reasons[layout] = f"more than {MAX_LAYOUTS} argument layouts"
                self.compiled[layout] = entry
            if entry is None:
                return interpreted(frame)
            frame[0] = self.run(entry, leaves)
            return RETURN

        return body

    def specialise(self, layout: tuple) -> Specialisation | None:
        from dl.codegen.lower import Unsupported
        from dl.codegen.specialize import NeedsStatic, specialise

        try:
            lowered = specialise(self.typed, self.decl, self.path, layout, self.structs)
            functions = [lowered.function, *lowered.callees]
            uses_blas = any(isinstance(i, ir.MatMul) for f in functions for b in f.blocks for i in b.instructions)
            problem = blas_symbols() if uses_blas else None
            if problem is not None:
                raise Unsupported(problem)
            target, vectors = tensor_target()
            directory = cache_directory() if self.cache else None
            # O2: O3 takes seconds on the large loop-nest functions inlining makes, for no faster code
            native = compile_functions(functions, target, directory, vectors, speed=2)
            LIVE.add(native)
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
        arguments = [leaf for item in layout for leaf in layout_leaves(item) if leaf[0] in ("tensor", "scalar")]
        for slot, leaf in enumerate(arguments, start=1):
            places.append((slot, leaf[0] == "tensor"))
            if leaf[0] == "scalar":
                cells[slot] = np.zeros(1, dtype=NUMPY_DTYPES[leaf[1]])
        outputs: list = []
        for leaf in layout_leaves(lowered.result):  # ("tensor", slot, dtype, shape, buffer), ("scalar", slot, dtype)
            if leaf[0] == "tensor":
                outputs.append((leaf[1], leaf[3], NUMPY_DTYPES[leaf[2]]))
            elif leaf[0] == "scalar":
                cells[leaf[1]] = np.zeros(1, dtype=NUMPY_DTYPES[leaf[2]])
        for slot, cell in cells.items():
            slots[slot] = cell.ctypes.data
        call = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(native.addresses[lowered.function.symbol])
        error = ctypes.c_int64.from_address(native.error_address)
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
        )

    def run(self, entry: Specialisation, leaves: list) -> object:
        """Call the native code with the arguments' leaves (in slot order, as `flatten` lists them)."""
        slots, cells = entry.slots, entry.cells
        copies = []  # made contiguous: kept alive until the call returns
        for (slot, tensor), value in zip(entry.places, leaves, strict=True):
            if tensor:
                if not value.flags.c_contiguous:
                    value = np.ascontiguousarray(value)
                    copies.append(value)
                slots[slot] = value.ctypes.data
            else:
                cells[slot][0] = value
        outputs: dict[int, np.ndarray] = {}
        for slot, shape, dtype in entry.outputs:
            array = np.empty(shape, dtype=dtype)
            outputs[slot] = array
            slots[slot] = array.ctypes.data
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
            shown = ctypes.c_double.from_address(native.value_address).value
            message = message.replace("{value}", format_value(FROM_C[site.shows](shown)))
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
            lines.append(f"{self.path}: `{self.decl.name}`({shown}) {verdict}")
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


def flatten(value, leaves: list, kinds: dict) -> tuple:
    """The layout of an argument: ("tensor", dtype, shape), ("scalar", dtype), ("tuple", items), ("struct",
    id of its type, items, name), ("text", the string), or ("other", class name), which is not compiled;
    its tensors and scalars are appended to `leaves` in slot order and the struct types it meets
    remembered in `kinds`. Scalars are run-time values: only their dtype is part of the layout."""
    cls = value.__class__
    if cls is np.ndarray:
        leaves.append(value)
        if value.ndim:
            return ("tensor", NAMES.get(value.dtype), value.shape)
        return ("scalar", NAMES.get(value.dtype))
    if cls is np.float32:
        leaves.append(value)
        return ("scalar", "f32")
    if cls is np.float64:
        leaves.append(value)
        return ("scalar", "f64")
    if cls is int:
        leaves.append(value)
        return ("scalar", "i64")
    if cls is np.int32:
        leaves.append(value)
        return ("scalar", "i32")
    if cls is bool or cls is np.bool_:
        leaves.append(value)
        return ("scalar", "bool")
    if cls is tuple:
        return ("tuple", tuple([flatten(item, leaves, kinds) for item in value]))
    if cls is str:
        return ("text", value)
    if cls is Function and not value.captured:  # a function without captured values: compiled in
        kinds[id(value)] = value
        return ("function", id(value), value.name)
    kind = getattr(value, "type", None)
    values = getattr(value, "values", None)
    if kind is not None and values is not None and hasattr(kind, "fields"):
        kinds[id(kind)] = kind
        return ("struct", id(kind), tuple([flatten(item, leaves, kinds) for item in values]), kind.name)
    return ("other", cls.__name__)


def layout_leaves(layout: tuple):
    """The leaves of a layout (of arguments or of a result), in order: its tuples and structs opened."""
    kind = layout[0]
    if kind == "tuple":
        for item in layout[1]:
            yield from layout_leaves(item)
    elif kind == "struct":
        for item in layout[2]:
            yield from layout_leaves(item)
    else:
        yield layout


def build_result(layout: tuple, cells: dict, outputs: dict) -> object:
    from dl.interp.values import StructValue

    kind = layout[0]
    if kind == "tensor":
        return outputs[layout[1]]
    if kind == "scalar":
        value = cells[layout[1]][0]
        if layout[2] == "i64":
            return int(value)
        if layout[2] == "bool":
            return bool(value)
        return value
    if kind == "tuple":
        return tuple(build_result(item, cells, outputs) for item in layout[1])
    if kind == "struct":
        return StructValue(layout[1], tuple(build_result(item, cells, outputs) for item in layout[2]))
    if kind == "text":
        return layout[1]
    return ()


def describe_layout(layout: tuple) -> str:
    kind = layout[0]
    if kind == "tensor":
        return f"{layout[1]}[{', '.join(map(str, layout[2]))}]"
    if kind == "scalar":
        return layout[1]
    if kind == "tuple":
        return f"({', '.join(describe_layout(item) for item in layout[1])})"
    if kind == "struct":
        return layout[3]
    if kind == "text":
        return "str"
    if kind == "static":
        return f"i64 = {layout[1]}"
    if kind == "function":
        return f"fn {layout[2]}"
    return layout[1]
