"""Adaptive ASHA: several ASHA brackets, from aggressive to conservative early stopping."""

from __future__ import annotations

from det_airflow.config._types import ExperimentConfig
from det_airflow.searcher._asha import ASHASearch
from det_airflow.searcher._brackets import Bracket, plan_brackets


class AdaptiveASHASearch(ASHASearch):
    """``adaptive_asha``: the brackets of :func:`plan_brackets` run side by side.

    ``mode`` (``aggressive``, ``standard``, ``conservative``) or ``bracket_rungs`` picks the
    brackets; ``max_trials`` and ``max_concurrent_trials`` are split among them (docs/semantics.md §1.2).
    As in Determined, each bracket starts its own share of trials (the most aggressive bracket's
    first) and replaces only its own stopped trials, until it has run its ``max_trials``.

    Example:
        >>> method = AdaptiveASHASearch(config)  # {max_trials: 16, max_length: {batches: 937}}
        >>> [(b.plan.num_rungs, b.plan.max_trials, b.units) for b in method.brackets]
        [(3, 12, [58, 234, 937]), (2, 4, [234, 937])]
    """

    name = "adaptive_asha"

    @classmethod
    def plan(cls, config: ExperimentConfig, length: int) -> list[Bracket]:
        searcher = config.searcher
        return plan_brackets(
            max_trials=cls.trial_slots(config),
            length=length,
            divisor=searcher.divisor,
            mode=searcher.mode,
            max_rungs=searcher.max_rungs,
            max_concurrent_trials=searcher.max_concurrent_trials,
            bracket_rungs=searcher.bracket_rungs,
        )
