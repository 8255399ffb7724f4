"""Trainer: what it reports and when, checkpoint policies, preemption, exact resume, config defaults."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from det_airflow import pytorch, trial_env
from det_airflow.errors import DetError
from det_airflow.pytorch import Batch, Epoch, Trainer

from ._trials import N_TRAIN, ScriptedTrial, TinyTrial
from .conftest import Store

HPARAMS = {"lr": 0.1, "global_batch_size": 8}
EPOCH_LEN = -(-N_TRAIN // 8)  # 13


@pytest.fixture(autouse=True)
def one_thread() -> None:
    torch.set_num_threads(1)  # bit-exact CPU results from run to run


def config(**changes: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "searcher": {"name": "single", "metric": "validation_loss", "smaller_is_better": True}
    }
    cfg.update(changes)
    return cfg


def fit(
    trial_class: type = TinyTrial,
    *,
    exp_conf: dict[str, Any] | None = None,
    preempt: Callable[[Trainer], bool] | None = None,
    **fit_args: Any,
) -> tuple[pytorch.PyTorchTrial, Trainer]:
    """One process's worth of training: init, the trial, the Trainer, fit()."""
    with pytorch.init(hparams=HPARAMS, exp_conf=exp_conf if exp_conf is not None else config()) as context:
        trial = trial_class(context)
        trainer = Trainer(trial, context)
        if preempt is not None:
            context._core.preempt.should_preempt = lambda auto_ack=True: preempt(trainer)  # type: ignore[method-assign]
        trainer.fit(**fit_args)
    return trial, trainer


def weights(trial: Any) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in trial.model.state_dict().items()}


def test_it_reports_training_and_validation_with_batches_and_epochs(store: Store) -> None:
    fit(max_length=Batch(30), reporting_period=Batch(10), validation_period=Batch(15))
    training = store.metrics("training")
    assert [r["steps_completed"] for r in training] == [10, 20, 30]
    assert [(r["metrics"]["batches"], r["metrics"]["epochs"]) for r in training] == [
        (10, 0),
        (20, 1),
        (30, 2),
    ]
    # Averaged over the reporting period: batches 0-9 are all in epoch 0, 10-19 straddle 0 and 1.
    assert [r["metrics"]["epoch"] for r in training] == [0.0, pytest.approx(0.7), pytest.approx(1.4)]
    assert store.steps("validation") == [15, 30]  # every validation_period, and always at the end
    assert set(store.metrics("validation")[-1]["metrics"]) == {
        "validation_loss",
        "accuracy",
        "batches",
        "epochs",
    }


def test_epoch_periods_count_the_training_loader_batches(store: Store) -> None:
    fit(max_length=Epoch(2), reporting_period=Epoch(1), validation_period=Epoch(1), checkpoint_policy="none")
    assert store.steps("training") == [EPOCH_LEN, 2 * EPOCH_LEN]
    assert [m["metrics"]["epochs"] for m in store.metrics("validation")] == [1, 2]


def test_a_preempted_run_resumed_by_a_new_trainer_ends_with_the_same_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = {"max_length": Batch(40), "reporting_period": Batch(5), "validation_period": Batch(10)}
    monkeypatch.setenv(trial_env.LOCAL_STORE, str(tmp_path / "straight"))
    straight, _ = fit(**args)

    monkeypatch.setenv(trial_env.LOCAL_STORE, str(tmp_path / "paused"))
    first, trainer = fit(preempt=lambda t: t._batches >= 20, **args)
    assert first.seen == list(range(20))  # stopped at the first boundary after the signal
    paused = Store(tmp_path / "paused")
    checkpoint = paused.checkpoints()[-1]
    assert checkpoint["steps_completed"] == 20
    # Whatever the new process's generators hold, the checkpoint's are put back.
    random.seed(123)
    np.random.seed(123)
    torch.manual_seed(123)
    resumed, _ = fit(latest_checkpoint=checkpoint["uuid"], **args)
    assert resumed.seen == list(range(20, 40))

    expected, got = weights(straight), weights(resumed)
    assert expected.keys() == got.keys()
    for name in expected:
        assert torch.equal(expected[name], got[name]), name
    same_lr = straight.optimizer.param_groups[0]["lr"] == resumed.optimizer.param_groups[0]["lr"]  # type: ignore[attr-defined]
    assert same_lr
    straight_metrics = [m["metrics"] for m in Store(tmp_path / "straight").metrics("validation")]
    assert [m["metrics"] for m in paused.metrics("validation")] == straight_metrics


