"""``det webhook ...``: Determined's webhooks, kept on the master (docs/webhooks.md).

Triggers are given with ``--trigger``, one each:

- ``state=COMPLETED``: the experiment reaches that state;
- ``metric=loss>0.5``: a validation metric crosses a threshold (``>``, ``>=``, ``<``, ``<=``;
  ``metric=training:loss>2`` for a training metric);
- ``log=REGEX``: a trial log line matches the regular expression;
- ``custom``: the training code calls ``core_context.alert(...)``.
"""

from __future__ import annotations

import argparse
import re
from typing import TYPE_CHECKING, Any

from det_airflow.api.models import Empty, StoredTrigger, WebhookAnswer, WebhookDeliveryList, WebhookList
from det_airflow.cli import render
from det_airflow.errors import DetError

if TYPE_CHECKING:
    from det_airflow.api.user import UserClient

LIST_HEADERS = ("ID", "Name", "Type", "Mode", "URL", "Triggers", "Owner")
DELIVERY_HEADERS = ("ID", "Trigger", "Experiment", "Created", "Attempts", "State", "Last error")
_METRIC = re.compile(r"(?:(training|validation):)?(.+?)(>=|<=|>|<)(.+)")


class TriggerError(DetError):
    """A ``--trigger`` the CLI cannot read."""


def register(subparsers: argparse._SubParsersAction) -> None:
    noun = subparsers.add_parser("webhook", help="manage webhooks")
    verbs = noun.add_subparsers(dest="verb", metavar="VERB", required=True)

    create = verbs.add_parser("create", help="create a webhook; prints its signing key once")
    create.add_argument("name", metavar="NAME", help="webhook name")
    create.add_argument("url", metavar="URL", help="the address events are POSTed to")
    create.add_argument("--type", choices=("default", "slack"), default="default", help="payload shape")
    create.add_argument(
        "--mode",
        choices=("workspace", "specific"),
        default="specific",
        help="workspace: every experiment (admins only); specific: experiments that name it "
        "under integrations.webhooks (default)",
    )
    create.add_argument(
        "--trigger",
        action="append",
        required=True,
        metavar="TRIGGER",
        help="state=STATE, metric=[training:]NAME>VALUE (or >=, <, <=), log=REGEX, or custom; repeatable",
    )
    render.add_output_flags(create)
    create.set_defaults(func=_create)

    ls = verbs.add_parser("list", aliases=["ls"], help="list the webhooks you may see")
    render.add_output_flags(ls)
    ls.set_defaults(func=_list)

    delete = verbs.add_parser("delete", aliases=["rm"], help="delete a webhook")
    delete.add_argument("webhook_id", metavar="ID", type=int, help="webhook ID")
    delete.set_defaults(func=_delete)

    edit = verbs.add_parser("edit", help="send a webhook's events to another address")
    edit.add_argument("webhook_id", metavar="ID", type=int, help="webhook ID")
    edit.add_argument("--url", required=True, help="the new address events are POSTed to")
    edit.set_defaults(func=_edit)

    test = verbs.add_parser("test", help="send a webhook a test event now and say whether it was taken")
    test.add_argument("webhook_id", metavar="ID", type=int, help="webhook ID")
    test.set_defaults(func=_test)

    deliveries = verbs.add_parser("deliveries", help="list a webhook's events and their delivery")
    deliveries.add_argument("webhook_id", metavar="ID", type=int, help="webhook ID")
    render.add_output_flags(deliveries)
    deliveries.set_defaults(func=_deliveries)


