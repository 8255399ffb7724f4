"""Trials in Kubernetes pods, through the cncf.kubernetes provider's ``KubernetesHook`` and ``PodManager``.

A trial whose slots fit on one node (``[det] slots_per_node``, 8 by default) runs as one pod; a
larger one as a gang: an indexed Job of ``slots_per_trial / slots_per_node`` pods and the headless
Service they rendezvous through (:mod:`det_airflow.operators.runners.kubernetes_pod` builds them). The
pods' output streams to the caller line by line; setting ``stop`` deletes them (SIGTERM, then
SIGKILL after the grace period); once the trial has ended its objects are deleted unless
``[det] kubernetes_delete_pods`` is false.

A trial's token for the master, config and storage credentials reach its pods from a Secret of its
own, under a name no other trial can guess (chosen anew for each run, carried in
:class:`SubmittedWorkload` to the run's collection), created before its pod or Job and then owned by
it (so that Kubernetes deletes it with them).
The runner deletes it itself with the run's other objects, even when ``kubernetes_delete_pods``
keeps those for inspection: a run that ended needs no credentials.

A trial operator does not wait for its pods: it submits them (:meth:`KubernetesRunner.submit`),
defers to a trigger that watches them from the triggerer (:class:`AsyncKubernetesCluster`), and once
they ended collects their output and exit code (:meth:`KubernetesRunner.collect`).

Everything that talks to the cluster is :class:`KubernetesCluster` (or, in the triggerer,
:class:`AsyncKubernetesCluster`); the runner only decides.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook, KubernetesHook
from airflow.providers.cncf.kubernetes.utils.container import get_container_status
from airflow.providers.cncf.kubernetes.utils.pod_manager import PodManager, detect_pod_terminate_early_issues
from kubernetes.client import BatchV1Api, CoreV1Api
from kubernetes.client import models as k8s
from kubernetes.client.exceptions import ApiException
from kubernetes.config import ConfigException
from urllib3.exceptions import HTTPError

from det_airflow import runner_policy, trial_env
from det_airflow.errors import DetError
from det_airflow.operators.runners._base import OnContainer, OnPhase
from det_airflow.operators.runners._container import LABEL_RUN, LABEL_TRIAL, ContainerRunner, ContainerTrial
from det_airflow.operators.runners._launch import TrialLaunch
from det_airflow.operators.runners.kubernetes_pod import (
    CONTEXT_CONTAINER,
    TRIAL_CONTAINER,
    gang_job,
    gang_service,
    secret_name,
    trial_pod,
    trial_secret,
)
from det_airflow.settings import RunnerPolicy, Settings
from det_airflow.settings import load as load_settings
from det_airflow.slots import SlotLease
from det_airflow.trial_process import LineSplitter, OnOutput

DEFAULT_SLOTS_PER_NODE = 8
# What a trial whose pod was deleted under it (stop, kill, someone's kubectl) exits with: SIGKILL's.
KILLED = 137
# The cluster refused a call, cannot be reached, or no credentials for it were found.
_UNREACHABLE = (ApiException, HTTPError, ConfigException)
_VISIBLE_DEVICES = {"cuda": "CUDA_VISIBLE_DEVICES", "rocm": "ROCR_VISIBLE_DEVICES"}


class KubernetesError(DetError):
    """A trial's pods could not be created or started (bad image, refused object, no room)."""


@dataclass(frozen=True)
class TrialWorkload:
    """What one trial run is submitted as, in creation order: the Secret its pods read its token,
    config and credentials from, then its pod, or a headless Service and an indexed Job of ``pods``
    pods. ``name`` is every object's but the Secret's, which is ``secret``."""

    namespace: str
    name: str
    secret: str
    pods: int
    objects: tuple[Any, ...]

    @property
    def is_gang(self) -> bool:
        return self.pods > 1

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(obj.kind for obj in self.objects)

    @property
    def named(self) -> list[tuple[str, str]]:
        """(kind, name) of each object, in creation order."""
        return _named(self.kinds, self.name, self.secret)


