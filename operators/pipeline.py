"""A det experiment as one task of anyone's DAG: submit it, wait deferred, hand on the best checkpoint.

Example:
    >>> from det_airflow.operators.pipeline import DetExperimentOperator
    >>> train = DetExperimentOperator(task_id="train", config="adaptive.yaml")
    >>> # downstream: train.output["best_checkpoint_uuid"]

Who the experiment belongs to: the task submits with det's service token from its ``det``
connection (no person's login is at hand in a scheduled or Asset-triggered run), on behalf of an
owner named by ``experiment_owner``, else by the connection's ``owner`` extra, else the task's own
``owner``. Airflow's auth manager is not asked at submission: whoever may write a DAG that uses the
connection may submit as any owner, as they may already use the connection for anything else. The
owner may then pause, kill or delete the experiment like one of their own
(``det_airflow/master/routes_pipeline.py``).

A config given as a mapping is a template field, shown after rendering to every reader of the DAG
(the task instance's rendered fields); it is shown there masked as det's API masks configs for
anyone but their owner (:class:`MaskedConfig`), while the experiment is submitted with its values.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, BaseOperatorLink, BaseSensorOperator, Context, PokeReturnValue

from det_airflow.api.pipeline import ExperimentOutcome, PipelineClient, async_outcome
from det_airflow.errors import APIError, DetError
from det_airflow.operators.hooks import DetHook
from det_airflow.operators.triggers import _PollingTrigger
from det_airflow.states import TERMINAL_EXPERIMENT_STATES, ExperimentState

if TYPE_CHECKING:
    from airflow.sdk.types import TaskInstanceKey

    from det_airflow.api.internal import AsyncInternalClient

#: The XCom key under which a task keeps its experiment's id as soon as it has submitted it.
EXPERIMENT_ID_KEY = "experiment_id"
#: The XCom key of what the submitted experiment reads: its data URLs and its context's hash.
LINEAGE_INPUTS_KEY = "lineage_inputs"
DEFAULT_FAIL_ON = (ExperimentState.ERROR.value, ExperimentState.CANCELED.value)
_YAML_SUFFIXES = (".yaml", ".yml")


class PipelineError(DetError):
    """A pipeline task's arguments are wrong (the config cannot be found, a state is unknown)."""


class MaskedConfig(Mapping[str, Any]):
    """An experiment config (a mapping) that reads as itself but shows itself masked.

    Airflow renders its values in place (``template_fields``) and stores and shows what
    ``serialize()`` answers (the rendered fields, the serialized DAG): the config with its
    secrets masked as det's API masks them (``det_airflow.master.serialize.masked_config``).
    """

    template_fields: Sequence[str] = ("value",)

    def __init__(self, value: Mapping[str, Any]) -> None:
        self.value = value

    def __getitem__(self, key: str) -> Any:
        return self.value[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.value)

    def __len__(self) -> int:
        return len(self.value)

    def serialize(self) -> dict[str, Any]:
        from det_airflow.master.serialize import masked_config

        return masked_config(_plain(self.value))

    def __repr__(self) -> str:
        return repr(self.serialize())

    __str__ = __repr__


