"""Search methods: pure, event-driven objects that decide which trials an experiment runs.

No Airflow, no database, no HTTP: the master feeds a method events (``initial_trials``,
``trial_created``, ``validation_completed``, ``trial_exited``, ``trial_exited_early``), carries out
the :class:`Create`, :class:`Stop` and :class:`Shutdown` actions it returns, and stores its
``state_dict()`` so that a restarted master carries on.

Example:
    >>> method = make_search_method(config)
    >>> for action in method.initial_trials():
    ...     ...  # start a trial for each Create
    >>> state = json.dumps(method.state_dict())
    >>> method = load_search_method(config, json.loads(state))
"""

from det_airflow.searcher._actions import Action, Create, ExitedReason, Shutdown, Stop
from det_airflow.searcher._base import SearchMethod
from det_airflow.searcher._errors import SearcherError
from det_airflow.searcher._factory import load_search_method, make_search_method, trial_slot_count
from det_airflow.searcher._grid import GridSearch
from det_airflow.searcher._hparams import grid_points, sample_hparams
from det_airflow.searcher._random import RandomSearch
from det_airflow.searcher._single import SingleSearch

__all__ = [
    "Action",
    "Create",
    "ExitedReason",
    "GridSearch",
    "RandomSearch",
    "SearchMethod",
    "SearcherError",
    "Shutdown",
    "SingleSearch",
    "Stop",
    "grid_points",
    "load_search_method",
    "make_search_method",
    "sample_hparams",
    "trial_slot_count",
]
