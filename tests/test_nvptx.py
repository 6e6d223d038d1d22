"""GPU kernels from the code generator (codegen/nvptx.py), checked without a GPU.

- Every form of kernel the program corpus and the examples produce (fused elementwise functions, and the `Fill`
  and `Reduce` loops of the functions the LLVM backend specialises while running them; kernels that differ only in
  their numbers are one form) is emitted as PTX for sm_80 and sm_90 and assembled by `ptxas` (found on PATH or
  under /usr/local/cuda/bin; skipped, saying so, without it).
- The kernels' own element code and grid loop, compiled for the CPU (`HostTwin`) and run over a grid of several
  blocks of several threads, computes what the CPU backend's loops compute: for fused functions, on the program's
  data against the interpreter; for the corpus's loops, on random data against the CPU backend's own loop.
- PTX is cached on disk by the kernels' IR, the arch and LLVM's version.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import io
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from dl import pipeline
from dl.cli import main as dlrun
from dl.codegen import ir, native, nvptx
from llvmlite import binding

ROOT = Path(__file__).resolve().parent.parent
CORPUS = sorted((ROOT / "tests" / "programs").glob("*.dl")) + sorted((ROOT / "examples").glob("*.dl"))
QUICK = {golden.name.split(".")[0] + ".dl": ["quick"] for golden in (ROOT / "examples").glob("*.quick.out")}


def ptxas() -> str | None:
    found = shutil.which("ptxas")
    if found:
        return found
    candidate = Path("/usr/local/cuda/bin/ptxas")
    return str(candidate) if candidate.exists() else None


needs_ptxas = pytest.mark.skipif(
    ptxas() is None, reason="ptxas (CUDA's PTX assembler) is not on PATH or in /usr/local/cuda/bin"
)
needs_libdevice = pytest.mark.skipif(
    not any(
        Path(root or "/nonexistent", "nvvm", "libdevice").is_dir()
        for root in (os.environ.get("CUDA_HOME"), "/usr/local/cuda")
    ),
    reason="CUDA's libdevice is not installed (nvvm/libdevice under $CUDA_HOME or /usr/local/cuda)",
)


def assemble(text: str, arch: str, tmp_path: Path) -> None:
    source = tmp_path / f"kernels.{arch}.ptx"
    source.write_text(text)
    done = subprocess.run(
        [ptxas(), f"-arch={arch}", str(source), "-o", str(source.with_suffix(".cubin"))], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]


# ---------------------------------------------------------------------- the corpus's kernels


@functools.cache
def corpus_kernels() -> tuple[list[nvptx.Kernel], list[nvptx.Kernel]]:
    """The fused kernels of every corpus program and example, and the loop kernels of the functions the LLVM backend
    specialises while running them (each once)."""
    fused: dict[str, nvptx.Kernel] = {}
    for path in CORPUS:
        _, typed = pipeline.prepare(pipeline.load(str(path)))
        for kernel in native.lowered_program(typed).kernels.values():
            found = nvptx.fused_kernel(kernel)
            fused[found.symbol] = found
    compiled: list[ir.Function] = []
    original = native.compile_functions

    def recording(functions, *args, **kwargs):
        compiled.extend(functions)
        return original(functions, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(io.StringIO()):
        patch.setattr(native, "compile_functions", recording)
        here = Path.cwd()
        for path in CORPUS:
            workdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"dl-nvptx-{os.getpid()}-{path.stem}"
            workdir.mkdir(exist_ok=True)
            patch.setenv("DL_CACHE_DIR", str(workdir / "cache"))
            patch.delenv("DL_METRICS", raising=False)
            os.chdir(workdir)
            try:
                assert dlrun(["--backend", "llvm", "--no-cache", str(path), *QUICK.get(path.name, [])]) == 0
            finally:
                os.chdir(here)
                shutil.rmtree(workdir, ignore_errors=True)
    loops = {k.symbol: k for f in compiled if f.specialised for k in nvptx.loop_kernels(f)}
    return list(fused.values()), list(loops.values())


def of_each_form(kernels: list[nvptx.Kernel]) -> list[nvptx.Kernel]:
    """One kernel of each form: kernels whose LLVM IR differs only in its numbers (sizes, strides, constants, the
    numbers in names) are of one form, which PTX and `ptxas` treat alike. The corpus's 3,700 kernels are of about
    800 forms."""
    forms: dict[str, nvptx.Kernel] = {}
    for kernel in kernels:
        text = str(nvptx.module_of([kernel], nvptx.KernelEmission)).replace(kernel.symbol, "@kernel")
        forms.setdefault(NUMBER.sub("#", text), kernel)
    return list(forms.values())


NUMBER = re.compile(r"\b\d+\b")


@functools.cache
def corpus_forms() -> list[nvptx.Kernel]:
    fused, loops = corpus_kernels()
    return of_each_form(fused + fused_of(FUSED) + loops)  # the corpus has few functions fusion takes whole


@needs_ptxas
@needs_libdevice
@pytest.mark.parametrize("arch", nvptx.ARCHES)
def test_every_form_of_corpus_kernel_assembles(arch: str, tmp_path: Path) -> None:
    kernels = corpus_forms()
    assert len(kernels) >= 500
    text = nvptx.ptx(kernels, arch)
    assert f".target {arch}" in text
    assert text.count(".entry ") == len(kernels)
    assemble(text, arch, tmp_path)


@needs_libdevice
def test_math_comes_from_libdevice_and_unused_functions_are_dropped() -> None:
    kernel = fused_of("fn f(x: f32[n]) -> f32[n] { return tanh(x) + exp(x) }")[0]
    device = nvptx.device_ir([kernel])
    assert "@__nv_tanhf(" in device and "@__nv_expf(" in device and "tanhf(" not in device.replace("__nv_tanhf", "")
    text = nvptx.ptx([kernel], "sm_90")
    assert text.count(".entry ") == 1
    assert len(text) < 20_000  # libdevice's hundreds of functions are dropped: only what the kernel calls is left


# ---------------------------------------------------------------------- the host twin


def fused_of(source: str) -> list[nvptx.Kernel]:
    _, typed = pipeline.prepare(pipeline.load("fused.dl", source + "\nfn main() { }\n"))
    return [nvptx.fused_kernel(k) for k in native.lowered_program(typed).kernels.values()]


FUSED = """
fn f(x: f32[n], a: f32, b: f32, c: f32) -> f32[n] { return tanh(x * a + b) * c + x }
fn g(x: f64[n], y: f64[n]) -> f64[n] {
    let s = x * y
    return sigmoid(s) + exp(-abs(x)) / 2.0 + maximum(x, y) ** 2.0 + sqrt(abs(y)) - relu(log(abs(x) + 1.0))
}
fn h(x: f32[n]) -> f32 { return sum(x * x) }
fn m(x: f64[n], y: f64[n]) -> f64 { return max(x - y) }
fn steps(x: f32[n]) -> f32[n] { return floor(x) + 10.0 * ceil(x) + 100.0 * round(x) + 1000.0 * sign(x) }
fn steps64(x: f64[n]) -> f64[n] { return floor(x) + 10.0 * ceil(x) + 100.0 * round(x) + 1000.0 * sign(x) }
fn signs(x: f32[n]) -> f32[n] { return sign(x) }
"""


def pointer(array: np.ndarray) -> ctypes.c_void_p:
    return ctypes.c_void_p(array.ctypes.data)


@pytest.mark.parametrize("blocks, threads", [(1, 1), (2, 3), (4, 64)])
def test_fused_kernels_compute_what_the_interpreter_computes(blocks: int, threads: int) -> None:
    kernels = {k.kernel.name: k for k in fused_of(FUSED)}
    twin = nvptx.host_twin(list(kernels.values()))
    program = pipeline.load("fused.dl", FUSED + "\nfn main() { }\n")
    rng = np.random.default_rng(3)
    x32, x64, y64 = rng.standard_normal(37).astype(np.float32), rng.standard_normal(37), rng.standard_normal(37)

    out = np.empty(37, np.float32)
    scalars = [ctypes.c_float(v) for v in (1.5, 0.25, 0.7)]
    nvptx.run_twin(
        twin, kernels["f"].symbol, [ctypes.c_int64(37), pointer(out), pointer(x32), *scalars], blocks, threads
    )
    expected = pipeline.call(program, "f", [x32, np.float32(1.5), np.float32(0.25), np.float32(0.7)])
    np.testing.assert_allclose(out, expected, rtol=1e-6)

    out64 = np.empty(37)
    nvptx.run_twin(
        twin, kernels["g"].symbol, [ctypes.c_int64(37), pointer(out64), pointer(x64), pointer(y64)], blocks, threads
    )
    np.testing.assert_allclose(out64, pipeline.call(program, "g", [x64, y64]), rtol=1e-12)

    partials = np.empty(blocks * threads)  # one per thread: f32 sums accumulate in f64
    nvptx.run_twin(twin, kernels["h"].symbol, [ctypes.c_int64(37), pointer(partials), pointer(x32)], blocks, threads)
    assert np.float32(partials.sum()) == pytest.approx(pipeline.call(program, "h", [x32]), rel=1e-6)

    peaks = np.empty(blocks * threads)
    nvptx.run_twin(
        twin, kernels["m"].symbol, [ctypes.c_int64(37), pointer(peaks), pointer(x64), pointer(y64)], blocks, threads
    )
    assert peaks.max() == pipeline.call(program, "m", [x64, y64])

    # the step functions at halves (round takes them to the even integer), zeros of both signs and nan
    halves = np.array([-2.5, -1.5, -0.5, -0.0, 0.0, 0.5, 1.5, 2.5, 3.7, -3.7, np.nan, np.inf, -np.inf] * 3)
    for name, dtype in (("steps", np.float32), ("steps64", np.float64), ("signs", np.float32)):
        x, stepped = halves.astype(dtype), np.empty(len(halves), dtype)
        arguments = [ctypes.c_int64(len(x)), pointer(stepped), pointer(x)]
        nvptx.run_twin(twin, kernels[name].symbol, arguments, blocks, threads)
        expected = pipeline.call(program, name, [x])
        np.testing.assert_array_equal(stepped, expected)
        np.testing.assert_array_equal(np.signbit(stepped), np.signbit(expected))  # -0.0 apart from +0.0


class CpuLoop(nvptx.HostTwin):
    """The CPU backend's own loop for an instruction (`loop_instruction` of codegen/llvm.py), as a function of the
    kernel's parameters (without thread ids)."""

    def id_kinds(self) -> list:
        return []

    def emit(self, kernel: nvptx.LoopKernel) -> None:
        builder = self.loop_parameters(kernel)
        self.loop_instruction(builder, kernel.instruction).ret_void()


