"""Evaluating DL expressions from Python tests.

`dl_eval("a + b", x, y)` compiles `fn f(a, b) { return a + b }` with the real
pipeline (parse, imports, interpreter compiler) and calls the compiled DL
function with the given Python/numpy values, inside `run_guarded`, so a user
mistake surfaces as `DiagnosticError` exactly as it would from `dlrun`.

Values cross the boundary in the interpreter's own representation: tensors are
numpy arrays, f32/f64 scalars numpy scalars, i64 and bool scalars Python
`int`/`bool`, tuples Python tuples.
"""

from __future__ import annotations

import functools
import io
from typing import Any

import dl.pipeline
import numpy as np
from dl.interp.primitives import Output
from dl.interp.run import compile_program, run_guarded
from dl.lang.diagnostics import DiagnosticError

PARAMS = "abcdefgh"
_counter = iter(range(10**9))


@functools.cache
def dl_function(body: str, arity: int):
    """The compiled DL function `fn f(a, b, ...) { <body> }` (cached per body and arity)."""
    params = ", ".join(PARAMS[:arity])
    path = f"<dl-test-{next(_counter)}>.dl"
    source = f"fn f({params}) {{\n{body}\n}}\n"
    program = dl.pipeline.load(path, source)
    compiler = compile_program(program)
    return compiler.states[path].cells["f"].value


def dl_eval(expr: str, *args: Any) -> Any:
    """Evaluate the DL expression `expr` with parameters a, b, c, ... bound to `args`."""
    return dl_run(f"return {expr}", *args)


def dl_run(body: str, *args: Any) -> Any:
    """Run a function body (statements, ending in `return`) with parameters a, b, c, ... bound to `args`."""
    function = dl_function(body, len(args))
    return run_guarded(lambda: function(*args))


def dl_error(expr: str, *args: Any) -> DiagnosticError:
    """Evaluate `expr`, expecting a DL diagnostic; returns it (fails the test if none is raised)."""
    try:
        value = dl_eval(expr, *args)
    except DiagnosticError as failure:
        return failure
    raise AssertionError(f"`{expr}` evaluated to {value!r} instead of raising a DL diagnostic")


def dl_main(source: str, path: str | None = None) -> str:
    """Run a whole program's `main()` through `dl.pipeline`; returns what it printed."""
    path = path or f"<dl-test-{next(_counter)}>.dl"
    program = dl.pipeline.load(path, source)
    buffer = io.StringIO()
    previous = Output.write
    Output.write = buffer.write
    try:
        dl.pipeline.run(program, [])
    finally:
        Output.write = previous
    return buffer.getvalue()


def dl_value(x: Any) -> Any:
    """A numpy value in the interpreter's representation: 0-d arrays become DL scalars."""
    x = np.asarray(x)
    if x.ndim:
        return x
    if x.dtype == np.bool_:
        return bool(x[()])
    if x.dtype == np.int64:
        return int(x[()])
    return x[()]


def dtype_of(value: Any) -> np.dtype:
    """DL's dtype of a run-time value (Python int is i64, bool is bool, float is f32, as in the interpreter)."""
    if isinstance(value, (np.ndarray, np.generic)):
        return value.dtype
    if isinstance(value, bool):
        return np.dtype(np.bool_)
    if isinstance(value, int):
        return np.dtype(np.int64)
    if isinstance(value, float):
        return np.dtype(np.float32)
    raise TypeError(f"not a DL numeric value: {value!r}")
