"""The trial process: runs trials from JSON requests and writes metrics as JSON lines.

It never talks to Optuna or MLflow. `python -m msexp.trial` imports MindSpore at once,
then runs the requests it reads on stdin, one JSON object per line, until stdin closes.
msexp's runner sends each process a single request and starts the next process while
the current trial trains, so trials stay independent without waiting for the import.
Each trial gets its own log (stdout and stderr at the file descriptor level, so
MindSpore's C++ logs land there too) and its own events file.

Request: {"experiment", "params", "events", "log", "target": {metric, value, maximize},
"data": {format, path} or null}. `build` receives the params plus "data".
Events: {"event": "start"|"epoch"|"result"|"error"|"end", ...}; a data-parallel trial
(`devices` > 1, see `msexp.distributed`) first emits "launch" with its rank-log folder.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback
from typing import Any, Callable

from msexp.experiment import load_experiment, workload_problem

_stop = False


def run(request: dict[str, Any], emit: Callable[[dict[str, Any]], None],
        stop_requested: Callable[[], bool] = lambda: _stop) -> dict[str, float]:
    """Build the experiment's workload and train it; emit 'result' and return the metrics."""
    import mindspore as ms
    import numpy as np

    from msexp.training.loop import Target, train

    params = request["params"]
    if params.get("devices", 1) > 1:
        from msexp.distributed import launch

        return launch(request, emit, stop_requested)
    ms.set_seed(params["seed"])
    np.random.seed(params["seed"])
    experiment = load_experiment(request["experiment"])
    workload = experiment.build({**params, "data": request.get("data")})
    problem = workload_problem(workload, experiment.metrics)
    if problem:
        raise TypeError(problem)
    impl = _implementations(params)
    params = {**params, **impl}
    emit({"event": "start", "data_source": workload.data_source, "pid": os.getpid(),
          "impl": impl})
    target = Target(**request["target"]) if request.get("target") else None
    metrics = train(workload, params, emit, stop_requested, target)
    emit({"event": "result", "metrics": metrics})
    return metrics


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
    """Run requests from `requests`, one JSON object per line, until it closes."""
    global _stop
    signal.signal(signal.SIGUSR1, _request_stop)
    try:  # import while the orchestrator prepares the request; a failure re-raises in run()
        import mindspore as ms

        threads = os.environ.get("MSEXP_THREADS")
        if threads:
            ms.set_context(runtime_num_threads=int(threads))
    except Exception:
        pass
    for line in requests:
        if not line.strip():
            continue
        request = json.loads(line)
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


def _redirect_output(path: str) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


if __name__ == "__main__":
    serve()
