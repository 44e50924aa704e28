"""The pruning bridge: each epoch's objective goes to Optuna's pruner, which may stop
the trial."""

from __future__ import annotations

import math

from msexp.execution.protocol import Epoch
from msexp.execution.subscribers import CONTINUE, PRUNE, Decision, Subscriber, TrialInfo
from msexp.spec import SweepSpec


class PruningBridge(Subscriber):
    """Reports the first objective of each epoch to the trial, for the study's pruner;
    decides PRUNE when the pruner stops it."""

    def __init__(self, spec: SweepSpec):
        self.enabled = spec.pruner.type != "none"
        self.metric = spec.objectives[0].metric

    def on_trial_epoch(self, trial: TrialInfo, epoch: Epoch) -> Decision:
        value = epoch.metrics.get(self.metric)
        if not self.enabled or value is None or not math.isfinite(value) or \
                trial.handle is None:
            return CONTINUE
        trial.handle.report(value, epoch.epoch)
        return PRUNE if trial.handle.should_prune() else CONTINUE
