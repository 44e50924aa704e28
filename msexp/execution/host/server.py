"""The host process (`python -m msexp.execution.host.server FD`): imports MindSpore once,
then runs the requests the sweep sends on its channel (see `link`) until it closes; on CPU
each trial runs in a forked child (`zygote`), elsewhere in this process (`running`). A
data-parallel trial (`devices` > 1) runs through msrun."""

from __future__ import annotations

import os
import signal
import sys

from msexp.execution import process_tree
from msexp.execution.host.link import HostEnd
from msexp.execution.host.running import StopFlag, run_logged
from msexp.execution.host.zygote import Zygote
from msexp.execution.local import WarmGraphs
from msexp.execution.protocol import (
    TrialRequest,
)


def serve(channel: int) -> None:
    """Run the requests the sweep sends on the socket `channel` (see `link`) until it closes.

    On CPU this process is a zygote: it imports MindSpore and msexp's training code once
    and forks a trial child per trial, so every trial starts clean (own memory, own
    graphs) without paying the import (see `Zygote`). Elsewhere (GPU, Ascend: device
    runtimes do not survive a fork), or with MSEXP_FORK=0, it runs each trial itself, and
    its last trial's graphs stay in this process for the next.
    """
    fork = _preload()
    with process_tree.subreaper() as adopts:  # a trial's orphans stay in this tree, killed
        _serve(channel, fork, adopts)


def _serve(channel: int, fork: bool, adopts: bool) -> None:
    zygote = Zygote(channel, int(os.environ.get("MSEXP_WARM", "1")))
    stop, warm = StopFlag(), WarmGraphs()
    if fork:  # a trial child that ignores its stop is killed; this process stays
        link = HostEnd(channel, lambda: zygote.signal(signal.SIGUSR1),
                       lambda: zygote.signal(signal.SIGKILL))
    else:  # the trial runs here: one that ignores its stop takes this process with it
        link = HostEnd(channel, stop.stop, lambda: os.kill(os.getpid(), signal.SIGKILL))
    link.say_ready(adopts)  # the sweep's trial clocks start now
    try:
        for line in link:
            zygote.reap()
            request = TrialRequest.from_json(line)
            if fork:
                zygote.run(request, line)
            else:
                run_logged(request, stop, warm)
            link.say_ended()
    finally:
        zygote.close()


def _preload() -> bool:
    """Import what every trial needs; return whether trials may run in forked children.
    A command's trials (MSEXP_PRELOAD=0) need nothing imported: each runs its own process."""
    fork = os.environ.get("MSEXP_FORK", "1") != "0"
    if os.environ.get("MSEXP_PRELOAD") == "0":
        return fork
    try:  # a failure here re-raises inside the trial, where its log shows it
        import mindspore as ms  # here, not at the top: a failure must reach the trial's log

        import msexp.training.loop  # noqa: F401

        threads = os.environ.get("MSEXP_THREADS")
        if threads:
            ms.set_context(runtime_num_threads=int(threads))
        device = ms.get_context("device_target")
        slot = os.environ.get("MSEXP_SLOT")
        if device != "CPU" and slot is not None:  # one device per host, round robin
            count = getattr(ms.device_context, device.lower()).device_count()
            ms.set_device(device, int(slot) % max(1, count))
    except Exception:
        return False
    return device == "CPU" and fork


if __name__ == "__main__":
    serve(int(sys.argv[1]))
