"""What the programs of a task share: the task as the master describes it, the secret the master's
proxy presents, the wait for a server to answer, the idle clock, and the program's one-line end.

A task's program runs as the one trial of a hidden experiment, with the trial environment
(``det_airflow.trial_env``); its server is reached only through the master's proxy, which adds the
secret the program chose (header ``X-Det-Task-Secret``) to every request it forwards. Where it
listens, it says as the master asks (:func:`report_ready`): to its runner, through a file of its
work folder, or to the master itself.
"""

from __future__ import annotations

import dataclasses
import hmac
import http.client
import json
import logging
import math
import os
import secrets
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from det_airflow import LOG_FORMAT, trial_env
from det_airflow.api.runtime import RuntimeClient
from det_airflow.errors import DetError
from det_airflow.tasks import READY_FILE

# How long a server may take from its start to its first answer (JupyterLab loads its extensions).
READY_SECONDS = 120.0
# The addresses a server listening everywhere is reached at from its own host.
_WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}

logger = logging.getLogger("det_airflow.tasks")


class TaskError(DetError):
    """The task's environment, or the master's description of the task, cannot be used."""


@dataclass(frozen=True)
class Task:
    """The task this program serves (``GET /runtime/trials/{id}/task``), checked once on the way in."""

    id: int
    type: str
    args: dict[str, Any]
    proxy_prefix: str
    bind_address: str
    idle_timeout: float | None
    # "runner": the port goes into the work folder's READY_FILE; "master": to the master itself.
    ready_to: str = "master"
    # The folder of det's own files in the work folder (from the trial environment), when there is one.
    files_dir: str | None = None

    @classmethod
    def from_answer(cls, answer: Any, expected_type: str) -> Task:
        if not isinstance(answer, Mapping):
            raise TaskError(f"the master's task answer is not an object: {answer!r}")
        task_id = answer.get("id")
        kind = answer.get("type")
        args = answer.get("args", {})
        prefix = answer.get("proxy_prefix")
        address = answer.get("bind_address")
        idle = answer.get("idle_timeout")
        ready_to = answer.get("ready_to", "master")
        if ready_to not in ("runner", "master"):
            raise TaskError(
                f"the master's task answer: ready_to: expected 'runner' or 'master', got {ready_to!r}"
            )
        if isinstance(task_id, bool) or not isinstance(task_id, int):
            raise TaskError(f"the master's task answer: id: expected an integer, got {task_id!r}")
        if kind != expected_type:
            raise TaskError(f"task {task_id} is a {kind!r} task, not a {expected_type!r} one")
        if not isinstance(args, Mapping):
            raise TaskError(f"the master's task answer: args: expected an object, got {args!r}")
        if not isinstance(prefix, str) or not prefix.startswith("/") or not prefix.endswith("/"):
            raise TaskError(
                f"the master's task answer: proxy_prefix: expected a path that starts and ends "
                f"with '/', got {prefix!r}"
            )
        if not isinstance(address, str) or not address:
            raise TaskError(f"the master's task answer: bind_address: expected an address, got {address!r}")
        if idle is not None and (
            isinstance(idle, bool)
            or not isinstance(idle, int | float)
            or not math.isfinite(idle)
            or idle <= 0
        ):
            raise TaskError(
                f"the master's task answer: idle_timeout: expected seconds above 0 or null, got {idle!r}"
            )
        return cls(
            id=task_id,
            type=kind,
            args=dict(args),
            proxy_prefix=prefix,
            bind_address=address,
            idle_timeout=None if idle is None else float(idle),
            ready_to=ready_to,
        )

    @property
    def local_address(self) -> str:
        """Where this host reaches the server (a wildcard bind address is reached on loopback)."""
        return _WILDCARDS.get(self.bind_address, self.bind_address)


def connect(expected_type: str) -> tuple[RuntimeClient, Task]:
    """The master's client, built from the trial environment, and the task it describes.

    The trial token is taken out of this process's environment once read: what the task starts
    (kernels, terminals, shells) runs code its user typed, and the token is the task's, not theirs.
    """
    master = os.environ.get(trial_env.MASTER)
    token = os.environ.pop(trial_env.SESSION_TOKEN, None)
    trial_id = os.environ.get(trial_env.TRIAL_ID, "")
    if not master:
        raise TaskError(f"{trial_env.MASTER} is not set: this program runs as a task of a master")
    try:
        trial = int(trial_id)
    except ValueError:
        raise TaskError(f"{trial_env.TRIAL_ID}: expected an integer, got {trial_id!r}") from None
    client = RuntimeClient(master, token, trial)
    task = Task.from_answer(client.task(), expected_type)
    if config_file := os.environ.get(trial_env.EXPERIMENT_CONFIG_FILE):
        task = dataclasses.replace(task, files_dir=os.path.dirname(config_file))
    if pod_ip := os.environ.get(trial_env.POD_IP):
        # A pod: the master reaches its server at the pod's own address, which only the pod knows.
        task = dataclasses.replace(task, bind_address=pod_ip)
    return client, task


