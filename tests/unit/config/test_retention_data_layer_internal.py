"""Determined 0.38's ``retention_policy``, ``data_layer`` and ``internal``: accepted with the types
Determined's schema gives them. ``retention_policy`` is acted on (the master deletes expired logs);
the other two are named in the one warning line of fields det-airflow does not act on."""

from __future__ import annotations

from typing import Any

import pytest

from det_airflow.config import RetentionPolicy, config_to_dict, parse_config

from ._configs import minimal, problems_of

WARNING = "accepted but not acted on by det-airflow: "


@pytest.mark.parametrize("days", [-1, 0, 30, 32767])
def test_log_retention_days_is_read_and_draws_no_warning(days: int) -> None:
    cfg = parse_config(minimal(retention_policy={"log_retention_days": days}))

    assert cfg.retention_policy == RetentionPolicy(log_retention_days=days)
    assert cfg.warnings == ()


def test_without_a_retention_policy_the_cluster_default_decides() -> None:
    assert parse_config(minimal()).retention_policy.log_retention_days is None
    assert parse_config(minimal(retention_policy=None)).retention_policy.log_retention_days is None
    assert parse_config(minimal(retention_policy={})).retention_policy.log_retention_days is None


def test_the_stored_config_carries_the_retention_policy_and_reads_back() -> None:
    stored = config_to_dict(parse_config(minimal(retention_policy={"log_retention_days": 3})))

    assert stored["retention_policy"] == {"log_retention_days": 3}
    assert parse_config(stored).retention_policy.log_retention_days == 3


@pytest.mark.parametrize(
    ("policy", "problem"),
    [
        (
            {"log_retention_days": -2},
            ("retention_policy.log_retention_days", "expected an integer between -1 and 32767, got -2"),
        ),
        (
            {"log_retention_days": 32768},
            ("retention_policy.log_retention_days", "expected an integer between -1 and 32767, got 32768"),
        ),
        (
            {"log_retention_days": "30"},
            ("retention_policy.log_retention_days", "expected an integer between -1 and 32767, got '30'"),
        ),
        (
            {"log_retention_days": 1.5},
            ("retention_policy.log_retention_days", "expected an integer between -1 and 32767, got 1.5"),
        ),
        (
            {"log_retention_days": True},
            ("retention_policy.log_retention_days", "expected an integer between -1 and 32767, got true"),
        ),
        (
            {"checkpoint_retention_days": 3},
            (
                "retention_policy.checkpoint_retention_days",
                "unknown field; did you mean 'log_retention_days'?",
            ),
        ),
        ([7], ("retention_policy", "expected a mapping, got [7]")),
    ],
)
def test_a_bad_retention_policy_is_refused_naming_the_field(policy: Any, problem: tuple[str, str]) -> None:
    assert problems_of(minimal(retention_policy=policy)) == [problem]


@pytest.mark.parametrize(
    "layer",
    [
        {"type": "shared_fs"},
        {"type": "shared_fs", "host_storage_path": "/data", "container_storage_path": None},
        {"type": "s3", "bucket": "b", "bucket_directory_path": "cache", "endpoint_url": "http://minio:9000"},
        {
            "type": "gcs",
            "bucket": "b",
            "bucket_directory_path": "cache",
            "local_cache_host_path": "/host/cache",
            "local_cache_container_path": "/cache",
        },
    ],
)
def test_a_data_layer_is_accepted_and_named_as_not_acted_on(layer: dict[str, Any]) -> None:
    cfg = parse_config(minimal(data_layer=layer))

    assert cfg.warnings == (WARNING + "data_layer",)
    assert cfg.raw["data_layer"] == layer


@pytest.mark.parametrize(
    ("layer", "problem"),
    [
        ({}, ("data_layer.type", "missing required field; expected one of shared_fs, s3, gcs")),
        (
            {"type": "hdfs"},
            ("data_layer.type", "expected one of shared_fs, s3, gcs, got 'hdfs'; did you mean 'shared_fs'?"),
        ),
        (
            {"type": "s3", "bucket": "b"},
            ("data_layer.bucket_directory_path", "required when data_layer.type is s3; expected a string"),
        ),
        (
            {"type": "gcs", "bucket": 7, "bucket_directory_path": "p"},
            ("data_layer.bucket", "expected a string, got 7"),
        ),
        (
            {"type": "shared_fs", "host_storage_path": "relative/dir"},
            ("data_layer.host_storage_path", "expected an absolute path, got 'relative/dir'"),
        ),
        (
            {"type": "shared_fs", "bucket": "b"},
            (
                "data_layer.bucket",
                "unknown field; expected one of type, host_storage_path, container_storage_path",
            ),
        ),
        (
            {"type": "s3", "bucket": "b", "bucket_directory_path": "p", "local_cache_container_path": "/c"},
            (
                "data_layer.local_cache_host_path",
                "required when 'local_cache_container_path' is set (give both or neither); expected an absolute path",
            ),
        ),
        ("shared_fs", ("data_layer", "expected a mapping, got 'shared_fs'")),
    ],
)
def test_a_bad_data_layer_is_refused_naming_the_field(layer: Any, problem: tuple[str, str]) -> None:
    assert problems_of(minimal(data_layer=layer)) == [problem]


@pytest.mark.parametrize(
    "internal", [{"native": ["python3", "train.py"]}, {"native": {"command": ["script.py"]}}]
)
def test_internal_is_accepted_and_named_as_not_acted_on(internal: dict[str, Any]) -> None:
    cfg = parse_config(minimal(internal=internal))

    assert cfg.warnings == (WARNING + "internal",)
    assert cfg.raw["internal"] == internal


def test_a_null_internal_sets_nothing() -> None:
    assert parse_config(minimal(internal=None)).warnings == ()


@pytest.mark.parametrize(
    ("internal", "problem"),
    [
        ({"native": ["python3", 3]}, ("internal.native[1]", "expected a string, got 3")),
        ({"native": "train.py"}, ("internal.native", "expected a list of strings, got 'train.py'")),
        ({"native": {"cmd": ["x"]}}, ("internal.native.cmd", "unknown field; did you mean 'command'?")),
        ({"launcher": "x"}, ("internal.launcher", "unknown field; expected one of native")),
        (True, ("internal", "expected a mapping, got true")),
    ],
)
def test_a_bad_internal_is_refused_naming_the_field(internal: Any, problem: tuple[str, str]) -> None:
    assert problems_of(minimal(internal=internal)) == [problem]


def test_the_three_sections_together_draw_one_warning_line_in_the_order_written() -> None:
    cfg = parse_config(
        minimal(
            internal={"native": ["x"]},
            retention_policy={"log_retention_days": 1},
            data_layer={"type": "shared_fs"},
        )
    )

    assert cfg.warnings == (WARNING + "internal, data_layer",)
