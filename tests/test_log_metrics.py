"""Metrics read from what real training scripts print (tests/assets/logs/)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from msexp.cli import app
from msexp.execution.log_lines import LINE_CHARS, pairs
from msexp.execution.log_metrics import (
    COUNTER,
    PARAM,
    STATUS,
    MetricReader,
    bounded_lines,
    read_log,
)
from tests.conftest import ASSETS

LOGS = ASSETS / "logs"
EXPECTED = json.loads((LOGS / "expected.json").read_text(encoding="utf-8"))


def read(lines, params=(), patterns=()) -> MetricReader:
    reader = MetricReader(patterns, params=params)
    for line in lines:
        reader.feed(line)
    return reader


@pytest.mark.parametrize("log", sorted(EXPECTED))
def test_each_real_log_yields_its_metrics_and_no_configuration(log: str) -> None:
    """What each log yields; `params` are the trial's params (printed back, not metrics),
    `patterns` the sweep's own regexes (`experiment.metrics`), `left_out` what is no
    measurement, `ambiguous` a name printed on two kinds of line. Read line by line and
    as a trial's log is (in bounded pieces: each line whole, with its length)."""
    expected = EXPECTED[log]
    params, patterns = expected.get("params", ()), expected.get("patterns", ())
    lines = (LOGS / log).read_text(encoding="utf-8").splitlines()  # tqdm's \r ends one too
    reader = read(lines, params, patterns)
    assert reader.last == expected["recorded"]
    assert not set(expected["not_recorded"]) & set(reader.last)
    assert sorted(reader.left_out) == sorted(expected.get("left_out", []))
    assert set(reader.left_out.values()) <= {STATUS, PARAM, COUNTER}, "each says why"
    assert sorted(reader.ambiguous) == sorted(expected.get("ambiguous", []))
    assert (reader.lines, reader.cut) == (len(lines), None)
    assert reader.last_line == [line.strip() for line in lines if line.strip()][-1]
    with (LOGS / log).open(encoding="utf-8") as stream:
        pieces = [(line.removesuffix("\n"), length) for line, length in bounded_lines(stream)]
    assert pieces == [(line, len(line)) for line in lines]
    assert read_log(LOGS / log, patterns, params).last == reader.last


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
    # rich's hyperlink round a path; mutation: only colour codes removed (`id` = 7 read)
    link = "\x1b]8;id=7;file:///x/train.py\x1b\\train.py\x1b]8;;\x1b\\"
    assert MetricReader().feed(f"loss = \x1b[1;36m0.5\x1b[0m {link}") == {"loss": 0.5}
    # tqdm's cursor moves end in capitals (erase line, up a line); mutation: `[a-za-z]`
    assert MetricReader().feed("\x1b[2K\x1b[Aloss: 0.25") == {"loss": 0.25}


@pytest.mark.parametrize("line", [
    "2026-11-26 14:01:30,543:INFO:update best result: 0.25",  # the model zoo's EvalCallBack
    "[2026-11-23 13:40:23] mindcv.utils.callbacks INFO - => New best val acc: 10.0000%",
    "best result: 0.5", "Saving checkpoint step: 3", "loaded weights: 3",
])
def test_a_status_message_is_no_measurement(line: str) -> None:
    reader = MetricReader()
    assert reader.feed(line) == {} and reader.last == {}
    assert list(reader.left_out.values()) == [STATUS]


# Every word of the reader's vocabularies, each alone (a real log uses one or two of a
# list's words, so the corpus cannot tell one missing word: these lines can). Written out
# here, not imported: a word lost from the reader's list is still tested.
@pytest.mark.parametrize("word", ["val", "valid", "validation", "validate", "eval",
                                  "evaluate", "evaluation", "test", "testing"])
def test_each_evaluation_word_makes_its_line_an_evaluations(word: str) -> None:
    reader = read(["epoch 1 step 2 Top_1: 0.5", f"{word.title()} Top_1: 0.6",
                   f"epoch 2 step 1 loss=0.9 | {word} loss=0.95 acc=0.8", "epoch 2 step 2 acc=0.7"])
    assert reader.ambiguous == {"Top_1": ["a training line", "an evaluation line"],
                                "acc": ["a training line", "an evaluation line"]}


@pytest.mark.parametrize("word", [
    "best", "new", "update", "updated", "updating", "saving", "saved", "loaded", "loading",
    "found", "reached", "restored", "resumed", "resuming", "finished"])
