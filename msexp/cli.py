"""The `msexp` command line: parses options and calls one core function per command."""

from __future__ import annotations

import gc
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from msexp.errors import MsexpError, SpecError
from msexp.runner import start_workers

app = typer.Typer(
    help="Sweep MindSpore training techniques and compare every trial in MLflow.\n\n"
         "Example: msexp sweep sweeps/accum.yaml",
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
console = Console()
err_console = Console(stderr=True)
_state = {"debug": False}

SweepFileArg = Annotated[Path, typer.Argument(help="The sweep YAML file.", show_default=False)]
TrackingOpt = Annotated[Optional[str], typer.Option(
    "--tracking-uri", envvar="MLFLOW_TRACKING_URI",
    help="MLflow tracking URI [default: sqlite:///mlruns/mlflow.db].")]
StorageOpt = Annotated[Optional[str], typer.Option(
    "--storage", envvar="MSEXP_STORAGE",
    help="Optuna storage: an RDB URL (postgresql://...) or a .journal file "
         "[default: mlruns/optuna.journal].")]
StudyOpt = Annotated[Optional[str], typer.Option(
    "--study", help="Study name [default: the sweep's name]; a new name starts afresh.")]


@app.callback()
def main(debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False):
    """Sweep MindSpore training techniques and compare every trial in MLflow."""
    _state["debug"] = debug


def _fail(exc: MsexpError) -> typer.Exit:
    if _state["debug"]:
        raise exc
    err_console.print(str(exc), markup=False, highlight=False, soft_wrap=True)
    return typer.Exit(exc.exit_code)


def _load(path: Path):
    from msexp.spec import load_spec

    try:
        return load_spec(path)
    except MsexpError as exc:
        raise _fail(exc) from None


@app.command()
def validate(file: SweepFileArg) -> None:
    """Check a sweep file without running anything.

    Example: msexp validate sweeps/accum.yaml
    """
    spec = _load(file)
    console.print(f"{file}: ok ({spec.method.value}, {spec.n_trials()} trials)")


@app.command()
def plan(file: SweepFileArg) -> None:
    """List the trials a sweep would run, without running any.

    Example: msexp plan sweeps/accum.yaml
    """
    from msexp.space import derived

    spec = _load(file)
    swept = [p.name for p in spec.space.params]
    if spec.method.value != "grid":
        table = Table(title=f"{spec.name}: {spec.method.value}, {spec.n_trials()} trials over")
        for column in ("param", "distribution", "when"):
            table.add_column(column)
        for p in spec.space.params:
            dist = (", ".join(map(str, p.values)) if p.values is not None else
                    f"{p.low} .. {p.high}" + (" log" if p.log else "")
                    + (f" step {p.step}" if p.step else ""))
            table.add_row(p.name, dist, _when_text(p.when))
        console.print(table)
        console.print(f"fixed: {_kv(spec.space.resolve({}), exclude=swept)}")
        return
    table = Table(title=f"{spec.name}: grid of {spec.n_trials()} trials on {spec.file.experiment}")
    table.add_column("#", justify="right")
    for name in swept:
        table.add_column(name)
    table.add_column("micro_batch", justify="right")
    table.add_column("effective_batch", justify="right")
    for i, point in enumerate(spec.space.grid()[:spec.n_trials()]):
        values = spec.space.resolve(point)
        extra = derived(values)
        table.add_row(str(i), *(_cell(point.get(n, "-")) for n in swept),
                      str(extra["micro_batch"]), str(extra["effective_batch"]))
    console.print(table)
    console.print(f"fixed: {_kv(spec.space.resolve({}), exclude=swept)}")


@app.command()
def sweep(
    file: SweepFileArg,
    tracking_uri: TrackingOpt = None,
    storage: StorageOpt = None,
    study: StudyOpt = None,
    workers: Annotated[Optional[int], typer.Option(
        "--workers", min=1, help="Trials run at once [default: budget.workers].")] = None,
) -> None:
    """Run a sweep: every trial is a MindSpore job, every result lands in MLflow.

    Running the same command again resumes the study without re-running finished trials.

    Example: msexp sweep sweeps/accum.yaml --workers 2
    """
    spec = _load(file)
    outcome = _run(spec, workers or spec.budget.workers, _SweepProgress(spec), tracking_uri,
                   storage, study)
    _summary(spec, outcome)
    console.print(f"plots, importances: msexp report {file}", highlight=False)
    if outcome.interrupted:
        err_console.print("interrupted: run the same command again to resume")
        raise typer.Exit(130)


@app.command()
def worker(
    file: SweepFileArg,
    storage: StorageOpt = None,
    tracking_uri: TrackingOpt = None,
    study: StudyOpt = None,
    workers: Annotated[int, typer.Option("--workers", min=1,
                                         help="Trials this worker runs at once.")] = 1,
) -> None:
    """Join a sweep's study from another process or machine and run trials until none are left.

    Every worker on the same storage shares one study: no grid point runs twice.
    Output is one line per trial, for logs.

    Example: msexp worker sweeps/accum.yaml --storage postgresql://msexp@db/msexp
    """
    spec = _load(file)
    outcome = _run(spec, workers, _LineProgress(spec), tracking_uri, storage, study)
    if outcome.interrupted:
        raise typer.Exit(130)


def _run(spec: Any, workers: int, progress: Any, tracking_uri: str | None,
         storage: str | None, study: str | None) -> Any:
    """Run the sweep's trials in `workers` trial processes, showing `progress` (a context
    manager) while they run: the body of the sweep and worker commands."""
    processes = start_workers(workers)  # MindSpore imports there
    from msexp.study import run_sweep  # while Optuna and MLflow import here

    try:
        with progress:
            return run_sweep(spec, progress, processes, tracking_uri, storage, study)
    except MsexpError as exc:
        raise _fail(exc) from None


@app.command()
def report(
    file: Annotated[Optional[Path], typer.Argument(
        help="The sweep file (or give --study and --storage).", show_default=False)] = None,
    study: StudyOpt = None,
    storage: StorageOpt = None,
    tracking_uri: TrackingOpt = None,
) -> None:
    """Show a study's trials, best trial (or Pareto set) and parameter importances.

    Optuna's plots (optimization history, parallel coordinates, importances, Pareto front)
    are saved as HTML under mlruns/reports/ and logged on the sweep's MLflow parent run.

    Example: msexp report sweeps/accum.yaml
    """
    from msexp.report import REPORTS_DIR, build_report, log_report
    from msexp.tracking import Tracker

    loaded = _existing_study(file, study, storage)
    rep = build_report(loaded, REPORTS_DIR / loaded.study_name)
    _trials_table(loaded)
    names = rep.objective_names()
    if rep.best:
        title = "Pareto set" if rep.multi_objective else "best trial"
        table = Table(title=title)
        for column in ("#", *names, "params"):
            table.add_column(column)
        for t in rep.best:
            table.add_row(str(t.number), *(_cell(v) for v in t.values), _kv(t.params))
        console.print(table)
    if rep.importances:
        console.print("importance: " + ", ".join(f"{k}={v:.2f}" for k, v in
                                                  rep.importances.items()))
    for path in rep.plots:
        console.print(f"plot: {path}")
    run_id = log_report(rep, Tracker(tracking_uri))
    if run_id:
        console.print(f"logged on MLflow run {run_id}")


@app.command()
def status(
    file: Annotated[Optional[Path], typer.Argument(
        help="The sweep file (or give --study and --storage).", show_default=False)] = None,
    study: StudyOpt = None,
    storage: StorageOpt = None,
) -> None:
    """Show a study's progress: trials by state and the trials running now.

    Example: msexp status sweeps/accum.yaml
    """
    import time

    from optuna.trial import TrialState

    from msexp.report import state_counts

    loaded = _existing_study(file, study, storage)
    counts = state_counts(loaded)
    total = loaded.user_attrs.get("msexp.total", "?")
    done = sum(v for k, v in counts.items() if k not in ("RUNNING", "WAITING"))
    console.print(f"{loaded.study_name}: {done} finished of {total}; "
                  + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    for t in loaded.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        beat = t.user_attrs.get("heartbeat")
        age = f", heartbeat {time.time() - beat:.0f} s ago" if beat else ""
        console.print(f"  running #{t.number} on {t.user_attrs.get('owner', '?')}{age}: "
                      f"{_kv(t.params)}")


def _existing_study(file: Path | None, study: str | None, storage: str | None):
    import optuna

    from msexp.study import open_storage, storage_label

    if file is None and study is None:
        raise _fail(SpecError("msexp", "", "give a sweep file or --study NAME", show_value=False))
    name = study or _load(file).name
    try:
        return optuna.load_study(study_name=name, storage=open_storage(storage))
    except KeyError:
        raise _fail(MsexpError(f"no study named {name!r} in {storage_label(storage)}")) from None


def _trials_table(study) -> None:
    names = study.user_attrs.get("msexp.objectives", [])
    columns = [*names, *(m for m in ("eval_accuracy", "samples_per_s", "peak_mem_mb", "wall_s")
                         if m not in names)]
    swept = sorted({k for t in study.trials for k in t.params})
    table = Table(title=f"{study.study_name}: trials")
    for name in ("#", "status", *swept, *columns):
        table.add_column(name, justify="left" if name == "status" else "right")
    for t in study.get_trials(deepcopy=False):
        if not t.state.is_finished():
            continue
        metrics = t.user_attrs.get("metrics", {})
        table.add_row(str(t.number), t.user_attrs.get("status", t.state.name),
                      *(_cell(t.params.get(n, "-")) for n in swept),
                      *(_cell(metrics.get(c, "-")) for c in columns))
    console.print(table)


@app.command()
def sync(tracking_uri: TrackingOpt = None) -> None:
    """Deliver trial results kept on disk while the MLflow server was unreachable.

    Example: msexp sync --tracking-uri http://mlflow.internal:5000
    """
    from msexp.tracking import SPOOL_DIR, Tracker

    tracker = Tracker(tracking_uri)
    delivered = tracker.flush_spool()
    left = len(list(SPOOL_DIR.glob("*.json"))) if SPOOL_DIR.exists() else 0
    console.print(f"delivered {delivered} trial(s) to {tracker.uri}; {left} still waiting")
    if left:
        raise typer.Exit(1)


services_app = typer.Typer(help="A local PostgreSQL and MLflow server for trying shared "
                                 "studies.", no_args_is_help=True)
app.add_typer(services_app, name="services")


@services_app.command("up")
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
    from msexp import services

    try:
        s = services.up(pg_port=pg_port, mlflow_port=mlflow_port)
    except MsexpError as exc:
        raise _fail(exc) from None
    console.print(f"PostgreSQL:    127.0.0.1:{s.pg_port} (databases optuna, mlflow)\n"
                  f"MLflow server: {s.tracking_uri}\n\n"
                  f"export PGPASSFILE={s.pgpass}\n"
                  f"msexp sweep FILE --storage {s.storage_url} --tracking-uri {s.tracking_uri}",
                  highlight=False, soft_wrap=True)


@services_app.command("down")
def services_down() -> None:
    """Stop the services started by `msexp services up`.

    Example: msexp services down
    """
    from msexp import services

    stopped = services.down()
    console.print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))


