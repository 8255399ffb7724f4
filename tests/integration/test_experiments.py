"""Experiments on a real Airflow (scheduler, DAG processor, triggerer, API server) on PostgreSQL,
driven the way a user drives them: the `det` CLI, `airflow dags trigger`, files in the DAGs folder."""

from __future__ import annotations

import io
import json
import re
import shutil
import tarfile
import tempfile
import textwrap
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import yaml

from tests.integration.det_env import EXAMPLE, DetEnv, kept_checkpoints, wait_until

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def det(airflow, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DetEnv]:
    yield DetEnv.install(airflow, tmp_path_factory.mktemp("det-config"))


def small_config(tmp_path: Path, **changes: object) -> Path:
    """The example's const.yaml, shortened, with `changes` merged in (dotted keys not needed)."""
    config = yaml.safe_load((EXAMPLE / "const.yaml").read_text())
    config["searcher"]["max_length"] = {"batches": 100}
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_det_experiment_create_runs_to_completed_with_metrics(det: DetEnv) -> None:
    experiment_id = det.create(EXAMPLE / "const.yaml")

    waited = det.det("experiment", "wait", str(experiment_id), timeout=600)
    assert "COMPLETED" in waited.stdout

    listed = det.det("experiment", "list").stdout
    assert f"{experiment_id} " in listed and "mnist_pytorch_const" in listed and "COMPLETED" in listed
    trials = det.get(f"/experiments/{experiment_id}/trials")["trials"]
    assert [t["state"] for t in trials] == ["COMPLETED"]
    trial_id = trials[0]["id"]
    validation = det.get(f"/trials/{trial_id}/metrics?group=validation")["metrics"]
    assert validation, "no validation metrics stored"
    assert validation[-1]["metrics"]["accuracy"] >= 0.9
    assert trials[0]["total_batches"] == 300
    checkpoints = det.get(f"/experiments/{experiment_id}/checkpoints")["checkpoints"]
    # checkpoint_storage's defaults keep the trial's best and its latest; the others are deleted.
    assert kept_checkpoints(checkpoints)[-1]["uuid"] == trials[0]["latest_checkpoint"]

    lt = det.det("experiment", "list-trials", str(experiment_id)).stdout
    assert "COMPLETED" in lt and "300" in lt
    # Its one run: admitted and acquired by a slot, its process started, it ended.
    history = det.get(f"/trials/{trial_id}/state-changes")["state_changes"]
    assert [c["to"] for c in history] == ["QUEUED", "STARTING", "RUNNING", "COMPLETED"], history
    assert history[2]["reason"].startswith("its process starts as "), history
    logs = det.det("trial", "logs", str(trial_id)).stdout
    # `[timestamp] [rank=N] || LEVEL: message`, the level taken from the line the trial printed.
    assert re.search(r"^\[\S+\] .*\|\| INFO: batch 50: ", logs, re.MULTILINE), logs[-2000:]
    assert "validation_loss" in logs
    # Airflow lists the slot's task instance by the trial it ran.
    task = _trial_task(det, experiment_id)
    assert task is not None and task["rendered_map_index"] == f"slot 0: trial {trial_id}", task


