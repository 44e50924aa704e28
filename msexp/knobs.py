"""Every knob a sweep can set: type, allowed values, default and condition.

This table is the single source for validation, `msexp knobs` and the JSON Schema.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

SEED_MAX = 2**32 - 1  # NumPy's and MindSpore's limit
_TYPE_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
               list: "a list"}


@dataclass(frozen=True)
class Knob:
    """One sweepable setting.

    Attributes:
        name: key used in `fixed`, `params`, MLflow params and `--set`.
        type: bool, int, float, str or list.
        default: value used when a sweep does not set it (None: unset).
        help: one line for `msexp knobs`.
        choices: allowed values, if the knob is categorical.
        ge, gt, le, lt: numeric bounds.
        when: the knob applies only where each named knob has one of the listed values.
        graph: the value is part of the compiled training graphs; False where it lives in a
            Parameter or in Python only (lr, momentum, seed...), so trials that differ only
            in such values share one compile (see `graph_params`).
    """

    name: str
    type: type
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    when: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    graph: bool = True

    def check(self, value: Any) -> str | None:
        """Return the rule `value` breaks, or None if it is allowed."""
        if not _is_type(value, self.type):
            return f"must be {_TYPE_NAMES[self.type]}"
        if isinstance(value, float) and not math.isfinite(value):
            return "must be a finite number"
        if self.choices is not None and value not in self.choices:
            return "must be one of " + ", ".join(str(c) for c in self.choices)
        for bound, op, ok in (
            (self.ge, ">=", lambda v, b: v >= b),
            (self.gt, ">", lambda v, b: v > b),
            (self.le, "<=", lambda v, b: v <= b),
            (self.lt, "<", lambda v, b: v < b),
        ):
            if bound is not None and not ok(value, bound):
                return f"must be {op} {bound if isinstance(bound, int) else format(bound, 'g')}"
        return None

    def applies(self, values: Mapping[str, Any]) -> bool:
        """Whether this knob's own condition holds for a trial's resolved values."""
        return condition_holds(self.when, values)


def condition_holds(when: Mapping[str, tuple[Any, ...]], values: Mapping[str, Any]) -> bool:
    """True if every knob named in `when` has one of the listed values."""
    return all(values.get(name) in allowed for name, allowed in when.items())


def _is_type(value: Any, kind: type) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, kind)


def infer_knob(name: str, default: Any, help: str = "declared by the experiment") -> Knob:
    """A knob an experiment declares by giving its default; the type follows the default."""
    kind = type(default)
    if kind not in _TYPE_NAMES:  # the callers' errors name the knob and the value
        raise TypeError("must be bool, int, float, str or list")
    return Knob(name, kind, default, help)


_SCALED = ("fixed", "dynamic")
_AMP = ("O1", "O2", "O3")
_THOR = {"optimizer": ("thor",)}

KNOBS: dict[str, Knob] = {k.name: k for k in (
    Knob("epochs", int, 5, "passes over the training set (0: evaluate only)", ge=0, graph=False),
    Knob("batch_size", int, 64, "global batch per optimizer update", ge=1),
    Knob("micro_size", int, 1, "micro-batches one update is split into (gradient accumulation)",
         ge=1),
    Knob("devices", int, 1, "data-parallel processes per trial (launched through msrun)", ge=1),
    Knob("lr", float, 0.01, "peak learning rate", gt=0, graph=False),
    Knob("optimizer", str, "momentum", "optimizer",
         choices=("sgd", "momentum", "adam", "adamw", "thor")),
    Knob("momentum", float, 0.9, "momentum coefficient", ge=0, lt=1,
         when={"optimizer": ("momentum", "thor")}, graph=False),
    Knob("weight_decay", float, 0.0, "L2 weight decay", ge=0),
    Knob("lr_schedule", str, "constant", "learning-rate schedule after warm-up",
         choices=("constant", "cosine"), graph=False),
    Knob("warmup_epochs", int, 0, "epochs of linear learning-rate warm-up", ge=0, graph=False),
    Knob("clip_grad_norm", float, 0.0, "clip the update's gradients to this global norm "
         "(0: no clipping)", ge=0),
    Knob("seed", int, 0, "seed for weights, data order and dropout", ge=0, le=SEED_MAX,
         graph=False),
    Knob("amp_level", str, "O0", "automatic mixed precision level",
         choices=("O0", "O1", "O2", "O3")),
    Knob("amp_dtype", str, "float16", "low-precision type used by AMP",
         choices=("float16", "bfloat16"), when={"amp_level": _AMP}),
    Knob("keep_batchnorm_fp32", bool, True, "keep BatchNorm in float32 under AMP",
         when={"amp_level": ("O2", "O3")}),  # O1 never casts normalisation
    Knob("loss_scale", str, "none", "loss scaling", choices=("none", "fixed", "dynamic")),
    Knob("loss_scale_value", float, 65536.0, "loss scale (initial scale when dynamic)", gt=0,
         when={"loss_scale": _SCALED}, graph=False),
    Knob("loss_scale_factor", int, 2, "dynamic scale is divided/multiplied by this", ge=2,
         when={"loss_scale": ("dynamic",)}),
    Knob("loss_scale_window", int, 1000, "clean updates before a dynamic scale grows", ge=1,
         when={"loss_scale": ("dynamic",)}),
    Knob("drop_overflow_update", bool, True, "skip an update whose gradients overflow",
         when={"loss_scale": ("fixed",)}),
    Knob("thor.frequency", int, 10, "THOR: recompute A, G and their inverses every N updates",
         ge=2, when=_THOR, graph=False),
    Knob("thor.split_indices", list, [], "THOR: layer indices closing each group (all-reduce "
         "groups in data-parallel runs); [] is one group", when=_THOR),
    Knob("thor.damping_init", float, 0.3, "THOR: initial damping", gt=0, when=_THOR, graph=False),
    Knob("thor.damping_decay", float, 0.5, "THOR: damping is multiplied by this every 10 epochs",
         gt=0, when=_THOR, graph=False),
    Knob("thor.lr_decay", float, 0.0, "THOR: exponent of the THOR paper's polynomial lr decay "
         "(0: lr_schedule applies)", ge=0, when=_THOR, graph=False),
    Knob("thor_impl", str, "auto", "THOR implementation: auto (MindSpore's on Ascend, else "
         "msexp's), mindspore, msexp", choices=("auto", "mindspore", "msexp"), when=_THOR),
)}

def graph_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """What of `params` shapes the compiled graphs: every param but those whose knob says
    `graph=False` (an experiment's own params always count), plus the learning-rate form.

    A constant lr is a scalar Parameter; a schedule is a Parameter of one value per update,
    so its length (epochs, with the batch size and the data) is part of the graphs.
    """
    kept = {k: v for k, v in params.items() if k not in KNOBS or KNOBS[k].graph}
    scheduled = (params.get("lr_schedule", "constant") != "constant"
                 or params.get("warmup_epochs", 0) > 0
                 or (params.get("optimizer") == "thor" and params.get("thor.lr_decay", 0) > 0))
    kept["lr_updates"] = f"{params.get('epochs')} epochs" if scheduled else "constant"
    return kept


RESOLVED = ("thor_impl",)  # a trial resolves these for its device: MLflow logs what ran

METRICS = (
    "train_loss", "train_loss_epoch", "eval_loss", "eval_accuracy", "samples_per_s", "step_ms",
    "compile_s", "peak_mem_mb", "train_mem_mb", "wall_s", "overflow_steps", "skipped_updates",
    "loss_scale", "epochs_to_target", "time_to_target_s", "thor_inverse_s",
)
"""Metric names, one vocabulary for trial events, Optuna objectives and MLflow."""

EPOCH_METRICS = ("eval_loss", "eval_accuracy", "train_loss", "train_loss_epoch")
"""Metrics reported once per epoch, so they can drive pruning."""


def value_text(value: Any) -> str:
    """A value as tables and run names show it: floats to 4 significant digits."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)
