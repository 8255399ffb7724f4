"""Checkpoints at their edges: the exact refusals, metadata from the master's record, copying into
folders that exist, and where a missing checkpoint was looked for."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from det_airflow import core
from det_airflow.core import (
    CheckpointContext,
    CheckpointStorage,
    LocalBackend,
    TrainContext,
)
from det_airflow.core._local import read_jsonl
from det_airflow.errors import DetError

from .conftest import FakeRuntime, NonChief, Opaque

STEPS_ADVICE = (
    "checkpoint metadata must include 'steps_completed' (the batches trained so far), "
    "e.g. store_path({'steps_completed': 1000})"
)


def _store(ctx: core.Context, metadata: dict[str, Any]) -> str:
    with ctx.checkpoint.store_path(metadata) as (_, storage_id):
        pass
    return storage_id


@pytest.mark.parametrize(
    "metadata, message",
    [
        ({}, STEPS_ADVICE),
        ({"steps": 3}, STEPS_ADVICE),
        ({"steps_completed": -1}, "checkpoint metadata steps_completed: expected an integer >= 0, got -1"),
        ({"steps_completed": "x"}, "checkpoint metadata steps_completed: expected an integer >= 0, got 'x'"),
        (
            {"steps_completed": True},
            "checkpoint metadata steps_completed: expected an integer >= 0, got True",
        ),
        (
            {"steps_completed": 1, "model": Opaque()},
            "checkpoint metadata.model: a Opaque cannot be reported; report numbers, strings or lists",
        ),
    ],
)
def test_bad_metadata_is_refused_word_for_word(metadata: dict[str, Any], message: str) -> None:
    with core.init() as ctx, pytest.raises(DetError) as raised:
        _store(ctx, metadata)
    assert str(raised.value) == message


def test_a_checkpoint_before_any_training_has_zero_steps(tmp_path: Path) -> None:
    with core.init() as ctx:
        storage_id = _store(ctx, {"steps_completed": 0})
        assert ctx.checkpoint.get_metadata(storage_id) == {"steps_completed": 0}
    [record] = read_jsonl(tmp_path / ".det_local" / "checkpoints.jsonl")
    assert record["steps_completed"] == 0


def test_metadata_of_a_checkpoint_stored_elsewhere_comes_from_the_masters_record(
    remote_init: Callable, fake_runtime: FakeRuntime
) -> None:
    fake_runtime.checkpoints["abc"] = {"uuid": "abc", "metadata": {"steps_completed": 3, "note": "x"}}
    fake_runtime.checkpoints["bare"] = {"uuid": "bare"}
    with remote_init() as ctx:
        assert ctx.checkpoint.get_metadata("abc") == {"steps_completed": 3, "note": "x"}
        assert ctx.checkpoint.get_metadata("bare") == {}


def test_metadata_of_an_unknown_checkpoint_is_refused(remote_init: Callable) -> None:
    with remote_init() as ctx, pytest.raises(DetError) as raised:
        ctx.checkpoint.get_metadata("nope")
    assert str(raised.value) == "checkpoint nope not found"


def test_an_unknown_checkpoint_names_the_one_place_looked_at(remote_init: Callable, tmp_path: Path) -> None:
    with remote_init() as ctx, pytest.raises(DetError) as raised:
        with ctx.checkpoint.restore_path("nope"):
            pass
    assert (
        str(raised.value) == f"checkpoint nope: its files are not at {tmp_path / 'shared' / 'ckpts' / 'nope'}"
    )


def test_a_checkpoint_whose_files_went_missing_names_both_places(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    with core.init(checkpoint_storage=str(elsewhere)) as ctx:
        storage_id = _store(ctx, {"steps_completed": 1})
    shutil.rmtree(elsewhere / storage_id)
    with core.init() as ctx, pytest.raises(DetError) as raised:
        ctx.checkpoint.download(storage_id, tmp_path / "copy")
    default = tmp_path / ".det_local" / "checkpoints" / storage_id
    assert str(raised.value) == (
        f"checkpoint {storage_id}: its files are not at {default} or {elsewhere / storage_id}"
    )


@pytest.mark.parametrize("folder", [None, "missing", "a_file"])
def test_uploading_something_that_is_no_folder_is_refused(tmp_path: Path, folder: str | None) -> None:
    (tmp_path / "a_file").write_text("x")
    ckpt_dir = None if folder is None else tmp_path / folder
    with core.init() as ctx, pytest.raises(DetError) as raised:
        ctx.checkpoint.upload(ckpt_dir, {"steps_completed": 1})
    assert str(raised.value) == f"checkpoint.upload: {ckpt_dir} is not a folder"


def test_download_into_an_existing_folder_adds_the_files(tmp_path: Path) -> None:
    target = tmp_path / "copy"
    target.mkdir()
    (target / "mine.txt").write_text("kept")
    with core.init() as ctx:
        with ctx.checkpoint.store_path({"steps_completed": 2}) as (path, storage_id):
            (path / "w.txt").write_text("weights")
        ctx.checkpoint.download(storage_id, target)
    assert sorted(p.name for p in target.iterdir()) == ["metadata.json", "mine.txt", "w.txt"]


def test_only_the_chief_deletes_checkpoints(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path)
    worker = NonChief()
    checkpoint = CheckpointContext(
        worker, CheckpointStorage(tmp_path), backend, TrainContext(worker, backend)
    )
    with pytest.raises(DetError) as raised:
        checkpoint.delete("abc")
    assert str(raised.value) == "checkpoint.delete is for the chief (rank 0) only"
