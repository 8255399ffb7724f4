"""Single search: one trial."""

from __future__ import annotations

from det_airflow.config._types import ExperimentConfig
from det_airflow.searcher._random import RandomSearch


class SingleSearch(RandomSearch):
    """One trial with every hyperparameter sampled (constants as written).

    As in Determined, this is a random search of one trial: a trial with invalid
    hyperparameters is replaced by a freshly sampled one. Progress is 0 until it exits, then 1.
    """

    name = "single"

    @staticmethod
    def _max_trials(config: ExperimentConfig) -> int:
        return 1

    def _has_room(self) -> bool:
        return not self._open
