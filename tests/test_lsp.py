"""The language server (`dlrun lsp`): diagnostics (debounced on change), hover, the outline, semantic tokens,
go to definition, find references, completion and signature help.

The mapping from checker results to LSP values is tested directly; one end-to-end test starts the
server as a subprocess and speaks JSON-RPC to it over stdio."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import check_golden
from dl import lang, lsp
from dl.lang.diagnostics import Diagnostic, Label, Severity, Span
from dl.lang.modules import stdlib_path
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
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


def test_a_mistake_inside_an_imported_function_is_shown_at_the_call(tmp_path: Path) -> None:
    """`nn.linear` checked for the caller's arguments goes wrong inside stdlib/nn.dl: the editor shows it at
    the call, with related information at the `@` in nn.dl, not at 1:1 of the document."""
    source = "import nn\nfn main() {\n    print(nn.linear(ones(4, 3), ones(5, 2), zeros(2)))\n}\n"
    path = str(tmp_path / "model.dl")
    typed = lang.check(source, path)
    [shown] = lsp.diagnostics_for(typed, path, "file://" + path)
    assert (shown.code, shown.severity) == ("E0302", types.DiagnosticSeverity.Error)
    assert shown.range == types.Range(types.Position(2, 10), types.Position(2, 53))
    assert shown.message.startswith("matmul inner dimensions differ: 3 vs 5\n`linear` is given (f32[4, 3], f32[5, 2]")
    [related] = shown.related_information
    nn_path = stdlib_path("nn")
    assert related.location.uri == nn_path.as_uri()
    line = nn_path.read_text().splitlines()[related.location.range.start.line]
    start, end = related.location.range.start.character, related.location.range.end.character
    assert line[start:end] == "x @ w"
    assert related.message == "f32[4, 3] @ f32[5, 2]"


def test_a_byte_order_mark_at_the_start_of_a_document_is_a_blank_there() -> None:
    """An editor's document may begin with the byte order mark its file has (`dlrun check` drops a file's):
    the diagnostics are those of the text without it, their columns on line 1 counting it."""
    [shown] = lsp.diagnostics_for(lang.check("\ufeff" + BAD, PATH), PATH, URI)
    assert (shown.code, shown.range) == ("E0302", types.Range(types.Position(0, 21), types.Position(0, 44)))
    assert lsp.diagnostics_for(lang.check("\ufefffn main() {\n    print(1)\n}\n", PATH), PATH, URI) == []


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


def test_hover_on_a_module_s_function_shows_its_signature_and_doc_comment() -> None:
    source = "import nn\nfn main() {\n    print(nn.linear(ones(2, 3), ones(3, 4), zeros(4)))\n}\n"
    checked = lang.check(source, PATH)
    shown, _ = lsp.hover_text(checked, PATH, source, 3, 15)
    assert shown.startswith("fn linear(x: f32[2, 3], w: f32[3, 4], b: f32[4]) -> f32[2, 4]\n\nlinear(x: F[..., I]")
    assert "torch.nn.Linear" in shown  # nn.dl's doc comment of `linear`


def test_hover_names_another_module_s_structs_as_the_file_does(tmp_path: Path) -> None:
    from test_cli import LAYERS, USES_LAYERS

    (tmp_path / "layers.dl").write_text(LAYERS)
    path = tmp_path / "model.dl"
    path.write_text(USES_LAYERS)
    checked = lang.check(USES_LAYERS, str(path))
    shown, _ = lsp.hover_text(checked, str(path), USES_LAYERS, 3, 5)
    assert shown == "fn forward(l: ly.Linear[3, 2], x: f32[B, 3]) -> f32[B, 2]"
    assert [s.detail for s in lsp.symbols(checked.program.modules[str(path)], checked)][1:3] == [
        "fn forward(l: ly.Linear[3, 2], x: f32[B, 3]) -> f32[B, 2]",
        "fn both() -> (ly.Plain, Own)",
    ]


def test_hover_on_an_expression_shows_its_type(typed) -> None:
    assert hover(typed, 13, 36) == "f32[2, 3]"  # inside `ones(2, 3)`, on the closing parenthesis
    assert hover(typed, 8, 1) is None  # a blank line


CALLED_TWICE = """\
fn mix(a, b) {
    let (c, k) = (a * b, 2.0)
    return c + b * k
}

fn main() {
    let u = mix([1.0, 2.0], 3.0)
    let v = mix(4.0, 5.0)
}
"""


def test_hover_in_a_generic_function_shows_each_calls_type() -> None:
    """A function without annotations is checked for each call's types: its names show all of them, not the
    last call's alone."""
    checked = lang.check(CALLED_TWICE, PATH)
    assert [d for d in checked.diagnostics if d.is_error] == []
    shown = {
        (line, column): lsp.hover_text(checked, PATH, CALLED_TWICE, line, column)[0]
        for line, column in ((1, 8), (2, 10), (2, 20), (3, 12), (3, 16), (7, 9))
    }
    assert shown == {
        (1, 8): "a: f32[2] or f32 (by call)",  # the parameter
        (2, 10): "c: f32[2] or f32 (by call)",  # bound by a tuple pattern
        (2, 20): "f32[2] or f32 (by call)",  # an expression: `a * b`
        (3, 12): "c: f32[2] or f32 (by call)",
        (3, 16): "b: f32",  # the same in both calls
        (7, 9): "u: f32[2]",
    }


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


# ------------------------------------------------------------------ semantic tokens

TOKENS = """\
# doc
struct Layer { w: f32[3, 4] }
const N = 4
fn scale(x: f32[B, 3], p: Layer) -> f32[B, 4] {
    let h = x * 2.0  # not a "string"
    print("a # b", N)
    return h @ p.w
}
"""


