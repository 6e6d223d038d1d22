"""Shape algebra and the checker's rule for every primitive.

`broadcast`, `promote`, `matmul_shape` work on symbolic dimensions (lang/types.py).
Each primitive's record (lang/primitives.py) holds its rule from here: a function computing
the result type of a call from the argument types (and the argument expressions, for static
values such as `axis=1` or `reshape(x, 2, 3)`). A rule raises `ShapeError` with a message in
the user's terms; the checker turns it into a diagnostic at the call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from functools import reduce
from math import prod

from dl.lang import einsum
from dl.lang.diagnostics import Span
from dl.lang.record import record
from dl.lang.types import (
    ANY,
    BOOL,
    FLOATS,
    I64,
    INTEGERS,
    STR,
    UNIT,
    UNKNOWN,
    AnyType,
    Dim,
    DimVar,
    DTypeType,
    StrType,
    StructType,
    TapeType,
    TensorType,
    TupleType,
    Type,
    Unknown,
    dim_arithmetic,
    exact_quotient,
    same_struct,
    strong,
)


class ShapeError(Exception):
    """A type or shape mistake in one operation: `code`, message, an optional label, and `at`, the span of
    the argument at fault when it is not the whole call (an `axis=` out of range)."""

    def __init__(
        self, code: str, message: str, label: str = "", notes: tuple[str, ...] = (), at: Span | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.label = label
        self.notes = notes
        self.at = at


@record(frozen=True, slots=True)
class Argument:
    """One argument as a rule sees it: its type and, when known statically, its integer value."""

    type: Type
    value: Dim | None = None  # a statically known integer (literal, const, len(x), ...)
    given: bool = True  # False when the parameter took its default
    span: Span | None = field(default=None, compare=False)
    # for a function argument: the type of its result for these argument types (None: it cannot take them)
    apply: Callable[[list[Type]], Type | None] | None = field(default=None, compare=False)
    text: str | None = None  # a string literal's text (an einsum spec)


# ---------------------------------------------------------------------- dimensions


def same_dim(a: Dim, b: Dim) -> bool:
    """Could `a` and `b` be the same size? Unknown matches anything; named ones must match by name."""
    return isinstance(a, Unknown) or isinstance(b, Unknown) or a == b


def join_dim(a: Dim, b: Dim) -> Dim:
    if isinstance(a, Unknown):
        return b
    return a


def picks_in_place(picks: list[bool]) -> bool:
    """numpy's rule for indexing by integer tensors: `picks` says of each index as written whether it picks
    (an integer or an index tensor) or not (a slice, a `...`). The picked dimensions stand in place of the
    picked axes when nothing parts these, not even a `...` that stands for no axis; else they come first.
    (True where nothing picks.)"""
    at = [k for k, pick in enumerate(picks) if pick]
    return not at or all(picks[at[0] : at[-1] + 1])


def broadcast_dims(a: tuple[Dim, ...], b: tuple[Dim, ...]) -> tuple[Dim, ...] | None:
    """numpy broadcasting on symbolic dims; None when they cannot broadcast."""
    result: list[Dim] = []
    for position in range(1, max(len(a), len(b)) + 1):
        left = a[-position] if position <= len(a) else 1
        right = b[-position] if position <= len(b) else 1
        if left == 1:
            result.append(right)
        elif right == 1 or left == right:
            result.append(left)
        elif isinstance(left, Unknown) or isinstance(right, Unknown):
            result.append(right if isinstance(left, Unknown) else left)
        else:
            return None
    return tuple(reversed(result))


# ---------------------------------------------------------------------- dtypes

PROMOTION_ORDER = {"bool": 0, "i32": 1, "i64": 2, "f32": 3, "f64": 4}


def promote_dtypes(a: TensorType, b: TensorType) -> str:
    """DL's promotion: a weak literal takes the other side's dtype; an integer meeting a float takes the float's;
    otherwise the wider of the two."""
    if a.weak and not b.weak:
        return b.dtype if not (a.dtype in FLOATS and b.dtype not in FLOATS) else a.dtype
    if b.weak and not a.weak:
        return a.dtype if not (b.dtype in FLOATS and a.dtype not in FLOATS) else b.dtype
    if a.dtype in FLOATS and b.dtype in INTEGERS:
        return a.dtype
    if b.dtype in FLOATS and a.dtype in INTEGERS:
        return b.dtype
    return a.dtype if PROMOTION_ORDER[a.dtype] >= PROMOTION_ORDER[b.dtype] else b.dtype


def widens_f32(a: TensorType, b: TensorType) -> bool:
    return not a.weak and not b.weak and {a.dtype, b.dtype} == {"f32", "f64"}


def tensor(t: Type, what: str) -> TensorType | None:
    """The tensor type of an operand, None if it is unknown (ANY); a non-tensor is an error."""
    if isinstance(t, AnyType):
        return None
    if not isinstance(t, TensorType):
        raise ShapeError("E0311", f"{what} needs a tensor or number, found {t}", str(t))
    return t


def broadcast(a: TensorType, b: TensorType, symbol: str) -> tuple[Dim, ...]:
    dims = broadcast_dims(a.dims, b.dims)
    if dims is None:
        notes = broadcast_notes(a, b)
        if symbol == "*" and a.rank >= 2 and b.rank >= 2 and same_dim(a.dims[-1], b.dims[-2]):
            notes = (*notes, "help: `*` multiplies element by element; `@` multiplies matrices")
        raise ShapeError("E0303", f"shapes do not broadcast: {a} {symbol} {b}", f"{a} {symbol} {b}", notes=notes)
    return dims


def broadcast_notes(a: TensorType, b: TensorType) -> tuple[str, ...]:
    for position in range(1, min(a.rank, b.rank) + 1):
        left, right = a.dims[-position], b.dims[-position]
        if (
            left != right
            and 1 not in (left, right)
            and not isinstance(left, Unknown)
            and not isinstance(right, Unknown)
        ):
            if isinstance(left, DimVar) and isinstance(right, DimVar):
                return (f"`{left}` and `{right}` may differ; give them one name if they are the same size",)
            if isinstance(left, DimVar) or isinstance(right, DimVar):
                name, size = (left, right) if isinstance(left, DimVar) else (right, left)
                return (f"`{name}` is any size, so it need not be {size}",)
            return (f"dimension {left} and dimension {right} differ, and neither is 1",)
    return ()


# ---------------------------------------------------------------------- operators


def arithmetic(a: Type, b: Type, symbol: str) -> Type:
    if isinstance(a, StrType) or isinstance(b, StrType):
        return joined_text(a, b, symbol)
    if is_tree(a) or is_tree(b):
        return tree_arithmetic(a, b, symbol)
    left, right = tensor(a, f"`{symbol}`"), tensor(b, f"`{symbol}`")
    if left is None or right is None:
        return ANY
    if "bool" in (left.dtype, right.dtype):
        raise ShapeError(
            "E0311",
            f"`{symbol}` needs numbers, found {left} {symbol} {right}",
            f"{left} {symbol} {right}",
            notes=("help: convert a bool with `float(b)` or choose values with `where(c, a, b)`",),
        )
    if symbol == "/" and left.dtype in INTEGERS and right.dtype in INTEGERS:
        raise ShapeError(
            "E0310",
            f"`/` divides floats, found {left} / {right}",
            f"{left} / {right}",
            notes=("help: use `//` for integer division, or convert with `float(x)`",),
        )
    dims = broadcast(left, right, symbol)
    # a weak float meeting integers stays weak (`0.5 * n`, `beta ** t`): a float it meets later gives the dtype
    weak = all(
        side.weak or (side.dtype in INTEGERS and other.weak and other.dtype in FLOATS)
        for side, other in ((left, right), (right, left))
    )
    return TensorType(promote_dtypes(left, right), dims, weak)


# ---------------------------------------------------------------------- arithmetic on trees
# `m - lr * g` for a parameter struct `m` and its gradient `g`: the operator leaf by leaf, as JAX's
# `tree_map(lambda p, q: p - lr * q, m, g)`. Two trees meet when they have one structure (the same struct,
# tuples of one length); a number (a scalar) meets every leaf of a tree.

TREE_OPERATORS = frozenset({"+", "-", "*", "/", "**"})
# `+` of tuples is arithmetic, item by item, as on structs; a Python user may mean joining them
TUPLES_ADDED = (
    "note: `+` adds tuples item by item, as it adds structs; it does not join them (tuples have a fixed length)",
    "help: to collect a value per step, write each into a tensor made before the loop: "
    "`let outs = zeros(n, ...)`, then `outs[i] = h` (or `concat` them once, after the loop)",
)
TREE_MAP_HELP = "help: apply a function leaf by leaf with `tree_map(fn(p, q) => p - 0.1 * q, m, g)`"


def is_tree(t: Type) -> bool:
    return isinstance(t, (StructType, TupleType))


def tree_arithmetic(a: Type, b: Type, symbol: str) -> Type:
    """The type of `a symbol b` where one side is a struct or tuple of tensors: a tree of the same structure."""
    shown = f"{a} {symbol} {b}"
    if symbol not in TREE_OPERATORS:
        raise ShapeError(
            "E0311",
            f"`{symbol}` needs a tensor or number, found {shown}",
            shown,
            notes=("`+ - * / **` apply to structs and tuples leaf by leaf, not this operator", TREE_MAP_HELP),
        )
    return tree_leaves(a, b, symbol, shown, "")


def tree_leaves(a: Type, b: Type, symbol: str, shown: str, where: str) -> Type:
    """`a symbol b` leaf by leaf (`where`: the path to this place, for messages)."""
    if isinstance(a, AnyType) or isinstance(b, AnyType):
        return ANY
    if not is_tree(a) and not is_tree(b):
        return strong(arithmetic(a, b, symbol))
    tree, other = (a, b) if is_tree(a) else (b, a)
    ordered = (lambda x, y: (x, y)) if tree is a else (lambda x, y: (y, x))
    if not is_tree(other) and not (isinstance(other, TensorType) and other.rank == 0):
        raise ShapeError(
            "E0311",
            f"`{symbol}` of a struct or tuple needs one of the same structure or a number, found {shown}",
            shown,
            notes=(f"a struct or tuple meets a scalar leaf by leaf, not {other}", TREE_MAP_HELP),
        )
    if is_tree(other) and (
        type(other) is not type(tree) or (isinstance(tree, StructType) and not same_struct(other, tree))
    ):
        pair = next((t for t in (tree, other) if isinstance(t, TupleType) and len(t.items) == 2), None)
        notes = ()
        if pair is not None and isinstance(pair.items[0], TensorType) and not pair.items[0].rank:
            notes = ("help: `value_and_grad` gives (value, gradient): `let (loss, g) = value_and_grad(f)(...)`",)
        raise ShapeError(
            "E0311", f"`{symbol}` of two trees needs them of one structure, found {shown}", shown, notes=notes
        )
    if isinstance(tree, TupleType):
        if isinstance(other, TupleType) and len(other.items) != len(tree.items):
            notes = TUPLES_ADDED if symbol == "+" else ()
            raise ShapeError(
                "E0311", f"`{symbol}` of two tuples needs them of one length, found {shown}", shown, notes=notes
            )
        items = []
        for i, item in enumerate(tree.items):
            paired = other.items[i] if isinstance(other, TupleType) else other
            items.append(tree_leaves(*ordered(item, paired), symbol, shown, f"{where}[{i}]"))
        return TupleType(tuple(items))
    for field_name, field_type in tree.fields:
        place = f"{where}.{field_name}" if where else field_name
        paired = other.field_type(field_name) if is_tree(other) else other
        found = tree_leaves(*ordered(field_type, paired), symbol, shown, place)
        if not item_fits(field_type, found):
            raise ShapeError(
                "E0301",
                f"`{symbol}` would make field `{place}` of {tree} {found}, but the field is {field_type}",
                shown,
                notes=(f"help: a struct keeps its type, so the result for `{place}` must be {field_type}",),
            )
    return tree


def joined_text(a: Type, b: Type, symbol: str) -> Type:
    """`"epoch " + name`: `+` joins two strings; nothing else applies to one."""
    if symbol == "+" and all(isinstance(t, (StrType, AnyType)) for t in (a, b)):
        return STR
    if symbol == "+":
        raise ShapeError(
            "E0311",
            f"`+` joins two strings, found {a} + {b}",
            f"{a} + {b}",
            notes=('help: make the other a string with `str(x)`, or write an f-string: `f"epoch {epoch}"`',),
        )
    raise ShapeError(
        "E0311",
        f"`{symbol}` needs numbers, found {a} {symbol} {b}",
        f"{a} {symbol} {b}",
        notes=("strings join with `+` and compare with `==` and `!=`",),
    )


# ---------------------------------------------------------------------- formatting
# An f-string field shows any value `print` shows, as `str(x)` does; a format spec (Python's) applies to a
# number, a bool (shown as `true` or `false`, so as text), a string, or each element of a tensor.

FORMAT_SAMPLES = {"f32": 0.0, "f64": 0.0, "i32": 0, "i64": 0, "bool": "true"}
FORMAT_HELP = {
    "f32": "for a float: `.4f`, `.3e`, `.1%`, `>10.4f`, `,.2f`",
    "i64": "for an integer: `d`, `,`, `x`, `b`, `05d`, `>6`, `.2f`",
    "bool": "for text, and a bool shown as `true` or `false`: `>8`, `<8`, `^8`, `.3`",
}


def check_format(t: Type, spec: str) -> None:
    """Raise `ShapeError` (E0324) unless a value of type `t` can be shown with the format spec `spec`: with
    none, anything `print` shows; with one, a number, a string or a tensor that Python's spec fits."""
    if isinstance(t, AnyType) or not spec:
        return
    if isinstance(t, (TensorType, StrType)):
        check_spec(t, spec)
        return
    raise ShapeError(
        "E0324",
        f"a format spec applies to a number, a string or a tensor, found {t}",
        str(t),
        notes=("help: format its parts, each in a field of its own, or drop the spec",),
    )


