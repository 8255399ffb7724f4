"""`--config key=value` overrides: dotted keys, values read as YAML, applied before validation."""

from __future__ import annotations

import copy

import pytest

from det_airflow.config import ConstHP, DoubleHP, apply_run_conf, parse_config
from det_airflow.errors import ConfigError

from ._configs import MNIST_ADAPTIVE_SEED, MNIST_CONST, minimal


def test_values_are_read_as_yaml_scalars() -> None:
    cfg = parse_config(
        MNIST_ADAPTIVE_SEED,
        overrides=[
            "searcher.max_trials=4",
            "searcher.smaller_is_better=false",
            "searcher.bracket_rungs=[2, 1]",
            "searcher.divisor=3.5",
            "description=a run with = in it",
        ],
    )
    assert (cfg.searcher.max_trials, cfg.searcher.smaller_is_better) == (4, False)
    assert (cfg.searcher.bracket_rungs, cfg.searcher.divisor) == ((2, 1), 3.5)
    assert cfg.description == "a run with = in it"


def test_nested_hyperparameter_bounds() -> None:
    cfg = parse_config(MNIST_ADAPTIVE_SEED, overrides=["hyperparameters.learning_rate.maxval=0.1"])
    assert cfg.hyperparameters["learning_rate"] == DoubleHP(0.0001, 0.1)


def test_sections_the_file_lacks_are_created() -> None:
    cfg = parse_config(
        MNIST_CONST, overrides=["resources.slots_per_trial=2", "reproducibility.experiment_seed=7"]
    )
    assert (cfg.resources.slots_per_trial, cfg.experiment_seed) == (2, 7)


def test_list_items_are_addressed_by_index() -> None:
    config = minimal(bind_mounts=[{"host_path": "/a", "container_path": "/a"}])
    cfg = parse_config(config, overrides=["bind_mounts.0.read_only=true"])
    assert cfg.bind_mounts[0].read_only is True


def test_later_overrides_win() -> None:
    cfg = parse_config(
        MNIST_CONST, overrides=["hyperparameters.dropout1=0.1", "hyperparameters.dropout1=0.3"]
    )
    assert cfg.hyperparameters["dropout1"] == ConstHP(0.3)


def test_an_overridden_value_is_validated_like_the_file() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(MNIST_CONST, overrides=["resources.priority=0"])
    assert info.value.problems == [("resources.priority", "expected an integer between 1 and 99, got 0")]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("searcher.max_trials", "expected key=value (e.g. searcher.max_trials=4), got 'searcher.max_trials'"),
        ("=4", "expected key=value (e.g. searcher.max_trials=4), got '=4'"),
        ("searcher..max_trials=4", "expected key=value"),
        ("searcher.metric.name=x", "cannot apply 'searcher.metric.name=x': searcher.metric is 'validation_loss', "
                                   "not a mapping"),
        ("bind_mounts.3.read_only=true", "cannot apply 'bind_mounts.3.read_only=true': bind_mounts has no item 3"),
        ("labels=[a, b", "cannot read the value of 'labels=[a, b' as YAML"),
    ],
)  # fmt: skip
def test_a_bad_override_is_named(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(MNIST_CONST + "bind_mounts: []\n", overrides=[override])
    [(path, text)] = info.value.problems
    assert path == "--config"
    assert message in text


# --- a DAG run's conf on a YAML dropped into dags/ ---------------------------------------------------

RAW = {
    "name": "digits",
    "description": "from the YAML",
    "entrypoint": "python3 train.py",
    "hyperparameters": {"lr": 0.1, "layers": {"type": "int", "minval": 1, "maxval": 4}},
    "searcher": {"name": "random", "metric": "loss", "max_trials": 4, "max_length": 100},
    "resources": {"priority": 40},
}


def test_a_run_conf_sets_what_the_trigger_form_offers() -> None:
    data = copy.deepcopy(RAW)

    problems = apply_run_conf(
        data,
        {
            "description": "by hand",
            "hyperparameters": {"lr": 0.5},
            "searcher": {"max_trials": 9, "max_length": None},
            "resources": {"resource_pool": "gpus", "priority": None},
        },
    )

    assert problems == []
    assert data["description"] == "by hand"
    assert data["hyperparameters"] == {"lr": 0.5, "layers": RAW["hyperparameters"]["layers"]}
    assert data["searcher"] == {**RAW["searcher"], "max_trials": 9}  # None keeps the YAML's value
    assert data["resources"] == {"priority": 40, "resource_pool": "gpus"}
    assert parse_config(data).searcher.max_trials == 9


def test_a_run_conf_outside_what_a_run_may_set_names_each_field() -> None:
    data = copy.deepcopy(RAW)

    problems = apply_run_conf(
        data,
        {"entrypoint": "rm -rf /", "searcher": {"metric": "acc"}, "hyperparameters": {"momentum": 0.9}},
    )

    assert [path for path, _ in problems] == ["entrypoint", "searcher.metric", "hyperparameters.momentum"]
    assert problems[0][1].startswith("cannot be set by a run; a run may set description, hyperparameters, ")
    assert problems[2][1] == "not a hyperparameter of this experiment (it has: lr, layers)"
    assert data == RAW  # nothing applied from a refused key


def test_a_run_conf_of_the_wrong_shape_is_refused() -> None:
    assert apply_run_conf({}, ["lr"]) == [("", "the run's conf must be a mapping, got ['lr']")]
    assert apply_run_conf(copy.deepcopy(RAW), {"searcher": 5}) == [("searcher", "expected a mapping, got 5")]
