"""Trials in Docker containers, through the docker provider's client (``DockerHook.api_client``).

A trial's container runs its entrypoint in the trial's work folder (mounted at the same path), on
the host network (a master on 127.0.0.1 stays reachable), with the checkpoint storage's folder
mounted at the same path, the user's bind mounts, shared memory, capabilities and devices, and the
GPUs of exactly the slots the trial holds. Nothing of Airflow's goes in: no environment, no
configuration, and no host folder but those the cluster's runner policy allows
(:mod:`det_airflow.runner_policy`, checked again here before anything starts), each checked on what
Docker will mount and handed to it in a form no trial can change (:mod:`._host_mounts`). The container runs
as the trial owner's uid, never root unless the policy allows it, with ``no-new-privileges``, every
capability dropped but those the policy allows, and a read-only root file system (a tmpfs on
``/tmp``; the work folder stays writable). Its output streams to the caller line by line; the
container is removed once it has exited and its output is drained.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docker import APIClient
from docker.errors import APIError, ImageNotFound, NotFound
from docker.types import DeviceRequest

from det_airflow import runner_policy, trial_env
from det_airflow.core._tensorboard import prepare_tensorboard_root
from det_airflow.errors import DetError
from det_airflow.operators.runners import _host_mounts
from det_airflow.operators.runners._base import OnContainer, OnPhase
from det_airflow.operators.runners._container import LABEL_TRIAL, ContainerRunner, ContainerTrial
from det_airflow.operators.runners._host_mounts import HostMount, TrialIdentities
from det_airflow.operators.runners._task_ready import OnTaskReady, watch_ready
from det_airflow.settings import RunnerPolicy, Settings
from det_airflow.settings import load as load_settings
from det_airflow.trial_process import (
    LineSplitter,
    OnOutput,
    TrialIsolationError,
    TrialUser,
    check_can_write,
    hand_over,
    keep_off_host_services,
    make_dirs_as,
    prepare_checkpoint_root,
)

DEFAULT_DOCKER_URL = "unix:///var/run/docker.sock"
# Who a trial runs as when the master assigned its owner no uid and the worker itself is root.
NOBODY = "65534:65534"
# Enough for data loader workers and their threads, not for a fork bomb.
PIDS_LIMIT = 16384


class ContainerError(DetError):
    """A trial's container could not be created or started (bad image, bad mount, no daemon)."""


@dataclass(frozen=True)
class ContainerRequest:
    """What ``create_container`` gets for one trial."""

    image: str
    command: list[str]
    environment: dict[str, str]
    labels: dict[str, str]
    name: str
    working_dir: str
    user: str
    host_config: dict[str, Any]

    def create_kwargs(self) -> dict[str, Any]:
        return {
            "image": self.image,
            "command": self.command,
            "environment": self.environment,
            "labels": self.labels,
            "name": self.name,
            "working_dir": self.working_dir,
            "user": self.user,
            "host_config": self.host_config,
            "stdin_open": False,
            "tty": False,
        }


def container_user(trial: ContainerTrial, policy: RunnerPolicy) -> str:
    """``uid:gid`` the container runs as: the owner's identity the master assigned; without one the
    worker's own user, or nobody when the worker is root. Empty (the image's own user) only where
    the policy allows root."""
    if policy.allow_root:
        return ""
    if trial.spec.uid is not None:
        gid = trial.spec.gid if trial.spec.gid is not None else trial.spec.uid
        return f"{trial.spec.uid}:{gid}"
    if os.getuid() != 0:
        # Still the one identity that can write the work folder the worker prepared.
        return f"{os.getuid()}:{os.getgid()}"
    return NOBODY


