"""The language server (`dlrun lsp`, first slice): diagnostics, hover and the outline.

The mapping from checker results to LSP values is tested directly; one end-to-end test starts the
server as a subprocess and speaks JSON-RPC to it over stdio."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from dl import lang, lsp
from dl.lang.diagnostics import Diagnostic, Label, Severity, Span
from lsprotocol import types

PATH = "/tmp/model.dl"
URI = "file:///tmp/model.dl"
SOURCE = """\
# Scales x.
# By two.
fn scale(x: f32[B, 3]) -> f32[B, 3] {
    let h = x * 2.0
    let (a, b) = (h, 1)
    return h
}

struct Layer { w: f32[3, 4] }

const N = 4

fn main() { let y = scale(ones(2, 3)) }
"""
BAD = "fn main() { let x = ones(2, 3) @ ones(2, 3) }\n"


@pytest.fixture(scope="module")
def typed() -> lang.Typed:
    checked = lang.check(SOURCE, PATH)
    assert [d for d in checked.diagnostics if d.is_error] == []
    return checked


def hover(typed: lang.Typed, line: int, column: int) -> str | None:
    found = lsp.hover_text(typed, PATH, SOURCE, line, column)
    return None if found is None else found[0]


def test_spans_become_zero_based_ranges() -> None:
    assert lsp.to_range(Span(PATH, 1, 21, 1, 44)) == types.Range(types.Position(0, 20), types.Position(0, 43))
    assert lsp.to_range(Span(PATH, 3, 1, 5, 2)) == types.Range(types.Position(2, 0), types.Position(4, 1))


def test_contains_is_the_character_under_the_cursor() -> None:
    span = Span(PATH, 2, 5, 2, 8)
    assert [lsp.contains(span, 2, column) for column in (4, 5, 7, 8)] == [False, True, True, False]
    assert not lsp.contains(span, 1, 6)


def test_diagnostics_keep_code_severity_label_notes_and_secondary_spans() -> None:
    diagnostic = Diagnostic(
        "W0301",
        "f32 is widened",
        Span(PATH, 2, 3, 2, 9),
        label="f32[2] + f64[2]",
        severity=Severity.WARNING,
        secondary=(Label(Span(PATH, 1, 1, 1, 4), "declared here"),),
        notes=("write f64 to keep it",),
    )
    shown = lsp.to_lsp_diagnostic(diagnostic, PATH, URI)
    assert (shown.code, shown.source, shown.severity) == ("W0301", "dl", types.DiagnosticSeverity.Warning)
    assert shown.range == types.Range(types.Position(1, 2), types.Position(1, 8))
    assert shown.message == "f32 is widened\nf32[2] + f64[2]\nnote: write f64 to keep it"
    assert shown.related_information[0].message == "declared here"


def test_a_shape_error_is_an_lsp_diagnostic() -> None:
    [shown] = lsp.diagnostics_for(lang.check(BAD, PATH), PATH, URI)
    assert (shown.code, shown.severity) == ("E0302", types.DiagnosticSeverity.Error)
    assert shown.range == types.Range(types.Position(0, 20), types.Position(0, 43))
    assert shown.message.startswith("matmul inner dimensions differ: 3 vs 2")


def test_a_parse_error_is_an_lsp_diagnostic() -> None:
    shown = lsp.diagnostics_for(lang.check("fn main( {\n", PATH), PATH, URI)
    assert shown and all(d.severity == types.DiagnosticSeverity.Error for d in shown)


@pytest.mark.parametrize(
    ("line", "column", "expected"),
    [
        (4, 9, "h: f32[B, 3]"),  # a let-bound name
        (4, 13, "x: f32[B, 3]"),  # a use of a parameter
        (3, 10, "x: f32[B, 3]"),  # the parameter itself
        (5, 10, "a: f32[B, 3]"),  # a name bound by a tuple pattern
        (6, 12, "h: f32[B, 3]"),
        (13, 17, "y: f32[2, 3]"),  # the inferred shape, not just the annotation
    ],
)
def test_hover_shows_the_type_of_the_name_under_the_cursor(typed, line: int, column: int, expected: str) -> None:
    assert hover(typed, line, column) == expected


def test_hover_on_a_function_shows_its_signature_and_doc_comment(typed) -> None:
    assert hover(typed, 3, 5) == "fn scale(x: f32[B, 3]) -> f32[B, 3]\n\nScales x.\nBy two."
    assert hover(typed, 13, 22).startswith("fn scale(x: f32[B, 3]) -> f32[B, 3]")  # at a call


def test_hover_on_an_expression_shows_its_type(typed) -> None:
    assert hover(typed, 13, 36) == "f32[2, 3]"  # inside `ones(2, 3)`, on the closing parenthesis
    assert hover(typed, 8, 1) is None  # a blank line


def test_hover_on_a_file_that_does_not_parse_is_empty() -> None:
    assert lsp.hover_text(lang.check("fn main( {\n", PATH), PATH, "fn main( {\n", 1, 4) is None


def test_symbols_list_functions_structs_and_consts(typed) -> None:
    outline = lsp.symbols(typed.program.modules[PATH], typed)
    assert [(s.name, s.kind) for s in outline] == [
        ("scale", types.SymbolKind.Function),
        ("Layer", types.SymbolKind.Struct),
        ("N", types.SymbolKind.Constant),
        ("main", types.SymbolKind.Function),
    ]
    scale, layer = outline[0], outline[1]
    assert scale.detail == "fn scale(x: f32[B, 3]) -> f32[B, 3]"
    assert scale.selection_range == types.Range(types.Position(2, 3), types.Position(2, 8))
    assert scale.range.start == types.Position(2, 0) and scale.range.end.line == 6
    assert [child.name for child in layer.children] == ["w"]


# ------------------------------------------------------------------ end to end, over stdio


class Client:
    """A minimal LSP client: Content-Length framed JSON-RPC over a subprocess's stdin and stdout."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process
        self.messages: queue.Queue[dict[str, Any]] = queue.Queue()
        self.next_id = 0
        threading.Thread(target=self.read, daemon=True).start()

    def read(self) -> None:
        stream = self.process.stdout
        while True:
            length = None
            while True:
                header = stream.readline()
                if not header:
                    return
                if header in (b"\r\n", b"\n"):
                    break
                name, _, value = header.decode("ascii").partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if length is not None:
                self.messages.put(json.loads(stream.read(length)))

    def send(self, message: dict[str, Any]) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.process.stdin.flush()

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        self.send({"method": method, **({"params": params} if params is not None else {})})

    def request(self, method: str, params: dict[str, Any] | None = None) -> Any:
        self.next_id += 1
        self.send({"id": self.next_id, "method": method, **({"params": params} if params is not None else {})})
        reply = self.wait(lambda m: m.get("id") == self.next_id and "method" not in m)
        assert "error" not in reply, reply
        return reply.get("result")

    def wait(self, wanted, timeout: float = 20.0) -> dict[str, Any]:
        while True:
            try:
                message = self.messages.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError("the language server did not answer in time") from None
            if wanted(message):
                return message


