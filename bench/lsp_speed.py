"""Language server speed: the pure functions behind each `dlrun lsp` response on a realistic 500-line DL file,
and the server itself, over stdio, on a generated 1 MB document.

    python bench/lsp_speed.py [--lines 500] [--repeats 5] [--positions 20] [--large-kb 1000] [--edits 10]
                              [--one-line-kb 5900]

Uses bench/check_speed.py's generated model file (it checks clean) and times, in process, best of
`--repeats` for each:

- `diagnostics`: `dl.lang.check` and the mapping to LSP diagnostics (what didOpen and a debounced didChange
  publish);
- `semantic tokens`: lexing, classifying and encoding the whole file;
- `hover`, `definition`, `references`: at `--positions` name sites spread over the file (median and worst);
- `completion`: at the start of a line in the body of each of those functions (median and worst);
- `signature help`: just after the `(` of calls spread over the file (median and worst).

Then the same generator makes a `--large-kb` document (0 skips this part), and:

- in process, alternating the two on the same edits: a whole `dl.lang.check` of the edited text against
  `dl.lang.incremental.analyse` given the previous analysis (what the server's worker runs);
- `dlrun check` of the file, as a user runs it (a new process each time);
- `dlrun lsp` as an editor drives it: time from didOpen to the first diagnostics; then `--edits` edits
  (alternately a changed expression inside a function, and a new line inside one, which moves every line
  below), each followed at once by a hover far from the edit, and again 300 ms later while the new
  analysis runs, and the time from the edit to its diagnostics. Issue 20's budget: hover under 200 ms on
  a 1 MB document after an edit. `--one-line-kb` drives the server the same way on a document of
  one-line functions with annotated parameters (issue 20's 5.9 MB document had 170,000 functions).

Times are wall clock, min and median. Not a test: nothing here is collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import dl.lang
from check_speed import best, generate
from dl import lsp
from dl.lang.incremental import analyse

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
    parser.add_argument("--large-kb", type=int, default=1000, help="size of the large document (0: skip it)")
    parser.add_argument("--edits", type=int, default=10, help="edits of the large document")
    parser.add_argument(
        "--one-line-kb", type=int, default=0, help="also a document of one-line functions this large (0: none)"
    )
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
    if args.large_kb:
        large_document(args.large_kb, args.edits)
    if args.one_line_kb:
        one_line_functions(args.one_line_kb, args.edits)


# ------------------------------------------------------------------ a large document


def lines_for(kilobytes: int) -> int:
    """How many generated lines make about `kilobytes` kB."""
    sample = generate(1000)
    return int(1000 * kilobytes * 1000 / len(sample))


def edited(source: str, number: int) -> str:
    """The `number`-th edit: a changed number in a function body (even), or a new line in one (odd)."""
    anchor = "    let centered = x - mu\n"
    at = nth(source, anchor, number * 7 % source.count(anchor))
    if number % 2 == 0:
        return source[:at] + anchor.replace("mu", "(mu + 0.0)") + source[at + len(anchor) :]
    return source[: at + len(anchor)] + f"    let unused_{number} = 1.0\n" + source[at + len(anchor) :]


def nth(source: str, text: str, index: int) -> int:
    at = -1
    for _ in range(index + 1):
        at = source.index(text, at + 1)
    return at


def hover_site(source: str, number: int) -> tuple[int, int]:
    """A position (0-based line, column) of `centered` far from the `number`-th edit."""
    anchor = "    let centered = x - mu"
    count = source.count(anchor)
    at = nth(source, anchor, (number * 7 + count // 2) % count) + len("    let ")
    line = source.count("\n", 0, at)
    return line, at - (source.rfind("\n", 0, at) + 1)


def large_document(kilobytes: int, edits: int) -> None:
    source = generate(lines_for(kilobytes))
    size = len(source.encode())
    functions = source.count("\nfn ")
    print(f"\n## a {size / 1e6:.2f} MB document: {source.count(chr(10))} lines, {functions} functions\n")
    path = str(Path(tempfile.mkdtemp()) / "large.dl")
    Path(path).write_text(source)
    whole, incremental = [], []
    previous = analyse(source, path)
    text = source
    for number in range(edits):  # the same edits, each system in turn
        text = edited(text, number)
        start = time.perf_counter()
        dl.lang.check(text, path)
        whole.append(time.perf_counter() - start)
        start = time.perf_counter()
        previous = analyse(text, path, previous)
        incremental.append(time.perf_counter() - start)
    runs = []
    for _ in range(3):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "dl", "check", path], check=True, capture_output=True)
        runs.append(time.perf_counter() - start)
    served = drive_server(source, edits, edited, hover_site, "centered")
    print("| measure | samples | min | median |")
    print("|---|---:|---:|---:|")
    row("`dlrun check` of the file", runs, "s")
    row("whole check after an edit (`dl.lang.check`)", whole, "s")
    row("incremental check after an edit (`analyse`)", incremental, "s")
    for name, times in served.items():
        row(name, times, "ms" if "hover" in name else "s")


def one_line(number: int) -> str:
    return f"fn f{number}(x: f32) -> f32 {{ return x + {number}.0 }}\n"


def one_line_functions(kilobytes: int, edits: int) -> None:
    """Issue 20's 5.9 MB document: as many one-line functions as fill `kilobytes` kB, driven as above."""
    count = kilobytes * 1000 // len(one_line(100_000))
    source = "".join(one_line(number) for number in range(count))
    print(f"\n## {len(source.encode()) / 1e6:.2f} MB of one-line functions: {count} functions\n")

    def edit(text: str, number: int) -> str:
        target = number * 7919 % count
        return text.replace(f"x + {target}.0 }}", f"x + {target}.5 }}", 1)

    def site(text: str, number: int) -> tuple[int, int]:
        line = (number * 7919 + count // 2) % count
        return line, one_line(line).index("x +")

    served = drive_server(source, edits, edit, site, "x: f32")
    print("| measure | samples | min | median |")
    print("|---|---:|---:|---:|")
    for name, times in served.items():
        row(name, times, "ms" if "hover" in name else "s")


def row(name: str, times: list[float], unit: str) -> None:
    scale, digits = (1e3, 0) if unit == "ms" else (1, 2)
    low, middle = min(times) * scale, statistics.median(times) * scale
    print(f"| {name} | {len(times)} | {low:.{digits}f} {unit} | {middle:.{digits}f} {unit} |")


class Client:
    """Content-Length framed JSON-RPC over a `dlrun lsp` process's stdin and stdout."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        command = [sys.executable, "-m", "dl", "lsp"]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self.messages: queue.Queue = queue.Queue()
        self.backlog: list[dict] = []
        self.next_id = 0
        threading.Thread(target=self.read, daemon=True).start()

    def read(self) -> None:
        stream = self.process.stdout
        while True:
            length = None
            while (header := stream.readline()) not in (b"\r\n", b""):
                name, _, value = header.decode("ascii").partition(":")
                length = int(value) if name.lower() == "content-length" else length
            if not header:
                return
            self.messages.put(json.loads(stream.read(length)))

    def send(self, message: dict) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.process.stdin.flush()

    def request(self, method: str, params: dict) -> tuple[dict, float]:
        """The answer and the seconds it took."""
        self.next_id += 1
        number = self.next_id
        start = time.perf_counter()
        self.send({"id": number, "method": method, "params": params})
        return self.wait(lambda m: m.get("id") == number and "method" not in m), time.perf_counter() - start

    def wait(self, wanted, timeout: float = 600) -> dict:
        """The first message `wanted` accepts; those it does not are kept for a later wait."""
        for message in self.backlog:
            if wanted(message):
                self.backlog.remove(message)
                return message
        while True:
            message = self.messages.get(timeout=timeout)
            if wanted(message):
                return message
            self.backlog.append(message)


def drive_server(
    source: str,
    edits: int,
    edit: Callable[[str, int], str],
    site: Callable[[str, int], tuple[int, int]],
    shown: str,
) -> dict[str, list[float]]:
    """`dlrun lsp` on `source`: the first diagnostics, then `edits` edits (`edit(text, number)`), each with a
    hover at `site(text, number)` (whose answer holds `shown`) at once and 300 ms later, then its diagnostics."""
    client = Client()
    client.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}})
    client.send({"method": "initialized", "params": {}})
    uri = Path(tempfile.mkdtemp(), "large.dl").as_uri()
    found: dict[str, list[float]] = {
        "time to first diagnostics": [],
        "hover at once after an edit": [],
        "hover 300 ms after an edit (analysis running)": [],
        "diagnostics after an edit": [],
    }

    def published(version: int):
        return lambda m: m.get("method") == "textDocument/publishDiagnostics" and m["params"]["version"] == version

    start = time.perf_counter()
    document = {"uri": uri, "languageId": "dl", "version": 0, "text": source}
    client.send({"method": "textDocument/didOpen", "params": {"textDocument": document}})
    client.wait(published(0))
    found["time to first diagnostics"].append(time.perf_counter() - start)
    text = source
    for number in range(edits):
        text = edit(text, number)
        line, column = site(text, number)
        where = {"textDocument": {"uri": uri}, "position": {"line": line, "character": column}}
        change = {"textDocument": {"uri": uri, "version": number + 1}, "contentChanges": [{"text": text}]}
        start = time.perf_counter()
        client.send({"method": "textDocument/didChange", "params": change})
        answer, took = client.request("textDocument/hover", where)
        assert shown in answer["result"]["contents"]["value"], answer
        found["hover at once after an edit"].append(took)
        time.sleep(max(0.0, 0.3 - (time.perf_counter() - start)))
        answer, took = client.request("textDocument/hover", where)
        assert shown in answer["result"]["contents"]["value"], answer
        found["hover 300 ms after an edit (analysis running)"].append(took)
        client.wait(published(number + 1))
        found["diagnostics after an edit"].append(time.perf_counter() - start)
    client.request("shutdown", None)  # `params: null`, as the specification has it
    client.send({"method": "exit"})
    client.process.wait(timeout=30)
    return found


if __name__ == "__main__":
    main()
