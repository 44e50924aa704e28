"""`msexp tune`'s three phases: profile every candidate, halve on throughput, confirm the
fastest against the baseline over the sweep's epochs and seeds. Every throughput that ranks
is a ratio to the baseline's, measured beside it in time (`measure.Pairs`, `_train`)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Callable

from msexp.tracking.batch_statistics import split_cause
from msexp.training.records import BatchStatistics
from msexp.tune import rules
from msexp.tune.candidates import Candidate
from msexp.tune.measure import (
    MEMORY,
    TRAINING,
    Budget,
    Pairs,
    Profile,
    folder_name,
    group_of,
)
from msexp.tune.runner import Job, Ran, Runner, failure


@dataclass
class Verdict:
    """A configuration trained over the seeds: its objective values, means, its throughput
    as a ratio to the baseline's trainings of the same seeds (and that ratio's spread), the
    keep rule as applied, and the reason it is not kept (None: kept)."""

    profile: Profile
    objective: list[float]
    samples_per_s: float
    memory_mb: float | None
    rejected: str | None = None
    fits: bool = True  # it keeps the budget (the baseline is judged on its objective only)
    batch_statistics: BatchStatistics | None = None  # its network's BatchNorm, as it ran
    ratio: float = math.nan
    ratio_spread: float = math.inf
    judged: str = ""  # the keep rule as applied: the allowance and what measured it


Record = Callable[[list[Ran], dict[int, str]], None]
"""Called with a round's runs and, by run index, the reason a run dropped its candidate."""


def profile_all(runner: Runner, found: list[Candidate], budget: Budget, updates: int,
                record: Record) -> list[Profile]:
    """Profile each candidate once, one at a time, in turns between two probes of the
    baseline (the first candidate), and rank it on the ratio (`measure.Pairs`). Within a
    group of candidates equal but for batch_size and micro_size, micro-batches run
    smallest first, and a micro-batch larger than one that broke the memory budget is
    skipped: memory grows with the micro-batch."""
    profiles = [Profile(c) for c in found]
    base = profiles[0]
    pairs = Pairs(runner, base, budget, record)
    if pairs.probe_baseline("profile", updates) is None:
        for profile in profiles[1:]:
            profile.dropped = ("not profiled: each profile is paired with the baseline's, "
                               f"which gave no step times ({base.dropped})")
        return profiles
    too_big: dict[str, int] = {}
    for profile in sorted(profiles, key=lambda p: p.candidate.micro_batch):
        group = group_of(profile.candidate)
        if profile is not base and budget.memory_mb is not None and (
                profile.candidate.micro_batch >= too_big.get(group, 1 << 60)):
            profile.dropped = (f"skipped: micro-batch {profile.candidate.micro_batch} >= "
                               f"{too_big[group]}, which broke the memory budget")
            continue
        pairs.probe(profile, "profile", updates)
        if profile.dropped and profile.dropped.startswith(MEMORY):
            too_big[group] = min(too_big.get(group, 1 << 60), profile.candidate.micro_batch)
    pairs.settle()
    pairs.rank_baseline()
    return profiles


