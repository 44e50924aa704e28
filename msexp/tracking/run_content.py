"""What a trial's MLflow run holds: its params (redacted), metrics (final, per epoch and per
update), tags (status, error, resume, warm, batch statistics) and its dataset, in the
batches MLflow takes."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from msexp.execution.result import TrialResult
from msexp.keys import RunTag
from msexp.secrets.redaction import redact, redact_value

if TYPE_CHECKING:
    pass

_log = logging.getLogger("msexp")

_CHUNK = 1000  # MLflow accepts at most 1000 entries (metrics and params) per log_batch call
_PARAMS = 100  # of which at most 100 params


def in_batches(params: list, metrics: list, tags: list) -> Iterator[tuple[list, list, list]]:
    """(params, metrics, tags) for as few `log_batch` calls as MLflow's limits allow (each
    call one store transaction): at most 100 params, 100 tags and 1000 entries in all per
    call."""
    while params or metrics or tags:
        first, params = params[:_PARAMS], params[_PARAMS:]
        marks, tags = tags[:_PARAMS], tags[_PARAMS:]
        room = _CHUNK - len(first) - len(marks)
        yield first, metrics[:room], marks
        metrics = metrics[room:]


def run_params(values: Mapping[str, Any]) -> list:
    from mlflow.entities import Param  # lazy: as above

    return [Param(k, redact(param_text(redact_value(k, v)))) for k, v in values.items()]


def run_tags(result: TrialResult, extra: Mapping[str, str]) -> list:
    """The tags of how a trial ended (status, error, resume, warm, batch statistics) and
    `extra`."""
    from mlflow.entities import RunTag as Tag  # lazy: as above

    tags = {RunTag.STATUS: result.status.value, **extra}
    if result.error:
        tags[RunTag.ERROR] = result.error[:5000]
    if result.resumed_from:
        tags[RunTag.RESUMED_FROM] = str(result.resumed_from)
    if result.pid:  # it started
        tags[RunTag.WARM] = str(result.warm).lower()
    stats = result.batch_statistics
    if stats:
        tags[RunTag.BATCH_STAT_LAYERS] = str(stats.layers)
        tags[RunTag.DROPOUT_LAYERS] = str(stats.dropout + stats.seeded)
        tags[RunTag.SEEDED_DROPOUT] = str(stats.seeded)
        if not stats.exact:
            tags[RunTag.BATCH_STATISTICS] = stats.line()
    return [Tag(k, v) for k, v in redacted_tags(tags).items()]


def dataset_input(description: str) -> Any:
    """The trial's data as an MLflow dataset input, so the runs table's Dataset column
    names it: the description up to its parenthesis (e.g. "sklearn digits"), the whole
    description as its source, and a digest that tells different data apart."""
    from mlflow.data.code_dataset_source import CodeDatasetSource  # lazy: as above
    from mlflow.data.meta_dataset import MetaDataset
    from mlflow.entities import Dataset, DatasetInput, InputTag
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

    name = description.split(" (", 1)[0]
    # mlflow's MetaDataset leaves Dataset.profile abstract, yet Dataset is no ABC: it is made
    dataset = MetaDataset(  # type: ignore[abstract]
        CodeDatasetSource({"description": description}), name=name)
    return DatasetInput(Dataset(**dataset.to_dict()),
                        [InputTag(MLFLOW_DATASET_CONTEXT, "training")])


def redacted_tags(tags: Mapping[str, str]) -> dict[str, str]:
    return {k: redact(v) for k, v in tags.items()}


def param_text(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (list, dict)) else str(value)


def run_metrics(result: TrialResult, started: float) -> list:
    """Per-update series, per-epoch values and final values, all on the update-step axis,
    stamped by the trial's end (the same values each time: a store keeps one of each).
    A step holds one point of a name: a series' last point stands for its final value (the
    run's `train_loss` is the last update's, not the epoch's mean)."""
    from mlflow.entities import Metric  # lazy: as above

    metrics: list[Metric] = []
    start_ms = int((started + result.wall_s) * 1000) - len(result.epochs) - 2
    step = 0
    logged_last: dict[str, float] = {}
    last_series: dict[str, list[float]] = {}
    for i, epoch in enumerate(result.epochs):
        ts, series = start_ms + i, epoch.series
        first = epoch.step - len(series.get("train_loss", [])) + 1
        for name, values in series.items():
            metrics += [Metric(name, float(v), ts, first + j) for j, v in enumerate(values)
                        if finite(v)]
        step = epoch.step
        logged_last = {k: v for k, v in epoch.metrics.items() if k not in series}
        logged_last["epoch"] = epoch.epoch
        metrics += [Metric(k, float(v), ts, step) for k, v in logged_last.items() if finite(v)]
        last_series = series
    final = result.final_metrics()
    end_ms = start_ms + len(result.epochs) + 1
    metrics += [Metric(k, float(v), end_ms, step) for k, v in final.items()
                if finite(v) and logged_last.get(k) != v and k not in last_series]
    return metrics


def finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)
