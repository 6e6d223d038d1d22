"""Differential fuzzing at scale: random well-typed DL programs and mutations of them, through the toolchain.

    python scripts/fuzz_backends.py --programs 10000 --mutants 2 --jobs 2 --findings fuzz-findings/

Each program (tests/program_generator.py, one seed each, seeds from `--first`), each of its `--mutants`
mutations, and a small program that may fail when it runs (`failing(seed)`) goes through what
`dlrun check`, `dlrun grad`, `dlrun` and `dlrun --backend llvm` do (tests/differential.py). Printed at
the end: how many programs ran, the diagnostics reported by code, the host calls the two backends
answered alike (with a value, with a run-time error, or both stopped at the time limit), and the
findings: crashes, internal errors, diagnostics without a real span, and disagreements between the
backends. Each finding's program is written to `--findings` as `SEED-KIND.dl` with the finding as a
comment on top. Exit status 1 if there was any finding.

The compile cache is a temporary directory, so a run neither reads nor fills the user's.
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import differential
import program_generator

AGREED = ("calls agreeing on a value", "calls agreeing on a run-time error", "calls both stopped at the time limit")


def examine_seed(task: tuple[int, int]) -> list[tuple[int, str, str, differential.Report]]:
    """The reports of one seed's program and its mutants: (seed, kind, source, report)."""
    seed, mutants = task
    program = program_generator.generate(seed)
    path = f"fuzz{seed}.dl"
    results = [(seed, "program", program.source, differential.examine(path, *fields(program)))]
    rng = random.Random(seed)
    for _ in range(mutants):
        kind, source = program_generator.mutate(program.source, rng)
        results.append((seed, kind, source, differential.examine_mutant(path, program, source)))
    failing = program_generator.failing(seed)
    results.append((seed, "failing", failing.source, differential.examine(path, *fields(failing))))
    return results


def fields(program: program_generator.Program) -> tuple:
    return program.source, program.calls, program.differentiated


def main() -> int:
    options = arguments().parse_args()
    os.environ["DL_CACHE_DIR"] = tempfile.mkdtemp(prefix="dl-fuzz-cache-")
    findings_directory = Path(options.findings)
    tasks = [(seed, options.mutants) for seed in range(options.first, options.first + options.programs)]
    totals: collections.Counter = collections.Counter()
    codes: collections.Counter = collections.Counter()
    findings: list[str] = []
    started = time.perf_counter()
    with multiprocessing.Pool(options.jobs, maxtasksperchild=200) as pool:
        for done, results in enumerate(pool.imap_unordered(examine_seed, tasks, chunksize=4), start=1):
            for seed, kind, source, report in results:
                totals[{"program": "programs", "failing": "programs that may fail"}.get(kind, "mutants")] += 1
                codes.update(report.diagnostics)
                for what, count in zip(AGREED, (report.values, report.errors, report.hangs), strict=True):
                    totals[what] += count
                for finding in report.findings:
                    findings.append(f"seed {seed} ({kind}): {finding}")
                    record(findings_directory, seed, kind, source, finding)
            if done % 100 == 0:
                print(f"{done} seeds, {len(findings)} findings, {time.perf_counter() - started:.0f} s", flush=True)
    show(totals, codes, findings, time.perf_counter() - started)
    return 1 if findings else 0


def arguments() -> argparse.ArgumentParser:
    command = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    command.add_argument("--programs", type=int, default=10_000, help="how many generated programs (seeds)")
    command.add_argument("--mutants", type=int, default=2, help="mutations of each program")
    command.add_argument("--first", type=int, default=0, help="the first seed")
    command.add_argument("--jobs", type=int, default=2, help="worker processes")
    command.add_argument("--findings", default="fuzz-findings", help="where the programs of findings are written")
    return command


def record(directory: Path, seed: int, kind: str, source: str, finding: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    comment = "".join(f"# {line}\n" for line in finding.splitlines())
    (directory / f"{seed}-{kind}.dl").write_text(comment + source, encoding="utf-8")


def show(totals: collections.Counter, codes: collections.Counter, findings: list[str], seconds: float) -> None:
    print(
        f"\n{totals['programs']} programs, {totals['mutants']} mutants of them and "
        f"{totals['programs that may fail']} programs that may fail, in {seconds:.0f} s"
    )
    for what in AGREED:
        print(f"{what}: {totals[what]}")
    print("diagnostics by code:", ", ".join(f"{code} {count}" for code, count in sorted(codes.items())) or "none")
    print(f"findings: {len(findings)}")
    for finding in findings:
        print("  " + finding.replace("\n", "\n    "))


if __name__ == "__main__":
    sys.exit(main())