def check_spec(t: TensorType | StrType, spec: str) -> None:
    dtype = "bool" if isinstance(t, StrType) else t.dtype
    sample = "" if isinstance(t, StrType) else FORMAT_SAMPLES[t.dtype]
    try:
        format(sample, spec)
    except ValueError as problem:
        shown = "str" if isinstance(t, StrType) else dtype
        whose = f" (each element of {t})" if isinstance(t, TensorType) and t.dims else ""
        kind = "f32" if dtype in FLOATS else "i64" if dtype in INTEGERS else "bool"
        raise ShapeError(
            "E0324",
            f"format spec `{spec}` does not apply to {shown}{whose}",
            f"{shown}{whose}",
            notes=(f"Python's format says: {problem}", f"help: {FORMAT_HELP[kind]}"),
        ) from None


def not_on_trees(a: Type, b: Type, symbol: str) -> None:
    """An operator that does not apply leaf by leaf (a comparison, `@`, `and`) met a struct or tuple."""
    if is_tree(a) or is_tree(b):
        shown = f"{a} {symbol} {b}"
        raise ShapeError(
            "E0311",
            f"`{symbol}` needs tensors or numbers, found {shown}",
            shown,
            notes=("`+ - * / **` apply to structs and tuples leaf by leaf; other operators do not", TREE_MAP_HELP),
        )


def comparison(a: Type, b: Type, symbol: str) -> Type:
    if symbol in ("==", "!=") and isinstance(a, TupleType) and isinstance(b, TupleType):
        return tuples_compared(a, b, symbol)
    if symbol in ("==", "!=") and any(isinstance(t, AnyType) for t in (a, b)) and any(is_tree(t) for t in (a, b)):
        return BOOL  # a tuple and a value of a type not known here (a parameter of a function no call checks)
    not_on_trees(a, b, symbol)
    texts = [t for t in (a, b) if isinstance(t, StrType)]
    if texts and all(isinstance(t, (StrType, AnyType)) for t in (a, b)) and symbol in ("==", "!="):
        return BOOL  # text is compared whole: `mode == "--resume"` (an unknown side may be text too)
    left, right = tensor(a, f"`{symbol}`"), tensor(b, f"`{symbol}`")
    if left is None or right is None:
        return ANY
    if (left.dtype == "bool") != (right.dtype == "bool") and symbol not in ("==", "!="):
        raise ShapeError("E0311", f"cannot compare {left} {symbol} {right}", f"{left} {symbol} {right}")
    return TensorType("bool", broadcast(left, right, symbol))


def tuples_compared(a: TupleType, b: TupleType, symbol: str) -> TensorType:
    """`shape(x) == shape(y)`: two tuples of scalars (numbers, bools, strings, or tuples of them) compared whole,
    as Python compares them: one bool, true when they have one length and each item equals its partner. Where
    the checker knows the outcome (two sizes it knows differ, or two lengths) the bool's `value` holds it, so
    that an `assert` of it fails before the program runs (`assert_rule`, E0335)."""
    shown = f"{a} {symbol} {b}"
    for item in (*a.items, *b.items):
        scalars_only(item, symbol, shown)
    verdicts: list[bool | None] = [False] if len(a.items) != len(b.items) else []
    for x, y in zip(a.items, b.items, strict=False):
        if isinstance(x, TupleType) and isinstance(y, TupleType):
            verdicts.append(tuples_compared(x, y, "==").value)
            continue
        comparison(x, y, "==")  # a pair that cannot be compared (a number and a string) is an error
        verdicts.append(known_equal(x, y))
    verdict = False if False in verdicts else True if all(v is True for v in verdicts) else None
    if verdict is not None and symbol == "!=":
        verdict = not verdict
    return TensorType("bool", (), False, verdict)


def scalars_only(item: Type, symbol: str, shown: str) -> None:
    """Raise E0311 unless `item`, an item of a compared tuple, is a scalar, a string or a tuple of them."""
    if isinstance(item, TupleType):
        for inner in item.items:
            scalars_only(inner, symbol, shown)
    elif is_tree(item) or (isinstance(item, TensorType) and item.rank > 0):
        raise ShapeError(
            "E0311",
            f"`{symbol}` compares tuples of scalars or strings whole, found {shown}",
            shown,
            notes=("help: compare tensors element by element with `==`, or compare `shape(x) == shape(y)`",),
        )


def known_equal(a: Type, b: Type) -> bool | None:
    """Whether two scalars are equal, where the checker knows both (sizes: `shape(x)[0]`); else None. Two
    names may stand for one size, and two sizes known only when run may be equal, so only two known numbers
    ever differ."""
    if not isinstance(a, TensorType) or not isinstance(b, TensorType):
        return None
    if a.value is None or b.value is None or isinstance(a.value, Unknown) or isinstance(b.value, Unknown):
        return None
    if a.value == b.value:
        return True
    both_numbers = all(isinstance(v, int) and not isinstance(v, bool) for v in (a.value, b.value))
    return False if both_numbers else None


def logical(a: Type, b: Type, symbol: str) -> Type:
    left, right = tensor(a, f"`{symbol}`"), tensor(b, f"`{symbol}`")
    if left is None or right is None:
        return ANY
    if left.dtype != "bool" or right.dtype != "bool":
        raise ShapeError(
            "E0311", f"`{symbol}` needs bool operands, found {left} {symbol} {right}", f"{left} {symbol} {right}"
        )
    return TensorType("bool", broadcast(left, right, symbol))


def matmul_type(a: Type, b: Type) -> Type:
    not_on_trees(a, b, "@")
    left, right = tensor(a, "`@`"), tensor(b, "`@`")
    if left is None or right is None:
        return ANY
    label = f"{left} @ {right}"
    if left.rank == 0 or right.rank == 0:
        raise ShapeError(
            "E0302",
            f"`@` needs tensors of rank 1 or more, found {label}",
            label,
            notes=("help: multiply by a scalar with `*`",),
        )
    if "bool" in (left.dtype, right.dtype):
        raise ShapeError("E0311", f"`@` needs numbers, found {label}", label)
    inner_left = left.dims[-1]
    inner_right = right.dims[-2] if right.rank > 1 else right.dims[0]
    if not same_dim(inner_left, inner_right):
        notes = ()
        if right.rank == 2 and isinstance(inner_left, int) and same_dim(inner_left, right.dims[-1]):
            notes = (  # `x @ w` with PyTorch's nn.Linear weight, [out, in]
                f"help: the right operand's last axis is {inner_left}, the left's: multiply by its transpose, "
                "`x @ transpose(w)` (PyTorch's `nn.Linear` stores its weight as [out, in]; DL's `nn.linear` takes "
                "[in, out])",
            )
        message = f"matmul inner dimensions differ: {inner_left} vs {inner_right}"
        raise ShapeError("E0302", message, label, notes=notes)
    batch_left = left.dims[:-2] if left.rank > 1 else ()
    batch_right = right.dims[:-2] if right.rank > 1 else ()
    batch = broadcast_dims(batch_left, batch_right)
    if batch is None:
        raise ShapeError("E0303", f"matmul batch dimensions do not broadcast: {label}", label)
    rows = (left.dims[-2],) if left.rank > 1 else ()
    columns = (right.dims[-1],) if right.rank > 1 else ()
    return TensorType(promote_dtypes(left, right), batch + rows + columns)


# ---------------------------------------------------------------------- primitive rules

Rule = Callable[[list[Argument]], Type]


def needs_float(t: TensorType, name: str) -> None:
    if t.dtype not in FLOATS:
        raise ShapeError(
            "E0317", f"`{name}` needs a float tensor, found {t}", str(t), notes=("help: convert with `float(x)`",)
        )


def float_help(x: TensorType, value: Dim | None) -> str:
    """How to give a built-in of floats the integers it was given: `4.0` for a literal `4`."""
    if x.weak:
        return f"help: write a float literal: `{value}.0`" if isinstance(value, int) else "help: write a float literal"
    return "help: convert with `float(x)`"


def elementwise(name: str, floats_only: bool = True) -> Rule:
    def rule(args: list[Argument]) -> Type:
        x = tensor(args[0].type, f"`{name}`")
        if x is None:
            return ANY
        if floats_only and x.dtype not in FLOATS:
            raise ShapeError(
                "E0317",
                f"`{name}` needs a float tensor, found {x}",
                str(x),
                notes=(float_help(x, args[0].value),),
            )
        if x.dtype == "bool":
            raise ShapeError("E0317", f"`{name}` needs numbers, found {x}", str(x))
        return TensorType(x.dtype, x.dims)

    return rule


def float_test(name: str) -> Rule:
    """`isnan(x)`, `isinf(x)`, `isfinite(x)`: a bool of `x`'s shape, for floats (an integer is never nan)."""

    def rule(args: list[Argument]) -> Type:
        x = tensor(args[0].type, f"`{name}`")
        if x is None:
            return ANY
        if x.dtype not in FLOATS:
            notes = (f"help: an integer is always finite: `{name}` asks it of floats",) if x.dtype != "bool" else ()
            raise ShapeError("E0317", f"`{name}` needs a float tensor, found {x}", str(x), notes=notes)
        return TensorType("bool", x.dims)

    return rule


