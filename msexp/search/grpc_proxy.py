"""Optuna's gRPC storage proxy in front of a shared PostgreSQL, with msexp's study lock.

Workers that give `--storage grpc://HOST:PORT` reach the study only through the proxy, so
they cannot take the PostgreSQL advisory lock that `study_lock` takes for a
`postgresql://` storage. The proxy serves that lock beside Optuna's storage service: a
worker calls `Hold` and keeps the call open while it holds the lock; the proxy takes the
advisory lock on the database for it and releases it when the call ends: the worker is
done, or it died and its connection closed.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import optuna

from msexp.errors import MsexpError
from msexp.search import claims  # noqa: F401 (gives patience its heartbeat reader)
from msexp.search.lock import GRANTED, HOLD_METHOD, advisory_lock
from msexp.search.optuna_private import make_grpc_server
from msexp.search.outages import unreachable
from msexp.search.storage import open_storage

# threads kept for storage calls: a lock holder's claim must never wait behind the
# lock's own waiters
_RESERVED_THREADS = 32


class _LockService:
    """The study lock for the proxy's clients: one holder at a time, in the order they
    asked (FIFO) in this process and, through PostgreSQL's advisory lock (whose waiters
    PostgreSQL queues in order too), across every process that shares the database."""

    def __init__(self, storage_url: str, threads: int):
        self.storage_url = storage_url
        self.turns = threading.Condition()
        self.queue: deque[object] = deque()  # the holder first, then the waiters in order
        self.limit = max(1, threads - _RESERVED_THREADS)

    def hold(self, request: bytes, context: Any) -> Iterator[bytes]:
        """Wait for the lock in turn, say GRANTED, and hold it until the call ends; while
        the database is down, UNAVAILABLE at once (the client waits it out, saying so)."""
        import grpc  # lazy: only the proxy needs it

        ticket = object()
        with self.turns:
            if len(self.queue) >= self.limit:
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "all lock threads busy")
            self.queue.append(ticket)
        try:
            ended = threading.Event()
            context.add_callback(ended.set)
            if not self._first(ticket, context):
                return
            try:
                with advisory_lock(self.storage_url, patient=False):
                    if context.is_active():
                        yield GRANTED
                        ended.wait()
            except Exception as exc:  # the client waits out its database's restart, saying so
                reason = unreachable(exc)
                if reason is None:
                    raise
                context.abort(grpc.StatusCode.UNAVAILABLE, f"the proxy's database: {reason}")
        finally:
            with self.turns:
                self.queue.remove(ticket)
                self.turns.notify_all()

    def _first(self, ticket: object, context: Any) -> bool:
        """Wait until `ticket` heads the queue; False if its call ended meanwhile."""
        with self.turns:
            while self.queue[0] is not ticket:
                if not context.is_active():
                    return False
                self.turns.wait(0.5)
        return True


def make_proxy_server(storage_url: str, host: str, port: int, threads: int = 256) -> Any:
    """A gRPC server (not started) serving Optuna's storage proxy for `storage_url` and
    msexp's study lock; `threads` bounds the calls served at once."""
    import grpc  # lazy: only the proxy needs it

    # Optuna's cache of finished trials in front of the database, as its docs advise
    storage = optuna.storages.get_storage(open_storage(storage_url))
    server = make_grpc_server(storage, host, port, ThreadPoolExecutor(max_workers=threads))
    lock = _LockService(storage_url, threads)
    service, method = HOLD_METHOD.strip("/").split("/")
    handler = grpc.method_handlers_generic_handler(service, {
        method: grpc.unary_stream_rpc_method_handler(lock.hold)})
    server.add_generic_rpc_handlers((handler,))
    return server


def serve(storage_url: str, host: str, port: int, threads: int = 256) -> None:
    """Run the proxy until this process is stopped."""
    if not storage_url.startswith("postgresql"):
        raise MsexpError(f"the gRPC proxy serves a PostgreSQL storage, got "
                         f"{storage_url.split(':', 1)[0]}")
    server = make_proxy_server(storage_url, host, port, threads)
    server.start()
    server.wait_for_termination()


if __name__ == "__main__":  # python -m msexp.search.grpc_proxy URL HOST PORT [THREADS]
    import sys

    serve(sys.argv[1], sys.argv[2], int(sys.argv[3]), *map(int, sys.argv[4:5]))
