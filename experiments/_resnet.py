"""The ResNet's cells, at module level: AMP O1 rewrites a network from its classes' source,
which must not depend on a function's local names."""

from __future__ import annotations

from mindspore import nn, ops


def conv(in_ch: int, out_ch: int, kernel: int, stride: int = 1) -> nn.Cell:
    return nn.Conv2d(in_ch, out_ch, kernel, stride, pad_mode="same", has_bias=False)


def bn(ch: int) -> nn.Cell:
    return nn.BatchNorm2d(ch, momentum=0.9)


class Residual(nn.Cell):
    """relu(body(x) + shortcut(x))."""

    def __init__(self, body: nn.Cell, shortcut: nn.Cell):
        super().__init__()
        self.body, self.shortcut, self.relu = body, shortcut, nn.ReLU()

    def construct(self, x):
        return self.relu(self.body(x) + self.shortcut(x))


def make_block(in_ch: int, ch: int, stride: int, block: str) -> tuple[nn.Cell, int]:
    """One residual block and its output channels."""
    if block == "basic":
        out_ch = ch
        body = nn.SequentialCell(conv(in_ch, ch, 3, stride), bn(ch), nn.ReLU(),
                                 conv(ch, ch, 3), bn(ch))
    else:  # v1.5: the stride sits on the 3x3 convolution, not the first 1x1
        out_ch = 4 * ch
        body = nn.SequentialCell(conv(in_ch, ch, 1), bn(ch), nn.ReLU(),
                                 conv(ch, ch, 3, stride), bn(ch), nn.ReLU(),
                                 conv(ch, out_ch, 1), bn(out_ch))
    shortcut = (nn.Identity() if stride == 1 and in_ch == out_ch else
                nn.SequentialCell(conv(in_ch, out_ch, 1, stride), bn(out_ch)))
    return Residual(body, shortcut), out_ch


class ResNet(nn.Cell):
    """A 3x3 stem, three stages of `blocks` blocks, global average pooling, a Dense head."""

    def __init__(self, blocks: int, width: int, block: str, num_classes: int, channels: int):
        super().__init__()
        layers: list[nn.Cell] = [conv(channels, width, 3), bn(width), nn.ReLU()]
        in_ch = width
        for stage, ch in enumerate((width, 2 * width, 4 * width)):
            for i in range(blocks):
                cell, in_ch = make_block(in_ch, ch, 2 if stage and not i else 1, block)
                layers.append(cell)
        self.features = nn.SequentialCell(layers)
        self.head = nn.Dense(in_ch, num_classes)

    def construct(self, x):
        return self.head(ops.mean(self.features(x), (2, 3)))
