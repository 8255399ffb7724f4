"""Configs in the shapes Determined's examples and e2e fixtures use (0.26 and 0.38) validate as they
are; the fields det-airflow accepts but does not act on are named in exactly one warning line."""

from __future__ import annotations

import pytest

from det_airflow.config import merge_checkpoint_storage, parse_config

from ._configs import problems_of

# Older CUDA image name, per-device variables, pod spec, bind mounts, 0.26-era seed fields.
GPU_IMAGE_026 = """\
name: cifar10_pytorch_distributed
description: 0.26-era distributed training
data:
  url: https://example.com/cifar-10-python.tar.gz
hyperparameters:
  learning_rate: 1.0e-4
  learning_rate_decay: 1.0e-6
  layer1_dropout: 0.25
  global_batch_size: 512
records_per_epoch: 50000
min_validation_period:
  epochs: 1
min_checkpoint_period:
  batches: 500
scheduling_unit: 50
searcher:
  name: single
  metric: validation_error
  max_length:
    epochs: 32
  smaller_is_better: true
resources:
  slots_per_trial: 8
  shm_size: 2000000000
  devices:
    - host_path: /dev/infiniband/uverbs0
      container_path: /dev/infiniband/uverbs0
environment:
  image:
    cpu: determinedai/environments:py-3.8-pytorch-1.12-cpu-0.26.0
    gpu: determinedai/environments:cuda-11.3-pytorch-1.12-gpu-0.26.0
  environment_variables:
    cpu: [OMP_NUM_THREADS=4]
    gpu: [NCCL_DEBUG=INFO, 'NCCL_SOCKET_IFNAME=ens,eth']
  pod_spec:
    spec:
      tolerations: [{key: gpu, operator: Exists, effect: NoSchedule}]
bind_mounts:
  - host_path: /data
    container_path: /mnt/data
    read_only: true
checkpoint_storage:
  save_experiment_best: 0
  save_trial_best: 1
  save_trial_latest: 1
optimizations:
  aggregation_frequency: 1
  average_aggregated_gradients: true
  mixed_precision: O0
profiling:
  enabled: true
  begin_on_batch: 0
  end_after_batch: 100
perform_initial_validation: true
max_restarts: 0
entrypoint: model_def:CIFARTrial
"""

# 0.38: time_metric / max_time, workspace + project, log policies, proxy ports, a string image.
ASHA_038 = """\
name: core_api_adaptive
workspace: research
project: vision
labels: [asha, tutorial]
entrypoint: >-
  python3 -m determined.launch.torch_distributed
  python3 train.py
hyperparameters:
  increment_by: {type: int, minval: 1, maxval: 8}
  optimizer:
    lr: {type: log, minval: -5, maxval: -1, base: 10}
    beta: {type: double, minval: 0.8, maxval: 0.99}
  act: {type: categorical, vals: [relu, gelu]}
searcher:
  name: adaptive_asha
  metric: x
  smaller_is_better: true
  max_trials: 10
  time_metric: batches
  max_time: 1000
  mode: conservative
  divisor: 3
  max_concurrent_trials: 5
environment:
  image: determinedai/pytorch-ngc:0.38.0
  proxy_ports:
    - proxy_port: 6006
      proxy_tcp: false
      unauthenticated: false
log_policies:
  - name: CUDA OOM
    pattern: ".*CUDA out of memory.*"
  - name: ECC Error
    pattern: ".*uncorrectable ECC error encountered.*"
    action: cancel_retries
reproducibility:
  experiment_seed: 999
preemption_timeout: 600
debug: false
"""

# Cluster integrations Determined understands and we have no counterpart for.
HPC = """\
name: hpc_launch
entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: {batches: 100}}
resources:
  slots: 4
slurm:
  slots_per_node: 4
  gpu_type: a100
  sbatch_args: [--time=01:00:00]
pbs:
  pbsbatch_args: [-l walltime=01:00:00]
  slots_per_node: 4
environment:
  image: {cpu: python:3.11, cuda: nvcr.io/pytorch:24.01, rocm: rocm/pytorch:latest}
  proxy_ports: [{proxy_port: 8888}]
debug: false
"""

