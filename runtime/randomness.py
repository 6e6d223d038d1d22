"""Where random draws come from, for every backend: `RandomSource`, the run's generator (the draws of `rand`,
`randn`, `permutation` and `categorical` without `seed=`), and `fill_draws` and `fill_samples`, which compiled
code calls to draw exactly what the interpreter draws (codegen/primitives.py `drawn` and `categorical`,
codegen/native.py). `categorical_samples` is the one sampler both backends run.

A draw with `seed=s` comes from `numpy.random.default_rng(s)`, fresh at each call; one without comes from the
run's generator, seeded 0 when the run starts (or N, with `dlrun --seed N`). Both draw doubles (`random` is
uniform in [0, 1), `standard_normal` is numpy's ziggurat), rounded to the result's dtype, in row-major order:
the same numbers whether the interpreter or compiled code asks, and whatever shape they are asked in.
"""

from __future__ import annotations

import ctypes

import numpy as np
from dl.runtime.interrupts import interrupt_everything

DRAWS = ("random", "standard_normal", "permutation")  # a kind of draw, by its number in `fill_draws`
ELEMENTS = (ctypes.c_float, ctypes.c_double, ctypes.c_int64)  # the target's element, by its number
DTYPE_NUMBERS = {"f32": 0, "f64": 1, "i64": 2}  # the number `fill_draws` takes for a target's dtype
CATEGORICAL_PEAK = "`categorical` needs logits with a finite largest value in every row (no nan)"


class RandomSource:
    """Where unseeded `randn`/`rand` draw from: one generator per run, seeded 0, so runs repeat. A reset
    makes the generator when it is first drawn from (a host calling a function that draws nothing, often,
    pays nothing for it)."""

    start = 0  # the seed each run starts from: 0, or `dlrun --seed N`'s
    seed = 0
    made: np.random.Generator | None = None

    @classmethod
    def reset(cls, seed: int | None = None) -> None:
        cls.seed, cls.made = cls.start if seed is None else seed, None

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


def categorical_samples(logits: np.ndarray, generator: np.random.Generator) -> np.ndarray | None:
    """One category per distribution of the f64 `logits` (along the last axis): by the inverse of the
    cumulative probabilities at one uniform draw per distribution from `generator`. A category of
    probability 0 (a logit of -inf) is never drawn. None, and nothing drawn, when a row has no finite largest
    value (a nan, or every logit -inf or one +inf)."""
    peak = np.max(logits, axis=-1, keepdims=True)
    if np.isnan(logits).any() or not np.all(np.isfinite(peak)):
        return None
    weights = np.exp(logits - peak)
    cumulative = np.cumsum(weights / np.sum(weights, axis=-1, keepdims=True), axis=-1)
    draws = generator.random(logits.shape[:-1])
    chosen = np.sum(cumulative <= draws[..., None], axis=-1)
    last_possible = logits.shape[-1] - 1 - np.argmax(weights[..., ::-1] > 0, axis=-1)  # rounding: 1 - cum < u
    return np.minimum(chosen, last_possible).astype(np.int64)


def fill_samples(seeded: int, seed: int, logits_address: int, rows: int, categories: int, address: int) -> int:
    """`categorical_samples` of the `rows` x `categories` f64 logits at `logits_address`, written as i64 at
    `address`, from `default_rng(seed)` if `seeded`, else from the run's generator: 0, or 1 (nothing drawn,
    nothing written) for a row without a finite largest value. Compiled code calls this through a C function
    pointer and fails with the interpreter's message on 1."""
    try:
        generator = np.random.default_rng(seed) if seeded else RandomSource.generator()
        count = rows * categories
        if count:
            flat = np.ctypeslib.as_array((ctypes.c_double * count).from_address(logits_address))
            logits = flat.reshape(rows, categories)
        else:
            logits = np.zeros((rows, categories))
        samples = categorical_samples(logits, generator)
        if samples is None:
            return 1
        if rows:
            np.ctypeslib.as_array((ctypes.c_int64 * rows).from_address(address))[...] = samples
    except KeyboardInterrupt:  # as in `fill_draws`: the compiled code stops at its next loop
        interrupt_everything()
    return 0