def test_semantic_tokens_classify_keywords_names_literals_comments_and_operators() -> None:
    checked = lang.check(TOKENS, PATH)
    assert checked.errors == []
    found = {
        (line, column): (kind, modifiers)
        for line, column, _, kind, modifiers in lsp.semantic_tokens(TOKENS, checked, PATH)
    }
    assert found[(1, 1)] == ("comment", ())
    assert found[(2, 1)] == ("keyword", ())
    assert found[(2, 8)] == ("struct", ("declaration",))
    assert found[(2, 16)] == ("property", ("declaration",))
    assert found[(2, 19)] == ("type", ())  # f32
    assert found[(2, 23)] == ("number", ())
    assert found[(3, 7)] == ("variable", ("declaration", "readonly"))
    assert found[(4, 4)] == ("function", ("declaration",))
    assert found[(4, 10)] == ("parameter", ("declaration",))
    assert found[(4, 17)] == ("typeParameter", ())  # the dimension variable B
    assert found[(4, 27)] == ("struct", ())
    assert found[(4, 34)] == ("operator", ())  # ->
    assert found[(5, 9)] == ("variable", ("declaration",))
    assert found[(5, 13)] == ("parameter", ())
    assert found[(5, 15)] == ("operator", ())
    assert found[(5, 17)] == ("number", ())
    assert found[(5, 22)] == ("comment", ())  # `#` outside a string starts a comment
    assert found[(6, 5)] == ("function", ("defaultLibrary",))  # a built-in
    assert found[(6, 11)] == ("string", ())  # `#` inside a string does not
    assert found[(6, 20)] == ("variable", ("readonly",))
    assert found[(7, 12)] == ("variable", ())
    assert found[(7, 16)] == ("parameter", ())
    assert found[(7, 18)] == ("property", ())
    assert (6, 10) not in found  # punctuation is not highlighted


def test_semantic_tokens_tell_user_functions_from_built_ins(typed) -> None:
    found = {
        (line, column): (kind, modifiers)
        for line, column, _, kind, modifiers in lsp.semantic_tokens(SOURCE, typed, PATH)
    }
    assert found[(13, 21)] == ("function", ())  # scale
    assert found[(13, 27)] == ("function", ("defaultLibrary",))  # ones


def test_semantic_tokens_of_a_file_that_does_not_parse_come_from_the_lexer() -> None:
    source = "fn main( {\n    let x = 1 $ 2\n}\n"
    found = lsp.semantic_tokens(source, lang.check(source, PATH), PATH)
    assert found[:2] == [(1, 1, 2, "keyword", ()), (1, 4, 4, "function", ("declaration",))]
    assert (2, 5, 3, "keyword", ()) in found  # the line with a bad character keeps what came before it


def test_semantic_tokens_are_encoded_relative_to_the_previous_token() -> None:
    found = [(2, 5, 3, "keyword", ()), (1, 1, 2, "keyword", ()), (2, 9, 1, "variable", ("declaration", "readonly"))]
    keyword, variable = lsp.TOKEN_TYPES.index("keyword"), lsp.TOKEN_TYPES.index("variable")
    assert lsp.encode_tokens(found) == [0, 0, 2, keyword, 0, 1, 4, 3, keyword, 0, 0, 4, 1, variable, 0b11]


def test_semantic_tokens_in_a_range_are_those_overlapping_it() -> None:
    found = lsp.semantic_tokens(TOKENS, lang.check(TOKENS, PATH), PATH)
    inside = lsp.tokens_in_range(found, (4, 8), (5, 9))  # from `let h = x` on line 5 to `print` on line 6
    assert [(line, column) for line, column, *_ in inside] == [
        (5, 9),
        (5, 11),
        (5, 13),
        (5, 15),
        (5, 17),
        (5, 22),
        (6, 5),
    ]
    assert lsp.tokens_in_range(found, (0, 0), (100, 0)) == found
    assert lsp.tokens_in_range(found, (7, 0), (7, 1)) == []  # `}` alone
    # encoded, the first token of a range is relative to the document's start, as LSP wants
    assert lsp.encode_tokens(inside)[:2] == [4, 8]


# Non-ASCII before the code: `é` is one UTF-16 unit and one code point, `😀` two units and one code point.
WIDE = 'fn main() { print("é😀", ones(2, 3) @ ones(2, 3)) }  # ½ 😀\n'
WIDE_AT = WIDE.index("ones(2, 3) @")  # in code points; LSP counts this column in UTF-16 units


def utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def test_columns_convert_code_points_to_utf16_and_back() -> None:
    columns = lsp.Columns(WIDE)
    emoji = WIDE.index("😀")
    assert [columns.to_client(0, column) for column in (0, emoji, emoji + 1, WIDE_AT)] == [
        0,
        emoji,
        emoji + 2,
        WIDE_AT + 1,
    ]
    assert [columns.from_client(0, units) for units in (emoji, emoji + 2, WIDE_AT + 1)] == [emoji, emoji + 1, WIDE_AT]
    assert columns.from_client(0, emoji + 1) == emoji + 1  # inside the surrogate pair: the character after it
    assert columns.to_client(5, 7) == 7 and columns.from_client(5, 7) == 7  # lines past the end stay as they are
    assert lsp.Columns("ascii").lines is None


def test_diagnostics_ranges_are_in_utf16_units() -> None:
    [shown] = lsp.diagnostics_for(lang.check(WIDE, PATH), PATH, URI)
    end = WIDE.index(")) }") + 1
    assert shown.range == types.Range(types.Position(0, utf16(WIDE[:WIDE_AT])), types.Position(0, utf16(WIDE[:end])))


def test_semantic_tokens_columns_and_lengths_are_in_utf16_units() -> None:
    found = lsp.semantic_tokens(WIDE, lang.check(WIDE, PATH), PATH)
    shown = {(column, length, kind) for _, column, length, kind, _ in lsp.client_tokens(found, lsp.Columns(WIDE))}
    assert (WIDE.index('"é') + 1, utf16('"é😀"'), "string") in shown
    assert (utf16(WIDE[:WIDE_AT]) + 1, 4, "function") in shown  # `ones`, one unit further right than in code points
    comment = WIDE.index("#")
    assert (utf16(WIDE[:comment]) + 1, utf16(WIDE[comment:-1]), "comment") in shown


# ------------------------------------------------------------------ go to definition and completion

MODULES = {
    "nn.dl": "struct Dense { w: f32[3, 4] }\nfn init() -> Dense { return Dense { w: ones(3, 4) } }\n",
    "main.dl": """\
import nn
struct Layer { w: f32[3, 4] }
fn scale(x: f32[B, 3], p: Layer) -> f32[B, 4] {
    let h = x * 2.0
    for i in 0..3 { let h = h + 1.0 }
    return h @ p.w
}
fn main() {
    let d = nn.init()
    let l = Layer { w: ones(3, 4) }
    let y = scale(ones(2, 3), l)
}
""",
}


@pytest.fixture
def project(tmp_path: Path) -> tuple[str, str, lang.Typed]:
    for name, text in MODULES.items():
        (tmp_path / name).write_text(text)
    path = str(tmp_path / "main.dl")
    checked = lang.check(MODULES["main.dl"], path)
    assert checked.errors == []
    return path, str(tmp_path / "nn.dl"), checked


def where(path: str, line: int, column: int, end: int) -> tuple[str, Span]:
    return path, Span(path, line, column, line, end)


