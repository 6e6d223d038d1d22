"""Model packages: one function of a DL program and its trained weights as one `.dlpkg` file.

`build_package(program, function, weights)` gathers a package, `export_package(built, output)` writes it
as a zip of three members:

- `model.dl`: the checked DL source of the function and everything it calls, imports flattened
  (lang/flatten.py), so it checks on its own;
- `weights.safetensors`: the tensors of the function's weights parameter, the struct parameter whose type
  the checkpoint fits (`choose_weights`), named as `save(path, weights)` names them;
- `manifest.json`: the format and its version, the DL version, the function, its signature with shapes
  (dimension names kept), the weights parameter, and the sha256 of the two other members.

`load_package(path)` reads one back and validates it before anything runs: the format version, each
member's hash, that the source parses and checks, that the function's signature is the manifest's and
that the weights fit it. A problem is a diagnostic (E0601 to E0605, docs/errors.md). Loading runs nothing
but the checked DL code; safetensors and JSON are read without pickle. The `Package` it returns is
called with numpy arrays, each checked against the signature (dtype, rank, sizes, dimension names bound
consistently), and runs on any backend by name (driver/pipeline.py).
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import safetensors
import safetensors.numpy
from dl import __version__, pipeline
from dl.interp.npz import NpzError, read_arrays
from dl.lang import ast
from dl.lang.check import Signature, Typed
from dl.lang.check import check as check_program
from dl.lang.diagnostics import Diagnostic, DiagnosticError, SourceMap, Span, closest, error
from dl.lang.files import open_regular, replacing
from dl.lang.flatten import flatten
from dl.lang.modules import Program, load_program
from dl.lang.primitives import PRIMITIVES
from dl.lang.printer import print_module
from dl.lang.record import record
from dl.lang.types import PrimitiveRef, StructType, TensorType, TupleType, Type
from dl.runtime.backend import Prepared
from dl.runtime.conform import conforms
from dl.runtime.values import DTYPES, StructValue
from dl.runtime.values import StructType as RuntimeStruct

FORMAT = "dl-package"
FORMAT_VERSION = 1
MANIFEST, SOURCE, WEIGHTS = "manifest.json", "model.dl", "weights.safetensors"
MEMBERS = (MANIFEST, SOURCE, WEIGHTS)
# The most a member may hold once inflated: a zip's sizes are read before anything is inflated, so a
# crafted archive cannot make loading exhaust memory.
MEMBER_LIMITS = {MANIFEST: 1 << 20, SOURCE: 64 << 20, WEIGHTS: 16 << 30}


@record(frozen=True)
class Weights:
    """The parameter the weights are bound to, and where its tensors are in the checkpoint."""

    parameter: str
    struct: StructType
    prefix: str  # the dotted name of the subtree that fits ("" for the whole checkpoint)
    tensors: dict[str, np.ndarray]  # by name within the struct


# ---------------------------------------------------------------------- export


@record(frozen=True)
class Built:
    """A package before it is written: its checked source, the function's name there, and its weights;
    `module` is that source as the flattening made it, whose nodes keep the spans of the user's files."""

    source: str
    typed: Typed
    function: str
    weights: Weights
    module: ast.Module


def build_package(
    program: Program, function: str, weights_path: str, parameter: str | None = None, part: str | None = None
) -> Built:
    """`function` of the program with its weights, ready to write (as a package, or as ONNX by dl.export).
    Raises `DiagnosticError` (E0201 no such function, E0605 weights that do not fit, E0606 a function that
    cannot be a package)."""
    derived, typed = pipeline.prepare(program)
    decl = entry_decl(derived, function)
    if decl is None:
        raise DiagnosticError(no_function(derived, function))
    annotated(decl)
    signature = signature_of(typed, function)
    exportable(decl, signature)
    weights = choose_weights(signature, read_weights(weights_path), weights_path, parameter, decl, part)
    flat = flatten(derived, function, SOURCE)
    source, package_typed = checked_source(flat.module)
    no_files(function, package_typed, SOURCE, flat.module)
    return Built(source, package_typed, flat.names[function], weights, flat.module)


