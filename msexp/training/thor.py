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
from mindspore import Parameter, ParameterTuple, Tensor, nn, ops

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


def is_thor_layer(cell: nn.Cell) -> bool:
    """Whether THOR preconditions `cell`: a Dense, or a Conv2d with group 1 and NCHW data."""
    if isinstance(cell, nn.Dense):
        return True
    return (isinstance(cell, nn.Conv2d) and cell.group == 1
            and getattr(cell, "format", "NCHW") == "NCHW")


def count_layers(network: nn.Cell) -> int:
    """Number of THOR layers in `network`."""
    return len(_find_layers(network))


def split_rule(indices: Any, n_layers: int) -> str | None:
    """The rule `split_indices` breaks for a network of `n_layers`, or None."""
    ok = (isinstance(indices, list)
          and all(isinstance(i, int) and not isinstance(i, bool) for i in indices)
          and all(0 <= i < n_layers for i in indices)
          and all(a < b for a, b in zip(indices, indices[1:])))
    return None if ok else f"indices must be sorted, distinct and < {n_layers}"


def layer_groups(split_indices: Sequence[int], n_layers: int) -> list[list[int]]:
    """Layer numbers per group: each split index closes a group, the rest form the last."""
    rule = split_rule(list(split_indices), n_layers)
    if rule:
        raise ValueError(f"split_indices: {rule} (the network has {n_layers} THOR layers), "
                         f"got {list(split_indices)}")
    groups, start = [], 0
    for end in [*split_indices, n_layers - 1]:
        if end >= start:
            groups.append(list(range(start, end + 1)))
            start = end + 1
    return groups


def _find_layers(network: nn.Cell) -> list[tuple[nn.Cell, str, nn.Cell]]:
    found, seen = [], set()
    for _, parent in network.cells_and_names():
        if isinstance(parent, _Tap):
            continue
        for name, cell in parent.name_cells().items():
            if id(cell) not in seen and (is_thor_layer(cell) or isinstance(cell, _Tap)):
                seen.add(id(cell))
                found.append((parent, name, cell))
    return found


