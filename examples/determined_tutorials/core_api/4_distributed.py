"""Step 4: several workers (one per slot, started by the torch_distributed launcher).

Each worker fits the weight on its own share of the data; the chief averages their gradients with
an allgather and reports.
"""

import logging

import determined as det

STEPS = 50


def main(core_context: det.core.Context) -> None:
    dist = core_context.distributed
    if dist.rank == 0:
        logging.info(f"training with {dist.size} workers")
    weight, rate = 0.0, 0.1
    for step in range(1, STEPS + 1):
        x = (step + dist.rank) % 5 + 1
        grads = dist.allgather(2 * (weight * x - 3 * x) * x / 25)
        weight -= rate * sum(grads) / len(grads)
        if step % 10 == 0 and dist.rank == 0:
            core_context.train.report_validation_metrics(
                steps_completed=step, metrics={"error": abs(weight - 3), "workers": dist.size}
            )
        if step % 10 == 0 and core_context.preempt.should_preempt():
            return
    logging.info(f"worker {dist.rank} of {dist.size} done: weight {weight:.4f}")


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    distributed = det.core.DistributedContext.from_torch_distributed()
    with det.core.init(distributed=distributed) as core_context:
        main(core_context)
