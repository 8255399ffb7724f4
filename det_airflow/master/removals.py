"""File removals as work for the hosts that have the files, never inside a request.

Checkpoint garbage collection, ``DELETE /checkpoints/{uuid}`` and ``det experiment delete`` decide
what goes in their own transaction: the rows change and the files to remove are queued in
``det_removals``, together. The answer says what was refused (a path outside the roots, a path the
experiment's storage does not give); the removal itself is done later, where the files are:

- a checkpoint in ``s3`` or ``shared_fs`` storage, by any host (``host`` is None);
- a trial work folder, by each host the experiment's trials ran on (``host`` names it), since
  every host has its own.

A worker host's heartbeat answer says how many removals wait for it; the host then claims them
(``POST /internal/hosts/{id}/removals/claim``), carries them out with its own ``[det]`` roots and as the
owner's identity (``file_cleanup.carry_out``), and reports each one done. Where no worker host ever
reported (the LocalExecutor, one machine), the master's housekeeping does the same for its own
host. A removal that fails is tried again a minute later, :data:`MAX_ATTEMPTS` times in all; then
it stays, with its last problem, for an admin to read.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import Connection, Row, and_, func, or_, select

from det_airflow import settings
from det_airflow.api.models import Removal
from det_airflow.master import file_cleanup, schema, unmanaged
from det_airflow.master.db import Database
from det_airflow.master.lifecycle import now

log = logging.getLogger(__name__)

#: Tries of one removal before it is left, with its problem, for an admin.
MAX_ATTEMPTS = 3
#: A claim not reported done within this time is claimed again (its host died mid-way).
CLAIM_SECONDS = 600
#: A removal that failed is tried again after this long.
RETRY_SECONDS = 60
#: Removals one claim hands out.
CLAIM_BATCH = 20
#: Who claims when no worker host reports: the master itself.
MASTER = "(master)"


def queue_checkpoints(conn: Connection, experiment: Row, uuids: Sequence[str]) -> list[str]:
    """Queue the removal of checkpoints ``uuids`` of ``experiment`` (already checked with
    ``file_cleanup.refused_checkpoints``), as its owner's identity; what it queued, for the answer."""
    if not uuids:
        return []
    storage = _queue_stored(conn, experiment, list(uuids))
    count = f"{len(uuids)} checkpoint{'s' if len(uuids) != 1 else ''}"
    return [f"{count} ({storage.get('type')})"]


def queue_tensorboard(conn: Connection, experiment: Row) -> list[str]:
    """Queue the removal of the experiment's TensorBoard files, ``tensorboard/experiment/<id>/`` of
    its checkpoint storage (core/_tensorboard.py), as its owner's identity; what it queued."""
    from det_airflow.object_storage import is_object_storage

    storage = experiment.config.get("checkpoint_storage") or {}
    if storage.get("type") != "shared_fs" and not is_object_storage(storage):
        return []
    _queue_stored(conn, experiment, [f"tensorboard/experiment/{experiment.id}"])
    return [f"its TensorBoard files ({storage.get('type')})"]


def _queue_stored(conn: Connection, experiment: Row, paths: list[str]) -> dict[str, Any]:
    """Queue a removal of ``paths`` (relative to the experiment's checkpoint storage) as its owner's
    identity; answers that storage."""
    storage = dict(experiment.config.get("checkpoint_storage") or {})
    _insert(
        conn,
        experiment.id,
        file_cleanup.CHECKPOINTS,
        host=None,
        pool=experiment.resource_pool,
        storage=storage,
        uuids=paths,
        identity=file_cleanup.owner_identity(conn, experiment.owner),
    )
    return storage


def queue_work_dirs(conn: Connection, experiment: Row) -> list[str]:
    """Queue the removal of the experiment's trial work folder on each host its trials ran on
    (on this master's own host when none is recorded); what it queued, for the answer."""
    if unmanaged.is_unmanaged(experiment):
        return []  # its program ran outside Airflow: no host made a work folder for it
    hosts = _hosts_of(conn, experiment.id) or [settings.load().host_id]
    for host in hosts:
        _insert(
            conn,
            experiment.id,
            file_cleanup.WORK_DIR,
            host=host,
            pool=experiment.resource_pool,
            storage=None,
            uuids=[],
            identity=None,
        )
    return [f"the trial work directory on {host}" for host in hosts]


def _hosts_of(conn: Connection, experiment_id: int) -> list[str]:
    t = schema.trials.c
    rows = conn.execute(select(t.host, t.hosts).where(t.experiment_id == experiment_id)).all()
    found: dict[str, None] = {}
    for row in rows:
        for host in [*(row.hosts or []), row.host]:
            if host:
                found[host] = None
    return sorted(found)