def test_preemption_is_checked_at_boundaries_and_checkpoints_before_returning(store: Store) -> None:
    asked: list[int] = []

    def preempt(trainer: Trainer) -> bool:
        asked.append(trainer._batches)
        return trainer._batches >= 12

    trial, _ = fit(preempt=preempt, max_length=Batch(40), reporting_period=Batch(4), checkpoint_policy="none")
    assert asked == [4, 8, 12]
    assert store.steps("training") == [4, 8, 12]
    assert store.steps("validation") == []  # not the end: nothing to validate
    assert [c["steps_completed"] for c in store.checkpoints()] == [12]  # even with policy none


def test_checkpoint_policy_best_checkpoints_after_validations_that_beat_the_best(store: Store) -> None:
    ScriptedTrial.SCRIPT = [3.0, 2.0, 4.0, 1.0, 5.0]
    fit(ScriptedTrial, max_length=Batch(25), validation_period=Batch(5))
    # 3 beats nothing, 2 beats 3, 1 beats 2; 5 at the end beats nothing but the end always checkpoints.
    assert [c["steps_completed"] for c in store.checkpoints()] == [5, 10, 20, 25]


def test_checkpoint_policy_best_follows_smaller_is_better(store: Store) -> None:
    ScriptedTrial.SCRIPT = [3.0, 2.0, 4.0]
    exp_conf = config(searcher={"name": "single", "metric": "validation_loss", "smaller_is_better": False})
    fit(ScriptedTrial, exp_conf=exp_conf, max_length=Batch(15), validation_period=Batch(5))
    assert [c["steps_completed"] for c in store.checkpoints()] == [5, 15]


@pytest.mark.parametrize(("policy", "expected"), [("all", [5, 10, 15]), ("none", [])])
def test_checkpoint_policies_all_and_none(store: Store, policy: str, expected: list[int]) -> None:
    ScriptedTrial.SCRIPT = [3.0, 2.0, 4.0]
    fit(ScriptedTrial, max_length=Batch(15), validation_period=Batch(5), checkpoint_policy=policy)
    assert [c["steps_completed"] for c in store.checkpoints()] == expected


def test_checkpoint_period_checkpoints_whatever_the_policy(store: Store) -> None:
    fit(max_length=Batch(20), checkpoint_period=Batch(8), checkpoint_policy="none")
    assert [c["steps_completed"] for c in store.checkpoints()] == [8, 16]


def test_a_checkpoint_holds_the_state_and_metadata(store: Store) -> None:
    fit(max_length=Batch(3))
    [checkpoint] = store.checkpoints()
    assert checkpoint["metadata"]["format"] == "det_airflow.pytorch/1"
    assert set(checkpoint["resources"]) == {"state_dict.pth", "metadata.json"}
    state = torch.load(store.path / "checkpoints" / checkpoint["uuid"] / "state_dict.pth", weights_only=False)
    assert state["trainer"] == {"batches_trained": 3, "epochs_trained": 0, "epoch_length": EPOCH_LEN}
    assert len(state["models_state_dict"]) == 1 and len(state["lr_schedulers_state_dict"]) == 2
    assert set(state["rng_states"][0]) >= {"python", "numpy", "torch"}


def test_test_mode_trains_one_batch_validates_and_checkpoints_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(trial_env.TEST_MODE, "1")
    exp_conf = config(checkpoint_policy="none", perform_initial_validation=True)
    exp_conf["searcher"]["max_length"] = {"batches": 500}
    trial, _ = fit(exp_conf=exp_conf)
    assert trial.seen == [0]
    assert store.steps("training") == [1]
    assert store.steps("validation") == [1]
    assert len(store.checkpoints()) == 1


