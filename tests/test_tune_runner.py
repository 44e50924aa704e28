"""Whole `msexp tune` runs in-process (`tune.tuner.tune`, `msexp tune`, `msexp.tune_sweep`)
on a runner that answers each probe and training from a table of measured figures (the
trials' MindSpore would take minutes): real hosts, real MLflow runs, real plot and sweep
file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from msexp.cli.app import app
from msexp.execution.result import Status, TrialResult
from msexp.spec import SweepSpec, load_spec
from msexp.training.records import Epoch
from msexp.tune.outcome import Outcome
from msexp.tune.runner import Job, Ran, Runner
from msexp.tune.tuner import Settings, tune, tuning
from tests.conftest import write

SWEEP = """
    name: {name}
    experiment: {{command: python train.py}}
    objective: [{{metric: eval_accuracy, direction: maximize}}]
    budget: {{workers: 1, repeats: 2}}
    fixed: {{batch_size: 64}}
    params:
      micro_size: [1, 2, 4]
"""


class Measured:
    """What each trial measured, by micro_size: a probe's step times (its first update
    compiles), its train_mem_mb, and a training's eval_accuracy by seed and samples/s."""

    def __init__(self, step_ms: dict[int, float], accuracy: dict[int, tuple[float, float]],
                 memory_mb: dict[int, float] | None = None):
        self.step_ms, self.accuracy = step_ms, accuracy
        self.memory_mb = memory_mb or {1: 5.0, 2: 4.0, 4: 3.0}
        self.clock = 0.0

    def answer(self, job: Job) -> TrialResult:
        micro, batch = job.params["micro_size"], job.params["batch_size"]
        if job.probe is not None:
            steps = [3000.0] + [self.step_ms[micro] * (1 + 0.02 * (i % 3 - 1))
                                for i in range(job.probe.updates - 1)]
            return TrialResult(Status.COMPLETE, {
                "samples_per_s": batch * 1000 / self.step_ms[micro],
                "step_ms": self.step_ms[micro], "train_mem_mb": self.memory_mb[micro],
                "overflow_rate": 0.0, "training_updates": 1000.0},
                epochs=[Epoch(1, job.probe.updates, 0.0, {}, {"step_ms": steps})])
        seed = job.params["seed"]
        return TrialResult(Status.COMPLETE, {
            "eval_accuracy": self.accuracy[micro][seed],
            "samples_per_s": batch * 1000 / self.step_ms[micro] * (1 + 0.01 * seed),
            "train_mem_mb": self.memory_mb[micro]})

    def run(self, runner: Runner, jobs: list[Job]) -> list[Ran]:
        ran = []
        for job in jobs:
            runner.request(job)  # its trial folder
            self.clock += 1.0
            ran.append(Ran(job, self.answer(job), self.clock, self.clock + 0.5))
            runner._said(ran[-1])
        return ran


@pytest.fixture
def store(mlflow_db: Path) -> str:
    """The module's embedded MLflow store: its URI."""
    return f"sqlite:///{mlflow_db}"


def measured(monkeypatch: pytest.MonkeyPatch, table: Measured) -> Measured:
    """Every tune trial answered from `table` (on the real hosts' runner)."""
    monkeypatch.setattr(Runner, "run", lambda self, jobs, hosts=None: table.run(self, jobs))
    return table


def sweep(folder: Path, name: str, more: str = "") -> Path:
    write(folder / "train.py", "from msexp import hooks  # hooks.MsexpCallback()\n")
    return write(folder / f"{name}.yaml", SWEEP.format(name=name) + more)


def tuned(spec: SweepSpec, settings: Settings, store: str) -> tuple[Outcome, list[str]]:
    said: list[str] = []
    with tuning(spec, 1, store, said.append) as (runner, runs):
        outcome = tune(spec, settings, runner, runs)
    return outcome, said


def ran_beside(tuned_file: Path) -> dict:
    """The params a tuned sweep file runs, copied beside its script (as docs/tune.md says)."""
    copy = Path(tuned_file.name)
    copy.write_text(tuned_file.read_text())
    return load_spec(copy).space.resolve({})


