"""Checkpoint garbage collection: which checkpoints each storage policy keeps, and the removal of
the files of those it does not (master on SQLite)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import pytest
from sqlalchemy import insert, select, update

from det_airflow.api.models import TrialExit
from det_airflow.config import parse_config
from det_airflow.master import checkpoint_gc, lifecycle, removals, reports, routes_internal, schema, trials
from det_airflow.master.db import Database
from tests.unit.master import test_queue
from tests.unit.master.creating import Creator
from tests.unit.master.owners import checkpoint_root, owned_by
from tests.unit.master.people_app import People
from tests.unit.master.test_queue import TASK, set_pool_slots, trial_ids

A, B, C = (str(UUID(int=n)) for n in (1, 2, 3))

# No checkpoint_storage section of its own: Determined's policy defaults apply.
CONFIG = {"name": "gc", "entrypoint": "python3 train.py", "searcher": {"name": "single", "metric": "loss"}}


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = Database(f"sqlite:///{tmp_path / 'det.db'}")
    database.migrate()
    yield database
    database.engine.dispose()


def experiment(db: Database, trials: int = 1) -> tuple[int, list[int]]:
    """An experiment and its trials: (experiment, [trial, ...])."""
    with db.begin() as conn:
        e = conn.execute(
            insert(schema.experiments).values(
                name="e", owner="alice", labels=[], state="ACTIVE", config={}, config_yaml="",
                resource_pool="default_pool", searcher_name="single", search_done=False, progress=0.0,
                start_time=lifecycle.now(), archived=False,
            ).returning(schema.experiments.c.id)
        ).scalar_one()  # fmt: skip
        trial_ids = [
            conn.execute(
                insert(schema.trials)
                .values(experiment_id=e, request_id=r, state="RUNNING", hparams={}, trial_seed=r, summary={})
                .returning(schema.trials.c.id)
            ).scalar_one()
            for r in range(1, trials + 1)
        ]
    return e, trial_ids


def save(
    db: Database,
    e: int,
    trial: int,
    uuid: str,
    steps: int,
    metric: float | None = None,
    *,
    state: str = "COMPLETED",
    path: str | None = None,
) -> None:
    """A checkpoint the trial reported; like a real report, it becomes the trial's latest."""
    with db.begin() as conn:
        conn.execute(
            insert(schema.checkpoints).values(
                uuid=uuid, trial_id=trial, experiment_id=e, steps_completed=steps, state=state,
                metadata={}, resources={}, size=0, storage={"type": "shared_fs", "path": path or f"/ckpt/{uuid}"},
                report_time=lifecycle.now(), validation_metric=metric,
            )
        )  # fmt: skip
        if state == "COMPLETED":
            conn.execute(
                update(schema.trials).where(schema.trials.c.id == trial).values(latest_checkpoint=uuid)
            )


def to_delete(db: Database, e: int, *, smaller_is_better: bool = True, **policy: int) -> set[str]:
    """The uuids GC would delete under the policy given (Determined's defaults otherwise)."""
    cfg = parse_config(
        {
            "name": "gc",
            "entrypoint": "python3 train.py",
            "searcher": {
                "name": "single",
                "metric": "loss",
                "smaller_is_better": smaller_is_better,
                "max_length": {"batches": 10},
            },
            "checkpoint_storage": {"type": "shared_fs", "host_path": "/ckpt", **policy},
        }
    )
    with db.read() as conn:
        return {row.uuid for row in checkpoint_gc.checkpoints_to_delete(conn, e, cfg)}


# --- which checkpoints are kept ------------------------------------------------------------------


def test_by_default_each_trial_keeps_its_best_and_its_latest(db: Database) -> None:
    e, (t1, t2) = experiment(db, trials=2)
    for uuid, steps, loss in [("a", 10, 0.5), ("b", 20, 0.3), ("c", 30, 0.4), ("d", 40, 0.6)]:
        save(db, e, t1, uuid, steps, loss)
    for uuid, steps, loss in [("p", 10, 0.9), ("q", 20, 0.8)]:
        save(db, e, t2, uuid, steps, loss)

    # Trial 1 keeps b (lowest loss) and d (latest); trial 2's q is both its best and its latest.
    assert to_delete(db, e) == {"a", "c", "p"}


def test_save_experiment_best_ranks_all_trials_together(db: Database) -> None:
    e, (t1, t2) = experiment(db, trials=2)
    for uuid, steps, loss in [("a", 10, 0.1), ("b", 20, 0.2), ("c", 30, 0.9)]:
        save(db, e, t1, uuid, steps, loss)
    for uuid, steps, loss in [("p", 10, 0.3), ("q", 20, 0.4), ("r", 30, 0.8)]:
        save(db, e, t2, uuid, steps, loss)

    # The experiment's two best are both trial 1's; each trial also keeps its latest (c, r).
    assert to_delete(db, e, save_experiment_best=2, save_trial_best=0) == {"p", "q"}
    # With Determined's save_trial_best of 1 too, trial 2 keeps its own best, p.
    assert to_delete(db, e, save_experiment_best=2) == {"q"}


