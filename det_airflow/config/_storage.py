"""The ``checkpoint_storage`` section: where checkpoints go and how many are kept."""

from __future__ import annotations

import dataclasses
import difflib
import posixpath
from collections.abc import Mapping
from typing import Any

from det_airflow.config._fields import Fields, Problems, did_you_mean, show
from det_airflow.config._types import CheckpointStorageConfig

TYPES = ("shared_fs", "directory", "s3", "gcs", "azure")
# The field each storage type cannot do without.
_REQUIRED = {
    "shared_fs": "host_path",
    "directory": "container_path",
    "s3": "bucket",
    "gcs": "bucket",
    "azure": "container",
}
_FIELDS = tuple(f.name for f in dataclasses.fields(CheckpointStorageConfig) if f.name != "options")
_PATH = "checkpoint_storage"


def read_checkpoint_storage(value: Any, problems: Problems) -> CheckpointStorageConfig | None:
    """None when absent: the default storage is filled in later, from ``airflow.cfg [det]``."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        problems.add(
            _PATH, f"expected a mapping such as {{type: shared_fs, host_path: /mnt/ckpt}}, got {show(value)}"
        )
        return None
    # Provider-specific keys (credentials, endpoints) are free-form and kept in `options`; only a
    # near-miss of one of our own fields is worth an error, since it would otherwise be ignored.
    options = {k: v for k, v in value.items() if k not in _FIELDS}
    for key in options:
        if difflib.get_close_matches(key, _FIELDS, n=1, cutoff=0.8):
            problems.add(f"{_PATH}.{key}", "unknown field" + did_you_mean(key, _FIELDS))
    f = Fields(value, _PATH, problems)
    kind = f.choice("type", TYPES, required=True)
    if kind in _REQUIRED and not f.given(_REQUIRED[kind]):
        f.missing(_REQUIRED[kind], "a non-empty string", f"for {kind} storage")
    host_path = f.string("host_path", nonempty=True)
    if kind == "shared_fs" and isinstance(host_path, str) and not posixpath.isabs(host_path):
        f.bad("host_path", "an absolute path")
    return CheckpointStorageConfig(
        type=kind,
        host_path=host_path,
        storage_path=f.string("storage_path", nonempty=True),
        container_path=f.string("container_path", nonempty=True),
        bucket=f.string("bucket", nonempty=True),
        prefix=f.string("prefix"),
        container=f.string("container", nonempty=True),
        save_experiment_best=f.integer(
            "save_experiment_best", CheckpointStorageConfig.save_experiment_best, low=0
        ),
        save_trial_best=f.integer("save_trial_best", CheckpointStorageConfig.save_trial_best, low=0),
        save_trial_latest=f.integer("save_trial_latest", CheckpointStorageConfig.save_trial_latest, low=0),
        options=dict(options),
    )


def checkpoint_storage_to_dict(storage: CheckpointStorageConfig | None) -> dict[str, Any] | None:
    if storage is None:
        return None
    out = {k: v for k, v in dataclasses.asdict(storage).items() if k != "options" and v is not None}
    out.update(storage.options)
    return out
