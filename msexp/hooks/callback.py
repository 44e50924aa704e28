"""`MsexpCallback`: one line in `Model.train`'s callbacks reports each epoch to msexp."""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np
from mindspore.train import Callback

from msexp.hooks.channel import active, report, should_stop
from msexp.training.memory import PeakMemory


class MsexpCallback(Callback):
    """Reports each epoch of `Model.train` (train_loss, step_ms, samples_per_s, peak_mem_mb
    and, given the model and an eval dataset, the model's own metrics as `eval_<name>`)
    and stops training cleanly when msexp prunes the trial. Outside msexp it does nothing.

    Args:
        model: the `Model` being trained, to evaluate after each epoch.
        eval_dataset: the dataset `model.eval` runs on after each epoch.
    """

    def __init__(self, model: Any = None, eval_dataset: Any = None):
        super().__init__()
        self.model, self.eval_dataset = model, eval_dataset
        self.enabled = active()
        self._losses: list[float] = []
        self._step_s: list[float] = []
        self._began = 0.0
        self._memory: PeakMemory | None = None

    def on_train_begin(self, run_context: Any) -> None:
        if self.enabled:
            self._memory = PeakMemory()

    def on_train_step_begin(self, run_context: Any) -> None:
        if self.enabled:
            self._began = time.perf_counter()

    def on_train_step_end(self, run_context: Any) -> None:
        if not self.enabled:
            return
        self._step_s.append(time.perf_counter() - self._began)
        loss = run_context.original_args().net_outputs
        if isinstance(loss, (tuple, list)):
            loss = loss[0]
        self._losses.append(float(np.mean(loss.asnumpy() if hasattr(loss, "asnumpy") else loss)))
        if should_stop():
            run_context.request_stop()

    def on_train_epoch_end(self, run_context: Any) -> None:
        if not self.enabled:
            return
        args = run_context.original_args()
        metrics: dict[str, float] = {}
        if self._losses:
            metrics["train_loss"] = float(np.mean(self._losses))
        steady = self._step_s[1:] or self._step_s
        if steady:
            metrics["step_ms"] = 1000 * statistics.median(steady)
            batch = _batch_size(args)
            if batch:
                metrics["samples_per_s"] = batch * len(steady) / sum(steady)
        if self._memory is not None:
            metrics["peak_mem_mb"] = self._memory.peak_mb()
        if self.model is not None and self.eval_dataset is not None:
            results = self.model.eval(self.eval_dataset, dataset_sink_mode=False)
            metrics.update({f"eval_{name.lower()}": float(value)
                            for name, value in results.items()})
        report(args.cur_epoch_num, args.cur_step_num, **metrics)
        self._losses, self._step_s = [], []
        if should_stop():
            run_context.request_stop()


def _batch_size(args: Any) -> int | None:
    dataset = getattr(args, "train_dataset", None)
    try:
        return int(dataset.get_batch_size()) if dataset is not None else None
    except Exception:  # a dataset without a batch size (unbatched or a generator)
        return None