def _plain(value: Any) -> Any:
    """``value`` as JSON-like data: mappings as dicts, sequences as lists (masking copies these)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


class DetExperimentLink(BaseOperatorLink):
    """The experiment's page in the det web UI, from the task's ``experiment_id`` XCom."""

    name = "Determined experiment"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        # The Task SDK's XCom: the configured backend, read through the API server.
        from airflow.sdk.execution_time.xcom import XCom

        from det_airflow.dagfactory import experiment_page

        experiment_id = XCom.get_value(ti_key=ti_key, key=EXPERIMENT_ID_KEY)
        return experiment_page(int(experiment_id)) if experiment_id is not None else ""


class DetExperimentTrigger(_PollingTrigger):
    """Fires once the experiment has ended (COMPLETED, CANCELED, ERROR or DELETED)."""

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("det_airflow.operators.pipeline.DetExperimentTrigger", self._kwargs())

    async def _check(self, client: AsyncInternalClient) -> dict[str, Any] | None:
        outcome = await async_outcome(self.master, self.token, self.experiment_id)
        if not outcome.state.is_terminal:
            return None
        return {"status": "ended", **outcome.as_xcom()}


def parse_fail_on(fail_on: Collection[str]) -> frozenset[ExperimentState]:
    """``fail_on`` as states, each of which an experiment can end in."""
    if isinstance(fail_on, str):
        fail_on = (fail_on,)
    ended = sorted(s.value for s in TERMINAL_EXPERIMENT_STATES)
    states = set()
    for name in fail_on:
        try:
            state = ExperimentState(str(name).upper())
        except ValueError:
            state = None
        if state is None or not state.is_terminal:
            raise PipelineError(
                f"fail_on: {name!r} is not a state an experiment ends in ({', '.join(ended)})"
            )
        states.add(state)
    return frozenset(states)


def resolve_config(
    config: str | Path | Mapping[str, Any], context_dir: str | Path | None, *, base: Path, dags_folder: Path
) -> tuple[str, Path | None]:
    """The experiment YAML and its context folder.

    ``config`` is a mapping, a path to a YAML (relative paths start at ``base``, the DAG file's
    folder), or the name of an experiment YAML dropped under the DAGs folder (``"const"`` or
    ``"const.yaml"``). A YAML file's context is its own folder unless ``context_dir`` says otherwise;
    a mapping has a context only when ``context_dir`` is given.
    """
    import yaml

    context = None if context_dir is None else base / Path(context_dir).expanduser()
    if isinstance(config, Mapping):
        return yaml.safe_dump(dict(config), sort_keys=False), context
    path = _config_path(str(config), base=base, dags_folder=dags_folder)
    try:
        text = path.read_text()
    except OSError as exc:
        raise PipelineError(f"config: cannot read {path}: {exc.strerror or exc}") from None
    return text, context if context is not None else path.parent


def _config_path(config: str, *, base: Path, dags_folder: Path) -> Path:
    candidate = base / Path(config).expanduser()
    if "/" in config or candidate.is_file():
        if not candidate.is_file():
            raise PipelineError(f"config: no file {candidate}")
        return candidate
    from det_airflow.dagfactory import EXPERIMENTS_SUBDIR, experiment_yamls

    wanted = {config} if config.endswith(_YAML_SUFFIXES) else {config + s for s in _YAML_SUFFIXES}
    found = [
        path
        for path in experiment_yamls(dags_folder)
        if path.name in wanted and path.relative_to(dags_folder).parts[0] != EXPERIMENTS_SUBDIR
    ]
    if not found:
        raise PipelineError(
            f"config: {config!r} is neither a file nor an experiment YAML under the DAGs folder {dags_folder}"
        )
    if len(found) > 1:
        raise PipelineError(
            f"config: {config!r} names several YAMLs under {dags_folder}: "
            + ", ".join(str(p.relative_to(dags_folder)) for p in found)
            + "; give the path of one"
        )
    return found[0]


def request_id_for(ti: Any) -> str:
    """One submission per task try: a repeated call (a lost answer) gets the same experiment, a
    retry submits a new one."""
    key = f"{ti.dag_id}\0{ti.run_id}\0{ti.task_id}\0{getattr(ti, 'map_index', -1)}\0{ti.try_number}"
    return "pipeline-" + hashlib.sha256(key.encode()).hexdigest()[:48]


def submit(
    hook: DetHook,
    config: str | Path | Mapping[str, Any],
    context_dir: str | Path | None,
    *,
    owner: str,
    request_id: str | None,
    base: Path,
    log: Any,
    ti: Any = None,
) -> ExperimentOutcome:
    """Resolves, packs and submits the experiment. Raises AirflowFailException for what a retry
    would not fix: a config or context the master refuses, or one that cannot be found.

    With ``ti``, what the experiment reads is pushed as XCom ``lineage_inputs`` for OpenLineage."""
    from airflow.sdk import conf
    from airflow.sdk.exceptions import AirflowFailException

    from det_airflow.context_archive import pack_context

    dags_folder = Path(conf.get("core", "dags_folder")).expanduser()
    try:
        text, context = resolve_config(config, context_dir, base=base, dags_folder=dags_folder)
        data = None
        if context is not None:
            packed = pack_context(context)
            data = packed.data
            log.info("Packed context %s: %d files, %d bytes", context, packed.file_count, packed.size)
    except DetError as exc:
        raise AirflowFailException(str(exc)) from None
    if ti is not None:
        ti.xcom_push(key=LINEAGE_INPUTS_KEY, value=lineage_inputs(text, data))
    client = PipelineClient(*hook.credentials)
    try:
        outcome = client.submit(config=text, context=data, owner=owner, request_id=request_id)
    except APIError as exc:
        if exc.status_code is not None and 400 <= exc.status_code < 500:
            raise AirflowFailException(f"the master refused the experiment: {exc}") from None
        raise
    finally:
        client.close()
    log.info("Submitted experiment %s as %s (%s)", outcome.experiment_id, outcome.owner, outcome.state)
    return outcome


def lineage_inputs(config_text: str, context: bytes | None) -> dict[str, Any]:
    """What an experiment reads, as plain JSON: the URLs of its ``data`` section and the hash of its
    packed context (None without one)."""
    import yaml

    from det_airflow.lineage import context_sha256, data_urls

    try:
        raw = yaml.safe_load(config_text)
    except yaml.YAMLError:
        raw = None
    data = raw.get("data") if isinstance(raw, Mapping) else None
    return {"data": data_urls(data), "context_sha256": context_sha256(context) if context else None}


def finish(outcome: ExperimentOutcome, fail_on: frozenset[ExperimentState], log: Any) -> dict[str, Any]:
    """The task's return value; raises when the experiment ended in a ``fail_on`` state."""
    from airflow.sdk.exceptions import AirflowException

    log.info(
        "Experiment %s ended %s; best checkpoint %s (%s = %s)",
        outcome.experiment_id,
        outcome.state,
        outcome.best_checkpoint_uuid,
        outcome.metric,
        outcome.best_metric,
    )
    if outcome.state in fail_on:
        detail = f": {outcome.error}" if outcome.error else ""
        raise AirflowException(f"experiment {outcome.experiment_id} ended {outcome.state}{detail}")
    return outcome.as_xcom()


