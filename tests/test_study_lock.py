"""The study lock on every storage, and a claim that takes a trial only when its WAITING ->
RUNNING write won: no two processes take one trial, with the lock or without it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from optuna.trial import TrialState
from typer.testing import CliRunner

from msexp.cli import app
from msexp.errors import MsexpError
from msexp.execution.process_tree import kill_marked
from msexp.keys import TrialKey
from msexp.search.lock import study_lock
from msexp.search.optuna_private import pop_waiting
from msexp.search.source import TrialSource
from msexp.search.storage import open_storage
from msexp.search.study import open_study
from msexp.spec import load_spec
from tests.conftest import write

ROOT = Path(__file__).resolve().parents[1]
# what another process does between this process's listing of WAITING trials and its
# claim of the first: it claims trial 0 itself and keeps it
_CLAIM_FIRST = """
import sys
import optuna
from msexp.search.optuna_private import pop_waiting
from msexp.search.storage import open_storage
url = sys.argv[1] or None
study = optuna.load_study(study_name="won", storage=open_storage(url))
trial = pop_waiting(study)
assert trial.number == 0, trial.number
trial.set_user_attr("owner", "other-host:1")
"""


def claim_one(study, url: str | None, total: int):
    """One claim by a grid sweep's `TrialSource`, as a sweep makes it."""
    source = TrialSource(study, url, total, samples=False, kill_owned=kill_marked)
    try:
        return source.claim()
    finally:
        source.close()


