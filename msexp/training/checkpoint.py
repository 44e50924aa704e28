"""A trial's checkpoints: what it needs to continue as if it had never stopped.

Every `every` epochs the trial saves, with MindSpore's `save_checkpoint`, the network's
weights and every other Parameter of its training state: the optimizer's moments,
step counter and learning rate, the loss scale and its counter, THOR's factors. Beside
them, `state.json` records the epoch, the update counter, THOR's refresh counter and
the epochs so far (their metrics and series), so a resumed trial reports one continuous
history. A checkpoint is written under a temporary name and renamed, and `state.json`
is replaced last, so a kill during a write never makes a torn file the latest.

Data order is deterministic per epoch for array data, so a resumed trial equals an
uninterrupted one; a MindSpore dataset's shuffle starts afresh on resume.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import mindspore as ms

from msexp.paths import write_atomic
from msexp.secrets.redaction import redact_params
from msexp.training.records import Epoch
from msexp.trial_folder import Fence

STATE = "state.json"


@dataclass(frozen=True)
class CheckpointPlan:
    """Where and how often a trial saves, and which checkpoints it keeps.

    Attributes:
        folder: the trial's checkpoint folder (the same for every attempt of the trial).
        every: save every this many epochs (and after the last one).
        keep: last, best (the best epoch by `metric`), all, or none (deleted at the end).
        metric, maximize: what `keep: best` compares.
        owner: which trial of which study saves here, and its params (see `owner`): a
            checkpoint recorded with another owner is never resumed.
        params: the trial's params in clear, to check a recorded digest of its secret
            ones (never written).
        fence: this attempt's hold on the trial folder: a checkpoint is published only
            while it holds (`msexp.trial_folder`).
    """

    folder: Path
    every: int = 1
    keep: str = "last"
    metric: str | None = None
    maximize: bool = True
    owner: dict[str, Any] | None = None
    params: dict[str, Any] | None = field(default=None, repr=False)
    fence: Fence | None = None

    def holding(self) -> contextlib.AbstractContextManager[None]:
        """Publish inside this block only while this attempt owns the folder.

        Raises:
            Superseded: a newer attempt of the trial took the folder.
        """
        return self.fence.holding() if self.fence else contextlib.nullcontext()


@dataclass
class Saved:
    """What `state.json` records about the latest checkpoint."""

    epoch: int
    step: int
    file: str
    history: list[Epoch] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)  # thor_steps, overflow, skipped
    best: dict[str, Any] | None = None  # {"epoch", "value", "file"}
    owner: dict[str, Any] | None = None  # the plan's owner when it was saved


def owner(trial: str | None, params: dict[str, Any], salt: str | None = None
          ) -> dict[str, Any]:
    """What a checkpoint records about the trial that trains it: `trial` (its study and
    number, as the orchestrator names it) and its params, as JSON keeps them, secrets
    redacted; where that hides a value, also a salted digest of the params in clear
    (`salt`, default a new random one), so that only the same real values resume."""
    shown = json.loads(json.dumps(redact_params(params), default=str))
    record = {"trial": trial, "params": shown}
    real = json.dumps(params, default=str, sort_keys=True)
    if json.loads(real) != shown:
        salt = salt or secrets.token_hex(16)
        digest = hashlib.sha256(f"{salt}\n{real}".encode()).hexdigest()
        record.update(salt=salt, digest=digest)
    return record


def latest(folder: Path) -> Saved | None:
    """The latest checkpoint's record in `folder`, or None if it has none."""
    try:
        data = json.loads((folder / STATE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    data["history"] = [Epoch(**e) for e in data.get("history", [])]
    return Saved(**data)


def resumable(plan: CheckpointPlan) -> Saved | None:
    """The latest checkpoint's record in the plan's folder, if this trial may continue from
    it: its file is there, not empty, and was saved by this trial (same owner). Otherwise
    None: the folder's files are moved aside, and one line says why the trial starts
    afresh.

    Raises:
        Superseded: a newer attempt of the trial took its folder.
    """
    with plan.holding():
        saved = latest(plan.folder)
        problem = None if saved is None else _not_resumable(plan, saved)
        if problem is None:
            return saved
        aside = _move_aside(plan.folder)
    print(f"msexp: starting afresh, not resuming: {problem}; its files are now in {aside}",
          flush=True)
    return None


def _not_resumable(plan: CheckpointPlan, saved: Saved) -> str | None:
    path = plan.folder / saved.file
    if not path.is_file():
        return f"{path}, which {STATE} names, is gone"
    if path.stat().st_size == 0:
        return f"{path} is empty (0 bytes)"
    theirs, mine = saved.owner or {}, plan.owner or {}
    if plan.params is not None and mine:  # the digest of the same values, with their salt
        mine = owner(mine.get("trial"), plan.params, theirs.get("salt"))
    if theirs == mine:
        return None
    if theirs.get("trial") != mine.get("trial"):
        return (f"{path} was saved by {theirs.get('trial') or 'an unrecorded trial'}, "
                f"not by {mine.get('trial') or 'this trial'}")
    params = {**theirs.get("params", {}), **mine.get("params", {})}
    changed = sorted(k for k in params if theirs.get("params", {}).get(k) !=
                     mine.get("params", {}).get(k))
    if not changed:
        return f"{path} was trained with other values of its secret params"
    return f"{path} was trained with other params ({', '.join(changed)})"


def _move_aside(folder: Path) -> Path:
    """Rename `folder` to a free `NAME.replaced-N` beside it, and make `folder` afresh."""
    number = 1
    while (aside := folder.with_name(f"{folder.name}.replaced-{number}")).exists():
        number += 1
    folder.rename(aside)
    folder.mkdir()
    return aside


def state_parameters(*cells: Any) -> dict[str, ms.Parameter]:
    """Every Parameter of the training state, by name (a shared one once)."""
    found: dict[str, ms.Parameter] = {}
    for cell in cells:
        if cell is None:
            continue
        named = (cell.parameters_and_names() if hasattr(cell, "parameters_and_names")
                 else scaler_parameters(cell))
        for name, param in named:
            found.setdefault(name, param)
    return found


def scaler_parameters(scaler: Any) -> list[tuple[str, ms.Parameter]]:
    """A MindSpore LossScaler's Parameters (it is not a Cell), named as checkpoints hold them."""
    return [(f"loss_scale.{name}", getattr(scaler, name)) for name in ("scale_value", "counter")
            if isinstance(getattr(scaler, name, None), ms.Parameter)]


Write = Callable[[dict[ms.Parameter, Any]], None]
"""Sets Parameters to values (see `Graphs.write`: set_data does not reach compiled graphs)."""


def set_data(values: dict[ms.Parameter, Any]) -> None:
    """The `Write` for Parameters no graph has run on yet."""
    for param, value in values.items():
        param.set_data(value)


class Checkpoints:
    """Saves and restores one trial's training state as its plan says."""

    def __init__(self, plan: CheckpointPlan, parameters: dict[str, ms.Parameter],
                 write: Write = set_data):
        self.plan, self.parameters, self.write = plan, parameters, write
        plan.folder.mkdir(parents=True, exist_ok=True)

    def restore(self) -> Saved | None:
        """Load the latest checkpoint into the parameters if this trial may continue from it
        (see `resumable`); its record, or None."""
        saved = resumable(self.plan)
        if saved is None:
            return None
        load_into(self.parameters, self.plan.folder / saved.file, self.write)
        return saved

    def due(self, epoch: int, last_epoch: int) -> bool:
        return epoch % self.plan.every == 0 or epoch == last_epoch

    def save(self, epoch: int, step: int, history: list[Epoch], counters: dict[str, int],
             previous: Saved | None) -> Saved:
        """Save after `epoch`; return the new record (the best one is kept as the plan says).

        Raises:
            Superseded: a newer attempt of the trial took its folder (nothing published).
        """
        name = f"epoch-{epoch:04d}.ckpt"
        partial = self.plan.folder / f".partial-{os.getpid()}-{name}"
        try:
            ms.save_checkpoint([{"name": n, "data": p} for n, p in self.parameters.items()],
                               str(partial))
        except OSError as exc:  # MindSpore's names no file: say where, e.g. a full disk
            partial.unlink(missing_ok=True)
            raise OSError(exc.errno, exc.strerror, str(partial)) from exc
        best = previous.best if previous else None
        value = history[-1].metrics.get(self.plan.metric) if self.plan.metric else None
        if value is not None and (best is None or _better(value, best["value"],
                                                          self.plan.maximize)):
            best = {"epoch": epoch, "value": value, "file": name}
        saved = Saved(epoch, step, name, list(history), dict(counters), best, self.plan.owner)
        record = json.dumps(dataclasses.asdict(saved), default=float)
        try:
            with self.plan.holding():
                os.replace(partial, self.plan.folder / name)
                write_atomic(self.plan.folder / STATE, record)
                self._prune(saved, final=False)
        finally:
            partial.unlink(missing_ok=True)
        return saved

    def finish(self, saved: Saved | None) -> Path | None:
        """At the trial's end: keep only what the plan keeps; return the model kept
        (the best epoch's with keep: best, else the last), or None."""
        if saved is None:
            return None
        with self.plan.holding():
            self._prune(saved, final=True)
        kept = saved.best["file"] if self.plan.keep == "best" and saved.best else saved.file
        path = self.plan.folder / kept
        return path if path.is_file() else None

    def _prune(self, saved: Saved, final: bool) -> None:
        keep = self.plan.keep
        if keep == "all":
            return
        wanted = {saved.file}  # the latest: what a resumed attempt continues from
        if keep == "best" and saved.best:
            wanted.add(saved.best["file"])
            if final:
                wanted = {saved.best["file"]}
        if keep == "none" and final:
            wanted = set()
        for path in self.plan.folder.glob("epoch-*.ckpt"):
            if path.name not in wanted:
                path.unlink()
        if not wanted:
            (self.plan.folder / STATE).unlink(missing_ok=True)


def load_into(parameters: dict[str, ms.Parameter], path: Path, write: Write = set_data
              ) -> list[str]:
    """Set `parameters` from the checkpoint file at `path`; return the names it lacked."""
    loaded = ms.load_checkpoint(str(path))
    values = {param: loaded[name].data if hasattr(loaded[name], "data") else loaded[name]
              for name, param in parameters.items() if name in loaded}
    write(values)
    return [name for name in parameters if name not in loaded]


def _better(value: float, than: float, maximize: bool) -> bool:
    return value > than if maximize else value < than
