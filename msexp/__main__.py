"""`python -m msexp` and the `msexp` console script."""

from __future__ import annotations

import signal
import sys


def main() -> None:
    """Run the CLI; a Ctrl-C or SIGTERM while it still imports exits quietly (130, 143)."""
    signal.signal(signal.SIGTERM, _terminated)  # the sweep installs its own while it runs
    try:
        from msexp.cli import console_main  # lazy: so that the signals above cover imports

        console_main()
    except KeyboardInterrupt:
        sys.exit(130)


def _terminated(signum: int, frame: object) -> None:
    sys.exit(128 + signum)


if __name__ == "__main__":
    main()
