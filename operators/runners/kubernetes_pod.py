"""The pod a trial would run in on Kubernetes, built with the ``kubernetes`` client's models and
merged with the user's ``environment.pod_spec`` by the cncf.kubernetes provider's ``PodGenerator``.

As in Determined: the trial's container is named ``determined-container``; fields the user set on
their container of that name (or their first container) are kept unless the trial sets them, other
containers and pod-level fields (node selectors, tolerations, service account, volumes) are kept;
``/dev/shm`` is a memory ``emptyDir`` of ``resources.shm_size``; GPUs are ``nvidia.com/gpu`` limits
of the slots per pod; the priority class is named after the job's priority.

A pod shares no folder with the worker: its init container fetches the experiment's context from
the master with the trial's own token and writes the trial's config, in the pod's work folder.

What only the trial may read (:data:`SECRET_VARIABLES`) is no plain ``env`` value, which anyone who
may read pods could read: :func:`trial_secret` holds it in a Secret of the run's own, whose name
(:func:`secret_name`) is the pod's or Job's with a random suffix, and the containers read it through
``valueFrom.secretKeyRef``. Both get the trial's token for the master; the init container gets the
config (whose ``checkpoint_storage`` may hold keys), the trial's container the storage credentials.
Another trial of the namespace can neither guess that name nor, unless the runner policy allows
``secrets``, name any Secret in its pod_spec.

The platform's fields win over the user's (:func:`harden`, after the merge): every container runs
as the trial owner's uid (never root unless the runner policy allows it), without privilege
escalation, with every capability dropped but those the policy allows, on a read-only root file
system (an ``emptyDir`` on ``/tmp``) and the runtime's default seccomp profile; no service account
token is mounted unless the pod names an account the policy allows. What the user's pod_spec may
set is an allow-list (volume types, ConfigMaps and Secrets, variable sources, security fields):
anything else is refused before this (:mod:`det_airflow.runner_policy`), never silently kept.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping, Sequence
from secrets import token_hex
from typing import Any

from airflow.providers.cncf.kubernetes.pod_generator import PodGenerator
from kubernetes.client import models as k8s

from det_airflow import runner_policy, trial_env
from det_airflow.api._http import API_PREFIX
from det_airflow.config import priority_weight
from det_airflow.object_storage import CREDENTIAL_VARIABLES
from det_airflow.operators.runners._container import ContainerTrial
from det_airflow.settings import RunnerPolicy

TRIAL_CONTAINER = "determined-container"
CONTEXT_CONTAINER = "det-fetch-context"
# The config as the init container writes it to DET_EXPERIMENT_CONFIG_FILE.
CONFIG_VARIABLE = "DET_AIRFLOW_TRIAL_CONFIG"
# Standard library only: any image with Python 3.11 runs it. tarfile's "data" filter refuses
# absolute paths, "..", links that leave the folder and device files.
# Run as ``python3 -c FETCH_CONTEXT WORKDIR CONTEXT_PATH CONFIG_VARIABLE``.
FETCH_CONTEXT = """\
import io, os, sys, tarfile, urllib.request
work, path, config_variable = sys.argv[1:4]
env = os.environ
request = urllib.request.Request(
    env["DET_MASTER"].rstrip("/") + path, headers={"Authorization": "Bearer " + env["DET_SESSION_TOKEN"]}
)
try:
    with urllib.request.urlopen(request, timeout=120) as answer:
        data = answer.read()
except OSError as exc:
    sys.exit(f"cannot fetch the experiment's context from the master at {env['DET_MASTER']}: {exc}")
if data:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        archive.extractall(work, filter="data")
for folder in (env["HOME"], env["TMPDIR"]):
    os.makedirs(folder, mode=0o700, exist_ok=True)
with open(env["DET_EXPERIMENT_CONFIG_FILE"], "w") as config:
    config.write(env[config_variable])
