"""One trial of a study as the Python API gives it, and the trials as a pandas DataFrame:
one row per trial, every metric under its one meaning (docs/sweep-file.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Union

from optuna.trial import FrozenTrial

from msexp.keys import TrialKey
from msexp.tracking.effects import EFFECT_METRICS
from msexp.tracking.replicates import SEED
from msexp.trial_folder import trial_folder

if TYPE_CHECKING:
    import pandas

Value = Union[str, int, float, bool, None]
FIXED_COLUMNS = ("number", "status")
RECORD_COLUMNS = ("feasible", "run_id", "folder", "checkpoint", "error")


@dataclass(frozen=True)
class Trial:
    """A trial as it ran.

    Attributes:
        number: its number in the study (`trial-NNNN` its folder).
        status: COMPLETE, PRUNED, FAILED, TIMEOUT (msexp's), or RUNNING, WAITING.
        params: its swept knobs (the replicate seed aside).
        seed: the seed it ran with.
        values: its objective values, in the sweep's order (empty unless COMPLETE).
        metrics: its final metrics, each under its one meaning (`train_loss`: the last
            update's loss; `train_loss_epoch`: the last epoch's mean).
        feasible: whether it kept the sweep's constraints (None: not judged).
        run_id: its MLflow run ("spooled": waiting for MLflow in mlruns/spool/).
        folder: its folder (log, events, checkpoints), where this machine has it.
        checkpoint: the checkpoint it kept, if any.
        error: why it failed, if it did.
        all_params: every param it ran with, resolved (a secret's value redacted).
    """

    number: int
    status: str
    params: dict[str, Value]
    seed: int | None
    values: tuple[float, ...]
    metrics: dict[str, float]
    feasible: bool | None
    run_id: str | None
    folder: Path | None
    checkpoint: Path | None
    error: str | None
    all_params: dict[str, Value] = field(default_factory=dict)


def trial_of(frozen: FrozenTrial, study_name: str) -> Trial:
    """The API's view of an Optuna trial of study `study_name`."""
    attrs = frozen.user_attrs
    every = dict(attrs.get(TrialKey.PARAMS) or frozen.params)
    seed = frozen.params.get(SEED, every.get(SEED))
    folder = trial_folder(study_name, frozen.number).resolve()
    checkpoint = attrs.get(TrialKey.CHECKPOINT)
    status = attrs.get(TrialKey.STATUS, frozen.state.name) if frozen.state.is_finished() \
        else frozen.state.name
    return Trial(frozen.number, status,
                 {k: v for k, v in frozen.params.items() if k != SEED},
                 int(seed) if isinstance(seed, (int, float)) else None,
                 tuple(frozen.values or ()) if frozen.state.name == "COMPLETE" else (),
                 {k: float(v) for k, v in attrs.get(TrialKey.METRICS, {}).items()
                  if isinstance(v, (int, float))},
                 attrs.get(TrialKey.FEASIBLE), attrs.get(TrialKey.RUN_ID),
                 folder if folder.is_dir() else None,
                 Path(checkpoint) if checkpoint else None, attrs.get(TrialKey.ERROR), every)


def trials_frame(trials: list[Trial], objectives: list[str]) -> pandas.DataFrame:
    """One row per trial: number, status, the swept knobs, seed, the objective value(s)
    (`value`, or `value_<metric>` for several), the metrics (the objectives' first, then
    msexp's own, then the rest by name), feasible, run_id, folder, checkpoint, error."""
    import pandas  # lazy: pandas takes a second to import

    knobs = list(dict.fromkeys(k for t in trials for k in t.params))
    metrics = _metric_order({m for t in trials for m in t.metrics}, objectives)
    value_names = ["value"] if len(objectives) == 1 else [f"value_{m}" for m in objectives]
    rows = [_row(t, knobs, value_names, metrics) for t in trials]
    columns = [*FIXED_COLUMNS, *knobs, SEED, *value_names,
               *(_metric_column(m, knobs) for m in metrics), *RECORD_COLUMNS]
    return pandas.DataFrame(rows, columns=columns)


def _row(trial: Trial, knobs: list[str], value_names: list[str], metrics: list[str]
         ) -> list[Value]:
    values = list(trial.values) or [math.nan] * len(value_names)
    return [trial.number, trial.status, *(trial.params.get(k) for k in knobs), trial.seed,
            *values, *(trial.metrics.get(m, math.nan) for m in metrics), trial.feasible,
            trial.run_id, str(trial.folder) if trial.folder else None,
            str(trial.checkpoint) if trial.checkpoint else None, trial.error]


def _metric_order(found: set[str], objectives: list[str]) -> list[str]:
    first = [m for m in [*objectives, *EFFECT_METRICS] if m in found]
    return list(dict.fromkeys([*first, *sorted(found)]))


def _metric_column(metric: str, knobs: list[str]) -> str:
    """A metric's column: its name, unless a knob has it (then `metric_<name>`)."""
    taken = {*knobs, *FIXED_COLUMNS, *RECORD_COLUMNS, SEED}
    return f"metric_{metric}" if metric in taken else metric
