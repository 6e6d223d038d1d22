"""`dlrun`: the command line.

    dlrun FILE.dl [ARGS...]     check, then run main(ARGS...)
    dlrun check FILE.dl         check only; print `ok` or every diagnostic
    dlrun check --types FILE.dl print each function's signature with inferred shapes
    dlrun grad FILE.dl --fn NAME print the derivative functions `grad(NAME)` generates, as DL source
    dlrun export FILE.dl --fn NAME --weights W -o model.dlpkg
                                write a function and its weights as one package (`--onnx`: an ONNX model)
    dlrun predict model.dlpkg --input x.npz -o y.npz
                                run a package on the arrays of an .npz file
    dlrun fmt PATH...           lay .dl files (directories: every one under them) out canonically
    dlrun plot [RUN...]         draw the curves runs logged with `log_metric(name, value)`, one line per run
    dlrun lsp                   run the language server on stdio (for editors)
    dlrun repl                  the interactive REPL (also `dlrun` alone)

Exit status: 0 ok, 1 the program's error (diagnostic on stderr), 2 usage error, 130 Ctrl-C, 143 and 129
SIGTERM and SIGHUP, 141 stdout closed by its reader (`dlrun prog.dl | head -1`: dlrun stops quietly, as
`cat` does). A Python traceback is only ever shown for a bug in DL itself (status 3), and says so.
"""

from __future__ import annotations

import _signal
import argparse
import contextlib
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dl import __version__, distributed, pipeline
from dl.lang.check import Typed
from dl.lang.diagnostics import DiagnosticError, SourceMap, closest, error, render_all
from dl.lang.nesting import with_room
from dl.runtime import threads
from dl.runtime.errors import UsageError
from dl.runtime.metrics import Metrics
from dl.runtime.randomness import RandomSource

SUBCOMMANDS = ("check", "run", "grad", "export", "predict", "fmt", "plot", "lsp", "repl")
EXIT_STATUS = "exit status: 0 ok, 1 the program's error (diagnostic on stderr), 2 usage error"
HELP_WIDTH = 100
NAME = r"[A-Za-z_][A-Za-z0-9_]*"


def terminal_columns() -> int:
    """The terminal's width as shutil.get_terminal_size finds it: $COLUMNS, else standard output's, else 80."""
    with contextlib.suppress(KeyError, ValueError):
        if int(os.environ["COLUMNS"]) > 0:
            return int(os.environ["COLUMNS"])
    with contextlib.suppress(AttributeError, ValueError, OSError):
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 80
    return 80


class Formatter(argparse.RawDescriptionHelpFormatter):
    """argparse's formatter given the terminal's width, which argparse would ask shutil for: argparse makes a
    formatter for every option it is given, and importing shutil costs a run that never shows help 5 ms."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=terminal_columns() - 2)


class MainParser(argparse.ArgumentParser):
    """The default command's parser. Its epilog, the `commands:` part of `dlrun --help`, is made only when
    the help is shown: making it builds every command's parser, which a run of a program does not need."""

    def format_help(self) -> str:
        self.epilog = f"{commands_help(self)}\n\n{EXIT_STATUS}"
        return super().format_help()


def parser() -> argparse.ArgumentParser:
    """`dlrun [--backend B] FILE.dl [ARGS...]`, the default command."""
    command = MainParser(
        prog="dlrun",
        description="Run DL programs: tensors with shapes in their types, and grad.",
        formatter_class=Formatter,
    )
    command.add_argument("--version", action="version", version=f"dlrun {__version__}")
    add_backend(command)
    command.add_argument(
        "file", nargs="?", metavar="FILE.dl", help=f"the .dl program (or a command: {', '.join(SUBCOMMANDS)})"
    )
    command.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="arguments passed to main() as strings")
    return command


def commands_help(main_command: argparse.ArgumentParser) -> str:
    """The `commands:` part of `dlrun --help`, made from each command's own parser, so that it names every
    command and every flag (the options `main_command` lists already are not repeated)."""
    import textwrap  # imported here: only `--help` wraps text

    shown = {flag for action in main_command._actions for flag in action.option_strings}
    lines = ["commands:", "  dlrun FILE.dl [ARGS...]", "      the same as `dlrun run FILE.dl [ARGS...]`"]
    for name in SUBCOMMANDS:
        command = subcommand_parser(name)
        usage = " ".join(re.sub(r"\[-h\] ?", "", command.format_usage().removeprefix("usage: ")).split())
        lines.append(f"  {usage}")  # one line, however long: a usage broken inside a bracket misleads
        lines += textwrap.wrap(command.description, HELP_WIDTH, initial_indent="      ", subsequent_indent="      ")
        for action in command._actions:  # argparse has no public list of a parser's options
            flags = [flag for flag in action.option_strings if flag not in shown]
            if flags:
                lines += textwrap.wrap(
                    action.help,
                    HELP_WIDTH,
                    initial_indent=f"        {', '.join(flags):<14}",
                    subsequent_indent=" " * 22,
                )
    return "\n".join(lines)


