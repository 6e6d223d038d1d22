"""`dlrun`: the command line.

    dlrun FILE.dl [ARGS...]     check, then run main(ARGS...)
    dlrun check FILE.dl         check only; print `ok` or every diagnostic

Exit status: 0 ok, 1 the program's error (diagnostic on stderr), 2 usage error.
A Python traceback is only ever shown for a bug in DL itself, and says so.
"""

from __future__ import annotations

import argparse
import sys
import traceback

from dl import __version__, pipeline
from dl.interp.run import UsageError
from dl.lang.diagnostics import DiagnosticError, SourceMap, render_all
from dl.lang.modules import Program

SUBCOMMANDS = ("check", "run")
EPILOG = """commands:
  dlrun FILE.dl [ARGS...]   check FILE.dl, then run its main(ARGS...)
  dlrun run FILE.dl [ARGS]  the same, spelled out
  dlrun check FILE.dl       check only: prints `ok` or every diagnostic

exit status: 0 ok, 1 the program's error (diagnostic on stderr), 2 usage error"""


def parser() -> argparse.ArgumentParser:
    command = argparse.ArgumentParser(
        prog="dlrun",
        description="Run DL programs: tensors with shapes in their types, and grad.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    command.add_argument("--version", action="version", version=f"dlrun {__version__}")
    command.add_argument(
        "--backend",
        choices=["interp"],
        default="interp",
        help="where the program runs (default: interp, the numpy interpreter)",
    )
    command.add_argument("file", help="the .dl program (or a command: check, run)")
    command.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to main() as strings")
    return command


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    options = parser().parse_args(argv)
    command, file, args = "run", options.file, options.args
    if file in SUBCOMMANDS:
        if not args:
            parser().error(f"`dlrun {file}` needs a FILE.dl")
        command, file, args = file, args[0], args[1:]
    sources = SourceMap()
    try:
        return execute(command, file, args, options.backend, sources)
    except DiagnosticError as failure:
        print(render_all(failure.diagnostics, sources), file=sys.stderr)
        return 1
    except UsageError as failure:
        print(f"dlrun: error: {failure}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dlrun: interrupted", file=sys.stderr)
        return 130
    except Exception:
        print("internal error in dlrun, please report it with the traceback below:", file=sys.stderr)
        traceback.print_exc()
        return 3


def execute(command: str, file: str, args: list[str], backend: str, sources: SourceMap) -> int:
    program = load(file, sources)
    if command == "check":
        if args:
            raise UsageError("`dlrun check` takes one FILE.dl")
        pipeline.check(program)
        print("ok")
        return 0
    pipeline.run(program, args, backend)
    return 0


def load(file: str, sources: SourceMap) -> Program:
    try:
        with open(file, encoding="utf-8") as handle:
            sources.add(file, handle.read())
    except OSError:
        pass  # load_program reports a missing or unreadable file as a diagnostic
    except UnicodeDecodeError:
        pass
    try:
        program = pipeline.load(file)
    except DiagnosticError:
        raise
    sources.texts.update(program.sources.texts)
    return program


if __name__ == "__main__":
    sys.exit(main())
