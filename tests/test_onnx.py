"""ONNX export (export/): the models pass onnx's full check, onnxruntime gives what the interpreter gives on
the examples' MLP and CNN and on a corpus of functions with control flow (tests/onnx/corpus.dl), int8
weights cost at most half a point of accuracy, and what ONNX cannot express is E0607 at its span."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, check_golden
from dl import load_package, pipeline

onnx = pytest.importorskip("onnx", reason="the `onnx` extra is not installed")
ort = pytest.importorskip("onnxruntime", reason="the `onnx` extra is not installed")

CORPUS = ROOT / "tests" / "onnx" / "corpus.dl"
HELD_OUT = """
import data
fn held_out() -> (f32[_, 64], i64[_]) {
    let (_, test) = data.split(digits(), 0.8, 0)
    return test
}
"""


def session(path: Path):
    options = ort.SessionOptions()
    options.log_severity_level = 3  # no warnings on stderr
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def run_onnx(path: Path, **inputs: np.ndarray) -> list[np.ndarray]:
    return session(path).run(None, inputs)


def export(dlrun, program: Path, function: str, weights: Path, output: Path, *extra: str) -> None:
    status, _, err = dlrun(
        "export", str(program), "--fn", function, "--weights", str(weights), "-o", str(output), *extra
    )
    assert (status, err) == (0, "")


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The examples' MLP and CNN trained as `dlrun examples/NAME.dl` trains them, and the held-out digits."""
    from dl.cli import main

    directory = tmp_path_factory.mktemp("trained")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(directory)
        patch.setenv("DL_METRICS", str(directory / "metrics.jsonl"))
        for name in ("train.dl", "cnn.dl"):
            shutil.copy(ROOT / "examples" / name, directory / name)
            assert main([name]) == 0
        (directory / "held_out.dl").write_text(HELD_OUT)
        images, labels = pipeline.call(pipeline.load("held_out.dl"), "held_out", [])
    np.savez(directory / "held_out.npz", images=images, labels=labels)
    return directory


MODELS = {"mlp": ("train.dl", "digits_mlp.safetensors", "x"), "cnn": ("cnn.dl", "digits_cnn.safetensors", "images")}


@pytest.fixture(scope="module")
def exported(trained: Path) -> Path:
    """Each model as a package, as ONNX and as int8 ONNX."""
    from dl.cli import main

    for model, (program, weights, _) in MODELS.items():
        common = ["export", str(trained / program), "--fn", "forward", "--weights", str(trained / weights)]
        assert main([*common, "-o", str(trained / f"{model}.dlpkg")]) == 0
        assert main([*common, "-o", str(trained / f"{model}.onnx"), "--onnx"]) == 0
        assert main([*common, "-o", str(trained / f"{model}.int8.onnx"), "--onnx", "--quantize", "int8"]) == 0
    return trained


def held_out(directory: Path) -> tuple[np.ndarray, np.ndarray]:
    with np.load(directory / "held_out.npz", allow_pickle=False) as data:
        return data["images"], data["labels"]


@pytest.mark.parametrize("model", MODELS)
def test_onnxruntime_gives_the_interpreters_outputs_on_the_examples(exported: Path, model: str) -> None:
    images, _ = held_out(exported)
    name = MODELS[model][2]
    (outputs,) = run_onnx(exported / f"{model}.onnx", **{name: images})
    expected = load_package(exported / f"{model}.dlpkg")(images)
    np.testing.assert_allclose(outputs, expected, rtol=1e-5, atol=1e-5)
    graph = onnx.load(exported / f"{model}.onnx").graph
    (batch, features) = graph.input[0].type.tensor_type.shape.dim
    assert (batch.dim_param, features.dim_value) == ("B", 64)  # the dimension name is kept
    assert graph.output[0].type.tensor_type.shape.dim[0].dim_param == "B"
    onnx.checker.check_model(onnx.load(exported / f"{model}.onnx"), full_check=True)


def accuracy(path: Path, name: str, images: np.ndarray, labels: np.ndarray) -> float:
    (logits,) = run_onnx(path, **{name: images})
    return float(np.mean(np.argmax(logits, axis=1) == labels))


