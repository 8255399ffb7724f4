"""A real Airflow on this machine, for the quickstart and the integration tests.

``write_config()`` writes an ``airflow.cfg`` (LocalExecutor, simple auth manager, everything on
loopback); the returned :class:`LocalAirflow` migrates the database and starts the scheduler, DAG
processor, triggerer and API server, each a background process with its own log file and pid file
in the Airflow home. Airflow is driven through its CLI (the ``airflow`` script beside this Python),
so importing this module does not import Airflow.

From a shell::

    python -m det_airflow.localairflow init --home .airflow --dags-folder dags
    python -m det_airflow.localairflow start --home .airflow
    python -m det_airflow.localairflow status --home .airflow
    python -m det_airflow.localairflow stop --home .airflow
"""

from __future__ import annotations

import argparse
import base64
import configparser
import contextlib
import json
import os
import secrets
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from det_airflow.errors import DetError

if TYPE_CHECKING:
    import httpx

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


def write_config(
    home: Path,
    *,
    sql_alchemy_conn: str,
    dags_folder: Path,
    port: int = 8080,
    parallelism: int | None = None,
    admin_password: str | None = None,
    extra: Mapping[str, Mapping[str, str]] | None = None,
) -> LocalAirflow:
    """Write ``home/airflow.cfg`` and the admin's passwords file; return the :class:`LocalAirflow`.

    Rerunning keeps what must stay stable: the Fernet key, the JWT and API secrets, and the admin
    password (unless ``admin_password`` is given). ``extra`` adds or overrides sections, e.g.
    ``{"det": {"trial_work_dir": "..."}}``.
    """
    home = Path(home).resolve()
    dags_folder = Path(dags_folder).resolve()
    for d in (home, home / "logs", home / "pids", dags_folder):
        d.mkdir(parents=True, exist_ok=True)
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
    parallelism = parallelism or default_parallelism()
    url = f"http://127.0.0.1:{port}"
    sections: dict[str, dict[str, str]] = {
        "core": {
            "dags_folder": str(dags_folder),
            "executor": "LocalExecutor",
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
        "database": {"sql_alchemy_conn": sql_alchemy_conn},
        "api": {
            "host": "127.0.0.1",
            "port": str(port),
            "base_url": url,
            "workers": "1",
            "secret_key": keep("api", "secret_key", secrets.token_urlsafe(32)),
        },
        "api_auth": {"jwt_secret": keep("api_auth", "jwt_secret", secrets.token_urlsafe(32))},
        # A task's supervisor heartbeats to the API server every 5 s and by default kills the task
        # after 3 failures (about 40 s): an API server away for a minute would kill every running
        # trial. 24 rides out about 5 minutes; the trials themselves retry the master for 3.
        "workers": {"max_failed_heartbeats": "24"},
        "dag_processor": {
            # New .py files are found within 5 s (default 300), edited ones re-parsed every 2 s.
            "refresh_interval": "5",
            "min_file_process_interval": "2",
            "stale_dag_threshold": "30",
            "parsing_processes": str(min(2, parallelism)),
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
    return LocalAirflow(
        home=home,
        port=port,
        url=url,
        admin_user=ADMIN_USER,
        admin_password=password,
        dags_folder=dags_folder,
        opened_for_trials=opened,
    )


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
        )

    @property
    def log_dir(self) -> Path:
        return self.home / "logs"

    def log_file(self, component: str) -> Path:
        return self.log_dir / f"{component}.log"

    def env(self) -> dict[str, str]:
        """Environment for the ``airflow`` processes.

        ``AIRFLOW__*`` variables of the caller are dropped so that ``airflow.cfg`` is the whole
        configuration; loopback addresses never go through a proxy.
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
        """Pid of each component, or None where it is not running."""
        return {c: (r.pid if (r := self._running(c)) else None) for c in COMPONENTS}

    def start(self) -> None:
        """Start the components that are not running yet (idempotent)."""
        (self.home / "pids").mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        if not (self.home / CONFIG_FILE).exists():
            raise LocalAirflowError(f"{self.home / CONFIG_FILE} does not exist: write the config first")
        to_start = [c for c in COMPONENTS if not self._running(c)]
        if "api-server" in to_start and _port_in_use(self.port):
            raise LocalAirflowError(
                f"port {self.port} on 127.0.0.1 is taken by another program; stop it or choose another port"
            )
        for component in to_start:
            args = COMPONENTS[component]
            if component == "api-server":
                args = [*args, "--host", "127.0.0.1", "--port", str(self.port)]
            with self.log_file(component).open("ab") as log:
                log.write(f"\n==== {datetime.now().isoformat()} airflow {' '.join(args)}\n".encode())
                log.flush()
                proc = subprocess.Popen(
                    [str(AIRFLOW_BIN), *args],
                    env=self.env(),
                    cwd=self.home,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            self._procs[component] = proc
            _PidRecord(proc.pid, _start_ticks(proc.pid), time.time()).write(self._pid_file(component))

    def wait_ready(self, timeout: float = 180.0) -> None:
        """Wait until the API server answers and reports scheduler, triggerer and DAG processor healthy.

        A component counts once it has heart-beaten since it was started, so an old heartbeat left
        by a previous run does not count. Raises :class:`LocalAirflowError` with the tail of the
        failing component's log when one dies or the time runs out.
        """
        import httpx

        deadline = time.monotonic() + timeout
        while True:
            started_at: dict[str, float] = {}
            for component in COMPONENTS:
                record = _PidRecord.read(self._pid_file(component))
                if record is None or not record.leader_alive():
                    raise LocalAirflowError(
                        f"airflow {component} is not running (log {self.log_file(component)}):\n"
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
                    if (
                        info.get("status") != "healthy"
                        or not beat
                        or _epoch(beat) < started_at[component] - 2
                    ):
                        problems[component] = f"status {info.get('status')}, last heartbeat {beat}"
            if not problems:
                return
            if time.monotonic() > deadline:
                details = "\n".join(
                    f"--- {c}: {why}; log {self.log_file(c)}:\n{_tail(self.log_file(c))}"
                    for c, why in problems.items()
                )
                raise LocalAirflowError(
                    f"Airflow at {self.url} is not ready after {timeout:.0f} s:\n{details}"
                )
            time.sleep(1)

    def stop(self, grace: float = STOP_GRACE_S) -> None:
        """Stop every component and every process they started (tasks included); remove pid files.

        SIGTERM to each component's process group first; what is left after ``grace`` seconds
        (including task processes in groups of their own) gets SIGKILL.
        """
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
        for component in COMPONENTS:
            self._pid_file(component).unlink(missing_ok=True)
        self._procs.clear()

    def _reap(self) -> None:
        for proc in self._procs.values():
            proc.poll()

    def _sessions(self) -> list[int]:
        """Session ids (= process group ids = leader pids) of the components started from this home."""
        return [r.pid for c in COMPONENTS if (r := _PidRecord.read(self._pid_file(c))) and r.owns_session()]

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
        return "\n".join(f"--- {self.log_file(c)}:\n{_tail(self.log_file(c), lines)}" for c in COMPONENTS)


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
            af = write_config(
                home,
                sql_alchemy_conn=args.sql_alchemy_conn or sqlite_url(home),
                dags_folder=args.dags_folder,
                port=args.port,
                parallelism=args.parallelism,
                admin_password=args.admin_password,
                extra=extra,
            )
            af.migrate()
            for folder in af.opened_for_trials:
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
            for component, pid in af.status().items():
                print(f"{component:14} {'running, pid ' + str(pid) if pid else 'stopped'}")
            print(
                f"url            {af.url}\nuser           {af.admin_user}\npassword       {af.admin_password}"
            )
    except LocalAirflowError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["LocalAirflow", "LocalAirflowError", "default_parallelism", "sqlite_url", "write_config"]
