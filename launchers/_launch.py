"""What the deepspeed and horovod launchers share: their command line, where the trial's
containers are, and running the tool (or, on the other containers, sshd) under supervision."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from det_airflow import trial_env
from det_airflow.cluster_info import get_cluster_info
from det_airflow.launchers._supervisor import Supervisor

TRIAL_RUNNER = "det_airflow.pytorch.run_trial"
WRAP_RANK = "det_airflow.launchers.wrap_rank"
LOCALHOST = "127.0.0.1"
SSHD_PORT = 12350  # where the other containers' sshd listens for the chief's tool
NOT_INSTALLED = 127  # the shell's status for a command it cannot find


class ToolMissing(Exception):
    """The launcher's tool is not installed in the image."""


@dataclass(frozen=True)
class Containers:
    """The trial's containers: their addresses, slots in each, and which one this is."""

    addrs: tuple[str, ...]
    slots: int
    rank: int

    @property
    def total_slots(self) -> int:
        return self.slots * len(self.addrs)

    @property
    def is_chief(self) -> bool:
        return self.rank == 0


def parse_args(prog: str, overrides_name: str, argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(tool overrides, worker command)`` from ``[OVERRIDES... --] (--trial module:Class | SCRIPT...)``;
    exits with a usage message when there is no command."""
    args = list(argv)
    overrides: list[str] = []
    if "--" in args:
        split = args.index("--")
        overrides, args = args[:split], args[split + 1 :]
    parser = argparse.ArgumentParser(
        prog=prog, usage=f"%(prog)s [{overrides_name}... --] (--trial module:Class | SCRIPT...)"
    )
    parser.add_argument("--trial", help="a PyTorchTrial to train, as module:Class")
    parser.add_argument("script", nargs=argparse.REMAINDER, help="the command each worker runs")
    parsed = parser.parse_args(args)
    script = list(parsed.script or [])
    if parsed.trial is not None:
        script = [sys.executable, "-m", TRIAL_RUNNER, parsed.trial, *script]
    if not script:
        parser.error("give --trial module:Class or a command to run")
    return overrides, script


def containers(env: Mapping[str, str]) -> Containers:
    """From the trial's cluster info; one container on loopback with one slot off-cluster."""
    info = get_cluster_info()
    if info is None:
        slots = _count(env.get(trial_env.SLOT_IDS))
        return Containers((LOCALHOST,), max(slots, 1), 0)
    addrs = tuple(info.container_addrs) or (LOCALHOST,)
    return Containers(addrs, max(len(info.slot_ids), 1), info.container_rank)


def require(tool: str, hint: str) -> str:
    """The path of ``tool``; :class:`ToolMissing` naming what to install when it is not on PATH."""
    path = shutil.which(tool)
    if path is None:
        raise ToolMissing(
            f"`{tool}` is not installed in this image (PATH={os.environ.get('PATH', '')}); {hint}"
        )
    return path


def sshd_command() -> list[str]:
    """What the non-chief containers run: sshd in the foreground, for the chief's tool to reach them."""
    return [
        require("sshd", "install openssh-server: the chief starts workers here over ssh"),
        "-D",
        "-p",
        str(SSHD_PORT),
    ]


def run(command: Sequence[str], env: Mapping[str, str]) -> int:
    """Runs ``command`` supervised: signals passed on, nothing left behind; answers its exit status."""
    with Supervisor() as supervisor:
        supervisor.start(command, env=env, new_session=True)
        return supervisor.wait()


Build = Callable[[list[str], list[str], Containers, dict[str, str]], tuple[list[str], dict[str, str]]]


def main_of(prog: str, overrides_name: str, build: Build, argv: Sequence[str] | None) -> int:
    """The body of a launcher's ``main``: ``build(overrides, script, containers, env)`` answers the
    command this container runs and its environment."""
    overrides, script = parse_args(prog, overrides_name, sys.argv[1:] if argv is None else argv)
    try:
        command, env = build(overrides, script, containers(os.environ), dict(os.environ))
    except ToolMissing as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return NOT_INSTALLED
    return run(command, env)


def _count(value: str | None) -> int:
    if not value or not value.strip():
        return 0
    try:
        parsed = json.loads(value)
    except ValueError:
        return len([v for v in value.split(",") if v.strip()])
    return len(parsed) if isinstance(parsed, list) else 1
