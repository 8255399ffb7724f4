"""Off-cluster, the same Core API writes to a local store folder."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from det_airflow import core, trial_env
from det_airflow.core._local import read_jsonl


def _read(path: Path) -> list[dict]:
    return list(read_jsonl(path))


def test_the_default_store_is_dot_det_local_in_the_current_folder(tmp_path: Path) -> None:
    with core.init() as ctx:
        ctx.train.report_validation_metrics(5, {"validation_loss": 0.5})
        with ctx.checkpoint.store_path({"steps_completed": 5}) as (path, storage_id):
            (path / "w").write_text("1")
    store = tmp_path / ".det_local"
    [metric] = _read(store / "metrics.jsonl")
    assert metric["group"] == "validation" and metric["steps_completed"] == 5
    assert metric["metrics"] == {"validation_loss": 0.5} and "report_time" in metric
    assert (store / "checkpoints" / storage_id / "w").read_text() == "1"
    assert (store / "checkpoints" / storage_id / "metadata.json").exists()
    [record] = _read(store / "checkpoints.jsonl")
    assert record["uuid"] == storage_id and record["state"] == "COMPLETED" and record["steps_completed"] == 5
    assert record["storage"]["path"] == str(store / "checkpoints" / storage_id)
    assert set(record["resources"]) == {"w", "metadata.json"}


def test_det_local_store_names_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(trial_env.LOCAL_STORE, str(tmp_path / "mystore"))
    with core.init() as ctx:
        ctx.train.report_training_metrics(1, {"loss": 2.0})
        ctx.train.report_progress(0.5)
        ctx.train.report_early_exit(core.EarlyExitReason.USER_REQUESTED_STOP)
        assert ctx.preempt.should_preempt() is False
    assert _read(tmp_path / "mystore" / "metrics.jsonl")[0]["metrics"] == {"loss": 2.0}
    events = [
        (e["event"], e.get("progress") or e.get("reason"))
        for e in _read(tmp_path / "mystore" / "events.jsonl")
    ]
    assert events == [("progress", 0.5), ("early_exit", "USER_REQUESTED_STOP")]


def test_deleted_checkpoints_are_marked_in_the_index(tmp_path: Path) -> None:
    with core.init() as ctx:
        with ctx.checkpoint.store_path({"steps_completed": 1}) as (_, storage_id):
            pass
        ctx.checkpoint.delete(storage_id)
    records = _read(tmp_path / ".det_local" / "checkpoints.jsonl")
    assert [r["state"] for r in records] == ["COMPLETED", "DELETED"]
    assert not (tmp_path / ".det_local" / "checkpoints" / storage_id).exists()


@pytest.mark.parametrize("smaller_is_better, best", [(True, 0.2), (False, 0.9)])
def test_best_validation_uses_the_searcher_metric(
    on_trial: Callable, smaller_is_better: bool, best: float
) -> None:
    on_trial(
        master=None,
        searcher={"name": "single", "metric": "validation_loss", "smaller_is_better": smaller_is_better},
    )
    with core.init() as ctx:
        assert ctx.train.get_experiment_best_validation() is None
        for loss in (0.5, 0.2, 0.9, float("nan")):
            ctx.train.report_validation_metrics(1, {"validation_loss": loss, "accuracy": 1 - loss})
        ctx.train.report_validation_metrics(2, {"accuracy": 0.0})
        assert ctx.train.get_experiment_best_validation() == best


def test_without_a_config_there_is_no_best_validation() -> None:
    with core.init() as ctx:
        ctx.train.report_validation_metrics(1, {"validation_loss": 0.5})
        assert ctx.train.get_experiment_best_validation() is None


def test_a_local_trial_writes_its_trial_id(on_trial: Callable, tmp_path: Path) -> None:
    on_trial(master=None)
    with core.init() as ctx:
        ctx.train.report_validation_metrics(1, {"validation_loss": 0.5})
    [metric] = _read(tmp_path / ".det_local" / "metrics.jsonl")
    assert metric["trial_id"] == 7


def test_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps({"a": 1}) + "\n" + '{"a": 2')
    assert _read(path) == [{"a": 1}]
