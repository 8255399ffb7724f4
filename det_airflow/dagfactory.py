"""Compiles experiment YAMLs under the DAGs folder into experiment DAGs.

Shape of a `det experiment create` experiment (stored by the master at submission):
``trial.expand(slot=[0..n))`` → ``finalize``; of a YAML dropped into the DAGs folder (each run a new
experiment): ``register`` → ``searcher`` → ``trial.expand(slot=...)`` → ``finalize``. Each trial slot
runs trial after trial, so there are only as many slots as trials that can run at once
(`concurrent_slot_count`). Everything shared by an experiment's trials (pool, pool slots, priority,
retries) is set once on the mapped trial task, which is exactly Determined's per-experiment
``slots_per_trial``, ``priority`` and ``max_restarts``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from det_airflow import settings
from det_airflow.airflow_text import markdown_text, plain_text, plain_values
from det_airflow.config import (
    MAX_CONFIG_BYTES,
    ExperimentConfig,
    is_experiment_mapping,
    parse_config,
    priority_weight,
    read_yaml,
)
from det_airflow.errors import ConfigError, DetError
from det_airflow.lineage import experiment_asset_uri
from det_airflow.searcher import concurrent_slot_count

EXPERIMENTS_SUBDIR = "experiments"  # where the master writes the configs of `det experiment create`
# Under EXPERIMENTS_SUBDIR: configs of finished experiments, built only as finished_dag()s.
FINISHED_SUBDIR = "finished"
_MASTER_FILE = re.compile(r"^exp_(\d+)$")  # the stem of experiment_file()
_YAML_SUFFIXES = (".yaml", ".yml")
_START = datetime(2024, 1, 1, tzinfo=UTC)


#: The task of an invalid experiment YAML's DAG (broken_dag()).
INVALID_TASK_ID = "invalid_config"
#: The task of a finished experiment's DAG (finished_dag()).
FINISHED_TASK_ID = "finished"
_SEARCHER_LINE = re.compile(r"^searcher\s*:", re.MULTILINE)


# The master's second line in experiment_file(): who submitted the experiment, and when.
_SUBMISSION_LINE = "# det-submission: "


@dataclasses.dataclass(frozen=True)
class Submission:
    owner: str
    submitted: datetime
    # The trial slots the DAG maps, counted by the master at submission (it reads the pool's size,
    # which parsing cannot); None in files of older versions: the DAG counts without the pool.
    trial_slots: int | None = None


# Under FAB's auth manager: the role through which an experiment's owner (and nobody else but
# admins) edits its DAG, its runs and its task instances. The master creates it, with the owner in
# it, before it writes the experiment's file; FAB's global DAG edit leaves the User role
# (`det admin migrate`), so the per-DAG grant below is what lets a user change a DAG.
OWNER_ROLE_PREFIX = "det-owner-"
_ROLE_NAME_MAX = 64  # FAB's ab_role.name
OWNER_DAG_ACCESS: dict[str, set[str]] = {
    "DAGs": {"can_read", "can_edit", "can_delete"},
    "DAG Runs": {"can_read", "can_create", "can_delete", "menu_access"},
}


def owner_role(owner: str) -> str:
    """The FAB role of `owner`'s experiment DAGs (a hash stands in for a name too long for FAB)."""
    import hashlib

    name = OWNER_ROLE_PREFIX + owner
    if len(name) <= _ROLE_NAME_MAX:
        return name
    return (
        OWNER_ROLE_PREFIX
        + hashlib.sha256(owner.encode()).hexdigest()[: _ROLE_NAME_MAX - len(OWNER_ROLE_PREFIX)]
    )


def uses_fab() -> bool:
    """Whether Airflow's auth manager is FAB's, the one with per-DAG permissions."""
    from airflow.sdk import conf

    return "FabAuthManager" in (conf.get("core", "auth_manager", fallback="") or "")


