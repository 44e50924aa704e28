"""A training script that leaves helpers behind: a `setsid` sleep and a double-forked
daemon, both outside the trial's process group. It reports epochs to msexp; on its first
attempt with --mode hang it never ends, on a resumed attempt it finishes."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def daemon(pid_file: Path) -> None:
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            pid_file.write_text(str(os.getpid()))
            time.sleep(1000)
        os._exit(0)
    os.wait()


def report(epoch: int, accuracy: float) -> None:
    event = {"event": "epoch", "epoch": epoch, "step": epoch, "elapsed_s": 0.0,
             "metrics": {"eval_accuracy": accuracy}, "series": {}}
    with open(os.environ["MSEXP_EVENTS"], "a", encoding="utf-8") as events:
        events.write(json.dumps(event) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", default="finish")
    parser.add_argument("--quality", type=float, default=0.9)
    args, _ = parser.parse_known_args()
    stop = []
    signal.signal(signal.SIGUSR1, lambda *_: stop.append(True))
    out = Path(os.environ["MSEXP_OUTPUT_DIR"])
    resumed = "MSEXP_RESUME" in os.environ
    old = [int(p) for p in (out / "helpers").read_text().split()] if resumed else []
    print(f"earlier helpers alive: {sum(_alive(p) for p in old)}", flush=True)
    sleeper = subprocess.run(["bash", "-c", "setsid sleep 1000 >/dev/null 2>&1 & echo $!"],
                             capture_output=True, text=True, check=True).stdout.strip()
    daemon(out / "daemon.pid")
    while not (out / "daemon.pid").exists():
        time.sleep(0.01)
    (out / "helpers.tmp").write_text(f"{sleeper} {(out / 'daemon.pid').read_text()}")
    (out / "helpers.tmp").rename(out / "helpers")
    epochs = 1000 if args.mode == "hang" and not resumed else 3
    for epoch in range(1, epochs + 1):
        report(epoch, args.quality)
        if stop:
            sys.exit(0)
        time.sleep(0.2)
    print(f"eval_accuracy: {args.quality}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


if __name__ == "__main__":
    main()
