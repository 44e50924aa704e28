"""`plan --check` for a workload: one micro-batch forward, loss and backward, checked.

The mistakes it names are the ones that otherwise surface mid-sweep as raw NumPy or
MindSpore errors: a loss that is not a scalar, logits whose class count does not match
the labels, float or one-hot labels where the loss takes class indices.
"""

from __future__ import annotations

from typing import Any

import mindspore as ms
import numpy as np
from mindspore import ops

from msexp.experiment import Workload
from msexp.training.data import EvalBatches
from msexp.training.step import call, tensors_of


def first_step_problem(workload: Workload, micro_batch: int) -> str | None:
    """What goes wrong in one micro-batch of training, in one line, or None."""
    x, y = next(iter(EvalBatches(workload.train, micro_batch)))
    network = workload.network
    network.set_train(True)
    logits = ops.cast(call(network, tensors_of(x)), ms.float32)
    labels = np.asarray(y)
    problem = _class_count(logits.shape, labels)
    if problem:
        return problem
    try:
        loss = workload.loss_fn(logits, ms.Tensor(y))
    except Exception as exc:
        return _label_kind(logits.shape, labels) or (
            f"loss_fn raised {type(exc).__name__}: {_first_line(exc)}")
    if loss.shape != ():
        return (f"loss_fn returns shape {tuple(loss.shape)}, not a scalar (use reduction="
                "'mean')")

    def forward(inputs: Any, labels: Any) -> Any:
        return workload.loss_fn(ops.cast(call(network, inputs), ms.float32), labels)

    try:
        ms.value_and_grad(forward, None, network.trainable_params())(tensors_of(x), ms.Tensor(y))
    except Exception as exc:
        return f"the backward pass raised {type(exc).__name__}: {_first_line(exc)}"
    return None


def _class_count(shape: tuple[int, ...], labels: np.ndarray) -> str | None:
    if len(shape) != 2 or labels.ndim != 1 or labels.dtype.kind not in "iu" or not labels.size:
        return None
    if labels.max() >= shape[1] or labels.min() < 0:
        return (f"the network gives {shape[1]} classes but labels range "
                f"{labels.min()}..{labels.max()}")
    return None


def _label_kind(shape: tuple[int, ...], labels: np.ndarray) -> str | None:
    """Why a loss refused these labels, if they are of a kind losses commonly refuse."""
    if labels.ndim == 2 and labels.shape == tuple(shape) and set(np.unique(labels)) <= {0, 1}:
        return (f"labels are one-hot ({labels.shape[1]} columns) but the loss takes class "
                "indices: give int32 labels of shape (N,)")
    if labels.ndim == 1 and labels.dtype.kind == "f":
        return f"labels are {labels.dtype} but the loss takes int32 class indices"
    return None


def _first_line(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0][:200] if lines else ""
