"""A trial of the user's own command: run it with the trial's params (the values the sweep
file sets), in this process's group (a timeout or a prune kills it with the trial; what it
leaves running is killed when it exits), and read what it reports: its output, copied to
the trial's log, through `log_metrics.MetricReader` (a metric's last value is final), and
a `msexp.hooks` script's epochs through the events file in MSEXP_EVENTS (what pruning
acts on)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TextIO

from msexp.execution.arguments import arguments, command_argv, trial_params
from msexp.execution.exits import exit_reason, wait_exit
from msexp.execution.log_metrics import MetricReader, read_log
from msexp.execution.msrun_command import msrun_argv
from msexp.execution.output import ErrorLine, copy_redacted
from msexp.execution.process_tree import descendants, die_with_parent, kill_descendants, subreaper
from msexp.execution.protocol import Command, Epoch, EventReader, Start, TrialRequest
from msexp.execution.script_help import switches
from msexp.keys import TrialEnv
from msexp.paths import newest_checkpoint, search_path, write_atomic
from msexp.secrets import files as private
from msexp.secrets.redaction import known_secrets, redact, redact_params, secret_name
from msexp.training.records import BatchStatistics, Stopped

POLL_S = 0.05
# What msrun runs as each rank of a data-parallel command: the script, with its output
# redacted before msrun writes it into the rank's log (`output.redacted_output`).
RANK_WRAPPER = """import json, os, runpy, sys, traceback
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(os.path.abspath(script))
from msexp.execution.output import redacted_output
from msexp.secrets.redaction import known_secrets
with open(os.environ["MSEXP_TRIAL"], encoding="utf-8") as given:
    secrets = known_secrets(json.load(given))
with os.fdopen(os.dup(1), "w", encoding="utf-8") as log, redacted_output(log, secrets):
    try:
        runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = exc.code
    except BaseException:
        traceback.print_exc()
        code = 1
