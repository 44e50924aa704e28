"""An objective a trial does not report: seen at the first epoch that settles it, or at
the trial's end; told with what the trial did report and the nearest name.

An epoch settles an objective when it carries a metric of the objective's kind but not
the objective. Kinds go by prefix: eval (`eval_`, `val_`, `valid_`, `validation_`), `test_`
and `train_`; an accuracy without a prefix (`acc`, `Top_1_Accuracy`) is a script's own
accuracy. An eval objective is settled by an eval metric or a script's own accuracy (the
script printed `acc` for `eval_accuracy`); a script's own accuracy only by another one
(msexp's callback reports `eval_accuracy` per epoch while the script prints its final
`Accuracy`). A script that reports only training figures per epoch may still print its
eval metrics at its end, so such an epoch settles no eval objective; a name of no kind
(`loss`, `step_ms`) and msexp's final-only metrics (`train_mem_mb`, `epochs_to_target`)
are settled only at the end.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Sequence

from msexp.execution import Epoch
from msexp.knobs import EPOCH_METRICS, METRICS

_KINDS = (("eval", ("eval_", "val_", "valid_", "validation_")), ("test", ("test_",)),
          ("train", ("train_",)))
_FINAL_ONLY = frozenset(METRICS) - frozenset(EPOCH_METRICS)
_LISTED = 12  # names a message lists at most
_OWN = {"wall_s"}  # msexp adds it to every trial: not something the trial reported


def metric_kind(name: str) -> str | None:
    """"eval", "test" or "train" by the name's prefix, "accuracy" for an accuracy without
    one; None for a name of no kind."""
    lowered = name.lower()
    for kind, prefixes in _KINDS:
        if lowered.startswith(prefixes):
            return kind
    return "accuracy" if "acc" in lowered else None


def unreported_at(objectives: Sequence[str], epoch: Epoch) -> str | None:
    """Why `epoch` shows that the trial will not report one of its objectives (see the
    module's rule), or None."""
    reported = epoch.metrics
    missing = [o for o in objectives if o not in reported and _settled(o, reported)]
    if not missing:
        return None
    return (f"objective {', '.join(missing)} not in epoch {epoch.epoch}'s report "
            f"({listing(reported, missing[0])}); the trial was stopped there")


def _settled(objective: str, reported: Collection[str]) -> bool:
    kind = metric_kind(objective)
    if kind is None or objective in _FINAL_ONLY:
        return False
    settling = {"eval", "accuracy"} if kind == "eval" else {kind}
    return any(metric_kind(name) in settling for name in reported)


def listing(reported: Collection[str], wanted: str) -> str:
    """"it reported a, b; did you mean b?": what a trial reported, and the nearest name
    to `wanted`."""
    names = sorted(n for n in reported if n not in _OWN)
    if not names:
        return "it reported no metric"
    shown = ", ".join(names[:_LISTED]) + (f" and {len(names) - _LISTED} more"
                                          if len(names) > _LISTED else "")
    near = nearest(wanted, names)
    return f"it reported {shown}" + (f"; did you mean {near}?" if near else "")


def nearest(name: str, names: Sequence[str]) -> str | None:
    """The reported name closest to `name`: by difflib, else by the names without their
    kind's prefix (`eval_accuracy` finds `acc`)."""
    found = difflib.get_close_matches(name, names, n=1)
    if found:
        return found[0]
    cores = {_core(n): n for n in names}
    found = difflib.get_close_matches(_core(name), list(cores), n=1, cutoff=0.5)
    return cores[found[0]] if found else None


def _core(name: str) -> str:
    lowered = name.lower()
    for _, prefixes in _KINDS:
        for prefix in prefixes:
            if lowered.startswith(prefix):
                return lowered[len(prefix):]
    return lowered
