"""The Kubernetes runner without a cluster: the objects it submits, read back as the kubernetes
client serializes them for the API server, and its control flow (create, stream, exit code, stop,
clean-up) against a scripted stand-in for :class:`KubernetesCluster`, whose pod statuses are
deserialized by the kubernetes client from the JSON an API server sends."""

from __future__ import annotations

import copy
import json
import re
import secrets
import sys
import threading
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from kubernetes.client import ApiClient
from kubernetes.client import models as k8s
from kubernetes.client.exceptions import ApiException

from det_airflow import settings as det_settings
from det_airflow.config import config_to_dict, parse_config
from det_airflow.errors import DetError
from det_airflow.object_storage import CREDENTIAL_VARIABLES
from det_airflow.operators.runners import (
    LABEL_EXPERIMENT,
    LABEL_RUN,
    LABEL_TRIAL,
    ContainerTrial,
    build_runner,
    container_environment,
    kubernetes_pod,
)
from det_airflow.operators.runners.kubernetes import (
    KILLED,
    KubernetesCluster,
    KubernetesError,
    KubernetesRunner,
    trial_workload,
)
from det_airflow.operators.runners.kubernetes_pod import (
    CONFIG_VARIABLE,
    CONTEXT_CONTAINER,
    SECRET_VARIABLES,
    TRIAL_CONTAINER,
)
from det_airflow.trial_env import SESSION_TOKEN
from det_airflow.trial_process import TrialSpec, trial_environment
from tests.http_stub import serve

MINIMAL = {
    "entrypoint": "python3 -m det_airflow.launchers.torch_distributed --trial model_def:Trial",
    "searcher": {"name": "single", "metric": "loss", "max_length": 10},
}
NAME = "det-trial-3-12-2"
# The random part of a run's Secret's name, as the fixture below fixes it.
SUFFIX = "0a1b2c3d"
SECRET = f"{NAME}-{SUFFIX}"
API = ApiClient()

# The runner policy of a cluster whose trials go to namespace "ml".
ML_SETTINGS = det_settings.load({"namespace": "ml", "allowed_namespaces": "default"})
# What object_storage.trial_variables reads from an s3 storage's Airflow connection.
STORAGE_VARIABLES = {
    "AWS_ACCESS_KEY_ID": "AKIDEXAMPLEKEY",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI-secret",
    "AWS_SESSION_TOKEN": "FwoGZXIvYXdz-session",
    "AWS_ENDPOINT_URL_S3": "http://minio.storage:9000",
    "AWS_DEFAULT_REGION": "eu-west-1",
}
CREDENTIALS = {k: v for k, v in STORAGE_VARIABLES.items() if k in CREDENTIAL_VARIABLES}


