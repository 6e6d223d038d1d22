"""Property test: the type the checker predicts for an expression is the type of the value the interpreter computes.

Hypothesis builds random *well-typed* functions over concrete shapes, such as

    fn h0(a: f32[N0, N1]) -> f32[N0, N1] {
        return tanh(a) * a
    }

    fn f(p0: f32[2, 3], p1: i64[3]) {
        let t0 = (p0 * 2.0)
        for k1 in 0..2 {
            t0 += p1
        }
        return (sum(maximum(t0, p1), axis=1, keepdims=true), h0(t0)[-1, ::2])
    }

goal-directed: each generator is asked for an expression of a given dtype and shape and
picks operands that give exactly that type by the rules of docs/language.md and
docs/types.md: numpy broadcasting (size-1 dims, rank differences), weak literals,
promotion between f32/f64/i32/i64, comparisons and and/or/not, unary minus, the math
primitives, reductions with and without `axis=`/`keepdims=`, matmul (1-D, 2-D, batched
with broadcasting; `@` and `matmul`), transpose, swapaxes, reshape (with -1), concat/stack,
indexing and slicing (static and computed indices, negative, steps), gather/one_hot,
softmax/log_softmax, where/maximum/minimum, broadcast_to, creation with `dtype=`,
`len`/`shape`, float/int, tensor literals, tuples and destructuring, `let` with and
without annotations, rebinding (`=`, `+=`, `x[i] = e`) in loops and branches, and calls
of generic and unannotated helper functions. `f` returns one to three such expressions.

For each program `dl.lang.check` must report no error; the type it gives the returned
expression (`Typed.types[id(node)]`, also the signature's result) must equal the dtype
and shape of what the interpreter computes in-process for random arguments (compiled with
the checker's result, as `dlrun` does); and both must equal the type the generator aimed at.

KNOWN_MISMATCHES (below) lists each open disagreement found this way, with a minimal
program, the checker's and the interpreter's answer, and which side docs/language.md and
docs/types.md support. The generator avoids those constructs (`Builder.allowed`), and
`test_known_mismatch` runs each example as a strict xfail, so it turns red (XPASS) once
the bug is fixed: then delete the entry, and the generator covers the construct again.
To look for new bugs without the restrictions, draw from `programs(frozenset())`.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from math import prod

import dl.lang
import numpy as np
import pytest
from dl.interp.run import compile_program, run_guarded
from dl.lang import ast
from dl.lang.diagnostics import DiagnosticError
from dl.lang.types import TensorType, TupleType
from dl.runtime.values import DTYPE_NAMES
from dlharness import dtype_of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FLOATS = ("f32", "f64")
INTEGERS = ("i32", "i64")
NUMBERS = (*FLOATS, *INTEGERS)
DTYPES = (*NUMBERS, "bool")
MAX_RANK = 4  # of any tensor the generator builds
Shape = tuple[int, ...]


@dataclass(frozen=True)
class Mismatch:
    """A construct where the checker and the interpreter disagree (or the checker rejects a well-typed program)."""

    key: str
    program: str  # defines `fn f()`; its return value is compared
    checker: str  # what the checker says today
    interpreter: str  # what the interpreter gives today
    expected: str | None  # the type both should give per the docs; None: they need only agree
    reason: str


# Open bugs, most important first. Each is excluded from the generator and checked by a strict xfail.
# The nine found before the derivative primitives are fixed; these came with those primitives.
KNOWN_MISMATCHES: tuple[Mismatch, ...] = ()
AVOIDED = frozenset(m.key for m in KNOWN_MISMATCHES)


# ---------------------------------------------------------------------- running a program


_paths = itertools.count()


def type_text(dtype: str, shape: tuple[int | str, ...]) -> str:
    return f"{dtype}[{', '.join(map(str, shape))}]" if shape else dtype


def checker_type(typed, path: str) -> str:
    """The checker's type of the expression `f` returns, via `Typed.types`, cross-checked with f's signature.

    A tensor type is written `f32[2, 3]`; a tuple of them (several expressions tested at once) `(f32, i64[2])`."""
    assert not typed.errors, "the checker rejects a well-typed program:\n" + "\n".join(
        str(d.message) for d in typed.errors
    )
    module = typed.program.modules[path]
    decl = next(d for d in module.decls if isinstance(d, ast.FnDecl) and d.name == "f")
    returned = decl.body.body[-1]
    assert isinstance(returned, ast.Return)
    found = typed.type_of(returned.value)
    signature = next(s for s in typed.signatures[path] if s.name == "f")
    assert str(signature.result) == str(found), f"signature says {signature.result}, the return node {found}"
    items = found.items if isinstance(found, TupleType) else (found,)
    for item in items:
        assert isinstance(item, TensorType), f"not a tensor type: {item}"
        assert all(isinstance(d, int) for d in item.dims), f"symbolic dimensions in {item}"
    return several([type_text(item.dtype, item.dims) for item in items], isinstance(found, TupleType))


def several(types: list[str], is_tuple: bool) -> str:
    return f"({', '.join(types)})" if is_tuple else types[0]


def run_time_type(typed, path: str, args: list) -> str:
    # As `dlrun` does: the checker's result tells the interpreter the dtype a literal takes where one is declared.
    function = compile_program(typed.program, typed).states[path].cells["f"].value
    with np.errstate(all="ignore"):
        value = run_guarded(lambda: function(*args))
    items = value if isinstance(value, tuple) else (value,)
    return several([type_text(DTYPE_NAMES[dtype_of(item)], np.shape(item)) for item in items], isinstance(value, tuple))


def both_types(source: str, args: list) -> tuple[str, str]:
    path = f"<checker-property-{next(_paths)}>.dl"
    typed = dl.lang.check(source, path)
    return checker_type(typed, path), run_time_type(typed, path, args)


# ---------------------------------------------------------------------- the generator


@dataclass(frozen=True)
class Program:
    source: str
    params: tuple[tuple[str, str, Shape], ...]
    expected: str
    seed: int

    def __repr__(self) -> str:  # how hypothesis shows a falsifying example
        return f"Program(expected={self.expected}, seed={self.seed}):\n{self.source}"

    def arguments(self) -> list:
        rng = np.random.default_rng(self.seed)
        return [argument(rng, dtype, shape) for _, dtype, shape in self.params]


def argument(rng: np.random.Generator, dtype: str, shape: Shape):
    """A random value of a DL type in the interpreter's representation (i64 and bool scalars are Python values)."""
    if dtype in FLOATS:
        values = rng.standard_normal(shape).astype(dtype.replace("f", "float"))
    elif dtype in INTEGERS:
        values = rng.integers(-3, 4, shape).astype(dtype.replace("i", "int"))
    else:
        values = rng.random(shape) < 0.5
    if shape:
        return values
    if dtype == "i64":
        return int(values)
    if dtype == "bool":
        return bool(values)
    return values[()]


def nest(items: list[str], shape: Shape) -> str:
    if not shape:
        return items[0]
    step = len(items) // shape[0]
    return "[" + ", ".join(nest(items[k * step : (k + 1) * step], shape[1:]) for k in range(shape[0])) + "]"