@pytest.mark.parametrize(
    ("line", "column", "expected"),
    [
        (6, 12, (4, 9, 10)),  # a let-bound local
        (6, 16, (3, 24, 25)),  # a parameter
        (6, 18, (2, 16, 17)),  # a struct field
        (11, 13, (3, 4, 9)),  # a function, at a call
        (11, 31, (10, 9, 10)),  # a local of another function
        (10, 13, (2, 8, 13)),  # a struct, in a literal
        (3, 27, (2, 8, 13)),  # a struct, in a type
        (3, 5, (3, 4, 9)),  # a declaration is its own definition
    ],
)
def test_definition_of_locals_functions_structs_and_fields(project, line: int, column: int, expected) -> None:
    path, _, checked = project
    assert lsp.definition(checked, path, line, column) == where(path, *expected)


def test_definition_of_an_imported_module_and_its_members(project) -> None:
    path, nn, checked = project
    assert lsp.definition(checked, path, 1, 8) == where(nn, 1, 1, 1)  # `import nn`
    assert lsp.definition(checked, path, 9, 13) == where(nn, 1, 1, 1)  # `nn` in `nn.init()`
    assert lsp.definition(checked, path, 9, 16) == where(nn, 2, 4, 8)  # `init` in `nn.init()`
    assert lsp.definition(checked, path, 8, 1) is None


def test_definition_of_a_generic_struct_given_sizes(tmp_path: Path) -> None:
    """`layers.Linear[3, 2]` and `Pair[4]` in types go to their structs, as `layers.Linear` and `Pair` do."""
    (tmp_path / "layers.dl").write_text("struct Linear[I, O] { w: f32[I, O] }\n")
    source = (
        "import layers\nstruct Pair[N] { a: f32[N] }\n"
        "fn f(p: layers.Linear[3, 2], q: Pair[4]) -> f32 { return sum(p.w) + sum(q.a) }\n"
    )
    path = str(tmp_path / "main.dl")
    checked = lang.check(source, path)
    assert checked.errors == []
    assert lsp.definition(checked, path, 3, 17) == where(str(tmp_path / "layers.dl"), 1, 8, 14)
    assert lsp.definition(checked, path, 3, 34) == where(path, 2, 8, 12)
    assert lsp.definition(checked, path, 3, 45) is None  # `f32`, a dtype


def test_references_of_a_generic_struct_reach_it_given_sizes() -> None:
    """`Pair[4]` in a type is a reference to `struct Pair`, as `Pair` and `Pair { ... }` are."""
    source = (
        "struct Pair[N] { a: f32[N] }\n"
        "fn f(q: Pair[4], r: Pair[N]) -> f32[4] { return q.a }\n"
        "fn main() { print(f(Pair { a: zeros(4) }, Pair { a: zeros(2) })) }\n"
    )
    checked = lang.check(source, PATH)
    assert checked.errors == []
    expected = [(1, 8, 12), (2, 9, 13), (2, 21, 25), (3, 21, 25), (3, 43, 47)]
    assert spans(lsp.references(checked, PATH, 1, 9)) == expected
    assert spans(lsp.references(checked, PATH, 2, 10)) == expected  # from the sized type itself
    assert spans(lsp.references(checked, PATH, 2, 38)) == []  # `f32[4]`, a dtype


def test_definition_finds_the_nearest_binding_in_scope() -> None:
    source = "fn f(x: f32) -> f32 {\n    let x = x + 1.0\n    return x\n}\n"
    checked = lang.check(source, PATH)
    assert lsp.definition(checked, PATH, 2, 13) == where(PATH, 1, 6, 7)  # the `x` being added is the param
    assert lsp.definition(checked, PATH, 3, 12) == where(PATH, 2, 9, 10)


def labels(found: list[types.CompletionItem]) -> dict[str, str | None]:
    return {entry.label: entry.detail for entry in found}


def test_completion_offers_the_scope_module_names_keywords_and_built_ins(project) -> None:
    path, _, checked = project
    found = labels(lsp.completions(checked, path, MODULES["main.dl"], 6, 5))
    assert found["h"] == "f32[B, 3]" and found["x"] == "f32[B, 3]" and found["p"] == "Layer"
    assert "i" not in found and "y" not in found  # `i` is only in the loop, `y` in another function
    assert found["scale"] == "fn scale(x: f32[B, 3], p: Layer) -> f32[B, 4]"
    assert found["Layer"] == "struct Layer" and found["nn"] == "module"
    assert "let" in found and found["ones"] == "built-in fn ones"


def test_completion_after_a_dot_lists_struct_fields_and_module_members(project) -> None:
    path, _, checked = project
    typing = MODULES["main.dl"].replace("return h @ p.w", "return h @ p.").replace("let y =", "d.")
    assert labels(lsp.completions(checked, path, typing, 6, 18)) == {"w": "f32[3, 4]"}
    assert labels(lsp.completions(checked, path, typing, 11, 7)) == {"w": "f32[3, 4]"}  # `d` is an nn.Dense
    typing = typing.replace("return h @ p.", "return nn.")
    assert labels(lsp.completions(checked, path, typing, 6, 15)) == {
        "Dense": "struct Dense",
        "init": "fn init() -> Dense",
    }
    assert lsp.completions(checked, path, typing.replace("return nn.", "return h."), 6, 14) == []  # not a struct


# ------------------------------------------------------------------ references and signature help


def spans(found: list[Span]) -> list[tuple[int, int, int]]:
    return [(span.line, span.column, span.end_column) for span in found]


@pytest.mark.parametrize(
    ("line", "column", "expected"),
    [
        (4, 9, [(4, 9, 10), (5, 29, 30), (6, 12, 13)]),  # a local, from its binding: the loop's `h + 1.0` too
        (6, 12, [(4, 9, 10), (5, 29, 30), (6, 12, 13)]),  # ... and from a use
        (5, 25, [(5, 25, 26)]),  # the loop's own `h` is another local, never used
        (3, 24, [(3, 24, 25), (6, 16, 17)]),  # a parameter
        (6, 18, [(2, 16, 17), (6, 18, 19)]),  # a struct field
        (11, 13, [(3, 4, 9), (11, 13, 18)]),  # a function
        (2, 8, [(2, 8, 13), (3, 27, 32), (10, 13, 18)]),  # a struct: in a type and in a literal
        (1, 8, [(1, 1, 10), (9, 13, 15)]),  # an imported module
        (8, 1, []),
    ],
)
def test_references_are_the_names_with_the_same_definition(project, line: int, column: int, expected) -> None:
    path, _, checked = project
    assert spans(lsp.references(checked, path, line, column)) == expected