def seed_value(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a seed, a whole number 0 or more, found {text!r}")
    return int(text)


def positive_count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of threads, 1 or more, found {text!r}")
    if int(text) > threads.MOST:  # a typo (an extra digit): as many threads, and compile processes, would be made
        raise argparse.ArgumentTypeError(f"expected at most {threads.MOST} threads, found {text}")
    return int(text)


def add_backend(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--backend",
        choices=["interp", "llvm", "cuda"],
        default="interp",
        help="where the program runs (default: interp, the numpy interpreter; llvm: compiled with LLVM where it can; "
        "cuda: tensors on an NVIDIA GPU, through cupy)",
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
        "--threads",
        type=positive_count,
        metavar="N",
        help=(
            "threads for large matrix products and fused loops, and processes for compiling a large module "
            "(default: the cores this process may use, or 1 when the machine is busy); small ones always run on one"
        ),
    )
    command.add_argument(
        "--seed",
        type=seed_value,
        default=0,
        metavar="N",
        help="seed the run's random stream, which randn, rand, permutation, batches and categorical draw from "
        "without seed= (default: 0, so runs repeat), as torch.manual_seed",
    )
    command.add_argument(
        "--no-cache",
        action="store_true",
        help="with --backend llvm: compile again, neither reading nor writing the compile cache",
    )
    command.add_argument(
        "--runs",
        metavar="DIR",
        help="where each run that calls log_metric() gets its record, DIR/PROGRAM-TIME/ (default: $DL_RUNS, else runs)",
    )
    command.add_argument(
        "--metrics",
        metavar="FILE",
        help="append log_metric()'s lines to FILE instead, with no run record (default: $DL_METRICS if set)",
    )


def subcommand_parser(name: str) -> argparse.ArgumentParser:
    if name == "check":
        command = argparse.ArgumentParser(prog="dlrun check", description="Check types and shapes without running.")
        command.add_argument(
            "--types", action="store_true", help="print each function's signature with inferred shapes"
        )
        command.add_argument("file", metavar="FILE.dl", help="the .dl program")
        return command
    if name == "grad":
        command = argparse.ArgumentParser(
            prog="dlrun grad", description="Print the derivative functions that grad(NAME) generates, as DL source."
        )
        command.add_argument("file", metavar="FILE.dl", help="the .dl program")
        command.add_argument(
            "--fn", required=True, dest="function", metavar="NAME", help="the function to differentiate"
        )
        command.add_argument(
            "--wrt",
            metavar="N[,N...]",
            help="the argument position(s) to differentiate with respect to: 0 (the default), or 0,2",
        )
        command.add_argument("--value", action="store_true", help="value_and_grad: return the value too")
        command.add_argument(
            "--has-aux", action="store_true", help="has_aux=true: the function returns (loss, aux), aux comes back too"
        )
        command.add_argument(
            "--bind",
            metavar="P=F[,P=F...]",
            help="for a function that takes functions: the function each such parameter gets (f=sq,df=nn.relu); "
            "--wrt then defaults to the first other parameter",
        )
        return command
    if name == "export":
        return export_parser()
    if name == "predict":
        return predict_parser()
    if name == "fmt":
        command = argparse.ArgumentParser(
            prog="dlrun fmt",
            description="Lay .dl files out canonically (comments kept), in place; a directory means every .dl file "
            "under it.",
        )
        command.add_argument("paths", nargs="+", metavar="PATH", help="a .dl file, or a directory to search for them")
        mode = command.add_mutually_exclusive_group()
        mode.add_argument("--check", action="store_true", help="change nothing; exit 1 if a file is not formatted")
        mode.add_argument(
            "--print", action="store_true", dest="show", help="print one file's result instead of writing it"
        )
        return command
    if name == "plot":
        command = argparse.ArgumentParser(
            prog="dlrun plot",
            description="Draw the curves programs logged with log_metric(name, value): one panel per metric, one "
            "line per run.",
        )
        command.add_argument(
            "paths",
            nargs="*",
            metavar="RUN",
            help="a run's directory, a directory of runs, or a metrics file (default: $DL_RUNS, else runs)",
        )
        command.add_argument(
            "-o", "--output", help="the image to write (default: metrics.png in the directory drawn, or here)"
        )
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
    command.add_argument("file", nargs="?", metavar="FILE.dl", help="the .dl program")
    command.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="arguments passed to main() as strings")
    return command


