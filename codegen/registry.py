"""The specialisations one compiled call needs: `specialise(typed, decl, path, layout, structs)`.

A function compiled for one argument layout (codegen/specialize.py) inlines the DL functions it calls;
a recursive call (or one nested too deep) is instead a real call of another specialisation, keyed by
(function, argument layout). The `Registry` lowers each once, learns the result of a function whose
recursive call comes before any `return` by a probe, and gives them as one set compiled into one module.
"""

from __future__ import annotations

import dataclasses

from dl.codegen import ir
from dl.codegen.lower import Unsupported
from dl.codegen.specialize import Specialiser
from dl.codegen.values import ResultUnknown, Specialised
from dl.lang import ast
from dl.lang.check import Typed
from dl.lang.diagnostics import Span
from dl.lang.record import record

MAX_SPECIALISATIONS = 32  # of the functions one compiled call needs (itself and what it calls for real)


def specialise(typed: Typed, decl: ast.FnDecl, path: str, layout: tuple, structs) -> Specialised:
    """`decl` lowered for the argument `layout`, with every specialisation its recursive calls need."""
    registry = Registry(typed, structs)
    return registry.finished(registry.lower(decl, path, layout, decl.span))


@record
class Entry:
    """One specialisation of a `Registry`: its symbol, its lowering, and the result once lowered."""

    symbol: str
    lowering: Specialiser
    done: Specialised | None = None

    def signature(self, span: Span) -> tuple[tuple, int]:
        """(the result layout, the number of slots) a caller needs; known while the function is still being
        lowered (a recursive call) once its first `return` has been."""
        if self.done is not None:
            return self.done.result, self.done.slots
        lowering = self.lowering
        if lowering.result_layout is None:
            lowering.result_layout = lowering.predicted_result(span, self)
        return lowering.result_layout, lowering.slot_count


class Registry:
    """The specialisations one compiled call needs, keyed by (function, argument layout): the function
    called from the interpreter, then each one a recursive (or too deeply nested) call calls for real
    (`ir.CallSpecialised`) instead of inlining it. They are compiled into one module; each then allocates
    its own workspace per call, as recursive calls are active at once."""

    def __init__(self, typed: Typed, structs) -> None:
        self.typed, self.structs = typed, structs
        self.entries: dict[tuple, Entry] = {}
        self.made = 0
        self.calls = False  # whether any function calls another (or itself) for real

    def lower(self, decl: ast.FnDecl, path: str, layout: tuple, span: Span) -> Entry:
        key = (id(decl), layout)
        if key in self.entries:
            return self.entries[key]
        if len(self.entries) >= MAX_SPECIALISATIONS:
            raise Unsupported(
                f"its recursion needs more than {MAX_SPECIALISATIONS} specialisations (argument layouts), "
                f"the last of `{decl.name}`",
                span,
            )
        symbol = f"{path}::{decl.name}.specialised" + (f".{self.made}" if self.made else "")
        self.made += 1
        entry = Entry(symbol, Specialiser(self.typed, decl, path, list(layout), self.structs, self))
        self.entries[key] = entry
        try:
            try:
                entry.done = entry.lowering.specialise(symbol)
            except ResultUnknown as unknown:
                if unknown.entry is not entry:
                    raise
                self.forget_after(key)
                entry.done = self.lowered_with_result(entry, decl, path, layout, symbol)
        except BaseException:  # it, and whatever was lowered for it (which may call it), are gone
            self.forget_after(key)
            del self.entries[key]
            raise
        return entry

    def lowered_with_result(self, entry: Entry, decl: ast.FnDecl, path: str, layout: tuple, symbol: str):
        """Lower a function whose recursive call comes before any `return` (`_back` functions): first a probe
        that does not follow the paths through that call finds what the others return, then the function,
        its result laid out so before it starts (a `return` of anything else refuses it)."""
        probe = Specialiser(self.typed, decl, path, list(layout), self.structs, self)
        probe.probing = entry
        entry.lowering = probe
        key = (id(decl), layout)
        try:
            probe.specialise(symbol)
        finally:
            self.forget_after(key)
        if probe.result_layout is None:
            raise Unsupported(f"`{decl.name}` never returns but through its recursive call")
        entry.lowering = Specialiser(self.typed, decl, path, list(layout), self.structs, self)
        entry.lowering.expected_result = probe.result_layout
        return entry.lowering.specialise(symbol)

    def forget_after(self, key: tuple) -> None:
        """Drop the specialisations lowered after `key`'s (for it: they may call it)."""
        keys = list(self.entries)
        for later in keys[keys.index(key) + 1 :]:
            del self.entries[later]

    def finished(self, root: Entry) -> Specialised:
        done = root.done
        if not self.calls:
            return done
        functions = []
        for entry in self.entries.values():
            function = entry.done.function
            site = ir.Site("E0513", "out of memory for the tensors of a recursive call", entry.lowering.decl.span)
            sites = (*function.sites, site)
            own = (entry.done.workspace, len(sites) - 1)
            functions.append(dataclasses.replace(function, sites=sites, own_workspace=own))
        return Specialised(functions[0], done.argument_slots, done.result, 0, done.slots, tuple(functions[1:]))
