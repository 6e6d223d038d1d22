"""The cost of calling compiled code from an interpreted loop, beside PyTorch eager.

    python bench/llvm_crossing.py [--repeats 7] [--steps 2000] [--threads 1]

A training loop that prints, logs or loads data runs on the interpreter (compiled code does not call back
into Python), and calls compiled step functions: each call hands every tensor of its arguments to native
code and makes every tensor of its result. Here that is `optim.adam` on a struct of eight small tensors (a
few layers' weights and biases, 1,832 floats), called `--steps` times from a loop that could print, for:

- DL on the interpreter (`--backend interp`);
- DL with `--backend llvm`: `adam` compiled, the loop around it interpreted;
- PyTorch eager: `torch.optim.Adam` with its default (`foreach`) update, and with `foreach=False`.

Each system runs its whole loop once per repeat, the systems alternated (bench/fair.py), and the time per
step is reported, min and median, with DL's ratios against each peer. Threads are pinned equal.

Not a test: nothing here is collected by pytest.
"""

from __future__ import annotations

import fair  # first: it pins the threads before numpy and torch load

THREADS = fair.pin_threads()

import argparse  # noqa: E402

import numpy as np  # noqa: E402
from dl import pipeline  # noqa: E402
from dl.lang.nesting import with_room  # noqa: E402

SOURCE = """
import optim

struct P { a: f32[8, 8], b: f32[8, 8], c: f32[8, 8], d: f32[8, 8], e: f32[8], f: f32[8], g: f32[8, 32], h: f32[32] }

fn train(steps: i64, verbose: bool) -> f32 {
    let p = P { a: ones(8, 8), b: ones(8, 8), c: ones(8, 8), d: ones(8, 8), e: ones(8), f: ones(8),
                g: ones(8, 32), h: ones(32) }
    let g = p * 0.1
    let state = optim.adam_init(p)
    for i in 0..steps {
        (p, state) = optim.adam(p, g, state, lr=0.01)
        if verbose {
            print(i)  # host work: the loop stays on the interpreter, as a loop that logs does
        }
    }
    return sum(p.h)
}
"""

SHAPES = ((8, 8), (8, 8), (8, 8), (8, 8), (8,), (8,), (8, 32), (32,))


def dl_system(backend: str, steps: int):
    """`train(steps, false)` on `backend`, prepared once (compiled, for llvm, at the first call)."""
    program = pipeline.load("crossing.dl", SOURCE)
    _, typed = pipeline.prepare(program, (("train", (pipeline.value_type(steps), pipeline.value_type(False))),))
    prepared = pipeline.on_backend(backend, typed, cache=False)

    def run() -> float:
        return float(with_room(lambda: prepared.call("train", [steps, False])))

    return run


def torch_system(torch, steps: int, foreach: bool):
    def run() -> float:
        params = [torch.ones(shape, requires_grad=True) for shape in SHAPES]
        for p in params:
            p.grad = torch.full(shape_of(p), 0.1)
        optimizer = torch.optim.Adam(params, lr=0.01, foreach=foreach)
        for _ in range(steps):
            optimizer.step()
        return float(params[-1].detach().sum())

    return run


def shape_of(tensor) -> tuple[int, ...]:
    return tuple(tensor.shape)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--steps", type=int, default=2000)
    fair.threads_option(parser)
    args = parser.parse_args()
    torch = fair.load_torch(THREADS)
    systems = {
        "DL interp": dl_system("interp", args.steps),
        "DL llvm (loop interpreted)": dl_system("llvm", args.steps),
    }
    if torch is not None:
        systems["torch eager (foreach)"] = torch_system(torch, args.steps, True)
        systems["torch eager (for each tensor)"] = torch_system(torch, args.steps, False)
    results = {name: run() for name, run in systems.items()}  # warm: compiled, loaded, and checked alike
    values = list(results.values())
    assert np.allclose(values, values[0], rtol=1e-4), results  # (torch's Adam rounds its steps otherwise)
    samples = fair.alternate(systems, args.repeats)
    per_step = {
        name: fair.Samples([t / args.steps for t in s.wall], [c / args.steps for c in s.cpu])
        for name, s in samples.items()
    }
    print(fair.header("optim.adam on 8 small tensors, called from an interpreted loop", THREADS, torch))
    print(fair.table(per_step, unit="us", scale=1e6))
    print("\n".join(fair.ratio_lines(per_step, ["DL interp", "DL llvm (loop interpreted)"])))
    print(fair.footer(per_step, THREADS))


if __name__ == "__main__":
    main()
