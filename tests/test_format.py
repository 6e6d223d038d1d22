"""The formatter (`dlrun fmt`, LSP formatting): canonical layout, comments and literal spellings kept,
the program unchanged, idempotent on every `.dl` file of the repository."""

from __future__ import annotations

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


def test_a_hash_in_a_string_is_not_a_comment() -> None:
    source = 'fn main() {\n    print("# not a comment")  # a comment\n}\n'
    assert [c.text for c in find_comments(source)] == ["# a comment"]
    assert format_source(source) == source


def test_dlrun_fmt_in_place_check_and_print(dlrun, tmp_path: Path) -> None:
    file = tmp_path / "messy.dl"
    file.write_text(MESSY)
    assert dlrun("fmt", "--check", str(file)) == (
        1,
        "",
        f"{file} is not formatted (dlrun fmt {file} would change it)\n",
    )
    assert dlrun("fmt", "--print", str(file)) == (0, TIDY, "")
    assert file.read_text() == MESSY
    assert dlrun("fmt", str(file)) == (0, f"formatted {file}\n", "")
    assert file.read_text() == TIDY
    assert dlrun("fmt", str(file)) == (0, "", "")
    assert dlrun("fmt", "--check", str(file)) == (0, "", "")
    assert [p.name for p in tmp_path.iterdir()] == ["messy.dl"]  # no temporary file left


def test_dlrun_fmt_leaves_a_file_with_a_syntax_error_alone(dlrun, tmp_path: Path) -> None:
    file = tmp_path / "broken.dl"
    file.write_text("fn main( {\n")
    status, out, err = dlrun("fmt", str(file))
    assert (status, out) == (1, "") and err.startswith("error[E0102]")
    assert file.read_text() == "fn main( {\n"
