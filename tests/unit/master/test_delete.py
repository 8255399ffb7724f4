"""`det e delete`: an ended experiment's study and rows go, its files through the removals it
queues; what cannot go is reported.

Airflow's own records are the subject of tests/integration/test_delete.py; here the calls into
Airflow are recorded so the det side can be checked on its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from sqlalchemy import func, select

from det_airflow.config import config_to_dict, parse_config
from det_airflow.dagfactory import experiment_dag_id, experiment_file
from det_airflow.master import (
    airflow_bridge,
    experiment_deletion,
    experiment_files,
    lifecycle,
    removals,
    schema,
    search,
)
from det_airflow.master import db as master_db
from det_airflow.master.db import Database
from tests.unit.master.owners import checkpoint_root, owned_by

EXAMPLE = Path(__file__).parents[3] / "examples" / "mnist_pytorch" / "random.yaml"
NOW = datetime(2026, 1, 1, tzinfo=UTC)
# The master's own host: where no trial recorded a host, its trial work folder is queued there.
HOST = "master-host"
QUEUED = [
    "2 checkpoints (shared_fs)",
    "its TensorBoard files (shared_fs)",
    f"the trial work directory on {HOST}",
]


@dataclass
class AirflowRecords:
    """What the delete asked of Airflow, and the DAG run states it was told."""

    run_states: dict[tuple[str, str], str] = field(default_factory=dict)
    deleted_dags: list[str] = field(default_factory=list)
    deleted_runs: list[tuple[str, str]] = field(default_factory=list)
    yaml_present_at_dag_delete: list[bool] = field(default_factory=list)
    reparses: int = 0
    refuse: str | None = None
    dags_folder: Path = Path()

    def running_dag_runs(self, dag_id: str, run_id: str | None = None) -> list[str]:
        return [
            run
            for (dag, run), state in self.run_states.items()
            if dag == dag_id and state == "running" and run_id in (None, run)
        ]

    def delete_dag(self, dag_id: str) -> None:
        if self.refuse:
            raise airflow_bridge.AirflowRecordError(self.refuse)
        number = int(dag_id.rsplit("_", 1)[1])
        self.yaml_present_at_dag_delete.append(experiment_file(self.dags_folder, number).exists())
        self.deleted_dags.append(dag_id)

    def delete_dag_run(self, dag_id: str, run_id: str) -> None:
        if self.refuse:
            raise airflow_bridge.AirflowRecordError(self.refuse)
        self.deleted_runs.append((dag_id, run_id))

    def request_reparse(self) -> None:
        self.reparses += 1


@dataclass
class Master:
    db: Database
    airflow: AirflowRecords
    dags: Path
    work: Path
    storage: Path

    def add_experiment(
        self, *, state: str = "COMPLETED", sampler: str = "random", dag_id: str | None = None
    ) -> int:
        raw: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
        raw["searcher"]["sampler"] = sampler
        raw["checkpoint_storage"] = {"type": "shared_fs", "host_path": str(self.storage)}
        config = config_to_dict(parse_config(raw))
        with self.db.begin() as conn:
            experiment_id = int(
                conn.execute(
                    schema.experiments.insert().values(
                        name="digits",
                        owner="admin",
                        labels=[],
                        state=state,
                        config=config,
                        config_yaml=yaml.safe_dump(raw),
                        resource_pool="default_pool",
                        searcher_name="random",
                        search_done=True,
                        progress=1.0,
                        start_time=NOW,
                        archived=False,
                    )
                ).inserted_primary_key[0]  # type: ignore[index]
            )
            own_dag = dag_id is None
            conn.execute(
                schema.experiments.update()
                .where(schema.experiments.c.id == experiment_id)
                .values(dag_id=experiment_dag_id(experiment_id) if own_dag else dag_id, dag_run_id="run-1")
            )
            trial_id = int(
                conn.execute(
                    schema.trials.insert().values(
                        experiment_id=experiment_id,
                        request_id=0,
                        state="COMPLETED",
                        hparams={},
                        trial_seed=1,
                        summary={},
                    )
                ).inserted_primary_key[0]  # type: ignore[index]
            )
            for n in range(2):
                uuid = f"ckpt-{experiment_id}-{n}"
                (self.storage / uuid).mkdir(parents=True)
                (self.storage / uuid / "state.pt").write_bytes(b"weights")
                conn.execute(
                    schema.checkpoints.insert().values(
                        uuid=uuid,
                        trial_id=trial_id,
                        experiment_id=experiment_id,
                        steps_completed=n,
                        state="COMPLETED",
                        metadata={},
                        resources={},
                        size=7,
                        storage={"type": "shared_fs", "path": str(self.storage / uuid)},
                        report_time=NOW,
                    )
                )
            conn.execute(
                schema.metrics.insert().values(
                    trial_id=trial_id,
                    group="training",
                    steps_completed=1,
                    metrics={"loss": 1.0},
                    report_time=NOW,
                    trial_run_id=1,
                )
            )
        events = self.storage / "tensorboard" / "experiment" / str(experiment_id) / "trial" / str(trial_id)
        events.mkdir(parents=True)
        (events / "events.out.tfevents.1.host.1.1").write_bytes(b"events")
        for folder in [*self.storage.glob(f"ckpt-{experiment_id}-*"), self.storage / "tensorboard"]:
            owned_by(self.db, "admin", folder)
        if own_dag:
            experiment_files.write_experiment_file(experiment_id, config)
        (self.work / f"exp_{experiment_id}" / f"trial_{trial_id}").mkdir(parents=True)
        return experiment_id

    def rows_of(self, experiment_id: int) -> dict[str, int]:
        with self.db.read() as conn:
            trial_ids = select(schema.trials.c.id).where(schema.trials.c.experiment_id == experiment_id)
            return {
                "experiments": conn.execute(
                    select(func.count())
                    .select_from(schema.experiments)
                    .where(schema.experiments.c.id == experiment_id)
                ).scalar_one(),
                "checkpoints": conn.execute(
                    select(func.count())
                    .select_from(schema.checkpoints)
                    .where(schema.checkpoints.c.experiment_id == experiment_id)
                ).scalar_one(),
                "metrics": conn.execute(
                    select(func.count())
                    .select_from(schema.metrics)
                    .where(schema.metrics.c.trial_id.in_(trial_ids))
                ).scalar_one(),
            }

    def leftovers(self, experiment_id: int) -> list[Path]:
        """Files of the experiment still on disk."""
        candidates = [
            experiment_file(self.dags, experiment_id),
            self.work / f"exp_{experiment_id}",
            *self.storage.glob(f"ckpt-{experiment_id}-*"),
        ]
        return [path for path in candidates if path.exists()]


@pytest.fixture
def master(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Master]:
    dags, work, storage = tmp_path / "dags", tmp_path / "work", tmp_path / "checkpoints"
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"sqlite:///{tmp_path / 'airflow.db'}")
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(dags))
    monkeypatch.setenv("AIRFLOW__DET__TRIAL_WORK_DIR", str(work))
    monkeypatch.setenv("AIRFLOW__DET__CHECKPOINT_STORAGE_PATH", str(checkpoint_root(storage)))
    monkeypatch.setenv("AIRFLOW__DET__HOST_ID", HOST)
    master_db.get_database.cache_clear()
    db = master_db.get_database()
    db.migrate()
    records = AirflowRecords(dags_folder=dags)
    monkeypatch.setattr(airflow_bridge, "running_dag_runs", records.running_dag_runs)
    monkeypatch.setattr(airflow_bridge, "delete_dag", records.delete_dag)
    monkeypatch.setattr(airflow_bridge, "delete_dag_run", records.delete_dag_run)
    monkeypatch.setattr(airflow_bridge, "request_reparse", records.request_reparse)
    yield Master(db, records, dags, work, storage)
    db.engine.dispose()
    master_db.get_database.cache_clear()


def test_deleting_a_created_experiment_removes_its_yaml_then_its_dag_files_and_rows(
    master: Master, monkeypatch: pytest.MonkeyPatch
) -> None:
    experiment_id = master.add_experiment()
    assert len(master.leftovers(experiment_id)) == 4
    events = master.storage / "tensorboard" / "experiment" / str(experiment_id)
    assert events.is_dir()

    assert experiment_deletion.delete_experiment(master.db, experiment_id) == ([], QUEUED)

    # The rows and the DAG file go in the request; the checkpoints, TensorBoard files and the work
    # folder are queued.
    assert len(master.leftovers(experiment_id)) == 3 and events.is_dir()
    assert removals.remove_here(master.db) == 3
    assert master.leftovers(experiment_id) == []
    assert not events.exists() and (master.storage / "tensorboard" / "experiment").is_dir()
    assert master.rows_of(experiment_id) == {"experiments": 0, "checkpoints": 0, "metrics": 0}
    # Its DAG goes once a parse has marked it stale and none has written it since: never under a
    # parse in flight.
    assert master.airflow.deleted_dags == [] and master.airflow.reparses == 1
    asked: list[float] = []

    def stale_dags(prefix: str, quiet_seconds: float = 0.0) -> list[str]:
        asked.append(quiet_seconds)
        return [experiment_dag_id(experiment_id)]

    monkeypatch.setattr(airflow_bridge, "stale_dags", stale_dags)
    with master.db.read() as conn:
        assert experiment_files.forget_deleted_experiment_dags(conn) == [experiment_dag_id(experiment_id)]
    assert master.airflow.deleted_dags == [experiment_dag_id(experiment_id)]
    assert master.airflow.yaml_present_at_dag_delete == [False]
    assert asked == [experiment_files.STALE_QUIET_SECONDS] and asked[0] > 0
    assert master.airflow.deleted_runs == []


def test_an_experiment_of_a_yaml_in_dags_removes_only_its_own_run(master: Master) -> None:
    experiment_id = master.add_experiment(dag_id="det_digits")
    master.airflow.run_states[("det_digits", "another-experiments-run")] = "running"

    assert experiment_deletion.delete_experiment(master.db, experiment_id) == ([], QUEUED)

    assert master.airflow.deleted_runs == [("det_digits", "run-1")]
    assert master.airflow.deleted_dags == []
    assert master.rows_of(experiment_id)["experiments"] == 0


def test_other_experiments_keep_everything(master: Master) -> None:
    kept = master.add_experiment()
    deleted = master.add_experiment()

    experiment_deletion.delete_experiment(master.db, deleted)
    removals.remove_here(master.db)

    assert master.leftovers(deleted) == []
    assert len(master.leftovers(kept)) == 4
    assert master.rows_of(kept) == {"experiments": 1, "checkpoints": 2, "metrics": 1}


@pytest.mark.parametrize("state", ["ACTIVE", "PAUSED", "STOPPING_CANCELED"])
def test_an_experiment_that_has_not_ended_is_refused_and_keeps_everything(master: Master, state: str) -> None:
    experiment_id = master.add_experiment(state=state)

    with pytest.raises(lifecycle.StateError, match=f"is {state}; cancel or kill it before deleting it"):
        experiment_deletion.delete_experiment(master.db, experiment_id)

    assert len(master.leftovers(experiment_id)) == 4
    assert master.rows_of(experiment_id) == {"experiments": 1, "checkpoints": 2, "metrics": 1}
    assert master.airflow.deleted_dags == []
    with master.db.read() as conn:
        assert removals.pending(conn) == []


@pytest.mark.parametrize("run_id", ["run-1", "a-run-it-never-registered"])
def test_an_ended_experiment_whose_dag_run_still_runs_is_refused(master: Master, run_id: str) -> None:
    experiment_id = master.add_experiment()
    master.airflow.run_states[(experiment_dag_id(experiment_id), run_id)] = "running"

    with pytest.raises(lifecycle.StateError, match=f"DAG run '{run_id}' .* is still running in Airflow"):
        experiment_deletion.delete_experiment(master.db, experiment_id)

    assert len(master.leftovers(experiment_id)) == 4
    assert master.rows_of(experiment_id)["experiments"] == 1


def test_what_cannot_be_removed_is_reported_and_the_rest_still_goes(master: Master) -> None:
    experiment_id = master.add_experiment(dag_id="det_digits")  # its run of a YAML's DAG goes in the request
    master.airflow.refuse = "TaskInstances still running"
    work_dir = master.work / f"exp_{experiment_id}"
    for child in sorted(work_dir.rglob("*"), reverse=True):
        child.rmdir()
    work_dir.rmdir()
    work_dir.write_text("not a folder")  # only folders are removed
    with master.db.begin() as conn:
        conn.execute(
            schema.checkpoints.update()
            .where(schema.checkpoints.c.uuid == f"ckpt-{experiment_id}-1")
            .values(storage={"type": "shared_fs", "path": "/"})
        )

    not_removed, removing = experiment_deletion.delete_experiment(master.db, experiment_id)

    assert not_removed == [
        "TaskInstances still running",
        f"checkpoint ckpt-{experiment_id}-1: its files are not at a known path ('/')",
    ]
    assert removing == [
        "1 checkpoint (shared_fs)",
        "its TensorBoard files (shared_fs)",
        f"the trial work directory on {HOST}",
    ]
    assert master.rows_of(experiment_id)["experiments"] == 0
    assert removals.remove_here(master.db) == 3
    assert master.leftovers(experiment_id) == [work_dir, master.storage / f"ckpt-{experiment_id}-1"]
    # What the removal could not do stays queued with its problem, to be tried again.
    with master.db.read() as conn:
        (left,) = removals.pending(conn, [experiment_id])
    assert (left.kind, left.host, left.attempts) == ("work_dir", HOST, 1)
    assert left.problem == (
        f"trial work directory at {work_dir}: not a folder (a link or a file; links are not followed); "
        "not removed"
    )


def test_the_optuna_study_of_a_tpe_experiment_is_removed(master: Master) -> None:
    experiment_id = master.add_experiment(sampler="tpe")
    storage = search.optuna_storage_url(master.db.url)
    optuna.create_study(study_name=search.study_name(experiment_id), storage=storage)
    optuna.create_study(study_name="someone-elses", storage=storage)

    not_removed, _ = experiment_deletion.delete_experiment(master.db, experiment_id)

    assert not_removed == []
    assert optuna.get_all_study_names(storage) == ["someone-elses"]


def test_an_unknown_experiment_is_not_found(master: Master) -> None:
    with pytest.raises(lifecycle.NotFound, match="experiment 42 not found"):
        experiment_deletion.delete_experiment(master.db, 42)


def _finished_runs(master: Master):  # type: ignore[no-untyped-def]
    def finished(runs: list[tuple[str, str]]) -> set[tuple[str, str]]:
        return {run for run in runs if master.airflow.run_states.get(run) in ("success", "failed")}

    return finished


def test_finished_experiments_leave_the_parsed_folder_once_their_dag_run_has_ended(
    master: Master, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(airflow_bridge, "finished_dag_runs", _finished_runs(master))
    ended = master.add_experiment()
    still_running_run = master.add_experiment()
    active = master.add_experiment(state="ACTIVE")
    master.airflow.run_states[(experiment_dag_id(ended), "run-1")] = "success"
    master.airflow.run_states[(experiment_dag_id(still_running_run), "run-1")] = "running"
    master.airflow.run_states[(experiment_dag_id(active), "run-1")] = "running"

    with master.db.read() as conn:
        assert experiment_files.retire_finished_experiment_files(conn) == [ended]

    assert not experiment_file(master.dags, ended).exists()
    assert (experiment_file(master.dags, ended).parent / "finished" / f"exp_{ended}.yaml").is_file()
    # Its last tasks still need the DAG while the run goes on; an active experiment keeps it anyway.
    assert experiment_file(master.dags, still_running_run).exists()
    assert experiment_file(master.dags, active).exists()
    with master.db.read() as conn:
        assert experiment_files.retire_finished_experiment_files(conn) == []


def test_deleting_a_retired_experiment_removes_its_retired_config(
    master: Master, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(airflow_bridge, "finished_dag_runs", _finished_runs(master))
    experiment_id = master.add_experiment()
    master.airflow.run_states[(experiment_dag_id(experiment_id), "run-1")] = "success"
    with master.db.read() as conn:
        experiment_files.retire_finished_experiment_files(conn)

    assert experiment_deletion.delete_experiment(master.db, experiment_id) == ([], QUEUED)

    assert list(master.dags.rglob(f"exp_{experiment_id}.yaml")) == []


def test_a_deleted_experiments_dag_registered_again_is_forgotten_and_nothing_else(
    master: Master, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = master.add_experiment()
    deleted = master.add_experiment()
    assert experiment_deletion.delete_experiment(master.db, deleted) == ([], QUEUED)
    master.airflow.deleted_dags.clear()
    # What Airflow reports as stale: the deleted experiment's DAG, parsed back by a parse in flight
    # (and maybe given a run by its @once schedule), beside a kept experiment's DAG and a user's YAML DAG that only look alike.
    stale = [experiment_dag_id(deleted), experiment_dag_id(kept), "det_exp_notes"]
    monkeypatch.setattr(
        airflow_bridge,
        "stale_dags",
        lambda prefix, quiet_seconds=0.0: [d for d in stale if d.startswith(prefix)],
    )

    with master.db.read() as conn:
        assert experiment_files.forget_deleted_experiment_dags(conn) == [experiment_dag_id(deleted)]

    assert master.airflow.deleted_dags == [experiment_dag_id(deleted)]
