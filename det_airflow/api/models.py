"""The master's wire protocol: every request body and every answer of its routes, as pydantic models.

The master's routes declare these (so its OpenAPI document, served at ``/det/api/v1/openapi.json``,
is the contract the web UI's types are generated from), and det's own Airflow tasks and the CLI read
the answers into them. This module imports neither the master nor FastAPI. Training code does not
load it (a trial's process stays free of pydantic, tests/unit/test_trial_imports.py): the trial-side
client (``det_airflow.api.runtime``) speaks the same JSON with plain dicts.

Answers keep the field names and meanings of docs/master-api.md; ``from`` of a state change is
``from_`` in Python.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
    field_validator,
    model_validator,
)

from det_airflow.api._bounds import MAX_CHECKPOINT_FILES, bounded_json, relative_file, stored_metadata
from det_airflow.states import ExperimentState, TrialState
from det_airflow.text_input import checked_command_part, checked_name, checked_text

# --- limits of what a request may carry ----------------------------------------------------------

# An experiment YAML: real ones are a few KB, big hyperparameter grids tens of KB. Each trial gets
# the config and the master keeps it twice (as sent and normalized), so 1 MiB is generous headroom
# that still keeps one experiment from costing the database and every trial megabytes.
CONFIG_LIMIT_CHARS = 1024**2
# What the tables' BigInteger columns hold; a larger count is a client bug, refused as 422.
MAX_STEPS = 2**63 - 1
Steps = Annotated[StrictInt, Field(ge=0, le=MAX_STEPS)]
# A checkpoint UUID names a folder in checkpoint storage; the master accepts only canonical UUIDs
# (reports.check_checkpoint_uuid), answering 400 with the field named.
CHECKPOINT_UUID_MAX = 64
MAX_NAME = 256
MAX_LABEL = 255
MAX_LABELS = 100
MAX_DESCRIPTION = 10_000
MAX_NOTES = 65_536
MAX_POOL_NAME = 256
# No control characters: names and labels are printed to terminals.
_PRINTABLE = r"^[^\x00-\x1f\x7f]*$"
# Names and labels people give are shown on other people's terminals and pages: no control or
# bidirectional-formatting characters (text_input.NOT_IN_NAMES). Free text may not hold NUL.
_Named = AfterValidator(checked_name)
_NoNul = AfterValidator(checked_text)
# Free-form metadata as stored: 64 KiB of JSON at most, nested 32 deep at most (api/_bounds.py).
Metadata = Annotated[dict[str, Any], AfterValidator(stored_metadata)]
# A file of a checkpoint (its ``resources``): a plain relative path (api/_bounds.relative_file).
CheckpointFile = Annotated[str, AfterValidator(relative_file)]
# One argument of a command line: no NUL (exec cannot pass it), at most Linux's MAX_ARG_STRLEN.
CommandPart = Annotated[str, Field(max_length=128 * 1024), AfterValidator(checked_command_part)]
# A worker host's id names its Celery queue and folders: a hostname's characters only.
HostId = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")]
MAX_HOST_SLOTS = 4096


class _Answer(BaseModel):
    """An answer of the master: exactly these fields."""

    model_config = ConfigDict(extra="forbid")


class _Body(BaseModel):
    """A request body; fields the master does not know are ignored, as older masters did."""

    model_config = ConfigDict(extra="ignore")

    @field_validator("*")
    @classmethod
    def _bounded(cls, value: Any) -> Any:
        # Every integer fits the database's 64-bit columns and free-form JSON nests at most 32 deep:
        # a 422 naming the field, never an OverflowError (a 500) deep in a query.
        return bounded_json(value)


# --- the objects answers carry (docs/master-api.md, "Objects") ------------------------------------


class Experiment(_Answer):
    id: int
    name: str
    owner: str
    description: str | None
    labels: list[str]
    state: ExperimentState
    progress: float | None
    start_time: str | None
    end_time: str | None
    parent_id: int | None
    resource_pool: str
    searcher: str
    searcher_metric: str | None
    best_validation: float | None = Field(
        description="the best searcher metric of its trials; only in the list of experiments"
    )
    archived: bool
    dag_id: str | None
    dag_run_id: str | None
    error: str | None
    num_trials: int | None
    notes: str = Field("", description="its Markdown notes (Determined's experiment notes)")
    project_id: int | None = Field(
        None, description="the project it lives in (the Uncategorized project's ID when it names none)"
    )
    workspace_id: int | None = Field(None, description="the workspace of that project")


class BestValidation(_Answer):
    metric: float
    steps_completed: int | None


class AirflowTask(_Answer):
    """The Airflow task instance (and its try) that ran a trial last: a slot runs many trials."""

    dag_id: str | None
    run_id: str | None
    task_id: str | None
    map_index: int | None
    try_number: int | None


class Trial(_Answer):
    id: int
    experiment_id: int
    request_id: int
    slot: int | None
    state: TrialState
    hparams: dict[str, Any]
    trial_seed: int
    start_time: str | None
    end_time: str | None
    total_batches: int
    restarts: int
    progress: float | None
    latest_checkpoint: str | None
    best_validation: BestValidation | None
    summary_metrics: dict[str, dict[str, Any]] = Field(
        description="per group, the latest report: {steps_completed, **metrics}"
    )
    early_exit: str | None
    stop_requested: bool
    preempt_requested_at: str | None
    airflow_task: AirflowTask | None
    host: str | None = Field(None, description="the host its current or latest run is placed on")
    hosts: list[str] = Field(
        default_factory=list, description="the hosts its runs ran on, in order (each named once)"
    )


class Metrics(_Answer):
    trial_id: int
    group: str
    steps_completed: int
    metrics: dict[str, Any]
    report_time: str | None
    trial_run_id: int | None = Field(
        None, description="the run of the trial that reported it (a trial's run ID grows at each restart)"
    )


class Checkpoint(_Answer):
    uuid: str
    trial_id: int
    experiment_id: int
    steps_completed: int
    state: str
    metadata: dict[str, Any]
    resources: dict[str, int]
    size: int
    storage: dict[str, Any]
    report_time: str | None
    validation_metric: float | None


class LogLine(_Answer):
    id: int
    trial_id: int
    timestamp: str | None
    container_id: str | None
    rank: int | None
    level: str | None
    stdtype: str | None
    message: str
    # Who wrote the line: "task" (the trial's processes) or "master"; None for lines stored before
    # the master recorded it.
    source: str | None = None


class StateChange(_Answer):
    """One state an experiment or trial took; ``from`` is null when the object was created."""

    model_config = ConfigDict(
        extra="forbid", validate_by_name=True, validate_by_alias=True, serialize_by_alias=True
    )

    from_: str | None = Field(alias="from")
    to: str
    time: str
    reason: str


class Job(_Answer):
    """An unfinished experiment in its pool's queue, as `det job list` shows it."""

    jobs_ahead: int
    id: int
    type: Literal[
        "TYPE_EXPERIMENT", "TYPE_COMMAND", "TYPE_NOTEBOOK", "TYPE_TENSORBOARD", "TYPE_SHELL", "TYPE_GENERIC"
    ]
    name: str | None = Field(description="null when the caller may not read the experiment")
    priority: int
    weight: float
    max_slots: int | None
    submitted: str | None
    acquired_slots: int
    needed_slots: int
    slots_per_trial: int
    state: Literal["STATE_QUEUED", "STATE_SCHEDULED", "STATE_PAUSED"]
    preempting_trials: int
    fits_pool: bool
    largest_host_slots: int | None = Field(
        None,
        description="the most slots a live worker host has that an admin has not disabled (null "
        "without hosts): a trial whose slots_per_trial exceed it runs across several hosts",
    )
    fits_hosts: bool | None = Field(
        None,
        description="whether the live hosts' enabled slots could take one of its trials, whole on one "
        "host or in equal shares on several (null without hosts); false: it waits for hosts that can",
    )
    user: str | None = Field(description="null when the caller may not read the experiment")
    resource_pool: str
    experiment_state: ExperimentState
    hosts: list[str] = Field(default_factory=list, description="the hosts its trials holding slots run on")


