"""``python3 -m determined.launch.X``: det-airflow's launchers (``det_airflow.launchers.X``)."""

from __future__ import annotations

import importlib.util
import runpy
import sys


def run_launcher(name: str) -> None:
    """Runs ``det_airflow.launchers.<name>`` as ``__main__``, with this process's arguments."""
    module = f"det_airflow.launchers.{name}"
    if importlib.util.find_spec(module) is None:
        print(f"determined.launch.{name}: det-airflow has no {name} launcher", file=sys.stderr)
        sys.exit(1)
    runpy.run_module(module, run_name="__main__", alter_sys=True)
