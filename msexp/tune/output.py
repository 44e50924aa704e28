"""What `msexp tune` leaves behind: the plot of throughput against memory, the ready-to-run
sweep file of the pick, and the lr range test's plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from msexp.paths import write_atomic
from msexp.spec.file import load_yaml
from msexp.tune.phases import Profile


def _pyplot() -> Any:
    import matplotlib  # lazy: matplotlib takes about a second to import

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt  # lazy: as above

    return plt


def throughput_plot(path: Path, profiles: list[Profile], pick: Profile | None,
                    baseline: Profile, rejected: list[Profile], memory_mb: float | None,
                    title: str) -> Path:
    """samples/s against train_mem_mb for every profiled candidate: standing ones as dots,
    dropped ones as red crosses (those never measured are listed below the axes), those
    the confirm phase did not keep (objective) as orange triangles, the pick as a star,
    the baseline as a square, the memory budget as a dashed line."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(9, 6.5))
    unmeasured = []
    for profile in profiles:
        x, y = profile.memory_mb, (profile.rates or [None])[-1]
        if x is None or y is None:
            unmeasured.append(f"{profile.candidate.label}: {profile.dropped}")
            continue
        marker, color, note = ("x", "tab:red", " (dropped)") if profile.dropped else (
            ("^", "tab:orange", " (objective not kept)") if profile in rejected
            else ("o", "tab:blue", ""))
        axes.scatter([x], [y], marker=marker, s=50, color=color)
        axes.annotate(profile.candidate.label + note, (x, y), fontsize=7, xytext=(4, 3),
                      textcoords="offset points")
    for marked, marker, color, name in ((baseline, "s", "tab:gray", "baseline"),
                                        (pick, "*", "tab:green", "pick")):
        if marked is not None and marked.memory_mb is not None and marked.rates:
            axes.scatter([marked.memory_mb], [marked.rates[-1]], marker=marker, s=260,
                         facecolors="none" if marker == "s" else color, edgecolors=color,
                         linewidths=2, label=f"{name}: {marked.candidate.label}", zorder=3)
    if memory_mb is not None:
        axes.axvline(memory_mb, color="tab:red", linestyle="--",
                     label=f"memory budget {memory_mb:g} MB")
    axes.set_xlabel("train_mem_mb (MB, measured in the profile)")
    axes.set_ylabel("throughput (samples/s, median update after compile)")
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend(loc="best", fontsize=8)
    if unmeasured:
        figure.text(0.01, 0.01, "not measured: " + "; ".join(unmeasured)[:600], fontsize=7,
                    wrap=True)
        figure.subplots_adjust(bottom=0.18)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


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
