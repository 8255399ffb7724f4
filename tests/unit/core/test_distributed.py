"""DistributedContext: trivial in one process; torch.distributed object collectives across several."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from det_airflow.core import DistributedContext
from det_airflow.errors import DetError


def test_one_process_collectives_are_trivial() -> None:
    ctx = DistributedContext()
    assert (ctx.rank, ctx.size, ctx.local_rank, ctx.local_size, ctx.cross_rank, ctx.cross_size) == (
        0,
        1,
        0,
        1,
        0,
        1,
    )
    assert ctx.get_rank() == 0 and ctx.get_size() == 1 and ctx.is_chief
    assert ctx.gather({"a": 1}) == [{"a": 1}]
    assert ctx.allgather(3) == [3]
    assert ctx.broadcast("x") == "x"
    assert ctx.gather_local(1) == [1] and ctx.allgather_local(1) == [1] and ctx.broadcast_local(1) == 1


def test_from_torch_distributed_needs_torchrun_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(DetError, match="run under torchrun"):
        DistributedContext.from_torch_distributed()


def test_from_torch_distributed_with_one_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "0"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    ctx = DistributedContext.from_torch_distributed()
    assert (ctx.rank, ctx.size, ctx.cross_size) == (0, 1, 1)


def test_an_impossible_layout_is_refused() -> None:
    with pytest.raises(DetError, match="invalid distributed layout"):
        DistributedContext(rank=2, size=2)


WORKER = r"""
import json, os, sys
from pathlib import Path
import det_airflow as det
from det_airflow.errors import DetError

out = Path(sys.argv[1])
dist = det.core.DistributedContext.from_torch_distributed()
r = dist.rank
result = {
    "layout": [dist.rank, dist.size, dist.local_rank, dist.local_size, dist.cross_rank, dist.cross_size],
    "gather": dist.gather(r * 10),
    "allgather": dist.allgather({"rank": r}),
    "broadcast": dist.broadcast(f"from {r}"),
    "gather_local": dist.gather_local(r),
    "allgather_local": dist.allgather_local(r),
    "broadcast_local": dist.broadcast_local(f"local from {r}"),
}
with det.core.init(distributed=dist) as core_context:
    core_context.train.report_training_metrics(1, {"loss": float(r)})  # only the chief's is kept
    core_context.train.report_validation_metrics(1, {"validation_loss": float(r)})
    result["should_preempt"] = core_context.preempt.should_preempt()
    lengths = []
    for op in core_context.searcher.operations():
        lengths.append(op.length)
        op.report_completed(0.5)
    result["lengths"] = lengths
    src = out / f"upload-{r}"
    src.mkdir()
    (src / "w.txt").write_text(f"rank {r}")
    result["upload"] = core_context.checkpoint.upload(src if r == 0 else None, {"steps_completed": 1})
    with core_context.checkpoint.restore_path(result["upload"]) as path:
        result["restored"] = (path / "w.txt").read_text()
    try:
        with core_context.checkpoint.store_path({"steps_completed": 1}):
            pass
        result["store_path"] = "ok"
    except DetError as exc:
        result["store_path"] = str(exc)
(out / f"rank{r}.json").write_text(json.dumps(result))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker_env(python_env: dict[str, str], store: Path) -> dict[str, str]:
    env = {k: v for k, v in python_env.items() if not k.startswith("DET_")}
    env["DET_LOCAL_STORE"] = str(store)
    env["DET_EXPERIMENT_CONFIG"] = json.dumps(
        {"searcher": {"name": "single", "metric": "validation_loss", "max_length": {"batches": 8}}}
    )
    env["OMP_NUM_THREADS"] = "1"
    return env


def _results(out: Path, n: int) -> list[dict]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(n)]


def _check_core(results: list[dict], store: Path) -> None:
    uploads = {r["upload"] for r in results}
    assert len(uploads) == 1  # every worker got the chief's storage id
    assert all(r["restored"] == "rank 0" for r in results)
    assert all(r["lengths"] == [8] for r in results)
    assert all(r["should_preempt"] is False for r in results)
    assert results[0]["store_path"] == "ok"
    assert all("chief (rank 0) only" in r["store_path"] for r in results[1:])
    metrics = [json.loads(line) for line in (store / "metrics.jsonl").read_text().splitlines()]
    assert [(m["group"], m["metrics"]) for m in metrics] == [
        ("training", {"loss": 0.0}),
        ("validation", {"validation_loss": 0.0}),
    ]


def test_two_workers_under_torchrun(tmp_path: Path, python_env: dict[str, str]) -> None:
    pytest.importorskip("torch")
    (tmp_path / "worker.py").write_text(WORKER)
    store = tmp_path / "store"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            "worker.py",
            str(tmp_path),
        ],
        cwd=tmp_path,
        env=_worker_env(python_env, store),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    results = _results(tmp_path, 2)
    assert [r["layout"] for r in results] == [[0, 2, 0, 2, 0, 1], [1, 2, 1, 2, 0, 1]]
    for r in results:
        assert r["gather"] == ([0, 10] if r["layout"][0] == 0 else None)
        assert r["allgather"] == [{"rank": 0}, {"rank": 1}]
        assert r["broadcast"] == "from 0"
        assert r["allgather_local"] == [0, 1] and r["broadcast_local"] == "local from 0"
    _check_core(results, store)


def test_two_nodes_of_two_workers(tmp_path: Path, python_env: dict[str, str]) -> None:
    """Four processes laid out as torchrun lays out two nodes: the _local collectives stay on a node."""
    pytest.importorskip("torch")
    (tmp_path / "worker.py").write_text(WORKER)
    store = tmp_path / "store"
    base = _worker_env(python_env, store)
    base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE="4", LOCAL_WORLD_SIZE="2")
    procs = []
    for rank in range(4):
        env = {**base, "RANK": str(rank), "LOCAL_RANK": str(rank % 2), "GROUP_RANK": str(rank // 2)}
        procs.append(
            subprocess.Popen(
                [sys.executable, "worker.py", str(tmp_path)],
                cwd=tmp_path,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], "\n".join(outputs)
    results = _results(tmp_path, 4)
    assert [r["layout"] for r in results] == [
        [0, 4, 0, 2, 0, 2],
        [1, 4, 1, 2, 0, 2],
        [2, 4, 0, 2, 1, 2],
        [3, 4, 1, 2, 1, 2],
    ]
    assert results[0]["gather"] == [0, 10, 20, 30] and all(r["gather"] is None for r in results[1:])
    assert all(r["allgather"] == [{"rank": i} for i in range(4)] for r in results)
    assert all(r["broadcast"] == "from 0" for r in results)
    assert [r["gather_local"] for r in results] == [[0, 1], None, [2, 3], None]
    assert [r["allgather_local"] for r in results] == [[0, 1], [0, 1], [2, 3], [2, 3]]
    assert [r["broadcast_local"] for r in results] == ["local from 0"] * 2 + ["local from 2"] * 2
    _check_core(results, store)


def test_several_workers_without_a_rendezvous_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    with pytest.raises(DetError, match="MASTER_ADDR/MASTER_PORT are not set"):
        DistributedContext(rank=0, size=2)
