"""A tiny trial: its validation loss falls with training and depends on the learning rate, so ASHA
has something to choose between. Replace it with your own training code."""

import math

import det_airflow as det

with det.core.init() as core_context:
    lr = core_context.info.trial.hparams["learning_rate"]
    steps = 0
    for op in core_context.searcher.operations():
        while steps < op.length:
            steps += 1
            loss = abs(math.log10(lr) + 2) + 1.0 / steps
            core_context.train.report_training_metrics(steps, {"loss": loss})
        core_context.train.report_validation_metrics(steps, {"validation_loss": loss})
        with core_context.checkpoint.store_path({"steps_completed": steps}) as (path, _):
            (path / "model.txt").write_text(f"lr={lr} steps={steps}\n")
        op.report_progress(steps)
        op.report_completed(loss)
