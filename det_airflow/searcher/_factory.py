"""Choosing the search method a config asks for, and rebuilding one from stored state."""

from __future__ import annotations

from typing import Any

from det_airflow.config._types import ExperimentConfig
from det_airflow.searcher._base import SearchMethod
from det_airflow.searcher._errors import SearcherError
from det_airflow.searcher._grid import GridSearch
from det_airflow.searcher._random import RandomSearch
from det_airflow.searcher._single import SingleSearch

# searcher.name -> the class that implements it. A new method (ASHA) adds itself here.
_METHODS: dict[str, type[SearchMethod]] = {cls.name: cls for cls in (SingleSearch, RandomSearch, GridSearch)}

# Accepted by the config but not implemented yet; they run at most max_trials trials.
_NOT_YET_AVAILABLE = frozenset({"adaptive_asha", "async_halving"})


def make_search_method(config: ExperimentConfig) -> SearchMethod:
    """Builds the search method for ``config.searcher``, ready for ``initial_trials()``.

    Raises:
        SearcherError: The searcher (or its sampler) is not available yet.

    Example:
        >>> method = make_search_method(config)
        >>> actions = method.initial_trials()
    """
    searcher = config.searcher
    if searcher.name in _NOT_YET_AVAILABLE:
        raise SearcherError(f"searcher {searcher.name!r} is not available yet; use single, random or grid")
    if searcher.sampler != "random" and searcher.name != "grid":
        raise SearcherError(f"searcher.sampler {searcher.sampler!r} is not available yet; use 'random'")
    return _METHODS[searcher.name](config)


def load_search_method(config: ExperimentConfig, state: dict[str, Any]) -> SearchMethod:
    """Rebuilds a search method from ``state_dict()``; it carries on as if it had never stopped.

    Raises:
        SearcherError: The state does not belong to this config's search method.
    """
    method = make_search_method(config)
    method.load_state_dict(state)
    return method


def trial_slot_count(config: ExperimentConfig) -> int:
    """The number of trial slots the experiment's DAG maps: the most trials the search runs.

    grid: the number of grid points; random and the ASHA searchers: ``max_trials``; single: 1.
    """
    if config.searcher.name in _NOT_YET_AVAILABLE:
        assert config.searcher.max_trials is not None, "the config loader requires max_trials for ASHA"
        return config.searcher.max_trials
    return _METHODS[config.searcher.name].trial_slots(config)
