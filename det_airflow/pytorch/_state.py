"""What a Trainer checkpoint holds, and putting it back: models, optimizers, LR schedulers, every
worker's random generators and the data position, in one ``state_dict.pth``."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from det_airflow.errors import DetError
from det_airflow.pytorch._lr_scheduler import LRScheduler

STATE_FILE = "state_dict.pth"
FORMAT = "det_airflow.pytorch/1"


def rng_state() -> dict[str, Any]:
    """This process's random generators: Python's, NumPy's, torch's (and CUDA's when in use)."""
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    try:
        import numpy as np
    except ImportError:
        pass
    else:
        state["numpy"] = np.random.get_state()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "numpy" in state:
        import numpy as np

        np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save(
    path: Path,
    *,
    models: Sequence[nn.Module],
    optimizers: Sequence[torch.optim.Optimizer],
    lr_schedulers: Sequence[LRScheduler],
    rng_states: list[dict[str, Any]],
    trainer: dict[str, Any],
    extra: dict[str, Any] | None = None,
) -> None:
    """Write the state; ``extra`` (callbacks' state, what their save hooks added) is saved beside it."""
    torch.save(
        {
            **(extra or {}),
            "format": FORMAT,
            "models_state_dict": [m.state_dict() for m in models],
            "optimizers_state_dict": [o.state_dict() for o in optimizers],
            "lr_schedulers_state_dict": [s.state_dict() for s in lr_schedulers],
            "rng_states": rng_states,
            "trainer": trainer,
        },
        path / STATE_FILE,
    )


def load(
    path: Path,
    *,
    models: Sequence[nn.Module],
    optimizers: Sequence[torch.optim.Optimizer],
    lr_schedulers: Sequence[LRScheduler],
    on_load_start: Callable[[dict[str, Any]], None] = lambda state: None,
) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    """Load weights and optimizer and scheduler state; answers ``(trainer state, rng states, all of it)``.

    ``on_load_start`` sees the whole saved state before anything is loaded (callbacks' hook).

    The random generators are not set here: the Trainer sets them last, right before training.
    """
    file = path / STATE_FILE
    if not file.is_file():
        raise DetError(f"{path} has no {STATE_FILE}: it is not a checkpoint of det.pytorch.Trainer")
    # The trial's own checkpoint in the experiment's storage: trusted as much as the trial's code,
    # and it holds Python and NumPy generator states that weights_only loading refuses.
    state = torch.load(file, map_location="cpu", weights_only=False)
    on_load_start(state)
    _load_each("model", models, state["models_state_dict"])
    _load_each("optimizer", optimizers, state["optimizers_state_dict"])
    _load_each("LR scheduler", lr_schedulers, state["lr_schedulers_state_dict"])
    return dict(state["trainer"]), list(state["rng_states"]), state


def _load_each(what: str, objects: Sequence[Any], states: list[Any]) -> None:
    if len(objects) != len(states):
        raise DetError(
            f"the checkpoint holds {len(states)} {what}(s) but the trial wrapped {len(objects)}; "
            "wrap the same ones, in the same order, as the run that saved it"
        )
    for obj, state in zip(objects, states, strict=True):
        obj.load_state_dict(state)
