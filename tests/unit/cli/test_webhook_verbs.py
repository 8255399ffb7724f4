"""`det webhook ...` against the master's own routes (the people app on SQLite, served on
loopback): the trigger syntax, the signing key shown once, listing, deliveries and bad input."""

from __future__ import annotations

import json
from typing import Any

import pytest

from det_airflow.cli.webhook import TriggerError, parse_trigger
from tests.unit.cli.test_task_verbs import Cluster, _table, cluster
from tests.unit.master.creating import creator
from tests.unit.master.people_app import people

__all__ = ["cluster", "creator", "people"]  # the fixtures, used here


@pytest.mark.parametrize(
    ("text", "trigger"),
    [
        ("state=completed", {"triggerType": "EXPERIMENT_STATE_CHANGE", "condition": {"state": "COMPLETED"}}),
        (
            "metric=loss>0.5",
            {
                "triggerType": "METRIC_THRESHOLD_EXCEEDED",
                "condition": {
                    "metricName": "loss",
                    "metricGroup": "validation",
                    "compareOp": ">",
                    "value": 0.5,
                },
            },
        ),
        (
            "metric=training:val.acc<=2",
            {
                "triggerType": "METRIC_THRESHOLD_EXCEEDED",
                "condition": {
                    "metricName": "val.acc",
                    "metricGroup": "training",
                    "compareOp": "<=",
                    "value": 2.0,
                },
            },
        ),
        ("log=CUDA out of memory", {"triggerType": "TASK_LOG", "condition": {"regex": "CUDA out of memory"}}),
        ("custom", {"triggerType": "CUSTOM", "condition": {}}),
    ],
)
def test_the_trigger_syntax(text: str, trigger: dict[str, Any]) -> None:
    assert parse_trigger(text) == trigger


@pytest.mark.parametrize("text", ["state", "metric=loss", "metric=loss>high", "nope=1", "custom=x"])
def test_a_trigger_the_cli_cannot_read_is_refused(text: str) -> None:
    with pytest.raises(TriggerError, match="--trigger"):
        parse_trigger(text)


def test_a_webhook_is_created_listed_and_deleted(
    det: Any, cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__DET__WEBHOOK_ALLOWED_HOSTS", "127.0.0.1")  # the admin allows loopback
    made = det(
        "webhook",
        "create",
        "mine",
        "http://127.0.0.1:9/hook",
        "--trigger",
        "state=COMPLETED",
        "--trigger",
        "log=OOM",
    )
    assert made.code == 0, made.err
    lines = made.out.splitlines()
    assert lines[0] == "Created webhook 1 (mine)."
    assert lines[1].startswith("Signing key (shown only now): ") and len(lines[1].split()[-1]) == 64

    header, rows = _table(det("webhook", "list").out)
    assert header == ["ID", "Name", "Type", "Mode", "URL", "Triggers", "Owner"]
    assert rows == [
        ["1", "mine", "DEFAULT", "SPECIFIC", "http://127.0.0.1:9/hook", "state=COMPLETED, log=OOM", "alice"]
    ]
    assert 'signingKey": null' in det("webhook", "list", "--json").out

    moved = det("webhook", "edit", "1", "--url", "http://127.0.0.1:10/other")
    assert (moved.code, moved.out) == (0, "Webhook 1 now sends to http://127.0.0.1:10/other.\n")
    assert _table(det("webhook", "list").out)[1][0][4] == "http://127.0.0.1:10/other"
    refused = det("webhook", "edit", "1", "--url", "http://10.9.9.9/x")
    assert refused.code == 1 and "10.9.9.9" in refused.err and refused.err.count("\n") == 1
    untaken = det("webhook", "test", "1")  # nothing listens on port 10
    assert untaken.code == 1
    assert "webhook 1's test event was not taken: no answer" in untaken.err

    header, rows = _table(det("webhook", "deliveries", "1").out)
    assert header[:3] == ["ID", "Trigger", "Experiment"] and rows == []
    assert json.loads(det("webhook", "deliveries", "1", "--json").out) == []

    deleted = det("webhook", "delete", "1")
    assert (deleted.code, deleted.out) == (0, "Deleted webhook 1.\n")
    gone = det("webhook", "delete", "1")
    assert gone.code == 1
    assert "webhook 1 not found" in gone.err and gone.err.count("\n") == 1


def test_bad_input_is_one_line(det: Any, cluster: Cluster) -> None:
    workspace = det(
        "webhook", "create", "all", "http://127.0.0.1:9/", "--mode", "workspace", "--trigger", "custom"
    )
    assert workspace.code == 1
    assert "only admins may" in workspace.err and workspace.err.count("\n") == 1
    bad = det("webhook", "create", "x", "http://127.0.0.1:9/", "--trigger", "metric=loss")
    assert bad.code == 1
    assert bad.err.count("\n") == 1 and "--trigger 'metric=loss'" in bad.err
    state = det("webhook", "create", "x", "http://127.0.0.1:9/", "--trigger", "state=DONE")
    assert state.code == 1
    assert "condition.state 'DONE' is not an experiment state" in state.err