def export_package(built: Built, output: Path) -> None:
    """Write the package to `output` atomically (E0608 when it cannot be written)."""
    members = {
        SOURCE: built.source.encode("utf-8"),
        WEIGHTS: safetensors.numpy.save(built.weights.tensors),
    }
    signature = signature_of(built.typed, built.function)
    manifest = manifest_for(built.function, signature, built.weights.parameter, members)
    write_zip(output, {MANIFEST: json.dumps(manifest, indent=2).encode("utf-8"), **members})


def checked_source(module: ast.Module) -> tuple[str, Typed]:
    """A flattened module as source text, and that text checked."""
    source = print_module(module)
    package_typed = check_program(load_program(SOURCE, source))
    if package_typed.errors:  # the flattening is wrong, not the user's program
        raise AssertionError(f"the flattened source does not check: {package_typed.errors[0]}")
    return source, package_typed


def entry_decl(program: Program, name: str) -> ast.FnDecl | None:
    return pipeline.entry_function(program, name)


def no_function(program: Program, function: str) -> Diagnostic:
    names = [d.name for d in program.modules[program.entry].decls if isinstance(d, ast.FnDecl)]
    suggestion = closest(function, names)
    notes = (f"help: did you mean `{suggestion}`?",) if suggestion else ()
    return error("E0201", f"`{program.entry}` has no function `{function}`", start_of(program.entry), notes=notes)


def start_of(path: str) -> Span:
    return Span(path, 1, 1, 1, 1)


def signature_of(typed: Typed, name: str) -> Signature:
    return next(s for s in typed.signatures.get(typed.program.entry, ()) if s.name == name)


def annotated(decl: ast.FnDecl) -> None:
    """A package's function has annotated parameters: its signature is its interface. Raises E0606."""
    for param in decl.params:
        if param.annotation is None:
            raise DiagnosticError(
                error(
                    "E0606",
                    f"`{decl.name}` cannot be exported: parameter `{param.name}` has no type annotation",
                    param.span,
                    notes=("help: a package's signature is its interface: annotate every parameter",),
                )
            )


def exportable(decl: ast.FnDecl, signature: Signature) -> None:
    """Each parameter of a package's function is a struct (the weights) or a tensor (an input), and it returns
    a tensor or a tuple of tensors. Raises E0606."""
    weights = None
    for param, (name, param_type) in zip(decl.params, signature.params, strict=True):
        if not isinstance(param_type, (StructType, TensorType)):
            raise DiagnosticError(
                error(
                    "E0606",
                    f"`{decl.name}` cannot be exported: parameter `{name}` is {param_type}, "
                    "and a package takes tensors and one struct of weights",
                    param.span,
                )
            )
        if isinstance(param_type, StructType) and weights is not None:  # its inputs come as arrays, by name
            raise DiagnosticError(
                error(
                    "E0606",
                    f"`{decl.name}` cannot be exported: parameter `{name}` is a second struct ({param_type}), "
                    f"after `{weights}`, and a package takes tensors and one struct of weights",
                    param.span,
                    notes=(
                        "help: put what both hold in one struct (a field of the weights), or pass this one's "
                        "fields as tensor parameters",
                    ),
                )
            )
        weights = name if isinstance(param_type, StructType) else weights
    if not tensors_only(signature.result):
        raise DiagnosticError(
            error(
                "E0606",
                f"`{decl.name}` cannot be exported: it returns {signature.result}, not tensors",
                decl.name_span,
            )
        )


