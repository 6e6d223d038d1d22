"""Module loading: a file path -> a `Program` of parsed modules, imports resolved.

`import name` resolves `name.dl` beside the importing file first, then the
standard library (stdlib/name.dl). Each module is parsed once per program; an
import cycle or a missing module is a diagnostic at the `import` line.
"""

from __future__ import annotations

import os
from dataclasses import field
from pathlib import Path

from dl.lang import ast
from dl.lang.diagnostics import Diagnostic, DiagnosticError, SourceMap, Span, error
from dl.lang.files import MAX_SOURCE_BYTES, not_regular, read_text, shipped
from dl.lang.parse import Recovered, parse, recover
from dl.lang.record import record


@record
class Program:
    """The entry module and every module it imports, by resolved path."""

    entry: str
    modules: dict[str, ast.Module] = field(default_factory=dict)
    # for each module path: its imports as (alias, resolved module path)
    imports: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    sources: SourceMap = field(default_factory=SourceMap)
    # modules parsed before, by path, with the text each was parsed from: an import whose file still has that
    # text is not parsed again (the language server loads a document's imports again after each edit)
    parsed: dict[str, tuple[str, ast.Module]] = field(default_factory=dict, repr=False)
    # where an import of the entry module is also looked for, after beside it: the directories of the files
    # the REPL's `:load` brought declarations from, whose imports it took along
    search: tuple[str, ...] = ()
    # the texts of files an editor holds, by path, read instead of what is on disk (the language server's
    # open documents: a module imports another's unsaved text)
    unsaved: dict[str, str] = field(default_factory=dict, repr=False)

    def in_dependency_order(self) -> list[str]:
        """Module paths, each after the modules it imports (the entry last). Walks with a list, not
        recursion, so a chain of imports of any length is fine."""
        order: list[str] = []
        placed: set[str] = set()
        waiting = [(self.entry, False)]  # (module, its imports are placed)
        while waiting:
            path, imports_placed = waiting.pop()
            if path in placed:
                continue
            if imports_placed:
                placed.add(path)
                order.append(path)
                continue
            waiting.append((path, True))
            waiting.extend((target, False) for _, target in reversed(self.imports.get(path, [])))
        return order


STDLIB_DIRECTORY = str(shipped("dl.stdlib", "nn.dl").parent)  # where the standard library's spans point


def in_stdlib(path: str) -> bool:
    """Whether a span's path is a file of the standard library (where a user's mistake is not shown)."""
    return path.startswith(STDLIB_DIRECTORY)


def stdlib_path(name: str) -> Path | None:
    candidate = shipped("dl.stdlib", f"{name}.dl")
    return candidate if candidate.is_file() else None


def resolve(name: str, importer: str, search: tuple[str, ...] = ()) -> Path | None:
    for directory in (str(Path(importer).parent), *search):
        beside = Path(directory) / f"{name}.dl"
        if beside.is_file():
            return beside
    return stdlib_path(name)


def read_source(path: Path, span: Span | None = None) -> str:
    """Read a source file; a missing or unreadable file, one that is not a regular file (a directory, a named
    pipe, a device such as /dev/zero) or one larger than `MAX_SOURCE_BYTES` is a diagnostic (E0404). A byte
    order mark that some editors write at the start of UTF-8 text is not part of the source. The diagnostic is
    at `span` (an import), else in the file: at its first line, or at the byte that is not UTF-8."""
    at = Span(str(path), 1, 1, 1, 1)
    try:
        return read_text(path, MAX_SOURCE_BYTES).removeprefix("\ufeff")
    except FileNotFoundError:
        problem = "no such file"
        if not str(path).endswith(".dl") and Path(f"{path}.dl").is_file():
            problem += f" (did you mean `{path}.dl`?)"
    except UnicodeDecodeError as failure:
        data, start = failure.object, failure.start
        line, column = data.count(b"\n", 0, start) + 1, start - (data.rfind(b"\n", 0, start) + 1) + 1
        problem = f"it is not UTF-8 text (byte 0x{data[start]:02x} at line {line}, column {column})"
        at = Span(str(path), line, column, line, column + 1)
    except OSError as failure:
        problem = failure.strerror or "it cannot be read"
    notes = (STANDARD_INPUT_HELP,) if span is None and str(path) in STANDARD_INPUT_NAMES else ()
    raise DiagnosticError(error("E0404", f"cannot read `{path}`: {problem}", span or at, notes=notes))


# What users type for a program on standard input, which is read by the REPL rather than as a file (a pipe cannot
# be read twice, and a file's imports are found beside it)
STANDARD_INPUT_NAMES = frozenset(("-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"))
STANDARD_INPUT_HELP = "help: a program is read from a file; `dlrun repl` reads DL from standard input, entry by entry"


