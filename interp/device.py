"""The interpreter's primitives on a device array module (cupy on a GPU): `table(arrays) -> Table`.

The implementations of interp/primitives.py are the ones that run: they call numpy's functions, and numpy hands a
device array to its own module (the `__array_ufunc__` and `__array_function__` protocols), so `exp(x)` of a cupy
array runs on the GPU; where an implementation makes a new array it asks `array_module` of its operands. What
this module adds is the rule that keeps values where they belong (runtime/arrays.py): every tensor of rank 1 or
more lives on the device, every scalar on the host.

- `made_on_device`: a result that came out as a host tensor (a tensor made from sizes or from the host's numbers:
  `zeros`, `randn`, `arange`, `stack` of scalars, data read from a file) is copied to the device;
- `on_host`: the primitives that only the host can run (they read files or the MPI world, draw from numpy's
  random streams, or decode bytes) get their device arguments copied to the host first. These are the crossings
  docs/cuda.md lists, with why.

A scalar computed on the device (`sum(x)`, `x[i, j]`) comes back to the host in `scalar` (interp/primitives.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dl.interp.dispatch import Table
from dl.interp.primitives import IMPLEMENTATIONS, LITERAL_ADAPTING, SPECIALISED
from dl.lang.primitives import Prim
from dl.runtime.arrays import ArrayModule, register, to_device, to_host
from dl.runtime.world import World

# The primitives whose device arguments are copied to the host before they run: they read or write files, draw
# from numpy's random streams as interpreted, decode bytes into text, or (with more than one rank) average over
# MPI. The CUDA column of docs/primitives.md gives each one's reason (codegen/cuda.py `SUPPORT`).
ON_HOST = frozenset(
    {Prim.CATEGORICAL, Prim.BATCHES, Prim.CHARS, Prim.SAVE, Prim.LOAD, Prim.LOG_METRIC, Prim.ALLREDUCE_MEAN}
)


def table(arrays: ArrayModule) -> Table:
    """The primitives' implementations for a program whose tensors live in `arrays` (which is registered, so that
    every pass that inspects values knows its arrays are tensors)."""
    register(arrays)
    implementations = {prim: placed(prim, implementation, arrays) for prim, implementation in IMPLEMENTATIONS.items()}
    adapting = {prim: adapting_on(make, arrays) for prim, make in LITERAL_ADAPTING.items()}
    specialised = {prim: (defaults, made_on_device(whole, arrays)) for prim, (defaults, whole) in SPECIALISED.items()}
    return Table(implementations, adapting, specialised)


def placed(prim: Prim, implementation: Callable, arrays: ArrayModule) -> Callable:
    if prim is Prim.ALLREDUCE_MEAN:  # a world of one returns its argument: nothing to average, nothing to move
        host = on_host(implementation, arrays)
        return lambda tree: implementation(tree) if World.size == 1 else host(tree)
    if prim in ON_HOST:
        return on_host(implementation, arrays)
    return made_on_device(implementation, arrays)


def adapting_on(make: Callable, arrays: ArrayModule) -> Callable:
    return lambda weak_a=False, weak_b=False: made_on_device(make(weak_a, weak_b), arrays)


def made_on_device(implementation: Callable, arrays: ArrayModule) -> Callable:
    """`implementation`, its host tensors of rank 1 or more copied to the device."""

    def run(*args: Any) -> Any:
        return to_device(implementation(*args), arrays)

    return run


def on_host(implementation: Callable, arrays: ArrayModule) -> Callable:
    """`implementation` run on the host: device arguments copied there, a tensor result copied back."""

    def run(*args: Any) -> Any:
        return to_device(implementation(*(to_host(arg) for arg in args)), arrays)

    return run
