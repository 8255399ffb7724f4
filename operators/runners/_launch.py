"""One run of a trial as the slot's operator hands it to a runner, and the slots it holds."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from det_airflow.slots import SlotLease, lease
from det_airflow.trial_process import TrialSpec, trial_environment

if TYPE_CHECKING:
    from det_airflow.operators.runners._task_ready import OnTaskReady


@dataclass(frozen=True)
class TrialLaunch:
    """What a runner needs to start one run of a trial: the master's answer (spec and token), where
    the master and the trial's work folder are, and the experiment's context archive."""

    spec: TrialSpec
    token: str
    master_url: str
    workdir: Path
    # The experiment's context archive (tar.gz), fetched when the work folder is prepared.
    fetch_context: Callable[[], bytes | None]
    # The slot ids the master assigned, when its answer names them.
    assigned_slots: tuple[int, ...] | None = None
    # A task that serves pages (local and Docker runners): told (port, secret, address) once the
    # runner found its program's port held by the task's own process, and when that no longer holds
    # (runners/_task_ready.py).
    on_task_ready: OnTaskReady | None = None
    # The host's devices behind slots an admin disabled (`det slot disable`): never leased.
    disabled_devices: tuple[int, ...] = ()

    @classmethod
    def from_answer(
        cls,
        spec: Mapping[str, Any],
        *,
        token: str,
        master_url: str,
        workdir: Path,
        fetch_context: Callable[[], bytes | None],
    ) -> TrialLaunch:
        """The launch of the trial whose ``spec`` the master answered (docs/master-api.md)."""
        assigned = spec.get("slot_ids")
        return cls(
            spec=TrialSpec.from_dict(spec),
            token=token,
            master_url=master_url,
            workdir=workdir,
            fetch_context=fetch_context,
            assigned_slots=None if assigned is None else tuple(int(s) for s in assigned),
            disabled_devices=tuple(int(d) for d in spec.get("disabled_devices") or ()),
        )

    def environment(
        self,
        slot_ids: Iterable[int],
        *,
        base_env: Mapping[str, str] | None = None,
        tmpdir: Path | None = None,
    ) -> dict[str, str]:
        """The trial process's whole environment (``trial_environment``) for this run. It holds no
        credentials of the checkpoints' store: the trial reaches a store whose credentials are the
        platform's through the master (docs/object-storage.md). ``tmpdir``: its ``TMPDIR`` (else in
        the work folder)."""
        return trial_environment(
            self.spec,
            master_url=self.master_url,
            token=self.token,
            slot_ids=slot_ids,
            base_env=base_env,
            workdir=self.workdir,
            tmpdir=tmpdir,
        )

    def held_slots(self) -> tuple[int, ...]:
        """The slot ids the trial holds: the master's, when its answer names them; else one per slot
        it holds on this host (its node's share of a multi-node run, else ``resources.slots_per_trial``),
        numbered from 0."""
        if self.assigned_slots is not None:
            return self.assigned_slots
        if self.spec.gang:  # a node of a run over several hosts holds its share here
            return tuple(range(int(self.spec.gang.get("slots") or 0)))
        resources = self.spec.config.get("resources") or {}
        return tuple(range(int(resources.get("slots_per_trial") or 0)))


def lease_slots(launch: TrialLaunch, device: str) -> SlotLease:
    """The devices behind the trial's slots (of kind ``device``, ``[det] slot_type``), leased on this
    host until the run ends: GPU slots get free device indices of the worker's host; CPU slots and
    slots the master assigned stay as they are."""
    if launch.assigned_slots is not None or device == "cpu":
        return SlotLease(device, launch.held_slots())
    return lease(device, len(launch.held_slots()), disabled=launch.disabled_devices)
