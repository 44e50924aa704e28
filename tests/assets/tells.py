"""An experiment that prints what it was given, as a careless training script does: its
`api_token`, its `data_url` and the environment's MLflow password; `pause_s` slows each
epoch, for tests that act in the middle of a trial."""

from __future__ import annotations

import os
import time

from msexp.experiment import load_experiment

mlp_digits = load_experiment("mlp_digits")  # msexp's own, loaded as any experiment is

DEFAULTS = {**mlp_digits.defaults, "epochs": 1}
PARAMS = {"hidden": 16, "api_token": "none", "data_url": "none", "pause_s": 0.0}


def build(params):
    print(f"token {params['api_token']} from {params['data_url']}", flush=True)
    print(f"tracking password {os.environ.get('MLFLOW_TRACKING_PASSWORD')}", flush=True)
    workload = mlp_digits.build(params)
    if params["pause_s"]:
        workload.metrics["eval_pause"] = lambda logits, labels: time.sleep(params["pause_s"]) or 0
    return workload
