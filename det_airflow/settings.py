"""det-airflow's settings from ``airflow.cfg [det]``: one typed object, one default per setting.

The admin decides here what a trial may touch; a trial's config only asks. ``load()`` reads the
section each time it is called (cheap: Airflow caches its configuration), so a test's or an admin's
change is seen without a restart of the reader.

Lists are comma-separated in airflow.cfg (``allowed_capabilities = SYS_PTRACE, IPC_LOCK``).
``pool_policies`` is JSON: per Airflow pool, the runner-policy settings that pool adds to the
cluster's (``{"gpu-a100": {"allowed_capabilities": ["IPC_LOCK"], "allowed_pod_fields": ["hostIPC"]}}``).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from det_airflow.config import AirflowSection
from det_airflow.errors import DetError

SECTION = "det"

# The kinds of slot a worker's trials hold (``slot_type``).
SLOT_TYPES = ("cpu", "cuda", "rocm")
# How the job queue shares a pool's slots (``scheduler``).
PRIORITY, FAIR_SHARE = "priority", "fair_share"

# Pod-spec and security-context fields a trial's ``environment.pod_spec`` may not set unless the
# admin allows them by name in ``allowed_pod_fields``. ``runAsUser0`` stands for ``runAsUser: 0``
# (and ``runAsNonRoot: false``); ``hostPath`` for a volume of that kind; ``secrets`` for any reference
# to one of the namespace's Secrets (``secret``/``projected`` volumes, ``secretKeyRef``, ``secretRef``).
GUARDED_POD_FIELDS = (
    "privileged",
    "allowPrivilegeEscalation",
    "hostNetwork",
    "hostPID",
    "hostIPC",
    "hostPath",
    "hostPort",
    "runAsUser0",
    "nodeName",
    "capabilities",
    "procMount",
    "seccompProfileUnconfined",
    "secrets",
    # Each of these names its own field: what it lets a pod do beyond its own uid and node share.
    "supplementalGroups",
    "seLinuxOptions",
    "appArmorProfile",
    "seccompProfileLocalhost",
    "sysctls",
    "windowsOptions",
    "runtimeClassName",
    "tolerations",
    "schedulerName",
    "resourceClaims",
)

# Determined's bound on retention_policy.log_retention_days, here as in an experiment's config.
LOG_RETENTION_DAYS_MAX = 32767

# How many finished experiments keep their DAG listed in Airflow by default ([det] finished_experiment_dags).
FINISHED_EXPERIMENT_DAGS = 100

# systemd's DynamicUser range: unused by distributions' static users and by login users.
DEFAULT_TRIAL_UID_RANGE = (61184, 65519)


class SettingsError(DetError):
    """A ``[det]`` setting in airflow.cfg has a value det-airflow cannot use."""


@dataclass(frozen=True)
class RunnerPolicy:
    """What the platform lets a trial of one pool ask its runner for.

    Everything is deny-by-default except images (any image; an image only decides what software
    the trial runs, and the container still runs unprivileged).
    """

    # Host folders a shared_fs ``host_path`` or a ``bind_mounts`` host path may lie under. The
    # checkpoint root and the trial work folder are always allowed.
    allowed_host_paths: tuple[str, ...] = ()
    allowed_capabilities: tuple[str, ...] = ()
    # Host device paths (``/dev/fuse``) that ``resources.devices`` may pass to a container.
    allowed_devices: tuple[str, ...] = ()
    # fnmatch patterns of image names (``registry.example.com/ml/*``).
    allowed_images: tuple[str, ...] = ("*",)
    # Kubernetes namespaces beyond ``[det] namespace``.
    allowed_namespaces: tuple[str, ...] = ()
    # Airflow connection ids (docker, kubernetes, s3 storage) beyond the ``[det]`` defaults.
    allowed_conn_ids: tuple[str, ...] = ()
    # S3-compatible endpoints an experiment's checkpoint_storage.endpoint_url may name: the master
    # sends requests there and streams answers back, so none by default (set it on the connection).
    allowed_storage_endpoints: tuple[str, ...] = ()
    # Kubernetes service accounts a pod may name (none: the namespace's default account).
    allowed_service_accounts: tuple[str, ...] = ()
    # Names from GUARDED_POD_FIELDS a pod spec may set.
    allowed_pod_fields: tuple[str, ...] = ()
    # Kubernetes volume types (``persistentVolumeClaim``, ``nfs``) a pod spec may use beyond
    # ``emptyDir``, ``downwardAPI``, ``configMap``/``secret`` (named below) and ``projected``.
    allowed_volume_types: tuple[str, ...] = ()
    # fnmatch patterns of the ConfigMaps and Secrets of the namespace a pod spec may name.
    allowed_config_maps: tuple[str, ...] = ()
    allowed_secrets: tuple[str, ...] = ()
    # Containers run as the trial's own non-root uid unless the admin allows root for the pool.
    allow_root: bool = False
    # Docker and pods get a read-only root filesystem (a tmpfs /tmp, the work folder writable).
    read_only_root: bool = True

    def extended(self, extra: Mapping[str, Any], where: str) -> RunnerPolicy:
        """This policy with a pool's additions (lists add up, flags replace)."""
        changes: dict[str, Any] = {}
        for key, value in extra.items():
            if key not in _POLICY_FIELDS:
                raise SettingsError(f"{where}: unknown runner-policy setting {key!r}")
            current = getattr(self, key)
            if isinstance(current, bool):
                if not isinstance(value, bool):
                    raise SettingsError(f"{where}.{key}: expected true or false, got {value!r}")
                changes[key] = value
            else:
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise SettingsError(f"{where}.{key}: expected a list of strings, got {value!r}")
                changes[key] = tuple(dict.fromkeys([*current, *value]))
        return dataclasses.replace(self, **changes)


