"""Commands for clusters: local services and schedules of workers."""

from __future__ import annotations

import os
from typing import Annotated, Optional

import typer

from msexp.cli.options import StudyOpt, SweepFileArg, console
from msexp.cluster import schedule as sched
from msexp.cluster import services
from msexp.errors import SpecError
from msexp.paths import SLURM_DIR, STORE_DIR
from msexp.spec import load_spec


def services_up(
    pg_port: Annotated[Optional[int], typer.Option(help="PostgreSQL port.",
                                                   show_default="a free port")] = None,
    mlflow_port: Annotated[Optional[int], typer.Option(
        help="MLflow server port.", show_default="a free port")] = None,
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
    storage: Annotated[Optional[str], typer.Option(
        "--storage", envvar="MSEXP_STORAGE", help="Shared Optuna storage (postgresql://...).",
        show_default=False)] = None,
    tracking_uri: Annotated[Optional[str], typer.Option(
        "--tracking-uri", envvar="MLFLOW_TRACKING_URI", help="Shared MLflow server (http://...).",
        show_default=False)] = None,
    slurm: Annotated[bool, typer.Option("--slurm", help="Write an sbatch job-array script.")
                     ] = False,
    submit: Annotated[bool, typer.Option("--submit", help="With --slurm: sbatch it.")] = False,
    array: Annotated[int, typer.Option(min=1, help="Workers: Slurm array size, or pods.")] = 4,
    partition: Annotated[Optional[str], typer.Option(help="Slurm partition.")] = None,
    time_limit: Annotated[str, typer.Option("--time", help="Slurm time limit.")] = "04:00:00",
    cpus_per_task: Annotated[int, typer.Option(min=1, help="CPUs per worker.")] = 2,
    gpus_per_task: Annotated[int, typer.Option(min=0, help="GPUs (or NPUs) per worker.")] = 0,
    mem: Annotated[Optional[str], typer.Option(
        help="Memory per worker, e.g. 16G (Slurm --mem; on Kubernetes 16Gi).")] = None,
    account: Annotated[Optional[str], typer.Option(help="Slurm account.")] = None,
    qos: Annotated[Optional[str], typer.Option(help="Slurm QOS.")] = None,
    sbatch: Annotated[Optional[list[str]], typer.Option(
        "--sbatch", help='Another #SBATCH option (repeatable), e.g. "--constraint=v100".')
    ] = None,
    setup: Annotated[Optional[list[str]], typer.Option(
        "--setup", help='A shell line run before the worker (repeatable), e.g. '
                        '"module load cuda" or "source ~/venv/bin/activate".')] = None,
    cron: Annotated[Optional[str], typer.Option(
        "--cron", help='Crontab schedule, e.g. "0 2 * * *".')] = None,
    install: Annotated[bool, typer.Option(
        "--install", help="With --cron: put it in your crontab (replacing this sweep's "
                          "entry).")] = False,
    uninstall: Annotated[bool, typer.Option(
        "--uninstall", help="Remove this sweep's entry from your crontab.")] = False,
    k8s: Annotated[bool, typer.Option("--k8s", help="Print a Kubernetes CronJob "
                                                    "(with --cron's schedule).")] = False,
    k8s_job: Annotated[bool, typer.Option(
        "--k8s-job", help="Print a one-off Kubernetes Job of --array worker pods.")] = False,
    image: Annotated[str, typer.Option(help="Container image with msexp, for --k8s.")
                     ] = "msexp:latest",
    secret: Annotated[str, typer.Option(
        help="Kubernetes Secret holding key pgpassword (and optional mlflow-username, "
             "mlflow-password).")] = "msexp-db",
    backoff_limit: Annotated[int, typer.Option(min=0, help="Kubernetes Job retries.")] = 2,
    gpu_resource: Annotated[str, typer.Option(
        help="Kubernetes resource of --gpus-per-task, e.g. huawei.com/Ascend910.")
    ] = "nvidia.com/gpu",
    study: StudyOpt = None,
    fresh_study: Annotated[bool, typer.Option(
        "--fresh-study/--continue-study",
        help="Scheduled runs start a study named NAME-YYYYMMDD, or continue one.")] = True,
) -> None:
    """Schedule workers on a cluster: Slurm job array, crontab entry or Kubernetes CronJob/Job.

    Each scheduled process runs `msexp worker` (cron: `msexp sweep`) against the shared
    storage and tracking server. Passwords stay in the environment or a Secret.

    Example: msexp schedule sweeps/accum.yaml --slurm --array 8
    --storage postgresql://msexp@db/optuna --tracking-uri http://mlflow:5000
    """
    spec = load_spec(file)
    chosen = [slurm, k8s_job, k8s, (cron is not None and not k8s) or uninstall]
    if sum(chosen) != 1:
        raise SpecError("msexp schedule", "", "choose one of --slurm, --cron SCHEDULE, "
                        "--k8s --cron SCHEDULE or --k8s-job", show_value=False)
    if uninstall:
        marker = sched.cron_marker(file, study or spec.name)
        removed = sched.uninstall_cron(marker)
        console.print(f"removed: {marker}" if removed else f"no crontab entry has: {marker}",
                      highlight=False, markup=False)
        return
    target = sched.Target(file, _required(storage, "--storage"),
                          _required(tracking_uri, "--tracking-uri"), study)
    resources = sched.Resources(cpus_per_task, gpus_per_task, mem)
    pods = sched.Pods(image, array, backoff_limit, secret, gpu_resource)
    if slurm:
        job = sched.SlurmJob(array, time_limit, partition, account, qos, tuple(sbatch or ()),
                             tuple(setup or ()))
        path = SLURM_DIR / f"{spec.name}.sbatch"
        answer = sched.write_slurm(sched.slurm_script(target, job, resources, spec.name),
                                   path, submit)
        console.print(f"wrote {path}" + (f"; {answer}" if answer else
                                          f"; submit with: sbatch {path}"), highlight=False,
                      soft_wrap=True)
    elif k8s_job:
        typer.echo(sched.k8s_job(target, pods, resources, spec.name), nl=False)
    elif k8s:
        typer.echo(sched.k8s_cronjob(target, cron or "0 2 * * *", pods, resources,
                                     fresh_study, spec.name), nl=False)
    else:
        STORE_DIR.mkdir(parents=True, exist_ok=True)  # the entry's lock and log live there
        line = sched.cron_line(target, cron, fresh_study, spec.name, os.environ)
        if install:
            sched.install_cron(line, sched.cron_marker(file, study or spec.name))
            console.print("installed:", highlight=False)
        typer.echo(line)


def _required(value: str | None, option: str) -> str:
    if not value:
        raise SpecError("msexp schedule", option, "is required to schedule workers",
                        show_value=False)
    return value
