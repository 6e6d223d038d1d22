"""Checking a document again after an edit: what `dl.lang.check(source, path)` gives, reusing the work done
for the declarations that did not change. The language server calls `analyse` after each edit.

The file is cut into pieces, each starting at a line that starts a declaration (`dl.lang.parse.pieces`),
and each piece is parsed on its own (`dl.lang.parse.recover` does the same for a file that does not
parse whole); a piece that does not parse gives its syntax error and declares nothing. A piece whose
text was a piece of the previous analysis is not parsed again: at the same line its declarations are
reused as they are, at another line they are moved (the same trees, their spans shifted). Only where the
first broken piece fails at its end (it may go on in the next: a lambda or local `fn` written at column
1) is the whole file parsed, as `recover` does.

A function's body is not checked again when its earlier check stands, that is when
- its piece has the same text as before, and had no diagnostic;
- its parameters are all annotated (its check does not depend on who calls it), it calls no function
  whose parameters are not (such a call checks that function for this caller's argument types), it
  holds no local function or lambda (the checker may check those again for another caller), and it is
  not one of functions that call each other where one infers its result (which of them the checker
  meets first decides what the others see of it);
- each module-level name its code mentions still means the same: the same parameters and declared
  result of a function (its whole text where the result is inferred from the body), the same struct,
  const or import, or still nothing; and the imported modules are unchanged.
Its signature is then given to the checker (`check(program, known=...)`), which checks everything else,
and its nodes keep their types from the previous analysis. The result has the diagnostics, signatures and
node types `dl.lang.check` gives for the new text (tests/test_incremental.py compares them on random
edits).
"""

from __future__ import annotations

import bisect
import dataclasses
import re
from collections.abc import Iterable, Iterator
from dataclasses import field
from types import MappingProxyType
from typing import Any

from dl.lang import ast, collecting_rarely, settle, unloaded
from dl.lang.calls import Binding
from dl.lang.check import CallCheck, RuntimeCheck, Signature, Typed, check
from dl.lang.diagnostics import Diagnostic, DiagnosticError, Span
from dl.lang.modules import Program, load_imports
from dl.lang.parse import DECLARED_NAME, parse, parse_piece, pieces, shifted
from dl.lang.record import record
from dl.lang.types import FunctionRef, GradientRef, TapeType, TupleType, Type

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MEMBER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\.\s*([A-Za-z_][A-Za-z0-9_]*)")
FN = re.compile(r"\bfn\b")
COMMENT_OR_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"|#[^\n]*')  # names in comments refer to nothing


@record(frozen=True, slots=True)
class Piece:
    """A run of lines of the file that starts where a declaration starts, parsed on its own."""

    first: int  # the 0-based line of the file where it starts
    text: str
    decls: tuple[ast.Decl, ...]  # none when it does not parse
    syntax: Diagnostic | None  # its syntax error, when it does not parse
    names: frozenset[str]  # every identifier its code holds (strings included): what it may refer to
    members: frozenset[tuple[str, str]]  # every `a.b` its code holds: the members of imports it may use
    functions: int  # how many times `fn` occurs in its code: more than once, it holds a lambda or a local `fn`


@record(frozen=True, slots=True)
class Reusable:
    """A function's check that can stand in for checking its body again: what it depended on (see
    `dependencies`), and the signature it found."""

    key: tuple
    signature: Signature


@record(frozen=True, slots=True)
class Analysis:
    """One analysis of a document: the checked result, and what the next analysis may reuse."""

    source: str
    path: str
    typed: Typed
    checked: frozenset[str]  # the functions of the document whose bodies this analysis checked
    pieces: tuple[Piece, ...] = ()
    reusable: dict[int, Reusable] = field(default_factory=dict)  # by id of the FnDecl
    imports: tuple = ()  # the imports and their texts: when they change, nothing is reused
    parsed: dict[str, tuple[str, ast.Module]] = field(default_factory=dict)  # the imported modules