def load_program(
    path: str,
    source: str | None = None,
    sources: SourceMap | None = None,
    recovered: list[Recovered] | None = None,
) -> Program:
    """Parse `path` (or `source` given for it) and everything it imports.

    Each file's text goes into `sources` as soon as it is read, so a diagnostic
    raised while loading (in an imported module too) can show its line.

    With a list for `recovered`, the entry file is parsed with recovery (`parse.recover`):
    its declarations that parse make the module, and the `Recovered` (with the syntax
    errors) is appended to the list before its imports are loaded. Imported files are
    parsed as ever."""
    program = Program(entry=path, sources=sources if sources is not None else SourceMap())
    text = read_source(Path(path)) if source is None else source
    program.sources.add(path, text)
    earlier = program.parsed.get(path)
    if recovered is None and earlier is not None and earlier[0] == text:
        module = earlier[1]
    elif recovered is None:
        module = parse(text, path)
    else:
        recovered.append(recover(text, path))
        module = recovered[-1].module
    load_imports(program, module, path)
    return program


@record
class Loading:
    """A module whose imports are being loaded: the next of them, and the problems found so far."""

    path: str
    imports: list[ast.Import]
    parent: Loading | None = None
    alias: str = ""  # what its importer calls it
    next: int = 0
    problems: list[Diagnostic] = field(default_factory=list)


def load_imports(program: Program, module: ast.Module, importer: str) -> None:
    """Load the imports of `module` (the module of path `importer`, already parsed), and theirs, depth first.

    A loop over a stack of modules being loaded, not recursion: a chain of imports of any length loads.
    The stack is the chain of imports that led to a module, so an import of a module on it closes a cycle
    (E0402). A module's problems are raised once all its imports were tried; its importer then adds them
    to its own, and does not record the import."""
    program.modules[importer] = module
    program.imports.setdefault(importer, [])
    stack = [Loading(importer, imports_of(module))]
    on_stack = {importer}
    while stack:
        loading = stack[-1]
        if loading.next == len(loading.imports):
            stack.pop()
            on_stack.discard(loading.path)
            finished(program, loading)
            continue
        decl = loading.imports[loading.next]
        loading.next += 1
        try:
            target, module = import_one(program, decl, loading.path, stack, on_stack)
        except DiagnosticError as failure:
            loading.problems.extend(failure.diagnostics)
            continue
        if module is None:
            program.imports[loading.path].append((decl.alias or decl.module, target))
            continue
        stack.append(Loading(target, imports_of(module), loading, decl.alias or decl.module))
        on_stack.add(target)


def imports_of(module: ast.Module) -> list[ast.Import]:
    return [decl for decl in module.decls if isinstance(decl, ast.Import)]


def finished(program: Program, loading: Loading) -> None:
    """A module's imports are all tried: its problems go to its importer (or are raised, for the first)."""
    if loading.parent is None:
        if loading.problems:
            raise DiagnosticError(loading.problems)
    elif loading.problems:
        loading.parent.problems.extend(loading.problems)
    else:
        program.imports[loading.parent.path].append((loading.alias, loading.path))


def no_module(decl: ast.Import, importer: str, search: tuple[str, ...]) -> Diagnostic:
    """E0401, saying where the module was looked for, and what is there under its name that is not a file."""
    # the REPL's entries import as a file `<repl>` in its directory would, but there is no such file
    here = "in the current directory" if Path(importer).name.startswith("<") else "beside this file"
    loaded = ", beside the files loaded" if search else ""
    notes = tuple(
        f"`{candidate}` is there, but {not_regular(mode, candidate).strerror}: a module is a `.dl` file"
        for candidate, mode in not_files(decl.module, importer, search)
    )
    looked = f"looked for `{decl.module}.dl` {here}{loaded} and in the standard library"
    return error("E0401", f"no module named `{decl.module}`", decl.span, looked, notes=notes)


def not_files(name: str, importer: str, search: tuple[str, ...]) -> list[tuple[Path, int]]:
    """The paths where `resolve` looked for module `name` that exist but are not regular files (a directory
    named `sub.dl`), with their modes."""
    found = []
    for directory in (str(Path(importer).parent), *search):
        candidate = Path(directory) / f"{name}.dl"
        try:
            found.append((candidate, os.stat(candidate).st_mode))
        except OSError:  # not there (or a broken link): nothing to explain
            continue
    return found


def import_one(
    program: Program, decl: ast.Import, importer: str, stack: list[Loading], on_stack: set[str]
) -> tuple[str, ast.Module | None]:
    """The path `decl` imports, and its module when it is newly parsed (its imports are still to load)."""
    search = program.search if importer == program.entry else ()
    found = resolve(decl.module, importer, search)
    if found is None:
        raise DiagnosticError(no_module(decl, importer, search))
    target = str(found)
    if target in on_stack:
        chain = [loading.path for loading in stack]
        cycle = " -> ".join(Path(p).stem for p in [*chain[chain.index(target) :], target])
        raise DiagnosticError(error("E0402", f"import cycle: {cycle}", decl.span, "this import closes the cycle"))
    if target in program.modules:
        return target, None
    text = program.unsaved.get(target)
    text = read_source(found, decl.span) if text is None else text
    program.sources.add(target, text)
    earlier = program.parsed.get(target)
    module = earlier[1] if earlier is not None and earlier[0] == text else parse(text, target)
    program.modules[target] = module
    program.imports[target] = []
    return target, module
