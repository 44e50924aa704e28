"""`msexp tune`'s measurements and verdicts against a table-answering runner: candidates
ranked by their ratio to the baseline probed beside them (a drifting load flips unpaired
figures, not paired ratios), the keep rule with one seed, and the exit status."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from msexp.errors import SpecError
from msexp.execution.result import Status, TrialResult
from msexp.spec import load_spec
from msexp.tune import rules
from msexp.tune.phases import Verdict
from tests.conftest import write
from tests.test_tune import DIGITS, cli


def test_with_one_seed_the_keep_rule_is_never_a_coin_flip(tmp_path: Path) -> None:
    from msexp.tune.candidates import check_noise, seeds

    # one seed each: the spread is unknown, not 0; the rule refuses to judge without a
    # tolerance instead of dropping any candidate that is worse at all
    with pytest.raises(ValueError, match="noise is unknown"):
        rules.keeps([0.09375], [0.125], maximize=True)
    assert rules.keeps([0.09375], [0.125], maximize=True, tolerance=0.05)
    assert rules.allowance([0.09375], [0.125], 0.05) == (0.05, "--tolerance")
    one_seed = load_spec(write(tmp_path / "one.yaml", DIGITS.replace("repeats: 2",
                                                                     "repeats: 1")))
    assert seeds(one_seed) == [0, 1], "a file with one seed is confirmed with two"
    check_noise(one_seed, 0.0)  # two seeds measure the noise: accepted
    write(tmp_path / "train.py", "print('eval_accuracy: 0.5')\n")
    seedless = load_spec(write(tmp_path / "cmd.yaml", """
        name: cmd
        experiment: {command: python train.py}
        objective: [{metric: eval_accuracy, direction: maximize}]
        params: {lr: [0.1, 0.01]}
    """))
    assert seeds(seedless) == [None]
    check_noise(seedless, 0.01)
    with pytest.raises(SpecError, match="params.seed: .*set --tolerance, got no seed"):
        check_noise(seedless, 0.0)


def test_a_rejection_names_the_allowance_and_what_measured_it() -> None:
    from msexp.tune.candidates import Candidate
    from msexp.tune.measure import Profile
    from msexp.tune.phases import _judge

    def verdict(values: list[float]) -> Verdict:
        return Verdict(Profile(Candidate({}, {})), values, 1.0, 1.0)

    base = verdict([0.125, 0.15625])  # spread 0.0221
    worse, close = verdict([0.0625, 0.09375]), verdict([0.125, 0.125])
    _judge(worse, base, "acc", True, 0.0)
    _judge(close, base, "acc", True, 0.0)
    assert worse.rejected == ("acc 0.07812 is worse than the baseline's 0.1406 by more than "
                              "0.0221 (the baseline's seed spread over 2 seeds)")
    assert close.rejected is None
    assert close.judged == ("within 0.0221 of the baseline's 0.1406 (the baseline's seed "
                            "spread over 2 seeds)")
    tolerated = verdict([0.0625, 0.09375])
    _judge(tolerated, base, "acc", True, 0.1)
    assert tolerated.rejected is None and tolerated.judged.endswith("(--tolerance)")


class DriftingLoad:
    """Answers each probe from a table of true step times (ms, by micro_size), slowed by a
    load that grows by 20% with every probe, each probe one tick of a clock: what is under
    test is how tune ranks, not the training. Each probe's steps vary by +-5% around its
    time (a notch to measure)."""

    def __init__(self, true_ms: dict[int, float], training_updates: float | None = None):
        self.true_ms, self.jobs, self.training = true_ms, [], training_updates

    def run(self, jobs, hosts=None):
        from msexp.training.records import Epoch
        from msexp.tune.runner import Ran

        ran = []
        for job in jobs:
            load = 1 + 0.2 * len(self.jobs)
            self.jobs.append(job)
            steps = [self.true_ms[job.params["micro_size"]] * load * (1 + 0.05 * (i % 3 - 1))
                     for i in range(job.probe.updates)]
            result = TrialResult(Status.COMPLETE, {
                "samples_per_s": job.params["batch_size"] * 1000 / steps[-1],
                "train_mem_mb": 1.0, "overflow_rate": 0.0,
                **({} if self.training is None else {"training_updates": self.training})},
                epochs=[Epoch(1, job.probe.updates, 0.0, {}, {"step_ms": steps})])
            ran.append(Ran(job, result, load - 1.0, load - 0.8))
        return ran


def test_candidates_rank_by_their_ratio_to_the_baseline_beside_them_under_drifting_load(
        ) -> None:
    from msexp.tune.candidates import Candidate
    from msexp.tune.measure import Budget
    from msexp.tune.phases import halve, profile_all

    def candidate(micro: int) -> Candidate:
        return Candidate({"micro_size": micro}, {"batch_size": 64, "micro_size": micro})

    # true speeds against the baseline (100 ms): micro_size 4 1.111x, micro_size 2 1.176x;
    # micro_size 4 (micro-batch 16) is probed first, under less load
    load = DriftingLoad({1: 100.0, 2: 85.0, 4: 90.0})
    recorded: list = []
    profiles = profile_all(load, [candidate(1), candidate(2), candidate(4)], Budget([], None),
                           9, lambda ran, dropped: recorded.extend(ran))
    assert [j.name for j in load.jobs] == [
        "profile-baseline1-micro_size1", "profile-micro_size4", "profile-micro_size2",
        "profile-baseline2-micro_size1"], "a turn of candidates between two baseline probes"
    assert len(recorded) == 4, "every probe, the baseline's too, is an MLflow child"
    base, second, first = profiles
    unpaired = {p.candidate.point["micro_size"]: p.metrics["samples_per_s"] for p in profiles}
    assert unpaired[4] > unpaired[2], "unpaired, the load flips the ranking"
    # paired: micro_size 4 at 90 x 1.2 against the baseline at 100 x 1.0 and 1.6,
    # interpolated to its time (a third of the way: 120 ms); micro_size 2 at 85 x 1.4
    # against 140 ms (two thirds): each ratio is the true one, the drift cancelled
    assert first.ratios == [pytest.approx(120 / 108, rel=0.01)]
    assert second.ratios == [pytest.approx(140 / 119, rel=0.01)]
    assert base.ratios == [1.0] and first.sides[1] == pytest.approx(64 * 1000 / 120, rel=0.01)
    assert 0.0 < first.spreads[0] < 0.2
    standing, _, rounds, _ = halve(load, profiles, Budget([], None), 9, 1,
                                   lambda ran, dropped: None)
    assert standing[:2] == [second, first], "paired, the faster ranks first"
    assert rounds >= 1 and len(second.ratios) == rounds + 1
    assert second.ratios[-1] == pytest.approx(100 / 85, rel=0.01)
    assert first.ratios[-1] == pytest.approx(100 / 90, rel=0.01)
    halving = [j.name for j in load.jobs[4:]]
    for round_ in range(1, rounds + 1):  # each round: baseline, the two, baseline
        names = [name for name in halving if name.startswith(f"halve{round_}-")]
        assert [("baseline" in name) for name in names] == [True, False, False, True]
    assert halving[:2] == ["halve1-baseline1-micro_size1", "halve1-micro_size2"]


class Compiling(DriftingLoad):
    """DriftingLoad whose every probe's first update compiles (3 s)."""

    def run(self, jobs, hosts=None):
        ran = super().run(jobs, hosts)
        for probe in ran:
            probe.result.epochs[-1].series["step_ms"][0] = 3000.0
        return ran