def analyse(
    source: str, path: str, previous: Analysis | None = None, unsaved: dict[str, str] | None = None
) -> Analysis:
    """Check `source` (the text of `path`) as `dl.lang.check` does, reusing what `previous` (an analysis of
    an earlier text of the same file) found for the declarations that did not change; an import of a file
    in `unsaved` (by path) reads that text. Never raises for a mistake in `source`."""
    if previous is not None and previous.path != path:
        previous = None
    with collecting_rarely():
        parsed, moves = parse_pieces(source, path, previous)
        if continued(parsed):
            parsed, moves = whole(source, path, parsed), {}
        module = ast.Module(path, tuple(decl for piece in parsed for decl in piece.decls))
        syntax = [piece.syntax for piece in parsed if piece.syntax is not None]
        program = Program(entry=path, parsed=dict(previous.parsed) if previous else {}, unsaved=unsaved or {})
        program.sources.add(path, source)
        program.modules[path] = module
        try:
            load_imports(program, module, path)
        except DiagnosticError as failure:
            typed = unloaded(path, program.sources, syntax, failure)
            return Analysis(source, path, typed, frozenset(), tuple(parsed))
        return Reuse(program, parsed, moves, previous).run(source, syntax)


# ------------------------------------------------------------------ pieces


def parse_piece_at(text: str, first: int, path: str) -> Piece:
    decls, syntax = parse_piece(text, path, first)
    return piece_of(text, first, decls, syntax)


def piece_of(text: str, first: int, decls: tuple[ast.Decl, ...], syntax: Diagnostic | None) -> Piece:
    code = COMMENT_OR_STRING.sub(lambda found: found.group() if found.group().startswith('"') else "", text)
    functions = len(FN.findall(code))
    return Piece(
        first, text, decls, syntax, frozenset(IDENTIFIER.findall(code)), frozenset(MEMBER.findall(code)), functions
    )


def parse_pieces(source: str, path: str, previous: Analysis | None) -> tuple[list[Piece], dict[int, Move]]:
    """The pieces of `source`: those of `previous` with the same text reused (moved when their line
    changed), the others parsed. Also the moves, by id of each moved declaration."""
    earlier: dict[str, list[Piece]] = {}
    for piece in previous.pieces if previous else ():
        earlier.setdefault(piece.text, []).append(piece)
    found: list[Piece] = []
    moves: dict[int, Move] = {}
    for first, text in pieces(source):
        same = earlier.get(text)
        if not same:
            found.append(parse_piece_at(text, first, path))
            continue
        old = next((piece for piece in same if piece.first == first), same[0])
        same.remove(old)  # each earlier piece stands for one piece of the new text
        found.append(old if old.first == first else move_piece(old, first, moves))
    return found, moves


def continued(found: list[Piece]) -> bool:
    """Whether the first piece that does not parse fails at its end, so that the next may be the rest of its
    declaration (a lambda or a local `fn` written at column 1): then the whole file may parse, as
    `dl.lang.parse.recover` finds out first. A piece that fails before its end fails the whole file too,
    as the pieces before it parse."""
    broken = next((piece for piece in found if piece.syntax is not None), None)
    if broken is None:
        return False
    last_line = broken.first + len(broken.text.rstrip().split("\n"))
    return broken.syntax.code == "E0103" or broken.syntax.span.line >= last_line


def whole(source: str, path: str, found: list[Piece]) -> list[Piece]:
    """The file as one piece, when it parses whole; else `found`, its pieces."""
    try:
        decls = parse(source, path).decls
    except (DiagnosticError, RecursionError):
        return found
    return [piece_of(source, 0, decls, None)]


@record(frozen=True, slots=True)
class Move:
    """A declaration moved to other lines: the one it was, how many lines down, and each old node's new
    node (by id of the old)."""

    old: ast.Decl
    lines: int
    nodes: dict[int, Any]


