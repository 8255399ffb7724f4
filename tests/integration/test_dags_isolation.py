"""One broken experiment YAML in the DAGs folder of a real Airflow: it shows as an import error with
our message, and every other experiment DAG keeps loading."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.det_env import REPO, wait_until

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


def test_one_poisoned_yaml_among_ten_is_an_import_error_and_the_ten_load(folder: Path, airflow_api) -> None:  # type: ignore[no-untyped-def]
    for index in range(10):
        (folder / f"iso_{index}.yaml").write_text(CONFIG.format(index=index, max_restarts=3))
    poisoned = folder / "iso_poisoned.yaml"
    poisoned.write_text(CONFIG.format(index="poisoned", max_restarts=10**20))

    for index in range(10):
        airflow_api.wait_for_dag(f"det_iso_{index}")
    error = wait_until(
        lambda: factory_import_error(airflow_api), f"an import error for {FACTORY} naming {poisoned.name}"
    )

    assert "InvalidExperimentYAML: invalid experiment YAML" in error
    assert (
        f"iso_poisoned.yaml: max_restarts: expected an integer between 0 and 2147483647, got {10**20}"
        in error
    )
    assert airflow_api.http.get("/api/v2/dags/det_iso_poisoned").status_code == 404

    # Fixing the file clears the error and brings its DAG, the ten staying loaded throughout.
    poisoned.write_text(CONFIG.format(index="poisoned", max_restarts=3))
    airflow_api.wait_for_dag("det_iso_poisoned")
    wait_until(lambda: factory_import_error(airflow_api) is None, f"the import error of {FACTORY} to clear")
    for index in range(10):
        assert airflow_api.http.get(f"/api/v2/dags/det_iso_{index}").status_code == 200
