"""A trial's trained model, loaded from its checkpoint by the code `msexp best --export`
loads it with (`search.requests.ran_request`, `execution.export.trained_workload`)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import optuna

from msexp.api.trials import Trial
from msexp.errors import MsexpError
from msexp.execution.export import trained_workload
from msexp.experiment import Workload
from msexp.search.requests import ran_request
from msexp.spec import SweepSpec


def trained(spec: SweepSpec, study: optuna.Study, trial: Trial) -> Workload:
    """The workload of `trial` (a trial of `study`, swept from `spec`) with its network's
    weights loaded from the trial's checkpoint.

    Raises:
        MsexpError: a command experiment, no checkpoint kept, or not on this machine.
    """
    if spec.command is not None:
        raise MsexpError(f"{spec.path}: a command's network is its own: msexp cannot build "
                         f"it (trial {trial.number}'s checkpoint: {trial.checkpoint})")
    if trial.checkpoint is None:
        raise MsexpError(f"trial {trial.number} kept no checkpoint (checkpoint.keep none?)")
    if not trial.checkpoint.is_file():
        raise MsexpError(f"trial {trial.number}'s checkpoint {trial.checkpoint} is not on "
                         "this machine; `msexp best FILE --export DIR` fetches the copy "
                         "logged on its MLflow run")
    frozen = study.get_trials(deepcopy=False)[trial.number]
    folder = Path(tempfile.mkdtemp(prefix="msexp-model-"))  # what building it may write
    return trained_workload(ran_request(spec, frozen, folder), trial.checkpoint)
