"""`msexp tune`: the halving, keep, max-batch and lr rules against hand computations, its
refusals, and real tune runs on lenet_digits (profile, halve, confirm; --max-batch)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from msexp.cli.app import app
from msexp.execution.protocol import Result, TrialRequest, read_events
from msexp.execution.result import Status, TrialResult
from msexp.spec import load_spec
from msexp.training.records import Probe
from msexp.tune import rules
from msexp.tune.phases import Verdict
from msexp.tune.runner import failure
from tests.conftest import with_callback, write

DIGITS = """
    name: tuned
    experiment: lenet_digits
    method: grid
    objective:
      - {metric: eval_accuracy, direction: maximize}
    budget: {trial_timeout: 300, workers: 1, repeats: 2}
    fixed: {epochs: 1, lr: 0.01, optimizer: adam}
    params:
      micro_size: [1, 4]
      batch_size: [64, 256]
"""


def cli(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "300"})


def test_halving_keeps_the_faster_half_and_at_least_two() -> None:
    assert rules.halve({"a": 10.0, "b": 30.0, "c": 20.0, "d": 5.0}) == ["b", "c"]
    assert rules.halve({"a": 10.0, "b": 30.0, "c": 20.0}) == ["b", "c"]  # ceil(3/2) = 2
    assert rules.halve({"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0, "e": 5.0}) == ["e", "d", "c"]
    assert rules.halve({"a": 1.0}) == ["a"]
    assert rules.halve({}) == []  # nothing measured (mutation: the leader looked up anyway)
    assert rules.halve({"a": 40.0, "b": 10.0, "c": 30.0, "d": 20.0}) == ["a", "c"]  # first


def test_halving_drops_those_that_cannot_lead_within_twice_the_spread() -> None:
    rates = {"a": 100.0, "b": 95.0, "c": 85.0, "d": 80.0, "e": 50.0, "f": 40.0}
    # the half: a, b, c; at spread 0.05, c needs 85 x 1.10 = 93.5 >= 100: it cannot lead
    assert rules.halve(rates, 0.05) == ["a", "b"]
    assert rules.halve(rates, 0.09) == ["a", "b", "c"]  # 85 x 1.18 = 100.3 >= 100
    assert rules.halve(rates) == ["a", "b", "c"], "nothing measured: the half"
    # at least two stay, even where the second cannot lead (halving is settled then)
    assert rules.halve({"a": 100.0, "b": 50.0, "c": 40.0}, 0.01) == ["a", "b"]


def test_halving_stops_once_no_more_than_the_confirmed_can_lead() -> None:
    before, now = {"a": 100.0, "b": 80.0}, {"a": 110.0, "b": 84.0}
    assert rules.spread(before, now) == pytest.approx(0.10)  # a: |110 - 100| / 100
    assert rules.contenders(now, 0.10) == ["a"]  # 84 x 1.2 = 100.8 < 110
    assert rules.settled(now, rules.spread(before, now))
    assert not rules.settled({"a": 110.0, "b": 100.0}, 0.10)  # 100 x 1.2 >= 110
    assert rules.settled({"a": 1.0}, math.inf) and rules.settled({}, math.inf)
    # confirm trains the top k: halving stops once at most k can lead, not one
    rates = {"a": 110.0, "b": 106.0, "c": 95.0, "d": 80.0}
    assert rules.contenders(rates, 0.03) == ["a", "b"]  # 95 x 1.06 = 100.7 < 110
    assert not rules.settled(rates, 0.03) and rules.settled(rates, 0.03, top=2)
    assert not rules.settled(rates, 0.08, top=2)  # c: 95 x 1.16 = 110.2 >= 110
    assert not rules.settled(rates, math.inf, top=3), "nothing measured: all can lead"
    # a tie: all that can lead are within TIE (5%) of the leader once twice the spread is
    assert rules.TIE == 0.05
    assert rules.settled(rates, 0.025) and rules.contenders(rates, 0.025) == ["a", "b"]
    assert not rules.settled(rates, 0.0251), "twice the spread just over the tie"


def test_a_probes_spread_is_the_median_notch_over_the_median() -> None:
    steps = [10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0, 30.0]  # ms, after the compile
    # inclusive quartiles: 12 (position 2 of 0..8) and 16 (position 6); median 14;
    # notch 1.57 * (16 - 12) / sqrt(9) = 2.0933 ms; relative to 14: 0.14952
    assert rules.probe_spread(steps) == pytest.approx(1.57 * 4 / 3 / 14)
    assert rules.probe_spread(steps) == pytest.approx(0.149524, rel=1e-5)
    assert rules.probe_spread([5.0, 5.0, 5.0]) == 0.0
    assert rules.probe_spread([5.0]) == math.inf  # one step time measures no noise
    assert rules.samples_per_s(64, [10.0, 40.0, 20.0]) == 3200.0  # 64 x 1000 / 20 ms
    # the leader (a) and second (b) are judged by the larger of their two spreads
    rates, spreads = {"a": 120.0, "b": 100.0, "c": 50.0}, {"a": 0.02, "b": 0.05, "c": 0.5}
    assert rules.leaders_spread(rates, spreads) == 0.05
    assert rules.settled(rates, 0.05)  # margin 0.20 > 2 * 0.05
    assert not rules.settled(rates, 0.11)  # 0.20 < 0.22
    assert rules.leaders_spread({"a": 1.0}, {"a": 0.3}) == 0.0
    assert rules.round_spread(0.03, 0.08) == 0.08 and rules.round_spread(0.03, None) == 0.03
    assert rules.round_spread(math.inf, 0.08) == 0.08
    assert rules.round_spread(math.inf, None) == math.inf


def test_halving_stops_at_round_0_when_the_profiles_spread_settles_it() -> None:
    from msexp.tune.candidates import Candidate
    from msexp.tune.measure import Budget, Profile
    from msexp.tune.phases import halve

    def profile(micro: int, rate: float, spread: float) -> Profile:
        return Profile(Candidate({"micro_size": micro}, {"micro_size": micro}), [rate],
                       [spread])

    fast, slow, slower = profile(1, 300.0, 0.04), profile(2, 200.0, 0.10), profile(4, 90.0, 0.9)
    # margin 300 / 200 - 1 = 0.5 > 2 * 0.10: no round runs, so no runner is needed
    standing, spread, rounds, _ = halve(None, [slow, fast, slower], Budget([], None), 10, 1,
                                        lambda ran, dropped: None)
    assert standing == [fast, slow, slower] and spread == 0.10 and rounds == 0
    # two leaders tied within the noise, and confirm trains both: no round either
    tied = profile(8, 295.0, 0.04)
    standing, _, rounds, _ = halve(None, [slow, fast, tied, slower], Budget([], None), 10, 2,
                                   lambda ran, dropped: None)
    assert standing[:2] == [fast, tied] and rounds == 0


def test_the_keep_rule_allows_the_seed_spread_or_the_tolerance_and_says_which() -> None:
    baseline = [0.90, 0.92]  # mean 0.91, sample std 0.01414
    assert rules.seed_spread(baseline) == pytest.approx(0.0141421, rel=1e-4)
    assert rules.keeps([0.90, 0.91], baseline, maximize=True)  # 0.005 worse
    assert not rules.keeps([0.89, 0.90], baseline, maximize=True)  # 0.015 worse
    assert rules.keeps([0.89, 0.90], baseline, maximize=True, tolerance=0.02)
    assert rules.keeps([0.99, 0.99], baseline, maximize=True)  # better is kept
    allowed, source = rules.allowance([0.89, 0.90], baseline)
    assert allowed == pytest.approx(0.0141421, rel=1e-4)
    assert source == "the baseline's seed spread over 2 seeds"
    # the candidate's own spread, where larger (0.03536), is the noise measured
    allowed, source = rules.allowance([0.85, 0.90], baseline)
    assert allowed == pytest.approx(0.0353553, rel=1e-4)
    assert source == "its seed spread over 2 seeds"
    assert rules.keeps([0.85, 0.90], baseline, maximize=True)  # 0.035 worse <= 0.0354
    assert rules.allowance([0.89, 0.90], baseline, 0.02) == (0.02, "--tolerance")
    assert rules.allowance([0.89, 0.90], baseline, 0.01)[1].startswith("the baseline's")
    assert not rules.keeps([0.95, 0.97], [0.91, 0.93], maximize=False)  # a loss: higher
    assert rules.keeps([0.90, 0.92], [0.91, 0.93], maximize=False)  # is worse


def test_the_next_to_confirm_are_the_next_k_in_the_ranking_faster_than_the_baseline() -> None:
    ranking = ["a", "b", "base", "c", "d", "e"]  # tune's ranking: halving's survivors first
    rates = {"a": 700.0, "b": 690.0, "base": 600.0, "c": 650.0, "d": 599.0, "e": 620.0}
    confirmed = {"a", "b", "base"}
    assert rules.next_to_confirm(ranking, rates, 600.0, confirmed, 2) == ["c", "e"]
    assert rules.next_to_confirm(ranking, rates, 600.0, confirmed, 1) == ["c"]
    assert rules.next_to_confirm(ranking, rates, 600.0, confirmed | {"c", "e"}, 2) == []
    assert rules.next_to_confirm(ranking, rates, 0.0, set(ranking) - {"d"}, 2) == ["d"]


def test_confirm_trains_the_next_k_only_when_none_of_the_top_k_keeps_the_objective() -> None:
    from msexp.tune.candidates import Candidate
    from msexp.tune.measure import Budget, Profile
    from msexp.tune.phases import confirm
    from msexp.tune.runner import Ran

    class Table:
        """Answers each training from a table of eval_accuracy by micro_size: what is under
        test is whom the phase trains and keeps, not the training."""

        def __init__(self, accuracy: dict[int, float]):
            self.accuracy, self.trained = accuracy, []

        def run(self, jobs, hosts=None):
            self.trained.append(sorted({j.params["micro_size"] for j in jobs}))
            return [Ran(j, TrialResult(Status.COMPLETE, {
                "eval_accuracy": self.accuracy[j.params["micro_size"]], "samples_per_s": 1.0,
                "train_mem_mb": 1.0}), 0.0, 0.0) for j in jobs]

    def profile(micro: int, rate: float) -> Profile:
        return Profile(Candidate({"micro_size": micro}, {"batch_size": 64, "micro_size": micro}),
                       ratios=[rate / 500.0])

    base = profile(1, 500.0)
    standing = [profile(8, 900.0), profile(4, 800.0), profile(2, 700.0), profile(16, 650.0),
                profile(32, 600.0), base]

    def run(accuracy: dict[int, float]) -> tuple[list[list[int]], list[Verdict]]:
        table = Table(accuracy)
        _, verdicts = confirm(table, standing, 2, base, [0, 1], "eval_accuracy", True, 0.0,
                              Budget([], None), lambda ran, dropped: None)
        return table.trained, verdicts

    good = {m: 0.9 for m in (1, 2, 4, 8, 16, 32)}
    trained, verdicts = run(good)  # the first kept: no second group
    assert trained == [[1, 4, 8]] and verdicts[0].rejected is None
    trained, verdicts = run({**good, 8: 0.5, 4: 0.5})  # the top 2 lose accuracy
    assert trained == [[1, 4, 8], [1, 2, 16]], "the baseline trains beside each group"
    assert [v.profile.candidate.point["micro_size"] for v in verdicts] == [8, 4, 2, 16]
    assert [v.rejected is None for v in verdicts] == [False, False, True, True]
    trained, verdicts = run({**good, 8: 0.5, 4: 0.5, 2: 0.5, 16: 0.5})  # one more group only
    assert trained == [[1, 4, 8], [1, 2, 16]] and all(v.rejected for v in verdicts)
    standing[1:] = [base, profile(4, 800.0)]  # the baseline ranks second: it is confirmed
    trained, verdicts = run({**good, 8: 0.5})
    assert trained == [[1, 8]] and [v.profile for v in verdicts] == standing[:2]
    assert verdicts[1].rejected is None  # nothing ranked above it kept the objective


def test_the_pick_is_what_trained_fastest_of_the_kept_and_the_baseline() -> None:
    from msexp.tune.candidates import Candidate
    from msexp.tune.measure import Profile
    from msexp.tune.outcome import choose

    def verdict(ratio: float, rejected: str | None = None, fits: bool = True,
                spread: float = 0.01) -> Verdict:
        profile = Profile(Candidate({"lr": ratio}, {"lr": ratio}))
        # samples/s unpaired, measured under another load: never what picks
        return Verdict(profile, [0.9], 1000.0 / ratio, 1.0, rejected, fits, ratio=ratio,
                       ratio_spread=spread)

    base = verdict(1.0)
    first, second = verdict(0.9), verdict(1.04)  # ranked first by its profile, slower
    assert choose([first, second], base) is second
    # faster within twice its spread: no gain over the baseline the noise can show
    # mutation: the margin not doubled, or the spread left out
    assert choose([verdict(1.04, spread=0.025)], base) is base
    assert choose([verdict(1.06, spread=0.025)], base).ratio == 1.06
    # one seed: the spread of its probes' ratios stands in for the seeds'
    one_seed = verdict(1.06, spread=math.inf)
    assert choose([one_seed], base) is base  # nothing measured its noise
    one_seed.profile.spreads = [0.01]
    assert choose([one_seed], base) is one_seed
    assert choose([verdict(1.001, spread=0.04)], verdict(1.0, fits=False)).ratio == 1.001
    assert choose([first], base) is base  # nothing kept trained faster
    assert choose([verdict(1.8, "worse")], base) is base
    assert choose([first], verdict(1.0, fits=False)) is first
    assert choose([verdict(1.8, "worse")], verdict(1.0, fits=False)) is None
    assert choose([verdict(math.nan), first], None) is first  # no samples/s: never ahead
    assert choose([base, first], base) is base  # the baseline ranked among the top


def test_confirm_trains_the_seeds_the_file_sweeps_or_its_repeats(tmp_path: Path) -> None:
    from msexp.tune.candidates import seeds

    def seeds_of(extra: str) -> list:
        return seeds(load_spec(write(tmp_path / "s.yaml", DIGITS.replace(
            "repeats: 2", "repeats: 1") + extra)))

    assert seeds(load_spec(write(tmp_path / "r.yaml", DIGITS))) == [0, 1]  # repeats: 2
    assert seeds_of("      seed: [3, 5, 8]\n") == [3, 5, 8]  # listed: each a replicate
    assert seeds_of("") == [0, 1], "one seed: the next too, to measure the noise"
    assert seeds_of("      seed: [4]\n") == [4, 5]
    assert seeds(load_spec(write(tmp_path / "f.yaml", DIGITS.replace(
        "epochs: 1,", "epochs: 1, seed: 7,")))) == [7, 8]


def test_the_max_batch_search_matches_a_hand_search() -> None:
    def memory_mb(size: int) -> float:  # a stand-in for measured memory: linear in size
        return 1.0 + 0.05 * size

    budget = 20.0
    found, tried = rules.largest_fitting(lambda s: memory_mb(s) <= budget)
    by_hand = max(s for s in range(1, 5000) if memory_mb(s) <= budget)
    assert found == by_hand == 380
    assert tried[:10] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]  # doubling, then bisection
    assert 384 in tried and 381 in tried and len(tried) <= 10 + 8
    assert rules.largest_fitting(lambda s: False) == (0, [1])
    assert rules.largest_fitting(lambda s: True, limit=64)[0] == 64


def test_the_lr_suggestion_is_the_steepest_descent_before_divergence() -> None:
    rates = [1e-6 * 10 ** (7 * i / 299) for i in range(300)]  # 1e-6 .. 10, exponential
    # a loss that falls fastest at lr 1e-3 (log-logistic) and blows up above lr 1
    losses = [2.0 - math.tanh(2 * (math.log10(r) + 3)) + (50.0 if r > 1 else 0.0)
              for r in rates]
    suggested = rules.suggest_lr(rates, losses)
    # Lightning's EMA (beta 0.98) lags the curve by about 1 / (1 - beta) = 50 points, a
    # little over one decade here: the steepest smoothed descent lies just past 1e-3
    assert 1e-3 <= suggested <= 1e-3 * 10 ** 1.5
    clean = sum(r <= 1 for r in rates)  # the smoothed loss passes 4x its best a few points on
    assert clean < len(rules.before_divergence(losses)) <= clean + 5
    assert rules.suggest_lr(rates[:12], losses[:12]) is None  # too few points
    # diverged once it passes 4x its best, not at 4x (mutation: >=); 6.94... smooths to 4.0
    assert rules.smooth([1.0, 6.940000000000009]) == [1.0, 4.0]
    assert rules.before_divergence([1.0, 6.940000000000009, 1e6]) == [1.0, 4.0]


def test_a_probe_request_round_trips_and_is_never_warm_for_an_lr_test(tmp_path: Path) -> None:
    request = TrialRequest("lenet_digits", {"batch_size": 32}, tmp_path,
                           probe=Probe(200, 1e-5, 1.0))
    assert TrialRequest.from_json(request.to_json()) == request


def test_a_failed_profile_names_its_reason() -> None:
    assert failure(TrialResult(Status.COMPLETE)) is None
    assert failure(TrialResult(Status.FAILED, error="out of memory")) == "failed: out of memory"
    assert "trial timeout" in failure(TrialResult(Status.TIMEOUT, error="600 s"))


def test_tune_refuses_a_range_a_hookless_command_and_max_batch_without_budget(
        workdir: Path) -> None:
    ranged = write(workdir / "ranged.yaml", DIGITS.replace(
        "batch_size: [64, 256]", "weight_decay: {low: 0.001, high: 0.1}").replace(
        "repeats: 2", "repeats: 1").replace("method: grid", "method: random"))
    result = cli("tune", str(ranged))
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        f"{ranged}: params.weight_decay: msexp tune needs a list of values to profile each, not a "
        "range, got 0.001 .. 0.1"]
    write(workdir / "train.py", "print('accuracy 0.5')\n")
    command = write(workdir / "command.yaml", """
        name: cmd
        experiment: {command: python train.py, metrics: ['accuracy (?P<eval_accuracy>\\S+)']}
        objective: [{metric: eval_accuracy, direction: maximize}]
        params: {lr: [0.1, 0.01]}
    """)
    result = cli("tune", str(command))
    assert result.exit_code == 2, result.output
    assert "add msexp.hooks.MsexpCallback() to its Model.train callbacks" in result.output
    assert len(result.output.strip().splitlines()) == 1
    digits = write(workdir / "digits.yaml", DIGITS)
    result = cli("tune", str(digits), "--max-batch")
    assert result.exit_code == 2
    assert result.output.strip() == (f"{digits}: constraints: --max-batch needs a memory "
                                     "budget: --memory MB or a train_mem_mb max constraint, "
                                     "got none")


@pytest.mark.parametrize(("flags", "says"), [
    (["--max-batch", "--lr-find"], "msexp tune: --max-batch: choose --max-batch or --lr-find, "
                                   "got both"),
    (["--lr-find", "--lr-low", "0.1", "--lr-high", "0.1"],
     "msexp tune: --lr-low: must be below --lr-high, got 0.1"),
], ids=["both-searches", "empty-lr-range"])
def test_tune_refuses_contradicting_flags_before_reading_the_sweep(
        workdir: Path, flags: list[str], says: str) -> None:
    """issue 53 (branches): refused in one line, exit 2, before any store or host starts."""
    result = cli("tune", str(workdir / "missing.yaml"), *flags)
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [says]
    assert not (workdir / "mlruns").exists()


def _profiles(folder: Path) -> dict[str, dict[str, float]]:
    """The result metrics of every probe under a tune run's folder, by folder name."""
    found = {}
    for events in folder.rglob("events.jsonl"):
        for event in read_events(events):
            if hasattr(event, "metrics") and "updates" in getattr(event, "metrics", {}):
                found[events.parent.name] = event.metrics
    return found


