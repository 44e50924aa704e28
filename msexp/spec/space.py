"""The search space: swept params, fixed values, conditions, grid points and samples."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from msexp.errors import SpecError
from msexp.knobs import Knob, condition_holds, graph_params
from msexp.secrets.redaction import redact_value

if TYPE_CHECKING:
    import optuna

@dataclass(frozen=True)
class Param:
    """One swept knob: a list of values, or a range for samplers."""

    name: str
    written: Any
    values: tuple[Any, ...] | None = None
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    is_int: bool = False
    when: Mapping[str, tuple[Any, ...]] = None  # type: ignore[assignment]

    def suggest(self, trial: optuna.Trial) -> Any:
        """Ask an Optuna trial for this param's value."""
        if self.values is not None:
            return self.value_of(trial.suggest_categorical(self.name, self.stored_values()))
        if self.is_int:
            return trial.suggest_int(self.name, int(self.low), int(self.high), log=self.log,
                                     step=int(self.step or 1))
        return trial.suggest_float(self.name, self.low, self.high, log=self.log, step=self.step)

    def describe(self) -> str:
        """Its values (`1, 2, 4`) or range (`0.001 .. 0.1 log`), as plans and MLflow show it."""
        if self.values is not None:
            return ", ".join(_encode(v) if isinstance(v, (list, dict)) else str(v)
                             for v in redact_value(self.name, list(self.values)))
        return (f"{self.low} .. {self.high}" + (" log" if self.log else "")
                + (f" step {self.step}" if self.step else ""))

    def optuna_value(self, value: Any) -> Any:
        """The value as Optuna stores it (see `stored_values`)."""
        shown = [repr(v) for v in self.values or ()]
        return self.stored_values()[shown.index(repr(value))] if repr(value) in shown \
            else _encode(value)

    def stored_values(self) -> list[Any]:
        """The values as Optuna stores them: lists as JSON text, a secret as a stand-in
        (`redact_value`, numbered where stand-ins would be alike), never in clear."""
        encoded = [_encode(v) for v in self.values or ()]
        shown = [redact_value(self.name, v) for v in encoded]
        if len({repr(v) for v in shown}) < len(shown):
            shown = [v if v == e else f"{v} #{i}" for i, (v, e) in enumerate(zip(shown, encoded))]
        return shown

    def value_of(self, stored: Any) -> Any:
        """The value a value stored in Optuna stands for."""
        for value, shown in zip(self.values or (), self.stored_values()):
            if type(shown) is type(stored) and shown == stored:
                return value
        return _decode(stored)

    def candidates(self) -> list[Any]:
        """Every value the param can take, where that is a short finite list."""
        if self.values is not None:
            return list(self.values)
        if self.is_int and (self.high - self.low) / (self.step or 1) < 10_000:
            return list(range(int(self.low), int(self.high) + 1, int(self.step or 1)))
        return []


def derived(values: Mapping[str, Any]) -> dict[str, int]:
    """Values computed from a trial's knobs: the per-device micro-batch and the effective batch
    (none for a command whose sweep sets no batch_size)."""
    if "batch_size" not in values:
        return {}
    devices, micro_size = values.get("devices", 1), values.get("micro_size", 1)
    return {"micro_batch": values["batch_size"] // (micro_size * devices),
            "effective_batch": values["batch_size"]}


def _encode(value: Any) -> Any:
    return json.dumps(value) if isinstance(value, (list, dict)) else value


def _decode(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) and value[:1] in "[{" else value


