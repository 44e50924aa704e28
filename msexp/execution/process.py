"""Process chores shared by trial processes and launchers: exit reasons, logs, kills, ports."""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import shutil
import signal
import socket
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import psutil

from msexp.keys import TrialEnv
from msexp.paths import TRIALS_DIR

REAP_S = 5.0
LOW_SPACE_BYTES = 1 << 20  # a process that failed with less free space likely ran out of it


def exit_reason(code: int, who: str = "trial process", folder: Path | None = TRIALS_DIR
                ) -> str:
    """How a process ended, from its return code (negative: the signal), and whether the
    disk of `folder` (where trials write) is full."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"{who} was killed by {name}" + space_note(folder)
    return f"{who} exited with code {code}" + (space_note(folder) if code else "")


def space_note(folder: Path | None) -> str:
    """"; no space left on the device of FOLDER ..." if that disk is (nearly) full, else ""."""
    if folder is None:
        return ""
    where = folder.resolve()
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        free = shutil.disk_usage(where).free
    except OSError:
        return ""
    if free >= LOW_SPACE_BYTES:
        return ""
    return f"; no space left on the device of {folder.resolve()} ({free} bytes free)"


def tail(path: Path, lines: int) -> str:
    """The last `lines` lines of a log file, or "(no log)"."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def die_with_parent() -> None:
    """In a child: get SIGKILL when the parent dies, even by kill -9 (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def wait_exit(pid: int, timeout: float) -> None:
    """Wait up to `timeout`, returning the moment the child `pid` exits (Linux's pidfd): a
    plain sleep costs every trial half a poll on average after its command ends."""
    try:
        handle = os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfd here, or the child is reaped already
        time.sleep(timeout)
        return
    try:
        select.select([handle], [], [], timeout)
    finally:
        os.close(handle)


@contextlib.contextmanager
def subreaper() -> Iterator[bool]:
    """Adopt this process's orphaned descendants (Linux PR_SET_CHILD_SUBREAPER) while in
    the block: a helper that left its session with `setsid` and cleared its environment
    stays a descendant, so `kill_leftovers` finds it. Yields False where the platform does
    not allow it. The flag is put back after: a process that stayed a subreaper would
    adopt every daemon it starts later (a database server), and a later `kill_leftovers`
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


def kill_leftovers(kept: Iterable[psutil.Process] = (), wait_s: float = REAP_S,
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


def owner() -> str:
    """This process, as written in the trials it runs and in its trial processes' marker:
    host:pid."""
    return f"{socket.gethostname()}:{os.getpid()}"


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
    procs = [p for p in procs if p.pid != os.getpid()]
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    deadline = time.monotonic() + wait_s
    while procs and time.monotonic() < deadline:
        procs = [p for p in procs if alive(p)]
        if procs:
            time.sleep(0.01)


def alive(proc: psutil.Process) -> bool:
    """Whether a process still runs: not gone, not a zombie, and not a reused pid."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def msrun_argv(devices: int, log_dir: Path, task: list[str], path: str,
               tail_rank: int | None = None) -> list[str]:
    """msrun starting `task` (a script and its arguments) as `devices` local ranks, logging
    into `log_dir`; with `tail_rank`, that rank's output also goes to msrun's stdout."""
    found = shutil.which("msrun", path=path)
    launcher = [found] if found else [sys.executable, "-m", "mindspore.parallel.cluster.run"]
    tail = devices if tail_rank is None else tail_rank  # a rank that does not exist: none
    return [*launcher, f"--worker_num={devices}", f"--local_worker_num={devices}",
            "--master_addr=127.0.0.1", f"--master_port={free_port()}", f"--log_dir={log_dir}",
            "--join=True", f"--tail_worker_log={tail}", *task]
