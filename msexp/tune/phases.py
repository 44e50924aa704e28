"""`msexp tune`'s three phases: profile every candidate, halve on throughput, confirm the
fastest against the baseline over the sweep's epochs and seeds."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Callable

from msexp.execution.result import TrialResult
from msexp.knobs import value_text
from msexp.tracking.batch_statistics import split_cause
from msexp.training.records import BatchStatistics, Probe
from msexp.tune import rules
from msexp.tune.candidates import Candidate
from msexp.tune.runner import Job, Ran, Runner, failure

MEMORY = "train_mem_mb"
PROBED = ("samples_per_s", "step_ms", "train_mem_mb", "peak_mem_mb")  # constraints a probe checks


@dataclass
class Profile:
    """A candidate's profile: samples/s and its spread after each round, the step times
    measured so far (a halving round continues the profile), its latest figures, or why
    it dropped."""

    candidate: Candidate
    rates: list[float] = field(default_factory=list)
    spreads: list[float] = field(default_factory=list)
    steps: list[float] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    dropped: str | None = None

    @property
    def memory_mb(self) -> float | None:
        """train_mem_mb, else (a command's) peak_mem_mb."""
        return self.metrics.get(MEMORY, self.metrics.get("peak_mem_mb"))


@dataclass
class Verdict:
    """A configuration trained over the seeds: its objective values, means, and the
    reason it is not kept (None: kept)."""

    profile: Profile
    objective: list[float]
    samples_per_s: float
    memory_mb: float | None
    rejected: str | None = None
    fits: bool = True  # it keeps the budget (the baseline is judged on its objective only)
    batch_statistics: BatchStatistics | None = None  # its network's BatchNorm, as it ran


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


Record = Callable[[list[Ran], dict[int, str]], None]
"""Called with a round's runs and, by run index, the reason a run dropped its candidate."""


def profile_all(runner: Runner, found: list[Candidate], budget: Budget, updates: int,
                record: Record) -> list[Profile]:
    """Profile each candidate once, one at a time (throughput measured alone). Within a
    group of candidates equal but for batch_size and micro_size, micro-batches run
    smallest first, and a micro-batch larger than one that broke the memory budget is
    skipped: memory grows with the micro-batch."""
    profiles = [Profile(c) for c in found]
    too_big: dict[str, int] = {}
    for profile in sorted(profiles, key=lambda p: p.candidate.micro_batch):
        group = _group(profile.candidate)
        if budget.memory_mb is not None and profile.candidate.micro_batch >= too_big.get(
                group, 1 << 60):
            profile.dropped = (f"skipped: micro-batch {profile.candidate.micro_batch} >= "
                               f"{too_big[group]}, which broke the memory budget")
            continue
        ran = runner.run([_probe_job(profile.candidate, "profile", updates)], hosts=1)
        _absorb(profile, ran[0], budget)
        record(ran, {0: profile.dropped} if profile.dropped else {})
        if profile.dropped and profile.dropped.startswith(MEMORY):
            too_big[group] = profile.candidate.micro_batch
    return profiles


def halve(runner: Runner, profiles: list[Profile], budget: Budget, updates: int,
          record: Record) -> tuple[list[Profile], float | None, int]:
    """Successive halving on samples/s: each round continues the profiles of the faster
    half that can still lead (`rules.halve`) with as many updates again as their
    profiles have run (so each doubles), and
    ranks them on every step time measured; stop when the leader's margin exceeds twice
    the measured spread (at round 0 the profiles' within-probe spread, after a round the
    larger of that and the change between rounds), or after `rules.MAX_ROUNDS` rounds.
    Returns the standing, fastest first, the last spread measured (None: fewer than two
    candidates stood, or nothing measured it) and the rounds run."""
    standing = [p for p in profiles if p.dropped is None]
    spread, rounds = math.inf, 0
    if len(standing) > 1:
        spread = rules.leaders_spread(*_latest(standing))
    for round_ in range(1, rules.MAX_ROUNDS + 1):
        if len(standing) < 2 or rules.settled(_latest(standing)[0], spread):
            break
        before = _latest(standing)[0]
        kept = [p for p in standing if id(p) in rules.halve(before, spread)]
        jobs = [_probe_job(p.candidate, f"halve{round_}", updates * 2 ** (round_ - 1))
                for p in kept]
        ran = runner.run(jobs, hosts=1)
        for profile, run in zip(kept, ran):
            _absorb(profile, run, budget)
        record(ran, {i: p.dropped for i, p in enumerate(kept) if p.dropped})
        standing, rounds = [p for p in kept if p.dropped is None], round_
        now, spreads = _latest(standing)
        spread = rules.round_spread(rules.leaders_spread(now, spreads),
                                    rules.spread(before, now))
    rest = [p for p in profiles if p.dropped is None and p not in standing]
    return (_fastest_first(standing) + _fastest_first(rest),
            spread if math.isfinite(spread) else None, rounds)


def _latest(profiles: list[Profile]) -> tuple[dict[int, float], dict[int, float]]:
    """Each profile's latest samples/s and within-probe spread, by id."""
    return ({id(p): p.rates[-1] for p in profiles},
            {id(p): p.spreads[-1] for p in profiles})


def confirm(runner: Runner, standing: list[Profile], top: int, baseline: Profile,
            seeds: list[int | None], objective: str, maximize: bool, tolerance: float,
            budget: Budget, record: Record) -> tuple[Verdict | None, list[Verdict]]:
    """Train the baseline and the `top` fastest standing candidates for the sweep's epochs
    with each seed; while none is kept, the next `top` faster than the baseline, up to
    `rules.CONFIRM_GROUPS` groups. Returns the baseline's verdict (None: it failed; `fits`:
    it keeps the budget) and the candidates', in tune's ranking."""
    group = [baseline] + [p for p in standing[:top] if p is not baseline]
    trained = _train(runner, group, seeds, objective, budget, record, reference=baseline)
    base = trained[0]
    if base.rejected:
        for verdict in trained[1:]:
            verdict.rejected = verdict.rejected or f"the baseline failed: {base.rejected}"
        return None, trained[1:]
    verdicts = {id(v.profile): v for v in trained  # the baseline where it ranks in the top
                if v is not base or baseline in standing[:top]}
    rates = {id(p): p.rates[-1] for p in standing}
    for groups in range(1, rules.CONFIRM_GROUPS + 1):
        for verdict in trained:
            if verdict is not base:
                _judge(verdict, base, objective, maximize, tolerance)
        kept = any(v.rejected is None for v in verdicts.values())
        after = rules.next_to_confirm([id(p) for p in standing], rates,
                                      (baseline.rates or [0.0])[-1],
                                      set(verdicts) | {id(baseline)}, top)
        if kept or not after or groups == rules.CONFIRM_GROUPS:
            break
        trained = _train(runner, [p for p in standing if id(p) in after], seeds, objective,
                         budget, record)
        verdicts.update((id(v.profile), v) for v in trained)
    return base, [verdicts[id(p)] for p in standing if id(p) in verdicts]


def _judge(verdict: Verdict, base: Verdict, objective: str, maximize: bool,
           tolerance: float) -> None:
    """Reject a trained candidate whose objective falls short of the baseline's."""
    if verdict.rejected is None and not rules.keeps(verdict.objective, base.objective,
                                                    maximize, tolerance):
        verdict.rejected = (f"{objective} {_mean(verdict.objective)} is worse than the "
                            f"baseline's {_mean(base.objective)} by more than "
                            f"{max(rules.seed_spread(base.objective), tolerance):.4g}"
                            + split_cause(verdict.batch_statistics, base.batch_statistics))



def _train(runner: Runner, group: list[Profile], seeds: list[int | None], objective: str,
           budget: Budget, record: Record, reference: Profile | None = None) -> list[Verdict]:
    """Train each of `group` with each seed, all at once; their verdicts, in order. The
    `reference` (the baseline) is judged on its objective only; `fits` says whether it
    keeps the budget."""
    jobs = [Job((i, seed), f"{_job_name('confirm', p.candidate)}-seed{seed}",
                {**p.candidate.params, **({} if seed is None else {"seed": seed})})
            for i, p in enumerate(group) for seed in seeds]
    ran = runner.run(jobs)
    record(ran, {})
    verdicts = [_verdict(p, [r for r in ran if r.job.key[0] == i], objective,
                         Budget([], None) if p is reference else budget)
                for i, p in enumerate(group)]
    for i, (profile, verdict) in enumerate(zip(group, verdicts)):
        if profile is reference:
            verdict.fits = profile.dropped is None and not any(
                budget.violation(r.result.metrics, None) for r in ran if r.job.key[0] == i)
    return verdicts


def _verdict(profile: Profile, runs: list[Ran], objective: str, budget: Budget) -> Verdict:
    values, rates, memory, rejected = [], [], [], None
    for run in runs:
        reason = failure(run.result) or budget.violation(run.result.metrics, None)
        if reason is None and objective not in run.result.metrics:
            reason = f"reported no {objective}"
        if reason:
            rejected = rejected or f"seed {run.job.key[1]}: {reason}"
            continue
        metrics = run.result.metrics
        values.append(metrics[objective])
        rates.append(metrics.get("samples_per_s", float("nan")))
        memory.append(metrics.get(MEMORY, metrics.get("peak_mem_mb", float("nan"))))
    stats = next((r.result.batch_statistics for r in runs if r.result.batch_statistics), None)
    return Verdict(profile, values, statistics.mean(rates) if rates else float("nan"),
                   statistics.mean(memory) if memory else None, rejected,
                   batch_statistics=stats)


def _probe_job(candidate: Candidate, phase: str, updates: int) -> Job:
    return Job(phase, _job_name(phase, candidate), candidate.params, Probe(updates))


def _job_name(phase: str, candidate: Candidate) -> str:
    """A trial folder's name: the phase and the candidate's knobs."""
    return f"{phase}-{candidate.label.replace(' ', '-').replace('=', '')}"


def _absorb(profile: Profile, run: Ran, budget: Budget) -> None:
    """Take a probe's figures (kept for the plot even where they drop the candidate), and
    drop the candidate with the reason where it failed or breaks a rule."""
    metrics = run.result.metrics
    reason = failure(run.result)
    if reason is None and "samples_per_s" in metrics:
        profile.metrics = metrics
        _measure(profile, _step_ms(run.result), metrics["samples_per_s"])
    elif reason is None:
        reason = "reported no samples_per_s (MsexpCallback needs the batch size)"
    if reason is None and metrics.get("overflow_rate", 0.0) > rules.OVERFLOW_LIMIT:
        reason = (f"overflowed in {metrics['overflow_rate']:.0%} of its updates (more than "
                  f"{rules.OVERFLOW_LIMIT:.0%})")
    profile.dropped = reason or budget.violation(metrics, PROBED)


def _measure(profile: Profile, step_ms: list[float], samples_per_s: float) -> None:
    """Add a probe's step times to the profile's and rank it on them all: samples/s from
    their median, the spread from their notch. A script reports no step times: its
    probe's own samples/s, the spread unknown."""
    profile.steps += step_ms
    if not profile.steps:
        profile.rates.append(samples_per_s)
        profile.spreads.append(math.inf)
        return
    batch = profile.candidate.params["batch_size"]
    profile.rates.append(rules.samples_per_s(batch, profile.steps))
    profile.spreads.append(rules.probe_spread(profile.steps))


def _step_ms(result: TrialResult) -> list[float]:
    """A probe's per-update step times after the first (which compiles, or not when warm:
    left out either way); none from a script."""
    series = result.epochs[-1].series if result.epochs else {}
    return list(series.get("step_ms", []))[1:]


def _group(candidate: Candidate) -> str:
    return repr(sorted((k, value_text(v)) for k, v in candidate.params.items()
                       if k not in ("batch_size", "micro_size")))


def _fastest_first(profiles: list[Profile]) -> list[Profile]:
    return sorted(profiles, key=lambda p: -p.rates[-1])


def _mean(values: list[float]) -> str:
    return f"{statistics.mean(values):.4g}" if values else "none"
