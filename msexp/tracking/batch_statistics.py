"""Batch statistics in a study's findings: a knob that splits the batch (micro_size,
devices) moves loss and accuracy on a network with BatchNorm through each part's own
statistics, not through accumulation, which is exact without them."""

from __future__ import annotations

from optuna.trial import FrozenTrial

from msexp.keys import TrialKey
from msexp.training.records import BatchStatistics

SPLITS = ("micro_size", "devices")  # knobs that split the batch BatchNorm layers normalise


def batch_statistic_layers(trials: list[FrozenTrial]) -> int:
    """How many BatchNorm layers the trials' network holds, as the trials reported it."""
    return max((t.user_attrs.get(TrialKey.BATCH_STATISTICS, {}).get("layers", 0)
                for t in trials), default=0)


def batch_statistics_note(layers: int, knobs: list[str]) -> str:
    """Why a knob that splits the batch moves accuracy and loss on a network with
    BatchNorm: not accumulation, which is exact, but each part's own statistics."""
    return (f"{' and '.join(knobs)}: the network has {layers} BatchNorm layer(s), which "
            "normalise each micro-batch by its own mean and variance; the effects of "
            f"{' and '.join(knobs)} on loss and accuracy are those batch statistics, not an "
            "accumulation defect (accumulation is exact without them: "
            "docs/how-a-trial-runs.md#batch-statistics)")


def split_cause(ours: BatchStatistics | None, theirs: BatchStatistics | None) -> str:
    """Why an objective moved between two trainings that split a BatchNorm network's batch
    differently (" (batch statistics: ...)"), or "" where they do not."""
    if ours is None or theirs is None or ours.micro_batch == theirs.micro_batch:
        return ""
    return (f" (batch statistics: its {ours.layers} BatchNorm layer(s) normalise micro-batches "
            f"of {ours.micro_batch}, the baseline's {theirs.micro_batch}; not an accumulation "
            "defect)")
