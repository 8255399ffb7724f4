"""A trial's slots: ``ClusterInfo.slot_ids`` lists the slots it holds, and the torch_distributed
launcher starts one worker per slot."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from det_airflow.cluster_info import ClusterInfo, cluster_info_from_env
from det_airflow.launchers.torch_distributed import layout
from det_airflow.trial_process import TrialSpec, trial_environment, write_trial_files


def _info(
    tmp_path: Path, slots_per_trial: int | None = None, slot_ids: Iterable[int] = ()
) -> ClusterInfo | None:
    config = {} if slots_per_trial is None else {"resources": {"slots_per_trial": slots_per_trial}}
    spec = TrialSpec(trial_id=3, experiment_id=2, request_id="1", trial_seed=0, config=config)
    write_trial_files(spec, tmp_path)
    return cluster_info_from_env(trial_environment(spec, base_env={}, workdir=tmp_path, slot_ids=slot_ids))


def test_slot_ids_are_the_slots_per_trial(tmp_path: Path) -> None:
    info = _info(tmp_path, 4)
    assert info is not None and info.slot_ids == [0, 1, 2, 3]
    assert layout(info, {}).nproc_per_node == 4


def test_a_trial_without_resources_holds_one_slot(tmp_path: Path) -> None:
    info = _info(tmp_path)
    assert info is not None and info.slot_ids == [0]
    assert layout(info, {}).nproc_per_node == 1


def test_slots_given_by_the_runner_win(tmp_path: Path) -> None:
    info = _info(tmp_path, 2, slot_ids=[5, 7])
    assert info is not None and info.slot_ids == [5, 7]
