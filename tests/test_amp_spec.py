"""AMP and loss-scaling knobs in sweep files: conditional grids and the device check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from msexp.cli import app
from msexp.errors import SpecError
from msexp.experiment import load_experiment
from msexp.spec import parse_spec
from msexp.spec import precision as device
from msexp.spec.params import parse_params
from tests.conftest import ROOT, write

SWEEPS = sorted((ROOT / "sweeps").glob("*.yaml"))

AMP_GRID = """
name: amp
experiment: lenet_digits
params:
  amp_level: [O0, O2]
  loss_scale: [none, fixed, dynamic]
  loss_scale_window: {values: [2, 20], when: {loss_scale: dynamic}}
  drop_overflow_update: {values: [true, false], when: {loss_scale: fixed}}
"""


@pytest.fixture(scope="module", autouse=True)
def shared_cache(tmp_path_factory: pytest.TempPathFactory):
    """One probe cache for this module, away from the user's ~/.cache."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MSEXP_CACHE_DIR", str(tmp_path_factory.mktemp("probe-cache")))
        yield


@pytest.fixture
def probe_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty probe cache, so the device is really probed."""
    monkeypatch.setenv("MSEXP_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / device.CACHE_FILE


def test_conditional_params_expand_only_where_they_apply() -> None:
    spec = parse_spec(AMP_GRID, "amp.yaml")
    grid = spec.space.grid()
    # per amp_level: none, fixed x 2 drop settings, dynamic x 2 windows
    assert len(grid) == spec.n_trials() == 2 * (1 + 2 + 2)
    resolved = [spec.space.resolve(point) for point in grid]
    assert len({json.dumps(r, sort_keys=True) for r in resolved}) == len(grid)
    for values in resolved:
        scaled = values["loss_scale"] != "none"
        assert ("loss_scale_value" in values) == scaled
        assert ("loss_scale_window" in values) == ("loss_scale_factor" in values) \
            == (values["loss_scale"] == "dynamic")
        assert ("drop_overflow_update" in values) == (values["loss_scale"] == "fixed")
        assert ("amp_dtype" in values) == ("keep_batchnorm_fp32" in values) \
            == (values["amp_level"] != "O0")
    windows = sorted(r["loss_scale_window"] for r in resolved if "loss_scale_window" in r)
    assert windows == [2, 2, 20, 20]


def test_inapplicable_fixed_values_do_not_multiply_or_leak(probe_cache: Path) -> None:
    spec = parse_spec("name: a\nexperiment: mlp_digits\nfixed: {loss_scale_window: 50, "
                      "amp_dtype: bfloat16}\nparams:\n  loss_scale: [none, dynamic]\n", "a.yaml")
    none, dynamic = (spec.space.resolve(p) for p in spec.space.grid())
    assert "loss_scale_window" not in none and dynamic["loss_scale_window"] == 50
    assert "amp_dtype" not in none  # amp_level stays O0, so bfloat16 never runs
    assert not probe_cache.exists(), "a sweep without AMP must not probe the device"


@pytest.mark.parametrize("path", SWEEPS, ids=[p.stem for p in SWEEPS])
def test_every_example_sweep_validates_and_plans(path: Path) -> None:
    """The plan lists one row per trial, over the file's params; validate counts them."""
    file = yaml.safe_load(path.read_text())
    method = file.get("method", "grid")
    planned = CliRunner().invoke(app, ["plan", str(path)], env={"COLUMNS": "300"})
    assert planned.exit_code == 0, planned.output
    lines = planned.output.splitlines()
    rows = [line.split("│")[1].strip() for line in lines if line.startswith("│")]
    header = next(line for line in lines if line.startswith("┃"))
    assert rows == [str(i) for i in range(len(rows))] and rows
    assert f"{file['name']}: {method} of {len(rows)} trials on {file['experiment']}" in lines[0]
    assert all(f" {name} " in header for name in file.get("params", {}))
    validated = CliRunner().invoke(app, ["validate", str(path)])
    assert validated.exit_code == 0, validated.output
    assert validated.output.strip() == f"{path}: ok ({method}, {len(rows)} trials)"


