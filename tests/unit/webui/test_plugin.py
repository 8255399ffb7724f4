"""Every Airflow process loads the det plugin (scheduler, triggerer, workers, DAG processor); only
the API server mounts plugins' FastAPI apps, so only it builds the master. What a det task's parse
needs is imported with the plugin, so that the tasks a worker forks find it imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# A fresh interpreter (other tests have imported the master already) loads plugins as every Airflow
# process does, then collects the FastAPI apps as the API server does.
_PROBE = """
import json, sys
from airflow import plugins_manager

def master_modules():
    return sorted(m for m in sys.modules if m.startswith("det_airflow.master"))

plugins, errors = plugins_manager._get_plugins()
loaded = {
    "plugins": [p.name for p in plugins],
    "errors": errors,
    "master": master_modules(),
    "for_tasks": [m for m in ("det_airflow.dagfactory", "det_airflow.operators.trial") if m in sys.modules],
}
# A task's parse of its experiment DAG, in a process forked after this load: what it imports anew.
from datetime import UTC, datetime
from pathlib import Path
from det_airflow import dagfactory
folder = Path("dags")
path = dagfactory.experiment_file(folder, 7)
path.parent.mkdir(parents=True)
path.write_text(dagfactory.submission_header("alice", datetime.now(UTC), 2)
                + "name: x\\nentrypoint: python3 train.py\\nsearcher: {name: single, metric: loss}\\n")
before = set(sys.modules)
built = dagfactory.build_dags(folder, only_dag_id="det_exp_7")
loaded["parse"] = {"dags": sorted(built), "imported": sorted(set(sys.modules) - before)}
apps, _ = plugins_manager.get_fastapi_plugins()
mounted = [(a["url_prefix"], a["name"], type(a["app"]).__name__) for a in apps]
print(json.dumps({"loaded": loaded, "mounted": mounted, "master": master_modules()}))
"""


def test_loading_the_plugin_builds_no_master_until_the_api_server_collects_its_app(tmp_path: Path) -> None:
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        env=env,
        cwd=tmp_path,  # from the checkout's root its egg-info would list the plugin a second time
    )
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert "det" in seen["loaded"]["plugins"] and seen["loaded"]["errors"] == {}
    assert seen["loaded"]["master"] == []
    assert seen["loaded"]["for_tasks"] == ["det_airflow.dagfactory", "det_airflow.operators.trial"]
    # Nor does the parse look up providers' Asset URI handlers anew
    parse = seen["loaded"]["parse"]
    assert parse["dags"] == ["det_exp_7"]
    # (the amazon provider's handler for s3:// brought boto3: 0.15-0.18 s of every task start).
    assert [m for m in parse["imported"] if m.startswith(("airflow.providers.amazon", "boto"))] == []
    assert ["/det", "det-airflow master", "FastAPI"] in seen["mounted"]
    assert "det_airflow.master.app" in seen["master"]
