"""Compiling the AST into Python closures: the interpreter's one pass before running.

`Compiler` takes a loaded `Program` and gives every function a body made of
closures `step(frame)`. Names are resolved here, once: locals to frame slots,
module names to `Cell`s, built-ins to their numpy implementation with keyword
arguments already bound. The hot loop therefore never looks a name up by
string and never re-dispatches on node type. Mistakes found while compiling
(unknown names, bad calls) are collected as diagnostics and raised together.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from dl.interp.primitives import IMPLEMENTATIONS, AssertionFailure, PrimitiveError, as_array, scalar
from dl.interp.runtime import (
    BINARY,
    BREAK,
    CONTINUE,
    RETURN,
    UNARY,
    Function,
    RunError,
    complete_arguments,
    fail,
    invoke,
    is_bool_scalar,
)
from dl.interp.values import DTYPES, Cell, ModuleValue, StructType, StructValue, describe
from dl.lang import ast
from dl.lang.diagnostics import Diagnostic, DiagnosticError, Span, error
from dl.lang.modules import Program
from dl.lang.primitives import BY_NAME, SIGNATURES, BindingError, Prim, bind, closest

Step = Callable[[list], Any]
KEYWORDS = (
    "fn",
    "let",
    "if",
    "else",
    "while",
    "for",
    "in",
    "return",
    "break",
    "continue",
    "struct",
    "import",
    "as",
    "const",
    "and",
    "or",
    "not",
    "true",
    "false",
)


class Primitive:
    """A built-in used as a value (passed to or returned from a function)."""

    __slots__ = ("name", "prim")

    def __init__(self, prim: Prim) -> None:
        self.prim = prim
        self.name = prim.value

    def __call__(self, *args: Any) -> Any:
        return call_primitive_dynamic(self.prim, list(args), {})


def call_primitive_dynamic(prim: Prim, args: list, keywords: dict) -> Any:
    signature = SIGNATURES[prim]
    binding = bind(signature, len(args), list(keywords))
    values = [
        args[s] if isinstance(s, int) else keywords[s] if isinstance(s, str) else default
        for s, (_, default) in zip(
            binding.fixed, [(n, None) for n in signature.positional] + list(signature.optional), strict=True
        )
    ]
    if signature.variadic is not None:
        values.append(tuple(args[i] for i in binding.variadic))
    values.extend(
        keywords[k] if k is not None else default
        for k, (_, default) in zip(binding.keywords, signature.keywords, strict=True)
    )
    return IMPLEMENTATIONS[prim](*values)


# ---------------------------------------------------------------------- scopes


class FunctionScope:
    """Slot allocation for one function body, and what it captures from outside."""

    def __init__(self, enclosing: Scope | None) -> None:
        self.size = 1  # slot 0 holds the return value
        self.enclosing = enclosing
        self.captures: list[tuple[int, int]] = []  # (outer slot, inner slot)
        self.captured_names: dict[str, int] = {}

    def allocate(self) -> int:
        self.size += 1
        return self.size - 1


class Scope:
    """A block's names, chained to the enclosing block of the same function."""

    def __init__(self, function: FunctionScope, parent: Scope | None = None) -> None:
        self.function = function
        self.parent = parent
        self.names: dict[str, int] = {}

    def child(self) -> Scope:
        return Scope(self.function, self)

    def declare(self, name: str) -> int:
        slot = self.function.allocate()
        self.names[name] = slot
        return slot

    def lookup(self, name: str) -> int | None:
        scope: Scope | None = self
        while scope is not None:
            if name in scope.names:
                return scope.names[name]
            scope = scope.parent
        function = self.function
        if name in function.captured_names:
            return function.captured_names[name]
        if function.enclosing is None:
            return None
        outer = function.enclosing.lookup(name)
        if outer is None:
            return None
        inner = function.allocate()
        function.captures.append((outer, inner))
        function.captured_names[name] = inner
        return inner

    def visible_names(self) -> set[str]:
        names: set[str] = set()
        scope: Scope | None = self
        while scope is not None:
            names.update(scope.names)
            scope = scope.parent
        if self.function.enclosing is not None:
            names |= self.function.enclosing.visible_names()
        return names


# ---------------------------------------------------------------------- module state


class ModuleState:
    """One module's global cells, struct types and declarations."""

    def __init__(self, path: str, module: ast.Module) -> None:
        self.path = path
        self.module = module
        self.cells: dict[str, Cell] = {}
        self.functions: dict[str, ast.FnDecl] = {}
        self.structs: dict[str, StructType] = {}
        self.modules: dict[str, ModuleState] = {}