class JobSettings(_Answer):
    """A job's queue settings after an update."""

    id: int
    priority: int
    weight: float
    max_slots: int | None
    position: float
    slots_per_trial: int
    resource_pool: str


class NodeGang(_Answer):
    """One node's part of a multi-node run: where every node is, which one this is, its slots."""

    addrs: list[str] = Field(description="every node's host address, the chief's first")
    rank: int = Field(description="this node's rank (0: the chief)")
    slots: int = Field(description="the slots this node holds")
    port: int | None = Field(description="the chief's rendezvous port")


class TrialRunSpec(_Answer):
    """Everything a trial process needs (det_airflow.trial_process.TrialSpec)."""

    trial_id: int
    experiment_id: int
    request_id: int
    trial_seed: int
    hparams: dict[str, Any]
    config: dict[str, Any]
    latest_checkpoint: str | None
    steps_completed: int
    run_id: int
    uid: int | None = Field(description="the OS identity the trial runs as (gid == uid)")
    gid: int | None
    gang: NodeGang | None = Field(None, description="a run over several hosts: this node's part")
    disabled_devices: list[int] = Field(
        default_factory=list,
        description="device indices of the run's host behind the slots an admin disabled: not leased",
    )


# --- requests and answers of the People routes ----------------------------------------------------


