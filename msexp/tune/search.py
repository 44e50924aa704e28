"""`--max-batch` and `--lr-find`: the largest micro-batch that fits a memory budget, and
the learning-rate range test, each measured by probes of the baseline configuration."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from msexp.errors import MsexpError, SpecError
from msexp.paths import REPORTS_DIR
from msexp.spec import SweepSpec
from msexp.training.records import Probe
from msexp.tune import rules
from msexp.tune.candidates import Candidate, candidates, check_tunable
from msexp.tune.measure import MEMORY
from msexp.tune.output import lr_plot
from msexp.tune.record import PhaseRuns
from msexp.tune.runner import Job, Runner, failure


@dataclass
class BatchSearch:
    """The largest micro-batch that fits, and each size tried with its memory or failure."""

    micro_batch: int
    micro_size: int
    memory_mb: float
    tried: list[tuple[int, float | None, str]] = field(default_factory=list)  # size, MB, note


def max_batch(spec: SweepSpec, runner: Runner, runs: PhaseRuns, memory_mb: float | None,
              updates: int, limit: int) -> BatchSearch:
    """Grow the baseline's micro-batch (batch_size / micro_size) by doubling, then binary
    search, each size measured by a probe's train_mem_mb against the budget.

    Raises:
        SpecError: no memory budget (`--memory` or a train_mem_mb constraint).
    """
    budget = require_budget(spec, memory_mb)
    check_tunable(spec)
    base = candidates(spec)[0]
    micro_size = base.params.get("micro_size", 1)
    notes: dict[int, tuple[float | None, str]] = {}

    def fits(size: int) -> bool:
        params = {**base.params, "batch_size": size * micro_size}
        ran = runner.run([Job(size, f"maxbatch-{size}", params, Probe(updates))], hosts=1)
        result = ran[0].result
        reason = failure(result)
        memory = result.metrics.get(MEMORY, result.metrics.get("peak_mem_mb"))
        if memory is None:
            reason = reason or "train_mem_mb was not measured"
        fit = reason is None and memory is not None and memory <= budget
        notes[size] = memory, reason or f"{memory:.3f} MB {'<=' if fit else '>'} {budget:g} MB"
        runs.children("max-batch", ran, {} if fit else {0: notes[size][1]})
        return fit

    size, tried = rules.largest_fitting(fits, 1, limit)
    runs.close()
    return BatchSearch(size, micro_size, budget, [(s, *notes[s]) for s in tried])


def require_budget(spec: SweepSpec, memory_mb: float | None) -> float:
    """The memory budget `--max-batch` grows to.

    Raises:
        SpecError: there is none (`--memory` or a train_mem_mb max constraint).
    """
    if memory_mb is None:
        raise SpecError(str(spec.path), "constraints", "--max-batch needs a memory budget: "
                        "--memory MB or a train_mem_mb max constraint", "none")
    return memory_mb


@dataclass
class LrFind:
    """The lr range test: each update's lr and loss, the suggestion (None: no clear
    descent) and the plot."""

    rates: list[float]
    losses: list[float]
    suggestion: float | None
    plot: Path


def lr_find(spec: SweepSpec, runner: Runner, runs: PhaseRuns, candidate: Candidate | None,
            updates: int, low: float, high: float) -> LrFind:
    """Train `candidate` (default the baseline) for `updates` updates with the learning
    rate growing exponentially from `low` to `high`; suggest where the smoothed loss falls
    fastest (as Lightning's lr_find)."""
    check_tunable(spec)
    if spec.command is not None:
        raise SpecError(str(spec.path), "command", "--lr-find sets the learning rate of each "
                        "update, which a command's script owns; run it on a built-in or "
                        "build() experiment", spec.command.command)
    chosen = candidate or candidates(spec)[0]
    ran = runner.run([Job("lr", "lr-find", chosen.params, Probe(updates, low, high))], hosts=1)
    result = ran[0].result
    reason = failure(result)
    runs.children("lr-find", ran, {0: reason} if reason else {})
    if reason:
        runs.close()
        raise MsexpError(f"{spec.path}: the lr range test of {chosen.label} {reason}")
    series = result.epochs[-1].series
    rates, losses = series["lr"], series["train_loss"]
    suggestion = rules.suggest_lr(rates, losses)
    plot = lr_plot(REPORTS_DIR / f"{spec.name}-lr-find-{runner.folder.name}.png", rates, losses,
                   rules.before_divergence(losses), suggestion,
                   f"msexp tune {spec.name} --lr-find: {chosen.label}")
    runs.attach("lr-find", plot)
    runs.close()
    return LrFind(rates, losses, suggestion, plot)
