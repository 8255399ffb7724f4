"""airflow section edges: exact messages, empty names, and which problems blame airflow.cfg [det]."""

from __future__ import annotations

import pytest

from det_airflow.config import parse_config

from ._configs import minimal, problems_of

CFG = " (the default set in airflow.cfg [det])"


def test_a_section_that_is_not_a_mapping_is_refused() -> None:
    assert problems_of(minimal(airflow="docker")) == [("airflow", "expected a mapping, got 'docker'")]


@pytest.mark.parametrize("field", ["queue", "master_conn_id", "docker_conn_id", "kubernetes_conn_id"])
def test_an_empty_name_in_the_yaml_is_refused(field: str) -> None:
    assert problems_of(minimal(airflow={field: ""})) == [
        (f"airflow.{field}", "expected a non-empty string, got ''")
    ]


def test_an_unset_connection_stays_unset_when_the_section_names_other_fields() -> None:
    section = parse_config(minimal(airflow={"pool": "gpu"})).airflow
    assert (section.queue, section.docker_conn_id, section.kubernetes_conn_id) == (None, None, None)


def test_a_bad_yaml_value_over_a_good_default_is_the_yaml_authors_mistake() -> None:
    problems = problems_of(minimal(airflow={"executor": "celery"}), airflow_defaults={"executor": "docker"})
    assert problems == [("airflow.executor", "expected one of local, docker, kubernetes, got 'celery'")]


def test_a_bad_default_the_yaml_leaves_alone_blames_airflow_cfg() -> None:
    problems = problems_of(minimal(airflow={"pool": "gpu"}), airflow_defaults={"namespace": 7})
    assert problems == [("airflow.namespace", "expected a non-empty string, got 7" + CFG)]


def test_a_misplaced_top_level_field_that_shares_a_defaults_name_does_not_blame_airflow_cfg() -> None:
    problems = problems_of(minimal(pool="gpu"), airflow_defaults={"pool": "cpu"})
    assert problems == [("pool", "unknown field")]
