"""What a trial builds and compiles, and how a later trial of the same signature reuses it.

Compiling dominates short trials, and takes minutes for a real network on a device.
Trials that differ only in values that live in Parameters (lr, momentum, the loss
scale, the seed's initial weights) can run on the same compiled graphs: `Graphs.reset`
sets every Parameter of the training state to what a fresh build for the new trial
holds (its weights as its seed initialises them, zero moments, step counters and
accumulation buffers, the new hyperparameters), so a warm trial computes exactly what a
cold one does. Which params shape the graphs is `knobs.graph_params`' business.

Once a graph has run, `Parameter.set_data` no longer reaches it (the graph keeps its own
copy), so reused graphs are written through a compiled graph of assigns (`write`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import mindspore as ms
from mindspore import ParameterTuple, nn, ops

from msexp.experiment import Workload
from msexp.training.amp import apply_amp
from msexp.training.checkpoint import scaler_parameters, set_data, state_parameters
from msexp.training.dropout import seed_dropouts
from msexp.training.loss_scale import make_scaler
from msexp.training.optim import make_optimizer
from msexp.training.step import TrainStep, call, fuses, graph

_SEEDED = {"Seed0", "seed0", "seed", "Seed"}  # attributes of MindSpore's random primitives


@dataclass
class Graphs:
    """A trial's network (AMP-cast), optimizer, loss scaler, train step and eval forward.

    `reusable` is False where a later trial could not be made identical by resetting
    Parameters: the experiment brings its own optimizer or lr schedule (their values
    may be graph constants), MindSpore's own THOR (ditto), the network has random ops
    (their generators live in the kernels), the step averages over data-parallel ranks,
    or AMP O1 (its rewritten source lives only as long as the trial that compiled it).
    """

    network: nn.Cell
    optimizer: nn.Optimizer
    scaler: Any
    drop_overflow_update: bool
    step: TrainStep
    forward: Callable[[Any, Any], Any]
    state: dict[str, ms.Parameter] | None  # every Parameter the graphs touch, by own name
    _assign: tuple[int, Callable] | None = None

    @property
    def reusable(self) -> bool:
        return self.state is not None

    @classmethod
    def build(cls, workload: Workload, params: dict[str, Any], steps_per_epoch: int,
              scratch: Path, reducer: Callable | None = None) -> Graphs:
        """Build (not yet compile) a trial's graphs; O1 rewrites the network's source into
        `scratch`, which must last until the graphs have compiled."""
        seed_dropouts(workload.network, params["seed"])
        network = apply_amp(workload.network, params, scratch)
        optimizer = build_optimizer(workload, params, network, steps_per_epoch)
        scaler, drop = make_scaler(params)
        step = TrainStep(network, workload.loss_fn, optimizer, params["micro_size"], scaler,
                         drop, reducer, params.get("clip_grad_norm", 0.0), fuses(params))
        reusable = (workload.optimizer is None and workload.lr_schedule is None
                    and reducer is None and params.get("thor_impl") != "mindspore"
                    and params["amp_level"] != "O1" and not _has_random_ops(network))
        state = _by_name(network, optimizer, scaler, *step.buffers) if reusable else None
        return cls(network, optimizer, scaler, drop, step, _eval_forward(network, workload),
                   state)

    def parameters(self) -> dict[str, ms.Parameter]:
        """The training state a checkpoint holds, by name."""
        return state_parameters(self.network, self.optimizer, self.scaler)

    def reset(self, workload: Workload, params: dict[str, Any], steps_per_epoch: int) -> bool:
        """Make the state what `Graphs.build(workload, params)` would start from, without
        compiling; False (state untouched) if that build's Parameters differ in kind."""
        optimizer = build_optimizer(workload, params, workload.network, steps_per_epoch)
        scaler, _ = make_scaler(params)
        fresh, mine = _by_name(workload.network, optimizer, scaler), self.state
        if fresh is None or mine is None or any(
                name not in mine or mine[name].shape != p.shape or mine[name].dtype != p.dtype
                for name, p in fresh.items()):
            return False
        mine.update(_by_name(self.network) or {})  # THOR's captures appear on first use
        self.write({param: fresh[name].value() if name in fresh else ops.zeros_like(param)
                    for name, param in mine.items()})  # scratch starts at zero
        if self.step.thor is not None:
            self.step.thor.reset_from(optimizer)
        return True

    def write(self, values: dict[ms.Parameter, Any]) -> None:
        """Set Parameters of the state to `values`, whether or not graphs ran on them."""
        if self.state is None:  # never reused: written before any graph runs
            set_data(values)
            return
        params = tuple(self.state.values())
        if self._assign is None or len(params) != self._assign[0]:
            self._assign = (len(params), _assigner(ParameterTuple(params)))
        self._assign[1](ms.mutable(tuple(values[p] if p in values else p.value() for p in params)))


def build_optimizer(workload: Workload, params: dict[str, Any], network: Any,
                    steps_per_epoch: int) -> nn.Optimizer:
    """The workload's own optimizer (or factory), else the one the knobs name."""
    given = workload.optimizer
    if isinstance(given, nn.Optimizer):
        return given
    if given is not None:
        return given(network, params, steps_per_epoch)
    return make_optimizer(params, network.trainable_params(), steps_per_epoch, network,
                          workload.lr_schedule)


def _by_name(*holders: Any) -> dict[str, ms.Parameter] | None:
    """Every Parameter of cells, scalers and lone Parameters, by its own name (the same
    whether or not AMP wrapped the network); None if two differ but share a name."""
    found: dict[str, ms.Parameter] = {}
    for holder in holders:
        if holder is None:
            continue
        if isinstance(holder, ms.Parameter):
            params = [holder]
        elif isinstance(holder, nn.Cell):
            params = list(holder.get_parameters())
        else:
            params = [p for _, p in scaler_parameters(holder)]
        for param in params:
            if found.setdefault(param.name, param) is not param:
                return None
    return found


def _assigner(params: ParameterTuple) -> Callable[[tuple], Any]:
    assign = ops.HyperMap()

    @ms.jit
    def write(values):
        assign(ops.partial(ops.assign), params, values)
        return True

    return write


def _has_random_ops(network: nn.Cell) -> bool:
    return any(_SEEDED & set(getattr(prim, "attrs", {}))
               for _, cell in network.cells_and_names()
               for prim in getattr(cell, "_primitives", {}).values())


def _eval_forward(network: nn.Cell, workload: Workload) -> Callable[[Any, Any], Any]:
    @graph
    def forward(x, y):
        logits = ops.cast(call(network, x), ms.float32)
        return logits, workload.loss_fn(logits, y)

    return forward