_POLICY_FIELDS = {f.name for f in dataclasses.fields(RunnerPolicy)}


@dataclass(frozen=True)
class Settings:
    """Every ``[det]`` setting of airflow.cfg (docs/settings.md lists them)."""

    airflow_home: Path
    # checkpoint_storage_path: the storage of experiments that name none.
    checkpoint_root: Path
    trial_work_dir: Path
    # Also defaults of an experiment's ``airflow:`` section (airflow_defaults()).
    namespace: str = AirflowSection.namespace
    docker_conn_id: str | None = None
    kubernetes_conn_id: str | None = None
    # The Airflow connection of s3 checkpoint storage that names no ``aws_conn_id``; of gcs storage
    # that names no ``gcp_conn_id``; of azure storage that names no ``wasb_conn_id``.
    storage_conn_id: str = "aws_default"
    gcs_conn_id: str = "google_cloud_default"
    azure_conn_id: str = "wasb_default"
    # The address trials and tasks reach the master at; None: derived from airflow.cfg [api].
    master_url: str | None = None
    # The Docker daemon of docker trials; None: $DOCKER_HOST, else the local socket.
    docker_url: str | None = None
    # Where a worker's GPU slot locks live.
    slot_lock_dir: str = "/tmp/det-airflow-slots"
    # Pools whose trials may preempt lower-priority ones (``preemption = true``: every pool).
    preemption_pools: tuple[str, ...] = ()
    # Pools shared by fair share whatever ``scheduler`` says.
    fair_share_pools: tuple[str, ...] = ()
    policy: RunnerPolicy = field(default_factory=RunnerPolicy)
    pool_policies: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # Local and container trials run as one uid per experiment owner, taken from this range.
    trial_uid_range: tuple[int, int] = DEFAULT_TRIAL_UID_RANGE
    # An admin override: every local trial runs as this one user (no identity per owner).
    trial_user: str | None = None
    # Per user, at once: long polls held open, unmanaged experiments still running, creates in flight.
    max_long_polls_per_user: int = 64
    max_unmanaged_experiments_per_user: int = 50
    max_creates_per_user: int = 4
    # The settings read by the properties below, as written: they are checked when read, so that a
    # bad one fails only what uses it (the job queue, a worker's slots, a runner).
    checked_on_use: Mapping[str, str | None] = field(default_factory=dict, repr=False, compare=False)

    @property
    def scheduler(self) -> str:
        """How a pool's slots are shared: ``priority`` (the default) or ``fair_share``."""
        value = (self.checked_on_use.get("scheduler") or PRIORITY).strip().lower()
        if value not in (PRIORITY, FAIR_SHARE):
            raise SettingsError(
                f"airflow.cfg [{SECTION}] scheduler: expected {PRIORITY} or {FAIR_SHARE}, got {value!r}"
            )
        return value

    @property
    def preemption(self) -> bool:
        """Whether waiting trials of every pool may preempt lower-priority ones."""
        return _bool(self.checked_on_use.get, "preemption", False)

    @property
    def slots_per_node(self) -> int | None:
        """Slots of one host (GPUs of a worker, of a Kubernetes node); None: not set."""
        return _int(self.checked_on_use.get, "slots_per_node", 0) or None

    @property
    def slot_type(self) -> str:
        """The kind of slot this installation's trials hold: one of SLOT_TYPES, ``cpu`` by default."""
        device = (self.checked_on_use.get("slot_type") or "").strip().lower() or SLOT_TYPES[0]
        if device not in SLOT_TYPES:
            raise SettingsError(
                f"airflow.cfg [{SECTION}] slot_type: expected one of {', '.join(SLOT_TYPES)}, got {device!r}"
            )
        return device

    @property
    def kubernetes_delete_pods(self) -> bool:
        """Whether a Kubernetes trial's pods are deleted when it ends."""
        return _bool(self.checked_on_use.get, "kubernetes_delete_pods", True)

    @property
    def kubernetes_startup_timeout(self) -> float:
        """Seconds a Kubernetes trial's pods may take to start."""
        text = (self.checked_on_use.get("kubernetes_startup_timeout") or "").strip()
        if not text:
            return 600.0
        try:
            return float(text)
        except ValueError:
            raise SettingsError(
                f"airflow.cfg [{SECTION}] kubernetes_startup_timeout: expected a number of seconds, got {text!r}"
            ) from None

    @property
    def host_id(self) -> str:
        """This worker's host, as placement names it: ``[det] host_id``, else the machine's name."""
        value = (self.checked_on_use.get("host_id") or "").strip() or socket.gethostname()
        if not _HOST_ID.fullmatch(value):
            raise SettingsError(
                f"airflow.cfg [{SECTION}] host_id: {value!r} must be letters, digits, '.', '_' or '-' "
                "(at most 63, starting with a letter or digit)"
            )
        return value

    @property
    def host_address(self) -> str:
        """Where the other nodes of a multi-node trial reach this host: ``[det] host_address``, else
        the machine's name."""
        value = (self.checked_on_use.get("host_address") or "").strip() or socket.gethostname()
        if not _HOST_ADDRESS.fullmatch(value):
            raise SettingsError(
                f"airflow.cfg [{SECTION}] host_address: {value!r} must be a host name or an IP address "
                "(letters, digits, '.', ':', '_' or '-', at most 253)"
            )
        return value

    @property
    def host_slots(self) -> int | None:
        """Slots this host offers when it has no GPUs to count (``[det] host_slots``); None: not set."""
        return _int(self.checked_on_use.get, "host_slots", 0) or None

    @property
    def host_timeout(self) -> float:
        """Seconds after a host's last heartbeat when its slots stop counting (default 30)."""
        return float(_int(self.checked_on_use.get, "host_timeout", 30))

    @property
    def trial_firewall(self) -> bool:
        """Whether a worker that runs trials as their owners' uids keeps those uids off this host's
        own services (``[det] trial_firewall``, default true: docs/trial-isolation.md)."""
        return _bool(self.checked_on_use.get, "trial_firewall", True)

    @property
    def trial_allowed_local_ports(self) -> tuple[tuple[int, int], ...]:
        """Ports of this host's own addresses that trials may connect to beyond the master's and the
        ephemeral range (``[det] trial_allowed_local_ports``: ``8888, 9000-9010``)."""
        ports = []
        for item in _list(self.checked_on_use.get("trial_allowed_local_ports")):
            low, sep, high = item.partition("-")
            if not low.strip().isdigit() or (sep and not high.strip().isdigit()):
                raise SettingsError(
                    f"airflow.cfg [{SECTION}] trial_allowed_local_ports: {item!r} is not a port or a "
                    "range of ports such as 9000-9010"
                )
            first, last = int(low), int(high) if sep else int(low)
            if not 1 <= first <= last <= 65535:
                raise SettingsError(
                    f"airflow.cfg [{SECTION}] trial_allowed_local_ports: {item!r} is not within 1-65535"
                )
            ports.append((first, last))
        return tuple(ports)

    @property
    def log_retention_days(self) -> int:
        """Days an ended trial's logs are kept when its experiment's ``retention_policy`` sets none
        (``[det] log_retention_days``); -1, the default: forever."""
        text = (self.checked_on_use.get("log_retention_days") or "").strip()
        if not text:
            return -1
        if not re.fullmatch(r"-1|\d{1,5}", text) or int(text) > LOG_RETENTION_DAYS_MAX:
            raise SettingsError(
                f"airflow.cfg [{SECTION}] log_retention_days: expected -1 (forever) or a number of days "
                f"from 0 to {LOG_RETENTION_DAYS_MAX}, got {text!r}"
            )
        return int(text)

    @property
    def finished_experiment_dags(self) -> int:
        """How many finished experiments, the most recently created first, keep their DAG listed in
        Airflow, tagged ``finished`` (``[det] finished_experiment_dags``, default 100); 0: none."""
        text = (self.checked_on_use.get("finished_experiment_dags") or "").strip()
        if not text:
            return FINISHED_EXPERIMENT_DAGS
        if not re.fullmatch(r"\d{1,7}", text):
            raise SettingsError(
                f"airflow.cfg [{SECTION}] finished_experiment_dags: expected a number of DAGs (0 for none), got {text!r}"
            )
        return int(text)

    @property
    def webhook_allowed_hosts(self) -> tuple[str, ...]:
        """Host names, IP addresses and networks (``10.1.2.0/24``) webhooks may be sent to although
        they are not public (``[det] webhook_allowed_hosts``); none by default (docs/webhooks.md)."""
        entries = []
        for item in _list(self.checked_on_use.get("webhook_allowed_hosts")):
            entry = item.lower().rstrip(".")
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                if not _WEBHOOK_HOST.fullmatch(entry):
                    raise SettingsError(
                        f"airflow.cfg [{SECTION}] webhook_allowed_hosts: {item!r} is not a host name, "
                        "an IP address or a network such as 10.1.2.0/24"
                    ) from None
            entries.append(entry)
        return tuple(entries)

    @property
    def task_proxy_host(self) -> str | None:
        """The host names tasks' pages are served at (``[det] task_proxy_host``): ``*.tasks.example.com``
        serves task 7 at ``task-7.tasks.example.com``; None: not set (docs/tasks.md)."""
        text = (self.checked_on_use.get("task_proxy_host") or "").strip().lower().rstrip(".")
        if not text:
            return None
        if not _TASK_PROXY_HOST.fullmatch(text):
            raise SettingsError(
                f"airflow.cfg [{SECTION}] task_proxy_host: {text!r} must be a host name whose first label "
                "is '*', such as *.tasks.example.com (tasks are served at task-<id>.tasks.example.com)"
            )
        return text

    def policy_for(self, pool: str | None) -> RunnerPolicy:
        """The cluster's policy with what ``pool_policies`` adds for ``pool``."""
        extra = self.pool_policies.get(pool or "")
        if not extra:
            return self.policy
        return self.policy.extended(extra, f"airflow.cfg [det] pool_policies[{pool!r}]")

    def allowed_conn_ids(self, policy: RunnerPolicy) -> set[str]:
        defaults = {
            c
            for c in (
                self.docker_conn_id,
                self.kubernetes_conn_id,
                self.storage_conn_id,
                self.gcs_conn_id,
                self.azure_conn_id,
            )
            if c
        }
        return defaults | set(policy.allowed_conn_ids)

    def allowed_namespaces(self, policy: RunnerPolicy) -> set[str]:
        return {self.namespace, *policy.allowed_namespaces}

    def allowed_roots(self, policy: RunnerPolicy) -> tuple[Path, ...]:
        """Host folders trial paths may lie under: the checkpoint root, the trial work folder and
        the admin's ``allowed_host_paths``."""
        extra = tuple(Path(os.path.abspath(p)) for p in policy.allowed_host_paths)
        return (self.checkpoint_root, self.trial_work_dir, *extra)


