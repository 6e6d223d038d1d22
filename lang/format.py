"""The canonical formatter: source text -> the same program laid out canonically, comments kept.

`format_source(source, path)` parses the file, prints every declaration and statement the
way lang/printer.py does (four-space indents, one statement per line, parentheses only
where precedence needs them, one blank line between top-level declarations but none inside
a run of `import`s or `const`s written together; a struct written on one line stays on one
line if it fits in 100 characters), and puts
every comment back: a comment on its own line stays on its own line before the statement
that follows it (or at the end of its block), and a comment after code on a line stays at
the end of that statement. A single blank line between two statements is kept; runs of
blank lines become one. Number literals keep their spelling (`1e-3` stays `1e-3`).

Formatting is idempotent: formatting formatted text gives it back unchanged. A file with a
syntax error is not formatted: `DiagnosticError` carries the syntax errors.
"""

from __future__ import annotations

from bisect import bisect_right

from dl.lang import ast
from dl.lang.diagnostics import Span
from dl.lang.lexer import code_characters
from dl.lang.nesting import in_room
from dl.lang.parse import parse
from dl.lang.printer import (
    INDENT,
    LITERAL_TEXT,
    print_decl,
    print_expr,
    print_params,
    print_pattern,
    print_stmt,
    print_type,
    struct_header,
)
from dl.lang.record import record

MAX_LINE = 100  # a struct or one-statement function written on one line stays so if it fits in this
TRAILING = "\0"  # marks where a trailing comment starts, until `align_trailing_comments` places it


@record(frozen=True, slots=True)
class Comment:
    line: int
    text: str  # from `#` to the end of the line, trailing blanks removed
    alone: bool  # on a line of its own


@in_room
def format_source(source: str, path: str = "<input>") -> str:
    """The canonical layout of `source`, comments kept, with the line endings its first line has (a file
    written with CRLF keeps them, as black does). Raises `DiagnosticError` for a syntax error."""
    module = parse(source, path)
    comments = find_comments(source)
    blank_lines = {number for number, line in enumerate(source.splitlines(), start=1) if not line.strip()}
    token = LITERAL_TEXT.set(literal_spellings(module, source))
    try:
        formatted = Formatter(comments, blank_lines).module(module)
    finally:
        LITERAL_TEXT.reset(token)
    first = source.find("\n")
    return formatted.replace("\n", "\r\n") if first > 0 and source[first - 1] == "\r" else formatted


def find_comments(source: str) -> list[Comment]:
    """Every comment of the source, in order (a `#` inside a string literal is not one)."""
    found = []
    starts = [0] + [index + 1 for index, char in enumerate(source) if char == "\n"]
    for index, char in code_characters(source):
        if char == "#":
            line = bisect_right(starts, index)
            end = source.find("\n", index)
            text = source[index : end if end >= 0 else len(source)].rstrip()
            found.append(Comment(line, text, not source[starts[line - 1] : index].strip()))
    return found


def literal_spellings(module: ast.Module, source: str) -> dict[Span, str]:
    """The source text of every number literal that sits on one line, by span."""
    lines = source.splitlines()
    spellings = {}
    for node in ast.walk(module):
        literal = isinstance(node, (ast.IntLiteral, ast.FloatLiteral))
        if literal and node.span.line == node.span.end_line and 0 < node.span.line <= len(lines):
            spellings[node.span] = lines[node.span.line - 1][node.span.column - 1 : node.span.end_column - 1]
    return spellings


