"""The VS Code extension under editors/vscode: its JSON files parse, package.json points at files that exist,
and the TextMate grammar's keywords and built-ins are the lexer's and the primitive table's."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import zipfile
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


def test_the_readme_has_no_relative_links() -> None:
    """The Marketplace shows the README away from the repository: a relative link would be broken (and
    makes `vsce package` fail)."""
    readme = (VSCODE / "README.md").read_text()
    links = re.findall(r"\]\(([^)]+)\)", readme)
    assert all(re.match(r"[a-z]+://", link) for link in links), links


def test_the_package_has_a_repository_and_a_license() -> None:
    package = load("package.json")
    assert (
        package["repository"]["url"].startswith("https://") and package["repository"]["directory"] == "editors/vscode"
    )
    assert package["license"] == "MIT" and (VSCODE / "LICENSE").read_text().startswith("MIT License\n")


@pytest.mark.slow
def test_the_extension_packages_with_a_plain_vsce_package(tmp_path: Path) -> None:
    """`npm install` then `npx @vscode/vsce package`, as the README says, in a copy of editors/vscode; the
    .vsix holds the manifest, the client, the grammar, the license and vscode-languageclient."""
    if shutil.which("node") is None or shutil.which("npx") is None or shutil.which("npm") is None:
        pytest.skip("Node.js (node, npm and npx) is not installed: the extension is not packaged")
    folder = tmp_path / "vscode"
    shutil.copytree(VSCODE, folder, ignore=shutil.ignore_patterns("node_modules", "*.vsix", "package-lock.json"))
    vsce = ["npx", "--yes", "@vscode/vsce@3"]
    available = run_quietly([*vsce, "--version"], folder)
    if available.returncode != 0:
        pytest.skip(f"the vsce package is not available (no npm registry?): {last_line(available)}")
    installed = run_quietly(["npm", "install", "--no-audit", "--no-fund"], folder)
    if installed.returncode != 0:
        pytest.skip(f"`npm install` could not fetch vscode-languageclient (no npm registry?): {last_line(installed)}")
    packaged = run_quietly([*vsce, "package"], folder)
    assert packaged.returncode == 0, packaged.stdout + packaged.stderr
    version = load("package.json")["version"]
    with zipfile.ZipFile(folder / f"dl-language-{version}.vsix") as vsix:
        names = set(vsix.namelist())
    expected = ["package.json", "extension.js", "syntaxes/dl.tmLanguage.json", "language-configuration.json"]
    expected += ["readme.md", "LICENSE.txt", "node_modules/vscode-languageclient/package.json"]  # as vsce names them
    assert {f"extension/{name}" for name in expected} <= names


def run_quietly(command: list[str], folder: Path) -> subprocess.CompletedProcess:
    """`command` in `folder`, its input closed (vsce must not ask anything), within ten minutes."""
    return subprocess.run(command, cwd=folder, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600)


def last_line(result: subprocess.CompletedProcess) -> str:
    lines = (result.stderr or result.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit status {result.returncode}"


def test_the_grammar_highlights_f_strings_with_code_in_their_fields() -> None:
    grammar = load("syntaxes/dl.tmLanguage.json")
    order = [pattern["include"] for pattern in grammar["patterns"]]
    assert order.index("#fstring") < order.index("#string")  # before a name could take the `f`
    fstring = grammar["repository"]["fstring"]
    assert re.match(fstring["begin"], 'f"loss {loss:.4f}"') and not re.match(fstring["begin"], '"plain {x}"')
    escape, field = fstring["patterns"]
    assert re.fullmatch(escape["match"], "{{") and re.fullmatch(escape["match"], "}}")
    assert re.match(field["begin"], "{") and field["patterns"] == [{"include": "#expression"}]
    assert re.match(field["end"], ":.4f}").group(1) == ":.4f" and re.match(field["end"], "}").group(1) is None
    assert {"include": "#builtin"} in grammar["repository"]["expression"]["patterns"]
