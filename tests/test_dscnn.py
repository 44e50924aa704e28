"""The model zoo's DS-CNN keyword spotting (audio: 16 `nn.BatchNorm2d`, one `nn.Dropout`;
tests/assets/modelzoo/dscnn, byte for byte) swept unchanged and with dscnn-hooks.patch
(issue 49): `train_loss` is one number in Optuna, the trial's record, MLflow and the
script's own last loss line; micro_size 4 splits batch statistics, and the sweep says so.

The script sets no seed (weights and data order differ from run to run), so two trials
of it are not asserted equal; its `loss:2.67` lines are read by the sweep's own pattern:
msexp's log reader takes a value only after `: ` or `=`."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ASSETS, write
from tests.one_meaning import assert_one_meaning, trials, update_losses
from tests.test_real_scripts import invoke

DSCNN = ASSETS / "modelzoo" / "dscnn"
PATCH = ASSETS / "modelzoo" / "dscnn-hooks.patch"
UPDATES = 3  # 1 epoch of 3 batches of 16 clips
_LOSS_LINE = re.compile(r"epoch\[\d+\], iter\[\d+\], loss:([-+.\deE]+),")


def write_features(folder: Path, clips: int = 48) -> None:
    """DS-CNN's feature folder: 49 x 20 MFCCs a clip, 12 labels, each label raising one
    band."""
    rng = np.random.default_rng(3)
    folder.mkdir(parents=True)
    for kind, n in (("training", clips), ("validation", 16)):
        labels = rng.integers(0, 12, n)
        x = rng.normal(0, 1, (n, 49, 20)).astype(np.float32)
        x[np.arange(n), :, labels] += 2.0
        np.save(folder / f"{kind}_data.npy", x.reshape(n, -1))
        np.save(folder / f"{kind}_label.npy", labels)


def dscnn(workdir: Path, hooked: bool) -> Path:
    folder = workdir / ("dscnn-hooks" if hooked else "dscnn")
    shutil.copytree(DSCNN, folder)
    if hooked:
        subprocess.run(["git", "apply", str(PATCH)], cwd=folder, check=True)
    write_features(folder / "feat")
    return folder


def sweep_file(folder: Path, name: str, params: str = "") -> Path:
    return write(folder / f"{name}.yaml", f"""
        name: {name}
        experiment:
          command: python train.py
          metrics: "loss:(?P<train_loss>[-+.0-9eE]+),"
        objective: {{metric: train_loss, direction: minimize}}
        budget: {{trial_timeout: 600}}
        fixed: {{device_target: CPU, train_feat_dir: feat, per_batch_size: 16, max_epoch: 1,
                save_ckpt_path: ./ckpt}}
        {params}
    """)


@pytest.mark.slow
def test_the_unchanged_dscnn_reports_its_last_loss_line_everywhere(workdir: Path) -> None:
    folder = dscnn(workdir, hooked=False)
    result = invoke("sweep", str(sweep_file(folder, "dscnn")))
    assert result.exit_code == 0, result.output
    [(trial, run)] = trials("dscnn").values()
    assert_one_meaning(trial, run, "dscnn", _LOSS_LINE)


@pytest.mark.slow
def test_hooked_dscnn_means_one_loss_and_names_its_batch_statistics(workdir: Path) -> None:
    """micro_size [1, 4]: both trials complete with one update per step (3 points of
    `train_loss` in MLflow), each `train_loss` means one thing, and the sweep says that
    micro_size 4 normalises micro-batches of 4 in its BatchNorm layers."""
    folder = dscnn(workdir, hooked=True)
    sweep = sweep_file(folder, "hooked", "params: {micro_size: [1, 4]}")
    result = invoke("sweep", str(sweep))
    assert result.exit_code == 0, result.output
    assert "BatchNorm" in result.output, "the sweep names the layers that split the batch"
    found = trials("hooked")
    assert sorted(int(run.data.params["micro_size"]) for _, run in found.values()) == [1, 4]
    for trial, run in found.values():
        assert_one_meaning(trial, run, "hooked", _LOSS_LINE)
        assert len(update_losses(run)) == UPDATES
