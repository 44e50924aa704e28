"""Networks written the way users write them (Cell subclasses with `construct`), for
`step_vs_model.py`: msexp must be as fast on code it did not write.

- `TutorialLeNet5`: LeNet5 as the MindSpore tutorials describe it: two 5x5 valid
  convolutions with ReLU and 2x2 max pooling, then Dense 400-120-84-10 with
  `Normal(0.02)` weights, trained with `SoftmaxCrossEntropyWithLogits(sparse=True,
  reduction="mean")` at batch 32 on 32x32 inputs.
- `SmallResNet`: a 3x3 stem and two ResNet basic blocks (the second with stride 2 and a
  1x1 projection shortcut), global average pooling and a Dense head.
"""

from __future__ import annotations

import sys

import numpy as np
from mindspore import nn, ops
from mindspore.common.initializer import Normal


class TutorialLeNet5(nn.Cell):
    def __init__(self, num_class: int = 10, num_channel: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(num_channel, 6, 5, pad_mode="valid")
        self.conv2 = nn.Conv2d(6, 16, 5, pad_mode="valid")
        self.relu = nn.ReLU()
        self.max_pool2d = nn.MaxPool2d(kernel_size=2, stride=2)
        self.flatten = nn.Flatten()
        self.fc1 = nn.Dense(16 * 5 * 5, 120, weight_init=Normal(0.02))
        self.fc2 = nn.Dense(120, 84, weight_init=Normal(0.02))
        self.fc3 = nn.Dense(84, num_class, weight_init=Normal(0.02))

    def construct(self, x):
        x = self.max_pool2d(self.relu(self.conv1(x)))
        x = self.max_pool2d(self.relu(self.conv2(x)))
        x = self.flatten(x)
        x = self.relu(self.fc1(x))
        x = self.relu(self.fc2(x))
        return self.fc3(x)


class BasicBlock(nn.Cell):
    """relu(bn(conv(relu(bn(conv(x))))) + shortcut(x)), as in ResNet-18."""

    def __init__(self, in_ch: int, out_ch: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride, pad_mode="same", has_bias=False)
        self.bn1 = nn.BatchNorm2d(out_ch)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, 1, pad_mode="same", has_bias=False)
        self.bn2 = nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU()
        self.project = stride != 1 or in_ch != out_ch
        if self.project:
            self.shortcut_conv = nn.Conv2d(in_ch, out_ch, 1, stride, has_bias=False)
            self.shortcut_bn = nn.BatchNorm2d(out_ch)

    def construct(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        shortcut = self.shortcut_bn(self.shortcut_conv(x)) if self.project else x
        return self.relu(out + shortcut)


class SmallResNet(nn.Cell):
    def __init__(self, num_class: int = 10, num_channel: int = 1, width: int = 8):
        super().__init__()
        self.stem = nn.Conv2d(num_channel, width, 3, pad_mode="same", has_bias=False)
        self.bn = nn.BatchNorm2d(width)
        self.relu = nn.ReLU()
        self.block1 = BasicBlock(width, width)
        self.block2 = BasicBlock(width, 2 * width, stride=2)
        self.head = nn.Dense(2 * width, num_class, weight_init=Normal(0.02))

    def construct(self, x):
        x = self.relu(self.bn(self.stem(x)))
        x = self.block2(self.block1(x))
        return self.head(ops.mean(x, (2, 3)))


def digits(size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """msexp's digits data (experiments/_digits.py), loaded as its built-in experiments load
    it: by path, through msexp's loader."""
    from msexp.experiment import load_experiment

    load_experiment("mlp_digits")  # imports its neighbour _digits by path
    return sys.modules["_digits"].digits(size)
