"""config_to_dict: the full normalized config, JSON-ready, and parse_config reads it back."""

from __future__ import annotations

import json
from typing import Any

import pytest

from det_airflow.config import config_to_dict, parse_config

from ._configs import MNIST_ADAPTIVE_038, MNIST_ADAPTIVE_SEED, MNIST_CONST, minimal

EVERYTHING = minimal(
    name="everything",
    description="all sections set",
    labels=["a", "b"],
    entrypoint=["python3", "train.py"],
    hyperparameters={
        "global_batch_size": {"type": "categorical", "vals": [32, 64]},
        "optimizer": {
            "lr": {"type": "log", "minval": -4, "maxval": -1, "base": 2, "count": 3},
            "momentum": {"type": "double", "minval": 0.8, "maxval": 0.99, "count": 2},
            "kind": ["sgd", "nesterov"],
        },
        "layers": {"type": "int", "minval": 1, "maxval": 3, "count": 3},
        "const": {"type": "const", "val": {"nested": [1, 2]}},
    },
    searcher={
        "name": "grid",
        "metric": "accuracy",
        "smaller_is_better": False,
        "max_concurrent_trials": 0,
        "max_length": {"epochs": 2},
        "source_checkpoint_uuid": "abc",
    },
    resources={
        "slots_per_trial": 2,
        "priority": 10,
        "weight": 0.5,
        "max_slots": 4,
        "resource_pool": "gpu",
        "shm_size": "2G",
        "devices": ["/dev/fuse:/dev/fuse"],
        "is_single_node": False,
    },
    environment={
        "image": {"cpu": "c", "cuda": "g", "rocm": "r"},
        "environment_variables": {"cpu": ["A=1"], "cuda": ["B=2"]},
        "pod_spec": {"metadata": {"labels": {"team": "ml"}}},
        "add_capabilities": ["SYS_PTRACE"],
        "drop_capabilities": ["NET_RAW"],
        "force_pull_image": True,
        "registry_auth": {"username": "u"},
    },
    bind_mounts=[
        {"host_path": "/data", "container_path": "/data", "read_only": True, "propagation": "rslave"}
    ],
    checkpoint_storage={"type": "s3", "bucket": "b", "prefix": "p", "endpoint_url": "http://minio:9000"},
    checkpoint_policy="none",
    max_restarts=2,
    min_validation_period={"records": 640},
    min_checkpoint_period={"epochs": 1},
    scheduling_unit=10,
    records_per_epoch=6400,
    perform_initial_validation=True,
    reproducibility={"experiment_seed": 99},
    data={"url": "http://x", "secrets": {"k": "v"}},
    workspace="w",
    project="p",
    preemption_timeout=30,
    profiling={"enabled": True, "begin_on_batch": 1},
    debug=True,
    log_policies=[{"name": "oom", "pattern": "OOM", "action": {"type": "cancel_retries"}}],
    optimizations={"aggregation_frequency": 2},
    airflow={"executor": "kubernetes", "namespace": "ml", "kubernetes_conn_id": "k"},
)

ASYNC_038 = minimal(
    searcher={
        "name": "async_halving",
        "metric": "loss",
        "max_trials": 9,
        "num_rungs": 3,
        "time_metric": "batches",
        "max_time": 900,
        "sampler": "qmc",
    }
)

ROUND_TRIPS = [
    pytest.param(MNIST_CONST, id="mnist-const"),
    pytest.param(MNIST_ADAPTIVE_SEED, id="adaptive-seed"),
    pytest.param(MNIST_ADAPTIVE_038, id="adaptive-0.38"),
    pytest.param(ASYNC_038, id="async-halving-0.38"),
    pytest.param(minimal(searcher={"name": "random", "metric": "m", "max_trials": 3, "stop_once": False}),
                 id="random-with-an-unusual-field"),
    pytest.param(minimal(environment={"image": "one-image", "environment_variables": ["A=1"]}), id="one-image"),
    pytest.param(EVERYTHING, id="everything"),
]  # fmt: skip


@pytest.mark.parametrize("source", ROUND_TRIPS)
def test_round_trip_gives_back_an_equal_config(source: Any) -> None:
    cfg = parse_config(source)
    assert parse_config(config_to_dict(cfg)) == cfg


@pytest.mark.parametrize("source", ROUND_TRIPS)
def test_output_survives_json(source: Any) -> None:
    cfg = parse_config(source)
    dumped = config_to_dict(cfg)
    assert json.loads(json.dumps(dumped)) == dumped
    assert parse_config(json.loads(json.dumps(dumped))) == cfg


def test_mnist_const_in_determined_shape_with_defaults_filled() -> None:
    out = config_to_dict(parse_config(MNIST_CONST))
    assert out["searcher"] == {
        "name": "single",
        "metric": "validation_loss",
        "smaller_is_better": True,
        "max_length": {"batches": 937},
    }
    assert out["hyperparameters"]["learning_rate"] == {"type": "const", "val": 1.0}
    assert out["resources"] == {
        "slots_per_trial": 1,
        "priority": 42,
        "weight": 1.0,
        "max_slots": None,
        "resource_pool": "",
        "shm_size": 4 * 1024**3,
        "devices": [],
        "is_single_node": None,
    }
    assert out["environment"]["image"] == {"cpu": None, "cuda": None, "rocm": None}
    assert out["environment"]["environment_variables"] == {"cpu": [], "cuda": [], "rocm": []}
    assert out["reproducibility"] == {"experiment_seed": None}
    assert out["min_validation_period"] == {"batches": 0}
    assert (out["max_restarts"], out["scheduling_unit"], out["checkpoint_storage"]) == (5, 100, None)
    assert out["airflow"] == {
        "executor": "local",
        "trial_runner": "local",
        "pool": "default_pool",
        "queue": None,
        "master_conn_id": "det_default",
        "docker_conn_id": None,
        "kubernetes_conn_id": None,
        "namespace": "default",
    }


def test_asha_shows_its_own_knobs_with_defaults() -> None:
    searcher = config_to_dict(parse_config(MNIST_ADAPTIVE_038))["searcher"]
    assert searcher == {
        "name": "adaptive_asha",
        "metric": "validation_loss",
        "smaller_is_better": True,
        "max_trials": 16,
        "max_concurrent_trials": 4,
        "max_length": None,
        "time_metric": "batches",
        "max_time": 937,
        "mode": "standard",
        "divisor": 4.0,
        "max_rungs": 5,
        "bracket_rungs": [],
        "stop_once": True,
        "sampler": "random",
    }


def test_a_generated_name_is_kept() -> None:
    cfg = parse_config(minimal())
    assert config_to_dict(cfg)["name"] == cfg.name


def test_editing_the_output_leaves_the_config_alone() -> None:
    cfg = parse_config(EVERYTHING)
    out = config_to_dict(cfg)
    out["data"]["secrets"]["k"] = "changed"
    out["hyperparameters"]["const"]["val"]["nested"].append(3)
    assert cfg.data["secrets"]["k"] == "v"
    assert config_to_dict(cfg)["hyperparameters"]["const"]["val"] == {"nested": [1, 2]}
