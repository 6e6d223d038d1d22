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
from dl.interp import device
from dl.interp.dispatch import NUMPY, Argument, Primitive, call_primitive, primitive_step
from dl.interp.lifetimes import last_reads
from dl.interp.operators import (
    BINARY,
    COMPARISONS,
    FUNCTIONS,
    REUSABLE,
    UNARY,
    complete_arguments,
    integer_function,
    is_bool_scalar,
    reusing,
    with_literal,
)
from dl.interp.primitives import I64_LIMIT, NUMBERS, array_module, as_array, is_number_or_tensor, scalar
from dl.lang import ast
from dl.lang.calls import Binding, BindingError, arranged, bind, bind_function, binding_diagnostic, takes_one_tuple
from dl.lang.check import CallCheck, RuntimeCheck, Typed, dim_names, rebinding_help
from dl.lang.diagnostics import Diagnostic, DiagnosticError, Span, closest, error
from dl.lang.modules import Program
from dl.lang.primitives import BY_NAME, FLOAT_MATH, PRIMITIVES, TRANSFORMS, Prim
from dl.lang.printer import print_expr
from dl.lang.types import ANY, TensorType, TupleType, Type, has_dim_expression
from dl.runtime import arrays as array_modules
from dl.runtime.arrays import ArrayModule
from dl.runtime.backend import CompiledBody
from dl.runtime.calls import BREAK, CONTINUE, RETURN, Function, enter, invoke
from dl.runtime.conform import conforms
from dl.runtime.errors import DeepRecursion, PrimitiveError, RunError, fail, recursion_error
from dl.runtime.values import (
    DEVICE_ARRAYS,
    DTYPES,
    Cell,
    ModuleValue,
    StructType,
    StructValue,
    describe,
    dtype_leaves,
    dtype_name,
    format_with_spec,
)

Step = Callable[[list], Any]
MAX_RANK = 64  # numpy's limit on a tensor's axes


# ---------------------------------------------------------------------- scopes


def with_argument_dtypes(body: Step, slot: int, count: int) -> Step:
    """`body`, keeping first the dtypes of the call's arguments (slots 1 to `count`) in `slot`."""

    def run(frame: list) -> Any:
        frame[slot] = dtype_leaves(frame[1 : count + 1])
        return body(frame)

    return run


