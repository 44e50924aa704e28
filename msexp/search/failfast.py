"""A sweep that fails fast (Katib's `maxFailedTrialCount`, Ray Tune's `fail_fast`): a
trial is stopped at the first epoch that shows it will not report its objective, and
the sweep starts no more trials once its first ones failed alike.

"Alike" is the same cause: the error's line that says what went wrong (its exception's
own line, `process.error_line`) with its numbers, paths and quoted names taken out, so
`trial-0003`'s and `trial-0007`'s missing data compare equal. Only the trials this sweep
ran count, and one that completed (or was pruned: it ran) turns the stop off for the rest
of the sweep. An objective absent from a trial that ran to its end (or stopped at an
epoch that showed it would not report it) stops the sweep at once: the next trials run
the same code, which does not report it.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from dataclasses import dataclass

from msexp.execution import CONTINUE, Decision, Epoch, Status, Subscriber, TrialInfo, TrialResult
from msexp.execution.output import error_line
from msexp.search.unreported import unreported_at
from msexp.spec import SweepSpec

_PATH = re.compile(r"(?:[A-Za-z]:)?[\w.~\-]*(?:[/\\][\w.~\-]+)+[/\\]?")
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
_NUMBER = re.compile(r"\b0x[0-9a-fA-F]+\b|[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def failure_cause(error: str) -> str:
    """The error's line (`error_line`), its numbers, paths and quoted names replaced, so
    identical failures of different trials compare equal."""
    last = _QUOTED.sub("'…'", error_line(error) or "(no error message)")
    last = _PATH.sub("<path>", last)
    return " ".join(_NUMBER.sub("N", last).split())


@dataclass(frozen=True)
class Stopped:
    """Why a sweep started no more trials: `count` trials failed with `cause` (the first
    one's error: `example`) and none completed; `absent`: for an objective it did not
    report, so after the first."""

    cause: str
    example: str
    count: int
    absent: bool = False


class FailFast(Subscriber):
    """Decides to stop a trial whose epoch shows it will not report its objective (see
    `unreported`), and counts this sweep's failures by cause; once `budget.fail_fast` of
    them share one and none completed, it decides that the sweep starts no more trials
    (`stopped` says why)."""

    def __init__(self, spec: SweepSpec):
        self.after = spec.budget.fail_fast
        self.objectives = [o.metric for o in spec.objectives]
        self.stopped: Stopped | None = None
        self._unreported: dict[int, str] = {}  # trial number: why it is stopped, until it ends
        self._causes: Counter[str] = Counter()
        self._examples: dict[str, str] = {}
        self._completed = False
        self._lock = threading.Lock()  # trials end in the slots' threads

    def on_trial_epoch(self, trial: TrialInfo, epoch: Epoch) -> Decision:
        """Stop the trial, failing it with why, once an epoch showed that it will not
        report its objective."""
        if self.after and trial.number not in self._unreported:
            problem = unreported_at(self.objectives, epoch)
            if problem:
                self._unreported[trial.number] = problem
        why = self._unreported.get(trial.number)
        return CONTINUE if why is None else Decision(stop=True, reason=why)

    def on_trial_dropped(self, trial: TrialInfo) -> None:
        self._unreported.pop(trial.number, None)

    def on_trial_end(self, trial: TrialInfo, result: TrialResult) -> Decision | None:
        """The sweep's stop once its first trials failed alike (see `line`), or None."""
        with self._lock:
            if result.status in (Status.COMPLETE, Status.PRUNED):
                self._completed = True
            absent = self._objective_absent(trial, result)
            if self._completed or not self.after or self.stopped is not None:
                return None
            cause = failure_cause(result.error)
            self._causes[cause] += 1
            self._examples.setdefault(cause, error_line(result.error) or cause)
            if not absent and self._causes[cause] < self.after:
                return None
            self.stopped = Stopped(cause, self._examples[cause], self._causes[cause], absent)
            return Decision(stop=True, reason=self._why(self.stopped),
                            rule=f"budget.fail_fast: {self.after}")

    def _objective_absent(self, trial: TrialInfo, result: TrialResult) -> bool:
        """Whether the trial failed only for an objective it did not report: it ran to its
        end (its final metrics came) without one, or was stopped at an epoch for it."""
        stopped_for_it = self._unreported.pop(trial.number, None) is not None
        if result.status is not Status.FAILED:
            return False
        reported = {**result.last_epoch_metrics(), **result.metrics}
        return stopped_for_it or (bool(result.metrics) and
                                  any(o not in reported for o in self.objectives))

    @staticmethod
    def _why(stopped: Stopped) -> str:
        """Why the sweep stopped, the start of its line (`Decision.line`)."""
        failed = ("a trial ran without reporting its objective, which the other trials run "
                  "the same code to miss," if stopped.absent else
                  "a trial failed" if stopped.count == 1 else
                  f"{stopped.count} trials failed with the same error")
        return f"fail fast: {failed} and none completed ({stopped.example[:300]})"
