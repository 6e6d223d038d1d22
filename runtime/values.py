"""Run-time values of the interpreter and how `print` shows them.

Scalars are numpy scalars (`np.float32`, `np.float64`, `np.int32`, `np.bool_`)
except i64 and bool, which are Python `int` and `bool` (numpy treats Python
scalars as weakly typed, which is exactly DL's rule for integer values meeting
floats). Tensors are numpy arrays, or arrays of a device's array module (cupy's on a GPU,
registered in `DEVICE_ARRAYS` by the backend that runs on it: runtime/arrays.py), tuples are Python
tuples, structs are `StructValue`s. Values are never mutated in place where a program could see it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from dl.lang.record import record

DTYPES: dict[str, np.dtype] = {
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "bool": np.dtype(np.bool_),
}
DTYPE_NAMES = {dtype: name for name, dtype in DTYPES.items()}

# The array classes of device array modules (cupy's ndarray), whose arrays are tensors too, each with its
# `ArrayModule` (runtime/arrays.py, whose `register` fills this).
DEVICE_ARRAYS: dict[type, Any] = {}


class StructType:
    """A struct declaration at run time: its name and field order."""

    __slots__ = ("fields", "index", "name")

    def __init__(self, name: str, fields: tuple[str, ...]) -> None:
        self.name = name
        self.fields = fields
        self.index = {field: position for position, field in enumerate(fields)}

    def alike(self, other: StructType) -> bool:
        """Whether values of `other` are of this struct: the same declaration, or one of the same name and
        fields (a struct made by another compile of the program, as a host's argument or a generated literal
        may be)."""
        return self is other or (self.name == other.name and self.fields == other.fields)


class StructValue:
    """An immutable struct instance; `replace` builds a changed copy."""

    __slots__ = ("flattened", "type", "values")

    def __init__(self, struct_type: StructType, values: tuple) -> None:
        self.type = struct_type
        self.values = values
        self.flattened: Any = None  # compiled code's view of it, made at its first native call (codegen/native.py)

    def field(self, name: str) -> Any:
        return self.values[self.type.index[name]]

    def replace(self, name: str, value: Any) -> StructValue:
        position = self.type.index[name]
        values = list(self.values)
        values[position] = value
        return StructValue(self.type, tuple(values))


@record(frozen=True, slots=True)
class ModuleValue:
    """An imported module: its name and its global cells by name."""

    name: str
    members: dict


class Cell:
    """A module-level binding (function, const), filled when the module is set up."""

    __slots__ = ("value",)

    def __init__(self, value: Any = None) -> None:
        self.value = value


def dtype_name(value: Any) -> str:
    dtype = getattr(value, "dtype", None)
    if dtype is not None:
        name = DTYPE_NAMES.get(dtype)
        return name if name is not None else str(dtype)
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "i64"
    if isinstance(value, float):
        return "f32"
    return type(value).__name__


def dtype_leaves(values: Any) -> tuple[str, ...]:
    """The dtypes of the tensors and numbers among `values` (a call's arguments), tuples' items and structs'
    fields in order, `?` for anything else: `lang.check.dtype_leaves` of the types of the check they match."""
    leaves: list[str] = []

    def add(value: Any) -> None:
        if isinstance(value, tuple):
            for item in value:
                add(item)
        elif isinstance(value, StructValue):
            for item in value.values:
                add(item)
        elif getattr(value, "dtype", None) is not None:
            leaves.append(DTYPE_NAMES.get(value.dtype, "?"))
        elif isinstance(value, bool):
            leaves.append("bool")
        elif isinstance(value, int):
            leaves.append("i64")
        else:
            leaves.append("?")

    for value in values:
        add(value)
    return tuple(leaves)


def describe(value: Any) -> str:
    """A short type-like description for run-time messages: `f32[3, 4]`, `i64`, `(f32, i64)`."""
    if isinstance(value, np.ndarray) or value.__class__ in DEVICE_ARRAYS:
        return f"{dtype_name(value)}[{', '.join(str(n) for n in value.shape)}]"
    if isinstance(value, tuple):
        return "(" + ", ".join(describe(item) for item in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, StructValue):
        return value.type.name
    if isinstance(value, ModuleValue):
        return f"module `{value.name}`"
    if isinstance(value, str):
        return "str"
    if isinstance(value, Tape):
        return f"tape of {value.size}"
    if callable(value):
        return "function"
    return dtype_name(value)


class Tape:
    """A persistent last-in first-out stack (what derivative code saves loop state on): `push` and `pop`
    build new tapes sharing the old cells, so a tape is a value like any other and costs O(1) per step.

    A tape of zeros (the adjoint a tape starts from, `zeros_like(tape)`) is one cell that names the tape it
    is the zeros of (`zeros_of`), its `top` and `rest` None: its entries are made as they are popped
    (interp/primitives.py `pop`), and adding it to a tape gives that tape. A second derivative through a
    loop makes one at every iteration of its backward sweep; building them whole made that sweep quadratic
    in the loop's length."""

    __slots__ = ("rest", "size", "top", "zeros_of")

    def __init__(self, top: Any = None, rest: Tape | None = None, size: int = 0) -> None:
        self.top = top
        self.rest = rest
        self.size = size
        self.zeros_of: Tape | None = None

    @staticmethod
    def zeros(like: Tape) -> Tape:
        """The tape of `like`'s size whose entries are zeros in the structure of `like`'s."""
        if not like.size or like.zeros_of is not None:
            return like
        tape = Tape(None, None, like.size)
        tape.zeros_of = like
        return tape


def format_value(value: Any) -> str:
    """How `print` shows a value. A device tensor is copied to the host to be shown: a crossing that waits
    for the device (docs/cuda.md)."""
    if value.__class__ in DEVICE_ARRAYS:
        value = DEVICE_ARRAYS[value.__class__].download(value)
    if value is True or value is False or isinstance(value, np.bool_):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, np.ndarray):
        return str(value)
    if isinstance(value, Tape):
        return f"<tape of {value.size}>"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, np.floating):
        return str(value)
    if isinstance(value, float):
        return str(np.float32(value))
    if isinstance(value, tuple):
        inner = ", ".join(format_value(item) for item in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, StructValue):
        fields = ", ".join(
            f"{name}: {format_value(item)}" for name, item in zip(value.type.fields, value.values, strict=True)
        )
        return f"{value.type.name} {{ {fields} }}"
    if isinstance(value, ModuleValue):
        return f"<module {value.name}>"
    if isinstance(value, np.dtype):
        return DTYPE_NAMES.get(value, str(value))
    display = getattr(value, "display", None)  # a function value: `<fn name>`, `<fn(x) at file:3:9>`
    if display is not None:
        return display
    name = getattr(value, "name", None)
    return f"<fn {name}>" if name else repr(value)


