"""Processes that outlive the command that started them (the MLflow server, the gRPC
proxy), recorded in a pid file with what identifies them, so a later command stops that
process and its group, never one that got its pid since."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path

import psutil

from msexp.execution.process_tree import alive, descendants, group_members, kill_processes


def record_process(pid_file: Path, pid: int) -> None:
    """Write what `pid` is now (its start time and command line) into `pid_file`, so a
    later `down` signals only that process, never one that got its pid since."""
    proc = psutil.Process(pid)
    pid_file.write_text(json.dumps({"pid": pid, "create_time": proc.create_time(),
                                    "cmdline": proc.cmdline()}) + "\n")


def recorded_process(pid_file: Path) -> psutil.Process | None:
    """The process `pid_file` records, if it still runs and is that process (same start
    time and command line); None for a gone process, a reused pid or a file not ours."""
    try:
        record = json.loads(pid_file.read_text())
        proc = psutil.Process(int(record["pid"]))
        same = (proc.create_time() == record["create_time"]
                and proc.cmdline() == record["cmdline"])
    except (OSError, ValueError, TypeError, KeyError, psutil.Error):
        return None
    return proc if same else None


def stop_group(server: psutil.Process, grace_s: float = 15.0) -> bool:
    """SIGTERM the process group `server` leads, wait for it to exit, then SIGKILL what is
    left of it, of the processes it had started, and of its group (MLflow's job runner
    starts its consumers late, even once signalled); False if it was not running."""
    if not alive(server):
        return False
    family = [server, *descendants(server.pid)]
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(server.pid, signal.SIGTERM)
    with contextlib.suppress(psutil.NoSuchProcess, psutil.TimeoutExpired):
        server.wait(grace_s)
    kill_processes(family)  # psutil refuses a pid reused since
    for _ in range(3):  # a member killed as it forks may leave a child
        if not (late := group_members(server)):
            break
        kill_processes(late)
    return True
