"""Commands that check and run sweeps: validate, plan, sweep, worker, run."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from msexp.cli.options import (
    ColdOpt,
    StorageOpt,
    StudyOpt,
    SweepFileArg,
    TrackingOpt,
    cold_spec,
    console,
    err_console,
)
from msexp.cli.plans import plan_document, plan_table
from msexp.cli.progress import LineProgress, SweepProgress
from msexp.cli.render import (
    finished_trials,
    missing_objectives,
    print_json,
    summary,
    trials_table,
)
from msexp.cli.scripts import check_command_experiment, preflight
from msexp.cli.studies import existing_study
from msexp.console import hints, interrupts
from msexp.errors import SpecError
from msexp.execution.protocol import TrialRequest
from msexp.execution.subscribers import Subscriber
from msexp.search.slots import run_in_slots
from msexp.spec import Method, SweepSpec, load_spec
from msexp.spec.checks import batch_statistics_warning
from msexp.spec.space import derived

if TYPE_CHECKING:  # the sweep's driver imports Optuna: not at start-up
    from msexp.search.driver import SweepOutcome

RerunOpt = Annotated[bool, typer.Option(
    "--retry-failed", help="Rerun the FAILED and TIMEOUT trials of the resumed study: "
                           "fresh copies (same params, from scratch), e.g. after fixing the "
                           "experiment.")]
RestartOpt = Annotated[bool, typer.Option(
    "--restart", help="After a changed sweep file: start the study's next version (NAME-v2, "
                      "NAME-v3, ...) and mark the old one superseded; later commands use the "
                      "newest version. Where the newest version is this file's, resume it.")]
FAIL_FAST_EXIT = 3  # the sweep stopped starting trials (budget.fail_fast)
CheckOpt = Annotated[bool, typer.Option(
    "--check", help="Also train one micro-batch of the first trial; for a command, run it "
                    "with --help (its flags must include every name the sweep passes) and, "
                    "where experiment.check gives a tiny budget ({epoch_size: 1}), once "
                    "for real: the objective must be among the metrics it records.")]


def validate(file: SweepFileArg, check: CheckOpt = False) -> None:
    """Check a sweep file without running anything.

    With --check, also train one micro-batch of its first trial, or run its command once.

    Example: msexp validate sweeps/accum.yaml
    """
    spec = load_spec(file)
    if check:
        _check(spec)
    console.print(f"{file}: ok ({spec.method.value}, {spec.n_trials()} trials)")


def _check(spec: SweepSpec) -> None:
    """Run a command experiment once with its check arguments, or one micro-batch of the
    first trial's workload; refuse the sweep, in one line, if that fails."""
    source = str(spec.path)
    if spec.command is None:
        _check_workload(spec)
        console.print(f"{source}: one micro-batch trains (forward, loss, backward)")
        return
    check_command_experiment(spec)


def _check_workload(spec: SweepSpec) -> None:
    from msexp.execution.local import build_workload  # lazy: MindSpore, only with --check
    from msexp.training.check import first_step_problem

    first = next(spec.space.iter_grid()) if spec.method is Method.grid else {}
    params = spec.space.resolve(first)
    ref = spec.experiment.ref
    try:
        workload = build_workload(TrialRequest(ref, params, data=spec.data_section()))
        problem = first_step_problem(workload, derived(params)["micro_batch"])
    except Exception as exc:
        problem = f"the first trial raised {type(exc).__name__}: {str(exc).splitlines()[0]}"
    if problem:
        raise SpecError(str(spec.path), "experiment", problem, ref)
    from msexp.training.batch_stats import (  # lazy: MindSpore
        batch_statistic_layers,
        random_mask_layers,
        seeded_dropout_layers,
    )

    network = workload.network
    warning = batch_statistics_warning(str(spec.path), len(batch_statistic_layers(network)),
                                       spec.space, len(random_mask_layers(network)),
                                       len(seeded_dropout_layers(network)))
    if warning:
        console.print(warning, highlight=False, soft_wrap=True)


