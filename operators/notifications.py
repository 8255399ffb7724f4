"""Notifiers for experiment DAGs: ``DetWebhookNotifier`` POSTs a signed event to a webhook address.

The class lives beside the master's sender (``det_airflow.webhook_notifier``), which delivers every
webhook event through it; DAG code imports it from here, with the operators.
"""

from det_airflow.webhook_notifier import DetWebhookNotifier

__all__ = ["DetWebhookNotifier"]