def requested_mounts(trial: ContainerTrial) -> list[HostMount]:
    """The host folders ``trial``'s container mounts, as its config names them: the work folder and
    the ``shared_fs`` storage's folder (``host_path/storage_path``), each at its own path, then
    ``bind_mounts``."""
    config = trial.config
    work = str(trial.workdir)
    mounts = [HostMount("airflow.cfg [det] trial_work_dir", work, work, within=work)]
    storage = config.get("checkpoint_storage") or {}
    if storage.get("type") == "shared_fs" and storage.get("host_path"):
        folder = runner_policy.storage_folder(storage)
        mounts.append(HostMount("checkpoint_storage.host_path", folder, folder))
    for i, mount in enumerate(config.get("bind_mounts") or []):
        mounts.append(
            HostMount(
                f"bind_mounts[{i}].host_path",
                str(mount["host_path"]),
                str(mount["container_path"]),
                read_only=bool(mount.get("read_only")),
                propagation=mount.get("propagation") or "rprivate",
            )
        )
    return mounts


def container_request(
    client: APIClient,
    trial: ContainerTrial,
    policy: RunnerPolicy | None = None,
    mounts: list[HostMount] | None = None,
) -> ContainerRequest:
    """The container for ``trial``, as Docker will be asked for it, under ``policy`` (the runner
    policy of the trial's pool; the cluster's default when not given), with ``mounts`` (checked by
    :func:`._host_mounts.checked`; the config's :func:`requested_mounts` when not given)."""
    policy = policy or RunnerPolicy()
    config = trial.config
    environment = config.get("environment") or {}
    resources = config.get("resources") or {}
    mounts = requested_mounts(trial) if mounts is None else mounts
    devices = [
        f"{d['host_path']}:{d['container_path']}:{d.get('mode') or 'mrw'}"
        for d in resources.get("devices") or []
    ]
    device_requests = []
    if trial.device == "cuda" and trial.slot_ids:
        device_requests.append(
            DeviceRequest(
                driver="nvidia", device_ids=[str(s) for s in trial.slot_ids], capabilities=[["gpu"]]
            )
        )
    added = runner_policy.allowed_added_capabilities(environment.get("add_capabilities") or [], policy)
    host_config = client.create_host_config(
        network_mode="host",
        mounts=[m.mount() for m in mounts],
        shm_size=resources.get("shm_size"),
        # Every capability dropped, then only those the policy allows and the config asks for.
        cap_drop=["ALL"],
        cap_add=added or None,
        security_opt=["no-new-privileges"],
        privileged=False,
        read_only=policy.read_only_root,
        tmpfs={"/tmp": "rw,nosuid,nodev"} if policy.read_only_root else None,
        pids_limit=PIDS_LIMIT,
        devices=devices or None,
        device_requests=device_requests or None,
    )
    return ContainerRequest(
        image=trial.image(),
        command=trial.command(),
        environment=dict(trial.env),
        labels=trial.labels,
        name=trial.name,
        working_dir=str(trial.workdir),
        user=container_user(trial, policy),
        host_config=host_config,
    )


def check_trial(trial: ContainerTrial, settings: Settings) -> RunnerPolicy:
    """The trial's config against this worker's runner policy (the worker's airflow.cfg may be
    stricter than the master's); answers the policy of the trial's pool. Its host folders are
    checked where they are mounted from, by :func:`checked_mounts`."""
    runner_policy.enforce(trial.config, settings, runner="docker")
    return settings.policy_for(runner_policy.pool_of(trial.config))


def checked_mounts(
    trial: ContainerTrial, settings: Settings, policy: RunnerPolicy, user: str
) -> list[HostMount]:
    """The trial's mounts as Docker must be given them: resolved once on this host, inside the
    folders ``policy`` allows, free of links and out of reach of every trial identity (the
    container's ``user`` among them)."""
    uid = user.partition(":")[0]
    trials = TrialIdentities.of(settings, int(uid) if uid else None)
    return _host_mounts.checked(requested_mounts(trial), settings.allowed_roots(policy), trials)


