"""`dlrun fmt PATH...`: lay out .dl files canonically (lang/format.py), in place, as `ruff format` does.

A path is a file (formatted whatever its name) or a directory, searched recursively for `*.dl` files
(hidden directories such as `.git` and `.venv` skipped), in sorted order. Each changed file is rewritten
atomically, keeping its permissions; a file that does not parse is never written: its diagnostics are
printed and the others are still formatted. A summary line ends the output. `--check` writes nothing
and names the files that would change. Exit status: 0, or 1 if a file has errors or (with `--check`)
would change; a path that does not exist is a usage error (2), found before anything is written.
"""

from __future__ import annotations

import sys
from pathlib import Path

from dl.lang.diagnostics import DiagnosticError, SourceMap, render_all
from dl.lang.files import write_atomically
from dl.lang.format import format_source
from dl.lang.modules import read_source
from dl.lang.record import record
from dl.runtime.errors import UsageError


@record
class Tally:
    changed: int = 0
    unchanged: int = 0
    failed: int = 0

    def summary(self, check: bool) -> str:
        """`2 files formatted, 5 already formatted`: the counts that are not zero, the first with its noun."""
        parts = [
            (self.changed, "would be formatted" if check else "formatted"),
            (self.unchanged, "already formatted"),
            (self.failed, "left alone (errors above)"),
        ]
        (count, what), *rest = [(count, what) for count, what in parts if count] or parts[:1]
        head = f"{count} {'file' if count == 1 else 'files'} {what}"
        return ", ".join([head, *(f"{count} {what}" for count, what in rest)])


def format_paths(paths: list[str], check: bool, show: bool) -> int:
    """Format every file under `paths`; returns the exit status."""
    files = collect(paths)
    if show:
        if len(files) != 1 or Path(paths[0]).is_dir():
            raise UsageError("`dlrun fmt --print` takes one file")
        return print_formatted(files[0])
    if not files:
        print(f"no .dl files in {', '.join(paths)}", file=sys.stderr)
        return 0
    tally = Tally()
    for file in files:
        outcome = format_file(file, check)
        if outcome is None:
            tally.failed += 1
        elif outcome:
            tally.changed += 1
            print(f"would format {file}" if check else f"formatted {file}")
        else:
            tally.unchanged += 1
    print(tally.summary(check))
    return 1 if tally.failed or (check and tally.changed) else 0


def collect(paths: list[str]) -> list[Path]:
    """The files `paths` name: files as given, directories searched for `*.dl`. Raises `UsageError` for a
    path that does not exist."""
    files: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            files += sorted(p for p in path.rglob("*.dl") if p.is_file() and not hidden(p.relative_to(path)))
        elif path.exists():
            files.append(path)
        else:
            raise UsageError(f"no file or directory `{given}`")
    return list(dict.fromkeys(files))


def hidden(relative: Path) -> bool:
    return any(part.startswith(".") for part in relative.parts)


def format_file(path: Path, check: bool) -> bool | None:
    """Whether `path` changes (is rewritten unless `check`); None when it cannot be read, parsed or written
    (the diagnostics or the reason are printed, the file is left alone)."""
    sources = SourceMap()
    try:
        original = read_source(path)
        sources.texts[str(path)] = original
        formatted = format_source(original, str(path))
    except DiagnosticError as failure:
        print(render_all(failure.diagnostics, sources), file=sys.stderr)
        return None
    if formatted == original:
        return False
    if not check:
        try:
            write_atomically(path, formatted)  # through a symbolic link; an interrupted write loses nothing
        except OSError as problem:
            print(f"dlrun fmt: error: cannot write `{path}`: {problem.strerror}", file=sys.stderr)
            return None
    return True


def print_formatted(path: Path) -> int:
    sources = SourceMap()
    try:
        original = read_source(path)
        sources.texts[str(path)] = original
        print(format_source(original, str(path)), end="")
    except DiagnosticError as failure:
        print(render_all(failure.diagnostics, sources), file=sys.stderr)
        return 1
    return 0
