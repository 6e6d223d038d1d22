"""Records: the classes `dataclasses.dataclass` makes, built without its cost at import.

`@record(frozen=True, slots=True)` makes the class `@dataclass(frozen=True, slots=True)` makes: the
same `__init__` (positional or keyword, defaults, `field(default_factory=...)`), `__repr__`,
`__eq__` and `__hash__` over the fields that compare, `__match_args__`, frozen assignment raising
`dataclasses.FrozenInstanceError`, and the standard `__dataclass_fields__`, so `dataclasses.fields`,
`dataclasses.replace` and `dataclasses.is_dataclass` work on it. A method the class writes itself
is kept, as dataclass keeps it.

Why not dataclass itself: it writes each method as source text and compiles it with `exec`, about
0.5 ms a class on CPython 3.11, and DL defines a hundred such classes before it can run
`hello.dl` (half of the start-up time over numpy's import; bench/README.md, "Start-up"). Here the
methods are closures over the field names, made in microseconds; a node's construction costs
about what the generated code costs (tests/test_record.py compares the two classes' behaviour).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeVar

T = TypeVar("T", bound=type)
MISSING = dataclasses.MISSING


def record(
    cls: T | None = None, /, *, frozen: bool = False, slots: bool = False, eq: bool = True
) -> T | Callable[[T], T]:
    """Make `cls` a record (a dataclass), as `@dataclass(frozen=..., slots=..., eq=...)` would."""

    def wrap(cls: T) -> T:
        return build(cls, frozen=frozen, slots=slots, eq=eq)

    return wrap if cls is None else wrap(cls)


def own_fields(cls: type) -> list[dataclasses.Field]:
    """The fields `cls`'s body declares, in order, each a `dataclasses.Field` as dataclass makes it."""
    made = []
    for name, annotation in inspect.get_annotations(cls).items():
        default = cls.__dict__.get(name, MISSING)
        spec = default if isinstance(default, dataclasses.Field) else dataclasses.field(default=default)
        spec.name, spec.type, spec.kw_only = name, annotation, False
        spec._field_type = dataclasses._FIELD  # what dataclasses.fields() and replace() look for
        made.append(spec)
    return made


def build(cls: T, *, frozen: bool, slots: bool, eq: bool) -> T:
    inherited = {}
    for base in reversed(cls.__mro__[1:]):
        inherited.update(getattr(base, "__dataclass_fields__", {}))
    own = own_fields(cls)
    fields = {**inherited, **{spec.name: spec for spec in own}}
    if slots:
        namespace = {key: value for key, value in cls.__dict__.items() if key not in fields}
        namespace.pop("__dict__", None)
        namespace.pop("__weakref__", None)
        namespace["__slots__"] = tuple(spec.name for spec in own)
        namespace["__qualname__"] = cls.__qualname__
        cls = type(cls)(cls.__name__, cls.__bases__, namespace)
    else:
        for spec in own:
            if spec.name in cls.__dict__:
                if spec.default is MISSING:
                    delattr(cls, spec.name)
                else:
                    setattr(cls, spec.name, spec.default)
    methods = {
        "__dataclass_fields__": fields,
        "__init__": initializer(cls, list(fields.values())),
        "__repr__": representation([spec.name for spec in fields.values() if spec.repr]),
        "__match_args__": tuple(spec.name for spec in fields.values() if spec.init),
    }
    compared = [spec.name for spec in fields.values() if spec.compare]
    if eq:
        key = tuple_of(compared)
        methods["__eq__"] = equality(key)
        own_hash = cls.__dict__.get("__hash__", MISSING)
        if own_hash is MISSING or (own_hash is None and "__eq__" in cls.__dict__):
            # dataclass's rule: an eq class is hashable when frozen, and unhashable when mutable
            cls.__hash__ = (lambda self: hash(key(self))) if frozen else None
    if frozen:
        methods["__setattr__"], methods["__delattr__"] = frozen_guards(cls, set(fields))
        if slots:
            methods["__getstate__"], methods["__setstate__"] = slot_state(list(fields))
    for name, method in methods.items():
        if name not in cls.__dict__:
            if callable(method):
                method.__qualname__ = f"{cls.__qualname__}.{name}"
            setattr(cls, name, method)
    return cls


def tuple_of(names: list[str]) -> Callable[[Any], tuple]:
    """The values of `names` as a tuple (as dataclass compares and hashes them: a tuple's comparison takes an
    object as equal to itself, a nan included)."""
    if len(names) > 1:
        return attrgetter(*names)
    if names:
        get = attrgetter(names[0])
        return lambda self: (get(self),)
    return lambda _: ()


def initializer(cls: type, fields: list[dataclasses.Field]) -> Callable[..., None]:
    names = tuple(spec.name for spec in fields)
    count = len(names)
    put = object.__setattr__
    after = getattr(cls, "__post_init__", None)
    # the values of the trailing fields that have plain defaults, for a call that leaves them out
    defaults = []
    for spec in reversed(fields):
        if spec.default is MISSING:
            break
        defaults.insert(0, spec.default)
    least, defaults = count - len(defaults), tuple(defaults)

    def bind(args: tuple, kwargs: dict[str, Any]) -> tuple:
        if len(args) > count:
            raise TypeError(f"{cls.__name__}() takes {count} positional arguments but {len(args)} were given")
        values = list(args)
        for spec in fields[len(args) :]:
            if spec.name in kwargs:
                values.append(kwargs.pop(spec.name))
            elif spec.default is not MISSING:
                values.append(spec.default)
            elif spec.default_factory is not MISSING:
                values.append(spec.default_factory())
            else:
                raise TypeError(f"{cls.__name__}() missing required argument: {spec.name!r}")
        if kwargs:
            (name, *_) = kwargs
            given = "multiple values for" if name in names else "an unexpected keyword"
            raise TypeError(f"{cls.__name__}() got {given} argument {name!r}")
        return tuple(values)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if kwargs:
            try:  # every field by keyword, as dataclasses.replace calls it
                whole = not args and len(kwargs) == count
                args = tuple(map(kwargs.__getitem__, names)) if whole else bind(args, kwargs)
            except KeyError:
                args = bind(args, kwargs)
        elif len(args) != count:
            args = args + defaults[len(args) - least :] if least <= len(args) < count else bind(args, kwargs)
        for name, value in zip(names, args, strict=False):
            put(self, name, value)
        if after is not None:
            after(self)

    return __init__


def representation(names: list[str]) -> Callable[[Any], str]:
    def __repr__(self: Any) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{type(self).__qualname__}({shown})"

    return __repr__


def equality(key: Callable[[Any], Any]) -> Callable[[Any, Any], Any]:
    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return key(self) == key(other)
        return NotImplemented

    return __eq__


def frozen_guards(cls: type, names: set[str]) -> tuple[Callable[..., None], Callable[..., None]]:
    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return __setattr__, __delattr__


def slot_state(names: list[str]) -> tuple[Callable[[Any], list], Callable[[Any, list], None]]:
    """What copy.copy needs of a frozen slotted record (its state set without the frozen guard)."""

    def __getstate__(self: Any) -> list:
        return [getattr(self, name) for name in names]

    def __setstate__(self: Any, state: list) -> None:
        for name, value in zip(names, state, strict=True):
            object.__setattr__(self, name, value)

    return __getstate__, __setstate__
