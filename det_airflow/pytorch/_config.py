"""The Trainer's defaults, read from the experiment config (docs/semantics.md §1).

``searcher.max_length`` (seed era: the searcher's operations say how far to train),
``searcher.time_metric`` + ``max_time`` (0.38), ``min_validation_period``, ``min_checkpoint_period``,
``scheduling_unit`` (the reporting period), ``records_per_epoch``, ``perform_initial_validation``,
``checkpoint_policy``, and the searcher's metric.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from det_airflow.config import Length, length_in_batches
from det_airflow.errors import DetError
from det_airflow.pytorch._period import Batch, Epoch, TrainUnit

CHECKPOINT_POLICIES = ("best", "all", "none")
DEFAULT_SCHEDULING_UNIT = 100
_UNITS = ("batches", "records", "epochs")


@dataclass(frozen=True)
class ConfigDefaults:
    """What the experiment config says about training; None where it says nothing."""

    searcher_length_unit: str | None  # the unit of searcher.max_length: operations come in it
    max_time: TrainUnit | None  # 0.38: max_time in a time_metric the Trainer counts
    validation_period: TrainUnit | None
    checkpoint_period: TrainUnit | None
    reporting_period: TrainUnit
    checkpoint_policy: str
    step_zero_validation: bool
    metric: str | None
    smaller_is_better: bool
    global_batch_size: int | None
    records_per_epoch: int

    def unit_length(self, unit: str, value: int, *, where: str) -> TrainUnit:
        """A length in batches, records or epochs as a Batch or an Epoch.

        Records become batches by ``global_batch_size``; epochs too when ``records_per_epoch`` is
        set, else they stay epochs of the training data loader.
        """
        if unit == "epochs" and self.records_per_epoch <= 0:
            return Epoch(value)
        if unit not in _UNITS:
            raise DetError(f"{where}: unknown length unit {unit!r}; expected one of {', '.join(_UNITS)}")
        batches = length_in_batches(
            Length(unit, value),  # type: ignore[arg-type]
            global_batch_size=self.global_batch_size,
            records_per_epoch=self.records_per_epoch,
        )
        return Batch(batches)


def read_defaults(config: Mapping[str, Any], hparams: Mapping[str, Any]) -> ConfigDefaults:
    section = config.get("searcher")
    searcher: Mapping[str, Any] = section if isinstance(section, Mapping) else {}
    gbs = hparams.get("global_batch_size")
    records_per_epoch = config.get("records_per_epoch") or 0
    base = ConfigDefaults(
        searcher_length_unit=None,
        max_time=None,
        validation_period=None,
        checkpoint_period=None,
        reporting_period=Batch(_positive_int(config.get("scheduling_unit"), DEFAULT_SCHEDULING_UNIT)),
        checkpoint_policy=_policy(config.get("checkpoint_policy")),
        step_zero_validation=bool(config.get("perform_initial_validation", False)),
        metric=str(searcher["metric"]) if searcher.get("metric") else None,
        smaller_is_better=bool(searcher.get("smaller_is_better", True)),
        global_batch_size=gbs if isinstance(gbs, int) and not isinstance(gbs, bool) else None,
        records_per_epoch=int(records_per_epoch),
    )
    max_length = _length(searcher.get("max_length"), bare_int=True)
    searcher_unit = max_length[0] if max_length is not None else None
    max_time = None
    if searcher.get("max_time") is not None and searcher.get("time_metric") in ("batches", "epochs"):
        max_time = base.unit_length(str(searcher["time_metric"]), int(searcher["max_time"]), where="max_time")
    return dataclasses.replace(
        base,
        searcher_length_unit=searcher_unit,
        max_time=max_time,
        validation_period=_period(base, config.get("min_validation_period"), "min_validation_period"),
        checkpoint_period=_period(base, config.get("min_checkpoint_period"), "min_checkpoint_period"),
    )


def _length(value: Any, *, bare_int: bool = False) -> tuple[str, int] | None:
    """``(unit, value)`` of a Length as the config holds it; None when absent."""
    if bare_int and isinstance(value, int) and not isinstance(value, bool):
        return "batches", value
    if not isinstance(value, Mapping):
        return None
    if "unit" in value and "value" in value:
        return str(value["unit"]), int(value["value"])
    for unit in _UNITS:
        if unit in value:
            return unit, int(value[unit])
    return None


def _period(defaults: ConfigDefaults, value: Any, where: str) -> TrainUnit | None:
    length = _length(value)
    if length is None or length[1] <= 0:  # {batches: 0}, the default, means "no minimum"
        return None
    unit = defaults.unit_length(*length, where=where)
    return unit if unit.value > 0 else None


def _positive_int(value: Any, default: int) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return default


def _policy(value: Any) -> str:
    if value is None:
        return "best"
    if value not in CHECKPOINT_POLICIES:
        raise DetError(f"checkpoint_policy: expected one of best, all, none, got {value!r}")
    return str(value)
