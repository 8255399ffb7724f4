"""One OS identity per experiment owner: a uid from ``[det] trial_uid_range``, stable per user.

Trials of different users then run as different uids (local processes, containers and pods), so
one user's trial cannot read another's work folder, ``/proc/<pid>/environ`` or checkpoints, nor
signal its processes. The uid needs no ``/etc/passwd`` entry; its group id is the same number.

Allocation is race-free: the table's unique constraints decide, and a writer that loses a race
(another API server took the same uid, or allocated this user first) tries again.
"""

from __future__ import annotations

from sqlalchemy import Connection, select
from sqlalchemy.exc import IntegrityError

from det_airflow import settings
from det_airflow.errors import DetError
from det_airflow.master import schema

_ATTEMPTS = 20


class IdentityError(DetError):
    """No uid is left in ``[det] trial_uid_range`` for a new experiment owner."""


def uid_for(conn: Connection, user: str) -> int:
    """The uid of ``user`` (an Airflow user name), allocated on first use; gid == uid."""
    table = schema.user_ids
    for _ in range(_ATTEMPTS):
        found = conn.execute(select(table.c.uid).where(table.c.username == user)).scalar()
        if found is not None:
            return int(found)
        uid = _first_free(conn)
        try:
            # A savepoint, so that losing the race leaves the caller's transaction usable.
            with conn.begin_nested():
                conn.execute(table.insert().values(username=user, uid=uid))
        except IntegrityError:
            continue
        return uid
    raise IdentityError(
        f"could not allocate a uid for user {user!r}: too many concurrent allocations; try again"
    )


def _first_free(conn: Connection) -> int:
    first, last = settings.load().trial_uid_range
    used = set(
        conn.execute(
            select(schema.user_ids.c.uid).where(schema.user_ids.c.uid.between(first, last))
        ).scalars()
    )
    for uid in range(first, last + 1):
        if uid not in used:
            return uid
    raise IdentityError(
        f"airflow.cfg [det] trial_uid_range {first}-{last}: all {last - first + 1} uids are taken by "
        "experiment owners; widen the range"
    )
