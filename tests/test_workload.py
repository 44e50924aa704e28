"""The Workload path: MindSpore datasets, plan-time refusals, and the optional hooks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

from msexp.cli import app
from msexp.execution.host import running
from msexp.execution.protocol import TrialRequest
from msexp.search.storage import open_storage
from msexp.spec import load_spec, trial_params
from tests.conftest import ROOT, write

HEADER = """
    import numpy as np
    from msexp.experiment import Workload

    rng = np.random.default_rng(0)
    X = rng.normal(size=(256, 8)).astype(np.float32)
    Y = (X[:, 0] > 0).astype(np.int32)
    DEFAULTS = {"epochs": 3, "batch_size": 32, "lr": 0.1}


    def mlp():
        from mindspore import nn
        return nn.SequentialCell(nn.Dense(8, 16), nn.ReLU(), nn.Dense(16, 2))
"""


def run_file(path: Path, **fixed) -> dict[str, float]:
    ref = f"{path}:build"
    return running.run(TrialRequest(ref, trial_params(ref, fixed)), lambda event: None)


@pytest.mark.parametrize("dataset", [
    "ds.NumpySlicesDataset((X[:192], Y[:192]), ['x', 'y'], shuffle=False)",
    "ds.NumpySlicesDataset((X[:192], Y[:192]), ['x', 'y'], shuffle=True)"
    ".map(lambda a: a * 1.0, input_columns='x')",
    "ds.GeneratorDataset(lambda: ((X[i], Y[i]) for i in range(192)), ['x', 'y'])",
])
def test_mindspore_datasets_train_for_several_epochs(workdir: Path, dataset: str) -> None:
    path = write(workdir / "dsw.py", HEADER + f"""

    def build(params):
        import mindspore.dataset as ds
        from mindspore import nn
        train = {dataset}
        held = ds.NumpySlicesDataset((X[192:], Y[192:]), ['x', 'y'], shuffle=False)
        return Workload(mlp(), nn.CrossEntropyLoss(), train, held)
    """)
    epochs: list = []
    ref = f"{path}:build"
    metrics = running.run(TrialRequest(ref, trial_params(ref, {"epochs": 3})), epochs.append)
    assert [e.epoch for e in epochs if hasattr(e, "epoch")] == [1, 2, 3]
    assert metrics["eval_accuracy"] > 0.7  # chance is 0.5


def plan_error(workdir: Path, body: str, fixed: str = "{}") -> str:
    write(workdir / "w.py", HEADER + body)
    sweep = write(workdir / "s.yaml", f"name: w\nexperiment: w.py\nfixed: {fixed}\n")
    result = CliRunner().invoke(app, ["validate", str(sweep)])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    return lines[0]


def test_a_batched_dataset_is_refused_at_plan(workdir: Path) -> None:
    line = plan_error(workdir, """

    def build(params):
        import mindspore.dataset as ds
        from mindspore import nn
        train = ds.NumpySlicesDataset((X, Y), ['x', 'y']).batch(32)
        return Workload(mlp(), nn.CrossEntropyLoss(), train, (X, Y))
    """)
    assert line.endswith("s.yaml: experiment: Workload.train is batched (batch 32); give it "
                         "unbatched: msexp batches it by batch_size / micro_size, got w.py")


def test_a_cell_class_inside_build_is_refused_for_o1(workdir: Path) -> None:
    body = """

    def build(params):
        from mindspore import nn

        class Net(nn.Cell):
            def __init__(self):
                super().__init__()
                self.dense = nn.Dense(8, 2)

            def construct(self, x):
                return self.dense(x)

        return Workload(Net(), nn.CrossEntropyLoss(), (X, Y), (X, Y))
    """
    line = plan_error(workdir, body, "{amp_level: O1}")
    assert "amp_level O1 rewrites the network from its classes' source" in line
    assert "build.<locals>.Net" in line
    sweep = write(workdir / "o2.yaml", "name: w\nexperiment: w.py\nfixed: {amp_level: O2}\n")
    assert CliRunner().invoke(app, ["validate", str(sweep)]).exit_code == 0


def test_an_experiment_file_imports_its_sibling_modules(workdir: Path, monkeypatch) -> None:
    monkeypatch.delenv("PYTHONPATH", raising=False)
    project = workdir / "project"
    write(project / "mynets.py", HEADER)
    write(project / "exp.py", """
        from mynets import X, Y, mlp
        from msexp.experiment import Workload


        def build(params):
            from mindspore import nn
            return Workload(mlp(), nn.CrossEntropyLoss(), (X, Y), (X, Y))
    """)
    sweep = write(project / "s.yaml", "name: sib\nexperiment: project/exp.py\n")
    assert load_spec(sweep).experiment.ref == "project/exp.py"


@pytest.mark.slow  # over 5 s: the fast tier stays quick
def test_workload_optimizer_schedule_and_clipping(workdir: Path) -> None:
    path = write(workdir / "opt.py", HEADER + """

    def build(params):
        from mindspore import nn
        network = mlp()
        kind = params["kind"]
        optimizer = None
        if kind == "instance":
            optimizer = nn.SGD(network.trainable_params(), learning_rate=0.0)
        elif kind == "factory":
            optimizer = lambda net, p, steps: nn.SGD(net.trainable_params(),
                                                     learning_rate=0.0)
        schedule = [0.0] * 100 if kind == "schedule" else None
        return Workload(network, nn.CrossEntropyLoss(), (X, Y), (X, Y), optimizer=optimizer,
                        lr_schedule=schedule)

    PARAMS = {"kind": "knobs"}
    """)
    trained = run_file(path, epochs=2)
    for kind in ("instance", "factory", "schedule"):
        frozen = run_file(path, epochs=2, kind=kind)  # learning rate 0: nothing moves
        assert frozen["eval_loss"] != trained["eval_loss"], kind
        assert frozen["train_loss_epoch"] == pytest.approx(frozen["eval_loss"], rel=0.05), kind
    clipped = run_file(path, epochs=2, clip_grad_norm=1e-6)
    assert abs(clipped["eval_loss"] - trained["eval_loss"]) > 0.05


@pytest.mark.slow  # over 5 s: the fast tier stays quick
def test_a_multi_input_network_trains(workdir: Path) -> None:
    path = write(workdir / "multi.py", HEADER + """

    def build(params):
        from mindspore import nn, ops

        class Two(nn.Cell):
            def __init__(self):
                super().__init__()
                self.a, self.b = nn.Dense(4, 2), nn.Dense(4, 2)

            def construct(self, left, right):
                return self.a(left) + self.b(right)

        inputs = (X[:, :4], X[:, 4:])
        return Workload(Two(), nn.CrossEntropyLoss(), (inputs, Y), (inputs, Y))
    """)
    metrics = run_file(path, epochs=3)
    assert metrics["eval_accuracy"] > 0.8


def test_an_own_metric_can_be_the_pruned_objective(workdir: Path) -> None:
    write(workdir / "own.py", HEADER + """
    METRICS = ("eval_margin",)


    def build(params):
        from mindspore import nn
        margin = lambda logits, labels: float(np.mean(logits.max(axis=1)))
        return Workload(mlp(), nn.CrossEntropyLoss(), (X, Y), (X, Y),
                        metrics={"eval_margin": margin})
    """)
    sweep = write(workdir / "s.yaml", """
        name: own
        experiment: own.py
        objective: {metric: eval_margin, direction: maximize, target: 0.5}
        fixed: {epochs: 4}
        params: {lr: [0.1, 0.00001]}
        pruner: {type: median, warmup_epochs: 0, startup_trials: 1}
    """)
    result = CliRunner().invoke(app, ["sweep", str(sweep)])
    assert result.exit_code == 0, result.output
    study = optuna.load_study(study_name="own", storage=open_storage(None))
    fast, slow = study.trials
    assert (fast.params["lr"], fast.state.name) == (0.1, "COMPLETE")
    assert fast.value == fast.intermediate_values[4] > 0
    assert (slow.params["lr"], slow.state.name) == (0.00001, "PRUNED")
    assert len(slow.intermediate_values) < 4, "the pruned trial stopped early"
    first = min(slow.intermediate_values)  # the slow trial's margin, below the fast one's
    assert slow.intermediate_values[first] < fast.intermediate_values[first]


@pytest.mark.parametrize(("network", "loss", "labels", "rule"), [
    ("mlp()", "nn.CrossEntropyLoss(reduction='none')", "Y",
     "loss_fn returns shape (32,), not a scalar (use reduction='mean')"),
    ("nn.Dense(8, 2)", "nn.CrossEntropyLoss()", "Y * 3",
     "the network gives 2 classes but labels range 0..3"),
    ("mlp()", "nn.CrossEntropyLoss()", "Y.astype(np.float32)",
     "labels are float32 but the loss takes int32 class indices"),
    ("mlp()", "nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction='mean')",
     "np.eye(2, dtype=np.float32)[Y]",
     "labels are one-hot (2 columns) but the loss takes class indices: give int32 labels "
     "of shape (N,)"),
])
def test_plan_check_names_the_mistake_in_one_line(workdir: Path, network: str, loss: str,
                                                  labels: str, rule: str) -> None:
    write(workdir / "w.py", HEADER + f"""

    def build(params):
        from mindspore import nn
        return Workload({network}, {loss}, (X, {labels}), (X, {labels}))
    """)
    sweep = write(workdir / "s.yaml", "name: w\nexperiment: w.py\n")
    assert CliRunner().invoke(app, ["validate", str(sweep)]).exit_code == 0
    result = CliRunner().invoke(app, ["plan", str(sweep), "--check"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith(f"s.yaml: experiment: {rule}, got w.py"), lines


def test_plan_check_passes_a_sound_workload(workdir: Path) -> None:
    sweep = write(workdir / "s.yaml", "name: ok\nexperiment: mlp_digits\nfixed: {hidden: 8}\n")
    result = CliRunner().invoke(app, ["plan", str(sweep), "--check"], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert "one micro-batch trains (forward, loss, backward)" in result.output


def test_a_users_own_experiments_folder_does_not_shadow_the_built_ins(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hosts run with the sweep file's folder first on the path (its modules import): a
    package of the user's named `experiments` or `workloads` is the user's, not msexp's."""
    from msexp.experiment import load_experiment
    from msexp.experiment_source import builtin_folder

    for package in ("experiments", "workloads"):
        write(tmp_path / package / "__init__.py", "")
        write(tmp_path / package / "lenet_digits.py", "raise RuntimeError('the user's own')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    loaded = load_experiment("lenet_digits")
    assert Path(loaded.build.__code__.co_filename) == builtin_folder() / "lenet_digits.py"


def test_a_built_in_name_is_a_file_of_experiments_loaded_as_a_users_file_is() -> None:
    """`lenet_digits` and `experiments/lenet_digits.py` are one experiment, run by the same
    loader; a built-in does not import MindSpore before its `build` (plans stay fast)."""
    from msexp.experiment import load_experiment

    by_name = load_experiment("lenet_digits")
    by_path = load_experiment(str(ROOT / "experiments" / "lenet_digits.py"))
    assert by_name.build.__code__.co_filename == by_path.build.__code__.co_filename
    assert by_name.knobs == by_path.knobs and by_name.data_formats == ("mnist", "imagefolder")
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys; from msexp.experiment import load_experiment; "
         "[load_experiment(n) for n in ('mlp_digits', 'lenet_digits', 'resnet_cifar')]; "
         "print(sorted(m for m in ('mindspore', '_resnet') if m in sys.modules))"],
        cwd=ROOT, capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]", loaded.stderr  # mutation: MindSpore imported first


