"""`msexp tune`: the fastest configuration of a sweep file's knobs that fits, from short
profiles instead of a full grid; the largest micro-batch that fits; an lr range test."""
