"""``import determined`` for unchanged Determined training code, when the real package is absent.

The folder ``determined_root()`` holds a ``determined`` package whose modules re-export
det-airflow's (``determined.core`` is ``det_airflow.core``, ``python3 -m
determined.launch.torch_distributed`` runs our launcher). A trial gets that folder on its
``PYTHONPATH`` only when no ``determined`` is installed where it runs, so a real Determined install
always wins and nobody else's ``import determined`` is shadowed.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

_ROOT = Path(__file__).resolve().parent


def determined_root() -> Path:
    """The folder to put on ``PYTHONPATH`` for ``import determined`` to be det-airflow's."""
    return _ROOT


def installed_determined() -> str | None:
    """Where a real ``determined`` package is installed for this interpreter, else None."""
    spec = importlib.util.find_spec("determined")
    if spec is None or spec.origin is None:
        return None
    origin = Path(spec.origin).resolve()
    return None if origin.is_relative_to(_ROOT) else str(origin.parent)


def determined_path_entry() -> str | None:
    """The ``PYTHONPATH`` entry a trial needs (None when the real package is installed)."""
    return None if installed_determined() else str(_ROOT)


def determined_notice() -> str:
    """One line for the trial log: which ``determined`` the trial's ``import determined`` gets."""
    real = installed_determined()
    if real:
        return f"import determined: the installed Determined package runs ({real}), not det-airflow's"
    return "import determined: det-airflow's implementation of Determined's training API runs"
