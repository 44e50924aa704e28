"""Metrics read from what real training scripts print (tests/assets/logs/)."""

from __future__ import annotations

import json

import pytest

from msexp.execution.log_metrics import MetricReader
from tests.conftest import ASSETS

LOGS = ASSETS / "logs"
EXPECTED = json.loads((LOGS / "expected.json").read_text(encoding="utf-8"))


def read(lines) -> MetricReader:
    reader = MetricReader()
    for line in lines:
        reader.feed(line)
    return reader


@pytest.mark.parametrize("log", sorted(EXPECTED))
def test_each_real_log_yields_its_metrics_and_no_configuration(log: str) -> None:
    reader = read((LOGS / log).read_text(encoding="utf-8").splitlines())
    assert reader.last == EXPECTED[log]["recorded"]
    assert not set(EXPECTED[log]["not_recorded"]) & set(reader.last)


def test_the_corpus_holds_every_log_there_is() -> None:
    assert sorted(p.name for p in LOGS.glob("*.log")) == sorted(EXPECTED)


def test_several_pairs_on_a_line_are_each_a_metric() -> None:
    line = "epoch time: 14664.571, per step time: 1222.048, avg loss: 4.327, eval_acc: 0.104167"
    assert MetricReader().feed(line) == {"epoch_time": 14664.571, "per_step_time": 1222.048,
                                         "avg_loss": 4.327, "eval_acc": 0.104167}


def test_a_percent_is_a_fraction_once_under_the_printed_name() -> None:
    found = MetricReader().feed("Validation Top_1_Accuracy: 10.0000%, time: 4.12s")
    assert found == {"Top_1_Accuracy": pytest.approx(0.1), "time": 4.12}


def test_progress_forms_are_not_metrics_but_bracketed_values_are() -> None:
    reader = MetricReader()
    assert reader.feed("Epoch: [1/3], batch: [6/6], loss: 2.96") == {"loss": 2.96}
    assert reader.feed("epoch: [  0/200], step:[  624/  625], loss:[5.258/5.1], "
                       "lr:[0.100]") == {"loss": 5.258, "lr": 0.1}


def test_values_before_the_first_training_line_are_a_configuration_echo() -> None:
    reader = read(["Momentum: 0.9", "MixUp: 0.0"])
    assert reader.last == {"Momentum": 0.9, "MixUp": 0.0}, "no training line: all of it"
    reader.feed("Epoch: [1/1], batch: [1/6], loss: 2.5")
    assert reader.last == {"loss": 2.5} and reader.echoed == {"Momentum": 0.9, "MixUp": 0.0}


def test_a_dict_with_text_and_a_dump_over_several_lines_are_configuration() -> None:
    reader = read(["{'lr': 0.1, 'device_target': 'CPU'}", "config: {'batch_size': 32,",
                   " 'momentum': 0.9,", " 'lr': 0.01} ", "epoch: 1 step: 1, loss is 2.3",
                   "Namespace(lr=0.1, epochs=3)", "Eval result: epoch 1, metrics: {'acc': 0.5}"])
    assert reader.last == {"train_loss": 2.3, "acc": 0.5}


def test_prose_times_and_versions_are_not_metrics() -> None:
    reader = MetricReader()
    for line in ("version 2.10.0 at 10:30", "[2026-11-23 13:40:23] ETA 0:10:35",
                 "The best validation Top_1_Accuracy is: 10.0000% at epoch 1.",
                 "Total time since the last epoch began: 29.5", "Loss scale: 1024(fixed)",
                 "INFO     Epoch: [1/1]        callbacks.py:147"):
        assert reader.feed(line) == {}, line


def test_the_sweeps_regexes_are_recorded_wherever_they_match() -> None:
    reader = MetricReader([r"acc=(?P<eval_accuracy>[0-9.]+)"])
    reader.feed("Momentum: 0.9 acc=0.5")
    reader.feed("epoch: 1 step: 1, loss is 2.3")
    assert reader.last == {"train_loss": 2.3, "eval_accuracy": 0.5}


def test_colour_codes_do_not_hide_a_metric() -> None:
    assert MetricReader().feed("\x1b[32mval_acc: 0.75\x1b[0m") == {"val_acc": 0.75}
