"""The duplex channel between a sweep and one of its hosts: a socket pair, one line a
message.

Down, from the sweep: `run <TrialRequest JSON>`, `stop` (the trial was pruned), `kill`
(it ignored the stop: end its trial child). Up, from the host: `ready`, once it has
imported MindSpore, as `ready adopts` if it adopts its trials' orphans (a subreaper), and
`ended` after each trial. What a trial says goes to its events.jsonl, the durable record;
`ended` only wakes the sweep to read it (`SweepEnd.wait`), so it never waits a poll for a
trial's end.
"""

from __future__ import annotations

import contextlib
import queue
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator

from msexp.os_tools.waiting import wait_until

RUN, STOP, KILL, READY, ADOPTS, ENDED = "run", "stop", "kill", "ready", "adopts", "ended"
POLL_S = 0.05


def socket_pair() -> tuple[SweepEnd, socket.socket]:
    """The sweep's end, and the socket the host process inherits."""
    ours, theirs = socket.socketpair()
    theirs.set_inheritable(True)
    return SweepEnd(ours), theirs


class SweepEnd:
    """The sweep's end of a host's channel."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.open = True  # until the host's end closes

    def send(self, kind: str, body: str = "") -> None:
        """One message; a host that is gone is found by its exit, not here."""
        with contextlib.suppress(OSError):
            self.sock.sendall(f"{kind} {body}".rstrip().encode() + b"\n")

    def wait_ready(self, alive: Callable[[], bool], timeout: float) -> bool:
        """Until the host says `ready`, dies or `timeout` passes; whether it said it
        adopts its trials' orphans."""
        said = b""

        def heard() -> bool:  # the select waits up to POLL_S: no sleep between calls
            nonlocal said
            if not alive():
                return True
            if select.select([self.sock], [], [], POLL_S)[0]:
                said = self.sock.recv(64)  # "ready ...", or b"" if it died
                return True
            return False

        with contextlib.suppress(OSError):
            wait_until(heard, timeout, 0)
        return said.split() == [READY.encode(), ADOPTS.encode()]

    def wait(self, timeout: float) -> None:
        """Until the host says something (a trial `ended`) or `timeout` passes; what it said
        is dropped: the events file says what happened."""
        if self.open and self.sock.fileno() >= 0:
            with contextlib.suppress(OSError, ValueError):  # ValueError: closed meanwhile
                if select.select([self.sock], [], [], timeout)[0]:
                    self.open = bool(self.sock.recv(4096))
                return
        time.sleep(timeout)  # the host's end closed (always readable), or ours: no wake-up

    def finish(self) -> None:
        """No more requests: the host ends its idle child and exits."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.sock.close()


class HostEnd:
    """The host's end: a thread reads what the sweep sends, calls `on_stop` or `on_kill`
    at once, and queues requests for the host's main loop, in order."""

    def __init__(self, fd: int, on_stop: Callable[[], None], on_kill: Callable[[], None]):
        self.sock = socket.socket(fileno=fd)
        self.on_stop, self.on_kill = on_stop, on_kill
        self.requests: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        with contextlib.suppress(OSError), self.sock.makefile("r", encoding="utf-8") as lines:
            for line in lines:
                kind, _, body = line.rstrip("\n").partition(" ")
                if kind == RUN:
                    self.requests.put(body)
                elif kind == STOP:
                    self.on_stop()
                elif kind == KILL:
                    self.on_kill()
        self.requests.put(None)  # the sweep closed its end

    def __iter__(self) -> Iterator[str]:
        return iter(self.requests.get, None)

    def say_ready(self, adopts: bool = False) -> None:
        with contextlib.suppress(OSError):
            self.sock.sendall(f"{READY}{' ' + ADOPTS if adopts else ''}\n".encode())

    def say_ended(self) -> None:
        """The trial sent last has ended: its `end` is in its events file."""
        with contextlib.suppress(OSError):
            self.sock.sendall(f"{ENDED}\n".encode())
