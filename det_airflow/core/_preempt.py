"""Whether the trial should checkpoint and exit now (pause, cancel, scheduler preemption, searcher stop)."""

from __future__ import annotations

import enum
import time

from det_airflow.core._backend import Backend
from det_airflow.core._distributed import DistributedContext
from det_airflow.errors import DetError


class PreemptMode(enum.Enum):
    """Who asks the master about preemption: ``WorkersAskChief`` (default) has every worker call
    ``should_preempt()`` in step and the chief ask for all; ``ChiefOnly`` lets only the chief call
    it; ``ExplicitWorkers`` has each worker that calls it ask on its own, out of step."""

    WorkersAskChief = "WORKERS_ASK_CHIEF"
    ChiefOnly = "CHIEF_ONLY"
    ExplicitWorkers = "EXPLICIT_WORKERS"

    @classmethod
    def parse(cls, value: object) -> PreemptMode:
        if value is None:
            return cls.WorkersAskChief
        if isinstance(value, str) and value in cls.__members__:
            return cls[value]
        try:
            return cls(value)
        except ValueError:
            names = ", ".join(m.name for m in cls)
            raise DetError(f"core.init(preempt_mode=...): expected one of {names}, got {value!r}") from None


class PreemptContext:
    """Asks the master whether to stop; cheap enough to call at every reporting boundary.

    A trial's chief reads the answer of its backend's preemption watcher, which keeps a long poll
    open at the master; without one, it asks at most once per ``min_interval`` seconds (the answer
    is cached between). Once the answer is yes it stays yes. With several workers it is a
    collective: every worker calls it, the chief asks and broadcasts the answer.
    """

    def __init__(
        self,
        distributed: DistributedContext,
        backend: Backend,
        *,
        min_interval: float = 1.0,
        mode: PreemptMode = PreemptMode.WorkersAskChief,
    ) -> None:
        self._dist = distributed
        self._mode = mode
        self._backend = backend
        self._min_interval = min_interval
        self._preempt = False
        self._asked_at: float | None = None
        self._acknowledged = False

    def should_preempt(self, auto_ack: bool = True) -> bool:
        """True once the trial should checkpoint and exit 0; it will be resumed from that checkpoint."""
        if self._mode == PreemptMode.WorkersAskChief:
            answer = bool(self._dist.broadcast(self._ask() if self._dist.is_chief else None))
        elif self._dist.is_chief or self._mode == PreemptMode.ExplicitWorkers:
            answer = self._ask()
        else:
            raise DetError("preempt.should_preempt() is for the chief only with PreemptMode.ChiefOnly")
        if answer and auto_ack:
            self.acknowledge_preemption_signal()
        return answer

    def acknowledge_preemption_signal(self) -> None:
        """Promise to exit 0 soon after a checkpoint (``should_preempt()`` does it by default)."""
        if self._dist.is_chief and not self._acknowledged:
            self._acknowledged = True
            self._backend.acknowledge_preemption()

    def _ask(self) -> bool:
        if self._preempt:
            return True
        watched = self._backend.preemption_signalled()
        if watched is not None:  # a watcher follows the master: its answer costs no request
            self._preempt = watched
            return watched
        now = time.monotonic()
        if self._asked_at is None or now - self._asked_at >= self._min_interval:
            self._preempt = self._backend.should_preempt()
            self._asked_at = now
        return self._preempt
