"""Model packages (driver/package.py): `dlrun export` writes one .dlpkg, `dlrun predict` and
`dl.load_package` run it without the sources, and a package that is not whole is a diagnostic."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from dl import load_package, pipeline
from dl.lang.diagnostics import DiagnosticError

MODEL = """
import nn
import layers

struct Net { w1: f32[4, H], b1: f32[H], w2: f32[H, 3], b2: f32[3] }
const H = 8

fn relu(x) { return x * 2.0 }     # shadows the primitive in this module only

fn predict(m: Net, x: f32[B, 4]) -> f32[B, 3] {
    let h = nn.relu(layers.dense(x, m.w1, m.b1))
    return layers.dense(h, m.w2, m.b2) + relu(0.5)
}

fn both(m: Net, x: f32[B, 4], scale: f32) -> (f32[B, 3], i64[B]) {
    let y = predict(m, x) * scale
    return (y, argmax(y, axis=1))
}

fn main() {
    let m = Net { w1: randn(4, H, seed=1), b1: randn(H, seed=2), w2: randn(H, 3, seed=3), b2: zeros(3) }
    save("net.safetensors", m)
    save("trained.safetensors", (m, (m, 7)))
}
"""

LAYERS = """
fn dense(x, w, b) { return x @ w + b }
"""


@pytest.fixture
def project(tmp_path: Path, dlrun, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A program, its module and its checkpoints in `tmp_path/src`; the working directory is `tmp_path`."""
    source = tmp_path / "src"
    source.mkdir()
    (source / "model.dl").write_text(MODEL)
    (source / "layers.dl").write_text(LAYERS)
    monkeypatch.chdir(source)
    pipeline.run(pipeline.load("model.dl"), [])  # writes the checkpoints
    monkeypatch.chdir(tmp_path)
    return source


def inputs(batch: int = 5) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((batch, 4)).astype(np.float32)


def reference(project: Path, function: str, *args) -> object:
    """The function run from its sources, with the weights the checkpoint holds."""
    from dl.interp.checkpoints import read_checkpoint
    from dl.runtime.values import StructType, StructValue

    tensors = read_checkpoint(str(project / "net.safetensors"))
    fields = ("w1", "b1", "w2", "b2")
    weights = StructValue(StructType("Net", fields), tuple(tensors[f] for f in fields))
    return pipeline.call(pipeline.load(str(project / "model.dl")), function, [weights, *args])


def export(dlrun, project: Path, *extra: str, function: str = "predict", weights: str = "net.safetensors") -> tuple:
    return dlrun(
        "export",
        str(project / "model.dl"),
        "--fn",
        function,
        "--weights",
        str(project / weights),
        "-o",
        "m.dlpkg",
        *extra,
    )


def diagnostic(call) -> str:
    with pytest.raises(DiagnosticError) as raised:
        call()
    (found,) = raised.value.diagnostics
    return f"{found.code}: {found.message}"


def test_a_package_runs_with_its_sources_deleted(dlrun, project: Path, tmp_path: Path) -> None:
    x = inputs()
    expected = reference(project, "predict", x)
    status, out, err = export(dlrun, project)
    assert (status, err) == (0, "")
    assert out == "wrote m.dlpkg: `predict` with weights `m`: Net\n"
    shutil.rmtree(project)
    package = load_package(tmp_path / "m.dlpkg")
    np.testing.assert_array_equal(package(x), expected)
    np.testing.assert_array_equal(package(x=x[:2]), expected[:2])  # B is bound per call


