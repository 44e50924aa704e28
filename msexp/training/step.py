"""One optimizer update from `micro_size` micro-batches, with optional loss scaling.

Standalone accumulation follows seed 000: for each micro-batch take loss / micro_size,
run `value_and_grad`, add into buffers; after `micro_size` micro-batches unscale the sum
once, check it is finite, step (or skip on overflow), adjust the scale and zero the buffers.
`nn.GradAccumulationCell` is not used: outside (semi-)auto parallel it never updates weights.
With THOR, a refresh update runs a second accumulate graph whose taps capture each layer's
input and output gradient; the factors are collected after every micro-batch and inverted
before the update.
"""

from __future__ import annotations

import functools
import time
from typing import Any, Callable

import mindspore as ms
from mindspore import ParameterTuple, amp, nn, ops
from mindspore.ops import functional as F

from msexp.training.thor import Thor


def call(network: nn.Cell, inputs: Any) -> Any:
    """The network on its inputs: one tensor, or a tuple for a multi-input network."""
    return network(*inputs) if isinstance(inputs, tuple) else network(inputs)


def tensors_of(inputs: Any) -> Any:
    """NumPy inputs (an array or a tuple of arrays) as MindSpore tensors."""
    if isinstance(inputs, tuple):
        return batch_inputs([ms.Tensor(a) for a in inputs])
    return ms.Tensor(inputs)


def batch_inputs(tensors: list[Any]) -> Any:
    """A network's input tensors as its compiled graphs take them: one tensor, or a
    mutable tuple (a plain tuple of tensors is a constant: one compile per call)."""
    return tensors[0] if len(tensors) == 1 else ms.mutable(tuple(tensors))


def timed_update(step: Callable, micro_batches: list, memory: Any, update_s: list[float]
                 ) -> tuple[float, bool]:
    """One update of `step` on NumPy `micro_batches`, its peak memory noted by `memory` (a
    `PeakMemory`) and its seconds appended to `update_s`; (loss, finite)."""
    tensors = [(tensors_of(x), ms.Tensor(y)) for x, y in micro_batches]
    with memory.update(step):
        began = time.perf_counter()
        loss, finite = step(tensors)
        update_s.append(time.perf_counter() - began)
    return loss, finite


class _Graph(nn.Cell):
    """`fn` as a Cell, run by MindSpore's Cell graph executor (what `Model.train` runs in
    graph mode), whatever the context's mode."""

    def __init__(self, fn: Callable):
        super().__init__(auto_prefix=False)
        self.fn = fn

    def construct(self, *args):
        return self.fn(*args)


def graph(fn: Callable) -> Callable:
    """`fn` compiled as one graph, like `ms.jit`, but run the way a Cell is.

    On CPU (MindSpore 2.10) `ms.jit` runs its graph through the PyNative executor
    (`grad_jit`), which took 1.5-2x the time per LeNet5 update of the same graph run by
    the Cell graph executor (benchmarks/README.md, "Why msexp was slower").
    """
    return _Graph(fn).compile_and_run


def fuses(params: dict[str, Any]) -> bool:
    """Whether the fused step is the faster one for these params, as measured.

    On CPU (benchmarks/step_vs_model.py, 2026-11-22), buffered beats fused at O0 (MLP 3.35
    vs 19.7 ms, LeNet5 152 vs 165 ms per step): an optimizer reading gradients from
    Parameters runs faster than one fed by the backward pass. Under O2 fused wins on the
    MLP (12.6 vs 27.9 ms); on LeNet5 the two were equal in one run (117 vs 120 ms) and
    buffered faster in another (104 vs 120 ms), so this rule is right on three of the
    four rows measured. On GPU and Ascend, the fused step is `TrainOneStepCell`'s, the
    devices' usual path (unmeasured). Those figures are from the steps under `ms.jit`;
    run by the Cell executor (`graph`), one interleaved LeNet5 run at O0 still had
    buffered ahead (146 vs 174 ms, 2026-11-23, loaded machine).
    """
    if ms.get_context("device_target") != "CPU":
        return True
    return params.get("amp_level") in ("O2", "O3")