def test_each_status_word_makes_a_status_message(word: str) -> None:
    reader = read(["epoch 1 step 2 loss: 0.5", f"{word.title()} val acc: 0.25"])
    assert reader.last == {"loss": 0.5}
    assert reader.left_out == {f"{word.title()}_val_acc": STATUS}


@pytest.mark.parametrize("word", ["is", "are", "was", "were"])
def test_each_verb_ends_prose_not_a_name(word: str) -> None:
    assert read(["epoch 1 step 2 loss: 0.5", f"the mean loss {word}: 0.25"]).last == \
        {"loss": 0.5}


@pytest.mark.parametrize("word", [
    "epoch", "epochs", "step", "steps", "iter", "iters", "iteration", "iterations", "batch",
    "batches", "global_step", "cur_step", "cur_epoch", "current_epoch", "current_step",
    "opt_global_step"])
def test_each_counter_word_is_a_progress_counter(word: str) -> None:
    reader = read(["epoch 1 step 2 loss: 0.5", f"{word}: 3, acc: 0.75"])
    assert reader.last == {"loss": 0.5, "acc": 0.75}
    assert reader.left_out == {word: COUNTER}


def test_a_name_a_script_chose_is_a_metric_even_if_it_says_best() -> None:
    line = "epoch time: 13833.125, avg loss: 3.917, eval_acc: 0.09375, best_acc: 0.104167"
    assert MetricReader().feed(line) == {"epoch_time": 13833.125, "avg_loss": 3.917,
                                         "eval_acc": 0.09375, "best_acc": 0.104167}


def test_a_param_printed_back_and_a_progress_counter_are_no_measurements() -> None:
    reader = MetricReader(params=["lr", "optim.momentum", "batch_size"])
    found = reader.feed("epoch: 3, step: 7, lr: 0.01, momentum: 0.9, loss: 2.5, acc: 0.75")
    assert found == {"loss": 2.5, "acc": 0.75}
    assert reader.left_out == {"epoch": COUNTER, "step": COUNTER, "lr": PARAM,
                               "momentum": PARAM}
    assert MetricReader().feed("lr: 0.01, momentum: 0.9") == {"lr": 0.01, "momentum": 0.9}, \
        "not a param of this trial: a metric"


def test_a_name_on_lines_of_two_kinds_is_left_out_and_one_kind_keeps_its_last_value() -> None:
    reader = read([
        "Epoch: [1/1], batch: [6/6], loss: 2.960374, lr: 0.000000, time: 36.104517s",
        "Validation Top_1_Accuracy: 10.0000%, Top_5_Accuracy: 50.0000%, time: 6.612047s",
        # the model zoo ResNet's step and epoch lines: one kind (training), last value wins
        "epoch: [1/2] step: [6/6], lr: 0.100000, loss: 2.376500, per step time: 123.456 ms",
        "epoch: [1/2] loss: 2.338900, epoch time: 3.210 s, per step time: 535.000 ms",
        "train loss: 0.5, acc: 0.9", "val loss: 0.6, acc: 0.8",
    ])
    assert reader.ambiguous == {"time": ["a training line", "an evaluation line"],
                                "acc": ["a training line", "an evaluation line"]}
    assert reader.last == {"loss": 2.3389, "lr": 0.1, "Top_1_Accuracy": pytest.approx(0.1),
                           "Top_5_Accuracy": 0.5, "per_step_time": 535.0, "epoch_time": 3.21,
                           "train_loss": 0.5, "val_loss": 0.6}


def test_an_evaluation_word_later_on_a_line_makes_the_pairs_after_it_an_evaluations() -> None:
    # mutation: every pair of a line of the kind its first name's words say (the reader as
    # it was) records the validation's acc 0.8 as acc, a training metric
    # (`Val`, capitalised: mutation, the word matched in lower case only)
    reader = read(["epoch 1/2 | train loss=0.9 acc=0.7 | Val loss=0.95 acc=0.8 | 3.0ms",
                   # a name's own `val` switches nothing: acc5 stays one kind
                   "epoch 2/2: acc5=0.9, val_acc=0.85, acc5=0.95",
                   "epoch 2/2 step 3: acc5=0.97"])
    assert reader.ambiguous == {"acc": ["a training line", "an evaluation line"]}
    assert reader.last == {"train_loss": 0.9, "Val_loss": 0.95, "val_acc": 0.85, "acc5": 0.97}


