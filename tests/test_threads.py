"""`--threads N` (runtime/threads.py): large matrix products run on N threads and give one thread's values
(to a float's rounding: OpenBLAS's kernels differ by CPU), small ones stay on one, a busy machine defaults
to one, and a count that is not a whole number of threads is a usage error."""

from __future__ import annotations

import numpy as np
import pytest
from dl import pipeline
from dl.runtime import threads
from dl.runtime.threads import Threads


@pytest.fixture
def restored():
    saved = Threads.count
    yield
    Threads.count = saved


class Counting:
    """Stands in for OpenBLAS's setter: the thread counts it was given, in order."""

    def __init__(self, real) -> None:
        self.real, self.given = real, []

    def __call__(self, count: int) -> None:
        self.given.append(count)
        self.real(count)


SOURCE = """
fn product(a: f32[N, K], b: f32[K, M]) -> f32[N, M] {
    return a @ b
}
fn main() {}
"""


@pytest.mark.parametrize("backend", ["interp", "llvm"])
def test_large_products_run_on_the_threads_asked_for_with_one_threads_values(
    tmp_path, monkeypatch, restored, backend: str
) -> None:
    (tmp_path / "product.dl").write_text(SOURCE)
    _, typed = pipeline.prepare(pipeline.load(str(tmp_path / "product.dl")))
    prepared = pipeline.on_backend(backend, typed)
    rng = np.random.default_rng(0)
    large = rng.standard_normal((2, 512, 512)).astype(np.float32)
    small = rng.standard_normal((2, 64, 64)).astype(np.float32)
    threads.use(1)
    alone = [prepared.call("product", list(pair)) for pair in (large, small)]
    threads.use(2)
    assert Threads.setter is not None, "numpy's OpenBLAS was not found"
    counting = Counting(Threads.setter)
    monkeypatch.setattr(Threads, "setter", counting)
    together = prepared.call("product", list(large))
    assert counting.given == [2, 1]  # raised for the product, lowered after it
    # OpenBLAS picks its kernels by CPU: on some (an AMD EPYC's) two threads sum a few elements of this product
    # in another order than one thread does, so the values agree to f32 sums of 512 terms, not bit for bit
    np.testing.assert_allclose(together, alone[0], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(together, large[0] @ large[1], rtol=1e-4, atol=1e-3)
    counting.given.clear()
    small_again = prepared.call("product", list(small))
    assert small_again.tobytes() == alone[1].tobytes()
    if backend == "interp":
        assert counting.given == []  # 64^3 multiply-adds: below LARGE, one thread


def test_a_busy_machine_defaults_to_one_thread(monkeypatch) -> None:
    monkeypatch.setattr(threads, "available_cores", lambda: 4)
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (4.5, 4.0, 4.0))
    assert threads.default_count() == 1
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (0.5, 0.4, 0.4))
    assert threads.default_count() == 4


@pytest.mark.parametrize("given", ["0", "-1", "two", "1.5"])
def test_threads_must_be_a_whole_number(dlrun, given: str) -> None:
    status, out, err = dlrun("--threads", given, "examples/train.dl")
    assert (status, out) == (2, "")
    assert f"argument --threads: expected a whole number of threads, 1 or more, found '{given}'" in err


@pytest.mark.parametrize("given", ["1025", "100000"])
def test_threads_beyond_any_machine_are_a_usage_error(dlrun, given: str) -> None:
    status, out, err = dlrun("--threads", given, "examples/train.dl")
    assert (status, out) == (2, "")
    assert err.endswith(f"error: argument --threads: expected at most 1024 threads, found {given}\n")


def test_threads_apply_to_a_run(dlrun, tmp_path, restored) -> None:
    (tmp_path / "hello.dl").write_text('fn main() { print("hello") }\n')
    assert dlrun("--threads", "3", str(tmp_path / "hello.dl"))[:2] == (0, "hello\n")
    assert Threads.count == 3
