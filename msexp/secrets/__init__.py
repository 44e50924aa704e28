"""Secrets, in one place: `redaction` hides them in every text and value that leaves
msexp (passwords in URLs, `password=...`, values under names that say they hold one),
`spans` finds them in linear time, and `files` keeps the files that must hold them
(outside `mlruns/`, mode 600)."""
