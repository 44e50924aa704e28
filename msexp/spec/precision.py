"""What the local device can run, found by probing it, and the sweep check that uses it.

A precision is supported when a tiny Conv2d + Dense network cast to it runs forward and
backward under `ms.jit` in a fresh process. Answers are cached per device target,
MindSpore version and dtype in `precision.json` under `$MSEXP_CACHE_DIR`
(default `~/.cache/msexp`), so each combination is probed once per machine.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msexp.errors import SpecError
from msexp.paths import write_atomic

_log = logging.getLogger("msexp")  # the CLI shows its warnings on stderr

if TYPE_CHECKING:
    from msexp.spec.space import Space

PROBE_TIMEOUT_S = 120.0
CACHE_FILE = "precision.json"


@dataclass(frozen=True)
class Support:
    """The answer of one probe."""

    device_target: str
    dtype: str
    ok: bool
    reason: str = ""


def cache_path() -> Path:
    """The JSON file that keeps probe answers."""
    folder = os.environ.get("MSEXP_CACHE_DIR") or Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "msexp"
    return Path(folder) / CACHE_FILE


def supports(dtype: str) -> Support | None:
    """Whether the local device runs AMP in `dtype`; None if the probe could not tell.

    The cache maps this host and interpreter to the device target MindSpore picks, and
    each device target and MindSpore version to the dtypes probed on it.
    """
    cache = _read_cache()
    machine = _machine_key()
    target = cache.get("machines", {}).get(machine)
    if target is not None:
        known = cache.get("targets", {}).get(_target_key(target), {}).get(dtype)
        if known is not None:
            return Support(target, dtype, known["ok"], known.get("reason", ""))
    answer = _probe(dtype)
    if answer is None:
        return None
    cache.setdefault("machines", {})[machine] = answer.device_target
    cache.setdefault("targets", {}).setdefault(_target_key(answer.device_target), {})[dtype] = {
        "ok": answer.ok, "reason": answer.reason}
    _write_cache(cache)
    return answer


def check_precision(source: str, space: Space) -> None:
    """Reject a sweep that can run AMP in a dtype the local device does not support.

    Only dtypes that some trial combines with an amp_level other than O0 are probed.

    Raises:
        SpecError: naming where the dtype (or the amp_level that uses it) is set.
    """
    for dtype in sorted(amp_dtypes(space)):
        answer = supports(dtype)
        if answer is None:
            _log.warning(f"{source}: could not probe whether this device runs {dtype}; "
                         "trials using it may fail")
            continue
        if not answer.ok:
            key, value = _where(space, dtype)
            raise SpecError(source, key, f"{answer.device_target} cannot run amp_dtype "
                            f"{dtype} ({answer.reason}); use another amp_dtype or amp_level O0",
                            value)


def amp_dtypes(space: Space) -> set[str]:
    """The amp_dtype values that some trial of `space` uses with amp_level O1, O2 or O3."""
    names = {"amp_level", "amp_dtype"}
    for param in space.params:
        if param.name in names:
            names |= set(param.when)
    found = set()
    for point in space.combos(names):
        values = space.resolve(point)  # drops what does not apply, amp_dtype under O0 too
        if values.get("amp_level", "O0") != "O0" and "amp_dtype" in values:
            found.add(values["amp_dtype"])
    return found


def _where(space: Space, dtype: str) -> tuple[str, Any]:
    for param in space.params:
        if param.name == "amp_dtype" and param.values and dtype in param.values:
            index = param.values.index(dtype)
            inner = ".values" if isinstance(param.written, dict) and "when" in param.written else ""
            return f"params.amp_dtype{inner}.{index}", dtype
    if "amp_dtype" in space.fixed:
        return "fixed.amp_dtype", dtype
    if "amp_level" in space.fixed:
        return "fixed.amp_level", space.fixed["amp_level"]
    return "params.amp_level", dtype


def _machine_key() -> str:
    return f"{socket.gethostname()} {sys.executable}"


def _target_key(target: str) -> str:
    try:
        version = metadata.version("mindspore")
    except metadata.PackageNotFoundError:
        version = "unknown"
    return f"{target} mindspore {version}"


def _read_cache() -> dict[str, Any]:
    try:
        cache = json.loads(cache_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return cache if isinstance(cache, dict) else {}


def _write_cache(cache: dict[str, Any]) -> None:
    path = cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(cache, indent=1, sort_keys=True))
    except OSError:
        pass  # a read-only home only costs a probe next time


def _probe(dtype: str) -> Support | None:
    package_root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "GLOG_v": "3", "PYTHONPATH": path}
    try:
        with tempfile.TemporaryDirectory(prefix="msexp-probe-") as scratch:  # MindSpore's IR dumps
            done = subprocess.run([sys.executable, "-m", "msexp.spec.precision", dtype], env=env,
                                  cwd=scratch, capture_output=True, text=True,
                                  timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return None
    answer = json.loads(lines[-1])
    return Support(answer["device_target"], dtype, answer["ok"], answer["reason"])


def _run_probe(dtype: str) -> dict[str, Any]:
    """Train one step of a tiny network in `dtype`; runs inside the probe process."""
    import mindspore as ms  # lazy: only the probe process imports MindSpore
    import numpy as np
    from mindspore import nn, ops

    target = ms.get_context("device_target")
    try:
        low = getattr(ms, dtype)
        network = nn.SequentialCell(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Dense(2 * 4 * 4, 3))
        network.to_float(low)
        weights = network.trainable_params()

        def loss(x):
            return ops.cast(network(x), ms.float32).sum()

        grad = ms.jit(ms.value_and_grad(loss, None, weights))
        value, grads = grad(ms.Tensor(np.ones((2, 1, 4, 4), np.float32)))
        if not np.isfinite(value.asnumpy()) or not all(np.isfinite(g.asnumpy()).all()
                                                      for g in grads):
            return {"device_target": target, "ok": False, "reason": "gradients not finite"}
    except Exception as exc:  # the failure is the answer
        return {"device_target": target, "ok": False, "reason": _one_line(exc)}
    return {"device_target": target, "ok": True, "reason": ""}


def _one_line(exc: Exception) -> str:
    """The line of a (long, multi-line) MindSpore error that says what failed."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip().strip("-")]
    telling = [line for line in lines if "support" in line.lower()] or lines or [""]
    text = f"{type(exc).__name__}: {telling[0]}"
    return text if len(text) <= 160 else text[:157] + "..."


if __name__ == "__main__":
    print(json.dumps(_run_probe(sys.argv[1])), flush=True)
