"""`msexp tune FILE`: the fastest configuration that fits, the largest micro-batch that
fits (`--max-batch`), and an lr range test (`--lr-find`)."""

from __future__ import annotations

import math
from typing import Annotated, Any, Optional

import typer

from msexp.cli.options import SweepFileArg, TrackingOpt, console, err_console
from msexp.cli.render import print_json
from msexp.errors import SpecError
from msexp.secrets.redaction import redact
from msexp.spec import load_spec
from msexp.tune.candidates import check_noise, check_tunable
from msexp.tune.measure import finite_or_none
from msexp.tune.outcome import Outcome, fate, speeds_disagree
from msexp.tune.output import ratio_text
from msexp.tune.record import PhaseRuns
from msexp.tune.rules import seed_spread
from msexp.tune.search import BatchSearch, LrFind, lr_find, max_batch, require_budget
from msexp.tune.tuner import Settings, memory_budget, tune, tuning

MaxBatchOpt = Annotated[bool, typer.Option(
    "--max-batch", help="Only find the largest micro-batch (batch_size / micro_size) of the "
                        "baseline that fits the memory budget: double, then binary search, "
                        "each size measured by a profile.")]
LrFindOpt = Annotated[bool, typer.Option(
    "--lr-find", help="Only run the lr range test on the baseline: the loss against an lr "
                      "growing exponentially from --lr-low to --lr-high over --lr-updates "
                      "updates; suggests the lr where the smoothed loss falls fastest.")]
MemoryOpt = Annotated[Optional[float], typer.Option(
    "--memory", min=1, help="Memory budget in MB (train_mem_mb).",
    show_default="the file's train_mem_mb max constraint")]
UpdatesOpt = Annotated[int, typer.Option(
    "--updates", min=2, help="Optimizer updates of a first profile, the compile's included; "
                             "each halving round doubles them.")]
TopOpt = Annotated[int, typer.Option(
    "--top", min=1, help="Fastest candidates the confirm phase trains against the baseline; "
                         "as many again where none of them keeps the objective. Halving "
                         "stops once no more than these can lead.")]
ToleranceOpt = Annotated[float, typer.Option(
    "--tolerance", min=0, help="How much worse than the baseline's objective a candidate "
                               "may be, where that exceeds the seed-to-seed spread.")]
LrUpdatesOpt = Annotated[int, typer.Option("--lr-updates", min=20, help="Updates of the lr "
                                                                         "range test.")]
LrLowOpt = Annotated[float, typer.Option("--lr-low", min=1e-12,
                                         help="First lr of the range test.")]
