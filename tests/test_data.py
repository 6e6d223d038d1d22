"""The data built-ins (`digits`, `permutation`, `batches`, `load_csv`, `load_npz`, `text_corpus`, `chars`)
and stdlib/data.dl (`split`, `standardize`), against numpy and Python's own answers.

The `check_*` functions are the primitive-level checks; tests/test_primitives.py calls them from
the tests its `PRIM_TESTS` table names, so every primitive is covered there. The `test_*`
functions here cover whole programs, the checker's types and diagnostics, and the stdlib module.
"""

from __future__ import annotations

import gzip
import hashlib
from importlib import resources
from pathlib import Path

import dl.lang
import numpy as np
import pytest
from dl import pipeline
from dl.lang.diagnostics import DiagnosticError
from dlharness import dl_error, dl_eval, dl_main

DIGITS_PER_CLASS = [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]  # the UCI test set's label counts


def run_time_error(expr: str, *args) -> str:
    """The message of the one E0513 diagnostic evaluating `expr` raises."""
    (diagnostic,) = dl_error(expr, *args).diagnostics
    assert diagnostic.code == "E0513", diagnostic
    return diagnostic.message


def checker_errors(source: str) -> list[tuple[str, str]]:
    """(code, message) of each error the checker reports for a program."""
    typed = dl.lang.check(source, "<data-check>.dl")
    return [(d.code, d.message) for d in typed.errors]


def corpus_text() -> bytes:
    """The shipped corpus, read here without DL."""
    return gzip.decompress((Path(__file__).resolve().parent.parent / "stdlib" / "data" / "corpus.txt.gz").read_bytes())


# ---------------------------------------------------------------------- digits


def check_digits() -> None:
    images, labels = dl_eval("digits()")
    assert images.shape == (1797, 64) and images.dtype == np.float32
    assert labels.shape == (1797,) and labels.dtype == np.int64
    assert images.min() == 0.0 and images.max() == 1.0
    np.testing.assert_array_equal(images * 16, np.round(images * 16))  # sixteenths: the counts 0..16, scaled
    assert np.bincount(labels).tolist() == DIGITS_PER_CLASS
    again_images, again_labels = dl_eval("digits()")
    np.testing.assert_array_equal(images, again_images)
    np.testing.assert_array_equal(labels, again_labels)
    shipped = resources.files("dl.stdlib").joinpath("data/digits.npz")
    with shipped.open("rb") as file, np.load(file, allow_pickle=False) as archive:
        np.testing.assert_array_equal(images, archive["images"].astype(np.float32) / 16)
        np.testing.assert_array_equal(labels, archive["labels"])
    images[0, 0] = 5.0  # a value, not a view of the cached dataset
    assert dl_eval("digits()")[0][0, 0] == 0.0


def test_digits_ship_as_package_data_with_their_licence() -> None:
    folder = resources.files("dl.stdlib").joinpath("data")
    assert folder.joinpath("digits.npz").is_file()
    readme = folder.joinpath("README.md").read_text(encoding="utf-8")
    assert "CC BY 4.0" in readme and "Alpaydin" in readme and "Kaynak" in readme


def test_digits_have_a_static_type() -> None:
    source = "fn main() {\n    let d: (f32[1797, 64], i64[1797]) = digits()\n    print(len(d[0]))\n}\n"
    assert dl_main(source) == "1797\n"
    errors = checker_errors("fn main() {\n    let d: (f32[1797, 32], i64[1797]) = digits()\n}\n")
    assert [code for code, _ in errors] == ["E0301"]
    assert "(f32[1797, 64], i64[1797])" in errors[0][1]


# ---------------------------------------------------------------------- permutation


def check_permutation() -> None:
    for n, seed in [(0, 0), (1, 5), (10, 3), (100, 12345)]:
        result = dl_eval("permutation(a, seed=b)", n, seed)
        assert result.dtype == np.int64 and result.shape == (n,)
        np.testing.assert_array_equal(np.sort(result), np.arange(n))
        np.testing.assert_array_equal(result, np.random.default_rng(seed).permutation(n))
        np.testing.assert_array_equal(result, dl_eval("permutation(a, seed=b)", n, seed))
    assert not np.array_equal(dl_eval("permutation(50, seed=1)"), dl_eval("permutation(50, seed=2)"))
    assert "negative" in run_time_error("permutation(a)", -1)
    assert "seed=" in run_time_error("permutation(3, seed=a)", -2)


