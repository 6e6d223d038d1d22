"""`dlrun lsp`: a Language Server Protocol server on stdio (pygls 2 and lsprotocol).

The editor support: diagnostics on open and on change, the static type under the cursor on hover, the
outline of a file (document symbols), semantic tokens (highlighting), go to definition, find references,
completion, signature help and formatting. Everything it knows comes from the checker the CLI runs
(through `dl.lang.incremental`, which checks a document again after an edit reusing what did not change)
and from the lexer; the functions that map them to LSP values are small and pure, so tests call them
without a server.

Responsiveness: documents are analysed on a worker thread (driver/documents.py), a change only after
`DEBOUNCE_S` without a newer one; requests never check anything. They read the last finished analysis,
mapped to the document's lines now (`View`), and the long ones (tokens, outline, references, completion,
formatting) are computed on a thread, so that the event loop keeps answering. A request waits only for a
document's first analysis, and `$/cancelRequest` ends that wait (or any other) with RequestCancelled.
Every request is answered: malformed params get InvalidParams (`Protocol`), and an exception an
InternalError that says what failed (`answered`). What walks a document's tree (the analysis, and each
request's lookups) runs in a room (lang/nesting.py), where any tree the parser accepts fits.

Positions: DL spans are 1-based with an exclusive end column, counted in characters (code points); LSP
positions are 0-based and counted in UTF-16 code units (or the encoding the client negotiated). The functions
below work in code points; the handlers convert what they read and send with `Columns`, so a line with `é` or
an emoji before the code still lines up.
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import logging
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, TypeVar

from cattrs.v import format_exception, transform_error
from dl import __version__
from dl.documents import Documents, Edits, Snapshot, document_path
from dl.lang import ast
from dl.lang.check import Typed
from dl.lang.diagnostics import Diagnostic, DiagnosticError, Severity, Span, labelled
from dl.lang.format import format_source
from dl.lang.lexer import code_characters
from dl.lang.nesting import with_room
from dl.lang.parse import parse_table
from dl.lang.primitives import BY_NAME, PRIMITIVES
from dl.lang.record import record
from dl.lang.types import FunctionRef, ModuleType, PrimitiveRef, StructType, TupleType, Type
from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInternalError, JsonRpcInvalidRequest
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.json_rpc import JsonRPCProtocol, RPCRequest
from pygls.uris import from_fs_path

log = logging.getLogger("dl.lsp")

NO_TEXTS: Mapping[str, str] = {}  # no other files
SEVERITIES = {Severity.ERROR: types.DiagnosticSeverity.Error, Severity.WARNING: types.DiagnosticSeverity.Warning}

# ------------------------------------------------------------------ what requests read again and again

KEPT = 8  # texts and modules remembered at a time (a few open documents, and their last versions)
LINES: dict[int, tuple[str, list[str]]] = {}  # by id of the text: (the text, its lines)
INDEXES: dict[int, tuple[ast.Module, ModuleIndex]] = {}  # by id of the module


def source_lines(source: str) -> list[str]:
    """The lines of `source`, split at `\\n` as the lexer and LSP count them, remembered for the few texts
    requests read: splitting a large document again for each request would cost more than answering it.
    The list is shared: callers do not change it."""
    found = LINES.get(id(source))
    if found is not None and found[0] is source:
        return found[1]
    if len(LINES) >= KEPT:
        LINES.clear()
    lines = source.split("\n")
    LINES[id(source)] = (source, lines)
    return lines


@record(frozen=True)
class ModuleIndex:
    """A module's top-level declarations by line and by name, so that a request about one position looks at
    the declaration there, not at every declaration of a large file."""

    decls: tuple[ast.Decl, ...]
    starts: list[int]  # the first line of each declaration (they are in source order)
    functions: dict[str, ast.FnDecl]  # by name (the last of a name, as the checker keeps it)
    named: dict[str, ast.Decl]  # functions, structs and consts by name (the first of a name)
    function_starts: list[tuple[int, int]]  # (first line, index in `decls`) of each function

    def at(self, line: int) -> list[ast.Decl]:
        """The declarations whose lines hold the 1-based `line` (more than one only when they share it)."""
        found = []
        index = bisect.bisect_right(self.starts, line) - 1
        while index >= 0 and self.decls[index].span.end_line >= line:
            found.append(self.decls[index])
            index -= 1
        return found[::-1]


def module_index(module: ast.Module) -> ModuleIndex:
    found = INDEXES.get(id(module))
    if found is not None and found[0] is module:
        return found[1]
    decls = module.decls
    named: dict[str, ast.Decl] = {}
    for decl in decls:
        if isinstance(decl, ast.FnDecl | ast.StructDecl | ast.Const):
            named.setdefault(decl.name, decl)
    index = ModuleIndex(
        decls,
        [decl.span.line for decl in decls],
        {decl.name: decl for decl in decls if isinstance(decl, ast.FnDecl)},
        named,
        [(decl.span.line, number) for number, decl in enumerate(decls) if isinstance(decl, ast.FnDecl)],
    )
    if len(INDEXES) >= KEPT:
        INDEXES.clear()
    INDEXES[id(module)] = (module, index)
    return index


# ------------------------------------------------------------------ positions and diagnostics


def to_range(span: Span) -> types.Range:
    """A DL span (1-based, end column exclusive) as an LSP range (0-based, end exclusive)."""
    return types.Range(
        start=types.Position(line=max(span.line - 1, 0), character=max(span.column - 1, 0)),
        end=types.Position(line=max(span.end_line - 1, 0), character=max(span.end_column - 1, 0)),
    )


def utf16_units(text: str) -> int:
    """How many UTF-16 code units `text` is (a character beyond the Basic Multilingual Plane is two)."""
    return len(text.encode("utf-16-le")) // 2


class Columns:
    """The lines of one document, to convert 0-based columns between code points (what DL spans count) and
    the units the client counts in (`units` of a piece of text: UTF-16 code units unless negotiated). Lines
    are split at `\\n`, as the lexer counts them; a column past the end of its line keeps its distance from
    the end. An ASCII document needs no conversion."""

    def __init__(self, source: str, units: Callable[[str], int] = utf16_units) -> None:
        self.lines = None if source.isascii() else source_lines(source)
        self.units = units

    def to_client(self, line: int, column: int) -> int:
        if self.lines is None or not 0 <= line < len(self.lines):
            return column
        text = self.lines[line]
        return self.units(text[:column]) + max(column - len(text), 0)

    def from_client(self, line: int, character: int) -> int:
        if self.lines is None or not 0 <= line < len(self.lines):
            return character
        counted = 0
        for index, char in enumerate(self.lines[line]):
            if counted >= character:
                return index
            counted += self.units(char)
        return len(self.lines[line]) + max(character - counted, 0)

    def position(self, position: types.Position) -> types.Position:
        return types.Position(line=position.line, character=self.to_client(position.line, position.character))

    def range(self, found: types.Range) -> types.Range:
        """A range in code points as the client counts it."""
        if self.lines is None:
            return found
        return types.Range(start=self.position(found.start), end=self.position(found.end))


def contains(span: Span, line: int, column: int) -> bool:
    """Whether the 1-based `line`:`column` lies in `span` (the character under the cursor; the end is exclusive)."""
    if span.line <= 0 or not (span.line <= line <= span.end_line):
        return False
    if line == span.line and column < span.column:
        return False
    return not (line == span.end_line and column >= span.end_column)


def to_lsp_diagnostic(
    diagnostic: Diagnostic, path: str, uri: str, columns: Columns | None = None, texts: Mapping[str, str] = NO_TEXTS
) -> types.Diagnostic:
    """One checker diagnostic as LSP shows it. The label and notes follow the message; a diagnostic in
    another file (an import) is shown at the top of this one and names that file. `columns` converts the
    ranges to the client's units; a secondary label in another file (the callee a mistake at a call went
    wrong in) becomes related information at that file's location, its columns converted with its text
    from `texts`."""
    columns = columns or Columns("")
    lines = [diagnostic.message]
    if diagnostic.label:
        lines.append(diagnostic.label)
    lines.extend(labelled(note) for note in diagnostic.notes)
    here = diagnostic.span.path == path
    if not here:
        lines[0] = f"{diagnostic.span.path}:{diagnostic.span.line}:{diagnostic.span.column}: {diagnostic.message}"
    related = [
        types.DiagnosticRelatedInformation(location=location, message=label.text)
        for label in diagnostic.secondary
        for location in [label_location(label.span, path, uri, columns, texts)]
    ]
    top = types.Range(types.Position(0, 0), types.Position(0, 0))
    return types.Diagnostic(
        range=columns.range(to_range(diagnostic.span)) if here else top,
        message="\n".join(lines),
        severity=SEVERITIES.get(diagnostic.severity, types.DiagnosticSeverity.Error),
        code=diagnostic.code,
        source="dl",
        related_information=related or None,
    )


def label_location(span: Span, path: str, uri: str, columns: Columns, texts: Mapping[str, str]) -> types.Location:
    """Where a secondary label is: in this document, or in the file it names (its columns in the same units)."""
    if span.path == path:
        return types.Location(uri=uri, range=columns.range(to_range(span)))
    other = Columns(texts.get(span.path, ""), columns.units)
    return types.Location(uri=from_fs_path(span.path) or span.path, range=other.range(to_range(span)))


def diagnostics_for(
    typed: Typed, path: str, uri: str, units: Callable[[str], int] = utf16_units
) -> list[types.Diagnostic]:
    """The diagnostics of a checked document, with ranges in the client's `units` of its text."""
    texts = typed.program.sources.texts
    columns = Columns(texts.get(path, ""), units)
    return [to_lsp_diagnostic(diagnostic, path, uri, columns, texts) for diagnostic in typed.diagnostics]


