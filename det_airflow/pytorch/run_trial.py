"""``python3 -m det_airflow.pytorch.run_trial module:Class``: train a PyTorchTrial, DeepSpeedTrial or
TFKerasTrial of the working folder.

What a legacy ``entrypoint: model_def:MyTrial`` runs in each worker (the torch_distributed or
deepspeed launcher starts it): ``Trainer(MyTrial(context), context).fit()`` with the experiment
config's defaults, the DeepSpeed Trainer for a DeepSpeedTrial, Keras's ``fit`` for a TFKerasTrial.
"""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import sys

from det_airflow.errors import DetError
from det_airflow.legacy_trial import import_trial_class

# The trial classes a legacy entrypoint may name: where each is defined, and its name. A trial class
# subclasses one, so its module is loaded once the trial's module is: the check imports none of the
# frameworks itself. (This runner lives in det_airflow.pytorch, whose package imports torch: a Keras
# trial started through it needs torch installed; `det_airflow.keras.run_trial` does not.)
TRIAL_BASES = (
    ("det_airflow.pytorch.deepspeed._trial", "DeepSpeedTrial"),
    ("det_airflow.pytorch._trial", "PyTorchTrial"),
    ("det_airflow.keras._trial", "TFKerasTrial"),
)
_NAMES = "det.pytorch.PyTorchTrial, det.pytorch.deepspeed.DeepSpeedTrial or det.keras.TFKerasTrial"


def trial_kind(trial_class: object) -> str | None:
    """Which of TRIAL_BASES the class subclasses (its name), or None."""
    if not isinstance(trial_class, type):
        return None
    for module_name, base_name in TRIAL_BASES:
        base = getattr(sys.modules.get(module_name), base_name, None)
        if isinstance(base, type) and issubclass(trial_class, base):
            return base_name
    return None


def load_trial_class(spec: str) -> type:
    """The trial class named by ``module:Class``, imported from the working folder."""
    trial_class = import_trial_class(spec)
    if trial_kind(trial_class) is None:
        raise DetError(f"{spec} is not a {_NAMES} subclass")
    assert isinstance(trial_class, type)
    return trial_class


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m det_airflow.pytorch.run_trial", description=__doc__)
    parser.add_argument("trial", help="the trial class to train, as module:Class")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(name)s: %(message)s")
    try:
        trial_class = load_trial_class(args.trial)
        kind = trial_kind(trial_class)
        if kind == "TFKerasTrial":
            from det_airflow.keras.run_trial import run

            return run(trial_class)
        if kind == "DeepSpeedTrial":
            _run_deepspeed(trial_class)
        else:
            from det_airflow import pytorch

            with pytorch.init() as context:
                pytorch.Trainer(trial_class(context), context).fit()
    except DetError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


def _run_deepspeed(trial_class: type) -> None:
    from det_airflow.pytorch import deepspeed as det_ds

    with det_ds.init() as context:
        try:
            trial = trial_class(context)
        except AssertionError as exc:
            # DeepSpeed checks the config it is given with asserts: a config mistake, not a bug.
            if not _raised_by_deepspeed(exc):
                raise
            raise DetError(f"DeepSpeed rejected the trial's DeepSpeed config: {exc}") from None
        det_ds.Trainer(trial, context).fit()


def _raised_by_deepspeed(exc: BaseException) -> bool:
    import deepspeed

    package = os.path.dirname(deepspeed.__file__) + os.sep
    tb = exc.__traceback__
    last = None
    while tb is not None:
        last = tb.tb_frame.f_code.co_filename
        tb = tb.tb_next
    return last is not None and last.startswith(package)


def exit_without_finalizing(code: int) -> None:
    """End the process with ``code`` once the trial has returned: exit handlers run and output is
    flushed, but the interpreter is not torn down.

    Gloo's worker threads outlive ``destroy_process_group()`` while anything still refers to a
    process group (DeepSpeed's engine and its module globals do). A thread that frees a finished
    collective's tensors after the interpreter has begun to finalize needs the GIL, is ended by
    Python inside a C++ destructor, and aborts the whole process: exit 134 after a clean run, in
    about one two-worker DeepSpeed run in ten. Everything the trial wrote was closed by the
    context's exit, so nothing is left for finalization to do.
    """
    atexit._run_exitfuncs()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":
    exit_without_finalizing(main())