def _insert(
    conn: Connection,
    experiment_id: int,
    kind: str,
    *,
    host: str | None,
    pool: str | None,
    storage: Mapping[str, Any] | None,
    uuids: list[str],
    identity: file_cleanup.Identity | None,
) -> None:
    conn.execute(
        schema.removals.insert().values(
            experiment_id=experiment_id,
            kind=kind,
            host=host,
            pool=pool,
            storage=dict(storage) if storage is not None else None,
            uuids=uuids,
            uid=identity.uid if identity else None,
            gid=identity.gid if identity else None,
            created_at=now(),
            attempts=0,
        )
    )


def _claimable(host_id: str) -> Any:
    """Removals of shared storage or of ``host_id``'s own folders, tried fewer than
    :data:`MAX_ATTEMPTS` times, neither claimed now nor failed in the last :data:`RETRY_SECONDS`."""
    r = schema.removals.c
    at = now()
    return and_(
        or_(r.host.is_(None), r.host == host_id),
        r.attempts < MAX_ATTEMPTS,
        or_(
            r.claimed_at.is_(None),
            and_(r.claimed_by.is_not(None), r.claimed_at < at - timedelta(seconds=CLAIM_SECONDS)),
            and_(r.claimed_by.is_(None), r.claimed_at < at - timedelta(seconds=RETRY_SECONDS)),
        ),
    )


def waiting_for(conn: Connection, host_id: str) -> int:
    """How many removals ``host_id`` may claim now."""
    return int(
        conn.execute(select(func.count()).select_from(schema.removals).where(_claimable(host_id))).scalar()
        or 0
    )


def claim(conn: Connection, host_id: str, *, claimer: str | None = None) -> list[Row]:
    """Claim up to :data:`CLAIM_BATCH` removals for ``host_id`` (those of any host, and its own)."""
    r = schema.removals.c
    rows = conn.execute(
        select(schema.removals)
        .where(_claimable(host_id))
        .order_by(r.id)
        .limit(CLAIM_BATCH)
        .with_for_update(skip_locked=True)
    ).all()
    if rows:
        conn.execute(
            schema.removals.update()
            .where(r.id.in_([row.id for row in rows]))
            .values(claimed_by=claimer or host_id, claimed_at=now())
        )
    return list(rows)


def finish(conn: Connection, removal_id: int, not_removed: Sequence[str], *, host_id: str) -> None:
    """Record how a claimed removal went: done, it is forgotten; else it is tried again after
    :data:`RETRY_SECONDS`, up to :data:`MAX_ATTEMPTS` times in all. A removal that is no longer
    this host's claim (claimed again after :data:`CLAIM_SECONDS`) is left to its new claimer."""
    r = schema.removals.c
    mine = and_(r.id == removal_id, r.claimed_by == host_id)
    if not not_removed:
        conn.execute(schema.removals.delete().where(mine))
        return
    problem = "; ".join(not_removed)
    updated = conn.execute(
        schema.removals.update()
        .where(mine)
        .values(attempts=r.attempts + 1, problem=problem, claimed_by=None, claimed_at=now())
    )
    if updated.rowcount:  # type: ignore[attr-defined]
        log.warning("file removal %s on %s: %s", removal_id, host_id, problem)


def as_removal(row: Row) -> Removal:
    """A queued removal as a host reads it (the claim's answer)."""
    return Removal.model_validate(row, from_attributes=True)


def remove_here(db: Database) -> int:
    """The housekeeping job: where no worker host has ever reported (the LocalExecutor), the master
    is the only host and removes the files queued for it. Answers how many removals it finished."""
    host_id = settings.load().host_id
    with db.begin() as conn:
        if conn.execute(select(func.count()).select_from(schema.hosts)).scalar():
            return 0  # worker hosts report: the files are theirs to remove
        rows = claim(conn, host_id, claimer=MASTER)
    for row in rows:
        problems = file_cleanup.carry_out(as_removal(row))
        with db.begin() as conn:
            finish(conn, row.id, problems, host_id=MASTER)
    return len(rows)


def pending(conn: Connection, experiment_ids: Iterable[int] | None = None) -> list[Row]:
    """The removals still queued (of ``experiment_ids`` only, when given), oldest first."""
    query = select(schema.removals).order_by(schema.removals.c.id)
    if experiment_ids is not None:
        query = query.where(schema.removals.c.experiment_id.in_(list(experiment_ids)))
    return list(conn.execute(query))