def parse_trigger(text: str) -> dict[str, Any]:
    """One ``--trigger`` as the API's ``{triggerType, condition}``."""
    kind, _, value = text.partition("=")
    kind = kind.strip().lower()
    if kind == "custom" and not value:
        return {"triggerType": "CUSTOM", "condition": {}}
    if kind == "state" and value:
        return {"triggerType": "EXPERIMENT_STATE_CHANGE", "condition": {"state": value.strip().upper()}}
    if kind == "log" and value:
        return {"triggerType": "TASK_LOG", "condition": {"regex": value}}
    if kind == "metric" and (match := _METRIC.fullmatch(value.strip())):
        group, name, op, number = match.groups()
        try:
            threshold = float(number)
        except ValueError:
            raise TriggerError(f"--trigger {text!r}: {number!r} is not a number") from None
        condition = {"metricName": name.strip(), "metricGroup": group or "validation", "compareOp": op}
        return {"triggerType": "METRIC_THRESHOLD_EXCEEDED", "condition": {**condition, "value": threshold}}
    raise TriggerError(
        f"--trigger {text!r}: expected state=STATE, metric=[training:]NAME>VALUE, log=REGEX or custom"
    )


def _connect(args: argparse.Namespace) -> UserClient:
    from det_airflow.cli.user import connect

    return connect(args.master)


def _short(name: str, prefix: str) -> str:
    """Determined's enum name as the CLI says it: ``WEBHOOK_TYPE_SLACK`` → ``SLACK``."""
    return name.removeprefix(prefix)


def _describe_trigger(trigger: StoredTrigger | dict[str, Any]) -> str:
    if isinstance(trigger, StoredTrigger):
        trigger = trigger.model_dump()
    c = trigger.get("condition") or {}
    kind = _short(str(trigger.get("triggerType")), "TRIGGER_TYPE_")
    if kind == "EXPERIMENT_STATE_CHANGE":
        return f"state={c.get('state')}"
    if kind == "METRIC_THRESHOLD_EXCEEDED":
        return f"metric={c.get('metricGroup')}:{c.get('metricName')}{c.get('compareOp')}{c.get('value')}"
    if kind == "TASK_LOG":
        return f"log={c.get('regex')}"
    return "custom"


def _create(args: argparse.Namespace) -> None:
    triggers = [parse_trigger(t) for t in args.trigger]
    body = {
        "name": args.name,
        "url": args.url,
        "webhookType": args.type.upper(),
        "mode": args.mode.upper(),
        "triggers": triggers,
    }
    webhook = _connect(args)._answer(WebhookAnswer, "POST", "/webhooks", json=body).webhook
    if args.json:
        render.print_json(webhook)
        return
    print(f"Created webhook {webhook.id} ({webhook.name}).")
    print(f"Signing key (shown only now): {webhook.signingKey}")


def _list(args: argparse.Namespace) -> None:
    webhooks = _connect(args)._answer(WebhookList, "GET", "/webhooks").webhooks
    if args.json:
        render.print_json(webhooks)
        return
    rows = [
        [
            w.id,
            w.name,
            _short(w.webhookType, "WEBHOOK_TYPE_"),
            _short(w.mode, "WEBHOOK_MODE_"),
            w.url,
            ", ".join(map(_describe_trigger, w.triggers)),
            w.owner,
        ]
        for w in webhooks
    ]
    render.print_table(list(LIST_HEADERS), rows, csv=args.csv)


def _delete(args: argparse.Namespace) -> None:
    _connect(args)._answer(Empty, "DELETE", f"/webhooks/{args.webhook_id}")
    print(f"Deleted webhook {args.webhook_id}.")


def _edit(args: argparse.Namespace) -> None:
    _connect(args)._answer(Empty, "PATCH", f"/webhooks/{args.webhook_id}", json={"url": args.url})
    print(f"Webhook {args.webhook_id} now sends to {args.url}.")


def _test(args: argparse.Namespace) -> None:
    _connect(args)._answer(Empty, "POST", f"/webhooks/{args.webhook_id}/test")
    print(f"Webhook {args.webhook_id} took the test event.")


def _deliveries(args: argparse.Namespace) -> None:
    path = f"/webhooks/{args.webhook_id}/deliveries"
    deliveries = _connect(args)._answer(WebhookDeliveryList, "GET", path).deliveries
    if args.json:
        render.print_json(deliveries)
        return
    rows = [
        [
            d.id,
            d.triggerType,
            d.experimentId,
            render.format_time(d.createdAt),
            d.attempts,
            d.state,
            d.lastError or "",
        ]
        for d in deliveries
    ]
    render.print_table(list(DELIVERY_HEADERS), rows, csv=args.csv)
