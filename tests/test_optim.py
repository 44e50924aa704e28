"""Learning-rate schedules: warm-up and cosine, per update, as the loop feeds them."""

from __future__ import annotations

import math

import pytest

from msexp.experiment import load_experiment
from msexp.spec.params import parse_params
from msexp.training.optim import learning_rates


def params(**fixed) -> dict:
    knobs = load_experiment("mlp_digits").knobs
    return parse_params("t", knobs, fixed, {}).resolve({})


def test_constant_without_warmup_is_one_float() -> None:
    assert learning_rates(params(lr=0.1), 10) == 0.1


def test_warmup_rises_linearly_then_holds() -> None:
    rates = learning_rates(params(lr=0.1, epochs=3, warmup_epochs=1), 4)
    assert rates == pytest.approx([0.025, 0.05, 0.075, 0.1] + [0.1] * 8)


def test_cosine_after_warmup_falls_to_zero() -> None:
    rates = learning_rates(params(lr=0.2, epochs=3, warmup_epochs=1, lr_schedule="cosine"), 2)
    assert rates[:2] == pytest.approx([0.1, 0.2])
    expected = [0.5 * 0.2 * (1 + math.cos(math.pi * k / 4)) for k in range(4)]
    assert rates[2:] == pytest.approx(expected)
    assert all(a >= b for a, b in zip(rates[2:], rates[3:])), "cosine only decreases"


def test_zero_epochs_need_no_schedule() -> None:
    assert learning_rates(params(lr=0.1, epochs=0, lr_schedule="cosine"), 5) == 0.1
