"""Client and wire models of the master's ``/internal/pipeline`` routes: experiments that people's
own DAGs submit and wait on (``det_airflow.operators.pipeline``), with det's service token."""

from __future__ import annotations

import base64

from pydantic import Field, field_validator

from det_airflow.api._http import SERVICE_RETRY_SECONDS, AsyncSession, Session
from det_airflow.api.models import _Answer, _Body, _checked_config_size
from det_airflow.states import ExperimentState

PIPELINE_PREFIX = "/internal/pipeline"


class SubmitExperiment(_Body):
    """An experiment a pipeline task submits on behalf of ``owner``."""

    config: str = Field(description="the experiment YAML")
    context: str | None = Field(None, description="base64 of the context tar.gz")
    owner: str = Field(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f\x7f]*$")
    request_id: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_\-]{1,64}$",
        description="the task try's idempotency key: a repeated submission answers the experiment already made",
    )

    @field_validator("config")
    @classmethod
    def _config_size(cls, value: str) -> str:
        return _checked_config_size(value)


class ExperimentOutcome(_Answer):
    """Where an experiment stands, and its best checkpoint so far: what a pipeline task returns."""

    experiment_id: int
    state: ExperimentState
    owner: str
    dag_id: str | None
    error: str | None
    metric: str = Field(description="the searcher metric")
    smaller_is_better: bool
    best_checkpoint_uuid: str | None = Field(
        description="the completed checkpoint with the best searcher metric, None while there is none"
    )
    best_metric: float | None = Field(description="that checkpoint's searcher metric")
    best_checkpoint_uri: str | None = Field(
        default=None,
        description="where that checkpoint's files are: s3://bucket/prefix/uuid, file:///host/path/uuid, ...",
    )

    def as_xcom(self) -> dict[str, object]:
        """The task's return value: plain JSON for XCom."""
        return {
            "experiment_id": self.experiment_id,
            "state": self.state.value,
            "best_checkpoint_uuid": self.best_checkpoint_uuid,
            "best_metric": self.best_metric,
            "best_checkpoint_uri": self.best_checkpoint_uri,
            "metric": self.metric,
        }


class PipelineClient:
    """Synchronous client: the operator's submission and its non-deferred waits."""

    def __init__(self, master: str, token: str, *, timeout: float = 120.0) -> None:
        self.session = Session(master, token, timeout=timeout, retry_seconds=SERVICE_RETRY_SECONDS)

    def close(self) -> None:
        self.session.close()

    def submit(
        self, *, config: str, context: bytes | None, owner: str, request_id: str | None
    ) -> ExperimentOutcome:
        body = SubmitExperiment(
            config=config,
            context=base64.b64encode(context).decode() if context is not None else None,
            owner=owner,
            request_id=request_id,
        )
        answer = self.session.post(f"{PIPELINE_PREFIX}/experiments", body.model_dump())
        return ExperimentOutcome.model_validate(answer)

    def outcome(self, experiment_id: int) -> ExperimentOutcome:
        return ExperimentOutcome.model_validate(
            self.session.get(f"{PIPELINE_PREFIX}/experiments/{experiment_id}")
        )


async def async_outcome(master: str, token: str, experiment_id: int) -> ExperimentOutcome:
    """The trigger's one call: where the experiment stands now."""
    async with AsyncSession(master, token) as session:
        answer = await session.request("GET", f"{PIPELINE_PREFIX}/experiments/{experiment_id}")
    return ExperimentOutcome.model_validate(answer)
