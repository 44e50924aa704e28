"""Commands that look at a study and its records: status, best, sync (and the study
they find: `existing_study`)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from msexp.cli.mlflow_running import mlflow_running, show_mlflow_running
from msexp.cli.options import (
    OptionalSweepFileArg,
    ReadStudyOpt,
    StorageOpt,
    TrackingOpt,
    console,
)
from msexp.cli.render import (
    cell,
    kv,
    missing_objectives,
    print_json,
)
from msexp.errors import MsexpError
from msexp.keys import StudyKey, TrialKey
from msexp.secrets.redaction import redact, redact_params
from msexp.spec import load_spec, read_name
from msexp.tracking.delivery import flush_spool
from msexp.tracking.runs import CHECKPOINT_ARTIFACTS, Tracker

JsonOpt = Annotated[bool, typer.Option(
    "--json", help="Print one JSON document instead of text, for scripts.")]


def status(
    file: OptionalSweepFileArg = None,
    study: ReadStudyOpt = None,
    storage: StorageOpt = None,
    tracking_uri: TrackingOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a study's progress: trials by state and those running.

    Also the MLflow runs of its experiment that are RUNNING (those a killed `msexp tune`
    left marked).

    --json prints {"study", "finished", "total", "states": {STATE: count}, "running":
    [{"number", "owner", "heartbeat_age_s", "params"}], "missing_objectives",
    "mlflow_running": [{"run_id", "name", "made_by", "left"}]}.

    Example: msexp status sweeps/accum.yaml
    """
    sweep = read_name(file) if file is not None and study is None else None  # a FIFO: once
    try:
        loaded = existing_study(file, study, storage, sweep)
    except MsexpError:
        if sweep is not None:  # a file only tuned has no study: its runs still show
            show_mlflow_running(mlflow_running(sweep, tracking_uri), file)
        raise
    document = _status_document(loaded, tracking_uri)
    running = document["running"]
    if as_json:
        print_json(document)
        return
    console.print(f"{loaded.study_name}: {document['finished']} finished of "
                  f"{document['total'] or '?'}; "
                  + ", ".join(f"{k} {v}" for k, v in sorted(document["states"].items())),
                  highlight=False)
    for r in running:
        age = f", heartbeat {r['heartbeat_age_s']:.0f} s ago" if r["heartbeat_age_s"] else ""
        console.print(f"  running #{r['number']} on {r['owner'] or '?'}{age}: "
                      f"{kv(r['params'])}", highlight=False)
    if document["missing_objectives"]:
        console.print(document["missing_objectives"], markup=False, highlight=False)
    show_mlflow_running(document["mlflow_running"], file)


