"""Kubernetes trials hold no worker while their pods run: the runner submits the pods and collects
them once they ended, a trigger watches them (and the master) in between, and the trial operator
defers to that trigger and reports the run's exit when it resumes.

No cluster is reachable: the runner talks to a stand-in whose pods are in the states a test sets
(their statuses deserialized by the kubernetes client, as real answers are); the trigger reads pods
from a scripted async stand-in. The master is the real app on SQLite, reached over HTTP.
"""

from __future__ import annotations

import asyncio
import copy
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, TaskDeferred
from kubernetes.client import models as k8s
from kubernetes.client.exceptions import ApiException
from sqlalchemy import select, update

from det_airflow import settings as det_settings
from det_airflow.master import auth, schema
from det_airflow.master.auth import SERVICE_TOKEN_SETTING, hash_token
from det_airflow.master.db import set_setting
from det_airflow.object_storage import CREDENTIAL_VARIABLES
from det_airflow.operators.runners import LABEL_RUN, LABEL_TRIAL
from det_airflow.operators.runners.kubernetes import (
    KILLED,
    KubernetesError,
    KubernetesRunner,
    SubmittedWorkload,
)
from det_airflow.operators.runners.kubernetes_pod import CONTEXT_CONTAINER, TRIAL_CONTAINER
from det_airflow.operators.trial import TrialOperator
from det_airflow.operators.triggers import KubernetesTrialTrigger
from tests.unit.master.creating import Creator, creator, tar_gz  # noqa: F401
from tests.unit.master.people_app import People, people  # noqa: F401
from tests.unit.operators.test_kubernetes_context import MasterOverHttp
from tests.unit.operators.test_kubernetes_runner import (
    API,
    CREDENTIALS,
    NAME,
    SECRET,
    STORAGE_VARIABLES,
    SUFFIX,
    Lines,
    _container_status,
    fixed_secret_suffix,  # noqa: F401 (autouse: every run's Secret is SECRET)
    make_trial,
)

SERVICE_TOKEN = "service-token"

# The runner policy of a cluster whose trials go to namespace "ml".
ML_SETTINGS = det_settings.load({"namespace": "ml", "allowed_namespaces": "default"})


def pod_body(name: str, phase: str, *, init: dict[str, Any] | None, main: dict[str, Any] | None) -> dict:
    statuses = {
        "initContainerStatuses": [_container_status(CONTEXT_CONTAINER, init)] if init else [],
        "containerStatuses": [_container_status(TRIAL_CONTAINER, main)] if main else [],
    }
    return {"metadata": {"name": name}, "status": {"phase": phase, **statuses}}


def as_pod(body: dict[str, Any]) -> k8s.V1Pod:
    answer = type("Answer", (), {"data": json.dumps(body)})()
    return API.deserialize(answer, "V1Pod")


DONE = {"terminated": {"exitCode": 0}}
RUNNING = {"running": {"startedAt": "2026-11-23T04:00:00Z"}}


class Cluster:
    """A cluster as the runner finds it: the pods it created, each in the state the test puts it
    in, and what each container wrote."""

    def __init__(self, *, refuse: str | None = None, leftovers: list[tuple[str, str]] | None = None) -> None:
        self.created: list[dict[str, Any]] = []
        self.deleted: list[tuple[str, str, int | None]] = []
        self.owned: list[tuple[str, str, str]] = []  # (kind, name, owner's kind)
        self.pods: dict[str, dict[str, Any]] = {}
        self.output: dict[tuple[str, str], bytes] = {}
        self.refuse = refuse  # the kind of object the API server refuses
        self._leftovers = leftovers or []

    # what the test does to the pods

    def ended(self, pod: str, code: int, output: bytes = b"") -> None:
        phase = "Succeeded" if code == 0 else "Failed"
        self.pods[pod] = pod_body(pod, phase, init=DONE, main={"terminated": {"exitCode": code}})
        self.output[(pod, CONTEXT_CONTAINER)] = b"fetched the context\n"
        self.output[(pod, TRIAL_CONTAINER)] = output

    def running(self, pod: str, output: bytes = b"") -> None:
        self.pods[pod] = pod_body(pod, "Running", init=DONE, main=RUNNING)
        self.output[(pod, TRIAL_CONTAINER)] = output

    def cannot_pull(self, pod: str) -> None:
        waiting = {"waiting": {"reason": "InvalidImageName", "message": 'couldn\'t parse image "my//x"'}}
        self.pods[pod] = pod_body(pod, "Pending", init=None, main=waiting)

    # the KubernetesCluster interface

    def create(self, obj: Any) -> Any:
        body = API.sanitize_for_serialization(obj)
        if body["kind"] == self.refuse:
            raise ApiException(status=422, reason=f"{self.refuse} refused")
        self.created.append(body)
        name = body["metadata"]["name"]
        if body["kind"] == "Pod":
            self.pods[name] = pod_body(name, "Pending", init=None, main=None)
        if body["kind"] == "Job":
            for i in range(body["spec"]["completions"]):
                self.pods[f"{name}-{i}-x{i}"] = pod_body(f"{name}-{i}-x{i}", "Pending", init=None, main=None)
        created = copy.deepcopy(obj)
        created.metadata.uid = str(uuid.uuid4())
        return created

    def own(self, kind: str, namespace: str, name: str, owner: Any) -> None:
        assert owner.metadata.uid, "an owner is named by its uid"
        self.owned.append((kind, name, owner.kind))

    def delete(self, kind: str, namespace: str, name: str, *, grace_seconds: int | None = None) -> None:
        self.deleted.append((kind, name, grace_seconds))
        for pod in [p for p in self.pods if p == name or (kind == "Job" and p.startswith(name + "-"))]:
            del self.pods[pod]

    def read_pod(self, namespace: str, name: str) -> k8s.V1Pod | None:
        return as_pod(self.pods[name]) if name in self.pods else None

    def pod_names(self, namespace: str, labels: dict[str, str]) -> list[str]:
        assert set(labels) == {LABEL_TRIAL, LABEL_RUN}
        return sorted(self.pods)

    def leftovers(self, namespace: str, trial_id: int) -> list[tuple[str, str]]:
        found, self._leftovers = self._leftovers, []
        return found

    def logs(self, namespace: str, pod: str, container: str, *, follow: bool = True) -> Iterator[bytes]:
        assert not follow, "a deferred trial's logs are read once its pods ended, not followed"
        yield self.output.get((pod, container), b"")


def pods_created(cluster: Cluster) -> list[str]:
    return [c["metadata"]["name"] for c in cluster.created if c["kind"] == "Pod"]


def runner(cluster: Cluster, **options: Any) -> KubernetesRunner:
    options.setdefault("settings", ML_SETTINGS)
    return KubernetesRunner(cluster, namespace="ml", poll_interval=0.01, **options)  # type: ignore[arg-type]


# --- submit and collect ---


def test_submit_creates_the_pod_without_waiting_and_describes_it_as_plain_data(tmp_path: Path) -> None:
    cluster = Cluster(leftovers=[("Pod", "det-trial-3-12-1")])

    workload = runner(cluster).submit(make_trial(tmp_path))

    assert cluster.deleted == [("Pod", "det-trial-3-12-1", 0)], "the earlier run's pod is swept first"
    assert [c["kind"] for c in cluster.created] == ["Secret", "Pod"]
    assert cluster.owned == [("Secret", SECRET, "Pod")]
    assert (workload.namespace, workload.name, workload.secret, workload.pods, workload.kinds) == (
        "ml", NAME, SECRET, 1, ("Secret", "Pod"),
    )  # fmt: skip
    assert workload.labels == {LABEL_TRIAL: "12", LABEL_RUN: "2"}
    assert SubmittedWorkload.from_dict(json.loads(json.dumps(workload.to_dict()))) == workload


def test_a_gang_is_submitted_as_its_service_and_indexed_job(tmp_path: Path) -> None:
    workload = runner(Cluster(), slots_per_node=2).submit(make_trial(tmp_path, slots=4))
    assert (workload.pods, workload.kinds) == (2, ("Secret", "Service", "Job"))


def test_a_refused_job_takes_back_the_service_created_before_it(tmp_path: Path) -> None:
    cluster = Cluster(refuse="Job")
    with pytest.raises(
        KubernetesError, match=r"cannot create the Job of trial 12 in namespace ml: Job refused"
    ):
        runner(cluster, slots_per_node=2).submit(make_trial(tmp_path, slots=4))
    assert ("Service", NAME, None) in cluster.deleted


def test_a_trial_with_storage_credentials_is_submitted_with_their_secret_first(tmp_path: Path) -> None:
    cluster = Cluster()
    workload = runner(cluster).submit(make_trial(tmp_path, storage_variables=STORAGE_VARIABLES))

    assert workload.kinds == ("Secret", "Pod")
    assert [c["kind"] for c in cluster.created] == ["Secret", "Pod"]
    assert {k: cluster.created[0]["stringData"][k] for k in CREDENTIALS} == CREDENTIALS
    assert cluster.owned == [("Secret", SECRET, "Pod")]
    assert not [v for v in [*CREDENTIALS.values(), "trial-token"] if v in json.dumps(workload.to_dict())]


def test_a_refused_secret_creates_nothing_else(tmp_path: Path) -> None:
    cluster = Cluster(refuse="Secret")
    with pytest.raises(
        KubernetesError,
        match=r"cannot create the Secret of trial 12 in namespace ml, which holds its token, config and "
        r"storage credentials: Secret refused",
    ):
        runner(cluster).submit(make_trial(tmp_path))
    assert cluster.created == []


def test_a_refused_pod_takes_back_the_secret_created_before_it(tmp_path: Path) -> None:
    cluster = Cluster(refuse="Pod")
    with pytest.raises(KubernetesError, match=r"cannot create the Pod of trial 12"):
        runner(cluster).submit(make_trial(tmp_path, storage_variables=STORAGE_VARIABLES))
    assert cluster.deleted == [("Pod", NAME, None), ("Secret", SECRET, None)]


@pytest.mark.parametrize(
    ("delete_pods", "deleted"),
    [(True, [("Pod", NAME, None), ("Secret", SECRET, None)]), (False, [("Secret", SECRET, None)])],
)
def test_collect_deletes_the_secret_even_when_the_pod_is_kept(
    tmp_path: Path, delete_pods: bool, deleted: list[tuple[str, str, None]]
) -> None:
    cluster = Cluster()
    the_runner = runner(cluster, delete_pods=delete_pods)
    workload = the_runner.submit(make_trial(tmp_path, storage_variables=STORAGE_VARIABLES))
    cluster.ended(NAME, 0)

    assert the_runner.collect(workload, on_output=Lines()) == 0
    assert cluster.deleted == deleted


def test_collect_passes_on_the_output_answers_the_exit_code_and_deletes_the_pod(tmp_path: Path) -> None:
    cluster = Cluster()
    the_runner = runner(cluster)
    workload = the_runner.submit(make_trial(tmp_path))
    cluster.ended(NAME, 3, b"[rank=0] epoch 1\r\n[rank=0] loss 0.5\nno newline")
    out = Lines()

    code = the_runner.collect(workload, on_output=out)

    assert code == 3
    assert [line for line, _ in out.lines] == [
        "fetched the context", "[rank=0] epoch 1", "[rank=0] loss 0.5", "no newline",
    ]  # fmt: skip
    assert cluster.deleted == [("Pod", NAME, None), ("Secret", SECRET, None)]


def test_collect_keeps_the_pod_but_not_its_secret_when_so_configured(tmp_path: Path) -> None:
    cluster = Cluster()
    the_runner = runner(cluster, delete_pods=False)
    workload = the_runner.submit(make_trial(tmp_path))
    cluster.ended(NAME, 0)
    assert the_runner.collect(workload, on_output=Lines()) == 0
    assert cluster.deleted == [("Secret", SECRET, None)]


def test_a_stopped_run_kills_what_still_runs_and_answers_killed(tmp_path: Path) -> None:
    cluster = Cluster()
    the_runner = runner(cluster, kill_grace=7)
    workload = the_runner.submit(make_trial(tmp_path))
    cluster.running(NAME, b"[rank=0] step 10\n")
    out = Lines()

    code = the_runner.collect(workload, on_output=out, stopped=True)

    assert code == KILLED
    assert [line for line, _ in out.lines] == ["[rank=0] step 10"]
    assert ("Pod", NAME, 7) in cluster.deleted


def test_a_pod_that_cannot_start_is_an_error_naming_the_reason(tmp_path: Path) -> None:
    cluster = Cluster()
    the_runner = runner(cluster)
    workload = the_runner.submit(make_trial(tmp_path))
    cluster.cannot_pull(NAME)
    with pytest.raises(KubernetesError, match=rf"pod {NAME} cannot start: .*InvalidImageName"):
        the_runner.collect(workload, on_output=Lines())
    assert ("Pod", NAME, None) in cluster.deleted


def test_a_pod_still_pending_after_the_startup_timeout_is_an_error_saying_so(tmp_path: Path) -> None:
    cluster = Cluster()
    the_runner = runner(cluster, startup_timeout=5)
    workload = the_runner.submit(make_trial(tmp_path))
    with pytest.raises(KubernetesError, match=rf"pod {NAME} did not start within 5s: still Pending"):
        the_runner.collect(workload, on_output=Lines())


def test_a_gang_answers_its_failed_pods_code_and_kills_the_rest(tmp_path: Path) -> None:
    cluster = Cluster()
    the_runner = runner(cluster, slots_per_node=2, kill_grace=4)
    workload = the_runner.submit(make_trial(tmp_path, slots=4))
    cluster.ended(f"{NAME}-0-x0", 5, b"[rank=0] boom\n")
    cluster.running(f"{NAME}-1-x1", b"[rank=1] waiting for rank 0\n")

    code = the_runner.collect(workload, on_output=Lines())

    assert code == 5
    assert ("Pod", f"{NAME}-1-x1", 4) in cluster.deleted
    assert {("Job", NAME, None), ("Service", NAME, None)} <= set(cluster.deleted)


def test_a_gang_pod_deleted_under_the_run_kills_the_others(tmp_path: Path) -> None:
    cluster = Cluster()
    the_runner = runner(cluster, slots_per_node=2)
    workload = the_runner.submit(make_trial(tmp_path, slots=4))
    del cluster.pods[f"{NAME}-0-x0"]  # someone's kubectl
    cluster.running(f"{NAME}-1-x1")

    assert the_runner.collect(workload, on_output=Lines()) == KILLED
    assert ("Pod", f"{NAME}-1-x1", 10) in cluster.deleted


def test_a_gang_whose_job_did_not_create_every_pod_in_time_is_an_error_saying_so(tmp_path: Path) -> None:
    cluster = Cluster()
    the_runner = runner(cluster, slots_per_node=2, startup_timeout=30)
    workload = the_runner.submit(make_trial(tmp_path, slots=4))
    del cluster.pods[f"{NAME}-1-x1"]  # never created: no room in the namespace's quota

    with pytest.raises(KubernetesError, match=rf"job {NAME}: 1 of its 2 pods were created within 30s"):
        the_runner.collect(workload, on_output=Lines())


# --- the trigger, against the real master ---


@pytest.fixture
def master(creator: Creator, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[People, str]]:  # noqa: F811
    """The master's app over HTTP, which det's tasks and triggers reach with the service token."""
    with creator.people.db.begin() as conn:
        set_setting(conn, SERVICE_TOKEN_SETTING, hash_token(SERVICE_TOKEN))
    monkeypatch.setattr(auth, "_service_hash_cache", (0.0, None))
    with MasterOverHttp(creator.people) as server:
        yield creator.people, server.url


class ScriptedPods:
    """The trigger's view of the cluster: the pods' statuses the test scripts, and what it deleted."""

    def __init__(self, *bodies: dict[str, Any], unanswered: int = 0) -> None:
        self.bodies = list(bodies)
        self.unanswered = unanswered  # how many reads find the cluster unreachable first
        self.reads = 0
        self.read_enough = asyncio.Event()
        self.deleted: list[tuple[str, str, int]] = []

    async def pods(self, namespace: str, labels: dict[str, str]) -> list[k8s.V1Pod]:
        assert (namespace, labels) == ("ml", {LABEL_TRIAL: "12", LABEL_RUN: "2"})
        self.reads += 1
        if self.reads >= 3:
            self.read_enough.set()
        if self.reads <= self.unanswered:
            raise ConnectionRefusedError("connect call failed")
        return [as_pod(body) for body in self.bodies]

    async def delete(self, kind: str, namespace: str, name: str, *, grace_seconds: int) -> None:
        self.deleted.append((kind, name, grace_seconds))


def workload(pods: int = 1, *, submitted_at: float = 4e9) -> dict[str, Any]:
    kinds = ["Pod"] if pods == 1 else ["Service", "Job"]
    labels = {LABEL_TRIAL: "12", LABEL_RUN: "2"}
    return {
        "namespace": "ml",
        "name": NAME,
        "secret": SECRET,
        "pods": pods,
        "kinds": kinds,
        "labels": labels,
        "submitted_at": submitted_at,
    }


def trigger(
    url: str, experiment_id: int, trial_id: int, pods: ScriptedPods, *, gang: int = 1, **options: Any
) -> KubernetesTrialTrigger:
    made = KubernetesTrialTrigger(
        url, SERVICE_TOKEN, experiment_id, trial_id, workload(gang),
        poll_interval=0.01, min_wait=0, kill_grace=9, **options,
    )  # fmt: skip
    made.cluster = pods  # type: ignore[assignment]
    return made


def first_event(made: KubernetesTrialTrigger) -> dict[str, Any]:
    async def first() -> dict[str, Any]:
        async for event in made.run():
            return dict(event.payload)
        raise AssertionError("the trigger ended without an event")

    return asyncio.run(asyncio.wait_for(first(), timeout=30))


def running_trial(app: People, state: str = "ACTIVE") -> tuple[int, int]:
    experiment_id = app.add_experiment(owner="alice", state=state)
    return experiment_id, app.add_trial(experiment_id, state="RUNNING")


def test_the_trigger_fires_once_the_pod_ended(master: tuple[People, str]) -> None:
    app, url = master
    experiment_id, trial_id = running_trial(app)
    pods = ScriptedPods(pod_body(NAME, "Failed", init=DONE, main={"terminated": {"exitCode": 3}}))

    assert first_event(trigger(url, experiment_id, trial_id, pods)) == {"status": "ended"}
    assert pods.deleted == []


def test_a_cluster_that_does_not_answer_for_a_while_is_asked_again(master: tuple[People, str]) -> None:
    app, url = master
    experiment_id, trial_id = running_trial(app)
    pods = ScriptedPods(pod_body(NAME, "Succeeded", init=DONE, main=DONE), unanswered=2)

    assert first_event(trigger(url, experiment_id, trial_id, pods)) == {"status": "ended"}
    assert pods.reads == 3


def test_the_trigger_waits_while_the_pod_runs_and_the_trial_is_active(master: tuple[People, str]) -> None:
    app, url = master
    experiment_id, trial_id = running_trial(app)
    pods = ScriptedPods(pod_body(NAME, "Running", init=DONE, main=RUNNING))
    made = trigger(url, experiment_id, trial_id, pods)

    async def watch() -> list[Any]:
        events: list[Any] = []

        async def collect() -> None:
            async for event in made.run():
                events.append(event.payload)

        task = asyncio.create_task(collect())
        await asyncio.wait_for(pods.read_enough.wait(), timeout=30)
        task.cancel()
        return events

    assert asyncio.run(watch()) == [], "the trigger fired while the pod ran"
    assert pods.deleted == []


def test_a_killed_experiment_deletes_the_pods_and_fires(master: tuple[People, str]) -> None:
    app, url = master
    experiment_id, trial_id = running_trial(app, state="STOPPING_KILLED")
    pods = ScriptedPods(pod_body(NAME, "Running", init=DONE, main=RUNNING))

    event = first_event(trigger(url, experiment_id, trial_id, pods))

    assert event == {"status": "stopped", "reason": "killed"}
    assert pods.deleted == [("Pod", NAME, 9)]


def test_a_trial_that_ignores_a_pause_past_the_preemption_timeout_is_stopped(
    master: tuple[People, str],
) -> None:
    app, url = master
    experiment_id, trial_id = running_trial(app, state="PAUSED")
    body = pod_body(f"{NAME}-0-x0", "Running", init=DONE, main=RUNNING)
    pods = ScriptedPods(body, {**body, "metadata": {"name": f"{NAME}-1-x1"}})

    event = first_event(trigger(url, experiment_id, trial_id, pods, gang=2, preemption_timeout=0))

    assert event == {"status": "stopped", "reason": "ignored preemption for 0s"}
    assert pods.deleted == [("Job", NAME, 9), ("Pod", f"{NAME}-0-x0", 9), ("Pod", f"{NAME}-1-x1", 9)]


