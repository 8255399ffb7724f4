"""The checkpoint_storage section: each storage type and what it cannot do without."""

from __future__ import annotations

from typing import Any

import pytest

from det_airflow.config import CheckpointStorageConfig, config_to_dict, parse_config

from ._configs import assert_problem, minimal, problems_of


def test_absent_means_the_default_storage_chosen_later() -> None:
    assert parse_config(minimal()).checkpoint_storage is None


def test_shared_fs_with_gc_counts() -> None:
    storage = parse_config(
        minimal(
            checkpoint_storage={
                "type": "shared_fs",
                "host_path": "/mnt/checkpoints",
                "storage_path": "mnist",
                "save_experiment_best": 2,
                "save_trial_latest": 0,
            }
        )
    ).checkpoint_storage
    assert storage == CheckpointStorageConfig(
        type="shared_fs",
        host_path="/mnt/checkpoints",
        storage_path="mnist",
        save_experiment_best=2,
        save_trial_best=1,
        save_trial_latest=0,
    )


def test_provider_specific_keys_are_kept_as_options() -> None:
    written = {
        "type": "s3",
        "bucket": "ckpts",
        "prefix": "team-a",
        "access_key": "AKIA",
        "secret_key": "s3cr3t",
        "endpoint_url": "http://minio:9000",
    }
    cfg = parse_config(minimal(checkpoint_storage=written))
    assert cfg.checkpoint_storage is not None
    assert (cfg.checkpoint_storage.bucket, cfg.checkpoint_storage.prefix) == ("ckpts", "team-a")
    assert cfg.checkpoint_storage.options == {
        "access_key": "AKIA",
        "secret_key": "s3cr3t",
        "endpoint_url": "http://minio:9000",
    }
    assert config_to_dict(cfg)["checkpoint_storage"] == {
        **written,
        "save_experiment_best": 0,
        "save_trial_best": 1,
        "save_trial_latest": 1,
    }


@pytest.mark.parametrize(
    "storage",
    [
        {"type": "directory", "container_path": "/ckpt"},
        {"type": "gcs", "bucket": "b"},
        {"type": "azure", "container": "c", "connection_string": "..."},
    ],
)
def test_other_storage_types(storage: dict[str, Any]) -> None:
    cfg = parse_config(minimal(checkpoint_storage=storage))
    assert cfg.checkpoint_storage is not None and cfg.checkpoint_storage.type == storage["type"]


BAD_STORAGE = [
    pytest.param({"type": None, "host_path": "/mnt", "save_trial_best": -1}, "checkpoint_storage.save_trial_best",
                 "expected an integer >= 0, got -1", id="no-type-bad-count"),
    pytest.param({"type": "nfs"}, "checkpoint_storage.type",
                 "expected one of shared_fs, directory, s3, gcs, azure, got 'nfs'", id="unknown-type"),
    pytest.param({"type": "shared_fs"}, "checkpoint_storage.host_path", "required for shared_fs storage",
                 id="shared_fs-no-host_path"),
    pytest.param({"type": "shared_fs", "host_path": "ckpt"}, "checkpoint_storage.host_path",
                 "expected an absolute path, got 'ckpt'", id="shared_fs-relative"),
    pytest.param({"type": "directory"}, "checkpoint_storage.container_path", "required for directory storage",
                 id="directory-no-path"),
    pytest.param({"type": "s3", "prefix": "x"}, "checkpoint_storage.bucket", "required for s3 storage",
                 id="s3-no-bucket"),
    pytest.param({"type": "azure"}, "checkpoint_storage.container", "required for azure storage",
                 id="azure-no-container"),
    pytest.param({"type": "gcs", "bucket": "b", "save_trial_best": -1}, "checkpoint_storage.save_trial_best",
                 "expected an integer >= 0, got -1", id="negative-gc-count"),
    pytest.param({"type": "gcs", "bucket": "b", "save_trial_bset": 2}, "checkpoint_storage.save_trial_bset",
                 "unknown field; did you mean 'save_trial_best'?", id="near-miss"),
]  # fmt: skip


@pytest.mark.parametrize(("storage", "path", "message"), BAD_STORAGE)
def test_bad_storage_is_reported_at_its_field(storage: dict[str, Any], path: str, message: str) -> None:
    assert_problem(problems_of(minimal(checkpoint_storage=storage)), path, message)


def test_the_section_must_be_a_mapping() -> None:
    assert_problem(
        problems_of(minimal(checkpoint_storage="/mnt")), "checkpoint_storage", "expected a mapping"
    )
