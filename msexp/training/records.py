"""What the training loop reports, without importing MindSpore: epochs, targets, endings."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


class Diverged(RuntimeError):
    """The loss or the weights became NaN/inf."""


class Stopped(RuntimeError):
    """The orchestrator asked the trial to stop (pruning)."""


@dataclass(frozen=True)
class Target:
    """Stop the clock when `metric` reaches `value` (epochs_to_target, time_to_target_s)."""

    metric: str
    value: float
    maximize: bool

    def reached(self, metrics: dict[str, float]) -> bool:
        got = metrics.get(self.metric)
        if got is None:
            return False
        return got >= self.value if self.maximize else got <= self.value


@dataclass(frozen=True)
class Probe:
    """A short trial that measures instead of training to the end (`msexp tune`): stop
    after `updates` optimizer updates, evaluate nothing. With `lr_high` > 0, the learning
    rate grows exponentially from `lr_low` to `lr_high` over those updates (an lr range
    test), and a non-finite loss ends the probe instead of failing it."""

    updates: int
    lr_low: float = 0.0
    lr_high: float = 0.0


@dataclass
class Epoch:
    """One finished epoch: its eval metrics and the per-update series (train_loss, ...)."""

    epoch: int
    step: int
    elapsed_s: float
    metrics: dict[str, float]
    series: dict[str, list[float]] = field(default_factory=dict)


def loss_metrics(losses: list[float]) -> dict[str, float]:
    """An epoch's two loss figures, one name each, for every kind of trial: `train_loss` is
    its last finite update's loss (the per-update series' last point, as MLflow shows it, and
    what a script's last `LossMonitor` line says), `train_loss_epoch` the mean of its finite
    update losses. Both NaN when no update was finite."""
    finite = [float(v) for v in losses if math.isfinite(v)]
    if not finite:
        return {"train_loss": math.nan, "train_loss_epoch": math.nan}
    return {"train_loss": finite[-1], "train_loss_epoch": sum(finite) / len(finite)}


@dataclass(frozen=True)
class BatchStatistics:
    """A trial's network holds `layers` layers that normalise with batch statistics in
    train mode and `dropout` layers that draw a random mask per call (Dropout), and each
    sees micro-batches of `micro_batch` samples of a `batch` (`training/batch_stats`)."""

    layers: int
    micro_batch: int
    batch: int
    dropout: int = 0
    seeded: int = 0  # nn.Dropout layers whose masks msexp draws: they split with the batch

    @property
    def exact(self) -> bool:
        """Whether they see the whole batch (micro_size 1): accumulation changes nothing."""
        return self.micro_batch >= self.batch

    def line(self) -> str:
        """What changes, in one line (docs/how-a-trial-runs.md: batch statistics)."""
        said = []
        if self.layers:
            said.append(f"batch statistics: {self.layers} BatchNorm layer(s) normalise each "
                        f"micro-batch of {self.micro_batch} samples by its own mean and "
                        f"variance, not the batch of {self.batch}, and update their moving "
                        "statistics once per micro-batch")
        if self.dropout:
            said.append(f"dropout: {self.dropout} Dropout layer(s) draw a mask per "
                        f"micro-batch of {self.micro_batch} samples, not one for the batch "
                        f"of {self.batch}: equal to the full-batch update only in "
                        "distribution")
        if not said:
            return self.seeded_line()
        return "; ".join(said) + ": the update is not the full-batch one"

    def seeded_line(self) -> str:
        """What msexp's seeded Dropout masks do (docs/how-a-trial-runs.md: dropout)."""
        return (f"dropout: {self.seeded} nn.Dropout layer(s) draw msexp's seeded masks (a "
                "seeded trial repeats; MindSpore's CPU Dropout does not), each micro-batch of "
                f"{self.micro_batch} samples the rows of the batch of {self.batch}'s mask: the "
                "update is the full-batch one where a layer's input has the batch first")