def halve(runner: Runner, profiles: list[Profile], budget: Budget, updates: int, top: int,
          record: Record) -> tuple[list[Profile], float | None, int, str]:
    """Successive halving on the throughput ratio: each round probes again, in turns between
    baseline probes, the faster half that can still lead (`rules.halve`) with as many
    updates again as their profiles have run (so each doubles), and ranks them on every
    step time measured against the baseline's beside them; stop once at most `top` (the
    confirm phase's) can still lead (`rules.settled`: within twice the measured spread of
    the leader; at round 0 the profiles' spread, after a round the larger of that and the
    change between rounds), once a round would probe a candidate for more updates in all
    than its whole training (`rules.outlasts`: confirm's trainings measure it better), or
    after `rules.MAX_ROUNDS` rounds.
    Returns the standing, fastest first, the last spread measured (None: fewer than two
    candidates stood, or nothing measured it), the rounds run and why they stopped."""
    standing = [p for p in profiles if p.dropped is None]
    spread, rounds, stopped = math.inf, 0, f"{rules.MAX_ROUNDS} rounds run"
    if len(standing) > 1:
        spread = rules.leaders_spread(*_latest(standing))
    pairs = Pairs(runner, profiles[0], budget, record)
    for round_ in range(1, rules.MAX_ROUNDS + 1):
        if rules.settled(_latest(standing)[0], spread, top):
            stopped = f"settled: no more than {top} can lead, or those that can are tied"
            break
        before = _latest(standing)[0]
        kept = [p for p in standing if id(p) in rules.halve(before, spread)]
        length = updates * 2 ** (round_ - 1)
        if any(rules.outlasts(sum(u for _, _, u in p.probes) + length,
                              p.metrics.get(TRAINING)) for p in kept if p is not profiles[0]):
            stopped = (f"a round of {length} more updates would probe a candidate longer "
                       "than its training")
            break
        for profile in kept:
            pairs.probe(profile, f"halve{round_}", length)
        pairs.settle()
        if profiles[0] in kept:
            pairs.rank_baseline()
        standing, rounds = [p for p in kept if p.dropped is None], round_
        now, spreads = _latest(standing)
        spread = rules.round_spread(rules.leaders_spread(now, spreads),
                                    rules.spread(before, now))
    rest = [p for p in profiles if p.dropped is None and p not in standing]
    return (_fastest_first(standing) + _fastest_first(rest),
            spread if math.isfinite(spread) else None, rounds, stopped)


def _latest(profiles: list[Profile]) -> tuple[dict[int, float], dict[int, float]]:
    """Each profile's latest throughput ratio and its spread, by id."""
    return ({id(p): p.ratios[-1] for p in profiles},
            {id(p): p.spreads[-1] for p in profiles})


def confirm(runner: Runner, standing: list[Profile], top: int, baseline: Profile,
            seeds: list[int | None], objective: str, maximize: bool, tolerance: float,
            budget: Budget, record: Record) -> tuple[Verdict | None, list[Verdict]]:
    """Train the baseline and the `top` fastest standing candidates for the sweep's epochs
    with each seed; while none is kept, the next `top` faster than the baseline (with the
    baseline again, beside them), up to `rules.CONFIRM_GROUPS` groups. Returns the
    baseline's verdict (None: it failed; `fits`: it keeps the budget) and the candidates',
    in tune's ranking."""
    base, trained = _train(runner, baseline, standing[:top], seeds, objective, budget, record)
    if base.rejected:
        for verdict in trained:
            verdict.rejected = verdict.rejected or f"the baseline failed: {base.rejected}"
        return None, trained
    verdicts = {id(v.profile): v for v in trained}
    if baseline in standing[:top]:  # it ranks in the top: confirmed as a candidate too
        verdicts[id(baseline)] = base
    ratios = {id(p): p.ratios[-1] for p in standing}
    for groups in range(1, rules.CONFIRM_GROUPS + 1):
        for verdict in trained:
            _judge(verdict, base, objective, maximize, tolerance)
        kept = any(v.rejected is None for v in verdicts.values())
        after = rules.next_to_confirm([id(p) for p in standing], ratios, 1.0,
                                      set(verdicts) | {id(baseline)}, top)
        if kept or not after or groups == rules.CONFIRM_GROUPS:
            break
        _, trained = _train(runner, baseline, [p for p in standing if id(p) in after], seeds,
                            objective, budget, record)
        verdicts.update((id(v.profile), v) for v in trained)
    return base, [verdicts[id(p)] for p in standing if id(p) in verdicts]


