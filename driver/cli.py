"""`dlrun`: the command line.

    dlrun FILE.dl [ARGS...]     check, then run main(ARGS...)
    dlrun check FILE.dl         check only; print `ok` or every diagnostic
    dlrun check --types FILE.dl print each function's signature with inferred shapes
    dlrun grad FILE.dl --fn NAME print the derivative functions `grad(NAME)` generates, as DL source
    dlrun fmt FILE.dl           lay the file out canonically, comments kept
    dlrun plot METRICS.jsonl    draw the curves a program logged with `log_metric(name, value)`
    dlrun lsp                   run the language server on stdio (for editors)
    dlrun repl                  the interactive REPL (also `dlrun` alone)

Exit status: 0 ok, 1 the program's error (diagnostic on stderr), 2 usage error, 141 stdout closed
by its reader (`dlrun prog.dl | head -1`: dlrun stops quietly, as `cat` does). A Python traceback is
only ever shown for a bug in DL itself (status 3), and says so.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import traceback
from pathlib import Path

from dl import __version__, pipeline
from dl.interp.metrics import Metrics
from dl.interp.run import UsageError
from dl.lang.check import Typed
from dl.lang.diagnostics import DiagnosticError, SourceMap, render_all
from dl.lang.files import write_atomically
from dl.lang.format import format_source
from dl.lang.modules import read_source
from dl.lang.nesting import with_room

SUBCOMMANDS = ("check", "run", "grad", "fmt", "plot", "lsp", "repl")
EPILOG = """commands:
  dlrun FILE.dl [ARGS...]   check FILE.dl, then run its main(ARGS...)
  dlrun run FILE.dl [ARGS]  the same, spelled out
  dlrun check FILE.dl       check only: prints `ok` or every diagnostic
  dlrun check --types FILE.dl
                            check, then print each function's inferred signature
  dlrun grad FILE.dl --fn NAME [--wrt 0,2] [--value]
                            print the DL source that grad(NAME) generates
  dlrun fmt FILE.dl [--check]
                            lay the file out canonically, comments kept (in place)
  dlrun plot METRICS.jsonl [-o curve.png]
                            draw the curves a program logged with log_metric(name, value)
  dlrun lsp                 run the language server on stdin/stdout (for editors)
  dlrun repl                the interactive REPL (also `dlrun` alone)

exit status: 0 ok, 1 the program's error (diagnostic on stderr), 2 usage error"""


