"""Parser speed on a realistic 2,000-line DL file, split into lexing, layout and parsing.

    python bench/parse_speed.py [--lines 2000] [--repeats 15] [--save FILE.dl]

Generates model-like DL code (imports, consts, struct declarations, functions with
`let`s, `if`/`else`, `while`, `for`, tensor literals, calls with keyword arguments,
lambdas, comments and blank lines), then reports, best of `--repeats`:

- `parse` (lang/parse.py: lexer + layout + LALR parser + AST building), ms and tokens/s;
- the lexer alone (lang/lexer.py `Scanner.scan`) and lexer + layout (lang/layout.py);
- parser + AST = parse - (lexer + layout);
- grammar load: `python -c 'import dl.lang.parse'` and `python -c 'from dl.lang.parse import
  parse; parse("")'` (the parse table is read from the cache on first use) in a subprocess minus
  `python -c pass`, and in-process: computing the table again with Lark (`lalr.tables`: Lark's
  grammar analysis and LALR table), reading it from the cache (`tables.load`), and making the
  table `ParseTable.run` reads from either (`ParseTable`).

The project's target: well under 100 ms for 2,000 lines.
Not a test: nothing here is collected by pytest.
"""

from __future__ import annotations

import argparse
import gc
import platform
import subprocess
import sys
import time

import lark
from dl.lang import lalr, tables
from dl.lang.cache import cache_directory
from dl.lang.layout import layout
from dl.lang.parse import Builder, ParseTable, parse, parse_table

# Each template is one chunk of a model file; `{k}` makes its names unique.
TEMPLATES = (
    """\
# ---------------------------------------------------------------- block {k}
const HIDDEN_{k} = 128
const LR_{k}: f32 = 1e-3

struct Linear{k} {{ w: f32[IN, OUT], b: f32[OUT] }}

struct Block{k} {{
    norm: f32[D],
    attn: Linear{k}
    proj: Linear{k},
    scale: f32,
}}
""",
    """\
fn linear_{k}(p: Linear{k}, x: f32[B, IN]) -> f32[B, OUT] {{
    return x @ p.w + p.b
}}

fn init_linear_{k}(n_in: i64, n_out: i64, seed: i64 = 0) -> Linear{k} {{
    let scale = sqrt(2.0 / float(n_in))
    return Linear{k} {{ w: randn(n_in, n_out, seed=seed) * scale, b: zeros(n_out) }}
}}
""",
    """\
# The forward pass: two layers with a residual connection.
fn forward_{k}(m: Block{k}, x: f32[B, D]) -> f32[B, D] {{
    let h = relu(linear_{k}(m.attn, x))     # first layer
    let y = linear_{k}(m.proj, h) * m.scale
    if m.scale > 0.5 {{
        y = y + x
    }} else if m.scale < -0.5 {{
        y = y - x
    }} else {{
        y = tanh(y)
    }}
    return y / sqrt(mean(y ** 2, axis=1, keepdims=true) + 1e-5)
}}
""",
    """\
fn loss_{k}(m: Block{k}, x: f32[B, D], labels: i64[B]) -> f32 {{
    let logits = forward_{k}(m, x)
    let (batch, classes) = shape(logits)
    let targets = one_hot(labels, classes)
    let lp = log_softmax(logits, axis=-1)
    return -sum(targets * lp) / float(batch)
}}

fn accuracy_{k}(logits: f32[B, C], labels: i64[B]) -> f32 {{
    let predicted = argmax(logits, axis=1)
    return mean(where(predicted == labels, 1.0, 0.0))
}}
""",
    """\
fn train_{k}(m: Block{k}, xs: f32[N, B, D], ys: i64[N, B], epochs: i64) -> Block{k} {{
    let step = 0
    let best = 1e9
    for epoch in 0..epochs {{
        let total = 0.0
        for (x, y) in (xs, ys) {{
            let (value, g) = value_and_grad(loss_{k})(m, x, y)
            m.attn.w -= LR_{k} * g.attn.w
            m.attn.b -= LR_{k} * g.attn.b
            m.proj = Linear{k} {{ w: m.proj.w - LR_{k} * g.proj.w, b: m.proj.b - LR_{k} * g.proj.b }}
            total += value
            step += 1
            if step % 100 == 0 and value < best {{ print("step", step, "loss", value); best = value }}
        }}
        if total != total {{ break }}  # nan: stop early
    }}
    return m
}}
""",
    """\
fn schedule_{k}(step: i64, warmup: i64 = 100) -> f32 {{
    let t = float(step)
    let i = 0
    let acc = 0.0
    while i < warmup and acc < 1.0 {{
        acc += 1.0 / float(warmup)
        i += 1
        if i == 3 {{ continue }}
    }}
    let table = [[1.0, 0.5, 0.25], [0.125, 0.0625, 0.03125]]
    let picks = [0, 1, 2, 1]
    return acc * table[1, picks[2]] + table[0, :][0] * min(t, 1.0)
}}
""",
    """\
fn conv_{k}(images: f32[B, 3, 32, 32], kernel: f32[16, 3, 3, 3]) -> f32[B, 10] {{
    let h = conv2d(images, kernel, stride=1, padding=1)
    h = max_pool2d(relu(h), 2)
    let flat = reshape(h, len(h), -1)
    let w = randn(16 * 16 * 16, 10, seed=7)
    let apply = fn(v) => softmax(v @ w, axis=-1)
    return apply(flat)
}}

fn main_{k}(path: str) {{
    let m = Block{k} {{
        norm: ones(64), attn: init_linear_{k}(64, 64),
        proj: init_linear_{k}(64, 64, seed=1), scale: 1.0,
    }}
    let xs = randn(10, 32, 64, seed=2)
    let ys = arange(0, 320) % 10
    m = train_{k}(m, xs, reshape(ys, 10, 32), 3)
    assert(m.scale > 0.0, "scale must stay positive")
    print(path, accuracy_{k}(forward_{k}(m, xs[0]), ys[0:32]), not (m.scale == 0.0))
}}
""",
)