class CreateExperiment(_Body):
    config: str = Field(description="the experiment YAML")
    context: str | None = Field(None, description="base64 of the context tar.gz")
    paused: bool = False
    parent_id: int | None = None
    request_id: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_\-]{1,64}$",
        description="a client's idempotency key: a retry with the same key answers the experiment already made",
    )
    template: str | None = Field(
        None, description="a config template laid under the config: the config's own values win"
    )
    project_id: int | None = Field(
        None,
        ge=1,
        description="the project to create the experiment in (Determined's projectId); a config that "
        "names another workspace and project is refused",
    )

    @field_validator("config")
    @classmethod
    def _config_size(cls, value: str) -> str:
        return _checked_config_size(value)


def _checked_config_size(value: str) -> str:
    if len(value) > CONFIG_LIMIT_CHARS:
        raise ValueError(
            f"the config is {len(value)} characters, over the limit of {CONFIG_LIMIT_CHARS} (1 MiB)"
        )
    return value


class SetTemplate(_Body):
    config: str = Field(description="the template's YAML: a mapping of config fields")

    @field_validator("config")
    @classmethod
    def _config_size(cls, value: str) -> str:
        return _checked_config_size(value)


class Template(_Answer):
    """A config template (`det template`): a config fragment experiments name with `--template`."""

    name: str
    owner: str
    shared: bool  # an admin's, for everyone; else personal, its owner's alone
    updated_at: str
    config: dict[str, Any]  # in full: only its owner (everyone, for a shared one) and admins read it


class TemplateAnswer(_Answer):
    template: Template


class TemplateList(_Answer):
    templates: list[Template]


TaskType = Literal["command", "notebook", "tensorboard", "shell", "generic"]


class Task(_Answer):
    """A notebook, TensorBoard, command, shell or generic task (`det task list`, the Tasks page)."""

    id: int
    type: TaskType
    description: str
    owner: str
    state: str  # QUEUED, PULLING, STARTING, RUNNING, TERMINATING, TERMINATED (Determined's)
    end_state: str | None  # once TERMINATED: COMPLETED, CANCELED or ERROR
    exit_code: int | None
    ready: bool  # its server answers through the proxy
    url: str | None  # where the proxy serves it (notebooks, TensorBoards, shells)
    resource_pool: str
    slots: int
    priority: int
    start_time: str | None
    end_time: str | None
    trial_id: int | None  # its logs are this trial's
    host: str | None
    dag_id: str | None
    dag_run_id: str | None
    command: list[str]
    experiment_ids: list[int]
    trial_ids: list[int]
    idle_timeout: float | None


class CreateTask(_Body):
    type: TaskType
    config: str | None = Field(None, description="the task's config (YAML): resources, environment, ...")
    context: str | None = Field(None, description="base64 of the context tar.gz")
    command: list[CommandPart] = Field(default_factory=list, max_length=10_000)
    experiment_ids: list[int] = Field(default_factory=list, max_length=1000)
    trial_ids: list[int] = Field(default_factory=list, max_length=10_000)
    forked_from: int | None = Field(
        None,
        ge=1,
        description="generic: the task whose config (under this one's fields) and context (unless one "
        "is sent) it starts with (Determined's forkedFrom)",
    )
    project_id: int | None = Field(
        None, ge=1, description="generic: the project to place the task in (Determined's projectId)"
    )

    @field_validator("config")
    @classmethod
    def _config_size(cls, value: str | None) -> str | None:
        if value is not None and len(value) > CONFIG_LIMIT_CHARS:
            raise ValueError(
                f"the config is {len(value)} characters, over the limit of {CONFIG_LIMIT_CHARS} (1 MiB)"
            )
        return value


class TaskAnswer(_Answer):
    task: Task


class TaskList(_Answer):
    tasks: list[Task]


class LabelBody(_Body):
    label: Annotated[str, _Named] = Field(min_length=1, max_length=MAX_LABEL, pattern=_PRINTABLE)


class ExperimentPatch(_Body):
    name: Annotated[str, _Named] | None = Field(None, min_length=1, max_length=MAX_NAME, pattern=_PRINTABLE)
    description: Annotated[str, _NoNul] | None = Field(None, max_length=MAX_DESCRIPTION)
    notes: Annotated[str, _NoNul] | None = Field(None, max_length=MAX_NOTES, description="Markdown notes")


class Empty(_Answer):
    """An answer with nothing to say: ``{}``."""


class ExperimentAnswer(_Answer):
    experiment: Experiment


class CreatedExperiment(_Answer):
    experiment: Experiment
    warnings: list[str] = Field(description="config fields accepted but not acted on")


class ExperimentList(_Answer):
    experiments: list[Experiment]


class ExperimentDetail(_Answer):
    experiment: Experiment
    trials: list[Trial]
    config: dict[str, Any] = Field(description="the normalized config; secrets masked but for its owner")


