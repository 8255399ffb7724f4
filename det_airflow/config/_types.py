"""Typed form of an experiment configuration. Built once by the loader; inner code trusts it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

LengthUnit = Literal["batches", "records", "epochs"]


@dataclass(frozen=True)
class Length:
    """A training length: exactly one of batches, records or epochs."""

    unit: LengthUnit
    value: int

    def to_dict(self) -> dict[str, int]:
        return {self.unit: self.value}


# --- hyperparameters ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ConstHP:
    val: Any


@dataclass(frozen=True)
class IntHP:
    minval: int
    maxval: int
    count: int | None = None


@dataclass(frozen=True)
class DoubleHP:
    minval: float
    maxval: float
    count: int | None = None


@dataclass(frozen=True)
class LogHP:
    """value = base ** u with u in [minval, maxval]."""

    minval: float
    maxval: float
    base: float = 10.0
    count: int | None = None


@dataclass(frozen=True)
class CategoricalHP:
    vals: tuple[Any, ...]


Hyperparameter = ConstHP | IntHP | DoubleHP | LogHP | CategoricalHP
# A nested group is a dict of name -> Hyperparameter | HParamGroup, to any depth.
HParamGroup = dict[str, "Hyperparameter | HParamGroup"]


# --- sections ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SearcherConfig:
    name: Literal["single", "random", "grid", "adaptive_asha", "async_halving"]
    metric: str
    smaller_is_better: bool = True
    max_trials: int | None = None  # required for random / adaptive_asha / async_halving
    max_concurrent_trials: int = 16  # 0 = no limit
    max_length: Length | None = None  # seed era; a bare int becomes Length("batches", n)
    time_metric: str | None = None  # 0.38
    max_time: int | None = None  # 0.38
    mode: Literal["aggressive", "standard", "conservative"] = "standard"
    divisor: float = 4
    max_rungs: int = 5
    bracket_rungs: tuple[int, ...] = ()
    num_rungs: int | None = None  # async_halving
    stop_once: bool = True
    source_trial_id: int | None = None
    source_checkpoint_uuid: str | None = None
    sampler: Literal["random", "tpe", "cmaes", "qmc"] = "random"  # det-airflow extension


@dataclass(frozen=True)
class ResourcesConfig:
    slots_per_trial: int = 1
    priority: int = 42
    weight: float = 1.0
    max_slots: int | None = None
    resource_pool: str = ""
    shm_size: int = 4 * 1024**3  # bytes
    devices: tuple[dict[str, Any], ...] = ()
    is_single_node: bool | None = None


def priority_weight(priority: int) -> int:
    """Airflow's ``priority_weight`` (and a Kubernetes PriorityClass value) for a Determined
    ``priority``: Determined runs lower numbers first, Airflow and Kubernetes higher ones."""
    return 100 - int(priority)


@dataclass(frozen=True)
class EnvironmentConfig:
    image_cpu: str | None = None
    image_cuda: str | None = None
    environment_variables_cpu: tuple[str, ...] = ()  # "NAME=VALUE"
    environment_variables_cuda: tuple[str, ...] = ()
    pod_spec: dict[str, Any] | None = None
    add_capabilities: tuple[str, ...] = ()
    drop_capabilities: tuple[str, ...] = ()
    force_pull_image: bool = False
    registry_auth: dict[str, Any] | None = None
    # Determined also has ROCm images; kept so configs that set them survive a round trip.
    image_rocm: str | None = None
    environment_variables_rocm: tuple[str, ...] = ()


@dataclass(frozen=True)
class BindMount:
    host_path: str
    container_path: str
    read_only: bool = False
    propagation: str = "rprivate"


@dataclass(frozen=True)
class CheckpointStorageConfig:
    type: Literal["shared_fs", "directory", "s3", "gcs", "azure"]
    host_path: str | None = None  # shared_fs
    storage_path: str | None = None  # shared_fs, relative to host_path
    container_path: str | None = None  # directory
    bucket: str | None = None  # s3 / gcs
    prefix: str | None = None
    container: str | None = None  # azure
    save_experiment_best: int = 0
    save_trial_best: int = 1
    save_trial_latest: int = 1
    options: dict[str, Any] = field(default_factory=dict)  # other storage-specific keys, kept as given


@dataclass(frozen=True)
class LogPolicy:
    pattern: str
    # None: the policy only names the failure (Determined 0.38's default policies look like that).
    action: Literal["cancel_retries", "exclude_node"] | None
    name: str | None = None


@dataclass(frozen=True)
class RetentionPolicy:
    """How long the master keeps what a trial leaves behind once it has ended."""

    # Days a trial's log lines are kept after it ends; -1: forever; None: the cluster's
    # ``[det] log_retention_days``.
    log_retention_days: int | None = None


@dataclass(frozen=True)
class AirflowSection:
    """det-airflow's own settings; defaults come from ``airflow.cfg [det]`` (see ``defaults``)."""

    executor: Literal["local", "docker", "kubernetes"] = "local"  # where trials run (older name)
    trial_runner: Literal["local", "docker", "kubernetes"] = "local"  # where trials run; wins over executor
    pool: str = "default_pool"
    queue: str | None = None
    master_conn_id: str = "det_default"
    docker_conn_id: str | None = None
    kubernetes_conn_id: str | None = None
    namespace: str = "default"
    # Asset URIs the experiment DAG is scheduled on: each time all have new events, a new experiment.
    schedule: tuple[str, ...] = ()


@dataclass(frozen=True)
class ExperimentConfig:
    entrypoint: str | tuple[str, ...]
    searcher: SearcherConfig
    name: str = ""
    description: str | None = None
    labels: tuple[str, ...] = ()
    hyperparameters: HParamGroup = field(default_factory=dict)
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    environment: EnvironmentConfig = field(default_factory=EnvironmentConfig)
    bind_mounts: tuple[BindMount, ...] = ()
    checkpoint_storage: CheckpointStorageConfig | None = None
    checkpoint_policy: Literal["best", "all", "none"] = "best"
    max_restarts: int = 5
    min_validation_period: Length = Length("batches", 0)
    min_checkpoint_period: Length = Length("batches", 0)
    scheduling_unit: int = 100
    records_per_epoch: int = 0
    perform_initial_validation: bool = False
    experiment_seed: int | None = None  # reproducibility.experiment_seed
    data: dict[str, Any] = field(default_factory=dict)
    workspace: str | None = None
    project: str | None = None
    preemption_timeout: int = 3600
    profiling: dict[str, Any] = field(default_factory=dict)
    debug: bool = False
    log_policies: tuple[LogPolicy, ...] = ()
    optimizations: dict[str, Any] = field(default_factory=dict)
    retention_policy: RetentionPolicy = field(default_factory=RetentionPolicy)
    airflow: AirflowSection = field(default_factory=AirflowSection)
    # The mapping as the user wrote it (after --config overrides); kept for `det e config`.
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # Lines to show the user: valid Determined fields that det-airflow accepts but does not act on.
    warnings: tuple[str, ...] = field(default=(), compare=False)

    def replace(self, **changes: Any) -> ExperimentConfig:
        return dataclasses.replace(self, **changes)