def export_parser() -> argparse.ArgumentParser:
    command = argparse.ArgumentParser(
        prog="dlrun export",
        description="Write a function and its trained weights as one self-contained file: a DL package (.dlpkg) "
        "that `dlrun predict` runs, or with --onnx an ONNX model.",
    )
    command.add_argument("file", metavar="FILE.dl", help="the .dl program")
    command.add_argument("--fn", required=True, dest="function", metavar="NAME", help="the function to export")
    command.add_argument(
        "--weights", required=True, metavar="W", help="the safetensors checkpoint holding the function's weights"
    )
    command.add_argument(
        "--param",
        metavar="NAME",
        help="the struct parameter the weights are for (default: the one struct parameter the checkpoint fits)",
    )
    command.add_argument(
        "--part",
        metavar="PATH",
        help="the part of the checkpoint holding the weights, as save names it (`1` of a saved (model_a, model_b)); "
        "needed where several parts fit",
    )
    command.add_argument("-o", "--output", required=True, metavar="OUT", help="the file to write")
    command.add_argument("--onnx", action="store_true", help="write an ONNX model (opset 18) instead of a package")
    command.add_argument(
        "--quantize", choices=["int8"], help="with --onnx: store weight matrices as per-channel symmetric int8"
    )
    return command


def predict_parser() -> argparse.ArgumentParser:
    command = argparse.ArgumentParser(
        prog="dlrun predict",
        description="Run a DL package's function on the arrays of an .npz file (one per input, by name) and "
        "write its result to an .npz file.",
    )
    command.add_argument("file", metavar="PACKAGE", help="the .dlpkg file `dlrun export` wrote")
    command.add_argument("--input", required=True, metavar="X.npz", help="the inputs, one array per input name")
    command.add_argument("-o", "--output", required=True, metavar="Y.npz", help="where to write the result")
    command.add_argument(
        "--backend",
        choices=["interp", "llvm", "cuda"],
        default="interp",
        help="where the package runs (default: interp)",
    )
    return command


def options_of_running(argv: list[str], chosen: argparse.ArgumentParser) -> str | None:
    """An option of `dlrun FILE.dl` (`--backend`) given to a command that does not take it (`dlrun check`),
    before the command's file: said as such, where argparse would take its value for the file and report
    the file as unrecognized."""
    running = parser()._option_string_actions
    for word in argv:
        if not word.startswith("-") or word == "--":
            return None  # the file: what follows is the program's, or the command's own
        option = word.split("=", 1)[0]
        if option in running and option not in chosen._option_string_actions:
            return f"`{option}`"
    return None


def subcommand_first(argv: list[str]) -> list[str]:
    """`dlrun --backend interp run FILE` means `dlrun run --backend interp FILE`."""
    position = 0
    flags = ("--explain-backend", "--no-cache")
    while position < len(argv) and argv[position].startswith(("--backend", "--metrics", "--runs", *flags)):
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
    argv = sys.argv[1:] if argv is None else argv
    with_streams()
    handlers = stop_on_signals()
    written = sys.stdout
    if guards_output(argv, written):
        sys.stdout = GuardedOutput(written)
    try:
        status = command_line(argv)
        if not sys.stdout.closed:  # (the language server closes it when it exits)
            sys.stdout.flush()  # here, where a closed pipe is caught, not at exit
        return status
    except BrokenPipeError:  # stdout (or stderr) was closed by its reader: stop quietly, as `cat` does
        return stdout_closed()
    except OutputFailed as failure:  # a full disk: `dlrun prog.dl > /dev/full`
        print(f"dlrun: error: cannot write the output: {failure.strerror or failure}", file=sys.stderr)
        stdout_closed()
        return 1
    except KeyboardInterrupt:  # while DL loads, or between the commands' own handlers
        print("dlrun: interrupted", file=sys.stderr)
        return 130
    except Terminated as stop:
        print(f"dlrun: stopped by {stop.name}", file=sys.stderr)
        return 128 + stop.number
    finally:
        if isinstance(sys.stdout, GuardedOutput):
            sys.stdout = written
        for number, handler in handlers.items():
            _signal.signal(number, handler)


