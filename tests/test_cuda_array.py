"""The cuda backend's array path on the CPU: the same code that runs on cupy, run on numpy and on an emulated device.

`--backend cuda` runs the interpreter with its tensors in a device array module (codegen/cuda.py,
interp/device.py). Here that module is numpy itself, and `EMULATED` (tests/emulated_device.py): numpy's arrays
behind cupy's walls (no implicit conversion to the host, no scalars, numpy's functions only through its
protocols, no host array beside a device array). Every test program, every example (in its quick mode) and every
derivative of tests/autodiff_cases.py must give on it what the interpreter gives, and no test here needs a GPU
(tests/test_cuda_gpu.py runs the same on cupy where there is one).
"""

from __future__ import annotations

import ctypes
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from autodiff_cases import CASES
from dl import pipeline
from dl.cli import main as dlrun
from dl.codegen import cuda, native, nvptx
from dl.interp import device
from dl.lang.primitives import Prim
from dl.runtime.arrays import NUMPY
from dl.runtime.errors import RunError
from dl.runtime.values import StructValue
from emulated_device import EMULATED, DeviceArray
from test_autodiff import flatten, leaves, program
from test_llvm import assert_lines_close

ROOT = Path(__file__).resolve().parent.parent
CORPUS = sorted((ROOT / "tests" / "programs").glob("*.dl")) + sorted((ROOT / "examples").glob("*.dl"))
QUICK = {golden.name.split(".")[0] + ".dl": ["quick"] for golden in (ROOT / "examples").glob("*.quick.out")}
MODULES = {"numpy": NUMPY, "emulated": EMULATED}


