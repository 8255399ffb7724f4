"""ExperimentConfig -> the full normalized mapping, in Determined's shape."""

from __future__ import annotations

import copy
from typing import Any

from det_airflow.config._airflow import airflow_to_dict
from det_airflow.config._environment import bind_mounts_to_dict, environment_to_dict
from det_airflow.config._hparams import hparams_to_dict
from det_airflow.config._resources import resources_to_dict
from det_airflow.config._searcher import searcher_to_dict
from det_airflow.config._storage import checkpoint_storage_to_dict
from det_airflow.config._types import ExperimentConfig


def config_to_dict(cfg: ExperimentConfig) -> dict[str, Any]:
    """Every field with its defaults filled in; JSON-serializable, and ``parse_config`` reads it back.

    Example:
        >>> from det_airflow.config import parse_config
        >>> cfg = parse_config("entrypoint: python3 train.py\\nsearcher: {name: single, metric: loss}")
        >>> config_to_dict(cfg)["resources"]["priority"]
        42
    """
    entrypoint = cfg.entrypoint if isinstance(cfg.entrypoint, str) else list(cfg.entrypoint)
    out = {
        "name": cfg.name,
        "description": cfg.description,
        "labels": list(cfg.labels),
        "entrypoint": entrypoint,
        "hyperparameters": hparams_to_dict(cfg.hyperparameters),
        "searcher": searcher_to_dict(cfg.searcher),
        "resources": resources_to_dict(cfg.resources),
        "environment": environment_to_dict(cfg.environment),
        "bind_mounts": bind_mounts_to_dict(cfg.bind_mounts),
        "checkpoint_storage": checkpoint_storage_to_dict(cfg.checkpoint_storage),
        "checkpoint_policy": cfg.checkpoint_policy,
        "max_restarts": cfg.max_restarts,
        "min_validation_period": cfg.min_validation_period.to_dict(),
        "min_checkpoint_period": cfg.min_checkpoint_period.to_dict(),
        "scheduling_unit": cfg.scheduling_unit,
        "records_per_epoch": cfg.records_per_epoch,
        "perform_initial_validation": cfg.perform_initial_validation,
        "reproducibility": {"experiment_seed": cfg.experiment_seed},
        "data": cfg.data,
        "workspace": cfg.workspace,
        "project": cfg.project,
        "preemption_timeout": cfg.preemption_timeout,
        "profiling": cfg.profiling,
        "debug": cfg.debug,
        "log_policies": [
            {"name": p.name, "pattern": p.pattern, "action": p.action} for p in cfg.log_policies
        ],
        "optimizations": cfg.optimizations,
        "retention_policy": {"log_retention_days": cfg.retention_policy.log_retention_days},
        "airflow": airflow_to_dict(cfg.airflow),
    }
    if cfg.raw.get("integrations"):
        # The master reads the webhooks an experiment names from its stored config.
        out["integrations"] = cfg.raw["integrations"]
    # Free-form sections are shared with cfg; a caller editing the result must not change it.
    return copy.deepcopy(out)
