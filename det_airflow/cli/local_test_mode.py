"""``det experiment create --local --test-mode``: one compressed trial on this machine, no master.

The same path a trial takes on a cluster (pack the context, unpack it in a work folder, build the
trial's environment, run the entrypoint), with the Core API writing to a local store; afterwards
the store must hold a training report, a validation report and a checkpoint.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from det_airflow.cli import render
from det_airflow.errors import DetError

if TYPE_CHECKING:
    from det_airflow.config import ExperimentConfig

# The trial a local test runs stands for trial 1 of an experiment that was never created.
LOCAL_EXPERIMENT_ID = 0
LOCAL_TRIAL_ID = 1


@dataclass(frozen=True)
class _Check:
    name: str
    found: str
    ok: bool
    failure: str  # what to print when not ok


def run_local_test(cfg: ExperimentConfig, context: str | None, *, includes: Iterable[str] = ()) -> int:
    """Runs the first trial the search method creates, in test mode; returns the exit status."""
    from det_airflow.config import config_to_dict
    from det_airflow.searcher import Create, make_search_method

    data = b""
    if context:
        from det_airflow.context_archive import format_size, pack_context

        # Packed even though nothing is sent, so the size limit and .detignore apply as for real.
        packed = pack_context(context, includes=includes)
        print(
            f"Preparing files ({packed.directory.absolute()}) for a local test... "
            f"{format_size(packed.size)} and {packed.file_count} files",
            flush=True,
        )
        data = packed.data

    first = next((a for a in make_search_method(cfg).initial_trials() if isinstance(a, Create)), None)
    if first is None:
        raise DetError("the searcher creates no trial for this configuration: nothing to test")

    from det_airflow.trial_process import (
        TrialSpec,
        entrypoint_argv,
        prepare_workdir,
        run_trial_process,
        trial_environment,
    )

    root = Path(tempfile.mkdtemp(prefix="det-local-test-"))
    keep = False  # kept only for a run that failed its checks, for a look at the work folder and store
    try:
        workdir = prepare_workdir(data, root / "work")
        store = root / "store"
        spec = TrialSpec(
            trial_id=LOCAL_TRIAL_ID,
            experiment_id=LOCAL_EXPERIMENT_ID,
            request_id=str(first.request_id),
            trial_seed=first.trial_seed,
            hparams=first.hparams,
            config=config_to_dict(cfg),
        )
        env = trial_environment(spec, local_store=store, test_mode=True, workdir=workdir)
        print(f"Running trial {LOCAL_TRIAL_ID} in test mode with hyperparameters {first.hparams}", flush=True)
        exit_code = run_trial_process(workdir, entrypoint_argv(cfg.entrypoint), env, on_output=_print_output)
        checks = _check_store(store, exit_code, cfg.searcher.metric)
        print()
        render.print_table(
            ("Check", "Found", "Result"), [(c.name, c.found, "ok" if c.ok else "FAILED") for c in checks]
        )
        failures = [c.failure for c in checks if not c.ok]
        for failure in failures:
            print(f"Error: {failure}", file=sys.stderr)
        if failures:
            keep = True
            print(f"The work folder and local store are kept in {root}", file=sys.stderr)
            return 1
        print("Local test mode succeeded: the experiment is ready to be created on a master.")
        return 0
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


def _print_output(line: str, stream: str) -> None:
    out = sys.stderr if stream == "stderr" else sys.stdout
    out.write(line + "\n")
    out.flush()


def _check_store(store: Path, exit_code: int, searcher_metric: str) -> list[_Check]:
    from det_airflow.core._local import CHECKPOINTS_FILE, EVENTS_FILE, METRICS_FILE, read_jsonl

    metrics = list(read_jsonl(store / METRICS_FILE))
    training = [m for m in metrics if m.get("group") == "training"]
    validation = [m for m in metrics if m.get("group") == "validation"]
    checkpoints: dict[str, str] = {}
    for record in read_jsonl(store / CHECKPOINTS_FILE):  # the last record of a uuid wins
        if record.get("uuid"):
            checkpoints[str(record["uuid"])] = str(record.get("state") or "COMPLETED")
    saved = sum(state == "COMPLETED" for state in checkpoints.values())
    early_exits = [
        str(e.get("reason")) for e in read_jsonl(store / EVENTS_FILE) if e.get("event") == "early_exit"
    ]
    with_metric = [m for m in validation if searcher_metric in (m.get("metrics") or {})]

    checks = [
        _Check(
            "Entrypoint exit code",
            str(exit_code),
            exit_code == 0,
            _exit_failure(exit_code),
        ),
        _Check(
            "Training metrics",
            _count(len(training), "report"),
            bool(training),
            "no training metrics were reported (core_context.train.report_training_metrics)",
        ),
        _Check(
            "Validation metrics",
            _count(len(validation), "report"),
            bool(validation),
            "no validation metrics were reported (core_context.train.report_validation_metrics)",
        ),
        _Check(
            f"Searcher metric '{searcher_metric}'",
            _count(len(with_metric), "report"),
            bool(with_metric) or not validation,  # no validation at all is reported once, above
            f"the validation metrics do not include the searcher's metric '{searcher_metric}' "
            "(searcher.metric in the config)",
        ),
        _Check(
            "Checkpoints",
            str(saved),
            saved > 0,
            "no checkpoint was saved (core_context.checkpoint.store_path)",
        ),
    ]
    if early_exits:
        checks.append(
            _Check(
                "Early exit",
                ", ".join(early_exits),
                False,
                f"the trial exited early: {', '.join(early_exits)}",
            )
        )
    return checks


def _exit_failure(exit_code: int) -> str:
    if exit_code < 0:
        return f"the entrypoint was killed by signal {-exit_code}"
    return f"the entrypoint exited with code {exit_code}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
