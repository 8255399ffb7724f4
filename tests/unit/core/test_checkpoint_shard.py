"""Sharded checkpoints and selective downloads, across two real worker processes (TCP collectives)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from det_airflow import compat, core
from det_airflow.errors import DetError

WORKER = r"""
import json, sys
from pathlib import Path
import determined as det

out, port, mode = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
dist = det.core.DistributedContext(rank=int(sys.argv[4]), size=2, chief_ip="127.0.0.1", pub_port=port)
r = dist.rank
result = {}
with det.core.init(distributed=dist) as ctx:
    try:
        meta = {"steps_completed": 5, "shards": {f"rank{r}": r}} if r == 0 else {"shards": {f"rank{r}": r}}
        with ctx.checkpoint.store_path(meta, shard=True) as (path, uuid):
            name = "same.bin" if mode == "clash" else f"model-{r}.bin"
            (path / "sub").mkdir()
            (path / "sub" / name).write_bytes(bytes([r]) * (r + 1))
        result["uuid"] = uuid
        dest = out / "download"
        keep = "sub/model-0.bin" if r == 0 else "sub/model-1.bin"
        ctx.checkpoint.download(uuid, dest, det.core.DownloadMode.LocalWorkersShareDownload, selector=lambda p: p == keep)
        result["downloaded"] = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
        with ctx.checkpoint.restore_path(uuid, det.core.DownloadMode.NoSharedDownload) as path:
            result["restored"] = (path / "sub" / f"model-{r}.bin").read_bytes().hex()
        src = out / f"upload-{r}"
        src.mkdir()
        (src / f"w{r}.txt").write_text(str(r))
        result["upload"] = ctx.checkpoint.upload(src, {"steps_completed": 6} if r == 0 else None, shard=True)
    except Exception as exc:
        result["error"] = str(exc)
(out / f"rank{r}.json").write_text(json.dumps(result))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(tmp_path: Path, mode: str) -> tuple[list[dict], Path]:
    port, store = _free_port(), tmp_path / "store"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    env.update(PYTHONPATH=str(compat.determined_root()), DET_LOCAL_STORE=str(store))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(tmp_path), str(port), mode, str(r)],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(2)
    ]
    for proc in procs:
        output, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, output
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)], store


def test_each_rank_writes_its_shard_and_the_chief_registers_once(tmp_path: Path) -> None:
    results, store = _run(tmp_path, "ok")
    assert all("error" not in r for r in results), results
    uuid = results[0]["uuid"]
    assert results[1]["uuid"] == uuid
    folder = store / "checkpoints" / uuid
    assert (folder / "sub" / "model-0.bin").read_bytes() == b"\x00"
    assert (folder / "sub" / "model-1.bin").read_bytes() == b"\x01\x01"
    metadata = json.loads((folder / "metadata.json").read_text())
    assert metadata == {"steps_completed": 5, "shards": {"rank0": 0, "rank1": 1}}
    records = [json.loads(line) for line in (store / "checkpoints.jsonl").read_text().splitlines()]
    assert [r["uuid"] for r in records] == [uuid, results[0]["upload"]]
    assert set(records[0]["resources"]) == {"sub/model-0.bin", "sub/model-1.bin", "metadata.json"}
    # The local chief fetched what either worker selected, once, for both.
    assert all(r["downloaded"] == ["sub/model-0.bin", "sub/model-1.bin"] for r in results)
    assert [r["restored"] for r in results] == ["00", "0101"]
    uploaded = store / "checkpoints" / results[0]["upload"]
    assert sorted(p.name for p in uploaded.iterdir()) == ["metadata.json", "w0.txt", "w1.txt"]
    assert not [p for p in (store / "checkpoints").iterdir() if p.name.startswith(".")]  # no staging left


def test_two_ranks_writing_the_same_file_is_refused_on_both(tmp_path: Path) -> None:
    results, store = _run(tmp_path, "clash")
    for result in results:
        assert "several workers wrote the same files: sub/same.bin (ranks 0, 1)" in result["error"]
    assert not (store / "checkpoints.jsonl").exists()
    assert not list((store / "checkpoints").iterdir())


def test_download_with_a_selector_and_no_sharing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DET_LOCAL_STORE", str(tmp_path / "store"))
    for name in (
        "DET_TRIAL_ID",
        "DET_EXPERIMENT_CONFIG_FILE",
        "DET_EXPERIMENT_CONFIG",
        "DET_HPARAMS",
        "DET_MASTER",
    ):
        monkeypatch.delenv(name, raising=False)
    with core.init() as ctx:
        with ctx.checkpoint.store_path({"steps_completed": 1}) as (path, uuid):
            (path / "a.pt").write_text("a")
            (path / "b.pt").write_text("b")
        ctx.checkpoint.download(uuid, tmp_path / "dl", "NO_SHARED_DOWNLOAD", selector=lambda p: p == "b.pt")
        assert [p.name for p in (tmp_path / "dl").iterdir()] == ["b.pt"]
        with pytest.raises(ValueError):
            ctx.checkpoint.download(uuid, tmp_path / "x", "SOMETIMES")
        with pytest.raises(DetError, match="not at"):
            ctx.checkpoint.download("no-such-uuid", tmp_path / "y", selector=lambda p: True)