def children(store: str, experiment: str, parent: str) -> list:
    from mlflow import MlflowClient

    client = MlflowClient(store)
    found = client.get_experiment_by_name(experiment)
    return client.search_runs([found.experiment_id],
                              f"tags.`mlflow.parentRunId` = '{parent}'")


def artifacts(store: str, run_id: str) -> set[str]:
    from mlflow import MlflowClient

    return {a.path for a in MlflowClient(store).list_artifacts(run_id)}


def test_a_tune_run_confirms_the_top_two_with_each_seed_and_picks_the_fastest_kept(
        workdir: Path, monkeypatch: pytest.MonkeyPatch, store: str) -> None:
    """micro_size 2 probes 1.25x the baseline and micro_size 4 0.91x: the top two are
    micro_size 2 and the baseline, trained with seeds 0 and 1; micro_size 2 keeps the
    objective and is the pick, with its sweep file and plot attached to the confirm run.
    (issue 53 survivors: tuner.tune 8, 61, 79, 89, 132, 138; phases._train 17, 57, 58)"""
    from msexp.cli.tune import lines, summary

    measured(monkeypatch, Measured({1: 100.0, 2: 80.0, 4: 110.0},
                                   {1: (0.90, 0.92), 2: (0.91, 0.91), 4: (0.5, 0.5)}))
    spec = load_spec(sweep(workdir, "picked"))
    outcome, said = tuned(spec, Settings(updates=6, top=2), store)
    assert said[0] == ("profile: 3 candidates, 6 updates each, in turns of 3 between two "
                       "probes of the baseline")
    assert "profile: 3 of 3 stand" in said
    (halved,) = [line for line in said if line.startswith("halve: ")]
    assert halved.endswith("; ranking: micro_size=2 1.25x, micro_size=1 1.00x, "
                           "micro_size=4 0.91x"), halved
    assert said[-1] == "confirm: the pick is micro_size=2"
    assert outcome.pick is not None and outcome.pick.objective == [0.91, 0.91]
    assert outcome.baseline is not None and outcome.baseline.objective == [0.90, 0.92]
    assert outcome.spread is not None and 0 < outcome.spread < 0.1
    shown = lines(summary(outcome))
    assert any(line.startswith("  confirm micro_size=1: objective 0.91 ± 0.014, ")
               and line.endswith(" the baseline: kept: the baseline: the reference")
               for line in shown), shown
    assert summary(outcome)["baseline"]["keep_rule"] == "the baseline: the reference"
    # ranked in the top, the baseline is still the reference, not a candidate beside itself
    assert [c["verdict"] for c in summary(outcome)["candidates"]] == [
        "the baseline: trained as the reference", "the pick",
        "ranked 3 of 3 by probes: not among the 2 confirmed"]
    # the trainings ran each seed: the sweep's repeats
    confirm = children(store, "picked", outcome.parents["confirm"])
    seeds = sorted((run.data.params["micro_size"], run.data.params["seed"]) for run in confirm)
    assert seeds == [("1", "0"), ("1", "1"), ("2", "0"), ("2", "1")]
    # the files, named by the run's folder, attached to the confirm run
    stamp = next(Path("mlruns/tune/picked").iterdir()).name
    assert outcome.plot == Path(f"mlruns/reports/picked-tune-{stamp}.png")
    assert outcome.sweep_file == Path(f"mlruns/reports/picked-tuned-{stamp}.yaml")
    assert ran_beside(outcome.sweep_file)["micro_size"] == 2
    assert outcome.plot.read_bytes()[:4] == b"\x89PNG"
    assert artifacts(store, outcome.parents["confirm"]) >= {outcome.plot.name,
                                                            outcome.sweep_file.name}


