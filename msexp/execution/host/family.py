"""The processes of a host's trials: noted while a trial runs, so that what a finished
trial leaves behind is killed (`setsid` daemons included) and everything goes with the
host; the children that ran its last `warm` trials stay, warm."""

from __future__ import annotations

import contextlib

import psutil

from msexp.execution.process_tree import descendants, kill_processes, marked


class Family:
    """What a host's trials started: found in the host's tree (a subreaper adopts its
    trials' orphans) or, where it does not adopt them, by the host's marker."""

    def __init__(self, marker: str, warm: int):
        self.marker, self.warm = marker, warm
        self._kept: list[int] = []  # the last `warm` trial children, which may be kept warm
        self._noted: dict[int, psutil.Process] = {}

    def note(self, pid: int) -> None:
        """Remember the descendants of `pid` (the host) now: one that leaves the host's
        session and clears its environment is still killed with the trial."""
        for child in descendants(pid):
            self._noted.setdefault(child.pid, child)

    def kill_all_but_warm(self, host: int | None, adopts: bool, trial_pid: int) -> None:
        """Kill what the finished trial started, but not the host, nor the child that
        ran the trial, nor the host's children that ran the `warm` - 1 trials before: all
        stay warm for the next trials.

        A host that adopts its trials' orphans has all of them in its tree; otherwise a
        double-forked helper has left it, and only its marker finds it: a look at every
        process on the machine.
        """
        now = descendants(host) if host and adopts else marked(self.marker)
        found = {p.pid: p for p in [*self._noted.values(), *now]}
        found.pop(host, None)
        found.pop(trial_pid, None)
        earlier = [p for p in self._kept if p != trial_pid]
        earlier = earlier[max(0, len(earlier) - (self.warm - 1)):] if self.warm > 1 else []
        self._kept = [*earlier, trial_pid]
        for pid in earlier:
            with contextlib.suppress(psutil.Error, KeyError):
                if found[pid].ppid() == host:
                    del found[pid]
        self._noted.clear()
        kill_processes(found.values())

    def kill_all(self) -> None:
        """Kill every process noted and every process carrying the marker (the host is
        gone or going: nothing stays warm)."""
        noted, self._noted, self._kept = list(self._noted.values()), {}, []
        kill_processes([*noted, *marked(self.marker)])
