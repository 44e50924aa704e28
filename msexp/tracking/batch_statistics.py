"""Batch statistics and dropout in a study's findings: a knob that splits the batch
(micro_size, devices) moves loss and accuracy on a network with BatchNorm through each
part's own statistics, and on a network with Dropout through each part's own mask, not
through accumulation, which is exact without them."""

from __future__ import annotations

from optuna.trial import FrozenTrial

from msexp.keys import TrialKey
from msexp.training.records import BatchStatistics

SPLITS = ("micro_size", "devices")  # knobs that split the batch those layers see
_DOCS = {"BatchNorm": "docs/how-a-trial-runs.md#batch-statistics",
         "Dropout": "docs/how-a-trial-runs.md#dropout"}
_WHAT = {"BatchNorm": "normalise each micro-batch by its own mean and variance",
         "Dropout": "draw a mask per micro-batch (equal to the full batch's update only in "
                    "distribution)"}
_LABEL = {"BatchNorm": "batch statistics", "Dropout": "dropout"}


def inexact_layers(trials: list[FrozenTrial]) -> dict[str, int]:
    """How many BatchNorm and Dropout layers the trials' network holds, as the trials
    reported it: {"BatchNorm": 20, "Dropout": 2}, the kinds it has."""
    told = [t.user_attrs.get(TrialKey.BATCH_STATISTICS, {}) for t in trials]
    counts = {"BatchNorm": max((s.get("layers", 0) for s in told), default=0),
              "Dropout": max((s.get("dropout", 0) for s in told), default=0)}
    return {kind: n for kind, n in counts.items() if n}


def split_label(layers: dict[str, int]) -> str:
    """" (batch statistics, dropout)": what moves a knob's effect that splits the batch."""
    return f" ({', '.join(_LABEL[kind] for kind in layers)})" if layers else ""


def batch_statistics_note(layers: dict[str, int], knobs: list[str]) -> str:
    """Why a knob that splits the batch moves accuracy and loss on a network with
    BatchNorm or Dropout: not accumulation, which is exact, but each part's own statistics
    or mask."""
    names = " and ".join(knobs)
    has = " and ".join(f"{n} {kind} layer(s), which {_WHAT[kind]}" for kind, n in layers.items())
    return (f"{names}: the network has {has}; the effects of {names} on loss and accuracy are "
            "theirs, not an accumulation defect (accumulation is exact without them: "
            f"{', '.join(_DOCS[kind] for kind in layers)})")


def split_cause(ours: BatchStatistics | None, theirs: BatchStatistics | None) -> str:
    """Why an objective moved between two trainings that split a BatchNorm or Dropout
    network's batch differently (" (batch statistics: ...)"), or "" where they do not."""
    if ours is None or theirs is None or ours.micro_batch == theirs.micro_batch:
        return ""
    said = []
    if ours.layers:
        said.append(f"batch statistics: its {ours.layers} BatchNorm layer(s) normalise "
                    f"micro-batches of {ours.micro_batch}, the baseline's {theirs.micro_batch}")
    if ours.dropout:
        said.append(f"dropout: its {ours.dropout} Dropout layer(s) draw a mask per micro-batch "
                    f"of {ours.micro_batch}, the baseline's {theirs.micro_batch}")
    return f" ({'; '.join(said)}; not an accumulation defect)" if said else ""