def no_files(function: str, typed: Typed, path: str, written: ast.Module | None = None, package: str = "") -> None:
    """A package computes its outputs from its inputs alone: its code names no primitive that reads or writes a
    file (`save`, `load`, `log_metric`, `load_csv`, `load_npz`), called or passed on, so that running a package
    from elsewhere touches no file. Raises E0606 at the first such name: at export, in `written` (the flattened
    module, whose nodes keep the spans of the user's files); loading `package`, in its source at `path`."""
    names = [node for node in ast.walk(typed.program.modules[path]) if isinstance(node, ast.Name)]
    spans = [node.span for node in ast.walk(written) if isinstance(node, ast.Name)] if written else []
    for position, node in enumerate(names):
        ref = typed.types.get(id(node))
        if not (isinstance(ref, PrimitiveRef) and PRIMITIVES[ref.prim].files):
            continue
        does = "writes" if PRIMITIVES[ref.prim].effect else "reads"
        if package:
            message = f"package `{package}`: `{function}` calls `{ref.name}`, which {does} a file"
        else:
            message = f"`{function}` cannot be exported: it calls `{ref.name}`, which {does} a file"
        help = (
            "help: an exported model computes its outputs from its inputs alone, and running one touches no file: "
            "read data outside it and give it as an input, or save what it returns"
        )
        span = spans[position] if len(spans) == len(names) else node.span
        raise DiagnosticError(error("E0606", message, span, notes=(help,)))


def tensors_only(t: Type) -> bool:
    if isinstance(t, TupleType):
        return bool(t.items) and all(tensors_only(item) for item in t.items)
    return isinstance(t, TensorType)


def read_weights(path: str) -> dict[str, np.ndarray]:
    """A checkpoint's tensors by name. Raises E0605."""
    from dl.interp.checkpoints import CheckpointError, read_checkpoint

    try:
        return read_checkpoint(path)
    except CheckpointError as problem:
        raise DiagnosticError(error("E0605", str(problem), start_of(path))) from None


def choose_weights(
    signature: Signature,
    tensors: dict[str, np.ndarray],
    path: str,
    parameter: str | None,
    decl: ast.FnDecl,
    part: str | None = None,
) -> Weights:
    """The struct parameter the checkpoint fits, and the subtree that fits it: the part of the checkpoint (the
    whole, then its items depth first) whose tensors are exactly the struct's, with its dtypes and shapes,
    nearest the top (a model saved with its optimizer's state, whose moments fit it too, is the model); where
    several fit there with other values (two models), `part` must name one (`1` of `(model_a, model_b)`).
    `parameter` names the parameter; otherwise exactly one struct parameter must fit. Raises E0605."""
    structs = [(name, t) for name, t in signature.params if isinstance(t, StructType)]
    if parameter is not None:
        chosen = [(name, t) for name, t in structs if name == parameter]
        if not chosen:
            offered = ", ".join(f"`{name}`" for name, _ in structs) or "none"
            raise weights_error(
                f"`--param {parameter}`: `{decl.name}` has no struct parameter `{parameter}`", path, offered
            )
        structs = chosen
    if not structs:
        raise weights_error(f"`{decl.name}` has no struct parameter to bind the weights to", path, "none")
    if part is not None:
        fitting = [(name, t, part) for name, t in structs if part in subtrees(tensors) and fits_at(t, tensors, part)]
        if not fitting:
            parts = ", ".join(f"`{p or '(the whole)'}`" for _, t in structs for p in fitting_prefixes(t, tensors))
            notes = (f"the parts that fit: {parts}",) if parts else ()
            message = f"`--part {part}`: no struct parameter fits that part of `{path}`"
            raise DiagnosticError(error("E0605", message, start_of(path), notes=notes))
    else:
        fitting = [(name, t, prefixes[0]) for name, t in structs if (prefixes := shallowest(t, tensors))]
    for name, struct, _ in fitting if part is None else ():
        prefixes = shallowest(struct, tensors)
        if not same_values(struct, tensors, prefixes):  # `save(path, (model_a, model_b))`
            shown = ", ".join(f"`{p or '(the whole)'}`" for p in prefixes)
            message = f"several parts of `{path}` fit parameter `{name}` ({struct.name}), holding other values: {shown}"
            notes = (f"help: choose the part with `--part`, as `--part {prefixes[-1]}`",)
            raise DiagnosticError(error("E0605", message, start_of(path), notes=notes))
    if len(fitting) > 1:
        names = ", ".join(f"`{name}`" for name, _, _ in fitting)
        raise weights_error(f"the checkpoint fits several parameters ({names}): choose one with `--param`", path)
    if not fitting:
        name, struct = structs[0]
        raise weights_error(
            f"checkpoint `{path}` does not fit parameter `{name}` ({struct.name}): {misfit(struct, tensors)}", path
        )
    name, struct, prefix = fitting[0]
    inner = {leaf: tensors[dotted(prefix, leaf)] for leaf, _ in leaves(struct, "")}
    return Weights(name, struct, prefix, inner)


