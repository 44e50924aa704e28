"""Knob effects: each swept knob's values against what the trials measured, as ratios to a
baseline value, and one summary line per knob."""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from msexp.errors import MsexpError
from msexp.keys import StudyKey, TrialKey
from msexp.tracking.batch_statistics import (
    SPLITS,
    batch_statistics_note,
    inexact_layers,
    split_label,
)
from msexp.tracking.replicates import SEED, configurations, effects

# msexp's own metrics come first, in this order; then every other metric the trials recorded
EFFECT_METRICS = ("eval_accuracy", "eval_loss", "samples_per_s", "step_ms", "train_mem_mb",
                  "epochs_to_target", "time_to_target_s", "overflow_steps")
MEMORY_FALLBACK = {"train_mem_mb": "peak_mem_mb"}  # studies from before train_mem_mb
NOT_EFFECTS = frozenset({"epoch"})  # bookkeeping, not a measurement
# a metric with one of these words in its name is a fraction: its differences are shown
# in percentage points (eval_acc, Top_1_Accuracy, val_top5, f1)
FRACTION_WORDS = re.compile(r"acc|accuracy|top\d*|precision|recall|f1|m?iou|auc")
MAX_LEVELS = 8  # a numeric knob with more distinct values is a range: scatter and trend
MAX_CATEGORIES = 12  # the most frequent categories shown; the rest are counted
RANGE_BINS = 5


def short(value: Any) -> str:
    """A value as axis labels show it: floats to 3 significant digits (1230, not 1.23e+03)."""
    if not isinstance(value, float):
        return str(value)
    rounded = float(f"{value:.3g}")
    return f"{rounded:.0f}" if 1000 <= abs(rounded) < 1e7 else f"{rounded:.3g}"


def metric_of(trial: FrozenTrial, metric: str) -> float:
    value = trial.user_attrs.get(TrialKey.METRICS, {}).get(metric)
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else math.nan


@dataclass
class Level:
    """One value of a knob (or, for a range, one bin of values) and its trials."""

    label: str
    trials: list[FrozenTrial]
    value: Any = None  # the value; for a bin, its median

    def mean(self, metric: str) -> float:
        values = [v for t in self.trials if not math.isnan(v := metric_of(t, metric))]
        return statistics.fmean(values) if values else math.nan


@dataclass
class SweptKnob:
    """A swept param as the report shows it."""

    name: str
    levels: list[Level]
    is_range: bool = False  # numeric with many values: scatter with a trend
    log: bool = False
    hidden: int = 0  # categories left out of the plots (the least frequent)
    hidden_trials: int = 0
    baseline: int = 0  # index into levels

    @property
    def base(self) -> Level:
        return self.levels[self.baseline]

    @property
    def compared(self) -> Level:
        """The level the summary line compares with the baseline: the farthest one."""
        last = len(self.levels) - 1
        return self.levels[0 if self.baseline == last else last]

    def trials(self) -> list[FrozenTrial]:
        return [t for level in self.levels for t in level.trials]


@dataclass
class Change:
    """How a metric moves from a knob's baseline to another value."""

    metric: str
    base: float
    value: float
    spread: float = math.nan  # seed-to-seed standard deviation, when there are repeats
    points: bool = False  # a fraction: the difference in percentage points, not a ratio

    @property
    def ratio(self) -> float:
        return self.value / self.base if self.base else math.nan

    def text(self) -> str:
        spread = ""
        if self.points:
            if not math.isnan(self.spread):
                spread = f" +/- {100 * self.spread:.1f}"
            return f"{self.metric} {100 * (self.value - self.base):+.1f} pp{spread}"
        if not self.base:  # nothing to divide by: the difference
            return f"{self.metric} {self.value - self.base:+.3g}"
        if not math.isnan(self.spread):
            spread = f" +/- {self.spread / abs(self.base):.2g}"
        return f"{self.metric} x{self.ratio:.3g}{spread}"