def test_msexps_experiments_are_found_beside_the_package_or_where_a_wheel_put_them(
        tmp_path: Path) -> None:
    from msexp.errors import MsexpError
    from msexp.experiment_source import shipped_folder

    checkout, venv = tmp_path / "checkout", tmp_path / "venv"
    write(checkout / "experiments" / "lenet_digits.py", "")
    assert shipped_folder(checkout / "msexp") == checkout / "experiments"
    package = venv / "lib" / "python3.11" / "site-packages" / "msexp"
    package.mkdir(parents=True)
    with pytest.raises(MsexpError, match="experiments are missing"):
        shipped_folder(package)
    write(venv / "share" / "msexp" / "experiments" / "lenet_digits.py", "")
    assert shipped_folder(package) == venv / "share" / "msexp" / "experiments"


def test_a_wheel_ships_every_file_of_msexps_experiments() -> None:
    """pyproject's data-files: each built-in and every module beside it that it imports."""
    tomllib = pytest.importorskip("tomllib")
    from msexp.experiment_source import builtin_names

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    shipped = project["tool"]["setuptools"]["data-files"]["share/msexp/experiments"]
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "experiments").glob("*.py"))
    assert sorted(shipped) == files
    assert {f"experiments/{name}.py" for name in builtin_names()} <= set(shipped)