def check_permutation_default_generator() -> None:
    """Without `seed=`, as `randn`: the run's generator, seeded 0 when the run starts."""
    printed = dl_main(
        "fn main() {\n"
        "    let a = permutation(20)\n"
        "    let b = permutation(20)\n"
        "    print(sum(a == permutation(20, seed=0)) == 20, sum(a == b) == 20)\n"
        "}\n"
    )
    assert printed == "true false\n"


# ---------------------------------------------------------------------- batches


def check_batches_shapes_and_remainder() -> None:
    x = np.arange(23 * 3, dtype=np.float32).reshape(23, 3)
    cut = dl_eval("batches(a, 5)", x)
    assert cut.shape == (4, 5, 3) and cut.dtype == np.float32
    np.testing.assert_array_equal(cut, x[:20].reshape(4, 5, 3))  # in order; the last 3 rows are dropped
    xs, ys = dl_eval("batches((a, b), 4)", x, np.arange(23))
    assert xs.shape == (5, 4, 3) and ys.shape == (5, 4)
    np.testing.assert_array_equal(ys, np.arange(20).reshape(5, 4))
    assert dl_eval("batches(a, 30)", x).shape == (0, 30, 3)
    assert dl_eval("batches(a, 1)", np.arange(3)).shape == (3, 1)


def check_batches_shuffle() -> None:
    x = np.arange(50, dtype=np.int64)
    xs, ys = dl_eval("batches((a, b), 8, shuffle=true, seed=4)", x, x * 2.0)
    order = np.random.default_rng(4).permutation(50)
    np.testing.assert_array_equal(xs, order[:48].reshape(6, 8))
    np.testing.assert_array_equal(ys, 2.0 * xs)  # one permutation for every tensor
    again = dl_eval("batches(a, 8, shuffle=true, seed=4)", x)
    np.testing.assert_array_equal(again, xs)
    other = dl_eval("batches(a, 8, shuffle=true, seed=5)", x)
    assert not np.array_equal(other, xs)
    np.testing.assert_array_equal(dl_eval("batches(a, 8, seed=4)", x), x[:48].reshape(6, 8))  # no shuffle


def check_batches_errors() -> None:
    assert "one leading size" in run_time_error("batches((a, b), 2)", np.zeros(4), np.zeros(5))
    assert "batch size of 1 or more" in run_time_error("batches(a, b)", np.zeros(4), 0)
    assert "negative" in run_time_error("batches(a, b)", np.zeros(4), -2)
    assert "rank 1 or more" in run_time_error("batches(a, 2)", 3.0)
    assert "true` or `false" in run_time_error("batches(a, 2, shuffle=b)", np.zeros(4), 1)
    errors = checker_errors(
        "fn main() {\n"
        "    let a = batches((zeros(3), zeros(4)), 2)\n"
        "    let b = batches(zeros(4), 0)\n"
        "    let c = batches(1.0, 2)\n"
        "    let d = batches(zeros(4), 2, seed=0.5)\n"
        "}\n"
    )
    assert [code for code, _ in errors] == ["E0316", "E0307", "E0309", "E0301"]


def test_batches_types() -> None:
    typed = dl.lang.check(
        "fn f(x: f32[N, 3], y: i64[N], n: i64) {\n"
        "    let a: f32[4, 5, 3] = batches(zeros(23, 3), 5)\n"
        "    let b: (f32[_, 8, 3], i64[_, 8]) = batches((x, y), 8, shuffle=true, seed=1)\n"
        "    let c: f32[_, _, 3] = batches(x, n)\n"
        "    return 0\n"
        "}\n",
        "<batches-types>.dl",
    )
    assert not typed.errors, typed.errors


def test_for_over_batches_in_a_program() -> None:
    source = """
fn main() {
    let (images, labels) = digits()
    let seen = 0
    let total = 0
    for epoch in 0..2 {
        for (x, y) in batches((images, labels), 64, shuffle=true, seed=epoch) {
            let rows: f32[64, 64] = x
            seen += len(y)
            total += sum(y)
        }
    }
    print(seen, total)
}
"""
    labels = dl_eval("digits()")[1]
    expected = sum(int(labels[np.random.default_rng(epoch).permutation(1797)[:1792]].sum()) for epoch in range(2))
    assert dl_main(source) == f"{2 * 1792} {expected}\n"