# Every top-level field of Determined's schema case "full valid experiment", in its shapes: 0.38's
# data layer, internal settings and retention policy included.
FULL_VALID = """\
name: full_valid
description: every field Determined's schema knows
entrypoint: trainer.model_def:NoopTrial
labels: []
data: {source: anywhere}
data_layer:
  type: shared_fs
  container_storage_path: null
internal:
  native: null
retention_policy:
  log_retention_days: 90
bind_mounts:
  - {host_path: /datasets, container_path: /datasets, read_only: true, propagation: rprivate}
checkpoint_policy: best
checkpoint_storage:
  type: shared_fs
  host_path: /var/ckpt
  storage_path: team
  propagation: rprivate
  container_path: /ckpt
  checkpoint_path: /ckpt/checkpoints
  tensorboard_path: /ckpt/tensorboard
  save_experiment_best: 0
  save_trial_best: 1
  save_trial_latest: 1
debug: false
environment:
  environment_variables: {}
  force_pull_image: false
  image:
    cpu: determinedai/environments:py-3.9-pytorch-1.12-cpu
    gpu: determinedai/environments:cuda-11.3-pytorch-1.12-gpu
  pod_spec: null
  ports: {tensorboard: 6006}
  registry_auth: {username: robot, password: hunter2, serveraddress: registry.example.com}
  add_capabilities: [CAP_CHOWN]
  drop_capabilities: [CAP_KILL]
hyperparameters:
  global_batch_size: {type: const, val: 16}
  widths: [8, {type: const, val: wide}, {type: int, minval: 1, maxval: 4}]
  optimizer:
    momentum: {type: double, minval: 0.5, maxval: 0.9}
    lr: {type: log, minval: -4, maxval: -1, base: 10}
  activation: {type: categorical, vals: [relu, tanh]}
max_restarts: 2
min_validation_period: {batches: 0}
optimizations:
  aggregation_frequency: 1
  average_aggregated_gradients: true
  mixed_precision: O0
perform_initial_validation: false
profiling: {enabled: true, begin_on_batch: 0, end_on_batch: 10}
records_per_epoch: 0
reproducibility: {experiment_seed: 1234}
resources:
  agent_label: gpu-nodes
  devices: [{host_path: /dev/infiniband, container_path: /dev/infiniband, mode: rmw}]
  slots_per_trial: 2
  weight: 10
  max_slots: 8
  priority: 40
  resource_pool: default_pool
  native_parallel: false
scheduling_unit: 100
searcher:
  name: single
  metric: loss
  smaller_is_better: true
  max_length: {batches: 100}
  source_checkpoint_uuid: null
  source_trial_id: null
security:
  kerberos: {config_file: /etc/krb5.conf}
tensorboard_storage:
  type: shared_fs
  host_path: /var/tensorboard
"""


def test_a_config_with_every_field_of_determineds_full_valid_case_validates() -> None:
    cfg = parse_config(FULL_VALID)

    assert cfg.retention_policy.log_retention_days == 90
    assert cfg.warnings == (
        "accepted but not acted on by det-airflow: data_layer, environment.ports, "
        "profiling, resources.agent_label, resources.weight, security, tensorboard_storage",
    )


def test_a_026_config_with_the_older_gpu_image_name_validates() -> None:
    cfg = parse_config(GPU_IMAGE_026)

    env = cfg.environment
    assert env.image_cuda == "determinedai/environments:cuda-11.3-pytorch-1.12-gpu-0.26.0"
    assert env.image_cpu == "determinedai/environments:py-3.8-pytorch-1.12-cpu-0.26.0"
    assert env.environment_variables_cuda == ("NCCL_DEBUG=INFO", "NCCL_SOCKET_IFNAME=ens,eth")
    assert env.environment_variables_cpu == ("OMP_NUM_THREADS=4",)
    assert cfg.checkpoint_storage is None  # no `type`: it refines the cluster's default storage
    assert cfg.min_validation_period.to_dict() == {"epochs": 1}
    assert cfg.resources.slots_per_trial == 8
    assert cfg.warnings == ("accepted but not acted on by det-airflow: environment.pod_spec, profiling",)