def _status_document(loaded: Any, tracking_uri: str | None) -> dict[str, Any]:
    """What `status` shows, as data (its --json)."""
    from optuna.trial import TrialState  # lazy: Optuna takes a second to import

    from msexp.search.claims import finished_count, last_heartbeat, owner_of  # lazy: as above
    from msexp.tracking.report import state_counts  # lazy: as above

    running = [{"number": t.number, "owner": owner_of(t) or None,
                "heartbeat_age_s": _age(last_heartbeat(t)),
                "params": t.params}
               for t in loaded.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
    return {"study": loaded.study_name, "finished": finished_count(loaded),
            "total": loaded.user_attrs.get(StudyKey.TOTAL), "states": state_counts(loaded),
            "running": running, "missing_objectives": missing_objectives(loaded),
            "mlflow_running": mlflow_running(loaded.user_attrs.get(StudyKey.SWEEP)
                                             or loaded.study_name, tracking_uri)}


def _age(beat: float | None) -> float | None:
    return time.time() - beat if beat else None


def best(
    file: Annotated[Path, typer.Argument(help="The sweep file.", show_default=False)],
    study: ReadStudyOpt = None,
    storage: StorageOpt = None,
    tracking_uri: TrackingOpt = None,
    export: Annotated[Optional[Path], typer.Option(
        "--export", help="Write the best trial's checkpoint, params.json and (where the "
                         "network exports) a MindIR into this folder.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Show the best trial or Pareto set: params, run, checkpoint.

    --json prints {"study", "best": [{"number", "values", "params", "run_id", "run_url",
    "checkpoint"}]}, and with --export also "exported": {"written", "no_mindir"}.

    Example: msexp best sweeps/accum.yaml --export best-model/
    """
    spec = load_spec(file, local=export is not None)  # only an export builds the model
    loaded = existing_study(file, study, storage)
    from msexp.tracking.report import best_trials  # lazy: Optuna takes a second to import

    chosen = best_trials(loaded)
    if not chosen:
        raise MsexpError(f"{file}: no trial of study {loaded.study_name!r} completed yet")
    names = [o.metric for o in spec.objectives]
    linked = any(_run_of(t) for t in chosen)  # runs still spooled have no link: no MLflow
    tracker = Tracker(tracking_uri) if export is None and linked else None
    found = [_best_document(t, names, tracker, spec.name) for t in chosen]
    exported = _export(spec, loaded, chosen[0], export, tracking_uri) \
        if export is not None else None
    if as_json:
        print_json({"study": loaded.study_name, "best": found,
                    **({"exported": exported} if exported is not None else {})})
        return
    for t in found:
        console.print(f"trial {t['number']}: " + ", ".join(
            f"{name}={cell(value)}" for name, value in t["values"].items()), highlight=False)
        console.print(f"  params: {kv(t['params'])}", highlight=False)
        console.print(f"  MLflow run: {t['run_id'] or '-'}", highlight=False)
        if t["run_url"]:
            console.print(f"  {t['run_url']}", highlight=False)
        console.print(f"  checkpoint: {t['checkpoint'] or '(none kept)'}", highlight=False)
    if exported is not None:
        for path in exported["written"]:
            console.print(f"wrote {path}", highlight=False)
        if exported["no_mindir"]:
            console.print(f"no MindIR: {exported['no_mindir']}", highlight=False)


def _best_document(trial: Any, names: list[str], tracker: Tracker | None,
                   experiment: str) -> dict[str, Any]:
    """A best trial as data: its objective values, params, MLflow run (and its link where
    `tracker`) and checkpoint."""
    attrs = trial.user_attrs
    run_id = attrs.get(TrialKey.RUN_ID)
    url = None
    if tracker is not None and _run_of(trial):
        url = redact(tracker.ui_links(tracker.experiment_id(experiment), run_id)[1])
    return {"number": trial.number, "values": dict(zip(names, trial.values)),
            "params": attrs.get(TrialKey.PARAMS, trial.params), "run_id": run_id,
            "run_url": url, "checkpoint": attrs.get(TrialKey.CHECKPOINT)}


def _run_of(trial: Any) -> str | None:
    """The trial's MLflow run id; None where it has none yet (its record spooled)."""
    run_id = trial.user_attrs.get(TrialKey.RUN_ID)
    return run_id if run_id and run_id != "spooled" else None


def _export(spec: Any, loaded: Any, chosen: Any, folder: Path,
            tracking_uri: str | None) -> dict[str, Any]:
    checkpoint = chosen.user_attrs.get(TrialKey.CHECKPOINT)
    if not checkpoint:
        raise MsexpError(f"trial {chosen.number} kept no checkpoint (checkpoint.keep none?); "
                         "nothing to export")
    if Path(checkpoint).is_file():
        return _export_from(spec, loaded, chosen, folder, Path(checkpoint))
    with tempfile.TemporaryDirectory(prefix="msexp-") as scratch:  # the run's copy, fetched
        copy = _logged_copy(chosen, Path(checkpoint).name, tracking_uri, Path(scratch))
        return _export_from(spec, loaded, chosen, folder, copy)


def _logged_copy(chosen: Any, name: str, tracking_uri: str | None, scratch: Path) -> Path:
    """The copy of the trial's checkpoint logged on its MLflow run, downloaded."""
    run_id = chosen.user_attrs.get(TrialKey.RUN_ID)
    gone = f"trial {chosen.number}'s checkpoint {chosen.user_attrs[TrialKey.CHECKPOINT]} is gone"
    if not run_id or run_id == "spooled":
        raise MsexpError(f"{gone}, and the trial has no MLflow run yet; nothing to export")
    tracker = Tracker(tracking_uri)
    try:
        return Path(tracker.client.download_artifacts(
            run_id, f"{CHECKPOINT_ARTIFACTS}/{name}", str(scratch)))
    except Exception:  # not logged (checkpoint.log none), or the store lost it
        raise MsexpError(f"{gone}, and its MLflow run {run_id} has no copy of it (checkpoint."
                         "log none?); nothing to export") from None


def _export_from(spec: Any, loaded: Any, chosen: Any, folder: Path, checkpoint: Path
                 ) -> dict[str, Any]:
    from msexp.execution.export import export_model  # lazy: MindSpore
    from msexp.search.requests import ran_request

    request = ran_request(spec, chosen, folder)
    record = {"study": loaded.study_name, "trial": chosen.number,
              "experiment": redact(spec.experiment.ref),
              "params": redact_params(request.params),
              "metrics": chosen.user_attrs.get(TrialKey.METRICS, {})}
    written, no_mindir = export_model(request, checkpoint, folder, record)
    return {"written": [str(path) for path in written], "no_mindir": no_mindir or None}


def existing_study(file: Path | None, study: str | None, storage: str | None,
                   sweep: str | None = None) -> Any:
    """The study a read command reads (`search.existing.existing_study`, which the Python
    API's `load_sweep` calls too)."""
    from msexp.search.existing import existing_study as found  # lazy: Optuna, a second

    return found(file, study, storage, sweep)


def sync(tracking_uri: TrackingOpt = None) -> None:
    """Deliver results kept on disk while MLflow was unreachable.

    Also ends the parent runs of the sweeps that finished meanwhile.

    Example: msexp sync --tracking-uri http://mlflow.internal:5000
    """
    tracker = Tracker(tracking_uri)
    delivered = flush_spool(tracker)
    left = len(tracker.spool.files()) + len(tracker.spool.ending_files())
    console.print(f"delivered {delivered} trial(s) to {redact(tracker.uri)}; {left} still waiting")
    if left:
        raise typer.Exit(1)
