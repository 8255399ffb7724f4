"""Tasks beside experiments: Determined's notebooks, TensorBoards, commands, shells and generic
tasks (a command whose program is its config's ``entrypoint``: `det task create`).

A task runs as the one trial of an experiment of its own, hidden from the experiment lists: the job
queue admits it (priority, pool, slots; never preempted, as in Determined), placement puts it on a
host, the trial's runner starts it (a local process as its owner's uid, a Docker container, a pod),
its output is the trial's logs and its Airflow DAG run is the experiment's. What makes it a task is
its row in ``det_tasks``: its type, its own config as submitted, what it runs, and, once its server
is up, where the proxy (``/det/proxy/<id>/``, master/proxy.py) reaches it.

Task ids are experiment ids: one numbering for every job in the queue.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml
from sqlalchemy import Connection, Row, select

from det_airflow import object_storage, runner_policy
from det_airflow.config._experiment import MAX_NAME_LENGTH
from det_airflow.config._yaml import read_yaml
from det_airflow.errors import ConfigError, DetError
from det_airflow.master import experiments, projects, schema, serialize
from det_airflow.master.authz import Caller, PermissionDenied, check_pool, check_read
from det_airflow.master.lifecycle import NotFound, StateError, now
from det_airflow.states import ExperimentState, TrialState

# The label that marks a task's experiment (its DAG's tags and title read it: dagfactory._task_type),
# and what serves a web page (or a terminal) through the proxy.
from det_airflow.tasks import LABEL_PREFIX, SERVED
from det_airflow.text_input import as_name

if TYPE_CHECKING:
    from det_airflow.master.db import Database

TASK_TYPES = ("command", "notebook", "tensorboard", "shell", "generic")
# Determined's job types, as `det job list` shows them.
JOB_TYPES = {
    "command": "TYPE_COMMAND",
    "notebook": "TYPE_NOTEBOOK",
    "tensorboard": "TYPE_TENSORBOARD",
    "shell": "TYPE_SHELL",
    "generic": "TYPE_GENERIC",
}
# Determined's defaults: a TensorBoard needs no slot, the others one.
DEFAULT_SLOTS = {"command": 1, "notebook": 1, "tensorboard": 0, "shell": 1, "generic": 1}
# The types that run their submitter's program to its end (no server, no idle timeout).
RUN_TO_END = ("command", "generic")
# Where a TensorBoard that names no pool runs: Airflow's own general pool.
TENSORBOARD_POOL = "default_pool"
PROGRAMS = {
    "notebook": ["python3", "-m", "det_airflow.tasks.notebook"],
    # Isolated (-I): no PYTHON* variable, user site or working folder on its import path, so that
    # nothing of its owner's runs in a program whose pages other people open.
    "tensorboard": ["python3", "-I", "-m", "det_airflow.tasks.tensorboard"],
    "shell": ["python3", "-m", "det_airflow.tasks.shell"],
}
# What a TensorBoard's config may not set: it runs the platform's program in the platform's
# environment, and other people open its pages.
_PLATFORM_ONLY = ("environment", "bind_mounts", "work_dir")
# Runners whose tasks' ports the runner checks and reports (the port must be the task process's own);
# a pod's address and ports are its own, and its program reports them with its trial's token.
RUNNER_REPORTED = ("local", "docker")
PROXY_PREFIX = "/det/proxy/{id}/"

# The fields of a task's config (Determined's command, notebook, shell and TensorBoard configs).
_TOP_FIELDS = (
    "description",
    "environment",
    "resources",
    "bind_mounts",
    "idle_timeout",
    "notebook_idle_type",
    "entrypoint",
    "work_dir",
    "debug",
    "airflow",
    "checkpoint_storage",
)
_RESOURCE_FIELDS = ("slots", "resource_pool", "priority", "weight", "devices", "shm_size", "is_single_node")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
# The longest duration a task's config may give (idle_timeout): longer is as good as none.
MAX_DURATION_SECONDS = 30 * 86400.0

# A task's states, as Determined names them, from its experiment's and its trial's.
QUEUED, PULLING, STARTING, RUNNING, TERMINATING, TERMINATED = (
    "QUEUED",
    "PULLING",
    "STARTING",
    "RUNNING",
    "TERMINATING",
    "TERMINATED",
)


@dataclass(frozen=True)
class TaskRequest:
    """A task as the caller asks for it (``POST /api/v1/tasks``)."""

    type: str
    config: str | None = None  # YAML text of the task's config
    context: str | None = None  # base64 tar.gz of the context folder
    command: Sequence[str] = ()  # command: what it runs; shell: what each terminal runs
    experiment_ids: Sequence[int] = ()  # tensorboard: every trial of these
    trial_ids: Sequence[int] = ()  # tensorboard: these trials
    forked_from: int | None = None  # generic: the task whose config and context it starts from
    project_id: int | None = None  # generic: the project it is placed in


@dataclass(frozen=True)
class ProxyTarget:
    """Where the proxy sends a request for a task: its server's base URL and the secret it asks."""

    task_id: int
    type: str
    base_url: str  # e.g. http://127.0.0.1:40123 (the request's whole path is appended)
    secret: str


