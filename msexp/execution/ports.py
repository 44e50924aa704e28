"""TCP ports for the servers msexp starts (msrun's master, PostgreSQL, MLflow, the gRPC
proxy)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
