"""Every backend accounts for every primitive (implemented, or refused with a reason), and
docs/primitives.md is the matrix generated from the table."""

from __future__ import annotations

from pathlib import Path

import pytest
from dl.lang.primitives import PRIMITIVES, Prim
from dl.support import backends, support_matrix

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("support", backends(), ids=lambda support: support.backend)
def test_backend_covers_every_primitive_once(support) -> None:
    assert support.problems() == []


def test_every_primitive_has_one_record() -> None:
    assert list(PRIMITIVES) == list(Prim)
    assert all(record.prim is prim and record.summary for prim, record in PRIMITIVES.items())


def test_interpreter_runs_every_primitive() -> None:
    (interpreter,) = [support for support in backends() if support.backend == "interp"]
    assert interpreter.implemented == frozenset(Prim)


def test_support_matrix_is_current() -> None:
    written = (ROOT / "docs" / "primitives.md").read_text(encoding="utf-8")
    assert written == support_matrix(), "run `python -m dl.support > docs/primitives.md`"