def test_a_probes_compiling_update_is_left_out_of_its_step_times() -> None:
    """Probes of 4 updates, the first compiling: the three after it make each ratio and
    its spread (0.064); with the compiling one kept, the spread was 7.3 and no candidate
    could be told from another."""
    # mutation: measure.step_ms keeping the first update (`[1:]` dropped; issue 53: a
    # probe's spread from 0.08 to 8.4)
    from msexp.tune.candidates import Candidate
    from msexp.tune.measure import Budget
    from msexp.tune.phases import profile_all

    found = [Candidate({"micro_size": m}, {"batch_size": 64, "micro_size": m})
             for m in (1, 2, 4)]
    load = Compiling({1: 100.0, 2: 85.0, 4: 90.0})
    base, second, first = profile_all(load, found, Budget([], None), 4, lambda *_: None)
    assert [j.probe.updates for j in load.jobs] == [4] * 4
    assert second.ratios == [pytest.approx(100 / 85, rel=0.01)]
    assert first.ratios == [pytest.approx(100 / 90, rel=0.01)]
    assert 0.0 < second.spreads[0] < 0.1 and 0.0 < first.spreads[0] < 0.1
    assert max(second.steps) < 200 and max(base.steps) < 200, "no compiling update kept"


def test_a_probes_step_ms_is_the_median_update_after_the_compiling_one() -> None:
    # mutation: probe._timing's median over every update (the compiling one too)
    from msexp.training.probe import _timing

    timing = _timing([3.0, 0.010, 0.011, 0.009, 0.0095], 64)
    assert timing["step_ms"] == pytest.approx(9.75)
    assert timing["samples_per_s"] == pytest.approx(64 / 0.00975)
    assert timing["compile_s"] == pytest.approx(3.0 - 0.00975)


