"""Names Determined programs import from ``determined``: present, and doing what Determined's do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from det_airflow import compat
from det_airflow.cluster_info import cluster_info_from_env
from det_airflow.trial_process import TrialSpec, trial_environment

PROGRAM = r"""
import json
import determined as det
from determined import util
from determined.common import util as common_util
from determined.pytorch.samplers import DistributedBatchSampler, RepeatBatchSampler
from torch.utils.data import BatchSampler, SequentialSampler
import itertools

batches = BatchSampler(SequentialSampler(range(10)), batch_size=2, drop_last=False)
shards = [list(DistributedBatchSampler(batches, 2, r)) for r in range(2)]
print(json.dumps({
    "legacy": common_util._LEGACY_TRAINING,
    "modes": [det.core.DownloadMode.NoSharedDownload.value, det.core.PreemptMode.ChiefOnly.value],
    "merged": util.merge_dicts({"a": {"b": 1, "c": 2}}, {"a": {"c": 3}}),
    "shards": shards,
    "lens": [len(DistributedBatchSampler(batches, 2, r)) for r in range(2)],
    "repeat": list(itertools.islice(RepeatBatchSampler(batches), 6))[-1],
}))
"""


def test_determined_programs_find_their_names() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    env["PYTHONPATH"] = str(compat.determined_root())
    result = subprocess.run(
        [sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["legacy"] == "training"
    assert out["modes"] == ["NO_SHARED_DOWNLOAD", "CHIEF_ONLY"]
    assert out["merged"] == {"a": {"b": 1, "c": 3}}
    assert out["shards"] == [[[0, 1], [4, 5], [8, 9]], [[2, 3], [6, 7]]]
    assert out["lens"] == [3, 2]
    assert out["repeat"] == [0, 1]


def test_a_trial_gets_its_config_as_json_and_as_a_file(tmp_path: Path) -> None:
    config = {"searcher": {"name": "single", "metric": "loss"}, "data": {"url": "x"}}
    spec = TrialSpec(trial_id=2, experiment_id=1, request_id="r", trial_seed=0, config=config)
    env = trial_environment(spec, workdir=tmp_path)
    assert json.loads(env["DET_EXPERIMENT_CONFIG"]) == config
    assert env["DET_EXPERIMENT_CONFIG_FILE"].endswith("experiment_config.json")
    big = {**config, "data": {"blob": "x" * 70_000}}
    env = trial_environment(
        TrialSpec(trial_id=2, experiment_id=1, request_id="r", trial_seed=0, config=big), workdir=tmp_path
    )
    assert "DET_EXPERIMENT_CONFIG" not in env and env["DET_EXPERIMENT_CONFIG_FILE"]


def test_cluster_info_agent_id_and_trial_info() -> None:
    info = cluster_info_from_env({"DET_TRIAL_ID": "3", "DET_AGENT_ID": "node-7"})
    assert info is not None
    assert info.agent_id == "node-7"
    assert info._trial_info is info.trial and info._trial_info.trial_id == 3
