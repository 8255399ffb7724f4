"""``det experiment|e ...``: create, list, describe, follow and change experiments."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from det_airflow.cli import checkpoint as checkpoint_cli
from det_airflow.cli import experiment_download, experiment_settings, render
from det_airflow.cli import job as job_cli
from det_airflow.cli.logs import add_log_arguments, show_logs_from_args, show_trial_logs
from det_airflow.errors import ConfigError, DetError
from det_airflow.states import TERMINAL_EXPERIMENT_STATES, ExperimentState

if TYPE_CHECKING:
    from det_airflow.api.models import HparamImportance
    from det_airflow.api.user import Experiment, Trial, UserClient

# Seconds between two looks at an experiment while following it; tests shorten it.
POLL_INTERVAL = 1.0

LIST_HEADERS = ("ID", "Owner", "Name", "Parent ID", "State", "Progress", "Started", "Ended", "Resource Pool")
LIST_TRIALS_HEADERS = ("Trial ID", "State", "H-Params", "Started", "Ended", "# of Batches")
DESCRIBE_HEADERS = (
    "Experiment ID",
    "State",
    "Progress",
    "Started",
    "Ended",
    "Name",
    "Description",
    "Archived",
    "Resource Pool",
    "Labels",
)
DESCRIBE_TRIAL_HEADERS = (
    "Trial ID",
    "Experiment ID",
    "State",
    "Started",
    "Ended",
    "H-Params",
    "# of Batches",
)
# `det experiment compare`: these, one column per hyperparameter between State and the metric.
COMPARE_HEADERS = ("Trial ID", "Experiment ID", "State")
COMPARE_METRIC_HEADERS = ("Searcher Metric", "Best Validation", "# of Batches")
COMPARE_MAX = 10

# verb -> (UserClient method, what the CLI prints)
_LIFECYCLE = {
    "pause": ("pause_experiment", "Paused"),
    "activate": ("activate_experiment", "Activated"),
    "cancel": ("cancel_experiment", "Canceled"),
    "kill": ("kill_experiment", "Killed"),
    "archive": ("archive_experiment", "Archived"),
    "unarchive": ("unarchive_experiment", "Unarchived"),
}


def register(subparsers: argparse._SubParsersAction) -> None:
    noun = subparsers.add_parser("experiment", aliases=["e"], help="manage experiments")
    verbs = noun.add_subparsers(dest="verb", metavar="VERB", required=True)

    create = verbs.add_parser("create", help="create an experiment")
    create.add_argument("config_file", metavar="CONFIG", help="experiment configuration (YAML)")
    create.add_argument("context", metavar="CONTEXT", nargs="?", help="folder of the training code")
    create.add_argument(
        "-f", "--follow-first-trial", action="store_true", help="stream the first trial's logs until it ends"
    )
    create.add_argument("--paused", action="store_true", help="create the experiment paused")
    create.add_argument(
        "-t",
        "--test-mode",
        "--test",
        dest="test_mode",
        action="store_true",
        help="with --local: a compressed run (one trial, one batch, a validation, a checkpoint)",
    )
    create.add_argument(
        "--local", action="store_true", help="with --test-mode: run one trial on this machine, no master"
    )
    create.add_argument(
        "--config",
        dest="config_overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field, e.g. searcher.max_trials=4 (repeatable)",
    )
    create.add_argument(
        "-i",
        "--include",
        action="append",
        default=[],
        metavar="PATH",
        help="also send this file or folder with the context (repeatable)",
    )
    create.add_argument(
        "--template",
        metavar="NAME",
        help="your config template (else the shared one) that the master lays under the config (det template)",
    )
    create.add_argument(
        "--project_id",
        "--project-id",
        dest="project_id",
        type=job_cli._positive_int,
        metavar="ID",
        help="create the experiment in this project (det project list WORKSPACE shows the IDs)",
    )
    create.set_defaults(func=_create)

    ls = verbs.add_parser("list", aliases=["ls"], help="list experiments")
    ls.add_argument("--all", "-a", action="store_true", help="include archived experiments")
    add_pagination_arguments(ls, "experiments")
    render.add_output_flags(ls)
    ls.set_defaults(func=_list)

    lt = verbs.add_parser("list-trials", aliases=["lt"], help="list an experiment's trials")
    _add_id(lt)
    add_pagination_arguments(lt, "trials")
    render.add_output_flags(lt)
    lt.set_defaults(func=_list_trials)

    describe = verbs.add_parser("describe", help="show experiments and their trials")
    describe.add_argument(
        "experiment_ids",
        metavar="IDS",
        type=id_list,
        help="comma-separated list of experiment IDs to describe, e.g. 1,2",
    )
    describe.add_argument("--metrics", action="store_true", help="add the trials' latest metrics")
    describe.add_argument(
        "--states", action="store_true", help="add every state the experiment took, when and why"
    )
    describe.add_argument(
        "--importance",
        nargs="?",
        const="",
        metavar="METRIC",
        help="add each hyperparameter's importance for METRIC (default: the searcher metric)",
    )
    render.add_output_flags(describe)
    describe.set_defaults(func=_describe)

    compare = verbs.add_parser(
        "compare", help="one table of the trials of several experiments: hyperparameters and best metric"
    )
    compare.add_argument(
        "compare_ids",
        metavar="ID",
        nargs="+",
        type=id_list,
        help=f"2 to {COMPARE_MAX} experiment IDs, separated by spaces or commas (1 2 or 1,2)",
    )
    render.add_output_flags(compare)
    compare.set_defaults(func=_compare)

    config = verbs.add_parser("config", help="show the experiment's configuration (defaults filled)")
    _add_id(config)
    config.set_defaults(func=_config)

    wait = verbs.add_parser("wait", help="wait until the experiment ends; exit 1 unless COMPLETED")
    _add_id(wait)
    wait.add_argument(
        "--polling-interval", type=float, default=5.0, metavar="SECONDS", help="seconds between checks"
    )
    wait.set_defaults(func=_wait)

    logs = verbs.add_parser("logs", help="show the logs of the experiment's first trial")
    _add_id(logs)
    add_log_arguments(logs)
    logs.set_defaults(func=_logs)

    for verb in _LIFECYCLE:
        parser = verbs.add_parser(verb, help=f"{verb} an experiment")
        _add_id(parser)
        parser.set_defaults(func=_lifecycle, action=verb)

    move = verbs.add_parser("move", help="move an experiment into another project")
    _add_id(move)
    move.add_argument("workspace_name", help="name of the destination workspace")
    move.add_argument("project_name", help="name of the destination project")
    move.set_defaults(func=_move)

    delete = verbs.add_parser("delete", help="delete an experiment with its logs, metrics and checkpoints")
    _add_id(delete)
    delete.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    delete.set_defaults(func=_delete)

    list_checkpoints = verbs.add_parser("list-checkpoints", help="list an experiment's checkpoints")
    checkpoint_cli.add_list_arguments(list_checkpoints)

    experiment_download.register(verbs)

    model_def = verbs.add_parser(
        "download-model-def", help="download the experiment's context (model definition) as a tar.gz"
    )
    _add_id(model_def)
    model_def.add_argument(
        "--output-dir", default=".", metavar="DIR", help="folder to write the file into (default: here)"
    )
    model_def.set_defaults(func=_download_model_def)

    cont = verbs.add_parser(
        "continue",
        help="continue the trial of a finished single-trial experiment, as a new experiment",
    )
    _add_id(cont)
    cont.add_argument(
        "--config",
        dest="config_overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field, e.g. searcher.max_length.batches=2000 (repeatable)",
    )
    cont.add_argument("--config-file", help="a config file whose fields replace the experiment's")
    cont.add_argument(
        "-f", "--follow-first-trial", action="store_true", help="stream the trial's logs until it ends"
    )
    cont.set_defaults(func=_continue)

    label = verbs.add_parser("label", help="add or remove an experiment's labels")
    label_verbs = label.add_subparsers(dest="label_verb", metavar="VERB", required=True)
    for verb, help_text in (("add", "add a label"), ("remove", "remove a label")):
        parser = label_verbs.add_parser(verb, help=help_text)
        _add_id(parser)
        parser.add_argument("label", metavar="LABEL")
        parser.set_defaults(func=_label)

    set_ = verbs.add_parser(
        "set",
        help="change an experiment's name, description, priority, weight, max-slots, gc-policy or log-retention",
    )
    set_verbs = set_.add_subparsers(dest="field", metavar="FIELD", required=True)
    for field in ("description", "name"):
        parser = set_verbs.add_parser(field, help=f"set the experiment's {field}")
        _add_id(parser)
        parser.add_argument("value", metavar=field.upper())
        parser.set_defaults(func=_set)
    job_cli.add_queue_fields(set_verbs)
    experiment_settings.add_set_verbs(set_verbs)


def _add_id(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("experiment_id", metavar="ID", type=int, help="experiment ID")


def id_list(text: str) -> list[int]:
    """``1,2,3`` as IDs, as Determined's verbs that take several take them."""
    try:
        ids = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated IDs such as 1,2, got {text!r}") from None
    if any(i < 1 for i in ids):
        raise argparse.ArgumentTypeError(f"IDs are 1 or more, got {text!r}")
    return list(dict.fromkeys(ids))


