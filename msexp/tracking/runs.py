"""MLflow recording: one parent run per sweep, one nested child run per trial."""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msexp.errors import MsexpError
from msexp.execution.exits import space_note
from msexp.execution.result import Status, TrialResult
from msexp.keys import RunTag
from msexp.knobs import RESOLVED
from msexp.os_tools.locking import flock
from msexp.paths import DEFAULT_TRACKING_URI, STORE_DIR
from msexp.secrets.redaction import known_secrets, redact, redact_known, redact_value
from msexp.tracking.run_content import (
    dataset_input,
    in_batches,
    param_text,
    redacted_tags,
    run_metrics,
    run_params,
    run_tags,
)
from msexp.tracking.spool import Spool
from msexp.tracking.store import create_sqlite_store
from msexp.trial_folder import trial_name

if TYPE_CHECKING:
    from mlflow import MlflowClient

_log = logging.getLogger("msexp")
EXPERIMENT_KIND = "mlflow.experimentKind"  # MLflow 3's UI opens this kind's view
MODEL_TRAINING = "custom_model_development"
CHECKPOINT_ARTIFACTS = "checkpoint"  # where a trial's kept model goes in its run
UI_PORT = 5000
# MLflow 3.17's UI picks its GenAI or model-training view from the browser (this URL
# parameter, else localStorage, default GenAI), no longer from EXPERIMENT_KIND
UI_TRAINING_VIEW = "?workflowType=machine_learning"

_RUN_STATUS = {Status.COMPLETE: "FINISHED", Status.PRUNED: "KILLED",
               Status.FAILED: "FAILED", Status.TIMEOUT: "FAILED"}


def tracking_uri(override: str | None = None) -> str:
    """--tracking-uri, else MLFLOW_TRACKING_URI, else the embedded store under mlruns/."""
    return override or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI


class Tracker:
    """Writes sweeps and trials to one MLflow tracking store."""

    def __init__(self, uri: str | None = None):
        from mlflow import (
            MlflowClient,  # lazy: MLflow takes ~1.4 s; sweeps open it in the background
        )

        self.uri = tracking_uri(uri)
        self.spool = Spool()
        if self.uri.startswith(("http://", "https://")):
            # fail over to the spool in seconds, not after minutes of retries, and print no
            # "View run at" lines: they show the URL unredacted (msexp prints its own links)
            for key, value in (("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1"),
                               ("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1"),
                               ("MLFLOW_HTTP_REQUEST_TIMEOUT", "15"),
                               ("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")):
                os.environ.setdefault(key, value)
        try:  # an unreachable server, or a local store under an unwritable mlruns/
            if self.uri == DEFAULT_TRACKING_URI:
                STORE_DIR.mkdir(exist_ok=True)
            with self.writing():
                if self.uri.startswith("sqlite:///"):
                    create_sqlite_store(Path(_absolute(self.uri)[len("sqlite:///"):]))
                self.client: MlflowClient = MlflowClient(_absolute(self.uri))
                self.client.search_experiments(max_results=1)
        except Exception as exc:
            reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
            raise MsexpError(f"cannot reach the MLflow tracking store {redact(self.uri)} "
                             f"({type(exc).__name__}: {reason}){self._space_note()}") from None

    def _space_note(self) -> str:
        """"; no space left on the device of FOLDER ..." for a local store on a full disk."""
        prefix = "sqlite:///"
        uri = _absolute(self.uri)
        return space_note(Path(uri[len(prefix):]).parent) if uri.startswith(prefix) else ""

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """Serialise writers of a local SQLite store across processes (no-op otherwise)."""
        if not self.uri.startswith("sqlite:///"):
            yield
            return
        lock = Path(self.uri[len("sqlite:///"):]).with_suffix(".lock")
        lock.parent.mkdir(parents=True, exist_ok=True)
        with flock(lock):
            yield

    def experiment_id(self, name: str) -> str:
        """The id of experiment `name`, created on first use (artifacts under mlruns/)."""
        with self.writing():
            return self._experiment_id(name)

    def _experiment_id(self, name: str) -> str:
        from mlflow.exceptions import MlflowException  # lazy: as above

        found = self.client.get_experiment_by_name(name)
        if found:
            if found.tags.get(EXPERIMENT_KIND) != MODEL_TRAINING:  # made by an older msexp
                self.client.set_experiment_tag(found.experiment_id, EXPERIMENT_KIND,
                                               MODEL_TRAINING)
            return found.experiment_id
        location = None
        if self.uri == DEFAULT_TRACKING_URI:
            location = (STORE_DIR / "artifacts" / name).resolve().as_uri()
        try:
            return self.client.create_experiment(name, artifact_location=location,
                                                 tags={EXPERIMENT_KIND: MODEL_TRAINING})
        except MlflowException:  # another worker created it first
            found = self.client.get_experiment_by_name(name)
            if found is None:
                raise
            return found.experiment_id

    def has_run(self, run_id: str) -> bool:
        """Whether the run exists in this store."""
        from mlflow.exceptions import MlflowException  # lazy: as above

        try:
            self.client.get_run(run_id)
            return True
        except MlflowException:
            return False

    def reopen(self, run_id: str) -> None:
        """Mark a sweep's parent run as running again (resume, or another worker)."""
        self.client.update_run(run_id, status="RUNNING")

    def parent_run(self, experiment_id: str, study: str, tags: Mapping[str, str],
                   sweep_file: Path, params: Mapping[str, Any] | None = None,
                   values: Mapping[str, Any] | None = None) -> str:
        """Create the sweep's parent run with its `params` (the search space: each swept
        knob's values or range, each fixed knob's value) and the sweep file attached,
        without the secrets among `params` or the swept `values` (each knob's list)."""
        from mlflow.entities import Param  # lazy: as above

        with self.writing():
            run = self.client.create_run(experiment_id, run_name=study, tags=redacted_tags({
                RunTag.ROLE: "sweep", RunTag.STUDY: study, **tags}))
            logged = [Param(k, redact(param_text(redact_value(k, v)))[:6000])
                      for k, v in (params or {}).items()]
            for part, _, _ in in_batches(logged, [], []):
                self.client.log_batch(run.info.run_id, params=part)
            if sweep_file.is_file():
                self._log_redacted(run.info.run_id, sweep_file,
                                   known_secrets({**(params or {}), **(values or {})}))
        return run.info.run_id

    def _log_redacted(self, run_id: str, path: Path, secrets: list[str]) -> None:
        """Log a copy of the file at `path`, under its name, without `secrets`."""
        with tempfile.TemporaryDirectory(prefix="msexp-") as folder:
            copy = Path(folder) / path.name
            copy.write_text(redact_known(path.read_text(encoding="utf-8", errors="replace"),
                                         secrets), encoding="utf-8")
            self.client.log_artifact(run_id, str(copy))

    def active(self, run_id: str) -> bool:
        from mlflow.exceptions import MlflowException  # lazy: as above

        try:
            return self.client.get_run(run_id).info.lifecycle_stage == "active"
        except MlflowException:
            return False

    def delete_trial_runs(self, experiment_id: str, parent_id: str, number: int,
                          keep: str | None = None) -> None:
        """Delete the child runs of trial `number` under the parent, all but `keep`."""
        for run in self.client.search_runs(
                [experiment_id], f"tags.`{RunTag.PARENT}` = '{parent_id}' and "
                f"tags.`{RunTag.TRIAL}` = '{number}'"):
            if run.info.run_id != keep:
                self.client.delete_run(run.info.run_id)

    def start_trial(self, experiment_id: str, parent_id: str, number: int,
                    params: Mapping[str, Any], started: float, name: str | None = None,
                    replace: bool = False) -> str:
        """Make a trial's child run, RUNNING, with its params, and return its id; with
        `replace` (a trial that ran before), first delete the runs earlier attempts left."""
        tags = {RunTag.PARENT: parent_id, RunTag.ROLE: "trial", RunTag.TRIAL: str(number)}
        with self.writing():
            if replace:
                self.delete_trial_runs(experiment_id, parent_id, number)
            run = self.client.create_run(experiment_id, start_time=int(started * 1000),
                                         run_name=redact(name or trial_name(number)),
                                         tags=redacted_tags(tags))
            chosen = {k: v for k, v in params.items() if k not in RESOLVED}
            for part, _, _ in in_batches(run_params(chosen), [], []):
                self.client.log_batch(run.info.run_id, params=part)
        return run.info.run_id

    def finish_trial(self, run_id: str, result: TrialResult, started: float,
                     tags: Mapping[str, str] | None = None, log_checkpoint: bool = False,
                     params: Mapping[str, Any] | None = None) -> None:
        """Log what a trial reported into its run (the `RESOLVED` knobs of its `params` as
        they ran, metrics, tags, dataset, log files, with `log_checkpoint` its model) and
        end the run. Logged again, it leaves the same run: every value carries the trial's
        own times."""
        logged = {**{k: v for k, v in (params or {}).items() if k in RESOLVED}, **result.impl}
        if result.data_source:
            logged["data_source"] = result.data_source
        with self.writing():
            for param_part, metrics, tag_part in in_batches(run_params(logged), run_metrics(
                    result, started), run_tags(result, tags or {})):
                self.client.log_batch(run_id, metrics=metrics, params=param_part, tags=tag_part)
            if result.data_source:
                self.client.log_inputs(run_id, [dataset_input(redact(result.data_source))])
            for path in (result.log_path, result.events_path):
                if path and path.exists():
                    self.client.log_artifact(run_id, str(path))
            if result.rank_logs and result.rank_logs.is_dir():  # data parallel: every rank's
                self.client.log_artifacts(run_id, str(result.rank_logs), result.rank_logs.name)
            if log_checkpoint and result.checkpoint and result.checkpoint.is_file():
                self.client.log_artifact(run_id, str(result.checkpoint), CHECKPOINT_ARTIFACTS)
            self.client.set_terminated(run_id, _RUN_STATUS[result.status],
                                       end_time=int((started + result.wall_s) * 1000))

    def ui_links(self, experiment_id: str, parent_id: str, sweep_file: Path | None = None
                 ) -> tuple[str, str, str | None]:
        """(runs table URL, parent run URL, the command that serves the store (`msexp ui
        [FILE]`) or None for a tracking server)."""
        runs, parent = ui_links(ui_base(self.uri), experiment_id, parent_id)
        if self.uri.startswith(("http://", "https://")):
            return runs, parent or runs, None
        argv = ["msexp", "ui", *([str(sweep_file)] if sweep_file else [])]
        if self.uri not in (DEFAULT_TRACKING_URI, os.environ.get("MLFLOW_TRACKING_URI")):
            argv += ["--tracking-uri", self.uri]
        return runs, parent or runs, shlex.join(argv)


def ui_base(uri: str, port: int = UI_PORT) -> str:
    """The UI's address: a tracking server's own, else that of `msexp ui` on `port`."""
    if uri.startswith(("http://", "https://")):
        return uri.rstrip("/")
    return f"http://127.0.0.1:{port}"


def ui_links(base: str, experiment_id: str, parent_id: str | None) -> tuple[str, str | None]:
    """The links of an experiment's runs table and of its run `parent_id` (None: none) in
    the model-training view."""
    runs = f"{base}/#/experiments/{experiment_id}/runs"
    return (runs + UI_TRAINING_VIEW,
            f"{runs}/{parent_id}{UI_TRAINING_VIEW}" if parent_id else None)


def _absolute(uri: str) -> str:
    """A relative SQLite URI made absolute: MLflow caches stores by URI, not by file."""
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri[len(prefix):].startswith("/"):
        return prefix + str(Path(uri[len(prefix):]).resolve())
    return uri
