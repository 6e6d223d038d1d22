"""The one table of DL's primitives: a frozen record per built-in function, read by every pass.

`PRIMITIVES[prim]` is a `Primitive`: its `Signature` (how a call binds), the checker's shape rule
(a function of lang/shapes.py), its properties (an effect, randomness, the parameters that take a
tensor, the two operands that promote together as an operator's do) and its derivative: DL
templates parsed by the real parser (`Templates`), a rule the transform computes in code because no
template can say it (`Computed`, with why), or none (`NoDerivative`, with why). The sets the passes
test membership in (`EFFECTS`, `NON_DIFFERENTIABLE`, ...) are computed from the records.

Each backend registers an implementation per `Prim` (never by name) or refuses it with a reason, and
one coverage test per backend checks that all of `Prim` is accounted for; docs/primitives.md, the
primitive x backend matrix, is generated from this table and those registries (driver/support.py).
Adding a primitive means adding one member, one record here, and one entry per backend.
"""

from __future__ import annotations

from enum import Enum

from dl.lang import shapes
from dl.lang.record import record
from dl.lang.shapes import Rule


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
    TAN = "tan"
    ASIN = "asin"
    ACOS = "acos"
    ATAN = "atan"
    SOFTPLUS = "softplus"
    LOG1P = "log1p"
    EXPM1 = "expm1"
    ERF = "erf"
    FLOOR = "floor"
    CEIL = "ceil"
    ROUND = "round"
    SIGN = "sign"
    ISNAN = "isnan"
    ISINF = "isinf"
    ISFINITE = "isfinite"
    MAXIMUM = "maximum"
    MINIMUM = "minimum"
    CLIP = "clip"
    WHERE = "where"
    # reductions
    SUM = "sum"
    MEAN = "mean"
    MAX = "max"
    MIN = "min"
    ARGMAX = "argmax"
    ARGMIN = "argmin"
    ANY = "any"
    ALL = "all"
    LOGSUMEXP = "logsumexp"
    VAR = "var"
    STD = "std"
    SOFTMAX = "softmax"
    LOG_SOFTMAX = "log_softmax"
    # structure
    MATMUL = "matmul"
    EINSUM = "einsum"
    TRANSPOSE = "transpose"
    SWAPAXES = "swapaxes"
    RESHAPE = "reshape"
    SQUEEZE = "squeeze"
    CONCAT = "concat"
    STACK = "stack"
    BROADCAST_TO = "broadcast_to"
    GATHER = "gather"
    ONE_HOT = "one_hot"
    TRIL = "tril"
    TRIU = "triu"
    FLIP = "flip"
    CUMSUM = "cumsum"
    TAKE_ALONG_AXIS = "take_along_axis"
    ARGSORT = "argsort"
    SORT = "sort"
    TOPK = "topk"
    PAD = "pad"
    # creation
    ZEROS = "zeros"
    ONES = "ones"
    FULL = "full"
    ARANGE = "arange"
    EYE = "eye"
    LINSPACE = "linspace"
    RANDN = "randn"
    RAND = "rand"
    CATEGORICAL = "categorical"
    DROPOUT = "dropout"
    # inspection and conversion
    SHAPE = "shape"
    LEN = "len"
    FLOAT = "float"
    INT = "int"
    STR = "str"
    # effects
    ASSERT = "assert"
    PRINT = "print"
    TIME = "time"
    # what derivative code is written with (lang/autodiff/); ordinary built-ins users may call too
    ZEROS_LIKE = "zeros_like"
    STOP_GRADIENT = "stop_gradient"
    UNBROADCAST = "unbroadcast"
    RESHAPE_LIKE = "reshape_like"
    EXPAND_DIMS = "expand_dims"
    SCATTER_ADD = "scatter_add"
    ADD_ALONG_AXIS = "add_along_axis"
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
    # data parallelism over MPI (docs/distributed.md)
    RANK = "rank"
    WORLD_SIZE = "world_size"
    ALLREDUCE_MEAN = "allreduce_mean"


@record(frozen=True, slots=True)
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


@record(frozen=True, slots=True)
class Templates:
    """A derivative written in DL: for each parameter with a gradient, its adjoint contribution as an
    expression over `d` (the adjoint of the result), `r` (the result), the call's arguments by parameter
    name, and the static values the transform binds: `k` (the `axis=` argument, unless a parameter is named
    `k`), `x_dtype` (the dtype of `x`, as `start_dtype` is of `start`) and `r_dtype` (the result's). A
    reduction's templates also use three forms the transform expands for the call's static axis: `expand(v)`
    (a reduced value put back in `x`'s rank), `total(v)` (a sum over the reduced elements, keeping their axes)
    and `count(x)` (how many elements each result reduces, as a float)."""

    adjoints: tuple[tuple[str, str], ...]
    fitted: bool = False  # operands broadcast: each contribution is summed down to its operand's shape


@record(frozen=True, slots=True)
class Computed:
    """A derivative the transform (lang/autodiff/) writes in code, because no template can say it."""

    reason: str


@record(frozen=True, slots=True)
class NoDerivative:
    """Not differentiable: why (the gradient through it is zero, or its inputs carry none)."""

    reason: str


Derivative = Templates | Computed | NoDerivative


