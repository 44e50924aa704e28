"""`msexp new`: an experiment file and a sweep file that work as written."""

from __future__ import annotations

import os
from pathlib import Path

from msexp.errors import MsexpError, SpecError

EXPERIMENTS = Path("experiments")  # where a project's experiments live, msexp's own too
SWEEPS = Path("sweeps")

EXPERIMENT = '''"""{name}: an msexp experiment. Sweep it with `msexp new sweep --experiment {path}`.

msexp imports this file, calls `build(params)` once per trial (in the trial's own
process) and wraps what it returns with gradient accumulation, mixed precision, loss
scaling and the optimizer. You write no training loop.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from msexp.experiment import Workload

# Defaults for msexp's own knobs (see `msexp knobs`); a sweep file overrides them.
DEFAULTS = {{"epochs": 5, "batch_size": 64, "lr": 0.05, "optimizer": "momentum"}}

# This experiment's own knobs, with their defaults. Sweep them like msexp's knobs:
#   params: {{hidden: [64, 256]}}
PARAMS = {{"hidden": 128, "dropout": 0.0}}

# Extra eval metrics computed by Workload.metrics; usable as objectives.
METRICS = ("eval_top2_accuracy",)


def top2_accuracy(logits: np.ndarray, labels: np.ndarray) -> float:
    """Share of samples whose label is among the two highest logits."""
    top2 = np.argsort(logits, axis=1)[:, -2:]
    return float((top2 == labels[:, None]).any(axis=1).mean())


def load_data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """scikit-learn's bundled digits (no download): 8x8 images as 64 features."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int32)
    order = np.random.default_rng(0).permutation(len(y))  # a fixed train/eval split
    train, held = order[300:], order[:300]
    return x[train], y[train], x[held], y[held]


def build(params: dict[str, Any]) -> Workload:
    """Return the network, the loss and the data for one trial.

    `params` holds every knob of the trial (msexp's and PARAMS), already validated.
    Import MindSpore here, not at the top, so `msexp plan` stays fast. A Cell class of
    your own belongs at module level (in a module you import here): amp_level O1
    rewrites the network from its classes' source.
    """
    from mindspore import nn

    hidden = params["hidden"]
    network = nn.SequentialCell(
        nn.Dense(64, hidden), nn.ReLU(),
        nn.Dropout(p=params["dropout"]) if params["dropout"] else nn.Identity(),
        nn.Dense(hidden, 10),
    )
    x_train, y_train, x_eval, y_eval = load_data()
    return Workload(
        network=network,
        loss_fn=nn.CrossEntropyLoss(),           # (logits, labels) -> scalar
        train=(x_train, y_train),                # NumPy arrays or a mindspore.dataset
        eval=(x_eval, y_eval),
        data_source="sklearn digits, 8x8 as 64 features",   # recorded in MLflow
        metrics={{"eval_top2_accuracy": top2_accuracy}},
    )
'''

SCRIPT = '''"""{name}: a Model.train script that msexp sweeps, and that still runs by hand.

    python {path} --lr 0.05 --micro_size 2
    msexp sweep {sweep}          # swept: the sweep file sets the flags

It shows the three ways a script works with msexp:
1. it prints its metrics (`eval_accuracy: 0.97`), which msexp reads from its output;
2. `MsexpCallback` reports each epoch, so pruning can stop a poor trial early;
3. `hooks.optimizer` / `hooks.model` give it msexp's gradient accumulation, AMP, loss
   scaling and THOR from the same flags (each step of Model.train is one update).
"""

import argparse

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn
from mindspore.train import Accuracy, LossMonitor, TimeMonitor
from sklearn.datasets import load_digits

from msexp import hooks

parser = argparse.ArgumentParser(description="{name}")
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batch_size", type=int, default=32)
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--optimizer", default="momentum")          # sgd momentum adam adamw thor
parser.add_argument("--micro_size", type=int, default=1)        # gradient accumulation
parser.add_argument("--amp_level", default="O0")                # O0 O1 O2 O3
parser.add_argument("--loss_scale", default="none")             # none fixed dynamic
parser.add_argument("--seed", type=int, default=0)
params = vars(parser.parse_args())

ms.set_seed(params["seed"])
digits = load_digits()  # bundled with scikit-learn: no download
images = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
labels = digits.target.astype(np.int32)
train_ds = ds.NumpySlicesDataset({{"image": images[:1400], "label": labels[:1400]}}, shuffle=True)
train_ds = train_ds.batch(params["batch_size"], drop_remainder=True)  # split by micro_size
eval_ds = ds.NumpySlicesDataset({{"image": images[1400:], "label": labels[1400:]}},
                                shuffle=False).batch(128)

net = nn.SequentialCell(nn.Conv2d(1, 8, 3, pad_mode="same"), nn.ReLU(),
                        nn.MaxPool2d(kernel_size=2, stride=2), nn.Flatten(),
                        nn.Dense(8 * 4 * 4, 32), nn.ReLU(), nn.Dense(32, 10))
loss = nn.CrossEntropyLoss()
updates_per_epoch = 1400 // params["batch_size"]
opt = hooks.optimizer(net, params, updates_per_epoch)
model = hooks.model(net, loss, opt, params, metrics={{"accuracy": Accuracy()}})
model.train(params["epochs"], train_ds, dataset_sink_mode=False,
            callbacks=[LossMonitor(20), TimeMonitor(), hooks.MsexpCallback(model, eval_ds)])
result = model.eval(eval_ds, dataset_sink_mode=False)
print(f"eval_accuracy: {{result['accuracy']:.4f}}")
'''

