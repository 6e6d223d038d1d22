"""Running one program through the whole toolchain, in-process, and judging what came out.

`examine(path, source, calls, differentiated)` does what `dlrun check`, `dlrun grad`, `dlrun` and
`dlrun --backend llvm` do: the tools' check (with recovery), the pipeline's `prepare` (check and
autodiff), the derivative source of `differentiated`, and each host call on the interpreter and on the
LLVM backend. It returns a `Report`:

- `diagnostics`: the codes of the errors reported (a program may be rejected; that is no finding);
- `findings`: what must never happen: a Python exception escaping a pass (a crash), a diagnostic
  without a code or without a real span (in the file, within its lines), an "internal error", or
  the two backends disagreeing: on a value (dtype, shape, structure exactly; numbers to `TOLERANCE`),
  on an error (code, message and span), or one failing where the other does not.

Every step runs under a watchdog (`LIMIT_SECONDS`): a step that takes longer is stopped as Ctrl-C stops
it (`_thread.interrupt_main`) and reported as a hang, unless both backends hang.
"""

from __future__ import annotations

import _thread
import signal
import threading
import traceback
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from dl import pipeline
from dl.lang import check as check_tools
from dl.lang.diagnostics import Diagnostic, DiagnosticError
from dl.runtime.interrupts import interrupt_everything, resume_everything
from dl.runtime.values import StructValue

LIMIT_SECONDS = 10.0
# Compiled code and numpy may differ in the last bits (libm against numpy's transcendental functions,
# another order of summation: f32 sums accumulate in f64 compiled, pairwise in f32 in numpy), and a chain
# of operations can grow that: relative and absolute tolerance. An f64 result may carry f32 rounding
# (`float(sum(x), dtype=f64)` of an f32 `x`), hence 1e-6 rather than f64's own precision.
TOLERANCE = {"float32": (2e-4, 1e-5), "float64": (1e-6, 1e-9)}


@dataclass
class Report:
    diagnostics: list[str] = field(default_factory=list)  # codes of the errors the toolchain reported
    findings: list[str] = field(default_factory=list)  # what must never happen, described
    values: int = 0  # host calls both backends answered alike with a value
    errors: int = 0  # host calls both backends answered alike with a run-time error
    hangs: int = 0  # host calls both backends stopped at the time limit


class Hang(Exception):
    """A step ran past `LIMIT_SECONDS`."""


class Watchdog:
    """Stops the step running in the main thread after `LIMIT_SECONDS`, as Ctrl-C would (the interpreter then
    stops its worker thread and compiled loops too). The timer raises its signal; the handler raises
    `KeyboardInterrupt` only while a step is armed, so a timer firing as a step ends is harmless. The timer
    also sets the compiled loops' flag itself: a compiled function the host calls directly runs on the main
    thread, where no signal handler runs until it returns."""

    armed = False
    installed = False

    @classmethod
    def interrupt(cls, signum: int, frame: object) -> None:
        if cls.armed:
            raise KeyboardInterrupt

    @classmethod
    def install(cls) -> None:
        if not cls.installed:
            signal.signal(signal.SIGUSR1, cls.interrupt)
            cls.installed = True


def within_limit(action):
    """`action()`, or `Hang` once it has run `LIMIT_SECONDS` (call from the main thread)."""
    Watchdog.install()
    fired = threading.Event()

    def stop() -> None:
        fired.set()
        interrupt_everything()
        _thread.interrupt_main(signal.SIGUSR1)

    timer = threading.Timer(LIMIT_SECONDS, stop)
    Watchdog.armed = True
    timer.start()
    try:
        return action()
    except KeyboardInterrupt:
        if fired.is_set():
            raise Hang() from None
        raise
    finally:
        Watchdog.armed = False
        timer.cancel()
        timer.join()
        if fired.is_set():
            resume_everything()  # clear the flags no running compiled loop saw, or the next step stops at once


def examine(path: str, source: str, calls: tuple, differentiated: tuple | None, well_typed: bool = True) -> Report:
    """The report on one program; `well_typed`: the generator wrote it so, and an error found before it
    runs is a finding too."""
    report = Report()
    step = "check"
    try:
        typed = within_limit(lambda: check_tools(source, path))
        judge_diagnostics(typed.diagnostics, path, source, report)
        if typed.errors:
            if well_typed:
                report.findings.append(f"the checker rejects a well-typed program: {shown(typed.errors[0])}")
            return report
        step = "prepare"
        signatures = tuple((name, tuple(pipeline.value_type(a) for a in args)) for name, args in calls)
        _, prepared = within_limit(lambda: pipeline.prepare(pipeline.load(path, source), signatures))
        if differentiated is not None:
            step = "dlrun grad"
            within_limit(lambda: derivative_source(path, source, differentiated))
        step = "llvm compile"
        compiled = within_limit(lambda: pipeline.on_backend("llvm", prepared, cache=False))
        interpreted = pipeline.on_backend("interp", prepared)
        for name, args in calls:
            step = f"call {name}"
            on_interpreter = outcome(lambda n=name, a=args: interpreted.call(n, copied(a)))
            on_llvm = outcome(lambda n=name, a=args: compiled.call(n, copied(a)))
            compare(name, on_interpreter, on_llvm, path, source, report)
    except DiagnosticError as failure:
        judge_diagnostics(failure.diagnostics, path, source, report)
        if well_typed:
            report.findings.append(f"{step} rejects a well-typed program: {shown(failure.diagnostics[0])}")
    except Hang:
        report.findings.append(f"hang: {step} ran past {LIMIT_SECONDS} s")
    except Exception:
        report.findings.append(f"crash in {step}:\n{traceback.format_exc()}")
    return report