def clip_rule(args: list[Argument]) -> Type:
    """`clip(x, lo, hi)`: the three broadcast, and meet as an operator's operands do (literals adapt)."""
    x, lo, hi = (tensor(a.type, "`clip`") for a in args)
    if x is None or lo is None or hi is None:
        return ANY
    if "bool" in (x.dtype, lo.dtype, hi.dtype):
        raise ShapeError("E0311", f"`clip` needs numbers, found {x}, {lo} and {hi}", f"{x}, {lo}, {hi}")
    return strong(arithmetic(arithmetic(x, lo, "clip(..)"), hi, "clip(..)"))


def pairwise(name: str) -> Rule:
    def rule(args: list[Argument]) -> Type:
        left, right = tensor(args[0].type, f"`{name}`"), tensor(args[1].type, f"`{name}`")
        if left is None or right is None:
            return ANY
        if "bool" in (left.dtype, right.dtype):
            raise ShapeError("E0311", f"`{name}` needs numbers, found {left} and {right}", f"{left}, {right}")
        return strong(arithmetic(left, right, f"{name}(..)"))

    return rule


def select(a: Type, b: Type) -> Type:
    """The type of choosing between two values elementwise: numbers promote as in arithmetic; bools stay."""
    left, right = tensor(a, "`where`"), tensor(b, "`where`")
    if left is None or right is None:
        return ANY
    if left.dtype == "bool" and right.dtype == "bool":
        return TensorType("bool", broadcast(left, right, "where(..)"))
    return arithmetic(left, right, "where(..)")


def where_rule(args: list[Argument]) -> Type:
    condition = tensor(args[0].type, "`where`")
    value = select(args[1].type, args[2].type)
    if condition is None or not isinstance(value, TensorType):
        return ANY
    if condition.dtype != "bool":
        raise ShapeError("E0304", f"`where` needs a bool condition, found {condition}", str(condition))
    return TensorType(value.dtype, broadcast(condition, value, "where(..)"))


def static_axis(argument: Argument, rank: int, name: str) -> int | None:
    """The axis an `axis=` argument names, normalized; None for "all axes"."""
    if not argument.given and argument.value is None:
        return None
    if isinstance(argument.type, TensorType) and argument.type.dtype == "bool":
        raise ShapeError("E0306", f"`axis=` takes an integer, found {argument.type}", at=argument.span)
    if not isinstance(argument.value, int):
        if isinstance(argument.type, TensorType) and argument.type.dtype in INTEGERS and argument.type.rank == 1:
            raise ShapeError(  # torch's `dims=[0, 1]`
                "E0306",
                f"`{name}` takes `axis=` as an integer, found {argument.type}",
                notes=("help: a list `[...]` is a tensor: an axis is an integer, and several axes a tuple `(0, 1)`",),
                at=argument.span,
            )
        if isinstance(argument.type, TensorType) and argument.type.dtype in INTEGERS:
            raise ShapeError(
                "E0306",
                f"`{name}` needs `axis=` as a literal integer or const",
                notes=("help: the axis must be known before the program runs (it decides what the call computes)",),
                at=argument.span,
            )
        raise ShapeError("E0306", f"`axis=` takes an integer, found {argument.type}", at=argument.span)
    axis = argument.value
    if not -max(rank, 1) <= axis < max(rank, 1):
        raise ShapeError("E0306", f"axis {axis} is out of range for `{name}` of a rank-{rank} tensor", at=argument.span)
    return axis % rank if rank else 0


def static_axes(argument: Argument, rank: int, name: str, several: bool) -> tuple[int, ...] | None:
    """The axes an `axis=` argument names, normalized and in order: one (`axis=1`) or, where the reduction
    takes `several`, a tuple of them (`axis=(1, 2)`); None for "all axes"."""
    items = argument.type.items if isinstance(argument.type, TupleType) else None
    if items is None:
        axis = static_axis(argument, rank, name)
        return None if axis is None else (axis,)
    if not several:
        raise ShapeError(
            "E0306",
            f"`{name}` takes one axis, found the tuple {argument.type}",
            notes=("help: a position is along one axis; `reshape` the axes into one first",),
            at=argument.span,
        )
    if not items:
        raise ShapeError(
            "E0306", f"`{name}` takes `axis=` as an integer or a non-empty tuple of them", at=argument.span
        )
    axes = []
    for item in items:
        value = item.value if isinstance(item, TensorType) else None
        axes.append(static_axis(Argument(item, value, True, argument.span), rank, name))
    repeated = sorted({axis for axis in axes if axes.count(axis) > 1})
    if repeated:
        raise ShapeError("E0306", f"`{name}`: axis {repeated[0]} is named twice in `axis=`", at=argument.span)
    return tuple(sorted(axes))


def reduction(
    name: str, result_dtype: str | None = None, averages: bool = False, floats_only: bool = False, several=True
) -> Rule:
    """`averages`: the result of an integer tensor is f32 (a mean is a fraction); `several`: `axis=` may name a
    tuple of axes."""

    def rule(args: list[Argument]) -> Type:
        x = tensor(args[0].type, f"`{name}`")
        if x is None:
            return ANY
        if floats_only:
            needs_float(strong_float(x), name)
        axes = static_axes(args[1], x.rank, name, several)
        keepdims = bool(args[2].value)
        dtype = result_dtype or strong_float(x).dtype
        if averages and dtype not in FLOATS:
            dtype = "f32"
        elif name == "sum" and dtype == "bool":  # counting: numpy's sum of bools is an integer
            dtype = "i64"
        if axes is None or x.rank == 0:
            return TensorType(dtype, (1,) * x.rank if keepdims else ())
        if keepdims:
            return TensorType(dtype, tuple(1 if i in axes else d for i, d in enumerate(x.dims)))
        return TensorType(dtype, tuple(d for i, d in enumerate(x.dims) if i not in axes))

    return rule


def truth(name: str) -> Rule:
    """`any(x)`, `all(x)`: a reduction of bools (over all elements, or `axis=` one or a tuple of axes)."""
    reduced = reduction(name, result_dtype="bool")

    def rule(args: list[Argument]) -> Type:
        x = tensor(args[0].type, f"`{name}`")
        if x is not None and x.dtype != "bool":
            example = "x != 0" if x.dtype in INTEGERS else "x != 0.0"
            notes = (f"help: compare to make bools: `{name}({example})`",)
            raise ShapeError("E0317", f"`{name}` needs a bool tensor, found {x}", str(x), notes=notes)
        return reduced(args)

    return rule


def variance_rule(name: str) -> Rule:
    """`var` and `std`: a reduction of floats, whose `correction=` (subtracted from the count it divides by)
    is a number."""
    reduced = reduction(name, floats_only=True)

    def rule(args: list[Argument]) -> Type:
        correction = args[3].type
        number = isinstance(correction, TensorType) and not correction.rank and correction.dtype != "bool"
        if args[3].given and correction is not ANY and not number:
            raise ShapeError(
                "E0317",
                f"`{name}`'s `correction=` takes a number (1 for the sample {name}), found {correction}",
                str(correction),
                at=args[3].span,
            )
        return reduced(args)

    return rule


def along_axes_rule(name: str, several: bool) -> Rule:
    """`flip(x, axis)` (one axis or, where `several`, a tuple of them) and `cumsum(x, axis)`: `x` of rank 1 or
    more keeps its shape; a cumulative sum of bools counts (i64), of other dtypes keeps them (i32 included)."""

    def rule(args: list[Argument]) -> Type:
        x = tensor(args[0].type, f"`{name}`")
        if x is None:
            return ANY
        if x.rank == 0:
            raise ShapeError("E0306", f"`{name}` needs a tensor with an axis, found {x}", str(x))
        static_axes(args[1], x.rank, name, several)
        if name == "cumsum":
            x = strong_float(x)
            return TensorType("i64" if x.dtype == "bool" else x.dtype, x.dims)
        return x

    return rule


def strong_float(x: TensorType) -> TensorType:
    if x.weak and x.dtype in INTEGERS:
        return TensorType("i64", x.dims)
    return strong(x)


def softmax_rule(name: str) -> Rule:
    def rule(args: list[Argument]) -> Type:
        x = tensor(args[0].type, f"`{name}`")
        if x is None:
            return ANY
        needs_float(strong(x), name)
        axis_value = args[1].value if args[1].value is not None else -1
        static_axis(Argument(args[1].type, axis_value, True, args[1].span), x.rank, name)
        return strong(x)

    return rule


def matmul_rule(args: list[Argument]) -> Type:
    return matmul_type(args[0].type, args[1].type)


def transpose_rule(args: list[Argument]) -> Type:
    x = tensor(args[0].type, "`transpose`")
    if x is None:
        return ANY
    axes = args[1:]
    if not axes:
        return TensorType(x.dtype, tuple(reversed(x.dims)))
    values = [a.value for a in axes]
    if any(not isinstance(v, int) for v in values):
        raise ShapeError(
            "E0319", "`transpose` axes must be integers known before running (literals, consts, or names of them)"
        )
    if sorted(values) != list(range(x.rank)):
        # a permutation written for another rank: swapping two axes is what is usually meant
        swap = "help: `swapaxes(x, -2, -1)` exchanges two axes of a tensor of any rank"
        raise ShapeError(
            "E0319",
            f"transpose axes {tuple(values)} are not a permutation of the {x.rank} axes of {x}",
            str(x),
            (swap,) if len(values) != x.rank else (),
        )
    return TensorType(x.dtype, tuple(x.dims[v] for v in values))


def swapaxes_rule(args: list[Argument]) -> Type:
    """`swapaxes(x, axis1, axis2)`: `x` with two axes exchanged, as numpy's `swapaxes` and torch's
    `transpose(dim0, dim1)`. The axes are static integers, negative ones counting from the end, so that
    `swapaxes(k, -2, -1)` transposes the matrices of a batch whatever its rank."""
    x = tensor(args[0].type, "`swapaxes`")
    if x is None:
        return ANY
    dims = list(x.dims)
    first, second = (swapped_axis(argument, x) for argument in args[1:])
    dims[first], dims[second] = dims[second], dims[first]
    return TensorType(x.dtype, tuple(dims))


def swapped_axis(argument: Argument, x: TensorType) -> int:
    if not isinstance(argument.value, int):
        raise ShapeError(
            "E0319",
            "`swapaxes` axes must be integers known before running (literals, consts, or names of them)",
            at=argument.span,
        )
    if not -x.rank <= argument.value < x.rank:
        message = f"axis {argument.value} is out of range for `swapaxes` of a rank-{x.rank} tensor, {x}"
        raise ShapeError("E0319", message, str(x), at=argument.span)
    return argument.value % x.rank


def dims_from(args: list[Argument], name: str) -> tuple[Dim, ...]:
    dims: list[Dim] = []
    for argument in args:
        t = argument.type
        if isinstance(t, AnyType):
            dims.append(UNKNOWN)
            continue
        if not isinstance(t, TensorType) or t.rank or t.dtype not in INTEGERS:
            several = isinstance(t, TupleType) or (isinstance(t, TensorType) and t.rank == 1)
            notes = dimensions_help(name, args) if several else ()
            raise ShapeError("E0301", f"`{name}` takes dimensions as integers, found {t}", str(t), notes)
        value = argument.value
        if isinstance(value, int) and value < 0 and name != "arange" and not (name == "reshape" and value == -1):
            raise ShapeError("E0307", f"`{name}` dimension {value} is negative")
        dims.append(value if value is not None else UNKNOWN)
    return tuple(dims)


