"""runtime/memory.py: after `keep_freed_memory`, an array the size of a training step's activations reuses
the memory the last one freed, instead of faulting in fresh pages from the kernel."""

from __future__ import annotations

import subprocess
import sys

import pytest

FAULTS = """
import resource, sys
import numpy as np
from dl.runtime import memory
if sys.argv[1] == "kept":
    assert memory.keep_freed_memory() and memory.keep_freed_memory()  # once, then nothing more to do
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
def step():  # a training step: six 512 KB arrays made and written, then dropped together
    kept = [np.ones(1 << 17, np.float32) for _ in range(6)]
for _ in range(3):  # warm: the heap has grown to what a step needs
    step()
before = faults()
for _ in range(20):
    step()
print(faults() - before)
"""


def page_faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", FAULTS, mode], capture_output=True, text=True, check=True).stdout
    return int(out)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_freed_arrays_are_reused_without_page_faults() -> None:
    # glibc's own settings give the freed memory back, and each step faults much of it in again
    assert page_faults("default") >= 20 * 128
    assert page_faults("kept") < 20


TRAINING_STEP = """
import nn
import optim
struct MLP { w1: f32[8, 32], b1: f32[32], w2: f32[32, 3], b2: f32[3] }
fn loss(m: MLP, x: f32[B, 8], y: i64[B]) -> f32 {
    return nn.cross_entropy(nn.relu(x @ m.w1 + m.b1) @ m.w2 + m.b2, y)
}
fn steps(m: MLP, x: f32[B, 8], y: i64[B], n: i64) -> f32 {
    let state = optim.adam_init(m)
    let total = 0.0
    for i in 0..n {
        let (value, g) = value_and_grad(loss)(m, x, y)
        (m, state) = optim.adam(m, g, state, lr=0.01)
        total += value
    }
    return total
}
fn run() -> f32 {
    let m = MLP {
        w1: sin(float(reshape(arange(256), 8, 32))),
        b1: zeros(32),
        w2: cos(float(reshape(arange(96), 32, 3))),
        b2: zeros(3),
    }
    return steps(m, cos(float(reshape(arange(128), 16, 8)) * 0.3), arange(16) % 3, 5)
}
"""


def test_a_training_step_on_the_interpreter_leaves_no_reference_cycles() -> None:
    """Everything a step makes is freed by reference counting when the step is done with it: nothing waits for
    the cycle collector, which would keep a step's gradient arrays alive into the next steps (in a
    benchmark that turns the collector off, an epoch at width 2048 faulted in 13 MB of fresh pages)."""
    import gc

    import numpy as np
    from dl import pipeline

    program = pipeline.load("steps.dl", TRAINING_STEP)
    _, typed = pipeline.prepare(program, (("run", ()),))
    prepared = pipeline.on_backend("interp", typed)
    first = prepared.call("run", [])  # warm: everything made once is made
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    enabled = gc.isenabled()
    gc.disable()
    try:
        again = prepared.call("run", [])
        gc.collect()
        cyclic = [type(o).__name__ for o in gc.garbage]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if enabled:
            gc.enable()
    assert again == first and np.isfinite(first)
    assert cyclic == []


RELEASED = """
fn steps(x: f32[N]) -> f32 {
    let a = x * 2.0
    let s = sum(a)
    let b = x * 3.0
    let t = sum(b)
    let c = x * 4.0
    return s + t + sum(c)
}

fn handed(x: f32[N]) -> f32 {
    let a = x * 3.0
    return tail(a, x)  # the last read of `a`: the caller does not hold it while `tail` runs
}

fn tail(a, x) {
    let s = sum(a)  # and `tail` lets go of it here, before it makes `b`
    let b = x * 2.0
    return s + sum(b)
}

fn looped(x: f32[N]) -> f32 {
    let kept = x * 2.0  # read on every pass of the loop, and after it: kept to the end
    let total = 0.0
    let i = 0
    while i < 3 {
        let made = kept + float(i)
        total += sum(made)
        i += 1
    }
    let scale = fn(v) => v * sum(kept)  # captured when the closure is made
    if total > 0.0 {
        total += scale(1.0)
    }
    return total + sum(kept)
}
"""


def test_a_function_lets_go_of_each_local_after_its_last_use() -> None:
    """interp/compile.py `function_block`: a tensor no later statement names is freed there, as PyTorch frees
    an intermediate, so `steps` holds one of its three 4 MB temporaries at a time, not all three at its end.
    A local's last read hands the value over (interp/lifetimes.py): `handed`'s `a` is freed inside `tail`, not
    when `tail` returns. Locals read in a later loop pass, after a loop or by a closure are kept as long as
    they are read."""
    import tracemalloc

    import numpy as np
    from dl import pipeline

    x = np.linspace(0.0, 1.0, 1 << 20, dtype=np.float32)
    program = pipeline.load("released.dl", RELEASED)
    calls = tuple((name, (pipeline.value_type(x),)) for name in ("steps", "handed", "looped"))
    _, typed = pipeline.prepare(program, calls)
    prepared = pipeline.on_backend("interp", typed)
    for name, factor in (("steps", 9), ("handed", 5)):
        prepared.call(name, [x])  # warm: whatever is made once is made
        tracemalloc.start()
        try:
            found = prepared.call(name, [x])
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert np.isclose(found, factor * x.sum(dtype=np.float64), rtol=1e-5)
        assert peak < 1.5 * x.nbytes, (name, peak)  # two or three 4 MB temporaries at once, without the release
    kept = 2 * x.sum(dtype=np.float64)
    expected = sum(kept + i * x.size for i in range(3)) + kept + kept  # the loop, the closure, the last line
    assert np.isclose(prepared.call("looped", [x]), expected, rtol=1e-5)
