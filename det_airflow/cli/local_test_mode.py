"""``det experiment create --local --test-mode``: one compressed trial on this machine, no master.

The same path a trial takes on a cluster (pack the context, unpack it in a work folder, build the
trial's environment, run the entrypoint), with the Core API writing to a local store. Afterwards
it reports what the trial did: its exit code, and the training and validation reports and
checkpoints it left. As in Determined, a program that reports nothing passes (the first steps of
Determined's Core API tutorial report no metrics); it fails when the entrypoint fails, exits early,
or validates without the searcher's metric.
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
    ok: bool | None  # None: what the trial did, shown but never a failure
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
        write_trial_files,
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
        write_trial_files(spec, workdir)
        # The same scrubbed environment as on a cluster, so a trial that leans on this shell's
        # variables fails here rather than there.
        env = trial_environment(spec, local_store=store, test_mode=True, workdir=workdir)
        from det_airflow.compat import determined_notice

        print(determined_notice(), flush=True)
        print(f"Running trial {LOCAL_TRIAL_ID} in test mode with hyperparameters {first.hparams}", flush=True)
        exit_code = run_trial_process(workdir, entrypoint_argv(cfg.entrypoint), env, on_output=_print_output)
        checks = _check_store(store, exit_code, cfg.searcher.metric)
        print()
        render.print_table(("Check", "Found", "Result"), [(c.name, c.found, _result(c.ok)) for c in checks])
        failures = [c.failure for c in checks if c.ok is False]
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
        _Check("Training metrics", _count(len(training), "report"), None, ""),
        _Check("Validation metrics", _count(len(validation), "report"), None, ""),
        _Check(
            f"Searcher metric '{searcher_metric}'",
            _count(len(with_metric), "report"),
            # Without validations there is nothing to check; with them, the searcher needs its metric.
            bool(with_metric) if validation else None,
            f"the validation metrics do not include the searcher's metric '{searcher_metric}' "
            "(searcher.metric in the config)",
        ),
        _Check("Checkpoints", str(saved), None, ""),
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


def _result(ok: bool | None) -> str:
    if ok is None:
        return "-"
    return "ok" if ok else "FAILED"


def _exit_failure(exit_code: int) -> str:
    if exit_code < 0:
        return f"the entrypoint was killed by signal {-exit_code}"
    return f"the entrypoint exited with code {exit_code}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
