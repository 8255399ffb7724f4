"""Experiment configuration: YAML in, a validated ``ExperimentConfig`` out (REFERENCE.md §1).

Example:
    >>> from det_airflow.config import parse_config
    >>> cfg = parse_config("entrypoint: python3 train.py\\nsearcher: {name: single, metric: loss}")
    >>> cfg.searcher.name, cfg.max_restarts
    ('single', 5)
"""

from det_airflow.config._dump import config_to_dict
from det_airflow.config._hparams import hparam_leaves
from det_airflow.config._length import length_in_batches
from det_airflow.config._limits import MAX_CONFIG_BYTES
from det_airflow.config._load import is_experiment_mapping, load_config, parse_config
from det_airflow.config._names import generate_name
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
    SearcherConfig,
)
from det_airflow.config._yaml import read_yaml

__all__ = [
    "MAX_CONFIG_BYTES",
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
    "SearcherConfig",
    "config_to_dict",
    "generate_name",
    "hparam_leaves",
    "is_experiment_mapping",
    "length_in_batches",
    "load_config",
    "merge_checkpoint_storage",
    "parse_config",
    "read_yaml",
]
