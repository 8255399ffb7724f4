"""File removals done by the hosts that have the files (master/removals.py): what a heartbeat's
answer says waits, what a claim hands each host, how a done report ends or retries a removal, the
master removing its own where no host reports, and the worker side (celery_config.HostRemovals)."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import update

from det_airflow.api.models import HostReport, Removal
from det_airflow.celery_config import HostHeartbeat, HostRemovals
from det_airflow.master import file_cleanup, removals, schema
from det_airflow.master.lifecycle import now
from tests.unit.master.people_app import People

MASTER_HOST = "master-host"
BEAT = {"slot_type": "cpu", "slots": 2, "queue": "det-host-w"}
S3 = {"type": "s3", "bucket": "ckpt", "prefix": "team"}


@pytest.fixture
def work_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This machine's trial work folder, and its host id."""
    path = tmp_path / "work"
    path.mkdir()
    monkeypatch.setenv("AIRFLOW__DET__TRIAL_WORK_DIR", str(path))
    monkeypatch.setenv("AIRFLOW__DET__HOST_ID", MASTER_HOST)
    return path


def queue(people: People, host: str | None, *, experiment_id: int = 1, uuids: tuple[str, ...] = ()) -> int:
    """A removal as the master queues it: of ``s3`` checkpoints (any host), or of a host's work folder."""
    kind = file_cleanup.WORK_DIR if host else file_cleanup.CHECKPOINTS
    with people.db.begin() as conn:
        return conn.execute(
            schema.removals.insert()
            .values(
                experiment_id=experiment_id,
                kind=kind,
                host=host,
                pool="default_pool",
                storage=None if host else S3,
                uuids=list(uuids),
                created_at=now(),
                attempts=0,
            )
            .returning(schema.removals.c.id)
        ).scalar_one()


def beat(people: People, headers: dict[str, str], host_id: str) -> int:
    """A heartbeat of ``host_id``; how many removals its answer says wait for it."""
    answer = people.client.put(f"/api/v1/internal/hosts/{host_id}", json=BEAT, headers=headers)
    assert answer.status_code == 200, answer.text
    return int(answer.json()["removals_waiting"])


def claim(people: People, headers: dict[str, str], host_id: str) -> list[dict[str, Any]]:
    answer = people.client.post(f"/api/v1/internal/hosts/{host_id}/removals/claim", headers=headers)
    assert answer.status_code == 200, answer.text
    return list(answer.json()["removals"])


def done(people: People, headers: dict[str, str], host_id: str, removal_id: int, *not_removed: str) -> None:
    answer = people.client.post(
        f"/api/v1/internal/hosts/{host_id}/removals/{removal_id}/done",
        json={"not_removed": list(not_removed)},
        headers=headers,
    )
    assert answer.status_code == 200, answer.text


def age(people: People, seconds: float) -> None:
    """Every claim, and every failed try, made ``seconds`` ago."""
    with people.db.begin() as conn:
        conn.execute(update(schema.removals).values(claimed_at=now() - timedelta(seconds=seconds)))


def queued(people: People) -> dict[int, Any]:
    with people.db.read() as conn:
        return {row.id: row for row in removals.pending(conn)}


# --- the master's side: heartbeat answer, claim, done ----------------------------------------------


def test_a_heartbeat_answer_counts_the_removals_the_host_may_claim(
    people: People, service_headers: dict[str, str]
) -> None:
    queue(people, None, uuids=("c1",))
    queue(people, "w1")
    queue(people, "w2")

    assert [beat(people, service_headers, h) for h in ("w1", "w2", "w3")] == [2, 2, 1]
    claim(people, service_headers, "w1")
    # What w1 claimed is no longer waiting for anyone; w2's own folder still is.
    assert [beat(people, service_headers, h) for h in ("w1", "w2", "w3")] == [0, 1, 0]


def test_a_claim_hands_out_the_any_host_removals_and_the_hosts_own_never_another_hosts(
    people: People, service_headers: dict[str, str]
) -> None:
    shared = queue(people, None, experiment_id=4, uuids=("c1", "c2"))
    mine = queue(people, "w1", experiment_id=5)
    theirs = queue(people, "w2", experiment_id=6)

    handed = claim(people, service_headers, "w1")

    assert [r["id"] for r in handed] == [shared, mine]
    assert handed[0] == {
        "id": shared,
        "kind": "checkpoints",
        "experiment_id": 4,
        "pool": "default_pool",
        "storage": S3,
        "uuids": ["c1", "c2"],
        "uid": None,
        "gid": None,
    }
    assert (handed[1]["kind"], handed[1]["experiment_id"]) == ("work_dir", 5)
    assert [r["id"] for r in claim(people, service_headers, "w2")] == [theirs]
    assert claim(people, service_headers, "w3") == []


