"""Train a small CNN on 8x8 digits with det-airflow's Core API.

On a trial the hyperparameters, the searcher's length and the latest checkpoint come from the
cluster; run off-cluster (`python3 train.py`) it uses the defaults below and the length of
const.yaml, and writes metrics and checkpoints to ./.det_local (or $DET_LOCAL_STORE).

Every `scheduling_unit` batches it reports training metrics, validates, saves a checkpoint and asks
whether to stop (pause, cancel, preemption); asked to, it exits 0 and resumes later from that
checkpoint.

Test knob: if FAIL_ONCE_MARKER names a file that does not exist, the script creates it and exits 1
right after its first checkpoint (the retry then resumes from that checkpoint and finishes).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

import torch
import yaml
from model import build_model, load_data
from torch import nn

import det_airflow as det

HERE = Path(__file__).resolve().parent
DEFAULT_HPARAMS = {
    "learning_rate": 1.0,
    "n_filters1": 32,
    "n_filters2": 64,
    "dropout1": 0.25,
    "dropout2": 0.5,
    "global_batch_size": 32,
}
FAIL_ONCE_MARKER = "FAIL_ONCE_MARKER"


def batch_indices(batch: int, batch_size: int, n: int, seed: int) -> torch.Tensor:
    """The samples of global batch number `batch`: each epoch is a fresh shuffle fixed by the seed,
    so a resumed trial sees exactly the batches it would have seen."""
    per_epoch = n // batch_size
    epoch, index = divmod(batch, per_epoch)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 100_003 + epoch))
    return order[index * batch_size : (index + 1) * batch_size]


def evaluate(model: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    model.eval()
    with torch.no_grad():
        logits = model(images)
        loss = nn.functional.cross_entropy(logits, labels).item()
        accuracy = (logits.argmax(dim=1) == labels).float().mean().item()
    model.train()
    return {"validation_loss": loss, "accuracy": accuracy}


def save(
    core_context: det.core.Context, model: nn.Module, optimizer: torch.optim.Optimizer, batches: int
) -> str:
    with core_context.checkpoint.store_path({"steps_completed": batches}) as (path, storage_id):
        torch.save(
            {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "batches": batches},
            path / "state.pt",
        )
    return storage_id


def main(
    core_context: det.core.Context,
    hparams: dict[str, Any],
    seed: int,
    latest_checkpoint: str | None,
    unit: int,
) -> None:
    if int(hparams["n_filters1"]) < 1 or int(hparams["n_filters2"]) < 1:
        raise det.InvalidHP(
            f"n_filters1 and n_filters2 must be >= 1, got {hparams['n_filters1']}, {hparams['n_filters2']}"
        )
    torch.manual_seed(seed)
    train_x, train_y, val_x, val_y = load_data()
    model = build_model(hparams)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=float(hparams["learning_rate"]))
    batch_size = int(hparams["global_batch_size"])

    batches = 0
    if latest_checkpoint:
        with core_context.checkpoint.restore_path(latest_checkpoint) as path:
            state = torch.load(path / "state.pt")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        batches = int(state["batches"])
        logging.info("resumed from checkpoint %s at batch %d", latest_checkpoint, batches)

    for op in core_context.searcher.operations():
        losses: list[float] = []
        metrics: dict[str, float] | None = None
        while batches < op.length:
            idx = batch_indices(batches, batch_size, len(train_x), seed)
            loss = nn.functional.cross_entropy(model(train_x[idx]), train_y[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            batches += 1
            losses.append(loss.item())
            if batches % unit and batches < op.length:
                continue
            # A reporting boundary: report, validate, checkpoint, and maybe stop.
            core_context.train.report_training_metrics(batches, {"loss": sum(losses) / len(losses)})
            losses = []
            metrics = evaluate(model, val_x, val_y)
            # `batches` is what an adaptive searcher with `time_metric: batches` counts.
            core_context.train.report_validation_metrics(batches, {**metrics, "batches": batches})
            save(core_context, model, optimizer, batches)
            op.report_progress(batches)
            logging.info("batch %d: %s", batches, metrics)
            marker = os.environ.get(FAIL_ONCE_MARKER)
            if marker and not Path(marker).exists():
                Path(marker).touch()
                logging.warning("FAIL_ONCE_MARKER: failing once on purpose after the first checkpoint")
                sys.exit(1)
            if core_context.preempt.should_preempt():
                logging.info("asked to stop: exiting, to resume later from the checkpoint")
                return
        if metrics is None:  # resumed at the length already: validate what was restored
            metrics = evaluate(model, val_x, val_y)
        op.report_completed(metrics["validation_loss"])


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s")
    torch.set_num_threads(1)
    info = det.get_cluster_info()
    if info is not None:
        hparams = {**DEFAULT_HPARAMS, **info.trial.hparams}
        seed, latest, config = info.trial.trial_seed, info.latest_checkpoint, None
        unit = int(info.trial.config.get("scheduling_unit") or 100)
    else:
        # Off-cluster: the defaults, and const.yaml for the searcher's length.
        config = yaml.safe_load((HERE / "const.yaml").read_text())
        hparams, seed, latest, unit = DEFAULT_HPARAMS, 0, None, int(config.get("scheduling_unit", 100))
    with det.core.init(config=config) as core_context:
        main(core_context, hparams, seed, latest, unit)