def test_yaml_dropped_into_dags_folder_runs_with_airflow_dags_trigger(det: DetEnv, airflow_api) -> None:
    folder = det.af.dags_folder / "digits"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("*.yaml", "__pycache__"))
    config = yaml.safe_load((EXAMPLE / "const.yaml").read_text())
    config["searcher"]["max_length"] = {"batches": 50}
    config["name"] = "dropped digits"
    (folder / "digits_drop.yaml").write_text(yaml.safe_dump(config))
    (folder / "notes.yaml").write_text("just: some other yaml\n")  # not an experiment: left alone

    airflow_api.wait_for_dag("det_digits_drop")
    # A run's conf overrides what the DAG's params offer; anything else fails the register task.
    conf = {"description": "lr sweep by hand", "hyperparameters": {"learning_rate": 0.5}}
    bad_conf = {"hyperparameters": {"lr": 0.1}}
    # The three runs go at once: the DAG (not an experiment's own) runs many at a time.
    for conf_args in ((), ("-c", json.dumps(conf)), ("-c", json.dumps(bad_conf))):
        result = det.af.airflow("dags", "trigger", "det_digits_drop", *conf_args)
        assert result.returncode == 0, result.stderr
    runs = airflow_api.http.get("/api/v2/dags/det_digits_drop/dagRuns").raise_for_status().json()["dag_runs"]
    by_conf = {json.dumps(r["conf"], sort_keys=True): r["dag_run_id"] for r in runs}
    assert len(by_conf) == 3, runs

    run = airflow_api.wait_for_run("det_digits_drop", by_conf["{}"], timeout=300)
    assert run["state"] == "success", run["tis"]
    assert run["tis"]["finalize"] == "success"
    experiments = [e for e in det.get("/experiments")["experiments"] if e["dag_run_id"] == run["dag_run_id"]]
    assert len(experiments) == 1
    assert experiments[0]["dag_id"] == "det_digits_drop"
    assert experiments[0]["state"] == "COMPLETED"
    assert experiments[0]["name"] == "dropped digits"
    assert not [e for e in airflow_api.import_errors() if "notes.yaml" in e["stack_trace"]]

    good_run = airflow_api.wait_for_run(
        "det_digits_drop", by_conf[json.dumps(conf, sort_keys=True)], timeout=300
    )
    bad_run_id = by_conf[json.dumps(bad_conf, sort_keys=True)]
    bad_run = airflow_api.wait_for_run("det_digits_drop", bad_run_id, timeout=300)
    assert good_run["state"] == "success", good_run["tis"]
    overridden = [
        e for e in det.get("/experiments")["experiments"] if e["dag_run_id"] == good_run["dag_run_id"]
    ]
    assert [e["description"] for e in overridden] == ["lr sweep by hand"]
    hparams = det.get(f"/experiments/{overridden[0]['id']}/trials")["trials"][0]["hparams"]
    assert hparams["learning_rate"] == 0.5
    assert bad_run["state"] == "failed" and bad_run["tis"]["register"] == "failed", bad_run["tis"]
    log = airflow_api.http.get(
        f"/api/v2/dags/det_digits_drop/dagRuns/{bad_run_id}/taskInstances/register/logs/1"
    ).text
    assert "hyperparameters.lr: not a hyperparameter of this experiment" in log, log[-3000:]
    # One experiment for each run that passed register: the first and the overridden.
    dropped = [e for e in det.get("/experiments")["experiments"] if e["dag_id"] == "det_digits_drop"]
    assert sorted(e["dag_run_id"] for e in dropped) == sorted([run["dag_run_id"], good_run["dag_run_id"]])


def test_failed_trial_resumes_from_its_checkpoint_on_retry(det: DetEnv, tmp_path: Path) -> None:
    # The trial runs as an unprivileged user: the marker goes where it may create files.
    shared = Path(tempfile.mkdtemp(dir=det.af.home.parent))
    shared.chmod(0o1777)
    marker = shared / "failed-once"
    config = small_config(
        tmp_path,
        name="fail once",
        max_restarts=2,
        environment={"environment_variables": [f"FAIL_ONCE_MARKER={marker}"]},
    )
    experiment_id = det.create(config)
    answer = det.wait_experiment(experiment_id)
    assert answer["experiment"]["state"] == "COMPLETED"
    assert marker.exists(), "the trial never failed"
    (trial,) = answer["trials"]
    assert trial["state"] == "COMPLETED"
    assert trial["restarts"] == 1
    assert trial["total_batches"] == 100
    logs = det.det("trial", "logs", str(trial["id"])).stdout
    assert "FAIL_ONCE_MARKER: failing once" in logs
    assert "resum" in logs.lower()
    # The run after the failure started from the checkpoint, not from batch 0.
    training = det.get(f"/trials/{trial['id']}/metrics?group=training")["metrics"]
    steps = [m["steps_completed"] for m in training]
    assert steps == sorted(set(steps)), steps  # a restart from batch 0 would report a step twice