def plan(file: SweepFileArg, check: CheckOpt = False,
         as_json: Annotated[bool, typer.Option(
             "--json", help="Print one JSON document instead of text, for scripts.")] = False,
         ) -> None:
    """List the trials a sweep would run, without running any.

    With --check, also train one micro-batch of its first trial, or run its command once.

    A grid's rows are numbered as its trials will be with one worker and no reruns
    (points that share compiled graphs run one after another). --json prints {"name",
    "method", "experiment", "trials", "fixed", "grid": [{"number", "grid_index",
    "params", "micro_batch", "effective_batch"}]}, or for a sampler "params": [{"name",
    "distribution", "when"}] instead of "grid". Each grid trial gets "fixed" and its row's
    "params": the experiment's DEFAULTS and knobs included.

    Without --check, plan neither imports a user's experiment nor probes this machine's
    device (see `validate`): it runs anywhere, a CPU login node included. It reads the
    experiment's DEFAULTS and PARAMS from its source; where that cannot say them for sure,
    it shows only the values the sweep file sets, and "note" says why.

    Example: msexp plan sweeps/accum.yaml --check
    """
    spec = load_spec(file, local=check)
    if check:
        _check(spec)
    document, shown = plan_document(spec)
    if as_json:
        print_json(document)
    else:
        plan_table(document, shown)


def sweep(
    file: SweepFileArg,
    tracking_uri: TrackingOpt = None,
    storage: StorageOpt = None,
    study: StudyOpt = None,
    workers: Annotated[Optional[int], typer.Option(
        "--workers", min=1, help="Trials run at once.", show_default="budget.workers")] = None,
    rerun: RerunOpt = False,
    restart: RestartOpt = False,
    cold: ColdOpt = False,
) -> None:
    """Run a sweep: each trial a MindSpore job, recorded in MLflow.

    Running the same command again resumes the study without re-running finished trials;
    a trial stopped midway continues from its last checkpoint. After a changed sweep file,
    --restart starts the study's next version.

    Before the first trial, a command's --help must list every name the sweep passes.
    The first budget.fail_fast (3) trials to fail with the same error, none completed,
    stop the sweep; the trials not started stay queued for the next run.

    Exit codes: 0 done; 1 every trial failed; 2 the sweep file, an option or the
    command's flags refused, nothing run; 3 stopped by budget.fail_fast; 130 / 143
    stopped by Ctrl-C / SIGTERM (run the same command again to resume).

    Ctrl-C stops the running trials at once (each resumes from its last checkpoint);
    a second Ctrl-C also stops waiting for MLflow.

    Example: msexp sweep sweeps/accum.yaml --workers 2
    """
    with _stops(file, study, storage):
        spec = preflight(cold_spec(load_spec(file), cold))
        outcome = _run(spec, workers or spec.budget.workers, SweepProgress(spec),
                       tracking_uri, storage, study, rerun, restart)
        with interrupts.held():  # a stop now still gets the whole table
            summary(outcome)
            where = _where(outcome, study, storage)
            report = hints.command("report", file, **where, tracking_uri=tracking_uri)
            best = hints.command("best", file, **where, tracking_uri=tracking_uri)
            console.print(f"plots, importances: {report}; best model: {best}", highlight=False)
            _finish(outcome, file, where)


def worker(
    file: SweepFileArg,
    storage: StorageOpt = None,
    tracking_uri: TrackingOpt = None,
    study: StudyOpt = None,
    workers: Annotated[Optional[int], typer.Option(
        "--workers", min=1, help="Trials this worker runs at once.",
        show_default="budget.workers")] = None,
    rerun: RerunOpt = False,
    restart: RestartOpt = False,
    cold: ColdOpt = False,
) -> None:
    """Join a sweep's study and run its trials until none are left.

    From another process or machine: every worker on the same storage shares one study,
    and no grid point runs twice.
    Output is one line per trial, for logs. It checks and stops as `msexp sweep` does,
    with the same exit codes.

    Example: msexp worker sweeps/accum.yaml --storage postgresql://msexp@db/msexp
    """
    with _stops(file, study, storage):
        spec = preflight(cold_spec(load_spec(file), cold))
        outcome = _run(spec, workers or spec.budget.workers, LineProgress(spec),
                       tracking_uri, storage, study, rerun, restart)
        with interrupts.held():  # a stop now still gets its lines
            if interrupts.received:  # stopped: where the study stands, as a sweep shows it
                trials_table(outcome.study)
            missing = missing_objectives(outcome.study)
            if missing:
                console.print(missing, markup=False, highlight=False)
            _finish(outcome, file, _where(outcome, study, storage))


