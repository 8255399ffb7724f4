"""Entry points: YAML file or text (or a mapping) + overrides -> a validated ExperimentConfig."""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Mapping
from typing import Any

from det_airflow.config._experiment import read_experiment
from det_airflow.config._fields import Problems, show
from det_airflow.config._inactive import WARNING, inactive_fields
from det_airflow.config._limits import MAX_CONFIG_BYTES
from det_airflow.config._overrides import apply_overrides
from det_airflow.config._types import ExperimentConfig
from det_airflow.config._yaml import check_size, read_yaml, to_plain
from det_airflow.errors import ConfigError


def load_config(
    path: str | os.PathLike[str],
    *,
    overrides: Iterable[str] = (),
    airflow_defaults: Mapping[str, Any] | None = None,
) -> ExperimentConfig:
    """Reads and validates an experiment YAML file.

    Raises:
        ConfigError: the file cannot be read, is not valid YAML, or is not a valid config; the
            error lists every problem found, each with its field path.
    """
    name = os.fspath(path)
    try:
        with open(name, encoding="utf-8") as file:
            check_size(os.fstat(file.fileno()).st_size, name)
            text = file.read(MAX_CONFIG_BYTES + 1)  # a file that grew since is refused by read_yaml
    except FileNotFoundError:
        raise ConfigError([("", "no such file")], source=name) from None
    except OSError as exc:
        raise ConfigError([("", f"cannot read the file: {exc.strerror}")], source=name) from None
    except UnicodeDecodeError:
        raise ConfigError([("", "cannot read the file: it is not UTF-8 text")], source=name) from None
    return parse_config(text, source_name=name, overrides=overrides, airflow_defaults=airflow_defaults)


def parse_config(
    source: str | Mapping[str, Any],
    *,
    source_name: str | None = None,
    overrides: Iterable[str] = (),
    airflow_defaults: Mapping[str, Any] | None = None,
) -> ExperimentConfig:
    """Validates a config given as YAML text or as an already-loaded mapping.

    Args:
        source: YAML text, or a mapping (e.g. ``config_to_dict`` output or a request body).
        source_name: The file name to put in front of error messages.
        overrides: ``--config`` strings such as ``searcher.max_trials=4``; values are read as YAML.
        airflow_defaults: Defaults for the ``airflow:`` section, from ``airflow.cfg [det]``.

    Raises:
        ConfigError: with every problem found.

    Example:
        >>> cfg = parse_config("entrypoint: python3 train.py\\nsearcher: {name: single, metric: loss}")
        >>> cfg.resources.priority
        42
    """
    data = read_yaml(source, source_name) if isinstance(source, str) else _plain_mapping(source, source_name)
    if not isinstance(data, dict):
        raise ConfigError(
            [("", f"expected a mapping of fields (such as 'searcher:') at the top level, got {show(data)}")],
            source=source_name,
        )
    override_problems = apply_overrides(data, overrides)
    if override_problems:
        raise ConfigError(override_problems, source=source_name)
    problems = Problems()
    cfg = read_experiment(data, problems, airflow_defaults)
    if problems.items:
        raise ConfigError(_in_file_order(problems.items, data), source=source_name)
    inactive = inactive_fields(data)
    warnings = (WARNING + ", ".join(inactive),) if inactive else ()
    return cfg.replace(raw=copy.deepcopy(data), warnings=warnings)


def _plain_mapping(source: Any, source_name: str | None) -> Any:
    try:
        return to_plain(source)
    except RecursionError:
        raise ConfigError(
            [("", "refused: it nests mappings and lists too deeply to be an experiment config")],
            source=source_name,
        ) from None


def _in_file_order(problems: list[tuple[str, str]], data: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Sorts problems by where their section is written; missing sections come last."""
    order = {key: i for i, key in enumerate(data)}

    def section(problem: tuple[str, str]) -> int:
        top = problem[0].split(".", 1)[0].split("[", 1)[0]
        return order.get(top, len(order))

    return sorted(problems, key=section)


def is_experiment_mapping(obj: Any) -> bool:
    """True for a mapping with a top-level ``searcher`` key: how experiment YAMLs are told apart."""
    return isinstance(obj, Mapping) and "searcher" in obj
