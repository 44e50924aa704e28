"""BatchNorm under gradient accumulation: the gap to the full-batch update, and remedies.

From the same initial weights and the same batch, on msexp's `resnet_cifar` and on a
ResNet-18 (the model zoo's layout: 7x7 stem, max pooling, four stages of two basic
blocks) at a tiny input, in PyNative mode:

- `full`: the full-batch gradient g1 and first loss (micro_size 1, BatchNorm in train mode
  over the whole batch);
- `micro`: what msexp's step does at micro_size m: loss / m per micro-batch, gradients
  summed; each BatchNorm normalises each micro-batch by its own statistics;
- `a`: remedy (a): a forward pass of the whole batch collects each layer's mean and
  variance (and moves the moving statistics once), then the micro-batches normalise with
  them as constants;
- `b`: remedy (b): (a), then passes that restore the gradient terms through the
  statistics from the previous pass's gamma and beta gradients (`_bn_remedies.py`),
  until the gradient stops changing; `b1` is its first correction pass (two backward
  passes).

Each row: ||g - g1|| / ||g1||, cosine, first-loss difference, the moving statistics after
one update against micro_size 1's (||M - M1|| / ||M1 - M0||), and the process CPU seconds
per update against `micro` at the same m (one run, no warm-up; CPU time, not wall time,
so that the other work of a busy machine does not inflate it).

The default runs resnet_cifar (depth 8, width 8; about 60 CPU s). ResNet-18 takes about
200 CPU s, most of it in remedy b's 18 passes: add it with --networks resnet_cifar,resnet18.

Usage: python benchmarks/batch_statistics.py [--batch 32] [--micro 2,4]
                                             [--networks resnet_cifar,resnet18]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Any, Callable

import mindspore as ms
import numpy as np
from _bn_remedies import BatchNormModes
from mindspore import nn, ops

from msexp.experiment import load_experiment


@dataclass
class Outcome:
    """One way of computing one update's gradient."""

    grads: dict[str, np.ndarray]
    loss: float
    moving: np.ndarray
    seconds: float


class BasicBlock(nn.Cell):
    def __init__(self, in_ch: int, out_ch: int, stride: int):
        super().__init__()
        self.body = nn.SequentialCell(
            nn.Conv2d(in_ch, out_ch, 3, stride, pad_mode="same"), nn.BatchNorm2d(out_ch),
            nn.ReLU(), nn.Conv2d(out_ch, out_ch, 3, pad_mode="same"), nn.BatchNorm2d(out_ch))
        self.shortcut = (nn.Identity() if stride == 1 and in_ch == out_ch else nn.SequentialCell(
            nn.Conv2d(in_ch, out_ch, 1, stride), nn.BatchNorm2d(out_ch)))
        self.relu = nn.ReLU()

    def construct(self, x):
        return self.relu(self.body(x) + self.shortcut(x))


class ResNet18(nn.Cell):
    def __init__(self, num_classes: int = 10):
        super().__init__()
        layers = [nn.Conv2d(3, 64, 7, 2, pad_mode="same"), nn.BatchNorm2d(64), nn.ReLU(),
                  nn.MaxPool2d(3, 2, pad_mode="same")]
        in_ch = 64
        for out_ch, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [BasicBlock(in_ch, out_ch, stride), BasicBlock(out_ch, out_ch, 1)]
            in_ch = out_ch
        self.features = nn.SequentialCell(layers)
        self.head = nn.Dense(512, num_classes)

    def construct(self, x):
        return self.head(ops.mean(self.features(x), (2, 3)))


def network_and_data(name: str, batch: int, resnet18_size: int
                     ) -> tuple[nn.Cell, Callable, np.ndarray, np.ndarray]:
    """The network, its loss and one batch of resnet_cifar's synthetic 32x32 images
    (ResNet-18: their top-left corner)."""
    workload = load_experiment("resnet_cifar").build({"depth": 8, "width": 8, "block": "basic"})
    x, y = workload.train[0][:batch], workload.train[1][:batch]
    if name == "resnet_cifar":
        return workload.network, workload.loss_fn, x, y
    if name != "resnet18":
        raise SystemExit(f"--networks: resnet_cifar or resnet18, got {name}")
    return ResNet18(), workload.loss_fn, np.ascontiguousarray(x[..., :resnet18_size,
                                                                :resnet18_size]), y


