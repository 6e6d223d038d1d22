"""The formatter (`dlrun fmt`, LSP formatting): canonical layout, comments and literal spellings kept,
the program unchanged, idempotent on every `.dl` file of the repository."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from conftest import ROOT
from dl.lang.format import find_comments, format_source
from dl.lang.parse import parse

FILES = sorted(
    path
    for folder in ("examples", "stdlib", "tests/programs", "tests/derivatives", "tests/types/good")
    for path in (ROOT / folder).glob("*.dl")
)

MESSY = """# A module header comment.

import nn   # the stdlib

const RATE = 1e-3   # learning rate


# The parameters.
struct P {
    # weights
    w: f32[2, 2]  # trailing
    b: f32[2],
}

fn f(x: f32[2], p: P) -> f32 {   # header comment
    let h = tanh(x@p.w+p.b)   # hidden
    # before the branch

    if sum(h)>0.0 { return sum(h) }   else {
        # inside else
        let y = [1.0,
                 2.0]  # inside literal
        return sum(h*y)
    }
    # at the end of the block
}
# trailing file comment
"""

TIDY = """# A module header comment.

import nn  # the stdlib

const RATE = 1e-3  # learning rate

# The parameters.
struct P {
    # weights
    w: f32[2, 2]  # trailing
    b: f32[2]
}

fn f(x: f32[2], p: P) -> f32 {   # header comment
    let h = tanh(x @ p.w + p.b)  # hidden
    # before the branch

    if sum(h) > 0.0 {
        return sum(h)
    } else {
        # inside else
        let y = [1.0, 2.0]  # inside literal
        return sum(h * y)
    }
    # at the end of the block
}

