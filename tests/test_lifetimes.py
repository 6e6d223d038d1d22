"""interp/lifetimes.py: which reads of a function's variables hand their value over (the last read, made once,
outside loops and closures), checked on the source positions of the reads it picks."""

from __future__ import annotations

import dataclasses

from dl.interp.lifetimes import last_reads
from dl.lang import ast
from dl.lang.parse import parse

SOURCE = """
fn f(a, b, c, d) {
    let x = a + b
    let y = x * x
    let z = c
    while z > 0.0 {
        z = z - d
    }
    let g = fn(v) => v * y
    if y > 0.0 {
        z = z + g(1.0)
    }
    let w = y
    w = w + 1.0
    let s = x + 1.0
    let s = s + 1.0
    return (z, w, s)
}
"""


def taken_reads(decl: ast.FnDecl) -> set[tuple[str, int, int]]:
    """(name, line, column) of each read `last_reads` picks."""
    taken = last_reads(tuple(p.name for p in decl.params), decl.body.body)
    return {
        (n.id, n.span.line, n.span.column) for n in ast.walk(decl.body) if isinstance(n, ast.Name) and id(n) in taken
    }


def test_the_last_single_read_outside_loops_and_closures_hands_the_value_over() -> None:
    (decl,) = parse(SOURCE).decls
    assert taken_reads(decl) == {
        ("a", 3, 13),  # their only reads
        ("b", 3, 17),
        ("c", 5, 13),
        ("g", 11, 17),  # read once, in an `if`: run at most once
        ("y", 13, 13),  # after the closure that captured it (by value) and the `if` that read it
        ("x", 15, 13),  # its last statement reads it once (line 4 reads it twice)
        ("z", 17, 13),  # after the loop and the `if` that assign it
        ("w", 17, 16),  # after the statement that assigns it
    }
    # never: `d`, read only in the loop; `s`, declared twice (two slots under one name)


def test_a_node_placed_twice_never_hands_its_value_over() -> None:
    """A pass may place one node object at two places (the autodiff's shared names): taking its value at
    the first would leave nothing for the second."""
    (decl,) = parse("fn f(a) {\n    let b = a * 2.0\n    return a + b\n}\n").decls
    first, second = decl.body.body
    shared = second.value.lhs  # the `a` of `a + b`, which alone would hand `a` over
    assert taken_reads(decl) == {("a", 3, 12), ("b", 3, 16)}
    renamed = dataclasses.replace(first, value=dataclasses.replace(first.value, lhs=shared))
    decl = dataclasses.replace(decl, body=dataclasses.replace(decl.body, body=(renamed, second)))
    assert taken_reads(decl) == {("b", 3, 16)}