@dataclass(frozen=True)
class SubmittedWorkload:
    """A submitted trial run as plain data, for a trigger's kwargs: where its objects are, what they
    are (``kinds`` in creation order, all named ``name`` but the Secret, named ``secret``), how many
    pods it has, the labels that select them, and when it was submitted (seconds since the epoch)."""

    namespace: str
    name: str
    secret: str
    pods: int
    kinds: tuple[str, ...]
    labels: Mapping[str, str]
    submitted_at: float

    @property
    def named(self) -> list[tuple[str, str]]:
        """(kind, name) of each object, in creation order."""
        return _named(self.kinds, self.name, self.secret)

    def to_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "secret": self.secret,
            "pods": self.pods,
            "kinds": list(self.kinds),
            "labels": dict(self.labels),
            "submitted_at": self.submitted_at,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SubmittedWorkload:
        return cls(
            namespace=str(data["namespace"]),
            name=str(data["name"]),
            secret=str(data.get("secret") or ""),  # a workload submitted before Secrets: none to delete
            pods=int(data["pods"]),
            kinds=tuple(data["kinds"]),
            labels=dict(data["labels"]),
            submitted_at=float(data["submitted_at"]),
        )


def _named(kinds: Sequence[str], name: str, secret: str) -> list[tuple[str, str]]:
    return [(kind, secret if kind == "Secret" else name) for kind in kinds]


def pods_for(slots: int, slots_per_node: int) -> int:
    """How many pods a trial of ``slots`` slots spans: one when they fit on a node, else one per node."""
    if slots <= slots_per_node:
        return 1
    if slots % slots_per_node:
        raise KubernetesError(
            f"resources.slots_per_trial: {slots} slots do not fit on one node of {slots_per_node} "
            f"([det] slots_per_node), so they must be a multiple of {slots_per_node}"
        )
    return slots // slots_per_node


