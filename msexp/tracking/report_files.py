"""A report's files under `mlruns/reports/STUDY/`: PNGs, Markdown tables and one
self-contained HTML page of them all. They are written again only when the study's finished
trials (or the report's options) changed, replacing the earlier report's files; a manifest
says which report they show and where it was logged."""

from __future__ import annotations

import base64
import hashlib
import html
import json
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from msexp.keys import StudyKey
from msexp.paths import write_atomic

MANIFEST = "manifest.json"
PAGE = "report.html"
FORMAT = 3  # raised whenever the files drawn for the same study change
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
# what msexp wrote there before the manifest: Optuna's plotly pages, the effects page
LEGACY = ("optimization_history.html", "param_importances.html", "parallel_coordinate.html",
          "pareto_front.html", "effects.html", "history_*.html")


def fingerprint(study: optuna.Study, options: dict[str, Any]) -> str:
    """What a report shows, as a digest: the study's finished trials (numbers, states,
    values, params, attributes), its objectives and the report's options."""
    digest = hashlib.sha256(json.dumps(
        [FORMAT, study.study_name, [d.name for d in study.directions],
         study.user_attrs.get(StudyKey.OBJECTIVES), options],
        sort_keys=True, default=str).encode())
    for t in study.get_trials(deepcopy=False, states=FINISHED):
        digest.update(json.dumps([t.number, t.state.name, t.values, t.params, t.user_attrs],
                                 sort_keys=True, default=str).encode())
    return digest.hexdigest()[:20]


def read_manifest(folder: Path) -> dict[str, Any]:
    """The manifest of the report in `folder` ({} where there is none or it is unreadable)."""
    try:
        found = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def current_files(folder: Path, digest: str) -> list[Path] | None:
    """The files of the report `digest` where `folder` holds them all; else None."""
    found = read_manifest(folder)
    names = found.get("files")
    if found.get("fingerprint") != digest or not isinstance(names, list):
        return None
    paths = [folder / name for name in names]
    return paths if all(path.is_file() for path in paths) else None


def clear(folder: Path) -> None:
    """Remove an earlier report's files from `folder`, so that none outlives its report."""
    names = read_manifest(folder).get("files")
    for name in names if isinstance(names, list) else []:
        if isinstance(name, str) and "/" not in name:
            (folder / name).unlink(missing_ok=True)
    for pattern in LEGACY:
        for path in folder.glob(pattern):
            path.unlink(missing_ok=True)
    (folder / MANIFEST).unlink(missing_ok=True)


def write_manifest(folder: Path, digest: str, files: list[Path],
                   logged: dict[str, str] | None = None) -> None:
    document: dict[str, object] = {"fingerprint": digest,
                                   "files": [path.name for path in files]}
    if logged:
        document["logged"] = logged
    write_atomic(folder / MANIFEST, json.dumps(document, indent=1) + "\n")


def logged_where(folder: Path, digest: str) -> dict[str, str]:
    """Where the report `digest` was logged ({"uri", "run"}), as its manifest says."""
    found = read_manifest(folder)
    logged = found.get("logged")
    return logged if found.get("fingerprint") == digest and isinstance(logged, dict) else {}


def record_logged(folder: Path, digest: str, uri: str, run_id: str) -> None:
    """Note in the manifest that the report `digest` is logged on MLflow run `run_id`."""
    files = current_files(folder, digest)
    if files is not None:
        write_manifest(folder, digest, files, {"uri": uri, "run": run_id})


def page(title: str, lines: list[str], pngs: list[Path]) -> str:
    """One self-contained HTML page: the report's lines, then each PNG inlined, so a
    browser offline and MLflow's artifact viewer show it whole."""
    rows = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
    images = "".join(
        f'<h2>{html.escape(p.stem)}</h2><img style="max-width:100%" alt="{html.escape(p.stem)}" '
        f'src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}">'
        for p in pngs)
    title = html.escape(title)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head>"
            f"<body style='font-family:sans-serif'><h1>{title}</h1><ul>{rows}</ul>{images}"
            "</body></html>\n")