class Builder:
    """Draws expressions of a requested dtype and shape; collects the parameters and `let`s they need."""

    def __init__(self, draw, avoid: frozenset[str] = AVOIDED) -> None:
        self.draw = draw
        self.avoid = avoid
        self.params: list[tuple[str, str, Shape]] = []
        self.lets: list[str] = []
        self.helpers: list[str] = []

    # -------------------------------------------------------------- drawing
    def allowed(self, key: str) -> bool:
        return key not in self.avoid

    def choice(self, options):
        return self.draw(st.sampled_from(list(options)))

    def number(self, low: int, high: int) -> int:
        return self.draw(st.integers(low, high))

    def flag(self) -> bool:
        return self.draw(st.booleans())

    def shape(self, low: int = 0, high: int = 3) -> Shape:
        return tuple(self.draw(st.lists(st.integers(1, 4), min_size=low, max_size=high)))

    def source(self, expression: str) -> str:
        params = ", ".join(f"{name}: {type_text(dtype, shape)}" for name, dtype, shape in self.params)
        body = "".join("    " + line.replace("\n", "\n    ") + "\n" for line in self.lets)
        helpers = "".join(f"{helper}\n\n" for helper in self.helpers)
        return f"{helpers}fn f({params}) {{\n{body}    return {expression}\n}}\n"

    # -------------------------------------------------------------- expressions
    def expr(self, dtype: str, shape: Shape, depth: int, top: bool = False) -> str:
        """An expression whose type is exactly `dtype[shape]` (never a weak literal)."""
        if depth <= 0:
            return self.leaf(dtype, shape)
        options = [name for name, applies in PRODUCTIONS if applies(dtype, shape)]
        production = self.choice(options if top else ["leaf", *options])
        if production == "leaf":
            return self.leaf(dtype, shape)
        text = getattr(self, production)(dtype, shape, depth - 1)
        if not top and self.number(0, 3) == 0:
            name = f"t{len(self.lets)}"
            annotation = f": {type_text(dtype, shape)}" if self.flag() else ""
            self.lets.append(f"let {name}{annotation} = {text}")
            return name
        return text

    def leaf(self, dtype: str, shape: Shape) -> str:
        kinds = ["param", "creation"]
        if len(shape) <= 2 and 0 < prod(shape) <= 8:  # (an empty axis, as `pad` may aim at, has no literal)
            kinds.append("literal")
        if dtype == "i64" and len(shape) == 1:
            kinds.append("arange")
        return getattr(self, f"leaf_{self.choice(kinds)}")(dtype, shape)

    def leaf_param(self, dtype: str, shape: Shape) -> str:
        same = [name for name, d, s in self.params if (d, s) == (dtype, shape)]
        if same and self.flag():
            return self.choice(same)
        name = f"p{len(self.params)}"
        self.params.append((name, dtype, shape))
        return name

    def leaf_literal(self, dtype: str, shape: Shape) -> str:
        if not shape:  # a suffixed literal: an unsuffixed one would be weak
            return self.choice(SCALAR_LITERALS[dtype])
        items = [self.element(dtype) for _ in range(prod(shape))]
        if dtype in ("f32", "f64", "i64"):  # one suffixed element: the literal is typed, not weak
            items[self.number(0, len(items) - 1)] += dtype
        return nest(items, shape)

    def element(self, dtype: str) -> str:
        if dtype in FLOATS:
            return self.choice(["0.5", "1.0", "-2.5", "3.0", "1e-3"])
        if dtype == "bool":
            return self.choice(["true", "false"])
        value = self.choice(["0", "1", "-2", "3"])
        return f"{value}i32" if dtype == "i32" else value

    def leaf_creation(self, dtype: str, shape: Shape) -> str:
        dims = [self.dim(d) for d in shape]
        if len(shape) == 2 and self.number(0, 3) == 0:  # an identity matrix, square or not
            square = shape[0] == shape[1] and self.flag()
            sizes = dims[:1] if square else dims
            return f"eye({', '.join(sizes)}{'' if dtype == 'f32' and self.flag() else f', dtype={dtype}'})"
        if len(shape) == 1 and dtype in FLOATS and self.number(0, 3) == 0:  # f64 where an end is, or `dtype=`
            ends = ("0.5f64", "2.0") if dtype == "f64" and self.flag() else ("-1.0", "3")
            given = f", dtype={dtype}" if (dtype == "f64" and "0.5f64" not in ends) or self.flag() else ""
            return f"linspace({ends[0]}, {ends[1]}, {dims[0]}{given})"
        if dtype in FLOATS and self.flag():
            name = self.choice(["randn", "rand"])
            keywords = [f"seed={self.number(0, 9)}"] if self.flag() else []
        else:
            name = self.choice(["zeros", "ones", "full"])
            keywords = []
            if name == "full":
                keywords.append("value=" + {"bool": "true", "i32": "2", "i64": "-3"}.get(dtype, "0.5"))
        if dtype != "f32" or self.flag():
            keywords.append(f"dtype={dtype}")
        if len(keywords) == 2 and self.flag():
            keywords.reverse()
        return f"{name}({', '.join(dims + keywords)})"

    def leaf_arange(self, dtype: str, shape: Shape) -> str:
        (size,) = shape
        start = self.number(-3 if self.allowed("arange-negative-start") else 0, 3)
        return f"arange({self.dim(size)})" if start == 0 and self.flag() else f"arange({start}, {start + size})"

    def dim(self, size: int) -> str:
        """A static integer argument equal to `size`: a literal, or `len`/`shape` of a parameter."""
        form = self.number(0, 5)
        if form == 4:
            return f"len({self.leaf_param(self.choice(DTYPES), (size, *self.shape(0, 1)))})"
        if form == 5:
            rest = self.shape(0, 2)
            position = self.number(0, len(rest))
            full = (*rest[:position], size, *rest[position:])
            index = position if self.flag() else position - len(full)
            return f"shape({self.leaf_param(self.choice(DTYPES), full)})[{index}]"
        return str(size)

    # -------------------------------------------------------------- operands
    def operand_shapes(self, shape: Shape, count: int) -> list[Shape]:
        """`count` shapes that broadcast to exactly `shape`: leading dims dropped, some dims 1."""
        n = len(shape)
        shapes: list[list[int | None]] = []
        for _ in range(count):
            rank = n if self.flag() else self.number(0, n)
            shapes.append([None] * (n - rank) + [d if d == 1 or self.number(0, 2) else 1 for d in shape[n - rank :]])
        for position, size in enumerate(shape):
            if size != 1 and all(s[position] != size for s in shapes):
                chosen = shapes[self.number(0, count - 1)]
                chosen[position:] = [1 if d is None else d for d in chosen[position:]]  # Nones lead
                chosen[position] = size
        if n and all(s[0] is None for s in shapes):  # someone must have the full rank
            chosen = shapes[self.number(0, count - 1)]
            chosen[:] = [1 if d is None else d for d in chosen]
        return [tuple(d for d in s if d is not None) for s in shapes]

    def broadcastable(self, shape: Shape) -> Shape:
        """A shape that broadcasts into `shape` (without covering it necessarily)."""
        rank = len(shape) if self.flag() else self.number(0, len(shape))
        return tuple(d if self.number(0, 2) else 1 for d in shape[len(shape) - rank :])

    def strong_pairs(self, dtype: str) -> list[tuple[str, str]]:
        """Operand dtypes that promote to `dtype` (docs/types.md, Promotion)."""
        return {
            "f32": [("f32", "f32"), ("f32", "i32"), ("f32", "i64"), ("i32", "f32"), ("i64", "f32")],
            "f64": [("f64", "f64"), ("f64", "f32"), ("f32", "f64"), ("f64", "i32"), ("i64", "f64"), ("f64", "i64")],
            "i64": [("i64", "i64"), ("i32", "i64"), ("i64", "i32")],
            "i32": [("i32", "i32")],
        }[dtype]

    def weak_literal(self, dtype: str) -> str:
        if dtype in FLOATS:
            return self.choice(["2.0", "0.5", "2", "1", "1e-3"])
        return self.choice(["2", "1", "3"])

    def operands(self, dtype: str, shape: Shape, depth: int) -> tuple[str, str]:
        """Two operands whose combination (arithmetic promotion, broadcasting) is `dtype[shape]`."""
        form = self.choice(["strong", "weak right", "weak left", "weak float with integer"])
        if form == "weak float with integer" and dtype != "f32":
            form = "strong"
        if dtype == "i32" and form != "strong" and not self.allowed("i32-meets-weak-int"):
            form = "strong"
        if form == "strong":
            shapes = self.operand_shapes(shape, 2)
            left_dtype, right_dtype = self.choice(self.strong_pairs(dtype))
            return self.expr(left_dtype, shapes[0], depth), self.expr(right_dtype, shapes[1], depth)
        if form == "weak float with integer":
            operand = self.expr(self.choice(INTEGERS), shape, depth)
            literal = self.choice(["2.5", "0.5"])
        else:
            operand = self.expr(dtype, shape, depth)
            literal = self.weak_literal(dtype)
        return (operand, literal) if form != "weak left" else (literal, operand)

    # -------------------------------------------------------------- productions
    def arithmetic(self, dtype: str, shape: Shape, depth: int) -> str:
        ops = ["+", "-", "*", "/", "//", "%", "**"] if dtype in FLOATS else ["+", "-", "*", "//", "%", "**"]
        op = self.choice(ops)
        if op in ("//", "%", "**") and dtype in INTEGERS:  # a non-zero, non-negative literal on the right
            suffix = "i32" if dtype == "i32" and not self.allowed("i32-meets-weak-int") else ""
            return f"({self.expr(dtype, shape, depth)} {op} {self.choice(['2', '3'])}{suffix})"
        left, right = self.operands(dtype, shape, depth)
        return f"({left} {op} {right})"

    def negate(self, dtype: str, shape: Shape, depth: int) -> str:
        return f"(-{self.expr(dtype, shape, depth)})"

    def comparison(self, dtype: str, shape: Shape, depth: int) -> str:
        if self.number(0, 4) == 0:  # a float test: a bool of the float's shape
            return f"{self.choice(['isnan', 'isinf', 'isfinite'])}({self.expr(self.choice(FLOATS), shape, depth)})"
        op = self.choice(["==", "!=", "<", "<=", ">", ">="])
        if self.flag():
            shapes = self.operand_shapes(shape, 2)
            if op in ("==", "!=") and self.number(0, 3) == 0:
                kinds = ("bool", "bool")
            else:
                kinds = (self.choice(NUMBERS), self.choice(NUMBERS))
            return f"({self.expr(kinds[0], shapes[0], depth)} {op} {self.expr(kinds[1], shapes[1], depth)})"
        operand = self.expr(self.choice(NUMBERS), shape, depth)
        return f"({operand} {op} {self.choice(['0.0', '1', '-0.5'])})"

    def logic(self, dtype: str, shape: Shape, depth: int) -> str:
        op = self.choice(["not", "and", "or"])
        if op == "not":
            return f"(not {self.expr('bool', shape, depth)})"
        shapes = self.operand_shapes(shape, 2)
        if not shapes[0] and shapes[1] and not self.allowed("scalar-and-tensor"):
            shapes.reverse()
        return f"({self.expr('bool', shapes[0], depth)} {op} {self.expr('bool', shapes[1], depth)})"

    def math(self, dtype: str, shape: Shape, depth: int) -> str:
        names = ["relu", "abs", "sign"]
        if dtype in FLOATS:
            names += ["exp", "log", "sqrt", "tanh", "sigmoid", "sin", "cos", "softplus", "log1p", "expm1", "erf"]
            names += ["tan", "asin", "acos", "atan"]
            names += ["floor", "ceil", "round"]
        return f"{self.choice(names)}({self.expr(dtype, shape, depth)})"

    def pairwise(self, dtype: str, shape: Shape, depth: int) -> str:
        left, right = self.operands(dtype, shape, depth)
        if self.number(0, 3) == 0:  # clip: a bound of the other operand's dtype, or a literal
            bound = "1" if dtype in INTEGERS else "0.5"
            return f"clip({left}, {right}, {bound})" if self.flag() else f"clip({left}, -{bound}, {right})"
        return f"{self.choice(['maximum', 'minimum'])}({left}, {right})"

    def where(self, dtype: str, shape: Shape, depth: int) -> str:
        if self.number(0, 4) == 0:  # both values weak literals: the condition gives the shape
            values = ("1.0", "0.0") if dtype == "f32" else ("1", "0") if dtype == "i64" else None
            if values:
                return f"where({self.expr('bool', shape, depth)}, {values[0]}, {values[1]})"
        if self.flag():  # the values cover the shape; the condition broadcasts into it
            condition = self.expr("bool", self.broadcastable(shape), depth)
            left, right = self.operands(dtype, shape, depth)
        else:
            shapes = self.operand_shapes(shape, 3)
            condition = self.expr("bool", shapes[0], depth)
            pair = self.choice(self.strong_pairs(dtype))
            left, right = self.expr(pair[0], shapes[1], depth), self.expr(pair[1], shapes[2], depth)
        return f"where({condition}, {left}, {right})"

    def reduction(self, dtype: str, shape: Shape, depth: int) -> str:
        candidates: list[tuple[str, str]] = []  # (primitive, input dtype)
        if dtype in NUMBERS and (dtype != "i32" or self.allowed("sum-of-i32")):
            candidates.append(("sum", dtype))
        candidates += [("max", dtype), ("min", dtype)]
        if dtype == "bool":
            candidates += [("any", dtype), ("all", dtype)]
        if dtype in FLOATS:
            candidates += [("mean", dtype), ("logsumexp", dtype), ("var", dtype), ("std", dtype)]
        if dtype == "f32":
            candidates.append(("mean", self.choice([*INTEGERS, "bool"])))  # a mean is a fraction: f32
        if dtype == "i64":
            candidates += [("argmax", self.choice(DTYPES)), ("argmin", self.choice(NUMBERS)), ("sum", "bool")]
        name, source_dtype = self.choice(candidates)
        forms = ["axis"] if len(shape) < MAX_RANK else []
        if not shape:
            forms.append("all")
        if all(d == 1 for d in shape):
            forms.append("all keepdims")
        if 1 in shape:
            forms.append("axis keepdims")
        form = self.choice(forms)
        if form == "all":
            return f"{name}({self.expr(source_dtype, self.shape(), depth)})"
        if form == "all keepdims":
            return f"{name}({self.expr(source_dtype, self.shape(len(shape), len(shape)), depth)}, keepdims=true)"
        if form == "axis":
            axis = self.number(0, len(shape))
            source_shape = (*shape[:axis], self.number(1, 4), *shape[axis:])
        else:
            axis = self.choice([k for k, d in enumerate(shape) if d == 1])
            source_shape = (*shape[:axis], self.number(1, 4), *shape[axis + 1 :])
        written = axis if self.flag() else axis - len(source_shape)
        keywords = [f"axis={written}"]
        if form == "axis keepdims":
            keywords.append("keepdims=true")
        elif self.number(0, 3) == 0:
            keywords.append("keepdims=false")
        if self.flag():
            keywords.reverse()
        return f"{name}({self.expr(source_dtype, source_shape, depth)}, {', '.join(keywords)})"

    def reduction_over_axes(self, dtype: str, shape: Shape, depth: int) -> str:
        """`sum`, `mean`, `max`, `min` or `logsumexp` over two axes at once (`axis=(i, j)`, any order or sign),
        new ones, or kept with `keepdims=true` where `shape` has two dims of 1."""
        names = ["max", "min"]
        if dtype != "i32" or self.allowed("sum-of-i32"):
            names.append("sum")
        if dtype in FLOATS:
            names += ["mean", "logsumexp", "var", "std"]
        ones = [k for k, d in enumerate(shape) if d == 1]
        kept = len(ones) >= 2 and (len(shape) + 2 > MAX_RANK or self.flag())
        if kept:
            axes = sorted(self.draw(st.permutations(ones))[:2])
            source = tuple(self.number(1, 3) if k in axes else d for k, d in enumerate(shape))
        else:
            rank = len(shape) + 2
            axes = sorted(self.draw(st.permutations(range(rank)))[:2])
            rest = iter(shape)
            source = tuple(self.number(1, 3) if k in axes else next(rest) for k in range(rank))
        spelled = [axis if self.flag() else axis - len(source) for axis in axes]
        if self.flag():
            spelled.reverse()
        keepdims = ", keepdims=true" if kept else ""
        name = self.choice(names)
        return f"{name}({self.expr(dtype, source, depth)}, axis=({spelled[0]}, {spelled[1]}){keepdims})"

    def along(self, dtype: str, shape: Shape, depth: int) -> str:
        """`flip` of any dtype along one axis or two, or `cumsum` (of bools for i64: a count), the axis by
        position or keyword, counted from either end."""
        axis = self.number(0, len(shape) - 1)
        written = str(axis if self.flag() else axis - len(shape))
        if dtype != "bool" and self.flag():
            source = "bool" if dtype == "i64" and self.flag() else dtype
            spelled = f"axis={written}" if self.flag() else written
            return f"cumsum({self.expr(source, shape, depth)}, {spelled})"
        if dtype in NUMBERS and self.number(0, 4) == 0:  # `topk` of a whole axis: its values in order, or positions
            positions = dtype == "i64" and self.flag()
            source = self.choice(sorted(NUMBERS)) if positions else dtype
            largest = self.choice(["", ", largest=true", ", largest=false"])
            return f"topk({self.expr(source, shape, depth)}, {shape[axis]}, axis={written}{largest})[{int(positions)}]"
        descending = self.choice(["", ", descending=true", ", descending=false"])
        if dtype == "i64" and self.flag():  # positions of a sort of any dtype
            return f"argsort({self.expr(self.choice(DTYPES), shape, depth)}, axis={written}{descending})"
        if self.number(0, 3) == 0:
            return f"sort({self.expr(dtype, shape, depth)}, axis={written}{descending})"
        if self.number(0, 3) == 0:  # one element per index along the axis: sorted by a tensor of the same shape
            order = f"argsort({self.expr(self.choice(DTYPES), shape, depth)}, axis={written})"
            if dtype in NUMBERS and self.flag():
                target, updates = self.expr(dtype, shape, depth), self.expr(dtype, shape, depth)
                return f"add_along_axis({target}, {order}, {updates}, {written})"
            return f"take_along_axis({self.expr(dtype, shape, depth)}, {order}, {written})"
        if self.number(0, 4) == 0:
            return self.padded(dtype, shape, axis, written, depth)
        if len(shape) >= 2 and self.flag():
            written = f"({written}, {(axis + 1) % len(shape)})"
        return f"flip({self.expr(dtype, shape, depth)}, {written})"

    def padded(self, dtype: str, shape: Shape, axis: int, written: str, depth: int) -> str:
        """`pad` along one axis: widths of -1 to 2 (a negative one removes), so that the padded axis has the
        size aimed at; a literal `value=` for numbers, the axis by keyword or left out for the last."""
        before, after = self.number(-1, 2), self.number(-1, 2)
        while max(before, 0) + max(after, 0) > shape[axis]:  # what is added cannot outgrow the axis aimed at
            before, after = min(before, 0), after - 1
        source = tuple(n - before - after if k == axis else n for k, n in enumerate(shape))
        value = {"f32": ", value=1.5", "f64": ", value=-2.0", "i64": ", value=3", "i32": ", value=-1"}.get(dtype, "")
        spelled = "" if axis == len(shape) - 1 and self.flag() else f", axis={written}"
        return f"pad({self.expr(dtype, source, depth)}, {before}, {after}{spelled}{value if self.flag() else ''})"

    def triangle(self, dtype: str, shape: Shape, depth: int) -> str:
        """`tril` or `triu` (the shape and dtype are its argument's), the diagonal given or not, by position or
        keyword."""
        diagonal = self.choice(["", ", 1", ", -2", ", k=0", ", k=-1"])
        return f"{self.choice(['tril', 'triu'])}({self.expr(dtype, shape, depth)}{diagonal})"

    def einsum(self, dtype: str, shape: Shape, depth: int) -> str:
        """An `einsum` of one or two operands whose spec keeps letters of the sizes of `shape` (in order) and sums
        over up to two more; each letter is an axis of at least one operand, in any order."""
        pool = list(self.draw(st.permutations("ijklmn")))
        output = pool[: len(shape)]
        summed = pool[len(shape) : len(shape) + self.number(0, 2)]
        sizes = dict(zip(output, shape, strict=True)) | {letter: self.number(1, 3) for letter in summed}
        count = self.number(1, 2)
        owned: list[list[str]] = [[] for _ in range(count)]
        for letter in [*output, *summed]:
            owners = [self.number(0, count - 1)] + ([self.number(0, count - 1)] if count > 1 and self.flag() else [])
            for owner in set(owners):
                owned[owner].append(letter)
        if any(len(letters) > MAX_RANK for letters in owned):
            return self.expr(dtype, shape, depth)
        operands, spec = [], []
        for letters in owned:
            letters = list(self.draw(st.permutations(letters)))
            operands.append(self.expr(dtype, tuple(sizes[letter] for letter in letters), depth))
            spec.append("".join(letters))
        return f'einsum("{",".join(spec)}->{"".join(output)}", {", ".join(operands)})'

    def categorical(self, dtype: str, shape: Shape, depth: int) -> str:
        """Samples of logits along a last axis (a parameter: finite, as `categorical` needs)."""
        logits = self.leaf_param(self.choice(FLOATS), (*shape, self.number(1, 4)))
        seed = f", seed={self.number(0, 9)}" if self.flag() else ""
        return f"categorical({logits}{seed})"

    def dropout(self, dtype: str, shape: Shape, depth: int) -> str:
        probability = self.choice(["0.5", "0.0", "1.0", "0.25"])
        training = self.choice(["", ", training=true", ", training=false"])
        return f"dropout({self.expr(dtype, shape, depth)}, {probability}, seed={self.number(0, 9)}{training})"

    def clock(self, dtype: str, shape: Shape, depth: int) -> str:
        return self.choice(["time()", "(time() - time())"])

    def tree_arithmetic(self, dtype: str, shape: Shape, depth: int) -> str:
        """A leaf of arithmetic on tuples: of two tuples of one structure, of a tuple and a scalar, or `-t`."""
        left, right = self.expr(dtype, shape, depth), self.expr(dtype, shape, depth)
        tree = f"({left}, ({left}, {right}))"
        ops = ["+", "-", "*", "/"] if dtype in FLOATS else ["+", "-", "*"]
        form = self.choice(["trees", "scalar", "negated"])
        if form == "trees":
            combined = f"({tree} {self.choice(ops)} ({right}, ({right}, {left})))"
        elif form == "scalar":
            scalar = self.expr(dtype, (), depth)
            combined = f"({tree} {self.choice(ops)} {scalar})" if self.flag() else f"({scalar} * {tree})"
        else:
            combined = f"(-{tree})"
        return f"{combined}[1][{self.number(0, 1)}]" if self.flag() else f"{combined}[0]"

    def softmax(self, dtype: str, shape: Shape, depth: int) -> str:
        name = self.choice(["softmax", "log_softmax"])
        axis = f", axis={self.number(-len(shape), len(shape) - 1)}" if self.flag() else ""
        return f"{name}({self.expr(dtype, shape, depth)}{axis})"

    def matmul(self, dtype: str, shape: Shape, depth: int) -> str:
        inner = self.number(1, 4)
        if not shape:
            shapes = [(inner,), (inner,)]
        elif len(shape) == 1:
            shapes = self.choice([[(inner,), (inner, shape[0])], [(shape[0], inner), (inner,)]])
        else:
            batch, rows, columns = shape[:-2], shape[-2], shape[-1]
            form = self.choice(["matrices", "matrix @ vector", "vector @ matrix"])
            if form == "matrix @ vector":
                shapes = [(*shape, inner), (inner,)]
            elif form == "vector @ matrix":
                shapes = [(inner,), (*shape[:-1], inner, shape[-1])]
            else:
                left, right = self.operand_shapes(batch, 2)
                shapes = [(*left, rows, inner), (*right, inner, columns)]
        call = self.flag()
        pair = self.choice(self.strong_pairs(dtype))
        left, right = self.expr(pair[0], shapes[0], depth), self.expr(pair[1], shapes[1], depth)
        return f"matmul({left}, {right})" if call else f"({left} @ {right})"

    def transpose(self, dtype: str, shape: Shape, depth: int) -> str:
        if not shape or self.flag():
            return f"transpose({self.expr(dtype, tuple(reversed(shape)), depth)})"
        order = self.draw(st.permutations(range(len(shape))))  # result axis i is source axis order[i]
        source = [0] * len(shape)
        for position, axis in enumerate(order):
            source[axis] = shape[position]
        return f"transpose({self.expr(dtype, tuple(source), depth)}, {', '.join(map(str, order))})"

    def swapaxes(self, dtype: str, shape: Shape, depth: int) -> str:
        """Two axes exchanged, each written from the front or from the end."""
        first, second = (self.number(0, len(shape) - 1) for _ in range(2))
        source = list(shape)
        source[first], source[second] = source[second], source[first]
        written = [axis - len(shape) if self.flag() else axis for axis in (first, second)]
        return f"swapaxes({self.expr(dtype, tuple(source), depth)}, {written[0]}, {written[1]})"

    def reshape(self, dtype: str, shape: Shape, depth: int) -> str:
        if len(shape) < MAX_RANK and self.number(0, 3) == 0:  # an axis of size 1 put in, then squeezed out
            axis = self.number(0, len(shape))
            widened = (*shape[:axis], 1, *shape[axis:])
            shown = str(axis) if self.flag() else f"({axis},)"
            return f"squeeze({self.expr(dtype, widened, depth)}, {shown})"
        factors = [p for n in shape for p in prime_factors(n)]
        rank = self.number(0 if not factors else 1, 3)
        source = [1] * rank
        for factor in factors:
            source[self.number(0, rank - 1)] *= factor
        dims = [self.dim(d) for d in shape]
        if self.flag():
            dims[self.number(0, len(dims) - 1)] = "-1"
        return f"reshape({self.expr(dtype, tuple(source), depth)}, {', '.join(dims)})"

    def concat(self, dtype: str, shape: Shape, depth: int) -> str:
        axis = self.choice([k for k, d in enumerate(shape) if d >= 2])
        cut = sorted(self.draw(st.sets(st.integers(1, shape[axis] - 1), min_size=1, max_size=2)))
        sizes = [b - a for a, b in itertools.pairwise([0, *cut, shape[axis]])]
        parts = [self.expr(dtype, (*shape[:axis], size, *shape[axis + 1 :]), depth) for size in sizes]
        return f"concat(({', '.join(parts)}){self.axis_keyword(axis, len(shape))})"

    def stack(self, dtype: str, shape: Shape, depth: int) -> str:
        axis = self.choice([k for k, d in enumerate(shape) if d <= 3])
        item = shape[:axis] + shape[axis + 1 :]
        parts = [self.expr(dtype, item, depth) for _ in range(shape[axis])]
        trailing = "," if len(parts) == 1 else ""
        return f"stack(({', '.join(parts)}{trailing}){self.axis_keyword(axis, len(shape))})"

    def axis_keyword(self, axis: int, rank: int) -> str:
        if axis == 0 and self.flag():
            return ""
        return f", axis={axis if self.flag() else axis - rank}"

    def index(self, dtype: str, shape: Shape, depth: int) -> str:
        integers = self.number(1 if not shape else 0, min(2, MAX_RANK - len(shape)))
        kinds = ["slice"] * len(shape) + ["int"] * integers
        kinds = self.draw(st.permutations(kinds))
        parts, source, sizes = [], [], iter(shape)
        for kind in kinds:
            if kind == "int":
                size = self.number(1, 4)
                value = self.number(-size, size - 1)
                if self.number(0, 3) == 0:  # not a literal: the checker cannot know it, the interpreter checks it
                    known = self.number(1, 4)
                    parts.append(f"({self.dim(known)} - {known - value})")
                else:
                    parts.append(str(value))
            else:
                size, part = self.slice(next(sizes))
                parts.append(part)
            source.append(size)
        if self.flag():  # `...` for a run of full slices (perhaps none)
            start = self.number(0, len(parts))
            stop = start
            while stop < len(parts) and parts[stop] == ":" and self.flag():
                stop += 1
            parts[start:stop] = ["..."]
        while len(parts) > 1 and parts[-1] == ":" and "..." not in parts and self.flag():
            parts.pop()
        target = self.expr(dtype, tuple(source), depth)
        if not target.isidentifier():
            target = f"({target})"
        return f"{target}[{', '.join(parts)}]"

    def slice(self, length: int) -> tuple[int, str]:
        """A source size and a slice of it with `length` elements."""
        form = self.number(0, 3)
        if form == 0:
            return length, ":"
        if form == 1:
            return length, "::-1"
        step = 1 if form == 2 else 2
        start = self.number(0, 2)
        stop = start + step * (length - 1) + 1
        size = stop + self.number(0, 2)
        start_text = self.choice([str(start), str(start - size), *([""] if start == 0 else [])])
        stop_text = self.choice([str(stop), str(stop - size) if stop < size else ""])
        return size, f"{start_text}:{stop_text}" + (f":{step}" if step != 1 else "")

    def gather(self, dtype: str, shape: Shape, depth: int) -> str:
        axis = self.number(0, len(shape))
        index_rank = self.number(0, min(2, len(shape) - axis))
        index_shape = shape[axis : axis + index_rank]
        size = self.number(1, 4)
        source = (*shape[:axis], size, *shape[axis + index_rank :])
        values = [str(self.number(-size, size - 1)) for _ in range(prod(index_shape))]
        indices = nest(values, index_shape)
        if index_rank == 1 and shape[axis] <= size and self.flag():
            indices = f"arange({shape[axis]})"
        return f"gather({self.expr(dtype, source, depth)}, {indices}{self.axis_keyword(axis, len(source))})"

    def one_hot(self, dtype: str, shape: Shape, depth: int) -> str:
        classes = shape[-1]
        labels = [str(self.number(0, classes - 1)) for _ in range(prod(shape[:-1]))]
        if len(shape) == 1 and self.flag():
            text = self.choice(labels) + "i32" * self.flag()
        else:
            text = nest(labels, shape[:-1])
        return f"one_hot({text}, {self.dim(classes)})"

    def broadcast_to(self, dtype: str, shape: Shape, depth: int) -> str:
        (source,) = self.operand_shapes(shape, 1)
        return f"broadcast_to({self.expr(dtype, source, depth)}, {', '.join(self.dim(d) for d in shape)})"

    def zeros_like(self, dtype: str, shape: Shape, depth: int) -> str:
        return f"zeros_like({self.expr(dtype, shape, depth)})"

    def stop_gradient(self, dtype: str, shape: Shape, depth: int) -> str:
        return f"stop_gradient({self.expr(dtype, shape, depth)})"

    def tree_dot(self, dtype: str, shape: Shape, depth: int) -> str:
        """`tree_dot` of a pair of float tensors, as a scalar."""
        left = self.expr(dtype, (2,), depth)
        right = self.expr(dtype, (2,), depth)
        return f"tree_dot(({left}, {left}), ({right}, {right}))"

    def tree_map(self, dtype: str, shape: Shape, depth: int) -> str:
        """A leaf of `tree_map` over a pair of tuples, with an anonymous function or a primitive."""
        left = self.expr(dtype, shape, depth)
        right = self.expr(dtype, shape, depth)
        function = "fn(a, b) => a - b" if self.flag() else "fn(a, b) => maximum(a, b)"
        return f"tree_map({function}, ({left}, {left}), ({right}, {right}))[{self.number(0, 1)}]"

    def unbroadcast(self, dtype: str, shape: Shape, depth: int) -> str:
        """`x` of a shape that `shape` broadcasts up to (leading dims, size-1 dims grown), summed back down."""
        lead = self.shape(0, MAX_RANK - len(shape))
        source = (*lead, *(self.number(1, 3) if d == 1 else d for d in shape))
        if not self.allowed(f"unbroadcast-of-{dtype}"):  # nothing to sum: the known mismatch does not arise
            source = shape
        # a float `x` takes a float `like`'s dtype (an adjoint its variable's): `like` is of `dtype` or not a float
        likes = [d for d in DTYPES if d == dtype or d not in FLOATS or dtype not in FLOATS]
        like = self.expr(self.choice(likes), shape, depth)
        return f"unbroadcast({self.expr(dtype, source, depth)}, {like})"

    def reshape_like(self, dtype: str, shape: Shape, depth: int) -> str:
        factors = [p for n in shape for p in prime_factors(n)]
        rank = self.number(0 if not factors else 1, 3)
        source = [1] * rank
        for factor in factors:
            source[self.number(0, rank - 1)] *= factor
        like = self.expr(self.choice(DTYPES), shape, depth)
        return f"reshape_like({self.expr(dtype, tuple(source), depth)}, {like})"

    def expand_dims(self, dtype: str, shape: Shape, depth: int) -> str:
        axis = self.choice([k for k, d in enumerate(shape) if d == 1])
        source = shape[:axis] + shape[axis + 1 :]
        written = axis if self.flag() else axis - len(shape)
        return f"expand_dims({self.expr(dtype, source, depth)}, {written})"

    def scatter_add(self, dtype: str, shape: Shape, depth: int) -> str:
        """Updates added at literal indices (repeats accumulate) along an axis of a tensor of `shape`."""
        axis = self.number(0, len(shape) - 1)
        index_shape = self.shape(0, min(2, MAX_RANK - len(shape) + 1))
        size = shape[axis]
        indices = nest([str(self.number(-size, size - 1)) for _ in range(prod(index_shape))], index_shape)
        gathered = (*shape[:axis], *index_shape, *shape[axis + 1 :])
        updates = self.expr(self.choice(self.strong_pairs(dtype))[1], self.broadcastable(gathered), depth)
        keyword = self.axis_keyword(axis, len(shape))
        if not self.allowed("scatter_add-negative-axis"):
            keyword = "" if axis == 0 and self.flag() else f", axis={axis}"
        return f"scatter_add({self.expr(dtype, shape, depth)}, {indices}, {updates}{keyword})"

    def split_like(self, dtype: str, shape: Shape, depth: int) -> str:
        """One piece of `x` cut along an axis into pieces shaped like the tensors of a tuple."""
        axis = self.number(0, len(shape) - 1)
        sizes = [self.number(1, 3) for _ in range(self.number(0, 2))]
        position = self.number(0, len(sizes))
        sizes.insert(position, shape[axis])
        pieces = [(*shape[:axis], size, *shape[axis + 1 :]) for size in sizes]
        source = (*shape[:axis], sum(sizes), *shape[axis + 1 :])
        like_dtype = self.choice(DTYPES)  # the tuple's tensors share a dtype, which need not be x's
        like = [self.expr(like_dtype, piece, depth) for piece in pieces]
        items = f"({', '.join(like)}{',' if len(like) == 1 else ''})"
        keyword = self.axis_keyword(axis, len(shape))
        return f"split_like({self.expr(dtype, source, depth)}, {items}{keyword})[{position}]"

    def convolution(self, dtype: str, shape: Shape, depth: int) -> str:
        """`conv2d`, `max_pool2d` or one of their gradient helpers, with operands sized to give `shape`."""
        stride, size = self.number(1, 2), self.number(1, 3)
        padding = self.number(0, size // 2)
        keywords = f", stride={stride}, padding={padding}"
        n, channels, rows, columns = shape

        def before(count: int) -> int:  # an input size giving `count` windows
            return max((count - 1) * stride + size - 2 * padding, 1) if (count - 1) * stride + 1 > 2 * padding else 0

        def after(length: int, kernel: int = size) -> int:  # the number of windows along an input of `length`
            return (length + 2 * padding - kernel) // stride + 1

        kind = self.choice(["conv2d", "max_pool2d", "input_grad", "weight_grad", "pool_grad", "gather"])
        if kind in ("conv2d", "max_pool2d", "gather") and before(rows) and before(columns):
            source = (n, self.number(1, 2) if kind == "conv2d" else channels, before(rows), before(columns))
            if after(source[2]) == rows and after(source[3]) == columns:
                x = self.expr(dtype, source, depth)
                if kind == "conv2d":
                    kernel = self.expr(dtype, (channels, source[1], size, size), depth)
                    return f"conv2d({x}, {kernel}{keywords})"
                if kind == "gather":
                    return f"max_pool2d_gather({self.expr(dtype, source, depth)}, {x}, {size}{keywords})"
                return f"max_pool2d({x}, {size}{keywords})"
        if kind == "weight_grad":  # `shape` is the kernel's [O, C, KH, KW]
            lengths = [max(k - 2 * padding, 1) + self.number(0, 2) for k in (rows, columns)]
            images = (self.number(1, 2), channels, *lengths)
            dy = (images[0], n, after(lengths[0], rows), after(lengths[1], columns))
            like = self.expr(self.choice(FLOATS), shape, depth)
            x = self.expr(dtype, images, depth)
            return f"conv2d_weight_grad({self.expr(dtype, dy, depth)}, {x}, {like}{keywords})"
        if rows + 2 * padding < size or columns + 2 * padding < size:
            return self.leaf(dtype, shape)
        if kind == "input_grad":
            outputs = self.number(1, 2)
            dy = self.expr(dtype, (n, outputs, after(rows), after(columns)), depth)
            kernel = self.expr(dtype, (outputs, channels, size, size), depth)
            return f"conv2d_input_grad({dy}, {kernel}, {self.expr(self.choice(FLOATS), shape, depth)}{keywords})"
        dy = self.expr(dtype, (n, channels, after(rows), after(columns)), depth)
        return f"max_pool2d_grad({dy}, {self.expr(dtype, shape, depth)}, {size}{keywords})"

    def tree_add(self, dtype: str, shape: Shape, depth: int) -> str:
        """Two tensors (as operands of `+`), or two tuples of them, added leaf by leaf."""
        if self.allowed("tree_add-weak-int") and self.allowed("tree_add-mixed-dtypes") and self.flag():
            left, right = self.operands(dtype, shape, depth)
            return f"tree_add({left}, {right})"
        shapes = self.operand_shapes(shape, 2)
        pairs = self.strong_pairs(dtype)
        if not self.allowed("tree_add-mixed-dtypes"):
            pairs = [pair for pair in pairs if pair[0] == pair[1]]
        left_dtype, right_dtype = self.choice(pairs)
        left, right = self.expr(left_dtype, shapes[0], depth), self.expr(right_dtype, shapes[1], depth)
        if self.flag():
            other_dtype, other_shape = self.choice(DTYPES[:-1]), self.shape(0, 2)
            others = [self.expr(other_dtype, other_shape, depth) for _ in range(2)]
            return f"tree_add(({left}, {others[0]}), ({right}, {others[1]}))[0]"
        return f"tree_add({left}, {right})"

    def tape(self, dtype: str, shape: Shape, depth: int) -> str:
        """A value pushed on a tape (of its type) and popped back, maybe under another push and pop."""
        empty = f"tape({self.expr(dtype, shape, depth)})"
        tape = f"push({empty}, {self.expr(dtype, shape, depth)})"
        if self.flag():  # last in, first out: push another value and pop it first
            on_top = f"push({tape}, {self.expr(dtype, shape, depth)})"
            tape = f"pop({on_top})[1]"
        if self.flag():
            name = f"q{len(self.lets)}"
            self.lets.append(f"let ({name}, rest{len(self.lets)}) = pop({tape})")
            return name
        return f"pop({tape})[0]"

    def convert(self, dtype: str, shape: Shape, depth: int) -> str:
        if dtype == "i64":  # of a leaf only: int() of a nan or inf computed value is a run-time error
            return f"int({self.leaf(self.choice(DTYPES), shape)})"
        keyword = ", dtype=f64" if dtype == "f64" else self.choice(["", ", dtype=f32"])
        return f"float({self.expr(self.choice(DTYPES), shape, depth)}{keyword})"

    def length(self, dtype: str, shape: Shape, depth: int) -> str:
        source = self.shape(1, 3)
        operand = self.expr(self.choice(DTYPES), source, depth)
        form = self.number(0, 2)
        if form == 0:
            return f"len({operand})"
        if form == 1:  # the size of a tape
            pushes = self.number(0, 2)
            return "len(" + "push(" * pushes + f"tape({operand})" + f", {operand})" * pushes + ")"
        return f"shape({operand})[{self.number(-len(source), len(source) - 1)}]"

    def call(self, dtype: str, shape: Shape, depth: int) -> str:
        """A call of a helper function: generic (dimension variables), or unannotated (checked per call)."""
        name = f"h{len(self.helpers)}"
        bodies = ["a", "transpose(transpose(a))"]
        if dtype in NUMBERS:
            bodies += ["-a", "a * 2", "abs(a) + a", "where(a > a, a, -a)", "maximum(a, a - 1)"]
        if dtype in FLOATS:
            bodies += ["tanh(a) * a", "a / (1.0 + exp(-a))"]
        if dtype == "bool":
            bodies += ["not a", "a == a"]
        body = self.choice(bodies)
        symbolic = type_text(dtype, tuple(f"N{k}" for k in range(len(shape))))
        form = self.choice(["generic", "generic with result", "unannotated"])
        params = "a" if form == "unannotated" else f"a: {symbolic}"
        result = f" -> {symbolic}" if form == "generic with result" else ""
        self.helpers.append(f"fn {name}({params}){result} {{\n    return {body}\n}}")
        return f"{name}({self.expr(dtype, shape, depth)})"

    def pair(self, dtype: str, shape: Shape, depth: int) -> str:
        """One item of a tuple: by a static index, or destructured with `let (a, b) = ...`."""
        value = self.expr(dtype, shape, depth)
        other = self.expr(self.choice(DTYPES), self.shape(0, 2), depth)
        first = self.flag()
        items = f"({value}, {other})" if first else f"({other}, {value})"
        if self.flag():
            return f"{items}[{self.choice([0, -2] if first else [1, -1])}]"
        names = [f"a{len(self.lets)}", f"b{len(self.lets)}"]
        self.lets.append(f"let ({names[0]}, {names[1]}) = {items}")
        return names[0] if first else names[1]

    def update(self, dtype: str, shape: Shape, depth: int) -> str:
        """A variable rebound by statements (`x = e`, `x += e`, `x[i] = e`), maybe in a loop or a branch."""
        value = self.expr(dtype, shape, depth)
        name = f"t{len(self.lets)}"
        self.lets.append(f"let {name} = {value}")
        form = self.choice(["plain", "for", "while", "if"])
        statements = [self.rebind(name, dtype, shape, depth) for _ in range(self.number(1, 2))]
        if form == "if":
            condition = self.expr("bool", (), depth)
            other = self.rebind(name, dtype, shape, depth)
            body = "\n    ".join(statements)
            self.lets.append(f"if {condition} {{\n    {body}\n}} else {{\n    {other}\n}}")
        elif form == "for":
            body = "\n    ".join(statements)
            self.lets.append(f"for k{len(self.lets)} in 0..{self.number(0, 2)} {{\n    {body}\n}}")
        elif form == "while":
            counter = f"k{len(self.lets)}"
            body = "\n    ".join([*statements, f"{counter} += 1"])
            self.lets.append(f"let {counter} = 0")
            self.lets.append(f"while {counter} < {self.number(0, 2)} {{\n    {body}\n}}")
        else:
            self.lets.extend(statements)
        return name

    def rebind(self, name: str, dtype: str, shape: Shape, depth: int) -> str:
        forms = ["assign"]
        if dtype in NUMBERS:
            forms.append("compound")
        if dtype == "bool":
            forms.append("logic")
        if shape:
            forms.append("element")
        form = self.choice(forms)
        if form == "assign":
            return f"{name} = {self.expr(dtype, shape, depth)}"
        if form == "compound":
            op = self.choice(["+=", "-=", "*=", "/="] if dtype in FLOATS else ["+=", "-=", "*="])
            value = self.weak_literal(dtype) if self.flag() else self.expr(dtype, self.broadcastable(shape), depth)
            return f"{name} {op} {value}"
        if form == "logic":
            operand = self.expr("bool", self.broadcastable(shape), depth)
            return f"{name} = ({name} {self.choice(['and', 'or'])} {operand})"
        position = str(self.number(-shape[0], shape[0] - 1))
        if dtype in NUMBERS and self.flag():
            return f"{name}[{position}] = {self.weak_literal(dtype)}"
        return f"{name}[{position}] = {self.expr(dtype, self.broadcastable(shape[1:]), depth)}"

    def indices(self, dtype: str, shape: Shape, depth: int) -> str:
        """A data built-in making an `i64[n]`: a shuffled `arange(n)`, or the first n bytes of the text corpus."""
        (size,) = shape
        if self.flag():
            return f"text_corpus({self.dim(size)})"
        seed = f", seed={self.number(0, 9)}" if self.flag() else ""
        return f"permutation({self.dim(size)}{seed})"

    def batches(self, dtype: str, shape: Shape, depth: int) -> str:
        """`batches` cutting N rows into `shape[0]` batches of `shape[1]` (the partial last one dropped). The
        rows of a batch are `_` to the checker (each rank of a data-parallel run takes its share of them), so
        a `reshape` to the shape aimed at makes them static again; it fails if they are not what it says."""
        count, size, *rest = shape
        rows = count * size + self.number(0, size - 1)
        data = self.expr(dtype, (rows, *rest), depth)
        keywords = "".join(option for option in (", shuffle=true", f", seed={self.number(0, 9)}") if self.flag())
        cut = f"batches({data}, {self.dim(size)}{keywords})"
        if self.flag():
            other = self.expr(self.choice(DTYPES), (rows, *self.shape(0, 1)), depth)
            cut = f"batches(({data}, {other}), {self.dim(size)}{keywords})[0]"
        return f"reshape({cut}, {', '.join(str(n) for n in shape)})"

    def world(self, dtype: str, shape: Shape, depth: int) -> str:
        """`rank()` or `world_size()`: 0 and 1 in a world of one process."""
        return self.choice(["rank()", "world_size()", "rank() + world_size()"])

    def allreduce_mean(self, dtype: str, shape: Shape, depth: int) -> str:
        """A leaf of `allreduce_mean` of a float tensor, or of a tuple of them (the tree itself in a world of 1)."""
        leaf = self.expr(dtype, shape, depth)
        if self.flag():
            return f"allreduce_mean({leaf})"
        return f"allreduce_mean(({leaf}, {self.expr(dtype, shape, depth)}))[{self.number(0, 1)}]"

    def rows(self, dtype: str, shape: Shape, depth: int) -> str:
        """A tensor literal whose elements are expressions: `[e0, e1]`."""
        items = [self.expr(dtype, shape[1:], depth) for _ in range(shape[0])]
        weak_ok = True
        if len(items) >= 2 and not shape[1:] and dtype != "bool" and weak_ok and self.flag():
            items[self.number(0, len(items) - 1)] = self.weak_literal(dtype)  # it adapts, or is i64/f32 already
        return f"[{', '.join(items)}]"


SCALAR_LITERALS = {
    "f32": ["1.5f32", "-0.5f32"],
    "f64": ["2.5f64", "-1e-3f64"],
    "i32": ["3i32", "-2i32"],
    "i64": ["4i64", "-1i64"],
    "bool": ["true", "false"],
}


def prime_factors(n: int) -> list[int]:
    factors, p = [], 2
    while n > 1:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    return factors


PRODUCTIONS = (
    ("arithmetic", lambda d, s: d in NUMBERS),
    ("negate", lambda d, s: d in NUMBERS),
    ("comparison", lambda d, s: d == "bool"),
    ("logic", lambda d, s: d == "bool"),
    ("math", lambda d, s: d in NUMBERS),
    ("pairwise", lambda d, s: d in NUMBERS),
    ("where", lambda d, s: d in NUMBERS),
    ("reduction", lambda d, s: len(s) < MAX_RANK or 1 in s or not s),
    ("reduction_over_axes", lambda d, s: d in NUMBERS and (len(s) + 2 <= MAX_RANK or s.count(1) >= 2)),
    ("triangle", lambda d, s: len(s) >= 2),
    ("along", lambda d, s: len(s) >= 1),
    ("einsum", lambda d, s: d in NUMBERS and len(s) <= 3),
    ("categorical", lambda d, s: d == "i64" and len(s) < MAX_RANK),
    ("dropout", lambda d, s: d in FLOATS),
    ("clock", lambda d, s: d == "f64" and not s),
    ("tree_arithmetic", lambda d, s: d in NUMBERS),
    ("softmax", lambda d, s: d in FLOATS and len(s) >= 1),
    ("matmul", lambda d, s: d in NUMBERS and len(s) < MAX_RANK),
    ("transpose", lambda d, s: True),
    ("swapaxes", lambda d, s: len(s) >= 1),
    ("reshape", lambda d, s: len(s) >= 1),
    ("concat", lambda d, s: any(n >= 2 for n in s)),
    ("stack", lambda d, s: any(n <= 3 for n in s)),
    ("index", lambda d, s: len(s) < MAX_RANK),
    ("gather", lambda d, s: len(s) < MAX_RANK),
    ("one_hot", lambda d, s: d == "f32" and len(s) >= 1),
    ("broadcast_to", lambda d, s: len(s) >= 1),
    ("zeros_like", lambda d, s: True),
    ("stop_gradient", lambda d, s: True),
    ("tree_map", lambda d, s: d in NUMBERS),
    ("tree_dot", lambda d, s: d in FLOATS and not s),
    ("unbroadcast", lambda d, s: len(s) < MAX_RANK),
    ("reshape_like", lambda d, s: len(s) >= 1),
    ("expand_dims", lambda d, s: 1 in s),
    ("scatter_add", lambda d, s: d in NUMBERS and len(s) >= 1),
    ("split_like", lambda d, s: len(s) >= 1),
    ("tree_add", lambda d, s: d in NUMBERS),
    ("convolution", lambda d, s: d in FLOATS and len(s) == 4),
    ("tape", lambda d, s: True),
    ("convert", lambda d, s: d in ("f32", "f64", "i64")),
    ("length", lambda d, s: d == "i64" and not s),
    ("rows", lambda d, s: len(s) >= 1 and s[0] <= 3),
    ("indices", lambda d, s: d == "i64" and len(s) == 1),
    ("batches", lambda d, s: len(s) >= 2),
    ("world", lambda d, s: d == "i64" and not s),
    ("allreduce_mean", lambda d, s: d in FLOATS),
    ("call", lambda d, s: True),
    ("pair", lambda d, s: True),
    ("update", lambda d, s: True),
)


@st.composite
def programs(draw, avoid: frozenset[str] = AVOIDED) -> Program:
    """A `fn f` returning one to three independent expressions (a tuple when several)."""
    builder = Builder(draw, avoid)
    targets = [(draw(st.sampled_from(DTYPES)), builder.shape()) for _ in range(draw(st.integers(1, 3)))]
    expressions = [builder.expr(dtype, shape, draw(st.integers(1, 3)), top=True) for dtype, shape in targets]
    expected = several([type_text(dtype, shape) for dtype, shape in targets], len(targets) > 1)
    expression = expressions[0] if len(expressions) == 1 else f"({', '.join(expressions)})"
    return Program(builder.source(expression), tuple(builder.params), expected, draw(st.integers(0, 2**16)))


# ---------------------------------------------------------------------- tests


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs())
def test_checker_type_is_run_time_type(program: Program) -> None:
    checked, actual = both_types(program.source, program.arguments())
    assert checked == actual, f"checker says {checked}, the interpreter gives {actual}"
    assert checked == program.expected, f"both give {checked}; the generator aimed at {program.expected} (docs)"


