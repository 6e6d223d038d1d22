"""The parse table kept in the cache directory (lang/tables.py): the same parses as Lark's fresh table, and
a damaged, foreign or unwritable cache is never used and never fails a run."""

from __future__ import annotations

import pwd
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
from conftest import ROOT
from dl.lang import ast, lalr, tables
from dl.lang import parse as parsing
from dl.lang.cache import DIGEST_SIZE, cache_directory, read_entry, write_entry
from dl.lang.diagnostics import DiagnosticError

CORPUS = sorted(path for folder in ("tests", "examples", "stdlib") for path in (ROOT / folder).rglob("*.dl"))
HELLO = 'fn main() {\n    print("hello")\n}\n'
# What a run of a program on the interpreter must not import (each is imported where it is used).
NOT_FOR_HELLO = ("lark", "llvmlite", "pygls", "lsprotocol", "prompt_toolkit", "safetensors", "tqdm", "onnx", "mpi4py")
# Standard modules a run of hello.dl does without, each costing a millisecond or more of start-up (bench/startup.py).
NOT_FOR_HELLO += ("hashlib", "zipfile", "gzip", "csv", "difflib", "traceback", "signal", "glob")


@cache
def fresh() -> tables.Tables:
    """The tables as Lark computes them now, without any cache."""
    return lalr.tables(tables.grammar_text())


def entry(directory: Path) -> Path:
    return tables.entry_path(directory, tables.cache_key(tables.grammar_text()))


def outcome(path: Path, table: parsing.ParseTable, monkeypatch: pytest.MonkeyPatch) -> object:
    """What parsing `path` with `table` gives: every node with its spans, or the diagnostics."""
    monkeypatch.setattr(parsing, "_table", table)
    try:
        module = parsing.parse(path.read_text(errors="replace"), str(path))
    except DiagnosticError as failure:
        return [(d.code, d.message, d.span) for d in failure.diagnostics]
    return [(node, getattr(node, "span", None), getattr(node, "name_span", None)) for node in ast.walk(module)]


def canonical(table: tables.Tables) -> tables.Tables:
    """`table` with its states numbered in the order a breadth-first walk from the start states reaches them:
    Lark numbers the same automaton differently from one build to the next."""
    order = [table.start_states[name] for name in tables.START_RULES]
    number = {state: position for position, state in enumerate(order)}
    for state in order:  # grows as new states are reached
        for symbol in sorted(table.states[state]):
            target = table.states[state][symbol]
            if target >= 0 and target not in number:  # a shift or a goto, not a reduction (`~rule`)
                number[target] = len(order)
                order.append(target)
    assert len(order) == len(table.states)
    return table._replace(
        states=tuple(
            {symbol: number[action] if action >= 0 else action for symbol, action in table.states[state].items()}
            for state in order
        ),
        start_states={name: number[state] for name, state in table.start_states.items()},
        end_states=tuple(sorted(number[state] for state in table.end_states)),
    )


def test_a_stored_table_reads_back_as_larks_own(tmp_path: Path) -> None:
    assert not entry(tmp_path).exists()
    computed = tables.load(tmp_path)
    assert entry(tmp_path).is_file()
    assert tables.load(tmp_path) == computed  # read back as stored
    assert canonical(computed) == canonical(fresh())  # the automaton another build of Lark's makes


def test_the_stored_table_parses_the_corpus_as_a_fresh_lark_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tables.load(tmp_path)
    stored = tables.read(entry(tmp_path), tables.cache_key(tables.grammar_text()))
    assert stored is not None
    builder = parsing.Builder()
    ours, larks = parsing.ParseTable(stored, builder), parsing.ParseTable(fresh(), builder)
    assert len(CORPUS) > 100
    parsed = 0
    for path in CORPUS:
        expected = outcome(path, larks, monkeypatch)
        assert outcome(path, ours, monkeypatch) == expected, path
        parsed += isinstance(expected[0], tuple) and not isinstance(expected[0][0], str)
    assert parsed > 100  # most of the corpus parses: the comparison is of trees, not only of errors


