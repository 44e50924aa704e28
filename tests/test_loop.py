"""The sweep loop's own rules, in-process: the value told to Optuna, experiment references,
and what an aborted sweep does with the trials it took."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from msexp.keys import TrialKey
from msexp.search import loop
from msexp.search.study import open_study
from msexp.spec import load_spec
from msexp.spec.file import Objective
from msexp.training.records import Epoch
from tests.conftest import write


def epochs(*values: float | None) -> list[Epoch]:
    return [Epoch(i + 1, i + 1, 0.0, {} if v is None else {"acc": v, "loss": 1.0})
            for i, v in enumerate(values)]


@pytest.mark.parametrize(("objective", "expected"), [
    (Objective(metric="acc"), 0.4),
    (Objective(metric="acc", reduce="best"), 0.9),
    (Objective(metric="acc", reduce="best", direction="minimize"), 0.2),
    (Objective(metric="loss", reduce="best"), 1.0),
])
def test_the_told_value_is_the_final_one_or_the_best_epochs(objective: Objective,
                                                            expected: float) -> None:
    history = epochs(0.2, None, math.nan, 0.9, 0.4)
    assert loop.objective_value(objective, {"acc": 0.4, "loss": 3.0}, history) == expected


def test_without_a_finite_epoch_value_best_falls_back_to_the_final_one() -> None:
    best = Objective(metric="acc", reduce="best")
    assert loop.objective_value(best, {"acc": 0.7}, epochs(None, math.nan)) == 0.7
    assert math.isnan(loop.objective_value(best, {}, []))
    assert math.isnan(loop.objective_value(Objective(metric="acc"), {"x": 1.0}, []))


def test_file_references_become_absolute_and_module_references_stay(workdir: Path) -> None:
    assert loop._experiment_ref("mlp_digits") == "mlp_digits"
    assert loop._experiment_ref("pkg.models:build") == "pkg.models:build"
    assert loop._experiment_ref("exp.py") == str(workdir / "exp.py")
    assert loop._experiment_ref("exp.py:build") == f"{workdir / 'exp.py'}:build"
    assert loop._experiment_ref("sub/exp") == str(workdir / "sub" / "exp")


class Silent:
    """A progress display that shows nothing."""

    def start(self, total: int, done: int) -> None: ...
    def trial_started(self, number: int, name: str, epochs: int | None) -> None: ...
    def trial_epoch(self, number: int, epoch: Epoch) -> None: ...
    def trial_done(self, number: int, result, best: str) -> None: ...


def test_an_aborted_sweep_queues_the_trials_it_took_again_without_an_attempt(
        workdir: Path) -> None:
    spec = load_spec(write(workdir / "s.yaml", """
        name: aborted
        experiment: mlp_digits
        params: {lr: [0.1, 0.2, 0.3, 0.4]}
        budget: {retries: 1}
    """))
    study, created = open_study(spec, None)
    sweep = loop.Sweep(spec, None, study, created, None, [], Silent())
    told, first, second = (sweep._next_trial() for _ in range(3))
    assert sorted(sweep.held) == [told.number, first.number, second.number]
    study.tell(told, 0.5)  # recorded, not yet let go: putting it back fails, the rest go on
    sweep._abort(RuntimeError("storage lost   postgresql://u:pw@h/db " + "x" * 400))
    sweep._abort(ValueError("a later error"))
    assert sweep._next_trial() is None, "a stopped sweep takes no more trials"
    sweep._release_held()
    sweep.mlflow.exception()  # the background MLflow opening is done
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
        params: {lr: [0.1, 0.2, 0.3]}
        objective: {metric: eval_loss, direction: minimize}
    """))
    study, created = open_study(spec, None)
    sweep = loop.Sweep(spec, None, study, created, None, [], Silent())
    assert sweep._best_text() == "-"
    for value in (0.5, 0.123456, 0.9):
        study.tell(sweep._next_trial(), value)
    assert sweep._best_text() == "eval_loss=0.1235 (#1)"
    pareto = load_spec(write(workdir / "p.yaml", """
        name: pareto
        experiment: mlp_digits
        params: {lr: [0.1, 0.2, 0.3]}
        objective: [{metric: eval_accuracy}, {metric: samples_per_s}]
    """))
    study, created = open_study(pareto, None)
    two = loop.Sweep(pareto, None, study, created, None, [], Silent())
    for values in ([0.9, 10.0], [0.8, 20.0], [0.7, 5.0]):
        study.tell(two._next_trial(), values)
    assert two._best_text() == "pareto 2"
    sweep.mlflow.exception(), two.mlflow.exception()  # the background MLflow opening is done


@pytest.mark.parametrize("pruner", ["none", "median"])
def test_each_epoch_goes_to_the_progress_and_only_a_pruner_gets_its_value(
        workdir: Path, pruner: str) -> None:
    spec = load_spec(write(workdir / f"{pruner}.yaml", f"""
        name: epochs-{pruner}
        experiment: mlp_digits
        params: {{lr: [0.1, 0.2]}}
        pruner: {{type: {pruner}, warmup_epochs: 0, startup_trials: 1}}
    """))
    study, created = open_study(spec, None)
    shown = []

    class Shown(Silent):
        def trial_epoch(self, number: int, epoch: Epoch) -> None:
            shown.append((number, epoch.epoch))

    sweep = loop.Sweep(spec, None, study, created, None, [], Shown())
    first = sweep._next_trial()
    on_epoch = sweep._epoch_hook(first)
    assert not on_epoch(Epoch(1, 5, 0.1, {"eval_accuracy": 0.9}))
    assert not on_epoch(Epoch(2, 10, 0.2, {"train_loss": 0.5})), "no objective: no report"
    assert not on_epoch(Epoch(3, 15, 0.3, {"eval_accuracy": float("nan")}))
    assert shown == [(0, 1), (0, 2), (0, 3)]
    reported = study.trials[0].intermediate_values
    assert reported == ({} if pruner == "none" else {1: 0.9})
    if pruner == "median":
        study.tell(first, 0.9)
        second = sweep._next_trial()
        assert sweep._epoch_hook(second)(Epoch(1, 5, 0.1, {"eval_accuracy": 0.1})), "pruned"
    sweep.mlflow.exception()  # the background MLflow opening is done


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
