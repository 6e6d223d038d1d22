"""The C heap's settings for a process that computes with tensors: freed blocks are kept for the next one.

numpy takes each array's memory from glibc's `malloc`. glibc serves a block of 128 KB or more (at first)
with a fresh `mmap` and gives it back to the kernel when freed, and it returns the free memory at the top
of its heap to the kernel once there is more than twice that. A training step makes and drops arrays of
the same few sizes every step, so each new one is memory the kernel must map and zero again, a page fault
per 4 KB page: the digits MLP at width 2048 (a 512 KB activation) took 70 page faults a step and spent
15% of its epoch in them, where PyTorch, whose steps reuse their memory, took 3.

`keep_freed_memory` sets glibc's limits where its own adaptive ones end up for such a program once it has
seen a large block freed (glibc raises its mmap threshold up to 32 MB that way, but only after the first
free of each larger size, and trimming resets the gain): blocks under 32 MB come from the heap, which
keeps up to 64 MB of free memory at its top, and grows 16 MB at a time. A process then holds on to memory
it freed (at most those 64 MB above what it uses), as it would under PyTorch's or JAX's allocators. It
applies to the whole process, and to nothing but glibc on Linux; elsewhere it does nothing.
"""

from __future__ import annotations

import ctypes
import sys

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3  # glibc's <malloc.h> parameters for `mallopt`
MB = 1 << 20
SETTINGS = ((M_MMAP_THRESHOLD, 32 * MB), (M_TRIM_THRESHOLD, 64 * MB), (M_TOP_PAD, 16 * MB))


class Heap:
    """What `keep_freed_memory` found, once per process (None before it runs): whether every setting took."""

    tuned: bool | None = None


def keep_freed_memory() -> bool:
    """Set glibc's heap to keep freed tensor-sized blocks for reuse (see the module's docstring), once; whether
    every setting took (False on other systems and C libraries)."""
    if Heap.tuned is None:
        Heap.tuned = apply_settings()
    return Heap.tuned


def apply_settings() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    results = [mallopt(parameter, value) for parameter, value in SETTINGS]  # each tried, whatever the others do
    return all(result == 1 for result in results)