def _judge(verdict: Verdict, base: Verdict, objective: str, maximize: bool,
           tolerance: float) -> None:
    """Reject a trained candidate whose objective falls short of the baseline's by more
    than the allowance (`rules.allowance`); either way say what the allowance was."""
    if verdict.rejected is not None:
        return
    allowed, source = rules.allowance(verdict.objective, base.objective, tolerance)
    verdict.judged = f"within {allowed:.4g} of the baseline's {_mean(base.objective)} ({source})"
    if not rules.keeps(verdict.objective, base.objective, maximize, tolerance):
        verdict.rejected = (f"{objective} {_mean(verdict.objective)} is worse than the "
                            f"baseline's {_mean(base.objective)} by more than "
                            f"{allowed:.4g} ({source})"
                            + split_cause(verdict.batch_statistics, base.batch_statistics))


def _train(runner: Runner, baseline: Profile, group: list[Profile], seeds: list[int | None],
           objective: str, budget: Budget, record: Record) -> tuple[Verdict, list[Verdict]]:
    """Train the baseline and each of `group` with each seed, seed by seed, in mirrored
    order: the baseline first for the first seed, last for the second, and so on (at once
    on several hosts), so that a load rising or falling through the phase moves the ratios
    of alternate seeds apart, a spread, instead of all the same way, a gain. Returns the
    baseline's verdict (judged on its objective only; `fits` says whether it
    keeps the budget) and the group's, each with its throughput ratio to the baseline's
    trainings of the same seeds."""
    members = [baseline] + [p for p in group if p is not baseline]
    order = list(enumerate(members))
    jobs = [Job((i, seed), f"confirm-{folder_name(p.candidate)}-seed{seed}",
                {**p.candidate.params, **({} if seed is None else {"seed": seed})})
            for turn, seed in enumerate(seeds) for i, p in order[::-1 if turn % 2 else 1]]
    ran = runner.run(jobs)
    record(ran, {})
    runs = [[r for r in ran if _placed(r)[0] == i] for i in range(len(members))]
    verdicts = [_verdict(p, runs[i], objective, budget if i else Budget([], None))
                for i, p in enumerate(members)]
    base = verdicts[0]
    base.judged = "the baseline: the reference"
    base.fits = baseline.dropped is None and not any(
        budget.violation(r.result.metrics, None) for r in runs[0])
    reference = _rates(runs[0])
    for verdict, own in zip(verdicts, runs):
        verdict.ratio, verdict.ratio_spread = rules.over_seeds(_rates(own), reference)
    return base, verdicts[1:]


def _placed(ran: Ran) -> tuple[int, int | None]:
    """A confirm training's member (its index, the baseline's 0) and seed: its job's key."""
    key = ran.job.key
    if not isinstance(key, tuple):
        raise TypeError(f"{ran.job.name} is no confirm training")
    member, seed = key
    return member, seed


def _rates(runs: list[Ran]) -> dict[int | None, float]:
    """samples/s of each completed training, by seed."""
    return {_placed(r)[1]: r.result.metrics["samples_per_s"] for r in runs
            if failure(r.result) is None and "samples_per_s" in r.result.metrics}


def _verdict(profile: Profile, runs: list[Ran], objective: str, budget: Budget) -> Verdict:
    values, rates, memory, rejected = [], [], [], None
    for run in runs:
        reason = failure(run.result) or budget.violation(run.result.metrics, None)
        if reason is None and objective not in run.result.metrics:
            reason = f"reported no {objective}"
        if reason:
            rejected = rejected or f"seed {_placed(run)[1]}: {reason}"
            continue
        metrics = run.result.metrics
        values.append(metrics[objective])
        rates.append(metrics.get("samples_per_s", float("nan")))
        memory.append(metrics.get(MEMORY, metrics.get("peak_mem_mb", float("nan"))))
    stats = next((r.result.batch_statistics for r in runs if r.result.batch_statistics), None)
    return Verdict(profile, values, statistics.mean(rates) if rates else float("nan"),
                   statistics.mean(memory) if memory else None, rejected,
                   batch_statistics=stats)


def _fastest_first(profiles: list[Profile]) -> list[Profile]:
    return sorted(profiles, key=lambda p: -p.ratios[-1])


def _mean(values: list[float]) -> str:
    return f"{statistics.mean(values):.4g}" if values else "none"
