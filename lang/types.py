"""DL's static types: tensors with symbolic shapes, tuples, structs, functions.

A scalar is a 0-d tensor (`f32` and `f32[]` are one type). A dimension is an
`int`, a `DimVar` (a name from a signature, such as `B`: fixed inside the
function, bound per call from outside), a `DimExpr` (`C * 16`, `N + 1`: sums and
products of those), or `UNKNOWN` (`_` or a size that only data decides, checked
at run time). Literals are *weak*: an unsuffixed `2.0`
takes the dtype of what it meets. Types are immutable values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from itertools import count
from typing import TYPE_CHECKING

from dl.lang.record import record

if TYPE_CHECKING:
    from dl.lang.primitives import Prim

DTYPES = ("f32", "f64", "i32", "i64", "bool")
FLOATS = frozenset({"f32", "f64"})
INTEGERS = frozenset({"i32", "i64"})


@record(frozen=True, slots=True)
class DimVar:
    """A named dimension: rigid inside its function, instantiated per call."""

    name: str
    instance: int = 0  # 0 for the signature's own name; >0 for a per-call copy

    def __str__(self) -> str:
        return self.name


@record(frozen=True, slots=True)
class DimExpr:
    """A size computed from dimension names: `C * 16`, `N + 1`. A polynomial with integer coefficients in one
    normal form (terms in order, none zero, at least one name in it), so that equal sizes are equal values:
    `1 + N` and `N + 1` are one `DimExpr`. Built by `dim_arithmetic`, never directly."""

    terms: tuple[tuple[tuple[str, ...], int], ...]  # (the names multiplied, in order; the coefficient)

    def names(self) -> set[str]:
        return {name for names, _ in self.terms for name in names}

    def __str__(self) -> str:
        shown = ""
        for names, coefficient in self.terms:
            factors = [*names, *([str(abs(coefficient))] if abs(coefficient) != 1 or not names else [])]
            term = " * ".join(factors)
            if not shown:
                shown = f"-{term}" if coefficient < 0 else term
            else:
                shown += f" - {term}" if coefficient < 0 else f" + {term}"
        return shown


@record(frozen=True, slots=True)
class Unknown:
    """A dimension only known at run time."""

    def __str__(self) -> str:
        return "_"


UNKNOWN = Unknown()
Dim = int | DimVar | DimExpr | Unknown
Polynomial = dict[tuple[str, ...], int]


def polynomial(dim: Dim) -> Polynomial | None:
    """A size as {names multiplied: coefficient}; None for an unknown one."""
    match dim:
        case int():
            return {(): dim}
        case DimVar(name=name):
            return {(name,): 1}
        case DimExpr(terms=terms):
            return dict(terms)
    return None


def from_polynomial(terms: Polynomial) -> Dim:
    """The normal form: a number, a name, or a `DimExpr`."""
    kept = sorted(((names, c) for names, c in terms.items() if c), key=lambda term: (not term[0], term[0]))
    if not kept:
        return 0
    if len(kept) == 1 and not kept[0][0]:
        return kept[0][1]
    if len(kept) == 1 and len(kept[0][0]) == 1 and kept[0][1] == 1:
        return DimVar(kept[0][0][0])
    return DimExpr(tuple(kept))


def dim_arithmetic(op: str, a: Dim, b: Dim) -> Dim:
    """`a + b`, `a - b` or `a * b` of sizes, symbolically; unknown if either is."""
    left, right = polynomial(a), polynomial(b)
    if left is None or right is None:
        return UNKNOWN
    result: Polynomial = dict(left)
    if op in ("+", "-"):
        sign = 1 if op == "+" else -1
        for names, coefficient in right.items():
            result[names] = result.get(names, 0) + sign * coefficient
        return from_polynomial(result)
    result = {}
    for left_names, left_coefficient in left.items():
        for right_names, right_coefficient in right.items():
            names = tuple(sorted(left_names + right_names))
            result[names] = result.get(names, 0) + left_coefficient * right_coefficient
    return from_polynomial(result)


def exact_quotient(dim: Dim, divisor: int) -> Dim | None:
    """`dim // divisor` where it divides every coefficient (`K * 4 // 4` is `K`); None where it does not."""
    terms = polynomial(dim)
    if terms is None or divisor <= 0 or any(c % divisor for c in terms.values()):
        return None
    return from_polynomial({names: c // divisor for names, c in terms.items()})


def evaluate_dim(dim: Dim, sizes: Mapping[str, Dim]) -> Dim:
    """`dim` with each name replaced by its size in `sizes` (unknown where a name has none)."""
    terms = polynomial(dim)
    if terms is None or isinstance(dim, int):
        return dim
    total: Dim = 0
    for names, coefficient in terms.items():
        term: Dim = coefficient
        for name in names:
            term = dim_arithmetic("*", term, sizes.get(name, UNKNOWN))
        total = dim_arithmetic("+", total, term)
    return total


def has_dim_expression(t: Type) -> bool:
    """Does `t` have a size such as `N + 1` (checked once the names it is made of are bound)?"""
    if isinstance(t, TensorType):
        return any(isinstance(d, DimExpr) for d in t.dims)
    if isinstance(t, TupleType):
        return any(has_dim_expression(item) for item in t.items)
    if isinstance(t, StructType):
        return any(isinstance(d, DimExpr) for d in t.sizes)
    return False


def dim_names_of(dim: Dim) -> set[str]:
    if isinstance(dim, DimVar):
        return {dim.name}
    if isinstance(dim, DimExpr):
        return dim.names()
    return set()


_instances = count(1)


def fresh_instance() -> int:
    return next(_instances)


@record(frozen=True, slots=True)
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


@record(frozen=True, slots=True)
class TupleType:
    items: tuple[Type, ...]

    def __str__(self) -> str:
        inner = ", ".join(str(item) for item in self.items)
        return f"({inner},)" if len(self.items) == 1 else f"({inner})"


@record(frozen=True, slots=True)
class TapeType:
    """A last-in first-out stack of values of one type: what derivative code saves loop state on."""

    item: Type

    def __str__(self) -> str:
        return f"tape({self.item})"


@record(frozen=True, slots=True)
class StructType:
    """Nominal: two structs are the same type when they are the same declaration, of the same sizes.

    A struct may be generic over sizes (`struct Linear[IN, OUT] { w: f32[IN, OUT], b: f32[OUT] }`, or with
    names its fields use freely): `params` names them, `template` is its fields in terms of them, and a
    value's type has `sizes` for them (`Linear[5, 2]`; `_` where unknown) and `fields` with those sizes."""

    name: str
    module: str
    fields: tuple[tuple[str, Type], ...] = field(compare=False)
    sizes: tuple[Dim, ...] = ()
    params: tuple[str, ...] = field(default=(), compare=False)
    template: tuple[tuple[str, Type], ...] = field(default=(), compare=False)

    def field_type(self, name: str) -> Type | None:
        return next((t for n, t in self.fields if n == name), None)

    def with_sizes(self, sizes: tuple[Dim, ...]) -> StructType:
        """This struct of other sizes, its fields' types made of them."""
        named = dict(zip(self.params, sizes, strict=True))
        fields = tuple((name, substitute_dims(t, named)) for name, t in self.template)
        return StructType(self.name, self.module, fields, sizes, self.params, self.template)

    def __str__(self) -> str:
        if all(isinstance(size, Unknown) for size in self.sizes):
            return self.name
        return f"{self.name}[{', '.join(str(size) for size in self.sizes)}]"