def derivative_source(path: str, source: str, differentiated: tuple) -> str:
    name, wrt = differentiated
    return pipeline.derivative_source(pipeline.load(path, source), name, wrt, False)


def copied(args: tuple) -> list:
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


@dataclass
class Outcome:
    kind: str  # "value", "error", "hang" or "crash"
    value: Any = None


def outcome(action) -> Outcome:
    try:
        return Outcome("value", within_limit(action))
    except DiagnosticError as failure:
        return Outcome("error", failure.diagnostics)
    except Hang:
        return Outcome("hang")
    except Exception:
        return Outcome("crash", traceback.format_exc())


def compare(name: str, interpreted: Outcome, compiled: Outcome, path: str, source: str, report: Report) -> None:
    for side, result in (("interpreter", interpreted), ("llvm", compiled)):
        if result.kind == "crash":
            report.findings.append(f"crash calling {name} on the {side}:\n{result.value}")
        if result.kind == "error":  # (counted once, on the interpreter's side)
            judge_diagnostics(result.value, path, source, report, count=side == "interpreter")
    if "crash" in (interpreted.kind, compiled.kind):
        return
    if interpreted.kind != compiled.kind:
        report.findings.append(f"{name}: the interpreter gives {summary(interpreted)}, llvm gives {summary(compiled)}")
        return
    if interpreted.kind == "hang":
        report.hangs += 1
    elif interpreted.kind == "error":
        first, second = interpreted.value[0], compiled.value[0]
        if (first.code, first.message, first.span) != (second.code, second.message, second.span):
            report.findings.append(f"{name}: the interpreter fails with {shown(first)}, llvm with {shown(second)}")
        else:
            report.errors += 1
    else:
        problem = difference(interpreted.value, compiled.value, "result")
        if problem is not None:
            report.findings.append(f"{name}: the backends' values differ: {problem}")
        else:
            report.values += 1


def summary(result: Outcome) -> str:
    if result.kind == "error":
        return f"error {shown(result.value[0])}"
    if result.kind == "value":
        return f"the value {result.value!r}"
    return result.kind


def shown(diagnostic: Diagnostic) -> str:
    span = diagnostic.span
    return f"{diagnostic.code} {diagnostic.message!r} at {span.line}:{span.column}-{span.end_line}:{span.end_column}"


def judge_diagnostics(
    diagnostics: list[Diagnostic], path: str, source: str, report: Report, count: bool = True
) -> None:
    """Each error has a code, a real span (in `path`, within its lines) and is not an internal error;
    `count`: its code goes into `report.diagnostics`."""
    lines = source.count("\n") + 1
    for diagnostic in diagnostics:
        if not diagnostic.is_error:
            continue
        if count:
            report.diagnostics.append(diagnostic.code)
        span = diagnostic.span
        if not diagnostic.code or not diagnostic.code.startswith("E"):
            report.findings.append(f"a diagnostic without a code: {diagnostic}")
        if "internal error" in diagnostic.message:
            report.findings.append(f"internal error: {shown(diagnostic)}")
        elif span.path != path or not 1 <= span.line <= lines or span.column < 1:
            report.findings.append(f"a diagnostic without a real span: {shown(diagnostic)} in {span.path}")


def difference(a: Any, b: Any, where: str) -> str | None:
    """Where two run-time values differ (None if they agree): structure, classes, dtypes and shapes exactly,
    integers and bools exactly, floats within `TOLERANCE` (nan equal to nan)."""
    if type(a) is not type(b):
        return f"{where}: {type(a).__name__} against {type(b).__name__}"
    if isinstance(a, tuple):
        if len(a) != len(b):
            return f"{where}: tuples of {len(a)} and {len(b)}"
        found = (difference(x, y, f"{where}[{k}]") for k, (x, y) in enumerate(zip(a, b, strict=True)))
        return next((problem for problem in found if problem is not None), None)
    if isinstance(a, StructValue):
        if a.type.name != b.type.name:
            return f"{where}: struct {a.type.name} against {b.type.name}"
        return difference(tuple(a.values), tuple(b.values), f"{where}.{a.type.name}")
    if isinstance(a, (np.ndarray, np.generic)):
        if a.dtype != b.dtype or np.shape(a) != np.shape(b):
            return f"{where}: {a.dtype}{list(np.shape(a))} against {b.dtype}{list(np.shape(b))}"
        if a.dtype.kind == "f":
            rtol, atol = TOLERANCE[str(a.dtype)]
            if not np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
                return f"{where}: {a!r} against {b!r}"
            return None
        return None if np.array_equal(a, b) else f"{where}: {a!r} against {b!r}"
    return None if a == b else f"{where}: {a!r} against {b!r}"


def headers(source: str) -> list[str]:
    """The lines declaring the functions the host calls (a mutation there changes what the calls fit)."""
    return [line for line in source.splitlines() if line.startswith(("fn f(", "fn g(", "fn loss("))]


def examine_mutant(path: str, original, mutated: str) -> Report:
    """A mutated program: checked and, if it still checks, run as the original was, unless the mutation
    changed the signature of a function the host calls (then only checked)."""
    calls = original.calls if headers(mutated) == headers(original.source) else ()
    differentiated = original.differentiated if calls else None
    return examine(path, mutated, calls, differentiated, well_typed=False)
