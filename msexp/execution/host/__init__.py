"""The host: a process that imports MindSpore once and runs one trial at a time.

`server` is the host process, `zygote` forks its trial children (on CPU), `running` runs
one trial in a process; on the sweep's side `client.Host` drives one host over its
channel (`link`), `family` kills what its trials leave behind, and `HostPool` starts and
stops them all."""

from msexp.execution.host.client import Host
from msexp.execution.host.pool import HostPool

__all__ = ["Host", "HostPool"]