class TrainStep:
    """Callable: `step(micro_batches) -> (mean loss, grads finite)` for one update.

    Args:
        network: the (possibly AMP-cast) network.
        loss_fn: `(logits, labels) -> loss`, evaluated in float32.
        optimizer: the optimizer over the network's trainable parameters.
        micro_size: number of micro-batches per update.
        scaler: a MindSpore LossScaler, or None for no scaling.
        drop_overflow_update: skip the update when the unscaled gradients are not finite.
        reducer: data parallel: `(grads, loss) -> (grads, loss)` averaged over the ranks,
            applied once per update to the accumulated gradients; None in one process.
        clip_grad_norm: clip the (unscaled) update's gradients to this global norm; 0: off.
        fused: at micro_size 1 (without THOR or data parallelism), compute the gradients
            and apply them in one graph, as `TrainOneStepCell` does, with no buffers
            (`accumulate` and `update` are then unavailable); see `fuses`.
    """

    def __init__(self, network: nn.Cell, loss_fn: Callable, optimizer: nn.Optimizer,
                 micro_size: int, scaler: amp.LossScaler | None = None,
                 drop_overflow_update: bool = False, reducer: Callable | None = None,
                 clip_grad_norm: float = 0.0, fused: bool = False):
        self.micro_size = micro_size
        self.scaler = scaler
        self.thor = optimizer if isinstance(optimizer, Thor) else None
        weights = optimizer.parameters
        forward = _forward(network, loss_fn, micro_size, scaler)
        grad_fn = ms.value_and_grad(forward, None, weights, has_aux=True)
        apply = _applier(optimizer, scaler, drop_overflow_update, clip_grad_norm)
        fused = fused and micro_size == 1 and reducer is None and self.thor is None
        buffers = ParameterTuple(()) if fused else weights.clone(prefix="accumulated",
                                                                 init="zeros")
        self.buffers = tuple(buffers)
        self._fused = _fused_graph(grad_fn, apply) if fused else None
        self._accumulate = _accumulate_graph(grad_fn, buffers)
        self._update = _update_graph(apply, buffers)
        self._update_reduced = (None if reducer is None
                                else _reduced_update_graph(reducer, apply, buffers))
        self._make_capturing = functools.partial(_capturing_graph, forward, weights, buffers)
        self._capturing: Callable | None = None

    def __call__(self, micro_batches: list[tuple[Any, Any]]) -> tuple[float, bool]:
        if self._fused is not None:
            [(x, y)] = micro_batches
            loss, finite = self._fused(x, y)
            return float(loss.asnumpy()), bool(finite.asnumpy())
        return self.update([self.accumulate(x, y) for x, y in micro_batches])

    def accumulate(self, x: Any, y: Any) -> Any:
        """Add one micro-batch's gradients into the buffers (with THOR's factors on a
        refresh update); return its loss as a tensor."""
        thor = self.thor
        if thor is None or not thor.refresh_due():
            return self._accumulate(x, y)
        if self._capturing is None:
            self._capturing = self._make_capturing(thor.probes(x))
        with thor.capturing():
            loss, douts = self._capturing(x, y)
            thor.collect(douts, self.loss_scale or 1.0)
        return loss

    def update(self, losses: list[Any]) -> tuple[float, bool]:
        """Apply the accumulated gradients of the micro-batches whose `losses` these are;
        return (mean loss, gradients finite)."""
        if self.thor is not None and self.thor.refresh_due():
            self.thor.invert()
        if self._update_reduced is None:
            finite = self._update()
        else:
            local = sum(float(loss.asnumpy()) for loss in losses) / len(losses)
            finite, mean = self._update_reduced(ms.Tensor(local, ms.float32))
            losses = [mean]
        if self.thor is not None:
            self.thor.advance()
        return sum(float(loss.asnumpy()) for loss in losses) / len(losses), bool(finite.asnumpy())

    @property
    def loss_scale(self) -> float | None:
        """The current scale, or None without loss scaling."""
        return None if self.scaler is None else float(self.scaler.scale_value.asnumpy())


