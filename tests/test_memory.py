"""train_mem_mb: the training's own memory, against an analytic estimate (ResNets:
tests/test_memory_resnet.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import mindspore as ms
import numpy as np
import pytest

from msexp.experiment import load_experiment
from msexp.spec.params import parse_params
from msexp.training import memory
from msexp.training.loop import train
from msexp.training.optim import make_optimizer
from msexp.training.step import TrainStep
from tests.conftest import builtin

lenet_digits = builtin("lenet_digits")
BATCH = 512
ERROR = 0.15  # measured / estimate - 1, documented in memory.py and docs/how-a-trial-runs.md


def params(**overrides):
    exp = load_experiment("lenet_digits")
    knobs = {"batch_size": BATCH, "epochs": 1, **overrides}
    return parse_params("test", exp.knobs, knobs, {}).resolve({})


def estimate_mb(network: ms.nn.SequentialCell, micro_batch: int) -> float:
    """One update's activations (the input and every layer's output, kept for the backward
    pass) and gradients, plus weights, momentum and accumulation buffers, in float32."""
    x = ms.Tensor(np.zeros((1, 1, 32, 32), np.float32))
    per_sample = x.size
    for cell in network.cell_list:
        x = cell(x)
        per_sample += x.size
    weights = sum(p.size for p in network.trainable_params())
    return 4 * (per_sample * micro_batch + 4 * weights) / 2**20


@pytest.fixture(scope="module")
def measured() -> dict[int, tuple[float, float]]:
    """micro_size -> (train_mem_mb, estimate) of a 1-epoch LeNet5 trial at batch 512."""
    found = {}
    for micro_size in (1, 8):
        p = params(micro_size=micro_size)
        workload = lenet_digits.build(p)
        estimate = estimate_mb(workload.network, BATCH // micro_size)
        metrics = train(workload, p, lambda epoch: None).metrics
        found[micro_size] = (metrics["train_mem_mb"], estimate)
    return found


@pytest.mark.slow  # over 5 s: the fast tier stays quick
def test_accumulation_shrinks_the_training_memory(measured) -> None:
    assert measured[8][0] <= 0.5 * measured[1][0], measured


@pytest.mark.parametrize("micro_size", [1, 8])
def test_train_mem_agrees_with_the_estimate(measured, micro_size: int) -> None:
    got, estimate = measured[micro_size]
    assert abs(got / estimate - 1) <= ERROR, (got, estimate)


def test_a_step_is_measured_once_per_process(monkeypatch) -> None:
    # a warm trial reuses the step object: its figure must not need a second profile
    p = params(batch_size=32, micro_size=2)
    network = lenet_digits.lenet5()
    optimizer = make_optimizer(p, network.trainable_params(), steps_per_epoch=1)
    step = TrainStep(network, ms.nn.CrossEntropyLoss(), optimizer, 2)
    x = ms.Tensor(np.zeros((16, 1, 32, 32), np.float32))
    y = ms.Tensor(np.zeros(16, np.int32))
    first = memory.PeakMemory()
    with first.update(step):
        step([(x, y), (x, y)])
    cold = first.metrics(network, optimizer, step.buffers)["train_mem_mb"]

    def no_profiler(*args, **kwargs):
        raise AssertionError("profiled again")

    monkeypatch.setattr(ms.profiler, "profile", no_profiler)
    second = memory.PeakMemory()
    with second.update(step):
        step([(x, y), (x, y)])
    assert second.metrics(network, optimizer, step.buffers)["train_mem_mb"] == cold
    assert cold > memory.state_bytes(network, optimizer, step.buffers) / 2**20


def test_the_profiler_stops_without_a_warning() -> None:
    # MindSpore warns "Incorrect schedule: Stop profiler while current state is RECORD"
    # where a profile ends without its step: `msexp run` printed it among its results
    code = textwrap.dedent("""
        import mindspore as ms, numpy as np
        from msexp.training import memory
        from msexp.training.step import TrainStep
        net = ms.nn.Dense(8, 2)
        optimizer = ms.nn.SGD(net.trainable_params())
        step = TrainStep(net, ms.nn.CrossEntropyLoss(), optimizer, 1)
        x, y = ms.Tensor(np.ones((4, 8), np.float32)), ms.Tensor(np.zeros(4, np.int32))
        peak = memory.PeakMemory()
        with peak.update(step):
            step([(x, y)])
        print("train_mem_mb", peak.metrics(net, optimizer, step.buffers)["train_mem_mb"])
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=True)
    assert "train_mem_mb" in done.stdout, done.stdout
    assert "Profiler" not in done.stderr and "schedule" not in done.stderr, done.stderr