def test_a_claimed_removal_is_handed_out_again_only_once_its_claim_is_stale(
    people: People, service_headers: dict[str, str]
) -> None:
    removal = queue(people, None, uuids=("c1",))
    assert [r["id"] for r in claim(people, service_headers, "w1")] == [removal]
    assert claim(people, service_headers, "w2") == []
    assert claim(people, service_headers, "w1") == [], "not even to the host that holds it"

    # w1 died mid-way: CLAIM_SECONDS later the removal goes to the next host that asks.
    age(people, removals.CLAIM_SECONDS - 5)
    assert claim(people, service_headers, "w2") == []
    age(people, removals.CLAIM_SECONDS + 1)
    assert [r["id"] for r in claim(people, service_headers, "w2")] == [removal]
    assert queued(people)[removal].claimed_by == "w2"


def test_a_done_report_of_a_claim_taken_over_changes_nothing(
    people: People, service_headers: dict[str, str]
) -> None:
    removal = queue(people, None, uuids=("c1",))
    claim(people, service_headers, "w1")
    age(people, removals.CLAIM_SECONDS + 1)
    claim(people, service_headers, "w2")

    done(people, service_headers, "w1", removal, "checkpoint c1: Permission denied; not removed")
    done(people, service_headers, "w1", removal)

    row = queued(people)[removal]
    assert (row.claimed_by, row.attempts, row.problem) == ("w2", 0, None)
    done(people, service_headers, "w2", removal)
    assert queued(people) == {}


def test_done_with_nothing_left_forgets_the_removal(people: People, service_headers: dict[str, str]) -> None:
    removal = queue(people, None, uuids=("c1",))
    claim(people, service_headers, "w1")

    done(people, service_headers, "w1", removal)

    assert queued(people) == {}
    assert beat(people, service_headers, "w1") == 0


def test_a_removal_that_fails_is_tried_again_later_until_max_attempts_then_kept_with_its_problem(
    people: People, service_headers: dict[str, str]
) -> None:
    removal = queue(people, None, uuids=("c1",))
    for attempt in range(1, removals.MAX_ATTEMPTS + 1):
        assert [r["id"] for r in claim(people, service_headers, "w1")] == [removal]
        done(people, service_headers, "w1", removal, f"checkpoint c1: bucket away ({attempt}); not removed")
        row = queued(people)[removal]
        assert (row.attempts, row.problem) == (
            attempt,
            f"checkpoint c1: bucket away ({attempt}); not removed",
        )
        assert claim(people, service_headers, "w2") == [], "not again before RETRY_SECONDS"
        age(people, removals.RETRY_SECONDS + 1)

    assert claim(people, service_headers, "w1") == []
    assert beat(people, service_headers, "w1") == 0
    assert queued(people)[removal].attempts == removals.MAX_ATTEMPTS, "kept for an admin to read"


@pytest.mark.parametrize("route", ["removals/claim", "removals/1/done"])  # the first removal queued
def test_the_removal_routes_are_for_the_service_alone(
    people: People, service_headers: dict[str, str], route: str
) -> None:
    removal = queue(people, None, uuids=("c1",))
    body = {"not_removed": ["not reported"]}
    assert people.client.post(f"/api/v1/internal/hosts/w1/{route}", json=body).status_code == 401
    answer = people.call("admin", "POST", f"/internal/hosts/w1/{route}", json=body)
    assert answer.status_code == 403, "a person's login is not the service token"
    bad = people.client.post(f"/api/v1/internal/hosts/bad host/{route}", json=body, headers=service_headers)
    assert bad.status_code == 422
    assert "host_id" in bad.text
    row = queued(people)[removal]
    assert (row.claimed_by, row.attempts) == (None, 0)


# --- the master removing its own files where no host reports ----------------------------------------


def test_the_master_removes_its_own_only_while_no_worker_host_reports(
    people: People, service_headers: dict[str, str], work_dir: Path
) -> None:
    (work_dir / "exp_7" / "trial_1").mkdir(parents=True)
    queue(people, MASTER_HOST, experiment_id=7)
    other = queue(people, "w9", experiment_id=7)
    beat(people, service_headers, "w1")

    assert people.remove_files() == 0, "a worker host reports: the files are the hosts' to remove"
    assert (work_dir / "exp_7" / "trial_1").is_dir()

    assert people.client.delete("/api/v1/internal/hosts/w1", headers=service_headers).status_code == 200
    assert people.remove_files() == 1
    assert not (work_dir / "exp_7").exists()
    assert list(queued(people)) == [other], "another host's folder is left to that host"


