"""DL's static types: tensors with symbolic shapes, tuples, structs, functions.

A scalar is a 0-d tensor (`f32` and `f32[]` are one type). A dimension is an
`int`, a `DimVar` (a name from a signature, such as `B`: fixed inside the
function, bound per call from outside), or `UNKNOWN` (`_` or a size that only
data decides, checked at run time). Literals are *weak*: an unsuffixed `2.0`
takes the dtype of what it meets. Types are immutable values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import count
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dl.lang.primitives import Prim

DTYPES = ("f32", "f64", "i32", "i64", "bool")
FLOATS = frozenset({"f32", "f64"})
INTEGERS = frozenset({"i32", "i64"})


@dataclass(frozen=True, slots=True)
class DimVar:
    """A named dimension: rigid inside its function, instantiated per call."""

    name: str
    instance: int = 0  # 0 for the signature's own name; >0 for a per-call copy

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class Unknown:
    """A dimension only known at run time."""

    def __str__(self) -> str:
        return "_"


UNKNOWN = Unknown()
Dim = int | DimVar | Unknown
_instances = count(1)


def fresh_instance() -> int:
    return next(_instances)


@dataclass(frozen=True, slots=True)
class TensorType:
    dtype: str
    dims: tuple[Dim, ...] = ()
    weak: bool = field(default=False, compare=False)  # an unsuffixed literal, not yet given a dtype
    value: Dim | None = field(default=None, compare=False)  # for an i64 scalar known to equal a dimension

    @property
    def rank(self) -> int:
        return len(self.dims)

    def __str__(self) -> str:
        if not self.dims:
            return self.dtype
        return f"{self.dtype}[{', '.join(str(d) for d in self.dims)}]"


@dataclass(frozen=True, slots=True)
class TupleType:
    items: tuple[Type, ...]

    def __str__(self) -> str:
        inner = ", ".join(str(item) for item in self.items)
        return f"({inner},)" if len(self.items) == 1 else f"({inner})"


@dataclass(frozen=True, slots=True)
class TapeType:
    """A last-in first-out stack of values of one type: what derivative code saves loop state on."""

    item: Type

    def __str__(self) -> str:
        return f"tape({self.item})"


@dataclass(frozen=True, slots=True)
class StructType:
    """Nominal: two structs are the same type when they are the same declaration."""

    name: str
    module: str
    fields: tuple[tuple[str, Type], ...] = field(compare=False)

    def field_type(self, name: str) -> Type | None:
        return next((t for n, t in self.fields if n == name), None)

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class FunctionType:
    """A function known only by its signature (from an annotation)."""

    params: tuple[Type, ...]
    result: Type

    def __str__(self) -> str:
        return f"fn({', '.join(str(p) for p in self.params)}) -> {self.result}"


@dataclass(frozen=True, slots=True)
class FunctionRef:
    """A particular function value: a declaration (or lambda) checked at each call with the argument types.

    `key` identifies the declaration; `environment` holds the types of captured names for lambdas."""

    name: str
    key: int
    environment: tuple = field(default=(), compare=False)

    def __str__(self) -> str:
        return self.name if self.name.startswith("fn(") else f"fn {self.name}"


@dataclass(frozen=True, slots=True)
class PrimitiveRef:
    """A built-in function as a value: its `Prim` (lang/primitives.py)."""

    prim: Prim

    @property
    def name(self) -> str:
        return self.prim.value

    def __str__(self) -> str:
        return f"fn {self.name}"


@dataclass(frozen=True, slots=True)
class TransformRef:
    """`grad` or `value_and_grad` as a value, before it is given a function."""

    name: str

    def __str__(self) -> str:
        return f"fn {self.name}"


@dataclass(frozen=True, slots=True)
class GradientRef:
    """`grad(f, wrt=...)` or `value_and_grad(f, ...)`: a function whose type follows from `f`'s at each call.
    `wrt` is one argument position or a tuple of them (the gradient is then a tuple)."""

    function: Type
    wrt: int | tuple[int, ...]
    with_value: bool
    span: object = field(default=None, compare=False)  # the `grad(...)` call, for diagnostics

    def __str__(self) -> str:
        name = "value_and_grad" if self.with_value else "grad"
        return f"{name}({self.function})"


@dataclass(frozen=True, slots=True)
class StrType:
    def __str__(self) -> str:
        return "str"


@dataclass(frozen=True, slots=True)
class DTypeType:
    """The type of a dtype name used as a value, as in `dtype=f64`."""

    dtype: str

    def __str__(self) -> str:
        return "dtype"


@dataclass(frozen=True, slots=True)
class ModuleType:
    path: str

    def __str__(self) -> str:
        return "module"


@dataclass(frozen=True, slots=True)
class AnyType:
    """Stands in after an error (so one mistake is reported once) and for values only known at run time."""

    def __str__(self) -> str:
        return "_"


ANY = AnyType()
STR = StrType()
UNIT = TupleType(())
BOOL = TensorType("bool")
I64 = TensorType("i64")
F32 = TensorType("f32")

Type = (
    TensorType
    | TupleType
    | StructType
    | TapeType
    | FunctionType
    | FunctionRef
    | PrimitiveRef
    | TransformRef
    | GradientRef
    | StrType
    | DTypeType
    | ModuleType
    | AnyType
)


@dataclass(frozen=True, slots=True)
class DimSource:
    """Where a dimension name of a signature is first found: the parameter (by position), the way into it
    (a tuple item's index, a struct field's name), and the axis."""

    param: int
    steps: tuple[int | str, ...]
    axis: int


def dimension_sources(params: list[Type]) -> dict[str, DimSource]:
    """Each dimension name of these parameter types, at its first plain occurrence (an axis of size `C`)."""
    found: dict[str, DimSource] = {}
    for index, param in enumerate(params):
        for name, steps, axis in named_axes(param, ()):
            found.setdefault(name, DimSource(index, steps, axis))
    return found


def named_axes(t: Type, steps: tuple[int | str, ...]):
    """(name, steps, axis) of each axis of `t` whose size is a dimension name."""
    if isinstance(t, TensorType):
        for axis, dim in enumerate(t.dims):
            if isinstance(dim, DimVar):
                yield dim.name, steps, axis
    elif isinstance(t, TupleType):
        for index, item in enumerate(t.items):
            yield from named_axes(item, (*steps, index))


def dimension_at(t: Type, source: DimSource) -> Dim:
    """The size at `source`'s steps and axis of a value of type `t` (a parameter's): unknown where `t` has none."""
    for step in source.steps:
        if isinstance(step, int) and isinstance(t, TupleType) and step < len(t.items):
            t = t.items[step]
        else:
            return UNKNOWN
    if isinstance(t, TensorType) and source.axis < t.rank:
        return t.dims[source.axis]
    return UNKNOWN


def scalar(dtype: str, weak: bool = False) -> TensorType:
    return TensorType(dtype, (), weak)


def is_scalar(t: Type, dtypes: frozenset[str] | tuple[str, ...] | None = None) -> bool:
    return isinstance(t, TensorType) and not t.dims and (dtypes is None or t.dtype in dtypes)


def strong(t: Type) -> Type:
    """A weak literal type made concrete: the default dtype it has on its own."""
    if isinstance(t, TensorType) and t.weak:
        return TensorType(t.dtype, t.dims, False, t.value)
    return t
