"""THOR's layers and factors (see `training/thor.py`): which layers THOR preconditions, the
taps that capture each layer's input and output gradient, and the compiled graphs that
sum the Kronecker factors A and G and invert them, per group of layers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mindspore as ms
import numpy as np
from mindspore import Parameter, ParameterTuple, Tensor, nn, ops


def is_thor_layer(cell: nn.Cell) -> bool:
    """Whether THOR preconditions `cell`: a Dense, or a Conv2d with group 1 and NCHW data."""
    if isinstance(cell, nn.Dense):
        return True
    return (isinstance(cell, nn.Conv2d) and cell.group == 1
            and getattr(cell, "format", "NCHW") == "NCHW")


def count_layers(network: nn.Cell) -> int:
    """Number of THOR layers in `network`."""
    return len(find_layers(network))


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


def find_layers(network: nn.Cell) -> list[tuple[nn.Cell, str, nn.Cell]]:
    found, seen = [], set()
    for _, parent in network.cells_and_names():
        if isinstance(parent, Tap):
            continue
        for name, cell in parent.name_cells().items():
            if id(cell) not in seen and (is_thor_layer(cell) or isinstance(cell, Tap)):
                seen.add(id(cell))
                found.append((parent, name, cell))
    return found


class Tap(nn.Cell):
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


class Collect(nn.Cell):
    """Adds one micro-batch's factor sums: A += a^T a, G += ds^T ds, rows, samples."""

    def __init__(self, taps: nn.CellList, state: FactorState):
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


class Invert(nn.Cell):
    """Damps and inverts one group's factors, keeping the old inverse where not finite."""

    def __init__(self, layers: list[int], state: FactorState):
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


class FactorState(nn.Cell):
    """Factor sums and inverses of every THOR layer, float32."""

    def __init__(self, taps: Sequence[Tap]):
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


def jit_collect(cell: Collect) -> Any:
    @ms.jit
    def collect(douts, scale):
        return cell(douts, scale)

    return collect


def jit_invert(cell: Invert) -> Any:
    @ms.jit
    def invert(damping):
        return cell(damping)

    return invert


def install_taps(network: nn.Cell) -> list[Tap]:
    taps = []
    for parent, name, cell in find_layers(network):
        if isinstance(cell, Tap):
            raise ValueError("the network already has THOR taps; build a fresh network")
        names = {id(p): p.name for p in cell.get_parameters()}
        tap = Tap(cell)
        if isinstance(parent, (nn.SequentialCell, nn.CellList)):
            parent[int(name)] = tap
        else:
            setattr(parent, name, tap)
        for p in cell.get_parameters():
            p.name = names[id(p)]
        taps.append(tap)
    return taps