# ------------------------------------------------------------------ hover


def enclosing(module: ast.Module, line: int, column: int) -> list[Any]:
    """The chain of nodes from a top-level declaration down to the smallest node whose span holds the
    1-based `line`:`column`; empty when none does."""
    best: list[Any] = []

    def size(node: Any) -> tuple[int, int]:
        return node.span.end_line - node.span.line, node.span.end_column - node.span.column

    def walk(node: Any, chain: list[Any]) -> None:
        nonlocal best
        span = getattr(node, "span", None)
        inside = span is not None and contains(span, line, column)
        if inside:
            chain = [*chain, node]
            if not best or size(node) <= size(best[-1]):
                best = chain
        for child in ast.children(node):
            walk(child, chain)

    for decl in module_index(module).at(line):  # a declaration's nodes lie inside its span
        walk(decl, [])
    return best


def pattern_types(pattern: Any, value: Type | None) -> Iterator[tuple[ast.NamePattern, Type]]:
    """Each name a pattern binds, with its type when `value` is the type of what it destructures."""
    match pattern:
        case ast.NamePattern() if value is not None:
            yield pattern, value
        case ast.TuplePattern(items=items) if isinstance(value, TupleType) and len(value.items) == len(items):
            for item, item_type in zip(items, value.items, strict=True):
                yield from pattern_types(item, item_type)


def doc_comment(source: str | list[str], decl: ast.FnDecl) -> str:
    """The `#` comment block directly above a `fn`, without the `#`s. `source` may be given as its lines."""
    lines = source_lines(source) if isinstance(source, str) else source
    found: list[str] = []
    index = decl.span.line - 2
    while 0 <= index < len(lines) and lines[index].lstrip().startswith("#"):
        found.append(lines[index].lstrip()[1:].strip())
        index -= 1
    return "\n".join(reversed(found))


def signatures_of(typed: Typed, path: str) -> dict[str, list[str]]:
    """The checked signatures of a module's functions by name, as `dlrun check --types` prints them: one for
    a function whose parameters are annotated, one per set of argument types it was checked for if not."""
    found: dict[str, list[str]] = {}
    for signature in typed.signatures.get(path, []):
        shown = signature.text_in(path, typed.program)
        if shown not in found.setdefault(signature.name, []):
            found[signature.name].append(shown)
    return found


def function_hover(typed: Typed, path: str, source: str, decl: ast.FnDecl) -> str:
    checked = [signature for signature in typed.signatures.get(path, []) if signature.name == decl.name]
    shown = "\n".join(dict.fromkeys(s.text_in(path, typed.program) for s in checked)) or f"fn {decl.name}"
    doc = doc_comment(source, decl)
    return f"{shown}\n\n{doc}" if doc else shown


def shown_type(types) -> str:
    """A name's type, or the types the calls of its generic function give it: `f64[3] or f64 (by call)`."""
    distinct = list(dict.fromkeys(str(t) for t in types))
    return distinct[0] if len(distinct) == 1 else f"{' or '.join(distinct)} (by call)"


def hover_text(typed: Typed, path: str, source: str, line: int, column: int) -> tuple[str, Span] | None:
    """What hovering the 1-based `line`:`column` of `path` shows, and the span it is about: `name: type`
    for a name, the type of any other expression, and the signature (and doc comment) of a function."""
    module = typed.program.modules.get(path)
    if module is None:
        return None
    functions = module_index(module).functions
    for decl in module_index(module).at(line):
        if isinstance(decl, ast.FnDecl) and contains(decl.name_span, line, column):
            return function_hover(typed, path, source, decl), decl.name_span
    chain = enclosing(module, line, column)
    for depth in range(len(chain) - 1, -1, -1):
        text = node_hover(typed, path, source, chain[: depth + 1], functions)
        if text is not None:
            return text, chain[depth].span
    return None


def node_hover(typed: Typed, path: str, source: str, chain: list[Any], functions: dict[str, ast.FnDecl]) -> str | None:
    """The hover text of the last node of `chain` (its ancestors before it), or None to try its parent."""
    node, parent = chain[-1], chain[-2] if len(chain) > 1 else None
    known = typed.type_of(node)
    match node:
        case ast.Name(id=name) if name in functions and (known is None or isinstance(known, FunctionRef)):
            return function_hover(typed, path, source, functions[name])
        case ast.Name() | ast.Field() if isinstance(known, FunctionRef | PrimitiveRef):
            declared = typed.functions.get(known.key) if isinstance(known, FunctionRef) else None
            if declared is not None and isinstance(declared[0], ast.FnDecl):  # `nn.linear`: as in its module
                decl, where = declared
                return function_hover(typed, where, typed.program.sources.texts.get(where, ""), decl)
            return str(known)
        case ast.Name(id=name) | ast.Field(name=name) if known is not None:
            return f"{name}: {shown_type(typed.call_types.get(id(node), (known,)))}"
        case ast.NamePattern(name=name):
            for ancestor in reversed(chain):
                if isinstance(ancestor, ast.Let):
                    found = []
                    for value_type in typed.call_types.get(id(ancestor.value), (typed.type_of(ancestor.value),)):
                        found += [t for bound, t in pattern_types(ancestor.pattern, value_type) if bound is node]
                    return f"{name}: {shown_type(found)}" if found else None
            return None
        case ast.Param(name=name) if isinstance(parent, ast.FnDecl):
            signatures = [dict(s.params) for s in typed.signatures.get(path, []) if s.name == parent.name]
            found = [params[name] for params in signatures if name in params]
            return f"{name}: {shown_type(found)}" if found else None
        case _ if known is not None:
            return shown_type(typed.call_types.get(id(node), (known,)))
    return None


# ------------------------------------------------------------------ outline