def load(values: Mapping[str, str | None] | None = None) -> Settings:
    """The settings from airflow.cfg ``[det]`` (or from ``values``, the section as a mapping)."""
    get = _reader(values)
    home = Path(os.path.abspath(os.path.expanduser(os.environ.get("AIRFLOW_HOME") or "~/airflow")))
    policy = RunnerPolicy(
        allowed_host_paths=tuple(_abs_paths(get, "allowed_host_paths")),
        allowed_capabilities=tuple(
            c.upper().removeprefix("CAP_") for c in _list(get("allowed_capabilities"))
        ),
        allowed_devices=tuple(_list(get("allowed_devices"))),
        allowed_images=tuple(_list(get("allowed_images"))) or RunnerPolicy.allowed_images,
        allowed_namespaces=tuple(_list(get("allowed_namespaces"))),
        allowed_conn_ids=tuple(_list(get("allowed_conn_ids"))),
        allowed_storage_endpoints=tuple(e.rstrip("/") for e in _list(get("allowed_storage_endpoints"))),
        allowed_service_accounts=tuple(_list(get("allowed_service_accounts"))),
        allowed_pod_fields=_pod_fields(_list(get("allowed_pod_fields")), "allowed_pod_fields"),
        allowed_volume_types=tuple(_list(get("allowed_volume_types"))),
        allowed_config_maps=tuple(_list(get("allowed_config_maps"))),
        allowed_secrets=tuple(_list(get("allowed_secrets"))),
        allow_root=_bool(get, "container_allow_root", False),
        read_only_root=_bool(get, "container_read_only_root", True),
    )
    return Settings(
        airflow_home=home,
        checkpoint_root=_path(get("checkpoint_storage_path"), home / "det-checkpoints"),
        trial_work_dir=_path(get("trial_work_dir"), home / "det-trials"),
        namespace=_text(get("namespace")) or Settings.namespace,
        docker_conn_id=_text(get("docker_conn_id")),
        kubernetes_conn_id=_text(get("kubernetes_conn_id")),
        storage_conn_id=_text(get("storage_conn_id")) or Settings.storage_conn_id,
        gcs_conn_id=_text(get("gcs_conn_id")) or Settings.gcs_conn_id,
        azure_conn_id=_text(get("azure_conn_id")) or Settings.azure_conn_id,
        master_url=_text(get("master_url")),
        docker_url=_text(get("docker_url")),
        slot_lock_dir=_text(get("slot_lock_dir")) or Settings.slot_lock_dir,
        preemption_pools=tuple(_list(get("preemption_pools"))),
        fair_share_pools=tuple(_list(get("fair_share_pools"))),
        policy=policy,
        pool_policies=_pool_policies(get("pool_policies")),
        trial_uid_range=_uid_range(get("trial_uid_range")),
        trial_user=(get("trial_user") or "").strip() or None,
        max_long_polls_per_user=_int(get, "max_long_polls_per_user", 64),
        max_unmanaged_experiments_per_user=_int(get, "max_unmanaged_experiments_per_user", 50),
        max_creates_per_user=_int(get, "max_creates_per_user", 4),
        checked_on_use={key: get(key) for key in _CHECKED_ON_USE},
    )


