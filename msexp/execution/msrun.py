"""Data-parallel trials: `devices: N` runs one trial as N processes through MindSpore's msrun.

The trial process calls `launch`: it starts `msrun` with this file as the task script and
one log folder per trial (`<log stem>.ranks/` next to the trial's log, holding msrun.log,
scheduler.log, worker_<rank>.log and rank-<rank>.json), watches the ranks, and fails the
trial with the dead rank's log tail as soon as one of them dies. Each rank (`main`) joins
the cluster, builds the workload with the trial's seed (the same weights on every rank),
trains on its shard of every global batch and averages the accumulated gradients once
per update; rank 0 alone writes the trial's events.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import mindspore as ms
import psutil
from mindspore.communication import get_group_size, get_rank, init

from msexp.execution.exits import exit_reason, tail
from msexp.execution.local import Emit, train_request
from msexp.execution.msrun_command import msrun_argv
from msexp.execution.output import redacted_output
from msexp.execution.process_tree import die_with_parent
from msexp.execution.protocol import EventWriter, Launch, Result, TrialRequest, read_events
from msexp.os_tools.waiting import wait_until
from msexp.paths import search_path, write_atomic
from msexp.secrets import files as private
from msexp.secrets.redaction import known_secrets, redact_known
from msexp.training.parallel import mean_over_ranks
from msexp.training.records import Diverged, Stopped

POLL_S = 0.1
EXIT_GRACE_S = 1.5  # msrun looks at its workers once a second before it logs an exit code
TAIL_LINES = 20
LAUNCHER_ENV = "MSEXP_LAUNCHER_PID"
# What msrun runs in each process: a script in the rank-log folder, so that no folder of
# msexp's own shadows top-level modules; the working directory is importable, as with -m.
RANK_SCRIPT = """import os, sys
sys.path[0] = os.getcwd()
from pathlib import Path
from msexp.execution.msrun import main
main(Path(sys.argv[1]))
"""
_WORKER_EXIT = re.compile(r"Worker process (\d+) exit with exception\. Error code: (-?\d+)")

def rank_log_dir(log: Path) -> Path:
    """The folder of a trial's msrun logs: `trial.log` -> `trial.ranks/`."""
    return log.with_name(log.stem + ".ranks")


def launch(request: TrialRequest, emit: Emit, stop_requested: Callable[[], bool]
           ) -> dict[str, float]:
    """Run a trial as `params["devices"]` msrun ranks and return rank 0's final metrics.

    Raises:
        ValueError: the trial asks for something data parallel cannot run.
        Diverged: the loss or the weights became NaN/inf.
        Stopped: `stop_requested()` became true; every rank is killed.
        RuntimeError: a rank died; the message has its exit reason and its log tail.
    """
    params = request.params
    devices = params["devices"]
    if params.get("optimizer") == "thor":
        raise ValueError("optimizer thor does not run data parallel yet (its curvature "
                         f"factors would differ per rank); use devices 1, got {devices}")
    folder = rank_log_dir(request.log_path)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    request_path = private.write(request.to_json())  # its params hold secrets in clear
    script = folder / "rank.py"
    script.write_text(RANK_SCRIPT, encoding="utf-8")
    emit(Launch(devices, str(folder), os.getpid()))
    env = _env(devices)
    command = msrun_argv(devices, folder, [str(script), str(request_path)], env["PATH"])
    try:
        with open(folder / "msrun.log", "w", encoding="utf-8") as out:
            proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                    preexec_fn=die_with_parent)
        cluster = _Cluster(proc, folder, devices, str(script))
        try:
            cluster.wait(stop_requested)
        finally:
            cluster.kill()
    finally:
        request_path.unlink(missing_ok=True)
    return next((e.metrics for e in read_events(request.events_path)
                 if isinstance(e, Result)), {})