def test_bfloat16_on_cpu_is_refused_at_validate(tmp_path: Path, probe_cache: Path) -> None:
    sweep = write(tmp_path / "bf16.yaml", """
        name: bf16
        experiment: lenet_digits
        fixed: {amp_level: O2}
        params:
          amp_dtype: [float16, bfloat16]
    """)
    result = CliRunner().invoke(app, ["validate", str(sweep)])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith(f"{sweep}: params.amp_dtype.1: CPU cannot run amp_dtype bfloat16 (")
    assert lines[0].endswith("use another amp_dtype or amp_level O0, got bfloat16")
    cache = json.loads(probe_cache.read_text())
    assert list(cache["machines"].values()) == ["CPU"]
    (answers,) = cache["targets"].values()
    assert answers["bfloat16"]["ok"] is False

    plan = CliRunner().invoke(app, ["plan", str(sweep), "--check"])  # answered from the cache
    assert plan.exit_code == 2 and plan.output.strip() == lines[0]
    portable = CliRunner().invoke(app, ["plan", str(sweep)])  # probes nothing: runs anywhere
    assert portable.exit_code == 0 and "grid of 2 trials" in portable.output, portable.output


def test_cached_answer_is_per_device_target_and_dtype(probe_cache: Path) -> None:
    probe_cache.parent.mkdir(parents=True)
    machine = device._machine_key()
    # mutation (issue 18): a lookup that ignores the target key; the cache holds another
    # target's opposite answers for the same dtypes
    probe_cache.write_text(json.dumps({
        "machines": {machine: "GPU", "other-host python": "CPU"},
        "targets": {
            device._target_key("CPU"): {"bfloat16": {"ok": False, "reason": "no kernel"},
                                        "float16": {"ok": True, "reason": ""}},
            device._target_key("GPU"): {"bfloat16": {"ok": True, "reason": ""},
                                        "float16": {"ok": False, "reason": "no fp16 here"}}}}))
    assert device.supports("bfloat16") == device.Support("GPU", "bfloat16", True)
    assert device.supports("float16") == device.Support("GPU", "float16", False,
                                                        "no fp16 here")
    spec = parse_spec("name: g\nexperiment: mlp_digits\nfixed: {amp_level: O3, "
                      "amp_dtype: bfloat16}\n", "g.yaml")
    assert spec.space.resolve({})["amp_dtype"] == "bfloat16"


def test_keep_batchnorm_fp32_applies_only_where_norms_get_cast() -> None:
    spec = parse_spec("name: k\nexperiment: lenet_digits\nparams:\n  amp_level: [O1, O2, O3]\n"
                      "  keep_batchnorm_fp32: [true, false]\n", "k.yaml")
    levels = [spec.space.resolve(p)["amp_level"] for p in spec.space.grid()]
    assert levels == ["O1", "O2", "O2", "O3", "O3"]


def test_refusal_names_the_fixed_key() -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec("name: b\nexperiment: mlp_digits\nfixed: {amp_dtype: bfloat16}\n"
                   "params:\n  amp_level: [O0, O1]\n", "b.yaml")
    assert caught.value.key == "fixed.amp_dtype" and caught.value.value == "bfloat16"


@pytest.mark.parametrize(("params", "expected"), [
    ({"amp_level": ["O0"], "amp_dtype": ["bfloat16"]}, set()),
    ({"amp_level": ["O0", "O3"], "amp_dtype": ["bfloat16"]}, {"bfloat16"}),
    ({"amp_level": ["O0", "O2"]}, {"float16"}),
    ({"amp_level": ["O0", "O2"], "amp_dtype": {"values": ["bfloat16"],
                                               "when": {"optimizer": "adam"}},
      "optimizer": ["sgd", "adam"]}, {"float16", "bfloat16"}),
    ({"amp_dtype": {"values": ["bfloat16"], "when": {"optimizer": "adam"}},
      "optimizer": ["sgd"]}, set()),
])
def test_only_dtypes_a_trial_can_run_under_amp_are_probed(params: dict, expected: set) -> None:
    knobs = load_experiment("mlp_digits").knobs
    assert device.amp_dtypes(parse_params("s.yaml", knobs, {}, params)) == expected


def test_param_whose_condition_fails_falls_back_to_the_default() -> None:
    knobs = load_experiment("lenet_digits").knobs
    space = parse_params("s.yaml", knobs, {"amp_level": "O2"}, {
        "optimizer": ["sgd", "adam"],
        "loss_scale_value": {"values": [2.0 ** 10], "when": {"optimizer": "adam"}},
        "amp_dtype": {"values": ["float16"], "when": {"optimizer": "adam"}},
        "loss_scale": ["dynamic"]})
    sgd, adam = (space.resolve(point) for point in space.grid())
    assert adam["loss_scale_value"] == 2.0 ** 10
    assert sgd["loss_scale_value"] == knobs["loss_scale_value"].default  # still applies
    assert sgd["amp_dtype"] == "float16"  # O2 needs a dtype whatever the optimizer
