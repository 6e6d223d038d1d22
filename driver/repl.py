"""`dlrun repl` (and `dlrun` alone): the interactive DL session.

A session is a module that grows: the declarations entered so far (`fn`,
`struct`, `const`, `import`; a later one replaces an earlier one of the same
name) and the variables that the statements entered so far bound, with their
static types and values. Each entry is parsed with `parse_repl` and becomes,
beside those declarations, one function

    fn <repl>(x, y, ...) { ...the entry's statements...; return (x, y, ..., new, <value 1>, ...) }

whose parameters are the session's variables and which returns them (and the
variables the entry binds, and the value of each expression statement,
rewritten as `let <value k> = expr`). The program goes through the pipeline
like any other: checked (the host call `<repl>(x, y, ...)` with the variables'
static types, so nothing runs unless the whole entry checks), `grad` replaced,
compiled and run by the interpreter with the variables' values. What it returns
becomes the session's new state; an entry that fails leaves the state as it
was. Module constants are evaluated once per declaration, not at every entry.

Declarations see other declarations and constants, not the session's variables
(they live in `<repl>`'s frame, as locals of `main` would).

The front end is prompt_toolkit: highlighting from `dl.highlight.DLLexer`,
completion of names with their types, multi-line entry (an entry that ends
inside brackets or after an operator continues), history in
`$XDG_DATA_HOME/dl/repl_history`. Ctrl-C while typing cancels the entry; while
a program runs, it interrupts it (see `dl.interp.run.run_guarded`). When stdin
is not a terminal, entries are read from it and results printed plainly.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Iterable, Iterator
from enum import Enum
from pathlib import Path
from typing import Any, TextIO

from dl import __version__, pipeline
from dl.lang import ast
from dl.lang.check import Typed
from dl.lang.diagnostics import Diagnostic, DiagnosticError, SourceMap, Span, closest, error, render_all
from dl.lang.incremental import relocated
from dl.lang.modules import Program, load_imports
from dl.lang.nesting import with_room
from dl.lang.parse import parse_repl, parse_table
from dl.lang.primitives import BY_NAME, TRANSFORMS
from dl.lang.record import record
from dl.lang.types import FunctionRef, GradientRef, ModuleType, StrType, StructType, TensorType, TupleType, Type
from dl.runtime.backend import Options
from dl.runtime.metrics import Metrics
from dl.runtime.values import format_value

ENTRY_FUNCTION = "<repl>"
RETIRED = "(earlier"  # in the name a function declared again keeps for the variables holding it
VALUE_NAME = "<value {}>"
DECLARATIONS = (ast.FnDecl, ast.StructDecl, ast.Const, ast.Import)
HELP = """\
Enter statements, declarations (fn, struct, const, import) or expressions; an
expression prints its value and its static type. An entry that ends inside
brackets or after an operator continues on the next line.

  :type EXPR        the static type of EXPR, without running it
  :grad NAME [WRT]  the DL source grad(NAME) generates (WRT: 0, or 0,2)
  :load FILE        add the declarations of FILE.dl to the session
  :reset            forget every declaration and variable
  :help             this text
  :quit             leave (also Ctrl-D)

