"""A trial of the user's own command: run it with the trial's params, read what it reports.

The command runs in the sweep file's folder with the trial's params as arguments (only
the values the sweep file sets; the script keeps its own defaults), in this process's
group, so a timeout or a prune kills it with the trial; what it leaves running when it
exits is killed then (see `process.kill_leftovers`). Its output goes to the trial's
log and is read for metrics:

- `name: value` alone on a line, `name=value` pairs, and JSON (or Python dict) lines;
- MindSpore's `LossMonitor` (train_loss) and `TimeMonitor` (step_ms) lines;
- the sweep's `metrics` regexes, whose named groups are metrics.

The last value of each metric is final. A script that uses `msexp.hooks` also reports
epochs through the events file in MSEXP_EVENTS, which is what pruning acts on.
"""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Callable

from msexp.execution.process import (
    become_subreaper,
    descendants,
    die_with_parent,
    exit_reason,
    kill_leftovers,
    msrun_argv,
    secret_name,
)
from msexp.execution.protocol import Epoch, EventReader, Start, TrialRequest
from msexp.keys import TrialEnv
from msexp.paths import newest_checkpoint, search_path
from msexp.training.records import Stopped
from msexp.urls import redact

POLL_S = 0.05
DRAIN_S = 5.0  # reading what the command wrote after it exited (a stray may hold it open)
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)"
_LOSS_MONITOR = re.compile(rf"epoch:\s*\d+\s+step:\s*\d+,?\s*loss is\s*\[?({_NUMBER})", re.I)
_TIME_MONITOR = re.compile(rf"epoch time:\s*({_NUMBER})\s*ms,\s*per step time:\s*({_NUMBER})")
_ALONE = re.compile(rf"^\s*([A-Za-z_][\w.\-/]*)\s*:\s*({_NUMBER})\s*$")
_PAIR = re.compile(rf"(?<![\w.])([A-Za-z_][\w.\-/]*)=({_NUMBER})(?![\w.])")


class CommandFailed(RuntimeError):
    """The command exited with an error; the message says how, and its last output line."""


def arguments(params: dict[str, Any], style: str) -> list[str]:
    """The command-line arguments that pass `params` to a script, in `style`."""
    if style == "none":
        return []
    prefix = "--" if style == "flags" else ""
    return [f"{prefix}{name}={_text(value)}" for name, value in params.items()]


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


class MetricReader:
    """Reads metrics from output lines; keeps the last value of each."""

    def __init__(self, patterns: Iterable[str] = ()):
        self.patterns = [re.compile(p) for p in patterns]
        self.last: dict[str, float] = {}
        self.last_line = ""

    def feed(self, line: str) -> dict[str, float]:
        """The metrics in one line (also kept as the latest values)."""
        self.last_line = line.strip() or self.last_line
        found = {**_structured(line), **_monitors(line), **_pairs(line)}
        for pattern in self.patterns:
            match = pattern.search(line)
            if match:
                found.update({k: float(v) for k, v in match.groupdict().items()
                              if v is not None and _is_number(v)})
        self.last.update(found)
        return found


def _structured(line: str) -> dict[str, float]:
    text = line.strip()
    if not (text.startswith("{") and text.endswith("}")):
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        try:
            data = ast.literal_eval(text)  # print(model.eval(...)) writes a Python dict
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): float(v) for k, v in data.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _monitors(line: str) -> dict[str, float]:
    found = {}
    loss = _LOSS_MONITOR.search(line)
    if loss:
        found["train_loss"] = float(loss.group(1))
    timing = _TIME_MONITOR.search(line)
    if timing:
        found["step_ms"] = float(timing.group(2))
    return found


