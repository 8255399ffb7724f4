"""checkpoint_storage edges: the exact messages for empty and missing paths, and the values each type keeps."""

from __future__ import annotations

from typing import Any

import pytest

from det_airflow.config import CheckpointStorageConfig, parse_config

from ._configs import minimal, problems_of


def storage_of(section: dict[str, Any]) -> CheckpointStorageConfig | None:
    return parse_config(minimal(checkpoint_storage=section)).checkpoint_storage


def test_a_section_that_is_not_a_mapping_is_quoted_back() -> None:
    assert problems_of(minimal(checkpoint_storage="/mnt")) == [
        (
            "checkpoint_storage",
            "expected a mapping such as {type: shared_fs, host_path: /mnt/ckpt}, got '/mnt'",
        )
    ]


@pytest.mark.parametrize(
    ("section", "path", "message"),
    [
        (
            {"type": "shared_fs"},
            "checkpoint_storage.host_path",
            "required for shared_fs storage; expected a non-empty string",
        ),
        (
            {"type": "directory"},
            "checkpoint_storage.container_path",
            "required for directory storage; expected a non-empty string",
        ),
        (
            {"type": "gcs"},
            "checkpoint_storage.bucket",
            "required for gcs storage; expected a non-empty string",
        ),
        (
            {"type": "azure"},
            "checkpoint_storage.container",
            "required for azure storage; expected a non-empty string",
        ),
    ],
)
def test_the_field_a_type_cannot_do_without_is_named_exactly(
    section: dict[str, Any], path: str, message: str
) -> None:
    assert problems_of(minimal(checkpoint_storage=section)) == [(path, message)]


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ({"type": "shared_fs", "host_path": ""}, "host_path"),
        ({"type": "s3", "bucket": "b", "host_path": ""}, "host_path"),
        ({"type": "shared_fs", "host_path": "/mnt", "storage_path": ""}, "storage_path"),
        ({"type": "directory", "container_path": ""}, "container_path"),
        ({"type": "s3", "bucket": ""}, "bucket"),
        ({"type": "azure", "container": ""}, "container"),
    ],
)
def test_an_empty_path_or_name_is_refused_as_not_a_non_empty_string(
    section: dict[str, Any], field: str
) -> None:
    assert problems_of(minimal(checkpoint_storage=section)) == [
        (f"checkpoint_storage.{field}", "expected a non-empty string, got ''")
    ]


def test_an_empty_prefix_is_allowed() -> None:
    storage = storage_of({"type": "s3", "bucket": "b", "prefix": ""})
    assert storage is not None and storage.prefix == ""


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        (
            {"type": "directory", "container_path": "/ckpt"},
            CheckpointStorageConfig(type="directory", container_path="/ckpt"),
        ),
        (
            {"type": "azure", "container": "models", "connection_string": "AccountName=x"},
            CheckpointStorageConfig(
                type="azure", container="models", options={"connection_string": "AccountName=x"}
            ),
        ),
        (
            {"type": "gcs", "bucket": "b", "prefix": "p"},
            CheckpointStorageConfig(type="gcs", bucket="b", prefix="p"),
        ),
    ],
)
def test_each_type_keeps_the_paths_it_was_given(
    section: dict[str, Any], expected: CheckpointStorageConfig
) -> None:
    assert storage_of(section) == expected


@pytest.mark.parametrize("key", ["bucket_name", "storage_class", "container_name", "save_best"])
def test_a_provider_key_only_loosely_like_one_of_ours_is_kept_as_an_option(key: str) -> None:
    storage = storage_of({"type": "s3", "bucket": "b", key: "x"})
    assert storage is not None and storage.options == {key: "x"}


def test_a_near_miss_of_one_of_our_fields_is_refused_with_a_suggestion() -> None:
    assert problems_of(
        minimal(checkpoint_storage={"type": "shared_fs", "host_path": "/m", "host_paths": "/n"})
    ) == [("checkpoint_storage.host_paths", "unknown field; did you mean 'host_path'?")]
