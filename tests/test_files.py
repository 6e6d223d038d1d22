"""Every file DL reads or writes goes through dl.lang.files: only regular files are read (of bounded size, for
source), and writes replace their target atomically, through symbolic links, never onto a device, leaving
no temporary file behind on a failure they see and cleaning those of writers that were killed.

The reading tests generate the kinds of file that used to hang or crash (a directory, a named pipe, a
character device, a socket, a file over the size limit, a link to a device) and hand each to every reader:
`dlrun` and `dlrun check` (a source file), an import, `dlrun fmt`, `load_csv`, `load_npz`, `load` and
`dlrun plot`. Each read runs on a thread with a time limit, so a reader that hangs fails its test instead of
hanging the suite. The writing tests do the same for `save`, `dlrun fmt`, `dlrun plot -o`, `log_metric` and
the compile cache."""

from __future__ import annotations

import errno
import os
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from dl.codegen import cache
from dl.lang import files
from dl.lang.files import MAX_SOURCE_BYTES, write_atomically

# ---------------------------------------------------------------------- kinds of file


def make_kind(kind: str, path: Path) -> Path:
    """Make `path` a `kind` of file; returns `path`."""
    if kind == "directory":
        path.mkdir()
    elif kind == "named pipe":
        os.mkfifo(path)
    elif kind == "socket":
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
        SOCKETS.append(server)
    elif kind == "character device":
        path.symlink_to("/dev/zero")  # its target is what is read
    elif kind == "too large":
        with open(path, "wb") as file:
            file.truncate(MAX_SOURCE_BYTES + 1)  # sparse: nothing is written
    return path


SOCKETS: list[socket.socket] = []
REFUSED = {
    "directory": "it is a directory, not a regular file",
    "named pipe": "it is a named pipe, not a regular file",
    "socket": "it is a socket, not a regular file",
    "character device": "it is a character device, not a regular file",
}
KINDS = list(REFUSED)
FMT_LEFT_ALONE = "1 file left alone (errors above)\n"  # `dlrun fmt`'s summary of a file it cannot read


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A directory with a short path (a socket's path is limited to about 100 bytes)."""
    with tempfile.TemporaryDirectory(prefix="dl") as folder:
        yield Path(folder)
    for server in SOCKETS:
        server.close()
    SOCKETS.clear()


def within(seconds: float, action: Callable[[], object]) -> object:
    """`action()`, failing the test if it takes longer than `seconds` (a read that hangs)."""
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["value"] = action()
        except BaseException as failure:
            outcome["error"] = failure

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still running after {seconds} s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def program(folder: Path, body: str) -> str:
    path = folder / "main.dl"
    path.write_text(f"fn main() {{\n    {body}\n}}\n")
    return str(path)


# ---------------------------------------------------------------------- reading


@pytest.mark.parametrize("kind", [*KINDS, "too large"])
def test_a_source_file_that_is_not_a_small_regular_file_is_refused(kind: str, short_tmp: Path, dlrun) -> None:
    path = str(make_kind(kind, short_tmp / "prog.dl"))
    reason = REFUSED.get(kind, "it is larger than 16 MiB, the most DL reads")
    expected = f"error[E0404]: cannot read `{path}`: {reason}\n --> {path}:1:1\n"
    for command in ([path], ["check", path], ["grad", path, "--fn", "f"]):
        assert within(30, lambda command=command: dlrun(*command)) == (1, "", expected)
    # `dlrun fmt` reads a directory as the .dl files under it (none here), and ends with a summary
    formatted = (0, "", f"no .dl files in {path}\n") if kind == "directory" else (1, FMT_LEFT_ALONE, expected)
    assert within(30, lambda: dlrun("fmt", path)) == formatted


def test_a_byte_order_mark_is_not_part_of_the_source(tmp_path: Path, dlrun) -> None:
    path = tmp_path / "bom.dl"
    path.write_bytes(b"\xef\xbb\xbffn main() {\n    print(1 + 2)\n}\n")
    assert dlrun(str(path)) == (0, "3\n", "")


def test_a_source_that_is_not_utf_8_is_refused_with_where_it_stops_being(tmp_path: Path, dlrun) -> None:
    path = tmp_path / "latin1.dl"
    path.write_bytes('fn main() {\n    print("café")\n}\n'.encode("latin-1"))
    reason = "it is not UTF-8 text (byte 0xe9 at line 2, column 15)"
    assert dlrun(str(path)) == (1, "", f"error[E0404]: cannot read `{path}`: {reason}\n --> {path}:2:15\n")


def test_an_imported_module_over_the_size_limit_is_refused_at_its_import(short_tmp: Path, dlrun) -> None:
    make_kind("too large", short_tmp / "huge.dl")
    main = short_tmp / "main.dl"
    main.write_text("import huge\n\nfn main() {\n    print(1)\n}\n")
    status, _, err = within(30, lambda: dlrun(str(main)))
    reason = "it is larger than 16 MiB, the most DL reads"
    assert status == 1 and err.startswith(f"error[E0404]: cannot read `{short_tmp / 'huge.dl'}`: {reason}\n")
    assert f"--> {main}:1:1" in err


@pytest.mark.parametrize("kind", KINDS)
def test_an_imported_module_that_is_not_a_regular_file_is_not_one(kind: str, short_tmp: Path, dlrun) -> None:
    make_kind(kind, short_tmp / "odd.dl")
    main = short_tmp / "main.dl"
    main.write_text("import odd\n\nfn main() {\n    print(1)\n}\n")
    status, _, err = within(30, lambda: dlrun(str(main)))
    assert status == 1 and err.startswith("error[E0401]: no module named `odd`\n")
    assert f"= note: `{short_tmp / 'odd.dl'}` is there, but {REFUSED[kind]}: a module is a `.dl` file\n" in err


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "reader,code,message",
    [
        ('load_csv("{}")', "E0513", 'load_csv: cannot read "{}": {}'),
        ('load_npz("{}", "x")', "E0513", 'load_npz: cannot read "{}": {}'),
        ('load("{}", zeros(2))', "E0521", "load: cannot read checkpoint `{}`: {}"),
    ],
    ids=["load_csv", "load_npz", "load"],
)
def test_a_data_file_that_is_not_a_regular_file_is_refused(
    kind: str, reader: str, code: str, message: str, short_tmp: Path, dlrun
) -> None:
    path = make_kind(kind, short_tmp / "data")
    main = program(short_tmp, f"print({reader.format(path)})")
    status, out, err = within(30, lambda: dlrun(main))
    assert (status, out) == (1, "")
    assert err.startswith(f"error[{code}]: {message.format(path, REFUSED[kind])}\n"), err


