"""`HostPool`: the only way hosts start and stop. A sweep and `tune` each hold one (`run`
runs its trial in its own process):
one host per slot, started at once (they import MindSpore while the caller opens its
stores), a thread per slot to drive them, and every host killed when the pool closes."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Callable

from msexp.execution.host.client import Host


class HostPool:
    """`count` hosts. Host i gets cores / count CPU threads and, on GPU or Ascend, device
    i modulo the device count; each keeps the graphs of its last `warm` signatures. With
    `preload` False (a command experiment: its trials run their own processes) no host
    imports MindSpore: a host starts in a fraction of a second, and forks a small process.

    As a context manager it kills every host (and the trial each runs) on exit.
    """

    def __init__(self, count: int, cwd: Path | None = None, warm: int = 1,
                 preload: bool = True):
        threads = max(1, (os.cpu_count() or 1) // count)
        self.hosts = [Host(threads, cwd or Path.cwd(), slot, warm, preload)
                      for slot in range(count)]
        for host in self.hosts:
            host.prewarm()

    def __enter__(self) -> HostPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def keep(self, count: int) -> None:
        """Stop the hosts beyond `count`: they would have no trial to run."""
        for host in self.hosts[count:]:
            host.kill()
        self.hosts = self.hosts[:count]

    def each(self, work: Callable[[Host], None], wait: Callable[[], None] = lambda: None,
             slots: int | None = None) -> None:
        """Run `work(host)` in a thread per slot (the first `slots`, all by default); call
        `wait` meanwhile, then join them."""
        threads = [threading.Thread(target=work, args=(host,), daemon=True)
                   for host in self.hosts[:slots or len(self.hosts)]]
        for thread in threads:
            thread.start()
        wait()
        for thread in threads:
            thread.join()

    def close(self) -> None:
        """End every host after its last trial (each ends its warm trial child)."""
        for host in self.hosts:
            host.close()

    def stop(self) -> None:
        """Kill every host and the trial it runs."""
        for host in self.hosts:
            host.kill()