@pytest.mark.slow
def test_a_tune_run_drops_what_breaks_the_budget_and_picks_the_fastest_kept(
        workdir: Path) -> None:
    from msexp.tracking.runs import Tracker

    sweep = write(workdir / "digits.yaml", DIGITS + "    constraints:\n"
                  "      - {metric: train_mem_mb, max: 10}\n")
    result = CliRunner().invoke(
        app, ["tune", str(sweep), "--tolerance", "1", "--updates", "6", "--json"])
    assert result.exit_code == 0, result.output + result.stderr
    found = json.loads(result.stdout)
    said = result.stderr.splitlines()  # a line per probe and per phase, off a terminal
    assert said[0].startswith("profile: 4 candidates, 6 updates each")
    assert any(line.startswith("halve: ") for line in said)
    assert said[-1].startswith("confirm: the pick is ")
    probes = [line for line in said if re.match(r" +\d+ (profile|halve\d)-", line)]
    assert len(probes) >= 3 + 2, "3 profiled (one skipped), in a turn between baseline probes"
    assert "halving_stopped" in found and found["halving_stopped"]
    by_config = {(c["config"]["micro_size"], c["config"]["batch_size"]): c
                 for c in found["candidates"]}
    # micro-batch 256 (LeNet5 about 15 MB) breaks the 10 MB budget; micro-batch 64 fits
    assert by_config[(1, 256)]["dropped"].startswith("train_mem_mb ")
    assert "> 10 (the budget)" in by_config[(1, 256)]["dropped"]
    assert by_config[(1, 256)]["memory_mb"] > 10  # measured, kept for the plot
    assert by_config[(4, 256)]["dropped"] is None and by_config[(4, 256)]["memory_mb"] < 10
    probes = _profiles(Path("mlruns/tune"))
    assert len(probes) >= 3
    for name, probe in probes.items():  # samples/s by hand: batch_size * 1000 / step_ms
        batch = int(re.search(r"batch_size(\d+)", name).group(1))
        assert probe["samples_per_s"] == pytest.approx(batch * 1000 / probe["step_ms"])
        assert probe["overflow_rate"] == 0.0
    pick = found["pick"]
    assert pick is not None, result.output
    for candidate in found["candidates"]:  # its ratio: its probe over the baseline's beside
        if candidate["throughput_ratio"] and len(candidate["throughput_ratio"]) == 1:
            assert candidate["throughput_ratio"][0] == pytest.approx(
                candidate["samples_per_s"] / candidate["baseline_samples_per_s"])
    standing = [c for c in found["candidates"] if c["dropped"] is None]
    rounds = max(len(c["throughput_ratio"]) for c in standing)
    fastest = max((c for c in standing if len(c["throughput_ratio"]) == rounds),
                  key=lambda c: c["throughput_ratio"][-1])  # the baseline's is 1
    assert found["confirmed"][0]["config"] == fastest["config"]
    base = found["baseline"]  # --tolerance 1 keeps every candidate: the fastest trained wins
    assert base["throughput_ratio"] == 1.0  # over the baseline only beyond twice its spread
    beyond = [v for v in found["confirmed"] if v["throughput_spread"] is not None
              and v["throughput_ratio"] > 1 + 2 * v["throughput_spread"]]
    trained = max(beyond + [base], key=lambda v: v["throughput_ratio"])
    assert pick["config"] == trained["config"]
    assert base["config"] == {"micro_size": 1, "batch_size": 64}
    assert len(base["objective"]) == 2  # budget.repeats seeds
    tuned = load_spec(found["sweep_file"])  # ready to run: it validates
    assert tuned.space.resolve({})["micro_size"] == pick["config"]["micro_size"]
    assert Path(found["plot"]).stat().st_size > 10_000
    tracker = Tracker()
    for phase, parent in found["mlflow_runs"].items():
        children = tracker.client.search_runs(
            [tracker.experiment_id("tuned")], f"tags.`mlflow.parentRunId` = '{parent}'")
        assert children and all(c.data.tags["msexp.tune.phase"] == phase for c in children)
    confirm = tracker.client.list_artifacts(found["mlflow_runs"]["confirm"])
    stamp = next(Path("mlruns/tune/tuned").iterdir()).name  # the run's folder names its files
    assert Path(found["plot"]).name == f"tuned-tune-{stamp}.png"
    assert Path(found["sweep_file"]).name == f"tuned-tuned-{stamp}.yaml"
    assert {f"tuned-tune-{stamp}.png", f"tuned-tuned-{stamp}.yaml"} <= {a.path for a in confirm}


