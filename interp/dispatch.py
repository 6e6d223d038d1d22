"""Calling a primitive: the step a compiled call site runs, and calls through a primitive value.

`primitive_step(prim, arguments, span)` builds, once per call site, the closure
that runs a call of `prim`. Constant arguments (literals, defaults, dtype names)
are bound then, and checked then; at run time the step only computes the other
arguments, checks that each parameter its record lists in `tensors` got a number
or a tensor, and calls the numpy implementation. Every failure inside the
implementation, a `PrimitiveError` or any numpy exception, becomes one E0513
diagnostic (E0502 for `assert`, E0521 for a checkpoint that cannot be saved or
loaded, E0522 and E0523 for a data-parallel call that does not fit the world)
that names the primitive once, at the call's span, with the DL call stack. The
step's shape is picked for the call site's arity so that the common calls
(`exp(x)`, `maximum(a, b)`, `sum(x)` with its default keywords) cost one Python
call beyond numpy's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from dl.interp.checkpoints import CheckpointError
from dl.interp.primitives import (
    IMPLEMENTATIONS,
    LITERAL_ADAPTING,
    NUMBERS,
    SPECIALISED,
    adapting_offset,
    check_tensor_arguments,
    is_number_or_tensor,
    tensor_argument_problem,
    tensor_positions,
)
from dl.lang.calls import BindingError, arranged, bind
from dl.lang.diagnostics import UNKNOWN_SPAN, Span
from dl.lang.primitives import PRIMITIVES, Prim
from dl.lang.record import record
from dl.runtime.errors import AssertionFailure, PrimitiveError, RunError, fail, failure_message
from dl.runtime.metrics import MetricsError
from dl.runtime.values import DEVICE_ARRAYS
from dl.runtime.world import WorldError

Step = Callable[[list], Any]
ndarray = np.ndarray
# What a primitive's implementation may raise for a user's mistake: its own errors, and numpy's.
FAILURES = (
    PrimitiveError,
    CheckpointError,
    MetricsError,
    WorldError,
    ValueError,
    TypeError,
    IndexError,
    ArithmeticError,
    MemoryError,
)


@record(frozen=True, slots=True)
class Argument:
    """One argument of a primitive call site: a step computing it, or a constant.

    `slot` is set when the argument is a local variable (the step then only reads that
    slot, and the call reads it inline). `literal` is the Python value of an unsuffixed
    number literal (which adapts to the other operand of `maximum`, `minimum`, `where`
    and `matmul`, as it does for an operator)."""

    step: Step | None = None
    value: Any = None
    literal: int | float | None = None
    slot: int | None = None

    @property
    def constant(self) -> bool:
        return self.step is None


def not_device(value: Any) -> bool:
    """Not an array of a device module (asked after numpy's arrays and numbers, so the common case costs no call)."""
    return value.__class__ not in DEVICE_ARRAYS


@record(frozen=True)
class Table:
    """What a program's primitive calls run: `IMPLEMENTATIONS` by `Prim`, with the variants for literal operands
    (`LITERAL_ADAPTING`) and for calls with default keywords (`SPECIALISED`). The interpreter's own is `NUMPY`;
    interp/device.py makes the table of a device array module."""

    implementations: dict[Prim, Callable]
    literal_adapting: dict[Prim, Callable]
    specialised: dict[Prim, tuple[tuple, Callable]]


NUMPY = Table(IMPLEMENTATIONS, LITERAL_ADAPTING, SPECIALISED)


def failure(prim: Prim, problem: Exception, span: Span) -> RunError:
    if isinstance(problem, AssertionFailure):
        return fail("E0502", str(problem), span)
    if isinstance(problem, CheckpointError):
        return fail("E0521", failure_message(prim, problem), span)
    if isinstance(problem, WorldError):
        return fail(problem.code, failure_message(prim, problem), span)
    return fail("E0513", failure_message(prim, problem), span)


def primitive_step(prim: Prim, arguments: list[Argument], span: Span, table: Table = NUMPY) -> Step:
    """The step running one call site of `prim` with these arguments, with the implementations of `table`."""
    implementation, arguments = adapted(prim, arguments, table)
    positions = tensor_positions(prim)
    for position in positions:
        argument = arguments[position]
        if argument.constant and not is_number_or_tensor(argument.value):
            problem = tensor_argument_problem(prim, position, argument.value)
            return failing_step(prim, problem, span)
    steps = [argument.step for argument in arguments]
    checked = [position in positions and argument.step is not None for position, argument in enumerate(arguments)]
    dynamic = [position for position, step in enumerate(steps) if step is not None]
    constants = [argument.value for argument in arguments]
    slots = [argument.slot for argument in arguments]
    special = table.specialised.get(prim)
    if dynamic == [0] and special is not None and defaults_match(constants[1:], special[0]):
        implementation, constants = special[1], constants[:1]
    if dynamic == [0] and len(constants) <= 3:
        if slots[0] is not None:
            return first_in_slot(prim, implementation, slots[0], checked[0], constants[1:], span)
        return first_dynamic(prim, implementation, steps[0], checked[0], constants[1:], span)
    if len(dynamic) == len(arguments) == 2:
        if slots[0] is not None and slots[1] is not None:
            return two_in_slots(prim, implementation, slots, checked, span)
        return two_dynamic(prim, implementation, steps, checked, span)
    return any_arguments(prim, implementation, steps, constants, checked, span)


def defaults_match(constants: list, defaults: tuple) -> bool:
    """Whether these constant arguments are exactly the defaults (`is`: `false` is not `0`)."""
    return len(constants) == len(defaults) and all(c is d for c, d in zip(constants, defaults, strict=True))


def adapted(prim: Prim, arguments: list[Argument], table: Table) -> tuple[Callable, list[Argument]]:
    """The implementation for these arguments: the literal-adapting variant where operands are literals."""
    make = table.literal_adapting.get(prim)
    if make is None:
        return table.implementations[prim], arguments
    offset = adapting_offset(prim)
    operands = arguments[offset : offset + 2]
    weak = [argument.literal is not None for argument in operands]
    if not any(weak):
        return table.implementations[prim], arguments
    adapted_operands = [
        Argument(value=argument.literal) if argument.literal is not None else argument for argument in operands
    ]
    return make(*weak), [*arguments[:offset], *adapted_operands, *arguments[offset + 2 :]]


def failing_step(prim: Prim, problem: Exception, span: Span) -> Step:
    def run(frame: list) -> Any:
        raise failure(prim, problem, span)

    return run


def first_dynamic(prim: Prim, implementation, step: Step, checked: bool, constants: list, span: Span) -> Step:
    """A call whose only computed argument is the first: `exp(x)`, `sum(x)`, `softmax(x)`."""

    def rejected(x: Any) -> RunError:
        return failure(prim, tensor_argument_problem(prim, 0, x), span)

    if not constants:

        def run_one(frame: list) -> Any:
            x = step(frame)
            if checked and x.__class__ is not ndarray and x.__class__ not in NUMBERS and not_device(x):
                raise rejected(x)
            try:
                return implementation(x)
            except FAILURES as problem:
                raise failure(prim, problem, span) from None

        return run_one
    if len(constants) == 1:
        (first,) = constants

        def run_one_constant(frame: list) -> Any:
            x = step(frame)
            if checked and x.__class__ is not ndarray and x.__class__ not in NUMBERS and not_device(x):
                raise rejected(x)
            try:
                return implementation(x, first)
            except FAILURES as problem:
                raise failure(prim, problem, span) from None

        return run_one_constant
    first, second = constants

    def run_two_constants(frame: list) -> Any:
        x = step(frame)
        if checked and x.__class__ is not ndarray and x.__class__ not in NUMBERS and not_device(x):
            raise rejected(x)
        try:
            return implementation(x, first, second)
        except FAILURES as problem:
            raise failure(prim, problem, span) from None

    return run_two_constants


def first_in_slot(prim: Prim, implementation, slot: int, checked: bool, constants: list, span: Span) -> Step:
    """`first_dynamic` where the first argument is a local variable, read from its slot."""

    def rejected(x: Any) -> RunError:
        return failure(prim, tensor_argument_problem(prim, 0, x), span)

    if not constants:

        def run_one(frame: list) -> Any:
            x = frame[slot]
            if checked and x.__class__ is not ndarray and x.__class__ not in NUMBERS and not_device(x):
                raise rejected(x)
            try:
                return implementation(x)
            except FAILURES as problem:
                raise failure(prim, problem, span) from None

        return run_one
    if len(constants) == 1:
        (first,) = constants

        def run_one_constant(frame: list) -> Any:
            x = frame[slot]
            if checked and x.__class__ is not ndarray and x.__class__ not in NUMBERS and not_device(x):
                raise rejected(x)
            try:
                return implementation(x, first)
            except FAILURES as problem:
                raise failure(prim, problem, span) from None

        return run_one_constant
    first, second = constants

    def run_two_constants(frame: list) -> Any:
        x = frame[slot]
        if checked and x.__class__ is not ndarray and x.__class__ not in NUMBERS and not_device(x):
            raise rejected(x)
        try:
            return implementation(x, first, second)
        except FAILURES as problem:
            raise failure(prim, problem, span) from None

    return run_two_constants


def two_in_slots(prim: Prim, implementation, slots: list[int], checked: list[bool], span: Span) -> Step:
    """`two_dynamic` where both arguments are local variables."""
    slot_a, slot_b = slots
    check_a, check_b = checked

    def run_two(frame: list) -> Any:
        a = frame[slot_a]
        b = frame[slot_b]
        if check_a and a.__class__ is not ndarray and a.__class__ not in NUMBERS and not_device(a):
            raise failure(prim, tensor_argument_problem(prim, 0, a), span)
        if check_b and b.__class__ is not ndarray and b.__class__ not in NUMBERS and not_device(b):
            raise failure(prim, tensor_argument_problem(prim, 1, b), span)
        try:
            return implementation(a, b)
        except FAILURES as problem:
            raise failure(prim, problem, span) from None

    return run_two


def two_dynamic(prim: Prim, implementation, steps: list[Step], checked: list[bool], span: Span) -> Step:
    """A call of two computed arguments: `maximum(a, b)`, `matmul(a, b)`."""
    step_a, step_b = steps
    check_a, check_b = checked

    def run_two(frame: list) -> Any:
        a = step_a(frame)
        b = step_b(frame)
        if check_a and a.__class__ is not ndarray and a.__class__ not in NUMBERS and not_device(a):
            raise failure(prim, tensor_argument_problem(prim, 0, a), span)
        if check_b and b.__class__ is not ndarray and b.__class__ not in NUMBERS and not_device(b):
            raise failure(prim, tensor_argument_problem(prim, 1, b), span)
        try:
            return implementation(a, b)
        except FAILURES as problem:
            raise failure(prim, problem, span) from None

    return run_two


def any_arguments(
    prim: Prim, implementation, steps: list[Step | None], constants: list, checked: list[bool], span: Span
) -> Step:
    """Any other call: each argument computed or constant."""
    sources = list(zip(steps, constants, strict=True))
    checked_positions = [position for position, check in enumerate(checked) if check]

    def run(frame: list) -> Any:
        values = [constant if step is None else step(frame) for step, constant in sources]
        for position in checked_positions:
            value = values[position]
            if value.__class__ is not ndarray and value.__class__ not in NUMBERS and not_device(value):
                raise failure(prim, tensor_argument_problem(prim, position, value), span)
        try:
            return implementation(*values)
        except FAILURES as problem:
            raise failure(prim, problem, span) from None

    return run


# ---------------------------------------------------------------------- primitives as values


class Primitive:
    """A built-in used as a value (passed to or returned from a function)."""

    __slots__ = ("display", "name", "prim", "table")

    def __init__(self, prim: Prim, table: Table = NUMPY) -> None:
        self.prim = prim
        self.name = prim.value
        self.display = f"<fn {prim.value}>"
        self.table = table

    def __call__(self, *args: Any) -> Any:
        return call_primitive(self.prim, list(args), {}, UNKNOWN_SPAN, self.table)


def call_primitive(prim: Prim, args: list, keywords: dict, span: Span, table: Table = NUMPY) -> Any:
    """A call through a primitive value: bound, checked and run when it happens."""
    primitive = PRIMITIVES[prim]
    try:
        binding = bind(primitive.signature, len(args), list(keywords))
    except BindingError as problem:
        raise fail("E0503", f"in call to `{prim.value}`: {problem}", span) from None
    values = arranged(primitive, binding, args, keywords, lambda default: default)
    try:
        check_tensor_arguments(prim, values)
        return table.implementations[prim](*values)
    except FAILURES as problem:
        raise failure(prim, problem, span) from None
