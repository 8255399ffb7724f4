"""``det task create|fork|config`` (Determined's generic tasks).

A generic task is a command whose program is its config's ``entrypoint`` (a command string or a
list of arguments), run with the context folder as its working folder under the config's
``environment`` and ``resources``: the master runs it exactly as ``det cmd run --context`` would,
with the same checks. ``det task list`` shows it as ``generic``, ``det task logs`` shows its output.
"""

from __future__ import annotations

import argparse
import sys

from det_airflow.cli import render
from det_airflow.cli import task as task_cli
from det_airflow.cli.command import follow
from det_airflow.cli.job import _positive_int
from det_airflow.cli.task import GENERIC
from det_airflow.errors import DetError


def register(verbs: argparse._SubParsersAction) -> None:
    """The generic task's verbs, under ``det task``."""
    create = verbs.add_parser(
        "create", help="start a generic task: the config's entrypoint, run in the context folder"
    )
    create.add_argument("config_file", metavar="CONFIG_FILE", help="the task's config (YAML)")
    create.add_argument(
        "context_dir",
        metavar="CONTEXT_DIR",
        nargs="?",
        help="the folder it runs in, copied there (honours .detignore); the same as -c/--context",
    )
    create.add_argument("-c", "--context", metavar="DIR", help="the folder it runs in (as CONTEXT_DIR)")
    create.add_argument(
        "-i",
        "--include",
        action="append",
        default=[],
        metavar="PATH",
        help="also copy this file or folder, under its own name, beside the context's (repeatable)",
    )
    create.add_argument(
        "--fork",
        metavar="TASK_ID",
        type=int,
        help="start from this generic task: its config under CONFIG_FILE's fields, its context unless one is given",
    )
    create.add_argument(
        "--no_pause",
        "--no-pause",
        dest="no_pause",
        action="store_true",
        help="accepted as Determined's: no task is ever paused here",
    )
    _add_start_arguments(create)
    create.set_defaults(func=_create)

    fork = verbs.add_parser(
        "fork", help="start a generic task with another one's config and context (yours, or as an admin)"
    )
    fork.add_argument("parent_task_id", metavar="PARENT_TASK_ID", type=int, help="the generic task to fork")
    fork.add_argument("--config-file", metavar="FILE", help="config fields that replace the parent's (YAML)")
    _add_start_arguments(fork)
    fork.set_defaults(func=_fork)

    config = verbs.add_parser("config", help="show a task's config as submitted")
    config.add_argument("task_id", metavar="TASK_ID", type=int, help="task ID")
    config.add_argument("--json", action="store_true", help="print JSON instead of YAML")
    config.set_defaults(func=_config)


def _add_start_arguments(parser: argparse.ArgumentParser) -> None:
    """``--config``, ``--project_id`` and ``-f`` of ``create`` and ``fork``."""
    parser.add_argument(
        "--config",
        dest="config_overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a config field over the file, e.g. resources.slots=2 (repeatable; values are YAML)",
    )
    parser.add_argument(
        "--project_id",
        "--project-id",
        dest="project_id",
        type=_positive_int,
        metavar="ID",
        help="place the task in this project (det project list WORKSPACE shows the IDs)",
    )
    parser.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="print its output until it ends, and exit with its exit status (as det cmd run)",
    )


def _create(args: argparse.Namespace) -> int:
    if args.context_dir is not None and args.context is not None:
        raise DetError("give the context folder once: as CONTEXT_DIR or as -c/--context")
    directory = args.context_dir if args.context_dir is not None else args.context
    if args.include and directory is None:
        raise DetError("--include needs a context folder (CONTEXT_DIR or -c/--context)")
    config = task_cli.task_config_text(args.config_file, args.config_overrides)
    context = task_cli.packed_context(directory, args.include)
    return _start(args, config, context, forked_from=args.fork)


def _fork(args: argparse.Namespace) -> int:
    config = task_cli.task_config_text(args.config_file, args.config_overrides)
    return _start(args, config, None, forked_from=args.parent_task_id)


def _start(
    args: argparse.Namespace, config: str | None, context: str | None, *, forked_from: int | None
) -> int:
    """Creates the generic task, says ``Created task ID`` and, with ``-f``, follows it to its end."""
    client = task_cli.connect(args)
    task = client.create_task(
        GENERIC.type, config=config, context=context, forked_from=forked_from, project_id=args.project_id
    )
    print(f"Created task {task.id}", flush=True)
    if not args.follow:
        return 0
    try:
        return follow(client, task)
    except KeyboardInterrupt:
        print(
            f"{task_cli.keeps_running(task)}; `det task logs -f {task.id}` follows it again",
            file=sys.stderr,
        )
        raise


def _config(args: argparse.Namespace) -> None:
    config = task_cli.connect(args).get_task_config(args.task_id)
    if args.json:
        render.print_json(config)
        return
    import yaml

    sys.stdout.write(render.clean(yaml.safe_dump(config, default_flow_style=False, sort_keys=False)))
