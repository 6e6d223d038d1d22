"""The CUDA backend (runtime/backend.py): `BACKEND.prepare(typed, options)` runs the program with its tensors in an
NVIDIA GPU's memory.

The program runs on `options.fallback` (the interpreter) with cupy as its array module (`Options.arrays`,
runtime/arrays.py): every primitive is the interpreter's own implementation computing on cupy arrays (interp/device.py
keeps tensors on the device and scalars on the host), and the primitives that only the host can run are `SUPPORT`'s
refusals, each with the crossing it makes. A function codegen/fusion.py fuses whole (`tanh(x * a + b) * c + x`, or
`sum` of such an expression) runs instead as one kernel of codegen/nvptx.py, launched on the arrays in place
(`fused_body`). docs/cuda.md says what runs where.

cupy is imported only when a program is prepared: without it, or without a GPU it can use, `prepare` raises one
E0406 diagnostic saying what is missing and which extra to install; `dlrun check`, the REPL and the other backends
never import it. `CUDA.arrays` is None for cupy; tests give numpy or an emulated device instead, which run the same
code on the CPU; `CUDA.kernels` is None for cupy's launcher (`CupyKernels`), and tests give a launcher of the
kernels' CPU twins (codegen/nvptx.py `HostTwin`).
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from dl.codegen import nvptx
from dl.codegen.fusion import Kernel as Fused
from dl.codegen.fusion import unequal_shapes
from dl.codegen.native import Replacing, lowered_program
from dl.lang import ast
from dl.lang.cache import cache_directory
from dl.lang.check import Typed
from dl.lang.diagnostics import DiagnosticError, Span, error
from dl.lang.primitives import Prim, Support
from dl.runtime.arrays import ArrayModule
from dl.runtime.backend import Options, Prepared
from dl.runtime.calls import RETURN
from dl.runtime.errors import fail

# `launch(symbol, blocks, threads, arguments)`: run a kernel over a grid; arguments are device arrays (passed by
# their data pointer) and numpy scalars (np.int64, np.float32, np.float64, by value)
Launch = Callable[[str, int, int, list], None]
THREADS = 256  # per block
MOST_BLOCKS = 1024  # a grid-stride loop covers the rest: enough blocks to fill a GPU, few partial sums

# What runs on the host, with the crossing it makes (interp/device.py `ON_HOST` lists the same primitives).
REFUSED: dict[Prim, str] = {
    Prim.CATEGORICAL: "runs on the host (numpy's random stream, as interpreted): the logits cross to it",
    Prim.BATCHES: "runs on the host (numpy's shuffle, as interpreted): the data crosses to it and the batches back",
    Prim.CHARS: "runs on the host (it decodes bytes into text): the codes cross to it",
    Prim.SAVE: "runs on the host (it writes a file): the tensors cross to it",
    Prim.LOAD: "runs on the host (it reads a file): the tensors read are copied to the GPU",
    Prim.LOG_METRIC: "runs on the host (it writes a file): a tensor value crosses to it",
    Prim.ALLREDUCE_MEAN: "runs on the host with more than one rank (MPI averages host buffers); a world of one "
    "returns its argument where it is",
}
SUPPORT = Support("cuda", frozenset(Prim) - set(REFUSED), REFUSED)

INSTALL = (
    "help: install cupy for the driver's CUDA (`nvidia-smi` shows it): pip install 'dl-lang[cuda]' for CUDA 13, "
    "'dl-lang[cuda12]' for CUDA 12 (docs/cuda.md)"
)


class Missing(Exception):
    """What keeps cupy from running here, in a user's words."""