def add_pagination_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    """Determined's ``--limit`` / ``--offset`` of a listing (applied to the ordered listing)."""
    parser.add_argument("--limit", type=job_cli._positive_int, metavar="N", help=f"show at most N {what}")
    parser.add_argument(
        "--offset", type=_non_negative, default=0, metavar="N", help=f"skip the first N {what}"
    )


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def page(items: list[Any], args: argparse.Namespace) -> list[Any]:
    """The slice ``--offset`` / ``--limit`` select."""
    end = None if args.limit is None else args.offset + args.limit
    return items[args.offset : end]


def _connect(args: argparse.Namespace) -> UserClient:
    from det_airflow.cli.user import connect

    return connect(args.master)


def _move(args: argparse.Namespace) -> None:
    _connect(args).move_experiment(args.experiment_id, args.workspace_name, args.project_name)
    print(
        f'Moved experiment {args.experiment_id} to project "{args.project_name}" '
        f'of workspace "{args.workspace_name}".'
    )


# --- create ----------------------------------------------------------------------------------------


def _create(args: argparse.Namespace) -> int:
    if args.template and args.local:
        raise DetError("--template is laid under the config by the master: it cannot be used with --local")
    if args.project_id is not None and args.local:
        raise DetError("--project_id places the experiment on the master: it cannot be used with --local")
    if args.local and not args.test_mode:
        raise DetError("--local requires --test-mode")
    if args.test_mode and not args.local:
        raise DetError("--test-mode runs on this machine only: use --local --test-mode")
    if args.follow_first_trial and args.paused:
        raise DetError("--follow-first-trial cannot be used with --paused: the first trial would never start")
    if args.include and not args.context:
        raise DetError("--include needs a context directory (the CONTEXT argument)")

    import yaml

    from det_airflow.config import load_config

    if args.template:
        # The config may leave to the template what it needs: the master checks the two merged.
        config_text = _config_text_under_template(args.config_file, args.config_overrides)
    else:
        cfg = load_config(args.config_file, overrides=args.config_overrides)
        for warning in cfg.warnings:  # fields accepted but not acted on: said once, never silently
            print(f"Warning: {warning}", file=sys.stderr, flush=True)
        if args.config_overrides:
            config_text = yaml.safe_dump(cfg.raw, sort_keys=False)
        else:
            with open(args.config_file, encoding="utf-8") as f:  # as written, comments included
                config_text = f.read()

    if args.local:
        from det_airflow.cli.local_test_mode import run_local_test

        return run_local_test(cfg, args.context, includes=args.include)

    context = None
    if args.context:
        import base64

        from det_airflow.context_archive import format_size, pack_context

        packed = pack_context(args.context, includes=args.include)
        print(
            f"Preparing files ({packed.directory.absolute()}) to send to master... "
            f"{format_size(packed.size)} and {packed.file_count} files",
            flush=True,
        )
        context = base64.b64encode(packed.data).decode("ascii")

    from det_airflow.api.user import new_request_id

    client = _connect(args)
    # One id for this invocation: a resend after a lost answer cannot create a second experiment.
    experiment = client.create_experiment(
        config_text,
        context,
        paused=args.paused,
        request_id=new_request_id(),
        template=args.template,
        project_id=args.project_id,
    )
    print(f"Created experiment {experiment.id}", flush=True)
    if args.follow_first_trial:
        return follow_first_trial(client, experiment.id)
    return 0


