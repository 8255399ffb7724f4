"""What an experiment's config may ask of its trial runner, judged against the admin's policy.

The platform, not the trial's config, decides what a trial may touch (``airflow.cfg [det]``, read
by :mod:`det_airflow.settings`). :func:`check` answers every field of a config that asks for more,
as ``(field path, message)`` pairs; the master refuses such an experiment at submission, the DAG
factory refuses such a YAML, and the runners check again on the worker before they start anything.

A Kubernetes ``environment.pod_spec`` is judged as an allow-list: the pod's own volume types
(``emptyDir``, ``downwardAPI``, ``projected``), ConfigMaps and Secrets the admin names, the runtime's
default profiles and fields that only shape the pod itself pass; other volume types, variable
sources and security or placement fields only where the policy names them; an unknown field never.

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
# The allowed_pod_fields entry that lets a pod spec name any of the namespace's Secrets.
_SECRETS = "secrets"
# hostPID → host_PID, runAsNonRoot → run_As_Non_Root: then lower-cased, the client models' names.
_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z])(?=[A-Z])")
# The trial's container of a pod spec: its image is the trial's (environment.image), not this one.
TRIAL_CONTAINER = "determined-container"

# What a pod spec may set is an allow-list: a field the policy does not know is refused.
# Pod spec fields that only shape the pod itself: where it may run among the nodes it may use (the
# taints that keep pods off other nodes still hold: tolerations are guarded), how it starts, stops
# and names itself, and fields the platform sets over the user's (restartPolicy, priorityClassName).
_FREE_POD_FIELDS = frozenset(
    {
        "activeDeadlineSeconds", "affinity", "dnsConfig", "dnsPolicy", "enableServiceLinks",
        "hostAliases", "hostUsers", "hostname", "hostnameOverride", "nodeSelector", "os", "overhead",
        "preemptionPolicy", "priority", "priorityClassName", "readinessGates", "resources",
        "restartPolicy", "schedulingGates", "setHostnameAsFQDN", "shareProcessNamespace", "subdomain",
        "terminationGracePeriodSeconds", "topologySpreadConstraints",
    }
)  # fmt: skip
# Pod spec fields judged by what they hold, and fields refused unless allowed_pod_fields names them.
_JUDGED_POD_FIELDS = frozenset(
    {
        *_CONTAINER_LISTS, "volumes", "securityContext", "serviceAccountName", "serviceAccount",
        "automountServiceAccountToken", "hostNetwork", "hostPID", "hostIPC", "nodeName",
        "imagePullSecrets",
    }
)  # fmt: skip
_NAMED_POD_FIELDS = frozenset({"runtimeClassName", "tolerations", "schedulerName", "resourceClaims"})
_POD_CONTEXT_FIELDS = (
    "runAsUser", "runAsGroup", "runAsNonRoot", "fsGroup", "fsGroupChangePolicy", "supplementalGroups",
    "supplementalGroupsPolicy", "seccompProfile", "appArmorProfile", "seLinuxOptions",
    "seLinuxChangePolicy", "sysctls", "windowsOptions",
)  # fmt: skip
_CONTAINER_CONTEXT_FIELDS = (
    "runAsUser", "runAsGroup", "runAsNonRoot", "privileged", "allowPrivilegeEscalation", "capabilities",
    "procMount", "readOnlyRootFilesystem", "seccompProfile", "appArmorProfile", "seLinuxOptions",
    "windowsOptions",
)  # fmt: skip
# Volume types every pod spec may use: the pod's own scratch space and fields. configMap, secret and
# projected are judged by what they name; any other type only where allowed_volume_types names it.
_FREE_VOLUME_TYPES = frozenset({"emptyDir", "downwardAPI"})
_KNOWN_VOLUME_TYPES = (
    "awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "configMap", "csi",
    "downwardAPI", "emptyDir", "ephemeral", "fc", "flexVolume", "flocker", "gcePersistentDisk",
    "gitRepo", "glusterfs", "hostPath", "image", "iscsi", "nfs", "persistentVolumeClaim",
    "photonPersistentDisk", "portworxVolume", "projected", "quobyte", "rbd", "scaleIO", "secret",
    "storageos", "vsphereVolume", "name",
)  # fmt: skip
# Where volume types the admin may allow name a Secret (csi's nodePublishSecretRef, azureFile's
# secretName, cephfs/iscsi/rbd/flexVolume/scaleIO/storageos's secretRef).
_SECRET_FIELDS = ("secretRef", "nodePublishSecretRef", "controllerPublishSecretRef", "secretName")
# Annotations older Kubernetes reads as security profiles.
_APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
_SECCOMP_ANNOTATIONS = (
    "seccomp.security.alpha.kubernetes.io/",
    "container.seccomp.security.alpha.kubernetes.io/",
)


def _canonical(key: Any) -> str:
    """A field's name as both spellings share it: ``hostPID`` and ``host_pid`` are ``hostpid``."""
    return str(key).replace("_", "").lower()