def symbols(module: ast.Module, typed: Typed | None = None) -> list[types.DocumentSymbol]:
    """The outline of a module: its functions (with their signatures), structs (with their fields) and consts."""
    signatures = (
        {s.name: s.text_in(module.path, typed.program) for s in typed.signatures.get(module.path, [])} if typed else {}
    )
    found: list[types.DocumentSymbol] = []
    for decl in module.decls:
        match decl:
            case ast.FnDecl(name=name):
                found.append(
                    types.DocumentSymbol(
                        name=name,
                        kind=types.SymbolKind.Function,
                        range=to_range(decl.span),
                        selection_range=to_range(decl.name_span),
                        detail=signatures.get(name),
                    )
                )
            case ast.StructDecl(name=name, fields=fields):
                members = [
                    types.DocumentSymbol(
                        name=item.name,
                        kind=types.SymbolKind.Field,
                        range=to_range(item.span),
                        selection_range=to_range(item.span),
                    )
                    for item in fields
                ]
                found.append(
                    types.DocumentSymbol(
                        name=name,
                        kind=types.SymbolKind.Struct,
                        range=to_range(decl.span),
                        selection_range=to_range(decl.name_span),
                        children=members or None,
                    )
                )
            case ast.Const(name=name):
                found.append(
                    types.DocumentSymbol(
                        name=name,
                        kind=types.SymbolKind.Constant,
                        range=to_range(decl.span),
                        selection_range=to_range(decl.span),
                    )
                )
    return found


# ------------------------------------------------------------------ scopes (definition and completion)


def before(span: Span, line: int, column: int) -> bool:
    """Whether `span` ends at or before the 1-based `line`:`column`."""
    return (span.end_line, span.end_column) <= (line, column)


def pattern_names(pattern: Any) -> Iterator[ast.NamePattern]:
    match pattern:
        case ast.NamePattern():
            yield pattern
        case ast.TuplePattern(items=items):
            for item in items:
                yield from pattern_names(item)


def function_at(module: ast.Module, line: int) -> ast.FnDecl | None:
    """The top-level function the 1-based `line` is in, or else the last one that starts before it (the
    document may have grown since `module` was parsed)."""
    index = module_index(module)
    before = bisect.bisect_right(index.function_starts, (line, len(index.decls))) - 1
    return index.decls[index.function_starts[before][1]] if before >= 0 else None


def scope_at(decl: ast.FnDecl, line: int, column: int) -> list[tuple[str, Any, Any]]:
    """The local bindings visible at the 1-based `line`:`column` inside `decl`, in order (a later one shadows
    an earlier one of the same name), as (name, binding node, the node that binds it): params, `let`
    patterns, `for` patterns, nested `fn`s and lambda params."""
    found: list[tuple[str, Any, Any]] = [(param.name, param, decl) for param in decl.params]

    def block(node: ast.Block) -> None:
        for stmt in node.body:
            if before(stmt.span, line, column):
                if isinstance(stmt, ast.Let):
                    found.extend((bound.name, bound, stmt) for bound in pattern_names(stmt.pattern))
                elif isinstance(stmt, ast.FnDecl):
                    found.append((stmt.name, stmt, stmt))
            elif contains(stmt.span, line, column):
                inside(stmt)
                return
            else:
                return

    def inside(node: Any) -> None:
        if isinstance(node, ast.Block):
            block(node)
            return
        if isinstance(node, ast.For) and contains(node.body.span, line, column):
            found.extend((bound.name, bound, node) for bound in pattern_names(node.pattern))
        if isinstance(node, ast.FnDecl | ast.Lambda):
            found.extend((param.name, param, node) for param in node.params)
        for child in ast.children(node):
            span = getattr(child, "span", None)
            if span is not None and contains(span, line, column):
                inside(child)
                return

    if contains(decl.body.span, line, column) or before(decl.body.span, line, column):
        block(decl.body)
    return found


def name_span(name: str, span: Span) -> Span:
    """The span of a name that starts `span` (a param, a field declaration)."""
    return Span(span.path, span.line, span.column, span.line, span.column + len(name))


def field_name_span(node: ast.Field) -> Span:
    """The span of the name after the dot of `target.name`."""
    span = node.span
    return Span(span.path, span.end_line, span.end_column - len(node.name), span.end_line, span.end_column)


def module_definition(typed: Typed, path: str, name: str) -> tuple[str, Span] | None:
    """Where a module-level name of `path` is declared: a function, struct, const, or an import (its file)."""
    module = typed.program.modules.get(path)
    if module is None:
        return None
    match module_index(module).named.get(name):
        case ast.FnDecl() | ast.StructDecl() as decl:
            return path, decl.name_span
        case ast.Const() as decl:
            return path, decl.span
    for alias, target in typed.program.imports.get(path, []):
        if alias == name:
            return target, Span(target, 1, 1, 1, 1)
    return None


def binding_definition(binding: Any, owner: Any, path: str) -> tuple[str, Span]:
    match binding:
        case ast.Param():
            return path, name_span(binding.name, binding.span)
        case ast.FnDecl():
            return path, binding.name_span
    return path, binding.span


def definition(typed: Typed, path: str, line: int, column: int) -> tuple[str, Span] | None:
    """Where the name at the 1-based `line`:`column` of `path` is defined, as (file path, span): a local
    (the nearest binding in scope), a function, struct, const, an imported module (its file), a struct
    field, or a member of an imported module."""
    module = typed.program.modules.get(path)
    if module is None:
        return None
    for decl in module_index(module).at(line):
        if isinstance(decl, ast.FnDecl | ast.StructDecl) and contains(decl.name_span, line, column):
            return path, decl.name_span
        if isinstance(decl, ast.Import) and contains(decl.span, line, column):
            alias = decl.alias or decl.module
            return module_definition(typed, path, alias)
    chain = enclosing(module, line, column)
    if not chain:
        return None
    node = chain[-1]
    match node:
        case ast.Name(id=name):
            function = chain[0] if isinstance(chain[0], ast.FnDecl) else None
            if function is not None:
                for bound, binding, owner in reversed(scope_at(function, line, column)):
                    if bound == name:
                        return binding_definition(binding, owner, path)
            return module_definition(typed, path, name)
        case ast.NamePattern() | ast.Param():
            return binding_definition(node, None, path)
        case ast.Field(target=target, name=name):
            return member_definition(typed, typed.type_of(target), name)
        case ast.NamedType(name=name, module=None):
            return module_definition(typed, path, name)
        case ast.NamedType(name=name, module=alias) | ast.TensorTypeExpr(dtype=name, module=alias) if alias:
            target = dict(typed.program.imports.get(path, [])).get(alias)
            return module_definition(typed, target, name) if target else None
        case ast.TensorTypeExpr(dtype=name):  # a generic struct given sizes (`Linear[3, 2]`); a dtype has none
            return module_definition(typed, path, name)
    return None


def member_definition(typed: Typed, target: Type | None, name: str) -> tuple[str, Span] | None:
    """Where `name` is declared in what `target` is: a struct's field, or a member of a module."""
    if isinstance(target, ModuleType):
        return module_definition(typed, target.path, name)
    if isinstance(target, StructType):
        module = typed.program.modules.get(target.module)
        for decl in module.decls if module else ():
            if isinstance(decl, ast.StructDecl) and decl.name == target.name:
                for item in decl.fields:
                    if item.name == name:
                        return target.module, name_span(name, item.span)
    return None


# ------------------------------------------------------------------ references