def trial_workload(
    trial: ContainerTrial,
    *,
    namespace: str,
    slots_per_node: int,
    policy: RunnerPolicy | None = None,
    roots: Sequence[str] = (),
) -> TrialWorkload:
    """The objects ``trial`` runs as, under ``policy`` (the runner policy of its pool, which allows
    host folders ``roots``). Each pod holds the slots of one pod, numbered from 0 as the pod sees
    the devices Kubernetes gives it."""
    slots = len(trial.slot_ids)
    pods = pods_for(slots, slots_per_node)
    per_pod = tuple(range(slots // pods))
    env = dict(trial.env)
    env[trial_env.SLOT_IDS] = json.dumps(list(per_pod))
    visible = _VISIBLE_DEVICES.get(trial.device)
    if visible is not None and per_pod:
        env[visible] = ",".join(str(i) for i in per_pod)
    one = replace(trial, slot_ids=per_pod, env=env)
    name = secret_name(trial)
    secret = trial_secret(one, namespace=namespace, name=name)
    if pods == 1:
        pod = trial_pod(one, namespace=namespace, secret=name, policy=policy, roots=roots)
        return TrialWorkload(namespace, trial.name, name, 1, (secret, pod))
    return TrialWorkload(
        namespace,
        trial.name,
        name,
        pods,
        (
            secret,
            gang_service(one, namespace=namespace),
            gang_job(one, namespace=namespace, pods=pods, secret=name, policy=policy, roots=roots),
        ),
    )


class KubernetesCluster:
    """The few calls a trial makes to a cluster, on the provider's hook (its connection, kubeconfig
    or in-cluster credentials) and pod manager (creation and log streaming, as KubernetesPodOperator)."""

    def __init__(self, hook: KubernetesHook) -> None:
        self.hook = hook

    # Credentials are loaded on first use, in the run: a missing kubeconfig fails the trial, not the set-up.
    @cached_property
    def core(self) -> CoreV1Api:
        return self.hook.core_v1_client

    @cached_property
    def batch(self) -> BatchV1Api:
        return self.hook.batch_v1_client

    @cached_property
    def pod_manager(self) -> PodManager:
        return PodManager(self.core)

    def create(self, obj: Any) -> Any:
        """Creates a Pod, Job, Service or Secret; answers it as the API server created it."""
        if isinstance(obj, k8s.V1Pod):
            return self.pod_manager.create_pod(obj)
        if isinstance(obj, k8s.V1Job):
            return self.hook.create_job(obj)
        body = self.core.api_client.sanitize_for_serialization(obj)
        if isinstance(obj, k8s.V1Secret):  # not through the provider, which logs what it creates
            return self.core.create_namespaced_secret(namespace=obj.metadata.namespace, body=body)
        return self.core.create_namespaced_service(namespace=obj.metadata.namespace, body=body)

    def own(self, kind: str, namespace: str, name: str, owner: Any) -> None:
        """Makes ``owner`` (as :meth:`create` answered it) the owner of an object, which Kubernetes
        then deletes with it."""
        reference = {
            "apiVersion": owner.api_version,
            "kind": owner.kind,
            "name": owner.metadata.name,
            "uid": owner.metadata.uid,
        }
        patch = {"Secret": self.core.patch_namespaced_secret}[kind]
        # A JSON patch (a list): the client would send a dict under that content type too.
        patch(name, namespace, [{"op": "add", "path": "/metadata/ownerReferences", "value": [reference]}])

    def delete(self, kind: str, namespace: str, name: str, *, grace_seconds: int | None = None) -> None:
        """Deletes one object; one already gone is fine. A Job takes its pods with it."""
        options = k8s.V1DeleteOptions(grace_period_seconds=grace_seconds, propagation_policy="Background")
        call = {
            "Pod": self.core.delete_namespaced_pod,
            "Job": self.batch.delete_namespaced_job,
            "Service": self.core.delete_namespaced_service,
            "Secret": self.core.delete_namespaced_secret,
        }[kind]
        try:
            call(name, namespace, body=options)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def read_pod(self, namespace: str, name: str) -> k8s.V1Pod | None:
        try:
            return self.core.read_namespaced_pod(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def pod_names(self, namespace: str, labels: Mapping[str, str]) -> list[str]:
        selector = ",".join(f"{k}={v}" for k, v in labels.items())
        found = self.core.list_namespaced_pod(namespace, label_selector=selector)
        return sorted(p.metadata.name for p in found.items)

    def leftovers(self, namespace: str, trial_id: int) -> list[tuple[str, str]]:
        """(kind, name) of every Job, Service, pod and Secret labelled with ``trial_id``."""
        selector = f"{LABEL_TRIAL}={trial_id}"
        found = [
            ("Job", j.metadata.name)
            for j in self.batch.list_namespaced_job(namespace, label_selector=selector).items
        ]
        found += [
            ("Service", s.metadata.name)
            for s in self.core.list_namespaced_service(namespace, label_selector=selector).items
        ]
        found += [
            ("Pod", p.metadata.name)
            for p in self.core.list_namespaced_pod(namespace, label_selector=selector).items
        ]
        found += [
            ("Secret", s.metadata.name)
            for s in self.core.list_namespaced_secret(namespace, label_selector=selector).items
        ]
        return found

    def logs(self, namespace: str, pod: str, container: str, *, follow: bool = True) -> Iterable[bytes]:
        """The container's output from its start, followed until it ends unless ``follow`` is false."""
        ref = k8s.V1Pod(metadata=k8s.V1ObjectMeta(name=pod, namespace=namespace))
        return self.pod_manager.read_pod_logs(ref, container, follow=follow)


class AsyncKubernetesCluster:
    """What a trigger asks of a cluster while a trial's pods run, on the provider's async hook (the
    same connection, kubeconfig or in-cluster credentials as :class:`KubernetesCluster`)."""

    def __init__(self, hook: AsyncKubernetesHook) -> None:
        self.hook = hook

    async def pods(self, namespace: str, labels: Mapping[str, str]) -> list[Any]:
        """The pods labelled with ``labels`` (kubernetes_asyncio's ``V1Pod``)."""
        from kubernetes_asyncio import client as async_client

        selector = ",".join(f"{k}={v}" for k, v in labels.items())
        async with self.hook.get_conn() as api:
            found = await async_client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector)
        return list(found.items)

    async def delete(self, kind: str, namespace: str, name: str, *, grace_seconds: int) -> None:
        """Deletes a Pod or a Job (and its pods); one already gone is fine."""
        from kubernetes_asyncio import client as async_client

        options = async_client.V1DeleteOptions(
            grace_period_seconds=grace_seconds, propagation_policy="Background"
        )
        async with self.hook.get_conn() as api:
            try:
                if kind == "Job":
                    await async_client.BatchV1Api(api).delete_namespaced_job(name, namespace, body=options)
                else:
                    await async_client.CoreV1Api(api).delete_namespaced_pod(name, namespace, body=options)
            except async_client.ApiException as exc:
                if exc.status != 404:
                    raise


class KubernetesRunner(ContainerRunner):
    """Runs a trial in pods of the cluster that ``cluster`` talks to.

    Example::

        cluster = KubernetesCluster(KubernetesHook(conn_id=None))
        code = KubernetesRunner(cluster, namespace="ml").run(trial, on_output=print_line, stop=threading.Event())

    :meth:`run` waits for the pods in the caller; a trial task instead calls :meth:`submit`, defers
    to a :class:`~det_airflow.operators.triggers.KubernetesTrialTrigger`, and calls :meth:`collect`
    when it resumes, so that no worker waits while the pods run.
    """

    name = "kubernetes"

    def __init__(
        self,
        cluster: KubernetesCluster,
        *,
        namespace: str,
        slots_per_node: int = DEFAULT_SLOTS_PER_NODE,
        delete_pods: bool = True,
        kill_grace: int = 10,
        startup_timeout: float = 600.0,
        poll_interval: float = 1.0,
        log: Any = None,
        on_container: OnContainer | None = None,
        settings: Settings | None = None,
    ) -> None:
        self.cluster = cluster
        # airflow.cfg [det] of this worker (read at each run when not given).
        self.settings = settings
        self.namespace = namespace
        self.slots_per_node = slots_per_node
        self.delete_pods = delete_pods
        self.kill_grace = kill_grace
        self.startup_timeout = startup_timeout
        self.poll_interval = poll_interval
        self._log = log
        self._on_container = on_container  # told each pod's name once it exists

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any],
        settings: Settings,
        *,
        log: Any = None,
        on_container: OnContainer | None = None,
        on_phase: OnPhase | None = None,
    ) -> KubernetesRunner:
        """The runner of the cluster ``airflow.kubernetes_conn_id`` names, in ``airflow.namespace``;
        its pods report their own phases (``on_phase`` is not called)."""
        section = config.get("airflow") or {}
        return cls(
            KubernetesCluster(KubernetesHook(conn_id=section.get("kubernetes_conn_id") or None)),
            namespace=section.get("namespace") or "default",
            # Left empty, a node of 8.
            slots_per_node=settings.slots_per_node or DEFAULT_SLOTS_PER_NODE,
            delete_pods=settings.kubernetes_delete_pods,
            startup_timeout=settings.kubernetes_startup_timeout,
            log=log,
            on_container=on_container,
            settings=settings,
        )

    def hold_slots(self, launch: TrialLaunch, device: str) -> SlotLease:
        """The trial's slots, leased nowhere: a pod's devices are its node's, given by Kubernetes."""
        return SlotLease(device, launch.held_slots())

    def workload(self, trial: ContainerTrial) -> TrialWorkload:
        """The trial's objects, once its config passed this worker's runner policy (which may be
        stricter than the master's) and the namespace is one the policy allows."""
        settings = self.settings or load_settings()
        runner_policy.enforce(trial.config, settings, runner="kubernetes")
        policy = settings.policy_for(runner_policy.pool_of(trial.config))
        if self.namespace not in settings.allowed_namespaces(policy):
            raise runner_policy.PolicyError(
                [
                    (
                        "airflow.namespace",
                        f"namespace {self.namespace!r} is not allowed by the cluster's runner policy",
                    )
                ]
            )
        return trial_workload(
            trial,
            namespace=self.namespace,
            slots_per_node=self.slots_per_node,
            policy=policy,
            roots=[str(r) for r in settings.allowed_roots(policy)],
        )

    def run(self, trial: ContainerTrial, *, on_output: OnOutput, stop: threading.Event) -> int:
        workload = self.workload(trial)
        lock = threading.Lock()

        def emit(line: str, stream: str) -> None:
            with lock:
                on_output(line, stream)

        try:
            self.sweep(trial.spec.trial_id)
            try:
                self._create_all(workload, trial)
                return self._follow(workload, emit, stop)
            finally:
                self._clean_up(workload.namespace, workload.named)
        except _UNREACHABLE as exc:
            raise KubernetesError(
                f"trial {trial.spec.trial_id}: the Kubernetes cluster did not answer ({_describe(exc)})"
            ) from exc

    def submit(self, trial: ContainerTrial) -> SubmittedWorkload:
        """Deletes what an earlier run of the trial left and creates its objects, without waiting for
        them; what was created before a refusal is deleted again."""
        workload = self.workload(trial)
        try:
            self.sweep(trial.spec.trial_id)
            try:
                self._create_all(workload, trial)
            except BaseException:
                self._delete(workload.namespace, workload.named)
                raise
        except _UNREACHABLE as exc:
            raise KubernetesError(
                f"trial {trial.spec.trial_id}: the Kubernetes cluster did not answer ({_describe(exc)})"
            ) from exc
        return SubmittedWorkload(
            namespace=self.namespace,
            name=workload.name,
            secret=workload.secret,
            pods=workload.pods,
            kinds=workload.kinds,
            labels={LABEL_TRIAL: str(trial.spec.trial_id), LABEL_RUN: str(trial.spec.run_id)},
            submitted_at=time.time(),
        )

    def collect(self, workload: SubmittedWorkload, *, on_output: OnOutput, stopped: bool = False) -> int:
        """Once a submitted run ended (or was ``stopped``: its pods deleted), passes on each pod's
        output, answers the run's exit code and deletes its objects (but for its Secret, none when
        configured to keep them). Pods still there are killed: a gang whose first pod failed, or
        pods that never started, which raise :class:`KubernetesError` saying why."""
        namespace = workload.namespace
        problems: list[str] = []
        try:
            try:
                pods = self.cluster.pod_names(namespace, workload.labels)
                remotes = {pod: self.cluster.read_pod(namespace, pod) for pod in pods}
                for pod, remote in remotes.items():
                    self._read_output(namespace, pod, remote, on_output)
                codes = {pod: _final_code(remote) for pod, remote in remotes.items()}
                live = [pod for pod, code in codes.items() if code is None]
                failed = [code for code in codes.values() if code not in (None, 0)]
                if live:
                    self._kill(workload.namespace, workload.name, workload.kinds, live)
                if not stopped and not failed:
                    problems = self._why_not_started(workload, remotes, live)
            finally:
                self._clean_up(workload.namespace, workload.named)
        except _UNREACHABLE as exc:
            raise KubernetesError(
                f"{workload.name}: the Kubernetes cluster did not answer ({_describe(exc)})"
            ) from exc
        if problems:
            raise KubernetesError("; ".join(problems))
        if not pods:
            return KILLED
        bad = failed + [KILLED] * len(live)
        # When one pod of a gang fails, the Job deletes the others: the failure is the run's code.
        return next((code for code in bad if code != KILLED), bad[0] if bad else 0)

    def _why_not_started(
        self, workload: SubmittedWorkload, remotes: Mapping[str, k8s.V1Pod | None], live: list[str]
    ) -> list[str]:
        """Why a run that nobody stopped and that failed nowhere ended with pods still live: pods
        that cannot start, else (when none ran) the startup timeout. Live pods of a run where
        some did run were left by a sibling deleted under it: no problem of theirs."""
        problems = [
            f"pod {pod} cannot start: {problem.strip()}"
            for pod in live
            if (problem := _start_problem(remotes[pod]))
        ]
        if problems or any(_has_run(remote) for remote in remotes.values()):
            return problems
        if len(remotes) < workload.pods:
            return [
                f"job {workload.name}: {len(remotes)} of its {workload.pods} pods were created within "
                f"{self.startup_timeout:.0f}s"
            ]
        return [
            f"pod {pod} did not start within {self.startup_timeout:.0f}s: {_pending_reason(remote)}"
            for pod in live
            if (remote := remotes[pod]) is not None
        ]

    def sweep(self, trial_id: int) -> list[tuple[str, str]]:
        """Deletes what an earlier run of ``trial_id`` left (a worker that died while its trial ran);
        only one run of a trial is ever live, the one about to start."""
        found = self.cluster.leftovers(self.namespace, trial_id)
        for kind, name in found:
            if self._log is not None:
                self._log.warning("Deleting %s %s left by an earlier run of trial %s", kind, name, trial_id)
            self.cluster.delete(kind, self.namespace, name, grace_seconds=0)
        return found

    # --- one run ---

    def _create_all(self, workload: TrialWorkload, trial: ContainerTrial) -> None:
        """Creates the workload's objects in order, then makes its Pod or Job the owner of its
        Secret."""
        created = [self._create(obj, trial) for obj in workload.objects]
        try:
            self.cluster.own("Secret", workload.namespace, workload.secret, created[-1])
        except ApiException as exc:  # the run's clean-up (or a later run's sweep) deletes it all the same
            if self._log is not None:
                self._log.warning(
                    "Secret %s cannot be owned by its %s, so only the trial's clean-up deletes it: %s",
                    workload.secret,
                    workload.kinds[-1],
                    _reason(exc),
                )

    def _create(self, obj: Any, trial: ContainerTrial) -> Any:
        try:
            return self.cluster.create(obj)
        except ApiException as exc:
            holds = ", which holds its token, config and storage credentials" if obj.kind == "Secret" else ""
            raise KubernetesError(
                f"cannot create the {obj.kind} of trial {trial.spec.trial_id} in namespace {self.namespace}"
                f"{holds}: {_reason(exc)}"
            ) from exc

    def _follow(self, workload: TrialWorkload, emit: OnOutput, stop: threading.Event) -> int:
        pods = self._pods(workload, stop)
        if pods is None:
            return KILLED
        failures: list[BaseException] = []
        followers = [
            threading.Thread(target=self._stream, args=(pod, emit, failures), daemon=True) for pod in pods
        ]
        for pod, follower in zip(pods, followers, strict=True):
            if self._on_container is not None:
                self._on_container(pod)
            follower.start()
        stopping = False
        while any(f.is_alive() for f in followers):
            for follower in followers:
                follower.join(timeout=self.poll_interval / len(followers))
            # A pod that cannot start fails the whole gang: the others would wait for it forever.
            if (stop.is_set() or failures) and not stopping:
                stopping = True
                self._kill(workload.namespace, workload.name, workload.kinds, pods)
        if failures and not stop.is_set():
            raise failures[0]
        # A pod whose log stream broke off runs on: stop still reaches it while its code is awaited.
        kill = (
            (lambda: None)
            if stopping
            else (lambda: self._kill(workload.namespace, workload.name, workload.kinds, pods))
        )
        failed = [code for code in (self._exit_code(pod, stop, kill) for pod in pods) if code != 0]
        # When one pod of a gang fails, the Job deletes the others: the failure is the run's code.
        return next((code for code in failed if code != KILLED), failed[0] if failed else 0)

    def _pods(self, workload: TrialWorkload, stop: threading.Event) -> list[str] | None:
        """The names of the workload's pods once all exist (a Job's pods are named by Kubernetes);
        None when stopped before."""
        if not workload.is_gang:
            return [workload.name]
        deadline = time.monotonic() + self.startup_timeout
        while not stop.is_set():
            names = self.cluster.pod_names(self.namespace, {"job-name": workload.name})
            if len(names) >= workload.pods:
                return names
            if time.monotonic() > deadline:
                raise KubernetesError(
                    f"job {workload.name}: {len(names)} of its {workload.pods} pods were created within "
                    f"{self.startup_timeout:.0f}s"
                )
            stop.wait(self.poll_interval)
        self._kill(workload.namespace, workload.name, workload.kinds, [])
        return None

    def _stream(self, pod: str, emit: OnOutput, failures: list[BaseException]) -> None:
        """Passes on the output of the pod's init container, then of the trial's, as each runs."""
        try:
            for container in (CONTEXT_CONTAINER, TRIAL_CONTAINER):
                if not self._await_container(pod, container):
                    return
                lines = LineSplitter("stdout", emit)  # Kubernetes merges a container's stdout and stderr
                for chunk in self.cluster.logs(self.namespace, pod, container):
                    lines.feed(chunk)
                lines.close()
                if container == CONTEXT_CONTAINER and self._code_of(pod, container) not in (None, 0):
                    return
        except BaseException as exc:  # handed to the runner's thread, which raises it
            failures.append(exc)

    def _await_container(self, pod: str, container: str) -> bool:
        """Waits until ``container`` runs or has run; False when it never will (the pod is gone or
        ended without it). Raises when the pod cannot start."""
        deadline = time.monotonic() + self.startup_timeout
        while True:
            remote = self.cluster.read_pod(self.namespace, pod)
            if remote is None:
                return False
            status = get_container_status(remote, container)
            state = status.state if status is not None else None
            if state is not None and (state.running is not None or state.terminated is not None):
                return True
            if remote.status is not None and remote.status.phase in ("Failed", "Succeeded"):
                return False
            if remote.status is not None and (problem := detect_pod_terminate_early_issues(remote)):
                raise KubernetesError(f"pod {pod} cannot start: {problem.strip()}")
            if time.monotonic() > deadline:
                raise KubernetesError(
                    f"pod {pod} did not start within {self.startup_timeout:.0f}s: {_pending_reason(remote)}"
                )
            time.sleep(self.poll_interval)

    def _code_of(self, pod: str, container: str) -> int | None:
        return _exit_code_in(self.cluster.read_pod(self.namespace, pod), container)

    def _exit_code(self, pod: str, stop: threading.Event, kill: Callable[[], None]) -> int:
        """The trial container's exit code, once Kubernetes reports it; the init container's when the
        trial's never ran; :data:`KILLED` when the pod is gone."""
        killed = False
        while (code := _final_code(self.cluster.read_pod(self.namespace, pod))) is None:
            if stop.is_set() and not killed:
                killed = True
                kill()
            time.sleep(self.poll_interval)
        return code

    def _kill(self, namespace: str, name: str, kinds: Sequence[str], pods: list[str]) -> None:
        """SIGTERM to every pod's containers (through the gang's Job, if any), SIGKILL ``kill_grace``
        seconds later."""
        if "Job" in kinds:
            self.cluster.delete("Job", namespace, name, grace_seconds=self.kill_grace)
        for pod in pods:
            self.cluster.delete("Pod", namespace, pod, grace_seconds=self.kill_grace)

    def _read_output(self, namespace: str, pod: str, remote: k8s.V1Pod | None, on_output: OnOutput) -> None:
        """Passes on what the pod's init container, then the trial's, wrote (those that started)."""
        for container in (CONTEXT_CONTAINER, TRIAL_CONTAINER):
            status = get_container_status(remote, container) if remote is not None else None
            state = status.state if status is not None else None
            if state is None or (state.running is None and state.terminated is None):
                continue
            lines = LineSplitter("stdout", on_output)  # Kubernetes merges a container's stdout and stderr
            try:
                for chunk in self.cluster.logs(namespace, pod, container, follow=False):
                    lines.feed(chunk)
            except ApiException as exc:  # its exit code still counts
                on_output(f"cannot read the output of {container} in pod {pod}: {_reason(exc)}", "stderr")
            lines.close()

    def _clean_up(self, namespace: str, named: Sequence[tuple[str, str]]) -> None:
        """Deletes a run's objects ((kind, name) in creation order) once it ended; only its Secret
        when its pods are to be kept."""
        self._delete(namespace, named if self.delete_pods else [o for o in named if o[0] == "Secret"])

    def _delete(self, namespace: str, named: Sequence[tuple[str, str]]) -> None:
        """Deletes a run's objects ((kind, name) in creation order), the last created first."""
        for kind, name in reversed(named):
            try:
                self.cluster.delete(kind, namespace, name)
            except _UNREACHABLE as exc:  # the next run's sweep deletes it
                if self._log is not None:
                    self._log.warning("Cannot delete %s %s: %s", kind, name, _describe(exc))