class CommandMemory(DriftingLoad):
    """DriftingLoad whose probes are a command's: its memory is `peak_mem_mb` (by
    micro_size), no `train_mem_mb`."""

    def __init__(self, true_ms: dict[int, float], peak_mb: dict[int, float]):
        super().__init__(true_ms)
        self.peak_mb = peak_mb

    def run(self, jobs, hosts=None):
        ran = super().run(jobs, hosts)
        for probe in ran:
            metrics = probe.result.metrics
            del metrics["train_mem_mb"]
            metrics["peak_mem_mb"] = self.peak_mb[probe.job.params["micro_size"]]
        return ran


def test_a_command_trials_peak_mem_mb_is_held_to_the_memory_budget() -> None:
    """A command reports peak_mem_mb (its process's), not train_mem_mb: the budget of
    500 MB drops the candidate at 900 MB with the figure, and keeps those under it."""
    # mutation: Budget.violation without its peak_mem_mb fallback (every command
    # candidate dropped: "train_mem_mb was not measured"); or taking only train_mem_mb
    # as the memory (`Profile.memory_mb`)
    from msexp.tune.candidates import Candidate
    from msexp.tune.measure import Budget
    from msexp.tune.phases import profile_all

    found = [Candidate({"micro_size": m}, {"batch_size": 64, "micro_size": m})
             for m in (1, 2, 4)]
    load = CommandMemory({1: 100.0, 2: 85.0, 4: 90.0}, {1: 400.0, 2: 900.0, 4: 300.0})
    base, two, four = profile_all(load, found, Budget([], 500.0), 9, lambda *_: None)
    assert two.dropped == "train_mem_mb 900 > 500 (the budget)"
    assert (base.dropped, four.dropped) == (None, None)
    assert (base.memory_mb, four.memory_mb) == (400.0, 300.0)


@pytest.mark.parametrize(("training", "rounds"), [(None, 3), (60.0, 2), (30.0, 1), (10.0, 0)])
def test_halving_never_probes_a_candidate_longer_than_its_training(training, rounds) -> None:
    from msexp.tune.candidates import Candidate
    from msexp.tune.measure import Budget
    from msexp.tune.phases import halve, profile_all

    found = [Candidate({"micro_size": m}, {"batch_size": 64, "micro_size": m})
             for m in (1, 2, 3, 4, 5)]
    # four candidates alike within the probes' noise: only the rounds' limit stops halving
    load = DriftingLoad({1: 100.0, 2: 90.0, 3: 90.0, 4: 90.0, 5: 90.0}, training)
    profiles = profile_all(load, found, Budget([], None), 10, lambda ran, dropped: None)
    _, _, ran, stopped = halve(load, profiles, Budget([], None), 10, 1,
                               lambda ran, dropped: None)
    probed = {m: sum(j.probe.updates for j in load.jobs
                     if j.params["micro_size"] == m and "baseline" not in j.name)
              for m in (2, 3, 4, 5)}
    assert ran == rounds, stopped
    assert max(probed.values()) <= (training or 10 + 10 + 20 + 40)
    assert ("longer than its training" in stopped) == (training is not None)