def cupy_arrays() -> ArrayModule:
    """cupy as an array module, on the current GPU. Raises `Missing`."""
    try:
        import cupy
        import cupyx
        import cupyx.scipy.special
    except ImportError as problem:
        raise Missing(f"cupy cannot be imported ({problem})") from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as problem:  # cupy's CUDARuntimeError, or a missing CUDA library
        first = str(problem).splitlines()[0] if str(problem) else type(problem).__name__
        raise Missing(f"cupy finds no usable NVIDIA GPU ({first})") from None
    if count == 0:
        raise Missing("cupy finds no NVIDIA GPU")
    return ArrayModule(
        "cupy",
        cupy,
        cupy.ndarray,
        upload=cupy.asarray,
        download=cupy.asnumpy,
        erf=cupyx.scipy.special.erf,
        scatter_add=cupy.add.at if hasattr(cupy.add, "at") else cupyx.scatter_add,  # cupy 14 deprecates the second
        windows=cupy.lib.stride_tricks.sliding_window_view,
    )


def missing_diagnostic(typed: Typed, what: str) -> DiagnosticError:
    """E0406 at `main` (the program that cannot run here), saying what is missing and what to install."""
    program = typed.program
    decls = program.modules[program.entry].decls
    main = next((d for d in decls if isinstance(d, ast.FnDecl) and d.name == "main"), None)
    span = main.name_span if main is not None else Span(program.entry, 1, 1, 1, 1)
    message = f"the cuda backend cannot run here: {what}"
    return DiagnosticError(error("E0406", message, span, notes=(INSTALL,)))


class CupyKernels:
    """Kernels loaded into the current GPU: PTX for its arch (from the compile cache when it is there), loaded with
    `cupy.RawModule`, launched with cupy's `RawKernel` call."""

    def __init__(self, kernels: list[nvptx.Kernel], cache: bool) -> None:
        import cupy

        arch = f"sm_{cupy.cuda.Device().compute_capability}"  # "90" on an H100 or H200
        text = nvptx.cached_ptx(kernels, arch, cache_directory() if cache else None)
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "kernels.ptx"
            path.write_text(text)
            module = cupy.RawModule(path=str(path))
            self.functions = {k.symbol: module.get_function(k.symbol) for k in kernels}

    def __call__(self, symbol: str, blocks: int, threads: int, arguments: list) -> None:
        self.functions[symbol]((blocks,), (threads,), tuple(arguments))


def grid(count: int) -> int:
    """The blocks of `THREADS` threads that cover `count` elements, at most `MOST_BLOCKS`."""
    return max(1, min(math.ceil(count / THREADS), MOST_BLOCKS))


def fused_body(kernel: Fused, symbol: str, launch: Launch, arrays: ArrayModule) -> Callable[[list], Any]:
    """The interpreter body of a fused function (codegen/fusion.py's ABI, as native.kernel_body): every tensor made
    contiguous on the device, all of one shape, the output allocated there; a reduction's kernel writes one partial
    result per thread, which the device reduces, and the one number comes to the host (a scalar, as every scalar)."""
    xp, dtype = arrays.xp, np.dtype(np.float32 if kernel.dtype == "f32" else np.float64)
    count = len(kernel.params)

    def body(frame: list) -> object:
        shape, args = None, []
        for (name, tensor), value in zip(kernel.params, frame[1 : count + 1], strict=True):
            if not tensor:
                args.append(dtype.type(value))
                continue
            array = xp.ascontiguousarray(value)
            if shape is None:
                shape = array.shape
            elif array.shape != shape:
                raise unequal_shapes(kernel, name, array.shape, shape)
            args.append(array)
        size = math.prod(shape)
        frame[0] = elementwise(shape, size, args) if kernel.reduction is None else reduced(shape, size, args)
        return RETURN

    def elementwise(shape: tuple, size: int, args: list) -> Any:
        out = xp.empty(shape, dtype)
        if size:
            launch(symbol, grid(size), THREADS, [np.int64(size), out, *args])
        return out

    def reduced(shape: tuple, size: int, args: list) -> Any:
        if size == 0 and kernel.reduction != "sum":
            shown = f"{kernel.dtype}[{', '.join(map(str, shape))}]"
            raise fail("E0513", f"`{kernel.reduction}` of an empty tensor {shown}", kernel.reduction_span)
        if size == 0:
            return dtype.type(0)
        blocks = grid(size)
        partials = xp.empty(blocks * THREADS, np.float64 if kernel.reduction in ("sum", "mean") else dtype)
        launch(symbol, blocks, THREADS, [np.int64(size), partials, *args])
        if kernel.reduction in ("max", "min"):
            return dtype.type(float(partials.max() if kernel.reduction == "max" else partials.min()))
        total = float(partials.sum())  # f64, rounded to the dtype once, as the CPU's fused sum
        return dtype.type(total / size if kernel.reduction == "mean" else total)

    return body


