"""Adaptive search on a real Airflow and PostgreSQL: ASHA stops trials early and replaces them, stopped
trials free their slots, and the search carries on across a restart of the API server."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.integration.det_env import EXAMPLE, DetEnv, wait_until

pytestmark = pytest.mark.integration

MAX_LENGTH = 160


@pytest.fixture(scope="module")
def det(airflow, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DetEnv]:
    yield DetEnv.install(airflow, tmp_path_factory.mktemp("det-config"))


def asha_config(tmp_path: Path, name: str, **searcher: object) -> Path:
    config = yaml.safe_load((EXAMPLE / "random.yaml").read_text())
    config["name"] = name
    config["searcher"] = {
        "name": "adaptive_asha",
        "metric": "validation_loss",
        "smaller_is_better": True,
        "max_trials": 8,
        "max_length": {"batches": MAX_LENGTH},
        "divisor": 4,
        "max_rungs": 2,
        "max_concurrent_trials": 4,
        **searcher,
    }
    config["scheduling_unit"] = 40
    config["max_restarts"] = 0
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


# A trial without a model: its validation loss follows from the hyperparameters the search drew, so
# the search methods rank trials as they would the example's, without starting PyTorch in every
# trial process. Reports, checkpoints and stops at every scheduling_unit, as the example does.
HPARAM_LOSS = """\
import logging
import time

import det_airflow as det

logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s")
info = det.get_cluster_info()
hparams = info.trial.hparams
unit = int(info.trial.config["scheduling_unit"])
batches = 0
with det.core.init() as core_context:
    for op in core_context.searcher.operations():
        while batches < op.length:
            time.sleep(0.5)  # a trial that trains takes a while between reports
            batches = min(batches + unit, op.length)
            loss = hparams["dropout1"] + hparams["dropout2"] + 1.0 / batches
            core_context.train.report_training_metrics(batches, {"loss": loss})
            core_context.train.report_validation_metrics(batches, {"validation_loss": loss, "batches": batches})
            with core_context.checkpoint.store_path({"steps_completed": batches}) as (path, _):
                (path / "batches").write_text(str(batches))
            op.report_progress(batches)
            logging.info("batch %d: loss %f", batches, loss)
            if core_context.preempt.should_preempt():
                raise SystemExit(0)
        op.report_completed(loss)
