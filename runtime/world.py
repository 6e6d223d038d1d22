"""The world a program runs in: how many processes train it together, and which one this is.

A program runs in a world of 1 (rank 0 of 1) unless the driver (driver/distributed.py, for `mpiexec -n N
dlrun FILE.dl`) has connected this process to an MPI communicator with `World.connect`. The interpreter's
`rank()`, `world_size()` and `allreduce_mean(tree)` read the world here, `batches` takes this rank's slice of
every batch, and `print`, `progress`, `log_metric` and `save` act on rank 0 only (`on_rank_zero`), so that a
run of N processes writes one log, one metrics file and one checkpoint.

This module imports no MPI: the communicator is handed in (an `mpi4py` communicator, or anything with its
`Allreduce` and `Get_rank`/`Get_size`), so a run of one process never loads mpi4py.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
from dl.runtime.values import describe


class WorldError(Exception):
    """A data-parallel call that cannot go on, in the user's terms; `code` is its diagnostic's."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class World:
    """This process's place in the run: `rank` of `size`, and the communicator when `size` > 1."""

    rank: ClassVar[int] = 0
    size: ClassVar[int] = 1
    communicator: ClassVar[Any] = None
    sum_operation: ClassVar[Any] = None  # MPI.SUM
    max_operation: ClassVar[Any] = None  # MPI.MAX
    in_place: ClassVar[Any] = None  # MPI.IN_PLACE

    @classmethod
    def connect(cls, communicator: Any, sum_operation: Any, max_operation: Any, in_place: Any) -> None:
        cls.communicator = communicator
        cls.rank, cls.size = communicator.Get_rank(), communicator.Get_size()
        cls.sum_operation, cls.max_operation, cls.in_place = sum_operation, max_operation, in_place

    @classmethod
    def disconnect(cls) -> None:
        """Back to a world of 1."""
        cls.communicator = cls.sum_operation = cls.max_operation = cls.in_place = None
        cls.rank, cls.size = 0, 1


def on_rank_zero(implementation: Callable[..., tuple]) -> Callable[..., tuple]:
    """`implementation` (an effect returning `()`) on rank 0; on every other rank a call does nothing."""

    @functools.wraps(implementation)
    def effect(*args: Any) -> tuple:
        if World.rank:
            return ()
        return implementation(*args)

    return effect


def average(leaves: list[np.ndarray]) -> list[np.ndarray]:
    """Each leaf averaged over the world: the leaves of one dtype are packed into one contiguous buffer, which
    one `Allreduce` sums in place, then divided by the world's size and cut back into the leaves' shapes.
    Every rank must pass leaves of the same dtypes and shapes, in the same order (`WorldError` E0522 if not:
    checked first with one small all-reduce, so that mismatched buffers never reach MPI)."""
    agree_on_shapes(leaves)
    averaged: list[np.ndarray | None] = [None] * len(leaves)
    for dtype in sorted({leaf.dtype for leaf in leaves}, key=str):
        positions = [i for i, leaf in enumerate(leaves) if leaf.dtype == dtype]
        buffer = np.concatenate([leaves[i].ravel() for i in positions]) if positions else np.empty(0, dtype)
        World.communicator.Allreduce(World.in_place, buffer, op=World.sum_operation)
        buffer /= dtype.type(World.size)
        offset = 0
        for i in positions:
            count = leaves[i].size
            averaged[i] = buffer[offset : offset + count].reshape(leaves[i].shape)
            offset += count
    return averaged


def agree_on_shapes(leaves: list[np.ndarray]) -> None:
    """Raise E0522 unless every rank passes leaves of the same dtypes and shapes: each rank's description is
    reduced to a fingerprint, whose maximum and minimum (the maximum of its negation) all ranks then compare."""
    mine = fingerprint(leaves)
    extremes = np.concatenate([mine, -mine])
    World.communicator.Allreduce(World.in_place, extremes, op=World.max_operation)
    largest, smallest = extremes[:3], -extremes[3:]
    if (largest != smallest).any():
        counts = [
            f"{smallest[i]} to {largest[i]} {what}"
            for i, what in ((1, "tensors"), (2, "numbers"))
            if smallest[i] != largest[i]
        ]
        detail = f" ({', '.join(counts)})" if counts else ""
        raise WorldError(
            "E0522",
            f"`allreduce_mean`: the ranks passed trees of different dtypes or shapes{detail}; "
            f"rank {World.rank} passed {describe_leaves(leaves)}",
        )


def fingerprint(leaves: list[np.ndarray]) -> np.ndarray:
    """What ranks must agree on before they all-reduce: a checksum of the dtypes and shapes, the number of
    tensors and the number of values."""
    description = repr([(str(leaf.dtype), leaf.shape) for leaf in leaves]).encode()
    return np.array([zlib.crc32(description), len(leaves), sum(leaf.size for leaf in leaves)], np.int64)


def describe_leaves(leaves: list[np.ndarray]) -> str:
    shown = ", ".join(describe(leaf) for leaf in leaves[:4])
    return shown + (", ..." if len(leaves) > 4 else "")


def shard(batch_size: int) -> slice:
    """The rows of every batch of `batch_size` rows that this rank takes: the `rank`-th of `size` equal slices
    (E0523 if they cannot be equal)."""
    if batch_size % World.size:
        raise WorldError(
            "E0523",
            f"`batches`: a batch of {batch_size} rows does not split evenly among {World.size} ranks; "
            f"use a batch size that is a multiple of world_size()",
        )
    rows = batch_size // World.size
    return slice(World.rank * rows, (World.rank + 1) * rows)
