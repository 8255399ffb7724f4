"""PyTorchTrialContext and det.pytorch.init(): hyperparameters, config, seeds, wrappers."""

from __future__ import annotations

import json
import random
from collections import namedtuple

import pytest
import torch
from torch import nn

from det_airflow import InvalidHP, pytorch, trial_env
from det_airflow.errors import DetError
from det_airflow.pytorch import LRScheduler

from .conftest import Store

EXP_CONF = {
    "hyperparameters": {
        "lr": {"type": "const", "val": 0.5},
        "global_batch_size": 32,
        "layers": {"width": 8, "depth": {"type": "int", "minval": 1, "maxval": 3}},
        "opt": {"type": "categorical", "vals": ["sgd", "adam"]},
    },
    "data": {"url": "s3://bucket/digits"},
    "reproducibility": {"experiment_seed": 11},
}


def test_off_cluster_getters() -> None:
    with pytorch.init(exp_conf=EXP_CONF) as context:
        # Searched hyperparameters have no single value off-cluster: only the constant ones are there.
        assert context.get_hparams() == {"lr": 0.5, "global_batch_size": 32, "layers": {"width": 8}}
        assert context.get_hparam("lr") == 0.5
        assert context.get_global_batch_size() == 32
        assert context.get_per_slot_batch_size() == 32
        assert context.get_data_config() == {"url": "s3://bucket/digits"}
        assert context.get_experiment_config() == EXP_CONF
        assert (context.get_trial_id(), context.get_experiment_id(), context.get_trial_seed()) == (0, 0, 11)
        assert context.distributed.size == 1 and context.distributed.rank == 0
        assert context.device == torch.device("cpu")
        with pytest.raises(DetError, match="'opt' is not in this trial's hyperparameters"):
            context.get_hparam("opt")


def test_explicit_hparams_and_the_default_seed() -> None:
    with pytorch.init(hparams={"global_batch_size": 7}) as context:
        assert context.get_hparams() == {"global_batch_size": 7}
        assert context.get_trial_seed() == 0
        assert context.get_experiment_config() == {}


def test_on_a_trial_the_trials_hparams_seed_and_config_win(monkeypatch: pytest.MonkeyPatch) -> None:
    config = {"searcher": {"name": "single", "metric": "loss"}, "data": {"x": 1}}
    monkeypatch.setenv(trial_env.TRIAL_ID, "7")
    monkeypatch.setenv(trial_env.EXPERIMENT_ID, "3")
    monkeypatch.setenv(trial_env.TRIAL_SEED, "42")
    monkeypatch.setenv(trial_env.HPARAMS, json.dumps({"global_batch_size": 16}))
    monkeypatch.setenv(trial_env.EXPERIMENT_CONFIG, json.dumps(config))
    with pytorch.init(hparams={"global_batch_size": 1}, exp_conf={"data": {"y": 2}}) as context:
        assert context.get_hparams() == {"global_batch_size": 16}
        assert (context.get_trial_id(), context.get_experiment_id(), context.get_trial_seed()) == (7, 3, 42)
        assert context.get_data_config() == {"x": 1}
        assert context.get_experiment_config() == config


def test_init_seeds_the_random_generators() -> None:
    draws = []
    for _ in range(2):
        with pytorch.init(exp_conf={"reproducibility": {"experiment_seed": 5}}):
            draws.append((random.random(), torch.rand(1).item()))
    assert draws[0] == draws[1]


def test_invalid_hparams_end_the_trial_cleanly(store: Store) -> None:
    with pytorch.init(hparams={}):
        raise InvalidHP("no")
    assert [e["reason"] for e in store.events("early_exit")] == ["INVALID_HP"]


@pytest.mark.parametrize("value", [None, 0, "32", True])
def test_global_batch_size_must_be_a_positive_integer(value: object) -> None:
    with pytorch.init(hparams={} if value is None else {"global_batch_size": value}) as context:
        with pytest.raises(DetError, match="global_batch_size: expected an integer >= 1"):
            context.get_per_slot_batch_size()