class Compiler:
    """Compiles every module of a program; `diagnostics` collects what went wrong."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.states: dict[str, ModuleState] = {}
        self.diagnostics: list[Diagnostic] = []
        self.state: ModuleState | None = None

    # -------------------------------------------------------------- entry points
    def compile_program(self) -> None:
        for path in self.module_order():
            self.declare_module(path)
        for path in self.module_order():
            self.compile_module(path)
        if self.diagnostics:
            raise DiagnosticError(self.diagnostics)

    def module_order(self) -> list[str]:
        """Modules with their imports first."""
        order: list[str] = []

        def visit(path: str) -> None:
            if path in order:
                return
            for _, target in self.program.imports.get(path, []):
                visit(target)
            order.append(path)

        visit(self.program.entry)
        return order

    def declare_module(self, path: str) -> ModuleState:
        state = self.states.get(path) or ModuleState(path, self.program.modules[path])
        self.states[path] = state
        for alias, target in self.program.imports.get(path, []):
            state.modules[alias] = self.states[target]
            state.cells[alias] = Cell(ModuleValue(alias, self.states[target].cells))
        for decl in state.module.decls:
            self.declare(state, decl)
        return state

    def declare(self, state: ModuleState, decl: ast.Decl | ast.Stmt) -> None:
        match decl:
            case ast.FnDecl(name=name):
                state.functions[name] = decl
                state.cells.setdefault(name, Cell())
            case ast.Const(name=name):
                state.cells.setdefault(name, Cell())
            case ast.StructDecl(name=name, fields=fields):
                state.structs[name] = StructType(name, tuple(f.name for f in fields))
            case _:
                pass

    def compile_module(self, path: str) -> None:
        state = self.states[path]
        self.state = state
        for decl in state.module.decls:
            self.compile_declaration(state, decl)

    def compile_declaration(self, state: ModuleState, decl: ast.Decl) -> None:
        self.state = state
        match decl:
            case ast.FnDecl(name=name):
                state.cells[name].value = self.function(decl, None)[0]
            case ast.Const(name=name, value=value):
                step = self.expression(value, Scope(FunctionScope(None)))
                try:
                    state.cells[name].value = step([None])
                except RunError as failure:
                    self.diagnostics.append(failure.diagnostic)
            case _:
                pass

    def report(self, diagnostic: Diagnostic) -> None:
        self.diagnostics.append(diagnostic)

    # -------------------------------------------------------------- functions
    def function(
        self,
        decl: ast.FnDecl | ast.Lambda,
        enclosing: Scope | None,
        name: str | None = None,
        self_slot_name: str | None = None,
    ) -> tuple[Function, FunctionScope]:
        """Compile a function; for a closure, `closure` fills in what it captures at creation."""
        function_scope = FunctionScope(enclosing)
        scope = Scope(function_scope)
        for param in decl.params:
            scope.declare(param.name)
        self_slot = scope.declare(self_slot_name) if self_slot_name else None
        defaults = tuple(
            self.expression(p.default, Scope(FunctionScope(None))) if p.default else None for p in decl.params
        )
        if isinstance(decl.body, ast.Block):
            body = self.block(decl.body, scope)
        else:
            value = self.expression(decl.body, scope)

            def body(frame: list, value: Step = value) -> Any:
                frame[0] = value(frame)
                return RETURN

        label = name or getattr(decl, "name", "<fn>")
        params = tuple(p.name for p in decl.params)
        return Function(label, params, defaults, body, function_scope.size, decl.span, (), self_slot), function_scope

    # -------------------------------------------------------------- statements
    def block(self, block: ast.Block, scope: Scope) -> Step:
        steps = [self.statement(stmt, scope) for stmt in block.body]
        return sequence(steps)

    def statement(self, stmt: ast.Stmt, scope: Scope) -> Step:
        match stmt:
            case ast.Let():
                return self.let(stmt, scope)
            case ast.Assign():
                return self.assign(stmt, scope)
            case ast.ExprStmt(expr=expr):
                value = self.expression(expr, scope)

                def run(frame: list) -> None:
                    value(frame)

                return run
            case ast.If():
                return self.if_statement(stmt, scope)
            case ast.While():
                return self.while_statement(stmt, scope)
            case ast.For():
                return self.for_statement(stmt, scope)
            case ast.Return(value=value):
                return self.return_statement(value, scope)
            case ast.Break():
                return lambda frame: BREAK
            case ast.Continue():
                return lambda frame: CONTINUE
            case ast.FnDecl():
                return self.local_function(stmt, scope)
        raise AssertionError(f"unknown statement {stmt!r}")

    def let(self, stmt: ast.Let, scope: Scope) -> Step:
        value = self.expression(stmt.value, scope)
        store = self.pattern_store(stmt.pattern, scope)
        return lambda frame: store(frame, value(frame))

    def pattern_store(self, pattern: ast.Pattern, scope: Scope) -> Callable[[list, Any], None]:
        """A function storing a value into the slots a pattern declares."""
        if isinstance(pattern, ast.NamePattern):
            slot = scope.declare(pattern.name)

            def store(frame: list, value: Any) -> None:
                frame[slot] = value

            return store
        parts = [self.pattern_store(item, scope) for item in pattern.items]
        count = len(parts)
        span = pattern.span

        def store_tuple(frame: list, value: Any) -> None:
            if value.__class__ is not tuple or len(value) != count:
                raise fail("E0507", f"cannot destructure {describe(value)} into {count} names", span)
            for part, item in zip(parts, value, strict=True):
                part(frame, item)

        return store_tuple

    def return_statement(self, value: ast.Expr | None, scope: Scope) -> Step:
        if value is None:

            def run_empty(frame: list) -> object:
                frame[0] = ()
                return RETURN

            return run_empty
        step = self.expression(value, scope)

        def run(frame: list) -> object:
            frame[0] = step(frame)
            return RETURN

        return run

    def condition(self, expr: ast.Expr, scope: Scope, what: str) -> Step:
        step = self.expression(expr, scope)
        span = expr.span

        def check(frame: list) -> Any:
            value = step(frame)
            if value is True or value is False or value.__class__ is np.bool_:
                return value
            raise fail("E0508", f"the condition of `{what}` must be a bool, found {describe(value)}", span)

        return check

    def if_statement(self, stmt: ast.If, scope: Scope) -> Step:
        condition = self.condition(stmt.cond, scope, "if")
        then = self.block(stmt.then, scope.child())
        if stmt.orelse is None:
            return lambda frame: then(frame) if condition(frame) else None
        if isinstance(stmt.orelse, ast.If):
            otherwise = self.if_statement(stmt.orelse, scope.child())
        else:
            otherwise = self.block(stmt.orelse, scope.child())
        return lambda frame: then(frame) if condition(frame) else otherwise(frame)

    def while_statement(self, stmt: ast.While, scope: Scope) -> Step:
        condition = self.condition(stmt.cond, scope, "while")
        body = self.block(stmt.body, scope.child())

        def run(frame: list) -> Any:
            while condition(frame):
                signal = body(frame)
                if signal is not None:
                    if signal is BREAK:
                        return None
                    if signal is not CONTINUE:
                        return signal
            return None

        return run

    def for_statement(self, stmt: ast.For, scope: Scope) -> Step:
        inner = scope.child()
        if isinstance(stmt.iterable, ast.Range):
            start = self.expression(stmt.iterable.start, scope)
            stop = self.expression(stmt.iterable.stop, scope)
            span = stmt.iterable.span

            def items(frame: list) -> Any:
                low, high = start(frame), stop(frame)
                if not _is_integer(low) or not _is_integer(high):
                    raise fail("E0509", f"a range needs integer bounds, found {describe(low)}..{describe(high)}", span)
                return range(int(low), int(high))
        else:
            items = self.iteration(stmt.iterable, stmt.pattern, scope)
        store = self.pattern_store(stmt.pattern, inner)
        body = self.block(stmt.body, inner)

        def run(frame: list) -> Any:
            for item in items(frame):
                store(frame, item)
                signal = body(frame)
                if signal is not None:
                    if signal is BREAK:
                        return None
                    if signal is not CONTINUE:
                        return signal
            return None

        return run

    def iteration(self, iterable: ast.Expr, pattern: ast.Pattern, scope: Scope) -> Step:
        """What `for` walks: the leading axis of a tensor, a tuple's items, or several zipped."""
        step = self.expression(iterable, scope)
        span = iterable.span
        zipped = len(pattern.items) if isinstance(pattern, ast.TuplePattern) else 0

        def items(frame: list) -> Any:
            value = step(frame)
            if (
                zipped
                and value.__class__ is tuple
                and len(value) == zipped
                and all(isinstance(v, (np.ndarray, tuple)) for v in value)
            ):
                lengths = {len(v) for v in value}
                if len(lengths) > 1:
                    raise fail("E0509", f"`for` over {describe(value)} zips iterables of different lengths", span)
                return zip(*(_leading(v) for v in value), strict=True)
            return _leading_checked(value, span)

        return items

    def local_function(self, stmt: ast.FnDecl, scope: Scope) -> Step:
        slot = scope.declare(stmt.name)
        make = self.closure(stmt, scope, stmt.name, stmt.name)

        def run(frame: list) -> None:
            frame[slot] = make(frame)

        return run

    def closure(self, decl: ast.FnDecl | ast.Lambda, scope: Scope, name: str, self_name: str | None) -> Step:
        template, function_scope = self.function(decl, scope, name, self_name)
        captures = tuple(function_scope.captures)
        parts = (template.name, template.params, template.defaults, template.body, template.size, template.span)
        self_slot = template.self_slot

        def make(frame: list) -> Function:
            captured = tuple((inner, frame[outer]) for outer, inner in captures)
            return Function(*parts, captured, self_slot)

        return make

    # -------------------------------------------------------------- assignment
    def assign(self, stmt: ast.Assign, scope: Scope) -> Step:
        value = self.expression(stmt.value, scope)
        if stmt.op != "=":
            current = self.expression(stmt.target, scope)
            combine = BINARY[stmt.op[0]]
            operand = value
            span = stmt.span

            def value(frame: list) -> Any:
                try:
                    return combine(current(frame), operand(frame))
                except PrimitiveError as problem:
                    raise fail("E0510", str(problem), span) from None

        store = self.target_store(stmt.target, scope)
        return lambda frame: store(frame, value(frame))

    def target_store(self, target: ast.Expr, scope: Scope) -> Callable[[list, Any], None]:
        """A function storing a value into an assignable expression (functional update)."""
        match target:
            case ast.Name(id=name):
                slot = scope.lookup(name)
                if slot is None:
                    self.unknown_name(target, scope, "assign to")
                    return lambda frame, value: None

                def store(frame: list, value: Any) -> None:
                    frame[slot] = value

                return store
            case ast.TupleLiteral(items=items):
                parts = [self.target_store(item, scope) for item in items]
                span = target.span

                def store_tuple(frame: list, value: Any) -> None:
                    if value.__class__ is not tuple or len(value) != len(parts):
                        raise fail("E0507", f"cannot destructure {describe(value)} into {len(parts)} targets", span)
                    for part, item in zip(parts, value, strict=True):
                        part(frame, item)

                return store_tuple
            case ast.Field(target=inner, name=field):
                return self.field_store(inner, field, target.span, scope)
            case ast.Index(target=inner, indices=indices):
                return self.index_store(inner, indices, target.span, scope)
        raise AssertionError(f"not assignable: {target!r}")

    def field_store(self, inner: ast.Expr, field: str, span: Span, scope: Scope) -> Callable[[list, Any], None]:
        read = self.expression(inner, scope)
        write = self.target_store(inner, scope)

        def store(frame: list, value: Any) -> None:
            record = read(frame)
            if not isinstance(record, StructValue) or field not in record.type.index:
                raise fail("E0511", f"{describe(record)} has no field `{field}`", span)
            write(frame, record.replace(field, value))

        return store

    def index_store(self, inner: ast.Expr, indices: tuple, span: Span, scope: Scope) -> Callable[[list, Any], None]:
        read = self.expression(inner, scope)
        write = self.target_store(inner, scope)
        key = self.index_key(indices, scope)

        def store(frame: list, value: Any) -> None:
            tensor = read(frame)
            if not isinstance(tensor, np.ndarray):
                raise fail("E0501", f"cannot assign into an element of {describe(tensor)}", span)
            updated = tensor.copy()
            try:
                updated[key(frame)] = value
            except IndexError as problem:
                raise fail("E0501", index_message(problem, tensor), span) from None
            except (ValueError, TypeError):
                raise fail(
                    "E0510", f"cannot store {describe(value)} into {describe(tensor)} at this index", span
                ) from None
            write(frame, updated)

        return store

    # -------------------------------------------------------------- expressions
    def expression(self, expr: ast.Expr, scope: Scope) -> Step:
        match expr:
            case ast.IntLiteral(value=value, dtype=dtype):
                constant = DTYPES[dtype].type(value) if dtype else value
                return lambda frame: constant
            case ast.FloatLiteral(value=value, dtype=dtype):
                constant = DTYPES[dtype or "f32"].type(value)
                return lambda frame: constant
            case ast.BoolLiteral(value=value):
                return lambda frame: value
            case ast.StringLiteral(value=value):
                return lambda frame: value
            case ast.Name():
                return self.name(expr, scope)
            case ast.Binary():
                return self.binary(expr, scope)
            case ast.Unary(op=op, operand=operand):
                return self.unary(op, operand, expr.span, scope)
            case ast.Call():
                return self.call(expr, scope)
            case ast.Index():
                return self.index(expr, scope)
            case ast.Field():
                return self.field(expr, scope)
            case ast.TupleLiteral(items=items):
                steps = [self.expression(item, scope) for item in items]
                return lambda frame: tuple([step(frame) for step in steps])
            case ast.TensorLiteral():
                return self.tensor_literal(expr, scope)
            case ast.StructLiteral():
                return self.struct_literal(expr, scope)
            case ast.Lambda():
                return self.closure(expr, scope, "<fn>", None)
        raise AssertionError(f"unknown expression {expr!r}")

    def name(self, expr: ast.Name, scope: Scope) -> Step:
        slot = scope.lookup(expr.id)
        if slot is not None:
            return lambda frame: frame[slot]
        cell = self.state.cells.get(expr.id)
        if cell is not None:
            span = expr.span
            name = expr.id

            def read_global(frame: list) -> Any:
                value = cell.value
                if value is None:
                    raise fail("E0512", f"`{name}` is used before it is defined", span)
                return value

            return read_global
        if expr.id in BY_NAME:
            primitive = Primitive(BY_NAME[expr.id])
            return lambda frame: primitive
        if expr.id in DTYPES:
            dtype = DTYPES[expr.id]
            return lambda frame: dtype
        self.unknown_name(expr, scope, "use")
        return lambda frame: None

    def unknown_name(self, expr: ast.Name, scope: Scope, verb: str) -> None:
        if expr.id in self.state.structs:
            self.report(
                error(
                    "E0202",
                    f"struct `{expr.id}` is a type, not a value",
                    expr.span,
                    notes=(f"help: build one with `{expr.id} {{ field: value, ... }}`",),
                )
            )
            return
        candidates = scope.visible_names() | set(self.state.cells) | set(BY_NAME) | set(DTYPES)
        suggestion = closest(expr.id, candidates)
        notes = (f"help: did you mean `{suggestion}`?",) if suggestion else ()
        if verb == "assign to" and expr.id in self.state.cells:
            self.report(error("E0203", f"cannot assign to `{expr.id}`: it is not a local variable", expr.span))
            return
        message = f"unknown name `{expr.id}`"
        if verb == "assign to":
            notes = ("help: declare it first with `let`",)
        self.report(error("E0201", message, expr.span, "not found in this scope", notes=notes))

    def binary(self, expr: ast.Binary, scope: Scope) -> Step:
        lhs = self.expression(expr.lhs, scope)
        rhs = self.expression(expr.rhs, scope)
        span = expr.span
        op = expr.op
        if op in ("and", "or"):
            return self.short_circuit(op, lhs, rhs, span)
        apply = BINARY[op]
        code = "E0513" if op == "@" else "E0510"
        weak_rhs = _weak_constant(expr.rhs)
        weak_lhs = _weak_constant(expr.lhs)
        if weak_rhs is not None and weak_lhs is None:
            constant = weak_rhs

            def apply_constant(frame: list) -> Any:
                try:
                    return apply(lhs(frame), constant)
                except PrimitiveError as problem:
                    raise fail(code, str(problem), span) from None

            return apply_constant
        if weak_lhs is not None and weak_rhs is None:
            constant = weak_lhs

            def constant_apply(frame: list) -> Any:
                try:
                    return apply(constant, rhs(frame))
                except PrimitiveError as problem:
                    raise fail(code, str(problem), span) from None

            return constant_apply

        def run(frame: list) -> Any:
            try:
                return apply(lhs(frame), rhs(frame))
            except PrimitiveError as problem:
                raise fail(code, str(problem), span) from None

        return run

    @staticmethod
    def short_circuit(op: str, lhs: Step, rhs: Step, span: Span) -> Step:
        apply = BINARY[op]
        stop_on = op == "or"

        def run(frame: list) -> Any:
            left = lhs(frame)
            if left is True or left is False or left.__class__ is np.bool_:
                if bool(left) is stop_on:
                    return left
                right = rhs(frame)
                if not is_bool_scalar(right):
                    raise fail("E0510", f"`{op}` needs bool operands, found {describe(right)}", span)
                return right
            try:
                return apply(left, rhs(frame))
            except PrimitiveError as problem:
                raise fail("E0510", str(problem), span) from None

        return run

    def unary(self, op: str, operand: ast.Expr, span: Span, scope: Scope) -> Step:
        step = self.expression(operand, scope)
        apply = UNARY[op]

        def run(frame: list) -> Any:
            try:
                return apply(step(frame))
            except PrimitiveError as problem:
                raise fail("E0510", str(problem), span) from None

        return run

    # -------------------------------------------------------------- calls
    def call(self, expr: ast.Call, scope: Scope) -> Step:
        func = expr.func
        if isinstance(func, ast.Name) and scope.lookup(func.id) is None:
            if func.id in self.state.functions:
                return self.static_call(self.state, func.id, expr, scope)
            if func.id not in self.state.cells and func.id in BY_NAME:
                return self.primitive_call(BY_NAME[func.id], expr, scope)
        if isinstance(func, ast.Field) and isinstance(func.target, ast.Name) and scope.lookup(func.target.id) is None:
            module = self.state.modules.get(func.target.id)
            if module is not None and func.name in module.functions:
                return self.static_call(module, func.name, expr, scope)
        return self.dynamic_call(expr, scope)

    def arguments(self, expr: ast.Call, scope: Scope) -> tuple[list[Step], dict[str, Step]]:
        positional = [self.expression(arg, scope) for arg in expr.args]
        keywords = {k.name: self.expression(k.value, scope) for k in expr.keywords}
        return positional, keywords

    def static_call(self, state: ModuleState, name: str, expr: ast.Call, scope: Scope) -> Step:
        decl = state.functions[name]
        cell = state.cells[name]
        positional, keywords = self.arguments(expr, scope)
        steps = self.bind_user_call(decl, expr, positional, keywords, state)
        if steps is None:
            return lambda frame: None
        span = expr.span
        if len(steps) == 1:
            (first,) = steps
            return lambda frame: invoke(cell.value, [first(frame)], span)
        if len(steps) == 2:
            first, second = steps
            return lambda frame: invoke(cell.value, [first(frame), second(frame)], span)
        return lambda frame: invoke(cell.value, [step(frame) for step in steps], span)

    def bind_user_call(
        self, decl: ast.FnDecl, expr: ast.Call, positional: list[Step], keywords: dict[str, Step], state: ModuleState
    ) -> list[Step] | None:
        params = decl.params
        names = [p.name for p in params]
        if len(positional) > len(params):
            self.report(
                error(
                    "E0204",
                    f"`{decl.name}` takes {len(params)} argument{'s' * (len(params) != 1)}, found {len(positional)}",
                    expr.span,
                    f"`{decl.name}` is declared at {decl.span}",
                )
            )
            return None
        steps = list(positional)
        for keyword in expr.keywords:
            if keyword.name not in names:
                suggestion = closest(keyword.name, names)
                notes = (f"help: did you mean `{suggestion}`?",) if suggestion else ()
                self.report(
                    error("E0205", f"`{decl.name}` has no parameter `{keyword.name}`", keyword.span, notes=notes)
                )
                return None
            if names.index(keyword.name) < len(positional):
                self.report(error("E0205", f"argument `{keyword.name}` is given twice", keyword.span))
                return None
        for param in params[len(positional) :]:
            if param.name in keywords:
                steps.append(keywords[param.name])
            elif param.default is not None:
                saved = self.state
                self.state = state
                steps.append(self.expression(param.default, Scope(FunctionScope(None))))
                self.state = saved
            else:
                self.report(error("E0204", f"missing argument `{param.name}` in call to `{decl.name}`", expr.span))
                return None
        return steps

    def primitive_call(self, prim: Prim, expr: ast.Call, scope: Scope) -> Step:
        signature = SIGNATURES[prim]
        try:
            binding = bind(signature, len(expr.args), [k.name for k in expr.keywords])
        except BindingError as problem:
            notes = (f"help: did you mean `{problem.suggestion}`?",) if problem.suggestion else ()
            span = next((k.span for k in expr.keywords if k.name == problem.keyword), expr.span)
            self.report(error("E0206", f"in call to `{prim.value}`: {problem}", span, notes=notes))
            return lambda frame: None
        positional, keywords = self.arguments(expr, scope)
        defaults = [*((n, None) for n in signature.positional), *signature.optional]
        steps: list[Step] = []
        for source, (_, default) in zip(binding.fixed, defaults, strict=True):
            steps.append(
                positional[source]
                if isinstance(source, int)
                else keywords[source]
                if source
                else _constant(_default_value(default))
            )
        if signature.variadic is not None:
            rest = [positional[i] for i in binding.variadic]
            steps.append(lambda frame: tuple([step(frame) for step in rest]))
        for source, (_, default) in zip(binding.keywords, signature.keywords, strict=True):
            steps.append(keywords[source] if source else _constant(_default_value(default)))
        return self.primitive_step(prim, steps, expr.span)

    def primitive_step(self, prim: Prim, steps: list[Step], span: Span) -> Step:
        implementation = IMPLEMENTATIONS[prim]
        code = "E0502" if prim is Prim.ASSERT else "E0513"

        def failure(problem: Exception) -> RunError:
            if isinstance(problem, AssertionFailure):
                return fail("E0502", str(problem), span)
            return fail(code, f"{prim.value}: {problem}", span)

        if len(steps) == 1:
            (only,) = steps

            def run_one(frame: list) -> Any:
                try:
                    return implementation(only(frame))
                except PrimitiveError as problem:
                    raise failure(problem) from None

            return run_one

        def run(frame: list) -> Any:
            try:
                return implementation(*[step(frame) for step in steps])
            except PrimitiveError as problem:
                raise failure(problem) from None

        return run

    def dynamic_call(self, expr: ast.Call, scope: Scope) -> Step:
        callee = self.expression(expr.func, scope)
        positional, keywords = self.arguments(expr, scope)
        span = expr.span

        def run(frame: list) -> Any:
            function = callee(frame)
            args = [step(frame) for step in positional]
            named = {name: step(frame) for name, step in keywords.items()}
            if isinstance(function, Function):
                return invoke(function, complete_arguments(function, args, named, span), span)
            if isinstance(function, Primitive):
                try:
                    return call_primitive_dynamic(function.prim, args, named)
                except BindingError as problem:
                    raise fail("E0503", f"in call to `{function.name}`: {problem}", span) from None
                except PrimitiveError as problem:
                    raise fail("E0513", f"{function.name}: {problem}", span) from None
            raise fail("E0503", f"{describe(function)} is not a function and cannot be called", span)

        return run

    # -------------------------------------------------------------- indexing and fields
    def index_key(self, indices: tuple, scope: Scope) -> Step:
        parts = [self.slice(i, scope) if isinstance(i, ast.Slice) else self.expression(i, scope) for i in indices]
        if len(parts) == 1:
            return parts[0]
        return lambda frame: tuple([part(frame) for part in parts])

    def slice(self, node: ast.Slice, scope: Scope) -> Step:
        start, stop, step = (
            self.expression(e, scope) if e is not None else None for e in (node.start, node.stop, node.step)
        )
        if start is None and stop is None and step is None:
            everything = slice(None)
            return lambda frame: everything
        return lambda frame: slice(start and start(frame), stop and stop(frame), step and step(frame))

    def index(self, expr: ast.Index, scope: Scope) -> Step:
        target = self.expression(expr.target, scope)
        key = self.index_key(expr.indices, scope)
        span = expr.span

        def run(frame: list) -> Any:
            value = target(frame)
            position = key(frame)
            try:
                result = value[position]
            except IndexError as problem:
                raise fail("E0501", index_message(problem, value), span) from None
            except (TypeError, ValueError, KeyError):
                raise fail("E0501", f"cannot index {describe(value)} with {describe(position)}", span) from None
            cls = result.__class__
            if cls is np.int64:
                return int(result)
            if cls is np.bool_:
                return bool(result)
            if cls is str and value.__class__ is not tuple:
                raise fail("E0501", "strings cannot be indexed", span)
            return result

        return run

    def field(self, expr: ast.Field, scope: Scope) -> Step:
        if isinstance(expr.target, ast.Name) and scope.lookup(expr.target.id) is None:
            module = self.state.modules.get(expr.target.id)
            if module is not None:
                return self.module_member(module, expr)
        target = self.expression(expr.target, scope)
        name = expr.name
        span = expr.span
        cache: list = [None, 0]

        def run(frame: list) -> Any:
            record = target(frame)
            struct_type = getattr(record, "type", None)
            if struct_type is cache[0]:
                return record.values[cache[1]]
            if not isinstance(record, StructValue) or name not in struct_type.index:
                raise fail("E0511", f"{describe(record)} has no field `{name}`", span)
            cache[0], cache[1] = struct_type, struct_type.index[name]
            return record.values[cache[1]]

        return run

    def module_member(self, module: ModuleState, expr: ast.Field) -> Step:
        cell = module.cells.get(expr.name)
        if cell is None:
            suggestion = closest(expr.name, module.cells)
            notes = (f"help: did you mean `{expr.target.id}.{suggestion}`?",) if suggestion else ()
            self.report(
                error("E0207", f"module `{expr.target.id}` has no member `{expr.name}`", expr.span, notes=notes)
            )
            return lambda frame: None
        return lambda frame: cell.value

    # -------------------------------------------------------------- literals
    def tensor_literal(self, expr: ast.TensorLiteral, scope: Scope) -> Step:
        steps = [self.expression(item, scope) for item in expr.items]
        span = expr.span

        def run(frame: list) -> Any:
            return tensor_from([step(frame) for step in steps], span)

        if all(_is_constant(item) for item in expr.items):
            constant = run([None])
            constant.setflags(write=False)
            return lambda frame: constant
        return run

    def struct_literal(self, expr: ast.StructLiteral, scope: Scope) -> Step:
        struct_type = self.struct_type(expr.type)
        if struct_type is None:
            return lambda frame: None
        given = {f.name: f for f in expr.fields}
        for field_init in expr.fields:
            if field_init.name not in struct_type.index:
                suggestion = closest(field_init.name, struct_type.fields)
                notes = (f"help: did you mean `{suggestion}`?",) if suggestion else ()
                self.report(
                    error(
                        "E0208",
                        f"struct `{struct_type.name}` has no field `{field_init.name}`",
                        field_init.span,
                        notes=notes,
                    )
                )
        missing = [name for name in struct_type.fields if name not in given]
        if missing:
            self.report(
                error(
                    "E0209",
                    f"missing field{'s' * (len(missing) > 1)} "
                    f"{', '.join(f'`{m}`' for m in missing)} in `{struct_type.name}` literal",
                    expr.span,
                )
            )
            return lambda frame: None
        steps = [self.expression(given[name].value, scope) for name in struct_type.fields]
        return lambda frame: StructValue(struct_type, tuple([step(frame) for step in steps]))

    def struct_type(self, type_expr: ast.Expr) -> StructType | None:
        state, name = self.state, None
        if isinstance(type_expr, ast.Name):
            name = type_expr.id
        elif isinstance(type_expr, ast.Field) and isinstance(type_expr.target, ast.Name):
            state = self.state.modules.get(type_expr.target.id)
            name = type_expr.name
        if state is None or name not in state.structs:
            shown = name or "this expression"
            candidates = state.structs if state is not None else {}
            suggestion = closest(name, candidates) if name else None
            notes = (f"help: did you mean `{suggestion}`?",) if suggestion else ()
            self.report(error("E0210", f"unknown struct `{shown}`", type_expr.span, notes=notes))
            return None
        return state.structs[name]


