"""Experiment configuration: YAML in, a validated ``ExperimentConfig`` out (docs/semantics.md §1).

Example:
    >>> from det_airflow.config import parse_config
    >>> cfg = parse_config("entrypoint: python3 train.py\\nsearcher: {name: single, metric: loss}")
    >>> cfg.searcher.name, cfg.max_restarts
    ('single', 5)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from det_airflow.config._dump import config_to_dict
    from det_airflow.config._hparams import hparam_leaves
    from det_airflow.config._length import length_in_batches
    from det_airflow.config._limits import MAX_CONFIG_BYTES
    from det_airflow.config._load import is_experiment_mapping, load_config, parse_config
    from det_airflow.config._names import generate_name
    from det_airflow.config._overrides import RUN_CONF_FIELDS, apply_overrides, apply_run_conf
    from det_airflow.config._storage import merge_checkpoint_storage
    from det_airflow.config._types import (
        AirflowSection,
        BindMount,
        CategoricalHP,
        CheckpointStorageConfig,
        ConstHP,
        DoubleHP,
        EnvironmentConfig,
        ExperimentConfig,
        HParamGroup,
        Hyperparameter,
        IntHP,
        Length,
        LengthUnit,
        LogHP,
        LogPolicy,
        ResourcesConfig,
        RetentionPolicy,
        SearcherConfig,
        priority_weight,
    )
    from det_airflow.config._yaml import read_yaml

__all__ = [
    "MAX_CONFIG_BYTES",
    "RUN_CONF_FIELDS",
    "AirflowSection",
    "BindMount",
    "CategoricalHP",
    "CheckpointStorageConfig",
    "ConstHP",
    "DoubleHP",
    "EnvironmentConfig",
    "ExperimentConfig",
    "HParamGroup",
    "Hyperparameter",
    "IntHP",
    "Length",
    "LengthUnit",
    "LogHP",
    "LogPolicy",
    "ResourcesConfig",
    "RetentionPolicy",
    "SearcherConfig",
    "apply_overrides",
    "apply_run_conf",
    "config_to_dict",
    "generate_name",
    "hparam_leaves",
    "is_experiment_mapping",
    "length_in_batches",
    "load_config",
    "merge_checkpoint_storage",
    "parse_config",
    "priority_weight",
    "read_yaml",
]

# Public names load their module on first use (PEP 562): the Trainer needs only ``Length`` and
# ``length_in_batches``, and a trial should not pay for the YAML reader and the validators.
_HOME = {
    "AirflowSection": "det_airflow.config._types",
    "BindMount": "det_airflow.config._types",
    "CategoricalHP": "det_airflow.config._types",
    "CheckpointStorageConfig": "det_airflow.config._types",
    "ConstHP": "det_airflow.config._types",
    "DoubleHP": "det_airflow.config._types",
    "EnvironmentConfig": "det_airflow.config._types",
    "ExperimentConfig": "det_airflow.config._types",
    "HParamGroup": "det_airflow.config._types",
    "Hyperparameter": "det_airflow.config._types",
    "IntHP": "det_airflow.config._types",
    "Length": "det_airflow.config._types",
    "LengthUnit": "det_airflow.config._types",
    "LogHP": "det_airflow.config._types",
    "LogPolicy": "det_airflow.config._types",
    "MAX_CONFIG_BYTES": "det_airflow.config._limits",
    "ResourcesConfig": "det_airflow.config._types",
    "RetentionPolicy": "det_airflow.config._types",
    "SearcherConfig": "det_airflow.config._types",
    "config_to_dict": "det_airflow.config._dump",
    "generate_name": "det_airflow.config._names",
    "RUN_CONF_FIELDS": "det_airflow.config._overrides",
    "apply_overrides": "det_airflow.config._overrides",
    "apply_run_conf": "det_airflow.config._overrides",
    "hparam_leaves": "det_airflow.config._hparams",
    "is_experiment_mapping": "det_airflow.config._load",
    "length_in_batches": "det_airflow.config._length",
    "load_config": "det_airflow.config._load",
    "merge_checkpoint_storage": "det_airflow.config._storage",
    "parse_config": "det_airflow.config._load",
    "priority_weight": "det_airflow.config._types",
    "read_yaml": "det_airflow.config._yaml",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'det_airflow.config' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