def same_struct(a: StructType, b: StructType) -> bool:
    """Could values of these struct types be of one type (one declaration, sizes that may agree)?"""
    return (a.name, a.module) == (b.name, b.module) and all(
        isinstance(x, Unknown) or isinstance(y, Unknown) or x == y for x, y in zip(a.sizes, b.sizes, strict=False)
    )


def substitute_dims(t: Type, sizes: Mapping[str, Dim]) -> Type:
    """`t` with each dimension name in `sizes` replaced by its size (names not in it are unknown)."""
    if isinstance(t, TensorType):
        dims = tuple(
            sizes.get(d.name, UNKNOWN)
            if isinstance(d, DimVar)
            else evaluate_dim(d, sizes)
            if isinstance(d, DimExpr)
            else d
            for d in t.dims
        )
        return TensorType(t.dtype, dims)
    if isinstance(t, TupleType):
        return TupleType(tuple(substitute_dims(item, sizes) for item in t.items))
    if isinstance(t, TapeType):  # a generic function's loop tape, returned by its `_fwd` (lang/autodiff)
        return TapeType(substitute_dims(t.item, sizes))
    if isinstance(t, StructType) and t.params:
        return t.with_sizes(tuple(substitute_dims_of(size, sizes) for size in t.sizes))
    return t


