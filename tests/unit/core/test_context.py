"""core.init(): the master's backend on a trial, a local store otherwise; InvalidHP ends a trial cleanly."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import det_airflow as det
from det_airflow import core
from det_airflow.core._local import LocalBackend
from det_airflow.core._remote import RemoteBackend

from .conftest import FakeRuntime


def test_off_cluster_the_backend_is_local() -> None:
    with core.init() as ctx:
        assert isinstance(ctx._backend, LocalBackend)
        assert ctx.info is None
        assert (ctx.distributed.rank, ctx.distributed.size) == (0, 1)


def test_on_a_trial_with_a_master_the_backend_is_the_master(on_trial: Callable) -> None:
    on_trial()
    with core.init() as ctx:
        assert isinstance(ctx._backend, RemoteBackend)
        assert ctx._backend.client.master == "http://master.test:8080"
        assert ctx._backend.client.trial_id == 7
        assert ctx.info is not None and ctx.info.trial.hparams == {"lr": 0.1}


def test_determined_keyword_arguments_are_accepted(tmp_path: Path) -> None:
    with core.init(
        distributed=core.DistributedContext(),
        checkpoint_storage=str(tmp_path / "ck"),
        preempt_mode="WorkersAskChief",
        tensorboard_mode="AUTO",
        async_checkpointing=False,
    ) as ctx:
        with ctx.checkpoint.store_path({"steps_completed": 1}) as (_, storage_id):
            pass
    assert (tmp_path / "ck" / storage_id / "metadata.json").exists()


def test_invalid_hp_is_reported_and_swallowed(remote_init: Callable, fake_runtime: FakeRuntime) -> None:
    ran_after = False
    with remote_init() as ctx:
        ctx.train.report_training_metrics(1, {"loss": 1.0})
        raise det.InvalidHP("n_filters must be >= 1")
    ran_after = True
    assert ran_after
    assert [r.body for r in fake_runtime.sent("POST", "/early_exit")] == [{"reason": "INVALID_HP"}]
    assert len(fake_runtime.sent("POST", "/metrics")) == 1  # what came before was kept


def test_invalid_hp_exits_the_process_with_0(tmp_path: Path, python_env: dict[str, str]) -> None:
    script = tmp_path / "train.py"
    script.write_text("import det_airflow as det\nwith det.core.init():\n    raise det.InvalidHP('bad')\n")
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=python_env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert '"reason":"INVALID_HP"' in (tmp_path / ".det_local" / "events.jsonl").read_text()


def test_other_errors_propagate_after_the_metrics_are_sent(
    remote_init: Callable, fake_runtime: FakeRuntime
) -> None:
    with pytest.raises(ZeroDivisionError), remote_init() as ctx:
        ctx.train.report_training_metrics(1, {"loss": 1.0})
        _ = 1 / 0
    assert len(fake_runtime.sent("POST", "/metrics")) == 1
    assert fake_runtime.sent("POST", "/early_exit") == []  # the exit code tells the master


def test_import_det_airflow_stays_light(python_env: dict[str, str]) -> None:
    code = (
        "import sys, det_airflow as det\n"
        "heavy = [m for m in ('torch', 'airflow', 'optuna', 'httpx', 'numpy', 'yaml') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "assert det.core.init and det.get_cluster_info and det.InvalidHP and det.ClusterInfo\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=python_env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_invalid_hp_is_the_errors_module_class() -> None:
    from det_airflow.errors import InvalidHP

    assert det.InvalidHP is InvalidHP


def test_unknown_attributes_are_attribute_errors() -> None:
    with pytest.raises(AttributeError):
        det.no_such_thing  # noqa: B018