def format_with_spec(value: Any, spec: str) -> str:
    """An f-string field's text: with no spec, as `print` shows the value; with one, as Python's `format`
    shows a number or a string, a bool as the text `true` or `false`, and a tensor as `print` lays it out
    with each element formatted so. Raises `ValueError` for a spec that does not fit the value."""
    if not spec:
        return format_value(value)
    if value.__class__ in DEVICE_ARRAYS:  # shown on the host, as `print` shows it
        value = DEVICE_ARRAYS[value.__class__].download(value)
    if isinstance(value, np.ndarray) and value.ndim:
        return np.array2string(value, separator=" ", formatter={"all": lambda item: format_scalar(item, spec)})
    return format_scalar(value, spec)


def format_scalar(value: Any, spec: str) -> str:
    if isinstance(value, np.ndarray):
        value = value[()]
    if value is True or value is False or isinstance(value, np.bool_):
        return format("true" if value else "false", spec)
    if isinstance(value, (int, np.integer)):
        return format(int(value), spec)
    if isinstance(value, np.floating):
        return format(float(value), spec)
    if isinstance(value, float):  # an f32 held as a Python float, as `print` takes it
        return format(float(np.float32(value)), spec)
    if isinstance(value, str):
        return format(value, spec)
    raise ValueError(f"a format spec applies to a number, a string or a tensor, not {format_value(value)}")


def float_steps(bounds: list[float], wide: bool) -> tuple[float, float, int]:
    """An `arange` of float bounds (one to three, as given) as `(start, step, count)`: `count` values `start + i
    step`, `ceil((stop - start) / step)` of them, that arithmetic done in the bounds' dtype (f64 if `wide`, else
    f32), as numpy's `arange` of such scalars does: with the f32 0.3 and 0.1, three steps from 0 (in f64,
    3.0000000745 steps: four, the last one the stop itself once rounded). Raises `ValueError`, saying why, for a
    step of 0, a bound not finite or more steps than a number holds."""
    start, stop, step = (0.0, bounds[0], 1.0) if len(bounds) == 1 else (*bounds, 1.0)[:3]
    if step == 0.0:
        raise ValueError("`arange`'s step is 0")
    if not math.isfinite(start + stop + step):
        raise ValueError("`arange`'s bounds must be finite")
    kind = np.float64 if wide else np.float32
    with np.errstate(all="ignore"):
        steps = float(kind((kind(stop) - kind(start)) / kind(step)))
    if not math.isfinite(steps):
        raise ValueError(
            f"`arange` from {start} to {stop} by {step} counts more steps than an {'f64' if wide else 'f32'} holds"
        )
    return start, step, max(math.ceil(steps), 0)
