"""Reverse-mode automatic differentiation as a source transformation: typed program -> program.

`differentiate(typed)` replaces every `grad(f, wrt=...)` and `value_and_grad(f, ...)` by a DL
function it generates, and returns the new program; no backend ever sees `grad`. For a
function `f` it writes

- `f_grad` (`f_value_and_grad`, `f_grad_wrt_1`, ...): runs `f`'s body forward, then its
  adjoint backward from the seed `1.0`, and returns the gradient of the chosen arguments;
- `g_fwd(params...)` and `g_bwd(params..., kept, d_result)` once for every function `g` that
  differentiated code calls (shared by all callers): `g_fwd` runs `g`'s body and returns its
  result with the values its backward sweep reads (`kept`), `g_bwd` runs that backward sweep
  and returns the adjoints of `g`'s float parameters, so a call's derivative is a call;
- `g_back(params..., d_result)` instead for a recursive `g` (whose kept values would contain
  themselves) or one that returns from inside an `if`: it recomputes `g`'s forward, then runs
  its backward, so recursion is recursion;
- `g_quiet(params...)` for a function `g` with a `print` or `assert` (or calling one) that code run
  again in a backward sweep calls: `g` without them, so effects happen once.

How each construct becomes code (docs/autodiff.md shows the printed result):

- Straight-line code is put in A-normal form (every operation's value gets a name) and
  renamed so that no name is assigned twice; the backward sweep then reads any value it
  needs by name, in reverse order, and adds each operation's adjoint contributions using
  that operation's rule from `RULES` (one DL template per primitive and operator).
- `for`, `break`, `continue` and `return` inside loops are first lowered to `while` with
  flags; a `return` inside an `if` moves the statements after the `if` into its branches.
- An `if` saves the values of the variables it assigns before it runs; its backward
  restores them, runs the branch taken again (recomputing its intermediates), then that
  branch's backward.
- A `while` pushes the values of the variables it assigns onto a tape at the start of every
  iteration, and at its end the values the iteration's backward reads onto another (`Kept`);
  its backward pops both one iteration at a time and runs that iteration's backward. Views
  of unchanged values (`m.w`, `x[t]`) are taken again rather than kept. A loop with a loop
  inside keeps only its variables and recomputes each iteration's body in its backward.

Everything this emits (`tape`, `push`, `pop`, `unbroadcast`, ...) has a rule too, so generated
code can be differentiated again: `grad(grad(f))` is two rounds of this transform, the program
re-checked in between so that the second round has the types of the first round's code.
"""

from __future__ import annotations

from dl.lang import ast
from dl.lang.autodiff.sites import Site, functions_with_grad, grad_sites, reached, reaches_grad, unwritten
from dl.lang.autodiff.trees import call, name
from dl.lang.check import Typed, aux_problem, check, gradient_problem
from dl.lang.diagnostics import UNKNOWN_SPAN, Diagnostic, DiagnosticError, Span, error
from dl.lang.modules import Program
from dl.lang.types import AnyType

MAX_ROUNDS = 8  # grad(grad(...)) nesting depth


def differentiate(
    typed: Typed, calls: tuple = (), within: frozenset[tuple[str, str]] | None = None
) -> tuple[Program, Typed]:
    """Replace every `grad`/`value_and_grad` in a checked program by generated DL functions.

    Returns the new program and its check (`calls`: the host's calls the first check was given, see
    `check`); `within`: only the `grad`s in the functions it names ((module, name)). Raises
    `DiagnosticError` for what cannot be differentiated (a primitive without a derivative rule, a call of
    a function value the checker cannot see)."""
    # (module, function, "back", variant) -> its `_back` function, (module, function, "fwd" or "bwd", variant)
    # -> its `_fwd` and `_bwd` functions ("" if it is not split), (module, function, "quiet", ()) -> its quiet
    # copy: shared by all rounds (`Round.variant_key`)
    backs: dict[tuple, str] = {}
    for _ in range(MAX_ROUNDS):
        sites = list(grad_sites(typed, within))
        if not sites:
            left = next(unwritten(typed, within), None)
            if left is not None:  # `grad(d)` of a gradient held by a parameter: no round can write it
                message = "`grad` cannot differentiate a gradient that a variable holds from outside this function"
                notes = ("help: write `grad` of the function itself, `grad(grad(f))`",)
                raise DiagnosticError([error("E0333", message, left.span, notes=notes)])
            return typed.program, typed
        from dl.lang.autodiff.round import Round  # imported here: a program without `grad` does without it

        program = Round(typed, backs).run(sites)
        typed = check(program, calls)
        if typed.errors:
            raise DiagnosticError([internal_error(typed.errors[0])])
    raise DiagnosticError([error("E0333", f"`grad` is nested more than {MAX_ROUNDS} deep", UNKNOWN_SPAN)])


