"""What a script run by msexp reads and reports: its params, its folders, its epochs.

Outside msexp (no MSEXP_EVENTS in the environment) every function here does nothing and
costs nothing, so the script still runs by hand as before.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from msexp.execution.protocol import Epoch, Event, EventWriter
from msexp.keys import TrialEnv

_state: dict[str, Any] = {"stop": False, "writer": None, "path": None,
                          "began": time.perf_counter()}


def active() -> bool:
    """Whether this process runs as an msexp trial (as its rank 0, when it runs as msrun
    ranks: the other ranks report nothing)."""
    return bool(os.environ.get(TrialEnv.EVENTS)) and os.environ.get("RANK_ID", "0") == "0"


def params() -> dict[str, Any]:
    """The trial's params (the values the sweep file sets); {} outside msexp."""
    path = os.environ.get(TrialEnv.PARAMS)
    return json.loads(Path(path).read_text(encoding="utf-8")) if path else {}


def output_dir(default: str | Path = ".") -> Path:
    """The trial's folder for outputs and checkpoints (created); `default` outside msexp."""
    folder = Path(os.environ.get(TrialEnv.OUTPUT_DIR) or default)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def resume_dir() -> Path | None:
    """On a later attempt of a trial, the folder whose checkpoints it should resume from;
    else None."""
    folder = os.environ.get(TrialEnv.RESUME)
    return Path(folder) if folder else None


def report(epoch: int, step: int | None = None, *,
           series: dict[str, list[float]] | None = None, **metrics: float) -> None:
    """Report one epoch's metrics (e.g. `report(3, eval_accuracy=0.97)`) to msexp, which logs
    them, uses them for pruning and takes the last value of each as final. `step` counts
    optimizer updates so far (MLflow's step axis); `series` holds per-update values of this
    epoch (`train_loss`, `loss_scale`), logged one per update ending at `step`."""
    values = {k: float(v) for k, v in metrics.items()}
    per_update = {k: [float(v) for v in vs] for k, vs in (series or {}).items()}
    tell(Epoch(epoch, epoch if step is None else step, time.perf_counter() - _state["began"],
               values, per_update))


def tell(event: Event) -> None:
    """Write one event of the trial's protocol (an `Epoch`, `BatchStatistics`) to msexp;
    nothing outside msexp."""
    if not active():
        return
    path = os.environ[TrialEnv.EVENTS]
    if _state["writer"] is None or _state["path"] != path:  # a process may run trials after
        _state["writer"], _state["path"] = EventWriter.open(Path(path)), path  # each other
    _state["writer"](event)


def should_stop() -> bool:
    """Whether msexp asked this trial to stop (it was pruned); always False outside msexp."""
    return _state["stop"]


def _request_stop(signum: int, frame: Any) -> None:
    _state["stop"] = True


if active() and threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGUSR1, _request_stop)  # msexp's stop request (pruning)