@pytest.mark.parametrize(
    ("smaller_is_better", "deleted"),
    [(True, {"a"}), (False, {"b"})],
    ids=["smaller-is-better", "larger-is-better"],
)
def test_best_follows_the_searcher_direction(
    db: Database, smaller_is_better: bool, deleted: set[str]
) -> None:
    e, (t,) = experiment(db)
    for uuid, steps, accuracy in [("a", 10, 0.9), ("b", 20, 0.5), ("c", 30, 0.7)]:
        save(db, e, t, uuid, steps, accuracy)

    # c is kept as the latest either way; the best is b when smaller is better, a when larger is.
    assert to_delete(db, e, smaller_is_better=smaller_is_better) == deleted


@pytest.mark.parametrize("smaller_is_better", [True, False])
def test_a_checkpoint_without_a_metric_is_never_better_than_one_with_a_metric(
    db: Database, smaller_is_better: bool
) -> None:
    e, (t,) = experiment(db)
    save(db, e, t, "a", 10)
    save(db, e, t, "b", 20, 0.5)
    save(db, e, t, "c", 30)
    save(db, e, t, "d", 40)

    # b is the best whichever the direction; d, without a metric, is still kept as the latest.
    assert to_delete(db, e, smaller_is_better=smaller_is_better) == {"a", "c"}
    # Only when too few have a metric do checkpoints without one fill the best places, later first.
    deleted = to_delete(db, e, smaller_is_better=smaller_is_better, save_trial_best=3, save_trial_latest=0)
    assert deleted == {"a"}


def test_with_nothing_to_save_only_each_trials_latest_checkpoint_is_kept(db: Database) -> None:
    e, (t1, t2) = experiment(db, trials=2)
    save(db, e, t1, "a", 10, 0.1)
    save(db, e, t1, "b", 20, 0.9)
    save(db, e, t2, "p", 10, 0.2)
    save(db, e, t2, "q", 20, 0.3)
    with db.begin() as conn:  # trial 2 resumes from p, not from its newest checkpoint
        conn.execute(update(schema.trials).where(schema.trials.c.id == t2).values(latest_checkpoint="p"))

    assert to_delete(db, e, save_experiment_best=0, save_trial_best=0, save_trial_latest=0) == {"a", "q"}


def test_only_completed_checkpoints_of_the_experiment_count(db: Database) -> None:
    e, (t,) = experiment(db)
    save(db, e, t, "deleted", 10, 0.1, state="DELETED")
    save(db, e, t, "partial", 15, 0.1, state="PARTIAL")
    save(db, e, t, "a", 20, 0.5)
    save(db, e, t, "b", 30, 0.4)
    save(db, e, t, "c", 40, 0.9)
    other, (other_trial,) = experiment(db)
    save(db, other, other_trial, "elsewhere-1", 10, 0.1)
    save(db, other, other_trial, "elsewhere-2", 20, 0.2)
    save(db, other, other_trial, "elsewhere-3", 30, 0.3)

    # The better losses of "deleted" and "partial" take no place: b is the best, c the latest.
    assert to_delete(db, e) == {"a"}


def test_the_rows_carry_what_the_caller_needs_to_delete_them(db: Database) -> None:
    e, (t,) = experiment(db)
    save(db, e, t, "a", 10, 0.5, path="/ckpt/a")
    save(db, e, t, "b", 20, 0.4)
    save(db, e, t, "c", 30, 0.6)

    with db.read() as conn:
        (row,) = checkpoint_gc.checkpoints_to_delete(conn, e, parse_config(CONFIG))
    assert (row.uuid, row.trial_id, row.state, row.storage["path"]) == ("a", t, "COMPLETED", "/ckpt/a")


# --- removing the files --------------------------------------------------------------------------


def folder(parent: Path, name: str) -> Path:
    path = parent / name
    path.mkdir(parents=True)
    (path / "state.pt").write_bytes(b"weights")
    return path


def stored_in(db: Database, e: int, host_path: Path) -> None:
    """The experiment's config gets checkpoint_storage at ``host_path`` (Determined's policy defaults)."""
    storage = {"type": "shared_fs", "host_path": str(host_path)}
    with db.begin() as conn:
        conn.execute(
            update(schema.experiments)
            .where(schema.experiments.c.id == e)
            .values(config={**CONFIG, "checkpoint_storage": storage})
        )