@pytest.mark.parametrize(("model", "least_ratio"), [("mlp", 3.5), ("cnn", 3.1)])
def test_int8_weights_keep_the_accuracy_and_shrink_the_file(exported: Path, model: str, least_ratio: float) -> None:
    """Measured (docs/export.md): the MLP's file is 3.52x smaller, the CNN's 3.11x; the CNN's weights are only
    10.9 kB, so the graph's fixed bytes weigh more there (its weights alone shrink 3.75x). A bias stays f32,
    also one shaped [C, 1, 1] to broadcast over an image."""
    images, labels = held_out(exported)
    name = MODELS[model][2]
    f32, int8 = exported / f"{model}.onnx", exported / f"{model}.int8.onnx"
    assert accuracy(f32, name, images, labels) - accuracy(int8, name, images, labels) <= 0.005
    assert f32.stat().st_size / int8.stat().st_size >= least_ratio
    quantized = onnx.load(int8)
    weights = {t.name: t for t in quantized.graph.initializer}
    assert {node.op_type for node in quantized.graph.node} >= {"DequantizeLinear"}
    matrix = "w1.q" if model == "mlp" else "kernel.q"
    assert weights[matrix].data_type == onnx.TensorProto.INT8
    bias = "b1" if model == "mlp" else "bias"
    assert weights[bias].data_type == onnx.TensorProto.FLOAT and f"{bias}.q" not in weights
    onnx.checker.check_model(quantized, full_check=True)


def test_quantization_is_per_channel_and_symmetric() -> None:
    from dl.export.quantize import quantized

    matrix = np.array([[1.0, -0.02], [-0.25, 0.005]], dtype=np.float32)
    codes, scale, axis = quantized(matrix)
    assert axis == 1 and np.allclose(scale, [1 / 127, 0.02 / 127])
    np.testing.assert_array_equal(codes, [[127, -127], [-32, 32]])
    kernel = np.ones((2, 1, 3, 3), dtype=np.float32) * np.array([2.0, -4.0]).reshape(2, 1, 1, 1)
    codes, scale, axis = quantized(kernel)
    assert axis == 0 and np.allclose(scale, [2 / 127, 4 / 127]) and set(codes.ravel()) == {127, -127}


