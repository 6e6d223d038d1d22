"""lang/record.py: a `@record` class behaves as the `@dataclass` class with the same options, which the
tests build side by side: construction, defaults and factories, repr, equality and hashing over the fields
that compare, pattern matching, frozen assignment, copies, dataclasses.fields/replace/is_dataclass, the
methods a class writes itself, and inheritance."""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field

import pytest
from dl.lang.record import record


def both(**options):
    """The same class body made by `dataclass` and by `record`, with these options."""

    def make(decorate):
        @decorate(**options)
        class Binary:
            op: str
            lhs: object
            rhs: object = 0
            notes: list = field(default_factory=list, compare=False)
            span: str = field(default="<unknown>", compare=False, repr=False)

            def swapped(self) -> Binary:
                return dataclasses.replace(self, lhs=self.rhs, rhs=self.lhs)

        return Binary

    return make(dataclass), make(record)


FROZEN = {"frozen": True, "slots": True}
VARIANTS = [FROZEN, {"frozen": True}, {}, {"slots": True}, {"frozen": True, "eq": False}]


@pytest.mark.parametrize("options", VARIANTS, ids=str)
def test_construction_repr_and_fields_match_dataclass(options) -> None:
    standard, ours = both(**options)
    for args, kwargs in [
        (("+", 1, 2), {}),
        (("+", 1), {}),
        (("+",), {"lhs": 3}),
        ((), {"op": "-", "lhs": 1, "rhs": 2}),
    ]:
        a, b = standard(*args, **kwargs), ours(*args, **kwargs)
        assert repr(a) == repr(b)
        assert [(f.name, f.compare, f.repr) for f in dataclasses.fields(a)] == [
            (f.name, f.compare, f.repr) for f in dataclasses.fields(b)
        ]
        assert dataclasses.asdict(a) == dataclasses.asdict(b)
    assert dataclasses.is_dataclass(ours) and dataclasses.is_dataclass(ours("+", 1))
    assert ours("+", 1).notes is not ours("+", 1).notes  # a fresh list from the factory each time
    assert ours.__match_args__ == standard.__match_args__ == ("op", "lhs", "rhs", "notes", "span")


@pytest.mark.parametrize("options", VARIANTS, ids=str)
def test_wrong_arguments_raise_type_errors(options) -> None:
    _, ours = both(**options)
    for args, kwargs in [
        ((), {}),
        (("+", 1, 2, [], "s", "extra"), {}),
        (("+",), {"op": "-", "lhs": 1}),
        (("+", 1), {"size": 2}),
    ]:
        with pytest.raises(TypeError):
            ours(*args, **kwargs)
    with pytest.raises(TypeError, match="missing required argument: 'lhs'"):
        ours(op="+", rhs=1, notes=[], span="")  # as many keywords as fields, one of them not a field


@pytest.mark.parametrize("options", VARIANTS, ids=str)
def test_equality_and_hashing_follow_dataclass(options) -> None:
    standard, ours = both(**options)
    for make in (standard, ours):
        a, b, c = make("+", 1, 2, ["x"], "here"), make("+", 1, 2, [], "there"), make("-", 1, 2)
        if options.get("eq", True):
            assert a == b and a != c  # notes and span do not compare
        else:
            assert a != b and a == a  # compared by identity
        assert a != ("+", 1, 2) and a.__eq__(object()) is NotImplemented if options.get("eq", True) else True
    for a, b in [(standard("+", 1), ours("+", 1))]:
        hashable = type(a).__hash__ is not None
        assert (type(b).__hash__ is not None) == hashable
        if hashable and options.get("eq", True):
            assert hash(b) == hash(ours("+", 1, 0, ["other"], "elsewhere"))
    assert standard("+", 1) != ours("+", 1)  # different classes never compare equal


def test_frozen_records_refuse_assignment_and_copy_cleanly() -> None:
    _, ours = both(**FROZEN)
    node = ours("+", 1, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        node.op = "-"
    with pytest.raises(dataclasses.FrozenInstanceError):
        del node.lhs
    with pytest.raises((AttributeError, TypeError)):
        node.extra = 1  # slotted: no room for another attribute
    for copied in (copy.copy(node), copy.deepcopy(node)):
        assert copied == node and copied is not node
    assert not hasattr(node, "__dict__") and ours.__slots__ == ("op", "lhs", "rhs", "notes", "span")
    assert dataclasses.replace(node, op="*") == ours("*", 1, 2) and node.swapped() == ours("+", 2, 1)


def test_a_mutable_record_assigns_and_is_unhashable() -> None:
    _, ours = both()
    node = ours("+", 1)
    node.lhs = 5
    assert node == ours("+", 5) and ours.__hash__ is None and ours.rhs == 0  # the default stays on the class


def test_pattern_matching_uses_the_fields_in_order() -> None:
    _, ours = both(**FROZEN)
    match ours("+", 1, 2):
        case ours(op, lhs, rhs):
            assert (op, lhs, rhs) == ("+", 1, 2)
        case _:
            pytest.fail("no match")


def test_methods_the_class_writes_are_kept() -> None:
    @record(frozen=True, slots=True)
    class Named:
        name: str

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Named) and self.name.lower() == other.name.lower()

        def __hash__(self) -> int:
            return hash(self.name.lower())

        def __repr__(self) -> str:
            return f"<{self.name}>"

    assert Named("A") == Named("a") and hash(Named("A")) == hash(Named("a")) and repr(Named("A")) == "<A>"

    @record(frozen=True)
    class OnlyEq:
        value: int

        def __eq__(self, other: object) -> bool:
            return isinstance(other, OnlyEq) and self.value % 10 == other.value % 10

    # as dataclass does: an __eq__ written without a __hash__ still gets the generated hash when frozen
    assert OnlyEq(1) == OnlyEq(11) and hash(OnlyEq(1)) != hash(OnlyEq(11))


def test_a_subclass_record_has_its_bases_fields_first() -> None:
    @record(frozen=True, slots=True)
    class Base:
        a: int
        b: int = 2

    @record(frozen=True, slots=True)
    class Derived(Base):
        c: int = 3

    node = Derived(1)
    assert (node.a, node.b, node.c) == (1, 2, 3) and [f.name for f in dataclasses.fields(node)] == ["a", "b", "c"]
    assert Derived(1, 5, 6) == Derived(a=1, b=5, c=6) != Base(1, 5) and isinstance(node, Base)
    assert dataclasses.replace(node, c=9).c == 9


def test_a_single_compared_field_compares_as_a_tuple() -> None:
    """As dataclass compares `(self.value,)`: a record holding a nan equals itself, and hashes as dataclass's."""

    @record(frozen=True, slots=True)
    class Constant:
        value: float

    @dataclass(frozen=True, slots=True)
    class Standard:
        value: float

    nan = float("nan")
    assert Constant(nan) == Constant(nan) and Standard(nan) == Standard(nan)  # the same nan object
    assert hash(Constant(1.5)) == hash(Standard(1.5)) and Constant(1.5) != Constant(2.5)


def test_a_positional_argument_beside_every_field_by_keyword_is_refused() -> None:
    _, ours = both(**FROZEN)
    with pytest.raises(TypeError, match="multiple values"):
        ours("+", op="-", lhs=1, rhs=2, notes=[], span="")
