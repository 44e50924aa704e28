"""A trial's whole tree of processes: its descendants, found in the kernel's lists or by
the trial marker they inherit (`setsid` ones included), the orphans a subreaper adopts, and
their kills."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from collections.abc import Iterable, Iterator

import psutil

from msexp.keys import TrialEnv
from msexp.os_tools.waiting import wait_until

REAP_S = 5.0


def die_with_parent() -> None:
    """In a child: get SIGKILL when the parent dies, even by kill -9 (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@contextlib.contextmanager
def subreaper() -> Iterator[bool]:
    """Adopt this process's orphaned descendants (Linux PR_SET_CHILD_SUBREAPER) while in
    the block: a helper that left its session with `setsid` and cleared its environment
    stays a descendant, so `kill_descendants` finds it. Yields False where the platform does
    not allow it. The flag is put back after: a process that stayed a subreaper would
    adopt every daemon it starts later (a database server), and a later `kill_descendants`
    would kill that daemon's workers."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        yield False
        return
    before = ctypes.c_int(0)
    libc.prctl(37, ctypes.byref(before), 0, 0, 0)  # PR_GET_CHILD_SUBREAPER
    try:
        yield libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    finally:
        libc.prctl(36, before.value, 0, 0, 0)


def kill_descendants(kept: Iterable[psutil.Process] = (), wait_s: float = REAP_S,
                     adopts: bool = False) -> None:
    """Kill what a finished trial left: every descendant of this process but those in
    `kept` (orphans it adopted as a subreaper included), and reap them. Where this process
    does not adopt its orphans (`adopts`: it is a subreaper), a helper that left the tree
    is found by its marker first: a look at every process on the machine."""
    if not adopts:
        kill_processes(strays(), wait_s)
    kept = set(kept)
    for _ in range(3):  # a killed stray's own orphans are adopted only once it is gone
        left = [p for p in descendants(os.getpid()) if p not in kept and alive(p)]
        kill_processes(left, wait_s)
        for proc in left:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(proc.pid, os.WNOHANG)  # an adopted zombie is ours to reap
        if not left:
            return


def kill_group(pid: int) -> None:
    """SIGKILL the process group led by `pid`, if it is still there."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def marked(prefix: str) -> list[psutil.Process]:
    """The processes of this host whose trial marker (`TrialEnv.MARKER`, inherited by every
    descendant, `setsid` ones included) is `prefix` or starts with `prefix/`."""
    found = []
    for proc in psutil.process_iter():
        try:
            value = proc.environ().get(TrialEnv.MARKER, "")
        except psutil.Error:  # gone, a zombie, or not ours to read
            continue
        if value == prefix or value.startswith(prefix + "/"):
            found.append(proc)
    return found


def kill_marked(name: str) -> None:
    """Kill every process of this host whose trial marker is `name`'s (see `marked`): what
    the trials of a gone process `name` (host:pid) left running."""
    kill_processes(marked(name))


def strays() -> list[psutil.Process]:
    """The processes carrying this process's trial marker that are neither this process
    nor one of its ancestors: what the trial started and left running."""
    value = os.environ.get(TrialEnv.MARKER)
    if not value:
        return []
    lineage = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    return [p for p in marked(value) if p.pid not in lineage]


def descendants(pid: int) -> list[psutil.Process]:
    """The processes `pid` started, and theirs, as they are now ([] if it is gone)."""
    found = []
    try:
        for child in _children_tree(pid):
            with contextlib.suppress(psutil.Error):
                found.append(psutil.Process(child))
        return found
    except OSError:  # no /proc/PID/task/TID/children: read every process's parent
        pass
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def group_members(leader: psutil.Process) -> list[psutil.Process]:
    """The live processes of the group `leader` leads (or led), started since it was: also
    those forked after it was signalled, never a group that got its id since."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(proc.pid) == leader.pid and proc.create_time() >= \
                    leader.create_time() and alive(proc):
                found.append(proc)
    return found


def _children_tree(pid: int) -> list[int]:
    """The pids under `pid`, from the kernel's list of each thread's children: the cost
    grows with the tree, not with every process on the machine.

    Raises:
        OSError: the kernel keeps no such list (CONFIG_PROC_CHILDREN).
    """
    if not os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children"):
        raise FileNotFoundError("no /proc/PID/task/TID/children")
    found, todo = [], [pid]
    while todo:
        for child in _children(todo.pop()):
            found.append(child)
            todo.append(child)
    return found


def _children(pid: int) -> list[int]:
    pids: list[int] = []
    with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # gone meanwhile
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(FileNotFoundError, ProcessLookupError), \
                    open(f"/proc/{pid}/task/{task}/children") as listed:
                pids += [int(word) for word in listed.read().split()]
    return pids


def reap_adopted(kept: Iterable[int] = ()) -> None:
    """Reap this process's children that have exited, but those in `kept` (pids whose
    exit the caller waits for itself): orphans it adopted as a subreaper."""
    kept = set(kept)
    for pid in _children(os.getpid()):
        if pid not in kept:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)


def kill_processes(procs: Iterable[psutil.Process], wait_s: float = REAP_S) -> None:
    """SIGKILL each process still alive (psutil refuses a reused pid), then wait until they
    are gone or zombies, for at most `wait_s`."""
    left = [p for p in procs if p.pid != os.getpid()]
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.kill()

    def gone() -> bool:
        left[:] = [p for p in left if alive(p)]
        return not left

    wait_until(gone, wait_s, 0.01)


def alive(proc: psutil.Process) -> bool:
    """Whether a process still runs: not gone, not a zombie, and not a reused pid."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