def test_trial_that_keeps_failing_ends_error_and_so_does_the_experiment(det: DetEnv, tmp_path: Path) -> None:
    config = small_config(
        tmp_path, name="always fails", max_restarts=1, entrypoint="python3 -c 'raise SystemExit(3)'"
    )
    experiment_id = det.create(config)
    answer = det.wait_experiment(experiment_id)
    assert answer["experiment"]["state"] == "ERROR"
    (trial,) = answer["trials"]
    assert trial["state"] == "ERROR" and trial["restarts"] == 2
    waited = det.det("experiment", "wait", str(experiment_id), check=False)
    assert waited.returncode == 1 and "ERROR" in waited.stdout


BAD_CONFIGS = {
    "unknown field": (
        "searcher:\n  name: single\n  metric: loss\n  max_lenght: 10\nentrypoint: x\n",
        "did you mean",
    ),
    "removed searcher": ("searcher: {name: pbt, metric: loss}\nentrypoint: x\n", "searcher.name"),
    "missing pool": (
        "searcher: {name: single, metric: loss}\nentrypoint: x\nresources: {resource_pool: no-such-pool}\n",
        "Airflow pool 'no-such-pool' does not exist",
    ),
    "slots beyond pool": (
        "searcher: {name: single, metric: loss}\nentrypoint: x\nresources: {resource_pool: tiny, slots_per_trial: 4}\n",
        "resources.slots_per_trial",
    ),
    "too many trial slots": (
        # Every trial at once (max_concurrent_trials 0): one trial slot each, past max_map_length.
        "searcher: {name: random, metric: loss, max_trials: 5000, max_concurrent_trials: 0}\nentrypoint: x\n",
        "max_map_length",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_bad_config_is_refused_with_a_clear_error_and_nothing_stored(
    det: DetEnv, tmp_path: Path, case: str
) -> None:
    det.af.airflow("pools", "set", "tiny", "2", "a small pool")
    text, expected = BAD_CONFIGS[case]
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    before = det.experiment_count()

    result = det.det("experiment", "create", str(path), str(tmp_path), check=False)
    assert result.returncode == 1
    assert expected in result.stderr
    assert "Traceback" not in result.stderr + result.stdout

    # The master checks too, for clients that skip the CLI's own validation.
    with det.api() as client:
        answer = client.post("/det/api/v1/experiments", json={"config": text, "context": None})
    assert answer.status_code == 400
    assert expected in answer.json()["detail"]
    assert det.experiment_count() == before


def test_oversized_context_is_refused_naming_the_largest_files(det: DetEnv, tmp_path: Path) -> None:
    context = tmp_path / "ctx"
    context.mkdir()
    shutil.copy(EXAMPLE / "train.py", context)
    with open(context / "weights.bin", "wb") as f:
        f.truncate(96 * 1024 * 1024)
    before = det.experiment_count()
    result = det.det("experiment", "create", str(EXAMPLE / "const.yaml"), str(context), check=False)
    assert result.returncode == 1
    assert "weights.bin" in result.stderr and ".detignore" in result.stderr
    assert "Traceback" not in result.stderr
    assert det.experiment_count() == before


def test_invalid_yaml_in_dags_folder_is_a_dag_of_its_own_and_others_still_load(
    det: DetEnv, airflow_api
) -> None:
    folder = det.af.dags_folder / "broken"
    folder.mkdir()
    (folder / "broken_exp.yaml").write_text(
        textwrap.dedent(
            """
            entrypoint: python3 train.py
            searcher:
              name: random
              metric: loss
              max_trials: ten
            """
        )
    )
    (folder / "fine_exp.yaml").write_text("entrypoint: echo hi\nsearcher: {name: single, metric: loss}\n")
    airflow_api.wait_for_dag("det_fine_exp")
    airflow_api.wait_for_dag("det_broken_exp")
    dag = airflow_api.http.get("/api/v2/dags/det_broken_exp").raise_for_status().json()
    assert "invalid" in [tag["name"] for tag in dag["tags"]]
    assert "searcher.max_trials: expected an integer >= 1, got 'ten'" in dag["description"]
    assert not [e for e in airflow_api.import_errors() if "broken_exp.yaml" in e["stack_trace"]]
    shutil.rmtree(folder)


def test_routes_refuse_wrong_or_missing_credentials_and_change_nothing(det: DetEnv, tmp_path: Path) -> None:
    experiment_id = det.create(small_config(tmp_path, name="auth check"))
    answer = det.wait_experiment(experiment_id)
    trial_id = answer["trials"][0]["id"]
    base = det.af.url + "/det/api/v1"
    before = det.get(f"/trials/{trial_id}/metrics")["metrics"]
    report = {"reports": [{"group": "validation", "steps_completed": 1, "metrics": {"validation_loss": -1}}]}

    assert httpx.get(f"{base}/experiments").status_code == 401
    assert httpx.post(f"{base}/runtime/trials/{trial_id}/metrics", json=report).status_code == 401
    bad = {"Authorization": "Bearer not-a-token"}
    assert (
        httpx.post(f"{base}/runtime/trials/{trial_id}/metrics", json=report, headers=bad).status_code == 403
    )
    assert (
        httpx.post(
            f"{base}/internal/experiments/register", json={"dag_id": "x", "run_id": "y"}, headers=bad
        ).status_code
        == 403
    )
    user = {"Authorization": f"Bearer {det.af.token()}"}
    # A person's login is not a trial's token.
    assert (
        httpx.post(f"{base}/runtime/trials/{trial_id}/metrics", json=report, headers=user).status_code == 403
    )
    assert det.get(f"/trials/{trial_id}/metrics")["metrics"] == before


def test_paused_experiment_waits_until_activated(det: DetEnv, tmp_path: Path) -> None:
    experiment_id = det.create(small_config(tmp_path, name="starts paused"), EXAMPLE, "--paused")
    created = datetime.now(UTC)
    experiment = det.get(f"/experiments/{experiment_id}")["experiment"]
    dag_id = experiment["dag_id"]
    # The master wrote the DAG into Airflow as it created the experiment: no wait for a parse.
    with det.api() as client:
        dag = client.get(f"/api/v2/dags/{dag_id}")
    assert dag.status_code == 200, dag.text
    assert dag.json()["fileloc"] == str(det.af.dags_folder / "det_experiments.py")

    # Wait for the condition that would let a trial start: the DAG run's trial slot has started and
    # is waiting (deferred) for the activation. Only then does "no trial yet" mean anything.

    def slot_deferred() -> bool:
        with det.api() as client:
            runs = client.get(f"/api/v2/dags/{dag_id}/dagRuns").json().get("dag_runs", [])
            if not runs:
                return False
            run_id = runs[0]["dag_run_id"]
            ti = client.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/trial/0")
            return ti.status_code == 200 and ti.json()["state"] == "deferred"

    wait_until(slot_deferred, "the paused experiment's trial slot deferring", timeout=120)

    def parsed_since_created() -> bool:
        with det.api() as client:
            parsed = client.get(f"/api/v2/dags/{dag_id}").raise_for_status().json()["last_parsed_time"]
        return datetime.fromisoformat(parsed) > created + timedelta(seconds=6)

    # The DAG processor's own parse of the factory then writes the very same DAG: one version.
    # (It compares its DAG with the stored one once [core] min_serialized_dag_update_interval, 5 s
    # here, has passed since the master wrote it.)
    wait_until(parsed_since_created, "the DAG processor parsing the experiment's DAG", timeout=120)
    with det.api() as client:
        versions = client.get(f"/api/v2/dags/{dag_id}/dagVersions").raise_for_status().json()
    assert [v["version_number"] for v in versions["dag_versions"]] == [1], versions
    answer = det.get(f"/experiments/{experiment_id}")
    assert answer["experiment"]["state"] == "PAUSED"
    assert answer["trials"] == []
    assert "Activated experiment" in det.det("experiment", "activate", str(experiment_id)).stdout
    assert det.wait_experiment(experiment_id)["experiment"]["state"] == "COMPLETED"


def test_context_is_packed_honouring_detignore(det: DetEnv, tmp_path: Path) -> None:
    context = tmp_path / "ctx"
    shutil.copytree(EXAMPLE, context)
    (context / "big_data").mkdir()
    (context / "big_data" / "x.bin").write_bytes(b"0" * 1000)
    (context / ".detignore").write_text("big_data/\n")
    out = det.det("experiment", "create", str(small_config(tmp_path, name="detignore")), str(context)).stdout
    assert f"Preparing files ({context}) to send to master..." in out
    experiment_id = int(out.rsplit("Created experiment", 1)[1].split()[0])
    with det.api() as client:
        data = client.get(f"/det/api/v1/experiments/{experiment_id}/context").content
    names = tarfile.open(fileobj=io.BytesIO(data)).getnames()
    assert "train.py" in names and not [n for n in names if n.startswith("big_data")]
    assert det.wait_experiment(experiment_id)["experiment"]["state"] == "COMPLETED"


def test_pause_checkpoints_and_frees_the_slot_and_activate_resumes_from_it(
    det: DetEnv, tmp_path: Path
) -> None:
    config = small_config(tmp_path, name="pause me", scheduling_unit=20)
    config_data = yaml.safe_load(config.read_text())
    config_data["searcher"]["max_length"] = {"batches": 400}
    config.write_text(yaml.safe_dump(config_data))
    experiment_id = det.create(config)
    wait_until(
        lambda: [
            t for t in det.get(f"/experiments/{experiment_id}/trials")["trials"] if t["latest_checkpoint"]
        ],
        "a first checkpoint of the trial",
        timeout=300,
    )
    assert "Paused experiment" in det.det("experiment", "pause", str(experiment_id)).stdout

    (trial,) = wait_until(
        lambda: [
            t for t in det.get(f"/experiments/{experiment_id}/trials")["trials"] if t["state"] == "PAUSED"
        ],
        "the trial reaching PAUSED",
        timeout=120,
    )
    paused_at = trial["total_batches"]
    assert 0 < paused_at < 400

    # The paused trial's task goes on waiting deferred, holding no pool slot (the pool does not
    # count deferred tasks against its open slots).
    wait_until(
        lambda: _trial_task_state(det, experiment_id) == "deferred",
        "the paused trial's task waiting deferred",
        timeout=60,
    )
    with det.api() as client:
        pool = client.get("/api/v2/pools/default_pool").raise_for_status().json()
    assert pool["running_slots"] == 0 and pool["open_slots"] == pool["slots"], pool

    # Activated at once, within moments of the task deferring: the slot starts in a new try of its
    # task (a resumed deferred try could be failed by Airflow as killed externally).
    assert "Activated experiment" in det.det("experiment", "activate", str(experiment_id)).stdout
    answer = det.wait_experiment(experiment_id)
    assert answer["experiment"]["state"] == "COMPLETED"
    (trial,) = answer["trials"]
    assert trial["total_batches"] == 400 and trial["restarts"] == 0
    logs = det.det("trial", "logs", str(trial["id"])).stdout
    assert f"at batch {paused_at}" in logs  # resumed from the checkpoint taken when paused
    task = _trial_task(det, experiment_id)
    assert task is not None and (task["state"], task["try_number"]) == ("success", 2)
    experiment = det.get(f"/experiments/{experiment_id}")["experiment"]
    with det.api() as client:
        tries = client.get(
            f"/api/v2/dags/{experiment['dag_id']}/dagRuns/{experiment['dag_run_id']}"
            "/taskInstances/trial/0/tries"
        ).raise_for_status()
    assert [(t["try_number"], t["state"]) for t in tries.json()["task_instances"]] == [
        (1, "success"),
        (2, "success"),
    ]


def _trial_task(det: DetEnv, experiment_id: int) -> dict | None:
    """Airflow's task instance of the experiment's (single) trial slot, once it has one."""
    experiment = det.get(f"/experiments/{experiment_id}")["experiment"]
    with det.api() as client:
        r = client.get(
            f"/api/v2/dags/{experiment['dag_id']}/dagRuns/{experiment['dag_run_id']}/taskInstances"
        ).raise_for_status()
    tasks = [ti for ti in r.json()["task_instances"] if ti["task_id"] == "trial"]
    return tasks[0] if len(tasks) == 1 else None


def _trial_task_state(det: DetEnv, experiment_id: int) -> str | None:
    """The Airflow state of the experiment's (single) trial task instance."""
    task = _trial_task(det, experiment_id)
    return None if task is None else task["state"]