class Bench:
    """One network, its initial state, and the passes that compute an update's gradient."""

    def __init__(self, name: str, batch: int, resnet18_size: int):
        ms.set_seed(0)
        self.network, loss_fn, self.x, self.y = network_and_data(name, batch, resnet18_size)
        self.network.set_train(True)
        self.modes = BatchNormModes(self.network)
        self.initial = {p.name: p.asnumpy().copy() for p in self.network.get_parameters()}
        self.weights = self.network.trainable_params()

        def forward(x: Any, y: Any, micro: int) -> tuple[Any, Any]:
            loss = loss_fn(ops.cast(self.network(x), ms.float32), y)
            return loss / micro + self.modes.injected(), loss

        self.grad_fn = ms.value_and_grad(forward, None, self.weights, has_aux=True)

    def restore(self) -> None:
        for parameter in self.network.get_parameters():
            parameter.set_data(ms.Tensor(self.initial[parameter.name]))

    def moving(self) -> np.ndarray:
        """Every moving mean (first half) and moving variance (second half), flattened."""
        layers = self.modes.layers
        return np.concatenate([layer.moving_mean.asnumpy() for layer in layers]
                              + [layer.moving_variance.asnumpy() for layer in layers])

    def accumulate(self, micro: int) -> tuple[dict[str, np.ndarray], float, float]:
        """(summed gradients, mean loss, seconds) over `micro` equal micro-batches."""
        size = len(self.x) // micro
        summed: dict[str, np.ndarray] = {}
        losses = []
        began = time.process_time()
        for i in range(micro):
            part = slice(i * size, (i + 1) * size)
            (_, loss), grads = self.grad_fn(ms.Tensor(self.x[part]), ms.Tensor(self.y[part]), micro)
            for weight, grad in zip(self.weights, grads):
                summed[weight.name] = summed.get(weight.name, 0) + grad.asnumpy()
            losses.append(float(loss.asnumpy()))
        return summed, float(np.mean(losses)), time.process_time() - began

    def collect(self) -> float:
        """A forward pass of the whole batch keeping each layer's statistics; seconds."""
        self.modes.collect()
        began = time.process_time()
        self.network(ms.Tensor(self.x)).asnumpy()
        return time.process_time() - began

    def native(self, micro: int) -> Outcome:
        self.restore()
        self.modes.native()
        grads, loss, seconds = self.accumulate(micro)
        return Outcome(grads, loss, self.moving(), seconds)

    def frozen(self, micro: int) -> Outcome:
        """Remedy (a) at `micro`, from the initial state."""
        self.restore()
        collect_s = self.collect()
        self.modes.fixed()
        grads, loss, seconds = self.accumulate(micro)
        return Outcome(grads, loss, self.moving(), collect_s + seconds)

    def corrected(self, start: Outcome, micro: int, max_passes: int) -> list[Outcome]:
        """Remedy (b): correction passes after (a)'s `start` until the gradient changes by
        less than 1e-6 of its norm; each outcome's seconds is one pass's."""
        passes, previous = [], start
        for _ in range(max_passes):
            self.modes.correct(previous.grads)
            grads, loss, seconds = self.accumulate(micro)
            passes.append(Outcome(grads, loss, start.moving, seconds))
            change = relative_error(grads, previous.grads)
            previous = passes[-1]
            if change < 1e-6:
                break
        return passes


def flat(grads: dict[str, np.ndarray]) -> np.ndarray:
    return np.concatenate([grads[name].ravel() for name in sorted(grads)])


def relative_error(grads: dict[str, np.ndarray], reference: dict[str, np.ndarray]) -> float:
    a, b = flat(grads), flat(reference)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def cosine(grads: dict[str, np.ndarray], reference: dict[str, np.ndarray]) -> float:
    a, b = flat(grads), flat(reference)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def moving_errors(moving: np.ndarray, full: Outcome, initial: np.ndarray) -> tuple[float, float]:
    """(means, variances): ||M - M1|| / ||M1 - M0|| after one update."""
    half = len(moving) // 2
    errors = []
    for part in (slice(0, half), slice(half, None)):
        change = np.linalg.norm(full.moving[part] - initial[part])
        errors.append(float(np.linalg.norm(moving[part] - full.moving[part]) / change))
    return errors[0], errors[1]


