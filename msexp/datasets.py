"""Real data sets named by a sweep's `data` section: checked at plan time, loaded in trials.

Formats (`data.format`), each a folder (`data.path`, relative to the working directory):

- `mnist`: the four idx files `train-images-idx3-ubyte`, `train-labels-idx1-ubyte`,
  `t10k-images-idx3-ubyte`, `t10k-labels-idx1-ubyte` (uncompressed).
- `cifar10`: the binary version, `data_batch_*.bin` and `test_batch.bin`, each of
  10000 records (MindSpore's reader takes exactly that many from every file).
- `imagefolder`: one folder per class of images; either `train/` and `val/` (or `test/`)
  holding the class folders, or the class folders alone, of which every fifth image
  (in name order) is held out for evaluation.

The checks read only headers, sizes and one image per class, so they stay fast on full
data sets; the loaders import MindSpore and are called inside trial processes only.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from msexp.errors import SpecError

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".JPG", ".JPEG", ".PNG", ".BMP")
HOLD_OUT_EVERY = 5
CIFAR_RECORD = 1 + 3 * 32 * 32
CIFAR_RECORDS_PER_FILE = 10_000  # Cifar10Dataset reads exactly this many from each file
MNIST_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
# per-channel mean and std of pixel values in [0, 1]
MNIST_STATS = ((0.1307,), (0.3081,))
CIFAR_STATS = ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))
IMAGEFOLDER_STATS = ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))


@dataclass(frozen=True)
class Loaded:
    """Unbatched MindSpore datasets of (image CHW float32, label int32) and a description."""

    train: Any
    eval: Any
    description: str


def check_data(source: str, data: Mapping[str, Any], accepted: tuple[str, ...] | None,
               experiment: str = "the experiment") -> None:
    """Reject a data section that `experiment` cannot read or whose folder is missing or corrupt.

    Args:
        source: the sweep file, for the error.
        data: the `data` section: {"format", "path"}.
        accepted: formats the experiment reads; None if it reads `params["data"]` itself.
        experiment: the experiment's name, for the error.

    Raises:
        SpecError: one line naming the key and the path.
    """
    fmt, path = data["format"], data["path"]
    if accepted is not None and fmt not in accepted:
        reads = " or ".join(accepted) if accepted else "no data section (built-in data only)"
        raise SpecError(source, "data.format", f"{experiment} reads {reads}", fmt)
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise SpecError(source, "data.path", f"{fmt} data folder not found", path)
    problem = FORMATS[fmt].check(folder)
    if problem:
        raise SpecError(source, "data.path", f"not a valid {fmt} folder: {problem}", path)


def _check_mnist(folder: Path) -> str | None:
    for images_name, labels_name in MNIST_FILES.values():
        images, labels = folder / images_name, folder / labels_name
        for file in (images, labels):
            if not file.is_file():
                return f"{file.name} is missing (expected " + ", ".join(
                    n for pair in MNIST_FILES.values() for n in pair) + ")"
        header = _read(images, 16)
        magic, count, rows, cols = struct.unpack(">IIII", header) if len(header) == 16 else (0,) * 4
        if magic != 2051:
            return f"{images.name} is not an idx3 image file"
        if images.stat().st_size != 16 + count * rows * cols:
            return (f"{images.name} should hold {count} images of {rows}x{cols} "
                    f"({16 + count * rows * cols} bytes) but has {images.stat().st_size} bytes")
        header = _read(labels, 8)
        magic, n_labels = struct.unpack(">II", header) if len(header) == 8 else (0, 0)
        if magic != 2049:
            return f"{labels.name} is not an idx1 label file"
        if n_labels != count or labels.stat().st_size != 8 + count:
            return f"{labels.name} does not hold one label for each of the {count} images"
    return None


def _check_cifar10(folder: Path) -> str | None:
    batches = sorted(folder.glob("data_batch_*.bin"))
    if not batches:
        return "no data_batch_*.bin file (expected the binary version of CIFAR-10)"
    test = folder / "test_batch.bin"
    if not test.is_file():
        return "test_batch.bin is missing"
    for file in (*batches, test):
        size = file.stat().st_size
        if size != CIFAR_RECORDS_PER_FILE * CIFAR_RECORD:
            return (f"{file.name} has {size} bytes, not {CIFAR_RECORDS_PER_FILE} records of "
                    f"{CIFAR_RECORD} bytes")
    return None


def _check_imagefolder(folder: Path) -> str | None:
    splits = _image_splits(folder)
    classes = {split: _classes(split) for split in dict.fromkeys(splits)}
    train_classes = classes[splits[0]]
    if not train_classes:
        return f"no class folders with images in {splits[0]}"
    if splits[1] != splits[0]:
        unknown = sorted(set(classes[splits[1]]) - set(train_classes))
        if unknown:
            return f"{splits[1].name}/ has classes that {splits[0].name}/ lacks: {unknown[0]}"
        if not classes[splits[1]]:
            return f"no class folders with images in {splits[1]}"
    for split_classes in classes.values():
        for images in split_classes.values():
            problem = _verify_image(images[0])
            if problem:
                return f"{images[0].relative_to(folder)} {problem}"
    return None


def _read(file: Path, size: int) -> bytes:
    with file.open("rb") as f:
        return f.read(size)


def _image_splits(folder: Path) -> tuple[Path, Path]:
    """(train folder, eval folder); the same folder twice when images are split by name."""
    held = next((folder / n for n in ("val", "test") if (folder / n).is_dir()), None)
    if (folder / "train").is_dir() and held is not None:
        return folder / "train", held
    return folder, folder


def _classes(folder: Path) -> dict[str, list[Path]]:
    """Class folder name -> its images in name order, for classes with at least one image."""
    classes = {}
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        images = sorted(p for p in sub.iterdir() if p.is_file() and p.suffix in IMAGE_EXTENSIONS)
        if images:
            classes[sub.name] = images
    return classes


def _verify_image(file: Path) -> str | None:
    from PIL import Image, UnidentifiedImageError  # lazy: only image folders need it

    try:
        with Image.open(file) as image:
            image.verify()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        return f"is not a readable image ({type(exc).__name__})"
    return None


def load(data: Mapping[str, Any], size: int, channels: int) -> Loaded:
    """Open the data section's folder as train and eval datasets of `channels`x`size`x`size`.

    Images are resized, converted to the channel count, normalised with per-channel
    statistics of the format, and laid out CHW; labels are int32.
    """
    fmt, folder = FORMATS[data["format"]], Path(data["path"]).expanduser()
    train, held = (_prepare(d, size, channels, fmt.stats) for d in fmt.open(folder))
    description = (f"{fmt.description} {folder} ({train.get_dataset_size()} train, "
                   f"{held.get_dataset_size()} eval, as {channels}x{size}x{size})")
    return Loaded(train, held, description)


def train_and_eval(data: Mapping[str, Any] | None, size: int, channels: int,
                   builtin: Callable[[], tuple[Any, Any, str]]) -> tuple[Any, Any, str]:
    """(train, eval, description): the sweep's `data` section loaded as `channels`x`size`x`size`
    images if the trial has one, else what `builtin()` returns (an experiment's own data)."""
    if data:
        loaded = load(data, size, channels)
        return loaded.train, loaded.eval, loaded.description
    return builtin()


def _open_mnist(folder: Path) -> tuple[Any, Any]:
    import mindspore.dataset as ds  # lazy: loaders run in trials, checks at plan time

    return tuple(ds.MnistDataset(str(folder), usage=u, shuffle=False) for u in ("train", "test"))


def _open_cifar10(folder: Path) -> tuple[Any, Any]:
    import mindspore.dataset as ds  # lazy: loaders run in trials, checks at plan time

    return tuple(ds.Cifar10Dataset(str(folder), usage=u, shuffle=False)
                 for u in ("train", "test"))


def _image_folder(folder: Path) -> tuple[Any, Any]:
    import mindspore.dataset as ds  # lazy: loaders run in trials, checks at plan time

    train_dir, eval_dir = _image_splits(folder)
    classes = _classes(train_dir)
    indexing = {name: i for i, name in enumerate(classes)}

    def open_folder(path: Path, sampler: Any = None) -> Any:
        return ds.ImageFolderDataset(str(path), extensions=list(IMAGE_EXTENSIONS),
                                     class_indexing=indexing, decode=True, sampler=sampler,
                                     shuffle=None if sampler else False)

    if eval_dir != train_dir:
        return open_folder(train_dir), open_folder(eval_dir)
    # ImageFolderDataset numbers images by class, then by file name within a class
    train_ids, eval_ids, start = [], [], 0
    for images in classes.values():
        for i in range(len(images)):
            held = len(images) > 1 and i % HOLD_OUT_EVERY == HOLD_OUT_EVERY - 1
            (eval_ids if held else train_ids).append(start + i)
        start += len(images)
    return (open_folder(train_dir, ds.SubsetSampler(train_ids)),
            open_folder(train_dir, ds.SubsetSampler(eval_ids)))


def _prepare(dataset: Any, size: int, channels: int,
             stats: tuple[tuple[float, ...], tuple[float, ...]]) -> Any:
    import mindspore as ms  # lazy: as above
    import mindspore.dataset.transforms as transforms
    import mindspore.dataset.vision as vision

    mean, std = (_per_channel(values, channels) for values in stats)
    image_ops = [
        vision.Resize((size, size)),
        _to_channels(channels),
        vision.Normalize([m * 255 for m in mean], [s * 255 for s in std]),
        vision.HWC2CHW(),
    ]
    dataset = dataset.map(image_ops, input_columns="image")
    return dataset.map(transforms.TypeCast(ms.int32), input_columns="label")


def _per_channel(values: tuple[float, ...], channels: int) -> list[float]:
    if len(values) == channels:
        return list(values)
    return [sum(values) / len(values)] * channels


def _to_channels(channels: int) -> Callable[[Any], Any]:
    def convert(image: np.ndarray) -> np.ndarray:
        if image.ndim == 2:
            image = image[:, :, None]
        if image.shape[2] == channels:
            return image
        if channels == 1:  # ITU-R 601 luma, as PIL's "L" mode
            luma = image[:, :, :3].astype(np.float32) @ np.array([0.299, 0.587, 0.114],
                                                                  np.float32)
            return np.round(luma)[:, :, None].astype(np.uint8)
        return np.repeat(image[:, :, :1], channels, axis=2)

    return convert


@dataclass(frozen=True)
class Format:
    """A `data.format`: how its folder is checked at plan time and opened in a trial."""

    check: Callable[[Path], str | None]
    open: Callable[[Path], tuple[Any, Any]]  # (train, eval) unbatched datasets
    stats: tuple[tuple[float, ...], tuple[float, ...]]  # per-channel mean, std in [0, 1]
    description: str


FORMATS: dict[str, Format] = {
    "mnist": Format(_check_mnist, _open_mnist, MNIST_STATS, "MNIST idx"),
    "cifar10": Format(_check_cifar10, _open_cifar10, CIFAR_STATS, "CIFAR-10 binary"),
    "imagefolder": Format(_check_imagefolder, _image_folder, IMAGEFOLDER_STATS, "image folder"),
}
"""Every data format, by its `data.format` name: the one registry of formats."""
