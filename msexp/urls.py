"""Secrets in URLs: one redaction for every text that leaves msexp."""

from __future__ import annotations

import re

# scheme://[user]:password@host; the password may hold "/" and ":" but not "@" or spaces
_CREDENTIALS = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)([^:@/\s]*):[^@\s]*@")


def redact(text: str) -> str:
    """Replace the password of every URL in `text` with ***."""
    return _CREDENTIALS.sub(r"\1\2:***@", text)