_CHECKED_ON_USE = (
    "task_proxy_host",
    "host_address",
    "host_id",
    "host_slots",
    "host_timeout",
    "scheduler",
    "preemption",
    "slots_per_node",
    "slot_type",
    "kubernetes_delete_pods",
    "kubernetes_startup_timeout",
    "log_retention_days",
    "finished_experiment_dags",
    "webhook_allowed_hosts",
    "trial_firewall",
    "trial_allowed_local_ports",
)


_HOST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_HOST_ADDRESS = re.compile(r"[A-Za-z0-9.:_-]{1,253}")
_TASK_PROXY_HOST = re.compile(r"\*(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)+")
_WEBHOOK_HOST = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*")


def host_queue(host_id: str) -> str:
    """The Celery queue the trial tasks placed on ``host_id`` are sent to; its workers listen on it."""
    return f"det-host-{host_id}"


def airflow_defaults(values: Mapping[str, str | None] | None = None) -> dict[str, str]:
    """Defaults for an experiment's ``airflow:`` section (executor, trial_runner, pool, queue,
    master_conn_id, docker_conn_id, kubernetes_conn_id, namespace): the ones the admin set.

    Read apart from :func:`load`, which checks every setting: a bad setting elsewhere in ``[det]``
    must not keep the DAGs of running experiments from being built.
    """
    get = _reader(values)
    found = {key: _text(get(key)) for key in _AIRFLOW_SECTION_KEYS}
    return {key: value for key, value in found.items() if value is not None}