@app.command()
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
    from msexp import schedule as sched

    spec = _load(file)
    if sum([slurm, cron is not None and not k8s, k8s]) != 1:
        raise _fail(SpecError("msexp schedule", "", "choose one of --slurm, --cron "
                              "SCHEDULE or --k8s --cron SCHEDULE", show_value=False))
    try:
        target = sched.Target(file, storage, tracking_uri, study)
        if slurm:
            path = Path("mlruns/slurm") / f"{spec.name}.sbatch"
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
    except MsexpError as exc:
        raise _fail(exc) from None


@app.command("run")
def run_one(
    experiment: Annotated[str, typer.Argument(
        help="Built-in name, package.module[:build] or path/to/file.py[:build].",
        show_default=False)],
    set_: Annotated[Optional[list[str]], typer.Option(
        "--set", "-s", help="A knob value, key=value (repeatable).")] = None,
) -> None:
    """Run one trial in the foreground, for debugging; nothing is recorded.

    Example: msexp run mlp_digits --set micro_size=4 --set epochs=2
    """
    import yaml

    from msexp.experiment import trial_params

    try:
        fixed: dict[str, Any] = {}
        for item in set_ or []:
            key, sep, text = item.partition("=")
            if not sep:
                raise SpecError("--set", key, "must be key=value", item)
            fixed[key.strip()] = yaml.safe_load(text)
        params = trial_params(experiment, fixed)
    except MsexpError as exc:
        raise _fail(exc) from None
    console.print(f"[bold]{experiment}[/]: {_kv(params)}")
    from msexp import trial

    def emit(event: dict[str, Any]) -> None:
        if event["event"] == "epoch":
            console.print(f"epoch {event['epoch']}: {_kv(event['metrics'])}")
        elif event["event"] == "start":
            console.print(f"data: {event['data_source']}")

    try:
        metrics = trial.run({"experiment": experiment, "params": params}, emit)
    except Exception as exc:
        if _state["debug"]:
            raise
        err_console.print(f"trial failed: {type(exc).__name__}: {exc} (--debug shows the "
                          "traceback)", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    console.print(_kv(metrics))


class _SweepProgress:
    """Rich progress bar: trials done out of total and the best value so far."""

    def __init__(self, spec):
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.spec = spec
        self.bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                            MofNCompleteColumn(), TextColumn("best {task.fields[best]}"),
                            TimeElapsedColumn(), console=console)
        self.task = None

    def __enter__(self):
        self.bar.__enter__()
        return self

    def __exit__(self, *exc):
        return self.bar.__exit__(*exc)

    def start(self, total: int, done: int) -> None:
        self.task = self.bar.add_task(self.spec.name, total=total, completed=done, best="-")

    def trial_done(self, number: int, result, best: str) -> None:
        metric = self.spec.objectives[0].metric
        value = (result.metrics or result.last_epoch_metrics()).get(metric)
        shown = f"{metric}={value:.4g}" if value is not None else result.error
        self.bar.console.print(f"trial {number}: {result.status.value} {shown} "
                               f"({result.wall_s:.1f} s)", markup=False, highlight=False)
        self.bar.update(self.task, advance=1, best=best)


