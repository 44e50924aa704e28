"""A user's own training script: what msexp reads from its log (`msexp metrics LOG`), and
`plan --check` of it, the check `msexp sweep` runs first, run as a trial runs the command."""

from __future__ import annotations

import json
import shlex
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.table import Table

from msexp.cli.options import console
from msexp.cli.render import cell
from msexp.errors import SpecError
from msexp.execution.arguments import arguments, command_argv, trial_params
from msexp.execution.command import check_run, command_environment, run_once
from msexp.execution.log_metrics import (
    COUNTER,
    PARAM,
    STATUS,
    MetricReader,
    cut_note,
    read_log,
)
from msexp.execution.protocol import TrialRequest
from msexp.execution.script_help import Listed
from msexp.patterns import user_pattern
from msexp.search.requests import trial_request
from msexp.spec import Method, SweepSpec
from msexp.spec.checks import batch_statistics_warning
from msexp.spec.command import needs_hooks, split_command
from msexp.spec.file import CommandSection
from msexp.trial_folder import trial_name

CHECK_TIMEOUT_S = 600.0  # a check run without budget.trial_timeout


def metrics(
    log: Annotated[Path, typer.Argument(help="A training log (a file the script printed).",
                                        show_default=False)],
    pattern: Annotated[Optional[list[str]], typer.Option(
        "--pattern", help="A regex whose named groups are metrics, as experiment.metrics "
                          "(RE2 syntax; repeat for several).")] = None,
    param: Annotated[Optional[list[str]], typer.Option(
        "--param", help="A param's name: a value printed under it is the param printed "
                        "back, not a metric (repeat for several).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")
                       ] = False,
) -> None:
    """Show the metrics a command trial would record from a log.

    Also what it would not record, and why: the configuration echo, status messages,
    params, names printed on lines of two kinds.

    Example: msexp metrics train.log
    """
    if not log.is_file():
        raise SpecError(str(log), "", "file not found", str(log), show_value=False)
    for i, written in enumerate(pattern or []):
        user_pattern("--pattern", str(i), written)
    reader = read_log(log, pattern or [], param or [])
    if as_json:
        print(json.dumps({"metrics": reader.last, "not_recorded": reader.echoed,
                          "left_out": reader.left_out, "ambiguous": reader.ambiguous,
                          "cut": dict(zip(("line", "length"), reader.cut or ()))}, indent=2))
        return
    show_metrics(f"{log}: what a trial records", reader.last, reader.echoed)
    show_left_out(reader)


def show_metrics(title: str, recorded: dict[str, float], echoed: dict[str, float]) -> None:
    """A table of recorded metrics, and a line naming the configuration echo left out."""
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in recorded.items():
        table.add_row(name, cell(value))
    console.print(table if recorded else f"{title}: no metric")
    if echoed:
        console.print("not recorded (printed before the first training line): "
                      + ", ".join(echoed), highlight=False)


def show_left_out(reader: MetricReader) -> None:
    """A line for each other kind of name a trial would not record, and a long line's cut."""
    for why in (STATUS, COUNTER, PARAM):
        names = [name for name, reason in reader.left_out.items() if reason == why]
        if names:
            console.print(f"not recorded ({why}): {', '.join(names)}", highlight=False)
    for name, shapes in reader.ambiguous.items():
        console.print(f"not recorded (printed on {len(shapes)} kinds of line, so which one "
                      f"it means is ambiguous: {'; '.join(shapes)}): {name}; to record one, "
                      "name it with experiment.metrics", highlight=False)
    if reader.cut:
        console.print(cut_note(*reader.cut), highlight=False)


def check_command_experiment(spec: SweepSpec) -> None:
    """`plan --check` of a command: `--help` (or experiment.check's text) first, the swept
    and fixed names against the flags it lists, then, where experiment.check gives
    overrides, one real run of the first trial with them.

    Raises:
        SpecError: the command fails or times out, a name is not among its flags, or the
            run does not report the first objective.
    """
    assert spec.command is not None
    source, section = str(spec.path), spec.command
    listed = quick_check(spec)
    quick = _quick_args(section)
    console.print(f"{source}: `{shlex.join([*split_command(source, section.command), *quick])}`"
                  " ok", highlight=False)
    if section.args == "flags" and listed.flags:
        check_flags(spec, listed)
        console.print(f"{spec.path}: every name is a flag of the script", highlight=False)
    if isinstance(section.check, dict):
        found = sorted(name for name, takes_value in listed.flags.items() if not takes_value)
        _check_run(spec, section.check, found)
    else:
        console.print(f"{source}: to see what a trial records, name a tiny budget in "
                      "experiment.check (e.g. {epoch_size: 1}): --check then runs it for real",
                      highlight=False)


