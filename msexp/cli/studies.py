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
    optuna_to_log,
)
from msexp.cli.render import (
    cell,
    kv,
    missing_objectives,
    print_json,
)
from msexp.errors import MsexpError, SpecError, Suggestion
from msexp.keys import StudyKey, TrialKey
from msexp.paths import JOURNAL
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
    tracker = Tracker(tracking_uri) if export is None else None  # exporting needs no MLflow
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
    if tracker is not None and run_id and run_id != "spooled":
        url = redact(tracker.ui_links(tracker.experiment_id(experiment), run_id)[1])
    return {"number": trial.number, "values": dict(zip(names, trial.values)),
            "params": attrs.get(TrialKey.PARAMS, trial.params), "run_id": run_id,
            "run_url": url, "checkpoint": attrs.get(TrialKey.CHECKPOINT)}


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
    from msexp.search.requests import trial_request

    kept = chosen.user_attrs.get(TrialKey.PARAMS)  # redacted
    params = spec.space.resolve(spec.space.assigned(chosen.params))
    if kept and redact_params(params) != kept:  # the sweep file changed: as the trial ran
        params = kept
    request = trial_request(spec, params, folder)
    record = {"study": loaded.study_name, "trial": chosen.number,
              "experiment": redact(spec.experiment.ref), "params": redact_params(params),
              "metrics": chosen.user_attrs.get(TrialKey.METRICS, {})}
    written, no_mindir = export_model(request, checkpoint, folder, record)
    return {"written": [str(path) for path in written], "no_mindir": no_mindir or None}


def existing_study(file: Path | None, study: str | None, storage: str | None,
                   sweep: str | None = None) -> Any:
    """The study `--study` names, else the newest version of the sweep's (named `sweep`,
    else read from `file`). A read command makes no store: where the storage is a file
    that does not exist, or holds no such study, it says to sweep first."""
    import optuna  # lazy: Optuna takes a second to import

    from msexp.search.storage import (  # lazy: as above
        open_storage,
        storage_errors,
        storage_label,
    )
    from msexp.search.versions import newest_name  # lazy: as above

    optuna_to_log()
    if file is None and study is None:
        raise SpecError("msexp", "", "give a sweep file or --study NAME", show_value=False)
    name = study or sweep or read_name(file)
    if not _store_file_exists(storage):
        raise _never_swept(name, study, storage, file)
    try:
        with storage_errors(storage):
            opened = open_storage(storage)
            if study is None:  # the sweep's newest version (see `msexp sweep --restart`)
                name = newest_name(opened, name)
            return optuna.load_study(study_name=name, storage=opened)
    except KeyError:
        raise _never_swept(name, study, storage, file, storage_label(storage)) from None


def _never_swept(name: str, study: str | None, storage: str | None, file: Path | None,
                 label: str | None = None) -> MsexpError:
    """`no study named 'x' in STORE: run `msexp sweep FILE` first` (with --study and
    --storage where a copy needs them)."""
    where = label or (storage or str(JOURNAL))
    if file is None:
        return MsexpError(f"no study named {name!r} in {redact(where)}")
    return MsexpError(f"no study named {name!r} in {redact(where)}: run `",
                      Suggestion(("sweep", str(file)), study, storage), "` first")


def _store_file_exists(storage: str | None) -> bool:
    """Whether the Optuna storage exists where it is a file (the journal, SQLite): opening
    one that does not would make it. Other storages are taken to exist."""
    if storage is None or storage.endswith(".journal"):
        return Path(storage or JOURNAL).exists()
    prefix = "sqlite:///"
    if storage.startswith(prefix) and storage[len(prefix):] not in ("", ":memory:"):
        return Path(storage[len(prefix):]).exists()
    return True


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
