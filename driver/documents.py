"""The language server's open documents, analysed off the request path.

Each document is analysed (`dl.lang.incremental.analyse`, which reuses the previous analysis) on one
worker thread, always its newest text; the event loop that answers requests never checks anything. A
request reads the last finished analysis, a `Snapshot`, through a `LineMap` between the text that was
analysed and the document's text now: the lines before the region an edit changed are the same lines,
those after it the same lines shifted, so hover, definition or completion still land on the right node
while the next analysis runs. Only a document's first analysis is waited for.

An exception in an analysis is logged and becomes the snapshot's `failure`: the message and the span of
the innermost node of the document the analysis was working on (from the traceback). Requests then go
on reading the last analysis that finished.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import traceback
from collections.abc import Callable
from dataclasses import field
from functools import partial
from typing import Any

from dl.lang.check import Typed
from dl.lang.diagnostics import Span
from dl.lang.incremental import Analysis, analyse
from dl.lang.modules import Program
from dl.lang.nesting import with_room
from dl.lang.record import record
from pygls.uris import to_fs_path

log = logging.getLogger("dl.lsp")

CHUNK = 4096  # characters compared at a time when looking for where two texts differ
HISTORY_KEPT = 64  # texts of a document kept since its last analysis, at most


@record(frozen=True, eq=False)
class Snapshot:
    """One finished analysis of a document: the version analysed, the analysis, and where the analysis
    failed (an internal error), if it did. `derived` keeps what requests compute from it once."""

    version: int
    analysis: Analysis
    failure: tuple[str, Span] | None = None
    derived: dict[str, Any] = field(default_factory=dict)

    @property
    def typed(self) -> Typed:
        return self.analysis.typed

    @property
    def source(self) -> str:
        return self.analysis.source

    @property
    def path(self) -> str:
        return self.analysis.path

    @property
    def parses(self) -> bool:
        """Whether the analysed text parsed without a syntax error (`E01xx`), so that its tree is whole."""
        if self.path not in self.typed.program.modules:
            return False
        return not any(d.code.startswith("E01") and d.span.path == self.path for d in self.typed.diagnostics)

    def once(self, name: str, compute: Callable[[], Any]) -> Any:
        """What `compute` gives, computed the first time it is asked for under `name`."""
        if name not in self.derived:
            self.derived[name] = compute()
        return self.derived[name]


def document_path(uri: str) -> str:
    """The file path the checker sees for a document (imports resolve relative to it)."""
    try:
        return to_fs_path(uri) or uri
    except ValueError:  # urlparse rejects some malformed URIs (`file://[x/`); the URI itself still names it
        return uri


def analysed(
    version: int, source: str, path: str, previous: Analysis | None, unsaved: dict[str, str] | None = None
) -> Snapshot:
    """A snapshot of `source`: its analysis (its imports of open documents read their texts, `unsaved`), or
    (an internal error) an empty one that says where it failed."""
    try:
        return Snapshot(version, analyse(source, path, previous, unsaved))
    except Exception as bug:  # a bug in the toolchain: the document still gets a diagnostic, the server lives
        log.exception("dl lsp: the analysis of %s failed", path)
        message = f"internal error, please report: {type(bug).__name__}: {bug}"
        typed = Typed(Program(entry=path))
        typed.program.sources.add(path, source)  # (the program's source map, not the frozen tables)
        return Snapshot(version, Analysis(source, path, typed, frozenset()), (message, failure_span(bug, path)))


def failure_span(bug: BaseException, path: str) -> Span:
    """The span of the innermost node of the file `path` that the frames of `bug`'s traceback were working
    on (a local variable holding a tree node, or a span), or the file's first character."""
    found = Span(path, 1, 1, 1, 2)
    for frame, _ in traceback.walk_tb(bug.__traceback__):
        for value in frame.f_locals.values():
            span = value if isinstance(value, Span) else getattr(value, "span", None)
            if isinstance(span, Span) and span.path == path and span.line > 0:
                found = span
    return found