class ConfigAnswer(_Answer):
    config: dict[str, Any]


class ParamImportance(BaseModel):
    name: str = Field(description="the hyperparameter, nested ones dotted (optimizer.lr)")
    importance: float = Field(description="its share of the metric's explained variation, 0 to 1")


class HparamImportance(_Answer):
    metric: str
    evaluator: Literal["fanova", "ped_anova"] = Field(
        description="fanova (scikit-learn installed on the master), else ped_anova"
    )
    trials: int = Field(description="the trials that reported the metric, the evaluator's points")
    importances: list[ParamImportance] = Field(description="most important first; empty with a note")
    constants: list[str] = Field(description="hyperparameters that are not searched, left out")
    note: str | None = Field(default=None, description="why there are no importances")


class TrialList(_Answer):
    trials: list[Trial]


class CheckpointList(_Answer):
    checkpoints: list[Checkpoint]


class StateChanges(_Answer):
    state_changes: list[StateChange]


class GcPolicy(_Body):
    """An experiment's checkpoint garbage collection policy (``det e set gc-policy``)."""

    save_experiment_best: int = Field(ge=0, le=2**31 - 1)
    save_trial_best: int = Field(ge=0, le=2**31 - 1)
    save_trial_latest: int = Field(ge=0, le=2**31 - 1)


class GcPreview(_Answer):
    """The checkpoints a policy would delete now, and the searcher metric they are ranked by."""

    checkpoints: list[Checkpoint]
    metric_name: str


class GcPolicyAnswer(_Answer):
    experiment: Experiment
    deleted: list[str] = Field(description="the UUIDs of the checkpoints the new policy deleted")
    not_removed: list[str] = Field(description="files of those that will not be removed")


class LogRetention(_Body):
    """Days the experiment's ended trials keep their logs (Determined's numDays); -1: forever."""

    days: int = Field(ge=-1, le=32767)


class Deleted(_Answer):
    not_removed: list[str] = Field(description="what could not be removed; empty when all is gone")
    removing: list[str] = Field(
        default_factory=list,
        description="files queued for removal, removed in the background by the hosts that have them",
    )


class TrialAnswer(_Answer):
    trial: Trial


class MetricsList(_Answer):
    metrics: list[Metrics]


class LogsPage(_Answer):
    logs: list[LogLine]
    trial_state: TrialState


class CheckpointAnswer(_Answer):
    checkpoint: Checkpoint


class Me(_Answer):
    username: str
    admin: bool = Field(
        default=False, description="whether Airflow's auth manager gives the caller admin rights"
    )


# --- the web UI's own reads ---------------------------------------------------------------------


class Resolved(_Answer):
    """The experiment of a DAG (run), and the trial of one of its mapped task instances."""

    experiment_id: int
    trial_id: int | None


class MetricNames(_Answer):
    training: list[str]
    validation: list[str]


class CurveSeries(_Answer):
    trial_id: int
    state: TrialState
    hparams: dict[str, Any]
    points: int = Field(description="the count of points before downsampling")
    x: list[float]
    y: list[float]


class Curves(_Answer):
    group: Literal["training", "validation"]
    metric: str | None
    x: Literal["batches", "time", "epochs"]
    metrics: MetricNames
    smaller_is_better: bool
    best_trial_ids: list[int]
    series: list[CurveSeries]


# --- the job queue ---------------------------------------------------------------------------------

JOB_CHANGES = ("priority", "weight", "max_slots", "resource_pool", "ahead_of", "behind_of")


class JobUpdate(_Body):
    job_id: int
    priority: int | None = Field(None, ge=1, le=99)
    weight: float | None = Field(None, gt=0)
    max_slots: int | None = Field(None, ge=1)
    resource_pool: str | None = Field(None, min_length=1, max_length=MAX_POOL_NAME)
    ahead_of: int | None = None
    behind_of: int | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> JobUpdate:
        given = [name for name in JOB_CHANGES if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(
                f"job {self.job_id}: give exactly one of {', '.join(JOB_CHANGES)}; got {given or 'none'}"
            )
        return self


class JobUpdates(_Body):
    updates: list[JobUpdate] = Field(min_length=1, max_length=1000)


class JobList(_Answer):
    jobs: list[Job]


class UpdatedJobs(_Answer):
    jobs: list[JobSettings]


# --- unmanaged experiments -------------------------------------------------------------------------


class UnmanagedBody(_Body):
    # An experiment config's fields (name, hyperparameters, searcher, checkpoint_storage...);
    # validated as one, with the unmanaged defaults filled in.
    config: dict[str, Any] = Field(default_factory=dict)
    hparams: dict[str, Any] = Field(default_factory=dict)
    # What started the program, for `det trial logs`.
    command: Annotated[str, AfterValidator(checked_command_part)] | None = Field(None, max_length=4096)


class UnmanagedExit(_Body):
    error: str | None = Field(None, max_length=10_000)


class UnmanagedRunAnswer(_Answer):
    experiment: Experiment
    trial: Trial
    token: str = Field(description="the trial's token, for the /runtime routes")
    config: dict[str, Any]


# --- det's own Airflow tasks (/internal) ---------------------------------------------------------


class RegisterRun(_Body):
    dag_id: str
    run_id: str
    experiment_id: int | None = None
    config: str | None = None
    context: str | None = None
    owner: str | None = None


class Registered(_Answer):
    experiment_id: int
    state: ExperimentState


class SearcherStatus(_Answer):
    ready: bool = Field(description="false while the experiment is paused")
    state: ExperimentState
    slots: int = Field(description="the trial slots the experiment's DAG maps")


class TaskRef(_Body):
    """The Airflow task instance of a trial slot that asks for its trial."""

    try_number: int = 1
    dag_id: str | None = None
    run_id: str | None = None
    task_id: str | None = None
    map_index: int | None = None
    host: HostId | None = Field(None, description="the host whose worker runs the task")
    port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="a port free on the task's host: where a multi-node run's other nodes join the chief",
    )


class SlotStatus(enum.StrEnum):
    """What a trial slot is told when it asks for its trial."""

    REFUSED = "refused"  # the experiment runs as another DAG run: fail, a retry is refused too
    WAIT = "wait"  # nothing to run now (paused, not admitted by the queue): defer and ask again
    RUN = "run"  # run ``trial`` with ``token`` and ``spec``
    DONE = "done"  # the search needs nothing more of this slot; ``ran``: its trials that ended


class SlotAnswer(_Answer):
    """The answer to a trial slot: only the fields of its ``status`` are present (a dry run's
    ``run`` carries none)."""

    status: SlotStatus
    message: str | None = Field(None, description="refused: why")
    ran: list[int] | None = Field(None, description="done: the trials that ended in this slot")
    trial: Trial | None = Field(None, description="run: the trial to run")
    token: str | None = Field(None, description="run: the trial's token for this run")
    spec: TrialRunSpec | None = Field(None, description="run: what the trial process needs")
    host: str | None = Field(
        None, description="wait: the host the trial is placed on; the slot's task moves to its queue"
    )


class TrialExit(_Body):
    exit_code: int


class TrialExitAnswer(_Answer):
    trial: Trial
    retry: bool = Field(description="whether the trial restarts from its latest checkpoint")


class TrialPhase(_Body):
    """Where a slot's runner is in starting run ``run_id`` of the trial."""

    run_id: int
    state: Literal["PULLING", "STARTING", "RUNNING"]
    reason: str = Field(..., min_length=1, max_length=500)


class TrialStatus(_Answer):
    trial: Trial
    experiment_state: ExperimentState
    run_id: int | None = Field(None, description="the trial's current (or latest) run")
    gang_failed: str | None = Field(
        None, description="a multi-node run: why its nodes must stop (one failed or lost its host)"
    )


class NodeExit(_Body):
    run_id: int
    exit_code: int


class LogLineIn(_Body):
    # Bounds of the det_trial_logs columns, so that a bad line is a 422 rather than a database error.
    timestamp: str | None = Field(None, max_length=64)
    container_id: str | None = Field(None, max_length=64)
    rank: int | None = Field(None, ge=0, le=2**31 - 1)
    level: str | None = Field(None, max_length=16)
    stdtype: str | None = Field(None, max_length=16)
    message: str


class LogBatch(_Body):
    logs: list[LogLineIn] = Field(max_length=10_000)


class Finalized(_Answer):
    experiment: Experiment
    best_checkpoint: str | None = Field(description="the UUID of the best checkpoint, if any")


# --- training code (/runtime) ---------------------------------------------------------------------


class MetricReport(_Body):
    group: str = Field(min_length=1, max_length=64)
    steps_completed: Steps
    metrics: dict[str, Any]
    report_time: str | None = None


class MetricBatch(_Body):
    reports: list[MetricReport] = Field(max_length=10_000)


class TaskRuntime(_Answer):
    """What a task's own program runs (``GET /runtime/trials/{id}/task``, the task's trial token)."""

    id: int
    type: TaskType
    # command: its argv; shell: the command to run in each terminal (empty: the login shell);
    # tensorboard: {"sources": [{"experiment_id", "trial_id"}, ...]}.
    args: dict[str, Any]
    proxy_prefix: str  # the path the proxy serves it under, e.g. "/det/proxy/12/"
    bind_address: str  # where its server listens (the proxy reaches it there)
    idle_timeout: float | None  # seconds without use before it stops itself; None: never
    # Who tells the master where it listens: "runner", the trial's runner (local, Docker) once it has
    # checked that the port is the task's own (the program writes its port and secret into
    # READY_FILE of its work folder's .det/); "master", the program itself (a pod).
    ready_to: Literal["runner", "master"]


