"""The pruning bridge: each epoch's objective goes to Optuna's pruner, which may stop
the trial."""

from __future__ import annotations

import math

from msexp.execution.protocol import Epoch
from msexp.execution.subscribers import Subscriber, TrialInfo
from msexp.spec import SweepSpec


class PruningBridge(Subscriber):
    """Reports the first objective of each epoch to the trial, for the study's pruner."""

    def __init__(self, spec: SweepSpec):
        self.enabled = spec.pruner.type != "none"
        self.metric = spec.objectives[0].metric
        self.pruned: set[int] = set()

    def on_trial_epoch(self, trial: TrialInfo, epoch: Epoch) -> None:
        value = epoch.metrics.get(self.metric)
        if not self.enabled or value is None or not math.isfinite(value):
            return
        trial.handle.report(value, epoch.epoch)
        if trial.handle.should_prune():
            self.pruned.add(trial.number)

    def on_trial_end(self, trial: TrialInfo, result: object) -> None:
        self.pruned.discard(trial.number)

    def should_stop(self, trial: TrialInfo) -> bool:
        """Whether the pruner stopped the trial."""
        return trial.number in self.pruned
