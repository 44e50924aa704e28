"""The trial protocol: requests, the event stream and what the orchestrator makes of it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from msexp.execution.exits import exit_reason, tail, wait_exit
from msexp.execution.process_tree import alive
from msexp.execution.protocol import (
    Checkpointing,
    Command,
    End,
    Error,
    EventReader,
    EventWriter,
    Launch,
    Result,
    Start,
    TrialRequest,
    decode,
    encode,
    read_events,
)
from msexp.execution.result import Status, TrialResult
from msexp.training.records import Epoch, Target

PARAMS = {"micro_size": 2, "lr": 0.1, "amp_level": "O2", "epochs": 3, "seed": 1}


def full_request(tmp_path: Path) -> TrialRequest:
    command = Command(["python", "t.py"], "/w", "hydra", ["x=(?P<x>1)"])
    return TrialRequest("mlp", dict(PARAMS), tmp_path / "t", Target("eval_accuracy", 0.9, True),
                        {"name": "digits"}, command,
                        Checkpointing(2, "best", "eval_loss", False), "/ckpt/a.ckpt", cold=True)


def test_a_request_survives_its_json_line_field_for_field(tmp_path: Path) -> None:
    request = full_request(tmp_path)
    line = request.to_json()
    assert "\n" not in line
    assert TrialRequest.from_json(line) == request
    bare = TrialRequest("mlp", {"lr": 0.5})
    assert TrialRequest.from_json(bare.to_json()) == bare
    assert json.loads(bare.to_json())["folder"] is None


def test_a_request_names_its_files_in_its_folder(tmp_path: Path) -> None:
    request = TrialRequest("mlp", {}, tmp_path)
    assert request.events_path == tmp_path / "events.jsonl"
    assert request.log_path == tmp_path / "trial.log"
    assert request.checkpoint_dir == tmp_path / "checkpoints"
    command = TrialRequest("script", {}, tmp_path, command=Command(["x"], "."))
    assert command.checkpoint_dir == tmp_path / "outputs"


def test_the_graph_signature_separates_what_shapes_graphs_and_nothing_else() -> None:
    base = TrialRequest("mlp", dict(PARAMS), data={"name": "digits"})
    assert base.graph_signature is not None
    assert TrialRequest("mlp", {**PARAMS, "lr": 0.5, "seed": 9},
                        data={"name": "digits"}).graph_signature == base.graph_signature
    for other in (TrialRequest("lenet", dict(PARAMS), data={"name": "digits"}),
                  TrialRequest("mlp", {**PARAMS, "micro_size": 4}, data={"name": "digits"}),
                  TrialRequest("mlp", dict(PARAMS), data={"name": "mnist"})):
        assert other.graph_signature not in (None, base.graph_signature)
    never = (TrialRequest("mlp", dict(PARAMS), cold=True),
             TrialRequest("mlp", {**PARAMS, "devices": 2}),
             TrialRequest("s", dict(PARAMS), command=Command(["x"], ".")))
    assert [r.graph_signature for r in never] == [None, None, None]
    assert TrialRequest("mlp", {**PARAMS, "devices": 1}).graph_signature is not None


EVENTS = [Launch(2, "/r/logs", 7), Start("digits (folder)", 8, {"thor": "msexp"}, 3, True),
          Epoch(epoch=1, step=4, elapsed_s=0.5, metrics={"train_loss": 0.5},
                series={"train_loss": [0.6, 0.5]}),
          Result({"eval_accuracy": 0.75}, "/c/best.ckpt"), Error("diverged", "loss nan"), End()]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_each_event_is_one_line_that_decodes_to_itself(event) -> None:
    line = encode(event)
    assert "\n" not in line and "t" in json.loads(line)
    assert decode(line) == event


def test_the_reader_returns_complete_lines_once_and_keeps_a_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    reader = EventReader(path)
    assert reader.read() == []  # not written yet
    with EventWriter.open(path) as emit:
        emit(EVENTS[1])
        emit(EVENTS[2])
    line = encode(End())
    with path.open("a") as f:
        f.write(line[:10])
    assert reader.read() == EVENTS[1:3]
    assert reader.read() == []
    with path.open("a") as f:
        f.write(line[10:] + "\n\n")
    assert reader.read() == [End()]
    assert read_events(path) == [EVENTS[1], EVENTS[2], End()]


def stream_result(*events) -> tuple[TrialResult, list[bool]]:
    result = TrialResult(Status.FAILED)
    return result, [result.absorb(event) for event in events]


def test_a_complete_stream_fills_every_field_and_ends_at_end() -> None:
    result, ends = stream_result(*EVENTS[:4], End())
    assert ends == [False, False, False, False, True]
    assert result.status is Status.COMPLETE
    assert result.rank_logs == Path("/r/logs")
    assert (result.data_source, result.impl, result.resumed_from, result.warm, result.pid) == (
        "digits (folder)", {"thor": "msexp"}, 3, True, 8)
    assert result.epochs == [EVENTS[2]]
    assert result.metrics == {"eval_accuracy": 0.75}
    assert result.checkpoint == Path("/c/best.ckpt")
    assert result.last_epoch_metrics() == {"train_loss": 0.5}


def test_an_error_fails_a_trial_but_not_a_pruned_one() -> None:
    result, _ = stream_result(Start("d", 1), Error("exception", "ValueError: x"))
    assert (result.status, result.error) == (Status.FAILED, "ValueError: x")
    pruned = TrialResult(Status.PRUNED)
    pruned.absorb(Error("stopped", "Stopped: pruned"))
    assert (pruned.status, pruned.error) == (Status.PRUNED, "")
    pruned.absorb(Result({"eval_accuracy": 0.5}))  # it ended before the stop reached it
    assert (pruned.status, pruned.metrics) == (Status.PRUNED, {"eval_accuracy": 0.5})
    nothing, _ = stream_result(Result({}))
    assert nothing.checkpoint is None and nothing.last_epoch_metrics() == {}


def test_a_result_survives_json_with_its_paths_and_epochs(tmp_path: Path) -> None:
    result, _ = stream_result(*EVENTS[:4])
    result.log_path, result.events_path, result.wall_s = tmp_path / "l", tmp_path / "e", 1.5
    data = json.loads(json.dumps(result.to_json()))
    assert data["status"] == "COMPLETE" and data["log_path"] == str(tmp_path / "l")
    assert TrialResult.from_json(data) == result
    empty = TrialResult(Status.TIMEOUT)
    assert TrialResult.from_json(json.loads(json.dumps(empty.to_json()))) == empty


def test_the_log_tail_is_the_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "trial.log"
    log.write_text("".join(f"line {i}\n" for i in range(50)))
    assert tail(log, 2) == "line 48\nline 49"
    assert tail(tmp_path / "none", 2) == "(no log)"


def test_an_exit_code_reads_as_how_the_process_ended() -> None:
    assert exit_reason(3) == "trial process exited with code 3"
    assert exit_reason(0) == "trial process exited with code 0"
    assert exit_reason(-signal.SIGKILL) == "trial process was killed by SIGKILL"
    assert exit_reason(-200, "rank 1") == "rank 1 was killed by signal 200"


def test_the_wait_for_a_command_wakes_at_its_exit_not_at_the_timeout() -> None:
    # mutation: a plain sleep of the timeout (the poll it replaced) waits the whole 30 s
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    began = time.monotonic()
    while proc.poll() is None:
        wait_exit(proc.pid, 30)
    assert time.monotonic() - began < 15
    began = time.monotonic()
    wait_exit(proc.pid, 0.2)  # reaped: its pid may be another's, so the timeout is slept
    assert time.monotonic() - began >= 0.2


def test_older_records_without_newer_fields_still_load() -> None:
    request = json.loads(TrialRequest("mlp", {"lr": 0.1}).to_json())
    del request["cold"]
    assert TrialRequest.from_json(json.dumps(request)).cold is False
    result = TrialResult(Status.COMPLETE).to_json()
    del result["epochs"]
    assert TrialResult.from_json(result).epochs == []


def test_numpy_numbers_in_an_event_are_written_as_numbers() -> None:
    event = Result({"eval_accuracy": np.float32(0.5), "samples": np.int64(3)})
    assert decode(encode(event)) == Result({"eval_accuracy": 0.5, "samples": 3.0})


def test_a_log_with_bytes_that_are_not_utf8_still_shows_its_tail(tmp_path: Path) -> None:
    log = tmp_path / "trial.log"
    log.write_bytes(b"start\n\xff\xfe garbled\nlast\n")
    assert tail(log, 2) == "\ufffd\ufffd garbled\nlast"


def test_a_zombie_or_a_reaped_process_is_not_alive() -> None:
    child = subprocess.Popen([sys.executable, "-c", ""])
    handle = psutil.Process(child.pid)
    assert alive(psutil.Process()) and handle.is_running()
    deadline = time.monotonic() + 240  # a hang's deadline: it exits at once
    while handle.status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(handle), "exited, not yet reaped"
    child.wait()
    assert not alive(handle), "reaped"


def test_what_a_finished_trial_left_running_in_this_processs_tree_is_killed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A process a trial left behind (not kept) is killed and reaped, in a process that
    does not adopt orphans too (the look for marked strays finds none here). Mutations
    (issue 53): `process_tree.kill_descendants` 5 (the strays' kill called without them:
    it raises), 15 (each leftover's liveness asked of `None`: it raises)."""
    from msexp.execution import process_tree
    from msexp.keys import TrialEnv

    monkeypatch.delenv(TrialEnv.MARKER, raising=False)
    kept = process_tree.descendants(os.getpid())  # what this test process ran before
    left = subprocess.Popen(["sleep", "600"])
    leftover = psutil.Process(left.pid)
    try:
        process_tree.kill_descendants(kept, wait_s=5.0)
        assert not alive(leftover), "killed and reaped"
    finally:
        left.kill()
        left.wait()