def random_buffer(buffer: ir.Buffer, rng: np.random.Generator) -> np.ndarray:
    kinds = {"f32": np.float32, "f64": np.float64, "i64": np.int64, "i32": np.int32, "bool": np.uint8}
    if buffer.dtype in ("f32", "f64"):
        return rng.uniform(0.1, 2.0, buffer.size).astype(kinds[buffer.dtype])
    return np.zeros(buffer.size, kinds[buffer.dtype])  # valid as an index, never a divisor: no integer `//`


def plain(kernel: nvptx.LoopKernel) -> bool:
    """A loop of floats whose result does not depend on how integer operands are chosen."""

    def walk(tree) -> bool:
        if isinstance(tree, ir.Take):
            return False
        if isinstance(tree, ir.Apply):
            return tree.op not in ("floordiv", "mod") and all(walk(a) for a in tree.args)
        return True

    return walk(kernel.instruction.tree) and all(t.dtype in ("f32", "f64", "i64") for t in kernel.temps)


def test_corpus_loop_kernels_compute_what_the_cpu_loops_compute() -> None:
    """Each loop of the corpus, on random data: its kernel's twin, run over a grid of 3 blocks of 5 threads, writes
    exactly what the CPU backend's loop writes (the same element code, the same order of folding)."""
    _, loops = corpus_kernels()
    assert sum(isinstance(k.instruction, ir.Fill) for k in loops) >= 100  # the corpus has kernels of every kind
    assert sum(isinstance(k.instruction, ir.Reduce) for k in loops) >= 20
    chosen = [k for k in loops if plain(k)]
    assert len(chosen) >= 100
    twin = nvptx.host_twin(chosen)
    machine = binding.Target.from_default_triple().create_target_machine(opt=2, jit=True)
    reference = binding.parse_assembly(str(nvptx.module_of(chosen, CpuLoop, machine.triple)))
    engine = binding.create_mcjit_compiler(reference, machine)
    engine.finalize_object()
    rng = np.random.default_rng(0)
    for kernel in chosen:
        inputs = [random_buffer(b, rng) for b in kernel.buffers]
        temps = [scalar_argument(t, rng) for t in kernel.temps]
        ours, theirs = [a.copy() for a in inputs], [a.copy() for a in inputs]
        nvptx.run_twin(twin, kernel.symbol, [pointer(a) for a in ours] + temps, 3, 5)
        kinds = [ctypes.c_void_p] * len(inputs) + [type(t) for t in temps]
        ctypes.CFUNCTYPE(None, *kinds)(engine.get_function_address(kernel.symbol))(
            *[pointer(a) for a in theirs], *temps
        )
        np.testing.assert_array_equal(ours[0], theirs[0], err_msg=kernel.symbol)


