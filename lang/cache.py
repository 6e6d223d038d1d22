"""DL's cache directory and its entries: files that are checked when read and written atomically.

Two things are cached: the parse table (lang/tables.py, `parse/`) and the LLVM backend's object code
(codegen/cache.py, `llvm/`). An entry is a header line naming its kind, the CRC-32 of its contents
(zlib's, in hexadecimal), a newline, then the contents. It is written to a temporary file beside it and renamed, so a
reader never sees half an entry, and a damaged one (truncated, changed, or anything else found at its
path) fails the check and is ignored, never used.
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path

from dl.lang.files import read_bytes, write_atomically

DIGEST_SIZE = 8  # a hexadecimal CRC-32

# A CRC-32 rather than a cryptographic hash: it catches a truncated or changed entry as surely, and zlib is
# imported in a fraction of the time hashlib takes (OpenSSL's library is loaded), which every run would pay
# for its parse table (bench/startup.py). An entry is not a secret to keep from whoever can write the cache.


def checksum(contents: bytes) -> bytes:
    return b"%08x" % zlib.crc32(contents)


def cache_directory() -> Path | None:
    """`$DL_CACHE_DIR`, else `$XDG_CACHE_HOME/dl`, else `~/.cache/dl`; None (no cache) when none is set and the
    home directory is unknown (a user with no entry in the password database), rather than a directory
    named `~` in the current one."""
    explicit = os.environ.get("DL_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME")
    if base:
        return Path(base) / "dl"
    home = Path(os.path.expanduser("~"))
    return home / ".cache" / "dl" if home.is_absolute() else None


def read_entry(path: Path, magic: bytes) -> bytes | None:
    """The contents of the entry at `path`, or None when there is none, or it is not a whole `magic` entry."""
    try:
        data = read_bytes(path)  # a regular file only: never a pipe or a device found at the path
    except OSError:
        return None
    header = len(magic) + DIGEST_SIZE + 1
    if not data.startswith(magic) or len(data) <= header:
        return None
    digest, contents = data[len(magic) : header - 1], data[header:]
    if checksum(contents) != digest:
        return None
    return contents


def write_entry(path: Path, magic: bytes, contents: bytes) -> bool:
    """Write an entry atomically (lang/files.py); False (and nothing written) when the cache cannot be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, magic + checksum(contents) + b"\n" + contents)
    except OSError:
        return False
    return True
