"""The examples: each runs (in a temporary directory, as they write checkpoints and metrics) and
prints exactly its golden `.out`; the training examples also learn, save and resume."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, check_golden

EXAMPLES = ROOT / "examples"
# A golden's name says which run it holds: NAME.out that of `dlrun examples/NAME.dl`, NAME.quick.out that of
# `dlrun examples/NAME.dl quick`, the few seconds' run of a training example.
GOLDENS = sorted(EXAMPLES.glob("*.out"))


@pytest.fixture
def run_in(tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch):
    """Run `dlrun EXAMPLE ARGS...` in-process, the current directory a fresh temporary one."""
    from dl.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DL_METRICS", raising=False)
    monkeypatch.delenv("DL_RUNS", raising=False)

    def run(name: str, *args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        status = main([str(EXAMPLES / name), *args])
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return run


def test_every_example_has_one_golden_named_after_its_run() -> None:
    programs = {path.stem for path in EXAMPLES.glob("*.dl")}
    runs = [golden.name.removesuffix(".out").split(".") for golden in GOLDENS]
    assert sorted(run[0] for run in runs) == sorted(programs)
    assert all(len(run) == 1 or run[1:] == ["quick"] for run in runs), runs


@pytest.mark.parametrize("golden", GOLDENS, ids=lambda p: p.name)
def test_example_output(golden: Path, run_in, update_goldens: bool) -> None:
    program, *args = golden.name.removesuffix(".out").split(".")
    status, out, err = run_in(f"{program}.dl", *args)
    assert (status, err) == (0, "")
    check_golden(golden, out, update_goldens, rtol=1e-6)


def logged_metrics(directory: Path, run: str | None = None) -> list[dict]:
    """What the run (the only one, unless named) logged: its record's `metrics.jsonl` under `runs/`."""
    records = [r for r in (directory / "runs").iterdir() if run is None or r.name == run]
    assert len(records) == 1, records
    return [json.loads(line) for line in (records[0] / "metrics.jsonl").read_text().splitlines()]


def test_train_learns_saves_and_resumes(run_in, tmp_path: Path) -> None:
    status, out, err = run_in("train.dl")
    assert (status, err) == (0, "")
    accuracies = [float(line.split()[-1]) for line in out.splitlines() if line.startswith("epoch")]
    assert len(accuracies) == 20 and accuracies[-1] >= 0.97, out
    assert (tmp_path / "digits_mlp.safetensors").is_file()
    logged = logged_metrics(tmp_path)
    assert [r["name"] for r in logged[:2]] == ["loss", "test accuracy"] and len(logged) == 40
    status, resumed, err = run_in("train.dl", "--resume")
    assert (status, err) == (0, "")
    _, resumed_run = sorted((tmp_path / "runs").iterdir())  # each run its own record
    assert json.loads((resumed_run / "run.json").read_text())["arguments"] == ["--resume"]
    assert len(logged_metrics(tmp_path, resumed_run.name)) == 10
    first = resumed.splitlines()[0]
    assert first.startswith("resumed from digits_mlp.safetensors at step 440 test accuracy ")
    assert float(first.split()[-1]) == accuracies[-1]  # the saved model, exactly


def test_train_refuses_a_mode_it_does_not_know_before_training(run_in, tmp_path: Path) -> None:
    status, out, err = run_in("train.dl", "--quick")  # `quick` meant: it trained 20 epochs and saved over
    assert (status, out) == (1, "")
    assert err.startswith(
        'error[E0502]: assertion failed: unknown mode "--quick": give none (train 20 epochs), `quick` (2 epochs) '
        "or `--resume`\n"
    )
    assert not (tmp_path / "digits_mlp.safetensors").exists()


def test_train_is_reproducible(run_in) -> None:
    assert run_in("train.dl", "quick") == run_in("train.dl", "quick")


def test_cnn_learns(run_in, tmp_path: Path) -> None:
    status, out, err = run_in("cnn.dl")
    assert (status, err) == (0, "")
    *epochs, saved = [line.split() for line in out.splitlines()]
    losses = [float(words[3]) for words in epochs]
    accuracies = [float(words[-1]) for words in epochs]
    assert len(accuracies) == 10 and accuracies[-1] >= 0.97, out
    assert saved == ["saved", "digits_cnn.safetensors"] and (tmp_path / "digits_cnn.safetensors").is_file()
    assert losses[-1] < losses[0] / 10, out
    assert len(logged_metrics(tmp_path)) == 20


