"""Golden tests of the static type and shape checker (lang/check.py, lang/shapes.py).

tests/types/bad/*.dl are ill-typed programs, one mistake each (the `several_errors_*` ones have
several independent mistakes). Each is checked three ways:

* `dlrun check FILE` prints exactly the golden FILE.err on stderr and exits with status 1.
* Every line holding a mistake ends in a marker `#~ CODE` (several codes may follow one `#~`),
  and the diagnostics reported are exactly those: the same codes on the same lines, no more
  (no cascades, no repeats) and no fewer.
* Run without the checker, on the interpreter, the program must really run into its mistake:
  it stops with a run-time diagnostic on a `#~` line, or on the line ending in `#!` where the
  failure only shows later (inside the function that a bad call reaches). A comment line that
  starts with `#!` instead says the run completes, and why: mistakes that only the checker can
  see, such as an annotation the value does not match.

Warnings: a program whose only diagnostics are warnings (`warning_*.dl`, W0301 for an f32 value
widened to f64) passes `dlrun check` (status 0, `ok` on stdout); its golden .err holds the
warnings. A warning in a program that also has an error is shown with the error, and the status
is 1 (`widening_warning_with_error.dl`).

tests/types/good/*.dl are well-typed programs: `dlrun check --types FILE` prints the golden
FILE.sig (one signature per function, one per instantiation for unannotated parameters) with
nothing on stderr and status 0, and `dlrun FILE` runs `main` to the end (status 0, no stderr).

Rewrite goldens with `--update-goldens`, then read every changed one.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import ROOT, check_golden

BAD = sorted((ROOT / "tests" / "types" / "bad").glob("*.dl"))
GOOD = sorted((ROOT / "tests" / "types" / "good").glob("*.dl"))

DIAGNOSTIC = re.compile(r"^(?:error|warning)\[(?P<code>[EW]\d{4})\]: .*\n *--> (?P<path>.+):(?P<line>\d+):\d+$", re.M)


def relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


def markers(path: Path) -> set[tuple[int, str]]:
    """The (line, code) pairs of the `#~ CODE` markers."""
    found = set()
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if "#~" in line:
            codes = line.split("#~", 1)[1].replace("#!", " ").split()
            assert codes, f"{path.name}:{number}: a `#~` marker names no code"
            found.update((number, code) for code in codes)
    return found


def reported(stderr: str, path: Path) -> list[tuple[int, str]]:
    """The (line, code) pairs of the diagnostics in `dlrun`'s stderr, sorted, repeats kept."""
    found = []
    for match in DIAGNOSTIC.finditer(stderr):
        assert match["path"] == relative(path), match.group(0)
        found.append((int(match["line"]), match["code"]))
    return sorted(found)


def is_warning_only(path: Path) -> bool:
    return all(code.startswith("W") for _, code in markers(path))


@pytest.mark.parametrize("path", BAD, ids=relative)
def test_bad_program_diagnostics(path: Path, dlrun, update_goldens: bool) -> None:
    expected = markers(path)
    assert expected, f"{path.name} marks no mistake with `#~ CODE`"
    status, out, err = dlrun("check", relative(path))
    if is_warning_only(path):
        assert status == 0, err
        assert out == "ok\n"
    else:
        assert status == 1, err
        assert out == ""
    assert reported(err, path) == sorted(expected), err
    check_golden(path.with_suffix(".err"), err, update_goldens)


def unchecked_run_expectation(path: Path) -> tuple[set[int], str | None]:
    """Lines where an unchecked run may stop, or no lines and the reason it runs to the end."""
    lines = path.read_text().splitlines()
    completes = [line[2:].strip() for line in lines if line.startswith("#!")]
    failing = {n for n, line in enumerate(lines, start=1) if line.rstrip().endswith("#!") and not line.startswith("#")}
    if completes:
        assert not failing, f"{path.name}: a run cannot both complete and fail"
        return set(), completes[0]
    return failing or {line for line, _ in markers(path)}, None