def _by_canonical(names: Iterable[str]) -> dict[str, str]:
    return {_canonical(name): name for name in names}


_POD_FIELDS = _by_canonical([*_FREE_POD_FIELDS, *_JUDGED_POD_FIELDS, *_NAMED_POD_FIELDS])
_POD_CONTEXT = _by_canonical(_POD_CONTEXT_FIELDS)
_CONTAINER_CONTEXT = _by_canonical(_CONTAINER_CONTEXT_FIELDS)
_VOLUME_TYPES = _by_canonical(_KNOWN_VOLUME_TYPES)
_PROJECTIONS = _by_canonical(
    ("configMap", "secret", "downwardAPI", "serviceAccountToken", "clusterTrustBundle")
)
_ENV_SOURCES = _by_canonical(
    ("secretKeyRef", "configMapKeyRef", "fieldRef", "resourceFieldRef", "fileKeyRef")
)
_ENV_FROM = _by_canonical(("secretRef", "configMapRef", "prefix"))


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


def check(config: Mapping[str, Any], settings: Settings, *, runner: str | None = None) -> list[Problem]:
    """Every field of ``config`` its runner may not do under the policy of the config's pool.

    Host paths are judged as written, normalised (``..`` folded): what lies at them on a host is the
    runner's to check where it mounts them (the Docker runner's ``_host_mounts``). ``runner`` (a
    runner checking the trial it is about to start) overrides ``airflow.trial_runner``.
    """
    pool = pool_of(config)
    policy = settings.policy_for(pool)
    judge = _Judge(settings, policy, pool)
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


