"""The VS Code extension under editors/vscode: its JSON files parse, package.json points at files that exist,
and the TextMate grammar's keywords and built-ins are the lexer's and the primitive table's."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from dl import lsp
from dl.lang.primitives import BY_NAME

VSCODE = Path(__file__).resolve().parent.parent / "editors" / "vscode"
REGENERATE = "run `.venv/bin/python scripts/vscode_grammar.py` to regenerate the grammar"


def load(name: str) -> dict:
    return json.loads((VSCODE / name).read_text())


def grammar_words(pattern: dict) -> list[str]:
    found = re.fullmatch(r"\\b\((.*)\)\\b", pattern["match"])
    assert found is not None, pattern
    return found.group(1).split("|")


@pytest.mark.parametrize("name", ["package.json", "language-configuration.json", "syntaxes/dl.tmLanguage.json"])
def test_the_json_files_parse(name: str) -> None:
    assert isinstance(load(name), dict)


def test_package_json_declares_the_language_and_references_files_that_exist() -> None:
    package = load("package.json")
    [language] = package["contributes"]["languages"]
    assert (language["id"], language["extensions"]) == ("dl", [".dl"])
    assert (VSCODE / language["configuration"]).is_file()
    [grammar] = package["contributes"]["grammars"]
    assert grammar["language"] == "dl" and (VSCODE / grammar["path"]).is_file()
    assert grammar["scopeName"] == load(grammar["path"])["scopeName"]
    assert (VSCODE / package["main"]).is_file()
    assert "onLanguage:dl" in package["activationEvents"]
    assert "vscode-languageclient" in package["dependencies"]
    assert package["contributes"]["configuration"]["properties"]["dl.server.path"]["default"] == "dlrun"
    client = (VSCODE / package["main"]).read_text()
    assert '"server.path"' in client and 'args: ["lsp"]' in client and "vscode-languageclient/node" in client
    assert (VSCODE / "README.md").is_file()


def test_the_language_configuration_has_brackets_comments_and_indentation() -> None:
    configuration = load("language-configuration.json")
    assert configuration["comments"]["lineComment"] == "#"
    assert ["{", "}"] in configuration["brackets"]
    assert {"open": "(", "close": ")"} in configuration["autoClosingPairs"]
    assert re.match(configuration["indentationRules"]["increaseIndentPattern"], "fn main() {")


def test_the_grammar_lists_the_primitives_as_built_ins() -> None:
    builtins = grammar_words(load("syntaxes/dl.tmLanguage.json")["repository"]["builtin"])
    assert sorted(builtins) == sorted(BY_NAME), REGENERATE


def test_the_grammar_keywords_are_the_lexer_keywords() -> None:
    patterns = load("syntaxes/dl.tmLanguage.json")["repository"]["keyword"]["patterns"]
    keywords = [word for pattern in patterns for word in grammar_words(pattern)]
    assert sorted(keywords) == sorted(lsp.keywords()), REGENERATE
    dtypes = grammar_words(load("syntaxes/dl.tmLanguage.json")["repository"]["dtype"])
    assert set(dtypes) == lsp.DTYPE_NAMES


def test_the_grammar_numbers_take_dtype_suffixes() -> None:
    float_pattern, int_pattern = load("syntaxes/dl.tmLanguage.json")["repository"]["number"]["patterns"]
    assert re.search(float_pattern["match"], "1.0f64").groups() == ("1.0", "f64")
    assert re.search(int_pattern["match"], "3i32").groups() == ("3", "i32")


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed: extension.js is not syntax-checked")
def test_the_client_is_valid_javascript() -> None:
    subprocess.run(["node", "--check", str(VSCODE / "extension.js")], check=True)