def test_step_zero_validation(store: Store) -> None:
    fit(max_length=Batch(5), step_zero_validation=True)
    assert store.steps("validation") == [0, 5]


def test_config_defaults_drive_a_seed_era_trial(store: Store) -> None:
    exp_conf = config(
        scheduling_unit=4,
        min_validation_period={"batches": 8},
        min_checkpoint_period={"batches": 12},
        checkpoint_policy="none",
        perform_initial_validation=True,
    )
    exp_conf["searcher"]["max_length"] = {"batches": 20}
    fit(exp_conf=exp_conf)
    assert store.steps("training") == [4, 8, 12, 16, 20]
    assert store.steps("validation") == [0, 8, 16, 20]
    assert [c["steps_completed"] for c in store.checkpoints()] == [12]
    [completed] = store.events("searcher_completed")
    assert completed["length"] == 20
    assert completed["metric"] == store.metrics("validation")[-1]["metrics"]["validation_loss"]


def test_a_length_in_epochs_uses_records_per_epoch_when_given(store: Store) -> None:
    exp_conf = config(records_per_epoch=64, checkpoint_policy="none")
    exp_conf["searcher"]["max_length"] = {"epochs": 2}
    fit(exp_conf=exp_conf)
    assert store.steps("validation") == [16]  # 2 * 64 records / 8 per batch
    assert store.events("searcher_completed")[0]["length"] == 2


def test_max_time_in_batches_is_the_length(store: Store) -> None:
    exp_conf = config(checkpoint_policy="none")
    exp_conf["searcher"].update(time_metric="batches", max_time=6)
    fit(exp_conf=exp_conf)
    assert store.steps("validation") == [6]
    assert store.events("searcher_completed") == []  # 0.38: no searcher operations


def test_without_a_length_fit_says_what_to_give() -> None:
    with pytest.raises(DetError, match="pass max_length=Batch"):
        fit()


def test_a_missing_searcher_metric_is_a_clear_error() -> None:
    exp_conf = config()
    exp_conf["searcher"]["metric"] = "f1"
    with pytest.raises(DetError, match=r"searcher.metric 'f1' is not among .*accuracy"):
        fit(exp_conf=exp_conf, max_length=Batch(2))


def test_a_stop_request_stops_at_the_next_boundary(store: Store) -> None:
    class Stopping(TinyTrial):
        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
            if batch_idx == 6:
                self.context.set_stop_requested(True)
            return super().train_batch(batch, epoch_idx, batch_idx)

    trial, _ = fit(Stopping, max_length=Batch(40), reporting_period=Batch(5), checkpoint_policy="none")
    assert trial.seen[-1] == 9
    assert [c["steps_completed"] for c in store.checkpoints()] == [10]
    assert [e["reason"] for e in store.events("early_exit")] == ["USER_REQUESTED_STOP"]


def test_lr_schedulers_step_per_batch_and_per_epoch() -> None:
    trial, _ = fit(max_length=Batch(EPOCH_LEN + 1), checkpoint_policy="none")
    step_lr, exponential = (s.scheduler for s in trial.context.lr_schedulers)  # type: ignore[attr-defined]
    assert step_lr.last_epoch == EPOCH_LEN + 1
    assert exponential.last_epoch == 1


def test_it_needs_exactly_one_evaluation_method() -> None:
    class Both(ScriptedTrial):
        def evaluate_batch(self, batch: Any) -> dict[str, Any]:
            return {}

    with pytest.raises(DetError, match="exactly one of evaluate_batch"):
        fit(Both, max_length=Batch(1))


def test_it_needs_a_wrapped_model() -> None:
    with pytest.raises(DetError, match="wrap_model"), pytorch.init(hparams=HPARAMS) as context:
        Trainer(TinyTrial.__new__(TinyTrial), context)


def test_train_batch_must_answer_a_dict() -> None:
    class Bad(TinyTrial):
        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            return [1.0]

    with pytest.raises(DetError, match=r"train_batch\(\) must return a dict"):
        fit(Bad, max_length=Batch(1))