class OnDevice:
    """A program prepared on the CUDA backend: the fallback backend runs it with its tensors on the device, calling
    the fused kernels for the functions they replace."""

    def __init__(self, fallback: Prepared, arrays: ArrayModule, explanation: str) -> None:
        self.fallback, self.arrays, self.explanation = fallback, arrays, explanation

    def run(self, args: list[str]) -> Any:
        return self.fallback.run(args)

    def call(self, name: str, args: list) -> Any:
        return self.fallback.call(name, args)

    def call_on_device(self, name: str, args: list) -> Any:
        """`call`, its result's tensors left in the GPU's memory (cupy arrays): a host loop that passes them to the
        next call (a model's weights, an optimizer's state) moves nothing across between calls."""
        return self.fallback.call(name, args, to_host=False)

    def caller(self, name: str) -> Callable[[list], Any]:
        return self.fallback.caller(name)

    def plan(self) -> str:
        return self.explanation

    def outcome(self) -> str:
        return self.fallback.outcome()


class CUDA:
    name = "cuda"
    support = SUPPORT
    arrays: ArrayModule | None = None  # None: cupy, found when a program is prepared
    kernels: Callable[[list[nvptx.Kernel], bool], Launch] | None = None  # None: `CupyKernels`

    def prepare(self, typed: Typed, options: Options) -> OnDevice:
        if options.fallback is None:
            raise ValueError("the cuda backend runs the program on a fallback backend (the interpreter)")
        arrays = self.arrays
        if arrays is None:
            try:
                arrays = cupy_arrays()
            except Missing as problem:
                raise missing_diagnostic(typed, str(problem)) from None
        bodies, explanation = self.fused_bodies(typed, arrays, options.cache)
        prepared = options.fallback.prepare(typed, replace(options, arrays=arrays, bodies={**options.bodies, **bodies}))
        return OnDevice(prepared, arrays, explanation)

    def fused_bodies(self, typed: Typed, arrays: ArrayModule, cache: bool) -> tuple[dict, str]:
        """A body per fused function, launching its kernel; and `--explain-backend`'s plan: one line per function
        the run can reach, at its name: one fused GPU kernel, or interpreted over the device's arrays and why."""
        lowered = lowered_program(typed)
        kernels = {key: nvptx.fused_kernel(kernel) for key, kernel in lowered.kernels.items()}
        launch, refused = None, ""
        if kernels:
            try:
                launch = (self.kernels or CupyKernels)(list(kernels.values()), cache)
            except (FileNotFoundError, RuntimeError) as problem:  # no libdevice; LLVM's failure
                refused = f"the kernel could not be built ({str(problem).splitlines()[0]})"
        bodies = {}
        if launch is not None:
            bodies = {
                key: Replacing(fused_body(lowered.kernels[key], kernel.symbol, launch, arrays))
                for key, kernel in kernels.items()
            }
        lines = [f"tensors live in {arrays.name}'s arrays"]
        reached = typed.reached()
        for key, (decl, _) in lowered.declarations.items():
            if key not in reached:
                continue
            where = f"{decl.name_span}: `{decl.name}`"
            if key in bodies:
                reduction = lowered.kernels[key].reduction
                reducing = f" reducing with `{reduction}`" if reduction else ""
                lines.append(f"{where} compiled: one fused GPU kernel{reducing}")
            elif key in lowered.functions:
                lines.append(f"{where} interpreted on the host: it computes scalars only")
            else:
                why = refused if key in kernels else lowered.refused[key]
                lines.append(f"{where} interpreted, its tensors on the device: {why}")
        return bodies, "\n".join(lines)


BACKEND = CUDA()
