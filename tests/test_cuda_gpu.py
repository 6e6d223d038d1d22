"""The cuda backend on a GPU: cupy's arrays and the PTX kernels, against the interpreter (`pytest -m cuda`).

Every test here is marked `cuda` and skipped, with the reason, where cupy or a GPU it can use is missing (every CI
machine): scripts/cuda_check.sh runs them on a GPU machine. They are tests/test_cuda_array.py's, on cupy instead of
numpy and the emulated device, with cupy's own kernel launcher instead of the kernels' CPU twins.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from autodiff_cases import CASES
from dl import pipeline
from dl.codegen import cuda
from dl.interp import device
from test_autodiff import flatten
from test_cuda_array import (
    CORPUS,
    assert_same_output,
    assert_same_values,
    copied,
    derivative_program,
    fused_plan,
    golden,
    run_program,
)


def missing() -> str | None:
    """Why cupy cannot run here, or None."""
    try:
        cuda.cupy_arrays()
    except cuda.Missing as problem:
        return str(problem)
    return None


pytestmark = [pytest.mark.cuda, pytest.mark.skipif(missing() is not None, reason=f"no GPU for cupy: {missing()}")]


@pytest.fixture(autouse=True)
def on_cupy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(cuda.BACKEND, "arrays", None)
    monkeypatch.setattr(cuda.BACKEND, "kernels", None)
    monkeypatch.setenv("DL_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_corpus_prints_what_the_interpreter_prints(path: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.delenv("DL_METRICS", raising=False)
    status, out, err = run_program(path, "cuda", tmp_path / "cuda", monkeypatch, capsys)
    assert status == 0, err
    assert_same_output(out, golden(path).read_text(), path.name)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_derivatives_agree_with_the_interpreter(case) -> None:
    loaded, flat = derivative_program(case)
    expected = pipeline.call(loaded, "dl_grad", [copied(leaf) for leaf in flat])
    found = pipeline.call(loaded, "dl_grad", [copied(leaf) for leaf in flat], backend="cuda")
    assert_same_values(found, expected, case.name, rtol=1e-9)


def test_fused_functions_run_as_ptx_kernels(tmp_path: Path, capsys) -> None:
    path, plan = fused_plan(tmp_path, capsys)
    assert f"{path}:2:4: `f` compiled: one fused GPU kernel" in plan
    assert list((tmp_path / "cache" / "cuda").glob("*.o")), "the PTX was not cached"


def test_results_come_back_as_numpy_and_tensors_stay_on_the_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    import cupy

    results = []
    placing = device.to_device
    monkeypatch.setattr(
        device, "to_device", lambda value, arrays: results.append(placing(value, arrays)) or results[-1]
    )
    source = (
        "fn f(x: f32[3]) -> (f32[3], f32) { let y = tanh(x) * 2.0 + zeros(3)\n return (y, sum(y)) }\nfn main() { }\n"
    )
    x = np.array([0.5, -1.0, 2.0], np.float32)
    y, total = pipeline.call(pipeline.load("where.dl", source), "f", [x], backend="cuda")
    assert isinstance(y, np.ndarray) and isinstance(total, np.float32)
    np.testing.assert_allclose(y, np.tanh(x) * 2, rtol=1e-6)
    leaves = [leaf for result in results for _, leaf in flatten(result)]
    assert leaves and all(isinstance(leaf, cupy.ndarray) == bool(getattr(leaf, "ndim", 0)) for leaf in leaves)
