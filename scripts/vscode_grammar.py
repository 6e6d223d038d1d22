"""Write editors/vscode/syntaxes/dl.tmLanguage.json, the TextMate grammar VS Code highlights DL with before
the language server answers.

Its keywords are the lexer's and its built-in functions are the primitives of `dl.lang.primitives.BY_NAME`,
so run this again after adding a keyword or a primitive (tests/test_editors.py fails until then):

    .venv/bin/python scripts/vscode_grammar.py
"""

from __future__ import annotations

import json
from pathlib import Path

from dl.lang.parse import parse_table
from dl.lang.primitives import BY_NAME

GRAMMAR = Path(__file__).resolve().parent.parent / "editors" / "vscode" / "syntaxes" / "dl.tmLanguage.json"
DTYPES = ["f32", "f64", "i32", "i64", "bool", "str"]
# The lexer's keywords by the scope a theme colours them with; together they must be all of them.
KEYWORD_SCOPES = {
    "keyword.control.dl": ["if", "else", "while", "for", "in", "return", "break", "continue"],
    "storage.type.dl": ["fn", "let", "struct", "const"],
    "keyword.control.import.dl": ["import", "as"],
    "keyword.operator.logical.dl": ["and", "or", "not"],
    "constant.language.boolean.dl": ["true", "false"],
}


def words(names: list[str]) -> str:
    return r"\b(" + "|".join(names) + r")\b"


def grammar() -> dict:
    keywords = sorted(parse_table().scanner.keywords)
    listed = sorted(name for names in KEYWORD_SCOPES.values() for name in names)
    unplaced = sorted(set(keywords) - set(listed))
    if unplaced:
        raise SystemExit(f"give these keywords a scope in KEYWORD_SCOPES: {', '.join(unplaced)}")
    repository = {
        "comment": {"name": "comment.line.number-sign.dl", "match": "#.*$"},
        "string": {
            "name": "string.quoted.double.dl",
            "begin": '"',
            "end": '"|$',
            "patterns": [{"name": "constant.character.escape.dl", "match": r"\\."}],
        },
        "fstring": {
            "name": "string.interpolated.dl",
            "begin": 'f"',
            "end": '"|$',
            "patterns": [
                {"name": "constant.character.escape.dl", "match": r"\\.|\{\{|\}\}"},
                {
                    "name": "meta.embedded.field.dl",
                    "begin": r"\{",
                    "end": r"(:[^{}\"]*)?\}|(?=\")|$",
                    "beginCaptures": {"0": {"name": "punctuation.section.embedded.begin.dl"}},
                    "endCaptures": {
                        "0": {"name": "punctuation.section.embedded.end.dl"},
                        "1": {"name": "storage.modifier.format-spec.dl"},
                    },
                    "patterns": [{"include": "#expression"}],
                },
            ],
        },
        "number": {
            "patterns": [
                {
                    "match": r"\b(\d+\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)(f32|f64)?\b",
                    "captures": {"1": {"name": "constant.numeric.float.dl"}, "2": {"name": "storage.type.dl"}},
                },
                {
                    "match": r"\b(\d+)(i32|i64)?\b",
                    "captures": {"1": {"name": "constant.numeric.integer.dl"}, "2": {"name": "storage.type.dl"}},
                },
            ]
        },
        "declaration": {
            "patterns": [
                {
                    "match": r"\b(fn)\s+([A-Za-z_]\w*)",
                    "captures": {"1": {"name": "storage.type.dl"}, "2": {"name": "entity.name.function.dl"}},
                },
                {
                    "match": r"\b(struct)\s+([A-Za-z_]\w*)",
                    "captures": {"1": {"name": "storage.type.dl"}, "2": {"name": "entity.name.type.struct.dl"}},
                },
            ]
        },
        "keyword": {"patterns": [{"name": scope, "match": words(names)} for scope, names in KEYWORD_SCOPES.items()]},
        "dtype": {"name": "support.type.primitive.dl", "match": words(DTYPES)},
        "builtin": {"name": "support.function.builtin.dl", "match": words(sorted(BY_NAME))},
        "call": {"match": r"\b([A-Za-z_]\w*)\s*(?=\()", "captures": {"1": {"name": "entity.name.function.dl"}}},
        "operator": {"name": "keyword.operator.dl", "match": r"->|=>|\.\.|\*\*|//|[-+*/%@<>=!]=?"},
    }
    # an f-string first: its `f` would otherwise start a name. A field's expression is highlighted as code.
    order = ["comment", "fstring", "string", "number", "declaration", "keyword", "dtype", "builtin", "call", "operator"]
    repository["expression"] = {"patterns": [{"include": f"#{name}"} for name in order if name != "comment"]}
    return {
        "$schema": "https://raw.githubusercontent.com/martinring/tmlanguage/master/tmlanguage.json",
        "name": "DL",
        "scopeName": "source.dl",
        "fileTypes": ["dl"],
        "patterns": [{"include": f"#{name}"} for name in order],
        "repository": repository,
    }


def main() -> None:
    GRAMMAR.write_text(json.dumps(grammar(), indent=2) + "\n")
    print(f"wrote {GRAMMAR}")


if __name__ == "__main__":
    main()