def name_sites(module: ast.Module) -> Iterator[tuple[str, Span]]:
    """Every place a name is written in a module, as (name, span of the name): uses (names, field and member
    accesses, struct names in types) and bindings (params, `let` and `for` patterns, declarations)."""

    def walk(node: Any) -> Iterator[tuple[str, Span]]:
        match node:
            case ast.Name(id=name) | ast.NamePattern(name=name):
                yield name, node.span
            case ast.Param(name=name):
                yield name, name_span(name, node.span)
            case ast.FnDecl(name=name) | ast.StructDecl(name=name):
                yield name, node.name_span
            case ast.Field(name=name):
                yield name, field_name_span(node)
            case ast.NamedType(name=name, module=None):
                yield name, node.span
            case ast.TensorTypeExpr(dtype=name, module=None):  # `Linear[3, 2]`: a struct given sizes (or a dtype)
                yield name, name_span(name, node.span)
            case ast.FieldDecl(name=name):
                yield name, name_span(name, node.span)
        for child in ast.children(node):
            yield from walk(child)

    for decl in module.decls:
        if isinstance(decl, ast.Const):
            yield decl.name, decl.span
        elif isinstance(decl, ast.Import):
            yield decl.alias or decl.module, decl.span
        yield from walk(decl)


def declaration_sites(module: ast.Module) -> set[Span]:
    """The spans `name_sites` gives consts and struct fields, which `definition` does not resolve from."""
    found = {decl.span for decl in module.decls if isinstance(decl, ast.Const)}
    for decl in module.decls:
        if isinstance(decl, ast.StructDecl):
            found.update(name_span(item.name, item.span) for item in decl.fields)
    return found


def references(typed: Typed, path: str, line: int, column: int, include_declaration: bool = True) -> list[Span]:
    """Every place in `path` that refers to what the name at the 1-based `line`:`column` refers to (a local, a
    parameter, a function, a struct, a field, a const, an imported module): the names whose definition is the
    same, in source order; the declaration itself only when `include_declaration`."""
    module = typed.program.modules.get(path)
    if module is None:
        return []
    sites = list(name_sites(module))
    here = [site for site in sites if contains(site[1], line, column)]
    if not here:
        return []
    name, span = here[-1]  # the innermost: sites come before the sites inside them
    declared = {site for _, site in sites if site.path == path} & declaration_sites(module)
    target = (path, span) if span in declared else definition(typed, path, span.line, span.column)
    if target is None:
        return []
    found: list[Span] = []
    for other, site in sites:
        if other == name and site != target[1] and site not in found:
            resolved = (path, site) if site in declared else definition(typed, path, site.line, site.column)
            if resolved == target:
                found.append(site)
    if include_declaration and target[0] == path:
        found.append(target[1])
    return sorted(found, key=lambda site: (site.line, site.column))


# ------------------------------------------------------------------ signature help


OPENERS = {")": "(", "]": "[", "}": "{"}
CALLEE = re.compile(r"(?:^|[^\w.])((?:[A-Za-z_]\w*\s*\.\s*)?[A-Za-z_]\w*)\s*$")
KEYWORD_ARGUMENT = re.compile(r"^\s*([A-Za-z_]\w*)\s*=(?!=)")
DECLARATION_START = re.compile(r"^(fn|struct|const|import)\b")


def open_call(source: str, line: int, column: int) -> tuple[str, int, str] | None:
    """The call the 1-based `line`:`column` is inside, from the text alone (it need not parse): the callee as
    written (`f`, `nn.init`), the number of commas before the cursor at the call's own depth, and the text of
    the argument being typed. Strings and comments are skipped."""
    lines = source_lines(source)
    if not 0 < line <= len(lines) + 1:
        return None
    first = line - 1
    while first > 0 and not DECLARATION_START.match(lines[first] if first < len(lines) else ""):
        first -= 1
    text = "\n".join([*lines[first : line - 1], lines[line - 1][: column - 1] if line <= len(lines) else ""])
    stack: list[list[Any]] = []  # [opener, index just after it, commas, index after the last comma]
    for index, char in code_characters(text):
        if char in "([{":
            stack.append([char, index + 1, 0, index + 1])
        elif char in OPENERS:
            while stack and stack.pop()[0] != OPENERS[char]:
                pass
        elif char == "," and stack:
            stack[-1][2] += 1
            stack[-1][3] = index + 1
    for opener, start, commas, after in reversed(stack):
        if opener == "{":
            return None  # inside a block or a struct literal, not directly in a call
        if opener == "(":
            callee = CALLEE.search(text[: start - 1])
            if callee is None or re.search(r"\bfn\s*$", text[: callee.start(1)]):
                return None  # `(a, b)` a tuple, or the parameter list of a declaration
            return re.sub(r"\s+", "", callee.group(1)), commas, text[after:]
    return None


def format_default(value: object) -> str:
    if value is None:
        return "_"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and value != "f32":
        return f'"{value}"'
    return str(value)


def builtin_parameters(name: str) -> list[tuple[str, str]]:
    """The parameters of a built-in as shown, with the name each is passed by (variadic: `*name`)."""
    signature = PRIMITIVES[BY_NAME[name]].signature
    shown = [(param, param) for param in signature.positional]
    shown += [(param, f"{param}={format_default(value)}") for param, value in signature.optional]
    if signature.variadic is not None:
        shown.append((f"*{signature.variadic[0]}", f"*{signature.variadic[0]}"))
    shown += [(param, f"{param}={format_default(value)}") for param, value in signature.keywords]
    return shown


def signature_information(label_start: str, params: list[tuple[str, str]], end: str, doc: str) -> Any:
    """A SignatureInformation whose parameters are labelled by their offsets in the signature's label."""
    label, offsets = label_start, []
    for index, (_, shown) in enumerate(params):
        label += ", " if index else ""
        offsets.append((len(label), len(label) + len(shown)))
        label += shown
    label += end
    return types.SignatureInformation(
        label=label,
        documentation=types.MarkupContent(kind=types.MarkupKind.PlainText, value=doc) if doc else None,
        parameters=[types.ParameterInformation(label=offset) for offset in offsets],
    )


def signature_help(typed: Typed, path: str, source: str, line: int, column: int) -> types.SignatureHelp | None:
    """The signature of the call the 1-based `line`:`column` is inside: a function of this module or of an
    imported one (from the checker's signatures, with its doc comment) or a built-in (from its primitive
    signature: positionals, optionals with defaults, the variadic tail, keyword-only parameters). The active
    parameter is the one the commas before the cursor reach, or the one named by `name=`."""
    found = open_call(source, line, column)
    if found is None:
        return None
    callee, commas, argument = found
    module_path, _, name = callee.rpartition(".")
    target = dict(typed.program.imports.get(path, [])).get(module_path) if module_path else path
    signature = next((s for s in typed.signatures.get(target, []) if s.name == name), None) if target else None
    if signature is not None:
        params = [(param, f"{param}: {param_type}") for param, param_type in signature.params]
        module = typed.program.modules.get(target)
        decl = next((d for d in module.decls if isinstance(d, ast.FnDecl) and d.name == name), None) if module else None
        doc = doc_comment(source, decl) if decl is not None and target == path else ""  # docs of this file only
        information = signature_information(f"fn {name}(", params, f") -> {signature.result}", doc)
        variadic = None
    elif not module_path and name in BY_NAME:
        params = builtin_parameters(name)
        information = signature_information(f"fn {name}(", params, ")", "built-in")
        spec = PRIMITIVES[BY_NAME[name]].signature
        variadic = len(spec.positional) + len(spec.optional) if spec.variadic is not None else None
    else:
        return None
    keyword = KEYWORD_ARGUMENT.match(argument)
    names = [param for param, _ in params]
    if keyword is not None and keyword.group(1) in names:
        active = names.index(keyword.group(1))
    elif variadic is not None and commas >= variadic:
        active = variadic
    else:
        active = commas if commas < len(params) else len(params)
    return types.SignatureHelp(signatures=[information], active_signature=0, active_parameter=active)


# ------------------------------------------------------------------ completion

