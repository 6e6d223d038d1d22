"""The on-disk compile cache of the LLVM backend: object code by a key of everything it depends on.

An entry is the module's object code (`TargetMachine.emit_object`; codegen/llvm.py packs the two objects
of a module with `optnone` functions into one entry), loaded back with `ExecutionEngine.add_object_file`:
that skips LLVM's optimisation and code generation. The key is a hash of
the lowered IR (which reflects the source and the types), the compiler (`dl.__version__` and the text of
the code generator itself), llvmlite's LLVM version and the target (triple, CPU and its features). Entries
live in `cache_directory()/llvm/KEY.o`, as lang/cache.py writes and checks entries: written to a temporary
file and renamed, so a reader never sees half an entry; each starts with a hash of its contents, so a
corrupt or truncated one is ignored (and replaced when the code is compiled again), never loaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path

from dl.codegen import ir
from dl.lang.cache import read_entry, write_entry

MAGIC = b"DL object 2\n"


def cache_key(functions: list[ir.Function], target: str, llvm_version: str) -> str:
    """The key of the object code for `functions` on `target` (its triple, CPU and features)."""
    from dl import __version__

    digest = hashlib.sha256()
    for part in (__version__, compiler_fingerprint(), llvm_version, target):
        digest.update(part.encode() + b"\0")
    for function in functions:
        digest.update(ir.show(function).encode() + b"\0")
        digest.update(f"{len(function.sites)} sites\0".encode())  # they number the failures of later functions
        digest.update(f"workspace {function.own_workspace}\0".encode())  # allocated per call, or the host's
    return digest.hexdigest()


def compiler_fingerprint() -> str:
    """A hash of the code generator's own source: a changed compiler never reuses old code."""
    digest = hashlib.sha256()
    for name in ("ir.py", "llvm.py"):
        digest.update((Path(__file__).parent / name).read_bytes())
    return digest.hexdigest()


def entry_path(directory: Path, key: str, folder: str = "llvm") -> Path:
    return directory / folder / f"{key}.o"


MAX_ENTRIES = 2000  # beyond these, the least recently used entries are removed (each layout compiled
MAX_BYTES = 512 * 1024 * 1024  # by a program is an entry: without a bound the cache would only grow)


def load(directory: Path, key: str, folder: str = "llvm") -> bytes | None:
    """The object code stored under `key` (in `folder`: `llvm` for CPU objects, `cuda` for PTX), or None when there
    is none or it is damaged. A hit marks the entry as used now (the cache forgets the least recently used entries
    first)."""
    path = entry_path(directory, key, folder)
    code = read_entry(path, MAGIC)
    if code is not None:
        with contextlib.suppress(OSError):
            os.utime(path)
    return code


def store(directory: Path, key: str, code: bytes, folder: str = "llvm") -> None:
    """Write an entry atomically; a cache that cannot be written is silently not used."""
    path = entry_path(directory, key, folder)
    if write_entry(path, MAGIC, code):
        trim(path.parent)


def trim(folder: Path) -> None:
    """Remove the least recently used entries while there are more than `MAX_ENTRIES` or they take more
    than `MAX_BYTES`, down to nine tenths of the limit."""
    try:
        entries = [(entry.stat(), entry) for entry in folder.glob("*.o")]
    except OSError:
        return
    total = sum(info.st_size for info, _ in entries)
    if len(entries) <= MAX_ENTRIES and total <= MAX_BYTES:
        return
    entries.sort(key=lambda pair: pair[0].st_mtime)
    count = len(entries)
    for info, entry in entries:
        if count <= MAX_ENTRIES * 9 // 10 and total <= MAX_BYTES * 9 // 10:
            break
        with contextlib.suppress(OSError):
            entry.unlink()
            count -= 1
            total -= info.st_size