def check_bindable(address: str) -> None:
    """TaskError when this host cannot listen at ``address``: the servers' own errors for it are
    tracebacks, or a bare reason without the address."""
    try:
        family, kind, proto, _, where = socket.getaddrinfo(
            address, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        with socket.socket(family, kind, proto) as probe:
            probe.bind(where)
    except OSError as exc:
        raise TaskError(f"cannot listen at {address}: {exc.strerror or exc}") from None


def new_secret() -> str:
    """The secret the proxy presents to this program's server (``task_ready`` takes 16-128 of
    ``[A-Za-z0-9_-]``)."""
    return secrets.token_urlsafe(32)


def secret_matches(given: str | None, secret: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), secret.encode())


def report_ready(client: RuntimeClient, task: Task, port: int, secret: str) -> None:
    """Say that the server listens at ``task.local_address`` and ``port``, and which secret the proxy
    must present: to the runner (which checks that the port is this program's own before it tells
    the master) or to the master, as the master asked."""
    if task.ready_to == "master":
        client.task_ready(port, secret, task.local_address)
        return
    if task.files_dir is None:
        raise TaskError(
            f"{trial_env.EXPERIMENT_CONFIG_FILE} is not set: the runner reads where the server listens "
            "from the trial's work folder"
        )
    write_ready_file(task.files_dir, port, secret, task.local_address)


def write_ready_file(folder: str, port: int, secret: str, address: str) -> None:
    """READY_FILE in ``folder``, readable by this user alone, written whole or not at all."""
    path = os.path.join(folder, READY_FILE)
    partial = f"{path}.{os.getpid()}.partial"
    data = json.dumps({"port": port, "secret": secret, "address": address}).encode()
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(partial, path)
    except OSError as exc:
        raise TaskError(f"cannot write {path}: {exc.strerror or exc}") from None


def wait_until_answers(host: str, port: int, path: str, headers: Mapping[str, str]) -> None:
    """Return once ``GET path`` at ``host:port`` gets any HTTP answer; TaskError after READY_SECONDS."""
    deadline = time.monotonic() + READY_SECONDS
    while True:
        connection = http.client.HTTPConnection(host, port, timeout=10)
        try:
            connection.request("GET", path, headers=dict(headers))
            connection.getresponse().read()
            return
        except OSError as exc:
            if time.monotonic() > deadline:
                raise TaskError(
                    f"the server did not answer at {host}:{port} within {READY_SECONDS:g} s: {exc}"
                ) from None
        finally:
            connection.close()
        time.sleep(0.1)


class IdleClock:
    """How long a server has gone unused: since the last request, or since the last of its open
    connections closed (never while one is open). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since = time.monotonic()
        self._open = 0

    def touch(self) -> None:
        with self._lock:
            self._since = time.monotonic()

    def opened(self) -> None:
        with self._lock:
            self._open += 1

    def closed(self) -> None:
        with self._lock:
            self._open -= 1
            self._since = time.monotonic()

    def idle_seconds(self) -> float:
        with self._lock:
            return 0.0 if self._open else time.monotonic() - self._since


def check_interval(idle_timeout: float) -> float:
    """How often to look whether a server has been idle for ``idle_timeout``: a timeout is met
    within half of itself, and at most a minute late."""
    return min(max(idle_timeout / 2, 0.2), 60.0)


class RedactSecret(logging.Filter):
    """Replaces the secret in every record a handler writes: the task's logs are for other users
    to read, and the secret opens the server to whoever holds it."""

    def __init__(self, secret: str) -> None:
        super().__init__()
        self._secret = secret

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if self._secret in message:
            record.msg, record.args = message.replace(self._secret, "[secret]"), None
        return True


def redact_from_logs(secret: str) -> None:
    """Put RedactSecret on every handler of every logger there is now."""
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    redact = RedactSecret(secret)
    for each in loggers:
        for handler in getattr(each, "handlers", ()):
            if not any(isinstance(f, RedactSecret) for f in handler.filters):
                handler.addFilter(redact)


def run(program: str, main: Callable[[], int]) -> NoReturn:
    """Run a task's ``main`` and exit with its status; an error a user can hit ends it with one
    line naming ``program``, not a traceback."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    try:
        status = main()
    except DetError as exc:
        print(f"{program}: {exc}", file=sys.stderr, flush=True)
        status = 1
    except KeyboardInterrupt:
        status = 130
    sys.stdout.flush()
    sys.exit(status)
