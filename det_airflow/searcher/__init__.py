"""Search methods: pure, event-driven objects that decide which trials an experiment runs.

No Airflow, no database, no HTTP: the master feeds a method events (``initial_trials``,
``trial_created``, ``validation_completed``, ``trial_exited``, ``trial_exited_early``), carries out
the :class:`Create`, :class:`Stop`, :class:`Pause`, :class:`Resume` and :class:`Shutdown` actions
it returns, answers trials' operation requests with ``operation_length``, and stores its
``state_dict()`` so that a restarted master carries on. Being pure, a method can be simulated
offline (:func:`simulate`, ``det preview-search``).

Methods: ``single``, ``random``, ``grid``, ``adaptive_asha`` and ``async_halving``. Samplers
(``searcher.sampler``): ``random`` (Determined's), or Optuna's ``tpe``, ``cmaes`` and ``qmc``.

Example:
    >>> method = make_search_method(config)
    >>> for action in method.initial_trials():
    ...     ...  # start a trial for each Create
    >>> state = json.dumps(method.state_dict())
    >>> method = load_search_method(config, json.loads(state))
"""

from det_airflow.searcher._actions import Action, Create, ExitedReason, Pause, Resume, Shutdown, Stop
from det_airflow.searcher._adaptive_asha import AdaptiveASHASearch
from det_airflow.searcher._asha import ASHASearch, AsyncHalvingSearch
from det_airflow.searcher._base import SearchMethod
from det_airflow.searcher._brackets import (
    Bracket,
    bracket_concurrency,
    bracket_trials,
    cumulative_rung_units,
    mode_rungs,
    plan_brackets,
    rung_count,
    rung_units,
    single_bracket,
)
from det_airflow.searcher._errors import SearcherError
from det_airflow.searcher._factory import (
    concurrent_slot_count,
    load_search_method,
    make_search_method,
    trial_slot_count,
)
from det_airflow.searcher._grid import GridSearch
from det_airflow.searcher._hparams import grid_points, sample_hparams
from det_airflow.searcher._random import RandomSearch
from det_airflow.searcher._samplers import HParamSampler, Outcome, RandomSampler
from det_airflow.searcher._simulate import SimulatedTrial, Simulation, simulate
from det_airflow.searcher._single import SingleSearch

__all__ = [
    "ASHASearch",
    "Action",
    "AdaptiveASHASearch",
    "AsyncHalvingSearch",
    "Bracket",
    "Create",
    "ExitedReason",
    "GridSearch",
    "HParamSampler",
    "Outcome",
    "Pause",
    "RandomSampler",
    "RandomSearch",
    "Resume",
    "SearchMethod",
    "SearcherError",
    "Shutdown",
    "SimulatedTrial",
    "Simulation",
    "SingleSearch",
    "Stop",
    "bracket_concurrency",
    "bracket_trials",
    "concurrent_slot_count",
    "cumulative_rung_units",
    "grid_points",
    "load_search_method",
    "make_search_method",
    "mode_rungs",
    "plan_brackets",
    "rung_count",
    "rung_units",
    "sample_hparams",
    "simulate",
    "single_bracket",
    "trial_slot_count",
]
