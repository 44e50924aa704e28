"""The training loop every trial runs: epochs of updates, evaluation and metrics."""

from __future__ import annotations

import copy
import math
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import mindspore as ms
import numpy as np

from msexp.experiment import Workload, data_problem
from msexp.training import data
from msexp.training.checkpoint import CheckpointPlan, Checkpoints, load_into
from msexp.training.graphs import Graphs
from msexp.training.memory import PeakMemory
from msexp.training.records import Diverged, Epoch, Stopped, Target, loss_metrics
from msexp.training.step import tensors_of, timed_update

OnEpoch = Callable[[Epoch], None]


@dataclass
class Outcome:
    """What a trial's training produced: final metrics, the model checkpoint kept, and the
    graphs it ran on (for a later trial of the same signature)."""

    metrics: dict[str, float]
    checkpoint: Path | None = None
    graphs: Graphs | None = None


def train(workload: Workload, params: dict[str, Any], on_epoch: OnEpoch,
          stop_requested: Callable[[], bool] = lambda: False,
          target: Target | None = None, shard: tuple[int, int] = (0, 1),
          reducer: Callable | None = None, plan: CheckpointPlan | None = None,
          init_from: Path | None = None, graphs: Graphs | None = None) -> Outcome:
    """Train `workload` as `params` say, reporting each epoch to `on_epoch`.

    In a data-parallel rank, `shard` is (rank, size) and `reducer` averages the
    accumulated gradients over the ranks (see `TrainStep`). With a checkpoint `plan`,
    the trial saves its state as the plan says and, if the plan's folder holds a
    checkpoint, continues from it (reporting the epochs it had already trained first).
    `init_from` is a checkpoint file to start from (weights and optimizer state).
    `graphs` are ones `prepare` made ready for this trial; None builds them.

    Raises:
        Diverged: the eval loss or the training loss of a clean update is not finite.
        Stopped: `stop_requested()` became true.
    """
    if graphs is None:
        with tempfile.TemporaryDirectory(prefix="msexp-amp-") as scratch:
            graphs = Graphs.build(workload, params, steps_per_epoch(workload,
                                                                   params["batch_size"]),
                                  Path(scratch), reducer)
            return _train(workload, params, on_epoch, stop_requested, target, shard, plan,
                          init_from, graphs)
    return _train(workload, params, on_epoch, stop_requested, target, shard, plan, init_from,
                  graphs)


def _train(workload: Workload, params: dict[str, Any], on_epoch: OnEpoch,
           stop_requested: Callable[[], bool], target: Target | None,
           shard: tuple[int, int], plan: CheckpointPlan | None, init_from: Path | None,
           graphs: Graphs) -> Outcome:
    batch, epochs = params["batch_size"], params["epochs"]
    network, step = graphs.network, graphs.step
    memory, evaluate = PeakMemory(), _evaluator(graphs.forward, workload)
    batches = data.TrainBatches(workload.train, batch, params["micro_size"], params["seed"],
                                shard)
    if init_from is not None:
        _start_from(graphs, init_from)
    checkpoints = Checkpoints(plan, graphs.parameters(), graphs.write) if plan else None
    saved = checkpoints.restore() if checkpoints else None
    run = _Progress.of(saved, step)
    final: dict[str, float] = {}
    for earlier in run.history:  # a resumed trial reports one continuous history
        on_epoch(earlier)
        _absorb(final, earlier, target)
    start = time.perf_counter() - (run.history[-1].elapsed_s if run.history else 0.0)
    for epoch in range(len(run.history) + 1, epochs + 1):
        network.set_train(True)
        losses, scales = _updates(step, batches.epoch(epoch), run, memory, stop_requested,
                                  graphs.drop_overflow_update)
        record = _evaluated(network, evaluate, losses, scales, run, epoch, start)
        if checkpoints and checkpoints.due(epoch, epochs):
            run.counters["thor_steps"] = step.thor.steps if step.thor is not None else 0
            saved = checkpoints.save(epoch, run.step, run.history, run.counters, saved)
        on_epoch(record)
        _absorb(final, record, target)
    if not run.history:  # nothing to train (epochs 0): evaluate what there is
        network.set_train(False)
        final.update(evaluate())
    final.update(_speed(run.update_s, batch), **_figures(graphs, memory, run),
                 train_s=time.perf_counter() - start)
    return Outcome(final, checkpoints.finish(saved) if checkpoints else None, graphs)


@dataclass
class _Progress:
    """Where a trial's training stands: its epochs, updates, counters and update times."""

    history: list[Epoch]
    counters: dict[str, int]
    step: int
    update_s: list[float] = field(default_factory=list)

    @classmethod
    def of(cls, saved: Any, step: Any) -> _Progress:
        """From a checkpoint's state (None: from scratch); THOR's step count restored."""
        counters = {"overflow": 0, "skipped": 0, "thor_steps": 0,
                    **(saved.counters if saved else {})}
        if step.thor is not None:
            step.thor.steps = counters["thor_steps"]
        return cls(list(saved.history) if saved else [], counters, saved.step if saved else 0)


def _start_from(graphs: Graphs, init_from: Path) -> None:
    """Load a checkpoint's weights and moments; this run keeps its own schedule and
    counters."""
    carried = {n: p for n, p in graphs.parameters().items()
               if n.rpartition(".")[2] not in ("global_step", "learning_rate", "counter")}
    missing = load_into(carried, init_from, graphs.write)
    if len(missing) == len(carried):
        raise ValueError(f"{init_from} holds none of this network's parameters")