@dataclass
class KnobEffects:
    """Every swept knob with its levels, and the metrics the trials recorded."""

    knobs: list[SweptKnob]
    metrics: list[str]
    summary: dict[str, list[Change]] = field(default_factory=dict)  # knob -> changes
    points: frozenset[str] = frozenset()  # the metrics shown in percentage points
    notes: list[str] = field(default_factory=list)  # values that make no sense as named
    inexact_layers: dict[str, int] = field(default_factory=dict)  # BatchNorm, Dropout: n

    def lines(self) -> list[str]:
        """One line per knob: `micro_size 1 -> 8: samples_per_s x0.28, ...`; a knob that
        splits the batch of a network with BatchNorm or Dropout says so (`(dropout)`)."""
        return [f"{k.name} {k.base.label} -> {k.compared.label}{self._cause(k.name)}: "
                + ", ".join(c.text() for c in self.summary[k.name])
                for k in self.knobs if self.summary.get(k.name)]

    def _cause(self, knob: str) -> str:
        return split_label(self.inexact_layers) if knob in SPLITS else ""

    def markdown(self) -> str:
        rows = ["| knob | baseline -> value | " + " | ".join(self.metrics) + " |",
                "|---|---|" + "---|" * len(self.metrics)]
        for k in self.knobs:
            changes = {c.metric: c.text().removeprefix(c.metric + " ")
                       for c in self.summary.get(k.name, [])}
            rows.append(f"| {k.name} | {k.base.label} -> {k.compared.label} | "
                        + " | ".join(changes.get(m, "-") for m in self.metrics) + " |")
        return "\n".join(rows) + "\n"


def knob_effects(study: optuna.Study, baselines: dict[str, str] | None = None) -> KnobEffects:
    """The swept knobs of a study's COMPLETE trials, against its recorded metrics."""
    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    metrics = present_metrics(trials, study.user_attrs.get(StudyKey.OBJECTIVES) or [])
    names = sorted({k for t in trials for k in t.params if k != SEED})
    knobs = [k for n in names if len((k := knob_of(n, trials)).levels) > 1]
    baselines = baselines or {}
    unknown = set(baselines) - {k.name for k in knobs}
    if unknown:
        raise MsexpError(f"--baseline {', '.join(sorted(unknown))}: not a swept knob of "
                         f"{study.study_name}; swept: {', '.join(k.name for k in knobs)}")
    for knob in knobs:
        if knob.name in baselines:
            knob.baseline = level_index(knob, baselines[knob.name])
    points, notes = fractions(trials, metrics)
    layers = inexact_layers(trials)
    split = [k.name for k in knobs if k.name in SPLITS]
    if layers and split:
        notes.append(batch_statistics_note(layers, split))
    result = KnobEffects(knobs, metrics, points=points, notes=notes,
                         inexact_layers=layers)
    spreads = seed_spreads(study, metrics)
    for knob in knobs:
        result.summary[knob.name] = [
            Change(m, knob.base.mean(m), knob.compared.mean(m),
                   spreads.get((knob.name, m), math.nan), m in points)
            for m in metrics
            if not math.isnan(knob.base.mean(m)) and not math.isnan(knob.compared.mean(m))]
    return result


def present_metrics(trials: list[FrozenTrial], objectives: list[str]) -> list[str]:
    """What the trials recorded: the objectives, msexp's effect metrics, then every other
    metric by name; a metric that is the same in every trial says nothing and is left out,
    unless it is an objective."""
    values = _recorded(trials)
    own = [MEMORY_FALLBACK.get(m, m) if m not in values else m for m in EFFECT_METRICS]
    left_out = {old for new, old in MEMORY_FALLBACK.items() if new in values} | NOT_EFFECTS
    return [name for name in dict.fromkeys([*objectives, *own, *sorted(values)])
            if name in values and name not in left_out
            and (name in objectives or len(set(values[name])) > 1)]


def _recorded(trials: list[FrozenTrial]) -> dict[str, list[float]]:
    """metric -> its finite values over `trials`."""
    found: dict[str, list[float]] = {}
    for trial in trials:
        for name in trial.user_attrs.get(TrialKey.METRICS, {}):
            if not math.isnan(value := metric_of(trial, name)):
                found.setdefault(name, []).append(value)
    return found