"""


def hparam_loss_context(tmp_path: Path) -> Path:
    """A context folder whose ``train.py`` (the example's entrypoint) is :data:`HPARAM_LOSS`."""
    context = tmp_path / "hparam-loss"
    context.mkdir()
    (context / "train.py").write_text(HPARAM_LOSS)
    return context


def pool_occupancy(det: DetEnv) -> dict[str, int]:
    with det.api() as client:
        pool = client.get("/api/v2/pools/default_pool").raise_for_status().json()
    return {k: pool[k] for k in ("running_slots", "queued_slots", "deferred_slots", "scheduled_slots")}


def test_asha_stops_trials_early_replaces_them_and_frees_their_slots(det: DetEnv, tmp_path: Path) -> None:
    experiment_id = det.create(asha_config(tmp_path, "asha-integration"), hparam_loss_context(tmp_path))

    answer = det.wait_experiment(experiment_id, timeout=900)

    assert answer["experiment"]["state"] == "COMPLETED", answer["experiment"]
    trials = answer["trials"]
    assert len(trials) == 8
    assert {t["state"] for t in trials} == {"COMPLETED"}
    stopped = [t for t in trials if t["total_batches"] < MAX_LENGTH]
    finished = [t for t in trials if t["total_batches"] == MAX_LENGTH]
    assert stopped, "no trial was stopped early"
    assert finished, "no trial reached the top rung"
    # Stopped trials ended at their rung and exited cleanly (a checkpoint, no restart).
    for trial in stopped:
        assert trial["restarts"] == 0 and trial["latest_checkpoint"] is not None
    # Nothing is left holding a pool slot.
    assert det.wait_dag_run(answer["experiment"]) == "success"
    assert pool_occupancy(det) == {
        "running_slots": 0,
        "queued_slots": 0,
        "deferred_slots": 0,
        "scheduled_slots": 0,
    }
    dag_id, run_id = answer["experiment"]["dag_id"], answer["experiment"]["dag_run_id"]
    with det.api() as client:
        tis = client.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances").json()["task_instances"]
    trial_tis = [ti for ti in tis if ti["task_id"] == "trial"]
    # As many trial slots as trials run at once (max_concurrent_trials); they ran all 8 trials
    # between them, and each trial names the task instance that ran it.
    assert len(trial_tis) == 4 and {ti["state"] for ti in trial_tis} == {"success"}
    ran_in = {(t["airflow_task"]["run_id"], t["airflow_task"]["map_index"]) for t in trials}
    assert ran_in <= {(run_id, ti["map_index"]) for ti in trial_tis} and len(ran_in) > 1, ran_in


def test_search_survives_a_restart_of_the_api_server(det: DetEnv, tmp_path: Path) -> None:
    experiment_id = det.create(
        asha_config(tmp_path, "asha-restart", max_concurrent_trials=2), hparam_loss_context(tmp_path)
    )
    wait_until(
        lambda: [
            t for t in det.get(f"/experiments/{experiment_id}/trials")["trials"] if t["total_batches"] >= 40
        ],
        "a trial reporting its first validation",
        timeout=300,
    )

    pid = det.af.status()["api-server"]
    assert pid
    os.killpg(os.getpgid(pid), signal.SIGTERM)
    wait_until(lambda: det.af.status()["api-server"] is None, "the API server exiting", timeout=60)
    det.af.start()
    det.af.wait_ready(timeout=300)

    answer = det.wait_experiment(experiment_id, timeout=900)
    assert answer["experiment"]["state"] == "COMPLETED", answer["experiment"]
    assert len(answer["trials"]) == 8  # the search went on where it was: no trial created twice
    assert [t["request_id"] for t in answer["trials"]] == list(range(1, 9))


def test_tpe_sampler_keeps_its_study_in_the_database(det: DetEnv, tmp_path: Path, postgres_url: str) -> None:
    import optuna

    config = asha_config(tmp_path, "tpe-random")
    data = yaml.safe_load(config.read_text())
    data["searcher"] = {
        "name": "random",
        "metric": "validation_loss",
        "max_trials": 3,
        "max_concurrent_trials": 2,
        "max_length": {"batches": 40},
        "sampler": "tpe",
    }
    config.write_text(yaml.safe_dump(data))
    experiment_id = det.create(config, hparam_loss_context(tmp_path))
    answer = det.wait_experiment(experiment_id, timeout=600)
    assert answer["experiment"]["state"] == "COMPLETED"

    from det_airflow.master.search import optuna_storage_url

    storage = optuna_storage_url(postgres_url)  # what `det admin migrate` prints for optuna-dashboard
    summaries = {s.study_name: s for s in optuna.get_all_study_summaries(storage)}
    study = summaries[f"det-experiment-{experiment_id}"]
    assert study.n_trials == 3
    loaded = optuna.load_study(study_name=study.study_name, storage=storage)
    sampled = sorted(t.params["learning_rate"] for t in loaded.trials)
    assert sampled == sorted(t["hparams"]["learning_rate"] for t in answer["trials"])


def test_warm_start_begins_every_trial_from_the_source_trials_checkpoint(det: DetEnv, tmp_path: Path) -> None:
    source_config = asha_config(tmp_path, "warm-source")
    data = yaml.safe_load(source_config.read_text())
    data["hyperparameters"] = yaml.safe_load((EXAMPLE / "const.yaml").read_text())["hyperparameters"]
    data["searcher"] = {"name": "single", "metric": "validation_loss", "max_length": {"batches": 40}}
    source_config.write_text(yaml.safe_dump(data))
    source = det.wait_experiment(det.create(source_config))
    (source_trial,) = source["trials"]
    checkpoint = source_trial["latest_checkpoint"]
    assert checkpoint

    data["name"] = "warm-started"
    data["searcher"] = {
        "name": "single",
        "metric": "validation_loss",
        "max_length": {"batches": 80},
        "source_trial_id": source_trial["id"],
    }
    warm_config = tmp_path / "warm.yaml"
    warm_config.write_text(yaml.safe_dump(data))
    warm = det.wait_experiment(det.create(warm_config))
    assert warm["experiment"]["state"] == "COMPLETED"
    (trial,) = warm["trials"]
    logs = det.det("trial", "logs", str(trial["id"])).stdout
    assert f"resumed from checkpoint {checkpoint}" in logs


def test_legacy_model_def_entrypoint_runs_the_pytorch_trial(det: DetEnv) -> None:
    experiment_id = det.create(
        EXAMPLE / "const_trial.yaml", EXAMPLE, "--config", "searcher.max_length.batches=100"
    )
    answer = det.wait_experiment(experiment_id, timeout=600)
    assert answer["experiment"]["state"] == "COMPLETED", answer["experiment"]
    (trial,) = answer["trials"]
    validation = det.get(f"/trials/{trial['id']}/metrics?group=validation")["metrics"]
    assert validation[-1]["steps_completed"] == 100
    assert validation[-1]["metrics"]["batches"] == 100 and "epochs" in validation[-1]["metrics"]
    logs = det.det("trial", "logs", str(trial["id"])).stdout
    assert "[rank=0]" in logs  # run through the torch_distributed launcher's wrap_rank


# A trial whose validation loss is its own id: the earliest trials are the best, so with one trial at
# a time each pauses at the first rung before enough others have reported for it to be promoted.
RANKED_BY_ID = """\
import logging

import det_airflow as det

logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s")
info = det.get_cluster_info()
loss = float(info.trial.trial_id)
batches = 0
with det.core.init() as core_context:
    if info.latest_checkpoint:
        with core_context.checkpoint.restore_path(info.latest_checkpoint) as path:
            batches = int((path / "batches").read_text())
        logging.info("resumed from checkpoint %s at batch %d", info.latest_checkpoint, batches)
    for op in core_context.searcher.operations():
        while batches < op.length:
            batches = min(batches + 20, op.length)
            core_context.train.report_training_metrics(batches, {"loss": loss})
            core_context.train.report_validation_metrics(batches, {"validation_loss": loss})
            with core_context.checkpoint.store_path({"steps_completed": batches}) as (path, _):
                (path / "batches").write_text(str(batches))
            op.report_progress(batches)
            if core_context.preempt.should_preempt():
                logging.info("asked to stop at batch %d", batches)
                raise SystemExit(0)
        op.report_completed(loss)
"""


def test_promotion_asha_pauses_trials_at_their_rung_and_resumes_the_promoted(
    det: DetEnv, tmp_path: Path
) -> None:
    context = tmp_path / "ranked-by-id"
    context.mkdir()
    (context / "train.py").write_text(RANKED_BY_ID)
    config = {
        "name": "asha-promotion",
        "entrypoint": "python3 train.py",
        "hyperparameters": {"unused": 1},
        "searcher": {
            "name": "adaptive_asha",
            "mode": "aggressive",
            "metric": "validation_loss",
            "smaller_is_better": True,
            "max_trials": 8,
            "max_length": {"batches": MAX_LENGTH},
            "divisor": 4,
            "max_rungs": 2,
            "max_concurrent_trials": 1,
            "stop_once": False,
        },
        "max_restarts": 0,
    }
    (context / "promotion.yaml").write_text(yaml.safe_dump(config))
    experiment_id = det.create(context / "promotion.yaml", context)

    answer = det.wait_experiment(experiment_id, timeout=900)

    assert answer["experiment"]["state"] == "COMPLETED", answer["experiment"]
    trials = sorted(answer["trials"], key=lambda t: t["id"])
    assert len(trials) == 8 and {t["state"] for t in trials} == {"COMPLETED"}
    # 8 arrivals at the first rung (40 batches) promote the best int(8/4) = 2: the two earliest. The
    # seed era's rungs are cumulative, so the top rung is at 40 + 160 batches.
    assert [t["total_batches"] for t in trials] == [40 + MAX_LENGTH] * 2 + [40] * 6
    for trial in trials:
        assert trial["restarts"] == 0 and trial["latest_checkpoint"] is not None
    checkpoints = det.get(f"/experiments/{experiment_id}/checkpoints")["checkpoints"]
    for trial in trials[:2]:
        (rung_checkpoint,) = [
            c["uuid"] for c in checkpoints if c["trial_id"] == trial["id"] and c["steps_completed"] == 40
        ]
        logs = det.det("trial", "logs", str(trial["id"])).stdout
        assert f"resumed from checkpoint {rung_checkpoint} at batch 40" in logs, logs[-2000:]
    assert det.wait_dag_run(answer["experiment"]) == "success"
    assert pool_occupancy(det) == {
        "running_slots": 0,
        "queued_slots": 0,
        "deferred_slots": 0,
        "scheduled_slots": 0,
    }


def test_missing_searcher_metric_ends_the_experiment_with_a_clear_error(det: DetEnv, tmp_path: Path) -> None:
    config = asha_config(tmp_path, "asha-missing-metric", metric="val_acc", max_trials=2)
    experiment_id = det.create(config, hparam_loss_context(tmp_path))

    answer = det.wait_experiment(experiment_id, timeout=600)

    assert answer["experiment"]["state"] == "ERROR"
    assert "'val_acc'" in answer["experiment"]["error"]
    described = det.det("experiment", "describe", str(experiment_id), "--json").stdout
    assert "val_acc" in described