class TaskReady(_Body):
    """The task's server listens: where, and the secret the proxy must present."""

    port: int = Field(ge=1, le=65535)
    secret: str = Field(min_length=16, max_length=128, pattern=r"^[A-Za-z0-9_\-]+$")
    address: str | None = Field(default=None, max_length=253)


class Progress(_Body):
    progress: float


class EarlyExit(_Body):
    reason: Literal["INVALID_HP", "USER_REQUESTED_STOP", "ERRORED"]


class CheckpointIn(_Body):
    uuid: str = Field(max_length=CHECKPOINT_UUID_MAX)
    steps_completed: Steps
    metadata: Metadata = Field(default_factory=dict)
    resources: dict[CheckpointFile, Annotated[StrictInt, Field(ge=0, le=MAX_STEPS)]] = Field(
        default_factory=dict, max_length=MAX_CHECKPOINT_FILES
    )


class StoredFiles(_Answer):
    """A checkpoint's files in object storage as a trial sees them through the master: a
    registered checkpoint's registered files, or those the trial wrote of its own so far."""

    files: dict[str, int]  # {relative path: size in bytes}


class TensorBoardFile(_Answer):
    size: int
    signature: str  # changes whenever the file does (the store's etag)


class TensorBoardFiles(_Answer):
    """A trial's TensorBoard files in object storage, for its own trial or a TensorBoard showing it."""

    files: dict[str, TensorBoardFile]  # by path relative to the trial's TensorBoard folder


class SearcherCompleted(_Body):
    length: int
    metric: float | None = None


class Preemption(_Answer):
    preempt: bool = Field(description="whether the trial should checkpoint and exit 0")


class BestValidationAnswer(_Answer):
    metric: float | None = Field(description="the experiment's best searcher metric so far")


class SearcherOperation(_Answer):
    length: int = Field(description="the length to train to, in the unit of searcher.max_length")
    completed: bool


# --- hosts: the workers' inventory (`det agent list`, `det slot list`) -------------------------


class HostReport(_Body):
    """What a worker host's heartbeat tells the master: the slots it offers and where its trial
    tasks are sent."""

    slot_type: Literal["cpu", "cuda", "rocm"]
    slots: int = Field(ge=0, le=MAX_HOST_SLOTS)
    devices: list[Annotated[int, Field(ge=0, le=MAX_HOST_SLOTS)]] = Field(
        default_factory=list, max_length=MAX_HOST_SLOTS, description="GPU indices (cuda, rocm)"
    )
    queue: str = Field(min_length=1, max_length=200, pattern=_PRINTABLE)
    address: str | None = Field(None, max_length=253, pattern=_PRINTABLE)


class HostSlot(_Answer):
    """One slot of a host and the trial holding it, as `det slot list` shows it."""

    slot_id: int
    device: int | None = Field(description="the GPU index behind the slot (null for CPU slots)")
    trial_id: int | None
    experiment_id: int | None
    task_name: str | None
    enabled: bool = Field(True, description="false: an admin disabled it (or its host): it gets no new work")
    draining: bool = Field(False, description="its host was disabled with --drain: what runs there finishes")


class Host(_Answer):
    """A worker host (Determined's agent), as `det agent list` shows it."""

    id: str
    registered_time: str
    last_seen: str
    alive: bool = Field(description="its heartbeat is recent: its slots count for placement")
    slot_type: str
    num_slots: int
    used_slots: int
    queue: str
    address: str | None
    slots: list[HostSlot]
    enabled: bool = Field(True, description="false: an admin disabled it: it gets no new work")
    draining: bool = Field(False, description="disabled with --drain: what runs there finishes")


class Hosts(_Answer):
    agents: list[Host]


class HostAnswer(_Answer):
    agent: Host


class DisableAgent(_Body):
    drain: bool = Field(False, description="let what runs on it finish (else it is stopped)")


class HostBeat(Host):
    """The master's answer to a host's heartbeat: its record, and the work queued for it."""

    removals_waiting: int = Field(0, description="file removals this host may claim now")


# --- file removals: done by the hosts that have the files ---------------------------------------


class Removal(_Answer):
    """Files queued for removal: the checkpoints ``uuids`` of an experiment's checkpoint storage
    (``kind`` checkpoints) or its trial work folder on this host (``kind`` work_dir)."""

    id: int
    kind: Literal["checkpoints", "work_dir"]
    experiment_id: int
    pool: str | None
    storage: dict[str, Any] | None
    uuids: list[str]
    uid: int | None = Field(description="remove as this uid (null: as the host's own user)")
    gid: int | None


