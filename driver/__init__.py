"""DL: a deep-learning language with shapes in its types and `grad` as a source transform."""

import os

# The interpreter runs many small matrix products; OpenBLAS's threads make those up to a hundred times
# slower when the machine is busy (they wait for a core). One thread unless the user asks for more.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

__version__ = "0.1.0"


def load_package(path, backend: str = "interp"):
    """The model package (`.dlpkg`) at `path`, validated, as a callable on numpy arrays (driver/package.py).
    Raises `dl.lang.diagnostics.DiagnosticError` for a package that cannot be used."""
    from dl.package import load_package as load  # imported here: `import dl` stays light

    return load(path, backend)


def main() -> int:
    """`dlrun` (driver/cli.py), imported here so that Ctrl-C while DL is still loading stops it as Ctrl-C does
    later (`dlrun: interrupted`, status 130) rather than with a traceback."""
    import sys

    try:
        from dl.cli import main as command_line
    except KeyboardInterrupt:
        sys.stderr.write("dlrun: interrupted\n")
        return 130
    return command_line()
