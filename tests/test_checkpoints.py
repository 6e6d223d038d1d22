"""`save(path, value)` and `load(path, like)`: safetensors checkpoints of tensors, tuples and structs.

Values written by DL are read back with the `safetensors` package itself (not our reader), under the
documented dotted names; a round trip is bit-identical for every dtype; a bad file or a file that does
not fit `like` is an E0521 diagnostic naming the tensor; and a save that fails or is killed half-way
leaves the previous checkpoint as it was.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import dl.lang
import numpy as np
import pytest
import safetensors.numpy
from dl import pipeline
from dl.lang.diagnostics import DiagnosticError
from dl.runtime.values import StructValue

STATE = """
struct Layer { w: f32[2, 3], b: f64[3] }
struct State { layers: (Layer, Layer), step: i64, counts: i32[2], mask: bool[3], opt: (f32, (f64[2], i64[2])) }

fn make() -> State {
    let first = Layer { w: [[1.5, -0.0, 3.25e-30], [1e30, -7.0, 0.1]], b: [0.1f64, -2.5f64, 1e-300f64] }
    let second = Layer { w: randn(2, 3, seed=4), b: float([1, 2, 3], dtype=f64) / 3.0f64 }
    let opt = (0.001, ([1.0f64 / 3.0f64, -1e308f64], [-9223372036854775807, 42]))
    return State { layers: (first, second), step: 1234567890123, counts: [7i32, -2147483647i32],
                   mask: [true, false, true], opt: opt }
}

fn like() -> State {
    let layer = Layer { w: zeros(2, 3), b: zeros(3, dtype=f64) }
    return State { layers: (layer, layer), step: 0, counts: zeros(2, dtype=i32), mask: [false, false, false],
                   opt: (0.0, (zeros(2, dtype=f64), zeros(2, dtype=i64))) }
}

fn round_trip(path: str) -> (State, State) {
    let state = make()
    save(path, state)
    return (state, load(path, like()))
}

fn save_state(path: str) {
    save(path, make())
}

fn load_state(path: str) -> State {
    return load(path, like())
}
"""

NAMES = {
    "layers.0.w": ("float32", (2, 3)),
    "layers.0.b": ("float64", (3,)),
    "layers.1.w": ("float32", (2, 3)),
    "layers.1.b": ("float64", (3,)),
    "step": ("int64", ()),
    "counts": ("int32", (2,)),
    "mask": ("bool", (3,)),
    "opt.0": ("float32", ()),
    "opt.1.0": ("float64", (2,)),
    "opt.1.1": ("int64", (2,)),
}

_programs = iter(range(10**9))


def program(source: str):
    return pipeline.load(f"<checkpoint-test-{next(_programs)}>.dl", source)


def call(source: str, name: str, *args):
    return pipeline.call(program(source), name, list(args))


def leaves(value) -> dict[str, np.ndarray]:
    """A DL value's tensors by their documented names (computed here, independently of interp/checkpoints.py)."""
    found: dict[str, np.ndarray] = {}

    def walk(item, name: str) -> None:
        if isinstance(item, tuple):
            for position, part in enumerate(item):
                walk(part, f"{name}.{position}" if name else str(position))
        elif isinstance(item, StructValue):
            for field, part in zip(item.type.fields, item.values, strict=True):
                walk(part, f"{name}.{field}" if name else field)
        else:
            found[name or "value"] = item

    walk(value, "")
    return found


def same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def run_error(source: str, name: str, *args) -> tuple[str, str]:
    with pytest.raises(DiagnosticError) as caught:
        call(source, name, *args)
    diagnostic = caught.value.diagnostics[0]
    return diagnostic.code, diagnostic.message


# ---------------------------------------------------------------------- round trips


