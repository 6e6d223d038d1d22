"""Module loading: a file path -> a `Program` of parsed modules, imports resolved.

`import name` resolves `name.dl` beside the importing file first, then the
standard library (stdlib/name.dl). Each module is parsed once per program; an
import cycle or a missing module is a diagnostic at the `import` line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from dl.lang import ast
from dl.lang.diagnostics import DiagnosticError, SourceMap, Span, error
from dl.lang.parse import Recovered, parse, recover


@dataclass
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

    def in_dependency_order(self) -> list[str]:
        """Module paths, each after the modules it imports (the entry last)."""
        order: list[str] = []

        def visit(path: str) -> None:
            if path in order:
                return
            for _, target in self.imports.get(path, []):
                visit(target)
            order.append(path)

        visit(self.entry)
        return order


def stdlib_path(name: str) -> Path | None:
    candidate = resources.files("dl.stdlib").joinpath(f"{name}.dl")
    return Path(str(candidate)) if candidate.is_file() else None


def resolve(name: str, importer: str) -> Path | None:
    beside = Path(importer).parent / f"{name}.dl"
    if beside.is_file():
        return beside
    return stdlib_path(name)


def read_source(path: Path, span: Span | None = None) -> str:
    """Read a source file; a missing or unreadable file is a diagnostic."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        problem = "no such file"
    except IsADirectoryError:
        problem = "is a directory, not a file"
    except UnicodeDecodeError:
        problem = "is not UTF-8 text"
    except OSError as failure:
        problem = failure.strerror or "cannot be read"
    raise DiagnosticError(error("E0404", f"cannot read `{path}`: {problem}", span or Span(str(path), 1, 1, 1, 1)))


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
    _load(program, path, text, [], recovered)
    return program


def load_imports(program: Program, module: ast.Module, importer: str) -> None:
    """Load the imports of a module parsed outside `load_program` (the REPL's entries)."""
    program.imports.setdefault(importer, [])
    _load_imports(program, module, importer, [importer])


def _load(program: Program, path: str, text: str, chain: list[str], recovered: list[Recovered] | None = None) -> None:
    program.sources.add(path, text)
    earlier = program.parsed.get(path)
    if recovered is None and earlier is not None and earlier[0] == text:
        module = earlier[1]
    elif recovered is None:
        module = parse(text, path)
    else:
        recovered.append(recover(text, path))
        module = recovered[-1].module
    program.modules[path] = module
    program.imports[path] = []
    _load_imports(program, module, path, [*chain, path])


def _load_imports(program: Program, module: ast.Module, path: str, chain: list[str]) -> None:
    problems = []
    for decl in module.decls:
        if not isinstance(decl, ast.Import):
            continue
        try:
            target = _import_one(program, decl, path, chain)
        except DiagnosticError as failure:
            problems.extend(failure.diagnostics)
            continue
        program.imports[path].append((decl.alias or decl.module, target))
    if problems:
        raise DiagnosticError(problems)


def _import_one(program: Program, decl: ast.Import, importer: str, chain: list[str]) -> str:
    found = resolve(decl.module, importer)
    if found is None:
        raise DiagnosticError(
            error(
                "E0401",
                f"no module named `{decl.module}`",
                decl.span,
                f"looked for `{decl.module}.dl` beside this file and in the standard library",
            )
        )
    target = str(found)
    if target in chain:
        cycle = " -> ".join(Path(p).stem for p in [*chain[chain.index(target) :], target])
        raise DiagnosticError(error("E0402", f"import cycle: {cycle}", decl.span, "this import closes the cycle"))
    if target not in program.modules:
        _load(program, target, read_source(found, decl.span), chain)
    return target
