"""THOR, the second-order optimizer of seed 004 (Chen et al., AAAI 2021), in MindSpore ops.

MindSpore's own `nn.thor` needs ThorIm2Col and CholeskyTrsm, which CPU lacks, and its
`ModelThor` runs only in dataset-sink mode; this one runs wherever `ops.inverse` does,
inside msexp's per-step loop (see `TrainStep`).

Every Dense and Conv2d layer (group 1, NCHW) is a THOR layer, numbered in network order.
Its layer input `a` (im2col patches for a convolution) and the gradient `ds` of the loss
(a batch mean) with respect to its pre-activation output give two Kronecker factors,
with the batch-size scaling of K-FAC (per-sample gradients are N * ds):

    A = mean over the N*T rows of a a^T        (T = output positions; 1 for Dense)
    G = N * sum over the N*T rows of ds ds^T

Both are damped with sqrt(damping) (as MindSpore's THOR does) and inverted, and the
weight gradient, laid out (out, in*kh*kw) like MindSpore's weights, becomes
G^-1 grad A^-1; other parameters (biases, BatchNorm) keep the plain gradient. Weight
decay and momentum follow as in `nn.Momentum`.

A, G and the inverses are recomputed on steps 0, frequency, 2*frequency, ...; stale
inverses are reused in between. Factors come from every micro-batch of an update
(`collect` after each), in float32 whatever AMP does to the network, unscaled by the
loss scale. `split_indices` cuts the layers into groups (index i closes a group, as in
`nn.thor`). In a data-parallel run the groups are the all-reduce groups of A/G (one
fused all-reduce per group, as `nn.thor` sets its fusion indices); msexp's launcher does
not run THOR data parallel yet. In a single process each group's factors are damped and
inverted by one compiled graph. `inverse_s` counts
the seconds spent collecting factors and inverting them, from the second refresh on
(the first one mostly compiles graphs; the loop reports that in compile_s).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import mindspore as ms
import numpy as np
from mindspore import Parameter, Tensor, nn, ops

from msexp.training.thor_factors import (
    Collect,
    FactorState,
    Invert,
    install_taps,
    jit_collect,
    jit_invert,
    layer_groups,
)

IMPLS = ("auto", "mindspore", "msexp")


def thor_lr(lr_init: float, decay: float, total_epochs: float, steps_per_epoch: int,
            decay_epochs: float | None = None) -> list[float]:
    """Seed 004's `get_thor_lr`: lr_init * (1 - epoch / total_epochs) ** decay per step.

    Halved once from `decay_epochs` and again one epoch later; None never halves.
    """
    rates = []
    for step in range(int(total_epochs * steps_per_epoch)):
        epoch = (step + 1) / steps_per_epoch
        lr = lr_init * (1.0 - epoch / total_epochs) ** decay
        if decay_epochs is not None and epoch >= decay_epochs:
            lr *= 0.5
        if decay_epochs is not None and epoch >= decay_epochs + 1:
            lr *= 0.5
        rates.append(lr)
    return rates


def thor_damping(damping_init: float, decay_rate: float, total_epochs: int,
                 steps_per_epoch: int) -> list[float]:
    """Seed 004's `get_thor_damping`: damping_init * decay_rate ** (epoch / 10) per step."""
    return [damping_init * decay_rate ** ((step + 1) / steps_per_epoch / 10)
            for step in range(total_epochs * steps_per_epoch)]


def resolve_impl(requested: str, device_target: str) -> str:
    """The THOR implementation a trial uses: 'msexp' or 'mindspore'.

    MindSpore's `nn.thor` runs on Ascend; on GPU only through `ModelThor` in dataset-sink
    mode and never on CPU, so msexp's per-step loop uses it only on Ascend.

    Raises:
        ValueError: 'mindspore' was asked for where it cannot run.
    """
    if requested not in IMPLS:
        raise ValueError(f"thor_impl must be one of {', '.join(IMPLS)}, got {requested!r}")
    if requested == "msexp":
        return "msexp"
    if device_target == "Ascend":
        return "mindspore"
    if requested == "mindspore":
        why = ("needs ThorIm2Col and CholeskyTrsm, which CPU lacks" if device_target == "CPU"
               else "runs on GPU only through ModelThor in dataset-sink mode, which msexp's "
                    "per-step loop does not use")
        raise ValueError(f"thor_impl=mindspore cannot run on {device_target}: nn.thor {why}; "
                         "use thor_impl=msexp or auto")
    return "msexp"