def move_piece(piece: Piece, first: int, moves: dict[int, Move]) -> Piece:
    lines = first - piece.first
    decls = []
    for decl in piece.decls:
        nodes: dict[int, Any] = {}
        try:
            new = moved(decl, lines, nodes)
        except RecursionError:  # deeper than this walk goes: parse it again
            return parse_piece_at(piece.text, first, decl.span.path)
        moves[id(new)] = Move(decl, lines, nodes)
        decls.append(new)
    syntax = shifted(piece.syntax, lines) if piece.syntax is not None else None
    return dataclasses.replace(piece, first=first, decls=tuple(decls), syntax=syntax)


# the fields of each kind of node, in order (the spans too)
FIELDS = {
    kind: tuple(item.name for item in dataclasses.fields(kind))
    for kind in vars(ast).values()
    if isinstance(kind, type) and dataclasses.is_dataclass(kind)
}


def moved(node: Any, lines: int, nodes: dict[int, Any]) -> Any:
    """`node` with every span of its file `lines` lines further down; `nodes` gets each new node by the id
    of the old one."""
    values = []
    for name in FIELDS[type(node)]:
        value = getattr(node, name)
        kind = type(value)
        if kind is Span:
            value = moved_span(value, lines)
        elif kind is tuple:
            value = tuple(moved(item, lines, nodes) if type(item) in FIELDS else item for item in value)
        elif kind in FIELDS:
            value = moved(value, lines, nodes)
        values.append(value)
    new = type(node)(*values)
    nodes[id(node)] = new
    return new


def moved_span(span: Span, lines: int) -> Span:
    if span.line <= 0:
        return span
    return Span(span.path, span.line + lines, span.column, span.end_line + lines, span.end_column)


