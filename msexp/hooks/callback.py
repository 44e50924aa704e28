"""`MsexpCallback`: one line in `Model.train`'s callbacks reports each epoch to msexp."""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from typing import Any

import numpy as np
from mindspore import nn
from mindspore.train import Callback

from msexp.hooks.accumulate import AccumulatingTrainStep
from msexp.hooks.channel import active, report, should_stop
from msexp.keys import TrialEnv
from msexp.training.memory import PeakMemory
from msexp.training.records import loss_metrics


class MsexpCallback(Callback):
    """Reports each epoch of `Model.train` as msexp's own loop does, counting optimizer
    updates: train_loss (the last update's; and its per-update series), train_loss_epoch
    (the epoch's mean), step_ms (per update), compile_s,
    samples_per_s, peak_mem_mb, train_mem_mb, overflow_steps, skipped_updates and the
    loss-scale series, and, given the model and an eval dataset, the model's own metrics
    as `eval_<name>`. Stops training cleanly when msexp prunes the trial. In a probe of
    `msexp tune` (MSEXP_PROBE), reports the probe's updates once they have run, then ends
    the script: nothing after them runs (an eval, a checkpoint). Outside msexp it does
    nothing.

    The loss scale and overflows come from msexp's train step (`hooks.model`) or from a
    `Model` with a loss scale manager (its step returns loss, overflow, scale).

    Args:
        model: the `Model` being trained, to evaluate after each epoch.
        eval_dataset: the dataset `model.eval` runs on after each epoch.
    """

    def __init__(self, model: Any = None, eval_dataset: Any = None):
        super().__init__()
        self.model, self.eval_dataset = model, eval_dataset
        self.enabled = active()
        self._memory: PeakMemory | None = None
        self._measure = contextlib.ExitStack()
        self._updates = 0  # updates done when the current step began
        self._update_s: list[float] = []  # per update, every step of the training
        self._began = 0.0
        self._overflows = 0
        self._epoch = _EpochSeries()
        self._probe_updates = int(os.environ.get(TrialEnv.PROBE) or 0) if self.enabled else 0

    def __exit__(self, *err: Any) -> None:
        self._measure.close()  # a step that raised leaves the memory profiler running

    def on_train_begin(self, run_context: Any) -> None:
        if self.enabled:
            self._memory = PeakMemory()
            self._updates = run_context.original_args().cur_step_num

    def on_train_step_begin(self, run_context: Any) -> None:
        if not self.enabled:
            return
        if self._memory is not None and not self._update_s:  # the first update, measured
            self._measure.enter_context(self._memory.update(_train_step(run_context)))
        self._began = time.perf_counter()

    def on_train_step_end(self, run_context: Any) -> None:
        if not self.enabled:
            return
        seconds = time.perf_counter() - self._began
        self._measure.close()
        args = run_context.original_args()
        updates = max(1, args.cur_step_num - self._updates)
        self._updates = args.cur_step_num
        self._update_s += [seconds / updates] * updates
        step = _train_step(run_context)
        loss, overflow, scale = _outputs(args.net_outputs, step)
        self._overflows += bool(overflow)
        self._epoch.add(loss, scale, updates)
        if self._probe_updates and len(self._update_s) >= self._probe_updates:
            self._end_probe(run_context)
        if should_stop():
            run_context.request_stop()

    def on_train_epoch_end(self, run_context: Any) -> None:
        if not self.enabled or self._probe_updates:  # a probe reports once, at its end
            return
        args = run_context.original_args()
        metrics = {**self._epoch.metrics(), **self._timing(args), **self._counts(run_context)}
        if self.model is not None and self.eval_dataset is not None:
            results = self.model.eval(self.eval_dataset, dataset_sink_mode=False)
            metrics.update({f"eval_{name.lower()}": float(value)
                            for name, value in results.items()})
        report(args.cur_epoch_num, args.cur_step_num, series=self._epoch.series(), **metrics)
        self._epoch = _EpochSeries()
        if should_stop():
            run_context.request_stop()

    def on_train_end(self, run_context: Any) -> None:
        if self.enabled and self._probe_updates:  # a training shorter than the probe
            self._end_probe(run_context)

    def _end_probe(self, run_context: Any) -> None:
        """Report the probe as msexp's own probe does (each update's step_ms, updates,
        overflow_rate), then end the script with exit status 0."""
        args = run_context.original_args()
        counts = self._counts(run_context)
        updates = len(self._update_s)
        series = {**self._epoch.series(), "step_ms": [1000 * s for s in self._update_s]}
        report(args.cur_epoch_num, args.cur_step_num, series=series, **self._epoch.metrics(),
               **self._timing(args), **counts, **_training_updates(args), updates=updates,
               overflow_rate=counts["overflow_steps"] / max(updates, 1))
        raise SystemExit(0)

    def _timing(self, args: Any) -> dict[str, float]:
        """step_ms (the median update, the first one left out: it compiles), compile_s,
        samples_per_s."""
        if not self._update_s:
            return {}
        steady = self._update_s[1:] or self._update_s
        step_s = statistics.median(steady)
        found = {"step_ms": 1000 * step_s, "compile_s": max(0.0, self._update_s[0] - step_s)}
        batch = _batch_size(args)
        if batch:
            found["samples_per_s"] = batch / step_s
        return found

    def _counts(self, run_context: Any) -> dict[str, float]:
        """Memory, overflows, skipped updates and the loss scale, as msexp's loop reports."""
        args, step = run_context.original_args(), _train_step(run_context)
        ours = step if isinstance(step, AccumulatingTrainStep) else None
        found: dict[str, float] = {}
        if self._memory is not None:
            optimizer = ours.optimizer if ours else args.get("optimizer")
            found.update(self._memory.metrics(step, optimizer or step,
                                              ours.accumulation_buffers if ours else ()))
        found["overflow_steps"] = ours.overflow_steps if ours else self._overflows
        if ours:
            found["skipped_updates"] = ours.skipped_updates
        if self._epoch.scales:
            found["loss_scale"] = self._epoch.scales[-1]
        if ours and ours.thor_inverse_s is not None:
            found["thor_inverse_s"] = ours.thor_inverse_s
        return found


