"""The quickstart's path: Airflow on SQLite, `det experiment create ... -f` followed to the end."""

from __future__ import annotations

import re

import pytest

from tests.integration.det_env import EXAMPLE, DetEnv, wait_until

pytestmark = pytest.mark.integration


def test_const_example_followed_to_completed_on_sqlite(
    airflow_sqlite, airflow_sqlite_api, tmp_path_factory
) -> None:
    det = DetEnv.install(airflow_sqlite, tmp_path_factory.mktemp("det-config"))

    result = det.det("experiment", "create", str(EXAMPLE / "const.yaml"), str(EXAMPLE), "-f", timeout=600)

    out = result.stdout
    assert re.search(
        r"Preparing files \(.*mnist_pytorch\) to send to master\.\.\. [\d.]+KB and \d+ files", out
    )
    experiment_id = int(re.search(r"Created experiment (\d+)", out).group(1))
    assert "validation" in out.lower()  # the first trial's logs were streamed
    assert f"Experiment {experiment_id} ended in state COMPLETED" in out
    (trial,) = det.get(f"/experiments/{experiment_id}/trials")["trials"]
    assert trial["summary_metrics"]["validation"]["accuracy"] >= 0.9
    listed = det.det("experiment", "list").stdout
    assert "mnist_pytorch_const" in listed and "100.0%" in listed

    # Its DAG stays in Airflow's DAG list once its config is retired: tagged finished, never stale.
    dag_id = det.get(f"/experiments/{experiment_id}")["experiment"]["dag_id"]

    def listed_as_finished() -> dict | None:
        dag = airflow_sqlite_api.http.get(f"/api/v2/dags/{dag_id}").raise_for_status().json()
        return dag if "finished" in {t["name"] for t in dag["tags"]} else None

    dag = wait_until(listed_as_finished, f"{dag_id} tagged finished", timeout=180)
    assert (
        dag["is_stale"] is False
        and dag["dag_display_name"] == f"mnist_pytorch_const (experiment {experiment_id})"
    )
    listed = airflow_sqlite_api.http.get("/api/v2/dags", params={"tags": "finished", "limit": 1000}).json()
    assert dag_id in {d["dag_id"] for d in listed["dags"]}
