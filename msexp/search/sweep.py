"""`run_sweep`: a sweep's parts put together: the study, its trial source, the slots,
the MLflow recorder and the watchers, driven by `Sweep`."""

from __future__ import annotations

from msexp import hints
from msexp.execution.host import Host, start_hosts
from msexp.execution.slots import Slots
from msexp.execution.subscribers import Subscriber
from msexp.search.driver import Sweep, SweepOutcome
from msexp.search.source import TrialSource
from msexp.search.storage import storage_label
from msexp.search.study import open_study, retry_failed
from msexp.spec import Method, SweepSpec
from msexp.tracking.recorder import MlflowRecorder


def run_sweep(spec: SweepSpec, progress: Subscriber, hosts: list[Host] | None = None,
              tracking_uri: str | None = None, storage_url: str | None = None,
              study_name: str | None = None, retry: bool = False, restart: bool = False
              ) -> SweepOutcome:
    """Open (or resume) the sweep's study and run its remaining trials; with `retry`, first
    queue the FAILED and TIMEOUT trials of a resumed study again; with `restart`, start a
    new version of a study created from another sweep file (`search.study.open_study`).

    `hosts` (see `execution.host.start_hosts`, default: `budget.workers` of them) run the
    trials and are killed when this returns.
    """
    hosts = hosts or start_hosts(spec.budget.workers)
    try:
        study, created = open_study(spec, storage_url, study_name, restart)
        if retry:
            retry_failed(study, storage_url)
    except BaseException:
        for host in hosts:
            host.kill()
        raise
    report = hints.command("report", spec.path, study=study.study_name, storage=storage_url,
                           tracking_uri=tracking_uri)
    recorder = MlflowRecorder(spec, study, created, tracking_uri, storage_label(storage_url),
                              report)
    source = TrialSource(study, storage_url, spec.n_trials(), spec.method is not Method.grid)
    return Sweep(spec, study, source, Slots(hosts), recorder, [progress]).run()
