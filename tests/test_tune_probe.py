"""A probe of `msexp tune` on a user's script: `msexp.hooks` ends it after the probe's
updates, long before its epochs end, and nothing after them runs (its own eval)."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from msexp.execution.protocol import Command, Epoch, TrialRequest
from msexp.training.records import Probe
from tests.conftest import with_callback

SCRIPTS = Path(__file__).parent / "assets" / "scripts"


@pytest.mark.slow
def test_a_script_probe_stops_after_its_updates_and_skips_every_eval(workdir: Path) -> None:
    from msexp.execution.command import run_command

    project = workdir / "project"
    project.mkdir()
    with_callback(SCRIPTS / "train_digits.py", project / "train.py",
                  "MsexpCallback(model, eval_ds)")
    command = Command([sys.executable, "train.py"], str(project))
    events: list = []
    # 1400 samples at batch 32: 43 updates an epoch, 86 in the 2 epochs asked for
    request = TrialRequest("train.py", {"epochs": 2, "batch_size": 32}, workdir / "probe",
                           command=command, probe=Probe(7))
    output = io.StringIO()
    metrics, _ = run_command(request, events.append, lambda: False, output)
    epochs = [e for e in events if isinstance(e, Epoch)]
    assert [(e.epoch, e.step) for e in epochs] == [(1, 7)], "one report, at update 7 of 86"
    assert metrics["updates"] == 7 and len(epochs[0].series["step_ms"]) == 7
    assert metrics["training_updates"] == 86, "the training it stands for: 2 epochs of 43"
    assert epochs[0].series["step_ms"][0] > max(epochs[0].series["step_ms"][1:]), "compiles"
    assert metrics["samples_per_s"] == pytest.approx(32 * 1000 / metrics["step_ms"])
    assert metrics["overflow_rate"] == 0.0 and metrics["train_mem_mb"] > 0
    assert not any(name.startswith("eval_") for name in metrics), "the callback's eval"
    assert len((workdir / "probe" / "reports.jsonl").read_text().splitlines()) == 1
    assert "'Accuracy'" not in output.getvalue(), "the script's own eval after Model.train"
    # a probe longer than the training: what the training ran, still without an eval
    longer: list = []
    output = io.StringIO()
    metrics, _ = run_command(TrialRequest("train.py", {"epochs": 1, "batch_size": 32},
                                          workdir / "longer", command=command,
                                          probe=Probe(100)), longer.append, lambda: False,
                             output)
    assert [(e.epoch, e.step) for e in longer if isinstance(e, Epoch)] == [(1, 43)]
    assert metrics["updates"] == 43 and "eval_accuracy" not in metrics
    assert "'Accuracy'" not in output.getvalue()
    # the same script without a probe trains its 2 epochs and evaluates each
    full = TrialRequest("train.py", {"epochs": 2, "batch_size": 32}, workdir / "full",
                        command=command)
    trained: list = []
    output = io.StringIO()
    metrics, _ = run_command(full, trained.append, lambda: False, output)
    assert "'Accuracy'" in output.getvalue()
    assert [(e.epoch, e.step) for e in trained if isinstance(e, Epoch)] == [(1, 43), (2, 86)]
    assert 0 < metrics["eval_accuracy"] <= 1 and "updates" not in metrics
