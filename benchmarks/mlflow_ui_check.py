"""Does a sweep look right in the MLflow UI? A tiny real sweep, `mlflow ui`, headless Chromium.

Runs a 3-trial sweep of mlp_digits (1 epoch) and `msexp report` in a temporary folder,
serves its store with `msexp ui` on a free port (5070 and up; Chromium refuses some
ports, 5061 among them), and loads the links it prints in a fresh Chromium profile (no
localStorage, as a first visit would be). Checks, each printed as a PASS or FAIL line:
  links     `msexp ui` printed the runs table's and the parent run's links
  trade_off the parent run holds the trade-off picture (images/trade_off+step+3+...)
  kind      the experiment carries mlflow.experimentKind = custom_model_development
  training  msexp's printed runs link opens the "Model training" view (runs table),
            not the GenAI overview
  nested    the runs table shows one top-level row, the sweep's parent run, with an
            expander, and counts the trials as matching runs beneath it
  report    the parent run's artifacts hold the report/ PNGs
and one INFO line on which view the bare experiment URL (#/experiments/<id>) opens.
Saves screenshots: the runs link (benchmarks/mlflow_ui.png) and the compare page of the
trials (mlflow_ui_compare.png), as MLflow first shows them. Needs
Debian's `chromium` package (not part of CI). Exit code 1 when a check fails.

Usage: python benchmarks/mlflow_ui_check.py [--port 5070] [--screenshot PATH]
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import urllib.parse
from pathlib import Path

import optuna

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from msexp.keys import StudyKey  # noqa: E402
from msexp.tracking.runs import EXPERIMENT_KIND, MODEL_TRAINING, Tracker  # noqa: E402

TRIALS = 3
SWEEP = f"""
    name: uicheck
    experiment: mlp_digits
    fixed: {{epochs: 1, batch_size: 64, hidden: 32}}
    params:
      micro_size: [{", ".join(str(2 ** i) for i in range(TRIALS))}]
"""
GENAI_MARKERS = ("Observability", "Evaluation runs")  # the GenAI sidebar
TRAINING_MARKERS = ("Model registry", "matching runs")  # the training sidebar, the runs table


def free_port(start: int) -> int:
    for port in range(start, start + 50):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) != 0:
                return port
    raise SystemExit(f"no free port in {start}..{start + 49}")


def run_sweep(folder: Path) -> None:
    (folder / "uicheck.yaml").write_text(textwrap.dedent(SWEEP).lstrip(), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("MLFLOW_TRACKING_URI", None)
    env.pop("MSEXP_STORAGE", None)
    for command in ("sweep", "report"):
        subprocess.run([sys.executable, "-m", "msexp", command, "uicheck.yaml"], cwd=folder,
                       env=env, check=True, capture_output=True)


def serve(folder: Path, port: int) -> tuple[subprocess.Popen, str, str]:
    """`msexp ui` on the sweep's store: the process and the two links it prints."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("MLFLOW_TRACKING_URI", None)
    ui = subprocess.Popen([sys.executable, "-m", "msexp", "ui", "uicheck.yaml", "--port",
                           str(port)], cwd=folder, env=env, stdout=subprocess.PIPE, text=True)
    links: dict[str, str] = {}
    for line in ui.stdout:  # type: ignore[union-attr]
        label, _, link = line.partition(": ")
        links[label] = link.strip()
        if label == "sweep run":
            return ui, links["compare trials"], links["sweep run"]
    raise SystemExit(f"msexp ui ended without its links (exit code {ui.wait()})")


def stop(ui: subprocess.Popen) -> None:
    ui.send_signal(signal.SIGINT)  # as Ctrl-C: msexp ui stops its server
    ui.wait(timeout=60)


