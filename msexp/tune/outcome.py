"""What a tune run found, and what became of each candidate, in a few words."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from msexp.tune import rules
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
    stopped: str = ""  # why halving stopped

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
    `frequency` updates). A candidate is taken over a fitting baseline only where it is
    faster beyond its noise (`rules.beats_reference`), so that load on the machine does
    not pick between equals. None if nothing is kept and the baseline does not fit."""
    kept = [v for v in verdicts
            if v.rejected is None and v is not baseline and math.isfinite(v.ratio)]
    if baseline is not None and baseline.fits:
        kept = [v for v in kept if rules.beats_reference(v.ratio, noise(v))] + [baseline]
    return max(kept, default=None, key=lambda v: v.ratio)


def noise(verdict: Verdict) -> float:
    """The relative spread of a trained configuration's ratio to the baseline: over its
    seeds, else (one seed) over its probes."""
    if math.isfinite(verdict.ratio_spread):
        return verdict.ratio_spread
    return verdict.profile.spreads[-1] if verdict.profile.spreads else math.inf


def speeds_disagree(verdict: Verdict) -> bool:
    """Whether a trained configuration's probes and its confirm trainings measured its
    throughput ratio farther apart than their spreads allow (`rules.SPREADS` times their
    combined spread; a spread not measured counts as none): then neither figure tells its
    speed from the baseline's."""
    probes = verdict.profile
    if not probes.ratios or not math.isfinite(verdict.ratio):
        return False
    errors = [ratio * spread for ratio, spread in ((probes.ratios[-1], probes.spreads[-1]),
                                                   (verdict.ratio, verdict.ratio_spread))
              if math.isfinite(spread)]
    return abs(verdict.ratio - probes.ratios[-1]) > rules.SPREADS * math.hypot(*errors)


def fate(outcome: Outcome, profile: Profile) -> str:
    """What became of a candidate, in a few words."""
    if profile.dropped:
        return f"dropped: {profile.dropped}"
    confirmed = next((v for v in outcome.verdicts if v.profile is profile), None)
    if outcome.baseline is not None and outcome.baseline.profile is profile:
        return ("the pick: the baseline, as nothing that kept the objective trained faster "
                "beyond its noise"
                if outcome.pick is outcome.baseline else "the baseline: trained as the reference")
    if confirmed is not None:
        chosen = outcome.pick is confirmed
        return "the pick" if chosen else (f"not kept: {confirmed.rejected}" if confirmed.rejected
                                          else _short_of(outcome, confirmed))
    rank = outcome.standing.index(profile) + 1
    return (f"ranked {rank} of {len(outcome.standing)} by probes: not among the "
            f"{len(outcome.verdicts)} confirmed")


def _short_of(outcome: Outcome, kept: Verdict) -> str:
    """Why a kept candidate is not the pick."""
    reference = outcome.baseline is not None and outcome.baseline.fits
    if reference and not rules.beats_reference(kept.ratio, noise(kept)):
        return (f"kept, {kept.ratio:.3f}x the baseline: not beyond twice its spread "
                f"({noise(kept):.1%})")
    return "kept, trained slower than the pick"
