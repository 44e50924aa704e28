"""An experiment that prints what it was given, as a careless training script does: its
`api_token`, its `data_url` and the environment's MLflow password."""

from __future__ import annotations

import os

from experiments import mlp_digits

DEFAULTS = {**mlp_digits.DEFAULTS, "epochs": 1}
PARAMS = {"hidden": 16, "api_token": "none", "data_url": "none"}


def build(params):
    print(f"token {params['api_token']} from {params['data_url']}", flush=True)
    print(f"tracking password {os.environ.get('MLFLOW_TRACKING_PASSWORD')}", flush=True)
    return mlp_digits.build(params)