def fractions(trials: list[FrozenTrial], metrics: list[str]) -> tuple[frozenset[str], list[str]]:
    """The metrics named as fractions whose values all lie in [0, 1] (shown in points), and
    a note for each one named so whose values do not (shown as ratios)."""
    values = _recorded(trials)
    points, notes = set(), []
    for metric in metrics:
        if not is_fraction_name(metric):
            continue
        low, high = min(values[metric]), max(values[metric])
        if low >= 0 and high <= 1:
            points.add(metric)
        else:
            notes.append(f"{metric} is named as a fraction but runs from {short(low)} to "
                         f"{short(high)}, outside [0, 1] (a percent printed without %?): "
                         "shown as ratios")
    return frozenset(points), notes


def is_fraction_name(metric: str) -> bool:
    """Whether a word of the metric's name says fraction (`accum_ms` is no accuracy)."""
    return any(FRACTION_WORDS.fullmatch(word)
               for word in re.split(r"[^a-z0-9]+", metric.lower()))


def knob_of(name: str, trials: list[FrozenTrial]) -> SweptKnob:
    """A knob's levels: each value in the order of its distribution, or bins of a range."""
    having = [t for t in trials if name in t.params]
    distribution = next((t.distributions[name] for t in reversed(having)
                         if name in t.distributions), None)
    values = [t.params[name] for t in having]
    distinct = list(dict.fromkeys(values))
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in distinct)
    log = isinstance(distribution, (FloatDistribution, IntDistribution)) and distribution.log
    if numeric and len(distinct) > MAX_LEVELS:
        return SweptKnob(name, range_levels(having, name, log), is_range=True, log=log)
    if isinstance(distribution, CategoricalDistribution):
        order = [c for c in distribution.choices if c in distinct]
        order += [v for v in distinct if v not in order]
    else:
        order = sorted(distinct) if numeric else distinct
    counts = {v: values.count(v) for v in order}
    shown = set(sorted(order, key=lambda v: -counts[v])[:MAX_CATEGORIES])
    levels = [Level(short(v), [t for t in having if t.params[name] == v], v)
              for v in order if v in shown]
    return SweptKnob(name, levels, hidden=len(order) - len(shown),
                     hidden_trials=sum(counts[v] for v in order if v not in shown))


def range_levels(trials: list[FrozenTrial], name: str, log: bool) -> list[Level]:
    """Trials of a numeric range in RANGE_BINS bins of equal counts, by value."""
    ordered = sorted(trials, key=lambda t: t.params[name])
    size = math.ceil(len(ordered) / RANGE_BINS)
    levels = []
    for start in range(0, len(ordered), size):
        chunk = ordered[start:start + size]
        low, high = chunk[0].params[name], chunk[-1].params[name]
        middle = statistics.median(t.params[name] for t in chunk)
        if log and low > 0:  # the geometric middle on a log axis
            middle = math.exp(statistics.fmean(math.log(t.params[name]) for t in chunk))
        levels.append(Level(f"{short(float(low))}-{short(float(high))}", chunk, middle))
    return levels


def level_index(knob: SweptKnob, text: str) -> int:
    """The level a `--baseline` value names: equal value, or the bin holding it."""
    for i, level in enumerate(knob.levels):
        if knob.is_range:
            low, high = level.trials[0].params[knob.name], level.trials[-1].params[knob.name]
            if _number(text) is not None and low <= _number(text) <= high:
                return i
        elif _same(text, level.value):
            return i
    if knob.is_range and _number(text) is not None:  # between bins or outside: the nearest
        return min(range(len(knob.levels)),
                   key=lambda i: abs(knob.levels[i].value - _number(text)))
    raise MsexpError(f"--baseline {knob.name}={text}: {knob.name} took "
                     + ", ".join(level.label for level in knob.levels))


def seed_spreads(study: optuna.Study, metrics: list[str]) -> dict[tuple[str, str], float]:
    """(knob, metric) -> pooled seed-to-seed std, where configurations ran with repeats."""
    groups = configurations(study, metrics)
    return {(e.knob, e.metric): e.spread for m in metrics for e in effects(groups, m)}


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _same(text: str, value: Any) -> bool:
    if text in (str(value), short(value)):
        return True
    if isinstance(value, bool):
        return text.lower() == str(value).lower()
    return isinstance(value, (int, float)) and _number(text) == value