def states(db: Database, *uuids: str) -> list[str]:
    with db.read() as conn:
        found = dict(conn.execute(select(schema.checkpoints.c.uuid, schema.checkpoints.c.state)).all())
    return [found[uuid] for uuid in uuids]


def test_the_folder_named_after_the_uuid_is_removed_by_the_queued_removal(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = checkpoint_root(tmp_path / "ckpt")
    monkeypatch.setenv("AIRFLOW__DET__CHECKPOINT_STORAGE_PATH", str(root))
    gone = owned_by(db, "alice", folder(root, A))
    kept = owned_by(db, "alice", folder(root, B))
    e, (t,) = experiment(db)
    stored_in(db, e, root)
    save(db, e, t, A, 10, 0.5, path=str(gone))
    save(db, e, t, B, 20, 0.4, path=str(kept))

    assert checkpoint_gc.collect(db, e) == []
    # The row goes at once; the folder waits for the removal, done outside the request.
    assert states(db, A, B) == ["DELETED", "COMPLETED"]
    assert (gone / "state.pt").exists()

    assert removals.remove_here(db) == 1
    assert not gone.exists()
    assert (kept / "state.pt").exists()
    with db.read() as conn:
        assert removals.pending(conn) == []


def test_a_folder_not_where_the_experiments_storage_puts_the_uuid_is_left_alone(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = checkpoint_root(tmp_path / "ckpt")
    monkeypatch.setenv("AIRFLOW__DET__CHECKPOINT_STORAGE_PATH", str(root))
    shared = folder(tmp_path, "shared")
    e, (t,) = experiment(db)
    stored_in(db, e, root)
    save(db, e, t, A, 10, 0.9, path=str(shared))
    save(db, e, t, B, 20, 0.9)
    save(db, e, t, C, 30, 0.9, path=str(root / C))  # where the storage puts it, already gone
    save(db, e, t, "best", 40, 0.1, path=str(root / "best"))
    with db.begin() as conn:  # B's report named no path at all
        conn.execute(update(schema.checkpoints).where(schema.checkpoints.c.uuid == B).values(storage={}))

    problems = checkpoint_gc.collect(db, e)

    assert len(problems) == 2, problems
    assert problems[0].startswith(f"checkpoint {A}: its files are not at a known path")
    assert problems[1].startswith(f"checkpoint {B}: its files are not at a known path")
    assert states(db, A, B, C, "best") == ["DELETED", "DELETED", "DELETED", "COMPLETED"]
    with db.read() as conn:
        assert [row.uuids for row in removals.pending(conn)] == [[C]]
    assert removals.remove_here(db) == 1
    assert (shared / "state.pt").exists()
    with db.read() as conn:
        assert removals.pending(conn) == [], "a folder already gone is nothing to report"


def test_a_trials_exit_deletes_what_the_policy_does_not_keep_rows_then_files(
    people: People, creator: Creator
) -> None:
    # The experiment keeps the defaults: each trial's best (by loss) and its latest.
    set_pool_slots(2)
    e = test_queue.experiment(people)
    (t,) = trial_ids(people, e)
    with people.db.begin() as conn:
        conn.execute(update(schema.experiments).where(schema.experiments.c.id == e).values(search_done=True))
        trials.acquire(conn, e, 0, TASK, dry_run=False)
    folders = {}
    ids = {f"c{steps}": str(UUID(int=steps)) for steps in (10, 20, 30)}
    for steps, loss in ((10, 0.5), (20, 0.2), (30, 0.9)):
        folders[f"c{steps}"] = folder = people.storage / ids[f"c{steps}"]
        folder.mkdir()
        (folder / "state.pt").write_bytes(b"weights")
        owned_by(people.db, people.experiment(e).owner, folder)
        with people.db.begin() as conn:
            reports.report_metrics(
                conn, t, [{"group": "validation", "steps_completed": steps, "metrics": {"loss": loss}}]
            )
            reports.register_checkpoint(
                conn, t, {"uuid": ids[f"c{steps}"], "steps_completed": steps, "resources": {}}
            )

    assert routes_internal.trial_exit(t, TrialExit(exit_code=0))["trial"]["state"] == "COMPLETED"

    assert {name: people.checkpoint(ids[name]).state for name in folders} == {
        "c10": "DELETED",
        "c20": "COMPLETED",  # its best
        "c30": "COMPLETED",  # its latest
    }
    # The rows change with the trial's exit; the files go when the queued removal runs.
    assert all(folder.exists() for folder in folders.values())
    assert people.remove_files() == 1
    assert {name for name, folder in folders.items() if folder.exists()} == {"c20", "c30"}
    with people.db.read() as conn:
        (change,) = [c for c in lifecycle.history(conn, "checkpoint", ids["c10"]) if c["to"] == "DELETED"]
    assert "save_trial_best" in change["reason"]