def test_wrappers_register_what_the_trainer_checkpoints() -> None:
    with pytorch.init(hparams={}) as context:
        model = context.wrap_model(nn.Linear(2, 1))
        optimizer = context.wrap_optimizer(torch.optim.SGD(model.parameters(), lr=1.0))
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        assert (
            context.wrap_lr_scheduler(scheduler, LRScheduler.StepMode.STEP_EVERY_OPTIMIZER_STEP) is scheduler
        )
        assert context.models == [model] and context.optimizers == [optimizer]
        assert [s.scheduler for s in context.lr_schedulers] == [scheduler]

        loss = model(torch.ones(1, 2)).sum()
        context.backward(loss)
        assert model.weight.grad is not None
        before = model.weight.detach().clone()
        context.step_optimizer(optimizer)
        assert not torch.equal(before, model.weight)
        assert model.weight.grad is None or not model.weight.grad.any()  # zeroed after the step
        assert scheduler.get_last_lr() == [0.5]  # stepped with its optimizer


def test_step_optimizer_clips_and_can_keep_gradients() -> None:
    with pytorch.init(hparams={}) as context:
        model = context.wrap_model(nn.Linear(2, 1))
        optimizer = context.wrap_optimizer(torch.optim.SGD(model.parameters(), lr=0.0))
        context.backward((model(torch.full((1, 2), 100.0)) ** 2).sum())
        context.step_optimizer(
            optimizer, clip_grads=lambda params: nn.utils.clip_grad_norm_(params, 1.0), auto_zero_grads=False
        )
        norm = torch.sqrt(sum((p.grad**2).sum() for p in model.parameters()))
        assert norm == pytest.approx(1.0, rel=1e-4)


def test_to_device_walks_containers() -> None:
    Pair = namedtuple("Pair", "x y")
    with pytorch.init(hparams={}) as context:
        data = {"a": [torch.ones(1), (torch.zeros(1), "label")], "b": Pair(torch.ones(1), 3)}
        moved = context.to_device(data)
        assert isinstance(moved["b"], Pair) and moved["a"][1][1] == "label"
        assert torch.equal(moved["a"][0], torch.ones(1))


def test_lr_scheduler_checks_its_arguments() -> None:
    with pytest.raises(TypeError, match="StepMode"):
        LRScheduler(None, "every batch")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="frequency"):
        LRScheduler(None, LRScheduler.StepMode.MANUAL_STEP, frequency=0)


def test_training_position_is_only_known_while_training() -> None:
    with pytorch.init(hparams={}) as context:
        with pytest.raises(DetError, match="only meaningful during training"):
            context.current_train_batch()
        context._current_batch_idx, context._epoch_len = 9, 5
        assert (context.current_train_batch(), context.current_train_epoch()) == (9, 1)
        assert (context.is_epoch_start(), context.is_epoch_end()) == (False, True)
        with pytest.raises(TypeError):
            context.set_stop_requested("yes")  # type: ignore[arg-type]
        context.set_stop_requested(True)
        assert context.get_stop_requested()


def test_a_distributed_model_answers_its_modules_attributes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Trial code written for one worker reads ``self.model.weight``; with several workers the model
    is wrapped in DistributedDataParallel, which must answer the same (as Determined's wrapper does)."""
    import socket

    import torch.distributed as dist

    from det_airflow.pytorch._context import _DistributedDataParallel

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        model = nn.Linear(3, 1)
        wrapped = _DistributedDataParallel(model)
        assert wrapped.weight is model.weight
        assert wrapped.in_features == 3
        assert isinstance(wrapped.module, nn.Linear)
        with pytest.raises(AttributeError, match="no attribute 'nope'"):
            _ = wrapped.nope
    finally:
        dist.destroy_process_group()
