"""Checker speed: `dl.lang.check(source, path)` on a realistic 500-line DL file, split into parsing and checking.

    python bench/check_speed.py [--lines 500] [--repeats 30] [--save FILE.dl] [--profile N]

Generates model-like DL code that checks clean (structs of model parameters, generic
functions with annotated shapes and dimension variables, unannotated helpers checked per
call, consts, `let`s with and without annotations, `for`/`while` loops, `if`/`else`,
matmuls, reductions, softmax/one_hot/gather/where/concat/stack/reshape/transpose, tuples
and destructuring, indexing and slicing, struct literals and updates, calls between
functions, lambdas), and also times the 2,000-line file that bench/parse_speed.py
generates (its two `import` lines are commented out: there are no `nn`/`data` modules, and
an import that does not load stops `check` before the checker runs). Reports, best of
`--repeats`:

- `parse`: `load_program` (lexer, layout, parser, AST; the file has no imports);
- `check`: the checker alone (lang/check.py with the shape rules of lang/shapes.py) on the
  loaded program;
- `dl.lang.check`: the whole entry point, as the REPL and the language server call it.

The project's target: under 50 ms for the 500-line file. `--profile N` prints the N
functions with the most own time (cProfile) under `check` for the 500-line file.
Not a test: nothing here is collected by pytest.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import platform
import pstats
import sys
from pathlib import Path

import dl.lang
from dl.lang.check import check as check_program
from dl.lang.diagnostics import SourceMap
from dl.lang.modules import load_program

sys.path.insert(0, str(Path(__file__).resolve().parent))
import parse_speed
from parse_speed import best

# Each template is one chunk of a model file; `{k}` makes its names unique.
TEMPLATES = (
    """\
# ---------------------------------------------------------------- block {k}
const HIDDEN_{k} = 32
const CLASSES_{k} = 10
const LR_{k}: f32 = 0.05

struct Dense{k} {{ w: f32[IN, OUT], b: f32[OUT] }}

struct Net{k} {{
    embed: f32[VOCAB, D],
    hidden: Dense{k},
    out: Dense{k},
    gain: f32[D],
}}
""",
    """\
fn dense_{k}(p: Dense{k}, x: f32[B, IN]) -> f32[B, OUT] {{
    return x @ p.w + p.b
}}

fn layer_norm_{k}(x: f32[B, D], gain: f32[D]) -> f32[B, D] {{
    let mu = mean(x, axis=1, keepdims=true)
    let centered = x - mu
    let var = mean(centered * centered, axis=-1, keepdims=true)
    return centered / sqrt(var + 1e-5) * gain
}}

fn init_dense_{k}(n_in: i64, n_out: i64, seed: i64) -> Dense{k} {{
    let scale = sqrt(2.0 / float(n_in))
    return Dense{k} {{ w: randn(n_in, n_out, seed=seed) * scale, b: zeros(n_out) }}
}}
""",
    """\
# The forward pass: embedding, a normalized hidden layer, logits.
fn forward_{k}(net: Net{k}, tokens: i64[B]) -> f32[B, _] {{
    let x = gather(net.embed, tokens, axis=0)
    let h = relu(dense_{k}(net.hidden, layer_norm_{k}(x, net.gain)))
    return dense_{k}(net.out, h)
}}

fn loss_{k}(net: Net{k}, tokens: i64[B], labels: i64[B]) -> f32 {{
    let logits = forward_{k}(net, tokens)
    let (batch, classes) = shape(logits)
    let lp = log_softmax(logits, axis=-1)
    return -sum(one_hot(labels, classes) * lp) / float(batch)
}}

fn accuracy_{k}(logits: f32[B, C], labels: i64[B]) -> f32 {{
    let predicted = argmax(logits, axis=1)
    return mean(where(predicted == labels, 1.0, 0.0))
}}
""",
    """\
fn attention_{k}(q: f32[H, T, K], k: f32[H, T, K], v: f32[H, T, V]) -> f32[T, H, V] {{
    let scores = q @ transpose(k, 0, 2, 1) / sqrt(float(shape(q)[2]))
    let weights: f32[H, T, T] = softmax(scores, axis=-1)
    let mixed = weights @ v
    return transpose(mixed, 1, 0, 2)
}}

