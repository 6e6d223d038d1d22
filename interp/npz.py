"""Reading one array of a numpy `.npz` archive without running any of it and without trusting its headers.

An `.npz` archive is a zip file whose members are `.npy` arrays: a magic string, a
header (a Python literal naming the dtype, the shape and the memory order) and the raw
bytes. numpy's own loader is not used: given a member that is not an `.npy` array (a
raw pickle, say) it hands back the member's bytes, and it trusts a header's shape enough
to allocate it before reading. Here every member is checked first:

- it must start with the `.npy` magic string (a pickle never does; nothing is ever
  unpickled);
- its header must parse (numpy's `read_array_header_*`, which reads the literal with
  `ast.literal_eval`), with a dtype that holds no Python objects, is not structured and
  has items of some size, and a shape of non-negative sizes;
- the bytes the shape calls for must be in the member, before any are read.

Every problem raises `NpzError` with a message for the user.
"""

from __future__ import annotations

import math
import zipfile
import zlib
from typing import BinaryIO

import numpy as np
from numpy.lib import format as npy

READ_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, RuntimeError, ValueError)


class NpzError(Exception):
    """An archive or member that cannot be read as an array (the message says why)."""


def read_array(file: BinaryIO, name: str, path: str) -> np.ndarray:
    """The array `name` of the archive open as `file` (`path` names it in messages)."""
    archive = open_archive(file, path)
    members = {member.removesuffix(".npy"): member for member in archive.namelist()}
    if name not in members:
        names = ", ".join(f'"{n}"' for n in members) or "none"
        raise NpzError(f'"{path}" has no array "{name}" (its arrays: {names})')
    what = f'array "{name}" in "{path}"'
    try:
        return member_array(archive, archive.getinfo(members[name]), what)
    except READ_ERRORS as problem:  # the zip layer: a damaged, encrypted or oddly compressed member
        raise NpzError(f"{what} cannot be read: {problem}") from None


def read_arrays(file: BinaryIO, path: str) -> dict[str, np.ndarray]:
    """Every array of the archive open as `file`, by name (`path` names it in messages)."""
    archive = open_archive(file, path)
    arrays = {}
    for info in archive.infolist():
        name = info.filename.removesuffix(".npy")
        what = f'array "{name}" in "{path}"'
        try:
            arrays[name] = member_array(archive, info, what)
        except READ_ERRORS as problem:
            raise NpzError(f"{what} cannot be read: {problem}") from None
    return arrays


def open_archive(file: BinaryIO, path: str) -> zipfile.ZipFile:
    start = file.read(len(npy.MAGIC_PREFIX))
    file.seek(0)
    if start == npy.MAGIC_PREFIX:
        raise NpzError(f'"{path}" is a single .npy array, not a numpy .npz archive')
    try:
        return zipfile.ZipFile(file)
    except READ_ERRORS:
        raise NpzError(f'"{path}" is not a numpy .npz archive') from None


def member_array(archive: zipfile.ZipFile, info: zipfile.ZipInfo, what: str) -> np.ndarray:
    with archive.open(info) as stream:
        shape, fortran_order, dtype = read_header(stream, what)
        count = math.prod(shape)
        size = count * dtype.itemsize
        available = info.file_size - stream.tell()
        if size > available:
            raise NpzError(
                f"{what} is damaged: its header declares shape {list(shape)} of {dtype}, {size} bytes, "
                f"but it holds {max(available, 0)}"
            )
        data = stream.read(size)
    if len(data) < size:
        raise NpzError(f"{what} is damaged: it ends after {len(data)} of its {size} bytes")
    flat = np.frombuffer(data, dtype=dtype, count=count)
    return flat.reshape(shape, order="F" if fortran_order else "C").copy()


def read_header(stream: BinaryIO, what: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    """The shape, memory order and dtype of an `.npy` member, checked."""
    try:
        version = npy.read_magic(stream)
    except ValueError:
        raise NpzError(
            f"{what} is not a numpy array: it has no .npy header (it may be a pickle, which DL never loads)"
        ) from None
    readers = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}
    if version not in readers:
        raise NpzError(f"{what} is in .npy format version {version[0]}.{version[1]}, which DL does not read")
    try:
        shape, fortran_order, dtype = readers[version](stream)
    except (ValueError, SyntaxError, TypeError):  # numpy's messages name Python's parser: say it in words
        raise NpzError(f"{what} has a damaged .npy header: it is cut short, or not the header numpy writes") from None
    if dtype.hasobject:
        raise NpzError(f"{what} holds Python objects, which DL never unpickles")
    if dtype.fields is not None or dtype.subdtype is not None or dtype.itemsize == 0:
        raise NpzError(f"{what} holds {dtype} records, not numbers")
    if any(size < 0 for size in shape):
        raise NpzError(f"{what} has a damaged .npy header: a negative size in shape {list(shape)}")
    return shape, fortran_order, dtype
