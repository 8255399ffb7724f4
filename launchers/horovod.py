"""``python3 -m det_airflow.launchers.horovod [HVD_OVERRIDES... --] (--trial module:Class | SCRIPT...)``

Runs the trial's workers with ``horovodrun``: the chief container runs
``horovodrun -np <total slots> -H <ip>:<slots>,...`` and every worker is wrapped by ``wrap_rank``
(rank from ``HOROVOD_RANK`` or ``OMPI_COMM_WORLD_RANK``) so its lines carry its rank; the other
containers run sshd for the chief to start their workers. HVD_OVERRIDES before ``--`` go to
``horovodrun`` after ours. When ``horovodrun`` is not installed the launcher says so and exits 127;
when a worker fails the others are stopped and the launcher exits non-zero; SIGTERM reaches every
worker.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from det_airflow import trial_env
from det_airflow.launchers._launch import (
    SSHD_PORT,
    WRAP_RANK,
    Containers,
    main_of,
    require,
    sshd_command,
)

PROG = "python3 -m det_airflow.launchers.horovod"
INSTALL_HINT = "pip install horovod in the trial image (with HOROVOD_WITH_PYTORCH=1)"
RANK_VARIABLES = "HOROVOD_RANK,OMPI_COMM_WORLD_RANK"


def horovodrun_command(
    tool: str, where: Containers, overrides: Sequence[str], script: Sequence[str]
) -> list[str]:
    hosts = ",".join(f"{addr}:{where.slots}" for addr in where.addrs)
    remote = ["-p", str(SSHD_PORT)] if len(where.addrs) > 1 else []
    return [
        tool,
        "-np",
        str(where.total_slots),
        "-H",
        hosts,
        *remote,
        *overrides,
        sys.executable,
        "-m",
        WRAP_RANK,
        RANK_VARIABLES,
        *script,
    ]


def build(
    overrides: list[str], script: list[str], where: Containers, env: dict[str, str]
) -> tuple[list[str], dict[str, str]]:
    env = {**env, trial_env.CHIEF_IP: where.addrs[0]}
    if not where.is_chief:
        return sshd_command(), env
    return horovodrun_command(require("horovodrun", INSTALL_HINT), where, overrides, script), env


def main(argv: Sequence[str] | None = None) -> int:
    return main_of(PROG, "HVD_OVERRIDES", build, argv)


if __name__ == "__main__":
    sys.exit(main())
