"""A restart of the study storage mid-sweep: a real PostgreSQL, or msexp's gRPC proxy in
front of it, stopped for 20 s and started again. The sweep waits, says once what it waits
for, and goes on: every point once, nothing lost. Down for 60 s, past the heartbeat's
grace, a live sweep's trial is not taken for a dead one's. A commit whose answer the
connection lost is not applied twice. Down past the sweep's patience, it stops with the
real cause in one line, and the next run finishes the study."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import optuna
import psutil
import pytest
from optuna.trial import TrialState

from msexp.cluster import services
from msexp.keys import TrialKey
from msexp.search.claims import last_heartbeat, owner_of
from msexp.search.heartbeat import STALE_AFTER_S
from msexp.search.optuna_private import pop_waiting
from msexp.search.source import TrialSource
from msexp.search.storage import open_storage
from tests.conftest import msexp_cmd, write
from tests.fault.conftest import (
    DEADLINE_S,
    MARK,
    assert_invariants,
    completed,
    load_study,
    wait_for,
)

pytestmark = pytest.mark.slow  # sweeps in worker processes (tests/README.md: tiers)

OUTAGE_S = 20.0
LONG_OUTAGE_S = 60.0  # the longest restart ridden out: the heartbeat's grace (STALE_AFTER_S)
POINTS = [{"lr": lr} for lr in (0.01, 0.02, 0.03, 0.04, 0.05, 0.06)]


@pytest.fixture
def db(mark: str, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
       ) -> Iterator[services.Services]:
    """A PostgreSQL and msexp's gRPC proxy of its own (the test stops them)."""
    pytest.importorskip("grpc")
    try:
        running = start(tmp_path_factory.mktemp("restarts") / "services")
    except FileNotFoundError:
        pytest.skip("PostgreSQL server binaries are not installed (.ci/run installs them)")
    monkeypatch.setenv("PGPASSFILE", str(running.pgpass))
    yield running
    services.down(running.root)


def start(root: Path, proxy: bool = True) -> services.Services:
    """PostgreSQL and the proxy (again), without the test's marker: they are not what the
    sweep leaves."""
    marker = os.environ.pop(MARK)
    try:
        return services.up(root, mlflow=False, proxy=proxy)
    finally:
        os.environ[MARK] = marker


def stop_proxy(db: services.Services) -> None:
    proc = psutil.Process(json.loads((db.root / "proxy.pid").read_text())["pid"])
    assert "msexp.search.grpc_proxy" in proc.cmdline(), "the proxy runs"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


def stop_postgres(db: services.Services) -> None:
    stop_proxy(db)  # `down` stops the proxy too; it comes back with PostgreSQL
    services.down(db.root)


def stop_postgres_behind_proxy(db: services.Services) -> None:
    """PostgreSQL alone: `down` stops what its pid files name, the proxy's hidden from it."""
    kept = db.root / "proxy.pid.kept"
    (db.root / "proxy.pid").rename(kept)
    try:
        services.down(db.root)
    finally:
        kept.rename(db.root / "proxy.pid")


def sweep_file(name: str) -> Path:
    return write(Path(f"{name}.yaml"), f"""
        name: {name}
        experiment: broken:build
        fixed: {{epochs: 2, hidden: 16, pause_s: 0.4}}
        params:
          lr: [0.01, 0.02, 0.03, 0.04, 0.05, 0.06]
    """)


def waiting_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if "waiting for the study storage" in line]