def measure(bench: Bench, micros: list[int], max_passes: int
            ) -> tuple[Outcome, np.ndarray, list[tuple], list[float]]:
    """(full batch, initial moving statistics, rows of (label, m, outcome, time ratio), the
    relative gradient error after each correction pass of remedy b at the largest m)."""
    bench.restore()
    initial = bench.moving()
    full = bench.native(1)
    rows: list[tuple] = [("full", 1, full, 1.0)]
    for micro in micros:
        native, frozen = bench.native(micro), bench.frozen(micro)
        rows += [("micro", micro, native, 1.0),
                 ("a", micro, frozen, frozen.seconds / native.seconds)]
    passes = bench.corrected(frozen, micros[-1], max_passes)
    for label, done in (("b1", passes[:1]), (f"b{len(passes)}", passes)):
        seconds = frozen.seconds + sum(p.seconds for p in done)
        outcome = Outcome(done[-1].grads, done[-1].loss, done[-1].moving, seconds)
        rows.append((label, micros[-1], outcome, seconds / native.seconds))
    return full, initial, rows, [relative_error(p.grads, full.grads) for p in passes]


def print_rows(name: str, full: Outcome, initial: np.ndarray, rows: list[tuple]) -> None:
    print(f"\n{name}: first loss at micro_size 1 {full.loss:.5f}")
    print("| way | m | rel. grad error | cosine | loss - loss1 | moving mean | moving var "
          "| s / update | time vs micro |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, micro, outcome, ratio in rows:
        mean_error, variance_error = moving_errors(outcome.moving, full, initial)
        print(f"| {label} | {micro} | {relative_error(outcome.grads, full.grads):.2e} "
              f"| {cosine(outcome.grads, full.grads):.6f} | {outcome.loss - full.loss:+.2e} "
              f"| {mean_error:.2e} | {variance_error:.2e} | {outcome.seconds:.2f} | {ratio:.2f}x |")


def print_parameters(full: Outcome, rows: list[tuple], top: int) -> None:
    """The parameters with the largest max |g - g1| under micro-batch statistics."""
    last = [row for row in rows if row[1] == rows[-1][1] and row[0] != "full"]
    print(f"\nper parameter, max |g - g1| at m={rows[-1][1]} (the {top} worst under `micro`, "
          f"and the largest of all):")
    print("| parameter | max abs g1 | " + " | ".join(row[0] for row in last) + " |")
    print("|---|---|" + "---|" * len(last))
    errors = {name: [float(np.max(np.abs(row[2].grads[name] - reference)))
                     for row in last] for name, reference in full.grads.items()}
    worst = sorted(errors, key=lambda name: -errors[name][0])[:top]
    for name in worst:
        print(f"| {name} | {np.max(np.abs(full.grads[name])):.2e} | "
              + " | ".join(f"{value:.2e}" for value in errors[name]) + " |")
    largest = [max(values[i] for values in errors.values()) for i in range(len(last))]
    print("| (all parameters) | | " + " | ".join(f"{value:.2e}" for value in largest) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--micro", default="2,4", help="micro_size values, comma-separated")
    parser.add_argument("--networks", default="resnet_cifar")
    parser.add_argument("--top", type=int, default=6, help="parameters listed per network")
    parser.add_argument("--max-passes", type=int, default=20,
                        help="remedy b: at most this many correction passes")
    parser.add_argument("--resnet18-size", type=int, default=16,
                        help="ResNet-18's input: the images' top-left SIZE x SIZE")
    args = parser.parse_args()
    ms.set_context(mode=ms.PYNATIVE_MODE)
    micros = sorted(int(m) for m in args.micro.split(","))
    for name in args.networks.split(","):
        began = time.perf_counter()
        bench = Bench(name, args.batch, args.resnet18_size)
        full, initial, rows, errors = measure(bench, micros, args.max_passes)
        print_rows(f"{name}, batch {args.batch} of {bench.x.shape[-1]}x{bench.x.shape[-1]}, "
                   f"{len(bench.modes.layers)} BatchNorm layers", full, initial, rows)
        print("remedy b, rel. grad error after each correction pass: "
              + ", ".join(f"{error:.1e}" for error in errors))
        print_parameters(full, rows, args.top)
        print(f"({name}: {time.perf_counter() - began:.0f} s wall)")


if __name__ == "__main__":
    main()
