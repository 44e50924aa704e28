"""The storage calls in flight in this process, watched: a call unanswered for STALL_S
means its server waits out an outage of its own (msexp's gRPC proxy, while the PostgreSQL
behind it restarts), which `search.patience` counts as an outage and says once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

STALL_S = 15.0


class Watcher(Protocol):
    """What hears of a late call (a storage's `Patience`)."""

    def unanswered(self) -> None: ...


class Unanswered:
    """The storage calls in flight in this process, and one thread that tells each call's
    `Patience` of a call unanswered for STALL_S (a timer per call costs 0.2 ms)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.asked: dict[object, tuple[Watcher, float]] = {}
        self.watch: threading.Thread | None = None

    @contextmanager
    def asking(self, patience: Watcher) -> Iterator[None]:
        """The call inside (one try), watched."""
        token, asked = object(), time.monotonic()
        with self.lock:
            self.asked[token] = (patience, asked)
            if self.watch is None or not self.watch.is_alive():  # not yet, or a forked child
                self.watch = threading.Thread(target=self._watch, name="msexp-unanswered",
                                              daemon=True)
                self.watch.start()
        try:
            yield
        finally:
            with self.lock:
                del self.asked[token]

    def late(self, patience: Watcher) -> bool:
        """Whether a call of `patience` waits unanswered for over STALL_S."""
        return patience in self._late()

    def _late(self) -> set[Watcher]:
        """The watchers of the calls unanswered for over STALL_S."""
        now = time.monotonic()
        with self.lock:
            return {p for p, asked in self.asked.values() if now - asked > STALL_S}

    def _watch(self) -> None:
        while True:
            time.sleep(min(1.0, STALL_S / 4))
            for patience in self._late():
                patience.unanswered()


CALLS = Unanswered()