def _pairs(line: str) -> dict[str, float]:
    alone = _ALONE.match(line)
    if alone:
        return {alone.group(1): float(alone.group(2))}
    return {name: float(value) for name, value in _PAIR.findall(line)}


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def run_command(request: TrialRequest, emit: Callable[[Any], None],
                stop_requested: Callable[[], bool]) -> tuple[dict[str, float], Path | None]:
    """Run the request's command to its end; emit its epochs; return its final metrics and
    the newest checkpoint it wrote into its outputs folder (if any).

    A trial run again (after a kill or a preemption) finds its outputs folder as the
    last attempt left it, and gets MSEXP_RESUME naming it.

    Raises:
        Stopped: the orchestrator asked the trial to stop (the command got SIGUSR1,
            which `msexp.hooks` turns into a clean stop of `Model.train`).
        RuntimeError: the command failed, or reported no metric.
    """
    command = request.command
    assert command is not None and request.folder is not None
    folder = request.folder
    outputs = folder / "outputs"
    outputs.mkdir(parents=True, exist_ok=True)
    params_file = folder / "params.json"
    params_file.write_text(json.dumps(request.params), encoding="utf-8")
    channel = folder / "reports.jsonl"
    channel.write_text("")
    passed = {name: os.environ[name] for name in command.pass_env if name in os.environ}
    env = {**public_environment(), **passed, TrialEnv.PARAMS: str(params_file),
           TrialEnv.OUTPUT_DIR: str(outputs), TrialEnv.EVENTS: str(channel),
           "PYTHONUNBUFFERED": "1", "PATH": search_path()}
    if any(outputs.iterdir()):
        env[TrialEnv.RESUME] = str(outputs)
    params = {k: v for k, v in request.params.items() if k != "devices"}  # msexp's own
    argv = [*command.argv, *arguments(params, command.args)]
    devices = request.params.get("devices", 1)
    if devices > 1:  # `python script.py ...` as msrun ranks; rank 0's output is read
        argv = msrun_argv(devices, folder / "ranks", argv[1:], env["PATH"], tail_rank=0)
    become_subreaper()  # helpers that leave the session and the marker stay ours to kill
    kept = descendants(os.getpid())  # what this process ran before: not the trial's
    proc = subprocess.Popen(argv, cwd=command.cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace",
                            preexec_fn=die_with_parent)
    emit(Start(" ".join(command.argv), proc.pid))
    reader = MetricReader(command.metrics)
    lines = threading.Thread(target=_copy_output, args=(proc, reader), daemon=True)
    lines.start()
    epochs = _Epochs(EventReader(channel), emit)
    stopped = False
    while proc.poll() is None:
        epochs.forward()
        if stop_requested() and not stopped:
            stopped = True
            proc.send_signal(signal.SIGUSR1)
        time.sleep(POLL_S)
    kill_leftovers(kept)  # a daemon it left would hold its output open forever
    lines.join(DRAIN_S)
    epochs.forward()
    if stopped:
        raise Stopped(f"stopped after epoch {epochs.count}")
    if proc.returncode:
        last = f": {reader.last_line}" if reader.last_line else ""
        raise CommandFailed(exit_reason(proc.returncode, "the command") + last)
    metrics = {**reader.last, **epochs.last}
    if not metrics:
        raise RuntimeError("the command reported no metric: print `name: value` lines, "
                           "use msexp.hooks, or set experiment.metrics regexes")
    return metrics, newest_checkpoint(outputs)


def public_environment() -> dict[str, str]:
    """This process's environment without secrets, for a user's command: no variable whose
    name says it holds one (PASSWORD, TOKEN, SECRET, KEY), none holding a URL's password
    (the sweep file's `experiment.pass_env` names those it passes on purpose)."""
    return {name: value for name, value in os.environ.items()
            if not secret_name(name) and redact(value) == value}


def _copy_output(proc: subprocess.Popen, reader: MetricReader) -> None:
    """Copy the command's output into the trial log (passwords in URLs redacted), reading
    metrics on the way."""
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(redact(line))
        sys.stdout.flush()
        reader.feed(line)


class _Epochs:
    """Epochs the command reported through `msexp.hooks`, passed on as trial events."""

    def __init__(self, reader: EventReader, emit: Callable[[Any], None]):
        self.reader, self.emit = reader, emit
        self.count = 0
        self.last: dict[str, float] = {}

    def forward(self) -> None:
        for event in self.reader.read():
            if isinstance(event, Epoch):
                self.count += 1
                self.last.update(event.metrics)
                self.emit(event)


def check_command(argv: list[str], cwd: Path, check_args: list[str], timeout: float = 120.0
                  ) -> str | None:
    """Run a command once with `check_args` (e.g. --help); what went wrong, or None."""
    try:
        done = subprocess.run([*argv, *check_args], cwd=cwd, timeout=timeout,
                              env={**os.environ, "PATH": search_path()},
                              capture_output=True, text=True, errors="replace",
                              stdin=subprocess.DEVNULL)
    except OSError as exc:
        return f"cannot start it ({exc.strerror})"
    except subprocess.TimeoutExpired:
        return f"`{' '.join(check_args)}` did not finish within {timeout:g} s"
    if done.returncode:
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
        return f"{exit_reason(done.returncode, 'it')} with {' '.join(check_args)}: {last[0]}"
    return None