def _outcome(hook: DetHook, experiment_id: int) -> ExperimentOutcome:
    client = PipelineClient(*hook.credentials)
    try:
        return client.outcome(experiment_id)
    finally:
        client.close()


def wait_until_ended(hook: DetHook, experiment_id: int, poll_interval: float) -> ExperimentOutcome:
    """Polls the master from this process until the experiment has ended."""
    while not (outcome := _outcome(hook, experiment_id)).state.is_terminal:
        time.sleep(poll_interval)
    return outcome


class _WaitsOnExperiment:
    """What the operator and the sensor share: deferring on the trigger and settling its event."""

    det_conn_id: str
    poll_interval: float
    fail_on_states: frozenset[ExperimentState]
    log: Any

    def _defer_until_ended(self, experiment_id: int) -> None:
        master, token = DetHook(self.det_conn_id).credentials
        trigger = DetExperimentTrigger(master, token, experiment_id, poll_interval=self.poll_interval)
        self.defer(trigger=trigger, method_name="execute_complete")  # type: ignore[attr-defined]

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowException

        if event.get("status") == "error":
            raise AirflowException(event["message"])
        outcome = _outcome(DetHook(self.det_conn_id), int(event["experiment_id"]))
        return finish(outcome, self.fail_on_states, self.log)


