"""A sweep in its slots: the one body of `msexp sweep`, `msexp worker` and the Python
API's `msexp.sweep`. The hosts start first (MindSpore imports there), then the study
opens and its trials run while `progress` shows them."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable

from msexp.execution.host import HostPool
from msexp.library_warnings import optuna_to_log
from msexp.spec import SweepSpec

if TYPE_CHECKING:
    from msexp.search.driver import SweepOutcome


def run_in_slots(spec: SweepSpec, workers: int, progress: Any, tracking_uri: str | None,
                 storage: str | None, study: str | None, rerun: bool = False,
                 restart: bool = False, warn: Callable[[str], None] = print
                 ) -> SweepOutcome:
    """Run the sweep's trials in `workers` slots (each a host process), showing `progress`
    (a `Subscriber` that is a context manager) while they run; see `run_sweep`.

    No more slots start than the sweep has trials; more slots than CPU cores get a
    warning, said through `warn`.
    """
    workers = min(workers, spec.n_trials())
    cores = os.cpu_count() or 1
    if workers > cores:
        warn(f"warning: {workers} workers on {cores} CPU cores: trials compete for the "
             "cores and each gets one thread")
    with HostPool(workers, preload=spec.command is None) as hosts:  # MindSpore imports there
        from msexp.search.sweep import run_sweep  # lazy: Optuna and MLflow import meanwhile

        optuna_to_log()
        with progress:
            return run_sweep(spec, progress, hosts, tracking_uri, storage, study, rerun,
                             restart)
