"""Run-time checks of annotations the checker could not prove (`_` or data-dependent sizes).

`conforms(value, expected, bindings)` compares a run-time value with a static
type: dtype, rank, every integer dimension, and each dimension variable bound
consistently (the first value seen binds it, in `bindings`, shared by one call's
parameters and result); a size such as `N + 1` is checked once its names are bound.
It returns None when the value fits, else a short description of the mismatch for
the diagnostic.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from dl.lang.types import DimExpr, DimVar, StructType, TensorType, TupleType, Type, evaluate_dim
from dl.runtime.values import StructValue, describe, dtype_name


def conforms(value: Any, expected: Type, bindings: dict[str, int]) -> str | None:
    match expected:
        case TensorType():
            return tensor_conforms(value, expected, bindings)
        case TupleType(items=items):
            if value.__class__ is not tuple or len(value) != len(items):
                return f"expected {expected}, found {describe(value)}"
            for item, item_type in zip(value, items, strict=True):
                problem = conforms(item, item_type, bindings)
                if problem is not None:
                    return problem
            return None
        case StructType(fields=fields, sizes=sizes) if sizes:  # a struct of sizes: its fields have them
            values = getattr(value, "values", None)
            if not isinstance(values, tuple) or len(values) != len(fields):
                return f"expected {expected}, found {describe(value)}"
            for (name, field_type), item in zip(fields, values, strict=True):
                problem = conforms(item, field_type, bindings)
                if problem is not None:
                    return f"field `{name}`: {problem}"
            return None
    return None  # structs of no sizes, functions and strings are proven statically


def tensor_conforms(value: Any, expected: TensorType, bindings: dict[str, int]) -> str | None:
    if isinstance(value, (tuple, str, StructValue)) or callable(value):
        return f"expected {expected}, found {describe(value)}"
    shape = np.shape(value)
    if dtype_name(value) != expected.dtype or len(shape) != len(expected.dims):
        return f"expected {expected}, found {shown(value, shape)}"
    for axis, (dim, size) in enumerate(zip(expected.dims, shape, strict=True)):
        if isinstance(dim, DimVar):
            bound = bindings.setdefault(dim.name, size)
            if bound != size:
                found = shown(value, shape)
                return f"expected {expected} with `{dim}` = {bound}, found {found} (axis {axis} has {size})"
        elif isinstance(dim, int) and dim != size:
            return f"expected {expected}, found {shown(value, shape)} (axis {axis} has {size}, not {dim})"
    for axis, (dim, size) in enumerate(zip(expected.dims, shape, strict=True)):  # `N + 1`, its names bound
        wanted = evaluate_dim(dim, bindings) if isinstance(dim, DimExpr) else None
        if isinstance(wanted, int) and wanted != size:
            found = shown(value, shape)
            return f"expected {expected}, found {found} (axis {axis} has {size}, not `{dim}` = {wanted})"
    return None


def shown(value: Any, shape: tuple) -> str:
    """How a mismatching value is shown: its type, with its shape for a tensor."""
    return describe(value) if shape else dtype_name(value)
