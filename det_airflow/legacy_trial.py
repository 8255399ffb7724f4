"""What every legacy trial runner shares, whatever its framework: the trial class named by an
``entrypoint: module:Class``, imported from the working folder, and the hyperparameters and seed the
trial gets (its own on a trial; off-cluster, those given or the config's constants).

Imports no framework: the Keras runner uses it without torch, the PyTorch runners without TensorFlow.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping
from typing import Any

from det_airflow.errors import DetError


def import_trial_class(spec: str) -> object:
    """The object ``module:Class`` names, its module imported from the working folder (the caller
    checks what kind of trial it is)."""
    module_name, sep, class_name = spec.partition(":")
    if not sep or not module_name or not class_name:
        raise DetError(f"expected a trial as module:Class (e.g. model_def:MyTrial), got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise  # the trial's module exists but imports something missing: show the real error
        raise DetError(f"trial module {module_name!r} not found in {os.getcwd()}") from None
    trial_class = getattr(module, class_name, None)
    if trial_class is None:
        raise DetError(f"module {module_name!r} has no class {class_name!r}")
    return trial_class


def hparams_and_seed(
    info: Any, hparams: Mapping[str, Any] | None, config: Mapping[str, Any]
) -> tuple[dict[str, Any], int]:
    """The trial's hyperparameters and seed: on a trial (``info``) its own; off-cluster ``hparams``
    or the config's constant hyperparameters, and ``reproducibility.experiment_seed`` (else 0)."""
    if info is not None and info.trial.hparams:
        return dict(info.trial.hparams), info.trial.trial_seed
    chosen = dict(hparams) if hparams is not None else constant_hparams(config.get("hyperparameters"))
    if info is not None:
        return chosen, info.trial.trial_seed
    reproducibility = config.get("reproducibility")
    seed = reproducibility.get("experiment_seed") if isinstance(reproducibility, Mapping) else None
    return chosen, int(seed) if isinstance(seed, int) and not isinstance(seed, bool) else 0


def constant_hparams(section: Any) -> dict[str, Any]:
    """The hyperparameters of a config section that have one value (searched ones are left out)."""
    if not isinstance(section, Mapping):
        return {}
    out: dict[str, Any] = {}
    for name, spec in section.items():
        if not isinstance(spec, Mapping):
            out[name] = spec
        elif spec.get("type") == "const":
            out[name] = spec.get("val")
        elif "type" not in spec:
            out[name] = constant_hparams(spec)
    return out