def substitute_dims_of(dim: Dim, sizes: Mapping[str, Dim]) -> Dim:
    if isinstance(dim, DimVar):
        return sizes.get(dim.name, UNKNOWN)
    return evaluate_dim(dim, sizes) if isinstance(dim, DimExpr) else dim


@record(frozen=True, slots=True)
class FunctionType:
    """A function known only by its signature (from an annotation)."""

    params: tuple[Type, ...]
    result: Type

    def __str__(self) -> str:
        return f"fn({', '.join(str(p) for p in self.params)}) -> {self.result}"


@record(frozen=True, slots=True)
class FunctionRef:
    """A particular function value: a declaration (or lambda) checked at each call with the argument types.

    `key` identifies the declaration (a lambda by its id, whatever it captured, so that every closure of one
    lambda has one type); `closure`, for a lambda that captured variables, names the closure: the lambda with the
    types (and static values) of what it captured, which a call is checked with (lang/check.py `closure_key`)."""

    name: str
    key: int
    closure: int | None = field(default=None, compare=False)

    def __str__(self) -> str:
        return self.name if self.name.startswith("fn(") else f"fn {self.name}"


@record(frozen=True, slots=True)
class PrimitiveRef:
    """A built-in function as a value: its `Prim` (lang/primitives.py)."""

    prim: Prim

    @property
    def name(self) -> str:
        return self.prim.value

    def __str__(self) -> str:
        return f"fn {self.name}"


@record(frozen=True, slots=True)
class TransformRef:
    """`grad` or `value_and_grad` as a value, before it is given a function."""

    name: str

    def __str__(self) -> str:
        return f"fn {self.name}"


@record(frozen=True, slots=True)
class GradientRef:
    """`grad(f, wrt=...)` or `value_and_grad(f, ...)`: a function whose type follows from `f`'s at each call.
    `wrt` is one argument position or a tuple of them (the gradient is then a tuple). With `has_aux`, `f`
    returns `(loss, aux)`: the gradient is the loss's, and `aux` comes back beside it, as in JAX."""

    function: Type
    wrt: int | tuple[int, ...]
    with_value: bool
    span: object = field(default=None, compare=False)  # the `grad(...)` call, for diagnostics
    site: int = field(default=0, compare=False)  # the id of that call (`Typed.instances_called`)
    has_aux: bool = False

    def __str__(self) -> str:
        name = "value_and_grad" if self.with_value else "grad"
        return f"{name}({self.function})"


@record(frozen=True, slots=True)
class StrType:
    def __str__(self) -> str:
        return "str"


@record(frozen=True, slots=True)
class DTypeType:
    """The type of a dtype name used as a value, as in `dtype=f64`."""

    dtype: str

    def __str__(self) -> str:
        return "dtype"


@record(frozen=True, slots=True)
class ModuleType:
    path: str

    def __str__(self) -> str:
        return "module"


@record(frozen=True, slots=True)
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