def test_after_a_failed_baseline_probe_each_turn_still_has_one_on_each_side() -> None:
    from msexp.tune.candidates import Candidate
    from msexp.tune.measure import Budget
    from msexp.tune.phases import profile_all

    class FailingBaseline(DriftingLoad):  # the baseline's second and third probes fail
        def run(self, jobs, hosts=None):
            ran = super().run(jobs, hosts)
            if ran[0].job.name.startswith(("profile-baseline2-", "profile-baseline3-")):
                ran[0].result = TrialResult(Status.FAILED, {}, error="boom")
            return ran

    found = [Candidate({"micro_size": m}, {"batch_size": 64, "micro_size": m})
             for m in range(1, 9)]
    load = FailingBaseline({m: 100.0 - m for m in range(1, 9)})
    profiles = profile_all(load, found, Budget([], None), 5, lambda ran, dropped: None)
    kinds = "".join("B" if "baseline" in j.name else "c" for j in load.jobs)
    # a failed probe is retried before the next candidate; once one succeeds, it ends the
    # turn and begins the next: no two baseline probes run back to back but for a retry
    assert kinds == "BcccBBcBcccB"
    assert all(len(p.ratios) == 1 for p in profiles), "every candidate ranked"


def test_a_turn_holds_at_most_three_candidates_and_a_failed_one_takes_no_place() -> None:
    from msexp.tune.candidates import Candidate
    from msexp.tune.measure import Budget, position
    from msexp.tune.phases import profile_all
    from msexp.tune.runner import Job, Ran

    class FailingFive(DriftingLoad):  # micro_size 5 fails: no step times
        def run(self, jobs, hosts=None):
            ran = super().run(jobs, hosts)
            for one in ran:
                if one.job.params["micro_size"] == 5:
                    one.result = TrialResult(Status.FAILED, {}, error="boom")
            return ran

    found = [Candidate({"micro_size": m}, {"batch_size": 64, "micro_size": m})
             for m in range(1, 9)]
    load = FailingFive({m: 100.0 - m for m in range(1, 9)})
    profiles = profile_all(load, found, Budget([], None), 5, lambda ran, dropped: None)
    baseline_at = [i for i, j in enumerate(load.jobs) if "baseline" in j.name]
    assert baseline_at == [0, 4, 9], "three candidates a turn; the failed one takes no place"
    assert profiles[4].dropped.startswith("fail") and not profiles[4].ratios
    assert all(len(p.ratios) == 1 for i, p in enumerate(profiles) if i != 4)
    for i, p in enumerate(profiles[1:], 1):  # the true ratios: the drift cancelled
        if i != 4:
            assert p.ratios[0] == pytest.approx(99 / (99 - i), rel=0.01)
    job = Job("x", "x", {})
    at = [Ran(job, TrialResult(Status.COMPLETE, {}), t, t + 1) for t in (0, 2, 4)]
    assert position(at[1], at[0], at[2]) == 0.5
    assert position(at[2], at[0], at[1]) == 1.0 and position(at[0], at[1], at[2]) == 0.0
    assert position(at[1], None, at[2]) == 0.5 == position(at[1], at[2], at[0])
    assert rules.paired([10.0, 10.0], [10.0, 10.0], [20.0, 20.0], 1, 1, 0.25)[0] == 1.25
    assert rules.paired([10.0, 10.0], [], [20.0, 20.0], 1, 1, 0.25)[0] == 2.0


def test_the_exit_status_tells_a_pick_no_pick_and_failed_apart(tmp_path: Path,
                                                               capsys) -> None:
    from msexp.cli.tune import NO_PICK, _show_tune
    from msexp.tune.candidates import Candidate
    from msexp.tune.measure import Profile
    from msexp.tune.outcome import Outcome

    shown = " ".join(cli("tune", "--help").output.split())
    assert ("Exit status: 0 a pick (or what --max-batch or --lr-find looked for), 3 no pick "
            "(none fits or keeps the objective; no micro-batch fits; no lr suggestion), 2 "
            "bad input, 1 failed.") in shown.replace("│", "").replace("  ", " ")
    assert NO_PICK == 3
    base = Profile(Candidate({"micro_size": 1}, {"batch_size": 64, "micro_size": 1}), [1.0],
                   [0.01])
    trained = Verdict(base, [0.9, 0.91], 100.0, 5.0, ratio=1.0, ratio_spread=0.0)
    for pick, found in ((trained, True), (None, False)):
        outcome = Outcome([base], [base], None, 0, trained, [], pick, tmp_path / "p.png")
        assert _show_tune(outcome, None, json_output=True) is found
        assert (json.loads(capsys.readouterr().out)["pick"] is None) is not found


