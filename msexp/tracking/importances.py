"""Which knobs matter: Optuna's importances, or why a ranking would mean nothing."""

from __future__ import annotations

from collections.abc import Sequence

import optuna
from optuna.trial import FrozenTrial

from msexp.console.library_warnings import warnings_to_log
from msexp.tracking.effects import short
from msexp.tracking.replicates import SEED, Effect

UNRANKED = "will be equal"  # Optuna's warning when it cannot rank the params


def importances(study: optuna.Study, complete: list[FrozenTrial], objective: str,
                spread: Sequence[Effect] = ()) -> tuple[dict[str, float], str | None]:
    """Optuna's importance of each varied param but the replicate seed, for the first
    objective, and a note: why there is no ranking where none can mean anything, or which
    knobs are left out of it. A knob whose effect on the objective is within the
    seed-to-seed spread (`spread`: the replicates' effects) is not ranked: a ranking of
    noise would contradict the effects shown beside it."""
    varied = _varied_params(complete)
    if len(complete) < 2 or not varied:
        return {}, None
    values = {t.values[0] for t in complete}
    if len(values) == 1:
        return {}, (f"importance: none, every complete trial has {objective} = "
                    f"{short(values.pop())}")
    ranked = [name for name in varied if name != SEED]
    if not ranked:
        return {}, "importance: none, only the replicate seed varies"
    noise = [e for e in spread if e.knob in ranked and not e.real]
    note = _within_spread(noise, objective) if noise else None
    if len(noise) == len(ranked):
        return {}, f"importance: none, {note}"
    target = (lambda t: t.values[0]) if len(study.directions) > 1 else None
    with warnings_to_log() as caught:
        try:
            found = dict(optuna.importance.get_param_importances(study, params=ranked,
                                                                 target=target))
        except (RuntimeError, ValueError):
            found = {}
    unranked = next((str(w.message) for w in caught if UNRANKED in str(w.message)), None)
    if unranked:
        return {}, f"importance: none ({unranked.split('. ')[0].lower()})"
    left_out = {e.knob for e in noise}
    return ({k: v for k, v in found.items() if k not in left_out},
            f"importance: not ranked: {note}" if note else None)


def _within_spread(noise: list[Effect], objective: str) -> str:
    """`micro_size moves eval_accuracy by 0, within the seed-to-seed spread (0.0589)`."""
    moves = ", ".join(f"{e.knob} moves {objective} by {e.effect:.4g}" for e in noise)
    return f"{moves}, within the seed-to-seed spread ({noise[0].spread:.4g}): noise, not a rank"


def _varied_params(trials: list[FrozenTrial]) -> list[str]:
    names = sorted({name for t in trials for name in t.params})
    return [n for n in names if len({repr(t.params.get(n)) for t in trials}) > 1]
