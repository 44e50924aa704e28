"""`run_sweep`: a sweep's parts put together: the study, its trial source, the slots,
the MLflow recorder and the watchers (the pruning bridge, fail fast, then the caller's),
driven by `Sweep`."""

from __future__ import annotations

from collections.abc import Sequence

from msexp.errors import Suggestion
from msexp.execution.host import HostPool
from msexp.execution.process_tree import kill_marked
from msexp.execution.subscribers import Subscriber
from msexp.search.claims import rerun_failed
from msexp.search.driver import Sweep, SweepOutcome
from msexp.search.failfast import FailFast
from msexp.search.pruning import PruningBridge
from msexp.search.source import TrialSource
from msexp.search.storage import storage_label
from msexp.search.study import open_study
from msexp.spec import Method, SweepSpec
from msexp.tracking.recorder import MlflowRecorder


def run_sweep(spec: SweepSpec, watchers: Sequence[Subscriber], hosts: HostPool | None = None,
              tracking_uri: str | None = None, storage_url: str | None = None,
              study_name: str | None = None, rerun: bool = False, restart: bool = False
              ) -> SweepOutcome:
    """Open (or resume) the sweep's study and run its remaining trials; with `rerun`
    (`--retry-failed`), first queue a rerun of each FAILED and TIMEOUT trial of a resumed
    study; with `restart`, start a new version of a study created from another sweep file
    (`search.study.open_study`). `watchers` (a progress display, a notifier) see every
    trial after the recorder, the pruning bridge and fail fast, in their order.

    `hosts` (default: `budget.workers` of them) run the trials and are killed when this
    returns.
    """
    with hosts or HostPool(spec.budget.workers, preload=spec.command is None) as pool:
        return _run(spec, watchers, pool, tracking_uri, storage_url, study_name, rerun,
                    restart)


def _run(spec: SweepSpec, watchers: Sequence[Subscriber], hosts: HostPool,
         tracking_uri: str | None, storage_url: str | None, study_name: str | None,
         rerun: bool, restart: bool) -> SweepOutcome:
    study, created = open_study(spec, storage_url, study_name, restart)
    if rerun:
        rerun_failed(study, storage_url)
    report = Suggestion(("report", str(spec.path)), study=study.study_name,
                        storage=storage_url, tracking_uri=tracking_uri)
    recorder = MlflowRecorder(spec, study, created, tracking_uri, storage_label(storage_url),
                              report, watchers)
    source = TrialSource(study, storage_url, spec.n_trials(), spec.method is not Method.grid,
                         kill_owned=kill_marked)
    return Sweep(spec, study, source, hosts, recorder,
                 [PruningBridge(spec), FailFast(spec), *watchers]).run()
