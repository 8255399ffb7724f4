"""The master's API for people (the CLI, scripts): one method per "People" route of docs/master-api.md.

Also the login: Airflow's own ``POST /auth/token`` gives the bearer token, stored per master in
``~/.det-airflow/auth.json`` (mode 0600; the folder can be moved with ``DET_AIRFLOW_CONFIG_DIR``).
As with Determined's CLI, ``DET_USER`` / ``DET_PASS`` log in automatically when no token is stored.
``DET_REQUEST_TIMEOUT`` sets how many seconds a request waits for the master's answer (default 30).

Example:
    >>> client = connect("localhost:8080")
    >>> [e.id for e in client.list_experiments()]
"""

from __future__ import annotations

import json
import os
import uuid as uuid_module
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from det_airflow.api._http import (
    API_PREFIX,
    Session,
    _error_message,
    _message_of,
    _raise_for_status,
    normalize_master_url,
    request_timeout,
    tls_context,
)
from det_airflow.api.models import (
    Checkpoint,
    CheckpointAnswer,
    CheckpointList,
    ConfigAnswer,
    CreatedExperiment,
    Deleted,
    Experiment,
    ExperimentAnswer,
    ExperimentDetail,
    ExperimentList,
    GcPolicyAnswer,
    GcPreview,
    Host,
    HostAnswer,
    Hosts,
    HparamImportance,
    Job,
    JobList,
    JobSettings,
    LogLine,
    LogsPage,
    MasterLogList,
    Me,
    Metrics,
    MetricsList,
    Model,
    ModelAnswer,
    ModelList,
    ModelVersion,
    ModelVersionAnswer,
    ModelVersionList,
    Project,
    ProjectAnswer,
    ProjectList,
    StateChange,
    StateChanges,
    Task,
    TaskAnswer,
    TaskList,
    TaskType,
    Template,
    TemplateAnswer,
    TemplateList,
    Trial,
    TrialAnswer,
    TrialList,
    UpdatedJobs,
    Workspace,
    WorkspaceAnswer,
    WorkspaceList,
)
from det_airflow.errors import APIError, DetError

if TYPE_CHECKING:
    from datetime import datetime

    from websockets.sync.client import ClientConnection

CONFIG_DIR_ENV = "DET_AIRFLOW_CONFIG_DIR"
USER_ENV = "DET_USER"
PASSWORD_ENV = "DET_PASS"
_AUTH_FILE = "auth.json"
AnswerT = TypeVar("AnswerT", bound=BaseModel)


def new_request_id() -> str:
    """An id for one create request (1-64 characters of ``[A-Za-z0-9_-]``, as the master requires)."""
    return uuid_module.uuid4().hex


def _owner(owner: str | None) -> dict[str, str]:
    """The query naming whose model (or template) a name is, when one is given."""
    return {"owner": owner} if owner is not None else {}


def _template_scope(owner: str | None, shared: bool) -> dict[str, Any]:
    return {**_owner(owner), **({"shared": "true"} if shared else {})}


# --- stored logins ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredLogin:
    username: str
    token: str


def config_dir() -> Path:
    """The folder of the CLI's own files: ``$DET_AIRFLOW_CONFIG_DIR`` or ``~/.det-airflow``."""
    override = os.environ.get(CONFIG_DIR_ENV)
    return Path(override).expanduser() if override else Path.home() / ".det-airflow"


def auth_file() -> Path:
    return config_dir() / _AUTH_FILE


