"""`msexp best --export`: a trial's model as files another program can load."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from msexp.execution.protocol import TrialRequest
from msexp.experiment import Workload


def export_model(request: TrialRequest, checkpoint: Path, folder: Path,
                 record: dict[str, Any]) -> tuple[list[Path], str | None]:
    """Write `model.ckpt`, `params.json` and, where the network exports, `model.mindir` into
    `folder`; return the files written and why no MindIR was written (None if it was)."""
    folder.mkdir(parents=True, exist_ok=True)
    written = [folder / "model.ckpt", folder / "params.json"]
    shutil.copyfile(checkpoint, written[0])
    written[1].write_text(json.dumps(record, indent=2, default=str), encoding="utf-8")
    if request.command is not None:
        return written, "a command's network is its own: msexp cannot build it"
    try:
        written.append(_mindir(request, checkpoint, folder / "model"))
    except Exception as exc:  # the checkpoint is the export; MindIR is a bonus
        return written, f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    return written, None


def _mindir(request: TrialRequest, checkpoint: Path, stem: Path) -> Path:
    import mindspore as ms  # lazy: MindSpore, only when exporting

    from msexp.training.data import EvalBatches
    from msexp.training.step import tensors_of

    workload = trained_workload(request, checkpoint)
    network = workload.network
    sample, _ = next(iter(EvalBatches(workload.eval, 1)))
    inputs = tensors_of(sample)
    ms.export(network, *(inputs if isinstance(inputs, tuple) else (inputs,)),
              file_name=str(stem), file_format="MINDIR")
    return stem.with_suffix(".mindir")


def trained_workload(request: TrialRequest, checkpoint: Path) -> Workload:
    """The workload of `request` (network, loss, data) with the network's weights loaded
    from `checkpoint` and set to evaluate: a trial's trained model."""
    import mindspore as ms  # lazy: MindSpore, only when a trained model is asked for

    from msexp.execution.local import build_workload

    workload = build_workload(request)
    ms.load_param_into_net(workload.network, ms.load_checkpoint(str(checkpoint)))
    workload.network.set_train(False)
    return workload
