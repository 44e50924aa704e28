"""The study's queue, in process: trials put back or failed, failed trials retried, dead
owners found, and a second process waiting for the study's creator."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

from msexp.console.hints import message
from msexp.errors import MsexpError
from msexp.execution.process_tree import kill_marked
from msexp.keys import StudyKey, TrialKey
from msexp.search import claims
from msexp.search import study as queue
from msexp.search.heartbeat import owner_is_dead
from msexp.search.optuna_private import pop_waiting


@pytest.fixture
def study() -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study()


def running(study: optuna.Study) -> int:
    return study.ask()._trial_id


def dead_owner() -> str:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    return f"{socket.gethostname()}:{gone}"


def orphaned(study: optuna.Study, owner: str, attempts: int | None = None
             ) -> optuna.trial.FrozenTrial:
    """A RUNNING trial of `owner`, with `attempts` counted before."""
    trial = study.ask()
    trial.set_user_attr(TrialKey.OWNER, owner)
    if attempts is not None:
        trial.set_user_attr(TrialKey.ATTEMPT, attempts)
    return study.trials[trial.number]


def test_a_lone_trial_within_its_retries_goes_back_to_waiting(study: optuna.Study) -> None:
    study.set_user_attr(StudyKey.RETRIES, 2)
    owner = dead_owner()
    assert claims.requeue_orphan(study, orphaned(study, owner, 1), 1) is True
    (trial,) = study.trials
    assert trial.state is TrialState.WAITING
    assert trial.user_attrs[TrialKey.ATTEMPT] == 2
    assert trial.user_attrs[TrialKey.ERROR] == (
        f"orchestrator {owner} died with only this trial running (2 of budget.retries 2 "
        "in a row)")


def test_a_lone_trial_out_of_retries_fails_in_one_named_line(
        study: optuna.Study, caplog: pytest.LogCaptureFixture) -> None:
    """A study without the retries attribute (not made by msexp) retries nothing."""
    recorded = []
    frozen = orphaned(study, "other-host:7")
    assert claims.requeue_orphan(study, frozen, 1,
                                 lambda error: recorded.append(error) or {"kept": 1}) is False
    (trial,) = study.trials
    error = ("orchestrator other-host:7 went silent (no heartbeat for 60 s) with only this "
             "trial running, 1 time in a row: it may take its orchestrator down; out of "
             "retries (budget.retries 0)")
    assert trial.state is TrialState.FAIL and recorded == [error]
    assert trial.user_attrs == {TrialKey.OWNER: "other-host:7", TrialKey.ATTEMPT: 1,
                                TrialKey.ERROR: error, "kept": 1}
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        f"study {study.study_name}: trial 0 failed: {error}; --retry-failed runs it again"]


def test_a_death_with_other_trials_running_is_not_counted_and_starts_the_count_over(
        study: optuna.Study) -> None:
    """Out of retries as the only trial running (1 attempt, retries 0), a trial whose
    orchestrator then dies with another trial running is queued again, its count reset,
    and so is the other: neither caused the death."""
    owner = dead_owner()
    first, second = orphaned(study, owner, 1), orphaned(study, owner)
    assert claims.requeue_stale_trials(study, kill_marked) == [first.number, second.number]
    for trial in study.trials:
        assert trial.state is TrialState.WAITING
        assert trial.user_attrs[TrialKey.ATTEMPT] == 0
        assert trial.user_attrs[TrialKey.ERROR] == (
            f"orchestrator {owner} died while it ran 2 trials: not counted against "
            "budget.retries")


def test_a_stop_keeps_the_count_of_attempts_and_marks_a_later_attempt(
        study: optuna.Study) -> None:
    # mutations: the count reset or raised by a put-back, no attempt mark on a first one
    counted, first = study.ask(), study.ask()
    counted.set_user_attr(TrialKey.ATTEMPT, 1)
    assert not claims.is_later_attempt(first)
    assert claims.put_back(study, counted, "interrupted") is True
    assert claims.put_back(study, first, "interrupted") is True
    assert [(t.state, t.user_attrs) for t in study.trials] == [
        (TrialState.WAITING, {TrialKey.ATTEMPT: 1, TrialKey.ERROR: "interrupted"}),
        (TrialState.WAITING, {TrialKey.ATTEMPT: 0, TrialKey.ERROR: "interrupted"})]
    assert claims.is_later_attempt(pop_waiting(study))


def test_each_failed_trial_is_rerun_once_with_its_params(study: optuna.Study) -> None:
    # 0: completed; 1: a failed grid point never sampled (its params are the enqueued
    # ones); 2: a failed sampled trial (no enqueued params)
    study.add_trial(optuna.trial.create_trial(params={"lr": 0.1}, value=1.0,
                    distributions={"lr": FloatDistribution(0.01, 1.0)}))
    study.enqueue_trial({"lr": 0.2}, user_attrs={TrialKey.GRID_POINT: 7, "other": "x"})
    grid = pop_waiting(study)
    study.tell(grid, state=TrialState.FAIL)
    sampled = study.ask()
    sampled.suggest_float("lr", 0.01, 1.0)
    study.tell(sampled, state=TrialState.FAIL)
    lr = sampled.params["lr"]
    # mutations: `break` at the completed trial, `count = 1`, the copy's params or
    # attributes (only the grid point and what it retries) lost
    assert claims.rerun_failed(study) == 2
    copies = [t for t in study.trials if t.state is TrialState.WAITING]
    assert [t.system_attrs["fixed_params"] for t in copies] == [{"lr": 0.2}, {"lr": lr}]
    assert [t.user_attrs for t in copies] == [{TrialKey.GRID_POINT: 7, TrialKey.RERUN_OF: 1},
                                              {TrialKey.RERUN_OF: 2}]
    assert claims.rerun_failed(study) == 0, "a trial with a rerun gets no other"
    assert claims.failed_trials(study) == []
    # mutation: the rerun set lost: only the completed trial has ended for good
    assert claims.finished_count(study) == 1


def test_a_trial_that_failed_before_its_params_is_rerun_with_none(
        study: optuna.Study) -> None:
    # mutation: no default for its enqueued params (None): the rerun could not be sampled
    study.tell(study.ask(), state=TrialState.FAIL)  # e.g. killed while it was claimed
    assert claims.rerun_failed(study) == 1
    copy = pop_waiting(study)
    assert study.trials[copy.number].system_attrs["fixed_params"] == {}
    assert copy.suggest_float("lr", 0.01, 1.0) >= 0.01


def test_an_owner_is_dead_only_when_it_is_a_gone_process_of_this_host() -> None:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    host = socket.gethostname()
    assert owner_is_dead(f"{host}:{done.stdout.strip()}")
    assert not owner_is_dead(f"{host}:{os.getpid()}")
    assert not owner_is_dead(f"other-{host}:{done.stdout.strip()}")
    assert not owner_is_dead(f"{host}:worker")
    assert not owner_is_dead("")


def test_a_second_process_waits_for_the_creator_to_finish_the_study(
        study: optuna.Study, monkeypatch: pytest.MonkeyPatch) -> None:
    """The creator finishes while the waiter polls (no sleep: the poll itself finishes it)."""
    polls = []

    def poll(seconds: float) -> None:
        assert seconds > 0
        polls.append(seconds)
        study.set_user_attr(StudyKey.FINGERPRINT, "done")

    monkeypatch.setattr(time, "sleep", poll)
    queue._wait_for_creator(study)
    assert len(polls) == 1, "it polls until the fingerprint appears, then returns"
    queue._wait_for_creator(study)
    assert len(polls) == 1, "a finished study needs no wait"


def test_only_silent_or_dead_owners_trials_are_put_back_and_their_leftovers_killed(
        study: optuna.Study) -> None:
    from msexp.keys import TrialEnv

    study.set_user_attr(StudyKey.RETRIES, 3)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    dead_owner = f"{socket.gethostname()}:{gone}"
    leftover = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                                env={**os.environ, TrialEnv.MARKER: f"{dead_owner}/1"})
    try:
        fresh = study.ask()  # no owner: a claim cut short (claims mark under the study lock)
        silent = study.ask()
        silent.set_user_attr(TrialKey.OWNER, "other-host:1")
        silent.set_user_attr(TrialKey.HEARTBEAT, 0.0)
        silent.set_user_attr(TrialKey.ATTEMPT, 1)
        orphan = study.ask()
        orphan.set_user_attr(TrialKey.OWNER, dead_owner)
        study.add_trial(optuna.trial.create_trial(value=1.0, user_attrs={
            TrialKey.OWNER: "other-host:1", TrialKey.HEARTBEAT: 0.0}))  # finished: never stale
        # mutations: `break` at the fresh trial, the attempt count or the dead owner lost
        assert claims.requeue_stale_trials(study, kill_marked) == [
            fresh.number, silent.number, orphan.number]
        assert leftover.wait(timeout=120) == -9, "a dead owner's leftovers are killed"
    finally:
        leftover.kill()
    states = {t.number: (t.state, t.user_attrs.get(TrialKey.ATTEMPT)) for t in study.trials}
    assert states == {fresh.number: (TrialState.WAITING, 0),
                      silent.number: (TrialState.WAITING, 2),
                      orphan.number: (TrialState.WAITING, 1),
                      3: (TrialState.COMPLETE, None)}


def test_a_new_grid_study_queues_its_capped_points_and_says_what_it_is(workdir) -> None:
    from msexp.spec import parse_spec

    spec = parse_spec("name: g\nexperiment: mlp_digits\nbudget: {trials: 2, retries: 3}\n"
                      "params: {lr: [0.1, 0.2, 0.3], thor.split_indices: [[0, 1]]}\n"
                      "fixed: {optimizer: thor}\n", "g.yaml")
    study, created = queue.open_study(spec, None)
    assert created
    waiting = study.get_trials(states=(TrialState.WAITING,))
    assert [(t.system_attrs["fixed_params"], t.user_attrs) for t in waiting] == [
        ({"lr": 0.1, "thor.split_indices": "[0, 1]"}, {TrialKey.GRID_POINT: 0}),
        ({"lr": 0.2, "thor.split_indices": "[0, 1]"}, {TrialKey.GRID_POINT: 1})]
    attrs = dict(study.user_attrs)
    assert re.fullmatch("[0-9a-f]{32}", attrs.pop(StudyKey.UID)), "a study of its own"
    assert attrs == {
        StudyKey.RETRIES: 3, StudyKey.TOTAL: 2, StudyKey.OBJECTIVES: ["eval_accuracy"],
        StudyKey.SWEEP: "g", StudyKey.EXPERIMENT: "mlp_digits",
        StudyKey.FINGERPRINT: queue.fingerprint(spec)}
    again, created = queue.open_study(spec, None)
    assert not created and len(again.trials) == 2, "a joining process queues nothing"
    assert pop_waiting(again).number == 0 and pop_waiting(again).number == 1
    assert pop_waiting(again) is None
    other = parse_spec("name: g\nexperiment: mlp_digits\nobjective: {metric: eval_loss, "
                       "direction: minimize}\n", "h.yaml")
    with pytest.raises(MsexpError) as caught:
        queue.open_study(other, None, "g")
    assert message(caught.value) == (
        "h.yaml: study 'g' in mlruns/optuna.journal was created from a different sweep file; "
        "to start its next version: msexp sweep h.yaml --restart --study g (or pass --study "
        "NEW_NAME)")


def test_the_creator_samples_with_the_sweep_seed_and_a_joiner_with_its_own(
        workdir, monkeypatch: pytest.MonkeyPatch) -> None:
    from msexp.os_tools.identity import owner
    from msexp.spec import parse_spec

    spec = parse_spec("name: r\nexperiment: mlp_digits\nmethod: random\nbudget: {trials: 4}\n"
                      "fixed: {seed: 5}\nparams: {lr: {low: 0.001, high: 1.0, log: true}}\n",
                      "r.yaml")
    slept = []
    monkeypatch.setattr(time, "sleep", slept.append)
    created, made = queue.open_study(spec, None)
    assert made and slept == [], "the creator does not wait for itself"
    joined, made = queue.open_study(spec, None)
    assert not made

    def first_lr(study: optuna.Study) -> float:
        return study.ask({"lr": FloatDistribution(0.001, 1.0, log=True)}).params["lr"]

    def alone(seed: int) -> float:
        return first_lr(optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed)))

    assert first_lr(created) == alone(5)
    assert first_lr(joined) == alone(queue.sampler_seed(5, owner())) != alone(5)


def test_a_study_of_other_directions_or_another_sweep_is_refused_naming_the_storage(
        workdir) -> None:
    from msexp.spec import parse_spec

    url = f"sqlite:///{workdir / 'o.db'}"
    optuna.create_study(study_name="d", storage=url, direction="minimize")  # not msexp's
    spec = parse_spec("name: d\nexperiment: mlp_digits\n", "d.yaml")
    with pytest.raises(MsexpError) as caught:
        queue.open_study(spec, url)
    assert str(caught.value) == "d.yaml: study 'd' has other objective directions"
    queue.open_study(spec, url, "e")
    other = parse_spec("name: d\nexperiment: lenet_digits\n", "f.yaml")
    with pytest.raises(MsexpError) as caught:
        queue.open_study(other, url, "e")
    assert message(caught.value) == (
        f"f.yaml: study 'e' in {url} was created from a different sweep file; to start its "
        f"next version: msexp sweep f.yaml --restart --study e --storage {url} (or pass "
        "--study NEW_NAME)")


def test_the_budget_counts_started_trials_but_not_reruns(study: optuna.Study) -> None:
    study.add_trial(optuna.trial.create_trial(value=1.0))
    study.ask()
    study.enqueue_trial({}, user_attrs={TrialKey.RERUN_OF: 0})
    study.enqueue_trial({})
    assert claims.started_count(study) == 2
    pop_waiting(study)  # the rerun starts: still not a trial of its own
    assert claims.started_count(study) == 2