def guards_output(argv: list[str], stdout) -> bool:
    """Whether standard output's failures are reported as the user's (`OutputFailed`): for every command but
    the language server (its protocol is its own) and the REPL at a terminal (prompt_toolkit's); a REPL
    whose output goes to a file or a pipe prints as any command does."""
    if argv and argv[0] == "lsp":
        return False
    if not argv or argv[0] == "repl":
        with contextlib.suppress(AttributeError, ValueError, OSError):
            return not stdout.isatty()
        return False
    return True


class Terminated(BaseException):
    """SIGTERM or SIGHUP (`timeout`, a scheduler's pre-emption, `docker stop`, a closed terminal): raised where the
    program is, as Ctrl-C's KeyboardInterrupt is, so that a save in progress removes its temporary file and the
    target stays as it was. Not a KeyboardInterrupt: the REPL goes on after Ctrl-C, not after this."""

    def __init__(self, number: int) -> None:
        super().__init__(number)
        self.number = number
        self.name = STOPPING_SIGNALS[number]


# SIGTERM and SIGHUP by number, POSIX's (the C module `_signal` sets their handlers: the `signal` module costs
# `dlrun hello.dl` a millisecond of start-up, tests/test_tables.py)
STOPPING_SIGNALS = {15: "SIGTERM", 1: "SIGHUP"}


def stop_on_signals() -> dict[int, Any]:
    """Raise `Terminated` on SIGTERM and SIGHUP; the handlers they had, to restore."""

    def stop(number: int, frame: object) -> None:
        raise Terminated(number)

    previous = {}
    for number in STOPPING_SIGNALS:
        with contextlib.suppress(ValueError, OSError):  # (not the main thread: a test calling `main`)
            previous[number] = _signal.signal(number, stop)
    return previous


def with_streams() -> None:
    """A standard stream that was closed when dlrun started (`dlrun prog.dl >&-`, a daemon's): Python has None
    there, which print passes over but other writers do not; the null device takes its place."""
    for name, mode in (("stdin", "r"), ("stdout", "w"), ("stderr", "w")):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, mode))  # noqa: SIM115 (open for the process's life)


class OutputFailed(OSError):
    """Standard output could not be written (a full disk, an I/O error): the user's to fix, not a bug in DL."""


def guarded(action: Callable[..., Any], *args: Any) -> Any:
    """`action(*args)`, a write to standard output: its OSError is `OutputFailed`, but a closed pipe's."""
    try:
        return action(*args)
    except BrokenPipeError:
        raise
    except OSError as failure:
        raise OutputFailed(failure.errno, failure.strerror) from None


class GuardedOutput:
    """Standard output, whose failures to write are `OutputFailed` (a closed pipe stays BrokenPipeError)."""

    def __init__(self, stream) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        return guarded(self.stream.write, text)

    def flush(self) -> None:
        guarded(self.stream.flush)

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


def stdout_closed() -> int:
    """Send what is still buffered for stdout nowhere (flushing it at exit would fail again); the status."""
    with contextlib.suppress(OSError, ValueError, AttributeError):  # stdout may be no real file (tests)
        descriptor = os.open(os.devnull, os.O_WRONLY)
        os.dup2(descriptor, sys.stdout.fileno())
        os.close(descriptor)
    return STDOUT_CLOSED


def mistyped_command(word: str) -> str | None:
    """The command `word` was likely meant as (`chek`), where it names no file and is no program path."""
    if Path(word).exists() or Path(f"{word}.dl").exists() or word.endswith(".dl") or "/" in word:
        return None
    return closest(word, list(SUBCOMMANDS))