def _config_text_under_template(path: str, overrides: list[str]) -> str:
    """The config file's text, with ``--config`` overrides applied, read but not yet validated."""
    import yaml

    from det_airflow.config import apply_overrides, read_yaml

    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ConfigError([("", f"cannot read the file: {exc.strerror}")], source=path) from None
    except UnicodeDecodeError:
        raise ConfigError([("", "cannot read the file: it is not UTF-8 text")], source=path) from None
    if not overrides:
        return text
    data = read_yaml(text, path)
    if not isinstance(data, dict):
        raise ConfigError([("", "expected a mapping of fields at the top level")], source=path)
    problems = apply_overrides(data, overrides)
    if problems:
        raise ConfigError(problems, source=path)
    return yaml.safe_dump(data, sort_keys=False)


def follow_first_trial(client: UserClient, experiment_id: int) -> int:
    """Streams the first trial's logs until it ends, then waits for the experiment to end.

    Returns the exit status: 0 only when the experiment COMPLETED.
    """
    print("Waiting for first trial to begin...", flush=True)
    while True:
        detail = client.get_experiment(experiment_id)
        if detail.trials:
            break
        if detail.experiment.state in TERMINAL_EXPERIMENT_STATES:
            return _report_end(detail.experiment)
        time.sleep(POLL_INTERVAL)
    first = min(trial.id for trial in detail.trials)
    print(f"Following first trial with ID {first}", flush=True)
    show_trial_logs(client, first, follow=True)
    return _report_end(wait_for_experiment(client, experiment_id, POLL_INTERVAL))


