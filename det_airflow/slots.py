"""Which of this worker's GPUs a trial gets: node-local slot leases.

The admission gate counts a pool's slots; the devices behind them belong to the machine a trial
runs on. A trial that holds ``cuda`` or ``rocm`` slots leases that many device indices of its
worker's host here, by an exclusive ``flock`` on one file per device, so two trials on one machine
never share a GPU, whichever worker process started them. The kernel drops a lock when its holder
dies, so a killed worker leaks no device. The lock folder and files are the worker user's alone:
trial code, running as another user, cannot take a lock and keep GPUs from other trials. CPU slots
name no device: a CPU trial's slot ids stay ``0..n-1`` as before.

The host's devices are, in order: the worker's own ``CUDA_VISIBLE_DEVICES`` (``ROCR_VISIBLE_DEVICES``
for rocm) when the platform set one, else ``[det] slots_per_node`` devices, else the device files
the driver made (``/dev/nvidia0``…, ``/dev/dri/renderD*``).
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from det_airflow.errors import DetError

VISIBLE_DEVICES = {"cuda": "CUDA_VISIBLE_DEVICES", "rocm": "ROCR_VISIBLE_DEVICES"}
_NVIDIA_DEVICE = re.compile(r"nvidia(\d+)")
_RENDER_NODE = re.compile(r"renderD(\d+)")


class SlotsUnavailable(DetError):
    """The worker's host has fewer free devices than the trial holds slots."""


def host_devices(
    device: str,
    *,
    environ: Mapping[str, str] | None = None,
    slots_per_node: int | None = None,
    dev_dir: str | os.PathLike[str] = "/dev",
) -> list[int]:
    """The device indices of kind ``device`` this worker may hand to trials, in lease order."""
    env = os.environ if environ is None else environ
    visible = env.get(VISIBLE_DEVICES.get(device, ""), "").strip()
    if visible:
        entries = [entry.strip() for entry in visible.split(",") if entry.strip()]
        if not all(entry.isdigit() for entry in entries):
            raise SlotsUnavailable(
                f"the worker's {VISIBLE_DEVICES[device]}={visible!r}: trials lease devices by index; "
                "name the worker's GPUs by index, not UUID"
            )
        return [int(entry) for entry in entries]
    if slots_per_node is not None:
        return list(range(slots_per_node))
    pattern = _NVIDIA_DEVICE if device == "cuda" else _RENDER_NODE
    found: list[int] = []
    for path in Path(dev_dir, "dri" if device == "rocm" else "").glob("*"):
        match = pattern.fullmatch(path.name)
        if match:
            found.append(int(match.group(1)))
    found.sort()
    # Render nodes are numbered from 128; the devices are counted from 0.
    return list(range(len(found))) if device == "rocm" else found


class SlotLease:
    """Device indices held until :meth:`release` (or until this process ends)."""

    def __init__(self, device: str, slot_ids: Sequence[int], fds: Sequence[int] = ()) -> None:
        self.device = device
        self.slot_ids = tuple(slot_ids)
        self._fds = list(fds)

    def visible_devices(self) -> dict[str, str]:
        """What a process on this host needs to see exactly the leased devices."""
        name = VISIBLE_DEVICES.get(self.device)
        if name is None or not self.slot_ids:
            return {}
        return {name: ",".join(str(i) for i in self.slot_ids)}

    def release(self) -> None:
        fds, self._fds = self._fds, []
        for fd in fds:
            os.close(fd)  # closing the only descriptor drops the flock

    def __enter__(self) -> SlotLease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def lease(
    device: str,
    count: int,
    *,
    devices: Sequence[int] | None = None,
    lock_dir: str | os.PathLike[str] | None = None,
    disabled: Sequence[int] = (),
) -> SlotLease:
    """Lease ``count`` free devices of kind ``device`` on this host (none for ``cpu``: its slots
    are numbered ``0..count-1`` and lock nothing), never one of ``disabled`` (the devices behind
    slots an admin disabled)."""
    if device == "cpu" or count <= 0:
        return SlotLease(device, range(max(count, 0)))
    every = host_devices(device, slots_per_node=_slots_per_node()) if devices is None else list(devices)
    off = sorted(set(every) & set(disabled))
    candidates = [index for index in every if index not in off]
    if count > len(candidates):
        raise SlotsUnavailable(
            f"the trial holds {count} {device} slots, but this worker's host has {len(candidates)} "
            f"{device} devices ({_describe(candidates)})"
            + (f" with the slots of devices {_describe(off)} disabled (det slot enable)" if off else "")
            + "; give the pool at most as many slots as one worker host has devices, or set [det] slots_per_node"
        )
    folder = Path(lock_dir or _lock_dir())
    _make_lock_dir(folder)
    held: list[tuple[int, int]] = []
    try:
        for index in candidates:
            path = folder / f"{device}{index}.lock"
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o600)
            except OSError as exc:
                raise SlotsUnavailable(f"cannot open the GPU lock {path}: {exc.strerror or exc}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    continue
                raise
            held.append((index, fd))
            if len(held) == count:
                return SlotLease(device, [i for i, _ in held], [f for _, f in held])
    except BaseException:
        for _, fd in held:
            os.close(fd)
        raise
    for _, fd in held:
        os.close(fd)
    raise SlotsUnavailable(
        f"the trial holds {count} {device} slots, but only {len(held)} of this worker's host's "
        f"{len(candidates)} {device} devices ({_describe(candidates)}) are free: other trials or "
        f"another det-airflow on this host hold the rest (locks in {folder})"
    )


def _describe(candidates: Sequence[int]) -> str:
    return "none found" if not candidates else ", ".join(str(i) for i in candidates)


def _slots_per_node() -> int | None:
    from det_airflow import settings

    try:
        return settings.load().slots_per_node
    except settings.SettingsError as exc:
        raise SlotsUnavailable(str(exc)) from None


def _lock_dir() -> str:
    from det_airflow import settings

    return settings.load().slot_lock_dir


def _make_lock_dir(folder: Path) -> None:
    """The lock folder, made private to this worker's user; refused when someone else could put
    locks in it (trial code holding a GPU's lock would keep it from every other trial)."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = folder.stat()
    except OSError as exc:
        raise SlotsUnavailable(f"[det] slot_lock_dir {folder}: {exc.strerror or exc}") from None
    if info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise SlotsUnavailable(
            f"[det] slot_lock_dir {folder}: it must belong to this worker's user and be writable by "
            "no one else, or trial code could hold the GPUs' locks"
        )
