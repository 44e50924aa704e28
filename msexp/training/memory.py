"""Memory of one trial: the process peak, and the memory the training itself holds.

`peak_mem_mb` is the device allocator's peak where it reports, else the process's peak
RSS. On CPU that is mostly MindSpore's runtime (about 300 MB), so it barely moves with
micro_size or AMP.

`train_mem_mb` is what the training holds at its peak: parameters, accumulation buffers,
optimizer state, and one update's activations and gradients, without the runtime.

- GPU/Ascend: the device allocator's peak (`ms.runtime.max_memory_allocated`) since the
  trial began; it counts the weights, buffers and optimizer state too.
- CPU: `ms.runtime` reports zeros there, and RSS cannot see it: kernel outputs come from
  MindSpore's CPU memory pool, which keeps its pages after a graph's first run, so from
  the second update on (or in a process that already ran the graph) an update moves RSS
  by under 3 MB, whatever the micro-batch (`ms.runtime.empty_cache` releases nothing on
  CPU). The pool's own counter does see it: `MS_DEV_RUNTIME_CONF=memory_statistics:True`
  prints its peak, but only at exit; `MS_ALLOC_CONF=memory_tracker:True` writes no blocks
  on CPU; MindSpore's profiler (`profile_memory=True`) records it. So the first update of
  each training step runs under the profiler, and train_mem_mb is the pool's peak in that
  update, plus the bytes of the state kept as host tensors outside the pool: every
  Parameter of the network and the optimizer, and the step's accumulation buffers. An
  update allocates the same in every run of its graph (compile run included: 27.81 vs
  27.83 MB, LeNet5 at micro-batch 512), so the figure is measured once per step object
  and reused by later (warm) trials that reuse the step.
  It costs about 0.03 s: the profiler's raw record is read, its analysis is skipped.
  Against an estimate of one update's activations and gradients (the input and every
  layer's output, kept for the backward pass) plus the state's bytes, it measured 0.86
  to 1.04 times the estimate on lenet_digits (batch 64 and 512) and mlp_digits (batch
  64) at micro_size 1 and 8: within 15% (tests/test_memory.py); mostly lower, as
  MindSpore frees or reuses some layer outputs. What the pool still holds when the
  update ends is taken off its peak, so tensors of earlier work in the process (which
  the update may materialise) do not count.

The figure is the update's peak: the larger of the accumulate graphs' (a micro-batch's
activations and the gradients) and the optimizer step's (copies the size of the weights,
from weight decay or an optimizer's own loss_scale). Where the second is larger, as on
ResNet-18 with small images, micro_size does not move it (docs/how-a-trial-runs.md).
"""

from __future__ import annotations

import contextlib
import csv
import resource
import tempfile
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mindspore as ms

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")
_RECORDS = "**/cpu_ms_memory_record_*.txt"  # the Profiler's CPU memory pool record

_ONE_STEP = ms.profiler.schedule(wait=0, warmup=1, active=1, repeat=1)
_ONE_STEP.warmup = 0  # the profiler's first step records and saves (MindSpore warns of a
# schedule made without warmup, and of a profiler stopped while it records)

_pool_peaks: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
"""Pool peak bytes of one update, by training step object (reused by warm trials)."""


class PeakMemory:
    """Tracks peak memory from construction on, also in a process that ran earlier trials."""

    def __init__(self) -> None:
        self._device = ms.get_context("device_target") != "CPU"
        if self._device:
            ms.runtime.reset_max_memory_allocated()
        _reset_rss_peak()
        self._pool_peak: int | None = None

    def peak_mb(self) -> float:
        """Peak megabytes since construction."""
        if self._device:
            allocated = ms.runtime.max_memory_allocated()
            if allocated:
                return allocated / 2**20
        return _rss_peak_kb() / 1024

    @contextlib.contextmanager
    def update(self, step: Any) -> Iterator[None]:
        """Wrap one update of `step`: on CPU, the first update of a step object in this
        process runs under MindSpore's memory profiler (see the module's docstring)."""
        if self._device or step in _pool_peaks:
            self._pool_peak = _pool_peaks.get(step)
            yield
            return
        with tempfile.TemporaryDirectory(prefix="msexp-mem-") as folder:
            began = time.time_ns()
            with ms.profiler.profile(  # the raw record is enough: no parsing (about 1 s)
                    activities=[ms.profiler.ProfilerActivity.CPU], profile_memory=True,
                    schedule=_ONE_STEP,
                    on_trace_ready=ms.profiler.tensorboard_trace_handler(folder,
                                                                         analyse_flag=False)
            ) as profiler:
                yield
                profiler.step()  # the step recorded and saved: stopped without a warning
            peak = _pool_peak(Path(folder), began, time.time_ns())
        if peak is not None:
            _pool_peaks[step] = self._pool_peak = peak

    def metrics(self, network: Any, optimizer: Any, buffers: Any) -> dict[str, float]:
        """peak_mem_mb, and train_mem_mb where it could be measured (`buffers`: the
        training step's accumulation buffers)."""
        found = {"peak_mem_mb": self.peak_mb()}
        if self._device:
            allocated = ms.runtime.max_memory_allocated()
            if allocated:
                found["train_mem_mb"] = allocated / 2**20
        elif self._pool_peak is not None:
            state = state_bytes(network, optimizer, buffers)
            found["train_mem_mb"] = (self._pool_peak + state) / 2**20
        return found


def state_bytes(network: Any, optimizer: Any, buffers: Any) -> int:
    """Bytes of the network's and the optimizer's Parameters and of the accumulation
    buffers, a shared one once."""
    params = {id(p): p for cell in (network, optimizer) for p in cell.get_parameters()}
    params.update((id(b), b) for b in buffers)
    return sum(p.nbytes for p in params.values())


def _pool_peak(folder: Path, began_ns: int, ended_ns: int) -> int | None:
    """Peak bytes the update allocated from the CPU memory pool between the two times: the
    pool's peak less what it still held at the end (tensors of earlier work that this
    update happened to materialise, which outlive it), from the Profiler's record."""
    allocated = []
    for record in folder.glob(_RECORDS):
        with record.open(newline="") as rows:
            allocated += [(int(row["Timestamp(ns)"]), int(row["Total Allocated(Byte)"]))
                          for row in csv.DictReader(rows)
                          if began_ns <= int(row["Timestamp(ns)"]) <= ended_ns]
    if not allocated:
        return None
    return max(v for _, v in allocated) - max(allocated)[1]


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
