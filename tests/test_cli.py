"""The command line: options before or after the command, usage errors, warnings before running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT

HELLO = (ROOT / "examples" / "hello.out").read_text()


@pytest.mark.parametrize(
    "argv",
    [
        ("examples/hello.dl",),
        ("run", "examples/hello.dl"),
        ("--backend", "interp", "examples/hello.dl"),
        ("--backend", "interp", "run", "examples/hello.dl"),
        ("--backend=interp", "run", "examples/hello.dl"),
        ("run", "--backend", "interp", "examples/hello.dl"),
    ],
)
def test_options_may_come_before_or_after_the_command(dlrun, argv: tuple[str, ...]) -> None:
    assert dlrun(*argv) == (0, HELLO, "")


def test_explain_backend_on_the_interpreter_says_what_it_explains(dlrun) -> None:
    assert dlrun("--explain-backend", "examples/hello.dl") == (
        0,
        HELLO,
        "--explain-backend: the interpreter runs every function; it explains what `--backend llvm` compiles\n",
    )


@pytest.mark.parametrize("argv", [("run",), ("--backend", "interp"), ("check",)])  # `dlrun` alone: the REPL
def test_a_missing_file_is_a_usage_error(dlrun, argv: tuple[str, ...]) -> None:
    status, out, err = dlrun(*argv)
    assert (status, out) == (2, "")
    assert err.startswith("usage: dlrun")


def test_options_after_the_file_are_main_s_and_the_error_says_where_they_go(dlrun) -> None:
    status, out, err = dlrun("examples/hello.dl", "--backend", "llvm")
    assert (status, out) == (2, "")
    assert err == (
        "dlrun: error: `main` takes 0 arguments, 2 given on the command line "
        "(dlrun's options go before the file: `dlrun --backend llvm FILE.dl`)\n"
    )


@pytest.mark.parametrize(
    ("args", "shown"),
    [(("--", "--lr", "3"), "[--lr] [3]"), (("--",), "[] [b]"), (("x", "--"), "[x] [--]"), (("--", "--"), "[--] [b]")],
)
def test_a_separator_right_after_the_file_is_dropped_and_any_other_word_is_main_s(
    run_dl, args: tuple[str, ...], shown: str
) -> None:
    source = 'fn main(a = "", b = "b") {\n    print(f"[{a}] [{b}]")\n}\n'
    assert run_dl(source, list(args)) == (0, shown + "\n", "")


@pytest.mark.parametrize(
    "argv", [("--backend", "llvm", "check"), ("check", "--backend", "llvm"), ("fmt", "--no-cache")]
)
def test_an_option_of_running_given_to_another_command_says_so(dlrun, argv: tuple[str, ...]) -> None:
    status, out, err = dlrun(*argv, "examples/hello.dl")
    command = next(word for word in argv if not word.startswith("-") and word != "llvm")
    option = next(word for word in argv if word.startswith("--"))
    assert (status, out) == (2, "")
    assert err.endswith(f"dlrun {command}: error: `{option}` applies to running a program, not to `dlrun {command}`\n")


def test_an_onnx_output_without_onnx_is_a_usage_error(dlrun, tmp_path: Path) -> None:
    args = ("export", "examples/hello.dl", "--fn", "main", "--weights", "w.safetensors", "-o", str(tmp_path / "m.onnx"))
    status, out, err = dlrun(*args)
    assert (status, out) == (2, "")
    assert (
        err == f"dlrun: error: `-o {tmp_path / 'm.onnx'}` names an ONNX model: add `--onnx` (a package is a `.dlpkg`)\n"
    )
    assert not (tmp_path / "m.onnx").exists()


def test_an_onnx_model_under_a_package_s_name_is_a_usage_error(dlrun, tmp_path: Path) -> None:
    args = ("export", "examples/hello.dl", "--fn", "main", "--weights", "w.safetensors", "--onnx")
    status, out, err = dlrun(*args, "-o", str(tmp_path / "m.dlpkg"))
    assert (status, out) == (2, "")
    assert err == (
        f"dlrun: error: `-o {tmp_path / 'm.dlpkg'}` names a package, and `--onnx` writes an ONNX model: "
        "name it `.onnx`\n"
    )


def test_runs_naming_a_file_is_a_usage_error_before_the_program_runs(dlrun, tmp_path: Path) -> None:
    (tmp_path / "prog.dl").write_text('fn main() {\n    print("ran")\n    log_metric("loss", 1.0)\n}\n')
    status, out, err = dlrun("--runs", str(tmp_path / "prog.dl"), str(tmp_path / "prog.dl"))
    assert (status, out) == (2, "")
    assert err == (
        f"dlrun: error: `--runs {tmp_path / 'prog.dl'}` is not a directory: each run that logs metrics gets a "
        "directory in it\n"
    )


def dlrun_process(*argv: str, **options) -> subprocess.Popen:
    """`dlrun` as its entry point (`dl:main`, pyproject.toml) runs it, in a process of its own."""
    command = [sys.executable, "-c", "import sys, dl; sys.exit(dl.main())", *argv]
    return subprocess.Popen(command, stderr=subprocess.PIPE, text=True, **options)


def test_closed_standard_streams_are_no_traceback(tmp_path: Path) -> None:
    """Started with stdout or stdin closed (a daemon's, `dlrun prog.dl >&-`), dlrun runs: output goes nowhere."""
    (tmp_path / "prog.dl").write_text("fn main() {\n    print(ones(3))\n}\n")
    for argv, closed in (((str(tmp_path / "prog.dl"),), 1), (("check", str(tmp_path / "prog.dl")), 1), (("repl",), 0)):
        process = dlrun_process(*argv, preexec_fn=lambda closed=closed: os.close(closed))
        _, err = process.communicate(timeout=120)
        assert (process.returncode, err) == (0, ""), argv


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_output_to_a_full_disk_is_the_user_s_error_not_a_bug(tmp_path: Path) -> None:
    (tmp_path / "prog.dl").write_text("fn main() {\n    for i in 0..100000 {\n        print(i)\n    }\n}\n")
    for argv in ((str(tmp_path / "prog.dl"),), ("check", str(tmp_path / "prog.dl"))):
        with open("/dev/full", "w") as full:
            process = dlrun_process(*argv, stdout=full)
            _, err = process.communicate(timeout=120)
        assert (process.returncode, err) == (1, "dlrun: error: cannot write the output: No space left on device\n")
    with open("/dev/full", "w") as full:  # a REPL reading a script, its output to a file
        process = dlrun_process("repl", stdin=subprocess.PIPE, stdout=full)
        _, err = process.communicate("print(1)\n", timeout=120)
    assert (process.returncode, err) == (1, "dlrun: error: cannot write the output: No space left on device\n")


def test_ctrl_c_while_dl_is_loading_is_an_interrupt_not_a_traceback() -> None:
    """The entry point imports the command line inside its handler: an interrupt then is status 130."""
    command = (
        "import sys, dl\n"
        "class Interrupting:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'dl.cli':\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Interrupting())\n"
        "sys.exit(dl.main())\n"
    )
    done = subprocess.run([sys.executable, "-c", command, "check", "x.dl"], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (130, "", "dlrun: interrupted\n")


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_or_sighup_during_saves_stops_and_leaves_the_target_whole(tmp_path: Path, number: int) -> None:
    """`timeout`, a scheduler's pre-emption or a closed terminal stop dlrun as Ctrl-C does: a save in progress
    removes its temporary file and the checkpoint is the last one written whole."""
    from safetensors.numpy import load_file

    (tmp_path / "prog.dl").write_text(
        "fn main() {\n    let w = randn(1000, 1000, seed=0)\n    let i = 0\n    while true {\n"
        '        save("w.safetensors", (w, float(i)))\n        i += 1\n    }\n}\n'
    )
    process = dlrun_process(str(tmp_path / "prog.dl"), cwd=tmp_path, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not (tmp_path / "w.safetensors").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    process.send_signal(number)
    _, err = process.communicate(timeout=60)
    assert (process.returncode, err) == (128 + number, f"dlrun: stopped by {signal.Signals(number).name}\n")
    saved = load_file(str(tmp_path / "w.safetensors"))
    assert saved["0"].shape == (1000, 1000)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prog.dl", "w.safetensors"]


def test_a_file_named_without_its_extension_is_suggested_with_it(dlrun) -> None:
    status, out, err = dlrun("examples/hello")
    assert (status, out) == (1, "")
    assert err.startswith(
        "error[E0404]: cannot read `examples/hello`: no such file (did you mean `examples/hello.dl`?)"
    )


def test_a_program_on_standard_input_is_pointed_to_the_repl(tmp_path: Path) -> None:
    """`dlrun -` and `dlrun /dev/stdin` read no program (a file's imports are beside it, a pipe is not read
    twice): the help says that `dlrun repl` reads standard input."""
    for name in ("-", "/dev/stdin"):
        done = subprocess.run(
            [sys.executable, "-c", "import sys, dl; sys.exit(dl.main())", name],
            input="fn main() { print(1) }\n",
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 1
        assert done.stderr.splitlines()[-1] == (
            "  = help: a program is read from a file; `dlrun repl` reads DL from standard input, entry by entry"
        )


def test_a_module_beside_the_program_that_takes_a_standard_module_s_name_is_named(
    dlrun, tmp_path: Path, monkeypatch
) -> None:
    (tmp_path / "data.dl").write_text("fn load_mine() -> i64 {\n    return 1\n}\n")
    (tmp_path / "main.dl").write_text("import data\n\nfn main() {\n    print(data.split(digits(), 0.8, 0))\n}\n")
    monkeypatch.chdir(tmp_path)
    status, out, err = dlrun("main.dl")
    assert (status, out) == (1, "")
    assert err.startswith("error[E0207]: module `data` has no member `split`\n --> main.dl:4:11")
    assert "`data` is `data.dl`, a file beside this one, which takes the place of the standard library's `data`" in err


def test_help_names_every_command_and_every_flag_their_parsers_define(dlrun) -> None:
    from dl.cli import SUBCOMMANDS, parser, subcommand_parser

    status, out, err = dlrun("--help")
    assert (status, err) == (0, "")
    commands = {name: subcommand_parser(name) for name in SUBCOMMANDS}
    for name, command in commands.items():
        assert f"\n  dlrun {name}" in out, f"`dlrun --help` does not list `dlrun {name}`"
        assert command.description in " ".join(out.split())  # wrapped to the help's width
    for command in [parser(), *commands.values()]:
        for action in command._actions:
            for flag in action.option_strings:
                assert flag in out, f"`dlrun --help` does not name `{command.prog} {flag}`"


def test_warnings_are_printed_before_the_program_runs(dlrun, tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "wide.dl").write_text("fn main() {\n    print(ones(2) + zeros(2, dtype=f64))\n}\n")
    monkeypatch.chdir(tmp_path)
    status, out, err = dlrun("wide.dl")
    assert (status, out) == (0, "[1. 1.]\n")
    assert err.startswith("warning[W0301]: f32 is widened to f64 in `+`: f32[2] + f64[2]\n --> wide.dl:2:11")


def test_check_types_prints_signatures_in_declaration_order(dlrun) -> None:
    status, out, err = dlrun("check", "--types", "examples/newton.dl")
    assert (status, err) == (0, "")
    assert out.splitlines() == [
        "fn newton_sqrt(a: f64, tol: f64) -> (f64, i64)",
        "fn newton(f: fn(x), df: fn(x), x0: f64, tol: f64, max_steps: i64) -> (f64, i64)",
        "fn newton(f: fn(x), df: fn(x), x0: f32, tol: f32, max_steps: i64) -> (f32, i64)",
        "fn main() -> ()",
    ]


LAYERS = """\
struct Linear[I, O] { w: f32[I, O], b: f32[O] }
struct Plain { w: f32[2] }
fn make() -> Plain { return Plain { w: zeros(2) } }
fn apply(l: Linear[I, O], x: f32[B, I]) -> f32[B, O] { return x @ l.w + l.b }
"""

USES_LAYERS = """\
import layers as ly
struct Own { v: f32 }
fn forward(l: ly.Linear[3, 2], x: f32[B, 3]) -> f32[B, 2] { return ly.apply(l, x) }
fn both() -> (ly.Plain, Own) { return (ly.make(), Own { v: 1.0 }) }
fn apply(g: fn(ly.Plain) -> f32) -> f32 { return g(ly.make()) }
fn main() {
    print(forward(ly.Linear { w: zeros(3, 2), b: zeros(2) }, ones(4, 3)), both()[1].v)
}
"""


def test_check_types_names_another_module_s_structs_as_the_file_does(dlrun, tmp_path: Path, monkeypatch) -> None:
    """`ly.Linear[3, 2]`, as the file writes it (and could paste back), not `Linear[3, 2]`, which names nothing
    there; the file's own structs stay unqualified."""
    (tmp_path / "layers.dl").write_text(LAYERS)
    (tmp_path / "model.dl").write_text(USES_LAYERS)
    monkeypatch.chdir(tmp_path)
    status, out, err = dlrun("check", "--types", "model.dl")
    assert (status, err) == (0, "")
    assert out.splitlines() == [
        "fn forward(l: ly.Linear[3, 2], x: f32[B, 3]) -> f32[B, 2]",
        "fn both() -> (ly.Plain, Own)",
        "fn apply(g: fn(ly.Plain) -> f32) -> f32",
        "fn main() -> ()",
    ]


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.dl")), ids=lambda p: p.name)
def test_every_example_checks_clean(dlrun, path: Path) -> None:
    assert dlrun("check", str(path.relative_to(ROOT))) == (0, "ok\n", "")


def test_check_reports_every_broken_declaration_and_checks_the_rest(dlrun, tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "multi.dl").write_text(
        "fn a( {\n}\nfn b() -> f32 {\n    return sum(ones(2) @ ones(3))\n}\n"
        "struct S { x f32 }\nfn main() { print(b()) }\n"
    )
    monkeypatch.chdir(tmp_path)
    status, out, err = dlrun("check", "multi.dl")
    assert (status, out) == (1, "")
    reported = [line for line in err.splitlines() if line.startswith(("error", " -->"))]
    assert reported == [
        "error[E0102]: expected a name or `)` after `(`, found `{`",
        " --> multi.dl:1:7",
        "error[E0302]: matmul inner dimensions differ: 2 vs 3",
        " --> multi.dl:4:16",
        "error[E0102]: expected `:` after `x`, found name `f32`",
        " --> multi.dl:6:14",
    ]
    status, _, err = dlrun("multi.dl")  # running stops at the first syntax error, before checking
    assert status == 1 and err.count("error[") == 1


def test_a_mistyped_command_is_named(dlrun) -> None:
    """`dlrun chek x.dl`: no file `chek`, and a command close to it: a usage error that names the command, not
    E0404 for a file nobody meant."""
    status, out, err = dlrun("chek", "x.dl")
    assert (status, out) == (2, "")
    assert err.endswith("dlrun: error: `chek` is no file and no command: did you mean `dlrun check`?\n")
    status, _, err = dlrun("model.dl")  # a program's name is not taken for a command
    assert status == 1 and "cannot read `model.dl`: no such file" in err


SEEDED = "fn main() {\n    print(randn(3), permutation(5))\n}\n"


@pytest.mark.parametrize("backend", ["interp", "llvm"])
def test_seed_starts_the_runs_random_stream(run_dl, backend: str) -> None:
    """`--seed N` is torch.manual_seed(N): the unseeded draws are those of `default_rng(N)`; without it, of 0;
    the option before the file, as every option."""
    for seed in (None, 0, 7):
        options = ("--backend", backend, *(("--seed", str(seed)) if seed is not None else ()))
        status, out, err = run_dl(SEEDED, options=options)
        generator = np.random.default_rng(seed or 0)
        normal, order = generator.standard_normal(3).astype(np.float32), generator.permutation(5)
        assert (status, err) == (0, "")
        assert out == f"{normal} {order}\n"


def test_a_seed_is_a_whole_number(dlrun) -> None:
    status, _, err = dlrun("--seed", "-1", "examples/train.dl")
    assert status == 2 and "argument --seed: expected a seed, a whole number 0 or more, found '-1'" in err
