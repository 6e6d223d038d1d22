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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from dl.codegen import ir
from dl.codegen.cache import cache_directory
from dl.codegen.llvm import Native, compile_functions
from dl.codegen.lower import Lowered, lower
from dl.interp.runtime import RETURN, fail
from dl.interp.values import format_value
from dl.lang.check import Typed

C_TYPES = {"f64": ctypes.c_double, "f32": ctypes.c_float, "i64": ctypes.c_int64, "bool": ctypes.c_bool, "unit": None}
TO_C = {"f64": float, "f32": float, "i64": int, "bool": bool}
FROM_C = {"f64": np.float64, "f32": np.float32, "i64": int, "bool": bool, "unit": lambda _: ()}


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


def compile_program(typed: Typed, cache: bool = True) -> Backend:
    """Compile every function the lowering accepts; the others stay with the interpreter. With `cache`,
    object code is looked up in (and stored to) the compile cache (codegen/cache.py)."""
    lowered = lower(typed)
    bodies = kernel_bodies(lowered)
    if not lowered.functions:
        return Backend(bodies, lowered, None, cache)
    directory = cache_directory() if cache else None
    native = compile_functions(list(lowered.functions.values()), cache=directory)
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
            site = native.sites[error.value - 1]
            error.value = 0
            depth.value = 0
            message = site.message
            if site.shows is not None:
                message = message.replace("{value}", format_value(FROM_C[site.shows](shown.value)))
            raise fail(site.code, message, site.span)
        frame[0] = result(value)
        return RETURN

    body.native = call  # kept alive with the body: ctypes frees the thunk with its last reference
    return body