def weights_error(message: str, path: str, offered: str | None = None) -> DiagnosticError:
    notes = (f"the struct parameters: {offered}",) if offered is not None else ()
    return DiagnosticError(error("E0605", message, start_of(path), notes=notes))


def leaves(t: Type, name: str) -> list[tuple[str, TensorType]]:
    """The tensors of a struct or tuple type by dotted name, as `save` names a value's."""
    match t:
        case StructType(fields=fields):
            return [leaf for field, item in fields for leaf in leaves(item, dotted(name, field))]
        case TupleType(items=items):
            return [leaf for position, item in enumerate(items) for leaf in leaves(item, dotted(name, str(position)))]
        case TensorType():
            return [(name, t)]
    return [(name, t)]  # a leaf no checkpoint can hold: it never fits


def dotted(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def same_values(struct: StructType, tensors: dict[str, np.ndarray], prefixes: list[str]) -> bool:
    """Whether the parts at `prefixes` hold the same tensors (a model saved twice), so any of them will do."""
    first, *rest = prefixes or [""]
    return all(
        np.array_equal(tensors[dotted(first, leaf)], tensors[dotted(prefix, leaf)], equal_nan=True)
        for prefix in rest
        for leaf, _ in leaves(struct, "")
    )


def shallowest(struct: StructType, tensors: dict[str, np.ndarray]) -> list[str]:
    """The parts that fit `struct` nearest the checkpoint's top: a model saved beside its optimizer's state,
    `(state, model)` or `(model, state)`, is found before the moments inside the state, which fit it too."""
    prefixes = fitting_prefixes(struct, tensors)
    depth = min((prefix.count(".") + bool(prefix) for prefix in prefixes), default=0)
    return [prefix for prefix in prefixes if prefix.count(".") + bool(prefix) == depth]


def fitting_prefixes(struct: StructType, tensors: dict[str, np.ndarray]) -> list[str]:
    """The parts of the checkpoint (`subtrees`) that fit `struct`, in order."""
    return [prefix for prefix in subtrees(tensors) if fits_at(struct, tensors, prefix)]


def subtrees(tensors: dict[str, np.ndarray]) -> list[str]:
    """Every dotted prefix of the checkpoint's names, the whole first, then depth first (`0`, `1`, `1.0`)."""
    found = {""}
    for name in tensors:
        parts = name.split(".")
        found.update(".".join(parts[:end]) for end in range(1, len(parts)))
    return sorted(
        found, key=lambda prefix: [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in prefix.split(".") if p]
    )


def fits_at(struct: StructType, tensors: dict[str, np.ndarray], prefix: str) -> bool:
    wanted = leaves(struct, prefix)
    under = {name for name in tensors if not prefix or name.startswith(prefix + ".")}
    if under != {name for name, _ in wanted}:
        return False
    bindings: dict[str, int] = {}
    return all(isinstance(t, TensorType) and conforms(tensors[name], t, bindings) is None for name, t in wanted)


def misfit(struct: StructType, tensors: dict[str, np.ndarray]) -> str:
    """Why the whole checkpoint does not fit `struct`, for the message."""
    wanted = dict(leaves(struct, ""))
    missing = [name for name in wanted if name not in tensors]
    if missing:
        return f"it has no tensor `{missing[0]}`" + (f" (nor {len(missing) - 1} more)" if len(missing) > 1 else "")
    extra = sorted(name for name in tensors if name not in wanted)
    if extra:
        return f"it has tensor `{extra[0]}`, which `{struct.name}` does not"
    bindings: dict[str, int] = {}
    for name, t in wanted.items():
        problem = conforms(tensors[name], t, bindings) if isinstance(t, TensorType) else f"{t} is not a tensor"
        if problem is not None:
            return f"tensor `{name}`: {problem}"
    return "its tensors do not fit"


def manifest_for(function: str, signature: Signature, weights: str, members: dict[str, bytes]) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "dl_version": __version__,
        "function": function,
        "signature": signature_record(signature),
        "weights": weights,
        "sha256": {name: hashlib.sha256(data).hexdigest() for name, data in members.items()},
    }


