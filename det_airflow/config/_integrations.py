"""``integrations``: Determined's webhooks section is acted on (the SPECIFIC webhooks an experiment
sends its events to, by name or id, docs/webhooks.md); ``pachyderm`` is accepted and inactive."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from det_airflow.config._fields import Fields, Problems, is_int, item, show

PATH = "integrations"


def read_integrations(value: Any, problems: Problems) -> None:
    """Records what is wrong with ``integrations``; a non-mapping is the caller's to report."""
    if not isinstance(value, Mapping):
        return
    webhooks = Fields(value, PATH, problems, known=("pachyderm", "webhooks")).mapping("webhooks")
    if not isinstance(webhooks, Mapping):
        return
    f = Fields(webhooks, f"{PATH}.webhooks", problems, known=("webhook_name", "webhook_id"))
    f.strings("webhook_name", nonempty=True)
    ids = webhooks.get("webhook_id")
    if ids is None:
        return
    if not isinstance(ids, list):
        f.bad("webhook_id", "a list of webhook IDs")
        return
    for i, element in enumerate(ids):
        if not is_int(element) or element < 1:
            problems.add(
                item(f.at("webhook_id"), i), f"expected a webhook ID (an integer >= 1), got {show(element)}"
            )
