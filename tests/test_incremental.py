"""Checking a document again after an edit (lang/incremental.py): the result is what `dl.lang.check` gives
for the new text, and only what changed (and what depends on it) is checked again."""

from __future__ import annotations

import gc
from typing import Any

import dl.lang
from dl.lang.incremental import Analysis, analyse, subtree
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

PATH = "/tmp/incremental.dl"
SOURCE = """\
import nn

const N = 3
struct Layer { w: f32[N, 4], b: f32[4] }

fn dense(p: Layer, x: f32[B, N]) -> f32[B, 4] {
    return x @ p.w + p.b
}

fn twice(x: f32[B, 4]) {
    return x * 2.0
}

# The scalar head.
fn head(p: Layer, x: f32[B, N]) -> f32 {
    let h = twice(dense(p, x))
    return sum(relu(h))
}

fn helper(x) {
    return x + 1.0
}

fn loss(p: Layer, x: f32[B, N]) -> f32 {
    let g = grad(head)(p, x)
    return head(p, x) + sum(helper(x))
}

fn even(n: i64) { if n == 0 { return true } return odd(n - 1) }
fn odd(n: i64) { if n == 0 { return false } return even(n - 1) }

fn main() {
    let p = Layer { w: ones(N, 4), b: zeros(4) }
    print(loss(p, ones(2, N)), even(4), nn.relu(-1.0))
}
"""


def summary(typed: dl.lang.Typed) -> dict[str, Any]:
    """What a check found, comparable between two checks of the same text: each node of the document with
    its type, the diagnostics, the signatures, the run-time checks and the literals' dtypes."""
    module = typed.program.modules.get(PATH)
    nodes = []
    for decl in module.decls if module else ():
        for node in subtree(decl):
            found = typed.types.get(id(node))
            nodes.append((type(node).__name__, getattr(node, "span", None), None if found is None else str(found)))
    return {
        "nodes": sorted(nodes, key=repr),
        "diagnostics": [(d.code, d.message, d.span, d.notes) for d in typed.diagnostics],
        "signatures": {path: [str(s) for s in found] for path, found in typed.signatures.items()},
        "runtime checks": sorted((str(c.type), c.span) for c in typed.runtime_checks.values()),
        "coercions": sorted(typed.coercions.values()),
    }


def edited(analysis: Analysis, old: str, new: str) -> Analysis:
    assert old in analysis.source
    found = analyse(analysis.source.replace(old, new, 1), PATH, analysis)
    assert summary(found.typed) == summary(dl.lang.check(found.source, PATH))
    return found


def test_the_first_analysis_is_the_check_of_the_text() -> None:
    first = analyse(SOURCE, PATH)
    assert summary(first.typed) == summary(dl.lang.check(SOURCE, PATH))
    assert first.typed.errors == []
    assert first.checked == {"dense", "twice", "head", "helper", "loss", "even", "odd", "main"}


def test_an_edit_to_one_function_checks_only_it_again() -> None:
    first = analyse(SOURCE, PATH)
    body = edited(first, "return x @ p.w + p.b", "return p.b + x @ p.w")
    # checked every time: `helper`, whose parameter is unannotated, `loss` which calls it, `main` which calls
    # `nn.relu` (its parameter is unannotated too), and `even` and `odd`, which call each other and infer
    # their results (which of them the checker meets first decides what they see of each other)
    again = {"helper", "loss", "main", "even", "odd"}
    assert body.checked == {"dense", *again}
    # `head` calls `dense`, but only its parameters and declared result count; `twice` infers its result
    doubled = edited(body, "return x * 2.0", "return x * 3.0")
    assert doubled.checked == {"twice", "head", *again}


