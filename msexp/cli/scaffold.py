"""Commands that write and describe files: new experiment, new sweep, knobs, schema."""

from __future__ import annotations

import json
from collections.abc import Iterable
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from msexp.cli import templates
from msexp.cli.options import console
from msexp.experiment import Experiment, load_experiment
from msexp.experiment_source import builtin_names
from msexp.knobs import KNOBS, METRICS, Knob
from msexp.spec import load_spec
from msexp.spec.model import knob_rows, sweep_schema


def new_experiment(
    name: Annotated[str, typer.Argument(help="Python identifier; writes experiments/NAME.py.",
                                        show_default=False)],
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
    script: Annotated[bool, typer.Option(
        "--script", help="Write a Model.train script (and sweeps/NAME.yaml sweeping it) "
                         "instead: it prints its metrics, reports epochs and uses msexp's "
                         "techniques.")
                      ] = False,
) -> None:
    """Write experiments/NAME.py: an experiment that trains as written.

    It holds a network, a loss and data; with --script, a Model.train script instead.

    Example: msexp new experiment my_model --script
    """
    if script:
        path, sweep = templates.new_script(name, force=force)
        console.print(f"wrote {path} and {sweep}; next: msexp plan {sweep} --check")
        return
    path = templates.new_experiment(name, force=force)
    console.print(f"wrote {path}; next: msexp new sweep --experiment {path}")


class SweepMethod(str, Enum):
    """Methods `msexp new sweep` writes."""

    grid = "grid"
    tpe = "tpe"


def new_sweep(
    experiment: Annotated[str, typer.Option(
        "--experiment", help="Built-in name, package.module:build or path/to/file.py.",
        show_default=False)],
    method: Annotated[SweepMethod, typer.Option("--method", help="grid or tpe.")
                      ] = SweepMethod.grid,
    output: Annotated[Optional[Path], typer.Option(
        "--output", "-o", help="Where to write.",
        show_default="sweeps/<experiment>.yaml")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Write a sweep file of an experiment's main knobs, valid as is.

    Example: msexp new sweep --experiment my_model.py --method tpe
    """
    path = templates.new_sweep(experiment, method.value, output, force)
    load_spec(path)
    console.print(f"wrote {path}; next: msexp plan {path} && msexp sweep {path}")


def knobs(
    experiment: Annotated[Optional[str], typer.Option(
        "--experiment", help="Add this experiment's own knobs and defaults.")] = None,
    markdown: Annotated[bool, typer.Option(
        "--markdown", help="Print the table as Markdown (docs/sweep-file.md holds it).")
                        ] = False,
) -> None:
    """List every knob: type, allowed values, default and condition.

    The graph column says whether a knob shapes the compiled graphs (a "no" knob varies
    between warm trials of one compile).

    Example: msexp knobs --experiment mlp_digits
    """
    rows = knob_rows(_knob_table(experiment))
    if markdown:
        typer.echo(markdown_table(rows))
        return
    table = Table(title="knobs" + (f" of {experiment}" if experiment else ""))
    for column in rows[0]:
        table.add_column(column)
    for row in rows:
        table.add_row(*row.values())
    console.print(table)


def markdown_table(rows: list[dict[str, str]]) -> str:
    """Rows as a Markdown table, values in code spans where they are values."""
    def line(cells: Iterable[str]) -> str:
        return "| " + " | ".join(cells) + " |"
    return "\n".join([line(rows[0]), line("---" for _ in rows[0]),
                      *(line(_cell(k, v) for k, v in row.items()) for row in rows)])


def _cell(column: str, value: str) -> str:
    return f"`{value}`" if value and column in ("knob", "default") else value


def schema(
    experiment: Annotated[Optional[str], typer.Option(
        "--experiment", help="Include this experiment's own knobs.")] = None,
) -> None:
    """Print the JSON Schema of sweep files, for editors and checks.

    Example: msexp schema > sweep.schema.json
    """
    metrics = METRICS + tuple(m for e in _experiments(experiment) for m in e.metrics)
    known = (experiment,) if experiment else tuple(builtin_names())
    typer.echo(json.dumps(sweep_schema(_knob_table(experiment), metrics, known), indent=2))


def _experiments(ref: str | None) -> list[Experiment]:
    return [load_experiment(r, "--experiment") for r in ([ref] if ref else builtin_names())]


def _knob_table(ref: str | None) -> dict[str, Knob]:
    """One experiment's knobs (with its defaults), or msexp's plus every built-in's own."""
    if ref:
        return dict(_experiments(ref)[0].knobs)
    merged = dict(KNOBS)
    for exp in _experiments(None):
        merged.update(exp.own_knobs)
    return merged