class _Tap(nn.Cell):
    """Wraps a THOR layer; in capture mode it keeps the layer input and adds a zero probe
    to the pre-activation output, so the probe's gradient is dL/d(output)."""

    def __init__(self, layer: nn.Cell):
        super().__init__(auto_prefix=False)
        self.layer = layer
        self.is_conv = isinstance(layer, nn.Conv2d)
        self.activation = None
        if not self.is_conv and layer.activation_flag:
            self.activation, layer.activation_flag = layer.activation, False
        self.capture = False
        self.x_buf = Parameter(Tensor(np.zeros(1, np.float32)), requires_grad=False)
        self.probe = Parameter(Tensor(np.zeros(1, np.float32)), requires_grad=False)
        weight = layer.weight.shape
        self.dim_a = int(np.prod(weight[1:]))
        self.dim_g = int(weight[0])
        if self.is_conv:
            self.kernel = tuple(layer.kernel_size)
            self.stride = tuple(layer.stride)
            self.dilation = tuple(layer.dilation)
        self.pads = (0, 0, 0, 0)

    def construct(self, x):
        out = self.layer(x)
        if self.capture:
            ops.assign(self.x_buf, ops.cast(x, ms.float32))
            out = out + ops.cast(self.probe, out.dtype)
        if self.activation is not None:
            out = self.activation(out)
        return out

    def set_shapes(self, index: int, x_shape: tuple[int, ...], out_shape: tuple[int, ...]
                   ) -> None:
        """Create the capture buffer and the probe; for a convolution fix its padding."""
        self.x_buf = Parameter(Tensor(np.zeros(x_shape, np.float32)), name=f"thor.x.{index}",
                               requires_grad=False)
        self.probe = Parameter(Tensor(np.zeros(out_shape, np.float32)),
                               name=f"thor.probe.{index}", requires_grad=False)
        if self.is_conv:
            self.pads = self._padding(x_shape[2], x_shape[3])

    def _padding(self, height: int, width: int) -> tuple[int, int, int, int]:
        """(left, right, top, bottom) zero padding of the convolution's input."""
        mode, pad = self.layer.pad_mode.lower(), self.layer.padding
        if mode == "valid":
            return (0, 0, 0, 0)
        if mode == "pad":
            top, bottom, left, right = (pad,) * 4 if isinstance(pad, int) else pad
            return (left, right, top, bottom)
        sizes = []
        for size, k, s, d in zip((height, width), self.kernel, self.stride, self.dilation):
            total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
            sizes.append((total // 2, total - total // 2))
        return (*sizes[1], *sizes[0])

    def rows_a(self, x):
        """Layer inputs as rows: im2col patches (N*T, C*kh*kw) or (N*T, in)."""
        if not self.is_conv:
            return ops.reshape(x, (-1, self.dim_a))
        if any(self.pads):
            x = ops.pad(x, self.pads)
        cols = ops.unfold(x, self.kernel, self.dilation, 0, self.stride)
        return ops.reshape(ops.transpose(cols, (0, 2, 1)), (-1, self.dim_a))

    def rows_g(self, dout):
        """Output gradients as rows (N*T, out)."""
        if self.is_conv:
            dout = ops.transpose(dout, (0, 2, 3, 1))
        return ops.reshape(dout, (-1, self.dim_g))


class _Collect(nn.Cell):
    """Adds one micro-batch's factor sums: A += a^T a, G += ds^T ds, rows, samples."""

    def __init__(self, taps: nn.CellList, state: _FactorState):
        super().__init__(auto_prefix=False)
        self.taps, self.state = taps, state

    def construct(self, douts, scale):
        for i in range(len(self.taps)):
            tap = self.taps[i]
            a = tap.rows_a(tap.x_buf)
            g = tap.rows_g(ops.cast(douts[i], ms.float32)) / scale
            ops.assign_add(self.state.a_sum[i], ops.matmul(a.T, a))
            ops.assign_add(self.state.g_sum[i], ops.matmul(g.T, g))
            ops.assign_add(self.state.rows[i], ops.ones((1,), ms.float32) * a.shape[0])
            ops.assign_add(self.state.samples[i], ops.ones((1,), ms.float32) * douts[i].shape[0])
        return scale


class _Invert(nn.Cell):
    """Damps and inverts one group's factors, keeping the old inverse where not finite."""

    def __init__(self, layers: list[int], state: _FactorState):
        super().__init__(auto_prefix=False)
        self.layers, self.state = tuple(layers), state

    def construct(self, damping):
        root = ops.sqrt(damping)
        for i in self.layers:
            a_sum, g_sum = self.state.a_sum[i], self.state.g_sum[i]
            a = a_sum / self.state.rows[i] + root * ops.eye(a_sum.shape[0], a_sum.shape[0],
                                                              ms.float32)
            g = g_sum * self.state.samples[i] + root * ops.eye(g_sum.shape[0], g_sum.shape[0],
                                                               ms.float32)
            a_inv, g_inv = ops.inverse(a), ops.inverse(g)
            ok = ops.logical_and(ops.isfinite(a_inv).all(), ops.isfinite(g_inv).all())
            ops.assign(self.state.a_inv[i], ops.select(ok, a_inv, self.state.a_inv[i]))
            ops.assign(self.state.g_inv[i], ops.select(ok, g_inv, self.state.g_inv[i]))
            ops.assign(a_sum, ops.zeros_like(a_sum))
            ops.assign(g_sum, ops.zeros_like(g_sum))
            ops.assign(self.state.rows[i], ops.zeros_like(self.state.rows[i]))
            ops.assign(self.state.samples[i], ops.zeros_like(self.state.samples[i]))
        return damping


class _FactorState(nn.Cell):
    """Factor sums and inverses of every THOR layer, float32."""

    def __init__(self, taps: Sequence[_Tap]):
        super().__init__(auto_prefix=False)

        def params(kind: str, shape: Any, init: Any = np.zeros) -> ParameterTuple:
            return ParameterTuple(
                Parameter(Tensor(init(shape(t)).astype(np.float32)), name=f"thor.{kind}.{i}",
                          requires_grad=False) for i, t in enumerate(taps))

        self.a_sum = params("a_sum", lambda t: (t.dim_a, t.dim_a))
        self.g_sum = params("g_sum", lambda t: (t.dim_g, t.dim_g))
        self.rows = params("rows", lambda t: (1,))
        self.samples = params("samples", lambda t: (1,))
        self.a_inv = params("a_inv", lambda t: t.dim_a, np.eye)
        self.g_inv = params("g_inv", lambda t: t.dim_g, np.eye)


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
        taps = _install_taps(network)
        self._groups = layer_groups(split_indices, len(taps))
        super().__init__(network.trainable_params(), learning_rate, momentum,
                         weight_decay=weight_decay)
        by_weight = {id(tap.layer.weight): i for i, tap in enumerate(taps)}
        self.layer_of = tuple(by_weight.get(id(p), -1) for p in self._parameters)
        object.__setattr__(self, "taps", taps)
        object.__setattr__(self, "_network", network)
        self.state = _FactorState(taps)
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
        self._collect = _jit_collect(_Collect(nn.CellList(self.taps, auto_prefix=False),
                                              self.state))
        self._inverts = [_jit_invert(_Invert(group, self.state)) for group in self._groups]

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


def _jit_collect(cell: _Collect) -> Any:
    @ms.jit
    def collect(douts, scale):
        return cell(douts, scale)

    return collect


def _jit_invert(cell: _Invert) -> Any:
    @ms.jit
    def invert(damping):
        return cell(damping)

    return invert


def _install_taps(network: nn.Cell) -> list[_Tap]:
    taps = []
    for parent, name, cell in _find_layers(network):
        if isinstance(cell, _Tap):
            raise ValueError("the network already has THOR taps; build a fresh network")
        names = {id(p): p.name for p in cell.get_parameters()}
        tap = _Tap(cell)
        if isinstance(parent, (nn.SequentialCell, nn.CellList)):
            parent[int(name)] = tap
        else:
            setattr(parent, name, tap)
        for p in cell.get_parameters():
            p.name = names[id(p)]
        taps.append(tap)
    return taps