@record(frozen=True, slots=True)
class Primitive:
    """Everything DL knows about one built-in, in one place."""

    prim: Prim
    group: str  # the section of docs/primitives.md it is listed in
    summary: str
    signature: Signature
    rule: Rule  # the checker's type and shape rule (lang/shapes.py)
    derivative: Derivative
    tensors: frozenset[str] = frozenset()  # parameters that take a number or a tensor, checked when called
    operands: tuple[str, str] | None = None  # promote together as an operator's operands: a literal adapts
    fills: frozenset[str] = frozenset()  # keywords whose literal takes the result's dtype (`full(n, value=0.1)`)
    functions: frozenset[str] = frozenset()  # parameters that take a function, which the rule applies
    effect: bool = False  # run for what it does (output, files): a call is never dropped as unread
    # reads or writes a file the program names (a checkpoint, a data file, the metrics file): a package, whose
    # outputs come from its inputs alone, never calls it (E0606, driver/package.py)
    files: bool = False
    random: bool = False  # draws from a random stream
    # not pure: its value changes from call to call with the same arguments (a clock), so a call is never
    # dropped, moved, merged with another or computed before the program runs
    volatile: bool = False
    floats_only: bool = False  # elementwise math defined on floats only
    # the parameters the result is linear in, together: zeros in all of them make zeros. Where a backward sweep's
    # adjoints are known to be zeros, nothing is computed from them (lang/autodiff/zeros.py)
    linear_in: frozenset[str] = frozenset()
    product: bool = False  # linear in each of `linear_in` alone (a product): zeros in any one of them make zeros

    @property
    def name(self) -> str:
        return self.prim.value

    @property
    def parameters(self) -> tuple[str, ...]:
        """The parameter names in the order implementations take them (see `Signature`)."""
        signature = self.signature
        variadic = (signature.variadic[0],) if signature.variadic is not None else ()
        return (
            *signature.positional,
            *(name for name, _ in signature.optional),
            *variadic,
            *(name for name, _ in signature.keywords),
        )

    def positions(self, names) -> tuple[int, ...]:
        """The positions among `parameters` of the parameters in `names`."""
        return tuple(position for position, name in enumerate(self.parameters) if name in names)


F32 = "f32"  # the default dtype keyword value, resolved by each backend
ONE = Signature(("x",))
REDUCTION = Signature(("x",), keywords=(("axis", None), ("keepdims", False)))
# var's and std's divisor in their derivatives, in x's dtype, as the forward computes it
DEGREES = "maximum(count(x) - correction, 0.0)"
# the divisor is the count less `correction`: 0 the population variance (numpy's and JAX's default), 1 the
# sample variance (torch's default)
VARIANCE = Signature(("x",), keywords=(("axis", None), ("keepdims", False), ("correction", 0)))
CREATION = Signature(variadic=("dims", 0, None), keywords=(("dtype", F32),))
RANDOM = Signature(variadic=("dims", 0, None), keywords=(("seed", None), ("dtype", F32)))
X = frozenset({"x"})

# why the non-differentiable primitives have no derivative
SELECTS = "a position is piecewise constant: its gradient is zero wherever it is defined"
INPUT = "an input, made from sizes and options: no parameter changes it"
EFFECT = "an effect, with no value to differentiate"
DATA = "data, files, shuffles and text are inputs, not functions of parameters"
INTEGER = "an integer result: it carries no gradient"
STEPS = "a step function: piecewise constant, its gradient is zero wherever it is defined"
TRUTH = "a bool result: true and false carry no gradient"


def elementwise(prim: Prim, summary: str, adjoint: str, floats_only: bool = True) -> Primitive:
    return Primitive(
        prim,
        "elementwise",
        summary,
        ONE,
        shapes.elementwise(prim.value, floats_only),
        Templates((("x", adjoint),)),
        X,
        floats_only=floats_only,
    )


def step(prim: Prim, summary: str, floats_only: bool = True) -> Primitive:
    """An elementwise step function (`floor`, `ceil`, `round`, `sign`): piecewise constant, so its gradient is
    zero, as torch's and JAX's are."""
    return Primitive(
        prim,
        "elementwise",
        summary,
        ONE,
        shapes.elementwise(prim.value, floats_only),
        NoDerivative(STEPS),
        X,
        floats_only=floats_only,
    )


def float_test(prim: Prim, summary: str) -> Primitive:
    """`isnan`, `isinf`, `isfinite`: a bool per element of a float tensor (the rule refuses integers, which are
    never nan), with no gradient."""
    return Primitive(prim, "elementwise", summary, ONE, shapes.float_test(prim.value), NoDerivative(TRUTH), X)


def reduction(prim: Prim, summary: str, rule: Rule, derivative: Derivative, **properties) -> Primitive:
    return Primitive(prim, "reduction", summary, REDUCTION, rule, derivative, X, **properties)


def pairwise(prim: Prim, summary: str, larger: str) -> Primitive:
    """`maximum` (`larger` is `>`) or `minimum` (`<`): ties share the gradient evenly."""
    adjoint = "where({} {} {}, d, where(a == b, 0.5 * d, 0.0))"
    return Primitive(
        prim,
        "elementwise",
        summary,
        Signature(("a", "b")),
        shapes.pairwise(prim.value),
        Templates((("a", adjoint.format("a", larger, "b")), ("b", adjoint.format("b", larger, "a"))), fitted=True),
        frozenset({"a", "b"}),
        operands=("a", "b"),
    )


def linear(
    prim: Prim,
    group: str,
    summary: str,
    signature: Signature,
    rule: Rule,
    adjoints: dict[str, str],
    tensors=X,
    product: bool = False,
    linear_in: frozenset[str] | None = None,
    fills: frozenset[str] = frozenset(),
) -> Primitive:
    """A primitive linear in the parameters it has adjoints for (unless `linear_in` says otherwise): together,
    or each alone (`product`)."""
    templates = Templates(tuple(adjoints.items()))
    linear_in = frozenset(adjoints) if linear_in is None else linear_in
    properties = {"linear_in": linear_in, "product": product, "fills": fills}
    return Primitive(prim, group, summary, signature, rule, templates, frozenset(tensors), **properties)


def convolution(
    prim: Prim, summary: str, signature: Signature, rule: Rule, adjoints: dict[str, str], tensors, **linearity
) -> Primitive:
    """Convolution and pooling: each is linear in each tensor it computes with, so the rules are each other,
    and `grad(grad(f))` goes through them. `like` gives only a shape; max pooling's choice of position is
    constant almost everywhere, so `x` gets no gradient from the pooling helpers. A max pooling call without
    `stride=` strides by its window `size` (the transform binds `stride` so)."""
    return linear(prim, "convolution", summary, signature, rule, adjoints, tensors, **linearity)


