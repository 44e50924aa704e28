"""What every layer asks of the operating system, each said once: `locking` (a file lock
the kernel releases with its holder), `waiting` (a condition polled until a deadline),
`identity` (this process's name in the stores and in its trial processes' marker)."""
