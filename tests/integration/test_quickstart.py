"""The quickstart's path: Airflow on SQLite, `det experiment create ... -f` followed to the end."""

from __future__ import annotations

import re

import pytest

from tests.integration.det_env import EXAMPLE, DetEnv

pytestmark = pytest.mark.integration


def test_const_example_followed_to_completed_on_sqlite(airflow_sqlite, tmp_path_factory) -> None:
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