def generate(lines: int) -> str:
    """Model-like DL source of exactly `lines` lines (whole templates, then blank lines)."""
    parts = ["# A generated model file for the parser benchmark.", "import nn", "import data as d", ""]
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


def best(action, repeats: int) -> float:
    """Best wall time of `action()` over `repeats` runs, in seconds (gc off while timing)."""
    times = []
    for _ in range(repeats):
        gc.collect()
        gc.disable()
        try:
            start = time.perf_counter()
            action()
            times.append(time.perf_counter() - start)
        finally:
            gc.enable()
    return min(times)


def startup(code: str, repeats: int) -> float:
    """Best wall time of a fresh `python -c code`, in seconds."""

    def run() -> None:
        subprocess.run([sys.executable, "-c", code], check=True)

    return best(run, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--save", metavar="FILE", help="also write the generated source here")
    args = parser.parse_args()

    source = generate(args.lines)
    path = "generated.dl"
    if args.save:
        with open(args.save, "w", encoding="utf-8") as handle:
            handle.write(source)
    module = parse(source, path)  # also checks that the generated code parses

    scanner = parse_table().scanner
    raw_tokens = scanner.scan(source, path)
    tokens = layout(raw_tokens).tokens

    t_parse = best(lambda: parse(source, path), args.repeats)
    t_lex = best(lambda: scanner.scan(source, path), args.repeats)
    t_layout = best(lambda: layout(scanner.scan(source, path)), args.repeats)
    grammar = tables.load(cache_directory())
    t_lark = best(lambda: lalr.tables(tables.grammar_text()), 5)
    t_cached = best(lambda: tables.load(cache_directory()), 5)
    t_table = best(lambda: ParseTable(grammar, Builder()), 5)

    bare = startup("pass", 7)
    with_lark = startup("import lark", 7)
    with_parser = startup("import dl.lang.parse", 7)
    first_parse = startup("from dl.lang.parse import parse; parse('')", 7)

    ms = 1e3
    lines = source.count("\n")
    print(f"# parser speed — {platform.machine()}, Python {platform.python_version()}, lark {lark.__version__}")
    print(
        f"# {lines} lines, {len(source)} chars, {len(raw_tokens)} tokens from the lexer, "
        f"{len(tokens)} after layout, {len(module.decls)} top-level declarations; best of {args.repeats}"
    )
    print(f"# tokens/s counts the {len(tokens)} tokens the parser receives\n")
    print("| stage | ms | share of parse | tokens/s |")
    print("|---|---:|---:|---:|")
    rows = (
        ("lexer (Scanner.scan)", t_lex),
        ("layout pass", t_layout - t_lex),
        ("lexer + layout", t_layout),
        ("LALR parser + AST building", t_parse - t_layout),
        ("parse (total)", t_parse),
    )
    for name, seconds in rows:
        print(f"| {name} | {seconds * ms:.1f} | {seconds / t_parse:.0%} | {len(tokens) / seconds:,.0f} |")
    per_2000 = t_parse * 2000 / lines * ms
    print(
        f"\nparse: {lines / t_parse:,.0f} lines/s = {per_2000:.1f} ms per 2,000 lines "
        f"(target: well under 100 ms; {100 - per_2000:+.1f} ms of headroom)"
    )
    print("\n| grammar load | ms |")
    print("|---|---:|")
    print(f"| `python -c pass` (bare start-up) | {bare * ms:.0f} |")
    print(f"| `import lark` minus bare | {(with_lark - bare) * ms:.0f} |")
    print(f"| `import dl.lang.parse` minus bare | {(with_parser - bare) * ms:.0f} |")
    print(f"| `import dl.lang.parse` and `parse('')` minus bare | {(first_parse - bare) * ms:.0f} |")
    print(f"| Lark computing the table (`lalr.tables`) in-process | {t_lark * ms:.0f} |")
    print(f"| reading it from the cache (`tables.load`) in-process | {t_cached * ms:.1f} |")
    print(f"| `ParseTable` from it in-process | {t_table * ms:.1f} |")


if __name__ == "__main__":
    main()
