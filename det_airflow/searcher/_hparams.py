"""Sampling hyperparameters and enumerating their grid (docs/semantics.md §1.1)."""

from __future__ import annotations

import copy
import itertools
import math
import random
from collections.abc import Iterator
from typing import Any

from det_airflow.config._types import (
    CategoricalHP,
    ConstHP,
    DoubleHP,
    HParamGroup,
    Hyperparameter,
    IntHP,
    LogHP,
)
from det_airflow.searcher._errors import SearcherError


def sample_hparams(group: HParamGroup, rng: random.Random) -> dict[str, Any]:
    """Draws one value for every hyperparameter, in the order written.

    Args:
        group: The ``hyperparameters`` section; nested groups are dicts.
        rng: The search's random generator.

    Returns:
        A dict shaped like ``group``: nested groups become nested dicts.

    Example:
        >>> sample_hparams({"lr": LogHP(-4, -1), "layers": IntHP(1, 3)}, random.Random(0))
        {'lr': 0.0341..., 'layers': 2}
    """
    return {
        name: sample_hparams(hp, rng) if isinstance(hp, dict) else _sample(hp, rng)
        for name, hp in group.items()
    }


def _sample(hp: Hyperparameter, rng: random.Random) -> Any:
    match hp:
        case ConstHP(val=val):
            return copy.deepcopy(val)
        case IntHP():
            return rng.randint(hp.minval, hp.maxval)
        case DoubleHP():
            return rng.uniform(hp.minval, hp.maxval)
        case LogHP():
            return hp.base ** rng.uniform(hp.minval, hp.maxval)
        case CategoricalHP(vals=vals):
            return copy.deepcopy(rng.choice(vals))
    raise TypeError(f"not a hyperparameter: {hp!r}")


def grid_points(group: HParamGroup) -> list[dict[str, Any]]:
    """Lists every point of the grid: the cartesian product over all leaves, nested included.

    The first hyperparameter written varies slowest. Every int, double and log needs ``count``.

    Args:
        group: The ``hyperparameters`` section; nested groups are dicts.

    Returns:
        One dict per grid point, shaped like ``group``.

    Raises:
        SearcherError: An int, double or log hyperparameter has no ``count``.

    Example:
        >>> grid_points({"a": IntHP(1, 2, count=2), "b": CategoricalHP(("x", "y"))})
        [{'a': 1, 'b': 'x'}, {'a': 1, 'b': 'y'}, {'a': 2, 'b': 'x'}, {'a': 2, 'b': 'y'}]
    """
    leaves = list(_leaves(group, ()))
    points = []
    for values in itertools.product(*(axis for _, axis in leaves)):
        point: dict[str, Any] = {}
        for (path, _), value in zip(leaves, values, strict=True):
            _set_nested(point, path, value)
        points.append(point)
    return points


def _leaves(group: HParamGroup, prefix: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], list[Any]]]:
    for name, hp in group.items():
        path = (*prefix, name)
        if isinstance(hp, dict) and hp:
            yield from _leaves(hp, path)
        elif isinstance(hp, dict):
            yield path, [{}]  # an empty group is still a key of every point
        else:
            yield path, _axis(hp, path)


def _axis(hp: Hyperparameter, path: tuple[str, ...]) -> list[Any]:
    if isinstance(hp, ConstHP):
        return [hp.val]
    if isinstance(hp, CategoricalHP):
        return list(hp.vals)
    if hp.count is None:
        name = ".".join(("hyperparameters", *path))
        raise SearcherError(f"{name}: grid search needs 'count' on every int, double and log hyperparameter")
    if isinstance(hp, IntHP):
        # Clamped so that no two points round to the same integer.
        count = min(hp.count, hp.maxval - hp.minval + 1)
        return [_round_half_up(x) for x in _linspace(hp.minval, hp.maxval, count)]
    points = _linspace(hp.minval, hp.maxval, hp.count)  # for log, the exponents
    return [hp.base**x for x in points] if isinstance(hp, LogHP) else points


def _linspace(lo: float, hi: float, count: int) -> list[float]:
    if count == 1:
        return [(lo + hi) / 2]
    step = (hi - lo) / (count - 1)
    return [lo + i * step for i in range(count - 1)] + [hi]


def _round_half_up(x: float) -> int:
    # Go's math.Round (half away from zero), as Determined's grid uses; Python's round() is half-even.
    return int(math.copysign(math.floor(abs(x) + 0.5), x))


def _set_nested(point: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for name in path[:-1]:
        point = point.setdefault(name, {})
    point[path[-1]] = copy.deepcopy(value)  # points must not share mutable values
