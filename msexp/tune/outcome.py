"""What a tune run found, and what became of each candidate, in a few words."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from msexp.tune.measure import Profile
from msexp.tune.phases import Verdict


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

    def verdict(self, profile: Profile) -> Verdict | None:
        """`profile`'s confirm trainings: its own, or the baseline's."""
        if self.baseline is not None and self.baseline.profile is profile:
            return self.baseline
        return next((v for v in self.verdicts if v.profile is profile), None)


def choose(verdicts: list[Verdict], baseline: Verdict | None) -> Verdict | None:
    """The pick: of the candidates kept and the baseline (where it fits the budget), the
    one whose confirm trainings ran fastest against the baseline's trainings of the same
    seeds (its ratio; the baseline's is 1). Those trainings, the sweep's epochs each,
    measure throughput better than a probe (THOR's inverses, for one, come every
    `frequency` updates); None if nothing is kept and the baseline does not fit."""
    chosen = [v for v in verdicts if v.rejected is None and v is not baseline]
    if baseline is not None and baseline.fits:
        chosen.append(baseline)
    return max(chosen, default=None, key=lambda v: (
        v.ratio if math.isfinite(v.ratio) else -math.inf))


def fate(outcome: Outcome, profile: Profile) -> str:
    """What became of a candidate, in a few words."""
    if profile.dropped:
        return f"dropped: {profile.dropped}"
    confirmed = next((v for v in outcome.verdicts if v.profile is profile), None)
    if confirmed is not None:
        chosen = outcome.pick is confirmed
        return "the pick" if chosen else (f"not kept: {confirmed.rejected}" if confirmed.rejected
                                          else "kept, trained slower than the pick")
    if outcome.baseline is not None and outcome.baseline.profile is profile:
        return ("the pick: the baseline, as nothing that kept the objective trained faster"
                if outcome.pick is outcome.baseline else "the baseline: trained as the reference")
    rank = outcome.standing.index(profile) + 1
    return (f"ranked {rank} of {len(outcome.standing)} by probes: not among the "
            f"{len(outcome.verdicts)} confirmed")