class FunctionScope:
    """Slot allocation for one function body, and what it captures from outside."""

    def __init__(self, enclosing: Scope | None) -> None:
        self.size = 1  # slot 0 holds the return value
        self.enclosing = enclosing
        self.captures: list[tuple[int, int]] = []  # (outer slot, inner slot)
        self.captured_names: dict[str, int] = {}
        self.reads: set[int] | None = None  # the slots the statement being compiled names, while collected
        self.taken: frozenset[int] = frozenset()  # ids of the `Name` nodes that read a variable the last time
        # the parameters whose types name sizes (`x: f32[N]`), by slot: a check in the body binds `N` from them
        self.sized: tuple[tuple[int, Type], ...] = ()
        # the slot holding the dtypes of the call's arguments (`dtype_leaves`), for a body whose literals take
        # one dtype in some calls and another in others (`Typed.contested_by_dtypes`); None for any other
        self.dtypes_slot: int | None = None

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
        slot = self.resolve(name)
        reads = self.function.reads
        if slot is not None and reads is not None:
            reads.add(slot)
        return slot

    def resolve(self, name: str) -> int | None:
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
        outer = function.enclosing.lookup(name)  # a closure reads the outer slot when it is made
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

    def __init__(
        self,
        program: Program,
        typed: Typed | None = None,
        bodies: dict[int, CompiledBody] | None = None,
        constants: dict[int, tuple[ast.Const, Any]] | None = None,
        arrays: ArrayModule = array_modules.NUMPY,
    ) -> None:
        self.program = program
        # Where tensors live (runtime/arrays.py), and the primitives' implementations for them.
        self.arrays = arrays
        self.table = NUMPY if arrays.on_host else device.table(arrays)
        # Bodies another backend compiled (runtime/backend.py), by id of their `FnDecl`: they run in place of
        # ours, falling back on ours for what they do not run.
        self.bodies: dict[int, CompiledBody] = bodies or {}
        # Module constants' values by id of their declaration, kept from one compilation to the next (the
        # REPL evaluates `const w = randn(3)` or a data set loaded into a constant once, not at every entry).
        self.constants = constants if constants is not None else {}
        self.states: dict[str, ModuleState] = {}
        self.diagnostics: list[Diagnostic] = []
        self.state: ModuleState | None = None
        self.typed = typed if typed is not None else Typed(program)
        # What the checker left for run time: literals that take a declared dtype, annotations to check.
        self.coercions: dict[int, str] = typed.coercions if typed is not None else {}
        self.constant_tensors: set[int] = set()  # ids of the tensor literals built once, while compiling
        self.runtime_checks: dict[int, RuntimeCheck] = typed.runtime_checks if typed is not None else {}
        self.checked_calls: dict[int, CallCheck] = typed.checked_calls if typed is not None else {}
        self.bindings: dict[int, Binding] = typed.bindings if typed is not None else {}

    # -------------------------------------------------------------- entry points
    def compile_program(self) -> None:
        for path in self.program.in_dependency_order():
            self.declare_module(path)
        for path in self.program.in_dependency_order():
            self.compile_module(path)
        if self.diagnostics:
            raise DiagnosticError(self.diagnostics)

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
        # Functions first, so that a constant may call any function of its module.
        for decl in state.module.decls:
            if isinstance(decl, ast.FnDecl):
                self.compile_declaration(state, decl)
        for decl in state.module.decls:
            if not isinstance(decl, ast.FnDecl):
                self.compile_declaration(state, decl)

    def compile_declaration(self, state: ModuleState, decl: ast.Decl) -> None:
        self.state = state
        match decl:
            case ast.FnDecl(name=name):
                state.cells[name].value = self.function(decl, None)[0]
            case ast.Const(name=name, value=value):
                kept = self.constants.get(id(decl))
                if kept is not None and kept[0] is decl:
                    state.cells[name].value = kept[1]
                    return
                step = self.expression(value, Scope(FunctionScope(None)))
                try:
                    state.cells[name].value = step([None])
                    self.constants[id(decl)] = (decl, state.cells[name].value)
                except RunError as failure:
                    self.diagnostics.append(failure.diagnostic)
                except DeepRecursion as failure:
                    self.diagnostics.append(recursion_error(failure.args[0], value.span))
            case _:
                pass

    def report(self, diagnostic: Diagnostic) -> None:
        self.diagnostics.append(diagnostic)

    def declared_struct(self, path: str, name: str) -> StructType | None:
        """The run-time type of struct `name` of module `path` (None if there is none)."""
        state = self.states.get(path)
        return state.structs.get(name) if state is not None else None

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
        function_scope.sized = tuple(
            (scope.names[param.name], declared)
            for param, declared in zip(decl.params, self.typed.declared_params(decl), strict=True)
            if declared is not None and dim_names(declared)
        )
        self_slot = scope.declare(self_slot_name) if self_slot_name else None
        contested = self.typed.contested_by_dtypes if self.typed is not None else {}
        literals = (ast.FloatLiteral, ast.IntLiteral)
        if contested and any(isinstance(n, literals) and id(n) in contested for n in ast.walk_scope(decl.body)):
            function_scope.dtypes_slot = function_scope.allocate()
        defaults = tuple(
            self.expression(p.default, Scope(FunctionScope(None))) if p.default else None for p in decl.params
        )
        if isinstance(decl.body, ast.Block):
            body = self.function_block(decl.body, scope)
        else:
            value = self.expression(decl.body, scope)

            def body(frame: list, value: Step = value) -> Any:
                frame[0] = value(frame)
                return RETURN

        if function_scope.dtypes_slot is not None:
            body = with_argument_dtypes(body, function_scope.dtypes_slot, len(decl.params))
        compiled = self.bodies.get(id(decl))
        if compiled is not None:
            body = compiled.around(body, self.declared_struct)

        call_check = self.checked_calls.get(id(decl))
        if call_check is not None:
            body = checked_body(body, call_check, tuple(p.name for p in decl.params))
        params = tuple(p.name for p in decl.params)
        label = name or getattr(decl, "name", None) or f"fn({', '.join(params)})"
        display = None if isinstance(decl, ast.FnDecl) else f"<{label} at {decl.span}>"
        function = Function(label, params, defaults, body, function_scope.size, decl.span, (), self_slot, display)
        return function, function_scope

    # -------------------------------------------------------------- statements
    def block(self, block: ast.Block, scope: Scope) -> Step:
        steps = [self.statement(stmt, scope) for stmt in block.body]
        return sequence(steps)

    def function_block(self, block: ast.Block, scope: Scope) -> Step:
        """A function's body, which lets go of each local after the last statement that names it: the
        intermediate tensors of a long body (a derivative's forward values) are freed as soon as nothing
        reads them, as in PyTorch, rather than when the call returns. The memory in use stays lower, and
        numpy's allocations find recently freed (cache-warm) blocks."""
        function = scope.function
        function.taken = last_reads(tuple(scope.names), block.body)
        steps, named = [], []
        for stmt in block.body:
            function.reads = set()
            steps.append(self.statement(stmt, scope))
            named.append(function.reads)
        function.reads = None
        later: set[int] = {0}  # slot 0 holds the return value
        for index in range(len(steps) - 1, -1, -1):
            done = named[index] - later
            if done and index < len(steps) - 1:
                steps[index] = releasing(steps[index], tuple(sorted(done)))
            later |= named[index]
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
        check = self.runtime_checks.get(id(stmt))
        if check is None:
            if isinstance(stmt.pattern, ast.NamePattern):
                return local_store(scope.names[stmt.pattern.name], value)
            return lambda frame: store(frame, value(frame))
        what = f"`{stmt.pattern.name}`" if isinstance(stmt.pattern, ast.NamePattern) else "the value"

        sized = scope.function.sized if dim_names(check.type) else ()

        def checked_let(frame: list) -> None:
            sizes = sizes_of(frame, sized)  # first, as for a rebinding (`kept_type`)
            result = value(frame)
            problem = conforms(result, check.type, sizes)
            if problem is not None:
                raise fail("E0520", f"{what} does not match its annotation: {problem}", check.span)
            store(frame, result)

        return checked_let

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

    def if_statement(self, stmt: ast.If, scope: Scope) -> Step:
        condition = self.expression(stmt.cond, scope)
        span = stmt.cond.span
        then = self.block(stmt.then, scope.child())
        if stmt.orelse is None:

            def run_then(frame: list) -> Any:
                holds = condition(frame)
                if holds is True or (holds is not False and truth(holds, span, "if")):
                    return then(frame)
                return None

            return run_then
        if isinstance(stmt.orelse, ast.If):
            otherwise = self.if_statement(stmt.orelse, scope.child())
        else:
            otherwise = self.block(stmt.orelse, scope.child())

        def run(frame: list) -> Any:
            holds = condition(frame)
            if holds is True or (holds is not False and truth(holds, span, "if")):
                return then(frame)
            return otherwise(frame)

        return run

    def while_statement(self, stmt: ast.While, scope: Scope) -> Step:
        condition = self.expression(stmt.cond, scope)
        span = stmt.cond.span
        body = self.block(stmt.body, scope.child())

        def run(frame: list) -> Any:
            while True:
                holds = condition(frame)
                if holds is not True and (holds is False or not truth(holds, span, "while")):
                    return None
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
        if isinstance(stmt.pattern, ast.NamePattern):
            return for_name(inner.names[stmt.pattern.name], items, body)

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
                and all(isinstance(v, (np.ndarray, tuple)) or v.__class__ in DEVICE_ARRAYS for v in value)
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

    def closure(self, decl: ast.FnDecl | ast.Lambda, scope: Scope, name: str | None, self_name: str | None) -> Step:
        template, function_scope = self.function(decl, scope, name, self_name)
        captures = tuple(function_scope.captures)
        parts = (template.name, template.params, template.defaults, template.body, template.size, template.span)
        self_slot = template.self_slot
        display = template.display

        def make(frame: list) -> Function:
            captured = tuple((inner, frame[outer]) for outer, inner in captures)
            return Function(*parts, captured, self_slot, display)

        return make

    # -------------------------------------------------------------- assignment
    def assign(self, stmt: ast.Assign, scope: Scope) -> Step:
        target = stmt.target
        slot = scope.lookup(target.id) if isinstance(target, ast.Name) else None
        if stmt.op == "=":
            value = self.expression(stmt.value, scope)
        else:
            literal = self.weak_literal(stmt.value)
            if slot is not None and literal is not None:
                return local_update(slot, stmt.op[:-1], literal, stmt.span)
            value = self.augmented(stmt, literal, scope)
        check = self.runtime_checks.get(id(stmt))
        if check is not None:
            value = kept_type(value, check, target, stmt.value, scope.function.sized if dim_names(check.type) else ())
        if slot is not None:
            return local_store(slot, value)
        store = self.target_store(target, scope)
        return lambda frame: store(frame, value(frame))

    def augmented(self, stmt: ast.Assign, literal: int | float | None, scope: Scope) -> Step:
        """The new value of the target of `target op= value`."""
        symbol = stmt.op[:-1]
        current = self.expression(stmt.target, scope)
        span = stmt.span
        if literal is not None:
            apply_literal = with_literal(symbol, literal, True)

            def update_literal(frame: list) -> Any:
                try:
                    return apply_literal(current(frame))
                except PrimitiveError as problem:
                    raise fail("E0510", str(problem), span) from None

            return update_literal
        operand = self.expression(stmt.value, scope)
        combine = BINARY[symbol]

        def update(frame: list) -> Any:
            try:
                return combine(current(frame), operand(frame))
            except PrimitiveError as problem:
                raise fail("E0510", str(problem), span) from None

        return update

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
            if not isinstance(tensor, np.ndarray) and tensor.__class__ not in DEVICE_ARRAYS:
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
            case ast.IntLiteral():
                constant = self.integer_constant(expr)
                return lambda frame: constant
            case ast.FloatLiteral(value=value, dtype=dtype):
                constant = DTYPES[dtype or self.coercions.get(id(expr), "f32")].type(value)
                slot = scope.function.dtypes_slot
                by_dtypes = self.typed.contested_by_dtypes.get(id(expr)) if self.typed is not None else None
                if dtype is None and slot is not None and by_dtypes:  # its dtype is the call's (`let s = 0.01`)
                    choices = {leaves: DTYPES[found].type(value) for leaves, found in by_dtypes.items()}
                    return lambda frame: choices.get(frame[slot], constant)
                return lambda frame: constant
            case ast.BoolLiteral(value=value):
                return lambda frame: value
            case ast.StringLiteral(value=value):
                return lambda frame: value
            case ast.FString(parts=parts):
                return fstring_step([self.format_step(part, scope) for part in parts])
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
                return self.closure(expr, scope, None, None)
        raise AssertionError(f"unknown expression {expr!r}")

    def format_step(self, part: str | ast.FormatField, scope: Scope) -> Step:
        """A piece of an f-string: its literal text, or its field's value formatted with the field's spec."""
        if isinstance(part, str):
            return lambda frame: part
        value, spec, span = self.expression(part.value, scope), part.spec, part.span

        def formatted(frame: list) -> str:
            shown = value(frame)
            try:
                return format_with_spec(shown, spec)
            except ValueError as problem:  # a value the checker could not type (`_`)
                raise fail(
                    "E0513", f"f-string: cannot format {describe(shown)} with `{spec}`: {problem}", span
                ) from None

        return formatted

    def name(self, expr: ast.Name, scope: Scope) -> Step:
        slot = scope.lookup(expr.id)
        if slot is not None:
            if id(expr) in scope.function.taken:
                return taking(slot)
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
            primitive = Primitive(BY_NAME[expr.id], self.table)
            return lambda frame: primitive
        if expr.id in DTYPES:
            dtype = DTYPES[expr.id]
            return lambda frame: dtype
        if expr.id in TRANSFORMS:  # in a lambda no call reached: `grad` wrote nothing for it, and it never runs
            return never_differentiated(expr)
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
        op, span = expr.op, expr.span
        if op in ("and", "or"):
            lhs, rhs = self.expression(expr.lhs, scope), self.expression(expr.rhs, scope)
            checked = self.typed.type_of(expr)
            if isinstance(checked, TensorType) and checked.dims:  # tensors: elementwise, both sides evaluated
                return operator_step(BINARY[op], [lhs, rhs], "E0510", span)
            return self.short_circuit(op, lhs, rhs, span)
        code = "E0513" if op == "@" else "E0510"
        literal_lhs, literal_rhs = self.weak_literal(expr.lhs), self.weak_literal(expr.rhs)
        if literal_rhs is not None and literal_lhs is None:
            lhs = self.operand(expr.lhs, scope)
            if isinstance(lhs, int) and op in COMPARISONS and literal_rhs.__class__ is int:
                return compare_slot_with_integer(lhs, op, literal_rhs, span)
            return operator_step(with_literal(op, literal_rhs, True), [lhs], code, span)
        if literal_lhs is not None and literal_rhs is None:
            return operator_step(with_literal(op, literal_lhs, False), [self.operand(expr.rhs, scope)], code, span)
        operands = [self.operand(expr.lhs, scope), self.operand(expr.rhs, scope)]
        if op in COMPARISONS and isinstance(operands[0], int) and isinstance(operands[1], int):
            return compare_slots(operands[0], operands[1], op, span)
        left, right = self.made_here(expr.lhs, scope), self.made_here(expr.rhs, scope)
        if op in REUSABLE and (left or right):
            return operator_step(reusing(op, left, right), operands, code, span)
        return operator_step(BINARY[op], operands, code, span)

    def made_here(self, expr: ast.Expr, scope: Scope) -> bool:
        """Whether `expr`'s value, when an array, is one its evaluation has just made and nothing else holds:
        arithmetic, a negation, or a float function of one argument (`exp`, `sqrt`, ...; never a user's
        function, which may return what it was given)."""
        match expr:
            case ast.Binary(op=op):
                return op in REUSABLE
            case ast.Unary(op="-"):
                return True
            case ast.Call(func=ast.Name(id=name)):
                return (
                    scope.lookup(name) is None
                    and name not in self.state.functions
                    and name not in self.state.cells
                    and BY_NAME.get(name) in FLOAT_MATH
                )
        return False

    def operand(self, expr: ast.Expr, scope: Scope) -> int | Step:
        """A local variable's slot, or else the step computing `expr`."""
        if isinstance(expr, ast.Name):
            slot = scope.lookup(expr.id)
            if slot is not None:
                return slot
        return self.expression(expr, scope)

    def weak_literal(self, expr: ast.Expr) -> int | float | None:
        """The value of an unsuffixed number literal (possibly negated), which adapts to the other operand."""
        if id(expr) in self.coercions:
            return None
        match expr:
            case ast.IntLiteral(dtype=None) if -(2**63) <= expr.value < 2**63:
                return expr.value
            case ast.FloatLiteral(dtype=None):
                return float(expr.value)
            case ast.Unary(op="-", operand=operand):
                value = self.weak_literal(operand)
                return -value if value is not None else None
        return None

    def integer_constant(self, expr: ast.IntLiteral) -> Any:
        """An integer literal's value: a Python int for i64, else of its suffix's (or context's) dtype."""
        dtype = expr.dtype or self.coercions.get(id(expr))  # a literal takes the dtype its context declares
        kind = DTYPES[dtype or "i64"]
        if kind.kind in "iu":
            limits = np.iinfo(kind)
            if not limits.min <= expr.value <= limits.max:
                self.report(
                    error(
                        "E0515",
                        f"integer literal {expr.value} is out of range for {dtype or 'i64'}",
                        expr.span,
                        f"{dtype or 'i64'} holds {limits.min}..{limits.max}",
                    )
                )
                return 0
        return kind.type(expr.value) if dtype not in (None, "i64") else expr.value  # i64 scalars are ints

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

    def binding(self, expr: ast.Call, bind_now: Callable[[], Binding], primitive: str | None = None) -> Binding | None:
        """How the call's arguments bind: the checker's record, or (a program compiled unchecked) bound now by
        the same rule, a call that does not bind reported as the checker reports it (`primitive`: the name of
        the primitive called)."""
        found = self.bindings.get(id(expr))
        if found is not None:
            return found
        try:
            return bind_now()
        except BindingError as problem:
            self.report(binding_diagnostic(problem, expr, primitive))
            return None

    def static_call(self, state: ModuleState, name: str, expr: ast.Call, scope: Scope) -> Step:
        decl = state.functions[name]
        cell = state.cells[name]
        keywords = [k.name for k in expr.keywords]
        binding = self.binding(expr, lambda: bind_function(name, decl.params, len(expr.args), keywords, decl.span))
        if binding is None:
            return lambda frame: None
        steps = self.user_arguments(decl, expr, binding, scope, state)
        span = expr.span
        if len(steps) == 1:
            (first,) = steps
            return lambda frame: enter(cell.value, [None, first(frame)], span)
        if len(steps) == 2:
            first, second = steps
            return lambda frame: enter(cell.value, [None, first(frame), second(frame)], span)
        return lambda frame: enter(cell.value, [None, *[step(frame) for step in steps]], span)

    def user_arguments(
        self, decl: ast.FnDecl, expr: ast.Call, binding: Binding, scope: Scope, state: ModuleState
    ) -> list[Step]:
        """A call's argument steps in parameter order; a default is compiled in the callee's module."""
        given = {k.name: k.value for k in expr.keywords}
        steps = []
        for param, source in zip(decl.params, binding.fixed, strict=True):
            if isinstance(source, int):
                steps.append(self.expression(expr.args[source], scope))
            elif isinstance(source, str):
                steps.append(self.expression(given[source], scope))
            else:
                saved = self.state
                self.state = state
                steps.append(self.expression(param.default, Scope(FunctionScope(None))))
                self.state = saved
        return steps

    def primitive_call(self, prim: Prim, expr: ast.Call, scope: Scope) -> Step:
        primitive = PRIMITIVES[prim]
        keywords = [k.name for k in expr.keywords]
        binding = self.binding(expr, lambda: bind(primitive.signature, len(expr.args), keywords), primitive.name)
        if binding is None:
            return lambda frame: None
        positional = [self.argument(arg, scope) for arg in expr.args]
        named = {k.name: self.argument(k.value, scope) for k in expr.keywords}
        arguments = arranged(primitive, binding, positional, named, lambda value: Argument(value=_default_value(value)))
        if primitive.signature.variadic is not None:
            at = len(binding.fixed)
            if takes_one_tuple(primitive, binding):  # `zeros(shape(x))` or `zeros(n)`
                arguments[at] = one_tuple_argument(arguments[at][0])
            else:
                arguments[at] = tuple_argument(list(arguments[at]))
        return primitive_step(prim, arguments, expr.span, self.table)

    def argument(self, expr: ast.Expr, scope: Scope) -> Argument:
        """A primitive's argument: literals and type names are constants, bound when the call is compiled."""
        literal = self.weak_literal(expr)
        match expr:
            case ast.FloatLiteral() | ast.Unary(op="-", operand=ast.FloatLiteral()) if self.by_call_dtypes(expr):
                return Argument(step=self.expression(expr, scope), literal=literal)  # (its dtype is the call's)
            case ast.IntLiteral() | ast.FloatLiteral() | ast.BoolLiteral() | ast.StringLiteral():
                return Argument(value=self.expression(expr, scope)([]), literal=literal)
            case ast.Unary(op="-", operand=ast.IntLiteral() | ast.FloatLiteral()):
                return Argument(value=self.expression(expr, scope)([]), literal=literal)
            case ast.Name(id=name) if name in DTYPES and scope.lookup(name) is None and name not in self.state.cells:
                return Argument(value=DTYPES[name])
            case ast.Name(id=name) if scope.lookup(name) is not None:
                return Argument(step=self.expression(expr, scope), slot=scope.lookup(name))
        return Argument(step=self.expression(expr, scope))

    def by_call_dtypes(self, expr: ast.Expr) -> bool:
        """Whether a float literal (or its negation) takes its dtype from each call's argument dtypes (a function
        checked for f64 and f32 calls): its value is then the call's, not a constant."""
        literal = expr.operand if isinstance(expr, ast.Unary) else expr
        return self.typed is not None and bool(self.typed.contested_by_dtypes.get(id(literal)))

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
                return call_primitive(function.prim, args, named, span, function.table)
            raise fail("E0503", f"{describe(function)} is not a function and cannot be called", span)

        return run

    # -------------------------------------------------------------- indexing and fields
    def index_key(self, indices: tuple, scope: Scope) -> Step:
        parts = [self.index_part(i, scope) for i in indices]
        if len(parts) == 1:
            return parts[0]
        return lambda frame: tuple([part(frame) for part in parts])

    def index_part(self, node: ast.Expr | ast.Slice | ast.Ellipsis, scope: Scope) -> Step:
        if isinstance(node, ast.Slice):
            return self.slice(node, scope)
        if isinstance(node, ast.Ellipsis):  # numpy's `...`, the same thing
            return lambda frame: Ellipsis
        return self.expression(node, scope)

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
        # `...` can leave no axis: numpy gives a 0-d array of an array, and a Python number cannot be indexed
        spread = any(isinstance(i, ast.Ellipsis) for i in expr.indices)

        def run(frame: list) -> Any:
            value = target(frame)
            position = key(frame)
            try:
                result = value[position]
            except IndexError as problem:
                raise fail("E0501", index_message(problem, value), span) from None
            except (TypeError, ValueError, KeyError):
                if spread and position is Ellipsis and value.__class__ in NUMBERS:
                    return value
                raise fail("E0501", f"cannot index {describe(value)} with {describe(position)}", span) from None
            cls = result.__class__
            if ((spread and cls is np.ndarray) or cls in DEVICE_ARRAYS) and not result.ndim:
                return scalar(result)
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
        cache: list = [None, 0]  # the struct type last seen here, and the field's position in it

        def run(frame: list) -> Any:
            record = target(frame)
            if record.__class__ is StructValue:
                struct_type = record.type
                if struct_type is cache[0]:
                    return record.values[cache[1]]
                position = struct_type.index.get(name)
                if position is not None:
                    cache[0], cache[1] = struct_type, position
                    return record.values[position]
            elif record.__class__ is ModuleValue:
                if name in record.members:
                    return record.members[name].value
                raise fail("E0511", f"{describe(record)} has no member `{name}`", span)
            raise fail("E0511", f"{describe(record)} has no field `{name}`", span)

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

        arrays = self.arrays

        def run(frame: list) -> Any:
            return array_modules.to_device(tensor_from([step(frame) for step in steps], span), arrays)

        if all(self.is_constant(item) for item in expr.items):
            try:
                constant = run([None])
            except RunError:
                return run  # a bad literal fails when it runs, with the DL call stack
            if constant.__class__ is np.ndarray:
                constant.setflags(write=False)
            self.constant_tensors.add(id(expr))
            return lambda frame: constant
        return run

    def is_constant(self, expr: ast.Expr) -> bool:
        """Whether a tensor literal's item is known while compiling: a number, or a literal built already (asked
        of its items once, when it was compiled, so that nested literals are not walked once per level)."""
        if isinstance(expr, (ast.IntLiteral, ast.FloatLiteral, ast.BoolLiteral)):
            return True
        if isinstance(expr, ast.Unary) and expr.op == "-":
            return self.is_constant(expr.operand)
        return isinstance(expr, ast.TensorLiteral) and id(expr) in self.constant_tensors

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


