"""The operating-system helpers every layer shares: one file lock, one wait."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from msexp.os_tools.locking import flock, lock_file
from msexp.os_tools.waiting import wait_until


def test_a_wait_returns_once_its_condition_holds_and_false_at_its_timeout() -> None:
    calls: list[float] = []
    assert wait_until(lambda: calls.append(time.monotonic()) or len(calls) == 3, 5, 0.01)
    assert len(calls) == 3
    calls.clear()
    started = time.monotonic()
    assert not wait_until(lambda: calls.append(time.monotonic()) or False, 0.1, 0.04)
    assert calls[0] - started < 0.04, "called at once"
    assert calls[-1] - started >= 0.1, "and once more at the deadline"
    assert not wait_until(lambda: False, 0, 1), "a zero timeout: one call, no sleep"


def test_what_the_condition_raises_ends_the_wait() -> None:
    def fails() -> bool:
        raise RuntimeError("server gone")

    with pytest.raises(RuntimeError, match="server gone"):
        wait_until(fails, 5, 0.01)


def test_a_wait_sleeps_as_told_between_calls() -> None:
    slept: list[float] = []
    wait_until(lambda: len(slept) == 2, 5, 0.5, sleep=slept.append)
    assert slept == [0.5, 0.5]


# mutation: flock without LOCK_NB when not blocking hangs here; without LOCK_SH the second
# shared holder is refused
def test_a_file_lock_excludes_another_holder_until_its_block_ends(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    with flock(path) as held, open(path) as other:
        assert held
        assert not lock_file(other, blocking=False), "held by the first open file"
        with flock(path, blocking=False) as again:
            assert not again
    with open(path) as other:
        assert lock_file(other, blocking=False), "released at the block's end"
    with flock(path, shared=True) as first, flock(path, shared=True, blocking=False) as second:
        assert first and second, "shared holders coexist"


def test_a_free_port_is_one_a_server_can_listen_on() -> None:
    """`execution.ports.free_port`. Mutation (issue 53): the address's third item."""
    import socket

    from msexp.execution.ports import free_port

    port = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", port))
        assert server.getsockname()[1] == port > 0