def signature_record(signature: Signature) -> dict[str, Any]:
    return {"params": [[name, str(t)] for name, t in signature.params], "result": str(signature.result)}


def write_zip(output: Path, members: dict[str, bytes]) -> None:
    """The members into a zip at `output`, atomically (E0608 when it cannot be written)."""
    try:
        with replacing(output) as temporary, zipfile.ZipFile(temporary, "w") as archive:
            for name, data in members.items():
                compression = zipfile.ZIP_STORED if name == WEIGHTS else zipfile.ZIP_DEFLATED
                archive.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data, compression)
    except OSError as problem:
        raise DiagnosticError(cannot_write(output, problem)) from None


def write_file(output: Path, data: bytes) -> None:
    """`data` into `output`, atomically (E0608 when it cannot be written)."""
    try:
        with replacing(output) as temporary:
            temporary.write_bytes(data)
    except OSError as problem:
        raise DiagnosticError(cannot_write(output, problem)) from None


def cannot_write(path: Path, problem: OSError) -> Diagnostic:
    return error("E0608", f"cannot write `{path}`: {reason_of(problem)}", start_of(str(path)))


# ---------------------------------------------------------------------- load


class Package:
    """A loaded package: call it with the function's inputs (numpy arrays, by position or by name)."""

    def __init__(self, path: str, typed: Typed, function: str, weights: str, value: StructValue, backend: str) -> None:
        self.path, self.typed, self.function, self.weights = path, typed, function, weights
        self.signature = signature_of(typed, function)
        self.inputs = [(name, t) for name, t in self.signature.params if name != weights]
        self.weights_value = value
        self.weights_at = [name for name, _ in self.signature.params].index(weights)
        self.accepted: set[tuple] = set()  # the inputs' (shape, dtype)s that fitted the signature, up to ACCEPTED
        try:
            self.prepared: Prepared = pipeline.on_backend(backend, typed)
        except DiagnosticError as problem:  # a backend that cannot run here: said of the package, not its source
            if [d.code for d in problem.diagnostics] != ["E0406"]:
                raise
            (missing,) = problem.diagnostics
            raise DiagnosticError(error(missing.code, missing.message, start_of(path), notes=missing.notes)) from None
        self.calling: Callable[[list], Any] | None = None  # the prepared function, made at the first call

    def __call__(self, *args: Any, **named: Any) -> Any:
        return self.run(self.arguments(args, named))

    def run(self, values: list[Any]) -> Any:
        """The function on arguments already checked (`arguments`, `read_inputs`)."""
        if self.calling is None:
            self.calling = self.prepared.caller(self.function)
        return self.calling(values)

    def arguments(self, args: tuple, named: dict[str, Any]) -> list[Any]:
        """The call's arguments in the function's order, the weights among them, each input checked (E0604).
        Arrays of shapes and dtypes that fitted before fit again: a model is called with the same shapes call
        after call, and the check costs more than a small model's batch of one."""
        key = seen_before(args) if not named else None
        if key is not None and key in self.accepted:
            values = list(args)
            values.insert(self.weights_at, self.weights_value)
            return values
        values = self.checked_arguments(args, named)
        if key is not None and len(self.accepted) < ACCEPTED:
            self.accepted.add(key)
        return values

    def checked_arguments(self, args: tuple, named: dict[str, Any]) -> list[Any]:
        given = dict(zip((name for name, _ in self.inputs), args, strict=False))
        if len(args) > len(self.inputs):
            count = len(self.inputs)
            raise self.input_error(f"`{self.function}` takes {count} input{'s' * (count != 1)}, {len(args)} given")
        for name, value in named.items():
            if name not in dict(self.inputs) or name in given:
                raise self.input_error(
                    f"`{self.function}` has no input `{name}`"
                    if name not in dict(self.inputs)
                    else f"input `{name}` given twice"
                )
            given[name] = value
        missing = [name for name, _ in self.inputs if name not in given]
        if missing:
            raise self.input_error(f"missing input `{missing[0]}` of `{self.function}`")
        bindings: dict[str, int] = {}
        values = []
        for name, t in self.signature.params:
            if name == self.weights:
                values.append(self.weights_value)
                continue
            value = input_value(given[name])
            problem = conforms(value, t, bindings) if value is not None else f"expected {t}, found a non-numeric array"
            if problem is not None:
                raise self.input_error(f"input `{name}` does not fit `{self.signature_text()}`: {problem}")
            values.append(value)
        return values

    def signature_text(self) -> str:
        shown = ", ".join(f"{name}: {t}" for name, t in self.inputs)
        return f"{self.function}({shown}) -> {self.signature.result}"

    def input_error(self, message: str) -> DiagnosticError:
        return DiagnosticError(error("E0604", message, start_of(self.path)))


