"""What an experiment's config may ask of its trial runner, judged against the admin's policy.

The platform, not the trial's config, decides what a trial may touch (``airflow.cfg [det]``, read
by :mod:`det_airflow.settings`). :func:`check` answers every field of a config that asks for more,
as ``(field path, message)`` pairs; the master refuses such an experiment at submission, the DAG
factory refuses such a YAML, and the runners check again on the worker before they start anything.

Pure: no Airflow, no Kubernetes or Docker client; it reads the config as a plain mapping (the
normalized config, as the master stores it).

Example::

    problems = check(config, settings.load())
    if problems:
        raise PolicyError(problems)
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import PurePosixPath
from typing import Any

from det_airflow.errors import ConfigError
from det_airflow.settings import RunnerPolicy, Settings

Problem = tuple[str, str]

# Runners that start containers: they mount host folders, add capabilities, pass devices.
CONTAINER_RUNNERS = ("docker", "kubernetes")
_POD_SPEC = "environment.pod_spec"
_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
# The allowed_pod_fields entry that lets a pod spec name the namespace's Secrets.
_SECRETS = "secrets"
# hostPID → host_PID, runAsNonRoot → run_As_Non_Root: then lower-cased, the client models' names.
_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z])(?=[A-Z])")


class PolicyError(ConfigError):
    """A config asks its runner for something the cluster's runner policy does not allow."""


def pool_of(config: Mapping[str, Any]) -> str:
    """The Airflow pool whose policy applies: ``resources.resource_pool``, else ``airflow.pool``."""
    resources = _mapping(config.get("resources"))
    section = _mapping(config.get("airflow"))
    return str(resources.get("resource_pool") or section.get("pool") or "default_pool")


def runner_of(config: Mapping[str, Any]) -> str:
    section = _mapping(config.get("airflow"))
    return str(section.get("trial_runner") or section.get("executor") or "local")


def check(
    config: Mapping[str, Any], settings: Settings, *, resolve: bool = False, runner: str | None = None
) -> list[Problem]:
    """Every field of ``config`` its runner may not do under the policy of the config's pool.

    ``resolve`` follows symbolic links in host paths (on the host whose paths they are: a Docker
    trial's worker); without it paths are only normalised, as the master sees them. ``runner``
    (a runner checking the trial it is about to start) overrides ``airflow.trial_runner``.
    """
    pool = pool_of(config)
    policy = settings.policy_for(pool)
    judge = _Judge(settings, policy, pool, resolve)
    runner = runner or runner_of(config)
    judge.storage(_mapping(config.get("checkpoint_storage")))
    if runner in CONTAINER_RUNNERS:
        judge.bind_mounts(config.get("bind_mounts"))
        environment = _mapping(config.get("environment"))
        judge.capabilities(environment.get("add_capabilities"), "environment.add_capabilities")
        judge.devices(_mapping(config.get("resources")).get("devices"))
        judge.images(environment.get("image"))
    section = _mapping(config.get("airflow"))
    if runner == "docker":
        judge.conn_id(section.get("docker_conn_id"), "airflow.docker_conn_id")
    if runner == "kubernetes":
        judge.conn_id(section.get("kubernetes_conn_id"), "airflow.kubernetes_conn_id")
        judge.namespace(section.get("namespace"), "airflow.namespace")
        pod_spec = _mapping(config.get("environment")).get("pod_spec")
        if pod_spec:
            judge.pod_spec(pod_spec)
    return judge.problems


def enforce(
    config: Mapping[str, Any], settings: Settings, *, resolve: bool = False, runner: str | None = None
) -> None:
    """Raise :class:`PolicyError` naming every field :func:`check` refuses."""
    problems = check(config, settings, resolve=resolve, runner=runner)
    if problems:
        raise PolicyError(problems)


def image_allowed(image: str, policy: RunnerPolicy) -> bool:
    return any(fnmatch.fnmatchcase(image, pattern) for pattern in policy.allowed_images)


