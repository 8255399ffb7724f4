"""One broken experiment YAML in the DAGs folder of a real Airflow: it gets a DAG of its own, tagged
invalid, with our message; the factory file has no import error, every other experiment DAG keeps
loading, and experiments keep starting and finishing meanwhile."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.integration.det_env import EXAMPLE, REPO, DetEnv, wait_until

pytestmark = pytest.mark.integration

CONFIG = """\
name: isolation {index}
entrypoint: python3 train.py
searcher: {{name: single, metric: loss, max_length: {{batches: 10}}}}
max_restarts: {max_restarts}
"""
FACTORY = "det_experiments.py"


@pytest.fixture
def folder(airflow) -> Iterator[Path]:  # type: ignore[no-untyped-def]
    """A folder of experiment YAMLs under the Airflow's DAGs folder, removed afterwards."""
    shutil.copy(REPO / "dags" / FACTORY, airflow.dags_folder / FACTORY)
    path = airflow.dags_folder / "isolation"
    path.mkdir()
    yield path
    shutil.rmtree(path)


def factory_import_error(airflow_api) -> str | None:  # type: ignore[no-untyped-def]
    for error in airflow_api.import_errors():
        if error["filename"].endswith(FACTORY):
            return str(error["stack_trace"])
    return None


def _dag(airflow_api, dag_id: str) -> dict | None:  # type: ignore[no-untyped-def]
    answer = airflow_api.http.get(f"/api/v2/dags/{dag_id}")
    return answer.json() if answer.status_code == 200 else None


def test_a_poisoned_yaml_breaks_only_itself_and_experiments_keep_running(  # type: ignore[no-untyped-def]
    folder: Path, airflow, airflow_api, tmp_path: Path
) -> None:
    for index in range(2):
        (folder / f"iso_{index}.yaml").write_text(CONFIG.format(index=index, max_restarts=3))
    poisoned = folder / "iso_poisoned.yaml"
    poisoned.write_text(CONFIG.format(index="poisoned", max_restarts=10**20))

    for index in range(2):
        airflow_api.wait_for_dag(f"det_iso_{index}")
    airflow_api.wait_for_dag("det_iso_poisoned")
    invalid = _dag(airflow_api, "det_iso_poisoned")
    assert invalid is not None
    assert "invalid" in [tag["name"] for tag in invalid["tags"]]
    assert (
        f"iso_poisoned.yaml: max_restarts: expected an integer between 0 and 2147483647, got {10**20}"
        in invalid["description"]
    )
    assert factory_import_error(airflow_api) is None

    # Meanwhile a new experiment starts and completes.
    det = DetEnv.install(airflow, tmp_path / "det-config")
    config = yaml.safe_load((EXAMPLE / "const.yaml").read_text())
    config["searcher"]["max_length"] = {"batches": 20}
    (tmp_path / "const.yaml").write_text(yaml.safe_dump(config))
    experiment = det.wait_experiment(det.create(tmp_path / "const.yaml"), timeout=300)["experiment"]
    assert experiment["state"] == "COMPLETED"
    assert factory_import_error(airflow_api) is None

    # Fixing the file makes its DAG the experiment's, the others staying loaded throughout.
    poisoned.write_text(CONFIG.format(index="poisoned", max_restarts=3))
    wait_until(
        lambda: (
            "invalid"
            not in [t["name"] for t in (_dag(airflow_api, "det_iso_poisoned") or {"tags": []})["tags"]]
            and _dag(airflow_api, "det_iso_poisoned")
        ),
        "det_iso_poisoned to become the experiment's DAG",
    )
    for index in range(2):
        assert airflow_api.http.get(f"/api/v2/dags/det_iso_{index}").status_code == 200
