"""Commands for clusters: local services and schedules of workers."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from msexp.cli.options import StudyOpt, SweepFileArg, console
from msexp.cluster import schedule as sched
from msexp.cluster import services
from msexp.errors import SpecError
from msexp.paths import SLURM_DIR
from msexp.spec import load_spec


def services_up(
    pg_port: Annotated[Optional[int], typer.Option(help="PostgreSQL port [default: free].")
                       ] = None,
    mlflow_port: Annotated[Optional[int], typer.Option(
        help="MLflow server port [default: free].")] = None,
) -> None:
    """Start PostgreSQL and an MLflow server (backed by it) under mlruns/services.

    Prints the URLs and the --storage / --tracking-uri values to use. The database
    password lives in mlruns/services/pgpass; libpq finds it through PGPASSFILE.

    Example: msexp services up && msexp services down
    """
    s = services.up(pg_port=pg_port, mlflow_port=mlflow_port)
    console.print(f"PostgreSQL:    127.0.0.1:{s.pg_port} (databases optuna, mlflow)\n"
                  f"MLflow server: {s.tracking_uri}\n\n"
                  f"export PGPASSFILE={s.pgpass}\n"
                  f"msexp sweep FILE --storage {s.storage_url} --tracking-uri {s.tracking_uri}",
                  highlight=False, soft_wrap=True)


def services_down() -> None:
    """Stop the services started by `msexp services up`.

    Example: msexp services down
    """
    stopped = services.down()
    console.print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))


def schedule(
    file: SweepFileArg,
    storage: Annotated[str, typer.Option("--storage", envvar="MSEXP_STORAGE",
                                         help="Shared Optuna storage (postgresql://...).")],
    tracking_uri: Annotated[str, typer.Option("--tracking-uri", envvar="MLFLOW_TRACKING_URI",
                                              help="Shared MLflow server (http://...).")],
    slurm: Annotated[bool, typer.Option("--slurm", help="Write an sbatch job-array script.")
                     ] = False,
    submit: Annotated[bool, typer.Option("--submit", help="With --slurm: sbatch it.")] = False,
    array: Annotated[int, typer.Option(min=1, help="Slurm array size (workers).")] = 4,
    partition: Annotated[Optional[str], typer.Option(help="Slurm partition.")] = None,
    time_limit: Annotated[str, typer.Option("--time", help="Slurm time limit.")] = "04:00:00",
    cpus_per_task: Annotated[int, typer.Option(min=1, help="CPUs per array task.")] = 2,
    gpus_per_task: Annotated[int, typer.Option(min=0, help="GPUs per array task.")] = 0,
    cron: Annotated[Optional[str], typer.Option(
        "--cron", help='Crontab schedule, e.g. "0 2 * * *".')] = None,
    install: Annotated[bool, typer.Option("--install", help="With --cron: install it.")
                       ] = False,
    k8s: Annotated[bool, typer.Option("--k8s", help="Print a Kubernetes CronJob "
                                                    "(with --cron's schedule).")] = False,
    image: Annotated[str, typer.Option(help="Container image with msexp, for --k8s.")
                     ] = "msexp:latest",
    secret: Annotated[str, typer.Option(help="Kubernetes Secret holding key pgpassword.")
                      ] = "msexp-db",
    study: StudyOpt = None,
    fresh_study: Annotated[bool, typer.Option(
        "--fresh-study/--continue-study",
        help="Scheduled runs start a study named NAME-YYYYMMDD, or continue one.")] = True,
) -> None:
    """Schedule workers on a cluster: Slurm job array, crontab entry or Kubernetes CronJob.

    Each scheduled process runs `msexp worker` (cron: `msexp sweep`) against the shared
    storage and tracking server. Passwords stay in the environment or a Secret.

    Example: msexp schedule sweeps/accum.yaml --slurm --array 8
    --storage postgresql://msexp@db/optuna --tracking-uri http://mlflow:5000
    """
    spec = load_spec(file)
    if sum([slurm, cron is not None and not k8s, k8s]) != 1:
        raise SpecError("msexp schedule", "", "choose one of --slurm, --cron "
                        "SCHEDULE or --k8s --cron SCHEDULE", show_value=False)
    target = sched.Target(file, storage, tracking_uri, study)
    if slurm:
        path = SLURM_DIR / f"{spec.name}.sbatch"
        answer = sched.write_slurm(sched.slurm_script(
            target, array, partition, time_limit, cpus_per_task, gpus_per_task, spec.name),
            path, submit)
        console.print(f"wrote {path}" + (f"; {answer}" if answer else
                                          f"; submit with: sbatch {path}"))
    elif k8s:
        typer.echo(sched.k8s_cronjob(target, cron or "0 2 * * *", image, array, secret,
                                     fresh_study, spec.name), nl=False)
    else:
        line = sched.cron_line(target, cron, fresh_study, spec.name)
        if install:
            sched.install_cron(line)
            console.print("installed:", highlight=False)
        typer.echo(line)
