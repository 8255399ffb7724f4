"""Another user's trial cannot reach a checkpoint in the platform's bucket: trials run as the trial
slot's task runs them (the trial operator, the local runner, the master served on loopback), their
checkpoints in moto's S3 server, which, as S3 does, checks every request's signature and lets in
only the platform's key, held in Airflow's ``aws_default`` connection.

Alice's trial saves a checkpoint. Bob's trial, knowing where it is, tries to list the bucket, read
and overwrite her ``model.pt`` straight from the store (with whatever its environment holds, and
unsigned) and through the master: every attempt is refused, her object is unchanged, her download
returns her bytes and her next trial resumes from them."""

from __future__ import annotations

import json
import os
import sys
import uuid as uuids
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import update

from det_airflow.master import auth, schema, trial_storage
from det_airflow.master.auth import SERVICE_TOKEN_SETTING, hash_token
from det_airflow.master.db import set_setting
from det_airflow.operators.trial import TrialOperator
from tests.s3_server import s3_server_with_auth
from tests.unit.master.creating import Creator, creator, tar_gz  # noqa: F401
from tests.unit.master.people_app import People, people  # noqa: F401 - creator's
from tests.unit.master.served import served
from tests.unit.operators.test_kubernetes_deferral import SERVICE_TOKEN, trial_logs

BUCKET = "platform-checkpoints"
ALICES_WEIGHTS = b"alice's weights"

ALICE_TRAIN = b"""\
import det_airflow as det

info = det.get_cluster_info()
with det.core.init() as core:
    if info.latest_checkpoint:
        with core.checkpoint.restore_path(info.latest_checkpoint) as path:
            print("RESUMED " + (path / "model.pt").read_text())
    else:
        with core.checkpoint.store_path({"steps_completed": 1}) as (path, uuid):
            (path / "model.pt").write_text("alice's weights")
        print("SAVED " + uuid)
"""

# What bob's trial tries, knowing the store's address and where alice's checkpoint is.
BOB_TRAIN = """\
import json, os, urllib.error, urllib.request

import boto3
from botocore import UNSIGNED
from botocore.config import Config

import det_airflow as det

URL, BUCKET, UUID = {url!r}, {bucket!r}, {uuid!r}
KEY = "team/" + UUID + "/model.pt"


def attempt(action):
    try:
        return "done: " + repr(action())[:100]
    except Exception as exc:
        return f"refused: {{type(exc).__name__}}: {{exc}}"[:400]


signed = boto3.client("s3", endpoint_url=URL, region_name="us-east-1")
unsigned = boto3.client(
    "s3", endpoint_url=URL, region_name="us-east-1", config=Config(signature_version=UNSIGNED)
)
found = {{
    "store credentials in the environment": sorted(
        k for k in os.environ if k.startswith(("AWS_", "AZURE_", "GOOGLE_")) or k == "DET_GCS_CREDENTIALS"
    ),
    "list": attempt(lambda: signed.list_objects_v2(Bucket=BUCKET)["KeyCount"]),
    "read": attempt(lambda: signed.get_object(Bucket=BUCKET, Key=KEY)["Body"].read()),
    "overwrite": attempt(lambda: signed.put_object(Bucket=BUCKET, Key=KEY, Body=b"bob's weights")),
    "list unsigned": attempt(lambda: unsigned.list_objects_v2(Bucket=BUCKET)["KeyCount"]),
    "read unsigned": attempt(lambda: unsigned.get_object(Bucket=BUCKET, Key=KEY)["Body"].read()),
    "overwrite unsigned": attempt(
        lambda: unsigned.put_object(Bucket=BUCKET, Key=KEY, Body=b"bob's weights")
    ),
}}
with det.core.init() as core:
    found["read through the Core API"] = attempt(lambda: core.checkpoint.download(UUID, "stolen"))

base = "{{}}/det/api/v1/runtime/trials/{{}}/storage".format(os.environ["DET_MASTER"], os.environ["DET_TRIAL_ID"])


def status(method, path, body=None):
    request = urllib.request.Request(
        base + path, data=body, method=method,
        headers={{"Authorization": "Bearer " + os.environ["DET_SESSION_TOKEN"]}},
    )
    try:
        with urllib.request.urlopen(request) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


found["GET from the master"] = status("GET", "/checkpoints/" + UUID + "/files/model.pt")
found["PUT to the master"] = status("PUT", "/checkpoints/" + UUID + "/files/model.pt", b"bob's weights")
found["DELETE at the master"] = status("DELETE", "/checkpoints/" + UUID)
print("ATTEMPTS " + json.dumps(found))
"""


