"""The trial protocol: what the orchestrator asks of a trial process, and what it answers.

A trial process reads one `TrialRequest` (a JSON line) and appends events to the
trial's `events.jsonl`, one JSON object a line: `launch` (data parallel only), `start`,
`batch_statistics` (a network with BatchNorm), one `epoch` per epoch, then `result` or
`error`, and always `end` last. `EventWriter` writes that stream and `EventReader` reads
it; nothing else builds or parses them. `execution/result.py` makes a `TrialResult` of it.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Union

from msexp.knobs import graph_params
from msexp.secrets.redaction import redact_known
from msexp.training.records import BatchStatistics, Epoch, Probe, Target
from msexp.trial_folder import CHECKPOINTS, EVENTS, LOG, OUTPUTS


@dataclass(frozen=True)
class Command:
    """A user's own training command, run once per trial (see `execution/command.py`):
    `argv` as a shell splits it; `cwd` the sweep file's folder; `args`: flags, hydra or
    none; `metrics`: regexes with named groups; `switches`: flags passed alone for true
    (None: those `--help` shows without a value); `pass_env`: secrets passed on purpose."""

    argv: list[str]
    cwd: str
    args: str = "flags"
    metrics: list[str] = field(default_factory=list)
    switches: list[str] | None = None
    pass_env: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Checkpointing:
    """The sweep's `checkpoint` section, as a trial needs it: save `every` this many
    epochs, `keep` last, best, all or none; `keep: best` compares `metric`."""

    every: int = 1
    keep: str = "last"
    metric: str | None = None
    maximize: bool = True


def reusable(held: str | None, wanted: str | None) -> bool:
    """Whether graphs compiled for signature `held` can run a trial of signature
    `wanted` (see `TrialRequest.graph_signature`): the one place reuse is decided."""
    return held is not None and held == wanted


@dataclass(frozen=True)
class TrialRequest:
    """One trial: the experiment, its complete params, and where its files go.

    `folder` holds `trial.log` and `events.jsonl` (None: in the foreground, `msexp run`).
    `command`: a user's command, which `experiment` then names. `cold` forbids reusing
    an earlier trial's graphs. `trial` names the trial in its study (stable across
    attempts, unique across studies): a checkpoint of another trial is never resumed.
    `probe`: a capped measuring run instead of the epochs (`msexp tune`). `attempt`: this
    attempt's token on the folder (`msexp.trial_folder`).
    """

    experiment: str
    params: dict[str, Any]
    folder: Path | None = None
    target: Target | None = None
    data: dict[str, Any] | None = None
    command: Command | None = None
    checkpoint: Checkpointing | None = None
    init_from: str | None = None
    cold: bool = False
    trial: str | None = None
    probe: Probe | None = None
    attempt: str | None = None

    @property
    def graph_signature(self) -> str | None:
        """Trials with equal signatures can run on one set of compiled graphs (everything
        that shapes them: experiment, data, structural params); None: never reused."""
        if self.cold or self.command is not None or self.params.get("devices", 1) > 1:
            return None
        return json.dumps([self.experiment, self.data, graph_params(self.params)],
                          sort_keys=True, default=str)

    @property
    def checkpoint_dir(self) -> Path:
        """Where the trial's checkpoints go (for a command: where its outputs go)."""
        assert self.folder is not None
        return self.folder / (OUTPUTS if self.command else CHECKPOINTS)

    @property
    def events_path(self) -> Path:
        assert self.folder is not None
        return self.folder / EVENTS

    @property
    def log_path(self) -> Path:
        assert self.folder is not None
        return self.folder / LOG

    def to_json(self) -> str:
        """One line of JSON."""
        data = dataclasses.asdict(self)
        data["folder"] = str(self.folder) if self.folder else None
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> TrialRequest:
        """Inverse of `to_json`."""
        data = json.loads(text)
        return cls(data["experiment"], data["params"],
                   Path(data["folder"]) if data.get("folder") else None,
                   Target(**data["target"]) if data.get("target") else None, data.get("data"),
                   Command(**data["command"]) if data.get("command") else None,
                   Checkpointing(**data["checkpoint"]) if data.get("checkpoint") else None,
                   data.get("init_from"), data.get("cold", False), data.get("trial"),
                   Probe(**data["probe"]) if data.get("probe") else None, data.get("attempt"))


@dataclass
class Launch:
    """A data-parallel trial started msrun; its ranks log into `rank_logs`."""

    devices: int
    rank_logs: str
    pid: int


@dataclass
class Start:
    """The workload is built and training begins."""

    data_source: str
    pid: int
    impl: dict[str, str] = field(default_factory=dict)
    resumed_from: int = 0  # the epoch of the checkpoint it continues from; 0: from scratch
    warm: bool = False  # runs on graphs an earlier trial of this host compiled


@dataclass
class Result:
    """The trial finished; its final metrics and the model checkpoint it kept."""

    metrics: dict[str, float]
    checkpoint: str | None = None


@dataclass
class Error:
    """The trial failed: `kind` is diverged, stopped, exception or exit."""

    kind: str
    message: str


@dataclass
class End:
    """Nothing follows."""


# Epoch and BatchStatistics: the training loop or msexp.hooks builds them
Event = Union[Launch, Start, BatchStatistics, Epoch, Result, Error, End]
_KINDS: dict[str, type] = {"launch": Launch, "start": Start, "batch_statistics": BatchStatistics,
                           "epoch": Epoch, "result": Result, "error": Error, "end": End}
_NAMES = {cls: name for name, cls in _KINDS.items()}


def encode(event: Event) -> str:
    """One JSON line (with its time) for `event`."""
    fields = dataclasses.asdict(event)
    return json.dumps({"event": _NAMES[type(event)], **fields, "t": time.time()}, default=float)


def decode(line: str) -> Event:
    """The event of one JSON line."""
    data = json.loads(line)
    cls = _KINDS[data.pop("event")]
    data.pop("t", None)
    return cls(**data)


class EventWriter:
    """Appends events to a stream, a line each, flushed as written, with `secrets` and
    passwords in URLs redacted (`urls.redact_known`)."""

    def __init__(self, stream: IO[str], secrets: list[str] | None = None):
        self.stream, self.secrets = stream, secrets or []

    @classmethod
    def open(cls, path: Path, secrets: list[str] | None = None) -> EventWriter:
        return cls(open(path, "a", buffering=1, encoding="utf-8"), secrets)  # noqa: SIM115

    def __call__(self, event: Event) -> None:
        self.stream.write(redact_known(encode(event), self.secrets) + "\n")
        self.stream.flush()

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stream.close()


class EventReader:
    """Reads the complete event lines appended to an events file since the last read."""

    def __init__(self, path: Path):
        self.path, self.offset, self.partial = path, 0, ""

    def read(self) -> list[Event]:
        try:
            with self.path.open("r", encoding="utf-8") as f:
                f.seek(self.offset)
                chunk = f.read()
                self.offset = f.tell()
        except FileNotFoundError:
            return []
        lines = (self.partial + chunk).split("\n")
        self.partial = lines.pop()
        return [decode(line) for line in lines if line.strip()]


def read_events(path: Path) -> list[Event]:
    """Every complete event in an events file."""
    return EventReader(path).read()
