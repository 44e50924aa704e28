"""Only processes msexp started: `msexp services down` signals the MLflow server its pid
file records, never a process that has that pid (or any other) now. An old pid file (a
bare pid) is trusted only for this folder's own MLflow server; any other is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from msexp.cluster import pid_files, services
from msexp.execution.process_tree import alive, descendants
from tests.conftest import msexp_cmd
from tests.fault.conftest import DEADLINE_S, MlflowServer, wait_for


def group_leader() -> subprocess.Popen:
    """A process group leader with a child of its own, as the MLflow server is."""
    leader = subprocess.Popen(["sh", "-c", "sleep 1000 & wait"], start_new_session=True)
    wait_for("the leader's child starts", lambda: bool(descendants(leader.pid)), leader)
    return leader


def down() -> subprocess.CompletedProcess:
    return subprocess.run(msexp_cmd("services", "down"), capture_output=True, text=True,
                          timeout=DEADLINE_S)


def test_a_strangers_pid_in_an_old_pid_file_is_refused_unsignalled(workdir: Path) -> None:
    """An old pid file (a bare pid, as in issue 25) naming a process that is not this
    folder's MLflow server: one line, nothing signalled, the file kept for the user."""
    stranger = group_leader()
    try:
        pid_file = Path("mlruns/services/mlflow.pid")
        pid_file.parent.mkdir(parents=True)
        pid_file.write_text(f"{stranger.pid}\n")
        done = down()
        assert (done.returncode, done.stdout) == (1, ""), done.stderr
        assert done.stderr == (
            f"{pid_file.resolve()} (an old pid file) names pid {stranger.pid}, which "
            f"is not the MLflow server of {pid_file.parent.resolve()}; nothing was stopped: "
            "stop that server yourself and remove the file\n")
        assert stranger.poll() is None and all(
            alive(p) for p in psutil.Process(stranger.pid).children(recursive=True))
        assert pid_file.exists()
    finally:
        os.killpg(stranger.pid, 9)
        stranger.wait()


def test_an_old_pid_file_of_a_pid_now_gone_stops_nothing(workdir: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    pid_file = Path("mlruns/services/mlflow.pid")
    pid_file.parent.mkdir(parents=True)
    pid_file.write_text(str(gone.pid))
    done = down()
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "stopped: nothing was running"
    assert not pid_file.exists()


@pytest.mark.slow
def test_our_server_named_by_an_old_pid_file_is_stopped(workdir: Path) -> None:
    """A real MLflow server started as `services up` starts it, recorded the old way."""
    root = Path("mlruns/services").resolve()
    root.mkdir(parents=True)
    server = MlflowServer(root)
    server.start()
    assert server.proc is not None
    family = [psutil.Process(server.proc.pid), *descendants(server.proc.pid)]
    (root / "mlflow.pid").write_text(f"{server.proc.pid}\n")
    done = down()
    assert done.stdout.strip() == "stopped: mlflow server", done.stdout + done.stderr
    server.proc.wait(timeout=DEADLINE_S)
    assert not any(alive(p) for p in family) and not (root / "mlflow.pid").exists()


def test_a_pid_reused_by_another_process_is_never_signalled(workdir: Path) -> None:
    """The record names the pid of a process that started at another time, or with another
    command line: that pid is someone else's now."""
    stranger = group_leader()
    try:
        pid_file = Path("mlruns/services/mlflow.pid")
        pid_file.parent.mkdir(parents=True)
        pid_files.record_process(pid_file, stranger.pid)
        record = json.loads(pid_file.read_text())
        for changed in ({"create_time": record["create_time"] - 5},
                        {"cmdline": [*record["cmdline"][:-1], "other"]}):
            pid_file.write_text(json.dumps({**record, **changed}))
            assert services.down(pid_file.parent) == []
            assert stranger.poll() is None and not pid_file.exists()
    finally:
        os.killpg(stranger.pid, 9)
        stranger.wait()


@pytest.mark.slow  # over 5 s: the fast tier stays quick
def test_the_recorded_server_and_what_it_started_are_stopped(workdir: Path) -> None:
    server = group_leader()
    pid_file = Path("mlruns/services/mlflow.pid")
    pid_file.parent.mkdir(parents=True)
    pid_files.record_process(pid_file, server.pid)
    family = [psutil.Process(server.pid), *psutil.Process(server.pid).children(recursive=True)]
    done = down()
    assert done.stdout.strip() == "stopped: mlflow server", done.stdout + done.stderr
    server.wait(timeout=DEADLINE_S)
    assert not any(alive(p) for p in family) and not pid_file.exists()


LATE_HELPER = """
import signal, subprocess, sys, time
def stop(*_):
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)"])
    print("started", flush=True)
    time.sleep(0.5)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
time.sleep(1000)
"""


@pytest.mark.slow  # over 5 s: the fast tier stays quick
def test_a_helper_the_server_starts_once_signalled_is_stopped_too(workdir: Path) -> None:
    """As MLflow's job runner starts its consumers: after `down` listed the server's tree
    and signalled its group. The helper stays in the group, with no parent once the server
    exits. # mutation: without `group_members` in `stop_group` the helper is left."""
    server = subprocess.Popen([sys.executable, "-c", LATE_HELPER], start_new_session=True,
                              stdout=subprocess.PIPE, text=True)
    assert server.stdout.readline() == "ready\n"
    pid_file = Path("mlruns/services/mlflow.pid")
    pid_file.parent.mkdir(parents=True)
    pid_files.record_process(pid_file, server.pid)
    done = down()
    assert done.stdout.strip() == "stopped: mlflow server", done.stdout + done.stderr
    assert server.stdout.readline() == "started\n"
    server.wait(timeout=DEADLINE_S)
    left = [p for p in psutil.process_iter() if p.pid != os.getpid() and alive(p)
            and _group(p) == server.pid]
    assert not left, [p.cmdline() for p in left]


def _group(proc: psutil.Process) -> int | None:
    try:
        return os.getpgid(proc.pid)
    except OSError:
        return None
