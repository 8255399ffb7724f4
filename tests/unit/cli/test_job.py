"""`det job list|update|update-batch` and `det e set priority|weight|max-slots`: arguments checked
before anything is sent, and the queue as the table shows it."""

from __future__ import annotations

from typing import Any

import pytest

from det_airflow.api.models import Job
from det_airflow.cli import render
from det_airflow.cli.job import LIST_HEADERS, JobArgumentError, list_row, parse_batch

JOB = {
    "jobs_ahead": 1,
    "id": 7,
    "type": "TYPE_EXPERIMENT",
    "name": "mnist",
    "priority": 42,
    "weight": 1.0,
    "max_slots": None,
    "submitted": "2025-03-01T12:00:00+00:00",
    "acquired_slots": 4,
    "needed_slots": 8,
    "slots_per_trial": 4,
    "state": "STATE_SCHEDULED",
    "preempting_trials": 0,
    "fits_pool": True,
    "user": "alice",
    "resource_pool": "gpus",
    "experiment_state": "ACTIVE",
}


def _job(**fields: Any) -> Job:
    return Job.model_validate(JOB | fields)


def test_list_shows_the_columns_determined_shows(capsys: pytest.CaptureFixture[str]) -> None:
    render.print_table(LIST_HEADERS, [list_row(_job())], csv=True)
    assert capsys.readouterr().out.splitlines() == [
        "#,ID,Type,Job Name,Priority,Submitted,Slots (acquired/needed),State,User,Hosts",
        "1,7,TYPE_EXPERIMENT,mnist,42,2025-03-01 12:00:00+0000,4/8,STATE_SCHEDULED,alice,",
    ]


def test_list_shows_the_hosts_a_job_runs_on_last(capsys: pytest.CaptureFixture[str]) -> None:
    render.print_table(LIST_HEADERS, [list_row(_job(hosts=["gpu-a", "gpu-b"]))], csv=True)
    header, row = capsys.readouterr().out.splitlines()
    assert header.endswith(",User,Hosts")
    assert row.endswith(',alice,"gpu-a, gpu-b"')


def test_a_job_that_never_fits_its_pool_says_so() -> None:
    row = list_row(_job(fits_pool=False, acquired_slots=0, state="STATE_QUEUED"))
    assert row[6] == "0/8 (needs 4 per trial: never fits pool 'gpus')"


def test_a_job_the_live_hosts_cannot_take_says_what_it_waits_for() -> None:
    row = list_row(_job(largest_host_slots=2, fits_hosts=False, acquired_slots=0, state="STATE_QUEUED"))
    assert row[6] == (
        "0/8 (needs 4 per trial: waits for hosts that can take it, one with that many slots or several"
        " with equal shares; the largest live host has 2 enabled)"
    )
    assert list_row(_job(largest_host_slots=2, fits_hosts=True))[6] == "4/8", "runs across two hosts"
    assert list_row(_job(largest_host_slots=4, fits_hosts=True))[6] == "4/8"


def test_a_job_the_caller_may_not_read_is_shown_without_name_and_user() -> None:
    row = list_row(_job(name=None, user=None))
    assert (row[3], row[8]) == ("(hidden)", "(hidden)")


def test_batch_items_become_updates() -> None:
    assert parse_batch(["3.priority=1", "4.resource-pool=gpus", "5.ahead-of=3", "6.weight=0.5"]) == [
        {"job_id": 3, "priority": 1},
        {"job_id": 4, "resource_pool": "gpus"},
        {"job_id": 5, "ahead_of": 3},
        {"job_id": 6, "weight": 0.5},
    ]


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("3priority=1", "expected ID.KEY=VALUE"),
        ("3.colour=red", "expected ID.KEY=VALUE"),
        ("x.priority=1", "expected ID.KEY=VALUE"),
        ("3.priority=", "expected ID.KEY=VALUE"),
        ("3.priority=100", "'100' is not a valid priority"),
        ("3.weight=0", "'0' is not a valid weight"),
    ],
)
def test_bad_batch_items_are_refused(item: str, message: str) -> None:
    with pytest.raises(JobArgumentError, match=message):
        parse_batch(["4.priority=2", item])


def test_bad_batch_item_is_one_line_and_exit_1(det: Any) -> None:
    result = det("job", "update-batch", "3.colour=red")
    assert result.code == 1
    assert result.err.strip().splitlines() == [
        "Error: '3.colour=red': expected ID.KEY=VALUE with KEY one of priority, weight, max-slots, "
        "resource-pool, ahead-of, behind-of (e.g. 12.priority=10)"
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["job", "update", "3"], "one of the arguments -p/--priority -w/--weight --resource-pool"),
        (["job", "update", "3", "--priority", "1", "--weight", "2"], "not allowed with argument"),
        (["job", "update", "3", "--priority", "0"], "expected a priority 1-99 (lower runs first), got '0'"),
        (["e", "set", "max-slots", "3", "0"], "expected an integer >= 1, got '0'"),
        (["e", "set", "weight", "3", "-1"], "expected a weight above 0, got '-1'"),
        (["j", "ls", "--limit", "x"], "expected an integer >= 1, got 'x'"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_sent(det: Any, args: list[str], message: str) -> None:
    result = det(*args)
    assert result.code == 2
    assert message in result.err
