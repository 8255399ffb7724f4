"""``det task ...`` and what the verbs of notebooks, TensorBoards, commands and shells share: the
task config from ``--config-file`` and ``--config``, the context folder, starting one and waiting
until it serves, and their ``list``, ``kill`` and ``logs`` verbs. Generic tasks' own verbs
(``det task create|fork|config``) are in cli/task_create.py.

A task runs as the one trial of a hidden experiment, so its logs are that trial's (``trial_id``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from det_airflow.cli import render
from det_airflow.cli.logs import add_log_arguments, show_logs_from_args
from det_airflow.errors import ConfigError, DetError

if TYPE_CHECKING:
    from det_airflow.api.models import TaskType
    from det_airflow.api.user import Task, UserClient

# Seconds between two looks at a task while waiting for it; tests shorten it.
POLL_INTERVAL = 1.0
TERMINATED = "TERMINATED"
COMPLETED = "COMPLETED"

TASK_HEADERS = (
    "Task ID",
    "Type",
    "Description",
    "Owner",
    "State",
    "Slots",
    "Resource Pool",
    "Started",
    "Exit Status",
)
# `det notebook|cmd|shell list`, and `det tensorboard list` with what it shows after the state.
LIST_HEADERS = ("ID", "Owner", "Description", "State", "Exit Status", "Resource Pool")
TENSORBOARD_SOURCE_HEADERS = ("Experiment IDs", "Trial IDs")


@dataclass(frozen=True)
class Kind:
    """One type of task as the CLI names it."""

    type: TaskType
    title: str  # at the start of a sentence
    noun: str  # the `det NOUN` that manages it
    name: str = ""  # how a sentence names one, where its type alone does not read ("generic task")

    @property
    def called(self) -> str:
        return self.name or self.type


NOTEBOOK = Kind("notebook", "Notebook", "notebook")
TENSORBOARD = Kind("tensorboard", "TensorBoard", "tensorboard")
COMMAND = Kind("command", "Command", "cmd")
SHELL = Kind("shell", "Shell", "shell")
GENERIC = Kind("generic", "Task", "task", "generic task")
KINDS = {kind.type: kind for kind in (NOTEBOOK, TENSORBOARD, COMMAND, SHELL, GENERIC)}


class TaskStateError(DetError):
    """The task is not in a state the verb can use (ended, not serving yet, another type)."""


def register(subparsers: argparse._SubParsersAction) -> None:
    from det_airflow.cli import task_create

    noun = subparsers.add_parser(
        "task",
        help="list tasks of every type (notebooks, TensorBoards, commands, shells); their logs; "
        "create generic tasks",
    )
    verbs = noun.add_subparsers(dest="verb", metavar="VERB", required=True)

    ls = verbs.add_parser("list", aliases=["ls"], help="list your tasks of every type")
    ls.add_argument("-a", "--all", action="store_true", help="every task you may see, not only yours")
    render.add_output_flags(ls)
    ls.set_defaults(func=_list_all)

    logs = verbs.add_parser("logs", help="show a task's logs")
    logs.add_argument("task_id", metavar="ID", type=int, help="task ID")
    add_log_arguments(logs)
    logs.set_defaults(func=_logs, kind=None)

    kill = verbs.add_parser("kill", help="stop tasks of any type at once")
    kill.add_argument("task_ids", metavar="ID", type=int, nargs="+", help="task ID")
    kill.add_argument(
        "--root",
        action="store_true",
        help="accepted as Determined's: a task here has no child tasks, so it is its own root",
    )
    kill.set_defaults(func=_kill, kind=None)

    task_create.register(verbs)


def connect(args: argparse.Namespace) -> UserClient:
    from det_airflow.cli.user import connect as connect_user

    return connect_user(args.master)


# --- the verbs every type has: list, kill, logs ---------------------------------------------------


def register_common_verbs(verbs: argparse._SubParsersAction, kind: Kind) -> None:
    """``list``, ``kill`` and ``logs`` of one type of task."""
    ls = verbs.add_parser("list", aliases=["ls"], help=f"list your {kind.type}s")
    ls.add_argument("-a", "--all", action="store_true", help=f"every {kind.type} you may see, not only yours")
    render.add_output_flags(ls)
    ls.set_defaults(func=_list_kind, kind=kind)

    kill = verbs.add_parser("kill", help=f"stop {kind.type}s at once")
    kill.add_argument("task_ids", metavar="ID", type=int, nargs="+", help=f"{kind.type} ID")
    kill.set_defaults(func=_kill, kind=kind)

    logs = verbs.add_parser("logs", help=f"show a {kind.type}'s logs")
    add_id(logs, kind)
    add_log_arguments(logs)
    logs.set_defaults(func=_logs, kind=kind)


def add_id(parser: argparse.ArgumentParser, kind: Kind) -> None:
    parser.add_argument("task_id", metavar="ID", type=int, help=f"{kind.type} ID")


def get_task(client: UserClient, task_id: int, kind: Kind | None) -> Task:
    """The task, refused unless it is of ``kind`` (any type when None)."""
    task = client.get_task(task_id)
    if kind is not None and task.type != kind.type:
        other = KINDS[task.type]
        raise TaskStateError(
            f"task {task_id} is a {other.called}, not a {kind.type}: use `det {other.noun} ...` for it"
        )
    return task


def format_state(task: Task) -> str:
    """``TERMINATED (ERROR)`` once it ended, else its state."""
    if task.state == TERMINATED and task.end_state:
        return f"{task.state} ({task.end_state})"
    return task.state


def _list_all(args: argparse.Namespace) -> None:
    tasks = sorted(connect(args).list_tasks(all=args.all), key=lambda t: t.id)
    if args.json:
        render.print_json(tasks)
        return
    rows = [
        [
            t.id,
            t.type,
            t.description,
            t.owner,
            format_state(t),
            t.slots,
            t.resource_pool,
            render.format_time(t.start_time),
            t.exit_code,
        ]
        for t in tasks
    ]
    render.print_table(TASK_HEADERS, rows, csv=args.csv)


def _list_kind(args: argparse.Namespace) -> None:
    kind: Kind = args.kind
    tasks = sorted(connect(args).list_tasks(task_type=kind.type, all=args.all), key=lambda t: t.id)
    if args.json:
        render.print_json(tasks)
        return
    headers = list(LIST_HEADERS)
    if kind is TENSORBOARD:
        headers[4:4] = TENSORBOARD_SOURCE_HEADERS
    rows = []
    for t in tasks:
        row: list[Any] = [t.id, t.owner, t.description, format_state(t), t.exit_code, t.resource_pool]
        if kind is TENSORBOARD:
            row[4:4] = [_ids(t.experiment_ids), _ids(t.trial_ids)]
        rows.append(row)
    render.print_table(headers, rows, csv=args.csv)


def _ids(ids: list[int]) -> str:
    return ", ".join(str(i) for i in ids)


def _kill(args: argparse.Namespace) -> None:
    kind: Kind | None = args.kind
    client = connect(args)
    for task_id in args.task_ids:
        task = get_task(client, task_id, kind)
        client.kill_task(task_id)
        print(f"Killed {KINDS[task.type].called} {task_id}", flush=True)


def _logs(args: argparse.Namespace) -> None:
    client = connect(args)
    task = get_task(client, args.task_id, args.kind)
    trial_id = trial_of(client, task, wait=args.follow)
    if trial_id is None:
        print(f"{KINDS[task.type].title} {task.id} has no logs: it is {format_state(task)}", file=sys.stderr)
        return
    show_logs_from_args(client, trial_id, args)


def trial_of(client: UserClient, task: Task, *, wait: bool) -> int | None:
    """The trial whose logs are the task's; with ``wait``, waits for it unless the task ends first."""
    while task.trial_id is None and wait and task.state != TERMINATED:
        time.sleep(POLL_INTERVAL)
        task = client.get_task(task.id)
    return task.trial_id


