"""Each method's Optuna sampler, seeded as the sweep says, and the study's fingerprint."""

from __future__ import annotations

import optuna
import pytest

from msexp.search.study import fingerprint, make_sampler, sampler_seed
from msexp.spec import parse_spec

CONSTRAINED = "constraints: [{metric: peak_mem_mb, max: 100}]\n"


def spec_of(method: str, extra: str = "", seed: int | None = 7):
    fixed = f"fixed: {{seed: {seed}}}\n" if seed is not None else ""
    objective = ("objective: [{metric: eval_loss, direction: minimize}, {metric: wall_s, "
                 "direction: minimize}]\n" if method == "nsga2" else "")
    lr = "[0.01, 0.1]" if method == "grid" else "{low: 0.01, high: 0.1}"
    return parse_spec(f"name: s\nexperiment: mlp_digits\nmethod: {method}\n{objective}{fixed}"
                      f"params: {{lr: {lr}}}\n{extra}", "s.yaml")


def first_point(sampler: optuna.samplers.BaseSampler) -> float:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=sampler)
    return study.ask().suggest_float("x", 0.0, 1.0)


@pytest.mark.parametrize("method", ["grid", "random", "tpe", "cmaes", "nsga2"])
def test_each_sampler_draws_from_the_sweeps_seed_or_the_workers(method: str) -> None:
    """The creator draws from `seed`, a joining worker from a hash of it; no seed is 0."""
    expected = {"grid": optuna.samplers.RandomSampler, "random": optuna.samplers.RandomSampler,
                "tpe": optuna.samplers.TPESampler, "cmaes": optuna.samplers.CmaEsSampler,
                "nsga2": optuna.samplers.NSGAIISampler}[method]
    assert type(make_sampler(spec_of(method))) is expected
    reference = first_point(optuna.samplers.RandomSampler(seed=7))
    assert first_point(make_sampler(spec_of(method))) == reference
    joined = first_point(optuna.samplers.RandomSampler(seed=sampler_seed(7, "host:1")))
    assert first_point(make_sampler(spec_of(method), "host:1")) == joined != reference
    assert first_point(make_sampler(spec_of(method, seed=None))) == \
        first_point(optuna.samplers.RandomSampler(seed=0))


def test_tpe_samples_jointly_and_constraints_reach_no_deprecated_constraints_func() -> None:
    """Optuna 5 reads constraints from each trial (`Trial.set_constraint`, written when
    the trial is told; see test_constraints), not from the samplers' deprecated
    `constraints_func`, which warns."""
    tpe = make_sampler(spec_of("tpe", CONSTRAINED))
    assert tpe._multivariate is True and tpe._group is True
    assert tpe._constraints_func is None
    assert make_sampler(spec_of("nsga2", CONSTRAINED))._constraints_func is None
    assert make_sampler(spec_of("cmaes"))._warn_independent_sampling is False


def test_the_fingerprint_is_stable_because_studies_store_it() -> None:
    """A study made by an earlier msexp must still resume (mutation: any renamed key)."""
    spec = parse_spec("name: f\nexperiment: mlp_digits\nmethod: random\nobjective: {metric: "
                      "eval_loss, direction: minimize}\nfixed: {epochs: 2}\nparams: {lr: {low: "
                      "0.01, high: 0.1}}\n", "f.yaml")
    assert fingerprint(spec) == "982ed0764355cfaa"
    assert sampler_seed(7, "h:1") == 2793544317 and sampler_seed(7, None) == 7


def test_each_pruner_gets_every_setting_of_the_sweep_file() -> None:
    from msexp.search.study import make_pruner

    def pruner(section: str) -> optuna.pruners.BasePruner:
        return make_pruner(parse_spec(f"name: p\nexperiment: mlp_digits\nfixed: {{epochs: 9}}\n"
                                      f"params: {{lr: [0.1]}}\npruner: {section}\n", "p.yaml"))

    median = pruner("{type: median, warmup_epochs: 2, startup_trials: 4}")
    assert (median._n_startup_trials, median._n_warmup_steps) == (4, 2)
    percentile = pruner("{type: percentile, percentile: 40, warmup_epochs: 3, startup_trials: 6}")
    assert (percentile._percentile, percentile._n_startup_trials,
            percentile._n_warmup_steps) == (40, 6, 3)  # 5 is optuna's default
    hyperband = pruner("{type: hyperband, warmup_epochs: 1, reduction_factor: 4}")
    assert (hyperband._min_resource, hyperband._max_resource,
            hyperband._reduction_factor) == (1, 9, 4)
    assert type(pruner("{type: none}")) is optuna.pruners.NopPruner