class Formatter:
    def __init__(self, comments: list[Comment], blank_lines: set[int]) -> None:
        self.comments = comments
        self.next = 0  # the first comment not yet placed
        self.blank_lines = blank_lines

    # -------------------------------------------------------------- comments
    def before(self, line: int, depth: int) -> list[str]:
        """The comments that come before source line `line`, as lines indented to `depth`; a blank line
        between two of them, or between the last and `line`, is kept."""
        out: list[str] = []
        last: int | None = None
        while self.next < len(self.comments) and self.comments[self.next].line < line:
            comment = self.comments[self.next]
            if last is not None and self.blank_between(last, comment.line):
                out.append("")
            out.append(INDENT * depth + comment.text)
            last = comment.line
            self.next += 1
        if last is not None and self.blank_between(last, line) and line < 10**9:
            out.append("")
        return out

    def blank_between(self, first: int, second: int) -> bool:
        return any(first < number < second for number in self.blank_lines)

    def trailing(self, line: int) -> str:
        """The comment after the code on `line`, if any."""
        if self.next < len(self.comments) and self.comments[self.next].line == line:
            self.next += 1
            return TRAILING + self.comments[self.next - 1].text
        return ""

    # -------------------------------------------------------------- declarations
    def module(self, module: ast.Module) -> str:
        """Declarations one blank line apart, except a run of `import`s or of `const`s written on
        consecutive lines, which stays together."""
        text = ""
        previous: ast.Decl | None = None
        for decl in module.decls:
            lines = self.before(decl.span.line, 0)
            lines += self.declaration(decl)
            if previous is not None:
                text += "\n" if self.grouped(previous, decl) and not lines[0].lstrip().startswith("#") else "\n\n"
            text += "\n".join(lines)
            previous = decl
        rest = self.before(10**9, 0)
        if rest:
            text += ("\n\n" if text else "") + "\n".join(rest)
        return align_trailing_comments(text) + ("\n" if text else "")

    def grouped(self, previous: ast.Decl, decl: ast.Decl) -> bool:
        same_kind = isinstance(previous, ast.Import) and isinstance(decl, ast.Import)
        same_kind = same_kind or (isinstance(previous, ast.Const) and isinstance(decl, ast.Const))
        return same_kind and not self.blank_between(previous.span.end_line, decl.span.line)

    def declaration(self, decl: ast.Decl) -> list[str]:
        match decl:
            case ast.FnDecl():
                return self.function(decl, 0)
            case ast.StructDecl(fields=fields) if fields:
                header = struct_header(decl)
                one_line = f"struct {header} {{ {', '.join(f'{f.name}: {print_type(f.type)}' for f in fields)} }}"
                if decl.span.line == decl.span.end_line and len(one_line) <= MAX_LINE:
                    return [one_line + self.trailing(decl.span.line)]  # written on one line and fits: kept so
                lines = [f"struct {header} {{" + self.trailing(decl.span.line)]
                for item in fields:
                    lines += self.before(item.span.line, 1)
                    text = f"{INDENT}{item.name}: {print_type(item.type)}"
                    lines.append(text + self.trailing(item.span.end_line))
                lines += self.before(decl.span.end_line, 1)
                lines.append("}" + self.trailing(decl.span.end_line))
                return lines
        return self.simple(print_decl(decl), decl.span, 0, decl)

    def function(self, decl: ast.FnDecl, depth: int) -> list[str]:
        result = f" -> {print_type(decl.result)}" if decl.result else ""
        header = f"fn {decl.name}({print_params(decl.params)}){result}"
        body = decl.body.body
        if decl.span.line == decl.span.end_line and len(body) == 1 and not self.comment_before(decl.span.end_line):
            one_line = f"{INDENT * depth}{header} {{ {print_stmt(body[0], depth)} }}"
            if "\n" not in one_line and len(one_line) <= MAX_LINE:
                return [one_line + self.trailing(decl.span.line)]  # a one-line function that fits stays one line
        return self.with_block(header, decl.body, decl.span.line, depth, decl.span.end_line)

    # -------------------------------------------------------------- statements
    def with_block(
        self, header: str, block: ast.Block, header_line: int, depth: int, end_line: int, continued: bool = False
    ) -> list[str]:
        """`header {`, the block's statements one level deeper, then `}` (or `header {}` when empty), with the
        comment after the `}`, unless the block is `continued` (an `else` follows: the comment goes into it)."""
        if not block.body and not self.comment_before(end_line):
            return [INDENT * depth + header + " {}" + ("" if continued else self.trailing(end_line))]
        lines = [INDENT * depth + header + " {" + self.trailing(header_line)]
        lines += self.statements(block.body, depth + 1)
        lines += self.before(end_line, depth + 1)
        lines.append(INDENT * depth + "}" + ("" if continued else self.trailing(end_line)))
        return lines

    def comment_before(self, line: int) -> bool:
        return self.next < len(self.comments) and self.comments[self.next].line < line

    def statements(self, body: tuple[ast.Stmt, ...], depth: int) -> list[str]:
        lines: list[str] = []
        previous_end: int | None = None
        for stmt in body:
            start = stmt.span.line
            first_comment = self.comments[self.next].line if self.comment_before(start) else start
            if previous_end is not None and any(previous_end < n < first_comment for n in self.blank_lines):
                lines.append("")
            lines += self.before(start, depth)
            lines += self.statement(stmt, depth)
            previous_end = stmt.span.end_line
        return lines

    def statement(self, stmt: ast.Stmt, depth: int) -> list[str]:
        match stmt:
            case ast.FnDecl():
                return self.function(stmt, depth)
            case ast.If():
                return self.if_statement(stmt, depth)
            case ast.While(cond=cond, body=body):
                return self.with_block(f"while {print_expr(cond)}", body, stmt.span.line, depth, body.span.end_line)
            case ast.For(pattern=pattern, iterable=iterable, body=body):
                if isinstance(iterable, ast.Range):
                    over = f"{print_expr(iterable.start)}..{print_expr(iterable.stop)}"
                else:
                    over = print_expr(iterable)
                header = f"for {print_pattern(pattern)} in {over}"
                return self.with_block(header, body, stmt.span.line, depth, body.span.end_line)
        return self.simple(print_stmt(stmt, depth), stmt.span, depth, stmt)

    def simple(self, text: str, span: Span, depth: int, stmt: ast.Stmt | ast.Decl | None = None) -> list[str]:
        """A statement printed on one line (or, when that is longer than MAX_LINE, with its outermost call
        or literal one item per line): comments from inside it go on lines of their own before it, in
        order, and one on its last line stays at its end."""
        inside = []
        while self.next < len(self.comments) and self.comments[self.next].line < span.end_line:
            inside.append(INDENT * depth + self.comments[self.next].text)
            self.next += 1
        lines = [INDENT * depth + text]
        if len(lines[0]) > MAX_LINE and stmt is not None:
            lines = wrapped_statement(stmt, depth) or lines
        lines[-1] += self.trailing(span.end_line)
        return [*inside, *lines]

    def if_statement(self, stmt: ast.If, depth: int, prefix: str = "") -> list[str]:
        lines = self.with_block(
            f"{prefix}if {print_expr(stmt.cond)}",
            stmt.then,
            stmt.span.line,
            depth,
            stmt.then.span.end_line,
            continued=stmt.orelse is not None,
        )
        if stmt.orelse is None:
            return lines
        closing = lines.pop()  # `}` (or the whole `if ... {}`), continued by ` else`
        if isinstance(stmt.orelse, ast.If):
            rest = self.if_statement(stmt.orelse, depth, prefix="")
            return [*lines, closing + " else " + rest[0].lstrip(), *rest[1:]]
        rest = self.with_block("else", stmt.orelse, stmt.orelse.span.line, depth, stmt.orelse.span.end_line)
        return [*lines, closing + " " + rest[0].lstrip(), *rest[1:]]