ACCEPTED = 64  # distinct input shapes remembered per package (a server's batch sizes)


def seen_before(args: tuple) -> tuple | None:
    """What decides whether inputs fit, if they are all C-contiguous arrays of rank 1 or more (which the
    backends take as they are): their shapes and dtypes, and how many there are."""
    key = []
    for arg in args:
        if arg.__class__ is not np.ndarray or not arg.ndim or not arg.flags.c_contiguous:
            return None
        key.append((arg.shape, arg.dtype))
    return tuple(key)


def input_value(value: Any) -> Any:
    """An input as the backends hold it: an array of a DL dtype (a 0-d one as its scalar), or None for an
    array no DL dtype holds (objects, strings)."""
    array = np.asarray(value) if not isinstance(value, np.ndarray) else value
    if array.dtype not in DTYPES.values():
        return None
    if array.ndim:
        return np.ascontiguousarray(array)
    item = array[()]
    return int(item) if array.dtype == np.int64 else bool(item) if array.dtype == np.bool_ else item


def load_package(path: str | Path, backend: str = "interp", sources: SourceMap | None = None) -> Package:
    """Read and validate the package at `path`; the `Package` runs on `backend`. Raises `DiagnosticError`."""
    path = str(path)
    pipeline.known_backend(backend)
    members = read_members(path)
    manifest = read_manifest(path, members[MANIFEST])
    for name in (SOURCE, WEIGHTS):
        if hashlib.sha256(members[name]).hexdigest() != manifest["sha256"][name]:
            raise package_error(
                "E0602",
                path,
                f"member `{name}` does not match its sha256 in the manifest: "
                "the package was changed after it was written",
            )
    source_path = f"{path}/{SOURCE}"
    typed = check_source(source_path, members[SOURCE], sources)
    function = manifest["function"]
    if entry_decl(typed.program, function) is None:
        raise package_error("E0602", path, f"the manifest names function `{function}`, which the source does not have")
    if signature_record(signature_of(typed, function)) != manifest["signature"]:
        raise package_error("E0602", path, f"the manifest's signature of `{function}` is not the source's")
    no_files(function, typed, source_path, package=path)
    signature = signature_of(typed, function)
    struct = dict(signature.params).get(manifest["weights"])
    if not isinstance(struct, StructType):
        raise package_error("E0602", path, f"the weights parameter `{manifest['weights']}` is not a struct parameter")
    value = weights_value(path, struct, members[WEIGHTS])
    return Package(path, typed, function, manifest["weights"], value, backend)


def package_error(code: str, path: str, message: str, notes: tuple[str, ...] = ()) -> DiagnosticError:
    return DiagnosticError(error(code, f"package `{path}`: {message}", start_of(path), notes=notes))


