"""`devices: N`: a trial as N data-parallel msrun processes on CPU (real processes)."""

from __future__ import annotations

import json
import math
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from msexp.errors import SpecError
from msexp.execution.host import Host
from msexp.execution.msrun import rank_log_dir
from msexp.execution.process_tree import marked
from msexp.execution.protocol import TrialRequest, read_events
from msexp.execution.result import Status, TrialResult
from msexp.experiment import load_experiment
from msexp.spec import parse_spec
from msexp.spec.params import parse_params
from msexp.spec.space import derived

pytestmark = pytest.mark.slow  # trials in worker processes (tests/README.md: tiers)

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 300


def make_request(folder: Path, name: str, **fixed: Any) -> TrialRequest:
    knobs = load_experiment("mlp_digits").knobs
    params = parse_params("test", knobs, {"epochs": 1, "batch_size": 64, **fixed}, {}
                          ).resolve({})
    return TrialRequest("mlp_digits", params, folder / name)


def run_trial(request: TrialRequest, timeout: float = TIMEOUT, on_epoch=None) -> TrialResult:
    runner = Host(cwd=ROOT)
    try:
        return runner.run(request, timeout, on_epoch)
    finally:
        runner.kill()


def markers(result: TrialResult) -> list[dict[str, Any]]:
    assert result.rank_logs is not None
    return [json.loads(p.read_text()) for p in sorted(result.rank_logs.glob("rank-*.json"))]


def wait_for_ranks(request: TrialRequest, thread: threading.Thread) -> list[int]:
    """The rank pids, once every rank has started training (rank 0 emitted an epoch)."""
    folder, events = rank_log_dir(request.log_path), request.events_path
    while thread.is_alive():
        found = [folder / f"rank-{r}.json" for r in range(request.params["devices"])]
        if all(p.exists() for p in found) and '"epoch"' in events.read_text():
            return [json.loads(p.read_text())["pid"] for p in found]
        time.sleep(0.1)
    raise AssertionError("the trial ended before its ranks trained")


def assert_gone(pids: list[int], within: float = 120.0) -> None:
    """The processes `pids` end (`within` is for a hang only: it returns once they have)."""
    deadline = time.monotonic() + within
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in pids if _alive(pid)]
        time.sleep(0.1)
    assert not alive, f"processes left behind: {alive}"


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def started_in_background(request: TrialRequest, runner: Host
                          ) -> tuple[threading.Thread, dict[str, TrialResult]]:
    out: dict[str, TrialResult] = {}
    thread = threading.Thread(target=lambda: out.update(result=runner.run(request, TIMEOUT)))
    thread.start()
    return thread, out


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> TrialResult:
    """One process, global batch 64: the reference for the data-parallel trials."""
    result = run_trial(make_request(tmp_path_factory.mktemp("single"), "single"))
    assert result.status is Status.COMPLETE, result.error
    return result


def assert_same_training(result: TrialResult, reference: TrialResult) -> None:
    assert result.status is Status.COMPLETE, result.error
    got, want = result.epochs[0], reference.epochs[0]
    assert got.step == want.step
    for a, b in zip(got.series["train_loss"], want.series["train_loss"]):
        assert math.isclose(a, b, rel_tol=1e-4), (a, b)
    for name in ("eval_loss", "eval_accuracy", "train_loss"):
        assert math.isclose(result.metrics[name], reference.metrics[name], rel_tol=1e-4), name
    ranks = markers(result)
    assert [m["rank"] for m in ranks] == [0, 1] and all(m["done"] for m in ranks)
    assert ranks[0]["checksum"] == ranks[1]["checksum"], "the ranks' weights differ"


def test_two_ranks_train_like_one_process_on_the_global_batch(
        single: TrialResult, tmp_path: Path) -> None:
    result = run_trial(make_request(tmp_path, "dp", devices=2))
    assert_same_training(result, single)
    assert result.metrics["samples_per_s"] > 0
    assert result.rank_logs == tmp_path / "dp" / "trial.ranks"
    logs = {p.name for p in result.rank_logs.iterdir()}
    assert {"msrun.log", "scheduler.log", "worker_0.log", "worker_1.log"} <= logs
    events = [type(e).__name__ for e in read_events(result.events_path)]
    assert events == ["Launch", "Start", "Epoch", "Result", "End"], "only rank 0 reports"

    from msexp.tracking.delivery import record_trial
    from msexp.tracking.runs import Tracker
    from msexp.tracking.spool import Spool

    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}")
    tracker.spool = Spool(tmp_path / "spool")
    experiment = tracker.experiment_id("dp")
    parent = tracker.client.create_run(experiment).info.run_id
    run_id = record_trial(tracker, experiment, parent, 0, result.impl, result, time.time())
    attached = {a.path for a in tracker.client.list_artifacts(run_id, "trial.ranks")}
    assert {"trial.ranks/worker_0.log", "trial.ranks/worker_1.log"} <= attached


def test_accumulation_with_two_ranks(single: TrialResult, tmp_path: Path) -> None:
    result = run_trial(make_request(tmp_path, "accum", devices=2, micro_size=2))
    assert_same_training(result, single)