def command_line(argv: list[str]) -> int:
    if not argv:
        return interactive()
    argv = subcommand_first(argv)
    command = argv[0] if argv[0] in SUBCOMMANDS else "run"
    chosen = subcommand_parser(command) if argv[0] in SUBCOMMANDS else parser()
    if argv[0] in SUBCOMMANDS:
        misplaced = options_of_running(argv[1:], chosen)
        if misplaced is not None:
            print(chosen.format_usage(), end="", file=sys.stderr)
            print(
                f"{chosen.prog}: error: {misplaced} applies to running a program, not to `{chosen.prog}`",
                file=sys.stderr,
            )
            return 2
    try:
        options = chosen.parse_args(argv[1:] if argv[0] in SUBCOMMANDS else argv)
        if command not in ("lsp", "repl", "fmt", "plot") and options.file is None:
            chosen.error("give a FILE.dl")
        mistyped = mistyped_command(options.file) if command == "run" and options.file else None
        if mistyped is not None:
            chosen.error(f"`{options.file}` is no file and no command: did you mean `dlrun {mistyped}`?")
    except SystemExit as stop:  # argparse's --help, --version and usage errors: report the status, do not exit
        return int(stop.code or 0)
    if distributed.launched_size() != 1 and not distributed.is_worker():
        if command == "run":
            return supervise(argv)
        if distributed.launched_rank() != 0:
            return 0  # started by an MPI launcher: any command but a run is rank 0's alone
    if command == "lsp":
        return language_server()
    if command == "repl":
        return interactive()
    file, args = getattr(options, "file", None), getattr(options, "args", [])
    sources = SourceMap()
    try:
        return with_room(lambda: execute(command, file, args, options, sources))
    except DiagnosticError as failure:
        distributed.report(render_all(failure.diagnostics, sources))
        return 1
    except (UsageError, distributed.LaunchError) as failure:
        distributed.report(f"dlrun: error: {failure}")
        return 2
    except KeyboardInterrupt:
        distributed.report("dlrun: interrupted")
        return 130
    except (BrokenPipeError, OutputFailed):
        raise  # not a bug: `main` ends quietly, or says that the output could not be written
    except Exception:
        import traceback  # imported here: only a bug in dlrun prints one

        print("internal error in dlrun, please report it with the traceback below:", file=sys.stderr)
        traceback.print_exc()
        return 3


def supervise(argv: list[str]) -> int:
    """Started by an MPI launcher as one of several processes: run the program here as one rank of the world
    (driver/distributed.py)."""
    try:
        return distributed.supervise(argv)
    except distributed.LaunchError as failure:
        if distributed.launched_rank() == 0:
            print(f"dlrun: error: {failure}", file=sys.stderr)
        return 2


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
        return draw(options.paths, options.output)
    if command == "fmt":
        from dl import fmt  # imported here, as the other commands' modules are: a run does without them

        return fmt.format_paths(options.paths, options.check, options.show)
    if command == "export":
        return export(file, options, sources)
    if command == "predict":
        return predict(file, options, sources)
    distributed.join()
    program = pipeline.load(file, sources=sources)
    program, typed = pipeline.prepare(program)
    show_warnings(typed, sources)
    Metrics.start(  # per run: in-process callers reuse the class
        file,
        args,
        options.backend,
        Path(options.metrics) if options.metrics else None,
        Path(options.runs) if options.runs else None,
    )
    if options.runs and Path(options.runs).exists() and not Path(options.runs).is_dir():  # now, not after an epoch
        raise UsageError(
            f"`--runs {options.runs}` is not a directory: each run that logs metrics gets a directory in it"
        )
    if options.threads is not None:
        threads.use(options.threads)
    elif distributed.launched_size() == 1:  # ranks sharing a host would share its cores: one thread each
        threads.use(threads.default_count())
    explain = (lambda report: print(report, file=sys.stderr)) if options.explain_backend else None
    if explain is not None and options.backend == "interp":
        explain("--explain-backend: the interpreter runs every function; it explains what `--backend llvm` compiles")
        explain = None
    if distributed.launched_rank() != 0:
        explain = None  # one copy of the report: every rank compiles the same functions
    RandomSource.start = options.seed
    try:
        pipeline.run(program, args, options.backend, typed, explain, cache=not options.no_cache)
    finally:
        RandomSource.start = 0  # (for this process's next run: the tests run many, and a host calls functions)
    return 0


def check(file: str, types: bool, sources: SourceMap) -> int:
    """Every diagnostic of the file: each declaration that does not parse, then the checker's on the rest."""
    typed = pipeline.check_file(file, sources)
    if typed.errors:
        raise DiagnosticError(typed.diagnostics)
    show_warnings(typed, sources)
    if types:
        for signature in typed.signatures.get(file, []):
            print(signature.text_in(file, typed.program))
    else:
        print("ok")
    return 0


