"""docs/stdlib.md's signatures are what the checker infers for the stdlib's functions.

Most stdlib functions are unannotated, so that one function serves f32 and f64, any number of leading
batch axes, and any parameter struct: DL's types have no dtype, rank or tree variables to say so. Their
signatures are written in docs/stdlib.md instead, in the notation of its sections: `F` is f32 or f64, `...`
any number of leading axes, `T` a tree of float tensors and `S` a float scalar of its dtype. This test
keeps those signatures true. Each one becomes small generic probe functions, one per reading of the
notation (`F` as f32 and as f64, `...` as none, one and two leading axes of fresh dimension names, `T` as a
tuple of tensors with symbolic sizes), whose parameters have exactly the documented types and whose body
calls the stdlib function with them; the result type the checker infers for the call must be the
documented one, written the same way, dimension names included. An `i64` parameter that sizes the result
(`xavier(fan_in, ...) -> f32[fan_in, fan_out]`) is given a literal, which the result's shape must show.
Parameters with defaults are left to them. Every function that nn.dl and data.dl define is documented.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ROOT
from dl import lang

STDLIB_DOCS = ROOT / "docs" / "stdlib.md"
SPAN = re.compile(r"`(?P<name>\w+)\((?P<params>[^`]*)\) -> (?P<result>[^`]+)`")
DECLARATION = re.compile(r"^fn (\w+)\(", re.MULTILINE)
LEADING = [(), ("Lead0",), ("Lead0", "Lead1")]
# the documented signatures whose parameters the notation does not type, and why
UNTYPED = {"split": "`data` is any pair (x, y) of tensors with one leading size: its types are the caller's"}


@dataclass(frozen=True)
class Documented:
    module: str
    name: str
    params: tuple[tuple[str, str | None, bool], ...]  # name, type (None: untyped), has a default
    result: str

    def __str__(self) -> str:
        return f"{self.module}.{self.name}"


def section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def split_top_level(text: str) -> list[str]:
    """`text` cut at the commas outside brackets and parentheses."""
    parts, depth, current = [], 0, ""
    for character in text:
        if character in "[(":
            depth += 1
        elif character in "])":
            depth -= 1
        if character == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += character
    return [*parts, current.strip()] if current.strip() else parts


def parameter(text: str) -> tuple[str, str | None, bool]:
    declared, _, default = text.partition("=")
    name, _, annotation = declared.partition(":")
    return name.strip(), annotation.strip() or None, bool(default)


def documented(module: str, title: str) -> list[Documented]:
    """The signatures a section documents: those on its list items and headings."""
    found = []
    for line in section(STDLIB_DOCS.read_text(encoding="utf-8"), title).splitlines():
        if line.startswith(("- `", "### `")):
            for match in SPAN.finditer(line):
                params = tuple(parameter(p) for p in split_top_level(match["params"]))
                found.append(Documented(module, match["name"], params, match["result"].strip()))
    return found


SIGNATURES = [*documented("nn", "nn"), *documented("optim", "optim"), *documented("data", "data")]


@pytest.mark.parametrize("module", ["nn", "data"])
def test_every_function_of_the_module_is_documented(module: str) -> None:
    defined = DECLARATION.findall((ROOT / "stdlib" / f"{module}.dl").read_text(encoding="utf-8"))
    assert sorted(defined) == sorted(s.name for s in SIGNATURES if s.module == module)


def readings(signature: Documented) -> list[dict[str, str | tuple[str, ...]]]:
    """Each way to read the notation: f32 and f64 for `F` (and the dtype of `T` and `S`), and leading axes
    for `...` (at least one where a type is all leading axes, `F[...]`, as a scalar has no axis for
    `softmax` to run along)."""
    text = " ".join([*(t or "" for _, t, _ in signature.params), signature.result])
    leadings = [lead for lead in LEADING if lead or "[...]" not in text] if "..." in text else [()]
    dtypes = ("f32", "f64") if re.search(r"\b[FTS]\b", text) else ("f32",)
    return [{"F": dtype, "...": lead} for dtype, lead in itertools.product(dtypes, leadings)]


def read(annotation: str, reading: dict) -> str:
    """`annotation` in DL's own types: `F` the dtype, `...` the leading axes, `T` a tuple of tensors of
    symbolic sizes and `S` a scalar, both of the dtype; `nn`'s structs qualified."""
    dtype, leading = reading["F"], reading["..."]
    text = re.sub(r"\[\.\.\.(, )?", lambda m: "[" + ", ".join(leading) + (", " if leading and m[1] else ""), annotation)
    text = re.sub(r"\bT\b", f"({dtype}[Rows, Columns], {dtype}[Columns])", text)
    text = re.sub(r"\b[FS]\b", dtype, text)
    text = re.sub(r"\b(LSTM|GRU)\b", r"nn.\1", text)
    return re.sub(r"(\w+)\[\]", r"\1", text)  # `f32[]` is `f32`


def probe(signature: Documented, reading: dict, index: int) -> tuple[str, str]:
    """A generic function calling the documented one with arguments of the documented types, and the result
    type the docs promise for that call."""
    params, args = [], []
    expected = signature.result
    sizes = iter(range(5, 100, 2))
    for name, annotation, has_default in signature.params:
        if has_default:
            continue
        if annotation == "i64" and re.search(rf"\[[^\]]*\b{name}\b", signature.result):
            size = str(next(sizes))
            args.append(size)
            expected = re.sub(rf"\b{name}\b", size, expected)
            continue
        params.append(f"{name}: {read(annotation, reading)}")
        args.append(name)
    source = f"fn probe_{index}({', '.join(params)}) {{\n    return {signature}({', '.join(args)})\n}}\n"
    return source, read(expected, reading)


@pytest.mark.parametrize("signature", [s for s in SIGNATURES if s.name not in UNTYPED], ids=str)
def test_documented_signature_is_the_inferred_one(signature: Documented, tmp_path: Path) -> None:
    probes = [probe(signature, reading, index) for index, reading in enumerate(readings(signature))]
    path = tmp_path / "probe.dl"
    source = f"import {signature.module}\n\n" + "\n".join(source for source, _ in probes)
    typed = lang.check(source, str(path))
    assert not typed.errors, "\n".join(str(d) for d in typed.errors) + "\n" + source
    inferred = {s.name: str(s.result) for s in typed.signatures[str(path)]}
    for index, (_, expected) in enumerate(probes):
        assert inferred[f"probe_{index}"] == expected, probes[index][0]


def test_the_untyped_signatures_are_documented() -> None:
    assert {s.name for s in SIGNATURES if s.name in UNTYPED} == set(UNTYPED)