"""
GPU_RESOURCE = {"cuda": "nvidia.com/gpu", "rocm": "amd.com/gpu"}
# Who a trial runs as when the master assigned its owner no uid.
NOBODY = 65534
TMP_VOLUME = "det-tmp"
PRIORITY_CLASS_PREFIX = "det-priority-"
# What a trial's containers read from its Secret: its token for the master, its config and its storage
# credentials (wherever they come from: the config's environment_variables too).
SECRET_VARIABLES = frozenset({trial_env.SESSION_TOKEN, CONFIG_VARIABLE, *CREDENTIAL_VARIABLES})


def priority_class_name(priority: int) -> str:
    """The PriorityClass of a job of Determined ``priority`` (1-99, lower runs first); its value is
    ``100 - priority`` so that Kubernetes, where higher wins, orders pods the same way."""
    return f"{PRIORITY_CLASS_PREFIX}{int(priority)}"


def priority_class(priority: int) -> k8s.V1PriorityClass:
    """The PriorityClass object for ``priority``, preempting nothing (as Determined's)."""
    return k8s.V1PriorityClass(
        metadata=k8s.V1ObjectMeta(name=priority_class_name(priority)),
        value=priority_weight(priority),
        preemption_policy="Never",
        description=f"det-airflow trials of priority {priority}",
    )


def secret_name(trial: ContainerTrial) -> str:
    """A new name for a run's Secret: its pod's (or Job's) and 8 random hex digits, which no one who
    knows the trial's ids can name."""
    return f"{trial.name}-{token_hex(4)}"


def trial_secret(trial: ContainerTrial, *, namespace: str, name: str) -> k8s.V1Secret:
    """The Secret ``name`` holding the trial's :data:`SECRET_VARIABLES` (those of its ``env``, and
    its config as :data:`CONFIG_VARIABLE`), labelled as its pod (or Job). Immutable: a run's token,
    config and credentials never change."""
    data = {k: v for k, v in trial.env.items() if k in SECRET_VARIABLES}
    data[CONFIG_VARIABLE] = json.dumps(dict(trial.config))
    return k8s.V1Secret(
        api_version="v1",
        kind="Secret",
        metadata=k8s.V1ObjectMeta(name=name, namespace=namespace, labels=dict(trial.labels)),
        type="Opaque",
        string_data=dict(sorted(data.items())),
        immutable=True,
    )


def trial_pod(
    trial: ContainerTrial,
    *,
    namespace: str,
    secret: str,
    policy: RunnerPolicy | None = None,
    roots: Sequence[str] = (),
) -> k8s.V1Pod:
    """The pod of ``trial`` (one container holding all its slots), with ``environment.pod_spec``
    merged below the platform's fields, under ``policy`` (the runner policy of the trial's pool;
    the cluster's default when not given). Its :data:`SECRET_VARIABLES` come from Secret ``secret``
    (:func:`trial_secret`), which must exist before the pod starts. ``roots``: the host folders
    the policy allows (``Settings.allowed_roots``), through which the checkpoint storage is mounted."""
    policy = policy or RunnerPolicy()
    config = trial.config
    resources = config.get("resources") or {}
    volumes, mounts = _volumes(trial, roots)
    limits: dict[str, str] = {}
    if trial.device in GPU_RESOURCE and trial.slot_ids:
        limits[GPU_RESOURCE[trial.device]] = str(len(trial.slot_ids))
    environment = config.get("environment") or {}
    context_path = f"{API_PREFIX}/runtime/trials/{trial.spec.trial_id}/context"
    pull_policy = "Always" if environment.get("force_pull_image") else "IfNotPresent"
    env = [_env_var(k, v, secret=secret) for k, v in sorted(trial.env.items())]
    fetch = k8s.V1Container(
        name=CONTEXT_CONTAINER,
        image=trial.image(),
        image_pull_policy=pull_policy,
        command=["python3", "-c", FETCH_CONTEXT, str(trial.workdir), context_path, CONFIG_VARIABLE],
        env=[
            *(e for e in env if e.name not in CREDENTIAL_VARIABLES),
            _from_secret(CONFIG_VARIABLE, secret=secret),
        ],
        volume_mounts=mounts[:1],
    )
    container = k8s.V1Container(
        name=TRIAL_CONTAINER,
        image=trial.image(),
        image_pull_policy=pull_policy,
        command=trial.command(),
        working_dir=str(trial.workdir),
        env=[*env, _POD_IP],
        volume_mounts=mounts,
        resources=k8s.V1ResourceRequirements(limits=limits or None, requests=dict(limits) or None),
    )
    ours = k8s.V1Pod(
        api_version="v1",
        kind="Pod",
        metadata=k8s.V1ObjectMeta(name=trial.name, namespace=namespace, labels=dict(trial.labels)),
        spec=k8s.V1PodSpec(
            init_containers=[fetch],
            containers=[container],
            volumes=volumes,
            restart_policy="Never",
            priority_class_name=priority_class_name(int(resources.get("priority") or 42)),
        ),
    )
    user = environment.get("pod_spec")
    pod = PodGenerator.reconcile_pods(_user_pod(user), ours) if user else ours
    added = runner_policy.allowed_added_capabilities(environment.get("add_capabilities") or [], policy)
    harden(pod.spec, trial, policy, added)
    return pod


# The pod's own address, for a task's server to listen at (det_airflow.tasks).
_POD_IP = k8s.V1EnvVar(
    name=trial_env.POD_IP,
    value_from=k8s.V1EnvVarSource(field_ref=k8s.V1ObjectFieldSelector(field_path="status.podIP")),
)


def _env_var(name: str, value: str, *, secret: str) -> k8s.V1EnvVar:
    """The variable as a container gets it: one of :data:`SECRET_VARIABLES` from Secret ``secret``,
    anything else as its value."""
    if name in SECRET_VARIABLES:
        return _from_secret(name, secret=secret)
    if name == trial_env.EXPERIMENT_CONFIG:
        # The config's JSON for code that reads it from the environment: the Secret's copy of it.
        return k8s.V1EnvVar(
            name=name,
            value_from=k8s.V1EnvVarSource(
                secret_key_ref=k8s.V1SecretKeySelector(name=secret, key=CONFIG_VARIABLE)
            ),
        )
    return k8s.V1EnvVar(name=name, value=value)


def _from_secret(name: str, *, secret: str) -> k8s.V1EnvVar:
    """Variable ``name`` read from the key of that name of Secret ``secret``."""
    return k8s.V1EnvVar(
        name=name,
        value_from=k8s.V1EnvVarSource(secret_key_ref=k8s.V1SecretKeySelector(name=secret, key=name)),
    )


def harden(spec: k8s.V1PodSpec, trial: ContainerTrial, policy: RunnerPolicy, added: list[str]) -> None:
    """Sets the platform's security fields on a pod spec (the user's merged in), over the user's."""
    uid = trial.spec.uid if trial.spec.uid is not None else NOBODY
    gid = trial.spec.gid if trial.spec.gid is not None else uid
    pod_context = spec.security_context or k8s.V1PodSecurityContext()
    if not policy.allow_root:
        pod_context.run_as_non_root = True
        pod_context.run_as_user = uid
        pod_context.run_as_group = gid
        pod_context.fs_group = gid
    if pod_context.seccomp_profile is None:
        pod_context.seccomp_profile = k8s.V1SeccompProfile(type="RuntimeDefault")
    spec.security_context = pod_context
    account = spec.service_account_name or spec.service_account
    if not account or account not in policy.allowed_service_accounts:
        spec.automount_service_account_token = False
    if policy.read_only_root:
        volumes = list(spec.volumes or [])
        if not any(v.name == TMP_VOLUME for v in volumes):
            volumes.append(k8s.V1Volume(name=TMP_VOLUME, empty_dir=k8s.V1EmptyDirVolumeSource()))
        spec.volumes = volumes
    for container in [*(spec.init_containers or []), *(spec.containers or [])]:
        context = container.security_context or k8s.V1SecurityContext()
        if not policy.allow_root:
            context.run_as_non_root = True
            context.run_as_user = uid
            context.run_as_group = gid
        if not context.privileged:  # a privileged container, where allowed, escalates by definition
            context.allow_privilege_escalation = bool(context.allow_privilege_escalation)
        theirs = list((context.capabilities.add if context.capabilities else None) or [])
        own = added if container.name == TRIAL_CONTAINER else []
        context.capabilities = k8s.V1Capabilities(
            add=list(dict.fromkeys([*own, *theirs])) or None, drop=["ALL"]
        )
        if policy.read_only_root:
            context.read_only_root_filesystem = True
            mounts = list(container.volume_mounts or [])
            if not any(m.mount_path == "/tmp" for m in mounts):
                mounts.append(k8s.V1VolumeMount(name=TMP_VOLUME, mount_path="/tmp"))
            container.volume_mounts = mounts
        container.security_context = context


def _volumes(
    trial: ContainerTrial, roots: Sequence[str]
) -> tuple[list[k8s.V1Volume], list[k8s.V1VolumeMount]]:
    config = trial.config
    volumes = [k8s.V1Volume(name="det-workdir", empty_dir=k8s.V1EmptyDirVolumeSource())]
    mounts = [k8s.V1VolumeMount(name="det-workdir", mount_path=str(trial.workdir))]
    shm_size = (config.get("resources") or {}).get("shm_size")
    if shm_size:
        volumes.append(
            k8s.V1Volume(
                name="det-shm",
                empty_dir=k8s.V1EmptyDirVolumeSource(medium="Memory", size_limit=str(shm_size)),
            )
        )
        mounts.append(k8s.V1VolumeMount(name="det-shm", mount_path="/dev/shm"))
    storage = config.get("checkpoint_storage") or {}
    if storage.get("type") == "shared_fs" and storage.get("host_path"):
        path = _through_root(runner_policy.storage_folder(storage), roots)
        volumes.append(k8s.V1Volume(name="det-checkpoints", host_path=k8s.V1HostPathVolumeSource(path=path)))
        mounts.append(k8s.V1VolumeMount(name="det-checkpoints", mount_path=path))
    for i, mount in enumerate(config.get("bind_mounts") or []):
        name = f"det-bind-{i}"
        volumes.append(
            k8s.V1Volume(name=name, host_path=k8s.V1HostPathVolumeSource(path=str(mount["host_path"])))
        )
        mounts.append(
            k8s.V1VolumeMount(
                name=name,
                mount_path=str(mount["container_path"]),
                read_only=bool(mount.get("read_only")),
                mount_propagation=_PROPAGATION.get(str(mount.get("propagation") or "rprivate")),
            )
        )
    return volumes, mounts


def _through_root(folder: str, roots: Sequence[str]) -> str:
    """The allowed folder ``folder`` lies in (the deepest), else ``folder``. The kubelet follows
    links in a hostPath on the node when the pod starts, where the worker cannot look first: a
    storage folder a trial made and may replace (its ``storage_path`` under the checkpoint root) is
    reached through the admin's folder above it, and a link put in its place resolves in the pod."""
    holding = [os.path.normpath(r) for r in roots if runner_policy.inside(folder, r)]
    return max(holding, key=len) if holding else folder


# Docker's bind propagation → Kubernetes' mountPropagation.
_PROPAGATION = {"rprivate": "None", "private": "None", "rslave": "HostToContainer", "slave": "HostToContainer",
                "rshared": "Bidirectional", "shared": "Bidirectional"}  # fmt: skip


def _user_pod(pod_spec: Mapping[str, Any]) -> k8s.V1Pod:
    """The user's pod_spec as a pod whose first container is the one the trial's merges into (their
    ``determined-container``, else a new one: their other containers are sidecars)."""
    user = copy.deepcopy(dict(pod_spec))
    spec = user.get("spec") or {}
    containers = list(spec.get("containers") or [])
    named = [c for c in containers if c.get("name") == TRIAL_CONTAINER]
    if named:
        containers.remove(named[0])
    containers.insert(0, named[0] if named else {"name": TRIAL_CONTAINER})
    spec["containers"] = containers
    user["spec"] = spec
    return PodGenerator.deserialize_model_dict(user)


INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"


def gang_service(trial: ContainerTrial, *, namespace: str) -> k8s.V1Service:
    """The headless Service that names the pods of a multi-pod trial (``<job>-<i>.<service>``), for
    their rendezvous."""
    return k8s.V1Service(
        api_version="v1",
        kind="Service",
        metadata=k8s.V1ObjectMeta(name=trial.name, namespace=namespace, labels=dict(trial.labels)),
        spec=k8s.V1ServiceSpec(
            cluster_ip="None", selector={"job-name": trial.name}, publish_not_ready_addresses=True
        ),
    )


def gang_job(
    trial: ContainerTrial,
    *,
    namespace: str,
    pods: int,
    secret: str,
    policy: RunnerPolicy | None = None,
    roots: Sequence[str] = (),
) -> k8s.V1Job:
    """A trial spanning ``pods`` pods as one indexed Job: each pod holds ``trial.slot_ids`` (the
    slots of one pod), reads Secret ``secret`` as :func:`trial_pod`'s, knows its container rank from
    its completion index, and reaches the others through :func:`gang_service`. No pod is retried on
    its own: the trial's retries restart the gang."""
    pod = trial_pod(trial, namespace=namespace, secret=secret, policy=policy, roots=roots)
    addrs = [f"{trial.name}-{i}.{trial.name}" for i in range(pods)]
    container = pod.spec.containers[0]
    env = [e for e in container.env or [] if e.name not in _GANG_VARIABLES]
    env += [
        k8s.V1EnvVar(name="DET_CONTAINER_ADDRS", value=json.dumps(addrs)),
        k8s.V1EnvVar(name="DET_CHIEF_IP", value=addrs[0]),
        k8s.V1EnvVar(
            name="DET_CONTAINER_RANK",
            value_from=k8s.V1EnvVarSource(
                field_ref=k8s.V1ObjectFieldSelector(field_path=f"metadata.annotations['{INDEX_ANNOTATION}']")
            ),
        ),
    ]
    container.env = env
    pod.spec.subdomain = trial.name
    return k8s.V1Job(
        api_version="batch/v1",
        kind="Job",
        metadata=k8s.V1ObjectMeta(name=trial.name, namespace=namespace, labels=dict(trial.labels)),
        spec=k8s.V1JobSpec(
            completion_mode="Indexed",
            completions=pods,
            parallelism=pods,
            backoff_limit=0,
            template=k8s.V1PodTemplateSpec(
                metadata=k8s.V1ObjectMeta(labels=dict(trial.labels)), spec=pod.spec
            ),
        ),
    )


_GANG_VARIABLES = frozenset({"DET_CONTAINER_ADDRS", "DET_CHIEF_IP", "DET_CONTAINER_RANK"})
