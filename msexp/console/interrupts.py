"""Stop signals (Ctrl-C, SIGTERM) the CLI received: remembered, the first acknowledged at
once where the command reports stops (`msexp sweep`, `msexp worker`) and held until it can
report them with its trials and the resume line, and acted on where the command can act.
A library that swallows one (MindSpore turns a Ctrl-C during its import into an
ImportError) must not turn a stop into a reported error."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

STOPS = (signal.SIGINT, signal.SIGTERM)  # Ctrl-C; Slurm, Kubernetes and systemd
RESUME = "run the same command again to resume"

received: list[int] = []  # every stop signal so far, first first
_acknowledging: list[bool] = []  # [True] where the command acknowledges a stop (`install`)


def stopping_line(trials: list[int]) -> str:
    """What a sweep says at once when a stop comes: the trials it stops, which resume."""
    if not trials:
        return "stopping: no trial running"
    if len(trials) == 1:
        return f"stopping: trial {trials[0]} will resume from its last checkpoint"
    names = ", ".join(map(str, trials[:-1])) + f" and {trials[-1]}"
    return f"stopping: trials {names} will resume from their last checkpoints"


def install(held: bool = False) -> None:
    """Ctrl-C raises KeyboardInterrupt, SIGTERM exits 143; both are remembered.

    `held` (sweep, worker): the first stop is acknowledged at once and held until the
    command can report it (`acting`); a second one acts at once.
    """
    _acknowledging[:] = [held]
    for sig in STOPS:
        signal.signal(sig, _hold if held else _stop)


@contextmanager
def acting() -> Iterator[None]:
    """Stop signals act at once while the block runs (a command that reports them); one
    held since start-up (`install`) acts as it starts. In one process (a test, a
    notebook) each such block starts afresh: without one held, those remembered are an
    earlier command's, and forgotten."""
    if signal.getsignal(signal.SIGINT) is not _hold:
        received.clear()
    with _handlers(_stop):
        if received:
            leave(received[0])
        yield


def leave(signum: int) -> None:
    """Act on a stop: KeyboardInterrupt for Ctrl-C, exit 128 + the signal otherwise."""
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    sys.exit(128 + signum)


def note(signum: int) -> bool:
    """Remember a stop signal and acknowledge the first where the command does; True for
    the first."""
    received.append(signum)
    first = len(received) == 1
    if first and any(_acknowledging):
        say(stopping_line([]))
    return first


def say(line: str) -> None:
    """Write a line on stdout at once, even from a signal handler that interrupted a print
    (a second write into the same buffer would raise)."""
    try:
        os.write(sys.stdout.fileno(), f"{line}\n".encode())
    except (AttributeError, OSError, ValueError):  # no file behind it (a test's capture)
        print(line, flush=True)


def _stop(signum: int, frame: FrameType | None) -> None:
    note(signum)
    leave(signum)


def _hold(signum: int, frame: FrameType | None) -> None:
    if not note(signum):
        leave(signum)


@contextmanager
def held() -> Iterator[None]:
    """Remember stop signals (the first acknowledged) and act on none while the block
    runs: what a stopped command prints last (its table, the resume line) is printed
    whole."""
    with _handlers(lambda signum, frame: note(signum)):
        yield


@contextmanager
def deferred() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM until the block ends, then act on them: MindSpore's C++
    runtime, interrupted while it initialises, aborts the process (SIGABRT). The first is
    acknowledged at once."""
    pending: list[int] = []
    with _handlers(lambda signum, frame: (note(signum), pending.append(signum))) as previous:
        yield
    for signum in pending[:1]:
        handler = previous.get(signum)
        if handler is _hold:
            return  # still held: the command acts on it once it can report it
        if handler is _stop or not callable(handler):
            leave(signum)
        else:
            handler(signum, None)


@contextmanager
def _handlers(handler: Callable[[int, FrameType | None], object]
              ) -> Iterator[dict[int, object]]:
    """`handler` for Ctrl-C and SIGTERM while the block runs (main thread only); yields
    the handlers it replaced."""
    if threading.current_thread() is not threading.main_thread():
        yield {}
        return
    previous = {sig: signal.signal(sig, handler) for sig in STOPS}
    try:
        yield previous
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def import_mindspore() -> None:
    """Import MindSpore with stop signals held (see `deferred`)."""
    with deferred():
        import mindspore  # noqa: F401  # lazy: seconds to import; only own experiments need it


@contextmanager
def handled(on_signal: Callable[[int], None]) -> Iterator[None]:
    """Remember each stop signal and call `on_signal(signum)` while the block runs (main
    thread only).

    A sweep stops its trials this way instead of by KeyboardInterrupt: one raised inside
    `Thread.join` can leave CPython reporting a running thread as dead.
    """
    def handler(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        on_signal(signum)

    with _handlers(handler):
        yield