def test_references_without_the_declaration_and_of_a_const(project, typed) -> None:
    path, _, checked = project
    assert spans(lsp.references(checked, path, 6, 12, include_declaration=False)) == [(5, 29, 30), (6, 12, 13)]
    source = "const N = 4\nfn f() -> i32 { return N + N }\n"
    checked = lang.check(source, PATH)
    assert spans(lsp.references(checked, PATH, 2, 24)) == [(1, 1, 12), (2, 24, 25), (2, 28, 29)]
    assert spans(lsp.references(checked, PATH, 1, 7, include_declaration=False)) == [(2, 24, 25), (2, 28, 29)]


def active(found: types.SignatureHelp | None) -> tuple[str, str] | None:
    """The signature shown and the text of its active parameter."""
    if found is None:
        return None
    [shown] = found.signatures
    start, end = shown.parameters[found.active_parameter].label
    return shown.label, shown.label[start:end]


CALLS = """\
# Adds.
fn add(a: f32[3], b: f32[3]) -> f32[3] { return a + b }
fn main() {
    let x = sum(ones(2, 3), axis=1)
    let y = add(ones(3), [1, 2][0] + ones(3))
    let t = (1, 2)
}
"""


@pytest.mark.parametrize(
    ("line", "text", "expected"),
    [
        (4, "let x = sum(", ("fn sum(x, axis=_, keepdims=false)", "x")),
        (4, "let x = sum(ones(2, ", ("fn ones(*dims, dtype=f32)", "*dims")),  # variadic: every extra argument
        (4, "let x = sum(ones(2, 3), axis=", ("fn sum(x, axis=_, keepdims=false)", "axis=_")),  # named
        (5, "let y = add(ones(3), [1, ", ("fn add(a: f32[3], b: f32[3]) -> f32[3]", "b: f32[3]")),  # nested commas
        (5, "let y = add(", ("fn add(a: f32[3], b: f32[3]) -> f32[3]", "a: f32[3]")),
        (6, "let t = (1, ", None),  # a tuple is no call
        (2, "fn add(a: f32[3], ", None),  # nor is a declaration
        (4, "let x = ", None),
    ],
)
def test_signature_help_inside_calls(line: int, text: str, expected) -> None:
    checked = lang.check(CALLS, PATH)
    column = CALLS.splitlines()[line - 1].index(text) + len(text) + 1
    assert active(lsp.signature_help(checked, PATH, CALLS, line, column)) == expected


def test_signature_help_shows_doc_comments_and_optional_parameters() -> None:
    checked = lang.check(CALLS, PATH)
    found = lsp.signature_help(checked, PATH, CALLS, 5, 17)
    assert found.signatures[0].documentation.value == "Adds."
    source = 'fn main() { assert(true, "m") }\n'
    assert active(lsp.signature_help(lang.check(source, PATH), PATH, source, 1, 26)) == (
        'fn assert(condition, message="assertion failed")',
        'message="assertion failed"',
    )


def test_a_newer_change_cancels_the_pending_one() -> None:
    import asyncio

    ran: list[str] = []

    async def edits() -> None:
        debouncer = lsp.Debouncer(0.05, ran.append)
        debouncer.schedule("a")
        await asyncio.sleep(0.01)
        last = debouncer.schedule("a")
        debouncer.schedule("b")
        debouncer.cancel("b")
        await last
        assert debouncer.pending == {}

    asyncio.run(edits())
    assert ran == ["a"]


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
        assert capabilities["capabilities"]["definitionProvider"]
        assert "." in capabilities["capabilities"]["completionProvider"]["triggerCharacters"]
        assert capabilities["capabilities"]["referencesProvider"]
        assert capabilities["capabilities"]["semanticTokensProvider"]["range"]
        assert capabilities["capabilities"]["signatureHelpProvider"]["triggerCharacters"] == ["(", ","]
        legend = capabilities["capabilities"]["semanticTokensProvider"]["legend"]
        assert legend["tokenModifiers"] == ["declaration", "readonly", "defaultLibrary"]
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
        for version, text in ((2, BAD.replace("ones(2, 3) }", "ones(2, 5) }")), (3, fixed)):  # typed quickly
            change = {"textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": text}]}
            client.notify("textDocument/didChange", change)
        published = client.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics")["params"]
        assert (published["diagnostics"], published["version"]) == ([], 3)  # the first change was never published
        where["position"] = {"line": 0, "character": 16}
        assert "x: f32[2, 4]" in client.request("textDocument/hover", where)["contents"]["value"]

        # a request about a document the server never saw fails alone; the next one is still answered
        client.send({"id": 99, "method": "textDocument/hover", "params": {**where, "textDocument": {"uri": "x:"}}})
        outline = client.request("textDocument/documentSymbol", {"textDocument": {"uri": uri}})
        assert [symbol["name"] for symbol in outline] == ["main"]

        structs = "struct L { w: f32[2] }\nfn main() { let l = L { w: ones(2) }\n    let v = l.w }\n"
        for version, text in ((4, structs), (5, structs.replace("l.w", "l."))):  # the second does not parse
            change = {"textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": text}]}
            client.notify("textDocument/didChange", change)
            client.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics")
            if version == 4:
                where["position"] = {"line": 2, "character": 12}
                found = client.request("textDocument/definition", where)
                assert found["uri"] == uri
                assert found["range"] == {"start": {"line": 1, "character": 16}, "end": {"line": 1, "character": 17}}
                tokens = client.request("textDocument/semanticTokens/full", {"textDocument": {"uri": uri}})
                keyword = legend["tokenTypes"].index("keyword")
                struct = legend["tokenTypes"].index("struct")
                assert tokens["data"][:10] == [0, 0, 6, keyword, 0, 0, 7, 1, struct, 1]  # `struct L`: a declaration
                lines = {"start": {"line": 1, "character": 12}, "end": {"line": 2, "character": 0}}
                found = client.request(
                    "textDocument/semanticTokens/range", {"textDocument": {"uri": uri}, "range": lines}
                )
                assert found["data"][:5] == [1, 12, 3, keyword, 0]  # `let`, relative to the document's start
                assert sum(found["data"][::5]) == 1  # all on line 2
                found = client.request("textDocument/references", {**where, "context": {"includeDeclaration": True}})
                assert [(item["range"]["start"]["line"], item["range"]["start"]["character"]) for item in found] == [
                    (1, 16),
                    (2, 12),
                ]
                where["position"] = {"line": 1, "character": 32}  # in `ones(2)`
                shown = client.request("textDocument/signatureHelp", where)
                assert shown["signatures"][0]["label"] == "fn ones(*dims, dtype=f32)"
                assert shown["activeParameter"] == 0
        where["position"] = {"line": 2, "character": 14}
        found = client.request("textDocument/completion", where)
        assert [(item["label"], item["detail"]) for item in found["items"]] == [("w", "f32[2]")]

        assert capabilities["capabilities"]["documentFormattingProvider"]
        messy = "fn main() {\n  let x = ones(2)*2.0  # doubled\n}\n"
        change = {"textDocument": {"uri": uri, "version": 6}, "contentChanges": [{"text": messy}]}
        client.notify("textDocument/didChange", change)
        options = {"textDocument": {"uri": uri}, "options": {"tabSize": 4, "insertSpaces": True}}
        [edit] = client.request("textDocument/formatting", options)
        assert edit["newText"] == "fn main() {\n    let x = ones(2) * 2.0  # doubled\n}\n"
        assert edit["range"] == {"start": {"line": 0, "character": 0}, "end": {"line": 3, "character": 0}}
        change = {"textDocument": {"uri": uri, "version": 7}, "contentChanges": [{"text": edit["newText"]}]}
        client.notify("textDocument/didChange", change)
        assert client.request("textDocument/formatting", options) == []

        assert client.request("shutdown") is None
        client.notify("exit")
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