class _EpochSeries:
    """One epoch's per-update losses and loss scales."""

    def __init__(self) -> None:
        self.losses: list[float] = []
        self.scales: list[float] = []
        self.one_per_update = True

    def add(self, loss: float | None, scale: float | None, updates: int) -> None:
        self.one_per_update &= updates == 1  # dataset sink mode: a step holds several
        if loss is not None:
            self.losses.append(loss)
        if scale is not None:
            self.scales.append(scale)

    def metrics(self) -> dict[str, float]:
        return loss_metrics(self.losses) if self.losses else {}

    def series(self) -> dict[str, list[float]]:
        """train_loss and loss_scale per update (MLflow's step axis), when each step was
        one update."""
        if not self.one_per_update or not self.losses:
            return {}
        return {"train_loss": self.losses,
                **({"loss_scale": self.scales} if len(self.scales) == len(self.losses) else {})}


def _outputs(outputs: Any, step: Any) -> tuple[float | None, bool, float | None]:
    """(loss, overflow, loss scale) of a step: msexp's train step keeps the scale; MindSpore's
    loss-scaling train step returns (loss, overflow, scale); any other returns a loss."""
    if isinstance(step, nn.TrainOneStepWithLossScaleCell):
        return _number(outputs[0]), bool(_number(outputs[1])), _number(outputs[2])
    if isinstance(outputs, (tuple, list)):
        outputs = outputs[0] if outputs else None
    scale = step.loss_scale if isinstance(step, AccumulatingTrainStep) else None
    return _number(outputs), False, scale


def _number(value: Any) -> float | None:
    if value is None:
        return None
    return float(np.mean(value.asnumpy() if hasattr(value, "asnumpy") else value))


def _train_step(run_context: Any) -> Any:
    args = run_context.original_args()  # a dict whose keys read as attributes
    return args.get("train_network") or args.get("network")


def _batch_size(args: Any) -> int | None:
    dataset = args.get("train_dataset")
    try:
        return int(dataset.get_batch_size()) if dataset is not None else None
    except Exception:  # a dataset without a batch size (unbatched or a generator)
        return None


def _training_updates(args: Any) -> dict[str, float]:
    """The updates of the whole training the probe stands for: Model.train's epochs times
    its steps an epoch, where it says them."""
    epochs, steps = getattr(args, "epoch_num", None), getattr(args, "batch_num", None)
    if isinstance(epochs, int) and isinstance(steps, int) and epochs > 0 and steps > 0:
        return {"training_updates": float(epochs * steps)}
    return {}
