"""``det.get_cluster_info().trial._config``: Determined's name for the experiment config, as its
``deepspeed/dcgan`` example reads the config's ``data`` section with it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from det_airflow import compat, trial_env

CONFIG = {"searcher": {"name": "single", "metric": "loss"}, "data": {"dataset": "mnist", "dataroot": "/data"}}

# dcgan's trainer.py, as it reads its data settings.
PROGRAM = """
import json
import determined as det

info = det.get_cluster_info()
data_config = info.trial._config["data"]
print(json.dumps({"data": data_config, "same": info.trial._config == info.trial.config}))
"""


def test_a_trial_reads_its_experiment_config_under_determineds_name(tmp_path: Path) -> None:
    config_file = tmp_path / "config.json"
    config_file.write_text(json.dumps(CONFIG))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    env.update(
        {
            "PYTHONPATH": str(compat.determined_root()),
            trial_env.TRIAL_ID: "3",
            trial_env.EXPERIMENT_ID: "2",
            # How a runner hands the config over: a file (a large config outgrows a variable).
            trial_env.EXPERIMENT_CONFIG_FILE: str(config_file),
        }
    )
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"data": {"dataset": "mnist", "dataroot": "/data"}, "same": True}