@pytest.mark.parametrize("kind", KINDS)
def test_plot_refuses_metrics_that_are_not_a_regular_file(kind: str, short_tmp: Path, dlrun) -> None:
    pytest.importorskip("matplotlib")
    path = make_kind(kind, short_tmp / "metrics.jsonl")
    status, out, err = within(30, lambda: dlrun("plot", str(path), "-o", str(short_tmp / "curve.png")))
    if kind == "directory":  # `dlrun plot` reads a directory as a directory of runs
        refused = f"no runs in `{path}` (each run that calls log_metric() makes one)"
    else:
        refused = f"cannot read `{path}`: {REFUSED[kind]}"
    assert (status, out, err) == (1, "", f"dlrun plot: error: {refused}\n")


def test_reading_a_file_that_grows_past_the_limit_stops_at_the_limit(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "growing.dl"
    path.write_text("x" * 100)
    monkeypatch.setattr(files, "MAX_SOURCE_BYTES", 10)
    with pytest.raises(files.TooLarge):
        files.read_bytes(path, 10)
    assert files.read_bytes(path, 100) == b"x" * 100


# ---------------------------------------------------------------------- writing: what a target may be

SAVE = 'fn main() {{\n    save("{}", [1.0, 2.0])\n    print(load("{}", zeros(2)))\n}}\n'


def save_program(folder: Path, target: Path) -> str:
    path = folder / "main.dl"
    path.write_text(SAVE.format(target, target))
    return str(path)


@pytest.mark.parametrize("kind", ["directory", "named pipe", "socket"])
def test_save_refuses_a_target_that_is_not_a_regular_file_and_leaves_it(kind: str, short_tmp: Path, dlrun) -> None:
    target = make_kind(kind, short_tmp / "target")
    mode = os.lstat(target).st_mode
    status, _, err = within(30, lambda: dlrun(save_program(short_tmp, target)))
    assert status == 1
    assert err.startswith(f"error[E0521]: save: cannot write checkpoint `{target}`: {REFUSED[kind]}\n")
    assert os.lstat(target).st_mode == mode
    assert sorted(p.name for p in short_tmp.iterdir()) == ["main.dl", "target"]


def test_save_refuses_a_device_node_and_leaves_it(tmp_path: Path, dlrun) -> None:
    """A character device made in the test's own directory (like /dev/null: major 1, minor 3)."""
    node = tmp_path / "null"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, OSError) as problem:
        pytest.skip(f"cannot make a device node here: {problem}")
    status, _, err = dlrun(save_program(tmp_path, node))
    assert status == 1 and err.startswith(
        f"error[E0521]: save: cannot write checkpoint `{node}`: {REFUSED['character device']}"
    )
    assert stat.S_ISCHR(os.lstat(node).st_mode)