# --- starting one ---------------------------------------------------------------------------------


def add_launch_arguments(parser: argparse.ArgumentParser, kind: Kind, *, context: bool = True) -> None:
    """``--config-file``, ``--config``, ``--context`` and ``-d`` of ``start`` and ``run``."""
    parser.add_argument("--config-file", metavar="FILE", help=f"the {kind.type}'s config (YAML)")
    parser.add_argument(
        "--config",
        dest="config_overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a config field over --config-file, e.g. resources.slots=2 (repeatable; values are YAML)",
    )
    if context:
        parser.add_argument(
            "-c", "--context", metavar="DIR", help="a folder to copy where it runs (honours .detignore)"
        )
    parser.add_argument(
        "-d", "--detach", action="store_true", help="print the ID and return; do not wait for it"
    )


def task_config_text(config_file: str | None, overrides: list[str]) -> str | None:
    """The task config to send: the file as written, or its fields with ``--config`` set over them
    (None when neither is given).

    Raises:
        ConfigError: The file cannot be read or is not a mapping, or an override is not KEY=VALUE.
    """
    from det_airflow.config import MAX_CONFIG_BYTES, read_yaml

    text = ""
    if config_file is not None:
        try:
            with open(config_file, encoding="utf-8") as f:
                text = f.read(MAX_CONFIG_BYTES + 1)
        except FileNotFoundError:
            raise ConfigError([("", "no such file")], source=config_file) from None
        except OSError as exc:
            raise ConfigError([("", f"cannot read the file: {exc.strerror}")], source=config_file) from None
        except UnicodeDecodeError:
            raise ConfigError(
                [("", "cannot read the file: it is not UTF-8 text")], source=config_file
            ) from None
    data = read_yaml(text, config_file) if text.strip() else None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            [("", f"expected a mapping of task config fields, got {type(data).__name__}")], source=config_file
        )
    if not overrides:
        return text or None
    import yaml

    from det_airflow.config import apply_overrides

    problems = apply_overrides(data, overrides)
    if problems:
        raise ConfigError(problems)
    return yaml.safe_dump(data, sort_keys=False)