class LineMap:
    """How the lines of an analysed text and of the document's text now correspond: a line before the one
    region where the texts differ is the same line, a line after it the same line shifted; a line inside
    it has no counterpart. Lines are 0-based and end at `\\n`."""

    def __init__(self, old: str, new: str) -> None:
        self.before = old.count("\n") + 1  # the lines wholly before the first difference
        self.after: tuple[int, int] | None = None  # the first line wholly after the last one, in each text
        if old != new:
            prefix = common_prefix(old, new)
            suffix = common_suffix(old, new, min(len(old), len(new)) - prefix)
            self.before = old.count("\n", 0, prefix)
            # the lines after each `\n` of the common end, and the line it starts with if it does so in both
            after = old.count("\n", len(old) - suffix) + (line_start(old, suffix) and line_start(new, suffix))
            self.after = old.count("\n") + 1 - after, new.count("\n") + 1 - after

    def to_old(self, line: int) -> int | None:
        """The analysed line that line `line` of the text now is, if any."""
        if line < self.before:
            return line
        if self.after is not None and line >= self.after[1]:
            return line - self.after[1] + self.after[0]
        return None

    def to_new(self, line: int) -> int | None:
        """The line of the text now that analysed line `line` is, if any."""
        if line < self.before:
            return line
        if self.after is not None and line >= self.after[0]:
            return line - self.after[0] + self.after[1]
        return None

    def nearest_old(self, line: int) -> int:
        """`to_old`, or for a line inside the changed region, the analysed line nearest to it: where the
        scope of what is being typed is best known."""
        found = self.to_old(line)
        if found is not None or self.after is None:
            return line if found is None else found
        return max(self.before, min(line, self.after[0] - 1)) if self.after[0] > self.before else self.before


class Edits:
    """The line maps of the edits from an analysed text to the text now, one per change the client sent,
    composed: so that edits in several places between two analyses each move only their own lines."""

    def __init__(self, maps: list[LineMap]) -> None:
        self.maps = maps

    @property
    def none(self) -> bool:
        return all(each.after is None for each in self.maps)

    def to_old(self, line: int | None) -> int | None:
        for each in reversed(self.maps):
            line = each.to_old(line) if line is not None else None
        return line

    def to_new(self, line: int | None) -> int | None:
        for each in self.maps:
            line = each.to_new(line) if line is not None else None
        return line

    def nearest_old(self, line: int) -> int:
        for each in reversed(self.maps):
            line = each.nearest_old(line)
        return line


def common_prefix(old: str, new: str) -> int:
    """How many characters the two texts start with alike."""
    limit = min(len(old), len(new))
    start = 0
    while start < limit and old[start : start + CHUNK] == new[start : start + CHUNK]:
        start += CHUNK
    end = min(start + CHUNK, limit)
    while start < end and old[start] == new[start]:
        start += 1
    return start


def common_suffix(old: str, new: str, limit: int) -> int:
    """How many characters (at most `limit`) the two texts end with alike."""
    count = 0
    while (
        count + CHUNK <= limit
        and old[len(old) - count - CHUNK : len(old) - count] == new[len(new) - count - CHUNK : len(new) - count]
    ):
        count += CHUNK
    while count < limit and old[len(old) - count - 1] == new[len(new) - count - 1]:
        count += 1
    return count


def line_start(text: str, suffix: int) -> bool:
    """Whether the last `suffix` characters of `text` start at the start of a line."""
    start = len(text) - suffix
    return start == 0 or text[start - 1] == "\n"