Tab completes names, fields after `.` and module members. Ctrl-C cancels the
entry being typed, or interrupts the program running."""


class CommandError(Exception):
    """A command used wrongly (`:grad f x`): its message is shown."""


class Outcome(Enum):
    OK = "ok"
    FAILED = "failed"
    QUIT = "quit"


@record
class Entry:
    """One entry turned into a program: what it declares, binds and shows."""

    program: Program
    declarations: list[ast.Decl]
    variables: dict[str, Type]  # the session's variables as `<repl>` takes them (`Session.retiring`)
    bound: list[str]  # the variables `<repl>` returns, in order
    shown: list[ast.Expr]  # the expression statements whose values it returns after them


class Session:
    """The state of a REPL session and what each entry does to it; prints results on stdout and
    diagnostics on stderr."""

    def __init__(self, directory: Path | None = None) -> None:
        # Imports resolve beside this (nonexistent) file: in the current directory, then the stdlib.
        self.entry = str((directory or Path.cwd()) / "<repl>")
        self.reset()

    def reset(self) -> None:
        self.sources = SourceMap()
        self.declarations: list[ast.Decl] = []
        self.variables: dict[str, Type] = {}
        self.values: dict[str, Any] = {}
        self.constants: dict[int, tuple[ast.Const, Any]] = {}
        self.closures: list[tuple[int, ast.Lambda]] = []  # the closures variables hold: (key, lambda)
        # the types of the names each held lambda captured, where it was made
        self.captures: dict[int, dict[str, Type]] = {}  # by key
        self.library = Program(entry=self.entry, sources=self.sources)  # the imported modules, loaded once
        self.search: tuple[str, ...] = ()  # the directories of the files `:load` read, where their imports are
        self.typed: Typed | None = None  # the last entry's checked program, for completion
        self.count = 0
        self.fresh = True  # the next entry starts the random stream afresh; later entries go on with it
        Metrics.start("repl", [])  # a session that logs metrics gets one run record, runs/repl-TIME/

    # -------------------------------------------------------------- entries
    def handle(self, text: str) -> Outcome:
        """Run one entry or command; never raises for a user mistake."""
        stripped = text.strip()
        if not stripped:
            return Outcome.OK
        if stripped.startswith(":"):
            return self.command(stripped)
        path = self.new_path(text)
        return self.guarded(lambda: self.run_entry(parse_repl(text, path).items, path))

    def new_path(self, text: str) -> str:
        self.count += 1
        path = f"<repl-{self.count}>"
        self.sources.add(path, text)
        return path

    def guarded(self, action: Any) -> Outcome:
        try:
            with_room(action)  # room for any tree the parser accepts (`dl.lang.nesting`)
            sys.stdout.flush()  # what the entry printed comes before a later entry's diagnostics
        except DiagnosticError as failure:
            sys.stdout.flush()
            print(render_all(failure.diagnostics, self.sources), file=sys.stderr)
            return Outcome.FAILED
        except CommandError as failure:
            print(failure, file=sys.stderr)
            return Outcome.FAILED
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return Outcome.FAILED
        return Outcome.OK

    def run_entry(self, items: Iterable[ast.Decl | ast.Stmt], path: str) -> None:
        entry = self.entry_program(list(items), path)
        checked, typed = self.prepare(entry)
        session = Options(constants=self.constants, fresh_random=self.fresh)
        self.fresh = False
        arguments = [self.values[name] for name in self.variables]
        results = pipeline.backend("interp").prepare(typed, session).call(ENTRY_FUNCTION, arguments)
        # the types as written: `let d = grad(f)` keeps `grad(f)`, not the function generated for this entry
        returned = entry_types(entry.program, checked, self.entry)
        count = len(entry.bound)
        self.declarations = entry.declarations
        self.variables = dict(zip(entry.bound, returned[:count], strict=True))
        self.values = dict(zip(entry.bound, results[:count], strict=True))
        self.library = entry.program
        self.typed = checked
        self.closures = held_lambdas(checked, self.variables.values())
        self.captures = {key: captured_types(key, node, checked) for key, node in self.closures}
        for value, static in zip(results[count:], returned[count:], strict=True):
            if static != TupleType(()):
                print(shown(value, static))

    def entry_program(self, items: list[ast.Decl | ast.Stmt], path: str) -> Entry:
        """The program for one entry: the session's declarations with the entry's own, and `<repl>`."""
        where = Span(path, 1, 1, 1, 1)
        returns = [item for item in items if isinstance(item, ast.Return)]
        if returns:
            raise DiagnosticError(error("E0102", "`return` outside a function", returns[0].span, "not in a function"))
        declared = [item for item in items if isinstance(item, DECLARATIONS)]
        declarations, variables = self.retiring(merged(self.declarations, declared), declared)
        # A lambda held by a variable is known to the checker by its node: evaluate it again (unused) so
        # that the checker meets it before the variable is called. One that captured names (`fn(x) => a * x`,
        # made by a call of `fn(a) => fn(x) => a * x`) is made where they are, with their types: in a lambda
        # taking them, given values of those types in a branch that never runs (the variable's value holds
        # what it captured; only the checker needs to see them).
        # A closure that captured what has no placeholder (a function value, a struct declared again since) is not
        # made again: a call of it is checked as returning any type, and the rest of the entry as usual.
        redeclared = {decl.name for decl in declared if isinstance(decl, ast.StructDecl)}
        structs = {
            (self.entry, decl.name)
            for decl in declarations
            if isinstance(decl, ast.StructDecl) and decl.name not in redeclared and RETIRED not in decl.name
        }
        made = [
            remade(f"<closure {k}>", node, self.captures.get(key), structs, set(variables), where)
            for k, (key, node) in enumerate(self.closures, start=1)
        ]
        body: list[ast.Stmt] = [statement for statement in made if statement is not None]
        # A variable holding a declared function is given it again by name: the value an earlier entry made
        # would call the functions its body names as they were then, where Python looks them up at the call.
        # (a function whose name a variable now holds, `let f = h`, cannot be named: `f` is the variable)
        functions = {
            id(decl): decl.name for decl in declarations if isinstance(decl, ast.FnDecl) and decl.name not in variables
        }
        closures = {  # the lambdas that capture no variable (keyed by themselves): made again, they are the ones
            # the variables hold (the module's functions they call are the session's, as for a declared function)
            key: f"<closure {k}>"
            for k, (key, node) in enumerate(self.closures, start=1)
            if key == id(node)
        }
        for name, static in variables.items():
            again = named_again(ast.Name(name, where), static, functions, where)
            if again is not None:  # (in a tuple too: `t = (f, t[1])`)
                body.append(ast.Assign(ast.Name(name, where), "=", again, where))
        # a name the entry binds or assigns anywhere (a `let`, a parameter, a loop) may not be the session's there
        rebound = set().union(*(ast.bound_names(item) | ast.assigned_names(item) for item in items))
        held = {name: t for name, t in variables.items() if name not in rebound}
        named = {key: name for key, name in functions.items() if name not in rebound}
        items = [known_functions(item, held, named, closures) for item in items]
        shown: list[ast.Expr] = []
        bound = list(self.variables)
        for item in items:
            match item:
                case ast.ExprStmt(expr=expr):
                    name = VALUE_NAME.format(len(shown) + 1)
                    body.append(ast.Let(ast.NamePattern(name, expr.span), None, expr, item.span))
                    shown.append(expr)
                case ast.Let(pattern=pattern):
                    body.append(item)
                    bound.extend(name for name in pattern_names(pattern) if name not in bound)
                case _ if not isinstance(item, DECLARATIONS):
                    body.append(item)
        names = [*bound, *(VALUE_NAME.format(k + 1) for k in range(len(shown)))]
        result = ast.TupleLiteral(tuple(ast.Name(name, where) for name in names), where)
        params = tuple(ast.Param(name, None, None, where) for name in self.variables)
        block = ast.Block((*body, ast.Return(result, where)), where)
        function = ast.FnDecl(ENTRY_FUNCTION, params, None, block, where, where)
        return Entry(self.program([*declarations, function]), declarations, variables, bound, shown)

    def retiring(self, declarations: list[ast.Decl], declared: list[ast.Decl]) -> tuple[list, dict[str, Type]]:
        """The declarations and the variables' types for an entry that declares `declared`. A variable that
        holds a function (`let g = f`) keeps it when `f` is declared again, as a Python name keeps the
        function object it was given, and a struct value keeps its struct: the earlier declaration stays,
        under a name no source can write (`f (earlier 3)`), and the variable's type refers to it. One that
        no variable holds any more goes."""
        replaced = {declaration_key(decl) for decl in declared}
        keys: dict[int, int] = {}
        names: dict[int, str] = {}
        structs: dict[str, str] = {}
        kept: list[ast.Decl] = []
        held_now = list(self.variables.values())
        for decl in self.declarations:
            if not isinstance(decl, (ast.FnDecl, ast.StructDecl)) or decl.name not in replaced:
                continue
            copy = dataclasses.replace(decl, name=f"{decl.name} {RETIRED} {self.count})")
            if isinstance(decl, ast.FnDecl) and held(held_now, decl):
                keys[id(decl)], names[id(decl)] = id(copy), copy.name
                kept.append(copy)
            elif isinstance(decl, ast.StructDecl) and any(struct_named(t, decl.name, self.entry) for t in held_now):
                structs[decl.name] = copy.name
                kept.append(copy)
        variables = {
            name: renamed_structs(relocated(static, keys, 0, names), structs, self.entry)
            for name, static in self.variables.items()
        }
        still = [decl for decl in declarations if RETIRED not in getattr(decl, "name", "") or in_use(decl, variables)]
        return [*still, *kept], variables

    def program(self, decls: list[ast.Decl]) -> Program:
        """A program whose entry module holds `decls`, reusing the modules the session has loaded."""
        module = ast.Module(self.entry, tuple(decls))
        program = Program(entry=self.entry, sources=self.sources, search=self.search)
        for path, loaded in self.library.modules.items():
            if path != self.entry:
                program.modules[path] = loaded
                program.imports[path] = self.library.imports[path]
        program.modules[self.entry] = module
        load_imports(program, module, self.entry)
        return program

    def prepare(self, entry: Entry) -> tuple[Typed, Typed]:
        """Check the entry's program (the host calling `<repl>` with the variables' types), then replace `grad`:
        the check of the program as written, and that of the program to run."""
        calls = ((ENTRY_FUNCTION, tuple(entry.variables.values())),)
        checked, _, typed = pipeline.checked_and_prepared(entry.program, calls)
        if typed.diagnostics:  # warnings only: errors were raised
            print(render_all(typed.diagnostics, self.sources), file=sys.stderr)
        return checked, typed

    # -------------------------------------------------------------- commands
    def command(self, text: str) -> Outcome:
        name, _, argument = text.partition(" ")
        argument = argument.strip()
        if name in (":quit", ":q", ":exit"):
            return Outcome.QUIT
        if name == ":help":
            print(HELP)
            return Outcome.OK
        if name == ":reset":
            self.reset()
            print("session reset")
            return Outcome.OK
        actions = {":type": self.show_type, ":grad": self.show_derivative, ":load": self.load}
        if name not in actions:
            print(f"unknown command `{name}`; :help lists the commands", file=sys.stderr)
            return Outcome.FAILED
        if not argument:
            print(f"`{name}` needs an argument; :help says which", file=sys.stderr)
            return Outcome.FAILED
        return self.guarded(lambda: actions[name](argument))

    def show_type(self, text: str) -> None:
        path = self.new_path(text)
        items = parse_repl(text, path).items
        if len(items) != 1 or not isinstance(items[0], ast.ExprStmt):
            where = items[0].span if items else Span(path, 1, 1, 1, 2)
            raise DiagnosticError(error("E0102", "`:type` takes one expression", where, "not an expression"))
        entry = self.entry_program(list(items), path)
        checked, _ = self.prepare(entry)
        print(f"{text} : {type_text(checked, entry_types(entry.program, checked, self.entry)[-1])}")

    def show_derivative(self, argument: str) -> None:
        name, _, wrt_text = argument.partition(" ")
        try:
            positions = tuple(int(p) for p in wrt_text.split(",")) if wrt_text.strip() else (0,)
        except ValueError:
            raise CommandError(f"`:grad NAME WRT` takes positions such as 0 or 0,2, not {wrt_text.strip()!r}") from None
        wrt = positions[0] if len(positions) == 1 else positions
        functions = [decl.name for decl in self.declarations if isinstance(decl, ast.FnDecl)]
        if name not in functions:
            suggestion = closest(name, functions)
            hint = f"; did you mean `{suggestion}`?" if suggestion else "; declare it with `fn`, or `:load` a file"
            raise CommandError(f"no function `{name}` in this session{hint}")
        program = self.program(self.declarations)
        print(pipeline.derivative_source(program, name, wrt, False), end="")

    def load(self, file: str) -> None:
        """Run the declarations of a file into the session, as if they had been typed."""
        loaded = pipeline.load(file, sources=self.sources)
        decls = loaded.modules[loaded.entry].decls
        directory = str(Path(loaded.entry).resolve().parent)
        searched = self.search
        if directory not in self.search:  # its imports are beside it
            self.search = (*self.search, directory)
        try:
            self.run_entry(decls, loaded.entry)
        except BaseException:
            self.search = searched  # an entry that fails changes nothing
            raise
        names = ", ".join(declaration_name(decl) for decl in decls)
        print(f"loaded {file}: {names}" if names else f"loaded {file}: nothing declared")

    # -------------------------------------------------------------- typing aids
    def is_complete(self, text: str) -> bool:
        """Whether `text` is a whole entry: it parses, or its error is not at its end (the entry is
        wrong, and running it shows why). An entry left inside brackets or after an operator is not."""
        if not text.strip() or text.lstrip().startswith(":"):
            return True
        try:
            parse_repl(text)
        except DiagnosticError as failure:
            return not any(at_end(d) for d in failure.diagnostics)
        return True

    def awaits_else(self, text: str) -> bool:
        """Whether a whole entry ends with the `}` of an `if` that has no `else` yet: the next line may begin
        with `else` (as a file may write it). The REPL waits for that line, and an empty one runs the entry,
        as Python's ends a block."""
        if not text.rstrip().endswith("}"):
            return False
        try:
            items = parse_repl(text).items
        except DiagnosticError:
            return False
        last = items[-1] if items else None
        while isinstance(last, ast.If) and last.orelse is not None:
            last = last.orelse
        return isinstance(last, ast.If)

    def completions(self, before: str) -> list[tuple[str, str]]:
        """(name, what it is) for each name that fits the word before the cursor: after `x.`, the fields
        of the struct `x` or the members of the module `x`; else variables, declarations, imports,
        keywords and built-ins."""
        word = trailing_word(before)
        target = before[: len(before) - len(word)]
        if target.rstrip().endswith("."):
            found = self.members(trailing_path(target.rstrip()[:-1]))
        else:
            found = self.names()
        return [(name, meta) for name, meta in found if name.startswith(word)]

    def names(self) -> list[tuple[str, str]]:
        found = {name: str(static) for name, static in self.variables.items()}
        for name, meta in self.declared(self.entry):
            found.setdefault(name, meta)
        for keyword in sorted(parse_table().scanner.keywords):
            found.setdefault(keyword, "keyword")
        for name in sorted(BY_NAME):
            found.setdefault(name, "built-in")
        return list(found.items())

    def declared(self, path: str) -> Iterator[tuple[str, str]]:
        """The functions (with their signatures), structs, constants and imports a module declares."""
        from dl.lsp import module_names  # the language server's completion knows each declaration's type

        if self.typed is None or path not in self.typed.program.modules:
            return
        for item in module_names(self.typed, path):
            yield item.label, item.detail or ""
        for alias, _ in self.typed.program.imports.get(path, []):
            yield alias, "module"

    def members(self, dotted: list[str]) -> list[tuple[str, str]]:
        found = self.static_type(dotted)
        if isinstance(found, StructType):
            return [(name, str(static)) for name, static in found.fields]
        if isinstance(found, ModuleType):
            return list(self.declared(found.path))
        return []

    def static_type(self, dotted: list[str]) -> Type | None:
        """The type of `a.b.c`: a variable, a module or a constant, then struct fields."""
        if not dotted:
            return None
        first, *rest = dotted
        found: Type | None = self.variables.get(first)
        if found is None and self.typed is not None:
            found = module_type(self.typed, self.entry, first)
        for name in rest:
            found = found.field_type(name) if isinstance(found, StructType) else None
        return found