def test_tune_compares_each_grid_point_once_with_the_first_seed_and_refuses_two_devices(
        tmp_path: Path) -> None:
    from msexp.tune.candidates import candidates, check_tunable

    # mutations: the points kept with their seed (8 candidates, not 4), the point or
    # the dict of those found lost; the refusals without their file or on every file
    spec = load_spec(write(tmp_path / "d.yaml", DIGITS))  # repeats: 2 sweeps seeds 0, 1
    found = candidates(spec)
    assert [c.point for c in found] == [{"micro_size": m, "batch_size": b}
                                        for m in (1, 4) for b in (64, 256)]
    assert [(c.params["seed"], c.micro_batch) for c in found] == [(0, 64), (0, 256),
                                                                   (0, 16), (0, 64)]
    assert found[0].label == "micro_size=1 batch_size=64"
    check_tunable(spec)  # one device a trial: accepted
    two = write(tmp_path / "two.yaml", DIGITS.replace("fixed: {", "fixed: {devices: 2, "))
    with pytest.raises(SpecError) as refused:
        check_tunable(load_spec(two))
    assert str(refused.value) == (f"{two}: fixed.devices: msexp tune profiles one process a "
                                  "trial; tune with devices 1, got >1")
    write(tmp_path / "train.py", "print('eval_accuracy: 0.5')\n")
    hookless = write(tmp_path / "cmd.yaml", """
        name: cmd
        experiment: {command: python train.py}
        objective: [{metric: eval_accuracy, direction: maximize}]
        params: {lr: [0.1, 0.01]}
    """)
    with pytest.raises(SpecError) as refused:
        check_tunable(load_spec(hookless))
    assert str(refused.value).startswith(f"{hookless}: command: msexp tune needs the script ")


def test_each_candidates_fate_says_where_it_stood() -> None:
    from msexp.tune.candidates import Candidate
    from msexp.tune.measure import Profile, group_of
    from msexp.tune.outcome import Outcome, fate

    # mutations: the rank counted from 0 or -1, a fate's words changed
    base, fast, slower, third, fourth = (Profile(Candidate({"i": i}, {"i": i}))
                                         for i in range(5))
    fourth.dropped = "out of memory"
    verdicts = [Verdict(fast, [0.9], 2.0, None, ratio=2.0, ratio_spread=0.05),
                Verdict(slower, [0.9], 1.5, None, ratio=1.5, ratio_spread=0.05)]
    outcome = Outcome([base, fast, slower, third, fourth], [fast, base, slower, third],
                      0.01, 2, Verdict(base, [0.9], 1.0, None), verdicts, verdicts[0])
    assert [fate(outcome, p) for p in (fast, slower, base, third, fourth)] == [
        "the pick", "kept, trained slower than the pick",
        "the baseline: trained as the reference",
        "ranked 4 of 4 by probes: not among the 2 confirmed", "dropped: out of memory"]
    # a kept candidate faster within its noise leaves the baseline the pick, and says so
    # mutation: the spread not doubled, or the baseline's fate worded as before
    verdicts[1].ratio, verdicts[1].ratio_spread = 1.07, 0.04
    outcome.verdicts, outcome.pick = verdicts[1:], outcome.baseline
    assert [fate(outcome, p) for p in (slower, base)] == [
        "kept, 1.070x the baseline: not beyond twice its spread (4.0%)",
        "the pick: the baseline, as nothing that kept the objective trained faster beyond "
        "its noise"]
    # candidates equal but for batch_size and micro_size share a memory group
    # mutation: the group made of batch_size and micro_size alone
    one = Candidate({}, {"batch_size": 64, "micro_size": 1, "amp_level": "O0"})
    same = Candidate({}, {"batch_size": 256, "micro_size": 4, "amp_level": "O0"})
    other = Candidate({}, {"batch_size": 64, "micro_size": 1, "amp_level": "O2"})
    assert group_of(one) == group_of(same) != group_of(other)


