"""TensorBoard files of a trial: every reported metric is a scalar in an event file that TensorBoard
reads back exactly; the trial's folder reaches its storage (shared_fs, s3, gcs, azure) while it trains
and when it ends; the TensorBoard side fetches only what changed; nothing here ever stops training.

The trials report to a stand-in master served over HTTP on loopback; the object stores are the local
servers of the checkpoint tests.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from det_airflow import core
from det_airflow.core import _tensorboard
from det_airflow.core._local import read_jsonl
from det_airflow.core._tensorboard import (
    ENV_VARIABLE,
    fetch_tensorboard,
    local_tensorboard_dir,
    tensorboard_prefix,
)
from det_airflow.errors import DetError
from tests.http_stub import serve

TRIAL_DIR = "tensorboard/experiment/3/trial/7"  # trial 7 of experiment 3, as on_trial sets them


@dataclass
class StandInMaster:
    url: str
    metrics: list[dict[str, Any]] = field(default_factory=list)


@pytest.fixture
def master() -> Iterator[StandInMaster]:
    """A master answering a trial's /runtime routes: no preemption, and every report accepted."""
    received: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if "/preemption" in self.path:
                self._answer(200, {"preempt": False})
            else:
                self._answer(404, {"detail": f"no route GET {self.path}"})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")
            if self.path.endswith("/metrics"):
                received.extend(body["reports"])
            self._answer(200, {})

        def _answer(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    with serve(Handler) as url:
        yield StandInMaster(url, received)


@pytest.fixture(autouse=True)
def events_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VARIABLE, raising=False)


@pytest.fixture
def trial(on_trial: Callable[..., dict[str, str]], master: StandInMaster) -> Callable[..., core.Context]:
    """``core.init()`` in trial 7 of experiment 3, reporting to the stand-in master; its
    checkpoint_storage is shared_fs under tmp_path/shared/ckpts unless one is given."""

    def init(storage: dict[str, Any] | None = None, **kwargs: Any) -> core.Context:
        on_trial(master=master.url, **({"checkpoint_storage": storage} if storage else {}))
        return core.init(**kwargs)

    return init


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    """Where the trial's files land in its shared_fs storage."""
    return tmp_path / "shared" / "ckpts" / TRIAL_DIR


def scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """``{tag: [(step, value), ...]}`` as TensorBoard reads the folder's event files."""
    accumulator = EventAccumulator(str(folder))
    accumulator.Reload()
    return {
        tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]
    }


def event_files(folder: Path) -> list[Path]:
    return sorted(folder.rglob("events.out.tfevents.*")) if folder.exists() else []


def float32(value: float) -> float:
    """``value`` as an event file holds it."""
    return float(struct.unpack("f", struct.pack("f", value))[0])


def test_every_reported_number_is_a_scalar_at_its_step_in_the_shared_storage(
    trial: Callable[..., core.Context], shared: Path, master: StandInMaster
) -> None:
    with trial() as ctx:
        ctx.train.report_training_metrics(10, {"loss": 0.5, "lr": 3, "note": "warm-up", "flag": True})
        ctx.train.report_training_metrics(20, {"loss": 0.25, "lr": 2, "sizes": [1, 2]})
        ctx.train.report_validation_metrics(20, {"accuracy": 0.75, "validation_loss": 0.125})
        ctx.train.report_metrics("inference", 20, {"latency_ms": 4.5, "bad": float("inf")})
    assert scalars(shared) == {
        "training/loss": [(10, 0.5), (20, 0.25)],
        "training/lr": [(10, 3.0), (20, 2.0)],
        "validation/accuracy": [(20, 0.75)],
        "validation/validation_loss": [(20, 0.125)],
        "inference/latency_ms": [(20, 4.5)],
        "inference/bad": [(20, float("inf"))],
    }
    assert len(event_files(shared)) == 1
    assert [r["steps_completed"] for r in master.metrics] == [10, 20, 20, 20]  # the master too


def test_the_folder_reaches_the_storage_while_training_runs(
    trial: Callable[..., core.Context], shared: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_tensorboard, "SYNC_INTERVAL", 0.2)

    def synced(expected: list[tuple[int, float]]) -> bool:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if event_files(shared) and scalars(shared).get("training/loss") == expected:
                return True
            time.sleep(0.05)
        return False

    with trial() as ctx:
        ctx.train.report_training_metrics(1, {"loss": 0.5})
        assert synced([(1, 0.5)])
        ctx.train.report_training_metrics(2, {"loss": 0.25})  # within the interval: sent after it
        assert synced([(1, 0.5), (2, 0.25)])