def taking(slot: int) -> Step:
    """The last read of a local: its value leaves the frame, so that a call or primitive given it holds the
    only reference (the caller's frame does not keep it alive while the callee runs)."""

    def take(frame: list) -> Any:
        value = frame[slot]
        frame[slot] = None
        return value

    return take


def releasing(step: Step, slots: tuple[int, ...]) -> Step:
    """`step`, then the locals in `slots` let go (no later statement names them)."""
    if len(slots) == 1:
        (slot,) = slots

        def run_releasing_one(frame: list) -> Any:
            signal = step(frame)
            frame[slot] = None
            return signal

        return run_releasing_one

    def run_releasing(frame: list) -> Any:
        signal = step(frame)
        for slot in slots:
            frame[slot] = None
        return signal

    return run_releasing


def _default_value(default: Any) -> Any:
    return DTYPES[default] if isinstance(default, str) and default in DTYPES else default


def tuple_argument(items: list[Argument]) -> Argument:
    """The variadic arguments of a primitive, as one tuple argument (constant when every item is)."""
    if all(item.constant for item in items):
        return Argument(value=tuple(item.value for item in items))
    sources = [(item.step, item.value) for item in items]
    return Argument(step=lambda frame: tuple([constant if step is None else step(frame) for step, constant in sources]))


