"""Installing DL: the README's commands are what CI runs, the run command installs the runtime only, and
nothing the `dl` package imports lives only in an extra (except matplotlib, the `plot` extra, which only
`dlrun plot` imports, mpi4py, and onnx, which only the ONNX exporter imports)."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib

from conftest import ROOT

# the folders of the `dl` package, as pyproject.toml maps them
PACKAGE_FOLDERS = tuple(
    sorted(set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].values()))
)
# The extras the package may import, and the modules that may import each: one module, or the modules of
# one folder that only `dlrun` imports when asked (inside a function), as dl.export is by `dlrun export --onnx`.
OPTIONAL_IMPORTS = {
    "matplotlib": ("plot", {"driver/plot.py"}),
    "mpi4py": ("mpi", {"driver/distributed.py"}),
    "onnx": ("onnx", {"export/onnx_model.py", "export/quantize.py"}),
    "cupy": ("cuda", {"codegen/cuda.py"}),
    "cupyx": ("cuda", {"codegen/cuda.py"}),
}
# The distribution of an optional module when it is not installed here (cupy's wheels are per CUDA version)
NOT_INSTALLED = {"cupy": "cupy-cuda13x", "cupyx": "cupy-cuda13x"}


def readme_install_commands() -> list[list[str]]:
    """The command lines of each `sh` block in the README's "On a fresh machine" section."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## On a fresh machine", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)
    return [[line for line in block.splitlines() if line.strip()] for block in blocks]


def test_the_readme_runs_the_example_on_the_runtime_alone_and_tests_with_dev() -> None:
    run, test = readme_install_commands()
    assert run == ["python3 -m venv .venv && . .venv/bin/activate", "pip install -e .", "dlrun examples/train.dl"]
    assert test == ['pip install -e ".[dev]"', "python -m pytest -n auto"]


def test_ci_runs_the_readme_commands_exactly_and_in_order() -> None:
    script = (ROOT / ".ci" / "run").read_text().splitlines()
    position = 0
    for command in [line for block in readme_install_commands() for line in block]:
        assert command in script[position:], f"`.ci/run` does not run `{command}` (after line {position})"
        position = script.index(command, position) + 1
    lint = [script.index("ruff check ."), script.index("ruff format --check .")]
    assert script.index('pip install -e ".[dev]"') < min(lint) and max(lint) < script.index("python -m pytest -n auto")


def requirement_name(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower().replace("_", "-")


def imported_modules(source: str) -> set[str]:
    """The top-level names of every module `source` imports, at any depth (absolute imports only)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_every_import_of_the_package_is_a_runtime_dependency_or_an_extra_imported_where_it_is_needed() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = {requirement_name(r) for r in project["dependencies"]}
    distributions = importlib.metadata.packages_distributions()
    third_party: dict[str, set[str]] = {}
    for folder in PACKAGE_FOLDERS:
        for path in (ROOT / folder).rglob("*.py"):
            for module in imported_modules(path.read_text()) - set(sys.stdlib_module_names) - {"dl"}:
                third_party.setdefault(module, set()).add(path.relative_to(ROOT).as_posix())
    assert {"numpy", "lark", "llvmlite", "tqdm"} <= set(third_party)  # the scan sees the imports
    for module, importers in sorted(third_party.items()):
        names = {requirement_name(d) for d in distributions.get(module, [NOT_INSTALLED.get(module, module)])}
        if module in OPTIONAL_IMPORTS:
            extra, allowed = OPTIONAL_IMPORTS[module]
            assert names <= {requirement_name(r) for r in project["optional-dependencies"][extra]}
            assert importers == allowed, f"{module} is imported by {sorted(importers)}"
            continue
        assert names <= runtime, f"{module} (imported by {sorted(importers)}) is not a runtime dependency"


def test_the_onnx_extra_is_imported_only_when_an_onnx_model_is_exported() -> None:
    """Nothing outside export/ imports the exporter at module level: the CLI imports it inside `export`, and
    the support matrix reads export/support.py, which imports no onnx."""
    for path in (ROOT / "driver").glob("*.py"):
        tree = ast.parse(path.read_text())
        top_level = {node.module for node in tree.body if isinstance(node, ast.ImportFrom) and node.module}
        top_level |= {alias.name for node in tree.body if isinstance(node, ast.Import) for alias in node.names}
        assert not any(name.startswith(("dl.export", "onnx")) for name in top_level), path
    assert "onnx" not in imported_modules((ROOT / "export" / "support.py").read_text())


def test_matplotlib_is_imported_only_when_a_plot_is_drawn() -> None:
    tree = ast.parse((ROOT / "driver" / "plot.py").read_text())
    top_level = {alias.name for node in tree.body if isinstance(node, ast.Import) for alias in node.names}
    top_level |= {node.module for node in tree.body if isinstance(node, ast.ImportFrom)}
    assert not any(name and name.startswith("matplotlib") for name in top_level)
