"""Request bodies of the master's API, validated at the edge."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class CreateExperiment(BaseModel):
    config: str = Field(description="the experiment YAML")
    context: str | None = Field(None, description="base64 of the context tar.gz")
    paused: bool = False
    parent_id: int | None = None


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


class LogLineIn(BaseModel):
    timestamp: str | None = None
    container_id: str | None = None
    rank: int | None = None
    level: str | None = None
    stdtype: str | None = None
    message: str


class LogBatch(BaseModel):
    logs: list[LogLineIn] = Field(max_length=10_000)


class MetricReport(BaseModel):
    group: str = Field(min_length=1, max_length=64)
    steps_completed: int = Field(ge=0)
    metrics: dict[str, Any]
    report_time: str | None = None


class MetricBatch(BaseModel):
    reports: list[MetricReport] = Field(max_length=10_000)


class Progress(BaseModel):
    progress: float


class EarlyExit(BaseModel):
    reason: Literal["INVALID_HP", "USER_REQUESTED_STOP", "ERRORED"]


class CheckpointIn(BaseModel):
    uuid: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")
    steps_completed: int = Field(ge=0)
    metadata: dict[str, Any] = Field(default_factory=dict)
    resources: dict[str, int] = Field(default_factory=dict)


class SearcherCompleted(BaseModel):
    length: int
    metric: float | None = None
