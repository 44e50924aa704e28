"""Avoidable copies in the buffered accumulation step: three ways to start an update's sum.

Side by side in one process, on one network and the same micro-batches:
  zeros_like   msexp's step: every micro-batch adds into the buffers; the update graph
               applies them and assigns `zeros_like` (a fill, then a copy);
  times 0      the same, zeroing by assigning buffers * 0 (reads them too; and an
               overflowed inf buffer becomes NaN, so it is unsafe with loss scaling);
  first writes the first micro-batch assigns its gradients, the others add; no zeroing,
               but a second compiled accumulate graph (forward and backward again).
Prints the median time per update and the compile time of each.

Usage: python benchmarks/accumulation_copies.py [--micro 4] [--updates 60]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORKLOADS = {"mlp_digits": 64, "lenet_digits": 32}


def variant(kind: str, workload: str, micro: int):
    import mindspore as ms
    from mindspore import nn, ops

    from msexp.experiment import load_experiment
    from msexp.spec import trial_params

    ms.set_seed(0)
    built = load_experiment(workload).build(trial_params(workload, {}))
    network, loss_fn = built.network, built.loss_fn
    optimizer = nn.Momentum(network.trainable_params(), 0.01, 0.9)
    def forward(x, y):
        return loss_fn(network(x), y) / micro

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)
    buffers = optimizer.parameters.clone(prefix="sum", init="zeros")
    hyper_map = ops.HyperMap()

    @ms.jit
    def add(x, y):
        loss, grads = grad_fn(x, y)
        hyper_map(ops.partial(ops.assign_add), buffers, grads)
        return loss

    @ms.jit
    def write(x, y):
        loss, grads = grad_fn(x, y)
        hyper_map(ops.partial(ops.assign), buffers, grads)
        return loss

    @ms.jit
    def update_zeros_like():
        optimizer(buffers)
        hyper_map(ops.partial(ops.assign), buffers, hyper_map(ops.zeros_like, buffers))
        return True

    @ms.jit
    def update_times_zero():
        optimizer(buffers)
        hyper_map(ops.partial(ops.assign), buffers, hyper_map(ops.partial(ops.mul, 0), buffers))
        return True

    @ms.jit
    def update_only():
        optimizer(buffers)
        return True

    def step(micro_batches):
        if kind == "first writes":
            losses = [(write if i == 0 else add)(x, y) for i, (x, y) in enumerate(micro_batches)]
            update_only()
        else:
            losses = [add(x, y) for x, y in micro_batches]
            (update_zeros_like if kind == "zeros_like" else update_times_zero)()
        return sum(float(loss.asnumpy()) for loss in losses)

    return step, built.train


def main() -> None:
    import mindspore as ms

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--micro", type=int, default=4)
    parser.add_argument("--updates", type=int, default=60)
    args = parser.parse_args()
    kinds = ("zeros_like", "times 0", "first writes")
    print(f"micro_size {args.micro}: median ms per update (compile s of the first update)")
    for workload, batch in WORKLOADS.items():
        steps, times, compile_s = {}, {k: [] for k in kinds}, {}
        data = None
        for kind in kinds:
            steps[kind], data = variant(kind, workload, args.micro)
        x, y = data
        m = batch // args.micro
        for i in range(args.updates):
            ids = [(j * batch + k) % len(y) for j in (i,) for k in range(batch)]
            micro_batches = [(ms.Tensor(x[ids[k:k + m]]), ms.Tensor(y[ids[k:k + m]]))
                             for k in range(0, batch, m)]
            order = kinds if i % 2 else tuple(reversed(kinds))
            for kind in order:
                began = time.perf_counter()
                steps[kind](micro_batches)
                elapsed = time.perf_counter() - began
                if i == 0:
                    compile_s[kind] = elapsed
                else:
                    times[kind].append(elapsed)
        cells = "  ".join(f"{k} {statistics.median(times[k]) * 1000:7.2f} ({compile_s[k]:.2f} s)"
                          for k in kinds)
        print(f"{workload:13} batch {batch}: {cells}", flush=True)


if __name__ == "__main__":
    main()
