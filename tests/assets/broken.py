"""An experiment that misbehaves in every way a real one can, chosen by its `mode` knob."""

from __future__ import annotations

import os
import sys
import time

from msexp.experiment import load_experiment

mlp_digits = load_experiment("mlp_digits")  # msexp's own, loaded as any experiment is

DEFAULTS = {**mlp_digits.defaults, "epochs": 1}
PARAMS = {"mode": "works", "hidden": 32, "pause_s": 0.0}


def build(params):
    mode = params["mode"]
    print(f"mode {mode} in pid {os.getpid()}", flush=True)
    if mode == "raises":
        raise RuntimeError("the experiment is broken on purpose")
    if mode == "exits":
        sys.exit(3)
    if mode == "hangs":
        time.sleep(600)
    if mode == "kills_sweep":  # a trial that takes its orchestrator down (host:pid/...)
        os.kill(int(os.environ["MSEXP_TRIAL_ID"].split("/")[0].rpartition(":")[2]), 9)
        time.sleep(600)
    workload = mlp_digits.build(params)
    if params["pause_s"]:  # slow epochs, for tests that act in the middle of a trial
        workload.metrics["eval_pause"] = lambda logits, labels: time.sleep(params["pause_s"]) or 0
    if mode == "nan":
        loss_fn = workload.loss_fn

        def nan_loss(logits, labels):
            return loss_fn(logits, labels) * float("nan")

        workload.loss_fn = nan_loss
    return workload