def _forward(network: nn.Cell, loss_fn: Callable, micro_size: int,
             scaler: amp.LossScaler | None) -> Callable:
    """(x, y) -> (the loss / micro_size, scaled for backward; the loss in float32).

    The network's output reaches `loss_fn` in the structure the network returns it (a
    tensor, a tuple, a list, a dict: Inception-v3's `(logits, aux_logits)`), each floating
    tensor in it cast to float32, as `Model`'s O2 and O3 loss cell casts it."""
    def forward(x, y):
        loss = loss_fn(F.mixed_precision_cast(ms.float32, call(network, x)), y)
        scaled = loss / micro_size
        if scaler is not None:
            scaled = scaler.scale(scaled)
        return scaled, loss

    return forward


def _applier(optimizer: nn.Optimizer, scaler: amp.LossScaler | None,
             drop_overflow_update: bool, clip_grad_norm: float) -> Callable:
    """grads -> finite: unscale, check, clip, step (or skip on overflow), adjust the scale."""
    def apply(grads):
        finite = ops.ones((), ms.bool_)
        if scaler is not None:
            grads = scaler.unscale(grads)
            finite = amp.all_finite(grads)
        if clip_grad_norm > 0:
            grads = ops.clip_by_global_norm(grads, clip_grad_norm)
        if scaler is not None:
            if drop_overflow_update:
                if finite:
                    optimizer(grads)
            else:
                optimizer(grads)
            scaler.adjust(finite)
        else:
            optimizer(grads)
        return finite

    return apply


def _accumulate_graph(grad_fn: Callable, buffers: ParameterTuple) -> Callable:
    """(x, y) -> loss: one micro-batch's gradients added into the buffers."""
    hyper_map = ops.HyperMap()

    @graph
    def accumulate(x, y):
        (_, loss), grads = grad_fn(x, y)
        hyper_map(ops.partial(ops.assign_add), buffers, grads)
        return loss

    return accumulate


def _update_graph(apply: Callable, buffers: ParameterTuple) -> Callable:
    """() -> finite: the buffers applied, then zeroed."""
    hyper_map = ops.HyperMap()

    @graph
    def update():
        finite = apply(buffers)
        hyper_map(ops.partial(ops.assign), buffers, hyper_map(ops.zeros_like, buffers))
        return finite

    return update


def _reduced_update_graph(reducer: Callable, apply: Callable, buffers: ParameterTuple
                          ) -> Callable:
    """loss -> (finite, mean loss): the buffers averaged over the ranks, applied, zeroed."""
    hyper_map = ops.HyperMap()

    @graph
    def update_reduced(loss):
        grads, loss = reducer(buffers, loss)
        finite = apply(grads)
        hyper_map(ops.partial(ops.assign), buffers, hyper_map(ops.zeros_like, buffers))
        return finite, loss

    return update_reduced


def _capturing_graph(forward: Callable, weights: ParameterTuple, buffers: ParameterTuple,
                     probes: list) -> Callable:
    """(x, y) -> (loss, the probes' gradients): `accumulate` that also captures THOR's
    layer-output gradients through its zero probes."""
    n = len(weights)
    grad_with_probes = ms.value_and_grad(forward, None, ParameterTuple([*weights, *probes]),
                                         has_aux=True)
    hyper_map = ops.HyperMap()

    @graph
    def accumulate_capturing(x, y):
        (_, loss), grads = grad_with_probes(x, y)
        hyper_map(ops.partial(ops.assign_add), buffers, grads[:n])
        return loss, grads[n:]

    return accumulate_capturing


def _fused_graph(grad_fn: Callable, apply: Callable) -> Callable:
    """(x, y) -> (loss, finite): gradients computed and applied in one graph, no buffers."""
    @graph
    def grad_and_apply(x, y):
        (_, loss), grads = grad_fn(x, y)
        return loss, apply(grads)

    return grad_and_apply
