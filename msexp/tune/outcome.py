"""What a tune run found, and what became of each candidate, in a few words."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from msexp.tune.phases import Profile, Verdict


@dataclass
class Outcome:
    """What a tune run found, and the files and MLflow runs it left."""

    profiles: list[Profile]
    standing: list[Profile]
    spread: float | None
    rounds: int
    baseline: Verdict | None
    verdicts: list[Verdict]
    pick: Verdict | None
    plot: Path | None = None
    sweep_file: Path | None = None
    parents: dict[str, str] = field(default_factory=dict)
    experiment_id: str = ""

    @property
    def rejected(self) -> list[Profile]:
        """The candidates the confirm phase did not keep."""
        return [v.profile for v in self.verdicts if v.rejected]


def fate(outcome: Outcome, profile: Profile) -> str:
    """What became of a candidate, in a few words."""
    if profile.dropped:
        return f"dropped: {profile.dropped}"
    confirmed = next((v for v in outcome.verdicts if v.profile is profile), None)
    if confirmed is not None:
        chosen = outcome.pick is confirmed
        return "the pick" if chosen else (f"not kept: {confirmed.rejected}" if confirmed.rejected
                                          else "kept, slower than the pick")
    if outcome.baseline is not None and outcome.baseline.profile is profile:
        return ("the pick: the baseline, as nothing faster kept the objective"
                if outcome.pick is outcome.baseline else "the baseline: trained as the reference")
    rank = outcome.standing.index(profile) + 1
    return (f"ranked {rank} of {len(outcome.standing)} by samples/s: not among the "
            f"{len(outcome.verdicts)} confirmed")