def derivative_source(
    typed: Typed, function: str, wrt: int | tuple[int, ...], with_value: bool, has_aux: bool = False
) -> str:
    """The printed DL source of the functions `grad(function, wrt=...)` generates in the entry module of a
    checked program: the gradient function first, then the `_back` functions, then those that the `grad`s
    already in the program generate (`function` may itself call `grad`: `grad(df)` of a derivative) and
    the printed code calls."""
    from dl.lang.printer import print_decl

    declared = [(p, d) for p, m in typed.program.modules.items() for d in m.decls if isinstance(d, ast.FnDecl)]
    before = {(p, d.name) for p, d in declared}  # the functions as written
    path = typed.program.entry
    module = typed.program.modules[path]
    decl = next((d for d in module.decls if isinstance(d, ast.FnDecl) and d.name == function), None)
    if decl is not None and reaches_grad(typed, decl, functions_with_grad(typed)):
        # the `grad`s inside first, as a run does (only those: the names printed are those a program that
        # calls `grad(function)` alone gets)
        top_level = {id(d) for _, d in declared}
        within = {(path, decl.name)} | {
            (where, typed.functions[key][0].name)
            for key, where in reached(typed, decl).items()
            if where and key in top_level  # not a lambda, nor a local `fn` (its `grad`s are its function's)
        }
        typed = differentiate(typed, within=frozenset(within))[1]
        module = typed.program.modules[path]
        decl = next(d for d in module.decls if isinstance(d, ast.FnDecl) and d.name == function)
    if decl is None:
        names = [d.name for d in module.decls if isinstance(d, ast.FnDecl)]
        from dl.lang.diagnostics import closest

        suggestion = closest(function, names)
        notes = (f"help: did you mean `{suggestion}`?",) if suggestion else ()
        start = Span(path, 1, 1, 1, 2)
        raise DiagnosticError([error("E0201", f"`{path}` has no function `{function}`", start, notes=notes)])
    if any(typed.type_of(p) is None for p in decl.params):
        raise DiagnosticError(
            [
                error(
                    "E0333",
                    f"`{function}` is never called, so the types of its parameters are unknown",
                    decl.name_span,
                    notes=("help: annotate its parameters, or call it (or `grad` of it) somewhere",),
                )
            ]
        )
    check_request(typed, decl, wrt, with_value, has_aux)
    site_call = call("grad" if not with_value else "value_and_grad", name(function))
    site = Site(site_call, path, decl, path, name(function), wrt, with_value, has_aux=has_aux)
    from dl.lang.autodiff.round import Round

    generator = Round(typed)
    program = generator.run([site])
    checked = check(program)
    if checked.errors:
        raise DiagnosticError([internal_error(checked.errors[0])])
    shown = [
        (module_path, decl)
        for module_path in (path, *(p for p in program.modules if p != path))
        for decl in generator.added[module_path]
    ]
    shown += earlier_derivatives(program, shown, before)
    parts = []
    for module_path, decl in shown:
        where = "" if module_path == path else f"# in {module_path}, beside `{generated_from(decl.name)}`\n"
        parts.append(where + print_decl(decl))
    return "\n\n".join(parts) + "\n"


def earlier_derivatives(program: Program, shown: list, before: set) -> list[tuple[str, ast.FnDecl]]:
    """The functions an earlier round generated (not in the program as written, `before`) that the code
    in `shown` calls, directly or through each other: the derivatives of the `grad`s inside a function
    that is differentiated again."""
    generated = {
        (module_path, decl.name): decl
        for module_path, module in program.modules.items()
        for decl in module.decls
        if isinstance(decl, ast.FnDecl) and (module_path, decl.name) not in before
    }
    seen = {(module_path, decl.name) for module_path, decl in shown}
    found: list[tuple[str, ast.FnDecl]] = []
    pending = list(shown)
    while pending:
        module_path, decl = pending.pop(0)
        for node in ast.walk(decl.body):
            if not isinstance(node, ast.Call):
                continue
            if isinstance(node.func, ast.Name):
                candidates = [(module_path, node.func.id)]
            elif isinstance(node.func, ast.Field):  # `module.f_grad_fwd`: the one generated function of that name
                candidates = [key for key in generated if key[1] == node.func.name and key[0] != module_path]
            else:
                continue
            if len(candidates) == 1 and candidates[0] in generated and candidates[0] not in seen:
                seen.add(candidates[0])
                found.append((candidates[0][0], generated[candidates[0]]))
                pending.append(found[-1])
    return found


def check_request(
    typed: Typed, decl: ast.FnDecl, wrt: int | tuple[int, ...], with_value: bool, has_aux: bool = False
) -> None:
    """`dlrun grad --fn NAME --wrt ...` asks what `grad(NAME, wrt=..., has_aux=...)` would: the checker's E0334,
    E0330 and E0331 for a call of it, at the function's name (there is no call), for each argument types it is
    used with."""
    name = "value_and_grad" if with_value else "grad"
    positions = wrt if isinstance(wrt, tuple) else (wrt,)
    for position in positions:
        if not 0 <= position < len(decl.params):
            count = len(decl.params)
            message = f"`wrt={position}` names no parameter: `{decl.name}` has {count} parameter{'s' * (count != 1)}"
            raise DiagnosticError([error("E0334", message, decl.name_span)])
    for signature in typed.signatures.get(typed.program.entry, ()):
        if signature.name == decl.name and not isinstance(signature.result, AnyType):
            args = [param_type for _, param_type in signature.params]
            result = signature.result
            if has_aux:  # (loss, aux): the loss is what is differentiated
                problem = aux_problem(name, result, decl.name_span)
                if problem is not None:
                    raise DiagnosticError([problem])
                result = result.items[0]
            problem = gradient_problem(name, result, args, positions, decl.name_span, "`dlrun grad --has-aux`")
            if problem is not None:
                raise DiagnosticError([problem])


def generated_from(function: str) -> str:
    """The function a `_back`, `_fwd`, `_bwd` or `_quiet` function was generated from (by its name)."""
    for suffix in ("_back", "_fwd", "_bwd", "_quiet"):
        if suffix in function:
            return function.rsplit(suffix, 1)[0]
    return function


def internal_error(diagnostic: Diagnostic) -> Diagnostic:
    return error(
        "E0333",
        f"internal error in generated derivative code, please report: {diagnostic.message}",
        diagnostic.span,
        notes=("`dlrun grad FILE --fn NAME` prints the derivative code",),
    )
