"""The CUDA backend (runtime/backend.py): `BACKEND.prepare(typed, options)` runs the program with its tensors in an
NVIDIA GPU's memory.

The program runs on `options.fallback` (the interpreter) with cupy as its array module (`Options.arrays`,
runtime/arrays.py): every primitive is the interpreter's own implementation computing on cupy arrays (interp/device.py
keeps tensors on the device and scalars on the host), and the primitives that only the host can run are `SUPPORT`'s
refusals, each with the crossing it makes. docs/cuda.md says what runs where.

cupy is imported only when a program is prepared: without it, or without a GPU it can use, `prepare` raises one
E0406 diagnostic saying what is missing and which extra to install; `dlrun check`, the REPL and the other backends
never import it. `CUDA.arrays` is None for cupy; tests give numpy or an emulated device instead, which run the same
code on the CPU.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from dl.lang import ast
from dl.lang.check import Typed
from dl.lang.diagnostics import DiagnosticError, Span, error
from dl.lang.primitives import Prim, Support
from dl.runtime.arrays import ArrayModule
from dl.runtime.backend import Options, Prepared

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
        scatter_add=cupyx.scatter_add,
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


class OnDevice:
    """A program prepared on the CUDA backend: the fallback backend runs it with its tensors on the device."""

    def __init__(self, fallback: Prepared, arrays: ArrayModule) -> None:
        self.fallback, self.arrays = fallback, arrays

    def run(self, args: list[str]) -> Any:
        return self.fallback.run(args)

    def call(self, name: str, args: list) -> Any:
        return self.fallback.call(name, args)

    def plan(self) -> str:
        return f"tensors live in {self.arrays.name}'s arrays; every function runs on the interpreter over them"

    def outcome(self) -> str:
        return self.fallback.outcome()


class CUDA:
    name = "cuda"
    support = SUPPORT
    arrays: ArrayModule | None = None  # None: cupy, found when a program is prepared

    def prepare(self, typed: Typed, options: Options) -> OnDevice:
        if options.fallback is None:
            raise ValueError("the cuda backend runs the program on a fallback backend (the interpreter)")
        arrays = self.arrays
        if arrays is None:
            try:
                arrays = cupy_arrays()
            except Missing as problem:
                raise missing_diagnostic(typed, str(problem)) from None
        return OnDevice(options.fallback.prepare(typed, replace(options, arrays=arrays)), arrays)


BACKEND = CUDA()
