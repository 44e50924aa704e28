"""`python -m msexp` and the `msexp` console script."""

from __future__ import annotations

import sys

from msexp.console import interrupts

REPORTING = ("sweep", "worker")  # commands that end a stop with the trials table and resume line


def main() -> None:
    """Run the CLI. A Ctrl-C or SIGTERM while it still imports: `sweep` and `worker` hold
    it until they can report it; other commands exit quietly (130, 143)."""
    interrupts.install(held=command(sys.argv[1:]) in REPORTING)
    try:
        from msexp.cli import console_main  # lazy: so that the handlers cover the imports

        console_main()
    except KeyboardInterrupt:
        sys.exit(130)


def command(args: list[str]) -> str | None:
    """The command an argument list names: its first word that is not an option (msexp's
    own options take no value)."""
    return next((arg for arg in args if not arg.startswith("-")), None)


if __name__ == "__main__":
    main()