def subtree(node: Any) -> Iterator[Any]:
    """`node` and every node inside it."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        for name in FIELDS[type(current)]:
            value = getattr(current, name)
            if type(value) is tuple:
                stack.extend(item for item in value if type(item) in FIELDS)
            elif type(value) in FIELDS:
                stack.append(value)


# ------------------------------------------------------------------ reuse


class Reuse:
    """One analysis: which functions' checks stand, the check of the rest, and the tables put together."""

    def __init__(self, program: Program, pieces: list[Piece], moves: dict[int, Move], previous: Analysis | None):
        self.program, self.pieces, self.moves = program, pieces, moves
        self.path = program.entry
        self.module = program.modules[self.path]
        imported = [p for p in program.modules if p != self.path]
        self.imports = (tuple(program.imports[self.path]), tuple((p, program.sources.texts[p]) for p in imported))
        self.previous = previous if previous is not None and previous.imports == self.imports else None
        self.piece_of = {id(decl): piece for piece in pieces for decl in piece.decls}
        self.declared: dict[str, list[ast.Decl]] = {}
        for decl in self.module.decls:
            if isinstance(decl, ast.FnDecl | ast.StructDecl | ast.Const):
                self.declared.setdefault(decl.name, []).append(decl)
        self.aliases = dict(program.imports[self.path])
        self.broken = {name.group(1) for piece in pieces if piece.syntax and (name := DECLARED_NAME.match(piece.text))}
        self.module_level = self.declared.keys() | self.aliases.keys() | self.broken
        self.function_keys = self.renamed_functions() if self.previous is not None else {}
        self.generic_functions = self.generic_by_name()
        self.meanings: dict[str, object] = {}
        self.in_progress: set[str] = set()
        self.cycles = 0  # how many times a meaning met a function whose meaning was being found

    def run(self, source: str, syntax: list[Diagnostic]) -> Analysis:
        keys = {id(decl): self.dependencies(decl) for decl in self.candidates()}
        known = self.known(keys)
        typed = check(self.program, known=known)
        if self.previous is not None:
            typed = self.merged(typed, known)
        typed = settle(typed, syntax, frozenset(self.broken))
        functions = [decl for decl in self.module.decls if isinstance(decl, ast.FnDecl)]
        checked = frozenset(decl.name for decl in functions if id(decl) not in known)
        parsed = {p: (self.program.sources.texts[p], self.program.modules[p]) for p in self.program.modules}
        parsed.pop(self.path)
        reusable = self.reusable(typed, keys)
        return Analysis(
            source=source,
            path=self.path,
            typed=typed,
            checked=checked,
            pieces=tuple(self.pieces),
            reusable=reusable,
            imports=self.imports,
            parsed=parsed,
        )

    # ------------------------------------------------------------ what a check depends on
    def candidates(self) -> Iterator[ast.FnDecl]:
        """The functions whose check could stand in for checking them again (see the module docstring)."""
        cyclic = self.mutually_recursive()
        for decl in self.module.decls:
            if not isinstance(decl, ast.FnDecl) or len(self.declared[decl.name]) != 1 or decl.name in cyclic:
                continue
            piece = self.piece_of[id(decl)]
            if not generic(decl) or piece.functions != 1:
                continue
            if self.calls_generic_only(piece):
                yield decl

    def mutually_recursive(self) -> set[str]:
        """The functions that may call themselves through others, where one of those infers its result: the
        checker gives a call of a function whose check is under way the type `_`, so their types depend on
        which of them was checked first, and one cannot stand in for the others."""
        functions = {decl.name: decl for decl in self.module.decls if isinstance(decl, ast.FnDecl)}
        calls = {name: (self.piece_of[id(decl)].names & functions.keys()) - {name} for name, decl in functions.items()}
        calling = {name for name, called in calls.items() if called}  # only those can be in a loop
        calls = {name: sorted(calls[name] & calling) for name in calling}
        found: set[str] = set()
        for component in strongly_connected(calls):
            if len(component) > 1 and any(functions[name].result is None for name in component):
                found.update(component)
        return found

    def calls_generic_only(self, piece: Piece) -> bool:
        """Whether every function the piece may use (a name of a function of this module, `alias.name` of a
        function of an imported one) has annotated parameters."""
        if not all(self.generic_functions.get((self.path, name), True) for name in piece.names):
            return False
        members = ((self.aliases[alias], name) for alias, name in piece.members if alias in self.aliases)
        return all(self.generic_functions.get(member, True) for member in members)

    def generic_by_name(self) -> dict[tuple[str, str], bool]:
        """For each function of this module and of the modules it imports, by (module path, name): whether
        its parameters (those of every function of that name) are annotated."""
        found: dict[tuple[str, str], bool] = {}
        for path in [self.path, *self.aliases.values()]:
            for decl in self.program.modules[path].decls:
                if isinstance(decl, ast.FnDecl):
                    found[path, decl.name] = found.get((path, decl.name), True) and generic(decl)
        return found

    def dependencies(self, decl: ast.Decl) -> tuple:
        """What the check of `decl` depends on: its piece's text and what the module-level names it mentions
        mean."""
        return self.piece_of[id(decl)].text, self.mentions(decl)

    def mentions(self, decl: ast.Decl) -> tuple:
        """Each module-level name the piece of `decl` mentions (but its own), with what it means."""
        mentioned = sorted(self.piece_of[id(decl)].names & self.module_level)
        return tuple((name, self.meaning(name)) for name in mentioned if name != getattr(decl, "name", None))

    def meaning(self, name: str) -> object:
        """What a module-level name stands for, as far as a check that uses it can tell: the parameters and
        declared result of a function (its text and what it mentions, when the result is inferred from its
        body), a struct's or const's declaration and what it mentions, an import's module, or a declaration
        that does not parse."""
        if name in self.meanings:
            return self.meanings[name]
        if name in self.in_progress:  # a function that calls itself through others: it is already in the key
            self.cycles += 1
            return ("recursive", name)
        self.in_progress.add(name)
        cycles = self.cycles
        if name in self.aliases:
            found: object = ("import", self.aliases[name])
        elif name in self.declared:
            found = tuple(self.declaration_meaning(decl) for decl in self.declared[name])
        else:
            found = ("broken", name)
        self.in_progress.discard(name)
        if self.cycles == cycles:  # a meaning found inside a cycle stands only in the key it was found for
            self.meanings[name] = found
        return found

    def declaration_meaning(self, decl: ast.Decl) -> tuple:
        if isinstance(decl, ast.FnDecl) and generic(decl) and decl.result is not None:
            return ("fn", decl.params, decl.result)  # nodes compare as trees, spans aside
        if isinstance(decl, ast.FnDecl):
            return ("fn", self.dependencies(decl))
        return (type(decl).__name__, decl, self.mentions(decl))

    # ------------------------------------------------------------ reusing
    def origin(self, decl: ast.FnDecl) -> tuple[ast.Decl, Move | None] | None:
        """The declaration of the previous analysis `decl` is (itself, or the one it was moved from)."""
        if id(decl) in self.moves:
            move = self.moves[id(decl)]
            return move.old, move
        if self.previous is not None and id(decl) in self.previous.reusable:
            return decl, None
        return None

    def known(self, keys: dict[int, tuple]) -> dict[int, Signature]:
        """The signatures of the functions whose bodies need not be checked again, by id of the new FnDecl."""
        if self.previous is None:
            return {}
        known = {}
        for decl in self.module.decls:
            found = self.origin(decl) if id(decl) in keys else None
            earlier = self.previous.reusable.get(id(found[0])) if found else None
            if earlier is not None and earlier.key == keys[id(decl)]:
                lines = found[1].lines if found[1] else 0
                result = relocated(earlier.signature.result, self.function_keys, lines)
                params = tuple((name, relocated(t, self.function_keys, lines)) for name, t in earlier.signature.params)
                known[id(decl)] = Signature(earlier.signature.name, params, result)
        return known

    def renamed_functions(self) -> dict[int, int]:
        """The ids of the previous analysis's functions (in the document) that are other objects now, mapped to
        the ids of the functions of the same name: where a reused type refers to a function."""
        now = {decl.name: decl for decl in self.module.decls if isinstance(decl, ast.FnDecl)}
        before = self.previous.typed.program.modules.get(self.path)
        found = {}
        for decl in before.decls if before else ():
            if isinstance(decl, ast.FnDecl) and decl.name in now and now[decl.name] is not decl:
                found[id(decl)] = id(now[decl.name])
        return found

    def merged(self, typed: Typed, known: dict[int, Signature]) -> Typed:
        """`typed` with the previous analysis's tables for the functions not checked again: as they are for a
        function still where it was, moved for one that moved. Everything else comes from this check."""
        previous = self.previous.typed
        tables = NodeTables(
            dict(previous.types),
            dict(previous.runtime_checks),
            dict(previous.coercions),
            dict(previous.checked_calls),
            dict(previous.bindings),
        )
        kept = {id(decl) for decl in self.module.decls if id(decl) in known and id(decl) not in self.moves}
        moved_from = {id(move.old): move for move in self.moves.values()}
        stale = [decl for decl in previous.program.modules[self.path].decls if id(decl) not in kept]
        imported = [module for path, module in previous.program.modules.items() if path != self.path]
        stale += [decl for module in imported for decl in module.decls]
        for decl in stale:
            move = moved_from.get(id(decl))
            tables.forget(move.nodes if move is not None else [id(node) for node in subtree(decl)])
        for decl in self.module.decls:
            move = self.moves.get(id(decl))
            if move is not None and id(decl) in known:
                self.relocate(move, tables, previous)
        if self.function_keys:
            for key, value in tables.types.items():
                if type(value) in REFERRING:
                    tables.types[key] = relocated(value, self.function_keys, 0)
        tables.types.update(typed.types)
        tables.runtime_checks.update(typed.runtime_checks)
        tables.coercions.update(typed.coercions)
        tables.checked_calls.update(typed.checked_calls)
        tables.bindings.update(typed.bindings)
        return dataclasses.replace(
            typed,
            types=MappingProxyType(tables.types),
            runtime_checks=MappingProxyType(tables.runtime_checks),
            coercions=MappingProxyType(tables.coercions),
            checked_calls=MappingProxyType(tables.checked_calls),
            bindings=MappingProxyType(tables.bindings),
        )

    def relocate(self, move: Move, tables: NodeTables, previous: Typed) -> None:
        """The previous tables' entries for the nodes of a moved function, under its new nodes."""
        for old, new in move.nodes.items():
            if old in previous.types:
                tables.types[id(new)] = relocated(previous.types[old], self.function_keys, move.lines)
            if old in previous.runtime_checks:
                tables.runtime_checks[id(new)] = moved_check(previous.runtime_checks[old], move.lines)
            if old in previous.coercions:
                tables.coercions[id(new)] = previous.coercions[old]
            if old in previous.bindings:
                tables.bindings[id(new)] = previous.bindings[old]
            if old in previous.checked_calls:
                found = previous.checked_calls[old]
                params = tuple(moved_check(p, move.lines) if p else None for p in found.params)
                result = moved_check(found.result, move.lines) if found.result else None
                tables.checked_calls[id(new)] = CallCheck(params, result)

    def reusable(self, typed: Typed, keys: dict[int, tuple]) -> dict[int, Reusable]:
        """The functions whose check the next analysis may reuse: the candidates without a diagnostic."""
        firsts = [piece.first + 1 for piece in self.pieces]
        flagged = {bisect.bisect_right(firsts, d.span.line) - 1 for d in typed.diagnostics if d.span.path == self.path}
        signatures = {s.name: s for s in typed.signatures.get(self.path, [])}
        found = {}
        for index, piece in enumerate(self.pieces):
            for decl in piece.decls if index not in flagged else ():
                if id(decl) in keys and decl.name in signatures:
                    found[id(decl)] = Reusable(keys[id(decl)], signatures[decl.name])
        return found