DOTTED = re.compile(r"([A-Za-z_]\w*(?:\s*\.\s*[A-Za-z_]\w*)*)\s*\.\s*\w*$")


def binding_type(typed: Typed, path: str, binding: Any, owner: Any) -> Type | None:
    """The type of a local binding, when the checker knows it."""
    match binding, owner:
        case ast.NamePattern(), ast.Let():
            for bound, found in pattern_types(owner.pattern, typed.type_of(owner.value)):
                if bound is binding:
                    return found
        case ast.Param(), ast.FnDecl():
            signature = next((s for s in typed.signatures.get(path, []) if s.name == owner.name), None)
            return dict(signature.params).get(binding.name) if signature else None
    return None


def module_names(typed: Typed, path: str) -> list[types.CompletionItem]:
    """The functions, structs and consts a module declares. A function shows its checked signature (the
    first, where it was checked for several argument types; all of them, and its doc comment, in its
    documentation)."""
    module = typed.program.modules.get(path)
    if module is None:
        return []
    signatures = signatures_of(typed, path)
    lines = source_lines(typed.program.sources.texts.get(path, ""))
    found = []
    for decl in module.decls:
        match decl:
            case ast.FnDecl(name=name):
                shown = signatures.get(name, [f"fn {name}"])
                doc = "\n\n".join(part for part in ("\n".join(shown[1:]), doc_comment(lines, decl)) if part)
                found.append(item(name, types.CompletionItemKind.Function, shown[0], doc))
            case ast.StructDecl(name=name):
                found.append(item(name, types.CompletionItemKind.Struct, f"struct {name}"))
            case ast.Const(name=name):
                known = typed.type_of(decl.value)
                found.append(item(name, types.CompletionItemKind.Constant, f"const {name}: {known}" if known else None))
    return found


def item(
    label: str, kind: types.CompletionItemKind, detail: str | None, documentation: str = ""
) -> types.CompletionItem:
    shown = types.MarkupContent(kind=types.MarkupKind.PlainText, value=documentation) if documentation else None
    return types.CompletionItem(label=label, kind=kind, detail=detail, documentation=shown)


def expression_type(typed: Typed, path: str, text: str, line: int, column: int) -> Type | None:
    """The type of a dotted name (`x`, `m.layer`) as seen at the 1-based `line`:`column`: the first name is a
    local in scope or a module-level name; each `.name` after it a field of a struct or a module member."""
    module = typed.program.modules.get(path)
    if module is None:
        return None
    first, *rest = [part.strip() for part in text.split(".")]
    found: Type | None = None
    function = function_at(module, line)
    for bound, binding, owner in reversed(scope_at(function, line, column) if function else []):
        if bound == first:
            found = binding_type(typed, path, binding, owner)
            break
    else:
        imports = dict(typed.program.imports.get(path, []))
        if first in imports:
            found = ModuleType(imports[first])
        for decl in module.decls:
            if isinstance(decl, ast.Const) and decl.name == first:
                found = typed.type_of(decl.value)
    for name in rest:
        if isinstance(found, StructType):
            found = found.field_type(name)
        else:
            return None
    return found


def completions(
    typed: Typed, path: str, source: str, line: int, column: int, scope_line: int | None = None
) -> list[types.CompletionItem]:
    """What may be typed at the 1-based `line`:`column` of `source`: after `x.`, the fields of the struct `x`
    (with their types) or the members of the module `x`; elsewhere the locals in scope, the module's
    functions, structs, consts and imports, the keywords and the built-ins. `typed` may be from an earlier
    version of the document (the current one may not parse while it is being typed); `scope_line` is then
    the line of its text where the scope is looked up (by default `line`)."""
    lines = source_lines(source)
    prefix = lines[line - 1][: column - 1] if 0 < line <= len(lines) else ""
    line = scope_line or line
    dotted = DOTTED.search(prefix)
    if dotted is not None:
        target = expression_type(typed, path, dotted.group(1), line, column)
        if isinstance(target, StructType):
            return [item(name, types.CompletionItemKind.Field, str(t)) for name, t in target.fields]
        if isinstance(target, ModuleType):
            return module_names(typed, target.path)
        return []
    found: dict[str, types.CompletionItem] = {}
    module = typed.program.modules.get(path)
    function = function_at(module, line) if module is not None else None
    for name, binding, owner in reversed(scope_at(function, line, column) if function else []):
        if name not in found:
            known = binding_type(typed, path, binding, owner)
            kind = types.CompletionItemKind.Function if binding is owner else types.CompletionItemKind.Variable
            found[name] = item(name, kind, str(known) if known is not None else None)
    for entry in module_names(typed, path):
        found.setdefault(entry.label, entry)
    for alias, _ in typed.program.imports.get(path, []):
        found.setdefault(alias, item(alias, types.CompletionItemKind.Module, "module"))
    for keyword in sorted(keywords()):
        found.setdefault(keyword, item(keyword, types.CompletionItemKind.Keyword, None))
    for name in sorted(BY_NAME):
        found.setdefault(name, item(name, types.CompletionItemKind.Function, f"built-in fn {name}"))
    return list(found.values())


# ------------------------------------------------------------------ semantic tokens

TOKEN_TYPES = [
    "namespace",
    "type",
    "struct",
    "typeParameter",
    "parameter",
    "variable",
    "property",
    "function",
    "keyword",
    "comment",
    "string",
    "number",
    "operator",
]
TOKEN_MODIFIERS = ["declaration", "readonly", "defaultLibrary"]
LEGEND = types.SemanticTokensLegend(token_types=TOKEN_TYPES, token_modifiers=TOKEN_MODIFIERS)
OPERATOR_KINDS = frozenset(
    {"PLUS", "MINUS", "STAR", "SLASH", "DSLASH", "PERCENT", "AT", "POW", "COMPARE", "ASSIGN", "AUGASSIGN"}
    | {"ARROW", "FATARROW", "DOTDOT"}
)
DTYPE_NAMES = frozenset({"f32", "f64", "i32", "i64", "bool", "str"})

# A classified token: (1-based line, 1-based column, length, type, modifiers)
SemanticToken = tuple[int, int, int, str, tuple[str, ...]]


def keywords() -> set[str]:
    return set(parse_table().scanner.keywords)


def comment_start(text: str) -> int | None:
    """The index of the `#` that starts a comment on one line of source, outside string literals."""
    return next((index for index, char in code_characters(text) if char == "#"), None)


LINE_TOKENS: dict[str, list[tuple[str, str, int]]] = {}  # each line's tokens, by its text (see `line_tokens`)
LINE_TOKENS_KEPT = 200_000  # lines remembered before the memory is cleared


def lexical_tokens(source: str) -> Iterator[tuple[str, str, int, int]]:
    """The lexer's tokens of `source`, line by line (no token spans lines), so that a character the lexer
    rejects loses only the rest of its line; comments as `COMMENT` tokens, `NEWLINE`s left out."""
    for number, text in enumerate(source.split("\n"), start=1):  # lines as the lexer and LSP count them
        for kind, value, column in line_tokens(text):
            yield kind, value, number, column


def line_tokens(text: str) -> list[tuple[str, str, int]]:
    """The tokens of one line as (kind, text, 1-based column), remembered by the line's text: after an edit,
    only the lines it changed are lexed again."""
    found = LINE_TOKENS.get(text)
    if found is not None:
        return found
    code_line = text.removesuffix("\r")
    start = comment_start(code_line)
    code = code_line if start is None else code_line[:start]
    scanner = parse_table().scanner
    try:
        scanned = scanner.spread(scanner.scan(code, "<tokens>"))  # f-strings: text, and fields' tokens
    except DiagnosticError as problem:  # a character no token matches: keep the tokens before it
        bad = problem.diagnostics[0].span.column if problem.diagnostics else 1
        try:
            scanned = scanner.spread(scanner.scan(code[: bad - 1], "<tokens>"))
        except DiagnosticError:
            scanned = []
    found = [(kind, value, column) for kind, value, _, column in scanned if kind != "NEWLINE"]
    if start is not None:
        found.append(("COMMENT", code_line[start:], start + 1))
    if len(LINE_TOKENS) >= LINE_TOKENS_KEPT:
        LINE_TOKENS.clear()
    LINE_TOKENS[text] = found
    return found


