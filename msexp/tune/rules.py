"""The tuner's rules, free of MindSpore and of the stores: a probe's spread, successive
halving, the keep rule, the largest micro-batch that fits, and the learning-rate
suggestion."""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Hashable, Mapping, Sequence
from typing import Callable, TypeVar

K = TypeVar("K", bound=Hashable)  # what a rate is of: a candidate, a seed
OVERFLOW_LIMIT = 0.5  # a profile overflowing in more of its updates overflows persistently
MAX_ROUNDS = 3
CONFIRM_GROUPS = 2  # the top k, then once the next k: at most 2k + 1 configurations train
SPREADS = 2  # a difference counts once it exceeds twice the measured spread
TIE = 0.05  # speeds within 5% of each other are one speed: halving does not order them
BETWEEN = 3  # candidates probed between two probes of the baseline
NOTCH = 1.57  # McGill, Tukey & Larsen (1978): median +- 1.57 IQR / sqrt(n), about 95%


def probe_spread(step_ms: Sequence[float]) -> float:
    """A probe's within-probe spread: the boxplot notch half-width of its median step time,
    1.57 x IQR / sqrt(n), relative to the median (inclusive quartiles; the updates after
    the compiling one). samples/s = batch / step, so it is samples/s's relative spread
    too. inf with fewer than two step times: nothing measured the noise."""
    if len(step_ms) < 2:
        return math.inf
    low, _, high = statistics.quantiles(step_ms, n=4, method="inclusive")
    return NOTCH * (high - low) / math.sqrt(len(step_ms)) / statistics.median(step_ms)


def samples_per_s(batch_size: int, step_ms: Sequence[float]) -> float:
    """Throughput from step times: batch_size x 1000 / the median step_ms."""
    return batch_size * 1000 / statistics.median(step_ms)


def paired(steps: Sequence[float], before: Sequence[float], after: Sequence[float],
           batch_size: int, baseline_batch_size: int, at: float = 0.5) -> tuple[float, float]:
    """A probe's throughput as a ratio to the baseline's probed before and after it:
    (batch / its median step) / (baseline batch / the two baseline probes' median steps
    interpolated to `at`, where the probe ran between them in time, 0 at the first and 1
    at the second: a load drifting at a steady pace leaves that level with the probe's
    own time); and the ratio's relative spread, the probe's notch and the larger of the
    baseline probes' combined (sqrt(a^2 + b^2): independent errors of a quotient).
    One of `before` and `after` may be empty."""
    if before and after:
        step = (1 - at) * statistics.median(before) + at * statistics.median(after)
    else:
        step = statistics.median(before or after)
    noise = max(probe_spread(found) for found in (before, after) if found)
    return (samples_per_s(batch_size, steps) / samples_per_s(baseline_batch_size, [step]),
            math.hypot(probe_spread(steps), noise))


def pooled(probes: Sequence[tuple[float, float, int]]) -> tuple[float, float]:
    """A candidate's ratio over all its probes, each (ratio, spread, updates), weighted by
    updates, and the spread of that mean (the weighted spreads combined in quadrature)."""
    total = sum(updates for _, _, updates in probes)
    ratio = sum(r * updates for r, _, updates in probes) / total
    spread = math.sqrt(sum((s * updates) ** 2 for _, s, updates in probes)) / total
    return ratio, spread


def ranked(rates: Mapping[K, float]) -> list[K]:
    """Keys by samples/s, fastest first."""
    return sorted(rates, key=lambda key: -rates[key])


def contenders(rates: Mapping[K, float], measured_spread: float = math.inf
               ) -> list[K]:
    """Those that can still lead, fastest first: slower than the leader by no more than
    twice the measured spread (all of them while nothing measured it)."""
    order = ranked(rates)
    leader = rates[order[0]] if order else 0.0
    return [key for key in order if rates[key] * (1 + SPREADS * measured_spread) >= leader]


def halve(rates: Mapping[K, float], measured_spread: float = math.inf
          ) -> list[K]:
    """The faster half (rounded up, at least two while two remain), fastest first, less
    those that cannot lead (`contenders`)."""
    order = ranked(rates)
    half = order[:max(min(2, len(order)), math.ceil(len(order) / 2))]
    can_lead = set(contenders(rates, measured_spread))
    kept = [key for key in half if key in can_lead]
    return kept if len(kept) > 1 else half[:2]


def next_to_confirm(ranking: Sequence[K], rates: Mapping[K, float],
                    baseline_rate: float, confirmed: set[K], k: int) -> list[K]:
    """The next k candidates in tune's ranking, not yet confirmed, faster than the
    baseline (a slower one could not be picked over it)."""
    return [key for key in ranking
            if key not in confirmed and rates[key] > baseline_rate][:k]


def spread(before: Mapping[K, float], now: Mapping[K, float]) -> float:
    """Run-to-run spread of samples/s: the largest relative change of a configuration
    measured in both rounds, |now - before| / before."""
    changes = [abs(now[key] - before[key]) / before[key] for key in now if before.get(key)]
    return max(changes, default=0.0)


def settled(rates: Mapping[K, float], measured_spread: float, top: int = 1) -> bool:
    """Halving stops once at most `top` can still lead (`contenders`): confirm trains
    them all and ranks them on whole trainings, so more probes would only rank them twice;
    or once those that can lead are all within `TIE` of the leader (twice the spread is
    no more than TIE): a tie, which probes could only order by noise-sized differences."""
    return (SPREADS * measured_spread <= TIE
            or len(contenders(rates, measured_spread)) <= top)


def outlasts(probed: int, training: float | None) -> bool:
    """Whether `probed` updates of probes exceed the `training`'s updates (None: unknown):
    probing a candidate longer than its training buys nothing that training it, as
    confirm does, would not measure better."""
    return training is not None and probed > training


