"""One MLflow point per step of a metric: a per-update series is not followed by a second
point at its last step (issue 37: `train_loss` had the last update and the epoch's mean)."""

from __future__ import annotations

import time
from collections import Counter

from msexp.execution.result import Status, TrialResult
from msexp.tracking.delivery import record_trial
from msexp.tracking.runs import Tracker
from msexp.training.records import Epoch


def points(tracker: Tracker, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in tracker.client.get_metric_history(run_id, key))


def test_a_series_holds_one_point_per_update_and_the_final_values_the_rest(
        tracker: Tracker, tmp_path) -> None:
    experiment = tracker.experiment_id("points")
    parent = tracker.parent_run(experiment, "s", {}, tmp_path / "none.yaml")
    epochs = [Epoch(1, 2, 1.0, {"train_loss": 0.7, "train_loss_epoch": 0.8,
                                "loss_scale": 512.0, "eval_loss": 0.9},
                    {"train_loss": [0.9, 0.7], "loss_scale": [1024.0, 512.0]}),
              Epoch(2, 4, 2.0, {"train_loss": 0.4, "train_loss_epoch": 0.5,
                                "loss_scale": 512.0, "eval_loss": 0.6},
                    {"train_loss": [0.6, 0.4], "loss_scale": [512.0, 512.0]})]
    # the final values as a trial reports them: the last update's loss and the last
    # epoch's mean, the scale, an eval figure that moved after the last epoch
    result = TrialResult(status=Status.COMPLETE, epochs=epochs, wall_s=3.0,
                         metrics={"train_loss": 0.4, "train_loss_epoch": 0.5,
                                  "loss_scale": 512.0, "eval_loss": 0.55,
                                  "samples_per_s": 100.0})
    run_id = record_trial(tracker, experiment, parent, 0, {"lr": 0.1}, result, time.time())
    assert points(tracker, run_id, "train_loss") == [(1, 0.9), (2, 0.7), (3, 0.6), (4, 0.4)]
    assert points(tracker, run_id, "loss_scale") == [(1, 1024.0), (2, 512.0), (3, 512.0),
                                                      (4, 512.0)]
    assert points(tracker, run_id, "eval_loss") == [(2, 0.9), (4, 0.55), (4, 0.6)], \
        "a per-epoch figure still gets its final value where it differs"
    assert points(tracker, run_id, "samples_per_s") == [(4, 100.0)]
    run = tracker.client.get_run(run_id)
    assert run.data.metrics["train_loss"] == 0.4, "the series' last point is the run's value"
    assert points(tracker, run_id, "train_loss_epoch") == [(2, 0.8), (4, 0.5)]
    assert run.data.metrics["train_loss_epoch"] == 0.5
    for key in ("train_loss", "train_loss_epoch", "loss_scale", "epoch", "wall_s"):
        steps = Counter(m.step for m in tracker.client.get_metric_history(run_id, key))
        assert max(steps.values()) == 1, (key, steps)
