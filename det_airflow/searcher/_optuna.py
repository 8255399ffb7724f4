"""Optuna samplers (TPE, CMA-ES, QMC) behind :class:`HParamSampler`: a det-airflow extension.

Determined samples hyperparameters at random. With ``searcher.sampler: tpe | cmaes | qmc`` each new
trial is asked from an Optuna study instead (ask-and-tell), and the study hears how trials went:

- every validation is ``trial.report(value, step=units)`` (the raw ``searcher.metric``; the
  study's direction follows ``smaller_is_better``),
- a trial stopped early by ASHA is told ``PRUNED`` (Optuna keeps its last reported value, and TPE
  ranks pruned trials by how far they got),
- a trial that reached the top rung, or ended normally, is told ``COMPLETE`` with its last value,
- an errored trial, one with invalid hyperparameters, or one that never reported, is ``FAIL``.

Hyperparameters map to Optuna distributions: ``int`` → ``IntDistribution``, ``double`` →
``FloatDistribution``, ``log`` → ``FloatDistribution(base**minval, base**maxval, log=True)``,
``categorical`` → ``CategoricalDistribution``; nested groups are flattened to dotted names
(``optimizer.lr``) and rebuilt into nested dicts; constants never reach Optuna.

The study lives in ``storage`` (an Optuna storage URL or object; in memory by default), so a
database-backed study can be opened with ``optuna-dashboard <storage-url>``. Each ask builds a fresh
sampler seeded from the search's seed and the ask's index, so the proposals depend only on the
study's contents and the stored searcher state: a search reloaded from its state with the same
storage goes on exactly as it would have.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import random
import warnings
from dataclasses import dataclass
from typing import Any, Literal

from det_airflow.config._types import (
    CategoricalHP,
    ConstHP,
    DoubleHP,
    ExperimentConfig,
    HParamGroup,
    IntHP,
    LogHP,
)
from det_airflow.searcher._errors import SearcherError
from det_airflow.searcher._samplers import HParamSampler, Outcome

_PRIMITIVE = (type(None), bool, int, float, str)


@dataclass(frozen=True)
class _Leaf:
    """One sampled hyperparameter: where it sits in the nested dict, and how Optuna sees it."""

    path: tuple[str, ...]
    distribution: Any  # optuna.distributions.BaseDistribution
    values: tuple[Any, ...] | None = None  # categorical values when Optuna sees stand-ins

    @property
    def name(self) -> str:
        return ".".join(self.path)

    def decode(self, value: Any) -> Any:
        if self.values is None:
            return value
        return copy.deepcopy(self.values[self.distribution.choices.index(value)])


def search_space(group: HParamGroup) -> dict[str, Any]:
    """The Optuna distributions for every sampled hyperparameter, by dotted name.

    Example:
        >>> search_space({"lr": LogHP(-4, -1), "opt": {"m": DoubleHP(0.8, 0.99)}})
        {'lr': FloatDistribution(high=0.1, log=True, low=0.0001, step=None),
         'opt.m': FloatDistribution(high=0.99, log=False, low=0.8, step=None)}
    """
    return {leaf.name: leaf.distribution for leaf in _leaves(group, ())}


def _leaves(group: HParamGroup, prefix: tuple[str, ...]) -> list[_Leaf]:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    leaves: list[_Leaf] = []
    for name, hp in group.items():
        path = (*prefix, name)
        match hp:
            case dict():
                leaves += _leaves(hp, path)
            case ConstHP():
                pass
            case IntHP():
                leaves.append(_Leaf(path, IntDistribution(hp.minval, hp.maxval)))
            case DoubleHP():
                leaves.append(_Leaf(path, FloatDistribution(hp.minval, hp.maxval)))
            case LogHP():
                low, high = hp.base**hp.minval, hp.base**hp.maxval
                leaves.append(_Leaf(path, FloatDistribution(low, high, log=True)))
            case CategoricalHP(vals=vals):
                choices = _choices(vals)
                stand_ins = None if choices == vals else vals
                leaves.append(_Leaf(path, CategoricalDistribution(choices), stand_ins))
    return leaves


def _choices(vals: tuple[Any, ...]) -> tuple[Any, ...]:
    """Optuna takes None, bool, int, float and str choices; other values go by their JSON text."""
    # Optuna finds a choice by ==, so 1, True and 1.0 would be one choice.
    if all(isinstance(v, _PRIMITIVE) for v in vals) and len(set(vals)) == len(vals):
        return vals
    texts = tuple(json.dumps(v, sort_keys=True, default=repr) for v in vals)
    if len(set(texts)) == len(texts):
        return texts
    return tuple(f"{i}: {text}" for i, text in enumerate(texts))


def _rebuild(group: HParamGroup, params: dict[str, Any], leaves: dict[str, _Leaf], prefix: str = "") -> dict:
    out: dict[str, Any] = {}
    for name, hp in group.items():
        dotted = f"{prefix}{name}"
        if isinstance(hp, dict):
            out[name] = _rebuild(hp, params, leaves, f"{dotted}.")
        elif isinstance(hp, ConstHP):
            out[name] = copy.deepcopy(hp.val)
        else:
            out[name] = leaves[dotted].decode(params[dotted])
    return out


def default_study_name(config: ExperimentConfig) -> str:
    """A name that is the same for the same config and seed: ``det-<searcher>-<sampler>-<digest>``."""
    from det_airflow.config import config_to_dict

    data = config_to_dict(config)
    key = json.dumps(
        [data["searcher"], data["hyperparameters"], config.experiment_seed], sort_keys=True, default=repr
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return f"det-{config.searcher.name}-{config.searcher.sampler}-{digest}"


def _float_to_json(value: float) -> float | str:
    return value if math.isfinite(value) else str(value)  # "inf", "-inf", "nan": strict JSON


class OptunaSampler(HParamSampler):
    """Asks each new trial's hyperparameters from an Optuna study (see the module docstring).

    Args:
        config: The experiment; ``searcher.sampler`` is ``tpe``, ``cmaes`` or ``qmc``.
        storage: An Optuna storage URL (``sqlite:///optuna.db``) or storage object; None keeps the
            study in memory, which a reloaded search cannot reattach to.
        study_name: Defaults to :func:`default_study_name`. An existing study of that name is
            reused (``load_if_exists``), so give each experiment its own name.
    """

    def __init__(
        self, config: ExperimentConfig, *, storage: Any = None, study_name: str | None = None
    ) -> None:
        import optuna

        self._optuna = optuna
        self._kind = config.searcher.sampler
        if self._kind == "cmaes":
            try:
                import cmaes  # noqa: F401 - Optuna's CmaEsSampler needs it at sampling time
            except ImportError:
                raise SearcherError(
                    "searcher.sampler 'cmaes' needs the 'cmaes' package; install it (pip install cmaes) "
                    "or choose another sampler"
                ) from None
        self._group = config.hyperparameters
        leaves = _leaves(config.hyperparameters, ())
        self._leaves = {leaf.name: leaf for leaf in leaves}
        self._distributions = {leaf.name: leaf.distribution for leaf in leaves}
        self._storage = storage
        self._direction: Literal["minimize", "maximize"] = (
            "minimize" if config.searcher.smaller_is_better else "maximize"
        )
        # Drawn once when no experiment seed is set, then kept in the state: a QMC sequence must
        # keep one scramble for the whole search.
        seed = config.experiment_seed
        self._seed = seed if seed is not None else random.SystemRandom().randrange(2**31)
        self._asks = 0
        # request id -> [trial number, trial id, last step reported, last value reported or None]
        self._open: dict[int, list[Any]] = {}
        self.study_name = study_name or default_study_name(config)
        self._study: Any = None  # opened on first use, once the name is settled

    @property
    def study(self) -> Any:
        """The ``optuna.Study`` the trials are asked from (created in the storage if it is not there)."""
        if self._study is None and self._asks:
            # Reloaded mid-search: the study must be there, with this search's trials.
            try:
                self._study = self._optuna.load_study(
                    storage=self._storage, study_name=self.study_name, sampler=self._sampler(0)
                )
            except KeyError:
                raise self._missing_study() from None
        elif self._study is None:
            self._study = self._optuna.create_study(
                storage=self._storage,
                study_name=self.study_name,
                direction=self._direction,
                sampler=self._sampler(0),
                load_if_exists=True,
            )
        return self._study

    def _sampler(self, ask: int) -> Any:
        samplers = self._optuna.samplers
        seed = random.Random(f"{self._seed}/{ask}").randrange(2**32)
        if self._kind == "tpe":
            return samplers.TPESampler(seed=seed)
        if self._kind == "cmaes":
            return samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", self._optuna.exceptions.ExperimentalWarning)
            return samplers.QMCSampler(
                seed=self._seed,
                scramble=True,
                independent_sampler=samplers.RandomSampler(seed=seed),
                warn_independent_sampling=False,
                warn_asynchronous_seeding=False,
            )

    def sample(self, request_id: int, rng: random.Random) -> dict[str, Any]:
        study = self.study
        study.sampler = self._sampler(self._asks)
        self._asks += 1
        trial = study.ask(self._distributions)
        self._open[request_id] = [trial.number, trial._trial_id, -1, None]
        return _rebuild(self._group, trial.params, self._leaves)

    def report(self, request_id: int, value: float, step: int) -> None:
        entry = self._open.get(request_id)
        if entry is None or step <= entry[2]:
            return  # closed, or a step already reported (a trial re-validating after a restart)
        try:
            self._optuna.trial.Trial(self.study, entry[1]).report(value, max(step, 0))
        except KeyError:
            raise self._missing_study() from None
        entry[2], entry[3] = step, _float_to_json(value)

    def finish(self, request_id: int, outcome: Outcome) -> None:
        entry = self._open.pop(request_id, None)
        if entry is None:
            return
        number, _, _, last = entry
        state = self._optuna.trial.TrialState
        study = self.study
        try:
            if outcome is Outcome.FAILED or last is None or math.isnan(float(last)):
                study.tell(number, state=state.FAIL, skip_if_finished=True)
            elif outcome is Outcome.PRUNED:
                study.tell(number, state=state.PRUNED, skip_if_finished=True)
            else:
                study.tell(number, float(last), skip_if_finished=True)
        except KeyError:
            raise self._missing_study() from None

    def state_dict(self) -> dict[str, Any]:
        return {
            "study_name": self.study_name,
            "seed": self._seed,
            "asks": self._asks,
            "open": {str(k): list(v) for k, v in self._open.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.study_name = state["study_name"]
        self._study = None
        if state["asks"] and self._storage is None:
            raise self._missing_study()
        self._seed = state["seed"]
        self._asks = state["asks"]
        self._open = {int(k): list(v) for k, v in state["open"].items()}
        if self._asks:
            self.study  # noqa: B018 - fails now, with a clear message, if the study is not there

    def _missing_study(self) -> SearcherError:
        return SearcherError(
            f"the Optuna study {self.study_name!r} with this search's trials is not in the given "
            "storage; reload the search with the optuna_storage it was made with"
        )