def test_files_the_training_code_writes_are_synced_and_the_local_folder_goes(
    trial: Callable[..., core.Context], shared: Path
) -> None:
    with trial() as ctx:
        folder = ctx.train.get_tensorboard_path()
        assert folder.is_dir() and not folder.is_relative_to(shared.parents[4])
        (folder / "plugins" / "profile").mkdir(parents=True)
        (folder / "plugins" / "profile" / "trace.json").write_bytes(b'{"traceEvents": []}')
        ctx.train.report_training_metrics(1, {"loss": 0.5})
    assert (shared / "plugins" / "profile" / "trace.json").read_bytes() == b'{"traceEvents": []}'
    assert scalars(shared) == {"training/loss": [(1, 0.5)]}
    assert not folder.exists()  # all of it reached the storage


def test_upload_tensorboard_files_sends_now_and_only_what_the_selector_keeps(
    trial: Callable[..., core.Context], shared: Path
) -> None:
    with trial() as ctx:
        folder = ctx.train.get_tensorboard_path()
        (folder / "keep.txt").write_text("kept")
        (folder / "skip.txt").write_text("skipped")
        ctx.train.upload_tensorboard_files(lambda path: path.name != "skip.txt")
        assert sorted(p.name for p in shared.iterdir()) == ["keep.txt"]
    assert sorted(p.name for p in shared.iterdir()) == ["keep.txt", "skip.txt"]  # at close: all


def test_a_storage_that_fails_is_one_warning_and_training_goes_on(
    trial: Callable[..., core.Context],
    tmp_path: Path,
    master: StandInMaster,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_tensorboard, "SYNC_INTERVAL", 0.05)
    not_a_folder = tmp_path / "a-file"
    not_a_folder.write_text("")
    with (
        caplog.at_level(logging.WARNING, logger="det_airflow.core"),
        trial({"type": "shared_fs", "host_path": str(not_a_folder)}) as ctx,
    ):
        for step in range(1, 6):
            ctx.train.report_training_metrics(step, {"loss": 1.0 / step})
            time.sleep(0.1)
        folder = ctx.train.get_tensorboard_path()
    messages = [r.getMessage() for r in caplog.records if "TensorBoard" in r.getMessage()]
    assert len(messages) == 2, messages
    assert messages[0].startswith(
        f"TensorBoard files: could not sync to {not_a_folder}/{TRIAL_DIR} (training goes on): "
    )
    assert messages[1] == f"TensorBoard files: the last sync failed; they are left in {folder}"
    assert scalars(folder)["training/loss"][-1] == (5, float32(0.2))  # written all along
    assert [r["steps_completed"] for r in master.metrics] == [1, 2, 3, 4, 5]
    shutil.rmtree(folder)


def test_off_cluster_the_events_are_in_the_local_store() -> None:
    with core.init() as ctx:
        ctx.train.report_validation_metrics(5, {"validation_loss": 0.5})
        folder = ctx.train.get_tensorboard_path()
    assert folder == Path(".det_local", "tensorboard/experiment/0/trial/0").absolute()
    assert scalars(folder) == {"validation/validation_loss": [(5, 0.5)]}


def test_a_local_trial_writes_under_its_ids_in_the_local_store(
    on_trial: Callable[..., dict[str, str]],
) -> None:
    on_trial(master=None)
    with core.init() as ctx:
        ctx.train.report_training_metrics(1, {"loss": 0.5})
    assert scalars(Path(".det_local", TRIAL_DIR)) == {"training/loss": [(1, 0.5)]}


