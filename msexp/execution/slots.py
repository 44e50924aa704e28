"""The slots of a sweep: one host per concurrent trial, each with a thread that runs
trials until the work function returns."""

from __future__ import annotations

import threading
from typing import Callable

from msexp.execution.host import Host


class Slots:
    """The sweep's hosts, one per slot, and the threads that drive them."""

    def __init__(self, hosts: list[Host]):
        self.hosts = hosts

    def keep(self, count: int) -> None:
        """Stop the hosts beyond `count`: they would have no trial to run."""
        for host in self.hosts[count:]:
            host.kill()
        self.hosts = self.hosts[:count]

    def run(self, work: Callable[[Host], None], wait: Callable[[], None]) -> None:
        """Run `work(host)` in a thread per slot; call `wait` meanwhile, then join."""
        threads = [threading.Thread(target=work, args=(h,), daemon=True) for h in self.hosts]
        try:
            for thread in threads:
                thread.start()
            wait()
            for thread in threads:
                thread.join()
        finally:
            for host in self.hosts:
                host.close()  # a stop has killed them already

    def stop(self) -> None:
        """Kill every host and the trial it runs."""
        for host in self.hosts:
            host.kill()