def parser() -> argparse.ArgumentParser:
    """`dlrun [--backend B] FILE.dl [ARGS...]`, the default command."""
    command = argparse.ArgumentParser(
        prog="dlrun",
        description="Run DL programs: tensors with shapes in their types, and grad.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    command.add_argument("--version", action="version", version=f"dlrun {__version__}")
    add_backend(command)
    command.add_argument("file", nargs="?", help="the .dl program (or a command: check, run, grad, plot, lsp, repl)")
    command.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to main() as strings")
    return command


def add_backend(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--backend",
        choices=["interp", "llvm"],
        default="interp",
        help="where the program runs (default: interp, the numpy interpreter; llvm: compiled with LLVM where it can)",
    )
    command.add_argument(
        "--explain-backend",
        action="store_true",
        help=(
            "with --backend llvm: print to stderr which functions were compiled "
            "(for which argument shapes), and why the others were not"
        ),
    )
    command.add_argument(
        "--no-cache",
        action="store_true",
        help="with --backend llvm: compile again, neither reading nor writing the compile cache",
    )
    command.add_argument(
        "--metrics",
        metavar="FILE",
        help="where log_metric() appends (default: $DL_METRICS, else metrics.jsonl)",
    )


def subcommand_parser(name: str) -> argparse.ArgumentParser:
    if name == "check":
        command = argparse.ArgumentParser(prog="dlrun check", description="Check types and shapes without running.")
        command.add_argument(
            "--types", action="store_true", help="print each function's signature with inferred shapes"
        )
        command.add_argument("file", help="the .dl program")
        return command
    if name == "grad":
        command = argparse.ArgumentParser(
            prog="dlrun grad", description="Print the derivative functions that grad(NAME) generates, as DL source."
        )
        command.add_argument("file", help="the .dl program")
        command.add_argument(
            "--fn", required=True, dest="function", metavar="NAME", help="the function to differentiate"
        )
        command.add_argument(
            "--wrt", default="0", help="the argument position(s) to differentiate with respect to: 0, or 0,2"
        )
        command.add_argument("--value", action="store_true", help="value_and_grad: return the value too")
        return command
    if name == "fmt":
        command = argparse.ArgumentParser(
            prog="dlrun fmt", description="Lay .dl files out canonically (comments kept), in place."
        )
        command.add_argument("file", help="the .dl file")
        mode = command.add_mutually_exclusive_group()
        mode.add_argument("--check", action="store_true", help="change nothing; exit 1 if the file is not formatted")
        mode.add_argument("--print", action="store_true", dest="show", help="print the result instead of writing it")
        return command
    if name == "plot":
        command = argparse.ArgumentParser(
            prog="dlrun plot", description="Draw the curves a program logged with log_metric(name, value)."
        )
        command.add_argument("file", help="the metrics file (JSON lines, as log() writes them)")
        command.add_argument("-o", "--output", help="the image to write (default: the metrics file's name, .png)")
        return command
    if name == "lsp":
        return argparse.ArgumentParser(
            prog="dlrun lsp", description="Run the DL language server (LSP) on stdin/stdout, for editors."
        )
    if name == "repl":
        return argparse.ArgumentParser(
            prog="dlrun repl", description="The interactive REPL; reads entries from stdin when it is not a terminal."
        )
    command = argparse.ArgumentParser(prog="dlrun run", description="Check, then run main(ARGS...).")
    add_backend(command)
    command.add_argument("file", nargs="?", help="the .dl program")
    command.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to main() as strings")
    return command


def subcommand_first(argv: list[str]) -> list[str]:
    """`dlrun --backend interp run FILE` means `dlrun run --backend interp FILE`."""
    position = 0
    flags = ("--explain-backend", "--no-cache")
    while position < len(argv) and argv[position].startswith(("--backend", "--metrics", *flags)):
        takes_value = not argv[position].startswith(flags) and "=" not in argv[position]
        position += 2 if takes_value else 1
    if 0 < position < len(argv) and argv[position] in SUBCOMMANDS:
        return [argv[position], *argv[:position], *argv[position + 1 :]]
    return argv


# The exit status when stdout is closed early (`dlrun prog.dl | head -1`): what a shell reports for
# `cat` there, killed by SIGPIPE (128 + 13). docs/cli.md.
STDOUT_CLOSED = 141


def main(argv: list[str] | None = None) -> int:
    """Run one `dlrun` command; returns its exit status."""
    try:
        status = command_line(sys.argv[1:] if argv is None else argv)
        if not sys.stdout.closed:  # (the language server closes it when it exits)
            sys.stdout.flush()  # here, where a closed pipe is caught, not at exit
        return status
    except BrokenPipeError:  # stdout (or stderr) was closed by its reader: stop quietly, as `cat` does
        return stdout_closed()


def stdout_closed() -> int:
    """Send what is still buffered for stdout nowhere (flushing it at exit would fail again); the status."""
    with contextlib.suppress(OSError, ValueError, AttributeError):  # stdout may be no real file (tests)
        descriptor = os.open(os.devnull, os.O_WRONLY)
        os.dup2(descriptor, sys.stdout.fileno())
        os.close(descriptor)
    return STDOUT_CLOSED


def command_line(argv: list[str]) -> int:
    if not argv:
        return interactive()
    argv = subcommand_first(argv)
    command = argv[0] if argv[0] in SUBCOMMANDS else "run"
    chosen = subcommand_parser(command) if argv[0] in SUBCOMMANDS else parser()
    try:
        options = chosen.parse_args(argv[1:] if argv[0] in SUBCOMMANDS else argv)
        if command not in ("lsp", "repl") and options.file is None:
            chosen.error("give a FILE.dl")
    except SystemExit as stop:  # argparse's --help, --version and usage errors: report the status, do not exit
        return int(stop.code or 0)
    if command == "lsp":
        return language_server()
    if command == "repl":
        return interactive()
    file, args = options.file, getattr(options, "args", [])
    sources = SourceMap()
    try:
        return with_room(lambda: execute(command, file, args, options, sources))
    except DiagnosticError as failure:
        print(render_all(failure.diagnostics, sources), file=sys.stderr)
        return 1
    except UsageError as failure:
        print(f"dlrun: error: {failure}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dlrun: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        raise  # not a bug: `main` ends quietly
    except Exception:
        print("internal error in dlrun, please report it with the traceback below:", file=sys.stderr)
        traceback.print_exc()
        return 3


def language_server() -> int:
    from dl import lsp  # imported here: pygls is only needed by `dlrun lsp`

    return lsp.serve()


def interactive() -> int:
    from dl import repl  # imported here: prompt_toolkit is only needed by the REPL

    return repl.main()


def execute(command: str, file: str, args: list[str], options: argparse.Namespace, sources: SourceMap) -> int:
    if command == "check":
        return check(file, options.types, sources)
    if command == "grad":
        return derivative_source(file, options, sources)
    if command == "plot":
        return draw(file, options.output)
    if command == "fmt":
        return format_file(file, options.check, options.show, sources)
    program = pipeline.load(file, sources=sources)
    program, typed = pipeline.prepare(program)
    show_warnings(typed, sources)
    Metrics.path = Path(options.metrics) if options.metrics else None  # per run: in-process callers reuse it
    explain = (lambda report: print(report, file=sys.stderr)) if options.explain_backend else None
    pipeline.run(program, args, options.backend, typed, explain, cache=not options.no_cache)
    return 0


def check(file: str, types: bool, sources: SourceMap) -> int:
    """Every diagnostic of the file: each declaration that does not parse, then the checker's on the rest."""
    typed = pipeline.check_file(file, sources)
    if typed.errors:
        raise DiagnosticError(typed.diagnostics)
    show_warnings(typed, sources)
    if types:
        for signature in typed.signatures.get(file, []):
            print(signature)
    else:
        print("ok")
    return 0


def derivative_source(file: str, options: argparse.Namespace, sources: SourceMap) -> int:
    try:
        positions = tuple(int(p) for p in options.wrt.split(","))
    except ValueError:
        raise UsageError(f"`--wrt` takes argument positions such as 0 or 0,2, not {options.wrt!r}") from None
    wrt = positions[0] if len(positions) == 1 else positions
    program = pipeline.load(file, sources=sources)
    print(pipeline.derivative_source(program, options.function, wrt, options.value), end="")
    return 0


def format_file(file: str, check: bool, show: bool, sources: SourceMap) -> int:
    path = Path(file)
    original = read_source(path)
    sources.texts[file] = original
    formatted = format_source(original, file)
    if show:
        print(formatted, end="")
        return 0
    if check:
        if formatted != original:
            print(f"{file} is not formatted (dlrun fmt {file} would change it)", file=sys.stderr)
            return 1
        return 0
    if formatted != original:
        try:
            write_atomically(path, formatted)  # through a symbolic link; an interrupted write loses nothing
        except OSError as problem:
            print(f"dlrun fmt: error: cannot write `{file}`: {problem.strerror}", file=sys.stderr)
            return 1
        print(f"formatted {file}")
    return 0


def draw(file: str, output: str | None) -> int:
    from dl import plot  # matplotlib is only needed here

    metrics = Path(file)
    target = Path(output) if output else metrics.with_suffix(".png")
    try:
        plot.plot(metrics, target)
    except plot.PlotError as problem:
        print(f"dlrun plot: error: {problem}", file=sys.stderr)
        return 1
    print(f"wrote {target}")
    return 0


def show_warnings(typed: Typed, sources: SourceMap) -> None:
    if typed.diagnostics:
        print(render_all(typed.diagnostics, sources), file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