def test_the_server_speaks_lsp_over_stdio(tmp_path: Path) -> None:
    file = tmp_path / "bad.dl"
    uri = file.as_uri()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "dl", "lsp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        client = Client(process)
        capabilities = client.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}})
        assert capabilities["capabilities"]["hoverProvider"]
        assert capabilities["capabilities"]["documentSymbolProvider"]
        client.notify("initialized", {})
        document = {"uri": uri, "languageId": "dl", "version": 1, "text": BAD}
        client.notify("textDocument/didOpen", {"textDocument": document})
        published = client.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics")["params"]
        assert published["uri"] == uri
        [diagnostic] = published["diagnostics"]
        assert (diagnostic["code"], diagnostic["source"], diagnostic["severity"]) == ("E0302", "dl", 1)
        assert diagnostic["range"] == {"start": {"line": 0, "character": 20}, "end": {"line": 0, "character": 43}}

        where = {"textDocument": {"uri": uri}, "position": {"line": 0, "character": 16}}
        shown = client.request("textDocument/hover", where)
        assert "x: _" in shown["contents"]["value"]  # the failed matmul has an unknown type
        assert shown["range"] == {"start": {"line": 0, "character": 16}, "end": {"line": 0, "character": 17}}
        where["position"] = {"line": 0, "character": 22}
        assert "fn ones" in client.request("textDocument/hover", where)["contents"]["value"]

        fixed = "fn main() { let x = ones(2, 3) @ ones(3, 4) }\n"
        client.notify(
            "textDocument/didChange",
            {"textDocument": {"uri": uri, "version": 2}, "contentChanges": [{"text": fixed}]},
        )
        published = client.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics")["params"]
        assert published["diagnostics"] == []
        where["position"] = {"line": 0, "character": 16}
        assert "x: f32[2, 4]" in client.request("textDocument/hover", where)["contents"]["value"]

        # a request about a document the server never saw fails alone; the next one is still answered
        client.send({"id": 99, "method": "textDocument/hover", "params": {**where, "textDocument": {"uri": "x:"}}})
        outline = client.request("textDocument/documentSymbol", {"textDocument": {"uri": uri}})
        assert [symbol["name"] for symbol in outline] == ["main"]

        assert client.request("shutdown") is None
        client.notify("exit")
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
