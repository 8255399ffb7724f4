"""An unmanaged run (Determined's ``core_v2``): plain ``python3 core_v2_unmanaged.py``, no experiment
config; with ``DET_MASTER`` and a login (``det user login``, or ``DET_USER``/``DET_PASS``) it is an
unmanaged experiment in that master, without ``DET_MASTER`` it writes to the local store."""

import logging

import determined as det
from determined.experimental import core_v2


def main() -> None:
    core_v2.init(
        defaults=core_v2.DefaultConfig(name="unmanaged-weight-fit", hparams={"learning_rate": 0.1}),
    )
    weight, rate = 0.0, 0.1
    for step in range(1, 21):
        weight -= rate * 2 * (weight - 3)
        core_v2.train.report_training_metrics(steps_completed=step, metrics={"error": abs(weight - 3)})
    core_v2.close()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    main()