def dimensions_help(name: str, args: list[Argument]) -> tuple[str, ...]:
    """How to pass dimensions given as a nested tuple, or as a tuple beside others (`ones((2, 3), 4)`): as
    integers, each its own argument or all in one tuple."""
    values = [value for argument in args for value in flat_values(argument.type)]
    shown = ", ".join(str(v) for v in values) if values and None not in values else "3, 4"
    first = "x, " if name in ("reshape", "broadcast_to") else ""
    notes = [
        f"help: pass the dimensions as integers, each its own argument or all in one tuple: `{name}({first}{shown})`"
    ]
    if name in ("zeros", "ones"):
        notes.append(f"`zeros_like(x){' + 1.0' if name == 'ones' else ''}` has the shape of `x`")
    elif name == "reshape":
        notes.append("`reshape_like(y, x)` gives `y` the shape of `x`")
    return tuple(notes)


def flat_values(given: Type) -> list:
    """The integers a tuple holds, nested tuples flattened (None for one not known)."""
    if isinstance(given, TupleType):
        return [value for item in given.items for value in flat_values(item)]
    return [given.value if isinstance(given, TensorType) else None]


def reshape_rule(args: list[Argument]) -> Type:
    x = tensor(args[0].type, "`reshape`")
    dims = list(dims_from(args[1:], "reshape"))
    if x is None:
        return ANY
    if dims.count(-1) > 1:
        raise ShapeError("E0307", "`reshape` allows only one -1 dimension")
    known_source = all(isinstance(d, int) for d in x.dims)
    known_target = [d for d in dims if d != -1]
    size = prod(x.dims) if known_source else None
    if -1 in dims:
        rest = prod(known_target) if all(isinstance(d, int) for d in known_target) else None
        if size is not None and rest:
            if size % rest:
                raise ShapeError(
                    "E0307", f"cannot reshape {x} ({size} elements) into [{', '.join(map(str, dims))}]", str(x)
                )
            dims[dims.index(-1)] = size // rest
        else:  # `reshape(x, -1, 1, 8, 8)` of an f32[B, 64]: the -1 is B, where the sizes divide exactly
            whole = reduce(lambda a, b: dim_arithmetic("*", a, b), x.dims, 1)
            quotient = exact_quotient(whole, rest) if rest and not isinstance(whole, Unknown) else None
            dims[dims.index(-1)] = quotient if quotient is not None else UNKNOWN
    elif size is not None and all(isinstance(d, int) for d in dims) and prod(dims) != size:
        raise ShapeError(
            "E0307",
            f"cannot reshape {x} ({size} elements) into [{', '.join(map(str, dims))}] ({prod(dims)} elements)",
            str(x),
        )
    return TensorType(x.dtype, tuple(dims))


def tensors_in(argument: Argument, name: str) -> list[TensorType] | None:
    t = argument.type
    if isinstance(t, AnyType):
        return None
    if not isinstance(t, TupleType) or not t.items:
        raise ShapeError(
            "E0316",
            f"`{name}` takes a non-empty tuple of tensors, found {t}",
            notes=(f"help: write `{name}((a, b), axis=0)`",),
        )
    items = [tensor(item, f"`{name}`") for item in t.items]
    if any(item is None for item in items):
        return None
    dtypes = {strong(item).dtype for item in items}
    if len(dtypes) > 1:
        raise ShapeError("E0316", f"`{name}` needs tensors of one dtype, found {t}", str(t))
    return items


def concat_rule(args: list[Argument]) -> Type:
    items = tensors_in(args[0], "concat")
    if items is None:
        return ANY
    rank = items[0].rank
    if rank == 0 or any(item.rank != rank for item in items):
        raise ShapeError("E0316", f"`concat` needs tensors of one rank (1 or more), found {TupleType(tuple(items))}")
    axis = static_axis(args[1] if args[1].value is not None else Argument(I64, 0), rank, "concat")
    dims: list[Dim] = list(items[0].dims)
    for item in items[1:]:
        for position in range(rank):
            if position == axis:
                continue
            if not same_dim(dims[position], item.dims[position]):
                raise ShapeError(
                    "E0316",
                    f"concat needs equal dimensions except along axis {axis}, found {TupleType(tuple(items))}",
                    str(TupleType(tuple(items))),
                )
            dims[position] = join_dim(dims[position], item.dims[position])
    along = [item.dims[axis] for item in items]
    dims[axis] = reduce(lambda a, b: dim_arithmetic("+", a, b), along)  # symbolic: `N + 1`
    return TensorType(strong(items[0]).dtype, tuple(dims))


def stack_rule(args: list[Argument]) -> Type:
    items = tensors_in(args[0], "stack")
    if items is None:
        return ANY
    first = items[0]
    for item in items[1:]:
        if item.rank != first.rank or not all(same_dim(a, b) for a, b in zip(first.dims, item.dims, strict=True)):
            raise ShapeError("E0316", f"`stack` needs tensors of one shape, found {TupleType(tuple(items))}")
    axis = static_axis(args[1] if args[1].value is not None else Argument(I64, 0), first.rank + 1, "stack")
    dims = list(first.dims)
    dims.insert(axis, len(items))
    return TensorType(strong(first).dtype, tuple(dims))


def broadcast_to_rule(args: list[Argument]) -> Type:
    x = tensor(args[0].type, "`broadcast_to`")
    dims = dims_from(args[1:], "broadcast_to")
    if x is None:
        return ANY
    result = broadcast_dims(x.dims, dims)
    if result is None or len(dims) < x.rank or (result != dims and not any(isinstance(d, Unknown) for d in dims)):
        raise ShapeError("E0303", f"cannot broadcast {x} to [{', '.join(map(str, dims))}]", str(x))
    return TensorType(strong(x).dtype, dims)


def integer_tensor(t: Type, name: str) -> TensorType | None:
    x = tensor(t, f"`{name}`")
    if x is not None and x.dtype not in INTEGERS:
        raise ShapeError("E0320", f"`{name}` needs integer indices, found {x}", str(x))
    return x


def gather_rule(args: list[Argument]) -> Type:
    x = tensor(args[0].type, "`gather`")
    indices = integer_tensor(args[1].type, "gather")
    if x is None or indices is None:
        return ANY
    axis = static_axis(args[2] if args[2].value is not None else Argument(I64, 0), x.rank, "gather")
    if x.rank == 0:
        raise ShapeError("E0309", f"`gather` needs a tensor of rank 1 or more, found {x}")
    return TensorType(x.dtype, x.dims[:axis] + indices.dims + x.dims[axis + 1 :])


def along_indices(x: TensorType, indices: TensorType, axis: int, name: str) -> None:
    """`indices` of `x`'s rank, its sizes `x`'s off `axis` (any number of indices along it)."""
    if indices.rank != x.rank:
        raise ShapeError("E0309", f"`{name}` needs indices of the rank of {x}, found {indices}", str(indices))
    for k, (a, b) in enumerate(zip(indices.dims, x.dims, strict=True)):
        if k != axis and not same_dim(a, b):
            message = f"`{name}` needs indices sized as {x} off axis {axis}, found {indices}"
            raise ShapeError("E0303", message, str(indices))


def take_along_axis_rule(args: list[Argument]) -> Type:
    x = tensor(args[0].type, "`take_along_axis`")
    indices = integer_tensor(args[1].type, "take_along_axis")
    if x is None or indices is None:
        return ANY
    if x.rank == 0:
        raise ShapeError("E0309", f"`take_along_axis` needs a tensor of rank 1 or more, found {x}")
    along_indices(x, indices, static_axis(args[2], x.rank, "take_along_axis"), "take_along_axis")
    return TensorType(strong(x).dtype, indices.dims)


def add_along_axis_rule(args: list[Argument]) -> Type:
    x = tensor(args[0].type, "`add_along_axis`")
    indices = integer_tensor(args[1].type, "add_along_axis")
    updates = tensor(args[2].type, "`add_along_axis`")
    if x is None or indices is None or updates is None:
        return ANY
    if x.rank == 0:
        raise ShapeError("E0309", f"`add_along_axis` needs a tensor of rank 1 or more, found {x}")
    along_indices(x, indices, static_axis(args[3], x.rank, "add_along_axis"), "add_along_axis")
    if updates.rank != indices.rank or not all(map(same_dim, updates.dims, indices.dims)):
        raise ShapeError("E0303", f"`add_along_axis` updates {updates} do not have the shape of {indices}")
    return TensorType(strong(x).dtype, x.dims)


def sorting_rule(name: str) -> Rule:
    """`argsort` (i64 positions) and `sort` (the values): along one axis of a tensor, `descending` a bool."""

    def rule(args: list[Argument]) -> Type:
        x = tensor(args[0].type, f"`{name}`")
        if args[2].given and not is_scalar_of(args[2].type, frozenset({"bool"})):
            raise ShapeError("E0301", f"`{name}`'s `descending=` takes a bool, found {args[2].type}", at=args[2].span)
        if x is None:
            return ANY
        if x.rank == 0:
            raise ShapeError("E0306", f"`{name}` needs a tensor with an axis, found {x}", str(x))
        static_axis(Argument(args[1].type, args[1].value if args[1].given else -1, True, args[1].span), x.rank, name)
        return TensorType("i64", x.dims) if name == "argsort" else strong(x)

    return rule


def topk_rule(args: list[Argument]) -> Type:
    """`topk(x, k, axis=-1, largest=true)`: `(values, indices)`, each `x`'s shape with `axis` of size `k`; `x` a
    float or integer tensor with an axis, `k` an integer from 0 to the axis's size (checked here when both are
    known, else when it runs), the values in `x`'s dtype and the indices `i64`."""
    x = tensor(args[0].type, "`topk`")
    k, axis, largest = args[1], args[2], args[3]
    if not isinstance(k.type, AnyType) and not (isinstance(k.type, TensorType) and is_scalar_of(k.type, INTEGERS)):
        raise ShapeError("E0301", f"`topk` takes `k` as an integer, found {k.type}", at=k.span)
    flag_argument(largest, "largest")
    if x is None:
        return ANY
    if x.dtype == "bool":
        notes = ("help: make numbers of the flags first: `topk(where(b, 1, 0), k)` puts the true ones first",)
        raise ShapeError("E0317", f"`topk` needs a float or integer tensor, found {x}", str(x), notes, at=args[0].span)
    if x.rank == 0:
        raise ShapeError("E0306", f"`topk` needs a tensor with an axis, found {x}", str(x), at=args[0].span)
    position = static_axis(Argument(axis.type, axis.value if axis.given else -1, True, axis.span), x.rank, "topk")
    size = x.dims[position]
    if isinstance(k.value, int) and (k.value < 0 or (isinstance(size, int) and k.value > size)):
        bound = f"from 0 to {size}" if isinstance(size, int) else "of 0 or more"
        message = f"`topk` takes `k` {bound} (the size of axis {position} of {x}), found {k.value}"
        raise ShapeError("E0307", message, f"k = {k.value}", at=k.span)
    dims = (*x.dims[:position], k.value if k.value is not None else UNKNOWN, *x.dims[position + 1 :])
    return TupleType((TensorType(strong(x).dtype, dims), TensorType("i64", dims)))