def not_differentiable(
    prim: Prim, group: str, summary: str, signature: Signature, rule: Rule, reason: str, **properties
) -> Primitive:
    return Primitive(prim, group, summary, signature, rule, NoDerivative(reason), **properties)


POOLING = Signature(("x", "size"), keywords=(("stride", None), ("padding", 0)))  # stride: `size`
STRIDED = (("stride", 1), ("padding", 0))
SOFTMAX = Signature(("x",), keywords=(("axis", -1),))
SHARED = "ties share the gradient evenly"
TRIANGLE = Signature(("x",), optional=(("k", 0),))  # k: the diagonal, 0 the main one, above it positive
SORTING = Signature(("x",), keywords=(("axis", -1), ("descending", False)))
PRIMITIVES_LIST = (
    # elementwise math
    elementwise(Prim.EXP, "e to the power of each element", "d * r"),
    elementwise(Prim.LOG, "natural logarithm", "d / x"),
    elementwise(Prim.SQRT, "square root", "d / (2.0 * r)"),
    elementwise(Prim.TANH, "hyperbolic tangent", "d * (1.0 - r * r)"),
    elementwise(Prim.SIGMOID, "logistic sigmoid `1 / (1 + exp(-x))`", "d * r * (1.0 - r)"),
    elementwise(Prim.RELU, "`max(x, 0)`, in `x`'s dtype", "where(x > 0.0, d, 0.0)", floats_only=False),
    elementwise(
        Prim.ABS,
        "absolute value, in `x`'s dtype",
        "where(x > 0.0, d, where(x < 0.0, -d, 0.0))",
        floats_only=False,
    ),
    elementwise(Prim.SIN, "sine", "d * cos(x)"),
    elementwise(Prim.COS, "cosine", "-(d * sin(x))"),
    elementwise(Prim.TAN, "tangent", "d * (1.0 + r * r)"),
    # infinite at |x| = 1 and nan beyond, where the function is not defined (as torch's)
    elementwise(Prim.ASIN, "inverse sine, in `[-pi/2, pi/2]`", "d / sqrt(1.0 - x * x)"),
    elementwise(Prim.ACOS, "inverse cosine, in `[0, pi]`", "-(d / sqrt(1.0 - x * x))"),
    elementwise(Prim.ATAN, "inverse tangent, in `(-pi/2, pi/2)`", "d / (1.0 + x * x)"),
    elementwise(Prim.SOFTPLUS, "`log(1 + exp(x))`, computed stably", "d * sigmoid(x)"),
    elementwise(Prim.LOG1P, "`log(1 + x)`, accurate for small `x`", "d / (1.0 + x)"),
    # exp(x), not r + 1: for x below -17 that sum is 1 - 1 in f32, and elu's gradient there would be 0
    elementwise(Prim.EXPM1, "`exp(x) - 1`, accurate for small `x`", "d * exp(x)"),
    # 2 / sqrt(pi) * exp(-x^2); the literal adapts to x's dtype, so an f64 `x` keeps every digit
    elementwise(Prim.ERF, "the error function", "d * (1.1283791670955126 * exp(-(x * x)))"),
    step(Prim.FLOOR, "the largest integer at most each element, as a float"),
    step(Prim.CEIL, "the smallest integer at least each element, as a float"),
    step(Prim.ROUND, "the nearest integer, halves to the even one (numpy's and torch's `round`), as a float"),
    step(Prim.SIGN, "-1, 0 or 1 by the sign of each element, in `x`'s dtype (nan stays nan)", floats_only=False),
    float_test(Prim.ISNAN, "a `bool` per element: whether it is nan"),
    float_test(Prim.ISINF, "a `bool` per element: whether it is infinite (either sign)"),
    float_test(Prim.ISFINITE, "a `bool` per element: whether it is neither infinite nor nan"),
    pairwise(Prim.MAXIMUM, "the larger of two tensors, elementwise, broadcasting", ">"),
    pairwise(Prim.MINIMUM, "the smaller of two tensors, elementwise, broadcasting", "<"),
    # minimum(maximum(x, lo), hi), as numpy's clip (hi wins where lo > hi); the gradient passes where x is in
    # [lo, hi], ends included, as torch's clamp's does, and goes to the bound that is the result elsewhere
    Primitive(
        Prim.CLIP,
        "elementwise",
        "`x` limited to `[lo, hi]` (numpy's `clip`, torch's `clamp`); the three broadcast",
        Signature(("x", "lo", "hi")),
        shapes.clip_rule,
        Templates(
            (
                ("x", "where(x >= lo, where(x <= hi, d, 0.0), 0.0)"),  # none where x (or a bound) is nan
                ("lo", "where(x < lo, where(lo > hi, 0.0, d), 0.0)"),
                ("hi", "where(maximum(x, lo) > hi, d, 0.0)"),
            ),
            fitted=True,
        ),
        frozenset({"x", "lo", "hi"}),
        fills=frozenset({"x", "lo", "hi"}),  # a literal takes the result's dtype, as an operator's operand
    ),
    Primitive(
        Prim.WHERE,
        "elementwise",
        "`a` where the bool `condition` holds, else `b`; all three broadcast",
        Signature(("condition", "a", "b")),
        shapes.where_rule,
        Templates((("a", "where(condition, d, 0.0)"), ("b", "where(condition, 0.0, d)")), fitted=True),
        frozenset({"condition", "a", "b"}),
        operands=("a", "b"),
        linear_in=frozenset({"a", "b"}),
    ),
    # reductions
    reduction(
        Prim.SUM,
        "sum over all elements or along `axis` (one, or a tuple of axes)",
        shapes.reduction("sum"),
        Templates((("x", "zeros_like(x) + expand(d)"),)),
        linear_in=X,
    ),
    reduction(
        Prim.MEAN,
        "mean; of integers, an `f32`",
        shapes.reduction("mean", averages=True),
        Templates((("x", "(zeros_like(x) + expand(d)) / count(x)"),)),
        linear_in=X,
    ),
    reduction(
        Prim.MAX,
        f"largest element; {SHARED}",
        shapes.reduction("max"),
        Templates((("x", "where(x == expand(r), expand(d) / total(where(x == expand(r), 1.0, 0.0)), zeros_like(x))"),)),
    ),
    reduction(
        Prim.MIN,
        f"smallest element; {SHARED}",
        shapes.reduction("min"),
        Templates((("x", "where(x == expand(r), expand(d) / total(where(x == expand(r), 1.0, 0.0)), zeros_like(x))"),)),
    ),
    reduction(
        Prim.ARGMAX,
        "`i64` position of the largest element",
        shapes.reduction("argmax", result_dtype="i64", several=False),
        NoDerivative(SELECTS),
    ),
    reduction(
        Prim.ARGMIN,
        "`i64` position of the smallest element",
        shapes.reduction("argmin", result_dtype="i64", several=False),
        NoDerivative(SELECTS),
    ),
    reduction(
        Prim.ANY,
        "whether any element of a bool tensor is true (false of none)",
        shapes.truth("any"),
        NoDerivative(TRUTH),
    ),
    reduction(
        Prim.ALL,
        "whether every element of a bool tensor is true (true of none)",
        shapes.truth("all"),
        NoDerivative(TRUTH),
    ),
    reduction(
        Prim.LOGSUMEXP,
        "`log(sum(exp(x)))`, computed stably",
        shapes.reduction("logsumexp", floats_only=True),
        # softmax, normalised by its own sum: `r` rounded (`1e7 + log 2` is `1e7 + 1` in f32) would have its error
        # in `exp(x - r)` too, which the division takes out
        Templates((("x", "expand(d) * exp(x - expand(r)) / total(exp(x - expand(r)))"),)),
    ),
    # With m the mean and n - c the count less the correction (at least 0), var is sum((x - m)^2) / (n - c): its
    # derivative is 2 (x - m) / (n - c) (m's own is zero: the deviations sum to 0), and std's that over 2 std,
    # which is 0 where std is (constant data, as torch's). The correction is a constant: no gradient reaches it.
    Primitive(
        Prim.VAR,
        "reduction",
        "variance, `sum((x - mean)^2) / (count - correction)`; `correction=1` is torch's default",
        VARIANCE,
        shapes.variance_rule("var"),
        Templates((("x", f"expand(d) * (2.0 * (x - total(x) / count(x)) / {DEGREES})"),)),
        X,
        fills=frozenset({"correction"}),
    ),
    Primitive(
        Prim.STD,
        "reduction",
        "standard deviation, the square root of `var` (same keywords)",
        VARIANCE,
        shapes.variance_rule("std"),
        Templates(
            (("x", f"expand(d) * where(expand(r) > 0.0, (x - total(x) / count(x)) / ({DEGREES} * expand(r)), 0.0)"),)
        ),
        X,
        fills=frozenset({"correction"}),
    ),
    Primitive(
        Prim.SOFTMAX,
        "reduction",
        "softmax along `axis` (the last by default)",
        SOFTMAX,
        shapes.softmax_rule("softmax"),
        Templates((("x", "r * (d - sum(d * r, axis=axis, keepdims=true))"),)),
        X,
    ),
    Primitive(
        Prim.LOG_SOFTMAX,
        "reduction",
        "log-softmax along `axis` (the last by default)",
        SOFTMAX,
        shapes.softmax_rule("log_softmax"),
        Templates((("x", "d - exp(r) * sum(d, axis=axis, keepdims=true)"),)),
        X,
    ),
    # structure
    Primitive(
        Prim.MATMUL,
        "structure",
        "matrix product, as `a @ b` (numpy's `matmul`)",
        Signature(("a", "b")),
        shapes.matmul_rule,
        Computed(
            "the rule depends on the operands' ranks (vectors, matrices, batches), and an operand that is "
            "`transpose(w)` gives `w` its adjoint as one product in `w`'s layout"
        ),
        frozenset({"a", "b"}),
        operands=("a", "b"),
        linear_in=frozenset({"a", "b"}),
        product=True,
    ),
    Primitive(
        Prim.EINSUM,
        "structure",
        'products summed over the axes a spec names, as numpy\'s `einsum` (`"ij,jk->ik"`)',
        Signature(("spec",), variadic=("operands", 1, None)),
        shapes.einsum_rule,
        Computed("each operand's adjoint is an einsum whose spec is computed from the call's (lang/einsum.py)"),
        linear_in=frozenset({"operands"}),
        product=True,
    ),
    Primitive(
        Prim.TRANSPOSE,
        "structure",
        "axes reversed, or permuted by `axes`",
        Signature(("x",), variadic=("axes", 0, None)),
        shapes.transpose_rule,
        Computed("the adjoint is transposed by the inverse permutation, computed from the static `axes`"),
        X,
        linear_in=X,
    ),
    linear(
        Prim.SWAPAXES,
        "structure",
        "two axes exchanged, any rank: `swapaxes(k, -2, -1)` transposes a batch of matrices",
        Signature(("x", "axis1", "axis2")),
        shapes.swapaxes_rule,
        {"x": "swapaxes(d, axis1, axis2)"},
    ),
    linear(
        Prim.RESHAPE,
        "structure",
        "the same elements in a new shape (one `-1` inferred)",
        Signature(("x",), variadic=("dims", 1, None)),
        shapes.reshape_rule,
        {"x": "reshape_like(d, x)"},
    ),
    linear(
        Prim.SQUEEZE,
        "structure",
        "`x` without its axes of size 1 that `axis` names (one, or a tuple of axes), as torch's `squeeze(dim)`",
        Signature(("x", "axis")),
        shapes.squeeze_rule,
        {"x": "reshape_like(d, x)"},
    ),
    linear(
        Prim.CONCAT,
        "structure",
        "a tuple of tensors joined along an existing axis",
        Signature(("tensors",), keywords=(("axis", 0),)),
        shapes.concat_rule,
        {"tensors": "split_like(d, tensors, axis=k)"},
        tensors=(),
    ),
    Primitive(
        Prim.STACK,
        "structure",
        "a tuple of tensors stacked along a new axis",
        Signature(("tensors",), keywords=(("axis", 0),)),
        shapes.stack_rule,
        Computed("the adjoint is cut into one slice per item of the tuple, as many as its type has"),
        linear_in=frozenset({"tensors"}),
    ),
    linear(
        Prim.BROADCAST_TO,
        "structure",
        "`x` broadcast to a shape",
        Signature(("x",), variadic=("dims", 0, None)),
        shapes.broadcast_to_rule,
        {"x": "unbroadcast(d, x)"},
    ),
    linear(
        Prim.GATHER,
        "structure",
        "the slices at integer `indices` along `axis` (numpy's `take`)",
        Signature(("x", "indices"), keywords=(("axis", 0),)),
        shapes.gather_rule,
        {"x": "scatter_add(zeros_like(x), indices, d, axis=k)"},
        tensors=("x", "indices"),
    ),
    not_differentiable(
        Prim.ONE_HOT,
        "structure",
        "an `f32` tensor with 1.0 at each label",
        Signature(("labels", "classes")),
        shapes.one_hot_rule,
        INTEGER + ": the labels are integers",
        tensors=frozenset({"labels"}),
    ),
    linear(
        Prim.TRIL,
        "structure",
        "the lower triangle of the last two axes: zeros above diagonal `k`",
        TRIANGLE,
        shapes.triangle_rule("tril"),
        {"x": "tril(d, k)"},
    ),
    linear(
        Prim.TRIU,
        "structure",
        "the upper triangle of the last two axes: zeros below diagonal `k`",
        TRIANGLE,
        shapes.triangle_rule("triu"),
        {"x": "triu(d, k)"},
    ),
    linear(
        Prim.FLIP,
        "structure",
        "the elements in reverse order along `axis` (one, or a tuple of axes), as torch's `flip`",
        Signature(("x", "axis")),
        shapes.along_axes_rule("flip", several=True),
        {"x": "flip(d, axis)"},
    ),
    # the adjoint of a running sum is the running sum from the other end
    linear(
        Prim.CUMSUM,
        "structure",
        "the running sum along `axis`; of bools, the running count (`i64`)",
        Signature(("x", "axis")),
        shapes.along_axes_rule("cumsum", several=False),
        {"x": "flip(cumsum(flip(d, axis), axis), axis)"},
    ),
    # torch's `gather(x, axis, indices)`: one element per index, along `axis`; the adjoint adds `d` back there
    linear(
        Prim.TAKE_ALONG_AXIS,
        "structure",
        "the element at each integer index along `axis` (numpy's `take_along_axis`, torch's `gather`)",
        Signature(("x", "indices", "axis")),
        shapes.take_along_axis_rule,
        {"x": "add_along_axis(zeros_like(x), indices, d, axis)"},
        tensors=("x", "indices"),
    ),
    not_differentiable(
        Prim.ARGSORT,
        "structure",
        "`i64` positions that sort `x` along `axis`, ties in their order (a stable sort)",
        SORTING,
        shapes.sorting_rule("argsort"),
        SELECTS,
        tensors=X,
    ),
    # the sorted values are `x` read at argsort's positions: the adjoint puts `d` back at them
    Primitive(
        Prim.SORT,
        "structure",
        "`x` sorted along `axis` (ascending, or with `descending=true`), ties in their order",
        SORTING,
        shapes.sorting_rule("sort"),
        Templates((("x", "add_along_axis(zeros_like(x), argsort(x, axis=axis, descending=descending), d, axis)"),)),
        X,
    ),
    # `(values, indices)`: the values are `x` read at the indices, so the adjoint puts `d[0]` back at them (the
    # adjoint of take_along_axis); the i64 indices carry none
    Primitive(
        Prim.TOPK,
        "structure",
        "`(values, indices)`: the `k` largest elements along `axis` in descending order (the smallest, ascending,"
        " with `largest=false`) and their `i64` positions, ties the lower position first (torch's `topk`)",
        Signature(("x", "k"), keywords=(("axis", -1), ("largest", True))),
        shapes.topk_rule,
        Templates((("x", "add_along_axis(zeros_like(x), r[1], d[0], axis)"),)),
        X,
    ),
    # the adjoint of padding is the padding taken off again (negative widths remove), and `value` gets the
    # adjoint of the places it fills, picked by a mask (no sum of everything less the rest, which cancels)
    Primitive(
        Prim.PAD,
        "structure",
        "`x` with `before` elements of `value` put ahead along `axis` (one, or a tuple of axes) and `after` behind;"
        " a negative width removes elements (torch's `pad`)",
        Signature(("x", "before", "after"), keywords=(("axis", -1), ("value", 0))),
        shapes.pad_rule,
        Templates(
            (
                ("x", "pad(d, -before, -after, axis=k)"),
                ("value", "sum(d * pad(zeros_like(x), before, after, axis=k, value=1.0))"),
            )
        ),
        frozenset({"x", "value"}),
        fills=frozenset({"value"}),
        linear_in=frozenset({"x", "value"}),
    ),
    # creation
    not_differentiable(Prim.ZEROS, "creation", "a tensor of zeros", CREATION, shapes.make_creation("zeros", 0), INPUT),
    not_differentiable(Prim.ONES, "creation", "a tensor of ones", CREATION, shapes.make_creation("ones", 0), INPUT),
    not_differentiable(
        Prim.FULL,
        "creation",
        "a tensor filled with `value`",
        Signature(variadic=("dims", 0, None), keywords=(("value", None), ("dtype", F32))),
        shapes.make_creation("full", 1),
        INPUT,
        fills=frozenset({"value"}),  # `full(2, value=0.1, dtype=f64)` is the f64 nearest to 0.1
    ),
    not_differentiable(
        Prim.ARANGE,
        "creation",
        "`0, ..., n - 1`, `a, ..., b - 1`, or `a, a + step, ...` short of `b`: `i64` of integers, floats of a float"
        " bound, or `dtype=` (numpy's and torch's)",
        Signature(variadic=("bounds", 1, 3), keywords=(("dtype", None),)),
        shapes.arange_rule,
        INPUT,
        fills=frozenset({"bounds"}),  # a literal bound takes the result's dtype: `0.1` of an f64 count is f64
    ),
    not_differentiable(
        Prim.EYE,
        "creation",
        "an `n` x `m` matrix (`n` x `n` without `m`) with ones on its diagonal, zeros elsewhere",
        Signature(("n",), optional=(("m", None),), keywords=(("dtype", F32),)),
        shapes.eye_rule,
        INPUT,
    ),
    # start + (stop - start) * i / (num - 1) for i < num, linear in the two ends
    linear(
        Prim.LINSPACE,
        "creation",
        "`num` evenly spaced floats from `start` to `stop`, both included",
        Signature(("start", "stop", "num"), keywords=(("dtype", None),)),
        shapes.linspace_rule,
        {
            "start": "float(sum(d * linspace(1.0, 0.0, num, dtype=r_dtype)), dtype=start_dtype)",
            "stop": "float(sum(d * linspace(0.0, 1.0, num, dtype=r_dtype)), dtype=stop_dtype)",
        },
        tensors=("start", "stop"),
        fills=frozenset({"start", "stop"}),  # a literal end takes the result's dtype: `0.7` of an f64 result is f64
    ),
    not_differentiable(
        Prim.RANDN,
        "creation",
        "standard normal samples",
        RANDOM,
        shapes.make_creation("randn", 1, floats_only=True),
        INPUT,
        random=True,
    ),
    not_differentiable(
        Prim.RAND,
        "creation",
        "uniform samples in `[0, 1)`",
        RANDOM,
        shapes.make_creation("rand", 1, floats_only=True),
        INPUT,
        random=True,
    ),
    not_differentiable(
        Prim.CATEGORICAL,
        "creation",
        "`i64` samples of the categorical distributions whose logits are along the last axis",
        Signature(("logits",), keywords=(("seed", None),)),
        shapes.categorical_rule,
        INTEGER + ": a sample is a position",
        tensors=frozenset({"logits"}),
        random=True,
    ),
    # The mask is a function of the seed and the size alone, so the adjoint is the same dropout of `d`: the
    # seed is required, since the run's stream would draw another mask for the backward sweep.
    linear(
        Prim.DROPOUT,
        "creation",
        "inverted dropout: each element zeroed with probability `p`, the others scaled by `1 / (1 - p)`",
        Signature(("x", "p"), keywords=(("seed", None), ("training", True))),
        shapes.dropout_rule,
        {"x": "dropout(d, p, seed=seed, training=training)"},
        tensors=("x", "p"),
        fills=frozenset({"p"}),  # a literal rate takes x's dtype: the scale of f64 data is 1 / (1 - 0.3), not f32's
    ),
    # inspection and conversion
    not_differentiable(
        Prim.SHAPE, "inspection", "the shape, a tuple of `i64`", ONE, shapes.shape_rule, INTEGER, tensors=X
    ),
    not_differentiable(
        Prim.LEN, "inspection", "the leading dimension, or a tuple's length", ONE, shapes.len_rule, INTEGER
    ),
    linear(
        Prim.FLOAT,
        "inspection",
        "converted to `f32` (or `dtype=`); parses a decimal string",
        Signature(("x",), keywords=(("dtype", F32),)),
        shapes.float_rule,
        {"x": "float(d, dtype=x_dtype)"},
        tensors=(),
        fills=frozenset({"x"}),  # `float(0.03, dtype=f64)` is the f64 nearest 0.03
    ),
    not_differentiable(
        Prim.INT,
        "inspection",
        "converted to `i64`, truncating; parses a decimal string",
        Signature(("x",)),
        shapes.int_rule,
        INTEGER,
    ),
    not_differentiable(
        Prim.STR, "inspection", "the text `print` shows for `x`", ONE, shapes.str_rule, "text: it carries no gradient"
    ),
    # effects
    not_differentiable(
        Prim.ASSERT,
        "effect",
        "stops the program with `E0502` unless `condition` holds",
        Signature(("condition",), optional=(("message", "assertion failed"),)),
        shapes.assert_rule,
        EFFECT,
        effect=True,
    ),
    not_differentiable(
        Prim.PRINT,
        "effect",
        "writes the values separated by spaces, then a newline",
        Signature(variadic=("values", 0, None)),
        shapes.print_rule,
        EFFECT,
        effect=True,
    ),
    not_differentiable(
        Prim.TIME,
        "effect",
        "`f64` seconds on a monotonic clock, from an arbitrary start: differences time a stretch of the program",
        Signature(),
        shapes.time_rule,
        "a reading of the clock, which no parameter changes",
        volatile=True,
    ),
    # what derivative code is written with (lang/autodiff/); ordinary built-ins users may call too
    not_differentiable(
        Prim.ZEROS_LIKE,
        "derivative",
        "zeros of `x`'s type (a tree of them for a tree)",
        ONE,
        shapes.zeros_like_rule,
        INPUT,
    ),
    # JAX's `stop_gradient`, PyTorch's `detach`: a target network's values, a straight-through estimator
    not_differentiable(
        Prim.STOP_GRADIENT,
        "derivative",
        "`x` itself (a tensor or a tree), which `grad` takes as a constant: no gradient flows through it",
        ONE,
        shapes.stop_gradient_rule,
        "it stops the gradient: its value is a constant to `grad`",
    ),
    linear(
        Prim.UNBROADCAST,
        "derivative",
        "`x` summed down to `like`'s shape and cast to its dtype",
        Signature(("x", "like")),
        shapes.unbroadcast_rule,
        {"x": "zeros_like(x) + d"},
        tensors=("x", "like"),
    ),
    linear(
        Prim.RESHAPE_LIKE,
        "derivative",
        "`x` reshaped to `like`'s shape",
        Signature(("x", "like")),
        shapes.reshape_like_rule,
        {"x": "reshape_like(d, x)"},
        tensors=("x", "like"),
    ),
    linear(
        Prim.EXPAND_DIMS,
        "derivative",
        "`x` with a new axis of size 1 at `axis`",
        Signature(("x", "axis")),
        shapes.expand_dims_rule,
        {"x": "reshape_like(d, x)"},
    ),
    linear(
        Prim.SCATTER_ADD,
        "derivative",
        "`x` with `updates` added at `indices` along `axis` (the adjoint of `gather`)",
        Signature(("x", "indices", "updates"), keywords=(("axis", 0),)),
        shapes.scatter_add_rule,
        {"x": "d", "updates": "unbroadcast(gather(d, indices, axis=k), updates)"},
        tensors=("x", "indices", "updates"),
    ),
    linear(
        Prim.ADD_ALONG_AXIS,
        "derivative",
        "`x` with `updates` added at one index per element along `axis` (the adjoint of `take_along_axis`)",
        Signature(("x", "indices", "updates", "axis")),
        shapes.add_along_axis_rule,
        {"x": "d", "updates": "take_along_axis(d, indices, axis)"},
        tensors=("x", "indices", "updates"),
    ),
    linear(
        Prim.SPLIT_LIKE,
        "derivative",
        "`x` cut along `axis` into a tuple shaped like `like` (the adjoint of `concat`)",
        Signature(("x", "like"), keywords=(("axis", 0),)),
        shapes.split_like_rule,
        {"x": "concat(d, axis=k)"},
    ),
    Primitive(
        Prim.TREE_ADD,
        "derivative",
        "two trees (structs, tuples, tensors) added leaf by leaf",
        Signature(("a", "b")),
        shapes.tree_add_rule,
        Templates((("a", "d"), ("b", "d"))),
        operands=("a", "b"),
        linear_in=frozenset({"a", "b"}),
    ),
    not_differentiable(
        Prim.TAPE,
        "derivative",
        "an empty tape (a stack of values)",
        Signature(optional=(("like", None),)),
        shapes.tape_rule,
        INPUT,
    ),
    linear(
        Prim.PUSH,
        "derivative",
        "the tape with `value` pushed on it",
        Signature(("tape", "value")),
        shapes.push_rule,
        {"tape": "pop(d)[1]", "value": "pop(d)[0]"},
        tensors=(),
    ),
    linear(
        Prim.POP,
        "derivative",
        "`(value, rest)`: the last value pushed, and the tape without it",
        Signature(("tape",)),
        shapes.pop_rule,
        {"tape": "push(d[1], d[0])"},
        tensors=(),
    ),
    # trees: structs and tuples of tensors (parameters, gradients, optimizer state)
    Primitive(
        Prim.TREE_MAP,
        "tree",
        "`f` applied leaf by leaf to one or more trees of one structure",
        Signature(("f",), variadic=("trees", 1, None)),
        shapes.tree_map_rule,
        Computed("written out leaf by leaf before differentiation: the calls of its function are differentiated"),
        functions=frozenset({"f"}),
    ),
    Primitive(
        Prim.TREE_DOT,
        "tree",
        "the sum over the leaves of `sum(a * b)`",
        Signature(("a", "b")),
        shapes.tree_dot_rule,
        Computed("written out as a sum of `sum(a * b)` over the leaves before differentiation"),
        linear_in=frozenset({"a", "b"}),
        product=True,
    ),
    # data
    not_differentiable(Prim.DIGITS, "data", "the 8x8 digits dataset, shipped", Signature(), shapes.digits_rule, DATA),
    not_differentiable(
        Prim.PERMUTATION,
        "data",
        "a random permutation of `0..n`",
        Signature(("n",), keywords=(("seed", None),)),
        shapes.permutation_rule,
        DATA,
        random=True,
    ),
    not_differentiable(
        Prim.BATCHES,
        "data",
        "a dataset cut into batches of `size`, optionally shuffled",
        Signature(("data", "size"), keywords=(("shuffle", False), ("seed", None))),
        shapes.batches_rule,
        DATA,
        random=True,
    ),
    not_differentiable(
        Prim.LOAD_CSV,
        "data",
        "a CSV file of numbers as an `f32` matrix",
        Signature(("path",), keywords=(("skip_header", False), ("delimiter", ","))),
        shapes.load_csv_rule,
        DATA,
        files=True,
    ),
    not_differentiable(
        Prim.LOAD_NPZ,
        "data",
        "one array of an `.npz` file (never unpickled)",
        Signature(("path", "name"), keywords=(("dtype", F32), ("rank", 2))),
        shapes.load_npz_rule,
        DATA,
        files=True,
    ),
    not_differentiable(
        Prim.TEXT_CORPUS,
        "data",
        "bytes of the shipped text corpus",
        Signature(("length",)),
        shapes.text_corpus_rule,
        DATA,
    ),
    not_differentiable(
        Prim.CHARS,
        "data",
        "the text of a tensor of byte codes",
        Signature(("codes",)),
        shapes.chars_rule,
        DATA,
        tensors=frozenset({"codes"}),
    ),
    # metrics and progress
    not_differentiable(
        Prim.LOG_METRIC,
        "effect",
        "a value appended to the metrics file",
        Signature(("name", "value"), keywords=(("step", -1),)),
        shapes.log_metric_rule,
        EFFECT,
        effect=True,
        files=True,
    ),
    not_differentiable(
        Prim.PROGRESS,
        "effect",
        "a progress bar advanced to `done` of `total`",
        Signature(("done", "total"), optional=(("label", "progress"),)),
        shapes.progress_rule,
        EFFECT,
        effect=True,
    ),
    # checkpoints
    not_differentiable(
        Prim.SAVE,
        "checkpoint",
        "a tensor or tree written to a safetensors file, atomically",
        Signature(("path", "value")),
        shapes.save_rule,
        EFFECT,
        effect=True,
        files=True,
    ),
    not_differentiable(
        Prim.LOAD,
        "checkpoint",
        "a tensor or tree of `like`'s type read from a safetensors file",
        Signature(("path", "like"), keywords=(("strict", True),)),
        shapes.load_rule,
        "stored values, which no parameter changes",
        files=True,
    ),
    # convolution
    convolution(
        Prim.CONV2D,
        "2-d convolution (cross-correlation) of NCHW images with OIHW weights",
        Signature(("x", "w"), keywords=STRIDED),
        shapes.conv2d_rule,
        {
            "x": "conv2d_input_grad(d, w, x, stride=stride, padding=padding)",
            "w": "conv2d_weight_grad(d, x, w, stride=stride, padding=padding)",
        },
        ("x", "w"),
        product=True,
    ),
    convolution(
        Prim.MAX_POOL2D,
        "2-d max pooling of NCHW images (stride: `size` by default)",
        POOLING,
        shapes.max_pool2d_rule,
        {"x": "max_pool2d_grad(d, x, size, stride=stride, padding=padding)"},
        ("x",),
        linear_in=frozenset(),  # (the maximum of each window: not linear)
    ),
    convolution(
        Prim.CONV2D_INPUT_GRAD,
        "the adjoint of `conv2d` for its input, shaped like `like`",
        Signature(("dy", "w", "like"), keywords=STRIDED),
        shapes.conv2d_input_grad_rule,
        {
            "dy": "conv2d(d, w, stride=stride, padding=padding)",
            "w": "conv2d_weight_grad(dy, d, w, stride=stride, padding=padding)",
        },
        ("dy", "w", "like"),
        product=True,
    ),
    convolution(
        Prim.CONV2D_WEIGHT_GRAD,
        "the adjoint of `conv2d` for its weights, shaped like `like`",
        Signature(("dy", "x", "like"), keywords=STRIDED),
        shapes.conv2d_weight_grad_rule,
        {
            "dy": "conv2d(x, d, stride=stride, padding=padding)",
            "x": "conv2d_input_grad(dy, d, x, stride=stride, padding=padding)",
        },
        ("dy", "x", "like"),
        product=True,
    ),
    convolution(
        Prim.MAX_POOL2D_GRAD,
        "the adjoint of `max_pool2d`: `dy` scattered to the chosen positions",
        Signature(("dy", "x", "size"), keywords=(("stride", None), ("padding", 0))),
        shapes.max_pool2d_grad_rule,
        {"dy": "max_pool2d_gather(d, x, size, stride=stride, padding=padding)"},
        ("dy", "x"),
    ),
    convolution(
        Prim.MAX_POOL2D_GATHER,
        "`v` read at the positions `max_pool2d` chooses (the adjoint of `max_pool2d_grad`)",
        Signature(("v", "x", "size"), keywords=(("stride", None), ("padding", 0))),
        shapes.max_pool2d_gather_rule,
        {"v": "max_pool2d_grad(d, x, size, stride=stride, padding=padding)"},
        ("v", "x"),
    ),
    # data parallelism
    not_differentiable(
        Prim.RANK,
        "distributed",
        "this process's rank in a data-parallel run (0 alone)",
        Signature(),
        shapes.world_rule,
        INTEGER,
    ),
    not_differentiable(
        Prim.WORLD_SIZE,
        "distributed",
        "the number of processes of the run (1 alone)",
        Signature(),
        shapes.world_rule,
        INTEGER,
    ),
    # Every rank's result is the mean of every rank's `tree`, so the gradient of the sum of all ranks' losses
    # reaches each rank's `tree` as the mean of every rank's `d`: in a world of 1 that is `d` itself. A collective:
    # every rank must make the call, so it is never dropped as unread.
    Primitive(
        Prim.ALLREDUCE_MEAN,
        "distributed",
        "a float tensor or tree averaged leaf by leaf over every rank",
        Signature(("tree",)),
        shapes.allreduce_mean_rule,
        Templates((("tree", "allreduce_mean(d)"),)),
        effect=True,
    ),
)