def sequence(steps: list[Step]) -> Step:
    """Run statements in order, stopping at the first break, continue or return."""
    if not steps:
        return lambda frame: None
    if len(steps) == 1:
        return steps[0]
    if len(steps) == 2:
        first, second = steps

        def run_two(frame: list) -> Any:
            signal = first(frame)
            if signal is not None:
                return signal
            return second(frame)

        return run_two

    def run(frame: list) -> Any:
        for step in steps:
            signal = step(frame)
            if signal is not None:
                return signal
        return None

    return run


def _constant(value: Any) -> Step:
    return lambda frame: value


def _default_value(default: Any) -> Any:
    return DTYPES[default] if isinstance(default, str) and default in DTYPES else default


def _weak_constant(expr: ast.Expr) -> Any:
    """An unsuffixed literal operand takes its dtype from the other operand (Python scalars are weak in numpy)."""
    if isinstance(expr, ast.IntLiteral) and expr.dtype is None:
        return expr.value
    if isinstance(expr, ast.FloatLiteral) and expr.dtype is None:
        return float(expr.value)
    return None


def _is_constant(expr: ast.Expr) -> bool:
    if isinstance(expr, (ast.IntLiteral, ast.FloatLiteral, ast.BoolLiteral)):
        return True
    if isinstance(expr, ast.Unary) and expr.op == "-":
        return _is_constant(expr.operand)
    if isinstance(expr, ast.TensorLiteral):
        return all(_is_constant(item) for item in expr.items)
    return False