def pad_rule(args: list[Argument]) -> Type:
    """`pad(x, before, after, axis=-1, value=0)`: each axis named (one, or a tuple of them) grows by `before`
    elements ahead and `after` behind, of `value` (a scalar, of `x`'s dtype where it is not a literal); a
    negative width removes that many elements instead, as torch's `pad` does."""
    x = tensor(args[0].type, "`pad`")
    widths = [pad_width(argument) for argument in args[1:3]]
    value, fill = args[4], None
    if value.given and not isinstance(value.type, AnyType):
        fill = tensor(value.type, "`pad`'s `value=`")
        if fill is not None and fill.rank:
            raise ShapeError("E0302", f"`pad`'s `value=` takes a scalar, found {fill}", at=value.span)
    if x is None:
        return ANY
    if fill is not None and not fill.weak and strong(fill).dtype != strong(x).dtype:
        notes = ("help: a literal tensor takes a dtype by its suffix: `[1.0f64, 2.0f64]`",) if x.weak else ()
        raise ShapeError("E0317", f"`pad` fills {x} with `value=` of another dtype, {fill}", notes=notes, at=value.span)
    if fill is not None and fill.weak and fill.dtype in FLOATS and strong(x).dtype not in FLOATS:
        notes = ("help: fill with an integer, or pad `float(x)`",)
        raise ShapeError("E0317", f"`pad` fills {x} with a float literal", notes=notes, at=value.span)
    if x.rank == 0:
        raise ShapeError("E0306", f"`pad` needs a tensor with an axis, found {x}", str(x))
    axis = Argument(args[3].type, args[3].value if args[3].given else -1, True, args[3].span)
    dims = list(x.dims)
    for position in static_axes(axis, x.rank, "pad", several=True) or ():
        size, removed = dims[position], [-w for w in widths if isinstance(w, int) and w < 0]
        if isinstance(size, int) and sum(removed) > size:
            message = f"`pad` removes {sum(removed)} elements from axis {position} of {x}, which has {size}"
            raise ShapeError("E0307", message, str(x))
        dims[position] = dim_arithmetic("+", dim_arithmetic("+", size, widths[0]), widths[1])
    # a literal tensor padded by a literal (or none) is still a literal: it takes the dtype its use gives it
    return TensorType(x.dtype, tuple(dims), x.weak and (fill is None or fill.weak))


def pad_width(argument: Argument) -> Dim:
    """A width of `pad`: an integer, its value known before the program runs or not (the size then is not)."""
    t = argument.type
    if isinstance(t, AnyType):
        return UNKNOWN
    if not isinstance(t, TensorType) or t.rank or t.dtype not in INTEGERS:
        notes = (
            "help: `pad` takes the widths before and after as two integers, and the axes as `axis=`: "
            "`pad(x, 1, 2, axis=-1)`; torch's `pad(x, (1, 2, 3, 4))` is `pad(pad(x, 1, 2, axis=-1), 3, 4, axis=-2)`",
        )
        raise ShapeError("E0301", f"`pad` takes a width as an integer, found {t}", notes=notes, at=argument.span)
    return argument.value if argument.value is not None else UNKNOWN


def one_hot_rule(args: list[Argument]) -> Type:
    labels = integer_tensor(args[0].type, "one_hot")
    (classes,) = dims_from(args[1:2], "one_hot")
    if labels is None:
        return ANY
    return TensorType("f32", (*labels.dims, classes))


def triangle_rule(name: str) -> Rule:
    """`tril(x, k=0)`, `triu(x, k=0)`: `x` of rank 2 or more (batches of matrices) keeps its type; `k`, the
    diagonal, is an integer, known statically or not (it decides values, not the shape)."""

    def rule(args: list[Argument]) -> Type:
        x = tensor(args[0].type, f"`{name}`")
        if args[1].given and not is_scalar_of(args[1].type, INTEGERS):
            message = f"`{name}` takes the diagonal `k` as an integer, found {args[1].type}"
            raise ShapeError("E0301", message, at=args[1].span)
        if x is None:
            return ANY
        if x.rank < 2:
            raise ShapeError(
                "E0309",
                f"`{name}` needs a tensor of rank 2 or more (matrices in its last two axes), found {x}",
                str(x),
                at=args[0].span,
            )
        return strong(x)

    return rule


def einsum_rule(args: list[Argument]) -> Type:
    """`einsum(spec, operands...)`: the spec, a string literal, names each operand's axes (one letter each, as
    many as its rank); a letter has one size wherever it appears; the operands are numbers of one dtype. The
    result has the sizes of the letters after `->`, in order."""
    spec_argument, operands = args[0], args[1:]
    if spec_argument.text is None:
        raise ShapeError(
            "E0301",
            f"`einsum` takes its spec as a string literal, found {spec_argument.type}",
            notes=('help: write the spec in the call, as in `einsum("ij,jk->ik", a, b)`',),
            at=spec_argument.span,
        )
    try:
        spec = einsum.parse(spec_argument.text)
    except einsum.SpecError as problem:
        raise ShapeError("E0325", str(problem), at=spec_argument.span) from None
    if len(spec.inputs) != len(operands):
        count = len(spec.inputs)
        raise ShapeError(
            "E0325",
            f'einsum spec "{spec_argument.text}" names {count} operand{"s" * (count != 1)}, found {len(operands)}',
            at=spec_argument.span,
        )
    tensors = [tensor(operand.type, "`einsum`") for operand in operands]
    if any(t is None for t in tensors):
        return ANY
    sizes = einsum_sizes(spec, tensors, operands)
    kinds = {strong(t).dtype for t in tensors}
    if "bool" in kinds:
        raise ShapeError("E0317", "`einsum` needs numbers, found bool operands", at=operands[0].span)
    dtype = one_dtype("einsum", *(TensorType(strong(t).dtype) for t in tensors))
    return TensorType(dtype, tuple(sizes[letter] for letter in spec.output))


def einsum_sizes(spec: einsum.Spec, tensors: list[TensorType], operands: list[Argument]) -> dict[str, Dim]:
    """The size of each letter of the spec: each operand has one letter per axis, and a letter's sizes agree."""
    sizes: dict[str, tuple[Dim, int]] = {}
    for position, (letters, t) in enumerate(zip(spec.inputs, tensors, strict=True)):
        at = operands[position].span
        if len(letters) != t.rank:
            raise ShapeError(
                "E0325",
                f"einsum operand {position + 1} is {t}, of rank {t.rank}, but the spec names {len(letters)} "
                f'ax{"is" if len(letters) == 1 else "es"} for it ("{letters}")',
                str(t),
                at=at,
            )
        for letter, size in zip(letters, t.dims, strict=True):
            known, first = sizes.get(letter, (size, position))
            if not same_dim(known, size):
                raise ShapeError(
                    "E0325",
                    f"einsum `{letter}` is {known} in operand {first + 1} and {size} in operand {position + 1}",
                    str(t),
                    at=at,
                )
            sizes[letter] = (join_dim(known, size), first)
    return {letter: size for letter, (size, _) in sizes.items()}


def dtype_argument(argument: Argument, name: str, floats_only: bool = False) -> str:
    t = argument.type
    if not argument.given or isinstance(t, AnyType):
        return "f32"
    if not isinstance(t, DTypeType):
        raise ShapeError("E0301", f"`dtype=` takes a type name such as `f64`, found {t}", at=argument.span)
    if floats_only and t.dtype not in FLOATS:
        raise ShapeError(
            "E0317",
            f"`{name}` makes float tensors; `dtype=` must be f32 or f64, found {t.dtype}",
            at=argument.span,
        )
    return t.dtype


def make_creation(name: str, extra: int, floats_only: bool = False) -> Rule:
    """Creation primitives: the dimensions, then `extra` keyword values (`seed=` or `value=`), then `dtype=`."""

    def rule(args: list[Argument]) -> Type:
        dims = dims_from(args[: len(args) - 1 - extra], name)
        option = args[-2] if extra else None
        if option is not None and name in ("randn", "rand") and option.given:
            seed = option.type
            if not isinstance(seed, AnyType) and not (
                isinstance(seed, TensorType) and seed.dtype in INTEGERS and not seed.dims
            ):
                raise ShapeError("E0301", f"`seed=` takes an integer, found {seed}")
        if option is not None and name == "full":
            if not option.given:
                raise ShapeError("E0301", "`full` needs `value=`, as in `full(3, 4, value=0.5)`")
            value = option.type
            if not isinstance(value, (AnyType, TensorType)) or (isinstance(value, TensorType) and value.dims):
                raise ShapeError("E0301", f"`value=` takes a number, found {value}")
            dtype = dtype_argument(args[-1], name, floats_only)
            if isinstance(value, TensorType) and value.dtype in FLOATS and dtype not in FLOATS:
                literal = "`value=true` or `value=false`" if dtype == "bool" else "an integer, `value=1`"
                notes = (f"help: fill {dtype} with {literal}",)
                raise ShapeError(
                    "E0317", f"`full` makes {dtype}, but `value=` is a float ({value})", notes=notes, at=option.span
                )
            return TensorType(dtype, dims)
        return TensorType(dtype_argument(args[-1], name, floats_only), dims)

    return rule


def categorical_rule(args: list[Argument]) -> Type:
    """`categorical(logits, seed=)`: one `i64` sample per distribution, the distributions' logits along the last
    axis of a float tensor, so `f32[B, V]` gives `i64[B]`."""
    seed_argument(args[1])
    logits = tensor(args[0].type, "`categorical`")
    if logits is None:
        return ANY
    needs_float(strong(logits), "categorical")
    if logits.rank == 0:
        raise ShapeError(
            "E0309",
            f"`categorical` needs logits along a last axis (rank 1 or more), found {logits}",
            str(logits),
            at=args[0].span,
        )
    return TensorType("i64", logits.dims[:-1])


def dropout_rule(args: list[Argument]) -> Type:
    """`dropout(x, p, seed=, training=true)`: a float `x` keeps its type; `p` a number; `seed=` an integer,
    required (the mask of the backward sweep is drawn again from it); `training=` a bool."""
    x = tensor(args[0].type, "`dropout`")
    if not is_scalar_of(args[1].type, FLOATS | INTEGERS):
        raise ShapeError(
            "E0301", f"`dropout` takes the probability `p` as a number, found {args[1].type}", at=args[1].span
        )
    if not args[2].given:
        raise ShapeError(
            "E0301",
            "`dropout` needs `seed=`: its gradient draws the same mask again from the seed",
            notes=("help: give each step its own seed, as in `dropout(h, 0.1, seed=step)`",),
        )
    seed_argument(args[2])
    flag_argument(args[3], "training")
    if x is None:
        return ANY
    needs_float(strong(x), "dropout")
    return strong(x)


def arange_rule(args: list[Argument]) -> Type:
    """`arange(n)`, `arange(a, b)` and `arange(a, b, step)`: the integers of Python's `range` of the same bounds,
    as `i64`, or as `dtype=`'s. With a float bound (`arange(0.0, 1.0, 0.1)`) it counts in floats, as numpy and
    torch do: `ceil((b - a) / step)` values `a + i step`, f32 unless a bound is f64 or `dtype=` says; its length
    is then known only when the program runs."""
    bounds, dtype_arg = args[:-1], args[-1]
    floats = [a for a in bounds if isinstance(a.type, TensorType) and not a.type.rank and a.type.dtype in FLOATS]
    if floats:
        for argument in bounds:
            t = argument.type
            if not isinstance(t, AnyType) and (not isinstance(t, TensorType) or t.rank or t.dtype == "bool"):
                raise ShapeError("E0301", f"`arange` takes numbers as bounds, found {t}", str(t), at=argument.span)
        if dtype_arg.given:
            dtype = dtype_argument(dtype_arg, "arange")
            if dtype not in FLOATS:
                notes = ("help: count in integers (`arange(0, 10, 2)`), or convert: `int(arange(0.0, 1.0, 0.1))`",)
                raise ShapeError(
                    "E0317", f"`arange` of float bounds makes floats, not {dtype}", notes=notes, at=dtype_arg.span
                )
        else:
            dtype = "f64" if any(a.type.dtype == "f64" and not a.type.weak for a in floats) else "f32"
        step = bounds[2] if len(bounds) == 3 else None
        if step is not None and step.value == 0:
            raise ShapeError("E0307", "`arange`'s step is 0", at=step.span)
        return TensorType(dtype, (UNKNOWN,))
    values = dims_from(bounds, "arange")
    dtype = dtype_argument(dtype_arg, "arange") if dtype_arg.given else "i64"
    if dtype == "bool":
        raise ShapeError("E0317", "`arange` makes numbers; `dtype=` cannot be bool", at=dtype_arg.span)
    if len(values) == 1:
        return TensorType(dtype, (max(values[0], 0) if isinstance(values[0], int) else values[0],))
    low, high, step = (*values, 1) if len(values) == 2 else values
    if step == 0:
        raise ShapeError("E0307", "`arange`'s step is 0", at=args[2].span)
    if low == 0 and step == 1 and not isinstance(high, int):  # `arange(0, n)` is `arange(n)`: `n` long
        return TensorType(dtype, (high,))
    known = all(isinstance(v, int) for v in (low, high, step))
    return TensorType(dtype, (len(range(low, high, step)) if known else UNKNOWN,))


