"""The top level of an experiment config: reads every section into an ExperimentConfig."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from det_airflow.config._airflow import read_airflow
from det_airflow.config._data_layer import read_data_layer
from det_airflow.config._environment import read_bind_mounts, read_environment
from det_airflow.config._fields import Fields, Problems, item, join, show
from det_airflow.config._hparams import check_global_batch_size, check_grid_counts, read_hyperparameters
from det_airflow.config._inactive import UNTYPED
from det_airflow.config._integrations import read_integrations
from det_airflow.config._length import read_length
from det_airflow.config._limits import INT32_MAX, INT64_MAX
from det_airflow.config._names import generate_name
from det_airflow.config._resources import read_resources
from det_airflow.config._searcher import read_searcher
from det_airflow.config._storage import read_checkpoint_storage
from det_airflow.config._types import ExperimentConfig, LogPolicy, RetentionPolicy
from det_airflow.text_input import command_problem, name_problem

FIELDS = (
    *(
        f.name
        for f in dataclasses.fields(ExperimentConfig)
        if f.name not in ("experiment_seed", "raw", "warnings")
    ),
    "reproducibility",
)
MAX_NAME_LENGTH = 128
MAX_SEED = INT32_MAX
LOG_ACTIONS = ("cancel_retries", "exclude_node")
# Determined's bounds: -1 keeps logs forever; the top is its database column's (a smallint).
LOG_RETENTION_DAYS = (-1, 32767)
_D = ExperimentConfig  # class attributes hold the field defaults


def read_experiment(
    data: Mapping[str, Any], problems: Problems, airflow_defaults: Mapping[str, Any] | None
) -> ExperimentConfig:
    f = Fields(data, "", problems, known=(*FIELDS, *UNTYPED[""], "integrations"))
    for key in (*UNTYPED[""], "integrations"):
        f.mapping(key)  # free-form, but a section all the same
    read_data_layer(data.get("data_layer"), problems)
    read_integrations(data.get("integrations"), problems)
    _check_internal(f)
    resources = read_resources(data.get("resources"), problems)
    searcher = read_searcher(data.get("searcher"), problems)
    hparams = read_hyperparameters(data.get("hyperparameters"), problems)
    check_global_batch_size(hparams, resources.slots_per_trial, problems)
    if searcher.name == "grid":
        check_grid_counts(hparams, problems)
    workspace, project = f.string("workspace", nonempty=True), f.string("project", nonempty=True)
    if f.given("workspace") != f.given("project"):
        have, lack = ("workspace", "project") if f.given("workspace") else ("project", "workspace")
        f.missing(lack, "a non-empty string", f"when '{have}' is set (give both or neither)")
    return ExperimentConfig(
        entrypoint=_read_entrypoint(f),
        searcher=searcher,
        name=_read_name(f),
        description=_read_description(f),
        labels=_read_labels(f),
        hyperparameters=hparams,
        resources=resources,
        environment=read_environment(data.get("environment"), problems),
        bind_mounts=read_bind_mounts(data.get("bind_mounts"), problems),
        checkpoint_storage=read_checkpoint_storage(data.get("checkpoint_storage"), problems),
        checkpoint_policy=f.choice("checkpoint_policy", ("best", "all", "none"), _D.checkpoint_policy),
        max_restarts=f.integer("max_restarts", _D.max_restarts, low=0, cap=INT32_MAX),
        min_validation_period=_read_period(f, "min_validation_period"),
        min_checkpoint_period=_read_period(f, "min_checkpoint_period"),
        scheduling_unit=f.integer("scheduling_unit", _D.scheduling_unit, low=1, cap=INT32_MAX),
        records_per_epoch=f.integer("records_per_epoch", _D.records_per_epoch, low=0, cap=INT64_MAX),
        perform_initial_validation=f.boolean("perform_initial_validation", _D.perform_initial_validation),
        experiment_seed=_read_seed(f),
        data=dict(f.mapping("data", {})),
        workspace=workspace,
        project=project,
        preemption_timeout=f.integer("preemption_timeout", _D.preemption_timeout, low=0, cap=INT32_MAX),
        profiling=dict(f.mapping("profiling", {})),
        debug=f.boolean("debug", _D.debug),
        log_policies=_read_log_policies(f),
        optimizations=dict(f.mapping("optimizations", {})),
        retention_policy=_read_retention_policy(f),
        airflow=read_airflow(data.get("airflow"), problems, airflow_defaults),
    )


def _read_entrypoint(f: Fields) -> Any:
    value = f.data.get("entrypoint")
    expected = "a command string, or a non-empty list of strings"
    if value is None:
        f.missing("entrypoint", expected + " (e.g. 'python3 train.py')")
    elif isinstance(value, list) and value:
        f.strings("entrypoint", nonempty=True)
        for i, part in enumerate(value):
            if isinstance(part, str) and (problem := command_problem(part)) is not None:
                f.problems.add(item(f.at("entrypoint"), i), problem)
        return tuple(value)
    elif not (isinstance(value, str) and value.strip()):
        f.bad("entrypoint", expected)
    elif (problem := command_problem(value)) is not None:
        f.problems.add(f.at("entrypoint"), problem)
    return value


def _read_name(f: Fields) -> Any:
    name = f.string("name", nonempty=True)
    if isinstance(name, str) and len(name) > MAX_NAME_LENGTH:
        f.bad(
            "name",
            f"a string of at most {MAX_NAME_LENGTH} characters",
            f"{name[:20]}... ({len(name)} characters)",
        )
    elif isinstance(name, str) and (problem := name_problem(name)) is not None:
        f.problems.add(f.at("name"), problem)
    return name if name is not None else generate_name()


def _read_description(f: Fields) -> Any:
    description = f.string("description")
    if isinstance(description, str) and "\x00" in description:
        # The master's database keeps it as text, which cannot hold NUL (PostgreSQL's refuses it).
        f.problems.add(
            f.at("description"),
            f"contains a NUL character (U+0000) at character {description.index(chr(0)) + 1}",
        )
    return description


def _read_labels(f: Fields) -> tuple[str, ...]:
    labels = f.strings("labels", nonempty=True)
    for i, label in enumerate(labels):
        if isinstance(label, str) and (problem := name_problem(label)) is not None:
            f.problems.add(item(f.at("labels"), i), problem)
    return labels


def _read_period(f: Fields, key: str) -> Any:
    default = getattr(_D, key)
    if not f.given(key):
        return default
    return read_length(f.data[key], f.at(key), f.problems) or default


def _read_seed(f: Fields) -> Any:
    repro = f.mapping("reproducibility")
    if repro is None:
        return None
    seeds = Fields(repro, f.at("reproducibility"), f.problems, known=("experiment_seed",))
    return seeds.integer("experiment_seed", low=0, high=MAX_SEED)


def _read_retention_policy(f: Fields) -> RetentionPolicy:
    policy = f.mapping("retention_policy")
    if policy is None:
        return RetentionPolicy()
    p = Fields(policy, f.at("retention_policy"), f.problems, known=("log_retention_days",))
    low, high = LOG_RETENTION_DAYS
    return RetentionPolicy(log_retention_days=p.integer("log_retention_days", low=low, high=high))


def _check_internal(f: Fields) -> None:
    """``internal``: Determined's own field for its removed native API; checked, then left in ``raw``."""
    internal = f.data.get("internal")
    if isinstance(internal, Mapping):
        Fields(internal, f.at("internal"), f.problems, known=("native",))
        native = internal.get("native")
        if isinstance(native, Mapping):  # the form of Determined's own schema cases: {command: [...]}
            Fields(native, join(f.at("internal"), "native"), f.problems, known=("command",)).strings(
                "command"
            )
        else:
            Fields(internal, f.at("internal"), f.problems).strings("native")


def _read_log_policies(f: Fields) -> tuple[LogPolicy, ...]:
    value = f.get("log_policies", [])
    if not isinstance(value, list):
        f.bad("log_policies", "a list of {pattern, action} mappings")
        return ()
    policies = []
    for i, policy in enumerate(value):
        path = item(f.at("log_policies"), i)
        if not isinstance(policy, Mapping):
            f.problems.add(path, f"expected a mapping {{name, pattern, action}}, got {show(policy)}")
            continue
        p = Fields(policy, path, f.problems, known=("name", "pattern", "action"))
        name = p.string("name")
        pattern = p.string("pattern", required=True)
        if isinstance(pattern, str):
            try:
                re.compile(pattern)
            except re.error as exc:
                p.bad("pattern", f"a valid regular expression ({exc})")
        action = p.get("action")
        if isinstance(action, Mapping):  # Determined's older form: {action: {type: cancel_retries}}
            p = Fields(action, p.at("action"), f.problems, known=("type",))
            action = p.choice("type", LOG_ACTIONS, required=True)
        else:
            action = p.choice("action", LOG_ACTIONS)
        policies.append(LogPolicy(pattern=pattern, action=action, name=name))
    return tuple(policies)
