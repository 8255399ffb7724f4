"""Trains DigitsTrial with the Trainer: ``python3 train.py`` here, or as a trial's entrypoint."""

import logging

import determined as det
from determined import pytorch
from model_def import DigitsTrial

HPARAMS = {"hidden": 64, "learning_rate": 0.1, "global_batch_size": 32}

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    # Off-cluster the hparams above are used; inside a trial, the trial's.
    with pytorch.init(hparams=HPARAMS) as train_context:
        trial = DigitsTrial(train_context)
        trainer = pytorch.Trainer(trial, train_context)
        trainer.fit(
            checkpoint_period=pytorch.Epoch(1),
            validation_period=pytorch.Epoch(1),
            max_length=pytorch.Epoch(2),
        )
