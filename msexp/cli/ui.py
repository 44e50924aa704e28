"""`msexp ui`: the MLflow UI of a sweep's store, served by the Python msexp runs from,
with the links of the sweep's runs table and parent run once it answers."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer

from msexp.cli.options import OptionalSweepFileArg, TrackingOpt, console, err_console
from msexp.errors import MsexpError, Suggestion
from msexp.keys import RunTag
from msexp.os_tools.waiting import wait_until
from msexp.paths import STORE_DIR
from msexp.spec import read_name
from msexp.tracking.runs import UI_PORT, ui_base, ui_links
from msexp.tracking.runs import tracking_uri as resolve_uri

START_S = 300.0  # the first answer: seconds at a load of 16 on 2 cores
STOP_S = 10.0  # SIGTERM to SIGKILL
ANSWER_S = 5.0  # one health check: a server that takes the call and hangs is asked again
SQLITE = "sqlite:///"
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
PR_SET_PDEATHSIG = 1  # prctl(2)
LIBC = ctypes.CDLL(None)  # loaded here: between fork and exec, no dlopen

PortOpt = Annotated[int, typer.Option(
    "--port", min=1, max=65535, metavar="PORT",
    help="The port the UI serves on (127.0.0.1 only).")]


class Stopped(Exception):
    """Ctrl-C, SIGTERM or SIGHUP while the UI runs."""


def ui(file: OptionalSweepFileArg = None, tracking_uri: TrackingOpt = None,
       port: PortOpt = UI_PORT) -> None:
    """Serve the sweep's MLflow store and print the links of its runs.

    Starts MLflow's UI on 127.0.0.1:PORT with the Python msexp runs from, waits until it
    answers, and prints the sweep's runs table and parent run (without FILE: the newest
    sweep's). It runs in the foreground: Ctrl-C stops the server, exit code 0. A tracking
    server (--tracking-uri http://...) serves itself: the links only.

    Example: msexp ui sweeps/accum.yaml
    """
    uri = resolve_uri(tracking_uri)
    name = read_name(file) if file is not None else None
    if uri.startswith(("http://", "https://")):
        show_links(*sweep_runs(uri, name, file), ui_base(uri))
        return
    store = _sqlite_file(uri)
    if store is not None and not store.is_file():
        raise MsexpError(f"no MLflow store at {store}: run `",
                         Suggestion(("sweep", str(file or "FILE")), tracking_uri=uri), "` first")
    found = sweep_runs(uri, name, file)
    if _answers(port):
        raise MsexpError(f"port {port} already answers (another MLflow UI?): stop it, or "
                         f"give --port {port + 1}")
    serve(uri, port, store, found)


def sweep_runs(uri: str, name: str | None, file: Path | None) -> tuple[str | None, str | None]:
    """(experiment id, parent run id) of the sweep `name` (None: the newest sweep) in the
    store; (None, None) where the store holds no sweep and no FILE was given."""
    from mlflow import MlflowClient  # lazy: MLflow takes ~1.4 s to import

    client = MlflowClient(uri)
    if name is None:
        experiments = [e.experiment_id for e in client.search_experiments()]
        newest = _newest_sweep(client, experiments)
        return (newest.info.experiment_id, newest.info.run_id) if newest else (None, None)
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        raise MsexpError(f"no MLflow experiment named {name!r} in {uri}: run `",
                         Suggestion(("sweep", str(file)), tracking_uri=uri), "` first")
    parent = _newest_sweep(client, [experiment.experiment_id])
    return experiment.experiment_id, parent.info.run_id if parent else None


def _newest_sweep(client: Any, experiments: list[str]) -> Any:
    """The newest parent run of a sweep among `experiments` that no newer version replaced
    (`msexp sweep --restart`), else the newest; None where there is none."""
    if not experiments:
        return None
    runs = client.search_runs(experiments, f"tags.`{RunTag.ROLE}` = 'sweep'", max_results=50,
                              order_by=["attributes.start_time DESC"])
    current = [r for r in runs if RunTag.SUPERSEDED_BY not in r.data.tags]
    return (current or runs or [None])[0]


def show_links(experiment_id: str | None, parent_id: str | None, base: str) -> None:
    """The runs table's link and the parent run's (the UI's root where the store holds no
    sweep)."""
    if experiment_id is None:
        console.print(f"MLflow UI:        {base}/", highlight=False, soft_wrap=True)
        return
    runs, parent = ui_links(base, experiment_id, parent_id)
    console.print(f"compare trials:   {runs}", highlight=False, soft_wrap=True)
    if parent:
        console.print(f"sweep run:        {parent}", highlight=False, soft_wrap=True)


def serve(uri: str, port: int, store: Path | None, found: tuple[str | None, str | None]
          ) -> None:
    """Run MLflow's UI on the store until a signal stops it; print the links once it
    answers. No process of the server outlives this call."""
    log = (store.parent if store else STORE_DIR) / "mlflow-ui.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    handlers = {s: signal.signal(s, _stop) for s in SIGNALS}
    server = None
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)  # a stop now would lose the server
        try:
            with log.open("ab") as output:
                server = subprocess.Popen(server_argv(uri, port), stdin=subprocess.DEVNULL,
                                          stdout=output, stderr=subprocess.STDOUT,
                                          env=server_env(), start_new_session=True,
                                          preexec_fn=_in_the_server)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
        started = time.monotonic()
        _wait_until_ready(server, port, log)
        console.print(f"MLflow UI of {uri} ready in {time.monotonic() - started:.1f} s "
                      "(Ctrl-C stops it)", highlight=False, soft_wrap=True)
        show_links(*found, ui_base(uri, port))
        code = server.wait()
        raise MsexpError(f"the MLflow UI ended by itself (exit code {code}); its log: {log}")
    except Stopped:
        err_console.print("MLflow UI stopped", highlight=False)
    finally:
        if server is not None:
            stop_group(server)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def server_argv(uri: str, port: int) -> list[str]:
    """`python -m mlflow ui` of this Python: one worker process (four took 63 s to serve a
    first page on 2 cores), artifacts read where the runs keep them."""
    argv = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri,
            "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
            "--no-serve-artifacts"]
    if uri == resolve_uri():
        argv += ["--default-artifact-root", (STORE_DIR / "artifacts").resolve().as_uri()]
    return argv


def server_env() -> dict[str, str]:
    """The environment of the server: no GenAI job runner (one process more, unused)."""
    return {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


def _stop(signum: int, frame: FrameType | None) -> None:
    raise Stopped(signum)


def _wait_until_ready(server: subprocess.Popen, port: int, log: Path) -> None:
    """Poll the UI's health check until it answers 200; an error where the server ends
    first or does not answer within START_S."""
    def ready() -> bool:
        if server.poll() is not None:
            raise MsexpError(f"the MLflow UI did not start (exit code {server.returncode}): "
                             f"{_last_line(log)} (its log: {log})")
        return _answers(port, "/health")

    if not wait_until(ready, START_S, 0.5):
        raise MsexpError(f"the MLflow UI did not answer on port {port} within {START_S:.0f} s "
                     f"(its log: {log})")


def _answers(port: int, path: str | None = None) -> bool:
    """Whether something listens on 127.0.0.1:`port` (with `path`: answers it with 200)."""
    if path is None:
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", port)) == 0
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=ANSWER_S) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def stop_group(server: subprocess.Popen) -> None:
    """SIGTERM to MLflow's CLI, which passes it to its uvicorn and waits for it; after
    STOP_S, SIGKILL to whatever is left of the server's process group."""
    server.send_signal(signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        server.wait(timeout=STOP_S)
    with contextlib.suppress(ProcessLookupError):  # else the group is gone: nothing was left
        os.killpg(server.pid, signal.SIGKILL)
    server.wait()


def _in_the_server() -> None:
    """In the server's process before its exec: the stop signals this process blocked
    unblocked, and SIGTERM when this process dies (even by SIGKILL)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
    LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _sqlite_file(uri: str) -> Path | None:
    return Path(uri[len(SQLITE):]) if uri.startswith(SQLITE) else None


def _last_line(log: Path) -> str:
    try:
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""