def enforce(config: Mapping[str, Any], settings: Settings, *, runner: str | None = None) -> None:
    """Raise :class:`PolicyError` naming every field :func:`check` refuses."""
    problems = check(config, settings, runner=runner)
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
    def __init__(self, settings: Settings, policy: RunnerPolicy, pool: str) -> None:
        self.settings = settings
        self.policy = policy
        self.pool = pool
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

    def host_path(self, path: Any, field: str) -> None:
        roots = [str(r) for r in self.settings.allowed_roots(self.policy)]
        text = str(path)
        if not os.path.isabs(text):
            self.problems.append((field, f"expected an absolute host path, got {text!r}"))
            return
        if not any(inside(text, root) for root in roots):
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
            if host is not None and os.path.normpath(str(host)) not in allowed:
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

    # --- environment.pod_spec: an allow-list ---

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

    def unknown(self, path: str, what: str) -> None:
        """A field the runner policy does not know: refused, as it cannot say what it would do."""
        self.problems.append(
            (
                f"{_POD_SPEC}.{path}",
                f"{what} is not one the cluster's runner policy knows, so it is not allowed",
            )
        )

    def secret(self, reference: Any, name_key: str, path: str) -> None:
        """A pod spec that names a Secret reads whatever its namespace holds under that name: other
        trials' tokens, configs and storage credentials among them. Only those the admin names."""
        name = _get(_mapping(reference), name_key)
        if _SECRETS in self.policy.allowed_pod_fields or _named(name, self.policy.allowed_secrets):
            return
        self.refuse(
            f"{_POD_SPEC}.{path}",
            f"Secret {str(name)!r}" if name else "a Secret",
            "allowed_secrets",
            "a pod spec may name the Secrets of allowed_secrets, or any with 'secrets' in allowed_pod_fields",
        )

    def config_map(self, reference: Any, path: str) -> None:
        """A ConfigMap of the namespace may be another team's settings: only those the admin names."""
        name = _get(_mapping(reference), "name")
        if _named(name, self.policy.allowed_config_maps):
            return
        self.refuse(
            f"{_POD_SPEC}.{path}",
            f"ConfigMap {str(name)!r}" if name else "a ConfigMap",
            "allowed_config_maps",
        )

    def pod_spec(self, pod: Any) -> None:
        pod = _mapping(pod)
        metadata = _mapping(pod.get("metadata"))
        namespace = metadata.get("namespace")
        if namespace is not None:
            self.namespace(namespace, f"{_POD_SPEC}.metadata.namespace")
        for key, value in _mapping(metadata.get("annotations")).items():
            self.annotation(str(key), value, f"metadata.annotations[{str(key)!r}]")
        spec = _mapping(pod.get("spec"))
        account = self.allowed_account(spec)
        for key, value in spec.items():
            name = _POD_FIELDS.get(_canonical(key))
            path = f"spec.{name or key}"
            if name is None:
                self.unknown(path, f"pod spec field {key!r}")
            elif name in _FREE_POD_FIELDS:
                continue
            elif name in ("hostNetwork", "hostPID", "hostIPC"):
                if value is True:
                    self.guarded(name, path)
            elif name == "nodeName":
                if value:
                    self.guarded(name, path)
            elif name == "securityContext":
                self.security_context(_mapping(value), path, pod_level=True)
            elif name == "volumes":
                for i, volume in enumerate(_list(value)):
                    self.volume(_mapping(volume), f"{path}[{i}]", account)
            elif name in _CONTAINER_LISTS:
                for i, container in enumerate(_list(value)):
                    self.container(_mapping(container), f"{path}[{i}]")
            elif name in ("serviceAccountName", "serviceAccount", "automountServiceAccountToken"):
                self.account_field(name, value, path, account)
            elif name == "imagePullSecrets":
                for i, reference in enumerate(_list(value)):
                    self.secret(reference, "name", f"{path}[{i}]")
            elif name in _NAMED_POD_FIELDS and value not in (None, [], {}, ""):
                self.guarded(name, path)

    def annotation(self, key: str, value: Any, path: str) -> None:
        """The annotations older Kubernetes reads as AppArmor and seccomp profiles."""
        profile = str(value or "")
        if key.startswith(_APPARMOR_ANNOTATION) and profile != "runtime/default":
            self.guarded("appArmorProfile", path)
        if key.startswith(_SECCOMP_ANNOTATIONS) and profile not in ("runtime/default", "docker/default"):
            local = profile.startswith("localhost/")
            self.guarded("seccompProfileLocalhost" if local else "seccompProfileUnconfined", path)

    def allowed_account(self, spec: Mapping[str, Any]) -> str | None:
        """The pod's service account when the policy allows the one it names."""
        for key in ("serviceAccountName", "serviceAccount"):
            value = _get(spec, key)
            if value and str(value) in self.policy.allowed_service_accounts:
                return str(value)
        return None

    def account_field(self, name: str, value: Any, path: str, account: str | None) -> None:
        """``serviceAccountName``/``serviceAccount`` only as the policy allows; a token only with one."""
        if name == "automountServiceAccountToken":
            if value is True and account is None:
                self.refuse(
                    f"{_POD_SPEC}.{path}",
                    "a service account token without an allowed serviceAccountName",
                    "allowed_service_accounts",
                )
        elif value and str(value) not in self.policy.allowed_service_accounts:
            self.refuse(f"{_POD_SPEC}.{path}", f"service account {str(value)!r}", "allowed_service_accounts")

    def volume(self, volume: Mapping[str, Any], path: str, account: str | None) -> None:
        for key, source in volume.items():
            kind = _VOLUME_TYPES.get(_canonical(key), str(key))
            where = f"{path}.{kind}"
            if kind == "name" or kind in _FREE_VOLUME_TYPES:
                continue
            if kind == "configMap":
                self.config_map(source, where)
            elif kind == "secret":
                self.secret(source, "secretName", where)
            elif kind == "projected":
                self.projected(_mapping(source), where, account)
            elif kind == "hostPath" and "hostPath" in self.policy.allowed_pod_fields:
                continue
            elif kind not in self.policy.allowed_volume_types:
                self.refuse(f"{_POD_SPEC}.{where}", f"volume type {kind}", "allowed_volume_types")
            else:
                # A type the admin allows may still name a Secret (csi, azureFile, cephfs, iscsi, ...).
                for field, reference in _secret_references(_mapping(source)):
                    self.secret(reference, "name", f"{where}.{field}")

    def projected(self, projected: Mapping[str, Any], path: str, account: str | None) -> None:
        for j, source in enumerate(_list(_get(projected, "sources"))):
            for key, value in _mapping(source).items():
                kind = _PROJECTIONS.get(_canonical(key))
                where = f"{path}.sources[{j}].{kind or key}"
                if kind in ("downwardAPI", "clusterTrustBundle"):
                    continue  # the pod's own fields; the cluster's public trust anchors
                if kind == "configMap":
                    self.config_map(value, where)
                elif kind == "secret":
                    self.secret(value, "name", where)
                elif kind == "serviceAccountToken":
                    if account is None:
                        # The token the pod would not get by automount, asked for as a volume instead.
                        self.refuse(
                            f"{_POD_SPEC}.{where}",
                            "a service account token without an allowed serviceAccountName",
                            "allowed_service_accounts",
                        )
                else:
                    self.unknown(where, f"projected volume source {key!r}")

    def container(self, container: Mapping[str, Any], path: str) -> None:
        image = container.get("image")
        if (
            image
            and str(container.get("name")) != TRIAL_CONTAINER
            and not image_allowed(str(image), self.policy)
        ):
            self.refuse(f"{_POD_SPEC}.{path}.image", f"image {str(image)!r}", "allowed_images")
        context = _mapping(_get(container, "securityContext"))
        self.security_context(context, f"{path}.securityContext", pod_level=False)
        for j, port in enumerate(_list(container.get("ports"))):
            if _get(_mapping(port), "hostPort"):
                self.guarded("hostPort", f"{path}.ports[{j}].hostPort")
        for j, variable in enumerate(_list(container.get("env"))):
            source = _mapping(_get(_mapping(variable), "valueFrom"))
            for key, reference in source.items():
                kind = _ENV_SOURCES.get(_canonical(key))
                where = f"{path}.env[{j}].valueFrom.{kind or key}"
                if kind in ("fieldRef", "resourceFieldRef", "fileKeyRef"):
                    continue  # the pod's own fields, resources and volumes
                if kind == "secretKeyRef":
                    self.secret(reference, "name", where)
                elif kind == "configMapKeyRef":
                    self.config_map(reference, where)
                else:
                    self.unknown(where, f"variable source {key!r}")
        for j, source in enumerate(_list(_get(container, "envFrom"))):
            for key, reference in _mapping(source).items():
                kind = _ENV_FROM.get(_canonical(key))
                where = f"{path}.envFrom[{j}].{kind or key}"
                if kind == "prefix":
                    continue
                if kind == "secretRef":
                    self.secret(reference, "name", where)
                elif kind == "configMapRef":
                    self.config_map(reference, where)
                else:
                    self.unknown(where, f"envFrom source {key!r}")

    def security_context(self, context: Mapping[str, Any], path: str, *, pod_level: bool) -> None:
        known = _POD_CONTEXT if pod_level else _CONTAINER_CONTEXT
        for key, value in context.items():
            name = known.get(_canonical(key))
            where = f"{path}.{name or key}"
            if name is None:
                self.unknown(where, f"security context field {key!r}")
            elif name in ("runAsUser", "runAsGroup", "fsGroup"):
                # Any other uid is replaced by the trial's own (kubernetes_pod.harden).
                if value == 0:
                    self.guarded("runAsUser0", where)
            elif name == "runAsNonRoot":
                if value is False:
                    self.guarded("runAsUser0", where)
            elif name == "supplementalGroups":
                if _list(value):  # another group's files, 0 (root's) among them
                    self.guarded("runAsUser0" if 0 in _list(value) else name, where)
            elif name in ("seccompProfile", "appArmorProfile"):
                self.profile(name, _mapping(value), where)
            elif name in ("seLinuxOptions", "sysctls", "windowsOptions", "procMount"):
                if value not in (None, "Default", [], {}):
                    self.guarded(name, where)
            elif name in ("privileged", "allowPrivilegeEscalation"):
                if value is True:
                    self.guarded(name, where)
            elif name == "capabilities":
                added = _list(_mapping(value).get("add"))
                if added and "capabilities" not in self.policy.allowed_pod_fields:
                    self.capabilities(added, f"{_POD_SPEC}.{where}.add")

    def profile(self, name: str, profile: Mapping[str, Any], path: str) -> None:
        """Only the runtime's default seccomp or AppArmor profile, unless the policy allows more."""
        kind = str(_get(profile, "type") or "RuntimeDefault")
        if kind == "RuntimeDefault":
            return
        if name == "appArmorProfile":
            self.guarded(name, f"{path}.type")
        elif kind == "Localhost":
            self.guarded("seccompProfileLocalhost", f"{path}.type")
        else:
            self.guarded("seccompProfileUnconfined", f"{path}.type")


