"""A sweep in its slots: the one body of `msexp sweep`, `msexp worker` and the Python
API's `msexp.sweep`. The hosts start first (MindSpore imports there), then the study
opens and its trials run while the watchers (a progress display) see them."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, ExitStack
from typing import TYPE_CHECKING

from msexp.console.library_warnings import optuna_to_log
from msexp.execution.host import HostPool
from msexp.execution.subscribers import Subscriber
from msexp.spec import SweepSpec

if TYPE_CHECKING:
    from msexp.search.driver import SweepOutcome


def run_in_slots(spec: SweepSpec, workers: int, watchers: Sequence[Subscriber],
                 tracking_uri: str | None,
                 storage: str | None, study: str | None, rerun: bool = False,
                 restart: bool = False, warn: Callable[[str], None] = print
                 ) -> SweepOutcome:
    """Run the sweep's trials in `workers` slots (each a host process), seen by `watchers`
    (those that are context managers, a progress display, entered while they run); see
    `run_sweep`.

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
        with ExitStack() as shown:
            for watcher in watchers:
                if isinstance(watcher, AbstractContextManager):
                    shown.enter_context(watcher)
            return run_sweep(spec, watchers, hosts, tracking_uri, storage, study, rerun,
                             restart)