def is_task_label(label: str) -> bool:
    return label.startswith(LABEL_PREFIX)


def task_type_of_labels(labels: Sequence[str]) -> str | None:
    """The task type an experiment's labels mark (the DAG factory reads it; it has no database)."""
    for label in labels:
        if is_task_label(label) and label[len(LABEL_PREFIX) :] in TASK_TYPES:
            return label[len(LABEL_PREFIX) :]
    return None


# --- the task's config ---------------------------------------------------------------------------


def parse_duration(value: Any, field: str) -> float | None:
    """Seconds from ``30m``, ``1h``, ``45s``, ``90`` (seconds); None for none."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ConfigError(
            [(field, f"expected a duration such as '30m', '1h' or 90 (seconds), got {value!r}")]
        )
    if isinstance(value, int | float):
        seconds = float(min(value, MAX_DURATION_SECONDS + 1))  # an int past any float, capped first
    else:
        match = _DURATION.match(str(value))
        if match is None:
            raise ConfigError(
                [(field, f"expected a duration such as '30m', '1h' or 90 (seconds), got {value!r}")]
            )
        seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    # NaN and infinity (YAML's .nan and .inf) fail the comparison too.
    if not 0 < seconds <= MAX_DURATION_SECONDS:
        raise ConfigError([(field, f"expected a duration above 0 and at most 30 days (30d), got {value!r}")])
    return seconds


def read_task_config(text: str | None) -> dict[str, Any]:
    """The task config a caller sent (YAML), checked for fields a task does not have."""
    if text is None or not text.strip():
        return {}
    data = read_yaml(text, "task config")
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError(
            [("<root>", f"expected a mapping of task config fields, got {type(data).__name__}")]
        )
    problems: list[tuple[str, str]] = []
    for key in data:
        if key not in _TOP_FIELDS:
            problems.append((str(key), _unknown(str(key), _TOP_FIELDS, "a task config field")))
    resources = data.get("resources")
    if resources is not None and not isinstance(resources, Mapping):
        problems.append(("resources", "expected a mapping"))
    elif isinstance(resources, Mapping):
        for key in resources:
            if key not in _RESOURCE_FIELDS:
                problems.append(
                    (f"resources.{key}", _unknown(str(key), _RESOURCE_FIELDS, "a resources field"))
                )
    if problems:
        raise ConfigError(problems)
    return dict(data)


def _unknown(key: str, known: Sequence[str], what: str) -> str:
    import difflib

    close = difflib.get_close_matches(key, known, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else f" (known: {', '.join(known)})"
    if key == "slots_per_trial":
        hint = "; a task takes 'resources.slots'"
    return f"not {what}{hint}"


def experiment_config(
    task_type: str,
    config: Mapping[str, Any],
    command: Sequence[str],
    storage: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The config of the one-trial experiment a task runs as."""
    resources = dict(config.get("resources") or {})
    slots = resources.pop("slots", DEFAULT_SLOTS[task_type])
    shown = _words(config.get("entrypoint")) if task_type == "generic" else command
    description = str(config.get("description") or _default_description(task_type, shown))
    if task_type == "command":
        entrypoint: Any = config.get("entrypoint")
        if command:
            entrypoint = command[0] if len(command) == 1 else list(command)
        if not entrypoint:
            raise ConfigError([("entrypoint", "a command needs something to run: det cmd run CMD [ARGS...]")])
    elif task_type == "generic":
        # Checked as any experiment's entrypoint (a command string or a list of strings) once the
        # config is whole; here only that there is one.
        entrypoint = config.get("entrypoint")
        if entrypoint is None or entrypoint == "" or entrypoint == []:
            raise ConfigError(
                [
                    (
                        "entrypoint",
                        "a generic task runs its config's entrypoint: e.g. 'entrypoint: python3 run.py'",
                    )
                ]
            )
    else:
        if config.get("entrypoint") is not None:
            raise ConfigError([("entrypoint", f"a {task_type} runs its own program; leave 'entrypoint' out")])
        entrypoint = list(PROGRAMS[task_type])
    if task_type == "tensorboard":
        _check_platform_only(config)
    if (
        task_type == "tensorboard"
        and not resources.get("resource_pool")
        and not (config.get("airflow") or {}).get("pool")
    ):
        # It needs no GPU, yet as an Airflow task it holds one pool slot: not one of the GPU pools'.
        resources["resource_pool"] = TENSORBOARD_POOL
    result: dict[str, Any] = {
        # Within the experiment name's limit, however long the command (an ellipsis says so).
        "name": as_name(f"{task_type}: {description}", MAX_NAME_LENGTH),
        "description": description,
        "labels": [LABEL_PREFIX + task_type],
        "entrypoint": entrypoint,
        "searcher": {"name": "single", "metric": "task", "max_length": {"batches": 1}},
        "hyperparameters": {},
        "resources": {**resources, "slots_per_trial": slots},
        "max_restarts": 0,
    }
    for key in ("environment", "bind_mounts", "airflow", "debug"):
        if config.get(key) is not None:
            result[key] = config[key]
    if storage is not None:
        result["checkpoint_storage"] = dict(storage)
    elif config.get("checkpoint_storage") is not None:
        result["checkpoint_storage"] = config["checkpoint_storage"]
    return result


