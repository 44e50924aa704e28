"""msexp.hooks in real model-zoo scripts: lenet-hooks.patch gives official/cv/lenet
(tests/assets/modelzoo/lenet) accumulation, AMP and dynamic loss scaling in 5 changed
lines, counting its YAML config, and a sweep of it reports as msexp's own trials do;
resnet-hooks.patch does the same for official/cv/ResNet's ResNet-18, keeping its own
`eval_network=` and fixed loss scale."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.conftest import ASSETS, child_runs, mlflow_client, write
from tests.test_real_scripts import invoke, write_mnist

LENET = ASSETS / "modelzoo" / "lenet"
PATCH = ASSETS / "modelzoo" / "lenet-hooks.patch"
UPDATES = 3  # 96 images in batches of 32 (the script drops a partial batch)


RESNET = ASSETS / "modelzoo" / "resnet"
RESNET_PATCH = ASSETS / "modelzoo" / "resnet-hooks.patch"
RESNET_CONFIG = "config/resnet18_imagenet2012_config.yaml"


def changes(patch: Path) -> tuple[set[str], list[str], list[str]]:
    """The files a patch changes, its added lines and its removed lines."""
    lines = patch.read_text(encoding="utf-8").splitlines()
    added = [x for x in lines if x.startswith("+") and not x.startswith("+++")]
    removed = [x for x in lines if x.startswith("-") and not x.startswith("---")]
    return {x[len("+++ b/"):] for x in lines if x.startswith("+++ ")}, added, removed


def test_the_patch_changes_at_most_five_lines() -> None:
    files, added, removed = changes(PATCH)
    assert files == {"train.py", "default_config.yaml"}
    assert len(added) <= 5 and len(removed) <= len(added), (added, removed)


def test_the_resnet_patch_changes_at_most_five_lines_and_keeps_its_eval_network() -> None:
    files, added, removed = changes(RESNET_PATCH)
    assert files == {"train.py", RESNET_CONFIG}
    assert len(added) <= 5 and len(removed) <= len(added), (added, removed)
    [swapped] = [x for x in added if "hooks.model(" in x]
    assert "eval_network=dist_eval_network" in swapped
    assert "loss_scale_manager=loss_scale" in swapped


def write_imagenet(folder: Path, per_class: int, classes: int = 4) -> None:
    """An ImageNet-style folder (one folder of JPEGs per class) of 32x32 images, each
    class brighter in its own colour channel."""
    rng = np.random.default_rng(len(str(folder)))
    for label in range(classes):
        images = folder / f"n{label:08d}"
        images.mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.integers(0, 60, (32, 32, 3), dtype=np.uint8)
            pixels[:, :, label % 3] += np.uint8(120 + 40 * (label // 3))
            Image.fromarray(pixels).save(images / f"{i}.jpg", quality=90)


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


@pytest.fixture
def hooked_resnet(workdir: Path) -> Path:
    folder = workdir / "resnet"
    shutil.copytree(RESNET, folder)
    subprocess.run(["git", "apply", str(RESNET_PATCH)], cwd=folder, check=True)
    write_imagenet(folder / "data" / "train", 6)  # 24 images: 3 updates of 8
    write_imagenet(folder / "data" / "val", 2)
    return folder


@pytest.mark.slow
def test_the_hooked_model_zoo_resnet18_sweeps_micro_size_and_amp_with_its_loss_scale(
        hooked_resnet: Path) -> None:
    """ResNet-18 with its ImageNet config, 32x32 images, one epoch of 3 updates: every
    trial trains through msexp's step with the script's own FixedLossScaleManager(1024,
    drop_overflow_update=False) and evaluates through its own EvalCallBack (`acc`)."""
    sweep = write(hooked_resnet / "sweep.yaml", f"""
        name: resnet-hooks
        experiment: {{command: python train.py --config_path {RESNET_CONFIG}}}
        objective: {{metric: train_loss, direction: minimize}}
        fixed: {{device_target: CPU, data_path: data/train,
                batch_size: 8, epoch_size: 1, class_num: 4, train_image_size: 32,
                eval_image_size: 32, run_eval: true, eval_dataset_path: data/val,
                eval_start_epoch: 1, save_checkpoint: false, save_best_ckpt: false}}
        params: {{micro_size: [1, 4], amp_level: [O0, O2]}}
    """)
    result = invoke("sweep", str(sweep))
    assert result.exit_code == 0, result.output
    runs = {(r.data.params["micro_size"], r.data.params["amp_level"]): r
            for r in child_runs("resnet-hooks")}
    assert sorted(runs) == [("1", "O0"), ("1", "O2"), ("4", "O0"), ("4", "O2")]
    client = mlflow_client()
    for run in runs.values():
        metrics = run.data.metrics
        assert run.data.tags["status"] == "COMPLETE", run.data.tags
        assert metrics["train_loss"] > 0 and metrics["step_ms"] > 0
        assert metrics["train_mem_mb"] > 0
        assert 0 <= metrics["acc"] <= 1, "the script's own evaluation"
        assert metrics["loss_scale"] == 1024, "the script's own fixed loss scale"
        assert metrics["skipped_updates"] == 0, "its drop_overflow_update=False"
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "loss_scale")]
        assert set(steps) == {1, 2, 3}, steps  # one point per update, not per micro-batch
    for micro_size in ("1", "4"):  # float32 never overflows at 1024; float16 may (counted)
        assert runs[(micro_size, "O0")].data.metrics["overflow_steps"] == 0
