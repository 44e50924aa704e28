"""An experiment whose trials wait for the test's go: in a trial process, trial `point`
trains once the file go-POINT exists in `gate_dir` (a plan-time build does not wait)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from msexp.experiment import load_experiment
from msexp.keys import TrialEnv

mlp_digits = load_experiment("mlp_digits")  # msexp's own, loaded as any experiment is

DEFAULTS = {**mlp_digits.defaults, "epochs": 1}
PARAMS = {"point": 0, "gate_dir": ".", "hidden": 16}
WAIT_S = 300.0


def build(params):
    gate = Path(params["gate_dir"]) / f"go-{params['point']}"
    deadline = time.monotonic() + WAIT_S
    while TrialEnv.MARKER in os.environ and not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return mlp_digits.build(params)
