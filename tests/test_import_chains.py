"""Long chains of imports: `main` imports m1, m1 imports m2, ... mN. Module loading and every pass after it
handle any length (generated chains of 10, 400 and 2000 modules); a chain that closes on itself is still
the import cycle E0402, at the import that closes it."""

from __future__ import annotations

from pathlib import Path

import pytest

LENGTHS = [10, 400, 2000]


def write_chain(directory: Path, length: int, closed: bool = False) -> Path:
    """main.dl and m1.dl .. mN.dl: `mK.value()` is `m(K+1).value() + 1`, the last one's is 1 (or, when
    `closed`, the last imports m1 again). Returns main.dl."""
    for k in range(1, length + 1):
        if k < length or closed:
            following = k % length + 1
            text = f"import m{following}\n\nfn value() -> i64 {{\n    return m{following}.value() + 1\n}}\n"
        else:
            text = "fn value() -> i64 {\n    return 1\n}\n"
        (directory / f"m{k}.dl").write_text(text)
    main = directory / "main.dl"
    main.write_text("import m1\n\nfn main() {\n    print(m1.value())\n}\n")
    return main


@pytest.mark.parametrize("length", LENGTHS)
def test_a_chain_of_imports_loads_checks_and_runs(length: int, tmp_path: Path, dlrun) -> None:
    main = str(write_chain(tmp_path, length))
    assert dlrun("check", main) == (0, "ok\n", "")
    assert dlrun(main) == (0, f"{length}\n", "")


@pytest.mark.parametrize("length", LENGTHS)
def test_a_chain_closing_on_itself_is_an_import_cycle(length: int, tmp_path: Path, dlrun) -> None:
    main = str(write_chain(tmp_path, length, closed=True))
    status, out, err = dlrun(main)
    cycle = " -> ".join(f"m{k}" for k in [*range(1, length + 1), 1])
    assert (status, out) == (1, "")
    assert err.startswith(f"error[E0402]: import cycle: {cycle}\n --> {tmp_path / f'm{length}.dl'}:1:1\n")
    assert err.count("error[") == 1
