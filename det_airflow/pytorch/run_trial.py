"""``python3 -m det_airflow.pytorch.run_trial module:Class``: train a PyTorchTrial of the working folder.

What a legacy ``entrypoint: model_def:MyTrial`` runs in each worker (the torch_distributed launcher
starts it): ``Trainer(MyTrial(context), context).fit()`` with the experiment config's defaults.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from det_airflow.errors import DetError


def load_trial_class(spec: str) -> type:
    """The PyTorchTrial subclass named by ``module:Class``, imported from the working folder."""
    from det_airflow.pytorch import PyTorchTrial

    module_name, sep, class_name = spec.partition(":")
    if not sep or not module_name or not class_name:
        raise DetError(f"expected a trial as module:Class (e.g. model_def:MyTrial), got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise  # the trial's module exists but imports something missing: show the real error
        raise DetError(f"trial module {module_name!r} not found in {os.getcwd()}") from None
    trial_class = getattr(module, class_name, None)
    if trial_class is None:
        raise DetError(f"module {module_name!r} has no class {class_name!r}")
    if not (isinstance(trial_class, type) and issubclass(trial_class, PyTorchTrial)):
        raise DetError(f"{spec} is not a det.pytorch.PyTorchTrial subclass")
    return trial_class


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m det_airflow.pytorch.run_trial", description=__doc__)
    parser.add_argument("trial", help="the PyTorchTrial to train, as module:Class")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(name)s: %(message)s")
    from det_airflow import pytorch

    try:
        trial_class = load_trial_class(args.trial)
        with pytorch.init() as context:
            trial = trial_class(context)
            pytorch.Trainer(trial, context).fit()
    except DetError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