@contextmanager
def _stops(file: Path, study: str | None, storage: str | None) -> Iterator[None]:
    """Act on stop signals from here on. A stop the sweep could not end by itself (while
    it starts and its stores open, a second Ctrl-C while MLflow opens) still ends with the
    study's trials table, the resume line and the stop's exit code (130, 143)."""
    try:
        with interrupts.acting():
            yield
    except typer.Exit:
        raise  # the sweep's own end, a stop's included
    except BaseException:
        if not interrupts.received:
            raise
        with interrupts.held():
            _stopped_table(file, study, storage)
            _resume_line()
        raise typer.Exit(128 + interrupts.received[0]) from None


def _stopped_table(file: Path, study: str | None, storage: str | None) -> None:
    """The trials table of a study stopped before its sweep could show it; a line where
    none has finished (or none exists: a stop before its store was made makes none)."""
    try:
        loaded = existing_study(file, study, storage)
    except Exception:  # never swept, or stopped while its store was being made
        console.print("no trial has finished yet", highlight=False)
        return
    if finished_trials(loaded):
        trials_table(loaded)
    else:
        console.print(f"{loaded.study_name}: no trial has finished yet", highlight=False)


def _resume_line() -> None:
    err_console.print(f"interrupted: {interrupts.RESUME} (stopped trials continue from "
                      "their last checkpoint)", highlight=False)


def _where(outcome: SweepOutcome, study: str | None, storage: str | None
           ) -> dict[str, str | None]:
    """The study and storage options a printed command needs: `--study` only where one was
    given (then the version that ran); without it, commands find the newest version."""
    return {"study": outcome.study.study_name if study else None, "storage": storage}


def _finish(outcome: SweepOutcome, file: Path, where: dict[str, str | None]) -> None:
    """How a sweep or worker ends: a line on failed trials; the exit code says whether it
    was stopped by a signal (128 + the signal: 130 Ctrl-C, 143 SIGTERM), by
    budget.fail_fast (3) or nothing worked (1)."""
    from msexp.search.claims import failed_trials  # lazy: as in _run

    if outcome.fail_fast:
        err_console.print(outcome.fail_fast, highlight=False, soft_wrap=True, markup=False)
    failed = failed_trials(outcome.study)
    if failed:
        rerun = hints.command("sweep", file, "--retry-failed", **where)
        err_console.print(f"{len(failed)} trial(s) failed or timed out; after fixing the "
                          f"experiment: {rerun}", highlight=False, soft_wrap=True)
    if interrupts.received:  # the sweep's stop, or one while its end was shown
        _resume_line()
        raise typer.Exit(128 + interrupts.received[0])
    if outcome.fail_fast:
        raise typer.Exit(FAIL_FAST_EXIT)
    ended = [t for t in outcome.study.get_trials(deepcopy=False) if t.state.is_finished()]
    if failed and not any(t.state.name in ("COMPLETE", "PRUNED") for t in ended):
        err_console.print("every trial failed", highlight=False)
        raise typer.Exit(1)


def _run(spec: SweepSpec, workers: int, progress: Subscriber, tracking_uri: str | None,
         storage: str | None, study: str | None, rerun: bool = False,
         restart: bool = False) -> SweepOutcome:
    """The body of the sweep and worker commands: `search.slots.run_in_slots` (which the
    Python API's `msexp.sweep` calls too), `progress` its one watcher, its warnings on
    stderr."""
    return run_in_slots(spec, workers, [progress], tracking_uri, storage, study, rerun,
                        restart, lambda line: err_console.print(line, highlight=False))