@pytest.mark.parametrize("restarted", ["postgresql", "proxy", "postgresql-behind-proxy"])
def test_a_sweep_rides_out_a_restart_of_its_storage(mark: str, db: services.Services,
                                                    restarted: str) -> None:
    """Behind a live proxy, the sweep's calls wait on the proxy, and its study lock is
    refused while the database is down: either way, one line says what it waits for.

    # mutation: no patience (each storage call tried once): the sweep stops with
    Optuna's "invalid data in the commit" or gRPC's UNAVAILABLE; behind the proxy, no
    line (calls unanswered for STALL_S not said, the lock's wait not refused)"""
    name = f"ride-{restarted}"
    url = db.storage_url if restarted == "postgresql" else db.proxy_url
    stop, proxy = {"postgresql": (stop_postgres, True), "proxy": (stop_proxy, True),
                   "postgresql-behind-proxy": (stop_postgres_behind_proxy, False)}[restarted]
    proc = subprocess.Popen(msexp_cmd("sweep", str(sweep_file(name)), "--storage", url),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert wait_for("a first trial", lambda: completed(name, db.storage_url) > 0, proc), \
            proc.communicate()
        stop(db)
        time.sleep(OUTAGE_S)
        assert proc.poll() is None, "the sweep waits for its storage"
        start(db.root, proxy=proxy)
        output, _ = proc.communicate(timeout=DEADLINE_S)
    finally:
        proc.kill()
    assert proc.returncode == 0, output
    assert len(waiting_lines(output)) == 1, output
    (line,) = waiting_lines(output)
    assert f"waiting for the study storage {url}: " in line, line
    assert line.rstrip().endswith(("(retrying for up to 90 s)", "no answer for 15 s")), line
    for noise in ("StorageInternalError", "debug_error_string", "Traceback"):
        assert noise not in output, output
    assert_invariants(name, name, mark, POINTS, storage=db.storage_url)


@pytest.mark.parametrize("through", ["postgresql", "proxy"])
def test_a_live_sweeps_trial_is_not_taken_after_an_outage_past_the_heartbeat_grace(
        mark: str, db: services.Services, through: str) -> None:
    """PostgreSQL down for 60 s while a sweep runs a trial: its heartbeat is then older than
    the 60 s grace, yet a process that waited through the same outage does not take the
    trial for a dead sweep's; the sweep finishes it, its first attempt. Through the proxy
    (which stays up), the clients' calls are not refused but wait on the proxy.

    The sweep is frozen from the restart until that check has run: its first beat after
    the outage would otherwise race the check, which the mutation loses only at random.

    # mutation: the stale check blind to outages (`outage_within` always False): the live
    sweep's trial is queued again (pending 1), and runs twice; through the proxy, a call
    answered after STALL_S not counted as an outage (`Patience.stalled` a no-op): the same"""
    name = f"ride-long-{through}"
    url = db.storage_url if through == "postgresql" else db.proxy_url
    sweep = write(Path(f"{name}.yaml"), f"""
        name: {name}
        experiment: broken:build
        fixed: {{epochs: 2, hidden: 16, pause_s: {OUTAGE_S * 2}}}
        params:
          lr: [0.01]
    """)
    proc = subprocess.Popen(msexp_cmd("sweep", str(sweep), "--storage", url),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert wait_for("a trial held", lambda: bool(held(name, db.storage_url)), proc), \
            proc.communicate()
        study = load_study(name, url)
        (stop_postgres if through == "postgresql" else stop_postgres_behind_proxy)(db)
        waiting = threading.Thread(target=study.get_trials)  # this process waits it out too
        waiting.start()
        time.sleep(LONG_OUTAGE_S)
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            start(db.root, proxy=False)
            waiting.join()
            (trial,) = held(name, db.storage_url)
            assert wait_for("silent past the grace", lambda: last_heartbeat(trial) <
                            time.time() - STALE_AFTER_S - 1)
            other = TrialSource(study, url, 1, samples=False,
                                kill_owned=lambda owner: None)
            try:
                assert other.pending() == 0, "the live sweep's trial is not queued again"
            finally:
                other.close()
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        output, _ = proc.communicate(timeout=DEADLINE_S)
    finally:
        proc.kill()
    assert proc.returncode == 0, output
    if through == "postgresql":  # through the proxy, the proxy's log says what it waits for
        assert len(waiting_lines(output)) == 1, output
    assert_invariants(name, name, mark, [{"lr": 0.01}], storage=db.storage_url)
    (done,) = load_study(name, db.storage_url).get_trials()
    assert TrialKey.ATTEMPT not in done.user_attrs, "its first attempt finished it"


def held(name: str, storage: str) -> list[optuna.trial.FrozenTrial]:
    """The trials of study `name` that a sweep holds now (RUNNING, its owner marked, and
    its first heartbeat written)."""
    try:
        trials = load_study(name, storage).get_trials(states=(TrialState.RUNNING,))
    except (KeyError, OSError, ValueError):  # not created yet (as `completed`)
        return []
    return [trial for trial in trials if owner_of(trial) and last_heartbeat(trial)]


@pytest.mark.parametrize("stopped", ["postgresql", "proxy"])
def test_past_its_patience_a_sweep_stops_with_the_cause_in_one_line(
        mark: str, db: services.Services, stopped: str, monkeypatch: pytest.MonkeyPatch
        ) -> None:
    """Patience cut to 5 s: the storage stays down, the sweep stops in one line naming the
    storage and why (not Optuna's "invalid data in the commit", nor gRPC's
    debug_error_string); once it serves again, the same command finishes the study."""
    name = f"impatient-{stopped}"
    url = db.storage_url if stopped == "postgresql" else db.proxy_url
    monkeypatch.setenv("MSEXP_STORAGE_PATIENCE_S", "5")
    sweep = sweep_file(name)
    proc = subprocess.Popen(msexp_cmd("sweep", str(sweep), "--storage", url),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for("a first trial", lambda: completed(name, db.storage_url) > 0, proc), \
            proc.communicate()
        (stop_postgres if stopped == "postgresql" else stop_proxy)(db)
        out, err = proc.communicate(timeout=DEADLINE_S)
    finally:
        proc.kill()
    assert proc.returncode == 1, out + err
    *waited, line = err.splitlines()  # the waiting line, then the sweep's last
    assert len(waiting_lines("\n".join(waited))) == 1, err
    assert f"the study storage {url} did not answer for 5 s (" in line, line
    cause = "refused" if stopped == "proxy" else ""
    assert cause in line.lower(), line
    for noise in ("StorageInternalError", "invalid data", "debug_error_string"):
        assert noise not in out + err, out + err
    start(db.root)
    monkeypatch.delenv("MSEXP_STORAGE_PATIENCE_S")
    again = subprocess.run(msexp_cmd("sweep", str(sweep), "--storage", url),
                           capture_output=True, text=True, timeout=DEADLINE_S)
    assert again.returncode == 0, again.stdout + again.stderr
    assert_invariants(name, name, mark, POINTS, storage=db.storage_url)


class AnswerCutter:
    """A TCP relay in front of PostgreSQL that, when armed with a statement's text, lets
    the next transaction holding it commit and cuts the connection before the client hears
    the commit's answer: a write that landed, its answer lost."""

    def __init__(self, pg_port: int):
        self.pg_port, self.needle, self.cut = pg_port, b"", 0
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, statement: str) -> None:
        self.needle = statement.encode()

    def _accept(self) -> None:
        while True:
            client, _ = self.server.accept()
            upstream = socket.create_connection(("127.0.0.1", self.pg_port))
            sent = bytearray()  # what the client sent since its last commit was answered
            threading.Thread(target=self._pump, args=(client, upstream, sent, False),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, sent, True),
                             daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, sent: bytearray,
              answers: bool) -> None:
        try:
            while chunk := source.recv(65536):
                if not answers:
                    sent += chunk
                elif b"COMMIT\x00" in chunk:
                    if self.needle and self.needle in sent:
                        self.needle, self.cut = b"", self.cut + 1
                        break  # the commit landed; its answer goes nowhere
                    sent.clear()
                sink.sendall(chunk)
        except OSError:
            pass
        for end in (source, sink):  # shut down: a close alone leaves the other pump's recv
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()


def test_a_write_whose_answer_was_cut_off_is_not_applied_twice(
        mark: str, db: services.Services, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
        ) -> None:
    """A queued trial, a claim and a tell each commit, and the connection is cut before
    the answer: each is retried once, and found landed, not applied again.

    # mutation: no check of a landed write before the retry (`_landed` returning None):
    the queued trial is there twice, the claim is taken for another process's (no trial
    to claim), the tell fails with UpdateFinishedTrialError"""
    cutter = AnswerCutter(db.pg_port)
    password = db.pgpass.read_text().split(":")[-1]
    (tmp_path / "pgpass").write_text(f"127.0.0.1:{cutter.port}:*:{services.USER}:{password}")
    (tmp_path / "pgpass").chmod(0o600)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "pgpass"))
    storage = open_storage(f"postgresql://{services.USER}@127.0.0.1:{cutter.port}/optuna"
                           "?sslmode=disable")
    study = optuna.create_study(study_name="cut-answers", storage=storage)
    cutter.arm("INSERT INTO trials")
    study.enqueue_trial({"lr": 0.01}, user_attrs={TrialKey.GRID_POINT: 0})
    assert cutter.cut == 1
    assert len(study.get_trials(deepcopy=False)) == 1, "queued once"
    cutter.arm("UPDATE trials SET state")
    trial = pop_waiting(study)
    assert cutter.cut == 2
    assert trial is not None and trial.number == 0, "the claim that landed is this one's"
    cutter.arm("UPDATE trials SET state")
    study.tell(trial, 0.5)
    assert cutter.cut == 3
    (told,) = study.get_trials(deepcopy=False)
    assert (told.state, told.values) == (TrialState.COMPLETE, [0.5])
