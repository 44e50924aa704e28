"""`Model`'s own arguments to `hooks.model`, as the knob values msexp's train step applies.

`amp_level`, `keep_batchnorm_fp32` and `loss_scale_manager` each give knobs (a manager
gives `loss_scale` and its value, factor, window or drop rule). Which value a knob takes:

1. the sweep's, where the trial's params (`hooks.params()`, what the sweep file sets) name
   it; an argument that gives that knob another value is refused in one line naming both;
2. else the argument's, where the script passes one (as `Model` would apply it, so
   `amp_level="O2"` also brings MindSpore's O2 defaults: BatchNorm in float32 and dynamic
   loss scaling from 2**24, where neither the sweep nor another argument names them; loss
   scaling is one decision: a sweep that names any of its knobs (`loss_scale: fixed`)
   keeps all of O2's out, so its fixed scale is not O2's 2**24);
3. else the script's params (`settings`): its config's value, or msexp's default.

Outside msexp the sweep names nothing, so the script's arguments win over its config.
Boost (`boost_level`, `acc_level` "O1"/"O2") rewrites the train step that msexp's replaces,
so it is refused; at "O0" it does nothing, as in `Model`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mindspore.train import DynamicLossScaleManager, FixedLossScaleManager, LossScaleManager

from msexp.hooks.accumulate import Params, settings
from msexp.hooks.channel import params as trial_params
from msexp.knobs import KNOBS

_CALL = "msexp.hooks.model"
# MindSpore's own choices for an amp_level the script gives, where nothing names them
_LEVEL_DEFAULTS = {"O2": {"keep_batchnorm_fp32": True}, "O3": {"keep_batchnorm_fp32": False}}
# one decision: where the sweep or an argument names any of them, O2's scaling stays out
_LOSS_SCALING = ("loss_scale", "loss_scale_value", "loss_scale_factor", "loss_scale_window",
                 "drop_overflow_update")


def named(values: Params) -> dict[str, Any]:
    """The knobs `values` (a dict, a Namespace or a config object) names with a value that
    keeps msexp's rule for it, as `settings` reads them."""
    given = values if isinstance(values, Mapping) else vars(values)
    return {name: given[name] for name, knob in KNOBS.items()
            if name in given and knob.check(given[name]) is None}


def knob_values(params: Params, amp_level: str | None, keep_batchnorm_fp32: bool | None,
                loss_scale_manager: LossScaleManager | None) -> dict[str, Any]:
    """Every knob's value for msexp's train step, from the sweep, `Model`'s arguments
    (None: not given) and the script's params, in that order (see the module's text).

    Raises:
        ValueError: an argument gives a knob the sweep sets another value, or a value
            msexp's knob does not take.
    """
    swept = named(trial_params())
    given = _arguments(amp_level, keep_batchnorm_fp32, loss_scale_manager)
    values = settings(params)
    for knob, (argument, value) in given.items():
        if knob in swept and swept[knob] != value:
            raise ValueError(f"{_CALL}: {argument}= gives {knob} {value}, but the sweep sets "
                             f"{knob} to {swept[knob]}: drop {argument}= from hooks.model "
                             f"(the sweep then decides {knob}) or {knob} from the sweep file")
        values[knob] = value
    if "amp_level" in given and "amp_level" not in swept:
        decided = {*swept, *given}
        for knob, value in _implied(given["amp_level"][1]).items():
            if not decided & set(_group(knob)):
                values[knob] = value
    return values


def refuse_boost(boost_level: str, acc_level: str | None) -> None:
    """Boost "O0" does nothing; any other level rewrites `Model`'s own train step.

    Raises:
        ValueError: a level other than "O0".
    """
    for argument, level in (("boost_level", boost_level), ("acc_level", acc_level)):
        if level not in (None, "O0"):
            raise ValueError(f"{_CALL}: {argument}={level!r} rewrites Model's train step, "
                             "which msexp's (micro_size, amp_level, loss_scale) replaces: "
                             f"pass {argument}='O0' or leave it out")


def _arguments(amp_level: str | None, keep_batchnorm_fp32: bool | None,
               loss_scale_manager: LossScaleManager | None) -> dict[str, tuple[str, Any]]:
    """knob -> (the argument that gives it, its value), for the arguments given."""
    given: dict[str, tuple[str, Any]] = {}
    if amp_level is not None:
        given["amp_level"] = ("amp_level", amp_level)
    if keep_batchnorm_fp32 is not None:
        given["keep_batchnorm_fp32"] = ("keep_batchnorm_fp32", keep_batchnorm_fp32)
    if loss_scale_manager is not None:
        given.update((knob, ("loss_scale_manager", value))
                     for knob, value in _manager_knobs(loss_scale_manager).items())
    for knob, (argument, value) in given.items():
        rule = KNOBS[knob].check(value)
        if rule:
            raise ValueError(f"{_CALL}: {argument}= gives {knob} {value!r}, which msexp's "
                             f"knob does not take: {knob} {rule}")
    return given


def _manager_knobs(manager: LossScaleManager) -> dict[str, Any]:
    """The loss-scale knobs that apply `manager` as `Model` would."""
    if isinstance(manager, FixedLossScaleManager):
        return {"loss_scale": "fixed", "loss_scale_value": float(manager.get_loss_scale()),
                "drop_overflow_update": manager.get_drop_overflow_update()}
    if isinstance(manager, DynamicLossScaleManager):
        return {"loss_scale": "dynamic", "loss_scale_value": float(manager.get_loss_scale()),
                "loss_scale_factor": manager.scale_factor,
                "loss_scale_window": manager.scale_window}
    raise ValueError(f"{_CALL}: loss_scale_manager={type(manager).__name__}: msexp's train "
                     "step applies a FixedLossScaleManager or a DynamicLossScaleManager")


def _group(knob: str) -> tuple[str, ...]:
    """The knobs that decide together with `knob`: loss scaling's five, or itself."""
    return _LOSS_SCALING if knob in _LOSS_SCALING else (knob,)


def _implied(amp_level: str) -> dict[str, Any]:
    """What `Model(amp_level=...)` brings beyond the cast: O2's dynamic loss scaling and
    each level's BatchNorm precision (`mindspore.amp`'s defaults)."""
    implied = dict(_LEVEL_DEFAULTS.get(amp_level, {}))
    if amp_level == "O2":
        implied.update(_manager_knobs(DynamicLossScaleManager()))
    return implied