def one_tuple_argument(item: Argument) -> Argument:
    """The one argument that gives a primitive its dimensions or axes: a tuple of them (`zeros(shape(x))`), taken
    as it is, or one integer (`zeros(3)`), made a tuple of one."""
    if item.constant:
        return Argument(value=item.value if item.value.__class__ is tuple else (item.value,))
    step = item.step
    return Argument(step=lambda frame: value if (value := step(frame)).__class__ is tuple else (value,))


def truth(value: Any, span: Span, what: str) -> bool:
    """A condition that is not a Python bool: a numpy bool, or else E0508."""
    if value.__class__ is np.bool_:
        return bool(value)
    raise fail("E0508", f"the condition of `{what}` must be a bool, found {describe(value)}", span)


def for_name(slot: int, items: Step, body: Step) -> Step:
    """`for name in ...`: each item goes straight into the name's slot."""

    def run(frame: list) -> Any:
        for item in items(frame):
            frame[slot] = item
            signal = body(frame)
            if signal is not None:
                if signal is BREAK:
                    return None
                if signal is not CONTINUE:
                    return signal
        return None

    return run


def sizes_of(frame: list, sized: tuple[tuple[int, Type], ...]) -> dict[str, int]:
    """The sizes the parameters in `sized` (slot, type) bind (`N` of `x: f32[N]`), from their values now."""
    bindings: dict[str, int] = {}
    for slot, declared in sized:
        conforms(frame[slot], declared, bindings)
    return bindings