class _LineProgress:
    """One plain line per trial, for logs of workers that no one watches."""

    def __init__(self, spec):
        self.spec = spec

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def start(self, total: int, done: int) -> None:
        console.print(f"{self.spec.name}: {done}/{total} trials done", highlight=False)

    def trial_done(self, number: int, result, best: str) -> None:
        console.print(f"trial {number}: {result.status.value} ({result.wall_s:.1f} s); "
                      f"best {best}", markup=False, highlight=False)


def _summary(spec, outcome) -> None:
    _trials_table(outcome.study)
    runs, parent, command = outcome.tracker.ui_links(outcome.experiment_id, outcome.parent_run_id)
    if command:
        console.print(f"serve the store:  {command}")
    console.print(f"compare trials:   {runs}")
    console.print(f"sweep run:        {parent}")


def _cell(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _kv(values: dict[str, Any], exclude: Any = ()) -> str:
    return ", ".join(f"{k}={_cell(v)}" for k, v in values.items() if k not in exclude)


def _when_text(when) -> str:
    return ", ".join(f"{k} in {list(v)}" for k, v in (when or {}).items())


new_app = typer.Typer(help="Write a new experiment or sweep file that works as written.",
                      no_args_is_help=True)
app.add_typer(new_app, name="new")


@new_app.command("experiment")
def new_experiment(
    name: Annotated[str, typer.Argument(help="Python identifier; writes NAME.py.",
                                        show_default=False)],
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Write NAME.py: a commented experiment (network, loss, data) that trains as written.

    Example: msexp new experiment my_model
    """
    from msexp.scaffold import new_experiment as write

    try:
        path = write(name, force=force)
    except MsexpError as exc:
        raise _fail(exc) from None
    console.print(f"wrote {path}; next: msexp new sweep --experiment {path}")


class SweepMethod(str, Enum):
    grid = "grid"
    tpe = "tpe"


@new_app.command("sweep")
def new_sweep(
    experiment: Annotated[str, typer.Option(
        "--experiment", help="Built-in name, package.module:build or path/to/file.py.",
        show_default=False)],
    method: Annotated[SweepMethod, typer.Option("--method", help="grid or tpe.")
                      ] = SweepMethod.grid,
    output: Annotated[Optional[Path], typer.Option(
        "--output", "-o", help="Where to write [default: sweeps/<experiment>.yaml].")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Write a sweep file over the main knobs of an experiment; it validates as written.

    Example: msexp new sweep --experiment my_model.py --method tpe
    """
    from msexp.scaffold import new_sweep as write

    try:
        path = write(experiment, method.value, output, force)
    except MsexpError as exc:
        raise _fail(exc) from None
    _load(path)
    console.print(f"wrote {path}; next: msexp plan {path} && msexp sweep {path}")


@app.command()
def knobs(
    experiment: Annotated[Optional[str], typer.Option(
        "--experiment", help="Add this experiment's own knobs and defaults.")] = None,
) -> None:
    """List every knob: type, allowed values, default and condition (when).

    Example: msexp knobs --experiment mlp_digits
    """
    table = Table(title="knobs" + (f" of {experiment}" if experiment else ""))
    for column in ("knob", "type", "allowed", "default", "when", "meaning"):
        table.add_column(column)
    for knob in _knob_table(experiment).values():
        allowed = (", ".join(map(str, knob.choices)) if knob.choices else
                   " ".join(f"{op} {getattr(knob, attr):g}" for attr, op in
                            (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))
                            if getattr(knob, attr) is not None))
        table.add_row(knob.name, knob.type.__name__, allowed, _cell(knob.default),
                      _when_text(knob.when), knob.help)
    console.print(table)


@app.command()
def schema(
    experiment: Annotated[Optional[str], typer.Option(
        "--experiment", help="Include this experiment's own knobs.")] = None,
) -> None:
    """Print the JSON Schema of sweep files, for editor completion and checks.

    Example: msexp schema > sweep.schema.json
    """
    import json

    from msexp.knobs import METRICS
    from msexp.schema import sweep_schema

    metrics = METRICS + tuple(m for e in _experiments(experiment) for m in e.metrics)
    typer.echo(json.dumps(sweep_schema(_knob_table(experiment), metrics), indent=2))


def _experiments(ref: str | None) -> list:
    from msexp.experiment import builtin_names, load_experiment

    try:
        return [load_experiment(r, "--experiment") for r in ([ref] if ref else builtin_names())]
    except MsexpError as exc:
        raise _fail(exc) from None


def _knob_table(ref: str | None) -> dict:
    """One experiment's knobs (with its defaults), or msexp's plus every built-in's own."""
    if ref:
        return dict(_experiments(ref)[0].knobs)
    from msexp.knobs import KNOBS

    merged = dict(KNOBS)
    for exp in _experiments(None):
        merged.update(exp.own_knobs)
    return merged


def console_main() -> None:
    """The `msexp` console script."""
    try:
        app(prog_name="msexp")
    finally:
        gc.freeze()  # exit without collecting every object MLflow made (~0.7 s)
