"""`--config key=value` overrides: dotted keys, values read as YAML, applied before validation."""

from __future__ import annotations

import pytest

from det_airflow.config import ConstHP, DoubleHP, parse_config
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
