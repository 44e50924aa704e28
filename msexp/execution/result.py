"""`TrialResult`: what the orchestrator makes of a trial's event stream, whatever the
trial did, and the `Status` it ended with."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from msexp.execution.protocol import End, Epoch, Error, Event, Launch, Result, Start
from msexp.training.records import BatchStatistics

PATHS = ("log_path", "events_path", "rank_logs", "checkpoint")  # TrialResult's Path fields


class Status(str, Enum):
    """How a trial ended."""

    COMPLETE = "COMPLETE"
    FAILED = "FAILED"
    PRUNED = "PRUNED"
    TIMEOUT = "TIMEOUT"


@dataclass
class TrialResult:
    """Everything a trial produced, whatever its status."""

    status: Status
    metrics: dict[str, float] = field(default_factory=dict)
    epochs: list[Epoch] = field(default_factory=list)
    error: str = ""
    data_source: str = ""
    impl: dict[str, str] = field(default_factory=dict)
    wall_s: float = 0.0
    log_path: Path | None = None
    events_path: Path | None = None
    stop_s: float | None = None
    rank_logs: Path | None = None
    checkpoint: Path | None = None
    resumed_from: int = 0
    warm: bool = False
    pid: int = 0  # the process that ran the trial
    batch_statistics: BatchStatistics | None = None  # its network's BatchNorm layers

    def absorb(self, event: Event) -> bool:
        """Update from one event of the trial's stream; True at its end."""
        if isinstance(event, Launch):
            self.rank_logs = Path(event.rank_logs)
        elif isinstance(event, Start):
            self.data_source, self.impl = event.data_source, event.impl
            self.resumed_from, self.warm, self.pid = event.resumed_from, event.warm, event.pid
        elif isinstance(event, BatchStatistics):
            self.batch_statistics = event
        elif isinstance(event, Epoch):
            self.epochs.append(event)
        elif isinstance(event, Result):  # a trial the pruner stopped stays PRUNED
            self.metrics, self.status = event.metrics, (
                Status.PRUNED if self.status is Status.PRUNED else Status.COMPLETE)
            self.checkpoint = Path(event.checkpoint) if event.checkpoint else None
        elif isinstance(event, Error) and self.status is not Status.PRUNED:
            self.status, self.error = Status.FAILED, event.message
        return isinstance(event, End)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready copy (for the spool of results waiting for MLflow)."""
        data = dataclasses.asdict(self)
        data["status"] = self.status.value
        for key in PATHS:
            data[key] = str(data[key]) if data[key] else None
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TrialResult:
        """Inverse of `to_json`."""
        data = dict(data, status=Status(data["status"]),
                    epochs=[Epoch(**e) for e in data.get("epochs", [])])
        if data.get("batch_statistics"):
            data["batch_statistics"] = BatchStatistics(**data["batch_statistics"])
        for key in PATHS:
            data[key] = Path(data[key]) if data.get(key) else None
        return cls(**data)

    def last_epoch_metrics(self) -> dict[str, float]:
        """Per-epoch metrics of the last epoch that finished (for pruned/failed trials)."""
        return dict(self.epochs[-1].metrics) if self.epochs else {}

    def ended(self, metric: str) -> str:
        """Its end in a progress line: status, then error or `metric`'s value, and time."""
        value = (self.metrics or self.last_epoch_metrics()).get(metric)
        shown = self.error if self.error or value is None else f"{metric}={value:.4g}"
        return " ".join(filter(None, [self.status.value, shown, f"({self.wall_s:.1f} s)"]))

    def final_metrics(self) -> dict[str, float]:
        """The trial's final metrics (its last epoch's, if it reported none) and its wall
        time: what Optuna is told (objectives, constraints) and MLflow logs as final."""
        return {**(self.metrics or self.last_epoch_metrics()), "wall_s": self.wall_s}