_AIRFLOW_SECTION_KEYS = tuple(f.name for f in dataclasses.fields(AirflowSection))


def _reader(values: Mapping[str, str | None] | None) -> Any:
    if values is not None:
        return lambda key: values.get(key)
    from airflow.sdk import conf

    # conf.get also reads AIRFLOW__DET__* variables, which getsection() misses.
    return lambda key: conf.get(SECTION, key, fallback=None)


def _text(value: str | None) -> str | None:
    return (value or "").strip() or None


def _list(value: str | None) -> list[str]:
    return [item.strip() for item in (value or "").split(",") if item.strip()]


def _path(value: str | None, default: Path) -> Path:
    text = (value or "").strip()
    return Path(os.path.abspath(os.path.expanduser(text))) if text else default


def _abs_paths(get: Any, key: str) -> list[str]:
    paths = _list(get(key))
    for path in paths:
        if not os.path.isabs(path):
            raise SettingsError(f"airflow.cfg [det] {key}: {path!r} is not an absolute path")
    return [os.path.normpath(p) for p in paths]


def _bool(get: Any, key: str, default: bool) -> bool:
    text = (get(key) or "").strip().lower()
    if not text:
        return default
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise SettingsError(f"airflow.cfg [det] {key}: expected true or false, got {text!r}")


