"""The `msexp` command line."""

from msexp.cli.app import app, console_main

__all__ = ["app", "console_main"]