def eye_rule(args: list[Argument]) -> Type:
    """`eye(n)` and `eye(n, m)`: an n x m (n x n) matrix with ones on its diagonal, of `dtype=` (f32)."""
    rows, columns = dims_from(args[:2] if args[1].given else args[:1] * 2, "eye")
    return TensorType(dtype_argument(args[2], "eye"), (rows, columns))


def linspace_rule(args: list[Argument]) -> Type:
    """`linspace(start, stop, num)`: `num` evenly spaced floats from `start` to `stop`, both included. The two
    ends are numbers; the result is f64 if either is, f32 otherwise, unless `dtype=` says."""
    ends = []
    for argument, what in zip(args[:2], ("start", "stop"), strict=True):
        t = argument.type
        if isinstance(t, AnyType):
            continue
        if not isinstance(t, TensorType) or t.rank or t.dtype == "bool":
            raise ShapeError("E0301", f"`linspace`'s `{what}` takes a number, found {t}", str(t), at=argument.span)
        ends.append(t)
    (num,) = dims_from(args[2:3], "linspace")
    if args[3].given:
        dtype = dtype_argument(args[3], "linspace", floats_only=True)
    else:
        dtype = "f64" if any(t.dtype == "f64" and not t.weak for t in ends) else "f32"
    return TensorType(dtype, (num,))


def shape_rule(args: list[Argument]) -> Type:
    x = tensor(args[0].type, "`shape`")
    if x is None:
        return ANY
    return TupleType(tuple(TensorType("i64", (), False, d) for d in x.dims))


def len_rule(args: list[Argument]) -> Type:
    t = args[0].type
    if isinstance(t, TapeType):
        return I64
    if isinstance(t, TupleType):
        return TensorType("i64", (), False, len(t.items))
    x = tensor(t, "`len`")
    if x is None:
        return I64
    if x.rank == 0:
        raise ShapeError("E0309", f"`len` needs a tensor of rank 1 or more, found {x}", str(x))
    return TensorType("i64", (), False, x.dims[0])


def float_rule(args: list[Argument]) -> Type:
    dtype = dtype_argument(args[1], "float", floats_only=True) if args[1].given else "f32"
    if isinstance(args[0].type, StrType):  # parsing text, such as a command-line argument
        return TensorType(dtype)
    x = tensor(args[0].type, "`float`")
    return ANY if x is None else TensorType(dtype, x.dims)


def int_rule(args: list[Argument]) -> Type:
    if isinstance(args[0].type, StrType):
        return I64
    x = tensor(args[0].type, "`int`")
    return ANY if x is None else TensorType("i64", x.dims)


def assert_rule(args: list[Argument]) -> Type:
    condition = args[0].type
    if not isinstance(condition, AnyType) and condition != BOOL:
        raise ShapeError("E0304", f"`assert` needs a bool scalar condition, found {condition}", str(condition))
    if isinstance(condition, TensorType) and condition.value is False:  # tuples the checker knows differ
        message = "assertion failed" if not args[1].given else args[1].text  # None: made when run
        raise ShapeError(
            "E0335",
            "this assertion fails" + (f": {message}" if message is not None else ""),
            "compares tuples that differ",
            notes=(
                "the checker knows both sides of the comparison (sizes it knows, or tuples of two lengths), "
                "so the run would stop here with E0502",
            ),
            at=args[0].span,
        )
    return UNIT


def print_rule(args: list[Argument]) -> Type:
    return UNIT


def time_rule(args: list[Argument]) -> Type:
    """`time()`: seconds, an `f64`."""
    return TensorType("f64")


def str_rule(args: list[Argument]) -> Type:
    return STR  # anything `print` shows


def checkpoint_value(argument: Argument, name: str) -> Type:
    """What a checkpoint holds: a tensor, or a tuple or struct of them (nested); anything else is an error."""

    def walk(t: Type) -> Type:
        if isinstance(t, TensorType):
            return strong(t)
        if isinstance(t, AnyType):
            return t
        if isinstance(t, TupleType):
            return TupleType(tuple(walk(item) for item in t.items))
        if isinstance(t, StructType):
            for _, field_type in t.fields:
                walk(field_type)
            return t
        whole = "" if t == argument.type else f" in {argument.type}"
        raise ShapeError(
            "E0311",
            f"`{name}` takes a tensor, or a tuple or struct of tensors, found {t}{whole}",
            str(argument.type),
            at=argument.span,
        )

    return walk(argument.type)


def checkpoint_path(argument: Argument, name: str) -> None:
    if not isinstance(argument.type, (StrType, AnyType)):
        message = f"`{name}` takes the file's path as a string, found {argument.type}"
        raise ShapeError("E0311", message, str(argument.type), at=argument.span)


def save_rule(args: list[Argument]) -> Type:
    checkpoint_path(args[0], "save")
    checkpoint_value(args[1], "save")
    return UNIT


def load_rule(args: list[Argument]) -> Type:
    """`load(path, like, strict=true)` is a value of exactly `like`'s type, read from the file (`strict=false`:
    what the file holds of it)."""
    checkpoint_path(args[0], "load")
    flag_argument(args[2], "strict")
    return checkpoint_value(args[1], "load")


# ---------------------------------------------------------------- what derivative code is written with


def differentiable_value(t: Type, name: str) -> Type:
    """A tensor, tuple, struct or tape (whatever a gradient can be); anything else is an error."""
    if isinstance(t, TensorType):
        return strong(t)
    if isinstance(t, (TupleType, StructType, TapeType, AnyType)):
        return t
    raise ShapeError("E0311", f"`{name}` needs a tensor, tuple, struct or tape, found {t}", str(t))


def zeros_like_rule(args: list[Argument]) -> Type:
    return differentiable_value(args[0].type, "zeros_like")


def stop_gradient_rule(args: list[Argument]) -> Type:
    t = args[0].type
    return t if isinstance(t, TensorType) else differentiable_value(t, "stop_gradient")


def unbroadcast_rule(args: list[Argument]) -> Type:
    x = tensor(args[0].type, "`unbroadcast`")
    like = tensor(args[1].type, "`unbroadcast`")
    if x is None or like is None:
        return ANY
    if broadcast_dims(x.dims, like.dims) is None or like.rank > x.rank:
        raise ShapeError("E0303", f"`unbroadcast` cannot sum {x} down to the shape of {like}", f"{x}, {like}")
    # an adjoint takes its variable's float dtype (an f32 operand of an f64 operation gets an f32 one)
    floats = strong(x).dtype in FLOATS and strong(like).dtype in FLOATS
    return TensorType(strong(like).dtype if floats else strong(x).dtype, like.dims)


def reshape_like_rule(args: list[Argument]) -> Type:
    x = tensor(args[0].type, "`reshape_like`")
    like = tensor(args[1].type, "`reshape_like`")
    if x is None or like is None:
        return ANY
    sizes = [d for d in (*x.dims, *like.dims) if not isinstance(d, int)]
    if not sizes and prod(x.dims) != prod(like.dims):
        raise ShapeError("E0307", f"`reshape_like` cannot reshape {x} to the shape of {like}", f"{x}, {like}")
    return TensorType(strong(x).dtype, like.dims)


def squeeze_rule(args: list[Argument]) -> Type:
    """`squeeze(x, axis)`: `x` without the axes `axis` names (one, or a tuple), each of size 1 (a size known
    only when it runs is checked then)."""
    x = tensor(args[0].type, "`squeeze`")
    if x is None:
        return ANY
    if x.rank == 0:
        raise ShapeError("E0306", f"`squeeze` needs a tensor with an axis, found {x}", str(x), at=args[0].span)
    if args[1].value is None and not isinstance(args[1].type, TupleType):
        raise ShapeError("E0306", "`squeeze` needs its axis as a literal integer or const", at=args[1].span)
    axes = static_axes(args[1], x.rank, "squeeze", several=True) or ()
    for axis in axes:
        if isinstance(x.dims[axis], int) and x.dims[axis] != 1:
            message = f"`squeeze` removes axes of size 1; axis {axis} of {x} has size {x.dims[axis]}"
            raise ShapeError("E0307", message, f"size {x.dims[axis]}", at=args[1].span)
    return TensorType(strong(x).dtype, tuple(d for k, d in enumerate(x.dims) if k not in axes))


def expand_dims_rule(args: list[Argument]) -> Type:
    x = tensor(args[0].type, "`expand_dims`")
    if x is None:
        return ANY
    axis = args[1].value
    if not isinstance(axis, int):
        raise ShapeError("E0306", "`expand_dims` needs its axis as a literal integer or const", at=args[1].span)
    if not -x.rank - 1 <= axis <= x.rank:
        raise ShapeError(
            "E0306", f"axis {axis} is out of range for `expand_dims` of a rank-{x.rank} tensor", at=args[1].span
        )
    dims = list(x.dims)
    dims.insert(axis % (x.rank + 1), 1)
    return TensorType(strong(x).dtype, tuple(dims))


def scatter_add_rule(args: list[Argument]) -> Type:
    x = tensor(args[0].type, "`scatter_add`")
    indices = integer_tensor(args[1].type, "scatter_add")
    updates = tensor(args[2].type, "`scatter_add`")
    if x is None or indices is None or updates is None:
        return ANY
    if x.rank == 0:
        raise ShapeError("E0309", f"`scatter_add` needs a tensor of rank 1 or more, found {x}")
    axis = static_axis(args[3] if args[3].value is not None else Argument(I64, 0), x.rank, "scatter_add")
    expected = x.dims[:axis] + indices.dims + x.dims[axis + 1 :]
    joined = broadcast_dims(updates.dims, expected)
    if joined is None or updates.rank > len(expected) or not all(map(same_dim, joined, expected)):
        shown = f"[{', '.join(map(str, expected))}]"
        raise ShapeError("E0303", f"`scatter_add` updates {updates} do not fit the gathered shape {shown}")
    return TensorType(strong(x).dtype, x.dims)


def split_like_rule(args: list[Argument]) -> Type:
    x = tensor(args[0].type, "`split_like`")
    items = tensors_in(args[1], "split_like")
    if x is None or items is None:
        return ANY
    axis = static_axis(args[2] if args[2].value is not None else Argument(I64, 0), max(x.rank, 1), "split_like")
    pieces = TupleType(tuple(items))
    if any(item.rank != x.rank for item in items):
        raise ShapeError("E0316", f"`split_like` needs pieces of the rank of {x}, found {pieces}")
    for item in items:
        if not all(same_dim(a, b) for i, (a, b) in enumerate(zip(item.dims, x.dims, strict=True)) if i != axis):
            raise ShapeError("E0316", f"`split_like` cannot cut {x} into pieces {pieces} along axis {axis}")
    along = [item.dims[axis] for item in items]
    if all(isinstance(d, int) for d in [*along, x.dims[axis]]) and sum(along) != x.dims[axis]:
        raise ShapeError("E0316", f"`split_like` pieces {pieces} do not add up to {x} along axis {axis}")
    dtype = strong(x).dtype
    return TupleType(tuple(TensorType(dtype, item.dims) for item in items))


