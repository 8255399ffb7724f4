"""What a reader who does not own an experiment sees of its secrets: pod_spec environment values
and credentials inside URLs are masked in every view; the context (whose files may hold secrets) is
its owner's and admins' only; the experiment's file in the DAGs folder is not world-readable."""

from __future__ import annotations

import io
import stat
import tarfile

import pytest

from det_airflow.dagfactory import experiment_file
from det_airflow.master.serialize import MASK
from tests.unit.master.creating import CONFIG, Creator, b64, tar_gz

POD_SECRET = "pod-env-secret"
URL_SECRET = "url-password"
POD_SPEC = f"""\
  pod_spec:
    spec:
      containers:
        - name: determined-container
          env:
            - {{name: HF_TOKEN, value: {POD_SECRET}}}
            - {{name: FROM_SECRET, valueFrom: {{secretKeyRef: {{name: hf, key: token}}}}}}
      initContainers:
        - name: fetch
          image: busybox
          env:
            - {{name: INIT_TOKEN, value: {POD_SECRET}-init}}
"""
VARIABLES = "  environment_variables: [WANDB_API_KEY=wandb-secret, PLAIN=1]\n"
CONFIG_WITH_POD_AND_URLS = (
    CONFIG.replace("url: https://example.org", f"url: https://reader:{URL_SECRET}@example.org/data").replace(
        VARIABLES, VARIABLES + POD_SPEC
    )
    + f"hyperparameters:\n  dataset: s3://AKIAKEY:{URL_SECRET}@bucket/train\n"
)

VIEWS = ["/experiments/{e}", "/experiments/{e}/config"]


@pytest.fixture
def experiment_id(creator: Creator) -> int:
    answer = creator.create(config=CONFIG_WITH_POD_AND_URLS)
    assert answer.status_code == 200, answer.text
    return int(answer.json()["experiment"]["id"])


@pytest.mark.parametrize("path", VIEWS)
@pytest.mark.parametrize("user", ["viewer", "bob"])
def test_pod_env_values_and_url_credentials_are_masked_for_readers(
    creator: Creator, experiment_id: int, user: str, path: str
) -> None:
    answer = creator.people.call(user, "GET", path.format(e=experiment_id))
    assert answer.status_code == 200
    assert POD_SECRET not in answer.text
    assert URL_SECRET not in answer.text
    config = answer.json()["config"]
    pod = config["environment"]["pod_spec"]["spec"]
    assert pod["containers"][0]["env"] == [
        {"name": "HF_TOKEN", "value": MASK},
        {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
    ]
    assert pod["initContainers"][0]["env"] == [{"name": "INIT_TOKEN", "value": MASK}]
    assert config["data"]["url"] == f"https://{MASK}@example.org/data"
    assert config["hyperparameters"]["dataset"]["val"] == f"s3://{MASK}@bucket/train"


@pytest.mark.parametrize("user", ["viewer", "bob"])
def test_url_credentials_in_hyperparameters_are_masked_in_every_trial_view(
    creator: Creator, experiment_id: int, user: str
) -> None:
    listed = creator.people.call(user, "GET", f"/experiments/{experiment_id}/trials").json()["trials"]
    described = creator.people.call(user, "GET", f"/experiments/{experiment_id}").json()["trials"]
    one = creator.people.call(user, "GET", f"/trials/{listed[0]['id']}").json()["trial"]
    for trial in (listed[0], described[0], one):
        assert trial["hparams"]["dataset"] == f"s3://{MASK}@bucket/train"
    owner_view = creator.people.call("alice", "GET", f"/trials/{listed[0]['id']}").json()["trial"]
    assert owner_view["hparams"]["dataset"] == f"s3://AKIAKEY:{URL_SECRET}@bucket/train"


@pytest.mark.parametrize("user", ["alice", "admin"])
def test_the_owner_and_admins_see_the_config_as_sent(creator: Creator, experiment_id: int, user: str) -> None:
    config = creator.people.call(user, "GET", f"/experiments/{experiment_id}/config").json()["config"]
    assert config["environment"]["pod_spec"]["spec"]["containers"][0]["env"][0]["value"] == POD_SECRET
    assert config["data"]["url"] == f"https://reader:{URL_SECRET}@example.org/data"


def test_the_experiment_file_is_masked_and_readable_only_by_owner_and_group(
    creator: Creator, experiment_id: int
) -> None:
    path = experiment_file(creator.people.storage.parent / "dags", experiment_id)
    text = path.read_text()
    assert POD_SECRET not in text
    assert URL_SECRET not in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o750


def _context_files(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


@pytest.mark.parametrize("user", ["viewer", "bob"])
def test_readers_who_do_not_own_it_may_not_download_the_context(creator: Creator, user: str) -> None:
    context = tar_gz({"train.py": b"print(1)\n", ".env": b"API_KEY=context-secret\n"})
    e = creator.create(context=b64(context)).json()["experiment"]["id"]
    answer = creator.people.call(user, "GET", f"/experiments/{e}/context")
    assert answer.status_code == 403
    assert answer.json()["detail"] == (
        f"user '{user}' may not download the context of experiment {e}: its files may hold secrets; "
        "only its owner 'alice' or an admin may"
    )
    assert "context-secret" not in answer.text


@pytest.mark.parametrize("user", ["alice", "admin"])
def test_the_owner_and_admins_download_the_context(creator: Creator, user: str) -> None:
    context = tar_gz({"train.py": b"print(1)\n", ".env": b"API_KEY=context-secret\n"})
    e = creator.create(context=b64(context)).json()["experiment"]["id"]
    answer = creator.people.call(user, "GET", f"/experiments/{e}/context")
    assert answer.status_code == 200
    assert _context_files(answer.content)[".env"] == b"API_KEY=context-secret\n"