def test_round_trip_of_nested_structs_and_tuples_is_bit_identical(tmp_path: Path) -> None:
    path = tmp_path / "state.safetensors"
    saved, loaded = call(STATE, "round_trip", str(path))
    assert isinstance(loaded, StructValue) and loaded.type.name == "State"
    original, back = leaves(saved), leaves(loaded)
    assert list(back) == list(original) == list(NAMES)
    for name in NAMES:
        assert same_bits(back[name], original[name]), name
        assert type(back[name]) is type(original[name]), name  # i64 and bool scalars stay Python values
    assert back["step"] == 1234567890123 and back["opt.1.1"][0] == -9223372036854775807


GENERIC = """
struct Linear[IN, OUT] { w: f32[IN, OUT], b: f32[OUT] }
struct Model { first: Linear[3, H], second: Linear[H, 1] }

fn round_trip(path: str, hidden: i64) -> (Model, Model) {
    let model = Model { first: Linear { w: randn(3, hidden, seed=1), b: randn(hidden, seed=2) },
                        second: Linear { w: randn(hidden, 1, seed=3), b: zeros(1) } }
    save(path, model)
    let like = Model { first: Linear { w: zeros(3, hidden), b: zeros(hidden) },
                       second: Linear { w: zeros(hidden, 1), b: zeros(1) } }
    return (model, load(path, like))
}

fn wrong_size(path: str) -> Linear[4, 1] {
    return load(path, Linear { w: zeros(4, 1), b: zeros(1) })
}
"""


