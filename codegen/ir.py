"""The compiler's IR: typed scalar values, named variables and basic blocks ending in a branch.

`codegen/lower.py` builds it from the checked AST; `codegen/llvm.py` turns it into LLVM IR. Every node is
an immutable value, so a lowered function can be printed and compared in tests. Values are scalars of
one of `SCALAR_DTYPES`; a variable is a named memory slot (LLVM's mem2reg makes it SSA), a `Temp` is the
result of exactly one instruction. Operations that can fail at run time (integer division by zero,
integer overflow) name a `Site`: the diagnostic the host raises when the compiled code reports it.
"""

from __future__ import annotations

from dataclasses import dataclass

from dl.lang.diagnostics import Span

SCALAR_DTYPES = ("f64", "f32", "i64", "bool")

node = dataclass(frozen=True, slots=True)


@node
class Temp:
    """The result of one instruction; `name` says what it holds (`sum`, `call.fib`)."""

    name: str
    dtype: str


@node
class Const:
    value: int | float | bool
    dtype: str


Operand = Temp | Const


@node
class Variable:
    """A named slot: a parameter, a `let`, a loop counter. Names are unique within a function."""

    name: str
    dtype: str


@node
class Site:
    """Where compiled code can fail: the diagnostic (code, message, span) the host raises for it. With
    `shows` (a dtype), the failing operation also stores the offending value (as f64) in `dl.value`, and
    `{value}` in the message becomes that value, printed as `print` shows a `shows` scalar."""

    code: str
    message: str
    span: Span
    shows: str | None = None


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
    add/sub/mul/floordiv/mod name the `site` they fail at (overflow, division by zero)."""

    result: Temp
    op: str
    lhs: Operand
    rhs: Operand
    site: int | None = None


@node
class Compare:
    """`op` is one of == != < <= > >=; operands share a dtype, the result is bool."""

    result: Temp
    op: str
    lhs: Operand
    rhs: Operand


@node
class UnaryOp:
    """`neg` (integers name the overflow `site`) or `not`."""

    result: Temp
    op: str
    operand: Operand
    site: int | None = None


@node
class Convert:
    """`float(x, dtype=...)` or `int(x)` of a scalar, with the interpreter's semantics: to a float rounds to
    nearest (an i64 going through f64 first, as numpy converts a Python int), to i64 truncates toward zero,
    to bool is not done. A float to i64 names the `site` for inf and nan, and `site + 1` for a value out of
    the i64 range (both show the value)."""

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
    """A call of another compiled function, by its symbol; `result` is None for a unit result."""

    result: Temp | None
    function: str
    args: tuple[Operand, ...]


Instruction = Load | Store | BinaryOp | Compare | UnaryOp | Convert | MathCall | Call


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


def show(function: Function) -> str:
    """The IR as text, for tests and `docs/internals.md`."""
    params = ", ".join(f"{p.name}: {p.dtype}" for p in function.params)
    lines = [f"fn {function.symbol}({params}) -> {function.result}"]
    for block in function.blocks:
        lines.append(f"{block.label}:")
        lines.extend(f"    {instruction}" for instruction in block.instructions)
        lines.append(f"    {block.terminator}")
    return "\n".join(lines)
