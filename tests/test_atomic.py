"""Atomic writes (lang/files.py): the old file stays whole on failure, and the file keeps its
permissions, or gets a new file's (0666 less the umask), never mkstemp's 0600."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from dl.lang import files


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_a_new_file_gets_the_permissions_the_umask_allows(tmp_path: Path, umask: int) -> None:
    previous = os.umask(umask)
    try:
        files.write_atomically(tmp_path / "new.txt", "text")
    finally:
        os.umask(previous)
    assert (tmp_path / "new.txt").read_text() == "text"
    assert mode(tmp_path / "new.txt") == 0o666 & ~umask


def test_a_replaced_file_keeps_its_permissions(tmp_path: Path) -> None:
    target = tmp_path / "kept.txt"
    target.write_text("old")
    target.chmod(0o640)
    files.write_atomically(target, "new")
    assert (target.read_text(), mode(target)) == ("new", 0o640)


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "kept.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError), files.replacing(target) as temporary:
        temporary.write_text("half")
        raise RuntimeError("interrupted")
    assert [p.name for p in tmp_path.iterdir()] == ["kept.txt"]
    assert target.read_text() == "old"
