"""Cluster scale on real services: PostgreSQL-backed studies and an MLflow server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import optuna
import pytest
from mlflow import MlflowClient
from typer.testing import CliRunner

from msexp.cli import app
from msexp.cluster import services
from tests.conftest import msexp_cmd, rdb_storage, write

pytestmark = pytest.mark.skipif(
    not any(Path(p).exists() for p in ("/usr/lib/postgresql", "/usr/local/bin/initdb")),
    reason="PostgreSQL server binaries are not installed (.ci/run installs them)")


@pytest.fixture
def cluster(shared_services: services.Services) -> services.Services:
    return shared_services


def study_of(cluster: services.Services, name: str) -> optuna.Study:
    os.environ["PGPASSFILE"] = str(cluster.pgpass)
    return optuna.load_study(study_name=name, storage=rdb_storage(cluster.storage_url))


def trial_runs(cluster: services.Services, experiment: str) -> list:
    client = MlflowClient(cluster.tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    return [r for r in client.search_runs([exp.experiment_id])
            if r.data.tags.get("msexp.role") == "trial"]


def sweep_args(cluster: services.Services, *args: str) -> list[str]:
    return [*args, "--storage", cluster.storage_url, "--tracking-uri", cluster.tracking_uri]


@pytest.mark.slow
def test_two_workers_on_one_postgresql_study(cluster, workdir: Path) -> None:
    sweep = write(workdir / "pg.yaml", """
        name: pg-shared
        experiment: broken:build
        fixed: {hidden: 16}
        params:
          lr: [0.01, 0.02]
          micro_size: [1, 2]
    """)
    env = cluster.env()
    workers = [subprocess.Popen(msexp_cmd(*sweep_args(cluster, "worker", str(sweep))),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=env) for _ in range(2)]
    outputs = [w.communicate(timeout=600)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], outputs
    study = study_of(cluster, "pg-shared")
    points = [(t.params["lr"], t.params["micro_size"]) for t in study.trials]
    assert len(points) == 4 and len(set(points)) == 4, "every grid point exactly once"
    assert all(t.state.name == "COMPLETE" for t in study.trials)
    runs = trial_runs(cluster, "pg-shared")
    assert sorted(int(r.data.tags["msexp.trial"]) for r in runs) == [0, 1, 2, 3]
    assert {r.data.tags["mlflow.parentRunId"] for r in runs} == \
        {study.user_attrs["mlflow_parent_run_id"]}


@pytest.mark.slow
def test_mlflow_outage_loses_no_result_and_secrets_stay_out(cluster, workdir: Path) -> None:
    password = cluster.pgpass.read_text().strip().rsplit(":", 1)[1]
    storage = cluster.storage_url.replace("msexp@", f"msexp:{password}@")
    sweep = write(workdir / "outage.yaml", """
        name: outage
        experiment: broken:build
        fixed: {hidden: 16, epochs: 2, pause_s: 0.3}
        params:
          lr: [0.01, 0.02, 0.03, 0.04]
    """)
    proc = subprocess.Popen(
        msexp_cmd("sweep", str(sweep), "--storage", storage, "--tracking-uri",
                  cluster.tracking_uri), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, env={**os.environ, "COLUMNS": "200"})
    deadline = time.time() + 300
    while time.time() < deadline:
        time.sleep(0.2)
        try:
            done = [t for t in study_of(cluster, "outage").trials if t.state.name == "COMPLETE"]
        except KeyError:
            continue
        if done:
            break
    mlflow_pid = json.loads((cluster.root / "mlflow.pid").read_text())["pid"]
    os.killpg(mlflow_pid, signal.SIGKILL)  # the server goes away in mid-sweep
    output, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, output
    assert "kept in" in output and "msexp sync" in output
    spool = list((workdir / "mlruns" / "spool").glob("*.json"))
    assert spool, "results made during the outage wait on disk"

    services.up(cluster.root)  # the server is back
    result = CliRunner().invoke(app, ["sync", "--tracking-uri", cluster.tracking_uri])
    assert result.exit_code == 0, result.output
    assert f"delivered {len(spool)} trial(s)" in result.output
    runs = trial_runs(cluster, "outage")
    assert sorted(int(r.data.tags["msexp.trial"]) for r in runs) == [0, 1, 2, 3]
    assert all(r.data.tags["status"] == "COMPLETE" for r in runs)

    client = MlflowClient(cluster.tracking_uri)
    exp = client.get_experiment_by_name("outage")
    parent = next(r for r in client.search_runs([exp.experiment_id])
                  if r.data.tags.get("msexp.role") == "sweep")
    assert parent.data.tags["msexp.storage"] == storage.replace(password, "***")
    for run in [parent, *runs]:
        texts = [*run.data.params.values(), *run.data.tags.values()]
        assert not any(password in text for text in texts)
    for log in (workdir / "mlruns" / "trials" / "outage").glob("*/trial.log"):
        assert password not in log.read_text()
    assert password not in output


@pytest.mark.slow  # with the services the slow tier starts anyway: about 20 s a start
def test_the_database_has_connections_for_many_workers(cluster) -> None:
    import sqlalchemy

    os.environ["PGPASSFILE"] = str(cluster.pgpass)
    engine = sqlalchemy.create_engine(cluster.storage_url, poolclass=sqlalchemy.pool.NullPool)
    with engine.connect() as connection:
        limit = connection.execute(sqlalchemy.text("show max_connections")).scalar()
    assert int(limit) >= 400, "PostgreSQL's default of 100 can run out at a few dozen workers"
