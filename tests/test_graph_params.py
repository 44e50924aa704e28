"""`knobs.graph_params`, the part of the graph signature that params make: exact values
for the rules a warm trial depends on (the knob-by-knob proof is test_signature)."""

from __future__ import annotations

from msexp.knobs import graph_params


def test_params_outside_the_graphs_are_left_out_and_own_params_kept():
    params = {"lr": 0.1, "seed": 3, "epochs": 4, "batch_size": 64, "hidden": 16}
    assert graph_params(params) == {"batch_size": 64, "hidden": 16, "lr_updates": "constant"}


def test_a_scheduled_lr_adds_its_length_in_epochs():
    assert graph_params({"epochs": 4, "lr_schedule": "cosine"})["lr_updates"] == "4 epochs"
    assert graph_params({"epochs": 4, "warmup_epochs": 1})["lr_updates"] == "4 epochs"
    assert graph_params({"epochs": 4, "warmup_epochs": 0})["lr_updates"] == "constant"
    assert graph_params({"epochs": 4, "lr_schedule": "constant"})["lr_updates"] == "constant"
    assert graph_params({"lr_schedule": "cosine"})["lr_updates"] == "None epochs"


def test_thor_decays_its_lr_only_with_a_positive_exponent():
    thor = {"epochs": 2, "optimizer": "thor"}
    assert graph_params({**thor, "thor.lr_decay": 0.5})["lr_updates"] == "2 epochs"
    assert graph_params({**thor, "thor.lr_decay": 0.0})["lr_updates"] == "constant"
    assert graph_params({**thor})["lr_updates"] == "constant"
    assert graph_params({"epochs": 2, "optimizer": "adam", "thor.lr_decay": 0.5}
                        )["lr_updates"] == "constant"
