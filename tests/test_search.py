"""The search's own rules, in-process: the value told to Optuna, experiment references,
what an aborted sweep does with the trials it took, the best so far, the pruning bridge,
and claims that race across processes."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from msexp.errors import describe
from msexp.execution.process_tree import kill_marked
from msexp.execution.result import Status, TrialResult
from msexp.execution.subscribers import CONTINUE, PRUNE, TrialInfo
from msexp.keys import TrialKey
from msexp.search import requests, tell
from msexp.search.pruning import PruningBridge
from msexp.search.source import TrialSource
from msexp.search.study import open_study
from msexp.spec import load_spec
from msexp.spec.file import Objective
from msexp.training.records import Epoch
from tests.conftest import write
from tests.fault.conftest import wait_for

ROOT = Path(__file__).resolve().parents[1]


def epochs(*values: float | None) -> list[Epoch]:
    """Epochs of `acc` (None: an epoch without it); `loss` beside it, never the answer."""
    return [Epoch(i + 1, i + 1, 0.0, {} if v is None else {"acc": v, "loss": 2.0 + v})
            for i, v in enumerate(values)]


FINAL = {"acc": 0.45, "loss": 3.0}  # the trial's final metrics: no epoch's value


# the best epoch first, in the middle and last, for either direction, with epochs that
# lack the metric or hold NaN between: every wrong reduction (the last epoch, the first,
# the other direction, all but the last or the first, the final metric) tells another value
@pytest.mark.parametrize(("history", "direction", "best"), [
    ((0.9, None, 0.2, 0.4), "maximize", 0.9),
    ((0.3, 0.8, math.nan, 0.6), "maximize", 0.8),
    ((0.5, None, 0.7, math.nan, 0.9), "maximize", 0.9),
    ((0.2, 0.7, None, 0.5), "minimize", 0.2),
    ((0.5, math.nan, 0.1, 0.3), "minimize", 0.1),
    ((0.6, 0.4, None, 0.1), "minimize", 0.1),
], ids=["max-first", "max-middle", "max-last", "min-first", "min-middle", "min-last"])
def test_the_told_value_is_the_final_one_or_the_best_epochs(
        history: tuple[float | None, ...], direction: str, best: float) -> None:
    reduced = Objective(metric="acc", reduce="best", direction=direction)
    assert tell.objective_value(reduced, FINAL, epochs(*history)) == best
    final = Objective(metric="acc", direction=direction)
    assert tell.objective_value(final, FINAL, epochs(*history)) == 0.45


def test_without_a_finite_epoch_value_best_falls_back_to_the_final_one() -> None:
    best = Objective(metric="acc", reduce="best")
    assert tell.objective_value(best, {"acc": 0.7}, epochs(None, math.nan)) == 0.7
    assert math.isnan(tell.objective_value(best, {}, []))
    assert math.isnan(tell.objective_value(Objective(metric="acc"), {"x": 1.0}, []))


def test_file_references_become_absolute_and_module_references_stay(workdir: Path) -> None:
    assert requests._experiment_ref("mlp_digits") == "mlp_digits"
    assert requests._experiment_ref("pkg.models:build") == "pkg.models:build"
    assert requests._experiment_ref("exp.py") == str(workdir / "exp.py")
    assert requests._experiment_ref("exp.py:build") == f"{workdir / 'exp.py'}:build"
    assert requests._experiment_ref("sub/exp") == str(workdir / "sub" / "exp")


def source_of(spec, study) -> TrialSource:
    return TrialSource(study, None, spec.n_trials(), spec.method.value != "grid",
                       kill_owned=kill_marked)


def test_an_aborted_sweep_queues_the_trials_it_took_again_without_an_attempt(
        workdir: Path) -> None:
    spec = load_spec(write(workdir / "s.yaml", """
        name: aborted
        experiment: mlp_digits
        params: {lr: [0.1, 0.2, 0.3, 0.4]}
        budget: {retries: 1}
    """))
    study, _ = open_study(spec, None)
    source = source_of(spec, study)
    told, first, second = (source.claim() for _ in range(3))
    assert sorted(source.held) == [told.number, first.number, second.number]
    study.tell(told, 0.5)  # recorded, not yet let go: putting it back fails, the rest go on
    error = RuntimeError("storage lost   postgresql://u:pw@h/db " + "x" * 400)
    source.release_all(f"sweep stopped: {describe(error)}"[:1000])
    source.close()
    study = optuna.load_study(study_name=study.study_name, storage=study._storage)
    states = {t.number: t.state for t in study.trials}
    assert states == {0: TrialState.COMPLETE, 1: TrialState.WAITING, 2: TrialState.WAITING,
                      3: TrialState.WAITING}
    text = "storage lost postgresql://u:***@h/db " + "x" * 400
    for number in (first.number, second.number):
        attrs = study.trials[number].user_attrs
        assert attrs[TrialKey.ATTEMPT] == 0, "an abort is not the trial's fault"
        assert attrs[TrialKey.ERROR] == f"sweep stopped: RuntimeError: {text[:300]}"


def test_the_progress_shows_the_best_trial_so_far_or_the_pareto_size(workdir: Path) -> None:
    spec = load_spec(write(workdir / "b.yaml", """
        name: best
        experiment: mlp_digits
        params: {lr: [0.1, 0.2, 0.3, 0.4]}
        objective: {metric: eval_loss, direction: minimize}
    """))
    study, _ = open_study(spec, None)
    source = source_of(spec, study)
    assert tell.best_so_far(study, spec) == "-"
    # the best first, then last, then in the middle; the largest is never the best
    for value, shown in ((0.5, "0.5 (#0)"), (0.9, "0.5 (#0)"), (0.123456, "0.1235 (#2)"),
                         (0.7, "0.1235 (#2)")):
        study.tell(source.claim(), value)
        assert tell.best_so_far(study, spec) == f"eval_loss={shown}"
    pareto = load_spec(write(workdir / "p.yaml", """
        name: pareto
        experiment: mlp_digits
        params: {lr: [0.1, 0.2, 0.3, 0.4]}
        objective: [{metric: eval_accuracy}, {metric: samples_per_s}]
    """))
    study, _ = open_study(pareto, None)
    two = source_of(pareto, study)
    # the second is dominated (by the third); all four, or all but the first or the last,
    # would make another count
    for values in ([0.9, 10.0], [0.7, 5.0], [0.8, 20.0], [0.6, 30.0]):
        study.tell(two.claim(), values)
    assert tell.best_so_far(study, pareto) == "pareto 3"
    source.close(), two.close()



def test_optuna_keeps_an_errors_cause_at_its_end_and_a_shorter_error_whole(
        workdir: Path) -> None:
    # mutation (issue 40): the error cut to its first 100 characters, losing the cause
    spec = load_spec(write(workdir / "e.yaml", """
        name: errors
        experiment: mlp_digits
        params: {lr: [0.1, 0.2]}
    """))
    study, _ = open_study(spec, None)
    source = source_of(spec, study)
    noise = "\n".join(f"[WARNING] ME(4242:1,MainProcess):2026-11-26-10:00:{i:02d}.123.456 "
                      f"[mindspore/train/serialization.py:{1000 + i}] a warning" for i in range(40))
    cause = "ValueError: For 'MatMul', the input dimensions must be equal, but got 64 and 32."
    long = f"msrun exited with code 1; last lines of worker_0.log:\n{noise}\n{cause}"
    short = f"RuntimeError: {'x' * 800}\n{cause}"
    for error in (long, short):
        handle = source.claim()
        tell.tell(study, spec, handle, TrialInfo(handle.number, f"#{handle.number}", {}, {},
                                                 0.0), TrialResult(Status.FAILED, error=error))
        source.done(handle)
    source.close()
    kept = [t.user_attrs[TrialKey.ERROR] for t in optuna.load_study(
        study_name="errors", storage=study._storage).trials]
    assert len(long) > 4000 and len(short) < 1000
    assert kept[1] == short, "an error within the limit is kept whole"
    assert len(kept[0]) <= 1000
    assert kept[0].startswith("msrun exited with code 1; last lines of worker_0.log:\n")
    assert kept[0].endswith(long[-600:]), "the last lines, which name the cause"
    assert "[...]" in kept[0]

@pytest.mark.parametrize("pruner", ["none", "median"])
def test_only_a_pruner_gets_each_epochs_finite_objective_and_may_stop_the_trial(
        workdir: Path, pruner: str) -> None:
    spec = load_spec(write(workdir / f"{pruner}.yaml", f"""
        name: epochs-{pruner}
        experiment: mlp_digits
        params: {{lr: [0.1, 0.2]}}
        pruner: {{type: {pruner}, warmup_epochs: 0, startup_trials: 1}}
    """))
    study, _ = open_study(spec, None)
    source, bridge = source_of(spec, study), PruningBridge(spec)
    first = TrialInfo(0, "#0", {}, {}, 0.0, handle=source.claim())
    for epoch in (Epoch(1, 5, 0.1, {"eval_accuracy": 0.9}),
                  Epoch(2, 10, 0.2, {"train_loss": 0.5}),  # no objective: no report
                  Epoch(3, 15, 0.3, {"eval_accuracy": float("nan")}),
                  Epoch(4, 20, 0.4, {"eval_accuracy": 0.7, "train_loss": 0.3})):
        assert bridge.on_trial_epoch(first, epoch) == CONTINUE
    reported = study.trials[0].intermediate_values
    assert reported == ({} if pruner == "none" else {1: 0.9, 4: 0.7})  # the first and last
    if pruner == "median":
        study.tell(first.handle, 0.9)
        second = TrialInfo(1, "#1", {}, {}, 0.0, handle=source.claim())
        assert bridge.on_trial_epoch(second, Epoch(1, 5, 0.1, {"eval_accuracy": 0.1})) == \
            PRUNE, "pruned: it ends PRUNED, with no reason to fail it"
    source.close()


_CLAIM_AND_FAIL_FIRST = """
import optuna
from msexp.search.optuna_private import pop_waiting
from msexp.search.storage import open_storage
study = optuna.load_study(study_name="race", storage=open_storage(None))
trial = pop_waiting(study)
assert trial.number == 0
study.tell(trial, state=__import__("optuna").trial.TrialState.FAIL)
"""


def test_a_claim_from_a_listing_another_process_outdated_takes_the_next_trial(
        workdir: Path, monkeypatch) -> None:
    """Two journal clients in two processes. This one lists trials 0 and 1 as WAITING;
    before it claims 0, the other process claims trial 0 and fails it. The claim must
    go on to trial 1, not raise (mutation: no UpdateFinishedTrialError guard) nor take
    trial 0 (mutation: the claim's result ignored)."""
    spec = load_spec(write(workdir / "race.yaml", """
        name: race
        experiment: mlp_digits
        params: {lr: [0.1, 0.2]}
    """))
    study, _ = open_study(spec, None)
    storage = study._storage
    original = storage.set_trial_state_values
    raced: list[int] = []

    def outdated(trial_id, state, values=None):
        if not raced:  # between this process's listing and its claim
            raced.append(trial_id)
            subprocess.run([sys.executable, "-c", _CLAIM_AND_FAIL_FIRST], cwd=workdir,
                           check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        return original(trial_id, state, values)

    monkeypatch.setattr(storage, "set_trial_state_values", outdated)
    source = source_of(spec, study)
    try:
        trial = source.claim()
    finally:
        source.close()
    assert raced and trial is not None and trial.number == 1
    states = {t.number: t.state for t in study.get_trials()}
    assert states == {0: TrialState.FAIL, 1: TrialState.RUNNING}


_CLAIM_UNTIL_EMPTY = """
import os, time
import msexp.search.source
from msexp.execution.process_tree import kill_marked
from msexp.search.source import TrialSource
from msexp.search.study import open_study
from msexp.spec import load_spec
open(f"ready-{os.getpid()}", "w").close()
while not os.path.exists("go"):  # all three start at once
    time.sleep(0.01)
count = msexp.search.source.started_count
def slow_count(study):  # a wide gap between the budget check and the ask
    started = count(study)
    time.sleep(0.2)
    return started
msexp.search.source.started_count = slow_count
for round in range(ROUNDS):  # each round's first claims race
    spec = load_spec(f"budget-{round}.yaml")
    study, _ = open_study(spec, None)
    source = TrialSource(study, None, spec.n_trials(), True, kill_owned=kill_marked)
    while (trial := source.claim()) is not None:
        trial.suggest_float("lr", 0.001, 0.1)
        study.tell(trial, 0.5)
        source.done(trial)
    source.close()
"""
ROUNDS = 3


@pytest.mark.slow  # over 3 s: the fast tier stays under 5 min
def test_no_number_of_processes_exceeds_the_trial_budget(workdir: Path) -> None:
    """Three processes on TPE studies of 1 trial each (mutation: the budget check and
    the ask outside the study lock)."""
    specs = [load_spec(write(workdir / f"budget-{i}.yaml", f"""
        name: budget-{i}
        experiment: mlp_digits
        method: tpe
        budget: {{trials: 1}}
        params: {{lr: {{low: 0.001, high: 0.1}}}}
    """)) for i in range(ROUNDS)]
    for spec in specs:
        open_study(spec, None)
    three_at_once(_CLAIM_UNTIL_EMPTY.replace("ROUNDS", str(ROUNDS)), workdir)
    for spec in specs:
        study = open_study(spec, None)[0]
        assert [t.state for t in study.get_trials()] == [TrialState.COMPLETE]


def test_the_grid_queue_puts_the_trials_of_one_graph_next_to_each_other(workdir: Path) -> None:
    # mutation: the grid queue is not grouped by graph signature (test_warm counts compiles)
    spec = load_spec(write(workdir / "g.yaml", """
        name: grouped
        experiment: mlp_digits
        params: {lr: [0.01, 0.02, 0.03], micro_size: [1, 2]}
    """))
    study, _ = open_study(spec, None)
    queued = [spec.space.suggest(study.ask()) for _ in study.trials]  # in the queue's order
    queued = [(point["micro_size"], point["lr"]) for point in queued]
    assert queued == [(1, 0.01), (1, 0.02), (1, 0.03), (2, 0.01), (2, 0.02), (2, 0.03)]


_RERUN_FAILED = """
import os, time
from msexp.search.claims import rerun_failed
from msexp.search.study import open_study
from msexp.spec import load_spec
study, _ = open_study(load_spec("retry.yaml"), None)
listed = study.get_trials
def slow_listing(*args, **kwargs):  # a wide gap between reading the trials and the copies
    trials = listed(*args, **kwargs)
    time.sleep(0.3)
    return trials
study.get_trials = slow_listing
open(f"ready-{os.getpid()}", "w").close()
while not os.path.exists("go"):
    time.sleep(0.01)
rerun_failed(study)
"""


@pytest.mark.slow  # processes racing: `.ci/run` runs it in its loaded run (tests/README.md)
def test_processes_that_rerun_failed_trials_at_once_rerun_each_once(workdir: Path) -> None:
    """Three `--retry-failed` at once after a grid whose every point failed (mutation:
    the reruns outside the study lock)."""
    spec = load_spec(write(workdir / "retry.yaml", """
        name: retry
        experiment: mlp_digits
        params: {lr: [0.1, 0.2]}
    """))
    study, _ = open_study(spec, None)
    source = source_of(spec, study)
    while (trial := source.claim()) is not None:
        study.tell(trial, state=TrialState.FAIL)
        source.done(trial)
    source.close()
    three_at_once(_RERUN_FAILED, workdir)
    copies = [t.user_attrs.get(TrialKey.RERUN_OF) for t in open_study(spec, None)[0].trials]
    assert sorted(c for c in copies if c is not None) == [0, 1]


def test_a_trial_whose_claim_was_lost_is_not_put_back_by_its_old_owner(workdir: Path) -> None:
    """A sweep frozen past its heartbeat: another process queued its trial again and
    claimed it. The old owner must leave it alone (fencing)."""
    spec = load_spec(write(workdir / "fence.yaml", """
        name: fence
        experiment: mlp_digits
        params: {lr: [0.1]}
    """))
    study, _ = open_study(spec, None)
    frozen = source_of(spec, study)
    trial = frozen.claim()
    assert frozen.still_held(trial)
    trial.set_user_attr(TrialKey.OWNER, "other-host:1")  # what a new owner's claim writes
    assert not frozen.still_held(trial)
    frozen.put_back(trial, "interrupted")
    frozen.close()
    (kept,) = study.get_trials()
    assert kept.state is TrialState.RUNNING and kept.user_attrs[TrialKey.OWNER] == "other-host:1"


def test_an_rdb_study_tells_silent_trials_by_optunas_own_heartbeat(workdir: Path) -> None:
    """RDB storages beat in Optuna's heartbeat table; a trial whose beat there is older
    than the grace period is queued again, counting an attempt."""
    import sqlalchemy

    url = f"sqlite:///{workdir / 'optuna.db'}"
    spec = load_spec(write(workdir / "rdb.yaml", """
        name: rdb
        experiment: mlp_digits
        params: {lr: [0.1, 0.2]}
        budget: {retries: 1}
    """))
    study, _ = open_study(spec, url)
    source = TrialSource(study, url, spec.n_trials(), False, kill_owned=kill_marked)
    silent, alive = source.claim(), source.claim()
    source.close()
    for trial in (silent, alive):  # as claimed by another, live process
        trial.set_user_attr(TrialKey.OWNER, "other-host:1")
    engine = sqlalchemy.create_engine(url)
    with engine.begin() as connection:  # the beat of `silent` an hour old, in Optuna's table
        connection.execute(sqlalchemy.text(
            "UPDATE trial_heartbeats SET heartbeat = :old WHERE trial_id = :id"),
            {"old": "2000-01-01 00:00:00", "id": silent._trial_id})
    engine.dispose()
    again = TrialSource(study, url, spec.n_trials(), False, kill_owned=kill_marked)
    assert again.pending() == 1, "the silent trial is queued again, the live one is not"
    again.close()
    states = {t.number: (t.state, t.user_attrs.get(TrialKey.ATTEMPT)) for t in study.trials}
    assert states == {silent.number: (TrialState.WAITING, 1),
                      alive.number: (TrialState.RUNNING, None)}


def three_at_once(code: str, folder: Path) -> None:
    """Run `code` in three processes that start together (each writes ready-PID, then
    waits for `go`), and wait for all three to succeed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    processes = [subprocess.Popen([sys.executable, "-c", code], cwd=folder, env=env)
                 for _ in range(3)]
    wait_for("three processes ready", lambda: len(list(folder.glob("ready-*"))) == 3)
    (folder / "go").touch()
    assert [p.wait(timeout=600) for p in processes] == [0, 0, 0]


def test_a_trial_without_its_objectives_fails_naming_what_it_reported(workdir: Path) -> None:
    """judge, in-process: what a trial is told as, and its error, redacted."""
    # mutations: the objectives not zipped, the error lost or naming the second metric's
    # neighbour, the error not redacted
    spec = load_spec(write(workdir / "j.yaml", """
        name: judged
        experiment: mlp_digits
        objective:
          - {metric: eval_accuracy, direction: maximize}
          - {metric: eval_loss, direction: minimize}
        params: {lr: [0.1, 0.2]}
    """))
    trial = TrialInfo(0, "#0", {"api_token": "S3CRET-tok"}, {}, 0.0)
    raw = TrialResult(Status.COMPLETE, {"eval_acc": 0.9, "val_loss": 0.3})
    wrong_names = tell.judge(spec, trial, raw)
    assert wrong_names.kept == {TrialKey.MISSING: ["eval_accuracy", "eval_loss"]}
    assert wrong_names.result.status is Status.FAILED
    assert wrong_names.result.error == (
        "objective not available: eval_accuracy, eval_loss "
        "(it reported eval_acc, val_loss; did you mean eval_acc?)")
    assert (raw.status, raw.error) == (Status.COMPLETE, ""), "a new value: the raw one kept"
    leaked = tell.judge(spec, trial, TrialResult(Status.FAILED,
                                                 error="token S3CRET-tok in a traceback"))
    assert leaked.kept == {}
    assert (leaked.result.status, leaked.result.error) == (Status.FAILED,
                                                           "token *** in a traceback")
    whole = tell.judge(spec, trial, TrialResult(Status.COMPLETE, {"eval_accuracy": 0.9,
                                                                  "eval_loss": 0.3}),
                       unreported="no eval_loss by epoch 2")
    assert whole.kept == {} and (whole.result.status, whole.result.error) == (
        Status.COMPLETE, "")
    stopped = tell.judge(spec, trial, TrialResult(Status.PRUNED, {"eval_accuracy": 0.9,
                                                                  "eval_loss": 0.3}),
                         unreported="no eval_loss by epoch 2")
    assert (stopped.result.status, stopped.result.error) == (Status.FAILED,
                                                             "no eval_loss by epoch 2")


def test_a_held_trial_another_process_took_is_dropped_and_told_one_the_storage_lost_is_kept(
        workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # mutations: the listeners not kept; a trial kept as None (dropped) when its storage
    # cannot be read
    spec = load_spec(write(workdir / "h.yaml", """
        name: held
        experiment: mlp_digits
        params: {lr: [0.1, 0.2]}
    """))
    study, _ = open_study(spec, None)
    source, lost = source_of(spec, study), []
    source.listen(lost.append, lambda frozen, error: {})
    first, second = source.claim(), source.claim()
    storage = study._storage
    storage.set_trial_user_attr(second._trial_id, TrialKey.OWNER, "otherhost:1")
    real_get_trial = storage.get_trial
    monkeypatch.setattr(storage, "get_trial", lambda trial_id: (_ for _ in ()).throw(
        OSError("the storage is down")) if trial_id == first._trial_id else real_get_trial(
        trial_id))
    assert source._held_ids() == [first._trial_id]
    assert lost == [second.number]
    assert list(source.held) == [first.number]
    source.close()


def test_a_trials_name_is_its_number_and_each_assigned_value() -> None:
    """Mutation `prepare._described` 7: the name's values all `None`."""
    from msexp.search.prepare import _described
    from msexp.spec import parse_spec

    spec = parse_spec("name: k\nexperiment: lenet_digits\nparams:\n  amp_level: [O1, O2, O3]\n"
                      "  lr: [0.1, 0.01]\n", "k.yaml")
    trial = _described(spec, 3, {"amp_level": "O2", "lr": 0.01}, 0.0)
    assert trial.name == "#3 amp_level=O2 lr=0.01"
    assert trial.logged["experiment"] == "lenet_digits" and trial.params["lr"] == 0.01


def test_a_told_trial_keeps_the_batch_norm_layers_its_network_split() -> None:
    """What `msexp report` reads to say why micro_size moved the loss. Mutation (issue 53):
    `tell.tell` 13 (the statistics asked of `None`: the tell raises)."""
    from msexp.spec import parse_spec
    from msexp.training.records import BatchStatistics

    spec = parse_spec("name: k\nexperiment: lenet_digits\nparams:\n  micro_size: [1, 2]\n",
                      "k.yaml")
    study = optuna.create_study(study_name="k", direction="maximize")
    handle = study.ask()
    split = BatchStatistics(layers=2, micro_batch=16, batch=32, dropout=1)
    tell.tell(study, spec, handle, TrialInfo(0, "#0 micro_size=2", {"micro_size": 2}, {}, 0.0),
              TrialResult(Status.COMPLETE, metrics={spec.objectives[0].metric: 0.5},
                          batch_statistics=split))
    (told,) = study.get_trials(deepcopy=False)
    assert told.value == 0.5
    assert told.user_attrs[TrialKey.BATCH_STATISTICS] == {
        "layers": 2, "micro_batch": 16, "batch": 32, "dropout": 1, "seeded": 0}


def test_only_a_built_in_experiments_hosts_import_mindspore_ahead(
        workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A command experiment's trials run a script: their hosts import no MindSpore ahead
    (seconds and a device's memory each). Mutations (issue 53): `sweep.run_sweep` 7, 8 and
    `slots.run_in_slots` 18 (preload by default, or the other way round)."""
    from msexp.search import slots, sweep

    preloads = []

    class Pool:
        def __init__(self, count: int, preload: bool = True) -> None:
            preloads.append(preload)

        def __enter__(self) -> Pool:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

    monkeypatch.setattr(sweep, "HostPool", Pool)
    monkeypatch.setattr(slots, "HostPool", Pool)
    monkeypatch.setattr(sweep, "_run", lambda *args: "outcome")
    write(workdir / "train.py", "print('acc: 1')\n")
    command = load_spec(write(workdir / "c.yaml", """
        name: scripted
        experiment: {command: python train.py}
        objective: {metric: acc, direction: maximize}
        params: {lr: [0.01]}
    """))
    built_in = load_spec(write(workdir / "b.yaml", """
        name: built-in
        experiment: mlp_digits
        params: {lr: [0.01]}
    """))
    for spec in (command, built_in):
        assert sweep.run_sweep(spec, []) == "outcome"
        assert slots.run_in_slots(spec, 1, [], None, None, None) == "outcome"
    assert preloads == [False, False, True, True]


@pytest.mark.parametrize(("outage", "stale"), [(False, [0]), (True, [])])
def test_after_a_storage_outage_a_missed_heartbeat_says_nothing_of_its_owner(
        monkeypatch: pytest.MonkeyPatch, outage: bool, stale: list[int]) -> None:
    """Another host's trial whose heartbeat is an hour old is stale; not where this process
    found the storage down lately (its heartbeats could not land). Mutation (issue 53):
    `claims.TrialHeartbeat._silent` 7 (after an outage every other owner's trial stale)."""
    import time

    from msexp.search import claims

    monkeypatch.setattr(claims, "outage_within", lambda storage, seconds: outage)
    study = optuna.create_study(study_name="beats")
    for beat in (time.time() - 3600, time.time()):
        trial = study.ask()
        trial.set_user_attr(TrialKey.OWNER, "elsewhere:4242")
        trial.set_user_attr(TrialKey.HEARTBEAT, beat)
    assert [t.number for t in claims.TrialHeartbeat(study).stale_trials()] == stale


def test_a_stale_trial_out_of_retries_fails_recorded_by_the_callers_on_fail() -> None:
    """An orphan past `budget.retries` (0 here) is failed once the caller recorded it (its
    MLflow run, in a sweep). Mutation (issue 53): `claims.requeue_stale_trials` 31 (the
    caller's `on_fail` not passed on: the failure recorded nowhere)."""
    import time

    from msexp.search import claims

    study = optuna.create_study(study_name="orphans")
    trial = study.ask()
    trial.set_user_attr(TrialKey.OWNER, "elsewhere:4242")
    trial.set_user_attr(TrialKey.HEARTBEAT, time.time() - 3600)
    recorded = []

    def on_fail(frozen, error: str) -> dict:
        recorded.append((frozen.number, error))
        return {"recorded": "run-0"}

    assert claims.requeue_stale_trials(study, lambda owner: None, on_fail=on_fail) == [0]
    (failed,) = study.get_trials(deepcopy=False)
    assert failed.state is TrialState.FAIL and failed.user_attrs["recorded"] == "run-0"
    assert recorded == [(0, failed.user_attrs[TrialKey.ERROR])]
    assert recorded[0][1].startswith("orchestrator elsewhere:4242 went silent")