def storage_folder(storage: Mapping[str, Any]) -> str:
    """The host folder a ``shared_fs`` storage's checkpoints go to: ``host_path/storage_path``."""
    return os.path.normpath(os.path.join(str(storage["host_path"]), str(storage.get("storage_path") or "")))


def allowed_added_capabilities(names: Iterable[Any], policy: RunnerPolicy) -> list[str]:
    """The capabilities of ``names`` the policy lets a container add, in Docker's spelling."""
    allowed = {capability_name(c) for c in policy.allowed_capabilities}
    return list(dict.fromkeys(capability_name(n) for n in names if capability_name(n) in allowed))


def _named(name: Any, patterns: Iterable[str]) -> bool:
    """Whether ``name`` (a ConfigMap's or Secret's) matches one of the admin's fnmatch patterns."""
    return bool(name) and any(fnmatch.fnmatchcase(str(name), pattern) for pattern in patterns)


def _secret_references(source: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """``(field, {"name": ...})`` for each Secret a volume source of another type names."""
    found = []
    for field in _SECRET_FIELDS:
        value = _get(source, field)
        if value:
            found.append((field, {"name": value} if isinstance(value, str) else value))
    return found


def _get(mapping: Mapping[str, Any], key: str) -> Any:
    """A pod-spec field by its Kubernetes (camelCase) name, or the client models' snake_case one."""
    if key in mapping:
        return mapping[key]
    return mapping.get(_CAMEL_BOUNDARY.sub("_", key).lower())


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []
