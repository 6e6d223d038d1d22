"""The parse table of grammar/dl.lark as plain data, kept in DL's cache directory between runs.

Lark reads the grammar and computes its LALR(1) table in tens of milliseconds, more than the
rest of starting `dlrun` on a small program (bench/README.md, "Start-up"). So the table Lark
computes (lang/lalr.py) is stored, as JSON, under `cache_directory()/parse/KEY.json`, where KEY
is a checksum of the grammar's text and of the code that makes and reads the entry (a changed grammar, or a
changed way of reading Lark's table, never reuses an old entry). Later runs read it back and import no part of
Lark. A missing, damaged or foreign entry is rebuilt with Lark and replaced; a cache that cannot
be written is not used.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import NamedTuple

from dl.lang.cache import read_entry, write_entry
from dl.lang.files import shipped
from dl.lang.lexer import Terminal

MAGIC = b"DL parse table 2\n"
START_RULES = ("start", "repl_input", "embedded_expr")


class Symbol(NamedTuple):
    """One symbol of a rule's expansion."""

    name: str
    is_term: bool
    filter_out: bool  # a terminal Lark leaves out of the rule's children (punctuation written as a string)


class Rule(NamedTuple):
    """One alternative of a grammar rule, with the options that shape its children as Lark shapes them."""

    origin: str
    alias: str | None  # the `-> name` of the alternative
    expansion: tuple[Symbol, ...]
    expand1: bool  # a `?rule`: one child is passed through
    keep_all_tokens: bool  # a `!rule`: no token is left out
    empty_indices: tuple[bool, ...]  # where absent `[optional]`s stand (empty: none can be absent)


class Tables(NamedTuple):
    """Everything the parser and the scanner read from the grammar.

    `states[s]` maps a terminal to an action (a state to shift to, or `~r` to reduce by
    `rules[r]`) and a nonterminal to the state to go to after reducing to it."""

    states: tuple[dict[str, int], ...]
    start_states: dict[str, int]
    end_states: tuple[int, ...]
    rules: tuple[Rule, ...]
    terminals: tuple[Terminal, ...]
    ignore: tuple[str, ...]  # the terminals the scanner skips (blanks, comments)

    def to_json(self) -> str:
        return json.dumps(self._asdict(), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Tables:
        data = json.loads(text)
        return cls(
            states=tuple(data["states"]),
            start_states=data["start_states"],
            end_states=tuple(data["end_states"]),
            rules=tuple(
                Rule(origin, alias, tuple(Symbol(*symbol) for symbol in expansion), expand1, keep, tuple(empty))
                for origin, alias, expansion, expand1, keep, empty in data["rules"]
            ),
            terminals=tuple(Terminal(*terminal) for terminal in data["terminals"]),
            ignore=tuple(data["ignore"]),
        )


def grammar_text() -> str:
    return shipped("dl.grammar", "dl.lark").read_text()


def cache_key(grammar: str) -> str:
    """The key of the tables of `grammar`: its text, and the code that makes and reads them."""
    text = grammar.encode() + b"".join((Path(__file__).parent / name).read_bytes() for name in ("lalr.py", "tables.py"))
    return f"{zlib.crc32(text):08x}{zlib.adler32(text):08x}"  # 64 bits: two checksums (lang/cache.py says why)


def entry_path(directory: Path, key: str) -> Path:
    return directory / "parse" / f"{key}.json"


def load(directory: Path | None) -> Tables:
    """The tables of grammar/dl.lark: from the cache in `directory` (`cache_directory()` for DL's) when a whole
    entry for this grammar is there, else computed by Lark and stored there. None: no cache, always computed."""
    grammar = grammar_text()
    key = cache_key(grammar)
    path = None if directory is None else entry_path(directory, key)
    stored = None if path is None else read(path, key)
    if stored is not None:
        return stored
    from dl.lang import lalr  # imported here: Lark is needed only when the cache has no table

    computed = lalr.tables(grammar)
    if path is not None:
        write_entry(path, MAGIC, key.encode() + b"\n" + computed.to_json().encode())
    return computed


def read(path: Path, key: str) -> Tables | None:
    """The tables stored at `path` under `key`, or None for a missing, damaged or foreign entry."""
    stored = read_entry(path, MAGIC)
    if stored is None or not stored.startswith(key.encode() + b"\n"):
        return None
    try:
        return Tables.from_json(stored[len(key) + 1 :].decode())
    except (ValueError, KeyError, TypeError):  # a whole entry, but not of tables: never written by this code
        return None
