"""Steady-state step time: msexp's training step against the tutorials' peers.

One optimizer update of the global batch is a step. Each cell of the table runs in its
own fresh process, peers alternating, and reports the median time of its steps after
the first epoch (compile excluded):
  msexp        `msexp.training.loop.train`, the loop every msexp trial runs, with the
               step `msexp.training.step.fuses` picks; at micro_size 1 also forced to
               each of its two steps: fused (grad and apply in one graph) and buffered
               (into buffers, then apply);
  msexp/jit    msexp's step with its graphs under `ms.jit` (as before 2026-11-23), not
               run by the Cell graph executor;
  model        `Model.train(dataset_sink_mode=False)`, timed per step from step begin to
               step end (what TimeMonitor brackets); with micro_size > 1, the
               tutorial's `GradientAccumulation` (forward-backward, optimizer and clear
               Cells, run as Cells in GRAPH_MODE);
  model/sink   `Model.train(dataset_sink_mode=True)`: epoch time / steps (micro_size 1);
  hand         a hand-written loop: grad and update in one `ms.jit` step (micro_size 1),
               else gradients added into buffers and a second jit for the update.
`model` runs in GRAPH_MODE, as the tutorials and the model zoo set it (`--model-mode
pynative` for MindSpore's default); msexp and hand run in the default mode, as a trial
does. Every peer runs with the same threads: `runtime_num_threads` and OMP_NUM_THREADS
= `--threads` (default: the cores, what msexp gives the trial of a one-worker sweep).
`--busy` keeps one more core busy (`python3 -c 'while True: pass'`) during the run.
No loss scaling (`Model` on CPU takes none, or a fixed scale that never skips).

Workloads: msexp's `mlp_digits` and `lenet_digits` (`SequentialCell`, `CrossEntropyLoss`),
and `tutorial_lenet` and `small_resnet` of `benchmarks/networks.py` (Cell subclasses,
`SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")`, on the 32x32 digits).

Usage: python benchmarks/step_vs_model.py [--repeats 5] [--epochs 2]
       python benchmarks/step_vs_model.py --only lenet_digits:1:O0   (one row)
       python benchmarks/step_vs_model.py --workloads tutorial_lenet,small_resnet --micro 1
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

BATCH = {"tutorial_lenet": 32, "small_resnet": 32, "mlp_digits": 64, "lenet_digits": 32}
USERS = {"tutorial_lenet": "TutorialLeNet5", "small_resnet": "SmallResNet"}  # networks.py


def params_for(workload: str, micro: int, amp: str, epochs: int) -> dict:
    from msexp.spec import trial_params

    return trial_params("lenet_digits" if workload in USERS else workload,
                        {"epochs": epochs, "batch_size": BATCH[workload], "micro_size": micro,
                         "amp_level": amp, "lr": 0.01, "optimizer": "momentum"})


def build(workload: str, params: dict):
    """The workload: a user's network of networks.py on the 32x32 digits, or msexp's own."""
    from msexp.experiment import Workload, load_experiment

    if workload not in USERS:
        return load_experiment(workload).build(params)
    from mindspore import nn

    from benchmarks import networks
    from benchmarks.networks import digits

    x, y, x_eval, y_eval = digits(32)
    network = getattr(networks, USERS[workload])()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    return Workload(network, loss, (x, y), (x_eval, y_eval))


def cell(workload: str, micro: int, amp: str, peer: str, epochs: int, threads: int,
         model_mode: str) -> float:
    """Median steady-state step time in ms of one peer on one row, in this process."""
    import mindspore as ms

    ms.set_context(runtime_num_threads=threads)  # as msexp's trial host sets it
    if peer.startswith("model") and model_mode == "graph":
        ms.set_context(mode=ms.GRAPH_MODE)
    params = params_for(workload, micro, amp, epochs)
    ms.set_seed(0)
    built = build(workload, params)
    if peer.startswith("msexp"):
        from msexp.training import graphs
        from msexp.training.loop import train

        if peer == "msexp/jit":  # msexp before 2026-11-23: its graphs under ms.jit
            from msexp.training import step

            step.graph = ms.jit
        elif peer != "msexp":  # force one of the two steps
            graphs.fuses = lambda params: peer == "msexp/fused"
        return train(built, params, lambda epoch: None).metrics["step_ms"]
    if peer == "hand":
        return _hand(built, params)
    return _model(built, params, sink=peer == "model/sink")


def _optimizer(network, lr=0.01):
    from mindspore import nn

    return nn.Momentum(network.trainable_params(), lr, 0.9)


def _model(built, params: dict, sink: bool) -> float:
    import mindspore as ms
    from mindspore import Model, amp
    from mindspore.train import Callback

    x, y = built.train
    batch, micro, epochs = params["batch_size"], params["micro_size"], params["epochs"]
    data = ms.dataset.NumpySlicesDataset((x, y), ["x", "y"], shuffle=True)
    times: list[float] = []

    class StepTimer(Callback):
        def on_train_step_begin(self, run_context):
            self.began = time.perf_counter()

        def on_train_step_end(self, run_context):
            times.append(time.perf_counter() - self.began)

        def on_train_epoch_begin(self, run_context):
            self.epoch_began = time.perf_counter()

        def on_train_epoch_end(self, run_context):
            if sink:
                times.append((time.perf_counter() - self.epoch_began) / (len(x) // batch))

    network, loss_fn = built.network, built.loss_fn
    if params["amp_level"] != "O0":  # cast here: Model's own O2 adds a loss scale on CPU
        network = amp.auto_mixed_precision(network, params["amp_level"])
    if micro == 1:
        model = Model(network, loss_fn, _optimizer(network))
        model.train(epochs, data.batch(batch, drop_remainder=True), callbacks=[StepTimer()],
                    dataset_sink_mode=sink)
        per_epoch = len(x) // batch
        return statistics.median(times[1 if sink else per_epoch:]) * 1000
    accumulation = _SeedAccumulation(network, loss_fn, _optimizer(network))
    data = data.batch(batch // micro, drop_remainder=True)
    return accumulation.train(epochs, data, micro) * 1000


class _SeedAccumulation:
    """The gradient accumulation of MindSpore's "Applying Gradient Accumulation" tutorial
    (seed 001's `GradientAccumulation`): three Cells, forward-backward into grad_sum,
    optimizer, clear; in GRAPH_MODE each runs by the Cell graph executor."""

    def __init__(self, network, loss_fn, optimizer):
        import mindspore as ms
        from mindspore import nn, ops

        params = optimizer.parameters
        grad_sum = params.clone(prefix="grad_sum", init="zeros")
        zeros = params.clone(prefix="zeros", init="zeros")
        with_loss = nn.WithLossCell(network, loss_fn)
        hyper_map = ops.HyperMap()

        class TrainForwardBackward(nn.Cell):
            def __init__(self):
                super().__init__(auto_prefix=False)
                self.network, self.grad_sum = with_loss, grad_sum
                self.weights = ms.ParameterTuple(network.trainable_params())
                self.grad = ops.GradOperation(get_by_list=True)

            def construct(self, x, y):
                loss = self.network(x, y)
                grads = self.grad(self.network, self.weights)(x, y)
                return ops.depend(loss, hyper_map(ops.partial(ops.assign_add), self.grad_sum,
                                                  grads))

        class TrainOptim(nn.Cell):
            def __init__(self):
                super().__init__(auto_prefix=False)
                self.optimizer, self.grad_sum = optimizer, grad_sum

            def construct(self):
                return self.optimizer(self.grad_sum)

        class TrainClear(nn.Cell):
            def __init__(self):
                super().__init__(auto_prefix=False)
                self.grad_sum, self.zeros = grad_sum, zeros

            def construct(self):
                return hyper_map(ops.partial(ops.assign), self.grad_sum, self.zeros)

        self.steps = (TrainForwardBackward(), TrainOptim(), TrainClear())

    def train(self, epochs: int, data, micro: int) -> float:
        import mindspore as ms

        forward_backward, optim, clear = self.steps
        times: list[float] = []
        for epoch in range(epochs):
            began = time.perf_counter()
            for k, (x, y) in enumerate(data.create_tuple_iterator(num_epochs=1,
                                                                  output_numpy=True)):
                loss = forward_backward(ms.Tensor(x), ms.Tensor(y))
                if (k + 1) % micro == 0:
                    optim()
                    clear()
                    float(loss.asnumpy())
                    if epoch:
                        times.append(time.perf_counter() - began)
                    began = time.perf_counter()
        return statistics.median(times)


def _hand(built, params: dict) -> float:
    """The loop a user writes from MindSpore's functional AMP tutorial."""
    import mindspore as ms
    import numpy as np
    from mindspore import amp, ops

    network, loss_fn = built.network, built.loss_fn
    level, micro = params["amp_level"], params["micro_size"]
    if level != "O0":
        network = amp.auto_mixed_precision(network, level)
    optimizer = _optimizer(network)

    def forward(x, y):
        return loss_fn(ops.cast(network(x), ms.float32), y) / micro

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)

    @ms.jit
    def fused(x, y):
        loss, grads = grad_fn(x, y)
        optimizer(grads)
        return loss

    buffers = optimizer.parameters.clone(prefix="sum", init="zeros")
    hyper_map = ops.HyperMap()

    @ms.jit
    def accumulate(x, y):
        loss, grads = grad_fn(x, y)
        hyper_map(ops.partial(ops.assign_add), buffers, grads)
        return loss

    @ms.jit
    def update():
        optimizer(buffers)
        hyper_map(ops.partial(ops.assign), buffers, hyper_map(ops.zeros_like, buffers))
        return True

    x, y = built.train
    batch, epochs = params["batch_size"], params["epochs"]
    times: list[float] = []
    for epoch in range(epochs):
        order = np.random.default_rng(epoch).permutation(len(y))
        for start in range(0, len(y) - batch + 1, batch):
            ids = order[start:start + batch]
            began = time.perf_counter()
            if micro == 1:
                float(fused(ms.Tensor(x[ids]), ms.Tensor(y[ids])).asnumpy())
            else:
                m = batch // micro
                losses = [accumulate(ms.Tensor(x[ids[i:i + m]]), ms.Tensor(y[ids[i:i + m]]))
                          for i in range(0, batch, m)]
                update()
                sum(float(loss.asnumpy()) for loss in losses)
            if epoch:
                times.append(time.perf_counter() - began)
    return statistics.median(times) * 1000