def _env(devices: int) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = search_path()
    threads = int(env.get("MSEXP_THREADS") or os.cpu_count() or 1)
    env["MSEXP_THREADS"] = env["OMP_NUM_THREADS"] = str(max(1, threads // devices))
    env[LAUNCHER_ENV] = str(os.getpid())
    return env


class _Cluster:
    """msrun, its scheduler and its ranks, as the trial process sees them."""

    def __init__(self, proc: subprocess.Popen, folder: Path, devices: int, script: str):
        self.proc, self.folder, self.devices, self.script = proc, folder, devices, script
        self.seen: dict[int, psutil.Process] = {}
        self.ranks: dict[int, psutil.Process] = {}
        self.dead: list[int] = []  # ranks gone without finishing, in the order noticed

    def wait(self, stop_requested: Callable[[], bool]) -> None:
        failed_at: float | None = None
        while True:
            if stop_requested():
                raise Stopped(f"stopped; killed the {self.devices} ranks")
            self._discover()
            code = self.proc.poll()
            gone = {r for r, p in self.ranks.items() if not _alive(p)}
            finished = {r for r in range(self.devices) if self._marker(r).get("done")}
            self.dead += sorted(gone - finished - set(self.dead))
            if code == 0 or len(finished) == self.devices:
                return  # MindSpore's own teardown takes seconds; the ranks' work is done
            reported = self._reported_exit()
            if code is not None or reported or self.dead:
                failed_at = failed_at or time.monotonic()
                if code is not None or reported or time.monotonic() - failed_at > EXIT_GRACE_S:
                    raise self._failure(code)
            time.sleep(POLL_S)

    def _discover(self) -> None:
        try:
            children = psutil.Process(self.proc.pid).children()
        except psutil.Error:
            return
        for child in children:
            if child.pid in self.seen:
                continue
            try:
                if child.cmdline()[1:2] != [self.script]:
                    continue  # not yet exec'd
                env = child.environ()
            except (psutil.Error, IndexError):
                continue
            self.seen[child.pid] = child
            if env.get("MS_ROLE") == "MS_WORKER" and env.get("RANK_ID", "").isdigit():
                self.ranks[int(env["RANK_ID"])] = child

    def _marker(self, rank: int) -> dict[str, Any]:
        try:
            return json.loads((self.folder / f"rank-{rank}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    def _reported_exit(self) -> tuple[int, int] | None:
        try:
            text = (self.folder / "msrun.log").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
        found = _WORKER_EXIT.search(text)
        return (int(found.group(1)), int(found.group(2))) if found else None

    def _failure(self, code: int | None) -> Exception:
        reported = self._reported_exit()
        rank = None
        if reported:
            pids = {p.pid: r for r, p in self.ranks.items()}
            unknown = set(range(self.devices)) - set(self.ranks)
            rank = pids.get(reported[0], next(iter(unknown)) if len(unknown) == 1 else None)
        if rank is None and self.dead:
            rank = self.dead[0]
        if rank is None:
            log = self.folder / "msrun.log"
            how = "msrun is still running" if code is None else exit_reason(code, "msrun")
            return RuntimeError(f"{how}; last lines of {log.name}:\n{tail(log, TAIL_LINES)}")
        marker = self._marker(rank)
        error = marker.get("error")
        if error and error["type"] == "Diverged":
            return Diverged(f"rank {rank}: {error['message']}")
        pid = marker.get("pid") or (self.ranks[rank].pid if rank in self.ranks else "?")
        who = f"rank {rank} of {self.devices} (pid {pid})"
        text = exit_reason(reported[1], who) if reported and reported[0] == pid else f"{who} died"
        if error:
            text += f" after {error['type']}: {error['message']}"
        log = self.folder / f"worker_{rank}.log"
        return RuntimeError(f"{text}; last lines of {log.name}:\n{tail(log, TAIL_LINES)}")

    def kill(self) -> None:
        """Kill the ranks (with anything they started), the scheduler and msrun."""
        try:
            procs = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            procs = []
        procs += [p for p in self.seen.values() if p not in procs]
        for rank in self.ranks.values():  # msrun starts each rank in a session of its own
            if _alive(rank):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(rank.pid, signal.SIGKILL)
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.kill()
        self.proc.kill()
        self.proc.wait()
        wait_until(lambda: not any(_alive(p) for p in procs), 5, 0.05)


def _alive(proc: Any) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def main(request_path: Path) -> None:
    """One process of a data-parallel trial, as msrun starts it: a rank or the scheduler."""
    _die_with_msrun()
    if os.environ.get("MS_ROLE") == "MS_SCHED":
        init()  # the scheduler serves the cluster inside init() and exits with it
        return
    rank = int(os.environ["RANK_ID"])
    request = TrialRequest.from_json(request_path.read_text(encoding="utf-8"))
    marker = rank_log_dir(request.log_path) / f"rank-{rank}.json"
    state: dict[str, Any] = {"rank": rank, "pid": os.getpid()}
    _write_marker(marker, state)
    secrets = known_secrets(request.params)
    with os.fdopen(os.dup(1), "w", encoding="utf-8") as log, redacted_output(log, secrets):
        print(f"msexp rank {rank}, pid {os.getpid()}", flush=True)
        try:
            state.update(_train(request, secrets))
        except BaseException as exc:
            traceback.print_exc()
            error = {"type": type(exc).__name__, "message": redact_known(str(exc), secrets)}
            _write_marker(marker, {**state, "error": error})
            failed = True
        else:
            failed = False
    if failed:
        os._exit(1)
    _write_marker(marker, {**state, "done": True})


def _die_with_msrun() -> None:
    die_with_parent()
    launcher = os.environ.get(LAUNCHER_ENV)
    if launcher:
        try:
            grandparent = psutil.Process(os.getppid()).ppid()
        except psutil.Error:
            grandparent = -1
        if grandparent != int(launcher):
            os._exit(1)  # msrun died before the death signal was armed


def _train(request: TrialRequest, secrets: list[str]) -> dict[str, Any]:
    threads = os.environ.get("MSEXP_THREADS")
    if threads:
        ms.set_context(runtime_num_threads=int(threads))
    init()
    rank, size = get_rank(), get_group_size()
    events = request.events_path if rank == 0 else Path(os.devnull)  # rank 0 reports
    with EventWriter.open(events, secrets) as emit:
        _, workload = train_request(request, emit, lambda: False, (rank, size),
                                    mean_over_ranks(size))
    return {"size": size, "checksum": weights_checksum(workload.network)}


def _write_marker(path: Path, content: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(content))


def weights_checksum(network: Any) -> str:
    """SHA-256 of a network's trainable weights, in order, as stored."""
    digest = hashlib.sha256()
    for param in network.trainable_params():
        digest.update(param.asnumpy().tobytes())
    return digest.hexdigest()