def _words(entrypoint: Any) -> list[str]:
    """An entrypoint (a command string or a list) as the words a description shows."""
    if isinstance(entrypoint, str):
        return [entrypoint]
    return [str(part) for part in entrypoint] if isinstance(entrypoint, list) else []


def _check_platform_only(config: Mapping[str, Any]) -> None:
    """Refuse the fields that would change a TensorBoard's program or environment, naming each."""
    names: list[str] = []
    for key in _PLATFORM_ONLY:
        value = config.get(key)
        if isinstance(value, Mapping) and key == "environment":
            names += [f"{key}.{field}" for field in value]
        elif value not in (None, [], {}):
            names.append(key)
    if names:
        why = "a TensorBoard runs the platform's own program in the platform's environment; leave it out"
        raise ConfigError([(name, why) for name in names])


def _default_description(task_type: str, command: Sequence[str]) -> str:
    if task_type in RUN_TO_END:
        return " ".join(command)[:200] or task_type
    return {"notebook": "JupyterLab", "tensorboard": "TensorBoard", "shell": "shell"}[task_type]


# --- TensorBoard's sources -----------------------------------------------------------------------


def tensorboard_sources(
    conn: Connection, caller: Caller, experiment_ids: Sequence[int], trial_ids: Sequence[int]
) -> tuple[list[dict[str, int]], dict[str, Any]]:
    """The trials a TensorBoard shows, each one the caller may read, and the storage they share."""
    if not experiment_ids and not trial_ids:
        raise ConfigError([("experiment_ids", "name at least one experiment or trial to show")])
    tasks = experiments.task_ids(conn, [*experiment_ids])
    sources: list[dict[str, int]] = []
    storages: dict[int, Any] = {}
    for experiment_id in experiment_ids:
        if experiment_id in tasks:
            raise ConfigError(
                [("experiment_ids", f"{experiment_id} is a {tasks[experiment_id]}, not an experiment")]
            )
        row = experiments.get_experiment(conn, experiment_id)
        check_read(caller, row, "open a TensorBoard of")
        storages[row.id] = row.config.get("checkpoint_storage")
        t = schema.trials.c
        for trial_id in conn.execute(select(t.id).where(t.experiment_id == row.id).order_by(t.id)).scalars():
            sources.append({"experiment_id": row.id, "trial_id": int(trial_id)})
    for trial_id in trial_ids:
        trial = conn.execute(select(schema.trials).where(schema.trials.c.id == trial_id)).first()
        if trial is None:
            raise NotFound(f"trial {trial_id} not found")
        row = experiments.get_experiment(conn, trial.experiment_id)
        check_read(caller, row, "open a TensorBoard of")
        storages[row.id] = row.config.get("checkpoint_storage")
        sources.append({"experiment_id": row.id, "trial_id": int(trial_id)})
    distinct = {yaml.safe_dump(s, sort_keys=True) for s in storages.values()}
    if len(distinct) > 1:
        raise ConfigError(
            [
                (
                    "experiment_ids",
                    f"experiments {', '.join(str(i) for i in sorted(storages))} keep their files in "
                    "different checkpoint storage; start one TensorBoard per storage",
                )
            ]
        )
    unique = list({(s["experiment_id"], s["trial_id"]): s for s in sources}.values())
    # Without the owners' credentials: the TensorBoard reads object stores through the master.
    return unique, object_storage.without_credentials(next(iter(storages.values())) or {})