def test_save_writes_through_a_symbolic_link_to_its_target(tmp_path: Path, dlrun) -> None:
    real = tmp_path / "checkpoints" / "model.safetensors"
    real.parent.mkdir()
    real.write_bytes(b"old contents")
    link = tmp_path / "latest.safetensors"
    link.symlink_to(real)
    assert dlrun(save_program(tmp_path, link)) == (0, "[1. 2.]\n", "")
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_bytes() != b"old contents"
    assert sorted(p.name for p in real.parent.iterdir()) == ["model.safetensors"]


def test_save_through_a_dangling_link_creates_its_target(tmp_path: Path, dlrun) -> None:
    link = tmp_path / "latest.safetensors"
    link.symlink_to(tmp_path / "new.safetensors")
    assert dlrun(save_program(tmp_path, link)) == (0, "[1. 2.]\n", "")
    assert link.is_symlink() and (tmp_path / "new.safetensors").is_file()


def test_save_refuses_a_link_to_a_device(tmp_path: Path, dlrun) -> None:
    link = tmp_path / "null.safetensors"
    link.symlink_to("/dev/null")
    status, _, err = dlrun(save_program(tmp_path, link))
    assert status == 1 and f"`{link}`: {REFUSED['character device']}" in err
    assert link.is_symlink() and stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_replaced_file_keeps_its_permissions(tmp_path: Path) -> None:
    target = tmp_path / "secret.txt"
    target.write_text("old")
    target.chmod(0o600)
    write_atomically(target, "new")
    assert target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == 0o600


def test_a_read_only_file_is_not_replaced_by_save_fmt_or_export(tmp_path: Path, dlrun) -> None:
    """The rename would replace a file its permissions protect (even one without a write bit for root, who may
    write anything): save, fmt and export refuse it as opening it to write would, and leave it."""
    checkpoint = tmp_path / "kept.safetensors"
    checkpoint.write_bytes(b"old weights")
    source = tmp_path / "messy.dl"
    source.write_text("fn main() {\nprint(1)\n}\n")
    package = tmp_path / "model.dlpkg"
    package.write_bytes(b"old package")
    for target in (checkpoint, source, package):
        target.chmod(0o444)
    message = "it is read-only (`chmod u+w` it to let it be replaced)"
    status, _, err = dlrun(save_program(tmp_path, checkpoint))
    assert status == 1 and err.startswith(f"error[E0521]: save: cannot write checkpoint `{checkpoint}`: {message}\n")
    assert dlrun("fmt", str(source)) == (
        1,
        "1 file left alone (errors above)\n",
        f"dlrun fmt: error: cannot write `{source}`: {message}\n",
    )
    model = tmp_path / "model.dl"
    weights = tmp_path / "m.safetensors"
    model.write_text(
        "struct M { w: f32[2] }\nfn f(m: M, x: f32[2]) -> f32[2] { return m.w * x }\n"
        f'fn main() {{ save("{weights}", M {{ w: ones(2) }}) }}\n'
    )
    assert dlrun(str(model))[0] == 0
    status, _, err = dlrun("export", str(model), "--fn", "f", "--weights", str(weights), "-o", str(package))
    assert status == 1 and err.startswith(f"error[E0608]: cannot write `{package}`: {message}\n"), err
    assert (checkpoint.read_bytes(), source.read_text(), package.read_bytes()) == (
        b"old weights",
        "fn main() {\nprint(1)\n}\n",
        b"old package",
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "kept.safetensors",
        "m.safetensors",
        "main.dl",
        "messy.dl",
        "model.dl",
        "model.dlpkg",
    ]


def test_fmt_formats_through_a_symbolic_link(tmp_path: Path, dlrun) -> None:
    real = tmp_path / "real.dl"
    real.write_text("fn main() {\nprint(1)\n}\n")
    link = tmp_path / "link.dl"
    link.symlink_to(real)
    assert dlrun("fmt", str(link)) == (0, f"formatted {link}\n1 file formatted\n", "")
    assert link.is_symlink() and real.read_text() == "fn main() {\n    print(1)\n}\n"


def test_plot_refuses_to_replace_a_named_pipe(short_tmp: Path, dlrun) -> None:
    pytest.importorskip("matplotlib")
    metrics = short_tmp / "metrics.jsonl"
    metrics.write_text('{"name": "loss", "step": 0, "value": 1.0}\n')
    output = make_kind("named pipe", short_tmp / "curve.png")
    status, _, err = within(30, lambda: dlrun("plot", str(metrics), "-o", str(output)))
    assert (status, err) == (1, f"dlrun plot: error: cannot write `{output}`: {REFUSED['named pipe']}\n")
    assert stat.S_ISFIFO(os.lstat(output).st_mode)