@record(frozen=True, slots=True)
class DimSource:
    """Where a dimension name of a signature is first found: the parameter (by position), the way into it
    (a tuple item's index, a struct field's name), and the axis; with, where that axis's size is not the
    name itself but `scale * name + offset` (`K * 4` of an axis `K * HEADS`), those numbers."""

    param: int
    steps: tuple[int | str, ...]
    axis: int
    scale: int = 1
    offset: int = 0


def dimension_sources(params: list[Type]) -> dict[str, DimSource]:
    """Each dimension name of these parameter types: where it is first an axis's size, or failing that, first
    one number times it plus another (`K * 4`, `N + 1`), which gives it too."""
    plain: dict[str, DimSource] = {}
    derived: dict[str, DimSource] = {}
    for index, param in enumerate(params):
        for name, steps, axis, size in named_axes(param, ()):
            if isinstance(size, DimVar):
                plain.setdefault(name, DimSource(index, steps, axis))
            else:
                offset = evaluate_dim(size, {name: 0})
                scale = dim_arithmetic("-", evaluate_dim(size, {name: 1}), offset)
                derived.setdefault(name, DimSource(index, steps, axis, scale, offset))
    return {**derived, **plain}


def named_axes(t: Type, steps: tuple[int | str, ...]):
    """(name, steps, axis, size) of each axis of `t` whose size is a dimension name, or a number times one plus
    another number (`K * 4`, `N + 1`)."""
    if isinstance(t, TensorType):
        for axis, dim in enumerate(t.dims):
            if isinstance(dim, DimVar):
                yield dim.name, steps, axis, dim
            elif isinstance(dim, DimExpr) and len(dim.names()) == 1:
                (name,) = dim.names()
                if linear_in(dim, name):
                    yield name, steps, axis, dim
    elif isinstance(t, TupleType):
        for index, item in enumerate(t.items):
            yield from named_axes(item, (*steps, index))
    elif isinstance(t, StructType):
        for name, field_type in t.fields:
            yield from named_axes(field_type, (*steps, name))


def linear_in(dim: Dim, name: str) -> bool:
    """Is `dim` a number times `name` plus a number (the number not 0)?"""
    offset = evaluate_dim(dim, {name: 0})
    scale = dim_arithmetic("-", evaluate_dim(dim, {name: 1}), offset)
    linear = evaluate_dim(dim, {name: 2}) == dim_arithmetic("+", offset, dim_arithmetic("*", scale, 2))
    return isinstance(offset, int) and isinstance(scale, int) and scale != 0 and linear


def dimension_at(t: Type, source: DimSource) -> Dim:
    """The size `source` names in a value of type `t` (a parameter's): unknown where `t` has none."""
    for step in source.steps:
        if isinstance(step, int) and isinstance(t, TupleType) and step < len(t.items):
            t = t.items[step]
        elif isinstance(step, str) and isinstance(t, StructType) and t.field_type(step) is not None:
            t = t.field_type(step)
        else:
            return UNKNOWN
    if not isinstance(t, TensorType) or source.axis >= t.rank:
        return UNKNOWN
    size = t.dims[source.axis]
    if (source.scale, source.offset) == (1, 0) or isinstance(size, Unknown):
        return size
    if isinstance(size, int):
        whole, left = divmod(size - source.offset, source.scale)
        return whole if not left else UNKNOWN
    if source.scale == 1:
        return dim_arithmetic("-", size, source.offset)
    return UNKNOWN  # a symbolic size divided: left to the run


def scalar(dtype: str, weak: bool = False) -> TensorType:
    return TensorType(dtype, (), weak)


def is_scalar(t: Type, dtypes: frozenset[str] | tuple[str, ...] | None = None) -> bool:
    return isinstance(t, TensorType) and not t.dims and (dtypes is None or t.dtype in dtypes)


def strong(t: Type) -> Type:
    """A weak literal type made concrete: the default dtype it has on its own."""
    if isinstance(t, TensorType) and t.weak:
        return TensorType(t.dtype, t.dims, False, t.value)
    return t