def start_server() -> tuple[subprocess.Popen, Client]:
    """`dlrun lsp` as a subprocess, initialized (as an editor that counts positions in UTF-16, LSP's default)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "dl", "lsp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    client = Client(process)
    client.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}})
    client.notify("initialized", {})
    return process, client


def stop_server(process: subprocess.Popen, client: Client) -> None:
    try:
        if process.poll() is None:
            assert client.request("shutdown") is None
            client.notify("exit")
            assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


def test_an_edit_of_an_imported_document_checks_its_importers_again(tmp_path: Path) -> None:
    """main.dl imports lib.dl, both open: the edited, unsaved text of lib.dl is what main.dl is checked
    against, when main.dl is opened and again after each edit of lib.dl."""
    lib, main = tmp_path / "lib.dl", tmp_path / "main.dl"
    lib.write_text("fn scale(x: f32[N], k: f32) -> f32[N] {\n    return x * k\n}\n")
    main.write_text("import lib\nfn main() {\n    print(lib.scale(ones(3), 2.0))\n}\n")
    process, client = start_server()

    def published(uri: str) -> list[dict]:
        found = client.wait(
            lambda m: m.get("method") == "textDocument/publishDiagnostics" and m["params"]["uri"] == uri
        )
        return found["params"]["diagnostics"]

    try:
        for path, version in ((lib, 1), (main, 1)):
            item = {"uri": path.as_uri(), "languageId": "dl", "version": version, "text": path.read_text()}
            client.notify("textDocument/didOpen", {"textDocument": item})
            assert published(path.as_uri()) == []
        wider = lib.read_text().replace("k: f32)", "k: f32, j: f32)").replace("x * k", "x * k * j")
        change = {"textDocument": {"uri": lib.as_uri(), "version": 2}, "contentChanges": [{"text": wider}]}
        client.notify("textDocument/didChange", change)
        [missing] = published(main.as_uri())  # unsaved: the disk still has the old `scale`
        assert missing["code"] == "E0204" and "`j`" in missing["message"]
        change = {"textDocument": {"uri": lib.as_uri(), "version": 3}, "contentChanges": [{"text": lib.read_text()}]}
        client.notify("textDocument/didChange", change)
        assert published(main.as_uri()) == []
    finally:
        stop_server(process, client)


def test_changes_are_applied_as_edits_of_a_range(tmp_path: Path) -> None:
    """The server asks for incremental sync: an edit of a range (UTF-16 columns, after an `é`) is applied to
    the text it has, and a whole text still replaces it."""
    uri = (tmp_path / "edited.dl").as_uri()
    text = 'fn main() {\n    print("é")\n    let x = ones(2, 3) @ ones(2, 3)\n}\n'
    process, client = start_server()

    def diagnostics() -> list[dict]:
        return client.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics")["params"]["diagnostics"]

    try:
        client.notify(
            "textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "dl", "version": 1, "text": text}}
        )
        [wrong] = diagnostics()
        assert wrong["code"] == "E0302"
        three = {"start": {"line": 2, "character": 30}, "end": {"line": 2, "character": 31}}  # the second `2`
        edit = {"range": three, "text": "3"}
        client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2}, "contentChanges": [edit]})
        assert diagnostics() == []
        comment = {
            "range": {"start": {"line": 1, "character": 15}, "end": {"line": 1, "character": 15}},
            "text": " # ü",
        }
        client.notify(
            "textDocument/didChange", {"textDocument": {"uri": uri, "version": 3}, "contentChanges": [comment]}
        )
        assert diagnostics() == []
        symbols = client.request("textDocument/documentSymbol", {"textDocument": {"uri": uri}})
        assert [symbol["name"] for symbol in symbols] == ["main"]
        change = {"textDocument": {"uri": uri, "version": 4}, "contentChanges": [{"text": text}]}
        client.notify("textDocument/didChange", change)
        assert [found["code"] for found in diagnostics()] == ["E0302"]
    finally:
        stop_server(process, client)


def test_positions_over_stdio_are_utf16_units(tmp_path: Path) -> None:
    uri = (tmp_path / "wide.dl").as_uri()
    process, client = start_server()
    try:
        document = {"uri": uri, "languageId": "dl", "version": 1, "text": WIDE}
        client.notify("textDocument/didOpen", {"textDocument": document})
        [diagnostic] = client.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics")["params"][
            "diagnostics"
        ]
        assert diagnostic["range"]["start"] == {"line": 0, "character": utf16(WIDE[:WIDE_AT])}

        where = {"textDocument": {"uri": uri}, "position": {"line": 0, "character": utf16(WIDE[:WIDE_AT]) + 1}}
        shown = client.request("textDocument/hover", where)
        assert "fn ones" in shown["contents"]["value"]
        assert shown["range"]["start"] == {"line": 0, "character": utf16(WIDE[:WIDE_AT])}

        tokens = client.request("textDocument/semanticTokens/full", {"textDocument": {"uri": uri}})
        starts, column = [], 0
        for index in range(0, len(tokens["data"]), 5):
            column += tokens["data"][index + 1]
            starts.append((column, tokens["data"][index + 2]))
        assert (utf16(WIDE[:WIDE_AT]), 4) in starts and (WIDE.index('"'), utf16('"é😀"')) in starts
        whole = {"start": {"line": 0, "character": 0}, "end": {"line": 1, "character": 0}}
        found = client.request("textDocument/semanticTokens/range", {"textDocument": {"uri": uri}, "range": whole})
        assert found["data"] == tokens["data"]
    finally:
        stop_server(process, client)


# ------------------------------------------------------------------ robustness: random edits and requests

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SNIPPETS = [
    "fn ",
    "fn f(x: f32[B, 3]) -> f32[B, 3] { return x }\n",
    "let h = x @ ones(3, 4)\n",
    "struct S { w: f32[2] }\n",
    "import nn\n",
    "{",
    "}",
    "(",
    ")",
    "[",
    '"unterminated',
    "# comment é 😀\n",
    "\n",
    ".",
    "ones(2, 3) @ ones(2, 3)",
    "for i in 0..3 { }",
    "1.0f64 3i32",
    "\r\n",
    "\t",
    "\x00",
    "\u2028",
]
REQUESTS = [
    "textDocument/hover",
    "textDocument/completion",
    "textDocument/semanticTokens/full",
    "textDocument/semanticTokens/range",
    "textDocument/documentSymbol",
    "textDocument/formatting",
    "textDocument/definition",
    "textDocument/signatureHelp",
]
text_piece = st.one_of(
    st.sampled_from(SNIPPETS),
    st.text(max_size=20),
    st.binary(max_size=20).map(lambda raw: raw.decode("latin-1")),
)
step = st.one_of(
    st.tuples(st.just("insert"), st.floats(0, 1), text_piece),
    st.tuples(st.just("delete"), st.floats(0, 1), st.integers(0, 40)),
    st.tuples(st.sampled_from(REQUESTS), st.integers(0, 60), st.integers(0, 120)),
)


@pytest.fixture(scope="module")
def server():
    process, client = start_server()
    yield process, client
    stop_server(process, client)


def ask(client: Client, method: str, params: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
    """Send a request and wait for its answer, which must be a result or a proper error response."""
    client.next_id += 1
    number = client.next_id
    client.send({"id": number, "method": method, "params": params})
    reply = client.wait(lambda m: m.get("id") == number and "method" not in m, timeout=timeout)
    assert "result" in reply or ("code" in reply["error"] and "message" in reply["error"]), reply
    return reply


def request_params(method: str, uri: str, line: int, character: int) -> dict[str, Any]:
    document = {"textDocument": {"uri": uri}}
    position = {"line": line, "character": character}
    if method == "textDocument/semanticTokens/full" or method == "textDocument/documentSymbol":
        return document
    if method == "textDocument/semanticTokens/range":
        return {**document, "range": {"start": {"line": line // 2, "character": 0}, "end": position}}
    if method == "textDocument/formatting":
        return {**document, "options": {"tabSize": 4, "insertSpaces": True}}
    return {**document, "position": position}


def edit_and_ask(server, uri: str, text: str, steps: list[tuple[Any, ...]], timeout: float = 10.0) -> None:
    """Open `text`, apply the `steps` (edits sent with didChange, requests that must be answered), close."""
    process, client = server
    client.notify(
        "textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "dl", "version": 0, "text": text}}
    )
    for version, (kind, where, what) in enumerate(steps, start=1):
        if kind in ("insert", "delete"):
            at = int(where * len(text))
            text = text[:at] + what + text[at:] if kind == "insert" else text[:at] + text[at + what :]
            change = {"textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": text}]}
            client.notify("textDocument/didChange", change)
        else:
            ask(client, kind, request_params(kind, uri, where, what), timeout)
        assert process.poll() is None, "the language server stopped"
    ask(client, "textDocument/documentSymbol", request_params("textDocument/documentSymbol", uri, 0, 0), timeout)
    client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    start=st.sampled_from(["", SOURCE, TOKENS, CALLS, *sorted(p.name for p in EXAMPLES.glob("*.dl"))]),
    steps=st.lists(step, max_size=30),
    number=st.integers(0, 10**9),
)
def test_random_edits_never_stop_the_server_answering(server, start: str, steps, number: int) -> None:
    text = (EXAMPLES / start).read_text() if start.endswith(".dl") else start
    edit_and_ask(server, f"file:///tmp/random{number}.dl", text, steps)


def test_a_ten_thousand_line_document_is_answered(server) -> None:
    text = "".join(f"fn f{index}(x: f32[B, 3]) -> f32[B, 3] {{ return x * 2.0 }}\n" for index in range(10_000))
    steps = [
        ("textDocument/hover", 5000, 20),
        ("insert", 0.5, "fn broken( {\n"),
        ("textDocument/semanticTokens/range", 9000, 10),
        ("textDocument/completion", 9999, 48),
        ("textDocument/documentSymbol", 0, 0),
    ]
    edit_and_ask(server, "file:///tmp/large.dl", text, steps, timeout=60.0)


# ------------------------------------------------------------------ robustness: every request is answered

OPEN = "file:///tmp/answered.dl"
ANSWERED = "struct L { w: f32[2] }\nfn main() {\n    let l = L { w: ones(2) }\n    print(l.w)\n}\n"
POSITION = {"line": 2, "character": 8}
DOCUMENT = {"textDocument": {"uri": OPEN}}
# one well-formed request of each method the server answers (but `shutdown`, tested on its own)
WELL_FORMED = {
    "initialize": {"processId": None, "rootUri": None, "capabilities": {}},
    "workspace/executeCommand": {"command": "dl.none", "arguments": []},
    "textDocument/hover": {**DOCUMENT, "position": POSITION},
    "textDocument/definition": {**DOCUMENT, "position": POSITION},
    "textDocument/references": {**DOCUMENT, "position": POSITION, "context": {"includeDeclaration": True}},
    "textDocument/completion": {**DOCUMENT, "position": POSITION},
    "textDocument/signatureHelp": {**DOCUMENT, "position": {"line": 2, "character": 30}},
    "textDocument/documentSymbol": DOCUMENT,
    "textDocument/semanticTokens/full": DOCUMENT,
    "textDocument/semanticTokens/range": {**DOCUMENT, "range": {"start": {"line": 0, "character": 0}, "end": POSITION}},
    "textDocument/formatting": {**DOCUMENT, "options": {"tabSize": 4, "insertSpaces": True}},
}
ANY_VALUE = [None, True, -1, 1.5, 2**31, "x", [], {}, {"wrong": 1}]
NUMBERS = [-1, 2**31 - 1, 2**31, 10**6]  # negative, the largest and one past it, past the end of the document
TEXTS = ["", "file:///tmp/never-opened.dl", "untitled:Untitled-1", "x:", "file://[x/", "not a uri"]


def malformed(value: Any) -> Iterator[Any]:
    """Every variation of a JSON value with one part changed: each object field left out, and each part
    (the whole too) replaced by a value of another type, or for numbers and strings by ones out of range
    (negative, huge, past the end of the document; URIs never opened, or not URIs)."""
    yield from ANY_VALUE
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        yield from NUMBERS
    if isinstance(value, str):
        yield from TEXTS
    if isinstance(value, dict):
        for key in value:
            yield {name: part for name, part in value.items() if name != key}
            for changed in malformed(value[key]):
                yield {**value, key: changed}
    if isinstance(value, list):
        for index, part in enumerate(value):
            for changed in malformed(part):
                yield [*value[:index], changed, *value[index + 1 :]]


def fits(method: str, params: Any) -> bool:
    """Whether `params` fit the method's types (lsprotocol's, which the server reads requests with)."""
    from pygls.protocol import default_converter

    message = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    try:
        default_converter().structure(message, types.METHOD_TO_TYPES[method][0])
    except Exception:
        return False
    return True


def test_every_request_the_server_answers_is_listed() -> None:
    features = lsp.make_server().protocol.fm
    served = set(features.features) | set(features.builtin_features)
    requests = {method for method in served if types.METHOD_TO_TYPES.get(method, (None, None))[1] is not None}
    assert requests == {*WELL_FORMED, "shutdown"}


def test_every_malformed_request_gets_an_answer_and_the_server_lives(tmp_path: Path) -> None:
    process, client = start_server()
    try:
        document = {"uri": OPEN, "languageId": "dl", "version": 1, "text": ANSWERED}
        client.notify("textDocument/didOpen", {"textDocument": document})
        client.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics")
        count = 0
        for method, params in WELL_FORMED.items():
            variations = [params, *malformed(params)]
            if method == "initialize":  # a well-formed one would initialize the server again
                variations = [each for each in variations if not fits(method, each)]
            for changed in variations:
                reply = ask(client, method, changed)
                count += 1
                if not fits(method, changed):
                    assert reply["error"]["code"] == -32602, (method, changed, reply)  # InvalidParams
                    assert reply["error"]["message"].startswith(f"Invalid Params: {method}: ")
                elif method != "workspace/executeCommand":  # no command is defined: that is an error
                    assert "result" in reply, (method, changed, reply)
                assert process.poll() is None, "the language server stopped"
        assert count > 500
        shown = ask(client, "textDocument/hover", WELL_FORMED["textDocument/hover"])["result"]
        assert "l: L" in shown["contents"]["value"]
    finally:
        stop_server(process, client)


def test_requests_that_are_not_json_rpc_2_get_invalid_request() -> None:
    process, client = start_server()
    try:
        body = json.dumps({"id": 7, "method": "textDocument/hover", "params": {}}).encode()  # no "jsonrpc"
        process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        process.stdin.flush()
        assert client.wait(lambda m: m.get("id") == 7)["error"]["code"] == -32600
        client.send({"jsonrpc": "1.0", "id": 8, "method": "textDocument/hover", "params": {}})
        assert client.wait(lambda m: m.get("id") == 8)["error"]["code"] == -32600
        client.send({"id": 9, "method": "textDocument/didClose", "params": DOCUMENT})  # a notification
        assert client.wait(lambda m: m.get("id") == 9)["error"]["code"] == -32600
        client.send({"id": {"not": "an id"}, "method": "textDocument/hover", "params": {}})
        assert client.wait(lambda m: "error" in m and m.get("id") is None)["error"]["code"] == -32602
        assert client.request("shutdown") is None
        client.send({"id": 10, "method": "textDocument/hover", "params": WELL_FORMED["textDocument/hover"]})
        refused = client.wait(lambda m: m.get("id") == 10)["error"]
        assert (refused["code"], refused["message"]) == (-32600, "the server is shutting down")
        client.notify("exit")
        assert process.wait(timeout=10) == 0
    finally:
        stop_server(process, client)


# ------------------------------------------------------------------ responsive: analyses off the request path


def open_document(client: Client, uri: str, text: str) -> None:
    client.notify(
        "textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "dl", "version": 1, "text": text}}
    )


def large_document(functions: int) -> str:
    return "".join(f"fn f{index}(x: f32[B, 3]) -> f32[B, 3] {{ return x * 2.0 }}\n" for index in range(functions))


def test_a_request_waiting_for_the_first_analysis_can_be_cancelled() -> None:
    process, client = start_server()
    try:
        uri = "file:///tmp/cancelled.dl"
        document = {"uri": uri, "languageId": "dl", "version": 1, "text": large_document(20_000)}
        client.notify("textDocument/didOpen", {"textDocument": document})
        client.send({"id": 500, "method": "textDocument/hover", "params": {"textDocument": {"uri": uri}, **WHERE}})
        client.notify("$/cancelRequest", {"id": 500})
        reply = client.wait(lambda m: m.get("id") == 500, timeout=60)
        assert reply["error"]["code"] == -32800  # RequestCancelled, before the analysis could finish
        client.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics", timeout=120)
        shown = ask(client, "textDocument/hover", {"textDocument": {"uri": uri}, **WHERE})["result"]
        assert "x: f32[B, 3]" in shown["contents"]["value"]
    finally:
        stop_server(process, client)


WHERE = {"position": {"line": 0, "character": large_document(1).index("x * 2.0")}}  # `x` in the first body


def test_hover_during_an_analysis_answers_from_the_last_one() -> None:
    process, client = start_server()
    try:
        uri = "file:///tmp/stale.dl"
        first = SOURCE + large_document(5_000)
        open_document(client, uri, first)
        client.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics", timeout=120)
        # two edits, the second before the first is analysed: two lines above `scale`, and `h` wider
        second = "# new\n# lines\n" + first
        third = second.replace("let h = x * 2.0", "let h = concat((x, x), axis=1)")
        for version, text in ((2, second), (3, third)):
            change = {"textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": text}]}
            client.notify("textDocument/didChange", change)
        at = {"textDocument": {"uri": uri}, "position": {"line": 7, "character": 11}}  # `return h`, moved down
        shown = ask(client, "textDocument/hover", at)["result"]
        assert "h: f32[B, 3]" in shown["contents"]["value"]  # the type the last analysis found ...
        assert shown["range"]["start"] == {"line": 7, "character": 11}  # ... where `h` is now
        assert ask(client, "textDocument/hover", {**at, "position": {"line": 5, "character": 9}})["result"] is None
        last = len(first.split("\n")) - 2  # the line of the last `fn` (the text ends with a newline)
        far = {**at, "position": {"line": last + 2, "character": 3}}
        assert (
            "fn f4999(x: f32[B, 3]) -> f32[B, 3]"
            in ask(client, "textDocument/hover", far)["result"]["contents"]["value"]
        )
        published = client.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics", timeout=120)
        assert published["params"]["version"] == 3
        shown = ask(client, "textDocument/hover", at)["result"]
        assert "h: f32[B, 6]" in shown["contents"]["value"]
    finally:
        stop_server(process, client)


class InProcess:
    """`dlrun lsp` running on a thread of this process (so that a test can patch what it calls), spoken to
    over pipes as over stdio."""

    def __init__(self) -> None:
        server_in, self.stdin_fd = os.pipe()
        self.stdout_fd, server_out = os.pipe()
        self.stdin, self.stdout = os.fdopen(self.stdin_fd, "wb"), os.fdopen(self.stdout_fd, "rb")
        server = lsp.make_server()
        streams = os.fdopen(server_in, "rb"), os.fdopen(server_out, "wb")
        self.thread = threading.Thread(target=server.start_io, args=streams, daemon=True)
        self.thread.start()

    def poll(self) -> int | None:
        return None if self.thread.is_alive() else 0


def test_an_internal_error_in_an_analysis_is_a_diagnostic_at_its_span(monkeypatch) -> None:
    from dl.lang.check import Checker

    real = Checker.binary_type

    def broken(self, op, left, right, span):
        if op == "%":
            raise RuntimeError("a bug in `%`")
        return real(self, op, left, right, span)

    monkeypatch.setattr(Checker, "binary_type", broken)
    server = InProcess()
    client = Client(server)
    client.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}})
    uri = "file:///tmp/internal.dl"
    text = "fn main() {\n    let x = 7 % 3\n}\n"
    client.notify(
        "textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "dl", "version": 1, "text": text}}
    )
    [shown] = client.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics")["params"]["diagnostics"]
    assert shown["message"] == "internal error, please report: RuntimeError: a bug in `%`"
    assert shown["range"] == {"start": {"line": 1, "character": 12}, "end": {"line": 1, "character": 17}}  # `7 % 3`
    at = {"textDocument": {"uri": uri}, "position": {"line": 1, "character": 8}}
    assert ask(client, "textDocument/hover", at)["result"] is None  # answered, though nothing is known
    fixed = text.replace("7 % 3", "7 + 3")
    client.notify(
        "textDocument/didChange", {"textDocument": {"uri": uri, "version": 2}, "contentChanges": [{"text": fixed}]}
    )
    assert client.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics")["params"]["diagnostics"] == []
    assert "x: i64" in ask(client, "textDocument/hover", at)["result"]["contents"]["value"]
    assert client.request("shutdown") is None
    client.notify("exit")
    server.thread.join(timeout=10)
    assert not server.thread.is_alive()


# ------------------------------------------------------------------ completion of module members (goldens)

COMPLETIONS = Path(__file__).resolve().parent / "completions"


def member_completions(program: Path) -> str:
    """What completion offers after `alias.` for each import of `program`: each member with its detail, and
    the further signatures a function was checked with (the rest of its documentation is its doc comment)."""
    source = program.read_text()
    checked = lang.check(source, str(program))
    assert checked.errors == []
    lines = []
    for alias, _ in checked.program.imports[str(program)]:
        typing = f"{source}{alias}."
        line = typing.count("\n") + 1
        for entry in lsp.completions(checked, str(program), typing, line, len(alias) + 2):
            lines.append(f"{alias}.{entry.label}: {entry.detail}")
            documentation = entry.documentation.value if entry.documentation else ""
            lines.extend(f"    {shown}" for shown in documentation.split("\n") if shown.startswith("fn "))
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("program", sorted(COMPLETIONS.glob("*.dl")), ids=lambda path: path.name)
def test_completion_of_a_module_shows_its_checked_signatures(program: Path, update_goldens: bool) -> None:
    check_golden(program.with_suffix(".out"), member_completions(program), update_goldens)


def test_a_member_checked_for_several_calls_lists_each_signature_and_its_doc_comment() -> None:
    program = COMPLETIONS / "members.dl"
    source = program.read_text() + "nn."
    checked = lang.check(program.read_text(), str(program))
    found = {entry.label: entry for entry in lsp.completions(checked, str(program), source, source.count("\n") + 1, 4)}
    linear = found["linear"]
    assert linear.detail == "fn linear(x: f32[B, 4], w: f32[4, 8], b: f32[8]) -> f32[B, 8]"
    documentation = linear.documentation.value.split("\n")
    assert documentation[0] == "fn linear(x: f32[B, 8], w: f32[8, 3], b: f32[3]) -> f32[B, 3]"
    assert documentation[1] == "" and documentation[2].startswith("linear(")  # then nn.dl's doc comment


GENERIC = """\
struct Linear[IN, OUT] { w: f32[IN, OUT], b: f32[OUT] }