def align_trailing_comments(text: str) -> str:
    """Trailing comments two spaces after their code; on consecutive lines that each end in one, in one
    column (two spaces after the longest code of the run)."""
    lines = text.split("\n")
    out: list[str] = []
    run: list[tuple[str, str]] = []

    def flush() -> None:
        if run:
            width = max(len(code) for code, _ in run) if len(run) > 1 else len(run[0][0])
            out.extend(f"{code.ljust(width)}  {comment}" for code, comment in run)
            run.clear()

    for line in lines:
        if TRAILING in line:
            code, comment = line.split(TRAILING, 1)
            run.append((code, comment))
        else:
            flush()
            out.append(line)
    flush()
    return "\n".join(out)


def wrapped_statement(stmt, depth: int) -> list[str] | None:
    """A statement too long for one line, with the call or literal that is its value split one item per
    line; None when its value is not one (it then stays long)."""
    match stmt:
        case ast.Let(pattern=pattern, annotation=annotation, value=value):
            typed = f": {print_type(annotation)}" if annotation else ""
            head = f"let {print_pattern(pattern)}{typed} = "
        case ast.Assign(target=target, op=op, value=value):
            head = f"{print_expr(target)} {op} "
        case ast.Return(value=value) if value is not None:
            head = "return "
        case ast.ExprStmt(expr=value):
            head = ""
        case ast.Const(name=name, annotation=annotation, value=value):
            typed = f": {print_type(annotation)}" if annotation else ""
            head = f"const {name}{typed} = "
        case _:
            return None
    return wrapped(value, head, depth)


def wrapped(expr: ast.Expr, head: str, depth: int, sizes: dict[int, int] | None = None) -> list[str] | None:
    """`head` + `expr` over several lines: the items of its outermost brackets one per line, each wrapped
    again if still too long. `sizes` (of `expr`'s subtrees, by id) spares printing what cannot fit."""
    sizes = subtree_sizes(expr) if sizes is None else sizes
    # Every node prints at least one character of its own: a subtree of more nodes than a line has
    # characters never fits, and is not printed only to find that out (deep nesting would make it quadratic).
    if sizes[id(expr)] <= MAX_LINE:
        one_line = INDENT * depth + head + print_expr(expr)
        if len(one_line) <= MAX_LINE:
            return [one_line]
    match expr:
        case ast.Call(func=func, args=args, keywords=keywords):
            opening, closing = print_expr(func) + "(", ")"
            items = [("", a) for a in args] + [(f"{k.name}=", k.value) for k in keywords]
        case ast.StructLiteral(type=struct, fields=fields):
            opening, closing = print_expr(struct) + " {", "}"
            items = [(f"{f.name}: ", f.value) for f in fields]
        case ast.TensorLiteral(items=values):
            opening, closing = "[", "]"
            items = [("", value) for value in values]
        case ast.TupleLiteral(items=values) if len(values) > 1:
            opening, closing = "(", ")"
            items = [("", value) for value in values]
        case _:
            return None
    lines = [INDENT * depth + head + opening]
    for label, node in items:
        inner = wrapped(node, label, depth + 1, sizes) or [INDENT * (depth + 1) + label + print_expr(node)]
        inner[-1] += ","
        lines += inner
    lines.append(INDENT * depth + closing)
    return lines


def subtree_sizes(expr: ast.Expr) -> dict[int, int]:
    """The number of nodes under each node of `expr` (itself included), by id; found without recursion."""
    sizes: dict[int, int] = {}
    order: list = []
    waiting = [expr]
    while waiting:
        node = waiting.pop()
        order.append(node)
        waiting.extend(ast.children(node))
    for node in reversed(order):  # children before their parents
        sizes[id(node)] = 1 + sum(sizes[id(child)] for child in ast.children(node))
    return sizes
