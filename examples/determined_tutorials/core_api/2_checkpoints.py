"""Step 2: checkpoints, resuming from the latest one, and stopping when asked to (pause, preemption)."""

import json
import logging
import pathlib

import determined as det

STEPS = 50


def load_state(core_context: det.core.Context, checkpoint: str | None) -> tuple[int, float]:
    if checkpoint is None:
        return 0, 0.0
    with core_context.checkpoint.restore_path(checkpoint) as path:
        state = json.loads((pathlib.Path(path) / "state.json").read_text())
    return state["step"], state["weight"]


def main(core_context: det.core.Context, latest_checkpoint: str | None) -> None:
    start, weight = load_state(core_context, latest_checkpoint)
    rate = 0.1
    for step in range(start + 1, STEPS + 1):
        x = step % 5 + 1
        loss = (weight * x - 3 * x) ** 2 / 25
        weight -= rate * 2 * (weight * x - 3 * x) * x / 25
        if step % 10 == 0:
            core_context.train.report_training_metrics(steps_completed=step, metrics={"loss": loss})
            core_context.train.report_validation_metrics(
                steps_completed=step, metrics={"error": abs(weight - 3)}
            )
            with core_context.checkpoint.store_path({"steps_completed": step}) as (path, storage_id):
                (path / "state.json").write_text(json.dumps({"step": step, "weight": weight}))
            if core_context.preempt.should_preempt():
                logging.info(f"stopping at step {step}; a later run resumes from {storage_id}")
                return


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    info = det.get_cluster_info()
    latest = info.latest_checkpoint if info is not None else None
    with det.core.init() as core_context:
        main(core_context, latest)