@pytest.mark.slow
def test_max_batch_agrees_with_a_hand_binary_search_over_measured_memory(
        workdir: Path) -> None:
    """The baseline accumulates 4 micro-batches: each probe trains batch_size 4 x its
    micro-batch at micro_size 4, and the answer is a micro-batch and 4 times it."""
    # mutation (issue 40): micro_size ignored, a probe of batch_size = micro-batch (whose
    # micro-batches are a quarter of it): a batch 4x too large would be recommended
    from msexp.tracking.runs import Tracker

    sweep = write(workdir / "digits.yaml", DIGITS.replace("micro_size: [1, 4]",
                                                          "micro_size: [4, 1]"))
    result = cli("tune", str(sweep), "--max-batch", "--memory", "2.5", "--updates", "2",
                 "--json")
    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout)  # stderr has a line per probe
    measured = {t["micro_batch"]: t["train_mem_mb"] for t in found["tried"]}
    assert None not in measured.values(), found["tried"]  # every probe measured
    by_hand, _ = rules.largest_fitting(lambda size: measured[size] <= 2.5)
    assert found["micro_batch"] == by_hand > 0
    assert measured[found["micro_batch"]] <= 2.5 < measured[found["micro_batch"] + 1]
    assert (found["micro_size"], found["batch_size"]) == (4, 4 * found["micro_batch"])
    tracker = Tracker()
    probes = {run.info.run_name: run.data.params for run in tracker.client.search_runs(
        [tracker.experiment_id("tuned")], "tags.`msexp.role` = 'trial'")}
    assert sorted(probes) == sorted(f"maxbatch-{size}" for size in measured)
    for size in measured:
        params = probes[f"maxbatch-{size}"]
        assert (params["micro_size"], params["batch_size"]) == ("4", str(4 * size)), size


