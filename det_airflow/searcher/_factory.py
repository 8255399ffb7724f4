"""Choosing the search method a config asks for, and rebuilding one from stored state."""

from __future__ import annotations

from typing import Any

from det_airflow.config._types import ExperimentConfig
from det_airflow.searcher._adaptive_asha import AdaptiveASHASearch
from det_airflow.searcher._asha import AsyncHalvingSearch
from det_airflow.searcher._base import SearchMethod
from det_airflow.searcher._grid import GridSearch
from det_airflow.searcher._random import RandomSearch
from det_airflow.searcher._single import SingleSearch

# searcher.name -> the class that implements it.
_METHODS: dict[str, type[SearchMethod]] = {
    cls.name: cls for cls in (SingleSearch, RandomSearch, GridSearch, AdaptiveASHASearch, AsyncHalvingSearch)
}


def make_search_method(
    config: ExperimentConfig, *, optuna_storage: Any = None, study_name: str | None = None
) -> SearchMethod:
    """Builds the search method for ``config.searcher``, ready for ``initial_trials()``.

    Args:
        config: The experiment configuration.
        optuna_storage: With ``searcher.sampler`` ``tpe``, ``cmaes`` or ``qmc`` (a det-airflow
            extension): where the Optuna study lives, as an Optuna storage URL
            (``postgresql://...``, ``sqlite:///optuna.db``) or storage object, so that
            ``optuna-dashboard <url>`` can open it. None keeps the study in memory (simulations).
        study_name: The Optuna study's name; defaults to one derived from the config and seed. An
            existing study of that name is reused, so give each experiment its own.

    Raises:
        SearcherError: The config cannot be searched (e.g. an ASHA searcher without a length, or
            the ``cmaes`` sampler without the ``cmaes`` package).

    Example:
        >>> method = make_search_method(config)
        >>> actions = method.initial_trials()
    """
    return _METHODS[config.searcher.name](config, optuna_storage=optuna_storage, study_name=study_name)


def load_search_method(
    config: ExperimentConfig,
    state: dict[str, Any],
    *,
    optuna_storage: Any = None,
    study_name: str | None = None,
) -> SearchMethod:
    """Rebuilds a search method from ``state_dict()``; it carries on as if it had never stopped.

    With an Optuna sampler, pass the storage the method was made with: the method reattaches to
    its study there (the study's name is part of ``state``).

    Raises:
        SearcherError: The state does not belong to this config's search method, or the Optuna
            study it used is not in ``optuna_storage``.
    """
    method = make_search_method(config, optuna_storage=optuna_storage, study_name=study_name)
    method.load_state_dict(state)
    return method


def trial_slot_count(config: ExperimentConfig) -> int:
    """The number of trial slots the experiment's DAG maps: the most trials the search runs.

    grid: the number of grid points; random and the ASHA searchers: ``max_trials``; single: 1.
    """
    return _METHODS[config.searcher.name].trial_slots(config)


def concurrent_slot_count(config: ExperimentConfig, pool_capacity: int | None = None) -> int:
    """The trial slots an experiment's DAG maps when each slot runs trial after trial: as many as can
    run at once.

    At most the trials the search runs at once (``max_concurrent_trials``; ASHA: its brackets'), and
    the trials that ``pool_capacity`` Airflow pool slots hold at once (None, 0 or -1: no bound).
    """
    count = _METHODS[config.searcher.name].concurrent_trials(config)
    if pool_capacity is not None and pool_capacity > 0:
        count = min(count, max(1, pool_capacity // max(1, config.resources.slots_per_trial)))
    return count
