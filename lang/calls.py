"""How a call's arguments bind to its target's parameters: the one binding of DL.

`bind(signature, ...)` binds a call of a primitive (lang/primitives.py `Signature`), `bind_function(params,
...)` a call of a DL function; both give a `Binding` saying where each parameter's value comes from (a
position among the call's arguments, a keyword, or the default), or raise `BindingError` saying why not.
The checker binds every call of a primitive or of a declared function once and records the binding
(`Typed.bindings`, by the call); the backends and autodiff read that record, and bind here only calls
the checker cannot see (a call through a function value, code they generate themselves).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from dl.lang import ast
from dl.lang.diagnostics import Diagnostic, closest, error
from dl.lang.primitives import Primitive, Signature
from dl.lang.record import record

V = TypeVar("V")


@record(frozen=True, slots=True)
class Binding:
    """Where each parameter's value comes from: an index into the call's
    positional arguments, a keyword name, or the default."""

    fixed: tuple[int | str | None, ...]  # per positional/optional parameter
    variadic: tuple[int, ...]
    keywords: tuple[str | None, ...]  # per keyword-only parameter: the keyword used, or None for default


class BindingError(Exception):
    """Why a call does not bind: its message, the keyword at fault (its span is the one to point at), a
    suggestion for it, and the diagnostic's code (E0206 for a primitive; E0204 for a count of arguments, E0205
    for a keyword, of a DL function)."""

    def __init__(
        self,
        message: str,
        keyword: str | None = None,
        suggestion: str | None = None,
        code: str = "E0206",
        notes: tuple[str, ...] = (),
    ):
        super().__init__(message)
        self.keyword = keyword
        self.suggestion = suggestion
        self.code = code
        self.notes = notes


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


def binding_diagnostic(
    problem: BindingError, expr: ast.Call, primitive: str | None = None, notes: tuple[str, ...] = ()
) -> Diagnostic:
    """The error of a call that does not bind, at the keyword at fault or else at the call; a call of the
    primitive or transform named `primitive` says so ("in call to `sum`: ..."). `notes`: help of its own."""
    span = next((k.span for k in expr.keywords if k.name == problem.keyword), expr.span)
    notes = notes or ((f"help: did you mean `{problem.suggestion}`?",) if problem.suggestion else problem.notes)
    message = f"in call to `{primitive}`: {problem}" if primitive is not None else str(problem)
    return error(problem.code, message, span, notes=notes)


def bind_function(
    name: str, params: tuple[ast.Param, ...], positional_count: int, keyword_names: list[str], declared: object
) -> Binding:
    """Bind a call of the DL function `name` (its `params`, declared at `declared`): positionals first, then
    keywords by name, then defaults. Raises `BindingError` (E0204 or E0205)."""
    names = [p.name for p in params]
    if positional_count > len(names):
        shown = f"{len(names)} argument{'s' * (len(names) != 1)}"
        notes = (f"`{name}` is declared at {declared}",)
        raise BindingError(f"`{name}` takes {shown}, found {positional_count}", code="E0204", notes=notes)
    for keyword in keyword_names:
        if keyword not in names:
            raise BindingError(f"`{name}` has no parameter `{keyword}`", keyword, closest(keyword, names), "E0205")
        if names.index(keyword) < positional_count:
            raise BindingError(f"argument `{keyword}` is given twice", keyword, code="E0205")
    fixed: list[int | str | None] = list(range(positional_count))
    for param in params[positional_count:]:
        if param.name in keyword_names:
            fixed.append(param.name)
        elif param.default is not None:
            fixed.append(None)
        else:
            raise BindingError(f"missing argument `{param.name}` in call to `{name}`", code="E0204")
    return Binding(tuple(fixed), (), ())


ONE_TUPLE = frozenset({"dims", "axes"})  # variadic parameters a tuple may give all at once: `zeros(shape(x))`


def takes_one_tuple(primitive: Primitive, binding: Binding) -> bool:
    """Whether this call gives `primitive` its dimensions (or axes) as one argument, which may be a tuple of them
    (`zeros(shape(x))`, `reshape(y, (B, -1))`, as torch and numpy take a shape) or one integer (`zeros(3)`)."""
    variadic = primitive.signature.variadic
    return variadic is not None and variadic[0] in ONE_TUPLE and len(binding.variadic) == 1


def arranged(
    primitive: Primitive, binding: Binding, positional: Sequence[V], keywords: Mapping[str, V], default: Callable
) -> list:
    """A primitive call's arguments in the order its implementations take them (`Primitive.parameters`): each
    parameter's argument, or `default(value)` of its signature's default; the variadic tail as one tuple (a tuple
    given as the one argument of dimensions or axes, `zeros(shape(x))`, is that tail: `takes_one_tuple`)."""
    signature = primitive.signature
    defaults = [*(None for _ in signature.positional), *(value for _, value in signature.optional)]
    values = [
        pick(source, positional, keywords, default, value)
        for source, value in zip(binding.fixed, defaults, strict=True)
    ]
    if takes_one_tuple(primitive, binding) and isinstance(positional[binding.variadic[0]], tuple):
        values.append(positional[binding.variadic[0]])
    elif signature.variadic is not None:
        values.append(tuple(positional[i] for i in binding.variadic))
    for source, (_, value) in zip(binding.keywords, signature.keywords, strict=True):
        values.append(pick(source, positional, keywords, default, value))
    return values


def pick(source: int | str | None, positional: Sequence[V], keywords: Mapping[str, V], default: Callable, value):
    if isinstance(source, int):
        return positional[source]
    if isinstance(source, str):
        return keywords[source]
    return default(value)
