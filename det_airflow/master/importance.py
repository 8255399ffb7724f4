"""Hyperparameter importance: how much of a metric's variation over an experiment's trials each
hyperparameter explains, as Optuna's importance evaluators measure it.

fANOVA (Optuna's ``FanovaImportanceEvaluator``, a random forest of scikit-learn) where scikit-learn
is installed; PED-ANOVA (``PedAnovaImportanceEvaluator``, numpy only) where it is not. Both get a
fixed seed, so the same trials give the same answer on every call. Constant hyperparameters explain
nothing and are left out; a trial without the metric is left out.

Each trial's value is the metric as its searcher sees it: its best validation of the searcher's
metric, else the latest value reported of the one asked for (validation first, then training).
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import warnings
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Row, select

from det_airflow.errors import DetError
from det_airflow.master import schema

# Evaluators are seeded: fANOVA's forest would otherwise rank close hyperparameters differently on
# each call, and the bars of the page would swap places on a reload.
SEED = 0
FANOVA = "fanova"
PED_ANOVA = "ped_anova"
# Optuna's categorical choices must be None, bool, int, float or str.
_PLAIN = (type(None), bool, int, float, str)


# fANOVA fits a forest (seconds for a thousand trials), and every reader's Hyperparameters tab asks
# again: answers are kept per (experiment, metric, evaluator, the exact points), so only new reports
# cost a new fit.
_CACHED = 64
_cache: OrderedDict[tuple[int, str, str, str], list[tuple[str, float]]] = OrderedDict()
_cache_lock = threading.Lock()


@dataclass(frozen=True)
class Importance:
    metric: str
    evaluator: str
    trials: int
    importances: list[tuple[str, float]]  # most important first
    constants: list[str]
    note: str | None = None  # why there are no importances


def distributions(hyperparameters: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Optuna distributions of an experiment's searched hyperparameters, by dotted name, and the
    names of its constants."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    searched: dict[str, Any] = {}
    constants: list[str] = []

    def walk(section: Mapping[str, Any], prefix: str) -> None:
        for key, spec in section.items():
            name = f"{prefix}{key}"
            kind = spec.get("type") if isinstance(spec, Mapping) else None
            if isinstance(spec, Mapping) and kind is None:
                walk(spec, f"{name}.")
            elif kind == "int" and spec["minval"] < spec["maxval"]:
                searched[name] = IntDistribution(int(spec["minval"]), int(spec["maxval"]))
            elif kind == "double" and spec["minval"] < spec["maxval"]:
                searched[name] = FloatDistribution(float(spec["minval"]), float(spec["maxval"]))
            elif kind == "log" and spec["minval"] < spec["maxval"]:
                base = float(spec.get("base", 10.0))
                searched[name] = FloatDistribution(base ** spec["minval"], base ** spec["maxval"], log=True)
            elif kind == "categorical" and len(spec["vals"]) > 1:
                searched[name] = CategoricalDistribution([_choice(v) for v in spec["vals"]])
            else:
                constants.append(name)

    walk(hyperparameters, "")
    return searched, sorted(constants)


def _choice(value: Any) -> Any:
    return value if isinstance(value, _PLAIN) else repr(value)


def _flat(hparams: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in hparams.items():
        if isinstance(value, Mapping):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def trial_value(trial: Row, metric: str, searcher_metric: str | None) -> float | None:
    """The trial's value of the metric, as the module's docstring says."""
    if metric == searcher_metric and trial.best_validation is not None:
        value: Any = trial.best_validation
    else:
        summary = trial.summary or {}
        value = next(
            (
                (summary.get(group) or {}).get(metric)
                for group in ("validation", "training")
                if metric in (summary.get(group) or {})
            ),
            None,
        )
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def evaluate(
    searched: Mapping[str, Any], points: Iterable[tuple[Mapping[str, Any], float]], *, evaluator: str
) -> list[tuple[str, float]]:
    """Each searched hyperparameter's importance over the points (flat hparams, value), most
    important first, by Optuna's evaluator."""
    import optuna
    from optuna.importance import FanovaImportanceEvaluator, PedAnovaImportanceEvaluator

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize")
    for hparams, value in points:
        params = {name: _choice(hparams[name]) for name in searched}
        study.add_trial(optuna.trial.create_trial(params=params, distributions=dict(searched), value=value))
    if evaluator == FANOVA:
        chosen: Any = FanovaImportanceEvaluator(seed=SEED)
    else:
        chosen = PedAnovaImportanceEvaluator()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        found = optuna.importance.get_param_importances(study, evaluator=chosen, normalize=True)
    return sorted(((name, float(value)) for name, value in found.items()), key=lambda item: -item[1])


def default_evaluator() -> str:
    """fANOVA where scikit-learn is installed, else PED-ANOVA."""
    try:
        import sklearn  # noqa: F401
    except ImportError:
        return PED_ANOVA
    return FANOVA


def experiment_importance(
    conn: Connection, experiment: Row, metric: str | None = None, *, evaluator: str | None = None
) -> Importance:
    """The importance of each searched hyperparameter of the experiment for the metric (default:
    its searcher's)."""
    searcher_metric = (experiment.config.get("searcher") or {}).get("metric")
    metric = metric or searcher_metric
    if not metric:
        raise DetError(f"experiment {experiment.id} has no searcher metric: name one (metric=...)")
    evaluator = evaluator or default_evaluator()
    if evaluator not in (FANOVA, PED_ANOVA):
        raise DetError(f"unknown importance evaluator {evaluator!r}: one of {FANOVA}, {PED_ANOVA}")
    searched, constants = distributions(experiment.config.get("hyperparameters") or {})
    t = schema.trials
    rows = conn.execute(
        select(t.c.hparams, t.c.best_validation, t.c.summary)
        .where(t.c.experiment_id == experiment.id)
        .order_by(t.c.id)
    ).all()
    points = []
    for row in rows:
        value = trial_value(row, metric, searcher_metric)
        hparams = _flat(row.hparams or {})
        if value is not None and all(name in hparams for name in searched):
            points.append((hparams, value))
    if not searched:
        return Importance(metric, evaluator, len(points), [], constants, "no hyperparameter is searched")
    if len(points) < 2:
        note = f"{len(points)} trial(s) reported {metric!r}; importance needs at least 2"
        return Importance(metric, evaluator, len(points), [], constants, note)
    if len({value for _, value in points}) == 1:
        note = f"{metric!r} is the same in every trial: no hyperparameter explains a difference"
        return Importance(metric, evaluator, len(points), [], constants, note)
    digest = hashlib.sha256(
        json.dumps([[{k: h[k] for k in sorted(searched)}, v] for h, v in points], default=repr).encode()
    ).hexdigest()
    key = (int(experiment.id), metric, evaluator, digest)
    with _cache_lock:
        found = _cache.get(key)
        if found is not None:
            _cache.move_to_end(key)
    if found is None:
        found = evaluate(searched, points, evaluator=evaluator)
        with _cache_lock:
            _cache[key] = found
            while len(_cache) > _CACHED:
                _cache.popitem(last=False)
    return Importance(metric, evaluator, len(points), list(found), constants)
