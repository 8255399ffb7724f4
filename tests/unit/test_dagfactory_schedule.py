"""``airflow.schedule``: an experiment YAML in the DAGs folder whose DAG runs, each run a new
experiment, when upstream Assets get new events."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("airflow")

from airflow.sdk import Asset  # noqa: E402

from det_airflow.config import config_to_dict, parse_config  # noqa: E402
from det_airflow.dagfactory import INVALID_TASK_ID, build_dags  # noqa: E402
from det_airflow.errors import ConfigError  # noqa: E402

BASE = {
    "name": "digits",
    "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "loss", "max_length": 10},
}
YAML = """\
name: digits
entrypoint: python3 train.py
searcher: {{name: single, metric: loss, max_length: 10}}
airflow: {{schedule: {schedule}}}
"""


def test_one_uri_or_a_list_is_read_and_written_back() -> None:
    one = parse_config({**BASE, "airflow": {"schedule": "s3://data/mnist"}})
    two = parse_config({**BASE, "airflow": {"schedule": ["s3://data/mnist", "det://experiments/det_prep"]}})

    assert one.airflow.schedule == ("s3://data/mnist",)
    assert config_to_dict(two)["airflow"]["schedule"] == ["s3://data/mnist", "det://experiments/det_prep"]
    assert "schedule" not in config_to_dict(parse_config(BASE))["airflow"]


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ("mnist", "airflow.schedule: expected an Asset URI such as 's3://data/mnist', got 'mnist'"),
        (["s3://a", 3], "airflow.schedule[1]: expected an Asset URI such as 's3://data/mnist', got 3"),
        ([], "airflow.schedule: expected an Asset URI or a non-empty list of them, got []"),
        ({"assets": ["s3://a"]}, "airflow.schedule: expected an Asset URI or a non-empty list of them"),
    ],
)
def test_a_bad_schedule_is_reported_at_its_field(schedule: object, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config({**BASE, "airflow": {"schedule": schedule}})
    assert message in str(raised.value)


def test_an_airflow_cfg_default_never_schedules_an_experiment() -> None:
    assert parse_config(BASE, airflow_defaults={"schedule": "s3://data/mnist"}).airflow.schedule == ()


def test_a_dropped_yaml_is_scheduled_on_its_assets(tmp_path: Path) -> None:
    (tmp_path / "digits.yaml").write_text(
        YAML.format(schedule="[s3://data/mnist, det://experiments/det_prep]")
    )

    dag: Any = build_dags(tmp_path)["det_digits"]

    assert type(dag.timetable).__name__ == "AssetTriggeredTimetable"
    # A list: a run once every Asset has a new event since the last run.
    assert type(dag.timetable.asset_condition).__name__ == "AssetAll"
    assert list(dag.timetable.asset_condition.objects) == [
        Asset("s3://data/mnist"),
        Asset("det://experiments/det_prep", group="det"),
    ]
    # Each Asset-triggered run goes through `register` with no conf: a new experiment of the YAML.
    assert dag.task_dict["register"].experiment_id is None
    assert dag.task_dict["finalize"].outlets == [Asset("det://experiments/det_digits", group="det")]


def test_a_bad_schedule_is_an_invalid_dag_naming_the_file(tmp_path: Path) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    (tmp_path / "digits.yaml").write_text(YAML.format(schedule="mnist"))

    dag = build_dags(tmp_path)["det_digits"]

    assert "invalid" in dag.tags  # type: ignore[attr-defined]
    with pytest.raises(AirflowFailException, match=r"digits.yaml.*airflow.schedule: expected an Asset URI"):
        dag.task_dict[INVALID_TASK_ID].execute({})  # type: ignore[attr-defined]