def tree_add_rule(args: list[Argument]) -> Type:
    if isinstance(args[0].type, TensorType) and isinstance(args[1].type, TensorType):
        return arithmetic(args[0].type, args[1].type, "+")  # weak literals adapt as they do for `+`
    a = differentiable_value(args[0].type, "tree_add")
    b = differentiable_value(args[1].type, "tree_add")
    if isinstance(a, AnyType):
        return b
    if isinstance(b, AnyType) or a == b:
        return a
    if isinstance(a, TupleType) and isinstance(b, TupleType) and len(a.items) == len(b.items):
        return TupleType(
            tuple(tree_add_rule([Argument(x), Argument(y)]) for x, y in zip(a.items, b.items, strict=True))
        )
    if isinstance(a, TapeType) and isinstance(b, TapeType):  # `tape()` is a tape of `_` until pushed onto
        return TapeType(tree_add_rule([Argument(a.item), Argument(b.item)]))
    if isinstance(a, StructType) and isinstance(b, StructType) and same_struct(a, b) and a.params:
        # a field typed `Linear` (sizes unknown) plus an adjoint of known sizes, `Linear[64, _]`; a size of 1 may
        # be broadcast (the tensors' `tree_add` broadcasts): unknown stays unknown there
        sizes = zip(a.sizes, b.sizes, strict=True)
        return a.with_sizes(tuple(y if isinstance(x, Unknown) and y != 1 else x for x, y in sizes))
    raise ShapeError("E0301", f"`tree_add` adds values of one type, found {a} and {b}", f"{a}, {b}")


def tape_rule(args: list[Argument]) -> Type:
    """`tape(like)`: a tape of values of `like`'s type; `tape()`: of the type of the first value pushed."""
    return TapeType(tape_item(args[0].type))


def tape_item(t: Type) -> Type:
    return differentiable_value(t, "tape") if isinstance(t, TensorType) else t


def tape_of(t: Type, name: str) -> TapeType | None:
    if isinstance(t, AnyType):
        return None
    if not isinstance(t, TapeType):
        raise ShapeError("E0311", f"`{name}` needs a tape, found {t}", str(t), notes=("help: make one with `tape(x)`",))
    return t


def push_rule(args: list[Argument]) -> Type:
    tape = tape_of(args[0].type, "push")
    if tape is None:
        return ANY
    if not item_fits(tape.item, args[1].type):
        raise ShapeError("E0301", f"`push` onto a {tape} needs a {tape.item}, found {args[1].type}", str(args[1].type))
    if isinstance(tape.item, AnyType):  # `tape()`: the first push says what it holds
        return TapeType(tape_item(args[1].type))
    return tape


def item_fits(item: Type, value: Type) -> bool:
    """Can `value` be pushed on a tape of `item`s (dtype and dimensions agree, `_` fits any)?"""
    if isinstance(item, AnyType) or isinstance(value, AnyType):
        return True
    if isinstance(item, TensorType) and isinstance(value, TensorType):
        dtype_fits = item.dtype == value.dtype or (value.weak and item.dtype in FLOATS and value.dtype != "bool")
        return dtype_fits and item.rank == value.rank and all(map(same_dim, item.dims, value.dims))
    if isinstance(item, TupleType) and isinstance(value, TupleType):
        return len(item.items) == len(value.items) and all(map(item_fits, item.items, value.items))
    if isinstance(item, TapeType) and isinstance(value, TapeType):
        return item_fits(item.item, value.item)
    return item == value


def pop_rule(args: list[Argument]) -> Type:
    tape = tape_of(args[0].type, "pop")
    return ANY if tape is None else TupleType((tape.item, tape))


def tree_map_rule(args: list[Argument]) -> Type:
    """`tree_map(f, a, b, ...)`: trees of one structure; `f` applied to the leaves (tensors) at each place. A
    struct keeps its type, so `f` must give each field a value of that field's type."""
    apply = args[0].apply
    if apply is None:
        return ANY

    def walk(types: list[Type], where: str) -> Type:
        first = types[0]
        if any(isinstance(t, AnyType) for t in types):
            return ANY
        if isinstance(first, TupleType):
            if any(not isinstance(t, TupleType) or len(t.items) != len(first.items) for t in types):
                raise ShapeError(
                    "E0301", f"`tree_map` needs trees of one structure, found {', '.join(map(str, types))}"
                )
            return TupleType(tuple(walk([t.items[i] for t in types], f"{where}[{i}]") for i in range(len(first.items))))
        if isinstance(first, StructType):
            if any(not isinstance(t, StructType) or not same_struct(t, first) for t in types):
                raise ShapeError(
                    "E0301", f"`tree_map` needs trees of one structure, found {', '.join(map(str, types))}"
                )
            for field_name, field_type in first.fields:
                found = walk([t.field_type(field_name) for t in types], f"{where}.{field_name}")
                if not item_fits(field_type, found):
                    raise ShapeError(
                        "E0301",
                        f"`tree_map` gives {found} for `{where}.{field_name}`, a field of type {field_type}",
                        notes=(f"help: a struct keeps its type, so the function must return a {field_type} there",),
                    )
            return first
        if isinstance(first, TensorType):
            if any(not isinstance(t, TensorType) for t in types):
                raise ShapeError(
                    "E0301", f"`tree_map` needs trees of one structure, found {', '.join(map(str, types))}"
                )
            result = apply(types)
            return ANY if result is None else result
        raise ShapeError("E0311", f"`tree_map` maps over tensors, tuples and structs, found {first}", str(first))

    return walk([a.type for a in args[1:]], "tree")


def tree_dot_rule(args: list[Argument]) -> Type:
    """`tree_dot(a, b)`: the sum over all leaves of `sum(a_leaf * b_leaf)`, for two trees of one structure."""
    leaves: list[Type] = []

    def walk(a: Type, b: Type) -> None:
        if isinstance(a, AnyType) or isinstance(b, AnyType):
            leaves.append(ANY)
        elif isinstance(a, TupleType) and isinstance(b, TupleType) and len(a.items) == len(b.items):
            for x, y in zip(a.items, b.items, strict=True):
                walk(x, y)
        elif isinstance(a, StructType) and isinstance(b, StructType) and same_struct(a, b):
            for field_name, field_type in a.fields:
                walk(field_type, b.field_type(field_name))
        elif isinstance(a, TensorType) and isinstance(b, TensorType):
            leaves.append(arithmetic(a, b, "*"))
        else:
            raise ShapeError("E0301", f"`tree_dot` needs two trees of one structure, found {a} and {b}", f"{a}, {b}")

    walk(args[0].type, args[1].type)
    dtypes = {strong(t).dtype for t in leaves if isinstance(t, TensorType)}
    if any(isinstance(t, AnyType) for t in leaves):
        return ANY
    if not dtypes <= FLOATS:
        raise ShapeError("E0301", f"`tree_dot` takes trees of floats, found leaves of {', '.join(sorted(dtypes))}")
    return TensorType("f64" if "f64" in dtypes else "f32")


# ---------------------------------------------------------------------- data

DIGITS_COUNT, DIGITS_PIXELS = 1797, 64  # stdlib/data/digits.npz


def text_argument(argument: Argument, name: str, what: str) -> None:
    found = argument.type
    if not isinstance(found, (StrType, AnyType)):
        raise ShapeError("E0301", f"`{name}` takes the {what} as a string, found {found}", str(found), at=argument.span)


def is_scalar_of(t: Type, dtypes) -> bool:
    """Is `t` a scalar of one of these dtypes (or unknown)?"""
    return isinstance(t, AnyType) or (isinstance(t, TensorType) and t.dtype in dtypes and not t.dims)


def flag_argument(argument: Argument, name: str) -> None:
    if argument.given and not is_scalar_of(argument.type, {"bool"}):
        raise ShapeError("E0301", f"`{name}=` takes `true` or `false`, found {argument.type}", at=argument.span)


def seed_argument(argument: Argument) -> None:
    if argument.given and not is_scalar_of(argument.type, INTEGERS):
        raise ShapeError("E0301", f"`seed=` takes an integer, found {argument.type}", at=argument.span)


def digits_rule(args: list[Argument]) -> Type:
    return TupleType((TensorType("f32", (DIGITS_COUNT, DIGITS_PIXELS)), TensorType("i64", (DIGITS_COUNT,))))


def permutation_rule(args: list[Argument]) -> Type:
    (n,) = dims_from(args[:1], "permutation")
    seed_argument(args[1])
    return TensorType("i64", (n,))


def batches_rule(args: list[Argument]) -> Type:
    """`batches(data, size)`: each tensor of `data` (one, or a tuple of them with one leading size N) cut into
    N // size batches of `size` rows, the last partial batch dropped. Each rank of a data-parallel run keeps
    `size / world_size()` rows of every batch (docs/distributed.md), so the rows of a batch are `_`: known
    when the program runs, like the world's size."""
    (size,) = dims_from(args[1:2], "batches")
    if size == 0:
        raise ShapeError("E0307", "`batches` needs a batch size of 1 or more, found 0", at=args[1].span)
    flag_argument(args[2], "shuffle")
    seed_argument(args[3])
    data = args[0].type
    items = data.items if isinstance(data, TupleType) else (data,)
    if not items:
        raise ShapeError("E0316", "`batches` takes a tensor or a non-empty tuple of tensors, found ()")
    tensors = [tensor(item, "`batches`") for item in items]
    if any(t is None for t in tensors):
        return ANY
    if any(t.rank == 0 for t in tensors):
        raise ShapeError("E0309", f"`batches` needs tensors of rank 1 or more, found {data}", str(data))
    leading = tensors[0].dims[0]
    if not all(same_dim(leading, t.dims[0]) for t in tensors):
        raise ShapeError(
            "E0316", f"`batches` needs tensors with one leading size, found {data}", str(data), at=args[0].span
        )
    for t in tensors:
        leading = join_dim(leading, t.dims[0])
    count = leading // size if isinstance(leading, int) and isinstance(size, int) else UNKNOWN
    cut = [TensorType(strong(t).dtype, (count, UNKNOWN, *t.dims[1:])) for t in tensors]
    return TupleType(tuple(cut)) if isinstance(data, TupleType) else cut[0]


def load_csv_rule(args: list[Argument]) -> Type:
    text_argument(args[0], "load_csv", "path")
    flag_argument(args[1], "skip_header")
    if args[2].given:
        text_argument(args[2], "load_csv", "delimiter")
    return TensorType("f32", (UNKNOWN, UNKNOWN))


def load_npz_rule(args: list[Argument]) -> Type:
    """`load_npz(path, name, dtype=f32, rank=2)`: the array's rank is part of its type, so it is a literal."""
    text_argument(args[0], "load_npz", "path")
    text_argument(args[1], "load_npz", "array's name")
    dtype = dtype_argument(args[2], "load_npz")
    rank = args[3].value if args[3].given else 2
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
        raise ShapeError(
            "E0307",
            f"`load_npz` needs `rank=` as a literal non-negative integer or const, found {args[3].type}",
            notes=("help: the rank is part of the result's type, so it must be known before running",),
            at=args[3].span,
        )
    return TensorType(dtype, (UNKNOWN,) * rank)


def text_corpus_rule(args: list[Argument]) -> Type:
    (length,) = dims_from(args[:1], "text_corpus")
    return TensorType("i64", (length,))


