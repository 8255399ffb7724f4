"""Choosing where a trial runs, and the container a Docker trial gets, field by field, as Docker's
own client builds the request (no daemon needed)."""

from __future__ import annotations

import os
import re
import sys
import threading
from pathlib import Path
from typing import Any

import docker
import pytest

from det_airflow import settings
from det_airflow.config import config_to_dict, parse_config
from det_airflow.operators.runners import (
    DEFAULT_IMAGES,
    LABEL_EXPERIMENT,
    LABEL_RUN,
    LABEL_TRIAL,
    ContainerTrial,
    TrialLaunch,
    container_environment,
    runner_name,
)
from det_airflow.operators.runners._launch import lease_slots
from det_airflow.operators.runners.docker import NOBODY, DockerRunner, container_request
from det_airflow.runner_policy import PolicyError
from det_airflow.settings import RunnerPolicy
from det_airflow.trial_process import TrialSpec

MINIMAL = {
    "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "loss", "max_length": 10},
}


def normalized(defaults: dict[str, str] | None = None, **changes: Any) -> dict[str, Any]:
    """A config as the master hands it to a trial: parsed and written back with defaults filled."""
    return config_to_dict(parse_config({**MINIMAL, **changes}, airflow_defaults=defaults))


def client() -> docker.APIClient:
    # A fixed API version: the client builds requests without asking a daemon for its version.
    return docker.APIClient(base_url="unix:///nonexistent.sock", version="1.41")


def trial(
    tmp_path: Path,
    config: dict[str, Any],
    *,
    device: str = "cpu",
    slots: tuple[int, ...] = (),
    uid: int | None = None,
) -> ContainerTrial:
    spec = TrialSpec(
        trial_id=12, experiment_id=3, request_id="r", trial_seed=5, config=config, run_id=2, uid=uid, gid=uid
    )
    return ContainerTrial(
        spec=spec,
        workdir=tmp_path,
        argv=(sys.executable, "-m", "det_airflow.launchers.torch_distributed", "--trial", "model_def:Trial"),
        env={"DET_TRIAL_ID": "12"},
        slot_ids=slots,
        device=device,
    )


# --- where a trial runs ---


def test_trials_run_locally_unless_configured() -> None:
    assert runner_name(normalized()) == "local"


def test_det_section_default_and_experiment_override() -> None:
    assert runner_name(normalized({"trial_runner": "docker"})) == "docker"
    assert runner_name(normalized({"trial_runner": "docker"}, airflow={"trial_runner": "local"})) == "local"
    assert runner_name(normalized(airflow={"trial_runner": "kubernetes"})) == "kubernetes"


def test_an_unknown_runner_is_a_config_error_naming_the_field() -> None:
    with pytest.raises(Exception, match=r"airflow.trial_runner: expected one of local, docker, kubernetes"):
        normalized(airflow={"trial_runner": "podman"})


# --- the image ---


@pytest.mark.parametrize(
    ("image", "device", "expected"),
    [
        ("my/train:1", "cpu", "my/train:1"),
        ("my/train:1", "cuda", "my/train:1"),
        ({"cpu": "my/cpu:1", "cuda": "my/cuda:1"}, "cpu", "my/cpu:1"),
        ({"cpu": "my/cpu:1", "cuda": "my/cuda:1"}, "cuda", "my/cuda:1"),
        ({"cpu": "my/cpu:1", "gpu": "my/old-gpu:1"}, "cuda", "my/old-gpu:1"),
        ({"cpu": "my/cpu:1"}, "rocm", DEFAULT_IMAGES["rocm"]),
        (None, "cpu", "det-airflow-trial:cpu"),
    ],
)
def test_image_for_the_trials_device(tmp_path: Path, image: Any, device: str, expected: str) -> None:
    assert trial(tmp_path, {"environment": {"image": image}}, device=device).image() == expected


def test_image_from_a_parsed_config(tmp_path: Path) -> None:
    config = normalized(environment={"image": {"cpu": "a:1", "cuda": "b:2"}})
    assert trial(tmp_path, config).image() == "a:1"
    assert trial(tmp_path, config, device="cuda").image() == "b:2"


# --- the environment ---


def test_container_environment_has_the_devices_variables_and_no_path(tmp_path: Path) -> None:
    config = {
        "environment": {
            "environment_variables": {
                "cpu": ["ONLY_CPU=1", "SHARED=cpu"],
                "cuda": ["SHARED=cuda", "DET_TRIAL_ID=99"],
            }
        }
    }
    base = {
        "DET_TRIAL_ID": "12",
        "ONLY_CPU": "1",
        "SHARED": "cpu",
        "PATH": "/host/venv/bin",
        "HOME": "/w/.det/home",
    }

    cpu = container_environment(base, config, "cpu", (), tmp_path)
    cuda = container_environment(base, config, "cuda", (4, 6), tmp_path)

    assert (cpu["SHARED"], cpu["ONLY_CPU"], cpu["PYTHONPATH"]) == ("cpu", "1", str(tmp_path))
    assert "PATH" not in cpu and cpu["HOME"] == "/w/.det/home"
    assert cuda["SHARED"] == "cuda" and "ONLY_CPU" not in cuda
    assert cuda["DET_TRIAL_ID"] == "12"  # the config may not pose as another trial
    assert cuda["CUDA_VISIBLE_DEVICES"] == "0,1"  # the container sees its two GPUs as 0 and 1


