"""A TensorBoard task: the event files of some trials, served under the task's proxy prefix.
``python3 -m det_airflow.tasks.tensorboard``.

The task's ``args`` name the trials (``sources``: ``[{"experiment_id", "trial_id"}, ...]``) and the
storage their experiments keep files in (``storage``: a ``checkpoint_storage`` section). Each trial
is one folder ``exp<e>/trial<t>`` of a temporary log folder: a link to the trial's own folder on a
``shared_fs`` storage, else a copy fetched from the object store, fetched again every
``FETCH_SECONDS`` for what the trial wrote since.

TensorBoard runs in this process (``tensorboard.program``) and has no authentication of its own:
every request without the proxy's ``X-Det-Task-Secret`` header gets 403. With an idle timeout, no
request for that long stops it, and the program exits 0.
"""

from __future__ import annotations

import logging
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from det_airflow.core._tensorboard import fetch_tensorboard, local_tensorboard_dir
from det_airflow.errors import DetError
from det_airflow.tasks import SECRET_HEADER
from det_airflow.tasks._server import (
    IdleClock,
    Task,
    TaskError,
    check_bindable,
    check_interval,
    connect,
    logger,
    new_secret,
    report_ready,
    run,
    secret_matches,
    wait_until_answers,
)

FETCH_SECONDS = 10.0
# How often TensorBoard reads the log folder again for new events.
RELOAD_SECONDS = 5
# The header as a WSGI environ key.
_SECRET_KEY = "HTTP_" + SECRET_HEADER.upper().replace("-", "_")

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


@dataclass(frozen=True)
class Source:
    """One trial whose files are shown, and the folder they appear in."""

    experiment_id: int
    trial_id: int

    @property
    def run_name(self) -> str:
        return f"exp{self.experiment_id}/trial{self.trial_id}"


def sources_of(task: Task) -> tuple[list[Source], dict[str, Any]]:
    """The trials and the storage ``task.args`` names."""
    sources, storage = task.args.get("sources"), task.args.get("storage")
    if not isinstance(sources, list) or not sources:
        raise TaskError(f"the master's task answer: args.sources: expected a list of trials, got {sources!r}")
    found = []
    for i, source in enumerate(sources):
        given = source if isinstance(source, Mapping) else {}
        experiment_id, trial_id = given.get("experiment_id"), given.get("trial_id")
        if not (_is_int(experiment_id) and _is_int(trial_id)):
            raise TaskError(
                f"the master's task answer: args.sources[{i}]: expected "
                f'{{"experiment_id": <int>, "trial_id": <int>}}, got {source!r}'
            )
        found.append(Source(experiment_id, trial_id))
    found = list(dict.fromkeys(found))  # a trial named twice is shown once
    if not isinstance(storage, Mapping):
        raise TaskError(
            f"the master's task answer: args.storage: expected a storage section, got {storage!r}"
        )
    return found, dict(storage)


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


class LogFolder:
    """The log folder TensorBoard reads: one entry per trial, linked or fetched."""

    def __init__(
        self, root: Path, sources: list[Source], storage: dict[str, Any], client: Any = None
    ) -> None:
        """``client``: the task's StorageClient, through which object stores are read (the task
        holds no store credentials)."""
        self.root = root
        self._storage = storage
        self._client = client
        self._fetched: list[tuple[Source, Path]] = []
        for source in sources:
            entry = root / source.run_name
            entry.parent.mkdir(parents=True, exist_ok=True)
            folder = local_tensorboard_dir(storage, source.experiment_id, source.trial_id)
            if folder is not None:
                entry.symlink_to(folder, target_is_directory=True)
            else:
                entry.mkdir()
                self._fetched.append((source, entry))
        self._failing: set[Source] = set()

    def fetch(self) -> None:
        """Copy what the object store has new for each fetched trial; a failure is one warning until
        that trial's fetch works again."""
        for source, entry in self._fetched:
            try:
                fetch_tensorboard(
                    self._storage, source.experiment_id, source.trial_id, entry, client=self._client
                )
            except (DetError, OSError) as exc:  # the store, or this host's own disk
                if source not in self._failing:
                    self._failing.add(source)
                    logger.warning("cannot fetch the TensorBoard files of %s: %s", source.run_name, exc)
            else:
                self._failing.discard(source)

    @property
    def fetches(self) -> bool:
        return bool(self._fetched)


class RequireSecret:
    """WSGI middleware: 403 for a request without the proxy's secret; each admitted request counts
    as activity on ``clock``."""

    def __init__(self, app: WSGIApp, secret: str, clock: IdleClock) -> None:
        self._app, self._secret, self._clock = app, secret, clock

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if not secret_matches(environ.get(_SECRET_KEY), self._secret):
            body = f"missing or wrong {SECRET_HEADER} header\n".encode()
            start_response(
                "403 Forbidden", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))]
            )
            return [body]
        self._clock.touch()
        return self._app(environ, start_response)


def tensorboard_arguments(task: Task, logdir: Path) -> list[str]:
    return [
        "",
        f"--logdir={logdir}",
        f"--path_prefix={task.proxy_prefix.rstrip('/')}",
        f"--host={task.bind_address}",
        "--port=0",
        f"--reload_interval={RELOAD_SECONDS}",
        # The Python reader: it follows the links to shared_fs folders.
        "--load_fast=false",
    ]


def main() -> int:
    client, task = connect("tensorboard")
    sources, storage = sources_of(task)
    check_bindable(task.bind_address)
    secret = new_secret()
    clock = IdleClock()

    from tensorboard import program

    # Its reader logs each pass over the log folder (every RELOAD_SECONDS) at INFO.
    logging.getLogger("tensorboard").setLevel(logging.WARNING)
    servers: list[Any] = []

    def secured_server(app: WSGIApp, flags: Any) -> Any:
        server = program.WerkzeugServer(RequireSecret(app, secret, clock), flags)
        # TensorBoard turns Werkzeug's request lines on; one per request is noise in the task's logs.
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        servers.append(server)
        return server

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    root = Path(tempfile.mkdtemp(prefix="det-tensorboard-"))
    try:
        folder = LogFolder(root, sources, storage, client.storage())
        folder.fetch()
        board = program.TensorBoard(server_class=secured_server)
        board.configure(argv=tensorboard_arguments(task, root))
        try:
            board.launch()
        except program.TensorBoardServerException as exc:  # its errors for people: a port, an address
            raise TaskError(exc.msg) from None
        server = servers[0]
        wait_until_answers(task.local_address, server.server_port, task.proxy_prefix, {SECRET_HEADER: secret})
        report_ready(client, task, server.server_port, secret)
        logger.info("TensorBoard is ready at %s", task.proxy_prefix)
        clock.touch()
        _serve(task, folder, clock, stop)
        server.shutdown()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


def _serve(task: Task, folder: LogFolder, clock: IdleClock, stop: threading.Event) -> None:
    """Fetch every FETCH_SECONDS until stopped or idle for the task's idle timeout."""
    idle = task.idle_timeout
    tick = min(FETCH_SECONDS, check_interval(idle)) if idle is not None else FETCH_SECONDS
    next_fetch = time.monotonic() + FETCH_SECONDS
    while not stop.wait(tick):
        if idle is not None and clock.idle_seconds() >= idle:
            logger.info("no request for %g s: TensorBoard stops", idle)
            return
        if folder.fetches and time.monotonic() >= next_fetch:
            folder.fetch()
            next_fetch = time.monotonic() + FETCH_SECONDS


if __name__ == "__main__":
    run("tensorboard", main)
