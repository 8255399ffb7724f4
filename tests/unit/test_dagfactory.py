"""The DAG factory: experiment YAMLs under the DAGs folder → experiment DAGs (no database needed)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

pytest.importorskip("airflow")

from det_airflow import dagfactory  # noqa: E402
from det_airflow.dagfactory import INVALID_TASK_ID, build_dags  # noqa: E402
from det_airflow.operators.trial import SLOT_MAP_INDEX_TEMPLATE

CONST = """
name: digits
entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: 10}
resources: {slots_per_trial: 2, priority: 10, resource_pool: gpus}
max_restarts: 3
"""
# What the master writes above a config it stores (dagfactory.submission_header).
SUBMITTED = dagfactory.submission_header("alice", datetime(2026, 11, 20, tzinfo=UTC))


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_dropped_yaml_becomes_dag_named_after_its_stem_with_the_experiment_shape(tmp_path: Path) -> None:
    write(tmp_path / "digits" / "const.yaml", CONST)

    dags = build_dags(tmp_path)

    dag = dags["det_const"]
    assert set(dag.task_dict) == {"register", "searcher", "trial", "trial_node", "finalize"}
    # register → searcher → trial → finalize (register's XCom, the experiment id, also feeds the others)
    assert dag.task_dict["searcher"].upstream_task_ids == {"register"}
    assert dag.task_dict["trial"].upstream_task_ids == {"register", "searcher"}
    # 2 slots per trial: a trial may run over two hosts, its second node in a node task per slot.
    assert dag.task_dict["trial_node"].upstream_task_ids == {"register", "searcher"}
    assert dag.task_dict["finalize"].upstream_task_ids == {"register", "trial", "trial_node"}
    assert type(dag.timetable).__name__ == "NullTimetable"  # runs when triggered
    assert dag.task_dict["register"].experiment_id is None
    assert dag.task_dict["finalize"].trigger_rule == "all_done"


def test_trial_task_carries_the_experiments_pool_slots_priority_and_restarts(tmp_path: Path) -> None:
    write(tmp_path / "const.yaml", CONST)

    trial = build_dags(tmp_path)["det_const"].task_dict["trial"]

    kwargs = trial.partial_kwargs
    assert kwargs["pool"] == "gpus"
    assert kwargs["pool_slots"] == 2
    assert kwargs["priority_weight"] == 90  # priority 10: lower runs first
    assert kwargs["weight_rule"] == "absolute"
    assert kwargs["retries"] == 3
    # Airflow lists the slot's task instance by the trials it runs, not by a bare map index.
    assert trial.map_index_template == SLOT_MAP_INDEX_TEMPLATE


RANDOM_12 = """
name: sweep
entrypoint: python3 train.py
hyperparameters: {lr: {type: double, minval: 0.001, maxval: 0.1}}
searcher: {name: random, metric: loss, max_length: 10, max_trials: 12, max_concurrent_trials: 5}
"""


def test_one_slot_trials_get_no_node_tasks(tmp_path: Path) -> None:
    write(tmp_path / "experiments" / "exp_3.yaml", RANDOM_12)
    write(tmp_path / "sweep.yaml", RANDOM_12)

    dags = build_dags(tmp_path)

    assert set(dags["det_exp_3"].task_dict) == {"trial", "finalize"}
    assert set(dags["det_sweep"].task_dict) == {"register", "searcher", "trial", "finalize"}


def test_master_written_config_runs_once_and_starts_with_its_trial_slots(tmp_path: Path) -> None:
    write(tmp_path / "experiments" / "exp_12.yaml", CONST)

    dag = build_dags(tmp_path)["det_exp_12"]

    # The master stored the experiment at submission: nothing runs before the trial slots.
    assert set(dag.task_dict) == {"trial", "trial_node", "finalize"}
    assert dag.task_dict["trial"].upstream_task_ids == set()
    assert dag.task_dict["trial"].partial_kwargs["experiment_id"] == 12
    assert dag.task_dict["trial"].expand_input.value == {"slot": [0]}
    nodes = dag.task_dict["trial_node"]
    assert nodes.expand_input.value == {"slot": [0], "rank": [1]}
    assert (nodes.partial_kwargs["pool"], nodes.partial_kwargs["pool_slots"]) == ("default_pool", 1)
    assert dag.task_dict["finalize"].experiment_id == 12
    assert dag.task_dict["finalize"].upstream_task_ids == {"trial", "trial_node"}
    # No schedule: the master starts its one run; the scheduler never makes one that could race it.
    assert dag.timetable.can_be_scheduled is False


def test_a_master_written_dag_maps_the_trial_slots_the_master_counted(tmp_path: Path) -> None:
    header = dagfactory.submission_header("alice", datetime(2026, 11, 20, tzinfo=UTC), trial_slots=3)
    write(tmp_path / "experiments" / "exp_12.yaml", header + RANDOM_12)
    write(tmp_path / "experiments" / "exp_13.yaml", RANDOM_12)  # an older file: no count in it

    dags = build_dags(tmp_path)

    # Each slot runs trial after trial: 3 slots (the pool's size when submitted) run all 12 trials.
    assert dags["det_exp_12"].task_dict["trial"].expand_input.value == {"slot": [0, 1, 2]}
    # Without the master's count: as many as max_concurrent_trials lets run at once.
    assert dags["det_exp_13"].task_dict["trial"].expand_input.value == {"slot": [0, 1, 2, 3, 4]}


def test_a_master_written_experiment_dag_shows_its_name_id_owner_submission_time_and_page(
    tmp_path: Path,
) -> None:
    submitted = datetime(2026, 11, 20, 9, 30, 0, 250_000, tzinfo=UTC)
    header = "# Experiment 12, written by the det master. Do not edit.\n"
    write(
        tmp_path / "experiments" / "exp_12.yaml",
        header + dagfactory.submission_header("alice", submitted) + CONST,
    )
    write(tmp_path / "experiments" / "exp_13.yaml", header + CONST)  # written by an older version

    dags = build_dags(tmp_path)

    dag = dags["det_exp_12"]
    assert dag.dag_display_name == "digits (experiment 12)"
    assert dag.owner == "alice"
    # The logical date of its one run: the whole second before the submission's, so the run is
    # due at once (dagfactory.run_due).
    assert dag.start_date == datetime(2026, 11, 20, 9, 29, 59, tzinfo=UTC)
    assert "/det/ui/#/experiments/12)" in dag.doc_md
    older = dags["det_exp_13"]
    assert (older.dag_display_name, older.owner) == ("digits (experiment 13)", "det")
    assert dags["det_exp_13"].start_date == datetime(2024, 1, 1, tzinfo=UTC)
    assert dict(dag.params) == {}  # its config is the master's: a run cannot change it


def test_a_dropped_yaml_dag_shows_the_experiment_name(tmp_path: Path) -> None:
    write(tmp_path / "const.yaml", CONST)

    dags = build_dags(tmp_path)

    dag = dags["det_const"]
    assert dag.dag_display_name == "digits"
    assert dag.owner == "det"
    # The Trigger form offers what a run may override, with the YAML's values.
    params = dag.params.dump()
    assert set(params) == {"description", "hyperparameters", "searcher", "resources"}
    assert params["searcher"] == {"max_trials": None, "max_length": {"batches": 10}}
    assert params["resources"] == {"resource_pool": "gpus", "priority": 10}


def test_other_yaml_files_are_left_alone(tmp_path: Path) -> None:
    write(tmp_path / "notes.yaml", "just: data\n")
    write(tmp_path / "broken_other.yaml", "a: [\n")

    assert build_dags(tmp_path) == {}


def test_invalid_experiment_yaml_is_reported_and_the_others_still_load(tmp_path: Path) -> None:
    write(tmp_path / "good.yaml", CONST)
    write(tmp_path / "bad.yaml", "entrypoint: x\nsearcher: {name: random, metric: loss, max_trials: ten}\n")

    dags = build_dags(tmp_path)

    assert "det_good" in dags
    # The bad YAML has a DAG of its own, tagged invalid, whose one task fails with the problem.
    assert re.search(
        r"bad\.yaml: searcher\.max_trials: expected an integer >= 1, got 'ten'",
        invalid_message(dags, "det_bad"),
    )


def test_a_dropped_yaml_asking_its_runner_for_a_host_mount_is_an_invalid_dag(tmp_path: Path) -> None:
    write(tmp_path / "good.yaml", CONST)
    write(
        tmp_path / "mount.yaml",
        CONST
        + "airflow: {trial_runner: docker}\nbind_mounts: [{host_path: /etc, container_path: /host_etc}]\n",
    )

    dags = build_dags(tmp_path)

    assert "det_good" in dags
    assert re.search(
        r"mount\.yaml: bind_mounts\[0\]\.host_path: host path '/etc' is not allowed by the cluster's runner policy",
        invalid_message(dags, "det_mount"),
    )


def test_a_task_process_builds_only_its_own_dag(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", CONST)
    write(tmp_path / "b.yaml", CONST)
    write(tmp_path / "c.yaml", "entrypoint: x\nsearcher: {name: pbt, metric: loss}\n")

    assert list(build_dags(tmp_path, only_dag_id="det_b")) == ["det_b"]


def test_a_file_removed_while_the_parse_runs_gets_no_dag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `det e delete` removes exp_3.yaml after the parse has read it, while it builds exp_4: the
    # parse's result must not register det_exp_3 again.
    deleted = write(dagfactory.experiment_file(tmp_path, 3), CONST)
    write(dagfactory.experiment_file(tmp_path, 4), CONST)
    build_dag = dagfactory.build_dag

    def build_then_delete(file: dagfactory.ExperimentFile, *args: object) -> object:
        if file.experiment_id == 4:
            deleted.unlink()
        return build_dag(file, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(dagfactory, "build_dag", build_then_delete)

    assert set(build_dags(tmp_path)) == {"det_exp_4"}


def ten_experiments(folder: Path) -> set[str]:
    for i in range(10):
        write(folder / f"exp{i}" / f"good{i}.yaml", CONST)
    return {f"det_good{i}" for i in range(10)}


def invalid_message(dags: dict[str, object], dag_id: str) -> str:
    """The message of an invalid YAML's DAG: validated as Airflow does on a parse (it passes, so the
    factory file has no import error), tagged invalid, its task failing with the message."""
    from airflow.sdk.exceptions import AirflowFailException

    dag = dags[dag_id]
    dag.validate()  # type: ignore[attr-defined]
    assert "invalid" in dag.tags  # type: ignore[attr-defined]
    task = dag.task_dict[INVALID_TASK_ID]  # type: ignore[attr-defined]
    with pytest.raises(AirflowFailException) as info:
        task.execute({})
    assert dag.description == str(info.value).splitlines()[0][:200]  # type: ignore[attr-defined]
    return str(info.value)


def test_one_poisoned_yaml_among_ten_fails_alone_with_its_message(tmp_path: Path) -> None:
    good = ten_experiments(tmp_path)
    poisoned = write(
        tmp_path / "poisoned.yaml", CONST.replace("max_restarts: 3", "max_restarts: 100000000000000000000")
    )

    dags = build_dags(tmp_path)

    assert set(dags) == good | {"det_poisoned"}
    assert invalid_message(dags, "det_poisoned") == (
        f"{poisoned}: max_restarts: expected an integer between 0 and 2147483647, got 100000000000000000000"
    )


def test_an_unexpected_failure_while_building_one_experiment_spares_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = ten_experiments(tmp_path)
    poisoned = write(tmp_path / "poisoned.yaml", CONST)
    real_build = dagfactory.build_dag

    def build(file: dagfactory.ExperimentFile, cfg: object, submission: object = None) -> object:
        # Stands in for a bug in any library the factory calls: an error that is not ours.
        if file.path == poisoned:
            raise OverflowError("int too large to convert to C int")
        return real_build(file, cfg, submission)  # type: ignore[arg-type]

    monkeypatch.setattr(dagfactory, "build_dag", build)

    dags = build_dags(tmp_path)

    assert set(dags) == good | {"det_poisoned"}
    assert (
        f"{poisoned}: cannot build the experiment DAG: OverflowError: int too large to convert to C int"
        in invalid_message(dags, "det_poisoned")
    )


def test_an_unreadable_experiment_file_is_reported_and_the_others_load(tmp_path: Path) -> None:
    good = ten_experiments(tmp_path)
    dangling = tmp_path / "gone.yaml"
    dangling.symlink_to(tmp_path / "nowhere.yaml")

    dags = build_dags(tmp_path)

    assert set(dags) == good | {"det_gone"}
    assert f"{dangling}: cannot build the experiment DAG: FileNotFoundError" in invalid_message(
        dags, "det_gone"
    )


BILLION_LAUGHS = (
    "searcher: {name: single, metric: loss}\nentrypoint: x\na: &a [1,1,1,1,1,1,1,1,1]\n"
    + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(8)
    )
)


def test_an_alias_bomb_is_refused_as_its_own_invalid_dag(tmp_path: Path) -> None:
    good = ten_experiments(tmp_path)
    bomb = write(tmp_path / "bomb.yaml", BILLION_LAUGHS)

    dags = build_dags(tmp_path)

    assert set(dags) == good | {"det_bomb"}
    assert (
        f"{bomb}: refused YAML: it holds more than 100,000 values once its aliases (*name) are expanded"
        in invalid_message(dags, "det_bomb")
    )


def test_a_dag_id_used_twice_is_reported_once_and_the_first_file_keeps_it(tmp_path: Path) -> None:
    first = write(tmp_path / "a" / "same.yaml", CONST)
    second = write(tmp_path / "b" / "same.yaml", CONST)
    write(tmp_path / "c" / "same.yaml", "just: data\n")  # not an experiment: no clash

    dags = build_dags(tmp_path)

    (other,) = set(dags) - {"det_same"}
    assert other.startswith("det_same__")
    assert invalid_message(dags, other) == (
        f"{second}: DAG id 'det_same' is already used by {first}; rename one file"
    )


def test_a_retired_experiment_keeps_a_finished_dag_and_the_running_ones_their_own(tmp_path: Path) -> None:
    for experiment_id in (1, 2, 3):
        write(dagfactory.experiment_file(tmp_path, experiment_id), SUBMITTED + CONST)

    moved = dagfactory.retire_experiment_file(tmp_path, 2)

    assert moved == tmp_path / "experiments" / "finished" / "exp_2.yaml"
    assert moved.read_text() == SUBMITTED + CONST
    assert dagfactory.retire_experiment_file(tmp_path, 2) is None  # already retired: nothing to move
    dags = build_dags(tmp_path)
    assert set(dags) == {"det_exp_1", "det_exp_2", "det_exp_3"}
    finished, running = dags["det_exp_2"], dags["det_exp_1"]
    assert "finished" in finished.tags and "finished" not in running.tags
    assert [t.task_id for t in finished.tasks] == [dagfactory.FINISHED_TASK_ID]
    assert finished.dag_display_name == "digits (experiment 2)"
    assert finished.default_args["owner"] == "alice"
    assert finished.description == "digits (finished)"
    assert "trial" in running.task_ids
    from airflow.sdk.exceptions import AirflowFailException

    with pytest.raises(
        AirflowFailException,
        match=r"^experiment 2 has finished: its runs, trials, logs and checkpoints are kept",
    ):
        finished.task_dict[dagfactory.FINISHED_TASK_ID].execute({})  # someone triggered it
    # A task process of the finished DAG (its `finished` task, when someone triggers it) builds it alone.
    assert set(build_dags(tmp_path, only_dag_id="det_exp_2")) == {"det_exp_2"}


def test_only_the_most_recent_finished_experiments_stay_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for experiment_id in (1, 2, 3, 10):
        write(dagfactory.experiment_file(tmp_path, experiment_id), SUBMITTED + CONST)
        dagfactory.retire_experiment_file(tmp_path, experiment_id)
    monkeypatch.setenv("AIRFLOW__DET__FINISHED_EXPERIMENT_DAGS", "2")
    assert set(build_dags(tmp_path)) == {"det_exp_10", "det_exp_3"}
    monkeypatch.setenv("AIRFLOW__DET__FINISHED_EXPERIMENT_DAGS", "0")
    assert build_dags(tmp_path) == {}
    # A bad value is not the experiments' problem: the default applies (and the log says why).
    monkeypatch.setenv("AIRFLOW__DET__FINISHED_EXPERIMENT_DAGS", "many")
    assert set(build_dags(tmp_path)) == {"det_exp_1", "det_exp_2", "det_exp_3", "det_exp_10"}


def test_det_settings_given_only_as_environment_variables_are_the_experiments_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # airflow.cfg of the tests has no [det] section: the variables alone must count.
    monkeypatch.setenv("AIRFLOW__DET__POOL", "gpu-a100")
    monkeypatch.setenv("AIRFLOW__DET__QUEUE", "gpus")
    (tmp_path / "exp.yaml").write_text(
        "entrypoint: python3 train.py\nsearcher: {name: single, metric: loss}\n"
    )

    dag = build_dags(tmp_path)["det_exp"]

    trial = dag.get_task("trial")
    assert (trial.partial_kwargs["pool"], trial.partial_kwargs["queue"]) == ("gpu-a100", "gpus")


def test_a_task_process_of_a_second_file_of_one_dag_id_builds_its_invalid_dag(tmp_path: Path) -> None:
    write(tmp_path / "a" / "same.yaml", CONST)
    write(tmp_path / "b" / "same.yaml", CONST)
    (other,) = set(build_dags(tmp_path)) - {"det_same"}

    assert list(build_dags(tmp_path, only_dag_id=other)) == [other]
    assert list(build_dags(tmp_path, only_dag_id="det_same")) == ["det_same"]