class DetExperimentOperator(_WaitsOnExperiment, BaseOperator):
    """Runs a det experiment from a DAG task: submits it, then waits (deferred, holding no worker)
    until it ends.

    Returns (XCom ``return_value``) ``{"experiment_id", "state", "best_checkpoint_uuid",
    "best_metric", "metric"}``; the experiment's id is also pushed as ``experiment_id`` as soon as it
    is submitted. Fails when the experiment ends in a ``fail_on`` state (a retry submits a new
    experiment), or at once when the master refuses the config.

    Args:
        config: the experiment config: a path to its YAML (relative to the DAG file's folder), a
            dict, or the name of an experiment YAML dropped under the DAGs folder.
        context_dir: the training code's folder (default: the YAML's folder; none for a dict).
        det_conn_id: the ``det`` connection (master URL and service token).
        experiment_owner: the user the experiment belongs to (default: the connection's ``owner``
            extra, else the task's ``owner``).
        wait: wait for the experiment to end; False returns once it is submitted.
        deferrable: wait in the triggerer; False polls from the worker.
        fail_on: end states that fail the task.
        poll_interval: seconds between looks at the master while waiting.
    """

    template_fields: Sequence[str] = ("config", "context_dir", "experiment_owner")
    template_fields_renderers = {"config": "yaml"}
    operator_extra_links = (DetExperimentLink(),)
    ui_color = "#e8d9f2"

    def _convert_config(self, value: Any) -> Any:
        """Every mapping set as ``config`` (as given, or as a template or an XCom rendered it) is
        shown masked. Airflow's ``BaseOperator.__setattr__`` calls this for each assignment."""
        if isinstance(value, Mapping) and not isinstance(value, MaskedConfig):
            return MaskedConfig(value)
        return value

    def __init__(
        self,
        *,
        config: str | Path | Mapping[str, Any],
        context_dir: str | Path | None = None,
        det_conn_id: str = DetHook.default_conn_name,
        experiment_owner: str | None = None,
        wait: bool = True,
        deferrable: bool = True,
        fail_on: Collection[str] = DEFAULT_FAIL_ON,
        poll_interval: float = 10.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.config = config
        if isinstance(config, Mapping):
            # Shown through MaskedConfig, where Airflow does not look for XCom references itself.
            from airflow.sdk import XComArg

            XComArg.apply_upstream_relationship(self, config)
        self.context_dir = context_dir
        self.det_conn_id = det_conn_id
        self.experiment_owner = experiment_owner
        self.wait = wait
        self.deferrable = deferrable
        self.fail_on_states = parse_fail_on(fail_on)
        self.poll_interval = poll_interval
        self._lineage: tuple[dict[str, Any], dict[str, Any]] | None = None

    def execute(self, context: Context) -> dict[str, Any] | None:
        hook = DetHook(self.det_conn_id)
        owner = self.experiment_owner or hook.owner or self.owner
        outcome = submit(
            hook,
            self.config,
            self.context_dir,
            owner=owner,
            request_id=request_id_for(context["ti"]),
            base=_dag_folder(self),
            log=self.log,
            ti=context["ti"],
        )
        context["ti"].xcom_push(key=EXPERIMENT_ID_KEY, value=outcome.experiment_id)
        if not self.wait:
            return self._remember(context, outcome.as_xcom())
        if self.deferrable:
            self._defer_until_ended(outcome.experiment_id)
        ended = wait_until_ended(hook, outcome.experiment_id, self.poll_interval)
        return self._remember(context, finish(ended, self.fail_on_states, self.log))

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        return self._remember(context, super().execute_complete(context, event))

    def _remember(self, context: Context, result: dict[str, Any]) -> dict[str, Any]:
        """Keeps what OpenLineage reports once the task has succeeded (in the process that ends it)."""
        ti = context.get("ti")
        inputs = ti.xcom_pull(task_ids=self.task_id, key=LINEAGE_INPUTS_KEY) if ti is not None else None
        self._lineage = (inputs or {}, result)
        return result

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Inputs: the config's ``data`` URLs and the context's hash; output: the best checkpoint."""
        from det_airflow.lineage import experiment_inputs, experiment_outputs, operator_lineage

        inputs, result = self._lineage or ({}, {})
        return operator_lineage(
            experiment_inputs(inputs.get("data"), inputs.get("context_sha256")),
            experiment_outputs([result.get("best_checkpoint_uri")]),
        )


class DetExperimentSensor(_WaitsOnExperiment, BaseSensorOperator):
    """Waits until an experiment (say, one created with `det experiment create`) has ended; returns
    what :class:`DetExperimentOperator` returns, and fails on a ``fail_on`` end state."""

    template_fields: Sequence[str] = ("experiment_id",)
    operator_extra_links = (DetExperimentLink(),)
    ui_color = "#f2e6d9"

    def __init__(
        self,
        *,
        experiment_id: Any,
        det_conn_id: str = DetHook.default_conn_name,
        deferrable: bool = True,
        fail_on: Collection[str] = DEFAULT_FAIL_ON,
        poll_interval: float = 10.0,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("poke_interval", poll_interval)
        super().__init__(**kwargs)
        self.experiment_id = experiment_id
        self.det_conn_id = det_conn_id
        self.deferrable = deferrable
        self.fail_on_states = parse_fail_on(fail_on)
        self.poll_interval = poll_interval

    def poke(self, context: Context) -> PokeReturnValue:
        outcome = _outcome(DetHook(self.det_conn_id), int(self.experiment_id))
        if not outcome.state.is_terminal:
            return PokeReturnValue(is_done=False)
        return PokeReturnValue(is_done=True, xcom_value=finish(outcome, self.fail_on_states, self.log))

    def execute(self, context: Context) -> Any:
        experiment_id = int(self.experiment_id)
        context["ti"].xcom_push(key=EXPERIMENT_ID_KEY, value=experiment_id)
        if not self.deferrable:
            return super().execute(context)
        outcome = _outcome(DetHook(self.det_conn_id), experiment_id)
        if outcome.state.is_terminal:
            return finish(outcome, self.fail_on_states, self.log)
        self._defer_until_ended(experiment_id)
        return None


def run_experiment(
    config: str | Path | Mapping[str, Any],
    *,
    context_dir: str | Path | None = None,
    det_conn_id: str = DetHook.default_conn_name,
    experiment_owner: str | None = None,
    fail_on: Collection[str] = DEFAULT_FAIL_ON,
    poll_interval: float = 10.0,
) -> dict[str, Any]:
    """Runs an experiment from inside a ``@task`` and returns what DetExperimentOperator returns.

    It waits in the task's own process, holding its worker slot for the experiment's whole run;
    DetExperimentOperator waits deferred instead. Relative paths start at the DAG file's folder.

    Example:
        >>> @task
        ... def train():
        ...     return run_experiment("adaptive.yaml")["best_checkpoint_uuid"]
    """
    from airflow.sdk import get_current_context

    states = parse_fail_on(fail_on)
    context = get_current_context()
    task, ti = context["task"], context["ti"]
    hook = DetHook(det_conn_id)
    owner = experiment_owner or hook.owner or task.owner
    outcome = submit(
        hook,
        config,
        context_dir,
        owner=owner,
        request_id=request_id_for(ti),
        base=_dag_folder(task),
        log=task.log,
    )
    ti.xcom_push(key=EXPERIMENT_ID_KEY, value=outcome.experiment_id)
    return finish(wait_until_ended(hook, outcome.experiment_id, poll_interval), states, task.log)


def _dag_folder(task: Any) -> Path:
    """Where relative config paths start: the folder of the task's DAG file, else the working folder."""
    fileloc = getattr(getattr(task, "dag", None), "fileloc", None)
    return Path(fileloc).resolve().parent if fileloc else Path.cwd()


__all__ = [
    "DetExperimentLink",
    "DetExperimentOperator",
    "DetExperimentSensor",
    "DetExperimentTrigger",
    "run_experiment",
]
