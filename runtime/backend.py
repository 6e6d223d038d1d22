"""The one interface every backend implements: `prepare(typed, options) -> Prepared`.

A backend takes the checked program after `grad` has been expanded (lang/autodiff/) and gives
something that runs it: `Prepared.run(args)` calls `main`, `Prepared.call(name, args)` calls one
function of the entry module. The pipeline (driver/pipeline.py) picks a backend by name and is the only
code that does; backends are siblings and never import each other.

A backend that compiles only some functions falls back to another per function through this interface:
it prepares the program on its `Options.fallback` backend, handing it `Options.bodies` (a
`CompiledBody` per function declaration it compiled), which that backend runs in place of its own, giving
each its own body to fall back on for what it cannot run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from typing import Any, Protocol

from dl.lang.check import Typed
from dl.lang.primitives import Support
from dl.lang.record import record
from dl.runtime.arrays import NUMPY, ArrayModule

# A function body in the calling convention of dl.runtime.calls: `step(frame) -> signal`.
Step = Callable[[list], object]
# The run-time struct type of a declared struct, by module path and name (what a compiled body builds
# struct values with, so that they are the fallback backend's own).
StructTypes = Callable[[str, str], object]


NOT_COMPILED = object()  # what `CompiledBody.direct` gives for a call it cannot make by itself


class CompiledBody(Protocol):
    """A function body compiled by one backend and run by another."""

    def around(self, fallback: Step, structs: StructTypes) -> Step:
        """The body to run: this compiled code, calling `fallback` (the running backend's own body) for
        whatever it cannot run."""
        ...

    def direct(self, args: list) -> object:
        """A call made by compiled code alone, on the caller's thread (a host calling a compiled function
        often: no frame, no hand-over to the backend's thread), or `NOT_COMPILED` where that code is not
        compiled yet. Raises `RunError` for the program's failures."""
        ...


@record(frozen=True)
class Options:
    """What a caller may ask of a backend; each backend reads what applies to it."""

    cache: bool = True  # reuse and store compiled code in the on-disk compile cache
    fallback: Backend | None = None  # runs what a compiling backend does not compile
    bodies: dict[int, CompiledBody] = field(default_factory=dict)  # by id of the function declaration
    # values of module constants already computed, by id of their declaration, kept between preparations
    # of programs sharing declarations (the REPL evaluates `const w = randn(3)` once)
    constants: dict[int, tuple[Any, Any]] | None = None
    # each run or call starts the unseeded random stream afresh (the REPL keeps one stream for a session)
    fresh_random: bool = True
    # where the tensors live (runtime/arrays.py): numpy's host arrays, or a device's (cupy's, for the cuda backend)
    arrays: ArrayModule = NUMPY


class Prepared(Protocol):
    """A program ready to run on one backend."""

    def run(self, args: list[str]) -> Any:
        """Call `main` with the command-line arguments (strings); raises `DiagnosticError` for the
        program's failures."""
        ...

    def call(self, name: str, args: list) -> Any:
        """Call the entry module's function `name` with run-time values (numpy arrays, numbers, tuples)."""
        ...

    def caller(self, name: str) -> Callable[[list], Any]:
        """`call(name, args)` as a function of `args` (a list it may keep), for a host that calls `name` often:
        what can be looked up once is."""
        ...

    def plan(self) -> str:
        """What `--explain-backend` says before running: which functions run where and why ("" if none)."""
        ...

    def outcome(self) -> str:
        """What `--explain-backend` says after running: what was decided per call ("" if nothing)."""
        ...


class Backend(Protocol):
    name: str
    support: Support

    def prepare(self, typed: Typed, options: Options) -> Prepared: ...
