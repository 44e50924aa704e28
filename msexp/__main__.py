"""`python -m msexp` and the `msexp` console script."""

from __future__ import annotations

import sys

from msexp import interrupts


def main() -> None:
    """Run the CLI; a Ctrl-C or SIGTERM while it still imports exits quietly (130, 143)."""
    interrupts.install()  # a sweep installs its own handlers while it runs
    try:
        from msexp.cli import console_main  # lazy: so that the handlers cover the imports

        console_main()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