# trailing file comment
"""


def test_layout_comments_and_literals() -> None:
    assert format_source(MESSY, "messy.dl") == TIDY
    assert format_source(TIDY, "tidy.dl") == TIDY


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_file_formats_to_the_same_program_with_its_comments(path: Path) -> None:
    source = path.read_text()
    formatted = format_source(source, str(path))
    assert parse(formatted, str(path)) == parse(source, str(path))  # spans aside, the same tree
    assert [c.text for c in find_comments(formatted)] == [c.text for c in find_comments(source)]
    assert format_source(formatted, str(path)) == formatted


def test_short_one_line_declarations_and_comment_columns_are_kept() -> None:
    source = (
        "import nn\nimport optim\n\nconst A = 1\nconst B = 2\n\n"
        "struct P { w: f32[2], b: f32 }\n\nfn twice(x) { return x * 2.0 }\n\n"
        "fn main() {\n    let a = 1  # one\n    let long_name = 2  # two\n}\n"
    )
    expected = source.replace("let a = 1  # one", "let a = 1          # one")
    assert format_source(source) == expected


def test_a_comment_after_a_closing_brace_stays_there() -> None:
    source = (
        "fn f(x: f32) -> f32 {\n    if x > 0.0 {\n        return x\n    }  # positive\n"
        "    while false {\n        print(x)\n    }  # never\n    return -x\n}  # end of f\n\nfn main() {}\n"
    )
    assert format_source(source) == source
    assert format_source(format_source(source)) == source


def test_a_hash_in_a_string_is_not_a_comment() -> None:
    source = 'fn main() {\n    print("# not a comment")  # a comment\n}\n'
    assert [c.text for c in find_comments(source)] == ["# a comment"]
    assert format_source(source) == source


def test_dlrun_fmt_in_place_check_and_print(dlrun, tmp_path: Path) -> None:
    file = tmp_path / "messy.dl"
    file.write_text(MESSY)
    assert dlrun("fmt", "--check", str(file)) == (1, f"would format {file}\n1 file would be formatted\n", "")
    assert dlrun("fmt", "--print", str(file)) == (0, TIDY, "")
    assert file.read_text() == MESSY
    assert dlrun("fmt", str(file)) == (0, f"formatted {file}\n1 file formatted\n", "")
    assert file.read_text() == TIDY
    assert dlrun("fmt", str(file)) == (0, "1 file already formatted\n", "")
    assert dlrun("fmt", "--check", str(file)) == (0, "1 file already formatted\n", "")
    assert [p.name for p in tmp_path.iterdir()] == ["messy.dl"]  # no temporary file left


def test_dlrun_fmt_formats_directories_recursively_and_skips_hidden_ones(dlrun, tmp_path, monkeypatch) -> None:
    (tmp_path / "src" / "deep").mkdir(parents=True)
    (tmp_path / ".venv").mkdir()
    (tmp_path / "src" / "messy.dl").write_text(MESSY)
    (tmp_path / "src" / "deep" / "tidy.dl").write_text(TIDY)
    (tmp_path / "src" / "deep" / "notes.txt").write_text("fn  main() {}\n")
    (tmp_path / ".venv" / "vendored.dl").write_text(MESSY)
    monkeypatch.chdir(tmp_path)
    assert dlrun("fmt", "--check", "src/") == (
        1,
        "would format src/messy.dl\n1 file would be formatted, 1 already formatted\n",
        "",
    )
    assert (tmp_path / "src" / "messy.dl").read_text() == MESSY
    assert dlrun("fmt", ".") == (0, "formatted src/messy.dl\n1 file formatted, 1 already formatted\n", "")
    assert (tmp_path / "src" / "messy.dl").read_text() == TIDY
    assert (tmp_path / ".venv" / "vendored.dl").read_text() == MESSY
    assert (tmp_path / "src" / "deep" / "notes.txt").read_text() == "fn  main() {}\n"
    assert dlrun("fmt", "--check", ".", "src/messy.dl") == (0, "2 files already formatted\n", "")


def test_dlrun_fmt_formats_the_files_that_parse_and_reports_the_others(dlrun, tmp_path, monkeypatch) -> None:
    (tmp_path / "a_broken.dl").write_text("fn main( {\n")
    (tmp_path / "b_messy.dl").write_text(MESSY)
    monkeypatch.chdir(tmp_path)
    status, out, err = dlrun("fmt", ".")
    assert (status, out) == (1, "formatted b_messy.dl\n1 file formatted, 1 left alone (errors above)\n")
    assert err.startswith("error[E0102]") and " --> a_broken.dl:1:10" in err
    assert (tmp_path / "a_broken.dl").read_text() == "fn main( {\n"
    assert (tmp_path / "b_messy.dl").read_text() == TIDY


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("fmt", "nosuch"), "dlrun: error: no file or directory `nosuch`\n"),
        (("fmt", "--print", "."), "dlrun: error: `dlrun fmt --print` takes one file\n"),
    ],
)
def test_dlrun_fmt_usage_errors_write_nothing(dlrun, tmp_path, monkeypatch, argv, message) -> None:
    (tmp_path / "messy.dl").write_text(MESSY)
    monkeypatch.chdir(tmp_path)
    assert dlrun(*argv, "messy.dl") == (2, "", message)
    assert (tmp_path / "messy.dl").read_text() == MESSY


def test_dlrun_fmt_keeps_a_files_permissions(dlrun, tmp_path: Path) -> None:
    file = tmp_path / "script.dl"
    file.write_text(MESSY)
    file.chmod(0o751)
    assert dlrun("fmt", str(file))[0] == 0
    assert (file.read_text(), stat.S_IMODE(file.stat().st_mode)) == (TIDY, 0o751)


def test_dlrun_fmt_leaves_a_file_with_a_syntax_error_alone(dlrun, tmp_path: Path) -> None:
    file = tmp_path / "broken.dl"
    file.write_text("fn main( {\n")
    status, out, err = dlrun("fmt", str(file))
    assert (status, out) == (1, "1 file left alone (errors above)\n") and err.startswith("error[E0102]")
    assert file.read_text() == "fn main( {\n"
    assert [p.name for p in tmp_path.iterdir()] == ["broken.dl"]


def test_the_standard_library_and_the_examples_are_in_canonical_form(dlrun) -> None:
    """What users read first is laid out as `dlrun fmt` lays out theirs (a first-hour probe found the stdlib
    was not)."""
    assert dlrun("fmt", "--check", "stdlib", "examples")[0] == 0


def test_a_file_with_crlf_line_endings_keeps_them(tmp_path, dlrun) -> None:
    """`dlrun fmt` and the language server's formatting give a CRLF file back with CRLF (they gave LF)."""
    path = tmp_path / "crlf.dl"
    path.write_bytes(b"fn main() {  # hi\r\n    let x = 1 # c\r\n\r\n    print(x)\r\n}\r\n")
    assert dlrun("fmt", str(path))[0] == 0
    canonical = format_source("fn main() {  # hi\n    let x = 1 # c\n\n    print(x)\n}\n").replace("\n", "\r\n")
    assert path.read_bytes() == canonical.encode()
    assert dlrun("fmt", "--check", str(path))[0] == 0
    assert format_source(canonical) == canonical
    assert format_source("fn main() {}\n") == "fn main() {}\n"