class Removals(_Answer):
    removals: list[Removal]


class RemovalDone(_Body):
    """How a claimed removal went: done when ``not_removed`` is empty."""

    not_removed: list[Annotated[str, Field(max_length=4096)]] = Field(default_factory=list, max_length=1000)


# --- the model registry (`det model`, the Models page) ------------------------------------------


class Model(_Answer):
    """A model of the registry: a name under which checkpoints are registered as numbered versions."""

    id: int
    name: str
    description: str
    notes: str
    metadata: dict[str, Any]
    labels: list[str]
    owner: str
    archived: bool
    creation_time: str
    last_updated_time: str
    num_versions: int
    workspace_id: int | None = Field(None, description="its workspace (Uncategorized's by default)")
    workspace_name: str = ""


class ModelVersion(_Answer):
    """A checkpoint registered as version ``version`` of model ``model_name``."""

    id: int
    model_id: int
    model_name: str
    version: int
    checkpoint: Checkpoint
    validation_metrics: dict[str, Any] = Field(
        description="the validation its trial reported at the checkpoint's steps_completed ({} if none)"
    )
    name: str
    comment: str
    notes: str
    metadata: dict[str, Any]
    labels: list[str]
    owner: str
    creation_time: str
    last_updated_time: str


class ModelAnswer(_Answer):
    model: Model


class ModelList(_Answer):
    models: list[Model]


class ModelVersionAnswer(_Answer):
    model_version: ModelVersion


class ModelVersionList(_Answer):
    model: Model
    model_versions: list[ModelVersion]


_Label = Annotated[str, Field(min_length=1, max_length=255), _Named]
_Text = Annotated[str, Field(max_length=65536), _NoNul]
_Name = Annotated[str, Field(max_length=MAX_NAME), _Named]


class CreateModel(_Body):
    name: _Name = Field(description="unique among the caller's models")
    description: _Text = ""
    notes: _Text = ""
    metadata: Metadata = Field(default_factory=dict)
    labels: list[_Label] = Field(default_factory=list, max_length=1000)
    workspace_name: _Name | None = Field(None, description="its workspace (default: Uncategorized)")


class PatchModel(_Body):
    """The fields to change; those left out stay as they are."""

    name: _Name | None = None
    description: _Text | None = None
    notes: _Text | None = None
    metadata: Metadata | None = None
    labels: list[_Label] | None = Field(None, max_length=1000)
    workspace_name: _Name | None = Field(None, description="move it to this workspace")


class RegisterVersion(_Body):
    checkpoint_uuid: str = Field(max_length=64, description="a COMPLETED checkpoint")
    name: _Name = ""
    comment: _Text = ""
    notes: _Text = ""
    metadata: Metadata = Field(default_factory=dict)
    labels: list[_Label] = Field(default_factory=list, max_length=1000)


class PatchModelVersion(_Body):
    """The fields to change; those left out stay as they are."""

    name: _Name | None = None
    comment: _Text | None = None
    notes: _Text | None = None
    metadata: Metadata | None = None
    labels: list[_Label] | None = Field(None, max_length=1000)


def _without_prefix(prefix: str) -> BeforeValidator:
    """Determined's protobuf enum name (``WEBHOOK_TYPE_SLACK``) as det's short one (``SLACK``):
    scripts and Determined's SDK send the long names, det's CLI and pages the short ones."""

    def short(value: object) -> object:
        return value.removeprefix(prefix) if isinstance(value, str) else value

    return BeforeValidator(short)


class WebhookTrigger(_Body):
    """What makes a webhook fire (Determined's trigger; conditions in docs/webhooks.md)."""

    triggerType: Annotated[
        Literal["EXPERIMENT_STATE_CHANGE", "METRIC_THRESHOLD_EXCEEDED", "TASK_LOG", "CUSTOM"],
        _without_prefix("TRIGGER_TYPE_"),
    ]
    condition: dict[str, Any] = Field(default_factory=dict)
    # What Determined's SDK sends of a trigger not stored yet (both null): the master numbers it.
    id: None = None
    webhookId: None = None


class CreateWebhook(_Body):
    """A webhook to create: det's short names or Determined's ``POST /api/v1/webhooks`` body, as
    its SDK sends it (``WEBHOOK_TYPE_DEFAULT``, ``WEBHOOK_MODE_WORKSPACE``, ``TRIGGER_TYPE_...``)."""

    name: _Name
    url: str = Field(max_length=2000)
    webhookType: Annotated[Literal["DEFAULT", "SLACK"], _without_prefix("WEBHOOK_TYPE_")] = "DEFAULT"
    mode: Annotated[Literal["WORKSPACE", "SPECIFIC"], _without_prefix("WEBHOOK_MODE_")] = "WORKSPACE"
    triggers: list[WebhookTrigger] = Field(max_length=100)
    id: None = None
    workspaceId: int | None = Field(
        None,
        description="Determined's webhooks of one workspace: not supported; a webhook here fires for "
        "every experiment its owner may read (null or left out)",
    )

    @field_validator("workspaceId")
    @classmethod
    def _no_workspace(cls, value: int | None) -> None:
        if value is not None:
            raise ValueError(
                "webhooks of one workspace are not supported: leave workspaceId out (or null) for a "
                "webhook of every experiment its owner may read, and use mode SPECIFIC to choose experiments"
            )
        return None