@pytest.mark.parametrize("how", ["DET_TENSORBOARD=off", "MANUAL"])
def test_events_can_be_turned_off(how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if how == "MANUAL":
        ctx = core.init(tensorboard_mode=_tensorboard.TensorboardMode.MANUAL)
    else:
        monkeypatch.setenv(ENV_VARIABLE, "OFF")
        ctx = core.init()
    with ctx:
        ctx.train.report_training_metrics(1, {"loss": 0.5})
        folder = ctx.train.get_tensorboard_path()
    assert folder.is_dir() and event_files(folder) == []
    assert [r["steps_completed"] for r in read_jsonl(Path(".det_local/metrics.jsonl"))] == [1]


def test_wrong_switches_are_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(
        DetError, match=r"^core.init\(tensorboard_mode=...\): expected AUTO or MANUAL, got 'SOMETIMES'$"
    ):
        core.init(tensorboard_mode="SOMETIMES")
    monkeypatch.setenv(ENV_VARIABLE, "No")
    with pytest.raises(
        DetError, match=r"^environment variable DET_TENSORBOARD: expected on or off, got 'No'$"
    ):
        core.init()


def test_without_the_tensorboard_package_one_warning_and_training_goes_on(
    tmp_path: Path, python_env: dict[str, str]
) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import sys\n"
        "sys.modules['tensorboard'] = None  # as in an image without the package\n"
        "import det_airflow as det\n"
        "with det.core.init() as ctx:\n"
        "    for step in (1, 2, 3):\n"
        "        ctx.train.report_training_metrics(step, {'loss': 0.5})\n"
        "        ctx.train.upload_tensorboard_files()\n"
        "print('trained')\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=python_env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "trained\n"
    assert done.stderr.splitlines() == [
        "metrics are not written as TensorBoard events: the tensorboard package is not installed "
        "in this environment (pip install tensorboard)"
    ]
    assert [r["steps_completed"] for r in read_jsonl(tmp_path / ".det_local/metrics.jsonl")] == [1, 2, 3]
    assert event_files(tmp_path / ".det_local") == []


def test_where_the_tensorboard_side_finds_a_trials_files(tmp_path: Path) -> None:
    assert tensorboard_prefix(3, 7) == "tensorboard/experiment/3/trial/7/"
    shared_fs = {"type": "shared_fs", "host_path": str(tmp_path), "storage_path": "ckpts"}
    assert local_tensorboard_dir(shared_fs, 3, 7) == tmp_path / "ckpts" / TRIAL_DIR
    directory = {"type": "directory", "container_path": str(tmp_path / "d")}
    assert local_tensorboard_dir(directory, 3, 7) == tmp_path / "d" / TRIAL_DIR
    assert local_tensorboard_dir({"type": "s3", "bucket": "b"}, 3, 7) is None
    with pytest.raises(DetError, match="^checkpoint_storage.host_path: required for type shared_fs$"):
        local_tensorboard_dir({"type": "shared_fs"}, 3, 7)
    assert fetch_tensorboard(shared_fs, 3, 7, tmp_path / "dest") == 0  # nothing there yet
    assert not (tmp_path / "dest").exists()


def test_fetch_copies_what_changed_and_rewrites_a_grown_file_in_place(
    trial: Callable[..., core.Context], tmp_path: Path
) -> None:
    storage = {"type": "shared_fs", "host_path": str(tmp_path / "shared"), "storage_path": "ckpts"}
    dest = tmp_path / "dest"
    with trial() as ctx:
        ctx.train.report_training_metrics(1, {"loss": 0.5})
        ctx.train.upload_tensorboard_files()
        assert fetch_tensorboard(storage, 3, 7, dest) == 1
        [copied] = event_files(dest)
        inode = copied.stat().st_ino
        reader = EventAccumulator(str(dest))  # a TensorBoard reading along
        reader.Reload()
        assert fetch_tensorboard(storage, 3, 7, dest) == 0
        ctx.train.report_training_metrics(2, {"loss": 0.25})
        ctx.train.upload_tensorboard_files()
        assert fetch_tensorboard(storage, 3, 7, dest) == 1
        assert event_files(dest) == [copied] and copied.stat().st_ino == inode
        reader.Reload()
        assert [(e.step, e.value) for e in reader.Scalars("training/loss")] == [(1, 0.5), (2, 0.25)]
    with trial() as ctx:  # the trial's next run: a file of its own
        ctx.train.report_training_metrics(3, {"loss": 0.125})
    assert fetch_tensorboard(storage, 3, 7, dest) == 1
    assert scalars(dest) == {"training/loss": [(1, 0.5), (2, 0.25), (3, 0.125)]}
    copied.unlink()  # lost at the TensorBoard's side: fetched again
    assert fetch_tensorboard(storage, 3, 7, dest) == 1


# --- object stores: the servers of the checkpoint tests ---


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    from tests.s3_server import s3_server

    with s3_server() as url:
        yield url


@pytest.fixture(scope="module")
def azure_connection() -> Iterator[str]:
    from tests.azure_server import azure_server

    with azure_server() as connection_string:
        yield connection_string


@pytest.fixture
def no_cloud_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Nothing of the machine's AWS, Google or Azure setup reaches a test."""
    from google.auth.compute_engine import _metadata

    for name in list(os.environ):
        if name.startswith(("AWS_", "GOOGLE_", "CLOUDSDK_", "GCE_", "AZURE_", "STORAGE_EMULATOR")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "no-gcloud"))
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:9")
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    monkeypatch.setattr(_metadata, "_NO_GCE_CHECK", True)


