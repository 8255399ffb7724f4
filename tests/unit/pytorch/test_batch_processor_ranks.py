"""``torch_batch_process`` across two real worker processes (TCP collectives): every rank's
``upload_path()`` output lands under ``<output uuid>/rank_<rank>/`` of the checkpoint storage, as in
Determined, and a restarted trial adds to the same folders."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from det_airflow import compat, trial_env
from det_airflow.core._local import read_jsonl

# Determined's own example (torch_batch_process_core_api_comparison) as each rank runs it: a file
# per batch through upload_path, under Determined's import path.
WORKER = r"""
import logging, sys
import torch
from torch.utils.data import TensorDataset
import determined as det
from determined.pytorch import experimental

logging.basicConfig(level=logging.INFO, format="%(message)s")
rank, port, max_batches = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])


class Doubler(experimental.TorchBatchProcessor):
    def __init__(self, context):
        self.context = context

    def process_batch(self, batch, batch_idx):
        with self.context.upload_path() as path:
            (path / f"prediction_output_{batch_idx}").write_text(
                " ".join(str(int(v)) for v in (batch[0] * 2).flatten())
            )

    def on_finish(self):
        with self.context.upload_path() as path:
            (path / "finished").write_text(str(self.context.get_distributed_rank()))


dataset = TensorDataset(torch.arange(23, dtype=torch.float32).reshape(23, 1))  # 6 batches of 4
dist = det.core.DistributedContext(rank=rank, size=2, chief_ip="127.0.0.1", pub_port=port)
experimental.torch_batch_process(
    Doubler, dataset, batch_size=4, checkpoint_interval=1, max_batches=max_batches, distributed_context=dist
)
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run(tmp_path: Path, store: Path, max_batches: int, latest_checkpoint: str = "") -> list[str]:
    """Both ranks' output; each must succeed."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    env.update(
        {
            "PYTHONPATH": str(compat.determined_root()),
            trial_env.LOCAL_STORE: str(store),
            trial_env.TRIAL_ID: "1",
            trial_env.EXPERIMENT_CONFIG: "{}",
            trial_env.LATEST_CHECKPOINT: latest_checkpoint,
        }
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(rank), str(port), str(max_batches)],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(2)
    ]
    try:
        outputs = [proc.communicate(timeout=300)[0] for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    for rank, proc in enumerate(procs):
        assert proc.returncode == 0, f"rank {rank} failed:\n" + "\n".join(outputs)
    return outputs


def _checkpoints(store: Path) -> list[dict]:
    return [r for r in read_jsonl(store / "checkpoints.jsonl") if r.get("state") == "COMPLETED"]


def _files(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(folder.iterdir())}


def test_every_rank_uploads_under_its_own_folder_and_a_restart_adds_to_them(tmp_path: Path) -> None:
    store = tmp_path / "store"
    outputs = _run(tmp_path, store, max_batches=4)
    first = _checkpoints(store)
    output_uuids = {c["metadata"]["default_output_uuid"] for c in first}
    assert len(output_uuids) == 1  # one folder for the whole run, shared by the ranks
    (output_uuid,) = output_uuids
    output = store / "checkpoints" / output_uuid
    assert _files(output / "rank_0") == {
        "finished": "0",
        "prediction_output_0": "0 2 4 6",
        "prediction_output_2": "16 18 20 22",
    }
    assert _files(output / "rank_1") == {
        "finished": "1",
        "prediction_output_1": "8 10 12 14",
        "prediction_output_3": "24 26 28 30",
    }
    # The output is no checkpoint: only the progress checkpoints are registered.
    assert output_uuid not in {c["uuid"] for c in first}
    assert [c["metadata"]["steps_completed"] for c in first] == [2, 4]
    assert f"Files stored with default paths are at: {output}" in outputs[0]

    _run(tmp_path, store, max_batches=6, latest_checkpoint=first[-1]["uuid"])
    assert {c["metadata"]["default_output_uuid"] for c in _checkpoints(store)} == {output_uuid}
    assert sorted(_files(output / "rank_0")) == [
        "finished",
        "prediction_output_0",
        "prediction_output_2",
        "prediction_output_4",
    ]
    assert _files(output / "rank_1")["prediction_output_5"] == "40 42 44"
    assert sorted(p.name for p in output.iterdir()) == ["rank_0", "rank_1"]