def test_msexp_metrics_says_what_it_leaves_out_and_why() -> None:
    log = LOGS / "mindcv_train_with_func.log"
    shown = CliRunner().invoke(app, ["metrics", str(log), "--param", "lr"],
                               env={"COLUMNS": "300"})
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert f"not recorded ({STATUS}): New_best_val_acc" in lines
    assert f"not recorded ({PARAM}): lr" in lines
    assert ("not recorded (printed on 2 kinds of line, so which one it means is ambiguous: "
            "a training line; an evaluation line): time; to record one, name it with "
            "experiment.metrics") in lines
    as_json = json.loads(CliRunner().invoke(app, ["metrics", str(log), "--json"]).output)
    assert as_json["metrics"] == {**EXPECTED[log.name]["recorded"], "lr": 0.099996}
    assert as_json["ambiguous"] == {"time": ["a training line", "an evaluation line"]}
    assert as_json["left_out"] == {"New_best_val_acc": STATUS} and as_json["cut"] == {}


def test_msexp_metrics_says_a_long_line_was_read_in_part(tmp_path) -> None:
    log = tmp_path / "train.log"
    log.write_text("x" * (LINE_CHARS + 5) + " acc: 0.5\nloss: 0.25\n", encoding="utf-8")
    shown = CliRunner().invoke(app, ["metrics", str(log), "--json"])
    assert json.loads(shown.output)["cut"] == {"line": 1, "length": LINE_CHARS + 14}
    assert json.loads(shown.output)["metrics"] == {"loss": 0.25}, "acc is past the cut"


def test_msexp_metrics_refuses_a_pattern_the_linear_engine_cannot_run() -> None:
    shown = CliRunner().invoke(app, ["metrics", str(LOGS / "mindspore_fit.log"),
                                     "--pattern", r"acc=(?P<a>\d)(?=x)"])
    assert shown.exit_code == 2
    assert shown.output.strip().splitlines() == [
        "--pattern: 0: not a regular expression that runs in linear time (invalid perl "
        "operator: (?=; RE2 syntax: no backreferences or lookarounds), got acc=(?P<a>\\d)(?=x)"]


def test_a_stream_is_read_to_its_end_line_by_line_the_last_without_its_newline() -> None:
    import io

    # mutation: the end of the stream not recognized (the reading never ends: a timeout)
    assert list(bounded_lines(io.StringIO("ab\nc"))) == [("ab\n", 2), ("c", 1)]
    assert list(bounded_lines(io.StringIO(""))) == []


@pytest.mark.parametrize(("line", "read"), [
    ("epoch[0], iter[3], loss:2.6741464, mean_wps:123.4",  # the model zoo's DS-CNN
     [("loss", 2.6741464), ("mean_wps", 123.4)]),
    ("val acc:0.91", [("val_acc", 0.91)]),
    ("epoch: 1 loss: 0.5 at own_loop.py:86", [("epoch", 1.0), ("loss", 0.5)]),
    ("connecting to localhost:5000", []),
    ("epoch 2 done at 10:30", []),
])
def test_a_colon_right_before_a_number_is_a_pair_only_under_a_plain_name_on_a_measuring_line(
        line: str, read: list[tuple[str, float]]) -> None:
    # mutation: _SEPARATOR without its tight `:` (DS-CNN's loss:2.67 unread)
    # mutation: _tight's check dropped (own_loop.py:86 and localhost:5000 read as metrics)
    assert [(v.name, v.number) for v in pairs(line)] == read


def test_msexp_metrics_names_the_echo_it_leaves_out_and_a_missing_log(tmp_path) -> None:
    """Mutations (issue 53): the echo not passed to the table (`None`), the missing file's
    name left out of its line (`str(None)`)."""
    log = tmp_path / "train.log"
    log.write_text("batch_size: 32\nhidden: 64\nepoch 1 step 5 loss: 0.5\n"
                   "epoch 1 step 10 loss: 0.25\n", encoding="utf-8")
    shown = CliRunner().invoke(app, ["metrics", str(log)], env={"COLUMNS": "300"})
    assert shown.exit_code == 0, shown.output
    assert "not recorded (printed before the first training line): batch_size, hidden" \
        in shown.output.splitlines()
    missing = CliRunner().invoke(app, ["metrics", str(tmp_path / "nowhere.log")])
    assert (missing.exit_code, missing.output) == (
        2, f"{tmp_path / 'nowhere.log'}: file not found\n")