# ---------------------------------------------------------------------- small pieces


def held(types: Iterable[Type], decl: ast.FnDecl) -> bool:
    """Whether a value of one of `types` holds the function `decl` (in a tuple, or as a gradient's)."""
    return any(relocated(static, {id(decl): 0}, 0) is not static for static in types)


def known_functions(item: object, variables: dict[str, Type], functions: dict[int, str], closures: dict) -> object:
    """`item` with each `grad(g)` (or `value_and_grad(g)`) of a session variable that holds a declared function,
    or a lambda that captures nothing, naming it where it is known (the function's name, or the lambda made again
    by the entry): grad differentiates what a name says statically, and a session variable is a parameter of the
    entry, which by itself could hold any function. A call `h(x)` of a variable holding such a lambda calls the
    lambda made again, so that a `grad` in its body is written for this call."""
    replacements = {}
    # (not in a lambda the entry makes: it would capture the lambda made again, which later entries do not have)
    in_lambdas = {id(inner) for node in ast.walk(item) if isinstance(node, ast.Lambda) for inner in ast.walk(node)}
    for node in ast.walk(item):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in variables:
            held = variables[node.func.id]
            if (
                isinstance(held, FunctionRef)
                and held.closure is None
                and held.key in closures
                and id(node) not in in_lambdas
            ):
                replacements[id(node.func)] = ast.Name(closures[held.key], node.func.span)
            continue
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in TRANSFORMS):
            continue
        if not node.args or not isinstance(node.args[0], ast.Name) or node.args[0].id not in variables:
            continue
        held = variables[node.args[0].id]
        if not isinstance(held, FunctionRef):
            continue
        name = functions.get(held.key) or closures.get(held.key)
        if name is not None:
            replacements[id(node.args[0])] = ast.Name(name, node.args[0].span)
    return ast.replace_nodes(item, replacements) if replacements else item


