"""One trial run through a runner, for the trial operator: prepare, start, stream, clean up."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from det_airflow.errors import DetError
from det_airflow.operators._logs import LogShipper
from det_airflow.operators.runners._base import ContainerTrial, TrialRunner, container_environment
from det_airflow.slots import SlotLease, lease

if TYPE_CHECKING:
    from det_airflow.api.internal import InternalClient
    from det_airflow.operators.trial import TrialOperator

# Docker's own code for "the daemon could not run the container" (`docker run` exits with it too).
CONTAINER_FAILED = 125


def build_runner(
    name: str,
    config: Mapping[str, Any],
    *,
    log: Any = None,
    on_container: Callable[[str], None] | None = None,
    on_phase: Callable[[str, str], None] | None = None,
) -> TrialRunner:
    """The runner called ``name`` (``airflow.trial_runner``), set up from the experiment's ``airflow``
    section and ``airflow.cfg [det]``."""
    from det_airflow import runner_policy, settings

    section = config.get("airflow") or {}
    # This worker's airflow.cfg: the runner checks each trial against its policy before it starts.
    worker_settings = settings.load()
    if name == "docker":
        from airflow.providers.docker.hooks.docker import DockerHook

        # Before the hook reaches the daemon with the connection the config names.
        runner_policy.enforce(config, worker_settings, runner="docker")

        from det_airflow.operators.runners._docker import DEFAULT_DOCKER_URL, DockerRunner

        base_url = worker_settings.docker_url or os.environ.get("DOCKER_HOST") or DEFAULT_DOCKER_URL
        hook = DockerHook(docker_conn_id=section.get("docker_conn_id") or None, base_url=base_url)
        return DockerRunner(
            hook.api_client,
            log=log,
            on_container=on_container,
            on_phase=on_phase,
            settings=worker_settings,
        )
    if name == "kubernetes":
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

        from det_airflow.operators.runners._kubernetes import (
            DEFAULT_SLOTS_PER_NODE,
            KubernetesCluster,
            KubernetesRunner,
        )

        hook = KubernetesHook(conn_id=section.get("kubernetes_conn_id") or None)
        return KubernetesRunner(
            KubernetesCluster(hook),
            namespace=section.get("namespace") or "default",
            # Left empty, a node of 8.
            slots_per_node=worker_settings.slots_per_node or DEFAULT_SLOTS_PER_NODE,
            delete_pods=worker_settings.kubernetes_delete_pods,
            startup_timeout=worker_settings.kubernetes_startup_timeout,
            log=log,
            settings=worker_settings,
        )
    raise DetError(f"airflow.trial_runner: {name!r} cannot run trials on this worker yet")


def slot_device() -> str:
    """The kind of slot this installation's trials hold: ``[det] slot_type`` (cpu, cuda or rocm)."""
    from det_airflow import settings

    return settings.load().slot_type


def held_slots(spec_dict: Mapping[str, Any]) -> tuple[int, ...]:
    """The slot ids the trial holds: the master's, when its answer names them; else one per slot of
    ``resources.slots_per_trial``, numbered from 0."""
    if spec_dict.get("slot_ids") is not None:
        return tuple(int(s) for s in spec_dict["slot_ids"])
    resources = (spec_dict.get("config") or {}).get("resources") or {}
    return tuple(range(int(resources.get("slots_per_trial") or 0)))


def lease_slots(spec_dict: Mapping[str, Any]) -> SlotLease:
    """The devices behind the trial's slots, leased on this host until the run ends: GPU slots get
    free device indices of the worker's host; CPU slots stay ``0..n-1``."""
    device = slot_device()
    if spec_dict.get("slot_ids") is not None or device == "cpu":
        return SlotLease(device, held_slots(spec_dict))
    return lease(device, len(held_slots(spec_dict)))