# Sections that carry their own credentials, which a trial uses itself; a trial reaches a store of
# the platform's credentials (every gcs one) through the master: test_through_master_checkpoints.py.
@pytest.fixture(params=["s3", "azure"])
def object_store(
    request: pytest.FixtureRequest, no_cloud_settings: None
) -> tuple[dict[str, Any], Callable[[], list[str]]]:
    """A ``checkpoint_storage`` section of a fresh bucket or container (prefix team-a), and a
    listing of its keys as the store's own client sees them."""
    name = f"tb-{uuid.uuid4().hex[:12]}"
    if request.param == "s3":
        from tests.s3_server import s3_client

        url = request.getfixturevalue("s3_endpoint")
        client = s3_client(url)
        client.create_bucket(Bucket=name)
        section = {"type": "s3", "bucket": name, "endpoint_url": url, "access_key": "k", "secret_key": "s"}
        return {**section, "prefix": "team-a"}, lambda: sorted(
            o["Key"] for o in client.list_objects_v2(Bucket=name).get("Contents", [])
        )
    from tests.azure_server import azure_client

    connection_string = request.getfixturevalue("azure_connection")
    container = azure_client(connection_string).create_container(name)
    section = {"type": "azure", "container": name, "connection_string": connection_string}
    return {**section, "prefix": "team-a"}, lambda: sorted(b.name for b in container.list_blobs())


def test_an_object_store_receives_the_folder_and_fetch_brings_it_back(
    trial: Callable[..., core.Context],
    object_store: tuple[dict[str, Any], Callable[[], list[str]]],
    tmp_path: Path,
) -> None:
    storage, keys = object_store
    with trial(storage) as ctx:
        (ctx.train.get_tensorboard_path() / "notes.txt").write_text("first")
        ctx.train.report_training_metrics(1, {"loss": 0.5})
        ctx.train.report_validation_metrics(1, {"accuracy": 0.75})
    [events] = [k for k in keys() if "tfevents" in k]
    assert keys() == sorted([events, f"team-a/{TRIAL_DIR}/notes.txt"])
    assert events.startswith(f"team-a/{TRIAL_DIR}/events.out.tfevents.")
    assert local_tensorboard_dir(storage, 3, 7) is None

    dest = tmp_path / "dest"
    assert fetch_tensorboard(storage, 3, 7, dest) == 2
    assert scalars(dest) == {"training/loss": [(1, 0.5)], "validation/accuracy": [(1, 0.75)]}
    assert (dest / "notes.txt").read_text() == "first"
    assert fetch_tensorboard(storage, 3, 7, dest) == 0
    with trial(storage) as ctx:  # the next run rewrites the notes, same size: a new etag
        (ctx.train.get_tensorboard_path() / "notes.txt").write_text("again")
    assert fetch_tensorboard(storage, 3, 7, dest) == 1
    assert (dest / "notes.txt").read_text() == "again"
    assert fetch_tensorboard(storage, 4, 7, tmp_path / "other") == 0  # another trial: nothing


# --- the PyTorch Trainer reports through the Core API ---


def test_the_trainers_reports_are_the_events_unless_logging_is_disabled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    from det_airflow import pytorch
    from tests.unit.pytorch._trials import TinyTrial

    exp_conf = {"searcher": {"name": "single", "metric": "validation_loss"}}
    hparams = {"lr": 0.1, "global_batch_size": 8}
    for enabled, store in ((True, tmp_path / "on"), (False, tmp_path / "off")):
        monkeypatch.setenv("DET_LOCAL_STORE", str(store))
        with pytorch.init(hparams=hparams, exp_conf=exp_conf, enable_tensorboard_logging=enabled) as context:
            pytorch.Trainer(TinyTrial(context), context).fit(
                max_length=pytorch.Batch(20),
                reporting_period=pytorch.Batch(10),
                validation_period=pytorch.Batch(20),
                checkpoint_policy="none",
            )
    reported: dict[str, list[tuple[int, float]]] = {}
    for report in read_jsonl(tmp_path / "on" / "metrics.jsonl"):
        for name, value in report["metrics"].items():
            reported.setdefault(f"{report['group']}/{name}", []).append(
                (report["steps_completed"], float32(value))
            )
    assert set(reported) >= {"training/loss", "validation/validation_loss", "validation/accuracy"}
    assert scalars(tmp_path / "on" / "tensorboard/experiment/0/trial/0") == reported
    assert event_files(tmp_path / "off") == []


def test_the_folders_above_a_trials_are_everyones_to_write_in(
    trial: Callable[..., core.Context], shared: Path
) -> None:
    import stat

    with trial() as ctx:
        ctx.train.report_training_metrics(1, {"loss": 0.5})
    # The first trial to keep TensorBoard files in a storage makes these; every other user's trials
    # must still make their experiments' folders there (the checkpoint root's own mode).
    storage = shared.parents[4]
    for level in (storage / "tensorboard", storage / "tensorboard" / "experiment"):
        assert stat.S_IMODE(level.stat().st_mode) == 0o1733, level
    assert stat.S_IMODE(shared.stat().st_mode) & 0o022 == 0  # the trial's own: nobody else writes in it
    assert len(event_files(shared)) == 1