def named_again(value: ast.Expr, static: Type, functions: dict[int, str], where: Span) -> ast.Expr | None:
    """`value` (of type `static`) built again with each declared function it holds named (`functions`, by
    key); None where it holds none."""
    if isinstance(static, FunctionRef):
        return ast.Name(functions[static.key], where) if static.key in functions else None
    if isinstance(static, TupleType):
        parts = [ast.Index(value, (ast.IntLiteral(k, span=where),), where) for k in range(len(static.items))]
        again = [named_again(part, item, functions, where) for part, item in zip(parts, static.items, strict=True)]
        if any(item is not None for item in again):
            items = tuple(new if new is not None else old for new, old in zip(again, parts, strict=True))
            return ast.TupleLiteral(items, where)
    return None


def in_use(decl: ast.Decl, variables: dict[str, Type]) -> bool:
    """Whether a retired declaration is one that a variable's value still needs."""
    if isinstance(decl, ast.FnDecl):
        return held(variables.values(), decl)
    return any(struct_named(t, getattr(decl, "name", ""), None) for t in variables.values())


def struct_named(t: Type, name: str, module: str | None) -> bool:
    """Whether `t` is or holds (in a tuple or a field) a value of the struct `name` of `module` (any, if None)."""
    match t:
        case StructType():
            here = t.name == name and module in (None, t.module)
            return here or any(struct_named(item, name, module) for _, item in t.fields)
        case TupleType(items=items):
            return any(struct_named(item, name, module) for item in items)
    return False


