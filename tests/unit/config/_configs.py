"""Example configs and assertion helpers shared by the config tests."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from det_airflow.config import parse_config
from det_airflow.errors import ConfigError

MNIST_CONST = """\
name: mnist_pytorch_const
hyperparameters: {learning_rate: 1.0, n_filters1: 32, n_filters2: 64, dropout1: 0.25, dropout2: 0.5, global_batch_size: 64}
searcher: {name: single, metric: validation_loss, max_length: {batches: 937}, smaller_is_better: true}
entrypoint: python3 train.py
"""

# Seed-era adaptive search: the length is a max_length in batches.
MNIST_ADAPTIVE_SEED = """\
name: mnist_pytorch_adaptive_search
hyperparameters:
  global_batch_size: 64
  learning_rate: {type: double, minval: 0.0001, maxval: 1.0}
  n_filters1: {type: int, minval: 8, maxval: 64}
  n_filters2: {type: int, minval: 8, maxval: 72}
  dropout1: {type: double, minval: 0.2, maxval: 0.8}
  dropout2: {type: double, minval: 0.2, maxval: 0.8}
searcher:
  name: adaptive_asha
  metric: validation_loss
  smaller_is_better: true
  max_length:
    batches: 937
  max_trials: 16
entrypoint: python3 -m det_airflow.launchers.torch_distributed --trial model_def:MNistTrial
"""

# Determined 0.38: the length is a reported metric (time_metric) and its final value (max_time).
MNIST_ADAPTIVE_038 = """\
name: mnist_pytorch_adaptive_search
hyperparameters:
  global_batch_size: 64
  learning_rate: {type: log, minval: -4, maxval: 0, base: 10}
searcher:
  name: adaptive_asha
  metric: validation_loss
  smaller_is_better: true
  max_trials: 16
  time_metric: batches
  max_time: 937
  max_concurrent_trials: 4
entrypoint: python3 train.py
"""


def minimal(**top: Any) -> dict[str, Any]:
    """The smallest valid config (a single trial), with top-level fields replaced by ``top``."""
    config: dict[str, Any] = {
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "validation_loss"},
    }
    config.update(copy.deepcopy(top))
    return config


def problems_of(source: Any, **kwargs: Any) -> list[tuple[str, str]]:
    """The problems ``parse_config`` reports for ``source`` (which must be invalid)."""
    with pytest.raises(ConfigError) as info:
        parse_config(source, **kwargs)
    return info.value.problems


def assert_problem(problems: list[tuple[str, str]], path: str, fragment: str) -> None:
    """Some problem sits at exactly ``path`` and its message contains ``fragment``."""
    messages = [message for where, message in problems if where == path]
    assert messages, f"no problem reported at {path!r}; got {problems}"
    assert any(fragment in message for message in messages), f"{fragment!r} not in {messages}"
