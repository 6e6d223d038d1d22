"""Integer literals that their dtype cannot hold: E0515, before anything runs.

An integer literal takes its dtype from its suffix (`3i32`), else from the value it
meets (`x * 1000` with `x: f32` multiplies by the f32 1000.0, as the checker records in
`Typed.coercions`), else `i64`. It is out of range when its value does not fit that
dtype: outside the integer dtype's range, or beyond the largest finite float of a float
dtype. (A float literal too large for its dtype is infinity, as in IEEE arithmetic:
`-1e400` is minus infinity in any dtype. It is not an error.)

Two checks, one message: the parser refuses what no dtype could hold (`integer_value`: an
integer of more digits than an f64 reaches), without turning the text into a number first;
after checking, `out_of_range` finds the literals that do not fit the dtype their suffix or
context gave them.
"""

from __future__ import annotations

import numpy as np
from dl.lang import ast
from dl.lang.diagnostics import Diagnostic, Span, error

# f64, the widest number type, reaches about 1.8e308: an integer of more digits fits no dtype. (Reading it
# as a number is not even attempted: Python refuses to read integers of more than 4300 digits.)
MAX_INTEGER_DIGITS = 309
RANGES = {
    "i32": (-(2**31), 2**31 - 1),
    "i64": (-(2**63), 2**63 - 1),
}
FLOAT_MAX = {"f32": float(np.finfo(np.float32).max), "f64": float(np.finfo(np.float64).max)}


def shown_integer(text: str) -> str:
    """An integer literal for a message: long ones shortened, with their number of digits."""
    return text if len(text) <= 40 else f"{text[:12]}...{text[-12:]} ({len(text)} digits)"


def integer_error(text: str, dtype: str, span: Span) -> Diagnostic:
    if dtype in RANGES:
        holds = f"{dtype} holds {RANGES[dtype][0]}..{RANGES[dtype][1]}"
    else:
        holds = f"{dtype} reaches about {FLOAT_MAX[dtype]:.1e}"
    return error("E0515", f"integer literal {shown_integer(text)} is out of range for {dtype}", span, holds)


def integer_value(digits: str, dtype: str | None, span: Span) -> int | Diagnostic:
    """The value of an integer literal's digits (whose range the checker checks: `out_of_range`), or E0515
    when no dtype could hold it."""
    if len(digits.lstrip("0")) > MAX_INTEGER_DIGITS:
        return integer_error(digits, dtype or "i64", span)
    return int(digits.lstrip("0") or "0")


def fits(value: int, dtype: str) -> bool:
    if dtype in RANGES:
        return RANGES[dtype][0] <= value <= RANGES[dtype][1]
    return abs(value) <= FLOAT_MAX.get(dtype, FLOAT_MAX["f64"])


def out_of_range(modules: list[ast.Module], coercions: dict[int, str]) -> list[Diagnostic]:
    """E0515 for every integer literal of `modules` whose value its dtype cannot hold; `coercions` are the
    dtypes literals took from their context (`Typed.coercions`). Walks without recursion."""
    found = []
    waiting: list = [decl for module in reversed(modules) for decl in reversed(module.decls)]
    while waiting:
        node = waiting.pop()
        if type(node) is ast.IntLiteral:
            dtype = node.dtype or coercions.get(id(node), "i64")
            if not fits(node.value, dtype):
                found.append(integer_error(str(node.value), dtype, node.span))
        else:
            waiting.extend(reversed(list(ast.children(node))))
    return found
