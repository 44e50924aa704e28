"""The msexp commands that messages suggest, written so that they work when copied."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from msexp.paths import DEFAULT_TRACKING_URI, JOURNAL

STORAGE_ENV = "MSEXP_STORAGE"
TRACKING_ENV = "MLFLOW_TRACKING_URI"


def command(*words: str | Path, study: str | None = None, storage: str | None = None,
            tracking_uri: str | None = None) -> str:
    """`msexp WORDS...` with the options a copy needs to reach the same study and stores:
    `--study` when given, and a store only where neither the default nor the environment
    (`MSEXP_STORAGE`, `MLFLOW_TRACKING_URI`) already names it. Quoted for a shell."""
    argv = ["msexp", *map(str, words)]
    if study:
        argv += ["--study", study]
    if storage and storage not in (str(JOURNAL), os.environ.get(STORAGE_ENV)):
        argv += ["--storage", storage]
    if tracking_uri and tracking_uri not in (DEFAULT_TRACKING_URI,
                                             os.environ.get(TRACKING_ENV)):
        argv += ["--tracking-uri", tracking_uri]
    return shlex.join(argv)
