"""The fault suite's shared parts: a marker on every process a test starts, the invariants
every fault must keep, waiting on events, and a real MLflow server that can die."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import optuna
import psutil
import pytest
from mlflow import MlflowClient
from optuna.trial import TrialState

from msexp.execution.ports import free_port
from msexp.execution.process_tree import alive, kill_processes
from msexp.search.storage import open_storage
from tests.conftest import ASSETS, ROOT

MARK = "MSEXP_FAULT_TEST"  # every process a fault test starts, and all theirs, carry it
DEADLINE_S = 240.0  # for a hang, on a loaded 2-core machine


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The whole fault suite is slow tier: `.ci/run` runs it once, in its loaded run."""
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder for a module's tests, so its MLflow store is made once."""
    return tmp_path_factory.mktemp("fault")


@pytest.fixture
def mark(warm: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Work in the module's folder; every process started from here carries this test's
    marker. Whatever a failing test leaves is killed afterwards."""
    monkeypatch.chdir(warm)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MSEXP_STORAGE", raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), str(ASSETS)]))
    monkeypatch.setenv("COLUMNS", "200")
    value = uuid.uuid4().hex
    monkeypatch.setenv(MARK, value)
    yield value
    kill_processes(carrying(value))


def carrying(value: str) -> list[psutil.Process]:
    """The live processes (zombies aside) that carry the test marker `value`."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and proc.environ().get(MARK) == value and alive(proc):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def wait_for(what: str, done: Callable[[], bool], proc: subprocess.Popen | None = None,
             deadline_s: float = DEADLINE_S) -> bool:
    """Wait until `done()`; False if `proc` ended first. Fails the test after the deadline."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if done():
            return True
        if proc is not None and proc.poll() is not None:
            return False
        time.sleep(0.05)
    pytest.fail(f"{what}: not within {deadline_s:g} s")


def assert_no_process_left(value: str, deadline_s: float = 20.0) -> None:
    """Nothing the test started is left: no process carries its marker (killed processes
    take a moment to go)."""
    deadline = time.monotonic() + deadline_s
    while (left := carrying(value)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, [" ".join(p.cmdline()[:6]) for p in left if alive(p)]


def assert_no_secret_under_mlruns(secrets: list[str]) -> None:
    """No file under mlruns/ (journal, MLflow store, trial logs, artifacts, spool) holds any
    of `secrets`."""
    leaked = {str(path): [s for s in secrets if s.encode() in path.read_bytes()]
              for path in Path("mlruns").rglob("*") if path.is_file()}
    assert not {path: found for path, found in leaked.items() if found}


def assert_nothing_running(name: str, storage: str | None = None,
                           tracking_uri: str | None = None) -> None:
    """No trial of study `name` is RUNNING, and no MLflow run of it is."""
    trials = load_study(name, storage).get_trials(deepcopy=False)
    assert not [t.number for t in trials if t.state is TrialState.RUNNING]
    client = tracking_client(tracking_uri)
    experiment = client.get_experiment_by_name(name)
    runs = client.search_runs([experiment.experiment_id]) if experiment else []
    assert not [r.info.run_id for r in runs if r.info.status == "RUNNING"]


def load_study(name: str, storage: str | None = None) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=open_storage(storage))


def completed(name: str, storage: str | None = None) -> int:
    """How many trials of study `name` are COMPLETE now (0 before it exists)."""
    try:
        trials = load_study(name, storage).get_trials(deepcopy=False)
    except (KeyError, OSError, ValueError):
        return 0
    return sum(t.state is TrialState.COMPLETE for t in trials)


def tracking_client(uri: str | None = None) -> MlflowClient:
    return MlflowClient(uri or f"sqlite:///{Path('mlruns/mlflow.db').resolve()}")


def _point(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True)


def assert_invariants(name: str, experiment: str, mark: str, planned: list[dict] | int,
                      storage: str | None = None, tracking_uri: str | None = None,
                      may_fail: bool = False) -> None:
    """What every fault must leave, once the sweep has been resumed to its end: every
    planned point (or, for a sampler, `planned` trials) has exactly one trial, COMPLETE
    (or, where the case `may_fail`, FAIL), and exactly one MLflow child run, FINISHED (or
    FAILED for a failed trial), under the study's one parent run; no trial or run is
    RUNNING; nothing waits in the spool; no process of the test is left."""
    trials = load_study(name, storage).get_trials(deepcopy=False)
    states = {t.number: t.state.name for t in trials}
    ends = {TrialState.COMPLETE, TrialState.FAIL} if may_fail else {TrialState.COMPLETE}
    assert all(t.state in ends for t in trials), states
    if isinstance(planned, int):
        assert len(trials) == planned, states
    else:
        assert sorted(_point(t.params) for t in trials) == sorted(map(_point, planned))
    client = tracking_client(tracking_uri)
    experiment_id = client.get_experiment_by_name(experiment).experiment_id
    runs = client.search_runs([experiment_id], f"tags.`msexp.study` = '{name}'")
    assert len(runs) == 1, "one parent run per study"
    (parent,) = runs
    assert parent.info.run_id == load_study(name, storage).user_attrs["mlflow_parent_run_id"]
    assert parent.info.status != "RUNNING"
    children = client.search_runs(
        [experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    assert sorted(int(r.data.tags["msexp.trial"]) for r in children) == \
        sorted(t.number for t in trials), "exactly one child run per trial"
    ran = {int(r.data.tags["msexp.trial"]): (r.info.status, r.data.tags["status"])
           for r in children}
    assert ran == {t.number: ("FINISHED", "COMPLETE") if t.state is TrialState.COMPLETE
                   else ("FAILED", "FAILED") for t in trials}
    assert not list(Path("mlruns/spool").glob("*.json")), "every spooled result delivered"
    assert_no_process_left(mark)


class MlflowServer:
    """A real `mlflow server` on a SQLite store: it can be killed and started again on the
    same port and store."""

    def __init__(self, root: Path):
        self.root, self.port = root, free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        log = (self.root / "mlflow.log").open("a")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--backend-store-uri",
             f"sqlite:///{self.root / 'mlflow.db'}", "--artifacts-destination",
             str(self.root / "artifacts"), "--host", "127.0.0.1", "--port", str(self.port),
             "--workers", "1"], stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, env={k: v for k, v in os.environ.items() if k != MARK})
        wait_for("the MLflow server answers", self.healthy, self.proc)
        assert self.proc.poll() is None, (self.root / "mlflow.log").read_text()[-2000:]

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def kill(self) -> None:
        """kill -9 the server and everything it started."""
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.proc = None
