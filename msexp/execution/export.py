"""`msexp best --export`: a trial's model as files another program can load."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from msexp.execution.protocol import TrialRequest


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

    from msexp.execution.local import build_workload
    from msexp.training.data import EvalBatches
    from msexp.training.step import tensors_of

    workload = build_workload(request)
    network = workload.network
    ms.load_param_into_net(network, ms.load_checkpoint(str(checkpoint)))
    network.set_train(False)
    sample, _ = next(iter(EvalBatches(workload.eval, 1)))
    inputs = tensors_of(sample)
    ms.export(network, *(inputs if isinstance(inputs, tuple) else (inputs,)),
              file_name=str(stem), file_format="MINDIR")
    return stem.with_suffix(".mindir")