# ---------------------------------------------------------------------- files


def check_load_csv(tmp_path: Path) -> None:
    values = np.random.default_rng(0).standard_normal((7, 4)).astype(np.float32)
    plain = tmp_path / "plain.csv"
    np.savetxt(plain, values, delimiter=",")
    loaded = dl_eval("load_csv(a)", str(plain))
    assert loaded.dtype == np.float32 and loaded.shape == (7, 4)
    np.testing.assert_allclose(loaded, values, rtol=1e-6)
    headed = tmp_path / "headed.csv"
    np.savetxt(headed, values, delimiter=",", header="a,b,c,d", comments="")
    np.testing.assert_allclose(dl_eval("load_csv(a, skip_header=true)", str(headed)), values, rtol=1e-6)
    spaced = tmp_path / "spaced.csv"
    spaced.write_text("1, 2.5\n\n 3 ,-4e1\n")  # spaces around values and blank lines are allowed
    np.testing.assert_array_equal(dl_eval("load_csv(a)", str(spaced)), [[1.0, 2.5], [3.0, -40.0]])


def check_load_csv_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("x,y\n1,2\n3,oops\n")
    assert run_time_error("load_csv(a)", str(bad)) == (
        f'load_csv: "{bad}" line 1: cannot read "x" as a number; '
        "if line 1 is a header, skip it with `load_csv(path, skip_header=true)`"
    )
    assert run_time_error("load_csv(a, skip_header=true)", str(bad)) == (
        f'load_csv: "{bad}" line 3: cannot read "oops" as a number; `load_csv` reads numbers only: write column 2\'s '
        "text as numbers (a category as its index: 0, 1, 2, ...) before loading"
    )
    categories = tmp_path / "iris.csv"
    categories.write_text("5.1,3.5,setosa\n4.9,3.0,setosa\n")  # no header: data whose last column is text
    assert run_time_error("load_csv(a)", str(categories)).endswith(
        'line 1: cannot read "setosa" as a number; `load_csv` reads numbers only: write column 3\'s text as numbers '
        "(a category as its index: 0, 1, 2, ...) before loading"
    )
    spaced_header = tmp_path / "names.csv"
    spaced_header.write_text("height, weight\n1.5, 60\n")
    assert run_time_error("load_csv(a)", str(spaced_header)).endswith(
        "if line 1 is a header, skip it with `load_csv(path, skip_header=true)`"
    )
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("1,2,3\n4,5,6\n7,8\n")
    assert run_time_error("load_csv(a)", str(ragged)).endswith("line 3 has 2 values, but line 1 has 3")
    commented = tmp_path / "commented.csv"
    commented.write_text("1,2,3\n# a note\n4,5,6\n")
    message = run_time_error("load_csv(a)", str(commented))
    assert message.endswith("line 2 has 1 value, but line 1 has 3; a CSV file has no comments")
    empty = tmp_path / "empty.csv"
    empty.write_text("a,b\n")
    assert "no rows of numbers" in run_time_error("load_csv(a, skip_header=true)", str(empty))
    missing = tmp_path / "missing.csv"
    assert run_time_error("load_csv(a)", str(missing)) == f'load_csv: cannot read "{missing}": no such file'
    assert "directory" in run_time_error("load_csv(a)", str(tmp_path))
    assert "string" in run_time_error("load_csv(a)", 3)
    beyond_f32 = tmp_path / "beyond.csv"
    beyond_f32.write_text("1,2\n\n3.5e38,1e-50\n")  # f32 holds 3.4e38: numpy would read inf; 1e-50 rounds to 0
    assert run_time_error("load_csv(a)", str(beyond_f32)).endswith(
        "line 3, column 1: 3.5e+38 is beyond the range of f32; scale the column down before loading"
    )
    beyond_f64 = tmp_path / "huge.csv"
    beyond_f64.write_text("1,1e400\n")
    assert run_time_error("load_csv(a)", str(beyond_f64)).endswith('line 1: "1e400" is beyond the range of numbers')
    missing_values = tmp_path / "missing.csv"
    missing_values.write_text("1,2,3\n4,,6\n")
    assert run_time_error("load_csv(a)", str(missing_values)).endswith(
        'line 2: cannot read "" as a number: column 2 has no value there; fill the missing values before loading, '
        "or write them as `nan` (which `load_csv` reads)"
    )
    floats = tmp_path / "floats.csv"
    floats.write_text("1.5e30,3e10\n6.02214076e23,16777217.0\n")  # floats written as floats round, as f32 does
    np.testing.assert_array_equal(
        dl_eval("load_csv(a)", str(floats)), np.array([[1.5e30, 3e10], [6.02214076e23, 16777217.0]], np.float32)
    )
    tabs = tmp_path / "table.tsv"
    tabs.write_text("1\t2.5\n3\t4\n")
    np.testing.assert_array_equal(dl_eval('load_csv(a, delimiter="\\t")', str(tabs)), [[1.0, 2.5], [3.0, 4.0]])
    assert run_time_error("load_csv(a)", str(tabs)).endswith(
        'line 1: cannot read "1\t2.5" as a number; its values look separated by `\\t`: '
        '`load_csv(path, delimiter="\\t")`'
    )
    assert run_time_error('load_csv(a, delimiter=";;")', str(tabs)) == (
        '`load_csv` takes `delimiter=` as one character (`","`, `"\\t"`), found ";;"'
    )
    ids = tmp_path / "ids.csv"
    ids.write_text("16777216,0.1\n16777217,1\n")  # f32 holds every integer to 2**24, not 2**24 + 1
    assert run_time_error("load_csv(a)", str(ids)).endswith(
        "line 2, column 1: 16777217 is an integer f32 cannot hold exactly (it would be 16777216); `load_csv` reads "
        "f32: write such a column to an .npz archive and read it with `load_npz(path, name, dtype=i64)`"
    )
    special = tmp_path / "special.csv"
    special.write_text("\ufeffnan,inf\n-inf,1e-50\n")  # a spreadsheet's byte order mark; nan and inf as written
    loaded = dl_eval("load_csv(a)", str(special))
    np.testing.assert_array_equal(loaded, np.array([[np.nan, np.inf], [-np.inf, 0.0]], dtype=np.float32))