def derivative_source(file: str, options: argparse.Namespace, sources: SourceMap) -> int:
    wrt = None
    if options.wrt is not None:
        try:
            positions = tuple(int(p) for p in options.wrt.split(","))
        except ValueError:
            raise UsageError(f"`--wrt` takes argument positions such as 0 or 0,2, not {options.wrt!r}") from None
        wrt = positions[0] if len(positions) == 1 else positions
    bindings = parse_bindings(options.bind) if options.bind is not None else None
    program = pipeline.load(file, sources=sources)
    print(pipeline.derivative_source(program, options.function, wrt, options.value, bindings, options.has_aux), end="")
    return 0


def export(file: str, options: argparse.Namespace, sources: SourceMap) -> int:
    program = pipeline.load(file, sources=sources)
    output = Path(options.output)
    if options.quantize and not options.onnx:
        raise UsageError("`--quantize` applies to ONNX models: add `--onnx`")
    if output.suffix.lower() == ".onnx" and not options.onnx:  # a package there would be a zip named .onnx
        raise UsageError(f"`-o {options.output}` names an ONNX model: add `--onnx` (a package is a `.dlpkg`)")
    if output.suffix.lower() == ".dlpkg" and options.onnx:  # `dlrun predict` would find no package there
        raise UsageError(f"`-o {options.output}` names a package, and `--onnx` writes an ONNX model: name it `.onnx`")
    from dl import package

    built = package.build_package(program, options.function, options.weights, options.param, options.part)
    if options.onnx:
        try:
            from dl.export import onnx_model  # imported here: the onnx package is the `onnx` extra
        except ImportError as missing:
            raise UsageError(f"`--onnx` needs the onnx package ({missing}): pip install 'dl-lang[onnx]'") from None
        weights = built.weights
        if options.quantize:
            from dl.export.quantize import not_finite

            name = not_finite(weights.tensors)
            if name is not None:  # int8 would hide it: a diverged model would ship looking healthy
                message = f"weight `{name}` holds nan or inf, which int8 codes cannot hold"
                helps = ("help: a float export keeps them (its outputs show the nan); was the training run diverging?",)
                raise DiagnosticError(error("E0605", message, package.start_of(options.weights), notes=helps))
        signature = package.signature_of(built.typed, built.function)
        model = onnx_model.export_onnx(built.module, signature, weights.parameter, weights.tensors, options.quantize)
        package.write_file(output, model)
    else:
        package.export_package(built, output)
    report = built.weights
    where = f" (`{report.prefix}` of the checkpoint)" if report.prefix else ""
    print(f"wrote {output}: `{options.function}` with weights `{report.parameter}`: {report.struct.name}{where}")
    return 0


def predict(file: str, options: argparse.Namespace, sources: SourceMap) -> int:
    from dl import package

    loaded = package.load_package(file, options.backend, sources)
    result = loaded.run(package.read_inputs(options.input, loaded))
    package.write_outputs(Path(options.output), result)
    print(f"wrote {options.output}")
    return 0


def parse_bindings(text: str) -> dict[str, str]:
    """`f=sq,df=nn.relu` as {"f": "sq", "df": "nn.relu"}. Raises `UsageError` for anything else."""
    bindings: dict[str, str] = {}
    for part in text.split(","):
        parameter, equals, function = (piece.strip() for piece in part.partition("="))
        if not equals or not re.fullmatch(NAME, parameter) or not re.fullmatch(rf"(?:{NAME}\.)?{NAME}", function):
            raise UsageError(f"`--bind` takes PARAMETER=FUNCTION pairs such as f=sq,df=nn.relu, not {part!r}")
        if parameter in bindings:
            raise UsageError(f"`--bind` gives `{parameter}` twice")
        bindings[parameter] = function
    return bindings


def draw(paths: list[str], output: str | None) -> int:
    from dl import plot  # matplotlib is only needed here

    sources = [Path(p) for p in paths] or [plot.runs_directory()]
    target = Path(output) if output else plot.default_output(sources)
    try:
        if not paths and not sources[0].is_dir():
            raise plot.PlotError(f"no runs yet: `{sources[0]}` is made by the first run that calls log_metric()")
        plot.plot(plot.find_runs(sources), target)
    except plot.PlotError as problem:
        print(f"dlrun plot: error: {problem}", file=sys.stderr)
        return 1
    print(f"wrote {target}")
    return 0


def show_warnings(typed: Typed, sources: SourceMap) -> None:
    if typed.diagnostics and distributed.launched_rank() == 0:  # every rank would show the same
        print(render_all(typed.diagnostics, sources), file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
