"""What a trial of a sweep is asked to do: the sweep file's sections as a `TrialRequest`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from optuna.trial import FrozenTrial

from msexp.execution.protocol import Checkpointing, Command, TrialRequest
from msexp.keys import TrialKey
from msexp.secrets.redaction import redact_params
from msexp.spec import SweepSpec
from msexp.spec.command import split_command


def trial_request(spec: SweepSpec, params: dict[str, Any], folder: Path,
                  trial: str | None = None, attempt: str | None = None) -> TrialRequest:
    """The request of one trial of `spec` with complete `params`, its files in `folder`;
    `trial` names it, `attempt` is this attempt's token (see `TrialRequest`)."""
    first = spec.objectives[0]
    checkpoint = Checkpointing(spec.checkpoint.every, spec.checkpoint.keep, first.metric,
                               first.direction == "maximize")
    if spec.command is not None:
        command = Command(split_command(str(spec.path), spec.command.command), str(spec.folder),
                          spec.command.args, list(spec.command.metrics), spec.command.switches,
                          list(spec.command.pass_env))
        return TrialRequest(spec.experiment.ref, params, folder, spec.target(), None, command,
                            checkpoint, trial=trial, attempt=attempt)
    return TrialRequest(_experiment_ref(spec.experiment.ref), params, folder, spec.target(),
                        spec.data_section(), checkpoint=checkpoint, cold=spec.budget.cold,
                        trial=trial, attempt=attempt)


def ran_request(spec: SweepSpec, trial: FrozenTrial, folder: Path) -> TrialRequest:
    """The request of a finished `trial` of `spec` as it ran, its files in `folder`: its
    params resolved from the sweep file, or, where the file changed since, those the
    trial kept (`msexp best --export`, the Python API's `Trial.network`)."""
    kept = trial.user_attrs.get(TrialKey.PARAMS)  # redacted
    params = spec.space.resolve(spec.space.assigned(trial.params))
    if kept and redact_params(params) != kept:  # the sweep file changed: as the trial ran
        params = kept
    return trial_request(spec, params, folder)


def _experiment_ref(ref: str) -> str:
    target, sep, attr = ref.partition(":")
    if target.endswith(".py") or "/" in target:
        return str(Path(target).resolve()) + sep + attr
    return ref
