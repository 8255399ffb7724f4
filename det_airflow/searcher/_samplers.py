"""What to try: the sampler that draws each new trial's hyperparameters.

Kept apart from *when to stop* (the search methods), as Ray Tune keeps search algorithms apart
from schedulers: any sampler works with random search and both ASHA searchers.

``searcher.sampler`` picks one:

- ``random`` (the default, Determined's behavior): independent draws from the search's
  ``random.Random(experiment_seed)``, so a seed always gives the same trials.
- ``tpe``, ``cmaes``, ``qmc``: a det-airflow extension. Each new trial is asked from an Optuna
  study with that sampler, told every validation result so far (see :mod:`._optuna`).
"""

from __future__ import annotations

import abc
import enum
import random
from typing import Any

from det_airflow.config._types import ExperimentConfig
from det_airflow.searcher._hparams import sample_hparams


class Outcome(enum.Enum):
    """How a trial ended, as far as a sampler's model cares."""

    COMPLETE = "complete"  # trained to the end: its last value is its result
    PRUNED = "pruned"  # stopped early by the search: its last value, at the length it got to
    FAILED = "failed"  # errored, invalid hyperparameters, or never reported a value


class HParamSampler(abc.ABC):
    """Draws hyperparameters and hears how trials went. Every hook but ``sample`` is optional."""

    #: Whether ``report`` and ``finish`` matter; the search skips converting metrics otherwise.
    observes = True

    @abc.abstractmethod
    def sample(self, request_id: int, rng: random.Random) -> dict[str, Any]:
        """The hyperparameters for the trial about to be created as ``request_id``."""

    def report(self, request_id: int, value: float, step: int) -> None:  # noqa: B027 - optional hook
        """A trial reported ``value`` (``searcher.metric``, not negated) after ``step`` units."""

    def finish(self, request_id: int, outcome: Outcome) -> None:  # noqa: B027 - optional hook
        """A trial is over; a second call for the same trial changes nothing."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:  # noqa: B027 - optional hook
        """Restores what :meth:`state_dict` returned (after a JSON round trip)."""


class RandomSampler(HParamSampler):
    """Independent draws from the search's own random generator (:func:`sample_hparams`)."""

    observes = False

    def __init__(self, config: ExperimentConfig) -> None:
        self._hparams = config.hyperparameters

    def sample(self, request_id: int, rng: random.Random) -> dict[str, Any]:
        return sample_hparams(self._hparams, rng)


def make_sampler(
    config: ExperimentConfig, *, optuna_storage: Any = None, study_name: str | None = None
) -> HParamSampler:
    """The sampler ``config.searcher.sampler`` names; Optuna is imported only when one is used."""
    if config.searcher.sampler == "random" or config.searcher.name in ("single", "grid"):
        return RandomSampler(config)
    from det_airflow.searcher._optuna import OptunaSampler

    return OptunaSampler(config, storage=optuna_storage, study_name=study_name)