def wait_for_experiment(client: UserClient, experiment_id: int, interval: float) -> Experiment:
    """Polls until the experiment reaches a terminal state; returns it."""
    while True:
        experiment = client.get_experiment(experiment_id).experiment
        if experiment.state in TERMINAL_EXPERIMENT_STATES:
            return experiment
        time.sleep(interval)


def _report_end(experiment: Experiment) -> int:
    state = render.format_state(experiment.state)
    print(render.clean(f"Experiment {experiment.id} ended in state {state}"), flush=True)
    if state == ExperimentState.COMPLETED:
        return 0
    if experiment.error:
        print(render.clean(f"Error: {experiment.error}"), file=sys.stderr)
    return 1


# --- reading ---------------------------------------------------------------------------------------


def _list(args: argparse.Namespace) -> None:
    experiments = page(sorted(_connect(args).list_experiments(all=args.all), key=lambda e: e.id), args)
    if args.json:
        render.print_json(experiments)
        return
    headers = list(LIST_HEADERS)
    if args.all:
        headers.append("Archived")
    rows = []
    for e in experiments:
        row: list[Any] = [
            e.id,
            e.owner,
            e.name,
            e.parent_id,
            render.format_state(e.state),
            render.format_percent(e.progress),
            render.format_time(e.start_time),
            render.format_time(e.end_time),
            e.resource_pool,
        ]
        if args.all:
            row.append(e.archived)
        rows.append(row)
    render.print_table(headers, rows, csv=args.csv)


def _trial_rows(trials: list[Trial]) -> list[list[Any]]:
    return [
        [
            t.id,
            render.format_state(t.state),
            render.format_json_cell(t.hparams or {}),
            render.format_time(t.start_time),
            render.format_time(t.end_time),
            t.total_batches,
        ]
        for t in sorted(trials, key=lambda t: t.id)
    ]


def _list_trials(args: argparse.Namespace) -> None:
    trials = page(sorted(_connect(args).list_trials(args.experiment_id), key=lambda t: t.id), args)
    if args.json:
        render.print_json(trials)
        return
    render.print_table(LIST_TRIALS_HEADERS, _trial_rows(trials), csv=args.csv)


