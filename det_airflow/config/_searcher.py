"""The ``searcher`` section (docs/semantics.md §1.2), in both its seed-era and 0.38 forms."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from det_airflow.config._fields import Fields, Problems, int_kind, is_int, is_numeric, item, show
from det_airflow.config._length import read_length
from det_airflow.config._limits import INT32_MAX, INT64_MAX, MAX_DIVISOR, MAX_RUNGS, MAX_TRIALS
from det_airflow.config._types import SearcherConfig

NAMES = ("single", "random", "grid", "adaptive_asha", "async_halving")
# Searchers Determined dropped; old configs name them, so say what replaced them.
REMOVED = {
    "custom": "write the search loop in your own code with a 'single' searcher, or use 'random', "
    "'grid' or 'adaptive_asha'",
    "adaptive": "use 'adaptive_asha' instead",
    "adaptive_simple": "use 'adaptive_asha' instead",
    "sync_halving": "use 'async_halving' or 'adaptive_asha' instead",
    "pbt": "use 'adaptive_asha' instead",
}
ASHA = ("adaptive_asha", "async_halving")
_NEEDS_MAX_TRIALS = ("random", *ASHA)
_SAMPLES = ("random", *ASHA)  # searchers that draw hyperparameters, hence take a sampler
_FIELDS = tuple(f.name for f in dataclasses.fields(SearcherConfig))
_DEFAULTS = SearcherConfig(name="single", metric="")
_PATH = "searcher"

# Fields worth showing for each searcher in the normalized config; others appear only when set.
_SHOWN = {
    "single": ("max_length",),
    "random": ("max_trials", "max_concurrent_trials", "max_length", "sampler"),
    "grid": ("max_concurrent_trials", "max_length"),
    "adaptive_asha": (
        *("max_trials", "max_concurrent_trials", "max_length", "time_metric", "max_time", "mode"),
        *("divisor", "max_rungs", "bracket_rungs", "stop_once", "sampler"),
    ),
    "async_halving": (
        *("max_trials", "max_concurrent_trials", "max_length", "time_metric", "max_time"),
        *("num_rungs", "divisor", "stop_once", "sampler"),
    ),
}


def read_searcher(value: Any, problems: Problems) -> SearcherConfig:
    if value is None:
        problems.add(
            _PATH, "missing required section; expected a mapping such as {name: single, metric: loss}"
        )
        return _DEFAULTS
    if not isinstance(value, Mapping):
        problems.add(_PATH, f"expected a mapping such as {{name: single, metric: loss}}, got {show(value)}")
        return _DEFAULTS
    f = Fields(value, _PATH, problems, known=_FIELDS)
    name = _read_name(f)
    d = _DEFAULTS
    max_length = None
    if f.given("max_length"):
        max_length = read_length(value["max_length"], f.at("max_length"), problems, bare_int=True)
    config = SearcherConfig(
        name=name,
        metric=f.string("metric", required=True, nonempty=True),
        smaller_is_better=f.boolean("smaller_is_better", d.smaller_is_better),
        max_trials=f.integer(
            "max_trials",
            low=1,
            cap=MAX_TRIALS,
            required=f"for the {name} searcher" if name in _NEEDS_MAX_TRIALS else False,
        ),
        max_concurrent_trials=f.integer(
            "max_concurrent_trials", d.max_concurrent_trials, low=0, cap=MAX_TRIALS
        ),
        max_length=max_length,
        time_metric=f.string("time_metric", nonempty=True),
        max_time=f.integer("max_time", low=1, cap=INT64_MAX),
        mode=f.choice("mode", ("aggressive", "standard", "conservative"), d.mode),
        divisor=f.number("divisor", d.divisor, above=1, cap=MAX_DIVISOR),
        max_rungs=f.integer("max_rungs", d.max_rungs, low=1, cap=MAX_RUNGS),
        bracket_rungs=_read_bracket_rungs(f),
        num_rungs=f.integer(
            "num_rungs",
            low=1,
            cap=MAX_RUNGS,
            required="for the async_halving searcher" if name == "async_halving" else False,
        ),
        stop_once=f.boolean("stop_once", d.stop_once),
        source_trial_id=f.integer("source_trial_id", low=1, cap=INT32_MAX),
        source_checkpoint_uuid=f.string("source_checkpoint_uuid", nonempty=True),
        sampler=_read_sampler(f, name),
    )
    _check_length(f, config)
    if f.given("source_trial_id") and f.given("source_checkpoint_uuid"):
        f.problems.add(
            f.at("source_checkpoint_uuid"),
            "give either 'source_trial_id' or 'source_checkpoint_uuid' to warm-start from, not both",
        )
    return config


def _read_name(f: Fields) -> Any:
    name = f.get("name")
    if isinstance(name, str) and name in REMOVED:
        f.problems.add(f.at("name"), f"the {name!r} searcher was removed from Determined; {REMOVED[name]}")
        return None
    return f.choice("name", NAMES, required=True)


def _read_bracket_rungs(f: Fields) -> tuple[int, ...]:
    value = f.get("bracket_rungs", [])
    if not isinstance(value, list):
        f.bad("bracket_rungs", "a list of integers >= 1")
        return ()
    for i, rungs in enumerate(value):
        if not (is_int(rungs) and 1 <= rungs <= MAX_RUNGS):
            expected = int_kind(1, MAX_RUNGS if is_numeric(rungs) and rungs >= 1 else None)
            f.problems.add(item(f.at("bracket_rungs"), i), f"expected {expected}, got {show(rungs)}")
    return tuple(value)


def _read_sampler(f: Fields, name: Any) -> Any:
    if f.given("sampler") and name in ("single", "grid"):
        f.problems.add(
            f.at("sampler"),
            f"the {name} searcher does not sample hyperparameters; 'sampler' applies to "
            + ", ".join(_SAMPLES),
        )
        return _DEFAULTS.sampler
    return f.choice("sampler", ("random", "tpe", "cmaes", "qmc"), _DEFAULTS.sampler)


def _check_length(f: Fields, config: SearcherConfig) -> None:
    """Lengths are ``max_length`` (seed era) or ``time_metric`` + ``max_time`` (0.38), never both."""
    has_metric, has_time = f.given("time_metric"), f.given("max_time")
    if has_metric and not has_time:
        f.missing("max_time", "an integer >= 1", "when 'time_metric' is set")
    if has_time and not has_metric:
        f.missing("time_metric", "a string", "when 'max_time' is set")
    if f.given("max_length") and (has_metric or has_time):
        f.problems.add(
            f.at("max_length"), "give either 'max_length' or 'time_metric' with 'max_time', not both"
        )
    if config.name not in ASHA:
        return
    if not (f.given("max_length") or has_metric or has_time):
        f.problems.add(
            _PATH,
            f"the {config.name} searcher needs a length: 'max_length' (e.g. {{batches: 937}}) "
            "or 'time_metric' with 'max_time'",
        )
    elif config.max_length is not None and config.max_length.value < 1:
        f.bad("max_length", f"a length >= 1 for the {config.name} searcher")


def searcher_to_dict(searcher: SearcherConfig) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": searcher.name,
        "metric": searcher.metric,
        "smaller_is_better": searcher.smaller_is_better,
    }
    shown = _SHOWN[searcher.name]
    for field in _FIELDS:
        if field in out:
            continue
        value = getattr(searcher, field)
        if field in shown or value != getattr(_DEFAULTS, field):
            out[field] = _plain(value)
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if hasattr(value, "to_dict"):
        return value.to_dict()
    return value