def quick_check(spec: SweepSpec, hint: str = "") -> Listed:
    """Run the command with `--help` (or experiment.check's text) as a trial runs it: the
    fixed section's arguments given, in a trial's own empty folder and environment. What
    its help lists (nothing for experiment.check's text): a config-system script's help
    lists the flags of the config that `--config_path` names.

    Raises:
        SpecError: the command fails or does not finish in time (`hint` ends the rule).
    """
    assert spec.command is not None
    quick = _quick_args(spec.command)
    with tempfile.TemporaryDirectory(prefix="msexp-check-") as scratch:
        folder = Path(scratch) / trial_name(0)
        outputs = folder / "outputs"
        outputs.mkdir(parents=True)
        command = trial_request(spec, {}, folder).command
        assert command is not None
        argv = [*command_argv(command.argv, spec.folder), *fixed_arguments(spec, folder)]
        problem, help_text = run_once(argv, outputs, quick,
                                      env=command_environment(command, outputs))
    if problem:
        raise SpecError(str(spec.path), "experiment.command", problem + hint,
                        spec.command.command)
    return Listed.of(help_text) if quick == ["--help"] else Listed()


def fixed_arguments(spec: SweepSpec, folder: Path) -> list[str]:
    """The arguments every trial of a command gets (its fixed section's) as a trial in
    `folder` gets them; a boolean only where the file lists the switches (else whether it
    is one is what --help tells)."""
    assert spec.command is not None
    switches = spec.command.switches
    fixed = {name: value for name, value in spec.fixed.items() if name != "devices"
             and (switches is not None or not isinstance(value, bool))}  # devices: msrun's
    return arguments(trial_params(fixed, folder, spec.folder), spec.command.args,
                     switches or ())


def _quick_args(section: CommandSection) -> list[str]:
    return shlex.split(section.check) if isinstance(section.check, str) else ["--help"]


def check_flags(spec: SweepSpec, listed: Listed) -> None:
    """Refuse a name in `fixed`, `params` or experiment.check that is not among the
    script's flags (`listed`; one letter: a short option), naming the nearest one, or
    msexp.hooks for a technique.

    Raises:
        SpecError: naming the first such name.
    """
    assert spec.command is not None
    overrides = spec.command.check if isinstance(spec.command.check, dict) else {}
    for where, names in (("fixed", spec.fixed), ("params", spec.params),
                         ("experiment.check", overrides)):
        for name in names:
            refusal = None if name == "devices" else listed.refusal(name)  # devices: msrun's
            if refusal:
                rule = needs_hooks(spec.command, spec.folder, name) or refusal
                raise SpecError(str(spec.path), f"{where}.{name}", rule, name)


def preflight(spec: SweepSpec) -> SweepSpec:
    """The checks that take seconds, before any store or trial: the --help (or
    experiment.check's text) of a command that takes flags must run and list every name
    the sweep passes (as `plan --check`); off with budget.fail_fast: false."""
    section = spec.command
    if section is not None and section.args == "flags" and spec.budget.fail_fast:
        listed = quick_check(spec, " (msexp sweep checks it before the first trial; "
                                   "budget.fail_fast: false skips the check)")
        if listed.flags:
            check_flags(spec, listed)
    return spec


def _check_run(spec: SweepSpec, overrides: dict[str, Any], found_switches: list[str]) -> None:
    source, section = str(spec.path), spec.command
    assert section is not None
    params = {**first_trial(spec), **overrides}
    folder = Path(tempfile.mkdtemp(prefix="msexp-check-")) / trial_name(0)
    command = trial_request(spec, params, folder).command  # as a trial's, pass_env too
    assert command is not None
    command = replace(command, switches=section.switches if section.switches is not None
                      else found_switches)
    request = TrialRequest(spec.experiment.ref, params, folder, command=command)
    timeout = spec.budget.trial_timeout or CHECK_TIMEOUT_S
    console.print(f"{source}: a check run with {_kv(overrides)} (log: {request.log_path})",
                  highlight=False)
    try:
        run = check_run(request, timeout)
    except RuntimeError as exc:
        raise SpecError(source, "experiment.check", f"the check run failed: {exc}",
                        overrides) from None
    show_metrics(f"{source}: the check run records", run.metrics, run.echoed)
    stats = run.batch_statistics
    warning = batch_statistics_warning(source, stats.layers if stats else 0, spec.space,
                                       stats.dropout if stats else 0)
    if warning:
        console.print(warning, highlight=False, soft_wrap=True)
    console.print(f"checkpoint: {run.checkpoint or '(none written in its folder)'}",
                  highlight=False)
    objective = spec.objectives[0].metric
    if objective not in run.metrics:
        reported = ", ".join(run.metrics) or "nothing"
        raise SpecError(source, "objective.0.metric", "the check run did not report it "
                        f"(it reported {reported}; `msexp metrics {run.log}` shows why)",
                        objective)
    console.print(f"{source}: objective {objective} found: {cell(run.metrics[objective])}",
                  highlight=False)


def first_trial(spec: SweepSpec) -> dict[str, Any]:
    """The params of the sweep's first trial: the first grid point, or else each swept
    param's first value (its low end for a range)."""
    if spec.method is Method.grid:
        return spec.space.resolve(next(spec.space.iter_grid()))
    assigned: dict[str, Any] = {}
    for param in spec.space.params:
        if spec.space.active(param, assigned):
            if param.values is not None:
                assigned[param.name] = param.values[0]
                continue
            assert param.low is not None, "a param without values is a range"
            assigned[param.name] = int(param.low) if param.is_int else param.low
    return spec.space.resolve(assigned)


def _kv(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={cell(v)}" for k, v in values.items())