@pytest.fixture
def platform(
    creator: Creator,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[People, str, str]]:
    """The master over HTTP, its det_default connection (the slot's task reaches it with the
    service token) and its aws_default connection, the only key the bucket lets in; yields the
    app, the master's URL and the store's URL."""
    app = creator.people  # with Airflow's pools, which the job queue reads
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # a worker that is not root: trials run as it
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    with app.db.begin() as conn:
        set_setting(conn, SERVICE_TOKEN_SETTING, hash_token(SERVICE_TOKEN))
    monkeypatch.setattr(auth, "_service_hash_cache", (0.0, None))
    trial_storage.stores.clear()
    with s3_server_with_auth(BUCKET) as (store_url, key_id, secret), served(app) as url:
        aws = {"conn_type": "aws", "login": key_id, "password": secret, "extra": {"endpoint_url": store_url}}
        monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps(aws))
        det = {"conn_type": "http", "host": url, "password": SERVICE_TOKEN}
        monkeypatch.setenv("AIRFLOW_CONN_DET_DEFAULT", json.dumps(det))
        yield app, url, store_url
    trial_storage.stores.clear()


def run_trial(
    app: People, tmp_path: Path, owner: str, train: bytes, latest_checkpoint: str | None = None
) -> int:
    """Run one trial of a new experiment of ``owner`` through the trial operator; its id."""
    experiment_id = app.add_experiment(owner=owner)
    config = {
        **app.experiment(experiment_id).config,
        "entrypoint": f"{sys.executable} train.py",
        "airflow": {"trial_runner": "local"},
        "checkpoint_storage": {"type": "s3", "bucket": BUCKET, "prefix": "team"},
    }
    with app.db.begin() as conn:
        conn.execute(
            update(schema.experiments).where(schema.experiments.c.id == experiment_id)
            .values(config=config, context=tar_gz({"train.py": train}), search_done=True)
        )  # fmt: skip
    trial_id = app.add_trial(experiment_id, state="QUEUED", latest_checkpoint=latest_checkpoint)
    operator = TrialOperator(
        task_id="trial", experiment_id=experiment_id, slot=0, work_dir=str(tmp_path / "work")
    )
    ti = SimpleNamespace(
        id=uuids.uuid4(), task_id="trial", dag_id=f"det_{experiment_id}", run_id="r", try_number=1,
        max_tries=0, map_index=0,
    )  # fmt: skip
    assert operator.execute({"ti": ti}) == {"trials": [trial_id]}  # type: ignore[arg-type]
    return trial_id


def printed(app: People, trial_id: int, word: str) -> str:
    lines = [line for _, _, line in trial_logs(app, trial_id) if line.startswith(word + " ")]
    assert lines, "\n".join(line for _, _, line in trial_logs(app, trial_id))
    return lines[-1].removeprefix(word + " ")


def bucket_object(store_url: str, key: str) -> bytes:
    """An object as the platform's key reads it."""
    import boto3

    aws = json.loads(os.environ["AIRFLOW_CONN_AWS_DEFAULT"])
    client = boto3.client(
        "s3", endpoint_url=store_url, region_name="us-east-1",
        aws_access_key_id=aws["login"], aws_secret_access_key=aws["password"],
    )  # fmt: skip
    body: bytes = client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    return body


def test_another_users_trial_cannot_read_or_overwrite_a_checkpoint_in_the_bucket(
    platform: tuple[People, str, str], tmp_path: Path
) -> None:
    app, _, store_url = platform
    alices = run_trial(app, tmp_path, "alice", ALICE_TRAIN)
    uuid = printed(app, alices, "SAVED")
    key = f"team/{uuid}/model.pt"
    assert bucket_object(store_url, key) == ALICES_WEIGHTS

    bob_train = BOB_TRAIN.format(url=store_url, bucket=BUCKET, uuid=uuid).encode()
    bobs = run_trial(app, tmp_path, "bob", bob_train)
    found: dict[str, Any] = json.loads(printed(app, bobs, "ATTEMPTS"))

    assert found.pop("store credentials in the environment") == []
    for what in ("list", "read", "overwrite"):
        assert found.pop(what).startswith("refused: NoCredentialsError: Unable to locate credentials"), what
    for what in ("read unsigned", "overwrite unsigned"):
        assert found.pop(what).startswith("refused: ClientError: An error occurred (403)"), what
    # Moto answers an unsigned listing 500 where S3 answers 403: refused either way.
    assert found.pop("list unsigned").startswith("refused: ClientError: An error occurred (")
    assert found.pop("read through the Core API") == (
        f"refused: APIError: permission denied: trial {bobs} may not read checkpoint {uuid}: it belongs to "
        "another user's experiment and is not the checkpoint this experiment warm-starts from"
    )
    assert found == {"GET from the master": 403, "PUT to the master": 409, "DELETE at the master": 403}

    assert bucket_object(store_url, key) == ALICES_WEIGHTS
    download = app.call("alice", "GET", f"/checkpoints/{uuid}/files/model.pt")
    assert download.status_code == 200 and download.content == ALICES_WEIGHTS
    resumed = run_trial(app, tmp_path, "alice", ALICE_TRAIN, latest_checkpoint=uuid)
    assert printed(app, resumed, "RESUMED") == "alice's weights"
