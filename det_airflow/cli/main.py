"""The ``det`` console script: parse, run one command, turn our errors into one clear line."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from det_airflow.cli import (
    admin,
    agent,
    checkpoint,
    command,
    experiment,
    job,
    master,
    model,
    notebook,
    preview_search,
    project,
    render,
    shell,
    task,
    template,
    tensorboard,
    token,
    trial,
    user,
    webhook,
    workspace,
)
from det_airflow.errors import ConfigError, DetError

MASTER_ENV = "DET_MASTER"
# Exit statuses: our errors, argparse usage errors (argparse's own), Ctrl-C (128 + SIGINT).
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class _VersionAction(argparse.Action):
    """``--version``, reading the installed version only when asked (importlib.metadata is slow)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        parser.exit(message=f"det-airflow {master.client_version()}\n")


# How Determined's CLI names each noun it shares with det: a name and its aliases, ``|`` marking
# the prefixes that are aliases too ("e|xperiment": experiment, alias e). Its ``det --help`` lists
# the nouns in the order of these names; nouns missing here sort by their own name.
DETERMINED_NOUNS = {
    "agent": "a|gent",
    "checkpoint": "c|heckpoint",
    "command": "command cmd",
    "experiment": "e|xperiment",
    "job": "j|ob",
    "model": "m|odel",
    "project": "p|roject",
    "slot": "s|lot",
    "template": "template tpl",
    "trial": "t|rial",
    "user": "u|ser",
    "webhook": "webhook",
    "workspace": "w|orkspace",
}
# det-airflow's own nouns, which Determined has not: listed after Determined's.
OWN_NOUNS = ("admin",)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="det", description="Determined AI experiments on Apache Airflow (det-airflow)."
    )
    parser.add_argument(
        "-u",
        "--user",
        metavar="username",
        help="run as this user: its stored login, else log in as it (asks the password)",
    )
    parser.add_argument(
        "-m",
        "--master",
        metavar="address",
        help=f"master address, host:port or URL (default: ${MASTER_ENV}, else localhost:8080)",
    )
    parser.add_argument("-v", "--version", action=_VersionAction)
    nouns = parser.add_subparsers(dest="noun", metavar="command", required=True)
    help_noun = nouns.add_parser("help", help="show help for this command")
    help_noun.set_defaults(func=lambda args: parser.print_help())
    for module in (
        agent,
        checkpoint,
        command,
        experiment,
        job,
        master,
        model,
        notebook,
        preview_search,
        project,
        shell,
        task,
        template,
        tensorboard,
        token,
        trial,
        user,
        webhook,
        workspace,
    ):
        module.register(nouns)
    master.register_version(nouns)
    admin.register(nouns)
    _order_as_determined(nouns)
    return parser


def _order_as_determined(nouns: argparse._SubParsersAction) -> None:
    """Lists the nouns in ``det --help`` as Determined's CLI does: ``help`` first, then by
    Determined's name of each (:data:`DETERMINED_NOUNS`), then det-airflow's own."""
    listed = nouns._choices_actions

    def key(action: argparse.Action) -> tuple[int, str]:
        name = action.dest
        if name == "help":
            return (0, "")
        if name in OWN_NOUNS:
            return (2, name)
        return (1, DETERMINED_NOUNS.get(name, name))

    listed.sort(key=key)


def _print_error(exc: DetError) -> None:
    if isinstance(exc, ConfigError) and len(exc.problems) > 1:
        where = f" in {exc.source}" if exc.source else ""
        print(
            render.clean(f"Error: the experiment configuration{where} has {len(exc.problems)} problems:"),
            file=sys.stderr,
        )
        for path, message in exc.problems:
            print(render.clean(f"  {path}: {message}" if path else f"  {message}"), file=sys.stderr)
        return
    print(render.clean(f"Error: {exc}"), file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs one ``det`` command; returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, usage errors
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    from det_airflow.api._http import DEFAULT_MASTER, normalize_master_url, request_timeout

    args.master = normalize_master_url(args.master or os.environ.get(MASTER_ENV) or DEFAULT_MASTER)
    user.act_as(args.user)
    try:
        # Said before the command starts: one that reports an unreachable master and goes on
        # (`det version`) would otherwise pass a bad DET_REQUEST_TIMEOUT off as the master's fault.
        request_timeout()
        return args.func(args) or 0
    except DetError as exc:
        _print_error(exc)
        return EXIT_ERROR
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):  # `det e list | head`: the reader left, nothing to say
            _silence_stdout()
            return EXIT_ERROR
        print(render.clean(f"Error: {exc}"), file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _silence_stdout() -> None:
    # Python flushes stdout at exit; pointing it at /dev/null avoids a second BrokenPipeError there.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