def _is_integer(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _leading(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return (scalar(item) if value.ndim == 1 else item for item in value)
    return value


def _leading_checked(value: Any, span: Span) -> Any:
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            raise fail("E0509", f"cannot iterate over a scalar {describe(value)}", span)
        return _leading(value)
    if isinstance(value, tuple):
        return value
    if hasattr(value, "__iter__") and not isinstance(value, (str, StructValue)):
        return value
    raise fail("E0509", f"cannot iterate over {describe(value)}", span)


def index_message(problem: IndexError, value: Any) -> str:
    text = str(problem)
    if "out of bounds" in text or "out of range" in text:
        detail = text.split("index ", 1)[-1]
        return f"index {detail}" if detail[:1].lstrip("-").isdigit() else f"index out of range for {describe(value)}"
    return f"invalid index for {describe(value)}: {text}"


def tensor_from(values: list, span: Span) -> np.ndarray:
    """Build a tensor from a literal's elements: unsuffixed floats make f32, integers i64."""
    if not values:
        return np.zeros(0, dtype=np.float32)
    if any(isinstance(v, (tuple, StructValue, str)) for v in values):
        raise fail("E0514", "tensor literals hold numbers or tensors of numbers", span)
    arrays = [as_array(v) for v in values]
    shapes = {a.shape for a in arrays}
    if len(shapes) > 1:
        raise fail(
            "E0514",
            "the rows of a tensor literal must have one shape, found " + ", ".join(describe(a) for a in arrays),
            span,
        )
    dtypes = {a.dtype for a in arrays}
    floats = [d for d in dtypes if d.kind == "f"]
    dtype = max(floats, key=lambda d: d.itemsize) if floats else max(dtypes, key=lambda d: (d.kind != "b", d.itemsize))
    return np.stack(arrays).astype(dtype, copy=False)