def dag_access_control(file: ExperimentFile, submission: Submission | None) -> dict[str, Any] | None:
    """The DAG's `access_control`: under FAB, edit for its owner's role only (admins edit every DAG).

    None elsewhere: the DAG of a dropped YAML (no owner) or of a file without its submission line
    keeps what an admin granted in FAB (by default nobody but admins edits it); the simple auth
    manager has no per-DAG permissions.
    """
    if file.experiment_id is None or submission is None or not uses_fab():
        return None
    return {owner_role(submission.owner): {k: set(v) for k, v in OWNER_DAG_ACCESS.items()}}


def submission_header(owner: str, submitted: datetime, trial_slots: int | None = None) -> str:
    """The comment line the master writes into experiment_file(); read back by read_submission()."""
    stamp = submitted if submitted.tzinfo else submitted.replace(tzinfo=UTC)
    fields: dict[str, object] = {"owner": owner, "submitted": stamp.isoformat()}
    if trial_slots is not None:
        fields["trial_slots"] = trial_slots
    return _SUBMISSION_LINE + json.dumps(fields) + "\n"


def read_submission(text: str) -> Submission | None:
    """Who submitted the experiment of a master-written file (its text), and when; None when it does
    not say (files of older versions), and the DAG then keeps its neutral defaults."""
    for line in text.split("\n", 2)[:2]:
        if line.startswith(_SUBMISSION_LINE):
            try:
                fields = json.loads(line.removeprefix(_SUBMISSION_LINE))
                slots = fields.get("trial_slots")
                return Submission(
                    str(fields["owner"]),
                    datetime.fromisoformat(fields["submitted"]),
                    slots if isinstance(slots, int) and not isinstance(slots, bool) and slots > 0 else None,
                )
            except (ValueError, KeyError, TypeError, AttributeError):
                return None
    return None


