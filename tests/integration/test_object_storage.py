"""Checkpoints in object storage on a real Airflow, for each store against a local server: moto's
S3 server, fake-gcs-server and Azurite. The store's address and credentials are only in Airflow's
connection of its type (`aws_default`, `google_cloud_default`, `wasb_default`); the experiment
YAML names none.

A trial, which holds none of the connection's credentials, saves checkpoints to the store through
the master, fails once and resumes from its latest checkpoint read back from it; garbage collection deletes the objects of the checkpoints the policy does not keep;
a Viewer with no credentials downloads a checkpoint through the master, byte for byte; `det e
delete` leaves no object behind; a YAML naming a connection the platform does not give out is
refused at `det e create`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.azure_server import azure_client, azure_server
from tests.gcs_server import gcs_client, gcs_server
from tests.integration.conftest import TEST_USERS
from tests.integration.det_env import DetEnv, wait_until
from tests.s3_server import s3_client, s3_server

pytestmark = pytest.mark.integration

BUCKET = "det-checkpoints"
PREFIX = "team-a"
WEIGHTS = bytes(range(256)) * 4096  # 1 MiB

# Saves a checkpoint per step (a nested file and 1 MiB of weights); its first run fails after the
# third, the restart resumes from the checkpoint it reads back from the store.
TRAIN_PY = """
import os
import sys

import det_airflow as det

WEIGHTS = bytes(range(256)) * 4096
names = ("AWS_", "AZURE_STORAGE_", "GOOGLE_APPLICATION_CREDENTIALS", "DET_GCS_CREDENTIALS")
print("store credentials:", sorted(name for name in os.environ if name.startswith(names)))
info = det.get_cluster_info()
with det.core.init() as core:
    start = 0
    if info.latest_checkpoint:
        with core.checkpoint.restore_path(info.latest_checkpoint) as path:
            start = int((path / "state" / "step").read_text())
            assert (path / "weights.bin").read_bytes() == WEIGHTS, "weights differ after restore"
        print(f"resumed at step {start} from {info.latest_checkpoint}")
    for step in range(start + 1, 7):
        with core.checkpoint.store_path({"steps_completed": step}) as (path, uuid):
            (path / "state").mkdir()
            (path / "state" / "step").write_text(str(step))
            (path / "weights.bin").write_bytes(WEIGHTS)
        core.train.report_validation_metrics(steps_completed=step, metrics={"loss": 1.0 / step})
        if step == 3 and not info.latest_checkpoint:
            sys.exit(3)
"""


@dataclass(frozen=True)
class Store:
    """One object store as the tests see it: the YAML section naming it, the field naming its
    connection, the keys its section must never register, and its objects under PREFIX."""

    section: dict[str, str]
    conn_field: str
    secrets: frozenset[str]
    objects: Callable[..., dict[str, bytes]]  # (read=True): without read, names only, bodies empty

    def keys(self) -> list[str]:
        # Names only: an object listed while the master deletes it is gone before it could be read.
        return sorted(self.objects(read=False))


def _s3_objects(url: str, read: bool = True) -> dict[str, bytes]:
    client = s3_client(url)
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix=f"{PREFIX}/").get("Contents", [])
    return {
        o["Key"]: client.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read() if read else b""
        for o in listed
    }


def _gcs_objects(url: str, read: bool = True) -> dict[str, bytes]:
    bucket = gcs_client(url).bucket(BUCKET)
    return {
        blob.name: blob.download_as_bytes() if read else b""
        for blob in bucket.list_blobs(prefix=f"{PREFIX}/")
    }


def _azure_objects(connection_string: str, read: bool = True) -> dict[str, bytes]:
    container = azure_client(connection_string).get_container_client(BUCKET)
    return {
        blob.name: container.download_blob(blob.name).readall() if read else b""
        for blob in container.list_blobs(name_starts_with=f"{PREFIX}/")
    }


@contextlib.contextmanager
def _store(kind: str, airflow: Any) -> Iterator[Store]:
    """The store's server running, and the Airflow connection of its type pointing at it."""

    def connect(conn_id: str, conn_type: str, extra: dict[str, str], *fields: str) -> None:
        airflow.airflow("connections", "delete", conn_id)
        added = airflow.airflow(
            "connections",
            "add",
            conn_id,
            "--conn-type",
            conn_type,
            "--conn-extra",
            json.dumps(extra),
            *fields,
        )
        assert added.returncode == 0, added.stderr

    if kind == "s3":
        with s3_server(BUCKET) as url:
            extra = {"endpoint_url": url, "region_name": "us-east-1"}
            connect("aws_default", "aws", extra, "--conn-login", "det", "--conn-password", "det")
            secrets = frozenset({"access_key", "secret_key", "session_token"})
            yield Store(
                {"type": "s3", "bucket": BUCKET},
                "aws_conn_id",
                secrets,
                lambda read=True: _s3_objects(url, read),
            )
    elif kind == "gcs":
        with gcs_server(BUCKET) as url:
            connect("google_cloud_default", "google_cloud_platform", {"endpoint_url": url})
            secrets = frozenset({"credentials_info"})
            yield Store(
                {"type": "gcs", "bucket": BUCKET},
                "gcp_conn_id",
                secrets,
                lambda read=True: _gcs_objects(url, read),
            )
    else:
        with azure_server(BUCKET) as connection_string:
            connect("wasb_default", "wasb", {"connection_string": connection_string})
            secrets = frozenset({"connection_string", "credential"})
            yield Store(
                {"type": "azure", "container": BUCKET},
                "wasb_conn_id",
                secrets,
                lambda read=True: _azure_objects(connection_string, read),
            )


