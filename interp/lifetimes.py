"""Where a function body reads each of its variables for the last time: the reads that may take the value out
of the frame (`last_reads`), so that a tensor handed to a call or a primitive on its last use is not also held
by the caller while the callee runs. interp/compile.py's `function_block` lets go of the rest after the last
statement that names them.
"""

from __future__ import annotations

from collections import Counter

from dl.lang import ast

LOOPS = (ast.While, ast.For)


def last_reads(params: tuple[str, ...], body: tuple[ast.Stmt, ...]) -> frozenset[int]:
    """The ids of the `Name` nodes of `body` that read a variable for the last time, exactly once: the only
    occurrence of the variable in the last statement that names it, outside any loop or nested function in
    that statement (which could run it again, or capture it), and not assigned there. Only variables declared
    once in the function (a parameter or one `let`) qualify, so that a name means one frame slot throughout."""
    declared = Counter(params)
    for stmt in body:
        for node in ast.walk_scope(stmt):
            if isinstance(node, (ast.Let, ast.For)):
                declared.update(n.name for n in ast.pattern_names(node.pattern))
            elif isinstance(node, ast.FnDecl):  # a local function
                declared[node.name] += 1
    single = {name for name, count in declared.items() if count == 1}
    last: dict[str, int] = {}
    seen: Counter[int] = Counter()  # a node object that a pass placed at two places must not take at either
    for index, stmt in enumerate(body):
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name):
                seen[id(node)] += 1
                if node.id in single:
                    last[node.id] = index
    by_statement: dict[int, set[str]] = {}
    for name, index in last.items():
        by_statement.setdefault(index, set()).add(name)
    taken: set[int] = set()
    for index, names in by_statement.items():
        found: dict[str, list[tuple[ast.Name, bool]]] = {}
        for node, movable in occurrences(body[index]):
            if node.id in names:
                found.setdefault(node.id, []).append((node, movable))
        for reads in found.values():
            if len(reads) == 1 and reads[0][1] and seen[id(reads[0][0])] == 1:
                taken.add(id(reads[0][0]))
    return frozenset(taken)


def occurrences(stmt: ast.Stmt) -> list[tuple[ast.Name, bool]]:
    """Every `Name` node in `stmt` (a node met twice counts twice), with whether its value may be taken there:
    not inside a loop or a nested function, and not an assignment's target."""
    found: list[tuple[ast.Name, bool]] = []
    stack: list[tuple[object, bool]] = [(stmt, True)]
    while stack:
        node, movable = stack.pop()
        if isinstance(node, tuple):
            stack.extend((item, movable) for item in node)
            continue
        if isinstance(node, ast.Name):
            found.append((node, movable))
            continue
        inside = movable and not isinstance(node, (*LOOPS, *ast.FUNCTIONS))
        if isinstance(node, ast.Assign):
            stack.append((node.target, False))
            stack.append((node.value, inside))
            continue
        stack.extend((child, inside) for child in ast.children(node))
    return found
