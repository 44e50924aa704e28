"""What `msexp tune` leaves behind: the plot of throughput against memory, the ready-to-run
sweep file of the pick, and the lr range test's plot."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any

import yaml

from msexp.knobs import value_text
from msexp.paths import write_atomic
from msexp.spec.yaml_text import load_yaml
from msexp.tracking.effect_plots import files_backend
from msexp.tune.measure import Profile
from msexp.tune.outcome import Outcome, fate
from msexp.tune.phases import Verdict


def _pyplot() -> Any:
    files_backend()  # files only, never a window
    import matplotlib.pyplot as plt  # lazy: matplotlib takes about a second to import

    return plt


KINDS = {  # kind: (marker, color, size, legend name)
    "pick": ("*", "tab:green", 260, "pick"),
    "baseline": ("s", "tab:gray", 110, "baseline"),
    "kept": ("o", "tab:blue", 50, "profiled"),
    "rejected": ("^", "tab:orange", 70, "objective not kept (confirm)"),
    "dropped": ("x", "tab:red", 60, "dropped (reason in the key)"),
}


def throughput_plot(path: Path, outcome: Outcome, memory_mb: float | None, title: str
                    ) -> Path:
    """Throughput as a ratio to the baseline's beside it against train_mem_mb for every
    profiled candidate, with the ratio's spread as an error bar, each marked by a number
    that the key beside the axes spells out (its knobs, figures and fate) in tune's ranking:
    the pick a star, the baseline (the first candidate) a square, dropped ones red crosses,
    those the confirm phase did not keep orange triangles, the memory budget a dashed line.
    A configuration the confirm phase trained also has a hollow circle at its trainings'
    ratio, which chose the pick, joined to its probes' by a dotted line."""
    plt = _pyplot()
    figure, (axes, key) = plt.subplots(1, 2, figsize=(15, 7.5),
                                       gridspec_kw={"width_ratios": [4, 3]})
    named: set[str] = set()
    for number, profile in enumerate(_numbered(outcome), 1):
        if profile.memory_mb is None or not profile.ratios:
            continue
        marker, color, size, name = KINDS[_kind(outcome, profile)]
        x, y = profile.memory_mb, profile.ratios[-1]
        axes.errorbar([x], [y], yerr=[_error(y, profile.spreads[-1])], fmt="none",
                      ecolor=color, alpha=0.5, zorder=2)
        axes.scatter([x], [y], marker=marker, s=size, color=color,
                     label=None if name in named else name, zorder=3)
        named.add(name)
        axes.annotate(str(number), (x, y), fontsize=8, xytext=(5, 4),
                      textcoords="offset points")
        _trained_point(axes, outcome.verdict(profile), x, y, color, named)
    if memory_mb is not None:
        axes.axvline(memory_mb, color="tab:red", linestyle="--",
                     label=f"memory budget {memory_mb:g} MB")
    axes.axhline(1.0, color="tab:gray", linewidth=0.8)
    axes.set_xlabel("train_mem_mb (MB, measured in the profile)")
    axes.set_ylabel("throughput / the baseline's, measured beside it (x)")
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.margins(0.08)
    axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=3, fontsize=8)
    key.axis("off")
    key.text(0, 1, plot_key(outcome), family="monospace", fontsize=8, va="top",
             transform=key.transAxes)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120, bbox_inches="tight")  # the key's long rows stay in
    plt.close(figure)
    return path


def _trained_point(axes: Any, trained: Verdict | None, x: float, y: float, color: str,
                   named: set[str]) -> None:
    """A hollow circle at a trained configuration's ratio, joined to its probes' (x, y)."""
    if trained is None or not math.isfinite(trained.ratio):
        return
    label = "trained (confirm)"
    axes.errorbar([x], [trained.ratio], yerr=[_error(trained.ratio, trained.ratio_spread)],
                  fmt="o", mfc="none", color=color, zorder=3,
                  label=None if label in named else label)
    axes.plot([x, x], [y, trained.ratio], color=color, linestyle=":", zorder=1)
    named.add(label)


def ratio_text(ratio: float, spread: float) -> str:
    """`1.35x ± 4.0%`: a throughput ratio with its relative spread (`?`: not measured)."""
    if not math.isfinite(ratio):
        return "-"
    return f"{ratio:.2f}x ± " + (f"{spread:.1%}" if math.isfinite(spread) else "?")


def _error(ratio: float, spread: float) -> float:
    return ratio * spread if math.isfinite(spread) else 0.0


def plot_key(outcome: Outcome) -> str:
    """The plot's key: one row a candidate, numbered as on the axes, its knobs' values, its
    throughput ratio in its probes and in its confirm trainings (each ± its spread), MB,
    halving rounds and what became of it."""
    order = _numbered(outcome)
    knobs = list(order[0].candidate.point) if order else []
    widths = [max([len(k)] + [len(value_text(p.candidate.point.get(k))) for p in order])
              for k in knobs]
    rows = ["  #  " + "  ".join(k.ljust(w) for k, w in zip(knobs, widths))
            + "  probes/base    trained/base      MB  rounds  "]
    for number, profile in enumerate(order, 1):
        values = "  ".join(value_text(profile.candidate.point.get(k)).ljust(w)
                           for k, w in zip(knobs, widths))
        probed = (ratio_text(profile.ratios[-1], profile.spreads[-1]) if profile.ratios
                  else "-")
        trained = outcome.verdict(profile)
        confirmed = ratio_text(trained.ratio, trained.ratio_spread) if trained else "-"
        memory = f"{profile.memory_mb:6.2f}" if profile.memory_mb is not None else "     -"
        rounds = f"{max(len(profile.ratios) - 1, 0):>6}"
        rows.append(f"{number:>3}  {values}  {probed:>13}  {confirmed:>14}  {memory}  "
                    f"{rounds}  " + textwrap.shorten(fate(outcome, profile), 64,
                                                     placeholder="..."))
    return "\n".join(rows)


def _numbered(outcome: Outcome) -> list[Profile]:
    """The order of the plot's numbers: tune's ranking (`standing`: halving's survivors
    first), then the dropped, fastest first, the unmeasured last."""
    dropped = [p for p in outcome.profiles if p not in outcome.standing]
    return outcome.standing + sorted(dropped, key=lambda p: -(p.ratios or [-1.0])[-1])


def _kind(outcome: Outcome, profile: Profile) -> str:
    if outcome.pick is not None and profile is outcome.pick.profile:
        return "pick"
    if profile.dropped:
        return "dropped"
    if profile in outcome.rejected:
        return "rejected"
    return "baseline" if profile is outcome.profiles[0] else "kept"


def lr_plot(path: Path, rates: list[float], losses: list[float], smoothed: list[float],
            suggestion: float | None, title: str) -> Path:
    """The lr range test: loss against the learning rate (log axis) up to where it diverges
    (`smoothed` ends there), the suggestion marked."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(8, 5))
    shown = min(len(rates), len(smoothed) + 1)
    axes.plot(rates[:shown], losses[:shown], color="tab:gray", alpha=0.5,
              label="train_loss per update")
    axes.plot(rates[:len(smoothed)], smoothed, color="tab:blue", label="smoothed (EMA 0.98)")
    if shown < len(rates):
        axes.axvline(rates[shown - 1], color="tab:red", linestyle=":",
                     label=f"diverges at lr {rates[shown - 1]:.3g}")
    if suggestion is not None:
        axes.axvline(suggestion, color="tab:green", linestyle="--",
                     label=f"suggested lr {suggestion:.3g}")
    axes.set_xscale("log")
    axes.set_xlabel("learning rate (log scale)")
    axes.set_ylabel("train_loss")
    axes.set_title(title)
    axes.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def sweep_file(path: Path, original: Path, name: str, point: dict[str, Any],
               swept: set[str]) -> Path:
    """The original sweep file with the pick's values fixed and the knobs tune compared
    taken out of `params` (the seeds of `budget.repeats` still run)."""
    data = load_yaml(original.read_text(encoding="utf-8"), str(original)) or {}
    data["name"] = name
    data["fixed"] = {**(data.get("fixed") or {}), **point}
    params = {k: v for k, v in (data.get("params") or {}).items() if k not in swept}
    if params:
        data["params"] = params
    else:
        data.pop("params", None)
    data["method"] = "grid"
    budget = dict(data.get("budget") or {})
    budget.pop("trials", None)
    data["budget"] = budget
    header = f"# written by msexp tune from {original}: the pick's values are fixed\n"
    write_atomic(path, header + yaml.safe_dump(data, sort_keys=False))
    return path