@pytest.mark.slow
def test_lr_find_grows_the_lr_exponentially_and_suggests_one_inside_the_range(
        workdir: Path) -> None:
    sweep = write(workdir / "digits.yaml", DIGITS)
    result = cli("tune", str(sweep), "--lr-find", "--lr-updates", "60", "--lr-low", "1e-5",
                 "--lr-high", "1", "--json")
    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout)
    rates, losses = found["lr"], found["train_loss"]
    assert rates[0] == pytest.approx(1e-5) and len(losses) == len(rates) <= 60
    step = (1 / 1e-5) ** (1 / 59)  # the same factor from each update to the next
    assert all(b / a == pytest.approx(step) for a, b in zip(rates, rates[1:]))
    assert found["suggested_lr"] == rules.suggest_lr(rates, losses)
    assert 1e-5 < found["suggested_lr"] < 1
    assert Path(found["plot"]).stat().st_size > 10_000


def test_without_a_pick_each_candidate_has_a_line_saying_why(tmp_path: Path) -> None:
    from msexp.cli.tune import lines, summary
    from msexp.tune.candidates import Candidate
    from msexp.tune.measure import Profile
    from msexp.tune.outcome import Outcome

    def profile(micro: int, dropped: str) -> Profile:
        return Profile(Candidate({"micro_size": micro}, {"batch_size": 64, "micro_size": micro}),
                       dropped=dropped)

    profiles = [profile(1, "train_mem_mb 15 > 10 (the budget)"),
                profile(2, "failed: batch_size 4096 is larger than the training set"),
                profile(4, "passed the trial timeout (600 s)")]
    profiles[0].ratios, profiles[0].spreads = [1.25], [0.04]  # measured, then dropped
    outcome = Outcome(profiles, [], 0.04, 0, None, [], None, tmp_path / "p.png", None, {}, "0")
    shown = lines(summary(outcome))
    assert any("1.25x ± 4.0% (probes)" in line for line in shown)
    assert any(line.startswith("halving: 0 round(s);") and line.endswith(": 4.0%")
               for line in shown)
    for p in profiles:
        assert sum(p.dropped in line and f"micro_size={p.candidate.point['micro_size']}" in line
                   for line in shown) == 1
    assert "no pick: every candidate was dropped (reasons above)" in shown