@pytest.fixture(scope="module", params=["s3", "gcs", "azure"])
def store(request: pytest.FixtureRequest, airflow: Any) -> Iterator[Store]:
    with _store(request.param, airflow) as store:
        yield store


@pytest.fixture(scope="module")
def det(airflow: Any, tmp_path_factory: pytest.TempPathFactory) -> DetEnv:
    return DetEnv.install(airflow, tmp_path_factory.mktemp("det-config"))


def write_experiment(tmp_path: Path, storage: dict[str, Any]) -> tuple[Path, Path]:
    context = tmp_path / "context"
    context.mkdir()
    (context / "train.py").write_text(TRAIN_PY)
    config = {
        "name": f"{storage['type']}-checkpoints",
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 6}},
        "max_restarts": 1,
        "checkpoint_storage": storage,
    }
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(config))
    return path, context


def sha256_tree(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_checkpoints_live_in_the_store_from_save_to_delete(det: DetEnv, store: Store, tmp_path: Path) -> None:
    storage = {
        **store.section,
        "prefix": PREFIX,
        "save_trial_latest": 2,
        "save_trial_best": 0,
        "save_experiment_best": 0,
    }
    config, context = write_experiment(tmp_path, storage)
    experiment_id = det.create(config, context)
    experiment = det.wait_experiment(experiment_id)["experiment"]
    (trial,) = det.get(f"/experiments/{experiment_id}/trials")["trials"]
    logs = det.det("trial", "logs", str(trial["id"])).stdout

    assert experiment["state"] == "COMPLETED", logs
    # The connection's key stays with the master: the trial's files go through it.
    assert logs.count("store credentials: []") == 2, logs
    assert trial["restarts"] == 1
    assert "resumed at step 3 from" in logs
    steps = [
        m["steps_completed"] for m in det.get(f"/trials/{trial['id']}/metrics?group=validation")["metrics"]
    ]
    assert steps == [1, 2, 3, 4, 5, 6]  # no step stored twice after the resume

    # The policy keeps the latest two; the bucket holds exactly their objects.
    checkpoints = det.get(f"/experiments/{experiment_id}/checkpoints")["checkpoints"]
    kept = sorted(c["uuid"] for c in checkpoints if c["state"] == "COMPLETED")
    assert len(kept) == 2

    # The master removes the others' objects in the background (no worker host reports here).
    wait_until(
        lambda: sorted({key.split("/")[1] for key in store.keys()} - {"tensorboard"}) == kept or None,
        "the store to hold only the kept checkpoints' objects",
    )
    stored = store.objects()
    # Beside them, the trial's TensorBoard events of its reported metrics (each run's own file).
    (trial,) = det.get(f"/experiments/{experiment_id}/trials")["trials"]
    events = f"{PREFIX}/tensorboard/experiment/{experiment_id}/trial/{trial['id']}/events.out.tfevents."
    assert len([key for key in stored if key.startswith(events)]) == 2, sorted(stored)
    newest = max((c for c in checkpoints if c["state"] == "COMPLETED"), key=lambda c: c["steps_completed"])
    assert newest["storage"]["type"] == storage["type"] and newest["steps_completed"] == 6
    assert BUCKET in newest["storage"].values()
    assert not store.secrets & set(newest["storage"])
    assert "AccountKey" not in json.dumps(newest["storage"])

    # A Viewer has no bucket credentials: the master streams the files.
    viewer = det.as_user("viewer", viewer_password(det), tmp_path / "viewer-config")
    target = tmp_path / "downloaded"
    viewer.det("checkpoint", "download", newest["uuid"], "-o", str(target))
    expected = {
        key.removeprefix(f"{PREFIX}/{newest['uuid']}/"): hashlib.sha256(body).hexdigest()
        for key, body in stored.items()
        if key.startswith(f"{PREFIX}/{newest['uuid']}/")
    }
    assert sha256_tree(target) == expected
    assert (target / "state" / "step").read_text() == "6"
    assert hashlib.sha256((target / "weights.bin").read_bytes()).digest() == hashlib.sha256(WEIGHTS).digest()

    det.wait_dag_run(experiment)  # a COMPLETED experiment's run ends moments later; delete waits for it
    det.det("experiment", "delete", str(experiment_id), "--yes")
    wait_until(lambda: store.keys() == [] or None, "every object of the deleted experiment removed")


def viewer_password(det: DetEnv) -> str:
    from det_airflow.localairflow import PASSWORDS_FILE

    stored = json.loads((det.af.home / PASSWORDS_FILE).read_text())
    assert "viewer" in TEST_USERS
    return str(stored["viewer"])


def test_a_connection_the_platform_does_not_give_out_is_refused(
    det: DetEnv, store: Store, tmp_path: Path
) -> None:
    before = det.experiment_count()
    config, context = write_experiment(tmp_path, {**store.section, store.conn_field: "admin_only"})

    refused = det.det("experiment", "create", str(config), str(context), check=False)

    assert refused.returncode != 0
    assert f"checkpoint_storage.{store.conn_field}" in refused.stderr and "admin_only" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert det.experiment_count() == before