def read_members(path: str) -> dict[str, bytes]:
    """The three members of the zip at `path`, each within its size limit. Raises E0601, or E0602 for a member
    whose checksum the zip itself finds wrong."""
    try:
        with open_regular(path) as file, zipfile.ZipFile(file) as archive:
            names = archive.namelist()
            if sorted(names) != sorted(MEMBERS):
                raise package_error(
                    "E0601", path, f"expected the members {', '.join(MEMBERS)}, found {', '.join(names) or 'none'}"
                )
            for info in archive.infolist():
                if info.file_size > MEMBER_LIMITS[info.filename]:
                    raise package_error(
                        "E0601", path, f"member `{info.filename}` is too large ({info.file_size} bytes)"
                    )
            return {name: archive.read(name) for name in MEMBERS}
    except FileNotFoundError:
        raise package_error("E0601", path, "no such file") from None
    except IsADirectoryError:
        raise package_error("E0601", path, "is a directory, not a file") from None
    except zipfile.BadZipFile as problem:
        if "CRC" in str(problem):
            raise package_error("E0602", path, f"a member is corrupt ({problem})") from None
        if looks_like_onnx(path):
            raise package_error(
                "E0601",
                path,
                "it is an ONNX model, not a DL package",
                (
                    "help: run an ONNX model with onnxruntime; "
                    "`dlrun predict` runs the `.dlpkg` of an export without `--onnx`",
                ),
            ) from None
        raise package_error("E0601", path, f"not a DL package, or truncated ({problem})") from None
    except OSError as problem:
        raise package_error("E0601", path, f"cannot be read ({reason_of(problem)})") from None
    except (EOFError, zipfile.LargeZipFile, NotImplementedError) as problem:
        raise package_error("E0601", path, f"cannot be read ({problem})") from None


def reason_of(problem: OSError) -> str:
    """An error's reason in words, without Python's `[Errno 22] ...: 'path'` around it."""
    reason = problem.strerror or str(problem)
    return reason[:1].lower() + reason[1:]


# The first bytes of an ONNX model as `onnx` writes it: a protobuf ModelProto opens with field 1, its IR version
# (a small varint), then one of the fields that follow it (producer name and version, domain, model version,
# doc string, graph, opset imports).
ONNX_THIRD_BYTES = frozenset(b"\x12\x1a\x22\x28\x32\x3a\x42")


def looks_like_onnx(path: str) -> bool:
    """Whether the file at `path` (which is no zip) starts as an ONNX model does."""
    try:
        with open_regular(path) as file:
            head = file.read(3)
    except OSError:
        return False
    return len(head) == 3 and head[0] == 0x08 and 0 < head[1] < 0x80 and head[2] in ONNX_THIRD_BYTES