def scalar_argument(temp: ir.Temp, rng: np.random.Generator):
    if temp.dtype == "f32":
        return ctypes.c_float(rng.uniform(0.1, 2.0))
    if temp.dtype == "f64":
        return ctypes.c_double(rng.uniform(0.1, 2.0))
    return ctypes.c_int64(0)


# ---------------------------------------------------------------------- the cache


@needs_libdevice
def test_ptx_is_cached_by_ir_and_arch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kernels = fused_of("fn f(x: f32[n]) -> f32[n] { return tanh(x) * 2.0 }")
    built = []
    original = nvptx.ptx
    monkeypatch.setattr(nvptx, "ptx", lambda k, arch: built.append(arch) or original(k, arch))
    first = nvptx.cached_ptx(kernels, "sm_90", tmp_path)
    assert nvptx.cached_ptx(kernels, "sm_90", tmp_path) == first and built == ["sm_90"]
    assert ".target sm_80" in nvptx.cached_ptx(kernels, "sm_80", tmp_path) and built == ["sm_90", "sm_80"]
    entries = sorted((tmp_path / "cuda").glob("*.o"))
    assert len(entries) == 2
    entries[0].write_bytes(entries[0].read_bytes()[:-10])  # a truncated entry is ignored and built again
    nvptx.cached_ptx(kernels, "sm_90", tmp_path)
    nvptx.cached_ptx(kernels, "sm_80", tmp_path)
    assert len(built) == 3


def test_kernels_use_the_ptx_kernel_convention_global_pointers_and_thread_ids() -> None:
    text = nvptx.device_ir(fused_of("fn f(x: f32[n], a: f32) -> f32[n] { return x * a }"))
    assert "define ptx_kernel void" in text
    assert "float addrspace(1)*" in text or "ptr addrspace(1)" in text
    for register in ("tid.x", "ntid.x", "ctaid.x", "nctaid.x"):
        assert f"llvm.nvvm.read.ptx.sreg.{register}" in text