@pytest.fixture(params=sorted(MODULES))
def arrays(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """The cuda backend with its tensors in numpy, or in the emulated device, and its kernels' CPU twins."""
    monkeypatch.setattr(cuda.BACKEND, "arrays", MODULES[request.param])
    monkeypatch.setattr(cuda.BACKEND, "kernels", twin_kernels)
    return MODULES[request.param]


def twin_kernels(kernels: list, cache: bool):
    """A launcher running the kernels' CPU twins (codegen/nvptx.py) over the grid asked for, on host memory."""
    twin = nvptx.host_twin(kernels)

    def launch(symbol: str, blocks: int, threads: int, arguments: list) -> None:
        nvptx.run_twin(twin, symbol, [c_argument(a) for a in arguments], blocks, threads)

    return launch


def c_argument(value):
    if isinstance(value, (np.ndarray, DeviceArray)):
        data = value.data if isinstance(value, DeviceArray) else value
        assert data.flags.c_contiguous
        return ctypes.c_void_p(data.ctypes.data)
    return {np.int64: ctypes.c_int64, np.float32: ctypes.c_float, np.float64: ctypes.c_double}[type(value)](value)


def run_program(path: Path, backend: str, workdir: Path, monkeypatch, capsys) -> tuple[int, str, str]:
    """Run a test program from the repository's root, as tests/test_programs.py does (they print their own paths),
    an example in `workdir` (examples write checkpoints and metrics)."""
    if path.parent.name == "examples":
        workdir.mkdir()
        monkeypatch.chdir(workdir)
    else:
        monkeypatch.chdir(ROOT)
        path = path.relative_to(ROOT)
    capsys.readouterr()
    status = dlrun(["--backend", backend, str(path), *QUICK.get(path.name, [])])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def golden(path: Path) -> Path:
    """What the interpreter prints for a corpus program (tests/test_programs.py and test_examples.py hold it so)."""
    return path.with_name(path.stem + (".quick.out" if path.name in QUICK else ".out"))


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_corpus_prints_what_the_interpreter_prints(path: Path, arrays, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.delenv("DL_METRICS", raising=False)
    status, out, err = run_program(path, "cuda", tmp_path / "cuda", monkeypatch, capsys)
    assert status == 0, err
    assert_same_output(out, golden(path).read_text(), path.name)


def assert_same_output(found: str, expected: str, name: str) -> None:
    """The same words and punctuation; numbers within a relative 1e-5 (1e-4 for the training examples): numpy
    computes both here, but a device module may sum in another order, and the tolerance is the one docs/cuda.md
    states for the GPU."""
    rtol = 1e-4 if name in QUICK else 1e-5
    assert_lines_close(found.splitlines(), expected.splitlines(), rtol, found)


# ---------------------------------------------------------------------- the derivative corpus


def derivative_program(case):
    kinds = ("call", "grad")
    return program(case.name, kinds), [leaf for value in case.args for leaf in leaves(value)]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_derivatives_agree_with_the_interpreter(case, arrays) -> None:
    loaded, flat = derivative_program(case)
    expected = pipeline.call(loaded, "dl_grad", [copied(leaf) for leaf in flat])
    found = pipeline.call(loaded, "dl_grad", [copied(leaf) for leaf in flat], backend="cuda")
    assert_same_values(found, expected, case.name)


def copied(leaf):
    return leaf.copy() if isinstance(leaf, np.ndarray) else leaf


def assert_same_values(found, expected, what: str, rtol: float = 1e-12) -> None:
    """The same structure and dtypes, values within f64 rounding (a GPU's reductions add in another order: `rtol`):
    results come back to the host as numpy."""
    found_flat, expected_flat = flatten(found), flatten(expected)
    assert [path for path, _ in found_flat] == [path for path, _ in expected_flat], what
    for (path, got), (_, want) in zip(found_flat, expected_flat, strict=True):
        assert not isinstance(got, DeviceArray), f"{what}{path}: a device array came back to the host"
        assert type(got) is type(want), f"{what}{path}: {type(got)} != {type(want)}"
        np.testing.assert_allclose(
            np.asarray(got), np.asarray(want), rtol=rtol, atol=rtol * 1e-2, err_msg=f"{what}{path}"
        )


# ---------------------------------------------------------------------- where values live


def test_tensors_stay_on_the_device_and_scalars_on_the_host(monkeypatch) -> None:
    """Every primitive's result, inside the program: tensors are device arrays, scalars host values; what comes
    back to the caller is numpy's."""
    monkeypatch.setattr(cuda.BACKEND, "arrays", EMULATED)
    source = """
struct P { w: f32[3], b: f32 }
fn f(x: f32[3], w: f32[3], b: f32) -> (f32[3], f32, i64, P) {
    let p = P { w: w, b: b }
    let y = tanh(x * p.w) + p.b + zeros(3) + float(arange(3))
    return (y, sum(y), argmax(y), P { w: stack((sum(y), b, 1.0)), b: p.b * 2.0 })
}
fn main() { }
"""
    results = []
    placing = device.to_device

    def placed(value, arrays):
        results.append(placing(value, arrays))
        return results[-1]

    monkeypatch.setattr(device, "to_device", placed)
    x, w = np.array([0.5, -1.0, 2.0], np.float32), np.ones(3, np.float32)
    found = pipeline.call(pipeline.load("where.dl", source), "f", [x, w, np.float32(0.25)], backend="cuda")
    assert len(results) >= 8
    for result in results:
        for path, leaf in flatten(result):
            rank = getattr(leaf, "ndim", 0)
            assert isinstance(leaf, DeviceArray) == bool(rank), f"{path}: {type(leaf).__name__} of rank {rank}"
    y, total, best, p = found
    expected = np.tanh(x * w) + np.float32(0.25) + np.arange(3, dtype=np.float32)
    np.testing.assert_allclose(y, expected, rtol=1e-6)
    assert isinstance(total, np.float32) and isinstance(best, int) and best == 2
    assert isinstance(p, StructValue) and isinstance(p.values[0], np.ndarray)


def test_call_on_device_leaves_results_on_the_device_for_the_next_call(monkeypatch) -> None:
    """A host training loop: `call_on_device` returns device arrays, which the next call takes without a copy;
    `call` returns numpy's. Both compute what the interpreter computes."""
    uploads = []

    def upload(array):
        uploads.append(array.shape)
        return DeviceArray(array.copy())

    monkeypatch.setattr(cuda.BACKEND, "arrays", replace(EMULATED, upload=upload))
    source = """
fn step(w: f32[3], x: f32[3]) -> (f32[3], f32) {
    let loss = sum((w - x) * (w - x))
    return (w - 0.25 * 2.0 * (w - x), loss)
}
fn main() { }
"""
    loaded = pipeline.load("loop.dl", source)
    _, typed = pipeline.prepare(loaded)
    on_device = pipeline.on_backend("cuda", typed)
    w, x = np.array([1.0, -2.0, 4.0], np.float32), np.array([0.5, 0.5, 0.5], np.float32)
    held, expected = w, w
    for _ in range(3):
        held, loss = on_device.call_on_device("step", [held, x])
        assert isinstance(held, DeviceArray) and isinstance(loss, np.float32)
        expected, expected_loss = pipeline.call(loaded, "step", [expected, x])
        np.testing.assert_allclose(held.data, expected, rtol=1e-6)
        np.testing.assert_allclose(loss, expected_loss, rtol=1e-6)
    assert len(uploads) == 4, "the first call copies `w` and `x` to the device, the next ones `x` only"
    final, _ = on_device.call("step", [held, x])
    assert isinstance(final, np.ndarray)


def test_every_primitive_runs_on_the_device_or_crosses_to_the_host_as_documented() -> None:
    assert set(cuda.SUPPORT.refused) == device.ON_HOST
    assert cuda.SUPPORT.implemented | device.ON_HOST == frozenset(Prim)


def test_without_cupy_the_cuda_backend_is_one_diagnostic(dlrun_cli, monkeypatch) -> None:
    monkeypatch.setattr(cuda.BACKEND, "arrays", None)
    monkeypatch.setitem(__import__("sys").modules, "cupy", None)  # as if not installed
    status, out, err = dlrun_cli("--backend", "cuda", "examples/hello.dl")
    assert (status, out) == (1, "")
    assert err.startswith("error[E0406]: the cuda backend cannot run here: cupy cannot be imported")
    assert "pip install 'dl-lang[cuda]' for CUDA 13, 'dl-lang[cuda12]' for CUDA 12" in err
    assert "Traceback" not in err


@pytest.fixture
def dlrun_cli(dlrun):
    return dlrun


# ---------------------------------------------------------------------- fused functions as kernels

FUSED = """
fn f(x: f32[n], a: f32, b: f32, c: f32) -> f32[n] { return tanh(x * a + b) * c + x }
fn g(x: f64[2, 3], y: f64[2, 3]) -> f64[2, 3] { return sigmoid(x * y) + maximum(x, y) ** 2.0 - sqrt(abs(y)) }
fn total(x: f32[n]) -> f32 { return sum(x * x) }
fn average(x: f32[n]) -> f32 { return mean(exp(x)) }
fn peak(x: f64[n], y: f64[n]) -> f64 { return max(x - y) }
fn show(x: f32[n]) {
    print(f(x, 1.5, 0.25, 0.7))
    print(total(x), average(x), peak(float(x, dtype=f64), float(x, dtype=f64) * 0.5f64))
}
fn main() {
    show(float(arange(21)) * 0.37 - 3.0)
    show(float(arange(700)) * 0.0137 - 3.0)  # more elements than one block has threads
    let u = reshape(float(arange(6), dtype=f64), 2, 3) * 0.7f64 - 2.0f64
    print(g(u, u * 0.5f64 + 0.1f64))
}
"""


def fused_plan(tmp_path: Path, capsys) -> tuple[Path, list[str]]:
    """`FUSED` run on the interpreter and on the cuda backend with `--explain-backend`: the same output (asserted
    here); the program's path and the backend's plan."""
    path = tmp_path / "fused.dl"
    path.write_text(FUSED)
    assert dlrun([str(path)]) == 0
    expected = capsys.readouterr().out
    assert dlrun(["--backend", "cuda", "--explain-backend", str(path)]) == 0
    found = capsys.readouterr()
    assert_same_output(found.out, expected, "fused.dl")
    return path, found.err.splitlines()


def test_fused_functions_run_as_one_kernel_each(arrays, tmp_path: Path, capsys) -> None:
    path, plan = fused_plan(tmp_path, capsys)
    assert plan[0] == f"tensors live in {arrays.name}'s arrays"
    assert f"{path}:2:4: `f` compiled: one fused GPU kernel" in plan
    assert f"{path}:5:4: `average` compiled: one fused GPU kernel reducing with `mean`" in plan
    assert f"{path}:6:4: `peak` compiled: one fused GPU kernel reducing with `max`" in plan
    assert any(line.startswith(f"{path}:11:4: `main` interpreted, its tensors on the device: ") for line in plan)


def test_a_fused_kernel_checks_shapes_and_empty_reductions_as_interpreted(arrays) -> None:
    """A program the checker proves meets neither (E0520 would come first); the bodies check them themselves."""
    source = "fn f(x: f32[n], y: f32[n]) -> f32[n] { return x * y }\nfn m(x: f32[n]) -> f32 { return max(x) }\n"
    _, typed = pipeline.prepare(
        pipeline.load("shapes.dl", source + "fn main() { print(f(ones(3), ones(3)), m(ones(2))) }")
    )
    lowered = native.lowered_program(typed)
    f, m = sorted(lowered.kernels.values(), key=lambda kernel: kernel.name)
    launch = twin_kernels([nvptx.fused_kernel(f), nvptx.fused_kernel(m)], cache=False)
    multiply = cuda.fused_body(f, nvptx.fused_kernel(f).symbol, launch, arrays)
    largest = cuda.fused_body(m, nvptx.fused_kernel(m).symbol, launch, arrays)
    upload = arrays.upload
    frame = [None, upload(np.full(3, 2, np.float32)), upload(np.full(3, 4, np.float32))]
    multiply(frame)
    assert arrays.download(frame[0]).tolist() == [8.0, 8.0, 8.0]
    with pytest.raises(RunError, match=r"`f`: tensor `y` has shape \[4\], not the \[3\] of the tensor before it"):
        multiply([None, upload(np.ones(3, np.float32)), upload(np.ones(4, np.float32))])
    with pytest.raises(RunError, match=r"`max` of an empty tensor f32\[0\]"):
        largest([None, upload(np.ones(0, np.float32))])