def name_classes(typed: Typed | None, path: str) -> dict[tuple[int, int], tuple[str, tuple[str, ...]]]:
    """What each name of a checked module is, by the 1-based position where it starts."""
    module = typed.program.modules.get(path) if typed is not None else None
    if module is None:
        return {}
    found: dict[tuple[int, int], tuple[str, tuple[str, ...]]] = {}
    structs = {decl.name for decl in module.decls if isinstance(decl, ast.StructDecl)}
    consts = {decl.name for decl in module.decls if isinstance(decl, ast.Const)}

    def put(span: Span, kind: str, *modifiers: str) -> None:
        found.setdefault((span.line, span.column), (kind, modifiers))

    def walk(node: Any, params: frozenset[str]) -> None:
        match node:
            case ast.FnDecl() | ast.Lambda():
                if isinstance(node, ast.FnDecl):
                    put(node.name_span, "function", "declaration")
                params = params | {param.name for param in node.params}
                for param in node.params:
                    put(param.span, "parameter", "declaration")
            case ast.StructDecl():
                put(node.name_span, "struct", "declaration")
                for member in node.fields:
                    put(member.span, "property", "declaration")
            case ast.NamePattern():
                put(node.span, "variable", "declaration")
            case ast.Name(id=name):
                known = typed.type_of(node)
                if isinstance(known, PrimitiveRef):
                    put(node.span, "function", "defaultLibrary")
                elif isinstance(known, FunctionRef):
                    put(node.span, "function")
                elif isinstance(known, ModuleType):
                    put(node.span, "namespace")
                elif name in structs:
                    put(node.span, "struct")
                elif name in params:
                    put(node.span, "parameter")
                elif name in consts:
                    put(node.span, "variable", "readonly")
                else:
                    put(node.span, "variable")
            case ast.Field():
                known = typed.type_of(node)
                kind = "function" if isinstance(known, FunctionRef) else "property"
                if isinstance(typed.type_of(node.target), ModuleType) and node.name in structs_of(typed, node):
                    kind = "struct"
                put(field_name_span(node), kind)
            case ast.FieldInit() | ast.Keyword():
                put(node.span, "property" if isinstance(node, ast.FieldInit) else "parameter")
            case ast.NamedType(name=name, module=alias):
                if alias is not None:
                    put(node.span, "namespace")
                    end = node.span
                    put(Span(path, end.end_line, end.end_column - len(name), 0, 0), "struct")
                else:
                    put(node.span, "type" if name in DTYPE_NAMES else "struct")
            case ast.TensorTypeExpr(module=alias) if alias is not None:  # `gpt.GPT[2, 64]`
                put(
                    Span(path, node.span.line, node.span.column, node.span.line, node.span.column + len(alias)),
                    "namespace",
                )
                put(Span(path, node.span.line, node.span.column + len(alias) + 1, 0, 0), "struct")
            case ast.TensorTypeExpr():
                put(node.span, "type")
            case ast.DimName():
                put(node.span, "typeParameter")
        for child in ast.children(node):
            walk(child, params)

    for decl in module.decls:
        walk(decl, frozenset())
    return found


def structs_of(typed: Typed, node: ast.Field) -> set[str]:
    target = typed.type_of(node.target)
    module = typed.program.modules.get(target.path) if isinstance(target, ModuleType) else None
    return {decl.name for decl in module.decls if isinstance(decl, ast.StructDecl)} if module else set()


def semantic_tokens(source: str, typed: Typed | None, path: str) -> list[SemanticToken]:
    """Every highlighted token of `source`, in order: keywords, numbers, strings, comments and operators from
    the lexer, names classified from the checked module (`typed` may be None, or lack the module when it does
    not parse: then names after `fn`, `struct`, `import` and built-ins are still told apart)."""
    return classified_tokens(source, name_classes(typed, path))


def classified_tokens(
    source: str, classes: Mapping[tuple[int, int], tuple[str, tuple[str, ...]]]
) -> list[SemanticToken]:
    """`semantic_tokens` with the names' classes given, by the 1-based position where each starts."""
    words = keywords()
    found: list[SemanticToken] = []
    previous = ""
    for kind, value, line, column in lexical_tokens(source):
        shown: tuple[str, tuple[str, ...]] | None = None
        if kind == "NAME":
            shown = classes.get((line, column))
            if shown is None:
                if previous == "fn":
                    shown = ("function", ("declaration",))
                elif previous == "struct":
                    shown = ("struct", ("declaration",))
                elif previous == "const":
                    shown = ("variable", ("declaration", "readonly"))
                elif previous in ("import", "as"):
                    shown = ("namespace", ())
                elif value in BY_NAME and not classes:
                    shown = ("function", ("defaultLibrary",))
                elif value in DTYPE_NAMES:
                    shown = ("type", ())
        elif value in words:
            shown = ("keyword", ())
        elif kind in ("INT", "FLOAT"):
            shown = ("number", ())
        elif kind in ("STRING", "COMMENT"):
            shown = (kind.lower(), ())
        elif kind in OPERATOR_KINDS:
            shown = ("operator", ())
        if shown is not None:
            found.append((line, column, len(value), *shown))
        previous = value
    return found


def tokens_in_range(found: list[SemanticToken], start: tuple[int, int], end: tuple[int, int]) -> list[SemanticToken]:
    """The tokens that overlap the range from the 0-based (line, column) `start` to `end` (exclusive), in
    code points."""
    return [
        token
        for token in found
        if (token[0] - 1, token[1] - 1 + token[2]) > start and (token[0] - 1, token[1] - 1) < end
    ]


def client_tokens(found: list[SemanticToken], columns: Columns) -> list[SemanticToken]:
    """Tokens with their column and length in the client's units (for `encode_tokens`)."""
    if columns.lines is None:
        return found
    shown = []
    for line, column, length, kind, modifiers in found:
        start, end = columns.to_client(line - 1, column - 1), columns.to_client(line - 1, column - 1 + length)
        shown.append((line, start + 1, end - start, kind, modifiers))
    return shown


def encode_tokens(found: list[SemanticToken]) -> list[int]:
    """Semantic tokens as LSP sends them: five integers each, the line and start relative to the token before
    (the start only when on the same line), 0-based, then the length, the type's index in the legend and the
    modifiers as bits."""
    data: list[int] = []
    last_line, last_start = 0, 0
    for line, column, length, kind, modifiers in sorted(found):
        line, start = line - 1, column - 1
        bits = sum(1 << TOKEN_MODIFIERS.index(modifier) for modifier in modifiers)
        delta_start = start - last_start if line == last_line else start
        data.extend((line - last_line, delta_start, length, TOKEN_TYPES.index(kind), bits))
        last_line, last_start = line, start
    return data


# ------------------------------------------------------------------ the server

T = TypeVar("T")
DEBOUNCE_S = 0.15  # an analysis on change waits for this long without a newer change
REFUSED = object()  # what `Protocol.structure_message` gives for a message it has answered with an error


