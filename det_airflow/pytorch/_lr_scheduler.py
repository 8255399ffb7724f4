"""``LRScheduler``: a torch learning-rate scheduler and when the Trainer steps it."""

from __future__ import annotations

import enum
from typing import Any


class LRScheduler:
    """A torch LR scheduler wrapped by ``context.wrap_lr_scheduler(scheduler, step_mode)``.

    ``STEP_EVERY_BATCH`` and ``STEP_EVERY_EPOCH`` are stepped by the Trainer every ``frequency``
    batches or epochs; ``STEP_EVERY_OPTIMIZER_STEP`` by ``context.step_optimizer`` of its optimizer;
    ``MANUAL_STEP`` is left to your code. Its state is checkpointed in every mode.
    """

    class StepMode(enum.Enum):
        STEP_EVERY_EPOCH = 1
        STEP_EVERY_BATCH = 2
        MANUAL_STEP = 3
        STEP_EVERY_OPTIMIZER_STEP = 4

    def __init__(self, scheduler: Any, step_mode: StepMode, frequency: int = 1) -> None:
        if not isinstance(step_mode, LRScheduler.StepMode):
            raise TypeError(f"step_mode must be an LRScheduler.StepMode, got {step_mode!r}")
        if isinstance(frequency, bool) or not isinstance(frequency, int) or frequency < 1:
            raise ValueError(f"frequency must be an integer >= 1, got {frequency!r}")
        self.scheduler = scheduler
        self.step_mode = step_mode
        self.frequency = frequency
        self._calls = 0

    def step(self, *args: Any, **kwargs: Any) -> None:
        self.scheduler.step(*args, **kwargs)

    def _auto_step(self) -> None:
        """One unit of its step mode went by: step every ``frequency`` of them."""
        self._calls += 1
        if self._calls % self.frequency == 0:
            self.scheduler.step()

    def state_dict(self) -> dict[str, Any]:
        return {"scheduler": self.scheduler.state_dict(), "calls": self._calls}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state["scheduler"])
        self._calls = int(state.get("calls", 0))

    def get_last_lr(self) -> list[float]:
        return list(self.scheduler.get_last_lr())