def experiment_page(experiment_id: int) -> str:
    """The experiment's page in the det web UI, under Airflow's base URL."""
    from urllib.parse import urlsplit

    from airflow.sdk import conf

    base = urlsplit(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")
    return f"{base}/det/ui/#/experiments/{experiment_id}"


@dataclasses.dataclass(frozen=True)
class ExperimentFile:
    path: Path
    dag_id: str
    experiment_id: int | None  # set for configs the master wrote for `det experiment create`


def experiment_file(dags_folder: Path, experiment_id: int) -> Path:
    """Where the master writes the config of an experiment created with `det experiment create`."""
    return dags_folder / EXPERIMENTS_SUBDIR / f"exp_{experiment_id}.yaml"


def staged_experiment_file(dags_folder: Path, experiment_id: int) -> Path:
    """Where a new experiment's config waits, hidden from parses, until the master has written its
    DAG into Airflow's tables (``experiment_yamls`` skips dot files): the DAG processor and the
    master then never both insert the same new DAG."""
    final = experiment_file(dags_folder, experiment_id)
    return final.with_name("." + final.name)


def retire_experiment_file(dags_folder: Path, experiment_id: int) -> Path | None:
    """Moves a finished experiment's config where the DAG processor builds only a light DAG of it
    (finished_dag(), for the most recent ``[det] finished_experiment_dags``); returns the new path,
    or None when there was nothing to move.

    Its run (tasks, logs in Airflow, and everything the master stored) is kept, and its DAG stays
    listed, tagged ``finished``. So parse time grows with the experiments still to run and a bounded
    number of finished ones, not with every experiment ever created (benchmarks/dag_parse.py).
    """
    source = experiment_file(dags_folder, experiment_id)
    target = source.parent / FINISHED_SUBDIR / source.name
    target.parent.mkdir(exist_ok=True)
    try:
        os.replace(source, target)
    except FileNotFoundError:
        return None
    return target


def experiment_dag_id(experiment_id: int) -> str:
    """The DAG id of experiment_file(): `det_` + its stem."""
    return f"det_exp_{experiment_id}"


def dag_id_for_file(path: Path, dags_folder: Path) -> ExperimentFile:
    stem = path.stem
    relative = path.relative_to(dags_folder)
    match = _MASTER_FILE.match(stem)
    if match and relative.parts[0] == EXPERIMENTS_SUBDIR:
        experiment_id = int(match.group(1))
        return ExperimentFile(path, experiment_dag_id(experiment_id), experiment_id)
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", stem)
    return ExperimentFile(path, f"det_{safe}", None)


def experiment_yamls(dags_folder: Path) -> Iterator[Path]:
    finished = dags_folder / EXPERIMENTS_SUBDIR / FINISHED_SUBDIR
    for root, dirs, files in os.walk(dags_folder):
        dirs[:] = sorted(
            d for d in dirs if not d.startswith(".") and d != "__pycache__" and Path(root) / d != finished
        )
        for name in sorted(files):
            if name.endswith(_YAML_SUFFIXES) and not name.startswith("."):
                yield Path(root) / name


def trial_slots_problem(cfg: ExperimentConfig) -> tuple[str, str] | None:
    """A mapped task cannot expand past `[core] max_map_length`: Airflow would fail the run."""
    from airflow.sdk import conf

    needed, limit = concurrent_slot_count(cfg), conf.getint("core", "max_map_length", fallback=1024)
    if needed > limit:
        return (
            "searcher",
            f"needs {needed} trial slots (one per trial it runs at once) but Airflow's [core] "
            f"max_map_length is {limit}; set searcher.max_concurrent_trials to at most {limit}",
        )
    return None


def read_config_text(path: Path) -> str:
    with path.open(encoding="utf-8", errors="replace") as file:
        return file.read(MAX_CONFIG_BYTES + 1)  # read_yaml refuses anything longer


def load_experiment(path: Path, defaults: dict[str, str], text: str | None = None) -> ExperimentConfig | None:
    """The config in `path` (whose ``text``, when already read), or None when the YAML is not an
    experiment (no top-level `searcher`)."""
    if text is None:
        text = read_config_text(path)
    try:
        raw = read_yaml(text, str(path))
    except ConfigError:
        if not _SEARCHER_LINE.search(text):
            return None  # some other YAML we cannot read: not ours to report
        raise
    if not is_experiment_mapping(raw):
        return None
    cfg = parse_config(raw, source_name=str(path), airflow_defaults=defaults)
    problem = trial_slots_problem(cfg)
    if problem is not None:
        raise ConfigError([problem], source=str(path))
    return cfg


def check_runner_policy(path: Path, cfg: ExperimentConfig) -> None:
    """A YAML dropped into the DAGs folder asks its runner for no more than the cluster's runner
    policy allows (the master checked the configs it wrote when they were submitted; the runners
    check every trial again)."""
    from det_airflow import runner_policy
    from det_airflow.config import config_to_dict

    problems = runner_policy.check(config_to_dict(cfg), settings.load())
    if problems:
        raise runner_policy.PolicyError(problems, source=str(path))


# The label that marks a task's experiment (det_airflow.master.tasks), and the CLI verb of each type.
_TASK_LABEL = "det-task:"
_TASK_VERBS = {
    "command": "cmd run",
    "notebook": "notebook start",
    "tensorboard": "tensorboard start",
    "shell": "shell start",
    "generic": "task create",
}


def _task_type(labels: Iterable[object]) -> str | None:
    """The kind of task (notebook, tensorboard, ...) an experiment's labels make it, else None."""
    for label in labels:
        if (
            isinstance(label, str)
            and label.startswith(_TASK_LABEL)
            and label[len(_TASK_LABEL) :] in _TASK_VERBS
        ):
            return label[len(_TASK_LABEL) :]
    return None


def build_dag(file: ExperimentFile, cfg: ExperimentConfig, submission: Submission | None = None):  # type: ignore[no-untyped-def]
    from airflow.sdk import DAG, Asset

    from det_airflow.master.placement import node_ranks
    from det_airflow.operators import (
        FinalizeExperimentOperator,
        RegisterExperimentOperator,
        SearcherSensor,
        TrialNodeOperator,
        TrialOperator,
    )
    from det_airflow.operators.trial import SLOT_MAP_INDEX_TEMPLATE

    conn_id = cfg.airflow.master_conn_id
    # Every user-chosen text below goes through airflow_text: no control sequences, and in doc_md
    # (rendered as Markdown) no link or image of the user's.
    name = plain_text(cfg.name)
    task_type = _task_type(cfg.labels)
    if file.experiment_id is not None and task_type is not None:
        display_name = f"{name} ({task_type} {file.experiment_id})"
        kind = "generic task" if task_type == "generic" else task_type
        doc = f"A {kind} started with `det {_TASK_VERBS[task_type]}`: `det task logs {file.experiment_id}` follows it."
    elif file.experiment_id is not None:
        display_name = f"{name} (experiment {file.experiment_id})"
        doc = (
            f"Experiment **{markdown_text(cfg.name)}** ({file.experiment_id}): "
            f"[open its page]({experiment_page(file.experiment_id)}) for trials, curves and logs."
        )
    else:
        display_name = name
        doc = (
            f"Experiment **{markdown_text(cfg.name)}** compiled from {markdown_text(str(file.path))}; "
            "each run is one experiment."
        )
    with DAG(
        dag_id=file.dag_id,
        dag_display_name=display_name,
        params=_run_params(cfg) if file.experiment_id is None else None,
        # A `det experiment create` experiment runs exactly once: the master starts that run as it
        # writes the DAG (airflow_bridge.publish_experiment_dag). No schedule, so the scheduler
        # never makes a run of its own that could race the master's.
        schedule=None if file.experiment_id is not None else asset_schedule(cfg),
        start_date=run_due(submission.submitted) if submission else _START,
        catchup=False,
        is_paused_upon_creation=False,
        max_active_runs=1 if file.experiment_id is not None else 16,
        tags=["det", task_type] if task_type else ["det", plain_text(cfg.searcher.name)],
        description=plain_text(cfg.description or cfg.name)[:200],
        doc_md=doc,
        default_args={"owner": plain_text(submission.owner) if submission else "det"},
        access_control=dag_access_control(file, submission),
    ) as dag:
        trial_kwargs: dict[str, Any] = {
            "pool": cfg.resources.resource_pool or cfg.airflow.pool,
            "pool_slots": max(1, cfg.resources.slots_per_trial),
            "priority_weight": priority_weight(cfg.resources.priority),
            "weight_rule": "absolute",
            "retries": cfg.max_restarts,
            "retry_delay": timedelta(seconds=1),
            "master_conn_id": conn_id,
            "preemption_timeout": cfg.preemption_timeout,
        }
        if cfg.airflow.queue:
            trial_kwargs["queue"] = cfg.airflow.queue
        finalize_kwargs: dict[str, Any] = {
            "task_id": "finalize",
            "master_conn_id": conn_id,
            "trigger_rule": "all_done",
            "outlets": [Asset(experiment_asset_uri(file.dag_id), group="det")],
            "lineage_data": cfg.data,
        }
        if file.experiment_id is not None:
            # The master stored the experiment and started its search at submission: its trial slots
            # start the run, and the first one to ask links the run (no task starts before a trial).
            slots = (submission.trial_slots if submission else None) or concurrent_slot_count(cfg)
            trial = TrialOperator.partial(
                task_id="trial",
                experiment_id=file.experiment_id,
                map_index_template=SLOT_MAP_INDEX_TEMPLATE,
                **trial_kwargs,
            ).expand(slot=list(range(slots)))
            finalize = FinalizeExperimentOperator(experiment_id=file.experiment_id, **finalize_kwargs)
            trial >> finalize
            if ranks := node_ranks(cfg.resources.slots_per_trial):
                nodes = TrialNodeOperator.partial(
                    task_id="trial_node", experiment_id=file.experiment_id, **_node_kwargs(trial_kwargs)
                ).expand(slot=list(range(slots)), rank=ranks)
                nodes >> finalize
            return dag
        register = RegisterExperimentOperator(
            task_id="register",
            config_path=str(file.path),
            master_conn_id=conn_id,
            retries=2,
            retry_delay=timedelta(seconds=2),
        )
        searcher = SearcherSensor(
            task_id="searcher",
            experiment_id=register.output,
            master_conn_id=conn_id,
            retries=2,
            retry_delay=timedelta(seconds=2),
        )
        trial = TrialOperator.partial(
            task_id="trial",
            experiment_id=register.output,
            map_index_template=SLOT_MAP_INDEX_TEMPLATE,
            **trial_kwargs,
        ).expand(slot=searcher.output)
        finalize = FinalizeExperimentOperator(experiment_id=register.output, **finalize_kwargs)
        register >> searcher >> trial >> finalize
        if ranks := node_ranks(cfg.resources.slots_per_trial):
            nodes = TrialNodeOperator.partial(
                task_id="trial_node", experiment_id=register.output, **_node_kwargs(trial_kwargs)
            ).expand(slot=searcher.output, rank=ranks)
            searcher >> nodes >> finalize
    return dag


def asset_schedule(cfg: ExperimentConfig) -> list[Any] | None:
    """The schedule of a dropped YAML's DAG: its ``airflow.schedule`` Assets (a run, and so a new
    experiment, once every one has a new event), else none (runs are triggered)."""
    from airflow.sdk import Asset

    if not cfg.airflow.schedule:
        return None
    prefix = experiment_asset_uri("")
    # Another experiment's Asset is declared as its finalize task declares it.
    return [Asset(uri, group="det") if uri.startswith(prefix) else Asset(uri) for uri in cfg.airflow.schedule]


def _node_kwargs(trial_kwargs: dict[str, Any]) -> dict[str, Any]:
    """A node task's arguments: the trial slot's, but for its pool. The slot's task holds the whole
    gang's pool slots; a node task takes one slot of Airflow's default pool while it runs."""
    return {**trial_kwargs, "pool": "default_pool", "pool_slots": 1}


def _run_params(cfg: ExperimentConfig) -> dict[str, object]:
    """What a run of a dropped YAML may override (config.RUN_CONF_FIELDS), offered by Airflow's
    Trigger form with the YAML's values; the register task applies and validates them."""
    from airflow.sdk import Param

    from det_airflow.config import config_to_dict

    config = config_to_dict(cfg)
    searcher, resources = config.get("searcher") or {}, config.get("resources") or {}
    return {
        "description": Param(
            plain_values(cfg.description),
            type=["null", "string"],
            description="The experiment's description.",
        ),
        "hyperparameters": Param(
            plain_values(config.get("hyperparameters") or {}),
            type="object",
            description="Any hyperparameter of the YAML: a value, or a search range as in the YAML.",
        ),
        "searcher": Param(
            {"max_trials": searcher.get("max_trials"), "max_length": searcher.get("max_length")},
            type="object",
            description="searcher.max_trials and searcher.max_length.",
        ),
        "resources": Param(
            {"resource_pool": resources.get("resource_pool"), "priority": resources.get("priority")},
            type="object",
            description="resources.resource_pool and resources.priority (1-99, lower runs first).",
        ),
    }


def broken_dag(dag_id: str, path: Path, message: str):  # type: ignore[no-untyped-def]
    """The DAG of an experiment YAML that cannot be built: the YAML's own DAG id, tagged ``invalid``,
    its problems in its description and page, and one task that fails with them when triggered.

    Not an import error of the factory file: Airflow would then mark every experiment DAG of the
    file as failed to load, and one bad YAML would stop every experiment from starting."""
    from airflow.sdk import DAG

    from det_airflow.operators.invalid import InvalidExperimentOperator

    text = plain_text(message)
    lines = text.splitlines() or [text]
    with DAG(
        dag_id=dag_id,
        dag_display_name=f"{plain_text(path.name)} (invalid)",
        schedule=None,
        start_date=_START,
        catchup=False,
        is_paused_upon_creation=False,
        tags=["det", "invalid"],
        description=lines[0][:200],
        # An indented block: shown as written, nothing in it read as Markdown.
        doc_md="**Invalid experiment YAML.** Fix the file; this DAG becomes the experiment at the "
        "next parse.\n\n" + "\n".join(f"    {line}" for line in lines),
    ) as dag:
        InvalidExperimentOperator(task_id=INVALID_TASK_ID, message=text)
    return dag


def finished_yamls(dags_folder: Path, limit: int) -> list[Path]:
    """The configs of the ``limit`` most recently created finished experiments (highest IDs first)."""
    folder = dags_folder / EXPERIMENTS_SUBDIR / FINISHED_SUBDIR
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    found = []
    for name in names:
        stem, dot, suffix = name.partition(".")
        if dot and suffix == "yaml" and (match := _MASTER_FILE.match(stem)):
            found.append((int(match.group(1)), folder / name))
    found.sort(reverse=True)
    return [path for _, path in found[:limit]]


def finished_dag(file: ExperimentFile, text: str):  # type: ignore[no-untyped-def]
    """The DAG a finished experiment keeps in Airflow's DAG list: its id, name, owner and access,
    tagged ``finished``, and one task that fails, saying so, when someone triggers it. Its run keeps
    the tasks it ran (Airflow keeps each run's DAG version). Built from the config without checking
    it again: a fraction of an experiment's full DAG (benchmarks/dag_parse.py)."""
    from airflow.sdk import DAG

    from det_airflow.operators.invalid import FinishedExperimentOperator

    loaded = read_yaml(text, str(file.path))
    raw: dict[str, Any] = loaded if isinstance(loaded, dict) else {}
    name = plain_text(raw["name"]) if isinstance(raw.get("name"), str) else f"experiment {file.experiment_id}"
    labels = raw.get("labels")
    task_type = _task_type(labels if isinstance(labels, list) else [])
    searcher = raw.get("searcher")
    searcher_name = searcher.get("name") if isinstance(searcher, dict) else None
    kind = task_type or (plain_text(searcher_name) if isinstance(searcher_name, str) else None)
    what = task_type or "experiment"
    submission = read_submission(text)
    message = (
        f"{what} {file.experiment_id} has finished: its runs, trials, logs and checkpoints are kept "
        f"(`det experiment describe {file.experiment_id}`); `det experiment create` starts a new one"
    )
    with DAG(
        dag_id=file.dag_id,
        dag_display_name=f"{name} ({what} {file.experiment_id})",
        schedule=None,
        start_date=run_due(submission.submitted) if submission else _START,
        catchup=False,
        is_paused_upon_creation=False,
        max_active_runs=1,
        tags=["det", "finished", *([kind] if kind else [])],
        description=f"{name} (finished)"[:200],
        doc_md=f"Finished {what} **{markdown_text(name)}** ({file.experiment_id}): "
        f"[open its page]({experiment_page(file.experiment_id or 0)}) for trials, curves and logs.",
        default_args={"owner": plain_text(submission.owner) if submission else "det"},
        access_control=dag_access_control(file, submission),
    ) as dag:
        FinishedExperimentOperator(task_id=FINISHED_TASK_ID, message=message)
    return dag


def _finished_limit() -> int:
    try:
        return settings.load().finished_experiment_dags
    except DetError as exc:  # a bad setting must not take every experiment DAG down
        import logging

        logging.getLogger(__name__).warning("%s; listing %s", exc, settings.FINISHED_EXPERIMENT_DAGS)
        return settings.FINISHED_EXPERIMENT_DAGS


def run_due(submitted: datetime) -> datetime:
    """When the scheduler may create the run of an experiment submitted at `submitted`: the second
    before the submission's.

    The scheduler creates a scheduled run once ``next_dagrun_create_after <= now()`` in the
    database. SQLite's now() is text to the whole second, compared as text with a stored time that
    has microseconds: a run due within the current second would wait for the next second to
    begin, up to a second in which the scheduler loops without starting it. A whole second earlier
    is due at once on every database.
    """
    return submitted.replace(microsecond=0) - timedelta(seconds=1)


def build_submitted_dag(dags_folder: Path, experiment_id: int, source: Path | None = None):  # type: ignore[no-untyped-def]
    """The DAG of the master-written experiment_file() (read from ``source``, its staged copy, when
    given), as a parse of the factory builds it.

    Raises DetError when the file is gone or cannot be built (a parse would give it an invalid DAG:
    broken_dag())."""
    file = dag_id_for_file(experiment_file(dags_folder, experiment_id), dags_folder)
    path = source or file.path
    try:
        text = read_config_text(path)
    except OSError as exc:
        raise DetError(f"{path}: {exc.strerror or exc}") from None
    cfg = load_experiment(path, settings.airflow_defaults(), text)
    if cfg is None:
        raise DetError(f"{path}: not an experiment config")
    return build_dag(file, cfg, read_submission(text))


def build_dags(dags_folder: Path, *, only_dag_id: str | None = None) -> dict[str, object]:
    """Every experiment DAG under `dags_folder` by DAG id; with `only_dag_id`, just that one.

    A YAML that cannot be built gets its own invalid DAG (broken_dag()), and every other YAML its
    experiment: each is built apart from the others."""
    defaults = settings.airflow_defaults()
    dags: dict[str, tuple[object, Path]] = {}
    seen: dict[str, Path] = {}
    for path in experiment_yamls(dags_folder):
        file = dag_id_for_file(path, dags_folder)
        # A second file of the same DAG id is shown under an id of its own; the first keeps it.
        duplicate_id = f"{file.dag_id}__{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
        if only_dag_id is not None and not (
            only_dag_id == file.dag_id or only_dag_id.startswith(f"{file.dag_id}__")
        ):
            continue
        dag_id = file.dag_id
        try:
            text = read_config_text(path)
            cfg = load_experiment(path, defaults, text)
            if cfg is None:
                continue
            if file.dag_id in seen:
                dag_id = duplicate_id
                raise DetError(
                    f"{path}: DAG id '{file.dag_id}' is already used by {seen[file.dag_id]}; rename one file"
                )
            seen[file.dag_id] = path
            if file.experiment_id is None:
                check_runner_policy(path, cfg)
            submission = read_submission(text) if file.experiment_id is not None else None
            dag = build_dag(file, cfg, submission)
        except DetError as exc:
            dag = broken_dag(dag_id, path, str(exc))
        except Exception as exc:  # noqa: BLE001 - one experiment must never take the other DAGs down
            why = f"{path}: cannot build the experiment DAG: {type(exc).__name__}: {exc}"
            dag = broken_dag(dag_id, path, why)
        if only_dag_id is None or dag_id == only_dag_id:
            dags[dag_id] = (dag, path)
    # Finished experiments keep a light DAG, listed in Airflow, the most recent ones first.
    if only_dag_id is None or only_dag_id.startswith("det_exp_"):
        for path in finished_yamls(dags_folder, _finished_limit()):
            file = dag_id_for_file(path, dags_folder)
            if file.dag_id in seen or (only_dag_id is not None and file.dag_id != only_dag_id):
                continue
            try:
                dag = finished_dag(file, read_config_text(path))
            except Exception as exc:  # noqa: BLE001 - one experiment must never take the other DAGs down
                dag = broken_dag(
                    file.dag_id, path, f"{path}: cannot build the finished experiment's DAG: {exc}"
                )
            dags[file.dag_id] = (dag, path)
    # A file removed while this parse ran (`det e delete`, a user's `rm`) must not have its DAG
    # registered again by the parse's result: Airflow drops a reparse asked for meanwhile, so the
    # DAG would stay listed until the file's next parse.
    return {dag_id: dag for dag_id, (dag, path) in dags.items() if os.path.lexists(path)}
