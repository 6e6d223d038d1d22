"""`dlrun lsp`: a Language Server Protocol server on stdio (pygls 2 and lsprotocol).

The first slice of the editor support: diagnostics on open and on change, the static type under the
cursor on hover, and the outline of a file (document symbols). Everything it knows comes from
`dl.lang.check`, the same checker the CLI runs; the functions that map the checker's results to LSP
values are small and pure, so tests call them without a server.

Positions: DL spans are 1-based with an exclusive end column; LSP positions are 0-based. Columns are
counted in characters (code points), which matches LSP's UTF-16 units outside the astral planes.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from dl import __version__, lang
from dl.lang import ast
from dl.lang.check import Typed
from dl.lang.diagnostics import Diagnostic, Severity, Span
from dl.lang.types import FunctionRef, PrimitiveRef, TupleType, Type
from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

log = logging.getLogger("dl.lsp")

SEVERITIES = {Severity.ERROR: types.DiagnosticSeverity.Error, Severity.WARNING: types.DiagnosticSeverity.Warning}

# ------------------------------------------------------------------ positions and diagnostics


def to_range(span: Span) -> types.Range:
    """A DL span (1-based, end column exclusive) as an LSP range (0-based, end exclusive)."""
    return types.Range(
        start=types.Position(line=max(span.line - 1, 0), character=max(span.column - 1, 0)),
        end=types.Position(line=max(span.end_line - 1, 0), character=max(span.end_column - 1, 0)),
    )


def contains(span: Span, line: int, column: int) -> bool:
    """Whether the 1-based `line`:`column` lies in `span` (the character under the cursor; the end is exclusive)."""
    if span.line <= 0 or not (span.line <= line <= span.end_line):
        return False
    if line == span.line and column < span.column:
        return False
    return not (line == span.end_line and column >= span.end_column)


def to_lsp_diagnostic(diagnostic: Diagnostic, path: str, uri: str) -> types.Diagnostic:
    """One checker diagnostic as LSP shows it. The label and notes follow the message; a diagnostic in
    another file (an import) is shown at the top of this one and names that file."""
    lines = [diagnostic.message]
    if diagnostic.label:
        lines.append(diagnostic.label)
    lines.extend(f"note: {note}" for note in diagnostic.notes)
    here = diagnostic.span.path == path
    if not here:
        lines[0] = f"{diagnostic.span.path}:{diagnostic.span.line}:{diagnostic.span.column}: {diagnostic.message}"
    related = [
        types.DiagnosticRelatedInformation(
            location=types.Location(uri=uri, range=to_range(label.span)), message=label.text
        )
        for label in diagnostic.secondary
        if label.span.path == path
    ]
    return types.Diagnostic(
        range=to_range(diagnostic.span) if here else types.Range(types.Position(0, 0), types.Position(0, 0)),
        message="\n".join(lines),
        severity=SEVERITIES.get(diagnostic.severity, types.DiagnosticSeverity.Error),
        code=diagnostic.code,
        source="dl",
        related_information=related or None,
    )


def diagnostics_for(typed: Typed, path: str, uri: str) -> list[types.Diagnostic]:
    return [to_lsp_diagnostic(diagnostic, path, uri) for diagnostic in typed.diagnostics]


# ------------------------------------------------------------------ hover


def children(node: Any) -> Iterator[Any]:
    """The AST nodes directly inside `node`, in field order."""
    for item in dataclasses.fields(node):
        value = getattr(node, item.name)
        values = value if isinstance(value, tuple) else (value,)
        for child in values:
            if dataclasses.is_dataclass(child) and not isinstance(child, type):
                yield child


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
        for child in children(node):
            walk(child, chain)

    for decl in module.decls:
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


def doc_comment(source: str, decl: ast.FnDecl) -> str:
    """The `#` comment block directly above a `fn`, without the `#`s."""
    lines = source.splitlines()
    found: list[str] = []
    index = decl.span.line - 2
    while 0 <= index < len(lines) and lines[index].lstrip().startswith("#"):
        found.append(lines[index].lstrip()[1:].strip())
        index -= 1
    return "\n".join(reversed(found))


def function_hover(typed: Typed, path: str, source: str, decl: ast.FnDecl) -> str:
    signatures = {signature.name: signature for signature in typed.signatures.get(path, [])}
    shown = str(signatures[decl.name]) if decl.name in signatures else f"fn {decl.name}"
    doc = doc_comment(source, decl)
    return f"{shown}\n\n{doc}" if doc else shown


def hover_text(typed: Typed, path: str, source: str, line: int, column: int) -> tuple[str, Span] | None:
    """What hovering the 1-based `line`:`column` of `path` shows, and the span it is about: `name: type`
    for a name, the type of any other expression, and the signature (and doc comment) of a function."""
    module = typed.program.modules.get(path)
    if module is None:
        return None
    functions = {decl.name: decl for decl in module.decls if isinstance(decl, ast.FnDecl)}
    for decl in functions.values():
        if contains(decl.name_span, line, column):
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
    known = typed.types.get(id(node))
    match node:
        case ast.Name(id=name) if name in functions and (known is None or isinstance(known, FunctionRef)):
            return function_hover(typed, path, source, functions[name])
        case ast.Name() | ast.Field() if isinstance(known, FunctionRef | PrimitiveRef):
            return str(known)
        case ast.Name(id=name) | ast.Field(name=name) if known is not None:
            return f"{name}: {known}"
        case ast.NamePattern(name=name):
            for ancestor in reversed(chain):
                if isinstance(ancestor, ast.Let):
                    for bound, bound_type in pattern_types(ancestor.pattern, typed.types.get(id(ancestor.value))):
                        if bound is node:
                            return f"{name}: {bound_type}"
                    break
            return None
        case ast.Param(name=name) if isinstance(parent, ast.FnDecl):
            signature = next((s for s in typed.signatures.get(path, []) if s.name == parent.name), None)
            found = dict(signature.params) if signature else {}
            return f"{name}: {found[name]}" if name in found else None
        case _ if known is not None:
            return str(known)
    return None


# ------------------------------------------------------------------ outline


def symbols(module: ast.Module, typed: Typed | None = None) -> list[types.DocumentSymbol]:
    """The outline of a module: its functions (with their signatures), structs (with their fields) and consts."""
    signatures = {s.name: str(s) for s in typed.signatures.get(module.path, [])} if typed else {}
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


# ------------------------------------------------------------------ the server

T = TypeVar("T")


def guarded(handler: Callable[[Any], T]) -> Callable[[Any], T | None]:
    """A handler that logs any exception and answers nothing, so one bad request never stops the server."""

    def run(params: Any) -> T | None:
        try:
            return handler(params)
        except Exception:
            log.exception("dl lsp: %s failed", getattr(handler, "__name__", "handler"))
            return None

    run.__name__ = getattr(handler, "__name__", "handler")
    return run


def document_path(uri: str) -> str:
    """The file path the checker sees for a document (imports resolve relative to it)."""
    try:
        return to_fs_path(uri) or uri
    except Exception:
        return uri


def make_server() -> LanguageServer:
    """A server with its features registered; `start_io()` runs it."""
    server = LanguageServer("dl", __version__, text_document_sync_kind=types.TextDocumentSyncKind.Full)
    checked: dict[str, tuple[str, Typed]] = {}  # uri -> (source it was checked from, result)

    def analyse(uri: str) -> tuple[str, str, Typed]:
        source = server.workspace.get_text_document(uri).source
        path = document_path(uri)
        cached = checked.get(uri)
        if cached is None or cached[0] != source:
            cached = (source, lang.check(source, path))
            checked[uri] = cached
        return path, source, cached[1]

    def publish(uri: str) -> None:
        path, _, typed = analyse(uri)
        server.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics_for(typed, path, uri))
        )

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    @guarded
    def did_open(params: types.DidOpenTextDocumentParams) -> None:
        publish(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    @guarded
    def did_change(params: types.DidChangeTextDocumentParams) -> None:
        publish(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    @guarded
    def did_close(params: types.DidCloseTextDocumentParams) -> None:
        checked.pop(params.text_document.uri, None)
        server.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=params.text_document.uri, diagnostics=[])
        )

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    @guarded
    def hover(params: types.HoverParams) -> types.Hover | None:
        path, source, typed = analyse(params.text_document.uri)
        found = hover_text(typed, path, source, params.position.line + 1, params.position.character + 1)
        if found is None:
            return None
        text, span = found
        code, _, doc = text.partition("\n\n")
        shown = f"```dl\n{code}\n```" + (f"\n\n{doc}" if doc else "")
        return types.Hover(
            contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=shown),
            range=to_range(span),
        )

    @server.feature(types.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
    @guarded
    def document_symbol(params: types.DocumentSymbolParams) -> list[types.DocumentSymbol] | None:
        path, _, typed = analyse(params.text_document.uri)
        module = typed.program.modules.get(path)
        return symbols(module, typed) if module is not None else []

    return server


def serve() -> int:
    """Run the server on stdin/stdout until the client says exit."""
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(levelname)s: %(message)s")
    make_server().start_io()
    return 0