# --- what the API answers ------------------------------------------------------------------------


def get_task(conn: Connection, task_id: int) -> Row:
    row = conn.execute(select(schema.tasks).where(schema.tasks.c.id == task_id)).first()
    if row is None:
        raise NotFound(f"task {task_id} not found")
    return row


def _trial_of(conn: Connection, task_id: int) -> Row | None:
    t = schema.trials
    return conn.execute(select(t).where(t.c.experiment_id == task_id).order_by(t.c.id).limit(1)).first()


def task_state(experiment: Row, trial: Row | None) -> str:
    """Determined's task state from the experiment's and its trial's."""
    state = ExperimentState(experiment.state)
    if state.is_terminal:
        return TERMINATED
    if state in (
        ExperimentState.STOPPING_CANCELED,
        ExperimentState.STOPPING_KILLED,
        ExperimentState.STOPPING_ERROR,
    ):
        return TERMINATING
    if trial is None:
        return QUEUED
    trial_state = TrialState(trial.state)
    if trial_state.is_terminal:
        return TERMINATED
    if trial_state in (TrialState.PULLING, TrialState.STARTING, TrialState.RUNNING):
        return trial_state.value
    if trial_state in (TrialState.STOPPING_CANCELED, TrialState.STOPPING_KILLED, TrialState.STOPPING_ERROR):
        return TERMINATING
    return QUEUED


def describe(conn: Connection, task: Row, experiment: Row | None = None) -> dict[str, Any]:
    """A task as `det task list`, the Tasks page and the other task verbs show it."""
    experiment = experiment if experiment is not None else experiments.get_experiment(conn, task.id)
    return _described(task, experiment, _trial_of(conn, task.id))


def _described(task: Row, experiment: Row, trial: Row | None) -> dict[str, Any]:
    state = task_state(experiment, trial)
    ready = _serving(task, state)
    resources = experiment.config.get("resources") or {}
    sources = (task.args or {}).get("sources") or []
    return {
        "id": task.id,
        "type": task.type,
        "description": experiment.description or "",
        "owner": experiment.owner,
        "state": state,
        "end_state": experiment.state if ExperimentState(experiment.state).is_terminal else None,
        "exit_code": task.exit_code,
        "ready": ready,
        "url": PROXY_PREFIX.format(id=task.id) + ("lab" if task.type == "notebook" else "")
        if task.type in SERVED
        else None,
        "resource_pool": experiment.resource_pool,
        "slots": int(resources.get("slots_per_trial") or 0),
        "priority": int(experiment.priority or resources.get("priority") or 42),
        "start_time": experiment.start_time.isoformat() if experiment.start_time else None,
        "end_time": experiment.end_time.isoformat() if experiment.end_time else None,
        "trial_id": trial.id if trial is not None else None,
        "host": trial.host if trial is not None else None,
        "dag_id": experiment.dag_id,
        "dag_run_id": experiment.dag_run_id,
        "command": list((task.args or {}).get("command") or []),
        "experiment_ids": sorted({int(s["experiment_id"]) for s in sources}),
        "trial_ids": [int(s["trial_id"]) for s in sources],
        "idle_timeout": parse_duration((task.config or {}).get("idle_timeout"), "idle_timeout"),
    }


def list_tasks(
    conn: Connection, caller: Caller, *, task_type: str | None = None, everyone: bool = False
) -> list[dict[str, Any]]:
    """The caller's tasks (``everyone``: every task the caller may read), oldest first."""
    from det_airflow.master.authz import readable

    t, e = schema.tasks, schema.experiments
    query = select(t, e.c.owner).join(e, e.c.id == t.c.id).order_by(t.c.id)
    if task_type is not None:
        query = query.where(t.c.type == task_type)
    if not everyone:
        query = query.where(e.c.owner == caller.name)
    rows = conn.execute(query).all()
    if not rows:
        return []
    ids = [r.id for r in rows]
    exps = {row.id: row for row in conn.execute(select(e).where(e.c.id.in_(ids))).all()}
    allowed = {row.id for row in readable(caller, list(exps.values()))}
    trials: dict[int, Row] = {}
    for trial in conn.execute(
        select(schema.trials).where(schema.trials.c.experiment_id.in_(ids)).order_by(schema.trials.c.id)
    ):
        trials.setdefault(trial.experiment_id, trial)  # a task's one trial: its first
    return [_described(row, exps[row.id], trials.get(row.id)) for row in rows if row.id in allowed]


def check_type(task_type: str | None) -> None:
    if task_type is not None and task_type not in TASK_TYPES:
        raise DetError(f"unknown task type {task_type!r}: one of {', '.join(TASK_TYPES)}")


# --- opening one through the proxy ---------------------------------------------------------------


def check_open(conn: Connection, caller: Caller, task: Row, experiment: Row) -> None:
    """Refuse unless the caller may open the task's server: a notebook or shell is code execution
    as its owner (its owner's or an admin's); a TensorBoard shows what every reader of all its
    experiments may read."""
    if task.type in ("notebook", "shell"):
        if experiment.owner != caller.name and not caller.is_admin:
            raise PermissionDenied(
                f"user '{caller.name}' may not open {task.type} {task.id}: it belongs to "
                f"'{experiment.owner}'; only its owner or an admin may"
            )
        return
    if task.type == "tensorboard":
        for experiment_id in sorted(
            {int(s["experiment_id"]) for s in (task.args or {}).get("sources") or []}
        ):
            try:
                source = experiments.get_experiment(conn, experiment_id)
            except NotFound:
                continue
            check_read(caller, source, "open a TensorBoard of")
        check_read(caller, experiment, "open")
        return
    raise NotFound(f"task {task.id} is a {task.type}: it serves no page")


def proxy_target(conn: Connection, caller: Caller, task_id: int) -> ProxyTarget:
    """Where the proxy sends the caller's request for task ``task_id``, after the access checks."""
    task = get_task(conn, task_id)
    experiment = experiments.get_experiment(conn, task_id)
    check_open(conn, caller, task, experiment)
    trial = _trial_of(conn, task_id)
    state = task_state(experiment, trial)
    if not _serving(task, state):
        why = (
            "it ended"
            if state == TERMINATED
            else f"it is {state}"
            if state != RUNNING
            else "its server is starting"
        )
        raise StateError(f"{task.type} {task_id} is not serving: {why}")
    return ProxyTarget(task.id, task.type, f"http://{_url_host(task.address)}:{task.port}", task.secret)


def _serving(task: Row, state: str) -> bool:
    """Whether the task's server said it listens, in the run that is now live (a run's end clears it)."""
    return task.port is not None and task.secret is not None and state in (PULLING, STARTING, RUNNING)


def _url_host(address: str | None) -> str:
    host = address or "127.0.0.1"
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


# --- what the task's own program asks and says (its trial's token) -------------------------------


def runtime_answer(conn: Connection, trial_id: int) -> dict[str, Any]:
    """What the program of the task that trial ``trial_id`` runs needs to know."""
    trial = conn.execute(select(schema.trials).where(schema.trials.c.id == trial_id)).first()
    if trial is None:
        raise NotFound(f"trial {trial_id} not found")
    task = conn.execute(select(schema.tasks).where(schema.tasks.c.id == trial.experiment_id)).first()
    if task is None:
        raise NotFound(f"trial {trial_id} runs no task")
    args = dict(task.args or {})
    if task.type == "tensorboard":
        experiment = experiments.get_experiment(conn, task.id)
        args["storage"] = experiment.config.get("checkpoint_storage") or {}
    return {
        "id": task.id,
        "type": task.type,
        "args": args,
        "proxy_prefix": PROXY_PREFIX.format(id=task.id),
        "bind_address": _bind_address(conn, trial),
        "idle_timeout": parse_duration((task.config or {}).get("idle_timeout"), "idle_timeout"),
        "ready_to": "runner" if _runner(conn, task.id) in RUNNER_REPORTED else "master",
    }


def _runner(conn: Connection, task_id: int) -> str:
    return runner_policy.runner_of(experiments.get_experiment(conn, task_id).config)


def _bind_address(conn: Connection, trial: Row) -> str:
    """Loopback when the task runs where the master does (one machine); else the address its host
    reports, where the master's proxy reaches it."""
    if trial.host is not None:
        row = conn.execute(select(schema.hosts.c.address).where(schema.hosts.c.id == trial.host)).first()
        if row is not None and row.address and not _is_loopback(str(row.address)):
            return str(row.address)
    return "127.0.0.1"


def _is_loopback(address: str) -> bool:
    import ipaddress

    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def mark_ready(
    conn: Connection, trial_id: int, port: int, secret: str, address: str | None, *, by_runner: bool = False
) -> None:
    """The task's server listens: the proxy may send requests to it from now on.

    ``by_runner``: the trial's runner says so (det's service token), having checked that the port
    is held by the task's own process. Without it (the task's trial token) only a pod may say so:
    a local or Docker task could otherwise name any port of its host, another user's or the
    platform's, and have the proxy send its visitors there."""
    answer = runtime_answer(conn, trial_id)
    trial = conn.execute(select(schema.trials).where(schema.trials.c.id == trial_id)).first()
    if trial is None or TrialState(trial.state).is_terminal:
        raise StateError(f"trial {trial_id} has ended")
    if answer["type"] not in SERVED:
        raise StateError(f"task {answer['id']} is a {answer['type']}: it serves no page")
    experiment = experiments.get_experiment(conn, answer["id"])
    runner = runner_policy.runner_of(experiment.config)
    if runner in RUNNER_REPORTED and not by_runner:
        raise PermissionDenied(
            f"{answer['type']} {answer['id']} runs on the {runner} runner, which reports its port once "
            "it has checked that the port is the task's own; the task's own report is refused"
        )
    where = _checked_address(address, answer["bind_address"], runner)
    conn.execute(
        schema.tasks.update()
        .where(schema.tasks.c.id == answer["id"])
        .values(address=where, port=port, secret=secret, ready_at=now())
    )


def mark_gone(conn: Connection, trial_id: int, port: int) -> None:
    """The task's server no longer holds ``port``: the proxy sends nobody there until it is reported
    ready again. A report of another port since is left as it is."""
    answer = runtime_answer(conn, trial_id)
    table = schema.tasks
    conn.execute(
        table.update()
        .where(table.c.id == answer["id"], table.c.port == port)
        .values(port=None, secret=None, ready_at=None)
    )


def _checked_address(address: str | None, bind_address: str, runner: str) -> str:
    """Where the proxy may reach the task's server. The master sends people's requests there, so
    the task (its owner's code) may not name any other place: the address the master told it to
    listen at, or for a pod (whose address only the pod knows) an address of the cluster's own
    network, never this host's loopback or a link-local one (a cloud's metadata service)."""
    import ipaddress

    if address is None or address == bind_address:
        return bind_address
    if runner == "kubernetes":
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            ip = None
        if ip is not None and not (
            ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast
        ):
            return address
    raise DetError(f"a task listens where the master told it: {bind_address}, not {address!r}")


def run_ended(conn: Connection, experiment_id: int, exit_code: int) -> None:
    """The task's process exited: its server is gone; a command keeps its exit status."""
    conn.execute(
        schema.tasks.update()
        .where(schema.tasks.c.id == experiment_id)
        .values(address=None, port=None, secret=None, ready_at=None, exit_code=exit_code)
    )


# --- starting one --------------------------------------------------------------------------------


def create_task(db: Database, caller: Caller, request: TaskRequest) -> dict[str, Any]:
    """Store a task and start it: its experiment, its DAG, its row; answers it as ``describe``."""
    from det_airflow.master import submission

    check_type(request.type)
    config = read_task_config(request.config)
    context = request.context
    if request.type != "generic" and (request.forked_from is not None or request.project_id is not None):
        field = "forked_from" if request.forked_from is not None else "project_id"
        raise ConfigError(
            [(field, f"only a generic task is forked or placed in a project, not a {request.type}")]
        )
    if request.forked_from is not None:
        with db.read() as conn:
            parent_config, parent_context = fork_source(conn, caller, request.forked_from)
        # As Determined: the fields sent replace the parent's whole; its context unless one is sent.
        config = {**parent_config, **config}
        if context is None and parent_context:
            context = base64.b64encode(parent_context).decode("ascii")
    idle = parse_duration(config.get("idle_timeout"), "idle_timeout")
    if idle is not None and request.type in RUN_TO_END:
        raise ConfigError(
            [
                (
                    "idle_timeout",
                    f"a {_named(request.type)} runs until it ends; idle_timeout is for notebooks, shells "
                    "and TensorBoards",
                )
            ]
        )
    args: dict[str, Any] = {}
    storage = None
    if request.type == "tensorboard":
        with db.read() as conn:
            sources, storage = tensorboard_sources(conn, caller, request.experiment_ids, request.trial_ids)
        args["sources"] = sources
    elif request.experiment_ids or request.trial_ids:
        raise ConfigError([("experiment_ids", f"a {request.type} shows no experiments")])
    if request.type == "tensorboard" and request.context:
        raise ConfigError(
            [("context", "a TensorBoard runs the platform's own program; send no context folder")]
        )
    if request.type in ("command", "shell"):
        args["command"] = [str(arg) for arg in request.command]
    elif request.type == "generic" and request.command:
        raise ConfigError([("command", "a generic task runs its config's entrypoint; give no command")])
    elif request.command:
        raise ConfigError([("command", f"a {request.type} runs its own program; give no command")])
    exp_config = experiment_config(request.type, config, request.command, storage)
    if request.project_id is not None:
        with db.read() as conn:
            exp_config.update(_placement(conn, caller, request.project_id))
    config_yaml = yaml.safe_dump(exp_config, sort_keys=False)

    def store_task(conn: Connection, experiment_id: int) -> None:
        conn.execute(
            schema.tasks.insert().values(id=experiment_id, type=request.type, config=config, args=args)
        )

    row, _ = submission.create_once(
        db,
        config_yaml=config_yaml,
        context=context,
        owner=caller.name,
        after_create=store_task,
        check_pool=lambda pool: check_pool(caller, pool),
    )
    with db.read() as conn:
        return describe(conn, get_task(conn, row.id))


def _named(task_type: str) -> str:
    """How a sentence names a task of ``task_type``."""
    return "generic task" if task_type == "generic" else task_type


def fork_source(conn: Connection, caller: Caller, task_id: int) -> tuple[dict[str, Any], bytes | None]:
    """The config and context tar.gz a fork of generic task ``task_id`` starts from. Only for its
    owner or an admin: both may hold secrets its readers do not see (``task_config``), and the fork
    would hand them to its own program."""
    task = get_task(conn, task_id)
    experiment = experiments.get_experiment(conn, task_id)
    check_read(caller, experiment, "fork")
    if task.type != "generic":
        raise ConfigError(
            [("forked_from", f"task {task_id} is a {task.type}: only a generic task can be forked")]
        )
    if not caller.sees_secrets_of(experiment):
        raise PermissionDenied(
            f"user '{caller.name}' may not fork task {task_id}: its config and context may hold secrets; "
            f"only its owner '{experiment.owner}' or an admin may"
        )
    return dict(task.config or {}), experiment.context


def _placement(conn: Connection, caller: Caller, project_id: int) -> dict[str, str]:
    """The ``workspace`` and ``project`` fields that place a task in project ``project_id``, once the
    caller may file into it (an archived one is refused when the task is stored, as for experiments)."""
    project = projects.get_project(conn, project_id)
    workspace = projects.get_workspace(conn, project.workspace_id)
    projects.check_placement(conn, caller, workspace.name, project.name)
    return {"workspace": workspace.name, "project": project.name}


def task_config(conn: Connection, caller: Caller, task_id: int) -> dict[str, Any]:
    """The task's config as submitted (a fork's: merged with its parent's), for whoever may read the
    task; its secrets masked for all but its owner and admins, as an experiment's config is."""
    task = get_task(conn, task_id)
    experiment = experiments.get_experiment(conn, task_id)
    check_read(caller, experiment, "read the config of")
    config = dict(task.config or {})
    return config if caller.sees_secrets_of(experiment) else serialize.masked_config(config)
