"""The experiment DAG's bookends: register the run, wait for the search, finalize."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator, BaseSensorOperator, Context

from det_airflow.api.models import SearcherStatus
from det_airflow.errors import DetError
from det_airflow.operators.hooks import DetHook
from det_airflow.operators.triggers import ExperimentReadyTrigger
from det_airflow.states import ExperimentState

#: The XCom key under which the register task keeps the hash of the context it packed.
CONTEXT_HASH_KEY = "context_sha256"


class RegisterExperimentOperator(BaseOperator):
    """Links the DAG run to its experiment; a YAML dropped into dags/ becomes a new experiment.

    Returns the experiment id (XCom) that the searcher and trial tasks read.
    """

    ui_color = "#d6e4ff"

    def __init__(
        self,
        *,
        config_path: str,
        experiment_id: int | None = None,
        master_conn_id: str = "det_default",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.config_path = config_path
        self.experiment_id = experiment_id
        self.master_conn_id = master_conn_id

    def execute(self, context: Context) -> int:
        from airflow.sdk.exceptions import AirflowFailException

        from det_airflow.context_archive import pack_context
        from det_airflow.lineage import context_sha256

        dag_run = context["dag_run"]
        config = context_bytes = None
        run_conf = dict(getattr(dag_run, "conf", None) or {})
        if self.experiment_id is None:
            path = Path(self.config_path)
            try:
                config = with_run_conf(path, run_conf)
            except DetError as exc:
                raise AirflowFailException(str(exc)) from None  # a retry would not fix the conf
            packed = pack_context(path.parent)
            context_bytes = packed.data
            context["ti"].xcom_push(key=CONTEXT_HASH_KEY, value=context_sha256(packed.data))
            self.log.info(
                "Packed context %s: %d files, %d bytes", path.parent, packed.file_count, packed.size
            )
        elif run_conf:
            raise AirflowFailException(
                f"experiment {self.experiment_id} was created with `det experiment create`; a run's conf "
                f"cannot change it (got keys: {', '.join(map(str, run_conf))})"
            )
        client = DetHook(self.master_conn_id).get_conn()
        try:
            answer = client.register(
                dag_id=dag_run.dag_id,
                run_id=dag_run.run_id,
                experiment_id=self.experiment_id,
                config=config,
                context=context_bytes,
                owner=getattr(dag_run, "triggering_user_name", None),
            )
        finally:
            client.close()
        self.log.info("Experiment %s (%s)", answer.experiment_id, answer.state)
        return answer.experiment_id


def with_run_conf(path: Path, run_conf: dict[str, Any]) -> str:
    """The YAML at `path` with a run's conf applied (airflow dags trigger -c, the Trigger form),
    validated as `det experiment create` validates a config; the file's text when there is none."""
    import yaml

    from det_airflow.config import apply_run_conf, parse_config, read_yaml
    from det_airflow.errors import ConfigError

    text = path.read_text()
    if not run_conf:
        return text
    source = f"{path} with the run's conf"
    raw = read_yaml(text, str(path))
    problems = apply_run_conf(raw, run_conf)
    if problems:
        raise ConfigError(problems, source=source)
    parse_config(raw, source_name=source)
    return yaml.safe_dump(raw, sort_keys=False)


class SearcherSensor(BaseSensorOperator):
    """Waits until the experiment is active and its search has started; returns its trial slots."""

    template_fields: Sequence[str] = ("experiment_id",)
    ui_color = "#fff2cc"

    def __init__(
        self,
        *,
        experiment_id: Any,
        master_conn_id: str = "det_default",
        deferrable: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.experiment_id = experiment_id
        self.master_conn_id = master_conn_id
        self.deferrable = deferrable

    def _status(self) -> SearcherStatus:
        client = DetHook(self.master_conn_id).get_conn()
        try:
            return client.searcher_status(int(self.experiment_id))
        finally:
            client.close()

    def poke(self, context: Context) -> bool:
        return self._status().ready

    def execute(self, context: Context) -> list[int]:
        status = self._status()
        if status.ready:
            return self._slots(status)
        if not self.deferrable:
            super().execute(context)
            return self._slots(self._status())
        self.log.info("Experiment %s is %s; waiting until it is activated", self.experiment_id, status.state)
        master, token = DetHook(self.master_conn_id).credentials
        self.defer(
            trigger=ExperimentReadyTrigger(master, token, int(self.experiment_id)),
            method_name="execute_complete",
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> list[int]:
        if event.get("status") == "error":
            raise RuntimeError(event["message"])
        return self._slots(self._status())

    def _slots(self, status: SearcherStatus) -> list[int]:
        if status.state.is_terminal:
            self.log.info("Experiment %s is already %s", self.experiment_id, status.state)
            return []
        return list(range(status.slots))


class FinalizeExperimentOperator(BaseOperator):
    """Settles the experiment's state once its trial tasks are done; succeeds only if COMPLETED.

    On success its outlet Asset gets an event whose ``extra`` names the experiment and its best
    checkpoint (``det_airflow.lineage.finished_event_extra``), so downstream DAGs scheduled on it
    read what to deploy or evaluate from ``triggering_asset_events``.
    """

    template_fields: Sequence[str] = ("experiment_id",)
    ui_color = "#d9ead3"

    def __init__(
        self,
        *,
        experiment_id: Any,
        master_conn_id: str = "det_default",
        lineage_data: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.experiment_id = experiment_id
        self.master_conn_id = master_conn_id
        self.lineage_data = lineage_data  # the config's `data` section, named as OpenLineage inputs
        self._event_extra: dict[str, Any] | None = None
        self._context_hash: str | None = None

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowFailException

        from det_airflow.api.pipeline import PipelineClient
        from det_airflow.lineage import finished_event_extra

        if self.experiment_id is None:
            raise AirflowFailException("no experiment to finalize: the register task did not create one")
        hook = DetHook(self.master_conn_id)
        client = hook.get_conn()
        try:
            answer = client.finalize(int(self.experiment_id))
        finally:
            client.close()
        experiment = answer.experiment
        self.log.info(
            "Experiment %s ended %s; best checkpoint %s",
            experiment.id,
            experiment.state,
            answer.best_checkpoint,
        )
        if experiment.state != ExperimentState.COMPLETED:
            detail = f": {experiment.error}" if experiment.error else ""
            raise AirflowFailException(f"experiment {experiment.id} ended {experiment.state}{detail}")
        outcomes = PipelineClient(*hook.credentials)
        try:
            outcome = outcomes.outcome(experiment.id)
        finally:
            outcomes.close()
        extra = finished_event_extra(outcome.as_xcom(), outcome.best_checkpoint_uri)
        self._event_extra = extra
        if self.has_dag() and self.dag.has_task("register"):
            self._context_hash = context["ti"].xcom_pull(task_ids="register", key=CONTEXT_HASH_KEY)
        for outlet in self.outlets:
            context["outlet_events"][outlet].extra = extra
        return {**extra, "best_checkpoint": extra["best_checkpoint_uuid"]}

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Inputs: the ``data`` section's URLs and the context's hash; output: the best checkpoint."""
        from det_airflow.lineage import experiment_inputs, experiment_outputs, operator_lineage

        extra = self._event_extra or {}
        return operator_lineage(
            experiment_inputs(self.lineage_data, self._context_hash),
            experiment_outputs([extra.get("best_checkpoint_uri")]),
        )
