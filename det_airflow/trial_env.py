"""Names of the environment variables a trial process receives (docs/semantics.md §3).

One place for them: the trial operators write them, the Core API and launchers read them.
"""

from __future__ import annotations

MASTER = "DET_MASTER"
SESSION_TOKEN = "DET_SESSION_TOKEN"
TRIAL_ID = "DET_TRIAL_ID"
EXPERIMENT_ID = "DET_EXPERIMENT_ID"
TRIAL_SEED = "DET_TRIAL_SEED"
HPARAMS = "DET_HPARAMS"
# The full config travels in a file (a config can be far larger than an environment variable may
# be); DET_EXPERIMENT_CONFIG, the JSON itself, is set too when it is at most
# EXPERIMENT_CONFIG_ENV_LIMIT bytes, for code that reads it as on Determined.
EXPERIMENT_CONFIG_FILE = "DET_EXPERIMENT_CONFIG_FILE"
EXPERIMENT_CONFIG = "DET_EXPERIMENT_CONFIG"
EXPERIMENT_CONFIG_ENV_LIMIT = 64 * 1024
LATEST_CHECKPOINT = "DET_LATEST_CHECKPOINT"
STEPS_COMPLETED = "DET_STEPS_COMPLETED"
SLOT_IDS = "DET_SLOT_IDS"
CHIEF_IP = "DET_CHIEF_IP"
CONTAINER_RANK = "DET_CONTAINER_RANK"
CONTAINER_ADDRS = "DET_CONTAINER_ADDRS"
# A run over several hosts: the port on the chief's host where the nodes' launchers meet.
RENDEZVOUS_PORT = "DET_RENDEZVOUS_PORT"
TASK_ID = "DET_TASK_ID"
AGENT_ID = "DET_AGENT_ID"
# A Kubernetes trial's pod address (the downward API's status.podIP): where a task's server listens.
POD_IP = "DET_POD_IP"
ALLOCATION_ID = "DET_ALLOCATION_ID"
TRIAL_RUN_ID = "DET_TRIAL_RUN_ID"
# Off-cluster and local test mode: the folder of the local store, and whether training is compressed.
LOCAL_STORE = "DET_LOCAL_STORE"
TEST_MODE = "DET_TEST_MODE"
