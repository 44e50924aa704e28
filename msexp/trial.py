"""The trial process: runs trials from JSON requests and writes metrics as JSON lines.

It never talks to Optuna or MLflow. `python -m msexp.trial` imports MindSpore once, then
runs the requests it reads on stdin, one JSON object per line, until stdin closes; on
CPU each trial runs in a child forked for it (see `serve`). Each trial gets its own log
(stdout and stderr at the file descriptor level, so MindSpore's C++ logs land there too)
and its own events file.

Request: {"experiment", "params", "events", "log", "target": {metric, value, maximize},
"data": {format, path} or null}. `build` receives the params plus "data".
Events: {"event": "start"|"epoch"|"result"|"error"|"end", ...}; a data-parallel trial
(`devices` > 1, see `msexp.distributed`) first emits "launch" with its rank-log folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
import traceback
from typing import Any, Callable

from msexp.experiment import Workload, load_experiment, workload_problem

_stop = False


def run(request: dict[str, Any], emit: Callable[[dict[str, Any]], None],
        stop_requested: Callable[[], bool] = lambda: _stop) -> dict[str, float]:
    """Build the experiment's workload and train it; emit 'result' and return the metrics."""
    from msexp.training.loop import Target, train

    params = request["params"]
    if params.get("devices", 1) > 1:
        from msexp.distributed import launch

        return launch(request, emit, stop_requested)
    workload = build_workload(request)
    impl = _implementations(params)
    params = {**params, **impl}
    emit({"event": "start", "data_source": workload.data_source, "pid": os.getpid(),
          "impl": impl})
    target = Target(**request["target"]) if request.get("target") else None
    metrics = train(workload, params, emit, stop_requested, target)
    emit({"event": "result", "metrics": metrics})
    return metrics


def build_workload(request: dict[str, Any]) -> Workload:
    """Seed every generator, import the experiment, build its workload and check it."""
    import mindspore as ms
    import numpy as np

    params = request["params"]
    ms.set_seed(params["seed"])
    np.random.seed(params["seed"])
    experiment = load_experiment(request["experiment"])
    workload = experiment.build({**params, "data": request.get("data")})
    problem = workload_problem(workload, experiment.metrics)
    if problem:
        raise TypeError(problem)
    return workload


def _implementations(params: dict[str, Any]) -> dict[str, str]:
    """Implementations resolved for this device, e.g. {"thor_impl": "msexp"}."""
    if params.get("optimizer") != "thor":
        return {}
    import mindspore as ms

    from msexp.training.thor import resolve_impl

    return {"thor_impl": resolve_impl(params["thor_impl"], ms.get_context("device_target"))}


def _failure(exc: BaseException) -> dict[str, Any]:
    from msexp.training.loop import Diverged, Stopped

    kind = {Diverged: "diverged", Stopped: "stopped"}.get(type(exc), "exception")
    return {"event": "error", "kind": kind, "message": f"{type(exc).__name__}: {exc}"}


def serve(requests=sys.stdin) -> None:
    """Run requests from `requests`, one JSON object per line, until it closes.

    On CPU this process is a zygote: it imports MindSpore and msexp's training code once
    and forks a fresh child per trial, so every trial starts clean (own memory, own
    graphs) without paying the import. Elsewhere (GPU, Ascend: device runtimes do not
    survive a fork), or with MSEXP_FORK=0, it runs each trial itself.
    """
    signal.signal(signal.SIGUSR1, _request_stop)
    fork = _preload()
    for line in requests:
        if not line.strip():
            continue
        request = json.loads(line)
        if not fork:
            _run_logged(request)
            continue
        _import_once(request["experiment"])
        child = os.fork()
        if child == 0:
            os._exit(_run_child(request))
        _children.append(child)
        _, status = os.waitpid(child, 0)
        _children.remove(child)
        _report_exit(request["events"], status)


_children: list[int] = []


def _preload() -> bool:
    """Import what every trial needs; return whether trials may run in forked children."""
    try:  # a failure here re-raises inside the trial, where its log shows it
        import mindspore as ms

        import msexp.training.loop  # noqa: F401

        threads = os.environ.get("MSEXP_THREADS")
        if threads:
            ms.set_context(runtime_num_threads=int(threads))
        device = ms.get_context("device_target")
        slot = os.environ.get("MSEXP_SLOT")
        if device != "CPU" and slot is not None:  # one device per worker, round robin
            count = getattr(ms.device_context, device.lower()).device_count()
            ms.set_device(device, int(slot) % max(1, count))
    except Exception:
        return False
    return device == "CPU" and os.environ.get("MSEXP_FORK", "1") != "0"


def _import_once(experiment: str) -> None:
    """Import the experiment's module in the zygote, so forked trials share the import
    (never `build`: each trial builds its own workload). Failures show in the trial."""
    with contextlib.suppress(Exception, SystemExit):
        load_experiment(experiment)


def _run_child(request: dict[str, Any]) -> int:
    """In the forked child: run the trial, return the exit code (sys.exit's, if it exits)."""
    from msexp.runner import _die_with_parent

    _die_with_parent()
    try:
        _run_logged(request)
        return 0
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def _report_exit(events_path: str, status: int) -> None:
    """After a child that died without ending its trial, end it with the reason."""
    from msexp.runner import exit_reason

    with open(events_path, encoding="utf-8") as events:
        if any(json.loads(line).get("event") == "end" for line in events if line.strip()):
            return
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    with open(events_path, "a", encoding="utf-8") as events:
        for event in ({"event": "error", "kind": "exit", "message": exit_reason(code)},
                      {"event": "end"}):
            events.write(json.dumps({**event, "t": time.time()}) + "\n")


def _run_logged(request: dict[str, Any]) -> None:
    """Run one trial with its own log and events file, ending with an "end" event."""
    global _stop
    _stop = False
    _redirect_output(request["log"])
    with open(request["events"], "a", buffering=1, encoding="utf-8") as events:
        def emit(event: dict[str, Any]) -> None:
            events.write(json.dumps({**event, "t": time.time()}, default=float) + "\n")

        try:
            run(request, emit)
        except Exception as exc:
            traceback.print_exc()
            emit(_failure(exc))
        sys.stdout.flush()
        sys.stderr.flush()
        emit({"event": "end"})


def _request_stop(signum: int, frame: Any) -> None:
    global _stop
    _stop = True
    for child in _children:  # in a zygote: pass the stop on to the running trial
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGUSR1)


def _redirect_output(path: str) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


if __name__ == "__main__":
    serve()
