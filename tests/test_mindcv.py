"""mindcv's `train_with_func.py` (tests/assets/mindcv, unchanged): a training loop of its
own (`ops.value_and_grad`, a `@jit` step, its own validation and checkpoints) swept with a
sweep file only, on tiny ImageNet-style folders the test writes."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import ASSETS, child_runs, write
from tests.test_hooks_modelzoo import write_imagenet
from tests.test_real_scripts import invoke

MINDCV = ASSETS / "mindcv"
CONFIG = "configs/mobilenetv3/mobilenet_v3_small_ascend.yaml"
CHECKPOINT = "mobilenet_v3_small_100-1_2.ckpt"  # epoch 1 of 2 batches
VAL_IMAGES = 8
PRINTED_TOP_1 = re.compile(r"Validation Top_1_Accuracy: ([0-9.]+)%")


@pytest.fixture
def mindcv(workdir: Path) -> Path:
    folder = workdir / "mindcv"
    shutil.copytree(MINDCV, folder)
    write_imagenet(folder / "data" / "train", 4)  # 16 images: 2 batches of 8
    write_imagenet(folder / "data" / "val", VAL_IMAGES // 4)
    return folder


@pytest.mark.slow
def test_mindcv_train_with_func_sweeps_unchanged_each_trial_in_its_own_folder(
        mindcv: Path) -> None:
    """mobilenet_v3_small_100 with mindcv's own config, overridden by flags for a CPU and
    32x32 images; its `Validation Top_1_Accuracy: 25.0000%` is the objective, 0.25."""
    sweep = write(mindcv / "sweep.yaml", f"""
        name: mindcv-func
        experiment: {{command: python train_with_func.py -c {CONFIG}}}
        objective: {{metric: Top_1_Accuracy, direction: maximize}}
        fixed: {{data_dir: data, distribute: false, amp_level: O0, num_parallel_workers: 2,
                image_resize: 32, batch_size: 8, epoch_size: 1, num_classes: 4,
                warmup_epochs: 0}}
        params: {{lr: [0.01, 0.3]}}
    """)
    result = invoke("sweep", str(sweep))
    assert result.exit_code == 0, result.output
    runs = {r.data.params["lr"]: r for r in child_runs("mindcv-func")}
    assert sorted(runs) == ["0.01", "0.3"], "one MLflow child run per trial"
    folders = Path("mlruns/trials/mindcv-func")
    for lr, run in runs.items():
        metrics = run.data.metrics
        assert run.data.tags["status"] == "COMPLETE", run.data.tags
        folder = folders / f"trial-{int(run.data.tags['msexp.trial']):04d}"
        log = (folder / "trial.log").read_text(encoding="utf-8")
        assert f"Learning rate: {lr}\n" in log and "Number of training samples: 16\n" in log
        assert "Distributed mode: False\n" in log, "distribute: false overrides its config"
        [printed] = PRINTED_TOP_1.findall(log)
        assert metrics["Top_1_Accuracy"] == pytest.approx(float(printed) / 100)
        assert (metrics["Top_1_Accuracy"] * VAL_IMAGES).is_integer(), "a fraction of 8 images"
        assert metrics["loss"] > 0 and "lr" not in metrics, "lr is a param printed back"
        assert "time" not in metrics, "a step's and a validation's time: ambiguous"
        assert (folder / "outputs" / "ckpt" / CHECKPOINT).is_file(), "its own checkpoint"
    assert runs["0.01"].data.metrics["loss"] != runs["0.3"].data.metrics["loss"]
    assert not (mindcv / "ckpt").exists(), "nothing written beside the script"
    best = invoke("best", str(sweep))
    assert best.exit_code == 0, best.output
    assert CHECKPOINT in best.output and "(none kept)" not in best.output