def chars_rule(args: list[Argument]) -> Type:
    codes = tensor(args[0].type, "`chars`")
    if codes is not None and codes.dtype not in INTEGERS:
        raise ShapeError("E0320", f"`chars` takes integer byte values, found {codes}", str(codes))
    if codes is not None and codes.rank > 1:
        raise ShapeError("E0309", f"`chars` takes a scalar or a rank-1 tensor of codes, found {codes}", str(codes))
    return STR


# ---------------------------------------------------------------------- convolution
# Images are NCHW: x is [N, C, H, W], a kernel w is [O, C, KH, KW]. `stride=`, `padding=` and a pooling window's
# `size` decide the result's shape, so the checker must know them (a literal, a const, or a local bound to one).


def window_option(argument: Argument, name: str, what: str, least: int, default: int) -> int | None:
    """The value of `stride=`, `padding=` or a pooling `size`; None when its type is unknown (an earlier error)."""
    if not argument.given:
        return default
    t, value = argument.type, argument.value
    if isinstance(t, AnyType):
        return None
    if not isinstance(t, TensorType) or t.dims or t.dtype not in INTEGERS:
        raise ShapeError("E0301", f"`{name}` takes {what} as an integer, found {t}", at=argument.span)
    if not isinstance(value, int):
        raise ShapeError(
            "E0307",
            f"`{name}` needs {what} as a literal integer or const",
            notes=("help: it decides the shape of the result, so it must be known before the program runs",),
            at=argument.span,
        )
    if value < least:
        raise ShapeError("E0307", f"`{name}` needs {what} of at least {least}, found {value}", at=argument.span)
    return value


def pool_options(args: list[Argument], name: str) -> tuple[int | None, int | None, int | None]:
    """`size, stride=size, padding=0` of max pooling; padding is at most half the window, as in PyTorch."""
    size = window_option(args[0], name, "the window `size`", 1, 1)
    stride = window_option(args[1], name, "`stride=`", 1, 1) if args[1].given else size
    padding = window_option(args[2], name, "`padding=`", 0, 0)
    if isinstance(size, int) and isinstance(padding, int) and 2 * padding > size:
        raise ShapeError(
            "E0307",
            f"`{name}` padding {padding} is more than half the window size {size}",
            notes=("help: a window would hold nothing but padding; use a padding of at most size // 2",),
            at=args[2].span,
        )
    return size, stride, padding


def image(argument: Argument, name: str, layout: str, floats: bool = True) -> TensorType | None:
    """A rank-4 tensor argument (`layout` names its axes), of floats unless only its shape is used."""
    x = tensor(argument.type, f"`{name}`")
    if x is None:
        return None
    if x.rank != 4:
        raise ShapeError("E0302", f"`{name}` needs a rank-4 tensor [{layout}], found {x}", str(x), at=argument.span)
    if floats:
        needs_float(strong(x), name)
    return strong(x)


def one_dtype(name: str, *tensors: TensorType) -> str:
    if len({t.dtype for t in tensors}) > 1:
        shown = " and ".join(map(str, tensors))
        raise ShapeError(
            "E0317",
            f"`{name}` needs tensors of one dtype, found {shown}",
            shown,
            notes=("help: convert one with `float(x, dtype=f64)` (or `dtype=f32`)",),
        )
    return tensors[0].dtype


def same_channels(name: str, x: TensorType, w: TensorType) -> None:
    if not same_dim(x.dims[1], w.dims[1]):
        raise ShapeError(
            "E0302",
            f"`{name}` channels differ: the image has {x.dims[1]}, the kernel takes {w.dims[1]}",
            f"{x}, {w}",
        )


def windows_along(size: Dim, kernel: Dim, stride: int | None, padding: int | None) -> Dim:
    """How many windows fit along one axis: PyTorch's (size + 2 padding - kernel) // stride + 1."""
    if not all(isinstance(v, int) for v in (size, kernel, stride, padding)):
        return UNKNOWN
    return (size + 2 * padding - kernel) // stride + 1


def window_grid(name: str, x: TensorType, kernel: tuple[Dim, ...], stride, padding) -> tuple[Dim, Dim]:
    """The result's [H', W'] for windows of `kernel` over the image `x`."""
    rows, columns = (windows_along(size, k, stride, padding) for size, k in zip(x.dims[2:], kernel, strict=True))
    if any(isinstance(n, int) and n < 1 for n in (rows, columns)):
        raise ShapeError(
            "E0307",
            f"`{name}`: a {kernel[0]} by {kernel[1]} window does not fit in {x} with padding {padding}",
            str(x),
        )
    return rows, columns


def fits_grid(name: str, dy: TensorType, expected: tuple[Dim, ...]) -> None:
    """`dy` has the shape of the forward result it is the gradient of."""
    if not all(map(same_dim, dy.dims, expected)):
        shown = f"[{', '.join(map(str, expected))}]"
        raise ShapeError("E0302", f"`{name}` needs `dy` of the forward result's shape {shown}, found {dy}", str(dy))


def conv2d_rule(args: list[Argument]) -> Type:
    stride = window_option(args[2], "conv2d", "`stride=`", 1, 1)
    padding = window_option(args[3], "conv2d", "`padding=`", 0, 0)
    x, w = image(args[0], "conv2d", "N, C, H, W"), image(args[1], "conv2d", "O, C, KH, KW")
    if x is None or w is None:
        return ANY
    dtype = one_dtype("conv2d", x, w)
    same_channels("conv2d", x, w)
    return TensorType(dtype, (x.dims[0], w.dims[0], *window_grid("conv2d", x, w.dims[2:], stride, padding)))


def conv2d_input_grad_rule(args: list[Argument]) -> Type:
    """`conv2d_input_grad(dy, w, like)`: the gradient of `conv2d(x, w)` for `x` (shaped like `like`)."""
    name = "conv2d_input_grad"
    stride = window_option(args[3], name, "`stride=`", 1, 1)
    padding = window_option(args[4], name, "`padding=`", 0, 0)
    dy, w = image(args[0], name, "N, O, H', W'"), image(args[1], name, "O, C, KH, KW")
    like = image(args[2], name, "N, C, H, W", floats=False)
    if dy is None or w is None or like is None:
        return ANY
    dtype = one_dtype(name, dy, w)
    same_channels(name, like, w)
    fits_grid(name, dy, (like.dims[0], w.dims[0], *window_grid(name, like, w.dims[2:], stride, padding)))
    return TensorType(dtype, like.dims)


def conv2d_weight_grad_rule(args: list[Argument]) -> Type:
    """`conv2d_weight_grad(dy, x, like)`: the gradient of `conv2d(x, w)` for `w` (shaped like `like`)."""
    name = "conv2d_weight_grad"
    stride = window_option(args[3], name, "`stride=`", 1, 1)
    padding = window_option(args[4], name, "`padding=`", 0, 0)
    dy, x = image(args[0], name, "N, O, H', W'"), image(args[1], name, "N, C, H, W")
    like = image(args[2], name, "O, C, KH, KW", floats=False)
    if dy is None or x is None or like is None:
        return ANY
    dtype = one_dtype(name, dy, x)
    same_channels(name, x, like)
    fits_grid(name, dy, (x.dims[0], like.dims[0], *window_grid(name, x, like.dims[2:], stride, padding)))
    return TensorType(dtype, like.dims)


def max_pool2d_rule(args: list[Argument]) -> Type:
    size, stride, padding = pool_options(args[1:], "max_pool2d")
    x = image(args[0], "max_pool2d", "N, C, H, W")
    if x is None:
        return ANY
    return TensorType(x.dtype, (*x.dims[:2], *window_grid("max_pool2d", x, (size, size), stride, padding)))


def max_pool2d_grad_rule(args: list[Argument]) -> Type:
    """`max_pool2d_grad(dy, x, size)`: the gradient of `max_pool2d(x, size)` for `x`."""
    name = "max_pool2d_grad"
    size, stride, padding = pool_options(args[2:], name)
    dy, x = image(args[0], name, "N, C, H', W'"), image(args[1], name, "N, C, H, W")
    if dy is None or x is None:
        return ANY
    dtype = one_dtype(name, dy, x)
    fits_grid(name, dy, (*x.dims[:2], *window_grid(name, x, (size, size), stride, padding)))
    return TensorType(dtype, x.dims)


def max_pool2d_gather_rule(args: list[Argument]) -> Type:
    """`max_pool2d_gather(v, x, size)`: the elements of `v` where `max_pool2d(x, size)` finds each maximum."""
    name = "max_pool2d_gather"
    size, stride, padding = pool_options(args[2:], name)
    v, x = image(args[0], name, "N, C, H, W"), image(args[1], name, "N, C, H, W")
    if v is None or x is None:
        return ANY
    dtype = one_dtype(name, v, x)
    if not all(map(same_dim, v.dims, x.dims)):
        raise ShapeError("E0302", f"`{name}` needs `v` of the shape of `x`, found {v} and {x}", f"{v}, {x}")
    return TensorType(dtype, (*x.dims[:2], *window_grid(name, x, (size, size), stride, padding)))


def log_metric_rule(args: list[Argument]) -> Type:
    """`log_metric(name, value, step=-1)`: a name, a number (a scalar of any dtype), an integer step."""
    if not isinstance(args[0].type, (StrType, AnyType)):
        raise ShapeError(
            "E0301", f"`log_metric` takes the metric's name as a string, found {args[0].type}", at=args[0].span
        )
    value = tensor(args[1].type, "`log_metric`")
    if value is not None and value.rank != 0:
        raise ShapeError("E0301", f"`log_metric` takes a number, found {value}", str(value), at=args[1].span)
    step = args[2].type
    if args[2].given and not (isinstance(step, AnyType) or (isinstance(step, TensorType) and step.dtype in INTEGERS)):
        raise ShapeError("E0301", f"`log_metric`'s `step=` takes an integer, found {step}", at=args[2].span)
    return UNIT


def progress_rule(args: list[Argument]) -> Type:
    """`progress(done, total, label="progress")`: integers, and a label string."""
    for argument, what in ((args[0], "done"), (args[1], "total")):
        t = argument.type
        if not (isinstance(t, AnyType) or (isinstance(t, TensorType) and t.rank == 0 and t.dtype in INTEGERS)):
            raise ShapeError("E0301", f"`progress` takes `{what}` as an integer, found {t}", at=argument.span)
    if args[2].given and not isinstance(args[2].type, (StrType, AnyType)):
        raise ShapeError("E0301", f"`progress` takes its label as a string, found {args[2].type}", at=args[2].span)
    return UNIT


# ---------------------------------------------------------------------- data parallelism


def world_rule(args: list[Argument]) -> Type:
    """`rank()` and `world_size()`: integers known when the program runs."""
    return I64


def allreduce_mean_rule(args: list[Argument]) -> Type:
    """`allreduce_mean(tree)`: a float tensor, or a tuple or struct of them (nested), of the same type."""
    argument = args[0]

    def walk(t: Type) -> Type:
        if isinstance(t, AnyType):
            return t
        if isinstance(t, TensorType):
            if strong(t).dtype not in FLOATS:
                whole = "" if t == argument.type else f" in {argument.type}"
                raise ShapeError(
                    "E0317",
                    f"`allreduce_mean` averages floats, found {strong(t)}{whole}",
                    str(argument.type),
                    notes=("help: convert with `float(x)`, or leave integers out of the tree",),
                    at=argument.span,
                )
            return strong(t)
        if isinstance(t, TupleType):
            return TupleType(tuple(walk(item) for item in t.items))
        if isinstance(t, StructType):
            for _, field_type in t.fields:
                walk(field_type)
            return t
        whole = "" if t == argument.type else f" in {argument.type}"
        raise ShapeError(
            "E0311",
            f"`allreduce_mean` takes a float tensor, or a tuple or struct of them, found {t}{whole}",
            str(argument.type),
            at=argument.span,
        )

    return walk(argument.type)