def _exit_code_in(pod: k8s.V1Pod | None, container: str) -> int | None:
    status = get_container_status(pod, container) if pod is not None else None
    terminated = status.state.terminated if status is not None and status.state is not None else None
    return int(terminated.exit_code) if terminated is not None else None


def _final_code(pod: k8s.V1Pod | None) -> int | None:
    """A pod's exit code as :meth:`KubernetesRunner._exit_code` reads it, without waiting: None
    while it has not ended."""
    if pod is None:
        return KILLED
    code = _exit_code_in(pod, TRIAL_CONTAINER)
    if code is not None:
        return code
    if pod.status is not None and pod.status.phase in ("Failed", "Succeeded"):
        return _exit_code_in(pod, CONTEXT_CONTAINER) or KILLED
    return None


def _start_problem(pod: k8s.V1Pod | None) -> str | None:
    """Why a pod cannot start (a bad image, say), as the provider's pod operator judges it."""
    if pod is None or pod.status is None:
        return None
    return detect_pod_terminate_early_issues(pod)


def _has_run(pod: k8s.V1Pod | None) -> bool:
    """Whether the pod's trial container runs or has run (or the pod is gone, having run)."""
    if pod is None:
        return True
    status = get_container_status(pod, TRIAL_CONTAINER)
    state = status.state if status is not None else None
    return state is not None and (state.running is not None or state.terminated is not None)


def _pending_reason(pod: k8s.V1Pod) -> str:
    status = pod.status
    for condition in (status.conditions if status is not None else None) or []:
        if condition.status != "True" and condition.message:
            return f"{condition.reason}: {condition.message}"
    return f"still {status.phase if status is not None else 'unknown'}"


def _describe(exc: BaseException) -> str:
    return _reason(exc) if isinstance(exc, ApiException) else str(exc)


def _reason(exc: ApiException) -> str:
    try:
        message = json.loads(exc.body or "").get("message")
    except (ValueError, AttributeError):
        message = None
    return str(message or exc.reason or exc)