def renamed_structs(t: Type, names: dict[str, str], module: str) -> Type:
    """`t` with the structs of `module` that `names` names renamed (in tuples and fields too)."""
    if not names:
        return t
    match t:
        case StructType(name=name):
            fields = tuple((field, renamed_structs(item, names, module)) for field, item in t.fields)
            template = tuple((field, renamed_structs(item, names, module)) for field, item in t.template)
            renamed = names.get(name, name) if t.module == module else name
            return dataclasses.replace(t, name=renamed, fields=fields, template=template)
        case TupleType(items=items):
            return TupleType(tuple(renamed_structs(item, names, module) for item in items))
    return t


def merged(old: list[ast.Decl], new: list[ast.Decl]) -> list[ast.Decl]:
    """The session's declarations after an entry: a new one replaces an old one of the same name."""
    replaced = {declaration_key(decl) for decl in new}
    return [*(decl for decl in old if declaration_key(decl) not in replaced), *new]


def declaration_key(decl: ast.Decl) -> str:
    if isinstance(decl, ast.Import):
        return decl.alias or decl.module
    return decl.name


def declaration_name(decl: ast.Decl) -> str:
    match decl:
        case ast.FnDecl(name=name):
            return f"fn {name}"
        case ast.StructDecl(name=name):
            return f"struct {name}"
        case ast.Const(name=name):
            return f"const {name}"
    return f"import {declaration_key(decl)}"


def pattern_names(pattern: ast.NamePattern | ast.TuplePattern) -> Iterator[str]:
    match pattern:
        case ast.NamePattern(name=name):
            yield name
        case ast.TuplePattern(items=items):
            for item in items:
                yield from pattern_names(item)


def entry_types(program: Program, typed: Typed, path: str) -> tuple[Type, ...]:
    """The static types of what `<repl>` returns: the types the checker gave its `return` tuple."""
    module = program.modules[path]
    function = next(d for d in module.decls if isinstance(d, ast.FnDecl) and d.name == ENTRY_FUNCTION)
    returned = function.body.body[-1]
    found = typed.type_of(returned.value) if isinstance(returned, ast.Return) else None
    if not isinstance(found, TupleType):
        raise AssertionError("internal error: the REPL entry's result has no type")
    return found.items


def captured_types(key: int, node: ast.Lambda, typed: Typed) -> dict[str, Type] | None:
    """The names the closure `key` of `node` captured where it was made (not the module's functions, constants and
    imports), with their types there; None where this check did not make it (its captures are not known)."""
    environment = typed.environments.get(key)
    if environment is None:
        return {} if key == id(node) else None  # (a lambda that captures nothing is keyed by itself)
    names = sorted(ast.captured_names(node.params, node.body))
    return {name: environment[name] for name in names if name in environment}


def remade(
    name: str,
    node: ast.Lambda,
    captured: dict[str, Type] | None,
    structs: set[tuple[str, str]],
    variables: set[str],
    where: Span,
) -> ast.Stmt | None:
    """`let NAME = node`, or for a lambda that captured names, the same inside `if false { }` and a lambda of those
    names given placeholder values of their types. Where a type has none (a function value), a lambda that captured
    only session variables is made where they are, with the types they have now; else None (not made)."""
    made = ast.Let(ast.NamePattern(name, where), None, node, where)
    if captured is None:
        return None
    values = [placeholder(static, structs, where) for static in captured.values()]
    if not captured:
        return made
    if any(value is None for value in values):
        return made if set(captured) <= variables else None
    maker = ast.Lambda(
        tuple(ast.Param(captured_name, None, None, where) for captured_name in captured), None, node, where
    )
    made = ast.Let(ast.NamePattern(name, where), None, ast.Call(maker, tuple(values), (), where), where)
    return ast.If(ast.BoolLiteral(False, where), ast.Block((made,), where), None, where)


def placeholder(static: Type, structs: set[tuple[str, str]], where: Span) -> ast.Expr | None:
    """An expression of type `static` for the checker (never run): a literal or `zeros` of the dtype and
    sizes, a tuple or struct of them; None for a type that has none here (a function, an imported struct, a
    size known only by name)."""
    match static:
        case StrType():
            return ast.StringLiteral("", where)
        case TensorType(dtype=dtype, dims=dims) if all(isinstance(d, int) for d in dims):
            if dtype == "bool":
                zero = placeholder(TensorType("i64", dims), structs, where)
                return ast.Binary("==", zero, ast.IntLiteral(1, span=where), where)
            if dims:
                sizes = tuple(ast.IntLiteral(d, span=where) for d in dims)
                return ast.Call(
                    ast.Name("zeros", where), sizes, (ast.Keyword("dtype", ast.Name(dtype, where), where),), where
                )
            if dtype in ("f32", "f64"):
                return ast.FloatLiteral(0.0, dtype, where)
            if isinstance(static.value, int) or dtype != "i64":
                return ast.IntLiteral(static.value if isinstance(static.value, int) else 0, dtype, where)
            return ast.Call(ast.Name("int", where), (ast.FloatLiteral(0.0, None, where),), (), where)  # no value known
        case TupleType(items=items):
            parts = [placeholder(item, structs, where) for item in items]
            return None if any(part is None for part in parts) else ast.TupleLiteral(tuple(parts), where)
        case StructType(name=struct, fields=fields) if (static.module, struct) in structs:
            parts = {field: placeholder(item, structs, where) for field, item in fields}
            if any(part is None for part in parts.values()):
                return None
            inits = tuple(ast.FieldInit(field, part, where) for field, part in parts.items())
            return ast.StructLiteral(ast.Name(struct, where), inits, where)
    return None


def held_lambdas(typed: Typed, held: Iterable[Type]) -> list[tuple[int, ast.Lambda]]:
    """The closures that the function values in types `held` (in tuples and struct fields too) refer to: each
    one's key and lambda (two closures of one lambda that captured different types have two keys)."""
    found: dict[int, ast.Lambda] = {}

    def visit(static: Any) -> None:
        match static:
            case FunctionRef(key=key, closure=closure):
                node = typed.functions.get(key, (None,))[0]
                if isinstance(node, ast.Lambda):
                    found[key if closure is None else closure] = node
            case GradientRef(function=function):  # `let d = grad(fn(x) => ...)`: the lambda is held too
                visit(function)
            case TupleType(items=items):
                for item in items:
                    visit(item)
            case StructType(fields=fields):
                for _, item in fields:
                    visit(item)

    for static in held:
        visit(static)
    return list(found.items())


def type_text(typed: Typed, static: Type) -> str:
    """A type as `:type` shows it: a declared function as its checked signature (as completion and the language
    server's hover show it), each one it was checked with where its parameters are not annotated."""
    found = typed.functions.get(static.key) if isinstance(static, FunctionRef) else None
    if found is None or not isinstance(found[0], ast.FnDecl):
        return str(static)
    decl, path = found
    name, retired, earlier = decl.name.partition(f" {RETIRED}")  # `f (earlier 5)`: `fn f(x: f32) -> f32 (earlier 5)`
    checked = dict.fromkeys(
        str(dataclasses.replace(s, name=name)) + (f" {RETIRED}{earlier}" if retired else "")
        for s in typed.signatures.get(path, ())
        if s.name == decl.name
    )
    if len(checked) > 1:
        return f"{' or '.join(checked)} (by call)"
    return next(iter(checked), str(static))


def shown(value: Any, static: Type) -> str:
    """How the REPL shows an expression's value: the value as `print` shows it, then its static type."""
    text = format_value(value)
    return f"{text}\n: {static}" if "\n" in text else f"{text} : {static}"


def at_end(diagnostic: Diagnostic) -> bool:
    """Whether a syntax error says the entry stopped too early: a bracket never closed, or the end reached
    where more was needed (after an operator, `=`, `,`, ...)."""
    return diagnostic.code == "E0103" or diagnostic.message.endswith("found the end of the file")


def trailing_word(text: str) -> str:
    end = len(text)
    start = end
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_"):
        start -= 1
    return text[start:end]


def trailing_path(text: str) -> list[str]:
    """`a.b` for the text `... a.b` (the dotted name that ends `text`), as a list of names."""
    names = []
    while True:
        word = trailing_word(text)
        if not word:
            return []
        names.insert(0, word)
        text = text[: len(text) - len(word)].rstrip()
        if not text.endswith("."):
            return names
        text = text[:-1].rstrip()


def module_type(typed: Typed, path: str, name: str) -> Type | None:
    imports = dict(typed.program.imports.get(path, []))
    if name in imports:
        return ModuleType(imports[name])
    module = typed.program.modules.get(path)
    for decl in module.decls if module is not None else ():
        if isinstance(decl, ast.Const) and decl.name == name:
            return typed.type_of(decl.value)
    return None