LrHighOpt = Annotated[float, typer.Option("--lr-high", min=1e-12,
                                          help="Last lr of the range test.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]
NO_PICK = 3  # the exit status of a run that found no pick (1: it failed, 2: bad input)


def tune_command(file: SweepFileArg, max_batch_only: MaxBatchOpt = False,
                 lr_only: LrFindOpt = False, memory: MemoryOpt = None, updates: UpdatesOpt = 10,
                 top: TopOpt = 2, tolerance: ToleranceOpt = 0.0, lr_updates: LrUpdatesOpt = 200,
                 lr_low: LrLowOpt = 1e-6, lr_high: LrHighOpt = 10.0,
                 tracking_uri: TrackingOpt = None, json_output: JsonOpt = False) -> None:
    """Find the fastest configuration that fits the memory budget.

    Among the values the sweep file lists, the fastest that fits its memory budget and
    keeps its objective: profile every candidate for a few updates, three at a time
    between two probes of the baseline (each swept knob at its first listed value), halve
    on the throughput ratio to the baseline, then train the fastest and the baseline for
    the sweep's epochs with budget.repeats seeds (two at least). Writes this run's sweep
    file of the pick and its plot under mlruns/reports/ (--json names them); says a line
    per probe and per phase on stderr.

    Exit status: 0 a pick (or what --max-batch or --lr-find looked for), 3 no pick (none
    fits or keeps the objective; no micro-batch fits; no lr suggestion), 2 bad input, 1
    failed.

    Example: msexp tune sweeps/accum.yaml --memory 200
    """
    if max_batch_only and lr_only:
        raise SpecError("msexp tune", "--max-batch", "choose --max-batch or --lr-find", "both")
    if lr_low >= lr_high:
        raise SpecError("msexp tune", "--lr-low", "must be below --lr-high", lr_low)
    spec = load_spec(file)
    budget = memory_budget(spec, memory)
    if max_batch_only:
        require_budget(spec, budget)
    check_tunable(spec)  # before the hosts start
    if not (max_batch_only or lr_only):
        check_noise(spec, tolerance)
    hosts = 1 if (max_batch_only or lr_only) else spec.budget.workers
    with tuning(spec, hosts, tracking_uri, _say) as (runner, runs):
        if max_batch_only:
            found = _show_batch(max_batch(spec, runner, runs, budget, updates, 1 << 16),
                                json_output)
        elif lr_only:
            found = _show_lr(lr_find(spec, runner, runs, None, lr_updates, lr_low, lr_high),
                             json_output)
        else:
            settings = Settings(updates, top, tolerance, memory)
            found = _show_tune(tune(spec, settings, runner, runs), runs, json_output)
    if not found:
        raise typer.Exit(NO_PICK)


def _say(line: str) -> None:
    """A line of progress, on stderr (stdout keeps the result, or the JSON)."""
    err_console.print(line, markup=False, highlight=False, soft_wrap=True)


def _show_batch(found: BatchSearch, json_output: bool) -> bool:
    if json_output:
        print_json({"micro_batch": found.micro_batch, "micro_size": found.micro_size,
                    "batch_size": found.micro_batch * found.micro_size,
                    "memory_mb": found.memory_mb,
                    "tried": [{"micro_batch": s, "train_mem_mb": mb, "note": n}
                              for s, mb, n in found.tried]})
        return found.micro_batch > 0
    for size, _, note in found.tried:
        console.print(f"micro-batch {size:>6}: {note}", markup=False, highlight=False)
    if not found.micro_batch:
        console.print(f"no micro-batch fits {found.memory_mb:g} MB: micro-batch 1 did not")
        return False
    console.print(f"largest micro-batch that fits {found.memory_mb:g} MB: {found.micro_batch} "
                  f"(batch_size {found.micro_batch * found.micro_size} at micro_size "
                  f"{found.micro_size})")
    return True


def _show_lr(found: LrFind, json_output: bool) -> bool:
    if json_output:
        print_json({"suggested_lr": found.suggestion, "plot": str(found.plot),
                    "lr": found.rates, "train_loss": found.losses})
        return found.suggestion is not None
    console.print(f"lr range test: {len(found.losses)} updates, lr {found.rates[0]:.3g} to "
                  f"{found.rates[-1]:.3g}")
    console.print("suggested lr: " + (f"{found.suggestion:.3g}" if found.suggestion else
                                      "none (no clear descent: widen the range or add "
                                      "--lr-updates)"))
    console.print(f"plot: {found.plot}")
    return found.suggestion is not None


def _show_tune(outcome: Outcome, runs: PhaseRuns, json_output: bool) -> bool:
    document = summary(outcome)
    if json_output:
        print_json(document)
        return outcome.pick is not None
    for line in lines(document):
        console.print(line, markup=False, highlight=False)
    if outcome.parents:
        first = next(iter(outcome.parents.values()))
        runs_url, _, serve = runs.tracker.ui_links(outcome.experiment_id, first)
        if serve:
            console.print(f"serve the store:  {serve}")
        console.print(f"compare runs:     {redact(runs_url)}")
    return outcome.pick is not None


def summary(outcome: Outcome) -> dict[str, Any]:
    """The tune run as a document: every candidate, the verdicts, the pick and its files.
    Each throughput is a ratio to the baseline's measured beside it, with its spread; a
    candidate's `samples_per_s` and `baseline_samples_per_s` are the two sides of its
    latest probe's ratio."""
    base = outcome.baseline
    document: dict[str, Any] = {
        "candidates": [_candidate(outcome, p) for p in outcome.profiles],
        "spread": outcome.spread, "rounds": outcome.rounds, "halving_stopped": outcome.stopped,
        "confirmed": [_trained(v) for v in outcome.verdicts],
        "baseline": None if base is None else _trained(base),
        "pick": None, "plot": str(outcome.plot),
        "sweep_file": str(outcome.sweep_file) if outcome.sweep_file else None,
        "mlflow_runs": outcome.parents,
    }
    pick = outcome.pick
    if pick is not None and base is not None:
        probes = pick.profile
        document["pick"] = {
            **_trained(pick),
            "memory_ratio": (pick.memory_mb / base.memory_mb
                             if pick.memory_mb and base.memory_mb else None),
            "probe_ratio": probes.ratios[-1] if probes.ratios else None,
            "probe_spread": finite_or_none(probes.spreads[-1]) if probes.spreads else None,
            "speed_distinguishable": not speeds_disagree(pick)}
    return document


def _candidate(outcome: Outcome, profile: Any) -> dict[str, Any]:
    sides = profile.sides or (None, None)
    return {"config": profile.candidate.point, "throughput_ratio": profile.ratios,
            "spread": [finite_or_none(x) for x in profile.spreads],
            "samples_per_s": sides[0], "baseline_samples_per_s": sides[1],
            "step_ms": profile.metrics.get("step_ms"),
            "compile_s": profile.metrics.get("compile_s"), "memory_mb": profile.memory_mb,
            "overflow_rate": profile.metrics.get("overflow_rate"),
            "dropped": profile.dropped, "verdict": fate(outcome, profile)}


def _trained(verdict: Any) -> dict[str, Any]:
    return {"config": verdict.profile.candidate.point, "objective": verdict.objective,
            "throughput_ratio": finite_or_none(verdict.ratio),
            "throughput_spread": finite_or_none(verdict.ratio_spread),
            "samples_per_s": verdict.samples_per_s, "memory_mb": verdict.memory_mb,
            "keep_rule": verdict.judged, "rejected": verdict.rejected}


def lines(document: dict[str, Any]) -> list[str]:
    """The terminal summary of `summary(...)`'s document."""
    out = []
    for c in document["candidates"]:
        rate = (_ratio(c["throughput_ratio"][-1], c["spread"][-1]) + " (probes)"
                if c["throughput_ratio"] else "-")
        memory = f"{c['memory_mb']:.1f} MB" if c["memory_mb"] is not None else "-"
        out.append(f"  {_config(c['config']):<40} {rate:>24} {memory:>10}  "
                   + c["verdict"])
    spread = document["spread"]
    out.append(f"halving: {document['rounds']} round(s); spread of the ratio (the leaders' "
               "median notches, or the change between rounds where larger): "
               + (f"{spread:.1%}" if spread is not None else "not measured"))
    base = document["baseline"]
    for v in document["confirmed"]:
        verdict = v["rejected"] or f"kept: {v['keep_rule']}"
        out.append(f"  confirm {_config(v['config'])}: objective {_spread(v['objective'])}, "
                   f"trained {_ratio(v['throughput_ratio'], v['throughput_spread'])} the "
                   f"baseline: {verdict}")
    pick = document["pick"]
    if pick is None:
        out.append("no pick: " + ("every candidate was dropped (reasons above)" if base is None
                                  and not document["confirmed"] else "none kept (reasons above)"))
    else:
        memory = (f"{pick['memory_ratio']:.2f}x" if pick["memory_ratio"] is not None else "-")
        out += [f"pick: {_config(pick['config'])}",
                f"  {_speed(pick, base)}, memory {memory}, objective "
                f"{_spread(pick['objective'])} (baseline {_spread(base['objective'])})",
                f"  sweep file: {document['sweep_file']}"]
    out.append(f"plot: {document['plot']}")
    return out


def _speed(pick: dict[str, Any], base: dict[str, Any]) -> str:
    """The pick's throughput against the baseline's, or, where its probes and its trainings
    disagree beyond their spreads, that its speed is not distinguishable."""
    trained = _ratio(pick["throughput_ratio"], pick["throughput_spread"])
    if pick.get("speed_distinguishable", True):
        return (f"throughput {trained} the baseline's ({_config(base['config'])}; trainings "
                "of the same seeds)")
    return (f"not distinguishable on speed from the baseline ({_config(base['config'])}): "
            f"its trainings ran {trained} the baseline's, its probes "
            f"{_ratio(pick['probe_ratio'], pick['probe_spread'])}, farther apart than "
            "their spreads allow")


def _ratio(ratio: float | None, spread: float | None) -> str:
    return ratio_text(math.nan if ratio is None else ratio,
                      math.inf if spread is None else spread)


def _config(point: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in point.items()) or "fixed"


def _spread(values: list[float]) -> str:
    if not values:
        return "none"
    spread = f"{seed_spread(values):.2g}" if len(values) > 1 else "? (one run)"
    return f"{sum(values) / len(values):.4g} ± {spread}"

