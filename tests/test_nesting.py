"""Deep and long code: every pass survives any tree within the nesting limit; the parser refuses deeper ones.

For each construct that nests (a long sum, `**` chain, `-` and `not` chains, nested calls of a built-in
and of a function, slicing chains, nested tensor literals, tuples and lambdas, nested `if`, `else if`
chains, nested `while` and `for`), programs are generated below the limit, at it (the largest size the
parser accepts) and just past it. Each goes through `dlrun check`, `dlrun fmt`, `dlrun grad`, a run on
the interpreter and on `--backend llvm`, the REPL's evaluation and the language server's analysis and
hover. Below and at the limit each gives the output Python computes for it (or, for a tensor of more
than 64 axes, the run-time diagnostic); past it, each gives E0109 at the node the test finds on its own
at level `NESTING_LIMIT + 1`. None ever gives a traceback or exit status 3.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from dl import lang
from dl.lang import nesting
from dl.lang.diagnostics import DiagnosticError, Span
from dl.lang.nesting import NESTING_LIMIT, with_room
from dl.lang.parse import parse
from dl.repl import Outcome, Session
from test_lsp import Client, start_server, stop_server

# ---------------------------------------------------------------------- the programs


BELOW = 10


@dataclass(frozen=True)
class Construct:
    """A construct nested `n` times: the program, and what running its `main` prints. A construct of the
    issue's list goes through every pass at the limit; the others at the limit through the checker, the
    formatter, the interpreter and the language server (their `grad` and llvm runs are tested below the
    limit: at it, autodiff and LLVM's inliner take tens of seconds over nested lambdas and calls)."""

    name: str
    program: Callable[[int], str]
    output: Callable[[int], str]  # stdout of the run, or `error[CODE]` for a run-time diagnostic
    every_pass_at_limit: bool = True


def expression_program(value: str, scalar: str | None = None, declarations: str = "") -> str:
    """`main` prints `value`; `f`, which `dlrun grad` differentiates, multiplies by `scalar` (or `value`)."""
    return (
        f"{declarations}fn f(x: f32) -> f32 {{\n    return x * {scalar or value}\n}}\n\n"
        f"fn main() {{\n    print({value})\n}}\n"
    )


def nested_list(n: int) -> str:
    return "[" * n + "1.0" + "]" * n


def nested_tuple(n: int) -> str:
    return "(" * n + "1.0" + ",)" * n


def statements_program(opening: str, closing: str, n: int) -> str:
    """`main` with `n` nested blocks opened by `opening`, the innermost printing; `f` likewise, at most
    `BELOW` deep, the innermost updating what it returns. (The derivative of nested branches and loops
    recomputes each level's forward for every level inside it: autodiff's time grows with the cube of the
    nesting, and is not tested at the limit.)"""
    inner = min(n, BELOW)
    return (
        "fn f(x: f32) -> f32 {\n    let y = x\n    let k = 1\n"
        + opening * inner
        + "y = y * 2.0\n"
        + closing * inner
        + "    return y\n}\n\n"
        "fn main() {\n    let x = 1.0\n    let k = 1\n" + opening * n + "print(x)\n" + closing * n + "}\n"
    )


def else_if_program(n: int) -> str:
    """`if k == 0 { } else if k == 1 { } ...`: a chain of `n` conditions in `main` (which takes branch 1),
    and of at most `BELOW` in `f`."""

    def chain(body: str, length: int) -> str:
        branches = "".join(f"}} else if k == {i} {{\n    {body}\n" for i in range(1, length))
        return f"    if k == 0 {{\n    {body}\n{branches}    }}\n"

    return (
        "fn f(x: f32) -> f32 {\n    let y = x\n    let k = 1\n"
        + chain("y = y * 2.0", min(n, BELOW))
        + "    return y\n}\n\n"
        + "fn main() {\n    let x = 1.0\n    let k = 1\n"
        + chain("print(k)", n)
        + "}\n"
    )


CONSTRUCTS = [
    Construct("sum", lambda n: expression_program(" + ".join(["1.0"] * n)), lambda n: f"{float(n)}\n"),
    Construct("power", lambda n: expression_program(" ** ".join(["1.0"] * n)), lambda n: "1.0\n"),
    Construct("negation", lambda n: expression_program("- " * n + "1.0"), lambda n: f"{(-1.0) ** n}\n"),
    Construct("abs", lambda n: expression_program("abs(" * n + "-1.0" + ")" * n), lambda n: "1.0\n"),
    Construct("slices", lambda n: expression_program("ones(2)" + "[0:1]" * n + "[0]"), lambda n: "1.0\n"),
    Construct(
        "tensor literal",
        lambda n: expression_program(nested_list(n), f"sum({nested_list(n)})"),
        lambda n: "error[E0514]" if n > 64 else "[" * n + "1." + "]" * n + "\n",
    ),
    Construct("if", lambda n: statements_program("if k == 1 {\n", "}\n", n), lambda n: "1.0\n"),
    Construct(
        "not",
        lambda n: expression_program("not " * n + "true", "1.0"),
        lambda n: f"{'true' if n % 2 == 0 else 'false'}\n",
        every_pass_at_limit=False,
    ),
    Construct(
        "calls",
        lambda n: expression_program(
            "g(" * n + "1.0" + ")" * n, declarations="fn g(v: f32) -> f32 {\n    return v\n}\n\n"
        ),
        lambda n: "1.0\n",
        every_pass_at_limit=False,
    ),
    Construct(
        "tuple",
        lambda n: expression_program(nested_tuple(n), f"float(len({nested_tuple(n)}))"),
        lambda n: "(" * n + "1.0" + ",)" * n + "\n",
        every_pass_at_limit=False,
    ),
    Construct(
        "lambda",
        lambda n: expression_program("(" + "fn(a) => " * n + "1.0)" + "(0.0)" * n, "1.0"),
        lambda n: "1.0\n",
        every_pass_at_limit=False,
    ),
    Construct("else if", else_if_program, lambda n: "1\n", every_pass_at_limit=False),
    Construct(
        "while", lambda n: statements_program("while k < 1 {\n", "}\n", n), lambda n: "", every_pass_at_limit=False
    ),
    Construct(
        "for", lambda n: statements_program("for i in 0..1 {\n", "}\n", n), lambda n: "1.0\n", every_pass_at_limit=False
    ),
]


# ---------------------------------------------------------------------- measuring, independently of the parser


def levels(decls: tuple) -> list[tuple[object, int]]:
    """Every node of `decls` with its level (a declaration is level 1), in source order."""
    found = []
    waiting = [(decl, 1) for decl in reversed(decls)]
    while waiting:
        node, level = waiting.pop()
        found.append((node, level))
        inner = []
        for field in dataclasses.fields(node):
            value = getattr(node, field.name)
            if field.name in ("span", "name_span"):
                continue
            for child in value if isinstance(value, tuple) else (value,):
                if dataclasses.is_dataclass(child):
                    inner.append((child, level + 1))
        waiting.extend(reversed(inner))
    return found


def parsed_without_limit(source: str, monkeypatch: pytest.MonkeyPatch) -> tuple:
    with monkeypatch.context() as patched:
        patched.setattr(nesting, "NESTING_LIMIT", 10**9)
        return parse(source, "deep.dl").decls


def depth(source: str) -> int:
    return max(level for _, level in levels(parse(source, "deep.dl").decls))


def largest_accepted(construct: Construct) -> int:
    """The largest size whose program nests at most `NESTING_LIMIT` levels: each size adds the same number
    of levels, measured on two small sizes."""
    small = depth(construct.program(BELOW))
    per_size = depth(construct.program(BELOW + 1)) - small
    return BELOW + (NESTING_LIMIT - small) // per_size


@pytest.fixture(scope="module")
def at_limit() -> dict[str, int]:
    return {construct.name: largest_accepted(construct) for construct in CONSTRUCTS}


# ---------------------------------------------------------------------- running every pass


PASSES = ("check", "fmt", "grad", "interp", "llvm", "repl", "lsp")
LIGHT_PASSES = ("check", "fmt", "interp", "lsp")


@pytest.fixture
def passes(dlrun, tmp_path: Path, capsys: pytest.CaptureFixture, lsp_client: Client):
    """`run(source)`: what each pass gives for the program, as {pass: (status, stdout, stderr)}."""

    def run(source: str, chosen: tuple[str, ...] = PASSES) -> dict[str, tuple[int, str, str]]:
        path = tmp_path / "deep.dl"
        path.write_text(source)
        file = str(path)
        commands = {
            "check": lambda: dlrun("check", file),
            "fmt": lambda: dlrun("fmt", "--print", file),
            "grad": lambda: dlrun("grad", file, "--fn", "f"),
            "interp": lambda: dlrun(file),
            "llvm": lambda: dlrun("--backend", "llvm", "--no-cache", file),
            "repl": lambda: repl(source, capsys),
            "lsp": lambda: language_server(source, file, lsp_client),
        }
        results = {name: commands[name]() for name in chosen}
        for name, (status, _, err) in results.items():
            assert status in (0, 1), f"{name}: exit status {status}\n{err[-3000:]}"
            assert "Traceback" not in err and "internal error" not in err, f"{name}: {err[-3000:]}"
        return results

    return run


def repl(source: str, capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    """The REPL's evaluation: the declarations as one entry, then `main()`."""
    session = Session()
    capsys.readouterr()
    outcomes = [session.handle(source), session.handle("main()")]
    captured = capsys.readouterr()
    return (0 if outcomes == [Outcome.OK, Outcome.OK] else 1), captured.out, captured.err


@pytest.fixture(scope="module")
def lsp_client() -> Iterator[Client]:
    """One `dlrun lsp` for the module's tests, spoken to over stdio."""
    process, client = start_server()
    yield client
    stop_server(process, client)


def language_server(source: str, file: str, client: Client) -> tuple[int, str, str]:
    """The language server's analysis (published diagnostics), and a hover in `main`'s body (which walks all
    of `main`'s tree). Status 1 when it published an error; an analysis that failed inside the server is
    published without a code, and a hover that failed is answered with an error: both fail the test."""
    uri = Path(file).as_uri()
    document = {"uri": uri, "languageId": "dl", "version": 1, "text": source}
    client.notify("textDocument/didOpen", {"textDocument": document})
    published = client.wait(
        lambda m: m.get("method") == "textDocument/publishDiagnostics" and m["params"]["uri"] == uri, timeout=300
    )
    diagnostics = published["params"]["diagnostics"]
    main_line = source.splitlines().index("fn main() {") + 1
    client.next_id += 1
    number = client.next_id
    where = {"textDocument": {"uri": uri}, "position": {"line": main_line, "character": 8}}
    client.send({"id": number, "method": "textDocument/hover", "params": where})
    hovered = client.wait(lambda m: m.get("id") == number and "method" not in m, timeout=300)
    client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    assert "error" not in hovered, hovered
    shown = "".join(  # the message's first line: the label and notes follow it
        f"{d.get('code')} {d['range']['start']['line'] + 1}:{d['range']['start']['character'] + 1} "
        f"{d['message'].splitlines()[0]}\n"
        for d in diagnostics
    )
    if not diagnostics:
        assert hovered["result"] is not None, "no hover in a program that checks"
    return (1 if diagnostics else 0), shown, ""


def same_tree(source: str, other: str) -> bool:
    """Whether two sources parse to equal trees (compared with room: `==` of nodes recurses)."""
    return with_room(lambda: parse(source, "deep.dl") == parse(other, "deep.dl"))


# ---------------------------------------------------------------------- the tests


@pytest.mark.parametrize("construct", CONSTRUCTS, ids=lambda c: c.name)
@pytest.mark.parametrize("size", ["below", "at"])
def test_within_the_limit_every_pass_gives_its_result(construct: Construct, size: str, at_limit, passes) -> None:
    n = BELOW if size == "below" else at_limit[construct.name]
    source = construct.program(n)
    results = passes(source, PASSES if size == "below" or construct.every_pass_at_limit else LIGHT_PASSES)
    assert results["check"][:2] == (0, "ok\n")
    status, formatted, _ = results["fmt"]
    assert status == 0 and same_tree(formatted, source)
    if "grad" in results:
        status, derivative, _ = results["grad"]
        assert status == 0 and "fn f_grad" in derivative
        parse(derivative, "derivative.dl")
    expected = construct.output(n)
    for name in ("interp", "llvm", "repl"):
        if name not in results:
            continue
        status, out, err = results[name]
        if expected.startswith("error["):
            assert status == 1 and err.startswith(expected), (name, err[:500])
        else:
            assert (status, out) == (0, expected), (name, err[-2000:])
    assert results["lsp"][:2] == (0, "")


@pytest.mark.parametrize("construct", CONSTRUCTS, ids=lambda c: c.name)
def test_at_the_limit_the_tree_is_as_deep_as_the_limit(construct: Construct, at_limit, monkeypatch) -> None:
    """The size at the limit nests at most `NESTING_LIMIT` levels and the parser accepts it; one size more
    goes past the limit, and the parser refuses it."""
    n = at_limit[construct.name]
    deepest = max(level for _, level in levels(parsed_without_limit(construct.program(n), monkeypatch)))
    over = max(level for _, level in levels(parsed_without_limit(construct.program(n + 1), monkeypatch)))
    assert NESTING_LIMIT - 3 <= deepest <= NESTING_LIMIT < over  # no construct adds more than 3 levels per size
    parse(construct.program(n), "deep.dl")
    with pytest.raises(DiagnosticError) as refused:
        parse(construct.program(n + 1), "deep.dl")
    assert [d.code for d in refused.value.diagnostics] == ["E0109"]


@pytest.mark.parametrize("construct", CONSTRUCTS, ids=lambda c: c.name)
def test_past_the_limit_every_pass_reports_the_node_too_deep(
    construct: Construct, at_limit, passes, monkeypatch
) -> None:
    source = construct.program(at_limit[construct.name] + 1)
    spans = []  # each declaration's first node past the limit, in source order
    for decl in parsed_without_limit(source, monkeypatch):
        crossing = [node for node, level in levels((decl,)) if level > NESTING_LIMIT]
        spans += [crossing[0].span] if crossing else []
    first: Span = spans[0]
    message = f"nested too deeply: more than {NESTING_LIMIT} levels"
    results = passes(source)
    for name in ("fmt", "grad", "interp", "llvm", "repl"):
        status, _, err = results[name]
        head, where = err.splitlines()[:2]
        assert status == 1 and head.startswith("error[E0109]") and message in head, (name, err[:300])
        path = "<repl-1>" if name == "repl" else "deep.dl"
        assert f"{path}:{first.line}:{first.column}" in where, (name, err[:300])
    status, _, err = results["check"]  # every declaration that goes past the limit
    assert status == 1 and err.count("error[E0109]") == len(spans)
    status, shown, _ = results["lsp"]
    assert status == 1 and len(shown.splitlines()) == len(spans)
    for line, span in zip(shown.splitlines(), spans, strict=True):
        assert line.startswith(f"E0109 {span.line}:{span.column} ") and line.endswith(message)


@pytest.mark.parametrize("depth", [NESTING_LIMIT + 1, 10 * NESTING_LIMIT])
def test_far_past_the_limit_the_parser_reports_it_at_once(depth: int) -> None:
    typed = lang.check(f"fn main() {{\n    print({'abs(' * depth}1.0{')' * depth})\n}}\n", "deep.dl")
    (diagnostic,) = typed.diagnostics
    assert (
        diagnostic.code == "E0109"
        and diagnostic.message == f"expression nested too deeply: more than {NESTING_LIMIT} levels"
    )
    # levels: `fn` 1, its block 2, the statement 3, `print(...)` 4, the k-th `abs(...)` 4 + k, and its name
    # `abs` one more: the first node past the limit is the name of call k = NESTING_LIMIT - 4, at 11 + 4 (k - 1)
    assert (diagnostic.span.line, diagnostic.span.column) == (2, 11 + 4 * (NESTING_LIMIT - 5))
    assert diagnostic.span.end_column == diagnostic.span.column + 3


def test_the_example_in_the_error_reference_reads_as_shown(tmp_path: Path, dlrun, monkeypatch) -> None:
    """docs/errors.md shows E0109 for `main` with 750 nested `if ready { ... }` (too long for the page: a
    script there writes it, and tests/test_docs.py runs the session); this program is the one described."""
    page = (Path(__file__).resolve().parent.parent / "docs" / "errors.md").read_text()
    section = page[page.index("### E0109") : page.index("## E02xx")]
    session = section.split("```console\n", 1)[1].split("```", 1)[0]
    shown = session.split("$ dlrun deep.dl\n", 1)[1].split("$ echo $?", 1)[0]
    nested = "    if ready {\n" * 750 + "    print(ready)\n" + "    }\n" * 750
    (tmp_path / "deep.dl").write_text("fn main() {\n    let ready = true\n" + nested + "}\n")
    monkeypatch.chdir(tmp_path)
    assert dlrun("deep.dl") == (1, "", shown)