class FallingLoad:
    """Answers each confirm training from a table of true samples/s (by micro_size), sped
    up by a load that falls by 5% of its start with every training, as a finished
    neighbour's does: what is under test is the order of the trainings, not the training."""

    def __init__(self, true_rate: dict[int, float]):
        self.true_rate, self.names = true_rate, []

    def run(self, jobs, hosts=None):
        from msexp.tune.runner import Ran

        ran = []
        for job in jobs:
            speedup = 1 / (1 - 0.05 * len(self.names))
            self.names.append(job.name)
            ran.append(Ran(job, TrialResult(Status.COMPLETE, {
                "eval_accuracy": 0.9, "train_mem_mb": 1.0,
                "samples_per_s": self.true_rate[job.params["micro_size"]] * speedup}), 0.0,
                0.0))
        return ran


@pytest.mark.parametrize("seeds", [[0, 1], [0, 1, 2, 3]])
def test_a_load_that_falls_through_confirm_picks_no_equal_over_the_baseline(seeds) -> None:
    from msexp.tune.candidates import Candidate
    from msexp.tune.measure import Budget, Profile
    from msexp.tune.outcome import choose
    from msexp.tune.phases import confirm

    def profile(micro: int) -> Profile:
        return Profile(Candidate({"micro_size": micro}, {"batch_size": 64, "micro_size": micro}),
                       ratios=[1.0], spreads=[0.01])

    def picked(true_rate: dict[int, float]) -> tuple[Verdict | None, list[str]]:
        base, load = profile(1), FallingLoad(true_rate)
        baseline, verdicts = confirm(load, [profile(4), base], 1, base, seeds,
                                     "eval_accuracy", True, 0.0, Budget([], None),
                                     lambda ran, dropped: None)
        return choose(verdicts, baseline), load.names

    # the same speed: trained after the baseline in every seed, the falling load would
    # make micro_size 4 1.05-1.06x faster in each, beyond their spread, and pick it
    pick, names = picked({1: 100.0, 4: 100.0})
    assert pick.profile.candidate.point == {"micro_size": 1}, "the baseline, not an equal"
    assert names[:4] == ["confirm-micro_size1-seed0", "confirm-micro_size4-seed0",
                         "confirm-micro_size4-seed1", "confirm-micro_size1-seed1"]
    pick, _ = picked({1: 100.0, 4: 150.0})  # a real gain still shows through the mirror
    assert pick.profile.candidate.point == {"micro_size": 4} and pick.ratio > 1.4


def test_confirm_holds_a_command_trainings_peak_mem_mb_to_the_budget_and_shows_it() -> None:
    """A command's trainings report peak_mem_mb, not train_mem_mb: the candidate over the
    500 MB budget is rejected with its figure, the baseline's memory is its peak_mem_mb."""
    # mutation: phases._verdict's memory taken from train_mem_mb alone (the baseline's
    # memory shown as nan), or Budget.violation without its peak_mem_mb fallback
    from msexp.tune.candidates import Candidate
    from msexp.tune.measure import Budget, Profile
    from msexp.tune.phases import confirm

    class CommandTrainings(FallingLoad):
        def run(self, jobs, hosts=None):
            ran = super().run(jobs, hosts)
            for training in ran:
                del training.result.metrics["train_mem_mb"]
                training.result.metrics["peak_mem_mb"] = {1: 400.0, 4: 900.0}[
                    training.job.params["micro_size"]]
            return ran

    def profile(micro: int) -> Profile:
        return Profile(Candidate({"micro_size": micro}, {"batch_size": 64, "micro_size": micro}),
                       ratios=[1.0], spreads=[0.01])

    base = profile(1)
    baseline, verdicts = confirm(CommandTrainings({1: 100.0, 4: 150.0}), [profile(4), base], 1,
                                 base, [0, 1], "eval_accuracy", True, 0.0, Budget([], 500.0),
                                 lambda ran, dropped: None)
    assert baseline is not None and baseline.memory_mb == 400.0
    (four,) = [v for v in verdicts if v.profile.candidate.point == {"micro_size": 4}]
    assert four.rejected == "seed 0: train_mem_mb 900 > 500 (the budget)"