def test_the_plot_numbers_candidates_in_tunes_ranking_and_its_key_says_each_fate(
        tmp_path: Path) -> None:
    from msexp.tune.candidates import Candidate
    from msexp.tune.measure import Profile
    from msexp.tune.outcome import Outcome
    from msexp.tune.output import plot_key, throughput_plot

    def profile(micro: int, ratios: list[float], memory: float | None,
                dropped: str | None = None) -> Profile:
        made = Profile(Candidate({"micro_size": micro}, {"batch_size": 64, "micro_size": micro}),
                       ratios=ratios, spreads=[0.02 * micro] * len(ratios), dropped=dropped)
        made.metrics = {} if memory is None else {"train_mem_mb": memory}
        return made

    base, slow = profile(1, [1.0], 5.0), profile(2, [0.67], 3.0)
    fast = profile(4, [0.83, 1.37], 2.0)  # a halving round: its latest ratio counts
    over = profile(8, [1.67], 12.0, "train_mem_mb 12 > 10 (the budget)")
    broken = profile(16, [], None, "failed: exit 1")
    verdicts = [Verdict(fast, [0.9], 400.0, 2.0, ratio=1.33, ratio_spread=0.015),
                Verdict(slow, [0.5], 190.0, 3.0, "worse", ratio=0.66, ratio_spread=math.inf)]
    outcome = Outcome([base, slow, fast, over, broken], [fast, slow, base], 0.02, 1,
                      Verdict(base, [0.9], 290.0, 5.0, ratio=1.0, ratio_spread=0.0), verdicts,
                      verdicts[0])
    rows = plot_key(outcome).splitlines()
    assert rows[0].split() == ["#", "micro_size", "probes/base", "trained/base", "MB",
                               "rounds"]
    assert [row.split()[:10] for row in rows[1:5]] == [  # tune's ranking, then the dropped
        ["1", "4", "1.37x", "±", "8.0%", "1.33x", "±", "1.5%", "2.00", "1"],
        ["2", "2", "0.67x", "±", "4.0%", "0.66x", "±", "?", "3.00", "0"],
        ["3", "1", "1.00x", "±", "2.0%", "1.00x", "±", "0.0%", "5.00", "0"],
        ["4", "8", "1.67x", "±", "16.0%", "-", "12.00", "0", "dropped:", "train_mem_mb"]]
    assert rows[1].endswith("the pick") and rows[2].endswith("not kept: worse")
    assert rows[3].endswith("the baseline: trained as the reference")
    assert rows[4].endswith("dropped: train_mem_mb 12 > 10 (the budget)")
    assert rows[5].split()[:5] == ["5", "16", "-", "-", "-"]
    assert rows[5].endswith("failed: exit 1")
    plot = throughput_plot(tmp_path / "t.png", outcome, 10.0, "title")
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_probe_stops_after_its_updates_and_reports_figures_by_their_units() -> None:
    from msexp.execution.local import train_request
    from msexp.spec import trial_params
    from msexp.training.probe import range_rates

    events: list = []
    params = trial_params("mlp_digits", {"batch_size": 32, "micro_size": 2, "epochs": 1})
    request = TrialRequest("mlp_digits", params, probe=Probe(70))  # over one epoch's 44
    metrics, _ = train_request(request, events.append, lambda: False)
    epoch = next(e for e in events if hasattr(e, "series"))
    assert len(epoch.series["train_loss"]) == 70 and metrics["updates"] == 70
    assert metrics["training_updates"] == 44, "the training it stands for: 1 epoch of 44"
    assert metrics["samples_per_s"] == pytest.approx(32 * 1000 / metrics["step_ms"])
    assert metrics["train_mem_mb"] > 0 and metrics["overflow_rate"] == 0.0
    assert "eval_accuracy" not in metrics  # a probe evaluates nothing
    assert events[-1] == Result(metrics), "its figures end the trial"  # mutation: not emitted
    rates = range_rates(Probe(5, 1e-4, 1.0))
    assert rates == pytest.approx([1e-4, 1e-3, 1e-2, 1e-1, 1.0])


