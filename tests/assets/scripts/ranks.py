"""Prints which rank it is, as a data-parallel script started by msrun would know it."""

import os
import sys

rank, size = os.environ.get("RANK_ID", "0"), os.environ.get("RANK_SIZE", "1")
print(f"rank={rank} world={size} args={len(sys.argv) - 1}")