class Space:
    """Swept params in dependency order, fixed values, and the knobs they refer to."""

    def __init__(self, source: str, knobs: Mapping[str, Knob], fixed: Mapping[str, Any],
                 params: list[Param]):
        self.source, self.knobs, self.fixed, self.params = source, knobs, dict(fixed), params

    def resolve(self, assigned: Mapping[str, Any]) -> dict[str, Any]:
        """The complete values of a trial: defaults, fixed, then assigned, in knob order.

        Knobs whose condition does not hold are left out, so two trials that differ
        only in a knob that does not apply resolve to the same values. A swept param
        whose `when` does not hold falls back to the knob's default.
        """
        values = {name: knob.default for name, knob in self.knobs.items()}
        values.update(self.fixed)
        values.update(assigned)
        for param in self.params:
            if not condition_holds(param.when, values):
                values[param.name] = self.knobs[param.name].default
        return {name: value for name, value in values.items()
                if value is not None and self.knobs[name].applies(values)}

    def _applies(self, name: str, values: Mapping[str, Any]) -> bool:
        if not self.knobs[name].applies(values):
            return False
        param = next((p for p in self.params if p.name == name), None)
        return param is None or condition_holds(param.when, values)

    def active(self, param: Param, assigned: Mapping[str, Any]) -> bool:
        """Whether `param` applies, given the params assigned before it."""
        values = {name: knob.default for name, knob in self.knobs.items()}
        values.update(self.fixed)
        values.update(assigned)
        return self._applies(param.name, values)

    def grid(self) -> list[dict[str, Any]]:
        """Every grid point, each listing only the params that apply to it."""
        return list(self.iter_grid())

    def iter_grid(self) -> Iterator[dict[str, Any]]:
        """The grid points in `grid` order, one at a time: take the first n with islice."""
        return self._extend(0, {})

    def queue_order(self, n: int) -> list[tuple[int, dict[str, Any]]]:
        """The first `n` grid points as the study queues them, as (grid index, point): points
        that share compiled graphs (`graph_params`) next to each other, groups in order of
        first appearance, so a worker's trials run warm. With one worker and no reruns,
        trial k runs the k-th."""
        groups: dict[str, int] = {}
        keyed = []
        for i, point in enumerate(itertools.islice(self.iter_grid(), n)):
            key = json.dumps(graph_params(self.resolve(point)), sort_keys=True, default=str)
            keyed.append((groups.setdefault(key, len(groups)), i, point))
        return [(i, point) for _, i, point in sorted(keyed, key=lambda entry: entry[:2])]

    def _extend(self, i: int, point: dict[str, Any]) -> Iterator[dict[str, Any]]:
        if i == len(self.params):
            yield point
            return
        param = self.params[i]
        values = param.values if self.active(param, point) else (None,)
        for value in values:
            yield from self._extend(i + 1, point if value is None
                                    else {**point, param.name: value})

    def grid_size(self) -> int:
        """How many points the grid has, counted without listing them.

        The count from param i on depends only on the values of the knobs that the
        conditions of params i.. refer to, so it is computed once per such values.
        """
        refers: list[tuple[str, ...]] = [()] * (len(self.params) + 1)
        for i in range(len(self.params) - 1, -1, -1):
            param = self.params[i]
            names = {*refers[i + 1], *param.when, *self.knobs[param.name].when}
            refers[i] = tuple(sorted(names))
        counted: dict[tuple[int, str], int] = {}

        def count(i: int, point: dict[str, Any]) -> int:
            if i == len(self.params):
                return 1
            key = (i, repr([point.get(name) for name in refers[i]]))
            if key not in counted:
                param = self.params[i]
                counted[key] = (sum(count(i + 1, {**point, param.name: v}) for v in param.values)
                                if self.active(param, point) else count(i + 1, point))
            return counted[key]

        return count(0, {})

    def assigned(self, stored: Mapping[str, Any]) -> dict[str, Any]:
        """The values a trial's params stored in Optuna stand for."""
        by_name = {p.name: p for p in self.params}
        return {k: by_name[k].value_of(v) if k in by_name else v for k, v in stored.items()}

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        """Ask `trial` for every param that applies (define-by-run)."""
        assigned: dict[str, Any] = {}
        for param in self.params:
            if self.active(param, assigned):
                assigned[param.name] = param.suggest(trial)
        return assigned

    def check_trials(self, is_grid: bool, limit: int | None = None) -> None:
        """Reject a batch_size that micro_size (times devices) does not divide, in any trial
        (of a grid: in its first `limit` points, the ones that run).

        A batch_size range is checked as a whole: every value it can sample must divide.
        """
        batch = next((p for p in self.params if p.name == "batch_size"), None)
        if batch is not None and batch.values is None:
            self._check_batch_range(batch)
            return
        combos = (itertools.islice(self.iter_grid(), limit) if is_grid
                  else self.combos({"batch_size", "micro_size", "devices"}))
        for assigned in combos:
            values = {"micro_size": 1, **self.resolve(assigned)}
            if "batch_size" not in values:
                continue  # a command that leaves its batch to itself
            batch, micro = values["batch_size"], values["micro_size"]
            if batch % micro:
                key = "micro_size" if "micro_size" in assigned or "batch_size" not in assigned \
                    else "batch_size"
                section = "params" if key in assigned else "fixed"
                raise SpecError(self.source, f"{section}.{key}",
                                f"micro_size must divide batch_size (batch_size={batch}, "
                                f"micro_size={micro})", assigned.get(key, values[key]))
            devices = values.get("devices", 1)
            if batch % (micro * devices):
                key = next((k for k in ("devices", "micro_size", "batch_size") if k in assigned),
                           "devices")
                section = "params" if key in assigned else "fixed"
                raise SpecError(self.source, f"{section}.{key}",
                                f"micro_size * devices must divide batch_size (batch_size={batch}, "
                                f"micro_size={micro}, devices={devices})",
                                assigned.get(key, values[key]))

    def _check_batch_range(self, batch: Param) -> None:
        """Every value low + k * step of the range is a multiple of m = micro_size * devices
        exactly when low is one and, if the range has a second value, step is one too."""
        step = 1 if batch.log else int(batch.step or 1)
        for assigned in self.combos({"micro_size", "devices"}):
            values = {"micro_size": 1, "devices": 1, **self.resolve(assigned)}
            micro, devices = values["micro_size"], values["devices"]
            m = micro * devices
            if batch.low % m == 0 and (batch.high < batch.low + step or step % m == 0):
                continue
            every = math.lcm(*self._values("micro_size")) * math.lcm(*self._values("devices"))
            how = (f"use a step that is a multiple of {every} instead of log" if batch.log
                   else f"make low and step multiples of {every}")
            raise SpecError(self.source, "params.batch_size",
                            f"every batch_size of the range must be a multiple of micro_size * "
                            f"devices = {m} (micro_size={micro}, devices={devices}); {how}",
                            batch.written)

    def _values(self, name: str) -> set[Any]:
        """Every value knob `name` takes in some trial (1 where it does not exist)."""
        return {self.resolve(c).get(name, 1) for c in self.combos({name})}

    def combos(self, names: set[str]) -> Iterator[dict[str, Any]]:
        """Every combination of the finite values of the swept params in `names`, one at a
        time (a rule that fails stops at the first)."""
        swept = [p for p in self.params if p.name in names and p.candidates()]
        return (dict(zip([p.name for p in swept], combo))
                for combo in itertools.product(*(p.candidates() for p in swept)))