def read_manifest(path: str, data: bytes) -> dict[str, Any]:
    """The manifest, its fields checked. Raises E0601 for a malformed one, E0603 for a newer format."""
    try:
        manifest = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as problem:
        raise package_error("E0601", path, f"its manifest is not JSON ({problem})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise package_error("E0601", path, f"its manifest does not describe a `{FORMAT}`")
    version = manifest.get("format_version")
    if not isinstance(version, int) or version < 1:
        raise package_error("E0601", path, f"its manifest has no valid format version ({version!r})")
    if version > FORMAT_VERSION:
        raise package_error(
            "E0603",
            path,
            f"it has format version {version}, newer than this DL reads ({FORMAT_VERSION})",
            (f"it was written by DL {manifest.get('dl_version', 'unknown')}; this is DL {__version__}: upgrade DL",),
        )
    expected = {
        "function": str,
        "signature": dict,
        "weights": str,
        "sha256": dict,
    }
    for key, kind in expected.items():
        if key not in manifest:
            raise package_error("E0601", path, f"its manifest lacks `{key}`")
        if not isinstance(manifest[key], kind):
            found, wanted = json_kind(manifest[key]), json_kind(kind())
            raise package_error("E0601", path, f"its manifest's `{key}` is {found}, not {wanted}")
    if sorted(manifest["sha256"]) != sorted((SOURCE, WEIGHTS)):
        raise package_error("E0601", path, f"its manifest's `sha256` does not list {SOURCE} and {WEIGHTS}")
    return manifest


def json_kind(value: Any) -> str:
    """What a JSON value is, in words."""
    kinds = ((bool, "a boolean"), (str, "a string"), (dict, "an object"), (list, "a list"), ((int, float), "a number"))
    return next((name for kind, name in kinds if isinstance(value, kind)), "null")


def check_source(source_path: str, data: bytes, sources: SourceMap | None) -> Typed:
    """The package's source, parsed and checked (and made ready for a backend, as `pipeline.prepare` does);
    its diagnostics are the parser's and the checker's, at their places in the package's source."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise package_error("E0601", source_path, "its source is not UTF-8 text") from None
    program = load_program(source_path, text, sources)
    if program.imports.get(source_path):
        raise package_error("E0601", source_path, "a package's source imports nothing")
    return pipeline.prepare(program)[1]


def weights_value(path: str, struct: StructType, data: bytes) -> StructValue:
    """The weights as the struct value the function takes. Raises E0605 for tensors that do not fit it."""
    try:
        tensors = safetensors.numpy.load(data)
    except (safetensors.SafetensorError, KeyError) as problem:
        raise package_error("E0605", path, f"its weights cannot be read ({problem})") from None
    if not fits_at(struct, tensors, ""):
        raise package_error("E0605", path, f"its weights do not fit `{struct.name}`: {misfit(struct, tensors)}")
    return struct_value(struct, tensors, "")


def struct_value(t: Type, tensors: dict[str, np.ndarray], name: str) -> Any:
    """The run-time value of a struct or tuple type built from the tensors named as `leaves` names them."""
    match t:
        case StructType(fields=fields):
            runtime = RuntimeStruct(t.name, tuple(field for field, _ in fields))
            return StructValue(
                runtime, tuple(struct_value(item, tensors, dotted(name, field)) for field, item in fields)
            )
        case TupleType(items=items):
            return tuple(struct_value(item, tensors, dotted(name, str(p))) for p, item in enumerate(items))
    return input_value(np.array(tensors[name]))  # safetensors' arrays view its buffer read-only


# ---------------------------------------------------------------------- `dlrun predict`'s files


def read_inputs(path: str, package: Package) -> list[Any]:
    """The arrays of the .npz file at `path` as the package's checked arguments (`Package.run` takes them):
    each array is named after its input, or, for a function of one input, the file's one array may have any
    name. Never unpickles: an object array is refused. Raises E0604, at the file."""
    try:
        with open_regular(path) as file:
            arrays = read_arrays(file, path)
    except FileNotFoundError:
        raise inputs_error(path, "no such file") from None
    except NpzError as problem:  # checked member by member (interp/npz.py): a pickle is never read as one
        raise inputs_error(path, str(problem)) from None
    except OSError as problem:  # a directory, a device or a pipe, unreadable
        raise inputs_error(path, f"cannot be read ({reason_of(problem)})") from None
    names = [name for name, _ in package.inputs]
    if len(names) == 1 and len(arrays) == 1:
        arrays = {names[0]: next(iter(arrays.values()))}
    missing = [name for name in names if name not in arrays]
    extra = sorted(name for name in arrays if name not in names)
    if missing or extra:
        problem = f"it has no array `{missing[0]}`" if missing else f"it has array `{extra[0]}`, which is no input"
        raise inputs_error(path, f"{problem}; `{package.function}` takes {', '.join(f'`{n}`' for n in names)}")
    try:  # here, so that an array that does not fit is reported at the file it came from
        return package.checked_arguments((), arrays)
    except DiagnosticError as failure:
        raise inputs_error(path, failure.diagnostics[0].message) from None


def inputs_error(path: str, message: str) -> DiagnosticError:
    return DiagnosticError(error("E0604", f"input file `{path}`: {message}", start_of(path)))


def output_arrays(result: Any, name: str = "output") -> dict[str, np.ndarray]:
    """A result as named arrays: `output`, or `output.0`, `output.1` ... for a tuple."""
    if isinstance(result, tuple):
        return {
            key: array for p, item in enumerate(result) for key, array in output_arrays(item, f"{name}.{p}").items()
        }
    return {name: np.asarray(result)}


def write_outputs(path: Path, result: Any) -> None:
    """The result into an .npz file at `path`, atomically (E0608 when it cannot be written)."""
    try:
        with replacing(path) as temporary, open(temporary, "wb") as file:
            np.savez(file, **output_arrays(result))
    except OSError as problem:
        raise DiagnosticError(cannot_write(path, problem)) from None
