"""The LLVM backend (runtime/backend.py): `BACKEND.prepare(typed, options)`.

It compiles every function it can (codegen/native.py: scalar functions ahead of time, the others per
argument layout when first called) and prepares the program on `options.fallback`, which runs the rest
and calls the compiled bodies in place of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from dl.codegen.native import Compiled, compile_program
from dl.codegen.primitives import SUPPORT
from dl.lang.check import Typed
from dl.runtime.backend import Options, Prepared


class CompiledProgram:
    """A program prepared on the LLVM backend: what it compiled, run by the fallback backend."""

    def __init__(self, typed: Typed, compiled: Compiled, fallback: Prepared) -> None:
        self.typed, self.compiled, self.fallback = typed, compiled, fallback

    def run(self, args: list[str]) -> Any:
        return self.fallback.run(args)

    def call(self, name: str, args: list) -> Any:
        return self.fallback.call(name, args)

    def caller(self, name: str) -> Callable[[list], Any]:
        return self.fallback.caller(name)

    def plan(self) -> str:
        return self.compiled.explanation(self.typed.reached())

    def outcome(self) -> str:
        return self.compiled.specialisations()


class LLVM:
    name = "llvm"
    support = SUPPORT

    def prepare(self, typed: Typed, options: Options) -> CompiledProgram:
        if options.fallback is None:
            raise ValueError("the llvm backend needs a fallback backend for what it does not compile")
        compiled = compile_program(typed, options.cache)
        bodies = {**options.bodies, **compiled.bodies}
        return CompiledProgram(typed, compiled, options.fallback.prepare(typed, replace(options, bodies=bodies)))


BACKEND = LLVM()