class StoredTrigger(_Answer):
    """A webhook's trigger as Determined's API answers it (its ``Trigger`` message)."""

    id: int = Field(description="the trigger's number within its webhook, from 1")
    webhookId: int
    triggerType: Literal[
        "TRIGGER_TYPE_EXPERIMENT_STATE_CHANGE",
        "TRIGGER_TYPE_METRIC_THRESHOLD_EXCEEDED",
        "TRIGGER_TYPE_TASK_LOG",
        "TRIGGER_TYPE_CUSTOM",
    ]
    condition: dict[str, Any]


class Webhook(_Answer):
    """A webhook as Determined's API answers it (its ``Webhook`` message, enum names in full), with
    det's owner, creation time and, once, the signing key."""

    id: int
    name: str
    url: str
    webhookType: Literal["WEBHOOK_TYPE_DEFAULT", "WEBHOOK_TYPE_SLACK"]
    mode: Literal["WEBHOOK_MODE_WORKSPACE", "WEBHOOK_MODE_SPECIFIC"]
    triggers: list[StoredTrigger]
    workspaceId: None = Field(None, description="always null: a webhook here is not one workspace's")
    owner: str
    createdAt: str
    signingKey: str | None = Field(description="only in the answer to the webhook's creation")


class PatchWebhook(_Body):
    """Determined's ``PATCH /api/v1/webhooks/{id}`` body: a new address for the webhook."""

    url: str = Field(max_length=2000)


class WebhookAnswer(_Answer):
    webhook: Webhook


class WebhookList(_Answer):
    webhooks: list[Webhook]


class WebhookDelivery(_Answer):
    id: int
    triggerType: str
    experimentId: int | None
    createdAt: str
    attempts: int
    state: Literal["PENDING", "DELIVERED", "GAVE_UP"]
    deliveredAt: str | None
    lastError: str | None
    payload: dict[str, Any]


class WebhookDeliveryList(_Answer):
    deliveries: list[WebhookDelivery]


class Alert(_Body):
    """An alert the training code raises (``core_context.alert``): CUSTOM webhooks send it."""

    title: str = Field("", max_length=1000)
    description: str = Field("", max_length=10000)
    level: str = Field("warn", max_length=32)


class AlertAnswer(_Answer):
    webhooks: int = Field(description="how many webhooks will send it")


# --- workspaces and projects (`det workspace`, `det project`, the Workspaces pages) -------------


class Workspace(_Answer):
    id: int
    name: str
    created_by: str
    created_at: str
    archived: bool
    num_projects: int


class Project(_Answer):
    """A project of a workspace: its experiments, and notes in Markdown."""

    id: int
    name: str
    workspace_id: int
    workspace_name: str
    description: str
    notes: str
    created_by: str
    created_at: str
    archived: bool
    num_experiments: int
    num_active_experiments: int


class WorkspaceAnswer(_Answer):
    workspace: Workspace


class WorkspaceList(_Answer):
    workspaces: list[Workspace]


class ProjectAnswer(_Answer):
    project: Project


class ProjectList(_Answer):
    workspace: Workspace
    projects: list[Project]


class CreateWorkspace(_Body):
    name: _Name = Field(description="unique among workspaces")


class CreateProject(_Body):
    name: _Name = Field(description="unique in its workspace")
    description: _Text = ""
    notes: _Text = ""


class PatchProject(_Body):
    """The fields to change; those left out stay as they are."""

    name: _Name | None = Field(None, description="unique in its workspace")
    description: _Text | None = None
    notes: _Text | None = None


class PatchWorkspace(_Body):
    """The fields to change; those left out stay as they are."""

    name: _Name | None = Field(None, description="unique among workspaces")


class MasterLogEntry(_Answer):
    """One record of the master's own log (``det master logs``): its text is as logged, untrusted."""

    time: str = Field(description="ISO 8601, UTC")
    level: str
    logger: str
    process: str = Field(description="host:pid of the API server process that logged it")
    seq: int = Field(description="its number in that process, to tell records of one time apart")
    message: str


class MasterLogList(_Answer):
    entries: list[MasterLogEntry]


class MoveExperiment(_Body):
    workspace: str = Field(max_length=256)
    project: str = Field(max_length=256)