def _int(get: Any, key: str, default: int) -> int:
    text = (get(key) or "").strip()
    if not text:
        return default
    if not text.isdigit() or int(text) < 1:
        raise SettingsError(f"airflow.cfg [det] {key}: expected an integer >= 1, got {text!r}")
    return int(text)


def _pod_fields(names: list[str], where: str) -> tuple[str, ...]:
    for name in names:
        if name not in GUARDED_POD_FIELDS:
            raise SettingsError(
                f"airflow.cfg [det] {where}: {name!r} is not one of {', '.join(GUARDED_POD_FIELDS)}"
            )
    return tuple(names)


def _pool_policies(text: str | None) -> dict[str, dict[str, Any]]:
    if not (text or "").strip():
        return {}
    try:
        value = json.loads(text or "")
    except json.JSONDecodeError as exc:
        raise SettingsError(f"airflow.cfg [det] pool_policies: not JSON ({exc.msg} at {exc.pos})") from None
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise SettingsError(
            'airflow.cfg [det] pool_policies: expected {"POOL": {"SETTING": VALUE, ...}, ...}'
        )
    for pool, extra in value.items():
        RunnerPolicy().extended(extra, f"airflow.cfg [det] pool_policies[{pool!r}]")
        _pod_fields(
            list(extra.get("allowed_pod_fields") or []), f"pool_policies[{pool!r}].allowed_pod_fields"
        )
    return value


def _uid_range(text: str | None) -> tuple[int, int]:
    if not (text or "").strip():
        return DEFAULT_TRIAL_UID_RANGE
    low, sep, high = (text or "").strip().partition("-")
    if not sep or not low.strip().isdigit() or not high.strip().isdigit():
        raise SettingsError(
            f"airflow.cfg [det] trial_uid_range: expected FIRST-LAST such as 61184-65519, got {text!r}"
        )
    first, last = int(low), int(high)
    if first < 1000 or last < first:
        raise SettingsError(
            f"airflow.cfg [det] trial_uid_range: {first}-{last} must start at 1000 or above and not end before it starts"
        )
    return first, last