def kept_type(
    value: Step, check: RuntimeCheck, target: ast.Expr, node: ast.Expr, sized: tuple[tuple[int, Type], ...] = ()
) -> Step:
    """The value of a rebinding `target = node`, checked against the type `target` keeps (`RuntimeCheck`), its
    size names (`f32[N]`) those the function's parameters bind (`sized`)."""

    def checked(frame: list) -> Any:
        sizes = sizes_of(frame, sized)  # first: the value may be the last read of a parameter, which lets it go
        result = value(frame)
        if conforms(result, check.type, dict(sizes)) is not None:
            raise unkept(target, check.type, result, node, check.span, sizes)
        return result

    return checked


def unkept(target: ast.Expr, kept: Type, value: Any, node: ast.Expr, span: Span, sizes: dict[str, int]) -> RunError:
    """E0520 for the first name of `target` (a name, a field, a tuple of them) whose new value lacks its type:
    at the item of a tuple written out that gave it, else at the whole value."""
    if isinstance(target, ast.TupleLiteral) and isinstance(kept, TupleType) and value.__class__ is tuple:
        nodes = node.items if isinstance(node, ast.TupleLiteral) and len(node.items) == len(value) else None
        for position, (item, item_type, part) in enumerate(zip(target.items, kept.items, value, strict=True)):
            if conforms(part, item_type, dict(sizes)) is not None:
                inner = nodes[position] if nodes is not None else node
                return unkept(item, item_type, part, inner, inner.span if nodes is not None else span, sizes)
    problem = conforms(value, kept, dict(sizes))
    found = TensorType(dtype_name(value), np.shape(value)) if is_number_or_tensor(value) else ANY
    message = f"`{print_expr(target)}` cannot be rebound to a value of another type: {problem}"
    return fail("E0520", message, span, "", (rebinding_help(target, kept, found),))


