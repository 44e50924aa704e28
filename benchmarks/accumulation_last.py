"""Two choices of msexp's step, side by side in one process (steps interleaved, so the
machine's load hits both alike):

  update       micro_size > 1: msexp's step (every micro-batch adds into the buffers,
               then an update graph applies them), against the same step with the last
               micro-batch's gradients added and applied in one graph with the update
               (`last_fused` below: one graph launch less per update, one graph more to
               compile);
  eval         the evaluation forward under `ms.jit` against the same function run by
               the Cell graph executor (`msexp.training.step.graph`);
  tutorial     `--tutorial`: msexp's step (both ways) against the accumulation Cells of
               MindSpore's tutorial (`step_vs_model._SeedAccumulation`), on the tutorial
               LeNet5 at batch 32, each run by the Cell graph executor, in the context's
               mode (`--graph-mode`: GRAPH_MODE, as the tutorial sets it).

Each variant has its own network (same seed, same initial weights) and sees the same
micro-batches. Prints the median ms per update or per eval pass, the first call's time
(its compile), and the largest difference between the variants' losses.

Usage: python benchmarks/accumulation_last.py [--workload lenet_digits] [--batch 64]
           [--micro 2,4,8] [--updates 40]
       python benchmarks/accumulation_last.py --tutorial [--graph-mode] [--micro 2,4,8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def build(workload: str):
    import mindspore as ms

    from msexp.experiment import load_experiment
    from msexp.spec import trial_params

    ms.set_seed(0)
    return load_experiment(workload).build(trial_params(workload, {}))


def last_fused(network, loss_fn, optimizer, micro: int):
    """msexp's accumulation step (no loss scaling) with its last micro-batch and the update
    in one graph, run by msexp's Cell executor wrapper."""
    import mindspore as ms
    from mindspore import ops

    from msexp.training.step import call, graph

    weights = optimizer.parameters
    buffers = weights.clone(prefix="accumulated", init="zeros")
    hyper_map = ops.HyperMap()

    def forward(x, y):
        loss = loss_fn(ops.cast(call(network, x), ms.float32), y)
        return loss / micro, loss

    grad_fn = ms.value_and_grad(forward, None, weights, has_aux=True)

    @graph
    def accumulate(x, y):
        (_, loss), grads = grad_fn(x, y)
        hyper_map(ops.partial(ops.assign_add), buffers, grads)
        return loss

    @graph
    def accumulate_and_update(x, y):
        (_, loss), grads = grad_fn(x, y)
        optimizer(hyper_map(ops.add, buffers, grads))
        hyper_map(ops.partial(ops.assign), buffers, hyper_map(ops.zeros_like, buffers))
        return loss

    def step(micro_batches):
        losses = [accumulate(x, y) for x, y in micro_batches[:-1]]
        losses.append(accumulate_and_update(*micro_batches[-1]))
        return sum(float(loss.asnumpy()) for loss in losses) / len(losses), True

    return step


def steps(workload: str, micro: int) -> dict:
    from mindspore import nn

    from msexp.training.step import TrainStep

    made = {}
    for fused in (False, True):
        built = build(workload)
        optimizer = nn.Momentum(built.network.trainable_params(), 0.01, 0.9)
        make = last_fused if fused else TrainStep
        made[fused] = make(built.network, built.loss_fn, optimizer, micro)
    return made


def compare_updates(workload: str, batch: int, micro: int, updates: int) -> str:
    import mindspore as ms

    made = steps(workload, micro)
    x, y = build(workload).train
    m = batch // micro
    times = {k: [] for k in made}
    first, losses = {}, {k: [] for k in made}
    for i in range(updates):
        ids = [(i * batch + k) % len(y) for k in range(batch)]
        micro_batches = [(ms.Tensor(x[ids[k:k + m]]), ms.Tensor(y[ids[k:k + m]]))
                         for k in range(0, batch, m)]
        for kind in (False, True) if i % 2 else (True, False):
            began = time.perf_counter()
            loss, _ = made[kind](micro_batches)
            elapsed = time.perf_counter() - began
            losses[kind].append(loss)
            if i == 0:
                first[kind] = elapsed
            else:
                times[kind].append(elapsed)
    diff = max(abs(a - b) for a, b in zip(losses[False], losses[True]))
    split, fused = (statistics.median(times[k]) * 1000 for k in (False, True))
    return (f"{workload} batch {batch} micro {micro}: update graph {split:.2f} ms "
            f"({first[False]:.2f} s first), last fused {fused:.2f} ms ({first[True]:.2f} s "
            f"first); fused/split {fused / split:.3f}; max loss difference {diff:.2e}")