def test_the_package_holds_the_flattened_checked_source_and_a_manifest(dlrun, project: Path) -> None:
    export(dlrun, project)
    with zipfile.ZipFile("m.dlpkg") as archive:
        assert sorted(archive.namelist()) == ["manifest.json", "model.dl", "weights.safetensors"]
        source = archive.read("model.dl").decode()
        manifest = json.loads(archive.read("manifest.json"))
        for name in ("model.dl", "weights.safetensors"):
            assert manifest["sha256"][name] == hashlib.sha256(archive.read(name)).hexdigest()
    assert "import" not in source and "fn main" not in source and "fn both" not in source
    # imported functions are renamed after their module; the entry's `relu` no longer shadows the primitive
    assert "fn nn__relu(x)" in source and "fn builtin__relu_of(x)" in source and "fn layers__dense(x, w, b)" in source
    assert "fn model__relu(x)" in source and "return relu(x)" in source
    assert (manifest["format"], manifest["format_version"], manifest["function"]) == ("dl-package", 1, "predict")
    assert manifest["signature"] == {"params": [["m", "Net"], ["x", "f32[B, 4]"]], "result": "f32[B, 3]"}
    assert manifest["weights"] == "m"


def test_predict_reads_and_writes_npz_on_either_backend(dlrun, project: Path) -> None:
    x = inputs()
    expected = reference(project, "both", x, np.float32(2.0))
    export(dlrun, project, function="both")
    np.savez("x.npz", x=x, scale=np.float32(2.0))
    for backend in ("interp", "llvm"):
        assert dlrun("predict", "m.dlpkg", "--input", "x.npz", "-o", "y.npz", "--backend", backend) == (
            0,
            "wrote y.npz\n",
            "",
        )
        with np.load("y.npz", allow_pickle=False) as written:
            assert sorted(written.files) == ["output.0", "output.1"]
            np.testing.assert_allclose(written["output.0"], expected[0], rtol=1e-6)
            np.testing.assert_array_equal(written["output.1"], expected[1])


def test_predict_on_the_cuda_backend_says_what_is_missing_or_runs(dlrun, project: Path) -> None:
    """Without cupy (or a GPU) the package is refused with E0406 and the extra to install, pointed at the package
    (not at a line of the source inside it, which the user never wrote), and no output is written; with the cuda
    backend's array path on numpy (as tests/test_cuda_array.py runs it) it predicts."""
    from dl.codegen import cuda
    from dl.runtime.arrays import NUMPY

    x = inputs()
    export(dlrun, project)
    np.savez("x.npz", x=x)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cuda.BACKEND, "arrays", None)
        patch.setitem(sys.modules, "cupy", None)  # as if not installed
        status, out, err = dlrun("predict", "m.dlpkg", "--input", "x.npz", "-o", "y.npz", "--backend", "cuda")
    assert (status, out) == (1, "") and err.startswith("error[E0406]: the cuda backend cannot run here")
    assert err.splitlines()[1] == " --> m.dlpkg:1:1" and "pip install 'dl-lang[cuda]'" in err
    assert not Path("y.npz").exists()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cuda.BACKEND, "arrays", NUMPY)
        found = load_package("m.dlpkg", "cuda")(x)
    np.testing.assert_allclose(found, reference(project, "predict", x), rtol=1e-6)


def test_llvm_runs_a_package_through_the_backend_interface(dlrun, project: Path) -> None:
    x = inputs()
    export(dlrun, project)
    np.testing.assert_allclose(load_package("m.dlpkg", "llvm")(x), reference(project, "predict", x), rtol=1e-6)


def test_the_weights_are_the_first_subtree_of_the_checkpoint_that_fits(dlrun, project: Path) -> None:
    status, out, _ = export(dlrun, project, weights="trained.safetensors")
    assert (status, out) == (0, "wrote m.dlpkg: `predict` with weights `m`: Net (`0` of the checkpoint)\n")
    x = inputs()
    np.testing.assert_array_equal(load_package("m.dlpkg")(x), reference(project, "predict", x))