def container_trial(
    where: str,
    operator: TrialOperator,
    client: InternalClient,
    spec_dict: dict[str, Any],
    token: str,
    on_output: Callable[[str, str], None],
) -> tuple[ContainerTrial, SlotLease] | None:
    """The trial of ``spec_dict`` ready for the runner called ``where``: its work folder prepared and
    its slots held; None (the reason passed to ``on_output``) when its slots cannot be held."""
    from det_airflow.operators.trial import default_work_dir
    from det_airflow.trial_process import (
        TrialSpec,
        entrypoint_argv,
        prepare_workdir,
        trial_environment,
        write_trial_files,
    )

    spec = TrialSpec.from_dict(spec_dict)
    master, _ = operator._credentials
    workdir = (
        Path(operator.work_dir or default_work_dir()) / f"exp_{spec.experiment_id}" / f"trial_{spec.trial_id}"
    )
    shutil.rmtree(workdir, ignore_errors=True)
    prepare_workdir(operator.trial_context(client, spec.experiment_id), workdir)
    write_trial_files(spec, workdir)
    try:
        # A pod's devices are its node's, given by Kubernetes: nothing of this worker's to lease.
        held = (
            SlotLease(slot_device(), held_slots(spec_dict))
            if where == "kubernetes"
            else lease_slots(spec_dict)
        )
    except DetError as exc:
        on_output(f"ERROR: {exc}", "stderr")
        return None
    slots, device = held.slot_ids, held.device
    env = trial_environment(
        spec, master_url=master, token=token, slot_ids=slots, base_env={}, workdir=workdir
    )
    trial = ContainerTrial(
        spec=spec,
        workdir=workdir.absolute(),
        argv=tuple(entrypoint_argv(spec.config["entrypoint"])),
        env=container_environment(env, spec.config, device, slots, workdir.absolute()),
        slot_ids=slots,
        device=device,
    )
    operator.log.info(
        "Trial %s (experiment %s, run %s) starting on %s (%s, %s slots %s): %s",
        spec.trial_id,
        spec.experiment_id,
        spec.run_id,
        where,
        trial.image(),
        device,
        list(slots),
        " ".join(trial.command()),
    )
    return trial, held


def run_with(
    where: str,
    operator: TrialOperator,
    client: InternalClient,
    spec_dict: dict[str, Any],
    token: str,
) -> int:
    """Runs one trial through the runner called ``where``, its output going to the task log and
    ``det trial logs``."""
    shipper = LogShipper(operator._client(), int(spec_dict["trial_id"]), log=operator.log)

    def on_output(line: str, stream: str) -> None:
        operator.log.info("%s", line)
        shipper.add(line, stream)

    prepared = None
    try:
        prepared = container_trial(where, operator, client, spec_dict, token, on_output)
    finally:
        if prepared is None:  # refused, or the preparation raised
            shipper.close()
            shipper.client.close()
    if prepared is None:
        return CONTAINER_FAILED
    trial, held = prepared
    spec, workdir = trial.spec, trial.workdir
    operator._stop.clear()
    watcher = threading.Thread(target=operator._watch, args=(spec.trial_id,), daemon=True)
    watcher.start()
    try:
        # `det trial logs` names the container each line came from, as Determined's does.
        runner = build_runner(
            where,
            spec.config,
            log=operator.log,
            on_container=lambda cid: setattr(shipper, "container_id", cid[:12]),
            on_phase=lambda state, why: operator.report_phase(client, spec.trial_id, spec.run_id, state, why),
        )
        code = runner.run(trial, on_output=on_output, stop=operator._stop)
    except DetError as exc:
        # The user's to fix (image, mounts): say so where they look, and count it as a failed run.
        on_output(f"ERROR: {exc}", "stderr")
        code = CONTAINER_FAILED
    finally:
        held.release()
        operator._stop.set()
        shipper.close()
        shipper.client.close()
    operator.log.info("Trial %s exited with code %s", spec.trial_id, code)
    shutil.rmtree(workdir, ignore_errors=True)
    return code
