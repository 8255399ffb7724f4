"""Multi-node trials: a trial larger than every host runs as one gang over several of them.

The job queue's admission places such a trial on ``k`` hosts, ``slots / k`` slots each
(``det_trials.nodes``, chief first; master/placement.py). The chief runs in the trial's slot task
as any trial does; every other node runs in one of the experiment's node tasks (``trial_node``,
mapped over the slots and node ranks 1..MAX_NODES-1). When the chief's run starts, its nodes are
recorded for that run (``det_trial_nodes``) with the chief's address and rendezvous port, and the
master starts their node tasks on their hosts' Celery queues (a new try of each: node tasks end as
soon as no run needs them, so none waits for the experiment's whole life). Each gets its part of
the run with a token of its own, valid while that run goes on. The launcher's rendezvous starts
the gang's processes together: none trains until all have joined.

One node's failure is the gang's: a node that exits non-zero, does not start within
``NODE_START_SECONDS``, or whose host stops heartbeating stops the chief's process when its task
next looks (``gang_failed`` in the trial's status), and the run ends as a failed run: the trial
restarts, every node from the same latest checkpoint, as a new run whose nodes are placed again.
"""

from __future__ import annotations

from datetime import UTC, timedelta
from typing import Any

from sqlalchemy import Connection, Row, select

from det_airflow.master import hosts, schema
from det_airflow.master.lifecycle import now
from det_airflow.states import TrialState

WAITING, RUNNING, EXITED = "waiting", "running", "exited"
#: The states in which a trial's run may have nodes to start or running.
RUN_GOING = (TrialState.STARTING, TrialState.PULLING, TrialState.RUNNING)
#: How long a run's node may wait for its task to start it before the run fails as a whole.
NODE_START_SECONDS = 180


def start_run(
    conn: Connection, trial: Row, chief_task: dict[str, Any], port: int | None
) -> dict[str, Any] | None:
    """Record the nodes of the run of ``trial`` that starts now (``trial.run_id``); answers the
    gang as the chief's spec carries it, or None when the trial runs whole on one host."""
    if not trial.nodes:
        return None  # rows of an earlier multi-node run name another run: nothing reads them
    table = schema.trial_nodes
    conn.execute(table.delete().where(table.c.trial_id == trial.id))
    addresses = _addresses(conn, [node["host"] for node in trial.nodes])
    chief_address = addresses[0]
    started = now()
    for rank, node in enumerate(trial.nodes):
        conn.execute(
            table.insert().values(
                trial_id=trial.id,
                rank=rank,
                run_id=trial.run_id,
                host=node["host"],
                slots=int(node["slots"]),
                address=chief_address,
                port=port,
                state=RUNNING if rank == 0 else WAITING,
                since=started,
                task=chief_task if rank == 0 else None,
            )
        )
    return gang(addresses, 0, int(trial.nodes[0]["slots"]), port)


def gang(addresses: list[str], rank: int, slots: int, port: int | None) -> dict[str, Any]:
    """One node's part of the gang, as its spec carries it (``TrialRunSpec.gang``)."""
    return {"addrs": addresses, "rank": rank, "slots": slots, "port": port}


def _addresses(conn: Connection, host_ids: list[str]) -> list[str]:
    """Where the other nodes reach each host: the address its heartbeat reported, else its id."""
    table = schema.hosts
    reported = dict(conn.execute(select(table.c.id, table.c.address).where(table.c.id.in_(host_ids))).all())
    return [reported.get(host_id) or host_id for host_id in host_ids]


def node_of(conn: Connection, trial_id: int, rank: int) -> Row | None:
    table = schema.trial_nodes
    return conn.execute(select(table).where(table.c.trial_id == trial_id, table.c.rank == rank)).first()


def nodes_to_start(conn: Connection, trial_id: int | None = None) -> list[Row]:
    """The nodes of current runs (``trial_id``'s alone, when given) that wait for their node task,
    with what starting that task takes: the trial's slot, the experiment's DAG run and gang size."""
    nodes, trials, exps = schema.trial_nodes, schema.trials, schema.experiments
    query = (
        select(
            nodes.c.trial_id,
            nodes.c.rank,
            nodes.c.host,
            trials.c.slot,
            trials.c.nodes.label("placed"),
            exps.c.dag_id,
            exps.c.dag_run_id,
        )
        .join(trials, trials.c.id == nodes.c.trial_id)
        .join(exps, exps.c.id == trials.c.experiment_id)
        .where(
            nodes.c.state == WAITING,
            nodes.c.run_id == trials.c.run_id,
            trials.c.state.in_([s.value for s in RUN_GOING]),
            trials.c.slot.is_not(None),
            exps.c.dag_run_id.is_not(None),
        )
    )
    if trial_id is not None:
        query = query.where(nodes.c.trial_id == trial_id)
    return list(conn.execute(query))


def running_nodes(conn: Connection, trial_ids: list[int]) -> list[Row]:
    """The nodes other than the chief running the current runs of these trials, with their tasks."""
    if not trial_ids:
        return []
    nodes, trials = schema.trial_nodes, schema.trials
    return list(
        conn.execute(
            select(nodes.c.trial_id, nodes.c.rank, nodes.c.task)
            .join(trials, trials.c.id == nodes.c.trial_id)
            .where(
                nodes.c.trial_id.in_(trial_ids),
                nodes.c.rank > 0,
                nodes.c.state == RUNNING,
                nodes.c.run_id == trials.c.run_id,
            )
        )
    )


def waiting_node(conn: Connection, trial: Row, rank: int) -> Row | None:
    """The node ``rank`` of the trial's current run when it waits for its node task to start it."""
    if trial.state not in RUN_GOING:
        return None
    node = node_of(conn, trial.id, rank)
    if node is None or node.run_id != trial.run_id or node.state != WAITING:
        return None
    return node


def start_node(
    conn: Connection, trial: Row, node: Row, token_hash: str, task: dict[str, Any]
) -> dict[str, Any] | None:
    """The node's task starts it: its token recorded, its host added to the trial's hosts; answers
    its part of the gang (None when another task started it first)."""
    table = schema.trial_nodes
    started = conn.execute(
        table.update()
        .where(
            table.c.trial_id == trial.id,
            table.c.rank == node.rank,
            table.c.run_id == node.run_id,
            table.c.state == WAITING,
        )
        .values(state=RUNNING, since=now(), token_hash=token_hash, task=task)
    )
    if not started.rowcount:  # type: ignore[attr-defined]
        return None
    seen = list(trial.hosts or [])
    if node.host not in seen:
        conn.execute(
            schema.trials.update().where(schema.trials.c.id == trial.id).values(hosts=[*seen, node.host])
        )
    addresses = _addresses(conn, [n["host"] for n in trial.nodes or []])
    return gang(addresses, int(node.rank), int(node.slots), node.port)


def exit_node(conn: Connection, trial_id: int, rank: int, run_id: int, exit_code: int) -> Row | None:
    """A node's process ended; None when that node's run is not the one recorded (a late report)."""
    table = schema.trial_nodes
    node = node_of(conn, trial_id, rank)
    if node is None or node.run_id != run_id or node.state != RUNNING:
        return None
    conn.execute(
        table.update()
        .where(table.c.trial_id == trial_id, table.c.rank == rank)
        .values(state=EXITED, since=now(), exit_code=exit_code, token_hash=None)
    )
    return node_of(conn, trial_id, rank)


def end_tokens(conn: Connection, trial_id: int) -> None:
    """The trial's run ended: no node token of it is valid any more."""
    table = schema.trial_nodes
    conn.execute(table.update().where(table.c.trial_id == trial_id).values(token_hash=None))


def failure(conn: Connection, trial: Row) -> str | None:
    """Why the trial's current run must stop because of one of its nodes: a node that exited
    non-zero, or whose host stopped heartbeating; None when all is well."""
    table = schema.trial_nodes
    rows = conn.execute(
        select(table)
        .where(table.c.trial_id == trial.id, table.c.run_id == trial.run_id)
        .order_by(table.c.rank)
    ).all()
    if not rows:
        return None
    gone = hosts.gone_hosts(conn)
    late = now() - timedelta(seconds=NODE_START_SECONDS)
    for node in rows:
        if node.state == EXITED and node.exit_code != 0 and node.rank > 0:
            return f"node {node.rank} on host {node.host} exited {node.exit_code}"
        if node.host in gone:
            return f"node {node.rank}'s host {node.host} stopped heartbeating ({gone[node.host]})"
        since = node.since if node.since.tzinfo else node.since.replace(tzinfo=UTC)  # SQLite keeps no zone
        if node.state == WAITING and since < late:
            return f"node {node.rank} on host {node.host} did not start within {NODE_START_SECONDS} s"
    return None


def node_hosts(trial: Row) -> list[str]:
    """Every host the trial's placement holds slots on: its nodes', else its one host."""
    if trial.nodes:
        return [node["host"] for node in trial.nodes]
    return [trial.host] if trial.host else []
