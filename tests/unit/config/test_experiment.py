"""The top level: required fields, defaults, and every top-level field's checks."""

from __future__ import annotations

from typing import Any

import pytest

from det_airflow.config import Length, LogPolicy, parse_config

from ._configs import MNIST_CONST, assert_problem, minimal, problems_of


def test_mnist_const() -> None:
    cfg = parse_config(MNIST_CONST)
    assert cfg.name == "mnist_pytorch_const"
    assert cfg.entrypoint == "python3 train.py"
    assert (cfg.searcher.name, cfg.searcher.metric, cfg.searcher.max_length) == (
        "single",
        "validation_loss",
        Length("batches", 937),
    )


def test_defaults_are_filled_in() -> None:
    cfg = parse_config(minimal(name="x"))
    assert (cfg.description, cfg.labels, cfg.hyperparameters) == (None, (), {})
    assert (cfg.checkpoint_storage, cfg.checkpoint_policy, cfg.max_restarts) == (None, "best", 5)
    assert cfg.min_validation_period == cfg.min_checkpoint_period == Length("batches", 0)
    assert (cfg.scheduling_unit, cfg.records_per_epoch, cfg.perform_initial_validation) == (100, 0, False)
    assert (cfg.experiment_seed, cfg.workspace, cfg.project, cfg.preemption_timeout) == (
        None,
        None,
        None,
        3600,
    )
    assert (cfg.data, cfg.profiling, cfg.optimizations, cfg.debug, cfg.log_policies) == (
        {},
        {},
        {},
        False,
        (),
    )


def test_a_missing_name_is_generated() -> None:
    assert parse_config(minimal()).name.startswith("Experiment (")


def test_a_list_entrypoint_is_kept_as_arguments() -> None:
    cfg = parse_config(
        minimal(entrypoint=["python3", "-m", "det_airflow.launchers.torch_distributed", "train.py"])
    )
    assert cfg.entrypoint == ("python3", "-m", "det_airflow.launchers.torch_distributed", "train.py")


def test_legacy_trial_class_entrypoint_is_accepted() -> None:
    assert parse_config(minimal(entrypoint="model_def:MNistTrial")).entrypoint == "model_def:MNistTrial"


def test_every_top_level_field() -> None:
    cfg = parse_config(
        minimal(
            name="full",
            description="everything set",
            labels=["mnist", "baseline"],
            checkpoint_policy="all",
            max_restarts=0,
            min_validation_period={"epochs": 1},
            min_checkpoint_period={"records": 6400},
            scheduling_unit=50,
            records_per_epoch=60000,
            perform_initial_validation=True,
            reproducibility={"experiment_seed": 1234},
            data={"url": "s3://mnist", "secrets": {"token": "t"}},
            workspace="research",
            project="vision",
            preemption_timeout=60,
            profiling={"enabled": True},
            debug=True,
            optimizations={"aggregation_frequency": 2},
            log_policies=[
                {"name": "oom", "pattern": "CUDA out of memory", "action": "cancel_retries"},
                {"pattern": ".*uncorrectable ECC error.*", "action": {"type": "exclude_node"}},
            ],
        )
    )
    assert (cfg.description, cfg.labels, cfg.checkpoint_policy, cfg.max_restarts) == (
        "everything set",
        ("mnist", "baseline"),
        "all",
        0,
    )
    assert (cfg.min_validation_period, cfg.min_checkpoint_period) == (
        Length("epochs", 1),
        Length("records", 6400),
    )
    assert (cfg.scheduling_unit, cfg.records_per_epoch, cfg.perform_initial_validation) == (50, 60000, True)
    assert (cfg.experiment_seed, cfg.workspace, cfg.project, cfg.preemption_timeout) == (
        1234,
        "research",
        "vision",
        60,
    )
    assert cfg.data == {"url": "s3://mnist", "secrets": {"token": "t"}}
    assert (cfg.profiling, cfg.debug, cfg.optimizations) == (
        {"enabled": True},
        True,
        {"aggregation_frequency": 2},
    )
    assert cfg.log_policies == (
        LogPolicy("CUDA out of memory", "cancel_retries", name="oom"),
        LogPolicy(".*uncorrectable ECC error.*", "exclude_node"),
    )


@pytest.mark.parametrize("seed", [0, 2**31 - 1])
def test_experiment_seed_bounds_are_inclusive(seed: int) -> None:
    assert parse_config(minimal(reproducibility={"experiment_seed": seed})).experiment_seed == seed


BAD_TOP_LEVEL = [
    pytest.param({"entrypoint": None}, "entrypoint", "missing required field; expected a command string",
                 id="no-entrypoint"),
    pytest.param({"entrypoint": []}, "entrypoint",
                 "expected a command string, or a non-empty list of strings, got []", id="entrypoint-empty-list"),
    pytest.param({"entrypoint": "  "}, "entrypoint", "expected a command string", id="entrypoint-blank"),
    pytest.param({"entrypoint": 5}, "entrypoint", "got 5", id="entrypoint-number"),
    pytest.param({"entrypoint": ["python3", 3]}, "entrypoint[1]", "expected a non-empty string, got 3",
                 id="entrypoint-list-item"),
    pytest.param({"name": "x" * 200}, "name", "expected a string of at most 128 characters, got 'xxxx",
                 id="name-too-long"),
    pytest.param({"name": 5}, "name", "expected a non-empty string, got 5", id="name-number"),
    pytest.param({"description": ["a"]}, "description", "expected a string, got ['a']", id="description-list"),
    pytest.param({"labels": "mnist"}, "labels", "expected a list of strings, got 'mnist'", id="labels-string"),
    pytest.param({"labels": ["ok", 1]}, "labels[1]", "expected a non-empty string, got 1", id="label-number"),
    pytest.param({"checkpoint_policy": "latest"}, "checkpoint_policy",
                 "expected one of best, all, none, got 'latest'", id="checkpoint-policy"),
    pytest.param({"max_restarts": True}, "max_restarts", "expected an integer >= 0, got true", id="max_restarts-bool"),
    pytest.param({"max_restarts": -1}, "max_restarts", "expected an integer >= 0, got -1", id="max_restarts-negative"),
    pytest.param({"min_validation_period": 100}, "min_validation_period",
                 "expected a length such as {batches: 937}, got 100", id="period-bare-int"),
    pytest.param({"min_checkpoint_period": {"epochs": "x"}}, "min_checkpoint_period.epochs",
                 "expected an integer >= 0, got 'x'", id="period-text"),
    pytest.param({"scheduling_unit": 0}, "scheduling_unit", "expected an integer >= 1, got 0", id="scheduling-unit"),
    pytest.param({"records_per_epoch": -5}, "records_per_epoch", "expected an integer >= 0, got -5",
                 id="records-per-epoch"),
    pytest.param({"perform_initial_validation": "true"}, "perform_initial_validation",
                 "expected true or false, got 'true'", id="quoted-bool"),
    pytest.param({"reproducibility": {"experiment_seed": -1}}, "reproducibility.experiment_seed",
                 "expected an integer between 0 and 2147483647, got -1", id="seed-negative"),
    pytest.param({"reproducibility": {"experiment_seed": 2**31}}, "reproducibility.experiment_seed",
                 "expected an integer between 0 and 2147483647, got 2147483648", id="seed-too-big"),
    pytest.param({"reproducibility": {"seed": 1}}, "reproducibility.seed",
                 "unknown field; did you mean 'experiment_seed'?", id="seed-typo"),
    pytest.param({"reproducibility": 7}, "reproducibility", "expected a mapping, got 7", id="reproducibility-int"),
    pytest.param({"workspace": "research"}, "project", "required when 'workspace' is set", id="workspace-alone"),
    pytest.param({"project": "vision"}, "workspace", "required when 'project' is set", id="project-alone"),
    pytest.param({"preemption_timeout": -1}, "preemption_timeout", "expected an integer >= 0, got -1",
                 id="preemption-timeout"),
    pytest.param({"data": [1]}, "data", "expected a mapping, got [1]", id="data-list"),
    pytest.param({"profiling": "on"}, "profiling", "expected a mapping, got 'on'", id="profiling-text"),
    pytest.param({"debug": "on"}, "debug", "expected true or false, got 'on'", id="debug-text"),
    pytest.param({"log_policies": [{"pattern": "[", "action": "cancel_retries"}]}, "log_policies[0].pattern",
                 "expected a valid regular expression", id="log-policy-regex"),
    pytest.param({"log_policies": [{"pattern": "x", "action": "retry"}]}, "log_policies[0].action",
                 "expected one of cancel_retries, exclude_node, got 'retry'", id="log-policy-action"),
    pytest.param({"log_policies": [{"pattern": "x", "action": {"type": "skip"}}]}, "log_policies[0].action.type",
                 "expected one of cancel_retries, exclude_node, got 'skip'", id="log-policy-old-form"),
    pytest.param({"log_policies": [{"action": "exclude_node"}]}, "log_policies[0].pattern",
                 "missing required field; expected a string", id="log-policy-no-pattern"),
    pytest.param({"log_policies": {"pattern": "x"}}, "log_policies", "expected a list of {pattern, action} mappings",
                 id="log-policies-mapping"),
    pytest.param({"hyperparameter": {}}, "hyperparameter", "unknown field; did you mean 'hyperparameters'?",
                 id="top-level-typo"),
    pytest.param({"max_restart": 3}, "max_restart", "unknown field; did you mean 'max_restarts'?",
                 id="max_restart-typo"),
    pytest.param({"min_validation_periods": {"batches": 1}}, "min_validation_periods",
                 "unknown field; did you mean 'min_validation_period'?", id="period-typo"),
    pytest.param({"banana": 1}, "banana", "unknown field", id="unknown-top-level"),
]  # fmt: skip


@pytest.mark.parametrize(("fields", "path", "message"), BAD_TOP_LEVEL)
def test_bad_top_level_field_is_reported_at_its_path(fields: dict[str, Any], path: str, message: str) -> None:
    config = {k: v for k, v in minimal(**fields).items() if v is not None}
    assert_problem(problems_of(config), path, message)


@pytest.mark.parametrize("top", [None, [1, 2], "just a string", 42])
def test_the_top_level_must_be_a_mapping(top: Any) -> None:
    assert_problem(
        problems_of(top), "", "expected a mapping of fields (such as 'searcher:') at the top level"
    )