def test_a_038_adaptive_config_validates_and_names_its_unused_fields() -> None:
    cfg = parse_config(ASHA_038)

    assert (cfg.workspace, cfg.project, cfg.searcher.max_time) == ("research", "vision", 1000)
    assert [p.action for p in cfg.log_policies] == [None, "cancel_retries"]
    assert cfg.warnings == (
        "accepted but not acted on by det-airflow: environment.proxy_ports, log_policies",
    )


def test_hpc_sections_are_accepted_with_one_warning_line_naming_each() -> None:
    cfg = parse_config(HPC)

    assert cfg.warnings == (
        "accepted but not acted on by det-airflow: resources.slots, slurm, pbs, environment.proxy_ports",
    )  # `debug: false` is the default: nothing to warn about
    assert cfg.environment.image_rocm == "rocm/pytorch:latest"


def test_a_config_without_inactive_fields_has_no_warning() -> None:
    assert (
        parse_config("entrypoint: x\nsearcher: {name: single, metric: loss}\nprofiling: {}\n").warnings == ()
    )


def test_unused_sections_are_kept_in_the_stored_config() -> None:
    cfg = parse_config(HPC)

    assert cfg.raw["slurm"]["gpu_type"] == "a100"


def test_an_unused_section_of_the_wrong_shape_is_still_an_error() -> None:
    assert problems_of("entrypoint: x\nsearcher: {name: single, metric: loss}\nslurm: 4\n") == [
        ("slurm", "expected a mapping, got 4")
    ]


@pytest.mark.parametrize("name", ["custom", "adaptive", "adaptive_simple", "sync_halving", "pbt"])
def test_searchers_determined_removed_keep_their_clear_error(name: str) -> None:
    (problem,) = problems_of(f"entrypoint: x\nsearcher: {{name: {name}, metric: loss}}\n")

    assert problem[0] == "searcher.name"
    assert problem[1].startswith(f"the {name!r} searcher was removed from Determined; ")


def test_storage_without_type_is_laid_over_the_cluster_default() -> None:
    default = {"type": "shared_fs", "host_path": "/var/ckpt", "save_trial_best": 1}

    merged = merge_checkpoint_storage(parse_config(GPU_IMAGE_026).raw["checkpoint_storage"], default)

    assert merged == {
        "type": "shared_fs",
        "host_path": "/var/ckpt",
        "save_experiment_best": 0,
        "save_trial_best": 1,
        "save_trial_latest": 1,
    }
    config = parse_config(GPU_IMAGE_026).raw | {"checkpoint_storage": merged}
    assert parse_config(config).checkpoint_storage.host_path == "/var/ckpt"  # type: ignore[union-attr]


def test_storage_of_another_type_replaces_the_cluster_default_whole() -> None:
    given = {"type": "s3", "bucket": "ckpts", "save_trial_best": 3}

    assert merge_checkpoint_storage(given, {"type": "shared_fs", "host_path": "/var/ckpt"}) == given
    assert merge_checkpoint_storage(None, {"type": "shared_fs", "host_path": "/var/ckpt"}) == {
        "type": "shared_fs",
        "host_path": "/var/ckpt",
    }


def test_storage_of_the_same_type_refines_the_cluster_default() -> None:
    given = {"type": "shared_fs", "storage_path": "team-a"}

    assert merge_checkpoint_storage(given, {"type": "shared_fs", "host_path": "/var/ckpt"}) == {
        "type": "shared_fs",
        "host_path": "/var/ckpt",
        "storage_path": "team-a",
    }