def test_a_work_dir_removal_takes_that_hosts_folder_of_the_experiment_alone(
    people: People, service_headers: dict[str, str], work_dir: Path
) -> None:
    e = people.add_experiment(owner="alice", state="COMPLETED")
    t1 = people.add_trial(e, state="COMPLETED")
    t2 = people.add_trial(e, state="COMPLETED")
    experiment = people.experiment(e)
    with people.db.begin() as conn:  # t1 ran on w1 then moved to w2; t2 ran on w2
        conn.execute(
            update(schema.trials).where(schema.trials.c.id == t1).values(host="w2", hosts=["w1", "w2"])
        )
        conn.execute(update(schema.trials).where(schema.trials.c.id == t2).values(host="w2", hosts=["w2"]))
        assert removals.queue_work_dirs(conn, experiment) == [
            "the trial work directory on w1",
            "the trial work directory on w2",
        ]
    for name in (f"exp_{e}", f"exp_{e + 1}", f"exp_{e}0"):
        (work_dir / name / "trial_1").mkdir(parents=True)

    (handed,) = claim(people, service_headers, "w1")
    assert file_cleanup.carry_out(as_removal(handed)) == []

    assert {p.name for p in work_dir.iterdir()} == {f"exp_{e + 1}", f"exp_{e}0"}
    assert [(row.host, row.claimed_by) for row in queued(people).values()] == [("w1", "w1"), ("w2", None)]


def as_removal(answer: dict[str, Any]) -> Removal:
    return Removal.model_validate(answer)


# --- the worker's side: celery_config.HostRemovals ---------------------------------------------------


def removal(removal_id: int) -> Removal:
    return Removal(
        id=removal_id,
        kind="checkpoints",
        experiment_id=1,
        pool=None,
        storage=S3,
        uuids=[f"c{removal_id}"],
        uid=None,
        gid=None,
    )


class FakeMaster:
    """The master as a host's client sees it: claims answer ``batches`` in turn, then nothing."""

    def __init__(self, *batches: list[Removal], waiting: int = 0) -> None:
        self.batches = list(batches)
        self.waiting = waiting
        self.claims: list[str] = []
        self.finished: list[tuple[str, int, list[str]]] = []
        self.closed = False

    def report_host(self, host_id: str, report: HostReport) -> object:
        return SimpleNamespace(removals_waiting=self.waiting)

    def claim_removals(self, host_id: str) -> list[Removal]:
        self.claims.append(host_id)
        return self.batches.pop(0) if self.batches else []

    def finish_removal(self, host_id: str, removal_id: int, not_removed: list[str]) -> None:
        self.finished.append((host_id, removal_id, not_removed))

    def leave_host(self, host_id: str) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def carry_out(removal: Removal) -> list[str]:
    """Removal 2's bucket is out of reach; the others go."""
    return [f"checkpoint {removal.uuids[0]}: bucket away; not removed"] if removal.id == 2 else []


def test_a_host_claims_until_nothing_is_left_and_reports_each_removal() -> None:
    master = FakeMaster([removal(1), removal(2)], [removal(3)])
    worker = HostRemovals(lambda: master, carry_out)

    assert worker.work_off("w1") == 3

    assert master.claims == ["w1", "w1", "w1"], "claims again until a claim hands out nothing"
    assert master.finished == [
        ("w1", 1, []),
        ("w1", 2, ["checkpoint c2: bucket away; not removed"]),
        ("w1", 3, []),
    ]
    assert master.closed


class RecordingRemovals(HostRemovals):
    def __init__(self) -> None:
        super().__init__(FakeMaster, carry_out)
        self.woken: list[str] = []

    def wake(self, host_id: str) -> None:
        self.woken.append(host_id)


@pytest.mark.parametrize(("waiting", "woken"), [(0, []), (3, ["w1"])])
def test_the_heartbeat_wakes_the_removals_only_when_some_wait(waiting: int, woken: list[str]) -> None:
    worker = RecordingRemovals()
    report = HostReport(slot_type="cpu", slots=2, queue="det-host-w1", address="w1")
    heartbeat = HostHeartbeat(lambda: FakeMaster(waiting=waiting), lambda: ("w1", report), removals=worker)

    assert heartbeat.beat()

    assert worker.woken == woken


def test_a_woken_host_carries_out_its_removals_in_its_own_thread() -> None:
    master = FakeMaster([removal(1)])
    finished = threading.Event()

    def carry_out_and_tell(removal: Removal) -> list[str]:
        finished.set()
        return []

    worker = HostRemovals(lambda: master, carry_out_and_tell)
    worker.start()
    try:
        worker.wake("w1")
        assert finished.wait(5)
    finally:
        worker.stop()
    assert worker._thread is not None
    worker._thread.join(5)
    assert master.finished == [("w1", 1, [])]
    assert worker.done == 1
