"""``DistributedContext.from_tf_config()`` with real TensorFlow: Determined's ``(context, strategy)``
pair, as ``iris_tf_keras``'s ``train.py`` unpacks it, for one worker and for two."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import tensorflow as tf

from det_airflow import compat, core
from det_airflow.core import DistributedContext
from det_airflow.errors import DetError


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tf_config(workers: list[str], index: int, task_type: str = "worker") -> str:
    return json.dumps({"cluster": {"worker": workers}, "task": {"type": task_type, "index": index}})


@pytest.fixture(autouse=True)
def plain_process(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Off-cluster, writing to a local store under tmp_path."""
    for name in [n for n in os.environ if n.startswith("DET_")] + ["TF_CONFIG"]:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DET_LOCAL_STORE", str(tmp_path / "store"))


def test_one_worker_unpacks_into_a_context_and_a_strategy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TF_CONFIG", _tf_config([f"127.0.0.1:{_free_port()}"], 0))
    distributed, strategy = DistributedContext.from_tf_config()
    assert (distributed.rank, distributed.size, distributed.local_size, distributed.cross_size) == (
        0,
        1,
        1,
        1,
    )
    assert isinstance(strategy, tf.distribute.Strategy)
    # Determined's pick for one worker: a MirroredStrategy over several GPUs, else the default.
    gpus = len(tf.config.list_physical_devices("GPU"))
    if gpus <= 1:
        assert strategy is tf.distribute.get_strategy()
    assert strategy.num_replicas_in_sync == max(1, gpus)
    # As train.py goes on: the Core API takes the context, the model is built in the strategy's scope.
    with core.init(distributed=distributed) as core_context, strategy.scope():
        assert core_context.distributed.size == 1
        weight = tf.Variable(2.0)
        assert float(strategy.reduce(tf.distribute.ReduceOp.SUM, weight * 3, axis=None)) == 6.0


def test_without_tf_config_it_is_still_a_pair() -> None:
    distributed, strategy = DistributedContext.from_tf_config()
    assert distributed.size == 1 and isinstance(strategy, tf.distribute.Strategy)


@pytest.mark.parametrize(
    ("tf_config", "message"),
    [
        ("{not json", "TF_CONFIG is not a valid TensorFlow cluster spec"),
        (json.dumps({"cluster": {"worker": ["a:1"]}}), "TF_CONFIG is not a valid TensorFlow cluster spec"),
        (_tf_config(["a:1", "b:1"], 0, "chief"), "only worker tasks are supported.*task.type is 'chief'"),
        (_tf_config(["a:1", "b:1"], 2), "TF_CONFIG.s task.index is 2, but cluster.worker has 2 workers"),
    ],
)
def test_a_tf_config_it_cannot_use_is_one_clear_error(
    monkeypatch: pytest.MonkeyPatch, tf_config: str, message: str
) -> None:
    monkeypatch.setenv("TF_CONFIG", tf_config)
    with pytest.raises(DetError, match=f"^from_tf_config: {message}"):
        DistributedContext.from_tf_config()


# One of two workers, through Determined's import path, as distributed.yaml runs train.py.
WORKER = r"""
import json, sys
import tensorflow as tf
import determined as det

distributed, strategy = det.core.DistributedContext.from_tf_config(pub_port=int(sys.argv[1]))
rank = distributed.get_rank()
per_replica = strategy.run(lambda: tf.constant(float(rank + 1)))
total = strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
print("RESULT " + json.dumps({
    "rank": rank,
    "size": distributed.get_size(),
    "multi_worker": isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy),
    "replicas": strategy.num_replicas_in_sync,
    "sum": float(total),
    "ranks": distributed.allgather(rank),
}))
distributed.close()
"""


def test_two_workers_get_a_multi_worker_strategy_and_tcp_collectives(tmp_path: Path) -> None:
    workers = [f"127.0.0.1:{_free_port()}" for _ in range(2)]
    pub_port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_") and k != "TF_CONFIG"}
    env.update(PYTHONPATH=str(compat.determined_root()), TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(pub_port)],
            env={**env, "TF_CONFIG": _tf_config(workers, index)},
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for index in range(2)
    ]
    results = []
    try:
        for proc in procs:
            output, _ = proc.communicate(timeout=400)
            assert proc.returncode == 0, output
            results.append(json.loads(output.split("RESULT ", 1)[1].splitlines()[0]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    assert results == [
        {
            "rank": rank,
            "size": 2,
            "multi_worker": True,
            "replicas": 2,
            "sum": 3.0,
            "ranks": [0, 1],
        }
        for rank in range(2)
    ]