def _describe(args: argparse.Namespace) -> None:
    """One Experiment table and one Trials table for every ID given; ``--json`` answers the one
    experiment's object, or a list of them when several IDs were given."""
    client = _connect(args)
    details = [client.get_experiment(experiment_id) for experiment_id in args.experiment_ids]
    changes = (
        [client.state_changes("experiment", experiment_id) for experiment_id in args.experiment_ids]
        if args.states
        else None
    )
    importances = (
        [
            client.hyperparameter_importance(experiment_id, metric=args.importance or None)
            for experiment_id in args.experiment_ids
        ]
        if args.importance is not None
        else None
    )
    if args.json:
        docs: list[Any] = []
        for i, d in enumerate(details):
            doc: Any = d
            if changes is not None or importances is not None:
                doc = d.model_dump(mode="json")
                if changes is not None:
                    doc["state_changes"] = changes[i]
                if importances is not None:
                    doc["hyperparameter_importance"] = importances[i].model_dump(mode="json")
            docs.append(doc)
        render.print_json(docs[0] if len(docs) == 1 else docs)
        return
    if not args.csv:
        print("Experiment:")
    render.print_table(
        DESCRIBE_HEADERS,
        [
            [
                e.id,
                render.format_state(e.state),
                render.format_percent(e.progress),
                render.format_time(e.start_time),
                render.format_time(e.end_time),
                e.name,
                e.description,
                e.archived,
                e.resource_pool,
                ", ".join(sorted(e.labels or [])),
            ]
            for e in (d.experiment for d in details)
        ],
        csv=args.csv,
    )

    trials = [t for d in details for t in sorted(d.trials, key=lambda t: t.id)]
    headers = list(DESCRIBE_TRIAL_HEADERS)
    training_names: list[str] = []
    validation_names: list[str] = []
    if args.metrics:
        training_names = _metric_names(trials, "training")
        validation_names = _metric_names(trials, "validation")
        headers += [f"Training Metric: {name}" for name in training_names]
        headers += [f"Validation Metric: {name}" for name in validation_names]
    rows = []
    for t in trials:
        row: list[Any] = [
            t.id,
            t.experiment_id,
            render.format_state(t.state),
            render.format_time(t.start_time),
            render.format_time(t.end_time),
            render.format_json_cell(t.hparams or {}),
            t.total_batches,
        ]
        row += [_summary_value(t, "training", name) for name in training_names]
        row += [_summary_value(t, "validation", name) for name in validation_names]
        rows.append(row)
    if not args.csv:
        print("\nTrials:")
    render.print_table(headers, rows, csv=args.csv)
    for found in changes or []:
        render.print_state_changes(found, csv=args.csv)
    for experiment_id, importance in zip(args.experiment_ids, importances or [], strict=False):
        _print_importance(experiment_id, importance, csv=args.csv)


def _compare(args: argparse.Namespace) -> None:
    """The trials of 2 to COMPARE_MAX experiments side by side, as the web UI's Compare page lists
    them: hyperparameters by dotted name (the union; blank where a trial has none) and each trial's
    best validation of its experiment's searcher metric."""
    ids = list(dict.fromkeys(i for group in args.compare_ids for i in group))
    if not 2 <= len(ids) <= COMPARE_MAX:
        raise DetError(f"compare takes 2 to {COMPARE_MAX} different experiment IDs, got {len(ids)}")
    client = _connect(args)
    details = [client.get_experiment(experiment_id) for experiment_id in ids]
    trials = [(d, t) for d in details for t in sorted(d.trials, key=lambda t: t.id)]
    flat = {t.id: flatten_hparams(t.hparams or {}) for _, t in trials}
    names = sorted({name for hparams in flat.values() for name in hparams})
    rows: list[dict[str, Any]] = []
    for d, t in trials:
        best = t.best_validation.metric if t.best_validation else None
        rows.append(
            {
                "trial_id": t.id,
                "experiment_id": t.experiment_id,
                "state": t.state,
                "hparams": flat[t.id],
                "searcher_metric": d.experiment.searcher_metric,
                "best_validation": best,
                "batches": t.total_batches,
            }
        )
    if args.json:
        render.print_json(rows)
        return
    render.print_table(
        [*COMPARE_HEADERS, *names, *COMPARE_METRIC_HEADERS],
        [
            [
                row["trial_id"],
                row["experiment_id"],
                render.format_state(row["state"]),
                *(_hparam_cell(row["hparams"], name) for name in names),
                row["searcher_metric"],
                row["best_validation"],
                row["batches"],
            ]
            for row in rows
        ],
        csv=args.csv,
    )


