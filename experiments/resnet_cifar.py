"""A CIFAR-style ResNet v1.5 with BatchNorm: the AMP workload (O2 keeps BatchNorm in FP32).

Depth counts weighted layers as in He et al.'s CIFAR ResNets: 6n+2 with basic blocks
(8, 14, 20, ...) and 9n+2 with bottleneck blocks (11, 20, 29, ...), n blocks per stage,
three stages of width, 2*width and 4*width channels. Without a `data` section it trains
on seeded synthetic 32x32x3 images (see `_patterns.py`); with one it reads
CIFAR-10 binaries or an image folder.
"""

from __future__ import annotations

from typing import Any

from _patterns import patterns

from msexp.datasets import train_and_eval
from msexp.experiment import Workload

DATA_FORMATS = ("cifar10", "imagefolder")
DEFAULTS = {"epochs": 4, "batch_size": 64, "lr": 0.05, "optimizer": "momentum",
            "weight_decay": 0.0001}
PARAMS = {"depth": 8, "width": 16, "block": "basic"}
BLOCK_LAYERS = {"basic": 6, "bottleneck": 9}  # weighted layers per block in all three stages


def blocks_per_stage(depth: int, block: str) -> int:
    """n in depth = 6n+2 (basic) or 9n+2 (bottleneck).

    Raises:
        ValueError: unknown block or a depth the block cannot make.
    """
    if block not in BLOCK_LAYERS:
        raise ValueError(f"block must be one of {', '.join(BLOCK_LAYERS)}, got {block!r}")
    per = BLOCK_LAYERS[block]
    if depth < per + 2 or (depth - 2) % per:
        raise ValueError(f"depth must be {per}n+2 with {block} blocks (e.g. {per + 2}, "
                         f"{2 * per + 2}), got {depth}")
    return (depth - 2) // per


def resnet(depth: int = 8, width: int = 16, block: str = "basic", num_classes: int = 10,
           channels: int = 3) -> Any:
    """The network: a 3x3 stem, three stages of residual blocks, global average pooling."""
    from _resnet import ResNet  # lazy: imports MindSpore; plans stay fast

    return ResNet(blocks_per_stage(depth, block), width, block, num_classes, channels)


def build(params: dict[str, Any]) -> Workload:
    from mindspore import nn  # lazy: plans read this module without MindSpore

    network = resnet(params["depth"], params["width"], params["block"])
    def builtin() -> tuple[Any, Any, str]:
        x_train, y_train, x_eval, y_eval, description = patterns()
        return (x_train, y_train), (x_eval, y_eval), description

    train, held, description = train_and_eval(params.get("data"), 32, 3, builtin)
    return Workload(network, nn.CrossEntropyLoss(), train, held, data_source=description)