def local_store(slot: int, value: Step) -> Step:
    def store(frame: list) -> None:
        frame[slot] = value(frame)

    return store


def local_update(slot: int, symbol: str, literal: int | float, span: Span) -> Step:
    """`name op= literal` for a local `name` (`i += 1`): an i64 `name` takes Python's own integer operator."""
    apply = with_literal(symbol, literal, True)
    integers = integer_function(symbol, literal)
    if integers is None:

        def update(frame: list) -> None:
            try:
                frame[slot] = apply(frame[slot])
            except PrimitiveError as problem:
                raise fail("E0510", str(problem), span) from None

        return update

    def update_integer(frame: list) -> None:
        value = frame[slot]
        if value.__class__ is int:
            result = integers(value, literal)
            if -I64_LIMIT <= result < I64_LIMIT:
                frame[slot] = result
                return  # else the general path reports the overflow
        try:
            frame[slot] = apply(value)
        except PrimitiveError as problem:
            raise fail("E0510", str(problem), span) from None

    return update_integer


def compare_slots(lhs: int, rhs: int, symbol: str, span: Span) -> Step:
    """A comparison of two local variables (`i < n`): two i64s compare directly."""
    apply = BINARY[symbol]
    integers = FUNCTIONS[symbol]

    def run(frame: list) -> Any:
        a = frame[lhs]
        b = frame[rhs]
        if a.__class__ is int and b.__class__ is int:
            return integers(a, b)
        try:
            return apply(a, b)
        except PrimitiveError as problem:
            raise fail("E0510", str(problem), span) from None

    return run