def check_load_npz(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    path = tmp_path / "arrays.npz"
    matrix = rng.standard_normal((5, 3))
    cube = rng.standard_normal((2, 3, 4)).astype(np.float32)
    labels = np.array([3, 1, 4], dtype=np.uint8)
    np.savez(path, matrix=matrix, cube=cube, labels=labels, flags=np.array([True, False]))
    loaded = dl_eval('load_npz(a, "matrix")', str(path))
    assert loaded.dtype == np.float32
    np.testing.assert_allclose(loaded, matrix.astype(np.float32))
    np.testing.assert_array_equal(dl_eval('load_npz(a, "matrix", dtype=f64)', str(path)), matrix)
    np.testing.assert_array_equal(dl_eval('load_npz(a, "cube", rank=3)', str(path)), cube)
    as_i64 = dl_eval('load_npz(a, "labels", dtype=i64, rank=1)', str(path))
    assert as_i64.dtype == np.int64 and as_i64.tolist() == [3, 1, 4]
    assert dl_eval('load_npz(a, "flags", dtype=bool, rank=1)', str(path)).tolist() == [True, False]
    whole = tmp_path / "whole.npz"
    np.savez_compressed(whole, values=np.array([1.0, 2.0]))
    assert dl_eval('load_npz(a, "values", dtype=i32, rank=1)', str(whole)).dtype == np.int32


def check_load_npz_errors(tmp_path: Path) -> None:
    path = tmp_path / "arrays.npz"
    np.savez(path, matrix=np.zeros((2, 2)), half=np.array([0.5]), big=np.array([2**40]), words=np.array(["a"]))
    message = run_time_error('load_npz(a, "cube")', str(path))
    assert message == f'load_npz: "{path}" has no array "cube" (its arrays: "matrix", "half", "big", "words")'
    message = run_time_error('load_npz(a, "matrix", rank=3)', str(path))
    assert message.endswith("has rank 2 (shape [2, 2]), not 3; write `rank=2`")
    assert "not whole numbers" in run_time_error('load_npz(a, "half", dtype=i64, rank=1)', str(path))
    assert "out of the range of i32" in run_time_error('load_npz(a, "big", dtype=i32, rank=1)', str(path))
    assert "cannot be read as f32" in run_time_error('load_npz(a, "words", rank=1)', str(path))
    assert "cannot be read as bool" in run_time_error('load_npz(a, "half", dtype=bool, rank=1)', str(path))
    huge = tmp_path / "huge.npz"
    np.savez(huge, values=np.array([1.0, 1e300, -np.inf]))
    assert run_time_error('load_npz(a, "values", rank=1)', str(huge)) == (
        f'load_npz: array "values" in "{huge}" holds 1e+300, beyond the range of f32; load it with `dtype=f64`'
    )
    integers = tmp_path / "integers.npz"
    np.savez(
        integers, small=np.array([-(2**24), 2**24, 7]), id=np.array([[16777217]], np.int32), big=np.array([2**60 + 1])
    )
    assert dl_eval('load_npz(a, "small", rank=1)', str(integers)).tolist() == [-(2**24), 2**24, 7]
    assert run_time_error('load_npz(a, "id", rank=2)', str(integers)) == (
        f'load_npz: array "id" in "{integers}" holds 16777217, which f32 cannot hold exactly (it would be '
        "16777216); load it with `dtype=f64`"
    )
    assert dl_eval('load_npz(a, "id", rank=2, dtype=f64)', str(integers)).tolist() == [[16777217.0]]
    assert run_time_error('load_npz(a, "big", rank=1, dtype=f64)', str(integers)).endswith(
        "holds 1152921504606846977, which f64 cannot hold exactly (it would be 1152921504606846976); "
        "load it with `dtype=i64`"
    )
    missing = tmp_path / "missing.npz"
    assert run_time_error('load_npz(a, "x")', str(missing)) == f'load_npz: cannot read "{missing}": no such file'
    pickled = tmp_path / "objects.npz"
    np.savez(pickled, items=np.array([{"a": 1}, None], dtype=object))
    assert "Python objects" in run_time_error('load_npz(a, "items", rank=1)', str(pickled))
    single = tmp_path / "single.npy"
    np.save(single, np.zeros(3))
    assert "single .npy array" in run_time_error('load_npz(a, "x")', str(single))
    text = tmp_path / "text.npz"
    text.write_text("not an archive")
    assert "not a numpy .npz archive" in run_time_error('load_npz(a, "x")', str(text))


def test_file_loaders_are_typed_before_running() -> None:
    typed = dl.lang.check(
        "fn f(path: str) {\n"
        "    let a: f32[_, _] = load_csv(path, skip_header=true)\n"
        '    let b: i64[_, _, _] = load_npz(path, "x", dtype=i64, rank=3)\n'
        '    let c: f32[_, _] = load_npz(path, "x")\n'
        '    let d: f32 = load_npz(path, "x", rank=0)\n'
        "    return 0\n"
        "}\n",
        "<loader-types>.dl",
    )
    assert not typed.errors, typed.errors
    errors = checker_errors(
        "fn main() {\n"
        "    let a = load_csv(3)\n"
        '    let b = load_npz("a.npz", "x", rank=-1)\n'
        '    let c = load_npz("a.npz", "x", dtype=3)\n'
        '    let d = load_csv("a.csv", skip_header=1)\n'
        "}\n"
    )
    assert [code for code, _ in errors] == ["E0301", "E0307", "E0301", "E0301"]


def test_a_missing_file_is_a_diagnostic_at_the_call(dlrun, tmp_path: Path) -> None:
    program = tmp_path / "main.dl"
    program.write_text('fn main() {\n    let x = load_csv("no-such-file.csv")\n    print(x)\n}\n')
    status, out, err = dlrun(str(program))
    assert status == 1 and out == ""
    assert err.startswith('error[E0513]: load_csv: cannot read "no-such-file.csv": no such file\n')
    assert f"--> {program}:2:13" in err
    assert "Traceback" not in err


# ---------------------------------------------------------------------- text


# The corpus is a frozen copy (stdlib/data/README.md): the same bytes on every Python, whose own help topics differ.
CORPUS_SHA256 = "37d06970fc926e60c16dff401e441b84752446a36b6b64516c229fdec77e992c"


def check_text_corpus() -> None:
    text = corpus_text()
    assert len(text) == 466_117 and hashlib.sha256(text).hexdigest() == CORPUS_SHA256
    codes = dl_eval("text_corpus(1000)")
    assert codes.dtype == np.int64 and codes.shape == (1000,)
    assert bytes(codes.astype(np.uint8)) == text[:1000]
    np.testing.assert_array_equal(codes, dl_eval("text_corpus(1000)"))
    large = dl_eval("text_corpus(100000)")
    assert large.min() >= 0 and large.max() <= 255
    assert np.mean(large < 128) > 0.99  # English text: almost all ASCII
    assert dl_eval("text_corpus(0)").shape == (0,)
    assert "fewer than" in run_time_error("text_corpus(a)", len(text) + 1)


def check_chars() -> None:
    assert dl_eval("chars([72, 105, 33])") == "Hi!"
    assert dl_eval("chars(65)") == "A"
    assert dl_eval("chars(a)", np.zeros(0, dtype=np.int64)) == ""
    assert dl_eval("chars([72, 255, 105])") == "H\ufffdi"  # a byte that is not UTF-8 is replaced
    assert dl_eval("chars([195, 169])") == "é"  # UTF-8 sequences decode
    assert dl_eval("chars(text_corpus(300))") == corpus_text()[:300].decode("utf-8", errors="replace")
    assert "0..255" in run_time_error("chars([65, 256])")
    assert "0..255" in run_time_error("chars([-1])")
    errors = checker_errors("fn main() {\n    let a = chars([1.0])\n    let b = chars(zeros(2, 2, dtype=i64))\n}\n")
    assert [code for code, _ in errors] == ["E0320", "E0309"]


def test_chars_prints_text_samples() -> None:
    assert dl_main('fn main() {\n    let s: str = chars([68, 76])\n    print(s, "ok")\n}\n') == "DL ok\n"


# ---------------------------------------------------------------------- stdlib/data.dl


def data_program(body: str) -> str:
    return f"import data\n\n{body}"


def test_split_sizes_and_disjointness() -> None:
    source = data_program(
        "fn f(x: f32[N, 3], y: i64[N], fraction: f32, seed: i64) {\n    return data.split((x, y), fraction, seed)\n}\n"
    )
    x = np.arange(30, dtype=np.float32).reshape(10, 3)
    y = np.arange(10, dtype=np.int64)
    program = pipeline.load("<split>.dl", source)
    (x_train, y_train), (x_test, y_test) = pipeline.call(program, "f", [x, y, np.float32(0.7), 3])
    assert x_train.shape == (7, 3) and y_train.shape == (7,) and x_test.shape == (3, 3) and y_test.shape == (3,)
    assert sorted([*y_train, *y_test]) == list(range(10))  # disjoint, and together all rows
    np.testing.assert_array_equal(x_train[:, 0], 3.0 * y_train)  # rows stay with their labels
    np.testing.assert_array_equal(x_test[:, 0], 3.0 * y_test)
    np.testing.assert_array_equal(y_train, np.random.default_rng(3).permutation(10)[:7])
    again = pipeline.call(program, "f", [x, y, np.float32(0.7), 3])
    np.testing.assert_array_equal(again[0][1], y_train)
    (_, everything), (_, nothing) = pipeline.call(program, "f", [x, y, np.float32(1.0), 0])
    assert everything.shape == (10,) and nothing.shape == (0,)
    with pytest.raises(DiagnosticError) as failure:
        pipeline.call(program, "f", [x, y, np.float32(1.5), 0])
    assert failure.value.diagnostics[0].code == "E0502"


def test_split_of_digits_in_a_program() -> None:
    source = data_program(
        "fn main() {\n"
        "    let ((x_train, y_train), (x_test, y_test)) = data.split(digits(), 0.8, 0)\n"
        "    let rows: f32[_, 64] = x_train\n"
        "    print(len(x_train), len(y_train), len(x_test), len(y_test))\n"
        "}\n"
    )
    assert dl_main(source) == "1437 1437 360 360\n"


def test_standardize_matches_numpy() -> None:
    source = data_program("fn f(x: f32[N, D]) {\n    return data.standardize(x)\n}\n")
    x = np.random.default_rng(2).standard_normal((40, 5)).astype(np.float32) * 3 + 1
    x[:, 2] = 7.0  # a constant column
    z, mean, std = pipeline.call(pipeline.load("<standardize>.dl", source), "f", [x])
    expected_std = x.std(axis=0)
    expected_std[2] = 1.0
    np.testing.assert_allclose(mean, x.mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(std, expected_std, rtol=1e-5)
    np.testing.assert_allclose(z, (x - x.mean(axis=0)) / expected_std, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(z[:, [0, 1, 3, 4]].std(axis=0), 1.0, rtol=1e-4)
    assert np.all(z[:, 2] == 0.0)
