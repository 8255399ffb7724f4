"""The airflow section: det-airflow's own settings over defaults from airflow.cfg [det]."""

from __future__ import annotations

from typing import Any

import pytest

from det_airflow.config import AirflowSection, parse_config

from ._configs import assert_problem, minimal, problems_of


def test_built_in_defaults() -> None:
    assert parse_config(minimal()).airflow == AirflowSection()


def test_airflow_cfg_defaults_apply_where_the_yaml_is_silent() -> None:
    defaults = {"executor": "docker", "pool": "gpu-a100", "docker_conn_id": "docker_gpu"}
    section = parse_config(minimal(airflow={"pool": "cpu"}), airflow_defaults=defaults).airflow
    assert (section.executor, section.pool, section.docker_conn_id) == ("docker", "cpu", "docker_gpu")


def test_other_det_settings_and_empty_values_in_the_defaults_are_ignored() -> None:
    defaults = {"queue": "", "checkpoint_storage": "/mnt", "namespace": "ml"}
    section = parse_config(minimal(), airflow_defaults=defaults).airflow
    assert (section.queue, section.namespace) == (None, "ml")


def test_every_field() -> None:
    written = {
        "executor": "kubernetes",
        "trial_runner": "docker",
        "pool": "gpu",
        "queue": "gpu-workers",
        "master_conn_id": "det_prod",
        "docker_conn_id": "d",
        "kubernetes_conn_id": "k8s",
        "namespace": "training",
    }
    assert parse_config(minimal(airflow=written)).airflow == AirflowSection(**written)


BAD_AIRFLOW = [
    pytest.param({"executor": "celery"}, "airflow.executor",
                 "expected one of local, docker, kubernetes, got 'celery'", id="executor"),
    pytest.param({"pol": "gpu"}, "airflow.pol", "unknown field; did you mean 'pool'?", id="pool-typo"),
    pytest.param({"pool": ""}, "airflow.pool", "expected a non-empty string, got ''", id="pool-empty"),
    pytest.param({"namespace": 3}, "airflow.namespace", "expected a non-empty string, got 3", id="namespace-number"),
]  # fmt: skip


@pytest.mark.parametrize(("section", "path", "message"), BAD_AIRFLOW)
def test_bad_airflow_setting_is_reported_at_its_field(
    section: dict[str, Any], path: str, message: str
) -> None:
    assert_problem(problems_of(minimal(airflow=section)), path, message)


def test_a_bad_default_points_at_airflow_cfg() -> None:
    problems = problems_of(minimal(), airflow_defaults={"executor": "celery"})
    assert_problem(problems, "airflow.executor", "(the default set in airflow.cfg [det])")