def test_moved_functions_keep_their_check() -> None:
    first = analyse(SOURCE, PATH)
    lower = edited(first, "    return x @ p.w + p.b\n}\n", "    return x @ p.w + p.b\n}\n\n# two lines down\n")
    assert lower.checked == {"dense", "helper", "loss", "main", "even", "odd"}  # the piece that holds the lines
    head = next(d for d in lower.typed.program.modules[PATH].decls if getattr(d, "name", "") == "head")
    assert head.span.line == 15 + 2  # moved down two lines, and its nodes' types with it (see `edited`)
    # a function whose result is inferred depends on the whole text of the functions it calls
    comment = edited(lower, "# The scalar head.", "# The head.")
    assert comment.checked == {"twice", "head", "helper", "loss", "main", "even", "odd"}


def test_a_changed_signature_checks_its_callers_again() -> None:
    first = analyse(SOURCE, PATH)
    wider = edited(
        first, "fn dense(p: Layer, x: f32[B, N]) -> f32[B, 4]", "fn dense(p: Layer, x: f32[B, N]) -> f32[B, 5]"
    )
    assert wider.checked == {"dense", "head", "helper", "loss", "main", "even", "odd"}
    # its body no longer fits, nor does its result where `head` passes it on
    assert [(d.code, d.span.line) for d in wider.typed.errors] == [("E0301", 7), ("E0301", 16)]


def test_a_new_declaration_of_a_name_checks_its_users_again() -> None:
    first = analyse(SOURCE, PATH)
    shadowed = edited(first, "fn main() {", "fn relu(x) { return x }\n\nfn main() {")
    assert "main" in shadowed.checked and "dense" not in shadowed.checked
    broken = edited(shadowed, "fn dense(p: Layer,", "fn dense(p: Layer")
    assert "head" in broken.checked and [d.code for d in broken.typed.errors] == ["E0102"]
    assert edited(broken, "fn dense(p: Layer", "fn dense(p: Layer,").typed.errors == []


def test_syntax_errors_are_those_of_each_piece() -> None:
    first = analyse(SOURCE, PATH)
    unclosed = edited(first, "    return x * 2.0\n}", "    return x * 2.0\n")
    [problem] = unclosed.typed.diagnostics
    assert (problem.code, problem.span.line) == ("E0103", 10)  # `twice`'s `{` is never closed
    assert edited(unclosed, "    return x * 2.0\n", "    return x * 2.0\n}").typed.errors == []


SNIPPETS = [
    "\n",
    "    let q = x * 2.0\n",
    "}",
    "{",
    "(",
    "fn extra(x: f32) -> f32 { return x }\n",
    "fn dense(p: Layer) { return p }\n",
    "const N = 4\n",
    "struct Layer { w: f32[3] }\n",
    "import nn\n",
    "# note\n",
    " + 1.0",
    "f64",
    "twice(",
    "helper(",
    "head",
    "x",
    "1",
]
edit = st.tuples(st.floats(0, 1), st.one_of(st.sampled_from(SNIPPETS), st.integers(1, 40)))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits=st.lists(edit, min_size=1, max_size=6))
def test_random_edits_give_what_a_whole_check_gives(edits: list[tuple[float, str | int]]) -> None:
    analysis = analyse(SOURCE, PATH)
    for where, what in edits:
        text = analysis.source
        at = int(where * len(text))
        text = text[:at] + what + text[at:] if isinstance(what, str) else text[:at] + text[at + what :]
        analysis = analyse(text, PATH, analysis)
        assert summary(analysis.typed) == summary(dl.lang.check(text, PATH)), text


def test_an_analysis_leaves_no_cycles_behind() -> None:
    """The language server freezes each analysis out of the cycle collector's reach (driver/documents.py):
    safe, because reference counting frees an analysis once the next replaces it."""
    gc.collect()
    first = analyse(SOURCE, PATH)
    second = analyse(SOURCE.replace("x * 2.0", "x * 3.0"), PATH, first)
    third = analyse("\n" + second.source + "fn (", PATH, second)
    del first, second, third
    assert gc.collect() == 0
