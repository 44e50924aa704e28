"""Stop signals the CLI received: a library that swallows one (MindSpore turns a Ctrl-C
during its import into an ImportError) must not turn a stop into a reported error."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

received: list[int] = []


def install() -> None:
    """Ctrl-C raises KeyboardInterrupt, SIGTERM exits 143; both are remembered."""
    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)


def _stop(signum: int, frame: object) -> None:
    received.append(signum)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    sys.exit(128 + signum)


@contextmanager
def deferred() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM until the block ends, then act on them: MindSpore's C++
    runtime, interrupted while it initialises, aborts the process (SIGABRT)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: held.append(signum))
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum in held[:1]:
            handler = previous[signum]
            if callable(handler):
                handler(signum, None)
            elif signum == signal.SIGINT:
                raise KeyboardInterrupt
            else:
                sys.exit(128 + signum)


def import_mindspore() -> None:
    """Import MindSpore with stop signals held (see `deferred`)."""
    with deferred():
        import mindspore  # noqa: F401  # lazy: seconds to import; only own experiments need it


@contextmanager
def handled(signals: tuple[int, ...], on_signal: Callable[[int], None]) -> Iterator[None]:
    """Call `on_signal(signum)` for `signals` while the block runs (main thread only).

    A sweep stops its trials this way instead of by KeyboardInterrupt: one raised inside
    `Thread.join` can leave CPython reporting a running thread as dead.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, lambda signum, frame: on_signal(signum))
                for sig in signals}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
