"""Files DL reads and writes: regular files only, reads of bounded size, writes by atomic replacement.

Reading (`read_bytes`, `read_text`): a path that is not a regular file (a directory, a named
pipe, a device such as /dev/zero, a socket) is refused before anything is read from it, so
reading can neither hang nor run forever; a `limit` refuses files larger than that many
bytes (source files: `MAX_SOURCE_BYTES`).

Writing (`write_atomically`, or `replacing` for a writer that wants a path): the data goes
to a temporary file in the target's directory, is flushed to disk, then renamed over the
target, so the target holds either its old contents or the new ones, never a part. The
file keeps the permissions the target had, or gets a new file's (0666 less the umask). A
target the writer may not write (its permissions, or no write bit at all, which stops root
too) is refused, as opening it to write would be: the rename would replace it regardless. A
symbolic link is written through: its target is replaced, the link stays. A target that
exists but is not a regular file is refused, so that a device such as /dev/null is never
replaced by a file. The temporary file is named `.NAME.dl-PID-RANDOM.tmp` after the
target and the writing process; it is removed on every failure the process sees (a full
disk, no permission, Ctrl-C), and one left by a process that was killed is removed by the
next write of the same target once its writer is gone.
`append_text` appends to a regular file (or creates one). `shipped` is the path of a data file
installed inside one of DL's packages (the grammar, the stdlib's sources and data).

Every failure is an `OSError` whose `strerror` says what is wrong in words ("it is a named
pipe, not a regular file"); callers turn it into their own diagnostic.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import os
import re
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

MAX_SOURCE_BYTES = 16 * 1024 * 1024  # a .dl file or module; far beyond any real one (docs/cli.md)
WRITE_BITS = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH  # a file with none is read-only, even to root
STALE_AFTER_SECONDS = 60  # a temporary file of a gone writer is stale once untouched this long
KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class NotRegularFile(OSError):
    """The path names something other than a regular file."""


class TooLarge(OSError):
    """The file is larger than the reader allows."""


def shipped(package: str, name: str) -> Path:
    """The path of `name`, a data file installed beside the modules of `package` (`dl.stdlib`, `dl.grammar`).

    DL is installed as directories, so a package's files are plain files beside its `__init__.py`;
    read this way, a start does not import importlib.resources (6 ms of `dlrun hello.dl`)."""
    return Path(importlib.import_module(package).__file__).parent / name


def not_regular(mode: int, path: str | os.PathLike) -> NotRegularFile:
    kind = next((name for test, name in KINDS if test(mode)), "not a file")
    return NotRegularFile(errno.EINVAL, f"it is {kind}, not a regular file", str(path))


def size_text(count: int) -> str:
    return f"{count / (1024 * 1024):.0f} MiB" if count >= 1024 * 1024 else f"{count} bytes"


def too_large(size: int, limit: int, path: str | os.PathLike) -> TooLarge:
    return TooLarge(errno.EFBIG, f"it is larger than {size_text(limit)}, the most DL reads", str(path))


# ---------------------------------------------------------------------- reading


def open_regular(path: str | os.PathLike) -> BinaryIO:
    """The regular file `path`, open for reading (binary). Raises `OSError`: `NotRegularFile` for anything else."""
    mode = os.stat(path).st_mode  # before opening: opening a named pipe would wait for a writer
    if not stat.S_ISREG(mode):
        raise not_regular(mode, path)
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    file = os.fdopen(descriptor, "rb")
    opened = os.fstat(descriptor).st_mode  # what was opened: the path may have changed since
    if not stat.S_ISREG(opened):
        file.close()
        raise not_regular(opened, path)
    return file


def read_bytes(path: str | os.PathLike, limit: int | None = None) -> bytes:
    """The contents of the regular file `path`, of at most `limit` bytes. Raises `OSError`."""
    with open_regular(path) as file:
        size = os.fstat(file.fileno()).st_size
        if limit is not None and size > limit:
            raise too_large(size, limit, path)
        data = file.read() if limit is None else file.read(limit + 1)
    if limit is not None and len(data) > limit:  # it grew while being read
        raise too_large(len(data), limit, path)
    return data


def read_text(path: str | os.PathLike, limit: int | None = None) -> str:
    """The UTF-8 text of the regular file `path`. Raises `OSError`, or `UnicodeDecodeError`."""
    return read_bytes(path, limit).decode("utf-8")


# ---------------------------------------------------------------------- writing

TEMPORARY = re.compile(r"^\.(?P<name>.+)\.dl-(?P<pid>\d+)-[0-9a-f]+\.tmp$")


@contextmanager
def replacing(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path beside the target of `path` for the block to write; when the block ends without an
    exception the file there replaces the target (flushed to disk first, with the old file's permissions,
    or a new file's: 0666 less the umask), otherwise it is removed. Raises `OSError` (the target is then as
    it was, and no temporary file is left); the block is for writers that want a path (an archive, an
    image), `write_atomically` for data at hand."""
    target = Path(os.path.realpath(path))  # through symbolic links: the link stays, its target is replaced
    try:
        existing: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        existing = None
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        raise not_regular(existing.st_mode, path)
    if existing is not None and (not existing.st_mode & WRITE_BITS or not os.access(target, os.W_OK)):
        raise PermissionError(errno.EACCES, "it is read-only (`chmod u+w` it to let it be replaced)", str(path))
    remove_stale_temporaries(target)
    temporary = target.parent / f".{target.name}.dl-{os.getpid()}-{os.urandom(4).hex()}.tmp"
    os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666))
    try:
        yield temporary
        descriptor = os.open(temporary, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            if existing is not None:  # the new contents keep the old file's permissions
                os.fchmod(descriptor, stat.S_IMODE(existing.st_mode))
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        os.replace(temporary, target)
    except BaseException:  # a full disk, Ctrl-C, ...: never leave the temporary file behind
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise
    sync_directory(target.parent)


def write_atomically(path: str | os.PathLike, data: bytes | str) -> None:
    """Replace the contents of `path` with `data` (text is written as UTF-8), as `replacing` does. Raises
    `OSError`; then the target is as it was and no temporary file is left."""
    with replacing(path) as temporary:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(descriptor, "wb") as file:
            file.write(data.encode("utf-8") if isinstance(data, str) else data)


def remove_stale_temporaries(target: Path) -> None:
    """Remove the temporary files of earlier writes of `target` whose writing process is gone (killed before
    it could clean up) and that nothing has touched for `STALE_AFTER_SECONDS`."""
    prefix = f".{target.name}.dl-"
    try:
        names = [name for name in os.listdir(target.parent) if name.startswith(prefix)]
    except OSError:
        return
    for name in names:
        found = TEMPORARY.match(name)
        if found is None or found.group("name") != target.name or process_alive(int(found.group("pid"))):
            continue
        stale = target.parent / name
        with contextlib.suppress(OSError):
            if time.time() - os.lstat(stale).st_mtime > STALE_AFTER_SECONDS:
                os.remove(stale)


def process_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # it exists (another user's), or is no pid we can ask about: leave its files alone
    return True


def sync_directory(directory: Path) -> None:
    """Make a rename durable where the system allows opening a directory (POSIX)."""
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(descriptor)
    finally:
        os.close(descriptor)


def append_text(path: str | os.PathLike, text: str) -> None:
    """Append `text` to the regular file `path`, creating it if need be. Raises `OSError`."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = stat.S_IFREG
    if not stat.S_ISREG(mode):  # checked first: opening a named pipe without a reader would fail or wait
        raise not_regular(mode, path)
    descriptor = os.open(path, flags, 0o666)
    with os.fdopen(descriptor, "a", encoding="utf-8") as file:
        opened = os.fstat(file.fileno()).st_mode
        if not stat.S_ISREG(opened):
            raise not_regular(opened, path)
        file.write(text)