def test_where_no_candidate_keeps_the_objective_the_baseline_is_the_pick(
        workdir: Path, monkeypatch: pytest.MonkeyPatch, store: str) -> None:
    """Both candidates probe faster than the baseline but lose accuracy beyond its seed
    spread: the baseline, which fits, is the pick and its sweep file is written.
    (issue 53 survivors: tuner.tune 79, 110)"""
    from msexp.cli.tune import summary

    measured(monkeypatch, Measured({1: 100.0, 2: 80.0, 4: 90.0},
                                   {1: (0.90, 0.92), 2: (0.70, 0.71), 4: (0.60, 0.62)}))
    spec = load_spec(sweep(workdir, "kept-none"))
    outcome, said = tuned(spec, Settings(updates=6, top=2), store)
    assert [v.profile.candidate.point for v in outcome.verdicts] == [{"micro_size": 2},
                                                                      {"micro_size": 4}]
    assert all(v.rejected for v in outcome.verdicts)
    assert said[-1] == "confirm: the pick is micro_size=1"
    assert outcome.pick is outcome.baseline
    document = summary(outcome)
    assert document["pick"]["config"] == {"micro_size": 1}
    assert ran_beside(outcome.sweep_file)["micro_size"] == 1


def test_where_every_candidate_breaks_the_memory_budget_the_plot_goes_to_the_profile_run(
        workdir: Path, monkeypatch: pytest.MonkeyPatch, store: str) -> None:
    """A train_mem_mb constraint of 2 MB, the memory budget: the baseline and micro-batch
    16 break it, so micro-batch 32 is skipped; no confirm run is made and the plot is the
    profile run's.
    (issue 53 survivors: tuner.tune 8, 154)"""
    measured(monkeypatch, Measured({1: 100.0, 2: 80.0, 4: 90.0},
                                   {1: (0.9, 0.9), 2: (0.9, 0.9), 4: (0.9, 0.9)}))
    spec = load_spec(sweep(workdir, "too-big", "    constraints:\n"
                                               "      - {metric: train_mem_mb, max: 2}\n"))
    outcome, said = tuned(spec, Settings(updates=6), store)
    assert [p.dropped for p in outcome.profiles] == [
        "train_mem_mb 5 > 2 (the budget)",
        "skipped: micro-batch 32 >= 16, which broke the memory budget",
        "train_mem_mb 3 > 2 (the budget)"]
    assert said[-1] == "confirm: no pick" and outcome.pick is None
    assert set(outcome.parents) == {"profile"}
    assert artifacts(store, outcome.parents["profile"]) == {"too-big.yaml", outcome.plot.name}


def test_max_batch_from_the_command_line_probes_each_size_on_the_runner(
        workdir: Path, monkeypatch: pytest.MonkeyPatch, store: str) -> None:
    """`msexp tune --max-batch --memory 4.5`: 1.0 MB a sample, so micro-batch 4 fits.
    (issue 53 survivor: cli.tune.tune_command 79)"""
    table = measured(monkeypatch, Measured({1: 100.0}, {}))
    table.answer = lambda job: TrialResult(Status.COMPLETE, {  # type: ignore[method-assign]
        "train_mem_mb": 1.0 * job.params["batch_size"], "samples_per_s": 1.0})
    path = sweep(workdir, "batch")
    result = CliRunner().invoke(app, ["tune", str(path), "--max-batch", "--memory", "4.5",
                                      "--tracking-uri", store, "--json"])
    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout)
    assert (found["micro_batch"], found["batch_size"]) == (4, 4)
    assert sorted(t["micro_batch"] for t in found["tried"]) == [1, 2, 4, 5, 6, 8]