class DockerRunner(ContainerRunner):
    """Runs a trial in a container of the Docker daemon that ``client`` talks to.

    Example::

        client = DockerHook(docker_conn_id=None, base_url=DEFAULT_DOCKER_URL).api_client
        code = DockerRunner(client).run(trial, on_output=print_line, stop=threading.Event())
    """

    name = "docker"

    def __init__(
        self,
        client: APIClient,
        *,
        kill_grace: int = 10,
        log: Any = None,
        on_container: OnContainer | None = None,
        on_phase: OnPhase | None = None,
        settings: Settings | None = None,
    ) -> None:
        self.client = client
        # airflow.cfg [det] of this worker (read at each run when not given).
        self.settings = settings
        self.kill_grace = kill_grace
        self._log = log
        self._on_container = on_container  # told each container's id once it exists
        # Told (trial state, why) as the run goes PULLING the image, STARTING, RUNNING.
        self._on_phase = on_phase or (lambda state, why: None)

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any],
        settings: Settings,
        *,
        log: Any = None,
        on_container: OnContainer | None = None,
        on_phase: OnPhase | None = None,
    ) -> DockerRunner:
        """The runner of this worker's Docker daemon (``[det] docker_url``, else ``DOCKER_HOST``),
        reached through the connection ``airflow.docker_conn_id`` names."""
        from airflow.providers.docker.hooks.docker import DockerHook

        # Before the hook reaches the daemon with the connection the config names.
        runner_policy.enforce(config, settings, runner="docker")
        section = config.get("airflow") or {}
        base_url = settings.docker_url or os.environ.get("DOCKER_HOST") or DEFAULT_DOCKER_URL
        hook = DockerHook(docker_conn_id=section.get("docker_conn_id") or None, base_url=base_url)
        return cls(hook.api_client, log=log, on_container=on_container, on_phase=on_phase, settings=settings)

    def run(self, trial: ContainerTrial, *, on_output: OnOutput, stop: threading.Event) -> int:
        settings = self.settings or load_settings()
        policy = check_trial(trial, settings)
        user = container_user(trial, policy)
        storage = trial.config.get("checkpoint_storage") or {}
        folder = None
        if storage.get("type") == "shared_fs" and storage.get("host_path"):
            folder = Path(runner_policy.storage_folder(storage))
        _hand_over(trial, user, folder, settings)
        if os.geteuid() == 0 and user:
            # The container shares the host's network: its uid is kept off the host's services.
            keep_off_host_services(settings, int(user.partition(":")[0]), trial.env.get(trial_env.MASTER, ""))
        # After the hand-over, which makes the storage folder Docker refuses to bind when missing.
        mounts = checked_mounts(trial, settings, policy, user)
        request = container_request(self.client, trial, policy, mounts)
        self.sweep(trial.spec.trial_id)
        self._ensure_image(request.image, trial.config)
        try:
            container = self.client.create_container(**request.create_kwargs())["Id"]
        except APIError as exc:
            raise ContainerError(
                f"cannot create the container of trial {trial.spec.trial_id}: {_reason(exc)}"
            ) from exc
        if self._on_container is not None:
            self._on_container(container)
        try:
            uid = int(request.user.partition(":")[0]) if request.user else None
            return self._run_created(container, on_output, stop, trial.workdir, uid, trial.on_task_ready)
        finally:
            try:
                self.client.remove_container(container, force=True)
            except NotFound:
                pass

    def _run_created(
        self,
        container: str,
        on_output: OnOutput,
        stop: threading.Event,
        workdir: Path | None = None,
        uid: int | None = None,
        on_task_ready: OnTaskReady | None = None,
    ) -> int:
        lock = threading.Lock()

        def emit(line: str, stream: str) -> None:
            with lock:
                on_output(line, stream)

        # Attached before the start, so not one line is missed.
        output = self.client.attach(container, stdout=True, stderr=True, stream=True, logs=True, demux=True)
        try:
            self.client.start(container)
        except APIError as exc:
            raise ContainerError(f"cannot start container {container[:12]}: {_reason(exc)}") from exc
        self._on_phase("RUNNING", f"container {container[:12]} started")
        reader = threading.Thread(target=_drain, args=(output, emit), daemon=True)
        reader.start()
        stopping = False

        def leaders() -> set[int]:
            """The container's first process, as this host numbers it (the rest descend from it)."""
            try:
                pid = self.client.inspect_container(container)["State"]["Pid"]
            except APIError:
                return set()
            return {int(pid)} if pid else set()

        on_ready = on_task_ready if workdir is not None else None
        with watch_ready(on_ready, workdir or Path(), uid=uid, leaders=leaders, on_output=emit):
            while reader.is_alive():
                reader.join(timeout=0.1)
                if stop.is_set() and not stopping:
                    stopping = True
                    self._stop(container)
        return int(self.client.wait(container)["StatusCode"])

    def _stop(self, container: str) -> None:
        """SIGTERM to the entrypoint, SIGKILL ``kill_grace`` seconds later (``docker stop``)."""
        threading.Thread(
            target=self.client.stop, args=(container,), kwargs={"timeout": self.kill_grace}, daemon=True
        ).start()

    def sweep(self, trial_id: int) -> list[str]:
        """Removes containers of ``trial_id`` left by an earlier run (a worker that died while its
        trial ran); only one run of a trial is ever live, the one about to start."""
        removed = []
        for found in self.client.containers(all=True, filters={"label": f"{LABEL_TRIAL}={trial_id}"}):
            if self._log is not None:
                self._log.warning(
                    "Removing container %s left by an earlier run of trial %s", found["Id"][:12], trial_id
                )
            try:
                self.client.remove_container(found["Id"], force=True)
            except NotFound:
                pass
            removed.append(found["Id"])
        return removed

    def _ensure_image(self, image: str, config: Mapping[str, Any]) -> None:
        environment = config.get("environment") or {}
        if not environment.get("force_pull_image"):
            try:
                self.client.inspect_image(image)
                return
            except ImageNotFound:
                pass
        repository, _, tag = (
            image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "latest")
        )
        self._on_phase("PULLING", f"pulling image {image}")
        try:
            for _ in self.client.pull(
                repository, tag=tag, stream=True, auth_config=environment.get("registry_auth") or None
            ):
                pass
            self.client.inspect_image(image)
            self._on_phase("STARTING", f"pulled image {image}")
        except (APIError, ImageNotFound) as exc:
            raise ContainerError(
                f"environment.image: cannot pull {image!r} ({_reason(exc)}); build it with `make trial-image` "
                "or name an image this Docker daemon has"
            ) from exc


