"""Per-user caps on work held open at once in this API server process: preemption long polls,
experiment creates in flight (and, counted in the database, unmanaged experiments still running).

Past a cap the request is answered 429 with the cap and the airflow.cfg setting that sets it, before
any work is done, so one user cannot take the server's threads, connections or memory from others.
A cap on work that ends within seconds (creates in flight) answers with ``Retry-After``; the CLI's
session waits and sends the same request again, so a burst of creates is spread out, not refused.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from fastapi import HTTPException

from det_airflow import settings

TOO_MANY = 429


def too_many(
    user: str, holds: str, cap: int, setting: str, *, retry_after: int | None = None
) -> HTTPException:
    """The 429 a user reads: what they hold, the cap, and where an admin sets it. ``retry_after``
    (seconds) when what is held ends by itself soon: clients then wait and try again."""
    return HTTPException(
        TOO_MANY,
        f"user '{user}' already has {holds}: the cap is {cap} per user "
        f"(airflow.cfg [{settings.SECTION}] {setting}); wait for one to finish",
        headers=None if retry_after is None else {"Retry-After": str(retry_after)},
    )


class PerUser:
    """Counts what each user holds open; ``hold`` refuses past the cap that ``setting`` names."""

    def __init__(self, what: str, setting: str, *, retry_after: int | None = None) -> None:
        self.what = what
        self.setting = setting
        self.retry_after = retry_after
        self._held: Counter[str] = Counter()
        self._lock = threading.Lock()

    def cap(self) -> int:
        value = getattr(settings.load(), self.setting)
        assert isinstance(value, int)
        return value

    def held(self, user: str) -> int:
        return self._held[user]

    @contextmanager
    def hold(self, user: str) -> Iterator[None]:
        cap = self.cap()
        with self._lock:
            if self._held[user] >= cap:
                raise too_many(
                    user, f"{self._held[user]} {self.what}", cap, self.setting, retry_after=self.retry_after
                )
            self._held[user] += 1
        try:
            yield
        finally:
            with self._lock:
                self._held[user] -= 1
                if not self._held[user]:
                    del self._held[user]


long_polls = PerUser("preemption long polls open", "max_long_polls_per_user")
# A create is checked and stored within about a second: the client waits one and sends it again.
creates = PerUser("experiment creates in flight", "max_creates_per_user", retry_after=1)
