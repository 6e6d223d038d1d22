"""What the forward sweep records for the backward sweep: each operation (`Op`), functional update
(`Store`) and compound statement (`Compound`, with what a `while`'s iterations keep, `Kept`), in order, per block
(`Sweep`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import field

from dl.lang import ast
from dl.lang.diagnostics import UNKNOWN_SPAN, Span
from dl.lang.record import record


@record
class Part:
    """An adjoint contribution to one region (`indices`) or field of a variable, added in place."""

    indices: tuple | None
    field: str | None
    value: ast.Expr
    span: Span = UNKNOWN_SPAN  # the read it is the adjoint of: where an index out of range is reported


@record
class Op:
    """`let result = rhs`, where rhs is one operation on atoms: what the backward sweep differentiates."""

    result: str
    rhs: ast.Expr
    original: ast.Expr | None  # the user's expression it came from (for types and spans)
    split: tuple[ast.Expr, str] | None = None  # a split call: its `_bwd` function, the name of `_fwd`'s pair
    variant: int | None = None  # a call: the check of the callee's body its `_back` is written for (`variant`)


@record
class Store:
    """`let new = old; new[indices] = value` (or `new.field = value`): a functional update."""

    new: str
    old: str
    target: ast.Expr  # `new[indices]` or `new.field`
    value: ast.Expr


@record
class Kept:
    """What a `while`'s iterations keep for its backward sweep (instead of computing it again): the
    records of the body's forward sweep, the names the body left its variables in, the names it
    defines or assigns, and the tape of their values (`tape`), pushed at the end of each iteration by
    the statement `push` (its value, `tape` itself until the backward sweep knows what it reads)."""

    records: list[Record]
    env: dict[str, str]
    written: set[str]
    tape: str
    push: ast.Assign
    lets: list[ast.Let]  # the body's `let name = value`s, in order
    assigned: set[str]  # the names the body assigns (`x = ...`, `x[i] = ...`)

    def split(self, reads: set[str], exits: dict[str, str], is_view) -> tuple[list[str], list[str], list[ast.Let]]:
        """Of the names the backward sweep `reads`: those the iteration keeps on the tape; those that are
        the values the loop's variables had after it (`exits`: name -> variable), still in the variables
        when its backward starts; and the `let`s of views that make the others again (`kept_or_made`)."""
        afters = {v for v in reads & self.written if v in exits and v not in self.assigned}
        needed, written = reads & self.written - afters, self.written - afters
        values, views = kept_or_made(self.lets, needed, written, self.assigned, is_view)
        return values, sorted(afters), views


@record
class Compound:
    """An `if` or `while` that assigns variables declared outside it."""

    stmt: ast.If | ast.While
    env: dict[str, str]  # user name -> generated name, when it started
    carried: list[str]  # the generated names it assigns (in place)
    saved: str  # the name holding their values before (an `if`) or the tape of them (a `while`)
    kept: Kept | None = None  # a `while` whose iterations keep what their backward reads
    body: int | None = None  # which check's types the body it is in was read with (`ForwardSweep.reading`)


@record
class Stepped:
    """The records of one item's block of a loop over a tuple written out (`Lowering.unrolled`): their nodes
    are read with the types of that item's step (`steps`, as `NodeTypes.steps`), in the backward sweep too."""

    steps: tuple[tuple[int, int], ...]
    records: list[Record]


Record = Op | Store | Compound | Stepped


@record
class Sweep:
    """What one block's emission produces: its statements and what its backward needs."""

    stmts: list[ast.Stmt] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)


def kept_or_made(
    lets: list[ast.Let], needed: set[str], written: set[str], assigned: set[str], is_view: Callable[[ast.Expr], bool]
) -> tuple[list[str], list[ast.Let]]:
    """Which of the `needed` values of a forward sweep (a loop's iteration, a split function's body) its
    backward sweep takes from what the forward kept, and the `let`s (of `lets`, in order) that make the
    others again from those and from names the forward did not change: constants and views (`m.w`,
    `x[t]`, `items[0]`), cheaper to take again than to keep. `written`: the names the forward defined
    or assigned; `assigned`: those of them assigned after their definition."""
    views: list[ast.Let] = []
    for stmt in reversed(lets):
        local = stmt.pattern.name
        if local not in needed or local in assigned:
            continue
        operands = ast.free_names(stmt.value)
        if is_view(stmt.value) and not operands & assigned:
            views.insert(0, dataclasses.replace(stmt, annotation=None))  # a type written with `g`'s dims
            needed = (needed - {local}) | (operands & written)
    return sorted(needed), views
