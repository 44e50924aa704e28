"""`msexp run`: one trial in the foreground, for debugging; nothing is recorded."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
import yaml

from msexp.cli.options import console, debug_command, err_console, state
from msexp.cli.render import kv
from msexp.errors import SpecError
from msexp.execution.protocol import Command, Start, TrialRequest
from msexp.experiment import is_script, load_experiment
from msexp.spec import trial_params
from msexp.training.records import Epoch


def run_one(
    experiment: Annotated[str, typer.Argument(
        help="Built-in name, package.module[:build] or path/to/file.py[:build].",
        show_default=False)],
    set_: Annotated[Optional[list[str]], typer.Option(
        "--set", "-s", help="A knob value, key=value (repeatable).")] = None,
    from_checkpoint: Annotated[Optional[Path], typer.Option(
        "--from-checkpoint", help="Start from this checkpoint (e.g. `msexp best --export`'s "
                                  "model.ckpt): --set epochs=0 evaluates it, epochs=N "
                                  "trains it N more epochs.")] = None,
) -> None:
    """Run one trial in the foreground, for debugging; nothing recorded.

    A script (a .py file that defines no `build`) runs as `python FILE --key=value ...`,
    in a temporary folder, as a command trial does: its own argv, not msexp's.

    Example: msexp run mlp_digits --set micro_size=4 --set epochs=2
    """
    fixed: dict[str, Any] = {}
    for item in set_ or []:
        key, sep, text = item.partition("=")
        if not sep:
            raise SpecError("--set", key, "must be knob=value", item)  # "key=v": redacted
        fixed[key.strip()] = yaml.safe_load(text)
    with tempfile.TemporaryDirectory(prefix="msexp-run-") as scratch:
        _run_trial(_foreground_request(experiment, fixed, from_checkpoint, Path(scratch)))


def _foreground_request(experiment: str, fixed: dict[str, Any], from_checkpoint: Path | None,
                        scratch: Path) -> TrialRequest:
    """The trial `msexp run` runs: an experiment's, or a script's in `scratch`."""
    if is_script(experiment):
        if from_checkpoint:
            raise SpecError("--from-checkpoint", "", "needs an experiment with build(); "
                            f"{experiment} is a script", str(from_checkpoint))
        console.print(f"[bold]python {experiment}[/]: {kv(fixed)}")
        command = Command(["python", str(Path(experiment).resolve())], str(Path.cwd()))
        return TrialRequest(f"python {experiment}", fixed, scratch / "trial", command=command)
    load_experiment(experiment, "msexp run")  # its error names the argument, not --set
    params = trial_params(experiment, fixed)
    console.print(f"[bold]{experiment}[/]: {kv(params)}")
    init = str(from_checkpoint.resolve()) if from_checkpoint else None
    if init and not Path(init).is_file():
        raise SpecError("--from-checkpoint", "", "file not found", str(from_checkpoint))
    return TrialRequest(experiment, params, init_from=init)


def _run_trial(request: TrialRequest) -> None:
    from msexp.execution.host.running import run  # lazy: the trial imports MindSpore

    def show(event: Any) -> None:
        if isinstance(event, Epoch):
            console.print(f"epoch {event.epoch}: {kv(event.metrics)}")
        elif isinstance(event, Start):
            console.print(f"{'command' if request.command else 'data'}: {event.data_source}")

    try:
        metrics = run(request, show)
    except Exception as exc:
        if state["debug"]:
            raise
        err_console.print(f"trial failed: {type(exc).__name__}: {exc} (the traceback: "
                          f"{debug_command()})", markup=False, highlight=False,
                          soft_wrap=True)
        raise typer.Exit(1) from None
    console.print(kv(metrics))
