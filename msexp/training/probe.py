"""A probe: a trial capped to a few optimizer updates, measured instead of evaluated
(`msexp tune`'s profiles and its lr range test).

The first update compiles; step_ms and samples_per_s come from the updates after it.
The probe reports one epoch record holding every update's loss and step_ms (and learning
rate, in an lr range test) as series, then its metrics: step_ms, samples_per_s, compile_s,
train_mem_mb, peak_mem_mb, overflow_rate, updates, and training_updates (the updates of
the trial's whole training, which the probe stands for).
"""

from __future__ import annotations

import itertools
import math
import statistics
import time
from collections.abc import Iterator
from typing import Any, Callable

from msexp.experiment import Workload
from msexp.training import data
from msexp.training.graphs import Graphs
from msexp.training.memory import PeakMemory
from msexp.training.records import Diverged, Epoch, Probe, Stopped, loss_metrics
from msexp.training.step import timed_update


def range_rates(probe: Probe) -> list[float]:
    """The learning rate of each update of an lr range test: exponential from lr_low to
    lr_high."""
    n = max(1, probe.updates - 1)
    ratio = probe.lr_high / probe.lr_low
    return [probe.lr_low * ratio ** (i / n) for i in range(probe.updates)]


def run_probe(workload: Workload, params: dict[str, Any], graphs: Graphs, probe: Probe,
              on_epoch: Callable[[Epoch], None], stop_requested: Callable[[], bool]
              ) -> dict[str, float]:
    """Run `probe.updates` updates (cycling over epochs of data); return the metrics.

    Raises:
        Diverged: a clean update's loss is not finite (outside an lr range test).
        Stopped: `stop_requested()` became true.
    """
    batch = params["batch_size"]
    step, memory = graphs.step, PeakMemory()
    batches = data.TrainBatches(workload.train, batch, params["micro_size"], params["seed"])
    graphs.network.set_train(True)
    losses, update_s, overflow = [], [], 0
    start = time.perf_counter()
    for micro_batches in _forever(batches):
        if stop_requested():
            raise Stopped(f"stopped at update {len(losses)}")
        loss, finite = timed_update(step, micro_batches, memory, update_s)
        losses.append(loss)
        overflow += not finite
        if finite and not math.isfinite(loss):
            if probe.lr_high:
                break  # the range test has found where the loss diverges
            raise Diverged(f"train_loss is {loss} at update {len(losses)}")
        if len(losses) == probe.updates:
            break
    series: dict[str, list[float]] = {"train_loss": losses,
                                      "step_ms": [s * 1000 for s in update_s]}
    if probe.lr_high:
        series["lr"] = range_rates(probe)[:len(losses)]
    on_epoch(Epoch(1, len(losses), time.perf_counter() - start,
                   loss_metrics(losses), series))
    return {**_timing(update_s, batch), **memory.metrics(graphs.network, graphs.optimizer,
                                                         step.buffers),
            "overflow_rate": overflow / len(losses), "updates": float(len(losses)),
            "training_updates": float(params["epochs"] * batches.per_epoch())}


def _forever(batches: data.TrainBatches) -> Iterator[list]:
    """Updates epoch after epoch, without end."""
    for epoch in itertools.count(1):
        yield from batches.epoch(epoch)


def _timing(update_s: list[float], batch: int) -> dict[str, float]:
    """step_ms: the median update after the first (which compiles), robust to a loaded
    machine's spikes; samples_per_s = batch_size * 1000 / step_ms; compile_s."""
    step_s = statistics.median(update_s[1:] or update_s)
    return {"step_ms": step_s * 1000, "samples_per_s": batch / step_s,
            "compile_s": max(0.0, update_s[0] - step_s)}
