"""Versions of a study (`msexp sweep --restart`), in-process: a changed sweep file starts
NAME-v2 under the study lock, the old version is marked superseded in Optuna and on its
MLflow parent run, and commands without --study follow the newest version."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

from msexp.cli import app
from msexp.errors import MsexpError
from msexp.keys import RunTag, StudyKey
from msexp.search.storage import open_storage
from msexp.search.study import open_study
from msexp.search.versions import newest, next_version, study_attrs
from msexp.spec import load_spec
from msexp.tracking.recorder import mark_superseded
from msexp.tracking.runs import Tracker
from tests.conftest import write


def sweep_file(workdir: Path, lrs: list[float], name: str = "v") -> Path:
    return write(workdir / "v.yaml", f"name: {name}\nexperiment: mlp_digits\n"
                                     f"params: {{lr: {lrs}}}\n")


def test_restart_starts_the_next_version_and_marks_the_old_one(workdir: Path) -> None:
    first = load_spec(sweep_file(workdir, [0.1, 0.2]))
    study, created = open_study(first, None)
    study.set_user_attr(StudyKey.PARENT_RUN, "run-of-v")
    changed = load_spec(sweep_file(workdir, [0.3]))
    with pytest.raises(MsexpError, match=r"to start its next version: msexp sweep \S+v.yaml "
                                         r"--restart \(or pass --study NEW_NAME\)$"):
        open_study(changed, None)
    second, created = open_study(changed, None, restart=True)
    assert (second.study_name, created) == ("v-v2", True)
    attrs = study_attrs(open_storage(None))
    assert attrs["v"][StudyKey.SUPERSEDED_BY] == "v-v2"
    assert {k: attrs["v-v2"][k] for k in (StudyKey.VERSION, StudyKey.SUPERSEDES,
                                          StudyKey.SUPERSEDES_RUN)} == {
        StudyKey.VERSION: 2, StudyKey.SUPERSEDES: "v", StudyKey.SUPERSEDES_RUN: "run-of-v"}
    assert len(second.get_trials()) == 1, "the new version queues the changed grid"
    resumed, created = open_study(changed, None)
    assert (resumed.study_name, created) == ("v-v2", False), "the newest, by default"
    again, created = open_study(changed, None, restart=True)
    assert (again.study_name, created) == ("v-v2", False), "this file's version: joined"
    back, created = open_study(first, None, restart=True)
    assert (back.study_name, created) == ("v-v3", True), "the old file again: a new version"
    old, _ = open_study(first, None, "v")
    assert old.study_name == "v", "--study names a version exactly"
    status = CliRunner().invoke(app, ["status", str(first.path)])
    assert status.exit_code == 0 and status.output.startswith("v-v3: 0 finished of 2")
    explicit = CliRunner().invoke(app, ["status", "--study", "v"])
    assert explicit.output.startswith("v: 0 finished of 2"), explicit.output


def test_a_study_lost_from_its_storage_is_not_run_again_over_its_trials(
        workdir: Path) -> None:
    """Issue 25, an emptied journal: the trial folders show the study ran; a silent full
    re-run would redo every trial over them. --restart starts the next version beside them,
    and commands without --study find it."""
    spec = load_spec(sweep_file(workdir, [0.1, 0.2]))
    open_study(spec, None)
    (workdir / "mlruns" / "optuna.journal").write_text("")
    (workdir / "mlruns" / "trials" / "v" / "trial-0000").mkdir(parents=True)
    with pytest.raises(MsexpError, match=r"^\S+v.yaml: study 'v' is not in \S+optuna.journal, "
                                         r"but mlruns/trials/v holds its trials .*: msexp "
                                         r"sweep \S+v.yaml --restart$"):
        open_study(spec, None)
    assert study_attrs(open_storage(None)) == {}, "refused before anything is written"
    (workdir / "mlruns" / "trials" / "v-v2" / "trial-0000").mkdir(parents=True)
    study, created = open_study(spec, None, restart=True)
    assert (study.study_name, created) == ("v-v3", True), "v-v2's name is taken by folders"
    assert study.user_attrs[StudyKey.SUPERSEDES] == "v"
    assert len(study.get_trials()) == 2, "the whole grid, queued"
    resumed, created = open_study(spec, None)
    assert (resumed.study_name, created) == ("v-v3", False), "found without --study"
    status = CliRunner().invoke(app, ["status", str(spec.path)])
    assert status.output.startswith("v-v3: 0 finished of 2"), status.output


def test_the_newest_version_of_a_name_missing_from_the_storage_is_its_highest() -> None:
    attrs: dict = {"w-v2": {}, "w-v10": {StudyKey.SUPERSEDED_BY: "w-v11"}, "w-v11": {},
                   "w-vx": {}, "ww-v40": {}, "other": {}}
    assert newest(attrs, "w") == "w-v11"
    assert newest({"w-v2": {}}, "w") == "w-v2"
    assert newest({"w": {}, "w-v2": {}}, "w") == "w", "a present name is followed, not guessed"
    assert newest({}, "w") == "w"


# PostgreSQL in the slow tier, where its services start anyway (about 20 s a start)
@pytest.fixture(params=["journal", "sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
def storage_url(request: pytest.FixtureRequest, workdir: Path,
                monkeypatch: pytest.MonkeyPatch) -> str | None:
    """Each kind of study lock: a file lock beside the journal or the SQLite file, and
    PostgreSQL's advisory lock (the shared services' database)."""
    if request.param == "journal":
        return None
    if request.param == "sqlite":
        return f"sqlite:///{workdir / 'optuna.db'}"
    services = request.getfixturevalue("shared_services")
    monkeypatch.setenv("PGPASSFILE", str(services.pgpass))
    return services.storage_url


def test_processes_that_restart_at_once_make_one_version(workdir: Path,
                                                         storage_url: str | None) -> None:
    name = f"v{uuid.uuid4().hex[:8]}"  # the PostgreSQL database is shared by tests
    open_study(load_spec(sweep_file(workdir, [0.1], name)), storage_url)
    changed = load_spec(sweep_file(workdir, [0.3, 0.4], name))
    start, opened, errors = threading.Barrier(4), [], []

    def restart() -> None:
        start.wait()
        try:
            study, created = open_study(changed, storage_url, restart=True)
            opened.append((study.study_name, created))
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=restart) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(opened) == [(f"{name}-v2", False)] * 3 + [(f"{name}-v2", True)]
    assert sorted(n for n in study_attrs(open_storage(storage_url)) if n.startswith(name)) \
        == [name, f"{name}-v2"]
    queued = optuna.load_study(study_name=f"{name}-v2", storage=open_storage(storage_url))
    assert len(queued.get_trials()) == 2, "the grid is queued once"


def test_the_newest_version_follows_the_marks_and_skips_taken_names() -> None:
    attrs = {"a": {StudyKey.SUPERSEDED_BY: "a-v2"}, "a-v2": {StudyKey.VERSION: 2},
             "a-v3": {}, "loop": {StudyKey.SUPERSEDED_BY: "loop"},
             "gone": {StudyKey.SUPERSEDED_BY: "never-made"}}
    assert newest(attrs, "a") == "a-v2" and newest(attrs, "a-v2") == "a-v2"
    assert newest(attrs, "loop") == "loop" and newest(attrs, "gone") == "gone"
    assert newest(attrs, "unknown") == "unknown"
    assert next_version(attrs, "a", "a-v2") == ("a-v4", 4), "a-v3 is taken by hand"
    assert next_version(attrs, "gone", "gone") == ("gone-v2", 2)


def test_a_superseded_parent_run_loses_its_green_check(tracker: Tracker) -> None:
    experiment = tracker.experiment_id("versions")
    finished = tracker.client.create_run(experiment).info.run_id
    tracker.client.set_terminated(finished, "FINISHED")
    failed = tracker.client.create_run(experiment).info.run_id
    tracker.client.set_terminated(failed, "FAILED")
    for run_id in (finished, failed):
        mark_superseded(tracker, run_id, "versions-v2")
    runs = {r: tracker.client.get_run(r) for r in (finished, failed)}
    assert runs[finished].info.status == "KILLED" and runs[failed].info.status == "FAILED"
    for run in runs.values():
        assert run.data.tags[RunTag.SUPERSEDED_BY] == "versions-v2"
        assert "Superseded by study versions-v2" in run.data.tags[RunTag.NOTE]
