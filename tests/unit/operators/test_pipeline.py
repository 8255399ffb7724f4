"""DetExperimentOperator's pieces against the real master app on SQLite over HTTP, reached with the
service token as a pipeline task reaches it: submission on behalf of an owner, the outcome with the
best checkpoint, the trigger that waits for the end, and how the task ends."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from airflow.sdk.exceptions import AirflowException, AirflowFailException
from sqlalchemy import update

from det_airflow.api._http import API_PREFIX
from det_airflow.api.pipeline import PipelineClient
from det_airflow.errors import APIError
from det_airflow.master import schema
from det_airflow.operators.hooks import DetHook
from det_airflow.operators.pipeline import (
    DetExperimentOperator,
    DetExperimentTrigger,
    PipelineError,
    parse_fail_on,
    resolve_config,
    submit,
)
from det_airflow.states import ExperimentState
from tests.unit.master.creating import CONFIG, Creator, creator  # noqa: F401
from tests.unit.master.people_app import People, people  # noqa: F401
from tests.unit.operators.test_kubernetes_deferral import SERVICE_TOKEN, master  # noqa: F401

LOG = logging.getLogger(__name__)
BAD_CONFIG = (
    "name: broken\nentrypoint: python3 train.py\nsearcher: {name: single, metric: loss, max_trials: ten}\n"
)


@pytest.fixture
def url(master: tuple[People, str]) -> str:  # noqa: F811
    return master[1]


@pytest.fixture
def hook(url: str, monkeypatch: pytest.MonkeyPatch) -> DetHook:
    monkeypatch.setenv(
        "AIRFLOW_CONN_DET_DEFAULT",
        f'{{"conn_type": "det", "host": "{url}", "password": "{SERVICE_TOKEN}", "extra": {{"owner": "bob"}}}}',
    )
    return DetHook()


def _set_state(app: People, experiment_id: int, state: str) -> None:
    with app.db.begin() as conn:
        conn.execute(
            update(schema.experiments).where(schema.experiments.c.id == experiment_id).values(state=state)
        )


def test_a_pipeline_submits_on_behalf_of_its_owner_and_gets_its_own_dag(
    master: tuple[People, str],  # noqa: F811
    url: str,
) -> None:
    app, _ = master
    outcome = PipelineClient(url, SERVICE_TOKEN).submit(
        config=CONFIG, context=None, owner="alice", request_id="pipeline-1"
    )

    row = app.experiment(outcome.experiment_id)
    assert (row.owner, row.dag_id, outcome.state) == ("alice", f"det_exp_{row.id}", ExperimentState.ACTIVE)
    assert (outcome.best_checkpoint_uuid, outcome.best_metric, outcome.metric) == (None, None, "loss")
    again = PipelineClient(url, SERVICE_TOKEN).submit(
        config=CONFIG, context=None, owner="alice", request_id="pipeline-1"
    )
    assert again.experiment_id == outcome.experiment_id, "a repeated request makes no second experiment"


def test_only_the_service_token_may_submit(url: str) -> None:
    answer = httpx.post(
        f"{url}{API_PREFIX}/internal/pipeline/experiments",
        json={"config": CONFIG, "owner": "alice"},
        headers={"Authorization": "Bearer not-the-token"},
    )
    assert answer.status_code == 403


def test_a_config_the_master_refuses_fails_the_task_with_its_message(hook: DetHook, tmp_path: Path) -> None:
    with pytest.raises(APIError, match="max_trials"):
        PipelineClient(*hook.credentials).submit(config=BAD_CONFIG, context=None, owner="a", request_id=None)
    with pytest.raises(AirflowFailException, match=r"the master refused the experiment: .*max_trials"):
        submit(hook, yaml.safe_load(BAD_CONFIG), None, owner="a", request_id=None, base=tmp_path, log=LOG)


def test_the_outcome_names_the_best_completed_checkpoint_by_the_searcher_metric(
    master: tuple[People, str],  # noqa: F811
    url: str,
) -> None:
    app, _ = master
    e = app.add_experiment(owner="alice")  # searcher metric "loss", smaller is better
    t = app.add_trial(e, state="COMPLETED")
    for uuid, loss in (("c-high", 0.9), ("c-low", 0.1), ("c-mid", 0.5)):
        app.add_checkpoint(t, uuid)
        with app.db.begin() as conn:
            conn.execute(
                update(schema.checkpoints)
                .where(schema.checkpoints.c.uuid == uuid)
                .values(validation_metric=loss)
            )

    outcome = PipelineClient(url, SERVICE_TOKEN).outcome(e)

    assert (outcome.best_checkpoint_uuid, outcome.best_metric) == ("c-low", 0.1)


def _first_event(trigger: DetExperimentTrigger, timeout: float) -> dict[str, Any] | None:
    async def first() -> dict[str, Any] | None:
        async for event in trigger.run():
            return dict(event.payload)
        return None

    try:
        return asyncio.run(asyncio.wait_for(first(), timeout))
    except TimeoutError:
        return None


def test_the_trigger_waits_while_the_experiment_runs_and_fires_when_it_ends(
    master: tuple[People, str],  # noqa: F811
    url: str,
    hook: DetHook,
) -> None:
    app, _ = master
    e = app.add_experiment(owner="alice")
    trigger = DetExperimentTrigger(url, SERVICE_TOKEN, e, poll_interval=0.05, min_wait=0)
    classpath, kwargs = trigger.serialize()
    assert classpath == "det_airflow.operators.pipeline.DetExperimentTrigger"
    assert DetExperimentTrigger(**kwargs).serialize() == (classpath, kwargs)

    assert _first_event(trigger, timeout=1.0) is None, "an ACTIVE experiment keeps it waiting"
    _set_state(app, e, "COMPLETED")
    event = _first_event(trigger, timeout=5.0)

    assert event is not None and (event["status"], event["experiment_id"], event["state"]) == (
        "ended",
        e,
        "COMPLETED",
    )
    operator = DetExperimentOperator(task_id="train", config=CONFIG)
    assert operator.execute_complete({}, event)["state"] == "COMPLETED"  # type: ignore[arg-type]
    _set_state(app, e, "ERROR")
    with pytest.raises(AirflowException, match=f"experiment {e} ended ERROR"):
        operator.execute_complete({}, {**event, "state": "ERROR"})  # type: ignore[arg-type]
    tolerant = DetExperimentOperator(task_id="train2", config=CONFIG, fail_on=["CANCELED"])
    assert tolerant.execute_complete({}, event)["state"] == "ERROR"  # type: ignore[arg-type]


def test_the_trigger_reports_an_experiment_that_does_not_exist(url: str) -> None:
    event = _first_event(DetExperimentTrigger(url, SERVICE_TOKEN, 999, poll_interval=0.05, min_wait=0), 5.0)
    assert event is not None and event["status"] == "error" and "999" in event["message"]


def test_fail_on_accepts_only_states_an_experiment_ends_in() -> None:
    assert parse_fail_on(["error", "CANCELED"]) == {ExperimentState.ERROR, ExperimentState.CANCELED}
    with pytest.raises(
        PipelineError, match=r"fail_on: 'RUNNING' is not a state an experiment ends in \(CANCELED"
    ):
        parse_fail_on(["RUNNING"])


def test_a_config_is_a_path_a_dict_or_the_name_of_a_dropped_yaml(tmp_path: Path) -> None:
    dags = tmp_path / "dags"
    (dags / "team" / "mnist").mkdir(parents=True)
    (dags / "team" / "mnist" / "const.yaml").write_text(CONFIG)
    (dags / "experiments").mkdir()
    (dags / "experiments" / "exp_3.yaml").write_text(CONFIG)

    assert resolve_config("const", None, base=tmp_path, dags_folder=dags) == (CONFIG, dags / "team" / "mnist")
    assert resolve_config("team/mnist/const.yaml", "code", base=dags, dags_folder=dags) == (
        CONFIG,
        dags / "code",
    )
    text, context = resolve_config({"name": "x"}, None, base=tmp_path, dags_folder=dags)
    assert (text, context) == ("name: x\n", None)
    with pytest.raises(PipelineError, match=r"config: 'exp_3' is neither a file nor an experiment YAML"):
        resolve_config("exp_3", None, base=tmp_path, dags_folder=dags)
    with pytest.raises(PipelineError, match=r"config: no file .*/missing/x.yaml"):
        resolve_config("missing/x.yaml", None, base=tmp_path, dags_folder=dags)


# --- what every reader of the DAG sees of a config: its rendered fields, masked ---

# A config as a DAG writes it, its secrets templated in from params (or Variables, or XCom).
# det's mask, and Airflow's where its own masker also hides a value (under a key such as "password").
MASKS = ("********", "***")
SECRETS = {
    "wandb": "wandb-api-key-0123456789",
    "registry": "registry-password-abcdef",
    "reader": "reader-password-987654",
    "token": "data-token-zyxwvu",
}
TEMPLATED_CONFIG = {
    "name": "masked-{{ params.run }}",
    "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
    "environment": {
        "environment_variables": ["WANDB_API_KEY={{ params.wandb }}", "LOG_LEVEL=info"],
        "registry_auth": {"username": "bob", "password": "{{ params.registry }}"},
    },
    "data": {
        "url": "https://reader:{{ params.reader }}@data.internal/set",
        "secrets": {"token": "{{ params.token }}"},
    },
}


def test_the_rendered_config_every_dag_reader_sees_is_masked_and_the_submitted_one_is_not(
    master: tuple[People, str],  # noqa: F811
    hook: DetHook,
    tmp_path: Path,
) -> None:
    from airflow.sdk import DAG
    from airflow.sdk.execution_time.task_runner import _serialize_rendered_fields

    with DAG("pipeline_masking", schedule=None) as dag:
        operator = DetExperimentOperator(task_id="train", config=TEMPLATED_CONFIG)
    # As the task runner does: a copy locked for execution, rendered, then its rendered fields
    # serialized for the API server, which stores them (RenderedTaskInstanceFields) for every reader.
    task = operator.prepare_for_execution()
    task.render_template_fields({"params": {"run": "7", **SECRETS}}, jinja_env=dag.get_template_env())
    shown = _serialize_rendered_fields(task)

    assert not [s for s in SECRETS.values() if s in json.dumps(shown)], shown
    config = shown["config"]
    assert config["name"] == "masked-7"  # rendered
    assert config["environment"]["environment_variables"] == ["WANDB_API_KEY=********", "LOG_LEVEL=********"]
    assert config["environment"]["registry_auth"]["username"] == "bob"
    # Under keys Airflow's own masker knows (password, token) it shows its own mask over det's.
    assert config["environment"]["registry_auth"]["password"] in MASKS
    assert config["data"]["url"] == "https://********@data.internal/set"
    assert config["data"]["secrets"]["token"] in MASKS

    # The experiment itself gets the values, which its owner (and no one else) sees through det's API.
    app, _ = master
    outcome = submit(hook, task.config, None, owner="alice", request_id="masked-1", base=tmp_path, log=LOG)
    stored = app.experiment(outcome.experiment_id).config
    assert f"WANDB_API_KEY={SECRETS['wandb']}" in stored["environment"]["environment_variables"]["cpu"]
    assert stored["data"]["secrets"] == {"token": SECRETS["token"]}
    assert stored["environment"]["registry_auth"]["password"] == SECRETS["registry"]


def test_a_config_an_xcom_renders_is_masked_too() -> None:
    """A config from an upstream task's XCom is set on the task as it renders: masked all the same."""
    from airflow.sdk.execution_time.task_runner import _serialize_rendered_fields

    task = DetExperimentOperator(task_id="train", config="const.yaml").prepare_for_execution()
    variables = [f"WANDB_API_KEY={SECRETS['wandb']}"]
    task.config = {**TEMPLATED_CONFIG, "environment": {"environment_variables": variables}}  # as rendered

    shown = _serialize_rendered_fields(task)
    assert SECRETS["wandb"] not in json.dumps(shown)
    assert shown["config"]["environment"]["environment_variables"] == ["WANDB_API_KEY=********"]
    assert dict(task.config)["environment"]["environment_variables"] == variables


def test_a_config_naming_an_upstream_output_still_depends_on_it() -> None:
    from airflow.sdk import DAG, task

    with DAG("pipeline_upstream", schedule=None):

        @task
        def pick_lr() -> float:
            return 0.1

        lr = pick_lr()
        train = DetExperimentOperator(
            task_id="train", config={**TEMPLATED_CONFIG, "hyperparameters": {"lr": lr}}
        )
    assert train.upstream_task_ids == {"pick_lr"}