def test_a_killed_rank_fails_the_trial_and_leaves_no_process(tmp_path: Path) -> None:
    request = make_request(tmp_path, "kill", devices=2, epochs=200)
    runner = Host(cwd=ROOT)
    thread, out = started_in_background(request, runner)
    try:
        pids = wait_for_ranks(request, thread)
        os.kill(pids[1], signal.SIGKILL)
        thread.join()
    finally:
        runner.kill()
    result = out["result"]
    # FAILED, not TIMEOUT: the trial ends on the rank's death, not after its trial_timeout
    assert result.status is Status.FAILED
    assert "rank 1 of 2" in result.error and "killed by SIGKILL" in result.error, result.error
    last_line = (rank_log_dir(request.log_path) / "worker_1.log").read_text().splitlines()[-1]
    assert last_line in result.error
    assert_gone(pids)


def test_a_pruned_data_parallel_trial_stops_after_its_first_epoch(tmp_path: Path) -> None:
    request = make_request(tmp_path, "prune", devices=2, epochs=200)
    runner = Host(cwd=ROOT)
    try:
        result = runner.run(request, TIMEOUT, on_epoch=lambda epoch: True)  # the pruner's no
    finally:
        runner.kill()
    assert result.status is Status.PRUNED
    assert 1 <= len(result.epochs) < 200, "pruned at its first epoch, it stops early"
    events = read_events(result.events_path)
    # mutation: msrun's wait ignores stop_requested, so the ranks train on until the pool
    # force-kills them, and no "stopped" error or end event is written
    assert [(type(e).__name__, getattr(e, "kind", "")) for e in events[-2:]] == \
        [("Error", "stopped"), ("End", "")]
    assert "killed the 2 ranks" in events[-2].message, events[-2]
    assert_gone([m["pid"] for m in markers(result)])
    deadline = time.monotonic() + 120.0  # for a hang only
    while (left := marked(runner.marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left == [], "no process of the trial is left"


def test_killing_the_trial_process_group_kills_every_rank(tmp_path: Path) -> None:
    """What the orchestrator does on trial_timeout: SIGKILL to the trial's process group."""
    request = make_request(tmp_path, "group", devices=2, epochs=200)
    runner = Host(cwd=ROOT)
    thread, out = started_in_background(request, runner)
    try:
        pids = wait_for_ranks(request, thread)
        runner.kill()
        thread.join()
    finally:
        runner.kill()
    assert out["result"].status is Status.FAILED
    assert_gone(pids)


def test_devices_divide_the_batch_into_per_device_micro_batches() -> None:
    assert derived({"batch_size": 64, "micro_size": 2, "devices": 2}) == {
        "micro_batch": 16, "effective_batch": 64}
    text = "name: d\nexperiment: mlp_digits\nfixed: {batch_size: 64, micro_size: 2}\n" \
           "params: {devices: [1, 2, 3]}\n"
    with pytest.raises(SpecError) as caught:
        parse_spec(text, "d.yaml")
    assert str(caught.value) == ("d.yaml: params.devices: micro_size * devices must divide "
                                 "batch_size (batch_size=64, micro_size=2, devices=3), got 3")
    spec = parse_spec(text.replace("3]", "4]"), "d.yaml")
    assert [derived(spec.space.resolve(p))["micro_batch"] for p in spec.space.grid()] == [
        32, 16, 8]


def test_every_rank_gets_as_many_updates_from_a_dataset() -> None:
    """Otherwise a rank with one more update waits for the others' all-reduce forever."""
    import mindspore.dataset as ds
    import numpy as np

    from msexp.training.data import TrainBatches

    x = np.arange(72, dtype=np.float32).reshape(-1, 1)
    y = np.zeros(len(x), np.int32)

    def counts(micro_size: int) -> list[list[int]]:
        """Updates per epoch on each rank, over two epochs of one dataset."""
        batches = [TrainBatches(ds.NumpySlicesDataset((x, y), ["x", "y"], shuffle=False),
                                16, micro_size, 0, (rank, 2)) for rank in (0, 1)]
        return [[len(list(b.epoch(epoch))) for epoch in (1, 2)] for b in batches]

    assert counts(1) == counts(2) == [[72 // 16] * 2] * 2


def test_a_data_parallel_trial_writes_no_secret_into_its_folder(tmp_path: Path,
                                                                monkeypatch) -> None:
    """Every rank of `tells` prints its secret params and the environment's MLflow
    password: its log (written by msrun), the events and every other file of the trial's
    folder hold them redacted, as written; no request file holds them."""
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "S3CRET-mlflow")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), str(ROOT / "tests/assets")]))
    monkeypatch.syspath_prepend(str(ROOT / "tests/assets"))
    knobs = load_experiment("tells:build").knobs
    params = parse_params("test", knobs, {
        "epochs": 1, "batch_size": 64, "devices": 2, "api_token": "S3CRET-token",
        "data_url": "postgresql://u:S3CRET-a@h/db"}, {}).resolve({})
    result = run_trial(TrialRequest("tells:build", params, tmp_path / "tells"))
    assert result.status is Status.COMPLETE, result.error
    worker = (result.rank_logs / "worker_1.log").read_text()
    assert "token *** from postgresql://u:***@h/db" in worker, worker
    assert "tracking password ***" in worker, worker
    files = [p for p in (tmp_path / "tells").rglob("*") if p.is_file()]
    assert not [p for p in files if b"S3CRET" in p.read_bytes()]
    assert not [p for p in files if p.name == "request.json"]