class Thor(nn.Momentum):
    """THOR over every trainable parameter of `network`; see the module docstring.

    Installs taps around the network's Dense/Conv2d layers (weight names are kept).
    `TrainStep` drives it: `refresh_due()`, `capturing()`, `collect()`, `invert()`, `advance()`.

    Args:
        network: the (possibly AMP-cast) network; its THOR layers get wrapped.
        learning_rate: a float or one value per update.
        damping: a float or one value per update (see `thor_damping`).
        momentum: momentum coefficient.
        weight_decay: L2 weight decay, applied after preconditioning.
        frequency: A/G and their inverses are recomputed every `frequency` updates (>= 2).
        split_indices: layer indices that close groups (sorted, < number of THOR layers).
    """

    def __init__(self, network: nn.Cell, learning_rate: float | list[float],
                 damping: float | list[float], momentum: float, weight_decay: float = 0.0,
                 frequency: int = 100, split_indices: Sequence[int] = ()):
        if isinstance(frequency, bool) or not isinstance(frequency, int) or frequency < 2:
            raise ValueError(f"frequency must be an integer >= 2, got {frequency!r}")
        taps = install_taps(network)
        self._groups = layer_groups(split_indices, len(taps))
        super().__init__(network.trainable_params(), learning_rate, momentum,
                         weight_decay=weight_decay)
        by_weight = {id(tap.layer.weight): i for i, tap in enumerate(taps)}
        self.layer_of = tuple(by_weight.get(id(p), -1) for p in self._parameters)
        object.__setattr__(self, "taps", taps)
        object.__setattr__(self, "_network", network)
        self.state = FactorState(taps)
        self.damping = [float(d) for d in np.atleast_1d(damping)]
        self.frequency = frequency
        self.steps = 0
        self.inverse_s = 0.0
        self._collect: Any = None
        self._inverts: list[Any] = []

    @property
    def groups(self) -> list[list[int]]:
        """THOR layer numbers of each group."""
        return [list(g) for g in self._groups]

    def construct(self, gradients):
        new = ()
        for i in range(len(gradients)):
            grad = gradients[i]
            layer = self.layer_of[i]
            if layer >= 0:
                shape = grad.shape
                flat = ops.reshape(grad, (shape[0], -1))
                flat = ops.matmul(ops.matmul(self.state.g_inv[layer], flat),
                                  self.state.a_inv[layer])
                grad = ops.reshape(flat, shape)
            new = new + (grad,)
        return super().construct(new)

    def refresh_due(self) -> bool:
        """Whether this update recomputes A, G and their inverses."""
        return self.steps % self.frequency == 0

    def advance(self) -> None:
        """Count one update (applied or skipped)."""
        self.steps += 1

    def reset_from(self, fresh: Thor) -> None:
        """Take a freshly built THOR's schedule and counters (its Parameters are set apart)."""
        self.damping, self.frequency = fresh.damping, fresh.frequency
        self.steps, self.inverse_s = 0, 0.0

    def probes(self, sample: Any) -> list[Parameter]:
        """The zero probes whose gradients are dL/d(output), shaped for micro-batch `sample`.

        The first call runs the network once (in PyNative mode, whatever the context's
        mode, and eval mode) to learn each layer's input and output shape and creates the
        capture buffers.
        """
        if not self._inverts:
            self._attach(sample)
        return [tap.probe for tap in self.taps]

    def _attach(self, sample: Any) -> None:
        shapes: dict[int, tuple[Any, Any]] = {}

        def record(i: int) -> Any:
            def hook(cell: nn.Cell, inputs: Any, output: Any) -> None:
                shapes[i] = (inputs[0].shape, output.shape)
            return hook

        handles = [tap.layer.register_forward_hook(record(i)) for i, tap in enumerate(self.taps)]
        network = self._network
        training, mode = network.training, ms.get_context("mode")
        network.set_train(False)
        ms.set_context(mode=ms.PYNATIVE_MODE)  # forward hooks run only there
        try:
            network(sample)
        finally:
            ms.set_context(mode=mode)
            for handle in handles:
                handle.remove()
            network.set_train(training)
        if len(shapes) < len(self.taps):
            raise RuntimeError("THOR learns layer shapes from one forward pass, but the "
                               f"forward hooks of {len(self.taps) - len(shapes)} of its "
                               f"{len(self.taps)} layers did not run")
        for i, tap in enumerate(self.taps):
            tap.set_shapes(i, *shapes[i])
        self._collect = jit_collect(Collect(nn.CellList(self.taps, auto_prefix=False),
                                              self.state))
        self._inverts = [jit_invert(Invert(group, self.state)) for group in self._groups]

    @contextmanager
    def capturing(self) -> Iterator[None]:
        """Taps keep inputs and add probes while graphs run (or compile) inside."""
        for tap in self.taps:
            tap.capture = True
        try:
            yield
        finally:
            for tap in self.taps:
                tap.capture = False

    def collect(self, douts: Sequence[Tensor], loss_scale: float = 1.0) -> None:
        """Add one micro-batch's factors from the captured inputs and probe gradients."""
        began = time.perf_counter()
        self._collect(ms.mutable(tuple(douts)), Tensor(loss_scale, ms.float32))
        self._finish(began)

    def invert(self) -> None:
        """Damp and invert the collected factors, one compiled graph per group."""
        began = time.perf_counter()
        damping = Tensor(self.damping[min(self.steps, len(self.damping) - 1)], ms.float32)
        for invert in self._inverts:
            invert(damping)
        self._finish(began)

    def _finish(self, began: float) -> None:
        if ms.get_context("device_target") != "CPU":
            ms.runtime.synchronize()
        if self.steps > 0:
            self.inverse_s += time.perf_counter() - began