def compare_eval(workload: str, passes: int) -> str:
    import mindspore as ms
    from mindspore import ops

    from msexp.training.step import call, graph

    built = build(workload)
    network, loss_fn = built.network, built.loss_fn
    network.set_train(False)

    def forward(x, y):
        logits = ops.cast(call(network, x), ms.float32)
        return logits, loss_fn(logits, y)

    variants = {"ms.jit": ms.jit(forward), "graph": graph(forward)}
    x, y = built.eval
    times = {k: [] for k in variants}
    first = {}
    for i in range(passes):
        for kind in variants if i % 2 else reversed(list(variants)):
            began = time.perf_counter()
            for start in range(0, len(y), 512):
                logits, loss = variants[kind](ms.Tensor(x[start:start + 512]),
                                              ms.Tensor(y[start:start + 512]))
                logits.asnumpy(), loss.asnumpy()
            elapsed = time.perf_counter() - began
            if i == 0:
                first[kind] = elapsed
            else:
                times[kind].append(elapsed)
    jit, cell = (statistics.median(times[k]) * 1000 for k in variants)
    return (f"{workload} eval of {len(y)}: ms.jit {jit:.2f} ms ({first['ms.jit']:.2f} s "
            f"first), graph {cell:.2f} ms ({first['graph']:.2f} s first); graph/ms.jit "
            f"{cell / jit:.3f}")


def compare_tutorial(micro: int, updates: int, batch: int = 32) -> str:
    import mindspore as ms
    from mindspore import nn

    from benchmarks import networks
    from benchmarks.networks import digits
    from benchmarks.step_vs_model import _SeedAccumulation
    from msexp.training.step import TrainStep

    def user_network():
        ms.set_seed(0)
        network = networks.TutorialLeNet5()
        return network, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), \
            nn.Momentum(network.trainable_params(), 0.01, 0.9)

    variants = {"msexp": TrainStep(*user_network(), micro),
                "msexp, last fused": last_fused(*user_network(), micro)}
    graph_mode = ms.get_context("mode") == ms.GRAPH_MODE
    cells = [c if graph_mode else c.compile_and_run
             for c in _SeedAccumulation(*user_network()).steps]

    def tutorial(micro_batches):
        forward_backward, optim, clear = cells
        losses = [forward_backward(x, y) for x, y in micro_batches]
        optim()
        clear()
        return float(losses[-1].asnumpy())

    variants["tutorial cells"] = tutorial
    x, y, _, _ = digits(32)
    m = batch // micro
    times = {k: [] for k in variants}
    for i in range(updates):
        ids = [(i * batch + k) % len(y) for k in range(batch)]
        micro_batches = [(ms.Tensor(x[ids[k:k + m]]), ms.Tensor(y[ids[k:k + m]]))
                         for k in range(0, batch, m)]
        for name in list(variants) if i % 2 else reversed(list(variants)):
            began = time.perf_counter()
            variants[name](micro_batches)
            if i:
                times[name].append(time.perf_counter() - began)
    cells_text = ", ".join(f"{k} {statistics.median(v) * 1000:.1f} ms" for k, v in times.items())
    return (f"tutorial_lenet batch {batch} micro {micro}, "
            f"{'GRAPH_MODE' if graph_mode else 'PYNATIVE_MODE'}: {cells_text}")


def main() -> None:
    import os

    import mindspore as ms

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="lenet_digits")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--micro", default="2,4,8")
    parser.add_argument("--updates", type=int, default=40)
    parser.add_argument("--passes", type=int, default=20)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--tutorial", action="store_true")
    parser.add_argument("--graph-mode", action="store_true")
    args = parser.parse_args()
    ms.set_context(runtime_num_threads=args.threads)  # as msexp's trial host sets it
    if args.graph_mode:
        ms.set_context(mode=ms.GRAPH_MODE)
    print(f"threads {args.threads}, load average {os.getloadavg()[0]:.1f}", flush=True)
    if args.tutorial:
        for micro in map(int, args.micro.split(",")):
            print(compare_tutorial(micro, args.updates), flush=True)
        return
    print(compare_eval(args.workload, args.passes), flush=True)
    for micro in map(int, args.micro.split(",")):
        print(compare_updates(args.workload, args.batch, micro, args.updates), flush=True)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
