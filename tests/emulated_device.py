"""A device array module for a machine without a GPU: numpy's arrays behind the walls cupy puts around its own.

`EMULATED` is an `ArrayModule` (runtime/arrays.py) whose arrays are `DeviceArray`s: not numpy arrays, computing
with numpy underneath, and refusing what cupy refuses, so that the cuda backend's array path, run on it, fails
here wherever it would fail on a GPU for where a value lives:

- no implicit conversion to numpy (`np.asarray(x)` raises, as cupy's `__array__` does): a device array reaches
  the host only through `download`, or `float`/`int`/`bool` of a 0-d one (which cupy allows, and which wait for
  the GPU);
- no scalars: indexing one element and reducing everything give 0-d arrays, as in cupy;
- numpy's functions reach it only through numpy's protocols, as they reach cupy: a ufunc call
  (`__array_ufunc__`, method `__call__` only) and, by name, the functions cupy has (`__array_function__`), with
  cupy's signature where it is narrower than numpy's (its `max` and `min` take no `initial`, its `where` takes
  no Python bool as the condition);
- a host array (np.ndarray) beside a device array in one operation is refused, as cupy refuses it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from dl.runtime.arrays import ArrayModule
from numpy.lib.mixins import NDArrayOperatorsMixin
from numpy.lib.stride_tricks import sliding_window_view

# numpy functions that cupy also has under the same name (and that the array path calls through numpy)
CUPY_FUNCTIONS = frozenset(
    [
        "shape",
        "ndim",
        "size",
        "where",
        "sum",
        "mean",
        "max",
        "min",
        "amax",
        "amin",
        "argmax",
        "argmin",
        "all",
        "any",
        "take",
        "concatenate",
        "stack",
        "split",
        "transpose",
        "swapaxes",
        "reshape",
        "broadcast_to",
        "expand_dims",
        "squeeze",
        "tril",
        "triu",
        "zeros_like",
        "ones_like",
        "full_like",
        "einsum",
        "vdot",
        "matmul",
        "isfinite",
        "trunc",
        "cumsum",
        "argsort",
        "take_along_axis",
    ]
)
NO_INITIAL = frozenset({"max", "min", "amax", "amin"})  # cupy.amax(a, axis=None, out=None, keepdims=False)


class DeviceArray(NDArrayOperatorsMixin):
    """An array "on the device": numpy data that only `download` (or a 0-d `float`, `int`, `bool`) brings back."""

    __slots__ = ("data",)

    def __init__(self, data: np.ndarray) -> None:
        assert isinstance(data, np.ndarray), type(data)
        self.data = data

    def __array__(self, dtype=None, copy=None):
        raise TypeError("Implicit conversion to a NumPy array is not allowed (an emulated device array)")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or "out" in kwargs:
            return NotImplemented
        return wrap(ufunc(*(unwrapped(x) for x in inputs), **kwargs))

    def __array_function__(self, func, types, args, kwargs):
        if func.__name__ not in CUPY_FUNCTIONS or any(issubclass(t, np.ndarray) for t in types):
            return NotImplemented
        if func.__name__ in NO_INITIAL and "initial" in kwargs:
            raise TypeError(f"{func.__name__}() got an unexpected keyword argument 'initial'")
        if func.__name__ == "where" and not hasattr(args[0], "astype"):  # cupy.where calls condition.astype
            raise AttributeError(f"'{type(args[0]).__name__}' object has no attribute 'astype'")
        return wrap(func(*unwrapped(args), **unwrapped(kwargs)))

    # -------------------------------------------------------------- what cupy's ndarray has
    shape = property(lambda self: self.data.shape)
    dtype = property(lambda self: self.data.dtype)
    ndim = property(lambda self: self.data.ndim)
    size = property(lambda self: self.data.size)
    T = property(lambda self: DeviceArray(self.data.T))

    def __len__(self) -> int:
        return len(self.data)

    def __iter__(self):
        return (wrap(row) for row in self.data)

    def __getitem__(self, key):
        return wrap(self.data[unwrapped(key)])

    def __setitem__(self, key, value) -> None:
        self.data[unwrapped(key)] = unwrapped(value)

    def __iadd__(self, other):  # in place on the device, as cupy's own operators are
        self.data += unwrapped(other)
        return self

    def __isub__(self, other):
        self.data -= unwrapped(other)
        return self

    def __imul__(self, other):
        self.data *= unwrapped(other)
        return self

    def __bool__(self) -> bool:
        return bool(self.data)

    def __float__(self) -> float:
        return float(self.data)

    def __int__(self) -> int:
        return int(self.data)

    def __repr__(self) -> str:
        return f"DeviceArray({self.data!r})"

    def __str__(self) -> str:
        return str(self.data)

    def get(self) -> np.ndarray:
        return self.data.copy()

    def item(self):
        return self.data.item()

    def astype(self, dtype, copy: bool = True):
        return DeviceArray(self.data.astype(dtype, copy=copy))

    def copy(self):
        return DeviceArray(self.data.copy())

    def reshape(self, *shape):
        return DeviceArray(self.data.reshape(*shape))

    def transpose(self, *axes):
        return DeviceArray(self.data.transpose(*axes))

    def ravel(self):
        return DeviceArray(self.data.ravel())

    def sum(self, *args, **kwargs):
        return wrap(self.data.sum(*args, **kwargs))

    def max(self, *args, **kwargs):
        return wrap(self.data.max(*args, **kwargs))

    def min(self, *args, **kwargs):
        return wrap(self.data.min(*args, **kwargs))


def wrap(value: Any) -> Any:
    """A numpy result as the device holds it: arrays and numpy scalars become (0-d) device arrays."""
    if isinstance(value, np.ndarray):
        return DeviceArray(value)
    if isinstance(value, np.generic):
        return DeviceArray(np.asarray(value))
    if isinstance(value, (tuple, list)):
        return type(value)(wrap(item) for item in value)
    return value


def unwrapped(value: Any) -> Any:
    """The numpy data of device arrays in `value`; a host array there is refused, as cupy refuses it."""
    if isinstance(value, DeviceArray):
        return value.data
    if isinstance(value, np.ndarray):
        raise TypeError("a host numpy array met a device array (cupy: Unsupported type <class 'numpy.ndarray'>)")
    if isinstance(value, (tuple, list)):
        return type(value)(unwrapped(item) for item in value)
    if isinstance(value, dict):
        return {key: unwrapped(item) for key, item in value.items()}
    return value


class Namespace:
    """The module itself (`xp`): numpy's functions over device arrays; `asarray` of host data uploads it."""

    def __getattr__(self, name: str) -> Any:
        function = getattr(np, name)
        if not callable(function) or isinstance(function, type):
            return function

        def call(*args, **kwargs):
            if name in NO_INITIAL and "initial" in kwargs:
                raise TypeError(f"{name}() got an unexpected keyword argument 'initial'")
            return wrap(function(*device_data(args), **device_data(kwargs)))

        return call


def device_data(value: Any) -> Any:
    """Like `unwrapped`, but host arrays are allowed: `xp.asarray(host)` copies host data to the device."""
    if isinstance(value, DeviceArray):
        return value.data
    if isinstance(value, (tuple, list)):
        return type(value)(device_data(item) for item in value)
    if isinstance(value, dict):
        return {key: device_data(item) for key, item in value.items()}
    return value


def upload(host: np.ndarray) -> DeviceArray:
    assert isinstance(host, np.ndarray)
    return DeviceArray(host.copy())


def download(device: DeviceArray) -> np.ndarray:
    assert isinstance(device, DeviceArray), type(device)
    return device.data.copy()


ERF = np.frompyfunc(math.erf, 1, 1)

EMULATED = ArrayModule(
    "emulated",
    Namespace(),
    DeviceArray,
    upload=upload,
    download=download,
    erf=lambda x: DeviceArray(np.asarray(ERF(x.data), dtype=np.float64).astype(x.dtype)),
    scatter_add=lambda target, place, values: np.add.at(target.data, unwrapped(place), unwrapped(values)),
    windows=lambda x, kernel, axis: DeviceArray(sliding_window_view(x.data, kernel, axis=axis)),
)
