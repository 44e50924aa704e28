"""What a probe measures, and how a candidate is ranked on it: candidates are probed in
turns between two probes of the baseline, and a candidate's throughput is its ratio to
the baseline's measured around it, interpolated to its time, so that a load that comes
and goes falls on both sides of the ratio alike."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from msexp.execution.result import TrialResult
from msexp.knobs import value_text
from msexp.training.records import Probe
from msexp.tune import rules
from msexp.tune.candidates import Candidate
from msexp.tune.runner import Job, Ran, Runner, failure

MEMORY = "train_mem_mb"
TRAINING = "training_updates"  # a probe's: the updates of the training it stands for
PROBED = ("samples_per_s", "step_ms", "train_mem_mb", "peak_mem_mb")  # constraints a probe checks


@dataclass
class Profile:
    """A candidate's profile: after each round, its throughput as a ratio to the baseline's
    probed beside it and that ratio's relative spread, over all its probes so far; each
    probe's (ratio, spread, updates); the step times it measured; the two sides of its
    latest ratio (its samples/s, the baseline's beside it); its latest figures, or why it
    dropped."""

    candidate: Candidate
    ratios: list[float] = field(default_factory=list)
    spreads: list[float] = field(default_factory=list)
    probes: list[tuple[float, float, int]] = field(default_factory=list)
    steps: list[float] = field(default_factory=list)
    sides: tuple[float, float] | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    dropped: str | None = None

    @property
    def memory_mb(self) -> float | None:
        """train_mem_mb, else (a command's) peak_mem_mb."""
        return self.metrics.get(MEMORY, self.metrics.get("peak_mem_mb"))


@dataclass
class Budget:
    """What a candidate must keep: the sweep file's constraints (as (metric, max, min)) and
    the memory budget in MB, if one is set."""

    constraints: list[tuple[str, float | None, float | None]]
    memory_mb: float | None

    def violation(self, metrics: dict[str, float], metrics_known: tuple[str, ...] | None
                  ) -> str | None:
        """The first bound `metrics` break, among those on `metrics_known` (None: all)."""
        bounds = list(self.constraints)
        if self.memory_mb is not None:
            bounds.append((MEMORY, self.memory_mb, None))
        for metric, high, low in bounds:
            if metrics_known is not None and metric not in metrics_known:
                continue
            value = metrics.get(metric)
            if metric == MEMORY and value is None:
                value = metrics.get("peak_mem_mb")
            if value is None:
                return f"{metric} was not measured"
            if high is not None and value > high:
                return f"{metric} {value:.4g} > {high:g} (the budget)"
            if low is not None and value < low:
                return f"{metric} {value:.4g} < {low:g} (the budget)"
        return None


class Pairs:
    """Probes candidates in turns of up to `rules.BETWEEN`, each turn between two probes of
    the baseline of the same length (the probe after one turn is the one before the next),
    and ranks each candidate on its step times against the baseline's beside it,
    interpolated to the candidate's time (`rules.paired`)."""

    def __init__(self, runner: Runner, baseline: Profile, budget: Budget,
                 record: Callable[[list[Ran], dict[int, str]], None]):
        self.runner, self.baseline, self.budget, self.record = runner, baseline, budget, record
        self.last: Ran | None = None  # the latest baseline probe, where it gave step times
        self.length, self.phase = 0, ""  # its updates and phase
        self.turn: list[tuple[Profile, Ran]] = []  # probed since, with step times, to rank
        self.count = 0

    def probe_baseline(self, phase: str, updates: int) -> list[float] | None:
        """Probe the baseline once more; its step times (None: it gave none)."""
        self.count += 1
        job = Job(phase, f"{phase}-baseline{self.count}-{folder_name(self.baseline.candidate)}",
                  self.baseline.candidate.params, Probe(updates))
        ran = self.runner.run([job], hosts=1)[0]
        steps = absorb(self.baseline, ran, self.budget)
        self.record([ran], {0: self.baseline.dropped} if self.baseline.dropped else {})
        self.last, self.length, self.phase = (ran if steps else None), updates, phase
        return steps or None

    def probe(self, profile: Profile, phase: str, updates: int) -> None:
        """Probe `profile`'s candidate for `updates` updates after a baseline probe of that
        length; it is ranked on all it measured so far once the baseline's next probe ran
        (`settle`, at the end of a turn); the baseline itself is measured by those."""
        if profile is self.baseline:
            return
        if self.last is None or self.length != updates:
            self.settle()  # where it probes the baseline, that may serve this turn too
        if self.last is None or self.length != updates:
            self.probe_baseline(phase, updates)
        ran = self.runner.run([Job(phase, f"{phase}-{folder_name(profile.candidate)}",
                                   profile.candidate.params, Probe(updates))], hosts=1)[0]
        steps = absorb(profile, ran, self.budget)
        self.record([ran], {0: profile.dropped} if profile.dropped else {})
        if steps:
            self.turn.append((profile, ran))
        if len(self.turn) >= rules.BETWEEN:
            self.settle()

    def settle(self) -> None:
        """End the turn: probe the baseline after it and rank the turn's candidates."""
        if not self.turn:
            return
        turn, before = self.turn, self.last
        self.turn = []
        self.probe_baseline(self.phase, self.length)
        after = self.last
        if not (before or after):
            for profile, _ in turn:
                profile.dropped = profile.dropped or "not ranked: no baseline probe beside it ran"
            return
        for profile, ran in turn:
            _pair(profile, ran, before, after, self.baseline.candidate.params["batch_size"])

    def rank_baseline(self) -> None:
        """Rank the baseline after a round: its ratio is 1, its spread that of all its step
        times against themselves (the notch, twice over)."""
        if self.baseline.steps:
            rate = rules.samples_per_s(self.baseline.candidate.params["batch_size"],
                                       self.baseline.steps)
            self.baseline.probes = [(1.0, math.sqrt(2) * rules.probe_spread(
                self.baseline.steps), 1)]
            self.baseline.sides = (rate, rate)
            _rank(self.baseline)


def _pair(profile: Profile, ran: Ran, before: Ran | None, after: Ran | None,
          baseline_batch: int) -> None:
    """Rank a probed candidate on its steps against the baseline probes around it."""
    batch, steps = profile.candidate.params["batch_size"], step_ms(ran.result)
    ratio, spread = rules.paired(steps, step_ms(before.result) if before else [],
                                 step_ms(after.result) if after else [], batch,
                                 baseline_batch, position(ran, before, after))
    probe = ran.job.probe
    assert probe is not None, "a candidate's profile is made of probes"
    profile.probes.append((ratio, spread, probe.updates))
    profile.sides = (rules.samples_per_s(batch, steps),
                     rules.samples_per_s(batch, steps) / ratio)
    _rank(profile)


def position(ran: Ran, before: Ran | None, after: Ran | None) -> float:
    """Where `ran` ran between two runs, by their middles in time: 0 at `before`, 1 at
    `after` (0.5 where one is missing or they ran at one time)."""
    if before is None or after is None or after.middle <= before.middle:
        return 0.5
    return min(1.0, max(0.0, (ran.middle - before.middle) / (after.middle - before.middle)))


def _rank(profile: Profile) -> None:
    """Append `profile`'s ratio over all its probes and its spread."""
    ratio, spread = rules.pooled(profile.probes)
    profile.ratios.append(ratio)
    profile.spreads.append(spread)


def absorb(profile: Profile, run: Ran, budget: Budget) -> list[float]:
    """Take a probe's figures (kept for the plot even where they drop the candidate) and
    its step times after the first, and drop the candidate with the reason where it failed
    or breaks a rule. Returns those step times."""
    metrics = run.result.metrics
    reason, steps = failure(run.result), step_ms(run.result)
    if reason is None and not steps:
        reason = ("reported no step_ms after its first update (MsexpCallback reports it "
                  "in a probe)")
    if reason is None:
        profile.metrics = metrics
        profile.steps += steps
    if reason is None and metrics.get("overflow_rate", 0.0) > rules.OVERFLOW_LIMIT:
        reason = (f"overflowed in {metrics['overflow_rate']:.0%} of its updates (more than "
                  f"{rules.OVERFLOW_LIMIT:.0%})")
    profile.dropped = reason or budget.violation(metrics, PROBED)
    return steps if reason is None else []


def step_ms(result: TrialResult) -> list[float]:
    """A probe's per-update step times after the first (which compiles, or not when warm:
    left out either way)."""
    series = result.epochs[-1].series if result.epochs else {}
    return list(series.get("step_ms", []))[1:]


def folder_name(candidate: Candidate) -> str:
    """The candidate's part of a trial folder's name: its knobs."""
    return candidate.label.replace(" ", "-").replace("=", "")


def group_of(candidate: Candidate) -> str:
    """Candidates equal but for batch_size and micro_size share a group."""
    return repr(sorted((k, value_text(v)) for k, v in candidate.params.items()
                       if k not in ("batch_size", "micro_size")))


def finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None
