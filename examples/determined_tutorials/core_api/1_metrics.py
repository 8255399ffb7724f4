"""Step 1: report training and validation metrics through the Core API."""

import logging

import determined as det

STEPS = 50


def main(core_context: det.core.Context) -> None:
    weight, rate = 0.0, 0.1
    for step in range(1, STEPS + 1):
        x = step % 5 + 1
        loss = (weight * x - 3 * x) ** 2 / 25
        weight -= rate * 2 * (weight * x - 3 * x) * x / 25
        if step % 10 == 0:
            core_context.train.report_training_metrics(steps_completed=step, metrics={"loss": loss})
            error = abs(weight - 3)
            core_context.train.report_validation_metrics(steps_completed=step, metrics={"error": error})
            logging.info(f"step {step}: error {error:.4f}")


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    with det.core.init() as core_context:
        main(core_context)
