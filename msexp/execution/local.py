"""A trial in this process: build the experiment's workload, train it, emit its events.

The process keeps the graphs of its last trial (`WarmGraphs`): the next trial with the
same graph signature (`TrialRequest.graph_signature`) runs on them, reset, without
compiling.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

from msexp.execution.protocol import Event, Result, Start, TrialRequest, reusable
from msexp.experiment import Workload, load_experiment, workload_problem
from msexp.training.records import Diverged, Stopped
from msexp.trial_folder import Fence

Emit = Callable[[Event], None]


class WarmGraphs:
    """The compiled graphs of this process's last trial, and their signature."""

    def __init__(self) -> None:
        self.signature: str | None = None
        self.graphs: Any = None

    @property
    def held(self) -> bool:
        """Whether a next trial may reuse graphs held here."""
        return self.graphs is not None

    def take(self, signature: str | None) -> Any:
        """The graphs held, if a trial of `signature` can reuse them; nothing stays held
        (a trial that fails before training leaves no graphs)."""
        graphs = self.graphs if reusable(self.signature, signature) else None
        self.signature = self.graphs = None
        return graphs

    def keep(self, signature: str | None, graphs: Any) -> None:
        if signature and graphs.reusable:
            self.signature, self.graphs = signature, graphs

    def drop(self) -> None:
        self.signature = self.graphs = None


def train_request(request: TrialRequest, emit: Emit, stop_requested: Callable[[], bool],
                  shard: tuple[int, int] = (0, 1), reducer: Callable | None = None,
                  warm: WarmGraphs | None = None) -> tuple[dict[str, float], Workload]:
    """Build the workload and train it in this process (or as one data-parallel rank):
    emit start, each epoch and the result; return the metrics and the workload. With
    `warm`, reuse the graphs it holds if they fit, and leave this trial's there."""
    warm = warm or WarmGraphs()
    with tempfile.TemporaryDirectory(prefix="msexp-amp-") as scratch:  # see Graphs.build
        return _train_request(request, emit, stop_requested, shard, reducer, Path(scratch),
                              warm)


def _train_request(request: TrialRequest, emit: Emit, stop_requested: Callable[[], bool],
                   shard: tuple[int, int], reducer: Callable | None, scratch: Path,
                   warm: WarmGraphs) -> tuple[dict[str, float], Workload]:
    from msexp.training.checkpoint import resumable  # lazy: a failing MindSpore import shows
    from msexp.training.loop import prepare, train  # in the trial's log
    from msexp.training.probe import range_rates, run_probe  # lazy: as above

    signature = request.graph_signature if reducer is None else None
    earlier_graphs = warm.take(signature)
    workload = build_workload(request)
    probe = request.probe
    if probe is not None and probe.lr_high:  # never reused: the rates are its own
        workload = dataclasses.replace(workload, lr_schedule=range_rates(probe))
    impl = _implementations(request.params)
    params = {**request.params, **impl}
    graphs, reused = ((None, False) if reducer is not None
                      else prepare(workload, params, earlier_graphs, scratch))
    warm.keep(signature, graphs)
    plan = _plan(request)
    earlier = resumable(plan) if plan else None
    emit(Start(workload.data_source, os.getpid(), impl, earlier.epoch if earlier else 0,
               reused))
    _tell_batch_statistics(workload, params, emit)
    if earlier:
        print(f"msexp: resuming from epoch {earlier.epoch} ({plan.folder / earlier.file})",
              flush=True)
    try:
        if probe is not None:
            if graphs is None:  # data-parallel: its ranks' steps reduce, which a probe's do not
                raise ValueError("a probe runs in one process, never data-parallel")
            metrics = run_probe(workload, params, graphs, probe, emit, stop_requested)
            emit(Result(metrics))
            return metrics, workload
        outcome = train(workload, params, emit, stop_requested, request.target, shard, reducer,
                        plan, Path(request.init_from) if request.init_from else None, graphs)
    except (Stopped, Diverged):
        raise  # a pruned or diverged trial leaves graphs as reusable as a finished one
    except BaseException:
        warm.drop()
        raise
    checkpoint = str(outcome.checkpoint) if outcome.checkpoint else None
    emit(Result(outcome.metrics, checkpoint))
    return outcome.metrics, workload


def _plan(request: TrialRequest) -> Any:
    """The checkpoint plan of a request that has a folder and asks for checkpoints."""
    from msexp.training.checkpoint import CheckpointPlan, owner  # lazy: as train_request's

    wanted = request.checkpoint
    if wanted is None or request.folder is None:
        return None
    fence = Fence(request.folder, request.attempt) if request.attempt else None
    return CheckpointPlan(request.checkpoint_dir, wanted.every, wanted.keep, wanted.metric,
                          wanted.maximize, owner(request.trial, request.params),
                          request.params, fence)


def build_workload(request: TrialRequest) -> Workload:
    """Seed every generator, import the experiment, build its workload and check it."""
    import mindspore as ms  # lazy: see _preload in trial.py
    import numpy as np

    params = request.params
    ms.set_seed(params["seed"])
    np.random.seed(params["seed"])
    experiment = load_experiment(request.experiment)
    assert experiment.build is not None, "a loaded experiment has its build"
    workload = experiment.build({**params, "data": request.data})
    problem = workload_problem(workload, experiment.metrics)
    if problem:
        raise TypeError(problem)
    return workload


def _tell_batch_statistics(workload: Workload, params: dict[str, Any], emit: Emit) -> None:
    """Emit the network's batch-statistic and Dropout layers (if any) and, where each sees
    a part of the batch, say what that changes in the trial's log."""
    from msexp.training.batch_stats import split_layers  # lazy: MindSpore

    batch = params["batch_size"]
    stats = split_layers(workload.network,
                         batch // (params["micro_size"] * params.get("devices", 1)), batch)
    if stats is None:
        return
    emit(stats)
    if not stats.exact:
        print(f"msexp: {stats.line()}", flush=True)


def _implementations(params: dict[str, Any]) -> dict[str, str]:
    """Implementations resolved for this device, e.g. {"thor_impl": "msexp"}."""
    if params.get("optimizer") != "thor":
        return {}
    import mindspore as ms  # lazy: as above

    from msexp.training.thor import resolve_impl  # lazy: as above

    return {"thor_impl": resolve_impl(params["thor_impl"], ms.get_context("device_target"))}
