"""The model zoo's TextCNN (NLP, `nn.Dropout(p=0.5)`, no BatchNorm; tests/assets/modelzoo/
textcnn, byte for byte) swept unchanged and with textcnn-hooks.patch (issue 49):
`train_loss` is one number in Optuna, the trial's record and MLflow; a micro_size-1 trial
trains the same whether micro_size is fixed or swept, and again when run twice; with msexp's
seeded dropout masks micro_size 4 equals micro_size 1."""

from __future__ import annotations

import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ASSETS, write
from tests.one_meaning import assert_one_meaning, trials, update_losses
from tests.test_real_scripts import invoke

TEXTCNN = ASSETS / "modelzoo" / "textcnn"
PATCH = ASSETS / "modelzoo" / "textcnn-hooks.patch"
UPDATES = 4  # 2 epochs of 2 batches of 64 (129 training sentences, the rest dropped)
_LOSS_LINE = re.compile(r"epoch: \d+ step: \d+, loss is ([-+.\deE]+)")


def write_reviews(folder: Path, per_class: int = 72) -> None:
    """An MR-style folder: one sentence a line in rt-polarity.pos and rt-polarity.neg,
    each holding two words of its class among common ones."""
    rng = random.Random(3)
    words = {"pos": ["good", "great", "fine", "superb", "lovely", "warm", "funny", "smart"],
             "neg": ["bad", "awful", "dull", "poor", "boring", "weak", "silly", "flat"]}
    common = ["the", "film", "movie", "story", "is", "was", "a", "plot", "acting", "and",
              "very", "quite"]
    folder.mkdir(parents=True)
    for kind, own in words.items():
        lines = []
        for _ in range(per_class):
            sentence = [rng.choice(common) for _ in range(rng.randint(5, 14))]
            for _ in range(2):
                sentence.insert(rng.randrange(len(sentence)), rng.choice(own))
            lines.append(" ".join(sentence))
        (folder / f"rt-polarity.{kind}").write_text("\n".join(lines) + "\n", encoding="utf-8")


def textcnn(workdir: Path, hooked: bool) -> Path:
    folder = workdir / ("textcnn-hooks" if hooked else "textcnn")
    shutil.copytree(TEXTCNN, folder)
    if hooked:
        subprocess.run(["git", "apply", str(PATCH)], cwd=folder, check=True)
    write_reviews(folder / "data")
    return folder


def sweep_file(folder: Path, name: str, micro_size: str) -> Path:
    return write(folder / f"{name}.yaml", f"""
        name: {name}
        experiment: {{command: python train.py --config_path=mr_config_cpu.yaml}}
        objective: {{metric: train_loss, direction: minimize}}
        budget: {{trial_timeout: 600}}
        fixed: {{data_path: data, epoch_size: 2, base_lr: 0.03{micro_size}}}
    """)


@pytest.mark.slow
def test_the_unchanged_textcnn_reports_its_last_loss_line_everywhere(workdir: Path) -> None:
    folder = textcnn(workdir, hooked=False)
    result = invoke("sweep", str(sweep_file(folder, "textcnn", "")))
    assert result.exit_code == 0, result.output
    [(trial, run)] = trials("textcnn").values()
    assert_one_meaning(trial, run, "textcnn", _LOSS_LINE)


@pytest.mark.slow
def test_hooked_textcnn_repeats_and_accumulates_exactly_with_dropout(workdir: Path) -> None:
    """micro_size 1 fixed, then swept with 4, then micro_size 4 again: the micro_size-1
    trials' update losses are identical, so are micro_size 4's in two runs, and they equal
    micro_size 1's to float rounding (msexp's seeded masks: each micro-batch draws its rows
    of the batch's mask); each trial's `train_loss` means one thing."""
    folder = textcnn(workdir, hooked=True)
    runs = {}
    swept = {"fixed": None, "swept": "[1, 4]", "again": "[4]"}
    for name, values in swept.items():
        sweep = sweep_file(folder, name, "" if values else ", micro_size: 1")
        if values:
            sweep.write_text(sweep.read_text() + f"params: {{micro_size: {values}}}\n")
        result = invoke("sweep", str(sweep))
        assert result.exit_code == 0, result.output
        if values:  # a sweep that splits the batch says what its Dropout layers do
            assert "1 nn.Dropout layer(s) draw msexp's seeded masks" in result.output
        found = trials(name)
        for trial, run in found.values():
            assert_one_meaning(trial, run, name, _LOSS_LINE)
        runs[name] = {int(run.data.params["micro_size"]): run for _, run in found.values()}
    one = update_losses(runs["fixed"][1])
    assert len(one) == UPDATES and len(set(one)) == UPDATES
    assert update_losses(runs["swept"][1]) == one, "swept micro_size 1 trains as fixed"
    assert update_losses(runs["again"][4]) == update_losses(runs["swept"][4]), "twice"
    assert update_losses(runs["swept"][4]) == pytest.approx(one, rel=1e-5), \
        "accumulation with dropout is exact: micro-batches draw the batch's mask rows"
