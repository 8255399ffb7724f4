"""`localairflow init` sets aside the experiment files of another database: a home made anew, or
one switched between SQLite and the Celery mode's PostgreSQL, must not run the DAGs of experiments
its master never created."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import create_engine

from det_airflow.localairflow import SET_ASIDE_SUBDIR, set_aside_unknown_experiment_files
from det_airflow.master import schema


def experiment_files(dags: Path, *ids: int) -> None:
    folder = dags / "experiments"
    folder.mkdir(parents=True, exist_ok=True)
    for experiment_id in ids:
        (folder / f"exp_{experiment_id}.yaml").write_text(f"name: e{experiment_id}\n")


def database(tmp_path: Path, *known: int) -> str:
    url = f"sqlite:///{tmp_path / 'airflow.db'}"
    engine = create_engine(url)
    schema.metadata.create_all(engine)
    with engine.begin() as conn:
        for experiment_id in known:
            conn.execute(
                schema.experiments.insert().values(
                    id=experiment_id, name="e", owner="alice", labels=[], state="ACTIVE", config={},
                    config_yaml="", resource_pool="default_pool", searcher_name="single",
                    search_done=False, progress=0.0, start_time=datetime.now(UTC), archived=False,
                )
            )  # fmt: skip
    engine.dispose()
    return url


def test_files_of_experiments_the_database_does_not_hold_are_set_aside(tmp_path: Path) -> None:
    dags = tmp_path / "dags"
    experiment_files(dags, 1, 2, 3)
    (dags / "experiments" / "team.yaml").write_text("name: dropped in by hand\n")

    moved = set_aside_unknown_experiment_files(dags, database(tmp_path, 2))

    assert [p.name for p in moved] == ["exp_1.yaml", "exp_3.yaml"]
    assert sorted(p.name for p in (dags / "experiments").glob("*.yaml")) == ["exp_2.yaml", "team.yaml"]
    assert (dags / "experiments" / SET_ASIDE_SUBDIR / "exp_1.yaml").read_text() == "name: e1\n"


def test_a_new_database_sets_aside_every_experiment_file(tmp_path: Path) -> None:
    dags = tmp_path / "dags"
    experiment_files(dags, 1)
    url = f"sqlite:///{tmp_path / 'empty.db'}"  # no det tables yet

    assert [p.name for p in set_aside_unknown_experiment_files(dags, url)] == ["exp_1.yaml"]
    experiment_files(dags, 1)  # the same id written again for yet another database
    (second,) = set_aside_unknown_experiment_files(dags, url)
    assert second.name.startswith("exp_1.") and second.name != "exp_1.yaml"
    assert (dags / "experiments" / SET_ASIDE_SUBDIR / "exp_1.yaml").exists(), "the first one is kept"


def test_nothing_to_set_aside_touches_no_database(tmp_path: Path) -> None:
    assert set_aside_unknown_experiment_files(tmp_path / "dags", "postgresql://nobody@127.0.0.1:1/none") == []
