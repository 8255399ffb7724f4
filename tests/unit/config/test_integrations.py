"""``integrations.webhooks``: the SPECIFIC webhooks an experiment names are checked and acted on
(no "not acted on" warning); ``integrations.pachyderm`` is still accepted and inactive."""

from __future__ import annotations

from det_airflow.config import config_to_dict, parse_config

from ._configs import problems_of

BASE = """\
name: named
entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: {batches: 10}}
"""


def test_webhooks_by_name_and_id_are_accepted_without_a_warning() -> None:
    cfg = parse_config(BASE + "integrations:\n  webhooks: {webhook_name: [mine], webhook_id: [3]}\n")
    assert cfg.warnings == ()
    stored = config_to_dict(cfg)["integrations"]  # what the master keeps and reads
    assert stored == {"webhooks": {"webhook_name": ["mine"], "webhook_id": [3]}}
    assert config_to_dict(parse_config(BASE)).get("integrations") is None


def test_pachyderm_is_still_accepted_but_inactive() -> None:
    cfg = parse_config(BASE + "integrations:\n  pachyderm: {pachd: {host: p}}\n")
    assert cfg.warnings == ("accepted but not acted on by det-airflow: integrations.pachyderm",)


def test_bad_webhook_references_are_named() -> None:
    text = BASE + "integrations:\n  webhooks: {webhook_name: [''], webhook_id: [0, x], hooks: []}\n"
    assert problems_of(text) == [
        ("integrations.webhooks.hooks", "unknown field; expected one of webhook_name, webhook_id"),
        ("integrations.webhooks.webhook_name[0]", "expected a non-empty string, got ''"),
        ("integrations.webhooks.webhook_id[0]", "expected a webhook ID (an integer >= 1), got 0"),
        ("integrations.webhooks.webhook_id[1]", "expected a webhook ID (an integer >= 1), got 'x'"),
    ]