def test_a_pod_that_cannot_start_ends_the_wait(master: tuple[People, str]) -> None:
    app, url = master
    experiment_id, trial_id = running_trial(app)
    waiting = {"waiting": {"reason": "InvalidImageName", "message": "bad image"}}
    pods = ScriptedPods(pod_body(NAME, "Pending", init=None, main=waiting))
    assert first_event(trigger(url, experiment_id, trial_id, pods)) == {"status": "ended"}


def test_a_trial_the_master_does_not_know_is_an_error_event(master: tuple[People, str]) -> None:
    app, url = master
    experiment_id, _ = running_trial(app)
    pods = ScriptedPods(pod_body(NAME, "Running", init=DONE, main=RUNNING))
    event = first_event(trigger(url, experiment_id, 999, pods))
    assert event["status"] == "error" and "999" in event["message"]


def test_the_trigger_serializes_to_its_classpath_and_kwargs() -> None:
    made = KubernetesTrialTrigger(
        "http://m", "t", 1, 12, workload(), kubernetes_conn_id="k8s", preemption_timeout=60
    )
    classpath, kwargs = made.serialize()
    module, _, name = classpath.rpartition(".")
    rebuilt = getattr(__import__(module, fromlist=[name]), name)(**json.loads(json.dumps(kwargs)))
    assert rebuilt.serialize() == (classpath, kwargs)


# --- the operator ---


class K8sTrialOperator(TrialOperator):
    """The trial operator with its runner's cluster replaced by the stand-in."""

    cluster: Cluster

    def _kubernetes_runner(self, config: dict[str, Any]) -> KubernetesRunner:
        assert config == {"airflow": {"trial_runner": "kubernetes", "namespace": "ml"}}
        return runner(self.cluster, settings=det_settings.load())


