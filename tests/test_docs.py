"""Every example in docs/*.md runs: programs print what the docs say, errors read as shown.

The conventions (also stated at the top of docs/language.md):

- A fenced block tagged `dl` that contains `fn main` is a complete program. It is
  written to a fresh directory as `example.dl` and run with `dlrun example.dl`
  (cwd = that directory); it must exit with status 0 and print nothing on stderr.
  If the next fenced block (only blank lines between) is tagged `text`, that block
  is its exact stdout. If it is immediately followed by a `console` block instead,
  that session is its test (for programs that need command-line arguments).
- A fenced block tagged `dl-error` is a complete program that fails: it is run the
  same way, must exit with status 1, and the `text` block right after it is its
  exact stderr (paths read `example.dl`).
- A `dl` or `dl-error` block whose first line is `# file: NAME.dl` is a module: it is
  written as NAME.dl beside `example.dl` for every later example of the same page
  (and is not run itself). A `python` block whose first line is `# file: NAME.py` is
  written the same way (and must compile).
- A `dl` block without `fn main` is a fragment: it must parse, as written or, if it
  is not a list of top-level declarations, wrapped in `fn main() { ... }`.
- A block tagged `console` is a terminal session run in the directory of the
  latest program above it (as `example.dl`, with the page's modules). Lines
  starting with `$ ` are commands: `dlrun ARGS...` (run in-process), `python NAME.py`
  (a page's Python file, run by this Python in a subprocess) or `echo $?` (the previous
  command's exit status); the lines up to the next command are that command's exact
  output, stdout then stderr.
- An HTML comment `<!-- xfail: REASON -->` on the line right before an opening
  fence marks that example as a known discrepancy: its test is
  `xfail(strict=True)` with REASON, so it starts passing loudly once fixed.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from dl.lang.diagnostics import DiagnosticError, SourceMap, render_all
from dl.lang.parse import parse

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md"))
OPENING = re.compile(r"^```([A-Za-z0-9_-]*)\s*$")
XFAIL = re.compile(r"^<!--\s*xfail:\s*(.*?)\s*-->\s*$")
FILE_MARK = re.compile(r"^#\s*file:\s*([A-Za-z0-9_./-]+\.(?:dl|py))\s*$")
MAIN = re.compile(r"^\s*fn\s+main\s*\(", re.MULTILINE)


@dataclass
class Block:
    lang: str
    text: str
    line: int  # line of the opening fence, 1-based
    xfail: str | None = None


@dataclass
class Example:
    page: str
    line: int
    kind: str  # "program", "error", "fragment", "module", "python", "console"
    source: str
    expected: str | None = None
    modules: dict[str, str] = field(default_factory=dict)
    program: str | None = None  # for console sessions: the program they run
    xfail: str | None = None

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def read_blocks(text: str) -> list[Block]:
    """The fenced blocks of a Markdown page, in order."""
    blocks: list[Block] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = OPENING.match(lines[index])
        if opening is None:
            index += 1
            continue
        previous = lines[index - 1] if index else ""
        mark = XFAIL.match(previous)
        start = index
        index += 1
        body: list[str] = []
        while index < len(lines) and lines[index].rstrip() != "```":
            body.append(lines[index])
            index += 1
        if index == len(lines):
            raise ValueError(f"line {start + 1}: fenced block is never closed")
        text_of_block = "\n".join(body) + "\n" if body else ""
        blocks.append(Block(opening.group(1), text_of_block, start + 1, mark.group(1) if mark else None))
        index += 1
    return blocks


def adjacent(text: str, first: Block, second: Block) -> bool:
    """True if only blank lines lie between the end of `first` and the start of `second`."""
    lines = text.splitlines()
    closing = first.line + first.text.count("\n") + 1  # 1-based line of the closing fence
    between = lines[closing : second.line - 1]
    return all(not line.strip() for line in between)


def examples_of(path: Path) -> list[Example]:
    text = path.read_text(encoding="utf-8")
    page = path.name
    blocks = read_blocks(text)
    modules: dict[str, str] = {}
    program: str | None = None
    found: list[Example] = []
    for position, block in enumerate(blocks):
        following = blocks[position + 1] if position + 1 < len(blocks) else None
        output = None
        if following is not None and following.lang == "text" and adjacent(text, block, following):
            output = following.text
        if block.lang in ("dl", "dl-error"):
            first_line = block.text.split("\n", 1)[0]
            mark = FILE_MARK.match(first_line)
            if mark:
                found.append(Example(page, block.line, "module", block.text, xfail=block.xfail))
                modules[mark.group(1)] = block.text
                continue
            if block.lang == "dl-error":
                if output is None:
                    raise ValueError(f"{page}:{block.line}: a dl-error block needs a text block right after it")
                found.append(Example(page, block.line, "error", block.text, output, dict(modules), xfail=block.xfail))
                program = block.text
            elif MAIN.search(block.text):
                program = block.text
                if following and following.lang == "console" and adjacent(text, block, following):
                    continue  # the console session runs it
                found.append(Example(page, block.line, "program", block.text, output, dict(modules), xfail=block.xfail))
            else:
                found.append(Example(page, block.line, "fragment", block.text, xfail=block.xfail))
        elif block.lang == "python" and FILE_MARK.match(block.text.split("\n", 1)[0]):
            name = FILE_MARK.match(block.text.split("\n", 1)[0]).group(1)
            found.append(Example(page, block.line, "python", block.text, xfail=block.xfail))
            modules[name] = block.text
        elif block.lang == "console":
            found.append(
                Example(page, block.line, "console", block.text, None, dict(modules), program, xfail=block.xfail)
            )
    return found


EXAMPLES = [example for page in DOCS for example in examples_of(page)]


def parameters():
    for example in EXAMPLES:
        marks = [pytest.mark.xfail(strict=True, reason=example.xfail)] if example.xfail else []
        yield pytest.param(example, id=example.id, marks=marks)


# ---------------------------------------------------------------------- running dlrun


class Session:
    """Runs the real CLI in-process in one directory, capturing its output and status."""

    def __init__(self, directory: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
        self.capsys = capsys
        monkeypatch.chdir(directory)
        monkeypatch.setenv("COLUMNS", "80")  # argparse wraps --help to the terminal width
        monkeypatch.setenv("DL_CACHE_DIR", str(directory / ".dl-cache"))  # --backend llvm: a fresh compile cache

    def dlrun(self, *argv: str) -> tuple[int, str, str]:
        from dl.cli import main

        self.capsys.readouterr()
        try:
            status = main(list(argv))
        except SystemExit as exit_:  # argparse: --help, --version, usage errors
            code = exit_.code
            status = code if isinstance(code, int) else 0 if code is None else 1
        captured = self.capsys.readouterr()
        return status, captured.out, captured.err


def prepare(directory: Path, example: Example, program: str | None) -> None:
    for name, source in example.modules.items():
        target = directory / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(source, encoding="utf-8")
    if program is not None:
        (directory / "example.dl").write_text(program, encoding="utf-8")


def parse_fragment(source: str) -> None:
    try:
        parse(source, "fragment.dl")
        return
    except DiagnosticError as first:
        problem = first
    wrapped = "fn main() {\n" + source + "}\n"
    try:
        parse(wrapped, "fragment.dl")
    except DiagnosticError as second:
        sources = SourceMap()
        sources.add("fragment.dl", source)
        as_written = render_all(problem.diagnostics, sources)
        sources.add("fragment.dl", wrapped)
        pytest.fail(
            f"fragment does not parse as written:\n{as_written}\n\n"
            f"nor inside fn main() {{ ... }}:\n{render_all(second.diagnostics, sources)}"
        )


def run_console(session: Session, text: str) -> str:
    """Run a console transcript's commands; returns the transcript as it came out."""
    transcript: list[str] = []
    status = 0
    for line in text.splitlines():
        if not line.startswith("$ "):
            continue
        transcript.append(line)
        words = shlex.split(line[2:])
        if words == ["echo", "$?"]:
            transcript.append(str(status))
            continue
        if len(words) == 2 and words[0] == "python" and words[1].endswith(".py"):
            finished = subprocess.run([sys.executable, words[1]], capture_output=True, text=True, timeout=300)
            status = finished.returncode
            transcript.extend((finished.stdout + finished.stderr).splitlines())
            continue
        if not words or words[0] != "dlrun":
            pytest.fail(f"console blocks can only run `dlrun ...`, `python NAME.py` and `echo $?`, not: {line}")
        status, out, err = session.dlrun(*words[1:])
        transcript.extend((out + err).splitlines())
    return "\n".join(transcript) + "\n"


@pytest.mark.parametrize("example", list(parameters()))
def test_doc_example(
    example: Example, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    if example.kind == "python":
        compile(example.source, example.id, "exec")
        return
    if example.kind in ("fragment", "module"):
        source = example.source
        if example.kind == "module" and MAIN.search(source):
            parse(source, "module.dl")
        else:
            parse_fragment(source)
        return
    session = Session(tmp_path, capsys, monkeypatch)
    if example.kind == "console":
        prepare(tmp_path, example, example.program)
        assert run_console(session, example.source) == example.source
        return
    prepare(tmp_path, example, example.source)
    status, out, err = session.dlrun("example.dl")
    if example.kind == "program":
        assert err == "", f"the example failed:\n{err}"
        assert status == 0
        if example.expected is not None:
            assert out == example.expected
    else:
        assert err == example.expected
        assert status == 1, f"exit status {status}, expected 1"


def test_docs_have_examples() -> None:
    pages = {example.page for example in EXAMPLES}
    assert {"language.md", "errors.md", "cli.md"} <= pages