@pytest.mark.parametrize("damage", ["truncated", "flipped", "empty", "garbage", "foreign", "wrong json"])
def test_a_damaged_or_foreign_entry_is_ignored_and_replaced(damage: str, tmp_path: Path) -> None:
    tables.load(tmp_path)
    path = entry(tmp_path)
    whole = path.read_bytes()
    body = whole[len(tables.MAGIC) + DIGEST_SIZE + 1 :]  # the key, a newline, the table
    key_size = len(tables.cache_key(tables.grammar_text()))
    damaged = {
        "truncated": whole[: len(whole) // 2],
        "flipped": whole[:-100] + bytes([whole[-100] ^ 0x01]) + whole[-99:],
        "empty": b"",
        "garbage": b"\x00\xff not a table at all",
        "foreign": None,  # a whole entry, but of another grammar
        "wrong json": None,  # a whole entry of this grammar's key whose JSON is not a table
    }[damage]
    if damage == "foreign":
        write_entry(path, tables.MAGIC, b"0" * key_size + body[key_size:])
    elif damage == "wrong json":
        write_entry(path, tables.MAGIC, body[: key_size + 1] + b'{"states": 1}')
    else:
        path.write_bytes(damaged)
    assert canonical(tables.load(tmp_path)) == canonical(fresh())
    assert tables.read(path, tables.cache_key(tables.grammar_text())) is not None  # replaced by a whole table


def test_a_cache_that_cannot_be_written_is_not_used(tmp_path: Path) -> None:
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache directory would be")
    assert canonical(tables.load(blocker)) == canonical(fresh())
    assert blocker.read_text() == "a file where the cache directory would be"


def test_without_a_home_directory_nothing_is_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user with no entry in the password database and no $HOME: no cache, not a directory named `~` here."""
    for variable in ("DL_CACHE_DIR", "XDG_CACHE_HOME", "HOME"):
        monkeypatch.delenv(variable, raising=False)

    def no_entry(uid: int) -> None:
        raise KeyError(uid)

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    monkeypatch.chdir(tmp_path)
    assert cache_directory() is None
    assert canonical(tables.load(cache_directory())) == canonical(fresh())
    assert list(tmp_path.iterdir()) == []


def run_hello(tmp_path: Path, cache: Path, probe: str = "") -> subprocess.CompletedProcess:
    """`dlrun hello.dl` in a new process with `cache` as its cache directory; `probe` runs after it."""
    (tmp_path / "hello.dl").write_text(HELLO)
    code = f"import sys\nfrom dl.cli import main\nstatus = main(['hello.dl'])\n{probe}\nsys.exit(status)"
    environment = {"DL_CACHE_DIR": str(cache), "PATH": "/usr/bin:/bin", "OPENBLAS_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("state", ["missing", "damaged"])
def test_dlrun_runs_with_a_missing_or_damaged_table_and_stores_a_whole_one(state: str, tmp_path: Path) -> None:
    cache_directory = tmp_path / "cache"
    if state == "damaged":
        entry(cache_directory).parent.mkdir(parents=True)
        entry(cache_directory).write_bytes(tables.MAGIC + b"0" * DIGEST_SIZE + b"\n{")
    result = run_hello(tmp_path, cache_directory)
    assert (result.returncode, result.stdout, result.stderr) == (0, "hello\n", "")
    assert read_entry(entry(cache_directory), tables.MAGIC) is not None


def test_dlrun_hello_imports_no_optional_or_heavy_package(tmp_path: Path) -> None:
    cache_directory = tmp_path / "cache"
    tables.load(cache_directory)
    probe = f"print(sorted(name for name in sys.modules if name.split('.')[0] in {NOT_FOR_HELLO!r}))"
    result = run_hello(tmp_path, cache_directory, probe)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == "hello\n[]\n"
