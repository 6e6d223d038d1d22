"""`dlrun lsp` driven by a real client library, pygls' `LanguageClient`, on a real file
(examples/train.dl, which imports the stdlib): every feature once, over stdio."""

from __future__ import annotations

import asyncio
import sys

from conftest import ROOT
from lsprotocol import types
from pygls.lsp.client import LanguageClient

TRAIN = ROOT / "examples" / "train.dl"


def position_of(source: str, text: str, occurrence: int = 0, offset: int = 0) -> types.Position:
    """The LSP position of the `occurrence`-th `text` in `source` (plus `offset` characters)."""
    index = -1
    for _ in range(occurrence + 1):
        index = source.index(text, index + 1)
    line = source.count("\n", 0, index)
    column = index - (source.rfind("\n", 0, index) + 1)
    return types.Position(line=line, character=column + offset)


async def session() -> dict:
    source = TRAIN.read_text()
    uri = TRAIN.as_uri()
    document = types.TextDocumentIdentifier(uri=uri)
    client = LanguageClient("dl-test-client", "1.0")
    published: asyncio.Queue = asyncio.Queue()

    @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def on_diagnostics(params: types.PublishDiagnosticsParams) -> None:
        published.put_nowait(params)

    await client.start_io(sys.executable, "-m", "dl", "lsp")
    found: dict = {}
    try:
        params = types.InitializeParams(capabilities=types.ClientCapabilities(), process_id=None, root_uri=None)
        found["initialize"] = await client.initialize_async(params)
        client.initialized(types.InitializedParams())
        item = types.TextDocumentItem(uri=uri, language_id="dl", version=1, text=source)
        client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=item))
        found["diagnostics"] = await asyncio.wait_for(published.get(), 30)

        def at(text: str, occurrence: int = 0, offset: int = 0) -> types.Position:
            return position_of(source, text, occurrence, offset)

        hover = types.HoverParams(text_document=document, position=at("train_x", 1))
        found["hover"] = await client.text_document_hover_async(hover)
        symbols = types.DocumentSymbolParams(text_document=document)
        found["symbols"] = await client.text_document_document_symbol_async(symbols)
        tokens = types.SemanticTokensParams(text_document=document)
        found["tokens"] = await client.text_document_semantic_tokens_full_async(tokens)
        where = types.DefinitionParams(text_document=document, position=at("forward(m, x)", 0, 1))
        found["definition"] = await client.text_document_definition_async(where)
        where = types.DefinitionParams(text_document=document, position=at("nn.cross_entropy", 0, 4))
        found["stdlib definition"] = await client.text_document_definition_async(where)
        context = types.ReferenceContext(include_declaration=True)
        where = types.ReferenceParams(text_document=document, position=at("fn loss", 0, 3), context=context)
        found["references"] = await client.text_document_references_async(where)
        where = types.CompletionParams(text_document=document, position=at("m.w1", 0, 2))
        found["completion"] = await client.text_document_completion_async(where)
        where = types.SignatureHelpParams(text_document=document, position=at("nn.linear(x, m.w1", 0, 10))
        found["signature"] = await client.text_document_signature_help_async(where)
        options = types.FormattingOptions(tab_size=4, insert_spaces=True)
        formatting = types.DocumentFormattingParams(text_document=document, options=options)
        found["formatting"] = await client.text_document_formatting_async(formatting)
        await client.shutdown_async(None)
        client.exit(None)
    finally:
        await client.stop()
    return found


def test_every_feature_over_stdio_with_pygls_client() -> None:
    found = asyncio.run(session())
    capabilities = found["initialize"].capabilities
    assert capabilities.hover_provider and capabilities.document_formatting_provider
    assert list(found["diagnostics"].diagnostics) == []  # examples/train.dl checks cleanly
    assert "train_x: f32[_, 64]" in found["hover"].contents.value
    names = [symbol.name for symbol in found["symbols"]]
    assert names[:2] == ["HIDDEN", "BATCH"] and {"MLP", "forward", "loss", "main"} <= set(names)
    assert len(found["tokens"].data) % 5 == 0 and len(found["tokens"].data) > 500
    definition = found["definition"]
    forward = next(n for n, line in enumerate(TRAIN.read_text().splitlines()) if line.startswith("fn forward"))
    assert definition.uri == TRAIN.as_uri() and definition.range.start.line == forward  # `fn forward` (0-based)
    assert found["stdlib definition"].uri.endswith("/stdlib/nn.dl")
    assert len(found["references"]) == 2  # the declaration and `value_and_grad(loss)`
    assert {item.label for item in found["completion"].items} == {"w1", "b1", "w2", "b2"}
    [signature] = found["signature"].signatures
    assert signature.label.startswith("fn linear(")
    assert list(found["formatting"]) == []  # the example is formatted
