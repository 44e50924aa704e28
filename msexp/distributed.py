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
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

POLL_S = 0.1
EXIT_GRACE_S = 1.5  # msrun looks at its workers once a second before it logs an exit code
TAIL_LINES = 20
LAUNCHER_ENV = "MSEXP_LAUNCHER_PID"
_WORKER_EXIT = re.compile(r"Worker process (\d+) exit with exception\. Error code: (-?\d+)")

Emit = Callable[[dict[str, Any]], None]


def rank_log_dir(log: Path) -> Path:
    """The folder of a trial's msrun logs: `trial.log` -> `trial.ranks/`."""
    return log.with_name(log.stem + ".ranks")


def free_port() -> int:
    """A TCP port nothing listens on now, for msrun's scheduler."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(request: dict[str, Any], emit: Emit, stop_requested: Callable[[], bool]
           ) -> dict[str, float]:
    """Run a trial as `params["devices"]` msrun ranks and return rank 0's final metrics.

    Raises:
        ValueError: the trial asks for something data parallel cannot run.
        Diverged: the loss or the weights became NaN/inf.
        Stopped: `stop_requested()` became true; every rank is killed.
        RuntimeError: a rank died; the message has its exit reason and its log tail.
    """
    params = request["params"]
    devices = params["devices"]
    if params.get("optimizer") == "thor":
        raise ValueError("optimizer thor does not run data parallel yet (its curvature "
                         f"factors would differ per rank); use devices 1, got {devices}")
    folder = rank_log_dir(Path(request["log"]))
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    request_path = folder / "request.json"
    request_path.write_text(json.dumps(request), encoding="utf-8")
    emit({"event": "launch", "devices": devices, "rank_logs": str(folder), "pid": os.getpid()})
    env = _env(devices)
    command = [*_msrun(env["PATH"]), f"--worker_num={devices}", f"--local_worker_num={devices}",
               "--master_addr=127.0.0.1", f"--master_port={free_port()}", f"--log_dir={folder}",
               "--join=True", f"--tail_worker_log={devices}",  # no rank: no `tail -f` processes
               str(Path(__file__).resolve()), str(request_path)]
    from msexp.runner import _die_with_parent

    with open(folder / "msrun.log", "w", encoding="utf-8") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                preexec_fn=_die_with_parent)
    cluster = _Cluster(proc, folder, devices)
    try:
        cluster.wait(stop_requested)
    finally:
        cluster.kill()
    return _result(Path(request["events"]))


def _env(devices: int) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    threads = int(env.get("MSEXP_THREADS") or os.cpu_count() or 1)
    env["MSEXP_THREADS"] = env["OMP_NUM_THREADS"] = str(max(1, threads // devices))
    env[LAUNCHER_ENV] = str(os.getpid())
    return env


def _msrun(path: str) -> list[str]:
    found = shutil.which("msrun", path=path)
    return [found] if found else [sys.executable, "-m", "mindspore.parallel.cluster.run"]


def _result(events: Path) -> dict[str, float]:
    metrics: dict[str, float] = {}
    for line in events.read_text(encoding="utf-8").splitlines():
        event = json.loads(line) if line.strip() else {}
        if event.get("event") == "result":
            metrics = event["metrics"]
    return metrics


class _Cluster:
    """msrun, its scheduler and its ranks, as the trial process sees them."""

    def __init__(self, proc: subprocess.Popen, folder: Path, devices: int):
        import psutil

        self.proc, self.folder, self.devices = proc, folder, devices
        self.script = str(Path(__file__).resolve())
        self.seen: dict[int, psutil.Process] = {}
        self.ranks: dict[int, psutil.Process] = {}
        self.dead: list[int] = []  # ranks gone without finishing, in the order noticed

    def wait(self, stop_requested: Callable[[], bool]) -> None:
        from msexp.training.loop import Stopped

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
        import psutil

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
        from msexp.training.loop import Diverged

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
            how = "is still running" if code is None else _exit_text(code)
            return RuntimeError(f"msrun {how}; last lines of {log.name}:\n{_tail(log)}")
        marker = self._marker(rank)
        error = marker.get("error")
        if error and error["type"] == "Diverged":
            return Diverged(f"rank {rank}: {error['message']}")
        pid = marker.get("pid") or (self.ranks[rank].pid if rank in self.ranks else "?")
        how = _exit_text(reported[1]) if reported and reported[0] == pid else "died"
        text = f"rank {rank} of {self.devices} (pid {pid}) {how}"
        if error:
            text += f" after {error['type']}: {error['message']}"
        log = self.folder / f"worker_{rank}.log"
        return RuntimeError(f"{text}; last lines of {log.name}:\n{_tail(log)}")

    def kill(self) -> None:
        """Kill the ranks (with anything they started), the scheduler and msrun."""
        import psutil

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
        deadline = time.monotonic() + 5
        while any(_alive(p) for p in procs) and time.monotonic() < deadline:
            time.sleep(0.05)


def _alive(proc: Any) -> bool:
    import psutil

    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _tail(path: Path, lines: int = TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def main(request_path: Path) -> None:
    """One process of a data-parallel trial, as msrun starts it: a rank or the scheduler."""
    _die_with_msrun()
    if os.environ.get("MS_ROLE") == "MS_SCHED":
        from mindspore.communication import init

        init()  # the scheduler serves the cluster inside init() and exits with it
        return
    rank = int(os.environ["RANK_ID"])
    marker = request_path.with_name(f"rank-{rank}.json")
    state: dict[str, Any] = {"rank": rank, "pid": os.getpid()}
    _write_json(marker, state)
    print(f"msexp rank {rank}, pid {os.getpid()}", flush=True)
    try:
        state.update(_train(json.loads(request_path.read_text(encoding="utf-8"))))
    except BaseException as exc:
        traceback.print_exc()
        _write_json(marker, {**state, "error": {"type": type(exc).__name__,
                                                "message": str(exc)}})
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    _write_json(marker, {**state, "done": True})


def _die_with_msrun() -> None:
    from msexp.runner import _die_with_parent

    _die_with_parent()
    launcher = os.environ.get(LAUNCHER_ENV)
    if launcher:
        import psutil

        try:
            grandparent = psutil.Process(os.getppid()).ppid()
        except psutil.Error:
            grandparent = -1
        if grandparent != int(launcher):
            os._exit(1)  # msrun died before the death signal was armed


def _train(request: dict[str, Any]) -> dict[str, Any]:
    import mindspore as ms
    from mindspore.communication import get_group_size, get_rank, init

    from msexp.training.loop import Target, train
    from msexp.training.parallel import mean_over_ranks
    from msexp.trial import build_workload

    threads = os.environ.get("MSEXP_THREADS")
    if threads:
        ms.set_context(runtime_num_threads=int(threads))
    init()
    rank, size = get_rank(), get_group_size()
    params = request["params"]
    workload = build_workload(request)
    with open(request["events"] if rank == 0 else os.devnull, "a", buffering=1,
              encoding="utf-8") as events:
        def emit(event: dict[str, Any]) -> None:
            events.write(json.dumps({**event, "t": time.time()}, default=float) + "\n")

        emit({"event": "start", "data_source": workload.data_source, "pid": os.getpid(),
              "impl": {}})
        target = Target(**request["target"]) if request.get("target") else None
        metrics = train(workload, params, emit, target=target, shard=(rank, size),
                        reducer=mean_over_ranks(size))
        emit({"event": "result", "metrics": metrics})
    return {"size": size, "checksum": weights_checksum(workload.network)}


def weights_checksum(network: Any) -> str:
    """SHA-256 of a network's trainable weights, in order, as stored."""
    digest = hashlib.sha256()
    for param in network.trainable_params():
        digest.update(param.asnumpy().tobytes())
    return digest.hexdigest()


def _write_json(path: Path, content: dict[str, Any]) -> None:
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps(content), encoding="utf-8")
    os.replace(partial, path)


if __name__ == "__main__":
    sys.path[0] = os.getcwd()  # as `python -m` does: msexp/ must not shadow top-level modules
    main(Path(sys.argv[1]))