# issue 53 (branches): each mistake in what build() returns, named in one line at plan time
@pytest.mark.parametrize(("workload", "declared", "rule"), [
    ("Workload('mlp', nn.CrossEntropyLoss(), (X, Y), (X, Y))", "",
     "Workload.network must be a mindspore.nn.Cell, got str"),
    ("Workload(mlp(), 'cross_entropy', (X, Y), (X, Y))", "",
     "Workload.loss_fn must be a Cell or function (logits, labels) -> loss"),
    ("Workload(mlp(), nn.CrossEntropyLoss(), (X, Y), (X, Y), optimizer='adam')", "",
     "Workload.optimizer must be an nn.Optimizer or a function "
     "(network, params, steps_per_epoch) -> nn.Optimizer"),
    ("Workload(mlp(), nn.CrossEntropyLoss(), (X,), (X, Y))", "",
     "Workload.train must be (inputs, labels) arrays (inputs: a tuple of arrays for a "
     "network of several inputs)"),
    ("Workload(mlp(), nn.CrossEntropyLoss(), (X, Y), (X, Y[:10]))", "",
     "Workload.eval has 256 inputs but 10 labels"),
    ("Workload(mlp(), nn.CrossEntropyLoss(), (X, Y), (X, Y), metrics={'f1': 0.5})", "",
     "Workload.metrics['f1'] must be a function (logits, labels) -> float"),
    ("Workload(mlp(), nn.CrossEntropyLoss(), (X, Y), (X, Y))", "METRICS = ('f1',)",
     "METRICS declares f1 but Workload.metrics does not compute it"),
], ids=["network", "loss", "optimizer", "train", "eval-lengths", "metric", "declared-metric"])
def test_plan_check_names_a_wrong_part_of_the_workload_in_one_line(
        workdir: Path, workload: str, declared: str, rule: str) -> None:
    write(workdir / "w.py", HEADER + f"""
    {declared}


    def build(params):
        from mindspore import nn
        return {workload}
    """)
    sweep = write(workdir / "s.yaml", "name: w\nexperiment: w.py\n")
    result = CliRunner().invoke(app, ["plan", str(sweep), "--check"], env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith(f"s.yaml: experiment: {rule}, got w.py"), lines


def test_a_batch_larger_than_the_training_set_fails_the_trial_before_it_trains(
        workdir: Path) -> None:
    """issue 53 (branches): said with both numbers, before any graph compiles."""
    path = write(workdir / "w.py", HEADER + """

    def build(params):
        from mindspore import nn
        return Workload(mlp(), nn.CrossEntropyLoss(), (X, Y), (X[:64], Y[:64]))
    """)
    with pytest.raises(ValueError, match=r"^batch_size 512 is larger than the training set "
                                         r"\(256\)$"):
        run_file(path, batch_size=512)
