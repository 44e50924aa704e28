"""A real, unchanged model-zoo script (official/cv/lenet, tests/assets/modelzoo/lenet) swept
with only a sweep file: `plan --check` catches the mistakes first, each trial writes its
checkpoints in its own folder, and `msexp metrics` shows what a log yields."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from msexp.cli import app
from tests.conftest import ASSETS, child_runs, write

LENET = ASSETS / "modelzoo" / "lenet"
LOGS = ASSETS / "logs"


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "300"})


def write_mnist(folder: Path, n: int) -> None:
    """MNIST's idx files with `n` images: a bright bar whose row says the class."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, n).astype(np.uint8)
    images = rng.integers(0, 40, (n, 28, 28)).astype(np.uint8)
    for i, label in enumerate(labels):
        images[i, 2 + 2 * label:4 + 2 * label, 4:24] = 255
    folder.mkdir(parents=True)
    (folder / "train-images-idx3-ubyte").write_bytes(
        struct.pack(">IIII", 2051, n, 28, 28) + images.tobytes())
    (folder / "train-labels-idx1-ubyte").write_bytes(
        struct.pack(">II", 2049, n) + labels.tobytes())


@pytest.fixture
def lenet(workdir: Path) -> Path:
    folder = workdir / "lenet"
    shutil.copytree(LENET, folder)
    write_mnist(folder / "data" / "train", 64)
    return folder


FIXED = "device_target: CPU, data_path: data, batch_size: 32"


def test_plan_check_refuses_a_name_the_script_has_no_flag_for(lenet: Path) -> None:
    sweep = write(lenet / "epochs.yaml", f"""
        name: lenet-epochs
        experiment: {{command: python train.py}}
        objective: {{metric: train_loss, direction: minimize}}
        fixed: {{{FIXED}, epochs: 1}}
        params: {{lr: [0.01]}}
    """)
    result = invoke("plan", str(sweep), "--check")
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1] == (
        f"{sweep}: fixed.epochs: is not a flag of the script: its --help lists no --epochs "
        "(did you mean --epoch_size?), got epochs")
    budget = write(lenet / "budget.yaml", sweep.read_text().replace(", epochs: 1}", "}").replace(
        "{command: python train.py}", "{command: python train.py, check: {epochs: 1}}"))
    refused = invoke("plan", str(budget), "--check")
    assert refused.exit_code == 2, refused.output
    assert refused.output.strip().splitlines()[-1].startswith(
        f"{budget}: experiment.check.epochs: is not a flag of the script")
    quick = write(lenet / "quick.yaml", sweep.read_text().replace(", epochs: 1}", "}"))
    checked = invoke("plan", str(quick), "--check")
    assert checked.exit_code == 0, checked.output
    assert "name a tiny budget in experiment.check" in checked.output


def test_plan_check_runs_the_script_for_real_and_finds_the_objective_or_refuses(
        lenet: Path) -> None:
    sweep = write(lenet / "check.yaml", f"""
        name: lenet-check
        experiment:
          command: python train.py
          check: {{epoch_size: 1}}
        objective: {{metric: train_loss, direction: minimize}}
        fixed: {{{FIXED}, epoch_size: 50, ckpt_path: "${{output_dir}}",
                dataset_sink_mode: true}}
        params: {{lr: [0.01, 0.05]}}
    """)
    result = invoke("plan", str(sweep), "--check")
    assert result.exit_code == 0, result.output
    assert "every name is a flag of the script" in result.output
    assert "│ train_loss │" in result.output and "│ step_ms    │" in result.output
    assert "objective train_loss found: " in result.output
    assert "checkpoint_lenet-1_2.ckpt" in result.output, "epoch_size: 1, in its own folder"

    missing = write(lenet / "acc.yaml", sweep.read_text().replace(
        "{metric: train_loss, direction: minimize}", "{metric: eval_acc}"))
    refused = invoke("plan", str(missing), "--check")
    assert refused.exit_code == 2, refused.output
    last = refused.output.strip().splitlines()[-1]
    assert last.startswith(f"{missing}: objective.0.metric: the check run did not report it "
                           "(it reported train_loss, step_ms; `msexp metrics ")
    assert last.endswith("trial.log` shows why), got eval_acc")


@pytest.mark.slow  # over 5 s: the fast tier stays quick
def test_an_unchanged_model_zoo_script_sweeps_each_trial_in_its_own_folder(
        lenet: Path) -> None:
    sweep = write(lenet / "sweep.yaml", f"""
        name: lenet-zoo
        experiment: {{command: python train.py}}
        objective: {{metric: train_loss, direction: minimize}}
        fixed: {{{FIXED}, epoch_size: 1, ckpt_path: ./ckpt, enable_modelarts: false}}
        params: {{lr: [0.01, 0.05]}}
    """)
    result = invoke("sweep", str(sweep))
    assert result.exit_code == 0, result.output
    runs = child_runs("lenet-zoo")
    assert sorted(r.data.tags["status"] for r in runs) == ["COMPLETE", "COMPLETE"]
    assert all(r.data.metrics["train_loss"] > 0 and r.data.metrics["step_ms"] > 0
               for r in runs)
    assert all(r.data.params["enable_modelarts"] == "False" for r in runs)
    checkpoints = sorted(Path("mlruns/trials/lenet-zoo").rglob("*.ckpt"))
    assert [p.relative_to(Path("mlruns/trials/lenet-zoo")).parts for p in checkpoints] == [
        (f"trial-000{i}", "outputs", "ckpt", "checkpoint_lenet-1_2.ckpt") for i in (0, 1)
    ], "one checkpoint in each trial's own folder"
    assert not (lenet / "ckpt").exists()
    best = invoke("best", str(sweep))
    assert best.exit_code == 0, best.output
    assert "checkpoint_lenet-1_2.ckpt" in best.output and "(none kept)" not in best.output
    exported = invoke("best", str(sweep), "--export", "best-model")
    assert exported.exit_code == 0, exported.output
    winner = min(runs, key=lambda r: r.data.metrics["train_loss"])
    trial = int(winner.data.tags["msexp.trial"])
    kept = Path(f"mlruns/trials/lenet-zoo/trial-{trial:04d}/outputs/ckpt/"
                "checkpoint_lenet-1_2.ckpt")
    assert Path("best-model/model.ckpt").read_bytes() == kept.read_bytes()


def test_metrics_shows_what_a_log_yields_and_the_echo_it_leaves_out() -> None:
    log = LOGS / "mindcv_resnet18.log"
    shown = invoke("metrics", str(log))
    assert shown.exit_code == 0, shown.output
    assert "│ Top_1_Accuracy │" in shown.output and "MixUp" not in shown.output.split(
        "not recorded")[0]
    assert "not recorded (printed before the first training line): " in shown.output
    as_json = json.loads(invoke("metrics", str(log), "--json").output)
    assert as_json["metrics"]["Top_1_Accuracy"] == pytest.approx(0.1)
    assert as_json["not_recorded"]["MixUp"] == 0.0
    pattern = invoke("metrics", str(log), "--json", "--pattern",
                     r"best val acc: (?P<best_acc>[0-9.]+)%")
    assert json.loads(pattern.output)["metrics"]["best_acc"] == 10.0
    missing = invoke("metrics", "no-such.log")
    assert missing.exit_code == 2 and missing.output.strip() == "no-such.log: file not found"