@pytest.fixture
def operator(
    master: tuple[People, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[K8sTrialOperator, int, dict[str, Any]]]:
    app, url = master
    experiment_id = app.add_experiment(owner="alice")
    config = {
        **app.experiment(experiment_id).config,
        "airflow": {"trial_runner": "kubernetes", "namespace": "ml"},
        "max_restarts": 1,
    }
    with app.db.begin() as conn:
        conn.execute(
            update(schema.experiments).where(schema.experiments.c.id == experiment_id)
            # The search has made its one trial: once it ends, the slot has nothing left to run.
            .values(config=config, context=tar_gz({"train.py": b"print('hi')\n"}), search_done=True)
        )  # fmt: skip
    app.add_trial(experiment_id, state="QUEUED")
    # The runner policy of this cluster: trials in namespace "ml", checkpoints in the app's storage.
    monkeypatch.setenv("AIRFLOW__DET__NAMESPACE", "ml")
    monkeypatch.setenv("AIRFLOW__DET__CHECKPOINT_STORAGE_PATH", str(app.storage))
    monkeypatch.setenv(
        "AIRFLOW_CONN_DET_DEFAULT", json.dumps({"conn_type": "http", "host": url, "password": SERVICE_TOKEN})
    )
    op = K8sTrialOperator(
        task_id="trial", experiment_id=experiment_id, slot=0, work_dir=str(tmp_path / "work")
    )
    op.cluster = Cluster()
    # As the Task SDK hands it to a task: max_tries is the mapped task's retries (max_restarts 1).
    ti = SimpleNamespace(
        id=uuid.uuid4(), task_id="trial", dag_id=f"det_{experiment_id}", run_id="r", try_number=1,
        max_tries=1, map_index=0,
    )  # fmt: skip
    yield op, experiment_id, {"ti": ti}


def deferred(op: K8sTrialOperator, context: dict[str, Any]) -> TaskDeferred:
    with pytest.raises(TaskDeferred) as raised:
        op.execute(context)  # type: ignore[arg-type]
    return raised.value


def trial_logs(app: People, trial_id: int) -> list[tuple[int | None, str | None, str]]:
    """(rank, level, message) of each line `det trial logs` shows."""
    table = schema.trial_logs
    with app.db.read() as conn:
        rows = conn.execute(
            select(table.c.rank, table.c.level, table.c.message).where(table.c.trial_id == trial_id)
        )
        return [(r.rank, r.level, str(r.message)) for r in rows]


def test_a_kubernetes_trial_defers_after_submitting_its_pod_and_reports_its_exit_on_resume(
    operator: tuple[K8sTrialOperator, int, dict[str, Any]], master: tuple[People, str]
) -> None:
    op, experiment_id, context = operator
    app, url = master

    waiting = deferred(op, context)

    assert isinstance(waiting.trigger, KubernetesTrialTrigger)
    assert waiting.method_name == "resume_kubernetes"
    secret, pod = op.cluster.created
    trial_id = waiting.trigger.trial_id
    assert pod["metadata"]["name"] == f"det-trial-{experiment_id}-{trial_id}-1"
    assert (secret["kind"], secret["metadata"]["name"]) == ("Secret", f"{pod['metadata']['name']}-{SUFFIX}")
    token = secret["stringData"]["DET_SESSION_TOKEN"]
    assert token not in json.dumps(pod), "the trial's token is read from its Secret, not the pod spec"
    # Its pods run out of the worker's sight: it is STARTING until its process reports.
    assert app.trial(trial_id).state == "STARTING"
    assert "token" not in json.dumps(waiting.kwargs), "the trial's token stays out of the deferral"
    classpath, kwargs = waiting.trigger.serialize()
    assert classpath == "det_airflow.operators.triggers.KubernetesTrialTrigger"
    assert (kwargs["master"], kwargs["workload"]["name"]) == (url, pod["metadata"]["name"])
    assert kwargs["workload"]["secret"] == secret["metadata"]["name"], "collect deletes it by that name"

    op.cluster.ended(pod["metadata"]["name"], 0, b"[rank=0] trained\n")
    result = op.resume_kubernetes(context, {"status": "ended"}, **(waiting.kwargs or {}))  # type: ignore[arg-type]

    assert result == {"trials": [trial_id]}
    assert app.trial(trial_id).state == "COMPLETED"
    assert (0, "INFO", "trained") in trial_logs(app, trial_id)
    assert ("Pod", pod["metadata"]["name"], None) in op.cluster.deleted
    assert ("Secret", secret["metadata"]["name"], None) in op.cluster.deleted


def test_a_failed_pod_is_a_failed_run_that_airflow_retries(
    operator: tuple[K8sTrialOperator, int, dict[str, Any]], master: tuple[People, str]
) -> None:
    op, _, context = operator
    app, _ = master
    waiting = deferred(op, context)
    (pod,) = pods_created(op.cluster)
    op.cluster.ended(pod, 2, b"[rank=0] Traceback: boom\n")

    with pytest.raises(AirflowException, match=r"exited with code 2; it restarts from its latest checkpoint"):
        op.resume_kubernetes(context, {"status": "ended"}, **(waiting.kwargs or {}))  # type: ignore[arg-type]
    assert (0, "INFO", "Traceback: boom") in trial_logs(app, waiting.trigger.trial_id)  # type: ignore[attr-defined]


def test_a_slot_with_no_airflow_retry_left_restarts_its_failed_trial_in_the_same_try(
    operator: tuple[K8sTrialOperator, int, dict[str, Any]], master: tuple[People, str]
) -> None:
    op, experiment_id, context = operator
    app, _ = master
    context["ti"].max_tries = 0  # the slot's earlier trials used its Airflow retries
    waiting = deferred(op, context)
    trial_id = waiting.trigger.trial_id  # type: ignore[attr-defined]
    (pod,) = pods_created(op.cluster)
    op.cluster.ended(pod, 2, b"[rank=0] Traceback: boom\n")

    # The trial's own max_restarts (1) allows a restart: the slot submits its second run at once.
    with pytest.raises(TaskDeferred) as again:
        op.resume_kubernetes(context, {"status": "ended"}, **(waiting.kwargs or {}))  # type: ignore[arg-type]

    assert again.value.trigger.trial_id == trial_id  # type: ignore[attr-defined]
    assert pods_created(op.cluster) == [
        pod,
        f"det-trial-{experiment_id}-{trial_id}-2",
    ]
    assert (app.trial(trial_id).state, app.trial(trial_id).restarts) == ("STARTING", 1)


def test_a_pod_that_cannot_start_is_reported_in_the_trials_logs(
    operator: tuple[K8sTrialOperator, int, dict[str, Any]], master: tuple[People, str]
) -> None:
    op, _, context = operator
    app, _ = master
    waiting = deferred(op, context)
    (pod,) = pods_created(op.cluster)
    op.cluster.cannot_pull(pod)

    with pytest.raises(AirflowException, match=r"exited with code 125"):
        op.resume_kubernetes(context, {"status": "ended"}, **(waiting.kwargs or {}))  # type: ignore[arg-type]
    logs = trial_logs(app, waiting.trigger.trial_id)  # type: ignore[attr-defined]
    assert any(
        level == "ERROR" and line.startswith(f"pod {pod} cannot start:") and "InvalidImageName" in line
        for _, level, line in logs
    ), logs


@pytest.fixture
def s3_operator(
    operator: tuple[K8sTrialOperator, int, dict[str, Any]],
    master: tuple[People, str],
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[K8sTrialOperator, int, dict[str, Any]]:
    """The trial operator of an experiment whose checkpoints go to s3, with the credentials of
    Airflow's ``aws_default`` connection."""
    op, experiment_id, context = operator
    app, _ = master
    config = {**app.experiment(experiment_id).config, "checkpoint_storage": {"type": "s3", "bucket": "ckpt"}}
    with app.db.begin() as conn:
        conn.execute(
            update(schema.experiments).where(schema.experiments.c.id == experiment_id).values(config=config)
        )
    connection = {
        "conn_type": "aws", "login": CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "password": CREDENTIALS["AWS_SECRET_ACCESS_KEY"], "extra": {"region_name": "eu-west-1"},
    }  # fmt: skip
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps(connection))
    return op, experiment_id, context


def test_the_connections_credentials_never_reach_the_pod_and_its_secret_is_deleted_on_resume(
    s3_operator: tuple[K8sTrialOperator, int, dict[str, Any]],
) -> None:
    op, _, context = s3_operator
    waiting = deferred(op, context)

    secret, pod = op.cluster.created
    assert secret["kind"] == "Secret" and secret["metadata"]["name"] == f"{pod['metadata']['name']}-{SUFFIX}"
    # The trial reaches the bucket through the master, which alone holds the connection's key.
    assert not CREDENTIAL_VARIABLES & set(secret["stringData"])
    for value in CREDENTIALS.values():
        assert value not in json.dumps(secret) and value not in json.dumps(pod), value
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert not CREDENTIAL_VARIABLES & set(env)
    assert env["DET_SESSION_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == secret["metadata"]["name"]

    op.cluster.ended(pod["metadata"]["name"], 0)
    op.resume_kubernetes(context, {"status": "ended"}, **(waiting.kwargs or {}))  # type: ignore[arg-type]

    assert ("Secret", secret["metadata"]["name"], None) in op.cluster.deleted


def test_a_secret_the_cluster_refuses_is_reported_in_the_trials_logs(
    s3_operator: tuple[K8sTrialOperator, int, dict[str, Any]], master: tuple[People, str]
) -> None:
    op, experiment_id, context = s3_operator
    app, _ = master
    op.cluster = Cluster(refuse="Secret")

    with pytest.raises(AirflowException, match=r"exited with code 125"):
        op.execute(context)  # type: ignore[arg-type]

    assert op.cluster.created == [], "no pod starts without its credentials"
    with app.db.read() as conn:
        trial_id = conn.execute(
            select(schema.trials.c.id).where(schema.trials.c.experiment_id == experiment_id)
        ).scalar_one()
    logs = trial_logs(app, trial_id)
    assert any(
        level == "ERROR"
        and f"cannot create the Secret of trial {trial_id} in namespace ml, which holds its token, config "
        "and storage credentials: Secret refused"
        in line
        for _, level, line in logs
    ), logs