fn split_heads_{k}(x: f32[T, E], heads: i64) -> f32[_, T, _] {{
    let (steps, width) = shape(x)
    let parts = reshape(x, steps, heads, width // heads)
    return transpose(parts, 1, 0, 2)
}}

fn merge_{k}(a: f32[N, D], b: f32[N, D]) -> f32[N, D] {{
    let both = concat((a, b), axis=1)
    let stacked = stack((a, b), axis=0)
    let pooled = max(stacked, axis=0) + mean(both, axis=1, keepdims=true)
    return pooled * sigmoid(a - b)
}}
""",
    """\
fn sgd_{k}(p: Dense{k}, g: Dense{k}, lr: f32) -> Dense{k} {{
    return Dense{k} {{ w: p.w - lr * g.w, b: p.b - lr * g.b }}
}}

fn clip_{k}(x: f32[N], limit: f32) -> f32[N] {{
    return minimum(maximum(x, -limit), limit)
}}

fn train_{k}(net: Net{k}, xs: i64[S, B], ys: i64[S, B], epochs: i64) -> Net{k} {{
    let best = 1e9
    let steps = 0
    for epoch in 0..epochs {{
        let total = 0.0
        for i in 0..len(xs) {{
            let value = loss_{k}(net, xs[i], ys[i])
            net.gain = clip_{k}(net.gain * (1.0 - LR_{k}), 5.0)
            net.hidden = sgd_{k}(net.hidden, net.hidden, LR_{k} * 0.01)
            total += value
            steps += 1
            if steps % 100 == 0 and value < best {{
                best = value
            }}
        }}
        if total != total {{ break }}  # nan: stop early
    }}
    return net
}}
""",
    """\
fn schedule_{k}(step: i64, warmup: i64) -> f32 {{
    let t = float(step)
    let i = 0
    let acc = 0.0
    while i < warmup and acc < 1.0 {{
        acc += 1.0 / float(warmup)
        i += 1
        if i == 3 {{ continue }}
    }}
    let table = [[1.0, 0.5, 0.25], [0.125, 0.0625, 0.03125]]
    let row = table[1, :]
    return acc * row[2] + table[0, 1] * min(full(2, value=t))
}}

fn scale_{k}(x, factor) {{
    return x * factor + 1.0
}}

fn stats_{k}(x: f32[N, M]) -> (f32[M], f32[N], i64[M]) {{
    let apply = fn(v) => logsumexp(v, axis=0)
    let centered = x - broadcast_to(mean(x, axis=0), len(x), shape(x)[1])
    return (apply(centered), scale_{k}(sum(x ** 2, axis=1), 0.5), argmin(x, axis=0))
}}
""",
    """\
fn main_{k}() {{
    let net = Net{k} {{
        embed: randn(100, 16, seed=1),
        hidden: init_dense_{k}(16, HIDDEN_{k}, 2),
        out: init_dense_{k}(HIDDEN_{k}, CLASSES_{k}, 3),
        gain: ones(16),
    }}
    let xs = reshape(arange(0, 64) % 100, 4, 16)
    let ys = xs % CLASSES_{k}
    net = train_{k}(net, xs, ys, 2)
    let logits = forward_{k}(net, xs[0])
    let (spread, energy, lows) = stats_{k}(logits)
    let q = randn(2, 16, 8, seed=4)
    let mixed = attention_{k}(q, q, q)
    print(accuracy_{k}(logits, ys[0]), shape(spread), energy[0:4], lows[-1], shape(mixed))
    print(schedule_{k}(10, 5), scale_{k}(2.0, 3.0), merge_{k}(logits, logits)[0, ::2])
}}
""",
)


def generate(lines: int) -> str:
    """Model-like DL source of exactly `lines` lines that checks clean (whole templates, then blank lines)."""
    parts = ["# A generated model file for the checker benchmark.", ""]
    count, k = len(parts), 0
    while True:
        chunk = [*TEMPLATES[k % len(TEMPLATES)].format(k=k // len(TEMPLATES)).splitlines(), ""]
        if count + len(chunk) > lines:
            break
        parts.extend(chunk)
        count += len(chunk)
        k += 1
    parts.extend([""] * (lines - count))
    return "\n".join(parts) + "\n"


def parse_speed_source(lines: int) -> str:
    """bench/parse_speed.py's generated file, with its imports commented out (no such modules exist)."""
    source = parse_speed.generate(lines)
    return source.replace("\nimport nn\n", "\n# import nn\n").replace("\nimport data as d\n", "\n# import data\n")


def measure(name: str, source: str, repeats: int) -> dict:
    path = f"{name}.dl"
    program = load_program(path, source, SourceMap())
    typed = check_program(program)
    t_parse = best(lambda: load_program(path, source, SourceMap()), repeats)
    t_check = best(lambda: check_program(program), repeats)
    t_total = best(lambda: dl.lang.check(source, path), repeats)
    functions = sum(len(s) for s in typed.signatures.values())
    return {
        "name": name,
        "lines": source.count("\n"),
        "decls": len(program.modules[path].decls),
        "signatures": functions,
        "expressions": len(typed.types),
        "errors": len(typed.errors),
        "warnings": len(typed.diagnostics) - len(typed.errors),
        "parse": t_parse,
        "check": t_check,
        "total": t_total,
    }


def profile(source: str, top: int) -> str:
    program = load_program("profiled.dl", source, SourceMap())
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(20):
        check_program(program)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--save", metavar="FILE", help="also write the generated 500-line source here")
    parser.add_argument("--profile", type=int, metavar="N", default=0, help="print the top N functions (cProfile)")
    args = parser.parse_args()

    source = generate(args.lines)
    if args.save:
        Path(args.save).write_text(source, encoding="utf-8")
    dl.lang.check("fn warm() { return 1 }", "warm.dl")  # load the grammar before timing

    rows = [measure("generated", source, args.repeats), measure("parse_speed", parse_speed_source(2000), args.repeats)]
    ms = 1e3
    print(f"# checker speed — {platform.machine()}, Python {platform.python_version()}; best of {args.repeats}\n")
    print("| file | lines | decls | signatures | typed exprs | errors | parse ms | check ms | dl.lang.check ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['name']} | {r['lines']} | {r['decls']} | {r['signatures']} | {r['expressions']} | {r['errors']} "
            f"| {r['parse'] * ms:.1f} | {r['check'] * ms:.1f} | {r['total'] * ms:.1f} |"
        )
    first = rows[0]
    verdict = "met" if first["total"] < 0.050 else "NOT met"
    print(
        f"\n{first['lines']}-line file: dl.lang.check {first['total'] * ms:.1f} ms "
        f"(parse {first['parse'] * ms:.1f} + check {first['check'] * ms:.1f}); target < 50 ms: {verdict}"
    )
    if first["errors"]:
        print(f"warning: the generated file has {first['errors']} checker errors; it should check clean")
    if args.profile:
        print(profile(source, args.profile))


if __name__ == "__main__":
    main()