def test_generator_covers_every_primitive() -> None:
    """The generator's table names a method per production, and every primitive but the effects is generated."""
    import inspect

    from dl.lang.primitives import Prim

    source = inspect.getsource(Builder)
    for name, _ in PRODUCTIONS:
        assert callable(getattr(Builder, name))
    exempt = {Prim.PRINT, Prim.ASSERT}
    exempt |= {Prim.LOG_METRIC, Prim.PROGRESS}  # effects with no value, like print: they write files or output
    exempt |= {Prim.SAVE, Prim.LOAD}  # file I/O: a generated program must not write or need files
    exempt |= {Prim.LOAD_CSV, Prim.LOAD_NPZ}  # read files: a generated program must not need files
    # `digits()` is one fixed dataset of 1797 rows (far beyond the generator's shapes, and covered in
    # tests/test_data.py); `chars` and `str` make a `str`, and the generator aims at tensor types (`str` is
    # tested in tests/test_strings.py)
    exempt |= {Prim.DIGITS, Prim.CHARS, Prim.STR}
    missing = [p.value for p in Prim if p not in exempt and not re.search(rf"[\"']{p.value}[\"'(]", source)]
    assert not missing, f"primitives the generator never uses: {missing}"


def outcome(source: str) -> tuple[str, str]:
    """(checker's answer, interpreter's answer) for a `fn f()`: a type, `error ...` or `crash ...`."""
    path = f"<checker-property-{next(_paths)}>.dl"
    try:
        typed = dl.lang.check(source, path)
    except Exception as failure:  # a crash is what some entries document
        return f"crash: {type(failure).__name__}", "-"
    checker = f"error {typed.errors[0].code}" if typed.errors else checker_type(typed, path)
    try:
        interpreter = run_time_type(typed, path, [])
    except DiagnosticError as failure:
        interpreter = f"error {failure.diagnostics[0].code}"
    return checker, interpreter


@pytest.mark.parametrize(
    "mismatch",
    [pytest.param(m, id=m.key, marks=pytest.mark.xfail(strict=True, reason=m.reason)) for m in KNOWN_MISMATCHES],
)
def test_known_mismatch(mismatch: Mismatch) -> None:
    checker, interpreter = outcome(mismatch.program)
    assert not checker.startswith("crash"), f"dl.lang.check raised ({checker})"
    if mismatch.expected is None:  # either both accept with one type, or both reject
        assert checker == interpreter or (checker.startswith("error") and interpreter.startswith("error"))
    else:
        assert (checker, interpreter) == (mismatch.expected, mismatch.expected)


def test_known_mismatch_examples_parse() -> None:
    """Each entry's program is a `fn f()` that parses, so its xfail fails for the documented reason."""
    from dl.lang.parse import parse

    for mismatch in KNOWN_MISMATCHES:
        module = parse(mismatch.program, f"<{mismatch.key}>.dl")
        assert [d.name for d in module.decls] == ["f"], mismatch.key
