"""Tasks' host names: which host is which task's origin, and which is none (the master's or another
site's), from ``[det] task_proxy_host``."""

from __future__ import annotations

import pytest

from det_airflow import settings
from det_airflow.master.task_origin import TaskHosts

HOSTS = TaskHosts("*.tasks.example.com", "https", None)


@pytest.mark.parametrize(
    ("host", "task"),
    [
        ("task-7.tasks.example.com", 7),
        ("TASK-7.Tasks.Example.com:443", 7),
        ("task-123456.tasks.example.com", 123456),
        ("task-07.tasks.example.com", None),  # one name per task
        ("task-7.tasks.example.com.evil.org", None),
        ("x.task-7.tasks.example.com", None),
        ("task-7.example.com", None),
        ("task-7x.tasks.example.com", None),
        ("airflow.tasks.example.com", None),
        ("[::1]:8080", None),
        ("", None),
    ],
)
def test_a_host_is_one_tasks_origin_or_none(host: str, task: int | None) -> None:
    assert HOSTS.task_of(host) == task


def test_a_tasks_origin_has_the_masters_scheme_and_port() -> None:
    assert HOSTS.origin(7) == "https://task-7.tasks.example.com"
    assert TaskHosts("*.localhost", "http", 8080).origin(12) == "http://task-12.localhost:8080"


@pytest.mark.parametrize(
    "value", ["tasks.example.com", "task-*.example.com", "*", "*.exa mple.com", "*.*.example.com"]
)
def test_a_pattern_without_a_leading_wildcard_label_is_named(value: str) -> None:
    with pytest.raises(settings.SettingsError, match="task_proxy_host"):
        _ = settings.load({"task_proxy_host": value}).task_proxy_host


def test_a_good_pattern_is_read_as_written() -> None:
    assert (
        settings.load({"task_proxy_host": " *.Tasks.Example.COM. "}).task_proxy_host == "*.tasks.example.com"
    )
    assert settings.load({}).task_proxy_host is None
