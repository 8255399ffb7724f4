"""Creating experiments never races Airflow's scheduler: 200 creates, three at a time, half on
PostgreSQL and half on SQLite, with the scheduler looping all along. No experiment gets more than one
DAG run, a run is always the master's, and the scheduler never stops (a `@once` run made by both once
stopped it with a duplicate key, and nothing was scheduled until it was restarted)."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from det_airflow.localairflow import LocalAirflow
from tests.integration.det_env import TERMINAL, DetEnv, wait_until

pytestmark = pytest.mark.integration

# Per database: 200 creates in all (the race was seen about once in 130 creates).
CREATES = 100
AT_ONCE = 3
CONFIG = yaml.safe_dump(
    {
        "name": "create-race",
        "entrypoint": "python3 -c pass",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
        "max_restarts": 0,
    }
)


@pytest.fixture(scope="module", params=["postgres", "sqlite"])
def det(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DetEnv]:
    af: LocalAirflow = request.getfixturevalue("airflow" if request.param == "postgres" else "airflow_sqlite")
    yield DetEnv.install(af, tmp_path_factory.mktemp("det-config"))


def _create_and_kill(det: DetEnv) -> tuple[int, str]:
    """One experiment, created paused and killed at once: the master writes its DAG and starts its
    run, the scheduler sees both; nothing trains."""
    with det.api() as client:
        made = client.post("/det/api/v1/experiments", json={"config": CONFIG, "paused": True})
        assert made.status_code == 200, made.text
        experiment = made.json()["experiment"]
        killed = client.post(f"/det/api/v1/experiments/{experiment['id']}/kill")
        assert killed.status_code == 200, killed.text
    return int(experiment["id"]), str(experiment["dag_id"])


def _runs_of(det: DetEnv, dag_ids: list[str]) -> dict[str, list[str]]:
    runs: dict[str, list[str]] = {dag_id: [] for dag_id in dag_ids}
    with det.api() as client:
        answer = client.post(
            "/api/v2/dags/~/dagRuns/list", json={"dag_ids": dag_ids, "page_limit": 10 * len(dag_ids)}
        )
        for run in answer.raise_for_status().json()["dag_runs"]:
            runs[run["dag_id"]].append(run["dag_run_id"])
    return runs


def test_two_hundred_creates_never_race_the_scheduler(det: DetEnv) -> None:
    scheduler = det.af.status()["scheduler"]
    log: Path = det.af.log_file("scheduler")
    offset = log.stat().st_size

    with concurrent.futures.ThreadPoolExecutor(AT_ONCE) as pool:
        made = list(pool.map(lambda _: _create_and_kill(det), range(CREATES)))

    ids = [experiment_id for experiment_id, _ in made]
    wait_until(
        lambda: all(det.get(f"/experiments/{e}")["experiment"]["state"] in TERMINAL for e in ids),
        "every created experiment ended",
        timeout=600,
    )
    runs = _runs_of(det, [dag_id for _, dag_id in made])
    several = {dag_id: found for dag_id, found in runs.items() if len(found) > 1}
    assert several == {}, "no experiment has more than one DAG run"
    assert all(found in ([], [f"det__{dag_id.removeprefix('det_')}"]) for dag_id, found in runs.items())
    # A create that could not write its DAG and run at once (seen on SQLite in CI, for the first two
    # creates) falls back to a parse and leaves the start to housekeeping, which starts no run for
    # an experiment killed meanwhile: at most one run each, always the master's.
    assert any(runs.values()), "the creates started no DAG run at all"
    # The scheduler that was running before the creates is still the one running, and it met no
    # duplicate run meanwhile.
    assert det.af.status()["scheduler"] == scheduler
    since = log.read_bytes()[offset:].decode(errors="replace")
    for sign in ("IntegrityError", "UniqueViolation", "UNIQUE constraint failed", "duplicate key"):
        assert sign not in since, f"{sign} in the scheduler's log:\n{since[-3000:]}"