def compare_slot_with_integer(slot: int, symbol: str, literal: int, span: Span) -> Step:
    """A comparison of a local variable with an integer literal (`i < 10`)."""
    apply = with_literal(symbol, literal, True)
    integers = FUNCTIONS[symbol]

    def run(frame: list) -> Any:
        value = frame[slot]
        if value.__class__ is int:
            return integers(value, literal)
        try:
            return apply(value)
        except PrimitiveError as problem:
            raise fail("E0510", str(problem), span) from None

    return run


def operator_step(apply: Callable, operands: list[int | Step], code: str, span: Span) -> Step:
    """The step of an operator: `apply` of one or two operands, each a local slot (read inline) or a step."""
    if len(operands) == 1:
        (only,) = operands
        if isinstance(only, int):

            def run_slot(frame: list) -> Any:
                try:
                    return apply(frame[only])
                except PrimitiveError as problem:
                    raise fail(code, str(problem), span) from None

            return run_slot

        def run_step(frame: list) -> Any:
            try:
                return apply(only(frame))
            except PrimitiveError as problem:
                raise fail(code, str(problem), span) from None

        return run_step
    lhs, rhs = operands
    if isinstance(lhs, int) and isinstance(rhs, int):

        def run_slots(frame: list) -> Any:
            try:
                return apply(frame[lhs], frame[rhs])
            except PrimitiveError as problem:
                raise fail(code, str(problem), span) from None

        return run_slots
    if isinstance(lhs, int):

        def run_slot_step(frame: list) -> Any:
            try:
                return apply(frame[lhs], rhs(frame))
            except PrimitiveError as problem:
                raise fail(code, str(problem), span) from None

        return run_slot_step
    if isinstance(rhs, int):

        def run_step_slot(frame: list) -> Any:
            try:
                return apply(lhs(frame), frame[rhs])
            except PrimitiveError as problem:
                raise fail(code, str(problem), span) from None

        return run_step_slot

    def run(frame: list) -> Any:
        try:
            return apply(lhs(frame), rhs(frame))
        except PrimitiveError as problem:
            raise fail(code, str(problem), span) from None

    return run


