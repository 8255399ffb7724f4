"""The ``checkpoint_storage`` section: where checkpoints go and how many are kept."""

from __future__ import annotations

import dataclasses
import difflib
import posixpath
from collections.abc import Mapping
from typing import Any

from det_airflow.config._fields import Fields, Problems, did_you_mean, show
from det_airflow.config._limits import INT32_MAX
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
# The object stores' own fields: kept in `options` as given, checked here so that a mistake is
# reported with the config rather than when the trial first checkpoints.
_S3_STRINGS = ("endpoint_url", "access_key", "secret_key", "aws_conn_id", "region")
_GCS_STRINGS = ("endpoint_url", "gcp_conn_id", "project")
_AZURE_STRINGS = ("connection_string", "account_url", "credential", "wasb_conn_id")
_PATH = "checkpoint_storage"


def read_checkpoint_storage(value: Any, problems: Problems) -> CheckpointStorageConfig | None:
    """None when absent or given without ``type``: the cluster default storage is filled in later,
    from ``airflow.cfg [det]`` (see ``merge_checkpoint_storage``)."""
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
    if not f.given("type"):
        # As in Determined, the fields given here refine the cluster's default storage.
        _read_counts(f)
        return None
    kind = f.choice("type", TYPES, required=True)
    if kind in _REQUIRED and not f.given(_REQUIRED[kind]):
        f.missing(_REQUIRED[kind], "a non-empty string", f"for {kind} storage")
    if kind == "s3":
        _check_s3(f)
    elif kind == "gcs":
        _check_strings(f, _GCS_STRINGS)
        _check_url(f, "endpoint_url")
    elif kind == "azure":
        _check_azure(f)
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
        **_read_counts(f),
        options=dict(options),
    )


def _check_s3(f: Fields) -> None:
    """Credentials go in pairs, and an S3-compatible store is named by its URL."""
    _check_strings(f, _S3_STRINGS)
    _check_url(f, "endpoint_url")
    for given, needed in (("access_key", "secret_key"), ("secret_key", "access_key")):
        if f.given(given) and not f.given(needed):
            f.missing(needed, "a non-empty string", f"with {given}")


def _check_azure(f: Fields) -> None:
    """An account is named once: by a connection string, or by its URL (with a key or SAS token
    as ``credential``, else the machine's Azure identity)."""
    _check_strings(f, _AZURE_STRINGS)
    _check_url(f, "account_url")
    if f.given("connection_string") and f.given("account_url"):
        f.bad("account_url", "no account_url with connection_string (it names the account)")
    if f.given("credential") and not f.given("account_url"):
        f.missing("account_url", "the account's URL", "with credential")


def _check_strings(f: Fields, keys: tuple[str, ...]) -> None:
    for key in keys:
        f.string(key, nonempty=True)


def _check_url(f: Fields, key: str) -> None:
    value = f.get(key)
    if isinstance(value, str) and value and not value.startswith(("http://", "https://")):
        f.bad(key, "an http:// or https:// URL")


def _read_counts(f: Fields) -> dict[str, Any]:
    """How many checkpoints garbage collection keeps."""
    return {
        key: f.integer(key, getattr(CheckpointStorageConfig, key), low=0, cap=INT32_MAX)
        for key in ("save_experiment_best", "save_trial_best", "save_trial_latest")
    }


def merge_checkpoint_storage(given: Any, default: Mapping[str, Any]) -> dict[str, Any]:
    """The storage an experiment uses: its own section laid over the cluster's default, as
    Determined's master does. A section of another ``type`` than the default replaces it whole.

    Example:
        >>> merge_checkpoint_storage({"save_trial_best": 3}, {"type": "shared_fs", "host_path": "/ckpt"})
        {'type': 'shared_fs', 'host_path': '/ckpt', 'save_trial_best': 3}
    """
    if not isinstance(given, Mapping):
        return dict(default)
    if given.get("type") is not None and given.get("type") != default.get("type"):
        return dict(given)
    merged = dict(default)
    merged.update({k: v for k, v in given.items() if v is not None})
    return merged


def checkpoint_storage_to_dict(storage: CheckpointStorageConfig | None) -> dict[str, Any] | None:
    if storage is None:
        return None
    out = {k: v for k, v in dataclasses.asdict(storage).items() if k != "options" and v is not None}
    out.update(storage.options)
    return out
