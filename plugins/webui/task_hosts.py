"""Airflow's own pages are not served on tasks' host names.

Task N's pages come from a host name of its own (``task-N.<[det] task_proxy_host>``,
master/task_origin.py), which reaches this same API server. Only ``/det/proxy/N/`` belongs there:
Airflow's login page, UI or REST API answered on a task's host would let the task's scripts, which
run on that origin, read what a visitor types or gets there. A root middleware of the det plugin,
so it sees every request before Airflow's routes do.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from det_airflow.errors import DetError
from det_airflow.master.task_origin import looks_like_task_host, task_hosts


class OnlyTheTaskOnItsHost:
    """404 for any path but ``/det/proxy/N/...`` on task N's host name; other hosts pass untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and not self._allowed(scope):
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
                return
            body = b"not found: a task's host name serves only that task's pages\n"
            await send(
                {
                    "type": "http.response.start",
                    "status": 404,
                    "headers": [
                        (b"content-type", b"text/plain"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)

    @staticmethod
    def _allowed(scope: Scope) -> bool:
        host = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"host"), "")
        if not looks_like_task_host(host):  # the cheap look, before any setting is read
            return True
        try:
            hosts = task_hosts()
        except DetError:  # a bad [det] task_proxy_host: the master's proxy says so, on its own routes
            return True
        task_id = hosts.task_of(host) if hosts is not None else None
        if task_id is None:
            return True
        prefix = f"/det/proxy/{task_id}"
        path = scope.get("path", "")
        return path == prefix or path.startswith(prefix + "/")
