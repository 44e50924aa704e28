"""Shared fixtures: every test that records runs works in its own temporary folder."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import optuna
import pytest

ROOT = Path(__file__).resolve().parents[1]
ASSETS = Path(__file__).parent / "assets"


def pytest_configure(config: pytest.Config) -> None:
    """Under tests/mutation.sh, let subprocesses run the original code during mutmut's stats pass.

    A trial or CLI subprocess runs in a temporary folder where mutmut cannot find its
    configuration, so a "stats" mutant marker in its environment would crash it. The test
    process itself keeps the marker (mutmut holds a copy of it).
    """
    global UNDER_MUTMUT
    UNDER_MUTMUT = "MUTANT_UNDER_TEST" in os.environ
    if os.environ.get("MUTANT_UNDER_TEST") == "stats":
        del os.environ["MUTANT_UNDER_TEST"]


UNDER_MUTMUT = False  # set by pytest_configure: tests/mutation.sh runs this suite


@pytest.fixture
def models_built_by_each_test(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test uses a sweep-file model another test built (`model._MODELS`): mutation
    testing maps each test to the code it runs, and judges a mutant of a model's builder
    only by the tests mapped to it (test_spec, test_schema). Elsewhere the models are
    shared: building them for each of those tests took 45 s of the fast tier."""
    from msexp.spec import model
    if UNDER_MUTMUT:
        monkeypatch.setattr(model, "_MODELS", {})


@pytest.fixture
def stop_handlers_restored() -> Iterator[None]:
    """The stop signals' handlers and the stops `msexp.console.interrupts` noted, as they
    were before the test: the next test starts clean."""
    import signal

    from msexp.console import interrupts

    saved = {sig: signal.getsignal(sig) for sig in interrupts.STOPS}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        interrupts.received.clear()
        interrupts._acknowledging.clear()


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh current directory, so mlruns/ (MLflow + Optuna stores) lands in tmp_path."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MSEXP_STORAGE", raising=False)
    # trial processes import the test assets as experiments
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), str(ASSETS)]))
    monkeypatch.syspath_prepend(str(ASSETS))
    return tmp_path


@pytest.fixture(scope="module")
def mlflow_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An embedded MLflow store of the test module's own, its SQLite file (creating its
    tables takes seconds, so a module shares one)."""
    from msexp.tracking.store import create_sqlite_store

    path = tmp_path_factory.mktemp("mlflow") / "mlflow.db"
    create_sqlite_store(path)
    return path


@pytest.fixture(scope="module")
def tracker(tmp_path_factory):
    """An embedded MLflow store of the test module's own, in a current directory of its own
    (creating its tables takes seconds, so a module shares one)."""
    from msexp.tracking.runs import Tracker

    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path_factory.mktemp("store"))
        patch.delenv("MLFLOW_TRACKING_URI", raising=False)
        yield Tracker()


def builtin(name: str) -> ModuleType:
    """msexp's own experiment `name`, the module a sweep loads from its file in experiments/."""
    from msexp.experiment import load_experiment

    return sys.modules[load_experiment(name).build.__module__]


def write(path: Path, text: str) -> Path:
    """Write dedented text to `path` and return it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return path


def with_callback(script: Path, copy: Path, callbacks: str) -> Path:
    """A copy of the digits script `script` whose `Model.train` gets `callbacks` (which may
    use `MsexpCallback(model, eval_ds)`) instead of its monitors."""
    changed = script.read_text().replace(
        "from sklearn.datasets import load_digits\n",
        "from sklearn.datasets import load_digits\n\nfrom msexp.hooks import MsexpCallback\n")
    changed = changed.replace("callbacks=[LossMonitor(20), TimeMonitor()]",
                              f"callbacks=[{callbacks}]")
    assert changed.count("MsexpCallback") == 2, "the script's monitors line moved"
    copy.write_text(changed)
    return copy


def msexp_cmd(*args: str) -> list[str]:
    """The command line that runs the msexp CLI with this interpreter."""
    return [sys.executable, "-m", "msexp", *args]


def mlflow_client():
    """A client of the embedded store in the current directory.

    The URI is absolute: MLflow caches stores by URI, so a relative one would reach
    the store of an earlier test's directory.
    """
    from mlflow import MlflowClient

    return MlflowClient(f"sqlite:///{Path('mlruns/mlflow.db').resolve()}")


def child_runs(experiment: str) -> list:
    """The trial (child) runs of the MLflow experiment of a sweep, in the embedded store."""
    client = mlflow_client()
    found = client.get_experiment_by_name(experiment)
    return [r for r in client.search_runs([found.experiment_id])
            if r.data.tags.get("msexp.role") == "trial"]


@functools.cache
def rdb_storage(url: str) -> optuna.storages.RDBStorage:
    """One Optuna storage per database URL for the session: a new one per poll would hold
    a new pool of PostgreSQL connections each time."""
    return optuna.storages.RDBStorage(url)


def _postgres_installed() -> bool:
    return any(Path(p).exists() for p in ("/usr/lib/postgresql", "/usr/local/bin/initdb"))


@pytest.fixture(scope="session")
def shared_services(tmp_path_factory):
    """A PostgreSQL and an MLflow server (`msexp.cluster.services`) for the whole session
    (starting them takes seconds); tests keep apart by study and experiment names."""
    from msexp.cluster import services

    if not _postgres_installed():
        pytest.skip("PostgreSQL server binaries are not installed (.ci/run installs them)")
    root = tmp_path_factory.mktemp("services") / "services"
    running = services.up(root)
    yield running
    services.down(root)
    log = (running.pg_data / "postgres.log").read_text(errors="replace")
    shutil.rmtree(running.pg_data, ignore_errors=True)  # as root, it is outside tmp_path
    killed = [line for line in log.splitlines() if "terminated by signal" in line]
    assert not killed, f"a test killed the shared PostgreSQL's processes: {killed[0]}"


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A private single-node Slurm (munged, slurmctld, slurmd) with its node idle."""
    from tests import local_slurm

    missing = local_slurm.missing_programs()
    if missing:
        pytest.skip(f"Slurm is not installed (no {', '.join(missing)}; .ci/run installs "
                    "slurm-wlm and munge)")
    running = local_slurm.start(tmp_path_factory.mktemp("slurm"))
    yield running
    running.stop()


@pytest.fixture
def saved_crontab():
    """This user's crontab, put back as it was after the test."""
    if not shutil.which("crontab"):
        pytest.skip("crontab is not installed (.ci/run installs cron)")
    before = subprocess.run(["crontab", "-l"], capture_output=True, text=True)
    yield
    if before.returncode == 0:
        subprocess.run(["crontab", "-"], input=before.stdout, text=True, check=True)
    else:
        subprocess.run(["crontab", "-r"], capture_output=True)


@pytest.fixture
def cron_daemon(saved_crontab):
    """A running cron daemon: Debian's `cron -f`, started here and stopped after the test
    (one that already runs is used as it is)."""
    program = shutil.which("cron") or shutil.which("cron", path="/usr/sbin:/sbin")
    if not program:
        pytest.skip("cron is not installed (.ci/run installs it)")
    daemon = subprocess.Popen([program, "-f"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        daemon.wait(timeout=1)  # it exits at once if another cron holds its pid file
    except subprocess.TimeoutExpired:
        yield
        daemon.terminate()
        daemon.wait(timeout=15)
        return
    if "can't lock" not in daemon.stderr.read():
        pytest.fail(f"cron did not start (exit code {daemon.returncode})")
    yield
