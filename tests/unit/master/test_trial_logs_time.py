"""`GET /trials/{id}/logs?timestamp_before=&timestamp_after=`: Determined's time window, applied
by the store, so ``tail`` and ``limit`` count the lines inside it."""

from __future__ import annotations

from typing import Any

from det_airflow.master import schema, trial_logs
from tests.unit.master.people_app import People
from tests.unit.master.test_routes_ui import new_trial

# Lines reported by a trial at 12:00:01 .. 12:00:05 UTC, the third in another zone.
REPORTED = [
    "2026-01-01T12:00:01Z",
    "2026-01-01T12:00:02+00:00",
    "2026-01-01T14:00:03+02:00",
    "2026-01-01T12:00:04",
    "2026-01-01T12:00:05.500000+00:00",
]


def _trial_with_lines(people: People) -> int:
    trial_id = new_trial(people, people.add_experiment(owner="alice"))
    with people.db.begin() as conn:
        conn.execute(schema.trial_logs.delete().where(schema.trial_logs.c.trial_id == trial_id))
        trial_logs.append_logs(
            conn,
            trial_id,
            [{"timestamp": when, "message": f"line {n}"} for n, when in enumerate(REPORTED, start=1)],
        )
    return trial_id


def _messages(people: People, trial_id: int, query: str) -> list[str]:
    answer = people.call("viewer", "GET", f"/trials/{trial_id}/logs?{query}")
    assert answer.status_code == 200, answer.text
    return [line["message"] for line in answer.json()["logs"]]


def test_window_is_strict_on_both_ends_and_zones_compare_as_instants(people: People) -> None:
    t = _trial_with_lines(people)
    assert _messages(
        people, t, "timestamp_after=2026-01-01T12:00:02Z&timestamp_before=2026-01-01T12:00:05Z"
    ) == [
        "line 3",
        "line 4",
    ]
    # The same instants written in another zone, URL-encoded as a client sends them.
    assert _messages(people, t, "timestamp_after=2026-01-01T13%3A00%3A03%2B01%3A00") == ["line 4", "line 5"]
    assert _messages(people, t, "timestamp_before=2026-01-01T12:00:01") == []  # no zone: UTC
    assert _messages(people, t, "timestamp_after=2026-01-01T12:00:05.4Z") == ["line 5"]


def test_tail_and_limit_count_lines_inside_the_window(people: People) -> None:
    t = _trial_with_lines(people)
    assert _messages(people, t, "timestamp_before=2026-01-01T12:00:04Z&tail=1") == ["line 3"]
    assert _messages(people, t, "timestamp_after=2026-01-01T12:00:01Z&limit=2") == ["line 2", "line 3"]


def test_times_come_back_in_utc(people: People) -> None:
    t = _trial_with_lines(people)
    answer: Any = people.call(
        "viewer", "GET", f"/trials/{t}/logs?timestamp_after=2026-01-01T12:00:02Z&limit=1"
    )
    assert answer.json()["logs"][0]["timestamp"].startswith("2026-01-01T12:00:03")


def test_a_bad_time_is_refused(people: People) -> None:
    t = _trial_with_lines(people)
    answer = people.call("viewer", "GET", f"/trials/{t}/logs?timestamp_before=yesterday")
    assert answer.status_code == 422
    assert "timestamp_before" in answer.text
