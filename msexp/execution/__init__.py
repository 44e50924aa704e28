"""Running trials: the trial protocol, hosts and their trial children, slots and msrun trials.

What the search side sees of a trial is re-exported here: the events it reports, its
result, and the subscribers that watch it."""

from msexp.execution.protocol import Epoch
from msexp.execution.result import Status, TrialResult
from msexp.execution.subscribers import CONTINUE, PRUNE, Decision, Recorder, Subscriber, TrialInfo

__all__ = ["CONTINUE", "PRUNE", "Decision", "Epoch", "Recorder", "Status", "Subscriber",
           "TrialInfo", "TrialResult"]
