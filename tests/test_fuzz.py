"""Random well-typed programs and their mutations, through check, grad, the interpreter and the LLVM backend.

The CI-sized run of scripts/fuzz_backends.py: a few seeds of tests/program_generator.py, each program
and two mutations of it examined by tests/differential.py. Nothing may crash or report an internal error,
every diagnostic has a code and a real span, and the backends agree on every value and every run-time
error (code, message, span).

Each disagreement found at scale is pinned in tests/agreement/: a program whose `main` prints what the
backends disagreed on (or fails as they should both fail), with its golden `.out` (or `.err`). Both
backends must print exactly that.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, check_golden

pytest.importorskip("llvmlite", reason="the LLVM backend needs llvmlite")

import differential
import program_generator

SEEDS = range(8)
AGREEMENT = sorted((ROOT / "tests" / "agreement").glob("*.dl"))


@pytest.fixture(autouse=True)
def cache_directory(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Compile into a cache of this test's own, never the user's."""
    monkeypatch.setenv("DL_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize("seed", SEEDS)
def test_a_random_program_and_its_mutants_run_alike_on_both_backends(seed: int) -> None:
    program = program_generator.generate(seed)
    path = f"fuzz{seed}.dl"
    report = differential.examine(path, program.source, program.calls, program.differentiated)
    assert report.findings == [], program.source
    assert report.values + report.errors == len(program.calls)  # every call ran, on both backends
    rng = random.Random(seed)
    for _ in range(2):
        kind, source = program_generator.mutate(program.source, rng)
        mutant = differential.examine_mutant(path, program, source)
        assert mutant.findings == [], f"{kind}:\n{source}"


def test_the_generator_is_deterministic_and_varied() -> None:
    sources = [program_generator.generate(seed).source for seed in range(20)]
    assert sources == [program_generator.generate(seed).source for seed in range(20)]
    assert len(set(sources)) == 20
    text = "\n".join(sources)
    for construct in ("while ", "for ", "if ", "struct ", "grad(loss", "@", "sum(", "[0:", "concat(", "return r"):
        assert construct in text, f"no program uses {construct!r}"


def test_the_judge_sees_a_disagreement() -> None:
    """The comparison is not vacuous: values of another dtype, shape or beyond the tolerance differ."""
    assert differential.difference(np.float32(1.0), np.float32(1.0 + 1e-6), "x") is None
    assert differential.difference(np.float32(1.0), np.float32(1.01), "x") is not None
    assert differential.difference(np.zeros(3), np.zeros(3, dtype=np.float32), "x") is not None
    assert differential.difference((1, np.zeros(2)), (1, np.zeros(3)), "x") is not None
    assert differential.difference(np.array([np.nan]), np.array([np.nan]), "x") is None
    assert differential.difference(3, 4, "x") is not None


@pytest.mark.parametrize("path", AGREEMENT, ids=lambda p: p.stem)
def test_a_disagreement_found_at_scale_stays_fixed(path: Path, dlrun, update_goldens: bool) -> None:
    relative = str(path.relative_to(ROOT))
    interpreted = dlrun("--backend", "interp", relative)
    compiled = dlrun("--backend", "llvm", relative)
    assert compiled == interpreted
    status, out, err = interpreted
    golden = path.with_suffix(".out" if status == 0 else ".err")
    assert status in (0, 1), err
    check_golden(golden, out if status == 0 else err, update_goldens)


def test_an_i64_literal_is_a_python_int_as_every_i64_scalar_is() -> None:
    """Found at scale: `4i64` was an `np.int64` on the interpreter (whose arithmetic wraps), an `int` compiled."""
    from dl import pipeline

    source = "fn f() -> (i64, i64, i32) { let a = 4i64; return (a, 2i64 * a, 3i32) }"
    result = pipeline.call(pipeline.load("literal.dl", source), "f", [])
    assert [type(item) for item in result] == [int, int, np.int32]
    report = differential.examine("literal.dl", source, (("f", ()),), None)
    assert (report.findings, report.values) == ([], 1)


def test_programs_that_may_fail_fail_alike_on_both_backends() -> None:
    """The differential property for run-time errors: small programs failing (or not) in each way a checked
    program can fail when it runs, called directly, in a loop or through a helper."""
    codes = []
    for seed in range(24):
        program = program_generator.failing(seed)
        report = differential.examine(f"failing{seed}.dl", program.source, program.calls, None)
        assert report.findings == [], f"seed {seed}:\n{program.source}"
        assert report.values + report.errors == len(program.calls)
        codes += report.diagnostics
    assert {"E0501", "E0502", "E0510", "E0513"} <= set(codes)