def _updates(step: Any, epoch_batches: Any, run: _Progress, memory: PeakMemory,
             stop_requested: Callable[[], bool], drop: bool) -> tuple[list, list]:
    """One epoch of updates; its losses and loss scales.

    Raises:
        Stopped: `stop_requested()` became true.
        Diverged: the loss of a clean update is not finite.
    """
    losses, scales = [], []
    for micro_batches in epoch_batches:
        if stop_requested():
            raise Stopped(f"stopped at epoch {len(run.history) + 1}, step {run.step}")
        loss, finite = timed_update(step, micro_batches, memory, run.update_s)
        run.step += 1
        if not finite:
            run.counters["overflow"] += 1
            run.counters["skipped"] += drop
        elif not math.isfinite(loss):
            raise Diverged(f"train_loss is {loss} at epoch {len(run.history) + 1}, "
                           f"step {run.step}")
        losses.append(loss)
        if step.loss_scale is not None:
            scales.append(step.loss_scale)
    return losses, scales


def _evaluated(network: Any, evaluate: Callable[[], dict[str, float]], losses: list,
               scales: list, run: _Progress, epoch: int, start: float) -> Epoch:
    """The epoch's record, evaluated, appended to the history.

    Raises:
        Diverged: the eval loss is not finite.
    """
    network.set_train(False)
    metrics = evaluate()
    if not math.isfinite(metrics["eval_loss"]):
        raise Diverged(f"eval_loss is {metrics['eval_loss']} after epoch {epoch}")
    metrics.update(loss_metrics(losses))
    series = {"train_loss": losses, **({"loss_scale": scales} if scales else {})}
    record = Epoch(epoch, run.step, time.perf_counter() - start, metrics, series)
    run.history.append(record)
    return record


def _speed(update_s: list[float], batch: int) -> dict[str, float]:
    """step_ms and samples_per_s over the steady updates; compile_s, the first one's extra."""
    if not update_s:
        return {}
    steady = update_s[1:] or update_s
    step_s = statistics.median(steady)
    return {"step_ms": step_s * 1000, "compile_s": max(0.0, update_s[0] - step_s),
            "samples_per_s": batch * len(steady) / sum(steady)}


def _figures(graphs: Graphs, memory: PeakMemory, run: _Progress) -> dict[str, float]:
    """Memory, overflows and the technique's own figures (loss scale, THOR's time)."""
    step = graphs.step
    found = {**memory.metrics(graphs.network, graphs.optimizer, step.buffers),
             "overflow_steps": run.counters["overflow"],
             "skipped_updates": run.counters["skipped"]}
    if step.loss_scale is not None:
        found["loss_scale"] = step.loss_scale
    if step.thor is not None:
        found["thor_inverse_s"] = step.thor.inverse_s
    return found


def steps_per_epoch(workload: Workload, batch: int) -> int:
    """Updates per epoch; raises ValueError for data the workload cannot train on."""
    for name in ("train", "eval"):
        problem = data_problem(getattr(workload, name), name)
        if problem:
            raise TypeError(problem)
    n_train = data.num_samples(workload.train)
    if n_train < batch:
        raise ValueError(f"batch_size {batch} is larger than the training set ({n_train})")
    return n_train // batch


def prepare(workload: Workload, params: dict[str, Any], earlier: Graphs | None,
            scratch: Path) -> tuple[Graphs, bool]:
    """Graphs for this trial: `earlier` reset for it where that makes an identical trial
    (warm: True), else built anew (see `Graphs.build` for `scratch`)."""
    updates = steps_per_epoch(workload, params["batch_size"])
    if earlier is not None and earlier.reusable and earlier.reset(workload, params, updates):
        return earlier, True
    return Graphs.build(workload, params, updates, scratch), False


def _absorb(final: dict[str, float], record: Epoch, target: Target | None) -> None:
    """Fold one epoch into the final metrics (and the target's epoch, once reached)."""
    final.update(record.metrics)
    if target and "epochs_to_target" not in final and target.reached(record.metrics):
        final["epochs_to_target"] = record.epoch
        final["time_to_target_s"] = record.elapsed_s


def _evaluator(forward: Callable, workload: Workload) -> Callable[[], dict[str, float]]:
    same = workload.eval is workload.train  # a dataset takes one consumer: copy it
    eval_set = data.EvalBatches(copy.deepcopy(workload.eval) if same else workload.eval)

    def evaluate() -> dict[str, float]:
        total = correct = 0
        loss_sum = 0.0
        all_logits, all_labels = [], []
        for x, y in eval_set:
            logits, loss = forward(tensors_of(x), ms.Tensor(y))
            logits = logits.asnumpy()
            loss_sum += float(loss.asnumpy()) * len(y)
            correct += int((logits.argmax(axis=1) == y).sum())
            total += len(y)
            if workload.metrics:
                all_logits.append(logits)
                all_labels.append(y)
        metrics = {"eval_loss": loss_sum / total, "eval_accuracy": correct / total}
        if workload.metrics:
            logits, labels = np.concatenate(all_logits), np.concatenate(all_labels)
            for name, fn in workload.metrics.items():
                metrics[name] = float(fn(logits, labels))
        return metrics

    return evaluate
