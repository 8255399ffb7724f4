"""What an experiment read and wrote, as the Asset event and OpenLineage name it (plain data; the
OpenLineage provider is needed only to wrap it)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from det_airflow.context_archive import pack_context
from det_airflow.lineage import (
    LineageDataset,
    checkpoint_uri,
    context_sha256,
    data_urls,
    dataset_for_uri,
    experiment_asset_uri,
    experiment_inputs,
    experiment_outputs,
    operator_lineage,
)

HAS_OPENLINEAGE = importlib.util.find_spec("airflow.providers.openlineage") is not None


def test_an_experiment_dag_s_asset_is_named_after_the_dag_only() -> None:
    assert experiment_asset_uri("det_mnist") == "det://experiments/det_mnist"


def test_a_checkpoint_uri_is_the_object_store_address_or_a_file_uri_of_its_folder() -> None:
    s3 = {"type": "s3", "bucket": "b", "key": "team/c-1", "path": "s3://b/team/c-1"}
    assert checkpoint_uri(s3) == "s3://b/team/c-1"
    assert checkpoint_uri({"type": "gcs", "path": "gs://b/c-1"}) == "gs://b/c-1"
    assert checkpoint_uri({"type": "shared_fs", "path": "/mnt/ckpt/c-1"}) == "file:///mnt/ckpt/c-1"
    assert checkpoint_uri({"type": "shared_fs", "path": "/mnt/a b/c-1"}) == "file:///mnt/a%20b/c-1"
    assert checkpoint_uri({"type": "shared_fs"}) is None
    assert checkpoint_uri({"type": "directory", "path": "relative/c-1"}) is None


def test_the_data_section_s_urls_are_found_at_any_depth_once_each() -> None:
    data = {
        "train": "s3://data/mnist/train",
        "sets": [{"url": "gs://other/eval"}, "s3://data/mnist/train"],
        "batch_size": 64,
        "note": "downloaded from s3 nightly",
        "local": " file:///srv/data/mnist ",
    }
    assert data_urls(data) == ["s3://data/mnist/train", "gs://other/eval", "file:///srv/data/mnist"]
    assert data_urls(None) == []


def test_datasets_follow_openlineage_naming() -> None:
    assert dataset_for_uri("s3://data/mnist/train") == LineageDataset("s3://data", "mnist/train")
    assert dataset_for_uri("file:///srv/ckpt/c-1") == LineageDataset("file", "/srv/ckpt/c-1")
    assert dataset_for_uri("s3://bucket") == LineageDataset("s3://bucket", "/")


def test_inputs_are_the_data_urls_and_the_context_by_hash(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('hi')\n")
    digest = context_sha256(pack_context(tmp_path).data)
    assert len(digest) == 64

    inputs = experiment_inputs({"train": "s3://data/mnist"}, digest)

    assert inputs == [LineageDataset("s3://data", "mnist"), LineageDataset("det", f"contexts/{digest}")]
    assert experiment_inputs({}, None) == []


def test_outputs_are_one_dataset_per_checkpoint_uri() -> None:
    outputs = experiment_outputs(["s3://b/c-1", None, "s3://b/c-1", "file:///x/c-2"])
    assert outputs == [LineageDataset("s3://b", "c-1"), LineageDataset("file", "/x/c-2")]


def test_the_pipeline_task_records_the_data_urls_and_the_context_hash() -> None:
    pytest.importorskip("airflow.sdk")
    from det_airflow.operators.pipeline import lineage_inputs

    config = "name: x\ndata:\n  train: s3://data/mnist\n  epochs: 3\n"
    assert lineage_inputs(config, b"archive") == {
        "data": ["s3://data/mnist"],
        "context_sha256": context_sha256(b"archive"),
    }
    assert lineage_inputs("data: [unclosed", None) == {"data": [], "context_sha256": None}


@pytest.mark.skipif(
    not HAS_OPENLINEAGE,
    reason="needs apache-airflow-providers-openlineage, an optional extra that is not installed",
)
def test_operator_lineage_wraps_the_datasets() -> None:
    lineage = operator_lineage(
        [LineageDataset("s3://data", "mnist")], [LineageDataset("file", "/srv/ckpt/c-1")]
    )
    assert [(d.namespace, d.name) for d in lineage.inputs] == [("s3://data", "mnist")]
    assert [(d.namespace, d.name) for d in lineage.outputs] == [("file", "/srv/ckpt/c-1")]
