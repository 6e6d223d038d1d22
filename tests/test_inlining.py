"""What `grad` writes in place of a call (lang/autodiff/anf.py `forwarded`, `small_call`) means what the call
meant: each argument evaluated once and in order, the callee's names (its module's, its imports', the
dimensions of its annotations) naming what they named there, and a caller's own declarations of built-ins
met as before. Programs a review found wrong in the first version of both, each run and compared with the
values and effects the forward alone gives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

NOISY = """
fn noisy(x) {
    print("noisy")
    return x * 2.0f64
}
fn na(x) {
    print("A")
    return x * 2.0f64
}
fn nb(x) {
    print("B")
    return x * 3.0f64
}
"""

PROGRAMS = {
    # a function passing one parameter twice and dropping the other: `noisy` still runs once per forward
    "unused_argument": (
        "fn g(a, b) { return maximum(a, a) }\n" + NOISY + "fn f(x: f64) -> f64 { return g(x * 3.0f64, noisy(x)) }\n"
        "fn main() {\n    print(f(1.5f64))\n    print(grad(f)(1.5f64))\n}\n",
        {},
        "noisy\n4.5\nnoisy\n3.0\n",
    ),
    "repeated_argument": (
        "fn g(a, b) { return maximum(a, a) }\n" + NOISY + "fn f(x: f64) -> f64 { return g(noisy(x), x) }\n"
        "fn main() {\n    print(f(1.5f64))\n    print(grad(f)(1.5f64))\n}\n",
        {},
        "noisy\n3.0\nnoisy\n2.0\n",
    ),
    # parameters passed on in another order: the arguments are still evaluated left to right
    "reordered_arguments": (
        "fn mx(a, b) { return maximum(b, a) }\n" + NOISY + "fn f(x: f64) -> f64 { return mx(na(x), nb(x)) }\n"
        "fn main() {\n    print(f(1.5f64))\n    print(grad(f)(1.5f64))\n}\n",
        {},
        "A\nB\n4.5\nA\nB\n3.0\n",
    ),
    # the caller's parameter `q` takes the name of its alias of the module the callee reads a const from
    "parameter_named_like_an_alias": (
        "import lib\nimport third as q\n\nfn f(x: f64, q: f64) -> f64 {\n    return lib.k(x) * q\n}\n\n"
        "fn main() {\n    print(f(0.5f64, 3.0f64), grad(f)(0.5f64, 3.0f64))\n}\n",
        {
            "lib.dl": "import third as th\n\nfn k(x) {\n    let y = x * th.C\n    return y\n}\n",
            "third.dl": "const C = 2.0f64\n",
        },
        "3.0 6.0\n",
    ),
    # the callee reads its alias `th`, then binds a local of that name
    "local_named_like_an_alias": (
        "import lib\n\nfn f(x: f64) -> f64 {\n    return lib.k(x)\n}\n\n"
        "fn main() {\n    print(f(0.5f64), grad(f)(0.5f64))\n}\n",
        {
            "lib.dl": "import third as th\n\nfn k(x) {\n    let a = th.cube(x) * th.C\n    let th = a * 2.0f64\n"
            "    return th\n}\n",
            "third.dl": "fn cube(x) {\n    return x * x * x\n}\n\nconst C = 2.0f64\n",
        },
        "0.5 3.0\n",
    ),
    # the caller declares `where`, which relu's rule calls: the callee's derivative is written in its module
    "caller_declares_a_built_in": (
        "import lib\n\nfn where(c, a, b) {\n    return a\n}\n\n"
        "fn f(x: f64[3]) -> f64 {\n    return sum(lib.act(x) * x)\n}\n\n"
        "fn main() {\n    print(grad(f)([0.3f64, -0.4f64, 1.2f64]))\n}\n",
        {"lib.dl": "fn act(x) {\n    let y = relu(x)\n    return y * 2.0f64\n}\n"},
        "[1.2 0.  4.8]\n",
    ),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_a_call_written_in_place_means_what_the_call_meant(name: str, dlrun, tmp_path: Path) -> None:
    main, modules, expected = PROGRAMS[name]
    for file, text in modules.items():
        (tmp_path / file).write_text(text)
    (tmp_path / "main.dl").write_text(main)
    assert dlrun(str(tmp_path / "main.dl")) == (0, expected, "")


def test_a_function_reading_its_annotation_s_dimension_is_not_written_in_place(dlrun, tmp_path: Path) -> None:
    """`k` reads `N`, the length its annotation names; the caller's own `N` is another length (2, not 3), so
    `k` is split, and the printed derivative, pasted into the program, computes what `grad` computes."""
    source = (
        "fn k(v: f64[N]) -> f64 {\n    let s = sum(v) / float(N, dtype=f64)\n    return s * s\n}\n\n"
        "fn f(x: f64[N, M]) -> f64 {\n    return k(x[0])\n}\n\n"
    )
    main = "fn main() {\n    print(grad(f)([[0.3f64, -0.4f64, 1.2f64], [0.1f64, 0.2f64, 0.3f64]]))\n}\n"
    program = tmp_path / "program.dl"
    program.write_text(source + main)
    status, expected, err = dlrun(str(program))
    assert (status, err) == (0, "") and expected.startswith("[[0.24444444 0.24444444 0.24444444]")
    status, printed, err = dlrun("grad", str(program), "--fn", "f")
    assert (status, err) == (0, "") and "k_fwd(" in printed
    pasted = tmp_path / "pasted.dl"
    pasted.write_text(source + printed + main.replace("grad(f)", "f_grad"))
    assert dlrun(str(pasted)) == (0, expected, "")


def test_a_call_leaving_arguments_to_defaults_is_written_in_place(dlrun, tmp_path: Path) -> None:
    """`lib.norm(x)` leaves `eps` to its default, `lib`'s const `EPS`: the body is written in place with the
    default named through `import lib` (`lib.EPS`), and the gradient is the one of the formula."""
    (tmp_path / "lib.dl").write_text(
        "const EPS = 0.5f64\n\nfn norm(x, eps = EPS) {\n    let s = sum(x * x) + eps\n    return x / sqrt(s)\n}\n"
    )
    (tmp_path / "main.dl").write_text(
        "import lib\n\nfn f(x: f64[3]) -> f64 {\n    return sum(lib.norm(x) * x)\n}\n\n"
        "fn main() {\n    print(grad(f)([0.3f64, -0.4f64, 1.2f64]))\n}\n"
    )
    status, printed, err = dlrun("grad", str(tmp_path / "main.dl"), "--fn", "f")
    assert (status, err) == (0, "") and "lib.EPS" in printed and "_fwd" not in printed
    status, out, err = dlrun(str(tmp_path / "main.dl"))
    assert (status, err) == (0, "")
    x = np.array([0.3, -0.4, 1.2])
    s = (x * x).sum() + 0.5  # f = (x . x) / sqrt(s): its gradient is 2x / sqrt(s) - (x . x) x / s^1.5
    expected = 2 * x / np.sqrt(s) - (x @ x) * x / s**1.5
    np.testing.assert_allclose([float(v) for v in out.strip(" []\n").split()], expected, rtol=1e-7)
