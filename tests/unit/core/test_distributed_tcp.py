"""DistributedContext(rank=..., size=..., chief_ip=...) across real processes, with torch unimportable."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from det_airflow import compat
from det_airflow.core import DistributedContext
from det_airflow.errors import DetError

# torch is made unimportable in the workers: these collectives must not need it.
WORKER = r"""
import json, sys
sys.modules["torch"] = None
from pathlib import Path
import determined as det

out, port, layout = Path(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
dist = det.core.DistributedContext(**layout, chief_ip="127.0.0.1", pub_port=port)
r = dist.rank
result = {
    "gather": dist.gather(r * 10),
    "allgather": dist.allgather({"rank": r}),
    "broadcast": dist.broadcast(f"from {r}"),
    "gather_local": dist.gather_local(r),
    "allgather_local": dist.allgather_local(r),
    "broadcast_local": dist.broadcast_local(f"local from {r}"),
    "big": len(dist.broadcast(b"x" * 3_000_000 if r == 0 else None)),
}
dist.close()
(out / f"rank{r}.json").write_text(json.dumps(result))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(tmp_path: Path, layouts: list[dict[str, int]]) -> list[dict]:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    env["PYTHONPATH"] = str(compat.determined_root())  # `import determined`, as a trial gets it
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(tmp_path), str(port), json.dumps(layout)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for layout in layouts
    ]
    for proc in procs:
        output, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, output
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(len(layouts))]


def test_two_processes_without_torch(tmp_path: Path) -> None:
    results = _run(tmp_path, [{"rank": r, "size": 2, "local_rank": r, "local_size": 2} for r in range(2)])
    assert results[0]["gather"] == [0, 10] and results[1]["gather"] is None
    assert all(r["allgather"] == [{"rank": 0}, {"rank": 1}] for r in results)
    assert all(r["broadcast"] == "from 0" for r in results)
    assert all(r["broadcast_local"] == "local from 0" for r in results)
    assert results[0]["gather_local"] == [0, 1] and results[1]["gather_local"] is None
    assert all(r["big"] == 3_000_000 for r in results)


def test_two_nodes_of_two_workers_meet_at_their_local_chiefs(tmp_path: Path) -> None:
    layouts = [
        {"rank": r, "size": 4, "local_rank": r % 2, "local_size": 2, "cross_rank": r // 2, "cross_size": 2}
        for r in range(4)
    ]
    results = _run(tmp_path, layouts)
    assert results[0]["gather"] == [0, 10, 20, 30]
    assert all(r["allgather"] == [{"rank": i} for i in range(4)] for r in results)
    assert [r["allgather_local"] for r in results] == [[0, 1], [0, 1], [2, 3], [2, 3]]
    assert [r["broadcast_local"] for r in results] == ["local from 0"] * 2 + ["local from 2"] * 2
    assert results[2]["gather_local"] == [2, 3] and results[3]["gather_local"] is None


def test_a_worker_that_cannot_reach_the_chief_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from det_airflow.core import _tcp

    monkeypatch.setattr(_tcp, "CONNECT_TIMEOUT_SECONDS", 0.5)
    with pytest.raises(DetError, match="cannot reach the chief at 127.0.0.1"):
        DistributedContext(rank=1, size=2, chief_ip="127.0.0.1", pub_port=_free_port(), force_tcp=True)


def test_from_horovod_and_from_deepspeed_with_one_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    class Hvd:
        rank = local_rank = cross_rank = staticmethod(lambda: 0)
        size = local_size = cross_size = staticmethod(lambda: 1)

    assert DistributedContext.from_horovod(Hvd).size == 1
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(DetError, match="run under the deepspeed launcher"):
        DistributedContext.from_deepspeed()
    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_SIZE": "1"}.items():
        monkeypatch.setenv(name, value)
    assert (DistributedContext.from_deepspeed().rank, DistributedContext.from_deepspeed().size) == (0, 1)


def test_preempt_mode_chief_only_refuses_workers_and_a_bad_mode_is_named(tmp_path: Path) -> None:
    from det_airflow import core
    from det_airflow.core._preempt import PreemptContext

    assert core.PreemptMode.parse("ChiefOnly") is core.PreemptMode.ChiefOnly
    with pytest.raises(
        DetError, match="expected one of WorkersAskChief, ChiefOnly, ExplicitWorkers, got 'Often'"
    ):
        core.init(preempt_mode="Often")
    backend = core.LocalBackend(tmp_path)
    worker = DistributedContext.__new__(DistributedContext)
    worker.rank, worker.size = 1, 2
    with pytest.raises(DetError, match="chief only with PreemptMode.ChiefOnly"):
        PreemptContext(worker, backend, mode=core.PreemptMode.ChiefOnly).should_preempt()
    assert PreemptContext(worker, backend, mode=core.PreemptMode.ExplicitWorkers).should_preempt() is False