def test_the_model_beside_its_optimizer_state_is_found_and_two_models_need_part(dlrun, project: Path) -> None:
    """`save(path, (state, model))`: Adam's first moments fit the model's struct and come first, but lie deeper:
    the part nearest the top is taken (exporting the moments would give zeros-like weights silently). Two
    models side by side, with other values, are refused until `--part` names one."""
    saved = 'save("trained.safetensors", (m, (m, 7)))'
    more = (
        saved
        + '\n    save("both.safetensors", (optim.adam_init(m), m))'
        + '\n    save("two.safetensors", (m, Net { w1: m.w1 * 2.0, b1: m.b1, w2: m.w2, b2: m.b2 }))'
    )
    (project / "model.dl").write_text("import optim\n" + (project / "model.dl").read_text().replace(saved, more))
    assert dlrun(str(project / "model.dl"))[0] == 0  # (it writes where it runs)
    for name in ("both.safetensors", "two.safetensors", "net.safetensors"):
        Path(name).replace(project / name)
    x = inputs()
    status, out, _ = export(dlrun, project, weights="both.safetensors")
    assert (status, out) == (0, "wrote m.dlpkg: `predict` with weights `m`: Net (`1` of the checkpoint)\n")
    np.testing.assert_array_equal(load_package("m.dlpkg")(x), reference(project, "predict", x))
    status, out, err = export(dlrun, project, weights="two.safetensors")
    assert (status, out) == (1, "")
    assert "two.safetensors` fit parameter `m` (Net), holding other values: `0`, `1`" in err
    assert "help: choose the part with `--part`, as `--part 1`" in err
    status, out, _ = export(dlrun, project, "--part", "0", weights="two.safetensors")
    assert (status, out) == (0, "wrote m.dlpkg: `predict` with weights `m`: Net (`0` of the checkpoint)\n")
    np.testing.assert_array_equal(load_package("m.dlpkg")(x), reference(project, "predict", x))
    status, _, err = export(dlrun, project, "--part", "2", weights="two.safetensors")
    assert status == 1 and "`--part 2`: no struct parameter fits that part" in err and "`0`, `1`" in err


TWO_STRUCTS = """
struct A { w: f32[2] }
struct B { v: f32[2] }
fn f(a: A, b: A, x: f32[2]) -> f32[2] { return a.w * x + b.w }
fn g(a: A, b: B, x: f32[2]) -> f32[2] { return a.w * x + b.v }
fn one(a: A, x: f32[2]) -> f32[2] { return a.w * x }
fn h(x) { return x }
fn main() { save("a.safetensors", A { w: ones(2) }) }
"""

SECOND_STRUCT = (
    "  |\n"
    "{line} | {source}\n"
    "  |            ^^^^\n"
    "  = help: put what both hold in one struct (a field of the weights), or pass this one's fields as tensor "
    "parameters\n"
)