class Debouncer:
    """Runs `action(key)` once `delay` seconds pass without another `schedule(key)`: a newer call cancels the
    pending one. Runs on the asyncio loop the server runs on."""

    def __init__(self, delay: float, action: Callable[[str], None]) -> None:
        self.delay, self.action = delay, action
        self.pending: dict[str, asyncio.Task] = {}

    def schedule(self, key: str) -> asyncio.Task:
        self.cancel(key)
        task = asyncio.get_running_loop().create_task(self.later(key))
        self.pending[key] = task
        return task

    def cancel(self, key: str) -> None:
        task = self.pending.pop(key, None)
        if task is not None:
            task.cancel()

    async def later(self, key: str) -> None:
        await asyncio.sleep(self.delay)
        if self.pending.get(key) is asyncio.current_task():
            del self.pending[key]
        try:
            self.action(key)
        except Exception:
            log.exception("dl lsp: a debounced action failed")


class Protocol(LanguageServerProtocol):
    """pygls' protocol, made to answer every request. pygls logs a request whose params do not fit its
    method's types and answers nothing, so the client waits for ever: here it gets InvalidParams, saying
    what did not fit. A request that is not JSON-RPC 2.0, that comes after `shutdown`, or that names a
    notification, gets InvalidRequest."""

    def structure_message(self, data: dict[str, Any]) -> Any:
        if not isinstance(data, dict) or "jsonrpc" not in data:
            return data  # not a message (json.loads calls this for every object in one), or not JSON-RPC 2.0
        if data["jsonrpc"] != JsonRPCProtocol.VERSION:
            if "method" in data and "id" in data:
                self.refuse(data, JsonRpcInvalidRequest(f"JSON-RPC {data['jsonrpc']}: only 2.0 is spoken"))
            return REFUSED
        try:
            message = super().structure_message(data)
        except JsonRpcException as problem:
            if "method" in data and "id" in data:
                why = problem.__cause__
                reason = "; ".join(transform_error(why, format_exception=why_invalid)) if why else problem.message
                self.refuse(data, type(problem)(f"{problem.message}: {data['method']}: {reason}"))
            else:
                log.warning("dl lsp: a notification that does not fit its method's types: %s", data.get("method"))
            return REFUSED
        if "id" in data and "method" in data and not hasattr(message, "id"):
            self.refuse(data, JsonRpcInvalidRequest(f"`{data['method']}` is a notification: it takes no `id`"))
            return REFUSED
        return message

    def handle_message(self, message: Any) -> None:
        if message is REFUSED:
            return
        if isinstance(message, dict):  # no `"jsonrpc"`: `structure_message` left it as it was
            if "id" in message and "method" in message:
                self.refuse(message, JsonRpcInvalidRequest('not a JSON-RPC 2.0 request (no `"jsonrpc": "2.0"`)'))
            return
        if self._shutdown and isinstance(message, RPCRequest) and message.method != types.EXIT:
            self.refuse({"id": message.id}, JsonRpcInvalidRequest("the server is shutting down"))
            return
        super().handle_message(message)

    def refuse(self, request: dict[str, Any], problem: JsonRpcException) -> None:
        """Answer a request with an error (its id, where it is one JSON-RPC allows)."""
        number = request.get("id")
        number = number if isinstance(number, str | int) and not isinstance(number, bool) else None
        log.warning("dl lsp: %s", problem.message)
        self._send_response(number, error=problem.to_response_error())


def why_invalid(problem: BaseException, expected: type | None) -> str:
    """What did not fit, in a malformed request's error: the validator's own words for a value out of range
    (`Position.line should be in range [0:2147483647], but was -1.`), else cattrs' words."""
    if type(problem) is ValueError and problem.args:
        return str(problem)
    return format_exception(problem, expected)


def answered(handler: Callable[[Any], Awaitable[T]]) -> Callable[[Any], Awaitable[T]]:
    """A request handler that logs an exception and answers it with InternalError, saying what failed: one
    bad request never stops the server, and never goes unanswered."""

    async def run(params: Any) -> T:
        try:
            return await handler(params)
        except asyncio.CancelledError:
            raise
        except Exception as bug:
            log.exception("dl lsp: %s failed", handler.__name__)
            what = f"internal error in {handler.__name__}, please report: {type(bug).__name__}: {bug}"
            raise JsonRpcInternalError(what) from bug

    run.__name__ = handler.__name__
    return run


def in_background(compute: Callable[..., T], *args: Any) -> Awaitable[T]:
    """Compute a long answer on a thread, so that the event loop goes on answering (a cancelled request
    stops waiting for it), in a room: its walks of the tree recurse (lang/nesting.py)."""
    return asyncio.get_running_loop().run_in_executor(None, with_room, functools.partial(compute, *args))


class View:
    """A snapshot as the document is now: positions of the text now become positions of the analysed text,
    and spans of the analysed text ranges of the text now (in the client's units)."""

    def __init__(self, snapshot: Snapshot, source: str, edits: Edits, units: Callable[[str], int]) -> None:
        self.snapshot, self.source, self.lines = snapshot, source, edits
        self.columns = Columns(source, units)

    @property
    def typed(self) -> Typed:
        return self.snapshot.typed

    @property
    def path(self) -> str:
        return self.snapshot.path

    def column(self, position: types.Position) -> int:
        """The 1-based column, in code points, of a client position."""
        return self.columns.from_client(position.line, position.character) + 1

    def at(self, position: types.Position) -> tuple[int, int] | None:
        """A client position as the 1-based line and column of the analysed text, if that has the line."""
        line = self.lines.to_old(position.line)
        return None if line is None else (line + 1, self.column(position))

    def range(self, span: Span) -> types.Range | None:
        """A span of the analysed text as a client range now, if the text now has its lines."""
        start, end = self.lines.to_new(span.line - 1), self.lines.to_new(span.end_line - 1)
        if start is None or end is None:
            return None
        return self.columns.range(to_range(span._replace(line=start + 1, end_line=end + 1)))

    def classes(self) -> dict[tuple[int, int], tuple[str, tuple[str, ...]]]:
        """The analysed names' classes (for semantic tokens), at their positions in the text now."""
        snapshot = self.snapshot
        found = snapshot.once("classes", lambda: name_classes(snapshot.typed, snapshot.path))
        if self.lines.none:
            return found
        moved = {}
        for (line, column), shown in found.items():
            now = self.lines.to_new(line - 1)
            if now is not None:
                moved[now + 1, column] = shown
        return moved


