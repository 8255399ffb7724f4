"""The local store's files, record by record: what a user (or `det` tooling) reads back off-cluster."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from det_airflow import core, trial_env
from det_airflow.core import LocalBackend
from det_airflow.core._local import read_jsonl

CONFIG = {"searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 5}}}


def _read(path: Path) -> list[dict]:
    return list(read_jsonl(path))


def test_blank_and_broken_lines_in_the_middle_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"a": 1}\n\n   \n{"a": 2\n[1, 2]\n{"a": 3}\n')
    assert _read(path) == [{"a": 1}, {"a": 3}]


def test_a_missing_file_has_no_records(tmp_path: Path) -> None:
    assert _read(tmp_path / "none.jsonl") == []


def test_records_are_compact_json_one_per_line(tmp_path: Path) -> None:
    with core.init() as ctx:
        ctx.train.report_validation_metrics(1, {"loss": 0.5, "acc": 1})
        ctx.train.report_progress(0.5)
    for name in ("metrics.jsonl", "events.jsonl"):
        [line] = (tmp_path / ".det_local" / name).read_text().splitlines()
        assert line == json.dumps(json.loads(line), separators=(",", ":"))


def test_a_store_in_a_folder_that_does_not_exist_yet_is_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "runs" / "exp" / "store"
    monkeypatch.setenv(trial_env.LOCAL_STORE, str(store))
    with core.init() as ctx:
        ctx.train.report_validation_metrics(1, {"loss": 0.5})
    assert _read(store / "metrics.jsonl")[0]["metrics"] == {"loss": 0.5}


def test_events_carry_the_trial_id_and_the_time(on_trial: Callable, tmp_path: Path) -> None:
    on_trial(master=None)
    with core.init() as ctx:
        ctx.train.report_progress(0.25)
    [event] = _read(tmp_path / ".det_local" / "events.jsonl")
    assert set(event) == {"event", "trial_id", "time", "progress"}
    assert (event["event"], event["trial_id"], event["progress"]) == ("progress", 7, 0.25)


def test_a_registered_checkpoint_record_holds_everything_about_it(on_trial: Callable, tmp_path: Path) -> None:
    on_trial(master=None)
    with core.init() as ctx:
        with ctx.checkpoint.store_path({"steps_completed": 3, "epoch": 1}) as (path, storage_id):
            (path / "w.bin").write_bytes(b"1234567")
    [record] = _read(tmp_path / ".det_local" / "checkpoints.jsonl")
    assert set(record) == {
        "uuid",
        "trial_id",
        "steps_completed",
        "state",
        "metadata",
        "resources",
        "size",
        "storage",
        "report_time",
    }
    assert record["trial_id"] == 7
    assert record["metadata"] == {"steps_completed": 3, "epoch": 1}
    assert record["size"] == sum(record["resources"].values()) == 7 + record["resources"]["metadata.json"]


def test_a_deletion_record_names_the_checkpoint(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path)
    backend.delete_checkpoint("u-1")
    [record] = _read(tmp_path / "checkpoints.jsonl")
    assert set(record) == {"uuid", "state", "report_time"}
    assert (record["uuid"], record["state"]) == ("u-1", "DELETED")


def test_a_deleted_checkpoint_keeps_what_was_registered(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path, trial_id=4)
    backend.register_checkpoint(
        "u-1", 9, {"steps_completed": 9}, {"w": 2}, {"type": "directory", "path": "/x"}
    )
    backend.delete_checkpoint("u-1")
    record = backend.get_checkpoint("u-1")
    assert record is not None
    assert (record["state"], record["steps_completed"], record["trial_id"]) == ("DELETED", 9, 4)
    assert record["storage"] == {"type": "directory", "path": "/x"}


def test_a_backend_built_by_hand_is_not_in_test_mode(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path, config=CONFIG)
    assert backend.searcher_operation() == (5, False)
    assert backend.should_preempt() is False
    backend.report_metrics([{"group": "training", "steps_completed": 1, "metrics": {}}])
    assert backend.should_preempt() is False


def test_in_test_mode_nothing_reported_means_no_preemption_yet(tmp_path: Path) -> None:
    assert LocalBackend(tmp_path, test_mode=True).should_preempt() is False


def test_completing_the_operation_is_recorded_with_its_length_and_metric(tmp_path: Path) -> None:
    with core.init(config=CONFIG) as ctx:
        for op in ctx.searcher.operations():
            op.report_completed(0.125)
    events = _read(tmp_path / ".det_local" / "events.jsonl")
    assert [(e["event"], e["length"], e["metric"]) for e in events] == [("searcher_completed", 5, 0.125)]


def test_after_completion_the_backend_says_the_search_is_over(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path, config=CONFIG)
    backend.searcher_completed(5, 0.125)
    assert backend.searcher_operation() == (5, True)


def test_an_acknowledged_preemption_is_recorded_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(trial_env.TEST_MODE, "1")
    with core.init() as ctx:
        ctx.train.report_training_metrics(1, {"loss": 1.0})
        assert ctx.preempt.should_preempt() is True
        assert ctx.preempt.should_preempt() is True
    events = _read(tmp_path / ".det_local" / "events.jsonl")
    assert [e["event"] for e in events] == ["preemption_acknowledged"]


def test_should_preempt_acknowledges_by_default_and_not_when_told(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(trial_env.TEST_MODE, "1")
    with core.init() as ctx:
        ctx.train.report_training_metrics(1, {"loss": 1.0})
        assert ctx.preempt.should_preempt(auto_ack=False) is True
        assert not (tmp_path / ".det_local" / "events.jsonl").exists()
        assert ctx.preempt.should_preempt() is True
    assert [e["event"] for e in _read(tmp_path / ".det_local" / "events.jsonl")] == [
        "preemption_acknowledged"
    ]
