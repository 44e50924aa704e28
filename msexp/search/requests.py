"""What a trial of a sweep is asked to do: the sweep file's sections as a `TrialRequest`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from msexp.execution.protocol import Checkpointing, Command, TrialRequest
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


def _experiment_ref(ref: str) -> str:
    target, sep, attr = ref.partition(":")
    if target.endswith(".py") or "/" in target:
        return str(Path(target).resolve()) + sep + attr
    return ref
