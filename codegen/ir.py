"""The compiler's IR: typed scalar values, named variables and basic blocks ending in a branch.

`codegen/lower.py` builds it from the checked AST; `codegen/llvm.py` turns it into LLVM IR. Every node is
an immutable value, so a lowered function can be printed and compared in tests. Values are scalars of
one of `SCALAR_DTYPES`; a variable is a named memory slot (LLVM's mem2reg makes it SSA), a `Temp` is the
result of exactly one instruction. Operations that can fail at run time (integer division by zero,
integer overflow) name a `Site`: the diagnostic the host raises when the compiled code reports it.
"""

from __future__ import annotations

import math

from dl.lang.diagnostics import Span
from dl.lang.record import record

SCALAR_DTYPES = ("f64", "f32", "i64", "i32", "bool")
FLOAT_DTYPES = frozenset({"f32", "f64"})
INTEGER_DTYPES = frozenset({"i32", "i64"})

node = record(frozen=True, slots=True)


@node
class Temp:
    """The result of one instruction; `name` says what it holds (`sum`, `call.fib`)."""

    name: str
    dtype: str


@node
class Const:
    """A constant operand. Equal constants are interchangeable: 0.0 and -0.0 are not equal here (they are in
    Python), since code computing with one is not code computing with the other (`1.0 / (x * -0.0)`)."""

    value: int | float | bool
    dtype: str

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not Const:
            return NotImplemented
        if self.dtype != other.dtype or self.value != other.value:
            return False
        return not isinstance(self.value, float) or math.copysign(1.0, self.value) == math.copysign(1.0, other.value)

    def __hash__(self) -> int:
        return hash((self.value, self.dtype))

    def __repr__(self) -> str:
        """As a record shows it, but a NaN with its sign: the text names the code (`ir.show` keys the compile
        cache, and a loop's symbol is a digest of its text), and `-nan` is not `nan` to `copysign`."""
        value = self.value
        negative_nan = isinstance(value, float) and math.isnan(value) and math.copysign(1.0, value) < 0
        return f"Const(value={'-nan' if negative_nan else repr(value)}, dtype={self.dtype!r})"


Operand = Temp | Const


@node
class Variable:
    """A named slot: a parameter, a `let`, a loop counter. Names are unique within a function."""

    name: str
    dtype: str


@node
class Site:
    """Where compiled code can fail: the diagnostic (code, message, span) the host raises for it. With
    `shows` (a dtype), the failing operation also stores the offending value in `dl.value` (as f64, an i64
    as its bits), and `{value}` in the message becomes that value, printed as `print` shows a `shows` scalar."""

    code: str
    message: str
    span: Span
    shows: str | None = None
    frame: str | None = None  # a call's site: the function it calls (the frame it opens in the call stack)
    # the calls of inlined functions it lies in, outermost first: (function, span of the call), the frames
    # the interpreter has there
    inlined: tuple = ()


# ------------------------------------------------------------------ instructions


@node
class Load:
    result: Temp
    variable: Variable


@node
class Store:
    variable: Variable
    value: Operand


@node
class BinaryOp:
    """`op` is one of add sub mul div floordiv mod pow (operands and result of one dtype); integer
    add/sub/mul/floordiv/mod name the `site` they fail at (overflow, division by zero). With `wraps`
    (numpy's fixed-width arithmetic: i32 operands, or an i64 computed from an i32) integer results wrap
    around instead: only `//` and `%` name a site, the division by zero's."""

    result: Temp
    op: str
    lhs: Operand
    rhs: Operand
    site: int | None = None
    wraps: bool = False


@node
class Compare:
    """`op` is one of == != < <= > >=; operands share a dtype, the result is bool."""

    result: Temp
    op: str
    lhs: Operand
    rhs: Operand


@node
class UnaryOp:
    """`neg` (i64 names the overflow `site`; an integer without one wraps, as numpy's i32) or `not`."""

    result: Temp
    op: str
    operand: Operand
    site: int | None = None