def packed_context(directory: str | None, includes: list[str] | None = None) -> str | None:
    """The base64 tar.gz of ``directory`` (honouring .detignore) with ``includes`` at its top level,
    said as `det experiment create` says it."""
    if directory is None:
        return None
    import base64

    from det_airflow.context_archive import format_size, pack_context

    packed = pack_context(directory, includes=includes or ())
    print(
        f"Preparing files ({packed.directory.absolute()}) to send to master... "
        f"{format_size(packed.size)} and {packed.file_count} files",
        flush=True,
    )
    return base64.b64encode(packed.data).decode("ascii")


def launch(args: argparse.Namespace, kind: Kind, **body: Any) -> tuple[UserClient, Task]:
    """Starts a task of ``kind`` from the launch arguments and ``body`` (``command``,
    ``experiment_ids``, ``trial_ids``); prints ``Launched KIND ID`` (with its URL when it serves one)."""
    config = task_config_text(args.config_file, args.config_overrides)
    context = packed_context(getattr(args, "context", None))
    client = connect(args)
    task = client.create_task(kind.type, config=config, context=context, **body)
    url = f" at {page_url(client, task)}" if task.url else ""
    print(f"Launched {kind.type} {task.id}{url}", flush=True)
    return client, task


def page_url(client: UserClient, task: Task) -> str:
    """Where a browser opens the task: the master's address and the task's proxy path."""
    return client.master + (task.url or "")


def wait_until_ready(client: UserClient, task: Task, *, say: Callable[[str], None] | None = None) -> Task:
    """Polls until the task serves, printing each state it takes; answers it ready.

    Raises:
        TaskStateError: It ended before serving.
    """
    say = say or (lambda line: print(line, flush=True))
    kind = KINDS[task.type]
    shown = None
    try:
        while not task.ready:
            if task.state != shown:
                say(f"{kind.title} {task.id} is {task.state}")
                shown = task.state
            if task.state == TERMINATED:
                raise TaskStateError(
                    f"{kind.type} {task.id} ended ({task.end_state}) before it was ready: "
                    f"`det {kind.noun} logs {task.id}` shows why"
                )
            time.sleep(POLL_INTERVAL)
            task = client.get_task(task.id)
    except KeyboardInterrupt:
        print(keeps_running(task), file=sys.stderr)
        raise
    return task


def process_status(code: int) -> int:
    """A program's exit status as a shell reports it: 128 + N for one ended by signal N (which
    Python's subprocess reports as -N); a status outside 0-255 is 1."""
    if code < 0:
        return min(128 - code, 255)
    return code if code <= 255 else 1


def keeps_running(task: Task) -> str:
    """What to tell someone who stopped waiting for a task: it goes on, and how to stop it."""
    kind = KINDS[task.type]
    return f"{kind.title} {task.id} keeps running; `det {kind.noun} kill {task.id}` stops it"


def require_ready(task: Task) -> None:
    """Refuses a task that does not serve now."""
    if not task.ready:
        kind = KINDS[task.type]
        why = f"it ended ({task.end_state})" if task.state == TERMINATED else f"it is {task.state}"
        raise TaskStateError(f"{kind.type} {task.id} is not ready: {why}")


def open_in_browser(task: Task, url: str, *, browser: bool = True) -> None:
    """Says where the task's page is, and opens it in the default browser unless told not to."""
    print(f"{KINDS[task.type].title} {task.id} is ready at {url}", flush=True)
    if browser:
        import webbrowser

        if not webbrowser.open(url):
            print("No browser could be started here: open the address above", file=sys.stderr)


# --- the pages: notebooks and TensorBoards --------------------------------------------------------


def add_browser_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-browser", action="store_true", help="print the address only; do not open a browser"
    )


def register_open_verb(verbs: argparse._SubParsersAction, kind: Kind) -> None:
    """``open ID``: the page of a running notebook or TensorBoard, in the browser."""
    parser = verbs.add_parser("open", help=f"open a running {kind.type} in the browser")
    add_id(parser, kind)
    add_browser_argument(parser)
    parser.set_defaults(func=_open_page, kind=kind)


def _open_page(args: argparse.Namespace) -> None:
    client = connect(args)
    task = get_task(client, args.task_id, args.kind)
    require_ready(task)
    open_in_browser(task, page_url(client, task), browser=not args.no_browser)


def show_page(args: argparse.Namespace, client: UserClient, task: Task) -> None:
    """After ``start``: unless detached, waits until the page serves, then opens it."""
    if args.detach:
        return
    task = wait_until_ready(client, task)
    open_in_browser(task, page_url(client, task), browser=not args.no_browser)
