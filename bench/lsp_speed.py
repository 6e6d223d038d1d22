"""Language server speed: the pure functions behind each `dlrun lsp` response, on a realistic 500-line DL file.

    python bench/lsp_speed.py [--lines 500] [--repeats 5] [--positions 20]

Uses bench/check_speed.py's generated model file (it checks clean) and times, in process, best of
`--repeats` for each:

- `diagnostics`: `dl.lang.check` and the mapping to LSP diagnostics (what didOpen and a debounced didChange
  publish);
- `semantic tokens`: lexing, classifying and encoding the whole file;
- `hover`, `definition`, `references`: at `--positions` name sites spread over the file (median and worst);
- `completion`: at the start of a line in the body of each of those functions (median and worst);
- `signature help`: just after the `(` of calls spread over the file (median and worst).

The requests other than diagnostics reuse the checked result (the server caches it per document
version), so a request after an edit costs `diagnostics` plus its own time. Issue 8's target: a
response within 100 ms for a 500-line file. Not a test: nothing here is collected by pytest.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import dl.lang
from check_speed import best, generate
from dl import lsp

TARGET_S = 0.100


def spread(items: list, count: int) -> list:
    """`count` items evenly spaced over `items` (all of them when there are fewer)."""
    if len(items) <= count:
        return items
    step = len(items) / count
    return [items[int(index * step)] for index in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--positions", type=int, default=20)
    args = parser.parse_args()

    path, uri = "/tmp/lsp_speed.dl", "file:///tmp/lsp_speed.dl"
    source = generate(args.lines)
    dl.lang.check("fn warm() { return 1 }", "warm.dl")  # load the grammar before timing
    typed = dl.lang.check(source, path)
    module = typed.program.modules[path]
    lines = source.splitlines()
    sites = spread([span for _, span in lsp.name_sites(module) if span.line > 0], args.positions)
    bodies = spread([decl.body.span.line + 1 for decl in module.decls if isinstance(decl, lsp.ast.FnDecl)], 20)
    calls = spread(
        [
            (number, text.index("(") + 2)
            for number, text in enumerate(lines, start=1)
            if "(" in text and "fn " not in text
        ],
        args.positions,
    )

    def at(action, places) -> list[float]:
        return [best(lambda place=place: action(*place), args.repeats) for place in places]

    points = [(span.line, span.column) for span in sites]
    rows = {
        "diagnostics": [best(lambda: lsp.diagnostics_for(dl.lang.check(source, path), path, uri), args.repeats)],
        "semantic tokens": [best(lambda: lsp.encode_tokens(lsp.semantic_tokens(source, typed, path)), args.repeats)],
        "hover": at(lambda line, column: lsp.hover_text(typed, path, source, line, column), points),
        "definition": at(lambda line, column: lsp.definition(typed, path, line, column), points),
        "references": at(lambda line, column: lsp.references(typed, path, line, column), points),
        "completion": at(
            lambda line, column: lsp.completions(typed, path, source, line, column), [(b, 5) for b in bodies]
        ),
        "signature help": at(lambda line, column: lsp.signature_help(typed, path, source, line, column), calls),
    }
    ms = 1e3
    print(f"# language server speed — {platform.machine()}, Python {platform.python_version()}; best of {args.repeats}")
    print(
        f"\n{source.count(chr(10))}-line file, {len(typed.errors)} errors; target {TARGET_S * ms:.0f} ms a response\n"
    )
    print("| request | positions | median ms | worst ms | target |")
    print("|---|---:|---:|---:|---|")
    for name, times in rows.items():
        verdict = "met" if max(times) < TARGET_S else "NOT met"
        print(f"| {name} | {len(times)} | {statistics.median(times) * ms:.2f} | {max(times) * ms:.2f} | {verdict} |")


if __name__ == "__main__":
    main()
