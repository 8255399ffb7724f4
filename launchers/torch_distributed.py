"""``python3 -m det_airflow.launchers.torch_distributed [OVERRIDES... --] (--trial module:Class | SCRIPT...)``

Runs the trial's workers with ``torch.distributed.run`` (torchrun): one node per container or host
(``DET_CONTAINER_ADDRS`` / ``DET_CONTAINER_RANK``; one when absent), one worker per slot of this
node (``DET_SLOT_IDS``; one for a CPU trial without slots), the chief's address and port
(``DET_RENDEZVOUS_PORT`` on a run over several hosts, else 29400) as the rendezvous, no restarts, and each worker wrapped by ``wrap_rank`` so its lines
carry its rank. A trial of one container rendezvous on 127.0.0.1 at a free port instead: local and
host-network trials share the machine's ports, and two of them on 29400 would collide.
OVERRIDES before ``--`` are passed to torchrun after ours (so they win: ``--master_port 29500 --``).
``--trial module:Class`` trains a PyTorchTrial (``python3 -m det_airflow.pytorch.run_trial``).
Workers see ``USE_TORCH_DISTRIBUTED`` and ``DET_CHIEF_IP``. When a worker fails, torchrun stops the
others and this launcher exits non-zero; SIGTERM reaches every worker.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from det_airflow import trial_env
from det_airflow.cluster_info import ClusterInfo, get_cluster_info
from det_airflow.launchers import _launch
from det_airflow.launchers._supervisor import Supervisor

USE_TORCH_DISTRIBUTED = "USE_TORCH_DISTRIBUTED"
C10D_PORT = 29400
LOCALHOST = "127.0.0.1"
WRAP_RANK = "det_airflow.launchers.wrap_rank"


@dataclass(frozen=True)
class Layout:
    """Where this container's workers stand in the trial."""

    nnodes: int
    nproc_per_node: int
    node_rank: int
    master_addr: str
    master_port: int


def parse_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(torchrun overrides, worker command)``; exits with a usage message when there is no command."""
    return _launch.parse_args(
        "python3 -m det_airflow.launchers.torch_distributed", "TORCHRUN_OVERRIDES", argv
    )


def layout(info: ClusterInfo | None, env: Mapping[str, str]) -> Layout:
    if info is None:
        slots = len(_slot_ids(env.get(trial_env.SLOT_IDS)))
        return Layout(1, max(slots, 1), 0, LOCALHOST, free_port())
    addrs = info.container_addrs
    if len(addrs) <= 1:
        return Layout(1, max(len(info.slot_ids), 1), 0, LOCALHOST, free_port())
    port = env.get(trial_env.RENDEZVOUS_PORT, "").strip()
    return Layout(
        len(addrs),
        max(len(info.slot_ids), 1),
        info.container_rank,
        addrs[0],
        int(port) if port.isdigit() else C10D_PORT,
    )


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind((LOCALHOST, 0))
        return int(sock.getsockname()[1])


def torchrun_command(where: Layout, overrides: Sequence[str], script: Sequence[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        str(where.nnodes),
        "--nproc_per_node",
        str(where.nproc_per_node),
        "--node_rank",
        str(where.node_rank),
        "--max_restarts",
        "0",
        "--master_addr",
        where.master_addr,
        "--master_port",
        str(where.master_port),
        *overrides,
        "--module",
        WRAP_RANK,
        "RANK",
        *script,
    ]


def main(argv: Sequence[str] | None = None) -> int:
    overrides, script = parse_args(sys.argv[1:] if argv is None else argv)
    where = layout(get_cluster_info(), os.environ)
    env = {**os.environ, USE_TORCH_DISTRIBUTED: "true", trial_env.CHIEF_IP: where.master_addr}
    command = torchrun_command(where, overrides, script)
    # torchrun gets a session of its own: a signal to our group reaches it once, through us.
    with Supervisor() as supervisor:
        supervisor.start(command, env=env, new_session=True)
        return supervisor.wait()


def _slot_ids(value: str | None) -> list[object]:
    if not value or not value.strip():
        return []
    try:
        parsed = json.loads(value)
    except ValueError:
        return [v for v in value.split(",") if v.strip()]
    return parsed if isinstance(parsed, list) else [parsed]


if __name__ == "__main__":
    sys.exit(main())