@node
class Convert:
    """`float(x, dtype=...)` or `int(x)` of a scalar, with the interpreter's semantics: to a float rounds to
    nearest (an i64 going through f64 first, as numpy converts a Python int; an i32 directly), an i32 to
    i64 is exact, to i64 truncates toward zero, to bool is not done. A float to i64 names the `site` for inf
    and nan, and `site + 1` for a value out of the i64 range (both show the value). Also the promotions of
    `lower.promoted`, with the same rules."""

    result: Temp
    operand: Operand
    site: int | None = None


@node
class MathCall:
    """An elementwise built-in on scalars: exp log sqrt tanh sin cos abs sigmoid relu maximum minimum."""

    result: Temp
    name: str
    args: tuple[Operand, ...]


@node
class Call:
    """A call of another compiled function, by its symbol; `result` is None for a unit result. Nested past
    the depth limit, it fails at `site` (`E0506` at the call, as the interpreter reports it)."""

    result: Temp | None
    function: str
    args: tuple[Operand, ...]
    site: int | None = None


# ------------------------------------------------------------------ tensors (codegen/specialize.py)
# A function specialised for the shapes it is called with sees every tensor as a `Buffer` of constant
# shape, and computes with elementwise *trees*: `Read`, `Index`, `Splat`, `Take`, `Apply` nodes evaluated
# at each index of the tensor they describe (its shape is the loop nest's). A tree never allocates; only the
# instructions below write buffers.