@pytest.fixture(autouse=True)
def fixed_secret_suffix(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each run's Secret is named with random digits; these tests know them (:data:`SECRET`)."""
    monkeypatch.setattr(kubernetes_pod, "token_hex", lambda nbytes: SUFFIX)


def make_trial(
    tmp_path: Path,
    *,
    device: str = "cpu",
    slots: int = 1,
    storage_variables: Mapping[str, str] | None = None,
    **changes: Any,
) -> ContainerTrial:
    config = config_to_dict(parse_config({**MINIMAL, "resources": {"slots_per_trial": slots}, **changes}))
    spec = TrialSpec(trial_id=12, experiment_id=3, request_id="r", trial_seed=5, config=config, run_id=2)
    env = trial_environment(
        spec, master_url="http://master:8080", token="trial-token", slot_ids=range(slots), base_env={},
        workdir=tmp_path,
    )  # fmt: skip
    env = {**(storage_variables or {}), **env}  # as TrialLaunch.environment adds them
    return ContainerTrial(
        spec=spec, workdir=tmp_path, argv=(sys.executable, "-m", "det_airflow.launchers.torch_distributed"),
        env=container_environment(env, config, device, range(slots), tmp_path),  # as run_with builds it
        slot_ids=tuple(range(slots)), device=device,
    )  # fmt: skip


def submitted(trial: ContainerTrial, slots_per_node: int = 8) -> list[dict[str, Any]]:
    """The bodies the API server would receive, as the kubernetes client serializes them."""
    workload = trial_workload(trial, namespace="ml", slots_per_node=slots_per_node)
    return [API.sanitize_for_serialization(obj) for obj in workload.objects]


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def from_secret(name: str) -> dict[str, Any]:
    """A variable's ``valueFrom`` that reads it from the run's Secret."""
    return {"secretKeyRef": {"name": SECRET, "key": name}}


# --- the objects ---


def test_a_trial_that_fits_on_a_node_is_one_pod_with_what_the_user_configured(tmp_path: Path) -> None:
    trial = make_trial(
        tmp_path,
        device="cuda",
        slots=4,
        environment={
            "image": {"cpu": "my/train:cpu", "cuda": "my/train:cuda"},
            "environment_variables": {"cuda": ["NCCL_DEBUG=INFO"]},
            "pod_spec": {"spec": {"nodeSelector": {"gpu": "a100"}}},
        },
        resources={"slots_per_trial": 4, "shm_size": "1G", "priority": 20},
        checkpoint_storage={"type": "shared_fs", "host_path": "/mnt/ckpt"},
    )
    secret, pod = submitted(trial)

    assert (pod["apiVersion"], pod["kind"]) == ("v1", "Pod")
    assert pod["metadata"]["name"] == NAME and pod["metadata"]["namespace"] == "ml"
    assert pod["metadata"]["labels"] == {LABEL_EXPERIMENT: "3", LABEL_TRIAL: "12", LABEL_RUN: "2"}
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never"
    assert spec["priorityClassName"] == "det-priority-20"
    assert spec["nodeSelector"] == {"gpu": "a100"}
    (container,) = spec["containers"]
    assert container["name"] == TRIAL_CONTAINER
    assert container["image"] == "my/train:cuda"
    assert container["command"] == ["python3", "-m", "det_airflow.launchers.torch_distributed"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "4"}
    env = env_of(container)
    assert env["DET_MASTER"] == "http://master:8080"
    assert env[SESSION_TOKEN] == from_secret(SESSION_TOKEN)
    assert secret["stringData"][SESSION_TOKEN] == "trial-token"
    assert (env["DET_TRIAL_ID"], env["DET_EXPERIMENT_ID"]) == ("12", "3")
    assert json.loads(env["DET_SLOT_IDS"]) == [0, 1, 2, 3]
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert env["NCCL_DEBUG"] == "INFO"
    assert CONFIG_VARIABLE not in env  # the config reaches the trial as a file, written by the init container
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert volumes["det-shm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": str(1024**3)}
    assert mounts["det-shm"] == "/dev/shm"
    assert volumes["det-checkpoints"]["hostPath"] == {"path": "/mnt/ckpt"}
    assert mounts["det-checkpoints"] == "/mnt/ckpt"
    assert volumes["det-workdir"]["emptyDir"] == {}
    assert mounts["det-workdir"] == str(tmp_path)


def test_the_init_container_fetches_the_context_into_the_work_folder(tmp_path: Path) -> None:
    trial = make_trial(tmp_path, environment={"image": "my/train:1", "force_pull_image": True})
    secret, pod = submitted(trial)

    (init,) = pod["spec"]["initContainers"]
    assert init["name"] == CONTEXT_CONTAINER
    assert (init["image"], init["imagePullPolicy"]) == ("my/train:1", "Always")
    assert init["command"][:2] == ["python3", "-c"]
    assert init["command"][3:] == [str(tmp_path), "/det/api/v1/runtime/trials/12/context", CONFIG_VARIABLE]
    assert init["volumeMounts"] == [
        {"name": "det-workdir", "mountPath": str(tmp_path)},
        {"name": "det-tmp", "mountPath": "/tmp"},  # the root file system is read-only
    ]
    env = env_of(init)
    assert env[CONFIG_VARIABLE] == from_secret(CONFIG_VARIABLE)
    assert json.loads(secret["stringData"][CONFIG_VARIABLE]) == trial.config
    assert env["DET_EXPERIMENT_CONFIG_FILE"] == str(tmp_path / ".det" / "experiment_config.json")
    assert env[SESSION_TOKEN] == from_secret(SESSION_TOKEN)


def test_a_trial_larger_than_a_node_is_an_indexed_job_of_one_pod_per_node(tmp_path: Path) -> None:
    trial = make_trial(tmp_path, device="cuda", slots=16, resources={"slots_per_trial": 16, "priority": 30})
    secret, service, job = submitted(trial, slots_per_node=8)

    assert (secret["kind"], secret["metadata"]["name"]) == ("Secret", SECRET)
    assert (service["kind"], service["metadata"]["name"]) == ("Service", NAME)
    assert service["spec"] == {
        "clusterIP": "None",
        "publishNotReadyAddresses": True,
        "selector": {"job-name": NAME},
    }
    assert (job["apiVersion"], job["kind"], job["metadata"]["name"]) == ("batch/v1", "Job", NAME)
    assert {k: job["spec"][k] for k in ("completionMode", "completions", "parallelism", "backoffLimit")} == {
        "completionMode": "Indexed", "completions": 2, "parallelism": 2, "backoffLimit": 0,
    }  # fmt: skip
    pod_spec = job["spec"]["template"]["spec"]
    assert pod_spec["subdomain"] == NAME and pod_spec["priorityClassName"] == "det-priority-30"
    (container,) = pod_spec["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    env = env_of(container)
    assert json.loads(env["DET_SLOT_IDS"]) == list(range(8))
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    assert env[SESSION_TOKEN] == from_secret(SESSION_TOKEN)
    assert json.loads(env["DET_CONTAINER_ADDRS"]) == [f"{NAME}-0.{NAME}", f"{NAME}-1.{NAME}"]
    assert env["DET_CONTAINER_RANK"] == {
        "fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}
    }
    assert job["spec"]["template"]["metadata"]["labels"][LABEL_TRIAL] == "12"


@pytest.mark.parametrize(("slots", "kinds"), [(1, ["Secret", "Pod"]), (4, ["Secret", "Service", "Job"])])
def test_token_config_and_credentials_reach_the_trial_from_a_secret_never_as_env_values(
    tmp_path: Path, slots: int, kinds: list[str]
) -> None:
    storage = {"type": "s3", "bucket": "ckpt", "access_key": "AKIDCONFIGKEY", "secret_key": "config-secret"}
    trial = make_trial(tmp_path, slots=slots, storage_variables=STORAGE_VARIABLES, checkpoint_storage=storage)
    objects = submitted(trial, slots_per_node=2)

    assert [o["kind"] for o in objects] == kinds, "the Secret exists before the pods that read it"
    secret, *others = objects
    assert secret["metadata"] == {
        "name": SECRET, "namespace": "ml", "labels": {LABEL_EXPERIMENT: "3", LABEL_TRIAL: "12", LABEL_RUN: "2"},
    }  # fmt: skip
    assert (secret["type"], secret["immutable"]) == ("Opaque", True)
    data = secret["stringData"]
    assert set(data) == {*CREDENTIALS, SESSION_TOKEN, CONFIG_VARIABLE} <= SECRET_VARIABLES
    assert {k: data[k] for k in CREDENTIALS} == CREDENTIALS and data[SESSION_TOKEN] == "trial-token"
    assert json.loads(data[CONFIG_VARIABLE]) == trial.config
    for other in others:
        text = json.dumps(other)
        leaked = [v for v in [*CREDENTIALS.values(), "trial-token", "config-secret"] if v in text]
        assert not leaked, f"{leaked} in the {other['kind']}"
    pod_spec = others[-1]["spec"] if slots == 1 else others[-1]["spec"]["template"]["spec"]
    (container,) = pod_spec["containers"]
    env = env_of(container)
    for name in [*CREDENTIALS, SESSION_TOKEN]:
        assert env[name] == from_secret(name)
    assert env["AWS_ENDPOINT_URL_S3"] == "http://minio.storage:9000"
    assert env["AWS_DEFAULT_REGION"] == "eu-west-1"
    # A task's server listens at the pod's own address, where the master's proxy reaches it.
    assert env["DET_POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    # DET_EXPERIMENT_CONFIG, for code that reads the config from the environment: the Secret's copy.
    assert env["DET_EXPERIMENT_CONFIG"] == from_secret(CONFIG_VARIABLE)
    (init,) = pod_spec["initContainers"]
    init_env = env_of(init)
    assert init_env[SESSION_TOKEN] == from_secret(SESSION_TOKEN)
    assert init_env[CONFIG_VARIABLE] == from_secret(CONFIG_VARIABLE)
    assert not CREDENTIAL_VARIABLES & set(init_env), "the init container only fetches the context"


def test_a_trial_without_storage_credentials_still_has_a_secret_for_its_token_and_config(
    tmp_path: Path,
) -> None:
    trial = make_trial(tmp_path, storage_variables={"AWS_DEFAULT_REGION": "eu-west-1"})
    secret, pod = submitted(trial)
    assert (secret["kind"], pod["kind"]) == ("Secret", "Pod")
    assert sorted(secret["stringData"]) == [CONFIG_VARIABLE, SESSION_TOKEN]


def test_each_run_names_its_secret_anew_where_no_other_trial_can_guess_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kubernetes_pod, "token_hex", secrets.token_hex)
    trial = make_trial(tmp_path, slots=4)
    names = set()
    for slots_per_node in (8, 2):  # one pod, then a gang
        secret, *_, last = submitted(trial, slots_per_node=slots_per_node)
        name = secret["metadata"]["name"]
        assert re.fullmatch(rf"{NAME}-[0-9a-f]{{8}}", name)
        pod_spec = last["spec"] if last["kind"] == "Pod" else last["spec"]["template"]["spec"]
        (container,) = pod_spec["containers"]
        assert env_of(container)[SESSION_TOKEN] == {"secretKeyRef": {"name": name, "key": SESSION_TOKEN}}
        names.add(name)
    assert len(names) == 2


def test_slots_that_do_not_divide_into_nodes_are_refused_naming_the_field(tmp_path: Path) -> None:
    trial = make_trial(tmp_path, slots=12)
    with pytest.raises(KubernetesError, match=r"resources.slots_per_trial: 12 slots .* multiple of 8"):
        trial_workload(trial, namespace="ml", slots_per_node=8)


# --- the runner against a scripted cluster ---


class ScriptedCluster:
    """Plays a cluster's answers for the runner: what was created and deleted, pods that go
    Pending → init container → trial container → exit, and their logs. Statuses go through the
    kubernetes client's deserializer, as real answers do."""

    def __init__(
        self,
        *,
        exit_code: int = 0,
        init_exit: int = 0,
        logs: dict[str, list[bytes]] | None = None,
        waiting: dict[str, str] | None = None,
        runs_until_deleted: bool = False,
        leftovers: list[tuple[str, str]] | None = None,
        refuse: ApiException | None = None,
        refuse_kind: str | None = None,
        refuse_owner: ApiException | None = None,
        vanish: str | None = None,
    ) -> None:
        self.created: list[dict[str, Any]] = []
        self.deleted: list[tuple[str, str, int | None]] = []
        self.owned: list[tuple[str, str, str, str]] = []  # (kind, name, owner's kind, owner's uid)
        self.refuse_owner = refuse_owner
        self.exit_code, self.init_exit = exit_code, init_exit
        self.logs_of = logs or {}
        self.waiting = waiting
        self.runs_until_deleted = runs_until_deleted
        self._leftovers = leftovers or []
        self.refuse, self.refuse_kind = refuse, refuse_kind  # refused: objects of that kind, else all
        self.vanish = vanish  # a pod deleted by Kubernetes once its trial container's logs end
        self.pods: dict[str, dict[str, str]] = {}  # pod → container → "running" | "done"
        self.gone: dict[str, threading.Event] = {}

    # the KubernetesCluster interface

    def create(self, obj: Any) -> Any:
        body = API.sanitize_for_serialization(obj)
        if self.refuse is not None and self.refuse_kind in (None, body["kind"]):
            raise self.refuse
        self.created.append(body)
        if body["kind"] == "Pod":
            self._add_pod(body["metadata"]["name"])
        if body["kind"] == "Job":
            for i in range(body["spec"]["completions"]):
                self._add_pod(f"{body['metadata']['name']}-{i}-x{i}")
        created = copy.deepcopy(obj)
        created.metadata.uid = f"uid-{len(self.created)}"
        return created

    def own(self, kind: str, namespace: str, name: str, owner: Any) -> None:
        if self.refuse_owner is not None:
            raise self.refuse_owner
        self.owned.append((kind, name, owner.kind, owner.metadata.uid))

    def delete(self, kind: str, namespace: str, name: str, *, grace_seconds: int | None = None) -> None:
        self.deleted.append((kind, name, grace_seconds))
        for pod in [p for p in self.pods if p == name or (kind == "Job" and p.startswith(name + "-"))]:
            del self.pods[pod]
            self.gone[pod].set()

    def read_pod(self, namespace: str, name: str) -> k8s.V1Pod | None:
        if name not in self.pods:
            return None
        state = self.pods[name]
        if state.get("_pending") == "yes":
            state["_pending"] = "no"  # Pending on the first look, as a real pod is
            return self._pod(name, "Pending", [], [])
        if self.waiting is not None:
            waiting = {"waiting": self.waiting}
            return self._pod(name, "Pending", [], [_container_status(TRIAL_CONTAINER, waiting)])
        init = self._status(CONTEXT_CONTAINER, state.get(CONTEXT_CONTAINER, "running"), self.init_exit)
        main = []
        if state.get(CONTEXT_CONTAINER) == "done":
            if self.init_exit:
                return self._pod(name, "Failed", [init], [])
            main = [self._status(TRIAL_CONTAINER, state.get(TRIAL_CONTAINER, "running"), self.exit_code)]
        phase = (
            "Running"
            if state.get(TRIAL_CONTAINER) != "done"
            else ("Succeeded" if self.exit_code == 0 else "Failed")
        )
        return self._pod(name, phase, [init], main)

    def pod_names(self, namespace: str, labels: dict[str, str]) -> list[str]:
        return sorted(p for p in self.pods if p.startswith(labels["job-name"] + "-"))

    def leftovers(self, namespace: str, trial_id: int) -> list[tuple[str, str]]:
        found, self._leftovers = self._leftovers, []
        return found

    def logs(self, namespace: str, pod: str, container: str) -> Iterator[bytes]:
        yield from self.logs_of.get(container, [])
        if container == TRIAL_CONTAINER and self.runs_until_deleted:
            assert self.gone[pod].wait(10), f"pod {pod} was never deleted"
            return
        if pod in self.pods:
            self.pods[pod][container] = "done"
        if container == TRIAL_CONTAINER and pod == self.vanish:
            del self.pods[pod]

    # helpers

    def _add_pod(self, name: str) -> None:
        self.pods[name] = {"_pending": "yes"}
        self.gone[name] = threading.Event()

    @staticmethod
    def _status(name: str, state: str, code: int) -> dict[str, Any]:
        if state == "done":
            return _container_status(name, {"terminated": {"exitCode": code}})
        return _container_status(name, {"running": {"startedAt": "2026-11-23T04:00:00Z"}})

    @staticmethod
    def _pod(name: str, phase: str, init: list[Any], main: list[Any]) -> k8s.V1Pod:
        body = {
            "metadata": {"name": name},
            "status": {"phase": phase, "initContainerStatuses": init, "containerStatuses": main},
        }
        answer = type("Answer", (), {"data": json.dumps(body)})()
        return API.deserialize(answer, "V1Pod")


def _container_status(name: str, state: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "image": "my/train:1",
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "state": state,
    }


class Lines:
    def __init__(self, wait_for: str | None = None) -> None:
        self.lines: list[tuple[str, str]] = []
        self.wait_for = wait_for
        self.seen = threading.Event()

    def __call__(self, line: str, stream: str) -> None:
        self.lines.append((line, stream))
        if self.wait_for is not None and self.wait_for in line:
            self.seen.set()


def runner(cluster: ScriptedCluster, **options: Any) -> KubernetesRunner:
    options.setdefault("settings", ML_SETTINGS)
    return KubernetesRunner(cluster, namespace="ml", poll_interval=0.01, **options)  # type: ignore[arg-type]


def test_a_pod_streams_its_output_answers_its_exit_code_and_is_deleted(tmp_path: Path) -> None:
    cluster = ScriptedCluster(
        exit_code=3,
        logs={
            CONTEXT_CONTAINER: [b"fetched context\n"],
            TRIAL_CONTAINER: [b"[rank=0] epoch 1\n[rank=1] ep", b"och 1\r\n10%\r20%\r\n", b"no newline"],
        },
    )
    out = Lines()

    code = runner(cluster).run(make_trial(tmp_path), on_output=out, stop=threading.Event())

    assert code == 3
    assert [c["kind"] for c in cluster.created] == ["Secret", "Pod"]
    assert [line for line, _ in out.lines] == [
        "fetched context", "[rank=0] epoch 1", "[rank=1] epoch 1", "10%", "20%", "no newline",
    ]  # fmt: skip
    assert ("Pod", NAME, None) in cluster.deleted


def test_pods_are_kept_when_so_configured(tmp_path: Path) -> None:
    cluster = ScriptedCluster()
    code = runner(cluster, delete_pods=False).run(
        make_trial(tmp_path), on_output=Lines(), stop=threading.Event()
    )
    assert code == 0
    assert cluster.deleted == [("Secret", SECRET, None)], "only the Secret, which the pod no longer needs"


def test_stop_deletes_the_running_pod_with_a_grace_period(tmp_path: Path) -> None:
    cluster = ScriptedCluster(runs_until_deleted=True, logs={TRIAL_CONTAINER: [b"training\n"]})
    out, stop = Lines(wait_for="training"), threading.Event()
    result: list[int] = []
    thread = threading.Thread(
        target=lambda: result.append(
            runner(cluster, kill_grace=7).run(make_trial(tmp_path), on_output=out, stop=stop)
        )
    )
    thread.start()
    assert out.seen.wait(10), "the trial's first line never arrived"
    stop.set()
    thread.join(10)

    assert not thread.is_alive(), "the runner did not return after stop"
    assert result == [KILLED]
    assert ("Pod", NAME, 7) in cluster.deleted


def test_an_image_that_cannot_be_pulled_fails_the_run_with_the_reason(tmp_path: Path) -> None:
    cluster = ScriptedCluster(
        waiting={"reason": "InvalidImageName", "message": 'couldn\'t parse image "my//x"'}
    )
    with pytest.raises(KubernetesError, match=rf"pod {NAME} cannot start: .*InvalidImageName"):
        runner(cluster).run(make_trial(tmp_path), on_output=Lines(), stop=threading.Event())
    assert ("Pod", NAME, None) in cluster.deleted


def test_a_pod_that_is_never_scheduled_fails_after_the_startup_timeout(tmp_path: Path) -> None:
    cluster = ScriptedCluster(waiting={"reason": "ContainerCreating"})
    with pytest.raises(KubernetesError, match=rf"pod {NAME} did not start within 0s"):
        runner(cluster, startup_timeout=0).run(
            make_trial(tmp_path), on_output=Lines(), stop=threading.Event()
        )


def test_a_failed_context_fetch_is_the_runs_exit_code_and_shows_its_reason(tmp_path: Path) -> None:
    message = b"cannot fetch the experiment's context from the master at http://master:8080: refused\n"
    cluster = ScriptedCluster(init_exit=1, logs={CONTEXT_CONTAINER: [message], TRIAL_CONTAINER: [b"never\n"]})
    out = Lines()
    code = runner(cluster).run(make_trial(tmp_path), on_output=out, stop=threading.Event())
    assert code == 1
    assert [line for line, _ in out.lines] == [message.decode().strip()]


def test_a_gang_streams_every_pod_and_answers_the_first_failure(tmp_path: Path) -> None:
    cluster = ScriptedCluster(exit_code=2, logs={TRIAL_CONTAINER: [b"worker up\n"]})
    trial = make_trial(tmp_path, slots=4)
    code = runner(cluster, slots_per_node=2).run(trial, on_output=Lines(), stop=threading.Event())

    assert code == 2
    assert [c["kind"] for c in cluster.created] == ["Secret", "Service", "Job"]
    assert {("Job", NAME, None), ("Service", NAME, None), ("Secret", SECRET, None)} <= set(cluster.deleted)


def test_a_gang_pod_deleted_by_its_failing_job_does_not_hide_the_failure(tmp_path: Path) -> None:
    cluster = ScriptedCluster(exit_code=5, vanish=f"{NAME}-0-x0")
    code = runner(cluster, slots_per_node=2).run(
        make_trial(tmp_path, slots=4), on_output=Lines(), stop=threading.Event()
    )
    assert code == 5


def test_leftovers_of_an_earlier_run_are_deleted_before_the_pod_is_created(tmp_path: Path) -> None:
    cluster = ScriptedCluster(leftovers=[("Pod", "det-trial-3-12-1")])
    runner(cluster).run(make_trial(tmp_path), on_output=Lines(), stop=threading.Event())
    assert cluster.deleted[0] == ("Pod", "det-trial-3-12-1", 0)


def test_an_object_the_api_server_refuses_is_an_error_naming_its_reason(tmp_path: Path) -> None:
    refused = ApiException(status=403, reason="Forbidden")
    refused.body = json.dumps({"message": 'pods is forbidden: User "airflow" cannot create pods in "ml"'})
    cluster = ScriptedCluster(refuse=refused, refuse_kind="Pod")
    with pytest.raises(
        KubernetesError, match=r"cannot create the Pod of trial 12 in namespace ml: pods is forbidden"
    ):
        runner(cluster).run(make_trial(tmp_path), on_output=Lines(), stop=threading.Event())
    assert ("Secret", SECRET, None) in cluster.deleted, "the Secret created before it is taken back"


def test_the_credentials_secret_is_owned_by_the_pod_and_deleted_after_it(tmp_path: Path) -> None:
    cluster = ScriptedCluster()
    trial = make_trial(tmp_path, storage_variables=STORAGE_VARIABLES)

    code = runner(cluster).run(trial, on_output=Lines(), stop=threading.Event())

    assert code == 0
    assert [c["kind"] for c in cluster.created] == ["Secret", "Pod"]
    assert cluster.owned == [("Secret", SECRET, "Pod", "uid-2")], "Kubernetes deletes it with the pod"
    assert cluster.deleted == [("Pod", NAME, None), ("Secret", SECRET, None)]


def test_a_gangs_secret_is_owned_by_its_job(tmp_path: Path) -> None:
    cluster = ScriptedCluster()
    trial = make_trial(tmp_path, slots=4, storage_variables=STORAGE_VARIABLES)

    runner(cluster, slots_per_node=2).run(trial, on_output=Lines(), stop=threading.Event())

    assert cluster.owned == [("Secret", SECRET, "Job", "uid-3")]
    assert cluster.deleted[-1] == ("Secret", SECRET, None)


def test_the_credentials_secret_is_deleted_even_when_pods_are_kept(tmp_path: Path) -> None:
    cluster = ScriptedCluster()
    trial = make_trial(tmp_path, storage_variables=STORAGE_VARIABLES)
    runner(cluster, delete_pods=False).run(trial, on_output=Lines(), stop=threading.Event())
    assert cluster.deleted == [("Secret", SECRET, None)]


def test_a_secret_kubernetes_will_not_let_the_pod_own_is_still_deleted_by_the_run(tmp_path: Path) -> None:
    cluster = ScriptedCluster(refuse_owner=ApiException(status=403, reason="Forbidden"))
    trial = make_trial(tmp_path, storage_variables=STORAGE_VARIABLES)

    code = runner(cluster).run(trial, on_output=Lines(), stop=threading.Event())

    assert code == 0
    assert ("Secret", SECRET, None) in cluster.deleted


def test_a_refused_secret_fails_the_run_before_any_pod_is_created(tmp_path: Path) -> None:
    refused = ApiException(status=403, reason="Forbidden")
    refused.body = json.dumps(
        {"message": 'secrets is forbidden: User "airflow" cannot create resource "secrets" in "ml"'}
    )
    cluster = ScriptedCluster(refuse=refused)
    trial = make_trial(tmp_path, storage_variables=STORAGE_VARIABLES)
    with pytest.raises(
        KubernetesError,
        match=r"cannot create the Secret of trial 12 in namespace ml, which holds its token, config and "
        r"storage credentials: secrets is forbidden",
    ):
        runner(cluster).run(trial, on_output=Lines(), stop=threading.Event())
    assert cluster.created == []


def test_the_kubernetes_runner_is_set_up_from_the_experiment_and_airflow_cfg(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIRFLOW__DET__SLOTS_PER_NODE", "4")
    monkeypatch.setenv("AIRFLOW__DET__KUBERNETES_DELETE_PODS", "false")
    config = config_to_dict(
        parse_config({**MINIMAL, "airflow": {"trial_runner": "kubernetes", "namespace": "ml"}})
    )

    built = build_runner("kubernetes", config)

    assert isinstance(built, KubernetesRunner) and isinstance(built.cluster, KubernetesCluster)
    assert (built.namespace, built.slots_per_node, built.delete_pods) == ("ml", 4, False)


def kubeconfig(tmp_path: Path, server: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1", "kind": "Config", "current-context": "here",
                "clusters": [{"name": "here", "cluster": {"server": server}}],
                "contexts": [{"name": "here", "context": {"cluster": "here", "user": "me"}}],
                "users": [{"name": "me", "user": {"token": "t"}}],
            }
        )
    )  # fmt: skip
    return path


def test_a_cluster_that_does_not_answer_is_an_error_naming_it(tmp_path: Path) -> None:
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    cluster = KubernetesCluster(KubernetesHook(config_file=str(kubeconfig(tmp_path, "https://127.0.0.1:1"))))
    with pytest.raises(
        KubernetesError, match=r"trial 12: the Kubernetes cluster did not answer \(.*127.0.0.1"
    ):
        KubernetesRunner(cluster, namespace="ml", settings=ML_SETTINGS).run(
            make_trial(tmp_path), on_output=Lines(), stop=threading.Event()
        )


@pytest.mark.parametrize(("configured", "expected"), [("", 8), ("2", 2)])
def test_slots_per_node_left_empty_is_a_node_of_eight(
    monkeypatch: pytest.MonkeyPatch, configured: str, expected: int
) -> None:
    monkeypatch.setenv("AIRFLOW__DET__SLOTS_PER_NODE", configured)
    built = build_runner("kubernetes", config_to_dict(parse_config(MINIMAL)))
    assert isinstance(built, KubernetesRunner) and built.slots_per_node == expected


def test_a_bad_slots_per_node_is_an_error_naming_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__DET__SLOTS_PER_NODE", "eight")
    with pytest.raises(
        DetError, match=r"airflow.cfg \[det\] slots_per_node: expected an integer >= 1, got 'eight'"
    ):
        build_runner("kubernetes", config_to_dict(parse_config(MINIMAL)))


class RecordingApiServer(BaseHTTPRequestHandler):
    """An API server with no pods: records each request (method, path, query, content type, body),
    answers a created object as sent with a uid, lists one Secret an earlier run left and no other
    object."""

    seen: list[tuple[str, str, dict[str, list[str]], str | None, Any]] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        url = self._record("GET")
        items = [{"metadata": {"name": "det-trial-3-12-1-5e7a1c00"}}] if url.path.endswith("/secrets") else []
        self._answer(200, {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items})

    def do_POST(self) -> None:  # noqa: N802
        self._record("POST")
        body = self.seen[-1][-1]
        body["metadata"]["uid"] = f"uid-of-{body['kind'].lower()}"
        self._answer(201, body)

    def do_PATCH(self) -> None:  # noqa: N802
        self._record("PATCH")
        self._answer(200, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET}})

    def do_DELETE(self) -> None:  # noqa: N802
        self._record("DELETE")
        self._answer(200, {"apiVersion": "v1", "kind": "Status", "status": "Success"})

    def _record(self, method: str) -> Any:
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        self.seen.append((method, url.path, parse_qs(url.query), self.headers.get("Content-Type"), body))
        return url

    def _answer(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def api_server() -> Iterator[str]:
    RecordingApiServer.seen = []
    with serve(RecordingApiServer) as url:
        yield url


def test_the_cluster_sweeps_creates_owns_and_deletes_the_secret_as_the_api_server_expects(
    tmp_path: Path, api_server: str
) -> None:
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    cluster = KubernetesCluster(KubernetesHook(config_file=str(kubeconfig(tmp_path, api_server))))
    the_runner = KubernetesRunner(cluster, namespace="ml", settings=ML_SETTINGS)

    workload = the_runner.submit(make_trial(tmp_path, storage_variables=STORAGE_VARIABLES))
    code = the_runner.collect(workload, on_output=Lines(), stopped=True)  # its pod is gone

    assert code == KILLED
    writes = [(method, path, body) for method, path, _, _, body in RecordingApiServer.seen if method != "GET"]
    secrets, pods = "/api/v1/namespaces/ml/secrets", "/api/v1/namespaces/ml/pods"
    assert [(method, path) for method, path, _ in writes] == [
        ("DELETE", f"{secrets}/det-trial-3-12-1-5e7a1c00"),  # an earlier run's, found by the trial's label
        ("POST", secrets),
        ("POST", pods),
        ("PATCH", f"{secrets}/{SECRET}"),
        ("DELETE", f"{pods}/{NAME}"),
        ("DELETE", f"{secrets}/{SECRET}"),
    ]
    assert {k: writes[1][2]["stringData"][k] for k in CREDENTIALS} == CREDENTIALS
    assert writes[1][2]["stringData"][SESSION_TOKEN] == "trial-token"
    assert not [v for v in [*CREDENTIALS.values(), "trial-token"] if v in json.dumps(writes[2][2])]
    (patch,) = [seen for seen in RecordingApiServer.seen if seen[0] == "PATCH"]
    assert patch[3] == "application/json-patch+json"
    assert patch[4] == [
        {
            "op": "add",
            "path": "/metadata/ownerReferences",
            "value": [{"apiVersion": "v1", "kind": "Pod", "name": NAME, "uid": "uid-of-pod"}],
        }
    ]
    (listed,) = [
        query for method, path, query, _, _ in RecordingApiServer.seen if path == secrets and method == "GET"
    ]
    assert listed["labelSelector"] == [f"{LABEL_TRIAL}=12"]