def test_log_metric_refuses_a_metrics_file_that_is_a_named_pipe(short_tmp: Path, dlrun) -> None:
    metrics = make_kind("named pipe", short_tmp / "metrics.jsonl")
    main = program(short_tmp, 'log_metric("loss", 1.0)')
    status, _, err = within(30, lambda: dlrun("--metrics", str(metrics), main))
    assert status == 1 and f"cannot append to the metrics file `{metrics}`: {REFUSED['named pipe']}" in err


def test_the_compile_cache_leaves_an_entry_that_is_not_a_file_alone(short_tmp: Path) -> None:
    entry = cache.entry_path(short_tmp, "k" * 64)
    entry.parent.mkdir(parents=True)
    make_kind("named pipe", entry)
    within(30, lambda: cache.store(short_tmp, "k" * 64, b"code"))
    assert within(30, lambda: cache.load(short_tmp, "k" * 64)) is None
    assert stat.S_ISFIFO(os.lstat(entry).st_mode)


# ---------------------------------------------------------------------- writing: temporary files


def temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def gone_pid() -> int:
    """The pid of a process that has exited."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.mark.parametrize(
    "failure",
    ["full disk", "permission", "interrupt"],
)
def test_a_failed_write_leaves_the_target_and_no_temporary_file(failure: str, tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "model.safetensors"
    target.write_bytes(b"previous")
    problems = {
        "full disk": OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)),
        "permission": PermissionError(errno.EACCES, os.strerror(errno.EACCES)),
        "interrupt": KeyboardInterrupt(),
    }

    def fails(*arguments: object) -> None:
        raise problems[failure]

    monkeypatch.setattr(os, {"full disk": "fsync", "permission": "replace", "interrupt": "fsync"}[failure], fails)
    with pytest.raises(type(problems[failure])):
        write_atomically(target, b"new contents")
    monkeypatch.undo()
    assert target.read_bytes() == b"previous"
    assert temporaries(tmp_path) == []


def test_temporary_files_are_named_after_the_target_and_the_writer(tmp_path: Path, monkeypatch) -> None:
    seen = []
    real_replace = os.replace

    def watched(source: str, destination: str) -> None:
        seen.append(Path(source).name)
        real_replace(source, destination)

    monkeypatch.setattr(os, "replace", watched)
    write_atomically(tmp_path / "model.safetensors", b"data")
    (name,) = seen
    found = files.TEMPORARY.match(name)
    assert found and found.group("name") == "model.safetensors" and int(found.group("pid")) == os.getpid()


def test_stale_temporary_files_of_gone_writers_are_removed_by_the_next_write(tmp_path: Path) -> None:
    target = tmp_path / "model.safetensors"
    dead, alive = gone_pid(), os.getppid()
    old = time.time() - 2 * files.STALE_AFTER_SECONDS
    names = {
        "stale": f".model.safetensors.dl-{dead}-0badc0de.tmp",  # its writer is gone, and it is old: removed
        "fresh": f".model.safetensors.dl-{dead}-1badc0de.tmp",  # touched a moment ago: maybe still written
        "alive": f".model.safetensors.dl-{alive}-2badc0de.tmp",  # its writer runs
        "other target": f".other.safetensors.dl-{dead}-3badc0de.tmp",
        "not ours": f".model.safetensors.{dead}.tmp",
    }
    for label, name in names.items():
        (tmp_path / name).write_bytes(b"x" * 1000)
        if label != "fresh":
            os.utime(tmp_path / name, (old, old))
    write_atomically(target, b"data")
    assert target.read_bytes() == b"data"
    assert temporaries(tmp_path) == sorted(name for label, name in names.items() if label != "stale")


def test_a_save_killed_before_its_rename_is_cleaned_up_by_a_later_save(tmp_path: Path, dlrun) -> None:
    target = tmp_path / "model.safetensors"
    script = (
        "import os, signal\n"
        "from dl.lang import files\n"
        "os.fsync = lambda descriptor: os.kill(os.getpid(), signal.SIGKILL)\n"
        f"files.write_atomically({str(target)!r}, b'x' * 1000000)\n"
    )
    killed = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert killed.returncode == -9
    (left,) = temporaries(tmp_path)
    old = time.time() - 2 * files.STALE_AFTER_SECONDS
    os.utime(tmp_path / left, (old, old))
    assert dlrun(save_program(tmp_path, target)) == (0, "[1. 2.]\n", "")
    assert temporaries(tmp_path) == []
    np.testing.assert_array_equal(np.frombuffer(target.read_bytes()[-8:], np.float32), [1.0, 2.0])
