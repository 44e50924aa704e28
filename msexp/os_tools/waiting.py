"""Waiting for a condition: one loop, with one meaning of its timeout."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(predicate: Callable[[], bool], timeout: float, poll: float,
               sleep: Callable[[float], object] | None = None) -> bool:
    """Call `predicate` until it returns true, `poll` seconds apart, for at most `timeout`
    seconds; returns whether it did (False: the timeout passed). It is called at once and
    once more at the deadline; what it raises ends the wait. `sleep` waits between calls:
    one that returns early on news (a message on a socket) shortens the poll (default:
    `time.sleep`, looked up at each call)."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        (sleep or time.sleep)(min(poll, left))