def launch(spec: dict[str, Any]) -> TrialLaunch:
    """The launch of a trial whose ``spec`` the master answered."""
    answer = {"trial_id": 12, "experiment_id": 3, **spec}
    return TrialLaunch.from_answer(
        answer, token="t", master_url="http://m", workdir=Path("/nowhere"), fetch_context=lambda: None
    )


def test_held_slots_follow_the_master_else_slots_per_trial() -> None:
    assert launch({"config": normalized(resources={"slots_per_trial": 2})}).held_slots() == (0, 1)
    assert launch({"config": normalized(), "slot_ids": [3, 5]}).held_slots() == (3, 5)


def test_a_gpu_trial_never_leases_a_device_whose_slot_an_admin_disabled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")
    monkeypatch.setenv("AIRFLOW__DET__SLOT_LOCK_DIR", str(tmp_path / "locks"))
    config = normalized(resources={"slots_per_trial": 2})
    held = lease_slots(launch({"config": config, "disabled_devices": [0]}), "cuda")
    assert held.visible_devices() == {"CUDA_VISIBLE_DEVICES": "1,2"}
    held.release()


# --- the container ---


def test_every_container_field_from_the_config(tmp_path: Path) -> None:
    config = normalized(
        environment={"add_capabilities": ["SYS_PTRACE"], "drop_capabilities": ["NET_RAW"]},
        bind_mounts=[
            {"host_path": "/data", "container_path": "/mnt/data", "read_only": True},
            {"host_path": "/scratch", "container_path": "/scratch", "propagation": "rslave"},
        ],
        resources={"shm_size": "1.5G", "devices": ["/dev/fuse:/dev/fuse:rw"]},
        checkpoint_storage={"type": "shared_fs", "host_path": "/ckpt", "storage_path": "runs"},
    )

    policy = RunnerPolicy(allowed_capabilities=("SYS_PTRACE",))
    request = container_request(client(), trial(tmp_path, config, uid=61200), policy)
    host = request.host_config

    assert request.image == DEFAULT_IMAGES["cpu"]
    assert request.command == [
        "python3",
        "-m",
        "det_airflow.launchers.torch_distributed",
        "--trial",
        "model_def:Trial",
    ]
    assert request.working_dir == str(tmp_path)
    assert request.user == "61200:61200"  # the owner's identity, from the master
    assert request.labels == {LABEL_EXPERIMENT: "3", LABEL_TRIAL: "12", LABEL_RUN: "2"}
    assert request.name == "det-trial-3-12-2"
    assert host["NetworkMode"] == "host"
    assert host["ShmSize"] == int(1.5 * 1024**3)
    assert (host["CapAdd"], host["CapDrop"]) == (["SYS_PTRACE"], ["ALL"])
    assert host["Devices"] == [
        {"PathOnHost": "/dev/fuse", "PathInContainer": "/dev/fuse", "CgroupPermissions": "rw"}
    ]
    mounts = {m["Target"]: (m["Source"], m["ReadOnly"], m.get("BindOptions")) for m in host["Mounts"]}
    assert mounts == {
        str(tmp_path): (str(tmp_path), False, None),
        "/ckpt/runs": ("/ckpt/runs", False, None),  # the storage's own folder, not all of host_path
        "/mnt/data": ("/data", True, {"Propagation": "rprivate"}),
        "/scratch": ("/scratch", False, {"Propagation": "rslave"}),
    }
    assert "DeviceRequests" not in host  # a CPU trial asks for no GPU


def test_a_container_runs_unprivileged_as_the_owners_uid_on_a_read_only_root(tmp_path: Path) -> None:
    request = container_request(client(), trial(tmp_path, normalized(), uid=61300))
    host = request.host_config

    assert request.user == "61300:61300"
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert host["CapDrop"] == ["ALL"] and "CapAdd" not in host
    assert host["ReadonlyRootfs"] is True
    assert set(host["Tmpfs"]) == {"/tmp"}  # the work folder and /tmp stay writable
    assert not host.get("Privileged")
    assert 0 < host["PidsLimit"]


def test_without_an_assigned_uid_the_container_never_runs_as_root(tmp_path: Path) -> None:
    user = container_request(client(), trial(tmp_path, normalized())).user
    # A root worker runs it as nobody; any other worker as its own (non-root) user.
    assert user == (NOBODY if os.getuid() == 0 else f"{os.getuid()}:{os.getgid()}")
    assert not user.startswith("0:")


def test_capabilities_the_policy_does_not_allow_are_never_added(tmp_path: Path) -> None:
    config = normalized(environment={"add_capabilities": ["SYS_ADMIN", "CAP_SYS_PTRACE"]})
    policy = RunnerPolicy(allowed_capabilities=("SYS_PTRACE",))
    host = container_request(client(), trial(tmp_path, config), policy).host_config
    assert (host["CapAdd"], host["CapDrop"]) == (["SYS_PTRACE"], ["ALL"])