def test_max_batch_grows_a_commands_micro_batch_to_its_peak_mem_mb_budget(
        tmp_path: Path, tracker) -> None:
    """`--max-batch` over a command: each probe's memory is the peak_mem_mb it reports
    (100 MB a sample here), so 5 samples fit 500 MB and 6 do not."""
    # mutation: max_batch's probe memory taken from train_mem_mb alone (no size fits:
    # "train_mem_mb was not measured")
    from msexp.tune.record import PhaseRuns
    from msexp.tune.runner import Ran
    from msexp.tune.search import max_batch

    class PeakMemory:
        def run(self, jobs, hosts=None):
            return [Ran(job, TrialResult(Status.COMPLETE, {
                "peak_mem_mb": 100.0 * job.params["batch_size"], "samples_per_s": 1.0}),
                0.0, 0.0) for job in jobs]

    write(tmp_path / "train.py", "from msexp import hooks  # hooks.MsexpCallback()\n")
    spec = load_spec(write(tmp_path / "cmd.yaml", """
        name: cmd
        experiment: {command: python train.py}
        objective: [{metric: eval_accuracy, direction: maximize}]
        params: {lr: [0.1, 0.01]}
    """))
    runs = PhaseRuns(tracker, "cmd", "cmd-tune", tmp_path / "cmd.yaml")
    found = max_batch(spec, PeakMemory(), runs, 500.0, 4, 64)
    assert found.micro_batch == 5
    assert [(size, memory) for size, memory, _ in found.tried if size in (5, 6)] == [
        (6, 600.0), (5, 500.0)]


def test_a_speedup_over_one_seed_has_no_spread_and_over_two_their_relative_deviation() -> None:
    """Mutation (issue 53): `rules.over_seeds` 8 (the spread of one ratio asked of
    `statistics.stdev`, which raises)."""
    import math

    assert rules.over_seeds({1: 200.0}, {1: 100.0}) == (2.0, math.inf)
    mean, spread = rules.over_seeds({1: 200.0, 2: 300.0, 3: 50.0}, {1: 100.0, 2: 100.0})
    assert mean == 2.5 and spread == pytest.approx(0.7071 / 2.5, rel=1e-3)


def test_a_confirm_verdict_averages_its_seeds_and_keeps_what_its_network_split() -> None:
    """A candidate's verdict from its confirm trainings: the objective of each, their mean
    samples/s (nan where one did not measure it), memory, and the BatchNorm layers its
    network split. Mutations (issue 53): `phases._verdict` 23 (no nan default: a seed
    without samples/s raises), 25 (the samples/s key misspelt: nan), 58 (the batch
    statistics dropped)."""
    import math
    from types import SimpleNamespace

    from msexp.training.records import BatchStatistics
    from msexp.tune.measure import Budget
    from msexp.tune.phases import _verdict

    split = BatchStatistics(layers=2, micro_batch=8, batch=32)

    def ran(seed: int, **metrics: float) -> SimpleNamespace:
        return SimpleNamespace(job=SimpleNamespace(key=(1, seed), name=f"confirm-seed{seed}"),
                               result=TrialResult(Status.COMPLETE, metrics=metrics,
                                                  batch_statistics=split))

    profile = SimpleNamespace(candidate="micro_size=4")
    budget = Budget([], None)
    both = _verdict(profile, [ran(1, acc=0.9, samples_per_s=100.0, train_mem_mb=5.0),  # type: ignore[arg-type]
                              ran(2, acc=0.8, samples_per_s=300.0, train_mem_mb=7.0)],
                    "acc", budget)
    assert (both.objective, both.samples_per_s, both.memory_mb) == ([0.9, 0.8], 200.0, 6.0)
    assert both.batch_statistics == split and both.rejected is None
    one = _verdict(profile, [ran(1, acc=0.9, samples_per_s=100.0),  # type: ignore[arg-type]
                             ran(2, acc=0.8)], "acc", budget)
    assert math.isnan(one.samples_per_s)
