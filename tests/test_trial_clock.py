"""A trial's clock starts when its worker is ready: the worker's MindSpore import is not the
trial's time (wall_s, and the trial_timeout counted from the same start)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from msexp.execution.host import Host
from msexp.execution.protocol import TrialRequest
from msexp.execution.result import Status
from msexp.spec import trial_params
from tests.conftest import ROOT
from tests.fault.conftest import DEADLINE_S, wait_for

pytestmark = pytest.mark.slow  # trials in worker processes (tests/README.md: tiers)

# A new interpreter with MSEXP_TEST_GATE set says it has started, then waits for the gate.
GATE = """
import os, pathlib, time
gate = os.environ.get("MSEXP_TEST_GATE")
if gate and not os.path.exists(gate):
    pathlib.Path(gate + ".held").touch()
    deadline = time.monotonic() + 240
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.01)
"""


def test_wall_s_leaves_out_the_workers_start(tmp_path: Path, monkeypatch) -> None:
    # mutation: the trial clock starts before the worker's MindSpore import
    site, gate = tmp_path / "site", tmp_path / "gate"
    site.mkdir()
    (site / "sitecustomize.py").write_text(GATE)
    monkeypatch.setenv("MSEXP_TEST_GATE", str(gate))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), str(ROOT)]))
    opened: list[float] = []

    def open_the_gate() -> None:
        wait_for("the worker waits at the gate", Path(f"{gate}.held").exists)
        opened.append(time.monotonic())
        gate.touch()

    threading.Thread(target=open_the_gate, daemon=True).start()
    request = TrialRequest("mlp_digits", trial_params("mlp_digits", {"epochs": 1}),
                           tmp_path / "trial")
    worker = Host(cwd=ROOT)
    try:
        result = worker.run(request, DEADLINE_S)
        returned = time.monotonic()
    finally:
        worker.kill()
    assert result.status is Status.COMPLETE, result.error
    # the worker imports MindSpore and says "ready" only after the gate opened
    assert opened and result.wall_s <= returned - opened[0]