def test_a_pool_that_allows_root_keeps_the_images_user_and_a_writable_root(tmp_path: Path) -> None:
    policy = RunnerPolicy(allow_root=True, read_only_root=False)
    request = container_request(client(), trial(tmp_path, normalized(), uid=61300), policy)
    assert request.user == ""  # the image's own USER
    assert request.host_config.get("ReadonlyRootfs") in (None, False) and "Tmpfs" not in request.host_config
    assert request.host_config["SecurityOpt"] == ["no-new-privileges"]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"bind_mounts": [{"host_path": "/etc", "container_path": "/host_etc"}]}, "bind_mounts[0].host_path"),
        ({"environment": {"add_capabilities": ["SYS_ADMIN"]}}, "environment.add_capabilities[0]"),
        ({"resources": {"devices": ["/dev/sda:/dev/sda"]}}, "resources.devices[0].host_path"),
    ],
)
def test_the_docker_runner_refuses_what_its_workers_policy_forbids_before_reaching_docker(
    tmp_path: Path, changes: dict[str, Any], field: str
) -> None:
    config = normalized({"trial_runner": "docker"}, **changes)
    # The client points at no daemon: a refusal must come before any call to it.
    runner = DockerRunner(client(), settings=settings.load({"checkpoint_storage_path": str(tmp_path)}))
    with pytest.raises(
        PolicyError, match=rf"^{re.escape(field)}: .* not allowed by the cluster's runner policy"
    ):
        runner.run(trial(tmp_path, config), on_output=lambda line, stream: None, stop=threading.Event())


def test_the_docker_runner_judges_container_fields_whatever_runner_the_config_names(tmp_path: Path) -> None:
    config = normalized(bind_mounts=[{"host_path": "/etc", "container_path": "/host_etc"}])  # "local"
    runner = DockerRunner(client(), settings=settings.load({"checkpoint_storage_path": str(tmp_path)}))
    with pytest.raises(PolicyError, match=r"^bind_mounts\[0\]\.host_path: "):
        runner.run(trial(tmp_path, config), on_output=lambda line, stream: None, stop=threading.Event())


def test_a_link_under_an_allowed_folder_does_not_carry_a_mount_out_of_it(tmp_path: Path) -> None:
    allowed = tmp_path / "ckpt"
    allowed.mkdir()
    (allowed / "escape").symlink_to("/etc")
    config = normalized(
        {"trial_runner": "docker"},
        bind_mounts=[{"host_path": str(allowed / "escape"), "container_path": "/x"}],
    )
    runner = DockerRunner(client(), settings=settings.load({"checkpoint_storage_path": str(allowed)}))
    with pytest.raises(PolicyError, match=r"^bind_mounts\[0\]\.host_path: host path .*escape"):
        runner.run(trial(tmp_path, config), on_output=lambda line, stream: None, stop=threading.Event())


def test_nothing_of_airflow_is_mounted(tmp_path: Path) -> None:
    host = container_request(client(), trial(tmp_path, normalized())).host_config
    assert [m["Source"] for m in host["Mounts"]] == [str(tmp_path)]
    assert host.get("Binds") is None


def test_gpus_are_the_slots_the_trial_holds(tmp_path: Path) -> None:
    host = container_request(client(), trial(tmp_path, normalized(), device="cuda", slots=(2, 3))).host_config
    assert host["DeviceRequests"] == [
        {"Driver": "nvidia", "Count": 0, "DeviceIDs": ["2", "3"], "Capabilities": [["gpu"]], "Options": {}}
    ]


def test_startup_hook_is_sourced_before_the_entrypoint(tmp_path: Path) -> None:
    (tmp_path / "startup-hook.sh").write_text("export X=1\n")
    command = container_request(client(), trial(tmp_path, normalized())).command
    assert command[:4] == ["sh", "-c", '. ./startup-hook.sh && exec "$@"', "sh"]
    assert command[4:6] == ["python3", "-m"]


def test_a_container_trials_tmpdir_is_the_containers_own_short_tmp(tmp_path: Path) -> None:
    # Ray and NCCL put AF_UNIX sockets (at most 107 bytes of path) under TMPDIR: not the work folder.
    runner = DockerRunner(
        client(),
        settings=settings.load(
            {"checkpoint_storage_path": str(tmp_path), "slot_lock_dir": str(tmp_path / "locks")}
        ),
    )
    spec = TrialSpec(
        trial_id=12, experiment_id=3, request_id="r", trial_seed=5, config=normalized(), run_id=2
    )
    deep = tmp_path / ("w" * 60) / "exp_3" / "trial_12"
    launch = TrialLaunch(
        spec=spec, token="t", master_url="http://m", workdir=deep, fetch_context=lambda: None
    )
    prepared = runner.prepare(launch, on_output=lambda line, stream: None)
    assert prepared is not None
    container, lease = prepared
    lease.release()
    assert container.env["TMPDIR"] == "/tmp"
    assert container.env["HOME"] == str(deep.absolute() / ".det" / "home")  # HOME stays in the work folder