def make_server() -> LanguageServer:
    """A server with its features registered; `start_io()` runs it."""
    server = LanguageServer(
        "dl", __version__, text_document_sync_kind=types.TextDocumentSyncKind.Incremental, protocol_cls=Protocol
    )

    def units() -> Callable[[str], int]:
        return server.workspace.position_codec.client_num_units

    def published(uri: str, snapshot: Snapshot) -> None:
        found = diagnostics_for(snapshot.typed, snapshot.path, uri, units())
        if snapshot.failure is not None:
            message, span = snapshot.failure
            found.append(
                types.Diagnostic(
                    range=Columns(snapshot.source, units()).range(to_range(span)),
                    message=message,
                    severity=types.DiagnosticSeverity.Error,
                    source="dl",
                )
            )
        params = types.PublishDiagnosticsParams(uri=uri, diagnostics=found, version=snapshot.version)
        server.text_document_publish_diagnostics(params)

    documents = Documents(published, prepare)
    debounced = Debouncer(DEBOUNCE_S, documents.analyse_soon)

    async def view(uri: str, parsed: bool = False) -> View | None:
        """The last analysis of an open document as it is now (with `parsed`, the last whose text parsed,
        as completion wants while a line is being typed); None for a document that is not open."""
        snapshot = await documents.snapshot(uri)
        source = documents.text(uri)
        if snapshot is None or source is None:
            return None
        if parsed and not snapshot.parses:
            snapshot = documents.parsed.get(uri, snapshot)
        return View(snapshot, source, documents.edits(uri, snapshot.source), units())

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(params: types.DidOpenTextDocumentParams) -> None:
        document = params.text_document
        debounced.cancel(document.uri)
        documents.open(document.uri, document.version, document.text)
        documents.analyse_soon(document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(params: types.DidChangeTextDocumentParams) -> None:
        uri = params.text_document.uri
        document = server.workspace.text_documents.get(uri)
        if document is not None:  # pygls has applied the change
            documents.change(uri, params.text_document.version, document.source)
            debounced.schedule(uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(params: types.DidCloseTextDocumentParams) -> None:
        debounced.cancel(params.text_document.uri)
        documents.close(params.text_document.uri)
        server.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=params.text_document.uri, diagnostics=[])
        )

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    @answered
    async def hover(params: types.HoverParams) -> types.Hover | None:
        found = await view(params.text_document.uri)
        where = found.at(params.position) if found else None
        if where is None:
            return None
        shown = with_room(functools.partial(hover_text, found.typed, found.path, found.snapshot.source, *where))
        if shown is None:
            return None
        text, span = shown
        code, _, doc = text.partition("\n\n")
        value = f"```dl\n{code}\n```" + (f"\n\n{doc}" if doc else "")
        contents = types.MarkupContent(kind=types.MarkupKind.Markdown, value=value)
        return types.Hover(contents=contents, range=found.range(span))

    @server.feature(types.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
    @answered
    async def document_symbol(params: types.DocumentSymbolParams) -> list[types.DocumentSymbol] | None:
        found = await view(params.text_document.uri)
        return None if found is None else await in_background(outline, found)

    @server.feature(types.TEXT_DOCUMENT_SEMANTIC_TOKENS_FULL, LEGEND)
    @answered
    async def semantic_tokens_full(params: types.SemanticTokensParams) -> types.SemanticTokens | None:
        found = await view(params.text_document.uri)
        return None if found is None else await in_background(tokens_of, found, None)

    @server.feature(types.TEXT_DOCUMENT_SEMANTIC_TOKENS_RANGE, LEGEND)
    @answered
    async def semantic_tokens_range(params: types.SemanticTokensRangeParams) -> types.SemanticTokens | None:
        """The tokens overlapping the range; the first one's position is relative to the document's start."""
        found = await view(params.text_document.uri)
        return None if found is None else await in_background(tokens_of, found, params.range)

    @server.feature(types.TEXT_DOCUMENT_DEFINITION)
    @answered
    async def goto_definition(params: types.DefinitionParams) -> types.Location | None:
        found = await view(params.text_document.uri)
        where = found.at(params.position) if found else None
        target = with_room(functools.partial(definition, found.typed, found.path, *where)) if where else None
        if target is None:
            return None
        path, span = target
        if path == found.path:
            shown = found.range(span)
            return types.Location(uri=params.text_document.uri, range=shown) if shown else None
        text = found.typed.program.sources.texts.get(path, "")
        return types.Location(uri=from_fs_path(path) or path, range=Columns(text, units()).range(to_range(span)))

    @server.feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions(trigger_characters=["."]))
    @answered
    async def completion(params: types.CompletionParams) -> types.CompletionList | None:
        found = await view(params.text_document.uri, parsed=True)
        if found is None:
            return None
        line, column = params.position.line + 1, found.column(params.position)
        scope_line = found.lines.nearest_old(params.position.line) + 1
        items = await in_background(completions, found.typed, found.path, found.source, line, column, scope_line)
        lines = source_lines(found.source)
        typed_word = WORD_BEFORE.search(lines[line - 1][: column - 1] if line <= len(lines) else "")
        shown = fewest(items, typed_word.group() if typed_word else "")
        return types.CompletionList(is_incomplete=len(shown) < len(items), items=shown)

    @server.feature(types.TEXT_DOCUMENT_REFERENCES)
    @answered
    async def find_references(params: types.ReferenceParams) -> list[types.Location] | None:
        found = await view(params.text_document.uri)
        where = found.at(params.position) if found else None
        if where is None:
            return None
        include = params.context.include_declaration
        spans = await in_background(references, found.typed, found.path, *where, include)
        shown = (found.range(span) for span in spans)
        return [types.Location(uri=params.text_document.uri, range=each) for each in shown if each is not None]

    @server.feature(types.TEXT_DOCUMENT_FORMATTING)
    @answered
    async def formatting(params: types.DocumentFormattingParams) -> list[types.TextEdit] | None:
        uri = params.text_document.uri
        source = documents.text(uri)
        if source is None:
            return None
        try:
            formatted = await in_background(format_source, source, document_path(uri))
        except DiagnosticError:
            return None  # a file that does not parse is left as it is (its errors are published)
        if formatted == source:
            return []
        lines = source.split("\n")
        end = types.Position(line=len(lines) - 1, character=units()(lines[-1]))
        return [types.TextEdit(range=types.Range(types.Position(0, 0), end), new_text=formatted)]

    @server.feature(types.TEXT_DOCUMENT_SIGNATURE_HELP, types.SignatureHelpOptions(trigger_characters=["(", ","]))
    @answered
    async def signature(params: types.SignatureHelpParams) -> types.SignatureHelp | None:
        found = await view(params.text_document.uri, parsed=True)  # mid-call the text rarely parses
        if found is None:
            return None
        line, column = params.position.line + 1, found.column(params.position)
        return with_room(functools.partial(signature_help, found.typed, found.path, found.source, line, column))

    return server


COMPLETION_ITEMS = 1000  # items sent at most; with more, those starting as the word being typed
WORD_BEFORE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")


def fewest(items: list[types.CompletionItem], typed: str) -> list[types.CompletionItem]:
    """The completion items to send: all of them, or in a file of thousands of declarations those that start
    as the word being typed does (the list is then incomplete, and the client asks again as it grows)."""
    if len(items) <= COMPLETION_ITEMS:
        return items
    return [entry for entry in items if entry.label.startswith(typed)][:COMPLETION_ITEMS]


def prepare(snapshot: Snapshot) -> None:
    """What requests about a position read of a snapshot, computed on the analysis worker rather than by the
    first such request on the event loop: the declarations by line and by name."""
    module = snapshot.typed.program.modules.get(snapshot.path)
    if module is not None:
        module_index(module)


def outline(found: View) -> list[types.DocumentSymbol]:
    """The document's symbols (`symbols`) at their places in the text now; those the last analysis does not
    place (in the lines just edited) are left out until the next."""
    module = found.typed.program.modules.get(found.path)
    shown = []
    for symbol in symbols(module, found.typed) if module is not None else []:
        members = [each for each in symbol.children or () if placed(each, found)]
        if placed(symbol, found):
            symbol.children = members or None
            shown.append(symbol)
    return shown


def placed(symbol: types.DocumentSymbol, found: View) -> bool:
    """Move a symbol's ranges (made from analysed spans) to the text now; whether it has a place there."""
    spans = [
        Span(found.path, part.start.line + 1, part.start.character + 1, part.end.line + 1, part.end.character + 1)
        for part in (symbol.range, symbol.selection_range)
    ]
    whole, name = found.range(spans[0]), found.range(spans[1])
    if whole is None or name is None:
        return False
    symbol.range, symbol.selection_range = whole, name
    return True


def tokens_of(found: View, lines: types.Range | None) -> types.SemanticTokens:
    """The document's semantic tokens now (those overlapping `lines`, if given): lexed from the text now,
    the names classified by the last analysis."""
    tokens = classified_tokens(found.source, found.classes())
    if lines is not None:
        start, end = lines.start, lines.end
        tokens = tokens_in_range(
            tokens,
            (start.line, found.columns.from_client(start.line, start.character)),
            (end.line, found.columns.from_client(end.line, end.character)),
        )
    return types.SemanticTokens(data=encode_tokens(client_tokens(tokens, found.columns)))


def serve() -> int:
    """Run the server on stdin/stdout until the client says exit."""
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(levelname)s: %(message)s")
    make_server().start_io()
    return 0