SCRIPT_SWEEP = '''# Sweeps {script} as it is: these values become --flags; msexp reads its output.
# Check it with `msexp plan {path} --check`, run it with `msexp sweep {path}`.
name: {name}
experiment: {{command: python {script}}}
objective: {{metric: eval_accuracy, direction: maximize}}
budget: {{trial_timeout: 600}}
fixed: {{epochs: 3, batch_size: 32}}
params:
  micro_size: [1, 4]
  lr: [0.05, 0.01]
pruner: {{type: median, warmup_epochs: 1}}
'''

SWEEP = {
    "grid": '''# A grid over the main knobs of {experiment}. Check it with `msexp plan {path}`,
# run it with `msexp sweep {path}`, compare the trials in the MLflow UI.
name: {name}
experiment: {experiment}
method: grid
objective:
  - {{metric: eval_accuracy, direction: maximize}}
budget: {{trial_timeout: 600, workers: 1}}
fixed: {{epochs: 3, batch_size: 64}}
params:
  micro_size: [1, 4]              # gradient accumulation: micro-batch = batch_size / micro_size
  optimizer: [momentum, adam]
''',
    "tpe": '''# A TPE study over the main knobs of {experiment}. Check it with `msexp plan {path}`,
# run it with `msexp sweep {path}`, compare the trials in the MLflow UI.
name: {name}
experiment: {experiment}
method: tpe
objective:
  - {{metric: eval_accuracy, direction: maximize}}
budget: {{trials: 12, trial_timeout: 600, workers: 1}}
fixed: {{epochs: 3, batch_size: 64}}
params:
  lr: {{low: 0.001, high: 0.3, log: true}}
  micro_size: [1, 2, 4]
  optimizer: [momentum, adam]
pruner: {{type: median, warmup_epochs: 1}}
''',
}


def new_experiment(name: str, folder: Path = EXPERIMENTS, force: bool = False) -> Path:
    """Write `experiments/NAME.py`, an experiment that trains as written."""
    path = _python_file(name, folder)
    _write(path, EXPERIMENT.format(name=name, path=path), force)
    return path


def new_script(name: str, folder: Path = EXPERIMENTS, sweeps: Path = SWEEPS,
               force: bool = False) -> tuple[Path, Path]:
    """Write `experiments/NAME.py`, a Model.train script that uses msexp's hooks, and
    `sweeps/NAME.yaml`, a sweep of it."""
    path = _python_file(name, folder)
    sweep = sweeps / f"{name}.yaml"
    script = os.path.relpath(path, sweep.parent)  # the command runs from the sweep's folder
    _write(path, SCRIPT.format(name=name, path=path, sweep=sweep), force)
    _write(sweep, SCRIPT_SWEEP.format(name=name, script=script, path=sweep), force)
    return path, sweep


def _python_file(name: str, folder: Path) -> Path:
    if not name.isidentifier():
        raise SpecError("msexp new experiment", "NAME", "must be a Python identifier", name)
    return folder / f"{name}.py"


def new_sweep(experiment: str, method: str = "grid", output: Path | None = None,
              force: bool = False) -> Path:
    """Write a sweep file over the main knobs of `experiment` that validates as written."""
    target = experiment.partition(":")[0]
    stem = Path(target).stem if target.endswith(".py") else target.rsplit(".", 1)[-1]
    if target.endswith(".py") and ":" not in experiment:
        experiment = f"{target}:build"
    path = output or SWEEPS / f"{stem}.yaml"
    _write(path, SWEEP[method].format(name=stem, experiment=experiment, path=path), force)
    return path


def _write(path: Path, text: str, force: bool) -> None:
    if path.exists() and not force:
        raise MsexpError(f"{path}: exists already; pass --force to overwrite")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
