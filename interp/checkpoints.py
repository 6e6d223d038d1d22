"""`save(path, value)` and `load(path, like)`: tensors, tuples and structs of them in safetensors files.

A checkpoint is a flat safetensors file (read and written with the `safetensors`
package's numpy API; no pickle, so loading never runs code). Each tensor of a
value gets a dotted name: a struct's fields by name, a tuple's items by position
(`w1`, `layers.0.w`, `opt.1.b`); a bare tensor is stored as `value`. DL's dtypes
map one to one onto safetensors' (f32 F32, f64 F64, i32 I32, i64 I64, bool BOOL).

`save` writes the file with `dl.lang.files.write_atomically` (a temporary file beside
the target, flushed to disk, then renamed onto it), so the target always holds either
the previous checkpoint or the new one, never a part; it refuses a target that is not a
regular file (/dev/null is never replaced) and writes through a symbolic link. `load`
reads only regular files (`dl.lang.files.read_bytes`). `load` checks
the file against `like` before building anything: it parses, it holds exactly the
names `like` has, and each tensor has the dtype and shape of `like`'s. Every
mistake raises `CheckpointError`, which the dispatcher (interp/dispatch.py)
reports as E0521.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from dl.lang.files import read_bytes, write_atomically
from dl.runtime.values import DTYPE_NAMES, StructValue, describe

WHOLE = "value"  # the name a bare tensor is stored under
DL_DTYPES = frozenset(DTYPE_NAMES)


class CheckpointError(Exception):
    """A checkpoint that cannot be written or read, or does not fit the value asked for."""


# ---------------------------------------------------------------------- names


def named_tensors(value: Any, what: str) -> dict[str, np.ndarray]:
    """The tensors of a tensor, tuple or struct (nested) by their dotted names, in order."""
    found: dict[str, np.ndarray] = {}

    def walk(item: Any, name: str) -> None:
        if item.__class__ is tuple:
            for position, part in enumerate(item):
                walk(part, f"{name}.{position}" if name else str(position))
        elif item.__class__ is StructValue:
            for field, part in zip(item.type.fields, item.values, strict=True):
                walk(part, f"{name}.{field}" if name else field)
        else:
            found[name or WHOLE] = as_tensor(item, name or WHOLE, what)

    walk(value, "")
    return found


def as_tensor(value: Any, name: str, what: str) -> np.ndarray:
    """A number or tensor as an array of its DL dtype (a Python float is f32, int i64, bool bool)."""
    if isinstance(value, (np.ndarray, np.generic)):  # first: np.float64 is a Python float too
        if value.dtype in DL_DTYPES:
            return np.require(value, requirements="C")  # safetensors stores C-ordered bytes; a scalar stays 0-d
    elif isinstance(value, bool):
        return np.asarray(value, dtype=np.bool_)
    elif isinstance(value, int):
        return np.asarray(value, dtype=np.int64)
    elif isinstance(value, float):
        return np.asarray(value, dtype=np.float32)
    place = "" if name == WHOLE else f" at `{name}`"
    raise CheckpointError(f"{what} holds tensors, and tuples and structs of them, found {describe(value)}{place}")


def rebuilt(like: Any, tensors: dict[str, np.ndarray]) -> Any:
    """`like` with each tensor replaced by the loaded tensor of its name."""

    def walk(item: Any, name: str) -> Any:
        if item.__class__ is tuple:
            return tuple(
                walk(part, f"{name}.{position}" if name else str(position)) for position, part in enumerate(item)
            )
        if item.__class__ is StructValue:
            return StructValue(
                item.type,
                tuple(
                    walk(part, f"{name}.{field}" if name else field)
                    for field, part in zip(item.type.fields, item.values, strict=True)
                ),
            )
        return dl_value(tensors[name or WHOLE])

    return walk(like, "")


def dl_value(tensor: np.ndarray) -> Any:
    """A loaded tensor as the interpreter holds it: an array of its own, or a scalar (i64 and bool as Python's)."""
    if tensor.ndim:
        return np.array(tensor)  # safetensors' arrays view the file's bytes read-only
    item = tensor[()]
    if item.__class__ is np.int64:
        return int(item)
    if item.__class__ is np.bool_:
        return bool(item)
    return item


def shown(tensor: np.ndarray) -> str:
    dtype = DTYPE_NAMES.get(tensor.dtype, str(tensor.dtype))
    return f"{dtype}[{', '.join(str(n) for n in tensor.shape)}]"


SHOWN_NAMES = 8  # of a checkpoint's tensors that `like` does not have, the most a message lists


def listed(names: list[str]) -> str:
    """The names for a message, after "tensor" or "tensors"."""
    return ("tensor " if len(names) == 1 else "tensors ") + ", ".join(f"`{name}`" for name in names)


# ---------------------------------------------------------------------- save


def save(path: Any, value: Any) -> tuple:
    """Write `value` to the safetensors file `path`, replacing what was there only once it is complete."""
    import safetensors.numpy  # imported here, as in `read_checkpoint`: a program that saves nothing does without it

    path = path_of(path, "save")
    tensors = named_tensors(value, "a checkpoint")
    try:
        data = safetensors.numpy.save(tensors)
    except safetensors.SafetensorError as problem:
        raise CheckpointError(f"cannot encode checkpoint `{path}`: {problem}") from None
    try:
        write_atomically(path, data)
    except OSError as problem:
        raise CheckpointError(f"cannot write checkpoint `{path}`: {reason(problem)}") from None
    return ()


def path_of(path: Any, name: str) -> str:
    if not isinstance(path, str):
        raise CheckpointError(f"`{name}` takes the file's path as a string, found {describe(path)}")
    if not path:
        raise CheckpointError(f'`{name}` takes the file\'s path, found the empty string ""')
    return path


def reason(problem: OSError) -> str:
    text = problem.strerror or str(problem)
    return text[:1].lower() + text[1:]


# ---------------------------------------------------------------------- load


def load(path: Any, like: Any, strict: bool = True) -> Any:
    """The value of `like`'s structure, dtypes and shapes stored in the safetensors file `path`. Not `strict`
    (torch's `load_state_dict(strict=False)`: a pretrained part of a larger model), the tensors the file does not
    hold keep `like`'s values and those `like` does not have are left out; a file that holds none of them is
    still refused, as its names cannot be meant."""
    path = path_of(path, "load")
    expected = named_tensors(like, "`like`")
    tensors = read_checkpoint(path)
    missing = [name for name in expected if name not in tensors]
    unexpected = sorted(name for name in tensors if name not in expected)
    if not strict and len(missing) < len(expected):
        tensors = {name: tensors.get(name, tensor) for name, tensor in expected.items()}
        missing, unexpected = [], []
    if missing:
        # what the file holds instead (a PyTorch state dict's `fc1.weight`): what the names must map from
        held = ", ".join(f"`{name}` {shown(tensors[name])}" for name in unexpected[:SHOWN_NAMES])
        more = f", and {len(unexpected) - SHOWN_NAMES} more" if len(unexpected) > SHOWN_NAMES else ""
        instead = f"; it holds {held}{more} instead" if unexpected else ""
        raise CheckpointError(f"checkpoint `{path}` is missing {listed(missing)}, which `like` has{instead}")
    if unexpected:
        raise CheckpointError(f"checkpoint `{path}` has {listed(unexpected)}, which `like` does not have")
    for name, want in expected.items():
        found = tensors[name]
        if found.dtype != want.dtype or found.shape != want.shape:
            raise CheckpointError(
                f"tensor `{name}` of checkpoint `{path}`: expected {shown(want)} (as in `like`), found {shown(found)}"
            )
    return rebuilt(like, tensors)


TORCH_ADVICE = "convert it in Python with `safetensors.torch.save_file(state_dict, path)`"


def foreign_format(data: bytes) -> str | None:
    """What a file that is not safetensors is, by its first bytes, and what to do: PyTorch's `torch.save` (a zip
    archive since 1.6, a pickle before), a pickle, numpy's `.npy` or `.npz`. DL never unpickles."""
    if data.startswith(b"PK\x03\x04"):
        return f"a zip archive (`torch.save`'s: {TORCH_ADVICE}; an .npz archive is read with `load_npz`)"
    if data.startswith(b"\x80") and len(data) > 1 and data[1] <= 5:
        pickled = "a Python pickle (`torch.save`'s before PyTorch 1.6, or `pickle.dump`'s)"
        return f"{pickled}: DL never unpickles; {TORCH_ADVICE}"
    if data.startswith(b"\x93NUMPY"):
        return "a numpy .npy array: save it in an .npz archive (`np.savez`) and read it with `load_npz`"
    return None


def read_checkpoint(path: str) -> dict[str, np.ndarray]:
    import safetensors.numpy

    try:
        data = read_bytes(path)
    except OSError as problem:
        raise CheckpointError(f"cannot read checkpoint `{path}`: {reason(problem)}") from None
    try:
        return safetensors.numpy.load(data)
    except safetensors.SafetensorError as problem:
        detail = str(problem).removeprefix("Error while deserializing: ")
        foreign = foreign_format(data)
        if foreign is not None:
            raise CheckpointError(f"cannot read checkpoint `{path}`: it is not safetensors but {foreign}") from None
        raise CheckpointError(
            f"cannot read checkpoint `{path}`: not a safetensors file, or truncated or corrupt ({detail})"
        ) from None
    except KeyError as problem:  # a dtype numpy cannot hold, such as bfloat16
        raise CheckpointError(
            f"checkpoint `{path}` holds a tensor of dtype {problem.args[0]}, which DL does not have"
        ) from None