def test_tune_sweep_says_a_line_per_probe_and_phase_on_stderr(
        workdir: Path, monkeypatch: pytest.MonkeyPatch, store: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`msexp.tune_sweep(..., progress=True)` prints tune's lines on stderr, stdout clean.
    (issue 53 survivor: api.tuning.tune_sweep 5)"""
    import msexp

    measured(monkeypatch, Measured({1: 100.0, 2: 80.0, 4: 110.0},
                                   {1: (0.90, 0.92), 2: (0.91, 0.91), 4: (0.5, 0.5)}))
    found = msexp.tune_sweep(sweep(workdir, "api"), updates=4, tracking_uri=store)
    assert found.pick == {"micro_size": 2}
    out, err = capsys.readouterr()
    said = err.splitlines()
    assert said[0].startswith("profile: 3 candidates, 4 updates each")
    assert "    1 profile-baseline1-micro_size1: 4 updates, " in said[1]
    assert said[-1] == "confirm: the pick is micro_size=2" and "None" not in said
    assert out == ""


def test_a_tune_whose_candidates_are_close_halves_in_rounds_recorded_with_their_phase(
        workdir: Path, monkeypatch: pytest.MonkeyPatch, store: str) -> None:
    """micro_size 2 and 4 probe within the noise of each other: halving probes them again
    (for the profile's updates, then twice as many), and each run it made is an MLflow
    child of the halve run tagged with its phase.
    (issue 53 fresh: tuner.tune 41; record.PhaseRuns.children 26)"""
    table = Measured({1: 100.0, 2: 80.0, 4: 82.0},
                     {1: (0.90, 0.92), 2: (0.91, 0.91), 4: (0.91, 0.91)})
    answer = table.answer

    def noisy(job: Job) -> TrialResult:  # step times 10% apart: a spread of about 0.1
        result = answer(job)
        for epoch in result.epochs:
            steps = epoch.series["step_ms"]
            epoch.series["step_ms"] = steps[:1] + [t * (1 + 0.1 * (i % 3 - 1)) / (
                1 + 0.02 * (i % 3 - 1)) for i, t in enumerate(steps[1:], 1)]
        return result

    table.answer = noisy  # type: ignore[method-assign]
    measured(monkeypatch, table)
    spec = load_spec(sweep(workdir, "close"))
    outcome, said = tuned(spec, Settings(updates=6, top=1), store)
    (halved,) = [line for line in said if line.startswith("halve: ")]
    assert outcome.rounds >= 1, halved
    halve = children(store, "close", outcome.parents["halve"])
    assert halve and all(r.data.tags["msexp.tune.phase"] == "halve" for r in halve)


def test_a_tune_ends_killed_what_a_killed_tune_of_this_host_left_running(
        workdir: Path, store: str) -> None:
    """The phase run of a tune process that is gone, and its child, end KILLED; a live
    tune's run is left running. (issue 53 fresh: record.gone 3)"""
    import socket
    import subprocess
    import sys

    from msexp.keys import RunTag
    from msexp.tracking.runs import Tracker
    from msexp.tune.record import PhaseRuns

    tracker = Tracker(store)
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)
    dead = f"{socket.gethostname()}:{ended.stdout.strip()}"
    runs = PhaseRuns(tracker, "left", "left", Path("left.yaml"))
    live = runs.parent("profile")
    left = tracker.parent_run(runs.experiment_id, "left-halve", {RunTag.OWNER: dead},
                              Path("left.yaml"))
    child = tracker.client.create_run(runs.experiment_id, tags={"mlflow.parentRunId": left})
    assert runs.end_left() == [child.info.run_id, left]
    status = {r: tracker.client.get_run(r).info.status for r in (live, left, child.info.run_id)}
    assert status == {live: "RUNNING", left: "KILLED", child.info.run_id: "KILLED"}


def test_max_batch_stops_at_its_cap_and_records_in_the_given_store(
        workdir: Path, monkeypatch: pytest.MonkeyPatch, store: str) -> None:
    """`msexp tune --max-batch` where every size fits: it doubles up to micro-batch 65536
    (1 << 16) and stops there; its probes' MLflow runs go to the --tracking-uri given, no
    store made here. (issue 53 fresh fcli: cli.tune.tune_command 67 (the runs in the
    default store), 92 (the cap 1 << 17))"""
    from mlflow import MlflowClient

    table = measured(monkeypatch, Measured({1: 100.0}, {}))
    table.answer = lambda job: TrialResult(Status.COMPLETE, {  # type: ignore[method-assign]
        "train_mem_mb": 1e-3 * job.params["batch_size"], "samples_per_s": 1.0})
    path = sweep(workdir, "capped")
    result = CliRunner().invoke(app, ["tune", str(path), "--max-batch", "--memory", "100000",
                                      "--tracking-uri", store, "--json"])
    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout)
    assert (found["micro_batch"], found["batch_size"]) == (1 << 16, 1 << 16)
    assert [t["micro_batch"] for t in found["tried"]] == [1 << i for i in range(17)]
    client = MlflowClient(store)
    known = client.get_experiment_by_name("capped")
    assert known is not None, "the probes' runs are in the store given"
    runs = client.search_runs([known.experiment_id])
    assert len(runs) >= 17, [r.info.run_name for r in runs]
    assert not (workdir / "mlruns" / "mlflow.db").exists()
