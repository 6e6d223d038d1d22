"""Writing files atomically: a temporary file beside the target, then a rename.

An interrupted write leaves the old file whole. The file ends with the permissions it had, or, if it is
new, those of any new file (0666 less the umask): `tempfile.mkstemp` makes its file 0600, which must not
leak into what the user keeps.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary path beside `path` to write; when the block ends without an exception it replaces `path`,
    otherwise it is removed."""
    directory = path.parent if str(path.parent) else Path(".")
    handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix or ".tmp", dir=directory)
    os.close(handle)
    temporary = Path(name)
    try:
        yield temporary
        os.chmod(temporary, mode_for(path))
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str) -> None:
    """Replace `path`'s contents with `text` (UTF-8), atomically."""
    with replacing(path) as temporary:
        temporary.write_text(text, encoding="utf-8")


def mode_for(path: Path) -> int:
    """The permissions `path` has, or those a new file gets (0666 less the umask) when it does not exist."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return 0o666 & ~current_umask()


def current_umask() -> int:
    mask = os.umask(0)  # the only way to read it is to set it; put it back at once
    os.umask(mask)
    return mask