def test_generic_structs_round_trip_and_are_checked_against_their_sizes(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    saved, loaded = call(GENERIC, "round_trip", str(path), 4)
    original, back = leaves(saved), leaves(loaded)
    assert list(back) == ["first.w", "first.b", "second.w", "second.b"]
    for name, value in original.items():
        assert same_bits(back[name], value), name
    assert back["first.w"].shape == (3, 4)
    first = tmp_path / "first.safetensors"
    safetensors.numpy.save_file({"w": original["first.w"], "b": original["first.b"]}, str(first))
    code, message = run_error(GENERIC, "wrong_size", str(first))
    assert (
        code == "E0521" and "tensor `w`" in message and "expected f32[4, 1] (as in `like`), found f32[3, 4]" in message
    )


def test_the_file_is_plain_safetensors_with_the_documented_names(tmp_path: Path) -> None:
    path = tmp_path / "state.safetensors"
    saved, _ = call(STATE, "round_trip", str(path))
    stored = safetensors.numpy.load_file(str(path))
    assert {name: (str(t.dtype), t.shape) for name, t in stored.items()} == NAMES
    for name, value in leaves(saved).items():
        assert same_bits(stored[name], value), name
    assert stored["mask"].tolist() == [True, False, True]
    np.testing.assert_array_equal(stored["layers.0.b"], [0.1, -2.5, 1e-300])


def test_a_file_written_by_safetensors_loads_into_the_struct(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    tensors = {name: rng.standard_normal(shape).astype(dtype) for name, (dtype, shape) in NAMES.items()}
    path = tmp_path / "external.safetensors"
    safetensors.numpy.save_file(tensors, str(path))
    loaded = leaves(call(STATE, "load_state", str(path)))
    for name, tensor in tensors.items():
        assert same_bits(loaded[name], tensor), name


def test_a_bare_tensor_is_stored_as_value_and_scalars_keep_their_dtype(tmp_path: Path) -> None:
    source = """
fn tensor(path: str) -> f64[2, 2] {
    save(path, [[1.0f64, 2.0f64], [3.0f64, 4.0f64]])
    return load(path, zeros(2, 2, dtype=f64))
}

fn scalars(path: str) -> (i64, bool, f32) {
    save(path, (3, true, 2.5))
    return load(path, (0, false, 0.0))
}
"""
    path = tmp_path / "x.safetensors"
    back = call(source, "tensor", str(path))
    assert same_bits(back, np.array([[1.0, 2.0], [3.0, 4.0]]))
    assert list(safetensors.numpy.load_file(str(path))) == ["value"]
    assert call(source, "scalars", str(path)) == (3, True, np.float32(2.5))
    stored = safetensors.numpy.load_file(str(path))
    assert {name: str(t.dtype) for name, t in stored.items()} == {"0": "int64", "1": "bool", "2": "float32"}


def test_a_loaded_tensor_is_a_value_of_its_own(tmp_path: Path) -> None:
    source = """
fn f(path: str) -> (f32[3], f32[3]) {
    save(path, [1.0, 2.0, 3.0])
    let x = load(path, zeros(3))
    let y = x
    x[0] = 10.0
    return (x, y)
}
"""
    x, y = call(source, "f", str(tmp_path / "v.safetensors"))
    np.testing.assert_array_equal(x, [10.0, 2.0, 3.0])
    np.testing.assert_array_equal(y, [1.0, 2.0, 3.0])


def test_dlrun_saves_then_loads(tmp_path: Path, dlrun) -> None:
    source = tmp_path / "train.dl"
    source.write_text(
        textwrap.dedent("""
        struct Linear { w: f32[2, 2], b: f32[2] }

        fn main(path: str) {
            let model = Linear { w: [[1.0, 2.0], [3.0, 4.0]], b: [0.5, -0.5] }
            save(path, (model, 3))
            let (back, step) = load(path, (Linear { w: zeros(2, 2), b: zeros(2) }, 0))
            print(back.w @ back.b, step)
        }
        """)
    )
    path = tmp_path / "model.safetensors"
    assert dlrun(str(source), str(path)) == (0, "[-0.5 -0.5] 3\n", "")
    assert sorted(safetensors.numpy.load_file(str(path))) == ["0.b", "0.w", "1"]


def test_save_is_kept_in_derivative_code(tmp_path: Path) -> None:
    """`grad` prunes what its generated code does not read; a `save` whose result nobody reads stays."""
    source = """
fn loss(w: f32[2], path: str) -> f32 {
    let unread = save(path, w)
    return sum(w * w)
}

fn f(path: str) -> f32[2] {
    return grad(loss)([1.0, 2.0], path)
}
"""
    path = tmp_path / "w.safetensors"
    np.testing.assert_array_equal(call(source, "f", str(path)), [2.0, 4.0])
    np.testing.assert_array_equal(safetensors.numpy.load_file(str(path))["value"], [1.0, 2.0])


# ---------------------------------------------------------------------- checker


def checker_errors(body: str) -> list[tuple[str, str]]:
    typed = dl.lang.check(
        f"struct P {{ w: f32[2] }}\nfn f(path: str) {{\n{body}\n}}\n", f"<checkpoint-check-{next(_programs)}>.dl"
    )
    return [(d.code, d.message) for d in typed.errors]


def test_the_checker_types_load_as_like_and_rejects_other_values() -> None:
    assert checker_errors("let p: (P, f64[3]) = load(path, (P { w: zeros(2) }, zeros(3, dtype=f64)))") == []
    assert checker_errors("let x: f32 = load(path, 0.0)") == []
    assert checker_errors("save(path, (P { w: zeros(2) }, 1, true))") == []
    assert [code for code, _ in checker_errors("let p: P = load(path, zeros(2))")] == ["E0301"]
    assert checker_errors('save(path, (1.0, "text"))') == [
        ("E0311", "`save` takes a tensor, or a tuple or struct of tensors, found str in (f32, str)")
    ]
    assert checker_errors("let t = load(path, tape(1.0))") == [
        ("E0311", "`load` takes a tensor, or a tuple or struct of tensors, found tape(f32)")
    ]
    assert checker_errors("save(3, zeros(2))") == [("E0311", "`save` takes the file's path as a string, found i64")]
    assert [code for code, _ in checker_errors("let f = load(path, fn(x) => x)")] == ["E0311"]


# ---------------------------------------------------------------------- files that do not fit


def test_a_truncated_or_corrupt_file_is_a_diagnostic(tmp_path: Path) -> None:
    path = tmp_path / "state.safetensors"
    call(STATE, "save_state", str(path))
    data = path.read_bytes()
    for broken in (data[: len(data) - 5], data[:100], data[:4], b"", b"not a checkpoint at all, just text"):
        path.write_bytes(broken)
        code, message = run_error(STATE, "load_state", str(path))
        assert code == "E0521"
        assert message.startswith(f"load: cannot read checkpoint `{path}`: not a safetensors file, or truncated or")


def test_a_file_of_pytorch_pickle_or_numpy_says_what_it_is_and_how_to_convert_it(tmp_path: Path) -> None:
    """The first bytes tell them apart; nothing is unpickled."""
    path = tmp_path / "model.pt"
    advice = "convert it in Python with `safetensors.torch.save_file(state_dict, path)`"
    for data, what in (
        (
            b"PK\x03\x04" + bytes(60),
            f"a zip archive (`torch.save`'s: {advice}; an .npz archive is read with `load_npz`)",
        ),
        (
            b"\x80\x02}q\x00." + bytes(60),
            f"a Python pickle (`torch.save`'s before PyTorch 1.6, or `pickle.dump`'s): DL never unpickles; {advice}",
        ),
        (
            b"\x93NUMPY\x01\x00" + bytes(60),
            "a numpy .npy array: save it in an .npz archive (`np.savez`) and read it with `load_npz`",
        ),
    ):
        path.write_bytes(data)
        assert run_error(STATE, "load_state", str(path)) == (
            "E0521",
            f"load: cannot read checkpoint `{path}`: it is not safetensors but {what}",
        )


def test_an_empty_path_is_refused_as_empty(tmp_path: Path) -> None:
    for function in ("save_state", "load_state"):
        verb = function.split("_")[0]
        assert run_error(STATE, function, "") == (
            "E0521",
            f'`{verb}` takes the file\'s path, found the empty string ""',
        )


def test_a_missing_file_or_directory_is_a_diagnostic(tmp_path: Path) -> None:
    assert run_error(STATE, "load_state", str(tmp_path / "nowhere.safetensors")) == (
        "E0521",
        f"load: cannot read checkpoint `{tmp_path / 'nowhere.safetensors'}`: no such file or directory",
    )
    assert run_error(STATE, "save_state", str(tmp_path / "no" / "dir.safetensors")) == (
        "E0521",
        f"save: cannot write checkpoint `{tmp_path / 'no' / 'dir.safetensors'}`: no such file or directory",
    )
    assert run_error(STATE, "save_state", str(tmp_path)) == (
        "E0521",
        f"save: cannot write checkpoint `{tmp_path}`: it is a directory, not a regular file",
    )
    assert list(tmp_path.iterdir()) == []


def write(path: Path, tensors: dict[str, np.ndarray]) -> None:
    safetensors.numpy.save_file(tensors, str(path))


def fitting() -> dict[str, np.ndarray]:
    return {name: np.zeros(shape, dtype) for name, (dtype, shape) in NAMES.items()}


def changed(**tensors: np.ndarray) -> dict[str, np.ndarray]:
    """A fitting checkpoint with these tensors added or replaced (`_` in a keyword stands for `.`)."""
    return {**fitting(), **{name.replace("_", "."): tensor for name, tensor in tensors.items()}}


def without(prefix: str) -> dict[str, np.ndarray]:
    return {name: tensor for name, tensor in fitting().items() if not name.startswith(prefix)}


MISFITS = [
    (changed(layers_1_w=np.zeros((3, 2), "f4")), "tensor `layers.1.w` of {}: expected f32[2, 3]{}, found f32[3, 2]"),
    (changed(opt_1_1=np.zeros(2, np.int32)), "tensor `opt.1.1` of {}: expected i64[2]{}, found i32[2]"),
    (changed(mask=np.zeros(3, np.uint8)), "tensor `mask` of {}: expected bool[3]{}, found uint8[3]"),
    (changed(step=np.zeros(1, np.int64)), "tensor `step` of {}: expected i64[]{}, found i64[1]"),
    (without("counts"), "{} is missing tensor `counts`, which `like` has"),
    (without("layers.0"), "{} is missing tensors `layers.0.w`, `layers.0.b`, which `like` has"),
    (changed(layers_2_w=np.zeros(1, np.float32)), "{} has tensor `layers.2.w`, which `like` does not have"),
    (changed(z=np.zeros(1), extra=np.zeros(1)), "{} has tensors `extra`, `z`, which `like` does not have"),
    (
        {**without("counts"), "fc1.weight": np.zeros((3, 2), "f4")},
        "{} is missing tensor `counts`, which `like` has; it holds `fc1.weight` f32[3, 2] instead",
    ),
    (
        {**without("counts"), **{f"t{k}": np.zeros(1, "f4") for k in range(10)}},
        "{} is missing tensor `counts`, which `like` has; it holds `t0` f32[1], `t1` f32[1], `t2` f32[1], "
        "`t3` f32[1], `t4` f32[1], `t5` f32[1], `t6` f32[1], `t7` f32[1], and 2 more instead",
    ),
]  # fmt: skip


@pytest.mark.parametrize("tensors,message", MISFITS, ids=[m.split(",")[0][:40] for _, m in MISFITS])
def test_a_file_that_does_not_fit_like_names_the_tensor(tensors, message: str, tmp_path: Path) -> None:
    path = tmp_path / "state.safetensors"
    write(path, tensors)
    expected = "load: " + message.format(f"checkpoint `{path}`", " (as in `like`)")
    assert run_error(STATE, "load_state", str(path)) == ("E0521", expected)


def test_a_dtype_dl_does_not_have_is_a_diagnostic(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    import safetensors.torch

    path = tmp_path / "half.safetensors"
    safetensors.torch.save_file({"value": torch.zeros(3, dtype=torch.bfloat16)}, str(path))
    source = "fn f(path: str) -> f32[3] {\n    return load(path, zeros(3))\n}\n"
    assert run_error(source, "f", str(path)) == (
        "E0521",
        f"load: checkpoint `{path}` holds a tensor of dtype BF16, which DL does not have",
    )


def test_dlrun_reports_a_bad_checkpoint_with_the_call_stack(tmp_path: Path, dlrun) -> None:
    source = tmp_path / "resume.dl"
    source.write_text(
        "fn restore(path: str) -> f32[4] {\n    return load(path, zeros(4))\n}\n\n"
        "fn main(path: str) {\n    print(restore(path))\n}\n"
    )
    path = tmp_path / "w.safetensors"
    write(path, {"value": np.zeros(5, np.float32)})
    status, out, err = dlrun(str(source), str(path))
    assert (status, out) == (1, "")
    assert err.startswith(
        f"error[E0521]: load: tensor `value` of checkpoint `{path}`: expected f32[4] (as in `like`), found f32[5]\n"
    )
    assert "in `restore`" in err and "Traceback" not in err


# ---------------------------------------------------------------------- atomic writes


def previous_checkpoint(tmp_path: Path) -> tuple[Path, bytes]:
    path = tmp_path / "state.safetensors"
    write(path, fitting())
    return path, path.read_bytes()


def test_a_save_that_fails_half_way_leaves_the_previous_checkpoint(tmp_path: Path, monkeypatch) -> None:
    path, before = previous_checkpoint(tmp_path)
    real_fdopen = os.fdopen

    class DiesHalfWay:
        """The temporary file: writes half the data, then the process is interrupted."""

        def __init__(self, descriptor: int, mode: str) -> None:
            self.file = real_fdopen(descriptor, mode)

        def __enter__(self):
            return self

        def __exit__(self, *exception) -> None:
            self.file.close()

        def write(self, data: bytes) -> None:
            self.file.write(data[: len(data) // 2])
            self.file.flush()
            raise KeyboardInterrupt

    monkeypatch.setattr(os, "fdopen", DiesHalfWay)
    with pytest.raises(KeyboardInterrupt):
        call(STATE, "save_state", str(path))
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left behind
    assert all(not np.any(v) for v in leaves(call(STATE, "load_state", str(path))).values())


def test_a_full_disk_is_a_diagnostic_and_leaves_the_previous_checkpoint(tmp_path: Path, monkeypatch) -> None:
    path, before = previous_checkpoint(tmp_path)

    def full(descriptor: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    assert run_error(STATE, "save_state", str(path)) == (
        "E0521",
        f"save: cannot write checkpoint `{path}`: no space left on device",
    )
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_a_process_killed_mid_save_leaves_the_previous_checkpoint(tmp_path: Path) -> None:
    """SIGKILL after the new data is written but before the rename: the old file is untouched (the
    temporary file stays, hidden, beside it), it still loads, and the next save succeeds."""
    path, before = previous_checkpoint(tmp_path)
    script = textwrap.dedent(f"""
        import os, signal
        from dl import pipeline

        os.fsync = lambda descriptor: os.kill(os.getpid(), signal.SIGKILL)
        pipeline.call(pipeline.load("state.dl", {STATE!r}), "save_state", [{str(path)!r}])
    """)
    finished = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert finished.returncode == -signal.SIGKILL, finished.stderr.decode()
    assert path.read_bytes() == before
    leftovers = [p.name for p in tmp_path.iterdir() if p != path]
    assert len(leftovers) == 1 and leftovers[0].startswith(f".{path.name}.") and leftovers[0].endswith(".tmp")
    call(STATE, "save_state", str(path))
    assert same_bits(safetensors.numpy.load_file(str(path))["step"], np.int64(1234567890123))


def test_save_replaces_an_existing_checkpoint(tmp_path: Path) -> None:
    path, _ = previous_checkpoint(tmp_path)
    source = "fn f(path: str, x: f32[2]) -> f32[2] {\n    save(path, x)\n    return load(path, x)\n}\n"
    np.testing.assert_array_equal(call(source, "f", str(path), np.array([1.0, 2.0], np.float32)), [1.0, 2.0])
    np.testing.assert_array_equal(call(source, "f", str(path), np.array([3.0, 4.0], np.float32)), [3.0, 4.0])
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


PARTIAL = (
    STATE
    + """
fn load_some(path: str) -> State {
    return load(path, like(), strict=false)
}
"""
)


def test_a_load_not_strict_reads_what_the_file_holds_and_keeps_like_for_the_rest(tmp_path: Path) -> None:
    """torch's `load_state_dict(strict=False)`: a pretrained part of a larger model. The tensors the file holds
    are read (and checked), the others keep `like`'s values, and the file's others are left out."""
    rng = np.random.default_rng(1)
    first = {"layers.0.w": rng.standard_normal((2, 3)).astype("f4"), "layers.0.b": rng.standard_normal(3)}
    path = tmp_path / "backbone.safetensors"
    write(path, {**first, "head.weight": np.ones((4, 4), "f4")})
    loaded = leaves(call(PARTIAL, "load_some", str(path)))
    expected = {**fitting(), **first}  # `like()` is zeros
    assert sorted(loaded) == sorted(expected)
    for name, tensor in expected.items():
        assert same_bits(loaded[name], tensor), name
    write(path, {**first, "layers.1.w": np.zeros((3, 2), "f4")})  # a tensor it holds must still fit
    expected_misfit = (
        f"load: tensor `layers.1.w` of checkpoint `{path}`: expected f32[2, 3] (as in `like`), found f32[3, 2]"
    )
    assert run_error(PARTIAL, "load_some", str(path)) == ("E0521", expected_misfit)
    write(path, {"fc1.weight": np.zeros((3, 2), "f4")})  # none of `like`'s names: not what was meant
    code, message = run_error(PARTIAL, "load_some", str(path))
    assert code == "E0521" and "is missing tensors `layers.0.w`" in message and "holds `fc1.weight`" in message


def test_strict_is_a_bool() -> None:
    typed = dl.lang.check(STATE + 'fn bad(path: str) -> State { return load(path, like(), strict="no") }')
    expected = ("E0301", "`load`: `strict=` takes `true` or `false`, found str")
    assert [(d.code, d.message) for d in typed.errors] == [expected]