class Documents:
    """The open documents: their texts (as the event loop received them), a worker thread that analyses
    them, and the last snapshot of each. `prepare` is called on the worker with each new snapshot, to
    compute there what requests will read of it; then `published`, on the event loop. Everything but the
    worker runs on the event loop."""

    def __init__(self, published: Callable[[str, Snapshot], None], prepare: Callable[[Snapshot], None]) -> None:
        self.published, self.prepare = published, prepare
        self.texts: dict[str, tuple[int, str]] = {}  # uri -> (version, text)
        # uri -> the texts since the last snapshot's, each with the line map from the one before
        self.history: dict[str, list[tuple[str, LineMap | None]]] = {}
        self.latest: dict[str, Snapshot] = {}  # the last snapshot that did not fail
        self.parsed: dict[str, Snapshot] = {}  # the last snapshot whose text parsed
        self.first: dict[str, asyncio.Future] = {}  # resolved by a document's first snapshot
        self.pending: list[str] = []  # documents to analyse, oldest request first
        self.wake = threading.Condition()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.worker: threading.Thread | None = None
        self.analyses: dict[str, Analysis] = {}  # the worker's own: the previous analysis of each document

    def open(self, uri: str, version: int, text: str) -> None:
        self.texts[uri] = (version, text)
        self.history[uri] = [(text, None)]
        self.first.setdefault(uri, asyncio.get_running_loop().create_future())

    def change(self, uri: str, version: int, text: str) -> None:
        self.texts[uri] = (version, text)
        history = self.history.setdefault(uri, [])
        if len(history) >= HISTORY_KEPT:  # analyses keep failing: keep the first text, mapped to this one at once
            history[1:] = []
        history.append((text, LineMap(history[-1][0], text) if history else None))

    def close(self, uri: str) -> None:
        self.texts.pop(uri, None)
        self.history.pop(uri, None)
        self.latest.pop(uri, None)
        self.parsed.pop(uri, None)
        waiting = self.first.pop(uri, None)
        if waiting is not None and not waiting.done():
            waiting.set_result(None)

    def text(self, uri: str) -> str | None:
        found = self.texts.get(uri)
        return found[1] if found else None

    def edits(self, uri: str, analysed: str) -> Edits:
        """The edits from the text `analysed` to the document's text now."""
        history = self.history.get(uri, [])
        start = next((index for index, (text, _) in enumerate(history) if text is analysed), None)
        if start is None:  # an older text than the history keeps: the difference in one go
            return Edits([LineMap(analysed, history[-1][0] if history else analysed)])
        return Edits([each for _, each in history[start + 1 :] if each is not None])

    def analyse_soon(self, uri: str) -> None:
        """Ask the worker for an analysis of the document's newest text."""
        if self.worker is None:
            self.loop = asyncio.get_running_loop()
            self.worker = threading.Thread(target=self.work, name="dl-analysis", daemon=True)
            self.worker.start()
        with self.wake:
            if uri not in self.pending:
                self.pending.append(uri)
            self.wake.notify()

    async def snapshot(self, uri: str) -> Snapshot | None:
        """The last snapshot of an open document (waiting for its first), or None if it is not open."""
        if uri not in self.texts:
            return None
        if uri not in self.latest:
            waiting = self.first.get(uri)
            if waiting is not None:
                await asyncio.shield(waiting)  # a cancelled request stops waiting; the analysis goes on
        return self.latest.get(uri)

    # ------------------------------------------------------------ the worker thread
    def work(self) -> None:
        while True:
            with self.wake:
                while not self.pending:
                    self.wake.wait()
                uri = self.pending.pop(0)
            found = self.texts.get(uri)
            if found is None:  # closed meanwhile
                self.analyses.pop(uri, None)
                continue
            version, source = found
            unsaved = {document_path(other): text for other, (_, text) in dict(self.texts).items() if other != uri}
            # in a room, as every pass runs: they walk trees recursively (lang/nesting.py)
            previous = self.analyses.get(uri)
            snapshot = with_room(partial(analysed, version, source, document_path(uri), previous, unsaved))
            if snapshot.failure is None:
                self.analyses[uri] = snapshot.analysis
                try:
                    with_room(partial(self.prepare, snapshot))
                except Exception:  # a request will compute it (and say what fails)
                    log.exception("dl lsp: preparing requests on %s failed", uri)
            # An analysis holds millions of objects in no cycle (tests/test_incremental.py checks it), freed by
            # reference counting when the next replaces it: out of the cycle collector's reach, its passes
            # stay short (one over them all held the interpreter lock, and the requests, for a second).
            gc.freeze()
            self.loop.call_soon_threadsafe(self.finished, uri, snapshot)

    def dependents_again(self, uri: str) -> None:
        """Analyse again the open documents that import `uri`'s file (through others too): their check read
        its text before this edit. Each one's own analysis then asks the same of those that import it."""
        path = document_path(uri)
        for other, snapshot in list(self.latest.items()):
            if other != uri and path in snapshot.typed.program.modules:
                self.analyse_soon(other)

    def finished(self, uri: str, snapshot: Snapshot) -> None:
        """A snapshot from the worker, on the event loop."""
        if uri not in self.texts:
            return
        if snapshot.failure is None or uri not in self.latest:
            self.latest[uri] = snapshot
            history = self.history.get(uri, [])
            start = next((index for index, (text, _) in enumerate(history) if text is snapshot.source), 0)
            self.history[uri] = history[start:]  # the texts before the one analysed are not needed again
        if snapshot.failure is None and snapshot.parses:
            self.parsed[uri] = snapshot
        self.dependents_again(uri)
        waiting = self.first.get(uri)
        if waiting is not None and not waiting.done():
            waiting.set_result(None)
        self.published(uri, snapshot)