@pytest.mark.slow
def test_a_failing_an_exiting_and_a_hanging_candidate_are_dropped_with_their_reasons(
        workdir: Path) -> None:
    sweep = write(workdir / "faulty.yaml", """
        name: faulty
        experiment: broken:build
        objective: [{metric: eval_accuracy, direction: maximize}]
        budget: {trial_timeout: 30, workers: 1, repeats: 1}
        fixed: {hidden: 16}
        params:
          mode: [works, raises, exits, hangs]
    """)
    result = cli("tune", str(sweep), "--updates", "4", "--json")
    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout[result.stdout.index("{"):])  # after build()'s print
    dropped = {c["config"]["mode"]: c["dropped"] for c in found["candidates"]}
    assert dropped["works"] is None
    assert dropped["raises"] == ("failed: RuntimeError: the experiment is broken on purpose")
    assert dropped["exits"] == "failed: trial process exited with code 3"
    assert dropped["hangs"] == ("passed the trial timeout (exceeded trial_timeout of 30 s)")
    assert found["pick"]["config"] == {"mode": "works"}  # the run goes on and ends with a pick
    assert found["rounds"] == 0 and found["spread"] is None  # one candidate stood: no halving


@pytest.mark.slow
def test_a_script_reporting_through_the_callback_is_tuned(workdir: Path) -> None:
    with_callback(Path(__file__).parent / "assets" / "scripts" / "train_digits.py",
                  workdir / "train_cb.py", "MsexpCallback(model, eval_ds)")
    sweep = write(workdir / "script.yaml", """
        name: script-tune
        experiment: {command: python train_cb.py}
        objective: [{metric: eval_accuracy, direction: maximize}]
        budget: {trial_timeout: 600, workers: 1, repeats: 1}
        fixed: {epochs: 1, lr: 0.05}
        params:
          batch_size: [32, 64]
    """)
    result = cli("tune", str(sweep), "--tolerance", "1", "--json")
    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout)
    for candidate in found["candidates"]:  # capped probes: per-update step times
        assert candidate["dropped"] is None and candidate["throughput_ratio"][0] > 0
        assert candidate["spread"][0] is not None
    probes = _profiles(Path("mlruns/tune/script-tune"))
    assert len(probes) >= 3, "a probe of each candidate and the baseline's beside it"
    for name, probe in probes.items():  # 10 updates (20, 40 in halving rounds 2, 3), at
        round_ = int(name[5]) if name.startswith("halve") else 0  # most the 1 epoch's 43
        epoch = 1400 // int(re.search(r"batch_size(\d+)", name).group(1))  # (or 21)
        assert probe["updates"] == min(10 * 2 ** max(round_ - 1, 0), epoch), name
        assert "eval_accuracy" not in probe, name
    base = found["baseline"]
    assert found["pick"] is not None and base["config"] == {"batch_size": 32}
    ratio = next(c["throughput_ratio"][-1] for c in found["candidates"]
                 if c["config"] == {"batch_size": 64})
    assert found["confirmed"][0]["config"] == ({"batch_size": 64} if ratio > 1
                                               else {"batch_size": 32})
    for trained in (*found["confirmed"], base):  # the callback's eval, 1 run (no seed knob)
        assert len(trained["objective"]) == 1 and 0 < trained["objective"][0] <= 1
