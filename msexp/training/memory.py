"""Peak memory of one trial: the device allocator where it reports, else host peak RSS."""

from __future__ import annotations

import contextlib
import resource
from pathlib import Path

import mindspore as ms

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


class PeakMemory:
    """Tracks peak memory from construction on, also in a process that ran earlier trials."""

    def __init__(self) -> None:
        self._device = ms.get_context("device_target") != "CPU"
        if self._device:
            ms.runtime.reset_max_memory_allocated()
        _reset_rss_peak()

    def peak_mb(self) -> float:
        """Peak megabytes since construction."""
        if self._device:
            allocated = ms.runtime.max_memory_allocated()
            if allocated:
                return allocated / 2**20
        return _rss_peak_kb() / 1024


def _reset_rss_peak() -> None:
    """Reset the kernel's RSS high-water mark to the current RSS (Linux >= 4.0)."""
    with contextlib.suppress(OSError):  # older kernels: the peak covers the whole process
        _CLEAR_REFS.write_text("5")


def _rss_peak_kb() -> int:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
