"""A worker host's inventory, as its heartbeat reports it to the master.

Each Airflow worker machine is one host to det-airflow (Determined's agent): an id (``[det]
host_id``, else the machine's name), the slots it offers and the Celery queue that sends trial
tasks to it (:func:`det_airflow.settings.host_queue`). GPU slots are the devices the worker may
hand to trials (:func:`det_airflow.slots.host_devices`: CUDA_VISIBLE_DEVICES, ``[det]
slots_per_node``, else the driver's device files); a CPU host offers ``[det] host_slots``, else one
slot per CPU.
"""

from __future__ import annotations

import os

from det_airflow import settings as det_settings
from det_airflow.api.models import HostReport
from det_airflow.slots import host_devices


def inventory(current: det_settings.Settings | None = None) -> tuple[str, HostReport]:
    """This host's id and what it offers."""
    current = current or det_settings.load()
    host_id = current.host_id
    slot_type = current.slot_type
    devices: list[int] = []
    if slot_type == "cpu":
        slots = current.host_slots or os.cpu_count() or 1
    else:
        devices = host_devices(slot_type, slots_per_node=current.slots_per_node)
        slots = len(devices)
    report = HostReport(
        slot_type=slot_type,  # type: ignore[arg-type]  # checked by Settings.slot_type
        slots=slots,
        devices=devices,
        queue=det_settings.host_queue(host_id),
        address=current.host_address,
    )
    return host_id, report
