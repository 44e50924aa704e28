"""`resume`: the lines a `Model.train` script needs to continue a trial msexp runs again."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import mindspore as ms

from msexp.hooks.channel import resume_dir
from msexp.paths import newest_checkpoint

_FILE_NAME = re.compile(r"-(\d+)_\d+\.ckpt$")


def resume(network: Any, optimizer: Any = None, folder: Path | None = None) -> int:
    """Load the newest checkpoint a `ModelCheckpoint` wrote in the trial's outputs folder
    into `network` (and `optimizer`); return the epoch to continue from (0: from scratch).

    msexp sets MSEXP_RESUME only when it runs a trial again (after a kill or a
    preemption), so outside that, and outside msexp, this loads nothing and returns 0.
    """
    folder = folder or resume_dir()
    newest = newest_checkpoint(folder) if folder else None
    if newest is None:
        return 0
    loaded = ms.load_checkpoint(str(newest))
    ms.load_param_into_net(network, loaded)
    if optimizer is not None:
        ms.load_param_into_net(optimizer, loaded)
    print(f"msexp: resuming from {newest}", flush=True)
    if "epoch_num" in loaded:
        return int(loaded["epoch_num"].asnumpy())
    named = _FILE_NAME.search(newest.name)  # ModelCheckpoint's PREFIX-EPOCH_STEP.ckpt
    return int(named.group(1)) if named else 0
