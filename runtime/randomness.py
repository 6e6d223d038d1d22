"""Where random draws come from, for every backend: `RandomSource`, the run's generator (the draws of `rand`,
`randn`, `permutation` and `categorical` without `seed=`), and `fill_draws`, which compiled code calls to
draw exactly what the interpreter draws (codegen/primitives.py `draw`, codegen/native.py).

A draw with `seed=s` comes from `numpy.random.default_rng(s)`, fresh at each call; one without comes from the
run's generator, seeded 0 when the run starts. Both draw doubles (`random` is uniform in [0, 1),
`standard_normal` is numpy's ziggurat), rounded to the result's dtype, in row-major order: the same numbers
whether the interpreter or compiled code asks, and whatever shape they are asked in.
"""

from __future__ import annotations

import ctypes

import numpy as np
from dl.runtime.interrupts import interrupt_everything

DRAWS = ("random", "standard_normal", "permutation")  # a kind of draw, by its number in `fill_draws`
ELEMENTS = (ctypes.c_float, ctypes.c_double, ctypes.c_int64)  # the target's element, by its number
DTYPE_NUMBERS = {"f32": 0, "f64": 1, "i64": 2}  # the number `fill_draws` takes for a target's dtype


class RandomSource:
    """Where unseeded `randn`/`rand` draw from: one generator per run, seeded 0, so runs repeat. A reset
    makes the generator when it is first drawn from (a host calling a function that draws nothing, often,
    pays nothing for it)."""

    seed = 0
    made: np.random.Generator | None = None

    @classmethod
    def reset(cls, seed: int = 0) -> None:
        cls.seed, cls.made = seed, None

    @classmethod
    def generator(cls) -> np.random.Generator:
        if cls.made is None:
            cls.made = np.random.default_rng(cls.seed)
        return cls.made


def fill_draws(kind: int, seeded: int, seed: int, address: int, count: int, dtype: int) -> None:
    """Write `count` draws of kind `DRAWS[kind]` at `address` (uniform or normal floats, or a permutation of
    0..count-1), elements of `ELEMENTS[dtype]`: from `default_rng(seed)` if `seeded`, else from the run's
    generator. Compiled code calls this (through a C function pointer) with a seed it has checked; nothing here
    raises for a user's mistake."""
    try:
        generator = np.random.default_rng(seed) if seeded else RandomSource.generator()
        values = getattr(generator, DRAWS[kind])(count)
        if count:
            target = np.ctypeslib.as_array((ELEMENTS[dtype] * count).from_address(address))
            target[...] = values  # rounded to the target's dtype, as `values.astype(dtype)`
    except KeyboardInterrupt:
        # Ctrl-C arrived while the host drew for compiled code: an exception cannot leave a C callback (ctypes
        # would print it and go on), so the compiled code is told to stop at its next loop, as for a Ctrl-C
        # that finds it running; the waiting thread raises KeyboardInterrupt to the user.
        interrupt_everything()
