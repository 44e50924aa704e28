"""Steady-state step time: `msexp.hooks.model(...).train` against `Model.train`, by the
number of columns the network takes.

One optimizer update of the global batch is a step. Per network shape, each cell runs in
its own fresh process, peers alternating, and reports the median time of its steps after
the first epoch (compile excluded), the same as epoch time / steps (the data pipeline
between steps included), and the seconds of its first epoch (compile included):
  model   `Model(network, loss_fn, opt).train(epochs, data, dataset_sink_mode=False)`,
          one update of the full batch per step;
  hooks   the same script with its `Model(...)` line replaced by `msexp.hooks.model(network,
          loss_fn, opt, {"micro_size": M})`, at M = 1 and 4 (4 micro-batches of the batch,
          their gradients added, one update: the hooks/Model ratio at 4 includes that).
Both are timed per step by a Callback from step begin to step end (what TimeMonitor
brackets), in GRAPH_MODE as the tutorials set it (`--mode pynative` for MindSpore's
default), with `runtime_num_threads` and OMP_NUM_THREADS = `--threads` (default: the
cores). `--busy` keeps one more core busy (`python3 -c 'while True: pass'`) during the run.

Shapes, each an MLP (64-128-10) on msexp's digits at 8x8 (the first `--samples` training
images), `SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")`:
  loss_fn    the network and a separate loss_fn (columns: x, y);
  with_loss  `nn.WithLossCell(network, loss)`, loss_fn None (columns: x, y);
  masked     a network computing its own loss from three columns (x, mask, y), as an NLP
             script's net_with_loss does (mask: a fixed random 0/1 mask of the pixels).
A compiled graph that takes a plain tuple of tensors treats it as a constant and
compiles anew at each call (msexp before 2026-11-28 passed a micro-batch of several
columns so): that shows in both the steady state and the first epoch. The last column
counts MindSpore's warnings of it in the hooks cell's log ("Constant value tensor are
detected in tuple or list, which might cause recompiling").

Usage: python benchmarks/hooks_vs_model.py [--repeats 3] [--epochs 3] [--samples 256]
       python benchmarks/hooks_vs_model.py --shapes masked --micro 4 --busy
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _sweeps import busy  # noqa: E402

SHAPES = ("loss_fn", "with_loss", "masked")
BATCH = 32


def data(samples: int, shape: str):
    """The training columns of `shape`: digits at 8x8, flattened (N, 64), labels int32."""
    import numpy as np

    from benchmarks.networks import digits

    x, y, _, _ = digits(8)
    x, y = x[:samples].reshape(-1, 64), y[:samples]
    if shape != "masked":
        return (x, y), ["x", "y"]
    mask = (np.random.default_rng(0).random(x.shape) > 0.1).astype(np.float32)
    return (x, mask, y), ["x", "mask", "y"]


def networks(shape: str):
    """(network, loss_fn) as the script of `shape` gives them to Model."""
    from mindspore import nn

    mlp = nn.SequentialCell(nn.Dense(64, 128), nn.ReLU(), nn.Dense(128, 10))
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    if shape == "loss_fn":
        return mlp, loss
    if shape == "with_loss":
        return nn.WithLossCell(mlp, loss), None

    class MaskedLoss(nn.Cell):
        def __init__(self):
            super().__init__()
            self.net, self.loss = mlp, loss

        def construct(self, x, mask, y):
            return self.loss(self.net(x * mask), y)

    return MaskedLoss(), None


def cell(shape: str, peer: str, epochs: int, samples: int, threads: int, mode: str) -> dict:
    """{step_ms, first_epoch_s} of one peer ("model", or "hooks:M") on one shape."""
    import mindspore as ms
    from mindspore import Model, nn
    from mindspore.train import Callback

    import msexp
    from msexp import hooks

    ms.set_context(runtime_num_threads=threads)
    if mode == "graph":
        ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_seed(0)
    columns, names = data(samples, shape)
    dataset = ms.dataset.NumpySlicesDataset(columns, names, shuffle=True).batch(
        BATCH, drop_remainder=True)
    network, loss_fn = networks(shape)
    opt = nn.Momentum(network.trainable_params(), 0.01, 0.9)
    if peer == "model":
        model = Model(network, loss_fn, opt)
    else:
        model = hooks.model(network, loss_fn, opt, {"micro_size": int(peer.split(":")[1])})
    steps: list[float] = []
    epochs_s: list[float] = []

    class StepTimer(Callback):
        def on_train_step_begin(self, run_context):
            self.began = time.perf_counter()

        def on_train_step_end(self, run_context):
            steps.append(time.perf_counter() - self.began)

        def on_train_epoch_begin(self, run_context):
            self.epoch_began = time.perf_counter()

        def on_train_epoch_end(self, run_context):
            epochs_s.append(time.perf_counter() - self.epoch_began)

    model.train(epochs, dataset, callbacks=[StepTimer()], dataset_sink_mode=False)
    per_epoch = len(steps) // epochs
    return {"step_ms": statistics.median(steps[per_epoch:]) * 1000,
            "epoch_ms": statistics.median(epochs_s[1:]) / per_epoch * 1000,
            "first_epoch_s": epochs_s[0], "msexp": msexp.__file__}


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=256, help="training images used")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--micro", default="1,4", help="hooks' micro_size values")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--mode", choices=("graph", "pynative"), default="graph")
    parser.add_argument("--busy", action="store_true", help="one busy process beside")
    parser.add_argument("--cell", help=argparse.SUPPRESS)  # SHAPE:PEER, in this process
    return parser.parse_args()


def run_cell(args: argparse.Namespace, shape: str, peer: str) -> dict:
    """One peer on one shape in a fresh process, with the threads every peer gets."""
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    out = subprocess.run(
        [sys.executable, __file__, "--cell", f"{shape}:{peer}", "--epochs", str(args.epochs),
         "--samples", str(args.samples), "--threads", str(args.threads), "--mode", args.mode],
        cwd=ROOT, capture_output=True, text=True, env=env)
    if out.returncode:
        sys.exit(f"{shape} {peer} failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["recompiles"] = out.stderr.count("might cause recompiling")
    return result


def main() -> None:
    args = arguments()
    if args.cell:
        shape, peer = args.cell.split(":", 1)
        print(json.dumps(cell(shape, peer, args.epochs, args.samples, args.threads,
                              args.mode)))
        return
    micros = [int(m) for m in args.micro.split(",")]
    peers = ["model"] + [f"hooks:{m}" for m in micros]
    print(f"threads {args.threads}, {args.mode} mode, busy {args.busy}, batch {BATCH}, "
          f"{args.samples} samples ({args.samples // BATCH} steps/epoch), {args.epochs} epochs, "
          f"load average {os.getloadavg()[0]:.1f}; median of {args.repeats} (min-max)",
          flush=True)
    where = None
    rows = []
    with busy(1 if args.busy else 0):
        for shape in args.shapes.split(","):
            runs: dict[str, list[dict]] = {p: [] for p in peers}
            for _ in range(args.repeats):
                for peer in peers:
                    runs[peer].append(run_cell(args, shape, peer))
                    where = runs[peer][-1]["msexp"]
            for m in micros:
                rows.append(row(shape, m, runs["model"], runs[f"hooks:{m}"]))
                print(rows[-1], flush=True)
    print(f"\nmsexp from {where}; load average at the end {os.getloadavg()[0]:.1f}\n")
    print("| shape | micro_size | Model ms/step | hooks ms/step | hooks/Model | Model epoch "
          "ms/step | hooks epoch ms/step | hooks/Model (epoch) | Model 1st epoch s | "
          "hooks 1st epoch s | hooks recompile warnings |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for line in rows:
        print(line)


def row(shape: str, micro: int, model: list[dict], hooked: list[dict]) -> str:
    def median(runs: list[dict], key: str) -> float:
        return statistics.median(r[key] for r in runs)

    def spread(runs: list[dict], key: str) -> str:
        values = [r[key] for r in runs]
        return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"

    return (f"| {shape} | {micro} | {spread(model, 'step_ms')} | {spread(hooked, 'step_ms')} | "
            f"{median(hooked, 'step_ms') / median(model, 'step_ms'):.2f}x | "
            f"{median(model, 'epoch_ms'):.2f} | {median(hooked, 'epoch_ms'):.2f} | "
            f"{median(hooked, 'epoch_ms') / median(model, 'epoch_ms'):.2f}x | "
            f"{median(model, 'first_epoch_s'):.2f} | {median(hooked, 'first_epoch_s'):.2f} | "
            f"{median(hooked, 'recompiles'):.0f} |")


if __name__ == "__main__":
    main()