def test_charrnn_loss_falls_and_it_samples_text(run_in, tmp_path: Path) -> None:
    status, out, err = run_in("charrnn.dl")
    assert (status, err) == (0, "")
    lines = out.splitlines()
    losses = [float(line.split()[-1]) for line in lines if line.startswith("step ")]
    assert len(losses) == 7, out
    assert losses[-1] < 2.2 and all(later < earlier for earlier, later in itertools.pairwise(losses)), out
    sample = "\n".join(lines[len(losses) :])
    assert sample.startswith('The "assert"') and len(sample) >= 300
    words = sample.split()
    assert sum(word.isalpha() for word in words) >= len(words) // 3, sample  # mostly text
    logged = logged_metrics(tmp_path)
    assert len(logged) == 375 and logged[0]["value"] > 5.0  # about log(256) = 5.5 per byte at first


def test_gpt_loss_falls_and_it_samples_text(run_in, tmp_path: Path) -> None:
    status, out, err = run_in("gpt.dl", "quick")
    assert (status, err) == (0, "")
    first, *steps = out.split("sample:\n")[0].splitlines()
    untrained = float(first.split()[2])
    assert first.startswith("held-out loss ") and abs(untrained - math.log(256)) < 0.1, out  # uniform at first
    losses = [float(line.split()[3]) for line in steps]
    held_out = [float(line.split()[-1]) for line in steps]
    assert [line.split()[1] for line in steps] == ["10", "20", "30", "40"], out
    assert all(later < earlier for earlier, later in itertools.pairwise([untrained, *held_out])), out
    assert losses[-1] < 3.3 and held_out[-1] < 3.3, out
    sample = out.split("sample:\n")[1].removesuffix("\n")
    assert sample.startswith(" same size as the data to fill i") and len(sample.encode()) == 32 + 60, sample
    logged = logged_metrics(tmp_path)
    assert [record["step"] for record in logged] == list(range(1, 41)) and logged[0]["value"] > 5.0


def huber_data() -> tuple[np.ndarray, np.ndarray]:
    """regression.dl's data, drawn as its randn and rand draw (numpy's default_rng)."""
    f32 = np.float32
    xs = np.random.default_rng(1).standard_normal((120, 3)).astype(f32)
    outlier = np.random.default_rng(3).random(120).astype(f32) < f32(1.0) / f32(6.0)
    noise = f32(0.1) * np.random.default_rng(2).standard_normal(120).astype(f32)
    push = np.where(outlier, f32(8.0) + f32(4.0) * np.random.default_rng(4).random(120).astype(f32), f32(0.0))
    return xs, xs @ np.array([2.0, -3.0, 0.5], f32) + f32(1.0) + noise + push


def test_regression_fits_like_torch(run_in) -> None:
    import torch

    status, out, err = run_in("regression.dl")
    assert (status, err) == (0, "")
    fitted = {}
    for line in out.splitlines()[-2:]:
        name, numbers = line.split(" w ")
        w, b = numbers.split(" b ")
        fitted[name.strip()] = np.array([*map(float, w.strip("[ ]").split()), float(b)])
    xs, ys = huber_data()
    truth = np.array([2.0, -3.0, 0.5, 1.0])
    assert np.abs(fitted["huber"] - truth).max() < 0.1, out
    assert fitted["least squares"][3] - truth[3] > 1.0, out  # pulled up by the outliers
    # least squares converged to the closed form
    design = np.hstack([xs, np.ones((120, 1), np.float32)]).astype(np.float64)
    exact = np.linalg.lstsq(design, ys.astype(np.float64), rcond=None)[0]
    np.testing.assert_allclose(fitted["least squares"], exact, atol=1e-4)
    # the Huber fit is torch's: the same loss, the same Adam steps from zero
    w = torch.zeros(3, requires_grad=True)
    b = torch.zeros((), requires_grad=True)
    adam = torch.optim.Adam([w, b], lr=0.05)
    for _ in range(300):
        adam.zero_grad()
        prediction = torch.from_numpy(xs) @ w + b
        torch.nn.functional.huber_loss(prediction, torch.from_numpy(ys), delta=0.5).backward()
        adam.step()
    np.testing.assert_allclose(fitted["huber"], [*w.detach().numpy(), b.item()], atol=1e-4)
