"""``python3 -m det_airflow.launchers.tensorflow [--port PORT] [--] (--trial module:Class | SCRIPT...)``

Runs a TensorFlow trial's script once per container. A trial of several containers gets
``TF_CONFIG`` for ``MultiWorkerMirroredStrategy``: one worker per container
(``DET_CONTAINER_ADDRS``, this one's index ``DET_CONTAINER_RANK``) at PORT (``--port``, else
``DET_RENDEZVOUS_PORT``, else 29400), its lines prefixed with its rank by ``wrap_rank``. A trial of
one container (or a run off-cluster) runs the script as it is, with the environment untouched
(``MirroredStrategy`` or the default strategy need no ``TF_CONFIG``). Workers see ``DET_CHIEF_IP``.
``--trial module:Class`` trains a TFKerasTrial (``python3 -m det_airflow.keras.run_trial``). The exit
status is the script's; SIGTERM reaches it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from det_airflow import trial_env
from det_airflow.cluster_info import ClusterInfo, get_cluster_info
from det_airflow.launchers._supervisor import Supervisor

PROG = "python3 -m det_airflow.launchers.tensorflow"
TF_CONFIG = "TF_CONFIG"
DEFAULT_PORT = 29400  # the torch_distributed launcher's port: one port for admins to open
TRIAL_RUNNER = "det_airflow.keras.run_trial"
WRAP_RANK = "det_airflow.launchers.wrap_rank"


def parse_args(argv: Sequence[str]) -> tuple[int | None, list[str]]:
    """``(port or None, worker command)``; exits with a usage message when there is no command or
    the port is not a port."""
    args = list(argv)
    after: list[str] = []
    if "--" in args:
        split = args.index("--")
        args, after = args[:split], args[split + 1 :]
    parser = argparse.ArgumentParser(
        prog=PROG, usage="%(prog)s [--port PORT] [--] (--trial module:Class | SCRIPT...)"
    )
    parser.add_argument(
        "--port", type=_port, help="the port TensorFlow's workers talk on (several containers)"
    )
    parser.add_argument("--trial", help="a TFKerasTrial to train, as module:Class")
    parser.add_argument("script", nargs=argparse.REMAINDER, help="the command each worker runs")
    parsed = parser.parse_args(args)
    script = [*(parsed.script or []), *after]
    if parsed.trial is not None:
        script = [sys.executable, "-m", TRIAL_RUNNER, parsed.trial, *script]
    if not script:
        parser.error("give --trial module:Class or a command to run")
    return parsed.port, script


def tf_config(addrs: Sequence[str], rank: int, port: int) -> dict[str, Any]:
    """``TF_CONFIG`` of worker ``rank`` among one worker per container address."""
    return {
        "cluster": {"worker": [f"{addr}:{port}" for addr in addrs]},
        "task": {"type": "worker", "index": rank},
    }


def command_and_env(
    info: ClusterInfo | None, port: int | None, script: Sequence[str], env: Mapping[str, str]
) -> tuple[list[str], dict[str, str]]:
    """What this container runs, and with which environment."""
    out = dict(env)
    addrs = list(info.container_addrs) if info is not None else []
    if len(addrs) <= 1:
        out.setdefault(trial_env.CHIEF_IP, addrs[0] if addrs else "127.0.0.1")
        return list(script), out
    assert info is not None
    if port is None:
        given = env.get(trial_env.RENDEZVOUS_PORT, "").strip()
        port = int(given) if given.isdigit() else DEFAULT_PORT
    out[TF_CONFIG] = json.dumps(tf_config(addrs, info.container_rank, port))
    out[trial_env.CHIEF_IP] = addrs[0]
    return [sys.executable, "-m", WRAP_RANK, str(info.container_rank), "--", *script], out


def main(argv: Sequence[str] | None = None) -> int:
    port, script = parse_args(sys.argv[1:] if argv is None else argv)
    command, env = command_and_env(get_cluster_info(), port, script, os.environ)
    with Supervisor() as supervisor:
        try:
            supervisor.start(command, env=env, new_session=True)
        except OSError as exc:
            print(f"{PROG}: cannot run {command[0]!r}: {exc.strerror or exc}", file=sys.stderr)
            return 127
        return supervisor.wait()


def _port(value: str) -> int:
    if not value.isdigit() or not 0 < int(value) < 65536:
        raise argparse.ArgumentTypeError(f"expected a TCP port (1-65535), got {value!r}")
    return int(value)


if __name__ == "__main__":
    sys.exit(main())