PRIMITIVES: dict[Prim, Primitive] = {record.prim: record for record in PRIMITIVES_LIST}
BY_NAME: dict[str, Prim] = {p.value: p for p in Prim}

ELEMENTWISE_UNARY = frozenset(p for p, r in PRIMITIVES.items() if r.group == "elementwise" and r.parameters == ("x",))
FLOAT_MATH = frozenset(p for p in ELEMENTWISE_UNARY if PRIMITIVES[p].floats_only)
REDUCTIONS = frozenset(p for p, r in PRIMITIVES.items() if r.signature is REDUCTION)
RANDOMNESS = frozenset(p for p, r in PRIMITIVES.items() if r.random)
EFFECTS = frozenset(p for p, r in PRIMITIVES.items() if r.effect)
VOLATILE = frozenset(p for p, r in PRIMITIVES.items() if r.volatile)
NON_DIFFERENTIABLE = frozenset(p for p, r in PRIMITIVES.items() if isinstance(r.derivative, NoDerivative))
DIFFERENTIABLE = frozenset(Prim) - NON_DIFFERENTIABLE


@record(frozen=True)
class Support:
    """What one backend does with the primitives: those it implements, and those it refuses, each with why (a
    program using one runs elsewhere, or is reported). Each backend module declares one as `SUPPORT`."""

    backend: str
    implemented: frozenset[Prim]
    refused: dict[Prim, str]

    def problems(self) -> list[str]:
        """What keeps this from covering `Prim` exactly once: a primitive neither implemented nor refused, or
        both, or refused without a reason."""
        found = [
            f"{p.value}: neither implemented nor refused" for p in Prim if p not in self.implemented | set(self.refused)
        ]
        found += [f"{p.value}: both implemented and refused" for p in self.implemented & set(self.refused)]
        found += [f"{p.value}: refused without a reason" for p, reason in self.refused.items() if not reason]
        return found


# Program transformations, not primitives: the checker types them and lang/autodiff/ replaces every
# call of them by generated DL functions before a backend sees the program.
TRANSFORMS: dict[str, Signature] = {
    "grad": Signature(("f",), keywords=(("wrt", 0), ("has_aux", False))),
    "value_and_grad": Signature(("f",), keywords=(("wrt", 0), ("has_aux", False))),
}
