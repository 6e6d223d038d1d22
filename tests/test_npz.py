"""`load_npz` reads archives whose members may be anything: each malformed member is a diagnostic (E0513)
that says what is wrong with it, nothing is ever unpickled, and nothing is allocated for what a header
merely claims. Members are generated of every kind of damage: a raw pickle (one whose unpickling would
make a directory, which must not appear), no or the wrong magic string, headers cut short, unreadable,
of an unknown version, of Python objects, of records, of negative or huge shapes, data cut short, a zip
member damaged on disk; and the valid kinds numpy writes (compressed, Fortran order, big-endian) still
load exactly."""

from __future__ import annotations

import io
import os
import pickle
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest
from dlharness import dl_error, dl_eval


class MakesDirectory:
    """Unpickling this makes a directory: the side effect a loader that unpickles would have."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (self.path,))


def npy_header(header: str, version: tuple[int, int] = (1, 0)) -> bytes:
    """A `.npy` magic string and `header` (padded as numpy pads it)."""
    text = header.encode("latin1")
    size_format = "<H" if version == (1, 0) else "<I"
    prefix = b"\x93NUMPY" + bytes(version)
    padding = 64 - (len(prefix) + struct.calcsize(size_format) + len(text) + 1) % 64
    text += b" " * padding + b"\n"
    return prefix + struct.pack(size_format, len(text)) + text


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=True)
    return buffer.getvalue()


def archive(path: Path, members: dict[str, bytes], compression: int = zipfile.ZIP_STORED) -> Path:
    with zipfile.ZipFile(path, "w", compression) as file:
        for name, data in members.items():
            file.writestr(name, data)
    return path


def load_error(path: Path, name: str = "x") -> str:
    (diagnostic,) = dl_error(f'load_npz(a, "{name}", rank=1)', str(path)).diagnostics
    assert diagnostic.code == "E0513", diagnostic
    return diagnostic.message


GOOD = npy_bytes(np.arange(4, dtype=np.float32))
HEADER = "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }"
MEMBERS = {
    "no magic": (b"just some bytes, no header at all", "is not a numpy array: it has no .npy header"),
    "wrong magic": (b"\x93NUMPX\x01\x00" + GOOD[8:], "is not a numpy array: it has no .npy header"),
    "magic cut short": (GOOD[:4], "is not a numpy array: it has no .npy header"),
    "header cut short": (GOOD[:20], "has a damaged .npy header"),
    "header not a literal": (
        npy_header("{'descr': '<f4', 'fortran_order': False, 'shape': __import__('os').getpid()}"),
        "has a damaged .npy header",
    ),
    "header missing a key": (npy_header("{'descr': '<f4', 'shape': (4,)}"), "has a damaged .npy header"),
    "unknown version": (npy_header(HEADER, (9, 0)) + GOOD[128:], "is in .npy format version 9.0"),
    "Python objects": (npy_bytes(np.array([{"a": 1}, None], dtype=object)), "holds Python objects"),
    "records": (npy_bytes(np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")])), "records, not numbers"),
    "empty items": (npy_header("{'descr': '|S0', 'fortran_order': False, 'shape': (10,), }"), "records, not numbers"),
    "negative shape": (
        npy_header("{'descr': '<f4', 'fortran_order': False, 'shape': (-4,), }") + b"\0" * 16,
        "a negative size in shape [-4]",
    ),
    "huge shape": (
        npy_header("{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000000,), }") + b"\0" * 16,
        "its header declares shape [1000000000000] of float64, 8000000000000 bytes, but it holds 16",
    ),
    "astronomical shape": (
        npy_header("{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904, 4611686018427387904), }"),
        "but it holds 0",
    ),
    "data cut short": (GOOD[:-4], "its header declares shape [4] of float32, 16 bytes, but it holds 12"),
}


@pytest.mark.parametrize("kind", list(MEMBERS))
@pytest.mark.parametrize("member", ["x.npy", "x"])
def test_a_malformed_member_is_a_diagnostic(kind: str, member: str, tmp_path: Path) -> None:
    data, expected = MEMBERS[kind]
    path = archive(tmp_path / "bad.npz", {member: data, "y.npy": GOOD})
    message = load_error(path)
    assert message.startswith(f'load_npz: array "x" in "{path}" '), message
    assert expected in message, message
    np.testing.assert_array_equal(dl_eval('load_npz(a, "y", rank=1)', str(path)), np.arange(4))  # the rest reads


def test_a_pickle_is_refused_and_never_unpickled(tmp_path: Path) -> None:
    marker = tmp_path / "made-by-unpickling"
    payload = pickle.dumps(MakesDirectory(str(marker)))
    pickle.loads(pickle.dumps(MakesDirectory(str(tmp_path / "proof"))))
    assert (tmp_path / "proof").is_dir()  # this payload does act when unpickled
    for member in ("x.npy", "x"):
        path = archive(tmp_path / f"pickled-{member}.npz", {member: payload})
        message = load_error(path)
        assert message == (
            f'load_npz: array "x" in "{path}" is not a numpy array: it has no .npy header '
            "(it may be a pickle, which DL never loads)"
        )
    assert not marker.exists()


def test_an_object_array_whose_pickle_acts_is_refused_before_it(tmp_path: Path) -> None:
    marker = tmp_path / "made-by-unpickling"
    path = archive(tmp_path / "objects.npz", {"x.npy": npy_bytes(np.array([MakesDirectory(str(marker))]))})
    assert load_error(path) == f'load_npz: array "x" in "{path}" holds Python objects, which DL never unpickles'
    assert not marker.exists()


def test_a_member_damaged_in_the_zip_is_a_diagnostic(tmp_path: Path) -> None:
    path = archive(tmp_path / "damaged.npz", {"x.npy": GOOD}, zipfile.ZIP_DEFLATED)
    data = bytearray(path.read_bytes())
    start = data.index(b"PK\x03\x04") + 30 + len("x.npy")  # the compressed bytes of the member
    data[start + 10 : start + 20] = b"\xff" * 10
    path.write_bytes(bytes(data))
    message = load_error(path)
    assert message.startswith(f'load_npz: array "x" in "{path}" cannot be read: '), message


@pytest.mark.parametrize(
    "array",
    [
        np.arange(12, dtype=np.float64).reshape(3, 4),
        np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4)),
        np.arange(12, dtype=">f4").reshape(3, 4),
        np.zeros((0, 4), dtype=np.float32),
    ],
    ids=["C order", "Fortran order", "big-endian", "empty"],
)
@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED], ids=["stored", "compressed"])
def test_valid_members_load_exactly(array: np.ndarray, compression: int, tmp_path: Path) -> None:
    path = archive(tmp_path / "good.npz", {"x.npy": npy_bytes(array)}, compression)
    loaded = dl_eval('load_npz(a, "x")', str(path))
    assert loaded.dtype == np.float32 and loaded.shape == array.shape
    np.testing.assert_array_equal(loaded, array.astype(np.float32))
