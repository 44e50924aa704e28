"""The spool: trial results kept on disk while the MLflow store cannot take them.

One JSON file per trial under `mlruns/spool/`, and one `.ending` file per sweep whose
parent run could not be ended. A record names its store by the URL
without credentials, so moving a password from the URL into MLFLOW_TRACKING_PASSWORD
still finds it, and no spool file holds a secret (a record is redacted as a whole).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from msexp.execution.protocol import TrialResult
from msexp.paths import SPOOL_DIR, write_atomic
from msexp.urls import known_secrets, redact_known, redact_params


def store_key(uri: str) -> str:
    """The tracking store a URI names, without user, password, query or trailing slash."""
    parts = urlsplit(uri)
    if not parts.netloc:
        return uri
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", ""))


@dataclass
class SpooledTrial:
    """A trial result waiting for its MLflow store."""

    store: str
    experiment_id: str
    parent_id: str
    number: int
    params: dict[str, Any]
    result: dict[str, Any]
    started: float

    @property
    def trial_result(self) -> TrialResult:
        return TrialResult.from_json(self.result)


class Spool:
    """Spooled trials in a folder, oldest first."""

    def __init__(self, folder: Path = SPOOL_DIR):
        self.folder = folder

    def keep(self, uri: str, experiment_id: str, parent_id: str, number: int,
             params: dict[str, Any], result: TrialResult, started: float) -> Path:
        """Write one trial's record (atomically) and return its file."""
        record = SpooledTrial(store_key(uri), experiment_id, parent_id, number,
                              redact_params(params), result.to_json(), started)
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{parent_id}-{number:05d}.json"
        write_atomic(path, redact_known(json.dumps(asdict(record), default=str),
                                        known_secrets(params)))
        return path

    def pending(self, uri: str) -> Iterator[tuple[Path, SpooledTrial]]:
        """The records for the store `uri` names, oldest first."""
        key = store_key(uri)
        for path in self.files():
            data = json.loads(path.read_text(encoding="utf-8"))
            data.setdefault("store", store_key(data.pop("uri", "")))  # written by 0.1
            data.pop("uri", None)
            if data["store"] == key:
                yield path, SpooledTrial(**data)

    def files(self) -> list[Path]:
        """Every spooled trial record, whatever its store."""
        return sorted(self.folder.glob("*.json")) if self.folder.is_dir() else []

    def keep_ending(self, uri: str, parent_id: str, ending: str) -> Path:
        """Keep how a sweep's parent run is to end (FINISHED, FAILED, KILLED)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{parent_id}.ending"
        write_atomic(path, json.dumps({"store": store_key(uri), "parent_id": parent_id,
                                       "ending": ending}))
        return path

    def endings(self, uri: str) -> Iterator[tuple[Path, str, str]]:
        """(file, parent run id, ending) of the parent runs of the store `uri` names."""
        for path in self.ending_files():
            data = json.loads(path.read_text(encoding="utf-8"))
            if data["store"] == store_key(uri):
                yield path, data["parent_id"], data["ending"]

    def ending_files(self) -> list[Path]:
        return sorted(self.folder.glob("*.ending")) if self.folder.is_dir() else []