def _read_logins() -> dict[str, Any]:
    try:
        data = json.loads(auth_file().read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        # A damaged file only costs a new login; the next write replaces it.
        return {}
    return data if isinstance(data, dict) else {}


def _write_logins(logins: dict[str, Any]) -> None:
    path = auth_file()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    # Created 0600 from the start, so the token is never readable by others, not even briefly.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(logins, f, indent=2, sort_keys=True)
            f.write("\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def load_login(master: str | None) -> StoredLogin | None:
    """The login stored for ``master``, if any."""
    entry = _read_logins().get(normalize_master_url(master))
    if not isinstance(entry, dict) or not entry.get("token"):
        return None
    return StoredLogin(username=str(entry.get("username") or ""), token=str(entry["token"]))


def store_login(master: str | None, username: str, token: str) -> None:
    logins = _read_logins()
    logins[normalize_master_url(master)] = {"username": username, "token": token}
    _write_logins(logins)


def forget_login(master: str | None) -> bool:
    """Drops the login stored for ``master``; False when there was none."""
    logins = _read_logins()
    if logins.pop(normalize_master_url(master), None) is None:
        return False
    _write_logins(logins)
    return True


def login(master: str | None, username: str, password: str, *, timeout: float | None = None) -> str:
    """Logs in with Airflow's ``POST /auth/token`` and returns the bearer token (not stored).
    ``timeout``: seconds to wait for the answer (default: :func:`request_timeout`).

    Raises:
        APIError: Wrong credentials, or the master cannot be reached.
    """
    base = normalize_master_url(master)
    timeout = request_timeout() if timeout is None else timeout
    try:
        response = httpx.post(
            f"{base}/auth/token",
            json={"username": username, "password": password},
            timeout=timeout,
            verify=tls_context(),
        )
    except httpx.TimeoutException:
        raise APIError(f"the master at {base} did not answer in time") from None
    except httpx.TransportError as exc:
        raise APIError(f"cannot reach the master at {base}: {exc}") from None
    if response.status_code in (401, 403):
        raise APIError(
            f"login to {base} failed for user {username!r}: invalid username or password", status_code=401
        )
    if response.status_code >= 400:
        raise APIError(
            f"login to {base} failed: {_error_message(response)}", status_code=response.status_code
        )
    try:
        token = response.json()["access_token"]
    except (ValueError, KeyError, TypeError):
        raise APIError(f"login to {base} failed: the answer of /auth/token has no access_token") from None
    return str(token)


def revoke(
    master: str | None, token: str, *, timeout: float | None = None
) -> Literal["revoked", "refused", "kept"]:
    """Revokes ``token`` through Airflow's logout (``GET /api/v2/auth/logout``), which records the token's id
    so that Airflow, and so the master, refuse it from then on.

    Airflow's logout answers the same redirect whether or not it revoked (a token it did not sign, or
    one already expired, is not recorded), so the token is tried before and after. Answers "revoked",
    "refused" (the master did not accept the token in the first place: nothing to revoke), or "kept"
    (the master still accepts it).

    Raises:
        APIError: The master cannot be reached, or has no logout.
    """
    base = normalize_master_url(master)
    timeout = request_timeout() if timeout is None else timeout
    bearer = {"Authorization": f"Bearer {token}"}
    try:
        with httpx.Client(base_url=base, headers=bearer, timeout=timeout, verify=tls_context()) as http:
            # Airflow answers 401 for an expired token and 403 for one it cannot verify or has revoked.
            if http.get(f"{API_PREFIX}/me").status_code in (401, 403):
                return "refused"
            response = http.get("/api/v2/auth/logout", follow_redirects=False)
            if response.status_code not in (302, 303, 307):
                raise APIError(
                    f"the master at {base} has no logout to revoke a token with: {_error_message(response)}",
                    status_code=response.status_code,
                )
            after = http.get(f"{API_PREFIX}/me")
    except httpx.TimeoutException:
        raise APIError(f"the master at {base} did not answer in time") from None
    except httpx.TransportError as exc:
        raise APIError(f"cannot reach the master at {base}: {exc}") from None
    return "revoked" if after.status_code in (401, 403) else "kept"


def _env_login(master: str) -> Callable[[], str] | None:
    """Logs in from ``DET_USER`` / ``DET_PASS`` and stores the token, when both are set."""
    username, password = os.environ.get(USER_ENV), os.environ.get(PASSWORD_ENV)
    if not username or password is None:
        return None

    def relogin() -> str:
        token = login(master, username, password)
        store_login(master, username, token)
        return token

    return relogin


def _prompted_login(master: str, username: str, ask_password: Callable[[str], str]) -> Callable[[], str]:
    def relogin() -> str:
        token = login(master, username, ask_password(username))
        store_login(master, username, token)
        return token

    return relogin


def connect(master: str | None, *, ask_password: Callable[[str], str] | None = None) -> UserClient:
    """A client for ``master`` with the stored login, or one made from ``DET_USER`` / ``DET_PASS``.

    When the master refuses the stored token (expired, or Airflow's JWT secret changed), the client
    logs in again once with ``DET_USER`` / ``DET_PASS``, else with the stored username and a password
    from ``ask_password`` (give it only when someone can answer), and resends the request.
    Without any login, requests go out unauthenticated and a master that needs a login answers
    "not logged in ... run `det user login`".
    """
    master = normalize_master_url(master)
    relogin = _env_login(master)
    stored = load_login(master)
    if stored is not None:
        if relogin is None and ask_password is not None and stored.username:
            relogin = _prompted_login(master, stored.username, ask_password)
        return UserClient(master, stored.token, relogin=relogin)
    return UserClient(master, relogin() if relogin is not None else None, relogin=relogin)


# Tokens of users other than the stored login's, per master, for ``det -u USER``: the key cannot
# collide with a master's URL, so ``load_login`` and ``forget_login`` never see it.
_OTHER_USERS = "other_users"


def load_user_token(master: str | None, username: str) -> str | None:
    """The token stored for ``username`` on ``master``: the stored login's, or one kept by ``det -u``."""
    stored = load_login(master)
    if stored is not None and stored.username == username:
        return stored.token
    others = _read_logins().get(_OTHER_USERS)
    tokens = others.get(normalize_master_url(master)) if isinstance(others, dict) else None
    token = tokens.get(username) if isinstance(tokens, dict) else None
    return str(token) if token else None


def store_user_token(master: str | None, username: str, token: str) -> None:
    """Keeps ``username``'s token for ``det -u`` without changing which user ``det`` runs as."""
    stored = load_login(master)
    if stored is not None and stored.username == username:
        store_login(master, username, token)
        return
    logins = _read_logins()
    found = logins.get(_OTHER_USERS)
    others: dict[str, Any] = found if isinstance(found, dict) else {}
    others.setdefault(normalize_master_url(master), {})[username] = token
    logins[_OTHER_USERS] = others
    _write_logins(logins)


def connect_as(
    master: str | None, username: str, *, ask_password: Callable[[str], str] | None = None
) -> UserClient:
    """A client acting as ``username`` (Determined's ``det -u USER``): that user's stored token, else a
    login with ``DET_PASS`` when ``DET_USER`` names the same user, else with a password from
    ``ask_password``.

    Raises:
        DetError: No token is stored for the user and no password can be had.
    """
    master = normalize_master_url(master)
    relogin: Callable[[], str] | None = None
    if os.environ.get(USER_ENV) == username and os.environ.get(PASSWORD_ENV) is not None:
        password = os.environ[PASSWORD_ENV]

        def relogin() -> str:
            token = login(master, username, password)
            store_user_token(master, username, token)
            return token

    elif ask_password is not None:
        asker = ask_password

        def relogin() -> str:
            token = login(master, username, asker(username))
            store_user_token(master, username, token)
            return token

    token = load_user_token(master, username)
    if token is not None:
        return UserClient(master, token, relogin=relogin)
    if relogin is None:
        raise DetError(
            f"no login stored for user '{username}' on {master}: run `det -u {username} user whoami` "
            f"on a terminal to type the password, or set DET_USER={username} and DET_PASS"
        )
    return UserClient(master, relogin(), relogin=relogin)


def websocket_url(master: str, path: str, params: dict[str, Any] | None = None) -> str:
    """``ws://`` (``wss://`` for an https master) URL of ``path`` on ``master``.

    Example:
        >>> websocket_url("https://det.example.org", "/det/proxy/12/ws")
        'wss://det.example.org/det/proxy/12/ws'
    """
    from urllib.parse import urlencode

    base = normalize_master_url(master)
    scheme, rest = base.split("://", 1)
    query = f"?{urlencode(params, doseq=True)}" if params else ""
    return f"{'wss' if scheme == 'https' else 'ws'}://{rest}{path}{query}"


def _open_websocket(master: str, url: str, token: str | None) -> ClientConnection:
    try:
        from websockets.exceptions import InvalidHandshake, InvalidStatus
        from websockets.sync.client import connect as ws_connect
    except ImportError:
        raise DetError("opening a WebSocket needs the websockets package: pip install websockets") from None

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        return ws_connect(url, additional_headers=headers, open_timeout=30)
    except InvalidStatus as exc:
        body = (exc.response.body or b"").decode("utf-8", errors="replace")
        _raise_for_status(master, exc.response.status_code, _message_of(body, exc.response.reason_phrase))
    except (OSError, TimeoutError, InvalidHandshake) as exc:
        raise APIError(f"cannot open a connection to {url}: {exc}") from None


# --- the client --------------------------------------------------------------------------------------


# FAB's auth manager serves its users here (apache-airflow-providers-fab); others have no user API.
FAB_USERS_PATH = "/auth/fab/v1/users"


class NotFab(DetError):
    """The Airflow behind the master keeps its users elsewhere than FAB's auth manager."""


class UserClient:
    """The People routes of the master, over the one HTTP :class:`Session`.

    Args:
        master: ``host:port`` or a URL.
        token: Bearer token from :func:`login`, or None.
        relogin: Called for a fresh token when the master answers 401 (expired token); the
            request is then sent once more.
        timeout: Seconds each request waits for the master (default: :func:`request_timeout`).
    """

    def __init__(
        self,
        master: str | None,
        token: str | None = None,
        *,
        relogin: Callable[[], str] | None = None,
        timeout: float | None = None,
    ) -> None:
        self.master = normalize_master_url(master)
        self._timeout = request_timeout() if timeout is None else timeout
        self._session = Session(self.master, token, timeout=self._timeout)
        self._relogin = relogin

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> UserClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(
        self, method: str, path: str, *, resend_on_failure: bool = False, **kwargs: Any
    ) -> httpx.Response:
        try:
            return self._session.request(method, path, resend_on_failure=resend_on_failure, **kwargs)
        except APIError as exc:
            if exc.status_code != 401 or self._relogin is None:
                raise
            relogin, self._relogin = self._relogin, None  # only once
            self._session.close()
            self._session = Session(self.master, relogin(), timeout=self._timeout)
            return self._session.request(method, path, resend_on_failure=resend_on_failure, **kwargs)

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._request(method, path, **kwargs)
        if not response.content:
            return {}
        try:
            return response.json()
        except ValueError:
            raise APIError(
                f"the master at {self.master} answered {path} with something other than JSON"
            ) from None

    def _answer(self, model: type[AnswerT], method: str, path: str, **kwargs: Any) -> AnswerT:
        """The master's answer to ``path``, read as ``model``."""
        answer = self._json(method, path, **kwargs)
        try:
            return model.model_validate(answer)
        except ValidationError as exc:
            problem = exc.errors()[0]
            where = ".".join(str(part) for part in problem["loc"]) or "the answer"
            raise APIError(
                f"the master at {self.master} answered {path} with what this client cannot read as "
                f"{model.__name__} ({where}: {problem['msg']}); is it another version of det-airflow?"
            ) from None

    # --- experiments ---

    def create_experiment(
        self,
        config: str,
        context: str | None,
        *,
        paused: bool = False,
        parent_id: int | None = None,
        request_id: str | None = None,
        template: str | None = None,
        project_id: int | None = None,
    ) -> Experiment:
        """``config``: the YAML text; ``context``: the base64 tar.gz of the context directory, or None;
        ``template``: a config template the master lays under ``config``.

        ``request_id`` (default: a new one) makes the create exactly-once: the master creates one
        experiment per id, so the request is resent with the same body when the connection fails
        before the answer arrives.
        """
        body: dict[str, Any] = {
            "config": config,
            "context": context,
            "paused": paused,
            "request_id": request_id or new_request_id(),
        }
        if parent_id is not None:
            body["parent_id"] = parent_id
        if template is not None:
            body["template"] = template
        if project_id is not None:
            body["project_id"] = project_id
        return self._answer(
            CreatedExperiment, "POST", "/experiments", json=body, resend_on_failure=True
        ).experiment

    def list_experiments(self, *, all: bool = False) -> list[Experiment]:  # noqa: A002 - the route's own name
        params = {"all": "true"} if all else {}
        return self._answer(ExperimentList, "GET", "/experiments", params=params).experiments

    def get_experiment(self, experiment_id: int) -> ExperimentDetail:
        return self._answer(ExperimentDetail, "GET", f"/experiments/{experiment_id}")

    def get_experiment_config(self, experiment_id: int) -> dict[str, Any]:
        return self._answer(ConfigAnswer, "GET", f"/experiments/{experiment_id}/config").config

    def hyperparameter_importance(
        self, experiment_id: int, *, metric: str | None = None, evaluator: str | None = None
    ) -> HparamImportance:
        params = {k: v for k, v in (("metric", metric), ("evaluator", evaluator)) if v}
        return self._answer(
            HparamImportance, "GET", f"/experiments/{experiment_id}/hyperparameter-importance", params=params
        )

    def list_trials(self, experiment_id: int) -> list[Trial]:
        return self._answer(TrialList, "GET", f"/experiments/{experiment_id}/trials").trials

    def list_checkpoints(self, experiment_id: int) -> list[Checkpoint]:
        return self._answer(CheckpointList, "GET", f"/experiments/{experiment_id}/checkpoints").checkpoints

    def get_experiment_context(self, experiment_id: int) -> bytes:
        """The context tar.gz the experiment was created with."""
        return self._request("GET", f"/experiments/{experiment_id}/context").content

    def _experiment_action(self, experiment_id: int, action: str) -> Experiment:
        return self._answer(ExperimentAnswer, "POST", f"/experiments/{experiment_id}/{action}").experiment

    def pause_experiment(self, experiment_id: int) -> Experiment:
        return self._experiment_action(experiment_id, "pause")

    def activate_experiment(self, experiment_id: int) -> Experiment:
        return self._experiment_action(experiment_id, "activate")

    def cancel_experiment(self, experiment_id: int) -> Experiment:
        return self._experiment_action(experiment_id, "cancel")

    def kill_experiment(self, experiment_id: int) -> Experiment:
        return self._experiment_action(experiment_id, "kill")

    def archive_experiment(self, experiment_id: int) -> Experiment:
        return self._experiment_action(experiment_id, "archive")

    def unarchive_experiment(self, experiment_id: int) -> Experiment:
        return self._experiment_action(experiment_id, "unarchive")

    def delete_experiment(self, experiment_id: int) -> Deleted:
        """Delete an ended experiment; the answer says what the master could not remove (empty
        when all is gone) and which files the hosts are removing in the background."""
        return self._answer(Deleted, "DELETE", f"/experiments/{experiment_id}")

    def add_label(self, experiment_id: int, label: str) -> Experiment:
        return self._answer(
            ExperimentAnswer, "POST", f"/experiments/{experiment_id}/labels", json={"label": label}
        ).experiment

    def remove_label(self, experiment_id: int, label: str) -> Experiment:
        path = f"/experiments/{experiment_id}/labels/{quote(label, safe='')}"
        return self._answer(ExperimentAnswer, "DELETE", path).experiment

    def update_experiment(
        self,
        experiment_id: int,
        *,
        name: str | None = None,
        description: str | None = None,
        notes: str | None = None,
    ) -> Experiment:
        """Changes the name, the description and/or the Markdown notes; fields left None are kept."""
        fields = (("name", name), ("description", description), ("notes", notes))
        body = {k: v for k, v in fields if v is not None}
        return self._answer(ExperimentAnswer, "PATCH", f"/experiments/{experiment_id}", json=body).experiment

    def preview_gc(self, experiment_id: int, policy: dict[str, int]) -> GcPreview:
        """The checkpoints of the experiment that ``policy`` (its ``save_*`` counts) would delete."""
        return self._answer(GcPreview, "GET", f"/experiments/{experiment_id}/preview-gc", params=policy)

    def set_gc_policy(self, experiment_id: int, policy: dict[str, int]) -> GcPolicyAnswer:
        """Stores the policy in the experiment's config and deletes the checkpoints it does not keep."""
        return self._answer(GcPolicyAnswer, "PUT", f"/experiments/{experiment_id}/gc-policy", json=policy)

    def set_log_retention(self, experiment_id: int, days: int) -> Experiment:
        """Days the experiment's ended trials keep their logs; -1: forever."""
        path = f"/experiments/{experiment_id}/log-retention"
        return self._answer(ExperimentAnswer, "PUT", path, json={"days": days}).experiment

    # --- trials ---

    def get_trial(self, trial_id: int) -> Trial:
        return self._answer(TrialAnswer, "GET", f"/trials/{trial_id}").trial

    def kill_trial(self, trial_id: int) -> Trial:
        return self._answer(TrialAnswer, "POST", f"/trials/{trial_id}/kill").trial

    # --- the job queue ---

    def list_jobs(self, *, resource_pool: str | None = None, limit: int | None = None) -> list[Job]:
        params: dict[str, Any] = {}
        if resource_pool:
            params["resource_pool"] = resource_pool
        if limit is not None:
            params["limit"] = limit
        return self._answer(JobList, "GET", "/jobs", params=params).jobs

    def update_jobs(self, updates: list[dict[str, Any]]) -> list[JobSettings]:
        """Each update: ``job_id`` and one of priority, weight, max_slots, resource_pool, ahead_of,
        behind_of; all are applied together or none."""
        return self._answer(UpdatedJobs, "POST", "/jobs/update", json={"updates": updates}).jobs

    # --- config templates ---

    def list_templates(self) -> list[Template]:
        return self._answer(TemplateList, "GET", "/templates").templates

    def get_template(self, name: str, *, owner: str | None = None, shared: bool = False) -> Template:
        """The caller's own template ``name``, else the shared one; or ``owner``'s, or the shared one."""
        path = f"/templates/{quote(name, safe='')}"
        params = _template_scope(owner, shared)
        return self._answer(TemplateAnswer, "GET", path, params=params).template

    def set_template(self, name: str, config: str, *, shared: bool = False) -> Template:
        """Create or replace the caller's own template ``name`` (``shared``: the shared one, admins);
        ``config``: its YAML text."""
        path = f"/templates/{quote(name, safe='')}"
        params = _template_scope(None, shared)
        return self._answer(TemplateAnswer, "PUT", path, params=params, json={"config": config}).template

    def remove_template(self, name: str, *, owner: str | None = None, shared: bool = False) -> None:
        self._json("DELETE", f"/templates/{quote(name, safe='')}", params=_template_scope(owner, shared))

    # --- the model registry ---

    def list_models(self, **params: Any) -> list[Model]:
        """``params``: the route's filters and order (name, label, archived, sort_by, order_by)."""
        query = {k: v for k, v in params.items() if v is not None}
        return self._answer(ModelList, "GET", "/models", params=query).models

    def create_model(self, name: str, **fields: Any) -> Model:
        return self._answer(ModelAnswer, "POST", "/models", json={"name": name, **fields}).model

    # A model's name is unique per owner: ``owner`` says whose; without it, the caller's own first.

    def get_model(self, name: str, *, owner: str | None = None) -> Model:
        path = f"/models/{quote(name, safe='')}"
        return self._answer(ModelAnswer, "GET", path, params=_owner(owner)).model

    def update_model(self, name: str, *, owner: str | None = None, **changes: Any) -> Model:
        path = f"/models/{quote(name, safe='')}"
        return self._answer(ModelAnswer, "PATCH", path, params=_owner(owner), json=changes).model

    def set_model_archived(self, name: str, archived: bool, *, owner: str | None = None) -> Model:
        action = "archive" if archived else "unarchive"
        path = f"/models/{quote(name, safe='')}/{action}"
        return self._answer(ModelAnswer, "POST", path, params=_owner(owner)).model

    def delete_model(self, name: str, *, owner: str | None = None) -> None:
        self._json("DELETE", f"/models/{quote(name, safe='')}", params=_owner(owner))

    def list_model_versions(
        self, name: str, *, descending: bool = False, owner: str | None = None
    ) -> ModelVersionList:
        params = {"order_by": "desc" if descending else "asc", **_owner(owner)}
        return self._answer(
            ModelVersionList, "GET", f"/models/{quote(name, safe='')}/versions", params=params
        )

    def register_model_version(
        self, name: str, checkpoint_uuid: str, *, owner: str | None = None, **fields: Any
    ) -> ModelVersion:
        body = {"checkpoint_uuid": checkpoint_uuid, **fields}
        path = f"/models/{quote(name, safe='')}/versions"
        return self._answer(ModelVersionAnswer, "POST", path, params=_owner(owner), json=body).model_version

    def get_model_version(self, name: str, version: int, *, owner: str | None = None) -> ModelVersion:
        """Version ``version`` of the model; 0 or less: its latest."""
        path = f"/models/{quote(name, safe='')}/versions/{version}"
        return self._answer(ModelVersionAnswer, "GET", path, params=_owner(owner)).model_version

    def update_model_version(
        self, name: str, version: int, *, owner: str | None = None, **changes: Any
    ) -> ModelVersion:
        path = f"/models/{quote(name, safe='')}/versions/{version}"
        return self._answer(
            ModelVersionAnswer, "PATCH", path, params=_owner(owner), json=changes
        ).model_version

    def delete_model_version(self, name: str, version: int, *, owner: str | None = None) -> None:
        self._json("DELETE", f"/models/{quote(name, safe='')}/versions/{version}", params=_owner(owner))

    # --- workspaces and projects ---

    def list_workspaces(self, *, name: str | None = None) -> list[Workspace]:
        params = {"name": name} if name is not None else {}
        return self._answer(WorkspaceList, "GET", "/workspaces", params=params).workspaces

    def create_workspace(self, name: str) -> Workspace:
        return self._answer(WorkspaceAnswer, "POST", "/workspaces", json={"name": name}).workspace

    def workspace_by_name(self, name: str) -> Workspace:
        found = self.list_workspaces(name=name)
        if not found:
            raise DetError(f"workspace '{name}' not found")
        return found[0]

    def list_projects(self, workspace_id: int, *, name: str | None = None) -> ProjectList:
        params = {"name": name} if name is not None else {}
        return self._answer(ProjectList, "GET", f"/workspaces/{workspace_id}/projects", params=params)

    def create_project(self, workspace_id: int, name: str, *, description: str = "") -> Project:
        body = {"name": name, "description": description}
        return self._answer(ProjectAnswer, "POST", f"/workspaces/{workspace_id}/projects", json=body).project

    def project_by_name(self, workspace: str, project: str) -> Project:
        found = self.list_projects(self.workspace_by_name(workspace).id, name=project).projects
        if not found:
            raise DetError(f"project '{project}' not found in workspace '{workspace}'")
        return found[0]

    def get_project(self, project_id: int) -> Project:
        return self._answer(ProjectAnswer, "GET", f"/projects/{project_id}").project

    def update_project(self, project_id: int, **changes: Any) -> Project:
        """Change ``description`` or ``notes`` (Markdown)."""
        return self._answer(ProjectAnswer, "PATCH", f"/projects/{project_id}", json=changes).project

    def list_project_experiments(self, project_id: int, *, all: bool = False) -> list[Experiment]:  # noqa: A002
        params = {"all": "true"} if all else {}
        path = f"/projects/{project_id}/experiments"
        return self._answer(ExperimentList, "GET", path, params=params).experiments

    def move_experiment(self, experiment_id: int, workspace: str, project: str) -> Project:
        body = {"workspace": workspace, "project": project}
        return self._answer(ProjectAnswer, "POST", f"/experiments/{experiment_id}/move", json=body).project

    def update_workspace(self, workspace_id: int, **changes: Any) -> Workspace:
        """Change ``name``."""
        return self._answer(WorkspaceAnswer, "PATCH", f"/workspaces/{workspace_id}", json=changes).workspace

    def set_workspace_archived(self, workspace_id: int, archived: bool) -> Workspace:
        action = "archive" if archived else "unarchive"
        return self._answer(WorkspaceAnswer, "POST", f"/workspaces/{workspace_id}/{action}").workspace

    def delete_workspace(self, workspace_id: int) -> Workspace:
        return self._answer(WorkspaceAnswer, "DELETE", f"/workspaces/{workspace_id}").workspace

    def set_project_archived(self, project_id: int, archived: bool) -> Project:
        action = "archive" if archived else "unarchive"
        return self._answer(ProjectAnswer, "POST", f"/projects/{project_id}/{action}").project

    def delete_project(self, project_id: int) -> Project:
        return self._answer(ProjectAnswer, "DELETE", f"/projects/{project_id}").project

    # --- the master's own log (admins) ---

    def master_logs(self, *, tail: int | None = None, since: float | None = None) -> MasterLogList:
        """The master's log records, oldest first: the last ``tail``, or those logged at or after
        ``since`` (seconds since the epoch)."""
        params: dict[str, Any] = {}
        if tail is not None:
            params["tail"] = tail
        if since is not None:
            params["since"] = since
        return self._answer(MasterLogList, "GET", "/master/logs", params=params)

    # --- tasks: notebooks, TensorBoards, commands, shells ---

    def create_task(
        self,
        task_type: TaskType,
        *,
        config: str | None = None,
        context: str | None = None,
        command: list[str] | None = None,
        experiment_ids: list[int] | None = None,
        trial_ids: list[int] | None = None,
        forked_from: int | None = None,
        project_id: int | None = None,
    ) -> Task:
        """Start a task. ``config``: its config as YAML text; ``context``: the base64 tar.gz of a
        folder to run in; ``command``: what a command runs (a shell: what each terminal runs);
        ``experiment_ids`` / ``trial_ids``: what a TensorBoard shows; ``forked_from``: the generic
        task whose config and context a generic one starts from; ``project_id``: its project."""
        body: dict[str, Any] = {
            "type": task_type,
            "config": config,
            "context": context,
            "command": command or [],
            "experiment_ids": experiment_ids or [],
            "trial_ids": trial_ids or [],
        }
        if forked_from is not None:
            body["forked_from"] = forked_from
        if project_id is not None:
            body["project_id"] = project_id
        return self._answer(TaskAnswer, "POST", "/tasks", json=body).task

    def list_tasks(self, *, task_type: TaskType | None = None, all: bool = False) -> list[Task]:  # noqa: A002 - the route's own name
        """The caller's tasks (``all``: every task the caller may read), of one type when given."""
        params: dict[str, Any] = {}
        if task_type is not None:
            params["type"] = task_type
        if all:
            params["all"] = "true"
        return self._answer(TaskList, "GET", "/tasks", params=params).tasks

    def get_task(self, task_id: int) -> Task:
        return self._answer(TaskAnswer, "GET", f"/tasks/{task_id}").task

    def kill_task(self, task_id: int) -> Task:
        return self._answer(TaskAnswer, "POST", f"/tasks/{task_id}/kill").task

    def get_task_config(self, task_id: int) -> dict[str, Any]:
        """The task's config as submitted (its secrets masked unless it is the caller's)."""
        return self._answer(ConfigAnswer, "GET", f"/tasks/{task_id}/config").config

    def open_websocket(self, path: str, *, params: dict[str, Any] | None = None) -> ClientConnection:
        """A WebSocket to ``path`` on the master (such as a shell's ``/det/proxy/<id>/ws``), opened
        with this client's login; a refusal is an APIError with the master's own words.

        Raises:
            DetError: The ``websockets`` package is missing.
            APIError: The master refused the connection or cannot be reached.
        """
        url = websocket_url(self.master, path, params)
        try:
            return _open_websocket(self.master, url, self._session.token)
        except APIError as exc:
            if exc.status_code != 401 or self._relogin is None:
                raise
            relogin, self._relogin = self._relogin, None  # only once, as for requests
            self._session.close()
            self._session = Session(self.master, relogin(), timeout=self._timeout)
            return _open_websocket(self.master, url, self._session.token)

    # --- hosts ---

    def list_agents(self) -> list[Host]:
        """The worker hosts (Determined's agents) with their slots and the trials holding them."""
        return self._answer(Hosts, "GET", "/agents").agents

    def switch_agent(self, agent_id: str, enable: bool, *, drain: bool = False) -> Host:
        """Enable or disable a worker host (admins); ``drain``: what runs there finishes."""
        path = f"/agents/{quote(agent_id, safe='')}/{'enable' if enable else 'disable'}"
        body = None if enable else {"drain": drain}
        return self._answer(HostAnswer, "POST", path, json=body).agent

    def switch_slot(self, agent_id: str, slot_id: int, enable: bool) -> Host:
        """Enable or disable one slot of a worker host (admins); answers the host."""
        action = "enable" if enable else "disable"
        path = f"/agents/{quote(agent_id, safe='')}/slots/{slot_id}/{action}"
        return self._answer(HostAnswer, "POST", path).agent

    def state_changes(self, kind: str, object_id: int) -> list[StateChange]:
        """Every state an experiment or trial (``kind``) took, oldest first: from, to, time, reason."""
        return self._answer(StateChanges, "GET", f"/{kind}s/{object_id}/state-changes").state_changes

    def trial_metrics(self, trial_id: int, *, group: str | None = None) -> list[Metrics]:
        params = {"group": group} if group else {}
        return self._answer(MetricsList, "GET", f"/trials/{trial_id}/metrics", params=params).metrics

    def trial_logs(
        self,
        trial_id: int,
        *,
        after: int | None = None,
        limit: int | None = None,
        tail: int | None = None,
        rank: list[int] | None = None,
        level: str | None = None,
        timestamp_before: datetime | None = None,
        timestamp_after: datetime | None = None,
        container_id: list[str] | None = None,
        source: list[str] | None = None,
        stdtype: list[str] | None = None,
        search: str | None = None,
    ) -> LogsPage:
        """One page of a trial's logs, ascending by id: after ``after``, at most ``limit``, or the last
        ``tail``; only lines of these ``rank`` ids, of ``level`` or higher, logged strictly
        between ``timestamp_after`` and ``timestamp_before``, and containing ``search`` (any case),
        when given."""
        given = (
            ("after", after),
            ("limit", limit),
            ("tail", tail),
            ("rank", rank),
            ("level", level),
            ("timestamp_before", timestamp_before and timestamp_before.isoformat()),
            ("timestamp_after", timestamp_after and timestamp_after.isoformat()),
            ("container_id", container_id),
            ("source", source),
            ("stdtype", stdtype),
            ("search", search),
        )
        params = {k: v for k, v in given if v is not None}
        return self._answer(LogsPage, "GET", f"/trials/{trial_id}/logs", params=params)

    # --- checkpoints and identity ---

    def get_checkpoint(self, uuid: str) -> Checkpoint:
        return self._answer(CheckpointAnswer, "GET", f"/checkpoints/{quote(uuid, safe='')}").checkpoint

    def download_checkpoint_file(self, uuid: str, path: str, target: Path) -> int:
        """Stream one file of a checkpoint in object storage, through the master, into ``target``;
        answers its size."""
        return self._session.download(f"/checkpoints/{quote(uuid, safe='')}/files/{quote(path)}", target)

    def delete_checkpoint(self, uuid: str) -> None:
        self._request("DELETE", f"/checkpoints/{quote(uuid, safe='')}")

    def whoami(self) -> str:
        """The username the master knows this client's token as (``GET /me``)."""
        return self._answer(Me, "GET", "/me").username

    def fresh_token(self) -> str | None:
        """The bearer token this client sends (a fresh one once it logged in again)."""
        return self._session.token

    def airflow_version(self) -> str | None:
        """The version of the Airflow behind the master (its public ``/api/v2/version``), or None
        when that Airflow does not say."""
        try:
            answer = self._json("GET", f"{self.master}/api/v2/version")
        except APIError:
            return None
        version = answer.get("version") if isinstance(answer, dict) else None
        return str(version) if version else None

    # --- users, where Airflow's auth manager is FAB's (its API is outside the master's prefix) ---

    def fab_users(self, method: str, path: str = "", **kwargs: Any) -> Any:
        """Call FAB's user API; raises NotFab when the Airflow behind the master does not serve it."""
        url = f"{self.master}{FAB_USERS_PATH}{path}"
        try:
            response = self._request(method, url, **kwargs)
            if response.content and "json" not in response.headers.get("content-type", ""):
                # Another auth manager's Airflow serves its web UI's page at every unknown path.
                raise NotFab("the Airflow behind this master has no FAB user API")
            return response.json() if response.content else {}
        except APIError as exc:
            # FAB names the missing user; an Airflow without the route answers a bare "Not Found".
            if exc.status_code == 404 and str(exc).rstrip().endswith("Not Found"):
                raise NotFab("the Airflow behind this master has no FAB user API") from None
            raise


__all__ = [
    "Checkpoint",
    "Experiment",
    "ExperimentDetail",
    "Job",
    "JobSettings",
    "LogLine",
    "LogsPage",
    "Metrics",
    "StateChange",
    "StoredLogin",
    "Task",
    "Trial",
    "UserClient",
    "auth_file",
    "config_dir",
    "connect",
    "connect_as",
    "forget_login",
    "load_login",
    "load_user_token",
    "login",
    "new_request_id",
    "store_login",
    "store_user_token",
    "websocket_url",
]
