"""Experiments: what a user brings (network, loss, data) and how msexp finds it.

An experiment is a module with a `build(params) -> Workload` function: a built-in name
(`mlp_digits`: msexp's own `experiments/mlp_digits.py`, a file loaded as a user's is),
`package.module[:build]` (a bare module name needs the colon: `mymodel:build`), or
`path/to/file.py[:build]`. It may also define:

- `DEFAULTS`: defaults for msexp's own knobs (epochs, batch_size, lr, ...).
- `PARAMS`: its own knobs with their defaults, e.g. `{"hidden": 512}`; these are
  sweepable next to msexp's knobs and reach `build` in `params`.
- `METRICS`: names of extra eval metrics that `Workload.metrics` computes.
- `DATA_FORMATS`: the `data.format` values its `build` reads from `params["data"]`
  (see `msexp.datasets`); without it any format passes to `build` unchecked.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from msexp.console.interrupts import import_mindspore
from msexp.errors import ExperimentError
from msexp.experiment_source import builtin_file
from msexp.knobs import KNOBS, Knob, infer_knob

Metric = Callable[[Any, Any], float]
"""An extra eval metric: (logits, labels) as NumPy arrays -> float."""


@dataclass
class Workload:
    """What `build` returns: msexp adds accumulation, AMP, loss scaling and the optimizer.

    Attributes:
        network: a `mindspore.nn.Cell` producing logits.
        loss_fn: a Cell or function `(logits, labels) -> scalar loss`.
        train: `(inputs, labels)` NumPy arrays, or an unbatched `mindspore.dataset` dataset.
        eval: the same for evaluation.
        data_source: a short description of the data, recorded in MLflow.
        metrics: extra eval metrics, name -> function of (logits, labels); each is
            computed every epoch, so each can be an objective and drive pruning.
        optimizer: an `nn.Optimizer` over the network's weights, or a factory
            `(network, params, steps_per_epoch) -> nn.Optimizer`; None: the `optimizer`
            knob (sgd, momentum, adam, adamw, thor) with the lr knobs.
        lr_schedule: the learning rate per update (a list) or a MindSpore
            `LearningRateSchedule`, instead of `lr_schedule`/`warmup_epochs`.
    """

    network: Any
    loss_fn: Any
    train: Any
    eval: Any
    data_source: str = ""
    metrics: dict[str, Metric] = field(default_factory=dict)
    optimizer: Any = None
    lr_schedule: Any = None


@dataclass(frozen=True)
class Experiment:
    """A resolved experiment: where it came from and the knobs it adds."""

    ref: str
    build: Callable[[dict[str, Any]], Workload] | None
    defaults: Mapping[str, Any]
    own_knobs: Mapping[str, Knob]
    metrics: tuple[str, ...]
    data_formats: tuple[str, ...] | None = None
    known: bool = True  # its DEFAULTS and PARAMS: not where it is not imported (see load)

    @property
    def is_command(self) -> bool:
        """A user's own command: msexp runs it, it does not build it."""
        return self.build is None

    @property
    def knobs(self) -> dict[str, Knob]:
        """msexp's knobs with this experiment's defaults, plus the experiment's own; for a
        command, only the knobs its sweep file sets."""
        if self.is_command:
            return dict(self.own_knobs)
        merged = {name: _with_default(k, self.defaults.get(name, k.default))
                  for name, k in KNOBS.items()}
        merged.update(self.own_knobs)
        return merged


def _with_default(knob: Knob, default: Any) -> Knob:
    return knob if default == knob.default else replace(knob, default=default)


def load_experiment(ref: str, source: str = "experiment") -> Experiment:
    """Import an experiment by built-in name, `package.module[:build]` or `file.py[:build]`.

    Raises:
        ExperimentError: the module does not import, has no callable `build`,
            or declares knobs that are malformed or clash with msexp's.
    """
    target, _, attr = ref.partition(":")
    attr = attr or "build"
    module = _import(target, source, builtin=is_builtin(ref))
    build = getattr(module, attr, None)
    if not callable(build):
        raise ExperimentError(source, "experiment",
                              f"{target} has no function `{attr}(params) -> Workload`", ref)
    defaults, own = declared_knobs(source, target, dict(getattr(module, "DEFAULTS", {})),
                                   dict(getattr(module, "PARAMS", {})))
    metrics = tuple(getattr(module, "METRICS", ()))
    formats = getattr(module, "DATA_FORMATS", None)
    return Experiment(ref, build, defaults, own, metrics,
                      None if formats is None else tuple(formats))


def declared_knobs(source: str, target: str, defaults: dict[str, Any],
                   params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Knob]]:
    """An experiment's `DEFAULTS`, checked against msexp's knobs, and its `PARAMS` as its
    own knobs.

    Raises:
        ExperimentError: a default breaks its knob's rule, or a param is malformed or
            clashes with a knob of msexp's.
    """
    for name, value in defaults.items():
        knob = KNOBS.get(name)
        rule = "is not an msexp knob" if knob is None else knob.check(value)
        if rule:
            raise ExperimentError(source, f"experiment DEFAULTS.{name}", rule, value)
    own: dict[str, Knob] = {}
    for name, value in params.items():
        if name in KNOBS:
            raise ExperimentError(source, f"experiment PARAMS.{name}",
                                  "clashes with an msexp knob of the same name", value)
        try:
            own[name] = infer_knob(name, value, f"declared by {target}")
        except TypeError as exc:
            raise ExperimentError(source, f"experiment PARAMS.{name}", str(exc), value) from None
    return defaults, own