def history_path() -> Path:
    """Where the history is kept: `$XDG_DATA_HOME/dl/repl_history` (default `~/.local/share`)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "dl" / "repl_history"


# ---------------------------------------------------------------------- front ends


def piped(session: Session, stream: TextIO) -> int:
    """Entries read from a stream that is not a terminal: each runs once it is complete. Status 1 if one failed."""
    pending = ""
    failed = False
    held = False  # `pending` is whole but ends with an `if` whose `else` may begin the next line
    for number, line in enumerate(text_lines(stream)):
        if isinstance(line, Diagnostic):  # the entry it was part of is lost with it
            print(render_all([line], session.sources), file=sys.stderr)
            pending, held, failed = "", False, True
            continue
        line = line.removeprefix("\ufeff") if number == 0 else line  # a byte order mark, as a file may start
        if held and not line.lstrip().startswith("else"):
            failed |= session.handle(pending) is Outcome.FAILED
            pending = ""
            if not line.strip():  # the empty line that ended the `if`
                held = False
                continue
        held = False
        pending += line
        if not session.is_complete(pending):
            continue
        held = session.awaits_else(pending)
        if held:
            continue
        outcome = session.handle(pending)
        pending = ""
        failed |= outcome is Outcome.FAILED
        if outcome is Outcome.QUIT:
            return int(failed)
    if pending.strip():
        failed |= session.handle(pending) is Outcome.FAILED
    return int(failed)


def text_lines(stream: TextIO) -> Iterator[str | Diagnostic]:
    """The lines of `stream`, each decoded as UTF-8 here (a line that is not is E0404, as a file that is not
    would be), rather than by Python's text layer, which shows such bytes as escapes (U+DCFF) or stops."""
    binary = getattr(stream, "buffer", None)
    if binary is None:  # already text (a test's StringIO)
        yield from stream
        return
    for number, data in enumerate(binary, 1):
        try:
            yield data.decode("utf-8").replace("\r\n", "\n")
        except UnicodeDecodeError as failure:
            column = failure.start + 1
            problem = f"it is not UTF-8 text (byte 0x{data[failure.start]:02x} at line {number}, column {column})"
            where = Span("<stdin>", number, column, number, column + 1)
            yield error("E0404", f"cannot read standard input: {problem}", where)


def make_prompt(session: Session, input: Any = None, output: Any = None, history: Any = None) -> Any:
    """The prompt_toolkit session that reads entries: Enter runs a complete entry, else starts a new line."""
    from dl.highlight import DLLexer
    from prompt_toolkit import PromptSession
    from prompt_toolkit.completion import Completer, Completion
    from prompt_toolkit.key_binding import KeyBindings
    from prompt_toolkit.lexers import PygmentsLexer

    class SessionCompleter(Completer):
        def get_completions(self, document: Any, complete_event: Any) -> Iterator[Completion]:
            before = document.text_before_cursor
            word = trailing_word(before)
            for name, meta in session.completions(before):
                yield Completion(name, start_position=-len(word), display_meta=meta)

    bindings = KeyBindings()

    @bindings.add("enter")
    def enter(event: Any) -> None:
        buffer = event.current_buffer
        state = buffer.complete_state
        if state is not None and state.current_completion is not None:
            buffer.apply_completion(state.current_completion)
        elif session.is_complete(buffer.text) and not (
            buffer.document.current_line.strip() and session.awaits_else(buffer.text)
        ):
            buffer.validate_and_handle()
        else:
            buffer.insert_text("\n" + indentation(buffer.document.current_line_before_cursor))

    @bindings.add("escape", "enter")
    def newline(event: Any) -> None:
        event.current_buffer.insert_text("\n")

    return PromptSession(
        message="dl> ",
        prompt_continuation=lambda width, line, wrap: "... ".rjust(width),
        multiline=True,
        lexer=PygmentsLexer(DLLexer),
        completer=SessionCompleter(),
        key_bindings=bindings,
        history=history,
        input=input,
        output=output,
    )


def indentation(line: str) -> str:
    """The indentation of a new line in an entry: the current line's, one level more after an opening bracket."""
    current = line[: len(line) - len(line.lstrip())]
    return current + "    " if line.rstrip().endswith(("{", "(", "[")) else current


def interactive(session: Session, input: Any = None, output: Any = None, history: Any = None) -> int:
    """Read, run, print, until Ctrl-D or `:quit`. Ctrl-C cancels the entry being typed."""
    prompt = make_prompt(session, input, output, history)
    while True:
        try:
            text = prompt.prompt()
        except KeyboardInterrupt:
            continue
        except EOFError:
            return 0
        if session.handle(text) is Outcome.QUIT:
            return 0


def file_history() -> Any:
    from prompt_toolkit.history import FileHistory, InMemoryHistory

    path = history_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(exist_ok=True)
    except OSError:
        return InMemoryHistory()
    return FileHistory(str(path))


def main() -> int:
    session = Session()
    if not sys.stdin.isatty():
        return piped(session, sys.stdin)
    print(f"DL {__version__}: :help for help, Ctrl-D to leave")
    return interactive(session, history=file_history())