def chromium(*args: str) -> str:
    """Chromium headless in a fresh profile; its stdout."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        raise SystemExit("chromium not found: sudo apt-get install -y chromium")
    with tempfile.TemporaryDirectory() as profile:
        argv = [binary, "--headless", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", f"--user-data-dir={profile}", "--window-size=1600,1000",
                "--virtual-time-budget=20000", *args]
        if os.geteuid() == 0:
            argv.insert(1, "--no-sandbox")  # Chromium refuses to run as root otherwise
        return subprocess.run(argv, capture_output=True, text=True, timeout=180).stdout


def visible_text(dom: str) -> str:
    text = re.sub(r"<(script|style)\b.*?</\1>", " ", dom, flags=re.S)
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", text)))


def view_of(text: str) -> str:
    if all(m in text for m in TRAINING_MARKERS) and not any(m in text for m in GENAI_MARKERS):
        return "Model training"
    if any(m in text for m in GENAI_MARKERS):
        return "GenAI"
    return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=5070)
    parser.add_argument("--screenshot", type=Path, default=ROOT / "benchmarks/mlflow_ui.png")
    args = parser.parse_args()
    results = []

    def check(name: str, ok: bool, detail: str) -> None:
        results.append(ok)
        print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        run_sweep(folder)
        uri = f"sqlite:///{folder / 'mlruns' / 'mlflow.db'}"
        tracker = Tracker(uri)
        experiment = tracker.client.get_experiment_by_name("uicheck")

        study = optuna.load_study(study_name="uicheck", storage=optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(folder / "mlruns/optuna.journal"))))
        parent = study.user_attrs[StudyKey.PARENT_RUN]
        kind = experiment.tags.get(EXPERIMENT_KIND)
        check("kind", kind == MODEL_TRAINING, f"{EXPERIMENT_KIND} = {kind}")
        artifacts = {a.path for a in tracker.client.list_artifacts(parent, "report")}
        pngs = sorted(p for p in artifacts if p.endswith(".png"))
        check("report", "report/effects_micro_size.png" in artifacts, ", ".join(pngs))

        images = {a.path for a in tracker.client.list_artifacts(parent, "images")}
        check("trade_off", any(p.startswith(f"images/trade_off+step+{TRIALS}+") for p in images),
              ", ".join(sorted(images)) or "no images")
        ui, runs_link, parent_link = serve(folder, free_port(args.port))
        try:
            check("links", parent in parent_link and experiment.experiment_id in runs_link,
                  f"{runs_link} {parent_link}")
            dom = chromium("--dump-dom", runs_link)
            text = visible_text(dom)
            check("training", view_of(text) == "Model training",
                  f"{runs_link} opens the {view_of(text)} view")
            rows = set(re.findall(r'row-id="([0-9a-f]+)"', dom))
            counted = re.search(r"(\d+) matching runs", text)
            expander = "runnamecellrenderer" in dom
            check("nested", rows == {parent} and expander and counted is not None
                  and int(counted.group(1)) == TRIALS + 1,
                  f"top-level rows {len(rows)} (the parent: {parent in rows}), expander "
                  f"{expander}, {counted.group(0) if counted else 'no run count'}")
            bare = runs_link.split("/runs")[0]
            print(f"INFO bare {bare} in a fresh browser opens the "
                  f"{view_of(visible_text(chromium('--dump-dom', bare)))} view", flush=True)
            trials = [r.info.run_id for r in tracker.client.search_runs(
                [experiment.experiment_id], "tags.`msexp.role` = 'trial'")]
            compare = (bare.split("/#/")[0] + "/#/compare-runs?runs=" + urllib.parse.quote(
                json.dumps(trials)) + "&experiments=" + urllib.parse.quote(
                json.dumps([experiment.experiment_id])))
            shots = {args.screenshot: runs_link,
                     args.screenshot.with_name("mlflow_ui_compare.png"): compare}
            for path, link in shots.items():
                path.parent.mkdir(parents=True, exist_ok=True)
                chromium(f"--screenshot={path.resolve()}", link)
                print(f"screenshot: {path} of {link}")
        finally:
            stop(ui)
    print("PASS" if all(results) else "FAIL")
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
