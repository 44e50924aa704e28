"""Commands for clusters: local services, and schedules of workers (one command per
scheduler, each with only its own options)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from msexp.cli.options import StudyOpt, SweepFileArg, console
from msexp.cluster import kubernetes, services
from msexp.cluster.cron import cron_line, cron_marker, install_cron, uninstall_cron
from msexp.cluster.schedule import Resources, Target
from msexp.cluster.slurm import SlurmJob, slurm_script, write_slurm
from msexp.errors import SpecError
from msexp.paths import SLURM_DIR, STORE_DIR
from msexp.spec import load_spec


def services_up(
    pg_port: Annotated[Optional[int], typer.Option(help="PostgreSQL port.",
                                                   show_default="a free port")] = None,
    mlflow_port: Annotated[Optional[int], typer.Option(
        help="MLflow server port.", show_default="a free port")] = None,
    proxy: Annotated[bool, typer.Option(
        "--proxy", help="Also start msexp's gRPC proxy of the Optuna database "
                        "(workers then give --storage grpc://HOST:PORT).")] = False,
    proxy_port: Annotated[Optional[int], typer.Option(
        help="gRPC proxy port.", show_default="a free port")] = None,
) -> None:
    """Start PostgreSQL and an MLflow server on it, in mlruns/services.

    Prints the URLs and the --storage / --tracking-uri values to use. The database
    password lives in mlruns/services/pgpass; libpq finds it through PGPASSFILE.

    Example: msexp services up && msexp services down
    """
    s = services.up(pg_port=pg_port, mlflow_port=mlflow_port, proxy=proxy,
                    proxy_port=proxy_port)
    storage = s.proxy_url if proxy else s.storage_url
    console.print(f"PostgreSQL:    127.0.0.1:{s.pg_port} (databases optuna, mlflow)\n"
                  f"MLflow server: {s.tracking_uri}\n"
                  + (f"gRPC proxy:    {s.proxy_url} (of database optuna)\n" if proxy else "")
                  + f"\nexport PGPASSFILE={s.pgpass}\n"
                  f"msexp sweep FILE --storage {storage} --tracking-uri {s.tracking_uri}",
                  highlight=False, soft_wrap=True)


def services_proxy(
    storage: Annotated[str, typer.Option(
        "--storage", envvar="MSEXP_STORAGE", help="The PostgreSQL database to serve "
                                                  "(postgresql://...).", show_default=False)],
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 13000,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "0.0.0.0",
    threads: Annotated[int, typer.Option(
        min=64, help="Calls served at once; keep above the number of workers + 32.")] = 256,
) -> None:
    """Serve a PostgreSQL study to workers through Optuna's gRPC proxy.

    With msexp's study lock, in the foreground (until stopped). Workers give --storage
    grpc://HOST:PORT and hold no database connection of their own.

    Example: msexp services proxy --storage postgresql://msexp@db/optuna
    """
    from msexp.search.grpc_proxy import serve  # lazy: grpcio is imported only here

    console.print(f"serving {storage} as grpc://{host}:{port}", highlight=False,
                  soft_wrap=True)
    serve(storage, host, port, threads)


def services_down() -> None:
    """Stop the services started by `msexp services up`.

    Example: msexp services down
    """
    stopped = services.down()
    console.print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))


SharedStorageOpt = Annotated[Optional[str], typer.Option(
    "--storage", envvar="MSEXP_STORAGE", metavar="URL",
    help="Shared Optuna storage (postgresql://...).",
    show_default=False)]
SharedTrackingOpt = Annotated[Optional[str], typer.Option(
    "--tracking-uri", envvar="MLFLOW_TRACKING_URI", metavar="URI",
    help="Shared MLflow server (http://...).",
    show_default=False)]
CpusOpt = Annotated[int, typer.Option(min=1, help="CPUs per worker.")]
GpusOpt = Annotated[int, typer.Option(min=0, help="GPUs (or NPUs) per worker.")]
MemOpt = Annotated[Optional[str], typer.Option(
    help="Memory per worker in Slurm's form, e.g. 16G (sbatch --mem).")]
PodMemOpt = Annotated[Optional[str], typer.Option(
    "--mem", help="Memory per worker pod, e.g. 16G (written as 16Gi).")]
ScheduleOpt = Annotated[str, typer.Option("--schedule", help='Crontab schedule, e.g. "0 2 * * *".')]
FreshStudyOpt = Annotated[bool, typer.Option(
    "--fresh-study/--continue-study",
    help="Each scheduled run starts a study named NAME-YYYYMMDD, or continues one.")]
PodsOpt = Annotated[int, typer.Option(min=1, help="Worker pods.")]
ImageOpt = Annotated[str, typer.Option(help="Container image with msexp.")]
SecretOpt = Annotated[str, typer.Option(
    help="Kubernetes Secret holding key pgpassword (and optional mlflow-username, "
         "mlflow-password).")]
BackoffOpt = Annotated[int, typer.Option(min=0, help="Kubernetes Job retries.")]
GpuResourceOpt = Annotated[str, typer.Option(
    help="Kubernetes resource of --gpus-per-task, e.g. huawei.com/Ascend910.")]


def slurm(
    file: SweepFileArg,
    storage: SharedStorageOpt = None,
    tracking_uri: SharedTrackingOpt = None,
    study: StudyOpt = None,
    submit: Annotated[bool, typer.Option("--submit", help="Submit it with sbatch.")] = False,
    array: Annotated[int, typer.Option(min=1, help="Workers: the job array's size.")] = 4,
    partition: Annotated[Optional[str], typer.Option(help="Slurm partition.")] = None,
    time_limit: Annotated[str, typer.Option("--time", help="Slurm time limit.")] = "04:00:00",
    cpus_per_task: CpusOpt = 2,
    gpus_per_task: GpusOpt = 0,
    mem: MemOpt = None,
    account: Annotated[Optional[str], typer.Option(help="Slurm account.")] = None,
    qos: Annotated[Optional[str], typer.Option(help="Slurm QOS.")] = None,
    sbatch: Annotated[Optional[list[str]], typer.Option(
        "--sbatch", help='Another #SBATCH option (repeatable), e.g. "--constraint=v100".')
    ] = None,
    setup: Annotated[Optional[list[str]], typer.Option(
        "--setup", help='A shell line run before the worker (repeatable), e.g. '
                        '"module load cuda" or "source ~/venv/bin/activate".')] = None,
) -> None:
    """Write an sbatch job array: each array task runs `msexp worker`.

    \b
    Example, with the shared stores in MSEXP_STORAGE and MLFLOW_TRACKING_URI:
    msexp schedule slurm sweeps/accum.yaml --array 8
    """
    name = _sweep_name(file)
    job = SlurmJob(array, time_limit, partition, account, qos, tuple(sbatch or ()),
                         tuple(setup or ()))
    path = SLURM_DIR / f"{name}.sbatch"
    script = slurm_script(_target(file, storage, tracking_uri, study), job,
                                Resources(cpus_per_task, gpus_per_task, mem), name)
    answer = write_slurm(script, path, submit)
    console.print(f"wrote {path}" + (f"; {answer}" if answer else
                                      f"; submit with: sbatch {path}"), highlight=False)


def cron(
    file: SweepFileArg,
    storage: SharedStorageOpt = None,
    tracking_uri: SharedTrackingOpt = None,
    study: StudyOpt = None,
    when: ScheduleOpt = "0 2 * * *",
    fresh_study: FreshStudyOpt = True,
    install: Annotated[bool, typer.Option(
        "--install", help="Put it in your crontab (replacing this sweep's entry).")] = False,
    uninstall: Annotated[bool, typer.Option(
        "--uninstall", help="Remove this sweep's entry from your crontab instead.")] = False,
) -> None:
    """Print a crontab line that runs `msexp sweep` on a schedule.

    One run at a time: a firing while the last run still goes is skipped.

    \b
    Example, with the shared stores in MSEXP_STORAGE and MLFLOW_TRACKING_URI:
    msexp schedule cron sweeps/accum.yaml --schedule "0 2 * * *" --install
    """
    name = _sweep_name(file)
    marker = cron_marker(file, study or name)
    if uninstall:
        removed = uninstall_cron(marker)
        console.print(f"removed: {marker}" if removed else f"no crontab entry has: {marker}",
                      highlight=False, markup=False)
        return
    target = _target(file, storage, tracking_uri, study)
    STORE_DIR.mkdir(parents=True, exist_ok=True)  # the entry's lock and log live there
    line = cron_line(target, when, fresh_study, name, os.environ)
    if install:
        install_cron(line, marker)
        console.print("installed:", highlight=False)
    typer.echo(line)


def k8s_cronjob(
    file: SweepFileArg,
    storage: SharedStorageOpt = None,
    tracking_uri: SharedTrackingOpt = None,
    study: StudyOpt = None,
    when: ScheduleOpt = "0 2 * * *",
    fresh_study: FreshStudyOpt = True,
    pods: PodsOpt = 4,
    image: ImageOpt = "msexp:latest",
    secret: SecretOpt = "msexp-db",
    backoff_limit: BackoffOpt = 2,
    cpus_per_task: CpusOpt = 2,
    gpus_per_task: GpusOpt = 0,
    mem: PodMemOpt = None,
    gpu_resource: GpuResourceOpt = "nvidia.com/gpu",
) -> None:
    """Print a Kubernetes CronJob of worker pods and its sweep file.

    The sweep file goes in a ConfigMap beside it.

    \b
    Example, with the shared stores in MSEXP_STORAGE and MLFLOW_TRACKING_URI:
    msexp schedule k8s-cronjob sweeps/accum.yaml --pods 4 | kubectl apply -f -
    """
    name = _sweep_name(file)
    typer.echo(kubernetes.k8s_cronjob(
        _target(file, storage, tracking_uri, study), when,
        kubernetes.Pods(image, pods, backoff_limit, secret, gpu_resource),
        Resources(cpus_per_task, gpus_per_task, mem), fresh_study, name), nl=False)


def k8s_job(
    file: SweepFileArg,
    storage: SharedStorageOpt = None,
    tracking_uri: SharedTrackingOpt = None,
    study: StudyOpt = None,
    pods: PodsOpt = 4,
    image: ImageOpt = "msexp:latest",
    secret: SecretOpt = "msexp-db",
    backoff_limit: BackoffOpt = 2,
    cpus_per_task: CpusOpt = 2,
    gpus_per_task: GpusOpt = 0,
    mem: PodMemOpt = None,
    gpu_resource: GpuResourceOpt = "nvidia.com/gpu",
) -> None:
    """Print a Kubernetes Job of worker pods and its sweep file.

    The sweep file goes in a ConfigMap beside it.

    \b
    Example, with the shared stores in MSEXP_STORAGE and MLFLOW_TRACKING_URI:
    msexp schedule k8s-job sweeps/accum.yaml --pods 8 | kubectl apply -f -
    """
    name = _sweep_name(file)
    typer.echo(kubernetes.k8s_job(
        _target(file, storage, tracking_uri, study),
        kubernetes.Pods(image, pods, backoff_limit, secret, gpu_resource),
        Resources(cpus_per_task, gpus_per_task, mem), name), nl=False)


def _sweep_name(file: Path) -> str:
    """The checked sweep's name; checked portably: the workers run elsewhere."""
    return load_spec(file, local=False).name


def _target(file: Path, storage: str | None, tracking_uri: str | None, study: str | None
            ) -> Target:
    return Target(file, _required(storage, "--storage"),
                        _required(tracking_uri, "--tracking-uri"), study)


def _required(value: str | None, option: str) -> str:
    if not value:
        raise SpecError("msexp schedule", option, "is required to schedule workers",
                        show_value=False)
    return value
