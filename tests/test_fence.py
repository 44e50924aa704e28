"""The fence on a trial's folder: once a newer attempt took it, an older attempt that is
still running (its sweep frozen past its heartbeat) publishes no checkpoint there."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from msexp.training.checkpoint import STATE, CheckpointPlan, Checkpoints, latest
from msexp.training.records import Epoch
from msexp.trial_folder import TOKEN_FILE, Fence, Superseded
from tests.test_checkpoint import mlp


def test_only_the_attempt_that_took_the_folder_last_holds_it(tmp_path: Path) -> None:
    old, new = Fence(tmp_path, "old"), Fence(tmp_path, "new")
    with pytest.raises(Superseded), old.holding():  # nobody took it: no attempt holds it
        pass
    old.take()
    with old.holding():
        pass
    new.take()
    assert (tmp_path / TOKEN_FILE).read_text() == "new"
    with pytest.raises(Superseded, match="a newer attempt of this trial took its folder"), \
            old.holding():
        raise AssertionError("the old attempt's write ran")
    with new.holding():
        pass


def test_taking_the_folder_waits_for_a_publish_under_way(tmp_path: Path) -> None:
    old, new = Fence(tmp_path, "old"), Fence(tmp_path, "new")
    old.take()
    taken = threading.Event()
    taker = threading.Thread(target=lambda: (new.take(), taken.set()))
    with old.holding():
        taker.start()
        assert not taken.wait(0.5), "taken while the old attempt was publishing"
        assert (tmp_path / TOKEN_FILE).read_text() == "old"
    taker.join()
    assert taken.is_set() and (tmp_path / TOKEN_FILE).read_text() == "new"


def test_a_superseded_attempt_publishes_no_checkpoint(tmp_path: Path) -> None:
    network = mlp()
    parameters = {p.name: p for p in network.get_parameters()}
    old = Fence(tmp_path, "old")
    old.take()
    saver = Checkpoints(CheckpointPlan(tmp_path / "checkpoints", fence=old), parameters)
    first = saver.save(1, 4, [Epoch(1, 4, 0.1, {"loss": 1.0})], {}, None)
    before = {p.name: p.read_bytes() for p in (tmp_path / "checkpoints").iterdir()}
    Fence(tmp_path, "new").take()
    with pytest.raises(Superseded):
        saver.save(2, 8, [*first.history, Epoch(2, 8, 0.2, {"loss": 0.5})], {}, first)
    after = {p.name: p.read_bytes() for p in (tmp_path / "checkpoints").iterdir()}
    assert after == before, "nothing published, no partial file left"
    assert latest(tmp_path / "checkpoints").epoch == 1 and STATE in after
    with pytest.raises(Superseded):
        saver.finish(first)  # its end prunes nothing either
    with pytest.raises(Superseded):
        saver.restore()