COLUMNS = ["msexp", "msexp/fused", "msexp/buffered", "model", "model/sink", "hand"]
PEERS = ("model", "model/sink", "hand")


def peers(micro: int) -> list[str]:
    return COLUMNS if micro == 1 else ["msexp", "model", "hand"]


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--workloads", default=",".join(BATCH))
    parser.add_argument("--micro", default="1,2,4", help="micro_size values")
    parser.add_argument("--amp", default="O0,O2", help="amp_level values")
    parser.add_argument("--only", help="one row, WORKLOAD:MICRO:AMP")
    parser.add_argument("--peers", help="columns to run (default: all for the row)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--model-mode", choices=("graph", "pynative"), default="graph")
    parser.add_argument("--busy", action="store_true", help="one busy process beside")
    parser.add_argument("--cell", help=argparse.SUPPRESS)  # WORKLOAD:MICRO:AMP:PEER, in-process
    return parser.parse_args()


def run_cell(args: argparse.Namespace, row: tuple[str, int, str], peer: str) -> float:
    """One peer on one row in a fresh process, with the threads every peer gets."""
    workload, micro, amp = row
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    out = subprocess.run(
        [sys.executable, __file__, "--cell", f"{workload}:{micro}:{amp}:{peer}",
         "--epochs", str(args.epochs), "--threads", str(args.threads),
         "--model-mode", args.model_mode], cwd=ROOT, capture_output=True, text=True, env=env)
    if out.returncode:
        sys.exit(f"{workload} {micro} {amp} {peer} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])["step_ms"]


def main() -> None:
    args = arguments()
    if args.cell:
        workload, micro, amp, peer = args.cell.split(":", 3)
        print(json.dumps({"step_ms": cell(workload, int(micro), amp, peer, args.epochs,
                                          args.threads, args.model_mode)}))
        return
    rows = [(w, int(m), a) for w in args.workloads.split(",") for m in args.micro.split(",")
            for a in args.amp.split(",")]
    if args.only:
        w, m, a = args.only.split(":")
        rows = [(w, int(m), a)]
    print(f"threads {args.threads}, model in {args.model_mode} mode, busy {args.busy}, "
          f"load average {os.getloadavg()[0]:.1f}; median ms (min-max) of {args.repeats}")
    with busy(1 if args.busy else 0):
        for row in rows:
            columns = args.peers.split(",") if args.peers else peers(row[1])
            runs: dict[str, list[float]] = {p: [] for p in columns}
            for _ in range(args.repeats):
                for peer in runs:
                    runs[peer].append(run_cell(args, row, peer))
            print_row(row, runs)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


def print_row(row: tuple[str, int, str], runs: dict[str, list[float]]) -> None:
    med = {p: statistics.median(v) for p, v in runs.items()}
    cells = "  ".join(f"{p} {med[p]:.1f} ({min(v):.1f}-{max(v):.1f})" for p, v in runs.items())
    fastest = min((v for p, v in med.items() if p in PEERS), default=None)
    ratio = f"   msexp/fastest peer {med['msexp'] / fastest:.2f}x" if fastest and "msexp" in med \
        else ""
    print(f"{row[0]} micro {row[1]} {row[2]}:  {cells}{ratio}", flush=True)


if __name__ == "__main__":
    main()