def fstring_step(pieces: list[Step]) -> Step:
    return lambda frame: "".join([piece(frame) for piece in pieces])


def _is_integer(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _leading(value: Any) -> Any:
    if value.__class__ in DEVICE_ARRAYS and value.ndim == 1:  # its scalars, on the host: copied there at once
        value = DEVICE_ARRAYS[value.__class__].download(value)
    if isinstance(value, np.ndarray) or value.__class__ in DEVICE_ARRAYS:
        return (scalar(item) if value.ndim == 1 else item for item in value)
    return value


def _leading_checked(value: Any, span: Span) -> Any:
    if isinstance(value, np.ndarray) or value.__class__ in DEVICE_ARRAYS:
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
        return f"index {detail}" if detail.lstrip("-")[:1].isdigit() else f"index out of range for {describe(value)}"
    if "could not be broadcast" in text:  # index tensors whose sizes the data decided
        shapes = " and ".join(
            f"[{part.strip('(,)').replace(',', ', ')}]" for part in text.split("shapes ", 1)[-1].split()
        )
        return f"index tensors do not broadcast together: shapes {shapes} (numpy pairs their elements)"
    return f"invalid index for {describe(value)}: use integers, slices or integer tensors"


def tensor_from(values: list, span: Span) -> np.ndarray:
    """Build a tensor from a literal's elements: unsuffixed floats make f32, integers i64."""
    if not values:
        return np.zeros(0, dtype=np.float32)
    for value in values:
        if not is_number_or_tensor(value):
            raise fail("E0514", f"tensor literals hold numbers or tensors of numbers, found {describe(value)}", span)
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
    if arrays[0].ndim >= MAX_RANK:
        raise fail("E0514", f"a tensor has at most {MAX_RANK} axes; this literal would have {arrays[0].ndim + 1}", span)
    xp = array_module(*arrays)  # rows on a device: stacked there, the host's numbers moved to it
    return xp.stack([xp.asarray(a) for a in arrays]).astype(dtype, copy=False)


def checked_body(body: Step, call_check: CallCheck, names: tuple[str, ...]) -> Step:
    """Check a call's annotated parameters (slots 1, 2, ...) on entry and its result (slot 0) on return."""
    params = [
        (slot, check, name)
        for slot, (check, name) in enumerate(zip(call_check.params, names, strict=True), start=1)
        if check is not None
    ]
    # sizes such as `N + 1` again, once every parameter has bound the names they are made of
    again = [(slot, check, name) for slot, check, name in params if has_dim_expression(check.type)]
    result = call_check.result

    def run(frame: list) -> Any:
        bindings: dict[str, int] = {}
        for slot, check, name in (*params, *again):
            problem = conforms(frame[slot], check.type, bindings)
            if problem is not None:
                raise fail("E0520", f"argument `{name}` does not match its annotation: {problem}", check.span)
        outcome = body(frame)
        if result is not None:
            problem = conforms(frame[0], result.type, bindings)
            if problem is not None:
                raise fail("E0520", f"the result does not match its annotation: {problem}", result.span)
        return outcome

    return run


def never_differentiated(expr: ast.Name) -> Step:
    """`grad` (or `value_and_grad`) left in a lambda that no call reached when the program was checked: the
    transform wrote no derivative for it, since nothing calls it. Running it fails, saying so."""

    def step(frame: list) -> Any:
        message = f"`{expr.id}` here has no derivative: no call of the lambda around it was seen when checking"
        helps = ("help: call the lambda where it is made (in the REPL, in the same entry), or declare it as a `fn`",)
        raise fail("E0333", message, expr.span, helps=helps)

    return step
