"""Node-local GPU slot leases: which devices of its host a trial gets."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from det_airflow.slots import SlotsUnavailable, host_devices, lease


def test_the_workers_visible_devices_are_the_hosts_devices(tmp_path):
    assert host_devices("cuda", environ={"CUDA_VISIBLE_DEVICES": "2, 3"}, dev_dir=tmp_path) == [2, 3]
    assert host_devices("rocm", environ={"ROCR_VISIBLE_DEVICES": "1"}, dev_dir=tmp_path) == [1]


def test_devices_named_by_uuid_are_refused_with_the_variable_named(tmp_path):
    with pytest.raises(SlotsUnavailable, match=r"CUDA_VISIBLE_DEVICES='GPU-1a2b'.*by index"):
        host_devices("cuda", environ={"CUDA_VISIBLE_DEVICES": "GPU-1a2b"}, dev_dir=tmp_path)


def test_slots_per_node_wins_over_the_device_files(tmp_path):
    (tmp_path / "nvidia0").touch()
    assert host_devices("cuda", environ={}, slots_per_node=4, dev_dir=tmp_path) == [0, 1, 2, 3]


def test_nvidia_device_files_count_gpus_but_not_the_control_devices(tmp_path):
    for name in ("nvidia1", "nvidia0", "nvidiactl", "nvidia-uvm", "nvidia-modeset", "nvidia10"):
        (tmp_path / name).touch()
    assert host_devices("cuda", environ={}, dev_dir=tmp_path) == [0, 1, 10]


def test_render_nodes_count_rocm_devices_from_zero(tmp_path):
    (tmp_path / "dri").mkdir()
    for name in ("renderD128", "renderD129", "card0"):
        (tmp_path / "dri" / name).touch()
    assert host_devices("rocm", environ={}, dev_dir=tmp_path) == [0, 1]


def test_cpu_slots_are_numbered_and_lock_nothing(tmp_path):
    held = lease("cpu", 3, lock_dir=tmp_path / "locks")
    assert held.slot_ids == (0, 1, 2)
    assert held.visible_devices() == {}
    assert not (tmp_path / "locks").exists()


def test_two_trials_on_one_host_never_share_a_gpu(tmp_path):
    first = lease("cuda", 1, devices=[0, 1, 2], lock_dir=tmp_path)
    second = lease("cuda", 2, devices=[0, 1, 2], lock_dir=tmp_path)
    assert first.slot_ids == (0,)
    assert second.slot_ids == (1, 2)
    assert first.visible_devices() == {"CUDA_VISIBLE_DEVICES": "0"}
    assert second.visible_devices() == {"CUDA_VISIBLE_DEVICES": "1,2"}
    with pytest.raises(SlotsUnavailable, match=r"only 0 of .* 3 cuda devices \(0, 1, 2\) are free"):
        lease("cuda", 1, devices=[0, 1, 2], lock_dir=tmp_path)
    first.release()
    assert lease("cuda", 1, devices=[0, 1, 2], lock_dir=tmp_path).slot_ids == (0,)


def test_a_short_lease_takes_nothing(tmp_path):
    held = lease("cuda", 1, devices=[0, 1], lock_dir=tmp_path)
    with pytest.raises(SlotsUnavailable, match="holds 2 cuda slots, but only 1"):
        lease("cuda", 2, devices=[0, 1], lock_dir=tmp_path)
    # The free device it tried stays free.
    assert lease("cuda", 1, devices=[0, 1], lock_dir=tmp_path).slot_ids == (1,)
    held.release()


def test_more_slots_than_the_host_has_devices_is_refused_up_front(tmp_path):
    with pytest.raises(
        SlotsUnavailable, match=r"holds 4 cuda slots, but this worker's host has 2 cuda devices"
    ):
        lease("cuda", 4, devices=[0, 1], lock_dir=tmp_path)


def test_a_device_whose_slot_an_admin_disabled_is_never_leased(tmp_path):
    held = lease("cuda", 2, devices=[4, 5, 6], lock_dir=tmp_path, disabled=[5])
    assert held.visible_devices() == {"CUDA_VISIBLE_DEVICES": "4,6"}
    with pytest.raises(
        SlotsUnavailable,
        match=r"host has 2 cuda devices \(4, 6\) with the slots of devices 5 disabled \(det slot enable\)",
    ):
        lease("cuda", 3, devices=[4, 5, 6], lock_dir=tmp_path / "other", disabled=[5])
    held.release()
    # A device the host does not have changes nothing.
    assert lease("cuda", 3, devices=[4, 5, 6], lock_dir=tmp_path, disabled=[9]).slot_ids == (4, 5, 6)


def test_the_lock_dir_and_locks_are_the_workers_alone(tmp_path):
    lease("cuda", 1, devices=[0], lock_dir=tmp_path / "slots").release()
    assert (tmp_path / "slots").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "slots" / "cuda0.lock").stat().st_mode & 0o777 == 0o600


def test_a_lock_dir_others_may_write_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    with pytest.raises(SlotsUnavailable, match=r"slot_lock_dir .*writable by no one else"):
        lease("cuda", 1, devices=[0], lock_dir=shared)


def test_a_killed_holder_frees_its_devices(tmp_path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import sys, time
                from det_airflow.slots import lease
                held = lease("cuda", 1, devices=[0], lock_dir={str(tmp_path)!r})
                print(held.slot_ids[0], flush=True)
                time.sleep(600)
                """
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "0"
        with pytest.raises(SlotsUnavailable):
            lease("cuda", 1, devices=[0], lock_dir=tmp_path)
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
        assert lease("cuda", 1, devices=[0], lock_dir=tmp_path).slot_ids == (0,)
    finally:
        holder.kill()
        holder.wait(timeout=30)
