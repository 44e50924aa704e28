"""Warm trials: a worker reuses the graphs of its last trial for the next trial of the same
graph signature, and the warm trial computes exactly what the same trial does cold."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import psutil
import pytest
import yaml

from msexp.execution.host import Host
from msexp.execution.protocol import TrialRequest
from msexp.execution.result import Status
from msexp.experiment import load_experiment
from msexp.knobs import graph_params
from msexp.spec import trial_params
from tests.conftest import ASSETS, ROOT, child_runs, msexp_cmd
from tests.fault.conftest import wait_for

pytestmark = pytest.mark.slow  # trials in worker processes (tests/README.md: tiers)

TIMEOUT_S = 600  # a deadline for a hang, on a loaded 2-core machine
TRAINING = ("eval_loss", "eval_accuracy", "train_loss", "loss_scale", "overflow_steps",
            "skipped_updates", "epochs_to_target")


def request(folder: Path, name: str, experiment: str = "mlp_digits", cold: bool = False,
            **params) -> TrialRequest:
    return TrialRequest(experiment, trial_params(experiment, params), folder / name, cold=cold)


def same_training(warm, cold) -> None:
    """Bit-identical: every training metric, final and per epoch."""
    assert warm.status is cold.status is Status.COMPLETE, (warm.error, cold.error)
    assert {k: v for k, v in warm.metrics.items() if k in TRAINING} == \
           {k: v for k, v in cold.metrics.items() if k in TRAINING}
    assert [(e.epoch, e.metrics, e.series) for e in warm.epochs] == \
           [(e.epoch, e.metrics, e.series) for e in cold.epochs]


CASES = {
    "mlp O2 dynamic": dict(amp_level="O2", loss_scale="dynamic", loss_scale_value=1024.0,
                           loss_scale_window=5),
    "lenet O2 dynamic": dict(experiment="lenet_digits", amp_level="O2", loss_scale="dynamic",
                             loss_scale_value=1024.0, loss_scale_window=5, epochs=1),
    "thor": {"optimizer": "thor", "thor.frequency": 3, "lr_schedule": "cosine"},
    "micro_size 4": dict(micro_size=4, weight_decay=1e-4, warmup_epochs=1),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_a_warm_trial_equals_the_same_trial_run_cold(case, tmp_path):
    given = {"epochs": 2, "batch_size": 64, **CASES[case]}
    worker = Host(cwd=ROOT)
    try:
        first = worker.run(request(tmp_path, "a", lr=0.05, seed=1, **given), TIMEOUT_S)
        warm = worker.run(request(tmp_path, "b", lr=0.02, seed=2, momentum=0.8, **given),
                          TIMEOUT_S)
        cold = worker.run(request(tmp_path, "c", lr=0.02, seed=2, momentum=0.8, cold=True,
                                  **given), TIMEOUT_S)
    finally:
        worker.kill()
    assert first.status is Status.COMPLETE and not first.warm, first.error
    assert warm.warm and warm.pid == first.pid  # same process, no compile
    assert not cold.warm and cold.pid != warm.pid  # --cold: a fresh process compiles
    same_training(warm, cold)
    assert warm.metrics["eval_loss"] != first.metrics["eval_loss"]  # it did not replay `first`


def test_another_signature_compiles_anew_and_stays_identical(tmp_path):
    worker, reference = Host(cwd=ROOT), Host(cwd=ROOT)
    try:
        worker.run(request(tmp_path, "a", epochs=1, lr=0.05), TIMEOUT_S)
        other = worker.run(request(tmp_path, "b", epochs=1, micro_size=2), TIMEOUT_S)
        back = worker.run(request(tmp_path, "c", epochs=1, lr=0.03, seed=4), TIMEOUT_S)
        cold = reference.run(request(tmp_path, "d", epochs=1, lr=0.03, seed=4), TIMEOUT_S)
    finally:
        worker.kill()
        reference.kill()
    assert not other.warm and not back.warm
    assert len({other.pid, back.pid}) == 2
    same_training(back, cold)


def test_a_crash_in_a_warm_worker_leaves_the_next_trial_cold_and_correct(tmp_path):
    experiment = str(ASSETS / "broken.py")
    given = dict(experiment=experiment, epochs=2, pause_s=0.5)
    worker, reference = Host(cwd=ROOT), Host(cwd=ROOT)
    kills = []

    def kill_the_trial(epoch) -> bool:  # mid-trial, after its first epoch
        if not kills:
            trial = psutil.Process(worker._proc.pid).children()[0]
            kills.append(trial.pid)
            os.kill(trial.pid, signal.SIGKILL)
        return False

    try:
        first = worker.run(request(tmp_path, "a", lr=0.05, **given), TIMEOUT_S)
        crashed = worker.run(request(tmp_path, "b", lr=0.04, **given), TIMEOUT_S,
                             kill_the_trial)
        after = worker.run(request(tmp_path, "c", lr=0.03, seed=5, **given), TIMEOUT_S)
        cold = reference.run(request(tmp_path, "d", lr=0.03, seed=5, **given), TIMEOUT_S)
    finally:
        worker.kill()
        reference.kill()
    assert crashed.warm and kills == [first.pid]
    assert crashed.status is Status.FAILED and "SIGKILL" in crashed.error
    assert not after.warm and after.pid != first.pid
    same_training(after, cold)


def test_graph_signature_ignores_values_in_parameters_only():
    base = {k: k_.default for k, k_ in load_experiment("mlp_digits").knobs.items()}
    same = [dict(base, lr=0.5, seed=3, momentum=0.5, loss_scale_value=8.0, epochs=9)]
    other = [dict(base, micro_size=2), dict(base, amp_level="O2"), dict(base, batch_size=32),
             dict(base, optimizer="adam"), dict(base, loss_scale="dynamic"),
             dict(base, weight_decay=0.1), dict(base, hidden=64),
             dict(base, lr_schedule="cosine")]
    key = json.dumps(graph_params(base), sort_keys=True)
    assert all(json.dumps(graph_params(p), sort_keys=True) == key for p in same)
    assert len({json.dumps(graph_params(p), sort_keys=True) for p in other} | {key}) == 9
    scheduled = dict(base, lr_schedule="cosine")  # a schedule's length is part of its graph
    assert graph_params(scheduled) != graph_params(dict(scheduled, epochs=9))
    # cosine or warm-up: either is a Parameter of one value per update, of one length
    assert graph_params(scheduled) == graph_params(dict(base, warmup_epochs=1))
    assert TrialRequest("mlp_digits", base, cold=True).graph_signature is None
    assert TrialRequest("mlp_digits", dict(base, devices=2)).graph_signature is None


def test_a_grid_runs_each_point_once_grouped_by_graph_with_two_workers(workdir):
    sweep = {"name": "grouped", "experiment": "mlp_digits", "method": "grid",
             "budget": {"workers": 2, "trial_timeout": TIMEOUT_S},
             "fixed": {"epochs": 1, "hidden": 32},
             "params": {"lr": [0.01, 0.02, 0.03], "micro_size": [1, 2]}}
    (workdir / "grouped.yaml").write_text(yaml.safe_dump(sweep))
    import subprocess

    done = subprocess.run(msexp_cmd("worker", "grouped.yaml", "--workers", "2"),
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    runs = child_runs("grouped")
    points = sorted((float(r.data.params["lr"]), int(r.data.params["micro_size"])) for r in runs)
    assert points == sorted((lr, m) for lr in (0.01, 0.02, 0.03) for m in (1, 2))
    assert all(r.data.tags["status"] == "COMPLETE" for r in runs)
    # grouped: six trials over two graphs in two workers compile at most four times
    assert sum(r.data.tags["warm"] == "true" for r in runs) >= 2


def test_one_worker_compiles_once_per_graph_of_the_grid(workdir):
    # mutation: the grid queue is not grouped by graph signature (6 compiles, not 2)
    sweep = {"name": "compiles", "experiment": "mlp_digits", "method": "grid",
             "budget": {"workers": 1, "trial_timeout": TIMEOUT_S},
             "fixed": {"epochs": 1, "hidden": 32},
             "params": {"lr": [0.01, 0.02, 0.03], "micro_size": [1, 2]}}
    (workdir / "compiles.yaml").write_text(yaml.safe_dump(sweep))
    import subprocess

    done = subprocess.run(msexp_cmd("sweep", "compiles.yaml"), capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    runs = child_runs("compiles")
    assert len(runs) == 6 and all(r.data.tags["status"] == "COMPLETE" for r in runs)
    compiled = sorted(int(r.data.params["micro_size"]) for r in runs
                      if r.data.tags["warm"] == "false")
    assert compiled == [1, 2]


def test_a_pruned_trial_leaves_its_graphs_warm_for_the_next(tmp_path):
    worker, reference = Host(cwd=ROOT), Host(cwd=ROOT)
    try:
        pruned = worker.run(request(tmp_path, "a", epochs=3), TIMEOUT_S, lambda epoch: True)
        warm = worker.run(request(tmp_path, "b", epochs=2, lr=0.03), TIMEOUT_S)
        cold = reference.run(request(tmp_path, "c", epochs=2, lr=0.03), TIMEOUT_S)
    finally:
        worker.kill()
        reference.kill()
    assert pruned.status is Status.PRUNED and len(pruned.epochs) < 3
    assert warm.warm and warm.pid == pruned.pid
    same_training(warm, cold)


def test_without_fork_the_worker_itself_keeps_the_graphs(tmp_path, monkeypatch):
    monkeypatch.setenv("MSEXP_FORK", "0")  # the GPU and Ascend path
    worker = Host(cwd=ROOT)
    try:
        first = worker.run(request(tmp_path, "a", epochs=1), TIMEOUT_S)
        warm = worker.run(request(tmp_path, "b", epochs=1, lr=0.03), TIMEOUT_S)
        cold = worker.run(request(tmp_path, "c", epochs=1, lr=0.03, cold=True), TIMEOUT_S)
        worker_pid = worker._proc.pid
    finally:
        worker.kill()
    assert first.pid == warm.pid == cold.pid == worker_pid
    assert warm.warm and not cold.warm
    same_training(warm, cold)


IGNORES_STOP = """
import time
from msexp import hooks
hooks.report(1, eval_accuracy=0.5)
time.sleep(600)  # never looks at hooks.should_stop()
"""


def test_a_trial_that_ignores_its_prune_loses_its_child_and_the_host_stays(tmp_path):
    """Past the stop's grace, the trial child is killed, not the host: the next trial
    runs in the same host, with no new MindSpore import (mutation: kill the host)."""
    from msexp.execution.protocol import Command

    script = tmp_path / "ignores.py"
    script.write_text(IGNORES_STOP)
    command = Command([sys.executable, str(script)], str(tmp_path))
    host = Host(cwd=ROOT)
    try:
        pruned = host.run(TrialRequest("ignores", {"seed": 0}, tmp_path / "a", command=command),
                          TIMEOUT_S, on_epoch=lambda epoch: True)
        host_pid = host.pid
        after = host.run(request(tmp_path, "b", epochs=1), TIMEOUT_S)
        assert host.pid == host_pid is not None
    finally:
        host.kill()
    assert pruned.status is Status.PRUNED and [e.epoch for e in pruned.epochs] == [1]
    wait_for("the script that ignored its stop to end", lambda: ended(pruned.pid))
    assert after.status is Status.COMPLETE, after.error


def ended(pid: int) -> bool:
    """Gone, or a zombie that only waits for its reaper."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
