"""Checkpoints in S3-compatible object storage on a real Airflow: moto's standalone S3 server, its
credentials only in Airflow's `aws_default` connection (the experiment YAML names none).

A trial saves checkpoints to the bucket, fails once and resumes from its latest checkpoint read
back from the bucket; garbage collection deletes the objects of the checkpoints the policy does not
keep; a Viewer with no bucket credentials downloads a checkpoint through the master, byte for byte;
`det e delete` leaves no object behind; a YAML naming a connection the platform does not give out
is refused at `det e create`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.conftest import TEST_USERS
from tests.integration.det_env import DetEnv, wait_until
from tests.s3_server import s3_client, s3_server

pytestmark = pytest.mark.integration

BUCKET = "det-checkpoints"
PREFIX = "team-a"
WEIGHTS = bytes(range(256)) * 4096  # 1 MiB

# Saves a checkpoint per step (a nested file and 1 MiB of weights); its first run fails after the
# third, the restart resumes from the checkpoint it reads back from the bucket.
TRAIN_PY = """
import sys

import det_airflow as det

WEIGHTS = bytes(range(256)) * 4096
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


@pytest.fixture(scope="module")
def s3_url() -> Iterator[str]:
    with s3_server(BUCKET) as url:
        yield url


@pytest.fixture(scope="module")
def det(airflow, s3_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DetEnv]:
    extra = json.dumps({"endpoint_url": s3_url, "region_name": "us-east-1"})
    airflow.airflow("connections", "delete", "aws_default")
    added = airflow.airflow(
        "connections", "add", "aws_default", "--conn-type", "aws",
        "--conn-login", "det", "--conn-password", "det", "--conn-extra", extra,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    yield DetEnv.install(airflow, tmp_path_factory.mktemp("det-config"))


def keys(url: str) -> list[str]:
    listed = s3_client(url).list_objects_v2(Bucket=BUCKET, Prefix=f"{PREFIX}/").get("Contents", [])
    return [o["Key"] for o in listed]


def objects(url: str) -> dict[str, bytes]:
    client = s3_client(url)
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix=f"{PREFIX}/").get("Contents", [])
    return {o["Key"]: client.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read() for o in listed}


def write_experiment(tmp_path: Path, storage: dict[str, Any]) -> tuple[Path, Path]:
    context = tmp_path / "context"
    context.mkdir()
    (context / "train.py").write_text(TRAIN_PY)
    config = {
        "name": "s3-checkpoints",
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 6}},
        "max_restarts": 1,
        "checkpoint_storage": storage,
    }
    path = tmp_path / "s3.yaml"
    path.write_text(yaml.safe_dump(config))
    return path, context


def sha256_tree(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_checkpoints_live_in_the_bucket_from_save_to_delete(det: DetEnv, s3_url: str, tmp_path: Path) -> None:
    storage = {
        "type": "s3",
        "bucket": BUCKET,
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
        lambda: sorted({key.split("/")[1] for key in keys(s3_url)}) == kept or None,
        "the bucket to hold only the kept checkpoints' objects",
    )
    stored = objects(s3_url)
    newest = max((c for c in checkpoints if c["state"] == "COMPLETED"), key=lambda c: c["steps_completed"])
    assert newest["storage"]["type"] == "s3" and newest["steps_completed"] == 6
    assert newest["storage"]["bucket"] == BUCKET
    assert not {"access_key", "secret_key", "session_token"} & set(newest["storage"])

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

    det.det("experiment", "delete", str(experiment_id), "--yes")
    wait_until(lambda: keys(s3_url) == [] or None, "every object of the deleted experiment removed")


def viewer_password(det: DetEnv) -> str:
    from det_airflow.localairflow import PASSWORDS_FILE

    stored = json.loads((det.af.home / PASSWORDS_FILE).read_text())
    assert "viewer" in TEST_USERS
    return str(stored["viewer"])


def test_a_connection_the_platform_does_not_give_out_is_refused(det: DetEnv, tmp_path: Path) -> None:
    before = det.experiment_count()
    config, context = write_experiment(tmp_path, {"type": "s3", "bucket": BUCKET, "aws_conn_id": "aws_admin"})

    refused = det.det("experiment", "create", str(config), str(context), check=False)

    assert refused.returncode != 0
    assert "checkpoint_storage.aws_conn_id" in refused.stderr and "aws_admin" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert det.experiment_count() == before