@pytest.mark.parametrize("kind", ["journal", "sqlite"])
def test_a_claim_whose_write_lost_to_another_process_takes_the_next_trial(
        workdir: Path, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The other process claims trial 0 after this one listed it WAITING: this claim's
    WAITING -> RUNNING write on trial 0 loses, so it takes trial 1 and leaves trial 0 to
    its owner. Without the study lock (MySQL, before it was refused) this is how two
    processes met; a claim that ignores whether its write won takes trial 0 too."""
    url = None if kind == "journal" else f"sqlite:///{workdir / 'optuna.db'}"
    spec = load_spec(write(workdir / "won.yaml", """
        name: won
        experiment: mlp_digits
        params: {lr: [0.1, 0.2, 0.3]}
    """))
    study, _ = open_study(spec, url)
    storage = study._storage
    original = storage.set_trial_state_values
    raced: list[int] = []

    def after_the_other_claim(trial_id, state, values=None):
        if not raced:  # this process listed the trials; the other claims before it writes
            raced.append(trial_id)
            subprocess.run([sys.executable, "-c", _CLAIM_FIRST, url or ""], cwd=workdir,
                           check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        return original(trial_id, state, values)

    monkeypatch.setattr(storage, "set_trial_state_values", after_the_other_claim)
    trial = claim_one(study, url, spec.n_trials())
    assert raced == [study.trials[0]._trial_id], "the race happened at trial 0's claim"
    assert trial is not None and trial.number == 1
    trials = {t.number: (t.state, t.user_attrs.get(TrialKey.OWNER))
              for t in study.get_trials()}
    assert trials[0] == (TrialState.RUNNING, "other-host:1"), "trial 0 stays the other's"
    assert trials[1][0] is TrialState.RUNNING and trials[1][1] != "other-host:1"
    assert trials[2] == (TrialState.WAITING, None)


@pytest.mark.parametrize("url", ["mysql+pymysql://u:S3CRET@db.internal/optuna",
                                 "oracle://u:S3CRET@db.internal/optuna",
                                 "sqlite+pysqlite:///x.db"])
def test_a_storage_msexp_cannot_lock_is_refused_in_one_line(workdir: Path, url: str) -> None:
    shown = url.replace("S3CRET", "***")
    expected = (f"cannot use the Optuna storage {shown} (msexp locks a study across "
                "processes in a journal file, SQLite (sqlite:///FILE), PostgreSQL or "
                "msexp's gRPC proxy of PostgreSQL only; use one of them)")
    with pytest.raises(MsexpError) as refused:
        open_storage(url)
    assert str(refused.value) == expected
    with pytest.raises(MsexpError) as refused, study_lock(url):
        pass
    assert str(refused.value) == expected
    sweep = write(workdir / "s.yaml", "name: s\nexperiment: mlp_digits\n")
    result = CliRunner().invoke(app, ["sweep", str(sweep), "--storage", url],
                                env={"COLUMNS": "300"})
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [expected]


def test_an_in_memory_sqlite_study_is_locked_within_the_process() -> None:
    """No other process can open it, so the lock is this process's: a second holder
    waits for the first."""
    held, entered = threading.Event(), threading.Event()

    def second() -> None:
        held.wait()
        with study_lock("sqlite:///:memory:"):
            entered.set()

    thread = threading.Thread(target=second)
    thread.start()
    with study_lock("sqlite:///:memory:"):
        held.set()
        assert not entered.wait(0.5), "the second holder got in while the first held it"
    thread.join(timeout=60)
    assert entered.is_set()


def test_each_database_has_one_lock_engine_a_process() -> None:
    from msexp.search.lock import _lock_engine

    # mutation: one engine for every database (its key lost); no connection is made
    url = "postgresql+psycopg://u:p@127.0.0.1:9/a"
    engine = _lock_engine(url)
    assert _lock_engine(url) is engine
    assert _lock_engine(url[:-1] + "b") is not engine
    read, written = os.pipe()
    child = os.fork()
    if child == 0:  # a forked child must not share its parent's sessions
        os.write(written, b"own" if _lock_engine(url) is not engine else b"shared")
        os._exit(0)
    os.close(written)
    assert os.read(read, 10) == b"own"
    os.waitpid(child, 0)


def test_the_storages_msexp_can_lock_are_taken_and_another_is_refused_in_one_line() -> None:
    from msexp.search.lock import check_lockable

    # mutations: PostgreSQL URLs or journal files not recognized as lockable
    for url in (None, "runs/optuna.journal", "sqlite:///runs/optuna.db",
                "postgresql+psycopg://u:p@db/optuna", "grpc://db:13000"):
        check_lockable(url)
    with pytest.raises(MsexpError) as refused:
        check_lockable("mysql+pymysql://u:S3CRET@db/optuna")
    assert str(refused.value).startswith("cannot use the Optuna storage "
                                         "mysql+pymysql://u:***@db/optuna (msexp locks ")


def test_the_beat_goes_on_for_each_held_trial_past_one_told_meanwhile() -> None:
    import time

    import optuna

    from msexp.search.heartbeat import Beating

    class Beats:  # the storage's side of a heartbeat, every 10 ms
        def __init__(self) -> None:
            self.beats: list[int] = []

        def get_heartbeat_interval(self) -> float:
            return 0.01

        def record_heartbeat(self, trial_id: int) -> None:
            if trial_id == 3:
                raise optuna.exceptions.UpdateFinishedTrialError("told meanwhile")
            self.beats.append(trial_id)

    # mutation: the thread started without its target: nothing beats
    beats = Beats()
    beating = Beating(beats, lambda: [3, 4])
    deadline = time.monotonic() + 10
    while beats.beats.count(4) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    beating.close()
    assert beats.beats.count(4) >= 3 and set(beats.beats) == {4}
    assert not beating.thread.is_alive()


def test_a_claim_cut_short_before_its_owner_mark_is_taken_again(workdir: Path) -> None:
    """A process killed between its claim's WAITING -> RUNNING write and its owner mark
    leaves a RUNNING trial that no one owns; the next claim (under the study lock, which
    that claim held) queues it again without spending an attempt, and takes it first.
    # mutation: an ownerless RUNNING trial not stale: the claim takes trial 1, and trial 0
    stays RUNNING until its 60 s grace ends (seen in the loaded CI run as a trial left
    RUNNING by a finished sweep)."""
    spec = load_spec(write(workdir / "cut.yaml", """
        name: cut
        experiment: mlp_digits
        params: {lr: [0.1, 0.2]}
    """))
    study, _ = open_study(spec, None)
    cut = pop_waiting(study)  # the claim's first write, and no owner mark: its process died
    assert cut.number == 0 and TrialKey.OWNER not in study.trials[0].user_attrs
    trial = claim_one(study, None, spec.n_trials())
    assert trial is not None and trial.number == 0
    attrs = study.trials[0].user_attrs
    assert attrs[TrialKey.ATTEMPT] == 0, "a claim cut short spends no attempt"
    assert study.trials[1].state is TrialState.WAITING