def flatten_hparams(hparams: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested hyperparameters as dotted names (``optimizer.lr``), as the web UI shows them."""
    flat: dict[str, Any] = {}
    for key, value in hparams.items():
        name = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict):
            flat.update(flatten_hparams(value, name))
        else:
            flat[name] = value
    return flat


def _hparam_cell(hparams: dict[str, Any], name: str) -> Any:
    value = hparams.get(name)
    return json.dumps(value) if isinstance(value, list) else value


def _print_importance(experiment_id: int, importance: HparamImportance, *, csv: bool) -> None:
    """Determined's hyperparameter importance: one row per searched hyperparameter, most important
    first; constants and the reason for an empty table below it."""
    evaluator = "fANOVA" if importance.evaluator == "fanova" else "PED-ANOVA"
    if not csv:
        print(
            f"\nHyperparameter importance of experiment {experiment_id} for {importance.metric} ({evaluator}, {importance.trials} trials):"
        )
    render.print_table(
        ["Hyperparameter", "Importance"],
        [[item.name, f"{item.importance:.3f}"] for item in importance.importances],
        csv=csv,
    )
    if not csv:
        if importance.note:
            print(importance.note)
        if importance.constants:
            print(f"Constant (left out): {', '.join(importance.constants)}")


def _metric_names(trials: list[Trial], group: str) -> list[str]:
    names: set[str] = set()
    for t in trials:
        names.update((t.summary_metrics or {}).get(group) or {})
    # The master's summary of a group is {steps_completed, **latest metrics}.
    names.discard("steps_completed")
    return sorted(names)


def _summary_value(trial: Trial, group: str, name: str) -> Any:
    value = ((trial.summary_metrics or {}).get(group) or {}).get(name)
    # Determined-style summaries hold {min, max, last, ...}; ours may hold the latest value only.
    if isinstance(value, dict):
        return value.get("last")
    return value


def _config(args: argparse.Namespace) -> None:
    import yaml

    config = _connect(args).get_experiment_config(args.experiment_id)
    sys.stdout.write(render.clean(yaml.safe_dump(config, default_flow_style=False, sort_keys=False)))


def _wait(args: argparse.Namespace) -> int:
    return _report_end(wait_for_experiment(_connect(args), args.experiment_id, args.polling_interval))


def _logs(args: argparse.Namespace) -> None:
    client = _connect(args)
    trials = client.list_trials(args.experiment_id)
    if not trials:
        raise DetError(f"experiment {args.experiment_id} has no trials yet")
    show_logs_from_args(client, min(t.id for t in trials), args)


# --- changing --------------------------------------------------------------------------------------


def _lifecycle(args: argparse.Namespace) -> None:
    method, done = _LIFECYCLE[args.action]
    getattr(_connect(args), method)(args.experiment_id)
    print(f"{done} experiment {args.experiment_id}")


def _delete(args: argparse.Namespace) -> int:
    if not args.yes:
        if not sys.stdin.isatty():
            raise DetError(f"not deleting experiment {args.experiment_id} without confirmation: pass --yes")
        answer = input(
            "Deleting an experiment removes its logs, metrics, checkpoints and other records for good.\n"
            "For a recoverable alternative, see `det e archive`. Delete experiment "
            f"{args.experiment_id}? [y/N] "
        )
        if answer.strip().lower() not in ("y", "yes"):
            print("Aborting experiment deletion.")
            return 0
    deleted = _connect(args).delete_experiment(args.experiment_id)
    print(f"Deleted experiment {args.experiment_id}")
    if deleted.removing:
        print(render.clean(f"Removing in the background: {'; '.join(deleted.removing)}"))
    for what in deleted.not_removed:
        print(render.clean(f"not removed: {what}"), file=sys.stderr)
    return 1 if deleted.not_removed else 0


def _label(args: argparse.Namespace) -> None:
    client = _connect(args)
    label = render.clean(args.label)
    if args.label_verb == "add":
        client.add_label(args.experiment_id, args.label)
        print(f"Added label '{label}' to experiment {args.experiment_id}")
    else:
        client.remove_label(args.experiment_id, args.label)
        print(f"Removed label '{label}' from experiment {args.experiment_id}")


def _set(args: argparse.Namespace) -> None:
    if args.field == "name" and not args.value.strip():
        raise DetError("an experiment's name cannot be empty")
    _connect(args).update_experiment(args.experiment_id, **{args.field: args.value})
    print(f"Set {args.field} of experiment {args.experiment_id} to '{render.clean(args.value)}'")


# --- the experiment's files, and continuing it -------------------------------------------------------


def model_def_name(experiment_id: int) -> str:
    return f"experiment_{experiment_id}_model_def.tgz"


def _download_model_def(args: argparse.Namespace) -> None:
    from pathlib import Path

    folder = Path(args.output_dir)
    if not folder.is_dir():
        raise DetError(f"--output-dir {args.output_dir}: no such folder")
    data = _connect(args).get_experiment_context(args.experiment_id)
    if not data:
        raise DetError(f"experiment {args.experiment_id} was created without a context: nothing to download")
    target = folder / model_def_name(args.experiment_id)
    target.write_bytes(data)
    print(render.clean(f"Wrote the model definition of experiment {args.experiment_id} to {target}"))


def _continue(args: argparse.Namespace) -> int:
    """Determined continues the trial in place; det-airflow's master has no route for that, so this
    creates a new experiment from the source's config and context whose single trial warm-starts from
    the source trial's latest checkpoint (``searcher.source_trial_id``)."""
    import base64

    import yaml

    from det_airflow.api.user import new_request_id
    from det_airflow.config import parse_config

    client = _connect(args)
    detail = client.get_experiment(args.experiment_id)
    source = detail.experiment
    if source.state not in TERMINAL_EXPERIMENT_STATES:
        raise DetError(
            f"experiment {source.id} is {render.format_state(source.state)}; only a finished experiment "
            "can be continued (wait for it, or cancel it)"
        )
    if len(detail.trials) != 1:
        raise DetError(
            f"experiment {source.id} has {len(detail.trials)} trials; det e continue continues a "
            "single-trial experiment: fork a search with `det e create` and searcher.source_trial_id"
        )
    trial = detail.trials[0]
    if not trial.latest_checkpoint:
        raise DetError(f"trial {trial.id} of experiment {source.id} has no checkpoint to continue from")
    config = client.get_experiment_config(source.id)
    if args.config_file:
        with open(args.config_file, encoding="utf-8") as f:
            extra = yaml.safe_load(f) or {}
        if not isinstance(extra, dict):
            raise DetError(f"--config-file {args.config_file}: expected a YAML mapping of config fields")
        config = _merge(config, extra)
    searcher = config.setdefault("searcher", {})
    searcher.pop("source_checkpoint_uuid", None)  # the continued trial is the one warm start
    searcher["source_trial_id"] = trial.id
    cfg = parse_config(
        config,
        source_name=f"the config of experiment {source.id} with your changes",
        overrides=args.config_overrides,
    )
    for warning in cfg.warnings:
        print(f"Warning: {warning}", file=sys.stderr, flush=True)
    context_bytes = client.get_experiment_context(source.id)
    context = base64.b64encode(context_bytes).decode("ascii") if context_bytes else None
    created = client.create_experiment(
        yaml.safe_dump(cfg.raw, sort_keys=False), context, paused=False, request_id=new_request_id()
    )
    print(f"Continuing trial {trial.id} of experiment {source.id} as experiment {created.id}", flush=True)
    if args.follow_first_trial:
        return follow_first_trial(client, created.id)
    return 0


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged
