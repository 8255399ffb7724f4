"""A real Airflow on this machine, for the quickstart and the integration tests.

``write_config()`` writes an ``airflow.cfg`` (LocalExecutor, simple auth manager, everything on
loopback); the returned :class:`LocalAirflow` migrates the database and starts the scheduler, DAG
processor, triggerer and API server, each a background process with its own log file and pid file
in the Airflow home. Airflow is driven through its CLI (the ``airflow`` script beside this Python),
so importing this module does not import Airflow.

With the CeleryExecutor (``--executor celery``) it starts what a multi-machine deployment has, on
this machine: a PostgreSQL server of the home's own (unless ``--sql-alchemy-conn`` names one), a
Redis broker and N Celery workers, each one a det-airflow host of its own (:class:`CeleryWorker`).

From a shell::

    python -m det_airflow.localairflow init --home .airflow --dags-folder dags
    python -m det_airflow.localairflow init --home .airflow --executor celery --workers 2
    python -m det_airflow.localairflow start --home .airflow
    python -m det_airflow.localairflow status --home .airflow
    python -m det_airflow.localairflow stop --home .airflow
"""

from __future__ import annotations

import argparse
import base64
import configparser
import contextlib
import dataclasses
import json
import os
import secrets
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from det_airflow import _pgcluster
from det_airflow.errors import DetError
from det_airflow.settings import host_queue
from det_airflow.trial_process import _network

if TYPE_CHECKING:
    import httpx
    from celery import Celery

AIRFLOW_BIN = Path(sys.executable).parent / "airflow"
ADMIN_USER = "admin"
PASSWORDS_FILE = "simple_auth_manager_passwords.json"
CONFIG_FILE = "airflow.cfg"

#: Components in start order; each maps to its ``airflow`` sub-command line (the API server's
#: host and port are added at start). ``--skip-serve-logs`` keeps the log servers (ports 8793 and
#: 8794, bound to every interface) from starting: one machine reads task logs from disk.
COMPONENTS: dict[str, list[str]] = {
    "scheduler": ["scheduler", "--skip-serve-logs"],
    "dag-processor": ["dag-processor"],
    "triggerer": ["triggerer", "--skip-serve-logs"],
    "api-server": ["api-server"],
}
#: Keys of ``GET /api/v2/monitor/health`` that must be healthy, by component.
_HEALTH_KEYS = {"scheduler": "scheduler", "triggerer": "triggerer", "dag-processor": "dag_processor"}

#: Set in every child's environment (and so inherited by task processes), to find them all at stop.
_MARKER_ENV = "_DET_LOCALAIRFLOW_HOME"

STOP_GRACE_S = 20.0

#: ``--executor`` choices and the Airflow executor each one configures.
EXECUTORS = {"local": "LocalExecutor", "celery": "CeleryExecutor"}
#: airflow.cfg section where the Celery mode records what it runs, for later start/stop/status.
LAYOUT_SECTION = "det_local"
#: Celery workers when ``--workers`` is not given.
DEFAULT_WORKERS = 2
#: CPU slots each worker host offers when ``--host-slots`` is not given: small, so that a few
#: trials already spread over the hosts on a laptop.
DEFAULT_HOST_SLOTS = 2
#: Airflow's default queue (``[operators] default_queue``), which every worker also consumes.
DEFAULT_QUEUE = "default"
#: Seconds a task may stay unacknowledged in Redis before the broker hands it to another worker:
#: a trial may train for days (Airflow's default, one day, would start a second copy of it).
VISIBILITY_TIMEOUT_S = 7 * 24 * 3600
REDIS_SERVER = Path("/usr/bin/redis-server")
#: The kernel's ephemeral port range: outgoing connections take their local port from it.
EPHEMERAL_RANGE_FILE = _network.EPHEMERAL_RANGE_FILE
#: Lowest port the home's services are given: above the ports well-known servers listen on
#: (PostgreSQL's 5432, Redis's 6379, 8080 ...).
SERVICE_PORT_FLOOR = 20000


class LocalAirflowError(DetError):
    """The local Airflow could not be configured, started or reached."""


def default_parallelism() -> int:
    """Task slots for this machine: 4 per core, at most 8.

    With 32 on 2 cores SQLite locked up the scheduler, triggerer and DAG processor, and PostgreSQL
    timed out tasks; 8 ran clean on both.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(8, 4 * cores))


def sqlite_url(home: Path) -> str:
    """The SQLAlchemy URL of an SQLite database ``airflow.db`` in ``home``."""
    return f"sqlite:///{Path(home).resolve() / 'airflow.db'}"


# -- Celery mode ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class CeleryWorker:
    """One Celery worker of the local Airflow, a det-airflow host of its own: its host id, its slots,
    its queue (:func:`det_airflow.settings.host_queue`), its trial work and slot lock folders."""

    index: int
    host_slots: int

    @property
    def component(self) -> str:
        return f"celery-worker-{self.index}"

    @property
    def host_id(self) -> str:
        return f"worker-{self.index}"

    @property
    def queues(self) -> list[str]:
        return [DEFAULT_QUEUE, host_queue(self.host_id)]

    def args(self) -> list[str]:
        """The ``airflow`` sub-command line. No log server: it binds every interface, and on one
        machine the API server reads task logs from the shared log folder."""
        return [
            "celery", "worker",
            "--queues", ",".join(self.queues),
            "--celery-hostname", f"{self.host_id}@%h",
            "--skip-serve-logs",
        ]  # fmt: skip

    def env(self, home: Path) -> dict[str, str]:
        """The ``[det]`` settings of this host, for its worker process alone."""
        folder = Path(home) / "hosts" / self.host_id
        return {
            "AIRFLOW__DET__HOST_ID": self.host_id,
            "AIRFLOW__DET__HOST_SLOTS": str(self.host_slots),
            "AIRFLOW__DET__TRIAL_WORK_DIR": str(folder / "trials"),
            "AIRFLOW__DET__SLOT_LOCK_DIR": str(folder / "slot-locks"),
        }


@dataclass(frozen=True)
class CeleryLayout:
    """What the Celery mode runs besides Airflow: Redis on 127.0.0.1:``redis_port``, the workers,
    and the home's own PostgreSQL server on ``postgres_port`` (None: the database is elsewhere).

    Redis asks for ``redis_password`` (:func:`write_config` makes one when None): trials run on the
    workers' machine, and a broker any local process may use lets one take the queued tasks'
    messages (each carries a task's token and the DAG file its worker will parse as root).
    """

    redis_port: int
    workers: tuple[CeleryWorker, ...]
    postgres_port: int | None = None
    postgres_password: str | None = None
    redis_password: str | None = None

    @property
    def broker_url(self) -> str:
        login = f":{self.redis_password}@" if self.redis_password else ""
        return f"redis://{login}127.0.0.1:{self.redis_port}/0"

    def worker_concurrency(self, parallelism: int) -> int:
        """Task processes per worker: ``parallelism``, and at least twice the host's slots. Besides
        the tasks running its trials, a worker runs the trial slots that only start to defer
        (waiting for the job queue) or to move to their trial's host."""
        return max(parallelism, 2 * max(w.host_slots for w in self.workers))

    def parallelism(self, parallelism: int) -> int:
        """``[core] parallelism`` of the Celery mode: every worker's task processes. The executor
        counts a task until its worker reports the end, so a lower figure keeps a slot of one
        host waiting while another host's tasks end."""
        return self.worker_concurrency(parallelism) * len(self.workers)

    def sections(self, sql_alchemy_conn: str, parallelism: int) -> dict[str, dict[str, str]]:
        """The airflow.cfg sections of the Celery mode, the layout's own record included."""
        layout = {
            "workers": str(len(self.workers)),
            "host_slots": str(self.workers[0].host_slots),
            "redis_port": str(self.redis_port),
            "redis_password": self.redis_password or "",
        }
        if self.postgres_port is not None:
            layout["postgres_port"] = str(self.postgres_port)
            layout["postgres_password"] = self.postgres_password or ""
        return {
            "celery": {
                "broker_url": self.broker_url,
                "result_backend": f"db+{sql_alchemy_conn}",
                "celery_config_options": "det_airflow.celery_config.DET_CELERY_CONFIG",
                "worker_concurrency": str(self.worker_concurrency(parallelism)),
            },
            "celery_broker_transport_options": {"visibility_timeout": str(VISIBILITY_TIMEOUT_S)},
            LAYOUT_SECTION: layout,
        }

    @classmethod
    def read(cls, cfg: configparser.RawConfigParser) -> CeleryLayout | None:
        """The layout an airflow.cfg records; None for the LocalExecutor."""
        if (
            not cfg.has_section(LAYOUT_SECTION)
            or cfg.get("core", "executor", fallback="") != "CeleryExecutor"
        ):
            return None
        section = cfg[LAYOUT_SECTION]
        port = section.get("postgres_port")
        return cls(
            redis_port=int(section["redis_port"]),
            workers=celery_workers(int(section["workers"]), int(section["host_slots"])),
            postgres_port=int(port) if port else None,
            postgres_password=section.get("postgres_password"),
            redis_password=section.get("redis_password") or None,
        )


def celery_workers(count: int, host_slots: int = DEFAULT_HOST_SLOTS) -> tuple[CeleryWorker, ...]:
    """Workers ``worker-1`` .. ``worker-<count>``, each offering ``host_slots`` CPU slots."""
    if count < 1:
        raise LocalAirflowError(f"--workers: expected at least 1, got {count}")
    if host_slots < 1:
        raise LocalAirflowError(f"--host-slots: expected at least 1, got {host_slots}")
    return tuple(CeleryWorker(i, host_slots) for i in range(1, count + 1))


def redis_server() -> Path:
    """Debian's Redis server, which the Celery mode's broker runs on."""
    if not os.access(REDIS_SERVER, os.X_OK):
        raise LocalAirflowError(
            f"{REDIS_SERVER} not found: the Celery executor needs Redis as its broker "
            "(apt-get install redis-server)"
        )
    return REDIS_SERVER


def postgres_bindir() -> Path:
    """The PostgreSQL server binaries for the home's own database server."""
    bindir = _pgcluster.find_bindir()
    if bindir is None:
        raise LocalAirflowError(
            "PostgreSQL server binaries (initdb, pg_ctl) not found: the Celery executor needs "
            "PostgreSQL (apt-get install postgresql), or give --sql-alchemy-conn of an existing server"
        )
    return bindir


def init_celery(
    home: Path, *, workers: int, host_slots: int, sql_alchemy_conn: str | None
) -> tuple[CeleryLayout, str, list[Path]]:
    """The Celery layout for ``home``, its database URL (for :func:`write_config`) and the folders
    opened for passing through (see :func:`write_config`).

    Redis's port and the home's own PostgreSQL server (port, password, data) are kept from an
    earlier init; without ``sql_alchemy_conn`` that server is created if new and left running.
    """
    home = Path(home).resolve()
    hosts = celery_workers(workers, host_slots)
    redis_server()
    old = configparser.RawConfigParser()
    old.read(home / CONFIG_FILE)
    recorded = old[LAYOUT_SECTION] if old.has_section(LAYOUT_SECTION) else {}
    redis_port = int(recorded.get("redis_port") or service_port())
    redis_password = recorded.get("redis_password") or None  # a new one is made by write_config
    if sql_alchemy_conn:
        return CeleryLayout(redis_port, hosts, redis_password=redis_password), sql_alchemy_conn, []
    postgres_bindir()
    port = int(recorded.get("postgres_port") or service_port(exclude={redis_port}))
    password = recorded.get("postgres_password") or secrets.token_urlsafe(16)
    home.mkdir(parents=True, exist_ok=True)
    opened = _open_for_trials(home)  # the postgres user, too, must reach home/postgres
    cluster = home_postgres(home, port, password)
    prepare_postgres(cluster)
    return CeleryLayout(redis_port, hosts, port, password, redis_password), cluster.url, opened


def ephemeral_ports(range_file: Path | None = None) -> range:
    """The kernel's ephemeral port range (read from ``range_file``, by default
    :data:`EPHEMERAL_RANGE_FILE`); Linux's default where it cannot be read."""
    low, high = _network.ephemeral_range(range_file or EPHEMERAL_RANGE_FILE)
    return range(low, high + 1)


def service_port(exclude: Collection[int] = (), *, range_file: Path | None = None) -> int:
    """A port on 127.0.0.1 that is free now and lies outside the ephemeral range, for a service
    the home runs (Redis, PostgreSQL); never one of ``exclude``.

    A port of the ephemeral range (what binding port 0 hands out) may be taken at any moment by the
    local end of an outgoing connection, even by a client that reconnects to the service while it
    is down and connects to itself (a TCP self-connect); the service then cannot start on it. The
    scan begins at a random port, so that homes set up at the same time rarely pick the same one.
    Where the ephemeral range leaves no port outside it, the kernel picks one.

    Trials run as their owners' uids reach no port of this host outside the ephemeral range but the
    master's (det_airflow/trial_process/_network.py): a service here is walled off from them.
    """
    ephemeral = ephemeral_ports(range_file)
    floor = SERVICE_PORT_FLOOR if ephemeral.start > SERVICE_PORT_FLOOR else 1024
    candidates = [*range(floor, ephemeral.start), *range(max(ephemeral.stop, floor), 65536)]
    begin = secrets.randbelow(len(candidates)) if candidates else 0
    for port in candidates[begin:] + candidates[:begin]:
        if port not in exclude and _port_free(port):
            return port
    return _pgcluster.free_port()


def home_postgres(home: Path, port: int, password: str) -> _pgcluster.PgCluster:
    """The PostgreSQL cluster in ``home/postgres`` (created or not)."""
    return _pgcluster.PgCluster.at(postgres_bindir(), Path(home).resolve() / "postgres", port, password)


def prepare_postgres(cluster: _pgcluster.PgCluster) -> None:
    """Create the cluster if it is new, start it, and give it the ``airflow`` database and the
    password the layout records (set over the local socket, which trusts the ``postgres`` user)."""
    try:
        if not cluster.exists():
            cluster.create()
        if not cluster.running():
            cluster.start()
        cluster.set_password()
        cluster.ensure_database()
    except _pgcluster.PgClusterError as e:
        raise LocalAirflowError(f"the PostgreSQL server in {cluster.base}: {e}") from None


SET_ASIDE_SUBDIR = ".set-aside"  # dot folder: no parse of the DAGs folder looks inside


def set_aside_unknown_experiment_files(dags_folder: Path, sql_alchemy_conn: str) -> list[Path]:
    """Move the experiment files of the DAGs folder (``experiments/exp_<id>.yaml``) whose experiment
    this database does not hold into ``experiments/.set-aside/``; answers their new paths.

    Such files were written for another database: a home made anew, or one switched between
    SQLite and the Celery mode's PostgreSQL. Left in place, the DAG processor would run them as
    DAGs of experiments this master never created, under the ids its next `det experiment create`
    hands out. Run before Airflow starts, so no parse sees them.
    """
    from sqlalchemy import create_engine, inspect, text

    from det_airflow.dagfactory import EXPERIMENTS_SUBDIR

    folder = Path(dags_folder) / EXPERIMENTS_SUBDIR
    files = {}
    for path in folder.glob("exp_*.yaml"):
        number = path.stem.removeprefix("exp_")
        if number.isdigit():
            files[int(number)] = path
    if not files:
        return []
    engine = create_engine(sql_alchemy_conn)
    try:
        with engine.connect() as conn:
            known = (
                set(conn.execute(text("SELECT id FROM det_experiments")).scalars())
                if inspect(conn).has_table("det_experiments")
                else set()
            )
    finally:
        engine.dispose()
    target = folder / SET_ASIDE_SUBDIR
    moved = []
    for experiment_id, path in sorted(files.items()):
        if experiment_id in known:
            continue
        target.mkdir(mode=0o750, exist_ok=True)
        destination = target / path.name
        if destination.exists():
            destination = target / f"{path.stem}.{int(time.time())}{path.suffix}"
        os.replace(path, destination)
        moved.append(destination)
    return moved


def write_config(
    home: Path,
    *,
    sql_alchemy_conn: str,
    dags_folder: Path,
    port: int = 8080,
    parallelism: int | None = None,
    admin_password: str | None = None,
    extra: Mapping[str, Mapping[str, str]] | None = None,
    celery: CeleryLayout | None = None,
) -> LocalAirflow:
    """Write ``home/airflow.cfg`` and the admin's passwords file; return the :class:`LocalAirflow`.

    Rerunning keeps what must stay stable: the Fernet key, the JWT and API secrets, and the admin
    password (unless ``admin_password`` is given). ``extra`` adds or overrides sections, e.g.
    ``{"det": {"trial_work_dir": "..."}}``. ``celery`` switches to the CeleryExecutor with that layout.
    """
    home = Path(home).resolve()
    dags_folder = Path(dags_folder).resolve()
    for d in (home, home / "logs", home / "pids", dags_folder):
        d.mkdir(parents=True, exist_ok=True)
    for worker in celery.workers if celery else ():
        for d in (home / "hosts", home / "hosts" / worker.host_id):
            d.mkdir(exist_ok=True)
            d.chmod(0o711)  # trials pass through to their work folders
    # Trials run as another user: they may pass through the home to their work folders and
    # checkpoints, but not list it, and not read the logs or pid files.
    home.chmod(0o711)
    for d in (home / "logs", home / "pids"):
        d.chmod(0o700)
    opened = _open_for_trials(home)
    cfg_path = home / CONFIG_FILE
    old = configparser.RawConfigParser()
    if cfg_path.exists():
        old.read(cfg_path)

    def keep(section: str, key: str, new: str) -> str:
        return old.get(section, key, fallback=None) or new

    password = _write_password(home / PASSWORDS_FILE, admin_password)
    if celery is not None and not celery.redis_password:
        kept = old.get(LAYOUT_SECTION, "redis_password", fallback=None)
        celery = dataclasses.replace(celery, redis_password=kept or secrets.token_urlsafe(24))
    per_worker = parallelism or default_parallelism()
    parallelism = celery.parallelism(per_worker) if celery else per_worker
    url = f"http://127.0.0.1:{port}"
    sections: dict[str, dict[str, str]] = {
        "core": {
            "dags_folder": str(dags_folder),
            "executor": EXECUTORS["celery" if celery else "local"],
            "load_examples": "False",
            "parallelism": str(parallelism),
            "max_active_tasks_per_dag": str(parallelism),
            "dags_are_paused_at_creation": "False",
            "auth_manager": "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
            "simple_auth_manager_users": f"{ADMIN_USER}:admin",
            "simple_auth_manager_passwords_file": str(home / PASSWORDS_FILE),
            "fernet_key": keep("core", "fernet_key", base64.urlsafe_b64encode(os.urandom(32)).decode()),
            "execution_api_server_url": f"{url}/execution/",
            # The default (getfqdn) asks DNS, which can hang on a machine without network.
            "hostname_callable": "socket.gethostname",
            # An edited DAG file shows up within seconds instead of 30 s.
            "min_serialized_dag_update_interval": "5",
        },
        "database": {
            "sql_alchemy_conn": sql_alchemy_conn,
            # Each task starting at once holds connections of the API server's pool (the task
            # execution API): a burst of them beyond its default 15 waited 30 s and failed every
            # request meanwhile. Room for two per task slot (PostgreSQL; SQLite has no pool).
            "sql_alchemy_max_overflow": str(max(10, 2 * parallelism)),
        },
        "api": {
            "host": "127.0.0.1",
            "port": str(port),
            "base_url": url,
            "workers": "1",
            "secret_key": keep("api", "secret_key", secrets.token_urlsafe(32)),
        },
        "api_auth": {"jwt_secret": keep("api_auth", "jwt_secret", secrets.token_urlsafe(32))},
        "workers": {
            # A task's supervisor waits for its task process's events at most this long, and can
            # miss the exit of a process that closed its pipes just before: it then notices the end
            # only after this wait, holding the executor's slot meanwhile (default 5 s per task end).
            # So it also heartbeats to the API server every second rather than every 5 s.
            "min_heartbeat_interval": "1",
            # By default it kills the task after 3 failed heartbeats: an API server away for a
            # minute would kill every running trial. 36 (each failure is retried for about 7 s)
            # rides out about 5 minutes; the trials themselves retry the master for 3.
            "max_failed_heartbeats": "36",
        },
        "dag_processor": {
            # New .py files are found within 5 s (default 300), edited ones re-parsed every 2 s.
            "refresh_interval": "5",
            "min_file_process_interval": "2",
            "stale_dag_threshold": "30",
            "parsing_processes": str(min(2, per_worker)),
        },
        "scheduler": {
            "scheduler_heartbeat_sec": "2",
            "task_queued_timeout": "600",
            "enable_health_check": "False",
            "scheduler_health_check_server_host": "127.0.0.1",
        },
        "logging": {
            "base_log_folder": str(home / "logs"),
            "dag_processor_child_process_log_directory": str(home / "logs" / "dag_processor"),
        },
    }
    if celery is not None:
        sections.update(celery.sections(sql_alchemy_conn, per_worker))
    for section, values in (extra or {}).items():
        sections.setdefault(section, {}).update(values)

    cfg = configparser.RawConfigParser()
    for section, values in sections.items():
        cfg[section] = {k: v.replace("%", "%%") for k, v in values.items()}  # Airflow interpolates %
    tmp = cfg_path.with_suffix(".cfg.tmp")
    with tmp.open("w") as f:
        f.write("# Written by det_airflow.localairflow; rewritten on every init.\n")
        cfg.write(f)
    tmp.chmod(0o600)
    tmp.replace(cfg_path)
    af = LocalAirflow(
        home=home,
        port=port,
        url=url,
        admin_user=ADMIN_USER,
        admin_password=password,
        dags_folder=dags_folder,
        opened_for_trials=opened,
        celery=celery,
    )
    if celery is not None:
        af.write_redis_config()
    return af


def _open_for_trials(home: Path) -> list[Path]:
    """As root, let other users pass through (``o+x``, never ``o+r``) the folders above this Python
    and above ``home``, so trials running as an unprivileged user can start this interpreter and
    reach their work folders; answers the folders changed."""
    if os.geteuid() != 0:
        return []
    from det_airflow.trial_process import interpreter_paths

    targets = [home, *interpreter_paths()]
    folders = dict.fromkeys(
        folder for t in targets for p in (t.absolute(), t.resolve()) for folder in reversed(p.parents)
    )
    changed = []
    for folder in folders:
        mode = folder.stat().st_mode
        if not mode & stat.S_IXOTH:
            folder.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)
            changed.append(folder)
    return changed


def _write_password(path: Path, password: str | None) -> str:
    """Keep the admin password in the simple auth manager's file, reusing one already there."""
    users: dict[str, str] = {}
    if path.exists():
        with contextlib.suppress(ValueError):
            users = json.loads(path.read_text() or "{}")
    if password is None:
        password = users.get(ADMIN_USER) or secrets.token_urlsafe(12)
    if users.get(ADMIN_USER) != password:
        users[ADMIN_USER] = password
        path.write_text(json.dumps(users) + "\n")
    path.chmod(0o600)
    return password


@dataclass
class LocalAirflow:
    """An Airflow whose home is ``home``: its components run as background processes of this machine."""

    home: Path
    port: int
    url: str
    dags_folder: Path
    admin_user: str = ADMIN_USER
    admin_password: str = ""
    #: Folders ``write_config()`` opened for passing through (``o+x``) so trials can run as another user.
    opened_for_trials: list[Path] = field(default_factory=list, compare=False)
    #: The CeleryExecutor's services and workers; None for the LocalExecutor.
    celery: CeleryLayout | None = None
    _procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def load(cls, home: Path) -> LocalAirflow:
        """The local Airflow that ``write_config()`` set up in ``home``."""
        home = Path(home).resolve()
        cfg = configparser.RawConfigParser()
        if not cfg.read(home / CONFIG_FILE):
            raise LocalAirflowError(f"{home / CONFIG_FILE} does not exist: run 'init' first")
        port = cfg.getint("api", "port", fallback=8080)
        try:
            password = json.loads((home / PASSWORDS_FILE).read_text()).get(ADMIN_USER, "")
        except (OSError, ValueError):
            password = ""
        return cls(
            home=home,
            port=port,
            url=f"http://127.0.0.1:{port}",
            admin_password=password,
            dags_folder=Path(cfg.get("core", "dags_folder", fallback=str(home / "dags")).replace("%%", "%")),
            celery=CeleryLayout.read(cfg),
        )

    def components(self) -> dict[str, list[str]]:
        """Each component's command line, in start order: Redis first and the Celery workers last
        in Celery mode.

        Redis keeps its data in ``home/redis``, in an append-only file synced every second: the
        messages of queued tasks outlive a restart of the broker (a clean one, or a crash of the
        process), where they would otherwise wait out Airflow's ``task_queued_timeout``.
        """
        airflow = str(AIRFLOW_BIN)
        commands = {c: [airflow, *args] for c, args in COMPONENTS.items()}
        commands["api-server"] += ["--host", "127.0.0.1", "--port", str(self.port)]
        if self.celery is None:
            return commands
        redis = [
            str(REDIS_SERVER), str(self.redis_config_file),
            "--bind", "127.0.0.1", "--port", str(self.celery.redis_port),
            "--save", "", "--appendonly", "yes", "--appendfsync", "everysec",
            "--dir", str(self.home / "redis"),
        ]  # fmt: skip
        workers = {w.component: [airflow, *w.args()] for w in self.celery.workers}
        return {"redis": redis, **commands, **workers}

    @property
    def redis_config_file(self) -> Path:
        """Redis's configuration file: its password (a command line is open to every local user)."""
        return self.home / "redis" / "redis.conf"

    def write_redis_config(self) -> None:
        """The file :attr:`redis_config_file`, readable by this user alone, in a folder that is too."""
        assert self.celery is not None and self.celery.redis_password
        folder = self.redis_config_file.parent
        folder.mkdir(mode=0o700, exist_ok=True)
        folder.chmod(0o700)
        tmp = self.redis_config_file.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), 0o600)
            f.write(f"# Written by det_airflow.localairflow.\nrequirepass {self.celery.redis_password}\n")
        tmp.replace(self.redis_config_file)

    def postgres(self) -> _pgcluster.PgCluster | None:
        """The home's own PostgreSQL server (Celery mode without ``--sql-alchemy-conn``), else None."""
        if self.celery is None or self.celery.postgres_port is None:
            return None
        return home_postgres(self.home, self.celery.postgres_port, self.celery.postgres_password or "")

    @property
    def log_dir(self) -> Path:
        return self.home / "logs"

    def log_file(self, component: str) -> Path:
        return self.log_dir / f"{component}.log"

    def env(self, component: str | None = None) -> dict[str, str]:
        """Environment for the ``airflow`` processes (for ``component``'s process, when given).

        ``AIRFLOW__*`` variables of the caller are dropped so that ``airflow.cfg`` is the whole
        configuration, but for a Celery worker's ``[det]`` host settings; loopback addresses never
        go through a proxy.
        """
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__") and k != "AIRFLOW_CONFIG"}
        no_proxy = ",".join(
            x for x in (env.get("NO_PROXY") or env.get("no_proxy"), "127.0.0.1,localhost,::1") if x
        )
        env.update(
            AIRFLOW_HOME=str(self.home),
            NO_PROXY=no_proxy,
            no_proxy=no_proxy,
            PATH=f"{AIRFLOW_BIN.parent}{os.pathsep}{env.get('PATH', '')}",
            PYTHONUNBUFFERED="1",
            SCARF_ANALYTICS="false",
            DO_NOT_TRACK="1",
        )
        env[_MARKER_ENV] = str(self.home)
        for worker in self.celery.workers if self.celery else ():
            if worker.component == component:
                env.update(worker.env(self.home))
        return env

    def airflow(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """Run ``airflow <args>`` against this home and return its result (output captured)."""
        return subprocess.run(
            [str(AIRFLOW_BIN), *args],
            env=self.env(),
            cwd=self.home,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def migrate(self) -> None:
        """Create or upgrade the metadata database (``airflow db migrate``)."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        result = self.airflow("db", "migrate")
        self.log_file("migrate").write_text(result.stdout + result.stderr)
        if result.returncode != 0:
            raise LocalAirflowError(
                f"'airflow db migrate' failed (exit {result.returncode}):\n{_tail(self.log_file('migrate'))}"
            )
        database = self.home / "airflow.db"
        if database.exists():  # SQLite: the metadata, connections included, is for Airflow alone
            database.chmod(0o600)

    # -- processes -----------------------------------------------------------------------------

    def _pid_file(self, component: str) -> Path:
        return self.home / "pids" / f"{component}.pid"

    def _running(self, component: str) -> _PidRecord | None:
        """The component's pid record if that process is alive (and is the one we started)."""
        record = _PidRecord.read(self._pid_file(component))
        return record if record is not None and record.leader_alive() else None

    def status(self) -> dict[str, int | None]:
        """Pid of each component (and of the home's own PostgreSQL server), or None where it is not running."""
        pids: dict[str, int | None] = {}
        if (cluster := self.postgres()) is not None:
            pids["postgres"] = _postmaster_pid(cluster.data)
        pids.update({c: (r.pid if (r := self._running(c)) else None) for c in self.components()})
        return pids

    def start(self) -> None:
        """Start the components that are not running yet (idempotent)."""
        (self.home / "pids").mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        if not (self.home / CONFIG_FILE).exists():
            raise LocalAirflowError(f"{self.home / CONFIG_FILE} does not exist: write the config first")
        commands = self.components()
        to_start = [c for c in commands if not self._running(c)]
        if "api-server" in to_start and _port_in_use(self.port):
            raise LocalAirflowError(
                f"port {self.port} on 127.0.0.1 is taken by another program; stop it or choose another port"
            )
        if self.celery is not None:
            self._prepare_celery(to_start)
        for component in to_start:
            command = commands[component]
            with self.log_file(component).open("ab") as log:
                shown = " ".join([Path(command[0]).name, *command[1:]])
                log.write(f"\n==== {datetime.now().isoformat()} {shown}\n".encode())
                log.flush()
                proc = subprocess.Popen(
                    command,
                    env=self.env(component),
                    cwd=self.home,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            self._procs[component] = proc
            _PidRecord(proc.pid, _start_ticks(proc.pid), time.time()).write(self._pid_file(component))

    def _prepare_celery(self, to_start: list[str]) -> None:
        """Before the Celery mode's components start: the Redis binary and port, and the home's own
        PostgreSQL server running."""
        assert self.celery is not None
        redis_server()
        if "redis" in to_start and _port_in_use(self.celery.redis_port):
            raise LocalAirflowError(
                f"port {self.celery.redis_port} on 127.0.0.1 (Redis) is taken by another program; "
                "stop it, or run 'init' again after removing [det_local] redis_port from airflow.cfg"
            )
        self.write_redis_config()
        if (cluster := self.postgres()) is not None and not cluster.running():
            try:
                cluster.start()
            except _pgcluster.PgClusterError as e:
                raise LocalAirflowError(
                    f"the PostgreSQL server in {cluster.base} did not start: {e}"
                ) from None

    def wait_ready(self, timeout: float = 180.0) -> None:
        """Wait until the API server answers and reports scheduler, triggerer and DAG processor
        healthy; in Celery mode also until Redis answers and every worker answers a ping.

        A component counts once it has heart-beaten since it was started, so an old heartbeat left
        by a previous run does not count. Raises :class:`LocalAirflowError` with the tail of the
        failing component's log when one dies or the time runs out.
        """
        deadline = time.monotonic() + timeout
        celery_app = _celery_app(self.celery.broker_url) if self.celery is not None else None
        try:
            while problems := self._not_ready(celery_app):
                if time.monotonic() > deadline:
                    details = "\n".join(
                        f"--- {c}: {why}; log {self.log_file(c)}:\n{_tail(self.log_file(c))}"
                        for c, why in problems.items()
                    )
                    raise LocalAirflowError(
                        f"Airflow at {self.url} is not ready after {timeout:.0f} s:\n{details}"
                    )
                time.sleep(1)
        finally:
            if celery_app is not None:
                celery_app.close()

    def _not_ready(self, celery_app: Celery | None) -> dict[str, str]:
        """What is not ready yet, by component; raises when a component is not running at all."""
        import httpx

        started_at: dict[str, float] = {}
        for component in self.components():
            record = _PidRecord.read(self._pid_file(component))
            if record is None or not record.leader_alive():
                label = component if component == "redis" else f"airflow {component}"
                raise LocalAirflowError(
                    f"{label} is not running (log {self.log_file(component)}):\n"
                    f"{_tail(self.log_file(component))}"
                )
            started_at[component] = record.started_at
        problems: dict[str, str] = {}
        try:
            health = httpx.get(f"{self.url}/api/v2/monitor/health", timeout=5).json()
        except (httpx.HTTPError, ValueError) as e:
            problems["api-server"] = f"{self.url} does not answer ({e.__class__.__name__})"
        else:
            for component, key in _HEALTH_KEYS.items():
                info = health.get(key) or {}
                beat = info.get(f"latest_{key}_heartbeat")
                if info.get("status") != "healthy" or not beat or _epoch(beat) < started_at[component] - 2:
                    problems[component] = f"status {info.get('status')}, last heartbeat {beat}"
        if self.celery is not None and celery_app is not None:
            problems.update(self._celery_not_ready(self.celery, celery_app))
        return problems

    def _celery_not_ready(self, celery: CeleryLayout, app: Celery) -> dict[str, str]:
        """Redis answers PING; each worker answers Celery's ping through the broker."""
        if not _redis_ping(celery.redis_port, celery.redis_password):
            return {"redis": f"127.0.0.1:{celery.redis_port} does not answer PING"}
        answered = {name.partition("@")[0] for reply in _celery_ping(app) for name in reply}
        return {
            w.component: f"{w.host_id} does not answer Celery's ping yet"
            for w in celery.workers
            if w.host_id not in answered
        }

    def stop(self, grace: float = STOP_GRACE_S) -> None:
        """Stop every component and every process they started (tasks included); remove pid files.

        SIGTERM to each component's process group first; what is left after ``grace`` seconds
        (including task processes in groups of their own) gets SIGKILL. In Celery mode the workers
        go first (while the broker and the master still answer their goodbyes), the home's own
        PostgreSQL server last.
        """
        if self.celery is not None:
            self._stop_workers(self.celery, grace)
        for pid in self._sessions():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGTERM)
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            deadline = time.monotonic() + wait
            while (left := self.processes()) and time.monotonic() < deadline:
                self._reap()
                time.sleep(0.2)
            if not left:
                break
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
        self._reap()
        for component in self.components():
            self._pid_file(component).unlink(missing_ok=True)
        self._procs.clear()
        if (cluster := self.postgres()) is not None and cluster.exists() and cluster.running():
            cluster.stop()

    def _stop_workers(self, celery: CeleryLayout, grace: float) -> None:
        """SIGTERM to the Celery workers (a warm shutdown: they take no new task) and wait up to
        ``grace`` seconds for them to exit; :meth:`stop` kills what is left."""
        records = [r for w in celery.workers if (r := self._running(w.component))]
        for record in records:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(record.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while any(r.leader_alive() for r in records) and time.monotonic() < deadline:
            self._reap()
            time.sleep(0.2)

    def _reap(self) -> None:
        for proc in self._procs.values():
            proc.poll()

    def _sessions(self) -> list[int]:
        """Session ids (= process group ids = leader pids) of the components started from this home."""
        return [
            r.pid for c in self.components() if (r := _PidRecord.read(self._pid_file(c))) and r.owns_session()
        ]

    def processes(self) -> list[int]:
        """Pids of the live processes of this Airflow: components, their workers, task processes.

        Components run in sessions of their own, which their children keep; children that leave
        the session (tasks starting ``start_new_session`` subprocesses) still carry our marker in
        their environment. Neither test alone suffices: the API server and the executor's workers
        rename themselves with ``setproctitle``, which overwrites their environment block.
        """
        sessions = self._sessions()
        marker = f"{_MARKER_ENV}={self.home}".encode()
        me = os.getpid()
        found = []
        for pid in _pids():
            fields = _stat_fields(pid)
            if pid == me or fields is None or fields[0] == "Z":
                continue
            if int(fields[3]) in sessions:  # field 6 of /proc/PID/stat: session id
                found.append(pid)
                continue
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes()
            except OSError:
                continue
            if marker in environ.split(b"\0"):
                found.append(pid)
        return found

    # -- REST API ------------------------------------------------------------------------------

    def token(self) -> str:
        """A JWT for the admin user (``POST /auth/token``)."""
        import httpx

        body = {"username": self.admin_user, "password": self.admin_password}
        try:
            r = httpx.post(f"{self.url}/auth/token", json=body, timeout=30)
        except httpx.HTTPError as e:
            raise LocalAirflowError(f"{self.url} does not answer: {e}") from e
        if r.status_code != 201:
            raise LocalAirflowError(f"login as {self.admin_user} failed: HTTP {r.status_code} {r.text[:300]}")
        return str(r.json()["access_token"])

    def client(self, timeout: float = 30.0) -> httpx.Client:
        """An ``httpx.Client`` on the API server, logged in as the admin."""
        import httpx

        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {self.token()}"}, timeout=timeout
        )

    def log_tails(self, lines: int = 40) -> str:
        """The last lines of every component's log, for failure reports."""
        return "\n".join(
            f"--- {self.log_file(c)}:\n{_tail(self.log_file(c), lines)}" for c in self.components()
        )


# -- process bookkeeping ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _PidRecord:
    """What a pid file holds: the pid, its kernel start time (to tell a reused pid), wall-clock start."""

    pid: int
    ticks: int | None
    started_at: float

    @classmethod
    def read(cls, path: Path) -> _PidRecord | None:
        try:
            fields = path.read_text().split()
            return cls(int(fields[0]), int(fields[1]) if fields[1] != "-" else None, float(fields[2]))
        except (OSError, ValueError, IndexError):
            return None

    def write(self, path: Path) -> None:
        path.write_text(f"{self.pid} {self.ticks if self.ticks is not None else '-'} {self.started_at}\n")

    def owns_session(self) -> bool:
        """The session (and process group) numbered ``pid`` is still ours.

        Linux does not hand out a pid while a session or group of that number exists, so a session
        whose leader has gone is still ours; a live process with another start time is not.
        """
        return _proc_state(self.pid) is None or _start_ticks(self.pid) == self.ticks

    def leader_alive(self) -> bool:
        """The recorded process runs (not a zombie) and is the same process, not a reused pid."""
        return _proc_state(self.pid) not in (None, "Z") and _start_ticks(self.pid) == self.ticks


def _stat_fields(pid: int) -> list[str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses; fields after it are plain.
    return stat[stat.rindex(")") + 2 :].split()


def _proc_state(pid: int) -> str | None:
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def _start_ticks(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def _pids() -> Iterator[int]:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            yield int(entry)


def _postmaster_pid(data: Path) -> int | None:
    """The pid of the PostgreSQL server of ``data`` if it runs (the first line of postmaster.pid)."""
    try:
        pid = int((data / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None
    return pid if _proc_state(pid) not in (None, "Z") else None


def _redis_ping(port: int, password: str | None) -> bool:
    """Redis on 127.0.0.1:``port`` answers PING (after AUTH with ``password``)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            if password:
                s.sendall(f"AUTH {password}\r\n".encode())
                if not s.recv(64).startswith(b"+OK"):
                    return False
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def _celery_app(broker_url: str) -> Celery:
    """A Celery app on the broker, only to ping the workers: it gives up at once when the broker
    does not answer instead of retrying."""
    from celery import Celery

    return Celery(broker=broker_url, broker_connection_retry=False, broker_connection_timeout=2)


def _celery_ping(app: Celery) -> list[dict[str, object]]:
    """The workers' answers to a ping, ``[{"worker-1@host": {"ok": "pong"}}, ...]``; none when the
    broker does not answer."""
    try:
        return list(app.control.ping(timeout=1.0) or [])
    except Exception:  # the broker away or restarting: no worker answered
        return []


def _port_free(port: int) -> bool:
    """Nothing holds ``port`` on 127.0.0.1 (a listener on every interface included): it binds."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def _tail(path: Path, lines: int = 40) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


# -- command line ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m det_airflow.localairflow", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--home", type=Path, default=Path(".airflow"), help="Airflow home (default .airflow)")
    sub = parser.add_subparsers(dest="command", required=True)
    init = sub.add_parser("init", help="write airflow.cfg and migrate the database")
    init.add_argument("--dags-folder", type=Path, default=Path("dags"))
    init.add_argument("--port", type=int, default=8080)
    init.add_argument("--sql-alchemy-conn", help="database URL (default: SQLite in the home)")
    init.add_argument("--parallelism", type=int)
    init.add_argument(
        "--executor",
        choices=sorted(EXECUTORS),
        default="local",
        help="local: LocalExecutor on SQLite (default); celery: CeleryExecutor with PostgreSQL, Redis and workers",
    )
    init.add_argument(
        "--workers",
        type=int,
        default=DEFAULT_WORKERS,
        help=f"Celery workers, each a det-airflow host of its own (celery only, default {DEFAULT_WORKERS})",
    )
    init.add_argument(
        "--host-slots",
        type=int,
        default=DEFAULT_HOST_SLOTS,
        help=f"CPU slots each worker host offers (celery only, default {DEFAULT_HOST_SLOTS})",
    )
    init.add_argument("--admin-password")
    init.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="an extra airflow.cfg setting, e.g. det.trial_work_dir=/tmp/trials (repeatable)",
    )
    start = sub.add_parser("start", help="start the components and wait until they are healthy")
    start.add_argument("--timeout", type=float, default=180.0)
    start.add_argument("--no-wait", action="store_true")
    sub.add_parser("stop", help="stop everything started from this home")
    sub.add_parser("status", help="show the components, the address and the login")
    args = parser.parse_args(argv)
    home: Path = args.home.resolve()

    try:
        if args.command == "init":
            extra: dict[str, dict[str, str]] = {}
            for setting in args.set:
                name, eq, value = setting.partition("=")
                section, dot, key = name.partition(".")
                if not (eq and dot and section and key):
                    raise LocalAirflowError(f"--set {setting!r}: expected SECTION.KEY=VALUE")
                extra.setdefault(section, {})[key] = value
            celery: CeleryLayout | None = None
            opened: list[Path] = []
            sql_alchemy_conn = args.sql_alchemy_conn or sqlite_url(home)
            if args.executor == "celery":
                celery, sql_alchemy_conn, opened = init_celery(
                    home,
                    workers=args.workers,
                    host_slots=args.host_slots,
                    sql_alchemy_conn=args.sql_alchemy_conn,
                )
            af = write_config(
                home,
                sql_alchemy_conn=sql_alchemy_conn,
                dags_folder=args.dags_folder,
                port=args.port,
                parallelism=args.parallelism,
                admin_password=args.admin_password,
                extra=extra,
                celery=celery,
            )
            af.migrate()
            for path in set_aside_unknown_experiment_files(af.dags_folder, sql_alchemy_conn):
                print(f"Set aside {path.name} into {path.parent}: an experiment of another database")
            for folder in [*opened, *af.opened_for_trials]:
                print(
                    f"Let other users pass through {folder} (chmod o+x, no listing): trials run as an unprivileged user"
                )
            print(f"Airflow home {home} ready (database migrated)")
        elif args.command == "start":
            af = LocalAirflow.load(home)
            af.start()
            if not args.no_wait:
                af.wait_ready(args.timeout)
            print(f"Airflow is up at {af.url} (user {af.admin_user}, password {af.admin_password})")
        elif args.command == "stop":
            af = LocalAirflow.load(home)
            af.stop()
            print("Airflow stopped")
        else:
            af = LocalAirflow.load(home)
            status = af.status()
            width = max(14, *(len(c) + 1 for c in status))
            for component, pid in status.items():
                print(f"{component:{width}} {'running, pid ' + str(pid) if pid else 'stopped'}")
            for label, value in (("url", af.url), ("user", af.admin_user), ("password", af.admin_password)):
                print(f"{label:{width}} {value}")
    except LocalAirflowError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = [
    "CeleryLayout",
    "CeleryWorker",
    "LocalAirflow",
    "LocalAirflowError",
    "celery_workers",
    "default_parallelism",
    "ephemeral_ports",
    "init_celery",
    "service_port",
    "sqlite_url",
    "write_config",
]
