"""Request bodies of the master's API, validated at the edge."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StrictInt, field_validator

from det_airflow.master.limits import CONFIG_LIMIT_CHARS

# What the tables' BigInteger columns hold; a larger count is a client bug, refused as 422.
MAX_STEPS = 2**63 - 1
Steps = Annotated[StrictInt, Field(ge=0, le=MAX_STEPS)]
# A checkpoint UUID names a folder in checkpoint storage; the master accepts only canonical UUIDs
# (reports.check_checkpoint_uuid), answering 400 with the field named.
CHECKPOINT_UUID_MAX = 64


class CreateExperiment(BaseModel):
    config: str = Field(description="the experiment YAML")
    context: str | None = Field(None, description="base64 of the context tar.gz")
    paused: bool = False
    parent_id: int | None = None
    request_id: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_\-]{1,64}$",
        description="a client's idempotency key: a retry with the same key answers the experiment already made",
    )

    @field_validator("config")
    @classmethod
    def _config_size(cls, value: str) -> str:
        if len(value) > CONFIG_LIMIT_CHARS:
            raise ValueError(
                f"the config is {len(value)} characters, over the limit of {CONFIG_LIMIT_CHARS} (1 MiB)"
            )
        return value


class RegisterRun(BaseModel):
    dag_id: str
    run_id: str
    experiment_id: int | None = None
    config: str | None = None
    context: str | None = None
    owner: str | None = None


class TaskRef(BaseModel):
    try_number: int = 1
    dag_id: str | None = None
    run_id: str | None = None
    task_id: str | None = None
    map_index: int | None = None


class TrialExit(BaseModel):
    exit_code: int
    try_number: int = 1
    max_tries: int | None = None


class TrialPhase(BaseModel):
    """Where a slot's runner is in starting run ``run_id`` of the trial."""

    run_id: int
    state: Literal["PULLING", "STARTING", "RUNNING"]
    reason: str = Field(..., min_length=1, max_length=500)


class LogLineIn(BaseModel):
    # Bounds of the det_trial_logs columns, so that a bad line is a 422 rather than a database error.
    timestamp: str | None = Field(None, max_length=64)
    container_id: str | None = Field(None, max_length=64)
    rank: int | None = Field(None, ge=0, le=2**31 - 1)
    level: str | None = Field(None, max_length=16)
    stdtype: str | None = Field(None, max_length=16)
    message: str


class LogBatch(BaseModel):
    logs: list[LogLineIn] = Field(max_length=10_000)


class MetricReport(BaseModel):
    group: str = Field(min_length=1, max_length=64)
    steps_completed: Steps
    metrics: dict[str, Any]
    report_time: str | None = None


class MetricBatch(BaseModel):
    reports: list[MetricReport] = Field(max_length=10_000)


class Progress(BaseModel):
    progress: float


class EarlyExit(BaseModel):
    reason: Literal["INVALID_HP", "USER_REQUESTED_STOP", "ERRORED"]


class CheckpointIn(BaseModel):
    uuid: str = Field(max_length=CHECKPOINT_UUID_MAX)
    steps_completed: Steps
    metadata: dict[str, Any] = Field(default_factory=dict)
    resources: dict[str, Annotated[StrictInt, Field(ge=0, le=MAX_STEPS)]] = Field(default_factory=dict)


class SearcherCompleted(BaseModel):
    length: int
    metric: float | None = None
