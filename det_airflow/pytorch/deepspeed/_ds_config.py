"""DeepSpeed configs from files and hyperparameters: one base config, some of its values replaced."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from det_airflow.errors import DetError

CONFIG_KEY = "deepspeed_config"
OVERWRITE_KEY = "overwrite_deepspeed_args"


def overwrite_deepspeed_config(
    base_ds_config: str | os.PathLike[str] | Mapping[str, Any], source_ds_dict: Mapping[str, Any]
) -> dict[str, Any]:
    """``base_ds_config`` (a dict, or the path of a JSON file) with the values of ``source_ds_dict``:
    nested dicts are merged key by key, anything else in the source replaces the base's value."""
    if isinstance(base_ds_config, str | os.PathLike):
        base = _read_json(base_ds_config)
    elif isinstance(base_ds_config, Mapping):
        base = dict(base_ds_config)
    else:
        raise TypeError(f"base_ds_config: expected a path or a dict, got {type(base_ds_config).__name__}")
    return _merge(base, source_ds_dict)


def get_ds_config_from_hparams(
    hparams: Mapping[str, Any], base_dir: str | os.PathLike[str] = "."
) -> dict[str, Any]:
    """The DeepSpeed config named by the ``deepspeed_config`` hyperparameter (a JSON file under
    ``base_dir``), with the ``overwrite_deepspeed_args`` hyperparameter's values merged in."""
    if CONFIG_KEY not in hparams:
        raise DetError(f"hyperparameters.{CONFIG_KEY}: expected the path of a DeepSpeed JSON config")
    overwrite = hparams.get(OVERWRITE_KEY) or {}
    if not isinstance(overwrite, Mapping):
        raise DetError(f"hyperparameters.{OVERWRITE_KEY}: expected a mapping, got {overwrite!r}")
    return overwrite_deepspeed_config(_read_json(os.path.join(base_dir, hparams[CONFIG_KEY])), overwrite)


def _read_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as exc:
        raise DetError(f"DeepSpeed config {os.fspath(path)}: {exc.strerror}") from None
    except ValueError as exc:
        raise DetError(f"DeepSpeed config {os.fspath(path)}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise DetError(f"DeepSpeed config {os.fspath(path)}: expected a JSON object")
    return data


def _merge(base: dict[str, Any], source: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in source.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(dict(out[key]), value)
        else:
            out[key] = value
    return out