def workload_problem(workload: Any, declared_metrics: tuple[str, ...] = ()) -> str | None:
    """What is wrong with what `build` returned, or None if it is a usable Workload."""
    from mindspore import nn  # lazy: MindSpore takes seconds; plan-time callers skip it

    if not isinstance(workload, Workload):
        return f"build() must return msexp.experiment.Workload, got {type(workload).__name__}"
    if not isinstance(workload.network, nn.Cell):
        return f"Workload.network must be a mindspore.nn.Cell, got " \
               f"{type(workload.network).__name__}"
    if not callable(workload.loss_fn):
        return "Workload.loss_fn must be a Cell or function (logits, labels) -> loss"
    if workload.optimizer is not None and not callable(workload.optimizer):
        return ("Workload.optimizer must be an nn.Optimizer or a function "
                "(network, params, steps_per_epoch) -> nn.Optimizer")
    for name in ("train", "eval"):
        problem = data_problem(getattr(workload, name), name)
        if problem:
            return problem
    for name, fn in workload.metrics.items():
        if not callable(fn):
            return f"Workload.metrics[{name!r}] must be a function (logits, labels) -> float"
    missing = [name for name in declared_metrics if name not in workload.metrics]
    if missing:
        return f"METRICS declares {', '.join(missing)} but Workload.metrics does not compute it"
    return None


def data_problem(data: Any, name: str) -> str | None:
    """What is wrong with `Workload.<name>`, or None for (inputs, labels) arrays or a dataset."""
    if isinstance(data, (tuple, list)):
        inputs = data[0] if len(data) == 2 and isinstance(data[0], tuple) else data[:1]
        arrays = [*inputs, *data[1:]]
        if len(data) != 2 or not all(hasattr(a, "shape") for a in arrays):
            return (f"Workload.{name} must be (inputs, labels) arrays (inputs: a tuple of "
                    "arrays for a network of several inputs)")
        if any(len(a) != len(data[1]) for a in inputs):
            return f"Workload.{name} has {len(inputs[0])} inputs but {len(data[1])} labels"
        return None
    from mindspore.dataset import Dataset  # lazy: as above

    if not isinstance(data, Dataset):
        return (f"Workload.{name} must be (inputs, labels) arrays or a mindspore.dataset "
                f"dataset, got {type(data).__name__}")
    batch = data.get_batch_size()
    if batch != 1:
        return (f"Workload.{name} is batched (batch {batch}); give it unbatched: msexp "
                "batches it by batch_size / micro_size")
    return None


def local_cell_classes(network: Any) -> list[str]:
    """Cell classes of `network` defined inside a function, which AMP O1 cannot rewrite
    (it re-creates a network from its classes' source, without the function's names)."""
    return sorted({type(cell).__qualname__ for _, cell in network.cells_and_names()
                   if "<locals>" in type(cell).__qualname__})


def describe_failure(exc: BaseException) -> str:
    """`Type: message at file:line `code``: where a user's code raised, in one line."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not f.filename.startswith("<frozen")]
    where = ""
    if frames:
        last = frames[-1]
        where = f" at {Path(last.filename).name}:{last.lineno}"
        if last.line:
            where += f" `{last.line.strip()}`"
    if isinstance(exc, SyntaxError) and exc.lineno:
        where = f" at {Path(exc.filename or '?').name}:{exc.lineno} `{(exc.text or '').strip()}`"
    return f"{type(exc).__name__}: {exc}{where}"


_DEFINES_BUILD = re.compile(r"^(?:def\s+build\s*\(|build\s*=|from\s.+\simport\s.*\bbuild\b)",
                            re.M)


def is_script(ref: str) -> bool:
    """Whether `ref` is a training script to run as `python FILE`, not an experiment to
    import: a .py file, named without `:build`, that defines no `build`."""
    path = Path(ref)
    if ":" in ref or path.suffix != ".py":
        return False
    try:
        text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None
    except OSError:
        return False
    return text is not None and not _DEFINES_BUILD.search(text)


def is_builtin(ref: str) -> bool:
    """Whether `ref` is a bare name: one of msexp's own experiments (`BUILTINS`)."""
    return ":" not in ref and "." not in ref and "/" not in ref


def _import(target: str, source: str, builtin: bool) -> ModuleType:
    path = builtin_file(target, source) if builtin else None
    try:
        if path is not None:  # msexp's own file imports MindSpore only in `build`: plans stay fast
            return _import_file(path, source, first_mindspore=False)
        if target.endswith(".py") or "/" in target:
            return _import_file(Path(target), source)
        import_mindspore()  # most experiment modules import it: never interrupted half-way
        return importlib.import_module(target)
    except ExperimentError:
        raise
    except Exception as exc:  # the user's module raised while importing
        raise ExperimentError(source, "experiment", "does not import: " + describe_failure(exc),
                              target) from None


def _import_file(path: Path, source: str, first_mindspore: bool = True) -> ModuleType:
    if not path.is_file():
        raise ExperimentError(source, "experiment", "file not found", str(path))
    name = f"msexp_user_{path.stem}_{abs(hash(str(path.resolve())))}"
    if name in sys.modules:
        return sys.modules[name]
    folder = str(path.parent.resolve())
    if folder not in sys.path:  # the file's sibling modules import, as for `python file.py`
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    if first_mindspore:  # most experiment files import it: never interrupted half-way
        import_mindspore()
    sys.modules[name] = module
    argv, sys.argv = sys.argv, [str(path)]  # what `python FILE` would give it, not msexp's
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    finally:
        sys.argv = argv
    return module
