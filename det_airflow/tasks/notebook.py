"""A notebook task: JupyterLab under the task's proxy prefix. ``python3 -m det_airflow.tasks.notebook``.

The server runs in this process, started with JupyterLab's own ``LabApp``: its root is the working
directory (the task's context folder), its token the secret the master's proxy presents (as
``Authorization: token <secret>``), so every request the proxy forwards is authenticated and needs
no XSRF cookie; nothing reaches it any other way. The token is set here, never on a command line,
and never written to the output, which becomes the task's logs.

With an idle timeout, Jupyter's own culling stops it: a kernel without activity for that long and
no open connection is shut down, and the server stops once it has no kernel and no request for
that long; the program then exits 0.
"""

from __future__ import annotations

import math
import os
import tempfile
import threading
import warnings
from typing import Any

from det_airflow.api.runtime import RuntimeClient
from det_airflow.errors import DetError
from det_airflow.tasks._server import (
    Task,
    check_bindable,
    check_interval,
    connect,
    logger,
    new_secret,
    redact_from_logs,
    report_ready,
    run,
    wait_until_answers,
)


def server_arguments(task: Task, secret: str, root: str) -> list[str]:
    """JupyterLab's settings for ``task``, as its command line would give them (given in-process
    here, they outrank the user's Jupyter config files and show in no process listing)."""
    arguments = [
        f"--ServerApp.ip={task.bind_address}",
        "--ServerApp.port=0",
        "--ServerApp.port_retries=0",
        f"--ServerApp.base_url={task.proxy_prefix}",
        f"--ServerApp.root_dir={root}",
        f"--IdentityProvider.token={secret}",
        "--ServerApp.allow_unauthenticated_access=False",
        "--ServerApp.open_browser=False",
        # Behind the proxy the browser's Origin and Host name the master, not this server; every
        # request carries the token, which is what admits it.
        "--ServerApp.allow_origin=*",
        "--ServerApp.allow_remote_access=True",
        # A container's task may run as root; the runner chose the user, not the notebook's owner.
        "--ServerApp.allow_root=True",
        # Nodes need not reach the internet: no update checks or news feed.
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.news_url=None",
    ]
    if task.idle_timeout is not None:
        # Jupyter counts whole seconds.
        seconds = max(1, math.ceil(task.idle_timeout))
        interval = max(1, math.ceil(check_interval(task.idle_timeout)))
        arguments += [
            f"--ServerApp.shutdown_no_activity_timeout={seconds}",
            f"--MappingKernelManager.cull_idle_timeout={seconds}",
            "--MappingKernelManager.cull_connected=False",
            f"--MappingKernelManager.cull_interval={interval}",
            f"--TerminalManager.cull_inactive_timeout={seconds}",
            f"--TerminalManager.cull_interval={interval}",
        ]
    return arguments


def _writable_runtime_dir() -> None:
    """Jupyter keeps its server and kernel connection files in its runtime folder; a task's user
    may have no writable home, and then gets a private folder of its own."""
    from jupyter_core.paths import jupyter_runtime_dir

    folder = jupyter_runtime_dir()
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        writable = os.access(folder, os.W_OK)
    except OSError:
        writable = False
    if not writable:
        os.environ["JUPYTER_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="det-notebook-")


class _Readiness(threading.Thread):
    """Waits for the server's first answer, then tells the master; stops the server if it cannot."""

    def __init__(self, client: RuntimeClient, task: Task, serverapp: Any, secret: str) -> None:
        super().__init__(name="notebook-ready", daemon=True)
        self.client, self.task, self.serverapp, self.secret = client, task, serverapp, secret
        self.error: DetError | None = None

    def run(self) -> None:
        try:
            wait_until_answers(
                self.task.local_address,
                self.serverapp.port,
                f"{self.task.proxy_prefix}api/status",
                {"Authorization": f"token {self.secret}"},
            )
            report_ready(self.client, self.task, self.serverapp.port, self.secret)
        except DetError as exc:
            self.error = exc
            self.serverapp.io_loop.add_callback(self.serverapp.stop)
            return
        logger.info("JupyterLab is ready at %slab", self.task.proxy_prefix)


def main() -> int:
    client, task = connect("notebook")
    check_bindable(task.bind_address)
    secret = new_secret()
    _writable_runtime_dir()

    from jupyter_server.utils import JupyterServerAuthWarning
    from jupyterlab.labapp import LabApp
    from tornado.ioloop import PeriodicCallback

    # It names the extension routes that declare no authentication; with unauthenticated access
    # off, as here, Jupyter asks for the token on those too.
    warnings.filterwarnings("ignore", category=JupyterServerAuthWarning)
    serverapp = LabApp.initialize_server(argv=server_arguments(task, secret, os.getcwd()))
    redact_from_logs(secret)
    if task.idle_timeout is not None:
        # Jupyter looks for inactivity once a minute; a shorter timeout is looked at more often.
        every = check_interval(task.idle_timeout) * 1000
        serverapp.io_loop.add_callback(PeriodicCallback(serverapp.shutdown_no_activity, every).start)
    readiness = _Readiness(client, task, serverapp, secret)
    readiness.start()
    serverapp.start()  # returns once stopped: idle, shut down from JupyterLab, or SIGTERM
    if readiness.error is not None:
        raise readiness.error
    return 0


if __name__ == "__main__":
    run("notebook", main)
