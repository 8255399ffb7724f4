"""Core API extras Determined code uses: ``alert``, test mode's short loops, ``core_v2``, ``LOG_FORMAT``."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import det_airflow as det
from det_airflow import trial_env
from det_airflow.core._local import read_jsonl
from det_airflow.errors import DetError
from det_airflow.experimental import client, core_v2


def test_alert_is_accepted_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="det_airflow.core"):
        with det.core.init() as core_context:
            core_context.alert(title="loss diverged", description="nan at step 7", level="error")
    assert "ALERT [error] loss diverged: nan at step 7" in caplog.text


def test_log_format_is_determineds() -> None:
    record = logging.LogRecord("trainer", logging.INFO, __file__, 1, "hello", None, None)
    assert logging.Formatter(det.LOG_FORMAT).format(record) == f"INFO: [{record.process}] trainer: hello"


def test_test_mode_ends_a_core_api_loop_after_its_first_report(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(trial_env.TEST_MODE, "1")
    steps = []
    with det.core.init() as core_context:
        for step in range(1, 21):
            assert core_context.preempt.should_preempt() == bool(steps)
            if steps:
                break
            core_context.train.report_training_metrics(step, {"loss": 1.0 / step})
            steps.append(step)
    assert steps == [1]


def test_without_test_mode_a_local_run_is_never_preempted() -> None:
    with det.core.init() as core_context:
        core_context.train.report_training_metrics(1, {"loss": 1.0})
        core_context.train.report_validation_metrics(1, {"loss": 1.0})
        assert core_context.preempt.should_preempt() is False


def test_core_v2_reports_an_unmanaged_run_to_the_local_store(tmp_path: Path) -> None:
    core_v2.init(
        defaults=core_v2.DefaultConfig(
            name="run", hparams={"lr": 0.1}, checkpoint_storage=str(tmp_path / "ckpt")
        ),
        config=core_v2.Config(name="renamed", external_experiment_id="exp-1"),
    )
    try:
        with pytest.raises(DetError, match=r"core_v2.init\(\) was already called"):
            core_v2.init()
        core_v2.train.report_training_metrics(steps_completed=1, metrics={"loss": 0.5})
        with core_v2.checkpoint.store_path({"steps_completed": 1}) as (path, _):
            (path / "weights").write_text("w")
        assert core_v2.info is None and core_v2.distributed.size == 1
    finally:
        core_v2.close()
    records = list(read_jsonl(Path(".det_local") / "metrics.jsonl"))
    assert [(r["group"], r["metrics"]) for r in records] == [("training", {"loss": 0.5})]
    assert [p.name for p in (tmp_path / "ckpt").iterdir()] != []


def test_client_downloads_a_checkpoint_from_the_local_store(tmp_path: Path) -> None:
    with det.core.init() as core_context:
        with core_context.checkpoint.store_path({"steps_completed": 3}) as (path, uuid):
            (path / "weights.txt").write_text("w")
    checkpoint = client.get_checkpoint(uuid)
    downloaded = Path(checkpoint.download(str(tmp_path / "here")))
    assert (downloaded / "weights.txt").read_text() == "w"
    assert checkpoint.metadata["steps_completed"] == 3


def test_client_names_what_it_does_not_offer() -> None:
    with pytest.raises(AttributeError, match=r"offers login\(\), Determined, create_experiment.*det user"):
        client.create_user("someone", admin=False)  # type: ignore[attr-defined]


def test_determineds_own_generic_metrics_call_reports_its_group() -> None:
    """Determined's e2e generic-metrics program reports through ``_report_trial_metrics``."""
    with det.core.init() as core_context:
        core_context.train._report_trial_metrics(group="inference", total_batches=3, metrics={"seen": 7})
    records = list(read_jsonl(Path(".det_local") / "metrics.jsonl"))
    assert [(r["group"], r["steps_completed"], r["metrics"]) for r in records] == [
        ("inference", 3, {"seen": 7})
    ]