sys.exit(code)
"""
DRAIN_S = 5.0  # reading what the command wrote after it exited (a stray may hold it open)


class CommandFailed(RuntimeError):
    """The command exited with an error; the message says how, and its last output line."""


def run_command(request: TrialRequest, emit: Callable[[Any], None],
                stop_requested: Callable[[], bool], log: TextIO | None = None
                ) -> tuple[dict[str, float], Path | None]:
    """Run the request's command to its end; emit its epochs; return its final metrics and
    the newest checkpoint it wrote into its outputs folder, where it runs (if any).
    Its output goes to `log` (default: this process's stdout, the trial log).

    A trial run again (after a kill or a preemption) finds its outputs folder as the
    last attempt left it, and gets MSEXP_RESUME naming it.

    Raises:
        Stopped: the orchestrator asked the trial to stop (the command got SIGUSR1,
            which `msexp.hooks` turns into a clean stop of `Model.train`).
        RuntimeError: the command failed, or reported no metric.
    """
    argv, env, outputs = _launch_plan(request)
    command = request.command
    assert command is not None, "a command trial's request names its command"
    with subreaper() as adopts:  # helpers that leave the session and the marker stay ours
        kept = descendants(os.getpid())  # what this process ran before: not the trial's
        try:
            proc = subprocess.Popen(argv, cwd=outputs, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, errors="replace",
                                    preexec_fn=die_with_parent)
            emit(Start(" ".join(command.argv), proc.pid))
            reader, failure, lines = _copying(proc, request, log)
            epochs = _Epochs(EventReader(Path(env[TrialEnv.EVENTS])), emit)
            stopped = False
            while proc.poll() is None:
                epochs.forward()
                if stop_requested() and not stopped:
                    stopped = True
                    proc.send_signal(signal.SIGUSR1)
                wait_exit(proc.pid, POLL_S)
            kill_descendants(kept, adopts=adopts)  # a daemon it left would hold its output open
            lines.join(DRAIN_S)
            epochs.forward()
        finally:
            _forget_private_params(env)
    if stopped:
        raise Stopped(f"stopped after epoch {epochs.count}")
    if proc.returncode:
        last = f": {failure.line}" if failure.line else ""
        raise CommandFailed(exit_reason(proc.returncode, "the command") + last)
    metrics = {**reader.last, **epochs.last}
    if not metrics:
        raise RuntimeError("the command reported no metric: print `name: value` lines, "
                           "use msexp.hooks, or set experiment.metrics regexes")
    return metrics, newest_checkpoint(outputs)


def _launch_plan(request: TrialRequest) -> tuple[list[str], dict[str, str], Path]:
    """The command line, environment and folder (the trial's outputs) a command trial
    runs with; the params and report files it reads are written here."""
    command = request.command
    assert command is not None and request.folder is not None
    folder = request.folder
    outputs = folder / "outputs"
    outputs.mkdir(parents=True, exist_ok=True)
    params_file = _params_file(folder, request.params)
    channel = folder / "reports.jsonl"
    channel.unlink(missing_ok=True)  # a new file, as the trial's log and events (see host)
    channel.write_text("")
    env = {**command_environment(command, outputs), TrialEnv.PARAMS: str(params_file),
           TrialEnv.EVENTS: str(channel)}
    if any(outputs.iterdir()):
        env[TrialEnv.RESUME] = str(outputs)
    if request.probe is not None:  # `msexp.hooks.MsexpCallback` ends the script there
        env[TrialEnv.PROBE] = str(request.probe.updates)
    sweep_folder = Path(command.cwd)
    params = trial_params({k: v for k, v in request.params.items() if k != "devices"},
                          folder, sweep_folder)  # devices: msexp's own
    program = command_argv(command.argv, sweep_folder)
    alone = _switches(command, program, params, outputs, env)
    argv = [*program, *arguments(params, command.args, alone)]
    devices = request.params.get("devices", 1)
    if devices > 1:  # `python script.py ...` as msrun ranks; rank 0's output is read
        ranks = folder / "ranks"
        ranks.mkdir(parents=True, exist_ok=True)
        wrapper = ranks / "redacted.py"  # msrun writes each rank's output as it comes
        wrapper.write_text(RANK_WRAPPER, encoding="utf-8")
        argv = msrun_argv(devices, ranks, [str(wrapper), *argv[1:]], env["PATH"], tail_rank=0)
    return argv, env, outputs


def _params_file(folder: Path, params: dict[str, Any]) -> Path:
    """The params file the script reads (`msexp.hooks.params`): the trial folder's
    params.json, or, where the params hold a secret, a private file (`msexp.secrets.files`,
    removed when the command ends) and params.json redacted."""
    text, shown = json.dumps(params, default=str), json.dumps(redact_params(params), default=str)
    (folder / "params.json").write_text(shown, encoding="utf-8")
    if text == shown:
        return folder / "params.json"
    return private.write(text)


def _forget_private_params(env: dict[str, str]) -> None:
    private = Path(env[TrialEnv.PARAMS])
    if private.name != "params.json":
        private.unlink(missing_ok=True)


def command_environment(command: Command, outputs: Path) -> dict[str, str]:
    """The environment a command runs in, with `outputs` as its folder: this process's
    without secrets, the variables experiment.pass_env names, msexp's search PATH."""
    passed = {name: os.environ[name] for name in command.pass_env if name in os.environ}
    return {**public_environment(), **passed, TrialEnv.OUTPUT_DIR: str(outputs),
            "PYTHONUNBUFFERED": "1", "PATH": search_path()}


def public_environment() -> dict[str, str]:
    """This process's environment without secrets, for a user's command: no variable whose
    name says it holds one (PASSWORD, TOKEN, SECRET, KEY), none holding a URL's password
    (the sweep file's `experiment.pass_env` names those it passes on purpose)."""
    return {name: value for name, value in os.environ.items()
            if not secret_name(name) and redact(value) == value}


def _copying(proc: subprocess.Popen, request: TrialRequest, log: TextIO | None
             ) -> tuple[MetricReader, ErrorLine, threading.Thread]:
    """Start copying the command's output into `log` (default: stdout, the trial log),
    redacted, reading metrics and the line that says what went wrong on the way."""
    assert request.command is not None
    reader = MetricReader(request.command.metrics, request.params)  # a param is no metric
    failure = ErrorLine(reader.feed)
    secrets = known_secrets(request.params)
    lines = threading.Thread(target=copy_redacted, daemon=True,
                             args=(proc.stdout, log or sys.stdout, secrets, failure.feed))
    lines.start()
    return reader, failure, lines


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
            if isinstance(event, (Epoch, BatchStatistics)):
                self.emit(event)


def _switches(command: Command, program: list[str], params: dict[str, Any], cwd: Path,
              env: dict[str, str]) -> list[str]:
    """The command's switches: as the sweep file lists them, or as its `--help` shows them
    (read once per study, and only when a boolean is passed as a flag)."""
    if command.switches is not None:
        return list(command.switches)
    if command.args != "flags" or not any(isinstance(v, bool) for v in params.values()):
        return []
    cache = cwd.parent.parent / f"help-{_digest(program)}.txt"  # beside the study's trials
    if not cache.is_file():
        _, output = run_once(program, cwd, ["--help"], env=env)
        write_atomic(cache, output)
    return switches(cache.read_text(encoding="utf-8"))


def _digest(argv: list[str]) -> str:
    return hashlib.sha256(json.dumps(argv).encode()).hexdigest()[:12]


def run_once(argv: list[str], cwd: Path, args: list[str], timeout: float = 120.0,
             env: dict[str, str] | None = None) -> tuple[str | None, str]:
    """Run a command once with `args` (e.g. --help): what went wrong (or None), and its
    output."""
    try:
        done = subprocess.run([*argv, *args], cwd=cwd, timeout=timeout,
                              env=env or {**os.environ, "PATH": search_path()},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              errors="replace", stdin=subprocess.DEVNULL)
    except OSError as exc:
        return f"cannot start it ({exc.strerror})", ""
    except subprocess.TimeoutExpired:
        return f"`{' '.join(args)}` did not finish within {timeout:g} s", ""
    if done.returncode:
        last = done.stdout.strip().splitlines()[-1:] or [""]
        return f"{exit_reason(done.returncode, 'it')} with {' '.join(args)}: {last[0]}", \
            done.stdout
    return None, done.stdout


def check_command(argv: list[str], cwd: Path, check_args: list[str], timeout: float = 120.0
                  ) -> str | None:
    """Run a command once with `check_args` (e.g. --help); what went wrong, or None."""
    return run_once(argv, cwd, check_args, timeout)[0]


@dataclass(frozen=True)
class CheckRun:
    """What one real run of a command recorded (`plan --check`): its final metrics, the
    values it printed before its first training line, its newest checkpoint, its log."""

    metrics: dict[str, float]
    echoed: dict[str, float]
    checkpoint: Path | None
    log: Path
    batch_statistics: BatchStatistics | None = None  # the script's network's, via msexp.hooks


def check_run(request: TrialRequest, timeout: float) -> CheckRun:
    """Run a command trial for real, as a sweep would, its output into the folder's log.

    Raises:
        CommandFailed: the command failed, or did not finish within `timeout` seconds.
    """
    assert request.folder is not None and request.command is not None
    request.folder.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    told: list[Any] = []
    with request.log_path.open("w", encoding="utf-8") as log:
        try:
            metrics, checkpoint = run_command(request, told.append,
                                              lambda: time.monotonic() > deadline, log)
        except Stopped:
            raise CommandFailed(f"it did not finish within {timeout:g} s") from None
        except CommandFailed:
            raise
        except RuntimeError:  # it reported no metric
            metrics, checkpoint = {}, newest_checkpoint(request.checkpoint_dir)
    reader = read_log(request.log_path, request.command.metrics, request.params)
    stats = [event for event in told if isinstance(event, BatchStatistics)]
    return CheckRun(metrics, reader.echoed, checkpoint, request.log_path,
                    stats[0] if stats else None)