@record(slots=True)
class NodeTables:
    """The tables of a `Typed` that are keyed by node id."""

    types: dict[int, Type]
    runtime_checks: dict[int, RuntimeCheck]
    coercions: dict[int, str]
    checked_calls: dict[int, CallCheck]
    bindings: dict[int, Binding]

    def forget(self, keys: Iterable[int]) -> None:
        for table in (self.types, self.runtime_checks, self.coercions, self.checked_calls, self.bindings):
            drop = table.pop
            for key in keys:
                drop(key, None)


def strongly_connected(edges: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components of a graph (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            successor = next(successors, None)
            if successor is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    found.append(component)
            elif successor not in index:
                index[successor] = low[successor] = len(index)
                stack.append(successor)
                on_stack.add(successor)
                work.append((successor, iter(edges[successor])))
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
    return found


def generic(decl: ast.FnDecl) -> bool:
    return all(param.annotation is not None for param in decl.params)


REFERRING = (FunctionRef, GradientRef, TupleType, TapeType)


def relocated(t: Type, keys: dict[int, int], lines: int, names: dict[int, str] | None = None) -> Type:
    """`t` with the functions it refers to renamed by `keys` (ids; and `names`, by the same ids) and a `grad`
    call's span `lines` down; `t` itself when that changes nothing."""
    match t:
        case FunctionRef(key=key) if key in keys:
            return dataclasses.replace(t, key=keys[key], name=(names or {}).get(key, t.name))
        case GradientRef(function=function, span=span):
            span = moved_span(span, lines) if isinstance(span, Span) and lines else span
            function = relocated(function, keys, lines, names)
            return (
                t if function is t.function and span is t.span else dataclasses.replace(t, function=function, span=span)
            )
        case TupleType(items=items):
            found = tuple(relocated(item, keys, lines, names) for item in items)
            return t if all(a is b for a, b in zip(found, items, strict=True)) else TupleType(found)
        case TapeType(item=item):
            found = relocated(item, keys, lines, names)
            return t if found is item else TapeType(found)
    return t


def moved_check(check: RuntimeCheck, lines: int) -> RuntimeCheck:
    return RuntimeCheck(check.type, moved_span(check.span, lines))