fn apply(layer: Linear[IN, OUT], x: f32[B, IN]) -> f32[B, OUT] {
    return x @ layer.w + layer.b
}

fn main() {
    let layer = Linear { w: ones(5, 2), b: zeros(2) }
    print(apply(layer, ones(3, 5)))
}
"""


def test_hover_and_completion_show_a_generic_struct_with_its_sizes() -> None:
    checked = lang.check(GENERIC, PATH)
    assert checked.errors == []
    assert lsp.hover_text(checked, PATH, GENERIC, 8, 9)[0] == "layer: Linear[5, 2]"
    assert lsp.hover_text(checked, PATH, GENERIC, 3, 10)[0] == "layer: Linear[IN, OUT]"
    typing = GENERIC.replace("print(apply(layer, ones(3, 5)))", "layer.")
    assert labels(lsp.completions(checked, PATH, typing, 9, 11)) == {"w": "f32[5, 2]", "b": "f32[2]"}
    typing = GENERIC.replace("return x @ layer.w + layer.b", "return layer.")
    assert labels(lsp.completions(checked, PATH, typing, 4, 18)) == {"w": "f32[IN, OUT]", "b": "f32[OUT]"}


def test_completion_in_a_file_of_thousands_of_declarations_sends_those_that_fit_the_word() -> None:
    items = [lsp.item(f"f{number}", types.CompletionItemKind.Function, None) for number in range(5000)]
    assert lsp.fewest(items[:20], "zz") == items[:20]  # a short list goes whole
    shown = lsp.fewest(items, "f12")
    assert [entry.label for entry in shown] == [f"f{number}" for number in range(5000) if str(number).startswith("12")]
    assert len(lsp.fewest(items, "")) == lsp.COMPLETION_ITEMS
