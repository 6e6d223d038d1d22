"""Where tensors live: an `ArrayModule` is an array library with numpy's interface (numpy itself, or cupy on an
NVIDIA GPU) and the two ways across between it and the host.

The interpreter runs a program on any array module (`Options.arrays`, runtime/backend.py). On a device module
every tensor of rank 1 or more is an array of that module, and stays there; a scalar (rank 0) is a host value
as on every backend (a Python int or bool, a numpy float), so that indices, loop bounds, conditions and
printed numbers are the host's. Values cross only where this module's `to_host` / `to_device` or a module's
`download` / `upload` are called, and each such call is a documented crossing (docs/cuda.md): `print` and
f-strings, data loading, checkpoints, a scalar result (a loss) and the arguments and result of a call from
the host.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from dl.lang.record import record
from dl.runtime.values import DEVICE_ARRAYS, StructValue
from numpy.lib.stride_tricks import sliding_window_view


def same(value: Any) -> Any:
    return value


@record(frozen=True, eq=False)
class ArrayModule:
    """An array library and its crossings. `xp` is the module (`numpy`, `cupy`), `tensor` its array class;
    `upload` copies a numpy array into it and `download` copies one of its arrays back (waiting for the device).
    The few functions numpy's interface lacks or spells differently are given here: `erf` (None: computed on the
    host one element at a time, as the interpreter does), `scatter_add(target, index, values)` (numpy's
    `np.add.at`, in place), and `windows` (numpy's `sliding_window_view`)."""

    name: str
    xp: Any
    tensor: type
    upload: Callable[[np.ndarray], Any] = same
    download: Callable[[Any], np.ndarray] = same
    erf: Callable[[Any], Any] | None = None
    scatter_add: Callable[[Any, Any, Any], None] = np.add.at
    windows: Callable[..., Any] = sliding_window_view

    @property
    def on_host(self) -> bool:
        return self.tensor is np.ndarray


NUMPY = ArrayModule("numpy", np, np.ndarray)


def register(arrays: ArrayModule) -> None:
    """Make the arrays of a device module tensors for every pass that inspects values (runtime/values.py)."""
    if not arrays.on_host:
        DEVICE_ARRAYS[arrays.tensor] = arrays


def to_host(value: Any) -> Any:
    """`value` with every device array in it (through tuples and structs) copied to the host; a 0-d one becomes
    the scalar the interpreter holds (i64 and bool as Python values)."""
    arrays = DEVICE_ARRAYS.get(value.__class__)
    if arrays is not None:
        return host_value(arrays.download(value))
    if value.__class__ is tuple:
        return tuple(to_host(item) for item in value)
    if value.__class__ is StructValue:
        return StructValue(value.type, tuple(to_host(item) for item in value.values))
    return value


def host_value(array: np.ndarray) -> Any:
    if array.ndim:
        return array
    item = array[()]
    if item.__class__ is np.int64:
        return int(item)
    if item.__class__ is np.bool_:
        return bool(item)
    return item


def to_device(value: Any, arrays: ArrayModule) -> Any:
    """`value` with every host tensor of rank 1 or more in it (through tuples and structs) copied into `arrays`;
    scalars stay on the host."""
    if value.__class__ is np.ndarray and value.ndim and not arrays.on_host:
        return arrays.upload(value)
    if value.__class__ is tuple:
        return tuple(to_device(item, arrays) for item in value)
    if value.__class__ is StructValue:
        return StructValue(value.type, tuple(to_device(item, arrays) for item in value.values))
    return value