def _hand_over(trial: ContainerTrial, user: str, storage: Path | None, settings: Settings) -> None:
    """A root worker gives the work folder to the container's user, and makes sure that user can
    write its checkpoints (the default storage folder, det's own, is handed over when it cannot)."""
    root = os.geteuid() == 0 and bool(user)
    identity = None
    if root:
        uid, _, gid = user.partition(":")
        identity = TrialUser(f"uid {uid}", int(uid), int(gid or uid))
    try:
        if identity is not None:
            hand_over(trial.workdir, identity)
        if storage is None:
            return
        if root and (storage == settings.checkpoint_root or settings.checkpoint_root in storage.parents):
            prepare_checkpoint_root(settings.checkpoint_root)
            prepare_tensorboard_root(settings.checkpoint_root)
        # Docker refuses to bind a missing folder: made here as the trial's user (a local trial makes
        # it itself on its first checkpoint), never as root.
        if not storage.exists():
            make_dirs_as(storage, identity)
        if identity is not None:
            check_can_write(storage, identity)
    except TrialIsolationError as exc:
        raise ContainerError(str(exc)) from exc


def _drain(output: Iterator[tuple[bytes | None, bytes | None]], emit: OnOutput) -> None:
    stdout, stderr = LineSplitter("stdout", emit), LineSplitter("stderr", emit)
    for out, err in output:
        if out:
            stdout.feed(out)
        if err:
            stderr.feed(err)
    stdout.close()
    stderr.close()


def _reason(exc: Exception) -> str:
    explanation = getattr(exc, "explanation", None)
    return str(explanation or exc)
