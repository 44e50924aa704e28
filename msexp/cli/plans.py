"""`msexp plan`'s document: what each trial of a sweep gets, and its table."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from msexp.cli.options import console
from msexp.cli.render import cell, kv, when_text
from msexp.spec import Method, SweepSpec
from msexp.spec.space import derived


def plan_document(spec: SweepSpec) -> tuple[dict[str, Any], list[str]]:
    """The plan of `spec` (see `msexp plan --help`), and the names its rows show: the swept
    ones, then those a swept value brings in or leaves out."""
    swept = [p.name for p in spec.space.params]
    shown = [*swept]
    document: dict[str, Any] = {
        "name": spec.name, "method": spec.method.value, "experiment": spec.experiment.ref,
        "trials": spec.n_trials(), "fixed": _certain(spec, spec.space.resolve({}), swept)}
    if spec.method is Method.grid:
        trials = [(number, index, spec.space.resolve(point)) for number, (index, point)
                  in enumerate(spec.space.queue_order(spec.n_trials()))]
        shown += [name for name in _varying([values for *_, values in trials])
                  if name not in swept]  # knobs a swept value brings in or leaves out
        document["fixed"] = _certain(spec, trials[0][2], shown) if trials else {}
        document["grid"] = [_grid_row(spec, number, index, values, shown)
                            for number, index, values in trials]
    else:
        document["params"] = [{"name": p.name, "distribution": p.describe(),
                               "when": {k: list(v) for k, v in (p.when or {}).items()}}
                              for p in spec.space.params]
    if not spec.experiment.known:
        document["note"] = (f"{spec.experiment.ref} does not write its DEFAULTS and PARAMS "
                            "as literals, so only the values the sweep file sets are shown; "
                            "`msexp plan --check` imports it")
    return document, shown


_ABSENT = object()


def _varying(trials: list[dict[str, Any]]) -> list[str]:
    """The names whose value is not the same in every trial (absent in some included)."""
    names = dict.fromkeys(name for values in trials for name in values)
    return [name for name in names
            if any(v.get(name, _ABSENT) != trials[0].get(name, _ABSENT) for v in trials)]


def _certain(spec: SweepSpec, values: dict[str, Any], left_out: list[str]) -> dict[str, Any]:
    """`values` but `left_out`; only those the sweep file sets where the experiment's
    DEFAULTS and PARAMS are not known (not imported, and not literals in its source)."""
    return {k: v for k, v in values.items() if k not in left_out and
            (spec.experiment.known or k in spec.fixed or k in spec.params)}


def _grid_row(spec: SweepSpec, number: int, index: int, values: dict[str, Any],
              shown: list[str]) -> dict[str, Any]:
    batches = {"batch_size", "micro_size"}
    extra = derived(values) if batches <= set(_certain(spec, values, [])) else {}
    return {"number": number, "grid_index": index,
            "params": _certain(spec, {k: v for k, v in values.items() if k in shown}, []),
            "micro_batch": extra.get("micro_batch"),
            "effective_batch": extra.get("effective_batch")}


def plan_table(document: dict[str, Any], swept: list[str]) -> None:
    """The plan as a table (a grid's trials, or a sampler's params) and its fixed values."""
    title = f"{document['name']}: {document['method']}, {document['trials']} trials"
    if "grid" in document:
        table = Table(title=f"{document['name']}: grid of {document['trials']} trials on "
                            f"{document['experiment']}")
        for column in ("#", *swept, "micro_batch", "effective_batch"):
            table.add_column(column, justify="left" if column in swept else "right")
        for row in document["grid"]:
            table.add_row(str(row["number"]), *(cell(row["params"].get(n, "-")) for n in swept),
                          cell(row["micro_batch"] or "-"), cell(row["effective_batch"] or "-"))
    else:
        table = Table(title=f"{title} over")
        for column in ("param", "distribution", "when"):
            table.add_column(column)
        for p in document["params"]:
            table.add_row(p["name"], p["distribution"], when_text(p["when"]))
    console.print(table)
    console.print(f"fixed: {kv(document['fixed'])}", highlight=False)
    if "note" in document:
        console.print(f"note: {document['note']}", highlight=False)