@node
class Buffer:
    """Contiguous row-major storage of `shape` elements of `dtype`: `slots[slot]` plus `offset` bytes
    (slot 0 is the function's workspace, the others the caller's argument and result tensors)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    slot: int
    offset: int = 0

    @property
    def size(self) -> int:
        count = 1
        for n in self.shape:
            count *= n
        return count


@node
class Read:
    """`buffer[offset + sum(i[d] * strides[d])]` at index `i`: a view (broadcast dimensions have stride 0,
    a transpose permutes the strides, `x[k]` moves the offset)."""

    buffer: Buffer
    offset: Operand
    strides: tuple[int, ...]


@node
class Index:
    """The index along `axis` (i64), as `arange` and `one_hot` need."""

    axis: int


@node
class Splat:
    """A scalar, the same at every index."""

    value: Operand


@node
class Take:
    """`gather`: like `Read`, plus `index * stride` where `index` is a tree of i64 (negative counts from
    the end of the `size` elements of the gathered axis); an index out of range fails at `site` (None:
    the indices were checked before, all of them at once)."""

    buffer: Buffer
    offset: Operand
    strides: tuple[int, ...]
    index: object
    stride: int
    size: int
    site: int | None


@node
class Apply:
    """An elementwise operation of `dtype` (its result's): add sub mul div pow neg; eq ne lt le gt ge (bool);
    not and or; select (condition, a, b); the math built-ins; `convert` (to `dtype`)."""

    op: str
    dtype: str
    args: tuple


def tree_dtype(tree: object) -> str:
    """The dtype of the values an elementwise tree computes."""
    match tree:
        case Read(buffer=buffer) | Take(buffer=buffer):
            return buffer.dtype
        case Index():
            return "i64"
        case Splat(value=value):
            return value.dtype
        case Apply(dtype=dtype):
            return dtype
    raise AssertionError(tree)


ITEM_BYTES = {"f32": 4, "f64": 8, "i64": 8, "i32": 4, "bool": 1}  # an element's size in a buffer (bools as bytes)


def contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides, in elements, of a row-major buffer of `shape`."""
    strides, stride = [], 1
    for n in reversed(shape):
        strides.append(stride)
        stride *= n
    return tuple(reversed(strides))


TRANSCENDENTAL = frozenset({"exp", "log", "tanh", "sin", "cos", "sigmoid", "pow"})


def can_fail(tree: object) -> bool:
    """Whether evaluating a tree can fail: a gather checking its indices as it goes."""
    if isinstance(tree, Take):
        return tree.site is not None or can_fail(tree.index)
    return isinstance(tree, Apply) and any(can_fail(a) for a in tree.args)


def costly(tree: object) -> bool:
    """Whether a tree calls a transcendental function (worth computing a vector at a time, once)."""
    if isinstance(tree, Apply):
        return tree.op in TRANSCENDENTAL or any(costly(a) for a in tree.args)
    return False


@node
class Fill:
    """`target[i] = tree(i)` for every index of the target; with `view`, for every index of `shape`, the
    element of the target that view reads (`x[:, 2:4] = ...`)."""

    target: Buffer
    tree: object
    view: Read | None = None
    shape: tuple[int, ...] = ()


@node
class Reduce:
    """`target` (the tree's `shape` without `axes`) becomes `op` (add, max, min) over `axes` of `tree`;
    the target's dtype may be wider than the tree's (f32 sums accumulate in f64)."""

    target: Buffer
    op: str
    tree: object
    shape: tuple[int, ...]
    axes: tuple[int, ...]


@node
class Scan:
    """`target` (the tree's shape) becomes the running sum of `tree` along `axis` (`cumsum`): one pass over the
    shape in row-major order adds each element to the target's element before it along the axis, which that
    order has already written; the sums round as numpy's sequential `cumsum` rounds them."""

    target: Buffer
    tree: object
    axis: int


@node
class Sort:
    """`target` (i64, the tree's shape) becomes, along `axis`, the positions that sort the tree's elements there
    (`argsort`): a stable sort, so equal elements keep their order either way; a nan sorts after every number
    ascending and before every number `descending`, as numpy's and torch's stable sorts. Each row is merge
    sorted bottom-up (O(n log n), stable): its elements (the tree, which cannot fail, evaluated once each) and
    their positions go into `keys` and `positions` (the tree's dtype and i64, [2, n]: runs are merged from one
    half into the other), and the positions sorted into the target."""

    target: Buffer
    tree: object
    axis: int
    descending: bool
    keys: Buffer
    positions: Buffer


@node
class MatMul:
    """`out[m, n] = sum_k a[m, k] * b[k, n]` by the BLAS `gemm` of numpy's OpenBLAS; `a` and `b` are views
    whose last stride or second-to-last stride is 1 (transposed operands are passed as such)."""

    out: Buffer
    a: Read
    b: Read
    m: int
    n: int
    k: int
    accumulate: bool = False  # out += a @ b (gemm's beta = 1)


@node
class ScatterAdd:
    """`target[position(i) + wrap(index(i)) * stride] += updates(i)` for every index `i` of `shape`:
    `scatter_add` and `add_along_axis`, the reverse of `Take`; an index out of range fails at `site` (None: the
    indices were checked before, all of them at once)."""

    target: Buffer
    strides: tuple[int, ...]
    index: object
    stride: int
    size: int
    updates: object
    shape: tuple[int, ...]
    site: int | None


@node
class Draw:
    """`target` filled with random draws by the host, exactly as the interpreter draws them
    (runtime/randomness.py `fill_draws`): `kind` 0 is `rand` (uniform in [0, 1)), 1 is `randn` (standard
    normal), 2 a `permutation` of the target's size (i64); from `default_rng(seed)`, or with `seed` None from
    the run's generator (an effect: never dropped). The seed was checked before (non-negative)."""

    target: Buffer
    kind: int
    seed: Operand | None


@node
class Sample:
    """`target` (i64, one element per row) filled with `categorical` samples by the host, exactly as the
    interpreter samples them (runtime/randomness.py `fill_samples`), from the f64 `logits` (a whole buffer,
    `rows` x `categories` as laid out); from `default_rng(seed)`, or with `seed` None from the run's
    generator. Fails at `site` for a row without a finite largest value (nothing drawn then). Never dropped."""

    target: Buffer
    logits: Read
    rows: int
    categories: int
    seed: Operand | None
    site: int


@node
class Evaluate:
    """A scalar from a tree of no dimensions."""

    result: Temp
    tree: object


@node
class Check:
    """`assert` or a bounds check: fail at `site` unless `condition`; `shows` is the value the failure
    shows (an index), if any."""

    condition: Operand
    site: int
    shows: Operand | None = None


@node
class Tape:
    """A stack of entries of `size` bytes in memory from `malloc`: the address, the number of entries and
    the capacity (i64 variables). The function frees it when it returns, or fails."""

    address: Variable
    count: Variable
    capacity: Variable
    size: int


@node
class TapePush:
    """Append an entry: each of `leaves` is (byte offset in the entry, a tree of `shape` or a scalar
    operand); the storage doubles when full (failing at `site` if memory runs out)."""

    tape: Tape
    leaves: tuple
    site: int


@node
class TapeZeros:
    """Make `tape` hold `count` entries of zeros (its storage grown with `realloc` as needed, failing at
    `site` if memory runs out): `zeros_like` of a tape that a loop then pushes onto."""

    tape: Tape
    count: Operand
    site: int


@node
class TapePop:
    """Remove the last entry (failing at `site` if there is none), copying each of `leaves` ((byte offset,
    `Buffer` or `Temp`)) out of it."""

    tape: Tape
    leaves: tuple
    site: int


@node
class CallSpecialised:
    """A call of another specialised function of the module (`function`, its symbol), which takes `void
    f(i8** slots)`: a slot array of `slots` pointers is made for the call, `arguments` fill it as (slot, a
    contiguous `Read` of a tensor or an operand passed through a cell) and `results` as (slot, a `Buffer`
    the callee writes or a `Temp` read from a cell after it returns). The callee allocates its own
    workspace. Past the depth limit the call fails at `site` (`E0506` at the call, as in the interpreter);
    a failing callee makes the caller note the site in the module's call trace and fail too."""

    function: str
    arguments: tuple
    results: tuple
    slots: int
    site: int


@node
class LoadSlot:
    """A scalar argument of a specialised function: the value `slots[slot]` points at."""

    result: Temp
    slot: int


@node
class StoreSlot:
    """A scalar result of a specialised function, stored where `slots[slot]` points."""

    slot: int
    value: Operand


Instruction = (
    Load
    | Store
    | BinaryOp
    | Compare
    | UnaryOp
    | Convert
    | MathCall
    | Call
    | Fill
    | Reduce
    | Scan
    | Sort
    | MatMul
    | ScatterAdd
    | Evaluate
    | Check
    | CallSpecialised
    | LoadSlot
    | StoreSlot
    | TapePush
    | TapePop
    | TapeZeros
)


# ------------------------------------------------------------------ terminators


@node
class Jump:
    target: str


@node
class Branch:
    condition: Operand
    then: str
    otherwise: str


@node
class Return:
    """`value` is None in a function without a result (`Function.result` is `unit`)."""

    value: Operand | None


Terminator = Jump | Branch | Return


@node
class Block:
    label: str
    instructions: tuple[Instruction, ...]
    terminator: Terminator


@node
class Function:
    """One compiled function: `symbol` is its unique name in the module, `name` the DL name (for messages).
    `blocks[0]` is the entry; `sites` are indexed by the instructions that can fail; `recursion` is the site
    of a call nesting too deep. `result` is a scalar dtype, or `unit` for a function returning nothing."""

    symbol: str
    name: str
    params: tuple[Variable, ...]
    result: str
    variables: tuple[Variable, ...]
    blocks: tuple[Block, ...]
    sites: tuple[Site, ...]
    recursion: Site
    buffers: tuple[Buffer, ...] = ()  # a specialised function's (it takes `void f(i8** slots)`)
    specialised: bool = False
    tapes: tuple[Tape, ...] = ()  # freed on every way out
    # a specialised function allocating its workspace per call (else the host's): (bytes, the site failing
    # when memory runs out)
    own_workspace: tuple[int, int] | None = None


def show(function: Function) -> str:
    """The IR as text, for tests and `docs/internals.md`."""
    params = ", ".join(f"{p.name}: {p.dtype}" for p in function.params)
    lines = [f"fn {function.symbol}({params}) -> {function.result}"]
    for block in function.blocks:
        lines.append(f"{block.label}:")
        lines.extend(f"    {instruction}" for instruction in block.instructions)
        lines.append(f"    {block.terminator}")
    return "\n".join(lines)


# ------------------------------------------------------------------ layouts: a specialisation's arguments and results
#
# A function compiled per argument layout (codegen/specialize.py) is keyed by the layout of its arguments: the
# structure of its tuples and structs and each tensor's dtype and shape (scalars are run-time values: only
# their dtype). Its result layout says which slot holds each part of what it returns.


@record(frozen=True, slots=True)
class TensorArgument:
    dtype: str | None  # None: a dtype compiled code does not take
    shape: tuple[int, ...]


@record(frozen=True, slots=True)
class ScalarArgument:
    dtype: str | None


@record(frozen=True, slots=True)
class StaticArgument:
    """An integer compiled in, as jit's static arguments (a shape depends on it)."""

    value: int


@record(frozen=True, slots=True)
class FunctionArgument:
    """A DL function without captured values, compiled in: the key of the function value, its name."""

    key: int
    name: str


@record(frozen=True, slots=True)
class OtherArgument:
    """A value compiled code does not take (its Python class)."""

    class_name: str


@record(frozen=True, slots=True)
class TupleLayout:
    items: tuple


@record(frozen=True, slots=True)
class StructLayout:
    """A struct: its type (the key of the run-time struct type for an argument, the type itself for a
    result), its fields' layouts in order, and its name."""

    kind: object
    items: tuple
    name: str


@record(frozen=True, slots=True)
class TextLayout:
    text: str


@record(frozen=True, slots=True)
class TensorResult:
    slot: int
    dtype: str
    shape: tuple[int, ...]
    buffer: Buffer


@record(frozen=True, slots=True)
class ScalarResult:
    slot: int
    dtype: str


@record(frozen=True, slots=True)
class UnitResult:
    pass


Layout = (
    TensorArgument
    | ScalarArgument
    | StaticArgument
    | FunctionArgument
    | OtherArgument
    | TupleLayout
    | StructLayout
    | TextLayout
    | TensorResult
    | ScalarResult
    | UnitResult
)


def layout_leaves(layout: Layout):
    """The leaves of a layout, in order: its tuples and structs opened."""
    if isinstance(layout, (TupleLayout, StructLayout)):
        for item in layout.items:
            yield from layout_leaves(item)
    else:
        yield layout


# ------------------------------------------------------------------ walking the IR


def rebuilt(node: object, moved: dict[str, Buffer], renamed: dict[str, Temp] | None = None) -> object:
    """`node` with every buffer replaced by its moved version, and every temp by its `renamed` one when
    given (nodes are immutable: rebuilt)."""
    if isinstance(node, Buffer):
        return moved.get(node.name, node)
    if isinstance(node, Temp) and renamed is not None:
        return renamed.get(node.name, node)
    if isinstance(node, tuple):
        return tuple(rebuilt(item, moved, renamed) for item in node)
    if hasattr(node, "__dataclass_fields__") and type(node).__module__ == __name__:
        values = [rebuilt(getattr(node, name), moved, renamed) for name in node.__dataclass_fields__]
        return type(node)(*values)
    return node


def count_reads(node: object, counts: dict[str, int]) -> None:
    """How often each buffer is read by the trees and operands of an instruction (walks every field)."""
    if isinstance(node, (Read, Take)):
        counts[node.buffer.name] = counts.get(node.buffer.name, 0) + 1
    if isinstance(node, MatMul):
        for view in (node.a, node.b):
            counts[view.buffer.name] = counts.get(view.buffer.name, 0) + 1
        return
    if isinstance(node, tuple):
        for item in node:
            count_reads(item, counts)
        return
    for name in getattr(node, "__dataclass_fields__", ()):
        if name in ("target", "out", "buffer"):
            continue
        count_reads(getattr(node, name), counts)