CORPUS_FUNCTIONS = [
    "branch",
    "early",
    "halve",
    "per_example",
    "accumulate",
    "mixed",
    "power_iteration",
    "classify",
    "special",
    "steps",
    "statistics",
    "running",
    "long_running",
    "clipped",
    "ranked",
    "top",
    "padded",
    "frozen",
    "tested",
    "trig",
    "strided",
    "spaced",
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from dl.cli import main

    directory = tmp_path_factory.mktemp("corpus")
    shutil.copy(CORPUS, directory / "corpus.dl")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(directory)
        assert main(["corpus.dl"]) == 0
    return directory


@pytest.mark.parametrize("function", CORPUS_FUNCTIONS)
def test_control_flow_exports_as_if_and_loop(corpus: Path, dlrun, function: str) -> None:
    weights = corpus / "corpus.safetensors"
    export(dlrun, corpus / "corpus.dl", function, weights, corpus / f"{function}.onnx", "--onnx")
    export(dlrun, corpus / "corpus.dl", function, weights, corpus / f"{function}.dlpkg")
    package = load_package(corpus / f"{function}.dlpkg")
    for seed, sign, batch in [(0, 1.0, 5), (1, 1.0, 1), (2, -1.0, 7)]:
        x = (np.random.default_rng(seed).standard_normal((batch, 4)) * sign).astype(np.float32)
        found = run_onnx(corpus / f"{function}.onnx", x=x)
        expected = package(x)
        expected = list(expected) if isinstance(expected, tuple) else [expected]
        for got, want in zip(found, expected, strict=True):
            want = np.asarray(want)
            assert (got.dtype, got.shape) == (want.dtype, want.shape)
            exact = function == "spaced"  # arange's values are the interpreter's to the last bit
            np.testing.assert_allclose(got, want, rtol=0 if exact else 1e-5, atol=0 if exact else 1e-6)


def test_the_control_flow_is_in_the_graph(corpus: Path, dlrun) -> None:
    """`if` on data is an `If` and loops are `Loop`s, not unrolled: the per-example `while` is a `Loop` in the
    body of the `Loop` over the batch."""
    weights = corpus / "corpus.safetensors"
    for function in ("branch", "per_example"):
        export(dlrun, corpus / "corpus.dl", function, weights, corpus / f"{function}.onnx", "--onnx")
    assert "If" in {node.op_type for node in onnx.load(corpus / "branch.onnx").graph.node}
    (outer,) = [node for node in onnx.load(corpus / "per_example.onnx").graph.node if node.op_type == "Loop"]
    body = outer.attribute[0].g
    assert "Loop" in {node.op_type for node in body.node}


REFUSED = """
import nn

struct W { w: f32[2] }

fn dropped(m: W, x: f32[2]) -> f32[2] {
    return nn.dropout(x * m.w, 0.5, 1, true)
}

fn shows(m: W, x: f32[2]) -> f32[2] {
    print(x)
    return x * m.w
}

fn noisy(m: W, x: f32[2]) -> f32[2] {
    return x * m.w + randn(2, seed=1)
}

fn count(n: i64) -> i64 {
    if n == 0 {
        return 0
    }
    return count(n - 1) + 1
}

fn recursive(m: W, x: f32[2]) -> f32[2] {
    return x * float(count(len(x)))
}

fn checked(m: W, x: f32[2]) -> f32[2] {
    assert(sum(x) > 0.0, "positive inputs only")
    return x * m.w
}

fn leaves(m: W, x: f32[2]) -> f32[2] {
    let y = x
    while sum(y) < 10.0 {
        if sum(y) < 0.0 {
            return y
        }
        y = y * 2.0 + m.w
    }
    return y
}

fn stores(m: W, x: f32[2]) -> f32[2] {
    save("w.safetensors", m)
    return x
}

fn parted(m: W, x: f32[2]) -> f32[2] {
    let grid = reshape(arange(8), 2, 2, 2)
    return x * float(grid[0, :, [1, 0]][0])
}

fn spaced(m: W, x: f32[2]) -> f32[_] {
    return arange(0.0, sum(x), 0.5) * m.w[0]
}

fn stepless(m: W, x: f32[2]) -> f32[_] {
    return arange(0.0, 1.0, 0.0) * m.w[0]
}

fn main() { save("w.safetensors", W { w: ones(2) }) }
"""


@pytest.mark.parametrize(
    "function",
    ["shows", "noisy", "recursive", "checked", "leaves", "stores", "parted", "dropped", "spaced", "stepless"],
)
def test_what_onnx_cannot_express_is_a_diagnostic_at_its_span(
    dlrun, tmp_path: Path, monkeypatch, function: str, update_goldens: bool
) -> None:
    """The diagnostics are golden files, tests/onnx/refused.FUNCTION.err."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "refused.dl").write_text(REFUSED)
    assert dlrun("refused.dl")[0] == 0
    status, _, err = dlrun(
        "export", "refused.dl", "--fn", function, "--weights", "w.safetensors", "-o", "m.onnx", "--onnx"
    )
    assert status == 1
    check_golden(ROOT / "tests" / "onnx" / f"refused.{function}.err", err, update_goldens)
    assert not (tmp_path / "m.onnx").exists()


DROPOUT_MODEL = """
import nn
struct M { w: f32[4, 4] }
fn forward(m: M, x: f32[B, 4], training: bool) -> f32[B, 4] { return nn.dropout(tanh(x @ m.w), 0.5, 7, training) }
fn predict(m: M, x: f32[B, 4]) -> f32[B, 4] { return forward(m, x, false) * 2.0 }
fn main() { save("m.safetensors", M { w: reshape(float(arange(16)) * 0.1, 4, 4) }) }
"""


NAMESAKE_MODEL = """
struct W { x: f32[3, 3], lo: f32[3] }
fn f(m: W, x: f32[B, 3], lo: f32[B, 1]) -> f32[B, 3] { return x @ m.x + m.lo * 10.0 + lo }
fn main() { save("w.safetensors", W { x: reshape(float(arange(9)), 3, 3), lo: [1.0, 2.0, 3.0] }) }
"""


def test_a_weight_named_as_an_input_is_an_initializer_of_its_own(dlrun, tmp_path: Path, monkeypatch) -> None:
    """`m.x` beside the input `x`: the initializer is `m.x`, and the input is what the caller feeds (it was one name
    for both, and onnxruntime read the weight as the input's default: a wrong number, or a rank error)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "namesake.dl").write_text(NAMESAKE_MODEL)
    assert dlrun("namesake.dl")[0] == 0
    export(dlrun, tmp_path / "namesake.dl", "f", tmp_path / "w.safetensors", tmp_path / "f.onnx", "--onnx")
    x, lo = np.ones((2, 3), np.float32), np.array([[100.0], [200.0]], np.float32)
    (output,) = run_onnx(tmp_path / "f.onnx", x=x, lo=lo)
    np.testing.assert_allclose(output, x @ np.arange(9.0).reshape(3, 3) + np.array([10.0, 20.0, 30.0]) + lo)
    model = onnx.load(str(tmp_path / "f.onnx"))
    assert [i.name for i in model.graph.input] == ["x", "lo"]
    assert sorted(t.name for t in model.graph.initializer) == ["m.lo", "m.x"]


def test_dropout_on_the_inference_path_exports_as_its_input(dlrun, tmp_path: Path, monkeypatch) -> None:
    """`training` known false when exported (here through a call): dropout is `x`, as it is when run."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dropped.dl").write_text(DROPOUT_MODEL)
    assert dlrun("dropped.dl")[0] == 0
    export(dlrun, tmp_path / "dropped.dl", "predict", tmp_path / "m.safetensors", tmp_path / "p.onnx", "--onnx")
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    w = (np.arange(16, dtype=np.float32) * np.float32(0.1)).reshape(4, 4)
    (output,) = run_onnx(tmp_path / "p.onnx", x=x)
    np.testing.assert_allclose(output, np.tanh(x @ w) * 2.0, rtol=1e-6)
    assert not any(node.op_type == "Dropout" for node in onnx.load(str(tmp_path / "p.onnx")).graph.node)


def test_the_lowering_implements_exactly_what_the_onnx_column_says() -> None:
    from dl.export.onnx_model import HANDLERS
    from dl.export.support import SUPPORT

    assert frozenset(HANDLERS) == SUPPORT.implemented
    assert SUPPORT.problems() == []


GENERIC_MODEL = """
struct Linear[IN, OUT] { w: f32[IN, OUT], b: f32[OUT] }

fn general(m: Linear[IN, OUT], x: f32[B, IN]) -> f32[B, OUT] {
    return tanh(x @ m.w + m.b) * float(OUT)
}

fn main() {
    save("w.safetensors", Linear { w: randn(4, 3, seed=1), b: randn(3, seed=2) })
}
"""


def test_a_generic_struct_and_a_dimension_value_export_to_a_package_and_to_onnx(
    dlrun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`Linear[IN, OUT]` in the signature, and `OUT` read as a value: the package and the ONNX model compute
    what the source does."""
    monkeypatch.chdir(tmp_path)
    program = tmp_path / "model.dl"
    program.write_text(GENERIC_MODEL)
    assert dlrun(str(program))[0] == 0
    weights = tmp_path / "w.safetensors"
    export(dlrun, program, "general", weights, tmp_path / "general.dlpkg")
    export(dlrun, program, "general", weights, tmp_path / "general.onnx", "--onnx")
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    from dl.interp.checkpoints import read_checkpoint

    tensors = read_checkpoint(str(weights))
    expected = np.tanh(x @ tensors["w"] + tensors["b"]) * 3.0
    package = load_package(str(tmp_path / "general.dlpkg"))
    np.testing.assert_allclose(package(x), expected, rtol=1e-6)
    (onnx_output,) = run_onnx(tmp_path / "general.onnx", x=x)
    np.testing.assert_allclose(onnx_output, expected, rtol=1e-6)


CAUSAL_MODEL = """
import nn
struct Head { q: f32[4, 4], k: f32[4, 4], v: f32[4, 4] }
fn attend(h: Head, x: f32[T, 4]) -> f32[T, 4] {
    let causal = tril(ones(T, T)) == 1.0
    return nn.masked_attention(x @ h.q, x @ h.k, x @ h.v, causal)
}
fn main() { save("head.safetensors", Head { q: randn(4, 4, seed=1), k: randn(4, 4, seed=2), v: randn(4, 4, seed=3) }) }
"""


def test_a_masked_attention_exports_its_minus_infinity(dlrun, tmp_path: Path, monkeypatch) -> None:
    """`masked_attention` masks with the literal -1e400, folded to -inf: the package's source spells it so that it
    reads back (it printed `-inf`, an unknown name, and export failed with a traceback)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "causal.dl").write_text(CAUSAL_MODEL)
    assert dlrun("causal.dl")[0] == 0
    weights = tmp_path / "head.safetensors"
    export(dlrun, tmp_path / "causal.dl", "attend", weights, tmp_path / "c.dlpkg")
    export(dlrun, tmp_path / "causal.dl", "attend", weights, tmp_path / "c.onnx", "--onnx")
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    from dl.interp.checkpoints import read_checkpoint

    h = read_checkpoint(str(weights))
    q, k, v = x @ h["q"], x @ h["k"], x @ h["v"]
    scores = np.where(np.tril(np.ones((5, 5))) == 1.0, q @ k.T / np.sqrt(4.0), -np.inf)
    weights_of = np.exp(scores - scores.max(axis=1, keepdims=True))
    expected = weights_of / weights_of.sum(axis=1, keepdims=True) @ v
    np.testing.assert_allclose(load_package(str(tmp_path / "c.dlpkg"))(x), expected, rtol=1e-5, atol=1e-6)
    (onnx_output,) = run_onnx(tmp_path / "c.onnx", x=x)
    np.testing.assert_allclose(onnx_output, expected, rtol=1e-5, atol=1e-6)


NESTED_RESULT = """
struct Layer { w: f32[4, 4] }
fn both(l: Layer, x: f32[B, 4]) -> (f32[B, 4], (f32[B, 4], f32)) { return (x, (x @ l.w, 1.0)) }
fn main() { save("layer.safetensors", Layer { w: reshape(float(arange(16)) * 0.1, 4, 4) }) }
"""


def test_the_outputs_of_a_nested_tuple_are_named_as_predict_names_them(dlrun, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "nested.dl").write_text(NESTED_RESULT)
    assert dlrun("nested.dl")[0] == 0
    export(dlrun, tmp_path / "nested.dl", "both", tmp_path / "layer.safetensors", tmp_path / "n.dlpkg")
    export(dlrun, tmp_path / "nested.dl", "both", tmp_path / "layer.safetensors", tmp_path / "n.onnx", "--onnx")
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    np.savez("x.npz", x=x)
    assert dlrun("predict", "n.dlpkg", "--input", "x.npz", "-o", "y.npz")[0] == 0
    with np.load("y.npz") as predicted:
        expected = {name: predicted[name] for name in predicted.files}
    names = [output.name for output in session(tmp_path / "n.onnx").get_outputs()]
    assert names == sorted(expected) == ["output.0", "output.1.0", "output.1.1"]
    for name, array in zip(names, run_onnx(tmp_path / "n.onnx", x=x), strict=True):
        np.testing.assert_allclose(array, expected[name], rtol=1e-6)


def test_int8_refuses_weights_holding_nan_rather_than_hide_them(dlrun, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    source = NESTED_RESULT.replace("* 0.1, 4, 4)", "* 0.1 / float(arange(16) > 0), 4, 4)")  # 0 / 0 at [0, 0]
    (tmp_path / "nested.dl").write_text(source)
    assert dlrun("nested.dl")[0] == 0
    args = ["export", "nested.dl", "--fn", "both", "--weights", "layer.safetensors", "-o", "n.onnx", "--onnx"]
    status, out, err = dlrun(*args, "--quantize", "int8")
    assert (status, out) == (1, "")
    assert err.startswith("error[E0605]: weight `w` holds nan or inf, which int8 codes cannot hold\n")
    assert "RuntimeWarning" not in err and not (tmp_path / "n.onnx").exists()
    assert dlrun(*args)[0] == 0  # the float model keeps the nan, which its outputs show


SPACED = """
struct W { s: f32 }
fn spaced(m: W, x: f32[B]) -> f32[13] { return linspace(-0.3, 0.9, 13) + m.s }
fn main() { save("w.safetensors", W { s: 0.0 }) }
"""


def test_a_literal_linspace_exports_the_points_the_interpreter_computes(dlrun, tmp_path: Path, monkeypatch) -> None:
    """The literal ends take the f32 result's dtype, as when interpreted: the point at 0 is -1.5e-08."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spaced.dl").write_text(SPACED)
    assert dlrun("spaced.dl")[0] == 0
    export(dlrun, tmp_path / "spaced.dl", "spaced", tmp_path / "w.safetensors", tmp_path / "s.onnx", "--onnx")
    (points,) = run_onnx(tmp_path / "s.onnx", x=np.ones(1, np.float32))
    ends = (float(np.float32(-0.3)), float(np.float32(0.9)))
    np.testing.assert_array_equal(points, np.linspace(*ends, 13).astype(np.float32))
    assert points[3] == np.float32(-1.4901161e-08)