# -- the parts of the figure, exact (mutation profile "hosts") --------------------------

RECORD = "Timestamp(ns),Total Allocated(Byte),Total Reserved(Byte)\n"


def test_the_pool_peak_is_the_updates_own_from_the_profilers_record(tmp_path) -> None:
    rows = [(5, 5000), (10, 300), (20, 800), (30, 200), (40, 9000)]
    record = tmp_path / "deep" / "cpu_ms_memory_record_1.txt"
    record.parent.mkdir()
    record.write_text(RECORD + "".join(f"{t},{b},0\n" for t, b in rows))
    assert memory._pool_peak(tmp_path, 10, 30) == 800 - 200, "the peak less what it kept"
    assert memory._pool_peak(tmp_path, 11, 29) == 0
    assert memory._pool_peak(tmp_path, 41, 50) is None
    (tmp_path / "cpu_ms_memory_record_2.txt").write_text(RECORD + "35,4000,0\n")
    assert memory._pool_peak(tmp_path, 10, 35) == 4000 - 4000


def test_the_peak_rss_is_the_kernels_and_is_reset_at_the_start(tmp_path) -> None:
    status = dict(line.split(":", 1) for line in
                  memory._STATUS.read_text().splitlines())
    assert abs(memory._rss_peak_kb() - int(status["VmHWM"].split()[0])) < 50_000
    big = bytearray(300 * 2**20)
    big[::4096] = b"x" * len(big[::4096])  # touch every page
    high = memory._rss_peak_kb()
    del big
    peak = memory.PeakMemory()
    assert peak.peak_mb() * 1024 < high - 200 * 1024, "the earlier peak does not count"


def test_the_state_counts_each_parameter_once() -> None:
    network = lenet_digits.lenet5()
    optimizer = make_optimizer(params(optimizer="adam"), network.trainable_params(), 1)
    buffers = [ms.Parameter(ms.Tensor(np.zeros(10, np.float32)), name="buffer")]
    weights = sum(p.nbytes for p in network.get_parameters())
    moments = sum(p.nbytes for p in optimizer.get_parameters()
                  if p.name not in {q.name for q in network.get_parameters()})
    assert memory.state_bytes(network, optimizer, buffers) == weights + moments + 40
    assert memory.state_bytes(network, optimizer, []) == weights + moments
    assert moments >= 2 * weights, "adam's two moments"


def test_cpu_metrics_have_train_mem_only_once_measured() -> None:
    network = lenet_digits.lenet5()
    optimizer = make_optimizer(params(), network.trainable_params(), 1)
    peak = memory.PeakMemory()
    assert set(peak.metrics(network, optimizer, [])) == {"peak_mem_mb"}
    peak._pool_peak = 2**20
    found = peak.metrics(network, optimizer, [])
    state = memory.state_bytes(network, optimizer, [])
    assert found["train_mem_mb"] == (2**20 + state) / 2**20
    assert found["peak_mem_mb"] > 0


def test_on_a_device_both_figures_are_the_allocators_peak_in_megabytes(monkeypatch) -> None:
    # No GPU or Ascend here: the device name and the allocator's peak (bytes, as
    # ms.runtime reports it) are given; what is tested is what PeakMemory makes of them.
    device_target = ms.get_context

    def on_gpu(key: str):
        return "GPU" if key == "device_target" else device_target(key)

    resets: list[bool] = []
    monkeypatch.setattr(ms, "get_context", on_gpu)
    monkeypatch.setattr(ms.runtime, "reset_max_memory_allocated", lambda: resets.append(True))
    monkeypatch.setattr(ms.runtime, "max_memory_allocated", lambda: 3 * 2**20)
    peak = memory.PeakMemory()
    assert resets == [True], "the peak counts from the trial's start"
    assert peak.peak_mb() == 3.0
    assert peak.metrics(None, None, []) == {"peak_mem_mb": 3.0, "train_mem_mb": 3.0}
    monkeypatch.setattr(ms.runtime, "max_memory_allocated", lambda: 0)  # not reported
    found = peak.metrics(None, None, [])
    assert set(found) == {"peak_mem_mb"} and found["peak_mem_mb"] > 100, "the process's RSS"