def beats_reference(ratio: float, ratio_spread: float) -> bool:
    """Whether a configuration ran faster than the reference it was measured beside by
    more than twice its ratio's relative spread (the margin that settles who can lead): what
    the measurements cannot tell from the reference's own speed is no gain."""
    return ratio > 1 + SPREADS * ratio_spread


def leaders_spread(rates: Mapping[K, float], spreads: Mapping[K, float]
                   ) -> float:
    """The spread that who can still lead is judged against (`contenders`): the larger
    within-probe spread of the leader and the second (0 when one is alone)."""
    order = ranked(rates)
    return max((spreads[key] for key in order[:2]), default=0.0) if len(order) > 1 else 0.0


def round_spread(within: float, between: float | None) -> float:
    """A halving round's spread: the larger of the within-probe spread and the change
    between rounds, of those measured (inf: neither was)."""
    return max((s for s in (within, between) if s is not None and math.isfinite(s)),
               default=math.inf)


def seed_spread(values: Sequence[float]) -> float:
    """Seed-to-seed spread of an objective: the sample standard deviation (0 for one seed)."""
    return statistics.stdev(values) if len(values) > 1 else 0.0


def allowance(candidate: Sequence[float], baseline: Sequence[float], tolerance: float = 0.0
              ) -> tuple[float, str]:
    """How much worse than the baseline's mean objective a candidate's may be, and what
    measured it: the larger seed-to-seed spread of the two (each over two seeds at least),
    or `tolerance` where that is larger.

    Raises:
        ValueError: neither ran two seeds and there is no tolerance: nothing measured the
            objective's noise, and one seed's spread is not 0 but unknown.
    """
    measured = [(seed_spread(values), f"{who} seed spread over {len(values)} seeds")
                for values, who in ((baseline, "the baseline's"), (candidate, "its"))
                if len(values) > 1]
    largest = max(measured, default=None, key=lambda found: found[0])
    if tolerance > 0 and (largest is None or tolerance >= largest[0]):
        return tolerance, "--tolerance"
    if largest is None:
        raise ValueError("the objective's noise is unknown: one seed each and no tolerance")
    return largest


def keeps(candidate: Sequence[float], baseline: Sequence[float], maximize: bool,
          tolerance: float = 0.0) -> bool:
    """Whether a candidate keeps the objective: its mean is no worse than the baseline's by
    more than the `allowance` (the seed-to-seed spread, or `tolerance` where larger)."""
    loss = statistics.mean(baseline) - statistics.mean(candidate)
    return (loss if maximize else -loss) <= allowance(candidate, baseline, tolerance)[0]


def over_seeds(rates: Mapping[K, float], reference: Mapping[K, float]
               ) -> tuple[float, float]:
    """A configuration's throughput against the baseline's trained beside it: the mean of
    its samples/s over the baseline's, seed by seed, and the relative spread of those
    ratios (their sample standard deviation over their mean; inf from one seed, nan and
    inf where no seed has both)."""
    ratios = [rates[seed] / reference[seed] for seed in rates if reference.get(seed)]
    if not ratios:
        return math.nan, math.inf
    mean = statistics.mean(ratios)
    return mean, statistics.stdev(ratios) / mean if len(ratios) > 1 else math.inf


def largest_fitting(fits: Callable[[int], bool], start: int = 1, limit: int = 1 << 20
                    ) -> tuple[int, list[int]]:
    """The largest size for which `fits(size)` holds, as Lightning's scale_batch_size finds
    it: double from `start` until a size does not fit (or passes `limit`), then binary
    search between the last that fit and the first that did not. Returns it (0 if `start`
    does not fit) and the sizes tried, in order."""
    tried: list[int] = []

    def check(size: int) -> bool:
        tried.append(size)
        return fits(size)

    if not check(start):
        return 0, tried
    low, high = start, None
    while high is None:
        if low * 2 > limit:
            return low, tried
        if check(low * 2):
            low *= 2
        else:
            high = low * 2
    while high - low > 1:
        middle = (low + high) // 2
        if check(middle):
            low = middle
        else:
            high = middle
    return low, tried


def smooth(losses: Sequence[float], beta: float = 0.98) -> list[float]:
    """Exponential moving average with bias correction (as Lightning's lr_find)."""
    average, smoothed = 0.0, []
    for i, loss in enumerate(losses, 1):
        average = beta * average + (1 - beta) * loss
        smoothed.append(average / (1 - beta ** i))
    return smoothed


def before_divergence(losses: Sequence[float]) -> list[float]:
    """The smoothed losses up to where the range test diverges: the smoothed loss passes 4x
    its best, or a loss is not finite (as Lightning's lr_find stops)."""
    kept: list[float] = []
    for loss in smooth(list(itertools.takewhile(math.isfinite, losses))):
        if kept and loss > 4 * min(kept):
            break
        kept.append(loss)
    return kept


def suggest_lr(rates: Sequence[float], losses: Sequence[float], skip_begin: int = 10,
               skip_end: int = 1) -> float | None:
    """The lr where the smoothed loss falls fastest against log(lr), before the test
    diverges; None if too few points remain."""
    kept = list(zip(rates, before_divergence(losses)))
    window = kept[skip_begin:len(kept) - skip_end]
    if len(window) < 3:
        return None
    slopes = [(window[i + 1][1] - window[i - 1][1])
              / (math.log(window[i + 1][0]) - math.log(window[i - 1][0]))
              for i in range(1, len(window) - 1)]
    steepest = min(range(len(slopes)), key=slopes.__getitem__)
    return window[steepest + 1][0]
