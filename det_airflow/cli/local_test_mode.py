"""``det experiment create --local --test-mode``: one compressed trial on this machine, no master.

The same path a trial takes on a cluster (pack the context, unpack it in a work folder, build the
trial's environment, run the entrypoint), with the Core API writing to a local store. Afterwards
it reports what the trial did: its exit code, and the training and validation reports and
checkpoints it left. As in Determined, a program that reports nothing passes (the first steps of
Determined's Core API tutorial report no metrics); it fails when the entrypoint fails, exits early,
or validates without the searcher's metric where the search needs it (adaptive search).

The test leaves det-airflow's own environment alone: a context's ``startup-hook.sh`` and the
trial run in a throwaway virtual environment over det-airflow's, so what the hook installs lands
there and goes with the run. SIGINT and SIGTERM to ``det`` reach the trial's whole process group
(its own session), which is killed after a grace period; ``det`` then exits 130 or 143.
"""

from __future__ import annotations

import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
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
# How long the trial's processes have, after det forwards SIGINT or SIGTERM, before SIGKILL.
STOP_GRACE_SECONDS = 10.0


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

    method = make_search_method(cfg)
    first = next((a for a in method.initial_trials() if isinstance(a, Create)), None)
    if first is None:
        raise DetError("the searcher creates no trial for this configuration: nothing to test")

    from det_airflow.trial_process import (
        STARTUP_HOOK,
        TrialSpec,
        entrypoint_argv,
        make_overlay_venv,
        make_private_tmpdir,
        prepare_workdir,
        remove_private_tmpdir,
        run_trial_process,
        trial_environment,
        write_trial_files,
    )

    root = Path(tempfile.mkdtemp(prefix="det-local-test-"))
    tmpdir: Path | None = None
    keep = False  # kept only for a run that failed its checks, for a look at the work folder and store
    try:
        # TMPDIR apart from the work folder: short enough for the AF_UNIX sockets programs make in it.
        tmpdir = make_private_tmpdir()
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
        python_bin = None
        if (workdir / STARTUP_HOOK).is_file():
            print(
                f"{STARTUP_HOOK} runs in a throwaway virtual environment over det-airflow's: "
                "what it installs is gone after the test",
                flush=True,
            )
            python_bin = make_overlay_venv(root / "venv")
        # The same scrubbed environment as on a cluster, so a trial that leans on this shell's
        # variables fails here rather than there.
        env = trial_environment(
            spec, local_store=store, test_mode=True, workdir=workdir, python_bin=python_bin, tmpdir=tmpdir
        )
        from det_airflow.compat import determined_notice

        print(determined_notice(), flush=True)
        print(f"Running trial {LOCAL_TRIAL_ID} in test mode with hyperparameters {first.hparams}", flush=True)
        with _forwarded_signals() as stop:
            exit_code = run_trial_process(
                workdir,
                entrypoint_argv(cfg.entrypoint),
                env,
                on_output=_print_output,
                stop=stop.requested,
                stop_signal=stop.signal,
                kill_grace=STOP_GRACE_SECONDS,
            )
        if stop.received is not None:
            print(
                f"Error: det received {stop.received.name}: the trial and every process it started "
                "were stopped",
                file=sys.stderr,
            )
            return 128 + stop.received.value
        needed_by = None
        if method.needs_metric:
            needed_by = (
                f"the {cfg.searcher.name} searcher"
                if method.decides_on_metric
                else f"the {cfg.searcher.sampler} sampler"
            )
        checks = _check_store(store, exit_code, cfg.searcher.metric, needed_by=needed_by)
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
        if tmpdir is not None:
            remove_private_tmpdir(tmpdir)
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


class _Stop:
    """The first SIGINT or SIGTERM ``det`` received while the trial ran."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        self.received: signal.Signals | None = None

    def handle(self, signum: int, _frame: object) -> None:
        if self.received is None:
            self.received = signal.Signals(signum)
        self.requested.set()

    def signal(self) -> signal.Signals:
        return self.received or signal.SIGTERM


@contextmanager
def _forwarded_signals() -> Iterator[_Stop]:
    """While the trial runs, SIGINT and SIGTERM stop it (its process group gets the same signal)
    instead of ending ``det`` and leaving the trial's processes behind."""
    stop = _Stop()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous = {sig: signal.signal(sig, stop.handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _print_output(line: str, stream: str) -> None:
    out = sys.stderr if stream == "stderr" else sys.stdout
    out.write(line + "\n")
    out.flush()


def _check_store(store: Path, exit_code: int, searcher_metric: str, *, needed_by: str | None) -> list[_Check]:
    """The checks of a finished run; ``needed_by`` names what needs the searcher's metric in every
    validation (None: nothing does, a validation without it is only shown)."""
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
            # As in Determined, only a search that decides on the metric needs it in every validation.
            len(with_metric) == len(validation) if validation and needed_by else None,
            f"the searcher's metric '{searcher_metric}' (searcher.metric in the config) is missing "
            f"from {len(validation) - len(with_metric)} of {_count(len(validation), 'validation report')}; "
            f"{needed_by} needs it in every one",
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
