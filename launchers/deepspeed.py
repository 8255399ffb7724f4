"""``python3 -m det_airflow.launchers.deepspeed [DEEPSPEED_OVERRIDES... --] (--trial module:Class | SCRIPT...)``

Runs the trial's workers with DeepSpeed's ``deepspeed`` launcher: the chief container writes a
hostfile (``<ip> slots=<n>`` per container) and runs ``deepspeed`` over it, every worker wrapped by
``wrap_rank`` so its lines carry its rank; the other containers run sshd for the chief to start
their workers. A trial of one container needs no hostfile and no ssh. DEEPSPEED_OVERRIDES before
``--`` go to ``deepspeed`` after ours (so they win). Workers see ``DET_CHIEF_IP``. When ``deepspeed``
is not installed the launcher says so and exits 127; when a worker fails, ``deepspeed`` stops the
others and the launcher exits non-zero; SIGTERM reaches every worker.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from det_airflow import trial_env
from det_airflow.launchers._launch import WRAP_RANK, Containers, main_of, require, sshd_command
from det_airflow.launchers.torch_distributed import C10D_PORT, free_port

PROG = "python3 -m det_airflow.launchers.deepspeed"
INSTALL_HINT = "pip install deepspeed in the trial image"


def hostfile_text(where: Containers) -> str:
    return "".join(f"{addr} slots={where.slots}\n" for addr in where.addrs)


def deepspeed_command(
    tool: str,
    where: Containers,
    overrides: Sequence[str],
    script: Sequence[str],
    hostfile: Path | None,
    visible_devices: str | None = None,
) -> list[str]:
    """``visible_devices``: the CUDA_VISIBLE_DEVICES of the trial's leased GPUs. deepspeed ignores
    that variable once told how many GPUs to use and numbers them from 0 itself, so the leased ones
    are named to it instead (``--include localhost:3,5``): a slot's GPU 3 never becomes GPU 0."""
    if hostfile is None:  # one container: a local launch on loopback
        if visible_devices:
            placement = ["--include", f"localhost:{visible_devices}", "--master_addr", where.addrs[0]]
        else:
            placement = ["--num_nodes", "1", "--num_gpus", str(where.slots), "--master_addr", where.addrs[0]]
        port = free_port()
    else:
        placement = ["--hostfile", str(hostfile), "--master_addr", where.addrs[0], "--no_ssh_check"]
        port = C10D_PORT
    # --no_local_rank: the worker command is ours (wrap_rank, then the trial's); LOCAL_RANK is in
    # its environment, an extra first argument would be taken for the command.
    return [
        tool,
        *placement,
        "--master_port",
        str(port),
        "--no_local_rank",
        *overrides,
        "--module",
        WRAP_RANK,
        "RANK",
        *script,
    ]


def build(
    overrides: list[str], script: list[str], where: Containers, env: dict[str, str]
) -> tuple[list[str], dict[str, str]]:
    env = {**env, trial_env.CHIEF_IP: where.addrs[0]}
    if not where.is_chief:
        return sshd_command(), env
    tool = require("deepspeed", INSTALL_HINT)
    hostfile = None
    if len(where.addrs) > 1:
        hostfile = Path(tempfile.mkdtemp(prefix="det-deepspeed-")) / "hostfile"
        hostfile.write_text(hostfile_text(where))
    visible = env.get("CUDA_VISIBLE_DEVICES", "").strip() or None
    return deepspeed_command(tool, where, overrides, script, hostfile, visible), env


def main(argv: Sequence[str] | None = None) -> int:
    return main_of(PROG, "DEEPSPEED_OVERRIDES", build, argv)


if __name__ == "__main__":
    sys.exit(main())
