"""Loading: files, YAML text and mappings in; one ConfigError with every problem out."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from det_airflow.config import is_experiment_mapping, load_config, parse_config
from det_airflow.errors import ConfigError

from ._configs import MNIST_CONST, minimal


def test_load_a_file(tmp_path: Path) -> None:
    path = tmp_path / "const.yaml"
    path.write_text(MNIST_CONST)
    cfg = load_config(path)
    assert (cfg.name, cfg.searcher.metric) == ("mnist_pytorch_const", "validation_loss")


def test_load_applies_overrides_and_airflow_defaults(tmp_path: Path) -> None:
    path = tmp_path / "const.yaml"
    path.write_text(MNIST_CONST)
    cfg = load_config(str(path), overrides=["resources.slots_per_trial=2"], airflow_defaults={"pool": "gpu"})
    assert (cfg.resources.slots_per_trial, cfg.airflow.pool) == (2, "gpu")


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}: no such file"
    assert info.value.source == str(path)


def test_a_directory_is_not_a_config(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the file"):
        load_config(tmp_path)


def test_yaml_syntax_error_gives_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("name: x\nsearcher:\n  name: single\n  metric: a: b\nentrypoint: python3 train.py\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert (
        str(info.value) == f"{path}: invalid YAML at line 4, column 12: mapping values are not allowed here"
    )


def test_yaml_tab_indentation_is_reported_where_it_is() -> None:
    with pytest.raises(ConfigError, match="line 2, column 1: found character '\\\\t'"):
        parse_config("searcher:\n\tname: single\n")


def test_an_empty_file_is_not_a_config() -> None:
    with pytest.raises(ConfigError, match="expected a mapping of fields .* at the top level, got null"):
        parse_config("", source_name="empty.yaml")


def test_every_problem_is_reported_at_once_one_per_line() -> None:
    text = """\
searcher:
  name: random
  metric: validation_loss
  max_trials: ten
  max_trail: 3
resources:
  priority: 0
bind_mounts:
  - host_path: data
    container_path: /data
"""
    with pytest.raises(ConfigError) as info:
        parse_config(text, source_name="exp.yaml")
    # In the order the file is written; what is missing comes last.
    assert info.value.problems == [
        ("searcher.max_trail", "unknown field; did you mean 'max_trials'?"),
        ("searcher.max_trials", "expected an integer >= 1, got 'ten'"),
        ("resources.priority", "expected an integer between 1 and 99, got 0"),
        ("bind_mounts[0].host_path", "expected an absolute path, got 'data'"),
        ("entrypoint", "missing required field; expected a command string, or a non-empty list of strings "
         "(e.g. 'python3 train.py')"),
    ]  # fmt: skip
    lines = str(info.value).splitlines()
    assert len(lines) == 5
    assert all(line.startswith("exp.yaml: ") for line in lines)
    assert "exp.yaml: searcher.max_trials: expected an integer >= 1, got 'ten'" in lines


def test_a_mapping_is_accepted_and_left_untouched() -> None:
    config = minimal(hyperparameters={"lr": 0.1})
    before = repr(config)
    parse_config(config, overrides=["hyperparameters.lr=0.2"])
    assert repr(config) == before


def test_raw_keeps_what_the_user_wrote_after_overrides() -> None:
    cfg = parse_config(MNIST_CONST, overrides=["searcher.max_length.batches=10"])
    assert cfg.raw["searcher"] == {
        "name": "single",
        "metric": "validation_loss",
        "max_length": {"batches": 10},
        "smaller_is_better": True,
    }
    assert "resources" not in cfg.raw


def test_yaml_dates_become_strings_as_in_json() -> None:
    cfg = parse_config(MNIST_CONST + "data: {snapshot: 2024-05-01}\n")
    assert cfg.data == {"snapshot": "2024-05-01"}
    assert parse_config(minimal(data={"at": datetime.date(2024, 5, 1)})).data == {"at": "2024-05-01"}


def test_yaml_1_1_booleans_are_booleans() -> None:
    cfg = parse_config(MNIST_CONST + "debug: yes\nperform_initial_validation: on\n")
    assert (cfg.debug, cfg.perform_initial_validation) == (True, True)


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        ({"searcher": {"name": "single"}, "entrypoint": "x"}, True),
        ({"searcher": None}, True),
        ({"dags": ["a"]}, False),
        (["searcher"], False),
        ("searcher: x", False),
        (None, False),
    ],
)
def test_experiment_yamls_are_the_mappings_with_a_searcher(obj: object, expected: bool) -> None:
    assert is_experiment_mapping(obj) is expected