@pytest.mark.parametrize("path", BAD, ids=relative)
def test_bad_program_fails_where_marked_without_checker(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dl.pipeline
    from dl.interp.run import BACKEND
    from dl.lang.check import Typed
    from dl.lang.diagnostics import DiagnosticError

    monkeypatch.chdir(ROOT)
    lines, completes = unchecked_run_expectation(path)
    program = dl.pipeline.load(relative(path))
    try:
        BACKEND.prepare(Typed(program)).run([])  # unchecked: no types, no run-time checks from the checker
    except DiagnosticError as failure:
        span = failure.diagnostics[0].span
        assert completes is None, f"expected the run to complete ({completes}), but: {failure}"
        assert span.path == relative(path), failure
        assert span.line in lines, f"run-time failure at line {span.line}, expected one of {sorted(lines)}: {failure}"
        return
    assert completes is not None, f"the unchecked run completed, expected a failure at line(s) {sorted(lines)}"


@pytest.mark.parametrize("path", GOOD, ids=relative)
def test_good_program_signatures(path: Path, dlrun, update_goldens: bool) -> None:
    status, out, err = dlrun("check", "--types", relative(path))
    assert err == "", err
    assert status == 0
    check_golden(path.with_suffix(".sig"), out, update_goldens)


@pytest.mark.parametrize("path", GOOD, ids=relative)
def test_good_program_runs(path: Path, dlrun) -> None:
    status, _, err = dlrun(relative(path))
    assert err == "", err
    assert status == 0


# Names bound to unsuffixed literals compute in the dtype their uses need, on both backends, as numpy does
# in that dtype.
LITERAL_BINDINGS = """
fn accumulate(x: f64[N]) -> f64 {
    let s = 0.0
    for i in 0..len(x) {
        s += x[i]
    }
    return s
}

fn product(x: f64, n: i64) -> f64 {
    let out = 1
    for i in 0..n {
        out = out * x
    }
    return out
}

fn step(w: f64[N], g: f64[N]) -> f64[N] {
    let lr = 0.1
    return w - lr * g
}

fn ratios(x) {
    let acc = 0.0
    for v in x {
        acc = acc + v / 3.0
    }
    return acc
}

fn through_sin(w: f64[2]) -> f64 {
    let total = 0.0
    total += w[1] * w[0]
    total = sin(total)
    return total
}
"""


# Unsuffixed floats given to parameters without annotations, or their defaults left out, take the dtype their
# uses ask for in each call, as a name bound to a literal does; what is computed from them and integers too.
WEAK_ARGUMENTS = """
import optim

fn leaky(x, slope=0.01) {
    return where(x > 0.0, x, slope * x)
}

fn scaled(x, lr=0.001, beta=0.9) {
    let t = 3
    let size = lr / (1.0 - beta ** t)
    return tree_map(fn(leaf) => leaf * size, x)
}

fn defaults(x) {
    return leaky(x) + leaky(x, 0.3) + scaled((x, x))[1]
}

fn adam(w: f64[3]) -> f64[3] {
    let state = optim.adam_init(w)
    for i in 0..5 {
        (w, state) = optim.adam(w, w * w - 1.0, state)
    }
    return w
}

fn adagrad(w: f64[3]) -> f64[3] {
    let state = optim.adagrad_init(w)
    for i in 0..5 {
        (w, state) = optim.adagrad(w, w * w - 1.0, state, lr_decay=0.1)
    }
    return w
}

fn slope_loss(x, slope=0.01) {
    return sum(where(x > 0.0, x, slope * x) ** 2)
}

fn slope_grad(x: f64[3]) -> f64 {
    let h: f64 = grad(slope_loss, wrt=1)(x)
    return h + grad(slope_loss, wrt=1)(x, 0.01)
}
"""


@pytest.mark.parametrize("backend", ["interp", "llvm"])
def test_weak_arguments_and_defaults_take_the_dtype_of_their_uses(backend: str) -> None:
    """`leaky_relu(x)` of f64 data multiplied by an f32 0.01 (with W0301), and Adam's f64 steps used an f32
    0.9 (found by a first-hour probe); an f32 call of the same function keeps f32."""
    import numpy as np
    import torch
    from dl import pipeline

    program = pipeline.load("weak_arguments.dl", WEAK_ARGUMENTS)
    _, typed = pipeline.prepare(program, (("defaults", (pipeline.value_type(np.ones(4)),)),))
    assert [d.code for d in typed.diagnostics] == []
    for dtype in (np.float64, np.float32):
        x = np.linspace(-1.5, 1.5, 4, dtype=dtype)
        got = pipeline.call(program, "defaults", [x], backend=backend)
        one = dtype(1.0)
        size = dtype(0.001) / (one - dtype(0.9) ** 3)
        expected = np.where(x > 0, x, dtype(0.01) * x) + np.where(x > 0, x, dtype(0.3) * x) + x * size
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, expected)

    w = torch.tensor([0.5, -1.5, 2.0], dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.Adam([w])
    for _ in range(5):
        w.grad = (w * w - 1.0).detach()
        optimizer.step()
    got = pipeline.call(program, "adam", [np.array([0.5, -1.5, 2.0])], backend=backend)
    np.testing.assert_allclose(got, w.detach().numpy(), rtol=1e-15, atol=0)

    w = torch.tensor([0.5, -1.5, 2.0], dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.Adagrad([w], lr_decay=0.1)
    for _ in range(5):
        w.grad = (w * w - 1.0).detach()
        optimizer.step()
    got = pipeline.call(program, "adagrad", [np.array([0.5, -1.5, 2.0])], backend=backend)
    np.testing.assert_allclose(got, w.detach().numpy(), rtol=1e-15, atol=0)

    x = np.array([-0.3, 0.7, -1.5])  # the gradient for `slope` is an f64, as the slope its uses made it
    slope = torch.tensor(0.01, dtype=torch.float64, requires_grad=True)
    (torch.where(torch.tensor(x) > 0, torch.tensor(x), slope * torch.tensor(x)) ** 2).sum().backward()
    got = pipeline.call(program, "slope_grad", [x], backend=backend)
    assert np.asarray(got).dtype == np.float64 and got == 2 * slope.grad.item()


@pytest.mark.parametrize("backend", ["interp", "llvm"])
def test_literal_bindings_compute_in_the_dtype_of_their_uses(backend: str) -> None:
    import numpy as np
    from dl import pipeline

    program = pipeline.load("literal_bindings.dl", LITERAL_BINDINGS)
    x = np.linspace(0.1, 1.7, 9)
    total = pipeline.call(program, "accumulate", [x], backend=backend)
    expected = np.float64(0.0)
    for v in x:
        expected += v
    assert np.asarray(total).dtype == np.float64 and total == expected

    power = pipeline.call(program, "product", [np.float64(1.1), 7], backend=backend)
    assert np.asarray(power).dtype == np.float64 and power == np.prod(np.full(7, 1.1))

    w, g = np.linspace(-1.0, 1.0, 5), np.linspace(0.3, 0.7, 5)
    stepped = pipeline.call(program, "step", [w, g], backend=backend)
    assert stepped.dtype == np.float64
    np.testing.assert_array_equal(stepped, w - np.float64(0.1) * g)

    w = np.array([0.3, -0.2])  # rebound to a value computed from itself, whose dtype is its own (was E0326)
    through = pipeline.call(program, "through_sin", [w], backend=backend)
    assert np.asarray(through).dtype == np.float64 and through == np.sin(w[1] * w[0])

    for dtype in (np.float32, np.float64):  # one unannotated function, a dtype per call
        values = np.linspace(0.5, 2.5, 6, dtype=dtype)
        got = pipeline.call(program, "ratios", [values], backend=backend)
        wanted = dtype(0.0)
        for v in values:
            wanted = wanted + v / dtype(3.0)
        assert np.asarray(got).dtype == dtype and got == wanted
