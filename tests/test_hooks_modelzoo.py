"""msexp.hooks in a real model-zoo script (official/cv/lenet, tests/assets/modelzoo/lenet):
lenet-hooks.patch gives it accumulation, AMP and dynamic loss scaling in 5 changed lines,
counting its YAML config, and a sweep of it reports as msexp's own trials do."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ASSETS, child_runs, mlflow_client, write
from tests.test_real_scripts import invoke, write_mnist

LENET = ASSETS / "modelzoo" / "lenet"
PATCH = ASSETS / "modelzoo" / "lenet-hooks.patch"
UPDATES = 3  # 96 images in batches of 32 (the script drops a partial batch)


def test_the_patch_changes_at_most_five_lines() -> None:
    lines = PATCH.read_text(encoding="utf-8").splitlines()
    added = [x for x in lines if x.startswith("+") and not x.startswith("+++")]
    removed = [x for x in lines if x.startswith("-") and not x.startswith("---")]
    files = {x[len("+++ b/"):] for x in lines if x.startswith("+++ ")}
    assert files == {"train.py", "default_config.yaml"}
    assert len(added) <= 5 and len(removed) <= len(added), (added, removed)


@pytest.fixture
def hooked(workdir: Path) -> Path:
    folder = workdir / "lenet"
    shutil.copytree(LENET, folder)
    subprocess.run(["git", "apply", str(PATCH)], cwd=folder, check=True)
    write_mnist(folder / "data" / "train", 32 * UPDATES)
    return folder


@pytest.mark.slow
def test_a_hooked_model_zoo_script_sweeps_accumulation_amp_and_loss_scaling(
        hooked: Path) -> None:
    sweep = write(hooked / "sweep.yaml", """
        name: lenet-hooks
        experiment: {command: python train.py}
        objective: {metric: train_loss, direction: minimize}
        fixed: {device_target: CPU, data_path: data, batch_size: 32, epoch_size: 2,
                ckpt_path: ./ckpt, save_checkpoint_steps: 3, loss_scale: dynamic, lr: 0.1}
        params: {micro_size: [1, 4], amp_level: [O0, O2]}
    """)
    result = invoke("sweep", str(sweep))
    assert result.exit_code == 0, result.output
    runs = {(r.data.params["micro_size"], r.data.params["amp_level"]): r
            for r in child_runs("lenet-hooks")}
    assert sorted(runs) == [("1", "O0"), ("1", "O2"), ("4", "O0"), ("4", "O2")]
    client = mlflow_client()
    for run in runs.values():
        metrics = run.data.metrics
        assert run.data.tags["status"] == "COMPLETE", run.data.tags
        assert metrics["step_ms"] > 0 and metrics["train_mem_mb"] > 0
        assert metrics["overflow_steps"] >= 0 and metrics["loss_scale"] >= 1
        for name in ("train_loss", "loss_scale"):  # a point per update, not per micro-batch
            steps = [m.step for m in client.get_metric_history(run.info.run_id, name)]
            assert set(steps) == set(range(1, 2 * UPDATES + 1)), (name, steps)  # and the
            assert len(steps) <= 2 * UPDATES + 1, (name, steps)  # final value, at the end
        epochs = client.get_metric_history(run.info.run_id, "step_ms")
        assert sorted(m.step for m in epochs) == [UPDATES, 2 * UPDATES]
    full, accumulated = runs[("1", "O0")].data.metrics, runs[("4", "O0")].data.metrics
    assert accumulated["train_loss"] == pytest.approx(full["train_loss"], rel=1e-5)
    assert runs[("4", "O2")].data.metrics["train_loss"] == pytest.approx(
        full["train_loss"], rel=0.05)
    first, last = weights(runs[("1", "O0")], 1), weights(runs[("1", "O0")], 2)
    assert not np.allclose(first["fc3.weight"], last["fc3.weight"]), "the weights never moved"
    for name, value in weights(runs[("4", "O0")], 2).items():  # its checkpoint, as the
        np.testing.assert_allclose(value, last[name], rtol=1e-5, atol=1e-6, err_msg=name)


def weights(run, epoch: int) -> dict[str, np.ndarray]:
    """What the script's own ModelCheckpoint saved after `epoch` in the trial's folder."""
    import mindspore as ms  # lazy: MindSpore takes seconds

    trial = int(run.data.tags["msexp.trial"])
    path = Path(f"mlruns/trials/lenet-hooks/trial-{trial:04d}/outputs/ckpt/"
                f"checkpoint_lenet-{epoch}_{UPDATES}.ckpt")
    return {name: p.asnumpy() for name, p in ms.load_checkpoint(str(path)).items()}