@pytest.mark.parametrize(
    ("function", "extra", "expected"),
    [
        (
            "f",
            (),
            "error[E0606]: `f` cannot be exported: parameter `b` is a second struct (A), after `a`, and a package "
            "takes tensors and one struct of weights\n --> two.dl:4:12\n"
            + SECOND_STRUCT.format(line=4, source="fn f(a: A, b: A, x: f32[2]) -> f32[2] { return a.w * x + b.w }"),
        ),
        (
            "g",
            ("--param", "b"),
            "error[E0606]: `g` cannot be exported: parameter `b` is a second struct (B), after `a`, and a package "
            "takes tensors and one struct of weights\n --> two.dl:5:12\n"
            + SECOND_STRUCT.format(line=5, source="fn g(a: A, b: B, x: f32[2]) -> f32[2] { return a.w * x + b.v }"),
        ),
        (
            "one",
            ("--param", "c"),
            "error[E0605]: `--param c`: `one` has no struct parameter `c`\n"
            " --> a.safetensors:1:1\n"
            "  = note: the struct parameters: `a`\n",
        ),
        (
            "h",
            (),
            "error[E0606]: `h` cannot be exported: parameter `x` has no type annotation\n"
            " --> two.dl:7:6\n"
            "  |\n"
            "7 | fn h(x) { return x }\n"
            "  |      ^\n"
            "  = help: a package's signature is its interface: annotate every parameter\n",
        ),
        (
            "k",
            (),
            "error[E0201]: `two.dl` has no function `k`\n --> two.dl:1:1\n  |\n1 | \n  | ^\n",
        ),
    ],
)
def test_which_parameter_takes_the_weights(dlrun, tmp_path: Path, monkeypatch, function, extra, expected) -> None:
    """A package takes its inputs as arrays, by name, and one struct, the weights: a function with a second
    struct parameter cannot be one (its package could never be given that struct)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "two.dl").write_text(TWO_STRUCTS)
    assert dlrun("two.dl")[0] == 0
    status, _, err = dlrun("export", "two.dl", "--fn", function, "--weights", "a.safetensors", "-o", "t.dlpkg", *extra)
    assert (status, err) == (1, expected)
    assert not (tmp_path / "t.dlpkg").exists()
    if function == "one":
        assert (
            dlrun("export", "two.dl", "--fn", "one", "--weights", "a.safetensors", "-o", "t.dlpkg", "--param", "a")[0]
            == 0
        )


def test_inputs_are_checked_against_the_signature(dlrun, project: Path) -> None:
    export(dlrun, project, function="both")
    package = load_package("m.dlpkg")
    scale = np.float32(1.0)
    assert diagnostic(lambda: package(inputs().astype(np.float64), scale)) == (
        "E0604: input `x` does not fit `both(x: f32[B, 4], scale: f32) -> (f32[B, 3], i64[B])`: "
        "expected f32[B, 4], found f64[5, 4]"
    )
    assert diagnostic(lambda: package(inputs()[:, :3], scale)).endswith(
        "expected f32[B, 4], found f32[5, 3] (axis 1 has 3, not 4)"
    )
    assert diagnostic(lambda: package(inputs())) == "E0604: missing input `scale` of `both`"
    assert diagnostic(lambda: package(inputs(), scale, y=1)) == "E0604: `both` has no input `y`"
    assert diagnostic(lambda: package(np.array(["a"] * 4, dtype=object), scale)).endswith("found a non-numeric array")


def test_a_package_error_caught_in_python_says_its_code(dlrun, project: Path) -> None:
    """From Python, the `DiagnosticError` has the code docs/export.md names, in `.code` and in its text; a
    backend that does not exist is a ValueError naming those that do, before the package is read."""
    export(dlrun, project)
    package = load_package("m.dlpkg")
    with pytest.raises(DiagnosticError) as raised:
        package(inputs(), inputs())
    assert raised.value.code == "E0604"
    assert str(raised.value) == "E0604: `predict` takes 1 input, 2 given"
    with pytest.raises(ValueError) as unknown:
        load_package("missing.dlpkg", backend="tpu")
    assert str(unknown.value) == "unknown backend 'tpu': the backends are 'interp', 'llvm', 'cuda'"


@pytest.mark.parametrize("backend", ["interp", "llvm"])
def test_inputs_that_fitted_once_are_not_trusted_blindly(dlrun, project: Path, backend: str) -> None:
    """Shapes and dtypes that fitted are remembered (driver/package.py, `Package.arguments`): the same shape
    in another dtype, another width, or a view that is not contiguous is still checked, and every call
    computes what the sources compute."""
    export(dlrun, project)
    package = load_package("m.dlpkg", backend=backend)
    expected = reference(project, "predict", inputs())
    for _ in range(2):
        np.testing.assert_allclose(package(inputs()), expected, rtol=1e-6)
    assert diagnostic(lambda: package(inputs().astype(np.float64))).endswith("expected f32[B, 4], found f64[5, 4]")
    assert diagnostic(lambda: package(inputs()[:, :3].copy())).endswith("(axis 1 has 3, not 4)")
    wide = np.zeros((5, 8), np.float32)
    wide[:, ::2] = inputs()
    np.testing.assert_allclose(package(wide[:, ::2]), expected, rtol=1e-6)  # a strided view of the same numbers
    np.testing.assert_allclose(package(x=inputs()), expected, rtol=1e-6)


def test_npz_inputs_are_never_unpickled(dlrun, project: Path) -> None:
    export(dlrun, project)
    np.savez("objects.npz", x=np.array([{"a": 1}], dtype=object))
    status, _, err = dlrun("predict", "m.dlpkg", "--input", "objects.npz", "-o", "y.npz")
    assert status == 1 and err.startswith(
        'error[E0604]: input file `objects.npz`: array "x" in "objects.npz" holds Python objects, '
        "which DL never unpickles"
    )
    with zipfile.ZipFile("pickled.npz", "w") as archive:  # a member that is a raw pickle, not an .npy array
        archive.writestr("x.npy", b"\x80\x04\x95\x00\x00\x00\x00\x00\x00\x00\x00.")
    status, _, err = dlrun("predict", "m.dlpkg", "--input", "pickled.npz", "-o", "y.npz")
    assert status == 1 and err.startswith('error[E0604]: input file `pickled.npz`: array "x" in "pickled.npz"')
    os.mkfifo("pipe.npz")  # a named pipe would block a reader that does not look first
    status, _, err = dlrun("predict", "m.dlpkg", "--input", "pipe.npz", "-o", "y.npz")
    assert status == 1 and "input file `pipe.npz`: cannot be read" in err and "not a regular file" in err
    os.mkfifo("pipe.dlpkg")
    status, _, err = dlrun("predict", "pipe.dlpkg", "--input", "objects.npz", "-o", "y.npz")
    assert status == 1 and err.startswith("error[E0601]") and "not a regular file" in err
    np.savez("wrong.npz", y=inputs(), z=inputs())
    status, _, err = dlrun("predict", "m.dlpkg", "--input", "wrong.npz", "-o", "y.npz")
    assert err == (
        "error[E0604]: input file `wrong.npz`: it has no array `x`; `predict` takes `x`\n --> wrong.npz:1:1\n"
    )
    assert not Path("y.npz").exists()


def test_predict_says_what_is_wrong_with_its_files_in_words(dlrun, project: Path) -> None:
    """A directory is named as one (no `[Errno 22]`), an ONNX model as one, and an array that does not fit is
    reported at the input file it came from, as a missing one is."""
    export(dlrun, project)
    os.mkdir("folder")
    status, _, err = dlrun("predict", "m.dlpkg", "--input", "folder", "-o", "y.npz")
    assert (status, err) == (
        1,
        "error[E0604]: input file `folder`: cannot be read (it is a directory, not a regular file)\n --> folder:1:1\n",
    )
    status, _, err = dlrun("predict", "folder", "--input", "x.npz", "-o", "y.npz")
    assert err.startswith("error[E0601]: package `folder`: cannot be read (it is a directory, not a regular file)\n")
    np.savez("narrow.npz", x=inputs()[:, :3])
    status, _, err = dlrun("predict", "m.dlpkg", "--input", "narrow.npz", "-o", "y.npz")
    assert (status, err) == (
        1,
        "error[E0604]: input file `narrow.npz`: input `x` does not fit `predict(x: f32[B, 4]) -> f32[B, 3]`: "
        "expected f32[B, 4], found f32[5, 3] (axis 1 has 3, not 4)\n --> narrow.npz:1:1\n",
    )
    assert not Path("y.npz").exists()
    if importlib.util.find_spec("onnx") is None:
        pytest.skip("the onnx package is not installed: the ONNX model is not written")
    dlrun(
        "export",
        str(project / "model.dl"),
        "--fn",
        "predict",
        "--weights",
        str(project / "net.safetensors"),
        "-o",
        "m.onnx",
        "--onnx",
    )
    status, _, err = dlrun("predict", "m.onnx", "--input", "narrow.npz", "-o", "y.npz")
    assert (status, err) == (
        1,
        "error[E0601]: package `m.onnx`: it is an ONNX model, not a DL package\n"
        " --> m.onnx:1:1\n"
        "  = help: run an ONNX model with onnxruntime; `dlrun predict` runs the `.dlpkg` of an export without "
        "`--onnx`\n",
    )


def rewritten(path: str, target: str, change) -> None:
    """The package at `path` written again as `target`, `change(members)` applied to its members."""
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    change(members)
    with zipfile.ZipFile(target, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)


def with_manifest(members: dict, **changes) -> None:
    manifest = json.loads(members["manifest.json"])
    manifest.update(changes)
    members["manifest.json"] = json.dumps(manifest).encode()


def retyped(members: dict) -> None:
    """A source that no longer checks, its hash updated so that only the checker can tell."""
    source = members["model.dl"].replace(b"+ model__relu(0.5)", b"+ model__relu(true)")
    members["model.dl"] = source
    hashes = {name: hashlib.sha256(members[name]).hexdigest() for name in ("model.dl", "weights.safetensors")}
    with_manifest(members, sha256=hashes)


def test_a_damaged_package_is_a_diagnostic(dlrun, project: Path) -> None:
    export(dlrun, project)
    data = Path("m.dlpkg").read_bytes()
    Path("truncated.dlpkg").write_bytes(data[: len(data) // 2])
    assert diagnostic(lambda: load_package("truncated.dlpkg")).startswith(
        "E0601: package `truncated.dlpkg`: not a DL package, or truncated"
    )
    rewritten(
        "m.dlpkg",
        "tampered.dlpkg",
        lambda m: m.update({"weights.safetensors": m["weights.safetensors"][:-4] + b"\0\0\0\0"}),
    )
    assert diagnostic(lambda: load_package("tampered.dlpkg")) == (
        "E0602: package `tampered.dlpkg`: member `weights.safetensors` does not match its sha256 in the manifest: "
        "the package was changed after it was written"
    )
    flipped = bytearray(data)
    flipped[data.index(b"weights.safetensors") + 200] ^= 1  # inside the stored weights: the zip's CRC finds it
    Path("flipped.dlpkg").write_bytes(bytes(flipped))
    assert diagnostic(lambda: load_package("flipped.dlpkg")).startswith(
        "E0602: package `flipped.dlpkg`: a member is corrupt"
    )
    rewritten("m.dlpkg", "newer.dlpkg", lambda m: with_manifest(m, format_version=2, dl_version="9.0"))
    with pytest.raises(DiagnosticError) as raised:
        load_package("newer.dlpkg")
    (found,) = raised.value.diagnostics
    assert (found.code, found.message, found.notes) == (
        "E0603",
        "package `newer.dlpkg`: it has format version 2, newer than this DL reads (1)",
        ("it was written by DL 9.0; this is DL 0.1.0: upgrade DL",),
    )
    rewritten("m.dlpkg", "extra.dlpkg", lambda m: m.update({"run.py": b"print('hi')"}))
    assert diagnostic(lambda: load_package("extra.dlpkg")).startswith(
        "E0601: package `extra.dlpkg`: expected the members"
    )
    assert diagnostic(lambda: load_package("missing.dlpkg")) == "E0601: package `missing.dlpkg`: no such file"
    rewritten("m.dlpkg", "hashes.dlpkg", lambda m: with_manifest(m, sha256="abc"))
    assert diagnostic(lambda: load_package("hashes.dlpkg")) == (
        "E0601: package `hashes.dlpkg`: its manifest's `sha256` is a string, not an object"
    )
    rewritten("m.dlpkg", "nofunction.dlpkg", lambda m: with_manifest(m, function="nope"))
    assert diagnostic(lambda: load_package("nofunction.dlpkg")) == (
        "E0602: package `nofunction.dlpkg`: the manifest names function `nope`, which the source does not have"
    )


def test_a_package_whose_source_does_not_check_reports_the_checker(dlrun, project: Path) -> None:
    export(dlrun, project)
    rewritten("m.dlpkg", "bad.dlpkg", retyped)
    status, _, err = dlrun("predict", "bad.dlpkg", "--input", "x.npz", "-o", "y.npz")
    assert status == 1
    assert err.splitlines()[:5] == [
        "error[E0311]: `*` needs numbers, found bool * f32",
        "  --> bad.dlpkg/model.dl:23:12",
        "   |",
        "23 |     return x * 2.0",
        "   |            ^^^^^^^ bool * f32",
    ]


def test_a_package_touches_no_file(dlrun, project: Path, tmp_path: Path) -> None:
    """Running a package from elsewhere writes and reads no file: exporting code that names `save`, `load`,
    `log_metric`, `load_csv` or `load_npz` (here in a function of another module) is E0606 at the user's call,
    and a package whose source was edited to call one is refused on load, before anything runs."""
    (project / "layers.dl").write_text('fn dense(x, w, b) {\n    log_metric("calls", 1.0)\n    return x @ w + b\n}\n')
    status, out, err = export(dlrun, project)
    assert (status, out) == (1, "")
    assert err.splitlines()[:6] == [
        "error[E0606]: `predict` cannot be exported: it calls `log_metric`, which writes a file",
        f" --> {project / 'layers.dl'}:2:5",
        "  |",
        '2 |     log_metric("calls", 1.0)',
        "  |     ^^^^^^^^^^",
        "  = help: an exported model computes its outputs from its inputs alone, and running one touches no file: read "
        "data outside it and give it as an input, or save what it returns",
    ]
    assert not Path("m.dlpkg").exists()
    (project / "layers.dl").write_text(LAYERS)
    export(dlrun, project)

    def saving(members: dict) -> None:
        members["model.dl"] = members["model.dl"].replace(
            b"    return", b'    save("evil.safetensors", x)\n    return', 1
        )
        hashes = {name: hashlib.sha256(members[name]).hexdigest() for name in ("model.dl", "weights.safetensors")}
        with_manifest(members, sha256=hashes)

    rewritten("m.dlpkg", "evil.dlpkg", saving)
    with pytest.raises(DiagnosticError) as raised:
        load_package("evil.dlpkg")
    (found,) = raised.value.diagnostics
    assert (found.code, found.message, found.span.path) == (
        "E0606",
        "package `evil.dlpkg`: `predict` calls `save`, which writes a file",
        "evil.dlpkg/model.dl",
    )
    assert "evil.dlpkg/model.dl" in str(found.span) and found.span.line > 1
    np.savez("x.npz", x=inputs())
    status, _, err = dlrun("predict", "evil.dlpkg", "--input", "x.npz", "-o", "y.npz")
    assert status == 1 and "error[E0606]: package `evil.dlpkg`: `predict` calls `save`" in err
    assert not Path("evil.safetensors").exists() and not Path("y.npz").exists()


def test_compiled_calls_see_new_arrays_and_arrays_changed_in_place(tmp_path: Path) -> None:
    """A compiled function's argument slots keep the address of the array of the last call (codegen/native.py,
    `Specialisation.placed`): an array changed in place since is read anew, another array takes its place, and
    a non-contiguous view is copied each time."""
    source = "fn scale(w: f32[N, N], x: f32[N]) -> f32[N] { return w @ x + 1.0 }\nfn main() {}\n"
    (tmp_path / "scale.dl").write_text(source)
    _, typed = pipeline.prepare(pipeline.load(str(tmp_path / "scale.dl")))
    prepared = pipeline.on_backend("llvm", typed)
    call = prepared.caller("scale")
    w, x = np.eye(4, dtype=np.float32), np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(call([w, x]), w @ x + 1)
    w *= 2  # the same array, new values
    np.testing.assert_array_equal(call([w, x]), w @ x + 1)
    other = np.full((4, 4), 3.0, np.float32)
    np.testing.assert_array_equal(call([other, x]), other @ x + 1)
    wide = np.arange(32, dtype=np.float32).reshape(4, 8)
    np.testing.assert_array_equal(call([wide[:, ::2], x]), wide[:, ::2] @ x + 1)
    wide[:, ::2] += 10
    np.testing.assert_array_equal(call([wide[:, ::2], x]), wide[:, ::2] @ x + 1)
    assert prepared.outcome().splitlines()[0].endswith("scale.dl:1:4: `scale`(f32[4, 4], f32[4]) compiled")
