"""An experiment whose trials orphan a helper: in a trial process, `build` starts `sleep
SLEEP_S` double-forked, in a session of its own and with a cleared environment (no
marker), then builds mlp_digits (a plan-time build starts nothing)."""

from __future__ import annotations

import os
import subprocess

from msexp.experiment import load_experiment
from msexp.keys import TrialEnv

mlp_digits = load_experiment("mlp_digits")  # msexp's own, loaded as any experiment is

DEFAULTS = {**mlp_digits.defaults, "epochs": 1}
PARAMS = {"sleep_s": 1000.5, "hidden": 16}


def build(params):
    if TrialEnv.MARKER in os.environ:
        subprocess.run(["sh", "-c", f"(env -i setsid sleep {params['sleep_s']} "
                                    ">/dev/null 2>&1 &)"], check=True)
    return mlp_digits.build(params)
