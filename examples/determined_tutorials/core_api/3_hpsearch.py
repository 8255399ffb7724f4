"""Step 3: hyperparameters chosen by the searcher; the searcher's metric is reported at validations."""

import json
import logging
import pathlib

import determined as det

DEFAULT_HPARAMS = {"learning_rate": 0.1, "steps": 50}


def main(core_context: det.core.Context, hparams: dict, latest_checkpoint: str | None) -> None:
    start, weight = 0, 0.0
    if latest_checkpoint is not None:
        with core_context.checkpoint.restore_path(latest_checkpoint) as path:
            state = json.loads((pathlib.Path(path) / "state.json").read_text())
        start, weight = state["step"], state["weight"]
    rate, steps = float(hparams["learning_rate"]), int(hparams["steps"])
    for step in range(start + 1, steps + 1):
        x = step % 5 + 1
        loss = (weight * x - 3 * x) ** 2 / 25
        weight -= rate * 2 * (weight * x - 3 * x) * x / 25
        if step % 10 == 0:
            core_context.train.report_training_metrics(steps_completed=step, metrics={"loss": loss})
            core_context.train.report_validation_metrics(
                steps_completed=step, metrics={"error": abs(weight - 3), "batches": step}
            )
            with core_context.checkpoint.store_path({"steps_completed": step}) as (path, _):
                (path / "state.json").write_text(json.dumps({"step": step, "weight": weight}))
            if core_context.preempt.should_preempt():
                return


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    info = det.get_cluster_info()
    hparams = info.trial.hparams if info is not None else DEFAULT_HPARAMS
    latest = info.latest_checkpoint if info is not None else None
    with det.core.init() as core_context:
        main(core_context, hparams, latest)
