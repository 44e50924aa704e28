"""This process's name: the owner of the trials it claims and the prefix of the marker its
trial processes carry, so that the leftovers of a dead owner's trials are found by it."""

from __future__ import annotations

import os
import socket


def owner() -> str:
    """This process, as written in the trials it runs and in its trial processes' marker:
    host:pid."""
    return f"{socket.gethostname()}:{os.getpid()}"
