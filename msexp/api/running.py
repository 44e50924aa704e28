"""`msexp.sweep`: run a sweep from Python on the engine of `msexp sweep`
(`search.slots.run_in_slots`), and get its results."""

from __future__ import annotations

import sys

from msexp.api.progress import Lines
from msexp.api.quiet import quiet
from msexp.api.results import SweepResults
from msexp.api.sources import Source, load
from msexp.search.slots import run_in_slots


def sweep(source: Source, *, storage: str | None = None, tracking_uri: str | None = None,
          study: str | None = None, workers: int | None = None, retry_failed: bool = False,
          restart: bool = False, progress: bool = True) -> SweepResults:
    """Run a sweep, or resume it, as `msexp sweep FILE` does, and return its results.

    Args:
        source: a sweep file's path, or a dict of its sections (`name`, `experiment`,
            `fixed`, `params`, ...), validated as the CLI validates a file.
        storage: the Optuna storage URL (`--storage`); default mlruns/optuna.journal.
        tracking_uri: the MLflow tracking URI (`--tracking-uri`); default
            sqlite:///mlruns/mlflow.db.
        study: the study's name (`--study`); default the newest version of the sweep's.
        workers: trials run at once; default `budget.workers`.
        retry_failed: rerun the FAILED and TIMEOUT trials (`--retry-failed`).
        restart: after a changed sweep, start the study's next version (`--restart`).
        progress: print a line per trial (a notebook's cell shows them as they come).

    Returns:
        The study's results, every trial of it (those of earlier runs included).

    Raises:
        SpecError: the sweep breaks a rule: the CLI's one line, `FILE: key.path: rule, got
            VALUE` (FILE is `<dict>` for a dict); nothing ran.
        MsexpError: a store cannot be opened, or the study was made from another sweep.
        KeyboardInterrupt: the sweep was stopped (a notebook's stop button, Ctrl-C): its
            running trials went back to the queue, and the same call resumes it.
    """
    with quiet():
        spec = load(source)
        outcome = run_in_slots(spec, workers or spec.budget.workers, [Lines(spec, progress)],
                               tracking_uri, storage, study, retry_failed, restart,
                               lambda line: print(line, file=sys.stderr))
    if outcome.interrupted:
        raise KeyboardInterrupt(f"{spec.name}: stopped; run the same call again to resume "
                                "(stopped trials continue from their last checkpoint)")
    if outcome.fail_fast:
        print(outcome.fail_fast, file=sys.stderr)
    return SweepResults(outcome.study, spec, source, tracking_uri, storage)
