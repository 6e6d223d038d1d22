"""The one table of DL's primitives: names, call signatures and properties.

Every built-in function is a member of `Prim`. Its `Signature` (how arguments
bind) lives in `SIGNATURES`; properties are sets over the enum. Each backend
hangs its implementation off the same member (interp/primitives.py for the
numpy interpreter), and tests assert that every member has one, so adding a
primitive means adding one entry here and one per backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Prim(Enum):
    # elementwise math
    EXP = "exp"
    LOG = "log"
    SQRT = "sqrt"
    TANH = "tanh"
    SIGMOID = "sigmoid"
    RELU = "relu"
    ABS = "abs"
    SIN = "sin"
    COS = "cos"
    MAXIMUM = "maximum"
    MINIMUM = "minimum"
    WHERE = "where"
    # reductions
    SUM = "sum"
    MEAN = "mean"
    MAX = "max"
    MIN = "min"
    ARGMAX = "argmax"
    ARGMIN = "argmin"
    LOGSUMEXP = "logsumexp"
    SOFTMAX = "softmax"
    LOG_SOFTMAX = "log_softmax"
    # structure
    MATMUL = "matmul"
    TRANSPOSE = "transpose"
    RESHAPE = "reshape"
    CONCAT = "concat"
    STACK = "stack"
    BROADCAST_TO = "broadcast_to"
    GATHER = "gather"
    ONE_HOT = "one_hot"
    # creation
    ZEROS = "zeros"
    ONES = "ones"
    FULL = "full"
    ARANGE = "arange"
    RANDN = "randn"
    RAND = "rand"
    # inspection and conversion
    SHAPE = "shape"
    LEN = "len"
    FLOAT = "float"
    INT = "int"
    STR = "str"
    # effects
    ASSERT = "assert"
    PRINT = "print"
    # what derivative code is written with (lang/autodiff.py); ordinary built-ins users may call too
    ZEROS_LIKE = "zeros_like"
    UNBROADCAST = "unbroadcast"
    RESHAPE_LIKE = "reshape_like"
    EXPAND_DIMS = "expand_dims"
    SCATTER_ADD = "scatter_add"
    SPLIT_LIKE = "split_like"
    TREE_ADD = "tree_add"
    TAPE = "tape"
    PUSH = "push"
    POP = "pop"
    # trees: structs and tuples of tensors (parameters, gradients, optimizer state)
    TREE_MAP = "tree_map"
    TREE_DOT = "tree_dot"
    # data (issue 6: stdlib/data.dl's host built-ins)
    DIGITS = "digits"
    PERMUTATION = "permutation"
    BATCHES = "batches"
    LOAD_CSV = "load_csv"
    LOAD_NPZ = "load_npz"
    TEXT_CORPUS = "text_corpus"
    CHARS = "chars"
    # metrics and progress (issue 6)
    LOG_METRIC = "log_metric"
    PROGRESS = "progress"
    # checkpoints (issue 6)
    SAVE = "save"
    LOAD = "load"
    # convolution (issue 6)
    CONV2D = "conv2d"
    MAX_POOL2D = "max_pool2d"
    CONV2D_INPUT_GRAD = "conv2d_input_grad"
    CONV2D_WEIGHT_GRAD = "conv2d_weight_grad"
    MAX_POOL2D_GRAD = "max_pool2d_grad"
    MAX_POOL2D_GATHER = "max_pool2d_gather"


@dataclass(frozen=True, slots=True)
class Signature:
    """How a call binds: required positionals, optional positionals with defaults,
    an optional variadic tail (name, fewest, most), and keyword-only parameters.

    Implementations receive, positionally and in this order: the required
    positionals, the optional positionals, the variadic tail as a tuple, then
    the keyword-only values.
    """

    positional: tuple[str, ...] = ()
    optional: tuple[tuple[str, object], ...] = ()
    variadic: tuple[str, int, int | None] | None = None
    keywords: tuple[tuple[str, object], ...] = ()

    @property
    def keyword_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.keywords)


F32 = "f32"  # the default dtype keyword value, resolved by each backend
ONE = Signature(("x",))
REDUCTION = Signature(("x",), keywords=(("axis", None), ("keepdims", False)))
CREATION = Signature(variadic=("dims", 0, None), keywords=(("dtype", F32),))
RANDOM = Signature(variadic=("dims", 0, None), keywords=(("seed", None), ("dtype", F32)))

SIGNATURES: dict[Prim, Signature] = {
    **{
        p: ONE
        for p in (Prim.EXP, Prim.LOG, Prim.SQRT, Prim.TANH, Prim.SIGMOID, Prim.RELU, Prim.ABS, Prim.SIN, Prim.COS)
    },
    Prim.MAXIMUM: Signature(("a", "b")),
    Prim.MINIMUM: Signature(("a", "b")),
    Prim.WHERE: Signature(("condition", "a", "b")),
    **{p: REDUCTION for p in (Prim.SUM, Prim.MEAN, Prim.MAX, Prim.MIN, Prim.LOGSUMEXP)},
    Prim.ARGMAX: Signature(("x",), keywords=(("axis", None), ("keepdims", False))),
    Prim.ARGMIN: Signature(("x",), keywords=(("axis", None), ("keepdims", False))),
    Prim.SOFTMAX: Signature(("x",), keywords=(("axis", -1),)),
    Prim.LOG_SOFTMAX: Signature(("x",), keywords=(("axis", -1),)),
    Prim.MATMUL: Signature(("a", "b")),
    Prim.TRANSPOSE: Signature(("x",), variadic=("axes", 0, None)),
    Prim.RESHAPE: Signature(("x",), variadic=("dims", 1, None)),
    Prim.CONCAT: Signature(("tensors",), keywords=(("axis", 0),)),
    Prim.STACK: Signature(("tensors",), keywords=(("axis", 0),)),
    Prim.BROADCAST_TO: Signature(("x",), variadic=("dims", 0, None)),
    Prim.GATHER: Signature(("x", "indices"), keywords=(("axis", 0),)),
    Prim.ONE_HOT: Signature(("labels", "classes")),
    Prim.ZEROS: CREATION,
    Prim.ONES: CREATION,
    Prim.FULL: Signature(variadic=("dims", 0, None), keywords=(("value", None), ("dtype", F32))),
    Prim.ARANGE: Signature(variadic=("bounds", 1, 2)),
    Prim.RANDN: RANDOM,
    Prim.RAND: RANDOM,
    Prim.SHAPE: ONE,
    Prim.LEN: ONE,
    Prim.FLOAT: Signature(("x",), keywords=(("dtype", F32),)),
    Prim.INT: Signature(("x",)),
    Prim.STR: ONE,
    Prim.ASSERT: Signature(("condition",), optional=(("message", "assertion failed"),)),
    Prim.PRINT: Signature(variadic=("values", 0, None)),
    Prim.ZEROS_LIKE: ONE,
    Prim.UNBROADCAST: Signature(("x", "like")),
    Prim.RESHAPE_LIKE: Signature(("x", "like")),
    Prim.EXPAND_DIMS: Signature(("x", "axis")),
    Prim.SCATTER_ADD: Signature(("x", "indices", "updates"), keywords=(("axis", 0),)),
    Prim.SPLIT_LIKE: Signature(("x", "like"), keywords=(("axis", 0),)),
    Prim.TREE_ADD: Signature(("a", "b")),
    Prim.TAPE: Signature(optional=(("like", None),)),
    Prim.PUSH: Signature(("tape", "value")),
    Prim.POP: Signature(("tape",)),
    Prim.TREE_MAP: Signature(("f",), variadic=("trees", 1, None)),
    Prim.TREE_DOT: Signature(("a", "b")),
    # data
    Prim.DIGITS: Signature(),
    Prim.PERMUTATION: Signature(("n",), keywords=(("seed", None),)),
    Prim.BATCHES: Signature(("data", "size"), keywords=(("shuffle", False), ("seed", None))),
    Prim.LOAD_CSV: Signature(("path",), keywords=(("skip_header", False),)),
    Prim.LOAD_NPZ: Signature(("path", "name"), keywords=(("dtype", F32), ("rank", 2))),
    Prim.TEXT_CORPUS: Signature(("length",)),
    Prim.CHARS: Signature(("codes",)),
    # metrics and progress
    Prim.LOG_METRIC: Signature(("name", "value"), keywords=(("step", -1),)),
    Prim.PROGRESS: Signature(("done", "total"), optional=(("label", "progress"),)),
    # checkpoints
    Prim.SAVE: Signature(("path", "value")),
    Prim.LOAD: Signature(("path", "like")),
    # convolution
    Prim.CONV2D: Signature(("x", "w"), keywords=(("stride", 1), ("padding", 0))),
    Prim.MAX_POOL2D: Signature(("x", "size"), keywords=(("stride", None), ("padding", 0))),  # stride: `size`
    Prim.CONV2D_INPUT_GRAD: Signature(("dy", "w", "like"), keywords=(("stride", 1), ("padding", 0))),
    Prim.CONV2D_WEIGHT_GRAD: Signature(("dy", "x", "like"), keywords=(("stride", 1), ("padding", 0))),
    Prim.MAX_POOL2D_GRAD: Signature(("dy", "x", "size"), keywords=(("stride", None), ("padding", 0))),
    Prim.MAX_POOL2D_GATHER: Signature(("v", "x", "size"), keywords=(("stride", None), ("padding", 0))),
}

BY_NAME: dict[str, Prim] = {p.value: p for p in Prim}

ELEMENTWISE_UNARY = frozenset(
    {Prim.EXP, Prim.LOG, Prim.SQRT, Prim.TANH, Prim.SIGMOID, Prim.RELU, Prim.ABS, Prim.SIN, Prim.COS}
)
REDUCTIONS = frozenset({Prim.SUM, Prim.MEAN, Prim.MAX, Prim.MIN, Prim.ARGMAX, Prim.ARGMIN, Prim.LOGSUMEXP})
RANDOMNESS = frozenset({Prim.RANDN, Prim.RAND, Prim.PERMUTATION, Prim.BATCHES})
EFFECTS = frozenset({Prim.ASSERT, Prim.PRINT, Prim.SAVE, Prim.LOG_METRIC, Prim.PROGRESS})
NON_DIFFERENTIABLE = frozenset(
    {
        Prim.ARGMAX,
        Prim.ARGMIN,
        Prim.ONE_HOT,
        Prim.ZEROS,
        Prim.ONES,
        Prim.FULL,
        Prim.ARANGE,
        Prim.RANDN,
        Prim.RAND,
        Prim.SHAPE,
        Prim.LEN,
        Prim.INT,
        Prim.STR,
        Prim.ASSERT,
        Prim.PRINT,
        Prim.ZEROS_LIKE,
        Prim.TAPE,
        # reporting: effects with no value
        Prim.LOG_METRIC,
        Prim.PROGRESS,
        # checkpoints: file I/O; `load` gives stored values, which no parameter changes
        Prim.SAVE,
        Prim.LOAD,
        # data: datasets, files, shuffles and text are inputs, not functions of parameters
        Prim.DIGITS,
        Prim.PERMUTATION,
        Prim.BATCHES,
        Prim.LOAD_CSV,
        Prim.LOAD_NPZ,
        Prim.TEXT_CORPUS,
        Prim.CHARS,
    }
)


# Program transformations, not primitives: the checker types them and lang/autodiff.py replaces every
# call of them by generated DL functions before a backend sees the program.
TRANSFORMS: dict[str, Signature] = {
    "grad": Signature(("f",), keywords=(("wrt", 0),)),
    "value_and_grad": Signature(("f",), keywords=(("wrt", 0),)),
}


@dataclass(frozen=True, slots=True)
class Binding:
    """Where each parameter's value comes from: an index into the call's
    positional arguments, a keyword name, or the default."""

    fixed: tuple[int | str | None, ...]  # per positional/optional parameter
    variadic: tuple[int, ...]
    keywords: tuple[str | None, ...]  # per keyword-only parameter: the keyword used, or None for default


class BindingError(Exception):
    def __init__(self, message: str, keyword: str | None = None, suggestion: str | None = None):
        super().__init__(message)
        self.keyword = keyword
        self.suggestion = suggestion


def bind(signature: Signature, positional_count: int, keyword_names: list[str]) -> Binding:
    """Bind a call's arguments to `signature`, or raise `BindingError` saying why not."""
    fixed_names = [*signature.positional, *(name for name, _ in signature.optional)]
    used_keywords: set[str] = set()
    for name in keyword_names:
        if name in used_keywords:
            raise BindingError(f"keyword argument `{name}` is given twice", name)
        used_keywords.add(name)
        if name not in fixed_names and name not in signature.keyword_names:
            raise BindingError(
                f"unexpected keyword argument `{name}`", name, closest(name, [*fixed_names, *signature.keyword_names])
            )
    fixed: list[int | str | None] = []
    position = 0
    for index, name in enumerate(fixed_names):
        if name in used_keywords:
            fixed.append(name)
        elif position < positional_count and (signature.variadic is None or index < len(signature.positional)):
            fixed.append(position)
            position += 1
        elif index < len(signature.positional):
            raise BindingError(f"missing argument `{name}`")
        else:
            fixed.append(None)
    variadic: tuple[int, ...] = ()
    if signature.variadic is not None:
        _, fewest, most = signature.variadic
        variadic = tuple(range(position, positional_count))
        if len(variadic) < fewest or (most is not None and len(variadic) > most):
            expected = (
                f"{fewest}" if fewest == most else f"at least {fewest}" if most is None else f"{fewest} to {most}"
            )
            raise BindingError(f"expected {expected} `{signature.variadic[0]}` arguments, found {len(variadic)}")
        position = positional_count
    if position < positional_count:
        most = len(fixed_names)
        raise BindingError(
            f"expected at most {most} positional argument{'s' if most != 1 else ''}, found {positional_count}"
        )
    keywords = tuple(name if name in used_keywords else None for name in signature.keyword_names)
    return Binding(tuple(fixed), variadic, keywords)


def closest(name: str, candidates) -> str | None:
    """The candidate most like `name`, if any is close enough to suggest: a near spelling, the same
    letters swapped (`rl` for `lr`), or the name other frameworks use for it (`dim` for `axis`)."""
    import difflib

    candidates = list(candidates)
    alias = ALIASES.get(name)
    if alias in candidates:
        return alias
    swapped = [c for c in candidates if len(c) == len(name) and sorted(c) == sorted(name) and c != name]
    if swapped:
        return swapped[0]
    matches = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return matches[0] if matches else None


# What PyTorch and numpy users type, and DL's name for it.
ALIASES = {"dim": "axis", "keepdim": "keepdims", "axes": "axis", "generator": "seed", "random_state": "seed"}