def capability_name(name: Any) -> str:
    """Docker and Kubernetes spell capabilities with or without ``CAP_``, in any case."""
    return str(name).strip().upper().removeprefix("CAP_")


def inside(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or lies under it, component by component (``/x/ckpt-evil`` is
    not inside ``/x/ckpt``)."""
    candidate = PurePosixPath(os.path.normpath(path))
    base = PurePosixPath(os.path.normpath(root))
    return candidate == base or base in candidate.parents


class _Judge:
    def __init__(self, settings: Settings, policy: RunnerPolicy, pool: str, resolve: bool) -> None:
        self.settings = settings
        self.policy = policy
        self.pool = pool
        self.resolve = resolve
        self.problems: list[Problem] = []

    def refuse(self, path: str, subject: str, setting: str | None = None, detail: str = "") -> None:
        """``path: SUBJECT is not allowed by the cluster's runner policy (DETAIL; where to allow it)``."""
        where = f"for pool {self.pool!r} in airflow.cfg [det] pool_policies"
        if setting is not None:
            where = f"in airflow.cfg [det] {setting}, or {where.replace('airflow.cfg ', '')}"
        lead = f"{subject} is not allowed" if subject else "not allowed"
        note = f"{detail}; " if detail else ""
        self.problems.append(
            (path, f"{lead} by the cluster's runner policy ({note}an admin may allow it {where})")
        )

    # --- host paths ---

    def _real(self, path: str) -> str:
        return os.path.realpath(path) if self.resolve else os.path.normpath(path)

    def host_path(self, path: Any, field: str) -> None:
        roots = [str(r) for r in self.settings.allowed_roots(self.policy)]
        text = str(path)
        if not os.path.isabs(text):
            self.problems.append((field, f"expected an absolute host path, got {text!r}"))
            return
        real = self._real(text)
        if not any(inside(real, self._real(root)) for root in roots):
            self.refuse(
                field,
                f"host path {text!r}",
                "allowed_host_paths",
                f"trials may use host folders under {', '.join(roots)}",
            )

    def storage(self, storage: Mapping[str, Any]) -> None:
        from det_airflow.object_storage import CONN_FIELDS, store_endpoint

        kind = storage.get("type")
        if kind in CONN_FIELDS:
            # Its credentials reach the trial: only a connection the platform gives out.
            field = CONN_FIELDS[str(kind)]
            self.conn_id(storage.get(field), f"checkpoint_storage.{field}")
            # The master requests this address and streams its answers to readers: only a store
            # the platform names, never an arbitrary host the API server can reach.
            named, endpoint = store_endpoint(storage)
            if endpoint and endpoint.rstrip("/") not in self.policy.allowed_storage_endpoints:
                self.refuse(
                    f"checkpoint_storage.{named}",
                    f"endpoint {endpoint!r}",
                    "allowed_storage_endpoints",
                )
        if storage.get("type") != "shared_fs" or not storage.get("host_path"):
            return
        sub = storage.get("storage_path")
        if sub:
            parts = PurePosixPath(str(sub)).parts
            if PurePosixPath(str(sub)).is_absolute() or ".." in parts:
                self.problems.append(
                    (
                        "checkpoint_storage.storage_path",
                        f"expected a relative path without '..' inside host_path, got {str(sub)!r}",
                    )
                )
                return
        self.host_path(storage_folder(storage), "checkpoint_storage.host_path")

    def bind_mounts(self, mounts: Any) -> None:
        for i, mount in enumerate(_list(mounts)):
            host = _mapping(mount).get("host_path")
            if host is not None:
                self.host_path(host, f"bind_mounts[{i}].host_path")

    # --- what a container gets ---

    def capabilities(self, names: Any, field: str) -> None:
        allowed = {capability_name(c) for c in self.policy.allowed_capabilities}
        for i, name in enumerate(_list(names)):
            if capability_name(name) not in allowed:
                self.refuse(f"{field}[{i}]", f"capability {str(name)!r}", "allowed_capabilities")

    def devices(self, devices: Any) -> None:
        allowed = {os.path.normpath(d) for d in self.policy.allowed_devices}
        for i, device in enumerate(_list(devices)):
            host = _mapping(device).get("host_path")
            if (
                host is not None
                and self._real(str(host)) not in allowed
                and os.path.normpath(str(host)) not in allowed
            ):
                self.refuse(f"resources.devices[{i}].host_path", f"device {str(host)!r}", "allowed_devices")

    def images(self, image: Any) -> None:
        named = image.items() if isinstance(image, Mapping) else [(None, image)]
        seen: set[str] = set()
        for flavor, name in named:
            if not name or str(name) in seen:
                continue
            seen.add(str(name))
            if not image_allowed(str(name), self.policy):
                field = "environment.image" + (f".{flavor}" if flavor else "")
                self.refuse(field, f"image {str(name)!r}", "allowed_images")

    def conn_id(self, conn_id: Any, field: str) -> None:
        if conn_id and str(conn_id) not in self.settings.allowed_conn_ids(self.policy):
            self.refuse(field, f"connection {str(conn_id)!r}", "allowed_conn_ids")

    def namespace(self, namespace: Any, field: str) -> None:
        if namespace and str(namespace) not in self.settings.allowed_namespaces(self.policy):
            self.refuse(field, f"namespace {str(namespace)!r}", "allowed_namespaces")

    # --- environment.pod_spec ---

    def guarded(self, name: str, path: str, subject: str = "") -> None:
        """Refuses field ``path`` of the pod spec unless ``allowed_pod_fields`` names ``name``."""
        if name in self.policy.allowed_pod_fields:
            return
        if name == "runAsUser0" and self.policy.allow_root:
            return
        self.refuse(
            f"{_POD_SPEC}.{path}",
            subject,
            "allowed_pod_fields",
            f"its entry in allowed_pod_fields is {name!r}",
        )

    def secret(self, reference: Any, name_key: str, path: str) -> None:
        """A pod spec that names a Secret reads whatever its namespace holds under that name: other
        trials' tokens, configs and storage credentials among them."""
        name = _get(_mapping(reference), name_key)
        self.guarded(_SECRETS, path, f"Secret {str(name)!r}" if name else "a Secret")

    def pod_spec(self, pod: Any) -> None:
        pod = _mapping(pod)
        metadata = _mapping(pod.get("metadata"))
        namespace = metadata.get("namespace")
        if namespace is not None:
            self.namespace(namespace, f"{_POD_SPEC}.metadata.namespace")
        spec = _mapping(pod.get("spec"))
        for key in ("hostNetwork", "hostPID", "hostIPC"):
            if _get(spec, key) is True:
                self.guarded(key, f"spec.{key}")
        if _get(spec, "nodeName"):
            self.guarded("nodeName", "spec.nodeName")
        account = None
        for key in ("serviceAccountName", "serviceAccount"):
            value = _get(spec, key)
            if value:
                if str(value) in self.policy.allowed_service_accounts:
                    account = str(value)
                else:
                    self.refuse(
                        f"{_POD_SPEC}.spec.{key}",
                        f"service account {str(value)!r}",
                        "allowed_service_accounts",
                    )
        if _get(spec, "automountServiceAccountToken") is True and account is None:
            self.refuse(
                f"{_POD_SPEC}.spec.automountServiceAccountToken",
                "a service account token without an allowed serviceAccountName",
                "allowed_service_accounts",
            )
        self.security_context(_mapping(_get(spec, "securityContext")), "spec.securityContext", pod_level=True)
        for i, volume in enumerate(_list(spec.get("volumes"))):
            self.volume(_mapping(volume), f"spec.volumes[{i}]", account)
        for key in _CONTAINER_LISTS:
            for i, container in enumerate(_list(_get(spec, key))):
                self.container(_mapping(container), f"spec.{key}[{i}]")

    def volume(self, volume: Mapping[str, Any], path: str, account: str | None) -> None:
        if _get(volume, "hostPath") is not None:
            self.guarded("hostPath", f"{path}.hostPath")
        if _get(volume, "secret") is not None:
            self.secret(_get(volume, "secret"), "secretName", f"{path}.secret")
        for j, source in enumerate(_list(_get(_mapping(_get(volume, "projected")), "sources"))):
            reference = _get(_mapping(source), "secret")
            if reference is not None:
                self.secret(reference, "name", f"{path}.projected.sources[{j}].secret")
            if _get(_mapping(source), "serviceAccountToken") is not None and account is None:
                # The token the pod would not get by automount, asked for as a volume instead.
                self.refuse(
                    f"{_POD_SPEC}.{path}.projected.sources[{j}].serviceAccountToken",
                    "a service account token without an allowed serviceAccountName",
                    "allowed_service_accounts",
                )

    def container(self, container: Mapping[str, Any], path: str) -> None:
        context = _mapping(_get(container, "securityContext"))
        self.security_context(context, f"{path}.securityContext", pod_level=False)
        for j, port in enumerate(_list(container.get("ports"))):
            if _get(_mapping(port), "hostPort"):
                self.guarded("hostPort", f"{path}.ports[{j}].hostPort")
        for j, variable in enumerate(_list(container.get("env"))):
            reference = _get(_mapping(_get(_mapping(variable), "valueFrom")), "secretKeyRef")
            if reference is not None:
                self.secret(reference, "name", f"{path}.env[{j}].valueFrom.secretKeyRef")
        for j, source in enumerate(_list(_get(container, "envFrom"))):
            reference = _get(_mapping(source), "secretRef")
            if reference is not None:
                self.secret(reference, "name", f"{path}.envFrom[{j}].secretRef")

    def security_context(self, context: Mapping[str, Any], path: str, *, pod_level: bool) -> None:
        for key in ("runAsUser", "runAsGroup", *(("fsGroup",) if pod_level else ())):
            if _get(context, key) == 0:
                self.guarded("runAsUser0", f"{path}.{key}")
        if _get(context, "runAsNonRoot") is False:
            self.guarded("runAsUser0", f"{path}.runAsNonRoot")
        if pod_level and 0 in _list(_get(context, "supplementalGroups")):
            self.guarded("runAsUser0", f"{path}.supplementalGroups")
        seccomp = _mapping(_get(context, "seccompProfile"))
        if str(_get(seccomp, "type") or "").lower() == "unconfined":
            self.guarded("seccompProfileUnconfined", f"{path}.seccompProfile.type")
        if pod_level:
            return
        if _get(context, "privileged") is True:
            self.guarded("privileged", f"{path}.privileged")
        if _get(context, "allowPrivilegeEscalation") is True:
            self.guarded("allowPrivilegeEscalation", f"{path}.allowPrivilegeEscalation")
        if _get(context, "procMount") not in (None, "Default"):
            self.guarded("procMount", f"{path}.procMount")
        added = _list(_mapping(_get(context, "capabilities")).get("add"))
        if added and "capabilities" not in self.policy.allowed_pod_fields:
            self.capabilities(added, f"{_POD_SPEC}.{path}.capabilities.add")


def storage_folder(storage: Mapping[str, Any]) -> str:
    """The host folder a ``shared_fs`` storage's checkpoints go to: ``host_path/storage_path``."""
    return os.path.normpath(os.path.join(str(storage["host_path"]), str(storage.get("storage_path") or "")))


def allowed_added_capabilities(names: Iterable[Any], policy: RunnerPolicy) -> list[str]:
    """The capabilities of ``names`` the policy lets a container add, in Docker's spelling."""
    allowed = {capability_name(c) for c in policy.allowed_capabilities}
    return list(dict.fromkeys(capability_name(n) for n in names if capability_name(n) in allowed))


def _get(mapping: Mapping[str, Any], key: str) -> Any:
    """A pod-spec field by its Kubernetes (camelCase) name, or the client models' snake_case one."""
    if key in mapping:
        return mapping[key]
    return mapping.get(_CAMEL_BOUNDARY.sub("_", key).lower())


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []
