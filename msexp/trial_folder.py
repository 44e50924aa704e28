"""A trial's folder: where it is (`mlruns/trials/STUDY/trial-NNNN`), what it holds, and
which attempt of the trial owns it.

The folder holds `trial.log`, `events.jsonl` and `checkpoints/` (a command's
`outputs/`). Each attempt takes the trial folder with a token of its own before its trial starts. A
checkpoint is published (renamed into place, recorded in `state.json`, the old ones
pruned) only while the folder's token is the attempt's own, under a lock that taking
the folder also holds. So an attempt whose claim was lost (its sweep frozen past its
heartbeat while another took the trial) writes nothing the newer attempt reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from msexp.errors import MsexpError
from msexp.os_tools.locking import flock
from msexp.paths import TRIALS_DIR, write_atomic

TOKEN_FILE = "attempt"
LOG, EVENTS, CHECKPOINTS, OUTPUTS = "trial.log", "events.jsonl", "checkpoints", "outputs"


def trial_name(number: int) -> str:
    """`trial-0003`: a trial's folder name, and its MLflow run's name by default."""
    return f"trial-{number:04d}"


def trial_folder(study: str, number: int) -> Path:
    """Where trial `number` of `study` keeps its files, whatever its attempt."""
    return TRIALS_DIR / study / trial_name(number)


def has_trials(study: str) -> bool:
    """Whether trial folders of `study` exist (it ran before, in this `mlruns/`)."""
    return any((TRIALS_DIR / study).glob("trial-*"))


class Superseded(MsexpError):
    """A newer attempt of the trial owns its folder: this one must not write there."""


@dataclass(frozen=True)
class Fence:
    """One attempt's hold on its trial's `folder`."""

    folder: Path
    token: str

    def take(self) -> None:
        """Make this attempt the folder's owner (waits for a publish under way)."""
        with self._locked():
            write_atomic(self.folder / TOKEN_FILE, self.token)

    @contextmanager
    def holding(self) -> Iterator[None]:
        """Write inside this block only while this attempt owns the folder.

        Raises:
            Superseded: a newer attempt took the folder.
        """
        with self._locked():
            try:
                owner = (self.folder / TOKEN_FILE).read_text(encoding="utf-8")
            except FileNotFoundError:
                owner = None
            if owner != self.token:
                raise Superseded(f"{self.folder}: a newer attempt of this trial took its "
                                 f"folder; this attempt stops without writing there")
            yield

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.folder.mkdir(parents=True, exist_ok=True)
        with flock(self.folder / f".{TOKEN_FILE}.lock"):
            yield
