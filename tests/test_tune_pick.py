"""tune's pick line: it claims a speed only where the probes and the confirm trainings agree
within their spreads."""

from __future__ import annotations

import math
from pathlib import Path

from msexp.cli.tune import lines, summary
from msexp.tune.candidates import Candidate
from msexp.tune.measure import Profile
from msexp.tune.outcome import Outcome, speeds_disagree
from msexp.tune.phases import Verdict


def verdict(micro: int, probes: tuple[float, float], trained: tuple[float, float]) -> Verdict:
    profile = Profile(Candidate({"micro_size": micro}, {"batch_size": 64, "micro_size": micro}),
                      ratios=[probes[0]], spreads=[probes[1]])
    return Verdict(profile, [0.9, 0.91], 1000.0, 10.0 / micro, ratio=trained[0],
                   ratio_spread=trained[1])


def test_probes_and_trainings_that_disagree_beyond_their_spreads() -> None:
    # the run: probes 0.67x +/- 30%, one confirm seed 1.24x (spread not measured)
    assert speeds_disagree(verdict(2, (0.67, 0.30), (1.24, math.inf)))
    assert not speeds_disagree(verdict(2, (0.67, 0.30), (0.95, math.inf)))  # 0.28 < 0.40
    # both spreads count: 0.2 apart, 2 x hypot(0.05, 0.05) = 0.141 < 0.2 < 2 x hypot(.1, .1)
    assert speeds_disagree(verdict(2, (1.0, 0.05), (1.2, 0.05 / 1.2)))
    assert not speeds_disagree(verdict(2, (1.0, 0.1), (1.2, 0.1 / 1.2)))
    assert not speeds_disagree(verdict(2, (1.0, 0.1), (math.nan, math.inf))), "not trained"


def outcome_of(pick: Verdict, tmp_path: Path) -> Outcome:
    base = verdict(1, (1.0, 0.0), (1.0, 0.0))
    base.fits = False  # the baseline breaks the memory budget: the pick is not on speed
    return Outcome([base.profile, pick.profile], [pick.profile], 0.3, 1, base, [pick], pick,
                   tmp_path / "p.png", tmp_path / "tuned.yaml", {}, "0")


def test_the_pick_line_says_not_distinguishable_on_speed_where_they_disagree(
        tmp_path: Path) -> None:
    document = summary(outcome_of(verdict(2, (0.67, 0.30), (1.24, math.inf)), tmp_path))
    assert document["pick"]["speed_distinguishable"] is False
    assert document["pick"]["probe_ratio"] == 0.67
    (line,) = [line for line in lines(document) if line.startswith("  ") and "memory" in line]
    # mutation: the confirm ratio shown as the pick's speed -> "throughput 1.24x ± ?"
    assert line.startswith("  not distinguishable on speed from the baseline "
                           "(micro_size=1): its trainings ran 1.24x ± ? the baseline's, its "
                           "probes 0.67x ± 30.0%, farther apart than their spreads allow")
    assert "throughput" not in line
    agreed = summary(outcome_of(verdict(2, (1.2, 0.05), (1.24, 0.02)), tmp_path))
    assert agreed["pick"]["speed_distinguishable"] is True
    assert any(line.startswith("  throughput 1.24x ± 2.0% the baseline's (micro_size=1; ")
               for line in lines(agreed))


def test_a_pick_whose_memory_was_not_measured_shows_a_dash(tmp_path: Path) -> None:
    """Mutation (issue 53): the dash written `XX-XX`."""
    document = summary(outcome_of(verdict(2, (1.2, 0.05), (1.24, 0.02)), tmp_path))
    document["pick"]["memory_ratio"] = None
    (line,) = [line for line in lines(document) if line.startswith("  throughput")]
    assert ", memory -, objective " in line, line


def test_a_pick_without_its_memory_measured_beside_a_measured_baseline_shows_a_dash(
        tmp_path: Path) -> None:
    """A pick whose trainings reported no train_mem_mb has no memory ratio to the
    baseline's (which did): `memory -`, no crash. (issue 53 fresh fcli: cli.tune.summary
    50, `and` -> `or`: None / 10.0, TypeError)"""
    pick = verdict(2, (1.2, 0.05), (1.24, 0.02))
    pick.memory_mb = None
    document = summary(outcome_of(pick, tmp_path))
    assert document["pick"]["memory_ratio"] is None
    (line,) = [line for line in lines(document) if line.startswith("  throughput")]
    assert ", memory -, objective " in line, line
    measured = summary(outcome_of(verdict(2, (1.2, 0.05), (1.24, 0.02)), tmp_path))
    assert measured["pick"]["memory_ratio"] == 0.5  # 5 MB against the baseline's 10 MB


def test_a_tune_run_whose_spread_was_not_measured_says_so(tmp_path: Path) -> None:
    """Halving that never measured the ratio's spread says `not measured` (no percentage).
    (issue 53 fresh fcli: cli.tune.lines 54, the words changed)"""
    outcome = outcome_of(verdict(2, (1.2, 0.05), (1.24, 0.02)), tmp_path)
    outcome.spread = None
    halving = [line for line in lines(summary(outcome)) if line.startswith("halving: ")]
    assert halving == ["halving: 1 round(s); spread of the ratio (the leaders' median notches, "
                       "or the change between rounds where larger): not measured"], halving
