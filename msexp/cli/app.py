"""The `msexp` command line: one Typer app, one error boundary, commands in their groups.

Each command only parses its options and calls the core. Errors a user can act on are
`MsexpError`s: the boundary prints them as one line and exits with their code (2 for a
sweep file that breaks a rule). `--debug` shows the traceback instead.
"""

from __future__ import annotations

import errno
import gc
import importlib.metadata
import logging
import os
import sys
import traceback
from typing import Annotated, Any, Callable

import typer

from msexp.cli import cluster, reports, run, scaffold, scripts, studies, sweeps, tune, ui
from msexp.cli.options import debug_command, err_console, state
from msexp.cli.usage import CONTEXT, Command, Group
from msexp.console import hints, interrupts
from msexp.console.own_log import LogFile, show_own_lines
from msexp.errors import MsexpError
from msexp.execution.exits import space_note
from msexp.paths import STORE_DIR
from msexp.secrets import files as private
from msexp.secrets.redaction import redact, redact_logs

EXIT_CODES = """\b
Exit codes:
0    done
1    trials failed, or an error stopped the command
2    input or usage refused, nothing run
3    stopped early: budget.fail_fast (sweep, worker); no pick (tune)
130  interrupted by Ctrl-C (143: SIGTERM); run it again to resume"""


class OneLineErrors(Group):
    """Runs a command; an MsexpError (or any other error) becomes one line on stderr.

    Usage errors (a missing argument, an unknown option or command, a bad value) pass to
    Typer, which shows the usage line and exits 2, as click does; a closed pipe too, which
    ends quietly."""

    def main(self, args: Any = None, *rest: Any, **kwargs: Any) -> Any:
        state["argv"] = list(args) if args is not None else sys.argv[1:]
        return super().main(args, *rest, **kwargs)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, typer.TyperException, KeyboardInterrupt):
            raise
        except Exception as exc:
            if interrupts.received:  # stopped: whatever a library made of the signal
                raise typer.Exit(128 + interrupts.received[0]) from None
            if isinstance(exc, OSError) and exc.errno == errno.EPIPE:
                raise  # `msexp ... | head`: Typer ends quietly, as click does
            raise _exit(exc) from None


def _exit(exc: Exception) -> typer.Exit:
    """The one line of an error, or with --debug its traceback, and its exit code."""
    if isinstance(exc, MsexpError):
        message, code = hints.message(exc), exc.exit_code
    else:  # a bug, or an environment msexp did not foresee
        text = " ".join(str(exc).split())[:300]
        message, code = (f"msexp: {type(exc).__name__}: {text}{space_note(STORE_DIR)} "
                         f"(the traceback: {debug_command()})"), 1
    if state["debug"]:
        message = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    err_console.print(redact(message), markup=False, highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _typer(help: str, completion: bool = False) -> typer.Typer:
    """A command group: help without arguments, `-h`, one error boundary; `completion`:
    `--install-completion` and `--show-completion` (the root only)."""
    return typer.Typer(help=help, cls=OneLineErrors, no_args_is_help=True,
                       context_settings=CONTEXT, add_completion=completion,
                       pretty_exceptions_enable=False)


def _command(group: typer.Typer, name: str | None = None) -> Callable[[Any], Any]:
    """Register a command with click's conventions on its page (`usage.Command`)."""
    return group.command(name, cls=Command)


app = _typer("Sweep MindSpore training techniques and compare every trial in MLflow.\n\n"
             "Example: msexp sweep sweeps/accum.yaml\n\n" + EXIT_CODES, completion=True)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"msexp {importlib.metadata.version('msexp')}")
        raise typer.Exit()


@app.callback()
def main(debug: Annotated[bool, typer.Option(
             "--debug", help="Show the traceback of an error instead of its one line.")] = False,
         version: Annotated[bool, typer.Option(
             "--version", callback=_version, is_eager=True, expose_value=False,
             help="Show msexp's version and exit.")] = False) -> None:
    """Sweep MindSpore training techniques and compare every trial in MLflow."""
    state["debug"] = debug
    redact_logs()
    route_logs()
    private.remove_orphans()  # what a process killed with kill -9 left holding secrets


def route_logs() -> None:
    """Every log record and Python warning goes to mlruns/msexp.log; only msexp's own
    warnings also reach stderr. Libraries (MLflow, alembic, Optuna) never print to the
    console, so msexp's output is only msexp's."""
    os.environ["MLFLOW_CONFIGURE_LOGGING"] = "false"  # else MLflow's import adds a stderr handler
    logging.captureWarnings(True)
    root = logging.getLogger()
    root.handlers = [h for h in root.handlers if not isinstance(h, LogFile)] + [LogFile()]
    root.setLevel(logging.WARNING)
    library = logging.getLogger("mlflow")  # its stderr handler, if imported before this
    library.handlers, library.propagate = [], True
    library.setLevel(logging.INFO)
    show_own_lines()


for command in (sweeps.validate, sweeps.plan, sweeps.sweep, sweeps.worker, reports.report,
                studies.status, studies.best, studies.sync, scaffold.knobs, scaffold.schema,
                scripts.metrics):
    _command(app)(command)
_command(app, "run")(run.run_one)
_command(app, "tune")(tune.tune_command)
_command(app, "ui")(ui.ui)

services_app = _typer("A local PostgreSQL and MLflow server for trying shared studies.")
_command(services_app, "up")(cluster.services_up)
_command(services_app, "down")(cluster.services_down)
_command(services_app, "proxy")(cluster.services_proxy)
app.add_typer(services_app, name="services")

schedule_app = _typer("Schedule workers of a sweep on Slurm, cron or Kubernetes.\n\n"
                      "They run against shared stores: each scheduled process runs `msexp "
                      "worker` (cron: `msexp sweep`) against the shared storage and tracking "
                      "server. Passwords stay in the environment or a Secret.")
_command(schedule_app, "slurm")(cluster.slurm)
_command(schedule_app, "cron")(cluster.cron)
_command(schedule_app, "k8s-cronjob")(cluster.k8s_cronjob)
_command(schedule_app, "k8s-job")(cluster.k8s_job)
app.add_typer(schedule_app, name="schedule")

new_app = _typer("Write a new experiment or sweep file that works as written.")
_command(new_app, "experiment")(scaffold.new_experiment)
_command(new_app, "sweep")(scaffold.new_sweep)
app.add_typer(new_app, name="new")


def console_main() -> None:
    """The `msexp` console script."""
    try:
        app(prog_name="msexp")
    finally:
        gc.freeze()  # exit without collecting every object MLflow made (~0.7 s)
