"""The `data` section: tiny MNIST idx, CIFAR-10 binary and image folders, read for real."""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from msexp.cli import app
from msexp.datasets import CIFAR_RECORD, CIFAR_RECORDS_PER_FILE, CIFAR_STATS, MNIST_STATS, load
from msexp.errors import SpecError, format_value
from msexp.execution.host import running
from msexp.execution.protocol import Start, TrialRequest
from msexp.spec import parse_spec


def write_mnist(folder: Path, n_train: int = 24, n_test: int = 8) -> Path:
    """Images whose pixels all equal 20 * label, so the loaded values can be checked."""
    folder.mkdir(parents=True, exist_ok=True)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        labels = (np.arange(n) % 10).astype(np.uint8)
        images = np.repeat(labels * 20, 28 * 28).astype(np.uint8)
        (folder / f"{prefix}-images-idx3-ubyte").write_bytes(
            struct.pack(">IIII", 2051, n, 28, 28) + images.tobytes())
        (folder / f"{prefix}-labels-idx1-ubyte").write_bytes(
            struct.pack(">II", 2049, n) + labels.tobytes())
    return folder


def write_cifar10(folder: Path) -> Path:
    """One training batch and the test batch; MindSpore reads 10000 records per file."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for name in ("data_batch_1.bin", "test_batch.bin"):
        records = rng.integers(0, 256, (CIFAR_RECORDS_PER_FILE, CIFAR_RECORD), dtype=np.uint8)
        records[:, 0] = np.arange(CIFAR_RECORDS_PER_FILE) % 10
        records.tofile(folder / name)
    return folder


def write_images(folder: Path, classes: tuple[str, ...] = ("cat", "dog", "emu"),
                 per_class: int = 5) -> Path:
    """PNG images, each filled with one grey level: 10 * index + 100 * class number."""
    for c, name in enumerate(classes):
        (folder / name).mkdir(parents=True, exist_ok=True)
        for i in reversed(range(per_class)):  # written out of name order on purpose
            level = 10 * i + 100 * c
            Image.fromarray(np.full((12, 10, 3), level, np.uint8)).save(folder / name / f"{i}.png")
    return folder


def rows(dataset: Any) -> list[tuple[np.ndarray, int]]:
    return [(x, int(y)) for x, y in dataset.create_tuple_iterator(output_numpy=True, num_epochs=1)]


def sweep_text(experiment: str, fmt: str, path: Path, extra: str = "") -> str:
    return (f"name: d\nexperiment: {experiment}\ndata: {{format: {fmt}, path: '{path}'}}\n"
            + extra)


def test_mnist_idx_folder_loads_resized_and_normalised(tmp_path: Path) -> None:
    loaded = load({"format": "mnist", "path": str(write_mnist(tmp_path / "m"))}, 32, 1)
    train, held = rows(loaded.train), rows(loaded.eval)
    assert (len(train), len(held)) == (24, 8)
    image, label = train[3]
    assert image.shape == (1, 32, 32) and image.dtype == np.float32
    assert label == 3 and train[3][1] == 3
    (mean,), (std,) = MNIST_STATS
    np.testing.assert_allclose(image, (60 / 255 - mean) / std, rtol=1e-5)
    assert "MNIST" in loaded.description and "24 train, 8 eval" in loaded.description


def test_cifar10_binary_folder_loads_as_chw(tmp_path: Path) -> None:
    loaded = load({"format": "cifar10", "path": str(write_cifar10(tmp_path / "c"))}, 32, 3)
    assert loaded.train.get_dataset_size() == loaded.eval.get_dataset_size() == 10_000
    for image, label in loaded.eval.batch(4).create_tuple_iterator(output_numpy=True,
                                                                    num_epochs=1):
        assert image.shape == (4, 3, 32, 32) and image.dtype == np.float32
        assert label.dtype == np.int32 and list(label) == [0, 1, 2, 3]
        # mutation (issue 18): normalised with another format's statistics
        raw = np.fromfile(tmp_path / "c" / "test_batch.bin", np.uint8).reshape(-1, CIFAR_RECORD)
        pixels = raw[:4, 1:].reshape(4, 3, 32, 32).astype(np.float32)
        mean, std = (np.array(v, np.float32)[None, :, None, None] * 255 for v in CIFAR_STATS)
        np.testing.assert_allclose(image, (pixels - mean) / std, atol=1e-4)
        break


def test_image_folder_holds_out_every_fifth_image_per_class(tmp_path: Path) -> None:
    loaded = load({"format": "imagefolder", "path": str(write_images(tmp_path / "f"))}, 8, 1)
    train, held = rows(loaded.train), rows(loaded.eval)
    assert (len(train), len(held)) == (12, 3)
    grey = [(round(float(x.mean()) * 0.5 * 255 + 127.5), y) for x, y in held]
    assert grey == [(40, 0), (140, 1), (240, 2)]  # image 4.png of each class, label by name
    assert train[0][0].shape == (1, 8, 8)
    assert {round(float(x.mean()) * 0.5 * 255 + 127.5) for x, _ in train}.isdisjoint(
        {g for g, _ in grey})


def test_image_folder_with_train_and_val_folders(tmp_path: Path) -> None:
    write_images(tmp_path / "f" / "train", per_class=2)
    write_images(tmp_path / "f" / "val", classes=("dog",), per_class=1)
    loaded = load({"format": "imagefolder", "path": str(tmp_path / "f")}, 32, 3)
    held = rows(loaded.eval)
    assert len(rows(loaded.train)) == 6 and [y for _, y in held] == [1]  # dog is class 1
    assert held[0][0].shape == (3, 32, 32)


@pytest.mark.parametrize(("fmt", "break_it", "rule"), [
    ("mnist", lambda f: (f / "t10k-labels-idx1-ubyte").unlink(),
     "t10k-labels-idx1-ubyte is missing"),
    ("mnist", lambda f: (f / "train-images-idx3-ubyte").write_bytes(
        (f / "train-images-idx3-ubyte").read_bytes()[:-5]), "should hold 24 images"),
    ("mnist", lambda f: (f / "train-labels-idx1-ubyte").write_bytes(b"junk"),
     "not an idx1 label file"),
    ("imagefolder", lambda f: (f / "dog" / "0.png").write_text("not a picture"),
     "dog/0.png is not a readable image"),
    ("imagefolder", lambda f: [p.unlink() for p in f.rglob("*.png")], "no class folders"),
])
def test_corrupt_folder_is_one_line_at_plan_time(tmp_path: Path, fmt: str, break_it: Any,
                                                 rule: str) -> None:
    folder = write_mnist(tmp_path / "m") if fmt == "mnist" else write_images(tmp_path / "f")
    break_it(folder)
    with pytest.raises(SpecError) as caught:
        parse_spec(sweep_text("lenet_digits", fmt, folder), "s.yaml")
    message = str(caught.value)
    assert message.startswith(f"s.yaml: data.path: not a valid {fmt} folder: ")
    assert rule in message and message.endswith(f", got {folder}")
    assert "\n" not in message


def test_truncated_cifar10_file_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "c"
    folder.mkdir()
    (folder / "data_batch_1.bin").write_bytes(bytes(CIFAR_RECORD * 3))
    (folder / "test_batch.bin").write_bytes(bytes(CIFAR_RECORD * 3))
    with pytest.raises(SpecError, match=r"data\.path: not a valid cifar10 folder: "
                                        r"data_batch_1\.bin has 9219 bytes"):
        parse_spec(sweep_text("resnet_cifar", "cifar10", folder), "s.yaml")


def test_missing_folder_fails_validate_with_exit_code_2(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    sweep = tmp_path / "s.yaml"
    sweep.write_text(sweep_text("mlp_digits", "mnist", missing))
    for command in ("validate", "plan"):
        result = CliRunner().invoke(app, [command, str(sweep)])
        assert result.exit_code == 2, result.output
        assert result.output.strip() == f"{sweep}: data.path: mnist data folder not found, " \
                                        f"got {format_value(str(missing))}"
        assert result.output.strip().endswith("/nowhere"), "a long path keeps its end"


def test_format_the_experiment_cannot_read_is_refused(tmp_path: Path) -> None:
    folder = write_mnist(tmp_path / "m")
    with pytest.raises(SpecError) as caught:
        parse_spec(sweep_text("resnet_cifar", "mnist", folder), "s.yaml")
    assert str(caught.value) == "s.yaml: data.format: resnet_cifar reads cifar10 or " \
                                "imagefolder, got mnist"


@pytest.mark.parametrize(("experiment", "fmt", "knobs"), [
    ("mlp_digits", "mnist", "hidden: 8"),
    ("lenet_digits", "imagefolder", "seed: 1"),
    ("resnet_cifar", "imagefolder", "width: 2"),
])
def test_builtin_workloads_train_on_the_data_section(tmp_path: Path, experiment: str, fmt: str,
                                                     knobs: str) -> None:
    folder = write_mnist(tmp_path / "m") if fmt == "mnist" else write_images(tmp_path / "f")
    spec = parse_spec(sweep_text(experiment, fmt, folder,
                                 f"fixed: {{epochs: 2, batch_size: 4, {knobs}}}\n"), "s.yaml")
    events: list[Any] = []
    request = TrialRequest(experiment, spec.space.resolve({}), data=spec.data_section())
    metrics = running.run(request, events.append)
    start = next(e for e in events if isinstance(e, Start))
    assert str(folder) in start.data_source
    assert ("MNIST" if fmt == "mnist" else "image folder") in start.data_source
    n_train, n_eval = map(int, re.search(r"(\d+) train, (\d+) eval", start.data_source).groups())
    right = metrics["eval_accuracy"] * n_eval  # the share of this folder's eval samples
    assert right == pytest.approx(round(right), abs=1e-6), (right, n_eval)
    updates = [len(e.series["train_loss"]) for e in events if hasattr(e, "series")]
    assert updates == [n_train // 4] * 2, "every batch of 4 of the training set, each epoch"
    # mutation (issue 18): the optimizer never applies an update, so nothing is learnt
    first, second = (e.metrics["train_loss"] for e in events if hasattr(e, "series"))
    assert second < first - 1e-3, (first, second)
